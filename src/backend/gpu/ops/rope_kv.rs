//! The RoPE/KV-write op of a prefill pass (rope_kv.wgsl; decode does it in the Q/K/V
//! projection's epilogue, [`super::matrix`]); its twin is `cpu::ops::rope` and the cache rows
//! (tests/gpu_kernels.rs).

use super::super::device::GpuContext;
use super::super::kernels::{groups_for, prepare, whole, Bind, Dispatch, Kernels, ShaderSource};
use super::super::params::RopeParams;
use crate::error::Result;

const ROPE_KV: &str = include_str!("../../../../shaders/rope_kv.wgsl");

/// The RoPE/KV-write kernel, writing an f32 or (`kv_f16`) a half-float cache.
pub fn source(kv_f16: bool) -> ShaderSource {
    if kv_f16 {
        ShaderSource::new("rope_kv_kv_f16.wgsl", ROPE_KV, vec!["KV_F16"])
    } else {
        ShaderSource::new("rope_kv.wgsl", ROPE_KV, Vec::new())
    }
}

impl Kernels {
    /// Rotary embedding of the step's queries and keys, and the KV-cache write: from `qkv`
    /// (`[n_tokens, n_heads * head_dim + 2 kv]`) into `q` and rows `pos..` of the caches,
    /// with cos/sin from `table` ([`rope_table`]); `shape` is `[n_heads, n_kv_heads, head_dim]`.
    #[allow(clippy::too_many_arguments)]
    pub fn rope_kv(
        &self,
        ctx: &GpuContext,
        shape: [u32; 3],
        qkv: &wgpu::Buffer,
        q: Bind,
        keys: Bind,
        values: Bind,
        table: &wgpu::Buffer,
        step: &wgpu::Buffer,
    ) -> Result<Dispatch> {
        let [n_heads, n_kv_heads, head_dim] = shape;
        let params = ctx.uniform("rope_kv", &[RopeParams { n_heads, n_kv_heads, head_dim, ..Default::default() }]);
        let width = (n_heads + 2 * n_kv_heads) * head_dim;
        let binds = [
            ("params", whole(&params)),
            ("qkv", whole(qkv)),
            ("q", q),
            ("k_cache", keys),
            ("v_cache", values),
            ("table", whole(table)),
            ("step", whole(step)),
        ];
        Ok(prepare(ctx, &self.rope_kv, &binds, groups_for(width / 2))?.per_token(1, 1))
    }
}

/// cos/sin of every RoPE angle, `[context, head_dim / 2, 2]`, computed in f64.
pub fn rope_table(context: usize, head_dim: usize, base: f32) -> Vec<f32> {
    let mut t = Vec::with_capacity(context * head_dim);
    for pos in 0..context {
        for i in 0..head_dim / 2 {
            let theta = pos as f64 * (base as f64).powf(-2.0 * i as f64 / head_dim as f64);
            t.push(theta.cos() as f32);
            t.push(theta.sin() as f32);
        }
    }
    t
}

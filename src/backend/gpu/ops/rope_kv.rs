//! The RoPE/KV-write op (rope_kv.wgsl): a prefill pass's, and a decode step's where the
//! Q/K/V projection cannot take it as its epilogue (RMSNorm of each head); a decode without
//! head norms does it, biases and all, in the projection's epilogue ([`super::matrix`]). Its twins are
//! `cpu::ops::{add_rows, rmsnorm_heads, rope}` and the cache rows (tests/gpu_kernels.rs).

use super::super::device::GpuContext;
use super::super::kernels::{groups_for, prepare, whole, Bind, Dispatch, Kernels, ShaderSource};
use super::super::params::RopeParams;
use crate::error::{Error, Result};
use crate::model::RopeFrequencies;

const ROPE_KV: &str = include_str!("../../../../shaders/rope_kv.wgsl");

/// One variant of rope_kv.wgsl.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RopeKvKernel {
    /// The cache holds half floats.
    pub kv_f16: bool,
    /// A bias is added to each row element first (Qwen2's Q/K/V biases).
    pub bias: bool,
    /// Each head of q and k is RMS-normed before RoPE (Qwen3).
    pub head_norm: bool,
}

impl RopeKvKernel {
    /// Every variant.
    pub fn all() -> impl Iterator<Item = RopeKvKernel> {
        [false, true].into_iter().flat_map(|kv_f16| {
            [(false, false), (true, false), (false, true), (true, true)].map(|(bias, head_norm)| RopeKvKernel { kv_f16, bias, head_norm })
        })
    }

    /// The variant's source, e.g. `rope_kv_bias_head_norm_kv_f16.wgsl`.
    pub fn source(self) -> ShaderSource {
        let name = format!(
            "rope_kv{}{}{}.wgsl",
            if self.bias { "_bias" } else { "" },
            if self.head_norm { "_head_norm" } else { "" },
            if self.kv_f16 { "_kv_f16" } else { "" }
        );
        let defines = [(self.kv_f16, "KV_F16"), (self.bias, "QKV_BIAS"), (self.head_norm, "HEAD_NORM")];
        ShaderSource::new(name, ROPE_KV, defines.into_iter().filter(|(on, _)| *on).map(|(_, d)| d).collect())
    }
}

/// One RoPE/KV-write dispatch's operands.
pub struct RopeKvOp<'a> {
    /// `[n_heads, n_kv_heads, head_dim]`.
    pub shape: [u32; 3],
    /// The step's projected rows, `[n_tokens, n_heads * head_dim + 2 kv]`.
    pub qkv: &'a wgpu::Buffer,
    /// The rotated queries, `[n_tokens, n_heads * head_dim]`.
    pub q: Bind<'a>,
    /// The layer's K cache.
    pub keys: Bind<'a>,
    /// The layer's V cache.
    pub values: Bind<'a>,
    /// RoPE's cos/sin ([`rope_table`]).
    pub table: &'a wgpu::Buffer,
    /// The stacked Q/K/V bias, `[n_heads * head_dim + 2 kv]`, if the model has one.
    pub bias: Option<&'a wgpu::Buffer>,
    /// The head-norm gains, `[2 * head_dim]` (q's, then k's), and the RMSNorm epsilon.
    pub head_norm: Option<(&'a wgpu::Buffer, f32)>,
}

impl<'a> RopeKvOp<'a> {
    /// Plain RoPE and cache write (no bias, no head norm).
    pub fn new(shape: [u32; 3], qkv: &'a wgpu::Buffer, q: Bind<'a>, keys: Bind<'a>, values: Bind<'a>, table: &'a wgpu::Buffer) -> Self {
        RopeKvOp { shape, qkv, q, keys, values, table, bias: None, head_norm: None }
    }
}

impl Kernels {
    /// Rotary embedding of the step's queries and keys, and the KV-cache write: from `op.qkv`
    /// into `op.q` and rows `pos..` of the caches, each value first given its bias and each
    /// q and k head its RMSNorm where the op has them.
    pub fn rope_kv(&self, ctx: &GpuContext, op: &RopeKvOp, step: &wgpu::Buffer) -> Result<Dispatch> {
        let [n_heads, n_kv_heads, head_dim] = op.shape;
        let variant = RopeKvKernel { kv_f16: self.options.kv_f16, bias: op.bias.is_some(), head_norm: op.head_norm.is_some() };
        let eps = op.head_norm.map_or(0.0, |(_, eps)| eps);
        let params = ctx.uniform("rope_kv", &[RopeParams { n_heads, n_kv_heads, head_dim, eps }]);
        let width = (n_heads + 2 * n_kv_heads) * head_dim;
        let expect = |what: &str, buffer: &wgpu::Buffer, floats: u32| {
            if buffer.size() < u64::from(floats) * 4 {
                return Err(Error::Backend(format!("{what} holds {} bytes, fewer than {floats} floats", buffer.size())));
            }
            Ok(())
        };
        let mut binds = vec![
            ("params", whole(&params)),
            ("qkv", whole(op.qkv)),
            ("q", op.q),
            ("k_cache", op.keys),
            ("v_cache", op.values),
            ("table", whole(op.table)),
            ("step", whole(step)),
        ];
        if let Some(bias) = op.bias {
            expect("the Q/K/V bias", bias, width)?;
            binds.push(("bias", whole(bias)));
        }
        if let Some((gain, _)) = op.head_norm {
            expect("the head-norm gains", gain, 2 * head_dim)?;
            binds.push(("head_gain", whole(gain)));
        }
        let kernel = self.rope_kv_kernel(ctx, variant)?;
        Ok(prepare(ctx, &kernel, &binds, groups_for(width / 2))?.per_token(1, 1))
    }
}

/// cos/sin of every RoPE angle, `[context, head_dim / 2, 2]`, from `freqs` (in f64).
pub fn rope_table(context: usize, freqs: &RopeFrequencies) -> Vec<f32> {
    let mut t = Vec::with_capacity(context * freqs.pairs() * 2);
    for pos in 0..context {
        for i in 0..freqs.pairs() {
            let (sin, cos) = freqs.sin_cos(pos, i);
            t.push(cos as f32);
            t.push(sin as f32);
        }
    }
    t
}

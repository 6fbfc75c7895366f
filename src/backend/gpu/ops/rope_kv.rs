//! The RoPE/KV-write op (rope_kv.wgsl): a prefill pass's, and a decode step's where the
//! Q/K/V projection cannot take it as its epilogue (RMSNorm of all of q and of k, OLMo 2's;
//! biases beside head norms; heads the epilogue does not fit,
//! [`Kernels::head_norm_epilogue_fits`]); every other decode does it, biases and head norms
//! and all, in the projection's epilogue ([`super::matrix`]). Its twins are
//! `cpu::ops::{add_rows, rmsnorm_heads, rope}` and the cache rows (tests/gpu_kernels.rs).

use super::super::device::GpuContext;
use super::super::kernels::{groups_for, prepare, whole, Bind, Dispatch, Kernels, ShaderSource};
use super::super::params::RopeParams;
use crate::error::{Error, Result};
use crate::model::{HeadNormSpan, RopeFrequencies};

const ROPE_KV: &str = include_str!("../../../../shaders/rope_kv.wgsl");

/// One variant of rope_kv.wgsl.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RopeKvKernel {
    /// The cache holds half floats.
    pub kv_f16: bool,
    /// A bias is added to each row element first (Qwen2's Q/K/V biases).
    pub bias: bool,
    /// q and k are RMS-normed before RoPE: each head (Qwen3) or each whole (OLMo 2).
    pub head_norm: Option<HeadNormSpan>,
}

impl RopeKvKernel {
    /// Every variant.
    pub fn all() -> impl Iterator<Item = RopeKvKernel> {
        let norms = [None, Some(HeadNormSpan::Head), Some(HeadNormSpan::Whole)];
        [false, true].into_iter().flat_map(move |kv_f16| {
            [false, true].into_iter().flat_map(move |bias| norms.map(|head_norm| RopeKvKernel { kv_f16, bias, head_norm }))
        })
    }

    /// The variant's source, e.g. `rope_kv_bias_head_norm_kv_f16.wgsl`.
    pub fn source(self) -> ShaderSource {
        let (head, whole) = (self.head_norm == Some(HeadNormSpan::Head), self.head_norm == Some(HeadNormSpan::Whole));
        let name = format!(
            "rope_kv{}{}{}{}.wgsl",
            if self.bias { "_bias" } else { "" },
            if head { "_head_norm" } else { "" },
            if whole { "_whole_norm" } else { "" },
            if self.kv_f16 { "_kv_f16" } else { "" }
        );
        let defines = [(self.kv_f16, "KV_F16"), (self.bias, "QKV_BIAS"), (head, "HEAD_NORM"), (whole, "WHOLE_NORM")];
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
    /// The head-norm gains, q's then k's (`[2 * head_dim]` for each head's norm,
    /// `[n_heads * head_dim + kv]` for the whole projection's), the RMSNorm epsilon and
    /// which of the two.
    pub head_norm: Option<(&'a wgpu::Buffer, f32, HeadNormSpan)>,
    /// Every q, k and v value is clamped to `[-clamp, clamp]` after its bias (OLMo 1.7's
    /// clamp, `Config::clamp_kqv`); 0 for none.
    pub clamp: f32,
    /// Each head's norm (`head_norm`, [`HeadNormSpan::Head`]) comes after RoPE, not before
    /// (Hunyuan's, [`Architecture::norms_heads_after_rope`](crate::model::Architecture::norms_heads_after_rope)).
    pub norm_after_rope: bool,
}

impl<'a> RopeKvOp<'a> {
    /// Plain RoPE and cache write (no bias, no head norm, no clamp).
    pub fn new(shape: [u32; 3], qkv: &'a wgpu::Buffer, q: Bind<'a>, keys: Bind<'a>, values: Bind<'a>, table: &'a wgpu::Buffer) -> Self {
        RopeKvOp { shape, qkv, q, keys, values, table, bias: None, head_norm: None, clamp: 0.0, norm_after_rope: false }
    }
}

impl Kernels {
    /// Rotary embedding of the step's queries and keys, and the KV-cache write: from `op.qkv`
    /// into `op.q` and rows `pos..` of the caches, each value first given its bias and its
    /// clamp, and each q and k head its RMSNorm, where the op has them.
    pub fn rope_kv(&self, ctx: &GpuContext, op: &RopeKvOp, step: &wgpu::Buffer) -> Result<Dispatch> {
        let [n_heads, n_kv_heads, head_dim] = op.shape;
        let span = op.head_norm.map(|(_, _, span)| span);
        let variant = RopeKvKernel { kv_f16: self.options.kv_f16, bias: op.bias.is_some(), head_norm: span };
        let eps = op.head_norm.map_or(0.0, |(_, eps, _)| eps);
        let params = ctx.uniform(
            "rope_kv",
            &[RopeParams {
                n_heads,
                n_kv_heads,
                head_dim,
                eps,
                clamp_kqv: op.clamp,
                norm_after_rope: op.norm_after_rope as u32,
                ..Default::default()
            }],
        );
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
        if let Some((gain, _, span)) = op.head_norm {
            let gains = match span {
                HeadNormSpan::Head => 2 * head_dim,
                HeadNormSpan::Whole => (n_heads + n_kv_heads) * head_dim,
            };
            expect("the head-norm gains", gain, gains)?;
            binds.push(("head_gain", whole(gain)));
        }
        if op.norm_after_rope && span != Some(HeadNormSpan::Head) {
            return Err(Error::Backend("a head norm after RoPE needs each head's norm".into()));
        }
        let kernel = self.rope_kv_kernel(ctx, variant)?;
        // A whole-projection norm takes a workgroup per token (its row's squares summed
        // together), a pair per thread otherwise.
        let groups = if span == Some(HeadNormSpan::Whole) { 1 } else { groups_for(width / 2) };
        Ok(prepare(ctx, &kernel, &binds, groups)?.per_token(1, 1))
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

//! The LayerNorm op (layer_norm.wgsl): a sublayer's or the LM head's input LayerNorm-ed with
//! its gain and bias into a buffer of its own, which the projection after it reads
//! (StableLM's norms; an RMSNorm runs inside that projection instead, matrix.wgsl's NORM).
//! Its twin is `cpu::ops::layer_norm` (tests/gpu_kernels.rs).

use super::super::device::GpuContext;
use super::super::kernels::{cached, pipeline, prepare, whole, Bind, Dispatch, Kernel, Kernels, ShaderSource, WORKGROUP};
use super::super::params::NormParams;
use crate::error::{Error, Result};

const LAYER_NORM: &str = include_str!("../../../../shaders/layer_norm.wgsl");

/// layer_norm.wgsl's source.
pub fn source() -> ShaderSource {
    ShaderSource::new("layer_norm.wgsl", LAYER_NORM, Vec::new())
}

/// A LayerNorm's operands: `out[b] = layer_norm(x[b]) * gain + bias` for the step's tokens
/// `b`, rows of `dim` floats, epsilon `eps`.
pub struct LayerNorm<'a> {
    /// Elements of a row (the model's dim).
    pub dim: u32,
    /// The norm's epsilon.
    pub eps: f32,
    /// Its input, `[n_tokens, dim]` (the residual stream).
    pub x: Bind<'a>,
    /// Its gain, then its bias: `[2 dim]`.
    pub norm: &'a wgpu::Buffer,
    /// Where the normed rows go, `[n_tokens, dim]`.
    pub out: Bind<'a>,
}

impl Kernels {
    /// The LayerNorm `op` (see [`LayerNorm`]): one workgroup a token.
    pub fn layer_norm(&self, ctx: &GpuContext, op: &LayerNorm, step: &wgpu::Buffer) -> Result<Dispatch> {
        let row = u64::from(op.dim) * 4;
        if op.dim == 0 || op.norm.size() < 2 * row || op.x.bytes() < row || op.out.bytes() < row {
            return Err(Error::Backend(format!(
                "a LayerNorm over rows of {} floats (its gain and bias {} floats): a buffer holds fewer",
                op.dim,
                2 * op.dim
            )));
        }
        let params = ctx.uniform("layer_norm", &[NormParams { dim: op.dim, eps: op.eps, ..Default::default() }]);
        let binds = [("params", whole(&params)), ("x", op.x), ("norm", whole(op.norm)), ("out", op.out), ("step", whole(step))];
        Ok(prepare(ctx, &self.layer_norm_kernel(ctx)?, &binds, 1)?.per_token(0, 1))
    }

    /// The LayerNorm pipeline, compiled the first time it is asked for.
    fn layer_norm_kernel(&self, ctx: &GpuContext) -> Result<Kernel> {
        cached(&self.layer_norm, (), || pipeline(ctx, &source(), &[("WG", WORKGROUP as f64)]))
    }
}

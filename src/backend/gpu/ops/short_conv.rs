//! The short-convolution op (short_conv.wgsl): a convolving layer's mixer (LFM2's) between
//! its input projection, which writes `[b | c | x']` per token, and its output projection,
//! which reads `y = c * conv(b * x')`. Each token's gated input `b * x'` goes to the layer's
//! cache row at its position, where later steps read it. Its twins are
//! `cpu::short_conv::gated_inputs` and `convolve` (tests/gpu_kernels.rs).

use super::super::device::GpuContext;
use super::super::kernels::{cached, pipeline, prepare, whole, Bind, Dispatch, Kernel, Kernels, ShaderSource, WORKGROUP};
use super::super::params::ConvParams;
use crate::error::{Error, Result};

const SHORT_CONV: &str = include_str!("../../../../shaders/short_conv.wgsl");

/// short_conv.wgsl's source.
pub fn source() -> ShaderSource {
    ShaderSource::new("short_conv.wgsl", SHORT_CONV, Vec::new())
}

/// A short convolution's operands, for the step's tokens at positions `pos..pos + n_tokens`.
pub struct ShortConv<'a> {
    /// Channels (the model's dim).
    pub dim: u32,
    /// Positions each channel's kernel spans.
    pub width: u32,
    /// The input projection's rows, `[n_tokens, 3 dim]`: b, c, x'.
    pub bcx: Bind<'a>,
    /// Each channel's kernel, `[dim, width]`.
    pub kernel: &'a wgpu::Buffer,
    /// The layer's gated inputs by position, `[capacity, dim]`.
    pub cache: Bind<'a>,
    /// `y`, `[n_tokens, dim]`.
    pub out: Bind<'a>,
}

impl Kernels {
    /// The short convolution `op` (see [`ShortConv`]): a thread per channel and token.
    pub fn short_conv(&self, ctx: &GpuContext, op: &ShortConv, step: &wgpu::Buffer) -> Result<Dispatch> {
        let row = u64::from(op.dim) * 4;
        let kernel = row * u64::from(op.width);
        if op.dim == 0
            || op.width == 0
            || op.kernel.size() < kernel
            || op.bcx.bytes() < 3 * row
            || op.cache.bytes() < row
            || op.out.bytes() < row
        {
            return Err(Error::Backend(format!(
                "a short convolution of {} channels over {} positions: a buffer holds fewer floats than that",
                op.dim, op.width
            )));
        }
        let params = ctx.uniform("short_conv", &[ConvParams { dim: op.dim, width: op.width, ..Default::default() }]);
        let binds = [
            ("params", whole(&params)),
            ("bcx", op.bcx),
            ("kernel", whole(op.kernel)),
            ("cache", op.cache),
            ("out", op.out),
            ("step", whole(step)),
        ];
        Ok(prepare(ctx, &self.short_conv_kernel(ctx)?, &binds, op.dim.div_ceil(WORKGROUP))?.per_token(1, 1))
    }

    /// The short-convolution pipeline, compiled the first time it is asked for.
    fn short_conv_kernel(&self, ctx: &GpuContext) -> Result<Kernel> {
        cached(&self.short_conv, (), || pipeline(ctx, &source(), &[("WG", WORKGROUP as f64)]))
    }
}

//! The post-norm op (norm_add.wgsl): a sublayer's output RMS-normed with its gain and added
//! to the residual stream, Gemma 3's norm after the attention and after the feed-forward
//! (a dispatch after each of their last projections, which write the output apart). Its twin
//! is `cpu::ops::add_normed` (tests/gpu_kernels.rs).

use super::super::device::GpuContext;
use super::super::kernels::{cached, pipeline, prepare, whole, Bind, Dispatch, Kernel, Kernels, ShaderSource, WORKGROUP};
use super::super::params::NormParams;
use crate::error::{Error, Result};

const NORM_ADD: &str = include_str!("../../../../shaders/norm_add.wgsl");

/// norm_add.wgsl's source (one variant).
pub fn source() -> ShaderSource {
    ShaderSource::new("norm_add.wgsl", NORM_ADD, Vec::new())
}

impl Kernels {
    /// `x[b] += rmsnorm(y[b]) * gain` for the step's tokens `b`, rows of `dim` floats (`gain`
    /// `[dim]`, epsilon `eps`): one workgroup a token.
    #[allow(clippy::too_many_arguments)]
    pub fn norm_add(
        &self,
        ctx: &GpuContext,
        dim: u32,
        eps: f32,
        y: Bind,
        gain: &wgpu::Buffer,
        x: Bind,
        step: &wgpu::Buffer,
    ) -> Result<Dispatch> {
        let row = u64::from(dim) * 4;
        let bound = |b: &Bind| b.2.unwrap_or(b.0.size() - b.1);
        if dim == 0 || gain.size() < row || bound(&y) < row || bound(&x) < row {
            return Err(Error::Backend(format!("a post norm over rows of {dim} floats: a buffer holds fewer")));
        }
        let params = ctx.uniform("norm_add", &[NormParams { dim, eps, ..Default::default() }]);
        let binds = [("params", whole(&params)), ("y", y), ("gain", whole(gain)), ("x", x), ("step", whole(step))];
        Ok(prepare(ctx, &self.norm_add_kernel(ctx)?, &binds, 1)?.per_token(0, 1))
    }

    /// The post-norm pipeline, compiled the first time it is asked for.
    fn norm_add_kernel(&self, ctx: &GpuContext) -> Result<Kernel> {
        cached(&self.norm_add, (), || pipeline(ctx, &source(), &[("WG", WORKGROUP as f64)]))
    }
}

//! The post-norm op (norm_add.wgsl): a sublayer's output RMS-normed with its gain and added
//! to the residual stream, Gemma 3's norm after the attention and after the feed-forward
//! (a dispatch after each of their last projections, which write the output apart; in a
//! decode step whose feed-forward read the attention's term in its prologue, one dispatch at
//! the layer's end adding both, [`PostNorm`]'s `first`). Its twin is `cpu::ops::add_normed`
//! (tests/gpu_kernels.rs).

use super::super::device::GpuContext;
use super::super::kernels::{cached, pipeline, prepare, whole, Bind, Dispatch, Kernel, Kernels, ShaderSource, WORKGROUP};
use super::super::params::NormParams;
use crate::error::{Error, Result};

const NORM_ADD: &str = include_str!("../../../../shaders/norm_add.wgsl");

/// norm_add.wgsl's source: one post norm, or with `first` another's term added before it
/// (the define FIRST).
pub fn source(first: bool) -> ShaderSource {
    let name = if first { "norm_add_first.wgsl" } else { "norm_add.wgsl" };
    ShaderSource::new(name, NORM_ADD, if first { vec!["FIRST"] } else { Vec::new() })
}

/// A post norm's operands: `x[b] += rmsnorm(y[b]) * gain` for the step's tokens `b`, rows of
/// `dim` floats, epsilon `eps`; with `first` (a sublayer output and its gain) that one's
/// normed row is added before `y`'s.
pub struct PostNorm<'a> {
    /// Elements of a row (the model's dim).
    pub dim: u32,
    /// RMSNorm epsilon (both norms').
    pub eps: f32,
    /// The sublayer's output, `[n_tokens, dim]`.
    pub y: Bind<'a>,
    /// Its norm's gain, `[dim]`.
    pub gain: &'a wgpu::Buffer,
    /// The residual stream, `[n_tokens, dim]`, added to.
    pub x: Bind<'a>,
    /// The earlier sublayer's output and its norm's gain, added first (the attention's, where
    /// the feed-forward's gate/up projection read it in its prologue).
    pub first: Option<(Bind<'a>, &'a wgpu::Buffer)>,
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
        self.post_norm(ctx, &PostNorm { dim, eps, y, gain, x, first: None }, step)
    }

    /// The post norm `op` (see [`PostNorm`]): one workgroup a token.
    pub fn post_norm(&self, ctx: &GpuContext, op: &PostNorm, step: &wgpu::Buffer) -> Result<Dispatch> {
        let row = u64::from(op.dim) * 4;
        let first_short = op.first.as_ref().is_some_and(|(y, gain)| gain.size() < row || y.bytes() < row);
        if op.dim == 0 || op.gain.size() < row || op.y.bytes() < row || op.x.bytes() < row || first_short {
            return Err(Error::Backend(format!("a post norm over rows of {} floats: a buffer holds fewer", op.dim)));
        }
        let params = ctx.uniform("norm_add", &[NormParams { dim: op.dim, eps: op.eps, ..Default::default() }]);
        let mut binds = vec![("params", whole(&params)), ("y", op.y), ("gain", whole(op.gain)), ("x", op.x), ("step", whole(step))];
        if let Some((y, gain)) = op.first {
            binds.extend([("first_y", y), ("first_gain", whole(gain))]);
        }
        Ok(prepare(ctx, &self.norm_add_kernel(ctx, op.first.is_some())?, &binds, 1)?.per_token(0, 1))
    }

    /// The post-norm pipeline (with `first` or not), compiled the first time it is asked for.
    fn norm_add_kernel(&self, ctx: &GpuContext, first: bool) -> Result<Kernel> {
        cached(&self.norm_add, first, || pipeline(ctx, &source(first), &[("WG", WORKGROUP as f64)]))
    }
}

//! The argmax op (argmax.wgsl): the id of the highest-ranked logit, written where the next
//! decode step's embedding reads its token, so the GPU can run a greedy step ahead of the
//! CPU's choice ([`super::super::GpuBackend`]'s run-ahead). Its twin is the sampler's own
//! greedy choice, `sampler::ranking::top(logits, 1)[0]` (tests/gpu_kernels.rs).

use super::super::device::GpuContext;
use super::super::kernels::{pipeline, prepare, whole, Bind, Dispatch, Kernel, Kernels, ShaderSource};
use crate::error::{Error, Result};

const ARGMAX: &str = include_str!("../../../../shaders/argmax.wgsl");

/// Threads of the one argmax workgroup (the override `WG`).
pub const ARGMAX_WORKGROUP: u32 = 256;

/// argmax.wgsl's source (one variant; the logits it ranks are the override `N`).
pub fn source() -> ShaderSource {
    ShaderSource::new("argmax.wgsl", ARGMAX, Vec::new())
}

impl Kernels {
    /// `tokens[0] = ` the id of the highest-ranked of the first `n` floats of `logits` (ties to
    /// the lower id, as the sampler ranks): one workgroup, nothing else written.
    pub fn argmax(&self, ctx: &GpuContext, logits: Bind, n: u32, tokens: &wgpu::Buffer) -> Result<Dispatch> {
        if n == 0 || u64::from(n) * 4 > logits.bytes() {
            return Err(Error::Backend(format!("argmax over {n} logits: the binding holds {} bytes", logits.0.size() - logits.1)));
        }
        let kernel = self.argmax_kernel(ctx, n)?;
        prepare(ctx, &kernel, &[("logits", logits), ("tokens", whole(tokens))], 1)
    }

    /// The argmax pipeline for `n` logits, compiled the first time it is asked for.
    fn argmax_kernel(&self, ctx: &GpuContext, n: u32) -> Result<Kernel> {
        super::super::kernels::cached(&self.argmax, n, || {
            pipeline(ctx, &source(), &[("WG", f64::from(ARGMAX_WORKGROUP)), ("N", f64::from(n))])
        })
    }
}

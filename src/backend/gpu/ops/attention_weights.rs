//! The attention-weights op (attention_weights.wgsl): the step's last token's softmax weights
//! over every cached position, for each query head of one layer, kept when a step is asked to
//! show its inside; its twin is `cpu::ops::attention_weights` (tests/gpu_kernels.rs). Only
//! an inspecting step runs it.

use super::super::device::GpuContext;
use super::super::kernels::{prepare, whole, Bind, Dispatch, Kernels, ShaderSource};
use super::super::params::InspectParams;
use super::attention::AttentionScope;
use crate::error::Result;

const ATTENTION_WEIGHTS: &str = include_str!("../../../../shaders/attention_weights.wgsl");

/// One variant of attention_weights.wgsl: by the KV cache's precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AttentionWeightsKernel {
    /// Reads a half-float KV cache.
    pub kv_f16: bool,
}

impl AttentionWeightsKernel {
    /// Every variant.
    pub fn all() -> impl Iterator<Item = AttentionWeightsKernel> {
        [false, true].into_iter().map(|kv_f16| AttentionWeightsKernel { kv_f16 })
    }

    /// Its name, e.g. `attention_weights_kv_f16.wgsl`.
    pub fn name(&self) -> String {
        format!("attention_weights{}.wgsl", if self.kv_f16 { "_kv_f16" } else { "" })
    }

    /// Its source: attention_weights.wgsl with its defines.
    pub fn source(&self) -> ShaderSource {
        ShaderSource::new(self.name(), ATTENTION_WEIGHTS, if self.kv_f16 { vec!["KV_F16"] } else { Vec::new() })
    }
}

impl Kernels {
    /// Prepares layer `layer`'s attention weights: for a step whose last token sits at
    /// position p, `out[(layer * n_heads + h) * (p + 1) + j]` = head h's weight on position j,
    /// with `[n_heads, n_kv_heads, head_dim]` from `shape`, the step's rotated queries `q` and
    /// the layer's key cache `keys`, over the positions and with the scores `scope` says (the
    /// weights before a window 0). `out` holds `[layers, n_heads,
    /// p + 1]` floats (for the longest context the step may have).
    #[allow(clippy::too_many_arguments)]
    pub fn attention_weights(
        &self,
        ctx: &GpuContext,
        shape: [u32; 3],
        layer: u32,
        scope: AttentionScope,
        q: &wgpu::Buffer,
        keys: &wgpu::Buffer,
        out: Bind,
        step: &wgpu::Buffer,
    ) -> Result<Dispatch> {
        let params = ctx.uniform("attention weights", &[scope.params(shape, 0)]);
        let inspect = ctx.uniform("inspect", &[InspectParams { layer, ..Default::default() }]);
        let binds = [
            ("params", whole(&params)),
            ("q", whole(q)),
            ("k_cache", whole(keys)),
            ("out", out),
            ("step", whole(step)),
            ("inspect", whole(&inspect)),
        ];
        prepare(ctx, &self.attention_weights_kernel(ctx)?, &binds, shape[0])
    }
}

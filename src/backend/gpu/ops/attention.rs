//! The attention op: one dispatch while the context fits one chunk, split-K's two after
//! (attention_partial.wgsl, attention_combine.wgsl); its twins are `cpu::ops::attention`,
//! `attention_chunk` and `combine_chunks` (tests/gpu_kernels.rs). A decode step over a short
//! context runs it in the output projection's prologue instead, and past it runs split-K's
//! part 1 here and the merge in that prologue ([`super::matrix`]).

use super::super::device::GpuContext;
use super::super::kernels::{prepare, whole, Bind, Dispatch, Kernels, ShaderSource};
use super::super::params::{alibi_bases, AttentionParams};
use crate::error::{Error, Result};

const ATTENTION_PARTIAL: &str = include_str!("../../../../shaders/attention_partial.wgsl");

const ATTENTION_COMBINE: &str = include_str!("../../../../shaders/attention_combine.wgsl");

/// Split-K's part 2, attention_combine.wgsl.
pub fn combine_source() -> ShaderSource {
    ShaderSource::new("attention_combine.wgsl", ATTENTION_COMBINE, Vec::new())
}

/// One variant of attention_partial.wgsl.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AttentionKernel {
    /// The whole attention in one dispatch (one chunk), rather than split-K's part 1.
    pub single: bool,
    /// Subgroup reductions.
    pub subgroup: bool,
    /// Reads a half-float KV cache.
    pub kv_f16: bool,
}

impl AttentionKernel {
    /// Every variant.
    pub fn all() -> impl Iterator<Item = AttentionKernel> {
        (0..8u8).map(|b| AttentionKernel { single: b & 1 != 0, subgroup: b & 2 != 0, kv_f16: b & 4 != 0 })
    }

    /// Its name, e.g. `attention_single_subgroup_kv_f16.wgsl`.
    pub fn name(&self) -> String {
        format!(
            "attention_{}{}{}.wgsl",
            if self.single { "single" } else { "partial" },
            if self.subgroup { "_subgroup" } else { "" },
            if self.kv_f16 { "_kv_f16" } else { "" }
        )
    }

    /// Its source: attention_partial.wgsl with its defines.
    pub fn source(&self) -> ShaderSource {
        let defines = [(self.single, "SINGLE"), (self.subgroup, "SUBGROUP"), (self.kv_f16, "KV_F16")];
        ShaderSource::new(self.name(), ATTENTION_PARTIAL, defines.iter().filter(|d| d.0).map(|d| d.1).collect())
    }
}

/// Floats of chunk statistics split-K attention needs for `tokens` tokens per step in chunks
/// of `split` positions: `[tokens, n_heads, n_chunks, 2 + head_dim]`.
pub fn attention_parts_len(shape: [u32; 3], capacity: usize, tokens: usize, split: u32) -> usize {
    tokens * shape[0] as usize * attention_chunks(capacity, split) as usize * (2 + shape[2] as usize)
}

/// Chunks of `split` positions ([`KernelOptions::split_chunk`](super::super::kernels::KernelOptions::split_chunk))
/// split-K attention keeps statistics for per head, over caches of `capacity` positions.
pub fn attention_chunks(capacity: usize, split: u32) -> u32 {
    capacity.div_ceil(split.max(1) as usize).max(1) as u32
}

/// What one layer's attention weighs and how: the last `window` positions in a sliding-window
/// layer (0: every position up to the token's own), each query-key dot product multiplied by
/// `score_scale`, capped at `softcap` (`cap * tanh(s / cap)`, Gemma 2's; 0: uncapped) and
/// biased by ALiBi's distance times its head's slope (slopes set by `alibi_max_bias`,
/// BLOOM's; 0: none). The twins' [`AttentionInput`](crate::backend::cpu::ops::AttentionInput)
/// holds the same as `first`, `scale`, `softcap` and `alibi_slope`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionScope {
    /// Positions a token attends over, its own included, in a sliding-window layer; 0: all.
    pub window: u32,
    /// The cap of every scaled score; 0: none.
    pub softcap: f32,
    /// What each query-key dot product is multiplied by (`1 / sqrt(head_dim)`, or Granite's
    /// attention scale).
    pub score_scale: f32,
    /// ALiBi's largest bias, which sets each head's slope
    /// ([`alibi_slope`](crate::model::alibi::alibi_slope)); 0: no ALiBi.
    pub alibi_max_bias: f32,
}

impl AttentionScope {
    /// The attention kernels' uniform for heads `[n_heads, n_kv_heads, head_dim]` and
    /// `n_chunks` chunks of split-K statistics, this scope's window, cap and scale in it and
    /// ALiBi's largest bias as the two bases the slopes are powers of.
    pub fn params(self, [n_heads, n_kv_heads, head_dim]: [u32; 3], n_chunks: u32) -> AttentionParams {
        let AttentionScope { window, softcap, score_scale, alibi_max_bias } = self;
        let [alibi_m0, alibi_m1] = alibi_bases(n_heads, alibi_max_bias);
        AttentionParams { n_heads, n_kv_heads, head_dim, n_chunks, window, softcap, score_scale, alibi_m0, alibi_m1, ..Default::default() }
    }

    /// Every position up to the token's own, uncapped and unbiased, scores scaled by
    /// `1 / sqrt(head_dim)`.
    pub fn whole(head_dim: u32) -> Self {
        AttentionScope { window: 0, softcap: 0.0, score_scale: 1.0 / (head_dim as f32).sqrt(), alibi_max_bias: 0.0 }
    }
}

/// Attention for one layer, `out = attention(q, cache[first..n_pos])` for every head (`first`
/// 0, or in a sliding-window layer `n_pos - window` where that is above 0): one
/// dispatch while the step's tokens see at most [`ATTENTION_CHUNK`](super::super::kernels::ATTENTION_CHUNK) positions, split-K's two
/// after.
pub struct Attention {
    /// The whole attention in one dispatch (only while `pos + n_tokens <= ATTENTION_CHUNK`).
    pub single: Dispatch,
    /// Split-K part 1 (the chunks the step's last token reaches: [`Dispatch::per_position`]).
    pub partial: Dispatch,
    /// Split-K part 2.
    pub combine: Dispatch,
}

impl Kernels {
    /// Prepares decode attention over caches of up to `capacity` positions, with
    /// `[n_heads, n_kv_heads, head_dim]` from `shape`, each token over the positions and with
    /// the scores `scope` says, and `parts` (at least [`attention_parts_len`] floats) as
    /// scratch for the chunk statistics.
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &self,
        ctx: &GpuContext,
        shape: [u32; 3],
        capacity: usize,
        scope: AttentionScope,
        q: &wgpu::Buffer,
        keys: &wgpu::Buffer,
        values: &wgpu::Buffer,
        parts: Bind,
        out: Bind,
        step: &wgpu::Buffer,
    ) -> Result<Attention> {
        let [n_heads, n_kv_heads, head_dim] = shape;
        // The kernels weigh the values 4 dimensions at a time.
        if n_kv_heads == 0 || !n_heads.is_multiple_of(n_kv_heads) || head_dim == 0 || !head_dim.is_multiple_of(4) {
            return Err(Error::Backend(format!(
                "GPU attention needs query heads in whole groups per KV head and heads of a multiple of 4 dimensions, not {n_heads} over {n_kv_heads} of {head_dim}"
            )));
        }
        let n_chunks = attention_chunks(capacity, self.options.split_chunk);
        let params = ctx.uniform("attention", &[scope.params(shape, n_chunks)]);
        let inputs =
            || [("params", whole(&params)), ("q", whole(q)), ("k_cache", whole(keys)), ("v_cache", whole(values)), ("step", whole(step))];
        let single = prepare(ctx, &self.attention_single, &[&inputs()[..], &[("out", out)]].concat(), n_heads)?.per_token(2, 1);
        let mut partial = prepare(ctx, &self.attention_partial, &[&inputs()[..], &[("parts", parts)]].concat(), n_heads)?.per_token(2, 1);
        partial.groups[1] = n_chunks;
        let partial = partial.per_position(1, self.options.split_chunk);
        let combine_binds = [("params", whole(&params)), ("parts", parts), ("out", out), ("step", whole(step))];
        let combine = prepare(ctx, &self.attention_combine, &combine_binds, n_heads)?.per_token(1, 1);
        Ok(Attention { single, partial, combine })
    }
}

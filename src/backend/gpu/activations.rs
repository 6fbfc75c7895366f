//! The buffers a pass works in besides the weights and the KV caches (upload.rs): the
//! residual stream and the other activations, the step's inputs, the logits and the buffers
//! they are read back through, RoPE's table and attention's scratch. Row i of an activation
//! belongs to the step's token i (a decode step uses row 0).

use super::device::GpuContext;
use super::kernels;
use super::ops;
use super::step::MAX_RUN_AHEAD;
use crate::backend::MAX_VERIFY_TOKENS;
use crate::model::{Config, LayerRope, LayerRopes};

/// Most prompt tokens one prefill pass runs; the activation buffers hold this many rows.
pub const PREFILL_BATCH: usize = 64;

/// Every activation buffer of a pass, `B` = [`PREFILL_BATCH`] rows.
pub(super) struct Activations {
    /// The residual stream, `[B, dim]`.
    pub x: wgpu::Buffer,
    /// The residual stream LayerNorm-ed for the projection after the norm, `[B, dim]`
    /// (StableLM's; one float where the model's norms are RMSNorms, which the projections
    /// apply to `x` as they read it).
    pub normed: wgpu::Buffer,
    /// The residual stream LayerNorm-ed for the feed-forward beside `normed`, before the
    /// attention adds to it, `[B, dim]` (a parallel residual's, read where its block has a
    /// feed-forward norm: GPT-NeoX's, Falcon 40B's; one float where the residual is not parallel).
    pub ffn_normed: wgpu::Buffer,
    /// The Q/K/V projections before RoPE, `[B, n_heads * hd + 2 kv]` (where RoPE is a
    /// dispatch of its own).
    pub qkv: wgpu::Buffer,
    /// The rotated queries, `[B, n_heads * hd]`.
    pub q: wgpu::Buffer,
    /// The attention's output, `[B, n_heads * hd]` (where it is a dispatch of its own).
    pub att: wgpu::Buffer,
    /// The gated feed-forward's output (SwiGLU's or GeGLU's), `[B, ffn]`; a mixture of
    /// experts' picks' outputs, `[B, used, expert ffn]`.
    pub hidden: wgpu::Buffer,
    /// A mixture of experts' router scores, `[B, count]` (one float without experts).
    pub expert_scores: wgpu::Buffer,
    /// Each token's picks, `[B, used, 2]` u32: expert, weight bits (one word without experts).
    pub picks: wgpu::Buffer,
    /// Each pick's down projection, `[B, used, dim]` (one float without experts).
    pub expert_out: wgpu::Buffer,
    /// The feed-forward's output before its post norm adds it to `x` (Gemma's), `[B, dim]`
    /// (one float where the model has no post norms).
    pub proj: wgpu::Buffer,
    /// The attention's output projection before its post norm, `[B, dim]` (likewise): apart
    /// from `proj`, as a decode step adds it to `x` at the layer's end.
    pub att_proj: wgpu::Buffer,
    /// The logits, `[MAX_VERIFY_TOKENS, vocab]`; a decode step writes row 0.
    pub logits: wgpu::Buffer,
    /// Split-K attention's chunk statistics, `[B, n_heads, ceil(context / split_chunk), 2 + hd]`.
    pub att_parts: wgpu::Buffer,
    /// The per-head output projection's parts over a short context, `[n_heads, head_chunks,
    /// 2 + dim]` (one float where it does not run).
    pub head_parts: wgpu::Buffer,
    /// RoPE's cosines and sines for every position of the context ([`ops::rope_table`]), a
    /// table for each kind of layer the model has, the file's frequencies' first.
    pub tables: Vec<(LayerRope, wgpu::Buffer)>,
    /// The uniform `[pos, n_tokens, 0, 0]` of the current step.
    pub step: wgpu::Buffer,
    /// The step's token ids, `[B]` u32 (a run-ahead's argmax writes `tokens[0]`).
    pub tokens: wgpu::Buffer,
    /// Where the logits are read back: `[MAX_VERIFY_TOKENS, vocab]`, and one word more for
    /// the argmax a greedy run-ahead ranks (its token id after the step's `vocab` logits).
    pub staging: wgpu::Buffer,
    /// A greedy run-ahead's other readbacks, [`MAX_RUN_AHEAD`] of `[vocab + 1]`: a ranked step
    /// and the ones submitted ahead after it read back into different buffers (by the
    /// position after each, [`super::step::readback_slot`]), so one is mapped while the next
    /// ones' copies are queued.
    pub staging_ahead: Vec<wgpu::Buffer>,
    /// Bytes of the device buffers above (the readbacks' excepted).
    pub bytes: u64,
}

impl Activations {
    /// The buffers for a model shaped `cfg`, a KV cache of `capacity` positions, split-K in
    /// chunks of `split_chunk` positions, `head_parts` floats of per-head parts, and the RoPE
    /// frequencies of each kind of its layers.
    pub fn new(ctx: &GpuContext, cfg: &Config, capacity: usize, split_chunk: u32, head_parts: usize, ropes: &LayerRopes) -> Self {
        let b = PREFILL_BATCH;
        let qd = cfg.n_heads * cfg.head_dim;
        let att_shape = [cfg.n_heads as u32, cfg.n_kv_heads as u32, cfg.head_dim as u32];
        let mut bytes = 0;
        let mut buf = |label: &str, n: usize| {
            bytes += (n * 4) as u64;
            ctx.storage(label, &vec![0f32; n])
        };
        let x = buf("x", b * cfg.dim);
        let normed = buf("layer-normed x", if cfg.architecture.layer_norms() { b * cfg.dim } else { 1 });
        // Whether a parallel block's feed-forward has a norm of its own is the file's to say
        // (Falcon 40B's blocks have one, 7B's none): sized for every parallel residual.
        let ffn_normed = buf("feed-forward's layer-normed x", if cfg.parallel_residual { b * cfg.dim } else { 1 });
        // A convolving layer's input projection (LFM2's, `[3 dim]` a token) writes `qkv` and
        // its convolution `att` (`[dim]`).
        let conv = cfg.short_conv.is_some();
        let qkv = buf("qkv", b * (qd + 2 * cfg.kv_dim()).max(if conv { 3 * cfg.dim } else { 0 }));
        let q = buf("q", b * qd);
        let att = buf("att", b * qd.max(if conv { cfg.dim } else { 0 }));
        let (count, used, expert_ffn) = cfg.experts.as_ref().map_or((0, 0, 0), |e| (e.count, e.used, e.ffn_dim));
        let hidden = buf("hidden", b * cfg.ffn_dim.max(used * expert_ffn));
        let expert_scores = buf("expert scores", (b * count).max(1));
        let expert_out = buf("expert outputs", (b * used * cfg.dim).max(1));
        let post_normed = if cfg.architecture.has_post_norms() { b * cfg.dim } else { 1 };
        let proj = buf("feed-forward output", post_normed);
        let att_proj = buf("attention output", post_normed);
        let logits = buf("logits", MAX_VERIFY_TOKENS * cfg.vocab_size);
        let att_parts = buf("attention parts", ops::attention_parts_len(att_shape, capacity, b, split_chunk));
        let head_parts = buf("head parts", head_parts.max(1));
        let picks = ctx.storage("expert picks", &vec![0u32; (b * used * 2).max(1)]);
        bytes += picks.size();
        let tables: Vec<_> = ropes.kinds().iter().map(|(kind, f)| (*kind, ctx.storage("rope", &ops::rope_table(capacity, f)))).collect();
        bytes += tables.iter().map(|(_, t)| t.size()).sum::<u64>();
        let step = kernels::step_uniform(ctx, kernels::StepParams::new(0, 1));
        let tokens = ctx.storage("tokens", &vec![0u32; b]);
        let staging = ctx.staging("logits readback", ((MAX_VERIFY_TOKENS * cfg.vocab_size + 1) * 4) as u64);
        let staging_ahead = (0..MAX_RUN_AHEAD).map(|_| ctx.staging("run-ahead readback", ((cfg.vocab_size + 1) * 4) as u64)).collect();
        Activations {
            x,
            normed,
            ffn_normed,
            qkv,
            q,
            att,
            hidden,
            expert_scores,
            picks,
            expert_out,
            proj,
            att_proj,
            logits,
            att_parts,
            head_parts,
            tables,
            step,
            tokens,
            staging,
            staging_ahead,
            bytes,
        }
    }

    /// The RoPE table of layers of `kind` (the file's frequencies' where the model has no
    /// layers of that kind).
    pub fn table(&self, kind: LayerRope) -> &wgpu::Buffer {
        self.tables.iter().find(|(k, _)| *k == kind).map_or(&self.tables[0].1, |(_, t)| t)
    }
}

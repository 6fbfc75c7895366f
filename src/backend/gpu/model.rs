//! The forward pass on the GPU: every weight stays quantized on the device (every format
//! of `crate::gguf::SUPPORTED_TYPES`, dequantized inside the kernels), activations and the residual stream in f32, the
//! KV cache on the device. One decode step = one command encoder, one compute pass, one
//! submit, one readback of the logits; a prefill pass runs up to 64 prompt tokens the same
//! way with matrix-matrix kernels and causal attention. Pipelines, bind groups and buffers
//! are made at load. A decode step's commands depend only on its position (its token and
//! position reach the kernels through buffers written before the submit), so each decode
//! step encodes the next one's while the GPU runs it: the CPU's share of a step (a few us a
//! dispatch) overlaps the GPU's. A greedy caller ([`crate::backend::Pass::run_ahead`]) has
//! each pass rank its logits on the GPU (argmax.wgsl) and submit the next decode step on that
//! token before the logits are read back, so the GPU does not wait for the readback, the
//! sampler and the caller between steps; the next pass takes that step as run when its token
//! is the one ranked first, and drops it otherwise. It keeps 1 step submitted ahead by
//! default, up to [`MAX_RUN_AHEAD`] where a readback's round trip is long
//! ([`GpuBackend::set_run_ahead_steps`]): each ahead step runs on the argmax of the one before
//! it, all on the GPU.
//!
//! The pass is written once as a list of [`Op`]s per layer (as the CPU path reads) and
//! lowered into four command lists: decode or prefill, and attention in one dispatch (while
//! the context is short) or split-K. A decode step's layer is 4 dispatches while the
//! context is at most [`KernelOptions::fused_positions`] positions (16 by default, as
//! measured on an H100), 5 past them: the RMSNorms run inside the projections after them, RoPE and the
//! KV-cache write in the Q/K/V projection's epilogue, attention in the output projection's
//! prologue (past the short context, split-K's part 1 is a dispatch of its own and the
//! prologue merges its chunks), and SwiGLU in the gate/up projection's epilogue. With
//! [`KernelOptions::per_head_attention`] the short context's output projection runs per
//! query head instead (one head's attention over one chunk in each workgroup, its product
//! with the head's columns into per-head parts), and the gate/up and down projections merge
//! the parts into the residual stream they read and write: still 4 dispatches a layer. A model
//! with Q/K/V biases (Qwen2) or head norms (Qwen3) runs RoPE as a dispatch of its own, where
//! they are applied (one more a layer). A prefill pass runs RoPE and attention as dispatches of their own (7 a layer,
//! 8 past the first [`ATTENTION_CHUNK`](kernels::ATTENTION_CHUNK) positions).

use std::collections::VecDeque;

use candle_core::quantized::QTensor;

use super::device::{GpuContext, Timestamps};
use super::kernels::{self, Bind, Dispatch, KernelOptions, Kernels};
use super::ops::{self, AttentionInput, CombineInput, GpuMatrix, HeadParts, HeadsInput, LinearOp, RopeKv, RopeKvOp, RowBands};
use super::profile::{KernelTime, StepProfile};
use super::repack::{interleave_rows, repack, repack_together, stack};
use crate::backend::{Backend, BackendInfo, Checked, Forward, Logits, MAX_VERIFY_TOKENS};
use crate::error::{Error, Result};
use crate::model::{Config, Weights};

/// Counts of what one decode step does on the GPU.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StepShape {
    /// Kernel dispatches per decode step while the context is short (at most
    /// [`KernelOptions::fused_positions`] positions).
    pub dispatches: usize,
    /// Kernel dispatches per decode step past it (split-K attention).
    pub dispatches_long_context: usize,
    /// The most positions a short context has ([`KernelOptions::fused_positions`]).
    pub fused_positions: usize,
    /// Layers whose short-context decode steps run the output projection per query head
    /// ([`KernelOptions::per_head_attention`]; 0 when it is off).
    pub per_head_layers: usize,
    /// Compute passes per decode step.
    pub passes: usize,
    /// Queue submits per decode step.
    pub submits: usize,
    /// Bytes read back per decode step (the logits; 4 more, the argmax, when it runs ahead).
    pub readback_bytes: usize,
    /// Bytes of GPU buffers in use (weights, KV cache, activations).
    pub gpu_bytes: u64,
    /// Most prompt tokens one prefill pass runs (longer prompts take several, one submit each).
    pub prefill_batch: usize,
}

/// Most prompt tokens one prefill pass runs; the activation buffers hold this many rows.
pub const PREFILL_BATCH: usize = 64;

/// KV-cache capacity in tokens when none is asked for.
pub const DEFAULT_CONTEXT: usize = 2048;

/// The model on a GPU.
pub struct GpuBackend {
    pub(super) ctx: GpuContext,
    pub(super) cfg: Config,
    /// `[pos, n_tokens, 0, 0]` of the current step.
    pub(super) step: wgpu::Buffer,
    /// The step's token ids, `[PREFILL_BATCH]` u32.
    pub(super) tokens: wgpu::Buffer,
    /// Logits `[MAX_VERIFY_TOKENS, vocab]`; a decode step writes row 0.
    pub(super) logits: wgpu::Buffer,
    /// Where the logits are read back: `[MAX_VERIFY_TOKENS, vocab]`, and one word more for
    /// the argmax a greedy run-ahead ranks (its token id after the step's `vocab` logits).
    pub(super) staging: wgpu::Buffer,
    /// A greedy run-ahead's other readbacks, [`MAX_RUN_AHEAD`] of `[vocab + 1]`: a ranked step
    /// and the ones submitted ahead after it read back into different buffers (by the position
    /// after each, [`readback_slot`]), so one is mapped while the next ones' copies are queued.
    staging_ahead: Vec<wgpu::Buffer>,
    /// The argmax of the logits' row 0 into `tokens[0]` (argmax.wgsl): the token of the decode
    /// step a greedy run-ahead submits after a pass.
    argmax: Dispatch,
    /// The residual stream `[PREFILL_BATCH, dim]` (decode: row 0).
    pub(super) x: wgpu::Buffer,
    /// The step's rotated queries `[PREFILL_BATCH, n_heads * head_dim]`.
    pub(super) q: wgpu::Buffer,
    /// Each layer's key cache.
    pub(super) key_caches: Vec<wgpu::Buffer>,
    /// `[n_heads, n_kv_heads, head_dim]`.
    pub(super) att_shape: [u32; 3],
    /// The pipelines, for the kernels compiled on first use (an inspecting step's).
    pub(super) kernels: Kernels,
    /// An inspecting step's buffers and dispatches, made the first time one runs.
    pub(super) inspector: Option<super::inspect::Inspector>,
    /// One token: matvec kernels.
    decode: Lowered,
    /// Up to [`PREFILL_BATCH`] tokens at once: matmul kernels, causal attention.
    prefill: Lowered,
    /// Up to [`MAX_VERIFY_TOKENS`] tokens with logits for each: prefill with the LM head on
    /// every token.
    verify: Lowered,
    /// Every op of the pass, in order (the self-draft's lists and an inspecting step are cut
    /// from it).
    pub(super) ops: Vec<Op>,
    /// The index in `ops` after each layer's last op.
    pub(super) layer_ends: Vec<usize>,
    /// Layers whose short-context decode steps run the output projection per query head.
    per_head_layers: usize,
    /// The LM head on every token of the step (the verify lists' last op; `ops` ends with the
    /// LM head on the last token).
    pub(super) verify_head: Op,
    /// The self-draft's decode lists, for the number of layers they run.
    draft: Option<(usize, Lowered)>,
    pub(super) capacity: usize,
    pub(super) pos: usize,
    gpu_bytes: u64,
    weight_bytes: u64,
    kv_bytes_per_token: usize,
    /// The kernel variants it runs.
    options: KernelOptions,
    /// The next decode step's commands, encoded while the GPU ran the step before (its
    /// position, its command buffer): a decode step's commands depend only on its position
    /// (the token and the position reach the kernels through buffers written before submit),
    /// so the CPU's share of a step (encoding every dispatch) overlaps the GPU's.
    next_decode: Option<(Encoded, wgpu::CommandBuffer)>,
    /// The decode steps a greedy run-ahead submitted after the last pass, in order, each on the
    /// GPU's argmax of the logits before it ([`crate::backend::Pass::run_ahead`]).
    ahead: VecDeque<Ahead>,
    /// Most decode steps a greedy run-ahead keeps submitted ahead, 1 to [`MAX_RUN_AHEAD`]
    /// ([`GpuBackend::set_run_ahead_steps`]).
    run_ahead_steps: usize,
    /// Run-ahead steps a later pass took as run, and those it dropped for another token.
    ahead_counts: RunAheadCounts,
    /// Whether decode steps encode the next one's commands ahead (on unless switched off:
    /// [`GpuBackend::set_encode_ahead`]).
    encode_ahead: bool,
    /// CPU seconds encoding decode steps' commands took, and how many were encoded.
    encoding: (f64, usize),
}

/// Most decode steps a greedy run-ahead can keep submitted ahead of the caller
/// ([`GpuBackend::set_run_ahead_steps`]).
pub const MAX_RUN_AHEAD: usize = 3;

/// Decode steps a greedy run-ahead keeps submitted ahead by default.
pub const RUN_AHEAD_STEPS: usize = 1;

/// Checks a count of decode steps to keep submitted ahead: 1 to [`MAX_RUN_AHEAD`].
pub fn check_run_ahead_steps(steps: usize) -> Result<()> {
    if (1..=MAX_RUN_AHEAD).contains(&steps) {
        Ok(())
    } else {
        Err(Error::InvalidParams(format!("run-ahead steps must be 1 to {MAX_RUN_AHEAD}, not {steps}")))
    }
}

/// A decode step a greedy run-ahead submitted before its token was chosen.
struct Ahead {
    /// Its position.
    pos: usize,
    /// Its token: the GPU's argmax of the pass before, known once that pass's logits (and the
    /// id after them) were read back (until then `None`).
    token: Option<u32>,
    /// Its submission, to wait for.
    submission: wgpu::SubmissionIndex,
}

/// How a run-ahead fared since load ([`GpuBackend::run_ahead_counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct RunAheadCounts {
    /// Steps a later pass took as run: the caller chose the token the GPU ranked first.
    pub taken: usize,
    /// Steps dropped: the caller chose another token (a tie the sampler broke otherwise, a
    /// forced token, a draw other than the argmax), truncated the cache, or ran another kind
    /// of pass there.
    pub dropped: usize,
}

/// Which step a command buffer encodes: its position, and whether it ranks its logits for a
/// run-ahead (then it also runs the argmax and reads back into [`readback_slot`]'s buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Encoded {
    pos: usize,
    ranked: bool,
}

/// Which readback buffer a step that ends before position `end` (its last token's position
/// plus one) copies its logits into: 0, `staging`, for every step that does not rank its
/// logits; a ranked one takes `end` modulo [`MAX_RUN_AHEAD`] + 1 (0: `staging`, `i`:
/// `staging_ahead[i - 1]`), so the step being read back and the at most [`MAX_RUN_AHEAD`]
/// submitted after it, at the positions right after it, never share a buffer. (Steps a run
/// dropped may still be queued with other positions, but before the step read, so their copies
/// land first.)
fn readback_slot(end: usize, ranked: bool) -> usize {
    if ranked {
        end % (MAX_RUN_AHEAD + 1)
    } else {
        0
    }
}

/// One op of the forward pass with the dispatches it lowers to, for each kind of step: one
/// token (decode) or many (prefill), while every token sees at most one attention chunk of
/// positions (short) or past that (long).
pub(super) struct Op {
    /// One token, short context.
    pub(super) one_short: Vec<Dispatch>,
    /// One token, long context.
    pub(super) one_long: Vec<Dispatch>,
    /// Many tokens, short context.
    pub(super) many_short: Vec<Dispatch>,
    /// Many tokens, long context.
    pub(super) many_long: Vec<Dispatch>,
}

impl Op {
    /// The same dispatches for every kind of step.
    fn same(d: Vec<Dispatch>) -> Op {
        Op::by_tokens(d.clone(), d)
    }

    /// A linear layer: matvec for one token (decode), matmul for many (prefill).
    fn linear(one: Dispatch, many: Dispatch) -> Op {
        Op::by_tokens(vec![one], vec![many])
    }

    /// `one` for one token, `many` for many, whatever the context.
    fn by_tokens(one: Vec<Dispatch>, many: Vec<Dispatch>) -> Op {
        Op { one_short: one.clone(), one_long: one, many_short: many.clone(), many_long: many }
    }
}

/// One kind of step's command lists, by the attention form its context allows.
struct Lowered {
    /// While the step's context is short ([`KernelOptions::short_attention`]).
    short: Vec<Dispatch>,
    /// Past that.
    long: Vec<Dispatch>,
    /// Lowered for many tokens.
    many: bool,
    /// The kernel options, which say how long a context is short.
    options: KernelOptions,
}

impl Lowered {
    /// Lowers the op list for one token (`many == false`) or many.
    fn new(ops: &[&Op], many: bool, options: KernelOptions) -> Self {
        let lower = |pick: fn(&Op) -> &Vec<Dispatch>| ops.iter().flat_map(|&op| pick(op).iter().cloned()).collect();
        if many {
            Lowered { short: lower(|op| &op.many_short), long: lower(|op| &op.many_long), many, options }
        } else {
            Lowered { short: lower(|op| &op.one_short), long: lower(|op| &op.one_long), many, options }
        }
    }

    /// The list for a step of `n_tokens` from position `pos`.
    fn pick(&self, pos: usize, n_tokens: usize) -> &[Dispatch] {
        if self.options.short_attention(pos, n_tokens, self.many) {
            &self.short
        } else {
            &self.long
        }
    }
}

/// The embedding table or an LM head of its own, in as many row bands as the adapter's
/// largest binding needs (one, unless the vocabulary is large and the binding small).
fn banded(ctx: &GpuContext, t: &QTensor, gpu_bytes: &mut u64) -> Result<RowBands> {
    let (rows, cols) = t.shape().dims2().map_err(Error::backend)?;
    let m = RowBands::upload(ctx, &repack(t)?, rows as u32, cols as u32)?;
    *gpu_bytes += m.bytes();
    Ok(m)
}

fn matrix(ctx: &GpuContext, t: &QTensor, gpu_bytes: &mut u64) -> Result<GpuMatrix> {
    let (rows, cols) = t.shape().dims2().map_err(Error::backend)?;
    let m = GpuMatrix::upload(ctx, &repack(t)?, rows as u32, cols as u32)?;
    *gpu_bytes += m.bytes();
    Ok(m)
}

/// Several matrices with the same columns, stacked row-wise into one (see [`stack`]; in
/// one layout, see [`repack_together`]).
fn stacked(ctx: &GpuContext, parts: &[&QTensor], gpu_bytes: &mut u64) -> Result<GpuMatrix> {
    let mut rows = 0;
    let mut cols = None;
    for t in parts {
        let (r, c) = t.shape().dims2().map_err(Error::backend)?;
        if cols.is_some_and(|cols| cols != c) {
            return Err(Error::Backend(format!("cannot stack a matrix of {c} columns under one of {cols:?}")));
        }
        cols = Some(c);
        rows += r;
    }
    let m = GpuMatrix::upload(ctx, &stack(repack_together(parts)?)?, rows as u32, cols.unwrap_or(0) as u32)?;
    *gpu_bytes += m.bytes();
    Ok(m)
}

/// Gate and up projections interleaved row by row (gate i, up i), for the SwiGLU epilogue.
fn gate_up(ctx: &GpuContext, gate: &QTensor, up: &QTensor, gpu_bytes: &mut u64) -> Result<GpuMatrix> {
    let (rows, cols) = gate.shape().dims2().map_err(Error::backend)?;
    if up.shape().dims2().map_err(Error::backend)? != (rows, cols) {
        return Err(Error::Backend(format!("the gate projection is {:?} but the up projection {:?}", gate.shape(), up.shape())));
    }
    let [g, u]: [_; 2] = repack_together(&[gate, up])?.try_into().map_err(|_| Error::Backend("gate and up: two matrices".into()))?;
    let m = GpuMatrix::upload(ctx, &interleave_rows(g, u, rows)?, 2 * rows as u32, cols as u32)?;
    *gpu_bytes += m.bytes();
    Ok(m)
}

impl GpuBackend {
    /// Uploads the weights and prepares every dispatch of a decode step and of a prefill
    /// pass. `context_len` sizes the KV cache (default [`DEFAULT_CONTEXT`], at most the model's
    /// window; see [`crate::backend::kv_capacity`]).
    /// The kernel variants are those that suit the device ([`KernelOptions::for_device`]).
    pub async fn new(cfg: &Config, weights: Weights, context_len: Option<usize>) -> Result<Self> {
        let ctx = GpuContext::new().await?;
        let options = KernelOptions::for_device(&ctx);
        Self::with_options(ctx, cfg, weights, context_len, options).await
    }

    /// As [`GpuBackend::new`], on a device already opened, with the kernel variants `options` names (subgroups, a
    /// half-float KV cache).
    pub async fn with_options(
        ctx: GpuContext,
        cfg: &Config,
        weights: Weights,
        context_len: Option<usize>,
        options: KernelOptions,
    ) -> Result<Self> {
        let scopes = ctx.error_scopes();
        let k = Kernels::with_options(&ctx, options)?;
        let capacity = crate::backend::kv_capacity(cfg, context_len, DEFAULT_CONTEXT)?;
        let (hd, kv, qd) = (cfg.head_dim as u32, cfg.kv_dim() as u32, (cfg.n_heads * cfg.head_dim) as u32);
        if !hd.is_multiple_of(2) {
            return Err(Error::Backend(format!("heads of {hd} dimensions cannot run on the GPU (RoPE and the cache need pairs)")));
        }
        let b = PREFILL_BATCH;
        let mut gpu_bytes = 0u64;
        let mut weight_bytes = 0u64;
        let mut buf = |label: &str, n: usize| {
            gpu_bytes += (n * 4) as u64;
            ctx.storage(label, &vec![0f32; n])
        };
        // Activations: row i belongs to the step's token i (decode uses row 0).
        let qkv_width = qd as usize + 2 * kv as usize;
        let x = buf("x", b * cfg.dim); //                   residual stream [B, dim]
        let qkv = buf("qkv", b * qkv_width); //             projections     [B, n_heads * hd + 2 kv]
        let q = buf("q", b * qd as usize); //               rotated queries [B, n_heads * hd]
        let att = buf("att", b * qd as usize); //           attention out   [B, n_heads * hd]
        let hidden = buf("hidden", b * cfg.ffn_dim); //     SwiGLU out      [B, ffn]
        let logits = buf("logits", MAX_VERIFY_TOKENS * cfg.vocab_size); // logits [verify tokens, vocab]; decode row 0
        let att_shape = [cfg.n_heads as u32, cfg.n_kv_heads as u32, hd];
        // split-K attention's chunk statistics            [B, n_heads, ceil(ctx / split_chunk), 2 + hd]
        let att_parts = buf("attention parts", ops::attention_parts_len(att_shape, capacity, b, options.split_chunk));
        // Attention in the output projection's prologue fits models up to this width.
        let fuse_attention = qd as usize <= kernels::FUSED_ATTENTION_MAX_WIDTH;
        // The per-head projection's parts over a short context  [n_heads, head_chunks, 2 + dim]
        let head_chunks = options.fused_positions.div_ceil(options.split_chunk.max(1)).max(1);
        let per_head_fits = options.per_head_attention && fuse_attention && att_shape[0] * head_chunks <= ops::MAX_HEAD_PARTS;
        let head_parts = buf("head parts", if per_head_fits { att_shape[0] as usize * head_chunks as usize * (2 + cfg.dim) } else { 1 });
        let table = ctx.storage("rope", &ops::rope_table(capacity, &weights.rope));
        gpu_bytes += table.size();
        let step = kernels::step_uniform(&ctx, 0, 1);
        let tokens = ctx.storage("tokens", &vec![0u32; b]);
        let staging = ctx.staging("logits readback", ((MAX_VERIFY_TOKENS * cfg.vocab_size + 1) * 4) as u64);
        let staging_ahead = (0..MAX_RUN_AHEAD).map(|_| ctx.staging("run-ahead readback", ((cfg.vocab_size + 1) * 4) as u64)).collect();
        let eps = cfg.rms_eps;
        // A linear layer, as matvec (decode) and matmul (prefill).
        let linear = |op: LinearOp| -> Result<Op> { Ok(Op::linear(k.matvec(&ctx, &op, &step)?, k.matmul(&ctx, &op, &step)?)) };
        // Every op of the forward pass, in order. Buffers made below live on through the
        // bind groups that reference them.
        let mut ops = Vec::new();
        let mut layer_ends = Vec::new();
        let mut per_head_layers = 0;
        let mut key_caches = Vec::new();
        let Weights { token_embd, output_norm, output, layers, .. } = weights;
        let embd = banded(&ctx, &token_embd, &mut weight_bytes)?;
        // Uploaded: the file's copy goes now, before the blocks are read.
        drop(token_embd);
        ctx.settle().await?;
        let lookups = embd
            .bands
            .iter()
            .map(|(first, m)| k.embedding(&ctx, m, *first, Bind(&x, 0, None), &step, &tokens))
            .collect::<Result<Vec<_>>>()?;
        ops.push(Op::same(lookups)); // x = E[tokens], a dispatch per band
        for l in layers {
            let l = l?;
            let attn_norm = ctx.storage("attn_norm", &l.attn_norm);
            let ffn_norm = ctx.storage("ffn_norm", &l.ffn_norm);
            // Q, K and V stacked into one matrix, gate and up interleaved into another: one
            // dispatch each.
            let wqkv = stacked(&ctx, &[&l.wq, &l.wk, &l.wv], &mut weight_bytes)?;
            let wo = matrix(&ctx, &l.wo, &mut weight_bytes)?;
            let w_gate_up = gate_up(&ctx, &l.w_gate, &l.w_up, &mut weight_bytes)?;
            let w_down = matrix(&ctx, &l.w_down, &mut weight_bytes)?;
            // [ctx, kv] f32, or with kv_f16 [ctx, kv / 2] u32 of two halves each.
            let cache_words = if options.kv_f16 { capacity * kv as usize / 2 } else { capacity * kv as usize };
            let k_cache = ctx.storage("k cache", &vec![0u32; cache_words]);
            let v_cache = ctx.storage("v cache", &vec![0u32; cache_words]);
            gpu_bytes += 2 * (cache_words * 4) as u64;
            key_caches.push(k_cache.clone());
            // Attention: qkv = Wqkv norm(x); q, K/V cache[pos..] = rope(q), rope(k), v, each
            // with its bias and q, k with their head norms where the model has them (decode: in
            // one dispatch, the projection's epilogue, when it has neither).
            let cache = |c| Bind(c, 0, None);
            let qkv_norm = Some((&attn_norm, eps));
            let bias = l.qkv_bias.as_ref().map(|b| ctx.storage("qkv bias", &b.stacked()));
            let head_gain = l.head_norm.as_ref().map(|n| ctx.storage("head norm", &[&n.q[..], &n.k].concat()));
            gpu_bytes += bias.as_ref().map_or(0, |b| b.size()) + head_gain.as_ref().map_or(0, |g| g.size());
            let rope_kv = RopeKvOp {
                bias: bias.as_ref(),
                head_norm: head_gain.as_ref().map(|g| (g, eps)),
                ..RopeKvOp::new(att_shape, &qkv, Bind(&q, 0, None), cache(&k_cache), cache(&v_cache), &table)
            };
            let project = LinearOp { norm: qkv_norm, ..LinearOp::new(&wqkv, &x, Bind(&qkv, 0, None)) };
            let rope_kv_dispatch = k.rope_kv(&ctx, &rope_kv, &step)?;
            let one = if rope_kv.bias.is_none() && rope_kv.head_norm.is_none() {
                let epilogue = RopeKv { shape: att_shape, keys: cache(&k_cache), values: cache(&v_cache), table: &table };
                vec![k.matvec(
                    &ctx,
                    &LinearOp { norm: qkv_norm, rope_kv: Some(epilogue), ..LinearOp::new(&wqkv, &x, Bind(&q, 0, None)) },
                    &step,
                )?]
            } else {
                vec![k.matvec(&ctx, &project, &step)?, rope_kv_dispatch.clone()]
            };
            ops.push(Op::by_tokens(one, vec![k.matmul(&ctx, &project, &step)?, rope_kv_dispatch]));
            // att = attention(q, cache); x += Wo att (decode over a short context: one
            // dispatch, attention in the projection's prologue; past it two, split-K's part 1
            // and the projection merging its chunks in its prologue).
            let a =
                k.attention(&ctx, att_shape, capacity, &q, &k_cache, &v_cache, Bind(&att_parts, 0, None), Bind(&att, 0, None), &step)?;
            let wo_op = LinearOp { accumulate: true, ..LinearOp::new(&wo, &att, Bind(&x, 0, None)) };
            let (wo_one, wo_many) = (k.matvec(&ctx, &wo_op, &step)?, k.matmul(&ctx, &wo_op, &step)?);
            // The per-head form where the projection's blocks fit a head's columns.
            let block = wo.format.block();
            let per_head = per_head_fits && block <= ops::HEADS_MIN_BLOCK_COLUMNS && hd.is_multiple_of(block);
            let merge = per_head.then_some(HeadParts { parts: Bind(&head_parts, 0, None), n_heads: att_shape[0], n_chunks: head_chunks });
            per_head_layers += usize::from(per_head);
            let (one_short, one_long) = if fuse_attention {
                let input = AttentionInput { shape: att_shape, keys: &k_cache, values: &v_cache };
                let short = if per_head {
                    let heads = HeadsInput { shape: att_shape, keys: &k_cache, values: &v_cache, n_chunks: head_chunks };
                    LinearOp { heads: Some(heads), ..LinearOp::new(&wo, &q, Bind(&head_parts, 0, None)) }
                } else {
                    LinearOp { accumulate: true, attention: Some(input), ..LinearOp::new(&wo, &q, Bind(&x, 0, None)) }
                };
                let merged = CombineInput {
                    shape: att_shape,
                    parts: Bind(&att_parts, 0, None),
                    n_chunks: ops::attention_chunks(capacity, options.split_chunk),
                };
                let long = LinearOp { accumulate: true, combine: Some(merged), ..LinearOp::new(&wo, &q, Bind(&x, 0, None)) };
                (vec![k.matvec(&ctx, &short, &step)?], vec![a.partial.clone(), k.matvec(&ctx, &long, &step)?])
            } else {
                (vec![a.single.clone(), wo_one.clone()], vec![a.partial.clone(), a.combine.clone(), wo_one])
            };
            ops.push(Op {
                one_short,
                one_long,
                many_short: vec![a.single, wo_many.clone()],
                many_long: vec![a.partial, a.combine, wo_many],
            });
            // Feed-forward: hidden = silu(gate) * up, [gate | up] = Wgu norm(x); x += Wd hidden
            // (after a per-head projection, decode over a short context: x + the heads' parts
            // merged, read by the first and added by the second).
            let gate_up_op =
                || LinearOp { norm: Some((&ffn_norm, eps)), glu: true, ..LinearOp::new(&w_gate_up, &x, Bind(&hidden, 0, None)) };
            let down_op = || LinearOp { accumulate: true, ..LinearOp::new(&w_down, &hidden, Bind(&x, 0, None)) };
            for (op, merged) in
                [(gate_up_op(), LinearOp { merge_in: merge, ..gate_up_op() }), (down_op(), LinearOp { merge_out: merge, ..down_op() })]
            {
                let mut lowered = linear(op)?;
                if merge.is_some() {
                    lowered.one_short = vec![k.matvec(&ctx, &merged, &step)?];
                }
                ops.push(lowered);
            }
            layer_ends.push(ops.len());
            ctx.settle().await?;
        }
        // The LM head on the step's last token only, its final norm inside. Tied embeddings
        // (no output.weight): one table serves the lookup and the LM head.
        let out_norm = ctx.storage("output_norm", &output_norm);
        let head = match output {
            Some(w) => Some(banded(&ctx, &w, &mut weight_bytes)?),
            None => None,
        };
        let head = head.as_ref().unwrap_or(&embd);
        // A dispatch per band of the head, each writing its rows of the logits.
        let head_ops = |verify: bool| -> Result<Vec<Dispatch>> {
            let band = |(first, m): &(u32, GpuMatrix)| {
                let op = LinearOp {
                    last_token: !verify,
                    norm: Some((&out_norm, eps)),
                    y_stride: Some(head.rows),
                    ..LinearOp::new(m, &x, Bind(&logits, u64::from(*first) * 4, None))
                };
                if verify {
                    k.matmul(&ctx, &op, &step)
                } else {
                    k.matvec(&ctx, &op, &step)
                }
            };
            head.bands.iter().map(band).collect()
        };
        // Verify: the LM head on every token of the step, into logits rows 0.. .
        let verify_head = Op::same(head_ops(true)?);
        ops.push(Op::same(head_ops(false)?));
        gpu_bytes += weight_bytes;
        let all: Vec<&Op> = ops.iter().collect();
        let (decode, prefill) = (Lowered::new(&all, false, options), Lowered::new(&all, true, options));
        let body = &all[..all.len() - 1];
        let verify = Lowered::new(&[body, &[&verify_head]].concat(), true, options);
        let argmax = k.argmax(&ctx, Bind(&logits, 0, Some((cfg.vocab_size * 4) as u64)), cfg.vocab_size as u32, &tokens)?;
        scopes.finish("loading the model onto the GPU").await?;
        ctx.check()?;
        Ok(GpuBackend {
            kv_bytes_per_token: cfg.kv_bytes_per_token() / if options.kv_f16 { 2 } else { 1 },
            options,
            ctx,
            cfg: cfg.clone(),
            step,
            tokens,
            logits,
            staging,
            staging_ahead,
            argmax,
            x,
            q,
            key_caches,
            att_shape,
            kernels: k,
            inspector: None,
            decode,
            prefill,
            verify,
            ops,
            layer_ends,
            per_head_layers,
            verify_head,
            draft: None,
            capacity,
            pos: 0,
            gpu_bytes,
            weight_bytes,
            next_decode: None,
            ahead: VecDeque::new(),
            run_ahead_steps: RUN_AHEAD_STEPS,
            ahead_counts: RunAheadCounts::default(),
            encode_ahead: true,
            encoding: (0.0, 0),
        })
    }

    /// Kernel dispatches the next decode step runs (fewer while the context is short:
    /// [`KernelOptions::fused_positions`]).
    pub fn dispatches_per_step(&self) -> usize {
        self.decode.pick(self.pos, 1).len()
    }

    /// What one decode step costs in GPU work and traffic.
    pub fn step_shape(&self) -> StepShape {
        StepShape {
            dispatches: self.decode.short.len(),
            dispatches_long_context: self.decode.long.len(),
            fused_positions: self.options.fused_positions as usize,
            per_head_layers: self.per_head_layers,
            passes: 1,
            submits: 1,
            readback_bytes: self.cfg.vocab_size * 4,
            gpu_bytes: self.gpu_bytes,
            prefill_batch: PREFILL_BATCH,
        }
    }

    /// Bytes of weights the kernels read per decode step.
    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes
    }

    /// The kernel variants it runs (subgroups, the KV cache's precision).
    pub fn kernel_options(&self) -> KernelOptions {
        self.options
    }

    /// Adapter details.
    pub fn gpu_info(&self) -> &super::GpuInfo {
        &self.ctx.info
    }

    /// The device and queue the model runs on.
    pub fn context(&self) -> &GpuContext {
        &self.ctx
    }

    /// Times one decode step of `token` by kernel, natively and in a browser. Two real steps
    /// run, each appending the token to the KV cache: an ordinary one, timed from writing its
    /// inputs to having its logits back (the step's wall time), then the profiled one. Where
    /// the device has timestamp queries inside passes the profiled step is an ordinary step
    /// too, one pass and one submit, with a timestamp after every dispatch; where it has them
    /// at pass edges only (a browser's WebGPU) each dispatch is a pass of its own in the one
    /// submit, its end stamped. Then the step once more with timestamps at its ends only (its
    /// GPU time as it runs), and the dispatch floor. With no timestamps at all each dispatch
    /// is submitted and awaited alone, less an empty submit's time (natively only: a
    /// browser cannot wait for the GPU without a timestamp's help).
    pub async fn profile_decode(&mut self, token: u32) -> Result<StepProfile> {
        use web_time::Instant;
        if token as usize >= self.cfg.vocab_size || self.pos + 2 > self.capacity {
            return Err(Error::Backend("cannot profile: bad token or full context".into()));
        }
        let t = Instant::now();
        self.run(&[token], Lists::Forward, 1, 0).await?;
        let wall_seconds = t.elapsed().as_secs_f64();
        let list = self.decode.pick(self.pos, 1).to_vec();
        self.ctx.queue.write_buffer(&self.tokens, 0, bytemuck::cast_slice(&[token]));
        self.ctx.queue.write_buffer(&self.step, 0, bytemuck::bytes_of(&kernels::StepParams::new(self.pos as u32, 1)));
        let place = self.ctx.info.timestamps;
        let (method, seconds, quantized) = match place {
            Timestamps::InsidePasses | Timestamps::PassEdges => {
                let (seconds, quantized) = self.dispatch_seconds_by_timestamps(&list, kernels::Stamps::EachDispatch).await?;
                let method = if place == Timestamps::InsidePasses { "timestamps in one pass" } else { "timestamps, a pass per dispatch" };
                (method, seconds, quantized)
            }
            Timestamps::None => ("one submit per dispatch", self.dispatch_seconds_alone(&list)?, false),
        };
        let gpu_seconds = seconds.iter().sum();
        let mut kernels: Vec<KernelTime> = Vec::new();
        for (d, seconds) in list.iter().zip(seconds) {
            match kernels.iter_mut().find(|k| k.kernel == d.kernel) {
                Some(k) => {
                    k.dispatches += 1;
                    k.seconds += seconds;
                    k.weight_bytes += d.weight_bytes;
                }
                None => kernels.push(KernelTime {
                    kernel: d.kernel.clone(),
                    dispatches: 1,
                    seconds,
                    weight_bytes: d.weight_bytes,
                    weight_gb_per_s: 0.0,
                }),
            }
        }
        for k in &mut kernels {
            if k.weight_bytes > 0 && k.seconds > 0.0 {
                k.weight_gb_per_s = k.weight_bytes as f64 / k.seconds / 1e9;
            }
        }
        let step_gpu_seconds = match place {
            Timestamps::None => None,
            _ => Some(self.dispatch_seconds_by_timestamps(&list, kernels::Stamps::Ends).await?.0[0]),
        };
        let (dispatch_floor_seconds, dispatch_floor_seconds_timed_each) = match list.iter().find(|d| d.kernel.starts_with("embedding")) {
            Some(lookup) if place != Timestamps::None && list.len() > 1 => {
                let chain = vec![lookup.clone(); list.len()];
                let whole = self.dispatch_seconds_by_timestamps(&chain, kernels::Stamps::Ends).await?.0[0];
                let each = self.dispatch_seconds_by_timestamps(&chain, kernels::Stamps::EachDispatch).await?.0;
                (Some(whole / chain.len() as f64), Some(each[1..].iter().sum::<f64>() / (each.len() - 1) as f64))
            }
            _ => (None, None),
        };
        self.pos += 1;
        self.ctx.check()?;
        kernels.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        Ok(StepProfile {
            method,
            timestamps_quantized: quantized,
            position: self.pos - 1,
            kernels,
            gpu_seconds,
            wall_seconds,
            step_gpu_seconds,
            dispatch_floor_seconds,
            dispatch_floor_seconds_timed_each,
        })
    }

    /// The GPU time of each of `list`'s dispatches, encoded as a step is (one submit, the
    /// logits read back) with a timestamp before the first and after each, in the place the
    /// device has them ([`kernels::encode_timed`]); or, with [`kernels::Stamps::Ends`], the
    /// whole list's time alone, in one pass. Also whether every timestamp was a whole multiple
    /// of 100 us, as a browser that coarsens them to thwart timing attacks gives them
    /// (Chromium does unless started with `--enable-webgpu-developer-features`).
    async fn dispatch_seconds_by_timestamps(&self, list: &[Dispatch], stamps: kernels::Stamps) -> Result<(Vec<f64>, bool)> {
        let ctx = &self.ctx;
        let count = if stamps == kernels::Stamps::Ends { 2 } else { list.len() as u32 + 1 };
        let bytes = u64::from(count) * wgpu::QUERY_SIZE as u64;
        let queries =
            ctx.device.create_query_set(&wgpu::QuerySetDescriptor { label: Some("profile"), ty: wgpu::QueryType::Timestamp, count });
        let buffer = |usage| {
            ctx.device.create_buffer(&wgpu::BufferDescriptor { label: Some("timestamps"), size: bytes, usage, mapped_at_creation: false })
        };
        let resolved = buffer(wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC);
        let readback = buffer(wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
        let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("profile") });
        kernels::encode_timed(&mut encoder, list, 1, Some((&queries, stamps, ctx.info.timestamps)));
        encoder.resolve_query_set(&queries, 0..count, &resolved, 0);
        encoder.copy_buffer_to_buffer(&resolved, 0, &readback, 0, bytes);
        encoder.copy_buffer_to_buffer(&self.logits, 0, &self.staging, 0, (self.cfg.vocab_size * 4) as u64);
        ctx.queue.submit([encoder.finish()]);
        ctx.map_f32(&self.staging, self.cfg.vocab_size, None).await?;
        // Each timestamp is a u64 of ticks, low word first.
        let words = ctx.map_f32(&readback, 2 * count as usize, None).await?;
        let ticks: Vec<u64> = words.chunks_exact(2).map(|w| u64::from(w[0].to_bits()) | (u64::from(w[1].to_bits()) << 32)).collect();
        let period = f64::from(ctx.queue.get_timestamp_period());
        let coarse = (period - 1.0).abs() < 1e-9 && ticks.iter().all(|&t| t % 100_000 == 0);
        Ok((ticks.windows(2).map(|t| t[1].saturating_sub(t[0]) as f64 * period / 1e9).collect(), coarse))
    }

    /// The time of each of `list`'s dispatches, each submitted and awaited alone, less an
    /// empty submit's time (natively; a browser has no blocking wait).
    #[cfg(not(target_arch = "wasm32"))]
    fn dispatch_seconds_alone(&self, list: &[Dispatch]) -> Result<Vec<f64>> {
        use web_time::Instant;
        let wait = |ctx: &GpuContext, encoder: wgpu::CommandEncoder| -> Result<f64> {
            let t = Instant::now();
            ctx.queue.submit([encoder.finish()]);
            ctx.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| Error::GpuLost(format!("poll failed: {e}")))?;
            Ok(t.elapsed().as_secs_f64())
        };
        let new_encoder = |ctx: &GpuContext| ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("profile") });
        wait(&self.ctx, new_encoder(&self.ctx))?; // flush the writes
        let mut empty = f64::INFINITY;
        for _ in 0..20 {
            empty = empty.min(wait(&self.ctx, new_encoder(&self.ctx))?);
        }
        let mut seconds = Vec::with_capacity(list.len());
        for d in list {
            let mut encoder = new_encoder(&self.ctx);
            kernels::encode(&mut encoder, std::slice::from_ref(d), 1);
            seconds.push((wait(&self.ctx, encoder)? - empty).max(0.0));
        }
        Ok(seconds)
    }

    /// In a browser there is no timing a kernel without timestamp queries.
    #[cfg(target_arch = "wasm32")]
    fn dispatch_seconds_alone(&self, _list: &[Dispatch]) -> Result<Vec<f64>> {
        Err(Error::Backend(format!(
            "cannot time kernels on {}: its WebGPU adapter has no timestamp queries (the feature timestamp-query)",
            self.ctx.info.name
        )))
    }

    /// Runs `tokens` (at most [`PREFILL_BATCH`], within the context: [`Backend::forward`]
    /// checked) at the current position in one pass and one submit, with the command lists
    /// `lists` names, and reads back the first `read` rows of logits (0: no readback).
    ///
    /// With `run_ahead` > 0 (a greedy caller, [`crate::backend::Pass::run_ahead`]: the steps it
    /// will most likely ask for after this one; a pass through every layer whose last logits
    /// are read) the pass also ranks its logits on the GPU (argmax.wgsl, into `tokens[0]`), and
    /// the next decode steps, up to `run_ahead` and the backend's own limit, are submitted at
    /// once, each on the argmax of the one before, before this pass's logits are read back: the
    /// GPU runs them while the caller reads, samples and asks. A one-token pass of the first
    /// one's very token at its position then takes it as run (its commands are in the queue
    /// already; only its readback is awaited); any other pass drops them all, and the queue's
    /// order makes their writes harmless (the next step at a position writes the same cache
    /// row again; a readback waits for its own submit).
    async fn run(&mut self, tokens: &[u32], lists: Lists, read: usize, run_ahead: usize) -> Result<Option<(Vec<f32>, bool)>> {
        self.ctx.check()?;
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= self.cfg.vocab_size) {
            return Err(Error::Backend(format!("token id {bad} is outside the vocabulary of {}", self.cfg.vocab_size)));
        }
        let n = tokens.len() as u32;
        let decode = matches!(lists, Lists::Forward) && n == 1 && read == 1;
        let run_ahead = if matches!(lists, Lists::Forward) && read == 1 { run_ahead.min(self.run_ahead_steps) } else { 0 };
        let vocab = self.cfg.vocab_size;
        let floats = read * vocab;
        let taken = match self.ahead.pop_front() {
            Some(a) if decode && a.pos == self.pos && a.token == Some(tokens[0]) => Some(a),
            Some(_) => {
                self.drop_ahead(1);
                None
            }
            None => None,
        };
        let ran_ahead = taken.is_some();
        // A step taken as run ranked its logits (it was encoded to); a fresh one does if asked.
        let ranked = ran_ahead || run_ahead > 0;
        let end = self.pos + tokens.len();
        let submission = match taken {
            Some(a) => {
                self.ahead_counts.taken += 1;
                a.submission
            }
            None => {
                // The buffers the commands read are written first: queue writes come before
                // any later submit, whenever its commands were encoded.
                self.ctx.queue.write_buffer(&self.tokens, 0, bytemuck::cast_slice(tokens));
                self.ctx.queue.write_buffer(&self.step, 0, bytemuck::bytes_of(&kernels::StepParams::new(self.pos as u32, n)));
                let key = Encoded { pos: self.pos, ranked };
                // Commands encoded ahead for another step stay for it (a step's commands
                // depend only on its position and whether it ranks).
                let commands = match self.next_decode.take() {
                    Some((encoded, commands)) if decode && encoded == key => commands,
                    other => {
                        self.next_decode = other;
                        let list = match lists {
                            Lists::Forward if n == 1 => &self.decode,
                            Lists::Forward => &self.prefill,
                            Lists::Verify => &self.verify,
                            Lists::Draft => &self.draft.as_ref().ok_or_else(|| Error::Backend("no self-draft prepared".into()))?.1,
                        };
                        let (commands, seconds) = self.encode_step(list, self.pos, n, floats, ranked);
                        if decode {
                            self.count_encoding(seconds);
                        }
                        commands
                    }
                };
                self.ctx.queue.submit([commands])
            }
        };
        self.pos = end;
        // The steps ahead, each on the argmax of the one before (this one's, then each ahead
        // step's own): a token reaches the embedding through `tokens`, which the step before's
        // argmax writes; each position is written after the submit before it (so that one
        // still reads its own). Steps already ahead (a taken step's followers) stay queued.
        let mut next = self.ahead.back().map_or(self.pos, |a| a.pos + 1);
        while self.ahead.len() < run_ahead && next < self.capacity {
            self.ctx.queue.write_buffer(&self.step, 0, bytemuck::bytes_of(&kernels::StepParams::new(next as u32, 1)));
            let key = Encoded { pos: next, ranked: true };
            let commands = match self.next_decode.take() {
                Some((encoded, commands)) if encoded == key => commands,
                _ => {
                    let (commands, seconds) = self.encode_step(&self.decode, next, 1, vocab, true);
                    self.count_encoding(seconds);
                    commands
                }
            };
            let submission = self.ctx.queue.submit([commands]);
            self.ahead.push_back(Ahead { pos: next, token: None, submission });
            next += 1;
        }
        // A decode step is most often followed by the next one: the commands of the next
        // submit are encoded now, while the GPU runs (before the readback's wait). Anything
        // else (a truncated cache, a prefill, a verify pass) runs its own and drops these
        // unsubmitted.
        if decode && self.encode_ahead && next < self.capacity {
            let ranked_next = run_ahead > 0;
            let (commands, seconds) = self.encode_step(&self.decode, next, 1, vocab, ranked_next);
            self.count_encoding(seconds);
            self.next_decode = Some((Encoded { pos: next, ranked: ranked_next }, commands));
        }
        if read == 0 {
            return Ok(None);
        }
        let buffer = self.readback(end, ranked);
        let mut logits = self.ctx.map_f32(buffer, floats + usize::from(ranked), Some(submission)).await?;
        if ranked {
            let token = logits.pop().map(f32::to_bits);
            // The step right after this one runs on that token.
            if let Some(a) = self.ahead.iter_mut().find(|a| a.pos == end) {
                a.token = token;
            }
        }
        Ok(Some((logits, ran_ahead)))
    }

    /// One step's commands for `n` tokens from position `pos` from `lists`, with the first
    /// `floats` logits copied to the readback buffer (0: none); `ranked`, the argmax of the
    /// logits' first row into `tokens[0]` after them, copied to the readback after the
    /// logits. Returns them and the CPU seconds encoding them took.
    fn encode_step(&self, lists: &Lowered, pos: usize, n: u32, floats: usize, ranked: bool) -> (wgpu::CommandBuffer, f64) {
        let start = web_time::Instant::now();
        let mut encoder = self.ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("forward") });
        let argmax = if ranked { std::slice::from_ref(&self.argmax) } else { &[] };
        kernels::encode_lists(&mut encoder, &[lists.pick(pos, n as usize), argmax], n);
        let buffer = self.readback(pos + n as usize, ranked);
        if floats > 0 {
            encoder.copy_buffer_to_buffer(&self.logits, 0, buffer, 0, (floats * 4) as u64);
        }
        if ranked {
            encoder.copy_buffer_to_buffer(&self.tokens, 0, buffer, (floats * 4) as u64, 4);
        }
        (encoder.finish(), start.elapsed().as_secs_f64())
    }

    /// The readback buffer of a step ending before `end` ([`readback_slot`]).
    fn readback(&self, end: usize, ranked: bool) -> &wgpu::Buffer {
        match readback_slot(end, ranked) {
            0 => &self.staging,
            i => &self.staging_ahead[i - 1],
        }
    }

    /// Drops every step still submitted ahead, counting them with `already` more taken out of
    /// the queue (a later pass will not take them: their writes are harmless, see
    /// [`GpuBackend::run`]).
    fn drop_ahead(&mut self, already: usize) {
        self.ahead_counts.dropped += already + self.ahead.len();
        self.ahead.clear();
    }

    /// Counts one decode step's encoding, `seconds` of the CPU.
    fn count_encoding(&mut self, seconds: f64) {
        self.encoding = (self.encoding.0 + seconds, self.encoding.1 + 1);
    }

    /// How a greedy run-ahead fared since load: steps taken as run and steps dropped.
    pub fn run_ahead_counts(&self) -> RunAheadCounts {
        self.ahead_counts
    }

    /// How many decode steps a greedy run-ahead keeps submitted ahead of the caller, 1 (the
    /// default, [`RUN_AHEAD_STEPS`]) to [`MAX_RUN_AHEAD`]: more hides a longer round trip of a
    /// readback (a browser's), at up to that many steps run for nothing when a run ends or
    /// takes another token.
    pub fn set_run_ahead_steps(&mut self, steps: usize) -> Result<()> {
        check_run_ahead_steps(steps)?;
        self.run_ahead_steps = steps;
        Ok(())
    }

    /// How many decode steps a greedy run-ahead keeps submitted ahead
    /// ([`GpuBackend::set_run_ahead_steps`]).
    pub fn run_ahead_steps(&self) -> usize {
        self.run_ahead_steps
    }

    /// Whether a decode step encodes the next one's commands while the GPU runs it (on by
    /// default; off, each step encodes its own before its submit: for measuring what encoding
    /// ahead saves, and for checking it changes nothing).
    pub fn set_encode_ahead(&mut self, on: bool) {
        self.encode_ahead = on;
        if !on {
            self.next_decode = None;
        }
    }

    /// Mean CPU seconds encoding a decode step's commands took since load (mostly while the
    /// step before ran on the GPU, see [`GpuBackend::run`]); None before the first.
    pub fn encode_seconds_per_step(&self) -> Option<f64> {
        let (seconds, steps) = self.encoding;
        (steps > 0).then(|| seconds / steps as f64)
    }
}

/// Which command lists a step runs.
#[derive(Clone, Copy)]
enum Lists {
    /// The whole model, the last token's logits (decode for one token, prefill for more).
    Forward,
    /// The whole model, every token's logits.
    Verify,
    /// The self-draft's first layers, then the LM head.
    Draft,
}

impl Backend for GpuBackend {
    /// Every token's logits: the verify lists, one pass. The last token's through every
    /// layer: the prefill lists (decode's for one token), [`PREFILL_BATCH`] tokens a pass, the
    /// last pass read back. Through fewer layers: the self-draft's lists, built for that
    /// layer count on first use, one token.
    async fn forward_checked(&mut self, input: Checked<'_>) -> Result<Forward> {
        let (tokens, pass) = (input.tokens(), input.pass());
        let start = self.pos;
        if pass.inspect {
            if tokens.len() != 1 || pass.layers < self.layers() || pass.logits != Logits::Last {
                return Err(Error::Backend("the GPU shows the inside of a one-token pass through every layer only".into()));
            }
            self.drop_ahead(0);
            let (logits, inspection) = self.run_inspecting(tokens[0], pass.batching).await?;
            return Ok(Forward { logits, inspection: Some(inspection), ran_ahead: false });
        }
        let logits = match pass.logits {
            Logits::All => self.run(tokens, Lists::Verify, tokens.len(), 0).await,
            Logits::Last if pass.layers < self.layers() => {
                if tokens.len() != 1 {
                    return Err(Error::Backend(format!("a pass through {} of the model's layers takes one token", pass.layers)));
                }
                if self.draft.as_ref().is_none_or(|(l, _)| *l != pass.layers) {
                    let mut ops: Vec<&Op> = self.ops[..self.layer_ends[pass.layers - 1]].iter().collect();
                    ops.extend(self.ops.last());
                    self.draft = Some((pass.layers, Lowered::new(&ops, false, self.options)));
                }
                self.run(tokens, Lists::Draft, 1, 0).await
            }
            Logits::Last => {
                let batches = tokens.len().div_ceil(PREFILL_BATCH);
                let mut logits = Ok(None);
                for (i, batch) in tokens.chunks(PREFILL_BATCH).enumerate() {
                    let last = i + 1 == batches;
                    logits = self.run(batch, Lists::Forward, usize::from(last), if last { pass.run_ahead } else { 0 }).await;
                    if logits.is_err() {
                        break;
                    }
                }
                logits
            }
        };
        match logits {
            Ok(Some((logits, ran_ahead))) => Ok(Forward { logits, inspection: None, ran_ahead }),
            Ok(None) => Err(Error::Backend("no logits".into())),
            Err(e) => {
                self.pos = start;
                self.ahead.clear();
                Err(e)
            }
        }
    }

    /// Each row through the decode step's own final norm and LM head (see
    /// [`super::inspect`]).
    async fn lens(&mut self, residuals: &[f32]) -> Result<Vec<f32>> {
        self.lens_rows(residuals).await
    }

    fn truncate(&mut self, len: usize) {
        // Positions past `len` are simply overwritten by later steps (a run-ahead step's
        // too, once dropped).
        self.pos = self.pos.min(len);
        if self.ahead.front().is_some_and(|a| a.pos > self.pos) {
            self.drop_ahead(0);
        }
    }

    fn position(&self) -> usize {
        self.pos
    }

    fn context_len(&self) -> usize {
        self.capacity
    }

    fn layers(&self) -> usize {
        self.layer_ends.len()
    }

    fn kv_cache_bytes(&self) -> usize {
        self.pos * self.kv_bytes_per_token
    }

    fn info(&self) -> BackendInfo {
        BackendInfo {
            name: "gpu".into(),
            device: format!("{} ({})", self.ctx.info.name, self.ctx.info.backend),
            software: self.ctx.info.software,
            kv_bytes_per_value: if self.options.kv_f16 { 2 } else { 4 },
            gpu_kernels: Some(self.options.describe()),
        }
    }
}

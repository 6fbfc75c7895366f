//! The forward pass as a list of ops, in the CPU path's order: the embedding lookup; per
//! layer the Q/K/V projection (RoPE and the KV-cache write), attention and the output
//! projection, the gate/up projection (SwiGLU) and the down projection; the LM head. Each
//! op is built from the uploaded weights (upload.rs) and the activation buffers
//! (activations.rs), and holds the dispatches it lowers to for each kind of step: one token
//! (decode, matvec kernels) or many (prefill, matmul kernels), while the context is short or
//! past that. [`Lowered`] flattens the list into a command list for each kind.
//!
//! A decode step's layer is 4 dispatches while the context is at most
//! [`KernelOptions::fused_positions`] positions (16 by default, as measured on an H100; none
//! on a hardware GPU in a browser, [`kernels::BROWSER_FUSED_ATTENTION_POSITIONS`]), 5
//! past them: the RMSNorms run inside the projections after them, RoPE and the KV-cache
//! write in the Q/K/V projection's epilogue, attention in the output projection's prologue
//! (past the short context, split-K's part 1 is a dispatch of its own and the prologue
//! merges its chunks), and SwiGLU in the gate/up projection's epilogue. With
//! [`KernelOptions::per_head_attention`] the short context's output projection runs per
//! query head instead (one head's attention over one chunk in each workgroup, its product
//! with the head's columns into per-head parts), and the gate/up and down projections merge
//! the parts into the residual stream they read and write: still 4 dispatches a layer.
//! Q/K/V biases (Qwen2's) are added in that epilogue too, and head norms (Qwen3's, Gemma 3's,
//! EXAONE 4's) applied there, the projection then computed a head a workgroup
//! ([`KernelOptions::fold_head_norms`]; off, RoPE is a dispatch of its own, one more a layer).
//! Gemma's post norms add one more in a decode step (the attention's read by the gate/up
//! projection's prologue, both added to `x` by the layer's last dispatch:
//! [`Builder::feed_forward`]), two where the model is too wide for that and in a prefill
//! pass. OLMo 2 has no pre-norms (its projections read `x` unnormed; the folded post norm
//! too) and norms its q and k whole in the RoPE dispatch: 6 a layer. StableLM's LayerNorms
//! are a dispatch each before the Q/K/V projection, the gate/up projection and the LM head
//! ([`ops::LayerNorm`], into `normed`, which the projection reads; StableLM 2's Q/K/V biases
//! bound alone where a folded norm's gains would be, [`QkvBiases::Own`]): 6 a layer. GPT-2
//! runs in the same 6 (its other biases and its GELU in their projections' epilogues,
//! [`LinearOp::bias`], [`LinearOp::act`]; its learned positions added by the embedding's
//! dispatch); Phi-2 in 5, its feed-forward reading the attention's `normed` (a parallel
//! residual), its LM head's bias in that projection's epilogue; GPT-NeoX in GPT-2's 6 either
//! way, a parallel residual's feed-forward LayerNorm a dispatch before the Q/K/V projection
//! (into `ffn_normed`, from x as it is before the attention adds to it); StarCoder and
//! StarCoder 2 in GPT-2's 6; BLOOM too, ALiBi's biases inside every attention form's scores
//! and its embedding's LayerNorm a dispatch after the lookup (which then writes `normed`).
//! Arcee runs llama's 4, its squared ReLU in the up projection's epilogue; Nemotron
//! StableLM's 6, the same way. PLaMo runs llama's 4 too, its parallel residual's gate/up
//! projection ahead of the output projection (its prologue RMS-norms x before the attention
//! adds to it), the down projection after it. BitNet's sub-norms run in the output and down
//! projections' prologues, its attention a dispatch of its own before them: 5 a layer.
//! LFM2's convolving layers run their input projection (the RMSNorm in its prologue, into
//! `qkv`), the short convolution (short_conv.wgsl, into `att`, each token's gated input to the
//! layer's cache row) and their output projection (adding to `x`), then the feed-forward's
//! two: 5 a layer; its attending layers run Qwen3's 4. A mixture of experts' feed-forward
//! (Qwen3-MoE's, Mixtral's) is 5 dispatches where a feed-forward's is 2: the router (the
//! RMSNorm in its prologue), the pick (expert_pick.wgsl), every pick's gate/up projection,
//! every pick's down projection (the matrix kernels' EXPERTS form, a prefill's tokens as
//! workgroups of the same kernels) and the weighted sum into `x` (expert_sum.wgsl): 7 a layer.
//! A prefill pass runs RoPE and attention as
//! dispatches of their own (7 a layer, 8 past the first
//! [`ATTENTION_CHUNK`](kernels::ATTENTION_CHUNK) positions). Granite's scales take no
//! dispatch: the output and down projections multiply their products by its residual scale
//! as they store them ([`LinearOp::out_scale`]), and every attention form scales its scores
//! by the layer's [`AttentionScope::score_scale`](ops::AttentionScope::score_scale).

use super::activations::Activations;
use super::device::GpuContext;
use super::kernels::{self, Bind, Dispatch, KernelOptions, Kernels};
use super::ops::{
    self, AttentionInput, CombineInput, ExpertPicks, HeadGains, HeadParts, HeadsInput, LinearOp, QkvBiases, RopeKv, RopeKvOp, RowBands,
};
use super::upload::{GpuAttention, GpuExperts, GpuFfn, GpuLayer, GpuMixer, GpuNorm, GpuShortConv};
use crate::error::{Error, Result};
use crate::model::architecture::Activation;
use crate::model::{Config, HeadNormSpan};

/// One op of the forward pass with the dispatches it lowers to, for each kind of step: one
/// token (decode) or many (prefill), while every token sees at most one attention chunk of
/// positions (short) or past that (long).
pub(super) struct Op {
    /// One token, short context.
    pub one_short: Vec<Dispatch>,
    /// One token, long context.
    pub one_long: Vec<Dispatch>,
    /// Many tokens, short context.
    pub many_short: Vec<Dispatch>,
    /// Many tokens, long context.
    pub many_long: Vec<Dispatch>,
}

impl Op {
    /// The same dispatches for every kind of step.
    fn same(d: Vec<Dispatch>) -> Op {
        Op::by_tokens(d.clone(), d)
    }

    /// `one` for one token, `many` for many, whatever the context.
    fn by_tokens(one: Vec<Dispatch>, many: Vec<Dispatch>) -> Op {
        Op { one_short: one.clone(), one_long: one, many_short: many.clone(), many_long: many }
    }

    /// Its four lists, to change each.
    fn lists(&mut self) -> Vec<&mut Vec<Dispatch>> {
        vec![&mut self.one_short, &mut self.one_long, &mut self.many_short, &mut self.many_long]
    }
}

/// One kind of step's command lists, by the attention form its context allows.
pub(super) struct Lowered {
    /// While the step's context is short ([`KernelOptions::short_attention`]).
    pub short: Vec<Dispatch>,
    /// Past that.
    pub long: Vec<Dispatch>,
    /// Lowered for many tokens.
    many: bool,
    /// The kernel options, which say how long a context is short.
    options: KernelOptions,
}

impl Lowered {
    /// Lowers the op list for one token (`many == false`) or many.
    pub fn new(ops: &[&Op], many: bool, options: KernelOptions) -> Self {
        let lower = |pick: fn(&Op) -> &Vec<Dispatch>| ops.iter().flat_map(|&op| pick(op).iter().cloned()).collect();
        if many {
            Lowered { short: lower(|op| &op.many_short), long: lower(|op| &op.many_long), many, options }
        } else {
            Lowered { short: lower(|op| &op.one_short), long: lower(|op| &op.one_long), many, options }
        }
    }

    /// The list for a step of `n_tokens` from position `pos`.
    pub fn pick(&self, pos: usize, n_tokens: usize) -> &[Dispatch] {
        if self.options.short_attention(pos, n_tokens, self.many) {
            &self.short
        } else {
            &self.long
        }
    }
}

/// How a decode step's attention runs, decided once from the model's shape and the options.
#[derive(Debug, Clone, Copy)]
pub(super) struct AttentionForm {
    /// `[n_heads, n_kv_heads, head_dim]`.
    pub shape: [u32; 3],
    /// In the output projection's prologue (the model's query width fits
    /// [`kernels::FUSED_ATTENTION_MAX_WIDTH`]), else a dispatch of its own.
    pub fused: bool,
    /// With [`KernelOptions::per_head_attention`], where its parts fit and there is a short
    /// context ([`KernelOptions::fused_positions`] above 0): the chunks of split-K positions
    /// a short context covers per head.
    pub per_head_chunks: Option<u32>,
}

impl AttentionForm {
    /// The form for a model shaped `cfg` under `options`.
    pub fn new(cfg: &Config, options: KernelOptions) -> Self {
        let shape = [cfg.n_heads as u32, cfg.n_kv_heads as u32, cfg.head_dim as u32];
        let fused = cfg.n_heads * cfg.head_dim <= kernels::FUSED_ATTENTION_MAX_WIDTH;
        let chunks = options.fused_positions.div_ceil(options.split_chunk.max(1)).max(1);
        let per_head = options.per_head_attention && options.fused_positions > 0 && fused && shape[0] * chunks <= ops::MAX_HEAD_PARTS;
        AttentionForm { shape, fused, per_head_chunks: per_head.then_some(chunks) }
    }

    /// Floats of the per-head parts, `[n_heads, head_chunks, 2 + dim]` (0 without them).
    pub fn head_parts_len(&self, dim: usize) -> usize {
        self.per_head_chunks.map_or(0, |c| self.shape[0] as usize * c as usize * (2 + dim))
    }
}

/// What a projection after a norm reads, and how: `x` RMS-normed in its prologue, `normed`
/// LayerNorm-ed by a dispatch before it, or without a norm `x` as it is.
struct NormedInput<'n> {
    /// The RMSNorm its prologue applies: the gain (with what its epilogue reads after it) and
    /// the epsilon.
    norm: Option<(&'n wgpu::Buffer, f32)>,
    /// The buffer it reads.
    input: &'n wgpu::Buffer,
    /// The LayerNorm dispatch before it, for every kind of step.
    layer_norm: Option<Dispatch>,
}

/// The forward pass's ops, in order.
pub(super) struct ForwardOps {
    /// Every op of the pass, the LM head on the step's last token at the end.
    pub ops: Vec<Op>,
    /// The index in `ops` after each layer's last op.
    pub layer_ends: Vec<usize>,
    /// Layers whose short-context decode steps run the output projection per query head.
    pub per_head_layers: usize,
    /// The LM head on every token of the step (a verify pass's last op).
    pub verify_head: Op,
}

/// What the ops are built from: the device, the pipelines, the activation buffers.
pub(super) struct Builder<'a> {
    /// The device.
    pub ctx: &'a GpuContext,
    /// The pipelines (compiled on first use, cached by variant).
    pub kernels: &'a Kernels,
    /// The buffers the ops read and write besides the weights and caches.
    pub acts: &'a Activations,
    /// How a decode step's attention runs.
    pub form: AttentionForm,
    /// Positions the KV caches hold.
    pub capacity: usize,
    /// The model's dim (the rows a LayerNorm norms).
    pub dim: u32,
    /// The norms' epsilon.
    pub eps: f32,
    /// The clamp of every q, k and v value (OLMo 1.7's, `Config::clamp_kqv`); 0 for none.
    pub clamp_kqv: f32,
    /// Each head's norm comes after RoPE (Hunyuan's), not before.
    pub norm_after_rope: bool,
    /// What the embedding's rows are multiplied by (Gemma's `sqrt(dim)`, Granite's own; 1
    /// otherwise).
    pub embedding_scale: f32,
    /// The learned position table the embedding adds a row of to each token's, `[context,
    /// dim]` (GPT-2's), where the model has one.
    pub positions: Option<&'a wgpu::Buffer>,
    /// The embedding's LayerNorm, gain then bias `[2 dim]` (BLOOM's), where the model has one:
    /// the lookup then writes `normed` and a LayerNorm dispatch writes `x` from it.
    pub embedding_norm: Option<&'a wgpu::Buffer>,
    /// What each sublayer's output is multiplied by as it joins the residual stream
    /// (Granite's; 1 otherwise): the output and down projections' [`LinearOp::out_scale`].
    pub residual_scale: f32,
    /// The feed-forward's activation: the gate's (SwiGLU, GeGLU) or the ungated up
    /// projection's (GPT-2's GELU, Arcee's and Nemotron's squared ReLU).
    pub activation: Activation,
    /// A decode step's attention post norm runs inside the feed-forward's gate/up projection
    /// and the layer's last post norm (Gemma's, with [`KernelOptions::fold_post_norms`] and
    /// where the model's dim fits the prologue's row, [`kernels::FUSED_ATTENTION_MAX_WIDTH`]:
    /// see [`Builder::feed_forward`]; OLMo 2's too, whose gate/up projection reads that row
    /// without a pre-norm).
    pub folded_post_norm: bool,
}

impl Builder<'_> {
    /// The whole pass: `x = E[tokens]`, the layers, then the LM head (`head`, after the final
    /// norm's gain `out_norm`; with `head_bias` a bias buffer a band of the head, Phi-2's).
    pub fn build(
        &self,
        embedding: &RowBands,
        layers: &[GpuLayer],
        head: &RowBands,
        head_bias: Option<&[wgpu::Buffer]>,
        out_norm: &GpuNorm,
    ) -> Result<ForwardOps> {
        let mut ops = vec![self.embedding(embedding)?];
        let mut layer_ends = Vec::new();
        let mut per_head_layers = 0;
        for l in layers {
            let att = match &l.mixer {
                GpuMixer::Attention(att) => att,
                GpuMixer::ShortConv(conv) => {
                    // LFM2's convolving layer: its three dispatches, then the feed-forward.
                    ops.push(self.short_conv(l, conv)?);
                    ops.extend(self.feed_forward(l, None)?);
                    layer_ends.push(ops.len());
                    continue;
                }
            };
            ops.push(self.qkv_rope(l, att)?);
            // A parallel residual whose feed-forward RMS-norms the block's input in its gate/up
            // projection's prologue (PLaMo's, the norm the attention's) runs that projection
            // before the output projection adds to x: the down projection adds after it.
            let early_gate_up = l.parallel && !matches!(parallel_ffn_norm(l), Some(GpuNorm::Layer(_)));
            let (attention, merge) = self.attention(l, att, !early_gate_up)?;
            per_head_layers += usize::from(merge.is_some());
            let [gate_up, down] = self.feed_forward(l, merge)?;
            if early_gate_up {
                ops.extend([gate_up, attention, down]);
            } else {
                ops.extend([attention, gate_up, down]);
            }
            layer_ends.push(ops.len());
        }
        ops.push(self.lm_head(head, head_bias, out_norm, false)?);
        Ok(ForwardOps { ops, layer_ends, per_head_layers, verify_head: self.lm_head(head, head_bias, out_norm, true)? })
    }

    /// What a projection after `norm` reads, and how ([`NormedInput`]).
    fn normed_input<'n>(&'n self, norm: Option<&'n GpuNorm>) -> Result<NormedInput<'n>> {
        let a = self.acts;
        let plain = |norm| NormedInput { norm, input: &a.x, layer_norm: None };
        Ok(match norm {
            Some(GpuNorm::Folded(gain)) => plain(Some((gain, self.eps))),
            Some(GpuNorm::Layer(norm)) => {
                let op = ops::LayerNorm { dim: self.dim, eps: self.eps, x: Bind(&a.x, 0, None), norm, out: Bind(&a.normed, 0, None) };
                NormedInput { norm: None, input: &a.normed, layer_norm: Some(self.kernels.layer_norm(self.ctx, &op, &a.step)?) }
            }
            None => plain(None),
        })
    }

    /// A linear layer: matvec for one token (decode), matmul for many (prefill).
    fn linear(&self, op: &LinearOp) -> Result<Op> {
        let (k, step) = (self.kernels, &self.acts.step);
        Ok(Op::by_tokens(vec![k.matvec(self.ctx, op, step)?], vec![k.matmul(self.ctx, op, step)?]))
    }

    /// `x = E[tokens]` (`+ P[positions]` with learned positions): a dispatch per band of the
    /// table; with an embedding norm (BLOOM's) the rows go to `normed` and one more dispatch
    /// LayerNorms them into `x`.
    fn embedding(&self, table: &RowBands) -> Result<Op> {
        let a = self.acts;
        let (scale, positions) = (self.embedding_scale, self.positions);
        let rows = if self.embedding_norm.is_some() { &a.normed } else { &a.x };
        let lookups = table
            .bands
            .iter()
            .map(|(first, m)| self.kernels.embedding(self.ctx, m, *first, scale, positions, Bind(rows, 0, None), &a.step, &a.tokens));
        let mut dispatches = lookups.collect::<Result<Vec<_>>>()?;
        if let Some(norm) = self.embedding_norm {
            let op = ops::LayerNorm { dim: self.dim, eps: self.eps, x: Bind(&a.normed, 0, None), norm, out: Bind(&a.x, 0, None) };
            dispatches.push(self.kernels.layer_norm(self.ctx, &op, &a.step)?);
        }
        Ok(Op::same(dispatches))
    }

    /// `qkv = Wqkv norm(x)`; `q, K/V cache[pos..] = rope(q), rope(k), v`, each with its bias
    /// and clamp, and q, k with their head norms, where the model has them. Decode: in one dispatch, the
    /// projection's epilogue (the biases, or each head's norms, too), where the model has no
    /// whole-projection norms (OLMo 2's) and [`Kernels::head_norm_epilogue_fits`] its heads.
    fn qkv_rope(&self, l: &GpuLayer, att: &GpuAttention) -> Result<Op> {
        let (ctx, k, a) = (self.ctx, self.kernels, self.acts);
        let shape = self.form.shape;
        let cache = |c| Bind(c, 0, None);
        let NormedInput { norm, input, layer_norm } = self.normed_input(l.attn_norm.as_ref())?;
        // The table of the layer's kind (the file's frequencies, a sliding-window layer's or
        // none at all).
        let table = a.table(l.rope);
        let rope_kv = RopeKvOp {
            bias: att.qkv_bias.as_ref(),
            head_norm: att.head_norm.as_ref().map(|(g, span)| (g, self.eps, *span)),
            clamp: self.clamp_kqv,
            norm_after_rope: self.norm_after_rope,
            ..RopeKvOp::new(shape, &a.qkv, Bind(&a.q, 0, None), cache(&l.k_cache), cache(&l.v_cache), table)
        };
        // A parallel residual's own feed-forward LayerNorm (GPT-NeoX's) reads x before the
        // attention adds to it: a dispatch before this op's, into `ffn_normed`.
        let ffn_layer_norm = match (l.parallel, &l.ffn_norm) {
            (true, Some(GpuNorm::Layer(norm))) => {
                let op = ops::LayerNorm { dim: self.dim, eps: self.eps, x: Bind(&a.x, 0, None), norm, out: Bind(&a.ffn_normed, 0, None) };
                Some(k.layer_norm(ctx, &op, &a.step)?)
            }
            _ => None,
        };
        let project = LinearOp { norm, ..LinearOp::new(&att.wqkv, input, Bind(&a.qkv, 0, None)) };
        let rope_kv_dispatch = k.rope_kv(ctx, &rope_kv, &a.step)?;
        // The epilogue reads the biases, or each head's norm gains, after the norm's gains:
        // it takes them with the norm (upload.rs put them there); without one, in their own
        // buffer.
        // `Some(gains)` for the epilogue's head norm, `Some(None)` for none, `None` where the
        // epilogue cannot take the model's (its whole-projection norms, biases beside them, or
        // heads it does not fit).
        let head_norm = match rope_kv.head_norm {
            None => Some(None),
            Some((gains, eps, HeadNormSpan::Head)) if rope_kv.bias.is_none() && k.head_norm_epilogue_fits(ctx, shape[2]) => {
                Some(Some(if norm.is_some() { HeadGains::AfterNorm } else { HeadGains::Own(gains, eps) }))
            }
            Some(_) => None,
        };
        let bias = rope_kv.bias.map(|own| if norm.is_some() { QkvBiases::AfterNorm } else { QkvBiases::Own(own) });
        let one = if let Some(head_norm) = head_norm {
            let (keys, values) = (cache(&l.k_cache), cache(&l.v_cache));
            let epilogue =
                RopeKv { shape, keys, values, table, bias, head_norm, clamp: rope_kv.clamp, norm_after_rope: rope_kv.norm_after_rope };
            let fused = LinearOp { norm, rope_kv: Some(epilogue), ..LinearOp::new(&att.wqkv, input, Bind(&a.q, 0, None)) };
            vec![k.matvec(ctx, &fused, &a.step)?]
        } else {
            vec![k.matvec(ctx, &project, &a.step)?, rope_kv_dispatch.clone()]
        };
        let op = norm_first(layer_norm, Op::by_tokens(one, vec![k.matmul(ctx, &project, &a.step)?, rope_kv_dispatch]));
        Ok(norm_first(ffn_layer_norm, op))
    }

    /// `att = attention(q, cache)`; `x += Wo att`. Decode over a short context: one dispatch,
    /// attention in the projection's prologue (every head in each workgroup, or one head each
    /// per head, whose parts it returns for the feed-forward to merge); past it two, split-K's
    /// part 1 and the projection merging its chunks in its prologue. Prefill: attention, then
    /// the projection. With a post norm (Gemma 3) the projection writes `proj` and a dispatch
    /// after it adds `rmsnorm(proj)` to `x`; a sliding-window layer's attention sees its window.
    /// `per_head_allowed` false keeps the output projection adding to x itself (a feed-forward
    /// run before it has nothing to merge its parts into).
    fn attention(&self, l: &GpuLayer, att: &GpuAttention, per_head_allowed: bool) -> Result<(Op, Option<HeadParts<'_>>)> {
        let (ctx, k, a, form) = (self.ctx, self.kernels, self.acts, self.form);
        let parts = Bind(&a.att_parts, 0, None);
        let split =
            k.attention(ctx, form.shape, self.capacity, l.scope, &a.q, &l.k_cache, &l.v_cache, parts, Bind(&a.att, 0, None), &a.step)?;
        // Where the projection's output goes: added to x, or into att_proj for the post norm.
        let (out, accumulate) = if l.post_norm.is_some() { (&a.att_proj, false) } else { (&a.x, true) };
        let bias = l.biases.as_ref().map(|b| &b.wo);
        // BitNet's sub-norm of the attention's output, in the projection's prologue: only where
        // the attention is a dispatch of its own (no fused or per-head form).
        let norm = l.sub_norms.as_ref().map(|[gain, _]| (gain, self.eps));
        let wo_reading =
            |x| LinearOp { accumulate, bias, norm, out_scale: self.residual_scale, ..LinearOp::new(&att.wo, x, Bind(out, 0, None)) };
        let wo = wo_reading(&a.att);
        let (wo_one, wo_many) = (k.matvec(ctx, &wo, &a.step)?, k.matmul(ctx, &wo, &a.step)?);
        // The per-head form where the projection's blocks fit a head's columns.
        let block = att.wo.format.block();
        let per_head = self
            .form
            .per_head_chunks
            .filter(|_| per_head_allowed && norm.is_none() && block <= ops::HEADS_MIN_BLOCK_COLUMNS && form.shape[2].is_multiple_of(block))
            .map(|n_chunks| HeadParts { parts: Bind(&a.head_parts, 0, None), n_heads: form.shape[0], n_chunks });
        let (one_short, one_long) = if form.fused && norm.is_none() {
            let n_chunks = ops::attention_chunks(self.capacity, k.options.split_chunk);
            let merged = CombineInput { shape: form.shape, parts, n_chunks };
            let long = LinearOp { combine: Some(merged), ..wo_reading(&a.q) };
            let long = vec![split.partial.clone(), k.matvec(ctx, &long, &a.step)?];
            let short = match per_head {
                Some(p) => {
                    let (keys, values, score_scale) = (&l.k_cache, &l.v_cache, l.scope.score_scale);
                    let heads = HeadsInput { shape: form.shape, keys, values, score_scale, n_chunks: p.n_chunks };
                    LinearOp { heads: Some(heads), out_scale: self.residual_scale, ..LinearOp::new(&att.wo, &a.q, p.parts) }
                }
                None => {
                    let input = AttentionInput {
                        shape: form.shape,
                        keys: &l.k_cache,
                        values: &l.v_cache,
                        score_scale: l.scope.score_scale,
                        softcap: l.scope.softcap,
                        alibi_max_bias: l.scope.alibi_max_bias,
                    };
                    LinearOp { attention: Some(input), ..wo_reading(&a.q) }
                }
            };
            // Split-K from the first step: no short form (nor its pipeline, compiled for nothing).
            let short = if k.options.fused_positions == 0 { long.clone() } else { vec![k.matvec(ctx, &short, &a.step)?] };
            (short, long)
        } else {
            (vec![split.single.clone(), wo_one.clone()], vec![split.partial.clone(), split.combine.clone(), wo_one])
        };
        let mut op = Op {
            one_short,
            one_long,
            many_short: vec![split.single, wo_many.clone()],
            many_long: vec![split.partial, split.combine, wo_many],
        };
        if let Some([gain, _]) = &l.post_norm {
            let norm = self.post_norm(att.wo.rows, &a.att_proj, gain, None)?;
            // Folded, a decode step leaves it to the feed-forward (see there).
            let lists = if self.folded_post_norm { vec![&mut op.many_short, &mut op.many_long] } else { op.lists() };
            lists.into_iter().for_each(|list| list.push(norm.clone()));
        }
        Ok((op, per_head))
    }

    /// LFM2's convolving layer: `[b | c | x'] = W_in norm(x)` into `qkv`; the convolution
    /// (each token's `b * x'` to the layer's cache row, `y = c * conv(...)` into `att`);
    /// `x += s W_out y`. Three dispatches for every kind of step.
    fn short_conv(&self, l: &GpuLayer, conv: &GpuShortConv) -> Result<Op> {
        let (ctx, k, a) = (self.ctx, self.kernels, self.acts);
        let NormedInput { norm, input, layer_norm } = self.normed_input(l.attn_norm.as_ref())?;
        let in_proj = self.linear(&LinearOp { norm, ..LinearOp::new(&conv.in_proj, input, Bind(&a.qkv, 0, None)) })?;
        let op = ops::ShortConv {
            dim: self.dim,
            width: conv.width,
            bcx: Bind(&a.qkv, 0, None),
            kernel: &conv.kernel,
            cache: Bind(&l.k_cache, 0, None),
            out: Bind(&a.att, 0, None),
        };
        let convolve = k.short_conv(ctx, &op, &a.step)?;
        if l.post_norm.is_some() {
            return Err(Error::Backend("a convolving layer with post norms: no architecture has one".into()));
        }
        let out = Bind(&a.x, 0, None);
        let out_proj =
            self.linear(&LinearOp { accumulate: true, out_scale: self.residual_scale, ..LinearOp::new(&conv.out_proj, &a.att, out) })?;
        let op = Op {
            one_short: [in_proj.one_short, vec![convolve.clone()], out_proj.one_short].concat(),
            one_long: [in_proj.one_long, vec![convolve.clone()], out_proj.one_long].concat(),
            many_short: [in_proj.many_short, vec![convolve.clone()], out_proj.many_short].concat(),
            many_long: [in_proj.many_long, vec![convolve], out_proj.many_long].concat(),
        };
        Ok(norm_first(layer_norm, op))
    }

    /// `x += rmsnorm(y) * gain` (rows of `dim`), with `first` (another sublayer's output and
    /// gain) that one's normed row added before: a post norm, Gemma's.
    fn post_norm(
        &self,
        dim: u32,
        y: &wgpu::Buffer,
        gain: &wgpu::Buffer,
        first: Option<(&wgpu::Buffer, &wgpu::Buffer)>,
    ) -> Result<Dispatch> {
        let a = self.acts;
        let first = first.map(|(y, gain)| (Bind(y, 0, None), gain));
        let op = ops::PostNorm { dim, eps: self.eps, y: Bind(y, 0, None), gain, x: Bind(&a.x, 0, None), first };
        self.kernels.post_norm(self.ctx, &op, &a.step)
    }

    /// `hidden = act(gate) * up` with `[gate | up] = Wgu norm(x)`, act SiLU or GELU; `x += Wd
    /// hidden`, or with a post norm (Gemma) `proj = Wd hidden` and `x += rmsnorm(proj)`.
    /// Ungated: `hidden = act(Wu norm(x) + bu)`, `x += Wd hidden + bd` (GPT-2's GELU and
    /// biases; Arcee's and Nemotron's squared ReLU without them), each bias and the
    /// activation in its projection's epilogue.
    /// After a per-head projection (`merge`), decode over a short context: x + the heads'
    /// parts merged, read by the first and added by the second. With the attention's post
    /// norm folded ([`Builder::folded_post_norm`]), a decode step's gate/up projection reads
    /// `x + rmsnorm(att_proj)` in its prologue and the layer's last dispatch adds both post
    /// norms to x, the attention's first: 3 dispatches, not 4.
    fn feed_forward(&self, l: &GpuLayer, merge: Option<HeadParts>) -> Result<[Op; 2]> {
        let a = self.acts;
        let (gate_up_matrix, gated, down_matrix) = match &l.ffn {
            GpuFfn::Dense { gate_up, gated, down } => (gate_up, *gated, down),
            GpuFfn::Experts(experts) => return self.experts(l, experts, merge),
        };
        let NormedInput { norm, input, layer_norm } = if l.parallel {
            // A parallel residual: the block input's own LayerNorm, in `ffn_normed` since the
            // Q/K/V op (GPT-NeoX's), or the attention's, still in `normed` (Phi-2's); an
            // RMSNorm of x in the prologue, run before the attention adds to x (PLaMo's,
            // [`Builder::build`]).
            match (parallel_ffn_norm(l), &l.ffn_norm) {
                (Some(GpuNorm::Layer(_)), Some(_)) => NormedInput { norm: None, input: &a.ffn_normed, layer_norm: None },
                (Some(GpuNorm::Layer(_)), None) => NormedInput { norm: None, input: &a.normed, layer_norm: None },
                (norm, _) => self.normed_input(norm)?,
            }
        } else {
            self.normed_input(l.ffn_norm.as_ref())?
        };
        let biases = l.biases.as_ref();
        let gate_up_reading = |post_norm_in, merge_in| LinearOp {
            norm,
            glu: gated,
            activation: self.activation,
            act: !gated,
            bias: biases.map(|b| &b.up),
            post_norm_in,
            merge_in,
            ..LinearOp::new(gate_up_matrix, input, Bind(&a.hidden, 0, None))
        };
        let gate_up = gate_up_reading(None, None);
        let (out, accumulate) = if l.post_norm.is_some() { (&a.proj, false) } else { (&a.x, true) };
        let down = LinearOp {
            accumulate,
            bias: biases.map(|b| &b.down),
            norm: l.sub_norms.as_ref().map(|[_, gain]| (gain, self.eps)),
            out_scale: self.residual_scale,
            ..LinearOp::new(down_matrix, &a.hidden, Bind(out, 0, None))
        };
        let mut ops = [self.linear(&gate_up)?, self.linear(&down)?];
        if let Some([attention_gain, gain]) = &l.post_norm {
            let dim = down_matrix.rows;
            let norm = self.post_norm(dim, &a.proj, gain, None)?;
            if self.folded_post_norm {
                let post_normed = ops::PostNormInput { y: Bind(&a.att_proj, 0, None), gain: attention_gain, eps: self.eps };
                let gate_up = self.kernels.matvec(self.ctx, &gate_up_reading(Some(post_normed), None), &a.step)?;
                let both = self.post_norm(dim, &a.proj, gain, Some((&a.att_proj, attention_gain)))?;
                let [first, second] = &mut ops;
                for (up, last) in [(&mut first.one_short, &mut second.one_short), (&mut first.one_long, &mut second.one_long)] {
                    *up = vec![gate_up.clone()];
                    last.push(both.clone());
                }
                ops[1].many_short.push(norm.clone());
                ops[1].many_long.push(norm);
            } else {
                ops[1].lists().into_iter().for_each(|list| list.push(norm.clone()));
            }
        }
        if merge.is_some() {
            let merged = [gate_up_reading(None, merge), LinearOp { merge_out: merge, ..down }];
            for (op, merged) in ops.iter_mut().zip(merged) {
                op.one_short = vec![self.kernels.matvec(self.ctx, &merged, &a.step)?];
            }
        }
        let [gate_up, down] = ops;
        Ok([norm_first(layer_norm, gate_up), down])
    }

    /// A mixture of experts: `scores = R norm(x)`; each token's picks and their weights
    /// (expert_pick.wgsl); for each pick k of expert e, `hidden[k] = act(G_e norm(x)) * U_e
    /// norm(x)` and `out[k] = D_e hidden[k]` (the matrix kernels' EXPERTS form); `x += s sum_k
    /// w_k out[k]` (expert_sum.wgsl). Five dispatches for every kind of step, a prefill's
    /// tokens as workgroups of the same kernels: the router, the pick and the gate/up
    /// projection in the first op, the down projection and the sum in the second.
    fn experts(&self, l: &GpuLayer, e: &GpuExperts, merge: Option<HeadParts>) -> Result<[Op; 2]> {
        let (ctx, k, a) = (self.ctx, self.kernels, self.acts);
        let NormedInput { norm, input, layer_norm } = self.normed_input(l.ffn_norm.as_ref())?;
        let unlike = layer_norm.is_some() || merge.is_some() || l.parallel || l.post_norm.is_some() || l.biases.is_some();
        if unlike || l.sub_norms.is_some() || norm.is_none() {
            return Err(Error::Backend(
                "a mixture of experts runs after an RMSNorm, with no parallel residual, post or sub-norms, biases or per-head parts".into(),
            ));
        }
        let router = self.linear(&LinearOp { norm, ..LinearOp::new(&e.router, input, Bind(&a.expert_scores, 0, None)) })?;
        let picks = Bind(&a.picks, 0, None);
        let pick = k.expert_pick(ctx, &ops::ExpertPick { routing: e.routing, scores: Bind(&a.expert_scores, 0, None), picks }, &a.step)?;
        let chosen = Some(ExpertPicks { picks: &a.picks, used: e.routing.used, count: e.routing.count });
        let gate_up = LinearOp {
            norm,
            glu: true,
            activation: self.activation,
            experts: chosen,
            ..LinearOp::new(&e.gate_up, input, Bind(&a.hidden, 0, None))
        };
        let gate_up = k.matvec(ctx, &gate_up, &a.step)?;
        let down = LinearOp { experts: chosen, ..LinearOp::new(&e.down, &a.hidden, Bind(&a.expert_out, 0, None)) };
        let down = k.matvec(ctx, &down, &a.step)?;
        let x = Bind(&a.x, 0, None);
        let (dim, out) = (e.down.rows, Bind(&a.expert_out, 0, None));
        let sum = ops::ExpertSum { routing: e.routing, dim, picks, out, x, out_scale: self.residual_scale };
        let sum = k.expert_sum(ctx, &sum, &a.step)?;
        let mut first = router;
        first.lists().into_iter().for_each(|list| list.extend([pick.clone(), gate_up.clone()]));
        Ok([first, Op::same(vec![down, sum])])
    }

    /// `logits = head norm(x)`, its final norm inside: on the step's last token, or with
    /// `verify` on every token of the step (into logits rows 0..). A dispatch per band of the
    /// head, each writing its rows of the logits (plus the band's bias, `head_bias`'s, in its
    /// epilogue).
    fn lm_head(&self, head: &RowBands, head_bias: Option<&[wgpu::Buffer]>, out_norm: &GpuNorm, verify: bool) -> Result<Op> {
        let (ctx, k, a) = (self.ctx, self.kernels, self.acts);
        let NormedInput { norm, input, layer_norm } = self.normed_input(Some(out_norm))?;
        let band = |(i, (first, m)): (usize, &(u32, ops::GpuMatrix))| {
            let op = LinearOp {
                last_token: !verify,
                norm,
                bias: head_bias.and_then(|b| b.get(i)),
                y_stride: Some(head.rows),
                ..LinearOp::new(m, input, Bind(&a.logits, u64::from(*first) * 4, None))
            };
            if verify {
                k.matmul(ctx, &op, &a.step)
            } else {
                k.matvec(ctx, &op, &a.step)
            }
        };
        Ok(norm_first(layer_norm, Op::same(head.bands.iter().enumerate().map(band).collect::<Result<Vec<_>>>()?)))
    }
}

/// The norm a parallel residual's feed-forward reads: its own, or the attention's where it
/// shares it.
fn parallel_ffn_norm(l: &GpuLayer) -> Option<&GpuNorm> {
    l.ffn_norm.as_ref().or(l.attn_norm.as_ref())
}

/// `op` with `first` (a LayerNorm before its projection) ahead of it in every kind of step.
fn norm_first(first: Option<Dispatch>, mut op: Op) -> Op {
    if let Some(first) = first {
        op.lists().into_iter().for_each(|list| list.insert(0, first.clone()));
    }
    op
}

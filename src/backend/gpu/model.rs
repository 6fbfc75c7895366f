//! The model on the GPU: every weight stays quantized on the device (every format of
//! `crate::gguf::SUPPORTED_TYPES`, dequantized inside the kernels), activations and the
//! residual stream in f32, the KV cache on the device. One decode step = one command
//! encoder, one compute pass, one submit, one readback of the logits; a prefill pass runs up
//! to 64 prompt tokens the same way with matrix-matrix kernels and causal attention.
//! Pipelines, bind groups and buffers are made at load, in the data's order: the weights
//! uploaded layer by layer (upload.rs), the activation buffers (activations.rs), then the
//! forward pass as a list of ops over them (forward.rs), lowered into a command list for
//! each kind of step. Running a pass, encoding ahead and the greedy run-ahead are in step.rs,
//! a step timed by kernel in profile.rs, a step that shows its inside in inspect.rs.

use std::collections::VecDeque;

use super::activations::{Activations, PREFILL_BATCH};
use super::device::GpuContext;
use super::forward::{AttentionForm, Builder, ForwardOps, Lowered, Op};
use super::kernels::{Bind, Dispatch, KernelOptions, Kernels, FUSED_ATTENTION_MAX_WIDTH};
use super::ops::{self, AttentionScope};
use super::step::{Ahead, Encoded, Lists, RunAheadCounts, RUN_AHEAD_STEPS};
use super::upload::{banded, padded_bias, GpuLayer, GpuMixer, GpuNorm, Uploaded};
use crate::backend::cpu::ops::finish_logits;
use crate::backend::{Backend, BackendInfo, Checked, Forward, Logits};
use crate::error::{Error, Result};
use crate::model::{Config, Weights};

/// Counts of what one decode step does on the GPU.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StepShape {
    /// Kernel dispatches per decode step while the context is short (at most
    /// [`KernelOptions::fused_positions`] positions; with none, every step's: split-K's).
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

/// KV-cache capacity in tokens when none is asked for.
pub const DEFAULT_CONTEXT: usize = 2048;

/// The model on a GPU.
pub struct GpuBackend {
    pub(super) ctx: GpuContext,
    pub(super) cfg: Config,
    /// The activation buffers, the step's inputs and the logits' readbacks.
    pub(super) acts: Activations,
    /// The argmax of the logits' row 0 into `tokens[0]` (argmax.wgsl): the token of the decode
    /// step a greedy run-ahead submits after a pass.
    pub(super) argmax: Dispatch,
    /// Each attending layer's key cache (`None` where a layer convolves).
    pub(super) key_caches: Vec<Option<wgpu::Buffer>>,
    /// Each layer's attention scope (its sliding window, the scores' cap).
    pub(super) scopes: Vec<AttentionScope>,
    /// `[n_heads, n_kv_heads, head_dim]`.
    pub(super) att_shape: [u32; 3],
    /// The pipelines, for the kernels compiled on first use (an inspecting step's).
    pub(super) kernels: Kernels,
    /// An inspecting step's buffers and dispatches, made the first time one runs.
    pub(super) inspector: Option<super::inspect::Inspector>,
    /// One token: matvec kernels.
    pub(super) decode: Lowered,
    /// Up to [`PREFILL_BATCH`] tokens at once: matmul kernels, causal attention.
    pub(super) prefill: Lowered,
    /// Up to [`MAX_VERIFY_TOKENS`](crate::backend::MAX_VERIFY_TOKENS) tokens with logits for each: prefill with the LM head on
    /// every token.
    pub(super) verify: Lowered,
    /// Every op of the pass, in order (the self-draft's lists and an inspecting step are cut
    /// from it).
    pub(super) ops: Vec<Op>,
    /// The index in `ops` after each layer's last op.
    pub(super) layer_ends: Vec<usize>,
    /// Layers whose short-context decode steps run the output projection per query head.
    pub(super) per_head_layers: usize,
    /// The LM head on every token of the step (the verify lists' last op; `ops` ends with the
    /// LM head on the last token).
    pub(super) verify_head: Op,
    /// The self-draft's decode lists, for the number of layers they run.
    pub(super) draft: Option<(usize, Lowered)>,
    /// Positions the KV cache holds.
    pub(super) capacity: usize,
    /// Positions cached so far: the next step's position.
    pub(super) pos: usize,
    /// Bytes of every GPU buffer it made (weights, KV cache, activations).
    pub(super) gpu_bytes: u64,
    /// Bytes of weights a decode step reads.
    pub(super) weight_bytes: u64,
    /// Bytes of KV cache one position takes.
    pub(super) kv_bytes_per_token: usize,
    /// The kernel variants it runs.
    pub(super) options: KernelOptions,
    /// The next decode step's commands, encoded while the GPU ran the step before (its
    /// position, its command buffer): a decode step's commands depend only on its position
    /// (the token and the position reach the kernels through buffers written before submit),
    /// so the CPU's share of a step (encoding every dispatch) overlaps the GPU's.
    pub(super) next_decode: Option<(Encoded, wgpu::CommandBuffer)>,
    /// The decode steps a greedy run-ahead submitted after the last pass, in order, each on the
    /// GPU's argmax of the logits before it ([`crate::backend::Pass::run_ahead`]).
    pub(super) ahead: VecDeque<Ahead>,
    /// Most decode steps a greedy run-ahead keeps submitted ahead, 1 to [`MAX_RUN_AHEAD`](super::step::MAX_RUN_AHEAD)
    /// ([`GpuBackend::set_run_ahead_steps`]).
    pub(super) run_ahead_steps: usize,
    /// Run-ahead steps a later pass took as run, and those it dropped for another token.
    pub(super) ahead_counts: RunAheadCounts,
    /// Whether decode steps encode the next one's commands ahead (on unless switched off:
    /// [`GpuBackend::set_encode_ahead`]).
    pub(super) encode_ahead: bool,
    /// CPU seconds encoding decode steps' commands took, and how many were encoded.
    pub(super) encoding: (f64, usize),
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

    /// As [`GpuBackend::new`], on a device already opened, with the kernel variants `options`
    /// names (subgroups, a half-float KV cache).
    pub async fn with_options(
        ctx: GpuContext,
        cfg: &Config,
        weights: Weights,
        context_len: Option<usize>,
        options: KernelOptions,
    ) -> Result<Self> {
        if cfg.ssm.is_some() {
            return Err(Error::Backend(format!(
                "this {} model's Mamba-2 (state-space) layers run on the CPU backend only, not yet on the GPU: choose the CPU backend (--backend cpu; the page's CPU engine)",
                cfg.architecture.name()
            )));
        }
        // Sliding-window layers (Gemma's, OLMo 3's) whose window a short context can reach past
        // run split-K attention from the first step, whose kernels take the window: the fused
        // short-context prologue sees every position, which is each window's while the window
        // is at least the short context (every real model's, 512 positions and up). The
        // per-head form never runs beside a window, capped scores (Gemma 2's: it does not
        // cap them) or ALiBi's biased ones (BLOOM's: nor does it bias them); post norms need the projection's output whole, which it never has.
        let mut options = options;
        if cfg.sliding_window.is_some_and(|w| w < options.fused_positions as usize) {
            options.fused_positions = 0;
        }
        if cfg.sliding_window.is_some() || cfg.attn_softcap.is_some() || cfg.alibi_max_bias.is_some() {
            options.per_head_attention = false;
        }
        // Nor beside a LayerNorm, a dispatch that reads x before the gate/up projection's
        // prologue would merge the heads' parts into it, nor before an ungated feed-forward
        // (Arcee's), whose activation epilogue writes each row alone where the merging
        // projection pairs gate and up rows.
        let arch = cfg.architecture;
        options.per_head_attention &= !arch.has_post_norms() && arch.has_pre_norms() && !arch.layer_norms() && arch.gated_ffn();
        // Nor before a mixture of experts, whose router reads x before any merge could.
        options.per_head_attention &= cfg.experts.is_none();
        let scopes = ctx.error_scopes();
        let kernels = Kernels::with_options(&ctx, options)?;
        let capacity = crate::backend::kv_capacity(cfg, context_len, DEFAULT_CONTEXT, options.kv_f16)?;
        if !cfg.head_dim.is_multiple_of(2) {
            return Err(Error::Backend(format!(
                "heads of {} dimensions cannot run on the GPU (RoPE and the cache need pairs)",
                cfg.head_dim
            )));
        }
        let form = AttentionForm::new(cfg, options);
        let acts =
            Activations::new(&ctx, cfg, capacity, options.split_chunk, form.head_parts_len(cfg.dim), &weights.ropes.for_context(capacity));
        // The weights, each layer's with its KV cache; each tensor's copy from the file goes
        // once it is uploaded, before the next is read.
        let mut uploaded = Uploaded::default();
        let Weights { token_embd, position_embd, embedding_norm, output_norm, output, output_bias, layers, .. } = weights;
        let embedding = banded(&ctx, &token_embd, &mut uploaded.weights)?;
        drop(token_embd);
        let positions = position_embd.map(|p| {
            uploaded.other += (p.len() * 4) as u64;
            ctx.storage("position_embd", &p)
        });
        let embedding_norm = embedding_norm.map(|n| GpuNorm::upload(&ctx, "token_embd_norm", &n, &[], &mut uploaded));
        let embedding_norm = match &embedding_norm {
            Some(GpuNorm::Layer(norm)) => Some(norm),
            Some(GpuNorm::Folded(_)) => return Err(Error::Backend("the embedding's norm is a LayerNorm, with a bias".into())),
            None => None,
        };
        ctx.settle().await?;
        let mut gpu_layers = Vec::new();
        for l in layers {
            gpu_layers.push(GpuLayer::upload(&ctx, cfg, gpu_layers.len(), &l?, capacity, options.kv_f16, &mut uploaded)?);
            ctx.settle().await?;
        }
        // Tied embeddings (no output.weight): one table serves the lookup and the LM head.
        let out_norm = GpuNorm::upload(&ctx, "output_norm", &output_norm, &[], &mut uploaded);
        let own_head = output.map(|w| banded(&ctx, &w, &mut uploaded.weights)).transpose()?;
        let head = own_head.as_ref().unwrap_or(&embedding);
        // The LM head's bias (Phi-2's), a buffer a band.
        let head_bias = output_bias.map(|bias| {
            let band = |(first, m): &(u32, ops::GpuMatrix)| {
                let rows = bias.get(*first as usize..(first + m.rows) as usize).unwrap_or_default();
                padded_bias(&ctx, "output bias", rows, &mut uploaded)
            };
            head.bands.iter().map(band).collect::<Vec<_>>()
        });
        // The forward pass over them; the buffers live on through the bind groups that
        // reference them.
        let builder = Builder {
            ctx: &ctx,
            kernels: &kernels,
            acts: &acts,
            form,
            capacity,
            dim: cfg.dim as u32,
            eps: cfg.norm_eps,
            clamp_kqv: cfg.clamp_kqv.unwrap_or(0.0),
            norm_after_rope: cfg.architecture.norms_heads_after_rope(),
            embedding_scale: cfg.embedding_scale,
            positions: positions.as_ref(),
            embedding_norm,
            residual_scale: cfg.residual_scale,
            activation: cfg.architecture.activation(),
            folded_post_norm: options.fold_post_norms && cfg.architecture.has_post_norms() && cfg.dim <= FUSED_ATTENTION_MAX_WIDTH,
        };
        let ForwardOps { ops, layer_ends, per_head_layers, verify_head } =
            builder.build(&embedding, &gpu_layers, head, head_bias.as_deref(), &out_norm)?;
        let all: Vec<&Op> = ops.iter().collect();
        let (decode, prefill) = (Lowered::new(&all, false, options), Lowered::new(&all, true, options));
        let body = &all[..all.len() - 1];
        let verify = Lowered::new(&[body, &[&verify_head]].concat(), true, options);
        let logits = Bind(&acts.logits, 0, Some((cfg.vocab_size * 4) as u64));
        let argmax = kernels.argmax(&ctx, logits, cfg.vocab_size as u32, &acts.tokens)?;
        scopes.finish("loading the model onto the GPU").await?;
        ctx.check()?;
        Ok(GpuBackend {
            kv_bytes_per_token: cfg.cache_bytes_per_token(options.kv_f16),
            options,
            cfg: cfg.clone(),
            gpu_bytes: acts.bytes + uploaded.weights + uploaded.other,
            weight_bytes: uploaded.weights - uploaded.unpicked,
            acts,
            argmax,
            key_caches: gpu_layers.iter().map(|l| matches!(l.mixer, GpuMixer::Attention(_)).then(|| l.k_cache.clone())).collect(),
            scopes: gpu_layers.iter().map(|l| l.scope).collect(),
            att_shape: form.shape,
            kernels,
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
            next_decode: None,
            ahead: VecDeque::new(),
            run_ahead_steps: RUN_AHEAD_STEPS,
            ahead_counts: RunAheadCounts::default(),
            encode_ahead: true,
            encoding: (0.0, 0),
            ctx,
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
            dispatches: if self.options.fused_positions == 0 { self.decode.long.len() } else { self.decode.short.len() },
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

    /// A checked pass as [`Backend::forward_checked`] describes it, its logits as the LM
    /// head wrote them.
    async fn forward_unfinished(&mut self, input: Checked<'_>) -> Result<Forward> {
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
}

impl Backend for GpuBackend {
    /// Every token's logits: the verify lists, one pass. The last token's through every
    /// layer: the prefill lists (decode's for one token), [`PREFILL_BATCH`] tokens a pass, the
    /// last pass read back. Through fewer layers: the self-draft's lists, built for that
    /// layer count on first use, one token. Logits the model scales or caps (Granite's,
    /// Gemma 2's) are finished here, once read back ([`finish_logits`]; the GPU's argmax, the
    /// run-ahead's, ranks the LM head's products: neither changes their order).
    async fn forward_checked(&mut self, input: Checked<'_>) -> Result<Forward> {
        let mut forward = self.forward_unfinished(input).await?;
        finish_logits(&mut forward.logits, self.cfg.logit_scale, self.cfg.final_softcap);
        Ok(forward)
    }

    /// Each row through the decode step's own final norm and LM head (see
    /// [`super::inspect`]), finished as the pass's logits are.
    async fn lens(&mut self, residuals: &[f32]) -> Result<Vec<f32>> {
        let mut logits = self.lens_rows(residuals).await?;
        finish_logits(&mut logits, self.cfg.logit_scale, self.cfg.final_softcap);
        Ok(logits)
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

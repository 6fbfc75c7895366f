//! The CPU backend: the forward pass in plain Rust over slices, llama2.c style, with the
//! matrix products in one of two precisions ([`CpuPrecision`]).

pub mod activations;
pub mod affine16;
#[cfg(target_arch = "x86_64")]
mod avx2_dot;
pub mod band_pool;
pub mod cache_float;
pub mod dot_kernel;
pub mod experts;
pub mod float_rows;
pub mod grouped_attention;
pub mod kv_cache;
pub mod linear;
pub mod ops;
pub mod q2_k_rows;
pub mod q4_1_rows;
pub mod q8_0_rows;
pub mod quant_matmul;
pub mod short_conv;
pub mod ssm;
pub mod token_groups;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm_dot;
#[cfg(target_arch = "x86_64")]
mod x86_prefill;

use std::sync::Arc;

use candle_core::quantized::QTensor;
use candle_core::{Device, Tensor};

pub use kv_cache::KvCache;
use linear::SharedInput;
pub use linear::{CpuPrecision, Linear};

use super::{Backend, BackendInfo, Checked, Forward, Inspection, Logits};
use crate::error::{Error, Result};
use crate::model::{
    Config, FeedForward, HeadNorm, LayerRope, LayerRopes, LinearBiases, Mixer, Norm, PostNorms, QkvBias, RopeFrequencies, SubNorms, Weights,
};
use experts::CpuExperts;
use ops::AttentionInput;
use short_conv::{short_conv, ShortConvInput};
use ssm::{ssm, ScanParams, SsmInput};

/// One transformer block ready for the CPU.
struct Block {
    /// `None`: no pre-norm (OLMo 2), the projections read the residual stream itself.
    attn_norm: Option<Norm>,
    /// Attention, or a short convolution (LFM2's convolving layers).
    mixer: CpuMixer,
    post_norm: Option<PostNorms>,
    ffn_norm: Option<Norm>,
    /// One feed-forward, or a mixture of experts.
    ffn: CpuFfn,
    /// The output and feed-forward projections' biases (GPT-2's).
    biases: Option<LinearBiases>,
    /// The output and down projections' input norms (BitNet's).
    sub_norms: Option<SubNorms>,
    /// Both sublayers read the block's input (a parallel residual): the feed-forward through
    /// `ffn_norm` (GPT-NeoX's), or without one the attention's normed input (Phi-2's).
    parallel: bool,
}

/// How a block mixes positions, its matrices ready for the CPU. (One a block, built once and
/// never moved after: the variants' sizes do not matter.)
#[allow(clippy::large_enum_variant)]
enum CpuMixer {
    /// Attention: the Q, K, V and output projections, Q/K/V biases and head norms where the
    /// model has them.
    Attention { wq: Linear, wk: Linear, wv: Linear, qkv_bias: Option<QkvBias>, head_norm: Option<HeadNorm>, wo: Linear },
    /// LFM2's gated short convolution ([`ShortConvWeights`](crate::model::ShortConvWeights)):
    /// `in_proj` `[3 dim, dim]`, each channel's kernel `[dim, width]`, `out_proj` `[dim, dim]`.
    ShortConv { in_proj: Linear, kernel: Vec<f32>, width: usize, out_proj: Linear },
    /// Granite 4.0 H's Mamba-2 scan ([`SsmWeights`](crate::model::SsmWeights)), its
    /// projections ready for the CPU.
    Ssm { in_proj: Linear, out_proj: Linear, weights: SsmVectors },
}

/// A scanning block's small tensors, as the file holds them in f32
/// ([`SsmWeights`](crate::model::SsmWeights)).
struct SsmVectors {
    conv_kernel: Vec<f32>,
    conv_bias: Vec<f32>,
    dt_bias: Vec<f32>,
    a: Vec<f32>,
    d: Vec<f32>,
    norm: Vec<f32>,
}

/// A block's feed-forward, its matrices ready for the CPU. (One a block, built once and never
/// moved after: the variants' sizes do not matter.)
#[allow(clippy::large_enum_variant)]
enum CpuFfn {
    /// One feed-forward every token runs; `gate` `None`: ungated (GPT-2's).
    Dense { gate: Option<Linear>, up: Linear, down: Linear },
    /// A mixture of experts (Qwen3-MoE's, Mixtral's).
    Experts(CpuExperts),
}

/// KV-cache capacity in tokens when none is asked for (SmolLM2's whole window).
pub const DEFAULT_CONTEXT: usize = 8192;

/// Where the embedding's rows are read from.
enum Embedding {
    /// The table as the file stores it (an LM head of its own, or candle's matmul's head).
    Table(Arc<QTensor>),
    /// The tied LM head's own rows: the table is not kept a second time (for a 128k-token
    /// vocabulary, 215 MB saved).
    LmHead,
}

/// The model on the CPU with its KV cache.
pub struct CpuBackend {
    cfg: Config,
    precision: CpuPrecision,
    embedding: Embedding,
    /// The learned position embedding, `[context, dim]` (GPT-2's).
    positions: Option<Vec<f32>>,
    /// The LayerNorm on the embedding before the first block (BLOOM's).
    embedding_norm: Option<Norm>,
    blocks: Vec<Block>,
    output_norm: Norm,
    lm_head: Linear,
    /// The LM head's bias, `[vocab]` (Phi-2's).
    head_bias: Option<Vec<f32>>,
    /// RoPE frequencies of each kind of layer.
    ropes: LayerRopes,
    cache: KvCache,
}

impl CpuBackend {
    /// Prepares the weights for `precision`. `context_len` sizes the KV cache (default
    /// [`DEFAULT_CONTEXT`], at most the model's window; see [`super::kv_capacity`]), which
    /// holds `f32`s.
    pub fn new(cfg: &Config, weights: Weights, precision: CpuPrecision, context_len: Option<usize>) -> Result<Self> {
        Self::with_cache(cfg, weights, precision, context_len, false)
    }

    /// [`CpuBackend::new`] with the KV cache's keys and values in half floats where
    /// `kv_f16`: half its memory and half the bytes a decode step reads back from it, the
    /// logits moving from exact math by what rounding each key and value to a half float moves
    /// them (about 1e-2).
    pub fn with_cache(cfg: &Config, weights: Weights, precision: CpuPrecision, context_len: Option<usize>, kv_f16: bool) -> Result<Self> {
        let capacity = super::kv_capacity(cfg, context_len, DEFAULT_CONTEXT, kv_f16)?;
        let lin = |t: QTensor| Linear::new(Arc::new(t), precision);
        let token_embd = Arc::new(weights.token_embd);
        let (lm_head, embedding) = match weights.output {
            Some(out) => (lin(out)?, Embedding::Table(token_embd)),
            None => {
                let head = Linear::new(token_embd.clone(), precision)?;
                let rows_kept = head.dequantize_row(0, &mut vec![0.0; cfg.dim]);
                if rows_kept {
                    // The file's copy goes now, before the blocks are repacked: in wasm the
                    // memory's high-water mark is what stays.
                    drop(token_embd);
                    (head, Embedding::LmHead)
                } else {
                    (head, Embedding::Table(token_embd))
                }
            }
        };
        let mut blocks = Vec::with_capacity(weights.layers.len());
        for l in weights.layers {
            let l = l?;
            let mixer = match l.mixer {
                Mixer::Attention(a) => CpuMixer::Attention {
                    wq: lin(a.wq)?,
                    wk: lin(a.wk)?,
                    wv: lin(a.wv)?,
                    qkv_bias: a.qkv_bias,
                    head_norm: a.head_norm,
                    wo: lin(a.wo)?,
                },
                Mixer::ShortConv(c) => {
                    CpuMixer::ShortConv { in_proj: lin(c.in_proj)?, kernel: c.kernel, width: c.width, out_proj: lin(c.out_proj)? }
                }
                Mixer::Ssm(m) => CpuMixer::Ssm {
                    in_proj: lin(m.in_proj)?,
                    out_proj: lin(m.out_proj)?,
                    weights: SsmVectors {
                        conv_kernel: m.conv_kernel,
                        conv_bias: m.conv_bias,
                        dt_bias: m.dt_bias,
                        a: m.a,
                        d: m.d,
                        norm: m.norm,
                    },
                },
            };
            blocks.push(Block {
                attn_norm: l.attn_norm,
                mixer,
                post_norm: l.post_norm,
                ffn_norm: l.ffn_norm,
                ffn: match (l.ffn, &cfg.experts) {
                    (FeedForward::Dense(f), _) => CpuFfn::Dense { gate: f.gate.map(lin).transpose()?, up: lin(f.up)?, down: lin(f.down)? },
                    (FeedForward::Experts(e), Some(shape)) => CpuFfn::Experts(CpuExperts::new(e, shape, precision)?),
                    (FeedForward::Experts(_), None) => return Err(Error::Backend("experts in a model that names none".into())),
                },
                biases: l.biases,
                sub_norms: l.sub_norms,
                parallel: cfg.parallel_residual,
            });
        }
        Ok(CpuBackend {
            cfg: cfg.clone(),
            precision,
            embedding,
            positions: weights.position_embd,
            embedding_norm: weights.embedding_norm,
            blocks,
            output_norm: weights.output_norm,
            lm_head,
            head_bias: weights.output_bias,
            ropes: weights.ropes.for_context(capacity),
            cache: KvCache::for_model(cfg, capacity, kv_f16),
        })
    }

    /// Embedding rows of `tokens`, `[n, dim]`: dequantized exactly from the table, or read
    /// from the tied LM head's rows (exact on the exact path; on the fast path the repacked
    /// blocks' weights, equal to the table's within f32 rounding of their scales).
    fn embed(&self, tokens: &[u32]) -> Result<Vec<f32>> {
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= self.cfg.vocab_size) {
            return Err(Error::Backend(format!("token id {bad} is outside the vocabulary of {}", self.cfg.vocab_size)));
        }
        match &self.embedding {
            Embedding::Table(table) => {
                let ids = Tensor::from_slice(tokens, tokens.len(), &Device::Cpu).map_err(Error::backend)?;
                table.embedding(&ids).and_then(|x| x.flatten_all()).and_then(|x| x.to_vec1::<f32>()).map_err(Error::backend)
            }
            Embedding::LmHead => {
                let dim = self.cfg.dim;
                let mut out = vec![0.0; tokens.len() * dim];
                for (row, &t) in out.chunks_exact_mut(dim).zip(tokens) {
                    self.lm_head.dequantize_row(t as usize, row);
                }
                Ok(out)
            }
        }
    }

    /// Runs `tokens` at positions `position()..` through the first `layers` blocks, appends
    /// their keys and values to the cache (skipped layers get zeros at these positions), and
    /// returns the logits of the last token or of every token (`[n, vocab]`), with the last
    /// token's inspection where `inspect`. On error the cache is left as it was.
    /// [`Backend::forward`] has checked the shape.
    fn forward_pass(&mut self, tokens: &[u32], layers: usize, logits: Logits, inspect: bool) -> Result<Forward> {
        let start = self.cache.len();
        let result = self.forward_inner(tokens, layers, logits, inspect);
        // Sampling and handing the token over come next, on this thread alone.
        band_pool::pool().rest();
        if result.is_err() {
            self.cache.truncate(start);
        }
        result
    }

    fn forward_inner(&mut self, tokens: &[u32], layers: usize, logits_for: Logits, inspect: bool) -> Result<Forward> {
        let n = tokens.len();
        let start = self.cache.len();
        let c = &self.cfg;
        let (d, hd, kv, qd) = (c.dim, c.head_dim, c.kv_dim(), c.n_heads * c.head_dim);
        let group = c.n_heads / c.n_kv_heads;

        let mut x = self.embed(tokens)?; //           residual stream [n, d]
        if c.embedding_scale != 1.0 {
            x.iter_mut().for_each(|v| *v *= c.embedding_scale);
        }
        if let Some(positions) = &self.positions {
            // Each token's learned position row (the cache's capacity is within the table).
            ops::add(&mut x, &positions[start * d..(start + n) * d]);
        }
        let mut xb = vec![0.0f32; n * d]; //          normed input    [n, d]
        if let Some(norm) = &self.embedding_norm {
            // BLOOM's LayerNorm of the embedding: the residual stream starts normed.
            ops::norm_rows(&x, norm, c.norm_eps, &mut xb);
            std::mem::swap(&mut x, &mut xb);
        }
        let mut xf = Vec::new(); //                   the feed-forward's normed input beside it, a parallel residual's [n, d]
        let mut q = vec![0.0f32; n * qd]; //          queries         [n, n_heads * hd]
        let mut k = vec![0.0f32; n * kv]; //          new keys        [n, kv]
        let mut v = vec![0.0f32; n * kv]; //          new values      [n, kv]
        let mut att = vec![0.0f32; n * qd]; //        attention out   [n, n_heads * hd]
        let mut proj = vec![0.0f32; n * d]; //        block output    [n, d]
        let mut gate = vec![0.0f32; n * c.ffn_dim]; // SwiGLU gate    [n, ffn]
        let mut up = vec![0.0f32; n * c.ffn_dim]; //   SwiGLU up      [n, ffn]

        // RoPE's sines and cosines per position, the same in every layer of a kind (the
        // file's, sliding-window or unrotated: `Config::layer_rope`).
        let angles = |freqs: &RopeFrequencies| (0..n).map(|t| ops::RopeAngles::new(freqs, start + t)).collect::<Vec<_>>();
        let turns: Vec<(LayerRope, Vec<ops::RopeAngles>)> = self.ropes.kinds().iter().map(|(kind, f)| (*kind, angles(f))).collect();
        // Asked for: the last token's attention weights and residual stream, layer by layer.
        let mut inspection = inspect.then(|| Inspection::new(c, layers, start + n));

        for (layer, b) in self.blocks.iter().enumerate().take(layers) {
            // Attention: x += s Wo . attention(rope(Wq xb + bq), rope(Wk xb + bk), Wv xb + bv),
            // each projection clamped to [-c, c] after its bias where the model clamps (OLMo
            // 1.7's), xb the normed x (RMS-normed, or StableLM's LayerNorm; x itself without pre-norms,
            // OLMo 2's), q and k RMS-normed before RoPE where the model has head norms (each
            // head, or all of each; Hunyuan's each head after RoPE), the projection RMS-normed before the add where it has
            // post norms (s: the residual scale, Granite's; 1 otherwise), the scores scaled by
            // the attention scale, the attention's output RMS-normed before Wo where the model
            // has sub-norms (BitNet's).
            ops::pre_norm(&x, b.attn_norm.as_ref(), c.norm_eps, &mut xb);
            if let (true, Some(norm)) = (b.parallel, &b.ffn_norm) {
                xf.resize(n * d, 0.0);
                ops::pre_norm(&x, Some(norm), c.norm_eps, &mut xf);
            }
            match &b.mixer {
                CpuMixer::ShortConv { in_proj, kernel, width, out_proj } => {
                    // LFM2's convolving layer: x += s W_out (c * conv(b * x')), [b | c | x'] = W_in xb,
                    // each channel's b * x' convolved over its last positions (the cache's rows).
                    let conv = ShortConvInput { in_proj, kernel, out_proj, width: *width };
                    short_conv(&conv, &mut self.cache, layer, &xb, n, start, &mut proj)?;
                    match &b.post_norm {
                        Some(post) => ops::add_normed(&mut x, &proj, &post.attn, c.norm_eps),
                        None => ops::add_scaled(&mut x, &proj, c.residual_scale),
                    }
                }
                CpuMixer::Ssm { in_proj, out_proj, weights: w } => {
                    // Granite 4.0 H's scanning layer: x += s W_out norm(y * SiLU(z)), y the
                    // Mamba-2 scan of the convolved W_in xb from the layer's state (ssm.rs).
                    let shape =
                        c.ssm.as_ref().ok_or_else(|| Error::Backend(format!("layer {layer} scans in a model with no scan's shape")))?;
                    let input = SsmInput {
                        in_proj,
                        out_proj,
                        scan: ScanParams {
                            conv_kernel: &w.conv_kernel,
                            conv_bias: &w.conv_bias,
                            dt_bias: &w.dt_bias,
                            a: &w.a,
                            d: &w.d,
                            norm: &w.norm,
                            shape,
                            eps: c.norm_eps,
                        },
                    };
                    ssm(&input, &mut self.cache, layer, &xb, n, start, &mut proj)?;
                    ops::add_scaled(&mut x, &proj, c.residual_scale);
                }
                CpuMixer::Attention { wq, wk, wv, qkv_bias, head_norm, wo } => {
                    let normed = SharedInput::new(&xb, n);
                    wq.forward_shared(&normed, &mut q)?;
                    wk.forward_shared(&normed, &mut k)?;
                    wv.forward_shared(&normed, &mut v)?;
                    if let Some(bias) = qkv_bias {
                        ops::add_rows(&mut q, &bias.q);
                        ops::add_rows(&mut k, &bias.k);
                        ops::add_rows(&mut v, &bias.v);
                    }
                    if let Some(limit) = c.clamp_kqv {
                        for x in [&mut q, &mut k, &mut v] {
                            ops::clamp_all(x, limit);
                        }
                    }
                    // Each head's norm before RoPE, or after it (Hunyuan's).
                    let after_rope = c.architecture.norms_heads_after_rope();
                    let norm_heads = |q: &mut [f32], k: &mut [f32]| {
                        if let Some(norm) = head_norm {
                            ops::rmsnorm_heads(q, &norm.q, c.norm_eps);
                            ops::rmsnorm_heads(k, &norm.k, c.norm_eps);
                        }
                    };
                    if !after_rope {
                        norm_heads(&mut q, &mut k);
                    }
                    let kind = c.layer_rope(layer);
                    let layer_turns = turns.iter().find(|(k, _)| *k == kind).map_or(&turns[0].1, |(_, t)| t);
                    for (t, turn) in layer_turns.iter().enumerate() {
                        turn.apply(&mut q[t * qd..][..qd]);
                        turn.apply(&mut k[t * kv..][..kv]);
                    }
                    if after_rope {
                        norm_heads(&mut q, &mut k);
                    }
                    self.cache.append(layer, &k, &v);
                    let cached = self
                        .cache
                        .attention(layer)
                        .ok_or_else(|| Error::Backend(format!("layer {layer} attends but its cache holds convolution rows")))?;
                    // Token t's query head h over the positions up to its own.
                    let head = |t: usize, h: usize| AttentionInput {
                        q: &q[t * qd + h * hd..][..hd],
                        // In the cache, as it stores them, which `cached.attend_heads` reads.
                        keys: &[],
                        values: &[],
                        kv_stride: kv,
                        kv_offset: (h / group) * hd,
                        n_pos: start + t + 1,
                        first: c.attended(layer, start + t).start,
                        scale: c.attention_scale,
                        softcap: c.attn_softcap,
                        alibi_slope: c.alibi_slope(h),
                    };
                    // Token t's query heads of KV head `kv_head`, which read its keys together.
                    let group_of =
                        |t: usize, kv_head: usize| (kv_head * group..(kv_head + 1) * group).map(|h| head(t, h)).collect::<Vec<_>>();
                    // Pieces of `heads` heads, spread over the band pool's threads when the work
                    // is worth handing over: a prefill's a token each, a decode step's a KV
                    // head's group each (its one token's heads on every thread; on one, its
                    // attention over a 1,090-token context had left the other thread waiting a
                    // sixth of the step).
                    let heads = if n == 1 { group } else { c.n_heads };
                    let attend = |p: usize, out: &mut [f32]| {
                        let (t, first_head) = (p * heads / c.n_heads, p * heads % c.n_heads);
                        let mut scores = vec![0.0f32; group * (start + t + 1)]; // attention weights [group, positions]
                        for (kv_head, out) in (first_head / group..).zip(out.chunks_exact_mut(group * hd)) {
                            cached.attend_heads(kv_head, &group_of(t, kv_head), &mut scores, out);
                        }
                    };
                    let work = n * (start + n) * qd * 2;
                    let pool = band_pool::pool();
                    let tasks = if work >= quant_matmul::MIN_THREADED_MACS { pool.threads() * 4 } else { 1 };
                    pool.for_each_piece(&mut att[..n * qd], heads * hd, tasks, attend);
                    if let Some(inspection) = &mut inspection {
                        // The last token's weights again, as `attend` computed them.
                        let mut weights = vec![0.0f32; group * (start + n)]; // [group, positions]
                        for kv_head in 0..c.n_kv_heads {
                            cached.attention_weights(kv_head, &group_of(n - 1, kv_head), &mut weights);
                            for (h, w) in (kv_head * group..).zip(weights.chunks_exact(start + n)) {
                                inspection.weights_mut(layer, h).copy_from_slice(w);
                            }
                        }
                    }
                    if let Some(sub) = &b.sub_norms {
                        // BitNet's: each token's attention output RMS-normed before the projection.
                        ops::rmsnorm_heads(&mut att, &sub.attn, c.norm_eps);
                    }
                    wo.forward(&att, n, &mut proj)?;
                    if let Some(biases) = &b.biases {
                        ops::add_rows(&mut proj, &biases.wo);
                    }
                    match &b.post_norm {
                        Some(post) => ops::add_normed(&mut x, &proj, &post.attn, c.norm_eps),
                        None => ops::add_scaled(&mut x, &proj, c.residual_scale),
                    }
                }
            }

            // Feed-forward: x += s W_down . (act(W_gate xb) * W_up xb), act SiLU or GELU, the
            // gated product RMS-normed before W_down where the model has sub-norms (BitNet's),
            // the projection RMS-normed before the add where it has post norms; ungated
            // (GPT-2), x += W_down . act(W_up xb + b_up) + b_down; with a parallel residual
            // xb is the block input's own norm, xf (GPT-NeoX), or still the attention's normed
            // input (Phi-2).
            if !b.parallel {
                ops::pre_norm(&x, b.ffn_norm.as_ref(), c.norm_eps, &mut xb);
            }
            let ffn_in = if b.parallel && b.ffn_norm.is_some() { &xf } else { &xb };
            match &b.ffn {
                CpuFfn::Experts(experts) => {
                    // x += s sum_e w_e W_down,e . (SiLU(W_gate,e xb) * W_up,e xb) over the
                    // experts e the router picked for each token.
                    let picks = experts.forward(ffn_in, n, c.architecture.activation(), &mut proj)?;
                    if let (Some(inspection), Some(last)) = (&mut inspection, picks.last()) {
                        inspection.experts[layer].clone_from(last);
                    }
                }
                CpuFfn::Dense { gate: w_gate, up: w_up, down: w_down } => {
                    let normed = SharedInput::new(ffn_in, n);
                    w_up.forward_shared(&normed, &mut up)?;
                    let hidden = match w_gate {
                        Some(w_gate) => {
                            w_gate.forward_shared(&normed, &mut gate)?;
                            ops::gated(c.architecture.activation(), &mut gate, &up);
                            &mut gate
                        }
                        None => {
                            if let Some(biases) = &b.biases {
                                ops::add_rows(&mut up, &biases.up);
                            }
                            ops::activate(c.architecture.activation(), &mut up);
                            &mut up
                        }
                    };
                    if let Some(sub) = &b.sub_norms {
                        // BitNet's: each token's gated product RMS-normed before the down projection.
                        ops::rmsnorm_heads(hidden, &sub.ffn, c.norm_eps);
                    }
                    w_down.forward(hidden, n, &mut proj)?;
                }
            }
            if let Some(biases) = &b.biases {
                ops::add_rows(&mut proj, &biases.down);
            }
            match &b.post_norm {
                Some(post) => ops::add_normed(&mut x, &proj, &post.ffn, c.norm_eps),
                None => ops::add_scaled(&mut x, &proj, c.residual_scale),
            }
            if let Some(inspection) = &mut inspection {
                inspection.residual_mut(layer).copy_from_slice(&x[(n - 1) * d..][..d]);
            }
        }
        for layer in layers..self.blocks.len() {
            self.cache.append_zeros(layer, n);
        }
        self.cache.commit(n);

        // Final norm and LM head on the last position, or on every position.
        let first = match logits_for {
            Logits::Last => n - 1,
            Logits::All => 0,
        };
        let rows = n - first;
        ops::norm_rows(&x[first * d..n * d], &self.output_norm, c.norm_eps, &mut xb[..rows * d]);
        let mut logits = vec![0.0f32; rows * self.lm_head.rows()];
        self.lm_head.forward(&xb[..rows * d], rows, &mut logits)?;
        self.finish_logits(&mut logits);
        Ok(Forward { logits, inspection, ran_ahead: false })
    }

    /// The final norm and the LM head on each row of `residuals` (`[rows, dim]`), as a pass
    /// computes its last token's logits: the logit lens.
    fn lens_rows(&self, residuals: &[f32]) -> Result<Vec<f32>> {
        let d = self.cfg.dim;
        if residuals.is_empty() || !residuals.len().is_multiple_of(d) {
            return Err(Error::InvalidParams(format!("the logit lens takes rows of {d} values, got {}", residuals.len())));
        }
        let rows = residuals.len() / d;
        let mut normed = vec![0.0f32; rows * d]; // final-normed rows [rows, d]
        ops::norm_rows(residuals, &self.output_norm, self.cfg.norm_eps, &mut normed);
        let mut logits = vec![0.0f32; rows * self.lm_head.rows()]; // [rows, vocab]
        self.lm_head.forward(&normed, rows, &mut logits)?;
        self.finish_logits(&mut logits);
        Ok(logits)
    }

    /// The LM head's products (`[rows, vocab]`) into logits: the head's bias added (Phi-2's),
    /// then [`ops::finish_logits`] (the logit scale and cap).
    fn finish_logits(&self, logits: &mut [f32]) {
        if let Some(bias) = &self.head_bias {
            ops::add_rows(logits, bias);
        }
        ops::finish_logits(logits, self.cfg.logit_scale, self.cfg.final_softcap);
    }

    /// Bytes of weights read per decoded token: every matrix a token runs (of a mixture of
    /// experts, the router and as many experts as a token picks, at their average size) and
    /// the LM head.
    pub fn weight_bytes(&self) -> usize {
        let blocks: usize = self
            .blocks
            .iter()
            .map(|b| {
                let mixer = match &b.mixer {
                    CpuMixer::Attention { wq, wk, wv, wo, .. } => vec![wq, wk, wv, wo],
                    CpuMixer::ShortConv { in_proj, out_proj, .. } | CpuMixer::Ssm { in_proj, out_proj, .. } => vec![in_proj, out_proj],
                };
                let ffn = match &b.ffn {
                    CpuFfn::Dense { gate, up, down } => {
                        [gate.as_ref(), Some(up), Some(down)].into_iter().flatten().map(|l| l.bytes()).sum()
                    }
                    CpuFfn::Experts(experts) => experts.bytes_per_token(),
                };
                mixer.into_iter().map(|l| l.bytes()).sum::<usize>() + ffn
            })
            .sum();
        blocks + self.lm_head.bytes()
    }
}

impl Backend for CpuBackend {
    async fn forward_checked(&mut self, input: Checked<'_>) -> Result<Forward> {
        let pass = input.pass();
        self.forward_pass(input.tokens(), pass.layers, pass.logits, pass.inspect)
    }

    async fn lens(&mut self, residuals: &[f32]) -> Result<Vec<f32>> {
        let logits = self.lens_rows(residuals);
        band_pool::pool().rest();
        logits
    }

    fn truncate(&mut self, len: usize) {
        self.cache.truncate(len);
    }

    fn position(&self) -> usize {
        self.cache.len()
    }

    fn context_len(&self) -> usize {
        self.cache.capacity()
    }

    fn layers(&self) -> usize {
        self.blocks.len()
    }

    fn kv_cache_bytes(&self) -> usize {
        self.cache.bytes()
    }

    fn info(&self) -> BackendInfo {
        let name = match self.precision {
            CpuPrecision::Exact => "cpu-exact",
            CpuPrecision::Fast => "cpu-fast",
        };
        let threads = linear::matmul_threads();
        let device = format!("CPU, {threads} thread{}, {} kernels", if threads == 1 { "" } else { "s" }, linear::matmul_kernel());
        BackendInfo { name: name.into(), device, software: false, kv_bytes_per_value: self.cache.bytes_per_value(), gpu_kernels: None }
    }
}

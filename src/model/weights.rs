//! GGUF tensors -> the named, shape-checked weights of a model (still quantized), in the one
//! form both backends run: llama's block with the architecture's extras.

use std::io::{Read, Seek};

use candle_core::quantized::QTensor;
use candle_core::Device;
use serde::Serialize;

use super::architecture::{HeadNormSpan, RopePairs, FALCON_ATTENTION_NORM};
use super::config::Config;
use super::fused::{split_experts, split_rows};
use super::rope::{halves_to_pairs, permute, permute_rows, LayerRopes, LongContext, RopeFrequencies};
use crate::error::ModelError;
use crate::gguf::Gguf;

/// One transformer block's weights. Matrices are `[out_features, in_features]`, quantized
/// as stored in the file; norm gains and biases are plain `f32`. In a model whose RoPE pairs
/// split halves, W_q's and W_k's rows (and their biases and head-norm gains) are already
/// reordered so that pairs are adjacent ([`halves_to_pairs`]).
pub struct LayerWeights {
    /// The norm before attention; `None` where the architecture has no pre-norms (OLMo 2:
    /// the projections read the residual stream as it is).
    pub attn_norm: Option<Norm>,
    /// What mixes the positions: attention, or a short convolution (LFM2's convolving layers).
    pub mixer: Mixer,
    /// RMSNorm gains of each sublayer's output before the residual add (Gemma 3), if the
    /// architecture has them.
    pub post_norm: Option<PostNorms>,
    /// The norm before the feed-forward network; `None` as `attn_norm`, and where the
    /// feed-forward reads the attention's normed input (Phi-2's, Cohere's, Falcon 7B's:
    /// [`Architecture::shares_attention_norm`](super::Architecture::shares_attention_norm)).
    pub ffn_norm: Option<Norm>,
    /// The feed-forward network: one, or a mixture of experts.
    pub ffn: FeedForward,
    /// Biases of the output and feed-forward projections, where the architecture has them
    /// ([`Architecture::linear_biases`](super::Architecture::linear_biases): GPT-2's).
    pub biases: Option<LinearBiases>,
    /// RMSNorm gains of the output and down projections' inputs, where the architecture has
    /// them ([`Architecture::has_sub_norms`](super::Architecture::has_sub_norms): BitNet's).
    pub sub_norms: Option<SubNorms>,
}

/// How a block mixes information across positions. (One a block, moved once into a backend:
/// the variants' sizes do not matter.)
#[allow(clippy::large_enum_variant)]
pub enum Mixer {
    /// Attention over the cached keys and values.
    Attention(AttentionWeights),
    /// A gated short convolution over the last few positions (LFM2's).
    ShortConv(ShortConvWeights),
    /// A Mamba-2 selective state-space scan (Granite 4.0 H's).
    Ssm(SsmWeights),
}

/// A block's feed-forward network. (One a block, moved once into a backend: the variants'
/// sizes do not matter.)
#[allow(clippy::large_enum_variant)]
pub enum FeedForward {
    /// One feed-forward every token runs.
    Dense(DenseFeedForward),
    /// A mixture of experts ([`Config::experts`](super::Config::experts)): a router picks a
    /// few of them for each token.
    Experts(ExpertWeights),
}

/// One feed-forward network's matrices: a block's, or one expert's.
pub struct DenseFeedForward {
    /// Gate projection of the gated feed-forward (SwiGLU, or GeGLU), `[ffn_dim, dim]`; `None`
    /// where the feed-forward is not gated (GPT-2's: `hidden = act(W_up x + b)`).
    pub gate: Option<QTensor>,
    /// Up projection, `[ffn_dim, dim]`.
    pub up: QTensor,
    /// Down projection, `[dim, ffn_dim]`.
    pub down: QTensor,
}

/// A mixture of experts' weights (`ffn_gate_inp`, and `ffn_gate_exps`, `ffn_up_exps`,
/// `ffn_down_exps` cut into each expert's matrices).
pub struct ExpertWeights {
    /// The router, `[count, dim]`: each row scores one expert for a token.
    pub router: QTensor,
    /// Each expert's SwiGLU, its gate and up projections `[expert ffn_dim, dim]`, its down
    /// projection `[dim, expert ffn_dim]`.
    pub experts: Vec<DenseFeedForward>,
    /// The shared expert's SwiGLU every token runs beside its picks (Granite 4.0 H's), its
    /// projections `[shared, dim]` and `[dim, shared]`; `None` without one.
    pub shared: Option<DenseFeedForward>,
}

/// A block's attention weights.
pub struct AttentionWeights {
    /// Query projection, `[n_heads * head_dim, dim]`.
    pub wq: QTensor,
    /// Key projection, `[kv_dim, dim]`.
    pub wk: QTensor,
    /// Value projection, `[kv_dim, dim]`.
    pub wv: QTensor,
    /// Biases added to the Q, K and V projections (Qwen2), if the file has them.
    pub qkv_bias: Option<QkvBias>,
    /// RMSNorm gains of q and k before RoPE (each head's: Qwen3, Gemma 3; the whole
    /// projection's: OLMo 2), if the architecture has them.
    pub head_norm: Option<HeadNorm>,
    /// Attention output projection, `[dim, n_heads * head_dim]`.
    pub wo: QTensor,
}

/// A convolving block's weights (LFM2's `shortconv`): `[b | c | x'] = W_in xb`, each channel's
/// `b * x'` convolved causally over the last `width` positions by its own kernel, times `c`,
/// through `W_out`.
pub struct ShortConvWeights {
    /// The input projection, `[3 dim, dim]`: b's rows, then c's, then x''s.
    pub in_proj: QTensor,
    /// Each channel's kernel, `[dim, width]`: its last weight multiplies the current
    /// position's `b * x'`, the first the one `width - 1` positions back.
    pub kernel: Vec<f32>,
    /// Positions each kernel spans (`shortconv.l_cache`).
    pub width: usize,
    /// The output projection, `[dim, dim]`.
    pub out_proj: QTensor,
}

/// A scanning block's weights (Granite 4.0 H's Mamba-2, [`Config::ssm`](super::Config::ssm)
/// its shape): `[z | xBC | dt] = W_in xb`, xBC convolved causally over the last `conv_width`
/// positions with a bias and SiLU into x, B and C; each head `h` (group `g`) keeps a state
/// `S [head_dim, state]`, `S = exp(s A_h) S + s x_h B_g^T` with `s = softplus(dt_h + b_h)`,
/// `y_h = S C_g + D_h x_h`; `y * SiLU(z)` RMS-normed per group, through `W_out`.
pub struct SsmWeights {
    /// The input projection, `[inner + conv_dim + heads, dim]`: z's rows, then x's, B's, C's
    /// (each group's), then each head's dt.
    pub in_proj: QTensor,
    /// Each convolution channel's kernel, `[conv_dim, conv_width]`: its last weight
    /// multiplies the current position's input.
    pub conv_kernel: Vec<f32>,
    /// Each convolution channel's bias, `[conv_dim]`.
    pub conv_bias: Vec<f32>,
    /// Each head's step bias, `[heads]` (`ssm_dt.bias`).
    pub dt_bias: Vec<f32>,
    /// Each head's decay rate A, `[heads]`, negative (the file's `-exp(A_log)`).
    pub a: Vec<f32>,
    /// Each head's skip D, `[heads]`: `D x` joins the scan's output.
    pub d: Vec<f32>,
    /// The gated output's RMSNorm gains, `[inner]` (each group its span).
    pub norm: Vec<f32>,
    /// The output projection, `[dim, inner]`.
    pub out_proj: QTensor,
}

impl LayerWeights {
    /// Its feed-forward's matrices; `None` where it is a mixture of experts.
    pub fn dense_ffn(&self) -> Option<&DenseFeedForward> {
        match &self.ffn {
            FeedForward::Dense(f) => Some(f),
            FeedForward::Experts(_) => None,
        }
    }

    /// Its attention's weights; `None` in a convolving or scanning block.
    pub fn attention(&self) -> Option<&AttentionWeights> {
        match &self.mixer {
            Mixer::Attention(a) => Some(a),
            Mixer::ShortConv(_) | Mixer::Ssm(_) => None,
        }
    }

    /// Its attention's weights, to change them; `None` in a convolving or scanning block.
    pub fn attention_mut(&mut self) -> Option<&mut AttentionWeights> {
        match &mut self.mixer {
            Mixer::Attention(a) => Some(a),
            Mixer::ShortConv(_) | Mixer::Ssm(_) => None,
        }
    }
}

/// RMSNorm gains applied inside a block's sublayers (BitNet's `attn_sub_norm`,
/// `ffn_sub_norm`): to the attention's output before the output projection and to the
/// feed-forward's gated product before the down projection.
pub struct SubNorms {
    /// Before the output projection, `[n_heads * head_dim]`.
    pub attn: Vec<f32>,
    /// Before the down projection, `[ffn_dim]`.
    pub ffn: Vec<f32>,
}

/// A block's biases beside its output and feed-forward projections (GPT-2's; its Q/K/V
/// projection's are a [`QkvBias`]).
pub struct LinearBiases {
    /// Added to the attention's output projection, `[dim]`.
    pub wo: Vec<f32>,
    /// Added to the feed-forward's up projection before its activation, `[ffn_dim]`.
    pub up: Vec<f32>,
    /// Added to the feed-forward's down projection, `[dim]`.
    pub down: Vec<f32>,
}

/// A sublayer's or the LM head's input norm, `[dim]` each: an RMSNorm's gain,
/// `x / sqrt(mean(x^2) + eps) * gain`, or with a bias a LayerNorm's (StableLM's),
/// `(x - mean(x)) / sqrt(var(x) + eps) * gain + bias`
/// ([`Architecture::layer_norms`](super::Architecture::layer_norms)).
pub struct Norm {
    /// The gain.
    pub gain: Vec<f32>,
    /// A LayerNorm's bias; `None` for an RMSNorm.
    pub bias: Option<Vec<f32>>,
}

impl Norm {
    /// A `[dim]` norm as `cfg`'s architecture has it, its parts (`"weight"`, `"bias"`) read by
    /// `part` where its files hold them: an RMSNorm, or a LayerNorm whose bias is zeros where
    /// the family's have none (Cohere's, OLMo 1's:
    /// [`Architecture::layer_norm_biases`](super::Architecture::layer_norm_biases)) and whose
    /// gain is ones where they have no gain either (OLMo 1's,
    /// [`Architecture::norm_gains`](super::Architecture::norm_gains)).
    fn read(cfg: &Config, mut part: impl FnMut(&str) -> Result<Vec<f32>, ModelError>) -> Result<Norm, ModelError> {
        let arch = cfg.architecture;
        let gain = if arch.norm_gains() { part("weight")? } else { vec![1.0; cfg.dim] };
        let bias = match (arch.layer_norms(), arch.layer_norm_biases()) {
            (false, _) => None,
            (true, true) => Some(part("bias")?),
            (true, false) => Some(vec![0.0; gain.len()]),
        };
        Ok(Norm { gain, bias })
    }
}

/// Biases of the Q, K and V projections.
pub struct QkvBias {
    /// `[n_heads * head_dim]`.
    pub q: Vec<f32>,
    /// `[kv_dim]`.
    pub k: Vec<f32>,
    /// `[kv_dim]`.
    pub v: Vec<f32>,
}

impl QkvBias {
    /// The three biases end to end, `[n_heads * head_dim + 2 kv_dim]`: one per row of the
    /// stacked Q/K/V projection.
    pub fn stacked(&self) -> Vec<f32> {
        [&self.q[..], &self.k, &self.v].concat()
    }
}

/// RMSNorm gains applied to q and k before RoPE: each `[head_dim]`, every head normed apart
/// with the same gain ([`HeadNormSpan::Head`]), or `[n_heads * head_dim]` and `[kv_dim]`, q
/// and k each normed whole ([`HeadNormSpan::Whole`]). Either way an RMSNorm over rows as
/// wide as the gain.
pub struct HeadNorm {
    /// Gain of each query head, or of all of q.
    pub q: Vec<f32>,
    /// Gain of each key head, or of all of k.
    pub k: Vec<f32>,
}

impl HeadNorm {
    /// Over what q and k are normed: as wide as a head, or wider.
    pub fn span(&self, head_dim: usize) -> HeadNormSpan {
        if self.q.len() == head_dim {
            HeadNormSpan::Head
        } else {
            HeadNormSpan::Whole
        }
    }
}

/// RMSNorm gains applied to a block's attention output and feed-forward output before each is
/// added to the residual stream (Gemma 3's `post_attention_norm`, `post_ffw_norm`), `[dim]`.
pub struct PostNorms {
    /// After the attention's output projection.
    pub attn: Vec<f32>,
    /// After the feed-forward's down projection.
    pub ffn: Vec<f32>,
}

/// All weights of a model as stored in its GGUF file, and the RoPE frequencies they run with.
pub struct Weights {
    /// Token embedding, `[vocab, dim]`.
    pub token_embd: QTensor,
    /// The learned position embedding, `[context, dim]` (a row per position the model was
    /// trained at, added to each token's embedding row: GPT-2's), where the architecture has
    /// one ([`Architecture::learned_positions`](super::Architecture::learned_positions)).
    pub position_embd: Option<Vec<f32>>,
    /// The LayerNorm on each token's embedding row before the first block (BLOOM's
    /// `token_embd_norm`, [`Architecture::norms_embedding`](super::Architecture::norms_embedding)).
    pub embedding_norm: Option<Norm>,
    /// The norm before the LM head.
    pub output_norm: Norm,
    /// LM head `[vocab, dim]`; `None` when it is tied to `token_embd`.
    pub output: Option<QTensor>,
    /// The LM head's bias, `[vocab]`, added to the logits (Phi-2's,
    /// [`Architecture::head_bias`](super::Architecture::head_bias)).
    pub output_bias: Option<Vec<f32>>,
    /// Transformer blocks in order: read already, or read one at a time as a backend takes
    /// them ([`Layers`]).
    pub layers: Layers,
    /// Each RoPE pair's frequency in each kind of layer: the file's from the configuration
    /// and Llama 3's per-pair factors (`rope_freqs.weight`) where it has them, and those of
    /// sliding-window or unrotated layers where the model has such ([`Config::layer_rope`]).
    pub ropes: LayerRopes,
}

/// The transformer blocks' weights, taken in order: each block is either in memory already
/// ([`Weights::read`]) or read from the file when taken ([`Weights::read_streaming`]), so
/// that a backend converting or uploading them block by block never holds the whole file's
/// tensors at once (in wasm, whose memory never shrinks, that would be kept for good).
pub struct Layers {
    next: usize,
    count: usize,
    source: LayerSource,
}

enum LayerSource {
    Read(std::vec::IntoIter<LayerWeights>),
    Streamed(Box<dyn FnMut(usize) -> Result<LayerWeights, ModelError>>),
}

impl Layers {
    /// Blocks in memory already.
    pub fn read(blocks: Vec<LayerWeights>) -> Self {
        Layers { next: 0, count: blocks.len(), source: LayerSource::Read(blocks.into_iter()) }
    }

    /// Blocks not yet taken.
    pub fn len(&self) -> usize {
        self.count - self.next
    }

    /// Whether every block has been taken.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every block not yet taken, read now.
    pub fn collect_all(self) -> Result<Vec<LayerWeights>, ModelError> {
        self.collect()
    }
}

impl Iterator for Layers {
    type Item = Result<LayerWeights, ModelError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next == self.count {
            return None;
        }
        let i = self.next;
        self.next += 1;
        match &mut self.source {
            LayerSource::Read(blocks) => blocks.next().map(Ok),
            LayerSource::Streamed(read) => Some(read(i)),
        }
    }
}

/// A model's weights in figures, for the page's stats and load status.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct WeightsSummary {
    /// Weights in every tensor (a tied LM head counted once).
    pub parameters: u64,
    /// Bytes they take as stored.
    pub bytes: u64,
    /// The storage types by their share of the bytes, largest first (under 0.5% left out),
    /// e.g. `Q4_1 84%, Q8_0 16%`.
    pub types: String,
}

/// The LM head's bias (Phi-2's), `[vocab]`.
const OUTPUT_BIAS: &str = "output.bias";

/// The learned position embedding (GPT-2's), `[context, dim]`.
const POSITION_EMBEDDING: &str = "position_embd.weight";

/// The embedding's LayerNorm (BLOOM's): its gain and bias, `[dim]` each.
const EMBEDDING_NORM: [&str; 2] = ["token_embd_norm.weight", "token_embd_norm.bias"];

/// Per-pair RoPE factors (Llama 3), `[rope_dims / 2]`, when the file has them.
const ROPE_FACTORS: &str = "rope_freqs.weight";
/// LongRoPE's per-pair factors (Phi-3.5's, Phi-3 128k's, Phi-4-mini's), `[rope_dims / 2]`:
/// for a context within the original one, and for one past it.
const LONGROPE_SHORT: &str = "rope_factors_short.weight";
const LONGROPE_LONG: &str = "rope_factors_long.weight";

/// Whether the file holds LongRoPE's factors for an architecture that reads them.
fn has_longrope(gguf: &Gguf, cfg: &Config) -> bool {
    cfg.architecture.reads_longrope() && [LONGROPE_SHORT, LONGROPE_LONG].iter().any(|n| gguf.tensor_info(n).is_some())
}

/// Every tensor the configuration needs, with its expected shape: the embedding, the final
/// norm, the LM head and RoPE factors if the file has its own, then each block (biases where
/// the architecture requires them or the file has them, head norms where the architecture has
/// them, Phi-3's fused projections in place of the matrices they hold).
fn plan(gguf: &Gguf, cfg: &Config) -> Vec<(String, Vec<usize>)> {
    let (d, f, v, q, kv, pairs) = (cfg.dim, cfg.ffn_dim, cfg.vocab_size, cfg.n_heads * cfg.head_dim, cfg.kv_dim(), cfg.rope_dims / 2);
    let arch = cfg.architecture;
    let mut out = vec![("token_embd.weight".to_string(), vec![v, d])];
    let output_norm = arch.output_norm_name();
    if arch.norm_gains() {
        out.push((format!("{output_norm}.weight"), vec![d]));
    }
    if arch.layer_norm_biases() {
        out.push((format!("{output_norm}.bias"), vec![d]));
    }
    if arch.head_bias() || gguf.tensor_info("output.weight").is_some() {
        out.push(("output.weight".to_string(), vec![v, d]));
    }
    if arch.head_bias() {
        out.push((OUTPUT_BIAS.to_string(), vec![v]));
    }
    if arch.learned_positions() {
        out.push((POSITION_EMBEDDING.to_string(), vec![cfg.context_len, d]));
    }
    if arch.norms_embedding() {
        out.extend(EMBEDDING_NORM.map(|n| (n.to_string(), vec![d])));
    }
    if gguf.tensor_info(ROPE_FACTORS).is_some() {
        out.push((ROPE_FACTORS.to_string(), vec![pairs]));
    }
    if has_longrope(gguf, cfg) {
        out.extend([LONGROPE_SHORT, LONGROPE_LONG].map(|n| (n.to_string(), vec![pairs])));
    }
    // A pre-norm's gain, and a LayerNorm's bias beside it.
    let pre_norm = |norm: &str| {
        let names = [(format!("{norm}.weight"), arch.norm_gains()), (format!("{norm}.bias"), arch.layer_norm_biases())];
        names.into_iter().filter(|(_, held)| *held && arch.has_pre_norms()).map(|(n, _)| (n, vec![d])).collect::<Vec<_>>()
    };
    for i in 0..cfg.n_layers {
        let (attn_norm, ffn_norm) = pre_norm_names(gguf, cfg, i);
        out.extend(pre_norm(&format!("blk.{i}.{attn_norm}")));
        let mut block: Vec<(&str, Vec<usize>)> = Vec::new();
        if let Some(conv) = cfg.short_conv.as_ref().filter(|_| cfg.is_conv_layer(i)) {
            block.extend([("shortconv.in_proj.weight", vec![3 * d, d]), ("shortconv.conv.weight", vec![d, conv.width])]);
            block.push(("shortconv.out_proj.weight", vec![d, d]));
        } else if let Some(ssm) = cfg.ssm.as_ref().filter(|_| cfg.is_ssm_layer(i)) {
            let (heads, inner) = (ssm.heads, ssm.inner);
            block.extend([("ssm_in.weight", vec![ssm.in_proj_rows(), d]), ("ssm_conv1d.weight", vec![ssm.conv_dim(), ssm.conv_width])]);
            block.extend([("ssm_conv1d.bias", vec![ssm.conv_dim()]), ("ssm_dt.bias", vec![heads])]);
            block.extend([("ssm_a", vec![heads, 1]), ("ssm_d", vec![heads, 1])]);
            block.extend([("ssm_norm.weight", vec![ssm.groups, inner / ssm.groups]), ("ssm_out.weight", vec![d, inner])]);
        } else if has_fused_qkv(gguf, cfg, i) {
            block.push(("attn_qkv.weight", vec![q + 2 * kv, d]));
        } else {
            block.extend([("attn_q.weight", vec![q, d]), ("attn_k.weight", vec![kv, d]), ("attn_v.weight", vec![kv, d])]);
        }
        if cfg.attends(i) {
            block.push(("attn_output.weight", vec![d, q]));
        }
        if let Some(ffn_norm) = ffn_norm {
            out.extend(pre_norm(&format!("blk.{i}.{ffn_norm}")));
        }
        if let Some(e) = &cfg.experts {
            block.push(("ffn_gate_inp.weight", vec![e.count, d]));
            let (n, ef) = (e.count, e.ffn_dim);
            block.extend([("ffn_gate_exps.weight", vec![n, ef, d]), ("ffn_up_exps.weight", vec![n, ef, d])]);
            block.push(("ffn_down_exps.weight", vec![n, d, ef]));
            if let Some(sf) = e.shared_ffn_dim {
                block.extend([("ffn_gate_shexp.weight", vec![sf, d]), ("ffn_up_shexp.weight", vec![sf, d])]);
                block.push(("ffn_down_shexp.weight", vec![d, sf]));
            }
        } else if arch.has_fused_projections() {
            block.push(("ffn_up.weight", vec![2 * f, d]));
        } else if arch.gated_ffn() {
            block.extend([("ffn_gate.weight", vec![f, d]), ("ffn_up.weight", vec![f, d])]);
        } else {
            block.push(("ffn_up.weight", vec![f, d]));
        }
        if cfg.experts.is_none() {
            block.push(("ffn_down.weight", vec![d, f]));
        }
        if has_fused_qkv_bias(gguf, cfg, i) {
            block.push(("attn_qkv.bias", vec![q + 2 * kv]));
        }
        if arch.linear_biases() {
            block.extend([("attn_output.bias", vec![d]), ("ffn_up.bias", vec![f]), ("ffn_down.bias", vec![d])]);
        }
        if arch.linear_biases() && !has_fused_qkv(gguf, cfg, i)
            || arch.requires_qkv_bias()
            || gguf.tensor_info(&format!("blk.{i}.attn_q.bias")).is_some()
        {
            block.extend([("attn_q.bias", vec![q]), ("attn_k.bias", vec![kv]), ("attn_v.bias", vec![kv])]);
        }
        match arch.head_norm().filter(|_| cfg.attends(i)) {
            Some(HeadNormSpan::Head) => {
                block.extend([("attn_q_norm.weight", vec![cfg.head_dim]), ("attn_k_norm.weight", vec![cfg.head_dim])])
            }
            Some(HeadNormSpan::Whole) => block.extend([("attn_q_norm.weight", vec![q]), ("attn_k_norm.weight", vec![kv])]),
            None => {}
        }
        if arch.has_post_norms() {
            block.extend([("post_attention_norm.weight", vec![d]), ("post_ffw_norm.weight", vec![d])]);
        }
        if arch.has_sub_norms() {
            block.extend([("attn_sub_norm.weight", vec![q]), ("ffn_sub_norm.weight", vec![f])]);
        }
        out.extend(block.into_iter().map(|(t, shape)| (format!("blk.{i}.{t}"), shape)));
    }
    out
}

/// A block's biases llama.cpp adds wherever a file holds them (on the attention's output
/// projection, a fused Q/K/V projection and the feed-forward's three), and the engine does
/// not but in a family whose blocks have them (the gate's alone then,
/// [`unapplied_biases`]) or, the stacked Q/K/V's, where the block's Q/K/V is stacked: a file
/// with any other is refused rather than run without it.
pub const UNAPPLIED_BIASES: [&str; 5] = ["attn_output.bias", "attn_qkv.bias", "ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"];

/// The biases of [`UNAPPLIED_BIASES`] a file of `arch` must not hold: every one, or in a
/// family with [`Architecture::linear_biases`](super::Architecture::linear_biases) the
/// gate's alone (it has no gate).
fn unapplied_biases(arch: super::Architecture) -> &'static [&'static str] {
    if arch.linear_biases() {
        &UNAPPLIED_BIASES[2..3]
    } else {
        &UNAPPLIED_BIASES
    }
}

/// Tensors outside [`UNAPPLIED_BIASES`] and [`UNAPPLIED_HEAD_NORMS`] that llama.cpp applies
/// where a file holds them and the engine has no place for: a LayerNorm's bias in a family
/// whose LayerNorms have none ([`Architecture::layer_norm_biases`](super::Architecture::layer_norm_biases):
/// MPT's, whose biased variant llama.cpp runs, Cohere's, OLMo 1's), and MPT's learned
/// positions (an MPT without ALiBi) and feed-forward activation scales, and BitNet's matrices'
/// scalar scales. A file holding one is refused by it rather than run without it, as is a
/// BitNet file with an `output.weight` (llama.cpp's BitNet reads the embedding as its LM head
/// and refuses a file with a tensor it leaves unread).
fn unapplied_extras(cfg: &Config) -> Vec<String> {
    let arch = cfg.architecture;
    let mut names = Vec::new();
    if arch.layer_norms() && !arch.layer_norm_biases() {
        names.push("output_norm.bias".to_string());
        names.extend((0..cfg.n_layers).flat_map(|i| ["attn_norm", "ffn_norm"].map(|n| format!("blk.{i}.{n}.bias"))));
    }
    if arch == super::Architecture::Mpt {
        names.push(POSITION_EMBEDDING.to_string());
        names.extend((0..cfg.n_layers).map(|i| format!("blk.{i}.ffn_act.scales")));
    }
    if arch.has_sub_norms() {
        // BitNet's LM head is the embedding, whatever else the file holds; its matrices' scalar
        // scales, which llama.cpp multiplies their products by where a file has them.
        names.push("output.weight".to_string());
        let matrices = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"];
        names.extend((0..cfg.n_layers).flat_map(|i| matrices.map(|m| format!("blk.{i}.{m}.scale"))));
    }
    names
}

/// Norms of q and k (`attn_q_norm`, `attn_k_norm`) that a family without head norms
/// ([`Architecture::head_norm`](super::Architecture::head_norm)) would leave out: StableLM 2
/// 12B's, whose file is refused by them.
pub const UNAPPLIED_HEAD_NORMS: [&str; 2] = ["attn_q_norm.weight", "attn_k_norm.weight"];

impl Weights {
    /// Checks, from the header alone, that no block holds a tensor the engine would leave out
    /// ([`UNAPPLIED_BIASES`], [`UNAPPLIED_HEAD_NORMS`] where the architecture has no head
    /// norms, and [`unapplied_extras`]), then that every tensor the configuration needs is present with its shape and a
    /// type the engine computes with: what [`Weights::read`] would refuse or get wrong, found
    /// before a byte of tensor data is read.
    pub fn check(gguf: &Gguf, cfg: &Config) -> Result<(), ModelError> {
        let head_norms: &[&str] = if cfg.architecture.has_head_norm() { &[] } else { &UNAPPLIED_HEAD_NORMS };
        let biases = unapplied_biases(cfg.architecture);
        // A stacked Q/K/V bias is added wherever the block's W_q, W_k and W_v are stacked.
        let applied = |i: usize, t: &str| t == "attn_qkv.bias" && has_fused_qkv(gguf, cfg, i);
        let unapplied = (0..cfg.n_layers)
            .flat_map(|i| biases.iter().chain(head_norms).filter(move |t| !applied(i, t)).map(move |t| format!("blk.{i}.{t}")));
        let mut unapplied = unapplied.chain(unapplied_extras(cfg));
        if let Some(name) = unapplied.find(|name| gguf.tensor_info(name).is_some()) {
            return Err(ModelError::UnappliedTensor(name));
        }
        for (name, shape) in plan(gguf, cfg) {
            check_shape(gguf, &name, &shape)?;
            gguf.check_type(&name)?;
        }
        Ok(())
    }

    /// Bytes of every tensor the configuration needs as [`Weights::read`] holds them in
    /// memory (as stored, but a type read through a stand-in as the type it is held in), from
    /// the header alone.
    pub fn bytes_needed(gguf: &Gguf, cfg: &Config) -> u64 {
        plan(gguf, cfg).iter().map(|(name, _)| gguf.held_bytes(name)).sum()
    }

    /// Reads every tensor the configuration needs, checking names, types and shapes first.
    /// `progress(done_bytes, total_bytes)` is called after each tensor.
    pub fn read<R: Read + Seek>(gguf: &Gguf, reader: &mut R, cfg: &Config, progress: &mut dyn FnMut(u64, u64)) -> Result<Self, ModelError> {
        let mut done = 0u64;
        let mut weights = Self::read_outside_blocks(gguf, reader, cfg, &mut done, progress)?;
        let blocks = (0..cfg.n_layers).map(|i| read_block(gguf, reader, cfg, i, &mut done, progress)).collect::<Result<Vec<_>, _>>()?;
        weights.layers = Layers::read(blocks);
        Ok(weights)
    }

    /// As [`Weights::read`], but the blocks are read from `reader` one at a time as they are
    /// taken from [`Weights::layers`]: the embedding, the final norm, the LM head and the RoPE
    /// factors are read now.
    pub fn read_streaming<R: Read + Seek + 'static>(
        gguf: Gguf,
        mut reader: R,
        cfg: &Config,
        mut progress: Box<dyn FnMut(u64, u64)>,
    ) -> Result<Self, ModelError> {
        let mut done = 0u64;
        let mut weights = Self::read_outside_blocks(&gguf, &mut reader, cfg, &mut done, &mut *progress)?;
        let config = cfg.clone();
        let read = move |i: usize| read_block(&gguf, &mut reader, &config, i, &mut done, &mut *progress);
        weights.layers = Layers { next: 0, count: cfg.n_layers, source: LayerSource::Streamed(Box::new(read)) };
        Ok(weights)
    }

    /// Checks every tensor's name, type and shape, then reads the tensors outside the blocks;
    /// `layers` is left empty.
    fn read_outside_blocks<R: Read + Seek>(
        gguf: &Gguf,
        reader: &mut R,
        cfg: &Config,
        done: &mut u64,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Self, ModelError> {
        Self::check(gguf, cfg)?;
        let mut take = |name: &str| read_tensor(gguf, reader, name, done, progress);
        let token_embd = take("token_embd.weight")?;
        let output_norm = Norm::read(cfg, |part| to_vec(&take(&format!("{}.{part}", cfg.architecture.output_norm_name()))?))?;
        let output = if gguf.tensor_info("output.weight").is_some() { Some(take("output.weight")?) } else { None };
        let output_bias = if cfg.architecture.head_bias() { Some(to_vec(&take(OUTPUT_BIAS)?)?) } else { None };
        let position_embd = if cfg.architecture.learned_positions() { Some(to_vec(&take(POSITION_EMBEDDING)?)?) } else { None };
        let embedding_norm = if cfg.architecture.norms_embedding() {
            let [gain, bias] = EMBEDDING_NORM;
            Some(Norm { gain: to_vec(&take(gain)?)?, bias: Some(to_vec(&take(bias)?)?) })
        } else {
            None
        };
        let factors = if gguf.tensor_info(ROPE_FACTORS).is_some() { Some(rope_factors(&take(ROPE_FACTORS)?, ROPE_FACTORS)?) } else { None };
        let freqs = |factors: Option<&[f32]>| {
            let freqs = match &cfg.rope_yarn {
                Some(yarn) => RopeFrequencies::yarn(cfg.head_dim, cfg.rope_dims, cfg.rope_base, factors, yarn),
                None => RopeFrequencies::new(cfg.head_dim, cfg.rope_dims, cfg.rope_base, cfg.rope_scale, factors),
            };
            // Multimodal RoPE on text: plain RoPE with the fourth stream's pairs still.
            match &cfg.rope_sections {
                Some(sections) => freqs.with_sections(sections),
                None => freqs,
            }
        };
        let longrope = has_longrope(gguf, cfg);
        if longrope && cfg.rope_yarn.is_some() {
            return Err(ModelError::Metadata {
                key: cfg.key("rope.scaling.type"),
                problem:
                    "is \"yarn\" and the file holds LongRoPE's factors too: it is one or the other, so tokenscope does not run this model"
                        .into(),
            });
        }
        let ropes = if longrope {
            // LongRoPE: the short factors' frequencies, the long ones' past the original
            // context, every cosine and sine times the attention factor.
            let short = rope_factors(&take(LONGROPE_SHORT)?, LONGROPE_SHORT)?;
            let long = rope_factors(&take(LONGROPE_LONG)?, LONGROPE_LONG)?;
            let (magnitude, original) = longrope_keys(gguf, cfg)?;
            LayerRopes::new(cfg, freqs(Some(&short)).with_magnitude(magnitude))
                .with_long_context(LongContext { freqs: freqs(Some(&long)).with_magnitude(magnitude), original })
        } else {
            LayerRopes::new(cfg, freqs(factors.as_deref()))
        };
        Ok(Weights { token_embd, position_embd, embedding_norm, output_norm, output, output_bias, layers: Layers::read(Vec::new()), ropes })
    }

    /// What the weights are, in figures, from the header alone: parameters, bytes as stored,
    /// storage types (every tensor the configuration reads, a tied LM head once).
    pub fn summary(gguf: &Gguf, cfg: &Config) -> WeightsSummary {
        let mut by_type: Vec<(&'static str, u64)> = Vec::new();
        let (mut parameters, mut bytes) = (0u64, 0u64);
        for (name, shape) in plan(gguf, cfg) {
            let Some(stored) = gguf.stored_type_name(&name) else { continue };
            let size = gguf.tensor_bytes(&name);
            parameters += shape.iter().product::<usize>() as u64;
            bytes += size;
            match by_type.iter_mut().find(|(n, _)| *n == stored) {
                Some(entry) => entry.1 += size,
                None => by_type.push((stored, size)),
            }
        }
        by_type.sort_by_key(|entry| std::cmp::Reverse(entry.1));
        let share = |b: u64| 100.0 * b as f64 / bytes.max(1) as f64;
        let types =
            by_type.iter().filter(|(_, b)| share(*b) >= 0.5).map(|(n, b)| format!("{n} {:.0}%", share(*b))).collect::<Vec<_>>().join(", ");
        WeightsSummary { parameters, bytes, types }
    }

    /// The LM head: `output.weight`, or the embedding when the two are tied.
    pub fn lm_head(&self) -> &QTensor {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }
}

/// Whether block `i` holds W_q, W_k and W_v in one `attn_qkv` tensor (Phi-3's and Phi-2's
/// files may, GPT-2's, GPT-NeoX's and StarCoder's must).
fn has_fused_qkv(gguf: &Gguf, cfg: &Config, i: usize) -> bool {
    let arch = cfg.architecture;
    arch.requires_fused_qkv() || (arch.may_fuse_qkv() && gguf.tensor_info(&format!("blk.{i}.attn_qkv.weight")).is_some())
}

/// Whether block `i` adds a stacked Q/K/V bias (`attn_qkv.bias`): wherever its W_q, W_k and
/// W_v are stacked and the file holds one (ChatGLM's, GLM-4's, Phi-3's, as llama.cpp adds it),
/// and always in a family with biases on every matrix (GPT-2's).
fn has_fused_qkv_bias(gguf: &Gguf, cfg: &Config, i: usize) -> bool {
    has_fused_qkv(gguf, cfg, i) && (cfg.architecture.linear_biases() || gguf.tensor_info(&format!("blk.{i}.attn_qkv.bias")).is_some())
}

/// The names of block `i`'s pre-norms (each a gain, `.weight`, and a LayerNorm's bias,
/// `.bias`): the attention's, and the feed-forward's where it has one of its own. Falcon 40B's
/// blocks have two norms under other names ([`FALCON_ATTENTION_NORM`] before the attention,
/// `attn_norm` before the feed-forward), Seed-OSS's feed-forward norm another
/// ([`Architecture::ffn_norm_name`](super::Architecture::ffn_norm_name)); a family that shares
/// the attention's norm has none for the feed-forward.
fn pre_norm_names(gguf: &Gguf, cfg: &Config, i: usize) -> (&'static str, Option<&'static str>) {
    let arch = cfg.architecture;
    let second = gguf.tensor_info(&format!("blk.{i}.{FALCON_ATTENTION_NORM}.weight")).is_some();
    if arch == super::Architecture::Falcon && second {
        (FALCON_ATTENTION_NORM, Some("attn_norm"))
    } else if arch.shares_attention_norm() {
        ("attn_norm", None)
    } else {
        ("attn_norm", Some(arch.ffn_norm_name()))
    }
}

/// Reads one tensor and reports the bytes read so far.
fn read_tensor<R: Read + Seek>(
    gguf: &Gguf,
    reader: &mut R,
    name: &str,
    done: &mut u64,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<QTensor, ModelError> {
    let t = gguf.tensor(reader, name)?;
    *done += gguf.tensor_bytes(name);
    progress(*done, gguf.file_len());
    Ok(t)
}

/// Reads block `i`'s tensors ([`Weights::check`] has checked them), a fused projection cut
/// into the matrices it holds. In a model whose RoPE pairs split halves, W_q's and W_k's rows
/// (and their biases and head-norm gains) are then reordered so that pairs are adjacent.
fn read_block<R: Read + Seek>(
    gguf: &Gguf,
    reader: &mut R,
    cfg: &Config,
    i: usize,
    done: &mut u64,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<LayerWeights, ModelError> {
    let halves = cfg.rope_pairs() == RopePairs::Halves;
    let order = |heads: usize| halves_to_pairs(cfg.head_dim, cfg.rope_dims, heads);
    let (q_order, k_order, head_order) = (order(cfg.n_heads), order(cfg.n_kv_heads), order(1));
    let rows = |t: QTensor, order: &[usize]| if halves { permute_rows(&t, order) } else { Ok(t) };
    let gains = |v: Vec<f32>, order: &[usize]| if halves { permute(&v, order) } else { v };
    let name = |t: &str| format!("blk.{i}.{t}");
    let present = |t: &str| gguf.tensor_info(&name(t)).is_some();
    let mut take = |t: &str| read_tensor(gguf, reader, &name(t), done, progress);
    let (q, kv) = (cfg.n_heads * cfg.head_dim, cfg.kv_dim());
    let mixer = if let Some(conv) = cfg.short_conv.as_ref().filter(|_| cfg.is_conv_layer(i)) {
        Mixer::ShortConv(ShortConvWeights {
            in_proj: take("shortconv.in_proj.weight")?,
            kernel: to_vec(&take("shortconv.conv.weight")?)?,
            width: conv.width,
            out_proj: take("shortconv.out_proj.weight")?,
        })
    } else if cfg.is_ssm_layer(i) {
        Mixer::Ssm(SsmWeights {
            in_proj: take("ssm_in.weight")?,
            conv_kernel: to_vec(&take("ssm_conv1d.weight")?)?,
            conv_bias: to_vec(&take("ssm_conv1d.bias")?)?,
            dt_bias: to_vec(&take("ssm_dt.bias")?)?,
            a: to_vec(&take("ssm_a")?)?,
            d: to_vec(&take("ssm_d")?)?,
            norm: to_vec(&take("ssm_norm.weight")?)?,
            out_proj: take("ssm_out.weight")?,
        })
    } else {
        let qkv_bias = if has_fused_qkv_bias(gguf, cfg, i) {
            let stacked = to_vec(&take("attn_qkv.bias")?)?;
            let (bq, rest) = stacked.split_at(q);
            let (bk, bv) = rest.split_at(kv);
            Some(QkvBias { q: gains(bq.to_vec(), &q_order), k: gains(bk.to_vec(), &k_order), v: bv.to_vec() })
        } else if present("attn_q.bias") {
            Some(QkvBias {
                q: gains(to_vec(&take("attn_q.bias")?)?, &q_order),
                k: gains(to_vec(&take("attn_k.bias")?)?, &k_order),
                v: to_vec(&take("attn_v.bias")?)?,
            })
        } else {
            None
        };
        // A head's gain reorders as one head's rows do; a whole projection's as W_q's and W_k's.
        let head_norm = match cfg.architecture.head_norm() {
            Some(span) => {
                let (q, k) = match span {
                    HeadNormSpan::Head => (&head_order, &head_order),
                    HeadNormSpan::Whole => (&q_order, &k_order),
                };
                Some(HeadNorm { q: gains(to_vec(&take("attn_q_norm.weight")?)?, q), k: gains(to_vec(&take("attn_k_norm.weight")?)?, k) })
            }
            None => None,
        };
        let [wq, wk, wv] = if has_fused_qkv(gguf, cfg, i) {
            parts(split_rows(&take("attn_qkv.weight")?, &[q, kv, kv])?)?
        } else {
            [take("attn_q.weight")?, take("attn_k.weight")?, take("attn_v.weight")?]
        };
        let wo = take("attn_output.weight")?;
        Mixer::Attention(AttentionWeights { wq: rows(wq, &q_order)?, wk: rows(wk, &k_order)?, wv, qkv_bias, head_norm, wo })
    };
    let post_norm = if cfg.architecture.has_post_norms() {
        Some(PostNorms { attn: to_vec(&take("post_attention_norm.weight")?)?, ffn: to_vec(&take("post_ffw_norm.weight")?)? })
    } else {
        None
    };
    // The attention's output is in V's order (W_v's rows are never reordered): so is its gain.
    let sub_norms = if cfg.architecture.has_sub_norms() {
        Some(SubNorms { attn: to_vec(&take("attn_sub_norm.weight")?)?, ffn: to_vec(&take("ffn_sub_norm.weight")?)? })
    } else {
        None
    };
    let pre_norms = cfg.architecture.has_pre_norms();
    let mut norm = |t: &str| -> Result<Option<Norm>, ModelError> {
        if !pre_norms {
            return Ok(None);
        }
        Norm::read(cfg, |part| to_vec(&take(&format!("{t}.{part}"))?)).map(Some)
    };
    let (attn_norm, ffn_norm) = pre_norm_names(gguf, cfg, i);
    let attn_norm = norm(attn_norm)?;
    let ffn_norm = match ffn_norm {
        Some(name) => norm(name)?,
        None => None,
    };
    let ffn = if let Some(e) = &cfg.experts {
        let router = take("ffn_gate_inp.weight")?;
        let gates = split_experts(&take("ffn_gate_exps.weight")?, e.count)?;
        let ups = split_experts(&take("ffn_up_exps.weight")?, e.count)?;
        let downs = split_experts(&take("ffn_down_exps.weight")?, e.count)?;
        let experts = gates.into_iter().zip(ups).zip(downs).map(|((gate, up), down)| DenseFeedForward { gate: Some(gate), up, down });
        let shared = match e.shared_ffn_dim {
            Some(_) => Some(DenseFeedForward {
                gate: Some(take("ffn_gate_shexp.weight")?),
                up: take("ffn_up_shexp.weight")?,
                down: take("ffn_down_shexp.weight")?,
            }),
            None => None,
        };
        FeedForward::Experts(ExpertWeights { router, experts: experts.collect(), shared })
    } else {
        let (gate, up) = if cfg.architecture.has_fused_projections() {
            let [gate, up] = parts(split_rows(&take("ffn_up.weight")?, &[cfg.ffn_dim, cfg.ffn_dim])?)?;
            (Some(gate), up)
        } else if cfg.architecture.gated_ffn() {
            (Some(take("ffn_gate.weight")?), take("ffn_up.weight")?)
        } else {
            (None, take("ffn_up.weight")?)
        };
        FeedForward::Dense(DenseFeedForward { gate, up, down: take("ffn_down.weight")? })
    };
    let biases = if cfg.architecture.linear_biases() {
        Some(LinearBiases {
            wo: to_vec(&take("attn_output.bias")?)?,
            up: to_vec(&take("ffn_up.bias")?)?,
            down: to_vec(&take("ffn_down.bias")?)?,
        })
    } else {
        None
    };
    Ok(LayerWeights { post_norm, attn_norm, mixer, ffn_norm, ffn, biases, sub_norms })
}

/// The `N` parts [`split_rows`] cut, as an array.
fn parts<const N: usize>(cut: Vec<QTensor>) -> Result<[QTensor; N], ModelError> {
    cut.try_into().map_err(|p: Vec<QTensor>| ModelError::Malformed(format!("{} parts cut where {N} were asked", p.len())))
}

/// LongRoPE's attention factor (`rope.scaling.attn_factor`, 1 if absent; a finite number
/// above 0) and original context (`rope.scaling.original_context_length`, the model's
/// context if absent, as llama.cpp takes it).
fn longrope_keys(gguf: &Gguf, cfg: &Config) -> Result<(f32, usize), ModelError> {
    let factor_key = cfg.key("rope.scaling.attn_factor");
    let magnitude = gguf.f32_opt(&factor_key)?.unwrap_or(1.0);
    if !(magnitude.is_finite() && magnitude > 0.0) {
        return Err(ModelError::Metadata { key: factor_key, problem: format!("is {magnitude}; it must be a finite number above 0") });
    }
    let original = gguf.usize_opt(&cfg.key("rope.scaling.original_context_length"))?.unwrap_or(cfg.context_len);
    Ok((magnitude, original))
}

/// Per-pair RoPE factors (Llama 3's, LongRoPE's) from tensor `name`, each a finite number
/// above 0 (a wavelength multiplier).
fn rope_factors(t: &QTensor, name: &str) -> Result<Vec<f32>, ModelError> {
    let factors = to_vec(t)?;
    match factors.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
        Some(bad) => Err(ModelError::Metadata {
            key: name.into(),
            problem: format!("holds {bad}; every RoPE frequency factor must be a finite number above 0"),
        }),
        None => Ok(factors),
    }
}

fn check_shape(gguf: &Gguf, name: &str, expected: &[usize]) -> Result<(), ModelError> {
    let (found, _) = gguf.tensor_info(name).ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
    // An outer dimension of 1 holds nothing more: Granite 4.0 H's one-group `ssm_norm` is
    // `[1, inner]` in its file, `[inner]` as another writer may store it.
    let outer_ones = |dims: &[usize]| dims.iter().take_while(|&&n| n == 1).count().min(dims.len().saturating_sub(1));
    if found[outer_ones(&found)..] != expected[outer_ones(expected)..] {
        return Err(ModelError::ShapeMismatch { name: name.to_string(), found, expected: expected.to_vec() });
    }
    Ok(())
}

/// Dequantizes a tensor to a flat `f32` vector (row-major).
pub fn to_vec(t: &QTensor) -> Result<Vec<f32>, ModelError> {
    t.dequantize(&Device::Cpu)
        .and_then(|x| x.flatten_all())
        .and_then(|x| x.to_vec1::<f32>())
        .map_err(|e| ModelError::Malformed(format!("cannot dequantize: {e}")))
}

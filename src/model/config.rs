//! The model's hyper-parameters, read from GGUF metadata under its architecture's prefix
//! (`llama.*`, `qwen2.*`, `qwen3.*`, `qwen3moe.*`, `granitemoe.*`, `olmoe.*`, `gemma.*`, `gemma2.*`, `gemma3.*`, `smollm3.*`, `phi3.*`,
//! `granite.*`, `minicpm.*`, `olmo2.*`, `ernie4_5.*`, `internlm2.*`, `exaone.*`,
//! `exaone4.*`, `glm4.*`, `stablelm.*`, `gpt2.*`, `phi2.*`, `gptneox.*`, `starcoder.*`, `starcoder2.*`,
//! `bloom.*`, `arcee.*`, `nemotron.*`, `mistral3.*`, `command-r.*`, `cohere2.*`, `olmo.*`).

use candle_core::quantized::gguf_file::Value;
use serde::Serialize;

use super::architecture::{Architecture, RopePairs, SectionLayout, GEMMA3_LOCAL_ROPE_BASE};
use super::rope::{LayerRope, RopeSections, Yarn, YARN_BETA_FAST, YARN_BETA_SLOW};
use crate::error::ModelError;
use crate::gguf::Gguf;

/// Most transformer blocks a model may declare.
pub const MAX_LAYERS: usize = 1024;
/// Widest residual stream a model may declare (the feed-forward may be 8 times wider).
pub const MAX_WIDTH: usize = 65_536;
/// Largest vocabulary a model may declare.
pub const MAX_VOCAB: usize = 1 << 21;
/// Longest context window a model may declare.
pub const MAX_CONTEXT: usize = 1 << 20;
/// Tensors in one llama block (two norms, four attention and three feed-forward matrices).
const TENSORS_PER_BLOCK: usize = 9;
/// Tensors in a block whose feed-forward reads the attention's norm (Cohere's: one norm, four
/// attention and three feed-forward matrices), and in a convolving block (LFM2's: two norms,
/// the convolution's three tensors and three feed-forward matrices).
const TENSORS_PER_SHARED_NORM_BLOCK: usize = 8;
/// Tensors in a block whose norms hold no tensor (OLMo 1's: four attention and three
/// feed-forward matrices).
const TENSORS_PER_GAINLESS_BLOCK: usize = 7;
/// Fewest tensors in a block whose projections are fused (Phi-3's: two norms, `attn_qkv`,
/// `attn_output`, `ffn_up`, `ffn_down`).
const TENSORS_PER_FUSED_BLOCK: usize = 6;
/// Gemma 3 27B's block count, by which llama.cpp knows it and gives it another attention
/// scale ([`attention_scale`]).
const GEMMA3_27B_LAYERS: usize = 62;
/// Gemma 2 27B's block count, likewise (the same attention scale as Gemma 3 27B's).
const GEMMA2_27B_LAYERS: usize = 46;
/// EXAONE 4 32B's block count, by which llama.cpp knows the EXAONE 4 whose layers slide, and
/// its window where the file does not say.
const EXAONE4_32B_LAYERS: usize = 64;
const EXAONE4_DEFAULT_WINDOW: usize = 4096;
/// Gemma 2's sliding window, attention score cap and logit cap where its file does not say
/// (llama.cpp's defaults, the model's own values).
const GEMMA2_DEFAULT_WINDOW: usize = 4096;
const GEMMA2_DEFAULT_ATTN_SOFTCAP: f32 = 50.0;
const GEMMA2_DEFAULT_FINAL_SOFTCAP: f32 = 30.0;

/// Shape and numerics of a llama-family model.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct Config {
    /// The model family (`general.architecture`).
    pub architecture: Architecture,
    /// Transformer blocks.
    pub n_layers: usize,
    /// Width of the residual stream (d_model).
    pub dim: usize,
    /// Hidden width of the SwiGLU feed-forward network.
    pub ffn_dim: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (grouped-query attention: `n_heads / n_kv_heads` queries share one).
    pub n_kv_heads: usize,
    /// Width of one head (`attention.key_length`, else `dim / n_heads`).
    pub head_dim: usize,
    /// Vocabulary size (rows of the embedding and of the LM head).
    pub vocab_size: usize,
    /// Context window in tokens: the file's, or for Ministral 3's attention temperature its
    /// original context where that is shorter
    /// ([`Architecture::reads_attention_temperature`]).
    pub context_len: usize,
    /// Elements of each head RoPE turns, the first ones (`rope.dimension_count`, Phi-4-mini's
    /// 96 of 128; the head width when absent); the rest pass through unturned.
    pub rope_dims: usize,
    /// RoPE base frequency.
    pub rope_base: f32,
    /// RoPE's linear position scale (`rope.scaling.factor` of `rope.scaling.type = linear`;
    /// 1 when unscaled or YaRN-scaled). Llama 3's per-pair factors are a tensor, read with
    /// the weights.
    pub rope_scale: f32,
    /// YaRN's parameters where the file scales RoPE by YaRN (`rope.scaling.type = yarn`):
    /// the file's frequencies, not a sliding-window layer's.
    pub rope_yarn: Option<Yarn>,
    /// The RoPE base of sliding-window layers where they turn by their own frequencies:
    /// Gemma 3's fixed [`GEMMA3_LOCAL_ROPE_BASE`](super::architecture::GEMMA3_LOCAL_ROPE_BASE),
    /// OLMo 3's `rope.freq_base_swa` (else the file's base, unscaled by YaRN).
    pub sliding_rope_base: Option<f32>,
    /// The norms' epsilon: RMSNorm's (`attention.layer_norm_rms_epsilon`), or LayerNorm's
    /// (`attention.layer_norm_epsilon`) where the architecture's norms are LayerNorms.
    pub norm_eps: f32,
    /// Positions a sliding-window layer attends over, its own included
    /// (`attention.sliding_window`; Gemma 3's, whose first five of every six layers slide,
    /// and Gemma 2's, every other), `None` where every layer sees every position.
    pub sliding_window: Option<usize>,
    /// The attention scores' cap (`attn_logit_softcapping`, Gemma 2's 50): each scaled score
    /// `s` becomes `cap * tanh(s / cap)` before the softmax; `None`: uncapped.
    pub attn_softcap: Option<f32>,
    /// The logits' cap (`final_logit_softcapping`, Gemma 2's 30): each logit `z` becomes
    /// `cap * tanh(z / cap)`; `None`: uncapped.
    pub final_softcap: Option<f32>,
    /// What the token embedding's rows are multiplied by: Gemma's `sqrt(dim)`, Granite's
    /// `embedding_scale`, else 1 (the LM head tied to the same table is not).
    pub embedding_scale: f32,
    /// What each sublayer's output is multiplied by before it joins the residual stream
    /// (Granite's `residual_scale`; 1 otherwise).
    pub residual_scale: f32,
    /// What each query-key dot product is multiplied by before any cap and the softmax:
    /// `1 / sqrt(head_dim)`, or Granite's `attention.scale`.
    pub attention_scale: f32,
    /// What the logits are multiplied by, before any cap: Cohere's `logit_scale`, the
    /// reciprocal of Granite's (llama.cpp's `1 / logit_scale`, a divisor there); 1 otherwise.
    pub logit_scale: f32,
    /// Whether each block's two sublayers read the same input, `x += attn(n1(x)) +
    /// ffn(n2(x))`, rather than the feed-forward reading the stream after the attention's add:
    /// Phi-2's always (`n2` is `n1`, [`Architecture::shares_attention_norm`]), GPT-NeoX's where
    /// its file's `use_parallel_residual` says ([`Architecture::reads_parallel_residual`]).
    pub parallel_residual: bool,
    /// ALiBi's largest bias where the attention scores are biased by distance (BLOOM's 8,
    /// [`Architecture::alibi_max_bias`]): query head `h`'s slope is
    /// [`Config::alibi_slope`]; `None` without ALiBi.
    pub alibi_max_bias: Option<f32>,
    /// Where every element of q, k and v is clamped to `[-c, c]` after its projection and
    /// bias, before RoPE (OLMo 1.7's `attention.clamp_kqv`, [`read_clamp`]); `None` for no
    /// clamp.
    pub clamp_kqv: Option<f32>,
    /// Multimodal RoPE's sections where the family has them (Qwen2-VL's and Qwen3-VL's
    /// `rope.dimension_sections`, [`read_sections`]): for text, the pairs of the fourth
    /// section stay still and every other turns as plain RoPE; `None` elsewhere.
    pub rope_sections: Option<RopeSections>,
    /// LFM2's short convolutions: which layers convolve instead of attending, and over how
    /// many positions ([`Architecture::has_short_convolutions`]); `None` where every layer
    /// attends.
    pub short_conv: Option<ShortConv>,
    /// Granite 4.0 H's Mamba-2 layers: which layers scan a state instead of attending, and
    /// the scan's shape ([`Architecture::has_ssm_layers`]); `None` where every layer attends.
    pub ssm: Option<Ssm>,
    /// Whether no layer turns by RoPE (Granite's `rope.scaling.finetuned` false, which
    /// llama.cpp's Granite graphs read as NoPE in every layer: Granite 4.0 H's).
    pub nope: bool,
    /// Where each layer's feed-forward is a mixture of experts (Qwen3-MoE's, Mixtral's:
    /// [`Architecture::reads_experts`]): how many there are, how many each token runs and
    /// their width; `None` where every feed-forward is one dense SwiGLU.
    pub experts: Option<Experts>,
}

/// A mixture of experts in place of each layer's feed-forward: a router (a `[count, dim]`
/// matrix) scores every expert for a token, the softmax of those scores picks the `used`
/// most probable, each runs a SwiGLU of width `ffn_dim` on the token, and their outputs are
/// added weighted by those probabilities (divided by their sum where `normalized`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct Experts {
    /// Experts in each layer (`expert_count`).
    pub count: usize,
    /// Experts each token runs (`expert_used_count`).
    pub used: usize,
    /// Hidden width of each expert's SwiGLU (`expert_feed_forward_length` where the family
    /// reads it, else llama.cpp's default for the family).
    pub ffn_dim: usize,
    /// Whether the picked experts' probabilities are divided by their sum
    /// ([`Architecture::normalizes_expert_weights`]).
    pub normalized: bool,
    /// Hidden width of the shared expert's SwiGLU, which every token runs beside its picks
    /// and whose output is added to theirs (`expert_shared_feed_forward_length`, Granite 4.0
    /// H Tiny's and Small's: [`Architecture::reads_shared_expert`]); `None` without one.
    pub shared_ffn_dim: Option<usize>,
}

/// Most experts a layer may hold (the largest files have 256 or 512).
pub const MAX_EXPERTS: usize = 1024;

/// Which layers of a hybrid (LFM2) run a gated short convolution in place of attention, and
/// how far back it reaches.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct ShortConv {
    /// Per layer: whether it convolves (its `attention.head_count_kv` is 0) rather than attends.
    pub layers: Vec<bool>,
    /// Positions each channel's convolution spans, the token's own included
    /// (`shortconv.l_cache`, LFM2's 3).
    pub width: usize,
}

/// Which layers of a hybrid (Granite 4.0 H) run a Mamba-2 selective state-space scan in
/// place of attention, and the scan's shape (the file's `ssm.*` keys).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct Ssm {
    /// Per layer: whether it scans (its `attention.head_count_kv` is 0) rather than attends.
    pub layers: Vec<bool>,
    /// Positions the causal convolution before the scan spans, the token's own included
    /// (`ssm.conv_kernel`, Granite 4.0 H's 4).
    pub conv_width: usize,
    /// Channels the scan runs, `heads * head_dim` (`ssm.inner_size`, twice the model width).
    pub inner: usize,
    /// Each channel's state width (`ssm.state_size`, 128).
    pub state: usize,
    /// Heads, each with its own step size and decay (`ssm.time_step_rank`).
    pub heads: usize,
    /// Groups of heads sharing one B and one C, and one span of the gated norm
    /// (`ssm.group_count`).
    pub groups: usize,
}

impl Ssm {
    /// Channels of one head.
    pub fn head_dim(&self) -> usize {
        self.inner / self.heads.max(1)
    }

    /// Channels the convolution runs: x, then each group's B, then each group's C.
    pub fn conv_dim(&self) -> usize {
        self.inner + 2 * self.groups * self.state
    }

    /// Rows of the input projection: z, x, B, C and each head's dt.
    pub fn in_proj_rows(&self) -> usize {
        self.inner + self.conv_dim() + self.heads
    }

    /// Floats a scanning layer's cache keeps per position: the convolution's input (x, B, C
    /// before it) and each head's dt, from which the state at any position can be rebuilt.
    pub fn row_floats(&self) -> usize {
        self.conv_dim() + self.heads
    }

    /// Floats of one layer's state, `[heads, head_dim, state]`.
    pub fn state_floats(&self) -> usize {
        self.inner * self.state
    }
}

/// The longest short convolution a file may ask for (LFM2's is 3 positions).
pub const MAX_SHORT_CONV_WIDTH: usize = 16;

/// The key (after the architecture's prefix) of GPT-NeoX's choice of a parallel residual.
pub const PARALLEL_RESIDUAL: &str = "use_parallel_residual";

/// Granite's scales' keys (after its prefix): the embedding's, the residual's, the attention
/// scores' and the logits' divisor. Its file must give the last; any other missing (or 0)
/// leaves what it scales as llama's block has it, as llama.cpp reads them.
pub const GRANITE_SCALES: [&str; 4] = ["embedding_scale", "residual_scale", "attention.scale", "logit_scale"];

impl Config {
    /// Reads and checks the configuration of a GGUF of a supported architecture.
    pub fn from_gguf(g: &Gguf) -> Result<Self, ModelError> {
        // A part of a split model (its later parts have no general.architecture at all).
        if let Some(count) = g.usize_opt("split.count")?.filter(|&n| n > 1) {
            return Err(ModelError::SplitPart { part: g.usize_opt("split.no")?.unwrap_or(0), count });
        }
        let architecture = Architecture::from_name(g.string("general.architecture")?)?;
        let key = |name: &str| format!("{}.{name}", architecture.name());
        let dim = g.usize(&key("embedding_length"))?;
        let n_layers = g.usize(&key("block_count"))?;
        if architecture.baichuan_positions(n_layers).is_none() {
            return Err(ModelError::Metadata {
                key: key("block_count"),
                problem: format!(
                    "is {n_layers}; llama.cpp sets a baichuan model's positions by its block count, RoPE for {} (7B) and ALiBi for {} (13B), and runs any other count with none",
                    super::architecture::BAICHUAN_7B_LAYERS,
                    super::architecture::BAICHUAN_13B_LAYERS
                ),
            });
        }
        let n_heads = g.layer_usize(&key("attention.head_count"), n_layers)?;
        let (n_kv_heads, short_conv, ssm) = if architecture.has_short_convolutions() {
            let (n_kv_heads, conv) = read_short_conv(g, &key, n_layers, n_heads)?;
            (n_kv_heads, conv, None)
        } else if architecture.has_ssm_layers() {
            let (n_kv_heads, ssm) = read_ssm(g, &key, n_layers, n_heads)?;
            (n_kv_heads, None, ssm)
        } else {
            (g.layer_usize_opt(&key("attention.head_count_kv"), n_layers)?.unwrap_or(n_heads), None, None)
        };
        let vocab_size = match g.usize_opt(&key("vocab_size"))? {
            Some(v) => v,
            None => g.strings("tokenizer.ggml.tokens")?.len(),
        };
        let head_dim = match g.usize_opt(&key("attention.key_length"))? {
            Some(width) => width,
            None => dim.checked_div(n_heads).unwrap_or(0),
        };
        let cfg = Config {
            architecture,
            n_layers,
            dim,
            ffn_dim: read_ffn_dim(g, &key, n_layers, architecture)?,
            n_heads,
            n_kv_heads,
            head_dim,
            vocab_size,
            context_len: g.usize(&key("context_length"))?,
            rope_dims: g.usize_opt(&key("rope.dimension_count"))?.unwrap_or(head_dim),
            rope_base: g.f32_opt(&key("rope.freq_base"))?.unwrap_or(10_000.0),
            rope_scale: 1.0,
            rope_yarn: None,
            sliding_rope_base: None,
            norm_eps: g.f32_opt(&key(eps_key(architecture)))?.unwrap_or(1e-5),
            sliding_window: match architecture {
                Architecture::Gemma2 => {
                    Some(g.usize_opt(&key("attention.sliding_window"))?.unwrap_or(GEMMA2_DEFAULT_WINDOW)).filter(|&w| w > 0)
                }
                // llama.cpp slides EXAONE 4's layers in its 32B alone (known by its 64 blocks),
                // over the file's window or 4096, and runs any other exaone4 file's every layer
                // over every position, whatever window it names.
                Architecture::Exaone4 if n_layers == EXAONE4_32B_LAYERS => {
                    Some(g.usize_opt(&key("attention.sliding_window"))?.unwrap_or(EXAONE4_DEFAULT_WINDOW)).filter(|&w| w > 0)
                }
                Architecture::Exaone4 => None,
                // Cohere2's window is required, as llama.cpp requires it.
                Architecture::Cohere2 => match g.usize(&key("attention.sliding_window"))? {
                    0 => {
                        return Err(ModelError::Metadata {
                            key: key("attention.sliding_window"),
                            problem: "is 0; three of every four cohere2 layers attend over that window".into(),
                        })
                    }
                    window => Some(window),
                },
                a if a.slides() => g.usize_opt(&key("attention.sliding_window"))?.filter(|&w| w > 0),
                _ => None,
            },
            attn_softcap: softcap(g, architecture, &key, "attn_logit_softcapping", GEMMA2_DEFAULT_ATTN_SOFTCAP)?,
            final_softcap: softcap(g, architecture, &key, "final_logit_softcapping", GEMMA2_DEFAULT_FINAL_SOFTCAP)?,
            embedding_scale: architecture.embedding_scale(dim),
            residual_scale: 1.0,
            attention_scale: attention_scale(architecture, n_layers, dim, n_heads, head_dim),
            logit_scale: 1.0,
            parallel_residual: if architecture.reads_parallel_residual() {
                g.bool(&key(PARALLEL_RESIDUAL))?
            } else {
                architecture.shares_attention_norm()
            },
            alibi_max_bias: if architecture.reads_alibi_max_bias() {
                read_alibi_max_bias(g, &key)?
            } else if architecture.baichuan_positions(n_layers) == Some(true) {
                Some(super::architecture::ALIBI_MAX_BIAS)
            } else {
                architecture.alibi_max_bias()
            },
            // llama.cpp reads the clamp for OLMo 1 and MPT alone among the engine's families.
            clamp_kqv: if architecture.reads_clamp_kqv() { read_clamp(g, &key)? } else { None },
            rope_sections: match architecture.multimodal_rope() {
                Some(layout) => read_sections(g, &key, architecture, layout, head_dim)?,
                None => None,
            },
            short_conv,
            ssm,
            nope: false,
            experts: if architecture.reads_experts() { read_experts(g, &key, architecture, n_layers)? } else { None },
        };
        let cfg = with_file_scales(cfg, g, &key)?;
        let cfg = with_rope_scaling(cfg, g, &key)?;
        let cfg = with_ntk_alpha(cfg, g, &key)?;
        let cfg = with_attention_temperature(cfg, g, &key)?;
        cfg.validate(g.tensor_count(), g.usize_opt(&key("attention.key_length"))?.is_some())?;
        check_value_width(g, &key, head_dim)?;
        check_no_longrope(g, architecture, &key)?;
        if architecture.multimodal_rope().is_none() {
            check_no_sections(g, &key)?;
        }
        check_sliding_pattern(g, &cfg)?;
        Ok(cfg)
    }

    /// Where RoPE's pairs sit within a head: the architecture's, or split halves wherever
    /// multimodal RoPE turns them (llama.cpp's M-RoPE turns as NEOX does: GLM-4V's, where
    /// GLM-4's own are adjacent).
    pub fn rope_pairs(&self) -> RopePairs {
        match self.rope_sections {
            Some(_) => RopePairs::Halves,
            None => self.architecture.rope_pairs(),
        }
    }

    /// The metadata key `name` under this model's architecture (`qwen2.block_count`).
    pub fn key(&self, name: &str) -> String {
        format!("{}.{name}", self.architecture.name())
    }

    fn validate(&self, tensors_in_file: usize, explicit_head_width: bool) -> Result<(), ModelError> {
        let bad = |name: &str, problem: String| ModelError::Metadata { key: self.key(name), problem };
        let in_range = |name: &str, value: usize, max: usize| {
            if value == 0 || value > max {
                return Err(bad(name, format!("is {value}; it must be from 1 to {max}")));
            }
            Ok(())
        };
        in_range("block_count", self.n_layers, MAX_LAYERS)?;
        // Every block stores nine tensors (six, fused; eight with one norm or a convolution,
        // seven with none): a block count the file cannot hold is refused before anything is
        // sized by it.
        let per_block = if self.architecture.may_fuse_qkv() {
            TENSORS_PER_FUSED_BLOCK
        } else if !self.architecture.norm_gains() {
            TENSORS_PER_GAINLESS_BLOCK
        } else if self.architecture.shares_attention_norm() || self.architecture.has_short_convolutions() {
            TENSORS_PER_SHARED_NORM_BLOCK
        } else {
            TENSORS_PER_BLOCK
        };
        if self.n_layers.saturating_mul(per_block) > tensors_in_file {
            return Err(bad(
                "block_count",
                format!("is {} but the file holds {tensors_in_file} tensors, too few for that many blocks", self.n_layers),
            ));
        }
        in_range("embedding_length", self.dim, MAX_WIDTH)?;
        in_range("feed_forward_length", self.ffn_dim, MAX_WIDTH * 8)?;
        in_range("vocab_size", self.vocab_size, MAX_VOCAB)?;
        in_range("context_length", self.context_len, MAX_CONTEXT)?;
        in_range("attention.head_count", self.n_heads, MAX_WIDTH)?;
        if explicit_head_width {
            in_range("attention.key_length", self.head_dim, MAX_WIDTH)?;
            if self.n_heads.saturating_mul(self.head_dim) > MAX_WIDTH {
                return Err(bad("attention.key_length", format!("{} heads of {} are wider than {MAX_WIDTH}", self.n_heads, self.head_dim)));
            }
        } else if !self.dim.is_multiple_of(self.n_heads) {
            return Err(bad("attention.head_count", format!("{} does not divide embedding_length {}", self.n_heads, self.dim)));
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(bad("attention.head_count", format!("head width {} is odd; RoPE rotates pairs", self.head_dim)));
        }
        if self.n_kv_heads == 0 || !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return Err(bad("attention.head_count_kv", format!("{} does not divide head_count {}", self.n_kv_heads, self.n_heads)));
        }
        if self.architecture.full_width_qkv() && (self.n_kv_heads != self.n_heads || self.n_heads * self.head_dim != self.dim) {
            return Err(bad(
                "attention.head_count_kv",
                format!(
                    "is {} key/value heads of {} for {} query heads; a {} model's stacked Q, K and V are each embedding_length {} wide, as llama.cpp reads them",
                    self.n_kv_heads,
                    self.head_dim,
                    self.n_heads,
                    self.architecture.name(),
                    self.dim
                ),
            ));
        }
        if self.rope_dims == 0 || self.rope_dims > self.head_dim || !self.rope_dims.is_multiple_of(2) {
            return Err(bad(
                "rope.dimension_count",
                format!("is {}; it must be even, from 2 to the head width {}", self.rope_dims, self.head_dim),
            ));
        }
        if self.rope_dims != self.head_dim && !self.architecture.allows_partial_rope() {
            return Err(bad(
                "rope.dimension_count",
                format!(
                    "is {}, not the head width {}: a {} model turns whole heads (tokenscope reads RoPE on part of each head for {} only, as llama.cpp computes it), so tokenscope does not run this model",
                    self.rope_dims,
                    self.head_dim,
                    self.architecture.name(),
                    Architecture::ALL.iter().filter(|a| a.allows_partial_rope()).map(|a| a.name()).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        if !(self.rope_base.is_finite() && self.rope_base > 1.0) {
            return Err(bad("rope.freq_base", format!("is {}; it must be a finite number above 1", self.rope_base)));
        }
        if !(self.norm_eps.is_finite() && self.norm_eps > 0.0 && self.norm_eps < 1.0) {
            return Err(bad(eps_key(self.architecture), format!("is {}; it must be between 0 and 1", self.norm_eps)));
        }
        Ok(())
    }

    /// The positions layer `layer` attends over when its token is at `pos`: the last
    /// [`Config::sliding_window`] of them in a sliding layer, else `0..=pos`.
    pub fn attended(&self, layer: usize, pos: usize) -> std::ops::Range<usize> {
        match self.sliding_window.filter(|_| self.architecture.is_sliding_layer(layer)) {
            Some(window) => (pos + 1).saturating_sub(window)..pos + 1,
            None => 0..pos + 1,
        }
    }

    /// Which RoPE frequencies layer `layer` turns by: none where the architecture skips RoPE
    /// there (SmolLM3's NoPE layers; EXAONE 4's full layers beside sliding ones; every layer
    /// of a model with ALiBi, Baichuan 13B's among them), a
    /// sliding-window layer's own where it slides and has them, else the file's.
    pub fn layer_rope(&self, layer: usize) -> LayerRope {
        let sliding = self.sliding_window.is_some() && self.architecture.is_sliding_layer(layer);
        let full_unrotated = self.sliding_window.is_some() && !sliding && self.architecture.full_layers_unrotated();
        if self.nope || !self.architecture.rotates(layer) || full_unrotated || self.alibi_max_bias.is_some() {
            LayerRope::Unrotated
        } else if sliding && self.sliding_rope_base.is_some() {
            LayerRope::Sliding
        } else {
            LayerRope::Main
        }
    }

    /// Query head `head`'s ALiBi slope ([`alibi_slope`](super::alibi::alibi_slope)), 0
    /// without ALiBi (every bias then 0).
    pub fn alibi_slope(&self, head: usize) -> f32 {
        self.alibi_max_bias.map_or(0.0, |max_bias| super::alibi::alibi_slope(head, self.n_heads, max_bias))
    }

    /// Width of the K (or V) projection: `n_kv_heads * head_dim`.
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Whether layer `layer` runs a Mamba-2 scan in place of attention (Granite 4.0 H's).
    pub fn is_ssm_layer(&self, layer: usize) -> bool {
        self.ssm.as_ref().is_some_and(|s| s.layers.get(layer).copied().unwrap_or(false))
    }

    /// Whether layer `layer` attends (neither convolves nor scans), so holds keys and values.
    pub fn attends(&self, layer: usize) -> bool {
        !self.is_conv_layer(layer) && !self.is_ssm_layer(layer)
    }

    /// Whether layer `layer` runs a short convolution in place of attention (LFM2's).
    pub fn is_conv_layer(&self, layer: usize) -> bool {
        self.short_conv.as_ref().is_some_and(|c| c.layers.get(layer).copied().unwrap_or(false))
    }

    /// Per layer: the positions its short convolution spans where it convolves (LFM2's), 0
    /// where it attends.
    pub fn conv_widths(&self) -> Vec<usize> {
        (0..self.n_layers).map(|l| if self.is_conv_layer(l) { self.short_conv.as_ref().map_or(0, |c| c.width) } else { 0 }).collect()
    }

    /// Floats a layer's cache holds per position: keys then values (`2 kv_dim`) where it
    /// attends, each channel's gated input `b * x'` (`dim`) where it convolves, the scan's
    /// inputs ([`Ssm::row_floats`]) where it scans (its fixed-size state apart).
    pub fn layer_cache_floats(&self, layer: usize) -> usize {
        if self.is_conv_layer(layer) {
            self.dim
        } else if let Some(ssm) = self.ssm.as_ref().filter(|_| self.is_ssm_layer(layer)) {
            ssm.row_floats()
        } else {
            2 * self.kv_dim()
        }
    }

    /// KV-cache bytes per token in f32 (K and V, every layer; a convolving layer's gated
    /// inputs, a scanning layer's inputs).
    pub fn kv_bytes_per_token(&self) -> usize {
        self.cache_bytes_per_token(false)
    }

    /// Cache bytes per token with keys and values in half floats where `kv_f16` (a convolving
    /// layer's gated inputs and a scanning layer's inputs stay f32).
    pub fn cache_bytes_per_token(&self, kv_f16: bool) -> usize {
        let bytes = |l: usize| self.layer_cache_floats(l) * if kv_f16 && self.attends(l) { 2 } else { 4 };
        (0..self.n_layers).map(bytes).sum()
    }

    /// Bytes of the scanning layers' fixed-size states, whatever the context: each layer's
    /// live state and the checkpoint a cut back rebuilds from, in f32.
    pub fn ssm_state_bytes(&self) -> usize {
        self.ssm.as_ref().map_or(0, |s| s.layers.iter().filter(|&&l| l).count() * 2 * s.state_floats() * 4)
    }
}

/// A hybrid's head counts: `attention.head_count_kv` a count for every layer, 0 where the
/// layer mixes positions another way (one count shared by every attending layer), or one
/// count for all; and per layer whether it is such a layer. A sliding window
/// (`attention.sliding_window` above 0) is refused: llama.cpp would slide every attending
/// layer of such a file.
fn read_hybrid_layers(
    g: &Gguf,
    key: &impl Fn(&str) -> String,
    n_layers: usize,
    n_heads: usize,
    family: &str,
) -> Result<(usize, Vec<bool>), ModelError> {
    let kv_key = key("attention.head_count_kv");
    let bad = |k: &str, problem: String| ModelError::Metadata { key: k.to_string(), problem };
    let counts = match g.value(&kv_key) {
        Some(Value::Array(values)) => {
            if values.len() != n_layers {
                return Err(bad(&kv_key, format!("holds {} values for {n_layers} layers", values.len())));
            }
            values
                .iter()
                .map(|v| crate::gguf::as_usize(v).ok_or_else(|| bad(&kv_key, "holds a value that is not a non-negative integer".into())))
                .collect::<Result<Vec<_>, _>>()?
        }
        _ => vec![g.usize_opt(&kv_key)?.unwrap_or(n_heads); n_layers],
    };
    let mut attending: Vec<usize> = counts.iter().copied().filter(|&n| n > 0).collect();
    attending.sort_unstable();
    attending.dedup();
    let n_kv_heads = match attending.as_slice() {
        [] => n_heads,
        [n] => *n,
        _ => return Err(bad(&kv_key, format!("varies across the attending layers ({counts:?}); tokenscope runs one shape of attention"))),
    };
    let window_key = key("attention.sliding_window");
    if let Some(window) = g.usize_opt(&window_key)?.filter(|&w| w > 0) {
        return Err(bad(
            &window_key,
            format!("is {window}: {family}'s attending layers would slide over it, which tokenscope does not run"),
        ));
    }
    Ok((n_kv_heads, counts.iter().map(|&n| n == 0).collect()))
}

/// LFM2's head counts and short convolutions ([`read_hybrid_layers`]), and
/// `shortconv.l_cache` the convolution's width, required as llama.cpp requires it.
fn read_short_conv(
    g: &Gguf,
    key: &impl Fn(&str) -> String,
    n_layers: usize,
    n_heads: usize,
) -> Result<(usize, Option<ShortConv>), ModelError> {
    let (n_kv_heads, layers) = read_hybrid_layers(g, key, n_layers, n_heads, "LFM2")?;
    let width_key = key("shortconv.l_cache");
    let width = g.usize(&width_key)?;
    if !(2..=MAX_SHORT_CONV_WIDTH).contains(&width) {
        return Err(ModelError::Metadata {
            key: width_key,
            problem: format!("is {width}; a short convolution spans 2 to {MAX_SHORT_CONV_WIDTH} positions"),
        });
    }
    Ok((n_kv_heads, layers.iter().any(|&c| c).then_some(ShortConv { layers, width })))
}

/// Granite 4.0 H's head counts and Mamba-2 layers ([`read_hybrid_layers`]), and the scan's
/// shape from `ssm.conv_kernel`, `ssm.inner_size`, `ssm.state_size`, `ssm.time_step_rank` and
/// `ssm.group_count`, each required as llama.cpp requires them where a layer scans: heads
/// that split the channels evenly, groups that split the heads evenly.
fn read_ssm(g: &Gguf, key: &impl Fn(&str) -> String, n_layers: usize, n_heads: usize) -> Result<(usize, Option<Ssm>), ModelError> {
    let (n_kv_heads, layers) = read_hybrid_layers(g, key, n_layers, n_heads, "Granite 4.0 H")?;
    if !layers.iter().any(|&s| s) {
        return Ok((n_kv_heads, None));
    }
    let bad = |name: &str, problem: String| ModelError::Metadata { key: key(name), problem };
    let read = |name: &str, max: usize| match g.usize(&key(name))? {
        v if (1..=max).contains(&v) => Ok(v),
        v => Err(bad(name, format!("is {v}; it must be from 1 to {max}"))),
    };
    let conv_width = g.usize(&key("ssm.conv_kernel"))?;
    if !(2..=MAX_SHORT_CONV_WIDTH).contains(&conv_width) {
        return Err(bad("ssm.conv_kernel", format!("is {conv_width}; the scan's convolution spans 2 to {MAX_SHORT_CONV_WIDTH} positions")));
    }
    let inner = read("ssm.inner_size", MAX_WIDTH * 4)?;
    let state = read("ssm.state_size", MAX_SSM_STATE)?;
    let heads = read("ssm.time_step_rank", inner)?;
    let groups = read("ssm.group_count", heads)?;
    if inner % heads != 0 {
        return Err(bad("ssm.time_step_rank", format!("is {heads}, which does not split the {inner} channels (ssm.inner_size) evenly")));
    }
    if heads % groups != 0 {
        return Err(bad("ssm.group_count", format!("is {groups}, which does not split the {heads} heads (ssm.time_step_rank) evenly")));
    }
    Ok((n_kv_heads, Some(Ssm { layers, conv_width, inner, state, heads, groups })))
}

/// The widest state a Mamba-2 channel may keep (Granite 4.0 H's is 128).
pub const MAX_SSM_STATE: usize = 1024;

/// A mixture of experts' shape ([`Config::experts`]) where the file names experts
/// (`expert_count` above 0; required of a family whose every feed-forward is one,
/// [`Architecture::requires_experts`]): `expert_used_count` from 1 to the count, and each
/// expert's width from `expert_feed_forward_length` (Qwen3-MoE's; where absent llama.cpp's
/// `feed_forward_length / expert_used_count`) or `feed_forward_length` (Mixtral's, Granite
/// MoE's, OLMoE's); a shared expert (`expert_shared_feed_forward_length` above 0) only where
/// the family runs one ([`Architecture::reads_shared_expert`]).
fn read_experts(
    g: &Gguf,
    key: &impl Fn(&str) -> String,
    architecture: Architecture,
    n_layers: usize,
) -> Result<Option<Experts>, ModelError> {
    let bad = |k: &str, problem: String| ModelError::Metadata { key: key(k), problem };
    let count = g.usize_opt(&key("expert_count"))?.unwrap_or(0);
    if count == 0 {
        if architecture.requires_experts() {
            return Err(bad(
                "expert_count",
                format!("is 0 or missing; every {} layer's feed-forward is a mixture of experts", architecture.name()),
            ));
        }
        return Ok(None);
    }
    if count > MAX_EXPERTS {
        return Err(bad("expert_count", format!("is {count}; tokenscope runs at most {MAX_EXPERTS} experts a layer")));
    }
    let used = g.usize(&key("expert_used_count"))?;
    if used == 0 || used > count {
        return Err(bad("expert_used_count", format!("is {used}; each token runs from 1 to expert_count ({count}) experts")));
    }
    // A shared expert, which every token runs beside its picks: Granite 4.0 H's (Tiny's,
    // Small's) runs; Granite MoE's (Granite 4.0 Tiny Preview's) is refused.
    let shared_ffn_dim = match g.usize_opt(&key("expert_shared_feed_forward_length"))?.filter(|&n| n > 0) {
        Some(shared) if !architecture.reads_shared_expert() => {
            return Err(bad(
                "expert_shared_feed_forward_length",
                format!("is {shared}: a shared expert beside the picked ones, which tokenscope runs in Granite 4.0 H's files alone"),
            ))
        }
        Some(shared) if shared > MAX_WIDTH * 8 => {
            return Err(bad("expert_shared_feed_forward_length", format!("is {shared}; it must be from 1 to {}", MAX_WIDTH * 8)))
        }
        shared => shared,
    };
    let dense = read_ffn_dim(g, key, n_layers, architecture)?;
    let ffn_dim = match architecture {
        Architecture::Qwen3moe => g.usize_opt(&key("expert_feed_forward_length"))?.unwrap_or(dense / used),
        _ => dense,
    };
    if ffn_dim == 0 || ffn_dim > MAX_WIDTH * 8 {
        return Err(bad("expert_feed_forward_length", format!("is {ffn_dim}; it must be from 1 to {}", MAX_WIDTH * 8)));
    }
    Ok(Some(Experts { count, used, ffn_dim, normalized: architecture.normalizes_expert_weights(), shared_ffn_dim }))
}

/// The key of the norms' epsilon under the architecture's prefix: LayerNorm's where its norms
/// are LayerNorms ([`Architecture::layer_norms`]), else RMSNorm's.
pub(crate) fn eps_key(architecture: Architecture) -> &'static str {
    if architecture.layer_norms() {
        "attention.layer_norm_epsilon"
    } else {
        "attention.layer_norm_rms_epsilon"
    }
}

/// What each query-key dot product is multiplied by where the file gives no scale of its own:
/// `1 / sqrt(head_dim)`, but for Gemma 2 and 3 27B, which llama.cpp knows by their block
/// counts ([`GEMMA2_27B_LAYERS`], [`GEMMA3_27B_LAYERS`]), `1 / sqrt(dim / n_heads)` (168 for
/// Gemma 3 27B's heads of 128, as the model's `query_pre_attn_scalar` says; the division is
/// llama.cpp's, in integers).
fn attention_scale(architecture: Architecture, n_layers: usize, dim: usize, n_heads: usize, head_dim: usize) -> f32 {
    let is_27b = matches!((architecture, n_layers), (Architecture::Gemma2, GEMMA2_27B_LAYERS) | (Architecture::Gemma3, GEMMA3_27B_LAYERS));
    let width = if is_27b { dim.checked_div(n_heads).unwrap_or(0) } else { head_dim };
    1.0 / (width as f32).sqrt()
}

/// Ministral 3's attention temperature (`attention.temperature_scale`,
/// [`Architecture::reads_attention_temperature`]): where the file sets one, the context stops
/// at the original context (`rope.scaling.original_context_length`, else the model's), below
/// which llama.cpp's scale of each query is exactly 1, so the engine, which does not scale
/// queries, computes what llama.cpp does at every position it runs.
fn with_attention_temperature(mut cfg: Config, g: &Gguf, key: &dyn Fn(&str) -> String) -> Result<Config, ModelError> {
    if !cfg.architecture.reads_attention_temperature() {
        return Ok(cfg);
    }
    let scale = g.f32_opt(&key("attention.temperature_scale"))?.unwrap_or(0.0);
    if !scale.is_finite() {
        return Err(ModelError::Metadata {
            key: key("attention.temperature_scale"),
            problem: format!("is {scale}; it must be a finite number"),
        });
    }
    if scale != 0.0 {
        let original = g.usize_opt(&key("rope.scaling.original_context_length"))?.unwrap_or(cfg.context_len);
        if original == 0 {
            return Err(ModelError::Metadata {
                key: key("rope.scaling.original_context_length"),
                problem: "is 0; the attention temperature's floor needs the context the model was trained at".into(),
            });
        }
        cfg.context_len = cfg.context_len.min(original);
    }
    Ok(cfg)
}

/// RoPE's scaling from `rope.scaling.type` and its keys, read into `cfg`: none, `linear`
/// (the factor from 1 to 1024), or `yarn` ([`Yarn`], its ramp llama.cpp's); any other type (LongRoPE's files name
/// none; they are known by their factors) is refused by name rather than run as plain RoPE
/// with wrong logits. Llama 3's scaling is a tensor of per-pair factors, read with the
/// weights. The sliding-window layers' own base ([`Config::sliding_rope_base`]) is read here
/// too: Gemma 3's fixed one, OLMo 3's `rope.freq_base_swa` or the file's base.
fn with_rope_scaling(mut cfg: Config, g: &Gguf, key: &dyn Fn(&str) -> String) -> Result<Config, ModelError> {
    let refuse = |name: &str, problem: String| ModelError::Metadata { key: key(name), problem };
    let factor = || match g.f32_opt(&key("rope.scaling.factor"))? {
        Some(f) if (1.0..=1024.0).contains(&f) => Ok(f),
        Some(f) => Err(refuse("rope.scaling.factor", format!("is {f}; RoPE scaling needs a factor from 1 to 1024"))),
        None => Err(refuse("rope.scaling.factor", "is missing, and RoPE scaling needs it".into())),
    };
    match g.string_opt(&key("rope.scaling.type"))? {
        None | Some("none") => {}
        Some("linear") => cfg.rope_scale = factor()?,
        Some("yarn") => {
            // The magnitude correction's log multiplier: Ministral 3's; llama.cpp reads it for
            // DeepSeek's too, which tokenscope does not run.
            let log_multiplier = g.f32_opt(&key("rope.scaling.yarn_log_multiplier"))?.unwrap_or(0.0);
            if log_multiplier != 0.0 && !cfg.architecture.reads_yarn_log_multiplier() {
                return Err(refuse(
                    "rope.scaling.yarn_log_multiplier",
                    format!("is {log_multiplier}: tokenscope computes this family's YaRN without a log multiplier, so it does not run this model"),
                ));
            }
            if !(log_multiplier.is_finite() && log_multiplier >= 0.0) {
                return Err(refuse(
                    "rope.scaling.yarn_log_multiplier",
                    format!("is {log_multiplier}; it must be a finite number, 0 or above"),
                ));
            }
            let original_context = g.usize_opt(&key("rope.scaling.original_context_length"))?.unwrap_or(cfg.context_len);
            if original_context == 0 {
                return Err(refuse("rope.scaling.original_context_length", "is 0; YaRN needs the context the model was trained at".into()));
            }
            // The ramp's keys: llama.cpp reads none of them for these architectures, so a
            // file asking for other values than its own is refused rather than run unlike it.
            for (name, llama_cpp) in [("yarn_beta_fast", YARN_BETA_FAST), ("yarn_beta_slow", YARN_BETA_SLOW), ("yarn_ext_factor", 1.0)] {
                let name = format!("rope.scaling.{name}");
                if let Some(v) = g.f32_opt(&key(&name))?.filter(|&v| v != llama_cpp) {
                    return Err(refuse(
                        &name,
                        format!("is {v}: tokenscope computes YaRN with llama.cpp's {llama_cpp} here, so it does not run this model"),
                    ));
                }
            }
            let attn_factor = g.f32_opt(&key("rope.scaling.attn_factor"))?.unwrap_or(1.0);
            if !(attn_factor.is_finite() && attn_factor > 0.0) {
                return Err(refuse("rope.scaling.attn_factor", format!("is {attn_factor}; it must be a finite number above 0")));
            }
            let yarn = Yarn { factor: factor()?, original_context, attn_factor, log_multiplier };
            cfg.rope_yarn = Some(yarn);
        }
        Some(kind) => {
            return Err(refuse(
                "rope.scaling.type",
                format!("is {kind:?}: tokenscope computes plain, linear, YaRN and Llama 3 RoPE scaling, so it does not run this model"),
            ))
        }
    }
    cfg.sliding_rope_base = match cfg.architecture {
        Architecture::Gemma3 => Some(GEMMA3_LOCAL_ROPE_BASE),
        Architecture::Olmo2 if cfg.sliding_window.is_some() => {
            let base = g.f32_opt(&key("rope.freq_base_swa"))?.unwrap_or(cfg.rope_base);
            if !(base.is_finite() && base > 1.0) {
                return Err(refuse("rope.freq_base_swa", format!("is {base}; it must be a finite number above 1")));
            }
            Some(base)
        }
        _ => None,
    };
    Ok(cfg)
}

/// Refuses a sliding-window pattern (`attention.sliding_window_pattern`, a period or a flag a
/// layer) other than the architecture's own ([`Architecture::is_sliding_layer`]): OLMo 3's
/// files write its pattern out layer by layer, and a file sliding other layers would run
/// with the wrong ones.
fn check_sliding_pattern(g: &Gguf, cfg: &Config) -> Result<(), ModelError> {
    let name = cfg.key("attention.sliding_window_pattern");
    if cfg.sliding_window.is_none() {
        return Ok(());
    }
    let Some(period) = cfg.architecture.sliding_period() else { return Ok(()) };
    let slides = |period: usize| (0..cfg.n_layers).map(move |l| l % period < period - 1);
    let ours: Vec<bool> = slides(period).collect();
    let theirs = match g.value(&name) {
        None => return Ok(()),
        Some(Value::Array(flags)) => {
            flags.iter().map(|f| if let Value::Bool(b) = f { Some(*b) } else { None }).collect::<Option<Vec<bool>>>()
        }
        Some(v) => v.to_u32().ok().filter(|&p| p > 0).map(|p| slides(p as usize).collect()),
    };
    match theirs {
        Some(flags) if flags == ours => Ok(()),
        _ => Err(ModelError::Metadata {
            key: name,
            problem: format!(
                "slides other layers than a {} model's (the first {} of every {period}), so tokenscope does not run this model",
                cfg.architecture.name(),
                period - 1
            ),
        }),
    }
}

/// The softcap under key `name` (`attn_logit_softcapping` or `final_logit_softcapping`): for
/// an architecture that caps ([`Architecture::softcaps`], Gemma 2), the file's value or
/// `default`, a finite number above 0; for any other, none, and a file asking for one (some
/// Gemma 3 derivatives) is refused, since the engine would compute it uncapped.
fn softcap(
    g: &Gguf,
    architecture: Architecture,
    key: &dyn Fn(&str) -> String,
    name: &str,
    default: f32,
) -> Result<Option<f32>, ModelError> {
    let cap = g.f32_opt(&key(name))?;
    if !architecture.softcaps() {
        return match cap.filter(|&c| c != 0.0) {
            Some(cap) => Err(ModelError::Metadata {
                key: key(name),
                problem: format!("is {cap}: tokenscope softcaps gemma2 alone, so it does not run this model"),
            }),
            None => Ok(None),
        };
    }
    match cap.unwrap_or(default) {
        cap if cap.is_finite() && cap > 0.0 => Ok(Some(cap)),
        cap => Err(ModelError::Metadata { key: key(name), problem: format!("is {cap}; a softcap must be a finite number above 0") }),
    }
}

/// The scales of an architecture whose file gives them ([`Architecture::has_file_scales`]:
/// Granite's [`GRANITE_SCALES`], MiniCPM's three of them, each required; Cohere's logit
/// multiplier, [`Architecture::logit_multiplier`]), read into `cfg`; any other's as they are.
/// A Granite 4.0 H file that turns off RoPE (`rope.scaling.finetuned` false, which llama.cpp's
/// Granite graphs read as no RoPE in any layer) runs with none ([`Config::nope`]); a Granite
/// or MiniCPM file that does is refused rather than run with RoPE.
fn with_file_scales(mut cfg: Config, g: &Gguf, key: &dyn Fn(&str) -> String) -> Result<Config, ModelError> {
    // A scale, `None` where the file has none or 0 (llama.cpp's "not set").
    let read = |name: &str| match g.f32_opt(&key(name))? {
        None | Some(0.0) => Ok(None),
        Some(v) if v.is_finite() && v > 0.0 => Ok(Some(v)),
        Some(v) => Err(ModelError::Metadata { key: key(name), problem: format!("is {v}; it must be a finite number above 0") }),
    };
    let architecture = cfg.architecture;
    let missing =
        |name: &str| ModelError::Metadata { key: key(name), problem: format!("is missing, and a {} model needs it", architecture.name()) };
    let [embedding, residual, attention, logit] = GRANITE_SCALES;
    if let Some(required) = architecture.logit_multiplier() {
        // Cohere2's key is required as llama.cpp requires it (a 0 in it still reads as "not set").
        if required && g.f32_opt(&key(logit))?.is_none() {
            return Err(missing(logit));
        }
        cfg.logit_scale = read(logit)?.unwrap_or(1.0);
        return Ok(cfg);
    }
    if !architecture.has_file_scales() {
        return Ok(cfg);
    }
    if !architecture.reads_attention_scale() {
        // MiniCPM's: llama.cpp requires each key (a 0 in it still reads as "not set").
        for name in [embedding, residual] {
            if g.f32_opt(&key(name))?.is_none() {
                return Err(missing(name));
            }
        }
    }
    cfg.embedding_scale = read(embedding)?.unwrap_or(cfg.embedding_scale);
    cfg.residual_scale = read(residual)?.unwrap_or(cfg.residual_scale);
    if architecture.reads_attention_scale() {
        cfg.attention_scale = read(attention)?.unwrap_or(cfg.attention_scale);
    }
    // llama.cpp multiplies Granite's logits by the divisor's reciprocal.
    cfg.logit_scale = 1.0 / read(logit)?.ok_or_else(|| missing(logit))?;
    if g.bool_opt(&key("rope.scaling.finetuned")) == Some(false) {
        if architecture.has_ssm_layers() {
            // Granite 4.0 H's NoPE, held to llama.cpp by the architectures fixture.
            cfg.nope = true;
            return Ok(cfg);
        }
        return Err(ModelError::Metadata {
            key: key("rope.scaling.finetuned"),
            problem: format!(
                "is false, which turns RoPE off in every layer: tokenscope turns every {} layer by RoPE, so it does not run this model",
                architecture.name()
            ),
        });
    }
    Ok(cfg)
}

/// Hunyuan's NTK-aware RoPE scaling where its file names an alpha (`rope.scaling.alpha`, which
/// llama.cpp reads for Hunyuan's families alone): the base becomes `base * alpha^(hd / (hd -
/// 2))`, in f32 as llama.cpp computes it. Its dense files' converter writes the base so scaled
/// and no alpha; 0 or below is none; a NaN or infinite alpha is refused by key.
fn with_ntk_alpha(mut cfg: Config, g: &Gguf, key: &dyn Fn(&str) -> String) -> Result<Config, ModelError> {
    if cfg.architecture != Architecture::HunyuanDense {
        return Ok(cfg);
    }
    match g.f32_opt(&key("rope.scaling.alpha"))? {
        Some(alpha) if !alpha.is_finite() => Err(ModelError::Metadata {
            key: key("rope.scaling.alpha"),
            problem: format!("is {alpha}; an NTK alpha must be a finite number (0 for none)"),
        }),
        Some(alpha) if alpha > 0.0 && cfg.head_dim > 2 => {
            let hd = cfg.head_dim as f32;
            cfg.rope_base *= alpha.powf(hd / (hd - 2.0));
            Ok(cfg)
        }
        _ => Ok(cfg),
    }
}

/// The feed-forward's width from the file's `feed_forward_length` (one value, or one a layer
/// all equal): as it is, or half of it where the architecture's files count the gate's and up
/// projection's rows together (Qwen 1's, [`Architecture::halves_feed_forward_length`]), an
/// odd length refused.
fn read_ffn_dim(g: &Gguf, key: &dyn Fn(&str) -> String, n_layers: usize, architecture: Architecture) -> Result<usize, ModelError> {
    let length = g.layer_usize(&key("feed_forward_length"), n_layers)?;
    if !architecture.halves_feed_forward_length() {
        return Ok(length);
    }
    if !length.is_multiple_of(2) {
        return Err(ModelError::Metadata {
            key: key("feed_forward_length"),
            problem: format!(
                "is {length}; a {} file's feed-forward length counts the gate's and up projection's rows together, and llama.cpp reads each at half of it",
                architecture.name()
            ),
        });
    }
    Ok(length / 2)
}

/// ALiBi's largest bias from the file (`attention.max_alibi_bias`, MPT's 8): `Some(b)` above
/// 0, `None` for 0 or no key (llama.cpp's default: no ALiBi); below 0 or NaN is refused (no
/// slope can be made from it).
fn read_alibi_max_bias(g: &Gguf, key: &dyn Fn(&str) -> String) -> Result<Option<f32>, ModelError> {
    match g.f32_opt(&key("attention.max_alibi_bias"))? {
        Some(bias) if !(bias >= 0.0 && bias.is_finite()) => Err(ModelError::Metadata {
            key: key("attention.max_alibi_bias"),
            problem: format!("is {bias}; ALiBi's largest bias must be a finite number from 0 (for none) up"),
        }),
        Some(bias) if bias > 0.0 => Ok(Some(bias)),
        _ => Ok(None),
    }
}

/// The clamp of q, k and v (`attention.clamp_kqv`: OLMo 1.7's 8, also MPT's and DBRX's in
/// llama.cpp), which llama.cpp applies to each projection's every element after its bias:
/// `Some(c)` above 0, `None` for 0, below 0 or no key (llama.cpp's "none"); NaN is refused
/// (no clamp is meant by it, and none can be told from it).
fn read_clamp(g: &Gguf, key: &dyn Fn(&str) -> String) -> Result<Option<f32>, ModelError> {
    match g.f32_opt(&key("attention.clamp_kqv"))? {
        Some(clamp) if clamp.is_nan() => Err(ModelError::Metadata {
            key: key("attention.clamp_kqv"),
            problem: "is NaN; a clamp of q, k and v must be a number (0 for none)".into(),
        }),
        Some(clamp) if clamp > 0.0 => Ok(Some(clamp)),
        _ => Ok(None),
    }
}

/// LongRoPE's per-pair factors for contexts within and beyond the original one (Phi-3.5's,
/// Phi-3 128k's).
const LONGROPE_FACTORS: [&str; 2] = ["rope_factors_short.weight", "rope_factors_long.weight"];

/// Refuses LongRoPE ([`LONGROPE_FACTORS`], with `rope.scaling.attn_factor`) by name in an
/// architecture that does not read it, rather than run it as plain RoPE with wrong logits.
fn check_no_longrope(g: &Gguf, architecture: Architecture, key: &dyn Fn(&str) -> String) -> Result<(), ModelError> {
    if architecture.reads_longrope() {
        return Ok(());
    }
    match LONGROPE_FACTORS.iter().find(|name| g.tensor_info(name).is_some()) {
        Some(name) => Err(ModelError::Metadata {
            key: key("rope.scaling.attn_factor"),
            problem: format!("comes with LongRoPE's factors ({name}), which tokenscope reads for phi3 only, so it does not run this model"),
        }),
        None => Ok(()),
    }
}

/// Refuses multimodal RoPE by name (`rope.dimension_sections` with any section, by which
/// llama.cpp turns heads by several position streams) in a family that does not read it
/// ([`Architecture::multimodal_rope`]), rather than run it as plain RoPE.
fn check_no_sections(g: &Gguf, key: &dyn Fn(&str) -> String) -> Result<(), ModelError> {
    match g.ints_opt(&key("rope.dimension_sections"))? {
        Some(sections) if sections.iter().any(|&s| s != 0) => Err(ModelError::Metadata {
            key: key("rope.dimension_sections"),
            problem: format!(
                "is {sections:?}: multimodal RoPE, which tokenscope reads for qwen2vl, qwen3vl and glm4 only, so it does not run this model"
            ),
        }),
        _ => Ok(()),
    }
}

/// Reads multimodal RoPE's sections (`rope.dimension_sections`: four counts of pairs, as
/// llama.cpp reads them, fewer padded with 0) where the family may turn by them: required in
/// Qwen2-VL's and Qwen3-VL's files ([`Architecture::requires_sections`]); in a glm4 file
/// `None` (plain RoPE, as llama.cpp runs it) unless time's and height's sections both have
/// pairs. Refused where negative, with no pair for any of the first three streams (llama.cpp
/// asserts one), or adding up to more than the head's width (llama.cpp's `ggml_rope_multi`
/// asserts that too).
fn read_sections(
    g: &Gguf,
    key: &dyn Fn(&str) -> String,
    architecture: Architecture,
    layout: SectionLayout,
    head_dim: usize,
) -> Result<Option<RopeSections>, ModelError> {
    let name = key("rope.dimension_sections");
    let bad = |problem: String| ModelError::Metadata { key: name.clone(), problem };
    let values = match g.ints_opt(&name)? {
        Some(values) => values,
        None if architecture.requires_sections() => {
            return Err(bad("is missing: this family's heads are turned by multimodal RoPE, whose sections it names".into()))
        }
        None => return Ok(None),
    };
    // llama.cpp's `use_mrope`: a glm4 file turns by its sections where time and height have pairs.
    let turns_by_sections = values.first() > Some(&0) && values.get(1) > Some(&0);
    if !architecture.requires_sections() && !turns_by_sections {
        return Ok(None);
    }
    if values.len() > 4 || values.iter().any(|&s| s < 0) {
        return Err(bad(format!("is {values:?}: it must be at most four counts of pairs, none below 0")));
    }
    let mut sections = [0usize; 4];
    for (section, &v) in sections.iter_mut().zip(&values) {
        *section = usize::try_from(v).map_err(|_| bad(format!("is {values:?}: {v} pairs is too many")))?;
    }
    if sections[..3].iter().all(|&s| s == 0) || sections.iter().sum::<usize>() > head_dim {
        return Err(bad(format!(
            "is {values:?}: the sections must give pairs to time, height or width and add up to at most the head width {head_dim}"
        )));
    }
    Ok(Some(RopeSections { sections, layout }))
}

/// Refuses what the engine does not compute: values of a width other than the keys'
/// (`attention.value_length`).
fn check_value_width(g: &Gguf, key: &dyn Fn(&str) -> String, head_dim: usize) -> Result<(), ModelError> {
    match g.usize_opt(&key("attention.value_length"))? {
        Some(n) if n != head_dim => Err(ModelError::Metadata {
            key: key("attention.value_length"),
            problem: format!(
                "is {n}, not the key width {head_dim}: tokenscope needs values as wide as keys, so it does not run this model"
            ),
        }),
        _ => Ok(()),
    }
}

//! The model's hyper-parameters, read from GGUF `llama.*` metadata.

use serde::Serialize;

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

/// Shape and numerics of a llama-family model.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct Config {
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
    /// Width of one head.
    pub head_dim: usize,
    /// Vocabulary size (rows of the embedding and of the LM head).
    pub vocab_size: usize,
    /// Context window in tokens.
    pub context_len: usize,
    /// RoPE base frequency.
    pub rope_base: f32,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
}

impl Config {
    /// Reads and checks the configuration of a llama-architecture GGUF.
    pub fn from_gguf(g: &Gguf) -> Result<Self, ModelError> {
        let arch = g.string("general.architecture")?;
        if arch != "llama" {
            return Err(ModelError::UnsupportedArchitecture(arch.to_string()));
        }
        let dim = g.usize("llama.embedding_length")?;
        let n_heads = g.usize("llama.attention.head_count")?;
        let n_kv_heads = g.usize_opt("llama.attention.head_count_kv")?.unwrap_or(n_heads);
        let vocab_size = match g.usize_opt("llama.vocab_size")? {
            Some(v) => v,
            None => g.strings("tokenizer.ggml.tokens")?.len(),
        };
        let cfg = Config {
            n_layers: g.usize("llama.block_count")?,
            dim,
            ffn_dim: g.usize("llama.feed_forward_length")?,
            n_heads,
            n_kv_heads,
            head_dim: dim.checked_div(n_heads).unwrap_or(0),
            vocab_size,
            context_len: g.usize("llama.context_length")?,
            rope_base: g.f32_opt("llama.rope.freq_base")?.unwrap_or(10_000.0),
            rms_eps: g.f32_opt("llama.attention.layer_norm_rms_epsilon")?.unwrap_or(1e-5),
        };
        cfg.validate(g.tensor_count())?;
        check_plain_rope(g, cfg.head_dim)?;
        Ok(cfg)
    }

    fn validate(&self, tensors_in_file: usize) -> Result<(), ModelError> {
        let bad = |key: &str, problem: String| ModelError::Metadata { key: key.to_string(), problem };
        let in_range = |key: &str, value: usize, max: usize| {
            if value == 0 || value > max {
                return Err(bad(key, format!("is {value}; it must be from 1 to {max}")));
            }
            Ok(())
        };
        in_range("llama.block_count", self.n_layers, MAX_LAYERS)?;
        // Every block stores nine tensors: a block count the file cannot hold is refused before
        // anything is sized by it.
        if self.n_layers.saturating_mul(TENSORS_PER_BLOCK) > tensors_in_file {
            return Err(bad(
                "llama.block_count",
                format!("is {} but the file holds {tensors_in_file} tensors, too few for that many blocks", self.n_layers),
            ));
        }
        in_range("llama.embedding_length", self.dim, MAX_WIDTH)?;
        in_range("llama.feed_forward_length", self.ffn_dim, MAX_WIDTH * 8)?;
        in_range("llama.vocab_size", self.vocab_size, MAX_VOCAB)?;
        in_range("llama.context_length", self.context_len, MAX_CONTEXT)?;
        if self.n_heads == 0 || !self.dim.is_multiple_of(self.n_heads) {
            return Err(bad("llama.attention.head_count", format!("{} does not divide embedding_length {}", self.n_heads, self.dim)));
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(bad("llama.attention.head_count", format!("head width {} is odd; RoPE rotates pairs", self.head_dim)));
        }
        if self.n_kv_heads == 0 || !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return Err(bad("llama.attention.head_count_kv", format!("{} does not divide head_count {}", self.n_kv_heads, self.n_heads)));
        }
        if !(self.rope_base.is_finite() && self.rope_base > 1.0) {
            return Err(bad("llama.rope.freq_base", format!("is {}; it must be a finite number above 1", self.rope_base)));
        }
        if !(self.rms_eps.is_finite() && self.rms_eps > 0.0 && self.rms_eps < 1.0) {
            return Err(bad("llama.attention.layer_norm_rms_epsilon", format!("is {}; it must be between 0 and 1", self.rms_eps)));
        }
        Ok(())
    }

    /// Width of the K (or V) projection: `n_kv_heads * head_dim`.
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// KV-cache bytes per token in f32 (K and V, every layer).
    pub fn kv_bytes_per_token(&self) -> usize {
        self.n_layers * 2 * self.kv_dim() * 4
    }
}

/// Refuses the RoPE variants the engine does not compute, rather than run them as plain RoPE and
/// give wrong logits without a word: frequency scaling (`llama.rope.scaling.type`, or Llama 3's
/// per-pair factors in a `rope_freqs.weight` tensor) and rotation of part of each head.
fn check_plain_rope(g: &Gguf, head_dim: usize) -> Result<(), ModelError> {
    let refuse = |key: &str, problem: String| Err(ModelError::Metadata { key: key.to_string(), problem });
    if let Some(kind) = g.string_opt("llama.rope.scaling.type")? {
        if kind != "none" {
            return refuse(
                "llama.rope.scaling.type",
                format!("is {kind:?}: tokenscope computes unscaled RoPE only, so it does not run this model"),
            );
        }
    }
    if g.tensor_info("rope_freqs.weight").is_some() {
        return refuse(
            "rope_freqs.weight",
            "holds RoPE frequency factors (Llama 3's scaling), which tokenscope does not apply yet, so it does not run this model".into(),
        );
    }
    match g.usize_opt("llama.rope.dimension_count")? {
        Some(n) if n != head_dim => refuse(
            "llama.rope.dimension_count",
            format!("is {n}, not the head width {head_dim}: tokenscope rotates whole heads only, so it does not run this model"),
        ),
        _ => Ok(()),
    }
}

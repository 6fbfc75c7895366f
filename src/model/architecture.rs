//! The model families the engine runs (`general.architecture`) and what sets each apart from
//! plain llama: where RoPE's pairs sit, biases on Q, K and V, RMSNorm on each head's q and k.

use serde::Serialize;

use crate::error::ModelError;

/// A transformer family: every one is llama's block (RMSNorm, grouped-query attention with
/// RoPE, SwiGLU) with the differences its methods name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
#[serde(rename_all = "lowercase")]
pub enum Architecture {
    /// Llama 1-3, SmolLM2 (Llama 3's RoPE frequency factors included).
    Llama,
    /// Qwen2 and Qwen2.5: biases on the Q, K and V projections, RoPE on split halves.
    Qwen2,
    /// Qwen3: RMSNorm on each head's q and k before RoPE, RoPE on split halves, heads whose
    /// width need not divide the residual width.
    Qwen3,
}

/// Which elements of a head RoPE turns together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopePairs {
    /// `(x[2i], x[2i+1])`: llama.cpp's "NORM" mode.
    Adjacent,
    /// `(x[i], x[i + head_dim/2])`: llama.cpp's "NEOX" mode (GPT-NeoX, Qwen).
    Halves,
}

impl Architecture {
    /// Every architecture, in the order error messages list them.
    pub const ALL: [Architecture; 3] = [Architecture::Llama, Architecture::Qwen2, Architecture::Qwen3];

    /// Reads `general.architecture`, refusing any other family by name with the supported list.
    pub fn from_name(name: &str) -> Result<Self, ModelError> {
        Self::ALL
            .into_iter()
            .find(|a| a.name() == name)
            .ok_or_else(|| ModelError::UnsupportedArchitecture { name: name.to_string(), supported: Self::supported_list() })
    }

    /// The name GGUF files give it, also the prefix of its metadata keys (`qwen2.block_count`).
    pub fn name(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Qwen2 => "qwen2",
            Architecture::Qwen3 => "qwen3",
        }
    }

    /// The supported names, for error messages.
    pub fn supported_list() -> String {
        Self::ALL.map(|a| a.name()).join(", ")
    }

    /// Where its RoPE pairs sit within a head.
    pub fn rope_pairs(self) -> RopePairs {
        match self {
            Architecture::Llama => RopePairs::Adjacent,
            Architecture::Qwen2 | Architecture::Qwen3 => RopePairs::Halves,
        }
    }

    /// Whether its files must have `attn_q.bias`, `attn_k.bias` and `attn_v.bias` (a llama file
    /// may have them too; they are used wherever present).
    pub fn requires_qkv_bias(self) -> bool {
        self == Architecture::Qwen2
    }

    /// Whether each head's q and k are RMS-normed (`attn_q_norm`, `attn_k_norm`) before RoPE.
    pub fn has_head_norm(self) -> bool {
        self == Architecture::Qwen3
    }
}

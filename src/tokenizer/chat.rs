//! Prompt formats: raw completion, or a ChatML conversation for instruction-tuned models.

use serde::{Deserialize, Serialize};

/// The system prompt SmolLM2-Instruct was trained with.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

/// How the user's text becomes the model's prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum PromptFormat {
    /// The text is continued as it is.
    Completion,
    /// The text is the user's turn of a ChatML conversation; the model writes the assistant turn.
    Chat {
        /// System turn; `None` (or missing) uses [`DEFAULT_SYSTEM_PROMPT`], `Some("")` leaves it out.
        #[cfg_attr(target_arch = "wasm32", tsify(optional))]
        system: Option<String>,
    },
}

/// Renders the prompt text (special tokens are written out and parsed by the tokenizer).
pub fn render(format: &PromptFormat, text: &str) -> String {
    match format {
        PromptFormat::Completion => text.to_string(),
        PromptFormat::Chat { system } => {
            let system = system.as_deref().unwrap_or(DEFAULT_SYSTEM_PROMPT);
            let mut out = String::new();
            if !system.is_empty() {
                out.push_str(&format!("<|im_start|>system\n{system}<|im_end|>\n"));
            }
            out.push_str(&format!("<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"));
            out
        }
    }
}

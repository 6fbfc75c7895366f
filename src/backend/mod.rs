//! The compute backends behind one interface, so one generation loop drives them all.

pub mod any;
pub mod cpu;
pub mod gpu;

use serde::Serialize;

pub use any::AnyBackend;

use crate::error::{Error, Result};
use crate::model::Config;

/// What a backend reports about itself, for the CLI and the page.
#[derive(Debug, Clone, Serialize)]
pub struct BackendInfo {
    /// Short name: `cpu-exact`, `cpu-fast`, `gpu`.
    pub name: String,
    /// The device: CPU, or the GPU adapter's name.
    pub device: String,
    /// Whether the device is a software (fallback) implementation.
    pub software: bool,
    /// Bytes of one cached key or value element (4 for f32).
    pub kv_bytes_per_value: usize,
    /// GPU only: the kernel variants it runs, in words (e.g. "subgroup reductions, f16 KV
    /// cache").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_kernels: Option<String>,
}

/// A model bound to a device, with its KV cache.
///
/// Positions count tokens already in the cache. `prefill` and `decode` append and return the
/// logits (`[vocab]`) of the last appended position. Async so a browser GPU backend can await
/// its readback; CPU backends complete at once.
#[allow(async_fn_in_trait)]
pub trait Backend {
    /// Appends `tokens` (one pass over all of them) and returns the last position's logits.
    async fn prefill(&mut self, tokens: &[u32]) -> Result<Vec<f32>>;
    /// Appends one token and returns its logits.
    async fn decode(&mut self, token: u32) -> Result<Vec<f32>>;
    /// Appends `tokens` (2 to [`MAX_VERIFY_TOKENS`]) in one pass and returns the logits of
    /// every one of them, `[n, vocab]` row-major: speculative decoding checks a whole draft
    /// with this one pass.
    async fn verify(&mut self, tokens: &[u32]) -> Result<Vec<f32>>;
    /// Appends one token through the first `layers` blocks only (1 to the model's layers),
    /// then the final norm and the LM head, and returns those logits: the model's own early
    /// layers as a draft model (self-draft). The keys and values it appends are those of
    /// the layers it ran; truncate the position before the full model runs there.
    async fn draft(&mut self, token: u32, layers: usize) -> Result<Vec<f32>>;
    /// Forgets every position from `len` on (regenerate, branch); `len` beyond the current
    /// position is clamped.
    fn truncate(&mut self, len: usize);
    /// Tokens in the KV cache.
    fn position(&self) -> usize;
    /// Capacity of the KV cache in tokens.
    fn context_len(&self) -> usize;
    /// Transformer blocks of the model (what [`Backend::draft`] may run).
    fn layers(&self) -> usize;
    /// Bytes the KV cache holds now.
    fn kv_cache_bytes(&self) -> usize;
    /// Name and device.
    fn info(&self) -> BackendInfo;
}

/// Most tokens one [`Backend::verify`] pass takes: a full draft and the token before it.
pub const MAX_VERIFY_TOKENS: usize = crate::speculative::MAX_DRAFT_TOKENS + 1;

/// Refuses a verify pass of fewer than 2 or more than [`MAX_VERIFY_TOKENS`] tokens.
pub(crate) fn check_verify(tokens: &[u32]) -> Result<()> {
    if !(2..=MAX_VERIFY_TOKENS).contains(&tokens.len()) {
        return Err(Error::Backend(format!("a verify pass takes 2 to {MAX_VERIFY_TOKENS} tokens, got {}", tokens.len())));
    }
    Ok(())
}

/// Refuses a draft through 0 layers or more than the model has.
pub(crate) fn check_draft_layers(layers: usize, n_layers: usize) -> Result<()> {
    if !(1..=n_layers).contains(&layers) {
        return Err(Error::InvalidParams(format!("a self-draft runs 1 to {n_layers} layers, got {layers}")));
    }
    Ok(())
}

/// Largest KV cache a backend allocates, in bytes (4 GiB natively, 1 GiB in wasm32's 4 GiB
/// address space): a larger request is refused in words rather than left to abort the process.
pub const MAX_KV_CACHE_BYTES: u64 = if cfg!(target_arch = "wasm32") { 1 << 30 } else { 4 << 30 };

/// The KV cache's capacity in tokens for a requested context: `requested` (the user's choice) or
/// `default`, within the model's window. A request of 0 tokens, one beyond the window, or one
/// whose cache would pass [`MAX_KV_CACHE_BYTES`] is refused with what to choose instead.
pub fn kv_capacity(cfg: &Config, requested: Option<usize>, default: usize) -> Result<usize> {
    let window = cfg.context_len;
    let capacity = match requested {
        Some(0) => {
            return Err(Error::InvalidParams(
                "a context of 0 tokens holds nothing: choose at least 2 (the prompt and one new token)".into(),
            ))
        }
        Some(n) if n > window => {
            return Err(Error::InvalidParams(format!(
                "a context of {n} tokens exceeds the model's window of {window}: choose at most {window}"
            )))
        }
        Some(n) => n,
        None => default.min(window),
    };
    let per_token = cfg.kv_bytes_per_token() as u64;
    let bytes = (capacity as u64).saturating_mul(per_token);
    if bytes > MAX_KV_CACHE_BYTES {
        let most = MAX_KV_CACHE_BYTES / per_token.max(1);
        return Err(Error::InvalidParams(format!(
            "a KV cache for {capacity} tokens needs {} MiB, more than the {} MiB allowed: choose a context of at most {most} tokens",
            bytes >> 20,
            MAX_KV_CACHE_BYTES >> 20
        )));
    }
    Ok(capacity)
}

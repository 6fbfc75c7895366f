//! The compute backends behind one interface, so one generation loop drives them all.

pub mod any;
pub mod cpu;
pub mod gpu;

use serde::Serialize;

pub use any::AnyBackend;

use crate::error::Result;

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
    /// Forgets every position from `len` on (regenerate, branch); `len` beyond the current
    /// position is clamped.
    fn truncate(&mut self, len: usize);
    /// Tokens in the KV cache.
    fn position(&self) -> usize;
    /// Capacity of the KV cache in tokens.
    fn context_len(&self) -> usize;
    /// Bytes the KV cache holds now.
    fn kv_cache_bytes(&self) -> usize;
    /// Name and device.
    fn info(&self) -> BackendInfo;
}

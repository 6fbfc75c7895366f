//! The compute backends behind one interface, so one generation loop drives them all.

pub mod any;
pub mod cpu;
pub mod gpu;
pub mod inspect;

use serde::Serialize;

pub use any::AnyBackend;
pub use inspect::{ExpertPick, Inspection};

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

/// Whose logits a forward pass returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    /// The last token's, `[vocab]` (prefill, decode, draft).
    Last,
    /// Every token's, `[n, vocab]` row-major (verify).
    All,
}

/// What one forward pass runs: the model's first `layers` blocks (all of them, or fewer for a
/// self-draft), then the final norm and the LM head, for the logits `logits` names; with
/// `inspect`, it also keeps the last token's attention weights and residual stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pass {
    /// Transformer blocks to run, 1 to [`Backend::layers`].
    pub layers: usize,
    /// Whose logits come back.
    pub logits: Logits,
    /// Keep an [`Inspection`] of the last token (a pass not asked keeps and costs nothing).
    pub inspect: bool,
    /// Which kernels compute the tokens, where a backend has several ([`Batching`]).
    pub batching: Batching,
    /// The caller decodes greedily, or asks for the argmax guessed while sampling
    /// ([`crate::generation::generate::Generation::run_ahead_sampled`]): the next this many one-token
    /// passes (0: none) will each most likely take the argmax of the logits before. A
    /// backend that can (the GPU) then starts the next ones itself (as many as it keeps ahead),
    /// each on the argmax it computes, before handing these logits back; a later pass of the
    /// first one's very token at the next position finds it already running
    /// ([`Forward::ran_ahead`]), any other pass drops them. The others ignore it.
    pub run_ahead: usize,
}

impl Pass {
    /// Every layer, the last token's logits, nothing kept, natural batching, no run-ahead:
    /// a plain prefill or decode pass of a model of `layers` blocks.
    pub fn last(layers: usize) -> Pass {
        Pass { layers, logits: Logits::Last, inspect: false, batching: Batching::Natural, run_ahead: 0 }
    }
}

/// How a pass computes its tokens, for a backend with other kernels for one token than for
/// several (the GPU's matrix-vector and matrix-matrix products, which round differently):
/// recomputing a token the way its pass first computed it gives its bits again. Backends that
/// compute every token alike ignore it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Batching {
    /// As the token count decides: one token a decode step, several a prefill pass.
    #[default]
    Natural,
    /// As a prefill pass of several tokens computes each (the LM head on the last).
    Prefill,
    /// As a verify pass computes each (the LM head on every token).
    Verify,
}

/// What a forward pass hands back.
#[derive(Debug, Clone)]
pub struct Forward {
    /// The logits the pass named: `[vocab]`, or `[n, vocab]` row-major.
    pub logits: Vec<f32>,
    /// The last token's inside, where the pass was asked to keep it.
    pub inspection: Option<Inspection>,
    /// The pass was already running when asked: the backend started it on its own after the
    /// pass before ([`Pass::run_ahead`]), so its logits came sooner than a pass takes.
    pub ran_ahead: bool,
}

/// A forward pass's tokens and shape after the checks every backend shares: only
/// [`Backend::forward`] makes one, so no backend's [`Backend::forward_checked`] is reached
/// unchecked.
#[derive(Debug, Clone, Copy)]
pub struct Checked<'a> {
    tokens: &'a [u32],
    pass: Pass,
}

impl<'a> Checked<'a> {
    /// Refuses no tokens, more tokens than the context has room for after `position`, a layer
    /// count outside 1..=`n_layers`, and every token's logits for fewer than 2 or more than
    /// [`MAX_VERIFY_TOKENS`] tokens.
    fn new(tokens: &'a [u32], pass: Pass, position: usize, context: usize, n_layers: usize) -> Result<Self> {
        let n = tokens.len();
        if n == 0 {
            return Err(Error::Backend("nothing to run: no tokens".into()));
        }
        if position + n > context {
            return Err(Error::Backend(format!("the context is full: {position} + {n} tokens exceed its {context} positions")));
        }
        if !(1..=n_layers).contains(&pass.layers) {
            return Err(Error::InvalidParams(format!("a self-draft runs 1 to {n_layers} layers, got {}", pass.layers)));
        }
        if pass.logits == Logits::All && !(2..=MAX_VERIFY_TOKENS).contains(&n) {
            return Err(Error::Backend(format!("a verify pass takes 2 to {MAX_VERIFY_TOKENS} tokens, got {n}")));
        }
        Ok(Checked { tokens, pass })
    }

    /// The tokens to append, at positions [`Backend::position`]`..`.
    pub fn tokens(&self) -> &'a [u32] {
        self.tokens
    }

    /// The layers to run and the logits to return.
    pub fn pass(&self) -> Pass {
        self.pass
    }
}

/// A model bound to a device, with its KV cache.
///
/// Positions count tokens already in the cache. Every pass goes through the one entry,
/// [`Backend::forward`], which checks it for every backend alike and hands it to the backend's
/// [`Backend::forward_checked`]; prefill, decode, verify and draft are that entry with a
/// [`Pass`] filled in. Async so a browser GPU backend can await its readback; CPU backends
/// complete at once.
#[allow(async_fn_in_trait)]
pub trait Backend {
    /// Runs the checked tokens at positions `position()..` through the pass's layers, appends
    /// their keys and values to the cache, and returns the logits the pass names (and its
    /// inspection, where asked). On error the position is left as it was.
    async fn forward_checked(&mut self, input: Checked<'_>) -> Result<Forward>;

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

    /// The one forward entry: checks `tokens` and `pass` (see [`Checked`]) and runs them.
    async fn forward(&mut self, tokens: &[u32], pass: Pass) -> Result<Forward> {
        let input = Checked::new(tokens, pass, self.position(), self.context_len(), self.layers())?;
        self.forward_checked(input).await
    }
    /// Appends `tokens` (one pass over all of them) and returns the last position's logits.
    async fn prefill(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        let layers = self.layers();
        Ok(self.forward(tokens, Pass::last(layers)).await?.logits)
    }
    /// The logit lens: each of `residuals`' rows (`[rows, dim]`, residual streams as an
    /// [`Inspection`] keeps them) through the final norm and the LM head, `[rows, vocab]`,
    /// each row computed as a pass computes its last token's logits. A backend that keeps no
    /// inspections (a test's scripted one) refuses.
    async fn lens(&mut self, residuals: &[f32]) -> Result<Vec<f32>> {
        let _ = residuals;
        Err(Error::Backend(format!("the {} backend has no logit lens", self.info().name)))
    }
    /// Appends one token through every layer and returns its logits and its inspection: the
    /// attention weights over every position and the residual stream after each layer; with
    /// computed as `batching` says ([`Batching`]).
    async fn inspect(&mut self, token: u32, batching: Batching) -> Result<(Vec<f32>, Inspection)> {
        let layers = self.layers();
        let name = self.info().name;
        let pass = self.forward(&[token], Pass { inspect: true, batching, ..Pass::last(layers) }).await?;
        Ok((pass.logits, Inspection::expect_from(pass.inspection, &name)?))
    }
    /// Appends one token and returns its logits.
    async fn decode(&mut self, token: u32) -> Result<Vec<f32>> {
        self.prefill(&[token]).await
    }
    /// Appends `tokens` (one pass) for a caller that decodes greedily with no end in sight:
    /// as [`Backend::prefill`] or [`Backend::decode`], with [`Pass::run_ahead`] as far as the
    /// backend runs ahead.
    async fn forward_greedy(&mut self, tokens: &[u32]) -> Result<Forward> {
        let layers = self.layers();
        self.forward(tokens, Pass { run_ahead: usize::MAX, ..Pass::last(layers) }).await
    }
    /// Appends `tokens` (2 to [`MAX_VERIFY_TOKENS`]) in one pass and returns the logits of
    /// every one of them, `[n, vocab]` row-major: speculative decoding checks a whole draft
    /// with this one pass.
    async fn verify(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        let layers = self.layers();
        Ok(self.forward(tokens, Pass { logits: Logits::All, ..Pass::last(layers) }).await?.logits)
    }
    /// Appends one token through the first `layers` blocks only (1 to the model's layers),
    /// then the final norm and the LM head, and returns those logits: the model's own early
    /// layers as a draft model (self-draft). The keys and values it appends are those of
    /// the layers it ran; truncate the position before the full model runs there.
    async fn draft(&mut self, token: u32, layers: usize) -> Result<Vec<f32>> {
        Ok(self.forward(&[token], Pass::last(layers)).await?.logits)
    }
}

/// Most tokens one [`Backend::verify`] pass takes: a full draft of speculative decoding (8
/// tokens at most) and the token before it. Decided here, where the GPU sizes its buffers for
/// it; speculative decoding takes its draft length from it.
pub const MAX_VERIFY_TOKENS: usize = 9;

/// Largest KV cache a backend allocates, in bytes (4 GiB natively, 1 GiB in wasm32's 4 GiB
/// address space): a larger request is refused in words rather than left to abort the process.
pub const MAX_KV_CACHE_BYTES: u64 = if cfg!(target_arch = "wasm32") { 1 << 30 } else { 4 << 30 };

/// The KV cache's capacity in tokens for a requested context: `requested` (the user's choice) or
/// `default`, within the model's window. A request of 0 tokens, one beyond the window, or one
/// whose cache would pass [`MAX_KV_CACHE_BYTES`] (its keys and values in half floats where
/// `kv_f16`, so twice the positions fit) is refused with what to choose instead.
pub fn kv_capacity(cfg: &Config, requested: Option<usize>, default: usize, kv_f16: bool) -> Result<usize> {
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
    let per_token = cfg.cache_bytes_per_token(kv_f16) as u64;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::synthetic::{SyntheticModel, SyntheticSpec};

    /// The cap counts the cache as it will be stored: a context whose f32 keys and values
    /// would pass [`MAX_KV_CACHE_BYTES`] but whose half floats fit is taken with `kv_f16`,
    /// refused without it in words that name the most that fits, and refused either way past
    /// twice that.
    #[test]
    fn the_cache_cap_counts_half_floats_as_two_bytes() {
        let bytes = SyntheticModel::new(&SyntheticSpec::default()).and_then(|m| m.to_bytes()).expect("model");
        let mut cfg = crate::model::Model::read(&mut std::io::Cursor::new(bytes), &mut |_, _| {}).expect("loads").config;
        cfg.context_len = usize::MAX / 4;
        let f32_most = (MAX_KV_CACHE_BYTES / cfg.cache_bytes_per_token(false) as u64) as usize;
        let f16_most = (MAX_KV_CACHE_BYTES / cfg.cache_bytes_per_token(true) as u64) as usize;
        assert_eq!(f16_most, 2 * f32_most, "every layer attends: half the bytes");
        let between = f32_most + f32_most / 2;
        assert_eq!(kv_capacity(&cfg, Some(between), 8, true).expect("fits in half floats"), between);
        let refused = kv_capacity(&cfg, Some(between), 8, false).expect_err("too big in f32").to_string();
        assert!(refused.contains(&format!("choose a context of at most {f32_most} tokens")), "{refused}");
        assert!(kv_capacity(&cfg, Some(f16_most + 1), 8, true).is_err());
        assert_eq!(kv_capacity(&cfg, Some(f16_most), 8, true).expect("the most that fits"), f16_most);
    }
}

//! tokenscope: see how a language model writes, one token at a time.
//!
//! Data flow: GGUF bytes ([`model`]) -> weights -> forward pass ([`backend`]: prefill,
//! decode, KV cache) -> logits -> [`sampler`] -> token -> text ([`tokenizer`], [`stop`]),
//! all driven by the one loop in [`generate`] (one token per step, or a
//! [`speculative`] round of several); [`run`] keeps a run's branches and steps.

pub mod backend;
pub mod beam;
pub mod error;
pub mod generate;
pub mod gguf;
pub mod model;
pub mod run;
pub mod sampler;
pub mod speculative;
pub mod stop;
pub mod tokenizer;
#[cfg(target_arch = "wasm32")]
pub mod web;

pub use error::{Error, ModelError, Result};

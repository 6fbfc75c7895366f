//! tokenscope: see how a language model writes, one token at a time.
//!
//! Data flow: GGUF bytes ([`gguf`]) -> weights ([`model`]) -> forward pass ([`backend`]:
//! prefill, decode, KV cache) -> logits -> [`sampler`] -> token -> text ([`tokenizer`],
//! [`generation::stop`]), all driven by the one loop in [`generation::generate`] (one token
//! per step, or a [`generation::speculative`] round of several); [`generation::run`] keeps a
//! run's branches and steps; `web` (wasm32 only) is the page's edge.

pub mod backend;
#[cfg(target_arch = "wasm32")]
pub mod blob_reader;
pub mod error;
pub mod generation;
pub mod gguf;
pub mod lanes;
pub mod memory;
pub mod model;
pub mod sampler;
pub mod tokenizer;
#[cfg(target_arch = "wasm32")]
pub mod web;

pub use error::{Error, ModelError, Result};

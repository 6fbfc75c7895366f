//! GGUF bytes -> configuration, weights and tokenizer data.

pub mod config;
pub mod gguf;
pub mod gguf_scan;
pub mod synthetic;
pub mod weights;

use std::io::{Read, Seek};

pub use config::Config;
pub use gguf::Gguf;
pub use weights::{LayerWeights, Weights};

use crate::error::Result;
use crate::tokenizer::Tokenizer;

/// A model file fully read: configuration, weights and tokenizer.
pub struct Model {
    /// Hyper-parameters.
    pub config: Config,
    /// Weights, still in their stored types.
    pub weights: Weights,
    /// The tokenizer built from the file's vocabulary.
    pub tokenizer: Tokenizer,
    /// Size of the file in bytes.
    pub file_bytes: u64,
}

impl Model {
    /// Reads a GGUF model from any seekable reader (a file natively, bytes in the browser).
    pub fn read<R: Read + Seek>(reader: &mut R, progress: &mut dyn FnMut(u64, u64)) -> Result<Self> {
        let gguf = Gguf::read(reader)?;
        let config = Config::from_gguf(&gguf)?;
        let tokenizer = Tokenizer::from_gguf(&gguf)?;
        if tokenizer.vocab_size() != config.vocab_size {
            return Err(crate::error::ModelError::Metadata {
                key: "tokenizer.ggml.tokens".into(),
                problem: format!("holds {} tokens but the embedding has {} rows", tokenizer.vocab_size(), config.vocab_size),
            }
            .into());
        }
        let weights = Weights::read(&gguf, reader, &config, progress)?;
        Ok(Model { config, weights, tokenizer, file_bytes: gguf.file_len() })
    }

    /// Reads a GGUF model from a file on disk.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open(path: &std::path::Path) -> Result<Self> {
        let file = std::fs::File::open(path)
            .map_err(|source| crate::error::Error::Io { context: format!("cannot open model {}", path.display()), source })?;
        let mut reader = std::io::BufReader::new(file);
        Self::read(&mut reader, &mut |_, _| {})
    }
}

//! GGUF bytes -> configuration (of every architecture in [`Architecture`]), weights and tokenizer data.

pub mod alibi;
pub mod architecture;
pub mod config;
pub mod fused;
mod prefix;
pub mod rope;
pub mod synthetic;
pub mod weights;

use std::io::{Read, Seek};

pub use crate::gguf::Gguf;
pub use architecture::{Architecture, HeadNormSpan, SectionLayout, ALIBI_MAX_BIAS};
pub use config::{Config, Experts, ShortConv, Ssm};
pub use rope::{LayerRope, LayerRopes, LongContext, RopeFrequencies, RopeSections, Yarn};
pub use weights::{
    AttentionWeights, DenseFeedForward, ExpertWeights, FeedForward, HeadNorm, LayerWeights, Layers, LinearBiases, Mixer, Norm, PostNorms,
    QkvBias, ShortConvWeights, SsmWeights, SubNorms, Weights, WeightsSummary,
};

use crate::error::Result;
use crate::memory;
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
    /// The weights in figures (parameters, bytes, storage types), from the header.
    pub summary: WeightsSummary,
}

/// What [`Model::check_header`] concluded from the start of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderCheck {
    /// Everything but the tensor data checks out: reading the file can only fail on the data.
    Sound,
    /// The header runs past the bytes given, so nothing can be said yet.
    Inconclusive,
}

impl Model {
    /// Reads a GGUF model from any seekable reader (a file natively, bytes in the browser),
    /// refusing weights larger than the memory free for them before reading any.
    pub fn read<R: Read + Seek>(reader: &mut R, progress: &mut dyn FnMut(u64, u64)) -> Result<Self> {
        let (gguf, config, tokenizer) = Self::read_header(reader)?;
        memory::check_fits("weights", Weights::bytes_needed(&gguf, &config), memory::available_bytes())?;
        let weights = Weights::read(&gguf, reader, &config, progress)?;
        let summary = Weights::summary(&gguf, &config);
        Ok(Model { config, weights, tokenizer, file_bytes: gguf.file_len(), summary })
    }

    /// As [`Model::read`], but the transformer blocks are read as a backend takes them from
    /// [`Weights::layers`] (the page: a backend converting or uploading block by block never
    /// holds the file's tensors all at once in the wasm memory, which never shrinks).
    pub fn read_streaming<R: Read + Seek + 'static>(mut reader: R, progress: Box<dyn FnMut(u64, u64)>) -> Result<Self> {
        let (gguf, config, tokenizer) = Self::read_header(&mut reader)?;
        memory::check_fits("weights", Weights::bytes_needed(&gguf, &config), memory::available_bytes())?;
        let (file_bytes, summary) = (gguf.file_len(), Weights::summary(&gguf, &config));
        let weights = Weights::read_streaming(gguf, reader, &config, progress)?;
        Ok(Model { config, weights, tokenizer, file_bytes, summary })
    }

    /// Header, configuration and tokenizer, with every tensor the model needs checked for
    /// presence, shape and type: all of a load's checks but the tensor data's.
    fn read_header<R: Read + Seek>(reader: &mut R) -> Result<(Gguf, Config, Tokenizer)> {
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
        Weights::check(&gguf, &config)?;
        Ok((gguf, config, tokenizer))
    }

    /// Checks a model file from its first bytes (`start`) and its full length, without its
    /// tensor data: the page calls it before it frees the model in use, so that a bad file
    /// is refused while the old model is still there, and a good one loads without two
    /// models in memory at once.
    pub fn check_header(start: &[u8], file_len: u64) -> Result<HeaderCheck> {
        let mut reader = prefix::PrefixReader::new(start, file_len);
        match Self::read_header(&mut reader) {
            Ok(_) => Ok(HeaderCheck::Sound),
            Err(_) if reader.ran_out() => Ok(HeaderCheck::Inconclusive),
            Err(e) => Err(e),
        }
    }

    /// Reads a GGUF model from a file on disk.
    #[cfg(not(target_arch = "wasm32"))]
    /// Refuses at once what is not a regular file (a FIFO would block the read, a device never
    /// end), naming a symlink loop or a missing file for what it is.
    pub fn open(path: &std::path::Path) -> Result<Self> {
        let meta = std::fs::metadata(path)
            .map_err(|source| crate::error::Error::Io { context: format!("cannot open model {}", path.display()), source })?;
        if !meta.is_file() {
            let kind = if meta.is_dir() { "a folder" } else { "not a regular file (a FIFO, socket or device)" };
            return Err(crate::error::Error::InvalidParams(format!("model {} is {kind}: pass a .gguf file", path.display())));
        }
        let file = std::fs::File::open(path)
            .map_err(|source| crate::error::Error::Io { context: format!("cannot open model {}", path.display()), source })?;
        let mut reader = std::io::BufReader::new(file);
        Self::read(&mut reader, &mut |_, _| {})
    }
}

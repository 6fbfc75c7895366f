//! Typed errors for every layer, each with a message a user can act on.

use thiserror::Error;

/// The stable name of each kind of error: what the page acts on (it gets them from here, as
/// a TypeScript union and as the list [`ErrorName::ALL`]) and what scripts can match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub enum ErrorName {
    /// The file: pick another model.
    BadModel,
    /// A setting or an input out of range.
    InvalidParams,
    /// The prompt leaves no room in the context.
    PromptTooLong,
    /// No GPU adapter or device: the CPU may still work.
    NoGpu,
    /// The GPU device was lost: the CPU may still work.
    GpuLost,
    /// A backend failed while computing.
    BackendFailed,
    /// Asked before what it needs exists (no model, no run).
    NotReady,
    /// A file could not be read.
    IoError,
}

impl ErrorName {
    /// Every name, in declaration order.
    pub const ALL: [ErrorName; 8] = [
        ErrorName::BadModel,
        ErrorName::InvalidParams,
        ErrorName::PromptTooLong,
        ErrorName::NoGpu,
        ErrorName::GpuLost,
        ErrorName::BackendFailed,
        ErrorName::NotReady,
        ErrorName::IoError,
    ];

    /// The name as text (the variant's own name).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorName::BadModel => "BadModel",
            ErrorName::InvalidParams => "InvalidParams",
            ErrorName::PromptTooLong => "PromptTooLong",
            ErrorName::NoGpu => "NoGpu",
            ErrorName::GpuLost => "GpuLost",
            ErrorName::BackendFailed => "BackendFailed",
            ErrorName::NotReady => "NotReady",
            ErrorName::IoError => "IoError",
        }
    }
}

/// Everything that can go wrong between GGUF bytes and generated text.
#[derive(Debug, Error)]
pub enum Error {
    /// The model file could not be read as a usable GGUF model.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The tokenizer could not be built or could not encode/decode.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A parameter outside its meaningful range (sampling, context, a forced token, ...).
    #[error("invalid parameter: {0}")]
    InvalidParams(String),
    /// The prompt does not leave room for even one generated token.
    #[error(
        "the prompt is {prompt_tokens} tokens but the context holds {context} (leave room for at least one new token): shorten the prompt"
    )]
    PromptTooLong {
        /// Tokens in the prompt.
        prompt_tokens: usize,
        /// Context window in tokens.
        context: usize,
    },
    /// Chat mode cannot render this conversation: the file has no chat template, its template
    /// does not compile, or the template refuses the conversation.
    #[error("chat mode: {0}. Choose completion mode, or a model whose file has a chat template")]
    ChatTemplate(String),
    /// The prompt is empty: there is nothing to continue.
    #[error("the prompt is empty: type something for the model to continue")]
    EmptyPrompt,
    /// The model computed a NaN logit: its weights are broken, or the backend computed them
    /// wrong (on 2026-11-27 WebGPU on llvmpipe's OpenGL ES through ANGLE did).
    #[error("the model produced NaN at logit {index}: its weights are broken, or the backend computed them wrong, so choose another model file, or the CPU backend")]
    NanLogits {
        /// The first NaN logit's token id.
        index: usize,
    },
    /// A compute backend failed (numerical library, GPU device, ...).
    #[error("backend: {0}")]
    Backend(String),
    /// No usable GPU adapter or device could be opened.
    #[error("no GPU: {0}. Choose the CPU backend, or install a GPU driver (on Linux without a GPU: mesa-vulkan-drivers for lavapipe)")]
    NoGpu(String),
    /// The GPU device was lost or reported an error; its results cannot be trusted.
    #[error("the GPU failed: {0}. Load the model again, or choose the CPU backend")]
    GpuLost(String),
    /// A call came before what it needs (no model loaded, no run yet).
    #[error("{0}")]
    NotReady(String),
    /// A file could not be read or written.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// Why a GGUF file cannot be used as a model.
#[derive(Debug, Error)]
pub enum ModelError {
    /// The bytes do not start with the GGUF magic.
    #[error("this is not a GGUF file (it starts with {found:?}, a GGUF model starts with \"GGUF\"): choose a .gguf model file")]
    NotGguf {
        /// The first bytes, shown for diagnosis.
        found: String,
    },
    /// The file ends before the data its header announces.
    #[error("the GGUF file is truncated ({detail}): download it again")]
    Truncated {
        /// Where the data ran out.
        detail: String,
    },
    /// The header or metadata could not be parsed.
    #[error("the GGUF file is malformed: {0}")]
    Malformed(String),
    /// Our header walk and candle's parse read the same header differently (a defect of ours
    /// if it ever shows: the fuzzer and tests/gguf_hostile.rs look for it).
    #[error("the GGUF header reads two ways ({0}): this file cannot be trusted; please report it")]
    ReadersDisagree(String),
    /// A multimodal projector (`general.architecture = "clip"`: the `mmproj` file that comes
    /// beside a vision model's language model, Qwen2-VL's, Qwen3-VL's, GLM-4V's), which holds
    /// no language model to run.
    #[error(
        "this file is a vision projector (general.architecture \"clip\", an mmproj file), not a language model: open the model's own .gguf, whose text tokenscope runs"
    )]
    Projector,
    /// One part of a model split over several files (llama.cpp's `llama-gguf-split` writes
    /// `split.count` parts, the first holding the metadata), which the engine reads merged.
    #[error(
        "this file is part {} of {count} of a model split over {count} files (split.no, split.count): merge them with llama.cpp's `llama-gguf-split --merge FIRST-PART.gguf MERGED.gguf` and open the merged file",
        part + 1
    )]
    SplitPart {
        /// The part's index (`split.no`, from 0).
        part: usize,
        /// How many parts the model has (`split.count`).
        count: usize,
    },
    /// A model architecture the engine does not run.
    #[error("unsupported architecture {name:?} (general.architecture): tokenscope runs {supported}")]
    UnsupportedArchitecture {
        /// The file's architecture.
        name: String,
        /// The architectures the engine runs, listed.
        supported: String,
    },
    /// A tensor stored in a type the engine cannot compute with.
    #[error("tensor {name} has type {dtype}, which is not supported (supported: {supported})")]
    UnsupportedTensorType {
        /// Tensor name.
        name: String,
        /// Its GGML type.
        dtype: String,
        /// The types the engine reads ([`crate::gguf::SUPPORTED_TYPES`]), by name.
        supported: String,
    },
    /// A tensor the llama architecture needs is absent.
    #[error("tensor {0} is missing from the GGUF file")]
    MissingTensor(String),
    /// A tensor that would change what the model computes, which the engine does not apply
    /// (a bias llama.cpp adds where a file has one, [`crate::model::weights::UNAPPLIED_BIASES`]).
    #[error("tensor {0} is in the file, and tokenscope does not add it, so it does not run this model")]
    UnappliedTensor(String),
    /// A tensor whose shape does not fit the configuration.
    #[error("tensor {name} has shape {found:?} but the configuration needs {expected:?}")]
    ShapeMismatch {
        /// Tensor name.
        name: String,
        /// Shape in the file (rows, columns).
        found: Vec<usize>,
        /// Shape the configuration implies.
        expected: Vec<usize>,
    },
    /// The weights (or the metadata, parsed) need more memory than there is.
    #[error("the model's {part} need {} MB of memory but {} MB is free: choose a smaller model (or a smaller quantization of it)", needed >> 20, available >> 20)]
    TooLarge {
        /// What needs it: `weights` or `metadata`.
        part: &'static str,
        /// Bytes it takes.
        needed: u64,
        /// Bytes free for them.
        available: u64,
    },
    /// A metadata key is missing or has the wrong type.
    #[error("metadata {key}: {problem}")]
    Metadata {
        /// The GGUF metadata key.
        key: String,
        /// What is wrong with it.
        problem: String,
    },
}

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The kind of error, for code that acts on it (the page, scripts).
    pub fn kind(&self) -> ErrorName {
        match self {
            Error::Model(_) | Error::Tokenizer(_) | Error::NanLogits { .. } => ErrorName::BadModel,
            Error::InvalidParams(_) | Error::EmptyPrompt | Error::ChatTemplate(_) => ErrorName::InvalidParams,
            Error::PromptTooLong { .. } => ErrorName::PromptTooLong,
            Error::NoGpu(_) => ErrorName::NoGpu,
            Error::GpuLost(_) => ErrorName::GpuLost,
            Error::Backend(_) => ErrorName::BackendFailed,
            Error::NotReady(_) => ErrorName::NotReady,
            Error::Io { .. } => ErrorName::IoError,
        }
    }

    /// [`Error::kind`]'s stable name.
    pub fn name(&self) -> &'static str {
        self.kind().as_str()
    }

    /// Wraps a candle error raised while computing.
    pub fn backend(e: impl std::fmt::Display) -> Self {
        Error::Backend(e.to_string())
    }
}

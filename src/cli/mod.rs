//! Argument parsing and the subcommands.

mod bench;
mod generate;
mod serve;
mod speculative_args;

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use tokenscope::backend::any::{BackendChoice, GpuChoice};
use tokenscope::backend::cpu::CpuPrecision;
use tokenscope::backend::gpu::kernels::{ATTENTION_CHUNK, MATRIX_WORKGROUPS, ROWS_PER_SUBGROUP_CHOICES, UNITS_IN_FLIGHT_CHOICES};
use tokenscope::backend::AnyBackend;
use tokenscope::model::Model;
use tokenscope::{Error, Result};

/// The model `make model` fetches.
pub const DEFAULT_MODEL: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

/// See how a language model writes, one token at a time.
#[derive(Parser, Debug)]
#[command(name = "tokenscope", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Generate text from a prompt, streaming it (or one JSON line per step with --jsonl).
    Generate(generate::GenerateArgs),
    /// Print the token ids of a text as one JSON array.
    Tokenize {
        #[command(flatten)]
        model: ModelArgs,
        /// The text to tokenize.
        text: String,
    },
    /// Measure prefill and decode speed (median of several runs).
    Bench(bench::BenchArgs),
    /// Serve the web page and the models on http://127.0.0.1:PORT/.
    Serve(serve::ServeArgs),
    /// Write a tensor-less GGUF holding the model's metadata (its tokenizer and configuration,
    /// no weights: for tests and tools; llama.cpp opens it with vocab_only).
    ExportTokenizer {
        #[command(flatten)]
        model: ModelArgs,
        /// Output file.
        #[arg(long)]
        out: PathBuf,
    },
}

/// Where the model is and how it runs.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// GGUF model file (default: the model `make model` fetched).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Compute backend.
    #[arg(long, value_enum, default_value_t = BackendKind::Cpu)]
    backend: BackendKind,
    /// Context window in tokens (default: the model's window on the CPU, 2048 on the GPU; at
    /// most the model's window).
    #[arg(long, allow_negative_numbers = true, value_parser = count::<usize>)]
    context: Option<usize>,
    /// Keep the KV cache's keys and values in half floats (half its memory and half the bytes
    /// each decode step reads from it; the logits move by up to about 1e-2 from exact math).
    /// Any backend.
    #[arg(long)]
    kv_cache_f16: bool,
    /// GPU: reduce in workgroup memory even where the adapter offers subgroup operations.
    #[arg(long)]
    no_subgroups: bool,
    /// GPU: threads that share one row in the decode (matrix-vector) kernels, a power of two
    /// from 1 to half the matrix workgroup (W / N rows per workgroup of W threads; with
    /// subgroups, N / lanes subgroups a row where a subgroup has fewer lanes; default by
    /// adapter: 1 on a software adapter, 32 on a GPU). For measuring the workgroup shape on a
    /// GPU (`bench/device/run.sh sweep`).
    #[arg(long, allow_negative_numbers = true, value_parser = count::<u32>)]
    threads_per_row: Option<u32>,
    /// GPU: threads that share one row in the prefill (matrix-matrix) kernels, a power of two
    /// from 1 to half the matrix workgroup (default by adapter: 1 on a software adapter, 8 on a
    /// GPU). For measuring on a GPU.
    #[arg(long, allow_negative_numbers = true, value_parser = count::<u32>)]
    prefill_threads_per_row: Option<u32>,
    /// GPU: threads per workgroup of the matrix kernels, 64, 128 or 256 (default by adapter: 64
    /// on a software adapter, 256 on a GPU). For measuring the workgroup shape on a GPU.
    #[arg(long, allow_negative_numbers = true, value_parser = count::<u32>)]
    matrix_workgroup: Option<u32>,
    /// GPU: units of a matrix row (a word of weights each) that each thread of the matrix
    /// kernels loads at once, 2, 4 or 8, for every row (default on a GPU: a decode row's units
    /// a thread, where they are 8 or fewer, else 2; 2 everywhere on a software adapter). For
    /// measuring on a GPU.
    #[arg(long, allow_negative_numbers = true, value_parser = count::<u32>)]
    units_in_flight: Option<u32>,
    /// GPU: matrix rows each subgroup takes at once in the decode kernels, 1, 2 or 4 (default
    /// 1 on a GPU, 4 on a software adapter): with more than 1, each unit's input columns are
    /// loaded once for all the rows' products and a workgroup covers that many times the rows
    /// (needs subgroups; each row's units in flight as for one row). For measuring on a GPU.
    #[arg(long, allow_negative_numbers = true, value_parser = count::<u32>)]
    rows_per_subgroup: Option<u32>,
    /// GPU: most context positions a decode step's attention runs inside the output
    /// projection (every workgroup computing it, or one head each with --per-head-attention;
    /// no dispatch of its own), 0 to 256; past them split-K attention takes a dispatch of its
    /// own (default 16; 0: split-K from the first step, a hardware GPU's default in a
    /// browser). For measuring on a GPU.
    #[arg(long, allow_negative_numbers = true, value_parser = count::<u32>)]
    fused_attention_positions: Option<u32>,
    /// GPU: over those positions, run the output projection per query head (a workgroup per
    /// head, chunk of split-K positions and block of rows, each computing one head's
    /// attention, not every head's), the feed-forward's two matrices merging the heads' parts
    /// (still 4 dispatches a layer). For measuring on a GPU; models whose output projection's
    /// blocks do not fit a head keep the other form.
    #[arg(long)]
    per_head_attention: bool,
    /// GPU: positions per chunk of split-K attention, 1 to 256 (default 64): a workgroup per
    /// query head and chunk, so a longer context spreads over more workgroups. For measuring
    /// on a GPU.
    #[arg(long, allow_negative_numbers = true, value_parser = count::<u32>)]
    split_k_chunk: Option<u32>,
}

/// The backends the CLI offers.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// The CPU with activations rounded to 8 bits like llama.cpp for quantized weights, f32 for
    /// float ones (fast): our SIMD kernels (AVX2, and AVX-512 VNNI in prefills where the CPU
    /// has it; candle's quantized matmul on CPUs without AVX2).
    Cpu,
    /// The CPU with exactly dequantized f32 weights (the reference; slower).
    CpuExact,
    /// The GPU through wgpu and our WGSL kernels (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, F16, BF16, F32 weights; IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S, IQ2_XXS, IQ1_S, TQ1_0, TQ2_0, Q2_0 and Q1_0 held as Q8_0, IQ2_XS and IQ2_S as F16, IQ1_M as Q6_K).
    Gpu,
}

impl ModelArgs {
    fn path(&self) -> PathBuf {
        if let Some(p) = &self.model {
            return p.clone();
        }
        let local = PathBuf::from(DEFAULT_MODEL);
        if local.exists() {
            local
        } else {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(DEFAULT_MODEL)
        }
    }

    fn open(&self) -> Result<Model> {
        let path = self.path();
        // Missing, and only missing (a symlink loop or a refused permission says so itself).
        if std::fs::symlink_metadata(&path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
            return Err(Error::Io {
                context: format!("model {} not found (run `make model`, or pass --model PATH)", path.display()),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            });
        }
        Model::open(&path)
    }

    /// Loads the model onto the chosen backend; returns the backend and the tokenizer.
    fn load(&self) -> Result<(AnyBackend, tokenscope::tokenizer::Tokenizer)> {
        let gpu_only = self.no_subgroups
            || self.threads_per_row.is_some()
            || self.prefill_threads_per_row.is_some()
            || self.matrix_workgroup.is_some()
            || self.units_in_flight.is_some()
            || self.rows_per_subgroup.is_some()
            || self.fused_attention_positions.is_some()
            || self.per_head_attention
            || self.split_k_chunk.is_some();
        if self.backend != BackendKind::Gpu && gpu_only {
            return Err(Error::InvalidParams(
                "--no-subgroups, --threads-per-row, --prefill-threads-per-row, --matrix-workgroup, --units-in-flight, --rows-per-subgroup, --fused-attention-positions, --per-head-attention and --split-k-chunk choose GPU kernels: use them with --backend gpu"
                    .into(),
            ));
        }
        // The fused SwiGLU and RoPE epilogues keep both rows of a pair in one workgroup (of at
        // most the largest matrix workgroup; the load checks the one chosen).
        let widest = MATRIX_WORKGROUPS[MATRIX_WORKGROUPS.len() - 1] / 2;
        for (flag, value) in [("threads-per-row", self.threads_per_row), ("prefill-threads-per-row", self.prefill_threads_per_row)] {
            if let Some(n) = value.filter(|n| !n.is_power_of_two() || *n > widest) {
                return Err(Error::InvalidParams(format!("--{flag} must be a power of two from 1 to {widest}, not {n}")));
            }
        }
        if let Some(n) = self.matrix_workgroup.filter(|n| !MATRIX_WORKGROUPS.contains(n)) {
            return Err(Error::InvalidParams(format!("--matrix-workgroup must be one of {MATRIX_WORKGROUPS:?}, not {n}")));
        }
        if let Some(n) = self.units_in_flight.filter(|n| !UNITS_IN_FLIGHT_CHOICES.contains(n)) {
            return Err(Error::InvalidParams(format!("--units-in-flight must be one of {UNITS_IN_FLIGHT_CHOICES:?}, not {n}")));
        }
        if let Some(n) = self.rows_per_subgroup.filter(|n| !ROWS_PER_SUBGROUP_CHOICES.contains(n)) {
            return Err(Error::InvalidParams(format!("--rows-per-subgroup must be one of {ROWS_PER_SUBGROUP_CHOICES:?}, not {n}")));
        }
        if self.rows_per_subgroup.is_some_and(|n| n > 1) && self.no_subgroups {
            return Err(Error::InvalidParams("--rows-per-subgroup above 1 needs subgroups (no --no-subgroups)".into()));
        }
        if let Some(n) = self.fused_attention_positions.filter(|n| *n > ATTENTION_CHUNK as u32) {
            return Err(Error::InvalidParams(format!("--fused-attention-positions must be 0 to {ATTENTION_CHUNK}, not {n}")));
        }
        if let Some(n) = self.split_k_chunk.filter(|n| !(1..=ATTENTION_CHUNK as u32).contains(n)) {
            return Err(Error::InvalidParams(format!("--split-k-chunk must be 1 to {ATTENTION_CHUNK}, not {n}")));
        }
        let choice = match self.backend {
            BackendKind::Cpu => BackendChoice::Cpu { precision: CpuPrecision::Fast, kv_f16: self.kv_cache_f16 },
            BackendKind::CpuExact => BackendChoice::Cpu { precision: CpuPrecision::Exact, kv_f16: self.kv_cache_f16 },
            BackendKind::Gpu => BackendChoice::Gpu(GpuChoice {
                adapter_seen: None,
                kv_f16: self.kv_cache_f16,
                no_subgroups: self.no_subgroups,
                threads_per_row: self.threads_per_row,
                prefill_threads_per_row: self.prefill_threads_per_row,
                matrix_workgroup: self.matrix_workgroup,
                units_in_flight: self.units_in_flight,
                rows_per_subgroup: self.rows_per_subgroup,
                fused_attention_positions: self.fused_attention_positions,
                per_head_attention: self.per_head_attention,
                split_k_chunk: self.split_k_chunk,
            }),
        };
        let model = self.open()?;
        let backend = pollster::block_on(AnyBackend::load(choice, &model.config, model.weights, self.context))?;
        Ok((backend, model.tokenizer))
    }
}

/// Parses a whole number of 0 or more, saying so when the value is negative or not a number
/// (clap alone would call `-5` an unexpected argument).
fn count<T: std::str::FromStr>(s: &str) -> std::result::Result<T, String> {
    s.trim().parse().map_err(|_| format!("{s:?} is not a whole number of 0 or more"))
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Generate(args) => generate::run(args),
        Command::Tokenize { model, text } => {
            let model = model.open()?;
            let ids = model.tokenizer.encode(&text)?;
            println!("{}", serde_json::to_string(&ids).unwrap_or_default());
            Ok(())
        }
        Command::Bench(args) => bench::run(args),
        Command::Serve(args) => serve::run(args),
        Command::ExportTokenizer { model, out } => export_tokenizer(&model.path(), &out),
    }
}

/// Copies the metadata of a model (`general.*`, `tokenizer.*` and its architecture's keys)
/// into a tensor-less GGUF.
fn export_tokenizer(model: &std::path::Path, out: &std::path::Path) -> Result<()> {
    use tokenscope::model::Gguf;
    let io = |context: String| move |source| Error::Io { context, source };
    let mut reader = std::io::BufReader::new(std::fs::File::open(model).map_err(io(format!("cannot open {}", model.display())))?);
    let gguf = Gguf::read(&mut reader)?;
    let arch = format!("{}.", gguf.string("general.architecture")?);
    let meta: Vec<_> =
        gguf.metadata().filter(|(k, _)| ["tokenizer.", "general.", arch.as_str()].iter().any(|p| k.starts_with(p))).collect();
    let mut file = std::fs::File::create(out).map_err(io(format!("cannot create {}", out.display())))?;
    candle_core::quantized::gguf_file::write(&mut file, &meta, &[]).map_err(Error::backend)?;
    println!("wrote {} ({} metadata entries)", out.display(), meta.len());
    Ok(())
}

/// Exit status for an error: 2 for bad input (the user can fix it: a bad file, a bad flag, a
/// model whose numbers break), 1 for a failure of the machine (a backend, the GPU).
pub fn exit_code(e: &Error) -> u8 {
    match e {
        Error::Backend(_) | Error::GpuLost(_) => 1,
        _ => 2,
    }
}

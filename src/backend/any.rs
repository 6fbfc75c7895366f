//! One type over the backends a front end can choose at run time, delegating to the chosen one,
//! and the one place a front end (the CLI, the page's engine) makes one from a model.

use super::cpu::{CpuBackend, CpuPrecision};
use super::gpu::device::AdapterSeen;
use super::gpu::kernels::{KernelOptions, UNITS_IN_FLIGHT};
use super::gpu::{GpuBackend, GpuContext};
use super::{Backend, BackendInfo, Checked, Forward};
use crate::error::{Error, Result};
use crate::model::{Config, Weights};

/// Which backend a model is loaded onto, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendChoice {
    /// The CPU at this precision, its KV cache in half floats where `kv_f16`.
    Cpu {
        /// Exact or fast kernels.
        precision: CpuPrecision,
        /// Keep the KV cache in half floats.
        kv_f16: bool,
    },
    /// The GPU, with the kernel variants that suit its device, adjusted.
    Gpu(GpuChoice),
}

/// How the GPU backend departs from what suits its device ([`KernelOptions::for_device`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GpuChoice {
    /// What the page found of its adapter where wgpu cannot see it (a browser names its
    /// adapter to JavaScript only): its name, and whether it is a software one.
    pub adapter_seen: Option<AdapterSeen>,
    /// Keep the KV cache in half floats.
    pub kv_f16: bool,
    /// Reduce in workgroup memory even where the device has subgroups.
    pub no_subgroups: bool,
    /// Threads per matrix row in place of the device's default.
    pub threads_per_row: Option<u32>,
    /// Threads per matrix row of the prefill kernels in place of the device's default.
    pub prefill_threads_per_row: Option<u32>,
    /// Threads per matrix workgroup in place of the device's default.
    pub matrix_workgroup: Option<u32>,
    /// Units of a matrix row each thread loads at once, for every row, in place of the
    /// default ([`KernelOptions::units_in_flight`], and no
    /// [`KernelOptions::fit_units_in_flight`]).
    pub units_in_flight: Option<u32>,
    /// Rows a subgroup takes at once in place of the default
    /// ([`KernelOptions::rows_per_subgroup`]).
    pub rows_per_subgroup: Option<u32>,
    /// Most positions of a decode step's attention in the output projection's prologue, in
    /// place of the default ([`KernelOptions::fused_positions`]).
    pub fused_attention_positions: Option<u32>,
    /// Run the short context's output projection per query head
    /// ([`KernelOptions::per_head_attention`]).
    pub per_head_attention: bool,
    /// Positions per chunk of split-K attention in place of the default
    /// ([`KernelOptions::split_chunk`]).
    pub split_k_chunk: Option<u32>,
}

impl AnyBackend {
    /// Loads `weights` onto the chosen backend with a KV cache of `context` tokens (default:
    /// the backend's own; see [`super::kv_capacity`]).
    pub async fn load(choice: BackendChoice, cfg: &Config, weights: Weights, context: Option<usize>) -> Result<Self> {
        Ok(match choice {
            BackendChoice::Cpu { precision, kv_f16 } => {
                AnyBackend::Cpu(Box::new(CpuBackend::with_cache(cfg, weights, precision, context, kv_f16)?))
            }
            BackendChoice::Gpu(gpu) => {
                let device = GpuContext::with_hint(gpu.adapter_seen.as_ref()).await?;
                let mut options = KernelOptions::for_device(&device);
                options.kv_f16 = gpu.kv_f16;
                options.subgroups &= !gpu.no_subgroups;
                options.threads_per_row = gpu.threads_per_row.unwrap_or(options.threads_per_row);
                options.prefill_threads_per_row = gpu.prefill_threads_per_row.unwrap_or(options.prefill_threads_per_row);
                options.workgroup = gpu.matrix_workgroup.unwrap_or(options.workgroup);
                if let Some(units) = gpu.units_in_flight {
                    // A count asked for holds for every row.
                    options.units_in_flight = units;
                    options.fit_units_in_flight = false;
                }
                options.rows_per_subgroup = match gpu.rows_per_subgroup {
                    Some(rows) => rows,
                    // A count of units asked for runs one row a subgroup unless rows are
                    // asked too: a software adapter's four rows at 8 units in flight would
                    // inline 32 unit products a loop, a long compile on lavapipe.
                    None if options.subgroups && options.units_in_flight == UNITS_IN_FLIGHT => options.rows_per_subgroup,
                    None => 1,
                };
                options.fused_positions = gpu.fused_attention_positions.unwrap_or(options.fused_positions);
                options.split_chunk = gpu.split_k_chunk.unwrap_or(options.split_chunk);
                options.per_head_attention |= gpu.per_head_attention;
                // A SwiGLU or RoPE row pair shares one workgroup.
                let widest = options.threads_per_row.max(options.prefill_threads_per_row);
                if widest > options.workgroup / 2 {
                    return Err(Error::InvalidParams(format!(
                        "{widest} threads per matrix row need matrix workgroups of at least {} threads (a row pair of the SwiGLU and RoPE epilogues shares one), not {}",
                        2 * widest,
                        options.workgroup
                    )));
                }
                AnyBackend::Gpu(Box::new(GpuBackend::with_options(device, cfg, weights, context, options).await?))
            }
        })
    }
}

/// The CPU or the GPU backend.
pub enum AnyBackend {
    /// Our kernels on the CPU (candle's quantized matmul where none fits the CPU).
    Cpu(Box<CpuBackend>),
    /// Our WGSL kernels through wgpu.
    Gpu(Box<GpuBackend>),
}

macro_rules! each {
    ($self:ident, $b:ident => $e:expr) => {
        match $self {
            AnyBackend::Cpu($b) => $e,
            AnyBackend::Gpu($b) => $e,
        }
    };
}

impl Backend for AnyBackend {
    async fn forward_checked(&mut self, input: Checked<'_>) -> Result<Forward> {
        each!(self, b => b.forward_checked(input).await)
    }
    async fn lens(&mut self, residuals: &[f32]) -> Result<Vec<f32>> {
        each!(self, b => b.lens(residuals).await)
    }
    fn truncate(&mut self, len: usize) {
        each!(self, b => b.truncate(len))
    }
    fn position(&self) -> usize {
        each!(self, b => b.position())
    }
    fn context_len(&self) -> usize {
        each!(self, b => b.context_len())
    }
    fn layers(&self) -> usize {
        each!(self, b => b.layers())
    }
    fn kv_cache_bytes(&self) -> usize {
        each!(self, b => b.kv_cache_bytes())
    }
    fn info(&self) -> BackendInfo {
        each!(self, b => b.info())
    }
}

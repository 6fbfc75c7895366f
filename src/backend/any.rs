//! One type over the backends a front end can choose at run time, delegating to the chosen one.

use super::cpu::CpuBackend;
use super::gpu::GpuBackend;
use super::{Backend, BackendInfo, Checked};
use crate::error::Result;

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
    async fn forward_checked(&mut self, input: Checked<'_>) -> Result<Vec<f32>> {
        each!(self, b => b.forward_checked(input).await)
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

//! One type over the backends a front end can choose at run time, delegating to the chosen one.

use super::cpu::CpuBackend;
use super::gpu::GpuBackend;
use super::{Backend, BackendInfo};
use crate::error::Result;

/// The CPU or the GPU backend.
pub enum AnyBackend {
    /// candle on the CPU.
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
    async fn prefill(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        each!(self, b => b.prefill(tokens).await)
    }
    async fn decode(&mut self, token: u32) -> Result<Vec<f32>> {
        each!(self, b => b.decode(token).await)
    }
    async fn verify(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        each!(self, b => b.verify(tokens).await)
    }
    async fn draft(&mut self, token: u32, layers: usize) -> Result<Vec<f32>> {
        each!(self, b => b.draft(token, layers).await)
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

//! The embedding op: the step's token rows of the (quantized) table, dequantized
//! (embedding.wgsl); its twin is the dequantized table row (tests/gpu_kernels.rs).

use super::super::device::GpuContext;
use super::super::kernels::{groups_for, prepare, whole, Bind, Dispatch, Kernels, ShaderSource};
use super::super::params::EmbeddingParams;
use super::matrix::{GpuMatrix, WeightFormat};
use crate::error::Result;

const EMBEDDING: &str = include_str!("../../../../shaders/embedding.wgsl");

/// The embedding kernel's source for a table in `format`.
pub fn source(format: WeightFormat) -> ShaderSource {
    ShaderSource::new(format!("embedding_{}.wgsl", format.define().to_lowercase()), EMBEDDING, format.defines().to_vec())
}

impl Kernels {
    /// `x[b] = table[tokens[b]]` for the step's tokens, dequantized: the embedding lookup
    /// from a matvec-layout table.
    pub fn embedding(&self, ctx: &GpuContext, table: &GpuMatrix, x: Bind, step: &wgpu::Buffer, tokens: &wgpu::Buffer) -> Result<Dispatch> {
        let params = ctx.uniform("embedding", &[EmbeddingParams { dim: table.cols, ..Default::default() }]);
        let mut binds = vec![("params", whole(&params))];
        binds.extend(table.binds());
        binds.extend([("x", x), ("step", whole(step)), ("tokens", whole(tokens))]);
        Ok(prepare(ctx, &self.embedding_kernel(ctx, table.format)?, &binds, groups_for(table.cols))?.per_token(1, 1))
    }
}

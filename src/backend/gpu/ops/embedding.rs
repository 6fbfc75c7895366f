//! The embedding op: the step's token rows of the (quantized) table, dequantized and scaled
//! (embedding.wgsl); its twin is the dequantized table row times the scale
//! (tests/gpu_kernels.rs).

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
    /// `x[b] = scale * table[tokens[b] - first_row]` for the step's tokens in the table's
    /// rows, dequantized: the embedding lookup from a matvec-layout table, or from one band of
    /// it (`first_row` the band's first token id; 0 for a whole table).
    #[allow(clippy::too_many_arguments)]
    pub fn embedding(
        &self,
        ctx: &GpuContext,
        table: &GpuMatrix,
        first_row: u32,
        scale: f32,
        x: Bind,
        step: &wgpu::Buffer,
        tokens: &wgpu::Buffer,
    ) -> Result<Dispatch> {
        let params = ctx.uniform("embedding", &[EmbeddingParams { dim: table.cols, first_row, rows: table.rows, scale }]);
        let mut binds = vec![("params", whole(&params))];
        binds.extend(table.binds());
        binds.extend([("x", x), ("step", whole(step)), ("tokens", whole(tokens))]);
        Ok(prepare(ctx, &self.embedding_kernel(ctx, table.format)?, &binds, groups_for(table.cols))?.per_token(1, 1))
    }
}

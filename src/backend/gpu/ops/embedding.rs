//! The embedding op: the step's token rows of the (quantized) table, dequantized and scaled,
//! plus each token's learned position row where the model has them (embedding.wgsl); its twin
//! is the dequantized table row times the scale, plus the position row (tests/gpu_kernels.rs).

use super::super::device::GpuContext;
use super::super::kernels::{groups_for, prepare, whole, Bind, Dispatch, Kernels, ShaderSource};
use super::super::params::EmbeddingParams;
use super::matrix::{GpuMatrix, WeightFormat};
use crate::error::Result;

const EMBEDDING: &str = include_str!("../../../../shaders/embedding.wgsl");

/// The embedding kernel's source for a table in `format`, adding a position table's rows
/// with `positions`.
pub fn source(format: WeightFormat, positions: bool) -> ShaderSource {
    let mut defines = format.defines().to_vec();
    if positions {
        defines.push("POSITIONS");
    }
    let suffix = if positions { "_positions" } else { "" };
    ShaderSource::new(format!("embedding_{}{suffix}.wgsl", format.define().to_lowercase()), EMBEDDING, defines)
}

impl Kernels {
    /// `x[b] = scale * table[tokens[b] - first_row]` for the step's tokens in the table's
    /// rows, dequantized: the embedding lookup from a matvec-layout table, or from one band of
    /// it (`first_row` the band's first token id; 0 for a whole table); plus `positions[pos +
    /// b]` (`[context, dim]` f32, GPT-2's learned positions) where given.
    #[allow(clippy::too_many_arguments)]
    pub fn embedding(
        &self,
        ctx: &GpuContext,
        table: &GpuMatrix,
        first_row: u32,
        scale: f32,
        positions: Option<&wgpu::Buffer>,
        x: Bind,
        step: &wgpu::Buffer,
        tokens: &wgpu::Buffer,
    ) -> Result<Dispatch> {
        let params = ctx.uniform("embedding", &[EmbeddingParams { dim: table.cols, first_row, rows: table.rows, scale }]);
        let mut binds = vec![("params", whole(&params))];
        binds.extend(table.binds());
        binds.extend([("x", x), ("step", whole(step)), ("tokens", whole(tokens))]);
        if let Some(p) = positions {
            binds.push(("positions", whole(p)));
        }
        let kernel = self.embedding_kernel(ctx, table.format, positions.is_some())?;
        Ok(prepare(ctx, &kernel, &binds, groups_for(table.cols))?.per_token(1, 1))
    }
}

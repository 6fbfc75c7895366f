//! The embedding op: the step's token rows of the (quantized) table, dequantized
//! (embedding.wgsl); its twin is the dequantized table row (tests/gpu_kernels.rs).

use super::super::device::GpuContext;
use super::super::kernels::{groups_for, prepare, whole, Bind, Dispatch, Kernels, ShaderSource};
use super::super::params::EmbeddingParams;
use super::matrix::GpuMatrix;
use crate::error::Result;

const EMBEDDING: &str = include_str!("../../../../shaders/embedding.wgsl");

/// The embedding kernel's source.
pub fn source() -> ShaderSource {
    ShaderSource::new("embedding.wgsl", EMBEDDING, Vec::new())
}

impl Kernels {
    /// `x[b] = table[tokens[b]]` for the step's tokens, dequantized: the embedding lookup
    /// from a matvec-layout table.
    pub fn embedding(&self, ctx: &GpuContext, table: &GpuMatrix, x: Bind, step: &wgpu::Buffer, tokens: &wgpu::Buffer) -> Result<Dispatch> {
        let params = ctx.uniform("embedding", &[EmbeddingParams { dim: table.cols, format: table.format as u32, ..Default::default() }]);
        let b = table.b.as_ref().unwrap_or(&table.a);
        let binds = [
            ("params", whole(&params)),
            ("a", whole(&table.a)),
            ("b", whole(b)),
            ("x", x),
            ("step", whole(step)),
            ("tokens", whole(tokens)),
        ];
        Ok(prepare(ctx, &self.embedding, &binds, groups_for(table.cols))?.per_token(1, 1))
    }
}

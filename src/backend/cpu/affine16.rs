//! A matrix as 8-bit integers with an f32 scale and offset per 16 weights, `w = a q + b`: a
//! layout every quantized format the engine reads converts to exactly (Q4_1's and Q4_K's
//! per-32 scale and offset for both of a block's halves, Q6_K's scale per 16 with offset 0,
//! Q2_K's scale and min per 16, ...: each `a q + b` is the format's own arithmetic). The GPU
//! uploads a stack of matrices whose formats differ in it (a Q4_K_M file's Q6_K V projection
//! beside Q4_K Q and K) rather than as F32: 1.5 bytes a weight instead of 4.

use super::quant_matmul::QuantMatrix;

/// Weights per scale and offset.
pub const GROUP: usize = 16;

/// A `[rows, cols]` matrix in 8-bit integers with a scale and offset per [`GROUP`] weights.
pub struct Affine16 {
    /// The integers, `[rows, cols]`.
    pub q: Vec<i8>,
    /// Each group's `[a, b]`, `[rows, cols / 16]`.
    pub ab: Vec<[f32; 2]>,
}

impl QuantMatrix {
    /// The matrix as [`Affine16`], exactly; `None` for float weights (they have no integers).
    pub fn affine16(&self) -> Option<Affine16> {
        match self {
            QuantMatrix::Q8_0(m) => Some(m.affine16()),
            QuantMatrix::Q4_1(m) => Some(m.affine16()),
            QuantMatrix::Q2K(m) => Some(m.affine16()),
            QuantMatrix::Float(_) => None,
        }
    }
}

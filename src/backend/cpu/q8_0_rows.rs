//! Q8_0 weights repacked for [`QuantMatrix`](super::quant_matmul::QuantMatrix), read straight
//! from the GGUF blocks: per block of 32 weights, 32 signed bytes in one array and the scale, widened from f16 to f32, in another.
//! `w = d * q`, so a block's dot product with an activation block is `d_w * d_x * sum(q_w q_x)`.

use super::activations::{check_shape, ActivationRow, BLOCK};
use super::dot_kernel::{DotKernel, RowDot};
use crate::error::Result;

/// Bytes of one Q8_0 block in a GGUF file: f16 `d`, 32 signed bytes.
pub const GGML_BLOCK_BYTES: usize = 34;

/// A `[rows, cols]` matrix in Q8_0 blocks: `q` `[rows, cols]`, `d` `[rows, cols / 32]`.
pub struct Q8_0Rows {
    q: Vec<i8>,
    d: Vec<f32>,
    rows: usize,
    cols: usize,
}

impl Q8_0Rows {
    /// Repacks a row-major `[rows, cols]` tensor's Q8_0 blocks as a GGUF file stores them;
    /// `cols` must be a multiple of 32.
    pub fn from_ggml(blocks: &[u8], rows: usize, cols: usize) -> Result<Self> {
        check_shape("Q8_0", rows, cols, blocks.len(), rows * cols / BLOCK * GGML_BLOCK_BYTES)?;
        let count = blocks.len() / GGML_BLOCK_BYTES;
        let (mut q, mut d) = (Vec::with_capacity(count * BLOCK), Vec::with_capacity(count));
        for block in blocks.chunks_exact(GGML_BLOCK_BYTES) {
            d.push(half::f16::from_le_bytes([block[0], block[1]]).to_f32());
            q.extend(block[2..].iter().map(|&v| v as i8));
        }
        Ok(Q8_0Rows { q, d, rows, cols })
    }

    /// Repacks a row-major `[rows, cols]` tensor's Q5_0 blocks (f16 `d`, 32 high bits, 16
    /// nibble bytes; `w = (q - 16) d` with 5-bit `q`) exactly: `q - 16` fits a signed byte, so
    /// a Q5_0 block is a Q8_0 block with the same scale (at 34 bytes rather than 22).
    pub fn from_q5_0(blocks: &[u8], rows: usize, cols: usize) -> Result<Self> {
        const Q5_0_BYTES: usize = 22;
        check_shape("Q5_0", rows, cols, blocks.len(), rows * cols / BLOCK * Q5_0_BYTES)?;
        let count = blocks.len() / Q5_0_BYTES;
        let (mut q, mut d) = (Vec::with_capacity(count * BLOCK), Vec::with_capacity(count));
        for block in blocks.chunks_exact(Q5_0_BYTES) {
            d.push(half::f16::from_le_bytes([block[0], block[1]]).to_f32());
            let high = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
            let nibbles = &block[6..];
            let value = |j: usize| {
                let low = if j < 16 { nibbles[j] & 0xf } else { nibbles[j - 16] >> 4 };
                (low | (((high >> j) & 1) as u8) << 4) as i8 - 16
            };
            q.extend((0..BLOCK).map(value));
        }
        Ok(Q8_0Rows { q, d, rows, cols })
    }

    /// Row `r`'s integers and scales.
    fn row(&self, r: usize) -> (&[i8], &[f32]) {
        let blocks = self.cols / BLOCK;
        (&self.q[r * self.cols..(r + 1) * self.cols], &self.d[r * blocks..(r + 1) * blocks])
    }
}

impl RowDot for Q8_0Rows {
    fn rows(&self) -> usize {
        self.rows
    }

    fn cols(&self) -> usize {
        self.cols
    }

    /// 32 one-byte integers and a 4-byte scale per block.
    fn bytes(&self) -> usize {
        self.q.len() + self.d.len() * 4
    }

    fn dot<const R: usize, const T: usize>(&self, kernel: DotKernel, first: usize, x: [ActivationRow; T]) -> [[f32; R]; T] {
        dot(kernel, std::array::from_fn(|i| self.row(first + i)), x)
    }
}

/// `out[t][r] = sum_b w[r].d[b] * x[t].d[b] * sum_i w[r].q[32 b + i] * x[t].q[32 b + i]` on
/// `kernel` (relaxed SIMD runs SIMD128's loops: Q8_0's signed weights fit no 7-bit operand;
/// the portable loops where this build lacks the kernel).
fn dot<const R: usize, const T: usize>(kernel: DotKernel, w: [(&[i8], &[f32]); R], x: [ActivationRow; T]) -> [[f32; R]; T] {
    match kernel {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 and FMA (checked in the guard).
        DotKernel::Avx2 if super::avx2_dot::available() => unsafe { super::avx2_dot::q8_0(w, x) },
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        DotKernel::Simd128 | DotKernel::RelaxedSimd => super::wasm_dot::q8_0(w, x),
        _ => portable_dot(w, x),
    }
}

/// The same in plain Rust, one block at a time: [`DotKernel::Portable`], the reference the
/// other kernels are tested against.
pub(super) fn portable_dot<const R: usize, const T: usize>(w: [(&[i8], &[f32]); R], x: [ActivationRow; T]) -> [[f32; R]; T] {
    x.map(|(xq, xd, _)| {
        w.map(|(q, d)| {
            q.chunks_exact(BLOCK)
                .zip(xq.chunks_exact(BLOCK))
                .zip(d.iter().zip(xd))
                .map(|((qw, qx), (dw, dx))| {
                    let s: i32 = qw.iter().zip(qx).map(|(&a, &b)| i32::from(a) * i32::from(b)).sum();
                    s as f32 * (dw * dx)
                })
                .sum()
        })
    })
}

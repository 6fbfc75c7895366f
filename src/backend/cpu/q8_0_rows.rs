//! Q8_0 weights repacked for [`QuantMatrix`](super::quant_matmul::QuantMatrix), read straight
//! from the GGUF blocks: per block of 32 weights, 32 signed bytes in one array and the scale, widened from f16 to f32, in another.
//! `w = d * q`, so a block's dot product with an activation block is `d_w * d_x * sum(q_w q_x)`.

use super::quant_matmul::{check_shape, ActivationRow, RowDot, BLOCK};
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

    fn dot<const R: usize, const T: usize>(&self, first: usize, x: [ActivationRow; T]) -> [[f32; R]; T] {
        dot(std::array::from_fn(|i| self.row(first + i)), x)
    }
}

/// `out[t][r] = sum_b w[r].d[b] * x[t].d[b] * sum_i w[r].q[32 b + i] * x[t].q[32 b + i]`, on
/// SIMD128: each block's 8-lane integer dot products reuse the loaded activations across the
/// rows and the loaded weights across the tokens.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
fn dot<const R: usize, const T: usize>(w: [(&[i8], &[f32]); R], x: [ActivationRow; T]) -> [[f32; R]; T] {
    use core::arch::wasm32::*;
    let blocks = x.first().map_or(0, |(_, d, _)| d.len());
    assert!(
        x.iter().all(|(q, d, _)| q.len() == blocks * BLOCK && d.len() == blocks)
            && w.iter().all(|(q, d)| q.len() == blocks * BLOCK && d.len() == blocks)
    );
    let mut acc = [[f32x4_splat(0.0); R]; T];
    for b in 0..blocks {
        // SAFETY: every row holds `blocks` whole blocks (asserted above), so the 8-byte loads
        // at 32 b + 0, 8, 16, 24 and the scales at b stay inside them.
        unsafe {
            let xv: [[v128; 4]; T] = x.map(|(q, _, _)| {
                let xb = q.as_ptr().add(b * BLOCK);
                [0, 8, 16, 24].map(|o| i16x8_load_extend_i8x8(xb.add(o)))
            });
            for (r, (q, d)) in w.iter().enumerate() {
                let wb = q.as_ptr().add(b * BLOCK);
                let wv = [0, 8, 16, 24].map(|o| i16x8_load_extend_i8x8(wb.add(o)));
                let dw = *d.get_unchecked(b);
                for ((a, xs), (_, xd, _)) in acc.iter_mut().zip(&xv).zip(&x) {
                    let s = i32x4_add(
                        i32x4_add(i32x4_dot_i16x8(wv[0], xs[0]), i32x4_dot_i16x8(wv[1], xs[1])),
                        i32x4_add(i32x4_dot_i16x8(wv[2], xs[2]), i32x4_dot_i16x8(wv[3], xs[3])),
                    );
                    a[r] = f32x4_add(a[r], f32x4_mul(f32x4_convert_i32x4(s), f32x4_splat(dw * *xd.get_unchecked(b))));
                }
            }
        }
    }
    acc.map(|a| {
        a.map(|a| (f32x4_extract_lane::<0>(a) + f32x4_extract_lane::<1>(a)) + (f32x4_extract_lane::<2>(a) + f32x4_extract_lane::<3>(a)))
    })
}

/// `out[t][r] = sum_b w[r].d[b] * x[t].d[b] * sum_i w[r].q[32 b + i] * x[t].q[32 b + i]`,
/// with AVX2 where the CPU has it.
#[cfg(target_arch = "x86_64")]
fn dot<const R: usize, const T: usize>(w: [(&[i8], &[f32]); R], x: [ActivationRow; T]) -> [[f32; R]; T] {
    if super::avx2_dot::available() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above).
        unsafe { super::avx2_dot::q8_0(w, x) }
    } else {
        portable_dot(w, x)
    }
}

/// The same on other CPUs.
#[cfg(not(any(all(target_arch = "wasm32", target_feature = "simd128"), target_arch = "x86_64")))]
fn dot<const R: usize, const T: usize>(w: [(&[i8], &[f32]); R], x: [ActivationRow; T]) -> [[f32; R]; T] {
    portable_dot(w, x)
}

/// The same in plain Rust, one block at a time (x86-64 without AVX2, and any other CPU; the
/// reference the x86-64 kernels are tested against).
#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
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

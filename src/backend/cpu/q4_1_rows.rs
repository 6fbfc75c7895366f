//! Q4_1 weights repacked for [`QuantMatrix`](super::quant_matmul::QuantMatrix), read straight
//! from the GGUF blocks (no requantization): per block of 32 weights, the 16 bytes of 4-bit
//! values as stored (byte `j` holds value `j` in its low nibble and value `j + 16` in its
//! high one) in one array, and the scale `d` and offset `m`, widened from f16 to f32, side by
//! side in another. `w = d * q + m`, so a block's dot product with a Q8_1 activation block is
//! `d_w * d_x * sum(q_w q_x) + m_w * s_x`, with `s_x = d_x * sum(q_x)` (ggml's
//! `vec_dot_q4_1_q8_1`).

use super::quant_matmul::{check_shape, ActivationRow, RowDot, BLOCK};
use crate::error::Result;

/// Bytes of one Q4_1 block in a GGUF file: f16 `d`, f16 `m`, 16 bytes of nibbles.
pub const GGML_BLOCK_BYTES: usize = 20;

/// A `[rows, cols]` matrix in Q4_1 blocks: `q` `[rows, cols / 2]` nibble pairs, `dm`
/// `[rows, cols / 32, 2]` scale and offset.
pub struct Q4_1Rows {
    q: Vec<u8>,
    dm: Vec<f32>,
    rows: usize,
    cols: usize,
}

impl Q4_1Rows {
    /// Repacks a row-major `[rows, cols]` tensor's Q4_1 blocks as a GGUF file stores them;
    /// `cols` must be a multiple of 32.
    pub fn from_ggml(blocks: &[u8], rows: usize, cols: usize) -> Result<Self> {
        check_shape("Q4_1", rows, cols, blocks.len(), rows * cols / BLOCK * GGML_BLOCK_BYTES)?;
        let count = blocks.len() / GGML_BLOCK_BYTES;
        let (mut q, mut dm) = (Vec::with_capacity(count * 16), Vec::with_capacity(count * 2));
        let half = |b: &[u8]| half::f16::from_le_bytes([b[0], b[1]]).to_f32();
        for block in blocks.chunks_exact(GGML_BLOCK_BYTES) {
            dm.push(half(&block[0..2]));
            dm.push(half(&block[2..4]));
            q.extend_from_slice(&block[4..]);
        }
        Ok(Q4_1Rows { q, dm, rows, cols })
    }

    /// Row `r`'s nibbles and (scale, offset) pairs.
    fn row(&self, r: usize) -> (&[u8], &[f32]) {
        let blocks = self.cols / BLOCK;
        (&self.q[r * self.cols / 2..(r + 1) * self.cols / 2], &self.dm[r * blocks * 2..(r + 1) * blocks * 2])
    }
}

impl RowDot for Q4_1Rows {
    fn rows(&self) -> usize {
        self.rows
    }

    fn cols(&self) -> usize {
        self.cols
    }

    /// 16 bytes of nibbles and two 4-byte floats per block.
    fn bytes(&self) -> usize {
        self.q.len() + self.dm.len() * 4
    }

    fn dot<const R: usize, const T: usize>(&self, first: usize, x: [ActivationRow; T]) -> [[f32; R]; T] {
        dot(std::array::from_fn(|i| self.row(first + i)), x)
    }
}

/// `out[t][r] = sum_b (w[r].d[b] * x[t].d[b] * sum_i w[r].q[b, i] * x[t].q[32 b + i] +
/// w[r].m[b] * x[t].s[b])`, on SIMD128: a block's 16 bytes are split into low and high
/// nibbles and widened to 16 bits once, then multiplied with each token's four 8-lane groups,
/// which are loaded once for all the rows.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
fn dot<const R: usize, const T: usize>(w: [(&[u8], &[f32]); R], x: [ActivationRow; T]) -> [[f32; R]; T] {
    use core::arch::wasm32::*;
    let blocks = x.first().map_or(0, |(_, d, _)| d.len());
    assert!(
        x.iter().all(|(q, d, s)| q.len() == blocks * BLOCK && d.len() == blocks && s.len() == blocks)
            && w.iter().all(|(q, dm)| q.len() * 2 == blocks * BLOCK && dm.len() == blocks * 2)
    );
    let mut acc = [[f32x4_splat(0.0); R]; T];
    let mut offsets = [[0f32; R]; T];
    let low = u8x16_splat(0x0F);
    for b in 0..blocks {
        // SAFETY: every row holds `blocks` whole blocks (asserted above): the 16-byte load at
        // 16 b, the 8-byte loads at 32 b + 0, 8, 16, 24, the scales at b and the pairs at 2 b
        // stay inside them.
        unsafe {
            let xv: [[v128; 4]; T] = x.map(|(q, _, _)| {
                let xb = q.as_ptr().add(b * BLOCK);
                [0, 8, 16, 24].map(|o| i16x8_load_extend_i8x8(xb.add(o)))
            });
            for (r, (q, dm)) in w.iter().enumerate() {
                let v = v128_load(q.as_ptr().add(b * 16) as *const v128);
                let (lo, hi) = (v128_and(v, low), u8x16_shr(v, 4));
                let wv = [u16x8_extend_low_u8x16(lo), u16x8_extend_high_u8x16(lo), u16x8_extend_low_u8x16(hi), u16x8_extend_high_u8x16(hi)];
                let (dw, mw) = (*dm.get_unchecked(2 * b), *dm.get_unchecked(2 * b + 1));
                for (((a, o), xs), (_, xd, xsum)) in acc.iter_mut().zip(offsets.iter_mut()).zip(&xv).zip(&x) {
                    let s = i32x4_add(
                        i32x4_add(i32x4_dot_i16x8(wv[0], xs[0]), i32x4_dot_i16x8(wv[1], xs[1])),
                        i32x4_add(i32x4_dot_i16x8(wv[2], xs[2]), i32x4_dot_i16x8(wv[3], xs[3])),
                    );
                    a[r] = f32x4_add(a[r], f32x4_mul(f32x4_convert_i32x4(s), f32x4_splat(dw * *xd.get_unchecked(b))));
                    o[r] += mw * *xsum.get_unchecked(b);
                }
            }
        }
    }
    std::array::from_fn(|t| {
        std::array::from_fn(|r| {
            let a = acc[t][r];
            (f32x4_extract_lane::<0>(a) + f32x4_extract_lane::<1>(a))
                + (f32x4_extract_lane::<2>(a) + f32x4_extract_lane::<3>(a))
                + offsets[t][r]
        })
    })
}

/// `out[t][r] = sum_b (w[r].d[b] * x[t].d[b] * sum_i w[r].q[b, i] * x[t].q[32 b + i] +
/// w[r].m[b] * x[t].s[b])`, with AVX2 where the CPU has it.
#[cfg(target_arch = "x86_64")]
fn dot<const R: usize, const T: usize>(w: [(&[u8], &[f32]); R], x: [ActivationRow; T]) -> [[f32; R]; T] {
    if super::avx2_dot::available() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above).
        unsafe { super::avx2_dot::q4_1(w, x) }
    } else {
        portable_dot(w, x)
    }
}

/// The same on other CPUs.
#[cfg(not(any(all(target_arch = "wasm32", target_feature = "simd128"), target_arch = "x86_64")))]
fn dot<const R: usize, const T: usize>(w: [(&[u8], &[f32]); R], x: [ActivationRow; T]) -> [[f32; R]; T] {
    portable_dot(w, x)
}

/// The same in plain Rust, one block at a time (x86-64 without AVX2, and any other CPU; the
/// reference the x86-64 kernels are tested against).
#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
pub(super) fn portable_dot<const R: usize, const T: usize>(w: [(&[u8], &[f32]); R], x: [ActivationRow; T]) -> [[f32; R]; T] {
    x.map(|(xq, xd, xs)| {
        w.map(|(q, dm)| {
            q.chunks_exact(BLOCK / 2)
                .zip(xq.chunks_exact(BLOCK))
                .zip(dm.chunks_exact(2).zip(xd.iter().zip(xs)))
                .map(|((qw, qx), (dm, (dx, sx)))| {
                    let s: i32 = qw
                        .iter()
                        .enumerate()
                        .map(|(j, &v)| i32::from(v & 0x0F) * i32::from(qx[j]) + i32::from(v >> 4) * i32::from(qx[j + 16]))
                        .sum();
                    s as f32 * (dm[0] * dx) + dm[1] * sx
                })
                .sum()
        })
    })
}

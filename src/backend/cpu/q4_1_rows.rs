//! Q4_1 weights repacked for [`QuantMatrix`](super::quant_matmul::QuantMatrix), read straight
//! from the GGUF blocks (no requantization): per block of 32 weights, the 16 bytes of 4-bit
//! values as stored (byte `j` holds value `j` in its low nibble and value `j + 16` in its
//! high one) in one array, and the scale `d` and offset `m`, widened from f16 to f32, side by
//! side in another. `w = d * q + m`, so a block's dot product with a Q8_1 activation block is
//! `d_w * d_x * sum(q_w q_x) + m_w * s_x`, with `s_x = d_x * sum(q_x)` (ggml's
//! `vec_dot_q4_1_q8_1`).

use super::activations::{check_shape, ActivationRow, BLOCK};
use super::dot_kernel::{DotKernel, RowDot};
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

    /// Repacks a row-major `[rows, cols]` tensor's Q4_K super-blocks as a GGUF file stores
    /// them (`cols` a multiple of 256), exactly: each 32-weight sub-block's weights are
    /// `(d sc) q - (dmin m)` with 4-bit `q`, a Q4_1 block with scale `d sc` and offset
    /// `-(dmin m)`, both exact in f32 (an f16 times a 6-bit integer), whose sum with `q d sc`
    /// rounds as candle's dequantization does. Its nibbles are reordered from Q4_K's (a
    /// 64-weight chunk's 32 bytes hold one sub-block in the low nibbles, the next in the high)
    /// to Q4_1's.
    pub fn from_q4_k(blocks: &[u8], rows: usize, cols: usize) -> Result<Self> {
        const SUPER: usize = 256;
        const SUPER_BYTES: usize = 144;
        if !cols.is_multiple_of(SUPER) {
            return Err(crate::error::Error::Backend(format!("a Q4_K matrix needs rows of whole 256-weight blocks: [{rows}, {cols}]")));
        }
        check_shape("Q4_K", rows, cols, blocks.len(), rows * cols / SUPER * SUPER_BYTES)?;
        let count = rows * cols / BLOCK;
        let (mut q, mut dm) = (Vec::with_capacity(count * 16), Vec::with_capacity(count * 2));
        let half = |b: &[u8]| half::f16::from_le_bytes([b[0], b[1]]).to_f32();
        for block in blocks.chunks_exact(SUPER_BYTES) {
            let (d, dmin, scales, nibbles) = (half(&block[0..2]), half(&block[2..4]), &block[4..16], &block[16..]);
            for (c, chunk) in nibbles.chunks_exact(32).enumerate() {
                for high in [false, true] {
                    let (sc, m) = scale_min_k4(2 * c + usize::from(high), scales);
                    dm.push(d * f32::from(sc));
                    dm.push(-(dmin * f32::from(m)));
                    let n = |i: usize| if high { chunk[i] >> 4 } else { chunk[i] & 0xf };
                    q.extend((0..16).map(|k| n(k) | (n(k + 16) << 4)));
                }
            }
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

    fn dot<const R: usize, const T: usize>(&self, kernel: DotKernel, first: usize, x: [ActivationRow; T]) -> [[f32; R]; T] {
        dot(kernel, std::array::from_fn(|i| self.row(first + i)), x)
    }
}

/// `out[t][r] = sum_b (w[r].d[b] * x[t].d[b] * sum_i w[r].q[b, i] * x[t].q[32 b + i] +
/// w[r].m[b] * x[t].s[b])` on `kernel` (the portable loops where this build lacks it).
fn dot<const R: usize, const T: usize>(kernel: DotKernel, w: [(&[u8], &[f32]); R], x: [ActivationRow; T]) -> [[f32; R]; T] {
    match kernel {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 and FMA (checked in the guard).
        DotKernel::Avx2 if super::avx2_dot::available() => unsafe { super::avx2_dot::q4_1(w, x) },
        #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
        DotKernel::RelaxedSimd => super::wasm_dot::q4_1_relaxed(w, x),
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        DotKernel::Simd128 => super::wasm_dot::q4_1(w, x),
        _ => portable_dot(w, x),
    }
}

/// The same in plain Rust, one block at a time: [`DotKernel::Portable`], the reference the
/// other kernels are tested against.
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

/// Sub-block `j`'s 6-bit scale and min from a K block's 12 packed bytes (ggml's
/// `get_scale_min_k4`).
pub(super) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

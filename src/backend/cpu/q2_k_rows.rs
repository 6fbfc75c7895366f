//! Q2_K weights for [`QuantMatrix`](super::quant_matmul::QuantMatrix), repacked exactly. A
//! Q2_K super-block holds 256 weights in 16 halves of 16, each with a 4-bit scale `sc` and a
//! 4-bit min `m`: `w = d sc q - dmin m`, `q` in 0..=3. The `d sc q` part is a [`Q8_0Rows`]
//! with its halves' scales (the integers as bytes, `sc` beside them, `d` each 32-weight
//! block's scale), so its products run on every kernel Q6_K's do. The `- dmin m` part needs
//! only each half's sum of the rounded input: a row's product subtracts `dmin * sum_h m_h
//! d_x sum_{i in h} q_x i` (ggml's q2_K x q8_K product does the same with Q8_K's sums per 16),
//! one multiply-add per 16 weights beside the integer products. It has no sixteen-token
//! prefill loops of its own (a prefill takes [`RowDot::dot`]).

use super::activations::{ActivationRow, Activations, BLOCK};
use super::affine16::Affine16;
use super::dot_kernel::{DotKernel, RowDot};
use super::q8_0_rows::Q8_0Rows;
use crate::error::Result;

/// Bytes of one Q2_K super-block in a GGUF file: 16 bytes of scales and mins, 64 of bit
/// pairs, f16 `d`, f16 `dmin`.
const Q2_K_BYTES: usize = 84;
/// Weights in a super-block.
const SUPER: usize = 256;
/// Weights per scale and min.
const HALF: usize = 16;

/// A `[rows, cols]` matrix of Q2_K super-blocks.
pub struct Q2KRows {
    /// `d sc q`: the integers `[rows, cols]`, each half's `sc`, `d` per 32-weight block.
    scaled: Q8_0Rows,
    /// Each half's min `m`, `[rows, cols / 16]`.
    mins: Vec<u8>,
    /// Each super-block's `dmin`, `[rows, cols / 256]`.
    dmin: Vec<f32>,
    rows: usize,
    cols: usize,
}

impl Q2KRows {
    /// Repacks a row-major `[rows, cols]` tensor's Q2_K super-blocks (`cols` a multiple of
    /// 256) exactly: in 128-weight half `n` of a super-block, weight `32 j + l` has bits `2 j`
    /// and `2 j + 1` of byte `l` of the half's 32 bit-pair bytes; weight `i`'s scale is the low
    /// nibble of byte `i / 16` of the 16 scale bytes and its min the high nibble (ggml's
    /// `dequantize_row_q2_K` order).
    pub fn from_q2_k(blocks: &[u8], rows: usize, cols: usize) -> Result<Self> {
        let scaled = Q8_0Rows::from_super_blocks("Q2_K", Q2_K_BYTES, 80, blocks, rows, cols, |block, q, sub| {
            let (scales, qs) = (&block[..16], &block[16..80]);
            q.extend((0..SUPER).map(|i| {
                let (n, j, l) = (i / 128, (i % 128) / 32, i % 32);
                ((qs[32 * n + l] >> (2 * j)) & 3) as i8
            }));
            sub.extend(scales.iter().map(|&b| (b & 0xF) as i8));
        })?;
        let mut mins = Vec::with_capacity(rows * cols / HALF);
        let mut dmin = Vec::with_capacity(rows * cols / SUPER);
        for block in blocks.chunks_exact(Q2_K_BYTES) {
            mins.extend(block[..16].iter().map(|&b| b >> 4));
            dmin.push(half::f16::from_le_bytes([block[82], block[83]]).to_f32());
        }
        Ok(Q2KRows { scaled, mins, dmin, rows, cols })
    }

    /// Row `r`'s weights, `[cols]`: `d sc q - dmin m`.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        self.scaled.dequantize_row(r, out);
        let (mins, dmin) = self.row_mins(r);
        for (i, o) in out.iter_mut().take(self.cols).enumerate() {
            *o -= dmin[i / SUPER] * f32::from(mins[i / HALF]);
        }
    }

    /// The matrix as [`Affine16`]: the `d sc q` part's, each half's `b` its `-dmin m`.
    pub fn affine16(&self) -> Affine16 {
        let mut affine = self.scaled.affine16();
        let offsets = self.mins.iter().enumerate().map(|(h, &m)| -(self.dmin[h * HALF / SUPER] * f32::from(m)));
        affine.ab.iter_mut().zip(offsets).for_each(|(ab, b)| ab[1] = b);
        affine
    }

    /// Row `r`'s mins and its super-blocks' `dmin`.
    fn row_mins(&self, r: usize) -> (&[u8], &[f32]) {
        let (halves, supers) = (self.cols / HALF, self.cols / SUPER);
        (&self.mins[r * halves..(r + 1) * halves], &self.dmin[r * supers..(r + 1) * supers])
    }
}

impl RowDot for Q2KRows {
    type Input = Activations;

    fn rows(&self) -> usize {
        self.rows
    }

    fn cols(&self) -> usize {
        self.cols
    }

    /// The [`Q8_0Rows`] of `d sc q`, a byte per 16 weights for the mins and 4 bytes per 256
    /// for `dmin`.
    fn bytes(&self) -> usize {
        self.scaled.bytes() + self.mins.len() + self.dmin.len() * 4
    }

    /// The `d sc q` rows' products, less each row's `dmin m` part: per 32-weight block `b`
    /// of token `x`, `dmin * d_x[b] * (m_lo sum_lo + m_hi sum_hi)` over its halves' integer
    /// sums, each sum taken once for all `R` rows.
    fn dot<const R: usize, const T: usize>(&self, kernel: DotKernel, first: usize, x: [ActivationRow; T]) -> [[f32; R]; T] {
        let mut out = self.scaled.dot::<R, T>(kernel, first, x);
        let rows: [(&[u8], &[f32]); R] = std::array::from_fn(|i| self.row_mins(first + i));
        for (o, (q, d, _)) in out.iter_mut().zip(x) {
            let mut offsets = [0f32; R];
            for (b, (block, &dx)) in q.chunks_exact(BLOCK).zip(d).enumerate() {
                let sum = |h: &[i8]| h.iter().map(|&v| i32::from(v)).sum::<i32>();
                let (lo, hi) = (sum(&block[..HALF]), sum(&block[HALF..]));
                for (offset, (mins, dmin)) in offsets.iter_mut().zip(&rows) {
                    let m = i32::from(mins[2 * b]) * lo + i32::from(mins[2 * b + 1]) * hi;
                    *offset += m as f32 * (dx * dmin[b * BLOCK / SUPER]);
                }
            }
            o.iter_mut().zip(offsets).for_each(|(y, offset)| *y -= offset);
        }
        out
    }
}

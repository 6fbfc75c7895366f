//! Q4_1 weights, and every format that is Q4_1 with other scales or a fifth bit (Q4_0, Q4_K;
//! Q5_0, Q5_1, Q5_K), repacked exactly for [`QuantMatrix`](super::quant_matmul::QuantMatrix), read
//! straight from the GGUF blocks (no requantization): per block of 32 weights, the 16 bytes of
//! 4-bit values as stored (byte `j` holds value `j` in its low nibble and value `j + 16` in
//! its high one) in one array, for 5-bit formats the block's 32 fifth bits (bit `j` for value
//! `j`, worth 16) in a second, and the scale `d` and offset `m`, widened from f16 to f32, side
//! by side in a third. `w = d * q + m`, so a block's dot product with a Q8_1 activation block
//! is `d_w * d_x * sum(q_w q_x) + m_w * s_x`, with `s_x = d_x * sum(q_x)` (ggml's
//! `vec_dot_q4_1_q8_1`). Q4_0's `w = d (q - 8)` is the offset `m = -8 d`, Q5_0's `w = d (q -
//! 16)` the offset `m = -16 d`.

use std::ops::Range;

use super::activations::{check_shape, ActivationRow, BLOCK};
use super::affine16::Affine16;
use super::dot_kernel::{DotKernel, RowDot};
use super::token_groups::{TokenGroup, GROUP};
use crate::error::Result;

/// Bytes of one Q4_1 block in a GGUF file: f16 `d`, f16 `m`, 16 bytes of nibbles.
pub const GGML_BLOCK_BYTES: usize = 20;

/// Bytes of one Q4_0 block in a GGUF file: f16 `d`, 16 bytes of nibbles.
const Q4_0_BYTES: usize = 18;
/// Bytes of one Q5_0 block in a GGUF file: f16 `d`, 32 fifth bits, 16 bytes of nibbles.
const Q5_0_BYTES: usize = 22;
/// Bytes of one Q5_1 block in a GGUF file: f16 `d`, f16 `m`, 32 fifth bits, 16 bytes of nibbles.
const Q5_1_BYTES: usize = 24;
/// Weights in a K-quant super-block.
const SUPER: usize = 256;

/// One row as the kernels read it: its nibble pairs `[cols / 2]`, its fifth bits `[cols / 32]`
/// (empty for 4-bit formats) and its `(d, m)` pairs `[cols / 32 * 2]`.
pub type NibbleRow<'a> = (&'a [u8], &'a [u32], &'a [f32]);

/// A `[rows, cols]` matrix in Q4_1 blocks, 4- or 5-bit: `q` `[rows, cols / 2]` nibble pairs,
/// `high` `[rows, cols / 32]` fifth bits (empty for 4-bit formats), `dm` `[rows, cols / 32, 2]`
/// scale and offset.
pub struct Q4_1Rows {
    q: Vec<u8>,
    high: Vec<u32>,
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
        for block in blocks.chunks_exact(GGML_BLOCK_BYTES) {
            dm.push(half(&block[0..2]));
            dm.push(half(&block[2..4]));
            q.extend_from_slice(&block[4..]);
        }
        Ok(Q4_1Rows { q, high: Vec::new(), dm, rows, cols })
    }

    /// Repacks a row-major `[rows, cols]` tensor's Q4_0 blocks (f16 `d`, 16 nibble bytes;
    /// `w = d (q - 8)`) exactly, as `d q + m` with `m = -8 d`; `cols` must be a multiple of 32.
    pub fn from_q4_0(blocks: &[u8], rows: usize, cols: usize) -> Result<Self> {
        check_shape("Q4_0", rows, cols, blocks.len(), rows * cols / BLOCK * Q4_0_BYTES)?;
        let count = blocks.len() / Q4_0_BYTES;
        let (mut q, mut dm) = (Vec::with_capacity(count * 16), Vec::with_capacity(count * 2));
        for block in blocks.chunks_exact(Q4_0_BYTES) {
            let d = half(&block[0..2]);
            dm.push(d);
            dm.push(-8.0 * d);
            q.extend_from_slice(&block[2..]);
        }
        Ok(Q4_1Rows { q, high: Vec::new(), dm, rows, cols })
    }

    /// Repacks a row-major `[rows, cols]` tensor's Q5_0 blocks (f16 `d`, 32 fifth bits, 16
    /// nibble bytes; `w = d (q - 16)` with 5-bit `q`) exactly, as `d q + m` with `m = -16 d`
    /// (both products exact in f32); `cols` must be a multiple of 32.
    pub fn from_q5_0(blocks: &[u8], rows: usize, cols: usize) -> Result<Self> {
        check_shape("Q5_0", rows, cols, blocks.len(), rows * cols / BLOCK * Q5_0_BYTES)?;
        let mut m = Self::with_capacity(rows, cols);
        for block in blocks.chunks_exact(Q5_0_BYTES) {
            let d = half(&block[0..2]);
            m.push(d, -16.0 * d, &block[2..6], &block[6..]);
        }
        Ok(m)
    }

    /// Repacks a row-major `[rows, cols]` tensor's Q5_1 blocks (f16 `d`, f16 `m`, 32 fifth
    /// bits, 16 nibble bytes; `w = d q + m` with 5-bit `q`) as stored; `cols` must be a multiple
    /// of 32.
    pub fn from_q5_1(blocks: &[u8], rows: usize, cols: usize) -> Result<Self> {
        check_shape("Q5_1", rows, cols, blocks.len(), rows * cols / BLOCK * Q5_1_BYTES)?;
        let mut m = Self::with_capacity(rows, cols);
        for block in blocks.chunks_exact(Q5_1_BYTES) {
            m.push(half(&block[0..2]), half(&block[2..4]), &block[4..8], &block[8..]);
        }
        Ok(m)
    }

    /// Repacks a row-major `[rows, cols]` tensor's Q5_K super-blocks (`cols` a multiple of
    /// 256) exactly, as [`Q4_1Rows::from_q4_k`] does Q4_K's, with each weight's fifth bit: bit
    /// `s` of the super-block's byte `qh[l]` belongs to weight `l` of sub-block `s`.
    pub fn from_q5_k(blocks: &[u8], rows: usize, cols: usize) -> Result<Self> {
        const SUPER_BYTES: usize = 176;
        whole_super_blocks("Q5_K", rows, cols)?;
        check_shape("Q5_K", rows, cols, blocks.len(), rows * cols / SUPER * SUPER_BYTES)?;
        let mut m = Self::with_capacity(rows, cols);
        for block in blocks.chunks_exact(SUPER_BYTES) {
            let (d, dmin, scales, qh, nibbles) = (half(&block[0..2]), half(&block[2..4]), &block[4..16], &block[16..48], &block[48..]);
            for (c, chunk) in nibbles.chunks_exact(32).enumerate() {
                for upper in [false, true] {
                    let s = 2 * c + usize::from(upper);
                    let (sc, min) = scale_min_k4(s, scales);
                    let bits = (0..BLOCK).fold(0u32, |bits, l| bits | (u32::from((qh[l] >> s) & 1) << l));
                    let n = |i: usize| if upper { chunk[i] >> 4 } else { chunk[i] & 0xf };
                    let pairs: [u8; 16] = std::array::from_fn(|k| n(k) | (n(k + 16) << 4));
                    m.push(d * f32::from(sc), -(dmin * f32::from(min)), &bits.to_le_bytes(), &pairs);
                }
            }
        }
        Ok(m)
    }

    /// An empty 5-bit matrix with room for `[rows, cols]`.
    fn with_capacity(rows: usize, cols: usize) -> Self {
        let count = rows * cols / BLOCK;
        Q4_1Rows { q: Vec::with_capacity(count * 16), high: Vec::with_capacity(count), dm: Vec::with_capacity(count * 2), rows, cols }
    }

    /// Appends one 5-bit block: scale, offset, its fifth bits as 4 little-endian bytes, its 16
    /// nibble pairs.
    fn push(&mut self, d: f32, m: f32, bits: &[u8], nibbles: &[u8]) {
        self.dm.push(d);
        self.dm.push(m);
        self.high.push(u32::from_le_bytes([bits[0], bits[1], bits[2], bits[3]]));
        self.q.extend_from_slice(nibbles);
    }

    /// Repacks a row-major `[rows, cols]` tensor's Q4_K super-blocks as a GGUF file stores
    /// them (`cols` a multiple of 256), exactly: each 32-weight sub-block's weights are
    /// `(d sc) q - (dmin m)` with 4-bit `q`, a Q4_1 block with scale `d sc` and offset
    /// `-(dmin m)`, both exact in f32 (an f16 times a 6-bit integer), whose sum with `q d sc`
    /// rounds as candle's dequantization does. Its nibbles are reordered from Q4_K's (a
    /// 64-weight chunk's 32 bytes hold one sub-block in the low nibbles, the next in the high)
    /// to Q4_1's.
    pub fn from_q4_k(blocks: &[u8], rows: usize, cols: usize) -> Result<Self> {
        const SUPER_BYTES: usize = 144;
        whole_super_blocks("Q4_K", rows, cols)?;
        check_shape("Q4_K", rows, cols, blocks.len(), rows * cols / SUPER * SUPER_BYTES)?;
        let count = rows * cols / BLOCK;
        let (mut q, mut dm) = (Vec::with_capacity(count * 16), Vec::with_capacity(count * 2));
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
        Ok(Q4_1Rows { q, high: Vec::new(), dm, rows, cols })
    }

    /// Row `r`'s weights, `[cols]`: `d * q + m`, `q` with its fifth bit where the format has one.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        let (q, high, dm) = self.row(r);
        for (b, block) in out.chunks_exact_mut(BLOCK).enumerate() {
            let (d, m) = (dm[2 * b], dm[2 * b + 1]);
            for (o, value) in block.iter_mut().zip(block_values(q, high, b)) {
                *o = d * f32::from(value) + m;
            }
        }
    }

    /// The matrix as [`Affine16`]: each block's 4- or 5-bit integers, and its `(d, m)` as
    /// both of its halves' `(a, b)`.
    pub fn affine16(&self) -> Affine16 {
        let mut q = Vec::with_capacity(self.rows * self.cols);
        for r in 0..self.rows {
            let (nibbles, high, _) = self.row(r);
            for b in 0..self.cols / BLOCK {
                q.extend(block_values(nibbles, high, b).map(|v| v as i8));
            }
        }
        let ab = self.dm.chunks_exact(2).flat_map(|dm| [[dm[0], dm[1]]; 2]).collect();
        Affine16 { q, ab }
    }

    /// Row `r`'s nibbles, fifth bits (empty for 4-bit formats) and (scale, offset) pairs.
    fn row(&self, r: usize) -> NibbleRow<'_> {
        let blocks = self.cols / BLOCK;
        let high = if self.high.is_empty() { &[][..] } else { &self.high[r * blocks..(r + 1) * blocks] };
        (&self.q[r * self.cols / 2..(r + 1) * self.cols / 2], high, &self.dm[r * blocks * 2..(r + 1) * blocks * 2])
    }
}

/// Block `b`'s 32 integers of a row (`q` its nibble pairs, `high` its fifth bits or empty):
/// weight `j`'s nibble is the low one of byte `j % 16` for `j < 16`, the high one after.
fn block_values<'a>(q: &'a [u8], high: &'a [u32], b: usize) -> impl Iterator<Item = u8> + 'a {
    let fifth = high.get(b).copied().unwrap_or(0);
    (0..BLOCK).map(move |j| {
        let byte = q[b * BLOCK / 2 + j % 16];
        let nibble = if j < 16 { byte & 0xF } else { byte >> 4 };
        nibble + 16 * ((fifth >> j) & 1) as u8
    })
}

impl RowDot for Q4_1Rows {
    type Input = super::activations::Activations;

    fn rows(&self) -> usize {
        self.rows
    }

    fn cols(&self) -> usize {
        self.cols
    }

    /// 16 bytes of nibbles, two 4-byte floats and, for 5-bit formats, 4 bytes of fifth bits
    /// per block.
    fn bytes(&self) -> usize {
        self.q.len() + self.high.len() * 4 + self.dm.len() * 4
    }

    fn dot<const R: usize, const T: usize>(&self, kernel: DotKernel, first: usize, x: [ActivationRow; T]) -> [[f32; R]; T] {
        dot(kernel, std::array::from_fn(|i| self.row(first + i)), x)
    }

    fn dot_group(&self, kernel: DotKernel, rows: Range<usize>, x: TokenGroup<'_>, write: impl FnMut(usize, &[f32; GROUP])) -> bool {
        #[cfg(target_arch = "x86_64")]
        return super::x86_prefill::dot(kernel, rows, |r| self.row(r), x, write);
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (kernel, rows, x, write);
            false
        }
    }
}

/// `out[t][r] = sum_b (w[r].d[b] * x[t].d[b] * sum_i w[r].q[b, i] * x[t].q[32 b + i] +
/// w[r].m[b] * x[t].s[b])` on `kernel` (the portable loops where this build lacks it).
fn dot<const R: usize, const T: usize>(kernel: DotKernel, w: [NibbleRow; R], x: [ActivationRow; T]) -> [[f32; R]; T] {
    match kernel {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512 VNNI and VL besides AVX2 and FMA (checked in the guard).
        DotKernel::Avx512Vnni if super::x86_prefill::vnni_available() => unsafe { super::avx2_dot::q4_1_vnni(w, x) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 and FMA (checked in the guard).
        DotKernel::Avx2 | DotKernel::Avx512Vnni if super::avx2_dot::available() => unsafe { super::avx2_dot::q4_1(w, x) },
        #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
        DotKernel::RelaxedSimd => super::wasm_dot::q4_1_relaxed(w, x),
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        DotKernel::Simd128 => super::wasm_dot::q4_1(w, x),
        _ => portable_dot(w, x),
    }
}

/// The same in plain Rust, one block at a time: [`DotKernel::Portable`], the reference the
/// other kernels are tested against.
pub(super) fn portable_dot<const R: usize, const T: usize>(w: [NibbleRow; R], x: [ActivationRow; T]) -> [[f32; R]; T] {
    x.map(|(xq, xd, xs)| {
        w.map(|(q, high, dm)| {
            q.chunks_exact(BLOCK / 2)
                .zip(xq.chunks_exact(BLOCK))
                .zip(dm.chunks_exact(2).zip(xd.iter().zip(xs)))
                .enumerate()
                .map(|(b, ((qw, qx), (dm, (dx, sx))))| {
                    let bits = high.get(b).copied().unwrap_or(0);
                    let fifth = |j: usize| (((bits >> j) & 1) << 4) as i32;
                    let s: i32 = qw
                        .iter()
                        .enumerate()
                        .map(|(j, &v)| {
                            (i32::from(v & 0x0F) + fifth(j)) * i32::from(qx[j])
                                + (i32::from(v >> 4) + fifth(j + 16)) * i32::from(qx[j + 16])
                        })
                        .sum();
                    s as f32 * (dm[0] * dx) + dm[1] * sx
                })
                .sum()
        })
    })
}

/// Asserts that nibble rows and activation rows hold the same whole number of blocks, and
/// that the weight rows are all 4-bit or all 5-bit; returns the blocks and whether 5-bit.
pub(super) fn check_blocks<const R: usize, const T: usize>(w: &[NibbleRow; R], x: &[ActivationRow; T]) -> (usize, bool) {
    let blocks = x.first().map_or(0, |(_, d, _)| d.len());
    let five = w.first().is_some_and(|(_, high, _)| !high.is_empty());
    assert!(
        x.iter().all(|(q, d, s)| q.len() == blocks * BLOCK && d.len() == blocks && s.len() == blocks)
            && w.iter().all(|(q, high, dm)| q.len() * 2 == blocks * BLOCK
                && high.len() == if five { blocks } else { 0 }
                && dm.len() == blocks * 2)
    );
    (blocks, five)
}

/// An f16 from two little-endian bytes, widened to f32.
fn half(b: &[u8]) -> f32 {
    half::f16::from_le_bytes([b[0], b[1]]).to_f32()
}

/// Refuses a K-quant matrix whose rows are not whole 256-weight super-blocks.
fn whole_super_blocks(format: &str, rows: usize, cols: usize) -> Result<()> {
    if !cols.is_multiple_of(SUPER) {
        return Err(crate::error::Error::Backend(format!("a {format} matrix needs rows of whole 256-weight blocks: [{rows}, {cols}]")));
    }
    Ok(())
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

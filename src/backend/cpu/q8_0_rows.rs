//! Q8_0 weights repacked for [`QuantMatrix`](super::quant_matmul::QuantMatrix), read straight
//! from the GGUF blocks: per block of 32 weights, 32 signed bytes in one array and the scale,
//! widened from f16 to f32, in another. `w = d * q`, so a block's dot product with an
//! activation block is `d_w * d_x * sum(q_w q_x)`. Q6_K, Q3_K (and Q5_0 in wasm) are repacked
//! exactly into the same blocks: Q6_K's `w = d * sc * (q - 32)` keeps `q - 32` as the block's
//! bytes and each 16-weight half's 8-bit `sc` in a third array, which the kernels multiply into
//! the half's integer sums (`d_w * d_x * (sc_0 sum_lo + sc_1 sum_hi)`), as ggml's q6_K x q8_K
//! product does; Q3_K's `w = d * (sc - 32) * q` the same way, with its 3-bit `q` (-4..=3) as
//! the bytes and `sc - 32` as the halves' scales. Their integers (Q5_0's -16..=15, Q6_K's
//! -32..=31, Q3_K's -4..=3) are narrow enough for relaxed SIMD's 7-bit operand once 32 is
//! added, which its loops do (`narrow`).

use std::ops::Range;

use super::activations::{check_shape, ActivationRow, BLOCK};
use super::affine16::Affine16;
use super::dot_kernel::{DotKernel, RowDot};
use super::token_groups::{TokenGroup, GROUP};
use crate::error::Result;

/// Bytes of one Q8_0 block in a GGUF file: f16 `d`, 32 signed bytes.
pub const GGML_BLOCK_BYTES: usize = 34;

/// Bytes of one Q6_K super-block in a GGUF file: 128 bytes of low nibbles, 64 of high bit
/// pairs, 16 signed scales, f16 `d`.
const Q6_K_BYTES: usize = 210;
/// Bytes of one Q3_K super-block in a GGUF file: 32 bytes of high bits, 64 of low bit pairs,
/// 12 of 6-bit scales, f16 `d`.
const Q3_K_BYTES: usize = 110;
/// Weights in a K-quant super-block.
const SUPER: usize = 256;

/// One row as the kernels read it: its integers `[cols]`, its halves' scales `[cols / 16]`
/// (empty but for Q6_K) and its blocks' scales `[cols / 32]`.
pub type ByteRow<'a> = (&'a [i8], &'a [i8], &'a [f32]);

/// A `[rows, cols]` matrix in Q8_0 blocks: `q` `[rows, cols]`, `sub` `[rows, cols / 16]` (each
/// 16-weight half's scale; empty but for Q6_K), `d` `[rows, cols / 32]`.
pub struct Q8_0Rows {
    q: Vec<i8>,
    sub: Vec<i8>,
    d: Vec<f32>,
    rows: usize,
    cols: usize,
    /// Every integer lies in [`NARROW`] (Q5_0's and Q6_K's always do, a Q8_0 tensor's
    /// seldom): relaxed SIMD then takes `q + NARROW_BIAS`, which fits its 7-bit operand.
    narrow: bool,
}

/// The integers relaxed SIMD's loops take ([`Q8_0Rows`]'s `narrow`), [`NARROW_BIAS`] added.
const NARROW: std::ops::RangeInclusive<i8> = -NARROW_BIAS..=NARROW_BIAS - 1;

/// What relaxed SIMD adds to narrow integers, making them 0..=63: small enough that a block's
/// two halves' sums of products add up in 16 bits.
pub(super) const NARROW_BIAS: i8 = 32;

impl Q8_0Rows {
    /// The repacked arrays, with whether every integer is narrow.
    fn new(q: Vec<i8>, sub: Vec<i8>, d: Vec<f32>, rows: usize, cols: usize) -> Self {
        let narrow = q.iter().all(|v| NARROW.contains(v));
        Q8_0Rows { q, sub, d, rows, cols, narrow }
    }

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
        Ok(Q8_0Rows::new(q, Vec::new(), d, rows, cols))
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
        Ok(Q8_0Rows::new(q, Vec::new(), d, rows, cols))
    }

    /// Repacks a row-major `[rows, cols]` tensor's Q6_K super-blocks (`cols` a multiple of
    /// 256) exactly: weight `i` of a super-block is `d * sc[i / 16] * (q_i - 32)`, its 6-bit
    /// `q_i` split into a nibble in `ql` and two bits in `qh` (ggml's `dequantize_row_q6_K`
    /// order: in each 128-weight half, byte `l < 32` of `ql` holds weights `l` (low nibble) and
    /// `l + 64` (high), byte `l + 32` weights `l + 32` and `l + 96`, and byte `l` of `qh` their
    /// high bit pairs, from bit 0 up).
    pub fn from_q6_k(blocks: &[u8], rows: usize, cols: usize) -> Result<Self> {
        Self::from_super_blocks("Q6_K", Q6_K_BYTES, 208, blocks, rows, cols, |block, q, sub| {
            let (ql, qh, scales) = (&block[..128], &block[128..192], &block[192..208]);
            for half in 0..2 {
                let (ql, qh) = (&ql[64 * half..64 * (half + 1)], &qh[32 * half..32 * (half + 1)]);
                // Weight j of this half: its nibble and its two high bits.
                let value = |j: usize| {
                    let (l, quarter) = (j % 32, j / 32);
                    let nibble = if quarter < 2 { ql[l + 32 * quarter] & 0xF } else { ql[l + 32 * (quarter - 2)] >> 4 };
                    let high = (qh[l] >> (2 * quarter)) & 3;
                    (nibble | (high << 4)) as i8 - 32
                };
                q.extend((0..128).map(value));
            }
            sub.extend(scales.iter().map(|&v| v as i8));
        })
    }

    /// Repacks a row-major `[rows, cols]` tensor's Q3_K super-blocks (`cols` a multiple of
    /// 256) exactly: weight `i` of a super-block is `d * (sc[i / 16] - 32) * q_i`, its 3-bit
    /// `q_i` (-4..=3) two low bits in `qs` and a high bit in `hmask` that, clear, takes 4 off
    /// (ggml's `dequantize_row_q3_K` order: in 128-weight half `n`, weight `32 j + l` has bits
    /// `2 j` and `2 j + 1` of byte `l` of the half's 32 `qs` bytes, and bit `4 n + j` of byte
    /// `l` of `hmask`). The 16 6-bit scales: the low nibble of byte `k` of the 12 (of byte `k -
    /// 8`'s high nibble from `k = 8` on), and as their top two bits bits `2 (k / 4)` of byte
    /// `8 + k % 4`.
    pub fn from_q3_k(blocks: &[u8], rows: usize, cols: usize) -> Result<Self> {
        Self::from_super_blocks("Q3_K", Q3_K_BYTES, 108, blocks, rows, cols, |block, q, sub| {
            let (hmask, qs, scales) = (&block[..32], &block[32..96], &block[96..108]);
            let value = |i: usize| {
                let (n, j, l) = (i / 128, (i % 128) / 32, i % 32);
                let low = (qs[32 * n + l] >> (2 * j)) & 3;
                let high = (hmask[l] >> (4 * n + j)) & 1;
                low as i8 - if high == 1 { 0 } else { 4 }
            };
            q.extend((0..SUPER).map(value));
            sub.extend((0..SUPER / 16).map(|k| {
                let low = if k < 8 { scales[k] & 0xF } else { scales[k - 8] >> 4 };
                let top = (scales[8 + k % 4] >> (2 * (k / 4))) & 3;
                (low | (top << 4)) as i8 - 32
            }));
        })
    }

    /// Repacks `[rows, cols]` of `name`'s 256-weight super-blocks of `block_bytes`, each
    /// with its f16 `d` at byte `d_at`: `decode` appends a block's 256 integers to `q` and its
    /// 16 halves' scales to `sub`, and every 32-weight block of it takes `d` as its scale.
    pub(super) fn from_super_blocks(
        name: &str,
        block_bytes: usize,
        d_at: usize,
        blocks: &[u8],
        rows: usize,
        cols: usize,
        decode: impl Fn(&[u8], &mut Vec<i8>, &mut Vec<i8>),
    ) -> Result<Self> {
        if !cols.is_multiple_of(SUPER) {
            return Err(crate::error::Error::Backend(format!("a {name} matrix needs rows of whole 256-weight blocks: [{rows}, {cols}]")));
        }
        check_shape(name, rows, cols, blocks.len(), rows * cols / SUPER * block_bytes)?;
        let count = rows * cols / BLOCK;
        let (mut q, mut sub, mut d) = (Vec::with_capacity(count * BLOCK), Vec::with_capacity(count * 2), Vec::with_capacity(count));
        for block in blocks.chunks_exact(block_bytes) {
            decode(block, &mut q, &mut sub);
            let scale = half::f16::from_le_bytes([block[d_at], block[d_at + 1]]).to_f32();
            d.extend(std::iter::repeat_n(scale, SUPER / BLOCK));
        }
        Ok(Q8_0Rows::new(q, sub, d, rows, cols))
    }

    /// The matrix as [`Affine16`]: the integers as they are, each half's `a` its block's `d`
    /// (times the half's scale where it has one), `b` 0.
    pub fn affine16(&self) -> Affine16 {
        let halves = self.d.iter().flat_map(|&d| [d, d]);
        let ab = if self.sub.is_empty() {
            halves.map(|a| [a, 0.0]).collect()
        } else {
            halves.zip(&self.sub).map(|(d, &sc)| [d * f32::from(sc), 0.0]).collect()
        };
        Affine16 { q: self.q.clone(), ab }
    }

    /// Row `r`'s weights, `[cols]`: `d * q`, or `d * sc * q` with the half's scale.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        let (q, sub, d) = self.row(r);
        for (i, (o, &v)) in out.iter_mut().zip(q).enumerate() {
            let scale = if sub.is_empty() { d[i / BLOCK] } else { d[i / BLOCK] * f32::from(sub[i / 16]) };
            *o = scale * f32::from(v);
        }
    }

    /// Row `r`'s integers, halves' scales (empty but for Q6_K and Q3_K) and block scales.
    fn row(&self, r: usize) -> ByteRow<'_> {
        let blocks = self.cols / BLOCK;
        let sub = if self.sub.is_empty() { &[][..] } else { &self.sub[r * blocks * 2..(r + 1) * blocks * 2] };
        (&self.q[r * self.cols..(r + 1) * self.cols], sub, &self.d[r * blocks..(r + 1) * blocks])
    }
}

impl RowDot for Q8_0Rows {
    type Input = super::activations::Activations;

    fn rows(&self) -> usize {
        self.rows
    }

    fn cols(&self) -> usize {
        self.cols
    }

    /// 32 one-byte integers and a 4-byte scale per block, and for Q6_K and Q3_K two one-byte
    /// scales.
    fn bytes(&self) -> usize {
        self.q.len() + self.sub.len() + self.d.len() * 4
    }

    fn dot<const R: usize, const T: usize>(&self, kernel: DotKernel, first: usize, x: [ActivationRow; T]) -> [[f32; R]; T] {
        dot(kernel, self.narrow, std::array::from_fn(|i| self.row(first + i)), x)
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

/// `out[t][r] = sum_b w[r].d[b] * x[t].d[b] * sum_i w[r].q[32 b + i] * x[t].q[32 b + i]` (each
/// half's sum times its scale, where the rows have them) on `kernel` (relaxed SIMD runs
/// SIMD128's loops unless the rows are `narrow`, every integer in [`NARROW`]: a Q8_0 tensor's
/// signed weights fit no 7-bit operand; the portable loops where this build lacks the kernel).
fn dot<const R: usize, const T: usize>(kernel: DotKernel, narrow: bool, w: [ByteRow; R], x: [ActivationRow; T]) -> [[f32; R]; T] {
    let _ = narrow;
    match kernel {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512 VNNI and VL besides AVX2 and FMA (checked in the guard).
        DotKernel::Avx512Vnni if super::x86_prefill::vnni_available() => unsafe { super::avx2_dot::q8_0_vnni(w, x) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 and FMA (checked in the guard).
        DotKernel::Avx2 | DotKernel::Avx512Vnni if super::avx2_dot::available() => unsafe { super::avx2_dot::q8_0(w, x) },
        #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
        DotKernel::RelaxedSimd if narrow => super::wasm_dot::q8_0_relaxed(w, x),
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        DotKernel::Simd128 | DotKernel::RelaxedSimd => super::wasm_dot::q8_0(w, x),
        _ => portable_dot(w, x),
    }
}

/// The same in plain Rust, one block at a time: [`DotKernel::Portable`], the reference the
/// other kernels are tested against.
pub(super) fn portable_dot<const R: usize, const T: usize>(w: [ByteRow; R], x: [ActivationRow; T]) -> [[f32; R]; T] {
    x.map(|(xq, xd, _)| {
        w.map(|(q, sub, d)| {
            q.chunks_exact(BLOCK / 2)
                .zip(xq.chunks_exact(BLOCK / 2))
                .enumerate()
                .map(|(h, (qw, qx))| {
                    let s: i32 = qw.iter().zip(qx).map(|(&a, &b)| i32::from(a) * i32::from(b)).sum();
                    let sc = sub.get(h).map_or(1, |&v| i32::from(v));
                    (s * sc) as f32 * (d[h / 2] * xd[h / 2])
                })
                .sum()
        })
    })
}

/// Asserts that byte rows and activation rows hold the same whole number of blocks, and that
/// the weight rows all have halves' scales or none; returns the blocks and whether they do.
pub(super) fn check_blocks<const R: usize, const T: usize>(w: &[ByteRow; R], x: &[ActivationRow; T]) -> (usize, bool) {
    let blocks = x.first().map_or(0, |(_, d, _)| d.len());
    let halves = w.first().is_some_and(|(_, sub, _)| !sub.is_empty());
    assert!(
        x.iter().all(|(q, d, s)| q.len() == blocks * BLOCK && d.len() == blocks && s.len() == blocks)
            && w.iter()
                .all(|(q, sub, d)| q.len() == blocks * BLOCK && sub.len() == if halves { 2 * blocks } else { 0 } && d.len() == blocks)
    );
    (blocks, halves)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One Q8_0 block of a GGUF file: scale 1, then `values`.
    fn q8_0_block(values: impl Fn(usize) -> i8) -> Vec<u8> {
        let mut block = half::f16::ONE.to_le_bytes().to_vec();
        block.extend((0..BLOCK).map(|i| values(i) as u8));
        block
    }

    /// Q5_0's, Q6_K's and Q3_K's integers are always narrow (relaxed SIMD's loops take them), a Q8_0
    /// tensor's only where every one of them is: one integer past either end is enough to
    /// keep the rows off those loops.
    #[test]
    fn narrow_rows_are_those_whose_every_integer_fits() {
        let bytes = |n: usize| (0..n).map(|i| (i * 97 % 251) as u8).collect::<Vec<u8>>();
        // Each block's scale set to 1 (arbitrary bytes could make one a NaN).
        let mut q5_0 = bytes(22 * 6);
        q5_0.chunks_exact_mut(22).for_each(|b| b[..2].copy_from_slice(&half::f16::ONE.to_le_bytes()));
        assert!(Q8_0Rows::from_q5_0(&q5_0, 2, 96).expect("Q5_0").narrow, "Q5_0");
        let mut q6_k = bytes(Q6_K_BYTES * 2);
        q6_k.chunks_exact_mut(Q6_K_BYTES).for_each(|b| b[208..].copy_from_slice(&half::f16::ONE.to_le_bytes()));
        assert!(Q8_0Rows::from_q6_k(&q6_k, 1, 512).expect("Q6_K").narrow, "Q6_K");
        let mut q3_k = bytes(Q3_K_BYTES * 2);
        q3_k.chunks_exact_mut(Q3_K_BYTES).for_each(|b| b[108..].copy_from_slice(&half::f16::ONE.to_le_bytes()));
        assert!(Q8_0Rows::from_q3_k(&q3_k, 1, 512).expect("Q3_K").narrow, "Q3_K");
        let within = q8_0_block(|i| 2 * i as i8 - 32);
        assert!(Q8_0Rows::from_ggml(&within, 1, BLOCK).expect("Q8_0").narrow, "Q8_0 within -32..=31");
        for past in [-NARROW_BIAS - 1, NARROW_BIAS, 127, -127] {
            let block = q8_0_block(|i| if i == 17 { past } else { 0 });
            assert!(!Q8_0Rows::from_ggml(&block, 1, BLOCK).expect("Q8_0").narrow, "Q8_0 holding {past}");
        }
    }
}

//! The block dot products of [`QuantMatrix`](super::quant_matmul::QuantMatrix) on x86-64
//! with AVX2 and FMA (checked at run time; without them the portable loops run).
//!
//! Per block of 32: the weights' integers (Q8_0: 32 signed bytes; Q4_1: 16 bytes of nibble
//! pairs, broadcast to both halves of a vector, the high half shifted down 4 bits and both
//! masked, so the 32 unsigned values come out low nibbles first, matching the activations'
//! order, and for 5-bit formats each value's fifth bit spread from the block's 32-bit mask) are
//! multiplied with the activation's 32 signed bytes by `vpmaddubsw` (unsigned x signed
//! byte pairs summed to 16 bits; Q8_0 moves the weights' signs onto the activations first),
//! widened and summed to eight 32-bit lanes by `vpmaddwd`, or where the CPU has AVX-512 VNNI
//! by one `vpdpbusd` for the two ([`Dot4`]: the same lanes). No pair sum can saturate 16 bits:
//! activations lie in [-127, 127] and weights in [-128, 127] (Q8_0) or [0, 31] (Q4_1, 5-bit).
//! Each entry point is inlined into its format's [`RowDot`](super::dot_kernel::RowDot) (a call
//! per group of rows had cost the 4-bit loops a third of their pace).
//!
//! Blocks go four at a time through [`by_fours`]: three `vphaddd` fold four blocks' eight
//! lanes into one vector (each half holds a partial sum of every block), which is converted
//! to f32 once and scaled by the four blocks' scale products, read as vectors, in one FMA,
//! and Q4_1's offsets in one more; a block at a time, that was a conversion, a broadcast, a
//! scalar product and an FMA per block, and a scalar offset.
//!
//! Each step of four blocks also asks for the same blocks of the row `R` rows on
//! ([`Avx2Rows::prefetch`]), which the loop reads once this group of rows is done. A decode
//! step's products read each weight once, several rows at a time in several arrays (nibbles,
//! scales, fifth bits), and the CPU's own stream prefetchers did not keep up: on this
//! project's 2-core EPYC, with the machine's memory busy, a Q6_K LM head of 128,256 x 2048
//! was read at 13 GB/s without the hints and 42-49 with them, Llama 3.2 1B's Q4_K_M shape
//! decoded 12 tok/s against 32, SmolLM2's Q4_1 140 against 184 (examples/matvec_speed.rs,
//! bench/HISTORY.md).

use std::arch::x86_64::*;

use super::activations::{ActivationRow, BLOCK};
use super::dot_kernel::tail_blocks;
use super::q4_1_rows::NibbleRow;
use super::q8_0_rows::ByteRow;

/// Whether this CPU runs the AVX2 kernels (the answer is cached by the standard library):
/// AVX2 and FMA, and F16C for F16 weights (every CPU with AVX2 has it).
pub fn available() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
}

/// The weight side of one format for [`by_fours`]; every method is inlined into it.
trait Avx2Rows<const T: usize> {
    /// Whether blocks have offsets `m` (added as `m_w s_x`).
    const OFFSETS: bool;
    /// Row `r`'s scales `d` and offsets `m` of blocks `b..b + 4` (offsets zero for formats
    /// without them).
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; row `r` holds blocks `b..b + 4`.
    unsafe fn scales4(&self, r: usize, b: usize) -> (__m128, __m128);
    /// Row `r`'s scale and offset of block `b`.
    ///
    /// # Safety
    /// Row `r` holds block `b`.
    unsafe fn scale(&self, r: usize, b: usize) -> (f32, f32);
    /// Per token, eight lanes of integer partial sums of row `r`'s block `b` against the
    /// token's (lane `i` the products of the block's bytes `4 i .. 4 i + 4`), by `D`.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and what `D` uses; row `r` and every activation row hold block `b`.
    unsafe fn sums<D: Dot4>(&self, r: usize, b: usize, x: &[ActivationRow; T]) -> [__m256i; T];
    /// Asks for blocks `b..b + 4` of the row `R` rows after row `r` ([`prefetch_later`]): the
    /// next group's row, which [`by_fours`] reads next.
    fn prefetch(&self, r: usize, b: usize);
}

/// Four products of unsigned weight bytes and signed activation bytes summed into each 32-bit
/// lane of a 256-bit vector, added to `acc`: the same integers either way.
pub trait Dot4 {
    /// # Safety
    /// The CPU has the instructions the implementation uses.
    unsafe fn dot4(acc: __m256i, u: __m256i, s: __m256i) -> __m256i;
}

/// AVX2: `vpmaddubsw` (pairs to 16 bits, which no pair can saturate: see the module comment)
/// then `vpmaddwd` with ones.
pub struct Pairs;

impl Dot4 for Pairs {
    #[inline(always)]
    unsafe fn dot4(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: the CPU has AVX2 (the caller's promise).
        unsafe { _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))) }
    }
}

/// AVX-512 VNNI on a 256-bit vector: `vpdpbusd`, one instruction for the two above.
pub struct Vnni;

impl Dot4 for Vnni {
    #[inline(always)]
    unsafe fn dot4(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: the CPU has AVX-512 VNNI and VL (the caller's promise).
        unsafe { _mm256_dpbusd_epi32(acc, u, s) }
    }
}

/// Hints that the cache line `rows` rows after `row`'s byte `offset` is wanted soon: `row` is
/// one row of an array of equally long rows, so the same place in a later row lies `rows`
/// row lengths on (possibly past the array: a prefetch reads nothing and cannot fault).
#[inline(always)]
fn prefetch_later<E>(row: &[E], rows: usize, offset_bytes: usize) {
    let at = (row.as_ptr() as *const i8).wrapping_add(std::mem::size_of_val(row) * rows + offset_bytes);
    // SAFETY: a prefetch reads nothing architecturally and cannot fault; the address is formed
    // with wrapping arithmetic and never dereferenced.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(at) }
}

/// Four floats in both halves of a vector.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn both_halves(v: __m128) -> __m256 {
    _mm256_set_m128(v, v)
}

/// `out[t][r] = sum_b (d_w[r][b] d_x[t][b] sum_i q_w q_x + m_w[r][b] s_x[t][b])` over
/// `blocks` blocks, whose count every row of `w` and `x` holds (the callers assert it), the
/// byte products summed by `D`. Inlined into an entry point compiled for what `D` uses (as
/// everything it calls is), so each instruction is inlined.
///
/// # Safety
/// The CPU has AVX2, FMA and whatever `D` uses.
#[inline(always)]
unsafe fn by_fours<const R: usize, const T: usize, W: Avx2Rows<T>, D: Dot4>(w: &W, blocks: usize, x: &[ActivationRow; T]) -> [[f32; R]; T] {
    // SAFETY (the whole body): blocks b..b + 4 lie in every row (b + 4 <= blocks), the blocks
    // past `whole` too (b < blocks); the CPU has the instructions (the caller's promise).
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); R]; T];
        let whole = blocks - blocks % 4;
        for b in (0..whole).step_by(4) {
            let xs: [(__m128, __m256); T] =
                x.map(|(_, d, s)| (_mm_loadu_ps(d.as_ptr().add(b)), both_halves(_mm_loadu_ps(s.as_ptr().add(b)))));
            for r in 0..R {
                w.prefetch(r, b);
                let (dw, mw) = w.scales4(r, b);
                let mw = _mm256_castps128_ps256(mw);
                let mw = _mm256_insertf128_ps(mw, _mm_setzero_ps(), 1);
                let s: [[__m256i; T]; 4] = std::array::from_fn(|k| w.sums::<D>(r, b + k, x));
                for (t, (a, (dx, sx))) in acc.iter_mut().zip(&xs).enumerate() {
                    // Lanes [b0, b1, b2, b3 | b0, b1, b2, b3], each half a partial sum.
                    let folded = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0][t], s[1][t]), _mm256_hadd_epi32(s[2][t], s[3][t]));
                    let scales = both_halves(_mm_mul_ps(dw, *dx));
                    let scaled = _mm256_fmadd_ps(_mm256_cvtepi32_ps(folded), scales, a[r]);
                    a[r] = if W::OFFSETS { _mm256_fmadd_ps(mw, *sx, scaled) } else { scaled };
                }
            }
        }
        let block = |r: usize, b: usize| (w.scale(r, b), w.sums::<D>(r, b, x));
        let fold = |a, sums, scale| _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(scale), a);
        let rest = tail_blocks(whole..blocks, x, &mut acc, block, fold);
        std::array::from_fn(|t| std::array::from_fn(|r| horizontal_sum(acc[t][r]) + rest[t][r]))
    }
}

/// Q8_0 rows `(integers, halves' scales, scales)`, the halves' scales read only where `HALVES`.
struct Q8_0Avx2<'a, const R: usize, const HALVES: bool>([ByteRow<'a>; R]);

impl<const R: usize, const T: usize, const HALVES: bool> Avx2Rows<T> for Q8_0Avx2<'_, R, HALVES> {
    const OFFSETS: bool = false;

    #[inline(always)]
    unsafe fn scales4(&self, r: usize, b: usize) -> (__m128, __m128) {
        // SAFETY: as the caller promises.
        unsafe { (_mm_loadu_ps(self.0[r].2.as_ptr().add(b)), _mm_setzero_ps()) }
    }

    #[inline(always)]
    unsafe fn scale(&self, r: usize, b: usize) -> (f32, f32) {
        // SAFETY: as the caller promises.
        (unsafe { *self.0[r].2.get_unchecked(b) }, 0.0)
    }

    #[inline(always)]
    fn prefetch(&self, r: usize, b: usize) {
        prefetch_later(self.0[r].0, R, b * BLOCK);
        prefetch_later(self.0[r].0, R, b * BLOCK + 64);
        prefetch_later(self.0[r].2, R, b * 4);
        if HALVES {
            prefetch_later(self.0[r].1, R, b * 2);
        }
    }

    /// The weights' signs move onto the activations, so the weights' magnitudes are the
    /// unsigned operand: `D`'s dot of four, or with `HALVES` `vpmaddubsw` then `vpmaddwd` with
    /// each half's scale (the low 128 bits hold the block's first 16 products), the scales
    /// spread by one broadcast, one shuffle and one shift ([`halves_scales`]). With Q6_K's
    /// `|q - 32| <= 32` and `|sc| <= 128` no sum overflows.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn sums<D: Dot4>(&self, r: usize, b: usize, x: &[ActivationRow; T]) -> [__m256i; T] {
        // SAFETY: as the caller promises.
        unsafe {
            let wv = _mm256_loadu_si256(self.0[r].0.as_ptr().add(b * BLOCK) as *const __m256i);
            let magnitude = _mm256_sign_epi8(wv, wv);
            let halves = if HALVES { halves_scales(self.0[r].1, b) } else { _mm256_setzero_si256() };
            x.map(|(q, _, _)| {
                let signed = _mm256_sign_epi8(_mm256_loadu_si256(q.as_ptr().add(b * BLOCK) as *const __m256i), wv);
                _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, signed), if HALVES { halves } else { _mm256_set1_epi16(1) })
            })
        }
    }
}

/// Block `b`'s two halves' scales from `sub` (a signed byte each) as sixteen 16-bit lanes: the
/// first half's in the low 128 bits, the second's in the high. The two bytes, broadcast as a
/// 16-bit word, are shuffled into the high byte of each word of their half (one a 128-bit
/// lane, as `vpshufb` works) and shifted down with their sign.
///
/// # Safety
/// The CPU has AVX2; `sub` holds block `b`'s two scales.
#[inline(always)]
unsafe fn halves_scales(sub: &[i8], b: usize) -> __m256i {
    // SAFETY: as the caller promises (bytes 2 b and 2 b + 1 lie in `sub`).
    unsafe {
        let pair = _mm256_set1_epi16(std::ptr::read_unaligned(sub.as_ptr().add(2 * b) as *const i16));
        // -128 (0x80) clears a byte; byte k of a lane's word goes to the word's high byte.
        let to_high = _mm256_setr_epi8(
            -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, //
            -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1,
        );
        _mm256_srai_epi16(_mm256_shuffle_epi8(pair, to_high), 8)
    }
}

/// Q8_0 weight rows `(integers, halves' scales, scales)`, with halves' scales (Q6_K: every
/// row's) or none, against activation rows: `out[t][r] = sum_b d_w[b] d_x[b] sum_i q_w[32 b +
/// i] q_x[32 b + i]`, each half's sum times its scale where the rows have them, the byte
/// products summed by `D`.
///
/// # Safety
/// The CPU has AVX2, FMA and what `D` uses.
#[inline(always)]
unsafe fn q8_0_by<D: Dot4, const R: usize, const T: usize>(w: [ByteRow; R], x: [ActivationRow; T]) -> [[f32; R]; T] {
    let (blocks, halves) = super::q8_0_rows::check_blocks(&w, &x);
    // SAFETY: the CPU has the instructions (the caller's promise); every row holds `blocks`
    // blocks of integers, scales and, where `halves`, halves' scales (checked).
    unsafe {
        if halves {
            by_fours::<R, T, _, D>(&Q8_0Avx2::<R, true>(w), blocks, &x)
        } else {
            by_fours::<R, T, _, D>(&Q8_0Avx2::<R, false>(w), blocks, &x)
        }
    }
}

/// Q4_1 rows `(nibble pairs, fifth bits, (scale, offset) pairs)`, the fifth bits read only
/// where `FIVE`.
struct Q4_1Avx2<'a, const R: usize, const FIVE: bool>([NibbleRow<'a>; R]);

impl<const R: usize, const T: usize, const FIVE: bool> Avx2Rows<T> for Q4_1Avx2<'_, R, FIVE> {
    const OFFSETS: bool = true;

    /// Four `(d, m)` pairs split apart by one permute.
    #[inline(always)]
    unsafe fn scales4(&self, r: usize, b: usize) -> (__m128, __m128) {
        // SAFETY: as the caller promises.
        unsafe {
            let pairs = _mm256_loadu_ps(self.0[r].2.as_ptr().add(2 * b));
            let split = _mm256_permutevar8x32_ps(pairs, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
            (_mm256_castps256_ps128(split), _mm256_extractf128_ps(split, 1))
        }
    }

    #[inline(always)]
    unsafe fn scale(&self, r: usize, b: usize) -> (f32, f32) {
        // SAFETY: as the caller promises.
        unsafe { (*self.0[r].2.get_unchecked(2 * b), *self.0[r].2.get_unchecked(2 * b + 1)) }
    }

    #[inline(always)]
    fn prefetch(&self, r: usize, b: usize) {
        prefetch_later(self.0[r].0, R, b * 16);
        prefetch_later(self.0[r].2, R, b * 8);
        if FIVE {
            prefetch_later(self.0[r].1, R, b * 4);
        }
    }

    /// The block's 32 unsigned values ([`unpack`]) against each token's bytes.
    #[inline(always)]
    unsafe fn sums<D: Dot4>(&self, r: usize, b: usize, x: &[ActivationRow; T]) -> [__m256i; T] {
        // SAFETY: as the caller promises.
        unsafe {
            let wv = unpack::<FIVE>(&self.0[r], b);
            x.map(|(q, _, _)| D::dot4(_mm256_setzero_si256(), wv, _mm256_loadu_si256(q.as_ptr().add(b * BLOCK) as *const __m256i)))
        }
    }
}

/// Block `b` of a row of nibble pairs as 32 unsigned bytes, value `i` in byte `i` (the low
/// nibbles first, matching the activations' order): the 16 bytes broadcast to both halves,
/// the high half shifted down 4 bits, both masked to 4 bits; with `FIVE`, byte `j` gains 16
/// where bit `j` of the block's mask is set (the mask's byte `j / 8` copied to byte `j`, bit
/// `j % 8` picked and compared).
///
/// # Safety
/// The CPU has AVX2; the row holds block `b` (and, with `FIVE`, its fifth bits).
#[inline(always)]
pub(super) unsafe fn unpack<const FIVE: bool>(row: &NibbleRow, b: usize) -> __m256i {
    // SAFETY: as the caller promises.
    unsafe {
        let packed = _mm256_broadcastsi128_si256(_mm_loadu_si128(row.0.as_ptr().add(b * 16) as *const __m128i));
        let wv = _mm256_and_si256(_mm256_srlv_epi64(packed, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0F));
        if !FIVE {
            return wv;
        }
        let mask = _mm256_set1_epi32(*row.1.get_unchecked(b) as i32);
        let byte_of = _mm256_setr_epi64x(0, 0x0101_0101_0101_0101, 0x0202_0202_0202_0202, 0x0303_0303_0303_0303);
        let bit_of = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let picked = _mm256_and_si256(_mm256_shuffle_epi8(mask, byte_of), bit_of);
        _mm256_or_si256(wv, _mm256_and_si256(_mm256_cmpeq_epi8(picked, bit_of), _mm256_set1_epi8(16)))
    }
}

/// Q4_1 weight rows `(nibble pairs, fifth bits, (scale, offset) pairs)`, 4-bit (no fifth
/// bits) or 5-bit (every row's), against activation rows: `out[t][r] = sum_b (d_w[b] d_x[b]
/// sum_i q_w[b, i] q_x[32 b + i] + m_w[b] s_x[b])`, the byte products summed by `D`.
///
/// # Safety
/// The CPU has AVX2, FMA and what `D` uses.
#[inline(always)]
unsafe fn q4_1_by<D: Dot4, const R: usize, const T: usize>(w: [NibbleRow; R], x: [ActivationRow; T]) -> [[f32; R]; T] {
    let (blocks, five) = super::q4_1_rows::check_blocks(&w, &x);
    // SAFETY: the CPU has the instructions (the caller's promise); every row holds `blocks`
    // blocks of nibbles, scales and, where `five`, fifth bits (checked).
    unsafe {
        if five {
            by_fours::<R, T, _, D>(&Q4_1Avx2::<R, true>(w), blocks, &x)
        } else {
            by_fours::<R, T, _, D>(&Q4_1Avx2::<R, false>(w), blocks, &x)
        }
    }
}

/// The entry points: [`q8_0_by`] and [`q4_1_by`] compiled for `features` with `D`'s products.
macro_rules! entry_points {
    ($q8_0:ident, $q4_1:ident, $features:literal, $dot:ty, $what:literal) => {
        #[doc = concat!("Q8_0 weight rows (with halves' scales, Q6_K's, or none) against activation rows, ", $what, ".\n\n# Safety\nThe CPU has ", $features, ".")]
        #[target_feature(enable = $features)]
        #[inline]
        pub unsafe fn $q8_0<const R: usize, const T: usize>(w: [ByteRow; R], x: [ActivationRow; T]) -> [[f32; R]; T] {
            // SAFETY: the CPU has the features (the caller's promise).
            unsafe { q8_0_by::<$dot, R, T>(w, x) }
        }

        #[doc = concat!("Q4_1 weight rows (4- or 5-bit) against activation rows, ", $what, ".\n\n# Safety\nThe CPU has ", $features, ".")]
        #[target_feature(enable = $features)]
        #[inline]
        pub unsafe fn $q4_1<const R: usize, const T: usize>(w: [NibbleRow; R], x: [ActivationRow; T]) -> [[f32; R]; T] {
            // SAFETY: the CPU has the features (the caller's promise).
            unsafe { q4_1_by::<$dot, R, T>(w, x) }
        }
    };
}

entry_points!(q8_0, q4_1, "avx2,fma", Pairs, "on AVX2 ([`available`])");
entry_points!(
    q8_0_vnni,
    q4_1_vnni,
    "avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni",
    Vnni,
    "on AVX-512 VNNI's `vpdpbusd` (`x86_prefill::vnni_available`): the same bits"
);

/// A float weight type's eight values widened exactly to f32.
pub trait WidenAvx2: Copy {
    /// The eight values at `p`, as f32.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; `p` points at eight readable values.
    unsafe fn widen8(p: *const Self) -> __m256;
}

impl WidenAvx2 for f32 {
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn widen8(p: *const f32) -> __m256 {
        // SAFETY: eight values at p (the caller's promise).
        unsafe { _mm256_loadu_ps(p) }
    }
}

impl WidenAvx2 for half::f16 {
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn widen8(p: *const half::f16) -> __m256 {
        // SAFETY: eight 2-byte values at p (the caller's promise).
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }
}

impl WidenAvx2 for half::bf16 {
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn widen8(p: *const half::bf16) -> __m256 {
        // SAFETY: eight 2-byte values at p (the caller's promise); a bf16 is an f32's top half.
        unsafe { _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast())))) }
    }
}

/// `out[t][r] = w[r] . x[t]` for float weights, eight columns at a time, each weight widened
/// once for all `T` tokens; at each cache line of a row, the same line `R` rows on (the next
/// group's, as [`Avx2Rows::prefetch`] asks for) is asked for.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; every row of `w` and `x` holds the same number of values, a
/// multiple of 8.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn float<E: WidenAvx2, const R: usize, const T: usize>(w: [&[E]; R], x: [&[f32]; T]) -> [[f32; R]; T] {
    let cols = x.first().map_or(0, |x| x.len());
    let mut acc = [[_mm256_setzero_ps(); R]; T];
    let line = (64 / std::mem::size_of::<E>()).max(8);
    for c in (0..cols).step_by(8) {
        if c % line == 0 {
            w.iter().for_each(|w| prefetch_later(w, R, c * std::mem::size_of::<E>()));
        }
        // SAFETY: c + 8 <= cols in every row (the caller's promise).
        unsafe {
            let xs = x.map(|x| _mm256_loadu_ps(x.as_ptr().add(c)));
            for (r, w) in w.iter().enumerate() {
                let wv = E::widen8(w.as_ptr().add(c));
                for (a, xv) in acc.iter_mut().zip(&xs) {
                    a[r] = _mm256_fmadd_ps(wv, *xv, a[r]);
                }
            }
        }
    }
    acc.map(|a| a.map(|v| horizontal_sum(v)))
}

/// The sum of a vector's eight lanes.
#[target_feature(enable = "avx2,fma")]
fn horizontal_sum(v: __m256) -> f32 {
    let quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
    _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps(pair, pair, 1)))
}

#[cfg(test)]
mod tests {
    //! Each kernel against the portable loops on pseudo-random blocks: every row and token
    //! count the matrix product uses, block counts that are not powers of two, the extreme
    //! integers. Tolerance: 1e-5 of the sum of |products| (only the f32 summation order
    //! differs; the integer dot products are exact).
    use super::super::q4_1_rows::NibbleRow;
    use super::super::q8_0_rows::ByteRow;
    use super::super::{q4_1_rows, q8_0_rows};
    use super::*;

    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u32 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (self.0 >> 33) as u32
        }
        fn int(&mut self, lo: i32, hi: i32) -> i32 {
            lo + (self.next() % (hi - lo + 1) as u32) as i32
        }
        fn float(&mut self) -> f32 {
            self.next() as f32 / (1u64 << 31) as f32 - 0.5
        }
    }

    /// `T` activation rows of `blocks` blocks: integers in [-127, 127] (the ends included),
    /// scales and scaled sums.
    fn activations(rng: &mut Lcg, t: usize, blocks: usize) -> Vec<(Vec<i8>, Vec<f32>, Vec<f32>)> {
        (0..t)
            .map(|_| {
                let q: Vec<i8> = (0..blocks * BLOCK).map(|i| if i % 37 == 0 { -127 } else { rng.int(-127, 127) as i8 }).collect();
                let d: Vec<f32> = (0..blocks).map(|_| rng.float().abs() + 0.01).collect();
                let s: Vec<f32> =
                    (0..blocks).map(|b| d[b] * q[b * BLOCK..(b + 1) * BLOCK].iter().map(|&v| f32::from(v)).sum::<f32>()).collect();
                (q, d, s)
            })
            .collect()
    }

    /// Tolerance: 1e-5 of the bound (summation order); the VNNI loops give the AVX2 loops' bits.
    fn close(got: f32, want: f32, scale: f32) -> bool {
        (got - want).abs() <= 1e-5 * scale.max(1.0)
    }

    fn check<const R: usize, const T: usize>(rng: &mut Lcg, blocks: usize) {
        let xs = activations(rng, T, blocks);
        let x: [ActivationRow; T] = std::array::from_fn(|t| (&xs[t].0[..], &xs[t].1[..], &xs[t].2[..]));
        let bound = |ws: &[f32]| ws.iter().map(|w| w.abs()).sum::<f32>() * 127.0 * 128.0 * BLOCK as f32;

        let q8: Vec<(Vec<i8>, Vec<f32>)> = (0..R)
            .map(|_| {
                (
                    (0..blocks * BLOCK).map(|i| if i % 41 == 0 { -128 } else { rng.int(-128, 127) as i8 }).collect(),
                    (0..blocks).map(|_| rng.float()).collect(),
                )
            })
            .collect();
        let w: [ByteRow; R] = std::array::from_fn(|r| (&q8[r].0[..], &[][..], &q8[r].1[..]));
        let bounds: [f32; R] = std::array::from_fn(|r| bound(&q8[r].1));
        let want = q8_0_rows::portable_dot(w, x);
        agree("Q8_0", blocks, unsafe { q8_0(w, x) }, want, bounds);
        if super::super::x86_prefill::vnni_available() {
            agree("Q8_0 (VNNI)", blocks, unsafe { q8_0_vnni(w, x) }, want, bounds);
        }

        // Q6_K's ranges: integers in [-32, 31], halves' scales in [-128, 127], the ends included.
        let q6: Vec<(Vec<i8>, Vec<i8>, Vec<f32>)> = (0..R)
            .map(|_| {
                (
                    (0..blocks * BLOCK).map(|i| if i % 23 == 0 { -32 } else { rng.int(-32, 31) as i8 }).collect(),
                    (0..blocks * 2).map(|h| if h % 7 == 0 { -128 } else { rng.int(-128, 127) as i8 }).collect(),
                    (0..blocks).map(|_| rng.float()).collect(),
                )
            })
            .collect();
        let w: [ByteRow; R] = std::array::from_fn(|r| (&q6[r].0[..], &q6[r].1[..], &q6[r].2[..]));
        let bounds: [f32; R] = std::array::from_fn(|r| bound(&q6[r].2) * 128.0);
        let want = q8_0_rows::portable_dot(w, x);
        agree("Q6_K", blocks, unsafe { q8_0(w, x) }, want, bounds);
        if super::super::x86_prefill::vnni_available() {
            agree("Q6_K (VNNI)", blocks, unsafe { q8_0_vnni(w, x) }, want, bounds);
        }

        let q4: Vec<(Vec<u8>, Vec<u32>, Vec<f32>)> = (0..R)
            .map(|_| {
                (
                    (0..blocks * 16).map(|i| if i % 29 == 0 { 0xFF } else { rng.next() as u8 }).collect(),
                    (0..blocks).map(|b| if b % 5 == 0 { u32::MAX } else { rng.next() ^ (rng.next() << 1) }).collect(),
                    (0..blocks * 2).map(|_| rng.float()).collect(),
                )
            })
            .collect();
        let bounds: [f32; R] = std::array::from_fn(|r| bound(&q4[r].2));
        let w: [NibbleRow; R] = std::array::from_fn(|r| (&q4[r].0[..], &[][..], &q4[r].2[..]));
        let want = q4_1_rows::portable_dot(w, x);
        agree("Q4_1", blocks, unsafe { q4_1(w, x) }, want, bounds);
        if super::super::x86_prefill::vnni_available() {
            agree("Q4_1 (VNNI)", blocks, unsafe { q4_1_vnni(w, x) }, want, bounds);
        }
        let w: [NibbleRow; R] = std::array::from_fn(|r| (&q4[r].0[..], &q4[r].1[..], &q4[r].2[..]));
        let want = q4_1_rows::portable_dot(w, x);
        agree("5-bit", blocks, unsafe { q4_1(w, x) }, want, bounds);
        if super::super::x86_prefill::vnni_available() {
            agree("5-bit (VNNI)", blocks, unsafe { q4_1_vnni(w, x) }, want, bounds);
        }
    }

    /// Every output of a kernel within the tolerance of the portable loops' (`bounds`: each
    /// row's bound on the sum of |products|).
    fn agree<const R: usize, const T: usize>(format: &str, blocks: usize, got: [[f32; R]; T], want: [[f32; R]; T], bounds: [f32; R]) {
        for t in 0..T {
            for r in 0..R {
                assert!(
                    close(got[t][r], want[t][r], bounds[r]),
                    "{format} {R}x{T}, {blocks} blocks, [{t}][{r}]: {} vs {}",
                    got[t][r],
                    want[t][r]
                );
            }
        }
    }

    #[test]
    fn avx2_kernels_match_the_portable_loops() {
        if !available() {
            // The kernels never run on this CPU (the portable loops do), so there is nothing
            // of theirs to check here.
            eprintln!("this x86-64 CPU lacks AVX2 or FMA: the AVX2 kernels do not run on it");
            return;
        }
        let mut rng = Lcg(0x5eed);
        for blocks in [1, 3, 7, 18, 49] {
            check::<1, 1>(&mut rng, blocks);
            check::<4, 1>(&mut rng, blocks);
            check::<1, 4>(&mut rng, blocks);
            check::<3, 2>(&mut rng, blocks);
        }
    }
}

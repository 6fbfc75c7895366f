//! A prefill's block dot products on x86-64: weight rows against eight tokens at once, read
//! from [`TokenOctets`](super::token_octets::TokenOctets), where each 32-byte vector holds one
//! 4-column chunk of a block for the eight tokens. A weight row's chunk, broadcast to every
//! lane, is multiplied with it by one dot of four byte products per lane (`vpdpbusd` with AVX-512
//! VNNI, `vpmaddubsw` and `vpmaddwd` with AVX2: the same integers), so a block's sums arrive a
//! token a lane, with none of the horizontal additions that the one-token loops
//! ([`super::avx2_dot`]) need, and the weights are unpacked once for eight tokens.
//!
//! Same bits as those loops, so a token gives the same logits alone (a decode step) as among
//! others (a prefill): each output keeps the eight f32 accumulators [`super::avx2_dot`]'s
//! vector holds for it (lane `j` of a half `h` sums, per block `b` with `b % 4 = j`, its half's
//! integer sum times `d_w d_x`, and for the blocks past the last four, chunk `4 h + j`'s),
//! as a vector of eight tokens each, with the same operations in the same order, the offsets'
//! products of those last blocks apart, and the same final additions.

use std::arch::x86_64::*;

use super::avx2_dot::unpack;
use super::dot_kernel::DotKernel;
use super::q4_1_rows::NibbleRow;
use super::q8_0_rows::ByteRow;
use super::token_octets::{OctetGroup, GROUP_BLOCK_BYTES, OCTET};

/// Whether this CPU runs the AVX-512 VNNI loops (besides the AVX2 ones they sit beside).
pub fn vnni_available() -> bool {
    super::avx2_dot::available()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}

/// Four products of unsigned weight bytes and signed activation bytes summed into each 32-bit
/// lane, added to `acc`.
pub trait Dot4 {
    /// # Safety
    /// The CPU has the instructions the implementation uses.
    unsafe fn dot4(acc: __m256i, w: __m256i, x: __m256i) -> __m256i;
}

/// AVX2: `vpmaddubsw` (pairs to 16 bits, which no pair can saturate: see [`super::avx2_dot`])
/// then `vpmaddwd` with ones.
struct Pairs;

impl Dot4 for Pairs {
    #[inline(always)]
    unsafe fn dot4(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
        // SAFETY: the CPU has AVX2 (the caller's promise).
        unsafe { _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1))) }
    }
}

/// AVX-512 VNNI on 256-bit vectors: `vpdpbusd`, one instruction.
struct Vnni;

impl Dot4 for Vnni {
    #[inline(always)]
    unsafe fn dot4(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
        // SAFETY: the CPU has AVX-512 VNNI and VL (the caller's promise).
        unsafe { _mm256_dpbusd_epi32(acc, w, x) }
    }
}

/// Rows of one weight format, which [`dot`] runs on either kernel.
pub trait OctetFormat<const R: usize> {
    /// These rows against the eight tokens of `x` on `D`'s products.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA, and whatever `D` uses.
    unsafe fn run<D: Dot4>(self, x: OctetGroup) -> [[f32; OCTET]; R];
}

/// The weight side of one format for [`octet_rows`].
trait OctetRows {
    /// Whether blocks have offsets `m` (added as `m_w s_x`).
    const OFFSETS: bool;
    /// Row `r`'s block `b`: its 32 weights as bytes, as [`Self::operands`] takes them.
    ///
    /// # Safety
    /// The CPU has AVX2; row `r` holds block `b`.
    unsafe fn block(&self, r: usize, b: usize) -> __m256i;
    /// Chunk `c` (weights `4 c .. 4 c + 4`) of a block from [`Self::block`] broadcast to every
    /// lane, and the tokens' chunk `x`, as the dot's unsigned and signed operands.
    ///
    /// # Safety
    /// The CPU has AVX2.
    unsafe fn operands(w: __m256i, c: usize, x: __m256i) -> (__m256i, __m256i);
    /// Row `r`'s block `b`'s scale and offset.
    ///
    /// # Safety
    /// Row `r` holds block `b`.
    unsafe fn scale(&self, r: usize, b: usize) -> (f32, f32);
    /// Row `r`'s block `b`'s halves' scales, where the rows have them.
    ///
    /// # Safety
    /// Row `r` holds block `b`.
    unsafe fn halves(&self, r: usize, b: usize) -> Option<(i32, i32)>;
}

/// A block's chunk `c` in every lane.
#[inline(always)]
unsafe fn broadcast(w: __m256i, c: usize) -> __m256i {
    // SAFETY: the CPU has AVX2 (the caller's promise).
    unsafe { _mm256_permutevar8x32_epi32(w, _mm256_set1_epi32(c as i32)) }
}

/// `out[r][i] = sum_b (d_w[r][b] d_x[i][b] sum_k q_w q_x + m_w[r][b] s_x[i][b])` for the eight
/// tokens `i` of `x`, over `blocks` blocks, which every row of `w` and `x` holds (the callers
/// assert it); the summation as the module comment says.
///
/// # Safety
/// The CPU has AVX2 and FMA, and whatever `D` uses.
#[inline(always)]
unsafe fn octet_rows<D: Dot4, W: OctetRows, const R: usize>(w: &W, blocks: usize, x: OctetGroup) -> [[f32; OCTET]; R] {
    // SAFETY (the whole body): every block index is below `blocks`, which every row and the
    // group hold; the CPU has the instructions (the caller's promise).
    unsafe {
        let zero = _mm256_setzero_si256();
        let mut acc = [[_mm256_setzero_ps(); 8]; R];
        let mut rest = [_mm256_setzero_ps(); R];
        let whole = blocks - blocks % 4;
        for b in 0..blocks {
            let xq = x.q.as_ptr().add(b * GROUP_BLOCK_BYTES) as *const __m256i;
            let dx = _mm256_loadu_ps(x.d.as_ptr().add(b * OCTET));
            let sx = _mm256_loadu_ps(x.s.as_ptr().add(b * OCTET));
            for r in 0..R {
                let wv = w.block(r, b);
                let (dw, mw) = w.scale(r, b);
                let halves = w.halves(r, b);
                let dot = |c: usize, sum: __m256i| {
                    let (u, s) = W::operands(wv, c, _mm256_loadu_si256(xq.add(c)));
                    D::dot4(sum, u, s)
                };
                let times = |sum: __m256i, half: usize| match halves {
                    Some((lo, hi)) => _mm256_mullo_epi32(sum, _mm256_set1_epi32(if half == 0 { lo } else { hi })),
                    None => sum,
                };
                let scale = _mm256_mul_ps(_mm256_set1_ps(dw), dx);
                let a = &mut acc[r];
                if b < whole {
                    // The one-token loops' lanes (0, j) and (1, j): each half's sum.
                    let j = b % 4;
                    let lo = times(dot(3, dot(2, dot(1, dot(0, zero)))), 0);
                    let hi = times(dot(7, dot(6, dot(5, dot(4, zero)))), 1);
                    let low = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo), scale, a[j]);
                    // Their offsets go into the low half only (zero in the high one, an
                    // addition that leaves every value as it is).
                    a[j] = if W::OFFSETS { _mm256_fmadd_ps(_mm256_set1_ps(mw), sx, low) } else { low };
                    a[4 + j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi), scale, a[4 + j]);
                } else {
                    // Past the last four blocks, chunk by chunk into lane c, and the offsets'
                    // products apart.
                    for (c, lane) in a.iter_mut().enumerate() {
                        let sum = times(dot(c, zero), c / 4);
                        *lane = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), scale, *lane);
                    }
                    rest[r] = _mm256_add_ps(rest[r], _mm256_mul_ps(_mm256_set1_ps(mw), sx));
                }
            }
        }
        std::array::from_fn(|r| {
            let a = &acc[r];
            let even = _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6]));
            let odd = _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7]));
            let mut out = [0f32; OCTET];
            _mm256_storeu_ps(out.as_mut_ptr(), _mm256_add_ps(_mm256_add_ps(even, odd), rest[r]));
            out
        })
    }
}

/// The blocks of a group, asserting that it holds whole blocks of eight tokens.
fn group_blocks(x: &OctetGroup) -> usize {
    let blocks = x.d.len() / OCTET;
    assert!(x.d.len() == blocks * OCTET && x.s.len() == x.d.len() && x.q.len() == blocks * GROUP_BLOCK_BYTES);
    blocks
}

/// Q4_1 rows `(nibble pairs, fifth bits, (scale, offset) pairs)`, the fifth bits read only
/// where `FIVE`.
struct Q4_1Octets<'a, const R: usize, const FIVE: bool>([NibbleRow<'a>; R]);

impl<const R: usize, const FIVE: bool> OctetRows for Q4_1Octets<'_, R, FIVE> {
    const OFFSETS: bool = true;

    #[inline(always)]
    unsafe fn block(&self, r: usize, b: usize) -> __m256i {
        // SAFETY: as the caller promises.
        unsafe { unpack::<FIVE>(&self.0[r], b) }
    }

    #[inline(always)]
    unsafe fn operands(w: __m256i, c: usize, x: __m256i) -> (__m256i, __m256i) {
        // SAFETY: as the caller promises.
        (unsafe { broadcast(w, c) }, x)
    }

    #[inline(always)]
    unsafe fn scale(&self, r: usize, b: usize) -> (f32, f32) {
        // SAFETY: as the caller promises.
        unsafe { (*self.0[r].2.get_unchecked(2 * b), *self.0[r].2.get_unchecked(2 * b + 1)) }
    }

    #[inline(always)]
    unsafe fn halves(&self, _: usize, _: usize) -> Option<(i32, i32)> {
        None
    }
}

impl<const R: usize> OctetFormat<R> for [NibbleRow<'_>; R] {
    #[inline(always)]
    unsafe fn run<D: Dot4>(self, x: OctetGroup) -> [[f32; OCTET]; R] {
        let blocks = group_blocks(&x);
        let five = self.first().is_some_and(|(_, high, _)| !high.is_empty());
        assert!(self
            .iter()
            .all(|(q, high, dm)| q.len() * 2 == blocks * 32 && high.len() == if five { blocks } else { 0 } && dm.len() == blocks * 2));
        // SAFETY: every row holds `blocks` blocks (checked); the CPU has the instructions.
        unsafe {
            if five {
                octet_rows::<D, _, R>(&Q4_1Octets::<R, true>(self), blocks, x)
            } else {
                octet_rows::<D, _, R>(&Q4_1Octets::<R, false>(self), blocks, x)
            }
        }
    }
}

/// Q8_0 rows `(integers, halves' scales, scales)`, the halves' scales read only where
/// `HALVES`.
struct Q8_0Octets<'a, const R: usize, const HALVES: bool>([ByteRow<'a>; R]);

impl<const R: usize, const HALVES: bool> OctetRows for Q8_0Octets<'_, R, HALVES> {
    const OFFSETS: bool = false;

    #[inline(always)]
    unsafe fn block(&self, r: usize, b: usize) -> __m256i {
        // SAFETY: as the caller promises.
        unsafe { _mm256_loadu_si256(self.0[r].0.as_ptr().add(b * 32) as *const __m256i) }
    }

    /// The weights' signs move onto the tokens' bytes, as in [`super::avx2_dot`].
    #[inline(always)]
    unsafe fn operands(w: __m256i, c: usize, x: __m256i) -> (__m256i, __m256i) {
        // SAFETY: as the caller promises.
        unsafe {
            let w = broadcast(w, c);
            (_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w))
        }
    }

    #[inline(always)]
    unsafe fn scale(&self, r: usize, b: usize) -> (f32, f32) {
        // SAFETY: as the caller promises.
        (unsafe { *self.0[r].2.get_unchecked(b) }, 0.0)
    }

    #[inline(always)]
    unsafe fn halves(&self, r: usize, b: usize) -> Option<(i32, i32)> {
        let sub = self.0[r].1;
        // SAFETY: as the caller promises (halves' scales are two a block).
        HALVES.then(|| unsafe { (i32::from(*sub.get_unchecked(2 * b)), i32::from(*sub.get_unchecked(2 * b + 1))) })
    }
}

impl<const R: usize> OctetFormat<R> for [ByteRow<'_>; R] {
    #[inline(always)]
    unsafe fn run<D: Dot4>(self, x: OctetGroup) -> [[f32; OCTET]; R] {
        let blocks = group_blocks(&x);
        let halves = self.first().is_some_and(|(_, sub, _)| !sub.is_empty());
        assert!(self
            .iter()
            .all(|(q, sub, d)| q.len() == blocks * 32 && sub.len() == if halves { 2 * blocks } else { 0 } && d.len() == blocks));
        // SAFETY: every row holds `blocks` blocks (checked); the CPU has the instructions.
        unsafe {
            if halves {
                octet_rows::<D, _, R>(&Q8_0Octets::<R, true>(self), blocks, x)
            } else {
                octet_rows::<D, _, R>(&Q8_0Octets::<R, false>(self), blocks, x)
            }
        }
    }
}

/// Weight rows of one format against the eight tokens of `x` on `kernel`'s loops: `out[r][i]
/// = sum_b (d_w[b] d_x[b] sum_k q_w q_x + m_w[b] s_x[b])` (each half's sum times its scale
/// where Q8_0 rows have them, no offsets for them); `None` for a kernel without them here.
pub fn dot<W: OctetFormat<R>, const R: usize>(kernel: DotKernel, w: W, x: OctetGroup) -> Option<[[f32; OCTET]; R]> {
    match kernel {
        // SAFETY: the CPU has AVX-512 VNNI, AVX2 and FMA (checked in the guard).
        DotKernel::Avx512Vnni if vnni_available() => Some(unsafe { on_vnni(w, x) }),
        // SAFETY: the CPU has AVX2 and FMA (checked in the guard).
        DotKernel::Avx2 if super::avx2_dot::available() => Some(unsafe { on_avx2(w, x) }),
        _ => None,
    }
}

/// # Safety
/// The CPU has AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
unsafe fn on_avx2<W: OctetFormat<R>, const R: usize>(w: W, x: OctetGroup) -> [[f32; OCTET]; R] {
    // SAFETY: the CPU has AVX2 and FMA (the caller's promise).
    unsafe { w.run::<Pairs>(x) }
}

/// # Safety
/// The CPU has AVX-512 VNNI, AVX2 and FMA.
#[target_feature(enable = "avx2,fma,avx512f,avx512vl,avx512vnni")]
unsafe fn on_vnni<W: OctetFormat<R>, const R: usize>(w: W, x: OctetGroup) -> [[f32; OCTET]; R] {
    // SAFETY: the CPU has them (the caller's promise).
    unsafe { w.run::<Vnni>(x) }
}

//! A prefill's block dot products on x86-64: weight rows against a group of sixteen tokens at
//! once, read from [`TokenGroups`](super::token_groups::TokenGroups), where 64 bytes hold one
//! 4-column chunk of a block for the sixteen tokens. A weight row's chunk, broadcast to every
//! lane, is multiplied with them by one dot of four byte products per lane: `vpdpbusd` on one
//! 512-bit vector with AVX-512 VNNI, `vpmaddubsw` and `vpmaddwd` on two 256-bit vectors of
//! eight tokens with AVX2 (the same integers). So a block's sums arrive a token a lane, with
//! none of the horizontal additions that the one-token loops ([`super::avx2_dot`]) need, the
//! weights are unpacked once for sixteen tokens, and a chunk's broadcast (a shuffle, which
//! bounded the loops at eight tokens a vector) serves sixteen.
//!
//! Same bits as those loops, so a token gives the same logits alone (a decode step) as among
//! others (a prefill): each output keeps the eight f32 accumulators [`super::avx2_dot`]'s
//! vector holds for it (lane `j` of a half `h` sums, per block `b` with `b % 4 = j`, its half's
//! integer sum times `d_w d_x`, and for the blocks past the last four, chunk `4 h + j`'s),
//! as a vector of the group's tokens each, with the same operations in the same order, the
//! offsets' products of those last blocks apart, and the same final additions.

use std::arch::x86_64::*;
use std::ops::Range;

use super::avx2_dot::{unpack, Dot4, Pairs, Vnni};
use super::dot_kernel::DotKernel;
use super::q4_1_rows::NibbleRow;
use super::q8_0_rows::ByteRow;
use super::token_groups::{TokenGroup, GROUP, GROUP_BLOCK_BYTES, GROUP_CHUNK_BYTES};

/// Whether this CPU runs the AVX-512 loops (besides the AVX2 ones they sit beside).
pub fn vnni_available() -> bool {
    super::avx2_dot::available()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}

/// A group's tokens in 32-bit lanes, a token each, and the operations the loops need on them:
/// all sixteen in one 512-bit vector ([`Zmm`]) or two 256-bit ones ([`YmmPair`]), or the first
/// eight in one 256-bit vector ([`Ymm`], for a group of at most eight tokens).
///
/// # Safety (every method)
/// The CPU has the instructions the implementation uses; pointers hold what they read.
pub trait Lanes {
    /// Integers (or four bytes a lane).
    type I: Copy;
    /// Floats.
    type F: Copy;
    /// What [`Self::splat`] needs, made once before the loops ([`Self::splats`]).
    type Splats: Copy;
    unsafe fn splats() -> Self::Splats;
    /// Dword `c` of `w` (a block's 32 weight bytes) in every lane.
    unsafe fn splat(w: __m256i, c: usize, splats: &Self::Splats) -> Self::I;
    /// The tokens' 4 bytes at `p` (a chunk: 64 bytes).
    unsafe fn load(p: *const i8) -> Self::I;
    /// The tokens' floats at `p` (sixteen).
    unsafe fn load_f(p: *const f32) -> Self::F;
    unsafe fn zero() -> Self::I;
    unsafe fn zero_f() -> Self::F;
    unsafe fn splat_f(v: f32) -> Self::F;
    /// `acc` plus, per lane, the four products of `u`'s unsigned bytes with `s`'s signed ones.
    unsafe fn dot4(acc: Self::I, u: Self::I, s: Self::I) -> Self::I;
    /// `a * k` per lane (32 bits).
    unsafe fn mul_int(a: Self::I, k: i32) -> Self::I;
    /// Signed weight bytes `w` and token bytes `x` as [`Self::dot4`]'s operands: `|w|`, and `x`
    /// negated where `w` is negative (where `w` is zero, `|w|` makes the product zero).
    unsafe fn signed(w: Self::I, x: Self::I) -> (Self::I, Self::I);
    /// `float(sum) * scale + acc`, fused.
    unsafe fn fmadd_int(sum: Self::I, scale: Self::F, acc: Self::F) -> Self::F;
    unsafe fn fmadd(a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    unsafe fn mul(a: Self::F, b: Self::F) -> Self::F;
    unsafe fn add(a: Self::F, b: Self::F) -> Self::F;
    /// The tokens' floats into `out` (where the vector holds eight, its first eight).
    unsafe fn store(v: Self::F, out: &mut [f32; GROUP]);
}

/// The [`Lanes`] methods of a type whose tokens fit one vector (integers `$i`, floats `$f`), from
/// that width's intrinsics; `own` holds the methods that differ beyond the intrinsics' names
/// (`splats`, `splat`, `load`, `dot4`, `signed`).
macro_rules! one_vector_lanes {
    (impl [$($generics:tt)*] for $ty:ty { $($own:tt)* }
     $i:ty, $f:ty, $zero_i:ident, $zero_f:ident, $set1_f:ident, $set1_i:ident, $mullo:ident, $cvt:ident, $fmadd:ident, $mul:ident,
     $add:ident, $load_f:ident, $store:ident) => {
        impl<$($generics)*> Lanes for $ty {
            type I = $i;
            type F = $f;
            $($own)*

            #[inline(always)]
            unsafe fn load_f(p: *const f32) -> $f {
                // SAFETY: the caller's promise.
                unsafe { $load_f(p) }
            }
            #[inline(always)]
            unsafe fn zero() -> $i {
                $zero_i()
            }
            #[inline(always)]
            unsafe fn zero_f() -> $f {
                $zero_f()
            }
            #[inline(always)]
            unsafe fn splat_f(v: f32) -> $f {
                $set1_f(v)
            }
            #[inline(always)]
            unsafe fn mul_int(a: $i, k: i32) -> $i {
                $mullo(a, $set1_i(k))
            }
            #[inline(always)]
            unsafe fn fmadd_int(sum: $i, scale: $f, acc: $f) -> $f {
                $fmadd($cvt(sum), scale, acc)
            }
            #[inline(always)]
            unsafe fn fmadd(a: $f, b: $f, c: $f) -> $f {
                $fmadd(a, b, c)
            }
            #[inline(always)]
            unsafe fn mul(a: $f, b: $f) -> $f {
                $mul(a, b)
            }
            #[inline(always)]
            unsafe fn add(a: $f, b: $f) -> $f {
                $add(a, b)
            }
            #[inline(always)]
            unsafe fn store(v: $f, out: &mut [f32; GROUP]) {
                // SAFETY: `out` holds sixteen floats (the vector as many or fewer).
                unsafe { $store(out.as_mut_ptr(), v) }
            }
        }
    };
}

/// AVX-512 (F, BW, VNNI): one 512-bit vector, `vpdpbusd`; a chunk's broadcast one `vpermd` by
/// an index held in a register.
struct Zmm;

one_vector_lanes! {
    impl [] for Zmm {
        type Splats = [__m512i; 8];

        #[inline(always)]
        unsafe fn splats() -> [__m512i; 8] {
            // Opaque to the compiler, which would otherwise turn each constant-index `vpermd`
            // into two shuffles (prefilling 257 tokens, 7% slower at eight tokens a vector).
            std::hint::black_box(std::array::from_fn(|c| _mm512_set1_epi32(c as i32)))
        }
        #[inline(always)]
        unsafe fn splat(w: __m256i, c: usize, splats: &[__m512i; 8]) -> __m512i {
            // SAFETY: the caller's promise; the indices read the low 256 bits only.
            unsafe { _mm512_permutexvar_epi32(splats[c], _mm512_castsi256_si512(w)) }
        }
        #[inline(always)]
        unsafe fn load(p: *const i8) -> __m512i {
            // SAFETY: the caller's promise.
            unsafe { _mm512_loadu_si512(p as *const __m512i) }
        }
        #[inline(always)]
        unsafe fn dot4(acc: __m512i, u: __m512i, s: __m512i) -> __m512i {
            // SAFETY: the caller's promise.
            unsafe { _mm512_dpbusd_epi32(acc, u, s) }
        }
        #[inline(always)]
        unsafe fn signed(w: __m512i, x: __m512i) -> (__m512i, __m512i) {
            // SAFETY: the caller's promise.
            unsafe { (_mm512_abs_epi8(w), _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x)) }
        }
    }
    __m512i, __m512, _mm512_setzero_si512, _mm512_setzero_ps, _mm512_set1_ps, _mm512_set1_epi32, _mm512_mullo_epi32, _mm512_cvtepi32_ps,
    _mm512_fmadd_ps, _mm512_mul_ps, _mm512_add_ps, _mm512_loadu_ps, _mm512_storeu_ps
}

/// AVX2 (and FMA): two 256-bit vectors of eight tokens, [`Pairs`]' products; a chunk broadcast
/// once for both.
struct YmmPair;

/// `f` on both halves.
#[inline(always)]
fn pair<T, U>(a: [T; 2], f: impl Fn(T) -> U) -> [U; 2] {
    let [a0, a1] = a;
    [f(a0), f(a1)]
}

/// `f` on both halves of two pairs.
#[inline(always)]
fn pair2<T, U, V>(a: [T; 2], b: [U; 2], f: impl Fn(T, U) -> V) -> [V; 2] {
    let ([a0, a1], [b0, b1]) = (a, b);
    [f(a0, b0), f(a1, b1)]
}

impl Lanes for YmmPair {
    type I = [__m256i; 2];
    type F = [__m256; 2];
    type Splats = ();

    #[inline(always)]
    unsafe fn splats() {}
    #[inline(always)]
    unsafe fn splat(w: __m256i, c: usize, _: &()) -> [__m256i; 2] {
        // SAFETY: the caller's promise.
        let v = unsafe { _mm256_permutevar8x32_epi32(w, _mm256_set1_epi32(c as i32)) };
        [v, v]
    }
    #[inline(always)]
    unsafe fn load(p: *const i8) -> [__m256i; 2] {
        // SAFETY: the caller's promise (64 bytes).
        unsafe { [_mm256_loadu_si256(p as *const __m256i), _mm256_loadu_si256(p.add(32) as *const __m256i)] }
    }
    #[inline(always)]
    unsafe fn load_f(p: *const f32) -> [__m256; 2] {
        // SAFETY: the caller's promise (sixteen floats).
        unsafe { [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))] }
    }
    #[inline(always)]
    unsafe fn zero() -> [__m256i; 2] {
        [_mm256_setzero_si256(); 2]
    }
    #[inline(always)]
    unsafe fn zero_f() -> [__m256; 2] {
        [_mm256_setzero_ps(); 2]
    }
    #[inline(always)]
    unsafe fn splat_f(v: f32) -> [__m256; 2] {
        [_mm256_set1_ps(v); 2]
    }
    #[inline(always)]
    unsafe fn dot4(acc: [__m256i; 2], u: [__m256i; 2], s: [__m256i; 2]) -> [__m256i; 2] {
        let us = pair2(u, s, |u, s| (u, s));
        // SAFETY: the CPU has AVX2 (the caller's promise).
        pair2(acc, us, |a, (u, s)| unsafe { Pairs::dot4(a, u, s) })
    }
    #[inline(always)]
    unsafe fn mul_int(a: [__m256i; 2], k: i32) -> [__m256i; 2] {
        pair(a, |a| _mm256_mullo_epi32(a, _mm256_set1_epi32(k)))
    }
    #[inline(always)]
    unsafe fn signed(w: [__m256i; 2], x: [__m256i; 2]) -> ([__m256i; 2], [__m256i; 2]) {
        (pair(w, |w| _mm256_sign_epi8(w, w)), pair2(x, w, |x, w| _mm256_sign_epi8(x, w)))
    }
    #[inline(always)]
    unsafe fn fmadd_int(sum: [__m256i; 2], scale: [__m256; 2], acc: [__m256; 2]) -> [__m256; 2] {
        let f = pair(sum, |s| _mm256_cvtepi32_ps(s));
        let fs = pair2(f, scale, |f, s| (f, s));
        pair2(fs, acc, |(f, s), a| _mm256_fmadd_ps(f, s, a))
    }
    #[inline(always)]
    unsafe fn fmadd(a: [__m256; 2], b: [__m256; 2], c: [__m256; 2]) -> [__m256; 2] {
        let ab = pair2(a, b, |a, b| (a, b));
        pair2(ab, c, |(a, b), c| _mm256_fmadd_ps(a, b, c))
    }
    #[inline(always)]
    unsafe fn mul(a: [__m256; 2], b: [__m256; 2]) -> [__m256; 2] {
        pair2(a, b, |a, b| _mm256_mul_ps(a, b))
    }
    #[inline(always)]
    unsafe fn add(a: [__m256; 2], b: [__m256; 2]) -> [__m256; 2] {
        pair2(a, b, |a, b| _mm256_add_ps(a, b))
    }
    #[inline(always)]
    unsafe fn store(v: [__m256; 2], out: &mut [f32; GROUP]) {
        // SAFETY: `out` holds sixteen floats.
        unsafe {
            _mm256_storeu_ps(out.as_mut_ptr(), v[0]);
            _mm256_storeu_ps(out.as_mut_ptr().add(8), v[1]);
        }
    }
}

/// The first eight tokens of a group in one 256-bit vector, products by `D`: a group of at
/// most eight tokens (a short prompt's prefill) in half the work of sixteen lanes.
pub struct Ymm<D>(std::marker::PhantomData<D>);

one_vector_lanes! {
    impl [D: Dot4] for Ymm<D> {
        type Splats = ();

        #[inline(always)]
        unsafe fn splats() {}
        #[inline(always)]
        unsafe fn splat(w: __m256i, c: usize, _: &()) -> __m256i {
            _mm256_permutevar8x32_epi32(w, _mm256_set1_epi32(c as i32))
        }
        #[inline(always)]
        unsafe fn load(p: *const i8) -> __m256i {
            // SAFETY: the caller's promise (the chunk's first 32 bytes: tokens 0 .. 8).
            unsafe { _mm256_loadu_si256(p as *const __m256i) }
        }
        #[inline(always)]
        unsafe fn dot4(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
            // SAFETY: the caller's promise.
            unsafe { D::dot4(acc, u, s) }
        }
        #[inline(always)]
        unsafe fn signed(w: __m256i, x: __m256i) -> (__m256i, __m256i) {
            (_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w))
        }
    }
    __m256i, __m256, _mm256_setzero_si256, _mm256_setzero_ps, _mm256_set1_ps, _mm256_set1_epi32, _mm256_mullo_epi32, _mm256_cvtepi32_ps,
    _mm256_fmadd_ps, _mm256_mul_ps, _mm256_add_ps, _mm256_loadu_ps, _mm256_storeu_ps
}

/// `R` rows of one weight format, which [`dot`] runs on either kernel.
pub trait GroupFormat<const R: usize> {
    /// These rows against the sixteen tokens of `x` on `L`'s vectors, into `out`.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA, and whatever `L` uses.
    unsafe fn run<L: Lanes>(self, x: TokenGroup, out: &mut [[f32; GROUP]; R]);
}

/// The weight side of one format for [`group_rows`].
trait GroupRows {
    /// Whether blocks have offsets `m` (added as `m_w s_x`).
    const OFFSETS: bool;
    /// Row `r`'s block `b`: its 32 weights as bytes, as [`Self::operands`] takes them.
    ///
    /// # Safety
    /// The CPU has AVX2; row `r` holds block `b`.
    unsafe fn block(&self, r: usize, b: usize) -> __m256i;
    /// A chunk of a block from [`Self::block`] in every lane, and the tokens' chunk `x`, as
    /// the dot's unsigned and signed operands.
    ///
    /// # Safety
    /// The CPU has what `L` uses.
    unsafe fn operands<L: Lanes>(w: L::I, x: L::I) -> (L::I, L::I);
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

/// `out[r][i] = sum_b (d_w[r][b] d_x[i][b] sum_k q_w q_x + m_w[r][b] s_x[i][b])` for the
/// tokens `i` of `x` (sixteen, or with [`Ymm`] the first eight), over `blocks` blocks, which every row of `w` and `x` holds (the
/// callers assert it); the summation as the module comment says.
///
/// # Safety
/// The CPU has AVX2 and FMA, and whatever `L` uses.
#[inline(always)]
unsafe fn group_rows<L: Lanes, W: GroupRows, const R: usize>(w: &W, blocks: usize, x: TokenGroup, out: &mut [[f32; GROUP]; R]) {
    // SAFETY (the whole body): every block index is below `blocks`, which every row and the
    // group hold; the CPU has the instructions (the caller's promise).
    unsafe {
        let splats = L::splats();
        let zero = L::zero();
        let mut acc = [[L::zero_f(); 8]; R];
        let mut rest = [L::zero_f(); R];
        let whole = blocks - blocks % 4;
        for b in 0..blocks {
            let xq = x.q.as_ptr().add(b * GROUP_BLOCK_BYTES);
            let dx = L::load_f(x.d.as_ptr().add(b * GROUP));
            let sx = L::load_f(x.s.as_ptr().add(b * GROUP));
            for r in 0..R {
                let wv = w.block(r, b);
                let (dw, mw) = w.scale(r, b);
                let halves = w.halves(r, b);
                let dot = |c: usize, sum: L::I| {
                    let (u, s) = W::operands::<L>(L::splat(wv, c, &splats), L::load(xq.add(c * GROUP_CHUNK_BYTES)));
                    L::dot4(sum, u, s)
                };
                let times = |sum: L::I, half: usize| match halves {
                    Some((lo, hi)) => L::mul_int(sum, if half == 0 { lo } else { hi }),
                    None => sum,
                };
                let scale = L::mul(L::splat_f(dw), dx);
                let a = &mut acc[r];
                if b < whole {
                    // The one-token loops' lanes (0, j) and (1, j): each half's sum.
                    let j = b % 4;
                    let lo = times(dot(3, dot(2, dot(1, dot(0, zero)))), 0);
                    let hi = times(dot(7, dot(6, dot(5, dot(4, zero)))), 1);
                    let low = L::fmadd_int(lo, scale, a[j]);
                    // Their offsets go into the low half only (zero in the high one, an
                    // addition that leaves every value as it is).
                    a[j] = if W::OFFSETS { L::fmadd(L::splat_f(mw), sx, low) } else { low };
                    a[4 + j] = L::fmadd_int(hi, scale, a[4 + j]);
                } else {
                    // Past the last four blocks, chunk by chunk into lane c, and the offsets'
                    // products apart.
                    for (c, lane) in a.iter_mut().enumerate() {
                        *lane = L::fmadd_int(times(dot(c, zero), c / 4), scale, *lane);
                    }
                    rest[r] = L::add(rest[r], L::mul(L::splat_f(mw), sx));
                }
            }
        }
        for ((a, rest), out) in acc.iter().zip(rest).zip(out) {
            let even = L::add(L::add(a[0], a[4]), L::add(a[2], a[6]));
            let odd = L::add(L::add(a[1], a[5]), L::add(a[3], a[7]));
            L::store(L::add(L::add(even, odd), rest), out);
        }
    }
}

/// The blocks of a group, asserting that it holds whole blocks of sixteen tokens.
fn group_blocks(x: &TokenGroup) -> usize {
    let blocks = x.d.len() / GROUP;
    assert!(x.d.len() == blocks * GROUP && x.s.len() == x.d.len() && x.q.len() == blocks * GROUP_BLOCK_BYTES);
    blocks
}

/// Q4_1 rows `(nibble pairs, fifth bits, (scale, offset) pairs)`, the fifth bits read only
/// where `FIVE`.
struct Q4_1Group<'a, const R: usize, const FIVE: bool>([NibbleRow<'a>; R]);

impl<const R: usize, const FIVE: bool> GroupRows for Q4_1Group<'_, R, FIVE> {
    const OFFSETS: bool = true;

    #[inline(always)]
    unsafe fn block(&self, r: usize, b: usize) -> __m256i {
        // SAFETY: as the caller promises.
        unsafe { unpack::<FIVE>(&self.0[r], b) }
    }

    #[inline(always)]
    unsafe fn operands<L: Lanes>(w: L::I, x: L::I) -> (L::I, L::I) {
        (w, x)
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

impl<const R: usize> GroupFormat<R> for [NibbleRow<'_>; R] {
    #[inline(always)]
    unsafe fn run<L: Lanes>(self, x: TokenGroup, out: &mut [[f32; GROUP]; R]) {
        let blocks = group_blocks(&x);
        let five = self.first().is_some_and(|(_, high, _)| !high.is_empty());
        assert!(self
            .iter()
            .all(|(q, high, dm)| q.len() * 2 == blocks * 32 && high.len() == if five { blocks } else { 0 } && dm.len() == blocks * 2));
        // SAFETY: every row holds `blocks` blocks (checked); the CPU has the instructions.
        unsafe {
            if five {
                group_rows::<L, _, R>(&Q4_1Group::<R, true>(self), blocks, x, out)
            } else {
                group_rows::<L, _, R>(&Q4_1Group::<R, false>(self), blocks, x, out)
            }
        }
    }
}

/// Q8_0 rows `(integers, halves' scales, scales)`, the halves' scales read only where
/// `HALVES`.
struct Q8_0Group<'a, const R: usize, const HALVES: bool>([ByteRow<'a>; R]);

impl<const R: usize, const HALVES: bool> GroupRows for Q8_0Group<'_, R, HALVES> {
    const OFFSETS: bool = false;

    #[inline(always)]
    unsafe fn block(&self, r: usize, b: usize) -> __m256i {
        // SAFETY: as the caller promises.
        unsafe { _mm256_loadu_si256(self.0[r].0.as_ptr().add(b * 32) as *const __m256i) }
    }

    /// The weights' signs move onto the tokens' bytes, as in [`super::avx2_dot`].
    #[inline(always)]
    unsafe fn operands<L: Lanes>(w: L::I, x: L::I) -> (L::I, L::I) {
        // SAFETY: as the caller promises.
        unsafe { L::signed(w, x) }
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

impl<const R: usize> GroupFormat<R> for [ByteRow<'_>; R] {
    #[inline(always)]
    unsafe fn run<L: Lanes>(self, x: TokenGroup, out: &mut [[f32; GROUP]; R]) {
        let blocks = group_blocks(&x);
        let halves = self.first().is_some_and(|(_, sub, _)| !sub.is_empty());
        assert!(self
            .iter()
            .all(|(q, sub, d)| q.len() == blocks * 32 && sub.len() == if halves { 2 * blocks } else { 0 } && d.len() == blocks));
        // SAFETY: every row holds `blocks` blocks (checked); the CPU has the instructions.
        unsafe {
            if halves {
                group_rows::<L, _, R>(&Q8_0Group::<R, true>(self), blocks, x, out)
            } else {
                group_rows::<L, _, R>(&Q8_0Group::<R, false>(self), blocks, x, out)
            }
        }
    }
}

/// Weight rows the loops compute together, sharing the tokens' loads (at eight tokens a
/// vector, prefilling 257 tokens on this project's 2-core EPYC, about 890 tok/s against 800
/// with one row and 830 with four).
const GROUP_ROWS: usize = 2;

/// Weight rows `rows` of one format (`row(r)` is row `r`) against the tokens of `x` on
/// `kernel`'s loops, [`GROUP_ROWS`] at a time, each row's `out[i] = sum_b (d_w[b] d_x[b] sum_k
/// q_w q_x + m_w[b] s_x[b])` (each half's sum times its scale where Q8_0 rows have them, no
/// offsets for them) handed to `write(r, &out)`; false, writing nothing, for a kernel without
/// them here. A group of at most eight tokens runs on one 256-bit vector ([`Ymm`]): prefilling
/// a 5-token prompt on sixteen lanes was about 10% slower than on eight on this project's
/// 2-core EPYC.
pub fn dot<Row: Copy>(
    kernel: DotKernel,
    rows: Range<usize>,
    row: impl Fn(usize) -> Row,
    x: TokenGroup,
    write: impl FnMut(usize, &[f32; GROUP]),
) -> bool
where
    [Row; GROUP_ROWS]: GroupFormat<GROUP_ROWS>,
    [Row; 1]: GroupFormat<1>,
{
    let few = x.tokens <= GROUP / 2;
    match kernel {
        // SAFETY: the CPU has AVX-512 F, BW, VL and VNNI, AVX2 and FMA (checked in the guard).
        DotKernel::Avx512Vnni if vnni_available() => unsafe { on_avx512(rows, row, x, few, write) },
        // SAFETY: the CPU has AVX2 and FMA (checked in the guard).
        DotKernel::Avx2 if super::avx2_dot::available() => unsafe { on_avx2(rows, row, x, few, write) },
        _ => return false,
    }
    true
}

/// [`dot`]'s loop over the rows on `L`'s vectors.
///
/// # Safety
/// The CPU has AVX2 and FMA, and whatever `L` uses.
#[inline(always)]
unsafe fn each_row<L: Lanes, Row: Copy>(
    rows: Range<usize>,
    row: impl Fn(usize) -> Row,
    x: TokenGroup,
    mut write: impl FnMut(usize, &[f32; GROUP]),
) where
    [Row; GROUP_ROWS]: GroupFormat<GROUP_ROWS>,
    [Row; 1]: GroupFormat<1>,
{
    let mut r = rows.start;
    while r < rows.end {
        if r + GROUP_ROWS <= rows.end {
            let mut out = [[0f32; GROUP]; GROUP_ROWS];
            // SAFETY: the caller's promise.
            unsafe { std::array::from_fn(|i| row(r + i)).run::<L>(x, &mut out) };
            out.iter().enumerate().for_each(|(i, out)| write(r + i, out));
            r += GROUP_ROWS;
        } else {
            let mut out = [[0f32; GROUP]; 1];
            // SAFETY: the caller's promise.
            unsafe { [row(r)].run::<L>(x, &mut out) };
            write(r, &out[0]);
            r += 1;
        }
    }
}

/// An entry point compiled for `features` (the CPU has them: its caller's promise, `# Safety`),
/// running [`each_row`] on `few`'s vectors for a group of at most eight tokens, on `many`'s
/// for more.
macro_rules! entry_point {
    ($name:ident, $features:literal, $few:ty, $many:ty) => {
        #[doc = concat!("[`each_row`] with ", $features, ".\n\n# Safety\nThe CPU has ", $features, ".")]
        #[target_feature(enable = $features)]
        unsafe fn $name<Row: Copy>(
            rows: Range<usize>,
            row: impl Fn(usize) -> Row,
            x: TokenGroup,
            few: bool,
            write: impl FnMut(usize, &[f32; GROUP]),
        ) where
            [Row; GROUP_ROWS]: GroupFormat<GROUP_ROWS>,
            [Row; 1]: GroupFormat<1>,
        {
            // SAFETY: the CPU has the features (the caller's promise).
            unsafe {
                if few {
                    each_row::<$few, _>(rows, row, x, write)
                } else {
                    each_row::<$many, _>(rows, row, x, write)
                }
            }
        }
    };
}

entry_point!(on_avx2, "avx2,fma", Ymm<Pairs>, YmmPair);
entry_point!(on_avx512, "avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni", Ymm<Vnni>, Zmm);

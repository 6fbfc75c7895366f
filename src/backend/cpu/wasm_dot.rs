//! The block dot products of [`QuantMatrix`](super::quant_matmul::QuantMatrix) on wasm SIMD.
//!
//! SIMD128 (any browser with wasm SIMD): a block's bytes are widened to 16 bits and summed in
//! pairs by `i32x4.dot_i16x8_s`, 8 products per instruction. Relaxed SIMD (built only into
//! the engines for browsers that validate it): Q4_1's nibbles, which fit the 7-bit operand of
//! `i32x4.relaxed_dot_i8x16_i7x16_add_s` (and so do 5-bit values), meet the activations'
//! signed bytes unwidened, 16 products per instruction with the accumulation folded in, and so
//! do Q8_0 blocks whose integers all lie in -32..=31 (Q5_0's and Q6_K's, repacked), 32 added
//! to each and `32 x` taken off again; where
//! the CPU has FMA, `f32x4.relaxed_madd` fuses the scaling. Relaxed SIMD's results are
//! deterministic here: its one implementation-defined case, a 7-bit operand above 127, cannot
//! occur with these (at most 63), and no pair sum (at most 2 x 63 x 127, the activations'
//! bytes within -127..=127) can saturate 16 bits.
//!
//! Blocks go four at a time through [`by_fours`]: the four blocks' integer sums of a (row,
//! token) pair are folded into one vector (a lane per block) and scaled by four blocks' scales
//! in one multiply-add, and Q4_1's offsets by one more, instead of a scalar product, a splat
//! and a scalar offset per block. The scales are read as vectors, the weights' `(d, m)` pairs
//! split apart by two shuffles. With several tokens (a prefill, the logit lens's rows) Q8_0
//! and relaxed SIMD's Q4_1 take one row at a time, token after token, so fewer vectors are live
//! at once (`WasmRows::ROWS_APART`); each output's sums are folded in the same order either
//! way, so a token gives the same bits alone as among others (tests/cpu_quant_matmul.rs).

use core::arch::wasm32::*;

use super::activations::{ActivationRow, BLOCK};
use super::dot_kernel::tail_blocks;
use super::q4_1_rows::NibbleRow;
use super::q8_0_rows::ByteRow;

/// The sum of a vector's four lanes.
fn lane_sum(a: v128) -> f32 {
    (f32x4_extract_lane::<0>(a) + f32x4_extract_lane::<1>(a)) + (f32x4_extract_lane::<2>(a) + f32x4_extract_lane::<3>(a))
}

/// Block `b`'s 32 signed bytes of `q`, widened to four 8-lane 16-bit vectors.
///
/// # Safety
/// `q` holds block `b`: `q.len() >= 32 (b + 1)`.
unsafe fn widened_block(q: &[i8], b: usize) -> [v128; 4] {
    // SAFETY: the 8-byte loads at 32 b + 0, 8, 16, 24 lie inside block b (the caller's promise).
    unsafe {
        let start = q.as_ptr().add(b * BLOCK);
        [0, 8, 16, 24].map(|o| i16x8_load_extend_i8x8(start.add(o)))
    }
}

/// Four lanes of partial sums of a weight block widened to 16 bits (`wv`) against block `b`
/// of `q`, widened alike: 8 products per `i32x4.dot_i16x8_s`.
///
/// # Safety
/// `q` holds block `b`.
#[inline(always)]
unsafe fn widened_dot(wv: [v128; 4], q: &[i8], b: usize) -> v128 {
    let xs = unsafe { widened_block(q, b) };
    i32x4_add(
        i32x4_add(i32x4_dot_i16x8(wv[0], xs[0]), i32x4_dot_i16x8(wv[1], xs[1])),
        i32x4_add(i32x4_dot_i16x8(wv[2], xs[2]), i32x4_dot_i16x8(wv[3], xs[3])),
    )
}

/// `a * b + c`: fused where `relaxed` (relaxed SIMD, on a CPU with FMA), else a multiply and
/// an add.
#[inline(always)]
fn madd(relaxed: bool, a: v128, b: v128, c: v128) -> v128 {
    #[cfg(target_feature = "relaxed-simd")]
    if relaxed {
        return f32x4_relaxed_madd(a, b, c);
    }
    #[cfg(not(target_feature = "relaxed-simd"))]
    let _ = relaxed;
    f32x4_add(f32x4_mul(a, b), c)
}

/// Four vectors of integer partial sums folded into one: `[sum(a), sum(b), sum(c), sum(d)]`.
#[inline(always)]
fn lane_totals(a: v128, b: v128, c: v128, d: v128) -> v128 {
    // [a0 + a2, b0 + b2, a1 + a3, b1 + b3], and the same of c and d.
    let ab = i32x4_add(i32x4_shuffle::<0, 4, 1, 5>(a, b), i32x4_shuffle::<2, 6, 3, 7>(a, b));
    let cd = i32x4_add(i32x4_shuffle::<0, 4, 1, 5>(c, d), i32x4_shuffle::<2, 6, 3, 7>(c, d));
    i32x4_add(i32x4_shuffle::<0, 1, 4, 5>(ab, cd), i32x4_shuffle::<2, 3, 6, 7>(ab, cd))
}

/// Four floats from `v[i..i + 4]`.
///
/// # Safety
/// `i + 4 <= v.len()`.
#[inline(always)]
unsafe fn load4(v: &[f32], i: usize) -> v128 {
    unsafe { v128_load(v.as_ptr().add(i) as *const v128) }
}

/// A float weight type's four values widened exactly to f32.
pub trait WidenWasm: Copy {
    /// The four values at `p`, as f32.
    ///
    /// # Safety
    /// `p` points at four readable values.
    unsafe fn widen4(p: *const Self) -> v128;
}

impl WidenWasm for f32 {
    #[inline(always)]
    unsafe fn widen4(p: *const f32) -> v128 {
        // SAFETY: four values at p (the caller's promise).
        unsafe { v128_load(p.cast()) }
    }
}

impl WidenWasm for half::f16 {
    /// The 15 bits of magnitude moved to an f32's exponent and mantissa (`<< 13`) read as an
    /// f32 2^112 times too small (the exponent bias 127 against 15), subnormals included; the
    /// sign moved alike. Exact for every finite half; [`FloatRows`](super::float_rows::FloatRows)
    /// keeps no infinity or NaN in this form.
    #[inline(always)]
    unsafe fn widen4(p: *const half::f16) -> v128 {
        // SAFETY: four 2-byte values at p (the caller's promise).
        let h = unsafe { u32x4_load_extend_u16x4(p.cast()) };
        let magnitude = f32x4_mul(i32x4_shl(v128_and(h, u32x4_splat(0x7fff)), 13), f32x4_splat(f32::from_bits((127 + 112) << 23)));
        v128_or(magnitude, i32x4_shl(v128_and(h, u32x4_splat(0x8000)), 16))
    }
}

impl WidenWasm for half::bf16 {
    #[inline(always)]
    unsafe fn widen4(p: *const half::bf16) -> v128 {
        // SAFETY: four 2-byte values at p (the caller's promise); a bf16 is an f32's top half.
        unsafe { i32x4_shl(u32x4_load_extend_u16x4(p.cast()), 16) }
    }
}

/// `out[t][r] = w[r] . x[t]` for float weights, four columns at a time, each weight widened
/// once for all `T` tokens; fused multiply-adds where `RELAXED`. Every row of `w` and `x` holds
/// the same number of values, a multiple of 4 (asserted).
pub fn float<const RELAXED: bool, E: WidenWasm, const R: usize, const T: usize>(w: [&[E]; R], x: [&[f32]; T]) -> [[f32; R]; T] {
    let cols = x.first().map_or(0, |x| x.len());
    assert!(cols.is_multiple_of(4) && w.iter().all(|w| w.len() == cols) && x.iter().all(|x| x.len() == cols));
    let mut acc = [[f32x4_splat(0.0); R]; T];
    for c in (0..cols).step_by(4) {
        // SAFETY: c + 4 <= cols in every row (asserted above).
        unsafe {
            let xs = x.map(|x| load4(x, c));
            for (r, w) in w.iter().enumerate() {
                let wv = E::widen4(w.as_ptr().add(c));
                for (a, xv) in acc.iter_mut().zip(&xs) {
                    a[r] = madd(RELAXED, wv, *xv, a[r]);
                }
            }
        }
    }
    acc.map(|a| a.map(lane_sum))
}

/// The weight side of one format for [`by_fours`].
trait WasmRows<const T: usize> {
    /// Whether the kernel is the relaxed-SIMD one (fused multiply-adds too).
    const RELAXED: bool;
    /// Whether several tokens are summed one row at a time, each token's sums over four blocks
    /// folded at once ([`by_fours`]), rather than all rows and tokens of four blocks together:
    /// fewer vectors live at once, at the cost of reading a row's blocks again for each token.
    const ROWS_APART: bool;
    /// Row `r`'s scales `d` and offsets `m` of blocks `b..b + 4` (offsets zero for formats
    /// without them).
    ///
    /// # Safety
    /// Row `r` holds blocks `b..b + 4`.
    unsafe fn scales4(&self, r: usize, b: usize) -> (v128, v128);
    /// Row `r`'s scale and offset of block `b`.
    ///
    /// # Safety
    /// Row `r` holds block `b`.
    unsafe fn scale(&self, r: usize, b: usize) -> (f32, f32);
    /// Per token, four lanes of integer partial sums of row `r`'s block `b` against the token's.
    ///
    /// # Safety
    /// Row `r` and every activation row hold block `b`.
    unsafe fn sums(&self, r: usize, b: usize, x: &[ActivationRow; T]) -> [v128; T];
}

/// `out[t][r] = sum_b (d_w[r][b] d_x[t][b] sum_i q_w q_x + m_w[r][b] s_x[t][b])` over
/// `blocks` blocks, whose count every row of `w` and `x` holds (the callers assert it). Each
/// (token, row) pair's sums are folded in the same order whichever way the loops run
/// ([`WasmRows::ROWS_APART`]), so a decode step and a prefill give the same bits.
#[inline(always)]
fn by_fours<const R: usize, const T: usize, W: WasmRows<T> + WasmRows<1>>(w: &W, blocks: usize, x: &[ActivationRow; T]) -> [[f32; R]; T] {
    let relaxed = <W as WasmRows<T>>::RELAXED;
    // acc[t][r] += the four blocks' sums (`s`, a lane each) scaled, and the offsets' part.
    let fold = |acc: v128, s: [v128; 4], (dw, mw): (v128, v128), (dx, sx): (v128, v128)| {
        let totals = f32x4_convert_i32x4(lane_totals(s[0], s[1], s[2], s[3]));
        madd(relaxed, mw, sx, madd(relaxed, totals, f32x4_mul(dw, dx), acc))
    };
    let mut acc = [[f32x4_splat(0.0); R]; T];
    let whole = blocks - blocks % 4;
    if T > 1 && <W as WasmRows<T>>::ROWS_APART {
        for r in 0..R {
            for b in (0..whole).step_by(4) {
                // SAFETY: blocks b..b + 4 lie in every row (b + 4 <= blocks).
                unsafe {
                    let scales = <W as WasmRows<T>>::scales4(w, r, b);
                    for (a, xt) in acc.iter_mut().zip(x) {
                        let s = std::array::from_fn(|k| <W as WasmRows<1>>::sums(w, r, b + k, &[*xt])[0]);
                        a[r] = fold(a[r], s, scales, (load4(xt.1, b), load4(xt.2, b)));
                    }
                }
            }
        }
    } else {
        for b in (0..whole).step_by(4) {
            // SAFETY: blocks b..b + 4 lie in every row (b + 4 <= blocks).
            unsafe {
                let xs: [(v128, v128); T] = x.map(|(_, d, s)| (load4(d, b), load4(s, b)));
                for r in 0..R {
                    let scales = <W as WasmRows<T>>::scales4(w, r, b);
                    let s: [[v128; T]; 4] = std::array::from_fn(|k| <W as WasmRows<T>>::sums(w, r, b + k, x));
                    for (t, (a, xs)) in acc.iter_mut().zip(xs).enumerate() {
                        a[r] = fold(a[r], s.map(|s| s[t]), scales, xs);
                    }
                }
            }
        }
    }
    // SAFETY: the blocks past `whole` lie in every row (b < blocks).
    let block = |r: usize, b: usize| unsafe { (<W as WasmRows<T>>::scale(w, r, b), <W as WasmRows<T>>::sums(w, r, b, x)) };
    let fold_one = |a, sums, scale| madd(relaxed, f32x4_convert_i32x4(sums), f32x4_splat(scale), a);
    // SAFETY: as for `block`.
    let rest = unsafe { tail_blocks(whole..blocks, x, &mut acc, block, fold_one) };
    std::array::from_fn(|t| std::array::from_fn(|r| lane_sum(acc[t][r]) + rest[t][r]))
}

/// Q8_0 rows `(integers, halves' scales, scales)`. On SIMD128 (`RELAXED` false) widened to 16
/// bits, with `HALVES` each half's widened integers multiplied by its scale (Q6_K: `|q - 32| *
/// |sc| <= 4096` fits 16 bits). On relaxed SIMD, for rows whose integers all lie in -32..=31
/// (Q5_0's and Q6_K's, repacked): `q + 32` (0..=63) is the 7-bit operand of
/// `i16x8.relaxed_dot_i8x16_i7x16_s` against the activations' bytes as they are (one
/// `pmaddubsw` on x86), and the 32 added comes off again as `32 * x`, the same product of the
/// activations alone (the same for every row of the block). Each 16-bit lane holds a sum of
/// two products, at most 2 x 63 x 127 = 16,002 (so nothing saturates) before the correction
/// and 2 x 32 x 127 after it, so a block's two halves add up in 16 bits; then one
/// `i32x4.dot_i16x8_s` widens them, against ones or, with `HALVES`, each half's scale. The
/// integer sums come out exact, SIMD128's to the bit.
struct Q8_0Wasm<'a, const R: usize, const HALVES: bool, const RELAXED: bool>([ByteRow<'a>; R]);

impl<const R: usize, const T: usize, const HALVES: bool, const RELAXED: bool> WasmRows<T> for Q8_0Wasm<'_, R, HALVES, RELAXED> {
    const RELAXED: bool = RELAXED;
    /// Measured in Chromium here, 30 tokens x 49,152 x 576: 89 ms against 114 (relaxed SIMD's
    /// build), 100 against 132 (SIMD128's).
    const ROWS_APART: bool = true;

    unsafe fn scales4(&self, r: usize, b: usize) -> (v128, v128) {
        (unsafe { load4(self.0[r].2, b) }, f32x4_splat(0.0))
    }

    unsafe fn scale(&self, r: usize, b: usize) -> (f32, f32) {
        (unsafe { *self.0[r].2.get_unchecked(b) }, 0.0)
    }

    unsafe fn sums(&self, r: usize, b: usize, x: &[ActivationRow; T]) -> [v128; T] {
        unsafe {
            let sub = self.0[r].1;
            #[cfg(target_feature = "relaxed-simd")]
            if RELAXED {
                let bias = i8x16_splat(super::q8_0_rows::NARROW_BIAS);
                let q = self.0[r].0.as_ptr().add(b * BLOCK) as *const v128;
                let (lo, hi) = (i8x16_add(v128_load(q), bias), i8x16_add(v128_load(q.add(1)), bias));
                // Per lane, the two products' sum of `q x`: `(q + 32) x - 32 x`.
                let pairs = |x: v128, w: v128| i16x8_sub(i16x8_relaxed_dot_i8x16_i7x16(x, w), i16x8_relaxed_dot_i8x16_i7x16(x, bias));
                return x.map(|(xq, _, _)| {
                    let xb = xq.as_ptr().add(b * BLOCK) as *const v128;
                    let (lo, hi) = (pairs(v128_load(xb), lo), pairs(v128_load(xb.add(1)), hi));
                    if HALVES {
                        let scale = |h: usize| i16x8_splat(i16::from(*sub.get_unchecked(2 * b + h)));
                        i32x4_add(i32x4_dot_i16x8(lo, scale(0)), i32x4_dot_i16x8(hi, scale(1)))
                    } else {
                        i32x4_dot_i16x8(i16x8_add(lo, hi), i16x8_splat(1))
                    }
                });
            }
            let mut wv = widened_block(self.0[r].0, b);
            if HALVES {
                let (lo, hi) = (i16x8_splat(i16::from(*sub.get_unchecked(2 * b))), i16x8_splat(i16::from(*sub.get_unchecked(2 * b + 1))));
                wv = [i16x8_mul(wv[0], lo), i16x8_mul(wv[1], lo), i16x8_mul(wv[2], hi), i16x8_mul(wv[3], hi)];
            }
            x.map(|(q, _, _)| widened_dot(wv, q, b))
        }
    }
}

/// Q8_0 weight rows `(integers, halves' scales, scales)`, with halves' scales (Q6_K: every
/// row's) or none, against activation rows: `out[t][r] = sum_b d_w[b] d_x[b] sum_i q_w[32 b +
/// i] q_x[32 b + i]`, each half's sum times its scale where the rows have them, on SIMD128.
pub fn q8_0<const R: usize, const T: usize>(w: [ByteRow; R], x: [ActivationRow; T]) -> [[f32; R]; T] {
    match super::q8_0_rows::check_blocks(&w, &x) {
        (blocks, true) => by_fours(&Q8_0Wasm::<R, true, false>(w), blocks, &x),
        (blocks, false) => by_fours(&Q8_0Wasm::<R, false, false>(w), blocks, &x),
    }
}

/// The same as [`q8_0`] on relaxed SIMD, for rows whose integers all lie in -32..=31 (the
/// caller's to know; others would give wrong sums): 16 products per instruction.
#[cfg(target_feature = "relaxed-simd")]
pub fn q8_0_relaxed<const R: usize, const T: usize>(w: [ByteRow; R], x: [ActivationRow; T]) -> [[f32; R]; T] {
    match super::q8_0_rows::check_blocks(&w, &x) {
        (blocks, true) => by_fours(&Q8_0Wasm::<R, true, true>(w), blocks, &x),
        (blocks, false) => by_fours(&Q8_0Wasm::<R, false, true>(w), blocks, &x),
    }
}

/// Q4_1 rows `(nibble pairs, fifth bits, (scale, offset) pairs)`: on SIMD128 the values are
/// widened to 16 bits; on relaxed SIMD (`RELAXED`) they meet the activations' bytes as they
/// are. The fifth bits are read only where `FIVE`.
struct Q4_1Wasm<'a, const R: usize, const RELAXED: bool, const FIVE: bool>([NibbleRow<'a>; R]);

impl<const R: usize, const RELAXED: bool, const FIVE: bool> Q4_1Wasm<'_, R, RELAXED, FIVE> {
    /// Row `r`'s block `b`: values 0..16 (the low nibbles) and values 16..32 (the high ones),
    /// a byte each; with `FIVE`, byte `j` gains 16 where bit `j` of the block's mask is set
    /// (the mask's byte `j / 8` copied to byte `j`, bit `j % 8` picked and compared).
    ///
    /// # Safety
    /// Row `r` holds block `b` (and its fifth bits, with `FIVE`).
    #[inline(always)]
    unsafe fn values(&self, r: usize, b: usize) -> (v128, v128) {
        let low = u8x16_splat(0x0F);
        let v = unsafe { v128_load(self.0[r].0.as_ptr().add(b * 16) as *const v128) };
        let (lo, hi) = (v128_and(v, low), v128_and(u16x8_shr(v, 4), low));
        if !FIVE {
            return (lo, hi);
        }
        let mask = u32x4_splat(unsafe { *self.0[r].1.get_unchecked(b) });
        let bit_of = u64x2_splat(0x8040_2010_0804_0201);
        let fifth = |bytes: v128| v128_and(i8x16_eq(v128_and(u8x16_swizzle(mask, bytes), bit_of), bit_of), u8x16_splat(16));
        (v128_or(lo, fifth(u64x2(0, 0x0101_0101_0101_0101))), v128_or(hi, fifth(u64x2(0x0202_0202_0202_0202, 0x0303_0303_0303_0303))))
    }
}

impl<const R: usize, const T: usize, const RELAXED: bool, const FIVE: bool> WasmRows<T> for Q4_1Wasm<'_, R, RELAXED, FIVE> {
    const RELAXED: bool = RELAXED;
    /// Measured in Chromium here, 30 tokens x 49,152 x 576: relaxed SIMD 73 ms against 90;
    /// SIMD128, whose nibbles are widened again for each token, 108 against 86.
    const ROWS_APART: bool = RELAXED;

    unsafe fn scales4(&self, r: usize, b: usize) -> (v128, v128) {
        let (lo, hi) = unsafe { (load4(self.0[r].2, 2 * b), load4(self.0[r].2, 2 * b + 4)) };
        (i32x4_shuffle::<0, 2, 4, 6>(lo, hi), i32x4_shuffle::<1, 3, 5, 7>(lo, hi))
    }

    unsafe fn scale(&self, r: usize, b: usize) -> (f32, f32) {
        unsafe { (*self.0[r].2.get_unchecked(2 * b), *self.0[r].2.get_unchecked(2 * b + 1)) }
    }

    /// SIMD128: the nibbles widened to 16 bits, 8 products per instruction. Relaxed SIMD: the
    /// low nibbles meet the block's first 16 activations and the high nibbles its last 16, each
    /// in one 16-lane relaxed dot product.
    unsafe fn sums(&self, r: usize, b: usize, x: &[ActivationRow; T]) -> [v128; T] {
        unsafe {
            let (lo, hi) = self.values(r, b);
            #[cfg(target_feature = "relaxed-simd")]
            if RELAXED {
                return x.map(|(q, _, _)| {
                    let xb = q.as_ptr().add(b * BLOCK) as *const v128;
                    i32x4_relaxed_dot_i8x16_i7x16_add(
                        v128_load(xb.add(1)),
                        hi,
                        i32x4_relaxed_dot_i8x16_i7x16_add(v128_load(xb), lo, i32x4_splat(0)),
                    )
                });
            }
            let wv = [u16x8_extend_low_u8x16(lo), u16x8_extend_high_u8x16(lo), u16x8_extend_low_u8x16(hi), u16x8_extend_high_u8x16(hi)];
            x.map(|(q, _, _)| widened_dot(wv, q, b))
        }
    }
}

/// Q4_1 weight rows `(nibble pairs, fifth bits, (scale, offset) pairs)`, 4-bit (no fifth
/// bits) or 5-bit (every row's), against activation rows: `out[t][r] = sum_b (d_w[b] d_x[b]
/// sum_i q_w[b, i] q_x[32 b + i] + m_w[b] s_x[b])`, on SIMD128: the values widened to 16 bits,
/// 8 products per instruction.
pub fn q4_1<const R: usize, const T: usize>(w: [NibbleRow; R], x: [ActivationRow; T]) -> [[f32; R]; T] {
    match super::q4_1_rows::check_blocks(&w, &x) {
        (blocks, true) => by_fours(&Q4_1Wasm::<R, false, true>(w), blocks, &x),
        (blocks, false) => by_fours(&Q4_1Wasm::<R, false, false>(w), blocks, &x),
    }
}

/// The same as [`q4_1`] on relaxed SIMD: 16 products per instruction, the values unwidened.
#[cfg(target_feature = "relaxed-simd")]
pub fn q4_1_relaxed<const R: usize, const T: usize>(w: [NibbleRow; R], x: [ActivationRow; T]) -> [[f32; R]; T] {
    match super::q4_1_rows::check_blocks(&w, &x) {
        (blocks, true) => by_fours(&Q4_1Wasm::<R, true, true>(w), blocks, &x),
        (blocks, false) => by_fours(&Q4_1Wasm::<R, true, false>(w), blocks, &x),
    }
}

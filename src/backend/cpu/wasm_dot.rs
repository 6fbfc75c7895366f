//! The block dot products of [`QuantMatrix`](super::quant_matmul::QuantMatrix) on wasm SIMD.
//!
//! SIMD128 (any browser with wasm SIMD): a block's bytes are widened to 16 bits and summed in
//! pairs by `i32x4.dot_i16x8_s`, 8 products per instruction. Relaxed SIMD (built only into
//! the engines for browsers that validate it): Q4_1's nibbles, which fit the 7-bit operand of
//! `i32x4.relaxed_dot_i8x16_i7x16_add_s`, meet the activations' signed bytes unwidened, 16
//! products per instruction with the accumulation folded in; where the CPU has FMA,
//! `f32x4.relaxed_madd` fuses the scaling. Relaxed SIMD's results are deterministic here:
//! its one implementation-defined case, a 7-bit operand above 127, cannot occur with
//! nibbles, and no pair sum (at most 2 x 15 x 127) can saturate 16 bits.
//!
//! In every kernel each loaded weight block serves all `T` tokens and each token's block all
//! `R` rows.

use core::arch::wasm32::*;

use super::quant_matmul::{ActivationRow, BLOCK};

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

/// Q8_0 weight rows `(integers, scales)` against activation rows: `out[t][r] = sum_b
/// d_w[b] d_x[b] sum_i q_w[32 b + i] q_x[32 b + i]`, on SIMD128.
pub fn q8_0<const R: usize, const T: usize>(w: [(&[i8], &[f32]); R], x: [ActivationRow; T]) -> [[f32; R]; T] {
    let blocks = x.first().map_or(0, |(_, d, _)| d.len());
    assert!(
        x.iter().all(|(q, d, _)| q.len() == blocks * BLOCK && d.len() == blocks)
            && w.iter().all(|(q, d)| q.len() == blocks * BLOCK && d.len() == blocks)
    );
    let mut acc = [[f32x4_splat(0.0); R]; T];
    for b in 0..blocks {
        // SAFETY: every row holds `blocks` whole blocks (asserted above), so block b and the
        // scales at b lie inside them.
        unsafe {
            let xv: [[v128; 4]; T] = x.map(|(q, _, _)| widened_block(q, b));
            for (r, (q, d)) in w.iter().enumerate() {
                let wv = widened_block(q, b);
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
    acc.map(|a| a.map(lane_sum))
}

/// Asserts that Q4_1 rows and activation rows hold the same whole number of blocks, and
/// returns it.
fn q4_1_blocks<const R: usize, const T: usize>(w: &[(&[u8], &[f32]); R], x: &[ActivationRow; T]) -> usize {
    let blocks = x.first().map_or(0, |(_, d, _)| d.len());
    assert!(
        x.iter().all(|(q, d, s)| q.len() == blocks * BLOCK && d.len() == blocks && s.len() == blocks)
            && w.iter().all(|(q, dm)| q.len() * 2 == blocks * BLOCK && dm.len() == blocks * 2)
    );
    blocks
}

/// Q4_1 weight rows `(nibble pairs, (scale, offset) pairs)` against activation rows:
/// `out[t][r] = sum_b (d_w[b] d_x[b] sum_i q_w[b, i] q_x[32 b + i] + m_w[b] s_x[b])`, on
/// SIMD128: a block's 16 bytes are split into low and high nibbles and widened once, then
/// multiplied with each token's four 8-lane groups.
pub fn q4_1<const R: usize, const T: usize>(w: [(&[u8], &[f32]); R], x: [ActivationRow; T]) -> [[f32; R]; T] {
    let blocks = q4_1_blocks(&w, &x);
    let mut acc = [[f32x4_splat(0.0); R]; T];
    let mut offsets = [[0f32; R]; T];
    let low = u8x16_splat(0x0F);
    for b in 0..blocks {
        // SAFETY: every row holds `blocks` whole blocks (asserted in q4_1_blocks): the 16-byte
        // load at 16 b, the activations' block b, the scales at b and the pairs at 2 b stay
        // inside them.
        unsafe {
            let xv: [[v128; 4]; T] = x.map(|(q, _, _)| widened_block(q, b));
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
    std::array::from_fn(|t| std::array::from_fn(|r| lane_sum(acc[t][r]) + offsets[t][r]))
}

/// The same as [`q4_1`] on relaxed SIMD: the low nibbles meet the block's first 16
/// activations and the high nibbles its last 16, each in one 16-lane relaxed dot product.
#[cfg(target_feature = "relaxed-simd")]
pub fn q4_1_relaxed<const R: usize, const T: usize>(w: [(&[u8], &[f32]); R], x: [ActivationRow; T]) -> [[f32; R]; T] {
    let blocks = q4_1_blocks(&w, &x);
    let mut acc = [[f32x4_splat(0.0); R]; T];
    let mut offsets = [[0f32; R]; T];
    let (low, zero) = (u8x16_splat(0x0F), i32x4_splat(0));
    for b in 0..blocks {
        // SAFETY: every row holds `blocks` whole blocks (asserted in q4_1_blocks): the 16-byte
        // loads at 16 b (weights) and 32 b, 32 b + 16 (activations), the scales at b and the
        // pairs at 2 b stay inside them.
        unsafe {
            let xv: [[v128; 2]; T] = x.map(|(q, _, _)| {
                let xb = q.as_ptr().add(b * BLOCK) as *const v128;
                [v128_load(xb), v128_load(xb.add(1))]
            });
            for (r, (q, dm)) in w.iter().enumerate() {
                let v = v128_load(q.as_ptr().add(b * 16) as *const v128);
                let (lo, hi) = (v128_and(v, low), u8x16_shr(v, 4));
                let (dw, mw) = (*dm.get_unchecked(2 * b), *dm.get_unchecked(2 * b + 1));
                for (((a, o), xs), (_, xd, xsum)) in acc.iter_mut().zip(offsets.iter_mut()).zip(&xv).zip(&x) {
                    let s = i32x4_relaxed_dot_i8x16_i7x16_add(xs[1], hi, i32x4_relaxed_dot_i8x16_i7x16_add(xs[0], lo, zero));
                    a[r] = f32x4_relaxed_madd(f32x4_convert_i32x4(s), f32x4_splat(dw * *xd.get_unchecked(b)), a[r]);
                    o[r] += mw * *xsum.get_unchecked(b);
                }
            }
        }
    }
    std::array::from_fn(|t| std::array::from_fn(|r| lane_sum(acc[t][r]) + offsets[t][r]))
}

//! How the CPU KV cache holds a float: as an `f32`, or as a half float (IEEE binary16,
//! [`half::f16`]: half the memory, and half the bytes each decode step reads back) widened to
//! `f32` where attention reads it. Attention's arithmetic is f32 either way, on the values the
//! cache holds.

use half::f16;

/// A float as the KV cache stores it.
pub trait CacheFloat: Copy + Default + Send + Sync + 'static {
    /// Bytes each takes.
    const BYTES: usize;

    /// `x` as stored: itself, or the nearest half float (ties to even; past the half floats'
    /// range, infinity).
    fn store(x: f32) -> Self;

    /// Appends `xs`, each as [`CacheFloat::store`] stores it.
    fn extend(to: &mut Vec<Self>, xs: &[f32]);

    /// What was stored, as an `f32`.
    fn to_f32(self) -> f32;

    /// `N` stored floats as `f32`s (exact: every half float is an `f32`).
    fn widen<const N: usize>(xs: &[Self; N]) -> [f32; N];
}

impl CacheFloat for f32 {
    const BYTES: usize = 4;

    #[inline(always)]
    fn store(x: f32) -> f32 {
        x
    }

    fn extend(to: &mut Vec<f32>, xs: &[f32]) {
        to.extend_from_slice(xs);
    }

    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }

    #[inline(always)]
    fn widen<const N: usize>(xs: &[f32; N]) -> [f32; N] {
        *xs
    }
}

impl CacheFloat for f16 {
    const BYTES: usize = 2;

    fn store(x: f32) -> f16 {
        f16::from_f32(x)
    }

    fn extend(to: &mut Vec<f16>, xs: &[f32]) {
        use half::slice::HalfFloatSliceExt;
        let at = to.len();
        to.resize(at + xs.len(), f16::ZERO);
        to[at..].convert_from_f32_slice(xs);
    }

    #[inline(always)]
    fn to_f32(self) -> f32 {
        widen_bits(self.to_bits())
    }

    #[inline(always)]
    fn widen<const N: usize>(xs: &[f16; N]) -> [f32; N] {
        #[cfg(all(target_arch = "x86_64", target_feature = "f16c"))]
        if N.is_multiple_of(8) {
            return widen_f16c(xs);
        }
        std::array::from_fn(|i| widen_bits(xs[i].to_bits()))
    }
}

/// `N` half floats widened eight at a time by the CPU's own conversion (F16C's `vcvtph2ps`).
#[cfg(all(target_arch = "x86_64", target_feature = "f16c"))]
#[inline(always)]
fn widen_f16c<const N: usize>(xs: &[f16; N]) -> [f32; N] {
    use std::arch::x86_64::{__m128i, _mm256_cvtph_ps, _mm256_storeu_ps, _mm_loadu_si128};
    let mut out = [0.0f32; N];
    for (eight, out) in xs.chunks_exact(8).zip(out.chunks_exact_mut(8)) {
        // SAFETY: `eight` holds 8 half floats (16 bytes) and `out` 8 f32s, both read and
        // written unaligned; F16C is enabled at compile time (the cfg above).
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), _mm256_cvtph_ps(_mm_loadu_si128(eight.as_ptr().cast::<__m128i>()))) }
    }
    out
}

/// One half float's bits widened to an `f32` with integer and float operations a compiler
/// vectorizes (wasm's SIMD has no half floats): sign-extended to 32 bits and shifted so that
/// its exponent and mantissa sit in an `f32`'s places and its sign in the sign bit (the copies
/// of the sign between them cleared), then multiplied by 2^112 (the exponents' bias apart,
/// which also makes a subnormal half float a normal `f32`); an infinity or NaN (the largest
/// exponent) gets the `f32`'s largest exponent. The same bits as `half`'s conversion and
/// F16C's, every input (a NaN's quiet bit apart).
#[inline(always)]
pub fn widen_bits(h: u16) -> f32 {
    let wide = h as i16 as i32;
    let scaled = f32::from_bits((wide << 13) as u32 & 0x8fff_e000) * f32::from_bits(0x7780_0000); // 2^112
    if wide & 0x7c00 == 0x7c00 {
        f32::from_bits(scaled.to_bits() | 0x7f80_0000)
    } else {
        scaled
    }
}

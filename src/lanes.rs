//! Elementwise maths in fixed lanes that the compiler vectorizes (SIMD128 in wasm, AVX
//! natively), with the same bits on every platform: every operation is IEEE-754 basic
//! arithmetic in a fixed order (sums in fixed lanes). The vocabulary's softmax at each
//! step ([`crate::sampler::softmax`]) and each attention head's ([`softmax_in_place`]) are
//! built from it.

/// Sums run in this many lanes (a fixed order, so every platform adds the same way).
pub const LANES: usize = 8;

/// Below this argument `exp` is under the smallest normal `f32`; the softmax takes it as 0.
pub const EXP_MIN: f32 = -87.336_54;

/// `exp(x)` for `x <= 0`, within about 2 ulp: `x = n ln 2 + r` with `|r| <= ln 2 / 2`
/// (ln 2 split in two so `n ln 2` is exact), `exp(r)` by its Taylor series to degree 7
/// (truncation under 5e-9 relative), scaled by `2^n` built from its bits. 0 below
/// [`EXP_MIN`].
#[inline(always)]
pub fn exp_nonpositive(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_359_4; // 0x3F318000: 9 significant bits, n * LN2_HI is exact
    const LN2_LO: f32 = -2.121_944_4e-4;
    // A compare and select, not `f32::max`: that is a call to `fmaxf` in wasm (its NaN rule
    // differs from wasm's `f32.max`) and keeps the loop from vectorizing.
    let xc = if x < EXP_MIN { EXP_MIN } else { x };
    let n = (xc * std::f32::consts::LOG2_E).round_ties_even();
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    let poly =
        1.0 + r * (1.0 + r * (1.0 / 2.0 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    // n is in [-126, 0]: a normal power of two.
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    if x < EXP_MIN {
        0.0
    } else {
        poly * scale
    }
}

/// The sum of a chunk in a fixed order (halves, then quarters, then the pair).
#[inline(always)]
pub fn tree_sum(a: [f32; LANES]) -> f32 {
    let b = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    (b[0] + b[2]) + (b[1] + b[3])
}

/// The largest value (NaN-free input), over fixed lanes (compare and select, as above).
pub fn lane_max(e: &[f32]) -> f32 {
    let larger = |a: f32, b: f32| if b > a { b } else { a };
    let mut m = [f32::NEG_INFINITY; LANES];
    let whole = e.len() / LANES * LANES;
    for c in e[..whole].chunks_exact(LANES) {
        for l in 0..LANES {
            m[l] = larger(m[l], c[l]);
        }
    }
    e[whole..].iter().chain(m.iter()).copied().fold(f32::NEG_INFINITY, larger)
}

/// `x = softmax(x)` in place, `x_i = e^(x_i - max) / Z`, `Z` the sum of the exponentials
/// (added in f32 within each chunk of [`LANES`], a fixed tree, and in f64 across chunks), as
/// the vocabulary's softmax at temperature 1 (`x` non-empty with a finite maximum). An
/// attention head's weights over its positions.
pub fn softmax_in_place(x: &mut [f32]) {
    let max = lane_max(x);
    // A pass of its own, which the compiler vectorizes.
    for v in x.iter_mut() {
        *v = exp_nonpositive(*v - max);
    }
    let mut chunks = x.chunks_exact(LANES);
    let mut z = 0f64;
    for c in &mut chunks {
        z += tree_sum(std::array::from_fn(|l| c[l])) as f64;
    }
    for &v in chunks.remainder() {
        z += v as f64;
    }
    let inv = (1.0 / z) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against the correctly rounded `exp` of f64 on a dense grid of `[-88, 0]` and at the
    /// edges: within 2 ulp (relative 2.4e-7), and 0 below the smallest normal.
    #[test]
    fn exp_matches_f64_within_two_ulp() {
        let mut worst = 0f64;
        for i in 0..=880_000 {
            let x = -(i as f32) * 1e-4;
            let got = exp_nonpositive(x) as f64;
            let want = (x as f64).exp();
            if x < EXP_MIN {
                assert_eq!(got, 0.0, "x = {x}");
                continue;
            }
            let rel = (got - want).abs() / want;
            worst = worst.max(rel);
        }
        assert!(worst < 2.4e-7, "worst relative error {worst:e}");
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpositive(-1000.0), 0.0);
    }

    /// Against f64 on lengths around the lanes (one, under, at, over) and a long one, the
    /// scores spread wide enough that some weights underflow: within 1e-5 of each weight
    /// (each `x_i - max` is rounded to f32 before its exponential), summing to 1.
    #[test]
    fn softmax_in_place_matches_f64() {
        for n in [1usize, 7, 8, 9, 23, 1090] {
            let scores: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.9).collect();
            let mut x = scores.clone();
            softmax_in_place(&mut x);
            let max = scores.iter().map(|&v| v as f64).fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = scores.iter().map(|&v| (v as f64 - max).exp()).sum();
            for (i, (&got, &s)) in x.iter().zip(&scores).enumerate() {
                let want = (s as f64 - max).exp() / z;
                assert!((got as f64 - want).abs() <= 1e-5 * want + 1e-30, "length {n}, weight {i}: {got} against {want}");
            }
            let total: f64 = x.iter().map(|&w| w as f64).sum();
            assert!((total - 1.0).abs() < 1e-5, "length {n}: the weights sum to {total}");
        }
    }
}

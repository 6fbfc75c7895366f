//! The softmax over the whole vocabulary, run at every step: `p_i = exp(y_i) / Z` with
//! `y_i = (e_i - max e) / T`, and the entropy of `p`.
//!
//! A step's softmax over 49,152 logits used to cost more than a millisecond in the page
//! (a scalar `expf` call per token, and a `log2` per token for the entropy). Here the
//! exponential is a few plain `f32` operations the compiler vectorizes (SIMD128 in wasm),
//! and the entropy comes from the same pass without a logarithm per token:
//! `H = -sum p_i ln p_i = ln Z - sum p_i y_i`. Every operation is IEEE-754 basic arithmetic
//! in a fixed order (sums in fixed lanes), so the numbers are bit-identical natively and in
//! wasm, whatever the vectorizer does.

/// Sums run in this many lanes (a fixed order, so every platform adds the same way).
const LANES: usize = 8;

/// Below this argument `exp` is under the smallest normal `f32`; the softmax takes it as 0.
const EXP_MIN: f32 = -87.336_54;

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

/// A softmax and the entropy of the distribution it gives.
pub struct Softmax {
    /// `p_i` for every token, summing to 1.
    pub p: Vec<f32>,
    /// `-sum p_i log2 p_i`.
    pub entropy_bits: f64,
}

/// Softmax of `e / temperature` over the whole vocabulary (`temperature > 0`, `e` non-empty
/// with a finite maximum).
pub fn softmax(e: &[f32], temperature: f32) -> Softmax {
    let max = lane_max(e);
    let inv_t = 1.0 / temperature;
    let y = |x: f32| (x - max) * inv_t;
    let mut p = vec![0f32; e.len()];
    for (q, &x) in p.iter_mut().zip(e) {
        *q = exp_nonpositive(y(x));
    }
    // Z = sum q_i and sum q_i y_i: added in f32 within each chunk of LANES (a fixed tree)
    // and in f64 across chunks.
    let (mut z, mut zy) = (0f64, 0f64);
    let whole = e.len() / LANES * LANES;
    for (q, x) in p[..whole].chunks_exact(LANES).zip(e[..whole].chunks_exact(LANES)) {
        let q: [f32; LANES] = std::array::from_fn(|l| q[l]);
        let qy: [f32; LANES] = std::array::from_fn(|l| q[l] * y(x[l]));
        z += tree_sum(q) as f64;
        zy += tree_sum(qy) as f64;
    }
    for (&q, &x) in p[whole..].iter().zip(&e[whole..]) {
        z += q as f64;
        zy += (q * y(x)) as f64;
    }
    let inv = (1.0 / z) as f32;
    for q in &mut p {
        *q *= inv;
    }
    // H = ln Z - sum p_i y_i (in nats), never below 0 by rounding.
    // libm, not the platform's log: the same bits natively and in wasm.
    let entropy_bits = (libm::log(z) - zy / z) / std::f64::consts::LN_2;
    let entropy_bits = if entropy_bits > 0.0 { entropy_bits } else { 0.0 };
    Softmax { p, entropy_bits }
}

/// The sum of a chunk in a fixed order (halves, then quarters, then the pair).
#[inline(always)]
fn tree_sum(a: [f32; LANES]) -> f32 {
    let b = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    (b[0] + b[2]) + (b[1] + b[3])
}

/// The largest value (NaN-free input), over fixed lanes (compare and select, as above).
fn lane_max(e: &[f32]) -> f32 {
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

    /// The softmax and its entropy against the same maths in f64 on odd lengths (lane tails).
    #[test]
    fn softmax_and_entropy_match_f64() {
        for n in [1usize, 3, 7, 8, 9, 17, 1001] {
            let e: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1000) as f32 / 37.0 - 13.0).collect();
            for t in [0.3f32, 1.0, 2.5] {
                let s = softmax(&e, t);
                let max = e.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
                let q: Vec<f64> = e.iter().map(|&x| ((x as f64 - max) / t as f64).exp()).collect();
                let z: f64 = q.iter().sum();
                let h: f64 = q.iter().map(|&x| x / z).filter(|&p| p > 0.0).map(|p| -p * p.log2()).sum();
                for (got, want) in s.p.iter().zip(&q) {
                    assert!((*got as f64 - want / z).abs() < 1e-6, "n {n} t {t}: {got} vs {}", want / z);
                }
                assert!((s.entropy_bits - h).abs() < 1e-5, "n {n} t {t}: {} vs {h}", s.entropy_bits);
            }
        }
    }
}

//! The softmax over the whole vocabulary, run at every step: `p_i = exp(y_i) / Z` with
//! `y_i = (e_i - max e) / T`, and the entropy of `p`.
//!
//! A step's softmax over 49,152 logits used to cost more than a millisecond in the page
//! (a scalar `expf` call per token, and a `log2` per token for the entropy). Here the
//! exponential is a few plain `f32` operations the compiler vectorizes ([`crate::lanes`]),
//! and the entropy comes from the same pass without a logarithm per token:
//! `H = -sum p_i ln p_i = ln Z - sum p_i y_i`. Every operation is IEEE-754 basic arithmetic
//! in a fixed order (sums in fixed lanes), so the numbers are bit-identical natively and in
//! wasm, whatever the vectorizer does.

use crate::lanes::{exp_nonpositive, lane_max, tree_sum, LANES};

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

#[cfg(test)]
mod tests {
    use super::*;

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

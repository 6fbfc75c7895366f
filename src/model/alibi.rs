//! ALiBi (attention with linear biases, BLOOM's): no position is added to the tokens or turned
//! into q and k; instead each scaled score of query head `h` at position `p` against position
//! `j` gains `-slope_h * (p - j)`, so a head looks less at what is further back, by its own
//! rate. The slopes are a geometric series over the heads, as llama.cpp's softmax computes
//! them; alibi.wgsl is the GPU's twin, bit for bit: the host computes the series' two bases
//! ([`alibi_bases`]) for both, and each side raises them to a head's power by the same
//! multiplications ([`power`]).

/// ALiBi's two bases for `n_heads` heads under the largest bias `max_bias`, `[m0, m1]`: with
/// `n` the largest power of two up to `n_heads`, `m0 = 2^(-max_bias / n)` and
/// `m1 = 2^(-max_bias / 2n)`.
pub fn alibi_bases(n_heads: usize, max_bias: f32) -> [f32; 2] {
    let n = largest_power_of_two(n_heads) as f32;
    [2f32.powf(-max_bias / n), 2f32.powf(-(max_bias / 2.0) / n)]
}

/// Query head `head`'s slope of `n_heads` under ALiBi's largest bias `max_bias`: the first `n`
/// heads ([`alibi_bases`]) take `m0^(h + 1)`, the rest the odd powers of `m1` between them,
/// `m1^(2 (h - n) + 1)` (8 heads and a bias of 8: 1/2, 1/4, ..., 1/256).
pub fn alibi_slope(head: usize, n_heads: usize, max_bias: f32) -> f32 {
    let [m0, m1] = alibi_bases(n_heads, max_bias);
    let n = largest_power_of_two(n_heads);
    if head < n {
        power(m0, head as u32 + 1)
    } else {
        power(m1, 2 * (head - n) as u32 + 1)
    }
}

/// `base^k` by squaring, the multiplications in alibi.wgsl's order (each rounded alike on
/// every IEEE f32 machine: the GPU's slopes equal these).
pub fn power(base: f32, k: u32) -> f32 {
    let (mut result, mut square, mut k) = (1.0f32, base, k);
    loop {
        if k & 1 == 1 {
            result *= square;
        }
        k >>= 1;
        if k == 0 {
            return result;
        }
        square *= square;
    }
}

/// The largest power of two up to `n` (1 for 0).
fn largest_power_of_two(n: usize) -> usize {
    1 << n.max(1).ilog2()
}

/// The bias ALiBi adds to a score of a head with `slope` against a key `distance` positions
/// back (0: the query's own).
pub fn alibi_bias(slope: f32, distance: usize) -> f32 {
    -slope * distance as f32
}

#[cfg(test)]
mod tests {
    use super::{alibi_slope, power};

    #[test]
    fn slopes_halve_per_head_for_eight_heads_and_fill_in_odd_powers_past_a_power_of_two() {
        let eight: Vec<f32> = (0..8).map(|h| alibi_slope(h, 8, 8.0)).collect();
        assert_eq!(eight, (1..=8).map(|k| 0.5f32.powi(k)).collect::<Vec<_>>());
        // 12 heads: 8 as above, then m1 = 2^(-1/2) to the powers 1, 3, 5, 7.
        let m1 = 2f32.powf(-0.5);
        for (h, k) in (8..12).zip([1, 3, 5, 7]) {
            assert!((alibi_slope(h, 12, 8.0) - m1.powi(k)).abs() < 1e-7, "head {h}");
        }
    }

    #[test]
    fn power_by_squaring_is_within_its_roundings_of_the_exact_power() {
        // Each squaring doubles the relative error it inherits, so base^k carries at most
        // about k roundings of eps / 2 each: within 2 k eps of the exact power (BLOOM 176B's
        // 112 heads raise a base to at most the 95th power).
        for k in 0..200u32 {
            let (got, want) = (power(0.917, k), f64::from(0.917f32).powi(k as i32));
            let allowed = 2.0 * f64::from(k.max(1)) * f64::from(f32::EPSILON) * want;
            assert!((f64::from(got) - want).abs() <= allowed, "0.917^{k}: {got} vs {want}");
        }
    }
}

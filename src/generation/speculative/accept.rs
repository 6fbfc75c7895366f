//! The acceptance rule of speculative sampling, exact: a drafted token `d` drawn from the
//! draft's distribution `q` is kept with probability `min(1, p(d) / q(d))`, where `p` is the
//! model's; on rejection the replacement is drawn from `max(0, p - q)`, renormalized. The
//! token that comes out is distributed exactly as `p`, whatever `q` is: kept with
//! `q(x) min(1, p(x)/q(x)) = min(p(x), q(x))`, replaced with `max(0, p(x) - q(x))`, and the
//! two add up to `p(x)`.

use crate::sampler::SamplerRng;

/// What the rule decided for one drafted token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The drafted token stays.
    Accepted,
    /// It is rejected; this token, drawn from the residual, takes its place.
    Replaced(u32),
}

/// Applies the rule to `drafted`, with `p` and `q` over the whole vocabulary (`[vocab]`
/// each, summing to 1). Draws from `rng` only when the outcome is uncertain: a token the
/// model finds at least as likely as the draft is kept without a draw, one it gives 0 is
/// rejected without one.
pub fn judge(p: &[f32], q: &[f32], drafted: u32, rng: &mut SamplerRng) -> Verdict {
    let (pd, qd) = (p[drafted as usize] as f64, q[drafted as usize] as f64);
    if pd >= qd {
        return Verdict::Accepted;
    }
    if pd > 0.0 && rng.uniform() < pd / qd {
        return Verdict::Accepted;
    }
    Verdict::Replaced(draw_residual(p, q, rng))
}

/// A token drawn from `max(0, p - q)`, renormalized (walked in id order). When rounding
/// leaves it empty, `p` itself.
pub fn draw_residual(p: &[f32], q: &[f32], rng: &mut SamplerRng) -> u32 {
    let residual = |i: usize| (p[i] as f64 - q[i] as f64).max(0.0);
    let total: f64 = (0..p.len()).map(residual).sum();
    if total <= 0.0 {
        return draw_dense(p, rng);
    }
    walk(p.len(), residual, total, rng)
}

/// A token drawn from `p` (`[vocab]`, summing to 1), walked in id order.
pub fn draw_dense(p: &[f32], rng: &mut SamplerRng) -> u32 {
    let total: f64 = p.iter().map(|&x| x as f64).sum();
    walk(p.len(), |i| p[i] as f64, total, rng)
}

/// The first id whose cumulative weight exceeds `u * total`; the last positive one if
/// rounding runs past the end.
fn walk(n: usize, weight: impl Fn(usize) -> f64, total: f64, rng: &mut SamplerRng) -> u32 {
    let u = rng.uniform() * total;
    let mut acc = 0.0;
    let mut last = 0;
    for i in 0..n {
        let w = weight(i);
        if w > 0.0 {
            acc += w;
            last = i;
            if acc > u {
                return i as u32;
            }
        }
    }
    last as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over many draws the rule's output follows p, for a q far from it.
    #[test]
    fn output_follows_p() {
        let p = [0.5f32, 0.3, 0.2, 0.0];
        let q = [0.1f32, 0.1, 0.2, 0.6];
        let mut rng = SamplerRng::new(3);
        let n = 200_000;
        let mut counts = [0usize; 4];
        for _ in 0..n {
            let d = draw_dense(&q, &mut rng);
            let t = match judge(&p, &q, d, &mut rng) {
                Verdict::Accepted => d,
                Verdict::Replaced(r) => r,
            };
            counts[t as usize] += 1;
        }
        for (c, &pi) in counts.iter().zip(&p) {
            let f = *c as f64 / n as f64;
            // 5 standard deviations of a binomial frequency at n = 200k is under 0.006.
            assert!((f - pi as f64).abs() < 0.006, "{counts:?} against {p:?}");
        }
    }
}

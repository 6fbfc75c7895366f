//! The sampler against its specification: the worked example, greedy equivalences, seeded
//! reproducibility and a chi-square test of the draws. Runs natively and in wasm.

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use tokenscope::sampler::{choose, distribution, draw_many, sample, Choice, Filter, SamplerOrder, SamplerRng, SamplingParams};

const EXAMPLE: [f32; 5] = [4.0, 3.0, 2.0, 1.0, 0.5];
/// The lesson prints its figures to 3 decimals, computed from rounded intermediates.
const LESSON_TOL: f32 = 2e-3;

/// Exact softmax of the example at temperature `t`, in f64.
fn exact(t: f64) -> Vec<f32> {
    let w: Vec<f64> = EXAMPLE.iter().map(|&l| ((l as f64 - 4.0) / t).exp()).collect();
    let z: f64 = w.iter().sum();
    w.iter().map(|x| (x / z) as f32).collect()
}

fn params(temperature: f32, top_k: usize, top_p: f32) -> SamplingParams {
    SamplingParams { temperature, top_k, top_p, min_p: 0.0, ..SamplingParams::default() }
}

fn close(a: f32, b: f32, tol: f32) -> bool {
    (a - b).abs() <= tol
}

#[test]
fn worked_example_softmax() {
    let d = distribution(&EXAMPLE, &[], &params(1.0, 0, 1.0), 5).expect("valid");
    let p: Vec<f32> = d.candidates.iter().map(|c| c.p).collect();
    for (got, want) in p.iter().zip([0.632, 0.232, 0.085, 0.031, 0.019]) {
        assert!(close(*got, want, LESSON_TOL), "p = {p:?}");
    }
    for (got, want) in p.iter().zip(exact(1.0)) {
        assert!(close(*got, want, 1e-6), "p = {p:?}");
    }
    assert_eq!(d.after_min_p, 5);
    assert!(d.candidates.iter().all(|c| c.p_filtered == c.p && c.cut_by.is_none()));
}

#[test]
fn worked_example_top_k_renormalizes() {
    let d = distribution(&EXAMPLE, &[], &params(1.0, 3, 1.0), 5).expect("valid");
    assert!(close(d.candidates[0].p_filtered, 0.666, LESSON_TOL), "{:?}", d.candidates[0]);
    let e = exact(1.0);
    assert!(close(d.candidates[0].p_filtered, e[0] / (e[0] + e[1] + e[2]), 1e-6));
    assert_eq!(d.after_top_k, 3);
    assert_eq!(d.candidates[3].cut_by, Some(Filter::TopK));
    assert_eq!(d.candidates[3].p_filtered, 0.0);
    let kept: f32 = d.candidates.iter().map(|c| c.p_filtered).sum();
    assert!(close(kept, 1.0, 1e-6));
}

#[test]
fn worked_example_nucleus_keeps_the_crossing_token() {
    let d = distribution(&EXAMPLE, &[], &params(1.0, 0, 0.9), 5).expect("valid");
    assert_eq!(d.after_top_p, 3, "0.632 + 0.232 < 0.9 <= + 0.085");
    assert_eq!(d.candidates[3].cut_by, Some(Filter::TopP));
    assert_eq!(d.candidates[4].cut_by, Some(Filter::TopP));
}

#[test]
fn worked_example_temperature() {
    let cold = distribution(&EXAMPLE, &[], &params(0.5, 0, 1.0), 5).expect("valid");
    assert!(close(cold.candidates[0].p, 0.866, LESSON_TOL), "{:?}", cold.candidates[0]);
    assert!(close(cold.candidates[0].p, exact(0.5)[0], 1e-6));
    assert!(close(cold.candidates[0].p_t1, exact(1.0)[0], 1e-6), "T = 1 reference kept");
    let hot = distribution(&EXAMPLE, &[], &params(2.0, 0, 1.0), 5).expect("valid");
    assert!(close(hot.candidates[0].p, 0.422, LESSON_TOL), "{:?}", hot.candidates[0]);
    assert!(close(hot.candidates[0].p, exact(2.0)[0], 1e-6));
}

#[test]
fn min_p_cuts_relative_to_the_top() {
    let mut p = params(1.0, 0, 1.0);
    p.min_p = 0.1; // floor = 0.0632: keeps 0.632, 0.232, 0.085
    let d = distribution(&EXAMPLE, &[], &p, 5).expect("valid");
    assert_eq!(d.after_min_p, 3);
    assert_eq!(d.candidates[3].cut_by, Some(Filter::MinP));
}

#[test]
fn repetition_penalty_divides_positive_and_multiplies_negative() {
    let logits = [2.0, 1.0, -1.0, 0.5];
    let mut p = params(1.0, 0, 1.0);
    p.repetition_penalty = 2.0;
    let penalized = distribution(&logits, &[0, 2, 2], &p, 4).expect("valid");
    let plain = distribution(&[1.0, 1.0, -2.0, 0.5], &[], &params(1.0, 0, 1.0), 4).expect("valid");
    for c in &penalized.candidates {
        let twin = plain.candidates.iter().find(|x| x.token_id == c.token_id).expect("same ids");
        assert!(close(c.p, twin.p, 1e-6), "{c:?} vs {twin:?}");
        assert_eq!(c.logit, logits[c.token_id as usize], "the raw logit is reported");
    }
}

fn pseudo_logits(n: usize, seed: u32) -> Vec<f32> {
    (0..n as u32).map(|i| ((i.wrapping_mul(2654435761).wrapping_add(seed) >> 8) % 1000) as f32 / 100.0).collect()
}

#[test]
fn greedy_equivalences() {
    let logits = pseudo_logits(1000, 3);
    let argmax = (0..logits.len()).fold(0, |b, i| if logits[i] > logits[b] { i } else { b }) as u32;
    let cases =
        [params(0.0, 0, 1.0), params(1e-6, 50, 0.5), params(1.0, 1, 1.0), params(1.5, 1, 0.3), params(1.0, 0, 0.0), params(1.0, 0, 1e-9)];
    for p in cases {
        for seed in 0..5 {
            let s = sample(&logits, &[], &p, 10, &mut SamplerRng::new(seed)).expect("valid");
            assert_eq!(s.token_id, argmax, "{p:?}");
            assert_eq!(s.rank, 0);
            assert_eq!(s.p_filtered, 1.0);
        }
    }
}

#[test]
fn greedy_ties_take_the_first_index() {
    let s = sample(&[1.0, 3.0, 3.0, 2.0], &[], &params(0.0, 0, 1.0), 4, &mut SamplerRng::new(1)).expect("valid");
    assert_eq!(s.token_id, 1);
}

#[test]
fn seeded_draws_repeat() {
    let logits = pseudo_logits(500, 11);
    let p = params(1.3, 0, 0.97);
    let run = |seed| {
        let mut rng = SamplerRng::new(seed);
        (0..50).map(|_| sample(&logits, &[], &p, 5, &mut rng).expect("valid").token_id).collect::<Vec<_>>()
    };
    assert_eq!(run(42), run(42));
    assert_ne!(run(42), run(43));
}

#[test]
fn rng_stream_is_the_same_on_every_platform() {
    // ChaCha8 seeded with 42: these values are what the native build draws; the wasm build
    // runs this same test, so both must produce them.
    let mut rng = SamplerRng::new(42);
    let draws: Vec<u64> = (0..4).map(|_| (rng.uniform() * 1e9) as u64).collect();
    let mut again = SamplerRng::new(42);
    let first = again.uniform();
    assert_eq!((first * 1e9) as u64, draws[0]);
    assert_eq!(draws, EXPECTED_DRAWS, "the seeded stream changed");
}

/// First four draws of `SamplerRng::new(42)`, times 1e9, as produced natively.
const EXPECTED_DRAWS: [u64; 4] = [681896192, 950275407, 427516402, 627360521];

#[test]
fn chi_square_draws_follow_the_filtered_distribution() {
    let logits = [2.0, 1.5, 1.0, 0.7, 0.2, -0.5, -1.0, -3.0];
    let p = SamplingParams { temperature: 0.8, top_k: 6, top_p: 0.9, min_p: 0.02, ..SamplingParams::default() };
    let d = distribution(&logits, &[], &p, 8).expect("valid");
    let mut counts = vec![0usize; logits.len()];
    let mut rng = SamplerRng::new(2024);
    let n = 40_000;
    for _ in 0..n {
        let s = sample(&logits, &[], &p, 8, &mut rng).expect("valid");
        counts[s.token_id as usize] += 1;
    }
    let mut chi2 = 0.0f64;
    let mut dof = 0;
    for c in &d.candidates {
        let observed = counts[c.token_id as usize] as f64;
        if c.p_filtered == 0.0 {
            assert_eq!(observed, 0.0, "cut token {} was drawn", c.token_id);
            continue;
        }
        let expected = c.p_filtered as f64 * n as f64;
        chi2 += (observed - expected).powi(2) / expected;
        dof += 1;
    }
    dof -= 1;
    // 99.9th percentile of chi-square: 16.27 for 3 degrees of freedom, 18.47 for 4.
    let limit = [0.0, 10.83, 13.82, 16.27, 18.47, 20.52][dof];
    assert!(chi2 < limit, "chi2 = {chi2:.2} with {dof} degrees of freedom, counts {counts:?}");
}

#[test]
fn absurd_parameters_are_rejected_with_their_name() {
    let bad = [
        (params(f32::NAN, 0, 1.0), "temperature"),
        (params(-1.0, 0, 1.0), "temperature"),
        (params(1.0, 0, 1.5), "top_p"),
        (params(1.0, 0, -0.1), "top_p"),
        (SamplingParams { min_p: 2.0, ..params(1.0, 0, 1.0) }, "min_p"),
        (SamplingParams { repetition_penalty: 0.0, ..params(1.0, 0, 1.0) }, "repetition_penalty"),
    ];
    for (p, name) in bad {
        let e = distribution(&EXAMPLE, &[], &p, 5).expect_err("must be rejected");
        assert!(e.to_string().contains(name), "{e}");
    }
}

#[test]
fn large_vocab_with_filters_matches_full_ranking() {
    // The sampler ranks only a prefix of the vocabulary; compare against brute force.
    let logits = pseudo_logits(49_152, 5);
    for p in [params(1.0, 0, 0.5), params(3.0, 0, 0.9), params(0.7, 200, 0.95), params(1.0, 0, 1.0)] {
        let d = distribution(&logits, &[], &p, 30).expect("valid");
        let mut ids: Vec<usize> = (0..logits.len()).collect();
        ids.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        let got: Vec<u32> = d.candidates.iter().map(|c| c.token_id).collect();
        let want: Vec<u32> = ids[..30].iter().map(|&i| i as u32).collect();
        assert_eq!(got, want, "{p:?}");
        // Brute-force nucleus size.
        let max = logits.iter().copied().fold(f32::MIN, f32::max);
        let w: Vec<f64> = ids.iter().map(|&i| (((logits[i] - max) / p.temperature) as f64).exp()).collect();
        let z: f64 = w.iter().sum();
        let k = if p.top_k == 0 { w.len() } else { p.top_k };
        let zk: f64 = w[..k].iter().sum();
        let mut acc = 0.0;
        let mut nucleus = k;
        if p.top_p < 1.0 {
            for (r, x) in w[..k].iter().enumerate() {
                acc += x / zk;
                if acc >= p.top_p as f64 {
                    nucleus = r + 1;
                    break;
                }
            }
        }
        let _ = z;
        assert!((d.after_top_p as i64 - nucleus as i64).abs() <= 1, "{p:?}: {} vs {nucleus}", d.after_top_p);
    }
}

/// The worked example at T = 2 with top-p 0.7, by hand (e^x for the logits / 2):
/// 7.389, 4.482, 2.718, 1.649, 1.284 (sum 17.522) -> p_T = 0.4217, 0.2558, 0.1551, ...
/// Temperature first: 0.4217 + 0.2558 = 0.6775 < 0.7 <= + 0.1551, so 3 survive, and
/// "the" gets 0.4217 / 0.8326 = 0.5065.
/// Temperature last: at T = 1 (0.6316, 0.2324, ...) 0.6316 < 0.7 <= 0.8640, so 2 survive,
/// then T = 2 over them: 7.389 / (7.389 + 4.482) = 0.6224.
#[test]
fn sampler_order_changes_which_tokens_survive_top_p() {
    let first = SamplingParams { temperature: 2.0, top_k: 0, top_p: 0.7, ..SamplingParams::default() };
    let last = SamplingParams { order: SamplerOrder::TemperatureLast, ..first.clone() };
    let a = distribution(&EXAMPLE, &[], &first, 5).expect("valid");
    let b = distribution(&EXAMPLE, &[], &last, 5).expect("valid");
    assert_eq!((a.after_top_p, b.after_top_p), (3, 2));
    assert!(close(a.candidates[0].p_filtered, 0.5065, 1e-4), "{:?}", a.candidates[0]);
    assert!(close(b.candidates[0].p_filtered, 0.6224, 1e-4), "{:?}", b.candidates[0]);
    assert!(close(b.candidates[1].p_filtered, 0.3776, 1e-4));
    assert_eq!(b.candidates[2].cut_by, Some(Filter::TopP));
    // `p` (after temperature, before the filters) is the same in both orders.
    for (x, y) in a.candidates.iter().zip(&b.candidates) {
        assert_eq!(x.p, y.p);
    }
}

/// Min-p 0.2 at T = 0.5: temperature first measures p_T (0.8643, 0.1170, 0.0158, ...):
/// the floor 0.1729 keeps 1 token. Temperature last measures p at T = 1 (0.6316, 0.2324,
/// 0.0855, ...): the floor 0.1263 keeps 2, and T = 0.5 then gives "the" 0.8808
/// (e^8 / (e^8 + e^6)).
#[test]
fn sampler_order_changes_which_tokens_survive_min_p() {
    let first = SamplingParams { temperature: 0.5, top_k: 0, top_p: 1.0, min_p: 0.2, ..SamplingParams::default() };
    let last = SamplingParams { order: SamplerOrder::TemperatureLast, ..first.clone() };
    let a = distribution(&EXAMPLE, &[], &first, 5).expect("valid");
    let b = distribution(&EXAMPLE, &[], &last, 5).expect("valid");
    assert_eq!((a.after_min_p, b.after_min_p), (1, 2));
    assert!(close(b.candidates[0].p_filtered, 0.8808, 1e-4), "{:?}", b.candidates[0]);
    assert_eq!(b.candidates[2].cut_by, Some(Filter::MinP));
    // Top-k alone does not depend on the order.
    let k = |order| {
        distribution(&EXAMPLE, &[], &SamplingParams { temperature: 0.5, top_k: 2, top_p: 1.0, order, ..SamplingParams::default() }, 5)
    };
    assert_eq!(k(SamplerOrder::TemperatureFirst).expect("valid"), k(SamplerOrder::TemperatureLast).expect("valid"));
}

#[test]
fn a_forced_token_keeps_its_rank_and_probability_and_draws_nothing() {
    let p = params(1.0, 2, 1.0);
    let mut rng = SamplerRng::new(7);
    let before = rng.clone().uniform();
    let s = choose(&EXAMPLE, &[], &p, 5, Choice::Forced(3)).expect("valid");
    assert!(s.forced);
    assert_eq!((s.token_id, s.rank), (3, 3));
    assert!(close(s.p, exact(1.0)[3], 1e-6));
    assert_eq!(s.p_filtered, 0.0, "top-k 2 cut it: it could not have been drawn");
    assert!(close(s.surprisal_bits.expect("p > 0"), -(exact(1.0)[3] as f64).log2() as f32, 1e-5));
    assert_eq!(rng.uniform(), before, "forcing does not consume the random stream");
    assert!(choose(&EXAMPLE, &[], &p, 5, Choice::Forced(5)).is_err(), "outside the vocabulary");
    // A greedy step gives every other token p = 0: no finite surprisal.
    let g = choose(&EXAMPLE, &[], &SamplingParams::greedy(), 5, Choice::Forced(1)).expect("valid");
    assert_eq!((g.p, g.surprisal_bits), (0.0, None));
    // A drawn token's surprisal is -log2 p.
    let d = sample(&EXAMPLE, &[], &params(1.0, 0, 1.0), 5, &mut rng).expect("valid");
    assert!(!d.forced);
    assert!(close(d.surprisal_bits.expect("p > 0"), -(d.p as f64).log2() as f32, 1e-5));
}

#[test]
fn many_draws_count_like_the_filtered_distribution() {
    let p = params(1.0, 3, 1.0);
    let n = 1000;
    let counts = draw_many(&EXAMPLE, &[], &p, n, &mut SamplerRng::new(99)).expect("valid");
    assert_eq!(counts.iter().map(|c| c.1).sum::<usize>(), n);
    assert!(counts.iter().all(|&(id, _)| id < 3), "only top-k survivors: {counts:?}");
    let d = distribution(&EXAMPLE, &[], &p, 5).expect("valid");
    for &(id, c) in &counts {
        let q = d.candidates.iter().find(|x| x.token_id == id).expect("a candidate").p_filtered as f64;
        let sd = (n as f64 * q * (1.0 - q)).sqrt();
        assert!((c as f64 - n as f64 * q).abs() < 5.0 * sd, "token {id}: {c} draws for p = {q}");
    }
    // The same seed repeats; greedy puts every draw on the top token.
    assert_eq!(counts, draw_many(&EXAMPLE, &[], &p, n, &mut SamplerRng::new(99)).expect("valid"));
    assert_eq!(draw_many(&EXAMPLE, &[], &SamplingParams::greedy(), 10, &mut SamplerRng::new(1)).expect("valid"), vec![(0, 10)]);
}

/// A vocabulary-sized step (49,152 logits, the model's) against the same maths in f64: every
/// reported probability within 1e-6 relative and the entropy within 1e-5 bits, at several
/// temperatures and in both orders.
#[test]
fn a_vocabulary_sized_softmax_matches_f64() {
    let logits: Vec<f32> = pseudo_logits(49_152, 7).iter().map(|x| x * 3.0 - 12.0).collect();
    for t in [0.2f32, 0.7, 1.0, 1.9] {
        let d = distribution(&logits, &[], &params(t, 0, 0.9), 100).expect("valid");
        let softmax = |t: f64| {
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let q: Vec<f64> = logits.iter().map(|&x| ((x as f64 - max) / t).exp()).collect();
            let z: f64 = q.iter().sum();
            q.into_iter().map(|x| x / z).collect::<Vec<f64>>()
        };
        let (p, p_t1) = (softmax(t as f64), softmax(1.0));
        for c in &d.candidates {
            let i = c.token_id as usize;
            assert!((c.p as f64 - p[i]).abs() <= 1e-6 * p[i], "T {t} token {i}: {} vs {}", c.p, p[i]);
            assert!((c.p_t1 as f64 - p_t1[i]).abs() <= 1e-6 * p_t1[i], "T {t} token {i}: {} vs {}", c.p_t1, p_t1[i]);
        }
        let entropy: f64 = p.iter().filter(|&&x| x > 0.0).map(|&x| -x * x.log2()).sum();
        assert!((d.entropy_bits as f64 - entropy).abs() < 1e-5, "T {t}: {} vs {entropy}", d.entropy_bits);
    }
}

/// The softmax is basic IEEE-754 arithmetic in a fixed order, so its bits are the same
/// natively and in wasm (this test runs in both): a fingerprint of every reported number
/// of one vocabulary-sized step, as the native build computes it.
#[test]
fn softmax_bits_are_the_same_on_every_platform() {
    let logits: Vec<f32> = pseudo_logits(49_152, 5).iter().map(|x| x * 2.0 - 9.0).collect();
    let d = distribution(&logits, &[], &params(0.7, 40, 0.95), 20).expect("valid");
    let mut h = 0u64;
    for c in &d.candidates {
        for v in [c.p, c.p_t1, c.p_filtered] {
            h = h.rotate_left(7) ^ u64::from(v.to_bits());
        }
    }
    h = h.rotate_left(7) ^ u64::from(d.entropy_bits.to_bits());
    assert_eq!(h, SOFTMAX_FINGERPRINT, "{h}");
}

/// [`softmax_bits_are_the_same_on_every_platform`]'s fingerprint, as produced natively.
const SOFTMAX_FINGERPRINT: u64 = 4563957936213877582;

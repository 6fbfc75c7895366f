//! The real model on the CPU against the oracle fixtures (`tests/fixtures/oracle`): the exact path against exact math
//! (numpy float64), the fast path against llama.cpp, and teacher-forced greedy agreement.
//! Each test prints the figures it measured.
//! Native only: it reads the model file from disk.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::{argmax, ids, logsumexp, max_diff, teacher_forced_logits as run};

use serde_json::Value;

use tokenscope::backend::cpu::{CpuBackend, CpuPrecision};
use tokenscope::backend::Backend;
use tokenscope::model::Model;

/// Exact path vs exact64: f32 activations over ~30 layers against float64 (README: ~1e-3).
const EXACT_TOL: f64 = 1e-2;
/// Fast path vs llama.cpp and vs exact math: both engines round activations to 8 bits, but
/// in different block formats (our Q8_0 weights and activations vs llama.cpp's Q4_1 x Q8_1),
/// so each is about as far from exact math as the other: exact math is up to 1.02 from
/// llama.cpp on these cases (oracle README); we measured up to 1.83 from llama.cpp and 1.78
/// from exact math on the one-token prompt "Hello" (0.25-0.8 elsewhere).
const FAST_TOL: f64 = 2.0;
/// Below this reference top-1 margin two correct implementations may disagree on the argmax.
const SMALL_MARGIN: f64 = 0.5;
/// The exact path with its KV cache in half floats vs exact64: each key and value rounded to
/// a half float (up to a relative 2^-11) moves the logits further, as on the GPU
/// (tests/oracle_gpu.rs's `TOL_KV_F16`, the same bound).
const KV_F16_TOL: f64 = 5e-2;

fn load(precision: CpuPrecision) -> (CpuBackend, tokenscope::tokenizer::Tokenizer) {
    let m = Model::open(&common::model_path()).expect("the default model loads");
    let cfg = m.config.clone();
    (CpuBackend::new(&cfg, m.weights, precision, Some(512)).expect("backend"), m.tokenizer)
}

fn top1_margin(step: &Value) -> f64 {
    let top = step["top"].as_array().expect("top");
    top[0][1].as_f64().expect("logit") - top[1][1].as_f64().expect("logit")
}

#[test]
fn exact_path_matches_exact_math_at_every_recorded_step() {
    let (mut b, _) = load(CpuPrecision::Exact);
    let reference = common::oracle("numpy_ref.json");
    let mut worst = 0.0f64;
    let mut checked = 0;
    for case in reference["logits_cases"].as_array().expect("cases") {
        let logits = run(&mut b, &ids(&case["prompt_ids"]), &ids(&case["greedy_tokens_fed"]));
        for (ours, step) in logits.iter().zip(case["steps"].as_array().expect("steps")) {
            let d = max_diff(ours, step);
            let lse = (logsumexp(ours) - step["logsumexp"].as_f64().expect("lse")).abs();
            assert!(d < EXACT_TOL, "{}: position {}: max |diff| {d}", case["prompt_text"], step["position"]);
            assert!(lse < EXACT_TOL, "logsumexp differs by {lse}");
            assert_eq!(argmax(ours) as u64, step["top"][0][0].as_u64().expect("id"));
            worst = worst.max(d).max(lse);
            checked += 1;
        }
    }
    assert!(checked >= 20);
    eprintln!("exact path vs exact64: worst |logit diff| = {worst:.2e} over {checked} steps (tolerance {EXACT_TOL})");
}

#[test]
fn a_half_float_cache_stays_near_exact_math_and_holds_two_bytes_a_value() {
    let m = Model::open(&common::model_path()).expect("the default model loads");
    let cfg = m.config.clone();
    let mut b = CpuBackend::with_cache(&cfg, m.weights, CpuPrecision::Exact, Some(512), true).expect("backend");
    assert_eq!(b.info().kv_bytes_per_value, 2);
    let reference = common::oracle("numpy_ref.json");
    let (mut worst, mut checked) = (0.0f64, 0);
    for case in reference["logits_cases"].as_array().expect("cases") {
        let logits = run(&mut b, &ids(&case["prompt_ids"]), &ids(&case["greedy_tokens_fed"]));
        for (ours, step) in logits.iter().zip(case["steps"].as_array().expect("steps")) {
            let d = max_diff(ours, step);
            assert!(d < KV_F16_TOL, "{}: position {}: max |diff| {d}", case["prompt_text"], step["position"]);
            if top1_margin(step) >= SMALL_MARGIN {
                assert_eq!(argmax(ours) as u64, step["top"][0][0].as_u64().expect("id"));
            }
            worst = worst.max(d);
            checked += 1;
        }
        // K and V of 64 values per KV head, 3 KV heads, 30 layers, 2 bytes each.
        assert_eq!(b.kv_cache_bytes(), b.position() * 30 * 2 * 192 * 2, "two bytes per cached value");
    }
    assert!(checked >= 20);
    // The cache's rounding must show: a half-float cache that stayed f32 would be as exact as
    // the exact path (under 1e-3 here).
    assert!(worst > 1e-4, "the half-float cache is as exact as an f32 one ({worst:.2e}): is it half?");
    eprintln!(
        "exact path, half-float KV cache, vs exact64: worst |logit diff| = {worst:.2e} over {checked} steps (tolerance {KV_F16_TOL})"
    );
}

#[test]
fn fast_path_stays_close_to_llama_cpp() {
    let (mut b, _) = load(CpuPrecision::Fast);
    let reference = common::oracle("logits.json");
    let exact = common::oracle("numpy_ref.json");
    let mut worst = 0.0f64;
    let mut worst_exact = 0.0f64;
    let mut diffs = Vec::new();
    for (case, ecase) in reference["cases"].as_array().expect("cases").iter().zip(exact["logits_cases"].as_array().expect("cases")) {
        let logits = run(&mut b, &ids(&case["prompt_ids"]), &ids(&case["greedy_tokens_fed"]));
        for ((ours, step), estep) in
            logits.iter().zip(case["steps"].as_array().expect("steps")).zip(ecase["steps"].as_array().expect("steps"))
        {
            let d = max_diff(ours, step);
            let de = max_diff(ours, estep);
            assert!(de < FAST_TOL, "{}: position {}: max |diff| to exact math {de}", case["prompt_text"], step["position"]);
            assert!(d < FAST_TOL, "{}: position {}: max |diff| {d}", case["prompt_text"], step["position"]);
            let want = step["top"][0][0].as_u64().expect("id") as usize;
            if top1_margin(step) >= SMALL_MARGIN {
                assert_eq!(argmax(ours), want, "{}: position {}", case["prompt_text"], step["position"]);
            }
            worst = worst.max(d);
            worst_exact = worst_exact.max(de);
            diffs.push(d);
        }
    }
    diffs.sort_by(f64::total_cmp);
    eprintln!(
        "fast path vs llama.cpp: worst |logit diff| = {worst:.3}, median {:.3} over {} steps; vs exact64 worst {worst_exact:.3} (tolerance {FAST_TOL})",
        diffs[diffs.len() / 2],
        diffs.len()
    );
}

#[test]
fn prefill_and_token_by_token_decode_agree() {
    let (mut b, _) = load(CpuPrecision::Exact);
    let prompt = [504, 3575, 282, 4649, 314];
    let batched = run(&mut b, &prompt, &[]).remove(0);
    b.truncate(0);
    let mut stepwise = Vec::new();
    for &t in &prompt {
        stepwise = pollster::block_on(b.decode(t)).expect("decode");
    }
    let d = batched.iter().zip(&stepwise).map(|(a, c)| (a - c).abs()).fold(0.0f32, f32::max);
    assert!(d < 1e-3, "prefill vs decode: {d}");
    // Truncating and running again reproduces the same logits.
    b.truncate(3);
    let again = run_from(&mut b, &prompt[3..]);
    let d2 = batched.iter().zip(&again).map(|(a, c)| (a - c).abs()).fold(0.0f32, f32::max);
    assert!(d2 < 1e-3, "after truncate: {d2}");
    eprintln!("prefill vs decode: max |diff| {d:.2e}; after truncate {d2:.2e}");
}

fn run_from<B: Backend>(b: &mut B, tokens: &[u32]) -> Vec<f32> {
    pollster::block_on(b.prefill(tokens)).expect("prefill")
}

/// Feeds the reference's greedy tokens and counts steps where our argmax agrees.
fn teacher_forced(b: &mut CpuBackend, prompt: &[u32], reference: &[u32], margins: &[f64], label: &str) -> (usize, usize) {
    let logits = run(b, prompt, &reference[..reference.len() - 1]);
    let mut agree = 0;
    for (i, ours) in logits.iter().enumerate() {
        if argmax(ours) == reference[i] as usize {
            agree += 1;
        } else {
            assert!(margins[i] < SMALL_MARGIN, "{label}: step {i} disagrees although the reference margin is {}", margins[i]);
        }
    }
    (agree, logits.len())
}

#[test]
fn teacher_forced_greedy_agrees_with_llama_cpp() {
    let greedy = common::oracle("greedy.json");
    for precision in [CpuPrecision::Exact, CpuPrecision::Fast] {
        let (mut b, _) = load(precision);
        for case in greedy["cases"].as_array().expect("cases") {
            let reference = ids(&case["generated_ids"]);
            let margins: Vec<f64> =
                case["per_step_top1"].as_array().expect("steps").iter().map(|s| s["margin_to_2nd"].as_f64().expect("margin")).collect();
            let label = format!("{precision:?} {}", case["prompt_text"]);
            let (agree, n) = teacher_forced(&mut b, &ids(&case["prompt_ids"]), &reference, &margins, &label);
            eprintln!("teacher-forced {label:.60}: {agree}/{n} argmax agree with llama.cpp");
        }
    }
}

/// Greedy tokens of a generation on the real model, and its speculative counts.
fn greedy<B: Backend>(
    b: &mut B,
    tok: &tokenscope::tokenizer::Tokenizer,
    prompt: &[u32],
    speculative: Option<tokenscope::generation::speculative::SpeculativeParams>,
) -> (Vec<u32>, Option<tokenscope::generation::speculative::SpeculativeStats>) {
    use tokenscope::generation::generate::{Event, GenerateParams, Generation};
    b.truncate(0);
    let p = GenerateParams {
        sampling: tokenscope::sampler::SamplingParams::greedy(),
        max_tokens: 40,
        speculative,
        ..GenerateParams::default()
    };
    let mut g = Generation::new(prompt.to_vec(), p, tok, b.context_len()).expect("generation");
    let mut ids = Vec::new();
    loop {
        match pollster::block_on(g.step(b, tok)).expect("step") {
            Event::Step(s) => ids.push(s.token_id),
            Event::Finished(f) => return (ids, f.speculative),
        }
    }
}

#[test]
fn speculative_greedy_decoding_is_plain_greedy_on_the_real_model() {
    use tokenscope::generation::speculative::{Drafter, SpeculativeParams};
    let (mut b, tok) = load(CpuPrecision::Fast);
    let prompts =
        ["The capital of France is", "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\ndef fact(n):\n"];
    for text in prompts {
        let prompt = tok.encode(text).expect("encode");
        let (plain, _) = greedy(&mut b, &tok, &prompt, None);
        for drafter in [Drafter::SelfDraft, Drafter::Lookup] {
            let spec = SpeculativeParams { drafter, draft_tokens: 4, draft_layers: None };
            let (ids, stats) = greedy(&mut b, &tok, &prompt, Some(spec));
            let stats = stats.expect("stats");
            eprintln!(
                "{drafter:?} on {:?}: {} of {} drafted tokens kept, {} model passes for {} tokens",
                &text[..12],
                stats.accepted_tokens,
                stats.draft_tokens,
                stats.target_forward_passes,
                ids.len()
            );
            assert_eq!(ids, plain, "{drafter:?} on {text:?}");
        }
    }
}

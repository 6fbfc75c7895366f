//! The loop's interventions on the real model, on every backend (the CPU's fast and exact
//! paths, and the GPU: lavapipe where there is no GPU): a fork's logits equal a fresh prefill
//! of the same tokens, the loop without a KV cache gives the tokens and distributions of the
//! loop with it, and switching branches continues where the branch ended.
//! Native only: it reads the model file from disk. Each test prints what it measured.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use tokenscope::backend::cpu::{CpuBackend, CpuPrecision};
use tokenscope::backend::gpu::GpuBackend;
use tokenscope::backend::{AnyBackend, Backend};
use tokenscope::generation::generate::{Event, GenerateParams, Generation, StepEvent};
use tokenscope::model::Model;
use tokenscope::sampler::SamplingParams;
use tokenscope::tokenizer::Tokenizer;

/// Largest |difference| allowed between two ways of computing the same logits on one
/// backend (a batched prefill against cached decode steps). Measured here: 0 on all three
/// backends (each row and each attention sum runs in the same order either way); the
/// allowance is for devices whose matrix kernels sum a batch in another order.
const SAME_LOGITS_TOL: f32 = 2e-3;

fn backends() -> Vec<(&'static str, AnyBackend, Tokenizer)> {
    let load = || Model::open(&common::model_path()).expect("the default model loads");
    let mut out = Vec::new();
    for (label, precision) in [("cpu-fast", CpuPrecision::Fast), ("cpu-exact", CpuPrecision::Exact)] {
        let m = load();
        let b = CpuBackend::new(&m.config, m.weights, precision, Some(256)).expect("cpu");
        out.push((label, AnyBackend::Cpu(Box::new(b)), m.tokenizer));
    }
    let m = load();
    let gpu = pollster::block_on(GpuBackend::new(&m.config, m.weights, Some(256))).unwrap_or_else(|e| panic!("no GPU adapter: {e}"));
    out.push(("gpu", AnyBackend::Gpu(Box::new(gpu)), m.tokenizer));
    out
}

fn greedy(max_tokens: usize) -> GenerateParams {
    GenerateParams { sampling: SamplingParams::greedy(), max_tokens, top_n: 20, ..GenerateParams::default() }
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// One step that must produce a token; returns it with its logits.
fn step(g: &mut Generation, b: &mut AnyBackend, tok: &Tokenizer) -> (StepEvent, Vec<f32>) {
    match pollster::block_on(g.step_keeping_logits(b, tok)).expect("step") {
        (Event::Step(s), Some(logits)) => (s, logits),
        (other, _) => panic!("expected a step, got {other:?}"),
    }
}

#[test]
fn a_fork_gives_the_logits_of_a_fresh_prefill_of_the_same_tokens() {
    for (label, mut b, tok) in backends() {
        let prompt = tok.encode("The capital of France is").expect("encodes");
        let mut g = Generation::new(prompt.clone(), greedy(16), &tok, b.context_len()).expect("starts");
        let first: Vec<(StepEvent, Vec<f32>)> = (0..5).map(|_| step(&mut g, &mut b, &tok)).collect();
        // Branch at step 2 with the runner-up of that step.
        let runner_up = first[2].0.sample.distribution.candidates[1].token_id;
        g.rewind(2, &tok).expect("step 2 exists");
        assert_eq!(g.completion_len(), 2);
        g.force_next(runner_up);
        let (forced, forced_logits) = step(&mut g, &mut b, &tok);
        assert!(forced.sample.forced && forced.token_id == runner_up && forced.step == 2);
        assert_eq!(forced.sample.rank, 1, "{label}: the runner-up keeps its rank");
        assert_eq!(forced.forward_tokens, 1, "{label}: the fork re-ran one token, not the prompt");
        let d_same = max_abs_diff(&forced_logits, &first[2].1);
        let (after, after_logits) = step(&mut g, &mut b, &tok);
        assert!(!after.sample.forced);

        // A fresh backend state: the prompt, steps 0 and 1, the forced token, in one prefill.
        let mut fed = prompt.clone();
        fed.extend([first[0].0.token_id, first[1].0.token_id, runner_up]);
        b.truncate(0);
        let fresh = pollster::block_on(b.prefill(&fed)).expect("prefill");
        let d = max_abs_diff(&after_logits, &fresh);
        eprintln!("{label}: after the fork |logits - fresh prefill| = {d:.2e}; the fork step's own logits again: {d_same:.2e}");
        assert!(d <= SAME_LOGITS_TOL, "{label}: {d}");
        assert!(d_same <= SAME_LOGITS_TOL, "{label}: {d_same}");
    }
}

#[test]
fn without_the_kv_cache_the_loop_gives_the_same_tokens_and_distributions() {
    for (label, mut b, tok) in backends() {
        let prompt = tok.encode("Once upon a time").expect("encodes");
        let run = |b: &mut AnyBackend, kv_cache: bool| {
            let mut g = Generation::new(prompt.clone(), GenerateParams { kv_cache, ..greedy(6) }, &tok, b.context_len()).expect("starts");
            (0..6).map(|_| step(&mut g, b, &tok)).collect::<Vec<_>>()
        };
        let cached = run(&mut b, true);
        let naive = run(&mut b, false);
        let ids = |r: &[(StepEvent, Vec<f32>)]| r.iter().map(|(s, _)| s.token_id).collect::<Vec<_>>();
        assert_eq!(ids(&cached), ids(&naive), "{label}: same tokens");
        let mut worst_logit = 0.0f32;
        let mut worst_p = 0.0f32;
        for ((c, cl), (n, nl)) in cached.iter().zip(&naive) {
            worst_logit = worst_logit.max(max_abs_diff(cl, nl));
            let (cd, nd) = (&c.sample.distribution.candidates, &n.sample.distribution.candidates);
            for (x, y) in cd.iter().zip(nd) {
                assert_eq!(x.token_id, y.token_id, "{label}: step {}: same ranking", c.step);
                worst_p = worst_p.max((x.p_t1 - y.p_t1).abs());
            }
        }
        // With the cache one token runs per step; without it the whole sequence does.
        let cached_tokens: Vec<usize> = cached.iter().map(|(s, _)| s.forward_tokens).collect();
        let naive_tokens: Vec<usize> = naive.iter().map(|(s, _)| s.forward_tokens).collect();
        assert_eq!(cached_tokens, [vec![prompt.len()], vec![1; 5]].concat());
        assert_eq!(naive_tokens, (0..6).map(|k| prompt.len() + k).collect::<Vec<_>>());
        eprintln!("{label}: cache on vs off: worst |logit diff| {worst_logit:.2e}, worst |p diff| {worst_p:.2e}");
        assert!(worst_logit <= SAME_LOGITS_TOL, "{label}: {worst_logit}");
    }
}

#[test]
fn following_another_branch_continues_after_its_last_token() {
    let (label, mut b, tok) = backends().remove(0);
    let prompt = tok.encode("Hello, my name is").expect("encodes");
    let mut g = Generation::new(prompt.clone(), greedy(12), &tok, b.context_len()).expect("starts");
    let main: Vec<u32> = (0..4).map(|_| step(&mut g, &mut b, &tok).0.token_id).collect();
    // Another branch: fork at step 1 and run two steps there.
    g.rewind(1, &tok).expect("rewinds");
    let other = main[1] + 1;
    g.force_next(other);
    let branch: Vec<u32> = [main[0]].into_iter().chain((0..2).map(|_| step(&mut g, &mut b, &tok).0.token_id)).collect();
    assert_eq!(branch[1], other);
    // Back to the first branch: the next step is its step 4, with the logits of a fresh run.
    g.follow(&main, &tok);
    let (next, logits) = step(&mut g, &mut b, &tok);
    assert_eq!(next.step, 4);
    assert_eq!(next.forward_tokens, main.len() - 1, "{label}: only the tokens past the shared prefix ran again");
    let mut fed = prompt.clone();
    fed.extend(&main);
    b.truncate(0);
    let fresh = pollster::block_on(b.prefill(&fed)).expect("prefill");
    let d = max_abs_diff(&logits, &fresh);
    eprintln!("{label}: after switching back |logits - fresh prefill| = {d:.2e}");
    assert!(d <= SAME_LOGITS_TOL, "{d}");
}

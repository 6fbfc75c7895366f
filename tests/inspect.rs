//! A step seen from inside on the real model, on the CPU's exact and fast paths: every
//! attention row is a distribution over the positions before the step's token; the lens's
//! last layer is the step's own logits, bit for bit; what a step's own pass keeps while it is
//! watched equals that step recomputed on demand, and a recomputed step gives the logits seen
//! live; asking changes nothing in the run; the fast path's weights stay near the exact
//! path's; and a mixture of experts' picks are the same on the CPU and the GPU. Native only:
//! it reads the model file from disk.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use tokenscope::backend::cpu::{CpuBackend, CpuPrecision};
use tokenscope::backend::{Backend, Batching};
use tokenscope::generation::generate::{Event, GenerateParams, Generation};
use tokenscope::generation::inspect::{StepInside, LENS_TOP};
use tokenscope::model::Model;
use tokenscope::sampler::SamplingParams;
use tokenscope::tokenizer::{PromptFormat, Tokenizer};

/// How far a row of attention weights may sum from 1 (f32 division by the row's own sum).
const ROW_SUM_TOL: f32 = 1e-5;
/// How far one of the fast path's weights may sit from the exact path's: its 8-bit
/// activations move the queries and keys, and a sharp head's softmax magnifies that. Measured
/// here at most 7.1e-2 over 6 steps x 270 rows.
const FAST_WEIGHT_TOL: f32 = 0.15;
/// The same on average over every weight: the bulk of the weights barely moves.
const FAST_MEAN_TOL: f32 = 5e-3;

const STEPS: usize = 6;

/// How a test run looks inside its steps.
#[derive(Clone, Copy, PartialEq)]
enum Inside {
    /// Not at all.
    No,
    /// Each step recomputed right after it (`Generation::inspect`).
    Recomputed,
    /// Each step's own pass keeping it (`keep_inside`, `take_inside`).
    Live,
}

fn cpu(precision: CpuPrecision) -> (CpuBackend, Tokenizer) {
    let m = Model::open(&common::model_path()).expect("the default model loads");
    (CpuBackend::new(&m.config, m.weights, precision, Some(256)).expect("cpu"), m.tokenizer)
}

fn prompt(tok: &Tokenizer) -> Vec<u32> {
    tok.encode_prompt(&PromptFormat::Completion, "The capital of France is").expect("encodes")
}

fn params(steps: usize) -> GenerateParams {
    GenerateParams {
        sampling: SamplingParams { temperature: 0.8, ..SamplingParams::default() },
        max_tokens: steps,
        seed: 7,
        ..GenerateParams::default()
    }
}

/// Runs [`STEPS`] steps, looking inside each as `inside` says; returns the tokens, each
/// step's live logits and the inspections.
fn run(b: &mut impl Backend, tok: &Tokenizer, inside: Inside) -> (Vec<u32>, Vec<Vec<f32>>, Vec<StepInside>, Generation) {
    run_steps(b, tok, inside, STEPS)
}

/// [`run`] for `steps` steps.
fn run_steps(
    b: &mut impl Backend,
    tok: &Tokenizer,
    inside: Inside,
    steps: usize,
) -> (Vec<u32>, Vec<Vec<f32>>, Vec<StepInside>, Generation) {
    run_with(b, tok, inside, params(steps))
}

/// [`run`] with `params`.
fn run_with(
    b: &mut impl Backend,
    tok: &Tokenizer,
    inside: Inside,
    params: GenerateParams,
) -> (Vec<u32>, Vec<Vec<f32>>, Vec<StepInside>, Generation) {
    let mut g = Generation::new(prompt(tok), params, tok, b.context_len()).expect("starts");
    g.keep_inside(inside == Inside::Live);
    let (mut tokens, mut logits, mut insides) = (Vec::new(), Vec::new(), Vec::new());
    loop {
        match pollster::block_on(g.step_keeping_logits(b, tok)).expect("step") {
            (Event::Step(s), Some(l)) => {
                tokens.push(s.token_id);
                logits.push(l);
                match inside {
                    Inside::No => {
                        assert!(pollster::block_on(g.take_inside(b, true, tok)).expect("takes").is_none(), "a step not asked keeps nothing")
                    }
                    Inside::Recomputed => insides.push(pollster::block_on(g.inspect(b, s.step, true, tok)).expect("inspects")),
                    Inside::Live => {
                        insides.push(pollster::block_on(g.take_inside(b, true, tok)).expect("takes").expect("the step kept its inside"));
                        assert!(pollster::block_on(g.take_inside(b, true, tok)).expect("takes").is_none(), "taken once");
                    }
                }
            }
            (Event::Finished(_), _) => return (tokens, logits, insides, g),
            (other, _) => panic!("unexpected {other:?}"),
        }
    }
}

/// Checks every attention row of `insides` is a distribution over the prompt and the tokens
/// before its step; returns the worst |row sum - 1|.
fn check_rows(insides: &[StepInside], prompt_len: usize, what: &str) -> f32 {
    let mut worst = 0.0f32;
    for inside in insides {
        assert_eq!((inside.layers, inside.heads, inside.group), (30, 9, 3), "SmolLM2: 30 layers of 9 query heads, 3 to a KV head");
        assert_eq!(inside.positions, prompt_len + inside.step, "step {}: the prompt and the tokens before it", inside.step);
        assert_eq!(inside.attention.len(), 30 * 9 * inside.positions);
        for row in inside.attention.chunks_exact(inside.positions) {
            assert!(row.iter().all(|&w| (0.0..=1.0).contains(&w)), "{what}: a weight outside [0, 1]: {row:?}");
            let sum: f32 = row.iter().sum();
            worst = worst.max((sum - 1.0).abs());
        }
    }
    eprintln!("{what}: {} steps x 270 rows, worst |row sum - 1| {worst:.1e}", insides.len());
    assert!(worst <= ROW_SUM_TOL, "{what}: a row sums to 1 +- {worst}");
    worst
}

#[test]
fn attention_rows_are_distributions_over_the_positions_before_the_token() {
    for precision in [CpuPrecision::Exact, CpuPrecision::Fast] {
        let (mut b, tok) = cpu(precision);
        let (_, _, insides, _) = run(&mut b, &tok, Inside::Recomputed);
        check_rows(&insides, prompt(&tok).len(), &format!("{precision:?}"));
    }
}

/// Checks the lens's last layer of each step is the step's own distribution, bit for bit: its
/// top tokens, their probabilities, the chosen token's probability and rank.
fn check_lens(tokens: &[u32], logits: &[Vec<f32>], insides: &[StepInside]) {
    for ((inside, live), &chosen) in insides.iter().zip(logits).zip(tokens) {
        assert_eq!(inside.lens.len(), 30);
        let last = &inside.lens[29];
        assert_eq!(last.layer, 30);
        let p = tokenscope::sampler::softmax::softmax(live, 1.0).p;
        let want = tokenscope::sampler::ranking::top(live, LENS_TOP);
        let got: Vec<u32> = last.top.iter().map(|t| t.token_id).collect();
        assert_eq!(got, want, "step {}: the last layer's top tokens are the step's", inside.step);
        for t in &last.top {
            assert_eq!(t.probability.to_bits(), p[t.token_id as usize].to_bits(), "step {}: {t:?}", inside.step);
        }
        assert_eq!(last.chosen_probability.to_bits(), p[chosen as usize].to_bits());
        assert_eq!(last.chosen_rank, tokenscope::sampler::ranking::rank_of(live, chosen) + 1);
        for layer in &inside.lens {
            assert_eq!(layer.top.len(), LENS_TOP);
            assert!(layer.chosen_rank >= 1 && layer.chosen_probability >= 0.0);
        }
    }
}

#[test]
fn the_last_layer_of_the_lens_is_the_steps_distribution_bit_for_bit() {
    for precision in [CpuPrecision::Exact, CpuPrecision::Fast] {
        let (mut b, tok) = cpu(precision);
        let (tokens, logits, insides, _) = run(&mut b, &tok, Inside::Live);
        check_lens(&tokens, &logits, &insides);
        let ranks: Vec<usize> = insides[0].lens.iter().map(|l| l.chosen_rank).collect();
        eprintln!("{precision:?}: step 0's chosen token's rank after each layer: {ranks:?}");
    }
}

#[test]
fn a_past_step_recomputed_on_demand_gives_the_logits_seen_live_and_the_run_goes_on_unchanged() {
    let (mut b, tok) = cpu(CpuPrecision::Fast);
    let (plain_tokens, live, _, _) = run(&mut b, &tok, Inside::No);
    for inside in [Inside::Recomputed, Inside::Live] {
        b.truncate(0);
        let (inspected_tokens, inspected_live, _, _) = run(&mut b, &tok, inside);
        assert_eq!(inspected_tokens, plain_tokens, "inspecting each step changes no token");
        assert_eq!(inspected_live, live, "nor any step's logits");
    }
    // What each step's own pass kept (the prompt's step through a prefill of all but its
    // last token, then that token) against every past step again, latest first, from the
    // finished run: the same attention and lens.
    b.truncate(0);
    let (_, _, insides, mut g) = run(&mut b, &tok, Inside::Live);
    for step in (0..STEPS).rev() {
        let again = pollster::block_on(g.inspect(&mut b, step, true, &tok)).expect("inspects");
        assert_eq!(again.attention, insides[step].attention, "step {step}: the attention seen live");
        assert_eq!(again.lens, insides[step].lens, "step {step}: the lens seen live");
        let attention_only = pollster::block_on(g.inspect(&mut b, step, false, &tok)).expect("inspects");
        assert_eq!(attention_only.attention, insides[step].attention, "step {step}: the attention without the lens");
        assert!(attention_only.lens.is_empty(), "no lens asked, none computed");
    }
    let context = g.tokens().to_vec();
    let prompt_len = g.prompt_len();
    for (step, seen) in live.iter().enumerate() {
        let (logits, _) = pollster::block_on(tokenscope::generation::inspect::recompute(
            &mut b,
            &context,
            prompt_len,
            0,
            step,
            if step == 0 { Batching::Prefill } else { Batching::Natural },
        ))
        .expect("recomputes");
        assert_eq!(&logits, seen, "step {step}: recomputed from an empty cache");
    }
    assert!(pollster::block_on(g.inspect(&mut b, STEPS, true, &tok)).is_err(), "a step not taken yet is refused");
}

#[test]
fn with_the_kv_cache_off_a_watched_step_keeps_what_recomputing_it_gives() {
    // Every step a prefill of the whole context: its own pass runs all but the last token,
    // then the last one keeping its inside.
    let (mut b, tok) = cpu(CpuPrecision::Fast);
    let no_cache = GenerateParams { kv_cache: false, ..params(4) };
    let (plain_tokens, plain_logits, _, _) = run_with(&mut b, &tok, Inside::No, no_cache.clone());
    b.truncate(0);
    let (tokens, logits, insides, mut g) = run_with(&mut b, &tok, Inside::Live, no_cache);
    assert_eq!((tokens, logits), (plain_tokens, plain_logits), "keeping the inside changes no token and no logit");
    for (step, live) in insides.iter().enumerate() {
        let again = pollster::block_on(g.inspect(&mut b, step, true, &tok)).expect("inspects");
        assert_eq!((&again.attention, &again.lens), (&live.attention, &live.lens), "step {step}");
    }
}

#[test]
fn a_speculative_rounds_steps_keep_no_inside_and_are_recomputed() {
    let (mut b, tok) = cpu(CpuPrecision::Fast);
    let spec = GenerateParams { speculative: Some(Default::default()), ..params(STEPS) };
    let mut g = Generation::new(prompt(&tok), spec, &tok, b.context_len()).expect("starts");
    g.keep_inside(true);
    let mut rounds = 0;
    while let Event::Step(s) = pollster::block_on(g.step(&mut b, &tok)).expect("step") {
        let kept = pollster::block_on(g.take_inside(&mut b, false, &tok)).expect("takes");
        // The prompt's step is a plain pass; every later one comes from a round.
        assert_eq!(kept.is_some(), s.draft.is_none(), "step {}: kept an inside only outside a round", s.step);
        rounds += usize::from(s.draft.is_some());
        if s.draft.is_some() {
            let again = pollster::block_on(g.inspect(&mut b, s.step, false, &tok)).expect("a round's step is recomputed");
            assert_eq!(again.step, s.step);
        }
    }
    assert!(rounds > 0, "the run went through speculative rounds");
}

#[test]
fn the_fast_paths_attention_stays_near_the_exact_paths() {
    let (mut exact, tok) = cpu(CpuPrecision::Exact);
    let (mut fast, _) = cpu(CpuPrecision::Fast);
    let context = {
        let (tokens, _, _, g) = run(&mut exact, &tok, Inside::No);
        assert_eq!(tokens.len(), STEPS);
        g.tokens().to_vec()
    };
    let prompt_len = prompt(&tok).len();
    let (mut worst, mut total, mut count) = (0.0f32, 0.0f64, 0usize);
    for step in 0..STEPS {
        let (_, a) =
            pollster::block_on(tokenscope::generation::inspect::recompute(&mut exact, &context, prompt_len, 0, step, Batching::Natural))
                .expect("exact");
        let (_, f) =
            pollster::block_on(tokenscope::generation::inspect::recompute(&mut fast, &context, prompt_len, 0, step, Batching::Natural))
                .expect("fast");
        for (x, y) in a.attention.iter().zip(&f.attention) {
            worst = worst.max((x - y).abs());
            total += f64::from((x - y).abs());
            count += 1;
        }
    }
    let mean = (total / count as f64) as f32;
    eprintln!("fast vs exact attention weights over {STEPS} steps: worst |difference| {worst:.2e}, mean {mean:.2e}");
    assert!(worst <= FAST_WEIGHT_TOL, "fast path's weights {worst} from the exact path's");
    assert!(mean <= FAST_MEAN_TOL, "fast path's weights {mean} from the exact path's on average");
}

/// Steps the GPU test runs (lavapipe takes about 2 s a decode step and 5 s a lens here).
const GPU_STEPS: usize = 3;
/// How far the GPU's attention weights may sit from the exact CPU path's: both compute in
/// f32, in other orders, so the scores differ in their last bits (the logits by about 4e-5).
/// Measured on lavapipe: 2.9e-6.
const GPU_WEIGHT_TOL: f32 = 1e-4;

/// The GPU (lavapipe here, any adapter elsewhere) inside a step: rows are distributions, the
/// lens's last layer is the step's logits bit for bit, the weights stay near the exact CPU
/// path's, a step's own pass keeping its inside changes no token and no logit, and a past
/// step recomputed gives what that pass kept.
#[test]
fn the_gpu_shows_the_inside_the_exact_path_shows() {
    let m = Model::open(&common::model_path()).expect("the default model loads");
    let mut gpu = match pollster::block_on(tokenscope::backend::gpu::GpuBackend::new(&m.config, m.weights, Some(256))) {
        Ok(b) => b,
        Err(e) => panic!("{e}: the GPU tests need an adapter (run scripts/setup.sh)"),
    };
    let tok = m.tokenizer;
    let (plain_tokens, plain_logits, _, _) = run_steps(&mut gpu, &tok, Inside::No, GPU_STEPS);
    gpu.truncate(0);
    let (tokens, logits, insides, mut g) = run_steps(&mut gpu, &tok, Inside::Live, GPU_STEPS);
    assert_eq!(tokens, plain_tokens, "inspecting each step changes no token");
    for (step, (a, b)) in logits.iter().zip(&plain_logits).enumerate() {
        assert!(a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()), "inspecting changed step {step}'s logits");
    }
    let prompt_len = prompt(&tok).len();
    check_rows(&insides, prompt_len, "GPU");
    check_lens(&tokens, &logits, &insides);
    let again = pollster::block_on(g.inspect(&mut gpu, 0, true, &tok)).expect("inspects");
    assert_eq!(again.attention, insides[0].attention, "step 0 recomputed: the attention seen live");
    assert_eq!(again.lens, insides[0].lens, "step 0 recomputed: the lens seen live");
    let (mut exact, _) = cpu(CpuPrecision::Exact);
    let context = g.tokens().to_vec();
    let mut worst = 0.0f32;
    for (step, inside) in insides.iter().enumerate() {
        let (_, want) =
            pollster::block_on(tokenscope::generation::inspect::recompute(&mut exact, &context, prompt_len, 0, step, Batching::Natural))
                .expect("exact");
        for (x, y) in inside.attention.iter().zip(&want.attention) {
            worst = worst.max((x - y).abs());
        }
        let gpu_ranks: Vec<usize> = inside.lens.iter().map(|l| l.chosen_rank).collect();
        eprintln!("GPU step {step}: the chosen token's rank after each layer: {gpu_ranks:?}");
    }
    eprintln!("GPU vs exact attention weights over {GPU_STEPS} steps: worst |difference| {worst:.2e}");
    assert!(worst <= GPU_WEIGHT_TOL, "the GPU's weights {worst} from the exact path's");
    // A token first computed inside a verify pass (a speculative round's check), recomputed
    // with Batching::Verify, gives its row of that pass's logits bit for bit.
    let ids = &context[..prompt_len + 2];
    gpu.truncate(0);
    pollster::block_on(gpu.prefill(&ids[..prompt_len - 1])).expect("prefill");
    let rows = pollster::block_on(gpu.verify(&ids[prompt_len - 1..])).expect("verify");
    let vocab = rows.len() / 3;
    gpu.truncate(prompt_len);
    let (again, _) = pollster::block_on(gpu.inspect(ids[prompt_len], Batching::Verify)).expect("inspects");
    assert!(again.iter().zip(&rows[vocab..2 * vocab]).all(|(x, y)| x.to_bits() == y.to_bits()), "a verify pass's row recomputed");
}

/// A mixture of experts seen from inside (Qwen3-MoE's fixture, tests/fixtures/architectures:
/// 2 layers of 8 experts, 3 picked a token, renormalized): each layer's picks for the
/// inspected token are 3 distinct experts, most probable first, weights summing to 1; the
/// GPU's (read back from its pick kernel's buffer) are the exact path's experts in the same
/// order with the same weights within 1e-5, for a token after 3, 5 and 6 others; a dense
/// model's inspection holds none.
#[test]
fn a_mixture_of_experts_shows_each_layers_picks_alike_on_the_cpu_and_the_gpu() {
    use tokenscope::backend::gpu::GpuBackend;
    let bytes = std::fs::read("tests/fixtures/architectures/qwen3moe.gguf").expect("the fixture");
    let load = || Model::read(&mut std::io::Cursor::new(&bytes), &mut |_, _| {}).expect("the fixture loads");
    let m = load();
    let mut exact = CpuBackend::new(&m.config, m.weights, CpuPrecision::Exact, Some(64)).expect("cpu");
    let m = load();
    let mut gpu = pollster::block_on(GpuBackend::new(&m.config, m.weights, Some(64))).expect("a GPU adapter (lavapipe in CI)");
    let tokens = [40u32, 7, 120, 33, 250, 9, 71];
    for at in [3usize, 5, 6] {
        reset_to(&mut exact, &tokens[..at]);
        reset_to(&mut gpu, &tokens[..at]);
        let (_, want) = pollster::block_on(exact.inspect(tokens[at], Batching::Natural)).expect("the CPU inspects");
        let (_, got) = pollster::block_on(gpu.inspect(tokens[at], Batching::Natural)).expect("the GPU inspects");
        assert_eq!((want.experts.len(), want.expert_count), (2, 8), "a list of picks a layer, of 8 experts");
        for (l, (w, g)) in want.experts.iter().zip(&got.experts).enumerate() {
            assert_eq!(w.len(), 3, "layer {l} picks 3");
            let ids: Vec<u32> = w.iter().map(|p| p.expert).collect();
            assert!(ids.iter().all(|&e| e < 8) && (1..3).all(|i| !ids[..i].contains(&ids[i])), "layer {l}'s picks {ids:?}");
            assert!(w.windows(2).all(|p| p[0].weight >= p[1].weight), "layer {l}'s weights fall: {w:?}");
            assert!((w.iter().map(|p| p.weight).sum::<f32>() - 1.0).abs() < 1e-5, "layer {l}'s weights sum to 1: {w:?}");
            assert_eq!(g.iter().map(|p| p.expert).collect::<Vec<_>>(), ids, "token {at}, layer {l}: the GPU's picks");
            assert!(w.iter().zip(g).all(|(a, b)| (a.weight - b.weight).abs() < 1e-5), "token {at}, layer {l}: {w:?} vs {g:?}");
        }
    }
    let (mut dense, _) = cpu(CpuPrecision::Exact);
    pollster::block_on(dense.prefill(&[1, 2, 3])).expect("prefill");
    let (_, inside) = pollster::block_on(dense.inspect(4, Batching::Natural)).expect("inspects");
    assert!(inside.experts.is_empty() && inside.expert_count == 0, "a dense model picks no experts");
}

/// `b` brought to hold exactly `tokens` in its cache.
fn reset_to(b: &mut impl Backend, tokens: &[u32]) {
    b.truncate(0);
    pollster::block_on(b.prefill(tokens)).expect("prefill");
}

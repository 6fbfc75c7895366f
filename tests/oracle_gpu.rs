//! The real model on the GPU (lavapipe where there is no GPU) against exact math
//! (`tests/fixtures/oracle/numpy_ref.json`) and against the exact CPU path; teacher-forced greedy
//! agreement with llama.cpp; decode vs prefill; truncate and regenerate. A software adapter
//! takes about 1.7 s a decode step and 0.6 s a prompt token here, so each check runs the
//! fewest steps that still reach what it checks.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::{argmax, ids, max_diff};

use tokenscope::backend::cpu::{CpuBackend, CpuPrecision};
use tokenscope::backend::gpu::kernels::{self, KernelOptions};
use tokenscope::backend::gpu::step::{RunAheadCounts, MAX_RUN_AHEAD};
use tokenscope::backend::gpu::{GpuBackend, GpuContext};
use tokenscope::backend::{Backend, Pass};
use tokenscope::generation::generate::{Event, GenerateParams, Generation};
use tokenscope::model::Model;
use tokenscope::sampler::{ranking, SamplingParams};

/// GPU vs exact64: the same f32 math as the exact CPU path, other summation orders.
const TOL: f64 = 1e-2;

/// The same with a half-float KV cache: the cache's rounding (up to a relative 2^-11 on
/// every key and value) moves the logits further. Measured on lavapipe over the oracle's
/// cases: worst 1.31e-2 against exact math, 2.11e-2 against the exact CPU path over all
/// 49,152 logits (the greedy token the same at every step); 5e-2 leaves room for other
/// adapters' roundings.
const TOL_KV_F16: f64 = 5e-2;

fn gpu() -> GpuBackend {
    let ctx = pollster::block_on(GpuContext::new()).unwrap_or_else(|e| panic!("{e}"));
    let options = KernelOptions::for_device(&ctx);
    if ctx.info.software && ctx.info.subgroups {
        assert_eq!(options.rows_per_subgroup, 4, "a software adapter's pick takes four rows a subgroup");
    }
    gpu_with(ctx, options)
}

fn gpu_with(ctx: GpuContext, options: KernelOptions) -> GpuBackend {
    let m = Model::open(&common::model_path()).expect("model");
    let cfg = m.config.clone();
    let b = pollster::block_on(GpuBackend::with_options(ctx, &cfg, m.weights, Some(256), options)).unwrap_or_else(|e| panic!("{e}"));
    let s = b.step_shape();
    eprintln!("kernels: {options:?}");
    eprintln!(
        "GPU {}: {} dispatches, {} pass, {} submit, {} bytes read back per step, {:.1} MB on the GPU",
        b.gpu_info().name,
        s.dispatches,
        s.passes,
        s.submits,
        s.readback_bytes,
        s.gpu_bytes as f64 / 1e6
    );
    b
}

#[test]
fn gpu_logits_match_exact_math_and_the_exact_cpu_path() {
    check_exact(&mut gpu(), TOL, ALL_CASES);
}

/// Every logits case of the oracle: prompts of 1 to 66 tokens (one of them two prefill passes).
const ALL_CASES: usize = usize::MAX;

/// The oracle's first three cases (prompts of 5, 5 and 1 tokens, 12 steps): enough to take a
/// kernel variant through every layer of prefill and decode, at a quarter of the whole
/// oracle's time on a software adapter (about 1.7 s a step on lavapipe).
const SHORT_CASES: usize = 3;

// The kernel variants besides the device's own pick (on lavapipe: subgroup reductions, one
// thread a row taking four rows a subgroup in workgroups of 64, an f32 cache), through the
// whole model on the oracle's short cases, each its own test (a test binary runs two at a
// time): exact math's tolerance for the f32 cache, the half-float cache within its own.

fn new_ctx() -> GpuContext {
    let ctx = pollster::block_on(GpuContext::new()).unwrap_or_else(|e| panic!("{e}"));
    assert!(ctx.info.subgroups, "{} offers no subgroups: the subgroup kernels would go untested", ctx.info.name);
    ctx
}

/// Subgroups in a hardware GPU's shape (32 threads per row, workgroups of 256: 8 rows each,
/// each row over 4 of lavapipe's subgroups of 8; prefill 8 threads per row, 32 rows each),
/// a decode row's units in flight fitted to it as a GPU's default has them (3 a thread in
/// the rows of 576 columns, 6 in the down projection's, 5 in the LM head's), with every
/// step's attention in the output projection.
#[test]
fn gpu_in_a_hardware_gpus_shape_matches_exact_math() {
    let options = KernelOptions {
        workgroup: 256,
        subgroups: true,
        fit_units_in_flight: true,
        prefill_threads_per_row: 8,
        fused_positions: kernels::ATTENTION_CHUNK as u32,
        ..KernelOptions::plain(32)
    };
    check_exact(&mut gpu_with(new_ctx(), options), TOL, SHORT_CASES);
}

/// Plain reductions, one thread a row loading 4 units of it at once (the default is 2), with
/// split-K attention from the first decode step (a hardware GPU's default in a browser:
/// `kernels::BROWSER_FUSED_ATTENTION_POSITIONS`; the hardware shape's test runs every step's
/// attention in the output projection instead). One row a subgroup (a GPU's default; a
/// software adapter's pick, the whole oracle's, takes four: two SwiGLU or RoPE pairs, or four
/// rows of every other matrix, in one of lavapipe's subgroups of 8) runs in the hardware
/// shape's test, two in the per-head test.
#[test]
fn gpu_plain_reductions_match_exact_math() {
    let options =
        KernelOptions { units_in_flight: 4, fused_positions: kernels::BROWSER_FUSED_ATTENTION_POSITIONS as u32, ..KernelOptions::plain(1) };
    let mut g = gpu_with(new_ctx(), options);
    assert_eq!(g.step_shape().dispatches, 5 * 30 + 2, "split-K's part 1 a dispatch of its own in every step");
    check_exact(&mut g, TOL, SHORT_CASES);
}

/// The short context's output projection per query head, its parts merged by the
/// feed-forward's matrices (`--per-head-attention`), through the whole model on the oracle's
/// short cases, over a half-float cache, within the cache's own tolerance: with subgroups (the
/// merges' subgroup reductions; 8 threads a row in workgroups of 64, where a GPU's 32 in 256 run
/// four times slower on lavapipe, and `gpu_in_a_hardware_gpus_shape_matches_exact_math` takes
/// that shape through the model) taking two rows at once (the per-head projection's 8 units
/// a row fitted as a GPU's: one a thread), with chunks of 7 positions, so the
/// steps past the seventh position merge two and three chunks per head. Every layer takes that
/// form (this model's output projection is Q4_1: a head of 64 columns is two whole blocks).
/// The cache's rounding must show, and it must take two bytes a value. Each run of the model's
/// short cases costs one to two minutes on a slow lavapipe (a variant's pipelines compiled
/// cold, then the model run), so one run takes the per-head form, two rows a subgroup and the
/// half-float cache together (the kernel tests take each apart).
#[test]
fn gpu_per_head_attention_matches_exact_math() {
    let options = KernelOptions {
        subgroups: true,
        kv_f16: true,
        per_head_attention: true,
        fused_positions: 64,
        split_chunk: 7,
        rows_per_subgroup: 2,
        fit_units_in_flight: true,
        ..KernelOptions::plain(8)
    };
    let mut g = gpu_with(new_ctx(), options);
    assert_eq!(g.step_shape().per_head_layers, 30, "every layer runs the projection per head");
    assert_eq!(g.step_shape().dispatches, 4 * 30 + 2, "4 dispatches a layer");
    let worst = check_exact(&mut g, TOL_KV_F16, SHORT_CASES);
    // The cache's rounding must show: a half-float cache that stayed f32 would be as exact.
    assert!(worst > 1e-4, "the half-float cache is as exact as an f32 one ({worst:.2e}): is it half?");
    assert_eq!(g.kv_cache_bytes(), g.position() * 30 * 2 * 192 * 2, "two bytes per cached value");
}

/// Checks the oracle's first `cases` logits cases on `g` against exact math and the exact CPU
/// path, within `tol`; returns the worst difference against exact math.
fn check_exact(g: &mut GpuBackend, tol: f64, cases: usize) -> f64 {
    let m = Model::open(&common::model_path()).expect("model");
    let cfg = m.config.clone();
    let mut cpu = CpuBackend::new(&cfg, m.weights, CpuPrecision::Exact, Some(256)).expect("cpu");
    let reference = common::oracle("numpy_ref.json");
    let (mut worst, mut worst_cpu, mut n) = (0.0f64, 0.0f32, 0);
    for case in reference["logits_cases"].as_array().expect("cases").iter().take(cases) {
        g.truncate(0);
        cpu.truncate(0);
        let prompt = ids(&case["prompt_ids"]);
        let fed = ids(&case["greedy_tokens_fed"]);
        let mut ours = vec![pollster::block_on(g.prefill(&prompt)).expect("prefill")];
        let mut twin = vec![pollster::block_on(cpu.prefill(&prompt)).expect("prefill")];
        for &t in &fed {
            ours.push(pollster::block_on(g.decode(t)).expect("decode"));
            twin.push(pollster::block_on(cpu.decode(t)).expect("decode"));
        }
        for ((o, c), step) in ours.iter().zip(&twin).zip(case["steps"].as_array().expect("steps")) {
            let d = max_diff(o, step);
            assert!(d < tol, "{}: position {}: |GPU - exact64| = {d}", case["prompt_text"], step["position"]);
            assert_eq!(argmax(o) as u64, step["top"][0][0].as_u64().expect("id"));
            let dc = o.iter().zip(c).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!((dc as f64) < tol, "GPU vs exact CPU over the whole vocabulary: {dc}");
            worst = worst.max(d);
            worst_cpu = worst_cpu.max(dc);
            n += 1;
        }
    }
    eprintln!("GPU vs exact64: worst |logit diff| {worst:.2e} over {n} steps; vs exact CPU (all 49,152 logits) {worst_cpu:.2e}");
    worst
}

/// A prefill pass gives the logits token-by-token decoding gives: a whole first pass (5 prompt
/// tokens, causal attention inside the pass) against 5 decode steps, and a pass after a full
/// one (64 tokens cached by one pass of [`PREFILL_BATCH`], then 6 in a second pass attending
/// to them) against those 6 decoded one at a time on the same cache; then greedy tokens, the
/// cache truncated back and generated again, are the same, logits bit for bit (each step's
/// commands encoded ahead, while the step before ran, the first time; just before its submit
/// the second).
///
/// [`PREFILL_BATCH`]: tokenscope::backend::gpu::activations::PREFILL_BATCH
#[test]
fn gpu_prefill_equals_decode_and_truncate_regenerates() {
    let mut g = gpu();
    let batch = tokenscope::backend::gpu::activations::PREFILL_BATCH;
    let prompt: Vec<u32> = [504, 3575, 282, 4649, 314].repeat(14);
    let (first, rest) = prompt.split_at(batch);
    let stepwise = |g: &mut GpuBackend, tokens: &[u32]| {
        tokens.iter().map(|&t| pollster::block_on(g.decode(t)).expect("decode")).last().expect("tokens")
    };
    let gap = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);

    let batched = pollster::block_on(g.prefill(&first[..5])).expect("prefill");
    g.truncate(0);
    let d_first = gap(&batched, &stepwise(&mut g, &first[..5]));

    g.truncate(0);
    pollster::block_on(g.prefill(first)).expect("prefill");
    let batched = pollster::block_on(g.prefill(rest)).expect("prefill");
    g.truncate(batch);
    let decoded = stepwise(&mut g, rest);
    let d_second = gap(&batched, &decoded);
    eprintln!(
        "GPU prefill vs token-by-token decode: worst |logit diff| {d_first:.2e} for a first pass of 5 tokens, \
         {d_second:.2e} for a pass of {} after {batch} cached by a full pass",
        rest.len()
    );
    assert!(d_first < 1e-4, "a first prefill pass vs decode: {d_first}");
    assert!(d_second < 1e-4, "a prefill pass after a full one vs decode: {d_second}");
    // Greedy from here, each step's commands encoded while the step before ran (the
    // default), then truncate back and generate again with each step encoding its own: the
    // same tokens, and the same logits bit for bit.
    let run = |g: &mut GpuBackend, first: &[f32]| {
        let mut logits = first.to_vec();
        let mut out = Vec::new();
        for _ in 0..4 {
            let t = argmax(&logits) as u32;
            logits = pollster::block_on(g.decode(t)).expect("decode");
            out.push((t, logits.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()));
        }
        out
    };
    let a = run(&mut g, &decoded);
    g.truncate(prompt.len());
    g.set_encode_ahead(false);
    let b = run(&mut g, &decoded);
    g.set_encode_ahead(true);
    assert!(
        a == b,
        "encoded ahead vs each step its own: tokens {:?} vs {:?}",
        a.iter().map(|s| s.0).collect::<Vec<_>>(),
        b.iter().map(|s| s.0).collect::<Vec<_>>()
    );
    assert_eq!(g.kv_cache_bytes(), g.position() * 30 * 2 * 192 * 4);
}

/// Greedy decoding with the GPU running each step ahead on its own argmax
/// ([`Pass::run_ahead`]) gives the plain steps' tokens and logits bit for bit, one step ahead
/// (the default) and three (each on the argmax of the one before, each read back into its own
/// buffer). A token other than the argmax (as a forced one is) drops the steps run ahead and
/// runs its own, as does a truncate back past them; every run-ahead step a pass took is
/// counted as taken, every other as dropped.
#[test]
fn gpu_run_ahead_gives_the_plain_steps_logits_and_drops_a_wrong_guess() {
    let mut g = gpu();
    let prompt = [504u32, 3575, 282, 4649, 314];
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
    let pass = |g: &mut GpuBackend, tokens: &[u32], run_ahead: usize| {
        let layers = g.layers();
        pollster::block_on(g.forward(tokens, Pass { run_ahead, ..Pass::last(layers) })).expect("pass")
    };
    // The prompt, then 5 steps: the argmax, but at step 3 the second-ranked token.
    let script = |g: &mut GpuBackend, run_ahead: usize| {
        g.truncate(0);
        let mut f = pass(g, &prompt, run_ahead);
        let mut out = Vec::new();
        for step in 0..5 {
            let ranked = ranking::top(&f.logits, 2);
            let t = if step == 3 { ranked[1] } else { ranked[0] };
            f = pass(g, &[t], run_ahead);
            out.push((t, bits(&f.logits), f.ran_ahead));
        }
        out
    };
    // Each pass asks for more steps ahead than the backend keeps: it runs its own number.
    let asked = 5;
    let plain = script(&mut g, 0);
    assert_eq!(g.run_ahead_counts(), RunAheadCounts::default(), "plain passes run nothing ahead");
    let tokens = |run: &[(u32, Vec<u32>, bool)]| run.iter().map(|s| s.0).collect::<Vec<u32>>();
    let same_as_plain = |run: &[(u32, Vec<u32>, bool)], what: &str| {
        assert_eq!(tokens(run), tokens(&plain), "{what} vs plain: the tokens");
        for (i, (a, p)) in run.iter().zip(&plain).enumerate() {
            assert!(a.1 == p.1, "step {i}: the logits {what} differ from the plain step's");
        }
        assert_eq!(run.iter().map(|s| s.2).collect::<Vec<bool>>(), [true, true, true, false, true], "{what}: which steps were run ahead");
    };
    assert!(plain.iter().all(|s| !s.2), "a plain pass never ran ahead");
    assert!(g.set_run_ahead_steps(MAX_RUN_AHEAD + 1).is_err(), "more than the backend can keep");
    // One step ahead (the default), then three: the second-ranked token at step 3 drops what
    // was queued after step 2 (1, then 3 steps), and a truncate back to position 7 what was
    // queued after step 4 (from position 10); step 2's token then runs again there, with
    // step 2's logits. (taken, dropped) after the run and after the truncate, counted since load:
    for (steps, after_run, after_truncate) in [(1, (4, 1), (4, 2)), (3, (8, 5), (8, 8))] {
        g.set_run_ahead_steps(steps).expect("a count the backend keeps");
        let run = script(&mut g, asked);
        same_as_plain(&run, &format!("run {steps} ahead"));
        let counts = |(taken, dropped)| RunAheadCounts { taken, dropped };
        assert_eq!(g.run_ahead_counts(), counts(after_run), "{steps} ahead");
        g.truncate(prompt.len() + 2);
        let again = pass(&mut g, &[run[2].0], 0);
        assert!(!again.ran_ahead);
        assert!(bits(&again.logits) == plain[2].1, "step 2 again after a truncate past {steps} run-ahead steps");
        assert_eq!(g.run_ahead_counts(), counts(after_truncate), "{steps} ahead, then the truncate");
    }
}

/// Sampled steps asked to run ahead on the GPU's argmax
/// ([`Generation::run_ahead_sampled`]) draw the same tokens from the same seed as steps that
/// wait for their logits: each pass after the first finds a step run ahead, taken where the
/// draw before it was the argmax (its rank 0) and dropped otherwise, and nothing runs ahead of
/// the last.
#[test]
fn gpu_sampled_steps_run_ahead_draw_the_same_tokens() {
    let mut g = gpu();
    let tok = Model::open(&common::model_path()).expect("model").tokenizer;
    let prompt = [504u32, 3575, 282, 4649, 314];
    let steps = 6;
    let sampling = SamplingParams { temperature: 1.2, top_k: 0, top_p: 1.0, ..SamplingParams::default() };
    let run = |g: &mut GpuBackend, ahead: bool| {
        g.truncate(0);
        let params = GenerateParams { sampling: sampling.clone(), seed: 5, max_tokens: steps, ..GenerateParams::default() };
        let mut generation = Generation::new(prompt.to_vec(), params, &tok, g.context_len()).expect("generation");
        generation.run_ahead_sampled(ahead);
        let mut drawn = Vec::new();
        while let Event::Step(s) = pollster::block_on(generation.step(g, &tok)).expect("step") {
            drawn.push((s.token_id, s.sample.rank));
        }
        drawn
    };
    let plain = run(&mut g, false);
    assert_eq!(g.run_ahead_counts(), RunAheadCounts::default(), "a sampled step waits for its logits unless asked");
    let ahead = run(&mut g, true);
    assert_eq!(ahead, plain, "(token, rank) of each step, run ahead against not");
    let argmax_draws = plain[..steps - 1].iter().filter(|(_, rank)| *rank == 0).count();
    eprintln!("ranks drawn: {:?}", plain.iter().map(|(_, rank)| rank).collect::<Vec<_>>());
    assert_eq!(g.run_ahead_counts(), RunAheadCounts { taken: argmax_draws, dropped: steps - 1 - argmax_draws });
}

#[test]
fn gpu_teacher_forced_greedy_agrees_with_llama_cpp() {
    let mut g = gpu();
    let greedy = common::oracle("greedy.json");
    // The first case's first 24 of llama.cpp's 48 tokens (up to 1.5 s a step on a slow
    // lavapipe; the exact CPU path is held to all of them in oracle_cpu.rs).
    for case in greedy["cases"].as_array().expect("cases").iter().take(1) {
        let reference: Vec<u32> = ids(&case["generated_ids"]).into_iter().take(24).collect();
        let margins: Vec<f64> =
            case["per_step_top1"].as_array().expect("steps").iter().map(|s| s["margin_to_2nd"].as_f64().expect("margin")).collect();
        g.truncate(0);
        let mut logits = pollster::block_on(g.prefill(&ids(&case["prompt_ids"]))).expect("prefill");
        let mut agree = 0;
        for (i, &t) in reference.iter().enumerate() {
            if argmax(&logits) == t as usize {
                agree += 1;
            } else {
                assert!(margins[i] < 0.5, "step {i} disagrees although llama.cpp's margin is {}", margins[i]);
            }
            if i + 1 < reference.len() {
                logits = pollster::block_on(g.decode(t)).expect("decode");
            }
        }
        eprintln!("GPU teacher-forced {:.40}: {agree}/{} argmax agree with llama.cpp", case["prompt_text"].to_string(), reference.len());
    }
}

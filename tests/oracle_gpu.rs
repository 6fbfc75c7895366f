//! The real model on the GPU (lavapipe where there is no GPU) against exact math
//! (`tests/fixtures/oracle/numpy_ref.json`) and against the exact CPU path; teacher-forced greedy
//! agreement with llama.cpp; decode vs prefill; truncate and regenerate.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::{argmax, ids, max_diff};

use tokenscope::backend::cpu::{CpuBackend, CpuPrecision};
use tokenscope::backend::gpu::kernels::KernelOptions;
use tokenscope::backend::gpu::{GpuBackend, GpuContext};
use tokenscope::backend::Backend;
use tokenscope::model::Model;

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
    check_exact(&mut gpu(), TOL);
}

/// The kernel variants besides the device's own pick (on lavapipe: subgroup reductions, 64
/// rows per workgroup, an f32 cache), through the whole model: plain reductions and subgroups
/// on 8 rows per workgroup (a hardware GPU's) within the same tolerance, and the half-float
/// cache within its own.
#[test]
fn gpu_plain_subgroup_and_half_float_cache_variants_match_exact_math() {
    let new_ctx = || pollster::block_on(GpuContext::new()).unwrap_or_else(|e| panic!("{e}"));
    let ctx = new_ctx();
    assert!(ctx.info.subgroups, "{} offers no subgroups: the subgroup kernels would go untested", ctx.info.name);
    check_exact(&mut gpu_with(ctx, KernelOptions { threads_per_row: 8, subgroups: true, kv_f16: false }), TOL);
    check_exact(&mut gpu_with(new_ctx(), KernelOptions::plain(1)), TOL);
    let worst = check_exact(&mut gpu_with(new_ctx(), KernelOptions { kv_f16: true, ..KernelOptions::plain(8) }), TOL_KV_F16);
    // The cache's rounding must show: a half-float cache that stayed f32 would be as exact.
    assert!(worst > 1e-4, "the half-float cache is as exact as an f32 one ({worst:.2e}): is it half?");
    let mut half = gpu_with(new_ctx(), KernelOptions { threads_per_row: 8, subgroups: true, kv_f16: true });
    check_exact(&mut half, TOL_KV_F16);
    assert_eq!(half.kv_cache_bytes(), half.position() * 30 * 2 * 192 * 2, "two bytes per cached value");
}

/// Checks the oracle's logits cases on `g` against exact math and the exact CPU path, within
/// `tol`; returns the worst difference against exact math.
fn check_exact(g: &mut GpuBackend, tol: f64) -> f64 {
    let m = Model::open(&common::model_path()).expect("model");
    let cfg = m.config.clone();
    let mut cpu = CpuBackend::new(&cfg, m.weights, CpuPrecision::Exact, Some(256)).expect("cpu");
    let reference = common::oracle("numpy_ref.json");
    let (mut worst, mut worst_cpu, mut n) = (0.0f64, 0.0f32, 0);
    for case in reference["logits_cases"].as_array().expect("cases") {
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

#[test]
fn gpu_prefill_equals_decode_and_truncate_regenerates() {
    let mut g = gpu();
    // 70 tokens: one full prefill pass of 64 (matmul kernels, causal attention) and one of 6.
    let prompt: Vec<u32> = [504, 3575, 282, 4649, 314].repeat(14);
    let batched = pollster::block_on(g.prefill(&prompt)).expect("prefill");
    g.truncate(0);
    let mut stepwise = Vec::new();
    for &t in &prompt {
        stepwise = pollster::block_on(g.decode(t)).expect("decode");
    }
    let d = batched.iter().zip(&stepwise).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    eprintln!(
        "GPU prefill ({} tokens in passes of {}) vs token-by-token decode: worst |logit diff| {d:.2e}",
        prompt.len(),
        tokenscope::backend::gpu::model::PREFILL_BATCH
    );
    assert!(d < 1e-4, "prefill vs decode: {d}");
    // Greedy from here, then truncate back and generate again: the same tokens.
    let run = |g: &mut GpuBackend, first: &[f32]| {
        let mut logits = first.to_vec();
        let mut out = Vec::new();
        for _ in 0..6 {
            let t = argmax(&logits) as u32;
            out.push(t);
            logits = pollster::block_on(g.decode(t)).expect("decode");
        }
        out
    };
    let a = run(&mut g, &stepwise);
    g.truncate(prompt.len());
    let b = run(&mut g, &stepwise);
    assert_eq!(a, b);
    assert_eq!(g.kv_cache_bytes(), g.position() * 30 * 2 * 192 * 4);
}

#[test]
fn gpu_teacher_forced_greedy_agrees_with_llama_cpp() {
    let mut g = gpu();
    let greedy = common::oracle("greedy.json");
    for case in greedy["cases"].as_array().expect("cases").iter().take(2) {
        let reference = ids(&case["generated_ids"]);
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

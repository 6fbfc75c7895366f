//! The whole GPU forward pass on small synthetic models of every supported weight type,
//! against the exact CPU path: prefill (several passes, across attention chunks), decode,
//! tied and separate LM heads, and layers that mix weight types (as Q4_K_M files do).
#![cfg(not(target_arch = "wasm32"))]

use std::io::Cursor;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use tokenscope::backend::cpu::{CpuBackend, CpuPrecision};
use tokenscope::backend::gpu::GpuBackend;
use tokenscope::backend::Backend;
use tokenscope::model::synthetic::{SyntheticModel, SyntheticSpec};
use tokenscope::model::Model;

fn load(m: &SyntheticModel) -> Model {
    let bytes = m.to_bytes().expect("bytes");
    Model::read(&mut Cursor::new(bytes), &mut |_, _| {}).expect("loads")
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0.0, |m, (x, y)| m.max((x - y).abs()))
}

/// GPU vs exact CPU on `m`: a prompt of `prompt_len` tokens, then `steps` greedy decode steps.
fn compare(m: &SyntheticModel, prompt_len: usize, steps: usize, what: &str) {
    let (g, c) = (load(m), load(m));
    let mut gpu = pollster::block_on(GpuBackend::new(&g.config, g.weights, None)).unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut cpu = CpuBackend::new(&c.config, c.weights, CpuPrecision::Exact, None).expect("cpu");
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let prompt: Vec<u32> = (0..prompt_len).map(|_| rng.random_range(3..g.config.vocab_size as u32)).collect();
    let mut a = pollster::block_on(gpu.prefill(&prompt)).expect("gpu prefill");
    let mut b = pollster::block_on(cpu.prefill(&prompt)).expect("cpu prefill");
    let mut worst = 0.0f32;
    for step in 0..=steps {
        let scale = b.iter().fold(1.0f32, |m, x| m.max(x.abs()));
        let d = max_diff(&a, &b);
        worst = worst.max(d / scale);
        assert!(d <= 1e-4 * scale, "{what}, step {step}: GPU and exact CPU logits differ by {d} (scale {scale})");
        if step < steps {
            let next = b.iter().enumerate().fold(0, |best, (i, &v)| if v > b[best] { i } else { best }) as u32;
            a = pollster::block_on(gpu.decode(next)).expect("gpu decode");
            b = pollster::block_on(cpu.decode(next)).expect("cpu decode");
        }
    }
    eprintln!("{what}: worst |logit diff| / max |logit| {worst:.2e} over a {prompt_len}-token prompt and {steps} steps");
}

#[test]
fn every_weight_type_matches_the_exact_cpu_path() {
    for t in tokenscope::gguf::SUPPORTED_TYPES {
        compare(&SyntheticModel::new(&SyntheticSpec::of_type(t)).expect("model"), 9, 4, &format!("{t:?} weights, tied head"));
    }
}

#[test]
fn long_prompts_span_prefill_passes_and_attention_chunks() {
    // 300 tokens: prefill passes of 64 + ... + 44, and attention over two 256-position chunks.
    let spec = SyntheticSpec { context_len: 320, ..SyntheticSpec::default() };
    compare(&SyntheticModel::new(&spec).expect("model"), 300, 8, "Q4_1 weights, 300-token prompt");
}

#[test]
fn a_separate_lm_head_is_used() {
    let spec = SyntheticSpec { weight_type: GgmlDType::Q8_0, embedding_type: GgmlDType::F16, ..SyntheticSpec::default() };
    let mut m = SyntheticModel::new(&spec).expect("model");
    let vocab = load(&m).config.vocab_size;
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let head: Vec<f32> = (0..vocab * spec.dim).map(|_| rng.random::<f32>() - 0.5).collect();
    let t = Tensor::from_vec(head, (vocab, spec.dim), &Device::Cpu).expect("tensor");
    m.set_tensor("output.weight", QTensor::quantize(&t, GgmlDType::Q4_0).expect("quantize"));
    compare(&m, 7, 3, "Q8_0 weights, F16 embeddings, separate Q4_0 head");
}

/// Replaces `name` (a `rows x cols` matrix) with random weights of type `t`.
fn retype(m: &mut SyntheticModel, name: &str, rows: usize, cols: usize, t: GgmlDType) {
    let mut rng = ChaCha8Rng::seed_from_u64(rows as u64 * 31 + cols as u64);
    let values: Vec<f32> = (0..rows * cols).map(|_| (rng.random::<f32>() - 0.5) * 0.2).collect();
    let v = Tensor::from_vec(values, (rows, cols), &Device::Cpu).expect("tensor");
    m.set_tensor(name, QTensor::quantize(&v, t).expect("quantize"));
}

#[test]
fn layers_mixing_weight_types_match_the_exact_cpu_path() {
    // Q4_K_M's pattern: Q6_K value and down projections among Q4_K ones.
    let spec = SyntheticSpec::of_type(GgmlDType::Q4K);
    let kv = spec.n_kv_heads * spec.dim / spec.n_heads;
    let mut m = SyntheticModel::new(&spec).expect("model");
    retype(&mut m, "blk.0.attn_v.weight", kv, spec.dim, GgmlDType::Q6K);
    retype(&mut m, "blk.1.ffn_down.weight", spec.dim, spec.ffn_dim, GgmlDType::Q6K);
    retype(&mut m, "blk.1.ffn_up.weight", spec.ffn_dim, spec.dim, GgmlDType::Q5K);
    compare(&m, 7, 3, "Q4_K weights with Q6_K attn_v and ffn_down, Q5_K ffn_up");
    // A Q8_0 key projection among Q4_1 ones.
    let spec = SyntheticSpec::default();
    let kv = spec.n_kv_heads * spec.dim / spec.n_heads;
    let mut m = SyntheticModel::new(&spec).expect("model");
    retype(&mut m, "blk.0.attn_k.weight", kv, spec.dim, GgmlDType::Q8_0);
    compare(&m, 7, 3, "Q4_1 weights with a Q8_0 attn_k");
}

#[test]
fn a_lost_device_is_an_error_in_words_not_a_crash() {
    let m = load(&SyntheticModel::new(&SyntheticSpec::default()).expect("model"));
    let mut gpu = pollster::block_on(GpuBackend::new(&m.config, m.weights, None)).expect("gpu");
    pollster::block_on(gpu.prefill(&[5, 6, 7])).expect("prefill before the loss");
    gpu.context().device.destroy();
    let e = pollster::block_on(gpu.decode(8)).expect_err("decoding on a destroyed device");
    assert!(matches!(e, tokenscope::Error::GpuLost(_)), "{e:?}");
    let message = e.to_string();
    assert!(message.contains("GPU failed") && message.contains("CPU backend"), "{message}");
    eprintln!("after the device is destroyed: {message}");
}

#[test]
fn tables_larger_than_one_binding_run_in_row_bands_with_the_same_logits() {
    use tokenscope::backend::gpu::kernels::KernelOptions;
    use tokenscope::backend::gpu::GpuContext;
    // A 1,000-token vocabulary (Q8_0 rows of 64 weights: 64 bytes of quants, bound apart
    // from their scales) with a separate LM head, on a device that says it binds 12 KiB at
    // once: the embedding and the head each go in 6 bands of 192 rows (a multiple of the
    // 64-row offset alignment), the last one short, and every logit of a prefill, decode
    // steps and a verify pass equals one binding's.
    let spec = SyntheticSpec { vocab_size: Some(1000), untied_output: true, weight_type: GgmlDType::Q8_0, ..SyntheticSpec::default() };
    let m = SyntheticModel::new(&spec).expect("model");
    let backend = |limit: Option<u64>| {
        let mut ctx = pollster::block_on(GpuContext::new()).expect("the GPU tests need an adapter (run scripts/setup.sh)");
        if let Some(limit) = limit {
            ctx.info.max_storage_buffer_binding_size = limit;
        }
        let options = KernelOptions::for_device(&ctx);
        let model = load(&m);
        pollster::block_on(GpuBackend::with_options(ctx, &model.config, model.weights, None, options)).expect("loads")
    };
    let (mut whole, mut banded) = (backend(None), backend(Some(12 << 10)));
    // One dispatch more for each extra band of the embedding and of the head: 6 bands each.
    assert_eq!(banded.dispatches_per_step(), whole.dispatches_per_step() + 2 * 5);
    let prompt = [1u32, 40, 999, 500, 260, 0, 750];
    let run = |b: &mut GpuBackend| {
        let mut out = vec![pollster::block_on(b.prefill(&prompt)).expect("prefill")];
        for t in [998u32, 3, 640] {
            out.push(pollster::block_on(b.decode(t)).expect("decode"));
        }
        out.push(pollster::block_on(b.verify(&[191, 192, 193, 999])).expect("verify"));
        out
    };
    let (a, b) = (run(&mut whole), run(&mut banded));
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert_eq!(x.len(), y.len());
        assert_eq!(max_diff(x, y), 0.0, "pass {i}: banded and whole tables give different logits");
    }
    // The verify pass wrote every row of every token's logits (no row of a band left out).
    assert_eq!(b[4].len(), 4 * 1000);
    assert!(b[4].iter().all(|v| v.is_finite()));
}

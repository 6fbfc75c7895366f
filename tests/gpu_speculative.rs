//! Speculative decoding's two GPU passes against the exact CPU path on synthetic models
//! (llama's block, and LFM2's convolving layers beside an attending one): a verify pass
//! (logits for every token, before and past the first attention chunk) and a self-draft
//! through the first layers; and speculative greedy decoding on the GPU gives plain greedy
//! decoding's tokens. A missing adapter is a failure.
#![cfg(not(target_arch = "wasm32"))]

use std::io::Cursor;

use tokenscope::backend::cpu::{CpuBackend, CpuPrecision};
use tokenscope::backend::gpu::GpuBackend;
use tokenscope::backend::Backend;
use tokenscope::generation::generate::{Event, GenerateParams, Generation};
use tokenscope::generation::speculative::{Drafter, SpeculativeParams};
use tokenscope::model::synthetic::{SyntheticModel, SyntheticSpec};
use tokenscope::model::{Architecture, Model};
use tokenscope::sampler::SamplingParams;

/// Context of the test models: past the first attention chunk of 256 positions.
const CONTEXT: usize = 320;

/// The models: llama's block, and LFM2's with its first and last layers convolving (their
/// cache rows of gated inputs cut back and rewritten as keys are).
fn specs() -> [SyntheticSpec; 2] {
    let llama = SyntheticSpec { context_len: CONTEXT, n_layers: 3, ..SyntheticSpec::default() };
    [llama.clone(), SyntheticSpec { architecture: Architecture::Lfm2, conv_layers: vec![0, 2], ..llama }]
}

fn model(spec: &SyntheticSpec) -> Model {
    let bytes = SyntheticModel::new(spec).expect("model").to_bytes().expect("bytes");
    Model::read(&mut Cursor::new(bytes), &mut |_, _| {}).expect("loads")
}

fn gpu(spec: &SyntheticSpec) -> GpuBackend {
    let m = model(spec);
    pollster::block_on(GpuBackend::new(&m.config, m.weights, None)).unwrap_or_else(|e| panic!("{e}: the GPU tests need an adapter"))
}

fn cpu(spec: &SyntheticSpec) -> CpuBackend {
    let m = model(spec);
    CpuBackend::new(&m.config, m.weights, CpuPrecision::Exact, None).expect("cpu")
}

/// Largest |a - b| over the largest |b| (at least 1).
fn relative_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(1.0f32, |m, x| m.max(x.abs()));
    a.iter().zip(b).fold(0.0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

/// The tolerance of the GPU model tests against exact math.
const TOLERANCE: f32 = 1e-4;

#[test]
fn verify_and_draft_passes_match_the_exact_cpu_path() {
    for spec in specs() {
        verify_and_draft_passes_match_the_exact_cpu_path_on(&spec);
    }
}

fn verify_and_draft_passes_match_the_exact_cpu_path_on(spec: &SyntheticSpec) {
    let (mut g, mut c) = (gpu(spec), cpu(spec));
    let layers = c.layers();
    // Short context (one attention chunk), then past it.
    for prompt_len in [7usize, 261] {
        g.truncate(0);
        c.truncate(0);
        let prompt: Vec<u32> = (0..prompt_len as u32).map(|i| 3 + (i * 37) % 250).collect();
        pollster::block_on(g.prefill(&prompt)).expect("gpu prefill");
        pollster::block_on(c.prefill(&prompt)).expect("cpu prefill");
        let tokens = [40u32, 41, 260, 7, 42, 43, 44, 45, 46];
        let a = pollster::block_on(g.verify(&tokens)).expect("gpu verify");
        let b = pollster::block_on(c.verify(&tokens)).expect("cpu verify");
        let vocab = a.len() / tokens.len();
        assert_eq!(a.len(), b.len());
        for i in 0..tokens.len() {
            let d = relative_diff(&a[i * vocab..][..vocab], &b[i * vocab..][..vocab]);
            assert!(d <= TOLERANCE, "prompt {prompt_len}, verify row {i}: {d}");
        }
        assert_eq!(g.position(), prompt_len + tokens.len());

        // Self-drafts through 1 layer and through all of them, then a full pass there again.
        for l in [1, layers] {
            g.truncate(prompt_len);
            c.truncate(prompt_len);
            let a = pollster::block_on(g.draft(50, l)).expect("gpu draft");
            let b = pollster::block_on(c.draft(50, l)).expect("cpu draft");
            let d = relative_diff(&a, &b);
            assert!(d <= TOLERANCE, "prompt {prompt_len}, draft through {l} layers: {d}");
            g.truncate(prompt_len);
            c.truncate(prompt_len);
            let a = pollster::block_on(g.decode(50)).expect("gpu decode");
            let b = pollster::block_on(c.decode(50)).expect("cpu decode");
            let d = relative_diff(&a, &b);
            assert!(d <= TOLERANCE, "prompt {prompt_len}, decode after a draft through {l} layers: {d}");
        }
        // A draft through 1 layer is not the model.
        g.truncate(prompt_len);
        let one = pollster::block_on(g.draft(50, 1)).expect("draft");
        g.truncate(prompt_len);
        let full = pollster::block_on(g.decode(50)).expect("decode");
        assert!(relative_diff(&one, &full) > 1e-2, "the one-layer draft should differ from the model");
    }
}

#[test]
fn speculative_greedy_decoding_on_the_gpu_is_plain_greedy() {
    for spec in specs() {
        speculative_greedy_decoding_on_the_gpu_is_plain_greedy_on(&spec);
    }
}

fn speculative_greedy_decoding_on_the_gpu_is_plain_greedy_on(spec: &SyntheticSpec) {
    let m = model(spec);
    let prompt = m.tokenizer.encode("the cat in the hat in the").expect("encode");
    let mut g = gpu(spec);
    let mut tokens = |speculative: Option<SpeculativeParams>| {
        let p = GenerateParams { sampling: SamplingParams::greedy(), max_tokens: 20, speculative, ..GenerateParams::default() };
        let mut generation = Generation::new(prompt.clone(), p, &m.tokenizer, g.context_len()).expect("generation");
        let mut ids = Vec::new();
        loop {
            match pollster::block_on(generation.step(&mut g, &m.tokenizer)).expect("step") {
                Event::Step(s) => ids.push(s.token_id),
                Event::Finished(f) => return (ids, f),
            }
        }
    };
    let (plain, _) = tokens(None);
    assert_eq!(plain.len(), 20);
    for drafter in [Drafter::SelfDraft, Drafter::Lookup] {
        let (ids, finish) = tokens(Some(SpeculativeParams { drafter, draft_tokens: 4, draft_layers: Some(1) }));
        assert_eq!(ids, plain, "{drafter:?}");
        let st = finish.speculative.expect("stats");
        assert!(st.target_forward_passes <= 20, "{drafter:?}: {st:?}");
    }
}

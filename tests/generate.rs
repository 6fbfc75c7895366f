//! The generation loop: finish reasons, stop strings, parameter changes between steps,
//! cancellation, and the real CPU backend on a synthetic model. Runs natively and in wasm.

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use tokenscope::backend::cpu::{CpuBackend, CpuPrecision};
use tokenscope::backend::{Backend, BackendInfo, Checked, Forward, Logits, Pass};
use tokenscope::generation::generate::{Event, FinishReason, GenerateParams, Generation};
use tokenscope::model::synthetic::{SyntheticModel, SyntheticSpec};
use tokenscope::model::Model;
use tokenscope::sampler::SamplingParams;
use tokenscope::tokenizer::Tokenizer;
use tokenscope::Error;

/// A backend that answers with logits peaked on a scripted sequence of tokens.
struct Scripted {
    script: Vec<u32>,
    vocab: usize,
    pos: usize,
    produced: usize,
    context: usize,
    /// Each pass's `run_ahead`, as the loop asked.
    asked: Vec<usize>,
}

impl Scripted {
    fn logits(&mut self) -> Vec<f32> {
        let mut l = vec![0.0; self.vocab];
        let next = self.script[self.produced.min(self.script.len() - 1)];
        l[next as usize] = 12.0;
        // A runner-up, so temperature has something to reshape.
        l[(next as usize + 1) % self.vocab] = 11.0;
        self.produced += 1;
        l
    }
}

impl Backend for Scripted {
    async fn forward_checked(&mut self, input: Checked<'_>) -> tokenscope::Result<Forward> {
        if input.pass().logits == Logits::All {
            return Err(tokenscope::Error::Backend("the scripted backend plays one token at a time".into()));
        }
        self.pos += input.tokens().len();
        // As a backend that runs ahead answers: a one-token pass after one that asked.
        let ran_ahead = self.asked.last().is_some_and(|&n| n > 0) && input.tokens().len() == 1;
        self.asked.push(input.pass().run_ahead);
        Ok(Forward { logits: self.logits(), inspection: None, ran_ahead })
    }
    async fn draft(&mut self, _token: u32, _layers: usize) -> tokenscope::Result<Vec<f32>> {
        Err(tokenscope::Error::Backend("the scripted backend has no draft".into()))
    }
    fn truncate(&mut self, len: usize) {
        self.pos = self.pos.min(len);
    }
    fn position(&self) -> usize {
        self.pos
    }
    fn context_len(&self) -> usize {
        self.context
    }
    fn layers(&self) -> usize {
        1
    }
    fn kv_cache_bytes(&self) -> usize {
        0
    }
    fn info(&self) -> BackendInfo {
        BackendInfo { name: "scripted".into(), device: "test".into(), software: true, kv_bytes_per_value: 4, gpu_kernels: None }
    }
}

fn synthetic_model() -> Model {
    let bytes = SyntheticModel::new(&SyntheticSpec::default()).expect("model").to_bytes().expect("bytes");
    Model::read(&mut std::io::Cursor::new(bytes), &mut |_, _| {}).expect("loads")
}

fn scripted(tok: &Tokenizer, text_tokens: &[u32]) -> Scripted {
    Scripted { script: text_tokens.to_vec(), vocab: tok.vocab_size(), pos: 0, produced: 0, context: 64, asked: Vec::new() }
}

fn greedy(max_tokens: usize) -> GenerateParams {
    GenerateParams { sampling: SamplingParams::greedy(), max_tokens, ..GenerateParams::default() }
}

/// Runs to the end; returns the streamed text, the tokens and the finish event.
fn drive<B: Backend>(g: &mut Generation, b: &mut B, tok: &Tokenizer) -> (String, Vec<u32>, tokenscope::generation::generate::Finish) {
    let (mut text, mut ids) = (String::new(), Vec::new());
    loop {
        match pollster::block_on(g.step(b, tok)).expect("step") {
            Event::Step(s) => {
                text.push_str(&s.text);
                ids.push(s.token_id);
            }
            Event::Finished(f) => {
                text.push_str(&f.text);
                return (text, ids, f);
            }
        }
    }
}

/// The checks of a forward pass live in the trait's one entry, so a backend that writes none
/// (this scripted one) still refuses what no backend can run, and keeps its position.
#[test]
fn every_backend_gets_the_forward_checks_from_the_one_entry() {
    let mut b = Scripted { script: vec![5], vocab: 8, pos: 0, produced: 0, context: 4, asked: Vec::new() };
    let refused = |r: tokenscope::Result<Vec<f32>>| r.expect_err("refused").to_string();
    let refused_pass = |r: tokenscope::Result<Forward>| r.expect_err("refused").to_string();
    assert!(refused(pollster::block_on(b.prefill(&[]))).contains("no tokens"));
    assert!(refused(pollster::block_on(b.prefill(&[1; 5]))).contains("the context is full: 0 + 5 tokens exceed its 4 positions"));
    assert!(refused(pollster::block_on(b.verify(&[1]))).contains("a verify pass takes 2 to"));
    let two_layers = Pass::last(2);
    assert!(refused_pass(pollster::block_on(b.forward(&[1], two_layers))).contains("1 to 1 layers, got 2"));
    assert_eq!(b.position(), 0);
    pollster::block_on(b.prefill(&[1; 4])).expect("four tokens fit");
    assert!(refused(pollster::block_on(b.decode(1))).contains("the context is full: 4 + 1"));
    assert_eq!(b.position(), 4);
}

#[test]
fn eos_ends_generation_and_is_not_shown() {
    let m = synthetic_model();
    let tok = &m.tokenizer;
    let mut script = tok.encode("the end").expect("ok");
    script.push(2);
    let mut b = scripted(tok, &script);
    let mut g = Generation::new(tok.encode("x").expect("ok"), greedy(50), tok, 64).expect("ok");
    let (text, ids, f) = drive(&mut g, &mut b, tok);
    assert_eq!(text, "the end");
    assert_eq!(ids.last(), Some(&2));
    assert_eq!(f.finish_reason, FinishReason::Eos);
    assert_eq!(f.completion_tokens, script.len());
    assert_eq!(f.prompt_tokens, 1);
}

#[test]
fn max_tokens_ends_with_length() {
    let m = synthetic_model();
    let tok = &m.tokenizer;
    let mut b = scripted(tok, &tok.encode("aaaaaaaaaaaaaaaaaaaa").expect("ok"));
    let mut g = Generation::new(tok.encode("x").expect("ok"), greedy(5), tok, 64).expect("ok");
    let (text, ids, f) = drive(&mut g, &mut b, tok);
    assert_eq!((text.as_str(), ids.len(), f.finish_reason), ("aaaaa", 5, FinishReason::Length));
    // Further steps keep reporting the same finish.
    let again = pollster::block_on(g.step(&mut b, tok)).expect("step");
    assert!(matches!(again, Event::Finished(ref f2) if f2.finish_reason == FinishReason::Length));
}

#[test]
fn stop_string_across_tokens_ends_with_stop_and_is_withheld() {
    let m = synthetic_model();
    let tok = &m.tokenizer;
    let script: Vec<u32> = "in the\nUser: more".bytes().map(|b| tok.encode(&(b as char).to_string()).expect("ok")[0]).collect();
    let mut b = scripted(tok, &script);
    let params = GenerateParams { stop: vec!["\nUser:".into(), "zzz".into()], ..greedy(50) };
    let mut g = Generation::new(tok.encode("x").expect("ok"), params, tok, 64).expect("ok");
    let (text, _, f) = drive(&mut g, &mut b, tok);
    assert_eq!(text, "in the");
    assert_eq!(f.finish_reason, FinishReason::Stop);
}

#[test]
fn the_context_limit_ends_with_length() {
    let m = synthetic_model();
    let tok = &m.tokenizer;
    let mut b = scripted(tok, &tok.encode("aaaaaaaaaaaaaaaaaaaa").expect("ok"));
    b.context = 8;
    let prompt = tok.encode("xyzxyz").expect("ok");
    let mut g = Generation::new(prompt, greedy(50), tok, 8).expect("ok");
    let (_, ids, f) = drive(&mut g, &mut b, tok);
    assert_eq!(f.finish_reason, FinishReason::Length);
    assert_eq!(ids.len(), 3, "6 prompt tokens + 2 fed back fill a context of 8; the third comes from its logits");
    assert_eq!(b.position(), 8);
}

#[test]
fn prompts_that_do_not_fit_are_refused_clearly() {
    let m = synthetic_model();
    let tok = &m.tokenizer;
    let prompt = tok.encode("a b c d e f g h i j").expect("ok");
    let e = Generation::new(prompt.clone(), greedy(5), tok, prompt.len()).err().expect("too long");
    assert!(matches!(e, Error::PromptTooLong { .. }), "{e}");
    assert!(e.to_string().contains("shorten the prompt"));
    assert!(matches!(Generation::new(Vec::new(), greedy(5), tok, 64), Err(Error::EmptyPrompt)));
    let bad = GenerateParams { stop: vec!["a".into(); 5], ..greedy(5) };
    assert!(matches!(Generation::new(prompt, bad, tok, 64), Err(Error::InvalidParams(_))));
}

#[test]
fn sampling_changes_apply_from_the_next_step() {
    let m = synthetic_model();
    let tok = &m.tokenizer;
    let script = tok.encode("aaaaaaaaaaaaaaaaaaaa").expect("ok");
    let hot = GenerateParams {
        sampling: SamplingParams { temperature: 1.0, top_k: 0, top_p: 1.0, ..SamplingParams::default() },
        max_tokens: 6,
        ..GenerateParams::default()
    };
    let mut b = scripted(tok, &script);
    let mut g = Generation::new(tok.encode("x").expect("ok"), hot, tok, 64).expect("ok");
    let Event::Step(first) = pollster::block_on(g.step(&mut b, tok)).expect("step") else { panic!("a step") };
    assert!((first.sample.distribution.candidates[0].p - 0.731).abs() < 1e-3, "T = 1: e / (e + 1)");
    g.set_sampling(SamplingParams { temperature: 0.5, ..g.params().sampling.clone() }).expect("valid");
    let Event::Step(second) = pollster::block_on(g.step(&mut b, tok)).expect("step") else { panic!("a step") };
    assert!((second.sample.distribution.candidates[0].p - 0.881).abs() < 1e-3, "T = 0.5: e^2 / (e^2 + 1)");
    assert!(g.set_sampling(SamplingParams { temperature: -3.0, ..SamplingParams::default() }).is_err());
}

/// The loop asks the backend to run the next steps ahead (`Pass::run_ahead`: as many as are
/// still to come) only where each will take the argmax of the logits before: greedy or top-k 1
/// sampling with no repetition penalty, the cache kept, no token forced; with
/// `run_ahead_sampled`, sampled steps too (the argmax guessed), under the same conditions. A
/// step the backend ran ahead reports forward milliseconds counted from the step before's
/// logits: finite, not negative.
#[test]
fn the_loop_asks_to_run_ahead_only_where_the_next_token_is_the_argmax() {
    let m = synthetic_model();
    let tok = &m.tokenizer;
    let script = tok.encode("aaaaaaaaaaaaaaaaaaaa").expect("ok");
    let run_with = |sampling: SamplingParams, kv_cache: bool, force_third: bool, sampled_ahead: bool| {
        let mut b = scripted(tok, &script);
        let params = GenerateParams { sampling, max_tokens: 5, kv_cache, ..GenerateParams::default() };
        let mut g = Generation::new(tok.encode("x").expect("ok"), params, tok, 64).expect("ok");
        g.run_ahead_sampled(sampled_ahead);
        let mut forward_ms = Vec::new();
        for step in 0.. {
            if force_third && step == 2 {
                g.force_next(script[0]);
            }
            match pollster::block_on(g.step(&mut b, tok)).expect("step") {
                Event::Step(s) => forward_ms.push(s.forward_ms),
                Event::Finished(_) => break,
            }
        }
        assert!(forward_ms.iter().all(|ms| ms.is_finite() && *ms >= 0.0), "forward ms {forward_ms:?}");
        b.asked
    };
    let run = |sampling: SamplingParams, kv_cache: bool, force_third: bool| run_with(sampling, kv_cache, force_third, false);
    let greedy = SamplingParams::greedy();
    assert_eq!(run(greedy.clone(), true, false), [4, 3, 2, 1, 0], "greedy: the steps still to come");
    assert_eq!(run(greedy.clone(), true, true), [4, 3, 0, 1, 0], "a forced token is no argmax");
    let top_1 = SamplingParams { top_k: 1, ..SamplingParams::default() };
    assert_eq!(run(top_1, true, false), [4, 3, 2, 1, 0], "top-k 1 keeps the argmax alone");
    let none = |asked: Vec<usize>| asked.iter().all(|&n| n == 0);
    assert!(none(run(SamplingParams::default(), true, false)), "a draw");
    let penalized = SamplingParams { repetition_penalty: 1.3, ..greedy.clone() };
    assert!(none(run(penalized, true, false)), "a repetition penalty moves the argmax");
    assert!(none(run(greedy, false, false)), "without the cache every step reruns the context");
    // Asked to guess while sampling: a draw and a penalized draw run ahead too, but not a
    // forced token's step, nor a run without the cache.
    let draw = SamplingParams::default();
    assert_eq!(run_with(draw.clone(), true, false, true), [4, 3, 2, 1, 0], "a draw, the argmax guessed");
    assert_eq!(run_with(draw.clone(), true, true, true), [4, 3, 0, 1, 0], "a forced token is no guess");
    let penalized = SamplingParams { repetition_penalty: 1.3, ..draw.clone() };
    assert_eq!(run_with(penalized, true, false, true), [4, 3, 2, 1, 0], "a penalized draw, the raw argmax guessed");
    assert!(none(run_with(draw, false, false, true)), "without the cache nothing runs ahead, guessed or not");
}

#[test]
fn cancel_finishes_with_cancelled() {
    let m = synthetic_model();
    let tok = &m.tokenizer;
    let mut b = scripted(tok, &tok.encode("aaaa").expect("ok"));
    let mut g = Generation::new(tok.encode("x").expect("ok"), greedy(50), tok, 64).expect("ok");
    pollster::block_on(g.step(&mut b, tok)).expect("step");
    g.cancel();
    let e = pollster::block_on(g.step(&mut b, tok)).expect("step");
    assert!(matches!(e, Event::Finished(ref f) if f.finish_reason == FinishReason::Cancelled && f.completion_tokens == 1));
}

#[test]
fn the_cpu_backends_run_the_loop_and_regenerate_identically() {
    for precision in [CpuPrecision::Exact, CpuPrecision::Fast] {
        let m = synthetic_model();
        let cfg = m.config.clone();
        let tok = m.tokenizer;
        let mut b = CpuBackend::new(&cfg, m.weights, precision, None).expect("backend");
        let prompt = tok.encode("the theme").expect("ok");
        let params = GenerateParams { seed: 9, max_tokens: 12, ..GenerateParams::default() };
        let mut g = Generation::new(prompt.clone(), params.clone(), &tok, b.context_len()).expect("ok");
        let (_, first, f) = drive(&mut g, &mut b, &tok);
        assert!(!first.is_empty() && f.completion_tokens == first.len());
        assert_eq!(b.position(), prompt.len() + first.len() - 1, "the last token is never fed back");
        assert_eq!(b.kv_cache_bytes(), b.position() * cfg.kv_bytes_per_token());
        let mut g = Generation::new(prompt, params, &tok, b.context_len()).expect("ok");
        let (_, second, _) = drive(&mut g, &mut b, &tok);
        assert_eq!(first, second, "{precision:?}: same seed, same tokens after the cache was reset");
    }
}

#[test]
fn exact_and_fast_cpu_paths_agree_on_a_synthetic_model() {
    let m = synthetic_model();
    let cfg = m.config.clone();
    let mut exact = CpuBackend::new(&cfg, m.weights, CpuPrecision::Exact, None).expect("backend");
    let m = synthetic_model();
    let mut fast = CpuBackend::new(&cfg, m.weights, CpuPrecision::Fast, None).expect("backend");
    let prompt = m.tokenizer.encode("in the theme").expect("ok");
    let a = pollster::block_on(exact.prefill(&prompt)).expect("ok");
    let b = pollster::block_on(fast.prefill(&prompt)).expect("ok");
    let scale = a.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let diff = a.iter().zip(&b).fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(diff < 0.05 * scale, "8-bit rounding moves logits by {diff} of {scale}");
}

#[test]
fn every_supported_weight_type_runs_on_both_cpu_paths() {
    for t in tokenscope::gguf::SUPPORTED_TYPES {
        // K-quant blocks hold 256 weights, so rows are at least that wide.
        let (dim, ffn_dim) = if t.block_size() == 256 { (256, 512) } else { (64, 96) };
        let spec = SyntheticSpec { weight_type: t, embedding_type: t, dim, ffn_dim, ..SyntheticSpec::default() };
        let bytes = SyntheticModel::new(&spec).expect("model").to_bytes().expect("bytes");
        let mut logits = Vec::new();
        for precision in [CpuPrecision::Exact, CpuPrecision::Fast] {
            let m = Model::read(&mut std::io::Cursor::new(bytes.clone()), &mut |_, _| {}).expect("loads");
            let mut b = CpuBackend::new(&m.config, m.weights, precision, None).expect("backend");
            let prompt = m.tokenizer.encode("in the").expect("ok");
            let l = pollster::block_on(b.prefill(&prompt)).expect("prefill");
            assert!(l.iter().all(|x| x.is_finite()), "{t:?} {precision:?}");
            logits.push(l);
        }
        let scale = logits[0].iter().fold(0.0f32, |m, x| m.max(x.abs()));
        let diff = logits[0].iter().zip(&logits[1]).fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(diff < 0.05 * scale, "{t:?}: exact and fast differ by {diff} of {scale}");
    }
}

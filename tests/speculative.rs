//! Speculative decoding: the tokens come out distributed exactly as plain sampling's (a
//! chi-square test over many seeds on a toy model whose draft disagrees with it, for several
//! sampler settings and both drafters); at temperature 0 it is plain greedy decoding token
//! for token on a real forward pass (llama's block, LFM2's convolving layers and Granite 4.0
//! H's scanning layers beside an attending one); a verify pass gives the same logits as decoding one
//! token at a time; the counts add up; bad parameters are refused. Runs natively and in wasm.

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use tokenscope::backend::cpu::{CpuBackend, CpuPrecision};
use tokenscope::backend::Backend;
use tokenscope::generation::generate::{Event, Finish, GenerateParams, Generation, StepEvent};
use tokenscope::generation::speculative::{Drafter, SpeculativeParams};
use tokenscope::model::synthetic::{SyntheticModel, SyntheticSpec};
use tokenscope::model::{Architecture, Model};
use tokenscope::sampler::{SamplingParams, StepDistribution};
use tokenscope::tokenizer::Tokenizer;

mod toy;
use toy::Toy;

fn synthetic_model() -> Model {
    model_of(&SyntheticSpec::default())
}

fn model_of(spec: &SyntheticSpec) -> Model {
    let bytes = SyntheticModel::new(spec).expect("model").to_bytes().expect("bytes");
    Model::read(&mut std::io::Cursor::new(bytes), &mut |_, _| {}).expect("loads")
}

/// The synthetic models a pass's rollback is held on: llama's block, LFM2's layers that
/// convolve (their cache rows of gated inputs cut back as keys are) beside one that attends,
/// and Granite 4.0 H's that scan (their states rebuilt from their rows after a cut back)
/// beside one that attends.
fn rollback_specs() -> [SyntheticSpec; 3] {
    let lfm2 = SyntheticSpec { architecture: Architecture::Lfm2, n_layers: 3, conv_layers: vec![0, 2], ..SyntheticSpec::default() };
    let granite_h = SyntheticSpec::default().granite_4_h();
    [SyntheticSpec::default(), lfm2, granite_h]
}

/// Runs a generation to the end.
fn run<B: Backend>(g: &mut Generation, b: &mut B, tok: &Tokenizer) -> (Vec<StepEvent>, Finish) {
    let mut steps = Vec::new();
    loop {
        match pollster::block_on(g.step(b, tok)).expect("step") {
            Event::Step(s) => steps.push(s),
            Event::Finished(f) => return (steps, f),
        }
    }
}

fn spec(drafter: Drafter, draft_tokens: usize, draft_layers: Option<usize>) -> SpeculativeParams {
    SpeculativeParams { drafter, draft_tokens, draft_layers }
}

/// Logits over `allowed` tokens only (the rest -inf), a fixed pseudo-random function of the
/// context and `salt`: the model with one salt, a draft that disagrees with it with another.
fn toy_logits(vocab: usize, allowed: &[u32], context: &[u32], salt: u64) -> Vec<f32> {
    let mut h = context.iter().fold(0x9e37_79b9_7f4a_7c15u64 ^ salt, |h, &t| (h ^ u64::from(t)).wrapping_mul(0x100_0000_01b3));
    let mut l = vec![f32::NEG_INFINITY; vocab];
    for &t in allowed {
        h = (h ^ u64::from(t)).wrapping_mul(0x2545_f491_4f6c_dd1d);
        l[t as usize] = (h >> 40) as f32 / (1u64 << 24) as f32 * 3.0 - 1.5;
    }
    l
}

/// Upper 0.1% point of the chi-square distribution with `df` degrees of freedom
/// (Wilson-Hilferty; within 1% for df >= 3).
fn chi_square_critical(df: f64) -> f64 {
    let z = 3.090; // the standard normal's upper 0.1% point
    let a = 2.0 / (9.0 * df);
    df * (1.0 - a + z * a.sqrt()).powi(3)
}

/// Every sequence of `len` tokens after `prompt`, with its probability under plain sampling
/// (the sampler's own filtered distributions, chained).
fn sequence_probabilities(model: &dyn Fn(&[u32]) -> Vec<f32>, prompt: &[u32], params: &SamplingParams, len: usize) -> Vec<(Vec<u32>, f64)> {
    let mut out = vec![(Vec::new(), 1.0)];
    for _ in 0..len {
        let mut next = Vec::new();
        for (seq, prob) in out {
            let mut ctx = prompt.to_vec();
            ctx.extend(&seq);
            let p = StepDistribution::new(&model(&ctx), &ctx, params, 1).expect("shape").probabilities();
            for (t, &pt) in p.iter().enumerate() {
                if pt > 0.0 {
                    let mut s = seq.clone();
                    s.push(t as u32);
                    next.push((s, prob * pt as f64));
                }
            }
        }
        out = next;
    }
    out
}

/// Generates `len` tokens from `runs` seeds with speculative decoding and compares the
/// sequences' counts with plain sampling's exact probabilities (chi-square at the 0.1%
/// level, cells with expected counts under 5 pooled).
fn check_exact(drafter: Drafter, prompt: &[u32], params: SamplingParams, runs: usize) {
    let m = synthetic_model();
    let tok = &m.tokenizer;
    let vocab = tok.vocab_size();
    // Five tokens the model may say; the draft also proposes a sixth it never says.
    let allowed: Vec<u32> = vec![40, 41, 42, 43, 44];
    let draft_allowed: Vec<u32> = vec![40, 41, 42, 43, 44, 45];
    let len = 3;
    let model = {
        let allowed = allowed.clone();
        move |c: &[u32]| toy_logits(vocab, &allowed, c, 1)
    };
    let expected = sequence_probabilities(&model, prompt, &params, len);
    let mut counts = vec![0usize; expected.len()];
    let mut stats = (0usize, 0usize, 0usize);
    for seed in 0..runs as u64 {
        let draft_allowed = draft_allowed.clone();
        let draft: toy::LogitsFn = Box::new(move |c: &[u32]| toy_logits(vocab, &draft_allowed, c, 2));
        let mut b = Toy::new(model.clone(), Some(draft));
        let p = GenerateParams {
            sampling: params.clone(),
            max_tokens: len,
            seed,
            top_n: 1,
            speculative: Some(spec(drafter, 2, None)),
            ..GenerateParams::default()
        };
        let mut g = Generation::new(prompt.to_vec(), p, tok, 256).expect("generation");
        let (steps, finish) = run(&mut g, &mut b, tok);
        let seq: Vec<u32> = steps.iter().map(|s| s.token_id).collect();
        let cell = expected.iter().position(|(s, _)| *s == seq).unwrap_or_else(|| panic!("{seq:?} has probability 0"));
        counts[cell] += 1;
        let st = finish.speculative.expect("speculative stats");
        stats.0 += st.draft_tokens;
        stats.1 += st.accepted_tokens;
        stats.2 += usize::from(steps.iter().any(|s| s.draft.as_ref().is_some_and(|d| !d.accepted && d.proposed.is_some())));
    }
    // Pool the cells expected fewer than 5 times.
    let (mut chi, mut df, mut pooled_obs, mut pooled_exp) = (0.0, 0usize, 0.0, 0.0);
    for ((_, prob), &c) in expected.iter().zip(&counts) {
        let e = prob * runs as f64;
        if e < 5.0 {
            pooled_obs += c as f64;
            pooled_exp += e;
        } else {
            chi += (c as f64 - e).powi(2) / e;
            df += 1;
        }
    }
    if pooled_exp > 0.0 {
        chi += (pooled_obs - pooled_exp).powi(2) / pooled_exp;
        df += 1;
    }
    let df = (df - 1) as f64;
    assert!(df >= 3.0, "too few cells to test: {df}");
    let critical = chi_square_critical(df);
    assert!(chi < critical, "{drafter:?} {params:?}: chi-square {chi:.1} over {df} degrees of freedom (critical {critical:.1})");
    // The drafts were both kept and rejected: the rule was exercised, not bypassed.
    assert!(stats.0 > 0 && stats.1 > 0 && stats.1 < stats.0, "{drafter:?}: {} drafted, {} kept", stats.0, stats.1);
    assert!(stats.2 > 0, "{drafter:?}: no draft was ever replaced");
}

fn sampling(temperature: f32, top_k: usize, top_p: f32, repetition_penalty: f32) -> SamplingParams {
    SamplingParams { temperature, top_k, top_p, repetition_penalty, ..SamplingParams::greedy() }
}

#[test]
fn self_draft_output_is_distributed_as_plain_sampling() {
    // A one-token prompt: the first round drafts from step 0.
    for params in [sampling(1.0, 0, 1.0, 1.0), sampling(0.7, 3, 1.0, 1.0), sampling(1.5, 0, 0.8, 1.3)] {
        check_exact(Drafter::SelfDraft, &[40], params, 6000);
    }
}

#[test]
fn lookup_output_is_distributed_as_plain_sampling() {
    // A prompt that repeats, so the lookup finds its ending earlier.
    for params in [sampling(1.0, 0, 1.0, 1.0), sampling(0.8, 4, 0.9, 1.0)] {
        check_exact(Drafter::Lookup, &[40, 41, 42, 40, 41, 42, 40], params, 6000);
    }
}

/// The synthetic model of `shape` on the CPU backend.
fn cpu(shape: &SyntheticSpec, precision: CpuPrecision) -> CpuBackend {
    let m = model_of(shape);
    CpuBackend::new(&m.config, m.weights, precision, Some(64)).expect("backend")
}

/// Greedy tokens of `m` (the synthetic model of `shape`) on the CPU backend.
fn greedy_tokens(
    (m, shape): (&Model, &SyntheticSpec),
    precision: CpuPrecision,
    prompt: &[u32],
    max_tokens: usize,
    speculative: Option<SpeculativeParams>,
) -> (Vec<StepEvent>, Finish) {
    let mut b = cpu(shape, precision);
    let p = GenerateParams { sampling: SamplingParams::greedy(), max_tokens, speculative, ..GenerateParams::default() };
    let mut g = Generation::new(prompt.to_vec(), p, &m.tokenizer, b.context_len()).expect("generation");
    run(&mut g, &mut b, &m.tokenizer)
}

#[test]
fn greedy_speculative_decoding_is_plain_greedy_token_for_token() {
    for shape in rollback_specs() {
        greedy_speculative_decoding_is_plain_greedy_on(&shape);
    }
}

fn greedy_speculative_decoding_is_plain_greedy_on(shape: &SyntheticSpec) {
    let model = model_of(shape);
    let m = (&model, shape);
    let prompt = model.tokenizer.encode("the cat in the hat in the").expect("encode");
    for precision in [CpuPrecision::Exact, CpuPrecision::Fast] {
        let (plain, _) = greedy_tokens(m, precision, &prompt, 24, None);
        let plain: Vec<u32> = plain.iter().map(|s| s.token_id).collect();
        assert_eq!(plain.len(), 24);
        for s in [spec(Drafter::SelfDraft, 4, Some(1)), spec(Drafter::SelfDraft, 3, Some(2)), spec(Drafter::Lookup, 5, None)] {
            let (steps, finish) = greedy_tokens(m, precision, &prompt, 24, Some(s.clone()));
            let ids: Vec<u32> = steps.iter().map(|s| s.token_id).collect();
            assert_eq!(ids, plain, "{:?} {precision:?} {s:?}", model.config.architecture);
            let st = finish.speculative.expect("stats");
            assert_eq!(st.accepted_tokens, steps.iter().filter(|s| s.draft.as_ref().is_some_and(|d| d.accepted)).count());
            // Each drafter lands tokens on llama's random model (its text repeats); LFM2's
            // random text need not repeat, its rounds then all rolled back.
            if model.config.architecture == Architecture::Llama {
                assert!(st.target_forward_passes < 24, "{s:?}: {st:?}");
            }
            assert_eq!(finish.completion_tokens, 24);
        }
        // A self-draft through every layer is the model itself: every draft is kept.
        let (_, finish) = greedy_tokens(m, precision, &prompt, 24, Some(spec(Drafter::SelfDraft, 4, Some(model.config.n_layers))));
        let st = finish.speculative.expect("stats");
        assert_eq!(st.accepted_tokens, st.draft_tokens, "{precision:?} {st:?}");
        assert_eq!(st.target_forward_passes, 1 + 23usize.div_ceil(5), "{st:?}");
    }
}

#[test]
fn a_verify_pass_gives_the_logits_of_one_token_at_a_time() {
    for shape in rollback_specs() {
        a_verify_pass_gives_the_logits_of_one_token_at_a_time_on(&shape);
    }
}

fn a_verify_pass_gives_the_logits_of_one_token_at_a_time_on(shape: &SyntheticSpec) {
    let m = model_of(shape);
    let prompt = m.tokenizer.encode("in the hat").expect("encode");
    let next = [45u32, 46, 47, 48];
    let (mut one, mut all) = (cpu(shape, CpuPrecision::Fast), cpu(shape, CpuPrecision::Fast));
    let mut expected = vec![pollster::block_on(one.prefill(&prompt)).expect("prefill")];
    for &t in &next {
        expected.push(pollster::block_on(one.decode(t)).expect("decode"));
    }
    pollster::block_on(all.prefill(&prompt[..prompt.len() - 1])).expect("prefill");
    let mut tokens = vec![prompt[prompt.len() - 1]];
    tokens.extend(next);
    let rows = pollster::block_on(all.verify(&tokens)).expect("verify");
    let vocab = m.config.vocab_size;
    assert_eq!(rows.len(), tokens.len() * vocab);
    for (i, e) in expected.iter().enumerate() {
        let got = &rows[i * vocab..][..vocab];
        let scale = e.iter().fold(0f32, |a, x| a.max(x.abs()));
        let diff = got.iter().zip(e).fold(0f32, |a, (x, y)| a.max((x - y).abs()));
        assert!(diff <= 1e-5 * scale.max(1.0), "row {i}: {diff}");
    }
    assert_eq!(all.position(), one.position());
    // Out of range: an empty or an oversized verify, a draft through 0 or too many layers.
    assert!(pollster::block_on(all.verify(&[1])).is_err());
    assert!(pollster::block_on(all.verify(&[1; 10])).is_err());
    assert!(pollster::block_on(all.draft(1, 0)).is_err());
    assert!(pollster::block_on(all.draft(1, m.config.n_layers + 1)).is_err());
    assert_eq!(all.position(), one.position(), "a refused pass appends nothing");
}

#[test]
fn bad_speculative_parameters_are_refused_in_words() {
    let m = synthetic_model();
    let tok = &m.tokenizer;
    let with = |s: SpeculativeParams, kv_cache: bool| GenerateParams { speculative: Some(s), kv_cache, ..GenerateParams::default() };
    for (p, words) in [
        (with(spec(Drafter::SelfDraft, 0, None), true), "draft_tokens"),
        (with(spec(Drafter::Lookup, 9, None), true), "draft_tokens"),
        (with(spec(Drafter::SelfDraft, 4, Some(0)), true), "draft_layers"),
        (with(spec(Drafter::SelfDraft, 4, None), false), "KV cache"),
    ] {
        let err = Generation::new(vec![1, 2], p, tok, 64).err().expect("refused");
        assert!(err.to_string().contains(words), "{err}");
    }
    let too_deep = spec(Drafter::SelfDraft, 4, Some(m.config.n_layers + 1));
    assert!(too_deep.layers(m.config.n_layers).expect_err("refused").to_string().contains("at most"));
}

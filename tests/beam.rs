//! Beam search: width 1 is greedy decoding token for token; a search as wide as the whole
//! tree of a tiny vocabulary finds the exact best sequence (brute force); scores are the
//! model's log-probabilities at temperature 1; EOS, stop strings and max tokens end beams;
//! bad parameters are refused. Runs natively and in wasm.

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use tokenscope::backend::cpu::{CpuBackend, CpuPrecision};
use tokenscope::backend::Backend;
use tokenscope::generation::beam::{Beam, BeamEvent, BeamFinish, BeamParams, BeamSearch};
use tokenscope::generation::generate::{Event, FinishReason, GenerateParams, Generation};
use tokenscope::model::synthetic::{SyntheticModel, SyntheticSpec};
use tokenscope::model::Model;
use tokenscope::sampler::SamplingParams;
use tokenscope::tokenizer::Tokenizer;

mod toy;
use toy::Toy;

fn synthetic_model() -> Model {
    let bytes = SyntheticModel::new(&SyntheticSpec::default()).expect("model").to_bytes().expect("bytes");
    Model::read(&mut std::io::Cursor::new(bytes), &mut |_, _| {}).expect("loads")
}

fn params(width: usize, length_penalty: f32, max_tokens: usize) -> BeamParams {
    BeamParams { width, length_penalty, max_tokens, stop: Vec::new() }
}

/// Runs a search to the end: the live beams after each step, and the finish.
fn search<B: Backend>(s: &mut BeamSearch, b: &mut B, tok: &Tokenizer) -> (Vec<Vec<Beam>>, BeamFinish) {
    let mut steps = Vec::new();
    loop {
        match pollster::block_on(s.step(b, tok)).expect("step") {
            BeamEvent::Step(step) => steps.push(step.beams),
            BeamEvent::Finished(f) => return (steps, f),
        }
    }
}

/// A model over a few allowed tokens (every other token has probability 0): its logits are
/// a fixed pseudo-random function of the whole context, so the best sequence can be found by
/// trying them all.
struct Tiny;

impl Tiny {
    fn logits_after(vocab: usize, allowed: &[u32], context: &[u32]) -> Vec<f32> {
        let mut h = context.iter().fold(0x9e37_79b9_7f4a_7c15u64, |h, &t| (h ^ u64::from(t)).wrapping_mul(0x100_0000_01b3));
        let mut l = vec![f32::NEG_INFINITY; vocab];
        for &t in allowed {
            h = (h ^ u64::from(t)).wrapping_mul(0x2545_f491_4f6c_dd1d);
            l[t as usize] = (h >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0;
        }
        l
    }

    /// The tiny model as a backend.
    fn backend(vocab: usize, allowed: Vec<u32>) -> impl Backend {
        Toy::new(move |c: &[u32]| Tiny::logits_after(vocab, &allowed, c), None)
    }
}

/// `ln p(token | context)` at temperature 1, in f64 from scratch.
fn log_prob(logits: &[f32], token: u32) -> f64 {
    let max = logits.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64));
    let z: f64 = logits.iter().map(|&x| (x as f64 - max).exp()).sum();
    logits[token as usize] as f64 - max - z.ln()
}

/// Every finished sequence of the tiny model after `prompt` (ending at EOS or at
/// `max_tokens`), with its summed log-probability.
fn every_sequence(vocab: usize, allowed: &[u32], eos: &[u32], prompt: &[u32], max_tokens: usize) -> Vec<(Vec<u32>, f64)> {
    let mut done = Vec::new();
    let mut open = vec![(Vec::new(), 0.0)];
    while let Some((seq, lp)) = open.pop() {
        let context: Vec<u32> = prompt.iter().chain(&seq).copied().collect();
        let logits = Tiny::logits_after(vocab, allowed, &context);
        for &t in allowed {
            let mut next: Vec<u32> = seq.clone();
            next.push(t);
            let lp = lp + log_prob(&logits, t);
            if eos.contains(&t) || next.len() == max_tokens {
                done.push((next, lp));
            } else {
                open.push((next, lp));
            }
        }
    }
    done
}

#[test]
fn width_one_is_greedy_decoding_token_for_token() {
    let Model { config, weights, tokenizer, .. } = synthetic_model();
    let tok = &tokenizer;
    let prompt = tok.encode("the cat in the hat").expect("encode");
    let mut b = CpuBackend::new(&config, weights, CpuPrecision::Exact, None).expect("backend");
    let greedy = GenerateParams { sampling: SamplingParams::greedy(), max_tokens: 20, ..GenerateParams::default() };
    let mut g = Generation::new(prompt.clone(), greedy, tok, b.context_len()).expect("generation");
    let mut greedy_ids = Vec::new();
    let greedy_finish = loop {
        match pollster::block_on(g.step(&mut b, tok)).expect("step") {
            Event::Step(s) => greedy_ids.push(s.token_id),
            Event::Finished(f) => break f.finish_reason,
        }
    };
    let mut s = BeamSearch::new(prompt, params(1, 1.0, 20), tok, b.context_len()).expect("search");
    let (steps, finish) = search(&mut s, &mut b, tok);
    assert_eq!(finish.beams.len(), 1);
    assert_eq!(finish.beams[0].token_ids, greedy_ids);
    assert_eq!(finish.beams[0].finish_reason, Some(greedy_finish));
    // Every step's one live beam is greedy's prefix.
    for (i, live) in steps.iter().enumerate().filter(|(_, l)| !l.is_empty()) {
        assert_eq!(live[0].token_ids, greedy_ids[..=i]);
    }
}

#[test]
fn a_search_as_wide_as_the_tree_finds_the_exact_best_sequence() {
    let m = synthetic_model();
    let tok = &m.tokenizer;
    let vocab = tok.vocab_size();
    let eos = tok.eos_ids()[0];
    let (a, b) = (tok.encode("a").expect("encode")[0], tok.encode("b").expect("encode")[0]);
    // (allowed tokens, max tokens, width): at most `width` unfinished prefixes at any step
    // ((allowed - EOS)^(max_tokens - 1) <= width), so the search keeps the whole tree.
    let cases = [(vec![a, b, eos], 4, 8), (vec![a, b], 4, 8), (vec![a, eos], 6, 2), (vec![a, b, eos], 2, 3)];
    // Twelve prompts: twelve pseudo-random trees, among them ones whose best sequence starts
    // with a less likely token (a narrower search misses those).
    for (prompt, (allowed, max_tokens, width), alpha) in "xyzqwertuiop".chars().flat_map(|c| {
        let prompt = tok.encode(&c.to_string()).expect("encode");
        cases.clone().into_iter().flat_map(move |case| [0.0f32, 0.5, 1.0, 2.0].map(|alpha| (prompt.clone(), case.clone(), alpha)))
    }) {
        {
            let all = every_sequence(vocab, &allowed, &[eos], &prompt, max_tokens);
            let score = |seq: &[u32], lp: f64| lp / (seq.len() as f64).powf(alpha as f64);
            let (best, best_lp) = all.iter().max_by(|x, y| score(&x.0, x.1).total_cmp(&score(&y.0, y.1))).expect("sequences");
            let mut backend = Tiny::backend(vocab, allowed.clone());
            let mut s = BeamSearch::new(prompt.clone(), params(width, alpha, max_tokens), tok, 256).expect("search");
            let (_, finish) = search(&mut s, &mut backend, tok);
            let what =
                format!("prompt {prompt:?}, {} allowed tokens, {max_tokens} tokens, width {width}, length penalty {alpha}", allowed.len());
            let winner = &finish.beams[0];
            assert_eq!(&winner.token_ids, best, "{what}");
            // The model's log-probabilities at temperature 1, summed.
            assert!((winner.logprob - best_lp).abs() <= 1e-9 * best_lp.abs().max(1.0), "{what}: {} vs {best_lp}", winner.logprob);
            assert!((winner.score - score(best, *best_lp)).abs() <= 1e-9 * best_lp.abs().max(1.0), "{what}");
            // Every finished beam is a real sequence with its own log-probability.
            for beam in &finish.beams {
                let (_, lp) = all.iter().find(|(seq, _)| *seq == beam.token_ids).expect("a real sequence");
                assert!((beam.logprob - lp).abs() <= 1e-9 * lp.abs().max(1.0), "{what}");
                let reason = if beam.token_ids.last() == Some(&eos) { FinishReason::Eos } else { FinishReason::Length };
                assert_eq!(beam.finish_reason, Some(reason), "{what}");
            }
            // Best first.
            assert!(finish.beams.windows(2).all(|w| w[0].score >= w[1].score), "{what}");
        }
    }
}

#[test]
fn a_narrow_search_keeps_the_most_likely_prefixes_and_counts_its_forward_passes() {
    let m = synthetic_model();
    let tok = &m.tokenizer;
    let allowed: Vec<u32> = ["a", "b", "c", "d"].iter().map(|s| tok.encode(s).expect("encode")[0]).collect();
    let prompt = tok.encode("x").expect("encode");
    let mut backend = Tiny::backend(tok.vocab_size(), allowed.clone());
    let mut s = BeamSearch::new(prompt.clone(), params(3, 1.0, 5), tok, 256).expect("search");
    let (steps, finish) = search(&mut s, &mut backend, tok);
    for live in &steps {
        assert!(live.len() <= 3);
        assert!(live.windows(2).all(|w| w[0].logprob >= w[1].logprob), "live beams are ranked by log-probability");
    }
    // At each step the kept beams are the best extensions of the previous step's beams.
    for pair in steps.windows(2) {
        let mut extensions: Vec<f64> = Vec::new();
        for beam in &pair[0] {
            let context: Vec<u32> = prompt.iter().chain(&beam.token_ids).copied().collect();
            let logits = Tiny::logits_after(tok.vocab_size(), &allowed, &context);
            extensions.extend(allowed.iter().map(|&t| beam.logprob + log_prob(&logits, t)));
        }
        extensions.sort_by(|a, b| b.total_cmp(a));
        let kept: Vec<f64> = pair[1].iter().map(|b| b.logprob).collect();
        for (k, e) in kept.iter().zip(&extensions) {
            assert!((k - e).abs() < 1e-9, "kept {kept:?}, best extensions {:?}", &extensions[..3]);
        }
    }
    assert_eq!(finish.beams.len(), 3, "the three beams end at max tokens");
    assert!(finish.beams.iter().all(|b| b.token_ids.len() == 5 && b.finish_reason == Some(FinishReason::Length)));
    // The prompt once, then each beam's tokens since it parted from the beam run before it.
    assert!(finish.forward_tokens >= prompt.len() + 5, "{}", finish.forward_tokens);
    assert!(finish.forward_tokens <= prompt.len() + 3 * (1 + 2 + 3 + 4 + 5), "{}", finish.forward_tokens);
}

#[test]
fn a_stop_string_ends_a_beam_and_is_cut_from_its_text() {
    let m = synthetic_model();
    let tok = &m.tokenizer;
    let allowed: Vec<u32> = ["a", "b"].iter().map(|s| tok.encode(s).expect("encode")[0]).collect();
    let mut backend = Tiny::backend(tok.vocab_size(), allowed);
    let p = BeamParams { stop: vec!["ab".into()], ..params(4, 1.0, 6) };
    let mut s = BeamSearch::new(tok.encode("x").expect("encode"), p, tok, 256).expect("search");
    let (_, finish) = search(&mut s, &mut backend, tok);
    let stopped: Vec<&Beam> = finish.beams.iter().filter(|b| b.finish_reason == Some(FinishReason::Stop)).collect();
    assert!(!stopped.is_empty(), "some beam met \"ab\"");
    for b in stopped {
        assert!(!b.text.contains("ab") && tok.decode(&b.token_ids).ends_with("ab"), "{b:?}");
    }
    for b in &finish.beams {
        assert!(!b.text.contains("ab"), "{b:?}");
    }
}

#[test]
fn a_cancelled_search_ends_with_its_live_beams_ranked_as_they_stood() {
    let m = synthetic_model();
    let tok = &m.tokenizer;
    let allowed: Vec<u32> = ["a", "b", "c"].iter().map(|s| tok.encode(s).expect("encode")[0]).collect();
    let mut backend = Tiny::backend(tok.vocab_size(), allowed);
    let mut s = BeamSearch::new(tok.encode("x").expect("encode"), params(3, 1.0, 20), tok, 256).expect("search");
    let mut live = Vec::new();
    for _ in 0..2 {
        match pollster::block_on(s.step(&mut backend, tok)).expect("step") {
            BeamEvent::Step(step) => live = step.beams,
            BeamEvent::Finished(_) => panic!("a 20-token search ended after a step"),
        }
    }
    assert_eq!(live.len(), 3);
    s.cancel();
    assert!(s.is_finished());
    let BeamEvent::Finished(finish) = pollster::block_on(s.step(&mut backend, tok)).expect("step") else {
        panic!("a cancelled search reports its end");
    };
    assert_eq!(finish.beams.len(), 3, "the three live beams, finished where they stood");
    assert!(finish.beams.iter().all(|b| b.token_ids.len() == 2 && b.finish_reason == Some(FinishReason::Cancelled)));
    assert!(finish.beams.windows(2).all(|w| w[0].score >= w[1].score), "best score first");
    for b in &finish.beams {
        assert!(live.iter().any(|l| l.token_ids == b.token_ids && l.logprob == b.logprob), "{b:?}");
        assert_eq!(b.token_text, tok.token_text(b.token_ids[1]), "the last token's text");
    }
}

#[test]
fn bad_beam_parameters_are_refused_in_words() {
    let m = synthetic_model();
    let tok = &m.tokenizer;
    let prompt = tok.encode("x").expect("encode");
    for (p, words) in [
        (params(0, 1.0, 5), "beams must be between 1 and 8"),
        (params(9, 1.0, 5), "beams must be between 1 and 8"),
        (params(2, -0.5, 5), "length penalty must be between 0 and 2"),
        (params(2, 2.5, 5), "length penalty must be between 0 and 2"),
        (params(2, f32::NAN, 5), "length penalty must be between 0 and 2"),
        (params(2, 1.0, 0), "max_tokens must be at least 1"),
    ] {
        let err = BeamSearch::new(prompt.clone(), p, tok, 64).err().expect("refused").to_string();
        assert!(err.contains(words), "{err}");
    }
    assert!(BeamSearch::new(vec![1; 64], params(2, 1.0, 5), tok, 64).is_err(), "a prompt that fills the context");
}

#[test]
fn a_wider_search_finds_the_sequence_greedy_decoding_misses() {
    let m = synthetic_model();
    let tok = &m.tokenizer;
    let (a, b) = (tok.encode("a").expect("encode")[0], tok.encode("b").expect("encode")[0]);
    let prompt = tok.encode("x").expect("encode");
    // A garden path: after the prompt, `a` (p 0.6) leads to a coin flip and `b` (p 0.4) to a
    // near-certain `a` (p 0.999), so the best two tokens start with the less likely one.
    let (vocab, prompt_len) = (tok.vocab_size(), prompt.len());
    let garden_path = move |context: &[u32]| {
        let (pa, pb) = match context.get(prompt_len) {
            None => (0.6f32, 0.4f32),
            Some(&t) if t == a => (0.5, 0.5),
            Some(_) => (0.999, 0.001),
        };
        let mut l = vec![f32::NEG_INFINITY; vocab];
        l[a as usize] = pa.ln();
        l[b as usize] = pb.ln();
        l
    };
    let run = |width| {
        let mut backend = Toy::new(garden_path, None);
        let mut s = BeamSearch::new(prompt.clone(), params(width, 0.0, 2), tok, 256).expect("search");
        search(&mut s, &mut backend, tok).1.beams[0].clone()
    };
    let (greedy, wide) = (run(1), run(2));
    assert_eq!(greedy.token_ids[0], a, "greedy takes the likelier first token");
    assert!((greedy.logprob - (0.6f64.ln() + 0.5f64.ln())).abs() < 1e-6, "{greedy:?}");
    assert_eq!(wide.token_ids, vec![b, a], "two beams keep the less likely start");
    assert!((wide.logprob - (0.4f64.ln() + 0.999f64.ln())).abs() < 1e-6, "{wide:?}");
    assert!(wide.score > greedy.score);
}

#[test]
fn nan_logits_are_an_error_in_words_not_a_ranking() {
    let m = synthetic_model();
    let tok = &m.tokenizer;
    let vocab = tok.vocab_size();
    let mut backend = Toy::new(
        move |_: &[u32]| {
            let mut l = vec![0.0f32; vocab];
            l[7] = f32::NAN;
            l
        },
        None,
    );
    let mut s = BeamSearch::new(tok.encode("x").expect("encode"), params(2, 1.0, 4), tok, 256).expect("search");
    let err = pollster::block_on(s.step(&mut backend, tok)).expect_err("an error");
    assert!(matches!(err, tokenscope::Error::NanLogits { index: 7 }), "{err}");
    assert!(err.to_string().contains("its weights are broken"), "{err}");
}

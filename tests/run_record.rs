//! The run record (branches and the export format): forks share their prefix, a round trip
//! through JSON gives the same record, and foreign or broken files are refused in words.
//! Runs natively and in wasm.

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use tokenscope::generation::generate::{FinishReason, GenerateParams, StepEvent};
use tokenscope::generation::run::{RecordedModel, Run, RunRecord, RUN_FORMAT, RUN_VERSION};
use tokenscope::generation::speculative::DraftStep;
use tokenscope::sampler::{sample, SamplerRng, SamplingParams};
use tokenscope::tokenizer::PromptFormat;

fn step_event(step: usize, logits: &[f32], rng: &mut SamplerRng) -> StepEvent {
    let sample = sample(logits, &[], &SamplingParams::default(), 3, rng).expect("valid");
    StepEvent {
        step,
        token_id: sample.token_id,
        text: format!("t{}", sample.token_id),
        token_text: format!("t{}", sample.token_id),
        sample,
        forward_ms: 1.5 * step as f64,
        forward_tokens: if step == 0 { 4 } else { 1 },
        sample_ms: 0.1,
        position: 4 + step,
        // A drafted step (speculative decoding) round-trips too.
        draft: (step == 2).then(|| DraftStep {
            round: 0,
            round_drafted: 4,
            proposed: Some(3),
            accepted: false,
            proposed_text: "t3".into(),
            p: 0.1,
            q: 0.6,
            draft_distribution: None,
        }),
    }
}

fn a_run() -> Run {
    let model = RecordedModel { name: "test".into(), backend: "cpu-fast".into(), n_layers: 2, vocab_size: 5 };
    let mut run = Run::new("Hi".into(), PromptFormat::Chat { system: None }, vec![1, 2, 3, 4], model, GenerateParams::default());
    let mut rng = SamplerRng::new(3);
    for k in 0..4 {
        let logits = [k as f32, 1.0, 0.5, -1.0, 2.0];
        run.push_step(step_event(k, &logits, &mut rng), logits.to_vec());
    }
    run
}

#[test]
fn a_fork_shares_the_steps_before_it_and_keeps_their_logits() {
    let mut run = a_run();
    let id = run.fork(2).expect("step 2 exists");
    assert_eq!((id, run.current().parent, run.current().fork_step, run.current().steps.len()), (1, Some(0), 2, 2));
    let (logits, context) = run.step_input(1).expect("kept");
    assert_eq!((logits[0], context.len()), (1.0, 5), "step 1's logits and the prompt plus step 0");
    assert!(run.step_input(2).is_err(), "not generated on this branch yet");
    assert!(run.fork(9).is_err());
    run.switch(0).expect("branch 0");
    assert_eq!(run.current().steps.len(), 4);
    assert!(run.switch(7).is_err());
}

#[test]
fn an_exported_run_reads_back_the_same() {
    let mut run = a_run();
    run.fork(1).expect("forks");
    let mut rng = SamplerRng::new(5);
    let logits = [0.0, 3.0, 0.0, 0.0, 0.0];
    run.push_step(step_event(1, &logits, &mut rng), logits.to_vec());
    let finish = tokenscope::generation::generate::Finish {
        finish_reason: FinishReason::Cancelled,
        prompt_tokens: 4,
        completion_tokens: 2,
        prefill_ms: 1.0,
        decode_ms: 2.0,
        prefill_tok_s: 4000.0,
        decode_tok_s: 500.0,
        text: String::new(),
        speculative: None,
    };
    run.finish(finish);
    let json = run.record().to_json().expect("writes");
    let back = RunRecord::from_json(&json).expect("reads");
    assert_eq!(&back, run.record());
    assert_eq!((back.format.as_str(), back.version), (RUN_FORMAT, RUN_VERSION));
    assert_eq!(back.branches.len(), 2);
    assert!(json.contains("\"logit\""), "candidates carry their logits");
}

#[test]
fn foreign_and_broken_run_files_are_refused_in_words() {
    let json = a_run().record().to_json().expect("writes");
    let err = |text: &str| RunRecord::from_json(text).expect_err("refused").to_string();
    assert!(err("not json").contains("not a tokenscope run file"));
    assert!(err(&json.replace(RUN_FORMAT, "something-else")).contains("format"));
    assert!(err(&json.replacen("\"version\": 1", "\"version\": 99", 1)).contains("version 99"));
    assert!(err(&json.replacen("\"current\": 0", "\"current\": 3", 1)).contains("no branch"));
    assert!(err(&json.replacen("\"step\": 2", "\"step\": 7", 1)).contains("inconsistent"));
}

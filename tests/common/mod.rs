//! Shared helpers for the integration tests: where the oracle fixtures and the real model are.
#![allow(dead_code)]

use std::path::PathBuf;

/// The reference outputs kept in the repository (`tests/fixtures/oracle`).
pub fn oracle_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/oracle")
}

/// Reads and parses one oracle file; a missing oracle fails the test with directions.
pub fn oracle(name: &str) -> serde_json::Value {
    let path = oracle_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read the oracle {} ({e})", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// The default model fetched by `make model`; a missing model fails the test with directions.
pub fn model_path() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(p.exists(), "{} is missing: run `make model` first", p.display());
    p
}

/// The logits after a prompt and after each token fed to it in turn (teacher forcing): one
/// prefill of `prompt` from an empty cache, then one decode step per token of `fed`.
pub fn teacher_forced_logits<B: tokenscope::backend::Backend>(b: &mut B, prompt: &[u32], fed: &[u32]) -> Vec<Vec<f32>> {
    b.truncate(0);
    let mut out = vec![pollster::block_on(b.prefill(prompt)).expect("prefill")];
    for &t in fed {
        out.push(pollster::block_on(b.decode(t)).expect("decode"));
    }
    out
}

/// log(sum(exp(x))), in f64: the softmax's normalizer, which every logit counts toward.
pub fn logsumexp(x: &[f32]) -> f64 {
    let m = x.iter().copied().fold(f32::MIN, f32::max) as f64;
    m + x.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln()
}

/// Token ids from an oracle JSON array.
pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().expect("array").iter().map(|x| x.as_u64().expect("id") as u32).collect()
}

/// Index of the largest logit (the first on ties).
pub fn argmax(x: &[f32]) -> usize {
    (0..x.len()).fold(0, |b, i| if x[i] > x[b] { i } else { b })
}

/// Largest |ours - reference| over an oracle step's top-40 and its fixed ids.
pub fn max_diff(ours: &[f32], step: &serde_json::Value) -> f64 {
    let mut worst = 0.0f64;
    for pair in step["top"].as_array().expect("top") {
        let (id, logit) = (pair[0].as_u64().expect("id") as usize, pair[1].as_f64().expect("logit"));
        worst = worst.max((ours[id] as f64 - logit).abs());
    }
    for (id, logit) in step["fixed"].as_object().expect("fixed") {
        let id: usize = id.parse().expect("id");
        worst = worst.max((ours[id] as f64 - logit.as_f64().expect("logit")).abs());
    }
    worst
}

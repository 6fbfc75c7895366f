//! Shared helpers for the integration tests: where the oracle and the real model are.
#![allow(dead_code)]

use std::path::PathBuf;

/// `../shared/oracle` beside the repository, or `$TOKENSCOPE_ORACLE`.
pub fn oracle_dir() -> PathBuf {
    std::env::var_os("TOKENSCOPE_ORACLE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/oracle"))
}

/// Reads and parses one oracle file; a missing oracle fails the test with directions.
pub fn oracle(name: &str) -> serde_json::Value {
    let path = oracle_dir().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read the oracle {} ({e}); set TOKENSCOPE_ORACLE", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// The default model fetched by `make model`; a missing model fails the test with directions.
pub fn model_path() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(p.exists(), "{} is missing: run `make model` first", p.display());
    p
}

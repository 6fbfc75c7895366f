//! In wasm: the real tokenizer (its metadata exported by `tokenscope export-tokenizer`)
//! against llama.cpp's ids, through the same check as the native test.
#![cfg(target_arch = "wasm32")]

#[path = "common/tokenize_oracle.rs"]
mod tokenize_oracle;

use wasm_bindgen_test::wasm_bindgen_test;

use tokenscope::model::Gguf;
use tokenscope::tokenizer::Tokenizer;

const TOKENIZER_GGUF: &[u8] = include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/models/SmolLM2-135M-Instruct.tokenizer.gguf"));
const ORACLE: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/oracle/tokenize.json"));

#[wasm_bindgen_test]
fn every_oracle_case_matches_llama_cpp_in_wasm() {
    let gguf = Gguf::read(&mut std::io::Cursor::new(TOKENIZER_GGUF)).expect("gguf");
    let tok = Tokenizer::from_gguf(&gguf).expect("tokenizer");
    assert!(tokenize_oracle::check_all(&tok, ORACLE) >= 20);
}

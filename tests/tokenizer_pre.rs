//! Every pre-tokenizer tokenscope builds (`tokenizer.ggml.pre`: gpt-2, smollm, llama-bpe,
//! smaug-bpe, qwen2, gpt-4o, tekken, bloom, deepseek-v3, falcon, and each of llama.cpp's other names for them) against llama.cpp's ids for hard strings (digits, contractions in both
//! cases, CJK, emoji, whitespace and line-break runs, special tokens, a token no merge builds),
//! on SmolLM2's real vocabulary with a few merges added that straddle the cuts and that token
//! (tests/common/pre_fixture.rs) and only the pre-tokenizer's name changed: tests/fixtures/tokenizer_pre.json, made by
//! bench/make-tokenizer-fixtures.mjs. A name it does not build, or none, is refused by name.
#![cfg(not(target_arch = "wasm32"))]

#[path = "common/pre_fixture.rs"]
mod pre_fixture;

use std::io::Cursor;

use tokenscope::model::Gguf;
use tokenscope::tokenizer::pre::{PRE_ALIASES, SUPPORTED_PRE};
use tokenscope::tokenizer::Tokenizer;
use tokenscope::{Error, ModelError};

const FIXTURE: &str = include_str!("fixtures/tokenizer_pre.json");

/// The fixture's tokenizer ([`pre_fixture::tokenizer_file`]) with `tokenizer.ggml.pre` set to
/// `pre` (or removed).
fn tokenizer_with_pre(pre: Option<&str>) -> Result<Tokenizer, Error> {
    let gguf = Gguf::read(&mut Cursor::new(pre_fixture::tokenizer_file(pre))).expect("reads back");
    Tokenizer::from_gguf(&gguf)
}

#[test]
fn every_pre_tokenizer_cuts_hard_strings_as_llama_cpp_does() {
    let fixture: serde_json::Value = serde_json::from_str(FIXTURE).expect("fixture parses");
    let cases = fixture["cases"].as_array().expect("cases");
    for (pre, _) in SUPPORTED_PRE.iter().chain(&PRE_ALIASES) {
        let tok = tokenizer_with_pre(Some(pre)).unwrap_or_else(|e| panic!("{pre}: {e}"));
        let mine: Vec<_> = cases.iter().filter(|c| c["pre"] == *pre).collect();
        assert!(mine.len() >= 12, "{pre}: the fixture has its cases");
        for case in mine {
            let text = case["text"].as_str().expect("text");
            let want: Vec<u32> = case["ids"].as_array().expect("ids").iter().map(|v| v.as_u64().expect("id") as u32).collect();
            assert_eq!(tok.encode(text).expect("encodes"), want, "{pre}: ids of {text:?}");
        }
    }
}

#[test]
fn the_fixture_tells_every_pair_of_pre_tokenizers_apart() {
    // Were two names cut alike on every text, the test above could not tell them apart.
    let fixture: serde_json::Value = serde_json::from_str(FIXTURE).expect("fixture parses");
    let cases = fixture["cases"].as_array().expect("cases");
    let ids_of = |pre: &str| -> Vec<&serde_json::Value> { cases.iter().filter(|c| c["pre"] == pre).map(|c| &c["ids"]).collect() };
    for (i, (a, _)) in SUPPORTED_PRE.iter().enumerate() {
        for (b, _) in &SUPPORTED_PRE[i + 1..] {
            assert_ne!(ids_of(a), ids_of(b), "llama.cpp cuts every text alike under {a} and {b}");
        }
    }
}

#[test]
fn unknown_or_missing_pre_tokenizers_are_refused_by_name() {
    for (pre, words) in [(Some("deepseek-llm"), "\"deepseek-llm\" is not a pre-tokenizer"), (None, "is missing")] {
        match tokenizer_with_pre(pre) {
            Err(Error::Model(e @ ModelError::Metadata { .. })) => {
                let message = e.to_string();
                assert!(message.contains("tokenizer.ggml.pre") && message.contains(words), "{message}");
                if pre.is_some() {
                    assert!(SUPPORTED_PRE.iter().all(|(name, _)| message.contains(name)), "{message} lists what is built");
                }
            }
            Err(other) => panic!("{pre:?}: {other}"),
            Ok(_) => panic!("{pre:?} built a tokenizer"),
        }
    }
}

#[test]
fn llama_3s_cut_puts_bos_first_unless_the_file_says_otherwise() {
    use candle_core::quantized::gguf_file::{self, Value};
    // llama.cpp's default for a file silent on `tokenizer.ggml.add_bos_token`: BOS first under
    // Llama 3's cut, its aliases and Tekken's, not under the others; the file's own key wins.
    let with_add_bos = |pre: &str, add_bos: Option<bool>| {
        let bytes = pre_fixture::tokenizer_file(Some(pre));
        let mut content = gguf_file::Content::read(&mut Cursor::new(&bytes)).expect("gguf");
        match add_bos {
            Some(b) => content.metadata.insert("tokenizer.ggml.add_bos_token".into(), Value::Bool(b)),
            None => content.metadata.remove("tokenizer.ggml.add_bos_token"),
        };
        let meta: Vec<(&str, &Value)> = content.metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let mut out = Cursor::new(Vec::new());
        gguf_file::write(&mut out, &meta, &[]).expect("write");
        Tokenizer::from_gguf(&Gguf::read(&mut Cursor::new(out.into_inner())).expect("reads back")).expect("builds")
    };
    let bos = with_add_bos("llama-bpe", Some(true)).encode("Hi").expect("encodes")[0];
    for (pre, add_bos, first_is_bos) in [
        ("llama-bpe", None, true),
        ("falcon3", None, true),
        ("tekken", None, true),
        ("llama-bpe", Some(false), false),
        ("qwen2", None, false),
        ("deepseek-r1-qwen", None, false),
        ("hunyuan-dense", None, false),
        ("qwen2", Some(true), true),
    ] {
        let ids = with_add_bos(pre, add_bos).encode("Hi").expect("encodes");
        assert_eq!(ids[0] == bos, first_is_bos, "{pre} with add_bos_token {add_bos:?}: {ids:?}");
    }
}

//! SentencePiece tokenizers (`tokenizer.ggml.model = "llama"`: Llama 2, TinyLlama, Mistral)
//! against llama.cpp's ids for hard strings (the pre-tokenizer fixture's, SentencePiece's
//! control tokens written in the text, runs of spaces), on SmolLM2's vocabulary respelt as
//! scored pieces with byte tokens (tests/common/spm_fixture.rs), with and without the space
//! llama.cpp puts before the text: tests/fixtures/tokenizer_spm.json, made by
//! bench/make-tokenizer-fixtures.mjs. Decoding gives the text back, bytes spelt as byte tokens
//! among it; a SentencePiece file without scores, and a tokenizer model neither kind, are
//! refused by name.
#![cfg(not(target_arch = "wasm32"))]

#[path = "common/spm_fixture.rs"]
mod spm_fixture;

use std::io::Cursor;

use tokenscope::model::Gguf;
use tokenscope::tokenizer::Tokenizer;
use tokenscope::{Error, ModelError};

const FIXTURE: &str = include_str!("fixtures/tokenizer_spm.json");

fn tokenizer(bytes: Vec<u8>) -> Result<Tokenizer, Error> {
    let gguf = Gguf::read(&mut Cursor::new(bytes)).expect("reads back");
    Tokenizer::from_gguf(&gguf)
}

fn cases(file: &str) -> Vec<(String, Vec<u32>)> {
    let fixture: serde_json::Value = serde_json::from_str(FIXTURE).expect("fixture parses");
    fixture["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .filter(|c| c["file"] == file)
        .map(|c| {
            let ids = c["ids"].as_array().expect("ids").iter().map(|v| v.as_u64().expect("id") as u32).collect();
            (c["text"].as_str().expect("text").to_string(), ids)
        })
        .collect()
}

#[test]
fn sentence_piece_cuts_hard_strings_as_llama_cpp_does() {
    for (file, add_space_prefix) in spm_fixture::FILES {
        let tok = tokenizer(spm_fixture::tokenizer_file(add_space_prefix)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let mine = cases(file);
        assert!(mine.len() >= 16, "{file}: the fixture has its cases");
        let mut byte_tokens = 0;
        for (text, llama_cpp) in mine {
            // llama.cpp's ids come without the BOS the file asks for.
            let want: Vec<u32> = std::iter::once(1).chain(llama_cpp).collect();
            let got = tok.encode(&text).expect("encodes");
            assert_eq!(got, want, "{file}: ids of {text:?}");
            byte_tokens += got.iter().filter(|&&id| (3..259).contains(&id)).count();
        }
        // The CJK and emoji are spelt in bytes: the byte fallback is exercised.
        assert!(byte_tokens > 10, "{file}: {byte_tokens} byte tokens");
    }
}

#[test]
fn the_fixture_tells_the_space_prefix_apart() {
    assert_ne!(cases("spm"), cases("spm-no-space-prefix"), "llama.cpp cuts every text alike with and without the space prefix");
}

#[test]
fn decoding_gives_the_text_back() {
    let tok = tokenizer(spm_fixture::tokenizer_file(true)).expect("builds");
    for text in ["Hello world", "日本語のテキスト", "emoji 🎉 and tabs\tand\nlines", "  two leading spaces"] {
        let ids = tok.encode(text).expect("encodes");
        // BOS is shown as its text; the space put before the text comes back as a space.
        assert_eq!(tok.decode(&ids), format!("<s> {text}"), "{text:?}");
    }
    assert_eq!(tok.token_text(3 + 0x0A), "\n");
    // </s> ends a run, and so do the control tokens named as turn ends (SmolLM2's here).
    assert_eq!(tok.eos_ids().first(), Some(&2));
    assert!(tok.is_control(1) && tok.is_control(2) && !tok.is_control(0));
}

#[test]
fn a_sentence_piece_file_needs_its_scores_and_other_kinds_are_refused_by_name() {
    use candle_core::quantized::gguf_file::{self, Value};
    let edited = |edit: &dyn Fn(&mut std::collections::HashMap<String, Value>)| {
        let bytes = spm_fixture::tokenizer_file(true);
        let mut content = gguf_file::Content::read(&mut Cursor::new(&bytes)).expect("gguf");
        edit(&mut content.metadata);
        let metadata: Vec<(&str, &Value)> = content.metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let mut out = Cursor::new(Vec::new());
        gguf_file::write(&mut out, &metadata, &[]).expect("write");
        tokenizer(out.into_inner())
    };
    let refused = |r: Result<Tokenizer, Error>, key: &str, words: &str| match r {
        Err(Error::Model(ModelError::Metadata { key: k, problem })) => {
            assert_eq!(k, key);
            assert!(problem.contains(words), "{problem}");
        }
        Err(other) => panic!("{key}: {other}"),
        Ok(_) => panic!("{key}: built"),
    };
    refused(edited(&|m| drop(m.remove("tokenizer.ggml.scores"))), "tokenizer.ggml.scores", "is missing");
    refused(
        edited(&|m| drop(m.insert("tokenizer.ggml.scores".into(), Value::Array(vec![Value::F32(0.0)])))),
        "tokenizer.ggml.scores",
        "has 1 scores for",
    );
    refused(
        edited(&|m| drop(m.insert("tokenizer.ggml.model".into(), Value::String("bert".into())))),
        "tokenizer.ggml.model",
        "\"bert\" is not supported; tokenscope reads byte-level BPE (\"gpt2\") and SentencePiece (\"llama\")",
    );
}

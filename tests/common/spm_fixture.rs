//! The SentencePiece tokenizer file the SentencePiece fixture is made from and checked with:
//! SmolLM2's vocabulary respelt as SentencePiece pieces (a real subword vocabulary of English
//! and code, where a made-up one would be thin). Shared by tests/tokenizer_spm.rs and
//! examples/tokenizer_spm_files.rs, which writes the files llama.cpp tokenizes
//! (bench/make-tokenizer-fixtures.mjs).
//!
//! Its tokens: `<unk>` (unknown), `<s>` and `</s>` (control), the 256 byte tokens `<0x00>` to
//! `<0xFF>`, SmolLM2's control tokens, then each of SmolLM2's other tokens whose bytes are
//! whole UTF-8 text without a NUL, a space written `▁`, scored minus its SmolLM2 id (its merge came earlier:
//! it ranks higher), then every character of those pieces that is not one yet (as a
//! SentencePiece vocabulary holds each character of its pieces), scored below them all.

use std::collections::HashSet;
use std::io::Cursor;

use candle_core::quantized::gguf_file::{self, Value};
use tokenscope::tokenizer::byte_level::ByteAlphabet;

/// Where `make test` puts SmolLM2's exported tokenizer.
pub const SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/models/SmolLM2-135M-Instruct.tokenizer.gguf");

/// The file names the fixture has, with `tokenizer.ggml.add_space_prefix` in each.
pub const FILES: [(&str, bool); 2] = [("spm", true), ("spm-no-space-prefix", false)];

/// The SentencePiece tokenizer GGUF, with `add_space_prefix` written as given.
pub fn tokenizer_file(add_space_prefix: bool) -> Vec<u8> {
    respelt(&std::fs::read(SOURCE).expect("make test exports the tokenizer first"), add_space_prefix)
}

/// A byte-level BPE GGUF's vocabulary respelt as a SentencePiece tokenizer GGUF (no tensors),
/// as the module's comment says.
pub fn respelt(bytes: &[u8], add_space_prefix: bool) -> Vec<u8> {
    let mut content = gguf_file::Content::read(&mut Cursor::new(bytes)).expect("gguf");
    let meta = &mut content.metadata;
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(|v| v.to_vec().ok()).map(|a| a.iter().filter_map(|s| s.to_string().ok().cloned()).collect()).unwrap_or_default()
    };
    let source = strings(meta.get("tokenizer.ggml.tokens"));
    let source_types: Vec<i64> = meta
        .get("tokenizer.ggml.token_type")
        .and_then(|v| v.to_vec().ok())
        .map(|a| a.iter().map(|v| v.to_i32().map_or(1, i64::from)).collect())
        .unwrap_or_default();
    let mut tokens: Vec<(String, f32, i32)> = vec![("<unk>".into(), 0.0, 2), ("<s>".into(), 0.0, 3), ("</s>".into(), 0.0, 3)];
    tokens.extend((0..=255u8).map(|b| (format!("<0x{b:02X}>"), 0.0, 6)));
    for (i, t) in source.iter().enumerate() {
        if source_types.get(i) == Some(&3) {
            tokens.push((t.clone(), 0.0, 3));
        }
    }
    let mut seen: HashSet<String> = tokens.iter().map(|t| t.0.clone()).collect();
    let alphabet = ByteAlphabet::new();
    let mut pieces = Vec::new();
    for (i, t) in source.iter().enumerate() {
        if source_types.get(i) == Some(&3) {
            continue;
        }
        // Not a NUL: llama.cpp reads a token's text as a C string.
        let Ok(text) = String::from_utf8(alphabet.to_bytes(t)) else { continue };
        if text.contains('\0') {
            continue;
        }
        let piece = text.replace(' ', "\u{2581}");
        if !piece.is_empty() && seen.insert(piece.clone()) {
            pieces.push((piece, -(i as f32), 1));
        }
    }
    let lowest = -(source.len() as f32);
    let mut characters = Vec::new();
    for (piece, _, _) in &pieces {
        for c in piece.chars() {
            if seen.insert(c.to_string()) {
                characters.push((c.to_string(), lowest - characters.len() as f32 - 1.0, 1));
            }
        }
    }
    tokens.extend(pieces);
    tokens.extend(characters);

    for key in ["tokenizer.ggml.merges", "tokenizer.ggml.pre"] {
        meta.remove(key);
    }
    // SmolLM2's ids of its special tokens mean other tokens here.
    meta.retain(|k, _| !k.ends_with(".vocab_size") && !k.ends_with("_token_id"));
    let set = |meta: &mut std::collections::HashMap<String, Value>, k: &str, v: Value| meta.insert(k.to_string(), v);
    set(meta, "tokenizer.ggml.model", Value::String("llama".into()));
    set(meta, "tokenizer.ggml.tokens", Value::Array(tokens.iter().map(|t| Value::String(t.0.clone())).collect()));
    set(meta, "tokenizer.ggml.scores", Value::Array(tokens.iter().map(|t| Value::F32(t.1)).collect()));
    set(meta, "tokenizer.ggml.token_type", Value::Array(tokens.iter().map(|t| Value::I32(t.2)).collect()));
    set(meta, "tokenizer.ggml.unknown_token_id", Value::U32(0));
    set(meta, "tokenizer.ggml.bos_token_id", Value::U32(1));
    set(meta, "tokenizer.ggml.eos_token_id", Value::U32(2));
    set(meta, "tokenizer.ggml.add_bos_token", Value::Bool(true));
    set(meta, "tokenizer.ggml.add_space_prefix", Value::Bool(add_space_prefix));
    let metadata: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut out = Cursor::new(Vec::new());
    gguf_file::write(&mut out, &metadata, &[]).expect("write");
    out.into_inner()
}

//! The tokenizer file the pre-tokenizer fixture is made from and checked with: SmolLM2's
//! tensor-less GGUF (`make test` exports it) with `tokenizer.ggml.pre` set, and a few merges
//! appended whose tokens straddle the cuts some pre-tokenizers make and others do not (SmolLM2's
//! own merges were learnt under its own cuts, so alone they give the same ids under every
//! name), and a token no merge reaches. Shared by tests/tokenizer_pre.rs and examples/tokenizer_pre_files.rs, which writes the
//! files llama.cpp tokenizes (bench/make-tokenizer-fixtures.mjs).

use std::io::Cursor;

use candle_core::quantized::gguf_file::{self, Value};

/// Where `make test` puts SmolLM2's exported tokenizer.
pub const SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/models/SmolLM2-135M-Instruct.tokenizer.gguf");

/// Merges (byte-level spelling: `Ġ` a space, `ĉ` a tab) that cross a cut of one name only:
/// multi-digit numbers (gpt-2 and llama-bpe keep them whole), a space before a digit (gpt-2),
/// upper-case contractions (llama-bpe and qwen2), a word after punctuation (llama-bpe, qwen2),
/// Latin letters after a CJK ideograph (`æĸĩ` is 文; deepseek-v3 cuts runs of CJK apart), a
/// line break after a full stop (`Ċ`; GPT-4's split keeps it on the punctuation run,
/// seed-coder's leaves it).
const EXTRA_MERGES: [(&str, &str); 11] = [
    ("1", "2"),
    ("12", "3"),
    ("Ġ", "1"),
    ("'", "V"),
    ("'V", "E"),
    ("'", "L"),
    ("'L", "L"),
    ("(", "p"),
    ("ĉ", "and"),
    ("æĸĩ", "abc"),
    (".", "Ċ"),
];

/// A token no merge builds (byte-level spelling): a pre-tokenizer that takes a piece that is a
/// token whole (llama-bpe's `ignore_merges`) gives it for " zqxj", the others merge its letters.
const UNMERGED_TOKEN: &str = "Ġzqxj";

/// The tokenizer GGUF with `pre` (or none), [`EXTRA_MERGES`] and [`UNMERGED_TOKEN`].
pub fn tokenizer_file(pre: Option<&str>) -> Vec<u8> {
    let bytes = std::fs::read(SOURCE).expect("make test exports the tokenizer first");
    let mut content = gguf_file::Content::read(&mut Cursor::new(&bytes)).expect("gguf");
    let meta = &mut content.metadata;
    match pre {
        Some(p) => meta.insert("tokenizer.ggml.pre".into(), Value::String(p.into())),
        None => meta.remove("tokenizer.ggml.pre"),
    };
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(|v| v.to_vec().ok()).map(|a| a.iter().filter_map(|s| s.to_string().ok().cloned()).collect()).unwrap_or_default()
    };
    let mut tokens = strings(meta.get("tokenizer.ggml.tokens"));
    let mut merges = strings(meta.get("tokenizer.ggml.merges"));
    let mut types = meta.get("tokenizer.ggml.token_type").and_then(|v| v.to_vec().ok()).cloned().unwrap_or_default();
    for (a, b) in EXTRA_MERGES {
        let joined = format!("{a}{b}");
        if !tokens.contains(&joined) {
            tokens.push(joined);
            types.push(Value::I32(1));
        }
        merges.push(format!("{a} {b}"));
    }
    if !tokens.iter().any(|t| t == UNMERGED_TOKEN) {
        tokens.push(UNMERGED_TOKEN.into());
        types.push(Value::I32(1));
    }
    meta.insert("tokenizer.ggml.tokens".into(), Value::Array(tokens.into_iter().map(Value::String).collect()));
    meta.insert("tokenizer.ggml.merges".into(), Value::Array(merges.into_iter().map(Value::String).collect()));
    meta.insert("tokenizer.ggml.token_type".into(), Value::Array(types));
    // The vocabulary grew: a declared size would now disagree with it.
    meta.retain(|k, _| !k.ends_with(".vocab_size"));
    let metadata: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut out = Cursor::new(Vec::new());
    gguf_file::write(&mut out, &metadata, &[]).expect("write");
    out.into_inner()
}

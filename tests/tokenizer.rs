//! Tokenizer behaviour on a synthetic vocabulary, streaming detokenization and stop strings.
//! Runs natively and in wasm.

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use tokenscope::generation::stop::StopMatcher;
use tokenscope::model::synthetic::{SyntheticModel, SyntheticSpec};
use tokenscope::model::Gguf;
use tokenscope::tokenizer::{Tokenizer, Utf8Stream};

#[path = "common/spm_fixture.rs"]
#[allow(dead_code)]
mod spm_fixture;

fn synthetic_tokenizer() -> Tokenizer {
    let bytes = SyntheticModel::new(&SyntheticSpec::default()).expect("model").to_bytes().expect("bytes");
    Tokenizer::from_gguf(&Gguf::read(&mut std::io::Cursor::new(bytes)).expect("gguf")).expect("tokenizer")
}

#[test]
fn synthetic_vocabulary_round_trips_any_text() {
    let tok = synthetic_tokenizer();
    for text in ["the theme", "héllo wörld 🙂", "a\n\n\tb  c", "12345", "", "<|im_start|>user\nhi<|im_end|>"] {
        let ids = tok.encode(text).expect("encodes");
        assert_eq!(tok.decode(&ids), text);
    }
}

/// SentencePiece in wasm as natively (tests/tokenizer_spm.rs holds it to llama.cpp): the
/// synthetic vocabulary respelt as scored pieces gives any text back, a space put before it,
/// its characters that are no piece spelt as byte tokens.
#[test]
fn a_sentence_piece_vocabulary_round_trips_any_text() {
    let bytes = SyntheticModel::new(&SyntheticSpec::default()).expect("model").to_bytes().expect("bytes");
    let respelt = spm_fixture::respelt(&bytes, true);
    let tok = Tokenizer::from_gguf(&Gguf::read(&mut std::io::Cursor::new(respelt)).expect("gguf")).expect("tokenizer");
    for text in ["the theme", "héllo wörld 🙂", "a\n\n\tb  c", "12345"] {
        let ids = tok.encode(text).expect("encodes");
        assert_eq!(ids[0], 1, "BOS first");
        assert_eq!(tok.decode(&ids[1..]), format!(" {text}"));
    }
    // "🙂" is no piece: its four bytes are byte tokens (3 + the byte).
    let smile = tok.encode("🙂").expect("encodes");
    assert!(smile.ends_with(&[3 + 0xF0, 3 + 0x9F, 3 + 0x99, 3 + 0x82]), "{smile:?}");
}

#[test]
fn merges_and_digits_and_specials() {
    let tok = synthetic_tokenizer();
    let the = tok.encode("the").expect("ok");
    assert_eq!(the.len(), 1, "the merged word is one token");
    assert_eq!(tok.encode("123").expect("ok").len(), 3, "digits split one by one");
    assert_eq!(tok.encode("<|im_end|>").expect("ok"), [2], "control tokens are matched verbatim");
    assert!(tok.is_control(1) && !tok.is_control(3));
    assert_eq!(tok.eos_ids(), [2, 0]);
}

#[test]
fn gemmas_and_phi3s_end_of_turn_ends_a_run_beside_its_end_of_sequence() {
    use candle_core::quantized::gguf_file::Value;
    // Gemma's files name <eos> as the end of sequence and end each chat turn with the control
    // token <end_of_turn>, Phi-3's name <|endoftext|> and end a turn with <|end|>: both stop
    // generation.
    for name in ["<end_of_turn>", "<|end|>"] {
        let mut m = SyntheticModel::new(&SyntheticSpec::default()).expect("model");
        let Some((_, Value::Array(tokens))) = m.metadata.iter().find(|(k, _)| k == "tokenizer.ggml.tokens").cloned() else {
            panic!("tokens")
        };
        let Some((_, Value::Array(types))) = m.metadata.iter().find(|(k, _)| k == "tokenizer.ggml.token_type").cloned() else {
            panic!("types")
        };
        let end_of_turn = tokens.len() as u32;
        m.set_meta("tokenizer.ggml.tokens", Value::Array([tokens, vec![Value::String(name.into())]].concat()));
        m.set_meta("tokenizer.ggml.token_type", Value::Array([types, vec![Value::I32(3)]].concat()));
        let bytes = m.to_bytes().expect("bytes");
        let tok = Tokenizer::from_gguf(&Gguf::read(&mut std::io::Cursor::new(bytes)).expect("gguf")).expect("tokenizer");
        assert_eq!(tok.eos_ids(), [2, 0, end_of_turn], "{name}");
        assert_eq!(tok.encode(name).expect("encodes"), [end_of_turn], "{name} matched verbatim as a control token");
    }
}

#[test]
fn a_token_that_is_not_whole_utf8_names_its_bytes() {
    let tok = synthetic_tokenizer();
    // The byte tokens follow the 3 control tokens in byte order.
    let byte = |b: u8| 3 + u32::from(b);
    assert_eq!(tok.token_bytes(byte(0xE2)), [0xE2], "the synthetic vocabulary's byte token");
    assert_eq!(tok.token_text(byte(0xE2)), "<0xE2>", "the first byte of a 3-byte character");
    assert_eq!(tok.token_text(byte(0xFF)), "<0xFF>", "a byte no UTF-8 text has");
    assert_eq!(tok.token_text(byte(b'a')), "a");
    assert_eq!(tok.encode("the").map(|ids| tok.token_text(ids[0])).expect("encodes"), "the");
}

#[test]
fn streaming_never_emits_half_a_character() {
    let mut s = Utf8Stream::new();
    let snowman = "☃".as_bytes(); // 3 bytes
    assert_eq!(s.push(&snowman[..1]), "");
    assert_eq!(s.push(&snowman[1..2]), "");
    assert_eq!(s.pending_len(), 2);
    assert_eq!(s.push(&[snowman[2], b'!']), "☃!");
    let emoji = "🙂".as_bytes();
    assert_eq!(s.push(&[b'a', emoji[0], emoji[1]]), "a");
    assert_eq!(s.finish(), "\u{FFFD}", "an unfinished character is flushed as U+FFFD");
    assert_eq!(s.push(&[0xFF, b'x']), "\u{FFFD}x", "an impossible byte is replaced at once");
}

#[test]
fn streaming_matches_whole_decode_token_by_token() {
    let tok = synthetic_tokenizer();
    let text = "naïve café — the 🙂 ok";
    let ids = tok.encode(text).expect("ok");
    let mut s = Utf8Stream::new();
    let mut out = String::new();
    for &id in &ids {
        let piece = s.push(tok.token_bytes(id));
        assert!(!piece.contains('\u{FFFD}'));
        out.push_str(&piece);
    }
    out.push_str(&s.finish());
    assert_eq!(out, text);
}

fn run_stops(stops: &[&str], pieces: &[&str]) -> (String, bool) {
    let mut m = StopMatcher::new(&stops.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    let mut out = String::new();
    for p in pieces {
        let c = m.push(p);
        out.push_str(&c.emit);
        if c.stopped {
            return (out, true);
        }
    }
    out.push_str(&m.flush());
    (out, false)
}

#[test]
fn stop_string_spanning_tokens_is_never_emitted() {
    assert_eq!(run_stops(&["\n\nUser:"], &["Hello", "\n", "\nUs", "er:", " more"]), ("Hello".into(), true));
    assert_eq!(run_stops(&["END"], &["The E", "N", "D"]), ("The ".into(), true));
}

#[test]
fn held_text_is_released_when_the_stop_fails_to_complete() {
    let mut m = StopMatcher::new(&["END".to_string()]);
    assert_eq!(m.push("The E").emit, "The ");
    assert_eq!(m.push("N").emit, "");
    assert_eq!(m.push("d").emit, "ENd", "no longer a prefix of END: released");
    assert_eq!(run_stops(&["END"], &["x E", "N"]), ("x EN".into(), false), "flushed at the end");
}

#[test]
fn earliest_of_several_stops_wins_and_text_before_it_survives() {
    assert_eq!(run_stops(&["b", "xyz", "a"], &["12ab"]), ("12".into(), true));
    assert_eq!(run_stops(&["é!"], &["caf", "é", "!"]), ("caf".into(), true));
    assert_eq!(run_stops(&[], &["plain"]), ("plain".into(), false));
}

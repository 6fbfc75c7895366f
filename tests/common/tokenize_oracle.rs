//! The tokenizer against llama.cpp's ids for every case of `tokenize.json`; shared by the
//! native test and the wasm test so the two cannot drift apart.

use tokenscope::tokenizer::Tokenizer;

/// Checks ids, per-token bytes and the round trip of every case; returns how many passed.
pub fn check_all(tok: &Tokenizer, oracle_json: &str) -> usize {
    let oracle: serde_json::Value = serde_json::from_str(oracle_json).expect("tokenize.json parses");
    let cases = oracle["cases"].as_array().expect("cases");
    assert!(cases.len() >= 20, "the oracle has its cases");
    for case in cases {
        let text = case["text"].as_str().expect("text");
        let want: Vec<u32> = case["ids"].as_array().expect("ids").iter().map(|v| v.as_u64().expect("id") as u32).collect();
        let got = tok.encode(text).expect("encodes");
        assert_eq!(got, want, "ids of {text:?}");
        let pieces: Vec<String> = got.iter().map(|&id| hex(tok.token_bytes(id))).collect();
        let want_pieces: Vec<&str> = case["pieces_hex"].as_array().expect("pieces").iter().map(|v| v.as_str().expect("hex")).collect();
        assert_eq!(pieces, want_pieces, "token bytes of {text:?}");
        assert_eq!(tok.decode(&got), case["detokenized"].as_str().expect("detokenized"), "round trip of {text:?}");
    }
    cases.len()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

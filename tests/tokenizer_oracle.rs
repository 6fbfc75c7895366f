//! The real model's tokenizer against llama.cpp's ids (`tests/fixtures/oracle/tokenize.json`).

mod common;
#[path = "common/tokenize_oracle.rs"]
mod tokenize_oracle;

use tokenscope::model::Gguf;
use tokenscope::tokenizer::{PromptFormat, Tokenizer};

fn real_tokenizer() -> Tokenizer {
    let mut f = std::io::BufReader::new(std::fs::File::open(common::model_path()).expect("model opens"));
    Tokenizer::from_gguf(&Gguf::read(&mut f).expect("gguf")).expect("tokenizer")
}

#[test]
fn every_oracle_case_matches_llama_cpp() {
    let text = std::fs::read_to_string(common::oracle_dir().join("tokenize.json")).expect("oracle");
    let n = tokenize_oracle::check_all(&real_tokenizer(), &text);
    assert!(n >= 20);
}

#[test]
fn notes_examples() {
    let tok = real_tokenizer();
    assert_eq!(tok.encode("Hello world 12345").expect("ok"), [19556, 905, 216, 33, 34, 35, 36, 37]);
    assert_eq!(tok.encode("Hello").expect("ok"), [19556], "no leading space is added");
    assert_eq!(tok.eos_ids()[0], 2);
    assert!(tok.eos_ids().contains(&0), "<|endoftext|> ends generation too");
}

#[test]
fn chat_prompts_match_the_greedy_oracle() {
    let tok = real_tokenizer();
    let greedy = common::oracle("greedy.json");
    for case in greedy["cases"].as_array().expect("cases") {
        let want: Vec<u32> = case["prompt_ids"].as_array().expect("ids").iter().map(|v| v.as_u64().expect("id") as u32).collect();
        let got = if case["kind"] == "chat" {
            let q = case["question"].as_str().expect("question");
            tok.encode_prompt(&PromptFormat::Chat { system: None }, q).expect("ok")
        } else {
            tok.encode_prompt(&PromptFormat::Completion, case["prompt"].as_str().expect("prompt")).expect("ok")
        };
        assert_eq!(got, want, "{}", case["prompt_text"]);
    }
}

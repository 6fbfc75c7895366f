//! Chat templates from the file: rendered like Python's jinja2 renders them for Hugging Face
//! transformers (tests/fixtures/chat_templates.json, made by
//! bench/make-chat-template-fixtures.py from our own templates that use what real ones use:
//! namespaces, Python string methods, reverse slices, loop controls, macros, raise_exception,
//! the BOS token, strftime_now at the fixture's time, transformers' generation tags), and what chat mode does with a model's file: no template or a broken one
//! refuses chat by name and keeps completion working; a template that never ends is stopped.
//! Runs natively and in wasm.

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use candle_core::quantized::gguf_file::Value;
use helpers::*;
use tokenscope::error::{Error, ErrorName};
use tokenscope::model::synthetic::{SyntheticModel, SyntheticSpec};
use tokenscope::model::Gguf;
use tokenscope::tokenizer::{ChatMessage, ChatTemplate, PromptFormat, Tokenizer, CHAT_TEMPLATE_KEY};

/// Fixture helpers (kept apart so the test names read as sentences).
mod helpers {
    use super::*;

    pub const FIXTURE: &str = include_str!("fixtures/chat_templates.json");

    pub fn fixture() -> serde_json::Value {
        serde_json::from_str(FIXTURE).expect("fixture parses")
    }

    pub fn messages(v: &serde_json::Value) -> Vec<ChatMessage> {
        v.as_array()
            .expect("messages")
            .iter()
            .map(|m| ChatMessage::new(m["role"].as_str().expect("role"), m["content"].as_str().expect("content")))
            .collect()
    }

    pub fn tokenizer_of(model: &SyntheticModel) -> Tokenizer {
        let bytes = model.to_bytes().expect("bytes");
        Tokenizer::from_gguf(&Gguf::read(&mut std::io::Cursor::new(bytes)).expect("gguf")).expect("tokenizer")
    }

    pub fn with_template(source: &str) -> SyntheticModel {
        let mut m = SyntheticModel::new(&SyntheticSpec::default()).expect("model");
        m.set_meta(CHAT_TEMPLATE_KEY, Value::String(source.to_string()));
        m
    }

    pub fn chat(system: Option<&str>) -> PromptFormat {
        PromptFormat::Chat { system: system.map(str::to_string) }
    }
}

#[test]
fn every_fixture_template_renders_as_jinja2_does() {
    let f = fixture();
    let cases = f["cases"].as_array().expect("cases");
    assert!(cases.len() >= 80, "the fixture covers every template and conversation");
    let now = chrono::NaiveDateTime::parse_from_str(f["now"].as_str().expect("now"), "%Y-%m-%dT%H:%M:%S").expect("the fixture's time");
    let (mut rendered, mut refused) = (0, 0);
    for case in cases {
        let name = case["template"].as_str().expect("template name");
        let source = f["templates"][name].as_str().expect("template source");
        let label = format!("{name} / {} / add_generation_prompt={}", case["conversation"], case["add_generation_prompt"]);
        let t = ChatTemplate::compile(source, case["bos_token"].as_str().expect("bos"), case["eos_token"].as_str().expect("eos"))
            .unwrap_or_else(|e| panic!("{name} compiles: {e}"));
        let got = t.render_at(&messages(&case["messages"]), case["add_generation_prompt"].as_bool().expect("flag"), now);
        match (case.get("expected"), case.get("error")) {
            (Some(expected), _) => {
                assert_eq!(got.unwrap_or_else(|e| panic!("{label}: {e}")), expected.as_str().expect("text"), "{label}");
                rendered += 1;
            }
            (None, Some(error)) => {
                let e = got.expect_err(&label).to_string();
                let said = error.as_str().expect("error text");
                assert!(e.contains("refuses this conversation") && e.contains(said), "{label}: {e:?} should carry {said:?}");
                refused += 1;
            }
            _ => panic!("{label}: the case has neither expected text nor an error"),
        }
    }
    assert!(rendered > 0 && refused > 0, "both outcomes are exercised ({rendered} rendered, {refused} refused)");
}

#[test]
fn chat_mode_uses_the_files_template_and_its_default_system_turn() {
    let tok = tokenizer_of(&SyntheticModel::new(&SyntheticSpec::default()).expect("model"));
    assert_eq!(tok.chat_support(), Ok(()));
    assert_eq!(
        tok.render_prompt(&chat(None), "Hi").expect("renders"),
        "<|im_start|>system\nA synthetic model.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    assert_eq!(
        tok.render_prompt(&chat(Some("Be terse.")), "Hi").expect("renders"),
        "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    assert_eq!(tok.render_prompt(&PromptFormat::Completion, "Once").expect("plain"), "Once");
    let ids = tok.encode_prompt(&chat(None), "Hi").expect("encodes");
    assert_eq!(ids.iter().filter(|&&id| id == 1).count(), 3, "<|im_start|> is one control token at each turn");
}

#[test]
fn a_file_without_a_template_refuses_chat_by_name_and_still_completes() {
    let mut m = SyntheticModel::new(&SyntheticSpec::default()).expect("model");
    m.remove_meta(CHAT_TEMPLATE_KEY);
    let tok = tokenizer_of(&m);
    let why = tok.chat_support().expect_err("no template");
    assert!(why.contains(CHAT_TEMPLATE_KEY), "{why}");
    let e = tok.encode_prompt(&chat(None), "Hi").expect_err("chat refused");
    assert!(matches!(e, Error::ChatTemplate(_)) && e.kind() == ErrorName::InvalidParams, "{e:?}");
    assert!(e.to_string().contains("no chat template") && e.to_string().contains("completion mode"), "{e}");
    assert!(!tok.encode_prompt(&PromptFormat::Completion, "Hi").expect("completion works").is_empty());
}

#[test]
fn a_template_that_does_not_compile_is_named_with_its_line() {
    let tok = tokenizer_of(&with_template("{% for m in messages %}\n{{ m.content }\n{% endfor %}"));
    let why = tok.chat_support().expect_err("broken template");
    assert!(why.contains("does not compile") && why.contains("tokenizer.chat_template:2"), "{why}");
    assert!(tok.encode_prompt(&chat(None), "Hi").expect_err("chat refused").to_string().contains("does not compile"));
    assert!(!tok.encode_prompt(&PromptFormat::Completion, "Hi").expect("completion works").is_empty());
}

#[test]
fn a_template_that_never_ends_is_stopped() {
    let tok = tokenizer_of(&with_template(
        "{% for a in range(100000) %}{% for b in range(100000) %}{{ '' }}{% endfor %}{% endfor %}<|im_start|>",
    ));
    let e = tok.render_prompt(&chat(None), "Hi").expect_err("runs out of fuel");
    assert!(e.to_string().contains("failed to render") && e.to_string().contains("fuel"), "{e}");
}

#[test]
fn a_template_refusing_the_conversation_says_why() {
    let tok = tokenizer_of(&with_template("{{ raise_exception('System messages are not supported') }}"));
    let e = tok.encode_prompt(&chat(Some("x")), "Hi").expect_err("refused");
    assert!(e.to_string().contains("refuses this conversation: System messages are not supported"), "{e}");
}

#[test]
fn a_bos_written_by_the_template_is_not_doubled() {
    let mut m = with_template("{{ bos_token }}<|im_start|>{{ messages[-1].content }}");
    m.set_meta("tokenizer.ggml.add_bos_token", Value::Bool(true));
    let tok = tokenizer_of(&m);
    let ids = tok.encode_prompt(&chat(None), "Hi").expect("encodes");
    assert_eq!(ids.first(), Some(&1), "BOS first");
    assert_eq!(ids.iter().filter(|&&id| id == 1).count(), 2, "BOS once, then the template's <|im_start|> (the same id here)");
    m.set_meta("tokenizer.ggml.add_bos_token", Value::Bool(false));
    let ids_without = tokenizer_of(&m).encode_prompt(&chat(None), "Hi").expect("encodes");
    assert_eq!(ids, ids_without, "the template's own BOS is kept when the tokenizer adds none");
}

#[test]
fn a_template_writes_todays_date_and_a_format_it_cannot_write_is_refused_in_words() {
    let one = [ChatMessage::new("user", "Hi")];
    let dated = ChatTemplate::compile("{{ strftime_now('%Y-%m-%d') }}", "", "").expect("compiles");
    let (before, got, after) = (chrono::Local::now(), dated.render(&one, true).expect("renders"), chrono::Local::now());
    let days = [before, after].map(|t| t.format("%Y-%m-%d").to_string());
    assert!(days.contains(&got), "{got} is the local date ({days:?})");
    let bad = ChatTemplate::compile("{{ strftime_now('%Q') }}", "", "").expect("compiles");
    let e = bad.render(&one, true).expect_err("no such directive").to_string();
    assert!(e.contains("strftime_now cannot write the date as \"%Q\""), "{e}");
}

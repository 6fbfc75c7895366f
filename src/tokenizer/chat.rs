//! Prompt formats: raw completion, or a conversation rendered with the model's own chat template.
//!
//! An instruction-tuned GGUF carries its prompt format as a Jinja template in
//! `tokenizer.chat_template`. It is compiled once with minijinja, set up as Hugging Face
//! transformers renders templates with Python's jinja2 (`trim_blocks`, `lstrip_blocks`, loop
//! controls, Python's string methods, a `raise_exception` function, `strftime_now` for the
//! date, the `{% generation %}` tags of its assistant-mask extension), so `--chat` and the
//! page's chat mode write exactly what the model was trained on. A file without a template, or
//! with one that does not compile, still runs in completion mode; chat mode is refused with
//! the reason, never guessed.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::LazyLock;

use chrono::format::StrftimeItems;
use chrono::{Local, NaiveDateTime};
use minijinja::value::{Serde, Value};
use minijinja::{Environment, ErrorKind};
use regex::{Captures, Regex};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The metadata key that holds the template (also its name in minijinja's error messages).
pub const CHAT_TEMPLATE_KEY: &str = "tokenizer.chat_template";

/// Template instructions one render may run: far above any real template's needs for a short
/// conversation, so a template that loops forever stops with an error instead of hanging.
const RENDER_FUEL: u64 = 5_000_000;

/// How the user's text becomes the model's prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum PromptFormat {
    /// The text is continued as it is.
    Completion,
    /// The text is the user's turn of a conversation in the model's chat template; the model
    /// writes the assistant's turn.
    Chat {
        /// System turn: `None` (or missing) leaves the choice to the template (many write a
        /// default system prompt); `Some(text)` sends a system message with that text.
        #[cfg_attr(target_arch = "wasm32", tsify(optional))]
        system: Option<String>,
    },
}

/// One message of a conversation, as chat templates read them (`message.role`, `message.content`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant` (templates decide what else they accept).
    pub role: String,
    /// The message's text.
    pub content: String,
}

impl ChatMessage {
    /// A message from `role` saying `content`.
    pub fn new(role: &str, content: &str) -> Self {
        ChatMessage { role: role.to_string(), content: content.to_string() }
    }
}

impl PromptFormat {
    /// The conversation this format makes of the user's text (`None` for completion).
    pub fn messages(&self, text: &str) -> Option<Vec<ChatMessage>> {
        match self {
            PromptFormat::Completion => None,
            PromptFormat::Chat { system } => {
                let system = system.as_deref().map(|s| ChatMessage::new("system", s));
                Some(system.into_iter().chain([ChatMessage::new("user", text)]).collect())
            }
        }
    }
}

/// A model's chat template, compiled and ready to render conversations.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").field("bos_token", &self.bos_token).field("eos_token", &self.eos_token).finish()
    }
}

impl ChatTemplate {
    /// Compiles `source`; `bos_token` and `eos_token` are the texts templates see under those
    /// names. A syntax error is returned in minijinja's words (line and cause).
    pub fn compile(source: &str, bos_token: &str, eos_token: &str) -> Result<Self> {
        let source = without_generation_tags(source);
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| chat_err(&format!("cannot configure the template engine: {e}")))?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.set_fuel(Some(RENDER_FUEL));
        env.add_template_owned(CHAT_TEMPLATE_KEY, source.into_owned())
            .map_err(|e| chat_err(&format!("{CHAT_TEMPLATE_KEY} does not compile: {}", e)))?;
        Ok(ChatTemplate { env, bos_token: bos_token.to_string(), eos_token: eos_token.to_string() })
    }

    /// Renders a conversation; with `add_generation_prompt` the text ends where the assistant's
    /// turn begins. A template that refuses the conversation (`raise_exception`) says why. A
    /// template that writes the date (`strftime_now`) writes today's, by the local clock.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        self.render_at(messages, add_generation_prompt, Local::now().naive_local())
    }

    /// [`ChatTemplate::render`] as if the local time were `now`.
    pub fn render_at(&self, messages: &[ChatMessage], add_generation_prompt: bool, now: NaiveDateTime) -> Result<String> {
        let template = self.env.get_template(CHAT_TEMPLATE_KEY).map_err(|e| chat_err(&e.to_string()))?;
        let ctx = minijinja::context! {
            messages => Value::from(Serde(messages)),
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
            strftime_now => Value::from_function(move |format: &str| strftime(&now, format)),
        };
        template.render(ctx).map_err(|e| match e.kind() {
            ErrorKind::InvalidOperation if is_raised(&e) => {
                chat_err(&format!("the model's template refuses this conversation: {}", raised_text(&e)))
            }
            _ => chat_err(&format!("{CHAT_TEMPLATE_KEY} failed to render: {}", e)),
        })
    }

    /// The BOS token's text as templates see it.
    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }
}

/// Transformers' `{% generation %}` and `{% endgeneration %}` (its assistant-mask extension,
/// which records where the assistant's text lies and renders it unchanged), with their
/// whitespace controls: `-` or `+` after `{%` (1), `end` (2), `-` or `+` before `%}` (3).
static GENERATION_TAG: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\{%([-+]?)\s*(end)?generation\s*([-+]?)%\}").expect("the tag's pattern compiles"));

/// `source` with each generation tag made a block minijinja knows that renders its body as it
/// is (`{% if true %}` ... `{% endif %}`), its whitespace controls kept, so the text around it is
/// trimmed just as around the original tag.
fn without_generation_tags(source: &str) -> Cow<'_, str> {
    GENERATION_TAG.replace_all(source, |c: &Captures| {
        let block = if c.get(2).is_some() { "endif" } else { "if true" };
        format!("{{%{} {block} {}%}}", &c[1], &c[3])
    })
}

/// `strftime_now(format)`: `now` written by Python's `strftime` directives (`%d %B %Y` is
/// "16 August 2026"), as transformers' function of that name writes the local time.
fn strftime(now: &NaiveDateTime, format: &str) -> std::result::Result<String, minijinja::Error> {
    let refused = || minijinja::Error::new(ErrorKind::InvalidOperation, format!("strftime_now cannot write the date as {format:?}"));
    let items = StrftimeItems::new(format).parse().map_err(|_| refused())?;
    let mut out = String::new();
    write!(out, "{}", now.format_with_items(items.iter())).map_err(|_| refused())?;
    Ok(out)
}

/// Marks errors raised by a template's own `raise_exception(...)` call.
const RAISED: &str = "raise_exception: ";

/// `raise_exception(message)`: the template refuses its input (templates call it for roles out
/// of order and the like).
fn raise_exception(message: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, format!("{RAISED}{message}")))
}

fn is_raised(e: &minijinja::Error) -> bool {
    e.detail().is_some_and(|d| d.starts_with(RAISED))
}

fn raised_text(e: &minijinja::Error) -> &str {
    e.detail().and_then(|d| d.strip_prefix(RAISED)).unwrap_or_default()
}

fn chat_err(problem: &str) -> Error {
    Error::ChatTemplate(problem.to_string())
}

//! Text <-> token ids with the `tokenizers` crate, built from the GGUF's own vocabulary.
//!
//! Two kinds of file: GPT-2 style byte-level BPE (`tokenizer.ggml.model = "gpt2"`: SmolLM2,
//! Qwen, Llama 3), whose vocabulary and merges come from the file and whose pre-tokenizer is the
//! one `tokenizer.ggml.pre` names ([`pre`]); and SentencePiece (`"llama"`: Llama 2, TinyLlama,
//! Mistral), BPE with merges made from its pieces' scores and byte fallback ([`spm`]). In both,
//! control tokens (`token_type == 3`) are special tokens matched verbatim; the chat format is
//! the file's own template ([`chat`]).

pub mod byte_level;
pub mod chat;
pub mod pre;
pub mod spm;
pub mod stream;

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::AddedToken;

pub use chat::{ChatMessage, ChatTemplate, PromptFormat, CHAT_TEMPLATE_KEY};
pub use stream::Utf8Stream;

use crate::error::{Error, ModelError, Result};
use crate::gguf::Gguf;
use byte_level::ByteAlphabet;

/// GGUF `token_type` of control tokens such as `<|im_start|>`.
const TOKEN_TYPE_CONTROL: i64 = 3;
/// GGUF `token_type` of user-defined tokens (matched verbatim, but printed as text).
const TOKEN_TYPE_USER_DEFINED: i64 = 4;
/// Control tokens that end a turn in common chat formats (ChatML's, Llama 3's, Llama 2's,
/// Gemma's `<end_of_turn>`, whose files name `<eos>` as their end of sequence, and Phi-3's
/// `<|end|>`, whose files name `<|endoftext|>`).
const END_OF_TURN_NAMES: [&str; 6] = ["<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>", "<end_of_turn>", "<|end|>"];

/// A tokenizer plus what generation needs to know about special tokens.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// Raw bytes of every token, indexed by id (control tokens: their text).
    token_bytes: Vec<Vec<u8>>,
    /// `true` for control tokens (never shown as generated text).
    is_control: Vec<bool>,
    /// Tokens that end generation.
    eos_ids: Vec<u32>,
    /// Beginning-of-sequence token, if the model declares one.
    bos_id: Option<u32>,
    /// Whether the model wants BOS prepended to prompts.
    add_bos: bool,
    /// The file's chat template, or why chat mode cannot be offered (in words).
    chat: std::result::Result<ChatTemplate, String>,
}

impl Tokenizer {
    /// Builds the tokenizer described by a GGUF file's `tokenizer.ggml.*` metadata.
    pub fn from_gguf(g: &Gguf) -> Result<Self> {
        let kind = g.string("tokenizer.ggml.model")?;
        let tokens = g.strings("tokenizer.ggml.tokens")?;
        let (model, add_bos_default) = match kind {
            "gpt2" => {
                let merges = g.strings("tokenizer.ggml.merges")?;
                let pre = match g.string_opt("tokenizer.ggml.pre")? {
                    Some(pre) => pre,
                    None => return Err(tok_err("tokenizer.ggml.pre", "is missing: the file does not say how its text is cut before BPE")),
                };
                let add_bos = pre::adds_bos_by_default(pre);
                (Vocabulary::ByteLevel { merges, pre }, add_bos)
            }
            "llama" => {
                let scores = g
                    .floats_opt("tokenizer.ggml.scores")?
                    .ok_or_else(|| tok_err("tokenizer.ggml.scores", "is missing: a SentencePiece file ranks its pieces by score"))?;
                if scores.len() != tokens.len() {
                    return Err(tok_err("tokenizer.ggml.scores", &format!("has {} scores for {} tokens", scores.len(), tokens.len())));
                }
                let add_space_prefix = g.bool_opt("tokenizer.ggml.add_space_prefix").unwrap_or(true);
                // llama.cpp's defaults for a SentencePiece file: BOS prepended.
                (Vocabulary::SentencePiece { scores, add_space_prefix }, true)
            }
            other => {
                return Err(ModelError::Metadata {
                    key: "tokenizer.ggml.model".into(),
                    problem: format!(
                        "{other:?} is not supported; tokenscope reads byte-level BPE (\"gpt2\") and SentencePiece (\"llama\") tokenizers"
                    ),
                }
                .into())
            }
        };
        let types = g.ints_opt("tokenizer.ggml.token_type")?.unwrap_or_default();
        let sentence_piece = matches!(model, Vocabulary::SentencePiece { .. });
        // A SentencePiece file that names none has llama.cpp's: <unk> 0, <s> 1, </s> 2.
        let id = |key: &str, default: u32| -> Result<Option<u32>> {
            let given = g.usize_opt(key)?.map(|v| u32::try_from(v).ok());
            let id = match given {
                Some(v) => v,
                None => sentence_piece.then_some(default),
            };
            Ok(id.filter(|&v| (v as usize) < tokens.len()))
        };
        let mut eos_ids: Vec<u32> =
            [id("tokenizer.ggml.eos_token_id", 2)?, id("tokenizer.ggml.eot_token_id", 2)?].into_iter().flatten().collect();
        eos_ids.dedup();
        let specials = SpecialTokens {
            types: &types,
            bos: id("tokenizer.ggml.bos_token_id", 1)?,
            unk: id("tokenizer.ggml.unknown_token_id", 0)?,
            add_bos: g.bool_opt("tokenizer.ggml.add_bos_token").unwrap_or(add_bos_default),
        };
        let token_text = |id: Option<u32>| id.and_then(|i| tokens.get(i as usize)).map_or("", |t| *t);
        let chat = match g.string_opt(CHAT_TEMPLATE_KEY)? {
            Some(source) => {
                ChatTemplate::compile(source, token_text(specials.bos), token_text(eos_ids.first().copied())).map_err(|e| match e {
                    Error::ChatTemplate(why) => why,
                    other => other.to_string(),
                })
            }
            None => Err(format!("this model's file has no chat template ({CHAT_TEMPLATE_KEY})")),
        };
        let built = Self::build(&tokens, model, specials, chat)?;
        for (i, t) in tokens.iter().enumerate() {
            if built.is_control[i] && END_OF_TURN_NAMES.contains(t) && !eos_ids.contains(&(i as u32)) {
                eos_ids.push(i as u32);
            }
        }
        Ok(Tokenizer { eos_ids, ..built })
    }

    fn build(tokens: &[&str], model: Vocabulary, sp: SpecialTokens, chat: std::result::Result<ChatTemplate, String>) -> Result<Self> {
        let vocab: tokenizers::models::bpe::Vocab = tokens.iter().enumerate().map(|(i, t)| (t.to_string(), i as u32)).collect();
        if vocab.len() != tokens.len() {
            return Err(tok_err("tokenizer.ggml.tokens", "holds duplicate tokens"));
        }
        let kind = |i: usize| sp.types.get(i).copied().unwrap_or(1);
        let cannot_build = |e| Error::Tokenizer(format!("cannot build BPE: {e}"));
        let mut inner = match &model {
            Vocabulary::ByteLevel { merges, pre } => {
                let merges = merges
                    .iter()
                    .map(|m| {
                        m.split_once(' ')
                            .map(|(a, b)| (a.to_string(), b.to_string()))
                            .ok_or_else(|| tok_err("tokenizer.ggml.merges", &format!("entry {m:?} is not two tokens")))
                    })
                    .collect::<Result<Vec<_>>>()?;
                let bpe =
                    BPE::builder().vocab_and_merges(vocab, merges).ignore_merges(pre::ignores_merges(pre)).build().map_err(cannot_build)?;
                let mut inner = tokenizers::Tokenizer::new(bpe);
                inner.with_pre_tokenizer(Some(pre::pre_tokenizer(pre)?));
                inner.with_decoder(Some(ByteLevelDecoder::default()));
                inner
            }
            Vocabulary::SentencePiece { scores, add_space_prefix } => {
                let mut bpe = BPE::builder().vocab_and_merges(vocab, spm::merges(tokens, scores, kind)).byte_fallback(true);
                if let Some(unk) = sp.unk {
                    bpe = bpe.unk_token(tokens[unk as usize].to_string());
                }
                let mut inner = tokenizers::Tokenizer::new(bpe.build().map_err(cannot_build)?);
                inner
                    .with_normalizer(Some(spm::normalizer(*add_space_prefix)?))
                    .map_err(|e| Error::Tokenizer(format!("cannot set the normalizer: {e}")))?;
                inner
            }
        };

        let control: Vec<AddedToken> = (0..tokens.len())
            .filter(|&i| kind(i) == TOKEN_TYPE_CONTROL)
            .map(|i| AddedToken::from(tokens[i], true).normalized(false))
            .collect();
        let user: Vec<AddedToken> = (0..tokens.len())
            .filter(|&i| kind(i) == TOKEN_TYPE_USER_DEFINED)
            .map(|i| AddedToken::from(tokens[i], false).normalized(false))
            .collect();
        inner.add_special_tokens(control).map_err(|e| Error::Tokenizer(format!("cannot add control tokens: {e}")))?;
        inner.add_tokens(user).map_err(|e| Error::Tokenizer(format!("cannot add user-defined tokens: {e}")))?;

        let alphabet = ByteAlphabet::new();
        let is_control: Vec<bool> = (0..tokens.len()).map(|i| kind(i) == TOKEN_TYPE_CONTROL).collect();
        let token_bytes = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| match model {
                Vocabulary::SentencePiece { .. } => spm::piece_bytes(t, kind(i)),
                _ if is_control[i] || kind(i) == TOKEN_TYPE_USER_DEFINED => t.as_bytes().to_vec(),
                Vocabulary::ByteLevel { .. } => alphabet.to_bytes(t),
            })
            .collect();
        Ok(Tokenizer { inner, token_bytes, is_control, eos_ids: Vec::new(), bos_id: sp.bos, add_bos: sp.add_bos, chat })
    }

    /// Text -> ids. Special tokens written in the text (`<|im_start|>`) become their ids;
    /// BOS is prepended only when the model asks for it.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.inner.encode(text, false).map_err(|e| Error::Tokenizer(format!("cannot encode: {e}")))?;
        let mut ids = Vec::with_capacity(enc.len() + 1);
        if let (true, Some(bos)) = (self.add_bos, self.bos_id) {
            ids.push(bos);
        }
        ids.extend_from_slice(enc.get_ids());
        Ok(ids)
    }

    /// Ids -> text, special tokens included as written.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            bytes.extend_from_slice(self.token_bytes(id));
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Raw bytes of one token (empty for an id outside the vocabulary).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.token_bytes.get(id as usize).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Text of one token on its own, for display: its text where its bytes are UTF-8, and each
    /// byte that is not (part of a character split across tokens, or a byte no text has) named
    /// `<0xHH>`, as llama.cpp names byte tokens: never a U+FFFD that a real token could also be.
    pub fn token_text(&self, id: u32) -> String {
        named_bytes(self.token_bytes(id))
    }

    /// Fills in the text of every candidate of a distribution.
    pub fn label(&self, d: &mut crate::sampler::Distribution) {
        for c in &mut d.candidates {
            c.text = self.token_text(c.token_id);
        }
    }

    /// Whether the id is a control token (`<|im_start|>`, ...).
    pub fn is_control(&self, id: u32) -> bool {
        self.is_control.get(id as usize).copied().unwrap_or(false)
    }

    /// Tokens that end generation.
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.token_bytes.len()
    }

    /// The prompt text for the user's text in the given format: the text itself, or the
    /// conversation rendered by the model's chat template up to the assistant's turn. When the
    /// tokenizer prepends BOS itself, a BOS the template wrote first is dropped (one BOS, as
    /// llama.cpp does).
    pub fn render_prompt(&self, format: &PromptFormat, text: &str) -> Result<String> {
        let Some(messages) = format.messages(text) else { return Ok(text.to_string()) };
        let template = self.chat.as_ref().map_err(|why| Error::ChatTemplate(why.clone()))?;
        let rendered = template.render(&messages, true)?;
        let bos = template.bos_token();
        match rendered.strip_prefix(bos) {
            Some(rest) if self.add_bos && self.bos_id.is_some() && !bos.is_empty() => Ok(rest.to_string()),
            _ => Ok(rendered),
        }
    }

    /// Whether chat mode can be offered: `Err` says why not (no template, or one that does not
    /// compile).
    pub fn chat_support(&self) -> std::result::Result<(), &str> {
        self.chat.as_ref().map(|_| ()).map_err(String::as_str)
    }

    /// Renders and encodes a prompt in the given format ([`Tokenizer::render_prompt`]).
    pub fn encode_prompt(&self, format: &PromptFormat, text: &str) -> Result<Vec<u32>> {
        self.encode(&self.render_prompt(format, text)?)
    }
}

struct SpecialTokens<'a> {
    types: &'a [i64],
    bos: Option<u32>,
    unk: Option<u32>,
    add_bos: bool,
}

/// What the file's tokenizer model needs beyond its tokens.
enum Vocabulary<'a> {
    /// Byte-level BPE: its merges (`"a b"`) and its pre-tokenizer's name.
    ByteLevel { merges: Vec<&'a str>, pre: &'a str },
    /// SentencePiece: each piece's score, and whether a space goes before the text.
    SentencePiece { scores: Vec<f32>, add_space_prefix: bool },
}

fn tok_err(key: &str, problem: &str) -> Error {
    ModelError::Metadata { key: key.into(), problem: problem.into() }.into()
}

/// `bytes` as text, each byte that is not part of a whole UTF-8 character written `<0xHH>`.
fn named_bytes(mut bytes: &[u8]) -> String {
    let mut out = String::new();
    loop {
        match std::str::from_utf8(bytes) {
            Ok(text) => {
                out.push_str(text);
                return out;
            }
            Err(e) => {
                let (valid, rest) = bytes.split_at(e.valid_up_to());
                out.push_str(&String::from_utf8_lossy(valid));
                let bad = e.error_len().unwrap_or(rest.len());
                for b in &rest[..bad] {
                    out.push_str(&format!("<0x{b:02X}>"));
                }
                bytes = &rest[bad..];
            }
        }
    }
}

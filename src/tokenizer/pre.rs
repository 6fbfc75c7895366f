//! Pre-tokenizers: how text is cut into pieces before byte-level BPE merges within each piece,
//! chosen by the file's `tokenizer.ggml.pre` (the names llama.cpp gives them) and built from the
//! `tokenizers` crate's parts as the models' own `tokenizer.json` files declare them. A name
//! not listed here is refused, never replaced by a guess: a wrong cut gives other tokens than
//! the model was trained on, silently.

use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::SplitDelimiterBehavior;

use crate::error::{Error, ModelError, Result};

/// The `tokenizer.ggml.pre` names tokenscope builds, and the model families that use them.
pub const SUPPORTED_PRE: [(&str, &str); 11] = [
    ("gpt-2", "GPT-2's regular expression"),
    ("smollm", "SmolLM and SmolLM2: digits one by one, then GPT-2's expression"),
    ("llama-bpe", "Llama 3: contractions in any case, numbers of up to 3 digits"),
    ("smaug-bpe", "SmolLM3: Llama 3's cut, every piece merged"),
    ("qwen2", "Qwen2, Qwen2.5 and Qwen3: contractions in any case, digits one by one"),
    ("gpt-4o", "Phi-4-mini: words cut at a capital, contractions kept on their word"),
    ("tekken", "Mistral Nemo and Ministral: words cut at a capital, digits one by one, a piece that is a token taken whole"),
    ("bloom", "BLOOM and BLOOMZ: a run of anything but spaces and punctuation, with the space before it"),
    ("deepseek-v3", "Hunyuan dense and DeepSeek V3: numbers of up to 3 digits, then runs of Chinese and kana, cut apart first"),
    ("falcon", "Falcon 7B, 40B and 180B: punctuation runs cut apart first, then GPT-2's expression, digits in threes"),
    ("seed-coder", "Seed-Coder and Seed-OSS: Qwen2's cut, line breaks kept off punctuation runs"),
];

/// The other names llama.cpp gives the same cuts (its vocabulary loader reads each as the same
/// pre-tokenizer type, with nothing else changed for encoding), each with the name in
/// [`SUPPORTED_PRE`] it is built as: DeepSeek-R1's Qwen distills, Falcon 3, older Llama 3
/// conversions, Granite 3's (`refact`), Minerva, Trillion and Mellum 2 (llama files) among
/// them, GLM-4's two names (`glm4`, `chatglm-bpe`, whose BOS is the file's alone, as for every
/// byte-level file here). (How llama.cpp joins
/// the pieces back into text for some, `clean_spaces`, is not encoding: the page shows each
/// token's own piece.)
pub const PRE_ALIASES: [(&str, &str); 46] = [
    ("llama3", "llama-bpe"),
    ("llama-v3", "llama-bpe"),
    ("falcon3", "llama-bpe"),
    ("falcon-h1", "llama-bpe"),
    ("pixtral", "llama-bpe"),
    ("midm-2.0", "llama-bpe"),
    ("lfm2", "llama-bpe"),
    ("jina-v5-nano", "llama-bpe"),
    ("dbrx", "smaug-bpe"),
    ("glm4", "smaug-bpe"),
    ("chatglm-bpe", "smaug-bpe"),
    ("phi-2", "gpt-2"),
    ("jina-es", "gpt-2"),
    ("jina-de", "gpt-2"),
    ("gigachat", "gpt-2"),
    ("jina-v2-es", "gpt-2"),
    ("jina-v2-de", "gpt-2"),
    ("a.x-4.0", "gpt-2"),
    ("mellum", "gpt-2"),
    ("exaone4", "gpt-2"),
    ("modern-bert", "gpt-2"),
    ("mpt", "gpt-2"),
    ("olmo", "gpt-2"),
    ("jais", "gpt-2"),
    ("trillion", "gpt-2"),
    ("granite-docling", "gpt-2"),
    ("starcoder", "smollm"),
    ("refact", "smollm"),
    ("command-r", "smollm"),
    ("codeshell", "smollm"),
    ("exaone", "smollm"),
    ("minerva-7b", "smollm"),
    ("mellum2", "smollm"),
    ("deepseek-r1-qwen", "qwen2"),
    ("kormo", "qwen2"),
    ("megrez", "qwen2"),
    ("f2llmv2", "qwen2"),
    ("stablelm2", "qwen2"),
    ("hunyuan", "qwen2"),
    ("solar-open", "qwen2"),
    ("llama4", "gpt-4o"),
    ("poro-chat", "bloom"),
    ("gpt3-finnish", "bloom"),
    ("hunyuan-dense", "deepseek-v3"),
    ("hy_v4", "deepseek-v3"),
    ("joyai-llm", "deepseek-v3"),
];

/// The name in [`SUPPORTED_PRE`] that `pre` is built as: itself, or the one it is an alias of
/// ([`PRE_ALIASES`]); a name neither lists comes back as it is (and is refused when built).
pub fn canonical(pre: &str) -> &str {
    PRE_ALIASES.iter().find(|(alias, _)| *alias == pre).map_or(pre, |(_, name)| name)
}

/// GPT-4's split (Llama 3, SmolLM3 and Qwen2 use it, differing in how many digits a number
/// piece holds): contractions in any case, a word with at most one leading non-letter, numbers,
/// punctuation runs with their line breaks, line breaks with the spaces before them, and
/// spaces (a run before a word leaves its last space to the word).
fn gpt4_split(digits: &str) -> String {
    gpt4_split_with(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)", digits, r"[\r\n]*")
}

/// GPT-4's split with its contractions, the digits a number piece holds and what a
/// punctuation run takes after it (its line breaks, or nothing: Seed-Coder's) given.
fn gpt4_split_with(contractions: &str, digits: &str, after_punctuation: &str) -> String {
    format!(
        r"{contractions}|[^\r\n\p{{L}}\p{{N}}]?\p{{L}}+|\p{{N}}{digits}| ?[^\s\p{{L}}\p{{N}}]+{after_punctuation}|\s*[\r\n]+|\s+(?!\S)|\s+"
    )
}

/// The cut by case that GPT-4o's split (o200k's; Phi-4-mini) and Tekken's (Mistral Nemo's)
/// share: a word is its capitals then its lower-case letters (so "camelCase" is two pieces),
/// followed by `contraction` (GPT-4o keeps one in any case on its word, Tekken none), numbers
/// of `digits` (`{1,3}`, or one by one), punctuation runs with their line breaks and slashes,
/// then GPT-4's rules for line breaks and spaces.
fn case_split(contraction: &str, digits: &str) -> String {
    let (upper, lower) = (r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]");
    format!(
        r"[^\r\n\p{{L}}\p{{N}}]?{upper}*{lower}+{contraction}|[^\r\n\p{{L}}\p{{N}}]?{upper}+{lower}*{contraction}|\p{{N}}{digits}| ?[^\s\p{{L}}\p{{N}}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    )
}

/// Whether BPE takes a piece that is itself a token as that token, before any merge (Llama 3's
/// tokenizer does, `ignore_merges` in its tokenizer.json and in llama.cpp, and Tekken's; the
/// others merge, smaug-bpe too: llama.cpp cuts it as Llama 3 but merges every piece).
pub fn ignores_merges(pre: &str) -> bool {
    matches!(canonical(pre), "llama-bpe" | "tekken")
}

/// Whether a file of this pre-tokenizer that does not say (`tokenizer.ggml.add_bos_token`)
/// puts its BOS token first: Llama 3's cut and Tekken's do, as llama.cpp has them; the others
/// do not.
pub fn adds_bos_by_default(pre: &str) -> bool {
    matches!(canonical(pre), "llama-bpe" | "tekken")
}

/// The pre-tokenizer named `pre` (or by an alias of it), or the error naming it and listing
/// [`SUPPORTED_PRE`].
pub fn pre_tokenizer(pre: &str) -> Result<PreTokenizerWrapper> {
    // GPT-2's expression inside ByteLevel, or an explicit split and ByteLevel as bytes only.
    let gpt2 = || ByteLevel::new(false, true, true);
    let bytes_only = || ByteLevel::new(false, true, false);
    let regex = |pattern: String| {
        Split::new(SplitPattern::Regex(pattern), SplitDelimiterBehavior::Isolated, false)
            .map_err(|e| Error::Tokenizer(format!("cannot build the {pre} pre-tokenizer: {e}")))
    };
    let split = |digits: &str| regex(gpt4_split(digits));
    Ok(match canonical(pre) {
        "gpt-2" => gpt2().into(),
        "smollm" => Sequence::new(vec![Digits::new(true).into(), gpt2().into()]).into(),
        "llama-bpe" | "smaug-bpe" => Sequence::new(vec![split("{1,3}")?.into(), bytes_only().into()]).into(),
        "qwen2" => Sequence::new(vec![split("")?.into(), bytes_only().into()]).into(),
        // Seed-Coder's tokenizer.json as llama.cpp writes it: Qwen2's cut with each
        // contraction's letters in either case spelt out, a punctuation run leaving the line
        // breaks after it to the next piece.
        "seed-coder" => {
            let contractions = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
            Sequence::new(vec![regex(gpt4_split_with(contractions, "", ""))?.into(), bytes_only().into()]).into()
        }
        "gpt-4o" => Sequence::new(vec![regex(case_split("(?i:'s|'t|'re|'ve|'m|'ll|'d)?", "{1,3}"))?.into(), bytes_only().into()]).into(),
        "tekken" => Sequence::new(vec![regex(case_split("", ""))?.into(), bytes_only().into()]).into(),
        // BLOOM's tokenizer.json: one piece per run of characters that are neither whitespace
        // nor a sentence mark of its languages (nor the parentheses and bar the class also
        // names), a space before it kept on it; what lies between stays a piece of its own.
        "bloom" => Sequence::new(vec![regex(r" ?[^(\s|.,!?…。，、।۔،)]+".into())?.into(), bytes_only().into()]).into(),
        // DeepSeek V3's tokenizer.json (Hunyuan dense's too): three cuts in turn, each within
        // the pieces of the one before: numbers of up to 3 digits; runs of CJK ideographs
        // (U+4E00 to U+9FA5), hiragana and katakana; then a letter run after one ASCII
        // punctuation mark, a run of letters and combining marks with at most one other
        // character before it, punctuation and symbol runs with their line breaks, and
        // GPT-4's rules for line breaks and spaces.
        "deepseek-v3" => Sequence::new(vec![
            regex(r"\p{N}{1,3}".into())?.into(),
            regex(r"[一-龥぀-ゟ゠-ヿ]+".into())?.into(),
            regex(
                r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##
                    .into(),
            )?
            .into(),
            bytes_only().into(),
        ])
        .into(),
        // Falcon's tokenizer.json as llama.cpp cuts it: runs of punctuation (with the ASCII
        // symbols Unicode files elsewhere) apart first, GPT-2's expression within each piece,
        // then each run of digits in threes from its left.
        "falcon" => Sequence::new(vec![
            regex(r"[\p{P}\$\+<=>\^~\|`]+".into())?.into(),
            regex(r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)".into())?.into(),
            regex("[0-9][0-9][0-9]".into())?.into(),
            bytes_only().into(),
        ])
        .into(),
        other => {
            let names: Vec<String> = SUPPORTED_PRE.iter().map(|(name, family)| format!("{name} ({family})")).collect();
            return Err(ModelError::Metadata {
                key: "tokenizer.ggml.pre".into(),
                problem: format!(
                    "{other:?} is not a pre-tokenizer tokenscope builds; it builds {} (and the same under llama.cpp's other names for them: {})",
                    names.join(", "),
                    PRE_ALIASES.map(|(alias, _)| alias).join(", ")
                ),
            }
            .into());
        }
    })
}

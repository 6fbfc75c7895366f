//! SentencePiece BPE (`tokenizer.ggml.model = "llama"`: Llama 2, TinyLlama, Mistral, ...) as
//! the `tokenizers` crate's BPE.
//!
//! A SentencePiece file has no merges, only each piece's score: llama.cpp cuts text into
//! characters and keeps joining the adjacent pair whose joined text is a piece with the highest
//! score, then spells any character that is no piece as its UTF-8 bytes' `<0xHH>` tokens. That
//! is BPE whose merges are every split of every piece into two pieces, ranked by the joined
//! piece's score ([`merges`]), with byte fallback. Before it, a space is written as `▁` (U+2581)
//! and, unless `tokenizer.ggml.add_space_prefix` is false, one `▁` is put before the text and
//! after each special token (the normalizer, [`normalizer`]).
//!
//! Where the two could part: a piece holding a character that is not a piece itself (llama.cpp
//! may still join it; BPE has already spelt it as bytes), two pieces of the same score
//! (llama.cpp takes the leftmost pair, BPE the merge listed first), and a piece longer than
//! [`MAX_MERGED_PIECE_BYTES`] (never formed here). SentencePiece's vocabularies hold every
//! character of their pieces, their scores differ, and their pieces are short.

use std::collections::HashMap;

use tokenizers::normalizers::{NormalizerWrapper, Prepend, Replace, Sequence};

use crate::error::{Error, Result};

/// How SentencePiece writes a space.
pub const SPACE: char = '\u{2581}';

/// GGUF `token_type` of a normal piece.
pub const TOKEN_TYPE_NORMAL: i64 = 1;
/// GGUF `token_type` of a byte token (`<0x41>`).
pub const TOKEN_TYPE_BYTE: i64 = 6;

/// Longest piece, in bytes, that merges may form. Checking a piece's splits costs the square
/// of its length, so a hostile file of long pieces would stall the load; SentencePiece's own
/// limit is 16 characters (`max_sentencepiece_length`), 64 bytes at most.
pub const MAX_MERGED_PIECE_BYTES: usize = 64;

/// Every split of a normal piece (of at most [`MAX_MERGED_PIECE_BYTES`]) into two pieces, as
/// BPE merges, the joined piece's score highest first (ties in vocabulary order). `kind(i)` is
/// token `i`'s GGUF type.
pub fn merges(tokens: &[&str], scores: &[f32], kind: impl Fn(usize) -> i64) -> Vec<(String, String)> {
    let ids: HashMap<&str, usize> = tokens.iter().enumerate().map(|(i, t)| (*t, i)).collect();
    let mut ranked: Vec<(f32, usize, &str, &str)> = Vec::new();
    for (i, piece) in tokens.iter().enumerate() {
        if kind(i) != TOKEN_TYPE_NORMAL || piece.len() > MAX_MERGED_PIECE_BYTES {
            continue;
        }
        let score = scores.get(i).copied().unwrap_or(0.0);
        for (at, _) in piece.char_indices().skip(1) {
            let (left, right) = piece.split_at(at);
            if ids.contains_key(left) && ids.contains_key(right) {
                ranked.push((score, i, left, right));
            }
        }
    }
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    ranked.into_iter().map(|(_, _, l, r)| (l.to_string(), r.to_string())).collect()
}

/// Spaces written as `▁`, and one `▁` before each stretch of text when `add_space_prefix`.
pub fn normalizer(add_space_prefix: bool) -> Result<NormalizerWrapper> {
    let replace = Replace::new(" ", SPACE.to_string()).map_err(|e| Error::Tokenizer(format!("cannot build the normalizer: {e}")))?;
    let mut steps = Vec::new();
    if add_space_prefix {
        steps.push(NormalizerWrapper::Prepend(Prepend::new(SPACE.to_string())));
    }
    steps.push(NormalizerWrapper::Replace(replace));
    Ok(NormalizerWrapper::Sequence(Sequence::new(steps)))
}

/// A piece's bytes as text: `▁` is a space, a byte token (`<0x0A>`) its byte.
pub fn piece_bytes(piece: &str, kind: i64) -> Vec<u8> {
    if kind == TOKEN_TYPE_BYTE {
        if let Some(b) = piece.strip_prefix("<0x").and_then(|h| h.strip_suffix('>')).and_then(|h| u8::from_str_radix(h, 16).ok()) {
            return vec![b];
        }
    }
    if kind == TOKEN_TYPE_NORMAL {
        return piece.replace(SPACE, " ").into_bytes();
    }
    piece.as_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_split_into_two_pieces_is_a_merge_ranked_by_the_joined_score() {
        let tokens = ["<0x41>", "a", "b", "c", "ab", "bc", "abc", "\u{2581}", "\u{2581}a"];
        let scores = [0.0, -1.0, -2.0, -3.0, -5.0, -4.0, -6.0, -7.0, -0.5];
        let kind = |i: usize| if i == 0 { TOKEN_TYPE_BYTE } else { TOKEN_TYPE_NORMAL };
        let got = merges(&tokens, &scores, kind);
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(got, [pair("\u{2581}", "a"), pair("b", "c"), pair("a", "b"), pair("a", "bc"), pair("ab", "c")]);
    }

    #[test]
    fn a_piece_longer_than_the_limit_is_never_formed() {
        let long = "a".repeat(MAX_MERGED_PIECE_BYTES + 1);
        let longest = "a".repeat(MAX_MERGED_PIECE_BYTES);
        let (half, rest) = (&long[..1], &long[1..]);
        let tokens = [half, rest, long.as_str(), &longest[1..], longest.as_str()];
        let got = merges(&tokens, &[0.0; 5], |_| TOKEN_TYPE_NORMAL);
        assert!(got.iter().all(|(l, r)| l.len() + r.len() <= MAX_MERGED_PIECE_BYTES), "{} merges", got.len());
        assert!(got.contains(&(half.to_string(), longest[1..].to_string())), "the longest allowed piece is formed");
    }

    #[test]
    fn byte_tokens_are_their_byte_and_spaces_come_back() {
        assert_eq!(piece_bytes("<0x0A>", TOKEN_TYPE_BYTE), b"\n");
        assert_eq!(piece_bytes("\u{2581}the", TOKEN_TYPE_NORMAL), b" the");
        assert_eq!(piece_bytes("<s>", 3), b"<s>");
    }
}

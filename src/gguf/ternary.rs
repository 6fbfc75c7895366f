//! TQ1_0, TQ2_0 and Q2_0, ggml's ternary types (TriLM's, BitNet b1.58's and Ternary Bonsai's
//! weights): each weight a code from 0 to 2 (the 2-bit codes also allow 3) under one f16 scale
//! `d` per block. Weight = `d (code - 1)`.
//!
//! - TQ1_0 (54 bytes per 256 weights): 48 bytes of five base-3 digits each, then 4 bytes of
//!   four, then `d`. Digit `n` of byte `b` is `(3 * (b * 3^n mod 256)) >> 8`, the weights
//!   ordered digit by digit over 32 bytes, then over the next 16, then over the last 4.
//! - TQ2_0 (66 bytes per 256 weights): 64 bytes of four 2-bit codes each (bits `2l, 2l + 1`
//!   of byte `b`), ordered code by code over 32 bytes at a time, then `d`.
//! - Q2_0 (18 bytes per 64 weights): `d`, then 16 bytes of four 2-bit codes each, weight `j`
//!   in bits `2 (j % 4)` of byte `j / 4`.
//!
//! Each 32 weights are exactly a Q8_0 block: the same `d` and `code - 1` as its integers
//! ([`tq1_0_to_q8_0`], [`tq2_0_to_q8_0`], [`q2_0_to_q8_0`]), so every backend computes with
//! the file's own weights as Q8_0, at 34 bytes per 32 weights where the file has 6.75, 8.25 or
//! 9.

use super::iq3::{rewrite_super_blocks, BLOCK, Q8_0_BLOCK_BYTES, SUPER_BLOCK};
use crate::error::ModelError;

/// Bytes per TQ1_0 super-block in the file: 48 bytes of five digits, 4 of four, `d`.
pub const TQ1_0_BYTES: usize = 48 + 4 + 2;
/// Bytes per TQ2_0 super-block in the file: 64 bytes of four codes, `d`.
pub const TQ2_0_BYTES: usize = SUPER_BLOCK / 4 + 2;
/// Weights per Q2_0 block.
pub const Q2_0_BLOCK: usize = 64;
/// Bytes per Q2_0 block in the file: `d`, 16 bytes of four codes.
pub const Q2_0_BYTES: usize = 2 + Q2_0_BLOCK / 4;
/// Bytes of the eight Q8_0 blocks one super-block becomes.
const HELD_BYTES: usize = SUPER_BLOCK / BLOCK * Q8_0_BLOCK_BYTES;

/// Bytes a tensor of `bytes` TQ1_0 bytes takes as Q8_0.
pub fn tq1_0_q8_0_bytes(bytes: u64) -> u64 {
    bytes / TQ1_0_BYTES as u64 * HELD_BYTES as u64
}

/// Bytes a tensor of `bytes` TQ2_0 bytes takes as Q8_0.
pub fn tq2_0_q8_0_bytes(bytes: u64) -> u64 {
    bytes / TQ2_0_BYTES as u64 * HELD_BYTES as u64
}

/// Bytes a tensor of `bytes` Q2_0 bytes takes as Q8_0.
pub fn q2_0_q8_0_bytes(bytes: u64) -> u64 {
    bytes / Q2_0_BYTES as u64 * (Q2_0_BLOCK / BLOCK * Q8_0_BLOCK_BYTES) as u64
}

/// Rewrites TQ1_0 super-blocks as the Q8_0 blocks of the same weights, bit for bit. `blocks`
/// holds whole super-blocks (the header walk checked the tensor's size); the output is
/// reserved fallibly.
pub fn tq1_0_to_q8_0(blocks: &[u8]) -> Result<Vec<u8>, ModelError> {
    rewrite_super_blocks(blocks, TQ1_0_BYTES, HELD_BYTES, |out, sb| {
        let (digits, d) = sb.split_at(TQ1_0_BYTES - 2);
        let runs = [(&digits[..32], 5), (&digits[32..48], 5), (&digits[48..], 4)];
        // Digit n of byte b: 3^n (at most 81) times b, wrapped to a byte, times 3, over 256.
        let digit = |b: u8, n: u32| ((u16::from(b.wrapping_mul(3u8.pow(n))) * 3) >> 8) as u8;
        let codes = runs.into_iter().flat_map(|(run, count)| (0..count).flat_map(move |n| run.iter().map(move |&b| digit(b, n))));
        push_q8_0_blocks(out, [d[0], d[1]], codes);
        Ok(())
    })
}

/// Rewrites TQ2_0 super-blocks as the Q8_0 blocks of the same weights, bit for bit, as
/// [`tq1_0_to_q8_0`] does.
pub fn tq2_0_to_q8_0(blocks: &[u8]) -> Result<Vec<u8>, ModelError> {
    rewrite_super_blocks(blocks, TQ2_0_BYTES, HELD_BYTES, |out, sb| {
        let (bytes, d) = sb.split_at(TQ2_0_BYTES - 2);
        let codes = bytes.chunks_exact(32).flat_map(|run| (0..4).flat_map(move |l| run.iter().map(move |&b| (b >> (2 * l)) & 3)));
        push_q8_0_blocks(out, [d[0], d[1]], codes);
        Ok(())
    })
}

/// Rewrites Q2_0 blocks as the Q8_0 blocks of the same weights, bit for bit, as
/// [`tq1_0_to_q8_0`] does.
pub fn q2_0_to_q8_0(blocks: &[u8]) -> Result<Vec<u8>, ModelError> {
    rewrite_super_blocks(blocks, Q2_0_BYTES, Q2_0_BLOCK / BLOCK * Q8_0_BLOCK_BYTES, |out, block| {
        let codes = block[2..].iter().flat_map(|&b| (0..4).map(move |j| (b >> (2 * j)) & 3));
        push_q8_0_blocks(out, [block[0], block[1]], codes);
        Ok(())
    })
}

/// Appends the Q8_0 blocks of a multiple of 32 codes under one f16 scale: `code - 1` as each
/// integer, the scale before every 32.
pub(super) fn push_q8_0_blocks(out: &mut Vec<u8>, d: [u8; 2], codes: impl IntoIterator<Item = u8>) {
    for (i, code) in codes.into_iter().enumerate() {
        if i % BLOCK == 0 {
            out.extend_from_slice(&d);
        }
        out.push((code as i8 - 1) as u8);
    }
}

#[cfg(test)]
mod tests {
    use super::super::iq2_xs::ggml_case;
    use super::super::iq4_nl::held_weights;
    use super::*;

    #[test]
    fn every_weight_is_llama_cpps_bit_for_bit() {
        type Convert = fn(&[u8]) -> Result<Vec<u8>, ModelError>;
        let cases: [(&str, usize, usize, usize, Convert); 3] = [
            ("TQ1_0", SUPER_BLOCK, TQ1_0_BYTES, TQ1_0_BYTES - 2, tq1_0_to_q8_0),
            ("TQ2_0", SUPER_BLOCK, TQ2_0_BYTES, TQ2_0_BYTES - 2, tq2_0_to_q8_0),
            ("Q2_0", Q2_0_BLOCK, Q2_0_BYTES, 0, q2_0_to_q8_0),
        ];
        for (ty, weights, bytes, d_at, convert) in cases {
            let (blocks, want) = ggml_case(ty);
            assert_eq!(blocks.len(), 4 * bytes, "{ty}");
            let out = convert(&blocks).expect("converts");
            assert_eq!(out.len(), 4 * weights / BLOCK * Q8_0_BLOCK_BYTES, "{ty}");
            assert_eq!(held_weights(&out), want, "{ty}");
            // Every code was met: -d, 0 and d (and the 2-bit codes' 2 d).
            let d = half::f16::from_le_bytes([blocks[d_at], blocks[d_at + 1]]).to_f32();
            let levels: std::collections::HashSet<i32> = want[..weights].iter().map(|w| (w / d).round() as i32).collect();
            assert_eq!(levels.len(), if ty == "TQ1_0" { 3 } else { 4 }, "{ty}: {levels:?}");
        }
    }
}

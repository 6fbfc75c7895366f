//! IQ3_XXS and IQ3_S, ggml's 3-bit codebook types: super-blocks of 256 weights, each an f16
//! scale `d` and, per group of four weights, an index into a codebook of four-magnitude points
//! ([`super::iq3_grids`]), a sign per weight and a 4-bit scale `s` per 32 weights.
//!
//! - IQ3_XXS (98 bytes): `d`, 64 index bytes (eight per 32-weight block), then a 32-bit word
//!   per block: its low 28 bits four 7-bit sign codes (one per eight weights; the eighth
//!   sign is the parity of the seven, [`sign_byte`]), its top 4 bits `s`. Weight =
//!   `d (0.5 + s) / 2 * point * sign`, points of even magnitudes 4 to 62.
//! - IQ3_S (110 bytes): `d`, 64 bytes of the indices' low 8 bits, 8 bytes of their ninth bits
//!   (bit `k` of byte `b`: index `k` of block `b`), 32 bytes of sign bits (one per weight), 4
//!   bytes of scales (two per byte, low half first). Weight = `d (1 + 2 s) * point * sign`,
//!   points of odd magnitudes 1 to 15.
//!
//! Each 32-weight block becomes a Q8_0 block ([`xxs_to_q8_0`], [`s_to_q8_0`]): the signed
//! magnitudes as its integers (exact: all within -62..=62) and the block's factor as its f16
//! scale, the one rounding, as IQ4_XS's ([`super::iq4_xs`]): an f16 times a 5-bit odd number
//! can need 16 significant bits where f16 has 11, so every held weight is within 2^-11 of the
//! file's, relative to itself. Every backend then computes with it as Q8_0, at 272 bytes a
//! super-block where the file has 98 or 110.

use crate::error::ModelError;
use half::f16;

use super::iq3_grids::{IQ3_S_GRID, IQ3_XXS_GRID};
use super::iq4_nl::held_buffer;

/// Weights per super-block.
pub const SUPER_BLOCK: usize = 256;
/// Weights per block (each with its own 4-bit scale).
pub const BLOCK: usize = 32;
/// Bytes per IQ3_XXS super-block in the file: `d`, 64 index bytes, 8 words of signs and scale.
pub const XXS_BYTES: usize = 2 + SUPER_BLOCK / 4 + SUPER_BLOCK / 8;
/// Bytes per IQ3_S super-block in the file: `d`, 64 low index bytes, 8 of ninth bits, 32 of
/// signs, 4 of scales.
pub const S_BYTES: usize = 2 + SUPER_BLOCK / 4 + SUPER_BLOCK / 32 + SUPER_BLOCK / 8 + SUPER_BLOCK / 64;
/// Bytes per 32-weight block as held: a Q8_0 block, the f16 scale and 32 `i8`.
pub const Q8_0_BLOCK_BYTES: usize = 2 + BLOCK;
/// Bytes of the Q8_0 blocks of one super-block.
const HELD_SUPER_BLOCK_BYTES: u64 = (SUPER_BLOCK / BLOCK * Q8_0_BLOCK_BYTES) as u64;

/// Bytes a tensor of `bytes` IQ3_XXS bytes takes as Q8_0.
pub fn xxs_q8_0_bytes(bytes: u64) -> u64 {
    held_bytes(bytes, XXS_BYTES)
}

/// Bytes a tensor of `bytes` IQ3_S bytes takes as Q8_0.
pub fn s_q8_0_bytes(bytes: u64) -> u64 {
    held_bytes(bytes, S_BYTES)
}

/// Bytes a tensor of `bytes` takes as Q8_0, its 256-weight super-blocks `super_block_bytes`
/// each in the file (IQ3's, IQ2_XXS's and IQ1_S's).
pub(super) fn held_bytes(bytes: u64, super_block_bytes: usize) -> u64 {
    bytes / super_block_bytes as u64 * HELD_SUPER_BLOCK_BYTES
}

/// Rewrites whole super-blocks of `super_block_bytes` each into Q8_0 blocks, reserving the
/// output fallibly: `block` appends each super-block's eight, given its f16 scale `d` and its
/// bytes after it (IQ3's, IQ2_XXS's and IQ1_S's).
pub(super) fn convert_super_blocks(
    blocks: &[u8],
    super_block_bytes: usize,
    mut block: impl FnMut(&mut Vec<u8>, f32, &[u8]) -> Result<(), ModelError>,
) -> Result<Vec<u8>, ModelError> {
    rewrite_super_blocks(blocks, super_block_bytes, HELD_SUPER_BLOCK_BYTES as usize, |out, sb| {
        block(out, f16::from_le_bytes([sb[0], sb[1]]).to_f32(), &sb[2..])
    })
}

/// Rewrites whole super-blocks of `super_block_bytes` each into `held_bytes` each, reserving
/// the output fallibly: `block` appends one super-block's held bytes, given its bytes in the
/// file (every stand-in with 256-weight super-blocks).
pub(super) fn rewrite_super_blocks(
    blocks: &[u8],
    super_block_bytes: usize,
    held_bytes: usize,
    mut block: impl FnMut(&mut Vec<u8>, &[u8]) -> Result<(), ModelError>,
) -> Result<Vec<u8>, ModelError> {
    let mut out = held_buffer((blocks.len() / super_block_bytes * held_bytes) as u64)?;
    for sb in blocks.chunks_exact(super_block_bytes) {
        block(&mut out, sb)?;
    }
    Ok(out)
}

/// The eight sign bits of an IQ3_XXS sign code (7 bits): the code, and as its eighth bit the
/// parity of its set bits, so every group of eight has an even number of negative weights
/// (ggml's `ksigns_iq2xs`, derived here). Bit `j` set: weight `j` of the eight is negative.
pub fn sign_byte(code: u32) -> u8 {
    let code = (code & 127) as u8;
    code | (((code.count_ones() & 1) as u8) << 7)
}

/// Rewrites IQ3_XXS super-blocks as the Q8_0 blocks of the same weights (the module's comment
/// bounds the rounding). `blocks` holds whole super-blocks (the header walk checked the
/// tensor's size); the output is reserved fallibly. A block factor beyond f16's range (a
/// super-block scale above about 8000, which no trained weights have) is refused as a
/// malformed file.
pub fn xxs_to_q8_0(blocks: &[u8]) -> Result<Vec<u8>, ModelError> {
    convert_super_blocks(blocks, XXS_BYTES, |out, d, sb| {
        let (indices, words) = sb.split_at(SUPER_BLOCK / 4);
        for (b, word) in words.chunks_exact(4).enumerate() {
            let word = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
            // Exact in f32 (11 + 5 significant bits); the f16 conversion rounds to nearest.
            push_scale(out, "IQ3_XXS", d * (0.5 + (word >> 28) as f32) * 0.5)?;
            for (l, pair) in indices[8 * b..8 * b + 8].chunks_exact(2).enumerate() {
                let signs = sign_byte(word >> (7 * l));
                push_signed(out, &IQ3_XXS_GRID[usize::from(pair[0])], signs);
                push_signed(out, &IQ3_XXS_GRID[usize::from(pair[1])], signs >> 4);
            }
        }
        Ok(())
    })
}

/// Rewrites IQ3_S super-blocks as the Q8_0 blocks of the same weights (the module's comment
/// bounds the rounding), as [`xxs_to_q8_0`] does; a block factor beyond f16's range (a
/// super-block scale above about 2000) is refused as a malformed file.
pub fn s_to_q8_0(blocks: &[u8]) -> Result<Vec<u8>, ModelError> {
    convert_super_blocks(blocks, S_BYTES, |out, d, sb| {
        let (low, rest) = sb.split_at(SUPER_BLOCK / 4);
        let (ninth, rest) = rest.split_at(SUPER_BLOCK / 32);
        let (signs, scales) = rest.split_at(SUPER_BLOCK / 8);
        for b in 0..SUPER_BLOCK / BLOCK {
            let s = (scales[b / 2] >> (4 * (b % 2))) & 15;
            // Exact in f32 (11 + 5 significant bits); the f16 conversion rounds to nearest.
            push_scale(out, "IQ3_S", d * f32::from(1 + 2 * s))?;
            for k in 0..8 {
                let index = usize::from(low[8 * b + k]) | (usize::from((ninth[b] >> k) & 1) << 8);
                push_signed(out, &IQ3_S_GRID[index], signs[4 * b + k / 2] >> (4 * (k % 2)));
            }
        }
        Ok(())
    })
}

/// Appends a Q8_0 block's f16 scale: `factor` rounded to f16, refused where it overflows
/// (IQ3's, IQ2_XXS's and IQ1_S's blocks alike).
pub(super) fn push_scale(out: &mut Vec<u8>, ty: &str, factor: f32) -> Result<(), ModelError> {
    let scale = f16::from_f32(factor);
    if !scale.is_finite() {
        return Err(ModelError::Malformed(format!("an {ty} block scale of {factor} is beyond the f16 range its weights are held in")));
    }
    out.extend_from_slice(&scale.to_le_bytes());
    Ok(())
}

/// Appends the magnitudes of `point` (four of IQ3's, eight of IQ2_XXS's) as `i8`, weight `j`
/// negative where bit `j` of `signs` is set.
pub(super) fn push_signed(out: &mut Vec<u8>, point: &[u8], signs: u8) {
    out.extend(point.iter().enumerate().map(|(j, &m)| if signs >> j & 1 == 1 { (m as i8).wrapping_neg() as u8 } else { m }));
}

#[cfg(test)]
mod tests {
    use super::super::iq4_nl::held_weights;
    use super::*;

    /// Random super-blocks of both types and llama.cpp's own dequantization of them
    /// (tests/fixtures/iq3_blocks.json, written by scripts/iq_grids.py): a normal, a tiny and
    /// a subnormal `d` each.
    fn ggml_cases() -> Vec<(String, Vec<u8>, Vec<f32>)> {
        let json: serde_json::Value = serde_json::from_str(include_str!("../../tests/fixtures/iq3_blocks.json")).expect("fixture");
        let cases = json["cases"].as_array().expect("cases");
        cases
            .iter()
            .map(|c| {
                let hex = c["blocks"].as_str().expect("hex");
                let bytes = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex byte")).collect();
                let weights = c["weights"].as_array().expect("weights").iter().map(|w| w.as_f64().expect("number") as f32).collect();
                (c["type"].as_str().expect("type").to_string(), bytes, weights)
            })
            .collect()
    }

    #[test]
    fn every_weight_is_llama_cpps_within_half_an_f16_ulp() {
        let cases = ggml_cases();
        assert_eq!(cases.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(), ["IQ3_XXS", "IQ3_S"]);
        for (ty, blocks, want) in cases {
            let (out, per_block) = match ty.as_str() {
                "IQ3_XXS" => (xxs_to_q8_0(&blocks).expect("converts"), XXS_BYTES),
                _ => (s_to_q8_0(&blocks).expect("converts"), S_BYTES),
            };
            assert_eq!(blocks.len(), 3 * per_block);
            assert_eq!(out.len(), 3 * 8 * Q8_0_BLOCK_BYTES, "{ty}");
            let got = held_weights(&out);
            assert_eq!(got.len(), want.len());
            let mut rounded = 0;
            for (j, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!((g - w).abs() <= w.abs() / 2048.0, "{ty} weight {j}: held {g}, llama.cpp {w}");
                assert_ne!(*w, 0.0, "{ty}: no point has a zero magnitude");
                rounded += usize::from(g != w);
            }
            // The bound is met by rounding, not by luck: some factors did need it.
            assert!(rounded > 0, "{ty}");
            // A subnormal d (a few steps of 2^-24) times any factor stays exact.
            assert_eq!(got[512..], want[512..], "{ty}");
        }
    }

    #[test]
    fn the_sign_codes_make_even_groups() {
        for code in 0..128 {
            let s = sign_byte(code);
            assert_eq!(u32::from(s & 127), code);
            assert_eq!(s.count_ones() % 2, 0, "code {code}");
        }
    }

    #[test]
    fn a_block_factor_beyond_f16_is_refused() {
        // d = 4000 times IQ3_S's 1 + 2 * 15 = 31, and times IQ3_XXS's (0.5 + 15) / 2 * 3.
        let mut s = f16::from_f32(4000.0).to_le_bytes().to_vec();
        s.resize(S_BYTES, 0xff);
        let e = s_to_q8_0(&s).expect_err("refused");
        assert!(matches!(e, ModelError::Malformed(ref m) if m.contains("IQ3_S block scale")), "{e}");
        let mut x = f16::from_f32(20000.0).to_le_bytes().to_vec();
        x.resize(XXS_BYTES, 0xff);
        let e = xxs_to_q8_0(&x).expect_err("refused");
        assert!(matches!(e, ModelError::Malformed(ref m) if m.contains("IQ3_XXS block scale")), "{e}");
    }

    #[test]
    fn the_codebooks_have_the_formats_magnitudes() {
        let distinct = |g: &[[u8; 4]]| g.iter().collect::<std::collections::HashSet<_>>().len();
        assert_eq!(distinct(&IQ3_XXS_GRID), 256);
        assert_eq!(distinct(&IQ3_S_GRID), 512);
        assert!(IQ3_XXS_GRID.iter().flatten().all(|&m| m % 2 == 0 && (4..=62).contains(&m)));
        assert!(IQ3_S_GRID.iter().flatten().all(|&m| m % 2 == 1 && m <= 15));
    }
}

//! IQ2_XS and IQ2_S, ggml's 2-bit codebook types with a scale per 16 weights: super-blocks of
//! 256 weights, each an f16 scale `d`, then per group of eight weights an index into a
//! codebook of eight-magnitude points (8, 25 or 43, [`super::iq2_s_grids`]) and eight signs,
//! and per 32-weight block a byte of two 4-bit scales (the low half for its first 16 weights,
//! the high half for the rest). Weight = `d (0.5 + s) / 4 * magnitude * sign`.
//!
//! - IQ2_XS (74 bytes): `d`, a 16-bit word per group (its low 9 bits the index, its top 7 a
//!   sign code whose eighth sign is the parity of the seven, [`super::iq3::sign_byte`]), then
//!   the 8 scale bytes.
//! - IQ2_S (82 bytes): `d`, 32 bytes of the indices' low 8 bits, 32 bytes of sign bits (one a
//!   weight), a byte per 32-weight block of its four indices' high 2 bits (bits `2l, 2l + 1`
//!   for index `l`), then the 8 scale bytes.
//!
//! Two scales in a 32-weight block make products up to 31 x 43 that no Q8_0 block holds
//! exactly, and 43 is past Q6_K's 6-bit range, so each weight is held as an f16 ([`xs_to_f16`],
//! [`s_to_f16`]): the product, exact in f32, rounded once, so every held weight is within
//! 2^-11 of the file's, relative to itself, or within half of f16's least step (2^-25) where
//! it falls below f16's normal range (6.1e-5). Every backend then computes with it as F16, at
//! 512 bytes a super-block where the file has 74 or 82: 6.9 and 6.2 times its bytes.

use half::f16;

use super::iq2_s_grids::{IQ2_S_GRID, IQ2_XS_GRID};
use super::iq3::{rewrite_super_blocks, sign_byte, BLOCK, SUPER_BLOCK};
use crate::error::ModelError;

/// Bytes per IQ2_XS super-block in the file: `d`, a word per eight weights, a scale byte per 32.
pub const XS_BYTES: usize = 2 + SUPER_BLOCK / 4 + SUPER_BLOCK / 32;
/// Bytes per IQ2_S super-block in the file: `d`, 32 low index bytes, 32 of signs, 8 of high
/// index bits, 8 of scales.
pub const S_BYTES: usize = 2 + SUPER_BLOCK / 8 + SUPER_BLOCK / 8 + SUPER_BLOCK / 32 + SUPER_BLOCK / 32;
/// Bytes of one super-block held as F16.
const HELD_BYTES: usize = 2 * SUPER_BLOCK;

/// Bytes a tensor of `bytes` IQ2_XS bytes takes as F16.
pub fn xs_f16_bytes(bytes: u64) -> u64 {
    bytes / XS_BYTES as u64 * HELD_BYTES as u64
}

/// Bytes a tensor of `bytes` IQ2_S bytes takes as F16.
pub fn s_f16_bytes(bytes: u64) -> u64 {
    bytes / S_BYTES as u64 * HELD_BYTES as u64
}

/// Rewrites IQ2_XS super-blocks as the F16 weights they hold (the module's comment bounds the
/// rounding). `blocks` holds whole super-blocks (the header walk checked the tensor's size);
/// the output is reserved fallibly. A weight beyond f16's range (a super-block scale above
/// about 400) is refused as a malformed file.
pub fn xs_to_f16(blocks: &[u8]) -> Result<Vec<u8>, ModelError> {
    rewrite_super_blocks(blocks, XS_BYTES, HELD_BYTES, |out, sb| {
        let d = f16::from_le_bytes([sb[0], sb[1]]).to_f32();
        let (words, scales) = sb[2..].split_at(SUPER_BLOCK / 4);
        for (b, &scale) in scales.iter().enumerate() {
            for l in 0..4 {
                let at = 2 * (4 * b + l);
                let word = u16::from_le_bytes([words[at], words[at + 1]]);
                let point = &IQ2_XS_GRID[usize::from(word & 511)];
                push_weights(out, "IQ2_XS", half_block_factor(d, scale, l), point, sign_byte(u32::from(word >> 9)))?;
            }
        }
        Ok(())
    })
}

/// Rewrites IQ2_S super-blocks as the F16 weights they hold, as [`xs_to_f16`] does (a
/// super-block scale above about 400 is refused).
pub fn s_to_f16(blocks: &[u8]) -> Result<Vec<u8>, ModelError> {
    rewrite_super_blocks(blocks, S_BYTES, HELD_BYTES, |out, sb| {
        let d = f16::from_le_bytes([sb[0], sb[1]]).to_f32();
        let (low, rest) = sb[2..].split_at(SUPER_BLOCK / 8);
        let (signs, rest) = rest.split_at(SUPER_BLOCK / 8);
        let (high, scales) = rest.split_at(SUPER_BLOCK / 32);
        for (b, &scale) in scales.iter().enumerate() {
            for l in 0..4 {
                let index = usize::from(low[4 * b + l]) | usize::from((high[b] >> (2 * l)) & 3) << 8;
                push_weights(out, "IQ2_S", half_block_factor(d, scale, l), &IQ2_S_GRID[index], signs[4 * b + l])?;
            }
        }
        Ok(())
    })
}

/// The factor of group `l` (0..4) of a 32-weight block whose scale byte is `scale`: `d (0.5 +
/// s) / 4`, `s` the byte's low half for the first two groups and its high half for the last
/// two. Exact in f32 (11 + 5 significant bits).
fn half_block_factor(d: f32, scale: u8, l: usize) -> f32 {
    let s = if l < BLOCK / 16 { scale & 15 } else { scale >> 4 };
    d * (0.5 + f32::from(s)) * 0.25
}

/// Appends eight weights as f16: `factor` times each magnitude of `point`, negative where bit
/// `j` of `signs` is set. Each product is exact in f32 (16 + 6 significant bits) and rounded
/// to f16 once; one beyond f16's range is refused.
fn push_weights(out: &mut Vec<u8>, ty: &str, factor: f32, point: &[u8; 8], signs: u8) -> Result<(), ModelError> {
    for (j, &m) in point.iter().enumerate() {
        let w = factor * f32::from(m) * if signs >> j & 1 == 1 { -1.0 } else { 1.0 };
        let held = f16::from_f32(w);
        if !held.is_finite() {
            return Err(ModelError::Malformed(format!("an {ty} weight of {w} is beyond the f16 range its weights are held in")));
        }
        out.extend_from_slice(&held.to_le_bytes());
    }
    Ok(())
}

/// The random super-blocks of type `ty` (IQ2_XS, IQ2_S, IQ1_M, TQ1_0 or TQ2_0) and llama.cpp's
/// own dequantization of them (tests/fixtures/low_bit_blocks.json, written by
/// scripts/iq_grids.py): a normal `d`, then 2e-4, a tiny one and a subnormal one.
#[cfg(test)]
pub(super) fn ggml_case(ty: &str) -> (Vec<u8>, Vec<f32>) {
    super::iq2_xxs::fixture_case(include_str!("../../tests/fixtures/low_bit_blocks.json"), ty)
}

#[cfg(test)]
mod tests {
    use super::super::iq2_xxs::assert_within_an_f16_rounding;
    use super::*;

    fn held_weights(held: &[u8]) -> Vec<f32> {
        held.chunks_exact(2).map(|h| f16::from_le_bytes([h[0], h[1]]).to_f32()).collect()
    }

    #[test]
    fn every_weight_is_llama_cpps_within_half_an_f16_ulp() {
        type Convert = fn(&[u8]) -> Result<Vec<u8>, ModelError>;
        let cases: [(&str, usize, Convert); 2] = [("IQ2_XS", XS_BYTES, xs_to_f16), ("IQ2_S", S_BYTES, s_to_f16)];
        for (ty, bytes, convert) in cases {
            let (blocks, want) = ggml_case(ty);
            assert_eq!(blocks.len(), 4 * bytes, "{ty}");
            let out = convert(&blocks).expect("converts");
            assert_eq!(out.len(), 4 * HELD_BYTES, "{ty}");
            // Each product rounded to f16 once: within 2^-11 of itself, or 2^-25 below f16's
            // normal range; some were rounded.
            assert_within_an_f16_rounding(ty, &held_weights(&out), &want, 1.0);
            assert!(want.iter().all(|&w| w != 0.0), "{ty}: no point has a zero magnitude");
        }
    }

    #[test]
    fn a_weight_beyond_f16_is_refused() {
        // d = 1000 times (0.5 + 15) / 4 times 43.
        for (ty, bytes, convert) in [("IQ2_XS", XS_BYTES, xs_to_f16 as fn(&[u8]) -> _), ("IQ2_S", S_BYTES, s_to_f16)] {
            let mut x = f16::from_f32(1000.0).to_le_bytes().to_vec();
            x.resize(bytes, 0xff);
            let e = convert(&x).expect_err("refused");
            assert!(matches!(e, ModelError::Malformed(ref m) if m.contains(&format!("{ty} weight"))), "{e}");
        }
    }

    #[test]
    fn the_codebooks_have_the_formats_magnitudes() {
        let distinct = |g: &[[u8; 8]]| g.iter().collect::<std::collections::HashSet<_>>().len();
        assert_eq!(distinct(&IQ2_XS_GRID), 512);
        assert_eq!(distinct(&IQ2_S_GRID), 1024);
        assert!(IQ2_XS_GRID.iter().chain(&IQ2_S_GRID).flatten().all(|m| [8, 25, 43].contains(m)));
    }
}

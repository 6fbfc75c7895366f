//! IQ2_XXS, ggml's 2-bit codebook type (2.06 bits a weight): super-blocks of 256 weights, 66
//! bytes each, an f16 scale `d` then 8 bytes per 32-weight block: four index bytes, each
//! naming a point of eight magnitudes (8, 25 or 43, [`super::iq2_grids::IQ2_XXS_GRID`]), and a
//! 32-bit word whose low 28 bits are four 7-bit sign codes (one per point, the eighth sign
//! the parity of the seven, [`super::iq3::sign_byte`]) and whose top 4 bits are the block's
//! scale `s`. Weight = `d (0.5 + s) / 4 * magnitude * sign`.
//!
//! Each 32-weight block becomes a Q8_0 block ([`to_q8_0`]): the signed magnitudes as its
//! integers (exact: all within -43..=43) and the block's factor as its f16 scale, the one
//! rounding, as IQ3's ([`super::iq3`]): every held weight is within 2^-11 of the file's,
//! relative to itself, where the factor is within f16's normal range (above 6.1e-5; below it,
//! within half of f16's least step, 2^-25, times the weight's integer).
//! Every backend then computes with it as Q8_0, at 272 bytes a super-block where the file
//! has 66: 4.1 times its bytes.

use super::iq2_grids::IQ2_XXS_GRID;
use super::iq3::{convert_super_blocks, held_bytes, push_scale, push_signed, sign_byte, SUPER_BLOCK};
use crate::error::ModelError;

/// Bytes per super-block in the file: `d`, then 8 bytes per 32-weight block.
pub const BYTES: usize = 2 + SUPER_BLOCK / 4;

/// Bytes a tensor of `bytes` IQ2_XXS bytes takes as Q8_0.
pub fn q8_0_bytes(bytes: u64) -> u64 {
    held_bytes(bytes, BYTES)
}

/// Rewrites IQ2_XXS super-blocks as the Q8_0 blocks of the same weights (the module's comment
/// bounds the rounding). `blocks` holds whole super-blocks (the header walk checked the
/// tensor's size); the output is reserved fallibly. A block factor beyond f16's range (a
/// super-block scale above about 16000) is refused as a malformed file.
pub fn to_q8_0(blocks: &[u8]) -> Result<Vec<u8>, ModelError> {
    convert_super_blocks(blocks, BYTES, |out, d, sb| {
        for block in sb.chunks_exact(8) {
            let word = u32::from_le_bytes([block[4], block[5], block[6], block[7]]);
            // Exact in f32 (11 + 5 significant bits); the f16 conversion rounds to nearest.
            push_scale(out, "IQ2_XXS", d * (0.5 + (word >> 28) as f32) * 0.25)?;
            for (l, &index) in block[..4].iter().enumerate() {
                push_signed(out, &IQ2_XXS_GRID[usize::from(index)], sign_byte(word >> (7 * l)));
            }
        }
        Ok(())
    })
}

/// The random super-blocks of type `ty` (`IQ2_XXS` or `IQ1_S`) and llama.cpp's own
/// dequantization of them (tests/fixtures/iq2_blocks.json, written by scripts/iq_grids.py): a
/// normal, a tiny and a subnormal `d`.
#[cfg(test)]
pub(super) fn ggml_case(ty: &str) -> (Vec<u8>, Vec<f32>) {
    fixture_case(include_str!("../../tests/fixtures/iq2_blocks.json"), ty)
}

/// Type `ty`'s case in a fixture scripts/iq_grids.py wrote: its blocks' bytes and llama.cpp's
/// dequantization of them.
#[cfg(test)]
pub(super) fn fixture_case(fixture: &str, ty: &str) -> (Vec<u8>, Vec<f32>) {
    let json: serde_json::Value = serde_json::from_str(fixture).expect("fixture");
    let case = json["cases"].as_array().expect("cases").iter().find(|c| c["type"] == ty).expect("the type's case");
    let hex = case["blocks"].as_str().expect("hex");
    let bytes = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex byte")).collect();
    let weights = case["weights"].as_array().expect("weights").iter().map(|w| w.as_f64().expect("number") as f32).collect();
    (bytes, weights)
}

/// Holds converted weights to llama.cpp's: each within 2^-11 of itself, or, where its
/// block's factor fell below f16's normal range, within half of f16's least step (2^-25)
/// times its integer (at most `largest_integer`); some must have been rounded, so the bound is
/// met by rounding and not by luck.
#[cfg(test)]
pub(super) fn assert_within_an_f16_rounding(ty: &str, got: &[f32], want: &[f32], largest_integer: f32) {
    assert_eq!(got.len(), want.len(), "{ty}");
    let mut rounded = 0;
    for (j, (g, w)) in got.iter().zip(want).enumerate() {
        let allowed = (w.abs() / 2048.0).max(largest_integer * 2f32.powi(-25));
        assert!((g - w).abs() <= allowed, "{ty} weight {j}: held {g}, llama.cpp {w}");
        rounded += usize::from(g != w);
    }
    assert!(rounded > 0, "{ty}");
}

#[cfg(test)]
mod tests {
    use super::super::iq3::Q8_0_BLOCK_BYTES;
    use super::super::iq4_nl::held_weights;
    use super::*;
    use half::f16;

    #[test]
    fn every_weight_is_llama_cpps_within_half_an_f16_ulp() {
        let (blocks, want) = ggml_case("IQ2_XXS");
        assert_eq!(blocks.len(), 3 * BYTES);
        let out = to_q8_0(&blocks).expect("converts");
        assert_eq!(out.len(), 3 * 8 * Q8_0_BLOCK_BYTES);
        assert_within_an_f16_rounding("IQ2_XXS", &held_weights(&out), &want, 43.0);
        assert!(want.iter().all(|&w| w != 0.0), "no IQ2_XXS point has a zero magnitude");
    }

    #[test]
    fn a_block_factor_beyond_f16_is_refused() {
        // d = 30000 times (0.5 + 15) / 4.
        let mut x = f16::from_f32(30000.0).to_le_bytes().to_vec();
        x.resize(BYTES, 0xff);
        let e = to_q8_0(&x).expect_err("refused");
        assert!(matches!(e, ModelError::Malformed(ref m) if m.contains("IQ2_XXS block scale")), "{e}");
    }

    #[test]
    fn the_codebook_has_the_formats_magnitudes() {
        assert_eq!(IQ2_XXS_GRID.iter().collect::<std::collections::HashSet<_>>().len(), 256);
        assert!(IQ2_XXS_GRID.iter().flatten().all(|m| [8, 25, 43].contains(m)));
    }
}

//! IQ1_S, ggml's 1.56-bit codebook type: super-blocks of 256 weights, 50 bytes each, an f16
//! scale `d`, 32 bytes of the low 8 bits of 11-bit indices (four per 32-weight block), then a
//! 16-bit word per block: its bits `3k..3k+3` index `k`'s high bits, bits 12-14 the block's
//! scale `s`, bit 15 the sign of a shift of 1/8. Each index names a point of eight steps (-1,
//! 0 or 1, [`super::iq2_grids::IQ1_S_GRID`]). Weight = `d (2 s + 1) (step ± 1/8)`.
//!
//! Each 32-weight block becomes a Q8_0 block ([`to_q8_0`]): `8 step ± 1` as its integers
//! (exact: -9, -7, -1, 1, 7 or 9) and `d (2 s + 1) / 8` as its f16 scale, the one rounding, as
//! IQ3's ([`super::iq3`]): every held weight is within 2^-11 of the file's, relative to itself,
//! where the factor is within f16's normal range (above 6.1e-5; below it, within half of
//! f16's least step, 2^-25, times the weight's integer). Every backend then computes with it
//! as Q8_0, at 272 bytes a super-block where the file has 50: 5.4 times its bytes.

use super::iq2_grids::IQ1_S_GRID;
use super::iq3::{convert_super_blocks, held_bytes, push_scale, SUPER_BLOCK};
use crate::error::ModelError;

/// Bytes per super-block in the file: `d`, 32 bytes of indices' low bits, a word per block.
pub const BYTES: usize = 2 + SUPER_BLOCK / 8 + SUPER_BLOCK / 16;

/// Bytes a tensor of `bytes` IQ1_S bytes takes as Q8_0.
pub fn q8_0_bytes(bytes: u64) -> u64 {
    held_bytes(bytes, BYTES)
}

/// Rewrites IQ1_S super-blocks as the Q8_0 blocks of the same weights (the module's comment
/// bounds the rounding). `blocks` holds whole super-blocks (the header walk checked the
/// tensor's size); the output is reserved fallibly. A block factor beyond f16's range (a
/// super-block scale above about 35000) is refused as a malformed file.
pub fn to_q8_0(blocks: &[u8]) -> Result<Vec<u8>, ModelError> {
    convert_super_blocks(blocks, BYTES, |out, d, sb| {
        let (low, words) = sb.split_at(SUPER_BLOCK / 8);
        for (b, word) in words.chunks_exact(2).enumerate() {
            let word = u16::from_le_bytes([word[0], word[1]]);
            // Exact in f32 (11 + 4 significant bits, and a power of two); the f16 conversion
            // rounds to nearest.
            push_scale(out, "IQ1_S", d * f32::from(2 * ((word >> 12) & 7) + 1) / 8.0)?;
            let shift: i8 = if word & 0x8000 != 0 { -1 } else { 1 };
            for (k, &index) in low[4 * b..4 * b + 4].iter().enumerate() {
                let index = usize::from(index) | usize::from((word >> (3 * k)) & 7) << 8;
                out.extend(IQ1_S_GRID[index].iter().map(|&step| (8 * step + shift) as u8));
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::super::iq2_xxs::{assert_within_an_f16_rounding, ggml_case};
    use super::super::iq3::Q8_0_BLOCK_BYTES;
    use super::super::iq4_nl::held_weights;
    use super::*;
    use half::f16;

    #[test]
    fn every_weight_is_llama_cpps_within_half_an_f16_ulp() {
        let (blocks, want) = ggml_case("IQ1_S");
        assert_eq!(blocks.len(), 3 * BYTES);
        let out = to_q8_0(&blocks).expect("converts");
        assert_eq!(out.len(), 3 * 8 * Q8_0_BLOCK_BYTES);
        assert_within_an_f16_rounding("IQ1_S", &held_weights(&out), &want, 9.0);
        // Both signs of the shift were read: weights of steps of 0 are +-d (2 s + 1) / 8.
        let integers: std::collections::HashSet<i8> =
            out.chunks_exact(Q8_0_BLOCK_BYTES).flat_map(|b| b[2..].iter().map(|&q| q as i8)).collect();
        assert_eq!(integers.len(), 6, "{integers:?}");
    }

    #[test]
    fn a_block_factor_beyond_f16_is_refused() {
        // d = 60000 times (2 * 7 + 1) / 8.
        let mut x = f16::from_f32(60000.0).to_le_bytes().to_vec();
        x.resize(BYTES, 0xff);
        let e = to_q8_0(&x).expect_err("refused");
        assert!(matches!(e, ModelError::Malformed(ref m) if m.contains("IQ1_S block scale")), "{e}");
    }

    #[test]
    fn the_codebook_has_the_formats_steps() {
        assert_eq!(IQ1_S_GRID.iter().collect::<std::collections::HashSet<_>>().len(), 2048);
        assert!(IQ1_S_GRID.iter().flatten().all(|s| [-1, 0, 1].contains(s)));
    }
}

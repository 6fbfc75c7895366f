//! Q1_0, ggml's 1-bit type (the Bonsai models' weights): blocks of 128 weights, 18 bytes each,
//! an f16 scale `d` then a bit per weight (weight `j` in bit `j % 8` of byte `j / 8`). Weight =
//! `d` where the bit is set, `-d` where it is not.
//!
//! Each 32 weights are exactly a Q8_0 block ([`to_q8_0`]): the same `d` and `1` or `-1` as its
//! integers, so every backend computes with the file's own weights as Q8_0, at 136 bytes a
//! block where the file has 18: 7.6 times its bytes.

use super::iq3::{rewrite_super_blocks, BLOCK, Q8_0_BLOCK_BYTES};
use crate::error::ModelError;

/// Weights per block.
pub const WEIGHTS: usize = 128;
/// Bytes per block in the file: `d`, then 16 bytes of signs.
pub const BYTES: usize = 2 + WEIGHTS / 8;
/// Bytes of the four Q8_0 blocks one block becomes.
const HELD_BYTES: usize = WEIGHTS / BLOCK * Q8_0_BLOCK_BYTES;

/// Bytes a tensor of `bytes` Q1_0 bytes takes as Q8_0.
pub fn q8_0_bytes(bytes: u64) -> u64 {
    bytes / BYTES as u64 * HELD_BYTES as u64
}

/// Rewrites Q1_0 blocks as the Q8_0 blocks of the same weights, bit for bit. `blocks` holds
/// whole blocks (the header walk checked the tensor's size); the output is reserved fallibly.
pub fn to_q8_0(blocks: &[u8]) -> Result<Vec<u8>, ModelError> {
    rewrite_super_blocks(blocks, BYTES, HELD_BYTES, |out, block| {
        // Code 2 is +1, code 0 is -1, as `code - 1`.
        let codes = block[2..].iter().flat_map(|&b| (0..8).map(move |j| 2 * ((b >> j) & 1)));
        super::ternary::push_q8_0_blocks(out, [block[0], block[1]], codes);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::super::iq2_xs::ggml_case;
    use super::super::iq4_nl::held_weights;
    use super::*;

    #[test]
    fn every_weight_is_llama_cpps_bit_for_bit() {
        let (blocks, want) = ggml_case("Q1_0");
        assert_eq!(blocks.len(), 4 * BYTES);
        let out = to_q8_0(&blocks).expect("converts");
        assert_eq!(out.len(), 4 * HELD_BYTES);
        assert_eq!(held_weights(&out), want);
        let d = half::f16::from_le_bytes([blocks[0], blocks[1]]).to_f32();
        assert!(want[..WEIGHTS].contains(&d) && want[..WEIGHTS].contains(&-d));
    }
}

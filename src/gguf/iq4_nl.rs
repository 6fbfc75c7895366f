//! IQ4_NL, ggml's non-linear 4-bit type: blocks of 32 weights, an f16 scale `d` and sixteen
//! bytes of 4-bit codes (byte `j` holds weight `j` in its low half and weight `j + 16` in its
//! high half, as Q4_0 does), each code an index into a fixed table of 16 signed 8-bit levels
//! spaced closer near zero. Weight = `d * LEVELS[code]`.
//!
//! Every level fits an `i8`, so a block is exactly a Q8_0 block (the same `d`, the 32 levels
//! as its integers): [`to_q8_0`] rewrites a tensor that way once, at load, and every backend
//! computes with it as Q8_0 (34 bytes a block where the file has 18).

use crate::error::ModelError;

/// Weights per block.
pub const BLOCK: usize = 32;
/// Bytes per block in the file: the f16 scale and 16 bytes of codes.
pub const BLOCK_BYTES: usize = 2 + BLOCK / 2;
/// Bytes per block as held: a Q8_0 block, the f16 scale and 32 `i8`.
pub const Q8_0_BLOCK_BYTES: usize = 2 + BLOCK;

/// The 16 levels a code selects (ggml's `kvalues_iq4nl`).
pub const LEVELS: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// Bytes a tensor of `bytes` IQ4_NL bytes takes as Q8_0.
pub fn q8_0_bytes(bytes: u64) -> u64 {
    bytes / BLOCK_BYTES as u64 * Q8_0_BLOCK_BYTES as u64
}

/// Rewrites IQ4_NL blocks as the Q8_0 blocks of the same weights, bit for bit: the scale is
/// copied and each code replaced by its level. `blocks` holds whole blocks (the header walk
/// checked the tensor's size); the output is reserved fallibly, so a tensor the memory cannot
/// take is refused, not the end of the process.
pub fn to_q8_0(blocks: &[u8]) -> Result<Vec<u8>, ModelError> {
    let mut out = held_buffer(q8_0_bytes(blocks.len() as u64))?;
    for block in blocks.chunks_exact(BLOCK_BYTES) {
        push_q8_0_block(&mut out, [block[0], block[1]], &block[2..]);
    }
    Ok(out)
}

/// An empty buffer with room for `held` bytes, reserved fallibly: a tensor the memory cannot
/// take is refused, not the end of the process.
pub(super) fn held_buffer(held: u64) -> Result<Vec<u8>, ModelError> {
    let mut out = Vec::new();
    usize::try_from(held).ok().and_then(|n| out.try_reserve_exact(n).ok()).ok_or_else(|| ModelError::TooLarge {
        part: "weights",
        needed: held,
        available: crate::memory::available_bytes().unwrap_or(0),
    })?;
    Ok(out)
}

/// Appends the Q8_0 block of 32 weights given as an f16 `scale` and 16 bytes of 4-bit codes
/// (weight `j` in byte `j`'s low half, weight `j + 16` in its high half): each code's level.
pub(super) fn push_q8_0_block(out: &mut Vec<u8>, scale: [u8; 2], codes: &[u8]) {
    out.extend_from_slice(&scale);
    let level = |code: u8| LEVELS[usize::from(code & 15)] as u8;
    out.extend(codes.iter().map(|&c| level(c)));
    out.extend(codes.iter().map(|&c| level(c >> 4)));
}

/// The weights of held Q8_0 blocks, each integer times its block's f16 scale (the IQ types'
/// tests read their conversions back with it).
#[cfg(test)]
pub(super) fn held_weights(q8: &[u8]) -> Vec<f32> {
    q8.chunks_exact(Q8_0_BLOCK_BYTES)
        .flat_map(|b| {
            let d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
            b[2..].iter().map(move |&q| d * f32::from(q as i8))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_code_becomes_its_level_and_the_scale_is_kept() {
        // Weight j's code is j % 16 in the low halves and 15 - j % 16 in the high ones.
        let mut block = vec![0x00, 0x3c]; // f16 1.0
        block.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let out = to_q8_0(&block).expect("converts");
        assert_eq!(out.len(), Q8_0_BLOCK_BYTES);
        assert_eq!(&out[..2], &[0x00, 0x3c]);
        for j in 0..16 {
            assert_eq!(out[2 + j] as i8, LEVELS[j], "weight {j}");
            assert_eq!(out[2 + 16 + j] as i8, LEVELS[15 - j], "weight {}", 16 + j);
        }
    }
}

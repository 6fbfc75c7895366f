//! IQ4_XS, ggml's non-linear 4-bit type with 6-bit block scales: super-blocks of 256 weights,
//! each an f16 scale `d`, then eight 6-bit block scales (their low 4 bits in `scales_l`, two to
//! a byte, low half first; their high 2 bits in the u16 `scales_h`, two bits each from the
//! bottom), then 128 bytes of 4-bit codes, sixteen bytes per 32-weight block laid out as
//! IQ4_NL's. Weight `j` of block `b` = `d * (scale_b - 32) * LEVELS[code]` ([`super::iq4_nl::LEVELS`]).
//!
//! Each 32-weight block becomes a Q8_0 block ([`to_q8_0`]): its codes' levels as the integers
//! and `d * (scale_b - 32)` as the f16 scale. The levels are exact; the scale is the one
//! rounding, since an f16 times a 6-bit integer can need 17 significant bits where f16 has
//! 11: every held weight is within 2^-11 of the file's, relative to itself (exact where the
//! product fits, a subnormal `d` times a small scale among them), where the two closest
//! levels (-10 and 1) are 9% of the largest (-127) apart. Every backend then computes with it
//! as Q8_0 (34 bytes a block where the file has 17).

use crate::error::ModelError;
use half::f16;

use super::iq4_nl::{held_buffer, push_q8_0_block};

/// Weights per super-block.
pub const SUPER_BLOCK: usize = 256;
/// Weights per block (each with its own 6-bit scale).
pub const BLOCK: usize = 32;
/// Bytes per super-block in the file: `d`, `scales_h`, four bytes of `scales_l`, 128 of codes.
pub const SUPER_BLOCK_BYTES: usize = 2 + 2 + SUPER_BLOCK / 64 + SUPER_BLOCK / 2;
/// Bytes per 32-weight block as held: a Q8_0 block, the f16 scale and 32 `i8`.
pub const Q8_0_BLOCK_BYTES: usize = 2 + BLOCK;
/// Largest relative difference of a held weight from the file's: half an f16 ulp.
pub const HELD_RELATIVE_ERROR: f32 = 1.0 / 2048.0;

/// Bytes a tensor of `bytes` IQ4_XS bytes takes as Q8_0.
pub fn q8_0_bytes(bytes: u64) -> u64 {
    bytes / SUPER_BLOCK_BYTES as u64 * (SUPER_BLOCK / BLOCK * Q8_0_BLOCK_BYTES) as u64
}

/// The 6-bit scale of block `b` (0..8) of a super-block, 0..=63 (the weights' factor is it
/// minus 32).
pub fn block_scale(super_block: &[u8], b: usize) -> i32 {
    let high = u16::from_le_bytes([super_block[2], super_block[3]]);
    let low = (super_block[4 + b / 2] >> (4 * (b % 2))) & 15;
    i32::from(low) | (i32::from((high >> (2 * b)) & 3) << 4)
}

/// Rewrites IQ4_XS super-blocks as the Q8_0 blocks of the same weights, each block's scale
/// rounded to f16 (the module's comment bounds it). `blocks` holds whole super-blocks (the
/// header walk checked the tensor's size); the output is reserved fallibly, so a tensor the
/// memory cannot take is refused, not the end of the process. A block scale beyond f16's
/// range (a super-block scale above 2047, which no trained weights have) is refused as a
/// malformed file.
pub fn to_q8_0(blocks: &[u8]) -> Result<Vec<u8>, ModelError> {
    let mut out = held_buffer(q8_0_bytes(blocks.len() as u64))?;
    for super_block in blocks.chunks_exact(SUPER_BLOCK_BYTES) {
        let d = f16::from_le_bytes([super_block[0], super_block[1]]).to_f32();
        for (b, codes) in super_block[8..].chunks_exact(BLOCK / 2).enumerate() {
            // Exact in f32 (11 + 6 significant bits); the f16 conversion rounds to nearest.
            let exact = d * (block_scale(super_block, b) - 32) as f32;
            let scale = f16::from_f32(exact);
            if !scale.is_finite() {
                return Err(ModelError::Malformed(format!(
                    "an IQ4_XS block scale of {exact} is beyond the f16 range its weights are held in"
                )));
            }
            push_q8_0_block(&mut out, scale.to_le_bytes(), codes);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::iq4_nl::{held_weights, LEVELS};
    use super::*;

    /// The file's weights of one super-block, in f32, straight from the format's definition.
    fn weights(super_block: &[u8]) -> Vec<f32> {
        let d = f16::from_le_bytes([super_block[0], super_block[1]]).to_f32() as f64;
        let mut w = vec![0.0; SUPER_BLOCK];
        for (j, w) in w.iter_mut().enumerate() {
            let (b, k) = (j / BLOCK, j % BLOCK);
            let byte = super_block[8 + b * 16 + k % 16];
            let code = if k < 16 { byte & 15 } else { byte >> 4 };
            let scale = i32::from(super_block[4 + b / 2] >> (4 * (b % 2)) & 15)
                | ((i32::from(super_block[3]) << 8 | i32::from(super_block[2])) >> (2 * b) & 3) << 4;
            *w = (d * f64::from(scale - 32) * f64::from(LEVELS[usize::from(code)])) as f32;
        }
        w
    }

    /// A super-block with scale `d`, block scales `scales` and codes from a seed.
    fn super_block(d: f32, scales: [u8; 8], seed: u32) -> Vec<u8> {
        let mut s = f16::from_f32(d).to_le_bytes().to_vec();
        let high = scales.iter().enumerate().fold(0u16, |h, (b, &x)| h | (u16::from(x >> 4) << (2 * b)));
        s.extend(high.to_le_bytes());
        s.extend((0..4).map(|i| (scales[2 * i] & 15) | ((scales[2 * i + 1] & 15) << 4)));
        let mut x = seed;
        s.extend((0..128).map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 24) as u8
        }));
        s
    }

    #[test]
    fn every_weight_is_held_within_half_an_f16_ulp_of_the_files() {
        // Scales from 0 (factor -32) to 63 (31), 32 itself (a block of zeros); a normal d, a
        // tiny one, a subnormal one.
        let cases =
            [(0.011_3, [0, 63, 32, 33, 31, 17, 45, 58]), (3.7e-5, [1, 62, 5, 60, 29, 35, 9, 50]), (2.4e-7, [0, 63, 31, 33, 2, 61, 40, 24])];
        let mut file = Vec::new();
        for (i, (d, scales)) in cases.iter().enumerate() {
            file.extend(super_block(*d, *scales, i as u32 + 7));
        }
        let out = to_q8_0(&file).expect("converts");
        assert_eq!(out.len() as u64, q8_0_bytes(file.len() as u64));
        assert_eq!(out.len(), 3 * 8 * Q8_0_BLOCK_BYTES);
        let want: Vec<f32> = file.chunks_exact(SUPER_BLOCK_BYTES).flat_map(weights).collect();
        let got = held_weights(&out);
        let mut rounded = 0;
        for (j, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= HELD_RELATIVE_ERROR * w.abs(), "weight {j}: held {g}, file {w}");
            rounded += usize::from(g != w);
        }
        // The bound is met by rounding, not by luck: some scales did need it.
        assert!(rounded > 0);
        // A subnormal d (4 steps of 2^-24) times any factor (at most 32) stays exact.
        assert_eq!(got[2 * 256..], want[2 * 256..]);
    }

    #[test]
    fn the_block_scales_are_read_from_both_fields() {
        let scales = [0, 63, 32, 33, 31, 17, 45, 58];
        let s = super_block(1.0, scales, 1);
        for (b, &x) in scales.iter().enumerate() {
            assert_eq!(block_scale(&s, b), i32::from(x), "block {b}");
        }
    }

    #[test]
    fn a_block_scale_beyond_f16_is_refused() {
        let e = to_q8_0(&super_block(4000.0, [0; 8], 1)).expect_err("refused");
        assert!(matches!(e, ModelError::Malformed(ref m) if m.contains("IQ4_XS block scale")), "{e}");
    }
}

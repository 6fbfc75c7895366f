//! IQ1_M, ggml's 1.75-bit codebook type: super-blocks of 256 weights, 56 bytes each, 32 bytes
//! of the low 8 bits of 11-bit indices (one per eight weights) into IQ1_S's codebook of steps
//! -1, 0 and 1 ([`super::iq2_grids::IQ1_S_GRID`]), then a byte per sixteen weights whose two
//! halves each hold an index's high 3 bits and (bit 3) the sign of its eight weights' shift of
//! 1/8, then four 16-bit words of 3-bit scales `s` (one per sixteen weights, four a word from
//! the low bits) whose top 4 bits are, in turn, the f16 super-block scale `d`'s. Weight =
//! `d (2 s + 1) (step ± 1/8)`.
//!
//! Scales per sixteen weights fit Q6_K, ggml's type of sixteen-weight sub-blocks with an `i8`
//! scale each under an f16 one and 6-bit integers from -32 to 31, so each super-block becomes
//! one ([`to_q6_k`]): `8 step ± 1` as its integers (-9 to 9), `2 s + 1` as its sub-block
//! scales and `d / 8` as its f16 scale, exact where `d / 8` is within f16's normal range
//! (`d` at least 2^-11) and else rounded once, each held weight then within half of f16's
//! least step (2^-25) times its sub-block scale and integer (at most 135). Every backend then
//! computes with it as Q6_K, at 210 bytes a super-block where the file has 56: 3.75 times its
//! bytes.

use half::f16;

use super::iq2_grids::IQ1_S_GRID;
use super::iq3::{rewrite_super_blocks, SUPER_BLOCK};
use crate::error::ModelError;

/// Bytes per super-block in the file: index low bits, high bits and shifts, scales.
pub const BYTES: usize = SUPER_BLOCK / 8 + SUPER_BLOCK / 16 + SUPER_BLOCK / 32;
/// Bytes per Q6_K super-block: 128 bytes of low 4 bits, 64 of high 2 bits, 16 `i8` scales, the
/// f16 scale.
pub const Q6_K_BYTES: usize = SUPER_BLOCK / 2 + SUPER_BLOCK / 4 + SUPER_BLOCK / 16 + 2;

/// Bytes a tensor of `bytes` IQ1_M bytes takes as Q6_K.
pub fn q6_k_bytes(bytes: u64) -> u64 {
    bytes / BYTES as u64 * Q6_K_BYTES as u64
}

/// Rewrites IQ1_M super-blocks as the Q6_K super-blocks of the same weights (the module's
/// comment bounds the rounding). `blocks` holds whole super-blocks (the header walk checked the
/// tensor's size); the output is reserved fallibly. A super-block scale that is no finite
/// number is refused as a malformed file.
pub fn to_q6_k(blocks: &[u8]) -> Result<Vec<u8>, ModelError> {
    rewrite_super_blocks(blocks, BYTES, Q6_K_BYTES, |out, sb| {
        let (low, rest) = sb.split_at(SUPER_BLOCK / 8);
        let (high, scales) = rest.split_at(SUPER_BLOCK / 16);
        let words: [u16; 4] = std::array::from_fn(|k| u16::from_le_bytes([scales[2 * k], scales[2 * k + 1]]));
        let d = f16::from_bits(words.iter().enumerate().fold(0, |d, (k, w)| d | (w >> 12) << (4 * k)));
        if !d.is_finite() {
            return Err(ModelError::Malformed(format!("an IQ1_M super-block scale of {d} is no finite number")));
        }
        let mut integers = [0i8; SUPER_BLOCK];
        for (group, eight) in integers.chunks_exact_mut(8).enumerate() {
            let bits = high[group / 2] >> (4 * (group % 2));
            let index = usize::from(low[group]) | usize::from(bits & 7) << 8;
            let shift = if bits & 8 != 0 { -1 } else { 1 };
            for (q, &step) in eight.iter_mut().zip(&IQ1_S_GRID[index]) {
                *q = 8 * step + shift;
            }
        }
        let sub_block_scales: [i8; SUPER_BLOCK / 16] = std::array::from_fn(|i| (2 * ((words[i / 4] >> (3 * (i % 4))) & 7) + 1) as i8);
        // d / 8 is exact in f32; the f16 conversion rounds to nearest where it is subnormal.
        push_q6_k(out, &integers, &sub_block_scales, f16::from_f32(d.to_f32() / 8.0));
        Ok(())
    })
}

/// Appends the Q6_K super-block of 256 integers (each -32..=31), sixteen sub-block scales and
/// an f16 scale, in ggml's layout: weight `w` of half `n = w / 128`, group `g = w % 128 / 32`
/// and lane `l = w % 32` stores its low 4 bits in byte `64 n + 32 (g % 2) + l` (the low half
/// for groups 0 and 1, the high half for 2 and 3), its high 2 bits at bit `2 g` of byte
/// `128 + 32 n + l`, biased by 32; the scales follow, then `d`.
fn push_q6_k(out: &mut Vec<u8>, integers: &[i8; SUPER_BLOCK], scales: &[i8; SUPER_BLOCK / 16], d: f16) {
    let mut low = [0u8; SUPER_BLOCK / 2];
    let mut high = [0u8; SUPER_BLOCK / 4];
    for (w, &q) in integers.iter().enumerate() {
        let (n, g, l) = (w / 128, w % 128 / 32, w % 32);
        let biased = (i16::from(q) + 32) as u8;
        low[64 * n + 32 * (g % 2) + l] |= (biased & 15) << (4 * (g / 2));
        high[32 * n + l] |= (biased >> 4) << (2 * g);
    }
    out.extend_from_slice(&low);
    out.extend_from_slice(&high);
    out.extend(scales.iter().map(|&s| s as u8));
    out.extend_from_slice(&d.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::super::iq2_xs::ggml_case;
    use super::*;

    /// The weights of held Q6_K super-blocks, as candle (the engine's reference) reads them.
    fn held_weights(q6: &[u8]) -> Vec<f32> {
        use candle_core::quantized::{ggml_file::qtensor_from_ggml, GgmlDType};
        let n = q6.len() / Q6_K_BYTES * SUPER_BLOCK;
        let t = qtensor_from_ggml(GgmlDType::Q6K, q6, vec![n], &candle_core::Device::Cpu).expect("tensor");
        t.dequantize(&candle_core::Device::Cpu).and_then(|t| t.to_vec1::<f32>()).expect("weights")
    }

    #[test]
    fn every_weight_is_llama_cpps_and_only_a_subnormal_scale_is_rounded() {
        assert_eq!(candle_core::quantized::GgmlDType::Q6K.type_size(), Q6_K_BYTES);
        let (blocks, want) = ggml_case("IQ1_M");
        assert_eq!(blocks.len(), 4 * BYTES);
        let out = to_q6_k(&blocks).expect("converts");
        assert_eq!(out.len(), 4 * Q6_K_BYTES);
        let got = held_weights(&out);
        // The first super-block's d / 8 is a normal f16: every weight exact.
        assert_eq!(got[..SUPER_BLOCK], want[..SUPER_BLOCK]);
        // The others' (d of 2e-4, 3.1e-5 and 2.4e-7) are subnormal: within 2^-25 times the
        // largest sub-block scale and integer, and some weights were rounded.
        let mut rounded = 0;
        for (j, (g, w)) in got.iter().zip(&want).enumerate().skip(SUPER_BLOCK) {
            assert!((g - w).abs() <= 135.0 * 2f32.powi(-25), "weight {j}: held {g}, llama.cpp {w}");
            rounded += usize::from(g != w);
        }
        assert!(rounded > 0);
    }

    #[test]
    fn a_scale_that_is_no_number_is_refused() {
        // Every scale word's top bits set: d's bits 0xffff, a NaN.
        let x = vec![0xff; BYTES];
        let e = to_q6_k(&x).expect_err("refused");
        assert!(matches!(e, ModelError::Malformed(ref m) if m.contains("IQ1_M super-block scale")), "{e}");
    }
}

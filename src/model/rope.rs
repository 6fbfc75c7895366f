//! Rotary position embedding, as the model file asks for it: the frequency of each pair
//! (plain, linearly scaled, or with Llama 3's per-pair factors), over the whole head or its
//! first `rope.dimension_count` elements, which frequencies each layer turns by
//! ([`LayerRope`], [`LayerRopes`]), and the one pair layout the kernels turn (adjacent
//! elements), to which files that pair split halves are brought at load.

use std::borrow::Cow;

use candle_core::quantized::{QStorage, QTensor};
use candle_core::Device;

use super::architecture::GEMMA3_LOCAL_ROPE_BASE;
use super::config::Config;
use crate::error::ModelError;

/// The angular frequency of each RoPE pair of a head: pair `i` of a token at position `p` turns
/// by `p * inv_freq[i]`, with `inv_freq[i] = base^(-2i / rope_dims) / (scale * factor[i])`
/// (llama.cpp's `ggml_rope_ext` without YaRN) for the first `rope_dims / 2` pairs; the
/// head's other pairs pass through (frequency 0: cosine 1, sine 0, not scaled). Computed in
/// f64, once per model; the CPU's [`RopeAngles`](crate::backend::cpu::ops::RopeAngles) and
/// the GPU's table both read it.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeFrequencies {
    /// `[head_dim / 2]`: 0 past the rotated pairs.
    inv_freq: Vec<f64>,
    /// Pairs turned (`rope_dims / 2`), the first of the head.
    rotated: usize,
    /// What every rotated pair's cosine and sine is multiplied by: LongRoPE's attention
    /// factor (`rope.scaling.attn_factor`, llama.cpp's `mscale`), 1 elsewhere.
    magnitude: f64,
}

impl RopeFrequencies {
    /// Unscaled RoPE of the first `rope_dims` (even, at most `head_dim`) elements of heads of
    /// `head_dim` (even), with base frequency `base`.
    pub fn plain(head_dim: usize, rope_dims: usize, base: f32) -> Self {
        Self::new(head_dim, rope_dims, base, 1.0, None)
    }

    /// RoPE of the first `rope_dims` elements of each head with positions divided by
    /// `linear_scale` (`rope.scaling.type = linear`, 1 for none) and each pair's wavelength
    /// multiplied by `factors[i]` (Llama 3's `rope_freqs.weight`, LongRoPE's factors:
    /// `[rope_dims / 2]`; the caller has checked its length and values).
    pub fn new(head_dim: usize, rope_dims: usize, base: f32, linear_scale: f32, factors: Option<&[f32]>) -> Self {
        let rotated = rope_dims.min(head_dim) / 2;
        let inv_freq = (0..head_dim / 2)
            .map(|i| {
                if i >= rotated {
                    return 0.0;
                }
                let factor = factors.map_or(1.0, |f| f64::from(f[i]));
                f64::from(base).powf(-2.0 * i as f64 / (2 * rotated) as f64) / (f64::from(linear_scale) * factor)
            })
            .collect();
        RopeFrequencies { inv_freq, rotated, magnitude: 1.0 }
    }

    /// The same frequencies with every cosine and sine multiplied by `magnitude`.
    pub fn with_magnitude(self, magnitude: f32) -> Self {
        RopeFrequencies { magnitude: f64::from(magnitude), ..self }
    }

    /// No rotation at all over heads of `head_dim`: every pair's frequency is 0, so every
    /// angle is 0, its cosine exactly 1 and its sine exactly 0, and a turn leaves q and k as
    /// they were, bit for bit.
    pub fn unrotated(head_dim: usize) -> Self {
        RopeFrequencies { inv_freq: vec![0.0; head_dim / 2], rotated: 0, magnitude: 1.0 }
    }

    /// Pairs per head (`head_dim / 2`).
    pub fn pairs(&self) -> usize {
        self.inv_freq.len()
    }

    /// The angle pair `i` turns by at position `pos`, in radians.
    pub fn angle(&self, pos: usize, i: usize) -> f64 {
        pos as f64 * self.inv_freq[i]
    }

    /// The sine and cosine pair `i` is turned by at position `pos`, each times the magnitude
    /// ([`RopeFrequencies::with_magnitude`]); exactly (0, 1) for a pair past the rotated ones,
    /// which passes through: what the CPU applies and the GPU's table holds.
    pub fn sin_cos(&self, pos: usize, i: usize) -> (f64, f64) {
        if i >= self.rotated {
            return (0.0, 1.0);
        }
        let (sin, cos) = self.angle(pos, i).sin_cos();
        (sin * self.magnitude, cos * self.magnitude)
    }
}

/// Which RoPE frequencies a layer turns its queries and keys by ([`Config::layer_rope`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerRope {
    /// The file's: `rope.freq_base` with its scaling and Llama 3's per-pair factors.
    Main,
    /// A sliding-window layer's own: Gemma 3's base of [`GEMMA3_LOCAL_ROPE_BASE`], unscaled.
    Sliding,
    /// None: SmolLM3's NoPE layers, whose attention sees no positions, only content
    /// ([`RopeFrequencies::unrotated`]).
    Unrotated,
}

/// The RoPE frequencies of each kind of layer a model has, made once per model: a backend
/// makes each kind's sines and cosines once and gives every layer those its [`LayerRope`]
/// names. The file's own ([`LayerRope::Main`]) are always there, first; with LongRoPE they
/// are its short factors', and [`LayerRopes::for_context`] takes the long ones' for a
/// context longer than the original.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerRopes {
    kinds: Vec<(LayerRope, RopeFrequencies)>,
    long: Option<LongContext>,
}

/// LongRoPE's frequencies for a context past the one the model was first trained at.
#[derive(Debug, Clone, PartialEq)]
pub struct LongContext {
    /// The file's frequencies under its long factors (`rope_factors_long.weight`).
    pub freqs: RopeFrequencies,
    /// The original context (`rope.scaling.original_context_length`): a context of more
    /// positions takes [`LongContext::freqs`] (llama.cpp's choice, by the context's size).
    pub original: usize,
}

impl LayerRopes {
    /// The file's frequencies `main`, and those of every other kind among `cfg`'s layers.
    pub fn new(cfg: &Config, main: RopeFrequencies) -> Self {
        let mut kinds = vec![(LayerRope::Main, main)];
        for layer in 0..cfg.n_layers {
            let kind = cfg.layer_rope(layer);
            let freqs = match kind {
                LayerRope::Main => continue,
                LayerRope::Sliding => RopeFrequencies::plain(
                    cfg.head_dim,
                    cfg.rope_dims,
                    cfg.architecture.local_rope_base().unwrap_or(GEMMA3_LOCAL_ROPE_BASE),
                ),
                LayerRope::Unrotated => RopeFrequencies::unrotated(cfg.head_dim),
            };
            if kinds.iter().all(|(k, _)| *k != kind) {
                kinds.push((kind, freqs));
            }
        }
        LayerRopes { kinds, long: None }
    }

    /// With LongRoPE's frequencies for a context past the original one.
    pub fn with_long_context(self, long: LongContext) -> Self {
        LayerRopes { long: Some(long), ..self }
    }

    /// The frequencies for a context of `capacity` positions: the long ones where the model
    /// has LongRoPE and `capacity` is past its original context, else these.
    pub fn for_context(&self, capacity: usize) -> LayerRopes {
        let mut ropes = self.clone();
        if let Some(long) = ropes.long.take() {
            if capacity > long.original {
                ropes.kinds[0].1 = long.freqs;
            }
        }
        ropes
    }

    /// Each kind with its frequencies, [`LayerRope::Main`] first.
    pub fn kinds(&self) -> &[(LayerRope, RopeFrequencies)] {
        &self.kinds
    }

    /// The file's own frequencies.
    pub fn main(&self) -> &RopeFrequencies {
        &self.kinds[0].1
    }
}

/// The order that brings a head's split-half pairs next to each other: new element `2i` is old
/// element `i`, new `2i + 1` is old `i + rope_dims / 2`, for `2i < rope_dims`, and the
/// elements past the first `rope_dims`, which are not turned, keep their places; for every
/// head of `n_heads`. Applied to the rows of W_q and W_k (and their biases and head-norm
/// gains), it turns a "NEOX" model into an adjacent-pair one with the same attention: q and k
/// are permuted alike, so every q.k is unchanged, and V and the output projection are
/// untouched.
pub fn halves_to_pairs(head_dim: usize, rope_dims: usize, n_heads: usize) -> Vec<usize> {
    let rotated = rope_dims.min(head_dim);
    let half = rotated / 2;
    let old = move |j: usize| {
        if j >= rotated {
            j
        } else if j.is_multiple_of(2) {
            j / 2
        } else {
            half + j / 2
        }
    };
    (0..n_heads).flat_map(|h| (0..head_dim).map(move |j| h * head_dim + old(j))).collect()
}

/// `values` reordered: element `i` of the result is `values[order[i]]`.
pub fn permute<T: Copy>(values: &[T], order: &[usize]) -> Vec<T> {
    order.iter().map(|&i| values[i]).collect()
}

/// A 2-D tensor with its rows reordered (`order[i]` is the old index of new row `i`), in its
/// own storage type: each row is whole blocks, so no value is requantized.
pub fn permute_rows(t: &QTensor, order: &[usize]) -> Result<QTensor, ModelError> {
    let fail = |e: candle_core::Error| ModelError::Malformed(format!("cannot reorder the rows of a {:?} tensor: {e}", t.shape()));
    let (rows, _) = t.shape().dims2().map_err(fail)?;
    if order.len() != rows {
        return Err(ModelError::Malformed(format!("{} rows to reorder, {} in the tensor", order.len(), rows)));
    }
    let data = t.data().map_err(fail)?;
    let row_bytes = data.len() / rows.max(1);
    let mut out = Vec::with_capacity(data.len());
    for &i in order {
        out.extend_from_slice(&data[i * row_bytes..][..row_bytes]);
    }
    let storage = QStorage::from_data(Cow::Owned(out), &Device::Cpu, t.dtype()).map_err(fail)?;
    QTensor::new(storage, t.shape().clone()).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_rope_pairs_the_turned_halves_and_leaves_the_rest_in_place() {
        // Heads of 8 turning their first 4 elements (pairs (0, 2) and (1, 3) as halves), twice.
        assert_eq!(halves_to_pairs(8, 4, 2), vec![0, 2, 1, 3, 4, 5, 6, 7, 8, 10, 9, 11, 12, 13, 14, 15]);
        assert_eq!(halves_to_pairs(4, 4, 1), vec![0, 2, 1, 3]);
    }

    #[test]
    fn pairs_past_the_turned_ones_pass_through_unscaled() {
        let freqs = RopeFrequencies::new(8, 4, 10_000.0, 1.0, Some(&[2.0, 3.0])).with_magnitude(1.5);
        assert_eq!(freqs.pairs(), 4);
        // The turned pairs span the first 4 elements: pair 1's exponent is -2/4, not -2/8.
        assert!((freqs.angle(1, 1) - 10_000f64.powf(-0.5) / 3.0).abs() < 1e-15);
        let (sin, cos) = freqs.sin_cos(7, 1);
        assert!((sin.hypot(cos) - 1.5).abs() < 1e-12, "a turned pair is scaled by the magnitude");
        for pos in [0, 1, 1000] {
            assert_eq!(freqs.sin_cos(pos, 2), (0.0, 1.0));
            assert_eq!(freqs.sin_cos(pos, 3), (0.0, 1.0));
        }
    }
}

//! Rotary position embedding, as the model file asks for it: the frequency of each pair
//! (plain, linearly scaled, YaRN-scaled, or with Llama 3's per-pair factors), over the whole head or its
//! first `rope.dimension_count` elements, which frequencies each layer turns by
//! ([`LayerRope`], [`LayerRopes`]), and the one pair layout the kernels turn (adjacent
//! elements), to which files that pair split halves are brought at load.

use std::borrow::Cow;

use candle_core::quantized::{QStorage, QTensor};
use candle_core::Device;
use serde::Serialize;

use super::architecture::SectionLayout;
use super::config::Config;
use crate::error::ModelError;

/// The angular frequency of each RoPE pair of a head: pair `i` of a token at position `p` turns
/// by `p * inv_freq[i]`, with `inv_freq[i] = base^(-2i / rope_dims) / (scale * factor[i])`
/// (llama.cpp's `ggml_rope_ext`; [`RopeFrequencies::yarn`] for YaRN) for the first `rope_dims / 2` pairs; the
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
    /// factor (`rope.scaling.attn_factor`, llama.cpp's `mscale`), YaRN's ([`Yarn::magnitude`]),
    /// 1 elsewhere.
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

    /// YaRN ("NTK-by-parts" interpolation, llama.cpp's `ggml_rope_yarn`): each pair's
    /// frequency is a blend of the unscaled one (extrapolated) and that divided by the factor
    /// (interpolated), by a ramp over the pairs that keeps the fast ones (those turning more
    /// than [`YARN_BETA_FAST`] times over the original context) unscaled and scales the slow
    /// ones (under [`YARN_BETA_SLOW`] turns) fully; every cosine and sine is multiplied by
    /// [`Yarn::magnitude`]. `factors` as in [`RopeFrequencies::new`].
    pub fn yarn(head_dim: usize, rope_dims: usize, base: f32, factors: Option<&[f32]>, yarn: &Yarn) -> Self {
        let unscaled = Self::new(head_dim, rope_dims, base, 1.0, factors);
        let (low, high) = yarn.ramp_ends(2 * unscaled.rotated, base);
        let scale = 1.0 / f64::from(yarn.factor);
        let inv_freq = unscaled
            .inv_freq
            .iter()
            .enumerate()
            .map(|(i, &extrapolated)| {
                // The ramp: 1 at the fast pairs (kept), 0 at the slow ones (interpolated).
                let y = (i as f64 - low) / (high - low).max(0.001);
                let mix = 1.0 - y.clamp(0.0, 1.0);
                extrapolated * (scale * (1.0 - mix) + mix)
            })
            .collect();
        RopeFrequencies { inv_freq, rotated: unscaled.rotated, magnitude: f64::from(yarn.magnitude()) }
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

    /// The same frequencies with the pairs that multimodal RoPE turns by its fourth position
    /// stream held still ([`RopeSections::turns_pair`]): a text token's fourth position is 0
    /// in llama.cpp, so their angle is 0 (their cosine and sine still carry the magnitude, as
    /// llama.cpp's `rope_yarn` gives them).
    pub fn with_sections(self, sections: &RopeSections) -> Self {
        let inv_freq = self.inv_freq.iter().enumerate().map(|(i, &f)| if sections.turns_pair(i) { f } else { 0.0 }).collect();
        RopeFrequencies { inv_freq, ..self }
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

/// YaRN's ramp ends as llama.cpp takes them for the architectures tokenscope runs (it reads
/// no `rope.scaling.yarn_beta_*` keys for them; a file giving others is refused): pairs
/// turning more than 32 times over the original context keep their frequency, pairs turning
/// fewer than once take the factor whole.
pub const YARN_BETA_FAST: f32 = 32.0;
/// See [`YARN_BETA_FAST`].
pub const YARN_BETA_SLOW: f32 = 1.0;

/// YaRN as a file asks for it (`rope.scaling.type = yarn`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct Yarn {
    /// How far the context is stretched (`rope.scaling.factor`, from 1 to 1024).
    pub factor: f32,
    /// The context the model was first trained at (`rope.scaling.original_context_length`,
    /// else the model's context).
    pub original_context: usize,
    /// The file's attention factor (`rope.scaling.attn_factor`, 1 if absent), multiplied into
    /// [`Yarn::magnitude`].
    pub attn_factor: f32,
    /// The magnitude correction's log multiplier (`rope.scaling.yarn_log_multiplier`,
    /// Hugging Face's `mscale_all_dim`; 0 where the file has none or the architecture's
    /// llama.cpp reads none: [`Architecture::reads_yarn_log_multiplier`](super::Architecture::reads_yarn_log_multiplier)).
    pub log_multiplier: f32,
}

impl Yarn {
    /// What every rotated pair's cosine and sine is multiplied by, as llama.cpp computes it:
    /// `1 + 0.1 ln(factor)` (the attention's temperature correction), divided by `1 + 0.1 m
    /// ln(factor)` where the file gives a log multiplier `m` (Ministral 3's 1 cancels it),
    /// times the file's attention factor.
    pub fn magnitude(&self) -> f32 {
        let mscale = |m: f32| 1.0 + 0.1 * m * self.factor.ln();
        let correction = if self.log_multiplier == 0.0 { mscale(1.0) } else { mscale(1.0) / mscale(self.log_multiplier) };
        correction * self.attn_factor
    }

    /// The ramp's ends, in pairs, over heads turning `rope_dims` elements at base `base`:
    /// the pair that turns [`YARN_BETA_FAST`] times over the original context (rounded down)
    /// and the one that turns [`YARN_BETA_SLOW`] times (rounded up), within `0..rope_dims` as
    /// llama.cpp clamps them (`ggml_rope_yarn_corr_dims`, in f32 like it).
    fn ramp_ends(&self, rope_dims: usize, base: f32) -> (f64, f64) {
        let dims = rope_dims as f32;
        // The pair index at which a pair turns `turns` times over the original context.
        let pair_turning =
            |turns: f32| dims * (self.original_context as f32 / (turns * 2.0 * std::f32::consts::PI)).ln() / (2.0 * base.ln());
        let low = pair_turning(YARN_BETA_FAST).floor().max(0.0);
        let high = pair_turning(YARN_BETA_SLOW).ceil().min(dims - 1.0);
        (f64::from(low), f64::from(high))
    }
}

/// Multimodal RoPE's sections (`rope.dimension_sections`, Qwen2-VL's `[16, 24, 24, 0]`,
/// Qwen3-VL's `[24, 20, 20, 0]`, GLM-4.1V's `[8, 12, 12, 0]`): how many of a head's pairs each of four position streams
/// (time, height, width, a fourth) turns, laid out as the family lays them. For text every
/// token's first three positions are its place in the sequence and its fourth is 0 (llama.cpp's
/// `llm_graph_input_pos`), so a pair turns as plain RoPE turns it unless the fourth stream
/// owns it. Pair `i` sits at sector `i % sum(sections)` (llama.cpp's `ggml_mrope_cache_init`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct RopeSections {
    /// Pairs per stream: time, height, width, the fourth.
    pub sections: [usize; 4],
    /// Contiguous (Qwen2-VL's) or interleaved (Qwen3-VL's).
    pub layout: SectionLayout,
}

impl RopeSections {
    /// Whether pair `i` of a head turns by a text token's position: its sector belongs to
    /// the time, height or width stream, not to the fourth (whose position is 0).
    pub fn turns_pair(&self, i: usize) -> bool {
        let [t, h, w, _] = self.sections;
        let sector = i % self.sections.iter().sum::<usize>().max(1);
        if self.layout == SectionLayout::Interleaved {
            // Time, height, width in turn, each for as long as its section lasts.
            match sector % 3 {
                0 => sector < 3 * t,
                1 => sector < 3 * h,
                _ => sector < 3 * w,
            }
        } else {
            sector < t + h + w
        }
    }
}

/// Which RoPE frequencies a layer turns its queries and keys by ([`Config::layer_rope`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerRope {
    /// The file's: `rope.freq_base` with its scaling (linear or YaRN) and Llama 3's per-pair
    /// factors.
    Main,
    /// A sliding-window layer's own, plain at [`Config::sliding_rope_base`]: Gemma 3's base of
    /// [`GEMMA3_LOCAL_ROPE_BASE`](super::architecture::GEMMA3_LOCAL_ROPE_BASE), OLMo 3's
    /// file base without YaRN.
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
                LayerRope::Sliding => RopeFrequencies::plain(cfg.head_dim, cfg.rope_dims, cfg.sliding_rope_base.unwrap_or(cfg.rope_base)),
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
    fn text_positions_still_only_the_fourth_streams_pairs() {
        // Qwen2-VL's sections cover its 64 pairs with the first three streams: all turn.
        let qwen2vl = RopeSections { sections: [16, 24, 24, 0], layout: SectionLayout::Contiguous };
        assert!((0..64).all(|i| qwen2vl.turns_pair(i)));
        // Qwen3-VL's interleave runs height and width out at sector 60: 61 and 62 fall to the
        // fourth stream in llama.cpp, 60 and 63 stay time's.
        let qwen3vl = RopeSections { sections: [24, 20, 20, 0], layout: SectionLayout::Interleaved };
        let still: Vec<usize> = (0..64).filter(|&i| !qwen3vl.turns_pair(i)).collect();
        assert_eq!(still, [61, 62]);
        // A fourth section of its own, past which the sectors start again.
        let four = RopeSections { sections: [1, 1, 1, 1], layout: SectionLayout::Contiguous };
        assert_eq!((0..8).map(|i| four.turns_pair(i)).collect::<Vec<_>>(), [true, true, true, false, true, true, true, false]);
        let freqs = RopeFrequencies::plain(16, 16, 10.0).with_magnitude(1.5).with_sections(&four);
        assert_eq!(freqs.sin_cos(5, 3), (0.0, 1.5));
        assert_eq!(freqs.sin_cos(5, 2), RopeFrequencies::plain(16, 16, 10.0).with_magnitude(1.5).sin_cos(5, 2));
    }

    #[test]
    fn partial_rope_pairs_the_turned_halves_and_leaves_the_rest_in_place() {
        // Heads of 8 turning their first 4 elements (pairs (0, 2) and (1, 3) as halves), twice.
        assert_eq!(halves_to_pairs(8, 4, 2), vec![0, 2, 1, 3, 4, 5, 6, 7, 8, 10, 9, 11, 12, 13, 14, 15]);
        assert_eq!(halves_to_pairs(4, 4, 1), vec![0, 2, 1, 3]);
    }

    #[test]
    fn yarn_keeps_the_fast_pairs_stretches_the_slow_ones_and_blends_between() {
        // Heads of 32 at base 10,000 over an original 4096: the ramp's ends are pairs
        // floor(32 ln(4096 / 64 pi) / 2 ln 10^4) = 5 and ceil(32 ln(4096 / 2 pi) / 2 ln 10^4) = 12.
        let yarn = Yarn { factor: 4.0, original_context: 4096, attn_factor: 1.1, log_multiplier: 0.0 };
        assert_eq!(yarn.ramp_ends(32, 10_000.0), (5.0, 12.0));
        let plain = RopeFrequencies::plain(32, 32, 10_000.0);
        let scaled = RopeFrequencies::yarn(32, 32, 10_000.0, None, &yarn);
        for i in 0..16 {
            let ratio = scaled.angle(1, i) / plain.angle(1, i);
            match i {
                0..=5 => assert!((ratio - 1.0).abs() < 1e-12, "pair {i} keeps its frequency: {ratio}"),
                12.. => assert!((ratio - 0.25).abs() < 1e-12, "pair {i} is stretched by the factor: {ratio}"),
                // Between, linearly in the pair: pair 5 + k takes k / 7 of the stretch.
                _ => assert!((ratio - (1.0 - (i - 5) as f64 / 7.0 * 0.75)).abs() < 1e-12, "pair {i}: {ratio}"),
            }
        }
        let (sin, cos) = scaled.sin_cos(9, 3);
        assert!((sin.hypot(cos) - (1.0 + 0.1 * 4f64.ln()) * 1.1).abs() < 1e-6, "the magnitude");
        // A factor of 1 is plain RoPE.
        let unstretched = RopeFrequencies::yarn(
            32,
            32,
            10_000.0,
            None,
            &Yarn { factor: 1.0, original_context: 4096, attn_factor: 1.0, log_multiplier: 0.0 },
        );
        assert_eq!(unstretched, plain);
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

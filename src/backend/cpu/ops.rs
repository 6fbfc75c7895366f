//! The transformer's elementwise and attention operations on plain slices: the CPU forward
//! pass uses them, and they are the reference twins of the GPU kernels.

use super::cache_float::CacheFloat;
use crate::lanes::softmax_in_place;
use crate::model::alibi::alibi_bias;
use crate::model::architecture::Activation;
use crate::model::{Norm, RopeFrequencies};

/// RMSNorm of one row: `out[i] = x[i] / sqrt(mean(x^2) + eps) * gain[i]`.
/// Shapes: `x`, `gain`, `out`: `[dim]`. The mean is accumulated in f64.
pub fn rmsnorm(x: &[f32], gain: &[f32], eps: f32, out: &mut [f32]) {
    let ss: f64 = x.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / x.len() as f64;
    let scale = (1.0 / (ss + eps as f64).sqrt()) as f32;
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(gain) {
        *o = v * scale * g;
    }
}

/// LayerNorm of one row: `out[i] = (x[i] - mean(x)) / sqrt(var(x) + eps) * gain[i] + bias[i]`,
/// `var` the mean of the squares of `x - mean(x)` (StableLM's norms). Shapes: `x`, `gain`,
/// `bias`, `out`: `[dim]`. The mean and the variance are accumulated in f64, the variance
/// from the centred values (no cancellation however far the row sits from 0).
pub fn layer_norm(x: &[f32], gain: &[f32], bias: &[f32], eps: f32, out: &mut [f32]) {
    let n = x.len() as f64;
    let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
    let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
    let scale = 1.0 / (var + eps as f64).sqrt();
    for (((o, &v), &g), &b) in out.iter_mut().zip(x).zip(gain).zip(bias) {
        *o = ((v as f64 - mean) * scale) as f32 * g + b;
    }
}

/// Each row of `x` (`[n, dim]`) through `norm` (an RMSNorm, or with a bias a LayerNorm) into
/// `out` (`[n, dim]`).
pub fn norm_rows(x: &[f32], norm: &Norm, eps: f32, out: &mut [f32]) {
    let d = norm.gain.len();
    for (row, out) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        match &norm.bias {
            Some(bias) => layer_norm(row, &norm.gain, bias, eps, out),
            None => rmsnorm(row, &norm.gain, eps, out),
        }
    }
}

/// A sublayer's input: each row of `x` (`[n, dim]`) through its norm into `out` (`[n,
/// dim]`, [`norm_rows`]), or, without one (no pre-norm: OLMo 2), `x` as it is.
pub fn pre_norm(x: &[f32], norm: Option<&Norm>, eps: f32, out: &mut [f32]) {
    match norm {
        Some(norm) => norm_rows(x, norm, eps, out),
        None => out.copy_from_slice(x),
    }
}

/// RMSNorm of every head of `x` (`[n_heads * head_dim]`) in place, with one `gain`
/// (`[head_dim]`) for all of them: Qwen3's norm of q and k before RoPE; with a gain as wide
/// as a token's row (`[n_heads * head_dim]`), OLMo 2's norm of the whole of q or k.
pub fn rmsnorm_heads(x: &mut [f32], gain: &[f32], eps: f32) {
    let mut head = vec![0.0f32; gain.len()];
    for chunk in x.chunks_exact_mut(gain.len()) {
        head.copy_from_slice(chunk);
        rmsnorm(&head, gain, eps, chunk);
    }
}

/// Rotary position embedding on adjacent pairs (llama.cpp "NORM" mode; a split-half model's
/// rows were made adjacent at load), in place. Shape: `x`: `[n_heads * head_dim]`; pair
/// `(x[2i], x[2i+1])` of each head turns by `freqs.angle(pos, i)`. Angles are in f64.
pub fn rope(x: &mut [f32], freqs: &RopeFrequencies, pos: usize) {
    RopeAngles::new(freqs, pos).apply(x);
}

/// The sines and cosines of one position's RoPE angles, `[head_dim / 2]` pairs, computed once
/// (in f64) for every head of the queries and keys at that position.
pub struct RopeAngles {
    sin_cos: Vec<(f64, f64)>,
}

impl RopeAngles {
    /// Pair `i` turns by `freqs.angle(pos, i)`.
    pub fn new(freqs: &RopeFrequencies, pos: usize) -> Self {
        let sin_cos = (0..freqs.pairs()).map(|i| freqs.sin_cos(pos, i)).collect();
        RopeAngles { sin_cos }
    }

    /// Turns every head of `x` (`[n_heads * head_dim]`) in place.
    pub fn apply(&self, x: &mut [f32]) {
        if self.sin_cos.is_empty() {
            return;
        }
        for head in x.chunks_exact_mut(self.sin_cos.len() * 2) {
            for (pair, &(sin, cos)) in head.chunks_exact_mut(2).zip(&self.sin_cos) {
                let (a, b) = (pair[0] as f64, pair[1] as f64);
                pair[0] = (a * cos - b * sin) as f32;
                pair[1] = (a * sin + b * cos) as f32;
            }
        }
    }
}

/// Attention of one query head over the cached positions `first..n_pos` of its KV head
/// (`first` is 0 but in a sliding-window layer).
///
/// Shapes: `q`: `[head_dim]`; `keys`, `values`: `[n_pos, kv_stride]`, the head's slice
/// starting at `kv_offset`; `scores`: scratch `[>= n_pos]`; `out`: `[head_dim]`.
/// `out = softmax(score_j) . v_j` over `j` in `first..n_pos`, with
/// `score_j = capped(scale q . k_j) - slope (n_pos - 1 - j)` (`scale` `1 / sqrt(head_dim)` but
/// in Granite; `slope` ALiBi's, BLOOM's, else 0), max-subtracted for stability.
pub struct AttentionInput<'a> {
    /// Query vector of one head, `[head_dim]`.
    pub q: &'a [f32],
    /// Cached keys of one layer, `[n_pos, kv_stride]` (the CPU forward pass's cache holds them
    /// in blocks, as `f32`s or half floats, which
    /// [`attend_heads`](super::grouped_attention::attend_heads) reads, and leaves this empty).
    pub keys: &'a [f32],
    /// Cached values of one layer, `[n_pos, kv_stride]` (empty in the CPU forward pass, as
    /// `keys`).
    pub values: &'a [f32],
    /// Row width of `keys`/`values` (`n_kv_heads * head_dim`).
    pub kv_stride: usize,
    /// Offset of this head's KV head inside a row (`kv_head * head_dim`).
    pub kv_offset: usize,
    /// Number of positions attended to (causal: the query's position + 1).
    pub n_pos: usize,
    /// The first position attended to: 0, or in a sliding-window layer the oldest position
    /// inside the window (`n_pos - window`).
    pub first: usize,
    /// What each `q . k_j` is multiplied by (`Config::attention_scale`: `1 / sqrt(head_dim)`,
    /// or Granite's own).
    pub scale: f32,
    /// The cap of every scaled score ([`capped`]; Gemma 2's `attn_logit_softcapping`), or
    /// none.
    pub softcap: Option<f32>,
    /// ALiBi's slope for this head ([`alibi_slope`](crate::model::alibi::alibi_slope):
    /// each score gains `-slope` times the key's distance back from the query), 0 without.
    pub alibi_slope: f32,
}

/// Position `j`'s score for the query of `a`: `capped(scale q . k_j) - slope (n_pos - 1 - j)`.
fn score(a: &AttentionInput, j: usize) -> f32 {
    score_of_dot(a, key_dot(a, j), j)
}

/// `q . k_j` for the query of `a` and position `j`'s key.
fn key_dot(a: &AttentionInput, j: usize) -> f32 {
    dot(a.q, &a.keys[j * a.kv_stride + a.kv_offset..][..a.q.len()])
}

/// Position `j`'s score from its product `q . k_j`.
fn score_of_dot(a: &AttentionInput, dot: f32, j: usize) -> f32 {
    capped(dot * a.scale, a.softcap) + alibi_bias(a.alibi_slope, a.n_pos - 1 - j)
}

/// `x` capped at `cap`: `cap * tanh(x / cap)`, which keeps small values and bends large ones
/// towards +-cap (Gemma 2's softcap of its attention scores and its logits); `x` itself
/// without a cap. The CPU twin of softcap.wgsl.
pub fn capped(x: f32, cap: Option<f32>) -> f32 {
    cap.map_or(x, |c| c * (x / c).tanh())
}

/// The LM head's products made the model's logits, in place: multiplied by `scale` (above 0:
/// Cohere's `logit_scale`, Granite's reciprocal, [`Config::logit_scale`](crate::model::Config::logit_scale);
/// 1 leaves them) and then capped at `cap` ([`capped`]; Gemma 2's `final_logit_softcapping`;
/// none leaves them). Both keep the logits' order, so a GPU's argmax may rank the products
/// as they are.
pub fn finish_logits(logits: &mut [f32], scale: f32, cap: Option<f32>) {
    if scale != 1.0 {
        logits.iter_mut().for_each(|z| *z *= scale);
    }
    if cap.is_some() {
        logits.iter_mut().for_each(|z| *z = capped(*z, cap));
    }
}

/// `x += y`, elementwise.
pub fn add(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// `x += scale * y`, elementwise: a sublayer's output joining the residual stream (`scale`
/// Granite's `residual_scale`, else 1, which adds `y` exactly).
pub fn add_scaled(x: &mut [f32], y: &[f32], scale: f32) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += scale * b;
    }
}

/// Computes one head's attention output into `out`, leaving its weights in `scores[..n_pos]`
/// (0 before `first`).
pub fn attention(a: &AttentionInput, scores: &mut [f32], out: &mut [f32]) {
    attention_weights(a, scores);
    let v = HeadValues { values: a.values, kv_stride: a.kv_stride, kv_offset: a.kv_offset, first: a.first };
    weighted_sum(&v, &scores[a.first..a.n_pos], out);
}

/// `out = sum_j weights[j - first] v_j`, the sum over one head's positions of their values
/// (`v`, as stored) by their weights, in position order.
pub fn weighted_sum<T: CacheFloat>(v: &HeadValues<T>, weights: &[f32], out: &mut [f32]) {
    // The common head sizes with the sums in registers; the same additions in the same order
    // either way.
    match out.len() {
        64 => weighted_sums::<T, 1, 64>(v, [weights], &mut [out]),
        128 => weighted_sums::<T, 1, 128>(v, [weights], &mut [out]),
        hd => {
            out.fill(0.0);
            for (j, &w) in (v.first..).zip(weights) {
                let v = &v.values[j * v.kv_stride + v.kv_offset..][..hd];
                for (o, &x) in out.iter_mut().zip(v) {
                    *o += w * x.to_f32();
                }
            }
        }
    }
}

/// One KV head's cached values from position `first` on: position `j`'s are
/// `values[j * kv_stride + kv_offset..][..head_dim]`, each stored as `T` ([`CacheFloat`]).
pub struct HeadValues<'a, T = f32> {
    /// Cached values of one layer, `[n_pos, kv_stride]`.
    pub values: &'a [T],
    /// Row width of `values`.
    pub kv_stride: usize,
    /// Offset of the KV head inside a row.
    pub kv_offset: usize,
    /// Position of each weight list's first weight.
    pub first: usize,
}

/// `outs[h] = sum_j weights[h][j - first] v_j` for `H` query heads of one KV head (`v`), each
/// sum in position order, `W` of the head's columns at a time summed in a local array (kept
/// in vector registers), each position's `W` values loaded (and widened to `f32`) once for the
/// `H` heads.
/// Shapes: `weights[h]`: `[positions]`; `outs[h]`: `[head_dim]`, `head_dim` a multiple of `W`.
pub fn weighted_sums<T: CacheFloat, const H: usize, const W: usize>(v: &HeadValues<T>, weights: [&[f32]; H], outs: &mut [&mut [f32]; H]) {
    let hd = outs[0].len();
    debug_assert!(hd.is_multiple_of(W) && weights.iter().all(|w| w.len() == weights[0].len()));
    let positions = weights[0].len();
    let weights: [&[f32]; H] = std::array::from_fn(|h| &weights[h][..positions]);
    for column in (0..hd).step_by(W) {
        let mut sums = [[0f32; W]; H];
        #[allow(clippy::needless_range_loop)] // the H lists read at the same index
        for i in 0..positions {
            let at = (v.first + i) * v.kv_stride + v.kv_offset + column;
            let row: [f32; W] = T::widen(v.values[at..at + W].try_into().expect("W values"));
            let w: [f32; H] = std::array::from_fn(|h| weights[h][i]);
            for (sum, w) in sums.iter_mut().zip(w) {
                axpy(sum, w, &row);
            }
        }
        for h in 0..H {
            outs[h][column..column + W].copy_from_slice(&sums[h]);
        }
    }
}

/// `sum += w * row`, elementwise.
#[inline(always)]
fn axpy<const W: usize>(sum: &mut [f32; W], w: f32, row: &[f32; W]) {
    for (s, &x) in sum.iter_mut().zip(row) {
        *s += w * x;
    }
}

/// One head's attention weights over its positions into `weights[..n_pos]`:
/// `softmax(score_j)` ([`AttentionInput`]'s) over `first..n_pos`, max-subtracted for stability
/// (they sum to 1), and 0 before `first`.
pub fn attention_weights(a: &AttentionInput, weights: &mut [f32]) {
    key_dots(a, weights);
    weights_of_dots(a, weights);
}

/// `dots[j] = q . k_j` for `j` in `first..n_pos`.
fn key_dots(a: &AttentionInput, dots: &mut [f32]) {
    for (j, s) in (a.first..a.n_pos).zip(&mut dots[a.first..]) {
        *s = key_dot(a, j);
    }
}

/// [`attention_weights`] from the products `weights[first..n_pos]` (each `q . k_j` as [`dot`]
/// gives it), in place.
pub fn weights_of_dots(a: &AttentionInput, weights: &mut [f32]) {
    let (outside, weights) = weights[..a.n_pos].split_at_mut(a.first);
    outside.fill(0.0);
    if a.softcap.is_none() && a.alibi_slope == 0.0 {
        // Neither a cap nor a bias: the scaled product, as `score_of_dot` gives it.
        weights.iter_mut().for_each(|s| *s *= a.scale);
    } else {
        for (j, s) in (a.first..).zip(weights.iter_mut()) {
            *s = score_of_dot(a, *s, j);
        }
    }
    softmax_in_place(weights);
}

/// Softmax statistics of one head over a chunk of positions (split-K attention).
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkStats {
    /// Largest scaled (and capped) score `scale q.k` in the chunk.
    pub max: f32,
    /// `sum_j exp(s_j - max)`.
    pub sum: f32,
    /// `sum_j exp(s_j - max) v_j`, `[head_dim]` (not yet divided by `sum`).
    pub out: Vec<f32>,
}

/// One head's statistics over positions `range` (the CPU twin of attention_partial.wgsl).
pub fn attention_chunk(a: &AttentionInput, range: std::ops::Range<usize>) -> ChunkStats {
    let hd = a.q.len();
    let scores: Vec<f32> = range.clone().map(|j| score(a, j)).collect();
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut out = vec![0.0; hd];
    let mut sum = 0.0;
    for (j, s) in range.zip(scores) {
        let e = (s - max).exp();
        sum += e;
        for (o, &v) in out.iter_mut().zip(&a.values[j * a.kv_stride + a.kv_offset..][..hd]) {
            *o += e * v;
        }
    }
    ChunkStats { max, sum, out }
}

/// Merges chunk statistics into the attention output (the CPU twin of
/// attention_merge.wgsl): `out = sum_c e^(m_c - M) o_c / sum_c e^(m_c - M) l_c`.
pub fn combine_chunks(chunks: &[ChunkStats], out: &mut [f32]) {
    let m = chunks.iter().map(|c| c.max).fold(f32::NEG_INFINITY, f32::max);
    let den: f32 = chunks.iter().map(|c| (c.max - m).exp() * c.sum).sum();
    for (d, o) in out.iter_mut().enumerate() {
        *o = chunks.iter().map(|c| (c.max - m).exp() * c.out[d]).sum::<f32>() / den;
    }
}

/// `silu(x) = x / (1 + e^-x)`.
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// GELU's tanh form, `gelu(x) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))` (Gemma's
/// `gelu_pytorch_tanh`, GPT-2's `gelu_new`).
pub fn gelu(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x)).tanh())
}

/// The squared ReLU, `relu_squared(x) = max(x, 0)^2` (Arcee's and Nemotron's ungated
/// feed-forward).
pub fn relu_squared(x: f32) -> f32 {
    let r = x.max(0.0);
    r * r
}

/// SwiGLU in place: `gate[i] = silu(gate[i]) * up[i]`.
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = silu(*g) * u;
    }
}

/// GeGLU in place: `gate[i] = gelu(gate[i]) * up[i]`.
pub fn geglu(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = gelu(*g) * u;
    }
}

/// The activation function `activation` names.
pub fn activation_fn(activation: Activation) -> fn(f32) -> f32 {
    match activation {
        Activation::Silu => silu,
        Activation::GeluTanh => gelu,
        Activation::ReluSquared => relu_squared,
    }
}

/// The gated feed-forward's activation in place, `gate = act(gate) * up`: [`swiglu`],
/// [`geglu`], or any other activation's gate.
pub fn gated(activation: Activation, gate: &mut [f32], up: &[f32]) {
    match activation {
        Activation::Silu => swiglu(gate, up),
        Activation::GeluTanh => geglu(gate, up),
        other => {
            let act = activation_fn(other);
            gate.iter_mut().zip(up).for_each(|(g, &u)| *g = act(*g) * u);
        }
    }
}

/// The ungated feed-forward's activation in place, `x = act(x)` (GPT-2's GELU, Arcee's and
/// Nemotron's squared ReLU).
pub fn activate(activation: Activation, x: &mut [f32]) {
    let act = activation_fn(activation);
    x.iter_mut().for_each(|v| *v = act(*v));
}

/// Adds `bias` (`[width]`) to every row of `x` (`[n, width]`).
pub fn add_rows(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        add(row, bias);
    }
}

/// Every element of `x` clamped to `[-limit, limit]` (OLMo 1.7's clamp of q, k and v,
/// [`Config::clamp_kqv`](crate::model::Config::clamp_kqv)); rope_pair.wgsl's clamp is its twin.
pub fn clamp_all(x: &mut [f32], limit: f32) {
    x.iter_mut().for_each(|v| *v = v.clamp(-limit, limit));
}

/// A sublayer's output RMS-normed and added, in place: each row of `x` (`[n, dim]`) gets
/// `rmsnorm(y_row) * gain` (`y` `[n, dim]`, `gain` `[dim]`; the mean in f64 as [`rmsnorm`]'s):
/// Gemma 3's post norms, and norm_add.wgsl's twin.
pub fn add_normed(x: &mut [f32], y: &[f32], gain: &[f32], eps: f32) {
    let d = gain.len();
    for (x, y) in x.chunks_exact_mut(d).zip(y.chunks_exact(d)) {
        let ss: f64 = y.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / d as f64;
        let scale = (1.0 / (ss + eps as f64).sqrt()) as f32;
        for ((a, &v), &g) in x.iter_mut().zip(y).zip(gain) {
            *a += v * scale * g;
        }
    }
}

/// Dot product with 16 independent f32 accumulators (vectorizes without reassociation flags).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    const W: usize = 16;
    let mut acc = [0.0f32; W];
    let (ca, cb) = (a.chunks_exact(W), b.chunks_exact(W));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..W {
            acc[i] += x[i] * y[i];
        }
    }
    let mut tail = 0.0f32;
    for (x, y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geglu_is_gelus_tanh_form_times_up() {
        // GELU's tanh form at a few points, computed in f64 elsewhere (Python's math.tanh).
        let want = [(1.0, 0.841_192), (-1.0, -0.158_808), (2.0, 1.954_598), (-3.0, -0.003_637_39), (0.5, 0.345_714)];
        let mut gate: Vec<f32> = want.iter().map(|&(x, _)| x).collect();
        geglu(&mut gate, &[2.0; 5]);
        for (&(x, y), got) in want.iter().zip(&gate) {
            assert!((got - 2.0 * y).abs() <= 2e-6, "gelu({x}) * 2 = {got}, not {}", 2.0 * y);
        }
    }

    #[test]
    fn the_squared_relu_squares_the_positive_part() {
        let mut x = vec![-2.0, -0.0, 0.5, 3.0, -1e-30];
        activate(Activation::ReluSquared, &mut x);
        assert_eq!(x, [0.0, 0.0, 0.25, 9.0, 0.0]);
        // As a gate (no family gates it; the form is the same for every activation).
        let mut gate = vec![-1.0, 2.0];
        gated(Activation::ReluSquared, &mut gate, &[5.0, 0.5]);
        assert_eq!(gate, [0.0, 2.0]);
    }

    /// The one head of `q` over every cached position of `keys` and `values` (rows as wide as
    /// `q`), scores scaled by `scale`, uncapped and unbiased.
    fn one_head<'a>(q: &'a [f32], keys: &'a [f32], values: &'a [f32], scale: f32) -> AttentionInput<'a> {
        let hd = q.len();
        AttentionInput {
            q,
            keys,
            values,
            kv_stride: hd,
            kv_offset: 0,
            n_pos: keys.len() / hd,
            first: 0,
            scale,
            softcap: None,
            alibi_slope: 0.0,
        }
    }

    #[test]
    fn a_sliding_window_attends_to_its_positions_alone() {
        // 9 cached positions of one head of 6, the window their last 4: the same output as a
        // cache holding those 4 alone, and weight 0 on the 5 before it.
        let (hd, n, first) = (6, 9, 5);
        let value = |i: usize| ((i * 37 % 101) as f32 / 50.0) - 1.0;
        let keys: Vec<f32> = (0..n * hd).map(value).collect();
        let values: Vec<f32> = (0..n * hd).map(|i| value(i + 7)).collect();
        let q: Vec<f32> = (0..hd).map(|i| value(i + 3) * 2.0).collect();
        let windowed = AttentionInput { first, ..one_head(&q, &keys, &values, 0.25) };
        let (mut scores, mut out) = (vec![f32::NAN; n], vec![0.0; hd]);
        attention(&windowed, &mut scores, &mut out);
        let alone = AttentionInput { keys: &keys[first * hd..], values: &values[first * hd..], n_pos: n - first, first: 0, ..windowed };
        let (mut alone_scores, mut alone_out) = (vec![0.0; n - first], vec![0.0; hd]);
        attention(&alone, &mut alone_scores, &mut alone_out);
        assert_eq!(out, alone_out);
        assert_eq!(&scores[first..], &alone_scores[..]);
        assert!(scores[..first].iter().all(|&w| w == 0.0), "{scores:?}");
        // The whole cache differs: the window is what made them equal.
        let whole = AttentionInput { first: 0, ..windowed };
        attention(&whole, &mut scores, &mut out);
        assert_ne!(out, alone_out);
    }

    #[test]
    fn alibi_biases_each_score_by_its_distance_back_times_the_slope() {
        // One head of 4 over 7 positions, slope 0.75: the weights are the softmax of the
        // plain scores minus 0.75 per position back, and a window of the last 3 sees the
        // same distances as a cache holding those 3 alone.
        let (hd, n) = (4, 7);
        let value = |i: usize| ((i * 53 % 97) as f32 / 40.0) - 1.2;
        let keys: Vec<f32> = (0..n * hd).map(value).collect();
        let values: Vec<f32> = (0..n * hd).map(|i| value(i + 11)).collect();
        let q: Vec<f32> = (0..hd).map(|i| value(i + 5)).collect();
        let plain = one_head(&q, &keys, &values, 0.5);
        let biased = AttentionInput { alibi_slope: 0.75, ..plain };
        let mut raw = vec![0.0; n];
        for (j, r) in raw.iter_mut().enumerate() {
            *r = dot(&q, &keys[j * hd..][..hd]) * 0.5 - 0.75 * (n - 1 - j) as f32;
        }
        let top = raw.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let total: f32 = raw.iter().map(|r| (r - top).exp()).sum();
        let mut weights = vec![0.0; n];
        attention_weights(&biased, &mut weights);
        for (j, (w, r)) in weights.iter().zip(&raw).enumerate() {
            assert!((w - (r - top).exp() / total).abs() < 1e-6, "position {j}: {w}");
        }
        let mut unbiased = vec![0.0; n];
        attention_weights(&plain, &mut unbiased);
        assert!(weights[n - 1] > unbiased[n - 1] && weights[0] < unbiased[0], "the bias favours the near positions");
        let first = 4;
        let windowed = AttentionInput { first, ..biased };
        let alone = AttentionInput { keys: &keys[first * hd..], values: &values[first * hd..], n_pos: n - first, ..biased };
        let (mut out, mut alone_out) = (vec![0.0; hd], vec![0.0; hd]);
        attention(&windowed, &mut vec![0.0; n], &mut out);
        attention(&alone, &mut vec![0.0; n - first], &mut alone_out);
        assert_eq!(out, alone_out);
    }
}

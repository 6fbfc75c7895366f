//! A mixture of experts on the CPU (Qwen3-MoE's, Mixtral's feed-forward): the router scores
//! every expert for each token, the softmax of the scores picks the most probable few
//! ([`route`]), each picked expert's SwiGLU runs on the tokens that picked it (all of them in
//! one batch, so a prefill reads each expert's weights once), and each token's outputs are
//! added weighted by their probabilities, in the order the router ranked them (llama.cpp's),
//! then a shared expert's output where the layer has one (Granite 4.0 H's).

use std::sync::Arc;

use candle_core::quantized::QTensor;

use super::linear::{CpuPrecision, Linear, SharedInput};
use super::ops;
use crate::backend::ExpertPick;
use crate::error::Result;
use crate::model::architecture::Activation;
use crate::model::{DenseFeedForward, ExpertWeights, Experts};

/// The smallest sum the picked probabilities are divided by (llama.cpp clamps it to the
/// smallest normal half float).
const MIN_WEIGHT_SUM: f32 = 6.103_515_6e-5;

/// One expert's SwiGLU ready for the CPU.
struct Expert {
    gate: Linear,
    up: Linear,
    down: Linear,
}

impl Expert {
    /// `W_down (act(W_gate x) * W_up x)` of `m` rows of `input` (`[m, d]`), `width` wide
    /// inside: `[m, d]`, the rows rounded once for both projections.
    fn swiglu(&self, input: &[f32], m: usize, d: usize, width: usize, activation: Activation) -> Result<Vec<f32>> {
        let mut gate = vec![0.0f32; m * width]; // [m, width]
        let mut up = vec![0.0f32; m * width]; //   [m, width]
        let shared = SharedInput::new(input, m);
        self.gate.forward_shared(&shared, &mut gate)?;
        self.up.forward_shared(&shared, &mut up)?;
        ops::gated(activation, &mut gate, &up);
        let mut y = vec![0.0f32; m * d]; // [m, d]
        self.down.forward(&gate, m, &mut y)?;
        Ok(y)
    }
}

/// A layer's mixture of experts ready for the CPU.
pub struct CpuExperts {
    /// `[count, dim]`.
    router: Linear,
    experts: Vec<Expert>,
    /// Experts each token runs.
    used: usize,
    /// Whether the picked probabilities are divided by their sum.
    normalized: bool,
    /// Each expert's hidden width.
    ffn_dim: usize,
    /// The shared expert every token runs beside its picks (Granite 4.0 H's), and its width.
    shared: Option<(Expert, usize)>,
}

/// Each token's `used` picks from its router scores (`scores`, `[n, count]`), most probable
/// first: the softmax over every expert, its `used` largest probabilities (the lower index
/// first among equals), divided by their sum where `normalized`.
pub fn route(scores: &[f32], count: usize, used: usize, normalized: bool) -> Vec<Vec<ExpertPick>> {
    scores
        .chunks_exact(count)
        .map(|row| {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let exps: Vec<f32> = row.iter().map(|s| (s - max).exp()).collect();
            let total: f32 = exps.iter().sum();
            let mut order: Vec<usize> = (0..count).collect();
            order.sort_by(|&a, &b| exps[b].total_cmp(&exps[a]).then(a.cmp(&b)));
            let mut picks: Vec<ExpertPick> =
                order[..used].iter().map(|&e| ExpertPick { expert: e as u32, weight: exps[e] / total }).collect();
            if normalized {
                let sum = picks.iter().map(|p| p.weight).sum::<f32>().max(MIN_WEIGHT_SUM);
                picks.iter_mut().for_each(|p| p.weight /= sum);
            }
            picks
        })
        .collect()
}

impl CpuExperts {
    /// Prepares a layer's router and experts for `precision`.
    pub fn new(weights: ExpertWeights, shape: &Experts, precision: CpuPrecision) -> Result<Self> {
        let lin = |t: QTensor| Linear::new(Arc::new(t), precision);
        let expert = |DenseFeedForward { gate, up, down }| -> Result<Expert> {
            let gate = gate.ok_or_else(|| crate::error::Error::Backend("an expert without a gate projection".into()))?;
            Ok(Expert { gate: lin(gate)?, up: lin(up)?, down: lin(down)? })
        };
        let experts = weights.experts.into_iter().map(expert).collect::<Result<Vec<_>>>()?;
        let shared = match (weights.shared, shape.shared_ffn_dim) {
            (Some(f), Some(width)) => Some((expert(f)?, width)),
            (None, None) => None,
            _ => return Err(crate::error::Error::Backend("a shared expert's weights without its width, or its width without them".into())),
        };
        Ok(CpuExperts {
            router: lin(weights.router)?,
            experts,
            used: shape.used,
            normalized: shape.normalized,
            ffn_dim: shape.ffn_dim,
            shared,
        })
    }

    /// `out` (`[n, dim]`) = each token's picked experts' SwiGLU of its row of `xb` (`[n, dim]`),
    /// weighted; `activation` is the gate's (SiLU). Returns each token's picks.
    pub fn forward(&self, xb: &[f32], n: usize, activation: Activation, out: &mut [f32]) -> Result<Vec<Vec<ExpertPick>>> {
        let d = xb.len() / n.max(1);
        let count = self.experts.len();
        let mut scores = vec![0.0f32; n * count]; // router scores [n, count]
        self.router.forward(xb, n, &mut scores)?;
        let picks = route(&scores, count, self.used, self.normalized);
        let mut slots = vec![0.0f32; n * self.used * d]; // each pick's weighted output [n, used, d]
        for (e, expert) in self.experts.iter().enumerate() {
            // The tokens that picked expert e, and in which of their slots.
            let takers: Vec<(usize, usize, f32)> = picks
                .iter()
                .enumerate()
                .filter_map(|(t, p)| p.iter().position(|p| p.expert as usize == e).map(|s| (t, s, p[s].weight)))
                .collect();
            if takers.is_empty() {
                continue;
            }
            let m = takers.len();
            let mut input = Vec::with_capacity(m * d); // the takers' rows [m, d]
            for &(t, _, _) in &takers {
                input.extend_from_slice(&xb[t * d..][..d]);
            }
            let y = expert.swiglu(&input, m, d, self.ffn_dim, activation)?; // [m, d]
            for (row, &(t, s, w)) in y.chunks_exact(d).zip(&takers) {
                for (o, v) in slots[(t * self.used + s) * d..][..d].iter_mut().zip(row) {
                    *o = w * v;
                }
            }
        }
        // Each token's weighted outputs added in its picks' order, then the shared expert's.
        for (t, row) in out.chunks_exact_mut(d).enumerate().take(n) {
            row.copy_from_slice(&slots[t * self.used * d..][..d]);
            for s in 1..self.used {
                ops::add(row, &slots[(t * self.used + s) * d..][..d]);
            }
        }
        if let Some((expert, width)) = &self.shared {
            let y = expert.swiglu(xb, n, d, *width, activation)?; // [n, d]
            ops::add(&mut out[..n * d], &y);
        }
        Ok(picks)
    }

    /// Bytes of weights one token reads: the router, on average `used` experts, and the
    /// shared expert.
    pub fn bytes_per_token(&self) -> usize {
        let bytes = |e: &Expert| e.gate.bytes() + e.up.bytes() + e.down.bytes();
        let experts: usize = self.experts.iter().map(bytes).sum();
        self.router.bytes() + experts / self.experts.len().max(1) * self.used + self.shared.as_ref().map_or(0, |(e, _)| bytes(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The picks are the most probable experts, most probable first, with their softmax
    /// probabilities over every expert; normalized, they sum to 1 in the same ratios.
    #[test]
    fn the_router_picks_the_most_probable_experts() {
        let scores = [0.5f32, 2.0, -1.0, 1.0, 2.0, 0.0];
        let exps: Vec<f32> = scores.iter().map(|s| (s - 2.0f32).exp()).collect();
        let total: f32 = exps.iter().sum();
        let raw = route(&scores, 6, 3, false);
        assert_eq!(raw[0].iter().map(|p| p.expert).collect::<Vec<_>>(), [1, 4, 3], "ties to the lower index");
        for p in &raw[0] {
            assert!((p.weight - exps[p.expert as usize] / total).abs() < 1e-7);
        }
        let normed = route(&scores, 6, 3, true);
        let sum: f32 = raw[0].iter().map(|p| p.weight).sum();
        for (n, r) in normed[0].iter().zip(&raw[0]) {
            assert_eq!(n.expert, r.expert);
            assert!((n.weight - r.weight / sum).abs() < 1e-7);
        }
        // Two tokens route apart.
        let two = route(&[0.0, 1.0, 3.0, 0.0], 2, 1, true);
        assert_eq!(two, vec![vec![ExpertPick { expert: 1, weight: 1.0 }], vec![ExpertPick { expert: 0, weight: 1.0 }]]);
    }
}

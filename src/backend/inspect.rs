//! What a forward pass can be asked to keep besides its logits, to look inside the model at
//! one step: the attention weights of the pass's last token over every position, for every
//! layer and query head, and the residual stream after every layer (which the logit lens puts
//! through the final norm and the LM head), and in a mixture of experts the experts each layer
//! picked for it. A pass not asked keeps nothing and costs nothing.

use serde::Serialize;

use crate::error::{Error, Result};
use crate::model::Config;

/// The inside of one forward pass, at its last token.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inspection {
    /// Transformer blocks the pass ran.
    pub layers: usize,
    /// Query heads per layer.
    pub heads: usize,
    /// Query heads that read one key/value head (grouped-query attention): heads
    /// `g * group .. (g + 1) * group` share KV head `g`.
    pub group: usize,
    /// Positions the token attended to: every cached one and its own.
    pub positions: usize,
    /// Attention weights, `[layers, heads, positions]`: each row sums to 1 (a convolving or
    /// scanning layer's rows are zeros).
    pub attention: Vec<f32>,
    /// Per layer: the positions its short convolution spans where it convolves rather than
    /// attends (LFM2's convolving layers, [`Config::conv_widths`]); 0 where it attends.
    pub conv_widths: Vec<usize>,
    /// Per layer: whether it runs a Mamba-2 scan rather than attending (Granite 4.0 H's
    /// scanning layers, [`Config::is_ssm_layer`]).
    pub scans: Vec<bool>,
    /// Width of the residual stream.
    pub dim: usize,
    /// The residual stream after each layer, `[layers, dim]`.
    pub residuals: Vec<f32>,
    /// In a mixture of experts, each layer's picks for the token, most probable first
    /// (`[layers][used]`); empty in a model without experts.
    pub experts: Vec<Vec<ExpertPick>>,
    /// Experts in each layer to pick from (0 without experts).
    pub expert_count: usize,
}

/// One expert a token's router picked, and the weight its output is added with.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct ExpertPick {
    /// The expert's index in its layer.
    pub expert: u32,
    /// Its weight: its softmax probability over every expert, divided by the picks' sum
    /// where the family renormalizes them.
    pub weight: f32,
}

impl Inspection {
    /// An inspection of the first `layers` layers of a model shaped `cfg` (its heads, `group`
    /// query heads to a KV head) over `positions` positions, every value 0 until the pass
    /// writes it.
    pub fn new(cfg: &Config, layers: usize, positions: usize) -> Self {
        let (heads, dim) = (cfg.n_heads, cfg.dim);
        Inspection {
            layers,
            heads,
            group: heads / cfg.n_kv_heads.max(1),
            positions,
            attention: vec![0.0; layers * heads * positions],
            conv_widths: cfg.conv_widths().into_iter().take(layers).collect(),
            scans: (0..layers).map(|l| cfg.is_ssm_layer(l)).collect(),
            dim,
            residuals: vec![0.0; layers * dim],
            experts: match &cfg.experts {
                Some(e) => vec![vec![ExpertPick { expert: 0, weight: 0.0 }; e.used]; layers],
                None => Vec::new(),
            },
            expert_count: cfg.experts.as_ref().map_or(0, |e| e.count),
        }
    }

    /// Layer `layer`'s head `head`'s weights over the positions, `[positions]`.
    pub fn weights(&self, layer: usize, head: usize) -> &[f32] {
        &self.attention[(layer * self.heads + head) * self.positions..][..self.positions]
    }

    /// The same, to write.
    pub fn weights_mut(&mut self, layer: usize, head: usize) -> &mut [f32] {
        &mut self.attention[(layer * self.heads + head) * self.positions..][..self.positions]
    }

    /// The residual stream after layer `layer`, `[dim]`.
    pub fn residual(&self, layer: usize) -> &[f32] {
        &self.residuals[layer * self.dim..][..self.dim]
    }

    /// The same, to write.
    pub fn residual_mut(&mut self, layer: usize) -> &mut [f32] {
        &mut self.residuals[layer * self.dim..][..self.dim]
    }

    /// The inspection a pass that was asked for one hands back; an error names the backend
    /// that kept none.
    pub fn expect_from(kept: Option<Inspection>, backend: &str) -> Result<Inspection> {
        kept.ok_or_else(|| Error::Backend(format!("the {backend} backend kept no attention weights or residuals for this pass")))
    }
}

//! A step seen from inside: the attention of the token its forward pass ran last, over every
//! position, for every layer and head, and the logit lens (each layer's residual stream put
//! through the final norm and the LM head: what the model would say if it stopped there).
//!
//! Nothing is kept per step: the latest step's own pass keeps its inside while it is watched
//! ([`Generation::keep_inside`](super::generate::Generation::keep_inside)), and any other step
//! is recomputed on demand from the run's tokens, the KV cache truncated to the tokens before
//! that pass's last one (as branching does) and that token run again with
//! [`Backend::inspect`]. Both give the same bits.

use serde::Serialize;

use crate::backend::{Backend, Batching, ExpertPick, Inspection};
use crate::error::{Error, Result};
use crate::sampler::ranking;
use crate::sampler::softmax::softmax;
use crate::tokenizer::Tokenizer;

/// Tokens the lens lists per layer.
pub const LENS_TOP: usize = 5;

/// One token of a lens layer's list.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct LensToken {
    /// Token id.
    pub token_id: u32,
    /// Its text, for display.
    pub text: String,
    /// Its probability at this layer (softmax of the layer's logits, temperature 1).
    pub probability: f32,
}

/// One layer of the logit lens.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct LensLayer {
    /// The layer after which the residual stream was read, 1-based: the last is the step's
    /// own distribution.
    pub layer: usize,
    /// The [`LENS_TOP`] most probable tokens, most probable first.
    pub top: Vec<LensToken>,
    /// The step's chosen token's rank at this layer (1: the most probable).
    pub chosen_rank: usize,
    /// The chosen token's probability at this layer.
    pub chosen_probability: f32,
}

/// A step seen from inside.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct StepInside {
    /// The step (0-based index of the generated token).
    pub step: usize,
    /// The token the step chose.
    pub chosen: u32,
    /// Layers of the model.
    pub layers: usize,
    /// Query heads per layer.
    pub heads: usize,
    /// Query heads that read one key/value head: heads `g * group .. (g + 1) * group` share one.
    pub group: usize,
    /// Positions attended to (the context before the step's token).
    pub positions: usize,
    /// The text of each position's token, `[positions]` (the prompt's template tokens too).
    pub tokens: Vec<String>,
    /// Attention weights of the pass's last token, `[layers, heads, positions]`, each row
    /// summing to 1 (a convolving or scanning layer's zeros).
    pub attention: Vec<f32>,
    /// Per layer: the positions its short convolution spans where it convolves rather than
    /// attends (LFM2's), 0 where it attends.
    pub conv_widths: Vec<usize>,
    /// Per layer: whether it runs a Mamba-2 scan rather than attending (Granite 4.0 H's), its
    /// row of weights zeros.
    pub scans: Vec<bool>,
    /// The logit lens, one entry per layer, the last the step's own distribution (empty
    /// where it was not asked for).
    pub lens: Vec<LensLayer>,
    /// In a mixture of experts, the experts each layer picked for the step's token, most
    /// probable first (`[layers][used]`); empty in a model without experts.
    pub experts: Vec<Vec<ExpertPick>>,
    /// Experts in each layer to pick from (0 without experts).
    pub expert_count: usize,
}

/// Recomputes the forward pass that gave step `step`'s distribution, over `context` (the
/// prompt of `prompt_len` tokens and the steps' tokens), keeping its inspection: `backend`'s
/// cache is truncated to the tokens before that pass's last one, keeping what it holds of
/// them (`cached` leading tokens of `context`; the rest run first), and that token runs again.
/// `batching`: how the step's live pass computed its last token, and so how this one runs
/// it ([`Batching`]: a step first computed in a prefill or a verify pass is recomputed the same
/// way, for the same bits). Returns the pass's logits (the step's, as seen
/// live) and its inspection; the backend then holds the first `prompt_len + step` tokens of
/// `context`.
pub async fn recompute<B: Backend>(
    backend: &mut B,
    context: &[u32],
    prompt_len: usize,
    cached: usize,
    step: usize,
    batching: Batching,
) -> Result<(Vec<f32>, Inspection)> {
    let generated = context.len().saturating_sub(prompt_len);
    if prompt_len == 0 || step >= generated {
        return Err(Error::InvalidParams(format!("step {step} is past the {generated} generated tokens")));
    }
    let last = prompt_len + step - 1;
    let keep = cached.min(last);
    backend.truncate(keep);
    if keep < last {
        backend.prefill(&context[keep..last]).await?;
    }
    backend.inspect(context[last], batching).await
}

/// The logit lens of `inspection` on `backend` (the model that made it) for a step that chose
/// `chosen`: each layer's top [`LENS_TOP`] tokens and the chosen token's rank and probability.
pub async fn lens<B: Backend>(backend: &mut B, inspection: &Inspection, chosen: u32, tokenizer: &Tokenizer) -> Result<Vec<LensLayer>> {
    let logits = backend.lens(&inspection.residuals).await?;
    let vocab = logits.len() / inspection.layers.max(1);
    if vocab == 0 || (chosen as usize) >= vocab {
        return Err(Error::Backend(format!("the lens gave {} logits for {} layers", logits.len(), inspection.layers)));
    }
    Ok(logits
        .chunks_exact(vocab)
        .enumerate()
        .map(|(layer, row)| {
            let p = softmax(row, 1.0).p;
            let top = ranking::top(row, LENS_TOP)
                .into_iter()
                .map(|id| LensToken { token_id: id, text: tokenizer.token_text(id), probability: p[id as usize] })
                .collect();
            LensLayer { layer: layer + 1, top, chosen_rank: ranking::rank_of(row, chosen) + 1, chosen_probability: p[chosen as usize] }
        })
        .collect())
}

/// Step `step` of `context` seen from inside, from its recomputed pass's `inspection`: the
/// attention, the text of each position's token, and with `with_lens` the logit lens (30 rows
/// of the LM head more; empty without).
pub async fn step_inside<B: Backend>(
    backend: &mut B,
    context: &[u32],
    step: usize,
    inspection: Inspection,
    with_lens: bool,
    tokenizer: &Tokenizer,
) -> Result<StepInside> {
    let chosen = *context
        .get(inspection.positions)
        .ok_or_else(|| Error::InvalidParams(format!("step {step} has no token in a context of {}", context.len())))?;
    let lens = if with_lens { lens(backend, &inspection, chosen, tokenizer).await? } else { Vec::new() };
    let Inspection { layers, heads, group, positions, attention, conv_widths, scans, experts, expert_count, .. } = inspection;
    let tokens = context[..positions].iter().map(|&t| tokenizer.token_text(t)).collect();
    Ok(StepInside { step, chosen, layers, heads, group, positions, tokens, attention, conv_widths, scans, lens, experts, expert_count })
}

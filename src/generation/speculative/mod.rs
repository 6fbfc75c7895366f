//! Speculative decoding: a cheap drafter proposes the next K tokens, the model scores all of
//! them in one batched forward pass ([`Backend::verify`]), and the exact rule of speculative
//! sampling ([`accept`]) keeps a prefix of the draft and draws one more token. The tokens
//! come out distributed exactly as plain sampling's, with the same sampler settings; the
//! gain is that one model pass can yield up to K + 1 of them.
//!
//! Two drafters, neither a second file to download:
//! - **self-draft**: the model's own first L layers, then its final norm and LM head
//!   ([`Backend::draft`]); they share the model's KV cache for those layers;
//! - **prompt lookup** ([`lookup`]): what followed the text's ending the last time it
//!   appeared; its proposals are certain (q = 1), so each is kept with probability p.
//!
//! One round, from a context of `n` tokens whose last one the KV cache lacks:
//! draft `d_1..d_K` -> verify `[x, d_1..d_K]` at positions `n-1..n+K-1` (logits for each) ->
//! judge `d_1, d_2, ...` until one is rejected (its replacement drawn from the residual) or
//! all pass (a bonus token drawn from the last position) -> the cache keeps `n + accepted`.

pub mod accept;
pub mod lookup;

use serde::{Deserialize, Serialize};
use web_time::Instant;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::sampler::{Distribution, Sample, SamplerRng, SamplingParams, StepDistribution};
use accept::Verdict;

/// Most tokens a draft proposes per round: what one verify pass takes, less the token before
/// the draft.
pub const MAX_DRAFT_TOKENS: usize = crate::backend::MAX_VERIFY_TOKENS - 1;

/// Where the draft comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
#[serde(rename_all = "lowercase")]
pub enum Drafter {
    /// The model's first layers, its final norm and LM head.
    #[serde(rename = "self")]
    SelfDraft,
    /// The continuation of the text's ending's last earlier occurrence.
    Lookup,
}

/// How speculative decoding runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
#[serde(default)]
pub struct SpeculativeParams {
    /// The drafter.
    pub drafter: Drafter,
    /// Tokens proposed per round, 1 to [`MAX_DRAFT_TOKENS`].
    pub draft_tokens: usize,
    /// Self-draft: layers the draft runs (default: a third of the model's, at least 1).
    pub draft_layers: Option<usize>,
}

impl Default for SpeculativeParams {
    fn default() -> Self {
        SpeculativeParams { drafter: Drafter::SelfDraft, draft_tokens: 4, draft_layers: None }
    }
}

impl SpeculativeParams {
    /// Checks the draft length and layer count (the layer count's upper bound is the
    /// model's, checked by [`SpeculativeParams::layers`]).
    pub fn validate(&self) -> Result<()> {
        if !(1..=MAX_DRAFT_TOKENS).contains(&self.draft_tokens) {
            return Err(Error::InvalidParams(format!("draft_tokens must be between 1 and {MAX_DRAFT_TOKENS}, got {}", self.draft_tokens)));
        }
        if self.draft_layers == Some(0) {
            return Err(Error::InvalidParams("draft_layers must be at least 1".into()));
        }
        Ok(())
    }

    /// The layers a self-draft runs on a model of `n_layers`.
    pub fn layers(&self, n_layers: usize) -> Result<usize> {
        match self.draft_layers {
            Some(l) if l > n_layers => {
                Err(Error::InvalidParams(format!("draft_layers must be at most the model's {n_layers} layers, got {l}")))
            }
            Some(l) => Ok(l),
            None => Ok((n_layers / 3).max(1)),
        }
    }
}

/// What the draft did at one generated token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct DraftStep {
    /// Which round (0-based) the token came from.
    pub round: usize,
    /// Tokens that round's draft proposed (the ones after a rejection were never judged).
    pub round_drafted: usize,
    /// The drafted token at this position; `None` for the bonus token after a draft kept
    /// whole.
    pub proposed: Option<u32>,
    /// Whether the drafted token was kept (then it is the step's token).
    pub accepted: bool,
    /// The drafted token's text (empty for the bonus token).
    pub proposed_text: String,
    /// The model's filtered probability `p` of the drafted token.
    pub p: f32,
    /// The draft's probability `q` of it (1 for a lookup).
    pub q: f32,
    /// The draft's distribution at this position (self-draft; `None` for a lookup or the
    /// bonus token).
    pub draft_distribution: Option<Distribution>,
}

/// Counts over a generation's rounds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct SpeculativeStats {
    /// Tokens the drafts proposed.
    pub draft_tokens: usize,
    /// Of them, kept.
    pub accepted_tokens: usize,
    /// `accepted_tokens / draft_tokens` (0 before any draft).
    pub acceptance_rate: f64,
    /// Forward passes of the whole model (the prompt's included).
    pub target_forward_passes: usize,
    /// Forward passes of the self-draft (0 for lookups).
    pub draft_forward_passes: usize,
    /// Rounds run.
    pub rounds: usize,
}

impl SpeculativeStats {
    /// Generated tokens per pass of the whole model.
    pub fn tokens_per_forward_pass(&self, generated: usize) -> f64 {
        if self.target_forward_passes == 0 {
            0.0
        } else {
            generated as f64 / self.target_forward_passes as f64
        }
    }
}

/// One token a round decided.
pub struct Decided {
    /// The model's distribution at this position, with the token as its choice.
    pub sample: Sample,
    /// The model's logits at this position, `[vocab]`.
    pub logits: Vec<f32>,
    /// What the draft did here.
    pub draft: DraftStep,
}

/// The outcome of one round.
pub struct Round {
    /// The tokens, in order: the kept draft, then the replacement or the bonus token.
    pub decided: Vec<Decided>,
    /// Leading tokens of the context plus `decided` whose keys and values the backend now
    /// holds (`n + accepted`).
    pub cached: usize,
    /// Tokens proposed.
    pub proposed: usize,
    /// Passes of the self-draft.
    pub draft_passes: usize,
    /// Milliseconds in the backend (draft and verify passes).
    pub forward_ms: f64,
    /// Milliseconds drafting, judging and shaping distributions.
    pub sample_ms: f64,
}

/// What a round needs from the generation.
pub struct RoundInput<'a> {
    /// Prompt and generated tokens; the backend holds all but the last.
    pub context: &'a [u32],
    /// The sampler settings both `p` and `q` are shaped with.
    pub sampling: &'a SamplingParams,
    /// The drafter and its sizes.
    pub speculative: &'a SpeculativeParams,
    /// Most tokens the round may yield (it drafts one fewer).
    pub max_new: usize,
    /// Candidates reported per token.
    pub top_n: usize,
    /// The model's layer count.
    pub n_layers: usize,
}

/// Runs one round; `None` when there is nothing to draft (a lookup found no match, or room
/// for one token only), for a plain step instead.
pub async fn round<B: Backend>(backend: &mut B, input: RoundInput<'_>, rng: &mut SamplerRng) -> Result<Option<Round>> {
    let RoundInput { context, sampling, speculative, max_new, top_n, n_layers } = input;
    let n = context.len();
    let x = context[n - 1];
    // Verify appends K + 1 tokens from position n - 1.
    let room = backend.context_len().saturating_sub(n);
    let k = speculative.draft_tokens.min(max_new.saturating_sub(1)).min(room);
    if k == 0 {
        return Ok(None);
    }
    let mut forward_ms = 0.0;
    let mut sample_ms = 0.0;

    // Draft: the proposed tokens and the draft's distribution q of each (`None`: certain,
    // q = 1 on the proposed token).
    let mut drafts = Vec::with_capacity(k);
    let mut qs: Vec<Option<(Vec<f32>, Distribution)>> = Vec::with_capacity(k);
    let mut draft_passes = 0;
    match speculative.drafter {
        Drafter::SelfDraft => {
            let layers = speculative.layers(n_layers)?;
            let mut ctx = context.to_vec();
            let mut token = x;
            for _ in 0..k {
                let t = Instant::now();
                let logits = backend.draft(token, layers).await?;
                forward_ms += ms_since(t);
                draft_passes += 1;
                let t = Instant::now();
                let mut q = StepDistribution::new(&logits, &ctx, sampling, top_n)?;
                token = q.draw(rng);
                q.report_also(&logits, token);
                qs.push(Some((q.probabilities(), q.distribution().clone())));
                drafts.push(token);
                ctx.push(token);
                sample_ms += ms_since(t);
            }
            backend.truncate(n - 1);
        }
        Drafter::Lookup => {
            drafts = lookup::propose(context, k);
            if drafts.is_empty() {
                return Ok(None);
            }
            qs.resize(drafts.len(), None);
        }
    }

    // Verify: the model's logits at x and at every drafted token, in one pass.
    let mut tokens = Vec::with_capacity(drafts.len() + 1);
    tokens.push(x);
    tokens.extend_from_slice(&drafts);
    let t = Instant::now();
    let logits = backend.verify(&tokens).await?;
    forward_ms += ms_since(t);
    let vocab = logits.len() / tokens.len();
    let row = |i: usize| &logits[i * vocab..][..vocab];

    // Judge each drafted token in order.
    let t = Instant::now();
    let mut ctx = context.to_vec();
    let mut decided = Vec::with_capacity(tokens.len());
    for (i, (&d, q)) in drafts.iter().zip(qs).enumerate() {
        let mut p = StepDistribution::new(row(i), &ctx, sampling, top_n)?;
        p.report_also(row(i), d);
        let probs = p.probabilities();
        let (q, q_distribution) = match q {
            Some((q, distribution)) => (q, Some(distribution)),
            None => {
                let mut certain = vec![0f32; vocab];
                certain[d as usize] = 1.0;
                (certain, None)
            }
        };
        let verdict = accept::judge(&probs, &q, d, rng);
        let token = match verdict {
            Verdict::Accepted => d,
            Verdict::Replaced(r) => r,
        };
        let draft = DraftStep {
            round: 0,
            round_drafted: drafts.len(),
            proposed: Some(d),
            accepted: verdict == Verdict::Accepted,
            proposed_text: String::new(),
            p: probs[d as usize],
            q: q[d as usize],
            draft_distribution: q_distribution,
        };
        decided.push(Decided { sample: p.into_sample(token, false), logits: row(i).to_vec(), draft });
        if verdict != Verdict::Accepted {
            break;
        }
        ctx.push(d);
    }
    let accepted = decided.iter().filter(|d| d.draft.accepted).count();
    if accepted == drafts.len() {
        // The whole draft was kept: the last position's distribution gives one more token.
        let last = drafts.len();
        let p = StepDistribution::new(row(last), &ctx, sampling, top_n)?;
        let token = p.draw(rng);
        let draft = DraftStep {
            round: 0,
            round_drafted: drafts.len(),
            proposed: None,
            accepted: false,
            proposed_text: String::new(),
            p: 0.0,
            q: 0.0,
            draft_distribution: None,
        };
        decided.push(Decided { sample: p.into_sample(token, false), logits: row(last).to_vec(), draft });
    }
    sample_ms += ms_since(t);
    Ok(Some(Round { decided, cached: n + accepted, proposed: drafts.len(), draft_passes, forward_ms, sample_ms }))
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

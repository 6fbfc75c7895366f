//! Beam search: keep the `width` most likely sequences, not the most likely next token.
//!
//! Each step extends every live beam by its `width` most likely next tokens (the model's
//! log-probabilities at temperature 1, ties by the sampler's ranking), and keeps the `width`
//! extensions with the highest summed log-probability. An extension that ends by itself
//! (EOS, a stop string) leaves the search as a finished beam without taking one of those
//! places; one that reaches `max_tokens` or the context's end finishes in its place; the
//! search ends when no beam is live. Finished beams are ranked by
//! their score, `logprob / length^length_penalty` (length counts the generated tokens, EOS
//! included): the best one wins. With width 1 this is greedy decoding, token for token.
//!
//! The backend has one KV cache. Beams share it by the generation loop's rule: it is cut back
//! to the longest prefix it has in common with the next beam's tokens, and the rest runs in
//! one pass. Beams that share a prefix reuse it; each step costs every live beam a re-run of
//! the tokens it has had since it parted from the beam run before it
//! ([`BeamFinish::forward_tokens`] counts them all).

use serde::{Deserialize, Serialize};
use web_time::Instant;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::generation::generate::FinishReason;
use crate::generation::stop::MAX_STOP_STRINGS;
use crate::sampler::ranking;
use crate::tokenizer::Tokenizer;

/// Most beams a search keeps.
pub const MAX_BEAMS: usize = 8;

/// Largest length penalty (the exponent of the length in the score).
pub const MAX_LENGTH_PENALTY: f32 = 2.0;

/// What shapes one beam search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
#[serde(default)]
pub struct BeamParams {
    /// Beams kept (1 to [`MAX_BEAMS`]).
    pub width: usize,
    /// Exponent of the length in a finished beam's score (0 to [`MAX_LENGTH_PENALTY`]):
    /// 0 ranks by summed log-probability alone, 1 by its mean per token.
    pub length_penalty: f32,
    /// Most tokens a beam generates.
    pub max_tokens: usize,
    /// Strings that end a beam (never included in its text).
    pub stop: Vec<String>,
}

impl Default for BeamParams {
    /// Three beams ranked by mean log-probability per token, 128 tokens, no stop strings.
    fn default() -> Self {
        BeamParams { width: 3, length_penalty: 1.0, max_tokens: 128, stop: Vec::new() }
    }
}

impl BeamParams {
    /// Checks every parameter; the error names the one that is wrong.
    pub fn validate(&self) -> Result<()> {
        if self.width == 0 || self.width > MAX_BEAMS {
            return Err(Error::InvalidParams(format!("beams must be between 1 and {MAX_BEAMS}, got {}", self.width)));
        }
        if !(0.0..=MAX_LENGTH_PENALTY).contains(&self.length_penalty) {
            return Err(Error::InvalidParams(format!(
                "length penalty must be between 0 and {MAX_LENGTH_PENALTY}, got {}",
                self.length_penalty
            )));
        }
        if self.max_tokens == 0 {
            return Err(Error::InvalidParams("max_tokens must be at least 1".into()));
        }
        if self.stop.len() > MAX_STOP_STRINGS {
            return Err(Error::InvalidParams(format!("at most {MAX_STOP_STRINGS} stop strings, got {}", self.stop.len())));
        }
        Ok(())
    }
}

/// One beam: a continuation of the prompt and how likely the model finds it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct Beam {
    /// The generated tokens (an ending EOS included).
    pub token_ids: Vec<u32>,
    /// Their text (a stop string and what follows it cut off, EOS not shown).
    pub text: String,
    /// The last token's own text, for display (a control token such as EOS by its name).
    pub token_text: String,
    /// Sum of the model's log-probabilities (natural log, temperature 1) of the tokens.
    pub logprob: f64,
    /// `logprob / length^length_penalty`.
    pub score: f64,
    /// Why it ended; none while it is live.
    pub finish_reason: Option<FinishReason>,
}

/// What one step of the search did.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct BeamStep {
    /// 0-based step (the live beams have `step + 1` tokens).
    pub step: usize,
    /// The live beams after it, highest log-probability first.
    pub beams: Vec<Beam>,
    /// Beams that finished at this step, best score first.
    pub finished: Vec<Beam>,
    /// Tokens the forward passes of this step ran (all beams).
    pub forward_tokens: usize,
    /// Milliseconds of those forward passes.
    pub forward_ms: f64,
}

/// The end of a search.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct BeamFinish {
    /// Every finished beam, best score first: the first is the answer.
    pub beams: Vec<Beam>,
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Tokens all forward passes ran, the prompt included (the search's cost; plain greedy
    /// decoding runs the prompt plus one per generated token).
    pub forward_tokens: usize,
    /// Milliseconds of all forward passes.
    pub forward_ms: f64,
}

/// What one call to [`BeamSearch::step`] produced (tagged `type: "step" | "finished"`, as
/// the generation loop's [`Event`](crate::generation::generate::Event)).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum BeamEvent {
    /// The beams grew by one token.
    Step(BeamStep),
    /// No beam is live; further calls return the same.
    Finished(BeamFinish),
}

/// A beam search in progress.
pub struct BeamSearch {
    params: BeamParams,
    prompt: Vec<u32>,
    context_len: usize,
    eos_ids: Vec<u32>,
    live: Vec<Beam>,
    finished: Vec<Beam>,
    /// The tokens the backend's KV cache holds.
    cached: Vec<u32>,
    step: usize,
    forward_tokens: usize,
    forward_ms: f64,
}

impl BeamSearch {
    /// Starts a search after `prompt` on a backend with `context_len` positions.
    pub fn new(prompt: Vec<u32>, params: BeamParams, tokenizer: &Tokenizer, context_len: usize) -> Result<Self> {
        params.validate()?;
        crate::generation::generate::check_prompt(&prompt, context_len)?;
        let root =
            Beam { token_ids: Vec::new(), text: String::new(), token_text: String::new(), logprob: 0.0, score: 0.0, finish_reason: None };
        Ok(BeamSearch {
            params,
            prompt,
            context_len,
            eos_ids: tokenizer.eos_ids().to_vec(),
            live: vec![root],
            finished: Vec::new(),
            cached: Vec::new(),
            step: 0,
            forward_tokens: 0,
            forward_ms: 0.0,
        })
    }

    /// Whether no beam is live.
    pub fn is_finished(&self) -> bool {
        self.live.is_empty()
    }

    /// Ends the search now: every live beam finishes as it stands (`Cancelled`), and the next
    /// [`step`](Self::step) reports the end with them ranked among the finished ones.
    pub fn cancel(&mut self) {
        for mut beam in self.live.drain(..) {
            beam.finish_reason = Some(FinishReason::Cancelled);
            if !beam.token_ids.is_empty() {
                self.finished.push(beam);
            }
        }
    }

    /// Grows every live beam by one token (or reports the end).
    pub async fn step<B: Backend>(&mut self, backend: &mut B, tokenizer: &Tokenizer) -> Result<BeamEvent> {
        if self.live.is_empty() {
            return Ok(BeamEvent::Finished(self.finish()));
        }
        let width = self.params.width;
        let (tokens_before, ms_before) = (self.forward_tokens, self.forward_ms);
        // (summed log-probability, live beam, token, in the order beams and ranks were seen)
        let mut candidates: Vec<(f64, usize, u32)> = Vec::with_capacity(self.live.len() * width);
        for i in 0..self.live.len() {
            let context: Vec<u32> = self.prompt.iter().chain(&self.live[i].token_ids).copied().collect();
            let logits = self.logits(backend, &context).await?;
            if let Some(bad) = logits.iter().position(|x| x.is_nan()) {
                return Err(Error::NanLogits { index: bad });
            }
            let log_z = log_sum_exp(&logits);
            for token in ranking::top(&logits, width) {
                candidates.push((self.live[i].logprob + (logits[token as usize] as f64 - log_z), i, token));
            }
        }
        // Highest summed log-probability first; the sort is stable, so ties keep beam order.
        candidates.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut live = Vec::with_capacity(width);
        let mut finished = Vec::new();
        // In that order: an extension that ends by itself (EOS, a stop string) is kept as a
        // finished beam; the others take the `width` places, where one that reaches
        // max_tokens or the context's end finishes (Length) and the rest stay live. A token
        // of probability 0 is no continuation.
        let mut places = 0;
        for (logprob, i, token) in candidates {
            if logprob == f64::NEG_INFINITY {
                continue;
            }
            let mut token_ids = self.live[i].token_ids.clone();
            token_ids.push(token);
            let mut beam = self.beam(token_ids, logprob, tokenizer);
            if beam.finish_reason.is_some() {
                finished.push(beam);
                continue;
            }
            if places == width {
                continue;
            }
            places += 1;
            if beam.token_ids.len() >= self.params.max_tokens || self.prompt.len() + beam.token_ids.len() >= self.context_len {
                beam.finish_reason = Some(FinishReason::Length);
                finished.push(beam);
            } else {
                live.push(beam);
            }
        }
        finished.sort_by(|a, b| b.score.total_cmp(&a.score));
        self.finished.extend(finished.iter().cloned());
        self.live = live;
        self.step += 1;
        Ok(BeamEvent::Step(BeamStep {
            step: self.step - 1,
            beams: self.live.clone(),
            finished,
            forward_tokens: self.forward_tokens - tokens_before,
            forward_ms: self.forward_ms - ms_before,
        }))
    }

    /// The logits after `context`: the KV cache cut back to what it shares with it, the rest
    /// run in one pass.
    async fn logits<B: Backend>(&mut self, backend: &mut B, context: &[u32]) -> Result<Vec<f32>> {
        let shared = self.cached.iter().zip(context).take_while(|(a, b)| a == b).count().min(context.len() - 1);
        let start = Instant::now();
        backend.truncate(shared);
        let fresh = &context[shared..];
        let logits = if fresh.len() == 1 { backend.decode(fresh[0]).await? } else { backend.prefill(fresh).await? };
        self.forward_ms += start.elapsed().as_secs_f64() * 1000.0;
        self.forward_tokens += fresh.len();
        self.cached = context.to_vec();
        Ok(logits)
    }

    /// A beam of `token_ids` with its text and score, finished if it ends with EOS or its
    /// text holds a stop string.
    fn beam(&self, token_ids: Vec<u32>, logprob: f64, tokenizer: &Tokenizer) -> Beam {
        let ends_with_eos = token_ids.last().is_some_and(|t| self.eos_ids.contains(t));
        let shown = if ends_with_eos { &token_ids[..token_ids.len() - 1] } else { &token_ids[..] };
        let mut text = tokenizer.decode(shown);
        let stop_at = self.params.stop.iter().filter(|s| !s.is_empty()).filter_map(|s| text.find(s.as_str())).min();
        let finish_reason = if ends_with_eos {
            Some(FinishReason::Eos)
        } else if let Some(at) = stop_at {
            text.truncate(at);
            Some(FinishReason::Stop)
        } else {
            None
        };
        let score = logprob / (token_ids.len() as f64).powf(self.params.length_penalty as f64);
        let token_text = token_ids.last().map(|&t| tokenizer.token_text(t)).unwrap_or_default();
        Beam { token_ids, text, token_text, logprob, score, finish_reason }
    }

    fn finish(&self) -> BeamFinish {
        let mut beams = self.finished.clone();
        beams.sort_by(|a, b| b.score.total_cmp(&a.score));
        BeamFinish { beams, prompt_tokens: self.prompt.len(), forward_tokens: self.forward_tokens, forward_ms: self.forward_ms }
    }
}

/// `ln sum_i e^{x_i}`, in f64 from the largest logit.
fn log_sum_exp(logits: &[f32]) -> f64 {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
    max + logits.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln()
}

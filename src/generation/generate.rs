//! The one generation loop, for every backend, natively and in wasm:
//! prefill -> logits -> sample -> append -> decode -> ... until EOS, a stop string or the
//! length limit. It is a state machine driven one step at a time ([`Generation::step`]), so
//! a caller can show each step, change the sampling parameters between two steps, stop,
//! force the next token, or rewind to any past step and branch from there.
//!
//! One rule computes every step's logits: the backend's KV cache holds the first `cached`
//! tokens of the context; it is truncated to them and the rest of the context is run in one
//! pass. The first step runs the prompt (prefill); a normal step runs one token (decode);
//! with the KV cache off `cached` is always 0, so every step recomputes the whole sequence
//! (the naive loop); after a rewind or a branch switch only the tokens past the common
//! prefix run again.
//!
//! With speculative decoding on, a step whose only fresh token is the last one runs a
//! [`speculative`] round instead: it decides one to K + 1 tokens, which the next steps hand
//! out one at a time without a forward pass; the KV cache then holds everything but the last
//! of them, as after a plain step.
//!
//! A step can keep its inside as it runs ([`Generation::keep_inside`], the page's Attention
//! and Layers views open): its pass's last token then runs through [`Backend::inspect`],
//! which gives the same logits bit for bit and the attention weights and residuals besides,
//! handed out once by [`Generation::take_inside`]. A step not asked runs as before.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use web_time::Instant;

use crate::backend::{Backend, Batching, Inspection, Pass};
use crate::error::{Error, Result};
use crate::generation::inspect::{self, StepInside};
use crate::generation::speculative::{self, Decided, DraftStep, RoundInput, SpeculativeParams, SpeculativeStats};
use crate::generation::stop::{StopMatcher, MAX_STOP_STRINGS};
use crate::sampler::{self, Choice, Sample, SamplerRng, SamplingParams, MAX_TOP_N};
use crate::tokenizer::{Tokenizer, Utf8Stream};

/// Everything that shapes one generation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
#[serde(default)]
pub struct GenerateParams {
    /// How each token is drawn.
    #[serde(flatten)]
    pub sampling: SamplingParams,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Up to four strings that end generation (never included in the text).
    pub stop: Vec<String>,
    /// Seed of the sampler's random stream.
    pub seed: u64,
    /// Candidates reported per step (up to 100).
    pub top_n: usize,
    /// Keep the keys and values of past tokens between steps (true), or recompute the whole
    /// sequence at every step (false: same tokens, more work per step).
    pub kv_cache: bool,
    /// Draft several tokens and check them in one pass (same distribution, fewer passes);
    /// `None`: one token per pass.
    pub speculative: Option<SpeculativeParams>,
}

impl Default for GenerateParams {
    fn default() -> Self {
        GenerateParams {
            sampling: SamplingParams::default(),
            max_tokens: 128,
            stop: Vec::new(),
            seed: 0,
            top_n: 20,
            kv_cache: true,
            speculative: None,
        }
    }
}

impl GenerateParams {
    /// Checks every parameter; the error names the one that is wrong.
    pub fn validate(&self) -> Result<()> {
        self.sampling.validate()?;
        if self.max_tokens == 0 {
            return Err(Error::InvalidParams("max_tokens must be at least 1".into()));
        }
        if self.stop.len() > MAX_STOP_STRINGS {
            return Err(Error::InvalidParams(format!("at most {MAX_STOP_STRINGS} stop strings, got {}", self.stop.len())));
        }
        if self.top_n > MAX_TOP_N {
            return Err(Error::InvalidParams(format!("top_n must be at most {MAX_TOP_N}, got {}", self.top_n)));
        }
        if let Some(spec) = &self.speculative {
            spec.validate()?;
            if !self.kv_cache {
                return Err(Error::InvalidParams(
                    "speculative decoding rolls the KV cache back past a rejected token: it needs the KV cache on".into(),
                ));
            }
        }
        Ok(())
    }
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
#[serde(rename_all = "lowercase")]
pub enum FinishReason {
    /// The model produced an end-of-sequence token.
    Eos,
    /// A stop string appeared.
    Stop,
    /// `max_tokens` were generated, or the context is full.
    Length,
    /// The caller stopped it.
    Cancelled,
}

/// One generated token and how it was chosen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct StepEvent {
    /// 0-based index of the generated token.
    pub step: usize,
    /// The sampled (or forced) token.
    pub token_id: u32,
    /// Text that became visible with this step (may be empty while a character or a
    /// possible stop string is incomplete, or hold text of earlier steps).
    pub text: String,
    /// This token's own text, for display.
    pub token_text: String,
    /// The sample and its distribution (`sample.forced` marks a token the caller chose).
    pub sample: Sample,
    /// Milliseconds of the forward pass that produced this step's logits. Where the backend
    /// had run it ahead (greedy decoding on the GPU, [`crate::backend::Pass::run_ahead`]),
    /// the pass began as the step before's logits were read back, so this counts from then:
    /// the generator's own work since (sampling), the caller's time between the steps (up to
    /// the step before's forward milliseconds: the pass cannot have run longer there) and
    /// the wait for the logits.
    pub forward_ms: f64,
    /// Tokens that forward pass ran: the prompt at step 0, 1 per decode step with the KV
    /// cache, the whole sequence without it.
    pub forward_tokens: usize,
    /// Milliseconds spent sampling.
    pub sample_ms: f64,
    /// Tokens in the KV cache after this step's forward pass.
    pub position: usize,
    /// Speculative decoding: what the draft proposed here and whether it was kept. The
    /// round's forward passes are counted at its first token; its other tokens ran none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft: Option<DraftStep>,
}

/// The summary after the last step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct Finish {
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Tokens generated (including an EOS token).
    pub completion_tokens: usize,
    /// Milliseconds of the forward pass of step 0 (the prefill: time to first token's logits).
    pub prefill_ms: f64,
    /// Milliseconds of the forward passes of every later step.
    pub decode_ms: f64,
    /// Prompt tokens per second in the prefill.
    pub prefill_tok_s: f64,
    /// Generated tokens per second in the later steps (the first token comes from the prefill).
    pub decode_tok_s: f64,
    /// Text released at the end (held back while it could begin a stop string).
    pub text: String,
    /// Speculative decoding's counts, when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<SpeculativeStats>,
}

/// What one call to [`Generation::step`] produced.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Event {
    /// A token was generated.
    Step(StepEvent),
    /// Generation is over; further calls return the same summary.
    Finished(Finish),
}

/// A generation in progress.
pub struct Generation {
    params: GenerateParams,
    prompt_len: usize,
    /// Prompt and generated tokens: what the model has seen, and the repetition penalty's history.
    context: Vec<u32>,
    /// How many leading tokens of `context` the backend's KV cache holds.
    cached: usize,
    eos_ids: Vec<u32>,
    rng: SamplerRng,
    utf8: Utf8Stream,
    stop: StopMatcher,
    /// Over, with this reason and the text still to release.
    done: Option<(FinishReason, String)>,
    /// The token the next step takes instead of drawing one.
    forced: Option<u32>,
    /// Forward-pass milliseconds of every step so far.
    forward_ms: Vec<f64>,
    /// When the last forward pass's logits came back, and when the last step returned to
    /// the caller: a pass the backend ran ahead is timed from them (see
    /// [`StepEvent::forward_ms`]).
    logits_at: Option<Instant>,
    returned_at: Option<Instant>,
    /// How each step's logits were computed: in a decode step, a prefill pass (the prompt, the
    /// tokens a branch or a cacheless step reruns) or a speculative round's verify pass;
    /// recomputing the step to show its inside computes it the same way.
    batching: Vec<Batching>,
    /// Tokens a speculative round decided, not yet handed out as steps.
    pending: VecDeque<Decided>,
    /// Leading tokens of the context plus `pending` the backend holds after that round.
    pending_cached: usize,
    /// Speculative decoding's counts so far.
    stats: SpeculativeStats,
    /// Whether each plain step's pass keeps its inspection ([`Generation::keep_inside`]).
    keep_inside: bool,
    /// Whether sampled steps too ask the backend to run the next ones ahead on the argmax
    /// ([`Generation::run_ahead_sampled`]).
    run_ahead_sampled: bool,
    /// The latest step's index and its pass's inspection, where it kept one and it was not
    /// taken yet.
    live: Option<(usize, Inspection)>,
}

impl Generation {
    /// Prepares a generation over `prompt` for a backend whose context holds `context_len`.
    pub fn new(prompt: Vec<u32>, params: GenerateParams, tokenizer: &Tokenizer, context_len: usize) -> Result<Self> {
        params.validate()?;
        check_prompt(&prompt, context_len)?;
        Ok(Generation {
            prompt_len: prompt.len(),
            context: prompt,
            cached: 0,
            eos_ids: tokenizer.eos_ids().to_vec(),
            rng: SamplerRng::new(params.seed),
            utf8: Utf8Stream::new(),
            stop: StopMatcher::new(&params.stop),
            done: None,
            forced: None,
            forward_ms: Vec::new(),
            logits_at: None,
            returned_at: None,
            batching: Vec::new(),
            pending: VecDeque::new(),
            pending_cached: 0,
            stats: SpeculativeStats::default(),
            keep_inside: false,
            run_ahead_sampled: false,
            live: None,
            params,
        })
    }

    /// Changes the sampling parameters; they apply from the next step.
    pub fn set_sampling(&mut self, sampling: SamplingParams) -> Result<()> {
        sampling.validate()?;
        // Tokens a round decided under the old parameters are dropped.
        self.pending.clear();
        self.params.sampling = sampling;
        Ok(())
    }

    /// The parameters in force.
    pub fn params(&self) -> &GenerateParams {
        &self.params
    }

    /// Prompt and generated tokens so far.
    pub fn tokens(&self) -> &[u32] {
        &self.context
    }

    /// Tokens in the prompt.
    pub fn prompt_len(&self) -> usize {
        self.prompt_len
    }

    /// Tokens generated so far (the index of the next step).
    pub fn completion_len(&self) -> usize {
        self.context.len() - self.prompt_len
    }

    /// Whether the generation is over.
    pub fn is_finished(&self) -> bool {
        self.done.is_some()
    }

    /// Ends the generation now (the next step reports `cancelled`), releasing held text.
    pub fn cancel(&mut self) {
        if !self.is_finished() {
            let tail = self.release_all();
            self.done = Some((FinishReason::Cancelled, tail));
        }
    }

    /// Makes the next step take `token` instead of drawing one (its distribution is still
    /// computed and reported, with `forced` set).
    pub fn force_next(&mut self, token: u32) {
        self.pending.clear();
        self.forced = Some(token);
    }

    /// Goes back so that the next step is step `step` again: the tokens from that step on
    /// are forgotten (the KV cache is truncated to what stays), a finished generation runs
    /// again, and the random stream carries on. Returns an error past the last step.
    pub fn rewind(&mut self, step: usize, tokenizer: &Tokenizer) -> Result<()> {
        if step > self.completion_len() {
            return Err(Error::InvalidParams(format!("step {step} is past the {} generated tokens", self.completion_len())));
        }
        let generated = self.context[self.prompt_len..self.prompt_len + step].to_vec();
        self.follow(&generated, tokenizer);
        Ok(())
    }

    /// Replaces the generated tokens by `generated` (another branch of the same prompt): the
    /// KV cache keeps the prefix both share and the next step continues after the last of
    /// them, as if they had been generated.
    pub fn follow(&mut self, generated: &[u32], tokenizer: &Tokenizer) {
        let common = self.context[self.prompt_len..].iter().zip(generated).take_while(|(a, b)| a == b).count();
        self.context.truncate(self.prompt_len + common);
        self.context.extend_from_slice(&generated[common..]);
        // At least the last token must run again to give the next step's logits.
        self.cached = self.cached.min(self.prompt_len + common).min(self.context.len() - 1);
        self.forward_ms.truncate(common);
        self.batching.truncate(common);
        self.pending.clear();
        self.forced = None;
        self.done = None;
        self.live = None;
        // The text state after these tokens (none of them completed a stop string, or the
        // generation would have ended there).
        self.utf8 = Utf8Stream::new();
        self.stop = StopMatcher::new(&self.params.stop);
        for &t in generated {
            let _ = self.stop.push(&self.utf8.push(tokenizer.token_bytes(t)));
        }
    }

    /// Step `step` (a step already taken) seen from inside: its forward pass recomputed on
    /// `backend` from this run's tokens as it first ran ([`inspect::recompute`]), keeping the
    /// attention weights, and with `with_lens` the logit lens ([`inspect::step_inside`]). The
    /// run carries on as it would have: the cache then holds the tokens before the step's own,
    /// and the next step runs what it lacks.
    pub async fn inspect<B: Backend>(
        &mut self,
        backend: &mut B,
        step: usize,
        with_lens: bool,
        tokenizer: &Tokenizer,
    ) -> Result<StepInside> {
        let held = self.prompt_len + step;
        // What the cache keeps whatever happens: the tokens before the pass's last one.
        self.cached = self.cached.min(held.saturating_sub(1));
        self.pending_cached = self.pending_cached.min(self.cached);
        self.live = None;
        let batching = self.batching.get(step).copied().unwrap_or_default();
        let (_, inspection) = inspect::recompute(backend, &self.context, self.prompt_len, self.cached, step, batching).await?;
        self.cached = held;
        inspect::step_inside(backend, &self.context, step, inspection, with_lens, tokenizer).await
    }

    /// Whether sampled steps (not only greedy ones) ask the backend to run the next steps
    /// ahead, each on the argmax of the logits before ([`Pass::run_ahead`]): the GPU then
    /// starts the next step before this one's logits are read back and sampled, and a step
    /// whose draw was the argmax finds it already running, while any other draw drops it and
    /// runs its own (a wasted step of the GPU's). The tokens are the same either way (the
    /// draws are made from the same logits); what it changes is only when the GPU starts each
    /// step, which pays where reading the logits back and sampling take about as long as a
    /// step on the GPU (a browser's readback) and the draw is mostly the argmax. Off by
    /// default; the CPU backends run nothing ahead.
    pub fn run_ahead_sampled(&mut self, on: bool) {
        self.run_ahead_sampled = on;
    }

    /// Whether the following steps keep their inside as they run (on the page: while the
    /// Attention or Layers view is open): a plain step's pass then keeps the attention weights
    /// of its last token and the residual stream after each layer, at the price of copying
    /// them out, for [`Generation::take_inside`]. A speculative round's steps keep none (ask
    /// [`Generation::inspect`] for them).
    pub fn keep_inside(&mut self, keep: bool) {
        self.keep_inside = keep;
        if !keep {
            self.live = None;
        }
    }

    /// The latest step seen from inside, from what its own pass kept
    /// ([`Generation::keep_inside`]), with `with_lens` the logit lens computed now on
    /// `backend`: the same as [`Generation::inspect`] would give for that step, without its
    /// pass again. `None` where the latest step kept nothing (not asked, a speculative round's
    /// step, or taken already).
    pub async fn take_inside<B: Backend>(&mut self, backend: &mut B, with_lens: bool, tokenizer: &Tokenizer) -> Result<Option<StepInside>> {
        let Some((step, inspection)) = self.live.take() else {
            return Ok(None);
        };
        inspect::step_inside(backend, &self.context, step, inspection, with_lens, tokenizer).await.map(Some)
    }

    /// Runs one step: the forward pass over the tokens the KV cache lacks, then a sampled
    /// (or forced) token. After the last token, returns [`Event::Finished`].
    pub async fn step<B: Backend>(&mut self, backend: &mut B, tokenizer: &Tokenizer) -> Result<Event> {
        Ok(self.step_keeping_logits(backend, tokenizer).await?.0)
    }

    /// [`Generation::step`], also handing back the logits the token was sampled from (so a
    /// caller can re-shape this step later with other parameters).
    pub async fn step_keeping_logits<B: Backend>(&mut self, backend: &mut B, tokenizer: &Tokenizer) -> Result<(Event, Option<Vec<f32>>)> {
        if let Some((reason, tail)) = &self.done {
            return Ok((Event::Finished(self.finish(*reason, tail.clone())), None));
        }
        self.live = None;
        let next = match self.pending.pop_front() {
            Some(decided) => Next::from_round(decided, 0.0, 0, 0.0),
            None => self.forward(backend).await?,
        };
        let Next { mut sample, logits, forward_ms, forward_tokens, sample_ms, mut draft, inspection } = next;
        self.forward_ms.push(forward_ms);
        self.batching.push(match (&draft, forward_tokens) {
            (Some(_), _) => Batching::Verify,
            (None, 1) => Batching::Natural,
            (None, _) => Batching::Prefill,
        });
        tokenizer.label(&mut sample.distribution);
        if let Some(d) = &mut draft {
            d.proposed_text = d.proposed.map(|t| tokenizer.token_text(t)).unwrap_or_default();
            if let Some(q) = &mut d.draft_distribution {
                tokenizer.label(q);
            }
        }
        let token_id = sample.token_id;
        self.context.push(token_id);
        self.live = inspection.map(|i| (self.completion_len() - 1, i));
        if draft.is_some() {
            // The round's kept tokens are in the backend already; the next forward pass
            // starts after them.
            self.cached = self.pending_cached.min(self.context.len() - 1);
        }

        let mut text;
        if self.eos_ids.contains(&token_id) {
            text = self.release_all();
            self.done = Some((FinishReason::Eos, String::new()));
        } else {
            let check = self.stop.push(&self.utf8.push(tokenizer.token_bytes(token_id)));
            text = check.emit;
            if check.stopped {
                self.done = Some((FinishReason::Stop, String::new()));
            } else if self.completion_len() >= self.params.max_tokens || self.context.len() > backend.context_len() {
                text.push_str(&self.release_all());
                self.done = Some((FinishReason::Length, String::new()));
            }
        }
        if self.done.is_some() {
            self.pending.clear();
        }
        let event = Event::Step(StepEvent {
            step: self.completion_len() - 1,
            token_id,
            text,
            token_text: tokenizer.token_text(token_id),
            sample,
            forward_ms,
            forward_tokens,
            sample_ms,
            position: self.cached,
            draft,
        });
        self.returned_at = Some(Instant::now());
        Ok((event, Some(logits)))
    }

    /// Runs the forward pass over the tokens the KV cache lacks and chooses the next token:
    /// a plain step, or a speculative round whose first token it returns (the others wait
    /// in `pending`).
    async fn forward<B: Backend>(&mut self, backend: &mut B) -> Result<Next> {
        if !self.params.kv_cache {
            self.cached = 0;
        }
        backend.truncate(self.cached);
        let fresh_len = self.context.len() - self.cached;
        if let (Some(spec), 1, None) = (&self.params.speculative, fresh_len, self.forced) {
            let input = RoundInput {
                context: &self.context,
                sampling: &self.params.sampling,
                speculative: spec,
                max_new: self.params.max_tokens - self.completion_len(),
                top_n: self.params.top_n,
                n_layers: backend.layers(),
            };
            if let Some(round) = speculative::round(backend, input, &mut self.rng).await? {
                self.stats.rounds += 1;
                self.stats.target_forward_passes += 1;
                self.stats.draft_forward_passes += round.draft_passes;
                self.stats.draft_tokens += round.proposed;
                self.stats.accepted_tokens += round.decided.iter().filter(|d| d.draft.accepted).count();
                self.cached = self.context.len();
                self.pending_cached = round.cached;
                let round_index = self.stats.rounds - 1;
                let verified = round.proposed + 1;
                self.pending.extend(round.decided.into_iter().map(|mut d| {
                    d.draft.round = round_index;
                    d
                }));
                let first = self.pending.pop_front().ok_or_else(|| Error::Backend("a speculative round decided no token".into()))?;
                return Ok(Next::from_round(first, round.forward_ms, verified, round.sample_ms));
            }
        }
        let start = Instant::now();
        let run_ahead = self.runs_ahead();
        let fresh = &self.context[self.cached..];
        let mut ran_ahead = false;
        let (logits, inspection) = match (fresh.split_last(), self.keep_inside) {
            (Some((&last, [])), true) => inspected(backend.inspect(last, Batching::Natural).await?),
            // The tokens before the last, then the last as that pass would have computed it.
            (Some((&last, before)), true) => {
                backend.prefill(before).await?;
                inspected(backend.inspect(last, Batching::Prefill).await?)
            }
            _ => {
                let layers = backend.layers();
                let pass = backend.forward(fresh, Pass { run_ahead, ..Pass::last(layers) }).await?;
                ran_ahead = pass.ran_ahead;
                (pass.logits, None)
            }
        };
        let forward_tokens = fresh.len();
        self.cached = self.context.len();
        self.stats.target_forward_passes += 1;
        let waited = ms_since(start);
        let forward_ms = match (ran_ahead, self.logits_at, self.returned_at) {
            (true, Some(logits_at), Some(returned_at)) if returned_at >= logits_at && start >= returned_at => {
                let own = (returned_at - logits_at).as_secs_f64() * 1e3;
                let between = (start - returned_at).as_secs_f64() * 1e3;
                own + between.min(self.forward_ms.last().copied().unwrap_or(0.0)) + waited
            }
            _ => waited,
        };
        self.logits_at = Some(Instant::now());

        let sample_start = Instant::now();
        let choice = match self.forced.take() {
            Some(token) => Choice::Forced(token),
            None => Choice::Draw(&mut self.rng),
        };
        let sample = sampler::choose(&logits, &self.context, &self.params.sampling, self.params.top_n, choice)?;
        Ok(Next { sample, logits, forward_ms, forward_tokens, sample_ms: ms_since(sample_start), draft: None, inspection })
    }

    /// How many steps after the next forward pass it asks the backend to run ahead: none
    /// unless each will take the argmax of the logits before (the sampling picks it) or is
    /// asked to be guessed so while sampling ([`Generation::run_ahead_sampled`]), no token is
    /// forced, the cache is kept, no speculative round decides it and no inside is kept; else
    /// the steps still to come by the run's length (none after its last).
    fn runs_ahead(&self) -> usize {
        let guessed = self.params.sampling.picks_argmax() || self.run_ahead_sampled;
        let plain = self.forced.is_none() && self.params.kv_cache && self.params.speculative.is_none() && !self.keep_inside;
        if guessed && plain {
            self.params.max_tokens.saturating_sub(self.completion_len() + 1)
        } else {
            0
        }
    }

    /// Releases text held by the UTF-8 stream and the stop matcher (a stop string that
    /// completes in the very last bytes is still withheld).
    fn release_all(&mut self) -> String {
        let check = self.stop.push(&self.utf8.finish());
        if check.stopped {
            check.emit
        } else {
            check.emit + &self.stop.flush()
        }
    }

    fn finish(&self, reason: FinishReason, text: String) -> Finish {
        let prefill_ms = self.forward_ms.first().copied().unwrap_or(0.0);
        // A fold from +0.0: an empty f64 sum is -0.0, which would print as "-0.0".
        let decode_ms = self.forward_ms.iter().skip(1).fold(0.0, |sum, ms| sum + ms);
        let decoded = self.forward_ms.len().saturating_sub(1);
        let rate = |n: usize, ms: f64| if ms > 0.0 { n as f64 / (ms / 1000.0) } else { 0.0 };
        Finish {
            finish_reason: reason,
            prompt_tokens: self.prompt_len,
            completion_tokens: self.completion_len(),
            prefill_ms,
            decode_ms,
            prefill_tok_s: rate(self.prompt_len, prefill_ms),
            decode_tok_s: rate(decoded, decode_ms),
            text,
            speculative: self.params.speculative.as_ref().map(|_| {
                let mut stats = self.stats.clone();
                stats.acceptance_rate = if stats.draft_tokens > 0 { stats.accepted_tokens as f64 / stats.draft_tokens as f64 } else { 0.0 };
                stats
            }),
        }
    }
}

/// The next step's token before it is appended: its sample, the logits it came from, and
/// what producing it cost.
struct Next {
    sample: Sample,
    logits: Vec<f32>,
    forward_ms: f64,
    forward_tokens: usize,
    sample_ms: f64,
    draft: Option<DraftStep>,
    /// What the pass kept of its inside, where the step was asked to keep it.
    inspection: Option<Inspection>,
}

impl Next {
    fn from_round(d: Decided, forward_ms: f64, forward_tokens: usize, sample_ms: f64) -> Self {
        Next { sample: d.sample, logits: d.logits, forward_ms, forward_tokens, sample_ms, draft: Some(d.draft), inspection: None }
    }
}

/// An inspecting pass's logits and its inspection, as a step keeps them.
fn inspected((logits, inspection): (Vec<f32>, Inspection)) -> (Vec<f32>, Option<Inspection>) {
    (logits, Some(inspection))
}

/// A prompt a backend with `context_len` positions can continue: not empty, and leaving room
/// for at least one generated token.
pub(crate) fn check_prompt(prompt: &[u32], context_len: usize) -> Result<()> {
    if prompt.is_empty() {
        return Err(Error::EmptyPrompt);
    }
    if prompt.len() >= context_len {
        return Err(Error::PromptTooLong { prompt_tokens: prompt.len(), context: context_len });
    }
    Ok(())
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

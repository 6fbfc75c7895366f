//! The one generation loop, for every backend, natively and in wasm:
//! prefill -> logits -> sample -> append -> decode -> ... until EOS, a stop string or the
//! length limit. It is a state machine driven one step at a time ([`Generation::step`]), so
//! a caller can show each step, change the sampling parameters between two steps, or stop.

use serde::{Deserialize, Serialize};
use web_time::Instant;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::sampler::{self, Sample, SamplerRng, SamplingParams, MAX_TOP_N};
use crate::stop::{StopMatcher, MAX_STOP_STRINGS};
use crate::tokenizer::{Tokenizer, Utf8Stream};

/// Everything that shapes one generation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
}

impl Default for GenerateParams {
    fn default() -> Self {
        GenerateParams { sampling: SamplingParams::default(), max_tokens: 128, stop: Vec::new(), seed: 0, top_n: 20 }
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
        Ok(())
    }
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Serialize)]
pub struct StepEvent {
    /// 0-based index of the generated token.
    pub step: usize,
    /// The sampled token.
    pub token_id: u32,
    /// Text that became visible with this step (may be empty while a character or a
    /// possible stop string is incomplete, or hold text of earlier steps).
    pub text: String,
    /// This token's own text, for display.
    pub token_text: String,
    /// The sample and its distribution.
    pub sample: Sample,
    /// Milliseconds of the forward pass that produced this step's logits (the prefill for
    /// step 0, one decode step afterwards).
    pub forward_ms: f64,
    /// Milliseconds spent sampling.
    pub sample_ms: f64,
    /// Tokens in the KV cache after this step's forward pass.
    pub position: usize,
}

/// The summary after the last step.
#[derive(Debug, Clone, Serialize)]
pub struct Finish {
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Tokens generated (including an EOS token).
    pub completion_tokens: usize,
    /// Milliseconds of the prefill (time to first token's logits).
    pub prefill_ms: f64,
    /// Milliseconds of all decode steps.
    pub decode_ms: f64,
    /// Prompt tokens per second in the prefill.
    pub prefill_tok_s: f64,
    /// Generated tokens per second in the decode steps (the first token comes from the prefill).
    pub decode_tok_s: f64,
    /// Text released at the end (held back while it could begin a stop string).
    pub text: String,
}

/// What one call to [`Generation::step`] produced.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Event {
    /// A token was generated.
    Step(StepEvent),
    /// Generation is over; further calls return the same summary.
    Finished(Finish),
}

enum State {
    /// The prompt has not run yet.
    Start,
    /// The last sampled token must be fed back.
    Running { next: u32 },
    /// Over, with this reason and the text still to release.
    Done { reason: FinishReason, tail: String },
}

/// A generation in progress.
pub struct Generation {
    params: GenerateParams,
    prompt_len: usize,
    /// Prompt and generated tokens: the repetition penalty's history.
    context: Vec<u32>,
    eos_ids: Vec<u32>,
    rng: SamplerRng,
    utf8: Utf8Stream,
    stop: StopMatcher,
    state: State,
    completion: usize,
    prefill_ms: f64,
    decode_ms: f64,
}

impl Generation {
    /// Prepares a generation over `prompt` for a backend whose context holds `context_len`.
    pub fn new(prompt: Vec<u32>, params: GenerateParams, tokenizer: &Tokenizer, context_len: usize) -> Result<Self> {
        params.validate()?;
        if prompt.is_empty() {
            return Err(Error::EmptyPrompt);
        }
        if prompt.len() >= context_len {
            return Err(Error::PromptTooLong { prompt_tokens: prompt.len(), context: context_len });
        }
        Ok(Generation {
            prompt_len: prompt.len(),
            context: prompt,
            eos_ids: tokenizer.eos_ids().to_vec(),
            rng: SamplerRng::new(params.seed),
            utf8: Utf8Stream::new(),
            stop: StopMatcher::new(&params.stop),
            state: State::Start,
            completion: 0,
            prefill_ms: 0.0,
            decode_ms: 0.0,
            params,
        })
    }

    /// Changes the sampling parameters; they apply from the next step.
    pub fn set_sampling(&mut self, sampling: SamplingParams) -> Result<()> {
        sampling.validate()?;
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

    /// Whether the generation is over.
    pub fn is_finished(&self) -> bool {
        matches!(self.state, State::Done { .. })
    }

    /// Ends the generation now (the next step reports `cancelled`), releasing held text.
    pub fn cancel(&mut self) {
        if !self.is_finished() {
            let tail = self.release_all();
            self.state = State::Done { reason: FinishReason::Cancelled, tail };
        }
    }

    /// Runs one step: the prefill (first call) or one decode, then samples a token.
    /// After the last token, returns [`Event::Finished`].
    pub async fn step<B: Backend>(&mut self, backend: &mut B, tokenizer: &Tokenizer) -> Result<Event> {
        Ok(self.step_keeping_logits(backend, tokenizer).await?.0)
    }

    /// [`Generation::step`], also handing back the logits the token was sampled from (so a
    /// caller can re-shape this step later with other parameters).
    pub async fn step_keeping_logits<B: Backend>(&mut self, backend: &mut B, tokenizer: &Tokenizer) -> Result<(Event, Option<Vec<f32>>)> {
        let start = Instant::now();
        let logits = match &self.state {
            State::Done { reason, tail } => return Ok((Event::Finished(self.finish(*reason, tail.clone())), None)),
            State::Start => {
                backend.truncate(0);
                let logits = backend.prefill(&self.context).await?;
                self.prefill_ms = ms_since(start);
                logits
            }
            State::Running { next } => {
                let logits = backend.decode(*next).await?;
                self.decode_ms += ms_since(start);
                logits
            }
        };
        let forward_ms = ms_since(start);
        let sample_start = Instant::now();
        let sample = sampler::sample(&logits, &self.context, &self.params.sampling, self.params.top_n, &mut self.rng)?;
        let sample_ms = ms_since(sample_start);
        let token_id = sample.token_id;
        self.context.push(token_id);
        self.completion += 1;

        let mut text;
        if self.eos_ids.contains(&token_id) {
            text = self.release_all();
            self.state = State::Done { reason: FinishReason::Eos, tail: String::new() };
        } else {
            let check = self.stop.push(&self.utf8.push(tokenizer.token_bytes(token_id)));
            text = check.emit;
            if check.stopped {
                self.state = State::Done { reason: FinishReason::Stop, tail: String::new() };
            } else if self.completion >= self.params.max_tokens || backend.position() >= backend.context_len() {
                text.push_str(&self.release_all());
                self.state = State::Done { reason: FinishReason::Length, tail: String::new() };
            } else {
                self.state = State::Running { next: token_id };
            }
        }
        let event = Event::Step(StepEvent {
            step: self.completion - 1,
            token_id,
            text,
            token_text: tokenizer.token_text(token_id),
            sample,
            forward_ms,
            sample_ms,
            position: backend.position(),
        });
        Ok((event, Some(logits)))
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
        let decoded = self.completion.saturating_sub(1);
        let rate = |n: usize, ms: f64| if ms > 0.0 { n as f64 / (ms / 1000.0) } else { 0.0 };
        Finish {
            finish_reason: reason,
            prompt_tokens: self.prompt_len,
            completion_tokens: self.completion,
            prefill_ms: self.prefill_ms,
            decode_ms: self.decode_ms,
            prefill_tok_s: rate(self.prompt_len, self.prefill_ms),
            decode_tok_s: rate(decoded, self.decode_ms),
            text,
        }
    }
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

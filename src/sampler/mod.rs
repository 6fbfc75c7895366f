//! The one sampler: logits in, a token and the whole story of how it was chosen out.
//!
//! # Exact specification
//! Given the model's raw logits `l` over the vocabulary and the tokens already in the context:
//! 1. **Repetition penalty** `r` (1 = off): for every token already in the context,
//!    `l = l / r` if `l > 0`, else `l = l * r`. Call the result the effective logits `e`.
//! 2. **Temperature** `T`: if `T < 1e-5` (including 0) the step is **greedy**: the token
//!    with the largest `e` (the lowest id on ties) is chosen, with probability 1.
//! 3. **Softmax**: `p_i = exp((e_i - max e) / T) / Z` over the whole vocabulary. Tokens are
//!    ranked by `e` descending, ties by lower id first.
//! 4. **Top-k** (0 = off): keep the `k` highest-ranked tokens.
//! 5. **Top-p** (`>= 1` = off): over the top-k survivors, renormalized, keep the smallest
//!    prefix of the ranking whose cumulative probability is `>= p` (the token that crosses
//!    `p` is kept, so `p = 0` keeps exactly one token).
//! 6. **Min-p** (0 = off): keep survivors with `p_i >= min_p * p_max`.
//! 7. **Renormalize** the survivors' `p_i` to sum to 1: `p_filtered`.
//!
//! The **order** ([`SamplerOrder`]) says which distribution steps 5 and 6 measure:
//! `TemperatureFirst` (the default; Hugging Face, WebLLM) filters the softmax at `T` as
//! written above; `TemperatureLast` (llama.cpp) filters the softmax at `T = 1` and applies
//! the temperature afterwards, to the survivors only. Top-k and the ranking do not depend
//! on the order; the survivors' `p_filtered` is always their softmax at `T`, renormalized.
//! 8. **Draw** `u` uniform in `[0, 1)` from a ChaCha8 stream seeded with the run's seed
//!    (the same sequence natively and in wasm) and take the first survivor, in rank order,
//!    whose cumulative `p_filtered` exceeds `u`.
//!
//! Every step also reports what a chart needs: the top candidates with their raw logit,
//! `p` (after temperature), `p_t1` (the same softmax at `T = 1`), `p_filtered` and the
//! filter that cut them; the chosen token's rank and probability; the entropy of `p`;
//! and how many tokens survive each filter. The softmax (`softmax.rs`) uses only basic
//! IEEE-754 arithmetic in a fixed order, so the numbers are bit-identical natively and in
//! wasm; the ranking (`ranking.rs`) is one integer key per token.

pub mod ranking;
pub mod softmax;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use softmax::{softmax, Softmax};

/// Below this temperature a step is greedy.
pub const GREEDY_TEMPERATURE: f32 = 1e-5;
/// Most candidates a step can report.
pub const MAX_TOP_N: usize = 100;

/// Sampling parameters, with OpenAI-style names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
#[serde(default)]
pub struct SamplingParams {
    /// Softmax temperature, 0 to 100; below 1e-5 means greedy.
    pub temperature: f32,
    /// Keep the k most likely tokens; 0 = off.
    pub top_k: usize,
    /// Nucleus: smallest prefix with cumulative probability >= top_p; >= 1 = off.
    pub top_p: f32,
    /// Drop tokens below `min_p` times the top probability; 0 = off.
    pub min_p: f32,
    /// Penalty on tokens already in the context (> 0); 1 = off.
    pub repetition_penalty: f32,
    /// Whether the filters see the distribution before or after the temperature.
    pub order: SamplerOrder,
}

/// Where the temperature stands in the chain (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
#[serde(rename_all = "kebab-case")]
pub enum SamplerOrder {
    /// Temperature, then top-k, top-p and min-p on the tempered distribution.
    #[default]
    TemperatureFirst,
    /// Top-k, top-p and min-p on the temperature-1 distribution, then temperature (llama.cpp).
    TemperatureLast,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.7,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.0,
            repetition_penalty: 1.0,
            order: SamplerOrder::TemperatureFirst,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding (temperature 0, no filters).
    pub fn greedy() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            order: SamplerOrder::TemperatureFirst,
        }
    }

    /// Checks every value is finite and in range; the error names the parameter.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::InvalidParams(msg));
        if !self.temperature.is_finite() || !(0.0..=100.0).contains(&self.temperature) {
            return bad(format!("temperature must be between 0 and 100, got {}", self.temperature));
        }
        if !self.top_p.is_finite() || !(0.0..=1.0).contains(&self.top_p) {
            return bad(format!("top_p must be between 0 and 1, got {}", self.top_p));
        }
        if !self.min_p.is_finite() || !(0.0..=1.0).contains(&self.min_p) {
            return bad(format!("min_p must be between 0 and 1, got {}", self.min_p));
        }
        if !self.repetition_penalty.is_finite() || !(0.01..=100.0).contains(&self.repetition_penalty) {
            return bad(format!("repetition_penalty must be between 0.01 and 100, got {}", self.repetition_penalty));
        }
        Ok(())
    }

    /// Whether this step picks the argmax.
    pub fn is_greedy(&self) -> bool {
        self.temperature < GREEDY_TEMPERATURE
    }

    /// Whether a step always picks the highest-ranked raw logit, whatever it draws: greedy,
    /// or a filter that keeps one token (top-k 1, top-p 0), with no repetition penalty to
    /// change the logits first.
    pub fn picks_argmax(&self) -> bool {
        self.repetition_penalty == 1.0 && (self.is_greedy() || self.top_k == 1 || self.top_p == 0.0)
    }
}

/// The filter that removed a token from the candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
#[serde(rename_all = "snake_case")]
pub enum Filter {
    /// Outside the k highest-ranked tokens.
    TopK,
    /// Outside the nucleus.
    TopP,
    /// Below min_p times the top probability.
    MinP,
    /// Greedy step: only the argmax is kept.
    Greedy,
}

/// One candidate token of a step, for the chart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct Candidate {
    /// Token id.
    pub token_id: u32,
    /// The token's text, filled in by callers that have the tokenizer (the sampler sees ids
    /// only and leaves it empty); kept in exported runs so they read without the model.
    #[serde(default)]
    pub text: String,
    /// The model's raw logit.
    pub logit: f32,
    /// Probability after repetition penalty and temperature, before filtering.
    pub p: f32,
    /// Probability of the same softmax at temperature 1 (no reshaping).
    pub p_t1: f32,
    /// Probability after all filters and renormalization (0 if cut).
    pub p_filtered: f32,
    /// The filter that cut it, if any.
    pub cut_by: Option<Filter>,
}

/// Everything about one step's distribution that a chart or a log needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct Distribution {
    /// The top candidates by effective logit (the raw logit when the penalty is off).
    pub candidates: Vec<Candidate>,
    /// Entropy of `p` in bits.
    pub entropy_bits: f32,
    /// Tokens left after top-k.
    pub after_top_k: usize,
    /// Tokens left after top-p.
    pub after_top_p: usize,
    /// Tokens left after min-p (the ones that can be drawn).
    pub after_min_p: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
}

/// A sampled token with its distribution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct Sample {
    /// The chosen token.
    pub token_id: u32,
    /// Its 0-based rank by effective logit.
    pub rank: usize,
    /// Its probability after temperature (`p`).
    pub p: f32,
    /// Its probability after filtering (`p_filtered`), the one it was drawn with (0 for a
    /// forced token the filters had cut).
    pub p_filtered: f32,
    /// Its surprisal `-log2 p` in bits (the entropy is the mean of this over `p`); `None`
    /// when `p` is 0 (a forced token a greedy step could not draw).
    pub surprisal_bits: Option<f32>,
    /// Whether the token was chosen by the caller instead of drawn.
    pub forced: bool,
    /// The distribution it was drawn from.
    pub distribution: Distribution,
}

/// The seeded random stream behind every draw.
#[derive(Debug, Clone)]
pub struct SamplerRng(ChaCha8Rng);

impl SamplerRng {
    /// A stream from a seed; the same seed gives the same draws on every platform.
    pub fn new(seed: u64) -> Self {
        SamplerRng(ChaCha8Rng::seed_from_u64(seed))
    }

    /// Next uniform number in `[0, 1)`.
    pub fn uniform(&mut self) -> f64 {
        self.0.random::<f64>()
    }
}

/// The distribution after each stage, over the ranked part of the vocabulary.
struct Shaped {
    /// Token ids in rank order (as far as the filters and the display need).
    order: Vec<u32>,
    /// `p` of every token in the vocabulary.
    p: Vec<f32>,
    /// Survivors: the first `kept_*` entries of `order`, after each filter.
    kept_k: usize,
    kept_p: usize,
    kept_min_p: usize,
    entropy_bits: f32,
}

/// Computes the filtered distribution of a step (no draw). Pure: the same inputs always
/// give the same output, so a chart can re-shape a past step when a slider moves.
pub fn distribution(logits: &[f32], context: &[u32], params: &SamplingParams, top_n: usize) -> Result<Distribution> {
    Ok(shape_and_report(logits, context, params, top_n)?.1)
}

/// How a step's token is chosen.
pub enum Choice<'a> {
    /// Drawn from the filtered distribution with this random stream.
    Draw(&'a mut SamplerRng),
    /// Given by the caller (a branch, `--force`); nothing is drawn.
    Forced(u32),
}

/// Samples one token: [`distribution`] followed by the seeded draw.
pub fn sample(logits: &[f32], context: &[u32], params: &SamplingParams, top_n: usize, rng: &mut SamplerRng) -> Result<Sample> {
    choose(logits, context, params, top_n, Choice::Draw(rng))
}

/// [`distribution`] and the step's token: drawn, or forced by the caller (any id in the
/// vocabulary, even one the filters cut; it is reported with its own rank and probability).
pub fn choose(logits: &[f32], context: &[u32], params: &SamplingParams, top_n: usize, choice: Choice) -> Result<Sample> {
    let step = StepDistribution::new(logits, context, params, top_n)?;
    match choice {
        Choice::Draw(rng) => {
            let token = step.draw(rng);
            Ok(step.into_sample(token, false))
        }
        Choice::Forced(id) => {
            if id as usize >= logits.len() {
                return Err(Error::InvalidParams(format!("token {id} is outside the vocabulary of {} tokens", logits.len())));
            }
            Ok(step.into_sample(id, true))
        }
    }
}

/// One step's distribution, shaped once: drawn from, read token by token (speculative
/// decoding's acceptance rule compares two of them), and reported as a [`Sample`].
pub struct StepDistribution {
    shaped: Shaped,
    distribution: Distribution,
    /// The softmax at temperature 1, for candidates past the top ones.
    p_t1: Vec<f32>,
    params: SamplingParams,
    /// The logits after the repetition penalty.
    effective: Vec<f32>,
    /// Sum of the survivors' `p`.
    total: f64,
    greedy: bool,
}

impl StepDistribution {
    /// Shapes a step's logits (steps 1-7 of the specification); `top_n` candidates are
    /// reported.
    pub fn new(logits: &[f32], context: &[u32], params: &SamplingParams, top_n: usize) -> Result<Self> {
        let (shaped, distribution, p_t1, effective) = shape_and_report(logits, context, params, top_n)?;
        let total = survivor_mass(&shaped);
        Ok(StepDistribution { shaped, distribution, p_t1, params: params.clone(), effective, total, greedy: params.is_greedy() })
    }

    /// Step 8: a token drawn with `rng` (the argmax on a greedy step, which draws nothing).
    pub fn draw(&self, rng: &mut SamplerRng) -> u32 {
        let rank = if self.greedy { 0 } else { draw_rank(&self.shaped, self.total, rng) };
        self.shaped.order[rank]
    }

    /// `p_filtered` of every token, `[vocab]` (0 where a filter cut it).
    pub fn probabilities(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.shaped.p.len()];
        for &i in &self.shaped.order[..self.shaped.kept_min_p] {
            out[i as usize] = (self.shaped.p[i as usize] as f64 / self.total) as f32;
        }
        out
    }

    /// The reported candidates and counts.
    pub fn distribution(&self) -> &Distribution {
        &self.distribution
    }

    /// Reports `token_id` too when it is not among the top candidates (appended after them,
    /// with its own rank's filter): speculative decoding shows the token a draft proposed.
    /// `logits` are the ones this step was shaped from.
    pub fn report_also(&mut self, logits: &[f32], token_id: u32) {
        if token_id as usize >= self.p_t1.len() || self.distribution.candidates.iter().any(|c| c.token_id == token_id) {
            return;
        }
        let rank = self.rank_of(token_id);
        let c = candidate(token_id, rank, logits, &self.shaped, &self.p_t1, self.total, &self.params);
        self.distribution.candidates.push(c);
    }

    fn rank_of(&self, token_id: u32) -> usize {
        match self.shaped.order.iter().position(|&t| t == token_id) {
            Some(r) => r,
            None => ranking::rank_of(&self.effective, token_id),
        }
    }

    /// The step reported with `token` as its choice (`forced`: given by the caller).
    pub fn into_sample(self, token_id: u32, forced: bool) -> Sample {
        let kept = &self.shaped.order[..self.shaped.kept_min_p];
        let rank = self.rank_of(token_id);
        let p = self.shaped.p[token_id as usize];
        let p_filtered = if kept.contains(&token_id) { (p as f64 / self.total) as f32 } else { 0.0 };
        let surprisal_bits = (p > 0.0).then(|| -libm::log2(p as f64) as f32);
        Sample { token_id, rank, p, p_filtered, surprisal_bits, forced, distribution: self.distribution }
    }
}

/// Draws `n` tokens from one step's filtered distribution with `rng` (shaped once); returns
/// `(token_id, count)` for every token drawn at least once, most drawn first. Shows that
/// sampling is a draw: a 30% token wins about 30% of the draws.
pub fn draw_many(logits: &[f32], context: &[u32], params: &SamplingParams, n: usize, rng: &mut SamplerRng) -> Result<Vec<(u32, usize)>> {
    let (shaped, ..) = shape_and_report(logits, context, params, 1)?;
    let total = survivor_mass(&shaped);
    let mut counts = vec![0usize; shaped.kept_min_p];
    for _ in 0..n {
        counts[if params.is_greedy() { 0 } else { draw_rank(&shaped, total, rng) }] += 1;
    }
    let mut out: Vec<(u32, usize)> = counts.iter().enumerate().filter(|(_, &c)| c > 0).map(|(r, &c)| (shaped.order[r], c)).collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok(out)
}

/// Sum of the survivors' `p`.
fn survivor_mass(shaped: &Shaped) -> f64 {
    shaped.order[..shaped.kept_min_p].iter().map(|&i| shaped.p[i as usize] as f64).sum()
}

/// Step 8: the rank of the first survivor whose cumulative `p` exceeds a uniform draw.
fn draw_rank(shaped: &Shaped, total: f64, rng: &mut SamplerRng) -> usize {
    let u = rng.uniform() * total;
    let mut acc = 0.0f64;
    for (r, &i) in shaped.order[..shaped.kept_min_p].iter().enumerate() {
        acc += shaped.p[i as usize] as f64;
        if acc > u {
            return r;
        }
    }
    shaped.kept_min_p - 1
}

/// Steps 1-7 and the report of the top `top_n` candidates; also `p_t1` of every token and
/// the effective (penalized) logits.
fn shape_and_report(
    logits: &[f32],
    context: &[u32],
    params: &SamplingParams,
    top_n: usize,
) -> Result<(Shaped, Distribution, Vec<f32>, Vec<f32>)> {
    params.validate()?;
    if logits.is_empty() {
        return Err(Error::InvalidParams("no logits to sample from".into()));
    }
    if let Some(bad) = logits.iter().position(|x| x.is_nan()) {
        return Err(Error::NanLogits { index: bad });
    }
    let top_n = top_n.min(MAX_TOP_N).min(logits.len());
    let effective = penalize(logits, context, params.repetition_penalty);
    let t1 = softmax(&effective, 1.0);
    let shaped = shape(&effective, &t1, params, top_n);
    let p_t1 = t1.p;
    let total = survivor_mass(&shaped);
    let candidates =
        shaped.order[..top_n].iter().enumerate().map(|(rank, &id)| candidate(id, rank, logits, &shaped, &p_t1, total, params)).collect();
    let distribution = Distribution {
        candidates,
        entropy_bits: shaped.entropy_bits,
        after_top_k: shaped.kept_k,
        after_top_p: shaped.kept_p,
        after_min_p: shaped.kept_min_p,
        vocab_size: logits.len(),
    };
    Ok((shaped, distribution, p_t1, effective))
}

/// The chart's view of token `id` at `rank`: its logit, `p`, `p_t1`, `p_filtered` and the
/// filter that cut it.
fn candidate(id: u32, rank: usize, logits: &[f32], shaped: &Shaped, p_t1: &[f32], total: f64, params: &SamplingParams) -> Candidate {
    let i = id as usize;
    let cut_by = if rank < shaped.kept_min_p {
        None
    } else if params.is_greedy() {
        Some(Filter::Greedy)
    } else if rank >= shaped.kept_k {
        Some(Filter::TopK)
    } else if rank >= shaped.kept_p {
        Some(Filter::TopP)
    } else {
        Some(Filter::MinP)
    };
    Candidate {
        token_id: id,
        text: String::new(),
        logit: logits[i],
        p: shaped.p[i],
        p_t1: p_t1[i],
        p_filtered: if cut_by.is_none() { (shaped.p[i] as f64 / total) as f32 } else { 0.0 },
        cut_by,
    }
}

/// Step 1: the repetition penalty on every distinct token of the context.
fn penalize(logits: &[f32], context: &[u32], penalty: f32) -> Vec<f32> {
    let mut e = logits.to_vec();
    if penalty != 1.0 {
        let mut seen: Vec<u32> = context.iter().copied().filter(|&t| (t as usize) < e.len()).collect();
        seen.sort_unstable();
        seen.dedup();
        for t in seen {
            let l = &mut e[t as usize];
            *l = if *l > 0.0 { *l / penalty } else { *l * penalty };
        }
    }
    e
}

/// Steps 2-7 without the draw. `t1` is the softmax of `e` at temperature 1.
fn shape(e: &[f32], t1: &Softmax, params: &SamplingParams, top_n: usize) -> Shaped {
    let vocab = e.len();
    if params.is_greedy() {
        let order = ranking::top(e, top_n.max(1));
        let mut p = vec![0.0; vocab];
        p[order[0] as usize] = 1.0;
        return Shaped { order, p, kept_k: 1, kept_p: 1, kept_min_p: 1, entropy_bits: 0.0 };
    }
    let Softmax { p, entropy_bits } =
        if params.temperature == 1.0 { Softmax { p: t1.p.clone(), entropy_bits: t1.entropy_bits } } else { softmax(e, params.temperature) };
    let entropy_bits = entropy_bits as f32;
    // The distribution top-p and min-p measure (the ranking is the same for both).
    let seen: &[f32] = match params.order {
        SamplerOrder::TemperatureFirst => &p,
        SamplerOrder::TemperatureLast => &t1.p,
    };
    let top_k_on = params.top_k > 0 && params.top_k < vocab;
    let kept_k = if top_k_on { params.top_k } else { vocab };
    let mass = |ids: &[u32]| ids.iter().map(|&i| seen[i as usize] as f64).sum::<f64>();
    let min_p_floor = if params.min_p > 0.0 { params.min_p * seen[ranking::top(e, 1)[0] as usize] } else { 0.0 };

    // Rank only as far as the survivors reach: the top-k, or (top-k off) a prefix that
    // grows until the nucleus or the min-p floor is inside it.
    // With no filter at all every token survives: the whole ranking at once.
    let unfiltered = !top_k_on && params.top_p >= 1.0 && params.min_p <= 0.0;
    let mut want = if top_k_on {
        kept_k.max(top_n)
    } else if unfiltered {
        vocab
    } else {
        top_n.max(256)
    };
    let order = loop {
        let order = ranking::top(e, want.min(vocab));
        let complete = order.len() == vocab
            || top_k_on
            || (params.top_p < 1.0 && mass(&order) >= params.top_p as f64)
            || (params.min_p > 0.0 && order.last().is_some_and(|&i| seen[i as usize] < min_p_floor));
        if complete {
            break order;
        }
        want *= 4;
    };

    let kept_p = if params.top_p >= 1.0 {
        kept_k
    } else {
        let head = &order[..kept_k.min(order.len())];
        let target = params.top_p as f64 * if top_k_on { mass(head) } else { 1.0 };
        let mut acc = 0.0f64;
        head.iter()
            .position(|&i| {
                acc += seen[i as usize] as f64;
                acc >= target
            })
            .map_or(head.len(), |r| r + 1)
    };
    let kept_min_p = if params.min_p <= 0.0 {
        kept_p
    } else {
        order.iter().take(kept_p).take_while(|&&i| seen[i as usize] >= min_p_floor).count().max(1)
    };
    // Every token survives: the draw walks the full ranking.
    let order = if kept_min_p > order.len() { ranking::top(e, vocab) } else { order };
    Shaped { order, p, kept_k, kept_p, kept_min_p, entropy_bits }
}

//! `tokenscope generate`: stream text, or one JSON line per step.

use std::io::Write;

use serde_json::json;

use tokenscope::backend::Backend;
use tokenscope::generate::{Event, GenerateParams, Generation};
use tokenscope::sampler::{SamplerOrder, SamplingParams};
use tokenscope::tokenizer::PromptFormat;
use tokenscope::{Error, Result};

use super::ModelArgs;

#[derive(clap::Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The prompt (with --chat: the user's message).
    prompt: String,
    /// Treat the prompt as a user message in the model's chat template.
    #[arg(long)]
    chat: bool,
    /// System prompt for --chat (default: the model's usual one).
    #[arg(long)]
    system: Option<String>,
    /// Softmax temperature; 0 = greedy.
    #[arg(long, default_value_t = 0.7, allow_negative_numbers = true)]
    temperature: f32,
    /// Keep the k most likely tokens; 0 = off.
    #[arg(long, default_value_t = 40, allow_negative_numbers = true, value_parser = super::count::<usize>)]
    top_k: usize,
    /// Nucleus sampling threshold; 1 = off.
    #[arg(long, default_value_t = 0.95, allow_negative_numbers = true)]
    top_p: f32,
    /// Drop tokens below min_p times the top probability; 0 = off.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    min_p: f32,
    /// Penalty for tokens already in the context; 1 = off.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    repetition_penalty: f32,
    /// Random seed (default: a new one each run).
    #[arg(long, allow_negative_numbers = true, value_parser = super::count::<u64>)]
    seed: Option<u64>,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 128, allow_negative_numbers = true, value_parser = super::count::<usize>)]
    max_tokens: usize,
    /// A string that ends generation (repeatable, up to 4).
    #[arg(long)]
    stop: Vec<String>,
    /// Print one JSON object per step, then a summary line.
    #[arg(long)]
    jsonl: bool,
    /// Candidates per step in --jsonl (up to 100).
    #[arg(long, default_value_t = 20, allow_negative_numbers = true, value_parser = super::count::<usize>)]
    top_n: usize,
    /// Take TOKEN_ID at step STEP (0-based) instead of drawing one (repeatable), as the
    /// page's branches do.
    #[arg(long, value_name = "STEP:TOKEN_ID", value_parser = parse_force)]
    force: Vec<(usize, u32)>,
    /// Recompute the whole sequence at every step instead of keeping the KV cache (same
    /// tokens, more work per step).
    #[arg(long)]
    no_kv_cache: bool,
    /// Whether top-k, top-p and min-p see the distribution before or after the temperature.
    #[arg(long, value_enum, default_value_t = OrderArg::TemperatureFirst)]
    sampler_order: OrderArg,
}

/// `--sampler-order` values.
#[derive(clap::ValueEnum, Debug, Clone, Copy)]
enum OrderArg {
    /// Temperature, then the filters (Hugging Face, WebLLM).
    TemperatureFirst,
    /// The filters at temperature 1, then temperature (llama.cpp).
    TemperatureLast,
}

/// Parses `STEP:TOKEN_ID`.
fn parse_force(s: &str) -> std::result::Result<(usize, u32), String> {
    let (step, token) = s.split_once(':').ok_or_else(|| format!("{s:?} is not STEP:TOKEN_ID (for example 3:1234)"))?;
    let step = step.trim().parse().map_err(|_| format!("the step in {s:?} is not a whole number of 0 or more"))?;
    let token = token.trim().parse().map_err(|_| format!("the token id in {s:?} is not a whole number of 0 or more"))?;
    Ok((step, token))
}

pub fn run(a: GenerateArgs) -> Result<()> {
    let params = GenerateParams {
        sampling: SamplingParams {
            temperature: a.temperature,
            top_k: a.top_k,
            top_p: a.top_p,
            min_p: a.min_p,
            repetition_penalty: a.repetition_penalty,
            order: match a.sampler_order {
                OrderArg::TemperatureFirst => SamplerOrder::TemperatureFirst,
                OrderArg::TemperatureLast => SamplerOrder::TemperatureLast,
            },
        },
        max_tokens: a.max_tokens,
        stop: a.stop.clone(),
        seed: a.seed.unwrap_or_else(random_seed),
        top_n: a.top_n,
        kv_cache: !a.no_kv_cache,
    };
    params.validate()?;
    let (mut backend, tokenizer) = a.model.load()?;
    if let Some((_, bad)) = a.force.iter().find(|(_, t)| *t as usize >= tokenizer.vocab_size()) {
        return Err(Error::InvalidParams(format!("--force token id {bad} is outside the vocabulary of {} tokens", tokenizer.vocab_size())));
    }
    let format = if a.chat { PromptFormat::Chat { system: a.system.clone() } } else { PromptFormat::Completion };
    let prompt = tokenizer.encode_prompt(&format, &a.prompt)?;
    let context = backend.context_len();
    let mut generation = Generation::new(prompt, params, &tokenizer, context)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    loop {
        if let Some(&(_, token)) = a.force.iter().rev().find(|(step, _)| *step == generation.completion_len()) {
            generation.force_next(token);
        }
        match pollster::block_on(generation.step(&mut backend, &tokenizer))? {
            Event::Step(s) => {
                if a.jsonl {
                    let candidates: Vec<_> = s
                        .sample
                        .distribution
                        .candidates
                        .iter()
                        .map(|c| {
                            json!({
                                "token_id": c.token_id,
                                "text": c.text,
                                "logit": c.logit,
                                "p": c.p,
                                "p_t1": c.p_t1,
                                "p_filtered": c.p_filtered,
                                "cut_by": c.cut_by,
                            })
                        })
                        .collect();
                    let d = &s.sample.distribution;
                    let line = json!({
                        "step": s.step,
                        "token_id": s.token_id,
                        "text": s.text,
                        "token_text": s.token_text,
                        "rank": s.sample.rank,
                        "p": s.sample.p,
                        "p_filtered": s.sample.p_filtered,
                        "forced": s.sample.forced,
                        "surprisal_bits": s.sample.surprisal_bits,
                        "entropy_bits": d.entropy_bits,
                        "after_top_k": d.after_top_k,
                        "after_top_p": d.after_top_p,
                        "after_min_p": d.after_min_p,
                        "forward_ms": s.forward_ms,
                        "forward_tokens": s.forward_tokens,
                        "candidates": candidates,
                    });
                    writeln!(out, "{line}").map_err(io_err)?;
                } else {
                    write!(out, "{}", s.text).map_err(io_err)?;
                    out.flush().map_err(io_err)?;
                }
            }
            Event::Finished(f) => {
                if a.jsonl {
                    let line = json!({
                        "finish_reason": f.finish_reason,
                        "prompt_tokens": f.prompt_tokens,
                        "completion_tokens": f.completion_tokens,
                        "prefill_tok_s": f.prefill_tok_s,
                        "decode_tok_s": f.decode_tok_s,
                        "prefill_ms": f.prefill_ms,
                        "decode_ms": f.decode_ms,
                        "text": f.text,
                    });
                    writeln!(out, "{line}").map_err(io_err)?;
                } else {
                    writeln!(out, "{}", f.text).map_err(io_err)?;
                }
                return Ok(());
            }
        }
    }
}

fn random_seed() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0) ^ std::process::id() as u64
}

fn io_err(e: std::io::Error) -> Error {
    Error::Io { context: "cannot write to stdout".into(), source: e }
}

//! `tokenscope generate`: stream text, or one JSON line per step.

use std::io::Write;

use serde_json::json;

use tokenscope::backend::{AnyBackend, Backend};
use tokenscope::generation::beam::{BeamEvent, BeamParams, BeamSearch};
use tokenscope::generation::generate::{Event, GenerateParams, Generation};
use tokenscope::generation::inspect::StepInside;
use tokenscope::sampler::{SamplerOrder, SamplingParams};
use tokenscope::tokenizer::PromptFormat;
use tokenscope::{Error, Result};

use super::speculative_args::SpeculativeArgs;
use super::ModelArgs;

#[derive(clap::Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The prompt (with --chat: the user's message).
    prompt: String,
    /// Treat the prompt as a user message in the model's own chat template
    /// (tokenizer.chat_template; refused when the file has none).
    #[arg(long)]
    chat: bool,
    /// System prompt for --chat (default: whatever the model's template writes, often its usual one).
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
    /// With --jsonl: each step's line also holds `inside`, the step seen from inside: the
    /// attention weights of its pass's last token (`attention[layer][head][position]`), the
    /// logit lens (`lens`: after each layer, the top 5 tokens and the chosen one's rank) and
    /// in a mixture of experts the experts each layer picked for it (`experts[layer]`: each
    /// pick's `expert` and `weight`, most probable first).
    /// Each step's own pass keeps them, on every backend (a speculative round's steps run
    /// their pass once more).
    #[arg(long, requires = "jsonl", conflicts_with = "beams")]
    inspect: bool,
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
    /// Beam search with N beams (1-8) instead of sampling: the N most likely sequences are
    /// kept at each step and the best finished one is the answer (the sampling options do
    /// not apply).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = super::count::<usize>)]
    beams: Option<usize>,
    /// With --beams: a finished beam's score is its log-probability / length^A (A from 0 to 2).
    #[arg(long, value_name = "A", default_value_t = 1.0, allow_negative_numbers = true)]
    length_penalty: f32,
    #[command(flatten)]
    speculative: SpeculativeArgs,
    /// GPU: sampled steps too run the next step ahead on the GPU's argmax of the logits
    /// before (greedy ones always do), taken where the draw was the argmax and dropped
    /// otherwise: the same tokens, for measuring when the GPU starts each step. --jsonl's
    /// summary line counts the steps taken and dropped.
    #[arg(long, conflicts_with = "beams")]
    run_ahead_sampled: bool,
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
/// Refuses a forced step the run never reaches (steps count from 0 to max tokens - 1) and a
/// step forced twice, rather than dropping or overriding one in silence.
fn check_forced_steps(force: &[(usize, u32)], max_tokens: usize) -> Result<()> {
    if let Some((step, token)) = force.iter().find(|(step, _)| *step >= max_tokens) {
        return Err(Error::InvalidParams(format!(
            "--force {step}:{token} is past --max-tokens {max_tokens}: steps count from 0 to {}",
            max_tokens.saturating_sub(1)
        )));
    }
    let mut steps: Vec<usize> = force.iter().map(|(step, _)| *step).collect();
    steps.sort_unstable();
    if let Some(w) = steps.windows(2).find(|w| w[0] == w[1]) {
        return Err(Error::InvalidParams(format!("--force names step {} twice: give each step one token", w[0])));
    }
    Ok(())
}

fn parse_force(s: &str) -> std::result::Result<(usize, u32), String> {
    let (step, token) = s.split_once(':').ok_or_else(|| format!("{s:?} is not STEP:TOKEN_ID (for example 3:1234)"))?;
    let step = step.trim().parse().map_err(|_| format!("the step in {s:?} is not a whole number of 0 or more"))?;
    let token = token.trim().parse().map_err(|_| format!("the token id in {s:?} is not a whole number of 0 or more"))?;
    Ok((step, token))
}

pub fn run(a: GenerateArgs) -> Result<()> {
    if let Some(width) = a.beams {
        return run_beams(&a, width);
    }
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
        speculative: a.speculative.params(),
    };
    params.validate()?;
    let (mut backend, tokenizer) = a.model.load()?;
    if let Some(spec) = &params.speculative {
        spec.layers(backend.layers())?;
    }
    if let Some((_, bad)) = a.force.iter().find(|(_, t)| *t as usize >= tokenizer.vocab_size()) {
        return Err(Error::InvalidParams(format!("--force token id {bad} is outside the vocabulary of {} tokens", tokenizer.vocab_size())));
    }
    check_forced_steps(&a.force, a.max_tokens)?;
    let prompt = prompt_tokens(&a, &tokenizer)?;
    let context = backend.context_len();
    let mut generation = Generation::new(prompt, params, &tokenizer, context)?;
    generation.keep_inside(a.inspect && a.jsonl);
    generation.run_ahead_sampled(a.run_ahead_sampled);
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
                    let mut line = json!({
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
                    if a.inspect {
                        // What the step's own pass kept; a speculative round's steps kept
                        // nothing, and are recomputed.
                        let inside = match pollster::block_on(generation.take_inside(&mut backend, true, &tokenizer))? {
                            Some(inside) => inside,
                            None => pollster::block_on(generation.inspect(&mut backend, s.step, true, &tokenizer))?,
                        };
                        line["inside"] = inside_json(&inside);
                    }
                    if let Some(d) = &s.draft {
                        line["draft"] = json!({
                            "round": d.round,
                            "round_drafted": d.round_drafted,
                            "proposed": d.proposed,
                            "proposed_text": d.proposed_text,
                            "accepted": d.accepted,
                            "p": d.p,
                            "q": d.q,
                        });
                    }
                    writeln!(out, "{line}").map_err(io_err)?;
                } else {
                    write!(out, "{}", s.text).map_err(io_err)?;
                    out.flush().map_err(io_err)?;
                }
            }
            Event::Finished(f) => {
                if a.jsonl {
                    let mut line = json!({
                        "finish_reason": f.finish_reason,
                        "prompt_tokens": f.prompt_tokens,
                        "completion_tokens": f.completion_tokens,
                        "prefill_tok_s": f.prefill_tok_s,
                        "decode_tok_s": f.decode_tok_s,
                        "prefill_ms": f.prefill_ms,
                        "decode_ms": f.decode_ms,
                        "text": f.text,
                    });
                    // Steps the GPU ran ahead on its argmax, taken and dropped (the CPU runs none).
                    let (taken, dropped) = match &backend {
                        AnyBackend::Gpu(g) => (g.run_ahead_counts().taken, g.run_ahead_counts().dropped),
                        AnyBackend::Cpu(_) => (0, 0),
                    };
                    line["run_ahead_taken"] = json!(taken);
                    line["run_ahead_dropped"] = json!(dropped);
                    if let Some(st) = &f.speculative {
                        line["draft_tokens"] = json!(st.draft_tokens);
                        line["accepted_tokens"] = json!(st.accepted_tokens);
                        line["acceptance_rate"] = json!(st.acceptance_rate);
                        line["target_forward_passes"] = json!(st.target_forward_passes);
                        line["draft_forward_passes"] = json!(st.draft_forward_passes);
                        line["tokens_per_forward_pass"] = json!(st.tokens_per_forward_pass(f.completion_tokens));
                    }
                    writeln!(out, "{line}").map_err(io_err)?;
                } else {
                    writeln!(out, "{}", f.text).map_err(io_err)?;
                }
                return Ok(());
            }
        }
    }
}

/// `--inspect`'s `inside` object: the attention weights nested `[layer][head][position]`, the
/// grouping of query heads on KV heads, the logit lens, and a mixture of experts' picks.
fn inside_json(inside: &StepInside) -> serde_json::Value {
    let attention: Vec<Vec<&[f32]>> = inside
        .attention
        .chunks_exact(inside.heads * inside.positions)
        .map(|layer| layer.chunks_exact(inside.positions).collect())
        .collect();
    let mut out = json!({
        "layers": inside.layers,
        "heads": inside.heads,
        "heads_per_kv_head": inside.group,
        "positions": inside.positions,
        "tokens": inside.tokens,
        "attention": attention,
        "lens": inside.lens,
    });
    if !inside.experts.is_empty() {
        out["experts"] = json!(inside.experts);
        out["expert_count"] = json!(inside.expert_count);
    }
    out
}

/// The prompt's tokens: the text itself, or with --chat the model's chat template around it.
fn prompt_tokens(a: &GenerateArgs, tokenizer: &tokenscope::tokenizer::Tokenizer) -> Result<Vec<u32>> {
    let format = if a.chat { PromptFormat::Chat { system: a.system.clone() } } else { PromptFormat::Completion };
    tokenizer.encode_prompt(&format, &a.prompt)
}

/// `generate --beams N`: the best finished beam's text, or with --jsonl one line per step
/// (the live beams) and a last line with every finished beam, best first.
fn run_beams(a: &GenerateArgs, width: usize) -> Result<()> {
    if !a.force.is_empty() || a.no_kv_cache || a.speculative.params().is_some() {
        return Err(Error::InvalidParams("--force, --no-kv-cache and --speculative apply to sampling, not to --beams".into()));
    }
    let params = BeamParams { width, length_penalty: a.length_penalty, max_tokens: a.max_tokens, stop: a.stop.clone() };
    params.validate()?;
    let (mut backend, tokenizer) = a.model.load()?;
    let prompt = prompt_tokens(a, &tokenizer)?;
    let mut search = BeamSearch::new(prompt, params, &tokenizer, backend.context_len())?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    loop {
        match pollster::block_on(search.step(&mut backend, &tokenizer))? {
            BeamEvent::Step(s) => {
                if a.jsonl {
                    writeln!(out, "{}", json!(s)).map_err(io_err)?;
                }
            }
            BeamEvent::Finished(f) => {
                let best = f.beams.first().ok_or_else(|| Error::Backend("the beam search finished no beam".into()))?;
                if a.jsonl {
                    let line = json!({
                        "finish_reason": best.finish_reason,
                        "text": best.text,
                        "prompt_tokens": f.prompt_tokens,
                        "completion_tokens": best.token_ids.len(),
                        "forward_tokens": f.forward_tokens,
                        "forward_ms": f.forward_ms,
                        "beams": f.beams,
                    });
                    writeln!(out, "{line}").map_err(io_err)?;
                } else {
                    writeln!(out, "{}", best.text).map_err(io_err)?;
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

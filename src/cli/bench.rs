//! `tokenscope bench`: prefill and decode speed on a fixed prompt, median of several runs.

use serde_json::json;
use web_time::Instant;

use tokenscope::backend::gpu::step::check_run_ahead_steps;
use tokenscope::backend::{AnyBackend, Backend, Pass};
use tokenscope::generation::generate::{Event, Finish, GenerateParams, Generation};
use tokenscope::generation::speculative::{Drafter, SpeculativeParams};
use tokenscope::sampler::SamplingParams;
use tokenscope::tokenizer::{PromptFormat, Tokenizer};
use tokenscope::Result;

use super::speculative_args::SpeculativeArgs;
use super::ModelArgs;

/// A fixed prompt of ordinary English prose, so runs are comparable.
const BENCH_PROMPT: &str = "The history of the printing press begins in the fifteenth century, when \
Johannes Gutenberg combined movable metal type, oil-based ink and a wooden screw press into a \
system that could produce books quickly and cheaply. Within a few decades, presses had spread to \
more than two hundred cities across Europe, and the number of books in circulation grew from \
thousands to millions. Scholars, merchants and ordinary readers suddenly had access to texts";

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Timed runs (the median is reported).
    #[arg(long, default_value_t = 3, allow_negative_numbers = true, value_parser = super::count::<usize>)]
    runs: usize,
    /// Decode steps per run.
    #[arg(long, default_value_t = 32, allow_negative_numbers = true, value_parser = super::count::<usize>)]
    decode_tokens: usize,
    /// Prefill only the first N tokens of the fixed prompt (default: all 81; a software GPU
    /// adapter is slow).
    #[arg(long, allow_negative_numbers = true, value_parser = super::count::<usize>)]
    prompt_tokens: Option<usize>,
    /// Prefill this file's text instead of the fixed prompt (`make bench` uses a short
    /// prompt and one of about 256 tokens); at most the context's worth of it is read.
    #[arg(long, value_name = "PATH")]
    prompt_file: Option<std::path::PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// GPU only: also time each kernel of the decode step right after the prompt (as the page's profile does; GPU timestamps inside the step's one pass where the adapter has them, else at the edges of a pass per dispatch, else every dispatch submitted alone), the whole step's GPU time (timestamps at its ends only, the least of 3 runs) and the share of the step spent outside the GPU.
    #[arg(long)]
    profile: bool,
    /// GPU only: encode each decode step's commands just before its submit, instead of while
    /// the GPU runs the step before (the default). For measuring what encoding ahead saves.
    #[arg(long)]
    no_encode_ahead: bool,
    /// Decode without running ahead: by default each decode step asks the backend to run
    /// the next one on the argmax of its logits (the greedy choice) before they are read
    /// back, as greedy generation does, so the GPU need not wait for the CPU between steps
    /// (the CPU backends ignore it). For measuring what running ahead saves.
    #[arg(long)]
    no_run_ahead: bool,
    /// GPU only: decode steps kept submitted ahead while running ahead, 1 (the default) to 3,
    /// each on the GPU's argmax of the one before: more hides a longer readback round trip.
    /// For measuring on a GPU.
    #[arg(long, value_parser = super::count::<usize>, conflicts_with = "no_run_ahead")]
    run_ahead_steps: Option<usize>,
    /// Wrap the prompt in the model's chat template (as a user message).
    #[arg(long)]
    chat: bool,
    /// With --speculative: also decode with speculative decoding (greedy, through the
    /// generation loop) and report both speeds, the acceptance rate and the model passes per
    /// token.
    #[command(flatten)]
    speculative: SpeculativeArgs,
}

/// Bytes of prompt text read per token of context: far more than any token takes, so a file
/// that fits the context is read whole, and one that does not is still refused by its tokens.
const PROMPT_BYTES_PER_TOKEN: u64 = 64;

/// The prompt file's text, at most the context's worth of it (a huge file is not read whole),
/// cut at the last whole UTF-8 character; a FIFO, socket, device or folder is refused at once.
fn read_prompt_file(path: &std::path::Path, context: usize) -> Result<String> {
    use std::io::Read;
    let io = |source| tokenscope::Error::Io { context: format!("cannot read the prompt file {}", path.display()), source };
    if !std::fs::metadata(path).map_err(io)?.is_file() {
        return Err(tokenscope::Error::InvalidParams(format!("the prompt file {} is not a regular file", path.display())));
    }
    let limit = (context as u64).saturating_mul(PROMPT_BYTES_PER_TOKEN);
    let mut bytes = Vec::new();
    std::fs::File::open(path).map_err(io)?.take(limit).read_to_end(&mut bytes).map_err(io)?;
    match String::from_utf8(bytes) {
        Ok(text) => Ok(text),
        // Cut inside a character at the limit: keep what came before it.
        Err(e) if e.utf8_error().error_len().is_none() => {
            let valid = e.utf8_error().valid_up_to();
            let mut bytes = e.into_bytes();
            bytes.truncate(valid);
            Ok(String::from_utf8(bytes).unwrap_or_default())
        }
        Err(e) => Err(tokenscope::Error::InvalidParams(format!(
            "the prompt file {} is not UTF-8 text (byte {} is not): give it text",
            path.display(),
            e.utf8_error().valid_up_to()
        ))),
    }
}

/// Refuses a logit that is NaN: broken weights, named as `generate` names them (exit 2).
fn check_logits(logits: &[f32]) -> Result<()> {
    match logits.iter().position(|v| v.is_nan()) {
        Some(index) => Err(tokenscope::Error::NanLogits { index }),
        None => Ok(()),
    }
}

pub fn run(a: BenchArgs) -> Result<()> {
    if a.runs == 0 {
        return Err(tokenscope::Error::InvalidParams("--runs 0 times nothing: choose at least 1".into()));
    }
    if a.prompt_tokens == Some(0) {
        return Err(tokenscope::Error::InvalidParams("--prompt-tokens 0 prefills nothing: choose at least 1".into()));
    }
    if let Some(n) = a.run_ahead_steps {
        check_run_ahead_steps(n)?;
    }
    let (mut backend, tokenizer) = a.model.load()?;
    match &mut backend {
        AnyBackend::Gpu(g) => {
            g.set_encode_ahead(!a.no_encode_ahead);
            if let Some(steps) = a.run_ahead_steps {
                g.set_run_ahead_steps(steps)?;
            }
        }
        AnyBackend::Cpu(_) if a.no_encode_ahead || a.run_ahead_steps.is_some() => {
            return Err(tokenscope::Error::InvalidParams(
                "--no-encode-ahead and --run-ahead-steps are about GPU commands: use them with --backend gpu".into(),
            ))
        }
        AnyBackend::Cpu(_) => {}
    }
    let text = match &a.prompt_file {
        Some(path) => read_prompt_file(path, backend.context_len())?,
        None => BENCH_PROMPT.to_string(),
    };
    let format = if a.chat { PromptFormat::Chat { system: None } } else { PromptFormat::Completion };
    let mut prompt = tokenizer.encode_prompt(&format, &text)?;
    if prompt.is_empty() {
        return Err(tokenscope::Error::InvalidParams("the prompt is empty: give it some text".into()));
    }
    prompt.truncate(a.prompt_tokens.unwrap_or(usize::MAX));
    let context = backend.context_len();
    if prompt.len() + a.decode_tokens > context {
        return Err(tokenscope::Error::InvalidParams(format!(
            "the prompt is {} tokens and --decode-tokens {}, more than the context of {context}: shorten the prompt, lower --decode-tokens or raise --context",
            prompt.len(),
            a.decode_tokens
        )));
    }
    let runs = a.runs;
    let (mut prefill, mut decode) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        backend.truncate(0);
        let t = Instant::now();
        let mut logits = pollster::block_on(backend.prefill(&prompt))?;
        prefill.push(prompt.len() as f64 / t.elapsed().as_secs_f64());
        check_logits(&logits)?;
        let t = Instant::now();
        for left in (0..a.decode_tokens).rev() {
            let next = tokenscope::sampler::ranking::top(&logits, 1)[0];
            // As greedy generation asks: no run-ahead past the last step.
            let run_ahead = if a.no_run_ahead { 0 } else { left };
            let layers = backend.layers();
            logits = pollster::block_on(backend.forward(&[next], Pass { run_ahead, ..Pass::last(layers) }))?.logits;
        }
        check_logits(&logits)?;
        decode.push(a.decode_tokens as f64 / t.elapsed().as_secs_f64());
    }
    let (p, d) = (median(&mut prefill), median(&mut decode));
    let (encode_seconds, run_ahead) = match &backend {
        AnyBackend::Gpu(g) => (g.encode_seconds_per_step(), Some(g.run_ahead_counts())),
        AnyBackend::Cpu(_) => (None, None),
    };
    let speculative = match a.speculative.params() {
        Some(spec) => {
            spec.validate()?;
            spec.layers(backend.layers())?;
            Some(compare_speculative(&mut backend, &tokenizer, &prompt, spec, a.decode_tokens, runs)?)
        }
        None => None,
    };
    let profile = match (&mut backend, a.profile) {
        // The step right after the prompt, as the page's profile (`Engine.profile`) times it,
        // so the two compare the same kernels at the same position.
        (AnyBackend::Gpu(g), true) => {
            g.truncate(0);
            pollster::block_on(g.prefill(&prompt))?;
            Some(pollster::block_on(g.profile_decode(prompt[0]))?)
        }
        (_, true) => return Err(tokenscope::Error::InvalidParams("--profile times GPU kernels: use it with --backend gpu".into())),
        _ => None,
    };
    let info = backend.info();
    let gpu = match &backend {
        AnyBackend::Gpu(g) => Some(g.step_shape()),
        _ => None,
    };
    let weight_bytes = match &backend {
        AnyBackend::Cpu(c) => c.weight_bytes() as u64,
        AnyBackend::Gpu(g) => g.weight_bytes(),
    };
    if a.json {
        let mut out = json!({
            "backend": info.name,
            "device": info.device,
            "prompt_tokens": prompt.len(),
            "decode_tokens": a.decode_tokens,
            "runs": runs,
            "prefill_tok_s": p,
            "decode_tok_s": d,
            "kv_cache_bytes": backend.kv_cache_bytes(),
            "weight_bytes_per_token": weight_bytes,
        });
        if let Some(k) = &info.gpu_kernels {
            out["gpu_kernels"] = json!(k);
        }
        if let AnyBackend::Gpu(g) = &backend {
            out["threads_per_row"] = json!(g.kernel_options().threads_per_row);
            out["prefill_threads_per_row"] = json!(g.kernel_options().prefill_threads_per_row);
            out["matrix_workgroup"] = json!(g.kernel_options().workgroup);
            out["units_in_flight"] = json!(g.kernel_options().units_in_flight);
            out["units_in_flight_fit"] = json!(g.kernel_options().fit_units_in_flight);
            out["rows_per_subgroup"] = json!(g.kernel_options().rows_per_subgroup);
            out["split_k_chunk"] = json!(g.kernel_options().split_chunk);
        }
        if let Some(s) = &gpu {
            out["dispatches_per_step"] = json!(s.dispatches);
            out["dispatches_per_step_long_context"] = json!(s.dispatches_long_context);
            out["fused_attention_positions"] = json!(s.fused_positions);
            out["per_head_attention_layers"] = json!(s.per_head_layers);
            out["passes_per_step"] = json!(s.passes);
            out["submits_per_step"] = json!(s.submits);
            out["readback_bytes_per_step"] = json!(s.readback_bytes);
            out["gpu_bytes"] = json!(s.gpu_bytes);
            out["prefill_batch"] = json!(s.prefill_batch);
            out["encode_s_per_step"] = json!(encode_seconds);
            out["encode_ahead"] = json!(!a.no_encode_ahead);
            out["run_ahead"] = json!(!a.no_run_ahead);
            out["run_ahead_steps"] = json!(match &backend {
                AnyBackend::Gpu(g) if !a.no_run_ahead => g.run_ahead_steps(),
                _ => 0,
            });
        }
        if let Some(r) = &run_ahead {
            out["run_ahead_taken"] = json!(r.taken);
            out["run_ahead_dropped"] = json!(r.dropped);
        }
        if let Some(p) = &profile {
            out["profile"] = json!(p.kernels);
            out["profile_method"] = json!(p.method);
            out["profile_gpu_s"] = json!(p.gpu_seconds);
            out["profile_step_wall_s"] = json!(p.wall_seconds);
            out["profile_step_gpu_s"] = json!(p.step_gpu_seconds);
            out["profile_dispatch_floor_s"] = json!(p.dispatch_floor_seconds);
            out["profile_dispatch_floor_timed_each_s"] = json!(p.dispatch_floor_seconds_timed_each);
            out["profile_readback_s"] = json!(p.readback_seconds);
            out["profile_readback_word_s"] = json!(p.readback_word_seconds);
        }
        if let Some(s) = &speculative {
            out["speculative"] = json!(s);
        }
        println!("{out}");
    } else {
        println!("backend {} on {}", info.name, info.device);
        println!("prefill {p:.1} tok/s ({} prompt tokens, median of {runs})", prompt.len());
        println!("decode  {d:.1} tok/s ({} tokens, median of {runs})", a.decode_tokens);
        println!("weights read per decoded token: {:.1} MB", weight_bytes as f64 / 1e6);
        if let Some(s) = &gpu {
            let past = if s.fused_positions == 0 {
                "split-K attention from the first step".to_string()
            } else {
                format!("{} past {} positions", s.dispatches_long_context, s.fused_positions)
            };
            println!(
                "per decode step: {} dispatches ({past}), {} compute pass, {} submit, {} bytes read back; GPU memory {:.1} MB",
                s.dispatches,
                s.passes,
                s.submits,
                s.readback_bytes,
                s.gpu_bytes as f64 / 1e6
            );
            if s.per_head_layers > 0 {
                println!(
                    "short context: the output projection per query head in {} layers (--per-head-attention), the feed-forward merging the heads' parts",
                    s.per_head_layers
                );
            }
            println!("prefill: up to {} prompt tokens per pass (one submit each)", s.prefill_batch);
            if let Some(e) = encode_seconds {
                let when = if a.no_encode_ahead { "before its submit (--no-encode-ahead)" } else { "while the GPU runs the step before" };
                println!("encoding a decode step's commands: {:.3} ms of CPU, {when}", e * 1e3);
            }
        }
        if let Some(r) = &run_ahead {
            if a.no_run_ahead {
                println!("run-ahead: off (--no-run-ahead): each decode step waits for the CPU's choice");
            } else {
                let steps = match &backend {
                    AnyBackend::Gpu(g) => g.run_ahead_steps(),
                    AnyBackend::Cpu(_) => 0,
                };
                println!(
                    "run-ahead: each decode step submitted on the GPU's argmax of the step before, before its logits were read back, {steps} kept ahead: {} taken as run, {} dropped",
                    r.taken, r.dropped
                );
            }
        }
        if let (Some(k), AnyBackend::Gpu(g)) = (&info.gpu_kernels, &backend) {
            let o = g.kernel_options();
            println!(
                "GPU kernels: {k}, {} per matrix row ({} in prefill), {} per matrix workgroup, {}, split-K attention in chunks of {} positions",
                threads(o.threads_per_row),
                o.prefill_threads_per_row,
                o.workgroup,
                o.units_in_flight_words(),
                o.split_chunk
            );
        }
        if let Some(s) = &speculative {
            println!(
                "speculative ({}, {} drafted per round{}), greedy through the generation loop, median of {runs}:",
                s.drafter,
                s.draft_tokens,
                s.draft_layers.map(|l| format!(", {l} layers")).unwrap_or_default()
            );
            println!("  plain       {:.1} tok/s", s.plain_decode_tok_s);
            println!(
                "  speculative {:.1} tok/s ({:.2}x), {:.0}% of drafted tokens kept, {:.2} tokens per model pass, same tokens: {}",
                s.speculative_decode_tok_s,
                s.speed_up,
                100.0 * s.acceptance_rate,
                s.tokens_per_forward_pass,
                s.same_tokens
            );
        }
        if let Some(p) = &profile {
            for line in p.lines() {
                println!("{line}");
            }
        }
    }
    Ok(())
}

/// Plain against speculative decoding on one prompt.
#[derive(serde::Serialize)]
struct SpeculativeBench {
    drafter: &'static str,
    draft_tokens: usize,
    draft_layers: Option<usize>,
    /// Tokens generated per run (EOS may end a run early).
    completion_tokens: usize,
    plain_decode_tok_s: f64,
    speculative_decode_tok_s: f64,
    speed_up: f64,
    acceptance_rate: f64,
    tokens_per_forward_pass: f64,
    /// Whether both produced the same tokens (they must, at temperature 0).
    same_tokens: bool,
}

/// Greedy generations of `max_tokens` with and without `spec`, `runs` times each, in turn.
fn compare_speculative(
    backend: &mut AnyBackend,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    spec: SpeculativeParams,
    max_tokens: usize,
    runs: usize,
) -> Result<SpeculativeBench> {
    let params = |speculative| GenerateParams { sampling: SamplingParams::greedy(), max_tokens, speculative, ..GenerateParams::default() };
    let (mut plain, mut fast) = (Vec::new(), Vec::new());
    let mut last = None;
    for _ in 0..runs {
        let (plain_ids, plain_finish) = generate(backend, tokenizer, prompt, params(None))?;
        let (ids, finish) = generate(backend, tokenizer, prompt, params(Some(spec.clone())))?;
        plain.push(plain_finish.decode_tok_s);
        fast.push(finish.decode_tok_s);
        last = Some((plain_ids == ids, finish));
    }
    let (same_tokens, finish) = last.ok_or_else(|| tokenscope::Error::InvalidParams("no run".into()))?;
    let stats = finish.speculative.unwrap_or_default();
    let (p, s) = (median(&mut plain), median(&mut fast));
    Ok(SpeculativeBench {
        drafter: match spec.drafter {
            Drafter::SelfDraft => "self",
            Drafter::Lookup => "lookup",
        },
        draft_tokens: spec.draft_tokens,
        draft_layers: (spec.drafter == Drafter::SelfDraft).then(|| spec.layers(backend.layers())).transpose()?,
        completion_tokens: finish.completion_tokens,
        plain_decode_tok_s: p,
        speculative_decode_tok_s: s,
        speed_up: if p > 0.0 { s / p } else { 0.0 },
        acceptance_rate: stats.acceptance_rate,
        tokens_per_forward_pass: stats.tokens_per_forward_pass(finish.completion_tokens),
        same_tokens,
    })
}

/// One generation to the end: its tokens and summary.
fn generate(backend: &mut AnyBackend, tokenizer: &Tokenizer, prompt: &[u32], params: GenerateParams) -> Result<(Vec<u32>, Finish)> {
    backend.truncate(0);
    let mut g = Generation::new(prompt.to_vec(), params, tokenizer, backend.context_len())?;
    let mut ids = Vec::new();
    loop {
        match pollster::block_on(g.step(backend, tokenizer))? {
            Event::Step(s) => ids.push(s.token_id),
            Event::Finished(f) => return Ok((ids, f)),
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// "1 thread" or "N threads".
fn threads(n: u32) -> String {
    format!("{n} thread{}", if n == 1 { "" } else { "s" })
}

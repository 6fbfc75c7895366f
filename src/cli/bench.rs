//! `tokenscope bench`: prefill and decode speed on a fixed prompt, median of several runs.

use serde_json::json;
use web_time::Instant;

use tokenscope::backend::{AnyBackend, Backend};
use tokenscope::Result;

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
    /// prompt and one of about 256 tokens).
    #[arg(long, value_name = "PATH")]
    prompt_file: Option<std::path::PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// GPU only: also time each kernel of one decode step (every dispatch submitted alone).
    #[arg(long)]
    profile: bool,
}

pub fn run(a: BenchArgs) -> Result<()> {
    let (mut backend, tokenizer) = a.model.load()?;
    let text = match &a.prompt_file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|source| tokenscope::Error::Io { context: format!("cannot read the prompt file {}", path.display()), source })?,
        None => BENCH_PROMPT.to_string(),
    };
    let mut prompt = tokenizer.encode(&text)?;
    if prompt.is_empty() {
        return Err(tokenscope::Error::InvalidParams("the prompt is empty: give it some text".into()));
    }
    prompt.truncate(a.prompt_tokens.unwrap_or(usize::MAX).max(1));
    let runs = a.runs.max(1);
    let (mut prefill, mut decode) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        backend.truncate(0);
        let t = Instant::now();
        let mut logits = pollster::block_on(backend.prefill(&prompt))?;
        prefill.push(prompt.len() as f64 / t.elapsed().as_secs_f64());
        let t = Instant::now();
        for _ in 0..a.decode_tokens {
            let next = argmax(&logits);
            logits = pollster::block_on(backend.decode(next))?;
        }
        decode.push(a.decode_tokens as f64 / t.elapsed().as_secs_f64());
    }
    let (p, d) = (median(&mut prefill), median(&mut decode));
    let profile = match (&mut backend, a.profile) {
        (AnyBackend::Gpu(g), true) => Some(g.profile_decode(prompt[0])?),
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
        if let Some(s) = &gpu {
            out["dispatches_per_step"] = json!(s.dispatches);
            out["dispatches_per_step_long_context"] = json!(s.dispatches_long_context);
            out["passes_per_step"] = json!(s.passes);
            out["submits_per_step"] = json!(s.submits);
            out["readback_bytes_per_step"] = json!(s.readback_bytes);
            out["gpu_bytes"] = json!(s.gpu_bytes);
            out["prefill_batch"] = json!(s.prefill_batch);
        }
        if let Some(p) = &profile {
            out["profile"] = json!(p);
        }
        println!("{out}");
    } else {
        println!("backend {} on {}", info.name, info.device);
        println!("prefill {p:.1} tok/s ({} prompt tokens, median of {runs})", prompt.len());
        println!("decode  {d:.1} tok/s ({} tokens, median of {runs})", a.decode_tokens);
        println!("weights read per decoded token: {:.1} MB", weight_bytes as f64 / 1e6);
        if let Some(s) = &gpu {
            println!(
                "per decode step: {} dispatches ({} past {} positions), {} compute pass, {} submit, {} bytes read back; GPU memory {:.1} MB",
                s.dispatches,
                s.dispatches_long_context,
                tokenscope::backend::gpu::kernels::ATTENTION_CHUNK,
                s.passes,
                s.submits,
                s.readback_bytes,
                s.gpu_bytes as f64 / 1e6
            );
            println!("prefill: up to {} prompt tokens per pass (one submit each)", s.prefill_batch);
        }
        if let Some(p) = &profile {
            let total: f64 = p.iter().map(|k| k.seconds).sum();
            println!("one decode step by kernel (each dispatch submitted alone, empty-submit time taken off):");
            for k in p {
                let bandwidth = if k.weight_bytes > 0 {
                    format!("  {:>7.1} MB of weights at {:>7.1} GB/s", k.weight_bytes as f64 / 1e6, k.weight_gb_per_s)
                } else {
                    String::new()
                };
                println!(
                    "  {:<24} {:>4} dispatches {:>9.2} ms {:>5.1}%{bandwidth}",
                    k.kernel,
                    k.dispatches,
                    k.seconds * 1e3,
                    100.0 * k.seconds / total.max(1e-12)
                );
            }
        }
    }
    Ok(())
}

fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

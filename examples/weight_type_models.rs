//! Writes a small random-weight model for each weight type the engine reads, and the exact CPU
//! path's greedy run on each of them and on each architecture's fixture (the tiny llama, Llama 3,
//! qwen2, qwen3, gemma2, gemma3, smollm3 and phi3 (with and without LongRoPE, and Phi-4-mini's partial RoPE) models in tests/fixtures/architectures that tests/architectures.rs holds to
//! llama.cpp's logits), for the test that every type's kernels and every architecture run in the
//! page on both engines (tests/e2e/weight_types.test.mjs):
//!
//! ```text
//! cargo run --release --example weight_type_models -- models/synthetic/types
//! ```
//! (`make type-models` does this.) Each model is [`SyntheticSpec::of_type`]: every matrix, the
//! embedding and the tied LM head in that type. `reference.json` holds, per model (`name`: the
//! type, or the architecture fixture's file; `file`: its path from the repository's root), the
//! prompt's token ids (completion format) and for each of [`STEPS`] greedy steps the chosen
//! token and the 40 highest logits, `[token id, logit]`, from `CpuPrecision::Exact`.

use std::io::Cursor;

use tokenscope::backend::cpu::{CpuBackend, CpuPrecision};
use tokenscope::backend::Backend;
use tokenscope::gguf::{type_name, SUPPORTED_TYPES};
use tokenscope::model::synthetic::{SyntheticModel, SyntheticSpec};
use tokenscope::model::Model;
use tokenscope::tokenizer::PromptFormat;

/// The prompt every model continues.
const PROMPT: &str = "the cat sat on the mat and";
/// Greedy steps recorded.
const STEPS: usize = 8;
/// Candidates recorded per step.
const TOP: usize = 40;
/// The architecture fixtures (tests/fixtures/architectures) run too.
const ARCHITECTURE_FIXTURES: [&str; 63] = [
    "llama-linear-rope.gguf",
    "llama3-rope-factors.gguf",
    "qwen2.gguf",
    "qwen3.gguf",
    "gemma2.gguf",
    "gemma3.gguf",
    "smollm3.gguf",
    "phi3.gguf",
    "phi3-longrope-short.gguf",
    "phi3-longrope-long.gguf",
    "phi4-mini-partial-rope.gguf",
    "granite.gguf",
    "granite4.gguf",
    "olmo2.gguf",
    "olmo3.gguf",
    "qwen3-yarn.gguf",
    "ernie4_5.gguf",
    "exaone4.gguf",
    "gemma.gguf",
    "exaone.gguf",
    "minicpm.gguf",
    "internlm2.gguf",
    "glm4.gguf",
    "stablelm.gguf",
    "stablelm-3b.gguf",
    "gpt2.gguf",
    "phi2.gguf",
    "gptneox.gguf",
    "gptneox-sequential.gguf",
    "starcoder.gguf",
    "starcoder2.gguf",
    "bloom.gguf",
    "arcee.gguf",
    "nemotron.gguf",
    "mistral3.gguf",
    "command-r.gguf",
    "cohere2.gguf",
    "olmo.gguf",
    "olmo-1.7.gguf",
    "hunyuan-dense.gguf",
    "qwen2vl.gguf",
    "qwen3vl.gguf",
    "glm4v.gguf",
    "chatglm.gguf",
    "maincoder.gguf",
    "refact.gguf",
    "falcon.gguf",
    "falcon-40b.gguf",
    "mpt.gguf",
    "baichuan-7b.gguf",
    "baichuan-13b.gguf",
    "orion.gguf",
    "xverse.gguf",
    "plamo.gguf",
    "codeshell.gguf",
    "qwen.gguf",
    "seed_oss.gguf",
    "bitnet.gguf",
    "lfm2.gguf",
    "qwen3moe.gguf",
    "llama-moe.gguf",
    "granitemoe.gguf",
    "olmoe.gguf",
];

/// The `TOP` highest logits, `[id, logit]`, highest first.
fn top(logits: &[f32]) -> Vec<(u32, f32)> {
    let mut ids: Vec<(u32, f32)> = logits.iter().enumerate().map(|(i, &l)| (i as u32, l)).collect();
    ids.sort_by(|a, b| b.1.total_cmp(&a.1));
    ids.truncate(TOP);
    ids
}

/// The exact CPU path's greedy run on the model in `bytes`, as a reference entry.
fn reference(name: &str, file: &str, bytes: Vec<u8>) -> tokenscope::Result<serde_json::Value> {
    let model = Model::read(&mut Cursor::new(bytes), &mut |_, _| {})?;
    let prompt = model.tokenizer.encode_prompt(&PromptFormat::Completion, PROMPT)?;
    let mut cpu = CpuBackend::new(&model.config, model.weights, CpuPrecision::Exact, None)?;
    let mut logits = pollster::block_on(cpu.prefill(&prompt))?;
    let mut steps = Vec::new();
    for step in 0..STEPS {
        let best = top(&logits);
        let token = best[0].0;
        steps.push(serde_json::json!({ "token": token, "top": best }));
        if step + 1 < STEPS {
            logits = pollster::block_on(cpu.decode(token))?;
        }
    }
    Ok(serde_json::json!({ "name": name, "file": file, "prompt_ids": prompt, "steps": steps }))
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> tokenscope::Error {
    move |source| tokenscope::Error::Io { context, source }
}

/// Writes the models and `reference.json` into `dir`, a path from the repository's root.
fn run(dir: &str) -> tokenscope::Result<()> {
    std::fs::create_dir_all(dir).map_err(io(format!("cannot create {dir}")))?;
    let mut models = Vec::new();
    for t in SUPPORTED_TYPES {
        let name = type_name(t);
        let bytes = SyntheticModel::new(&SyntheticSpec::of_type(t))?.to_bytes()?;
        let file = std::path::Path::new(dir).join(format!("{name}.gguf")).display().to_string();
        std::fs::write(&file, &bytes).map_err(io(format!("cannot write {file}")))?;
        println!("wrote {file} ({} bytes)", bytes.len());
        models.push(reference(name, &file, bytes)?);
    }
    for name in ARCHITECTURE_FIXTURES {
        let file = format!("tests/fixtures/architectures/{name}");
        let bytes = std::fs::read(&file).map_err(io(format!("cannot read {file}")))?;
        models.push(reference(name, &file, bytes)?);
    }
    let reference =
        serde_json::json!({ "made_by": "examples/weight_type_models.rs, CpuPrecision::Exact", "prompt": PROMPT, "models": models });
    let path = std::path::Path::new(dir).join("reference.json");
    std::fs::write(&path, reference.to_string()).map_err(io(format!("cannot write {}", path.display())))?;
    println!("wrote {}", path.display());
    Ok(())
}

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: weight_type_models DIR (from the repository's root)");
        std::process::exit(2);
    };
    if let Err(e) = run(dir.trim_end_matches('/')) {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}

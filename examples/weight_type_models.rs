//! Writes a small random-weight model for each weight type the engine reads, and the exact CPU
//! path's greedy run on each, for the test that every type's kernels run in the page on
//! WebGPU (tests/e2e/weight_types.test.mjs):
//!
//! ```text
//! cargo run --release --example weight_type_models -- models/synthetic/types
//! ```
//! (`make type-models` does this.) Each model is [`SyntheticSpec::of_type`]: every matrix, the
//! embedding and the tied LM head in that type. `reference.json` holds, per model, the prompt's
//! token ids (completion format) and for each of [`STEPS`] greedy steps the chosen token and
//! the 40 highest logits, `[token id, logit]`, from `CpuPrecision::Exact`.

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

/// The `TOP` highest logits, `[id, logit]`, highest first.
fn top(logits: &[f32]) -> Vec<(u32, f32)> {
    let mut ids: Vec<(u32, f32)> = logits.iter().enumerate().map(|(i, &l)| (i as u32, l)).collect();
    ids.sort_by(|a, b| b.1.total_cmp(&a.1));
    ids.truncate(TOP);
    ids
}

fn run(dir: &std::path::Path) -> tokenscope::Result<()> {
    std::fs::create_dir_all(dir).map_err(|source| tokenscope::Error::Io { context: format!("cannot create {}", dir.display()), source })?;
    let mut models = Vec::new();
    for t in SUPPORTED_TYPES {
        let name = type_name(t);
        let bytes = SyntheticModel::new(&SyntheticSpec::of_type(t))?.to_bytes()?;
        let file = format!("{name}.gguf");
        let path = dir.join(&file);
        std::fs::write(&path, &bytes)
            .map_err(|source| tokenscope::Error::Io { context: format!("cannot write {}", path.display()), source })?;
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
        models.push(serde_json::json!({ "type": name, "file": file, "prompt_ids": prompt, "steps": steps }));
        println!("wrote {} ({} bytes)", path.display(), std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0));
    }
    let reference =
        serde_json::json!({ "made_by": "examples/weight_type_models.rs, CpuPrecision::Exact", "prompt": PROMPT, "models": models });
    let path = dir.join("reference.json");
    std::fs::write(&path, reference.to_string())
        .map_err(|source| tokenscope::Error::Io { context: format!("cannot write {}", path.display()), source })?;
    println!("wrote {}", path.display());
    Ok(())
}

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: weight_type_models DIR");
        std::process::exit(2);
    };
    if let Err(e) = run(std::path::Path::new(&dir)) {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}

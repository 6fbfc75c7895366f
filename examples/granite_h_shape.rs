//! Writes a random-weight Granite 4.0 H model for measuring the CPU's Mamba-2 layers against
//! llama.cpp on the same file (bench/HISTORY.md, "Granite 4.0 H"):
//!
//! ```text
//! cargo run --release --example granite_h_shape -- /tmp/granite-h-shape.Q4_K.gguf
//! ```
//! The shape, about Granite 4.0 H 350M's size: 32 blocks of width 768, of which 28 scan (48
//! heads of 32 channels, a state of 128 a channel, one group, a convolution over 4
//! positions) and 4 attend without RoPE (12 query heads on 4 KV heads of 64), a SwiGLU of
//! 2048 in each, a 100,352-token vocabulary with the LM head tied: 0.35 billion parameters.
//! Q4_K everywhere but the embedding (Q6_K) and the scans' small f32 tensors, random stored
//! blocks, so it is written in seconds (about 210 MB).

mod shape_file;

use candle_core::quantized::GgmlDType;
use tokenscope::model::synthetic::{SyntheticModel, SyntheticSpec};
use tokenscope::model::Architecture;

fn build() -> tokenscope::Result<SyntheticModel> {
    let attending = [9, 17, 25, 31];
    let spec = SyntheticSpec {
        architecture: Architecture::Granitehybrid,
        n_layers: 32,
        dim: 768,
        ffn_dim: 2048,
        n_heads: 12,
        n_kv_heads: 4,
        head_dim: Some(64),
        context_len: 32_768,
        vocab_size: Some(100_352),
        weight_type: GgmlDType::Q4K,
        embedding_type: GgmlDType::Q6K,
        random_blocks: true,
        ssm_layers: (0..32).filter(|l| !attending.contains(l)).collect(),
        ssm_shape: [4, 1536, 128, 48, 1],
        granite_scales: Some([12.0, 0.22, 0.015625, 3.0]),
        nope: true,
        seed: 1,
        ..SyntheticSpec::default()
    };
    let mut model = SyntheticModel::new(&spec)?;
    model.set_meta("general.name", candle_core::quantized::gguf_file::Value::String("Granite 4.0 H shape, random weights".into()));
    Ok(model)
}

fn main() {
    shape_file::write_from_args("granite_h_shape", build);
}

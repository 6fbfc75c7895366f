//! Writes a random-weight Qwen3-MoE model for measuring a mixture of experts' speed against
//! llama.cpp on the same file (bench/HISTORY.md, "Mixtures of experts"):
//!
//! ```text
//! cargo run --release --example qwen3_moe_shape -- /tmp/qwen3moe-shape.Q4_K.gguf
//! ```
//! The shape: Qwen3-30B-A3B's routing (128 experts of which a token picks 8 would not fit
//! this machine; 32 of which it picks 8, each expert 512 wide, a quarter of the experts'
//! weights read a token) on 12 blocks of width 1024 with 16 query heads on 4 KV heads of
//! 128 (head norms before RoPE on split halves) and a 65,536-token vocabulary with an LM
//! head of its own: 0.77 billion parameters, 0.21 billion read a token. Q4_K everywhere but
//! the embedding and LM head (Q6_K) and the f32 router, as llama.cpp's Q4_K_M leaves it;
//! random stored blocks, so it is written in seconds (about 480 MB).

mod shape_file;

use candle_core::quantized::GgmlDType;
use tokenscope::model::synthetic::{SyntheticModel, SyntheticSpec};
use tokenscope::model::Architecture;

fn build() -> tokenscope::Result<SyntheticModel> {
    let spec = SyntheticSpec {
        architecture: Architecture::Qwen3moe,
        n_layers: 12,
        dim: 1024,
        ffn_dim: 512,
        n_heads: 16,
        n_kv_heads: 4,
        head_dim: Some(128),
        rope_base: 1_000_000.0,
        context_len: 32_768,
        vocab_size: Some(65_536),
        untied_output: true,
        weight_type: GgmlDType::Q4K,
        embedding_type: GgmlDType::Q6K,
        random_blocks: true,
        experts: Some([32, 8]),
        norm_eps: 1e-6,
        seed: 1,
        ..SyntheticSpec::default()
    };
    let mut model = SyntheticModel::new(&spec)?;
    model.set_meta("general.name", candle_core::quantized::gguf_file::Value::String("Qwen3-MoE shape, random weights".into()));
    Ok(model)
}

fn main() {
    shape_file::write_from_args("qwen3_moe_shape", build);
}

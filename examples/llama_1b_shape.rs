//! Writes a random-weight model built to Llama 3.2 1B's shape in llama.cpp's Q4_K_M mix, for
//! the test that a 1B model loads in the page (tests/e2e/big_model.test.mjs):
//!
//! ```text
//! cargo run --release --example llama_1b_shape -- models/synthetic/llama-1b-shape.Q4_K_M.gguf
//! ```
//! (`make big-model` does this.) The shape: 16 blocks of width 2048, feed-forward 8192, 32
//! query heads on 8 KV heads of 64, a 128,256-token vocabulary, the LM head tied to the
//! embedding: 1.24 billion parameters. The mix, as llama.cpp's Q4_K_M lays out such a model:
//! Q4_K everywhere, Q6_K for the embedding and for the V projection and the feed-forward
//! down projection in the blocks llama.cpp gives more bits (the first and last eighth, and
//! every third between). About 790 MB; weights are random stored blocks, so it is written in
//! seconds.

mod shape_file;

use candle_core::quantized::GgmlDType;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tokenscope::model::synthetic::{random_blocks, SyntheticModel, SyntheticSpec};

const LAYERS: usize = 16;
const DIM: usize = 2048;
const FFN: usize = 8192;
const KV_DIM: usize = 8 * 64;

/// Whether llama.cpp's Q4_K_M gives block `i` of `n` its V and down projections in Q6_K.
fn more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

fn build() -> tokenscope::Result<SyntheticModel> {
    let spec = SyntheticSpec {
        n_layers: LAYERS,
        dim: DIM,
        ffn_dim: FFN,
        n_heads: 32,
        n_kv_heads: 8,
        rope_base: 500_000.0,
        context_len: 131_072,
        vocab_size: Some(128_256),
        weight_type: GgmlDType::Q4K,
        embedding_type: GgmlDType::Q6K,
        random_blocks: true,
        seed: 1,
        ..SyntheticSpec::default()
    };
    let mut model = SyntheticModel::new(&spec)?;
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    for i in (0..LAYERS).filter(|&i| more_bits(i, LAYERS)) {
        model.set_tensor(&format!("blk.{i}.attn_v.weight"), random_blocks(GgmlDType::Q6K, KV_DIM, DIM, &mut rng)?);
        model.set_tensor(&format!("blk.{i}.ffn_down.weight"), random_blocks(GgmlDType::Q6K, DIM, FFN, &mut rng)?);
    }
    model.set_meta("general.name", candle_core::quantized::gguf_file::Value::String("Llama 3.2 1B shape, random weights".into()));
    Ok(model)
}

fn main() {
    shape_file::write_from_args("llama_1b_shape", build);
}

//! Times the fast CPU path's matrix products on their own, per weight format, and prints
//! the weight bytes each reads and the rate it reads them at: what a decode step's products
//! cost apart from the rest of the step (bench/HISTORY.md, "K-quants read as stored").
//!
//! ```text
//! cargo run --release --example matvec_speed [-- TOKENS]
//! ```
//! The shapes are Llama 3.2 1B's (width 2048, feed-forward 8192, a 128,256-token LM head),
//! random stored blocks, as many copies of each as take about 256 MB, each product on the
//! next copy (so its weights come from memory, as in a model, not from a cache); `TOKENS` (default 1, a decode step) input rows per product. Each
//! line: the format and shape, the repacked bytes, the median time of 21 products after 3
//! unmeasured ones, and bytes over time.

use candle_core::quantized::GgmlDType;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tokenscope::backend::cpu::quant_matmul::QuantMatrix;
use tokenscope::model::synthetic::random_blocks;

/// Weights (at a byte or so each) of the copies of a shape the products take turns on: far
/// more than any cache.
const COPIES_BYTES: usize = 256 << 20;

fn main() -> tokenscope::Result<()> {
    let tokens: usize =
        std::env::args().nth(1).map_or(Ok(1), |a| a.parse()).map_err(|e| tokenscope::Error::InvalidParams(format!("TOKENS: {e}")))?;
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let shapes = [
        (GgmlDType::Q4K, 8192, 2048, "feed-forward gate/up"),
        (GgmlDType::Q4K, 2048, 8192, "feed-forward down"),
        (GgmlDType::Q6K, 2048, 8192, "feed-forward down, more bits"),
        (GgmlDType::Q6K, 128_256, 2048, "LM head"),
        (GgmlDType::Q8_0, 8192, 2048, "feed-forward gate/up, Q8_0"),
    ];
    println!(
        "{} thread(s) on {}, {tokens} token(s) a product",
        tokenscope::backend::cpu::linear::matmul_threads(),
        tokenscope::backend::cpu::linear::matmul_kernel()
    );
    for (dtype, rows, cols, what) in shapes {
        // Copies enough that each product reads its weights from memory, not a cache.
        let copies = (COPIES_BYTES / (rows * cols)).max(1);
        let ms = (0..copies)
            .map(|_| {
                let t = random_blocks(dtype, rows, cols, &mut rng)?;
                QuantMatrix::from_ggml(dtype, &t.data().map_err(tokenscope::Error::backend)?, rows, cols)
            })
            .collect::<tokenscope::Result<Vec<_>>>()?;
        let x: Vec<f32> = (0..tokens * cols).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
        let mut out = vec![0f32; tokens * rows];
        let mut times = Vec::new();
        for run in 0..24 {
            let start = std::time::Instant::now();
            ms[run % copies].forward(&x, tokens, &mut out)?;
            if run >= 3 {
                times.push(start.elapsed().as_secs_f64());
            }
        }
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        let bytes = ms[0].bytes() as f64;
        println!(
            "{:<6} [{rows:>6}, {cols:>5}] {what:<30} {:>7.1} MB {:>8.3} ms {:>6.1} GB/s {:>8.1} Gweights/s",
            format!("{dtype:?}"),
            bytes / 1e6,
            median * 1e3,
            bytes / median / 1e9,
            (rows * cols * tokens) as f64 / median / 1e9
        );
    }
    Ok(())
}

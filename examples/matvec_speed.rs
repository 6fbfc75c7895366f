//! Times the fast CPU path's matrix products on their own, per weight format and dot-product
//! kernel, and prints the weight bytes each reads and the rate it reads them at: what a
//! decode step's products cost apart from the rest of the step (bench/HISTORY.md, "A decode
//! step's weights from memory").
//!
//! ```text
//! cargo run --release --example matvec_speed [-- TOKENS [cached]]
//! ```
//! The shapes are Llama 3.2 1B's (width 2048, feed-forward 8192, a 128,256-token LM head),
//! random stored blocks (and an F16 matrix of random values), as many copies of each as take about 256 MB, each product on the
//! next copy (so its weights come from memory, as in a model, not from a cache; with `cached`
//! one copy, which the caches hold where it fits: the kernels' own pace); `TOKENS` (default
//! 1, a decode step) input rows per product. Each line: the format, shape and kernel (every
//! kernel this CPU runs, taking turns product by product, so a busy machine slows them
//! alike), the repacked bytes, the median time of 24 products after 3 unmeasured ones, and
//! bytes and weights over time.

use candle_core::quantized::GgmlDType;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokenscope::backend::cpu::quant_matmul::{DotKernel, QuantMatrix};
use tokenscope::model::synthetic::random_blocks;

/// Weights (at a byte or so each) of the copies of a shape the products take turns on: far
/// more than any cache.
const COPIES_BYTES: usize = 256 << 20;

/// Products timed per kernel and shape, after [`WARM_UP`] unmeasured ones.
const RUNS: usize = 24;
const WARM_UP: usize = 3;

fn main() -> tokenscope::Result<()> {
    let tokens: usize =
        std::env::args().nth(1).map_or(Ok(1), |a| a.parse()).map_err(|e| tokenscope::Error::InvalidParams(format!("TOKENS: {e}")))?;
    let cached = std::env::args().nth(2).is_some_and(|a| a == "cached");
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let shapes = [
        (GgmlDType::Q4K, 8192, 2048, "feed-forward gate/up"),
        (GgmlDType::Q4K, 2048, 8192, "feed-forward down"),
        (GgmlDType::Q6K, 2048, 8192, "feed-forward down, more bits"),
        (GgmlDType::Q6K, 128_256, 2048, "LM head"),
        (GgmlDType::Q8_0, 8192, 2048, "feed-forward gate/up, Q8_0"),
        (GgmlDType::F16, 2048, 2048, "attention output, F16"),
    ];
    let kernels: Vec<DotKernel> = DotKernel::available().into_iter().filter(|k| *k != DotKernel::Portable).collect();
    println!(
        "{} thread(s), {tokens} token(s) a product, weights {}",
        tokenscope::backend::cpu::linear::matmul_threads(),
        if cached { "from the caches where they fit" } else { "from memory" }
    );
    for (dtype, rows, cols, what) in shapes {
        let copies = if cached { 1 } else { (COPIES_BYTES / (rows * cols)).max(1) };
        let ms = (0..copies)
            .map(|_| {
                if dtype == GgmlDType::F16 {
                    let bytes: Vec<u8> =
                        (0..rows * cols).flat_map(|_| half::f16::from_f32(rng.random_range(-1.0f32..1.0)).to_le_bytes()).collect();
                    return QuantMatrix::from_ggml(dtype, &bytes, rows, cols);
                }
                let t = random_blocks(dtype, rows, cols, &mut rng)?;
                QuantMatrix::from_ggml(dtype, &t.data().map_err(tokenscope::Error::backend)?, rows, cols)
            })
            .collect::<tokenscope::Result<Vec<_>>>()?;
        let x: Vec<f32> = (0..tokens * cols).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
        let mut out = vec![0f32; tokens * rows];
        let mut times = vec![Vec::new(); kernels.len()];
        for run in 0..WARM_UP + RUNS {
            for (k, &kernel) in kernels.iter().enumerate() {
                let start = std::time::Instant::now();
                ms[(run * kernels.len() + k) % copies].forward_with(kernel, &x, tokens, &mut out)?;
                if run >= WARM_UP {
                    times[k].push(start.elapsed().as_secs_f64());
                }
            }
        }
        let bytes = ms[0].bytes() as f64;
        for (kernel, mut times) in kernels.iter().zip(times) {
            times.sort_by(f64::total_cmp);
            let median = times[times.len() / 2];
            println!(
                "{:<5} [{rows:>6}, {cols:>5}] {what:<29} {:<12} {:>6.1} MB {:>7.3} ms {:>5.1} GB/s {:>5.1} Gweights/s",
                format!("{dtype:?}"),
                kernel.name(),
                bytes / 1e6,
                median * 1e3,
                bytes / median / 1e9,
                (rows * cols * tokens) as f64 / median / 1e9
            );
        }
    }
    Ok(())
}

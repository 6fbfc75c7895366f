//! `y = W x` on Q8_0 weights, split across the CPU backend's thread pool.
//!
//! The CPU backend's fast path in wasm: activations are rounded to Q8_0 blocks (like llama.cpp
//! and candle), then each output is candle's SIMD Q8_0 dot product (SIMD128 in wasm, AVX2
//! natively) of one weight row with one activation row. The weight rows are cut into bands,
//! one task each, run on [`band_pool`](super::band_pool): in the page's threaded engine on Web
//! Workers sharing the wasm memory, on the calling thread alone in the one-thread engine.
//!
//! Same dot products as candle's own quantized matmul, so the results agree with it to float
//! summation order (tests/cpu_q8_matmul.rs checks this on odd sizes).

use super::band_pool::pool;
use crate::error::{Error, Result};
use candle_core::quantized::k_quants::{BlockQ8_0, GgmlType};

/// Elements per Q8_0 block.
pub const Q8_BLOCK: usize = 32;

/// Bands per thread: a few, so a thread that starts late or runs slow is evened out by the
/// others taking its share, and few enough that a task's scheduling cost is noise.
const BANDS_PER_THREAD: usize = 4;

/// Tokens whose quantized activations are walked together against one band, so a band's
/// weights are read once per tile from memory instead of once per token.
const TOKEN_TILE: usize = 8;

/// Products smaller than this (multiply-adds) run on the calling thread alone: handing a
/// job to the workers and waiting for them costs more than it saves. Measured in headless
/// Chromium on 2 cores (the page's main thread drawing the chart beside the engine's two):
/// threading every decode product brought decode from 21 down to 14-21 tok/s, while the
/// 49152 x 576 output product and prefill products (several tokens) do gain. With this bound a
/// decode step threads only its output product; a prefill of 3 or more tokens threads all.
const MIN_THREADED_MACS: usize = 2 << 20;

/// The output, written by several tasks at once, each to its own elements.
#[derive(Clone, Copy)]
struct Out(*mut f32);
// SAFETY: tasks write disjoint elements (each (token, row) belongs to one band), and `run`
// returns only when every task is done, while `out` is still borrowed.
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

impl Out {
    /// Writes element `i`.
    ///
    /// # Safety
    /// `i` is inside the output, and no other task writes element `i`.
    unsafe fn write(&self, i: usize, y: f32) {
        unsafe { *self.0.add(i) = y };
    }
}

/// A `[rows, cols]` weight matrix in Q8_0 blocks, row-major (`rows * cols / 32` blocks).
pub struct Q8Matrix {
    blocks: Vec<BlockQ8_0>,
    rows: usize,
    cols: usize,
}

impl Q8Matrix {
    /// Quantizes row-major f32 weights `[rows, cols]`; `cols` must be a multiple of 32.
    /// Rounding Q8_0 weights that were dequantized to f32 gives back the same blocks.
    pub fn quantize(dense: &[f32], rows: usize, cols: usize) -> Result<Self> {
        if !cols.is_multiple_of(Q8_BLOCK) || dense.len() != rows * cols {
            return Err(Error::Backend(format!(
                "a Q8_0 matrix needs rows of whole 32-element blocks: [{rows}, {cols}] from {} values",
                dense.len()
            )));
        }
        let mut blocks = vec![BlockQ8_0::zeros(); rows * cols / Q8_BLOCK];
        BlockQ8_0::from_float(dense, &mut blocks);
        Ok(Q8Matrix { blocks, rows, cols })
    }

    /// Output features.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes of weight data read per use (34 bytes per block of 32).
    pub fn bytes(&self) -> usize {
        self.blocks.len() * std::mem::size_of::<BlockQ8_0>()
    }

    /// `out[t] = W x[t]` for `n` rows. Shapes: `x`: `[n, cols]`, `out`: `[n, rows]`.
    pub fn forward(&self, x: &[f32], n: usize, out: &mut [f32]) -> Result<()> {
        let (rows, cols) = (self.rows, self.cols);
        if x.len() < n * cols || out.len() < n * rows {
            return Err(Error::Backend(format!("matmul [{rows}, {cols}] on {n} rows: x holds {}, out {}", x.len(), out.len())));
        }
        if n == 0 {
            return Ok(());
        }
        let row_blocks = cols / Q8_BLOCK;
        // x quantized: [n, cols / 32] blocks.
        let mut xq = vec![BlockQ8_0::zeros(); n * row_blocks];
        for (q, xs) in xq.chunks_exact_mut(row_blocks).zip(x[..n * cols].chunks_exact(cols)) {
            BlockQ8_0::from_float(xs, q);
        }
        let pool = pool();
        let threads = if rows * cols * n >= MIN_THREADED_MACS { pool.threads() } else { 1 };
        let band = rows.div_ceil(threads * BANDS_PER_THREAD).max(1);
        let dst = Out(out.as_mut_ptr());
        let run_band = |b: usize| {
            let r0 = b * band;
            let r1 = rows.min(r0 + band);
            // Tiles of tokens against the band's rows: the rows stay in cache across a tile.
            for t0 in (0..n).step_by(TOKEN_TILE) {
                for r in r0..r1 {
                    let w = &self.blocks[r * row_blocks..(r + 1) * row_blocks];
                    for t in t0..n.min(t0 + TOKEN_TILE) {
                        let y = BlockQ8_0::vec_dot(cols, w, &xq[t * row_blocks..(t + 1) * row_blocks]);
                        // SAFETY: t < n and r < rows, inside `out[..n * rows]` (checked above);
                        // this task is the only writer of row r.
                        unsafe { dst.write(t * rows + r, y) };
                    }
                }
            }
        };
        let bands = rows.div_ceil(band);
        if threads > 1 {
            pool.run(bands, run_band);
        } else {
            (0..bands).for_each(run_band);
        }
        Ok(())
    }
}

//! `y = W x` on quantized weights, split across the CPU backend's thread pool.
//!
//! The CPU backend's fast path in wasm. Activations are rounded to 8-bit blocks of 32 exactly
//! as candle and llama.cpp round them ([`Activations`]); weights stay in their own block
//! format, repacked so the inner loop converts no f16 (wasm has no instruction for it):
//! [`Q8_0Rows`] (Q8_0 tensors; Q6_K and Q3_K with a scale per 16 weights, repacked exactly;
//! Q2_K as those with a min per 16 weights beside them, [`Q2KRows`]) and [`Q4_1Rows`] (the shipped model's Q4_1 tensors, read
//! directly: 24 bytes per 32 weights instead of 36 after a requantization to Q8_0; Q4_K, and
//! Q5_0, Q5_1 and Q5_K with a fifth bit per weight, 28 bytes, repacked exactly); float
//! weights (F32, F16, BF16) as stored, in [`FloatRows`], against f32 inputs. Each
//! format computes the dot products of a few weight rows with a few activation rows at once
//! ([`RowDot`]: four rows and one token when decoding, two rows and four tokens in a
//! prefill; on x86-64 two rows and sixteen tokens, the activations regrouped as
//! [`TokenGroups`](super::token_groups::TokenGroups)), on the fastest [`DotKernel`] the build and CPU have (relaxed SIMD or SIMD128 in
//! wasm, AVX2 on x86-64, plain Rust elsewhere). [`QuantMatrix`] cuts the
//! rows into bands, one task each, run on [`band_pool`](super::band_pool): in the page's
//! threaded engine on Web Workers sharing the wasm memory, on the calling thread alone in the
//! one-thread engine.
//!
//! Same integers and scales as candle's quantized matmul, so the results agree with it to float
//! summation order, and float weights give the exact product to summation order
//! (tests/cpu_quant_matmul.rs checks both on odd sizes, natively and in wasm).

pub use super::activations::{ActivationRow, Activations, BLOCK};
use super::band_pool::{pool, SharedOut};
pub use super::dot_kernel::{DotKernel, InputRows, RowDot};
pub use super::float_rows::{FloatInput, FloatRows};
pub use super::q2_k_rows::Q2KRows;
pub use super::q4_1_rows::Q4_1Rows;
pub use super::q8_0_rows::Q8_0Rows;
use super::token_groups::GROUP;
use crate::error::{Error, Result};
use candle_core::quantized::GgmlDType;

/// Weight rows whose dot products with one activation row are computed together when
/// decoding (one token), sharing the activation's loads.
pub const ROW_GROUP: usize = 4;

/// Activation rows whose dot products with `PREFILL_ROWS` weight rows are computed together
/// in a prefill (several tokens), sharing the weights' loads and unpacking, on kernels without
/// sixteen-token loops (wasm, the portable ones).
pub const TOKEN_GROUP: usize = 4;

/// Weight rows computed together in a prefill, sharing the tokens' loads: with
/// `TOKEN_GROUP` that is 8 accumulators, which with the loaded blocks fit in AVX2's (and
/// SIMD128's, as V8 maps them) 16 vector registers.
pub const PREFILL_ROWS: usize = 2;

/// Bands per thread: a few, so a thread that starts late or runs slow is evened out by the
/// others taking its share, and few enough that a task's scheduling cost is noise.
const BANDS_PER_THREAD: usize = 4;

/// Tokens whose quantized activations are walked together against one band, so a band's
/// weights are read once per tile from memory instead of once per token: a group of the
/// sixteen-token loops ([`RowDot::dot_group`]).
const TOKEN_TILE: usize = GROUP;

/// Products smaller than this (multiply-adds) run on the calling thread alone: handing a
/// job to the workers and waiting for them costs more than it saves. In the page, measured in
/// headless Chromium on 2 cores (the page's main thread drawing the chart beside the engine's
/// two): threading every decode product brought decode from 21 down to 14-21 tok/s, while the
/// 49152 x 576 output product and prefill products (several tokens) do gain. With this bound a
/// decode step threads only its output product; a prefill of 3 or more tokens threads all.
#[cfg(target_arch = "wasm32")]
pub const MIN_THREADED_MACS: usize = 2 << 20;
/// Natively handing over costs far less (the workers spin between products): every product
/// of a decode step is threaded (the smallest, W_k and W_v, is 192 x 576). Measured on this project's 2-core EPYC, SmolLM2 Q4_1, short / long
/// prompt: decode 106.0 / 84.7 tok/s with the page's bound, 147.3 / 109.9 with this one.
#[cfg(not(target_arch = "wasm32"))]
pub const MIN_THREADED_MACS: usize = 1 << 16;

/// A `[rows, cols]` weight matrix in one of the repacked block formats, or in floats.
pub enum QuantMatrix {
    /// Q8_0 blocks.
    Q8_0(Q8_0Rows),
    /// Q4_1 blocks.
    Q4_1(Q4_1Rows),
    /// Q2_K super-blocks: Q8_0 blocks with their halves' scales, and a min per 16 weights.
    Q2K(Q2KRows),
    /// F32, F16 or BF16 weights against f32 inputs (not rounded to 8 bits).
    Float(FloatRows),
}

impl QuantMatrix {
    /// A `[rows, cols]` tensor's stored `dtype` blocks repacked exactly into the format its
    /// kernels read (every type `super::linear`'s `packs` names; another is refused).
    pub fn from_ggml(dtype: GgmlDType, blocks: &[u8], rows: usize, cols: usize) -> Result<Self> {
        Ok(match dtype {
            GgmlDType::Q4_0 => QuantMatrix::Q4_1(Q4_1Rows::from_q4_0(blocks, rows, cols)?),
            GgmlDType::Q4_1 => QuantMatrix::Q4_1(Q4_1Rows::from_ggml(blocks, rows, cols)?),
            GgmlDType::Q4K => QuantMatrix::Q4_1(Q4_1Rows::from_q4_k(blocks, rows, cols)?),
            // In wasm a block costs ALU work rather than bandwidth, and Q5_0 widened to
            // Q8_0 blocks decodes faster there than through the 5-bit loops (llama.cpp's
            // Q4_K_M file in Chromium, one thread: 48.7 against 35.5 tok/s); with relaxed
            // SIMD its narrow integers take the 16-products-an-instruction loops.
            GgmlDType::Q5_0 if cfg!(target_arch = "wasm32") => QuantMatrix::Q8_0(Q8_0Rows::from_q5_0(blocks, rows, cols)?),
            GgmlDType::Q5_0 => QuantMatrix::Q4_1(Q4_1Rows::from_q5_0(blocks, rows, cols)?),
            GgmlDType::Q5_1 => QuantMatrix::Q4_1(Q4_1Rows::from_q5_1(blocks, rows, cols)?),
            GgmlDType::Q5K => QuantMatrix::Q4_1(Q4_1Rows::from_q5_k(blocks, rows, cols)?),
            GgmlDType::Q6K => QuantMatrix::Q8_0(Q8_0Rows::from_q6_k(blocks, rows, cols)?),
            GgmlDType::Q3K => QuantMatrix::Q8_0(Q8_0Rows::from_q3_k(blocks, rows, cols)?),
            GgmlDType::Q2K => QuantMatrix::Q2K(Q2KRows::from_q2_k(blocks, rows, cols)?),
            GgmlDType::F32 => QuantMatrix::Float(FloatRows::from_f32(blocks, rows, cols)?),
            GgmlDType::F16 => QuantMatrix::Float(FloatRows::from_f16(blocks, rows, cols)?),
            GgmlDType::BF16 => QuantMatrix::Float(FloatRows::from_bf16(blocks, rows, cols)?),
            GgmlDType::Q8_0 => QuantMatrix::Q8_0(Q8_0Rows::from_ggml(blocks, rows, cols)?),
            other => return Err(Error::Backend(format!("no kernels of ours read {other:?} weights"))),
        })
    }

    /// Row `r`'s weights dequantized into `out` (`[cols]`): the embedding lookup from a tied
    /// LM head, so the table is not kept a second time.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        match self {
            QuantMatrix::Q8_0(m) => m.dequantize_row(r, out),
            QuantMatrix::Q4_1(m) => m.dequantize_row(r, out),
            QuantMatrix::Q2K(m) => m.dequantize_row(r, out),
            QuantMatrix::Float(m) => m.dequantize_row(r, out),
        }
    }

    /// Output features.
    pub fn rows(&self) -> usize {
        match self {
            QuantMatrix::Q8_0(w) => w.rows(),
            QuantMatrix::Q4_1(w) => w.rows(),
            QuantMatrix::Q2K(w) => w.rows(),
            QuantMatrix::Float(w) => w.rows(),
        }
    }

    /// Input features.
    pub fn cols(&self) -> usize {
        match self {
            QuantMatrix::Q8_0(w) => w.cols(),
            QuantMatrix::Q4_1(w) => w.cols(),
            QuantMatrix::Q2K(w) => w.cols(),
            QuantMatrix::Float(w) => w.cols(),
        }
    }

    /// Bytes of weight data read per use.
    pub fn bytes(&self) -> usize {
        match self {
            QuantMatrix::Q8_0(w) => w.bytes(),
            QuantMatrix::Q4_1(w) => w.bytes(),
            QuantMatrix::Q2K(w) => w.bytes(),
            QuantMatrix::Float(w) => w.bytes(),
        }
    }

    /// `out[t] = W x[t]` for `n` rows on the fastest kernel ([`DotKernel::best`]). Shapes:
    /// `x`: `[n, cols]`, `out`: `[n, rows]`.
    pub fn forward(&self, x: &[f32], n: usize, out: &mut [f32]) -> Result<()> {
        self.forward_with(DotKernel::best(), x, n, out)
    }

    /// The same on a chosen kernel (the tests run each one); an error if this build or CPU
    /// lacks it.
    pub fn forward_with(&self, kernel: DotKernel, x: &[f32], n: usize, out: &mut [f32]) -> Result<()> {
        self.forward_rounding_once(kernel, x, n, &std::cell::OnceCell::new(), out)
    }

    /// `out[t] = W x[t]` for `n` rows of `x`, which the block formats round to 8 bits into
    /// `rounded` unless a matrix before this one did (several matrices that share an input
    /// round it once); float weights take `x` as it is. Shapes: `x`: `[n, cols]`, `out`:
    /// `[n, rows]`.
    pub fn forward_rounding_once(
        &self,
        kernel: DotKernel,
        x: &[f32],
        n: usize,
        rounded: &std::cell::OnceCell<Activations>,
        out: &mut [f32],
    ) -> Result<()> {
        let (rows, cols) = (self.rows(), self.cols());
        if x.len() < n * cols || out.len() < n * rows {
            return Err(Error::Backend(format!("matmul [{rows}, {cols}] on {n} rows: x holds {}, out {}", x.len(), out.len())));
        }
        if !kernel.is_available() {
            return Err(Error::Backend(format!("the {} dot-product kernel does not run on this build or CPU", kernel.name())));
        }
        let x = &x[..n * cols];
        let rounded = || rounded.get_or_init(|| Activations::quantize(x, cols));
        match self {
            QuantMatrix::Q8_0(w) => forward(w, kernel, rounded(), out),
            QuantMatrix::Q4_1(w) => forward(w, kernel, rounded(), out),
            QuantMatrix::Q2K(w) => forward(w, kernel, rounded(), out),
            QuantMatrix::Float(w) => forward(w, kernel, &FloatInput::new(x, cols), out),
        }
    }
}

/// `out[t] = W x[t]` for the `n` rows of `xq` on the band pool, with `kernel`'s dot products.
/// Shapes: `xq`: `[n, cols]`, `out`: `[n, rows]`.
fn forward<W: RowDot>(w: &W, kernel: DotKernel, xq: &W::Input, out: &mut [f32]) -> Result<()> {
    let (rows, cols) = (w.rows(), w.cols());
    let n = xq.rows();
    if xq.cols() != cols || out.len() < n * rows {
        return Err(Error::Backend(format!("matmul [{rows}, {cols}] on {n} rows of {}: out holds {}", xq.cols(), out.len())));
    }
    if n == 0 {
        return Ok(());
    }
    // A prefill on a kernel with loops for sixteen tokens at a time reads them regrouped (made
    // once here, before the threads share them). Even two tokens padded to a group gain (at
    // eight a group: 234 -> 249 tok/s prefilling 2 tokens, 285 -> 409 for 3, on this
    // project's 2-core EPYC).
    let groups = (n > 1 && kernel.interleaves_prefill()).then(|| xq.token_groups()).flatten();
    let pool = pool();
    let threads = if rows * cols * n >= MIN_THREADED_MACS { pool.threads() } else { 1 };
    let band = rows.div_ceil(threads * BANDS_PER_THREAD).next_multiple_of(ROW_GROUP);
    let dst = SharedOut::new(out);
    let run_band = |b: usize| {
        let r0 = b * band;
        let r1 = rows.min(r0 + band);
        // SAFETY (both writes): t < n and r < rows, inside `out[..n * rows]` (checked above);
        // this task is the only writer of row r.
        let write = |t: usize, r: usize, y: f32| unsafe { dst.write(t * rows + r, y) };
        if n == 1 {
            // Decode: groups of rows share the token's loads.
            for g in (r0..r1).step_by(ROW_GROUP) {
                if g + ROW_GROUP <= r1 {
                    let [ys] = w.dot::<ROW_GROUP, 1>(kernel, g, [xq.row(0)]);
                    ys.iter().enumerate().for_each(|(i, &y)| write(0, g + i, y));
                } else {
                    (g..r1).for_each(|r| write(0, r, w.dot::<1, 1>(kernel, r, [xq.row(0)])[0][0]));
                }
            }
            return;
        }
        // Prefill: tiles of tokens against the band's rows (the rows stay in cache across a
        // tile), each row's blocks loaded once for a group of tokens.
        for t0 in (0..n).step_by(TOKEN_TILE) {
            let t1 = n.min(t0 + TOKEN_TILE);
            // Sixteen tokens at once where the format has loops for them on this kernel (then
            // for every row, or for none).
            let done = groups.is_some_and(|groups| {
                let write_row = |r: usize, ys: &[f32; GROUP]| (t0..t1).for_each(|t| write(t, r, ys[t - t0]));
                w.dot_group(kernel, r0..r1, groups.group(t0 / GROUP), write_row)
            });
            if done {
                continue;
            }
            for r in (r0..r1).step_by(PREFILL_ROWS) {
                if r + PREFILL_ROWS > r1 {
                    // The band's last rows, one at a time.
                    for r in r..r1 {
                        for t in t0..t1 {
                            write(t, r, w.dot::<1, 1>(kernel, r, [xq.row(t)])[0][0]);
                        }
                    }
                    continue;
                }
                for g in (t0..t1).step_by(TOKEN_GROUP) {
                    if g + TOKEN_GROUP <= t1 {
                        let ys = w.dot::<PREFILL_ROWS, TOKEN_GROUP>(kernel, r, std::array::from_fn(|i| xq.row(g + i)));
                        for (i, y) in ys.iter().enumerate() {
                            y.iter().enumerate().for_each(|(j, &y)| write(g + i, r + j, y));
                        }
                    } else {
                        for t in g..t1 {
                            let [y] = w.dot::<PREFILL_ROWS, 1>(kernel, r, [xq.row(t)]);
                            y.iter().enumerate().for_each(|(j, &y)| write(t, r + j, y));
                        }
                    }
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

//! `y = W x` for a batch of rows, in the CPU backend's two precisions.

use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};

use super::ops::dot;
use super::quant_matmul::{Activations, DotKernel, QuantMatrix, BLOCK};
use crate::error::{Error, Result};
use crate::model::weights::to_vec;

/// How the CPU backend stores and multiplies weight matrices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CpuPrecision {
    /// Weights dequantized exactly to f32, f32 activations: the reference for every other path.
    Exact,
    /// Quantized weights and activations rounded to 8 bits (like llama.cpp) through SIMD dot
    /// products: [`QuantMatrix`] in wasm and on x86-64 with AVX2 (Q4_0, Q4_1, Q4_K, Q5_0, Q5_1,
    /// Q5_K, Q2_K, Q3_K, Q6_K and Q8_0 read as stored or repacked exactly; F32, F16 and BF16 as stored,
    /// against f32 activations; on the band pool's threads), candle's quantized matmul on other
    /// CPUs (Q4_1, Q5_0 and Q5_1 requantized to Q8_0 at load, since candle has SIMD dot
    /// products for Q8_0, not for them).
    Fast,
}

/// Whether the fast path multiplies the types [`packs`] names with [`QuantMatrix`] (its own SIMD
/// kernels, the band pool's threads) rather than candle's quantized matmul: in wasm (SIMD128;
/// candle has no threads there and converts two f16 scales per block in software) and on
/// x86-64 with AVX2 (Q4_1 read as stored rather than requantized to Q8_0, and a prefill that
/// loads each weight block once for several tokens). Elsewhere candle's kernels stay.
fn own_quant_matmul() -> bool {
    cfg!(target_arch = "wasm32") || DotKernel::Avx2.is_available()
}

/// The weight types the fast path's own kernels read (exactly, as stored or repacked):
/// Q4_0, Q4_1, Q4_K and the 5-bit Q5_0, Q5_1 and Q5_K as [`Q4_1Rows`], Q8_0, Q6_K and Q3_K as
/// [`Q8_0Rows`], Q2_K as [`Q2KRows`] (and Q5_0 too in wasm, widened exactly), F32, F16 and BF16 as [`FloatRows`]:
/// every type a model loads.
fn packs(t: GgmlDType) -> bool {
    matches!(
        t,
        GgmlDType::Q4_0
            | GgmlDType::Q4_1
            | GgmlDType::Q4K
            | GgmlDType::Q5_0
            | GgmlDType::Q5_1
            | GgmlDType::Q5K
            | GgmlDType::Q8_0
            | GgmlDType::Q6K
            | GgmlDType::Q3K
            | GgmlDType::Q2K
            | GgmlDType::F32
            | GgmlDType::F16
            | GgmlDType::BF16
    )
}

/// The kernels behind the fast path's matrix products: a [`DotKernel`]'s name, or `candle`.
pub fn matmul_kernel() -> &'static str {
    if own_quant_matmul() {
        DotKernel::best().name()
    } else {
        "candle"
    }
}

/// Threads the fast path's matrix products run on: the band pool in wasm (one without the
/// page's threaded engine), candle's natively.
pub fn matmul_threads() -> usize {
    if own_quant_matmul() {
        super::band_pool::pool().threads()
    } else {
        candle_core::utils::get_num_threads()
    }
}

/// A batch of input rows `[n, cols]` that several matrices multiply (Wq, Wk and Wv share the
/// normed input, and so do W_gate and W_up): the packed matrices round it to 8-bit blocks once,
/// on first use, instead of once per matrix.
pub struct SharedInput<'a> {
    x: &'a [f32],
    n: usize,
    rounded: std::cell::OnceCell<Activations>,
}

impl<'a> SharedInput<'a> {
    /// `n` rows of `x`.
    pub fn new(x: &'a [f32], n: usize) -> Self {
        SharedInput { x, n, rounded: std::cell::OnceCell::new() }
    }
}

/// A weight matrix `[rows, cols]` ready to multiply.
pub enum Linear {
    /// Exact f32 weights, row-major.
    Dense { w: Vec<f32>, rows: usize, cols: usize },
    /// Weights as stored or repacked exactly ([`packs`]), multiplied on the band pool's
    /// threads.
    Packed(QuantMatrix),
    /// candle's quantized matmul (natively on CPUs without AVX2, and rows of part of a block);
    /// Q4_1, Q5_0 and Q5_1 are requantized to Q8_0.
    Quantized { m: QMatMul, rows: usize, cols: usize },
}

impl Linear {
    /// Prepares a stored matrix for the chosen precision.
    pub fn new(t: Arc<QTensor>, precision: CpuPrecision) -> Result<Self> {
        let (rows, cols) = t.shape().dims2().map_err(Error::backend)?;
        Ok(match precision {
            CpuPrecision::Exact => Linear::Dense { w: to_vec(&t)?, rows, cols },
            CpuPrecision::Fast if own_quant_matmul() && cols.is_multiple_of(BLOCK) && packs(t.dtype()) => {
                let blocks = t.data().map_err(Error::backend)?;
                Linear::Packed(QuantMatrix::from_ggml(t.dtype(), &blocks, rows, cols)?)
            }
            CpuPrecision::Fast => {
                // candle's Q4_1, Q5_0 and Q5_1 products have no SIMD and assume an even number
                // of blocks per row; its Q8_0 product has both.
                let q = if matches!(t.dtype(), GgmlDType::Q4_1 | GgmlDType::Q5_0 | GgmlDType::Q5_1) {
                    let dense = t.dequantize(&Device::Cpu).map_err(Error::backend)?;
                    Arc::new(QTensor::quantize(&dense, GgmlDType::Q8_0).map_err(Error::backend)?)
                } else {
                    t
                };
                Linear::Quantized { m: QMatMul::from_arc(q).map_err(Error::backend)?, rows, cols }
            }
        })
    }

    /// Output features.
    pub fn rows(&self) -> usize {
        match self {
            Linear::Dense { rows, .. } | Linear::Quantized { rows, .. } => *rows,
            Linear::Packed(m) => m.rows(),
        }
    }

    /// `out[t] = W x[t]` for `n` rows. Shapes: `x`: `[n, cols]`, `out`: `[n, rows]`.
    pub fn forward(&self, x: &[f32], n: usize, out: &mut [f32]) -> Result<()> {
        self.forward_shared(&SharedInput::new(x, n), out)
    }

    /// The same for an input that other matrices multiply too: a packed matrix rounds it to
    /// 8 bits only if no matrix before it did.
    pub fn forward_shared(&self, input: &SharedInput, out: &mut [f32]) -> Result<()> {
        let (x, n) = (input.x, input.n);
        match self {
            Linear::Packed(m) => m.forward_rounding_once(DotKernel::best(), x, n, &input.rounded, out),
            // Exact f32: row-outer so each weight row is read once from memory for the whole batch.
            Linear::Dense { w, rows, cols } => {
                for (r, wr) in w.chunks_exact(*cols).enumerate() {
                    for t in 0..n {
                        out[t * rows + r] = dot(wr, &x[t * cols..(t + 1) * cols]);
                    }
                }
                Ok(())
            }
            Linear::Quantized { m, rows, cols } => {
                let xt = Tensor::from_slice(&x[..n * cols], (n, *cols), &Device::Cpu).map_err(Error::backend)?;
                let y = m.forward(&xt).map_err(Error::backend)?;
                let y = y.flatten_all().and_then(|y| y.to_vec1::<f32>()).map_err(Error::backend)?;
                out[..n * rows].copy_from_slice(&y);
                Ok(())
            }
        }
    }

    /// Row `r`'s weights into `out` (`[cols]`), where this form keeps them row by row
    /// (repacked or dense); `false` for candle's matmul, which is read whole.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) -> bool {
        match self {
            Linear::Packed(m) => m.dequantize_row(r, out),
            Linear::Dense { w, cols, .. } => out.copy_from_slice(&w[r * cols..(r + 1) * cols]),
            Linear::Quantized { .. } => return false,
        }
        true
    }

    /// Bytes of weight data this matrix reads per use.
    pub fn bytes(&self) -> usize {
        match self {
            Linear::Dense { w, .. } => w.len() * 4,
            Linear::Packed(m) => m.bytes(),
            Linear::Quantized { m, rows, cols } => match m {
                QMatMul::QTensor(q) => q.storage_size_in_bytes(),
                _ => rows * cols * 4,
            },
        }
    }
}

//! Float weights (F32, F16, BF16) for [`QuantMatrix`](super::quant_matmul::QuantMatrix), kept
//! as the GGUF file stores them (two bytes per weight for F16 and BF16) and widened exactly to
//! f32 inside the kernels, against f32 inputs: the product is the exact one up to float
//! summation order (no rounding of the inputs, where llama.cpp rounds them to the weights'
//! type). F16 widens through the CPU's conversion (F16C) or, in wasm, which has none, by
//! moving the 15 bits of magnitude into an f32 and scaling by 2^112 (exact for every finite
//! half, subnormals included); a matrix holding an F16 infinity or NaN is widened to F32 at
//! load, so the kernels need no case for them. BF16 is the top half of an f32: a shift.

use half::{bf16, f16};

use super::activations::check_shape;
use super::dot_kernel::{DotKernel, InputRows, RowDot};
use crate::error::Result;

/// A `[rows, cols]` float matrix, row-major, in its stored type.
pub struct FloatRows {
    data: FloatData,
    rows: usize,
    cols: usize,
}

/// The weights in their stored type.
enum FloatData {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
}

/// Little-endian 2-byte values.
fn halves(bytes: &[u8]) -> impl Iterator<Item = u16> + '_ {
    bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]]))
}

impl FloatRows {
    /// F32 weights as a GGUF file stores them; `cols` a multiple of 32.
    pub fn from_f32(bytes: &[u8], rows: usize, cols: usize) -> Result<Self> {
        check_shape("F32", rows, cols, bytes.len(), rows * cols * 4)?;
        let w = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        Ok(FloatRows { data: FloatData::F32(w), rows, cols })
    }

    /// F16 weights as a GGUF file stores them; `cols` a multiple of 32. Kept in two bytes each
    /// unless one is an infinity or NaN (exponent all ones), when the matrix is widened to F32.
    pub fn from_f16(bytes: &[u8], rows: usize, cols: usize) -> Result<Self> {
        check_shape("F16", rows, cols, bytes.len(), rows * cols * 2)?;
        let data = if halves(bytes).any(|h| h & 0x7c00 == 0x7c00) {
            FloatData::F32(halves(bytes).map(|h| f16::from_bits(h).to_f32()).collect())
        } else {
            FloatData::F16(halves(bytes).map(f16::from_bits).collect())
        };
        Ok(FloatRows { data, rows, cols })
    }

    /// BF16 weights as a GGUF file stores them; `cols` a multiple of 32.
    pub fn from_bf16(bytes: &[u8], rows: usize, cols: usize) -> Result<Self> {
        check_shape("BF16", rows, cols, bytes.len(), rows * cols * 2)?;
        Ok(FloatRows { data: FloatData::BF16(halves(bytes).map(bf16::from_bits).collect()), rows, cols })
    }

    /// Row `r`'s weights, `[cols]`.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        let span = r * self.cols..(r + 1) * self.cols;
        match &self.data {
            FloatData::F32(w) => out.copy_from_slice(&w[span]),
            FloatData::F16(w) => out.iter_mut().zip(&w[span]).for_each(|(o, v)| *o = v.to_f32()),
            FloatData::BF16(w) => out.iter_mut().zip(&w[span]).for_each(|(o, v)| *o = v.to_f32()),
        }
    }

    /// `R` rows from `first` of `w`.
    fn rows_of<'a, E, const R: usize>(&self, w: &'a [E], first: usize) -> [&'a [E]; R] {
        std::array::from_fn(|i| &w[(first + i) * self.cols..(first + i + 1) * self.cols])
    }
}

impl RowDot for FloatRows {
    type Input = FloatInput;

    fn rows(&self) -> usize {
        self.rows
    }

    fn cols(&self) -> usize {
        self.cols
    }

    /// Four bytes per weight for F32, two for F16 and BF16.
    fn bytes(&self) -> usize {
        let weights = self.rows * self.cols;
        match self.data {
            FloatData::F32(_) => weights * 4,
            FloatData::F16(_) | FloatData::BF16(_) => weights * 2,
        }
    }

    fn dot<const R: usize, const T: usize>(&self, kernel: DotKernel, first: usize, x: [&[f32]; T]) -> [[f32; R]; T] {
        match &self.data {
            FloatData::F32(w) => dot(kernel, self.rows_of(w, first), x),
            FloatData::F16(w) => dot(kernel, self.rows_of(w, first), x),
            FloatData::BF16(w) => dot(kernel, self.rows_of(w, first), x),
        }
    }
}

/// A stored float type: f32, f16 or bf16, each widened exactly by every kernel.
pub(super) trait FloatWeight: Copy + Sync + Into<f32> + WidenAvx2 + WidenWasm {}
impl FloatWeight for f32 {}
impl FloatWeight for f16 {}
impl FloatWeight for bf16 {}

#[cfg(target_arch = "x86_64")]
pub(super) use super::avx2_dot::WidenAvx2;
#[cfg(not(target_arch = "x86_64"))]
/// Nothing to widen on a CPU without the AVX2 kernels.
pub(super) trait WidenAvx2 {}
#[cfg(not(target_arch = "x86_64"))]
impl<E> WidenAvx2 for E {}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(super) use super::wasm_dot::WidenWasm;
#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
/// Nothing to widen in a build without wasm SIMD.
pub(super) trait WidenWasm {}
#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
impl<E> WidenWasm for E {}

/// `out[t][r] = w[r] . x[t]` on `kernel` (the portable loops where this build lacks it).
fn dot<E: FloatWeight, const R: usize, const T: usize>(kernel: DotKernel, w: [&[E]; R], x: [&[f32]; T]) -> [[f32; R]; T] {
    let cols = w.first().map_or(0, |r| r.len());
    assert!(cols.is_multiple_of(8) && w.iter().all(|r| r.len() == cols) && x.iter().all(|r| r.len() == cols));
    match kernel {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2, FMA and F16C (checked in the guard); every row holds `cols`
        // values, a multiple of 8 (asserted above).
        DotKernel::Avx2 | DotKernel::Avx512Vnni if super::avx2_dot::available() => unsafe { super::avx2_dot::float(w, x) },
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        DotKernel::Simd128 => super::wasm_dot::float::<false, E, R, T>(w, x),
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        DotKernel::RelaxedSimd => super::wasm_dot::float::<true, E, R, T>(w, x),
        _ => portable_dot(w, x),
    }
}

/// The same in plain Rust: [`DotKernel::Portable`], the reference the others are tested against.
fn portable_dot<E: FloatWeight, const R: usize, const T: usize>(w: [&[E]; R], x: [&[f32]; T]) -> [[f32; R]; T] {
    x.map(|x| w.map(|w| w.iter().zip(x).map(|(&w, &x)| w.into() * x).sum()))
}

/// f32 input rows `[rows, cols]` for [`FloatRows`] (copied once per product: a few KB beside
/// a matrix of megabytes).
pub struct FloatInput {
    x: Vec<f32>,
    cols: usize,
}

impl FloatInput {
    /// The rows of row-major `x` `[rows, cols]`.
    pub fn new(x: &[f32], cols: usize) -> Self {
        FloatInput { x: x.to_vec(), cols }
    }
}

impl InputRows for FloatInput {
    type Row<'a> = &'a [f32];

    fn rows(&self) -> usize {
        self.x.len().checked_div(self.cols).unwrap_or(0)
    }

    fn cols(&self) -> usize {
        self.cols
    }

    fn row(&self, t: usize) -> &[f32] {
        &self.x[t * self.cols..(t + 1) * self.cols]
    }
}

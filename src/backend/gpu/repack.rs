//! Weight matrices from the GGUF layout to 4-byte-aligned GPU arrays, in the layouts
//! shaders/weight_formats.wgsl describes, so WGSL can read them as `array<u32>` /
//! `array<f32>`. Nothing is dequantized, except a stack of matrices whose formats differ
//! (see [`repack_together`]); such a stack's common layout is made from the CPU backend's
//! exact repacks of the blocks (`crate::backend::cpu::affine16`), the one decoding of each
//! format.

use candle_core::quantized::{GgmlDType, QTensor};

use super::ops::WeightFormat;
use crate::backend::cpu::quant_matmul::QuantMatrix;
use crate::error::{Error, Result};

/// A weight matrix in the layout of its [`WeightFormat`]: its first array (binding 1) and
/// its second (binding 2, empty for the formats without one), both a whole number of words
/// per row.
pub struct Repacked {
    /// The layout.
    pub format: WeightFormat,
    /// Binding 1's words.
    pub a: Vec<u32>,
    /// Binding 2's words (block scales), or empty.
    pub b: Vec<u32>,
}

fn words(bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
}

fn half(b: &[u8]) -> half::f16 {
    half::f16::from_le_bytes([b[0], b[1]])
}

/// Blocks of `block_bytes` (2 past a whole number of words: the last two the f16 `d`) as
/// words, each block's `d` alone in its last word (its high half zero).
fn padded(data: &[u8], block_bytes: usize) -> Vec<u32> {
    let mut w = Vec::with_capacity(data.len() / block_bytes * block_bytes.div_ceil(4));
    for b in data.chunks_exact(block_bytes) {
        w.extend(words(&b[..block_bytes - 2]));
        w.push(u32::from(u16::from_le_bytes([b[block_bytes - 2], b[block_bytes - 1]])));
    }
    w
}

/// `d` and `offset d` as an f16 pair (d low), if `offset d` is exact in f16 (it is unless it
/// overflows: the offsets are powers of two).
fn with_offset(d: half::f16, offset: f32) -> Option<u32> {
    let m = half::f16::from_f32(offset * d.to_f32());
    (m.is_finite() && m.to_f32() == offset * d.to_f32()).then(|| u32::from(d.to_bits()) | (u32::from(m.to_bits()) << 16))
}

/// Repacks a tensor of any type the engine reads (`crate::gguf::SUPPORTED_TYPES`).
///
/// A Q4_0 block (weights `(q - 8) d`) becomes a Q4_1 block with `m = -8 d`, and a Q5_0 block
/// (`(q - 16) d`) a Q5_1 block with `m = -16 d`: multiplying an f16 by a power of two is
/// exact (checked: a block whose offset would overflow f16 sends the whole matrix to F32),
/// and `q d + m` equals `(q - 8) d` exactly in f32 (both products are exact and so is their
/// sum), so the GPU computes the same weights. It costs 2 bytes more per 32 weights and
/// saves a kernel each.
pub fn repack(t: &QTensor) -> Result<Repacked> {
    let data = t.data().map_err(Error::backend)?;
    let plain = |format, a: Vec<u32>, b: Vec<u32>| Ok(Repacked { format, a, b });
    let with_offsets = |block_bytes: usize, offset: f32, format: WeightFormat| -> Result<Option<Repacked>> {
        let blocks = data.chunks_exact(block_bytes);
        let mut dm = Vec::with_capacity(blocks.len());
        let mut qs = Vec::with_capacity(blocks.len() * (block_bytes - 2) / 4);
        for b in blocks {
            let Some(pair) = with_offset(half(b), offset) else { return Ok(None) };
            dm.push(pair);
            qs.extend(words(&b[2..]));
        }
        Ok(Some(Repacked { format, a: qs, b: dm }))
    };
    match t.dtype() {
        GgmlDType::Q4_1 | GgmlDType::Q5_1 => {
            let (size, format) = if t.dtype() == GgmlDType::Q4_1 { (20, WeightFormat::Q4_1) } else { (24, WeightFormat::Q5_1) };
            let blocks = data.chunks_exact(size);
            let mut dm = Vec::with_capacity(blocks.len());
            let mut qs = Vec::with_capacity(blocks.len() * (size - 4) / 4);
            for b in blocks {
                dm.extend(words(&b[..4]));
                qs.extend(words(&b[4..]));
            }
            plain(format, qs, dm)
        }
        GgmlDType::Q4_0 => with_offsets(18, -8.0, WeightFormat::Q4_1)?.map_or_else(|| repack_f32(t), Ok),
        GgmlDType::Q5_0 => with_offsets(22, -16.0, WeightFormat::Q5_1)?.map_or_else(|| repack_f32(t), Ok),
        GgmlDType::Q8_0 => {
            let blocks = data.chunks_exact(34);
            let mut d = Vec::with_capacity(blocks.len());
            let mut qs = Vec::with_capacity(blocks.len() * 8);
            for b in blocks {
                d.push(half(b).to_f32().to_bits());
                qs.extend(words(&b[2..]));
            }
            plain(WeightFormat::Q8_0, qs, d)
        }
        GgmlDType::Q2K => plain(WeightFormat::Q2K, words(&data).collect(), Vec::new()),
        // 110 bytes a block: padded with 2 zero bytes to 28 words.
        GgmlDType::Q3K => plain(WeightFormat::Q3K, padded(&data, 110), Vec::new()),
        GgmlDType::Q4K => plain(WeightFormat::Q4K, words(&data).collect(), Vec::new()),
        GgmlDType::Q5K => plain(WeightFormat::Q5K, words(&data).collect(), Vec::new()),
        // 210 bytes a block: padded with 2 zero bytes to 53 words.
        GgmlDType::Q6K => plain(WeightFormat::Q6K, padded(&data, 210), Vec::new()),
        GgmlDType::F16 => plain(WeightFormat::F16, words(&data).collect(), Vec::new()),
        GgmlDType::BF16 => plain(WeightFormat::BF16, words(&data).collect(), Vec::new()),
        GgmlDType::F32 => plain(WeightFormat::F32, words(&data).collect(), Vec::new()),
        other => Err(Error::Backend(format!("the GPU backend has no kernel for {other:?} weights"))),
    }
}

/// The tensor dequantized exactly to F32 (candle's arithmetic).
fn repack_f32(t: &QTensor) -> Result<Repacked> {
    let w = crate::model::weights::to_vec(t)?;
    Ok(Repacked { format: WeightFormat::F32, a: w.into_iter().map(f32::to_bits).collect(), b: Vec::new() })
}

/// The tensor in [`WeightFormat::Affine16`], exactly (the CPU's exact repack of its blocks,
/// converted); `None` for float weights.
pub fn repack_affine16(t: &QTensor) -> Result<Option<Repacked>> {
    let (rows, cols) = t.shape().dims2().map_err(Error::backend)?;
    let data = t.data().map_err(Error::backend)?;
    let Some(affine) = QuantMatrix::from_ggml(t.dtype(), &data, rows, cols)?.affine16() else { return Ok(None) };
    let a = affine.q.chunks_exact(4).map(|c| u32::from_le_bytes([c[0] as u8, c[1] as u8, c[2] as u8, c[3] as u8])).collect();
    let b = affine.ab.iter().flat_map(|ab| ab.map(f32::to_bits)).collect();
    Ok(Some(Repacked { format: WeightFormat::Affine16, a, b }))
}

/// Repacks matrices that one kernel will read stacked ([`stack`], [`interleave_rows`]), so
/// they share a layout: each in its own format when all have the same one; otherwise (a
/// Q4_K_M file's Q6_K V projection beside Q4_K Q and K, say) every one of them in
/// [`WeightFormat::Affine16`] (1.5 bytes a weight), or where one of them holds floats,
/// dequantized to F32 (4 bytes a weight); both exact.
pub fn repack_together(parts: &[&QTensor]) -> Result<Vec<Repacked>> {
    let repacked = parts.iter().map(|t| repack(t)).collect::<Result<Vec<_>>>()?;
    if repacked.windows(2).all(|p| p[0].format == p[1].format) {
        return Ok(repacked);
    }
    if let Some(affine) = parts.iter().map(|t| repack_affine16(t)).collect::<Result<Option<Vec<_>>>>()? {
        return Ok(affine);
    }
    parts.iter().map(|t| repack_f32(t)).collect()
}

/// Stacks matrices of one layout row-wise (`[W1; W2; ...]`) so one kernel dispatch computes
/// all of their outputs, back to back.
pub fn stack(parts: Vec<Repacked>) -> Result<Repacked> {
    let mut parts = parts.into_iter();
    let mut out = parts.next().ok_or_else(|| Error::Backend("nothing to stack".into()))?;
    for p in parts {
        if p.format != out.format {
            return Err(Error::Backend(format!("cannot stack a {:?} matrix under a {:?} one", p.format, out.format)));
        }
        out.a.extend(p.a);
        out.b.extend(p.b);
    }
    Ok(out)
}

/// Interleaves the rows of two matrices of the same shape and layout, `[a0; b0; a1; b1;
/// ...]`: the gate and up projections stacked so that gate row i and up row i are rows 2i and
/// 2i + 1 of one matrix, for the matrix kernels' SwiGLU epilogue (`GLU` in matrix.wgsl).
pub fn interleave_rows(a: Repacked, b: Repacked, rows: usize) -> Result<Repacked> {
    fn zip(a: &[u32], b: &[u32], rows: usize) -> Result<Vec<u32>> {
        if rows == 0 || a.len() != b.len() || !a.len().is_multiple_of(rows) {
            return Err(Error::Backend(format!("cannot interleave {rows} rows of {} and {} words", a.len(), b.len())));
        }
        let per_row = a.len() / rows;
        Ok(a.chunks_exact(per_row.max(1)).zip(b.chunks_exact(per_row.max(1))).flat_map(|(x, y)| x.iter().chain(y).copied()).collect())
    }
    if a.format != b.format {
        return Err(Error::Backend(format!("cannot interleave {:?} rows with {:?} rows", a.format, b.format)));
    }
    let second = if a.b.is_empty() && b.b.is_empty() { Vec::new() } else { zip(&a.b, &b.b, rows)? };
    Ok(Repacked { format: a.format, a: zip(&a.a, &b.a, rows)?, b: second })
}

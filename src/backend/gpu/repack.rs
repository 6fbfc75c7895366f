//! Weight matrices from the GGUF layout to 4-byte-aligned GPU arrays (scales and quants
//! apart), so WGSL can read them as `array<u32>` / `array<f32>`. Nothing is dequantized.

use candle_core::quantized::{GgmlDType, QTensor};

use crate::error::{Error, Result};

/// A weight matrix in the layout its matvec kernel reads.
pub enum Repacked {
    /// Q4_1: `dm` = one u32 per block (f16 d low, f16 m high), `qs` = 4 u32 per block.
    /// Q4_0 blocks land here too, with m = -8 d (exact: see [`repack`]).
    Q4_1 { dm: Vec<u32>, qs: Vec<u32> },
    /// Q8_0: `d` = one f32 per block, `qs` = 8 u32 per block (32 signed bytes).
    Q8_0 { d: Vec<f32>, qs: Vec<u32> },
    /// F16: two weights per u32, the file's bytes unchanged.
    F16 { w: Vec<u32> },
    /// F32: the file's values unchanged.
    F32 { w: Vec<f32> },
}

fn words(bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
}

/// Repacks a Q4_0, Q4_1, Q8_0, F16 or F32 tensor.
///
/// A Q4_0 block (weights `(q - 8) d`) becomes a Q4_1 block with `m = -8 d`: multiplying an
/// f16 by -8 is exact, and `q d + m` equals `(q - 8) d` exactly in f32 (both products are
/// exact and so is their difference), so the GPU computes the same weights. It costs 2
/// bytes more per 32 weights than Q4_0 and saves a kernel.
pub fn repack(t: &QTensor) -> Result<Repacked> {
    let data = t.data().map_err(Error::backend)?;
    match t.dtype() {
        GgmlDType::Q4_1 => {
            let blocks = data.chunks_exact(20);
            let mut dm = Vec::with_capacity(blocks.len());
            let mut qs = Vec::with_capacity(blocks.len() * 4);
            for b in blocks {
                dm.extend(words(&b[..4]));
                qs.extend(words(&b[4..]));
            }
            Ok(Repacked::Q4_1 { dm, qs })
        }
        GgmlDType::Q4_0 => {
            let blocks = data.chunks_exact(18);
            let mut dm = Vec::with_capacity(blocks.len());
            let mut qs = Vec::with_capacity(blocks.len() * 4);
            for b in blocks {
                let d = half::f16::from_le_bytes([b[0], b[1]]);
                let m = half::f16::from_f32(-8.0 * d.to_f32());
                dm.push(u32::from(d.to_bits()) | (u32::from(m.to_bits()) << 16));
                qs.extend(words(&b[2..]));
            }
            Ok(Repacked::Q4_1 { dm, qs })
        }
        GgmlDType::Q8_0 => {
            let blocks = data.chunks_exact(34);
            let mut d = Vec::with_capacity(blocks.len());
            let mut qs = Vec::with_capacity(blocks.len() * 8);
            for b in blocks {
                d.push(half::f16::from_le_bytes([b[0], b[1]]).to_f32());
                qs.extend(words(&b[2..]));
            }
            Ok(Repacked::Q8_0 { d, qs })
        }
        GgmlDType::F16 => Ok(Repacked::F16 { w: words(&data).collect() }),
        GgmlDType::F32 => Ok(Repacked::F32 { w: words(&data).map(f32::from_bits).collect() }),
        other => Err(Error::Backend(format!("the GPU backend has no kernel for {other:?} weights (it runs Q4_0, Q4_1, Q8_0, F16, F32)"))),
    }
}

/// Stacks matrices with the same columns row-wise (`[W1; W2; ...]`) so one kernel dispatch
/// computes all of their outputs, back to back. They must share a GPU layout (Q4_0 and Q4_1
/// do).
pub fn stack(parts: Vec<Repacked>) -> Result<Repacked> {
    let mut parts = parts.into_iter();
    let mut out = parts.next().ok_or_else(|| Error::Backend("nothing to stack".into()))?;
    for p in parts {
        match (&mut out, p) {
            (Repacked::Q4_1 { dm, qs }, Repacked::Q4_1 { dm: d2, qs: q2 }) => {
                dm.extend(d2);
                qs.extend(q2);
            }
            (Repacked::Q8_0 { d, qs }, Repacked::Q8_0 { d: d2, qs: q2 }) => {
                d.extend(d2);
                qs.extend(q2);
            }
            (Repacked::F16 { w }, Repacked::F16 { w: w2 }) => w.extend(w2),
            (Repacked::F32 { w }, Repacked::F32 { w: w2 }) => w.extend(w2),
            _ => {
                return Err(Error::Backend(
                    "this model mixes weight types within a layer's Q/K/V or gate/up projections, which the GPU backend cannot fuse: use the CPU backend".into(),
                ))
            }
        }
    }
    Ok(out)
}

/// Interleaves the rows of two matrices of the same shape and layout, `[a0; b0; a1; b1;
/// ...]`: the gate and up projections stacked so that gate row i and up row i are rows 2i and
/// 2i + 1 of one matrix, for the matrix kernels' SwiGLU epilogue (`GLU` in matrix.wgsl).
pub fn interleave_rows(a: Repacked, b: Repacked, rows: usize) -> Result<Repacked> {
    fn zip<T: Copy>(a: &[T], b: &[T], rows: usize) -> Result<Vec<T>> {
        if rows == 0 || a.len() != b.len() || !a.len().is_multiple_of(rows) {
            return Err(Error::Backend(format!("cannot interleave {rows} rows of {} and {} values", a.len(), b.len())));
        }
        let per_row = a.len() / rows;
        Ok(a.chunks_exact(per_row).zip(b.chunks_exact(per_row)).flat_map(|(x, y)| x.iter().chain(y).copied()).collect())
    }
    Ok(match (a, b) {
        (Repacked::Q4_1 { dm, qs }, Repacked::Q4_1 { dm: dm2, qs: qs2 }) => {
            Repacked::Q4_1 { dm: zip(&dm, &dm2, rows)?, qs: zip(&qs, &qs2, rows)? }
        }
        (Repacked::Q8_0 { d, qs }, Repacked::Q8_0 { d: d2, qs: qs2 }) => {
            Repacked::Q8_0 { d: zip(&d, &d2, rows)?, qs: zip(&qs, &qs2, rows)? }
        }
        (Repacked::F16 { w }, Repacked::F16 { w: w2 }) => Repacked::F16 { w: zip(&w, &w2, rows)? },
        (Repacked::F32 { w }, Repacked::F32 { w: w2 }) => Repacked::F32 { w: zip(&w, &w2, rows)? },
        _ => {
            return Err(Error::Backend(
                "this model's gate and up projections have different weight types, which the GPU backend cannot fuse: use the CPU backend"
                    .into(),
            ))
        }
    })
}

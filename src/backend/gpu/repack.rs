//! Quantized blocks from the GGUF layout to 4-byte-aligned GPU arrays (scales and quants
//! apart), so WGSL can read them as `array<u32>` / `array<f32>`.

use candle_core::quantized::{GgmlDType, QTensor};

use crate::error::{Error, Result};

/// A weight matrix in the layout its matvec kernel reads.
pub enum Repacked {
    /// Q4_1: `dm` = one u32 per block (f16 d low, f16 m high), `qs` = 4 u32 per block.
    Q4_1 { dm: Vec<u32>, qs: Vec<u32> },
    /// Q8_0: `d` = one f32 per block, `qs` = 8 u32 per block (32 signed bytes).
    Q8_0 { d: Vec<f32>, qs: Vec<u32> },
}

fn words(bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
}

/// Repacks a Q4_1 or Q8_0 tensor.
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
        other => Err(Error::Backend(format!("no GPU repacking for {other:?} yet"))),
    }
}

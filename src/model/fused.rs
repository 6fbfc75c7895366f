//! Fused projections cut into the matrices every backend runs: Phi-3's `attn_qkv` (W_q, W_k
//! and W_v stacked by rows) and its `ffn_up` (the gate's rows, then the up projection's), and
//! a mixture of experts' stacked matrices (`ffn_up_exps`, `[experts, rows, cols]`). Each
//! part is whole rows of the stored blocks, so no value is requantized.

use std::borrow::Cow;

use candle_core::quantized::{QStorage, QTensor};
use candle_core::Device;

use crate::error::ModelError;

/// `t`'s rows `[rows, cols]` cut into consecutive parts of `parts[i]` rows each, in its own
/// storage type; the parts must add up to its rows.
pub fn split_rows(t: &QTensor, parts: &[usize]) -> Result<Vec<QTensor>, ModelError> {
    let fail = |e: candle_core::Error| ModelError::Malformed(format!("cannot cut the rows of a {:?} tensor: {e}", t.shape()));
    let (rows, cols) = t.shape().dims2().map_err(fail)?;
    if parts.iter().sum::<usize>() != rows {
        return Err(ModelError::Malformed(format!("parts of {parts:?} rows cut from a tensor of {rows}")));
    }
    let data = t.data().map_err(fail)?;
    let row_bytes = data.len() / rows.max(1);
    let mut start = 0;
    parts
        .iter()
        .map(|&n| {
            let bytes = data[start * row_bytes..(start + n) * row_bytes].to_vec();
            start += n;
            let storage = QStorage::from_data(Cow::Owned(bytes), &Device::Cpu, t.dtype()).map_err(fail)?;
            QTensor::new(storage, (n, cols)).map_err(fail)
        })
        .collect()
}

/// A stack of `count` matrices, `[count, rows, cols]` (a mixture of experts' `ffn_up_exps`),
/// cut into each matrix `[rows, cols]`, in its own storage type.
pub fn split_experts(t: &QTensor, count: usize) -> Result<Vec<QTensor>, ModelError> {
    let fail = |e: candle_core::Error| ModelError::Malformed(format!("cannot cut the experts of a {:?} tensor: {e}", t.shape()));
    let (n, rows, cols) = t.shape().dims3().map_err(fail)?;
    if n != count {
        return Err(ModelError::Malformed(format!("{count} experts cut from a stack of {n}")));
    }
    let data = t.data().map_err(fail)?;
    let expert_bytes = data.len() / n.max(1);
    data.chunks_exact(expert_bytes.max(1))
        .take(n)
        .map(|bytes| {
            let storage = QStorage::from_data(Cow::Owned(bytes.to_vec()), &Device::Cpu, t.dtype()).map_err(fail)?;
            QTensor::new(storage, (rows, cols)).map_err(fail)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::GgmlDType;
    use candle_core::Tensor;

    /// Every part, dequantized, is its rows of the whole, bit for bit, in a block type and a
    /// float one; parts that do not add up are refused.
    #[test]
    fn parts_are_the_wholes_rows_exactly() {
        let (rows, cols) = (10, 256);
        let values: Vec<f32> = (0..rows * cols).map(|i| ((i * 7919) % 1013) as f32 / 97.0 - 5.0).collect();
        let whole = Tensor::from_vec(values, (rows, cols), &Device::Cpu).expect("tensor");
        for dtype in [GgmlDType::Q4K, GgmlDType::F16] {
            let t = QTensor::quantize(&whole, dtype).expect("quantize");
            let all = t.dequantize(&Device::Cpu).and_then(|x| x.to_vec2::<f32>()).expect("dequantize");
            let parts = split_rows(&t, &[3, 5, 2]).expect("split");
            let mut first = 0;
            for (part, n) in parts.iter().zip([3, 5, 2]) {
                assert_eq!(part.dtype(), dtype);
                let got = part.dequantize(&Device::Cpu).and_then(|x| x.to_vec2::<f32>()).expect("dequantize part");
                assert_eq!(got, all[first..first + n].to_vec(), "{dtype:?} rows {first}..{}", first + n);
                first += n;
            }
            assert!(split_rows(&t, &[3, 5]).is_err(), "8 of 10 rows");
        }
    }

    /// Each expert, dequantized, is its slice of the stack, bit for bit, in a block type and
    /// a float one; a count other than the stack's is refused.
    #[test]
    fn experts_are_the_stacks_slices_exactly() {
        let (n, rows, cols) = (3, 5, 64);
        let values: Vec<f32> = (0..n * rows * cols).map(|i| ((i * 7919) % 1013) as f32 / 97.0 - 5.0).collect();
        let stack = Tensor::from_vec(values, (n, rows, cols), &Device::Cpu).expect("tensor");
        for dtype in [GgmlDType::Q4_1, GgmlDType::F16] {
            let t = QTensor::quantize(&stack, dtype).expect("quantize");
            let all = t.dequantize(&Device::Cpu).and_then(|x| x.to_vec3::<f32>()).expect("dequantize");
            let experts = split_experts(&t, n).expect("split");
            assert_eq!(experts.len(), n);
            for (e, expert) in experts.iter().enumerate() {
                assert_eq!((expert.dtype(), expert.shape().dims()), (dtype, &[rows, cols][..]));
                let got = expert.dequantize(&Device::Cpu).and_then(|x| x.to_vec2::<f32>()).expect("dequantize expert");
                assert_eq!(got, all[e], "{dtype:?} expert {e}");
            }
            assert!(split_experts(&t, n - 1).is_err(), "2 of 3 experts");
        }
    }
}

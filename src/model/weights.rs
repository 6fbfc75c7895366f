//! GGUF tensors -> the named, shape-checked weights of a llama model (still quantized).

use std::io::{Read, Seek};

use candle_core::quantized::QTensor;
use candle_core::Device;

use super::config::Config;
use super::gguf::Gguf;
use crate::error::ModelError;

/// One transformer block's weights. Matrices are `[out_features, in_features]`, quantized
/// as stored in the file; norm gains are plain `f32`.
pub struct LayerWeights {
    /// RMSNorm gain before attention, `[dim]`.
    pub attn_norm: Vec<f32>,
    /// Query projection, `[n_heads * head_dim, dim]`.
    pub wq: QTensor,
    /// Key projection, `[kv_dim, dim]`.
    pub wk: QTensor,
    /// Value projection, `[kv_dim, dim]`.
    pub wv: QTensor,
    /// Attention output projection, `[dim, n_heads * head_dim]`.
    pub wo: QTensor,
    /// RMSNorm gain before the feed-forward network, `[dim]`.
    pub ffn_norm: Vec<f32>,
    /// SwiGLU gate projection, `[ffn_dim, dim]`.
    pub w_gate: QTensor,
    /// SwiGLU up projection, `[ffn_dim, dim]`.
    pub w_up: QTensor,
    /// Feed-forward down projection, `[dim, ffn_dim]`.
    pub w_down: QTensor,
}

/// All weights of a llama model as stored in its GGUF file.
pub struct Weights {
    /// Token embedding, `[vocab, dim]`.
    pub token_embd: QTensor,
    /// Final RMSNorm gain, `[dim]`.
    pub output_norm: Vec<f32>,
    /// LM head `[vocab, dim]`; `None` when it is tied to `token_embd`.
    pub output: Option<QTensor>,
    /// Transformer blocks in order.
    pub layers: Vec<LayerWeights>,
}

impl Weights {
    /// Reads every tensor the configuration needs, checking names, types and shapes.
    /// `progress(done_bytes, total_bytes)` is called after each tensor.
    pub fn read<R: Read + Seek>(gguf: &Gguf, reader: &mut R, cfg: &Config, progress: &mut dyn FnMut(u64, u64)) -> Result<Self, ModelError> {
        let total = gguf.file_len();
        let mut done = 0u64;
        let mut load = |name: &str, expected: &[usize]| -> Result<QTensor, ModelError> {
            check_shape(gguf, name, expected)?;
            let t = gguf.tensor(reader, name)?;
            done += gguf.tensor_bytes(name);
            progress(done, total);
            Ok(t)
        };
        let (d, f, v, q, kv) = (cfg.dim, cfg.ffn_dim, cfg.vocab_size, cfg.n_heads * cfg.head_dim, cfg.kv_dim());
        let token_embd = load("token_embd.weight", &[v, d])?;
        let output_norm = to_vec(&load("output_norm.weight", &[d])?)?;
        let output = match gguf.tensor_info("output.weight") {
            Some(_) => Some(load("output.weight", &[v, d])?),
            None => None,
        };
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            layers.push(LayerWeights {
                attn_norm: to_vec(&load(&n("attn_norm"), &[d])?)?,
                wq: load(&n("attn_q"), &[q, d])?,
                wk: load(&n("attn_k"), &[kv, d])?,
                wv: load(&n("attn_v"), &[kv, d])?,
                wo: load(&n("attn_output"), &[d, q])?,
                ffn_norm: to_vec(&load(&n("ffn_norm"), &[d])?)?,
                w_gate: load(&n("ffn_gate"), &[f, d])?,
                w_up: load(&n("ffn_up"), &[f, d])?,
                w_down: load(&n("ffn_down"), &[d, f])?,
            });
        }
        Ok(Weights { token_embd, output_norm, output, layers })
    }

    /// The LM head: `output.weight`, or the embedding when the two are tied.
    pub fn lm_head(&self) -> &QTensor {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }
}

fn check_shape(gguf: &Gguf, name: &str, expected: &[usize]) -> Result<(), ModelError> {
    let (found, _) = gguf.tensor_info(name).ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
    if found != expected {
        return Err(ModelError::ShapeMismatch { name: name.to_string(), found, expected: expected.to_vec() });
    }
    Ok(())
}

/// Dequantizes a tensor to a flat `f32` vector (row-major).
pub fn to_vec(t: &QTensor) -> Result<Vec<f32>, ModelError> {
    t.dequantize(&Device::Cpu)
        .and_then(|x| x.flatten_all())
        .and_then(|x| x.to_vec1::<f32>())
        .map_err(|e| ModelError::Malformed(format!("cannot dequantize: {e}")))
}

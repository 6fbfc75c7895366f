//! GGUF tensors -> the named, shape-checked weights of a llama model (still quantized).

use std::io::{Read, Seek};

use candle_core::quantized::QTensor;
use candle_core::Device;

use super::config::Config;
use crate::error::ModelError;
use crate::gguf::Gguf;

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

/// The tensors of one transformer block, in the order [`Weights::read`] takes them.
const LAYER_TENSORS: [&str; 9] = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"];

/// Every tensor the configuration needs, with its expected shape, in reading order:
/// the embedding, the final norm, the LM head if the file has its own, then each block.
fn plan(gguf: &Gguf, cfg: &Config) -> Vec<(String, Vec<usize>)> {
    let (d, f, v, q, kv) = (cfg.dim, cfg.ffn_dim, cfg.vocab_size, cfg.n_heads * cfg.head_dim, cfg.kv_dim());
    let mut out = vec![("token_embd.weight".to_string(), vec![v, d]), ("output_norm.weight".to_string(), vec![d])];
    if gguf.tensor_info("output.weight").is_some() {
        out.push(("output.weight".to_string(), vec![v, d]));
    }
    for i in 0..cfg.n_layers {
        let shapes = [vec![d], vec![q, d], vec![kv, d], vec![kv, d], vec![d, q], vec![d], vec![f, d], vec![f, d], vec![d, f]];
        out.extend(LAYER_TENSORS.iter().zip(shapes).map(|(t, shape)| (format!("blk.{i}.{t}.weight"), shape)));
    }
    out
}

impl Weights {
    /// Checks, from the header alone, that every tensor the configuration needs is present
    /// with its shape and a type the engine computes with: what [`Weights::read`] would
    /// refuse, found before a byte of tensor data is read.
    pub fn check(gguf: &Gguf, cfg: &Config) -> Result<(), ModelError> {
        for (name, shape) in plan(gguf, cfg) {
            check_shape(gguf, &name, &shape)?;
            gguf.check_type(&name)?;
        }
        Ok(())
    }

    /// Reads every tensor the configuration needs, checking names, types and shapes first.
    /// `progress(done_bytes, total_bytes)` is called after each tensor.
    pub fn read<R: Read + Seek>(gguf: &Gguf, reader: &mut R, cfg: &Config, progress: &mut dyn FnMut(u64, u64)) -> Result<Self, ModelError> {
        Self::check(gguf, cfg)?;
        let total = gguf.file_len();
        let mut done = 0u64;
        let plan = plan(gguf, cfg);
        let mut tensors = plan.iter().map(|(name, _)| {
            let t = gguf.tensor(reader, name)?;
            done += gguf.tensor_bytes(name);
            progress(done, total);
            Ok::<_, ModelError>(t)
        });
        let mut next = || tensors.next().unwrap_or_else(|| Err(ModelError::Malformed("fewer tensors than planned".into())));
        let token_embd = next()?;
        let output_norm = to_vec(&next()?)?;
        let output = if plan.len() > 2 + cfg.n_layers * LAYER_TENSORS.len() { Some(next()?) } else { None };
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for _ in 0..cfg.n_layers {
            // The fields in LAYER_TENSORS order.
            layers.push(LayerWeights {
                attn_norm: to_vec(&next()?)?,
                wq: next()?,
                wk: next()?,
                wv: next()?,
                wo: next()?,
                ffn_norm: to_vec(&next()?)?,
                w_gate: next()?,
                w_up: next()?,
                w_down: next()?,
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

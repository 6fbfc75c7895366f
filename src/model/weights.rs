//! GGUF tensors -> the named, shape-checked weights of a model (still quantized), in the one
//! form both backends run: llama's block with the architecture's extras.

use std::collections::HashMap;
use std::io::{Read, Seek};

use candle_core::quantized::QTensor;
use candle_core::Device;
use serde::Serialize;

use super::architecture::RopePairs;
use super::config::Config;
use super::rope::{halves_to_pairs, permute, permute_rows, RopeFrequencies};
use crate::error::ModelError;
use crate::gguf::{type_name, Gguf};

/// One transformer block's weights. Matrices are `[out_features, in_features]`, quantized
/// as stored in the file; norm gains and biases are plain `f32`. In a model whose RoPE pairs
/// split halves, W_q's and W_k's rows (and their biases and head-norm gains) are already
/// reordered so that pairs are adjacent ([`halves_to_pairs`]).
pub struct LayerWeights {
    /// RMSNorm gain before attention, `[dim]`.
    pub attn_norm: Vec<f32>,
    /// Query projection, `[n_heads * head_dim, dim]`.
    pub wq: QTensor,
    /// Key projection, `[kv_dim, dim]`.
    pub wk: QTensor,
    /// Value projection, `[kv_dim, dim]`.
    pub wv: QTensor,
    /// Biases added to the Q, K and V projections (Qwen2), if the file has them.
    pub qkv_bias: Option<QkvBias>,
    /// RMSNorm gains of each head's q and k before RoPE (Qwen3), if the architecture has them.
    pub head_norm: Option<HeadNorm>,
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

/// Biases of the Q, K and V projections.
pub struct QkvBias {
    /// `[n_heads * head_dim]`.
    pub q: Vec<f32>,
    /// `[kv_dim]`.
    pub k: Vec<f32>,
    /// `[kv_dim]`.
    pub v: Vec<f32>,
}

impl QkvBias {
    /// The three biases end to end, `[n_heads * head_dim + 2 kv_dim]`: one per row of the
    /// stacked Q/K/V projection.
    pub fn stacked(&self) -> Vec<f32> {
        [&self.q[..], &self.k, &self.v].concat()
    }
}

/// RMSNorm gains applied to every head of q and of k, each `[head_dim]`.
pub struct HeadNorm {
    /// Gain of each query head.
    pub q: Vec<f32>,
    /// Gain of each key head.
    pub k: Vec<f32>,
}

/// All weights of a model as stored in its GGUF file, and the RoPE frequencies they run with.
pub struct Weights {
    /// Token embedding, `[vocab, dim]`.
    pub token_embd: QTensor,
    /// Final RMSNorm gain, `[dim]`.
    pub output_norm: Vec<f32>,
    /// LM head `[vocab, dim]`; `None` when it is tied to `token_embd`.
    pub output: Option<QTensor>,
    /// Transformer blocks in order.
    pub layers: Vec<LayerWeights>,
    /// Each RoPE pair's frequency: from the configuration, and Llama 3's per-pair factors
    /// (`rope_freqs.weight`) where the file has them.
    pub rope: RopeFrequencies,
}

/// A model's weights in figures, for the page's stats and load status.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct WeightsSummary {
    /// Weights in every tensor (a tied LM head counted once).
    pub parameters: u64,
    /// Bytes they take as stored.
    pub bytes: u64,
    /// The storage types by their share of the bytes, largest first (under 0.5% left out),
    /// e.g. `Q4_1 84%, Q8_0 16%`.
    pub types: String,
}

/// Per-pair RoPE factors (Llama 3), `[head_dim / 2]`, when the file has them.
const ROPE_FACTORS: &str = "rope_freqs.weight";

/// Every tensor the configuration needs, with its expected shape: the embedding, the final
/// norm, the LM head and RoPE factors if the file has its own, then each block (biases where
/// the architecture requires them or the file has them, head norms where the architecture has them).
fn plan(gguf: &Gguf, cfg: &Config) -> Vec<(String, Vec<usize>)> {
    let (d, f, v, q, kv, hd) = (cfg.dim, cfg.ffn_dim, cfg.vocab_size, cfg.n_heads * cfg.head_dim, cfg.kv_dim(), cfg.head_dim);
    let mut out = vec![("token_embd.weight".to_string(), vec![v, d]), ("output_norm.weight".to_string(), vec![d])];
    if gguf.tensor_info("output.weight").is_some() {
        out.push(("output.weight".to_string(), vec![v, d]));
    }
    if gguf.tensor_info(ROPE_FACTORS).is_some() {
        out.push((ROPE_FACTORS.to_string(), vec![hd / 2]));
    }
    let arch = cfg.architecture;
    for i in 0..cfg.n_layers {
        let mut block = vec![
            ("attn_norm.weight", vec![d]),
            ("attn_q.weight", vec![q, d]),
            ("attn_k.weight", vec![kv, d]),
            ("attn_v.weight", vec![kv, d]),
            ("attn_output.weight", vec![d, q]),
            ("ffn_norm.weight", vec![d]),
            ("ffn_gate.weight", vec![f, d]),
            ("ffn_up.weight", vec![f, d]),
            ("ffn_down.weight", vec![d, f]),
        ];
        if arch.requires_qkv_bias() || gguf.tensor_info(&format!("blk.{i}.attn_q.bias")).is_some() {
            block.extend([("attn_q.bias", vec![q]), ("attn_k.bias", vec![kv]), ("attn_v.bias", vec![kv])]);
        }
        if arch.has_head_norm() {
            block.extend([("attn_q_norm.weight", vec![hd]), ("attn_k_norm.weight", vec![hd])]);
        }
        out.extend(block.into_iter().map(|(t, shape)| (format!("blk.{i}.{t}"), shape)));
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

    /// Bytes of every tensor the configuration needs, as stored (what [`Weights::read`] holds
    /// in memory), from the header alone.
    pub fn bytes_needed(gguf: &Gguf, cfg: &Config) -> u64 {
        plan(gguf, cfg).iter().map(|(name, _)| gguf.tensor_bytes(name)).sum()
    }

    /// Reads every tensor the configuration needs, checking names, types and shapes first.
    /// `progress(done_bytes, total_bytes)` is called after each tensor.
    pub fn read<R: Read + Seek>(gguf: &Gguf, reader: &mut R, cfg: &Config, progress: &mut dyn FnMut(u64, u64)) -> Result<Self, ModelError> {
        Self::check(gguf, cfg)?;
        let total = gguf.file_len();
        let mut done = 0u64;
        let mut tensors = HashMap::new();
        for (name, _) in plan(gguf, cfg) {
            let t = gguf.tensor(reader, &name)?;
            done += gguf.tensor_bytes(&name);
            progress(done, total);
            tensors.insert(name, t);
        }
        let mut take = |name: &str| tensors.remove(name).ok_or_else(|| ModelError::MissingTensor(name.to_string()));
        let token_embd = take("token_embd.weight")?;
        let output_norm = to_vec(&take("output_norm.weight")?)?;
        let output = take("output.weight").ok();
        let factors = take(ROPE_FACTORS).ok().map(|t| rope_factors(&t)).transpose()?;
        let rope = RopeFrequencies::new(cfg.head_dim, cfg.rope_base, cfg.rope_scale, factors.as_deref());
        // Split-half RoPE pairs made adjacent: the order of W_q's and W_k's rows, and of a head.
        let halves = cfg.architecture.rope_pairs() == RopePairs::Halves;
        let (q_order, k_order, head_order) =
            (halves_to_pairs(cfg.head_dim, cfg.n_heads), halves_to_pairs(cfg.head_dim, cfg.n_kv_heads), halves_to_pairs(cfg.head_dim, 1));
        let rows = |t: QTensor, order: &[usize]| if halves { permute_rows(&t, order) } else { Ok(t) };
        let gains = |v: Vec<f32>, order: &[usize]| if halves { permute(&v, order) } else { v };
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let mut take = |t: &str| take(&format!("blk.{i}.{t}"));
            let qkv_bias = match take("attn_q.bias") {
                Ok(q) => Some(QkvBias {
                    q: gains(to_vec(&q)?, &q_order),
                    k: gains(to_vec(&take("attn_k.bias")?)?, &k_order),
                    v: to_vec(&take("attn_v.bias")?)?,
                }),
                Err(_) => None,
            };
            let head_norm = match take("attn_q_norm.weight") {
                Ok(q) => {
                    Some(HeadNorm { q: gains(to_vec(&q)?, &head_order), k: gains(to_vec(&take("attn_k_norm.weight")?)?, &head_order) })
                }
                Err(_) => None,
            };
            layers.push(LayerWeights {
                attn_norm: to_vec(&take("attn_norm.weight")?)?,
                wq: rows(take("attn_q.weight")?, &q_order)?,
                wk: rows(take("attn_k.weight")?, &k_order)?,
                wv: take("attn_v.weight")?,
                qkv_bias,
                head_norm,
                wo: take("attn_output.weight")?,
                ffn_norm: to_vec(&take("ffn_norm.weight")?)?,
                w_gate: take("ffn_gate.weight")?,
                w_up: take("ffn_up.weight")?,
                w_down: take("ffn_down.weight")?,
            });
        }
        Ok(Weights { token_embd, output_norm, output, layers, rope })
    }

    /// What the weights are, in figures: parameters, bytes as stored, storage types.
    pub fn summary(&self) -> WeightsSummary {
        let mut by_type: Vec<(&'static str, u64)> = Vec::new();
        let (mut parameters, mut bytes) = (0u64, 0u64);
        let mut count = |name: &'static str, elements: usize, size: usize| {
            parameters += elements as u64;
            bytes += size as u64;
            match by_type.iter_mut().find(|(n, _)| *n == name) {
                Some(entry) => entry.1 += size as u64,
                None => by_type.push((name, size as u64)),
            }
        };
        let mut matrix = |t: &QTensor| count(type_name(t.dtype()), t.shape().elem_count(), t.storage_size_in_bytes());
        matrix(&self.token_embd);
        if let Some(output) = &self.output {
            matrix(output);
        }
        for l in &self.layers {
            for t in [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down] {
                matrix(t);
            }
        }
        let mut vectors = self.output_norm.len();
        for l in &self.layers {
            vectors += l.attn_norm.len() + l.ffn_norm.len();
            vectors += l.qkv_bias.as_ref().map_or(0, |b| b.q.len() + b.k.len() + b.v.len());
            vectors += l.head_norm.as_ref().map_or(0, |n| n.q.len() + n.k.len());
        }
        count("F32", vectors, vectors * 4);
        by_type.sort_by_key(|entry| std::cmp::Reverse(entry.1));
        let share = |b: u64| 100.0 * b as f64 / bytes.max(1) as f64;
        let types =
            by_type.iter().filter(|(_, b)| share(*b) >= 0.5).map(|(n, b)| format!("{n} {:.0}%", share(*b))).collect::<Vec<_>>().join(", ");
        WeightsSummary { parameters, bytes, types }
    }

    /// The LM head: `output.weight`, or the embedding when the two are tied.
    pub fn lm_head(&self) -> &QTensor {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }
}

/// Llama 3's per-pair RoPE factors, each a finite number above 0 (a wavelength multiplier).
fn rope_factors(t: &QTensor) -> Result<Vec<f32>, ModelError> {
    let factors = to_vec(t)?;
    match factors.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
        Some(bad) => Err(ModelError::Metadata {
            key: ROPE_FACTORS.into(),
            problem: format!("holds {bad}; every RoPE frequency factor must be a finite number above 0"),
        }),
        None => Ok(factors),
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

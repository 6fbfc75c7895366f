//! The model's weights onto the GPU: each matrix repacked into its kernels' aligned layout
//! (repack.rs) and uploaded, Q/K/V stacked into one matrix and gate/up interleaved into
//! another (one dispatch each), and each layer's KV cache made beside its weights. The
//! dispatches that read them are built after, in forward.rs.

use candle_core::quantized::QTensor;

use super::device::GpuContext;
use super::ops::{own_bias_len, AttentionScope, GpuMatrix, Routing, RowBands};
use super::repack::{interleave_rows, repack, repack_together, stack};
use crate::error::{Error, Result};
use crate::model::{Config, ExpertWeights, Experts, FeedForward, HeadNormSpan, LayerRope, LayerWeights, Mixer, Norm};

/// A norm on the GPU, as the projection after it takes it.
pub(super) enum GpuNorm {
    /// An RMSNorm's gain, `[dim]` (with what the projection's epilogue reads after it): the
    /// projection norms its input in its prologue (matrix.wgsl's NORM).
    Folded(wgpu::Buffer),
    /// A LayerNorm's gain then bias, `[2 dim]`: a dispatch of its own (layer_norm.wgsl) norms
    /// the input into [`Activations::normed`](super::activations::Activations::normed), which
    /// the projection reads.
    Layer(wgpu::Buffer),
}

impl GpuNorm {
    /// The norm `n` uploaded: a LayerNorm's gain and bias in one buffer, or an RMSNorm's gain
    /// with `after` (what the projection's epilogue reads after it) in another.
    pub fn upload(ctx: &GpuContext, label: &str, n: &Norm, after: &[f32], bytes: &mut Uploaded) -> GpuNorm {
        match &n.bias {
            Some(bias) => GpuNorm::Layer(bytes.storage(ctx, label, &[&n.gain[..], bias].concat())),
            None => GpuNorm::Folded(bytes.storage(ctx, label, &[&n.gain[..], after].concat())),
        }
    }
}

/// One transformer layer on the GPU: its weights, norms and KV cache.
pub(super) struct GpuLayer {
    /// The attention's (or the convolution's) norm: an RMSNorm's gain, `[dim]`, and after it
    /// the Q/K/V bias, `[n_heads * hd + 2 kv]`, where the model has one (a decode step's Q/K/V
    /// projection reads both there, [`QkvBiases::AfterNorm`](super::ops::QkvBiases::AfterNorm)), or else each head's
    /// norm gains, q's then k's, `[2 hd]`, where it has those
    /// ([`RopeKv::head_norm`](super::ops::RopeKv::head_norm)); or a LayerNorm's gain and bias;
    /// `None` without pre-norms (OLMo 2).
    pub attn_norm: Option<GpuNorm>,
    /// Attention's matrices, or a short convolution's (LFM2's convolving layers).
    pub mixer: GpuMixer,
    /// The key cache, `[context, kv]` f32, or with a half-float cache `[context, kv / 2]` u32
    /// of two halves each; a convolving layer's gated inputs, `[context, dim]` f32.
    pub k_cache: wgpu::Buffer,
    /// The value cache, laid out as the key cache (a convolving layer's holds nothing).
    pub v_cache: wgpu::Buffer,
    /// The feed-forward's norm (an RMSNorm's gain, `[dim]`, or a LayerNorm's gain and bias);
    /// `None` without pre-norms.
    pub ffn_norm: Option<GpuNorm>,
    /// The feed-forward's matrices: one feed-forward's, or a mixture of experts'.
    pub ffn: GpuFfn,
    /// The output and feed-forward projections' biases, where the model has them (GPT-2).
    pub biases: Option<GpuBiases>,
    /// Both sublayers read the block's input (a parallel residual): the feed-forward its own
    /// LayerNorm of it, `ffn_normed` (GPT-NeoX's), or without `ffn_norm` the attention's,
    /// `normed` (Phi-2's).
    pub parallel: bool,
    /// The post norms' gains after the attention and after the feed-forward, each `[dim]`,
    /// where the model has them (Gemma 3).
    pub post_norm: Option<[wgpu::Buffer; 2]>,
    /// The sub-norms' gains before the output projection, `[n_heads * hd]`, and before the
    /// down projection, `[ffn]`, where the model has them (BitNet): each projection's prologue
    /// RMS-norms its input with one.
    pub sub_norms: Option<[wgpu::Buffer; 2]>,
    /// What the layer's attention sees (a sliding-window layer's window) and how it caps its
    /// scores (Gemma 2's softcap).
    pub scope: AttentionScope,
    /// The RoPE table its queries and keys turn by.
    pub rope: LayerRope,
}

/// A layer's feed-forward on the GPU.
pub(super) enum GpuFfn {
    /// One feed-forward every token runs.
    Dense {
        /// Gate and up rows interleaved (gate i, up i), `[2 ffn, dim]`, for the SwiGLU
        /// epilogue; the up projection alone, `[ffn, dim]`, where the feed-forward is not
        /// gated (`gated`).
        gate_up: GpuMatrix,
        /// Whether `gate_up` holds the gate's rows (GPT-2's does not).
        gated: bool,
        /// The down projection, `[dim, ffn]`.
        down: GpuMatrix,
    },
    /// A mixture of experts.
    Experts(GpuExperts),
}

/// A mixture of experts' matrices on the GPU, each expert's stacked (matrix.wgsl's EXPERTS).
pub(super) struct GpuExperts {
    /// The router, `[count, dim]`.
    pub router: GpuMatrix,
    /// Each expert's gate and up rows interleaved, `[count, 2 ffn, dim]`: its `rows` one
    /// expert's (`2 ffn`).
    pub gate_up: GpuMatrix,
    /// Each expert's down projection, `[count, dim, ffn]`: its `rows` one expert's (`dim`).
    pub down: GpuMatrix,
    /// The routing shape.
    pub routing: Routing,
}

/// How a layer mixes positions, on the GPU.
pub(super) enum GpuMixer {
    /// Attention.
    Attention(GpuAttention),
    /// A gated short convolution (LFM2's).
    ShortConv(GpuShortConv),
}

/// An attending layer's matrices on the GPU.
pub(super) struct GpuAttention {
    /// Q, K and V stacked row-wise, `[n_heads * hd + 2 kv, dim]`.
    pub wqkv: GpuMatrix,
    /// The stacked Q/K/V bias, `[n_heads * hd + 2 kv]` padded to whole vec4s
    /// ([`own_bias_len`]), where the model has one (Qwen2, StableLM 2): the RoPE dispatch's,
    /// and the epilogue's where no norm's gains precede them ([`QkvBiases::Own`](super::ops::QkvBiases::Own)).
    pub qkv_bias: Option<wgpu::Buffer>,
    /// The query and key head norms' gains, q's then k's: `[2 * hd]` (each head's, Qwen3's)
    /// or `[n_heads * hd + kv]` (the whole projection's, OLMo 2's), where the model has them.
    pub head_norm: Option<(wgpu::Buffer, HeadNormSpan)>,
    /// The output projection, `[dim, n_heads * hd]`.
    pub wo: GpuMatrix,
}

/// A convolving layer's weights on the GPU (LFM2's `shortconv`).
pub(super) struct GpuShortConv {
    /// The input projection, `[3 dim, dim]`: b's rows, c's, x''s.
    pub in_proj: GpuMatrix,
    /// Each channel's kernel, `[dim, width]`.
    pub kernel: wgpu::Buffer,
    /// Positions each kernel spans.
    pub width: u32,
    /// The output projection, `[dim, dim]`.
    pub out_proj: GpuMatrix,
}

/// A layer's biases of its output and feed-forward projections on the GPU, each padded to
/// whole vec4s ([`own_bias_len`]: the matrix kernels' BIAS reads them as the gain binding).
pub(super) struct GpuBiases {
    /// The attention's output projection's, `[dim]`.
    pub wo: wgpu::Buffer,
    /// The up projection's, `[ffn]`.
    pub up: wgpu::Buffer,
    /// The down projection's, `[dim]`.
    pub down: wgpu::Buffer,
}

/// `bias` padded to whole vec4s and uploaded.
pub(super) fn padded_bias(ctx: &GpuContext, label: &str, bias: &[f32], bytes: &mut Uploaded) -> wgpu::Buffer {
    let mut padded = bias.to_vec();
    padded.resize(own_bias_len(bias.len()), 0.0);
    bytes.storage(ctx, label, &padded)
}

/// Bytes uploaded so far: the matrices the kernels read, and everything else (norms, biases,
/// KV caches).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Uploaded {
    /// The weight matrices (what a decode step reads, but `unpicked`).
    pub weights: u64,
    /// Of `weights`, the share of a mixture of experts' matrices a token does not read: the
    /// experts it does not pick, on average.
    pub unpicked: u64,
    /// Norm gains, biases and KV caches.
    pub other: u64,
}

impl Uploaded {
    /// A buffer of `other`'s kind, counted.
    fn storage<T: bytemuck::Pod>(&mut self, ctx: &GpuContext, label: &str, data: &[T]) -> wgpu::Buffer {
        let b = ctx.storage(label, data);
        self.other += b.size();
        b
    }
}

impl GpuLayer {
    /// Uploads layer `l`, the model's layer `index`, of a model shaped `cfg` with a KV cache
    /// of `capacity` positions (in half floats with `kv_f16`).
    pub fn upload(
        ctx: &GpuContext,
        cfg: &Config,
        index: usize,
        l: &LayerWeights,
        capacity: usize,
        kv_f16: bool,
        bytes: &mut Uploaded,
    ) -> Result<Self> {
        let (mixer, attn_norm_after, cache_words) = match &l.mixer {
            Mixer::Attention(a) => {
                let kv = cfg.kv_dim();
                let after = match (&a.qkv_bias, &a.head_norm) {
                    (Some(b), _) => b.stacked(),
                    (None, Some(n)) if n.span(cfg.head_dim) == HeadNormSpan::Head => [&n.q[..], &n.k].concat(),
                    (None, _) => Vec::new(),
                };
                let mixer = GpuMixer::Attention(GpuAttention {
                    wqkv: stacked(ctx, &[&a.wq, &a.wk, &a.wv], &mut bytes.weights)?,
                    qkv_bias: a.qkv_bias.as_ref().map(|b| padded_bias(ctx, "qkv bias", &b.stacked(), bytes)),
                    head_norm: a
                        .head_norm
                        .as_ref()
                        .map(|n| (bytes.storage(ctx, "head norm", &[&n.q[..], &n.k].concat()), n.span(cfg.head_dim))),
                    wo: matrix(ctx, &a.wo, &mut bytes.weights)?,
                });
                (mixer, after, if kv_f16 { capacity * kv / 2 } else { capacity * kv })
            }
            Mixer::ShortConv(c) => {
                let mixer = GpuMixer::ShortConv(GpuShortConv {
                    in_proj: matrix(ctx, &c.in_proj, &mut bytes.weights)?,
                    kernel: bytes.storage(ctx, "short conv kernel", &c.kernel),
                    width: c.width as u32,
                    out_proj: matrix(ctx, &c.out_proj, &mut bytes.weights)?,
                });
                (mixer, Vec::new(), capacity * cfg.dim)
            }
            // GpuBackend::with_options refuses a model with scanning layers before any upload.
            Mixer::Ssm(_) => return Err(Error::Backend("Mamba-2 layers run on the CPU backend only".into())),
        };
        // A convolving layer's gated inputs are f32 whatever the KV cache's precision; its
        // value cache holds nothing (a binding needs a buffer).
        let value_words = if matches!(mixer, GpuMixer::ShortConv(_)) { 4 } else { cache_words };
        let attn_label = if attn_norm_after.is_empty() { "attn_norm" } else { "attn_norm and what follows it" };
        let ffn = match (&l.ffn, &cfg.experts) {
            (FeedForward::Dense(f), _) => GpuFfn::Dense {
                gate_up: match &f.gate {
                    Some(gate) => gate_up(ctx, gate, &f.up, &mut bytes.weights)?,
                    None => matrix(ctx, &f.up, &mut bytes.weights)?,
                },
                gated: f.gate.is_some(),
                down: matrix(ctx, &f.down, &mut bytes.weights)?,
            },
            (FeedForward::Experts(e), Some(shape)) => GpuFfn::Experts(experts(ctx, e, shape, bytes)?),
            (FeedForward::Experts(_), None) => return Err(Error::Backend("experts in a model that names none".into())),
        };
        Ok(GpuLayer {
            attn_norm: l.attn_norm.as_ref().map(|norm| GpuNorm::upload(ctx, attn_label, norm, &attn_norm_after, bytes)),
            mixer,
            k_cache: bytes.storage(ctx, "k cache", &vec![0u32; cache_words]),
            v_cache: bytes.storage(ctx, "v cache", &vec![0u32; value_words]),
            ffn_norm: l.ffn_norm.as_ref().map(|norm| GpuNorm::upload(ctx, "ffn_norm", norm, &[], bytes)),
            ffn,
            parallel: cfg.parallel_residual,
            biases: l.biases.as_ref().map(|b| GpuBiases {
                wo: padded_bias(ctx, "attn_output bias", &b.wo, bytes),
                up: padded_bias(ctx, "ffn_up bias", &b.up, bytes),
                down: padded_bias(ctx, "ffn_down bias", &b.down, bytes),
            }),
            post_norm: l
                .post_norm
                .as_ref()
                .map(|p| [bytes.storage(ctx, "post_attention_norm", &p.attn), bytes.storage(ctx, "post_ffw_norm", &p.ffn)]),
            sub_norms: l
                .sub_norms
                .as_ref()
                .map(|n| [bytes.storage(ctx, "attn_sub_norm", &n.attn), bytes.storage(ctx, "ffn_sub_norm", &n.ffn)]),
            scope: AttentionScope {
                window: cfg
                    .sliding_window
                    .filter(|_| cfg.architecture.is_sliding_layer(index))
                    .map_or(0, |w| w.min(u32::MAX as usize) as u32),
                softcap: cfg.attn_softcap.unwrap_or(0.0),
                score_scale: cfg.attention_scale,
                alibi_max_bias: cfg.alibi_max_bias.unwrap_or(0.0),
            },
            rope: cfg.layer_rope(index),
        })
    }
}

/// The embedding table or an LM head of its own, in as many row bands as the adapter's
/// largest binding needs (one, unless the vocabulary is large and the binding small).
pub(super) fn banded(ctx: &GpuContext, t: &QTensor, weight_bytes: &mut u64) -> Result<RowBands> {
    let (rows, cols) = t.shape().dims2().map_err(Error::backend)?;
    let m = RowBands::upload(ctx, &repack(t)?, rows as u32, cols as u32)?;
    *weight_bytes += m.bytes();
    Ok(m)
}

/// One matrix as it is.
fn matrix(ctx: &GpuContext, t: &QTensor, weight_bytes: &mut u64) -> Result<GpuMatrix> {
    let (rows, cols) = t.shape().dims2().map_err(Error::backend)?;
    let m = GpuMatrix::upload(ctx, &repack(t)?, rows as u32, cols as u32)?;
    *weight_bytes += m.bytes();
    Ok(m)
}

/// A mixture of experts uploaded (the experts a token does not pick counted as
/// [`Uploaded::unpicked`]): the router as it is, every expert's gate and up rows
/// interleaved (as [`gate_up`]'s) and stacked expert after expert, their down projections
/// stacked likewise; each stack in one layout ([`repack_together`]), its `rows` one
/// expert's.
fn experts(ctx: &GpuContext, e: &ExpertWeights, shape: &Experts, bytes: &mut Uploaded) -> Result<GpuExperts> {
    // Only Granite 4.0 H's files hold a shared expert, and GpuBackend::with_options refuses them.
    if e.shared.is_some() {
        return Err(Error::Backend("a shared expert runs on the CPU backend only".into()));
    }
    let (count, f) = (e.experts.len(), shape.ffn_dim);
    let mut gates_ups = Vec::with_capacity(2 * count);
    for x in &e.experts {
        let gate = x.gate.as_ref().ok_or_else(|| Error::Backend("an expert without a gate projection".into()))?;
        gates_ups.extend([gate, &x.up]);
    }
    let mut repacked = repack_together(&gates_ups)?.into_iter();
    let mut pairs = Vec::with_capacity(count);
    while let (Some(g), Some(u)) = (repacked.next(), repacked.next()) {
        pairs.push(interleave_rows(g, u, f)?);
    }
    let dim = shape_of(&e.router)?.1;
    let mut gate_up = GpuMatrix::upload(ctx, &stack(pairs)?, (count * 2 * f) as u32, dim as u32)?;
    let downs: Vec<&QTensor> = e.experts.iter().map(|x| &x.down).collect();
    let mut down = GpuMatrix::upload(ctx, &stack(repack_together(&downs)?)?, (count * dim) as u32, f as u32)?;
    let stacks = gate_up.bytes() + down.bytes();
    bytes.weights += stacks;
    bytes.unpicked += stacks / count.max(1) as u64 * (count - shape.used.min(count)) as u64;
    gate_up.rows = 2 * f as u32;
    down.rows = dim as u32;
    let routing = Routing { count: count as u32, used: shape.used as u32, normalized: shape.normalized };
    Ok(GpuExperts { router: matrix(ctx, &e.router, &mut bytes.weights)?, gate_up, down, routing })
}

/// A matrix's `(rows, cols)`.
fn shape_of(t: &QTensor) -> Result<(usize, usize)> {
    t.shape().dims2().map_err(Error::backend)
}

/// Several matrices with the same columns, stacked row-wise into one (see [`stack`]; in
/// one layout, see [`repack_together`]).
fn stacked(ctx: &GpuContext, parts: &[&QTensor], weight_bytes: &mut u64) -> Result<GpuMatrix> {
    let mut rows = 0;
    let mut cols = None;
    for t in parts {
        let (r, c) = t.shape().dims2().map_err(Error::backend)?;
        if cols.is_some_and(|cols| cols != c) {
            return Err(Error::Backend(format!("cannot stack a matrix of {c} columns under one of {cols:?}")));
        }
        cols = Some(c);
        rows += r;
    }
    let m = GpuMatrix::upload(ctx, &stack(repack_together(parts)?)?, rows as u32, cols.unwrap_or(0) as u32)?;
    *weight_bytes += m.bytes();
    Ok(m)
}

/// Gate and up projections interleaved row by row (gate i, up i), for the SwiGLU epilogue.
fn gate_up(ctx: &GpuContext, gate: &QTensor, up: &QTensor, weight_bytes: &mut u64) -> Result<GpuMatrix> {
    let (rows, cols) = gate.shape().dims2().map_err(Error::backend)?;
    if up.shape().dims2().map_err(Error::backend)? != (rows, cols) {
        return Err(Error::Backend(format!("the gate projection is {:?} but the up projection {:?}", gate.shape(), up.shape())));
    }
    let [g, u]: [_; 2] = repack_together(&[gate, up])?.try_into().map_err(|_| Error::Backend("gate and up: two matrices".into()))?;
    let m = GpuMatrix::upload(ctx, &interleave_rows(g, u, rows)?, 2 * rows as u32, cols as u32)?;
    *weight_bytes += m.bytes();
    Ok(m)
}

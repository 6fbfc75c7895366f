//! Small random models (llama, qwen2, qwen3, gemma, gemma2, gemma3, smollm3, phi3, granite, minicpm, olmo2, qwen3moe, granitemoe, olmoe, ernie4_5, internlm2, exaone, exaone4, glm4, stablelm, gpt2, phi2, gptneox, starcoder, starcoder2, bloom, arcee, nemotron, mistral3, command-r, cohere2, olmo and its 1.7 clamp, hunyuan-dense, qwen2vl, qwen3vl, chatglm, maincoder, refact, falcon and its 40B norms, mpt, baichuan, orion, xverse, plamo, codeshell, qwen, seed_oss, bitnet, lfm2, granitehybrid) written as GGUF bytes: for
//! fast tests of every layer (loading, tokenizer, forward pass, kernels) without the real model,
//! for the error cases, and (bench/make-arch-fixtures.mjs) for llama.cpp to compute reference logits on.

use candle_core::quantized::gguf_file::{self, Value};
use std::borrow::Cow;

use candle_core::quantized::{GgmlDType, QStorage, QTensor};
use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::architecture::HeadNormSpan;
use super::rope::Yarn;
use super::Architecture;
use crate::error::{Error, Result};
use crate::tokenizer::byte_level::ByteAlphabet;

/// Words merged into single tokens by the synthetic vocabulary, so BPE has merges to apply.
const WORDS: [&str; 6] = ["the", " the", "he", " a", "in", "ing"];
/// Control tokens, with the ids 0, 1, 2 like SmolLM2.
const CONTROL: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// Shape and storage of a synthetic model.
#[derive(Debug, Clone)]
pub struct SyntheticSpec {
    /// The family: qwen2 adds Q/K/V biases, qwen3 head norms, gemma3 head norms and norms
    /// after each sublayer.
    pub architecture: Architecture,
    /// Q/K/V biases where the architecture does not require them (qwen2's always has them).
    pub qkv_bias: bool,
    /// Transformer blocks.
    pub n_layers: usize,
    /// Residual width (a multiple of 32, the quantization block).
    pub dim: usize,
    /// Feed-forward width (a multiple of 32).
    pub ffn_dim: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// Head width written as `attention.key_length` (and value_length); `None`: `dim / n_heads`.
    pub head_dim: Option<usize>,
    /// RoPE on the first this many elements of each head, written as `rope.dimension_count`
    /// (`None`: none written, the whole head).
    pub rope_dims: Option<usize>,
    /// RoPE base frequency.
    pub rope_base: f32,
    /// Llama 3's per-pair RoPE factors (`rope_freqs.weight`, random from 1 to 8).
    pub rope_factors: bool,
    /// A linear RoPE scale written as `rope.scaling.type = linear` with this factor.
    pub rope_linear_scale: Option<f32>,
    /// YaRN written as `rope.scaling.type = yarn` with its factor, original context and
    /// llama.cpp's betas (the attention factor too where it is not 1).
    pub rope_yarn: Option<Yarn>,
    /// An LM head of its own (`output.weight`) rather than one tied to the embedding.
    pub untied_output: bool,
    /// Context window.
    pub context_len: usize,
    /// Storage type of the 2-D block weights.
    pub weight_type: GgmlDType,
    /// Storage type of the embedding (and tied LM head).
    pub embedding_type: GgmlDType,
    /// Seed of the random weights.
    pub seed: u64,
    /// Tokens in the vocabulary: the small byte-level one padded with plain tokens that no
    /// merge reaches (`None`: unpadded), to give the embedding a real model's rows.
    pub vocab_size: Option<usize>,
    /// Weights as random stored blocks ([`random_blocks`]) rather than random floats
    /// quantized: as fast at a billion weights as at a thousand (the large-model load tests);
    /// f32 matrices (a router, LFM2's kernels) as random floats still.
    pub random_blocks: bool,
    /// A sliding window written as `attention.sliding_window` (Gemma 3's layers slide over it).
    pub sliding_window: Option<usize>,
    /// The architecture's sliding layers written out as `attention.sliding_window_pattern`,
    /// a flag a layer, as OLMo 3's converter writes them.
    pub sliding_pattern_flags: bool,
    /// Gemma 2's cap of its attention scores, written as `attn_logit_softcapping`.
    pub attn_softcap: Option<f32>,
    /// Gemma 2's cap of its logits, written as `final_logit_softcapping`.
    pub final_softcap: Option<f32>,
    /// Llama 4's attention temperature, written as `attention.temperature_scale`
    /// (Ministral 3's).
    pub attn_temperature_scale: Option<f32>,
    /// LongRoPE (Phi-3.5's) with this original context: short factors (random from 1 to 2),
    /// long ones (from 2 to 8) and an attention factor of [`SYNTHETIC_ATTN_FACTOR`].
    pub longrope_original_context: Option<usize>,
    /// Granite's embedding, residual, attention and logit scales (MiniCPM's too), written as
    /// `embedding_scale`, `residual_scale`, `attention.scale` and `logit_scale`.
    pub granite_scales: Option<[f32; 4]>,
    /// GPT-NeoX's `use_parallel_residual`, written where the architecture reads it
    /// ([`Architecture::reads_parallel_residual`]).
    pub parallel_residual: bool,
    /// Cohere's logit multiplier, written as `logit_scale` where the architecture reads it so
    /// ([`Architecture::logit_multiplier`]).
    pub logit_scale: Option<f32>,
    /// OLMo 1.7's clamp of q, k and v, written as `attention.clamp_kqv` where the architecture
    /// reads it (OLMo 1's, MPT's: [`Architecture::reads_clamp_kqv`]).
    pub clamp_kqv: Option<f32>,
    /// Hunyuan's NTK alpha, written as `rope.scaling.alpha` where the architecture reads it
    /// (Hunyuan dense's).
    pub rope_alpha: Option<f32>,
    /// Multimodal RoPE's sections, written as `rope.dimension_sections` where the architecture
    /// reads them ([`Architecture::multimodal_rope`]: glm4 only where given); `None` in
    /// Qwen-VL's ([`Architecture::requires_sections`]) writes its real files'
    /// shape, every pair to the first three streams: half the head's pairs to time, a quarter
    /// each to height and width.
    pub rope_sections: Option<[usize; 4]>,
    /// The norms' epsilon, written under the architecture's key.
    pub norm_eps: f32,
    /// The keys Granite 4's converter writes into a dense model's file (granite-4.0-350m,
    /// granite-4.0-1b): `attention.head_count_kv` as one value a layer, and the Mamba-2
    /// (`ssm.*`) and `rope.scaling.finetuned` keys that a model without SSM layers carries
    /// unread.
    pub granite4_keys: bool,
    /// Falcon 40B's second norm in each block, written as
    /// [`FALCON_ATTENTION_NORM`](super::architecture::FALCON_ATTENTION_NORM) (the attention's;
    /// `attn_norm` is then the feed-forward's) where the architecture is Falcon.
    pub falcon_40b_norms: bool,
    /// ALiBi's largest bias, written as `attention.max_alibi_bias` where the architecture
    /// reads it ([`Architecture::reads_alibi_max_bias`]: MPT's).
    pub alibi_max_bias: Option<f32>,
    /// The layers that run a short convolution in place of attention, where the architecture
    /// has them ([`Architecture::has_short_convolutions`]: LFM2's), over
    /// [`SYNTHETIC_SHORT_CONV_WIDTH`] positions: written as zeros in a per-layer
    /// `attention.head_count_kv`, with `shortconv.*` tensors in those blocks.
    pub conv_layers: Vec<usize>,
    /// The layers that run a Mamba-2 scan in place of attention, where the architecture has
    /// them ([`Architecture::has_ssm_layers`]: Granite 4.0 H's), shaped as
    /// [`SYNTHETIC_SSM`]: written as zeros in a per-layer `attention.head_count_kv` with the
    /// `ssm.*` keys, and `ssm_*` tensors in those blocks.
    pub ssm_layers: Vec<usize>,
    /// The scanning layers' shape, `[conv_width, inner, state, heads, groups]`
    /// ([`SYNTHETIC_SSM`] unless a shape example asks for a real model's).
    pub ssm_shape: [usize; 5],
    /// Whether no layer turns by RoPE, written as `rope.scaling.finetuned` false where the
    /// file gives Granite's scales (Granite 4.0 H's NoPE).
    pub nope: bool,
    /// A mixture of experts in every layer's feed-forward where the architecture reads them
    /// ([`Architecture::reads_experts`]): `[count, used]`, written as `expert_count` and
    /// `expert_used_count` (and each expert's width, `ffn_dim`, as
    /// `expert_feed_forward_length`), with an f32 router `ffn_gate_inp` (as llama.cpp's
    /// quantizer leaves it) and the experts' stacked `ffn_*_exps` in place of `ffn_gate`,
    /// `ffn_up` and `ffn_down`.
    pub experts: Option<[usize; 2]>,
    /// A shared expert of this width beside the picked ones where the architecture runs one
    /// ([`Architecture::reads_shared_expert`]: Granite 4.0 H's): written as
    /// `expert_shared_feed_forward_length`, with `ffn_{gate,up,down}_shexp` tensors.
    pub shared_expert: Option<usize>,
}

/// The short convolution's width a synthetic LFM2 writes (its real files').
pub const SYNTHETIC_SHORT_CONV_WIDTH: usize = 3;

/// The Mamba-2 shape a synthetic Granite 4.0 H writes by default, for a width of 64: `[conv_width,
/// inner, state, heads, groups]`, two groups of four heads of 16 channels (the real files'
/// `[4, 2 dim, 128, 48 or more, 1]`, two groups to tell which heads share B and C).
pub const SYNTHETIC_SSM: [usize; 5] = [4, 128, 16, 8, 2];

/// The attention factor a synthetic LongRoPE model writes.
pub const SYNTHETIC_ATTN_FACTOR: f32 = 1.19;

impl SyntheticSpec {
    /// This spec as a tiny Granite 4.0 H: a Mamba-2 layer, an attending one without RoPE (the
    /// H models' NoPE), a Mamba-2 one, shaped as [`SYNTHETIC_SSM`], with Granite's four scales.
    pub fn granite_4_h(self) -> Self {
        SyntheticSpec {
            architecture: Architecture::Granitehybrid,
            n_layers: 3,
            ssm_layers: vec![0, 2],
            granite_scales: Some([12.0, 0.25, 0.0625, 4.0]),
            nope: true,
            ..self
        }
    }

    /// The default spec with every weight (the embedding and tied LM head too) stored as `t`,
    /// its widths a multiple of `t`'s block (K-quant blocks hold 256 weights).
    pub fn of_type(t: GgmlDType) -> Self {
        let base = SyntheticSpec { weight_type: t, embedding_type: t, ..SyntheticSpec::default() };
        if t.block_size() < 256 {
            return base;
        }
        SyntheticSpec { dim: 256, ffn_dim: 512, ..base }
    }
}

impl Default for SyntheticSpec {
    fn default() -> Self {
        SyntheticSpec {
            architecture: Architecture::Llama,
            qkv_bias: false,
            n_layers: 2,
            dim: 64,
            ffn_dim: 96,
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: None,
            rope_dims: None,
            rope_base: 10_000.0,
            rope_factors: false,
            rope_linear_scale: None,
            rope_yarn: None,
            untied_output: false,
            context_len: 64,
            weight_type: GgmlDType::Q4_1,
            embedding_type: GgmlDType::Q8_0,
            seed: 7,
            vocab_size: None,
            random_blocks: false,
            sliding_window: None,
            sliding_pattern_flags: false,
            longrope_original_context: None,
            attn_softcap: None,
            final_softcap: None,
            attn_temperature_scale: None,
            granite_scales: None,
            parallel_residual: true,
            logit_scale: None,
            clamp_kqv: None,
            rope_alpha: None,
            rope_sections: None,
            norm_eps: 1e-5,
            granite4_keys: false,
            falcon_40b_norms: false,
            alibi_max_bias: None,
            conv_layers: Vec::new(),
            ssm_layers: Vec::new(),
            ssm_shape: SYNTHETIC_SSM,
            nope: false,
            experts: None,
            shared_expert: None,
        }
    }
}

/// A synthetic model's metadata and tensors, editable before writing (to make broken files).
pub struct SyntheticModel {
    /// Metadata entries in file order.
    pub metadata: Vec<(String, Value)>,
    /// Tensors in file order.
    pub tensors: Vec<(String, QTensor)>,
}

impl SyntheticModel {
    /// A random model with a small byte-level BPE vocabulary (3 control tokens, 256 bytes,
    /// a few merged words).
    pub fn new(spec: &SyntheticSpec) -> Result<Self> {
        let (mut tokens, merges, mut types) = vocabulary();
        if let Some(n) = spec.vocab_size {
            for i in tokens.len()..n {
                tokens.push(format!("pad{i}"));
                types.push(1);
            }
        }
        let vocab = tokens.len();
        let s = |x: &str| Value::String(x.to_string());
        let u = |x: usize| Value::U32(x as u32);
        let key = |name: &str| format!("{}.{name}", spec.architecture.name());
        let mut metadata = vec![
            ("general.architecture".to_string(), s(spec.architecture.name())),
            ("general.name".to_string(), s("tokenscope synthetic")),
            (key("block_count"), u(spec.n_layers)),
            (key("embedding_length"), u(spec.dim)),
            (key("feed_forward_length"), u(spec.ffn_dim * if spec.architecture.halves_feed_forward_length() { 2 } else { 1 })),
            (key("attention.head_count"), u(spec.n_heads)),
            (key("attention.head_count_kv"), u(spec.n_kv_heads)),
            (key("context_length"), u(spec.context_len)),
            (key("rope.freq_base"), Value::F32(spec.rope_base)),
            (key(super::config::eps_key(spec.architecture)), Value::F32(spec.norm_eps)),
            ("tokenizer.ggml.model".to_string(), s("gpt2")),
            ("tokenizer.ggml.pre".to_string(), s("smollm")),
            ("tokenizer.ggml.tokens".to_string(), Value::Array(tokens.iter().map(|t| s(t)).collect())),
            ("tokenizer.ggml.merges".to_string(), Value::Array(merges.iter().map(|m| s(m)).collect())),
            ("tokenizer.ggml.token_type".to_string(), Value::Array(types.into_iter().map(Value::I32).collect())),
            ("tokenizer.ggml.bos_token_id".to_string(), u(1)),
            ("tokenizer.ggml.eos_token_id".to_string(), u(2)),
            ("tokenizer.ggml.add_bos_token".to_string(), Value::Bool(false)),
            ("tokenizer.chat_template".to_string(), s(CHAT_TEMPLATE)),
        ];
        let hd = spec.head_dim.unwrap_or(spec.dim / spec.n_heads);
        if let Some(dims) = spec.rope_dims {
            metadata.push((key("rope.dimension_count"), u(dims)));
        }
        let pairs = spec.rope_dims.unwrap_or(hd) / 2;
        if let Some(factor) = spec.rope_linear_scale {
            metadata.push((key("rope.scaling.type"), s("linear")));
            metadata.push((key("rope.scaling.factor"), Value::F32(factor)));
        }
        if let Some(yarn) = spec.rope_yarn {
            metadata.push((key("rope.scaling.type"), s("yarn")));
            metadata.push((key("rope.scaling.factor"), Value::F32(yarn.factor)));
            metadata.push((key("rope.scaling.original_context_length"), u(yarn.original_context)));
            // The betas as converters write them from a model's config, llama.cpp's values.
            metadata.push((key("rope.scaling.yarn_beta_fast"), Value::F32(super::rope::YARN_BETA_FAST)));
            metadata.push((key("rope.scaling.yarn_beta_slow"), Value::F32(super::rope::YARN_BETA_SLOW)));
            if yarn.attn_factor != 1.0 {
                metadata.push((key("rope.scaling.attn_factor"), Value::F32(yarn.attn_factor)));
            }
            if yarn.log_multiplier != 0.0 {
                metadata.push((key("rope.scaling.yarn_log_multiplier"), Value::F32(yarn.log_multiplier)));
            }
        }
        if spec.sliding_pattern_flags {
            let flags = (0..spec.n_layers).map(|l| Value::Bool(spec.architecture.is_sliding_layer(l))).collect();
            metadata.push((key("attention.sliding_window_pattern"), Value::Array(flags)));
        }
        if let Some(cap) = spec.attn_softcap {
            metadata.push((key("attn_logit_softcapping"), Value::F32(cap)));
        }
        if let Some(scale) = spec.attn_temperature_scale {
            metadata.push((key("attention.temperature_scale"), Value::F32(scale)));
        }
        if let Some(cap) = spec.final_softcap {
            metadata.push((key("final_logit_softcapping"), Value::F32(cap)));
        }
        if let Some(scales) = spec.granite_scales {
            metadata.extend(super::config::GRANITE_SCALES.iter().zip(scales).map(|(name, v)| (key(name), Value::F32(v))));
            if spec.nope {
                metadata.push((key("rope.scaling.finetuned"), Value::Bool(false)));
            }
        }
        if let Some(scale) = spec.logit_scale.filter(|_| spec.architecture.logit_multiplier().is_some()) {
            metadata.push((key("logit_scale"), Value::F32(scale)));
        }
        if let Some(clamp) = spec.clamp_kqv.filter(|_| spec.architecture.reads_clamp_kqv()) {
            metadata.push((key("attention.clamp_kqv"), Value::F32(clamp)));
        }
        if let Some(bias) = spec.alibi_max_bias.filter(|_| spec.architecture.reads_alibi_max_bias()) {
            metadata.push((key("attention.max_alibi_bias"), Value::F32(bias)));
        }
        if let Some(alpha) = spec.rope_alpha.filter(|_| spec.architecture == Architecture::HunyuanDense) {
            metadata.push((key("rope.scaling.alpha"), Value::F32(alpha)));
        }
        if spec.architecture.requires_sections() || (spec.rope_sections.is_some() && spec.architecture.multimodal_rope().is_some()) {
            let sections = spec.rope_sections.unwrap_or([pairs - pairs / 2, pairs / 4, pairs / 2 - pairs / 4, 0]);
            metadata.push((key("rope.dimension_sections"), Value::Array(sections.iter().map(|&s| Value::I32(s as i32)).collect())));
        }
        if spec.architecture.reads_parallel_residual() {
            metadata.push((key(super::config::PARALLEL_RESIDUAL), Value::Bool(spec.parallel_residual)));
        }
        if let Some(window) = spec.sliding_window {
            metadata.push((key("attention.sliding_window"), u(window)));
        }
        if let Some(original) = spec.longrope_original_context {
            metadata.push((key("rope.scaling.attn_factor"), Value::F32(SYNTHETIC_ATTN_FACTOR)));
            metadata.push((key("rope.scaling.original_context_length"), u(original)));
        }
        if spec.granite4_keys {
            let kv_heads = Value::Array(vec![u(spec.n_kv_heads); spec.n_layers]);
            metadata.retain(|(k, _)| *k != key("attention.head_count_kv"));
            metadata.push((key("attention.head_count_kv"), kv_heads));
            // Granite 4.0 H's Mamba-2 widths, read by nothing in a file without SSM layers.
            let ssm = [
                ("ssm.conv_kernel", 4),
                ("ssm.state_size", 128),
                ("ssm.group_count", 1),
                ("ssm.inner_size", 2 * spec.dim),
                ("ssm.time_step_rank", 48),
            ];
            metadata.extend(ssm.map(|(name, v)| (key(name), u(v))));
            metadata.push((key("rope.scaling.finetuned"), Value::Bool(true)));
        }
        if spec.architecture.has_short_convolutions() {
            let counts = (0..spec.n_layers).map(|l| u(if spec.conv_layers.contains(&l) { 0 } else { spec.n_kv_heads })).collect();
            metadata.retain(|(k, _)| *k != key("attention.head_count_kv"));
            metadata.push((key("attention.head_count_kv"), Value::Array(counts)));
            metadata.push((key("shortconv.l_cache"), u(SYNTHETIC_SHORT_CONV_WIDTH)));
        }
        if spec.architecture.has_ssm_layers() {
            let counts = (0..spec.n_layers).map(|l| u(if spec.ssm_layers.contains(&l) { 0 } else { spec.n_kv_heads })).collect();
            metadata.retain(|(k, _)| *k != key("attention.head_count_kv"));
            metadata.push((key("attention.head_count_kv"), Value::Array(counts)));
            let names = ["ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "ssm.time_step_rank", "ssm.group_count"];
            metadata.extend(names.iter().zip(spec.ssm_shape).map(|(name, v)| (key(name), u(v))));
        }
        if let Some([count, used]) = spec.experts.filter(|_| spec.architecture.reads_experts()) {
            metadata.push((key("expert_count"), u(count)));
            metadata.push((key("expert_used_count"), u(used)));
            metadata.push((key("expert_feed_forward_length"), u(spec.ffn_dim)));
            if let Some(width) = spec.shared_expert.filter(|_| spec.architecture.reads_shared_expert()) {
                metadata.push((key("expert_shared_feed_forward_length"), u(width)));
            }
        }
        if let Some(width) = spec.head_dim {
            metadata.push((key("attention.key_length"), u(width)));
            metadata.push((key("attention.value_length"), u(width)));
        }
        let experts = spec.experts.filter(|_| spec.architecture.reads_experts());
        let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
        let (d, f) = (spec.dim, spec.ffn_dim);
        let (qd, kv) = (spec.n_heads * hd, spec.n_kv_heads * hd);
        let mut tensors = Vec::new();
        let mut add = |name: String, rows: usize, cols: usize, dtype: GgmlDType, scale: f32, offset: f32| -> Result<()> {
            if spec.random_blocks && rows > 1 && dtype != GgmlDType::F32 {
                tensors.push((name, random_blocks(dtype, rows, cols, &mut rng)?));
                return Ok(());
            }
            let data: Vec<f32> = (0..rows * cols).map(|_| offset + scale * (rng.random::<f32>() * 2.0 - 1.0)).collect();
            let shape: Vec<usize> = if rows == 1 { vec![cols] } else { vec![rows, cols] };
            let t = Tensor::from_vec(data, shape, &Device::Cpu).map_err(Error::backend)?;
            tensors.push((name, QTensor::quantize(&t, dtype).map_err(Error::backend)?));
            Ok(())
        };
        let w = spec.weight_type;
        add("token_embd.weight".into(), vocab, d, spec.embedding_type, 1.0, 0.0)?;
        // Each norm's gain, but OLMo 1's non-parametric LayerNorms'.
        let gains = spec.architecture.norm_gains();
        let output_norm = spec.architecture.output_norm_name();
        if gains {
            add(format!("{output_norm}.weight"), 1, d, GgmlDType::F32, 0.2, 1.0)?;
        }
        // A LayerNorm's bias beside each gain (StableLM's; Cohere's LayerNorms have none).
        let layer_norms = spec.architecture.layer_norm_biases();
        if layer_norms {
            add(format!("{output_norm}.bias"), 1, d, GgmlDType::F32, 0.5, 0.0)?;
        }
        if spec.untied_output || spec.architecture.head_bias() {
            add("output.weight".into(), vocab, d, spec.embedding_type, 0.3, 0.0)?;
        }
        if spec.architecture.head_bias() {
            add("output.bias".into(), 1, vocab, GgmlDType::F32, 0.5, 0.0)?;
        }
        if spec.architecture.learned_positions() {
            add("position_embd.weight".into(), spec.context_len, d, spec.embedding_type, 0.5, 0.0)?;
        }
        if spec.architecture.norms_embedding() {
            add("token_embd_norm.weight".into(), 1, d, GgmlDType::F32, 0.2, 1.0)?;
            add("token_embd_norm.bias".into(), 1, d, GgmlDType::F32, 0.5, 0.0)?;
        }
        if spec.rope_factors {
            add("rope_freqs.weight".into(), 1, pairs, GgmlDType::F32, 3.5, 4.5)?;
        }
        if spec.longrope_original_context.is_some() {
            add("rope_factors_short.weight".into(), 1, pairs, GgmlDType::F32, 0.5, 1.5)?;
            add("rope_factors_long.weight".into(), 1, pairs, GgmlDType::F32, 3.0, 5.0)?;
        }
        for i in 0..spec.n_layers {
            let n = |x: &str| format!("blk.{i}.{x}.weight");
            let arch = spec.architecture;
            let bias = |x: &str| format!("blk.{i}.{x}.bias");
            if arch.has_pre_norms() && gains {
                add(n("attn_norm"), 1, d, GgmlDType::F32, 0.2, 1.0)?;
            }
            if layer_norms {
                add(bias("attn_norm"), 1, d, GgmlDType::F32, 0.5, 0.0)?;
            }
            if spec.falcon_40b_norms && arch == Architecture::Falcon {
                let second = super::architecture::FALCON_ATTENTION_NORM;
                add(n(second), 1, d, GgmlDType::F32, 0.2, 1.0)?;
                add(bias(second), 1, d, GgmlDType::F32, 0.5, 0.0)?;
            }
            let scans = arch.has_ssm_layers() && spec.ssm_layers.contains(&i);
            if scans {
                // Granite 4.0 H's Mamba-2 block, its small tensors f32 as its converter writes
                // them: A negative (the converter's `-exp(A_log)`), the step's bias about 0.
                let [width, inner, state, heads, groups] = spec.ssm_shape;
                let conv_dim = inner + 2 * groups * state;
                add(n("ssm_in"), inner + conv_dim + heads, d, w, 0.3, 0.0)?;
                add(n("ssm_conv1d"), conv_dim, width, GgmlDType::F32, 0.6, 0.0)?;
                add(bias("ssm_conv1d"), 1, conv_dim, GgmlDType::F32, 0.3, 0.0)?;
                add(bias("ssm_dt"), 1, heads, GgmlDType::F32, 1.0, 0.0)?;
                add(format!("blk.{i}.ssm_a"), heads, 1, GgmlDType::F32, 0.9, -1.0)?;
                add(format!("blk.{i}.ssm_d"), heads, 1, GgmlDType::F32, 0.5, 1.0)?;
                add(n("ssm_norm"), groups, inner / groups, GgmlDType::F32, 0.2, 1.0)?;
                add(n("ssm_out"), d, inner, w, 0.3, 0.0)?;
            }
            let convolves = arch.has_short_convolutions() && spec.conv_layers.contains(&i);
            // Neither convolving nor scanning: the block's mixer is attention.
            let attends = !convolves && !scans;
            if convolves {
                // LFM2's convolving block: its input projection, each channel's kernel (f32,
                // as its converter writes it), its output projection.
                add(format!("blk.{i}.shortconv.in_proj.weight"), 3 * d, d, w, 0.3, 0.0)?;
                add(format!("blk.{i}.shortconv.conv.weight"), d, SYNTHETIC_SHORT_CONV_WIDTH, GgmlDType::F32, 0.6, 0.0)?;
                add(format!("blk.{i}.shortconv.out_proj.weight"), d, d, w, 0.3, 0.0)?;
            }
            // Phi-3's, GPT-2's, Phi-2's, GPT-NeoX's, StarCoder's and ChatGLM's files stack
            // W_q, W_k and W_v; GLM-4's and StarCoder 2's hold them apart, as their converters
            // write. GPT-2's biases: the Q/K/V projection's and every other matrix's but the LM
            // head; ChatGLM's stacked Q/K/V's where asked.
            let biased = arch.linear_biases();
            let stacked = matches!(arch, Architecture::Phi3 | Architecture::Phi2 | Architecture::Chatglm | Architecture::Codeshell)
                || arch.requires_fused_qkv();
            if stacked && attends {
                add(n("attn_qkv"), qd + 2 * kv, d, w, 0.3, 0.0)?;
                if biased || spec.qkv_bias {
                    add(bias("attn_qkv"), 1, qd + 2 * kv, GgmlDType::F32, 0.5, 0.0)?;
                }
            } else if attends {
                add(n("attn_q"), qd, d, w, 0.3, 0.0)?;
                add(n("attn_k"), kv, d, w, 0.3, 0.0)?;
                add(n("attn_v"), kv, d, w, 0.3, 0.0)?;
            }
            if !stacked && attends && (biased || spec.qkv_bias || spec.architecture.requires_qkv_bias()) {
                for (part, rows) in [("attn_q", qd), ("attn_k", kv), ("attn_v", kv)] {
                    add(bias(part), 1, rows, GgmlDType::F32, 0.5, 0.0)?;
                }
            }
            let (q_gain, k_gain) = match arch.head_norm() {
                Some(HeadNormSpan::Head) => (hd, hd),
                Some(HeadNormSpan::Whole) => (qd, kv),
                None => (0, 0),
            };
            if q_gain > 0 && attends {
                add(n("attn_q_norm"), 1, q_gain, GgmlDType::F32, 0.2, 1.0)?;
                add(n("attn_k_norm"), 1, k_gain, GgmlDType::F32, 0.2, 1.0)?;
            }
            if attends {
                add(n("attn_output"), d, qd, w, 0.3, 0.0)?;
            }
            if arch.has_sub_norms() {
                add(n("attn_sub_norm"), 1, qd, GgmlDType::F32, 0.2, 1.0)?;
                add(n("ffn_sub_norm"), 1, f, GgmlDType::F32, 0.2, 1.0)?;
            }
            if biased {
                add(bias("attn_output"), 1, d, GgmlDType::F32, 0.5, 0.0)?;
            }
            if spec.architecture.has_post_norms() {
                add(n("post_attention_norm"), 1, d, GgmlDType::F32, 0.2, 1.0)?;
            }
            // Phi-2's parallel residual has no norm of its own before the feed-forward.
            let ffn_norm = !arch.shares_attention_norm();
            if arch.has_pre_norms() && ffn_norm && gains {
                add(n(arch.ffn_norm_name()), 1, d, GgmlDType::F32, 0.2, 1.0)?;
            }
            if layer_norms && ffn_norm {
                add(bias("ffn_norm"), 1, d, GgmlDType::F32, 0.5, 0.0)?;
            }
            if let Some([count, _]) = experts {
                // Written by rows here, each stack reshaped to `[count, rows, cols]` below.
                add(n("ffn_gate_inp"), count, d, GgmlDType::F32, 1.0, 0.0)?;
                add(n("ffn_gate_exps"), count * f, d, w, 0.3, 0.0)?;
                add(n("ffn_up_exps"), count * f, d, w, 0.3, 0.0)?;
                add(n("ffn_down_exps"), count * d, f, w, 0.3, 0.0)?;
                if let Some(sf) = spec.shared_expert.filter(|_| arch.reads_shared_expert()) {
                    add(n("ffn_gate_shexp"), sf, d, w, 0.3, 0.0)?;
                    add(n("ffn_up_shexp"), sf, d, w, 0.3, 0.0)?;
                    add(n("ffn_down_shexp"), d, sf, w, 0.3, 0.0)?;
                }
            } else if spec.architecture.has_fused_projections() {
                add(n("ffn_up"), 2 * f, d, w, 0.3, 0.0)?;
            } else {
                if arch.gated_ffn() {
                    add(n("ffn_gate"), f, d, w, 0.3, 0.0)?;
                }
                add(n("ffn_up"), f, d, w, 0.3, 0.0)?;
            }
            if experts.is_none() {
                add(n("ffn_down"), d, f, w, 0.3, 0.0)?;
            }
            if biased {
                add(bias("ffn_up"), 1, f, GgmlDType::F32, 0.5, 0.0)?;
                add(bias("ffn_down"), 1, d, GgmlDType::F32, 0.5, 0.0)?;
            }
            if spec.architecture.has_post_norms() {
                add(n("post_ffw_norm"), 1, d, GgmlDType::F32, 0.2, 1.0)?;
            }
        }
        if let Some([count, _]) = experts {
            for (name, t) in tensors.iter_mut().filter(|(name, _)| name.ends_with("_exps.weight")) {
                let (rows, cols) = t.shape().dims2().map_err(Error::backend)?;
                let data = t.data().map_err(Error::backend)?.into_owned();
                let storage = QStorage::from_data(Cow::Owned(data), &Device::Cpu, t.dtype()).map_err(Error::backend)?;
                *t = QTensor::new(storage, (count, rows / count, cols)).map_err(|e| Error::Backend(format!("{name}: {e}")))?;
            }
        }
        Ok(SyntheticModel { metadata, tensors })
    }

    /// Sets (or adds) a metadata entry.
    pub fn set_meta(&mut self, key: &str, value: Value) {
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value,
            None => self.metadata.push((key.to_string(), value)),
        }
    }

    /// Removes a metadata entry.
    pub fn remove_meta(&mut self, key: &str) {
        self.metadata.retain(|(k, _)| k != key);
    }

    /// Removes a tensor by name.
    pub fn remove_tensor(&mut self, name: &str) {
        self.tensors.retain(|(n, _)| n != name);
    }

    /// Replaces (or adds) a tensor.
    pub fn set_tensor(&mut self, name: &str, t: QTensor) {
        self.remove_tensor(name);
        self.tensors.push((name.to_string(), t));
    }

    /// The GGUF file's bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut out = std::io::Cursor::new(Vec::new());
        let meta: Vec<(&str, &Value)> = self.metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let tensors: Vec<(&str, &QTensor)> = self.tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
        gguf_file::write(&mut out, &meta, &tensors).map_err(Error::backend)?;
        Ok(out.into_inner())
    }
}

/// A `[rows, cols]` tensor of random stored blocks of `dtype` (Q4_K, Q6_K or Q8_0): random
/// quantized values and scales, with each block's f16 factors set so that the weights are
/// centred on zero and a few hundredths wide, like a trained model's.
pub fn random_blocks(dtype: GgmlDType, rows: usize, cols: usize, rng: &mut impl Rng) -> Result<QTensor> {
    // (block bytes, [(byte offset of an f16 factor, its value)]).
    let (size, factors): (usize, &[(usize, f32)]) = match dtype {
        // d, dmin first: w = d sc q - dmin m, sc and m in 0..64, q in 0..16; dmin = 7.5 d centres it.
        GgmlDType::Q4K => (144, &[(0, 2e-4), (2, 1.5e-3)]),
        // d last: w = d sc (q - 32), sc a signed byte.
        GgmlDType::Q6K => (210, &[(208, 1e-4)]),
        // d first: w = d q, q a signed byte.
        GgmlDType::Q8_0 => (34, &[(0, 3e-4)]),
        other => return Err(Error::InvalidParams(format!("no random blocks of {other:?}"))),
    };
    let elems = rows * cols;
    if !elems.is_multiple_of(dtype.block_size()) {
        return Err(Error::InvalidParams(format!("{rows} x {cols} is no whole number of {dtype:?} blocks")));
    }
    let mut bytes = vec![0u8; elems / dtype.block_size() * size];
    rng.fill_bytes(&mut bytes);
    for block in bytes.chunks_exact_mut(size) {
        for &(at, value) in factors {
            block[at..at + 2].copy_from_slice(&half::f16::from_f32(value).to_le_bytes());
        }
    }
    candle_core::quantized::ggml_file::qtensor_from_ggml(dtype, &bytes, vec![rows, cols], &Device::Cpu).map_err(Error::backend)
}

/// The synthetic model's chat template: turns between its control tokens, with a short default
/// system turn when the conversation has none.
pub const CHAT_TEMPLATE: &str = "{% for m in messages %}{% if loop.first and m.role != 'system' %}<|im_start|>system\nA synthetic model.<|im_end|>\n{% endif %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// Tokens (control, bytes, merged words), merges and GGUF token types.
fn vocabulary() -> (Vec<String>, Vec<String>, Vec<i32>) {
    let alphabet = ByteAlphabet::new();
    let mut tokens: Vec<String> = CONTROL.iter().map(|s| s.to_string()).collect();
    let mut types = vec![3; CONTROL.len()];
    for b in 0..=255u8 {
        tokens.push(alphabet.to_piece(&[b]));
        types.push(1);
    }
    let mut merges = Vec::new();
    let mut known: Vec<String> = tokens.clone();
    for word in WORDS {
        // Merge left to right: each prefix + next byte.
        let pieces: Vec<String> = word.bytes().map(|b| alphabet.to_piece(&[b])).collect();
        let mut acc = pieces[0].clone();
        for p in &pieces[1..] {
            let merged = format!("{acc}{p}");
            if !known.contains(&merged) {
                merges.push(format!("{acc} {p}"));
                known.push(merged.clone());
                tokens.push(merged.clone());
                types.push(1);
            }
            acc = merged;
        }
    }
    (tokens, merges, types)
}

//! The model families the engine runs (`general.architecture`) and what sets each apart from
//! plain llama: where RoPE's pairs sit, biases on Q, K and V, RMSNorm on each head's q and k,
//! Gemma's scaled embedding, norms after each sublayer, GELU and sliding-window layers, Gemma
//! 2's softcapped scores and logits, SmolLM3's layers without RoPE, Phi-3's fused
//! projections, Granite's scales (MiniCPM's three of them), OLMo 2's and EXAONE 4's blocks
//! without pre-norms, GLM-4's norms around each sublayer with Phi-3's fused gate, EXAONE 4's
//! full layers without RoPE, StableLM's LayerNorms, GPT-2's learned positions, biases on every
//! matrix and ungated feed-forward, Phi-2's parallel residual and LM head bias, GPT-NeoX's
//! parallel residual with a norm for each sublayer, StarCoder's GPT-2 block with grouped-query
//! attention, StarCoder 2's with RoPE and Q/K/V apart, BLOOM's ALiBi and normed embedding, the ungated
//! squared-ReLU feed-forwards of Arcee's AFM and NVIDIA's Nemotron, Cohere's parallel
//! residual with unbiased LayerNorms and multiplied logits, OLMo 1's non-parametric LayerNorms,
//! Hunyuan's head norms after RoPE, Qwen2-VL's, Qwen3-VL's and GLM-4V's multimodal RoPE on text, ChatGLM's GLM-4 block without post
//! norms, Maincoder's head norms after RoPE on adjacent pairs, Refact's llama block with
//! BLOOM's ALiBi, Falcon's parallel block with unbiased matrices and an ungated GELU
//! feed-forward, MPT's sequential one with unbiased LayerNorms and the file's ALiBi,
//! Baichuan's llama block with RoPE or ALiBi by its block count, Orion's llama block with
//! biased LayerNorms and RoPE on split halves, PLaMo's parallel block with one RMSNorm,
//! CodeShell's StarCoder block with RoPE, Qwen 1's llama block with Q/K/V stacked and its
//! feed-forward length doubled, Seed-OSS's llama block with its feed-forward norm under
//! another name, BitNet's llama block with norms inside each sublayer, LFM2's short
//! convolutions and Granite 4.0 H's Mamba-2 scans beside attending layers (ERNIE 4.5, InternLM2, XVERSE and EXAONE 3.5 are
//! llama's block under their own names, Gemma 1 Gemma 2's without its post norms, window and
//! caps; Qwen3-MoE Qwen3's block with a mixture of experts in each feed-forward, Granite MoE
//! Granite's, OLMoE llama's with OLMo 2's whole q and k norms, as a Mixtral llama file's may
//! be).

use serde::Serialize;

use crate::error::ModelError;

/// A transformer family: every one is llama's block (RMSNorm, grouped-query attention with
/// RoPE, SwiGLU) with the differences its methods name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
#[serde(rename_all = "lowercase")]
pub enum Architecture {
    /// Llama 1-3, SmolLM2 (Llama 3's RoPE frequency factors included).
    Llama,
    /// Qwen2 and Qwen2.5: biases on the Q, K and V projections, RoPE on split halves.
    Qwen2,
    /// Qwen3: RMSNorm on each head's q and k before RoPE, RoPE on split halves, heads whose
    /// width need not divide the residual width.
    Qwen3,
    /// Qwen3's mixtures of experts (Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder-30B-A3B):
    /// Qwen3's attention, and in every layer a feed-forward of many experts of which a
    /// router picks a few for each token ([`Config::experts`](super::Config::experts)), their
    /// weights renormalized to sum to 1.
    Qwen3moe,
    /// Gemma 1 (2B, 7B) and CodeGemma: llama's block with RoPE on split halves, the embedding
    /// scaled by `sqrt(dim)` and GELU in place of SiLU (Gemma 2's without its post norms,
    /// sliding window and caps), heads whose width need not divide the residual width (7B's
    /// 16 of 256 over 3072), tied head.
    Gemma,
    /// Gemma 2 (2B to 27B): RoPE on split halves, the embedding scaled by `sqrt(dim)`, an
    /// RMSNorm on each sublayer's output before it joins the residual stream, GELU in place of
    /// SiLU, every other layer (the first of each two) attending over a sliding window, and
    /// its attention scores and its logits softcapped (`cap * tanh(x / cap)`); 27B's scores
    /// scaled by `1 / sqrt(dim / heads)` ([`Config::attention_scale`](super::Config::attention_scale)).
    Gemma2,
    /// Gemma 3 (270M to 27B): Qwen3's head norms and split halves, the embedding scaled by
    /// `sqrt(dim)`, an RMSNorm on each sublayer's output before it joins the residual stream,
    /// GELU in place of SiLU in the gated feed-forward, and five of every six layers attending
    /// over a sliding window of positions with RoPE base 10,000 (the sixth over every position
    /// with the file's base); 27B's scores scaled as Gemma 2 27B's.
    Gemma3,
    /// SmolLM3 (3B): llama's block, where every fourth layer turns nothing by RoPE (NoPE:
    /// its attention sees content alone, positions only through what earlier layers wrote).
    Smollm3,
    /// Phi-3 and Phi-3.5 mini: llama's block with RoPE on split halves, W_q, W_k and W_v in
    /// one tensor (`attn_qkv`, or apart), the gate's rows ahead of the up projection's in
    /// `ffn_up` (no `ffn_gate`), and LongRoPE where the file has its factors.
    Phi3,
    /// IBM Granite 3 (2B and 8B): llama's block with four scales the file gives
    /// (`embedding_scale`, `residual_scale`, `attention.scale`, `logit_scale`, the last
    /// required): the embedding's rows multiplied by one, each sublayer's output by another
    /// before it joins the residual stream, the attention scores by a third in place of
    /// `1 / sqrt(head width)`, and the logits divided by the last.
    Granite,
    /// IBM Granite 3.0 and 3.1 MoE (1B-A400M, 3B-A800M; `granitemoe`): Granite's block and
    /// four scales with a mixture of experts in every feed-forward, the picked experts'
    /// weights renormalized (a file naming shared experts, Granite 4.0 Tiny Preview's, is
    /// refused by that key).
    Granitemoe,
    /// IBM Granite 4.0 H (350M, 1B, Tiny, Small; `granitehybrid`): Granite's four scales over
    /// a hybrid whose layers either attend (Granite's attention, with RoPE only where the
    /// file's `rope.scaling.finetuned` is true: the H models' is false, NoPE) or run a Mamba-2
    /// selective state-space scan ([`Architecture::has_ssm_layers`]), marked by a zero in
    /// `attention.head_count_kv`; every feed-forward a SwiGLU or (Tiny's, Small's) a mixture
    /// of experts with a shared expert beside them ([`Architecture::reads_shared_expert`]).
    Granitehybrid,
    /// OpenBMB's MiniCPM (1B, 2B): llama's block with three of Granite's scales, all three
    /// required (`embedding_scale`, `residual_scale`, `logit_scale`: MiniCPM's `scale_emb`,
    /// `scale_depth / sqrt(layers)` and `hidden_size / dim_model_base`), computed by llama.cpp's
    /// Granite graph; its scores scaled by `1 / sqrt(head width)` whatever the file says.
    Minicpm,
    /// AI2's OLMo 2 (1B to 32B) and OLMo 3 (7B, 32B): RoPE on split halves, no RMSNorm before either sublayer (each
    /// projection reads the residual stream itself), RMSNorm on the whole of q and of k
    /// (every head at once, `attn_q_norm` `[n_heads * head_dim]`, `attn_k_norm` `[kv_dim]`)
    /// before RoPE, and Gemma's norm on each sublayer's output before it joins the residual
    /// stream; its LM head is its own. An OLMo 3 file adds a sliding window over the first
    /// three of every four layers ([`OLMO3_PATTERN`]), which turn by plain RoPE while the
    /// others take the file's YaRN.
    Olmo2,
    /// Baidu's ERNIE 4.5 (the dense 0.3B): llama's block as llama.cpp computes it, under its
    /// own name and keys (`ernie4_5.*`), biases on Q, K and V where the file has them.
    Ernie45,
    /// Shanghai AI Lab's InternLM2 and InternLM2.5 (1.8B to 20B): llama's block as llama.cpp
    /// computes it, under its own name and keys (`internlm2.*`), adjacent RoPE pairs.
    Internlm2,
    /// LG's EXAONE 3.0 and 3.5 (2.4B to 32B): llama's block with RoPE on split halves (as
    /// llama.cpp computes it, under its own keys, `exaone.*`), Llama 3's per-pair RoPE factors
    /// and biases on Q, K and V where the file has them.
    Exaone,
    /// LG's EXAONE 4.0 (1.2B, 32B): OLMo 2's block (no pre-norms, post norms after each
    /// sublayer) with Qwen3's RMSNorm on each head's q and k, RoPE on split halves; the 32B
    /// slides the first three of every four layers ([`EXAONE4_PATTERN`]) and turns only those
    /// by RoPE, the fourth attending by content alone (llama.cpp slides no other's layers).
    Exaone4,
    /// Zhipu's GLM-4 0414 (9B, 32B) and GLM-Z1: llama's block with an RMSNorm on each
    /// sublayer's output before it joins the residual stream as well as before its input
    /// (Gemma 2's sandwich), the gate's rows ahead of the up projection's in `ffn_up` (Phi-3's
    /// fused form; W_q, W_k and W_v apart, with biases, or in one `attn_qkv`), and RoPE on
    /// adjacent pairs of only the first `rope.dimension_count` elements of each head (half).
    Glm4,
    /// Stability AI's StableLM 2 (1.6B) and StableLM 3B 4E1T (Zephyr 3B, Stable Code 3B):
    /// llama's block with LayerNorm in place of RMSNorm (`(x - mean) / sqrt(var + eps) * gain +
    /// bias`, before each sublayer and the LM head: [`Architecture::layer_norms`]), RoPE on
    /// split halves of only the first `rope.dimension_count` elements of each head (a
    /// quarter), and biases on Q, K and V where the file has them (StableLM 2's). StableLM 2
    /// 12B's parallel residual (no `ffn_norm`) and its LayerNorms of q and k are refused.
    Stablelm,
    /// OpenAI's GPT-2 (124M to 1.5B) and its fine-tunes (DistilGPT-2 among them): StableLM's
    /// LayerNorms, no RoPE but a learned position embedding added to the token's
    /// (`position_embd`, [`Architecture::learned_positions`]), W_q, W_k and W_v stacked in one
    /// `attn_qkv` with its bias, a bias on every other matrix but the LM head
    /// ([`Architecture::linear_biases`]), and an ungated feed-forward, `W_down gelu(W_up x +
    /// b) + b` ([`Architecture::gated_ffn`]).
    Gpt2,
    /// Microsoft's Phi-2 (2.7B) and Phi-1.5: GPT-2's LayerNorms, biases and ungated GELU
    /// feed-forward, RoPE on split halves of the first `rope.dimension_count` elements of each
    /// head (32 of 80), a parallel residual (the feed-forward reads the attention's LayerNorm
    /// of the same input, no `ffn_norm`: `x += attn(n) + ffn(n)`,
    /// [`Architecture::shares_attention_norm`]) and an LM head of its own with a bias
    /// (`output.bias`, [`Architecture::head_bias`]).
    Phi2,
    /// EleutherAI's GPT-NeoX (20B) and Pythia (14M to 12B), with the models built on them
    /// (Dolly v2, RedPajama-INCITE): Phi-2's LayerNorms, biases, stacked Q/K/V, ungated GELU
    /// feed-forward and RoPE on split halves of the first `rope.dimension_count` elements of
    /// each head (a quarter), an LM head of its own without a bias, and a residual that is
    /// parallel where the file says (`use_parallel_residual`, Pythia's): `x += attn(n1(x)) +
    /// ffn(n2(x))`, each sublayer with a LayerNorm of its own of the same input
    /// ([`Config::parallel_residual`](super::Config::parallel_residual)); else GPT-2's order.
    Gptneox,
    /// BigCode's StarCoder and StarCoderBase (1B to 15B), SantaCoder and TinyStarCoder
    /// (`gpt_bigcode`): GPT-2's block (learned positions, stacked Q/K/V, a bias on every matrix
    /// but the LM head, an ungated GELU feed-forward) with multi-query attention
    /// (`attention.head_count_kv`, 1), its LM head tied or its own.
    Starcoder,
    /// BigCode's StarCoder 2 (3B, 7B, 15B): GPT-2's LayerNorms, biases and ungated GELU
    /// feed-forward with W_q, W_k and W_v apart (each with its bias), grouped-query attention
    /// and RoPE on split halves of whole heads in place of learned positions.
    Starcoder2,
    /// BigScience's BLOOM and BLOOMZ (560M to 176B): GPT-2's LayerNorms, biases, stacked
    /// Q/K/V and ungated GELU feed-forward, a LayerNorm on the embedding before the first
    /// block (`token_embd_norm`, [`Architecture::norms_embedding`]), and no positions but
    /// ALiBi: each attention score biased by `-slope_h * (p - j)`, the query's distance to
    /// the key times a slope per head ([`Architecture::alibi_max_bias`]); its LM head tied or
    /// its own.
    Bloom,
    /// Arcee's AFM (4.5B): llama's block with an ungated feed-forward, `W_down relu(W_up x)^2`
    /// (no `ffn_gate`, no biases: [`Architecture::gated_ffn`], [`Activation::ReluSquared`]).
    Arcee,
    /// NVIDIA's Nemotron (Nemotron-Mini 4B, Minitron 4B and 8B): StableLM's LayerNorms (their
    /// `1 + gain` folded into the gain by the converter), RoPE on split halves of the first
    /// `rope.dimension_count` elements of each head (half), Arcee's ungated squared-ReLU
    /// feed-forward and an LM head of its own; the optional biases llama.cpp reads beside
    /// the output and feed-forward projections are refused, as in every family without
    /// GPT-2's ([`UNAPPLIED_BIASES`](super::weights::UNAPPLIED_BIASES)).
    Nemotron,
    /// Mistral's Ministral 3 (3B, 8B, 14B; text-only files): llama's block as llama.cpp
    /// computes it under its own keys (`mistral3.*`), with YaRN's magnitude correction divided
    /// by its log multiplier ([`Architecture::reads_yarn_log_multiplier`]) and Llama 4's
    /// attention temperature, which scales q only past the original context, where the
    /// engine stops ([`Architecture::reads_attention_temperature`]).
    Mistral3,
    /// Cohere's Command R (35B, 08-2024), Aya 23 and Aya Expanse (8B, 32B) (`command-r`): a
    /// parallel residual whose feed-forward reads the attention's normed input (Phi-2's, no
    /// `ffn_norm`), LayerNorms without biases ([`Architecture::layer_norm_biases`]), llama's
    /// gated SiLU feed-forward and adjacent RoPE pairs, an LM head tied to the embedding and
    /// the logits multiplied by the file's `logit_scale` where it gives one. Command R+'s
    /// LayerNorms of q and k are refused by name.
    #[serde(rename = "command-r")]
    CommandR,
    /// Cohere's Command R7B and Command A (`cohere2`): Command R's block with its
    /// `logit_scale` required, the first three of every four layers attending over a sliding
    /// window and turning by RoPE, the fourth over every position without RoPE
    /// ([`COHERE2_PATTERN`], [`Architecture::full_layers_unrotated`]).
    Cohere2,
    /// AI2's OLMo 1 (1B, 7B; `olmo`): llama's block with LayerNorms that have neither gain
    /// nor bias (non-parametric, [`Architecture::norm_gains`]: no norm tensor in its files)
    /// and adjacent RoPE pairs, its LM head its own or tied; OLMo 1.7's clamp of q, k and v
    /// (`attention.clamp_kqv`, [`Config::clamp_kqv`](super::Config::clamp_kqv)) where its
    /// file has one.
    Olmo,
    /// Tencent's Hunyuan dense models (0.5B to 7B; `hunyuan-dense`): llama's block with RoPE
    /// on split halves and each head's q and k RMS-normed after RoPE, not before
    /// ([`Architecture::norms_heads_after_rope`]); the LM head its own or tied; its files'
    /// RoPE base already scaled by its NTK alpha (`rope.scaling.alpha`, where a file names
    /// one, scales it as llama.cpp does).
    #[serde(rename = "hunyuan-dense")]
    HunyuanDense,
    /// Qwen2-VL and Qwen2.5-VL's language model, run on text: Qwen2's block, its heads turned
    /// by multimodal RoPE ([`Architecture::multimodal_rope`]) whose every position stream is a
    /// text token's own position, so each pair turns as plain RoPE on split halves but those
    /// of the fourth section, which stay still (llama.cpp's text positions).
    Qwen2vl,
    /// Qwen3-VL's language model, run on text: Qwen3's block, its heads turned by interleaved
    /// multimodal RoPE ([`Architecture::multimodal_rope`]), as Qwen2-VL's with the sections'
    /// pairs taken in turn; its deepstack inputs are images' alone, zero for text.
    Qwen3vl,
    /// ChatGLM3 6B, GLM-4 9B Chat and CodeGeeX4 (`chatglm`, GLM-4's files before its 0414
    /// models): GLM-4's block without its post norms, RoPE on the first half of each head in
    /// adjacent pairs, W_q, W_k and W_v stacked (`attn_qkv`, with its bias) and the gate and
    /// up projections stacked in `ffn_up`.
    Chatglm,
    /// Maincode's Maincoder (1B): Hunyuan dense's block, each head's q and k RMS-normed after
    /// RoPE ([`Architecture::norms_heads_after_rope`]), with RoPE on adjacent pairs.
    Maincoder,
    /// Small Magic AI's Refact (1.6B, a code model): llama's block with multi-query attention
    /// and no positions but ALiBi, as BLOOM's ([`Architecture::alibi_max_bias`]).
    Refact,
    /// TII's Falcon (7B, 40B, 180B; `falcon`, not Falcon 3, whose files are llama's): a parallel
    /// residual, `x += attn(n1(x)) + ffn(n2(x))`, with biased LayerNorms, W_q, W_k and W_v
    /// stacked (`attn_qkv`), RoPE on split halves, an ungated GELU feed-forward and no bias on
    /// any matrix; 7B's blocks have one norm (`n2` is `n1`, `attn_norm`), 40B's and 180B's two
    /// (`attn_norm_2` before the attention, `attn_norm` before the feed-forward:
    /// [`FALCON_ATTENTION_NORM`]).
    Falcon,
    /// MosaicML's MPT (7B, 30B and their Instruct, Chat and StoryWriter models; Replit Code
    /// 3B): a sequential block of LayerNorms without biases, W_q, W_k and W_v stacked
    /// (`attn_qkv`), ALiBi of the file's largest bias (`attention.max_alibi_bias`; none where
    /// it is 0 or absent) in place of positions, the file's clamp of q, k and v where it gives
    /// one (`attention.clamp_kqv`), an ungated GELU feed-forward and no bias on any matrix.
    Mpt,
    /// Baichuan Inc.'s Baichuan and Baichuan 2 (7B, 13B, their Chat models): llama's block
    /// (W_q, W_k and W_v apart, as the converter cuts its stacked `W_pack`), whose positions
    /// llama.cpp sets by the block count: RoPE for 7B's [`BAICHUAN_7B_LAYERS`], BLOOM's ALiBi
    /// for 13B's [`BAICHUAN_13B_LAYERS`]; a file of any other count is refused
    /// ([`Architecture::baichuan_positions`]).
    Baichuan,
    /// OrionStar's Orion (14B and its Chat models): llama's block with biased LayerNorms for
    /// its RMSNorms and RoPE on split halves (StableLM's block turning whole heads, no bias on
    /// Q, K or V).
    Orion,
    /// XVERSE's models (7B, 13B, 65B and their Chat models): llama's block under its own name.
    Xverse,
    /// Preferred Networks' PLaMo (13B): a parallel residual with one RMSNorm read by both
    /// sublayers, `x += attn(n(x)) + ffn(n(x))`, RoPE on split halves and SwiGLU.
    Plamo,
    /// WisdomAI's CodeShell (7B): StarCoder's block (biased LayerNorms, a bias on every
    /// matrix but the LM head's, an ungated GELU feed-forward, W_q, W_k and W_v stacked in
    /// `attn_qkv` with grouped-query attention) with RoPE on split halves for its learned
    /// positions.
    Codeshell,
    /// Alibaba's Qwen (Qwen 1: 1.8B, 7B, 14B, 72B and their Chat models; `qwen`): llama's block
    /// with W_q, W_k and W_v stacked (`attn_qkv`, with its bias), RoPE on split halves, and its
    /// files' `feed_forward_length` twice the feed-forward's width (the converter writes the
    /// model's intermediate size, which counts the gate's and up projection's rows together:
    /// [`Architecture::halves_feed_forward_length`]).
    Qwen,
    /// ByteDance's Seed-OSS (36B Base and Instruct; `seed_oss`): llama's block with Q, K and V
    /// biases, heads wider than the residual width's share (128 over 5120 / 80) and RoPE on
    /// split halves, its feed-forward's norm stored as `post_attention_norm` (a pre-norm as
    /// llama.cpp reads it, not a post norm: [`Architecture::ffn_norm_name`]).
    #[serde(rename = "seed_oss")]
    SeedOss,
    /// BitNet b1.58 (1bitLLM's 700M and 3B; `bitnet`): llama's block with RoPE on split
    /// halves, an RMSNorm on the attention's output before the output projection
    /// (`attn_sub_norm`) and on the SwiGLU product before the down projection
    /// (`ffn_sub_norm`), and its LM head always the embedding ([`Architecture::has_sub_norms`]);
    /// its matrices' weights ternary, stored in TQ1_0 or TQ2_0.
    Bitnet,
    /// AI2's OLMoE (1B-7B; `olmoe`): llama's block with the whole of q and of k RMS-normed
    /// before RoPE on split halves (OLMo 2's norms, with pre-norms) and a mixture of experts
    /// in every feed-forward, the picked experts' weights kept as their probabilities; an LM
    /// head of its own.
    Olmoe,
    /// Liquid AI's LFM2 (350M, 700M, 1.2B, 2.6B; `lfm2`): a hybrid whose layers either attend
    /// (Qwen3's attention: each head of q and k RMS-normed before RoPE on split halves) or run
    /// a gated short convolution over the last few positions, the layers marked by a zero in
    /// `attention.head_count_kv` ([`Architecture::has_short_convolutions`]); every layer's
    /// feed-forward a SwiGLU, the final norm stored as `token_embd_norm`.
    Lfm2,
}

/// Baichuan 7B's block count, whose layers turn by RoPE.
pub const BAICHUAN_7B_LAYERS: usize = 32;

/// Baichuan 13B's block count, whose attention ALiBi biases ([`ALIBI_MAX_BIAS`]).
pub const BAICHUAN_13B_LAYERS: usize = 40;

/// The norm before a Falcon block's attention where the block has two (Falcon 40B's and
/// 180B's); their `attn_norm` is then the feed-forward's, as llama.cpp reads them.
pub const FALCON_ATTENTION_NORM: &str = "attn_norm_2";

/// How a multimodal-RoPE family lays its position streams (time, height, width and a fourth)
/// over a head's pairs ([`RopeSections`](super::rope::RopeSections)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
#[serde(rename_all = "lowercase")]
pub enum SectionLayout {
    /// Each stream's pairs in one run, the sections one after another (Qwen2-VL's M-RoPE).
    Contiguous,
    /// The first three streams' pairs taken in turn, time, height, width (Qwen3-VL's
    /// interleaved M-RoPE).
    Interleaved,
}

/// The `general.architecture` of a vision model's projector file (llama.cpp's `mmproj`),
/// which is refused as such ([`ModelError::Projector`]).
pub const PROJECTOR_ARCHITECTURE: &str = "clip";

/// ALiBi's largest bias (`max_bias`, 8 in the paper), which sets every head's slope
/// (BLOOM's and Refact's: llama.cpp fixes it, GGUF files do not store it).
pub const ALIBI_MAX_BIAS: f32 = 8.0;

/// Where a model with head norms RMS-norms q and k before RoPE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HeadNormSpan {
    /// Each head apart, one gain `[head_dim]` shared by every head (Qwen3, Gemma 3).
    Head,
    /// All of q at once and all of k at once, a gain per element (`[n_heads * head_dim]`,
    /// `[kv_dim]`: OLMo 2).
    Whole,
}

/// The feed-forward's activation: `hidden = act(W_gate x) * W_up x` where it is gated,
/// `hidden = act(W_up x + b)` where not ([`Architecture::gated_ffn`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `silu(x) = x / (1 + e^-x)`: SwiGLU.
    Silu,
    /// GELU's tanh form, `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`: GeGLU.
    GeluTanh,
    /// The square of the ReLU, `max(x, 0)^2` (Arcee's and Nemotron's ungated feed-forward,
    /// llama.cpp's `LLM_FFN_RELU_SQR`).
    ReluSquared,
}

/// Layers in Gemma 2's repeating pattern: the first of each two attends over a sliding window
/// (llama.cpp's `set_swa_pattern(2)`).
pub const GEMMA2_PATTERN: usize = 2;

/// Layers in Gemma 3's repeating pattern: the first five of each six attend over a sliding
/// window, the sixth over every position (llama.cpp's `set_swa_pattern(6)`).
pub const GEMMA3_PATTERN: usize = 6;

/// Layers in OLMo 3's repeating pattern (an olmo2 file with a sliding window): the first
/// three of each four attend over a sliding window (llama.cpp's default for olmo2 files,
/// `set_swa_pattern(4)`).
pub const OLMO3_PATTERN: usize = 4;

/// Layers in EXAONE 4 32B's repeating pattern: the first three of each four slide (llama.cpp's
/// `set_swa_pattern(4)` for it).
pub const EXAONE4_PATTERN: usize = 4;

/// Layers in Cohere2's repeating pattern: the first three of each four slide (llama.cpp's
/// `set_swa_pattern(4)` for it).
pub const COHERE2_PATTERN: usize = 4;

/// RoPE base frequency of Gemma 3's sliding-window layers (the file's `rope.freq_base` is the
/// global layers'; the local one is fixed by the model, and GGUF files do not store it).
pub const GEMMA3_LOCAL_ROPE_BASE: f32 = 10_000.0;

/// SmolLM3's NoPE period: layer `l` skips RoPE where `(l + 1) % 4 == 0` (llama.cpp's
/// `n_no_rope_layer_step`, fixed by the model; GGUF files do not store it).
pub const SMOLLM3_NO_ROPE_STEP: usize = 4;

/// Which elements of a head RoPE turns together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopePairs {
    /// `(x[2i], x[2i+1])`: llama.cpp's "NORM" mode.
    Adjacent,
    /// `(x[i], x[i + head_dim/2])`: llama.cpp's "NEOX" mode (GPT-NeoX, Qwen).
    Halves,
}

impl Architecture {
    /// Every architecture, in the order error messages list them.
    pub const ALL: [Architecture; 50] = [
        Architecture::Llama,
        Architecture::Qwen2,
        Architecture::Qwen3,
        Architecture::Qwen3moe,
        Architecture::Gemma,
        Architecture::Gemma2,
        Architecture::Gemma3,
        Architecture::Smollm3,
        Architecture::Phi3,
        Architecture::Granite,
        Architecture::Granitemoe,
        Architecture::Granitehybrid,
        Architecture::Minicpm,
        Architecture::Olmo2,
        Architecture::Ernie45,
        Architecture::Internlm2,
        Architecture::Exaone,
        Architecture::Exaone4,
        Architecture::Glm4,
        Architecture::Stablelm,
        Architecture::Gpt2,
        Architecture::Phi2,
        Architecture::Gptneox,
        Architecture::Starcoder,
        Architecture::Starcoder2,
        Architecture::Bloom,
        Architecture::Arcee,
        Architecture::Nemotron,
        Architecture::Mistral3,
        Architecture::CommandR,
        Architecture::Cohere2,
        Architecture::Olmo,
        Architecture::HunyuanDense,
        Architecture::Qwen2vl,
        Architecture::Qwen3vl,
        Architecture::Chatglm,
        Architecture::Maincoder,
        Architecture::Refact,
        Architecture::Falcon,
        Architecture::Mpt,
        Architecture::Baichuan,
        Architecture::Orion,
        Architecture::Xverse,
        Architecture::Plamo,
        Architecture::Codeshell,
        Architecture::Qwen,
        Architecture::SeedOss,
        Architecture::Bitnet,
        Architecture::Olmoe,
        Architecture::Lfm2,
    ];

    /// Reads `general.architecture`, refusing any other family by name with the supported list
    /// (a vision projector's `clip` with what to open instead).
    pub fn from_name(name: &str) -> Result<Self, ModelError> {
        if name == PROJECTOR_ARCHITECTURE {
            return Err(ModelError::Projector);
        }
        Self::ALL
            .into_iter()
            .find(|a| a.name() == name)
            .ok_or_else(|| ModelError::UnsupportedArchitecture { name: name.to_string(), supported: Self::supported_list() })
    }

    /// The name GGUF files give it, also the prefix of its metadata keys (`qwen2.block_count`).
    pub fn name(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Qwen2 => "qwen2",
            Architecture::Qwen3 => "qwen3",
            Architecture::Qwen3moe => "qwen3moe",
            Architecture::Gemma => "gemma",
            Architecture::Gemma2 => "gemma2",
            Architecture::Gemma3 => "gemma3",
            Architecture::Smollm3 => "smollm3",
            Architecture::Phi3 => "phi3",
            Architecture::Granite => "granite",
            Architecture::Granitemoe => "granitemoe",
            Architecture::Granitehybrid => "granitehybrid",
            Architecture::Minicpm => "minicpm",
            Architecture::Olmo2 => "olmo2",
            Architecture::Ernie45 => "ernie4_5",
            Architecture::Internlm2 => "internlm2",
            Architecture::Exaone => "exaone",
            Architecture::Exaone4 => "exaone4",
            Architecture::Glm4 => "glm4",
            Architecture::Stablelm => "stablelm",
            Architecture::Gpt2 => "gpt2",
            Architecture::Phi2 => "phi2",
            Architecture::Gptneox => "gptneox",
            Architecture::Starcoder => "starcoder",
            Architecture::Starcoder2 => "starcoder2",
            Architecture::Bloom => "bloom",
            Architecture::Arcee => "arcee",
            Architecture::Nemotron => "nemotron",
            Architecture::Mistral3 => "mistral3",
            Architecture::CommandR => "command-r",
            Architecture::Cohere2 => "cohere2",
            Architecture::Olmo => "olmo",
            Architecture::HunyuanDense => "hunyuan-dense",
            Architecture::Qwen2vl => "qwen2vl",
            Architecture::Qwen3vl => "qwen3vl",
            Architecture::Chatglm => "chatglm",
            Architecture::Maincoder => "maincoder",
            Architecture::Refact => "refact",
            Architecture::Falcon => "falcon",
            Architecture::Mpt => "mpt",
            Architecture::Baichuan => "baichuan",
            Architecture::Orion => "orion",
            Architecture::Xverse => "xverse",
            Architecture::Plamo => "plamo",
            Architecture::Codeshell => "codeshell",
            Architecture::Qwen => "qwen",
            Architecture::SeedOss => "seed_oss",
            Architecture::Bitnet => "bitnet",
            Architecture::Olmoe => "olmoe",
            Architecture::Lfm2 => "lfm2",
        }
    }

    /// The supported names, for error messages.
    pub fn supported_list() -> String {
        Self::ALL.map(|a| a.name()).join(", ")
    }

    /// Where its RoPE pairs sit within a head.
    pub fn rope_pairs(self) -> RopePairs {
        match self {
            Architecture::Llama
            | Architecture::Smollm3
            | Architecture::Granite
            | Architecture::Granitemoe
            | Architecture::Granitehybrid
            | Architecture::Minicpm
            | Architecture::Ernie45
            | Architecture::Internlm2
            | Architecture::Glm4
            | Architecture::Chatglm
            | Architecture::Maincoder
            | Architecture::Gpt2
            | Architecture::Starcoder
            | Architecture::Bloom
            | Architecture::Refact
            | Architecture::Mpt
            | Architecture::Baichuan
            | Architecture::Xverse
            | Architecture::Arcee
            | Architecture::Mistral3
            | Architecture::CommandR
            | Architecture::Cohere2
            | Architecture::Olmo => RopePairs::Adjacent,
            Architecture::Qwen2
            | Architecture::Qwen3
            | Architecture::Qwen3moe
            | Architecture::Gemma
            | Architecture::Gemma2
            | Architecture::Gemma3
            | Architecture::Phi3
            | Architecture::Olmo2
            | Architecture::Exaone
            | Architecture::Exaone4
            | Architecture::Stablelm
            | Architecture::Phi2
            | Architecture::Gptneox
            | Architecture::Starcoder2
            | Architecture::Nemotron
            | Architecture::HunyuanDense
            | Architecture::Qwen2vl
            | Architecture::Qwen3vl
            | Architecture::Falcon
            | Architecture::Orion
            | Architecture::Plamo
            | Architecture::Codeshell
            | Architecture::Qwen
            | Architecture::SeedOss
            | Architecture::Bitnet
            | Architecture::Olmoe
            | Architecture::Lfm2 => RopePairs::Halves,
        }
    }

    /// Whether its files may turn only part of each head by RoPE (`rope.dimension_count` short
    /// of the head width: Phi-4-mini's 96 of 128, GLM-4's 64 of 128, StableLM's 16 of 64 or 20
    /// of 80, Phi-2's 32 of 80, Pythia's 16 of 64, Nemotron's half). Phi-3's, GLM-4's,
    /// StableLM's, Phi-2's, GPT-NeoX's and Nemotron's alone: llama.cpp refuses such a llama
    /// file ("invalid n_rot") and fails an assertion on the others, so none exist.
    pub fn allows_partial_rope(self) -> bool {
        matches!(
            self,
            Architecture::Phi3
                | Architecture::Glm4
                | Architecture::Chatglm
                | Architecture::Stablelm
                | Architecture::Phi2
                | Architecture::Gptneox
                | Architecture::Nemotron
        )
    }

    /// Whether its norms are LayerNorms, `(x - mean(x)) / sqrt(var(x) + eps) * gain + bias`,
    /// with their epsilon under `attention.layer_norm_epsilon`: StableLM's, Orion's, Nemotron's,
    /// Falcon's, MPT's, Cohere's, OLMo 1's and GPT-2's block's
    /// ([`Architecture::has_gpt2_block`]), each with a bias beside its gain but MPT's,
    /// Cohere's and OLMo 1's ([`Architecture::layer_norm_biases`]). Every other family's are
    /// RMSNorms, `x / sqrt(mean(x^2) + eps) * gain`.
    pub fn layer_norms(self) -> bool {
        matches!(
            self,
            Architecture::Stablelm
                | Architecture::Orion
                | Architecture::Nemotron
                | Architecture::Olmo
                | Architecture::Falcon
                | Architecture::Mpt
        ) || self.has_gpt2_block()
            || self.is_cohere()
    }

    /// Whether its LayerNorms' files hold a bias beside each gain (`attn_norm.bias`,
    /// `ffn_norm.bias`, `output_norm.bias`, required): every LayerNorm family's but MPT's,
    /// Cohere's and OLMo 1's, whose LayerNorms have none (held as a bias of zeros, which adds
    /// nothing; a file of theirs holding one is refused by it).
    pub fn layer_norm_biases(self) -> bool {
        self.layer_norms() && !self.is_cohere() && !matches!(self, Architecture::Olmo | Architecture::Mpt)
    }

    /// Whether its files hold each norm's gain (`attn_norm.weight`, `ffn_norm.weight`,
    /// `output_norm.weight`): every family's but OLMo 1's, whose LayerNorms are
    /// non-parametric (held as a gain of ones, which scales nothing).
    pub fn norm_gains(self) -> bool {
        self != Architecture::Olmo
    }

    /// Command R or Cohere2.
    fn is_cohere(self) -> bool {
        matches!(self, Architecture::CommandR | Architecture::Cohere2)
    }

    /// Whether its file's `logit_scale` multiplies the logits (Cohere's): `Some(true)` where
    /// the file must give it (Cohere2's, as llama.cpp requires it), `Some(false)` where it may
    /// (Command R's); `None` where the key is not read as a multiplier (Granite's divides,
    /// [`Architecture::has_file_scales`]).
    pub fn logit_multiplier(self) -> Option<bool> {
        match self {
            Architecture::Cohere2 => Some(true),
            Architecture::CommandR => Some(false),
            _ => None,
        }
    }

    /// Whether its block is GPT-2's kind: LayerNorms, a bias on every matrix but the LM head's
    /// and an ungated GELU feed-forward (GPT-2's, Phi-2's, GPT-NeoX's, StarCoder's, StarCoder
    /// 2's, BLOOM's and CodeShell's), whatever its positions and residual.
    fn has_gpt2_block(self) -> bool {
        matches!(
            self,
            Architecture::Gpt2
                | Architecture::Phi2
                | Architecture::Gptneox
                | Architecture::Starcoder
                | Architecture::Starcoder2
                | Architecture::Bloom
                | Architecture::Codeshell
        )
    }

    /// Whether each block's feed-forward reads the attention's normed input rather than a
    /// norm of its own (no `ffn_norm`): `x += attn(norm(x)) + ffn(norm(x))`, Phi-2's parallel
    /// residual, always parallel ([`Config::parallel_residual`](super::Config::parallel_residual)):
    /// Phi-2's, Cohere's, PLaMo's and Falcon's (whose blocks with a second norm,
    /// [`FALCON_ATTENTION_NORM`], give the feed-forward a norm of its own all the same).
    pub fn shares_attention_norm(self) -> bool {
        matches!(self, Architecture::Phi2 | Architecture::Falcon | Architecture::Plamo) || self.is_cohere()
    }

    /// Whether its files say whether the residual is parallel (`use_parallel_residual`,
    /// required as llama.cpp requires it): GPT-NeoX's.
    pub fn reads_parallel_residual(self) -> bool {
        self == Architecture::Gptneox
    }

    /// Whether its LM head is its own (`output.weight` required) with a bias added to the
    /// logits (`output.bias`, `[vocab]`): Phi-2's.
    pub fn head_bias(self) -> bool {
        self == Architecture::Phi2
    }

    /// Whether a learned position embedding (`position_embd.weight`, `[context, dim]`) is
    /// added to each token's embedding row, its row the token's position: GPT-2's and
    /// StarCoder's, which turn nothing by RoPE ([`Architecture::rotates`]).
    pub fn learned_positions(self) -> bool {
        matches!(self, Architecture::Gpt2 | Architecture::Starcoder)
    }

    /// Whether its files hold a bias beside the attention's output projection and the
    /// feed-forward's two (`attn_output.bias`, `ffn_up.bias`, `ffn_down.bias`) and one for the
    /// Q/K/V projection (`attn_qkv.bias`, or `attn_q.bias`, `attn_k.bias` and `attn_v.bias`
    /// beside W_q, W_k and W_v apart): GPT-2's block's ([`Architecture::has_gpt2_block`]),
    /// each required. Another family's file holding one is refused
    /// ([`UNAPPLIED_BIASES`](super::weights::UNAPPLIED_BIASES)).
    pub fn linear_biases(self) -> bool {
        self.has_gpt2_block()
    }

    /// Whether its feed-forward is gated, `W_down (act(W_gate x) * W_up x)` (llama's SwiGLU,
    /// Gemma's GeGLU): every family's but GPT-2's block's ([`Architecture::has_gpt2_block`]),
    /// whose is `W_down act(W_up x + b) + b` with no `ffn_gate`, Falcon's and MPT's, `W_down
    /// gelu(W_up x)`, and Arcee's and Nemotron's, `W_down relu(W_up x)^2`
    /// ([`Architecture::relu_squared`]).
    pub fn gated_ffn(self) -> bool {
        !self.has_gpt2_block() && !self.relu_squared() && !matches!(self, Architecture::Falcon | Architecture::Mpt)
    }

    /// Whether its ungated feed-forward squares the ReLU ([`Activation::ReluSquared`]):
    /// Arcee's and Nemotron's.
    fn relu_squared(self) -> bool {
        matches!(self, Architecture::Arcee | Architecture::Nemotron)
    }

    /// Whether its file's YaRN log multiplier (`rope.scaling.yarn_log_multiplier`) is read, as
    /// llama.cpp reads it for Ministral 3 ([`Yarn::magnitude`](super::rope::Yarn::magnitude));
    /// another family's file giving one is refused (llama.cpp reads it for DeepSeek's, which
    /// the engine does not run).
    pub fn reads_yarn_log_multiplier(self) -> bool {
        self == Architecture::Mistral3
    }

    /// Whether its file's `attention.temperature_scale` (Llama 4's attention temperature) is
    /// read: Ministral 3's. llama.cpp multiplies each query at position `p` by `1 + s
    /// ln(floor(p / n) + 1)`, `n` the original context (YaRN's, else the model's), which is 1
    /// below `n`: the engine's context stops there ([`Config::context_len`](super::Config::context_len)),
    /// so no query is scaled.
    pub fn reads_attention_temperature(self) -> bool {
        self == Architecture::Mistral3
    }

    /// Whether its files must have `attn_q.bias`, `attn_k.bias` and `attn_v.bias` (a llama file
    /// may have them too; they are used wherever present).
    pub fn requires_qkv_bias(self) -> bool {
        matches!(self, Architecture::Qwen2 | Architecture::Qwen2vl)
    }

    /// Whether its files hold the gate and up projections stacked in `ffn_up`, `[2 ffn_dim,
    /// dim]`, the gate's rows first, and may hold W_q, W_k and W_v stacked in one `attn_qkv`
    /// tensor: Phi-3's, GLM-4's and ChatGLM's.
    pub fn has_fused_projections(self) -> bool {
        matches!(self, Architecture::Phi3 | Architecture::Glm4 | Architecture::Chatglm)
    }

    /// Whether its files may hold W_q, W_k and W_v stacked in one `attn_qkv` tensor (Phi-3's,
    /// GLM-4's, Phi-2's and CodeShell's may, CodeShell's converter always stacks them; GPT-2's,
    /// GPT-NeoX's and StarCoder's always do: [`Architecture::requires_fused_qkv`]; StarCoder
    /// 2's never).
    pub fn may_fuse_qkv(self) -> bool {
        self.has_fused_projections()
            || matches!(self, Architecture::Gpt2 | Architecture::Phi2 | Architecture::Codeshell)
            || self.requires_fused_qkv()
    }

    /// Whether its files hold W_q, W_k and W_v stacked in `attn_qkv` and never apart: GPT-2's,
    /// StarCoder's, GPT-NeoX's, BLOOM's, Falcon's, MPT's and Qwen 1's (whose converters
    /// reorder each head's interleaved rows into all of Q, then K, then V, where they
    /// interleave).
    pub fn requires_fused_qkv(self) -> bool {
        matches!(
            self,
            Architecture::Gpt2
                | Architecture::Gptneox
                | Architecture::Starcoder
                | Architecture::Bloom
                | Architecture::Falcon
                | Architecture::Mpt
                | Architecture::Qwen
        )
    }

    /// The name of each block's norm before the feed-forward, where it has one of its own:
    /// `ffn_norm`, or Seed-OSS's `post_attention_norm` (the name its converter maps
    /// `post_attention_layernorm` to, read by llama.cpp as the feed-forward's pre-norm).
    pub fn ffn_norm_name(self) -> &'static str {
        match self {
            Architecture::SeedOss => "post_attention_norm",
            _ => "ffn_norm",
        }
    }

    /// Whether its files' `feed_forward_length` is twice the feed-forward's width (Qwen 1's:
    /// llama.cpp reads its gate, up and down projections at half of it; an odd length is
    /// refused by its key).
    pub fn halves_feed_forward_length(self) -> bool {
        self == Architecture::Qwen
    }

    /// Whether its stacked Q/K/V are each as wide as the residual stream (Qwen 1's: llama.cpp
    /// reads `attn_qkv` as three `embedding_length` blocks of rows, so a file with fewer
    /// key/value heads, or heads narrower than their share, is refused).
    pub fn full_width_qkv(self) -> bool {
        self == Architecture::Qwen
    }

    /// Whether the token embedding's row is LayerNorm-ed before the first block
    /// (`token_embd_norm.weight` and `.bias`, `[dim]`): BLOOM's.
    pub fn norms_embedding(self) -> bool {
        self == Architecture::Bloom
    }

    /// ALiBi's largest bias where its attention is biased by distance in place of positions
    /// (BLOOM's and Refact's [`ALIBI_MAX_BIAS`]): each scaled score of query head `h` at position `p`
    /// against position `j` gains `-slope_h (p - j)`, the slopes a geometric series set by it
    /// ([`alibi_slope`](crate::backend::cpu::ops::alibi_slope)); `None` elsewhere (MPT's is
    /// its file's: [`Architecture::reads_alibi_max_bias`]).
    pub fn alibi_max_bias(self) -> Option<f32> {
        matches!(self, Architecture::Bloom | Architecture::Refact).then_some(ALIBI_MAX_BIAS)
    }

    /// Whether its file's `attention.max_alibi_bias` sets ALiBi's largest bias (MPT's: ALiBi
    /// where it is above 0, no positions at all where it is 0 or absent, as llama.cpp runs
    /// them).
    pub fn reads_alibi_max_bias(self) -> bool {
        self == Architecture::Mpt
    }

    /// Whether its file's `attention.clamp_kqv` clamps q, k and v (OLMo 1.7's and MPT's; a
    /// clamp of 0 or none clamps nothing).
    pub fn reads_clamp_kqv(self) -> bool {
        matches!(self, Architecture::Olmo | Architecture::Mpt)
    }

    /// Baichuan's positions for a file of `n_layers` blocks, as llama.cpp sets them by the
    /// count: `Some(false)` for RoPE (7B's 32), `Some(true)` for ALiBi (13B's 40), `None` for
    /// any other count (llama.cpp would run it with no positions at all: the engine refuses
    /// it). `Some(false)` for every other architecture.
    pub fn baichuan_positions(self, n_layers: usize) -> Option<bool> {
        match (self, n_layers) {
            (Architecture::Baichuan, BAICHUAN_7B_LAYERS) => Some(false),
            (Architecture::Baichuan, BAICHUAN_13B_LAYERS) => Some(true),
            (Architecture::Baichuan, _) => None,
            _ => Some(false),
        }
    }

    /// Whether its files' LongRoPE factors (`rope_factors_short`, `rope_factors_long`:
    /// Phi-3.5's, Phi-3 128k's) are read; any other architecture's file holding them is refused.
    pub fn reads_longrope(self) -> bool {
        self == Architecture::Phi3
    }

    /// Whether q and k are RMS-normed (`attn_q_norm`, `attn_k_norm`), and over what: each
    /// head (Qwen3, Gemma 3; Hunyuan's and Maincoder's after RoPE) or the whole projection
    /// (OLMo 2).
    pub fn head_norm(self) -> Option<HeadNormSpan> {
        match self {
            Architecture::Qwen3
            | Architecture::Qwen3moe
            | Architecture::Gemma3
            | Architecture::Exaone4
            | Architecture::HunyuanDense
            | Architecture::Qwen3vl
            | Architecture::Maincoder
            | Architecture::Lfm2 => Some(HeadNormSpan::Head),
            Architecture::Olmo2 | Architecture::Olmoe => Some(HeadNormSpan::Whole),
            _ => None,
        }
    }

    /// How its files' multimodal RoPE lays the position streams over each head's pairs, where
    /// it may have one (`rope.dimension_sections`): Qwen2-VL's and GLM-4V's contiguous
    /// sections, Qwen3-VL's interleaved ones; `None` for every family that turns each head by
    /// one position (their files' sections are refused).
    pub fn multimodal_rope(self) -> Option<SectionLayout> {
        match self {
            Architecture::Qwen2vl | Architecture::Glm4 => Some(SectionLayout::Contiguous),
            Architecture::Qwen3vl => Some(SectionLayout::Interleaved),
            _ => None,
        }
    }

    /// Whether its files must name multimodal RoPE's sections (Qwen2-VL's and Qwen3-VL's, as
    /// llama.cpp requires them); a glm4 file turns by them only where it names time's and
    /// height's (GLM-4V's, llama.cpp's `use_mrope`), else by plain RoPE.
    pub fn requires_sections(self) -> bool {
        matches!(self, Architecture::Qwen2vl | Architecture::Qwen3vl)
    }

    /// Whether each head's norm of q and k comes after RoPE (Hunyuan's and Maincoder's:
    /// llama.cpp's graph turns q and k, then norms them) rather than before it (every other
    /// family's).
    pub fn norms_heads_after_rope(self) -> bool {
        matches!(self, Architecture::HunyuanDense | Architecture::Maincoder)
    }

    /// Whether q and k are RMS-normed before RoPE, either way ([`Architecture::head_norm`]).
    pub fn has_head_norm(self) -> bool {
        self.head_norm().is_some()
    }

    /// Whether each sublayer's input is RMS-normed (`attn_norm`, `ffn_norm`) before its
    /// projections read it: every family's but OLMo 2's and EXAONE 4's.
    pub fn has_pre_norms(self) -> bool {
        !matches!(self, Architecture::Olmo2 | Architecture::Exaone4)
    }

    /// Whether each sublayer's output is RMS-normed (`post_attention_norm`, `post_ffw_norm`)
    /// before it is added to the residual stream: Gemma 2's and 3's, GLM-4's, OLMo 2's and
    /// EXAONE 4's.
    pub fn has_post_norms(self) -> bool {
        matches!(self, Architecture::Gemma2 | Architecture::Gemma3 | Architecture::Glm4) || !self.has_pre_norms()
    }

    /// Whether the attention's output is RMS-normed before the output projection
    /// (`attn_sub_norm`, `[n_heads * head_dim]`) and the feed-forward's gated product before
    /// the down projection (`ffn_sub_norm`, `[ffn_dim]`), and the LM head is always the
    /// embedding (an `output.weight` refused): BitNet's.
    pub fn has_sub_norms(self) -> bool {
        self == Architecture::Bitnet
    }

    /// Whether some of its layers run a gated short convolution in place of attention
    /// (LFM2's): `bcx = W_in norm(x)` split into thirds b, c and x', each channel's `b * x'`
    /// convolved causally over the last `shortconv.l_cache` positions, times c, through
    /// `W_out`. The file marks those layers by a zero in `attention.head_count_kv`
    /// ([`Config::short_conv`](super::Config::short_conv)); their tensors are
    /// `shortconv.in_proj`, `shortconv.conv` and `shortconv.out_proj`.
    pub fn has_short_convolutions(self) -> bool {
        self == Architecture::Lfm2
    }

    /// Whether some of its layers run a Mamba-2 selective state-space scan in place of
    /// attention (Granite 4.0 H's): `[z | xBC | dt] = W_in norm(x)`, xBC convolved causally
    /// over the last `ssm.conv_kernel` positions (with a bias, then SiLU) into x, B and C,
    /// each head's state `[head_dim, state]` decayed by `exp(softplus(dt + b) A)` and fed
    /// `softplus(dt + b) x B`, read out through C, plus `D x`, gated by `SiLU(z)`, RMS-normed
    /// per group and projected by `W_out`. The file marks those layers by a zero in
    /// `attention.head_count_kv` ([`Config::ssm`](super::Config::ssm)); their tensors are
    /// `ssm_in`, `ssm_conv1d` (and its bias), `ssm_dt.bias`, `ssm_a`, `ssm_d`, `ssm_norm`
    /// and `ssm_out`.
    pub fn has_ssm_layers(self) -> bool {
        self == Architecture::Granitehybrid
    }

    /// Whether its feed-forward may be a mixture of experts, read from `expert_count` and
    /// `expert_used_count` ([`Config::experts`](super::Config::experts)): Qwen3-MoE's, Granite
    /// MoE's and OLMoE's always ([`Architecture::requires_experts`]), a llama file's where it
    /// names experts (Mixtral's).
    /// Such a layer's tensors are the router `ffn_gate_inp` `[experts, dim]` and the experts'
    /// matrices stacked, `ffn_gate_exps` and `ffn_up_exps` `[experts, ffn, dim]`,
    /// `ffn_down_exps` `[experts, dim, ffn]`.
    pub fn reads_experts(self) -> bool {
        self.requires_experts() || matches!(self, Architecture::Llama | Architecture::Granitehybrid)
    }

    /// Whether a mixture of experts may add a shared expert every token runs beside its picks
    /// (`expert_shared_feed_forward_length`; `ffn_gate_shexp`, `ffn_up_shexp` `[shared, dim]`,
    /// `ffn_down_shexp` `[dim, shared]`), its output added to theirs: Granite 4.0 H's.
    pub fn reads_shared_expert(self) -> bool {
        self == Architecture::Granitehybrid
    }

    /// Whether every layer's feed-forward is a mixture of experts, so its file must name them:
    /// Qwen3-MoE's, Granite MoE's, OLMoE's.
    pub fn requires_experts(self) -> bool {
        matches!(self, Architecture::Qwen3moe | Architecture::Granitemoe | Architecture::Olmoe)
    }

    /// Whether the weights of the experts the router picks (their softmax probabilities over
    /// every expert) are divided by their sum, as llama.cpp's graph for the family does
    /// (`norm_w`): Qwen3-MoE's, Granite MoE's and Mixtral's are, OLMoE's not.
    pub fn normalizes_expert_weights(self) -> bool {
        matches!(self, Architecture::Qwen3moe | Architecture::Granitemoe | Architecture::Granitehybrid | Architecture::Llama)
    }

    /// The final norm's tensor name: `output_norm`, or LFM2's `token_embd_norm` (a norm of
    /// the last layer's output all the same, as llama.cpp reads it).
    pub fn output_norm_name(self) -> &'static str {
        if self == Architecture::Lfm2 {
            "token_embd_norm"
        } else {
            "output_norm"
        }
    }

    /// Gemma 1, 2 or 3.
    fn is_gemma(self) -> bool {
        matches!(self, Architecture::Gemma | Architecture::Gemma2 | Architecture::Gemma3)
    }

    /// Whether its attention scores and final logits are softcapped (`cap * tanh(x / cap)`,
    /// the caps `attn_logit_softcapping` and `final_logit_softcapping`): Gemma 2's; another
    /// architecture's file asking for a cap is refused.
    pub fn softcaps(self) -> bool {
        self == Architecture::Gemma2
    }

    /// What the token embedding's rows are multiplied by where the architecture fixes it
    /// (`sqrt(dim)` for Gemma, else 1; Granite's file gives its own,
    /// [`Architecture::has_file_scales`]): the LM head tied to the same table is not.
    pub fn embedding_scale(self, dim: usize) -> f32 {
        if self.is_gemma() {
            (dim as f32).sqrt()
        } else {
            1.0
        }
    }

    /// Whether its files give the scales [`Architecture::Granite`] names (read under its
    /// prefix): Granite's four, MiniCPM's three ([`Architecture::reads_attention_scale`]).
    pub fn has_file_scales(self) -> bool {
        matches!(self, Architecture::Granite | Architecture::Granitemoe | Architecture::Granitehybrid | Architecture::Minicpm)
    }

    /// Whether its file's `attention.scale` is read: Granite's; llama.cpp reads none for
    /// MiniCPM, whose scores stay scaled by `1 / sqrt(head width)` (and so all three of its
    /// other scales are required, as llama.cpp requires them).
    pub fn reads_attention_scale(self) -> bool {
        matches!(self, Architecture::Granite | Architecture::Granitemoe | Architecture::Granitehybrid)
    }

    /// The feed-forward's activation (gated or not).
    pub fn activation(self) -> Activation {
        if self.relu_squared() {
            Activation::ReluSquared
        } else if self.is_gemma() || !self.gated_ffn() {
            Activation::GeluTanh
        } else {
            Activation::Silu
        }
    }

    /// Whether layer `layer` attends over a sliding window of positions (when the file sets
    /// one): Gemma 2's first of every [`GEMMA2_PATTERN`], Gemma 3's first five of every
    /// [`GEMMA3_PATTERN`].
    pub fn is_sliding_layer(self, layer: usize) -> bool {
        self.sliding_period().is_some_and(|period| layer % period < period - 1)
    }

    /// The period of its layers' sliding pattern, all but the last of each period sliding
    /// (llama.cpp's `set_swa_pattern`): Gemma 2's [`GEMMA2_PATTERN`], Gemma 3's
    /// [`GEMMA3_PATTERN`], OLMo 3's [`OLMO3_PATTERN`]; `None` where no layer slides.
    pub fn sliding_period(self) -> Option<usize> {
        match self {
            Architecture::Gemma2 => Some(GEMMA2_PATTERN),
            Architecture::Gemma3 => Some(GEMMA3_PATTERN),
            Architecture::Olmo2 => Some(OLMO3_PATTERN),
            Architecture::Exaone4 => Some(EXAONE4_PATTERN),
            Architecture::Cohere2 => Some(COHERE2_PATTERN),
            _ => None,
        }
    }

    /// Whether its files' layers may slide over `attention.sliding_window` positions (some of
    /// them: [`Architecture::is_sliding_layer`]; an olmo2 file with a window is OLMo 3's).
    pub fn slides(self) -> bool {
        self.sliding_period().is_some()
    }

    /// Whether layer `layer` turns its queries and keys by RoPE: all but SmolLM3's every
    /// [`SMOLLM3_NO_ROPE_STEP`]th, and none of GPT-2's or StarCoder's (their positions are
    /// learned) or BLOOM's, Refact's and MPT's (ALiBi's distances stand in for them).
    pub fn rotates(self, layer: usize) -> bool {
        let no_pe_layer = self == Architecture::Smollm3 && (layer + 1).is_multiple_of(SMOLLM3_NO_ROPE_STEP);
        !(self.learned_positions() || self.alibi_max_bias().is_some() || self.reads_alibi_max_bias() || no_pe_layer)
    }

    /// Whether, in a file with a sliding window, the layers that attend over every position
    /// skip RoPE (EXAONE 4's and Cohere2's, as llama.cpp runs them: RoPE for their sliding
    /// layers alone).
    pub fn full_layers_unrotated(self) -> bool {
        matches!(self, Architecture::Exaone4 | Architecture::Cohere2)
    }
}

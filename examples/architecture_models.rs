//! Writes the tiny random-weight models of each architecture that tests/architectures.rs runs
//! against llama.cpp's logits (tests/fixtures/architectures.json, made from these very files
//! by bench/make-arch-fixtures.mjs) into DIR:
//!
//! ```text
//! cargo run --release --example architecture_models -- tests/fixtures/architectures
//! ```
//! Weights are F32, so llama.cpp computes in f32 with nothing rounded on the way (its K/V
//! cache is set to F32 too) and the tolerance can be tight.

use candle_core::quantized::GgmlDType;
use tokenscope::model::synthetic::{SyntheticModel, SyntheticSpec};
use tokenscope::model::{Architecture, Yarn};

/// The fixtures' YaRN: factor 4 over an original context of 4096 at RoPE base 10,000, whose
/// ramp runs over pairs 5 to 12 of a head of 32 (16 pairs), 2 to 6 of a head of 16.
const YARN: Yarn = Yarn { factor: 4.0, original_context: 4096, attn_factor: 1.0, log_multiplier: 0.0 };

/// The models: each file name with what it exercises.
fn models() -> Vec<(&'static str, SyntheticSpec)> {
    let base = SyntheticSpec {
        dim: 64,
        ffn_dim: 64,
        n_heads: 4,
        n_kv_heads: 2,
        weight_type: GgmlDType::F32,
        embedding_type: GgmlDType::F32,
        ..SyntheticSpec::default()
    };
    let phi3 = SyntheticSpec { architecture: Architecture::Phi3, untied_output: true, ..base.clone() };
    vec![
        // Llama 3's per-pair RoPE factors and an LM head of its own.
        (
            "llama3-rope-factors.gguf",
            SyntheticSpec { rope_factors: true, rope_base: 500_000.0, untied_output: true, seed: 11, ..base.clone() },
        ),
        // Linear RoPE scaling, tied head.
        ("llama-linear-rope.gguf", SyntheticSpec { rope_linear_scale: Some(4.0), seed: 12, ..base.clone() }),
        // Q/K/V biases, RoPE on split halves, tied head.
        ("qwen2.gguf", SyntheticSpec { architecture: Architecture::Qwen2, rope_base: 1_000_000.0, seed: 13, ..base.clone() }),
        // Head norms, split halves, heads wider than dim / n_heads, untied head.
        (
            "qwen3.gguf",
            SyntheticSpec { architecture: Architecture::Qwen3, head_dim: Some(32), untied_output: true, seed: 14, ..base.clone() },
        ),
        // Gemma 3: the scaled embedding, head and post norms, GELU, split halves, heads wider
        // than dim / n_heads, tied head; six layers, so five slide over a window of 5
        // positions (the fixture's 24 reach past it) with RoPE base 10,000 and the sixth sees
        // every position with the file's base.
        (
            "gemma3.gguf",
            SyntheticSpec {
                architecture: Architecture::Gemma3,
                n_layers: 6,
                head_dim: Some(32),
                rope_base: 1_000_000.0,
                sliding_window: Some(5),
                seed: 15,
                ..base.clone()
            },
        ),
        // Gemma 3 27B's attention scale: llama.cpp knows the model by its 62 blocks and scales
        // its scores by 1 / sqrt(dim / heads), here 1 / sqrt(8), not by 1 / sqrt(head width 16);
        // narrow (dim 32, four query heads over one KV head) to keep 62 blocks small.
        (
            "gemma3-27b-scale.gguf",
            SyntheticSpec {
                architecture: Architecture::Gemma3,
                n_layers: 62,
                dim: 32,
                ffn_dim: 32,
                n_heads: 4,
                n_kv_heads: 1,
                head_dim: Some(16),
                rope_base: 1_000_000.0,
                sliding_window: Some(5),
                seed: 25,
                ..base.clone()
            },
        ),
        // Gemma 1: llama's block with the scaled embedding, GELU and split halves, heads wider
        // than dim / n_heads (7B's shape), tied head.
        ("gemma.gguf", SyntheticSpec { architecture: Architecture::Gemma, head_dim: Some(32), seed: 32, ..base.clone() }),
        // Gemma 2: the scaled embedding, post norms, GELU, split halves, no head norms, heads
        // wider than dim / n_heads, tied head; six layers, every other one sliding over a
        // window of 5 positions (all with the file's RoPE base, here not Gemma 3's local 10,000);
        // every attention score capped
        // at 2 and every logit at 5, low enough to bend most of them.
        (
            "gemma2.gguf",
            SyntheticSpec {
                architecture: Architecture::Gemma2,
                n_layers: 6,
                head_dim: Some(32),
                rope_base: 1_000_000.0,
                sliding_window: Some(5),
                attn_softcap: Some(2.0),
                final_softcap: Some(5.0),
                seed: 23,
                ..base.clone()
            },
        ),
        // SmolLM3: llama's block with RoPE skipped in every fourth layer; eight layers, so
        // layers 3 and 7 attend by content alone; an LM head of its own.
        ("smollm3.gguf", SyntheticSpec { architecture: Architecture::Smollm3, n_layers: 8, untied_output: true, seed: 16, ..base.clone() }),
        // Granite 3: llama's block with its four scales (the embedding's 12 and the residual's
        // 0.22, Granite 3 2B's; the scores times 0.1 in place of 1 / sqrt(16) = 0.25; the
        // logits divided by 8), tied head; four layers.
        (
            "granite.gguf",
            SyntheticSpec {
                architecture: Architecture::Granite,
                n_layers: 4,
                granite_scales: Some([12.0, 0.22, 0.1, 8.0]),
                seed: 24,
                ..base.clone()
            },
        ),
        // Granite 4's dense models (granite-4.0-350m, granite-4.0-1b): Granite 3's block, in a
        // file whose converter gives the key/value heads one count a layer and keeps the
        // hybrids' Mamba-2 keys; other scales (the scores times 1/16, the head width's
        // inverse), tied head; four layers.
        (
            "granite4.gguf",
            SyntheticSpec {
                architecture: Architecture::Granite,
                n_layers: 4,
                granite_scales: Some([12.0, 0.25, 0.0625, 4.0]),
                granite4_keys: true,
                seed: 59,
                ..base.clone()
            },
        ),
        // MiniCPM: llama's block with three of Granite's scales (the embedding's 12, the
        // residual's 1.4 / sqrt(4) = 0.7, the logits divided by 2304 / 256 = 9, MiniCPM 2B's
        // own), tied head; four layers. The file also names an attention scale of 0.1, which
        // llama.cpp does not read for minicpm.
        (
            "minicpm.gguf",
            SyntheticSpec {
                architecture: Architecture::Minicpm,
                n_layers: 4,
                granite_scales: Some([12.0, 0.7, 0.1, 9.0]),
                seed: 34,
                ..base.clone()
            },
        ),
        // OLMo 2: no pre-norms, all of q and of k RMS-normed with a gain per element before
        // RoPE on split halves, post norms after each sublayer, an LM head of its own; four
        // layers.
        ("olmo2.gguf", SyntheticSpec { architecture: Architecture::Olmo2, n_layers: 4, untied_output: true, seed: 26, ..base.clone() }),
        // OLMo 3: OLMo 2's block with the first three of four layers sliding over a window of
        // 5 positions (written out a flag a layer, as its converter does) and turning by plain
        // RoPE, the fourth YaRN-scaled (factor 8 over an original 4096, the ramp over pairs 2
        // to 6 of a head's 8).
        (
            "olmo3.gguf",
            SyntheticSpec {
                architecture: Architecture::Olmo2,
                n_layers: 4,
                untied_output: true,
                sliding_window: Some(5),
                sliding_pattern_flags: true,
                rope_yarn: Some(Yarn { factor: 8.0, original_context: 4096, ..YARN }),
                seed: 27,
                ..base.clone()
            },
        ),
        // ERNIE 4.5: llama's block under its own name and keys, adjacent RoPE pairs, tied head.
        ("ernie4_5.gguf", SyntheticSpec { architecture: Architecture::Ernie45, seed: 29, ..base.clone() }),
        // InternLM2: llama's block under its own name and keys, adjacent RoPE pairs, an LM
        // head of its own (llama.cpp requires one for it).
        ("internlm2.gguf", SyntheticSpec { architecture: Architecture::Internlm2, untied_output: true, seed: 35, ..base.clone() }),
        // EXAONE 3.5: llama's block under its own name and keys, split halves, Llama 3's
        // per-pair RoPE factors and Q/K/V biases (llama.cpp adds them where a file has them),
        // an LM head of its own.
        (
            "exaone.gguf",
            SyntheticSpec {
                architecture: Architecture::Exaone,
                rope_factors: true,
                qkv_bias: true,
                untied_output: true,
                seed: 33,
                ..base.clone()
            },
        ),
        // EXAONE 4: no pre-norms, each head's q and k RMS-normed, post norms, split halves,
        // Llama 3's per-pair RoPE factors, an LM head of its own; four layers, every one
        // turned by RoPE over every position (the 1.2B's shape).
        (
            "exaone4.gguf",
            SyntheticSpec {
                architecture: Architecture::Exaone4,
                n_layers: 4,
                rope_factors: true,
                untied_output: true,
                seed: 30,
                ..base.clone()
            },
        ),
        // GLM-4: norms before and after each sublayer, the gate and up projections fused in
        // ffn_up, Q/K/V biases, RoPE on adjacent pairs of the first 8 of each head's 16
        // elements, an LM head of its own.
        (
            "glm4.gguf",
            SyntheticSpec {
                architecture: Architecture::Glm4,
                rope_dims: Some(8),
                qkv_bias: true,
                untied_output: true,
                seed: 36,
                ..base.clone()
            },
        ),
        // StableLM 2: LayerNorms (a bias beside each gain) before each sublayer and the LM
        // head, Q/K/V biases, RoPE on split halves of the first quarter of each head (4 of
        // its 16 elements), an LM head of its own.
        (
            "stablelm.gguf",
            SyntheticSpec {
                architecture: Architecture::Stablelm,
                rope_dims: Some(4),
                qkv_bias: true,
                untied_output: true,
                seed: 37,
                ..base.clone()
            },
        ),
        // StableLM 3B 4E1T (Zephyr 3B): StableLM 2's block without the Q/K/V biases.
        (
            "stablelm-3b.gguf",
            SyntheticSpec { architecture: Architecture::Stablelm, rope_dims: Some(4), untied_output: true, seed: 38, ..base.clone() },
        ),
        // GPT-2: LayerNorms, learned positions (no RoPE), the stacked Q/K/V projection and
        // every other matrix but the tied LM head with a bias, an ungated GELU feed-forward;
        // as many KV heads as query heads (GPT-2 has no grouped-query attention).
        ("gpt2.gguf", SyntheticSpec { architecture: Architecture::Gpt2, n_kv_heads: 4, seed: 39, ..base.clone() }),
        // Phi-2: GPT-2's LayerNorms, biases and ungated GELU feed-forward (the stacked Q/K/V
        // projection, as its converter writes it), RoPE on split halves of the first half of
        // each head (8 of 16; Phi-2's are 32 of 80), a parallel residual and an LM head of
        // its own with a bias; as many KV heads as query heads.
        ("phi2.gguf", SyntheticSpec { architecture: Architecture::Phi2, n_kv_heads: 4, rope_dims: Some(8), seed: 40, ..base.clone() }),
        // GPT-NeoX (Pythia): Phi-2's LayerNorms, biases, stacked Q/K/V and ungated GELU
        // feed-forward, RoPE on split halves of a quarter of each head (4 of 16; Pythia's 16 of
        // 64), an LM head of its own without a bias, and a parallel residual with a LayerNorm
        // for each sublayer (Pythia's `use_parallel_residual`); then the same block in GPT-2's
        // order (the flag false, as GPT-NeoX files may say); as many KV heads as query heads.
        (
            "gptneox.gguf",
            SyntheticSpec {
                architecture: Architecture::Gptneox,
                n_kv_heads: 4,
                rope_dims: Some(4),
                untied_output: true,
                seed: 41,
                ..base.clone()
            },
        ),
        // StarCoder: GPT-2's block with multi-query attention (one KV head), the LM head tied.
        ("starcoder.gguf", SyntheticSpec { architecture: Architecture::Starcoder, n_kv_heads: 1, seed: 43, ..base.clone() }),
        // StarCoder 2: GPT-2's LayerNorms, biases and ungated GELU feed-forward, W_q, W_k and
        // W_v apart with their biases, grouped-query attention (2 KV heads for 4) and RoPE on
        // split halves, an LM head of its own.
        (
            "starcoder2.gguf",
            SyntheticSpec { architecture: Architecture::Starcoder2, rope_base: 100_000.0, untied_output: true, seed: 44, ..base.clone() },
        ),
        // BLOOM: GPT-2's LayerNorms, biases, stacked Q/K/V and ungated GELU feed-forward, a
        // LayerNorm on the embedding, no positions but ALiBi; six heads (not a power of two,
        // so two take the slopes between the first four's), as many KV heads, the LM head tied.
        ("bloom.gguf", SyntheticSpec { architecture: Architecture::Bloom, dim: 96, n_heads: 6, n_kv_heads: 6, seed: 45, ..base.clone() }),
        // Arcee's AFM: llama's block with an ungated feed-forward, W_down relu(W_up x)^2, no
        // biases; the LM head tied.
        ("arcee.gguf", SyntheticSpec { architecture: Architecture::Arcee, seed: 46, ..base.clone() }),
        // Ministral 3: llama's block with YaRN (factor 4 over an original 4096) whose
        // magnitude correction its log multiplier of 1 cancels, and Llama 4's attention
        // temperature (0.1), which scales no query below the original context; the LM head
        // tied.
        (
            "mistral3.gguf",
            SyntheticSpec {
                architecture: Architecture::Mistral3,
                rope_yarn: Some(Yarn { log_multiplier: 1.0, ..YARN }),
                attn_temperature_scale: Some(0.1),
                seed: 48,
                ..base.clone()
            },
        ),
        // Nemotron: LayerNorms, RoPE on split halves of the first half of each head (8 of 16,
        // as Nemotron-Mini's 64 of 128), Arcee's ungated squared-ReLU feed-forward, an LM head
        // of its own (llama.cpp requires it).
        (
            "nemotron.gguf",
            SyntheticSpec { architecture: Architecture::Nemotron, rope_dims: Some(8), untied_output: true, seed: 47, ..base.clone() },
        ),
        // Command R: a parallel residual whose feed-forward reads the attention's LayerNorm (no
        // biases in either), llama's gated SiLU feed-forward, adjacent RoPE pairs, the LM head
        // tied (llama.cpp reads no other) and the logits multiplied by 0.3.
        ("command-r.gguf", SyntheticSpec { architecture: Architecture::CommandR, logit_scale: Some(0.3), seed: 49, ..base.clone() }),
        // Cohere2: Command R's block, the first three of every four layers sliding over a
        // window (5 positions here) turned by RoPE, the fourth attending over every position
        // without RoPE (llama.cpp's default pattern, not written), the logits times 0.7.
        (
            "cohere2.gguf",
            SyntheticSpec {
                architecture: Architecture::Cohere2,
                n_layers: 4,
                sliding_window: Some(5),
                logit_scale: Some(0.7),
                seed: 50,
                ..base.clone()
            },
        ),
        // OLMo 1: llama's block with non-parametric LayerNorms (no norm tensor at all) and
        // adjacent RoPE pairs, an LM head of its own (OLMo 7B's; OLMo 1B's is tied).
        ("olmo.gguf", SyntheticSpec { architecture: Architecture::Olmo, untied_output: true, seed: 51, ..base.clone() }),
        // OLMo 1.7: OLMo 1's block with every q, k and v value clamped to [-c, c] (its own c
        // is 8; 0.5 here, where these weights' projections reach about 1, so many values are
        // clamped); tied head.
        ("olmo-1.7.gguf", SyntheticSpec { architecture: Architecture::Olmo, clamp_kqv: Some(0.5), seed: 52, ..base.clone() }),
        // Hunyuan dense: llama's block with each head's q and k RMS-normed after RoPE on split
        // halves, an LM head of its own (Hunyuan 7B's; the smaller ones' is tied), and an NTK
        // alpha of 3 scaling the RoPE base (its dense files carry the base already scaled;
        // llama.cpp scales it where a file names one).
        (
            "hunyuan-dense.gguf",
            SyntheticSpec {
                architecture: Architecture::HunyuanDense,
                untied_output: true,
                rope_alpha: Some(3.0),
                seed: 53,
                ..base.clone()
            },
        ),
        // Qwen2-VL's language model on text: Qwen2's block with multimodal RoPE whose fourth
        // stream (position 0 for text) owns pair 6 of each head's 8, pair 7 wrapping back to
        // time's section; RoPE base 10, so the still pair would have turned by radians over
        // the fixture's positions; tied head. llama.cpp's qwen2vl reads no RMS epsilon (its
        // per-family loader lost the fall-through to qwen2's that read it) and norms with 0;
        // tokenscope reads the file's, so this file's is 1e-30, which is 0 at these sizes.
        (
            "qwen2vl.gguf",
            SyntheticSpec {
                architecture: Architecture::Qwen2vl,
                rope_base: 10.0,
                rope_sections: Some([2, 2, 2, 1]),
                norm_eps: 1e-30,
                seed: 54,
                ..base.clone()
            },
        ),
        // GLM-4.1V's language model on text: GLM-4's block with RoPE on the first 8 of each
        // head's 16 elements turned by multimodal RoPE (sections [2, 1, 1, 0] over its 4 pairs,
        // as [8, 12, 12, 0] over 32), which turns split halves where GLM-4's own turns adjacent
        // pairs; Q/K/V biases, tied head.
        (
            "glm4v.gguf",
            SyntheticSpec {
                architecture: Architecture::Glm4,
                rope_dims: Some(8),
                qkv_bias: true,
                rope_sections: Some([2, 1, 1, 0]),
                seed: 56,
                ..base.clone()
            },
        ),
        // ChatGLM (GLM-4 9B Chat's files): GLM-4's block without post norms, RoPE on the first
        // 8 of each head's 16 elements in adjacent pairs, W_q, W_k and W_v stacked with their
        // stacked bias, the gate and up projections stacked; an LM head of its own.
        (
            "chatglm.gguf",
            SyntheticSpec {
                architecture: Architecture::Chatglm,
                rope_dims: Some(8),
                qkv_bias: true,
                untied_output: true,
                seed: 57,
                ..base.clone()
            },
        ),
        // Maincoder: Hunyuan dense's block (each head's q and k RMS-normed after RoPE) with RoPE
        // on adjacent pairs; tied head.
        ("maincoder.gguf", SyntheticSpec { architecture: Architecture::Maincoder, seed: 58, ..base.clone() }),
        // Refact: llama's block with one key/value head, as its converter writes it, and
        // BLOOM's ALiBi in place of RoPE; eight heads, so the slopes run from 1/2 to 1/256.
        ("refact.gguf", SyntheticSpec { architecture: Architecture::Refact, n_heads: 8, n_kv_heads: 1, seed: 60, ..base.clone() }),
        // Falcon 7B: a parallel residual whose feed-forward reads the attention's LayerNorm,
        // W_q, W_k and W_v stacked over one key/value head, RoPE on split halves, an ungated
        // GELU feed-forward, no bias on any matrix, an LM head of its own; four layers.
        (
            "falcon.gguf",
            SyntheticSpec { architecture: Architecture::Falcon, n_layers: 4, n_kv_heads: 1, untied_output: true, seed: 61, ..base.clone() },
        ),
        // Falcon 40B: the same block with two norms, `attn_norm_2` before the attention and
        // `attn_norm` before the feed-forward, grouped-query attention, tied head.
        (
            "falcon-40b.gguf",
            SyntheticSpec { architecture: Architecture::Falcon, n_layers: 4, falcon_40b_norms: true, seed: 62, ..base.clone() },
        ),
        // MPT: a sequential block of LayerNorms without biases, W_q, W_k and W_v stacked
        // (one key/value head a query head, MPT-7B's), ALiBi of the file's largest bias 8 in
        // place of positions, every q, k and v value clamped to [-0.5, 0.5] (MPT's
        // `clamp_qkv`, here low enough to bite), an ungated GELU feed-forward, no matrix
        // biases, tied head; four layers.
        (
            "mpt.gguf",
            SyntheticSpec {
                architecture: Architecture::Mpt,
                n_layers: 4,
                n_kv_heads: 4,
                alibi_max_bias: Some(8.0),
                clamp_kqv: Some(0.5),
                seed: 63,
                ..base.clone()
            },
        ),
        // Baichuan 7B: llama's block in a file of its 32 blocks (narrow, dim 32 in four heads
        // of 8, to keep them small), which llama.cpp turns by RoPE; an LM head of its own, as
        // llama.cpp requires.
        (
            "baichuan-7b.gguf",
            SyntheticSpec {
                architecture: Architecture::Baichuan,
                n_layers: 32,
                dim: 32,
                ffn_dim: 48,
                n_kv_heads: 4,
                untied_output: true,
                seed: 64,
                ..base.clone()
            },
        ),
        // Baichuan 13B: the same block in a file of its 40 blocks, which llama.cpp biases by
        // BLOOM's ALiBi in place of RoPE.
        (
            "baichuan-13b.gguf",
            SyntheticSpec {
                architecture: Architecture::Baichuan,
                n_layers: 40,
                dim: 32,
                ffn_dim: 48,
                n_kv_heads: 4,
                untied_output: true,
                seed: 65,
                ..base.clone()
            },
        ),
        // Orion: llama's block with biased LayerNorms for its RMSNorms, RoPE on split halves
        // over whole heads, no Q/K/V biases; an LM head of its own, as llama.cpp requires.
        ("orion.gguf", SyntheticSpec { architecture: Architecture::Orion, untied_output: true, seed: 66, ..base.clone() }),
        // XVERSE: llama's block under its own name (RoPE on adjacent pairs); an LM head of its
        // own, as llama.cpp requires.
        ("xverse.gguf", SyntheticSpec { architecture: Architecture::Xverse, untied_output: true, seed: 67, ..base.clone() }),
        // PLaMo: a parallel residual, one RMSNorm read by the attention and the SwiGLU
        // feed-forward, RoPE on split halves; an LM head of its own, as llama.cpp requires.
        ("plamo.gguf", SyntheticSpec { architecture: Architecture::Plamo, untied_output: true, seed: 68, ..base.clone() }),
        // CodeShell: StarCoder's block (biased LayerNorms, W_q, W_k and W_v stacked with a
        // bias, every other matrix biased, an ungated GELU feed-forward) with grouped-query
        // attention and RoPE on split halves for positions, whose linear scaling by 1 its
        // converter always writes; an LM head of its own, as its converter writes one.
        (
            "codeshell.gguf",
            SyntheticSpec {
                architecture: Architecture::Codeshell,
                rope_linear_scale: Some(1.0),
                untied_output: true,
                seed: 69,
                ..base.clone()
            },
        ),
        // Qwen 1: llama's block with W_q, W_k and W_v stacked with a bias (as many key/value
        // heads as query heads, as llama.cpp reads it), RoPE on split halves, its feed-forward
        // length written twice the projections' width, as its converter writes it; an LM
        // head of its own, as llama.cpp requires.
        (
            "qwen.gguf",
            SyntheticSpec {
                architecture: Architecture::Qwen,
                n_kv_heads: 4,
                qkv_bias: true,
                untied_output: true,
                seed: 70,
                ..base.clone()
            },
        ),
        // Seed-OSS: llama's block with Q/K/V biases, heads of 32 over a residual of 64 (as
        // its 80 of 128 over 5120), RoPE on split halves, the feed-forward's norm stored as
        // `post_attention_norm`; an LM head of its own.
        (
            "seed_oss.gguf",
            SyntheticSpec {
                architecture: Architecture::SeedOss,
                head_dim: Some(32),
                qkv_bias: true,
                untied_output: true,
                seed: 71,
                ..base.clone()
            },
        ),
        // BitNet b1.58: llama's block with RoPE on split halves, an RMSNorm on the attention's
        // output before the output projection and on the SwiGLU product before the down
        // projection; the LM head the embedding, as llama.cpp always reads it.
        ("bitnet.gguf", SyntheticSpec { architecture: Architecture::Bitnet, seed: 72, ..base.clone() }),
        // LFM2: a convolving layer, an attending one (Qwen3's, head norms before RoPE on split
        // halves), a convolving one: the last's convolution reads the first positions' gated
        // inputs from the cache across prefill and decode.
        ("lfm2.gguf", SyntheticSpec { architecture: Architecture::Lfm2, n_layers: 3, conv_layers: vec![0, 2], seed: 73, ..base.clone() }),
        // Granite 4.0 H: a Mamba-2 layer, an attending one without RoPE (the H models' NoPE),
        // a Mamba-2 one, two groups of four heads, Granite's four scales; tied head. The
        // last layer's convolution and state carry the first positions across prefill and
        // decode.
        ("granitehybrid.gguf", SyntheticSpec { seed: 82, ..base.clone().granite_4_h() }),
        // Granite 4.0 H Tiny's and Small's feed-forward: 4 experts of width 32, 2 picked for
        // each token and renormalized, beside a shared expert of width 48 every token runs,
        // in each of the same three layers.
        (
            "granitehybrid-moe.gguf",
            SyntheticSpec { ffn_dim: 32, experts: Some([4, 2]), shared_expert: Some(48), seed: 83, ..base.clone().granite_4_h() },
        ),
        // Qwen3-MoE: Qwen3's attention (heads of 32, head norms before RoPE on split halves)
        // and in each layer 8 experts of width 32, 3 picked for each token, their weights
        // renormalized; untied head.
        (
            "qwen3moe.gguf",
            SyntheticSpec {
                architecture: Architecture::Qwen3moe,
                head_dim: Some(32),
                ffn_dim: 32,
                experts: Some([8, 3]),
                untied_output: true,
                seed: 75,
                ..base.clone()
            },
        ),
        // Mixtral: a llama file naming 4 experts, 2 picked for each token, their weights
        // renormalized; tied head.
        ("llama-moe.gguf", SyntheticSpec { experts: Some([4, 2]), seed: 76, ..base.clone() }),
        // Granite MoE: Granite 3's block and scales (its 1B-A400M's residual scale, 0.22) with
        // 6 experts of width 32 in each layer, 2 picked for each token, renormalized; tied head.
        (
            "granitemoe.gguf",
            SyntheticSpec {
                architecture: Architecture::Granitemoe,
                ffn_dim: 32,
                granite_scales: Some([12.0, 0.22, 0.1, 8.0]),
                experts: Some([6, 2]),
                seed: 80,
                ..base.clone()
            },
        ),
        // OLMoE: llama's block with q and k normed whole before RoPE on split halves, 8 experts
        // of width 32 in each layer, 3 picked for each token, their weights not renormalized;
        // an LM head of its own (its files' always), as many key/value heads as query heads.
        (
            "olmoe.gguf",
            SyntheticSpec {
                architecture: Architecture::Olmoe,
                n_kv_heads: 4,
                ffn_dim: 32,
                experts: Some([8, 3]),
                untied_output: true,
                seed: 81,
                ..base.clone()
            },
        ),
        // Qwen3-VL's language model on text: Qwen3's block with interleaved multimodal RoPE in
        // its real files' shape (sections [8, 4, 4, 0] over 16 pairs, as [24, 20, 20, 0] over
        // 64), whose interleave leaves pairs 13 and 14 to the fourth stream, still (Qwen3-VL's
        // 61 and 62); RoPE base 10; untied head.
        (
            "qwen3vl.gguf",
            SyntheticSpec {
                architecture: Architecture::Qwen3vl,
                head_dim: Some(32),
                rope_base: 10.0,
                untied_output: true,
                seed: 55,
                ..base.clone()
            },
        ),
        (
            "gptneox-sequential.gguf",
            SyntheticSpec {
                architecture: Architecture::Gptneox,
                n_kv_heads: 4,
                rope_dims: Some(4),
                untied_output: true,
                parallel_residual: false,
                seed: 42,
                ..base.clone()
            },
        ),
        // EXAONE 4 32B's sliding layers: llama.cpp knows the 32B by its 64 blocks, whose first
        // three of every four slide over a window (5 positions here, written out a flag a
        // layer) turned by RoPE, the fourth attending over every position without RoPE;
        // narrow (dim 32, four query heads of 8 over two KV heads) to keep 64 blocks small.
        (
            "exaone4-32b-sliding.gguf",
            SyntheticSpec {
                architecture: Architecture::Exaone4,
                n_layers: 64,
                dim: 32,
                ffn_dim: 32,
                sliding_window: Some(5),
                sliding_pattern_flags: true,
                untied_output: true,
                seed: 31,
                ..base.clone()
            },
        ),
        // YaRN on a qwen3 (Qwen3's 128K files): factor 4 over an original 4096, every pair's
        // frequency a blend by the ramp, every cosine and sine times 1 + 0.1 ln 4, head
        // norms and split halves as qwen3.gguf; here with an attention factor of 1.1 too.
        (
            "qwen3-yarn.gguf",
            SyntheticSpec {
                architecture: Architecture::Qwen3,
                head_dim: Some(32),
                untied_output: true,
                rope_yarn: Some(Yarn { attn_factor: 1.1, ..YARN }),
                seed: 28,
                ..base.clone()
            },
        ),
        // Phi-3: W_q, W_k and W_v in one attn_qkv tensor, the gate's rows ahead of the up
        // projection's in ffn_up, RoPE on split halves, an LM head of its own.
        ("phi3.gguf", SyntheticSpec { architecture: Architecture::Phi3, untied_output: true, seed: 17, ..base.clone() }),
        // Phi-3.5's LongRoPE: short and long per-pair factors, every cosine and sine times the
        // attention factor; the contexts of 64 (ours) and 256 (llama.cpp's, its least) are
        // within an original 512 (the short factors) and past an original 32 (the long ones).
        ("phi3-longrope-short.gguf", SyntheticSpec { longrope_original_context: Some(512), seed: 18, ..phi3.clone() }),
        ("phi3-longrope-long.gguf", SyntheticSpec { longrope_original_context: Some(32), seed: 19, ..phi3.clone() }),
        // Phi-4-mini's shape: RoPE on the first three quarters of each head (12 of 16, as its
        // 96 of 128), LongRoPE's factors one per turned pair, past the original context, and
        // the LM head tied to the embedding.
        (
            "phi4-mini-partial-rope.gguf",
            SyntheticSpec { rope_dims: Some(12), longrope_original_context: Some(32), untied_output: false, seed: 20, ..phi3 },
        ),
    ]
}

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: architecture_models DIR");
        std::process::exit(2);
    };
    for (name, spec) in models() {
        let path = std::path::Path::new(&dir).join(name);
        let bytes = SyntheticModel::new(&spec).and_then(|m| m.to_bytes());
        match bytes.map(|b| std::fs::write(&path, b)) {
            Ok(Ok(())) => println!("wrote {}", path.display()),
            Ok(Err(e)) => {
                eprintln!("cannot write {}: {e}", path.display());
                std::process::exit(1);
            }
            Err(e) => {
                eprintln!("cannot build {name}: {e}");
                std::process::exit(1);
            }
        }
    }
}

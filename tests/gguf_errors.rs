//! Bad model files give typed, clear errors (never a panic); every supported weight type loads.

use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use tokenscope::model::synthetic::{SyntheticModel, SyntheticSpec};
use tokenscope::model::Model;
use tokenscope::{Error, ModelError};

fn read(bytes: Vec<u8>) -> Result<Model, Error> {
    Model::read(&mut std::io::Cursor::new(bytes), &mut |_, _| {})
}

fn synthetic() -> SyntheticModel {
    SyntheticModel::new(&SyntheticSpec::default()).expect("synthetic model")
}

fn model_error(r: Result<Model, Error>) -> ModelError {
    match r {
        Err(Error::Model(e)) => e,
        Err(other) => panic!("expected a model error, got {other}"),
        Ok(_) => panic!("expected an error, the model loaded"),
    }
}

/// The error a model's file is refused with, which must name metadata key `key`, in words.
fn refused(m: SyntheticModel, key: &str) -> String {
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::Metadata { key: ref k, .. } if k == key), "{e}");
    e.to_string()
}

#[test]
fn the_synthetic_model_loads_with_its_configuration() {
    let m = read(synthetic().to_bytes().expect("bytes")).expect("loads");
    assert_eq!((m.config.n_layers, m.config.dim, m.config.n_heads, m.config.n_kv_heads), (2, 64, 4, 2));
    assert_eq!(m.config.head_dim, 16);
    assert_eq!(m.config.vocab_size, m.tokenizer.vocab_size());
}

#[test]
fn every_supported_weight_type_loads() {
    for t in tokenscope::gguf::SUPPORTED_TYPES {
        // K-quant blocks hold 256 weights, so rows are at least that wide.
        let (dim, ffn_dim) = if t.block_size() == 256 { (256, 512) } else { (64, 96) };
        let spec = SyntheticSpec { weight_type: t, embedding_type: t, dim, ffn_dim, ..SyntheticSpec::default() };
        let bytes = SyntheticModel::new(&spec).expect("model").to_bytes().expect("bytes");
        let m = read(bytes).unwrap_or_else(|e| panic!("{t:?}: {e}"));
        assert_eq!(m.weights.layers.collect_all().expect("blocks")[0].attention().expect("attention").wq.dtype(), t);
    }
}

#[test]
fn foreign_bytes_are_not_gguf() {
    for bytes in [b"PK\x03\x04 a zip file".to_vec(), b"{\"json\": true}".to_vec(), Vec::new(), b"GG".to_vec()] {
        let e = model_error(read(bytes));
        assert!(matches!(e, ModelError::NotGguf { .. }), "{e}");
        assert!(e.to_string().contains("not a GGUF file"));
    }
}

#[test]
fn truncated_files_say_so_wherever_they_are_cut() {
    let bytes = synthetic().to_bytes().expect("bytes");
    for cut in [8, 30, 200, bytes.len() / 3, bytes.len() - 1] {
        let e = model_error(read(bytes[..cut].to_vec()));
        assert!(matches!(e, ModelError::Truncated { .. } | ModelError::Malformed(_)), "cut at {cut}: {e}");
        if cut > bytes.len() / 2 {
            assert!(matches!(e, ModelError::Truncated { .. }), "cut at {cut}: {e}");
            assert!(e.to_string().contains("truncated"), "{e}");
        }
    }
}

#[test]
fn other_architectures_are_refused() {
    let mut m = synthetic();
    m.set_meta("general.architecture", Value::String("rwkv6".into()));
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::UnsupportedArchitecture { ref name, .. } if name == "rwkv6"), "{e}");
    assert!(e.to_string().contains("llama, qwen2, qwen3"), "{e}");
    // A vision model's projector (mmproj) file, dropped in place of its language model.
    m.set_meta("general.architecture", Value::String("clip".into()));
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::Projector), "{e}");
    assert!(e.to_string().contains("an mmproj file), not a language model"), "{e}");
}

#[test]
fn unsupported_tensor_types_are_named_with_what_is_supported() {
    let spec = SyntheticSpec { dim: 256, ffn_dim: 512, ..SyntheticSpec::default() };
    let mut m = SyntheticModel::new(&spec).expect("model");
    let t = Tensor::zeros((256, 256), candle_core::DType::F32, &Device::Cpu).expect("zeros");
    m.set_tensor("blk.1.attn_q.weight", QTensor::quantize(&t, GgmlDType::Q8K).expect("q8_k"));
    let e = model_error(read(m.to_bytes().expect("bytes")));
    let message = e.to_string();
    match e {
        ModelError::UnsupportedTensorType { ref name, ref dtype, ref supported } => {
            assert_eq!(name, "blk.1.attn_q.weight");
            assert_eq!(dtype, "Q8_K");
            for t in ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "F16", "BF16", "F32"] {
                assert!(supported.split(", ").any(|s| s == t), "{t} missing from {supported}");
            }
            assert!(message.contains("Q8_K") && message.contains(supported.as_str()), "{message}");
        }
        other => panic!("{other}"),
    }
}

/// `bytes` (a GGUF file) with tensor `name`'s type id set to `id` in its directory entry
/// (the name's length and bytes, the rank, a u64 per dimension, then the type).
fn with_type_id(mut bytes: Vec<u8>, name: &str, id: u32) -> Vec<u8> {
    let mut entry = (name.len() as u64).to_le_bytes().to_vec();
    entry.extend(name.as_bytes());
    let at = bytes.windows(entry.len()).position(|w| w == entry.as_slice()).expect("the tensor's entry") + entry.len();
    let rank = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("rank")) as usize;
    let ty = at + 4 + 8 * rank;
    bytes[ty..ty + 4].copy_from_slice(&id.to_le_bytes());
    bytes
}

#[test]
fn types_ggml_has_but_the_engine_cannot_read_are_named_not_called_malformed() {
    let bytes = synthetic().to_bytes().expect("bytes");
    // MXFP4 (39, gpt-oss's experts), NVFP4 (40) and I8 (24, an integer type no model's
    // weights use).
    for (id, dtype) in [(39, "MXFP4"), (40, "NVFP4"), (24, "I8")] {
        let e = model_error(read(with_type_id(bytes.clone(), "blk.0.ffn_down.weight", id)));
        let message = e.to_string();
        match e {
            ModelError::UnsupportedTensorType { name, dtype: got, .. } => {
                assert_eq!((name.as_str(), got.as_str()), ("blk.0.ffn_down.weight", dtype));
                assert!(
                    message.contains("supported: Q4_0")
                        && message
                            .contains("IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S, IQ2_XXS, IQ1_S, IQ2_XS, IQ2_S, IQ1_M, TQ1_0, TQ2_0, Q2_0, Q1_0"),
                    "{message}"
                );
            }
            other => panic!("type {id}: {other}"),
        }
    }
    // An id ggml does not name (4, once Q4_2, was retired) is a malformed file.
    let e = model_error(read(with_type_id(bytes, "blk.0.ffn_down.weight", 4)));
    assert!(matches!(e, ModelError::Malformed(ref m) if m.contains("type id 4, which is no GGML type")), "{e}");
}

#[test]
fn rope_variants_the_engine_does_not_compute_are_refused_by_name() {
    let factors = |values: Vec<f32>| {
        let n = values.len();
        QTensor::quantize(&Tensor::from_vec(values, n, &Device::Cpu).expect("factors"), GgmlDType::F32).expect("f32")
    };
    let mut m = synthetic();
    m.set_meta("llama.rope.scaling.type", Value::String("longrope".into()));
    assert!(refused(m, "llama.rope.scaling.type").contains("does not run"));
    // YaRN with its factor; its ramp's keys as llama.cpp takes them for these architectures
    // (betas of 32 and 1, the whole ramp), DeepSeek's log multiplier refused.
    let yarn = || {
        let mut m = synthetic();
        m.set_meta("llama.rope.scaling.type", Value::String("yarn".into()));
        m.set_meta("llama.rope.scaling.factor", Value::F32(4.0));
        m
    };
    let mut m = yarn();
    m.remove_meta("llama.rope.scaling.factor");
    assert!(refused(m, "llama.rope.scaling.factor").contains("missing"));
    for (name, bad) in [
        ("yarn_beta_fast", 24.0),
        ("yarn_beta_slow", 2.0),
        ("yarn_ext_factor", 0.5),
        ("yarn_log_multiplier", 0.1),
        ("attn_factor", f32::NAN),
        ("attn_factor", 0.0),
    ] {
        let name = format!("llama.rope.scaling.{name}");
        let mut m = yarn();
        m.set_meta(&name, Value::F32(bad));
        let e = refused(m, &name);
        assert!(e.contains("does not run") || e.contains("above 0"), "{name} {bad}: {e}");
    }
    let mut m = yarn();
    m.set_meta("llama.rope.scaling.original_context_length", Value::U32(0));
    assert!(refused(m, "llama.rope.scaling.original_context_length").contains("trained at"));
    let mut m = yarn();
    for (name, value) in [("yarn_beta_fast", 32.0), ("yarn_beta_slow", 1.0), ("yarn_ext_factor", 1.0), ("yarn_log_multiplier", 0.0)] {
        m.set_meta(&format!("llama.rope.scaling.{name}"), Value::F32(value));
    }
    let cfg = read(m.to_bytes().expect("bytes")).expect("YaRN with llama.cpp's own ramp loads").config;
    let yarn = cfg.rope_yarn.expect("YaRN");
    assert_eq!((yarn.factor, yarn.original_context, yarn.attn_factor, cfg.rope_scale), (4.0, 64, 1.0, 1.0));
    let mut m = synthetic();
    m.set_meta("llama.rope.scaling.type", Value::String("linear".into()));
    assert!(refused(m, "llama.rope.scaling.factor").contains("missing"));
    let mut m = synthetic();
    m.set_meta("llama.rope.scaling.type", Value::String("linear".into()));
    m.set_meta("llama.rope.scaling.factor", Value::F32(f32::NAN));
    assert!(refused(m, "llama.rope.scaling.factor").contains("from 1 to 1024"));
    // RoPE on part of each head (heads of 16 here): never in a llama file (llama.cpp refuses
    // it), elsewhere an even count up to the head width.
    let mut m = synthetic();
    m.set_meta("llama.rope.dimension_count", Value::U32(8));
    assert!(refused(m, "llama.rope.dimension_count").contains("turns whole heads"));
    let phi3 = || {
        let spec = SyntheticSpec { architecture: tokenscope::model::Architecture::Phi3, ..SyntheticSpec::default() };
        SyntheticModel::new(&spec).expect("phi3")
    };
    for count in [0, 7, 18] {
        let mut m = phi3();
        m.set_meta("phi3.rope.dimension_count", Value::U32(count));
        assert!(refused(m, "phi3.rope.dimension_count").contains("must be even, from 2 to the head width 16"), "{count}");
    }
    let mut m = synthetic();
    m.set_meta("llama.attention.value_length", Value::U32(8));
    assert!(refused(m, "llama.attention.value_length").contains("does not run"));
    // Llama 3's factors: one per pair (heads of 16 here), each finite and above 0.
    let mut m = synthetic();
    m.set_tensor("rope_freqs.weight", factors(vec![1.0; 5]));
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::ShapeMismatch { ref name, .. } if name == "rope_freqs.weight"), "{e}");
    let mut m = synthetic();
    m.set_tensor("rope_freqs.weight", factors(vec![1.0, 2.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]));
    assert!(refused(m, "rope_freqs.weight").contains("above 0"));
    // What is computed loads: unscaled RoPE said out loud, linear scaling, Llama 3's factors.
    let mut m = synthetic();
    m.set_meta("llama.rope.scaling.type", Value::String("none".into()));
    m.set_meta("llama.rope.dimension_count", Value::U32(16));
    read(m.to_bytes().expect("bytes")).expect("plain RoPE loads");
    let mut m = synthetic();
    m.set_meta("llama.rope.scaling.type", Value::String("linear".into()));
    m.set_meta("llama.rope.scaling.factor", Value::F32(8.0));
    assert_eq!(read(m.to_bytes().expect("bytes")).expect("linear RoPE loads").config.rope_scale, 8.0);
    let mut m = synthetic();
    m.set_tensor("rope_freqs.weight", factors(vec![1.0, 1.0, 1.0, 1.0, 2.0, 4.0, 8.0, 8.0]));
    read(m.to_bytes().expect("bytes")).expect("Llama 3 RoPE loads");
    // On 8 of 16 dimensions, RoPE factors are one per turned pair.
    let mut m = phi3();
    m.set_meta("phi3.rope.dimension_count", Value::U32(8));
    m.set_tensor("rope_freqs.weight", factors(vec![1.0; 8]));
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::ShapeMismatch { ref name, .. } if name == "rope_freqs.weight"), "{e}");
    let mut m = phi3();
    m.set_meta("phi3.rope.dimension_count", Value::U32(8));
    m.set_tensor("rope_freqs.weight", factors(vec![1.0, 2.0, 4.0, 8.0]));
    assert_eq!(read(m.to_bytes().expect("bytes")).expect("partial RoPE loads").config.rope_dims, 8);
}

#[test]
fn each_architecture_needs_its_own_tensors() {
    use tokenscope::model::Architecture;
    for (architecture, tensor) in [
        (Architecture::Qwen2, "blk.1.attn_k.bias"),
        (Architecture::Qwen3, "blk.0.attn_q_norm.weight"),
        (Architecture::Gemma3, "blk.1.post_ffw_norm.weight"),
        (Architecture::Gemma3, "blk.0.attn_k_norm.weight"),
        (Architecture::Olmo2, "blk.1.attn_q_norm.weight"),
        (Architecture::Olmo2, "blk.0.post_attention_norm.weight"),
        // StableLM 2 12B's parallel residual (no norm before the feed-forward), and a
        // LayerNorm without its bias.
        (Architecture::Stablelm, "blk.1.ffn_norm.weight"),
        (Architecture::Stablelm, "blk.0.attn_norm.bias"),
        (Architecture::Stablelm, "output_norm.bias"),
        // GPT-2's learned positions and biases; Phi-2's LM head, its bias and its biases.
        (Architecture::Gpt2, "position_embd.weight"),
        (Architecture::Gpt2, "blk.1.attn_qkv.bias"),
        (Architecture::Gpt2, "blk.0.attn_output.bias"),
        (Architecture::Gpt2, "blk.1.ffn_up.bias"),
        (Architecture::Phi2, "output.weight"),
        (Architecture::Phi2, "output.bias"),
        (Architecture::Phi2, "blk.0.ffn_down.bias"),
    ] {
        let mut m = SyntheticModel::new(&SyntheticSpec { architecture, ..SyntheticSpec::default() }).expect("model");
        read(m.to_bytes().expect("bytes")).expect("the whole model loads");
        m.remove_tensor(tensor);
        let e = model_error(read(m.to_bytes().expect("bytes")));
        assert!(matches!(e, ModelError::MissingTensor(ref n) if n == tensor), "{architecture:?}: {e}");
    }
    // Phi-2's W_q, W_k and W_v apart (as some converters write them): each with its bias.
    let spec = SyntheticSpec { architecture: Architecture::Phi2, n_kv_heads: 4, ..SyntheticSpec::default() };
    let mut m = SyntheticModel::new(&spec).expect("model");
    let matrix = |rows: usize, cols: usize| {
        let t = Tensor::from_vec(vec![0.25f32; rows * cols], (rows, cols), &Device::Cpu).expect("tensor");
        QTensor::quantize(&t, GgmlDType::F32).expect("f32")
    };
    let bias = |rows: usize| QTensor::quantize(&Tensor::from_vec(vec![0.5f32; rows], rows, &Device::Cpu).expect("tensor"), GgmlDType::F32);
    for i in 0..spec.n_layers {
        m.remove_tensor(&format!("blk.{i}.attn_qkv.weight"));
        m.remove_tensor(&format!("blk.{i}.attn_qkv.bias"));
        for part in ["attn_q", "attn_k", "attn_v"] {
            m.set_tensor(&format!("blk.{i}.{part}.weight"), matrix(spec.dim, spec.dim));
            m.set_tensor(&format!("blk.{i}.{part}.bias"), bias(spec.dim).expect("f32"));
        }
    }
    let apart = read(m.to_bytes().expect("bytes")).expect("Phi-2 with Q, K and V apart loads");
    assert!(apart
        .weights
        .layers
        .collect_all()
        .expect("blocks")
        .iter()
        .all(|l| l.attention().and_then(|a| a.qkv_bias.as_ref()).is_some_and(|b| b.v == [0.5; 64])));
    m.remove_tensor("blk.1.attn_k.bias");
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::MissingTensor(ref n) if n == "blk.1.attn_k.bias"), "{e}");
    // A llama file with half a set of biases is refused too; a whole set is used.
    let mut m = SyntheticModel::new(&SyntheticSpec { architecture: Architecture::Qwen2, ..SyntheticSpec::default() }).expect("model");
    m.set_meta("general.architecture", Value::String("llama".into()));
    for (k, v) in m.metadata.clone() {
        if let Some(rest) = k.strip_prefix("qwen2.") {
            m.set_meta(&format!("llama.{rest}"), v);
        }
    }
    let with_biases = read(m.to_bytes().expect("bytes")).expect("a llama file with biases loads");
    assert!(with_biases
        .weights
        .layers
        .collect_all()
        .expect("blocks")
        .iter()
        .all(|l| l.attention().and_then(|a| a.qkv_bias.as_ref()).is_some()));
    m.remove_tensor("blk.0.attn_v.bias");
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::MissingTensor(ref n) if n == "blk.0.attn_v.bias"), "{e}");
}

#[test]
fn gemma3_metadata_the_engine_does_not_compute_is_refused_by_key() {
    use tokenscope::model::Architecture;
    let gemma =
        || SyntheticModel::new(&SyntheticSpec { architecture: Architecture::Gemma3, sliding_window: Some(4), ..SyntheticSpec::default() });
    // Softcapped logits or attention scores (some Gemma 3 derivatives'): refused, as tokenscope
    // caps gemma2's alone and would compute them uncapped; a cap of 0 is none.
    for key in ["gemma3.final_logit_softcapping", "gemma3.attn_logit_softcapping"] {
        let mut m = gemma().expect("model");
        m.set_meta(key, Value::F32(30.0));
        assert!(refused(m, key).contains("softcaps gemma2 alone"));
        let mut m = gemma().expect("model");
        m.set_meta(key, Value::F32(0.0));
        read(m.to_bytes().expect("bytes")).expect("no cap loads");
    }
    // Gemma 3 27B's block count: its attention scale, 1 / sqrt(dim / heads) (64 / 4 here,
    // heads of 32), where any other Gemma 3 takes 1 / sqrt(head width), as llama.cpp does.
    let scale = |n_layers| {
        let spec = SyntheticSpec { architecture: Architecture::Gemma3, n_layers, head_dim: Some(32), ..SyntheticSpec::default() };
        let m = SyntheticModel::new(&spec).expect("model");
        read(m.to_bytes().expect("bytes")).expect("loads").config.attention_scale
    };
    assert_eq!((scale(62), scale(61)), (0.25, 1.0 / 32f32.sqrt()));
    // A window of 0 is no window; the window read is the file's.
    let mut m = gemma().expect("model");
    assert_eq!(read(m.to_bytes().expect("bytes")).expect("loads").config.sliding_window, Some(4));
    m.set_meta("gemma3.attention.sliding_window", Value::U32(0));
    assert_eq!(read(m.to_bytes().expect("bytes")).expect("loads").config.sliding_window, None);
}

#[test]
fn gemma2s_caps_and_window_are_the_files_or_llama_cpps_defaults() {
    use tokenscope::model::Architecture;
    let gemma2 = || SyntheticModel::new(&SyntheticSpec { architecture: Architecture::Gemma2, ..SyntheticSpec::default() }).expect("model");
    let config = |m: SyntheticModel| read(m.to_bytes().expect("bytes")).expect("loads").config;
    // A file silent on them: the model's own values, as llama.cpp takes them.
    let silent = config(gemma2());
    assert_eq!((silent.attn_softcap, silent.final_softcap, silent.sliding_window), (Some(50.0), Some(30.0), Some(4096)));
    let mut m = gemma2();
    m.set_meta("gemma2.attn_logit_softcapping", Value::F32(20.0));
    m.set_meta("gemma2.final_logit_softcapping", Value::F32(10.0));
    m.set_meta("gemma2.attention.sliding_window", Value::U32(8));
    let set = config(m);
    assert_eq!((set.attn_softcap, set.final_softcap, set.sliding_window), (Some(20.0), Some(10.0), Some(8)));
    // A cap that is no number above 0 is refused by its key.
    for (key, cap) in
        [("gemma2.attn_logit_softcapping", f32::NAN), ("gemma2.final_logit_softcapping", 0.0), ("gemma2.final_logit_softcapping", -3.0)]
    {
        let mut m = gemma2();
        m.set_meta(key, Value::F32(cap));
        let e = model_error(read(m.to_bytes().expect("bytes")));
        assert!(matches!(e, ModelError::Metadata { key: ref k, .. } if k == key) && e.to_string().contains("above 0"), "{key} {cap}: {e}");
    }
    // Gemma 2 27B's block count: its attention scale, as Gemma 3 27B's.
    let scale = |n_layers| {
        let spec = SyntheticSpec { architecture: Architecture::Gemma2, n_layers, head_dim: Some(32), ..SyntheticSpec::default() };
        config(SyntheticModel::new(&spec).expect("model")).attention_scale
    };
    assert_eq!((scale(46), scale(42)), (0.25, 1.0 / 32f32.sqrt()));
}

/// The error reading a small `architecture` model with an F32 tensor `name` of `len` values
/// `value` added to it.
fn with_extra_tensor(architecture: tokenscope::model::Architecture, name: &str, len: usize, value: f32) -> ModelError {
    let mut m = SyntheticModel::new(&SyntheticSpec { architecture, ..SyntheticSpec::default() }).expect("model");
    let t = Tensor::from_vec(vec![value; len], len, &Device::Cpu).expect("tensor");
    m.set_tensor(name, QTensor::quantize(&t, GgmlDType::F32).expect("F32"));
    model_error(read(m.to_bytes().expect("bytes")))
}

#[test]
fn a_bias_the_engine_would_leave_out_is_refused_by_name() {
    // Each bias llama.cpp adds where a file has one, which tokenscope does not: in a llama
    // file, and in Arcee's and Nemotron's (llama.cpp reads Nemotron's output and feed-forward
    // biases where they are).
    use tokenscope::model::Architecture;
    for architecture in [Architecture::Llama, Architecture::Arcee, Architecture::Nemotron] {
        for bias in tokenscope::model::weights::UNAPPLIED_BIASES {
            let name = format!("blk.1.{bias}");
            let e = with_extra_tensor(architecture, &name, 64, 0.0);
            assert!(matches!(e, ModelError::UnappliedTensor(ref n) if *n == name), "{architecture:?} {name}: {e}");
            assert!(e.to_string().contains("does not add it"), "{e}");
        }
    }
}

#[test]
fn head_norms_a_family_has_not_are_refused_by_name() {
    use tokenscope::model::Architecture;
    // StableLM 2 12B's LayerNorms of q and k (stablelm has no head norms), and head norms in a
    // llama file: refused rather than left out.
    // Command R+'s LayerNorms of q and k (command-r has no head norms) too.
    for architecture in [Architecture::Stablelm, Architecture::Llama, Architecture::CommandR] {
        for norm in tokenscope::model::weights::UNAPPLIED_HEAD_NORMS {
            let name = format!("blk.0.{norm}");
            let e = with_extra_tensor(architecture, &name, 16, 1.0);
            assert!(matches!(e, ModelError::UnappliedTensor(ref n) if *n == name), "{architecture:?} {name}: {e}");
        }
    }
    // Its epsilon under LayerNorm's key, range-checked as RMSNorm's is.
    let mut m = SyntheticModel::new(&SyntheticSpec { architecture: Architecture::Stablelm, ..SyntheticSpec::default() }).expect("model");
    m.set_meta("stablelm.attention.layer_norm_epsilon", Value::F32(0.0));
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::Metadata { ref key, .. } if key == "stablelm.attention.layer_norm_epsilon"), "{e}");
}

/// A maker of synthetic `architecture` files naming Granite's four scales, 12, 0.22, 0.1 and 8.
fn with_scales(architecture: tokenscope::model::Architecture) -> impl Fn() -> SyntheticModel {
    let spec = SyntheticSpec { architecture, granite_scales: Some([12.0, 0.22, 0.1, 8.0]), ..SyntheticSpec::default() };
    move || SyntheticModel::new(&spec).expect("model")
}

/// The configuration a file reads into.
fn config(m: SyntheticModel) -> Result<tokenscope::model::Config, Error> {
    read(m.to_bytes().expect("bytes")).map(|m| m.config)
}

#[test]
fn ministral_3_reads_its_log_multiplier_and_stops_where_its_temperature_would_start() {
    use tokenscope::model::rope::Yarn;
    use tokenscope::model::Architecture;
    let spec = |context_len, yarn: Option<Yarn>, temperature| SyntheticSpec {
        architecture: Architecture::Mistral3,
        context_len,
        rope_yarn: yarn,
        attn_temperature_scale: temperature,
        ..SyntheticSpec::default()
    };
    let yarn = Yarn { factor: 4.0, original_context: 32, attn_factor: 1.0, log_multiplier: 1.0 };
    // The log multiplier read (a llama file's is refused, above); its magnitude 1 (1 + 0.1 ln 4
    // divided by itself).
    let cfg = config(SyntheticModel::new(&spec(64, Some(yarn), None)).expect("model")).expect("loads");
    assert_eq!(cfg.rope_yarn.map(|y| (y.log_multiplier, y.magnitude())), Some((1.0, 1.0)));
    assert_eq!(cfg.context_len, 64, "no temperature: the file's context");
    // With the temperature, the context stops at YaRN's original context (32 of 64), or the
    // model's where it is shorter; without YaRN, at the model's own.
    let capped = |context_len, yarn| config(SyntheticModel::new(&spec(context_len, yarn, Some(0.1))).expect("model")).expect("loads");
    assert_eq!(capped(64, Some(yarn)).context_len, 32);
    assert_eq!(capped(16, Some(yarn)).context_len, 16);
    assert_eq!(capped(64, None).context_len, 64);
    // A negative multiplier, or a temperature that is not a number, is refused.
    let mut m = SyntheticModel::new(&spec(64, Some(yarn), None)).expect("model");
    m.set_meta("mistral3.rope.scaling.yarn_log_multiplier", Value::F32(-1.0));
    assert!(refused(m, "mistral3.rope.scaling.yarn_log_multiplier").contains("0 or above"));
    let mut m = SyntheticModel::new(&spec(64, Some(yarn), Some(0.1))).expect("model");
    m.set_meta("mistral3.attention.temperature_scale", Value::F32(f32::NAN));
    assert!(refused(m, "mistral3.attention.temperature_scale").contains("finite"));
    let mut m = SyntheticModel::new(&spec(64, None, Some(0.1))).expect("model");
    m.set_meta("mistral3.rope.scaling.original_context_length", Value::U32(0));
    assert!(refused(m, "mistral3.rope.scaling.original_context_length").contains("trained at"));
}

#[test]
fn granites_scales_are_read_as_llama_cpp_reads_them() {
    use tokenscope::model::Architecture;
    let granite = with_scales(Architecture::Granite);
    let c = config(granite()).expect("loads");
    // Its logits divided by 8: multiplied by 1 / 8, as llama.cpp computes them.
    assert_eq!((c.embedding_scale, c.residual_scale, c.attention_scale, c.logit_scale), (12.0, 0.22, 0.1, 0.125));
    // Missing or 0, the first three leave llama's block as it is; the logit scale is required.
    for key in ["granite.embedding_scale", "granite.residual_scale", "granite.attention.scale"] {
        let mut m = granite();
        m.remove_meta(key);
        let missing = config(m).expect("loads");
        let mut m = granite();
        m.set_meta(key, Value::F32(0.0));
        let zero = config(m).expect("loads");
        assert_eq!(missing, zero, "{key}");
        let neutral = (missing.embedding_scale, missing.residual_scale, missing.attention_scale);
        let want = match key {
            "granite.embedding_scale" => (1.0, 0.22, 0.1),
            "granite.residual_scale" => (12.0, 1.0, 0.1),
            _ => (12.0, 0.22, 0.25),
        };
        assert_eq!(neutral, want, "{key}");
    }
    let mut m = granite();
    m.remove_meta("granite.logit_scale");
    assert!(refused(m, "granite.logit_scale").contains("is missing"));
    for (key, bad) in [("granite.residual_scale", -0.5), ("granite.logit_scale", f32::INFINITY), ("granite.attention.scale", f32::NAN)] {
        let mut m = granite();
        m.set_meta(key, Value::F32(bad));
        assert!(refused(m, key).contains("above 0"), "{key} {bad}");
    }
    // RoPE turned off in every layer: refused rather than run with it.
    let mut m = granite();
    m.set_meta("granite.rope.scaling.finetuned", Value::Bool(false));
    assert!(refused(m, "granite.rope.scaling.finetuned").contains("turns RoPE off"));
    // Another architecture's file with Granite's keys: llama.cpp reads them for granite alone.
    let mut m = synthetic();
    m.set_meta("llama.logit_scale", Value::F32(8.0));
    assert_eq!(config(m).expect("loads").logit_scale, 1.0);
}

#[test]
fn cohere_files_are_read_as_llama_cpp_reads_them() {
    use tokenscope::model::Architecture;
    let cohere = |architecture, logit_scale| {
        let sliding_window = (architecture == Architecture::Cohere2).then_some(5);
        let spec = SyntheticSpec { architecture, n_layers: 4, sliding_window, logit_scale, ..SyntheticSpec::default() };
        SyntheticModel::new(&spec).expect("model")
    };
    // The logits multiplied by the file's scale; Command R's may be missing or 0 ("not set").
    let c = config(cohere(Architecture::CommandR, Some(0.3))).expect("loads");
    assert_eq!((c.logit_scale, c.parallel_residual, c.sliding_window), (0.3, true, None));
    assert_eq!(config(cohere(Architecture::CommandR, None)).expect("loads").logit_scale, 1.0);
    let mut m = cohere(Architecture::CommandR, None);
    m.set_meta("command-r.logit_scale", Value::F32(0.0));
    assert_eq!(config(m).expect("loads").logit_scale, 1.0);
    let mut m = cohere(Architecture::CommandR, Some(0.3));
    m.set_meta("command-r.logit_scale", Value::F32(-2.0));
    assert!(refused(m, "command-r.logit_scale").contains("above 0"));
    // LayerNorms without biases: held as zeros; the epsilon under LayerNorm's key.
    let m = read(cohere(Architecture::CommandR, None).to_bytes().expect("bytes")).expect("loads");
    assert_eq!(m.weights.output_norm.bias, Some(vec![0.0; 64]));
    let blocks = m.weights.layers.collect_all().expect("blocks");
    assert!(blocks.iter().all(|l| l.attn_norm.as_ref().is_some_and(|n| n.bias == Some(vec![0.0; 64])) && l.ffn_norm.is_none()));
    let mut m = cohere(Architecture::CommandR, None);
    m.set_meta("command-r.attention.layer_norm_epsilon", Value::F32(0.0));
    assert!(refused(m, "command-r.attention.layer_norm_epsilon").contains("between 0 and 1"));
    // Cohere2's scale and window are required; its first three of every four layers slide and
    // turn by RoPE, the fourth neither.
    let c = config(cohere(Architecture::Cohere2, Some(0.7))).expect("loads");
    assert_eq!((c.logit_scale, c.sliding_window), (0.7, Some(5)));
    let kinds: Vec<_> = (0..4).map(|l| (c.attended(l, 9), c.layer_rope(l))).collect();
    use tokenscope::model::LayerRope;
    let (window, all) = (5..10, 0..10);
    assert_eq!(
        kinds,
        [(window.clone(), LayerRope::Main), (window.clone(), LayerRope::Main), (window, LayerRope::Main), (all, LayerRope::Unrotated)]
    );
    assert!(refused(cohere(Architecture::Cohere2, None), "cohere2.logit_scale").contains("is missing, and a cohere2 model needs it"));
    let mut m = cohere(Architecture::Cohere2, Some(0.7));
    m.remove_meta("cohere2.attention.sliding_window");
    assert!(refused(m, "cohere2.attention.sliding_window").contains("missing"));
    let mut m = cohere(Architecture::Cohere2, Some(0.7));
    m.set_meta("cohere2.attention.sliding_window", Value::U32(0));
    assert!(refused(m, "cohere2.attention.sliding_window").contains("is 0"));
}

#[test]
fn mpts_alibi_clamp_and_tensors_are_read_as_llama_cpp_reads_them() {
    use tokenscope::model::Architecture;
    let mpt = |bias: Option<f32>| {
        let spec =
            SyntheticSpec { architecture: Architecture::Mpt, alibi_max_bias: bias, clamp_kqv: Some(6.0), ..SyntheticSpec::default() };
        SyntheticModel::new(&spec).expect("model")
    };
    // ALiBi's largest bias is the file's; 0 or no key is none (no positions at all, as
    // llama.cpp runs it); below 0 or NaN is refused by its key. No layer turns by RoPE.
    let cfg = config(mpt(Some(8.0))).expect("MPT-7B's shape loads");
    assert_eq!((cfg.alibi_max_bias, cfg.clamp_kqv), (Some(8.0), Some(6.0)));
    assert!((0..cfg.n_layers).all(|l| !Architecture::Mpt.rotates(l)));
    assert_eq!(config(mpt(None)).expect("no key loads").alibi_max_bias, None);
    assert_eq!(config(mpt(Some(0.0))).expect("a bias of 0 loads").alibi_max_bias, None);
    for bad in [-1.0, f32::NAN, f32::INFINITY] {
        assert!(refused(mpt(Some(bad)), "mpt.attention.max_alibi_bias").contains("largest bias"), "{bad}");
    }
    // Its LayerNorms have no biases; a file with one, learned positions or the feed-forward's
    // activation scales (which llama.cpp applies where present) is refused by the tensor.
    let m = mpt(Some(8.0));
    assert!(m.tensors.iter().all(|(name, _)| !name.ends_with("norm.bias")));
    for (name, len) in [
        ("blk.1.attn_norm.bias", 64),
        ("blk.0.ffn_norm.bias", 64),
        ("output_norm.bias", 64),
        ("position_embd.weight", 64 * 64),
        ("blk.1.ffn_act.scales", 96),
    ] {
        let mut m = mpt(Some(8.0));
        let t = Tensor::from_vec(vec![0.5f32; len], len, &Device::Cpu).expect("tensor");
        m.set_tensor(name, QTensor::quantize(&t, GgmlDType::F32).expect("F32"));
        let e = model_error(read(m.to_bytes().expect("bytes")));
        assert!(matches!(e, ModelError::UnappliedTensor(ref n) if n == name), "{name}: {e}");
    }
    // So too a LayerNorm bias in Cohere's and OLMo 1's files, whose LayerNorms have none.
    for architecture in [Architecture::CommandR, Architecture::Olmo] {
        let e = with_extra_tensor(architecture, "blk.0.attn_norm.bias", 64, 0.5);
        assert!(matches!(e, ModelError::UnappliedTensor(ref n) if n == "blk.0.attn_norm.bias"), "{architecture:?}: {e}");
    }
}

#[test]
fn baichuans_positions_follow_its_block_count_as_llama_cpps_do() {
    use tokenscope::model::{Architecture, LayerRope};
    let baichuan = |n_layers: usize| {
        let spec = SyntheticSpec { architecture: Architecture::Baichuan, n_layers, dim: 32, ffn_dim: 32, ..SyntheticSpec::default() };
        SyntheticModel::new(&spec).expect("model")
    };
    // 7B's 32 blocks turn by RoPE; 13B's 40 are biased by ALiBi (BLOOM's largest bias, 8) and
    // turn nothing.
    let cfg = config(baichuan(32)).expect("7B's count loads");
    assert_eq!(cfg.alibi_max_bias, None);
    assert!((0..32).all(|l| cfg.layer_rope(l) == LayerRope::Main));
    let cfg = config(baichuan(40)).expect("13B's count loads");
    assert_eq!(cfg.alibi_max_bias, Some(tokenscope::model::ALIBI_MAX_BIAS));
    assert!((0..40).all(|l| cfg.layer_rope(l) == LayerRope::Unrotated));
    // Any other count, which llama.cpp would run with no positions at all, is refused by it.
    for n_layers in [2, 31, 41] {
        let e = refused(baichuan(n_layers), "baichuan.block_count");
        assert!(e.contains("RoPE for 32 (7B) and ALiBi for 40 (13B)"), "{e}");
    }
}

#[test]
fn qwen_1s_feed_forward_is_half_its_files_length_as_llama_cpp_reads_it() {
    use tokenscope::model::Architecture;
    let qwen = || {
        let spec =
            SyntheticSpec { architecture: Architecture::Qwen, ffn_dim: 64, n_kv_heads: 4, qkv_bias: true, ..SyntheticSpec::default() };
        SyntheticModel::new(&spec).expect("model")
    };
    // The converter writes the model's intermediate size, the gate's and up projection's rows
    // together: 128 for projections of 64.
    let m = qwen();
    let gguf = tokenscope::gguf::Gguf::read(&mut std::io::Cursor::new(m.to_bytes().expect("bytes"))).expect("gguf");
    assert_eq!(gguf.usize("qwen.feed_forward_length").expect("length"), 128);
    assert_eq!(config(m).expect("loads").ffn_dim, 64);
    // An odd length halves to no width llama.cpp's tensors could have.
    let mut m = qwen();
    m.set_meta("qwen.feed_forward_length", Value::U32(129));
    let e = refused(m, "qwen.feed_forward_length");
    assert!(e.contains("is 129") && e.contains("half of it"), "{e}");
    // Its stacked Q, K and V are each the residual's width: fewer key/value heads are refused
    // (llama.cpp's attn_qkv is 3 x embedding_length rows), though the rows would fit them.
    let spec = SyntheticSpec { architecture: Architecture::Qwen, n_kv_heads: 2, qkv_bias: true, ..SyntheticSpec::default() };
    let e = refused(SyntheticModel::new(&spec).expect("model"), "qwen.attention.head_count_kv");
    assert!(e.contains("is 2 key/value heads of 16 for 4 query heads"), "{e}");
}

#[test]
fn olmo_1s_norms_and_clamp_are_read_as_llama_cpp_reads_them() {
    use tokenscope::model::Architecture;
    let olmo = || SyntheticModel::new(&SyntheticSpec { architecture: Architecture::Olmo, ..SyntheticSpec::default() }).expect("model");
    // Non-parametric LayerNorms: no norm tensor in the file, held as gains of ones and biases
    // of zeros; seven tensors a block.
    let m = olmo();
    assert!(m.tensors.iter().all(|(name, _)| !name.contains("norm")));
    assert_eq!(m.tensors.len(), 1 + 7 * 2);
    let m = read(m.to_bytes().expect("bytes")).expect("loads");
    assert_eq!((m.weights.output_norm.gain.clone(), m.weights.output_norm.bias.clone()), (vec![1.0; 64], Some(vec![0.0; 64])));
    let blocks = m.weights.layers.collect_all().expect("blocks");
    assert!(blocks.iter().all(|l| [&l.attn_norm, &l.ffn_norm].iter().all(|n| n.as_ref().is_some_and(|n| n.gain == [1.0; 64]))));
    // The clamp of q, k and v (OLMo 1.7's 8) is read; 0 or below, or no key, is no clamp
    // (llama.cpp's `f_clamp_kqv > 0`); NaN is refused by its key. No other family reads it.
    assert_eq!(config(olmo()).expect("loads").clamp_kqv, None);
    let clamped = |clamp: f32| {
        let mut m = olmo();
        m.set_meta("olmo.attention.clamp_kqv", Value::F32(clamp));
        m
    };
    assert_eq!(config(clamped(8.0)).expect("OLMo 1.7 loads").clamp_kqv, Some(8.0));
    assert_eq!(config(clamped(0.0)).expect("a clamp of 0 loads").clamp_kqv, None);
    assert_eq!(config(clamped(-1.0)).expect("a clamp below 0 loads").clamp_kqv, None);
    assert!(refused(clamped(f32::NAN), "olmo.attention.clamp_kqv").contains("NaN"));
    let mut m = SyntheticModel::new(&SyntheticSpec::default()).expect("model");
    m.set_meta("llama.attention.clamp_kqv", Value::F32(8.0));
    assert_eq!(config(m).expect("loads").clamp_kqv, None, "llama.cpp reads no clamp for llama");
    // A block count its tensors cannot hold.
    let mut m = olmo();
    m.set_meta("olmo.block_count", Value::U32(3));
    assert!(refused(m, "olmo.block_count").contains("too few"));
}

#[test]
fn hunyuans_ntk_alpha_scales_its_rope_base_as_llama_cpp_does() {
    use tokenscope::model::Architecture;
    // llama.cpp: base * powf(alpha, hd / (hd - 2)) in f32, for Hunyuan's families alone; 0 or
    // below (or no key, its dense files' way: the converter scaled the base) is none.
    let hunyuan = |alpha: Option<f32>| {
        let spec =
            SyntheticSpec { architecture: Architecture::HunyuanDense, rope_base: 10_000.0, rope_alpha: alpha, ..SyntheticSpec::default() };
        SyntheticModel::new(&spec).expect("model")
    };
    let c = config(hunyuan(None)).expect("loads");
    assert_eq!((c.architecture, c.rope_base), (Architecture::HunyuanDense, 10_000.0));
    assert!(c.architecture.norms_heads_after_rope() && c.architecture.has_head_norm());
    let c = config(hunyuan(Some(1000.0))).expect("loads");
    let hd = c.head_dim as f32;
    assert_eq!(c.rope_base, 10_000.0 * 1000.0f32.powf(hd / (hd - 2.0)));
    assert_eq!(config(hunyuan(Some(0.0))).expect("loads").rope_base, 10_000.0);
    let mut m = hunyuan(None);
    m.set_meta("hunyuan-dense.rope.scaling.alpha", Value::F32(f32::NAN));
    assert!(refused(m, "hunyuan-dense.rope.scaling.alpha").contains("finite"));
    let mut m = SyntheticModel::new(&SyntheticSpec { rope_base: 10_000.0, ..SyntheticSpec::default() }).expect("model");
    m.set_meta("llama.rope.scaling.alpha", Value::F32(1000.0));
    assert_eq!(config(m).expect("loads").rope_base, 10_000.0, "llama.cpp reads no alpha for llama");
}

#[test]
fn qwen_vls_multimodal_rope_sections_are_read_as_llama_cpp_reads_them() {
    use tokenscope::model::{Architecture, RopeSections, SectionLayout};
    let vl = |architecture, sections| {
        let spec = SyntheticSpec { architecture, head_dim: Some(32), rope_sections: sections, ..SyntheticSpec::default() };
        SyntheticModel::new(&spec).expect("model")
    };
    // Contiguous for Qwen2-VL, interleaved for Qwen3-VL; up to four counts, fewer padded.
    let c = config(vl(Architecture::Qwen2vl, Some([8, 4, 4, 0]))).expect("loads");
    assert_eq!(c.rope_sections, Some(RopeSections { sections: [8, 4, 4, 0], layout: SectionLayout::Contiguous }));
    let c = config(vl(Architecture::Qwen3vl, None)).expect("loads");
    assert_eq!(c.rope_sections, Some(RopeSections { sections: [8, 4, 4, 0], layout: SectionLayout::Interleaved }));
    let key = "qwen3vl.rope.dimension_sections";
    let mut m = vl(Architecture::Qwen3vl, None);
    m.set_meta(key, Value::Array([6, 5, 5].map(Value::I32).to_vec()));
    assert_eq!(config(m).expect("loads").rope_sections.map(|s| s.sections), Some([6, 5, 5, 0]));
    // Required, as llama.cpp requires them; each refusal names the key.
    let mut m = vl(Architecture::Qwen3vl, None);
    m.remove_meta(key);
    assert!(refused(m, key).contains("is missing"));
    for (sections, words) in [
        (vec![8, 4, 4, 0, 1], "at most four"),
        (vec![8, -4, 4, 0], "none below 0"),
        (vec![0, 0, 0, 16], "time, height or width"),
        (vec![16, 8, 8, 1], "at most the head width 32"),
    ] {
        let mut m = vl(Architecture::Qwen3vl, None);
        m.set_meta(key, Value::Array(sections.iter().map(|&s| Value::I32(s)).collect()));
        assert!(refused(m, key).contains(words), "{sections:?}");
    }
    // A family that turns each head by one position refuses them, naming those that read them.
    let mut m = SyntheticModel::new(&SyntheticSpec { architecture: Architecture::Qwen2, ..SyntheticSpec::default() }).expect("model");
    m.set_meta("qwen2.rope.dimension_sections", Value::Array([4, 2, 2, 0].map(Value::I32).to_vec()));
    assert!(refused(m, "qwen2.rope.dimension_sections").contains("qwen2vl, qwen3vl and glm4 only"));
}

#[test]
fn minicpms_scales_are_read_as_llama_cpp_reads_them() {
    use tokenscope::model::Architecture;
    let minicpm = with_scales(Architecture::Minicpm);
    // Its attention scale is not read: the scores stay scaled by 1 / sqrt(16).
    let c = config(minicpm()).expect("loads");
    assert_eq!((c.embedding_scale, c.residual_scale, c.attention_scale, c.logit_scale), (12.0, 0.22, 0.25, 0.125));
    // Every other scale is required, as llama.cpp requires it; a 0 still leaves what it scales.
    for key in ["minicpm.embedding_scale", "minicpm.residual_scale", "minicpm.logit_scale"] {
        let mut m = minicpm();
        m.remove_meta(key);
        assert!(refused(m, key).contains("is missing, and a minicpm model needs it"), "{key}");
    }
    let mut m = minicpm();
    m.set_meta("minicpm.residual_scale", Value::F32(0.0));
    assert_eq!(config(m).expect("loads").residual_scale, 1.0);
    let mut m = minicpm();
    m.set_meta("minicpm.rope.scaling.finetuned", Value::Bool(false));
    assert!(refused(m, "minicpm.rope.scaling.finetuned").contains("every minicpm layer"));
}

#[test]
fn gpt_neox_files_say_whether_the_residual_is_parallel() {
    use tokenscope::model::Architecture;
    let gptneox = |parallel_residual| {
        let spec = SyntheticSpec { architecture: Architecture::Gptneox, n_kv_heads: 4, parallel_residual, ..SyntheticSpec::default() };
        SyntheticModel::new(&spec).expect("model")
    };
    assert!(config(gptneox(true)).expect("loads").parallel_residual);
    assert!(!config(gptneox(false)).expect("loads").parallel_residual);
    // Required, as llama.cpp requires it, and a boolean.
    let mut m = gptneox(true);
    m.remove_meta("gptneox.use_parallel_residual");
    assert!(refused(m, "gptneox.use_parallel_residual").contains("is missing"));
    let mut m = gptneox(true);
    m.set_meta("gptneox.use_parallel_residual", Value::U32(1));
    assert!(refused(m, "gptneox.use_parallel_residual").contains("is not a boolean"));
    // Phi-2's is always parallel; another family's never, whatever its file says.
    let phi2 = SyntheticSpec { architecture: Architecture::Phi2, n_kv_heads: 4, ..SyntheticSpec::default() };
    assert!(config(SyntheticModel::new(&phi2).expect("model")).expect("loads").parallel_residual);
    let mut m = synthetic();
    m.set_meta("llama.use_parallel_residual", Value::Bool(true));
    assert!(!config(m).expect("loads").parallel_residual);
}

#[test]
fn glm4s_block_is_read_as_llama_cpp_reads_it() {
    use tokenscope::model::architecture::RopePairs;
    use tokenscope::model::Architecture;
    let spec = SyntheticSpec { architecture: Architecture::Glm4, rope_dims: Some(8), qkv_bias: true, ..SyntheticSpec::default() };
    let glm4 = || SyntheticModel::new(&spec).expect("model");
    // Norms before and after each sublayer, the fused gate cut from ffn_up [2 * 96, 64], RoPE
    // on 8 of 16.
    let m = read(glm4().to_bytes().expect("bytes")).expect("loads");
    assert_eq!((m.config.rope_dims, m.config.head_dim), (8, 16));
    let blocks = m.weights.layers.collect_all().expect("blocks");
    assert!(blocks.iter().all(|l| l.attn_norm.is_some()
        && l.ffn_norm.is_some()
        && l.post_norm.is_some()
        && l.attention().and_then(|a| a.qkv_bias.as_ref()).is_some()));
    assert!(blocks.iter().all(|l| l
        .dense_ffn()
        .is_some_and(|f| f.gate.as_ref().is_some_and(|g| g.shape().dims() == [96, 64]) && f.up.shape().dims() == [96, 64])));
    // GLM-4V's multimodal RoPE (time's and height's sections both given, llama.cpp's
    // `use_mrope`) turns split halves; other sections (none, or no height) leave plain RoPE on
    // adjacent pairs, as llama.cpp runs them.
    let key = "glm4.rope.dimension_sections";
    let sections_of = |sections: [i32; 4]| {
        let mut m = glm4();
        m.set_meta(key, Value::Array(sections.map(Value::I32).to_vec()));
        read(m.to_bytes().expect("bytes")).expect("loads").config
    };
    let c = sections_of([2, 1, 1, 0]);
    assert_eq!((c.rope_sections.map(|s| s.sections), c.rope_pairs()), (Some([2, 1, 1, 0]), RopePairs::Halves));
    for plain in [[0; 4], [4, 0, 0, 0]] {
        let c = sections_of(plain);
        assert_eq!((c.rope_sections, c.rope_pairs()), (None, RopePairs::Adjacent), "{plain:?}");
    }
    let mut m = glm4();
    m.set_meta(key, Value::Array([2, 1, -1, 0].map(Value::I32).to_vec()));
    assert!(refused(m, key).contains("none below 0"));
    // A stacked Q/K/V bias beside W_q, W_k and W_v held apart, which nothing would add (llama.cpp
    // does not load such a file), is refused rather than left out.
    let mut m = glm4();
    let zeros = Tensor::zeros(64 + 2 * 32, candle_core::DType::F32, &Device::Cpu).expect("tensor");
    m.set_tensor("blk.0.attn_qkv.bias", QTensor::quantize(&zeros, GgmlDType::F32).expect("F32"));
    assert!(matches!(model_error(read(m.to_bytes().expect("bytes"))), ModelError::UnappliedTensor(_)));
}

#[test]
fn chatglms_stacked_projections_and_bias_are_read_as_llama_cpp_reads_them() {
    use tokenscope::model::Architecture;
    let spec = SyntheticSpec { architecture: Architecture::Chatglm, rope_dims: Some(8), qkv_bias: true, ..SyntheticSpec::default() };
    let chatglm = || SyntheticModel::new(&spec).expect("model");
    // W_q, W_k and W_v cut from attn_qkv [64 + 2 * 32, 64], its bias cut alike; the gate from
    // ffn_up; no post norms; RoPE on 8 of 16.
    let m = read(chatglm().to_bytes().expect("bytes")).expect("loads");
    assert_eq!((m.config.rope_dims, m.config.head_dim), (8, 16));
    let blocks = m.weights.layers.collect_all().expect("blocks");
    assert!(blocks.iter().all(|l| l.post_norm.is_none() && l.dense_ffn().is_some_and(|f| f.gate.is_some())));
    assert!(blocks
        .iter()
        .all(|l| l.attention().and_then(|a| a.qkv_bias.as_ref()).is_some_and(|b| (b.q.len(), b.k.len(), b.v.len()) == (64, 32, 32))));
    // A stacked bias of the wrong length is refused by name.
    let mut m = chatglm();
    let short = Tensor::zeros(64, candle_core::DType::F32, &Device::Cpu).expect("tensor");
    m.set_tensor("blk.1.attn_qkv.bias", QTensor::quantize(&short, GgmlDType::F32).expect("F32"));
    assert!(model_error(read(m.to_bytes().expect("bytes"))).to_string().contains("blk.1.attn_qkv.bias"));
}

#[test]
fn olmo2s_norms_are_read_as_llama_cpp_reads_them() {
    use tokenscope::model::{Architecture, HeadNormSpan};
    let olmo2 = || SyntheticModel::new(&SyntheticSpec { architecture: Architecture::Olmo2, ..SyntheticSpec::default() }).expect("model");
    // No pre-norms; q's and k's gains one per element of each, [4 * 16] and [2 * 16].
    let m = read(olmo2().to_bytes().expect("bytes")).expect("loads");
    let blocks = m.weights.layers.collect_all().expect("blocks");
    assert!(blocks.iter().all(|l| l.attn_norm.is_none() && l.ffn_norm.is_none() && l.post_norm.is_some()));
    let norm = blocks[0].attention().and_then(|a| a.head_norm.as_ref()).expect("head norms");
    assert_eq!((norm.q.len(), norm.k.len(), norm.span(16)), (64, 32, HeadNormSpan::Whole));
    // A head's width of gain (Qwen3's shape) is the wrong shape here.
    let mut m = olmo2();
    m.set_tensor(
        "blk.0.attn_k_norm.weight",
        QTensor::quantize(&Tensor::ones(16, candle_core::DType::F32, &Device::Cpu).expect("t"), GgmlDType::F32).expect("q"),
    );
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::ShapeMismatch { ref name, .. } if name == "blk.0.attn_k_norm.weight"), "{e}");
    // A window of 0 is none.
    let mut m = olmo2();
    m.set_meta("olmo2.attention.sliding_window", Value::U32(0));
    let cfg = read(m.to_bytes().expect("bytes")).expect("no window loads").config;
    assert_eq!((cfg.sliding_window, cfg.sliding_rope_base), (None, None));
}

#[test]
fn olmo3s_sliding_layers_are_read_as_llama_cpp_reads_them() {
    use tokenscope::model::{Architecture, LayerRope};
    // An olmo2 file with a window is OLMo 3's: the first three of every four layers slide,
    // turned by plain RoPE at `rope.freq_base_swa` (else the file's base).
    let olmo3 = |layers: usize| {
        let spec =
            SyntheticSpec { architecture: Architecture::Olmo2, n_layers: layers, sliding_window: Some(4096), ..SyntheticSpec::default() };
        SyntheticModel::new(&spec).expect("model")
    };
    let cfg = read(olmo3(8).to_bytes().expect("bytes")).expect("loads").config;
    let kinds: Vec<LayerRope> = (0..8).map(|l| cfg.layer_rope(l)).collect();
    let (s, m) = (LayerRope::Sliding, LayerRope::Main);
    assert_eq!(kinds, [s, s, s, m, s, s, s, m]);
    assert_eq!((cfg.sliding_window, cfg.sliding_rope_base), (Some(4096), Some(cfg.rope_base)));
    let mut m = olmo3(8);
    m.set_meta("olmo2.rope.freq_base_swa", Value::F32(500.0));
    assert_eq!(read(m.to_bytes().expect("bytes")).expect("loads").config.sliding_rope_base, Some(500.0));
    let mut m = olmo3(8);
    m.set_meta("olmo2.rope.freq_base_swa", Value::F32(f32::NAN));
    assert!(refused(m, "olmo2.rope.freq_base_swa").contains("above 1"));
    // The pattern as its converter writes it (a flag a layer) or as a period loads when it is
    // OLMo 3's; any other is refused by name rather than run sliding the wrong layers.
    let flags = |f: &[bool]| Value::Array(f.iter().map(|&b| Value::Bool(b)).collect());
    let key = "olmo2.attention.sliding_window_pattern";
    for fine in [flags(&[true, true, true, false, true, true, true, false]), Value::U32(4)] {
        let mut m = olmo3(8);
        m.set_meta(key, fine);
        read(m.to_bytes().expect("bytes")).expect("OLMo 3's own pattern loads");
    }
    let every_other = [true, false, true, false, true, false, true, false];
    for bad in [flags(&every_other), flags(&[true, true, true]), Value::U32(2), Value::U32(0), Value::String("4".into())] {
        let mut m = olmo3(8);
        m.set_meta(key, bad.clone());
        assert!(refused(m, key).contains("the first 3 of every 4"), "{bad:?}");
    }
}

#[test]
fn exaone4s_window_is_read_as_llama_cpp_reads_it() {
    use tokenscope::model::{Architecture, LayerRope};
    let exaone4 = |layers: usize, window: Option<usize>| {
        let spec =
            SyntheticSpec { architecture: Architecture::Exaone4, n_layers: layers, sliding_window: window, ..SyntheticSpec::default() };
        read(SyntheticModel::new(&spec).expect("model").to_bytes().expect("bytes")).expect("loads").config
    };
    // Not the 32B: every layer over every position, turned by RoPE, whatever window is named.
    let cfg = exaone4(4, Some(8));
    assert_eq!(cfg.sliding_window, None);
    assert!((0..4).all(|l| cfg.layer_rope(l) == LayerRope::Main && cfg.attended(l, 20) == (0..21)));
    // The 32B (64 blocks): the file's window or 4096; three of four layers slide, turned by
    // the file's RoPE, the fourth without RoPE over every position.
    assert_eq!(exaone4(64, None).sliding_window, Some(4096));
    let cfg = exaone4(64, Some(8));
    assert_eq!((cfg.sliding_window, cfg.sliding_rope_base), (Some(8), None));
    let (m, u) = (LayerRope::Main, LayerRope::Unrotated);
    assert_eq!((0..8).map(|l| cfg.layer_rope(l)).collect::<Vec<_>>(), [m, m, m, u, m, m, m, u]);
    assert_eq!((cfg.attended(2, 20), cfg.attended(3, 20)), (13..21, 0..21));
}

#[test]
fn missing_tensors_are_named() {
    let mut m = synthetic();
    m.remove_tensor("blk.1.ffn_down.weight");
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::MissingTensor(ref n) if n == "blk.1.ffn_down.weight"), "{e}");
}

#[test]
fn shapes_that_do_not_fit_the_configuration_are_refused() {
    let mut m = synthetic();
    let t = Tensor::zeros((48, 64), candle_core::DType::F32, &Device::Cpu).expect("zeros");
    m.set_tensor("blk.0.attn_k.weight", QTensor::quantize(&t, GgmlDType::Q8_0).expect("q8_0"));
    let e = model_error(read(m.to_bytes().expect("bytes")));
    match e {
        ModelError::ShapeMismatch { ref name, ref found, ref expected } => {
            assert_eq!(name, "blk.0.attn_k.weight");
            assert_eq!(found, &[48, 64]);
            assert_eq!(expected, &[32, 64], "2 KV heads of width 16");
        }
        other => panic!("{other}"),
    }
}

#[test]
fn inconsistent_metadata_is_refused() {
    let mut m = synthetic();
    m.set_meta("llama.attention.head_count", Value::U32(5));
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::Metadata { .. }), "{e}");
    let mut m = synthetic();
    m.set_meta("llama.block_count", Value::String("two".into()));
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(e.to_string().contains("llama.block_count"), "{e}");
}

/// The head counts and feed-forward width may be one value a layer, as llama.cpp reads them
/// (Granite 4's dense files give the key/value heads so): equal values load as one; values
/// that vary by layer (OpenELM's, LFM2's, a hybrid's) or an array of the wrong length are
/// refused by key, in words.
#[test]
fn counts_given_one_a_layer_are_read_as_llama_cpp_reads_them() {
    let per_layer = |key: &str, values: &[u32]| {
        let mut m = synthetic();
        m.set_meta(key, Value::Array(values.iter().map(|&v| Value::U32(v)).collect()));
        m
    };
    let spec = SyntheticSpec::default();
    for (key, value) in [
        ("llama.attention.head_count", spec.n_heads),
        ("llama.attention.head_count_kv", spec.n_kv_heads),
        ("llama.feed_forward_length", spec.ffn_dim),
    ] {
        let m = read(per_layer(key, &[value as u32; 2]).to_bytes().expect("bytes")).expect("equal counts a layer load");
        let c = &m.config;
        assert_eq!((c.n_heads, c.n_kv_heads, c.ffn_dim), (spec.n_heads, spec.n_kv_heads, spec.ffn_dim), "{key}");
        let e = refused(per_layer(key, &[value as u32, 0]), key);
        assert!(e.contains("varies by layer") && e.contains(&format!("[{value}, 0]")), "{e}");
        let e = refused(per_layer(key, &[value as u32; 3]), key);
        assert!(e.contains("3 values for 2 layers"), "{e}");
    }
    let mut m = synthetic();
    m.set_meta("llama.attention.head_count_kv", Value::Array(vec![Value::F32(2.0); 2]));
    assert!(refused(m, "llama.attention.head_count_kv").contains("not a non-negative integer"));
}

/// Each error kind's name, as the page gets it (the serialized `ErrorName`, the TypeScript
/// union tsify derives from it) and as `Error::name` gives it, is one and the same, and the
/// names are distinct; a model error is a `BadModel`.
#[test]
fn each_error_kind_has_one_name_on_both_sides_of_the_wasm_edge() {
    use tokenscope::error::ErrorName;
    let names: Vec<&str> = ErrorName::ALL.iter().map(|n| n.as_str()).collect();
    for (kind, name) in ErrorName::ALL.iter().zip(&names) {
        assert_eq!(serde_json::to_value(kind).expect("serializes"), serde_json::json!(name));
    }
    let distinct: std::collections::BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(distinct.len(), names.len(), "{names:?}");
    let err = read(b"GGUF".to_vec()).err().expect("a truncated file is refused");
    assert_eq!((err.kind(), err.name()), (ErrorName::BadModel, "BadModel"));
    assert_eq!(Error::NotReady("no model".into()).name(), "NotReady");
}

#[test]
fn the_weights_summary_counts_every_tensor_of_the_file() {
    let m = synthetic();
    let (elements, bytes) =
        m.tensors.iter().fold((0u64, 0u64), |(e, b), (_, t)| (e + t.shape().elem_count() as u64, b + t.storage_size_in_bytes() as u64));
    let summary = read(m.to_bytes().expect("bytes")).expect("loads").summary;
    assert_eq!((summary.parameters, summary.bytes), (elements, bytes), "{summary:?}");
    // Q4_1 block weights hold the most bytes, then the Q8_0 embedding, then the f32 norms.
    assert!(summary.types.starts_with("Q4_1 ") && summary.types.contains(", Q8_0 "), "{}", summary.types);
}

#[test]
fn weights_larger_than_the_free_memory_are_refused_with_both_sizes() {
    use tokenscope::memory;
    use tokenscope::model::{Gguf, Weights};
    let m = synthetic();
    let stored: u64 = m.tensors.iter().map(|(_, t)| t.storage_size_in_bytes() as u64).sum();
    let bytes = m.to_bytes().expect("bytes");
    let model = read(bytes.clone()).expect("loads");
    let gguf = Gguf::read(&mut std::io::Cursor::new(bytes)).expect("gguf");
    let needed = Weights::bytes_needed(&gguf, &model.config);
    assert_eq!(needed, stored, "every tensor the model reads, as stored");
    assert!(memory::check_fits("weights", needed, Some(needed)).is_ok());
    assert!(memory::check_fits("weights", needed, None).is_ok(), "unknown free memory checks nothing");
    let e = memory::check_fits("weights", 100 << 30, Some(3 << 30)).expect_err("100 GB in 3 GB");
    assert!(matches!(e, ModelError::TooLarge { part: "weights", needed, available } if needed == 100 << 30 && available == 3 << 30), "{e}");
    assert!(e.to_string().contains("102400 MB") && e.to_string().contains("3072 MB"), "{e}");
    assert!(memory::available_bytes().is_some_and(|b| b > 0), "this machine says what is free");
}

#[test]
fn the_metadata_is_counted_as_it_will_sit_in_memory() {
    use tokenscope::gguf::scan::check_header;
    let footprint = |m: &SyntheticModel| {
        let bytes = m.to_bytes().expect("bytes");
        check_header(&mut std::io::Cursor::new(&bytes), bytes.len() as u64).expect("a sound header").metadata_bytes
    };
    let mut m = synthetic();
    let base = footprint(&m);
    // 100,000 one-byte values: 100 KB in the file, a Value each once parsed.
    m.metadata.push(("test.bytes".into(), Value::Array(vec![Value::U8(7); 100_000])));
    let with_bytes = footprint(&m);
    let per_value = std::mem::size_of::<Value>() as u64;
    assert!(with_bytes - base >= 100_000 * per_value, "{} for 100,000 parsed values of {per_value} bytes", with_bytes - base);
    // A string's bytes count once more on top of its Value.
    m.metadata.push(("test.text".into(), Value::String("x".repeat(50_000))));
    assert!(footprint(&m) - with_bytes >= 50_000 + per_value);
    assert!(tokenscope::memory::check_fits("metadata", with_bytes, Some(with_bytes - 1))
        .expect_err("over")
        .to_string()
        .starts_with("the model's metadata need"));
}

#[test]
fn a_model_read_block_by_block_as_the_backend_takes_it_equals_one_read_whole() {
    use tokenscope::backend::cpu::{CpuBackend, CpuPrecision};
    use tokenscope::backend::Backend;
    let spec = SyntheticSpec { architecture: tokenscope::model::Architecture::Qwen2, n_layers: 3, ..SyntheticSpec::default() };
    let bytes = SyntheticModel::new(&spec).and_then(|m| m.to_bytes()).expect("bytes");
    let logits = |m: Model| {
        let mut b = CpuBackend::new(&m.config, m.weights, CpuPrecision::Exact, None).expect("backend");
        pollster::block_on(b.prefill(&[1, 40, 75, 104])).expect("prefill")
    };
    let whole = read(bytes.clone()).expect("loads");
    let reported = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let seen = reported.clone();
    let streamed =
        Model::read_streaming(std::io::Cursor::new(bytes.clone()), Box::new(move |done, _| seen.borrow_mut().push(done))).expect("loads");
    assert_eq!(streamed.weights.layers.len(), 3);
    assert_eq!(streamed.summary, whole.summary);
    let before_blocks = reported.borrow().len();
    assert_eq!(logits(streamed), logits(whole));
    let progress = reported.borrow();
    assert!(progress.len() > before_blocks, "the blocks' reads are reported as they happen: {progress:?}");
    assert_eq!(progress.last().copied(), Some(streamed_total(&bytes)), "every tensor's bytes, once");

    // A read that fails inside the last block (a file changed or gone since its header was
    // read): refused, in words, when that block is taken.
    let at = bytes.len() as u64 - 100;
    let failing = FailingAfter { inner: std::io::Cursor::new(bytes), at };
    let m = Model::read_streaming(failing, Box::new(|_, _| {})).expect("the header and the embedding read");
    let err = CpuBackend::new(&m.config, m.weights, CpuPrecision::Fast, None).err().expect("refused");
    assert!(matches!(&err, Error::Model(ModelError::Malformed(text)) if text.contains("the file went away")), "{err}");
}

/// Bytes of every tensor the model reads (all of a synthetic file's).
fn streamed_total(bytes: &[u8]) -> u64 {
    let gguf = tokenscope::model::Gguf::read(&mut std::io::Cursor::new(bytes)).expect("gguf");
    let cfg = tokenscope::model::Config::from_gguf(&gguf).expect("config");
    tokenscope::model::Weights::bytes_needed(&gguf, &cfg)
}

/// A reader whose reads past byte `at` fail.
struct FailingAfter {
    inner: std::io::Cursor<Vec<u8>>,
    at: u64,
}

impl std::io::Read for FailingAfter {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.inner.position() + buf.len() as u64 > self.at {
            return Err(std::io::Error::other("the file went away"));
        }
        self.inner.read(buf)
    }
}

impl std::io::Seek for FailingAfter {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        self.inner.seek(to)
    }
}

/// An IQ4_NL tensor (candle cannot read the type) loads, held as the Q8_0 blocks of the same
/// weights: the file's Q4_0 blocks of one tensor relabelled IQ4_NL (the same block size) are
/// read as each code's IQ4_NL level times the block's scale. The type counts and the summary
/// name it IQ4_NL; the memory it needs counts it as Q8_0.
#[test]
fn an_iq4_nl_tensor_loads_as_the_q8_0_blocks_of_its_weights() {
    const NAME: &str = "blk.0.ffn_down.weight";
    let spec = SyntheticSpec { weight_type: GgmlDType::Q4_0, ..SyntheticSpec::default() };
    let synthetic = SyntheticModel::new(&spec).expect("model");
    let (_, original) = synthetic.tensors.iter().find(|(n, _)| n == NAME).expect("tensor");
    let blocks = original.data().expect("blocks").to_vec();
    let bytes = with_type_id(synthetic.to_bytes().expect("bytes"), NAME, 20);

    let gguf = tokenscope::gguf::Gguf::read(&mut std::io::Cursor::new(&bytes)).expect("header");
    assert_eq!(gguf.stored_type_name(NAME), Some("IQ4_NL"));
    assert_eq!(gguf.tensor_info(NAME).map(|(_, t)| t), Some(GgmlDType::Q8_0));
    assert_eq!(gguf.tensor_type_counts().get("IQ4_NL"), Some(&1));
    assert_eq!(gguf.held_bytes(NAME), gguf.tensor_bytes(NAME) / 18 * 34);

    let m = read(bytes).expect("loads");
    assert!(m.summary.types.contains("IQ4_NL"), "{}", m.summary.types);
    let layer = m.weights.layers.collect_all().expect("blocks").remove(0);
    let w = &layer.dense_ffn().expect("a dense feed-forward").down;
    assert_eq!(w.dtype(), GgmlDType::Q8_0);
    let got = w.dequantize(&Device::Cpu).and_then(|t| t.flatten_all()).and_then(|t| t.to_vec1::<f32>()).expect("weights");
    let levels = tokenscope::gguf::iq4_nl::LEVELS;
    let want: Vec<f32> = blocks
        .chunks_exact(18)
        .flat_map(|b| {
            let d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
            let low = b[2..].iter().map(move |&c| d * levels[usize::from(c & 15)] as f32);
            let high = b[2..].iter().map(move |&c| d * levels[usize::from(c >> 4)] as f32);
            low.chain(high).collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(got, want);
}

/// Where a type's super-block keeps its f16 scale `d`.
#[derive(Clone, Copy)]
enum ScaleAt {
    /// Its first two bytes (the IQ2, IQ3, IQ4_XS and IQ1_S layouts).
    First,
    /// Its last two bytes (TQ1_0's and TQ2_0's).
    Last,
    /// The top 4 bits of each of its last four 16-bit words, in turn (IQ1_M's).
    TopNibbles,
}

/// A small synthetic model whose tensor `name` holds random blocks of `weights` (256 or a
/// divisor of it) in `bytes_per` bytes each, written as a Q4_K tensor (256 weights a
/// super-block, so the same shape; Q4_K's 144 bytes a super-block leave zeros after them) and
/// relabelled type `id`; returns the file and the tensor's bytes as the type stores them. Each
/// block's f16 `d` (kept where `at` says) runs from 1e-4 to 7e-4 (as trained weights have),
/// the rest from the seed.
fn random_blocks(name: &str, id: u32, (weights, bytes_per): (usize, usize), at: ScaleAt, seed: u32) -> (Vec<u8>, Vec<u8>) {
    use candle_core::quantized::ggml_file::qtensor_from_ggml;
    let spec = SyntheticSpec { weight_type: GgmlDType::Q4K, dim: 256, ffn_dim: 512, ..SyntheticSpec::default() };
    let mut synthetic = SyntheticModel::new(&spec).expect("model");
    let (_, original) = synthetic.tensors.iter().find(|(n, _)| n == name).expect("tensor");
    let dims = original.shape().dims().to_vec();
    let super_blocks = original.shape().elem_count() / 256;
    let mut x = seed;
    let mut random = move || {
        x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        (x >> 24) as u8
    };
    let stored: Vec<u8> = (0..super_blocks * 256 / weights)
        .flat_map(|i| {
            let d = half::f16::from_f32(1e-4 * (1 + i % 7) as f32);
            let rest: Vec<u8> = (0..bytes_per - 2).map(|_| random()).collect();
            match at {
                ScaleAt::First => [d.to_le_bytes().to_vec(), rest].concat(),
                ScaleAt::Last => [rest, d.to_le_bytes().to_vec()].concat(),
                ScaleAt::TopNibbles => {
                    let mut block = [rest, vec![0; 2]].concat();
                    for k in 0..4 {
                        let at = bytes_per - 8 + 2 * k + 1;
                        block[at] = (block[at] & 0x0f) | (((d.to_bits() >> (4 * k)) & 15) as u8) << 4;
                    }
                    block
                }
            }
        })
        .collect();
    let mut as_q4_k = stored.clone();
    as_q4_k.resize(super_blocks * 144, 0);
    synthetic.set_tensor(name, qtensor_from_ggml(GgmlDType::Q4K, &as_q4_k, dims, &Device::Cpu).expect("tensor"));
    (with_type_id(synthetic.to_bytes().expect("bytes"), name, id), stored)
}

/// An IQ4_XS tensor (candle cannot read the type) loads, held as Q8_0 blocks within half an
/// f16 ulp of its weights: random IQ4_XS super-blocks written as a Q4_K tensor (the same 256
/// weights a super-block, zeros after them: IQ4_XS has 136 bytes where Q4_K has 144) and
/// relabelled IQ4_XS are read as each block's 6-bit scale minus 32, times the super-block's
/// scale, times each code's level. The type counts and the summary name it IQ4_XS; the memory
/// it needs counts it as Q8_0.
#[test]
fn an_iq4_xs_tensor_loads_as_the_q8_0_blocks_of_its_weights() {
    use tokenscope::gguf::iq4_xs::{HELD_RELATIVE_ERROR, SUPER_BLOCK_BYTES};
    const NAME: &str = "blk.0.ffn_down.weight";
    let (bytes, stored) = random_blocks(NAME, 23, (256, SUPER_BLOCK_BYTES), ScaleAt::First, 12_345);
    let super_blocks = stored.len() / SUPER_BLOCK_BYTES;

    let gguf = tokenscope::gguf::Gguf::read(&mut std::io::Cursor::new(&bytes)).expect("header");
    assert_eq!(gguf.stored_type_name(NAME), Some("IQ4_XS"));
    assert_eq!(gguf.tensor_info(NAME).map(|(_, t)| t), Some(GgmlDType::Q8_0));
    assert_eq!(gguf.tensor_type_counts().get("IQ4_XS"), Some(&1));
    assert_eq!(gguf.tensor_bytes(NAME), (super_blocks * 136) as u64);
    assert_eq!(gguf.held_bytes(NAME), (super_blocks * 8 * 34) as u64);

    let m = read(bytes).expect("loads");
    assert!(m.summary.types.contains("IQ4_XS"), "{}", m.summary.types);
    let layer = m.weights.layers.collect_all().expect("blocks").remove(0);
    let w = &layer.dense_ffn().expect("a dense feed-forward").down;
    assert_eq!(w.dtype(), GgmlDType::Q8_0);
    let got = w.dequantize(&Device::Cpu).and_then(|t| t.flatten_all()).and_then(|t| t.to_vec1::<f32>()).expect("weights");
    let levels = tokenscope::gguf::iq4_nl::LEVELS;
    // ggml's layout, read here on its own: d, the scales' high bits (u16), their low bits
    // (a nibble each), then 16 bytes of codes per 32 weights (low nibbles first).
    let want: Vec<f64> = stored
        .chunks_exact(SUPER_BLOCK_BYTES)
        .flat_map(|s| {
            let d = f64::from(half::f16::from_le_bytes([s[0], s[1]]).to_f32());
            let high = u16::from_le_bytes([s[2], s[3]]);
            (0..256).map(move |j| {
                let (b, k) = (j / 32, j % 32);
                let scale = i32::from((s[4 + b / 2] >> (4 * (b % 2))) & 15) + 16 * i32::from((high >> (2 * b)) & 3);
                let byte = s[8 + 16 * b + k % 16];
                let code = if k < 16 { byte & 15 } else { byte >> 4 };
                d * f64::from(scale - 32) * f64::from(levels[usize::from(code)])
            })
        })
        .collect();
    assert_eq!(got.len(), want.len());
    assert!(want.iter().any(|w| *w != 0.0), "the weights are not all zero");
    for (j, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!((f64::from(*g) - w).abs() <= f64::from(HELD_RELATIVE_ERROR) * w.abs(), "weight {j}: held {g}, file {w}");
    }
}

/// Tensors of the types candle cannot read load, each held as its stand-in's type: random
/// blocks written as a Q4_K tensor (the same weights, zeros after them: 98, 110, 66, 50, 74,
/// 82, 56, 54, 66, 72 and 36 bytes per 256 weights where Q4_K has 144) and relabelled are read
/// as `gguf::iq3`'s, `gguf::iq2_xxs`'s, `gguf::iq1_s`'s, `gguf::iq2_xs`'s, `gguf::iq1_m`'s,
/// `gguf::ternary`'s and `gguf::q1_0`'s conversions write them (their own tests hold those to
/// llama.cpp's dequantizer). The type counts and the summary name the file's type; the file's
/// bytes are counted at its own size, the memory it needs as the type it is held in.
#[test]
fn codebook_and_ternary_tensors_load_as_the_blocks_they_are_held_in() {
    use candle_core::quantized::ggml_file::qtensor_from_ggml;
    use tokenscope::gguf::{iq1_m, iq1_s, iq2_xs, iq2_xxs, iq3, q1_0, ternary};
    const NAME: &str = "blk.0.ffn_down.weight";
    type Convert = fn(&[u8]) -> Result<Vec<u8>, ModelError>;
    // Id, name, weights and bytes a block, where d is, the conversion, the held type and its
    // bytes per 256 weights.
    type Case = (u32, &'static str, (usize, usize), ScaleAt, Convert, (GgmlDType, usize));
    let q8_0 = (GgmlDType::Q8_0, 8 * 34);
    let cases: [Case; 11] = [
        (18, "IQ3_XXS", (256, iq3::XXS_BYTES), ScaleAt::First, iq3::xxs_to_q8_0, q8_0),
        (21, "IQ3_S", (256, iq3::S_BYTES), ScaleAt::First, iq3::s_to_q8_0, q8_0),
        (16, "IQ2_XXS", (256, iq2_xxs::BYTES), ScaleAt::First, iq2_xxs::to_q8_0, q8_0),
        (19, "IQ1_S", (256, iq1_s::BYTES), ScaleAt::First, iq1_s::to_q8_0, q8_0),
        (17, "IQ2_XS", (256, iq2_xs::XS_BYTES), ScaleAt::First, iq2_xs::xs_to_f16, (GgmlDType::F16, 512)),
        (22, "IQ2_S", (256, iq2_xs::S_BYTES), ScaleAt::First, iq2_xs::s_to_f16, (GgmlDType::F16, 512)),
        (29, "IQ1_M", (256, iq1_m::BYTES), ScaleAt::TopNibbles, iq1_m::to_q6_k, (GgmlDType::Q6K, iq1_m::Q6_K_BYTES)),
        (34, "TQ1_0", (256, ternary::TQ1_0_BYTES), ScaleAt::Last, ternary::tq1_0_to_q8_0, q8_0),
        (35, "TQ2_0", (256, ternary::TQ2_0_BYTES), ScaleAt::Last, ternary::tq2_0_to_q8_0, q8_0),
        (42, "Q2_0", (ternary::Q2_0_BLOCK, ternary::Q2_0_BYTES), ScaleAt::First, ternary::q2_0_to_q8_0, q8_0),
        (41, "Q1_0", (q1_0::WEIGHTS, q1_0::BYTES), ScaleAt::First, q1_0::to_q8_0, q8_0),
    ];
    for (id, ty, (weights, bytes_per), at, convert, (held, held_per)) in cases {
        let (bytes, stored) = random_blocks(NAME, id, (weights, bytes_per), at, 777 + id);
        let super_blocks = stored.len() / bytes_per * weights / 256;

        let gguf = tokenscope::gguf::Gguf::read(&mut std::io::Cursor::new(&bytes)).expect("header");
        assert_eq!(gguf.stored_type_name(NAME), Some(ty));
        assert_eq!(gguf.tensor_info(NAME).map(|(_, t)| t), Some(held), "{ty}");
        assert_eq!(gguf.tensor_type_counts().get(ty), Some(&1));
        assert_eq!(gguf.tensor_bytes(NAME), stored.len() as u64);
        assert_eq!(gguf.held_bytes(NAME), (super_blocks * held_per) as u64, "{ty}");

        let m = read(bytes).expect("loads");
        assert!(m.summary.types.contains(ty), "{}", m.summary.types);
        let layer = m.weights.layers.collect_all().expect("blocks").remove(0);
        let w = &layer.dense_ffn().expect("a dense feed-forward").down;
        assert_eq!(w.dtype(), held, "{ty}");
        let weights = |t: &candle_core::quantized::QTensor| {
            t.dequantize(&Device::Cpu).and_then(|t| t.flatten_all()).and_then(|t| t.to_vec1::<f32>()).expect("weights")
        };
        let converted = convert(&stored).expect("converts");
        assert_eq!(converted.len(), super_blocks * held_per, "{ty}");
        let want = qtensor_from_ggml(held, &converted, w.shape().dims().to_vec(), &Device::Cpu).expect("tensor");
        let (got, want) = (weights(w), weights(&want));
        assert!(want.iter().all(|w| w.is_finite()) && want.iter().any(|w| *w != 0.0), "{ty}");
        if !["TQ1_0", "TQ2_0", "Q2_0"].contains(&ty) {
            assert!(want.iter().all(|w| *w != 0.0), "{ty}: every point has a magnitude");
        }
        assert_eq!(got, want, "{ty}");
    }
}

#[test]
fn phi3_reads_its_fused_projections_or_separate_ones_and_its_longrope() {
    use tokenscope::backend::cpu::{CpuBackend, CpuPrecision};
    use tokenscope::backend::Backend;
    use tokenscope::model::fused::split_rows;
    use tokenscope::model::Architecture;
    let spec = SyntheticSpec { architecture: Architecture::Phi3, n_kv_heads: 2, ..SyntheticSpec::default() };
    let fused = SyntheticModel::new(&spec).expect("model");
    let logits = |m: &SyntheticModel| {
        let model = read(m.to_bytes().expect("bytes")).expect("loads");
        let mut cpu = CpuBackend::new(&model.config, model.weights, CpuPrecision::Exact, None).expect("cpu");
        pollster::block_on(cpu.prefill(&[1, 40, 75, 104])).expect("prefill")
    };
    // The same weights with W_q, W_k and W_v apart, as llama.cpp also reads phi3 files: the
    // same logits, bit for bit.
    let hd = spec.dim / spec.n_heads;
    let mut apart = SyntheticModel::new(&spec).expect("model");
    for i in 0..spec.n_layers {
        let name = format!("blk.{i}.attn_qkv.weight");
        let qkv = &fused.tensors.iter().find(|(n, _)| *n == name).expect("fused").1;
        let parts = split_rows(qkv, &[spec.n_heads * hd, spec.n_kv_heads * hd, spec.n_kv_heads * hd]).expect("cut");
        apart.remove_tensor(&name);
        for (part, t) in ["attn_q", "attn_k", "attn_v"].into_iter().zip(parts) {
            apart.set_tensor(&format!("blk.{i}.{part}.weight"), t);
        }
    }
    assert_eq!(logits(&fused), logits(&apart));
    // ffn_up must hold the gate's rows and the up projection's.
    let mut m = SyntheticModel::new(&spec).expect("model");
    let half = split_rows(&m.tensors.iter().find(|(n, _)| n == "blk.0.ffn_up.weight").expect("up").1, &[spec.ffn_dim, spec.ffn_dim])
        .expect("cut")
        .remove(0);
    m.set_tensor("blk.0.ffn_up.weight", half);
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::ShapeMismatch { ref name, .. } if name == "blk.0.ffn_up.weight"), "{e}");
    // LongRoPE (Phi-3.5's) is read for phi3, its attention factor a finite number above 0;
    // another architecture's file holding its factors is refused by key, not run as plain RoPE.
    let longrope = SyntheticSpec { longrope_original_context: Some(32), ..spec.clone() };
    read(SyntheticModel::new(&longrope).expect("model").to_bytes().expect("bytes")).expect("phi3 reads LongRoPE");
    let mut m = SyntheticModel::new(&longrope).expect("model");
    m.set_meta("phi3.rope.scaling.attn_factor", Value::F32(f32::NAN));
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::Metadata { ref key, .. } if key == "phi3.rope.scaling.attn_factor"), "{e}");
    // YaRN and LongRoPE are one scaling or the other.
    let mut m = SyntheticModel::new(&longrope).expect("model");
    m.set_meta("phi3.rope.scaling.type", Value::String("yarn".into()));
    m.set_meta("phi3.rope.scaling.factor", Value::F32(4.0));
    assert!(refused(m, "phi3.rope.scaling.type").contains("one or the other"));
    let mut m = SyntheticModel::new(&longrope).expect("model");
    m.remove_tensor("rope_factors_long.weight");
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::MissingTensor(ref n) if n == "rope_factors_long.weight"), "{e}");
    for factors in ["rope_factors_short.weight", "rope_factors_long.weight"] {
        let mut m = SyntheticModel::new(&SyntheticSpec::default()).expect("model");
        let t = Tensor::ones(hd / 2, candle_core::DType::F32, &Device::Cpu).expect("ones");
        m.set_tensor(factors, QTensor::quantize(&t, GgmlDType::F32).expect("f32"));
        let e = model_error(read(m.to_bytes().expect("bytes")));
        assert!(matches!(e, ModelError::Metadata { ref key, .. } if key == "llama.rope.scaling.attn_factor"), "{e}");
        assert!(e.to_string().contains(factors) && e.to_string().contains("does not run"), "{e}");
    }
}

/// A quantized tensor's rows must hold whole blocks, as llama.cpp requires: a Q4_K (256
/// weights a block) or IQ1_M tensor with rows of 128 is refused by name, though its element
/// count is a multiple of 256 (the Q4_0 data relabelled: 4.5 bits a weight either way, so the
/// file's extents hold).
#[test]
fn rows_that_split_a_block_are_refused_by_the_tensors_name() {
    let spec = SyntheticSpec { weight_type: GgmlDType::Q4_0, dim: 128, ffn_dim: 256, ..SyntheticSpec::default() };
    let bytes = SyntheticModel::new(&spec).expect("model").to_bytes().expect("bytes");
    for (id, block) in [(12, 256), (29, 256)] {
        let e = model_error(read(with_type_id(bytes.clone(), "blk.0.attn_q.weight", id)));
        let want = format!("tensor blk.0.attn_q.weight has rows of 128 weights, not a multiple of its type's block of {block}");
        assert!(matches!(e, ModelError::Malformed(ref m) if *m == want), "type {id}: {e}");
    }
}

/// A part of a model split by llama.cpp's `llama-gguf-split` (`split.count` parts, `split.no`
/// this one's index, both u16) is refused as such, with what to do, whichever part it is; a
/// count of 1 is a whole model.
#[test]
fn a_part_of_a_split_model_is_refused_with_how_to_merge_it() {
    for (no, count) in [(0u16, 3u16), (2, 3)] {
        let mut m = synthetic();
        m.set_meta("split.no", Value::U16(no));
        m.set_meta("split.count", Value::U16(count));
        m.set_meta("split.tensors.count", Value::I32(5));
        let e = model_error(read(m.to_bytes().expect("bytes")));
        assert!(matches!(e, ModelError::SplitPart { part, count: 3 } if part == usize::from(no)), "{e}");
        let message = e.to_string();
        assert!(message.contains(&format!("part {} of 3", no + 1)) && message.contains("llama-gguf-split --merge"), "{message}");
    }
    let mut m = synthetic();
    m.set_meta("split.no", Value::U16(0));
    m.set_meta("split.count", Value::U16(1));
    read(m.to_bytes().expect("bytes")).expect("one part is the whole model");
}

/// BitNet's LM head is always its embedding, as llama.cpp reads it (which refuses a file with a
/// tensor it leaves unread), and llama.cpp multiplies a matrix's product by its scalar
/// `*.scale` where a file has one: a file holding either is refused by that tensor, not run
/// without it.
#[test]
fn a_bitnet_file_with_an_lm_head_or_matrix_scales_is_refused_by_that_tensor() {
    use tokenscope::model::Architecture;
    let spec = SyntheticSpec { architecture: Architecture::Bitnet, ..SyntheticSpec::default() };
    read(SyntheticModel::new(&spec).expect("model").to_bytes().expect("bytes")).expect("a tied BitNet loads");
    let untied = SyntheticSpec { untied_output: true, ..spec.clone() };
    let e = model_error(read(SyntheticModel::new(&untied).expect("model").to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::UnappliedTensor(ref name) if name == "output.weight"), "{e}");
    let mut m = SyntheticModel::new(&spec).expect("model");
    let scale = candle_core::Tensor::from_vec(vec![0.5f32], 1, &Device::Cpu).expect("tensor");
    m.set_tensor("blk.1.ffn_down.scale", QTensor::quantize(&scale, GgmlDType::F32).expect("f32"));
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::UnappliedTensor(ref name) if name == "blk.1.ffn_down.scale"), "{e}");
}

/// LFM2's layers attend or convolve by `attention.head_count_kv`'s value for each (0:
/// convolves), its convolution's width (`shortconv.l_cache`) required as llama.cpp requires
/// it: a file whose attending layers differ in key/value heads, without that width or with
/// one no short convolution has, with a sliding window (llama.cpp's LFM2 slides its attending
/// layers over it), or a convolving block missing its kernel or holding one of another width,
/// is refused by that key or tensor; a file holding no convolving layer at all runs as
/// attention throughout.
#[test]
fn an_lfm2_file_is_refused_by_its_layer_counts_width_or_convolution_tensors() {
    use tokenscope::model::Architecture;
    let spec = SyntheticSpec { architecture: Architecture::Lfm2, n_layers: 3, conv_layers: vec![0, 2], ..SyntheticSpec::default() };
    let m = read(SyntheticModel::new(&spec).expect("model").to_bytes().expect("bytes")).expect("an LFM2 loads");
    let conv = m.config.short_conv.as_ref().expect("convolving layers");
    assert_eq!((conv.layers.clone(), conv.width), (vec![true, false, true], 3));
    assert_eq!(m.config.n_kv_heads, 2);
    // Keys and values of the attending layer, gated inputs of the convolving two.
    assert_eq!(m.config.kv_bytes_per_token(), (2 * 2 * 16 + 2 * 64) * 4);
    let attending = SyntheticSpec { conv_layers: Vec::new(), ..spec.clone() };
    let m = read(SyntheticModel::new(&attending).expect("model").to_bytes().expect("bytes")).expect("an LFM2 attending throughout");
    assert!(m.config.short_conv.is_none());
    let key = |name: &str| format!("lfm2.{name}");
    let refused_by_key = |m: SyntheticModel, want: &str| {
        let e = model_error(read(m.to_bytes().expect("bytes")));
        assert!(matches!(e, ModelError::Metadata { ref key, .. } if key == want), "{want}: {e}");
    };
    let mut m = SyntheticModel::new(&spec).expect("model");
    m.set_meta(&key("attention.head_count_kv"), Value::Array(vec![Value::U32(0), Value::U32(2), Value::U32(4)]));
    refused_by_key(m, &key("attention.head_count_kv"));
    let mut m = SyntheticModel::new(&spec).expect("model");
    m.set_meta(&key("attention.head_count_kv"), Value::Array(vec![Value::U32(0), Value::U32(2)]));
    refused_by_key(m, &key("attention.head_count_kv"));
    let mut m = SyntheticModel::new(&spec).expect("model");
    m.remove_meta(&key("shortconv.l_cache"));
    refused_by_key(m, &key("shortconv.l_cache"));
    for width in [1u32, 17] {
        let mut m = SyntheticModel::new(&spec).expect("model");
        m.set_meta(&key("shortconv.l_cache"), Value::U32(width));
        refused_by_key(m, &key("shortconv.l_cache"));
    }
    let mut m = SyntheticModel::new(&spec).expect("model");
    m.set_meta(&key("attention.sliding_window"), Value::U32(8));
    refused_by_key(m, &key("attention.sliding_window"));
    let mut m = SyntheticModel::new(&spec).expect("model");
    m.remove_tensor("blk.2.shortconv.conv.weight");
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::MissingTensor(ref n) if n == "blk.2.shortconv.conv.weight"), "{e}");
    // A kernel of 4 positions where the file says 3.
    let mut m = SyntheticModel::new(&spec).expect("model");
    let wide = candle_core::Tensor::zeros((64, 4), candle_core::DType::F32, &Device::Cpu).expect("tensor");
    m.set_tensor("blk.0.shortconv.conv.weight", QTensor::quantize(&wide, GgmlDType::F32).expect("f32"));
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::ShapeMismatch { ref name, .. } if name == "blk.0.shortconv.conv.weight"), "{e}");
}

/// Granite 4.0 H's layers attend or scan by `attention.head_count_kv`'s value for each (0:
/// scans), the scan's shape from its `ssm.*` keys, each required as llama.cpp requires them:
/// a file without one of them, with a convolution no scan's could span, heads that do not
/// split the channels evenly or groups that do not split the heads, with a sliding window, or
/// a scanning block missing a tensor or holding one of another shape, is refused by that key
/// or tensor; `rope.scaling.finetuned` false reads as no RoPE in any layer (a Granite 3
/// file's is still refused); a file holding no scanning layer runs as attention throughout;
/// a mixture of experts with a shared expert is read, its tensors required.
#[test]
fn a_granite_4_h_file_is_refused_by_its_scans_keys_or_tensors() {
    let spec = SyntheticSpec::default().granite_4_h();
    let m = read(SyntheticModel::new(&spec).expect("model").to_bytes().expect("bytes")).expect("a Granite 4.0 H loads");
    let ssm = m.config.ssm.as_ref().expect("scanning layers");
    assert_eq!(ssm.layers, vec![true, false, true]);
    assert_eq!((ssm.conv_width, ssm.inner, ssm.state, ssm.heads, ssm.groups), (4, 128, 16, 8, 2));
    assert!(m.config.nope, "rope.scaling.finetuned false: no RoPE");
    assert_eq!(m.config.layer_rope(1), tokenscope::model::LayerRope::Unrotated);
    // Keys and values of the attending layer; each scanning layer's x, B and C before the
    // convolution and each head's step.
    assert_eq!(m.config.kv_bytes_per_token(), (2 * 2 * 16 + 2 * (128 + 2 * 2 * 16 + 8)) * 4);
    let attending = SyntheticSpec { ssm_layers: Vec::new(), ..spec.clone() };
    let m = read(SyntheticModel::new(&attending).expect("model").to_bytes().expect("bytes")).expect("attending throughout");
    assert!(m.config.ssm.is_none());
    let key = |name: &str| format!("granitehybrid.{name}");
    let refused_by_key = |m: SyntheticModel, want: &str| {
        let e = model_error(read(m.to_bytes().expect("bytes")));
        assert!(matches!(e, ModelError::Metadata { ref key, .. } if key == want), "{want}: {e}");
    };
    for name in ["ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "ssm.time_step_rank", "ssm.group_count"] {
        let mut m = SyntheticModel::new(&spec).expect("model");
        m.remove_meta(&key(name));
        refused_by_key(m, &key(name));
    }
    for (name, bad) in
        [("ssm.conv_kernel", 1u32), ("ssm.conv_kernel", 17), ("ssm.state_size", 0), ("ssm.time_step_rank", 7), ("ssm.group_count", 3)]
    {
        let mut m = SyntheticModel::new(&spec).expect("model");
        m.set_meta(&key(name), Value::U32(bad));
        refused_by_key(m, &key(name));
    }
    let mut m = SyntheticModel::new(&spec).expect("model");
    m.set_meta(&key("attention.sliding_window"), Value::U32(8));
    refused_by_key(m, &key("attention.sliding_window"));
    let mut m = SyntheticModel::new(&spec).expect("model");
    m.remove_tensor("blk.2.ssm_a");
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::MissingTensor(ref n) if n == "blk.2.ssm_a"), "{e}");
    // Granite 4.0 H Tiny's and Small's experts with a shared one beside them: read, and its
    // tensors required.
    let moe = SyntheticSpec { ffn_dim: 32, experts: Some([4, 2]), shared_expert: Some(64), ..spec.clone() };
    let m = read(SyntheticModel::new(&moe).expect("model").to_bytes().expect("bytes")).expect("experts with a shared one");
    assert_eq!(m.config.experts.as_ref().and_then(|e| e.shared_ffn_dim), Some(64));
    let mut m = SyntheticModel::new(&moe).expect("model");
    m.remove_tensor("blk.1.ffn_down_shexp.weight");
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::MissingTensor(ref n) if n == "blk.1.ffn_down_shexp.weight"), "{e}");
    // A kernel of 3 positions where the file says 4.
    let mut m = SyntheticModel::new(&spec).expect("model");
    let narrow = candle_core::Tensor::zeros((192, 3), candle_core::DType::F32, &Device::Cpu).expect("tensor");
    m.set_tensor("blk.0.ssm_conv1d.weight", QTensor::quantize(&narrow, GgmlDType::F32).expect("f32"));
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::ShapeMismatch { ref name, .. } if name == "blk.0.ssm_conv1d.weight"), "{e}");
}

/// A mixture of experts (Qwen3-MoE's, Granite MoE's, OLMoE's; Mixtral's llama file) loads
/// with its routing read from the file, and is refused by the key when a qwen3moe file names
/// no experts, when a token would pick none or more than there are, when the count passes the
/// engine's limit, or when a Granite MoE names a shared expert; by
/// the tensor when an expert stack is missing or shaped for another count or width (a file
/// cut into one tensor per expert, as the first Mixtral conversions were, among them).
#[test]
fn a_mixture_of_experts_is_read_and_refused_by_its_keys_and_stacks() {
    use tokenscope::model::config::MAX_EXPERTS;
    use tokenscope::model::{Architecture, Experts, FeedForward};
    let spec = SyntheticSpec {
        architecture: Architecture::Qwen3moe,
        head_dim: Some(16),
        ffn_dim: 32,
        experts: Some([6, 2]),
        ..SyntheticSpec::default()
    };
    let m = read(SyntheticModel::new(&spec).expect("model").to_bytes().expect("bytes")).expect("a Qwen3-MoE loads");
    assert_eq!(m.config.experts, Some(Experts { count: 6, used: 2, ffn_dim: 32, normalized: true, shared_ffn_dim: None }));
    let blocks = m.weights.layers.collect_all().expect("blocks");
    for l in &blocks {
        let FeedForward::Experts(e) = &l.ffn else { panic!("a dense feed-forward in a qwen3moe block") };
        assert_eq!(e.router.shape().dims(), [6, 64]);
        assert_eq!(e.experts.len(), 6);
        assert!(e.experts.iter().all(|x| x.up.shape().dims() == [32, 64] && x.down.shape().dims() == [64, 32] && x.gate.is_some()));
    }
    // Mixtral: a llama file with experts, each as wide as the file's feed-forward.
    let mixtral = SyntheticSpec { experts: Some([4, 2]), ..SyntheticSpec::default() };
    let m = read(SyntheticModel::new(&mixtral).expect("model").to_bytes().expect("bytes")).expect("a Mixtral loads");
    assert_eq!(m.config.experts, Some(Experts { count: 4, used: 2, ffn_dim: 96, normalized: true, shared_ffn_dim: None }));
    let key = |name: &str| format!("qwen3moe.{name}");
    let refused_by_key = |m: SyntheticModel, want: &str| {
        let e = model_error(read(m.to_bytes().expect("bytes")));
        assert!(matches!(e, ModelError::Metadata { ref key, .. } if key == want), "{want}: {e}");
    };
    let mut m = SyntheticModel::new(&spec).expect("model");
    m.remove_meta(&key("expert_count"));
    refused_by_key(m, &key("expert_count"));
    for used in [0u32, 7] {
        let mut m = SyntheticModel::new(&spec).expect("model");
        m.set_meta(&key("expert_used_count"), Value::U32(used));
        refused_by_key(m, &key("expert_used_count"));
    }
    let mut m = SyntheticModel::new(&spec).expect("model");
    m.remove_meta(&key("expert_used_count"));
    refused_by_key(m, &key("expert_used_count"));
    let mut m = SyntheticModel::new(&spec).expect("model");
    m.set_meta(&key("expert_count"), Value::U32(MAX_EXPERTS as u32 + 1));
    refused_by_key(m, &key("expert_count"));
    // A stack missing, and a stack of 5 experts where the file names 6.
    let mut m = SyntheticModel::new(&spec).expect("model");
    m.remove_tensor("blk.1.ffn_down_exps.weight");
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::MissingTensor(ref n) if n == "blk.1.ffn_down_exps.weight"), "{e}");
    let mut m = SyntheticModel::new(&spec).expect("model");
    m.set_meta(&key("expert_count"), Value::U32(5));
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::ShapeMismatch { ref name, .. } if name == "blk.0.ffn_gate_inp.weight"), "{e}");
    // Each expert 16 wide where the file says 32.
    let mut m = SyntheticModel::new(&spec).expect("model");
    m.set_meta(&key("expert_feed_forward_length"), Value::U32(16));
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::ShapeMismatch { ref name, .. } if name == "blk.0.ffn_gate_exps.weight"), "{e}");
    // Granite MoE's shared expert (Granite 4.0 Tiny Preview's), which every token would run.
    let granite = SyntheticSpec {
        architecture: Architecture::Granitemoe,
        granite_scales: Some([12.0, 0.22, 0.1, 8.0]),
        experts: Some([4, 2]),
        ..SyntheticSpec::default()
    };
    let m = read(SyntheticModel::new(&granite).expect("model").to_bytes().expect("bytes")).expect("a Granite MoE loads");
    assert_eq!(m.config.experts, Some(Experts { count: 4, used: 2, ffn_dim: 96, normalized: true, shared_ffn_dim: None }));
    let mut m = SyntheticModel::new(&granite).expect("model");
    m.set_meta("granitemoe.expert_shared_feed_forward_length", Value::U32(64));
    refused_by_key(m, "granitemoe.expert_shared_feed_forward_length");
    // OLMoE's picks keep their probabilities.
    let olmoe = SyntheticSpec {
        architecture: Architecture::Olmoe,
        n_kv_heads: 4,
        experts: Some([4, 2]),
        untied_output: true,
        ..SyntheticSpec::default()
    };
    let m = read(SyntheticModel::new(&olmoe).expect("model").to_bytes().expect("bytes")).expect("an OLMoE loads");
    assert_eq!(m.config.experts, Some(Experts { count: 4, used: 2, ffn_dim: 96, normalized: false, shared_ffn_dim: None }));
    // Mixtral's first conversions: one tensor per expert, no stacks.
    let mut m = SyntheticModel::new(&mixtral).expect("model");
    for name in ["ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"] {
        m.remove_tensor(&format!("blk.0.{name}.weight"));
    }
    let one = candle_core::Tensor::zeros((96, 64), candle_core::DType::F32, &Device::Cpu).expect("tensor");
    m.set_tensor("blk.0.ffn_gate.0.weight", QTensor::quantize(&one, GgmlDType::F32).expect("f32"));
    let e = model_error(read(m.to_bytes().expect("bytes")));
    assert!(matches!(e, ModelError::MissingTensor(ref n) if n == "blk.0.ffn_gate_exps.weight"), "{e}");
}

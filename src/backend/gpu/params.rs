//! The kernels' uniform structs, each defined once: the macro below makes the `#[repr(C)]`
//! Rust struct the host writes and the WGSL `struct` the shaders read (the generated includes
//! [`wgsl_includes`] gives them, e.g. `#include matrix_params.wgsl`), so the two layouts
//! cannot drift apart. Fields are u32 or f32 (4 bytes each, WGSL's uniform layout is then
//! the C one) and every struct is a whole number of 16 bytes.

use crate::model::architecture::Activation;

/// Defines a uniform struct: the Rust struct, and `wgsl()` giving its WGSL declaration under
/// the WGSL name.
macro_rules! uniform_struct {
    ($(#[$meta:meta])* $name:ident as $wgsl:literal { $($(#[$field_meta:meta])* $field:ident: $ty:ident,)* }) => {
        $(#[$meta])*
        #[repr(C)]
        #[derive(Debug, Clone, Copy, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
        pub struct $name {
            $($(#[$field_meta])* pub $field: $ty,)*
        }

        impl $name {
            /// Its WGSL declaration, as the shaders include it.
            pub fn wgsl() -> String {
                let fields: Vec<String> = vec![$(format!("    {}: {},\n", stringify!($field), stringify!($ty))),*];
                format!("struct {} {{\n{}}}\n", $wgsl, fields.concat())
            }

            /// Each field's name and byte offset in the Rust struct (the tests compare them
            /// with the WGSL layout naga computes).
            pub fn offsets() -> Vec<(&'static str, usize)> {
                vec![$((stringify!($field), std::mem::offset_of!($name, $field))),*]
            }
        }

        const _: () = assert!(std::mem::size_of::<$name>() % 16 == 0, "a uniform struct must be a whole number of 16 bytes");
    };
}

uniform_struct! {
    /// The matrix kernels' uniform (`Params` in matrix.wgsl).
    MatrixParams as "Params" {
        /// Output features of the matrix.
        rows: u32,
        /// Input features.
        cols: u32,
        /// 1: add to y (the residual add), 0: overwrite it.
        accumulate: u32,
        /// 1: read the step's last input row (the LM head after a prefill), 0: row 0.
        last_token: u32,
        /// RMSNorm epsilon (NORM variants).
        eps: f32,
        /// Query heads (ROPE_KV, ATTENTION, COMBINE, HEADS and the MERGE variants; 0 otherwise).
        n_heads: u32,
        /// Key/value heads (likewise).
        n_kv_heads: u32,
        /// Dimensions per head (likewise).
        head_dim: u32,
        /// MATMUL: elements from one token's outputs to the next in y (`rows`, or the whole
        /// LM head's rows when this matrix is one band of it).
        y_stride: u32,
        /// COMBINE: chunks of split-K attention per head in the chunk statistics; HEADS,
        /// MERGE_IN and MERGE_OUT: chunks per head in the per-head parts.
        n_chunks: u32,
        /// MERGE_IN and MERGE_OUT: values per part of the per-head parts after its m and l
        /// (the output projection's rows, the model's dim); 0 otherwise.
        part_rows: u32,
        /// GLU's gate and ACT's rows: the activation, [`activation_code`]'s (0 SiLU, SwiGLU's;
        /// ACT_GELU GELU's tanh form, GeGLU's and GPT-2's; ACT_RELU_SQUARED the squared ReLU,
        /// Arcee's and Nemotron's).
        activation: u32,
        /// ATTENTION and HEADS: what each query-key dot product is multiplied by
        /// (`1 / sqrt(head_dim)`, or Granite's attention scale); 0 otherwise.
        score_scale: f32,
        /// What each output row is multiplied by before it is written or added to y
        /// (Granite's residual scale in the output and down projections; 1 otherwise). Not
        /// read by the pair epilogues (GLU, ROPE_KV).
        out_scale: f32,
        /// ATTENTION: the cap of every scaled score (`cap * tanh(s / cap)`, Gemma 2's
        /// `attn_logit_softcapping`; softcap.wgsl), 0 for none.
        softcap: f32,
        /// ATTENTION: ALiBi's first base, `m0` of [`alibi_bases`]: each head's slope is a
        /// power of it or of `alibi_m1` (BLOOM's; alibi.wgsl); 0 for none.
        alibi_m0: f32,
        /// ATTENTION: ALiBi's second base, `m1` (likewise).
        alibi_m1: f32,
        /// ROPE_KV: every q, k and v element is clamped to `[-clamp_kqv, clamp_kqv]` after
        /// its bias (OLMo 1.7's); 0 for none.
        clamp_kqv: f32,
        /// HEAD_NORM: 1 where each head's norm comes after RoPE (Hunyuan's), 0 before it.
        norm_after_rope: u32,
        /// EXPERTS: the experts each token picked (a mixture of experts' `used`), the
        /// dispatch's workgroups along y; 0 otherwise.
        experts_used: u32,
    }
}

uniform_struct! {
    /// The embedding kernel's uniform (`Params` in embedding.wgsl).
    EmbeddingParams as "Params" {
        /// Columns of the table (the model's dim).
        dim: u32,
        /// The token id of the table's first row (a band of a larger table; 0 otherwise).
        first_row: u32,
        /// Rows of the table: tokens outside `first_row ..` that many are left to other bands.
        rows: u32,
        /// What each row is multiplied by (Gemma 3's `sqrt(dim)`; 1 otherwise).
        scale: f32,
    }
}

uniform_struct! {
    /// The RoPE/KV-write kernel's uniform (`Params` in rope_kv.wgsl).
    RopeParams as "Params" {
        /// Query heads.
        n_heads: u32,
        /// Key/value heads.
        n_kv_heads: u32,
        /// Dimensions per head.
        head_dim: u32,
        /// RMSNorm epsilon of the head norm (HEAD_NORM variants).
        eps: f32,
        /// Every q, k and v element is clamped to `[-clamp_kqv, clamp_kqv]` after its bias
        /// (OLMo 1.7's, [`Config::clamp_kqv`](crate::model::Config::clamp_kqv)); 0 for none.
        clamp_kqv: f32,
        /// 1: each head's norm comes after RoPE (Hunyuan's; its gains multiply the turned
        /// pairs), 0: before it (HEAD_NORM variants).
        norm_after_rope: u32,
        /// Padding to 16 bytes.
        _pad2: u32,
        /// Padding to 16 bytes.
        _pad3: u32,
    }
}

uniform_struct! {
    /// The attention kernels' uniform (`Params` in attention_partial.wgsl and
    /// attention_combine.wgsl).
    AttentionParams as "Params" {
        /// Query heads.
        n_heads: u32,
        /// Key/value heads.
        n_kv_heads: u32,
        /// Dimensions per head.
        head_dim: u32,
        /// Chunks of split-K's positions ([`KernelOptions::split_chunk`](super::kernels::KernelOptions::split_chunk)) the capacity spans.
        n_chunks: u32,
        /// Positions a token attends over, its own included, in a sliding-window layer
        /// (Gemma's); 0: every position up to its own.
        window: u32,
        /// The cap of every scaled score, `cap * tanh(s / cap)` (Gemma 2's); 0: uncapped.
        softcap: f32,
        /// What each query-key dot product is multiplied by (`1 / sqrt(head_dim)`, or
        /// Granite's attention scale).
        score_scale: f32,
        /// ALiBi's first base, `m0` of [`alibi_bases`]: each head's slope is a power of it or
        /// of `alibi_m1` (BLOOM's; alibi.wgsl); 0: no ALiBi.
        alibi_m0: f32,
        /// ALiBi's second base, `m1` (likewise).
        alibi_m1: f32,
        /// Padding to 16 bytes.
        _pad0: u32,
        /// Padding to 16 bytes.
        _pad1: u32,
        /// Padding to 16 bytes.
        _pad2: u32,
    }
}

uniform_struct! {
    /// The post-norm kernel's uniform (`Params` in norm_add.wgsl).
    NormParams as "Params" {
        /// Elements of a row (the model's dim).
        dim: u32,
        /// RMSNorm epsilon.
        eps: f32,
        /// Padding to 16 bytes.
        _pad0: u32,
        /// Padding to 16 bytes.
        _pad1: u32,
    }
}

uniform_struct! {
    /// The short convolution's uniform (`Params` in short_conv.wgsl, LFM2's).
    ConvParams as "Params" {
        /// Channels (the model's dim).
        dim: u32,
        /// Positions each channel's kernel spans.
        width: u32,
        /// Padding to 16 bytes.
        _pad0: u32,
        /// Padding to 16 bytes.
        _pad1: u32,
    }
}

uniform_struct! {
    /// A mixture of experts' routing and sum uniform (`Params` in expert_pick.wgsl and
    /// expert_sum.wgsl).
    ExpertParams as "Params" {
        /// Experts in the layer (the router's rows).
        count: u32,
        /// Experts each token picks.
        used: u32,
        /// 1: the picked probabilities are divided by their sum; 0: kept as they are.
        normalized: u32,
        /// The residual stream's width (expert_sum.wgsl's rows).
        dim: u32,
        /// What the weighted sum is multiplied by as it joins the residual stream (Granite's
        /// residual scale; 1 otherwise).
        out_scale: f32,
        /// Padding to 16 bytes.
        _pad0: u32,
        /// Padding to 16 bytes.
        _pad1: u32,
        /// Padding to 16 bytes.
        _pad2: u32,
    }
}

uniform_struct! {
    /// The per-step uniform every step-dependent kernel reads (`Step`, one buffer written
    /// once per step).
    StepParams as "Step" {
        /// KV-cache position of the step's first token.
        pos: u32,
        /// Tokens in the step (1 for decode, up to 64 in a prefill pass).
        n_tokens: u32,
        /// Padding to 16 bytes.
        _pad0: u32,
        /// Padding to 16 bytes.
        _pad1: u32,
    }
}

impl StepParams {
    /// The step of `n_tokens` tokens from position `pos`.
    pub fn new(pos: u32, n_tokens: u32) -> Self {
        StepParams { pos, n_tokens, ..Default::default() }
    }
}

uniform_struct! {
    /// The attention-weights kernel's per-layer uniform (`Inspect` in attention_weights.wgsl):
    /// which layer's rows of the output it writes.
    InspectParams as "Inspect" {
        /// The layer, 0-based.
        layer: u32,
        /// Padding to 16 bytes.
        _pad0: u32,
        /// Padding to 16 bytes.
        _pad1: u32,
        /// Padding to 16 bytes.
        _pad2: u32,
    }
}

/// The matrix kernels' code for `activation` (`Params.activation`): 0 SiLU, and the codes
/// `constants.wgsl` names ACT_GELU and ACT_RELU_SQUARED.
pub fn activation_code(activation: Activation) -> u32 {
    match activation {
        Activation::Silu => 0,
        Activation::GeluTanh => 1,
        Activation::ReluSquared => 2,
    }
}

/// ALiBi's two bases `[m0, m1]` for `n_heads` heads under the largest bias `max_bias`
/// ([`model::alibi::alibi_bases`](crate::model::alibi::alibi_bases), which the CPU's slopes
/// are powers of), or `[0, 0]` for `max_bias` 0: no ALiBi.
pub fn alibi_bases(n_heads: u32, max_bias: f32) -> [f32; 2] {
    if max_bias == 0.0 {
        [0.0; 2]
    } else {
        crate::model::alibi::alibi_bases(n_heads as usize, max_bias)
    }
}

/// Each uniform struct's WGSL declaration and its Rust fields' offsets.
pub fn all_layouts() -> [(String, Vec<(&'static str, usize)>); 9] {
    [
        (MatrixParams::wgsl(), MatrixParams::offsets()),
        (EmbeddingParams::wgsl(), EmbeddingParams::offsets()),
        (RopeParams::wgsl(), RopeParams::offsets()),
        (AttentionParams::wgsl(), AttentionParams::offsets()),
        (NormParams::wgsl(), NormParams::offsets()),
        (ConvParams::wgsl(), ConvParams::offsets()),
        (ExpertParams::wgsl(), ExpertParams::offsets()),
        (StepParams::wgsl(), StepParams::offsets()),
        (InspectParams::wgsl(), InspectParams::offsets()),
    ]
}

/// The generated includes: each uniform struct's WGSL under the name the shaders
/// `#include`.
pub fn wgsl_includes() -> [(&'static str, String); 9] {
    [
        ("matrix_params.wgsl", MatrixParams::wgsl()),
        ("embedding_params.wgsl", EmbeddingParams::wgsl()),
        ("rope_params.wgsl", RopeParams::wgsl()),
        ("attention_struct.wgsl", AttentionParams::wgsl()),
        ("norm_params.wgsl", NormParams::wgsl()),
        ("conv_params.wgsl", ConvParams::wgsl()),
        ("expert_params.wgsl", ExpertParams::wgsl()),
        ("step.wgsl", StepParams::wgsl()),
        ("inspect_params.wgsl", InspectParams::wgsl()),
    ]
}

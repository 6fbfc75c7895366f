//! The weight-matrix op: `y (+)= W x` with the weights dequantized inside the kernel
//! (matrix.wgsl, one template for every format and fusion), decode (matvec) and prefill
//! (matmul); its CPU twins are `cpu::ops` and the dequantized matrix (tests/gpu_kernels.rs).

use super::super::device::GpuContext;
use super::super::kernels::{prepare, whole, Bind, Dispatch, Kernels, ShaderSource, FUSED_ATTENTION_MAX_WIDTH};
use super::super::params::{activation_code, alibi_bases, MatrixParams};
use super::super::repack::Repacked;
use crate::error::{Error, Result};
use crate::model::architecture::Activation;

/// Every matrix kernel (decode and prefill, every weight format, every fusion) comes from
/// this template.
const MATRIX: &str = include_str!("../../../../shaders/matrix.wgsl");

/// Tokens one matmul workgroup row takes (the vec4 accumulator).
pub const MATMUL_TOKENS: u32 = 4;

/// Most workgroups one dispatch dimension may have (WebGPU's default limit).
pub const MAX_GROUPS: u32 = 65_535;

/// The per-head projection (HEADS) reads a head's columns of the output projection as whole
/// blocks: the formats with blocks of at most this many columns have variants (a head of 32
/// or a multiple of it), and the host checks that the head's width is a multiple of the
/// matrix's block.
pub const HEADS_MIN_BLOCK_COLUMNS: u32 = 32;

/// Threads that share a row in the per-head projection (at most; fewer where the decode
/// kernels take fewer): a head's columns of this model's output projection are 8 units of
/// Q4_1, so 8 threads take one each and a workgroup of 256 covers 32 rows.
pub const HEADS_THREADS_PER_ROW: u32 = 8;

/// Widest head the head-norm epilogue takes (HEAD_NORM in matrix.wgsl: the head's rows in
/// workgroup memory, the override HEAD_WIDTH): Gemma 3's 256 and room to spare.
pub const MAX_HEAD_NORM_WIDTH: u32 = 512;

/// Most (head, chunk) parts the merge prologue and epilogue weigh (`part_weights` in
/// head_merge.wgsl).
pub const MAX_HEAD_PARTS: u32 = 256;

/// How a weight matrix is stored on the GPU (one block of the matrix template each; the
/// layouts are described in shaders/weight_formats.wgsl).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WeightFormat {
    /// Q4_1 blocks (Q4_0 is repacked into them exactly).
    Q4_1,
    /// Q5_1 blocks (Q5_0 is repacked into them exactly).
    Q5_1,
    /// Q8_0 blocks.
    Q8_0,
    /// Q2_K super-blocks of 256 weights, as stored.
    Q2K,
    /// Q3_K super-blocks of 256 weights, as stored and padded to whole words.
    Q3K,
    /// Q4_K super-blocks of 256 weights, as stored.
    Q4K,
    /// Q5_K super-blocks, as stored.
    Q5K,
    /// Q6_K super-blocks, as stored and padded to whole words.
    Q6K,
    /// 8-bit integers with an f32 scale and offset per 16 weights: the exact common layout of
    /// a stack whose parts' quantized formats differ (`crate::backend::cpu::affine16`).
    Affine16,
    /// Half floats, two per word.
    F16,
    /// Brain floats, two per word.
    BF16,
    /// Single floats.
    F32,
}

impl WeightFormat {
    /// Every format.
    pub const ALL: [WeightFormat; 12] = [
        WeightFormat::Q4_1,
        WeightFormat::Q5_1,
        WeightFormat::Q8_0,
        WeightFormat::Q2K,
        WeightFormat::Q3K,
        WeightFormat::Q4K,
        WeightFormat::Q5K,
        WeightFormat::Q6K,
        WeightFormat::Affine16,
        WeightFormat::F16,
        WeightFormat::BF16,
        WeightFormat::F32,
    ];

    /// The template's define (and the kernel name's part) for it.
    pub fn define(self) -> &'static str {
        match self {
            WeightFormat::Q4_1 => "Q4_1",
            WeightFormat::Q5_1 => "Q5_1",
            WeightFormat::Q8_0 => "Q8_0",
            WeightFormat::Q2K => "Q2_K",
            WeightFormat::Q3K => "Q3_K",
            WeightFormat::Q4K => "Q4_K",
            WeightFormat::Q5K => "Q5_K",
            WeightFormat::Q6K => "Q6_K",
            WeightFormat::Affine16 => "AFFINE_16",
            WeightFormat::F16 => "F16",
            WeightFormat::BF16 => "BF16",
            WeightFormat::F32 => "F32",
        }
    }

    /// Every define the format sets in weight_formats.wgsl: its own, `K_SCALES` for the K
    /// formats with 6-bit scales and mins, and `SCALES_16` for those with a scale per 16
    /// weights (Q2_K's with a min beside each).
    pub fn defines(self) -> &'static [&'static str] {
        match self {
            WeightFormat::Q4_1 => &["Q4_1"],
            WeightFormat::Q5_1 => &["Q5_1"],
            WeightFormat::Q8_0 => &["Q8_0"],
            WeightFormat::Q4K => &["Q4_K", "K_SCALES"],
            WeightFormat::Q5K => &["Q5_K", "K_SCALES"],
            WeightFormat::Q2K => &["Q2_K", "SCALES_16"],
            WeightFormat::Q3K => &["Q3_K", "SCALES_16"],
            WeightFormat::Q6K => &["Q6_K", "SCALES_16"],
            WeightFormat::Affine16 => &["AFFINE_16"],
            WeightFormat::F16 => &["F16"],
            WeightFormat::BF16 => &["BF16"],
            WeightFormat::F32 => &["F32"],
        }
    }

    /// The WGSL names of its buffers (binding 1, and binding 2 if it has a second).
    pub fn bindings(self) -> (&'static str, Option<&'static str>) {
        match self {
            WeightFormat::Q4_1 | WeightFormat::Q5_1 => ("qs", Some("dm")),
            WeightFormat::Q8_0 => ("qs", Some("d")),
            WeightFormat::Affine16 => ("qs", Some("ab")),
            WeightFormat::Q2K | WeightFormat::Q3K | WeightFormat::Q4K | WeightFormat::Q5K | WeightFormat::Q6K => ("blocks", None),
            WeightFormat::F16 | WeightFormat::BF16 | WeightFormat::F32 => ("w", None),
        }
    }

    /// Weights in one unit of a row's product, a word of them (`UNIT_WEIGHTS` in matrix.wgsl,
    /// which each format's `unit_dot` sets; tests/gpu_kernels.rs reads it there for every
    /// format): a thread of a matrix kernel takes a row's units in turn.
    pub fn unit_weights(self) -> u32 {
        match self {
            WeightFormat::Q4_1 | WeightFormat::Q5_1 | WeightFormat::Q4K | WeightFormat::Q5K => 8,
            WeightFormat::Q8_0 | WeightFormat::Affine16 => 4,
            WeightFormat::Q2K | WeightFormat::Q3K | WeightFormat::Q6K => 16,
            WeightFormat::F16 | WeightFormat::BF16 => 2,
            WeightFormat::F32 => 1,
        }
    }

    /// Columns a row's length must be a multiple of.
    pub fn block(self) -> u32 {
        match self {
            // Affine16 is made only from formats of whole 32-weight blocks.
            WeightFormat::Q4_1 | WeightFormat::Q5_1 | WeightFormat::Q8_0 | WeightFormat::Affine16 => 32,
            WeightFormat::Q2K | WeightFormat::Q3K | WeightFormat::Q4K | WeightFormat::Q5K | WeightFormat::Q6K => 256,
            WeightFormat::F16 | WeightFormat::BF16 | WeightFormat::F32 => 2,
        }
    }
}

/// One variant of matrix.wgsl: decode or prefill, the weight format, and what is fused
/// around the product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MatrixKernel {
    /// Prefill (matrix-matrix, many tokens) rather than decode (matrix-vector).
    pub prefill: bool,
    /// The weight format it dequantizes.
    pub format: WeightFormat,
    /// RMSNorm of the input row(s) as a prologue.
    pub norm: bool,
    /// SwiGLU of interleaved gate/up rows as the epilogue.
    pub glu: bool,
    /// Each row's bias added to its product, read from the gain binding (not with `norm` or a
    /// pair epilogue: GPT-2's output, up and down projections).
    pub bias: bool,
    /// The activation on each row after its bias (not with `glu`: the ungated up projection,
    /// GPT-2's GELU, Arcee's and Nemotron's squared ReLU; which one is a uniform).
    pub act: bool,
    /// Decode only: RoPE and the KV-cache write as the epilogue (the Q/K/V projection).
    pub rope_kv: bool,
    /// With `rope_kv` and `norm`: each row's bias, read from the gain buffer after the gains,
    /// added before RoPE (Qwen2's Q/K/V biases).
    pub qkv_bias: bool,
    /// With `rope_kv`, not `qkv_bias`: a head a workgroup, each q and k head RMS-normed with
    /// its gain before RoPE, the gains read from the gain buffer, after the input's with
    /// `norm` (Qwen3's, Gemma 3's and, without a pre-norm, EXAONE 4's head norms).
    pub head_norm: bool,
    /// Decode only: every head's attention over the cache as the prologue (the output
    /// projection, while the context is short:
    /// [`KernelOptions::fused_positions`](super::super::kernels::KernelOptions::fused_positions)).
    pub attention: bool,
    /// Decode only: split-K attention's chunk statistics merged as the prologue (the output
    /// projection past the short context).
    pub combine: bool,
    /// Decode only, never with subgroups: one query head's attention over one chunk of the
    /// cache as the prologue, times that head's columns, into per-head parts (the output
    /// projection per head while the context is short:
    /// [`KernelOptions::per_head_attention`](super::super::kernels::KernelOptions::per_head_attention)).
    pub heads: bool,
    /// Decode only: the input row plus the `heads` parts merged as the prologue (the
    /// feed-forward's gate and up rows after a per-head projection).
    pub merge_in: bool,
    /// Decode only: each output row adds the `heads` parts' row, merged, beside its product
    /// (the down projection after a per-head projection).
    pub merge_out: bool,
    /// Decode only: the input row plus another row RMS-normed with its own gain as the
    /// prologue (the feed-forward's gate and up rows after a post-normed attention, Gemma 3's).
    pub post_norm_in: bool,
    /// Decode kernel, decode and prefill alike: a mixture of experts' stacked matrices, each
    /// workgroup row set computing one pick's expert (the gate/up projection with `glu`, the
    /// down projection without).
    pub experts: bool,
    /// With `rope_kv`, `attention` or `heads`: the cache holds half floats.
    pub kv_f16: bool,
    /// Decode only: whole subgroups per row, each reduced with subgroupAdd (several a row,
    /// their sums met in workgroup memory, where a subgroup has fewer lanes than the row's
    /// threads: the override `SHARED_ROWS`).
    pub subgroup: bool,
}

impl MatrixKernel {
    /// A variant with nothing fused (the fusions are set by field).
    pub fn plain(prefill: bool, format: WeightFormat, subgroup: bool) -> Self {
        MatrixKernel {
            prefill,
            format,
            norm: false,
            glu: false,
            bias: false,
            act: false,
            rope_kv: false,
            qkv_bias: false,
            head_norm: false,
            attention: false,
            combine: false,
            heads: false,
            merge_in: false,
            merge_out: false,
            post_norm_in: false,
            experts: false,
            kv_f16: false,
            subgroup,
        }
    }

    /// Every variant: both shapes, every format, plain, normed, normed with SwiGLU, SwiGLU
    /// alone (OLMo 2's feed-forward, without a pre-norm), biased, with an activation or not
    /// (GPT-2's projections), and an activation normed or alone (Arcee's and Nemotron's up
    /// projections, without biases);
    /// decode also with RoPE/KV write (normed: with Q/K/V biases, with head norms, or plain;
    /// with head norms alone, EXAONE 4's) and with the attention prologue, over both cache
    /// precisions, with the combine prologue (each of those two biased too, GPT-2's output
    /// projection), the per-head forms (the projection per
    /// head over both cache precisions, for the formats whose blocks fit in a head of 32
    /// columns, and normed SwiGLU and the accumulating product merging its parts), and normed
    /// SwiGLU after a post norm, normed or not, and a mixture of experts' normed SwiGLU and
    /// down projections: the forms the forward pass uses; and each decode one but the
    /// per-head projection with subgroups too.
    pub fn all() -> impl Iterator<Item = MatrixKernel> {
        [(false, false), (false, true), (true, false)].into_iter().flat_map(|(prefill, subgroup)| {
            WeightFormat::ALL.into_iter().flat_map(move |format| {
                let plain = MatrixKernel::plain(prefill, format, subgroup);
                let normed = MatrixKernel { norm: true, ..plain };
                let biased = MatrixKernel { bias: true, ..plain };
                let mut all = vec![plain, normed, MatrixKernel { glu: true, ..normed }, MatrixKernel { glu: true, ..plain }];
                all.extend([biased, MatrixKernel { act: true, ..biased }]);
                all.extend([MatrixKernel { act: true, ..normed }, MatrixKernel { act: true, ..plain }]);
                if !prefill {
                    all.push(MatrixKernel { combine: true, ..plain });
                    all.push(MatrixKernel { combine: true, ..biased });
                    for kv_f16 in [false, true] {
                        all.push(MatrixKernel { norm: true, rope_kv: true, kv_f16, ..plain });
                        all.push(MatrixKernel { norm: true, rope_kv: true, qkv_bias: true, kv_f16, ..plain });
                        // Without a norm in the prologue (StableLM's LayerNorm before it).
                        all.push(MatrixKernel { rope_kv: true, kv_f16, ..plain });
                        all.push(MatrixKernel { rope_kv: true, qkv_bias: true, kv_f16, ..plain });
                        all.push(MatrixKernel { norm: true, rope_kv: true, head_norm: true, kv_f16, ..plain });
                        all.push(MatrixKernel { rope_kv: true, head_norm: true, kv_f16, ..plain });
                        all.push(MatrixKernel { attention: true, kv_f16, ..plain });
                        all.push(MatrixKernel { attention: true, kv_f16, ..biased });
                        if !subgroup && format.block() <= HEADS_MIN_BLOCK_COLUMNS {
                            all.push(MatrixKernel { heads: true, kv_f16, ..plain });
                        }
                    }
                    all.push(MatrixKernel { merge_in: true, norm: true, glu: true, ..plain });
                    all.push(MatrixKernel { merge_out: true, ..plain });
                    all.push(MatrixKernel { post_norm_in: true, norm: true, glu: true, ..plain });
                    all.push(MatrixKernel { post_norm_in: true, glu: true, ..plain });
                    all.push(MatrixKernel { experts: true, norm: true, glu: true, ..plain });
                    all.push(MatrixKernel { experts: true, ..plain });
                }
                all
            })
        })
    }

    /// The variant's name, e.g. `matvec_q4_1_norm_rope_kv_kv_f16_subgroup.wgsl`.
    pub fn name(&self) -> String {
        format!(
            "{}_{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}.wgsl",
            if self.prefill { "matmul" } else { "matvec" },
            self.format.define().to_lowercase(),
            if self.experts { "_experts" } else { "" },
            if self.attention { "_attention" } else { "" },
            if self.combine { "_combine" } else { "" },
            if self.heads { "_heads" } else { "" },
            if self.merge_in { "_merged" } else { "" },
            if self.merge_out { "_add_merged" } else { "" },
            if self.post_norm_in { "_post_normed" } else { "" },
            if self.norm { "_norm" } else { "" },
            if self.glu { "_glu" } else { "" },
            if self.bias { "_row_bias" } else { "" },
            if self.act { "_act" } else { "" },
            if self.rope_kv { "_rope_kv" } else { "" },
            if self.qkv_bias { "_bias" } else { "" },
            if self.head_norm { "_head_norm" } else { "" },
            if self.kv_f16 { "_kv_f16" } else { "" },
            if self.subgroup { "_subgroup" } else { "" }
        )
    }

    /// Whether it computes its input row into workgroup memory (`att_in`, ATT_IN in
    /// matrix.wgsl) before its rows' products: the attention, combine, per-head, merge and
    /// post-norm prologues. Its pipeline is made for the matrix's width (the override
    /// ATT_WIDTH).
    pub fn keeps_input_row(&self) -> bool {
        self.attention || self.combine || self.heads || self.merge_in || self.post_norm_in
    }

    /// Its source: matrix.wgsl with its defines.
    pub fn source(&self) -> ShaderSource {
        let mut defines = vec![if self.prefill { "MATMUL" } else { "MATVEC" }];
        defines.extend(self.format.defines());
        let flags = [
            (self.norm, "NORM"),
            (self.norm || self.head_norm || self.qkv_bias || self.bias, "GAINS"),
            (self.glu, "GLU"),
            (self.bias, "BIAS"),
            (self.act, "ACT"),
            (self.rope_kv, "ROPE_KV"),
            (self.qkv_bias, "QKV_BIAS"),
            (self.head_norm, "HEAD_NORM"),
            (self.attention, "ATTENTION"),
            (self.combine, "COMBINE"),
            (self.heads, "HEADS"),
            (self.merge_in, "MERGE_IN"),
            (self.merge_out, "MERGE_OUT"),
            (self.post_norm_in, "POST_NORM_IN"),
            (self.experts, "EXPERTS"),
            (self.keeps_input_row(), "ATT_IN"),
            (self.attention || self.heads, "QUERIES"),
            (self.merge_in || self.merge_out, "HEAD_PARTS"),
            (self.glu || (self.rope_kv && !self.head_norm), "PAIRS"),
            (self.rope_kv || self.attention || self.heads, "KV_CACHE"),
            (self.kv_f16, "KV_F16"),
            (self.subgroup, "SUBGROUP"),
            // A quantized row is whole blocks of 32 or 256 columns, so it starts on a vec4
            // and a unit's columns come in fours.
            (!self.prefill && self.format.block() >= 32, "X_VEC4"),
        ];
        defines.extend(flags.iter().filter(|f| f.0).map(|f| f.1));
        ShaderSource::new(self.name(), MATRIX, defines)
    }
}

/// One linear layer's operands for [`Kernels::linear`]: `y (+)= W x`, optionally with the
/// input RMSNorm-ed first and/or SwiGLU of interleaved gate/up rows after.
pub struct LinearOp<'a> {
    /// The weights.
    pub w: &'a GpuMatrix,
    /// The input rows, `[n_tokens, cols]`.
    pub x: &'a wgpu::Buffer,
    /// The output: `[n_tokens, rows]`, or `[n_tokens, rows / 2]` with `glu`.
    pub y: Bind<'a>,
    /// Add to y (the residual add) instead of overwriting it.
    pub accumulate: bool,
    /// Decode only: read the step's last input row (the LM head after a prefill).
    pub last_token: bool,
    /// RMSNorm the input first with this gain (`[cols]`) and epsilon.
    pub norm: Option<(&'a wgpu::Buffer, f32)>,
    /// Write act(row 2i) * row 2i+1 for output i, act [`LinearOp::activation`] (SwiGLU,
    /// GeGLU).
    pub glu: bool,
    /// With `glu` or `act`: the activation (SiLU unless set; a uniform, no variant of its own).
    pub activation: Activation,
    /// Each row's bias, `[rows]` in a buffer of at least [`own_bias_len`] floats, added to its
    /// product before `act` and `out_scale` (GPT-2's output, up and down projections): bound
    /// where a norm's gains would be, so not with `norm`, nor with a pair epilogue or the
    /// per-head and merge forms.
    pub bias: Option<&'a wgpu::Buffer>,
    /// [`LinearOp::activation`] on each row, after its bias where it has one (the ungated up
    /// projection: GPT-2's GELU, Arcee's and Nemotron's squared ReLU): not with `glu`,
    /// `rope_kv` or `accumulate`.
    pub act: bool,
    /// Decode only: the rows are one token's `[q | k | v]`; turn q and k by RoPE, write q to
    /// `y` and k, v into the caches at the step's position.
    pub rope_kv: Option<RopeKv<'a>>,
    /// Decode only: the input is every head's attention for the queries in `x` over the cache
    /// (positions 0 ..= the step's, at most
    /// [`KernelOptions::fused_positions`](super::super::kernels::KernelOptions::fused_positions)),
    /// computed in the kernel.
    pub attention: Option<AttentionInput<'a>>,
    /// Decode only: the input is every head's attention merged from split-K's chunk
    /// statistics (part 1's, for the step's one token), merged in the kernel; `x` is unused.
    pub combine: Option<CombineInput<'a>>,
    /// Decode only: the output projection per query head: `x` holds the step's rotated
    /// queries, and `y` gets each (head, chunk)'s part, its softmax statistics and its
    /// un-normalized attention output times the head's columns, `[n_heads, n_chunks, 2 +
    /// rows]`; nothing is added to the residual stream here (`merge_in` and `merge_out` do).
    pub heads: Option<HeadsInput<'a>>,
    /// Decode only: the input row plus the per-head parts merged (the feed-forward's gate
    /// and up rows after `heads`; with `norm` and `glu`).
    pub merge_in: Option<HeadParts<'a>>,
    /// Decode only: each output row also adds the per-head parts' row, merged (the down
    /// projection after `heads`; with `accumulate`).
    pub merge_out: Option<HeadParts<'a>>,
    /// Decode only: the input row plus a sublayer's output RMS-normed with its gain (the
    /// feed-forward's gate and up rows after a post-normed attention, Gemma's and OLMo 2's;
    /// with `glu`, and `norm` where the model has pre-norms, whose epsilon must be the post
    /// norm's). `x` is only read: the layer's last post norm adds that term to it
    /// ([`PostNorm`](super::PostNorm)'s `first`).
    pub post_norm_in: Option<PostNormInput<'a>>,
    /// What each product is multiplied by where it is stored, written or added (Granite's
    /// residual scale in the output and down projections; 1 otherwise). Not with `glu` or
    /// `rope_kv`, whose epilogues write their own.
    pub out_scale: f32,
    /// Prefill only: elements from one token's outputs to the next in `y` when `y` holds
    /// more than this matrix's rows (a band of the LM head, bound at its first row); `None`:
    /// the matrix's rows.
    pub y_stride: Option<u32>,
    /// A mixture of experts' projection: `w` is every expert's matrix stacked (its `rows`
    /// one expert's), and each token runs the experts it picked; see [`ExpertPicks`].
    pub experts: Option<ExpertPicks<'a>>,
}

/// The EXPERTS form's operands (see [`LinearOp::experts`]): with `glu` (the experts'
/// interleaved gate and up rows) each pick reads its token's row of `x` and writes `y`
/// `[n_tokens, used, rows / 2]`; without (the down projections) it reads its own row of `x`,
/// `[n_tokens, used, cols]`, and writes `y` `[n_tokens, used, rows]`. One kernel for decode
/// and prefill: its workgroups along z are the step's tokens.
#[derive(Clone, Copy)]
pub struct ExpertPicks<'a> {
    /// Each token's picks, `[n_tokens, used, 2]` u32: expert, weight bits (expert_pick.wgsl).
    pub picks: &'a wgpu::Buffer,
    /// Experts each token picks.
    pub used: u32,
    /// Experts in the stack.
    pub count: u32,
}

/// The ROPE_KV epilogue's operands (see [`LinearOp::rope_kv`]).
pub struct RopeKv<'a> {
    /// `[n_heads, n_kv_heads, head_dim]`.
    pub shape: [u32; 3],
    /// The layer's K cache, `[context, kv]` f32 (or half pairs).
    pub keys: Bind<'a>,
    /// The layer's V cache.
    pub values: Bind<'a>,
    /// RoPE's cos/sin, [`rope_table`].
    pub table: &'a wgpu::Buffer,
    /// Each row's bias added before RoPE (Qwen2's and StableLM 2's Q/K/V biases), where
    /// [`QkvBiases`] says.
    pub bias: Option<QkvBiases<'a>>,
    /// Each q and k head is RMS-normed before RoPE (Qwen3's, Gemma 3's and EXAONE 4's head
    /// norms), the gains where [`HeadGains`] says. Not with `bias`; the matrix is computed
    /// a head a workgroup ([`Kernels::head_norm_epilogue_fits`] says where it can be).
    pub head_norm: Option<HeadGains<'a>>,
    /// Every q, k and v value is clamped to `[-clamp, clamp]` after its bias (OLMo 1.7's
    /// clamp); 0 for none. Not with `head_norm` (no model has both).
    pub clamp: f32,
    /// With `head_norm`: each head's norm comes after RoPE, its gains multiplying the turned
    /// pairs (Hunyuan's).
    pub norm_after_rope: bool,
}

/// Where the RoPE/KV epilogue's Q/K/V biases are, one a row, `[n_heads * head_dim + 2 kv]`.
#[derive(Clone, Copy)]
pub enum QkvBiases<'a> {
    /// In the op's norm gain buffer after its gains, `[cols + rows]` (Qwen2's): the kernel
    /// has no storage binding to spare for a buffer of their own (WebGPU's default is 8 a
    /// stage).
    AfterNorm,
    /// In a buffer of their own, bound where the norm's gains would be, for an op with no
    /// norm in its prologue (StableLM 2's projection reads its LayerNorm's output), at least
    /// [`own_bias_len`] floats (a decode kernel reads the binding four floats at a time).
    Own(&'a wgpu::Buffer),
}

/// Floats of a [`QkvBiases::Own`] buffer for `rows` biases: rounded up to whole vec4s, as a
/// decode kernel reads its gain binding as `array<vec4<f32>>` (the padding is never read).
pub fn own_bias_len(rows: usize) -> usize {
    rows.next_multiple_of(4)
}

/// Where the head-norm epilogue's gains are, q's then k's, `[2 head_dim]`.
#[derive(Clone, Copy)]
pub enum HeadGains<'a> {
    /// In the op's norm gain buffer after its own gains, `[cols + 2 head_dim]` (the kernel has
    /// no storage binding to spare for theirs), normed with the norm's epsilon.
    AfterNorm,
    /// In a buffer of their own, bound where the norm's gains would be, for an op with no
    /// norm (EXAONE 4's projections read `x` unnormed), with this epsilon.
    Own(&'a wgpu::Buffer, f32),
}

/// The ATTENTION prologue's operands (see [`LinearOp::attention`]); the queries are the op's `x`.
pub struct AttentionInput<'a> {
    /// `[n_heads, n_kv_heads, head_dim]`.
    pub shape: [u32; 3],
    /// The layer's K cache, already holding the step's row.
    pub keys: &'a wgpu::Buffer,
    /// The layer's V cache.
    pub values: &'a wgpu::Buffer,
    /// What each query-key dot product is multiplied by
    /// ([`AttentionScope::score_scale`](super::AttentionScope::score_scale)).
    pub score_scale: f32,
    /// The cap of each scaled score ([`AttentionScope::softcap`](super::AttentionScope::softcap):
    /// Gemma 2's; 0 for none).
    pub softcap: f32,
    /// ALiBi's largest bias, which sets each head's slope
    /// ([`AttentionScope::alibi_max_bias`](super::AttentionScope::alibi_max_bias): BLOOM's; 0
    /// for none).
    pub alibi_max_bias: f32,
}

/// The COMBINE prologue's operands (see [`LinearOp::combine`]).
pub struct CombineInput<'a> {
    /// `[n_heads, n_kv_heads, head_dim]`.
    pub shape: [u32; 3],
    /// Split-K part 1's chunk statistics, `[n_heads, n_chunks, 2 + head_dim]` for the step's token.
    pub parts: Bind<'a>,
    /// Chunks per head in `parts` ([`attention_chunks`](super::attention_chunks) of the capacity).
    pub n_chunks: u32,
}

/// The HEADS prologue's operands (see [`LinearOp::heads`]); the queries are the op's `x`.
pub struct HeadsInput<'a> {
    /// `[n_heads, n_kv_heads, head_dim]`.
    pub shape: [u32; 3],
    /// The layer's K cache, already holding the step's row.
    pub keys: &'a wgpu::Buffer,
    /// The layer's V cache.
    pub values: &'a wgpu::Buffer,
    /// What each query-key dot product is multiplied by
    /// ([`AttentionScope::score_scale`](super::AttentionScope::score_scale)).
    pub score_scale: f32,
    /// Chunks of [`KernelOptions::split_chunk`](super::super::kernels::KernelOptions::split_chunk)
    /// positions per head in the parts (the most a short context covers); a dispatch's
    /// workgroups for the chunks past the step's position write nothing.
    pub n_chunks: u32,
}

/// The POST_NORM_IN prologue's operands (see [`LinearOp::post_norm_in`]).
#[derive(Clone, Copy)]
pub struct PostNormInput<'a> {
    /// The sublayer's output, `[cols]` (the attention's output projection's).
    pub y: Bind<'a>,
    /// Its post norm's gain, `[cols]`.
    pub gain: &'a wgpu::Buffer,
    /// Its post norm's epsilon (the op's `norm`, where it has one, takes the same).
    pub eps: f32,
}

/// The per-head parts a `heads` projection wrote, for the MERGE_IN prologue and the
/// MERGE_OUT epilogue (see [`LinearOp::merge_in`]).
#[derive(Clone, Copy)]
pub struct HeadParts<'a> {
    /// `[n_heads, n_chunks, 2 + rows]`.
    pub parts: Bind<'a>,
    /// Query heads.
    pub n_heads: u32,
    /// Chunks per head.
    pub n_chunks: u32,
}

impl<'a> LinearOp<'a> {
    /// A plain `y = W x`.
    pub fn new(w: &'a GpuMatrix, x: &'a wgpu::Buffer, y: Bind<'a>) -> Self {
        LinearOp {
            w,
            x,
            y,
            accumulate: false,
            last_token: false,
            norm: None,
            glu: false,
            activation: Activation::Silu,
            bias: None,
            act: false,
            rope_kv: None,
            attention: None,
            combine: None,
            heads: None,
            merge_in: None,
            merge_out: None,
            post_norm_in: None,
            out_scale: 1.0,
            y_stride: None,
            experts: None,
        }
    }
}

impl Kernels {
    /// Decode: `y (+)= W x` for one input row (row 0, or the step's last row with
    /// `last_token`, as the LM head after a prefill).
    pub fn matvec(&self, ctx: &GpuContext, op: &LinearOp, step: &wgpu::Buffer) -> Result<Dispatch> {
        self.linear(ctx, op, false, step)
    }

    /// Prefill: `Y (+)= X W^T` for the step's `n_tokens` input rows (4 per workgroup row),
    /// into `y[n_tokens, rows]` (`[n_tokens, rows / 2]` with `glu`).
    pub fn matmul(&self, ctx: &GpuContext, op: &LinearOp, step: &wgpu::Buffer) -> Result<Dispatch> {
        if op.last_token {
            return Err(Error::Backend("last_token is a decode (matvec) option".into()));
        }
        Ok(self.linear(ctx, op, true, step)?.per_token(1, MATMUL_TOKENS))
    }

    fn linear(&self, ctx: &GpuContext, op: &LinearOp, prefill: bool, step: &wgpu::Buffer) -> Result<Dispatch> {
        let w = op.w;
        let workgroup = self.options.workgroup;
        let threads_per_row =
            self.options.threads_per_row_for(prefill).min(if op.heads.is_some() { HEADS_THREADS_PER_ROW } else { u32::MAX });
        let pairs = op.glu || op.rope_kv.is_some();
        if pairs && (!w.rows.is_multiple_of(2) || op.accumulate || op.out_scale != 1.0 || threads_per_row > workgroup / 2) {
            return Err(Error::Backend(format!(
                "the SwiGLU and RoPE epilogues need an even row count ({}), no accumulate, no output scale, and at most {} threads per row ({threads_per_row})",
                w.rows,
                workgroup / 2,
            )));
        }
        let shape = check_fusions(op, prefill)?;
        let merge = op.merge_in.or(op.merge_out);
        check_merge(op, prefill)?;
        check_post_norm_in(op, prefill)?;
        check_bias(op)?;
        check_experts(op, prefill)?;
        let subgroup = self.options.subgroups && !prefill && op.heads.is_none();
        let variant = MatrixKernel {
            norm: op.norm.is_some(),
            glu: op.glu,
            bias: op.bias.is_some(),
            act: op.act,
            rope_kv: op.rope_kv.is_some(),
            qkv_bias: op.rope_kv.as_ref().is_some_and(|r| r.bias.is_some()),
            head_norm: op.rope_kv.as_ref().is_some_and(|r| r.head_norm.is_some()),
            attention: op.attention.is_some(),
            combine: op.combine.is_some(),
            heads: op.heads.is_some(),
            merge_in: op.merge_in.is_some(),
            merge_out: op.merge_out.is_some(),
            post_norm_in: op.post_norm_in.is_some(),
            experts: op.experts.is_some(),
            kv_f16: (op.rope_kv.is_some() || op.attention.is_some() || op.heads.is_some()) && self.options.kv_f16,
            ..MatrixKernel::plain(prefill, w.format, subgroup)
        };
        let [n_heads, n_kv_heads, head_dim] = shape.unwrap_or([merge.map_or(0, |m| m.n_heads), 0, 0]);
        let kernel = self.matrix(ctx, variant, w.cols, if variant.heads { head_dim } else { w.cols }, head_dim)?;
        // A head norm's gains of their own, and its epsilon.
        let own_gains = match op.rope_kv.as_ref().and_then(|r| r.head_norm) {
            Some(HeadGains::Own(gains, eps)) => Some((gains, eps)),
            _ => None,
        };
        // Biases of their own, bound where the gains would be.
        let own_biases = match op.rope_kv.as_ref().and_then(|r| r.bias) {
            Some(QkvBiases::Own(biases)) => Some(biases),
            _ => None,
        };
        let [alibi_m0, alibi_m1] = alibi_bases(n_heads, op.attention.as_ref().map_or(0.0, |a| a.alibi_max_bias));
        let params = MatrixParams {
            rows: w.rows,
            cols: w.cols,
            accumulate: op.accumulate as u32,
            last_token: op.last_token as u32,
            eps: op.norm.or(own_gains).map(|(_, eps)| eps).or(op.post_norm_in.map(|p| p.eps)).unwrap_or(0.0),
            n_heads,
            n_kv_heads,
            head_dim,
            y_stride: op.y_stride.unwrap_or(w.rows),
            n_chunks: op
                .combine
                .as_ref()
                .map(|c| c.n_chunks)
                .or(op.heads.as_ref().map(|h| h.n_chunks))
                .or(merge.map(|m| m.n_chunks))
                .unwrap_or(0),
            part_rows: if op.merge_in.is_some() {
                w.cols
            } else if op.merge_out.is_some() {
                w.rows
            } else {
                0
            },
            activation: if op.glu || op.act { activation_code(op.activation) } else { 0 },
            score_scale: op.attention.as_ref().map(|a| a.score_scale).or(op.heads.as_ref().map(|h| h.score_scale)).unwrap_or(0.0),
            out_scale: op.out_scale,
            softcap: op.attention.as_ref().map_or(0.0, |a| a.softcap),
            alibi_m0,
            alibi_m1,
            clamp_kqv: op.rope_kv.as_ref().map_or(0.0, |r| r.clamp),
            norm_after_rope: op.rope_kv.as_ref().is_some_and(|r| r.norm_after_rope) as u32,
            experts_used: op.experts.map_or(0, |e| e.used),
        };
        let params = ctx.uniform("linear", &[params]);
        // Rows a workgroup covers: a subgroup kernel's row groups take rows_per_subgroup at once.
        // A head-norm epilogue's workgroup takes one head's rows.
        let rows_per_group = if variant.head_norm {
            head_dim
        } else {
            workgroup / threads_per_row * if subgroup { self.options.rows_per_subgroup } else { 1 }
        };
        let groups = w.rows.div_ceil(rows_per_group);
        if groups > MAX_GROUPS {
            return Err(Error::Backend(format!(
                "a {}-row matrix needs {groups} workgroups, more than one dispatch allows ({MAX_GROUPS})",
                w.rows
            )));
        }
        let mut binds = vec![("params", whole(&params))];
        binds.extend(w.binds());
        match &op.combine {
            Some(c) => binds.push(("parts", c.parts)),
            None => binds.push((if op.attention.is_some() || op.heads.is_some() { "q" } else { "x" }, whole(op.x))),
        }
        binds.extend([("y", op.y), ("step", whole(step))]);
        if let Some(gain) = op.norm.or(own_gains).map(|(gain, _)| gain).or(own_biases).or(op.bias) {
            binds.push(("gain", whole(gain)));
        }
        if let Some(r) = &op.rope_kv {
            binds.extend([("k_cache", r.keys), ("v_cache", r.values), ("table", whole(r.table))]);
        }
        if let Some(a) = &op.attention {
            binds.extend([("k_cache", whole(a.keys)), ("v_cache", whole(a.values))]);
        }
        if let Some(h) = &op.heads {
            binds.extend([("k_cache", whole(h.keys)), ("v_cache", whole(h.values))]);
        }
        if let Some(m) = merge {
            binds.push(("head_parts", m.parts));
        }
        if let Some(p) = &op.post_norm_in {
            binds.extend([("post_proj", p.y), ("post_gain", whole(p.gain))]);
        }
        if let Some(e) = &op.experts {
            binds.push(("picks", whole(e.picks)));
        }
        let mut d = prepare(ctx, &kernel, &binds, groups)?;
        if let Some(h) = &op.heads {
            d.groups = [groups, n_heads, h.n_chunks];
        }
        d.weight_bytes = w.bytes();
        if let Some(e) = &op.experts {
            // A pick a workgroup row set, a token a layer of them: a token reads its picked
            // experts' matrices alone.
            d.groups = [groups, e.used, 1];
            d.weight_bytes = w.bytes() / u64::from(e.count.max(1)) * u64::from(e.used);
            return Ok(d.per_token(2, 1));
        }
        Ok(d)
    }
}

/// Checks the merge prologue and epilogue of `op`: decode only, one at a time, the prologue
/// with the RMSNorm and SwiGLU, the epilogue adding to `y`, neither beside another fusion,
/// and parts that fit the merge's weights.
fn check_merge(op: &LinearOp, prefill: bool) -> Result<()> {
    let Some(m) = op.merge_in.or(op.merge_out) else { return Ok(()) };
    let others = op.rope_kv.is_some() || op.attention.is_some() || op.combine.is_some() || op.heads.is_some();
    if prefill || op.last_token || others || (op.merge_in.is_some() && op.merge_out.is_some()) {
        return Err(Error::Backend("the merge prologue and epilogue are decode-only, one at a time, with no other fusion".into()));
    }
    if op.merge_in.is_some() && (op.norm.is_none() || !op.glu || op.w.cols as usize > FUSED_ATTENTION_MAX_WIDTH) {
        return Err(Error::Backend(format!(
            "the merge prologue comes with the RMSNorm and SwiGLU, over at most {FUSED_ATTENTION_MAX_WIDTH} columns ({})",
            op.w.cols
        )));
    }
    if op.merge_out.is_some() && (!op.accumulate || op.norm.is_some() || op.glu) {
        return Err(Error::Backend("the merge epilogue adds to y, with no RMSNorm or SwiGLU".into()));
    }
    if m.n_chunks == 0 || m.n_heads == 0 || m.n_heads * m.n_chunks > MAX_HEAD_PARTS {
        return Err(Error::Backend(format!("{} heads of {} chunks: the merge weighs 1 to {MAX_HEAD_PARTS} parts", m.n_heads, m.n_chunks)));
    }
    Ok(())
}

/// Checks the EXPERTS form of `op`: a decode kernel (it runs a prefill's tokens as
/// workgroups along z), with the RMSNorm and SwiGLU or with nothing fused, writing `y` rather
/// than adding to it, and from 1 to `count` picks.
fn check_experts(op: &LinearOp, prefill: bool) -> Result<()> {
    let Some(e) = &op.experts else { return Ok(()) };
    let others = op.rope_kv.is_some()
        || op.attention.is_some()
        || op.combine.is_some()
        || op.heads.is_some()
        || op.merge_in.is_some()
        || op.merge_out.is_some()
        || op.post_norm_in.is_some()
        || op.bias.is_some()
        || op.act;
    if prefill || op.last_token || op.accumulate || others || op.glu != op.norm.is_some() {
        return Err(Error::Backend(
            "the experts' projections run as decode kernels, normed with SwiGLU or plain, writing their own rows".into(),
        ));
    }
    if e.used == 0 || e.used > e.count || !op.w.rows.is_multiple_of(if op.glu { 2 } else { 1 }) {
        return Err(Error::Backend(format!("{} picks of {} experts of {} rows each", e.used, e.count, op.w.rows)));
    }
    Ok(())
}

/// Checks the bias and activation epilogues of `op`: the bias alone in the gain binding (no norm,
/// no pair epilogue, per-head or merge form) and as long as [`own_bias_len`] of the rows,
/// the activation epilogue not beside SwiGLU, the RoPE/KV epilogue or an add to `y`.
fn check_bias(op: &LinearOp) -> Result<()> {
    let pairs_or_parts = op.glu || op.rope_kv.is_some() || op.heads.is_some() || op.merge_in.is_some() || op.merge_out.is_some();
    if let Some(bias) = op.bias {
        if op.norm.is_some() || op.post_norm_in.is_some() || pairs_or_parts {
            return Err(Error::Backend(
                "a row bias is bound where a norm's gains would be: not with a norm, a pair epilogue or the per-head forms".into(),
            ));
        }
        let needed = own_bias_len(op.w.rows as usize) as u64 * 4;
        if bias.size() < needed {
            return Err(Error::Backend(format!("a bias for {} rows needs {needed} bytes; its buffer holds {}", op.w.rows, bias.size())));
        }
    }
    if op.act && (pairs_or_parts || op.accumulate) {
        return Err(Error::Backend(
            "the activation epilogue writes each row alone: not with SwiGLU, RoPE/KV, the per-head forms or an add".into(),
        ));
    }
    Ok(())
}

/// Checks the post-norm prologue of `op`: decode only, with SwiGLU and no other fusion (an
/// RMSNorm after it of the same epsilon, or none), over at most [`FUSED_ATTENTION_MAX_WIDTH`]
/// columns (its row in workgroup memory), its row and gain as wide as them.
fn check_post_norm_in(op: &LinearOp, prefill: bool) -> Result<()> {
    let Some(p) = &op.post_norm_in else { return Ok(()) };
    let others = op.rope_kv.is_some() || op.attention.is_some() || op.combine.is_some() || op.heads.is_some();
    if prefill || op.last_token || others || op.merge_in.is_some() || op.merge_out.is_some() || op.accumulate {
        return Err(Error::Backend("the post-norm prologue is decode-only, with no other fusion".into()));
    }
    let cols = op.w.cols as usize;
    if !op.glu || cols > FUSED_ATTENTION_MAX_WIDTH {
        return Err(Error::Backend(format!(
            "the post-norm prologue comes with SwiGLU, over at most {FUSED_ATTENTION_MAX_WIDTH} columns ({cols})"
        )));
    }
    if let Some((_, eps)) = op.norm.filter(|(_, eps)| *eps != p.eps) {
        return Err(Error::Backend(format!("the post-norm prologue's epsilon {} and its RMSNorm's {eps} are one uniform", p.eps)));
    }
    let row = cols as u64 * 4;
    if p.gain.size() < row || p.y.bytes() < row {
        return Err(Error::Backend(format!("the post-norm prologue reads rows of {cols} floats: a buffer holds fewer")));
    }
    Ok(())
}

/// Checks the RoPE/KV, attention, combine and per-head fusions of `op` (decode only, one at
/// a time, shapes that fit the matrix) and returns their `[n_heads, n_kv_heads, head_dim]`,
/// if any.
fn check_fusions(op: &LinearOp, prefill: bool) -> Result<Option<[u32; 3]>> {
    let w = op.w;
    let shapes = [
        op.rope_kv.as_ref().map(|r| r.shape),
        op.attention.as_ref().map(|a| a.shape),
        op.combine.as_ref().map(|c| c.shape),
        op.heads.as_ref().map(|h| h.shape),
    ];
    let fused = shapes.iter().flatten().count();
    if fused > 1 || (fused == 1 && (prefill || op.glu || op.last_token)) {
        return Err(Error::Backend(
            "the RoPE/KV epilogue and the attention, combine and per-head prologues are decode-only, one at a time, without SwiGLU".into(),
        ));
    }
    let Some(shape) = shapes.into_iter().flatten().next() else { return Ok(None) };
    let [n_heads, n_kv_heads, head_dim] = shape;
    // RoPE turns dimension pairs; attention weighs the values 4 dimensions at a time.
    let multiple = if op.rope_kv.is_some() { 2 } else { 4 };
    if n_kv_heads == 0 || !n_heads.is_multiple_of(n_kv_heads) || !head_dim.is_multiple_of(multiple) {
        return Err(Error::Backend(format!("{n_heads} query heads over {n_kv_heads} KV heads of {head_dim} dimensions cannot run fused")));
    }
    if op.rope_kv.is_some() && w.rows != (n_heads + 2 * n_kv_heads) * head_dim {
        return Err(Error::Backend(format!(
            "the RoPE/KV epilogue needs [q | k | v] rows, {} for {shape:?}, not {}",
            (n_heads + 2 * n_kv_heads) * head_dim,
            w.rows
        )));
    }
    if op.rope_kv.is_some() && op.accumulate {
        return Err(Error::Backend("the RoPE/KV epilogue cannot add to y".into()));
    }
    let bias = op.rope_kv.as_ref().and_then(|r| r.bias);
    let biased = bias.is_some();
    if let Some(gains) = op.rope_kv.as_ref().and_then(|r| r.head_norm) {
        let after_norm = u64::from(w.cols + 2 * head_dim) * 4;
        let fits = match (gains, op.norm) {
            (HeadGains::AfterNorm, Some((gain, _))) => gain.size() >= after_norm,
            (HeadGains::Own(own, _), None) => own.size() >= u64::from(2 * head_dim) * 4,
            _ => false,
        };
        if biased || !fits {
            return Err(Error::Backend(format!(
                "the head-norm epilogue takes no biases, and its {} head gains sit after the norm's {} gains (its buffer {} floats long), or without a norm in a buffer of their own",
                2 * head_dim,
                w.cols,
                w.cols + 2 * head_dim
            )));
        }
        if !head_dim.is_multiple_of(4) || head_dim > MAX_HEAD_NORM_WIDTH {
            return Err(Error::Backend(format!(
                "the head-norm epilogue takes heads of a multiple of 4 dimensions, at most {MAX_HEAD_NORM_WIDTH} (not {head_dim})"
            )));
        }
    }
    let bias_fits = match (bias, op.norm) {
        (None, _) => true,
        (Some(QkvBiases::AfterNorm), Some((gain, _))) => gain.size() >= u64::from(w.cols + w.rows) * 4,
        (Some(QkvBiases::Own(own)), None) => own.size() >= own_bias_len(w.rows as usize) as u64 * 4,
        _ => false,
    };
    if !bias_fits {
        return Err(Error::Backend(format!(
            "the RoPE/KV epilogue's biases sit after the norm's {} gains (its buffer {} floats long), or without a norm in a buffer of their own ({} floats)",
            w.cols,
            w.cols + w.rows,
            own_bias_len(w.rows as usize)
        )));
    }
    if op.rope_kv.is_none() && (w.cols != n_heads * head_dim || w.cols as usize > FUSED_ATTENTION_MAX_WIDTH) {
        return Err(Error::Backend(format!(
            "the attention and combine prologues need n_heads * head_dim = {} columns, at most {FUSED_ATTENTION_MAX_WIDTH} (the matrix has {})",
            n_heads * head_dim,
            w.cols
        )));
    }
    if op.combine.as_ref().is_some_and(|c| c.n_chunks == 0) {
        return Err(Error::Backend("the combine prologue needs at least one chunk".into()));
    }
    if let Some(h) = &op.heads {
        let block = w.format.block();
        if h.n_chunks == 0 || op.accumulate || op.norm.is_some() || block > HEADS_MIN_BLOCK_COLUMNS || !head_dim.is_multiple_of(block) {
            return Err(Error::Backend(format!(
                "the per-head projection needs at least one chunk, no RMSNorm or add to y, and heads of whole {:?} blocks ({block} columns; heads of {head_dim})",
                w.format
            )));
        }
    }
    Ok(Some(shape))
}

/// A weight matrix on the GPU, in the layout of its [`WeightFormat`].
pub struct GpuMatrix {
    /// How it is stored.
    pub format: WeightFormat,
    /// Its first buffer (binding 1: quants, K blocks or the weights).
    pub a: wgpu::Buffer,
    /// Its second (binding 2: block scales), for the formats with one.
    pub b: Option<wgpu::Buffer>,
    /// Output features.
    pub rows: u32,
    /// Input features.
    pub cols: u32,
}

impl GpuMatrix {
    /// Uploads a repacked matrix of `rows` x `cols`.
    pub fn upload(ctx: &GpuContext, w: &Repacked, rows: u32, cols: u32) -> Result<Self> {
        let limit = ctx.info.max_storage_buffer_binding_size;
        let largest = w.a.len().max(w.b.len()) as u64 * 4;
        if largest > limit {
            return Err(Error::Backend(format!(
                "a {rows} x {cols} {:?} matrix takes {largest} bytes, more than this adapter binds at once ({limit})",
                w.format
            )));
        }
        let block = w.format.block();
        if !cols.is_multiple_of(block) {
            return Err(Error::Backend(format!(
                "a {:?} matrix with {cols} columns cannot run on the GPU (a multiple of {block} is needed)",
                w.format
            )));
        }
        let (a_name, b_name) = w.format.bindings();
        let a = ctx.storage(a_name, &w.a);
        let b = b_name.map(|name| ctx.storage(name, &w.b));
        Ok(GpuMatrix { format: w.format, a, b, rows, cols })
    }

    /// Its buffers under their WGSL names (weight_formats.wgsl), for a dispatch's bindings.
    pub fn binds(&self) -> Vec<(&'static str, Bind<'_>)> {
        let (a_name, b_name) = self.format.bindings();
        let mut binds = vec![(a_name, whole(&self.a))];
        if let (Some(name), Some(b)) = (b_name, &self.b) {
            binds.push((name, whole(b)));
        }
        binds
    }

    /// Bytes of weight data the kernel reads per use.
    pub fn bytes(&self) -> u64 {
        self.a.size() + self.b.as_ref().map_or(0, |b| b.size())
    }
}

/// A matrix too large for one storage binding (a large vocabulary's embedding and LM head on
/// an adapter that binds 128 MiB at once, WebGPU's default), split into bands of whole rows,
/// each its own buffers and dispatch. A band's outputs are bound at its first row, so every
/// band but the last has a multiple of the adapter's offset alignment (in f32 rows) of rows.
pub struct RowBands {
    /// Each band with the index of its first row.
    pub bands: Vec<(u32, GpuMatrix)>,
    /// Rows of the whole matrix.
    pub rows: u32,
}

impl RowBands {
    /// Uploads a repacked `rows` x `cols` matrix in as few bands as the adapter's largest
    /// binding allows (one when it fits).
    pub fn upload(ctx: &GpuContext, w: &Repacked, rows: u32, cols: u32) -> Result<Self> {
        let n = rows as usize;
        if n == 0 || !w.a.len().is_multiple_of(n) || !w.b.len().is_multiple_of(n) {
            return Err(Error::Backend(format!("a {rows}-row matrix of {} and {} words is not whole rows", w.a.len(), w.b.len())));
        }
        let (a_row, b_row) = (w.a.len() / n, w.b.len() / n);
        let row_bytes = a_row.max(b_row) as u64 * 4;
        let align = u64::from(ctx.device.limits().min_storage_buffer_offset_alignment / 4).max(1);
        let fit = ctx.info.max_storage_buffer_binding_size / row_bytes.max(1);
        let per_band = if fit >= n as u64 { n } else { (fit / align * align) as usize };
        if per_band == 0 {
            return Err(Error::Backend(format!(
                "one row of a {rows} x {cols} {:?} matrix takes {row_bytes} bytes: {align} of them are more than this adapter binds at once ({})",
                w.format, ctx.info.max_storage_buffer_binding_size
            )));
        }
        if per_band == n {
            return Ok(RowBands { bands: vec![(0, GpuMatrix::upload(ctx, w, rows, cols)?)], rows });
        }
        let mut bands = Vec::new();
        for first in (0..n).step_by(per_band) {
            let last = (first + per_band).min(n);
            let part =
                Repacked { format: w.format, a: w.a[first * a_row..last * a_row].to_vec(), b: w.b[first * b_row..last * b_row].to_vec() };
            bands.push((first as u32, GpuMatrix::upload(ctx, &part, (last - first) as u32, cols)?));
        }
        Ok(RowBands { bands, rows })
    }

    /// Bytes of weight data the bands read per use.
    pub fn bytes(&self) -> u64 {
        self.bands.iter().map(|(_, m)| m.bytes()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::{MatrixKernel, WeightFormat};

    /// The host's weights a unit equal the `UNIT_WEIGHTS` each format's block of matrix.wgsl
    /// sets (the shader is the source: its `unit_dot` is written for that many).
    #[test]
    fn unit_weights_are_the_shaders() {
        for format in WeightFormat::ALL {
            let code = MatrixKernel::plain(false, format, false).source().code().expect("expands");
            let declared =
                code.lines().find_map(|l| l.trim().strip_prefix("const UNIT_WEIGHTS: u32 = ")?.strip_suffix("u;")?.parse::<u32>().ok());
            assert_eq!(declared, Some(format.unit_weights()), "{format:?}");
        }
    }
}

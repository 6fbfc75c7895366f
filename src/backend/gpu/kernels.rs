//! Compute pipelines for the WGSL kernels in `shaders/` (built once per device, matrix
//! variants cached by key), shader sources and their includes, dispatches with buffers
//! bound by name, the encoder, and one-shot runners used by the kernel tests. The ops
//! themselves (what each kernel computes, its operands and workgroup count) are in
//! [`super::ops`].

use super::device::{GpuContext, Timestamps};
use super::ops::{self, AttentionKernel, MatrixKernel};
use crate::error::{Error, Result};
use crate::model::architecture::Activation;

/// One kernel's WGSL: a file of `shaders/`, or a template of it with the defines that pick
/// the variant (see [`wgsl_defs`](super::wgsl_defs)).
pub struct ShaderSource {
    /// The kernel's name (the variant's, for a template), as profiles and tests know it.
    pub name: String,
    template: &'static str,
    defines: Vec<&'static str>,
}

impl ShaderSource {
    /// The WGSL the device compiles: the template expanded with the variant's defines, and
    /// `BROWSER` in wasm, where the browser's compiler reads it (see
    /// `shaders/enable_subgroups.wgsl`).
    pub fn code(&self) -> Result<String> {
        let mut defines = self.defines.clone();
        defines.extend(cfg!(target_arch = "wasm32").then_some("BROWSER"));
        let constants = wgsl_constants();
        let structs = super::params::wgsl_includes();
        let mut includes = INCLUDES.to_vec();
        includes.push(("constants.wgsl", &constants));
        includes.extend(structs.iter().map(|(name, code)| (*name, code.as_str())));
        super::wgsl_defs::expand(self.template, &defines, &includes).map_err(|e| Error::Backend(format!("shader {}: {e}", self.name)))
    }
}

/// Declarations and functions kernels share, for their `#include` lines (besides the
/// generated ones: `constants.wgsl` and the uniform structs of [`super::params`]).
const INCLUDES: [(&str, &str); 19] = [
    ("enable_subgroups.wgsl", include_str!("../../../shaders/enable_subgroups.wgsl")),
    ("split_chunk.wgsl", include_str!("../../../shaders/split_chunk.wgsl")),
    ("cache_keys.wgsl", include_str!("../../../shaders/cache_keys.wgsl")),
    ("workgroup_reduce.wgsl", include_str!("../../../shaders/workgroup_reduce.wgsl")),
    ("rank_reduce.wgsl", include_str!("../../../shaders/rank_reduce.wgsl")),
    ("softcap.wgsl", include_str!("../../../shaders/softcap.wgsl")),
    ("alibi.wgsl", include_str!("../../../shaders/alibi.wgsl")),
    ("weight_formats.wgsl", include_str!("../../../shaders/weight_formats.wgsl")),
    ("unit_products.wgsl", include_str!("../../../shaders/unit_products.wgsl")),
    ("attention_params.wgsl", include_str!("../../../shaders/attention_params.wgsl")),
    ("attention_head.wgsl", include_str!("../../../shaders/attention_head.wgsl")),
    ("attention_run.wgsl", include_str!("../../../shaders/attention_run.wgsl")),
    ("head_attention.wgsl", include_str!("../../../shaders/head_attention.wgsl")),
    ("head_merge.wgsl", include_str!("../../../shaders/head_merge.wgsl")),
    ("post_norm_in.wgsl", include_str!("../../../shaders/post_norm_in.wgsl")),
    ("attention_prologue.wgsl", include_str!("../../../shaders/attention_prologue.wgsl")),
    ("attention_merge.wgsl", include_str!("../../../shaders/attention_merge.wgsl")),
    ("rope_pair.wgsl", include_str!("../../../shaders/rope_pair.wgsl")),
    ("head_norm_rope.wgsl", include_str!("../../../shaders/head_norm_rope.wgsl")),
];

/// `constants.wgsl`, the include that gives the shaders the sizes decided here, so each has
/// one source: CHUNK ([`ATTENTION_CHUNK`]), SPLIT_K_CHUNK (the default of the override SPLIT,
/// split_chunk.wgsl), ATT_MAX ([`FUSED_ATTENTION_MAX_WIDTH`]), SCORES
/// ([`FUSED_ATTENTION_SCORES`]), and the matrix kernels' activation codes ACT_GELU and
/// ACT_RELU_SQUARED ([`activation_code`](super::params::activation_code)).
fn wgsl_constants() -> String {
    let [gelu, relu_squared] = [Activation::GeluTanh, Activation::ReluSquared].map(super::params::activation_code);
    format!(
        "// constants.wgsl: made by kernels.rs from its constants.\nconst CHUNK: u32 = {ATTENTION_CHUNK}u;\nconst SPLIT_K_CHUNK: u32 = {SPLIT_K_CHUNK}u;\nconst ATT_MAX: u32 = {FUSED_ATTENTION_MAX_WIDTH}u;\nconst SCORES: u32 = {FUSED_ATTENTION_SCORES}u;\nconst ACT_GELU: u32 = {gelu}u;\nconst ACT_RELU_SQUARED: u32 = {relu_squared}u;\n"
    )
}

impl ShaderSource {
    /// The kernel `name` from `template` with `defines` set.
    pub fn new(name: impl Into<String>, template: &'static str, defines: Vec<&'static str>) -> Self {
        ShaderSource { name: name.into(), template, defines }
    }
}

/// Every kernel the engine can compile, each matrix variant included; compiled natively by
/// naga in the tests and in Chromium by Tint (`make www` writes them to www/shaders/).
pub fn all_shaders() -> Vec<ShaderSource> {
    let mut all = vec![
        ops::attention::combine_source(),
        ops::argmax::source(),
        ops::norm_add::source(false),
        ops::norm_add::source(true),
        ops::layer_norm::source(),
        ops::short_conv::source(),
    ];
    all.extend(ops::ExpertKernel::ALL.map(|e| e.source()));
    all.extend([false, true].into_iter().flat_map(|p| ops::WeightFormat::ALL.map(|f| ops::embedding::source(f, p))));
    all.extend(ops::RopeKvKernel::all().map(|r| r.source()));
    all.extend(AttentionKernel::all().map(|a| a.source()));
    all.extend(ops::AttentionWeightsKernel::all().map(|a| a.source()));
    all.extend(MatrixKernel::all().map(|m| m.source()));
    all
}

/// Which kernel variants a device runs, chosen at load (see [`KernelOptions::for_device`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelOptions {
    /// Threads that share one matrix row in the decode (matvec) kernels, a power of two up to
    /// half of `workgroup` (the SwiGLU and RoPE epilogues keep a row pair in one workgroup):
    /// workgroup / threads_per_row rows per workgroup. With subgroups a row's threads are
    /// whole subgroups: one where a subgroup has that many lanes or more, else
    /// threads_per_row / lanes of them, their sums met in workgroup memory.
    pub threads_per_row: u32,
    /// Threads that share one matrix row in the prefill (matrix-matrix) kernels, which
    /// reduce in workgroup memory whatever `subgroups` says (a power of two up to
    /// `workgroup`; the SwiGLU epilogue needs at most half of it).
    pub prefill_threads_per_row: u32,
    /// Threads per workgroup of the matrix kernels, one of [`MATRIX_WORKGROUPS`].
    pub workgroup: u32,
    /// Units of a matrix row (a word of weights each) that each thread of the matrix kernels
    /// loads at once, one of [`UNITS_IN_FLIGHT_CHOICES`] (the override `IN_FLIGHT`): 2 by
    /// default (the fastest measured), 4 or 8, to measure against; a decode row fitted with
    /// `fit_units_in_flight` takes its own count instead.
    pub units_in_flight: u32,
    /// A decode kernel whose threads cover each row in at most [`MAX_UNITS_IN_FLIGHT`] units a
    /// thread has exactly that many in flight (of each of its rows, with `rows_per_subgroup`
    /// rows at once): the row is one round of loads, and no slot of the loop lies past the
    /// row's end for every thread of a subgroup ([`KernelOptions::units_in_flight_for`]). On by
    /// default on a hardware GPU; unmeasured there yet (see [`UNITS_IN_FLIGHT`]).
    pub fit_units_in_flight: bool,
    /// Rows each subgroup's lanes take at once in the decode kernels with subgroups, one of
    /// [`ROWS_PER_SUBGROUP_CHOICES`] (the override `ROWS`): 1 by default on a GPU, or 2 or 4,
    /// each unit's input columns loaded once for all the rows' products and 1 / rows of the
    /// workgroups, each row's units in flight as one row's (`units_in_flight`, or fitted).
    /// Unmeasured on a GPU.
    pub rows_per_subgroup: u32,
    /// Matvec and attention reduce with subgroup operations (the device must have the
    /// subgroups feature).
    pub subgroups: bool,
    /// The KV cache holds half floats (half the memory; packed two per word, so any adapter
    /// can).
    pub kv_f16: bool,
    /// Most positions a decode step's attention covers in the output projection's prologue
    /// (0 to [`ATTENTION_CHUNK`]; [`FUSED_ATTENTION_POSITIONS`] by default,
    /// [`BROWSER_FUSED_ATTENTION_POSITIONS`] on a hardware GPU in a browser); past them
    /// split-K (0: split-K from the first step). The same kernels either way: the host picks
    /// the command list.
    pub fused_positions: u32,
    /// Decode steps over a short context (up to `fused_positions`) run the output projection
    /// per query head (a workgroup per head, chunk of `split_chunk` positions and block of
    /// rows: one head's attention each, not every head's), the feed-forward's two matrices
    /// merging the heads' parts, instead of every head's attention in each workgroup of the
    /// projection: 4 dispatches a layer either way. Off by default until a GPU measures it;
    /// models whose output projection's blocks do not fit a head keep the other form.
    pub per_head_attention: bool,
    /// A decode step of a model with post norms (Gemma's) runs the attention's post norm in
    /// the gate/up projection's prologue and adds it to the residual stream in the layer's
    /// last post norm: one dispatch fewer a layer, where the model's dim fits the prologue's
    /// row ([`FUSED_ATTENTION_MAX_WIDTH`]). On by default; off, each post norm is a dispatch
    /// of its own (as a prefill pass runs them).
    pub fold_post_norms: bool,
    /// A decode step of a model with head norms (Qwen3's, Gemma 3's and EXAONE 4's, each head of q and k
    /// RMS-normed before RoPE) norms them in the Q/K/V projection's epilogue, a head a
    /// workgroup ([`Kernels::head_norm_epilogue_fits`]): one dispatch fewer a layer, the
    /// projection in n_heads + 2 n_kv_heads workgroups (unmeasured on a GPU). On by default;
    /// off, or for OLMo 2's whole-projection norms, RoPE is a dispatch of its own.
    pub fold_head_norms: bool,
    /// Positions per chunk of split-K attention (1 to [`ATTENTION_CHUNK`];
    /// [`SPLIT_K_CHUNK`] by default): the override `SPLIT` of the kernels
    /// that write and merge the chunks.
    pub split_chunk: u32,
}

impl KernelOptions {
    /// What suits the device: subgroup reductions wherever the device has them, and the
    /// rows per workgroup by the kind of adapter. Software adapters (lavapipe, SwiftShader)
    /// run a workgroup as SIMD loops on a CPU core, where workgroup reductions cost more than
    /// they save, so one thread takes a whole row there (measured on lavapipe, decode: 3.0
    /// tok/s with 1 thread per row, 2.6 with 4, 2.1 with 16, 1.1 with 64), 64 rows per
    /// workgroup; with subgroups those 64 rows go to the subgroups in turn (measured on
    /// lavapipe, 12 decode steps, twice: 4.28 and 4.37 tok/s, against 3.69 and 3.76 plain and
    /// 2.73 and 2.91 with subgroups on 8 rows per workgroup). Hardware GPUs get 32 threads
    /// per row: on an NVIDIA H100 (2026-11-26, decode after a 5-token prompt,
    /// with subgroups, 64-thread workgroups) 192.5 tok/s against 173.1 with 8 and 137.4 with
    /// 4 (bench/device/h100-vulkan-1126-sweep.jsonl), and 256-thread workgroups, 8 rows each
    /// (with subgroups of 32 a row per subgroup), so the prologues that every thread of a
    /// workgroup shares (the fused attention; without subgroups the RMSNorm's sum of squares)
    /// are short for each thread: that step was a chain of serial loads, about 1 us each on
    /// the H100.
    /// Prefill on a hardware GPU gets 8 threads per row, whose rows each cover 4 tokens: on an
    /// H100 (2026-11-27, sixteenth session, the 256-token prompt) 11136-11448 tok/s against
    /// 9078-9212 with 16 and 5702-5740 with 32 (a tenth slower on the 5-token prompt, 1437-1447
    /// against 1500-1666; bench/device/h100-vulkan-1127e-sweep.jsonl), and with decode at 32
    /// 11501.6 against 5698.6 (h100-vulkan-1127f-prefill.jsonl).
    /// Subgroups wider than 64 lanes are left alone: a subgroup matvec strides by the
    /// subgroup size, which would skip the lanes a 64-thread workgroup does not fill. The
    /// KV cache stays f32 unless asked.
    /// With subgroups a software adapter's subgroups take four rows at once (each unit's
    /// input loads shared by all four rows' products; measured 2026-11-29, decode after the
    /// short prompt, one / two / four rows, alternated: lavapipe 6.2, 8.0, 6.9 / 8.9, 9.1,
    /// 8.5 / 9.7, 10.0, 9.1 tok/s, SwiftShader natively two / four 2.5, 2.3 / 3.1, 2.9); a
    /// GPU's one, until a GPU measures more.
    /// A hardware GPU in a browser runs split-K attention from the first decode step
    /// ([`BROWSER_FUSED_ATTENTION_POSITIONS`]).
    pub fn for_device(ctx: &GpuContext) -> Self {
        let software = ctx.info.software;
        let subgroups = Self::subgroups_usable(ctx);
        KernelOptions {
            threads_per_row: if software { 1 } else { 32 },
            prefill_threads_per_row: if software { 1 } else { 8 },
            workgroup: if software { WORKGROUP } else { 256 },
            units_in_flight: UNITS_IN_FLIGHT,
            fit_units_in_flight: !software,
            rows_per_subgroup: if software && subgroups { 4 } else { ROWS_PER_SUBGROUP },
            subgroups,
            kv_f16: false,
            fused_positions: if ctx.info.browser && !software { BROWSER_FUSED_ATTENTION_POSITIONS } else { FUSED_ATTENTION_POSITIONS }
                as u32,
            per_head_attention: false,
            fold_post_norms: true,
            fold_head_norms: true,
            split_chunk: SPLIT_K_CHUNK as u32,
        }
    }

    /// Whether the device's subgroups suit the kernels: it has them, at most a workgroup
    /// wide.
    pub fn subgroups_usable(ctx: &GpuContext) -> bool {
        ctx.info.subgroups && ctx.info.subgroup_sizes[1] <= WORKGROUP
    }

    /// The choice in words, as the CLI and the page report it.
    pub fn describe(&self) -> String {
        let rows = if self.subgroups && self.rows_per_subgroup > 1 {
            format!(", {} rows a subgroup", self.rows_per_subgroup)
        } else {
            String::new()
        };
        format!(
            "{} reductions{rows}, {} KV cache",
            if self.subgroups { "subgroup" } else { "workgroup" },
            if self.kv_f16 { "f16" } else { "f32" }
        )
    }

    /// Units of a row each thread of a matrix kernel has in flight (the override `IN_FLIGHT`)
    /// for rows of `units` units (a word of weights each) shared by `lanes` threads, in a
    /// decode kernel (`decode`; one row at a time or `rows_per_subgroup` at once): with
    /// [`KernelOptions::fit_units_in_flight`], the units a thread covers, where they are
    /// [`MAX_UNITS_IN_FLIGHT`] or fewer; else [`KernelOptions::units_in_flight`]. With 2 on the
    /// 2026-11-28 H200 (32 threads a row) a row of 576 Q4_1 columns (72 units) took 4 slots a
    /// thread, the fourth past the row's end for every thread and the third for 24 of the 32:
    /// 10 M of a decode step's 30.4 M unit products dropped, at about 9.5 ps of the card each
    /// (bench/HISTORY.md). Fitted, that row is 3 slots, the 1536-column down projection 6 (as
    /// before, in one round instead of three) and the LM head's 576 Q8_0 columns 5 (6 before):
    /// 24.4 M slots, each row one round of loads (which cost nothing measurable there).
    pub fn units_in_flight_for(&self, decode: bool, units: u32, lanes: u32) -> u32 {
        let per_thread = units.div_ceil(lanes.max(1)).max(1);
        if self.fit_units_in_flight && decode && per_thread <= MAX_UNITS_IN_FLIGHT {
            per_thread
        } else {
            self.units_in_flight
        }
    }

    /// The units in flight in words, as `bench` prints them.
    pub fn units_in_flight_words(&self) -> String {
        if self.fit_units_in_flight {
            format!(
                "a decode row's units in flight at once where a thread has at most {MAX_UNITS_IN_FLIGHT} of it (else {})",
                self.units_in_flight
            )
        } else {
            format!("{} units of a row in flight", self.units_in_flight)
        }
    }

    /// Threads per matrix row of the prefill kernels (`prefill`) or the decode ones.
    pub fn threads_per_row_for(&self, prefill: bool) -> u32 {
        if prefill {
            self.prefill_threads_per_row
        } else {
            self.threads_per_row
        }
    }

    /// Plain kernels (no subgroups, f32 cache) with `threads_per_row` threads per row (decode
    /// and prefill) in
    /// workgroups of [`WORKGROUP`].
    pub fn plain(threads_per_row: u32) -> Self {
        KernelOptions {
            threads_per_row,
            prefill_threads_per_row: threads_per_row,
            workgroup: WORKGROUP,
            units_in_flight: UNITS_IN_FLIGHT,
            fit_units_in_flight: false,
            rows_per_subgroup: ROWS_PER_SUBGROUP,
            subgroups: false,
            kv_f16: false,
            fused_positions: FUSED_ATTENTION_POSITIONS as u32,
            per_head_attention: false,
            fold_post_norms: true,
            fold_head_norms: true,
            split_chunk: SPLIT_K_CHUNK as u32,
        }
    }

    /// Whether a step of `n_tokens` from position `pos` runs the short-context form of
    /// attention: through the one-token (decode) kernels over at most
    /// [`KernelOptions::fused_positions`] positions (in the output projection's prologue), or
    /// through the many-token ones (`many`: prefill, speculative checks) over at most one
    /// [`ATTENTION_CHUNK`] (one dispatch). Past that, split-K.
    pub fn short_attention(&self, pos: usize, n_tokens: usize, many: bool) -> bool {
        pos + n_tokens <= if many { ATTENTION_CHUNK } else { self.fused_positions as usize }
    }
}

/// Threads per workgroup (the shaders' `WG` override) of the kernels with no shape of
/// their own, and the fewest a matrix kernel's workgroup has.
pub const WORKGROUP: u32 = 64;

/// The workgroup sizes a matrix kernel may take ([`KernelOptions::workgroup`]).
pub const MATRIX_WORKGROUPS: [u32; 3] = [64, 128, 256];

/// Threads per workgroup of attention_partial.wgsl (one dispatch's or split-K's part 1): a
/// position each when scoring a run of more than half as many positions, several sharing one
/// below that, and 1024 / head_dim slices of the positions at once when weighing the values (4
/// dimensions a thread: 16 slices for this model's heads of 64), so a thread's serial loops
/// are short (on an H100, at 64 threads, split-K took 136 us a layer after a 257-token
/// prompt).
pub const ATTENTION_WORKGROUP: u32 = 256;

/// Most positions one workgroup's attention covers (`CHUNK` in the shaders): the one-dispatch
/// form of a prefill pass while its tokens see at most this many, and the most a decode
/// step's attention may run inside the output projection ([`KernelOptions::fused_positions`]).
pub const ATTENTION_CHUNK: usize = 256;

/// Positions per chunk of split-K attention by default ([`KernelOptions::split_chunk`], the
/// override `SPLIT` in the shaders): a workgroup per query
/// head and chunk, so a longer context spreads over more workgroups rather than lengthening
/// each (flash-decoding). 64 positions a chunk keep four threads on each position's score in
/// a workgroup of [`ATTENTION_WORKGROUP`], its key read in whole 32-byte pieces, and a
/// 300-position decode step at 45 workgroups for this model's 9 heads (with chunks of 256: 18,
/// the longer of them taking 28 us a layer on the 2026-11-27 H100, against 18 us at 69
/// positions); the merge then walks one chunk per 64 positions. Measured on an H100
/// (2026-11-27, sixteenth session, decode after the 256-token prompt): chunks of 32 656.3
/// tok/s, 64 659.6, 128 624.1, 256 519.8.
pub const SPLIT_K_CHUNK: usize = 64;

/// Units of a matrix row each thread loads at once by default ([`KernelOptions::units_in_flight`]),
/// where a decode row's are not fitted to it ([`KernelOptions::fit_units_in_flight`]): with 2,
/// the rows of this model's 576-column matrices are two rounds of loads for 32 threads a row,
/// the 1536-column down projection three (with 4: one and two), each round a memory latency
/// on the GPU. Fewer rounds did not pay: on an NVIDIA H200 (2026-11-28, decode after the short
/// / long prompt) 2 units decoded 775.1 / 732.9 tok/s, 4 751.3 / 710.1, 8 669.3 / 636.3; the
/// units computed past a row's end did (bench/HISTORY.md), which fitting each decode row
/// leaves out for whole subgroups (not yet measured on a GPU); 2 also compiles several times
/// faster on lavapipe, which keeps it (one thread a row there).
pub const UNITS_IN_FLIGHT: u32 = 2;

/// Most units of a row a thread of a matrix kernel can have in flight (`row_dot`'s slots in
/// matrix.wgsl).
pub const MAX_UNITS_IN_FLIGHT: u32 = 8;

/// The units of a row in flight the matrix kernels can be asked for ([`KernelOptions::units_in_flight`]):
/// 2 (the default), 4 (one round of loads for a 576-column row at 32 threads a row) and 8 (the
/// 1536-column down projection's rows in one round too).
pub const UNITS_IN_FLIGHT_CHOICES: [u32; 3] = [2, 4, 8];

/// Rows a subgroup takes at once by default on a GPU ([`KernelOptions::rows_per_subgroup`];
/// four on a software adapter: [`KernelOptions::for_device`]): one.
/// Two or four share each unit's input loads, its gains and (RMSNorm) its squares between
/// the rows' products and take half or a quarter of the workgroups: on the 2026-11-28 H200 a decode step's kernels cost
/// about 0.45 us a dispatch for each unit of a row a thread computed beyond the row's own
/// (8 units in flight against 4, 669 against 751 tok/s, the same rounds of loads) and
/// workgroups of 64 lost to 256 (703 against 751), so both halves may pay; not measured yet.
pub const ROWS_PER_SUBGROUP: u32 = 1;

/// The rows a subgroup can take at once ([`KernelOptions::rows_per_subgroup`]).
pub const ROWS_PER_SUBGROUP_CHOICES: [u32; 3] = [1, 2, 4];

/// Most positions a decode step's attention covers in the output projection's prologue by
/// default ([`KernelOptions::fused_positions`]); past them a decode step runs split-K's part 1
/// as a dispatch of its own and the projection merges its chunks in its prologue. Every
/// workgroup of the projection computes the whole attention itself, so the prologue pays off
/// only while that work is short: on an NVIDIA H100 it took 189 us a layer over 5 positions
/// when it ran head after head (2026-11-26), against about 25 us for each matrix kernel.
/// Measured on an H100 (2026-11-27, sixteenth session, `bench/device/run.sh sweep`, decode
/// after the 5-token prompt, so positions 5-69) with the prologue before the eighteenth
/// session's (scores split over threads, one thread per head for the softmax, a thread's
/// loads of a key in rounds of 8 pairs, query heads apart): up to 16 positions 690.5 tok/s,
/// 32 677.8, 64 529.8, 128 523.8, 256 505.9. Since then (attention_prologue.wgsl) a key is one
/// round of loads for all the query heads that read it, the softmax runs on every thread and
/// the values go in slices per KV head, loaded beside the keys while a slice has at most 8
/// positions (up to 40 for this model on a GPU); unmeasured on a GPU, so the default stays
/// until a sweep says where the prologue stops paying.
pub const FUSED_ATTENTION_POSITIONS: usize = 16;

/// [`FUSED_ATTENTION_POSITIONS`] for a hardware GPU in a browser: none, split-K attention
/// from the first decode step. The page in Chromium on an NVIDIA H200 (2026-11-28, headed on
/// Vulkan, workgroup reductions: bench/device/h200-vulkan-1128-browser-results.json) took
/// 5.72 ms a decode step (median of the first 8 after the 5-token prompt, every one at
/// positions 5-12, attention in the output projection's prologue) against 1.73 for its last 8
/// (split-K) and 1.79 / 2.11 for every step after the 257-token prompt (split-K). Why the
/// prologue ran slowly in Chromium is not known yet (bench/HISTORY.md); the page runs the
/// form that measured fast there, and the device bench runs it with `?fused=16` beside it.
/// Natively the default stays (the device sweep's `--fused-attention-positions 0` row
/// measures split-K from the first step there), as do software adapters in a browser (on
/// SwiftShader the two forms took about the same).
pub const BROWSER_FUSED_ATTENTION_POSITIONS: usize = 0;

/// Widest attention output (n_heads * head_dim) the output projection can compute in its
/// prologue (`ATT_MAX` in matrix.wgsl: at most 8 KB of workgroup memory beside the 7.5 KB the
/// rest takes, within WebGPU's 16 KB default; each pipeline declares its own matrix's width,
/// [`Kernels::matrix`]); wider models run attention as its own dispatch.
pub const FUSED_ATTENTION_MAX_WIDTH: usize = 2048;

/// Scores one round of the output projection's attention prologue holds (`SCORES` in
/// attention_prologue.wgsl: heads * positions, 2.5 KB of workgroup memory): this model's 9
/// heads in one round up to 71 positions, and at least two heads a round up to
/// [`ATTENTION_CHUNK`].
pub const FUSED_ATTENTION_SCORES: usize = 640;
const _: () = assert!(FUSED_ATTENTION_SCORES >= 2 * ATTENTION_CHUNK);

pub use super::params::{AttentionParams, EmbeddingParams, InspectParams, MatrixParams, NormParams, RopeParams, StepParams};

/// One compiled kernel: its shader's name and its pipeline.
#[derive(Clone)]
pub struct Kernel {
    /// The WGSL file (or template variant) it came from.
    pub name: String,
    /// The compute pipeline.
    pub pipeline: wgpu::ComputePipeline,
    /// Its bindings, `(variable name, @binding number)`, read from its WGSL
    /// ([`binding_numbers`]): dispatches bind buffers by name.
    pub bindings: Vec<(String, u32)>,
}

/// The `@group(0) @binding(N) var<...> NAME: ...;` declarations of a kernel's expanded WGSL
/// as `(NAME, N)`: each binding is numbered once, in the WGSL, and the host binds by name
/// ([`prepare`]). The tests check this reading against naga's for every variant.
pub fn binding_numbers(code: &str) -> std::result::Result<Vec<(String, u32)>, String> {
    let mut out = Vec::new();
    for line in code.lines() {
        let Some(rest) = line.trim().strip_prefix("@group(0) @binding(") else { continue };
        let bad = || format!("cannot read the binding declaration {line:?}");
        let (number, rest) = rest.split_once(')').ok_or_else(bad)?;
        let number: u32 = number.parse().map_err(|_| bad())?;
        let rest = rest.trim_start().strip_prefix("var").ok_or_else(bad)?;
        let rest = match rest.strip_prefix('<') {
            Some(r) => r.split_once('>').ok_or_else(bad)?.1,
            None => rest,
        };
        let name = rest.split(':').next().map(str::trim).filter(|n| !n.is_empty()).ok_or_else(bad)?;
        out.push((name.to_string(), number));
    }
    Ok(out)
}

/// The compiled pipelines: the attention kernels at once, each matrix, RoPE/KV-write and
/// embedding variant on first use.
pub struct Kernels {
    /// Decode attention part 1: softmax statistics per (head, chunk of positions).
    pub attention_partial: Kernel,
    /// Attention in one dispatch while the context fits one chunk (many tokens; one token
    /// takes it in the output projection's prologue up to [`KernelOptions::fused_positions`]).
    pub attention_single: Kernel,
    /// Decode attention part 2: merges the chunks of each head.
    pub attention_combine: Kernel,
    /// The variants chosen.
    pub options: KernelOptions,
    matrix: std::sync::Mutex<std::collections::HashMap<(MatrixKernel, u32, u32), Kernel>>,
    /// The RoPE/KV-write pipelines by variant, compiled on first use.
    rope_kv: std::sync::Mutex<std::collections::HashMap<ops::RopeKvKernel, Kernel>>,
    /// The embedding lookup's pipelines by the table's format and whether it adds positions,
    /// compiled on first use.
    embedding: std::sync::Mutex<std::collections::HashMap<(ops::WeightFormat, bool), Kernel>>,
    /// The attention-weights pipeline (inspecting steps only), compiled on first use.
    attention_weights: std::sync::Mutex<std::collections::HashMap<ops::AttentionWeightsKernel, Kernel>>,
    /// The argmax pipelines by the logits they rank (a greedy run-ahead's), compiled on first
    /// use.
    pub(super) argmax: std::sync::Mutex<std::collections::HashMap<u32, Kernel>>,
    /// The post-norm pipeline (Gemma 3's), compiled on first use.
    pub(super) norm_add: std::sync::Mutex<std::collections::HashMap<bool, Kernel>>,
    /// The LayerNorm pipeline (StableLM's norms), compiled on first use.
    pub(super) layer_norm: std::sync::Mutex<std::collections::HashMap<(), Kernel>>,
    /// The short-convolution pipeline (LFM2's convolving layers), compiled on first use.
    pub(super) short_conv: std::sync::Mutex<std::collections::HashMap<(), Kernel>>,
    /// A mixture of experts' pick and sum pipelines, compiled on first use.
    pub(super) experts: std::sync::Mutex<std::collections::HashMap<ops::ExpertKernel, Kernel>>,
}

/// Compiles `shader` into a compute pipeline with the override `constants` (a shader the
/// device rejects shows in the caller's error scopes).
pub fn pipeline(ctx: &GpuContext, shader: &ShaderSource, constants: &[(&str, f64)]) -> Result<Kernel> {
    let name = &shader.name;
    let code = shader.code()?;
    let bindings = binding_numbers(&code).map_err(|e| Error::Backend(format!("shader {name}: {e}")))?;
    let module =
        ctx.device.create_shader_module(wgpu::ShaderModuleDescriptor { label: Some(name), source: wgpu::ShaderSource::Wgsl(code.into()) });
    let pipeline = ctx.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(name),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: wgpu::PipelineCompilationOptions { constants, zero_initialize_workgroup_memory: false },
        cache: None,
    });
    Ok(Kernel { name: name.clone(), pipeline, bindings })
}

impl Kernels {
    /// Compiles the fixed kernels with the variants [`KernelOptions::for_device`] picks.
    pub fn new(ctx: &GpuContext) -> Result<Self> {
        Self::with_options(ctx, KernelOptions::for_device(ctx))
    }

    /// Compiles the fixed kernels; matrix kernels will use `threads_per_row` threads (a power
    /// of two <= 64) per row in workgroups of 64, plain reductions and an f32 cache.
    pub fn with_threads_per_row(ctx: &GpuContext, threads_per_row: u32) -> Result<Self> {
        Self::with_options(ctx, KernelOptions::plain(threads_per_row))
    }

    /// Compiles the fixed kernels of the variants `options` names. Subgroups on a device
    /// without them are an error.
    pub fn with_options(ctx: &GpuContext, options: KernelOptions) -> Result<Self> {
        let workgroup = options.workgroup;
        if !MATRIX_WORKGROUPS.contains(&workgroup) {
            return Err(Error::Backend(format!("matrix workgroups of {workgroup} threads: one of {MATRIX_WORKGROUPS:?} is needed")));
        }
        if !UNITS_IN_FLIGHT_CHOICES.contains(&options.units_in_flight) {
            return Err(Error::Backend(format!(
                "{} units of a row in flight: one of {UNITS_IN_FLIGHT_CHOICES:?} is possible",
                options.units_in_flight
            )));
        }
        if !ROWS_PER_SUBGROUP_CHOICES.contains(&options.rows_per_subgroup) {
            return Err(Error::Backend(format!(
                "{} rows a subgroup: one of {ROWS_PER_SUBGROUP_CHOICES:?} is possible",
                options.rows_per_subgroup
            )));
        }
        for threads_per_row in [options.threads_per_row, options.prefill_threads_per_row] {
            if !threads_per_row.is_power_of_two() || threads_per_row > workgroup {
                return Err(Error::Backend(format!("{threads_per_row} threads per row: a power of two up to {workgroup} is needed")));
            }
        }
        if options.rows_per_subgroup > 1 && !options.subgroups {
            return Err(Error::Backend(format!(
                "{} rows a subgroup: the kernels without subgroups take one row at a time",
                options.rows_per_subgroup
            )));
        }
        if options.subgroups && !KernelOptions::subgroups_usable(ctx) {
            return Err(Error::Backend(format!(
                "{} has no subgroup operations the kernels can use (subgroups of {:?} lanes; at most {WORKGROUP} are needed)",
                ctx.info.name, ctx.info.subgroup_sizes
            )));
        }
        if !(1..=ATTENTION_CHUNK as u32).contains(&options.split_chunk) {
            return Err(Error::Backend(format!(
                "split-K chunks of {} positions: 1 to {ATTENTION_CHUNK} are possible",
                options.split_chunk
            )));
        }
        let split = ("SPLIT", options.split_chunk as f64);
        let attention = |single| {
            let variant = AttentionKernel { single, subgroup: options.subgroups, kv_f16: options.kv_f16 };
            pipeline(ctx, &variant.source(), &[("WG", ATTENTION_WORKGROUP as f64), split])
        };
        Ok(Kernels {
            attention_partial: attention(false)?,
            attention_single: attention(true)?,
            attention_combine: pipeline(ctx, &ops::attention::combine_source(), &[("WG", WORKGROUP as f64), split])?,
            options,
            matrix: Default::default(),
            rope_kv: Default::default(),
            embedding: Default::default(),
            attention_weights: Default::default(),
            argmax: Default::default(),
            norm_add: Default::default(),
            layer_norm: Default::default(),
            short_conv: Default::default(),
            experts: Default::default(),
        })
    }

    /// The pipeline of a matrix variant for a matrix of `cols` columns, compiled the first
    /// time it is asked for. A variant that keeps its input row in workgroup memory
    /// ([`MatrixKernel::keeps_input_row`]) declares exactly `cols` floats of it (the override
    /// ATT_WIDTH, at most [`FUSED_ATTENTION_MAX_WIDTH`]): a browser zero-fills a workgroup's
    /// memory before it runs (WebGPU asks it to; natively [`pipeline`] tells wgpu not to). In
    /// Chromium on SwiftShader the fill was about half the fused attention kernel's time
    /// (Dawn's `disable_workgroup_init`: 126 -> 66 ms for a step's 30), and this model's 576
    /// floats instead of 2048 took 10-20% off it. Each width is a pipeline of its own, and so
    /// is each count of units in flight ([`KernelOptions::units_in_flight_for`]) for a row's
    /// product over `product_cols` columns (`cols`, or with `heads` a head's). A head-norm
    /// epilogue's pipeline is made for its heads' `head_dim` (the override HEAD_WIDTH).
    pub fn matrix(&self, ctx: &GpuContext, variant: MatrixKernel, cols: u32, product_cols: u32, head_dim: u32) -> Result<Kernel> {
        let mut threads_per_row = self.options.threads_per_row_for(variant.prefill);
        if variant.heads {
            threads_per_row = threads_per_row.min(ops::HEADS_THREADS_PER_ROW);
        }
        // The threads that share a row: whole subgroups with subgroups (at least one, of the
        // widest the adapter may run).
        let lanes = if variant.subgroup { threads_per_row.max(ctx.info.subgroup_sizes[1]) } else { threads_per_row };
        // A decode row's units a thread, fitted where they are few (row_dot's slots, of
        // each of a subgroup's rows at once with several).
        let in_flight = self.options.units_in_flight_for(!variant.prefill, product_cols / variant.format.unit_weights(), lanes);
        let mut constants = vec![("WG", self.options.workgroup as f64), ("TPR", threads_per_row as f64), ("IN_FLIGHT", in_flight as f64)];
        if variant.combine || variant.heads || variant.merge_in || variant.merge_out {
            constants.push(("SPLIT", self.options.split_chunk as f64));
        }
        if variant.subgroup {
            // A row spans several subgroups where the narrowest the adapter runs have fewer
            // lanes than its threads.
            let shared_rows = threads_per_row > ctx.info.subgroup_sizes[0];
            // With SHARED_ROWS each of a workgroup's ROWS WG / TPR rows keeps a sum per
            // subgroup it spans (TPR / lanes) in `partial`'s 256 slots.
            let slots = self.options.rows_per_subgroup * self.options.workgroup / ctx.info.subgroup_sizes[0].max(1);
            if shared_rows && slots > 256 {
                return Err(Error::Backend(format!(
                    "{} rows a subgroup in workgroups of {} with subgroups of {} lanes: {slots} sums in workgroup memory, at most 256",
                    self.options.rows_per_subgroup, self.options.workgroup, ctx.info.subgroup_sizes[0]
                )));
            }
            constants.push(("SHARED_ROWS", f64::from(u8::from(shared_rows))));
            constants.push(("ROWS", f64::from(self.options.rows_per_subgroup)));
        }
        let width = if variant.keeps_input_row() {
            if cols as usize > FUSED_ATTENTION_MAX_WIDTH {
                return Err(Error::Backend(format!(
                    "{}: an input row of {cols} columns in workgroup memory, at most {FUSED_ATTENTION_MAX_WIDTH}",
                    variant.name()
                )));
            }
            constants.push(("ATT_WIDTH", f64::from(cols)));
            cols
        } else if variant.head_norm {
            if !self.head_norm_epilogue_fits(ctx, head_dim) {
                return Err(Error::Backend(format!("{}: heads of {head_dim} do not fit its workgroup memory", variant.name())));
            }
            constants.push(("HEAD_WIDTH", f64::from(head_dim)));
            head_dim
        } else {
            0
        };
        cached(&self.matrix, (variant, width, in_flight), || pipeline(ctx, &variant.source(), &constants))
    }

    /// Whether a decode step's Q/K/V projection can norm heads of `head_dim` in its epilogue
    /// ([`RopeKv::head_norm`](ops::RopeKv::head_norm)): with [`KernelOptions::fold_head_norms`],
    /// heads of a multiple of 4 dimensions up to [`ops::MAX_HEAD_NORM_WIDTH`], and where a
    /// row's sums meet in workgroup memory (subgroups narrower than its threads), a head's
    /// sums (one per subgroup of each row) within `partial`'s 256 slots.
    pub fn head_norm_epilogue_fits(&self, ctx: &GpuContext, head_dim: u32) -> bool {
        let o = &self.options;
        let tpr = o.threads_per_row_for(false);
        let narrowest = ctx.info.subgroup_sizes[0].max(1);
        let shared_rows = o.subgroups && tpr > narrowest;
        o.fold_head_norms
            && head_dim.is_multiple_of(4)
            && head_dim <= ops::MAX_HEAD_NORM_WIDTH
            && (!shared_rows || head_dim * (tpr / narrowest) <= 256)
    }

    /// The pipeline of a RoPE/KV-write variant, compiled the first time it is asked for.
    pub fn rope_kv_kernel(&self, ctx: &GpuContext, variant: ops::RopeKvKernel) -> Result<Kernel> {
        cached(&self.rope_kv, variant, || pipeline(ctx, &variant.source(), &[("WG", WORKGROUP as f64)]))
    }

    /// The attention-weights pipeline for the cache the options name, compiled the first
    /// time it is asked for.
    pub fn attention_weights_kernel(&self, ctx: &GpuContext) -> Result<Kernel> {
        let variant = ops::AttentionWeightsKernel { kv_f16: self.options.kv_f16 };
        cached(&self.attention_weights, variant, || pipeline(ctx, &variant.source(), &[("WG", WORKGROUP as f64)]))
    }

    /// The pipeline of the embedding lookup from a table in `format` (adding a position
    /// table's rows with `positions`), compiled the first time it is asked for.
    pub fn embedding_kernel(&self, ctx: &GpuContext, format: ops::WeightFormat, positions: bool) -> Result<Kernel> {
        let source = || ops::embedding::source(format, positions);
        cached(&self.embedding, (format, positions), || pipeline(ctx, &source(), &[("WG", WORKGROUP as f64)]))
    }
}

/// The kernel under `key` in `cache`, made by `make` the first time.
pub(super) fn cached<K: std::hash::Hash + Eq>(
    cache: &std::sync::Mutex<std::collections::HashMap<K, Kernel>>,
    key: K,
    make: impl FnOnce() -> Result<Kernel>,
) -> Result<Kernel> {
    let mut cache = cache.lock().map_err(|_| Error::Backend("the kernel cache was poisoned".into()))?;
    if let Some(k) = cache.get(&key) {
        return Ok(k.clone());
    }
    let k = make()?;
    cache.insert(key, k.clone());
    Ok(k)
}

/// One dispatch ready to encode: pipeline, bind group, workgroup count.
#[derive(Clone)]
pub struct Dispatch {
    /// The kernel's shader name (for profiles).
    pub kernel: String,
    /// Its pipeline.
    pub pipeline: wgpu::ComputePipeline,
    /// Bindings.
    pub group: wgpu::BindGroup,
    /// Workgroups along x, y, z.
    pub groups: [u32; 3],
    /// The axis that grows with the step's tokens, and tokens per workgroup along it: that
    /// axis gets `ceil(n_tokens / per)` workgroups.
    pub per_token: Option<(usize, u32)>,
    /// The axis whose workgroups each take a chunk of the cache's positions, and the
    /// positions in a chunk: that axis gets the chunks the step's last token reaches, at most
    /// the count in `groups` (the whole cache's, fixed at load). A chunk past them would only
    /// return at once, after a browser had zero-filled its workgroup memory.
    pub per_position: Option<(usize, u32)>,
    /// Bytes of weights it reads (a matrix kernel's whole matrix; 0 for the others): for the
    /// profile's achieved GB/s.
    pub weight_bytes: u64,
}

impl Dispatch {
    /// Makes `axis` cover the step's tokens, `per` tokens per workgroup.
    pub fn per_token(mut self, axis: usize, per: u32) -> Self {
        self.per_token = Some((axis, per));
        self
    }

    /// Makes `axis` cover the chunks of `per` positions the step's last token reaches.
    pub fn per_position(mut self, axis: usize, per: u32) -> Self {
        self.per_position = Some((axis, per));
        self
    }

    /// Workgroups for `step`: its tokens, and the chunks of the cache its last token reaches.
    pub fn groups_for(&self, step: StepParams) -> [u32; 3] {
        let mut g = self.groups;
        if let Some((axis, per)) = self.per_token {
            g[axis] = step.n_tokens.div_ceil(per);
        }
        if let Some((axis, per)) = self.per_position {
            let last = step.pos + step.n_tokens.max(1) - 1;
            g[axis] = g[axis].min(last / per.max(1) + 1);
        }
        g
    }
}

/// A binding: a whole buffer, or `size` bytes from `offset`.
#[derive(Clone, Copy)]
pub struct Bind<'a>(pub &'a wgpu::Buffer, pub u64, pub Option<u64>);

impl Bind<'_> {
    /// Bytes the binding covers: its size, or the buffer's from the offset on.
    pub fn bytes(&self) -> u64 {
        self.2.unwrap_or(self.0.size().saturating_sub(self.1))
    }
}

/// A binding of a whole buffer.
pub fn whole(buffer: &wgpu::Buffer) -> Bind<'_> {
    Bind(buffer, 0, None)
}

/// Builds a dispatch of `kernel` (its bind group made here, once) from its buffers by their
/// names in its WGSL; every binding the kernel declares must be given, and no other.
pub fn prepare(ctx: &GpuContext, kernel: &Kernel, binds: &[(&str, Bind)], groups: u32) -> Result<Dispatch> {
    let mut entries = Vec::with_capacity(binds.len());
    for (name, b) in binds {
        let binding = kernel
            .bindings
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, i)| *i)
            .ok_or_else(|| Error::Backend(format!("kernel {} has no binding named {name}", kernel.name)))?;
        entries.push(wgpu::BindGroupEntry {
            binding,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: b.0,
                offset: b.1,
                size: b.2.and_then(wgpu::BufferSize::new),
            }),
        });
    }
    if let Some((missing, _)) = kernel.bindings.iter().find(|(n, _)| !binds.iter().any(|(name, _)| name == n)) {
        return Err(Error::Backend(format!("kernel {} needs its binding {missing}", kernel.name)));
    }
    let layout = kernel.pipeline.get_bind_group_layout(0);
    let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor { label: Some(&kernel.name), layout: &layout, entries: &entries });
    Ok(Dispatch {
        kernel: kernel.name.clone(),
        pipeline: kernel.pipeline.clone(),
        group,
        groups: [groups, 1, 1],
        per_token: None,
        per_position: None,
        weight_bytes: 0,
    })
}

/// Encodes dispatches into one compute pass, for `step` (the step uniform's values).
pub fn encode(encoder: &mut wgpu::CommandEncoder, dispatches: &[Dispatch], step: StepParams) {
    encode_lists(encoder, &[dispatches], step);
}

/// Encodes `lists` one after another into one compute pass, for `step` (a step's list and
/// what follows it, such as a greedy run-ahead's argmax).
pub fn encode_lists(encoder: &mut wgpu::CommandEncoder, lists: &[&[Dispatch]], step: StepParams) {
    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("forward"), timestamp_writes: None });
    for d in lists.iter().flat_map(|l| l.iter()) {
        record(&mut pass, d, step);
    }
}

/// Records one dispatch into `pass` for `step`.
fn record(pass: &mut wgpu::ComputePass, d: &Dispatch, step: StepParams) {
    pass.set_pipeline(&d.pipeline);
    pass.set_bind_group(0, &d.group, &[]);
    let [x, y, z] = d.groups_for(step);
    pass.dispatch_workgroups(x, y, z);
}

/// Which timestamps [`encode_timed`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stamps {
    /// Before the first dispatch and after each (`dispatches.len() + 1` queries): query i + 1
    /// minus query i is dispatch i's GPU time.
    EachDispatch,
    /// Before the first dispatch and after the last (2 queries): the whole list's GPU time,
    /// with no timestamp between dispatches to add its own cost.
    Ends,
}

/// As [`encode`], with timestamps written into a query set where `timestamps` says, in the
/// place the device allows ([`Timestamps`]): inside the one pass, or, with
/// [`Timestamps::PassEdges`] and [`Stamps::EachDispatch`], each dispatch in a pass of its own
/// (the first pass's beginning and each pass's end stamped). [`Timestamps::None`] writes none.
pub fn encode_timed(
    encoder: &mut wgpu::CommandEncoder,
    dispatches: &[Dispatch],
    step: StepParams,
    timestamps: Option<(&wgpu::QuerySet, Stamps, Timestamps)>,
) {
    match timestamps {
        Some((q, stamps, Timestamps::PassEdges)) => {
            let passes: Vec<&[Dispatch]> = match stamps {
                Stamps::EachDispatch => dispatches.chunks(1).collect(),
                Stamps::Ends => vec![dispatches],
            };
            let last = passes.len().saturating_sub(1);
            for (i, list) in passes.into_iter().enumerate() {
                let writes = wgpu::ComputePassTimestampWrites {
                    query_set: q,
                    beginning_of_pass_write_index: (i == 0).then_some(0),
                    end_of_pass_write_index: (stamps == Stamps::EachDispatch || i == last).then_some(i as u32 + 1),
                };
                let mut pass =
                    encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("forward"), timestamp_writes: Some(writes) });
                for d in list {
                    record(&mut pass, d, step);
                }
            }
        }
        Some((q, stamps, Timestamps::InsidePasses)) => {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("forward"), timestamp_writes: None });
            pass.write_timestamp(q, 0);
            for (i, d) in dispatches.iter().enumerate() {
                record(&mut pass, d, step);
                match stamps {
                    Stamps::EachDispatch => pass.write_timestamp(q, i as u32 + 1),
                    Stamps::Ends if i + 1 == dispatches.len() => pass.write_timestamp(q, 1),
                    Stamps::Ends => {}
                }
            }
        }
        Some((_, _, Timestamps::None)) | None => encode_lists(encoder, &[dispatches], step),
    }
}

/// Submits one dispatch on its own for `step` (for the kernel tests).
pub fn run_once(ctx: &GpuContext, d: Dispatch, step: StepParams) {
    let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
    encode(&mut encoder, &[d], step);
    ctx.queue.submit([encoder.finish()]);
}

/// The per-step uniform the kernels read: the step's first position and how many tokens it
/// runs (1 for decode).
pub fn step_uniform(ctx: &GpuContext, step: StepParams) -> wgpu::Buffer {
    ctx.uniform("step", &[step])
}

/// Workgroups to cover `n` items with one thread each.
pub fn groups_for(n: u32) -> u32 {
    n.div_ceil(WORKGROUP)
}

#[cfg(test)]
mod tests {
    use super::{KernelOptions, MAX_UNITS_IN_FLIGHT};

    #[test]
    fn a_decode_row_of_few_units_a_thread_takes_them_all_at_once() {
        let gpu = KernelOptions { fit_units_in_flight: true, ..KernelOptions::plain(32) };
        // This model at 32 threads a row: 576 Q4_1 columns (72 units), 1536 (192), the LM
        // head's 576 Q8_0 (144), a per-head projection's 64 Q4_1 columns at 8 threads (8).
        assert_eq!(gpu.units_in_flight_for(true, 72, 32), 3);
        assert_eq!(gpu.units_in_flight_for(true, 192, 32), 6);
        assert_eq!(gpu.units_in_flight_for(true, 144, 32), 5);
        assert_eq!(gpu.units_in_flight_for(true, 8, 8), 1);
        assert_eq!(gpu.units_in_flight_for(true, 1, 32), 1);
        assert_eq!(gpu.units_in_flight_for(true, 8 * 32, 32), MAX_UNITS_IN_FLIGHT);
        // More than 8 a thread, or prefill: the count asked for.
        assert_eq!(gpu.units_in_flight_for(true, 8 * 32 + 1, 32), gpu.units_in_flight);
        assert_eq!(gpu.units_in_flight_for(true, 72, 1), gpu.units_in_flight);
        assert_eq!(gpu.units_in_flight_for(false, 72, 32), gpu.units_in_flight);
        // Not fitted: the count asked for everywhere.
        let plain = KernelOptions { units_in_flight: 4, ..KernelOptions::plain(32) };
        assert_eq!(plain.units_in_flight_for(true, 72, 32), 4);
    }
}

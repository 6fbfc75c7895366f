//! Compute pipelines for the WGSL kernels in `shaders/` (built once per device), bind-group
//! helpers, and one-shot runners used by the kernel tests.

use super::device::GpuContext;
use super::repack::Repacked;
use crate::error::{Error, Result};

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
const INCLUDES: [(&str, &str); 4] = [
    ("enable_subgroups.wgsl", include_str!("../../../shaders/enable_subgroups.wgsl")),
    ("attention_params.wgsl", include_str!("../../../shaders/attention_params.wgsl")),
    ("attention_head.wgsl", include_str!("../../../shaders/attention_head.wgsl")),
    ("rope_pair.wgsl", include_str!("../../../shaders/rope_pair.wgsl")),
];

/// `constants.wgsl`, the include that gives the shaders the sizes decided here, so each has
/// one source: CHUNK ([`ATTENTION_CHUNK`]) and ATT_MAX ([`FUSED_ATTENTION_MAX_WIDTH`]).
fn wgsl_constants() -> String {
    format!(
        "// constants.wgsl: made by kernels.rs from its constants.\nconst CHUNK: u32 = {ATTENTION_CHUNK}u;\nconst ATT_MAX: u32 = {FUSED_ATTENTION_MAX_WIDTH}u;\n"
    )
}

fn source(name: &str, template: &'static str, defines: &[&'static str]) -> ShaderSource {
    ShaderSource { name: name.into(), template, defines: defines.to_vec() }
}

/// Every matrix kernel (decode and prefill, every weight format, with or without the fused
/// norm and SwiGLU) comes from this template.
const MATRIX: &str = include_str!("../../../shaders/matrix.wgsl");
const EMBEDDING: &str = include_str!("../../../shaders/embedding.wgsl");
const ROPE_KV: &str = include_str!("../../../shaders/rope_kv.wgsl");
const ATTENTION_PARTIAL: &str = include_str!("../../../shaders/attention_partial.wgsl");
const ATTENTION_COMBINE: &str = include_str!("../../../shaders/attention_combine.wgsl");

/// Every kernel the engine can compile, each matrix variant included; compiled natively by
/// naga in the tests and in Chromium by Tint (`make www` writes them to www/shaders/).
pub fn all_shaders() -> Vec<ShaderSource> {
    let mut all = vec![source("embedding.wgsl", EMBEDDING, &[]), source("attention_combine.wgsl", ATTENTION_COMBINE, &[])];
    all.extend([false, true].map(rope_kv_source));
    all.extend(AttentionKernel::all().map(|a| a.source()));
    all.extend(MatrixKernel::all().map(|m| m.source()));
    all
}

/// The RoPE/KV-write kernel, writing an f32 or (`kv_f16`) a half-float cache.
fn rope_kv_source(kv_f16: bool) -> ShaderSource {
    if kv_f16 {
        source("rope_kv_kv_f16.wgsl", ROPE_KV, &["KV_F16"])
    } else {
        source("rope_kv.wgsl", ROPE_KV, &[])
    }
}

/// Which kernel variants a device runs, chosen at load (see [`KernelOptions::for_device`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelOptions {
    /// Threads that share one matrix row in the plain matvec kernels (a power of two up to
    /// [`WORKGROUP`]); with subgroups, WORKGROUP / threads_per_row is still the rows per
    /// workgroup.
    pub threads_per_row: u32,
    /// Matvec and attention reduce with subgroup operations (the device must have the
    /// subgroups feature).
    pub subgroups: bool,
    /// The KV cache holds half floats (half the memory; packed two per word, so any adapter
    /// can).
    pub kv_f16: bool,
}

impl KernelOptions {
    /// What suits the device: subgroup reductions wherever the device has them, and the
    /// rows per workgroup by the kind of adapter. Software adapters (lavapipe, SwiftShader)
    /// run a workgroup as SIMD loops on a CPU core, where workgroup reductions cost more than
    /// they save, so one thread takes a whole row there (measured on lavapipe, decode: 3.0
    /// tok/s with 1 thread per row, 2.6 with 4, 2.1 with 16, 1.1 with 64), 64 rows per
    /// workgroup; with subgroups those 64 rows go to the subgroups in turn (measured on
    /// lavapipe, 12 decode steps, twice: 4.28 and 4.37 tok/s, against 3.69 and 3.76 plain and
    /// 2.73 and 2.91 with subgroups on 8 rows per workgroup). Hardware GPUs get 8 rows per
    /// workgroup (8 threads per row in the plain kernels). Subgroups wider than a workgroup
    /// are left alone: a subgroup matvec strides by the subgroup size, which would skip the
    /// lanes the workgroup does not fill. The KV cache stays f32 unless asked.
    pub fn for_device(ctx: &GpuContext) -> Self {
        KernelOptions { threads_per_row: if ctx.info.software { 1 } else { 8 }, subgroups: Self::subgroups_usable(ctx), kv_f16: false }
    }

    /// Whether the device's subgroups suit the kernels: it has them, at most a workgroup
    /// wide.
    pub fn subgroups_usable(ctx: &GpuContext) -> bool {
        ctx.info.subgroups && ctx.info.subgroup_sizes[1] <= WORKGROUP
    }

    /// The choice in words, as the CLI and the page report it.
    pub fn describe(&self) -> String {
        format!(
            "{} reductions, {} KV cache",
            if self.subgroups { "subgroup" } else { "workgroup" },
            if self.kv_f16 { "f16" } else { "f32" }
        )
    }

    /// Plain kernels (no subgroups, f32 cache) with `threads_per_row` threads per row.
    pub fn plain(threads_per_row: u32) -> Self {
        KernelOptions { threads_per_row, subgroups: false, kv_f16: false }
    }
}

/// One variant of attention_partial.wgsl.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AttentionKernel {
    /// The whole attention in one dispatch (one chunk), rather than split-K's part 1.
    pub single: bool,
    /// Subgroup reductions.
    pub subgroup: bool,
    /// Reads a half-float KV cache.
    pub kv_f16: bool,
}

impl AttentionKernel {
    /// Every variant.
    pub fn all() -> impl Iterator<Item = AttentionKernel> {
        (0..8u8).map(|b| AttentionKernel { single: b & 1 != 0, subgroup: b & 2 != 0, kv_f16: b & 4 != 0 })
    }

    /// Its name, e.g. `attention_single_subgroup_kv_f16.wgsl`.
    pub fn name(&self) -> String {
        format!(
            "attention_{}{}{}.wgsl",
            if self.single { "single" } else { "partial" },
            if self.subgroup { "_subgroup" } else { "" },
            if self.kv_f16 { "_kv_f16" } else { "" }
        )
    }

    /// Its source: attention_partial.wgsl with its defines.
    pub fn source(&self) -> ShaderSource {
        let defines = [(self.single, "SINGLE"), (self.subgroup, "SUBGROUP"), (self.kv_f16, "KV_F16")];
        ShaderSource { name: self.name(), template: ATTENTION_PARTIAL, defines: defines.iter().filter(|d| d.0).map(|d| d.1).collect() }
    }
}

/// Threads per workgroup (the shaders' `WG` override).
pub const WORKGROUP: u32 = 64;

/// Positions per chunk of split-K decode attention (`CHUNK` in the shaders).
pub const ATTENTION_CHUNK: usize = 256;

/// Widest attention output (n_heads * head_dim) the output projection can compute in its
/// prologue (`ATT_MAX` in matrix.wgsl: 8 KB of workgroup memory beside the 2 KB the rest
/// takes, within WebGPU's 16 KB default); wider models run attention as its own dispatch.
pub const FUSED_ATTENTION_MAX_WIDTH: usize = 2048;

/// Tokens one matmul workgroup row takes (the vec4 accumulator).
pub const MATMUL_TOKENS: u32 = 4;

/// Most workgroups one dispatch dimension may have (WebGPU's default limit).
pub const MAX_GROUPS: u32 = 65_535;

/// How a weight matrix is stored on the GPU (one matvec kernel each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WeightFormat {
    /// Q4_1 blocks (Q4_0 is repacked into them exactly).
    Q4_1,
    /// Q8_0 blocks.
    Q8_0,
    /// Half floats, two per word.
    F16,
    /// Single floats.
    F32,
}

impl WeightFormat {
    const ALL: [WeightFormat; 4] = [WeightFormat::Q4_1, WeightFormat::Q8_0, WeightFormat::F16, WeightFormat::F32];

    /// The template's define (and the kernel name's part) for it.
    fn define(self) -> &'static str {
        match self {
            WeightFormat::Q4_1 => "Q4_1",
            WeightFormat::Q8_0 => "Q8_0",
            WeightFormat::F16 => "F16",
            WeightFormat::F32 => "F32",
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
    /// Decode only: RoPE and the KV-cache write as the epilogue (the Q/K/V projection).
    pub rope_kv: bool,
    /// Decode only: every head's attention over the cache as the prologue (the output
    /// projection, while the context fits one chunk).
    pub attention: bool,
    /// With `rope_kv` or `attention`: the cache holds half floats.
    pub kv_f16: bool,
    /// Decode only: a subgroup per row, reduced with subgroupAdd.
    pub subgroup: bool,
}

impl MatrixKernel {
    /// A variant with nothing fused (the fusions are set by field).
    pub fn plain(prefill: bool, format: WeightFormat, subgroup: bool) -> Self {
        MatrixKernel { prefill, format, norm: false, glu: false, rope_kv: false, attention: false, kv_f16: false, subgroup }
    }

    /// Every variant: both shapes, every format, plain, normed, and normed with SwiGLU;
    /// decode also normed with RoPE/KV write and with the attention prologue, over both cache
    /// precisions (the forms the forward pass uses); and each decode one with subgroups too.
    pub fn all() -> impl Iterator<Item = MatrixKernel> {
        [(false, false), (false, true), (true, false)].into_iter().flat_map(|(prefill, subgroup)| {
            WeightFormat::ALL.into_iter().flat_map(move |format| {
                let plain = MatrixKernel::plain(prefill, format, subgroup);
                let mut all = vec![plain, MatrixKernel { norm: true, ..plain }, MatrixKernel { norm: true, glu: true, ..plain }];
                if !prefill {
                    for kv_f16 in [false, true] {
                        all.push(MatrixKernel { norm: true, rope_kv: true, kv_f16, ..plain });
                        all.push(MatrixKernel { attention: true, kv_f16, ..plain });
                    }
                }
                all
            })
        })
    }

    /// The variant's name, e.g. `matvec_q4_1_norm_rope_kv_kv_f16_subgroup.wgsl`.
    pub fn name(&self) -> String {
        format!(
            "{}_{}{}{}{}{}{}{}.wgsl",
            if self.prefill { "matmul" } else { "matvec" },
            self.format.define().to_lowercase(),
            if self.attention { "_attention" } else { "" },
            if self.norm { "_norm" } else { "" },
            if self.glu { "_glu" } else { "" },
            if self.rope_kv { "_rope_kv" } else { "" },
            if self.kv_f16 { "_kv_f16" } else { "" },
            if self.subgroup { "_subgroup" } else { "" }
        )
    }

    /// Its source: matrix.wgsl with its defines.
    pub fn source(&self) -> ShaderSource {
        let mut defines = vec![if self.prefill { "MATMUL" } else { "MATVEC" }, self.format.define()];
        let flags = [
            (self.norm, "NORM"),
            (self.glu, "GLU"),
            (self.rope_kv, "ROPE_KV"),
            (self.attention, "ATTENTION"),
            (self.glu || self.rope_kv, "PAIRS"),
            (self.rope_kv || self.attention, "KV_CACHE"),
            (self.kv_f16, "KV_F16"),
            (self.subgroup, "SUBGROUP"),
        ];
        defines.extend(flags.iter().filter(|f| f.0).map(|f| f.1));
        ShaderSource { name: self.name(), template: MATRIX, defines }
    }
}

pub use super::params::{AttentionParams, EmbeddingParams, MatrixParams, RopeParams, StepParams};

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

/// The compiled pipelines: the fixed kernels at once, each matrix variant on first use.
pub struct Kernels {
    /// Token embedding row lookup.
    pub embedding: Kernel,
    /// Rotary embedding of the queries and keys, and the KV cache write.
    pub rope_kv: Kernel,
    /// Decode attention part 1: softmax statistics per (head, chunk of positions).
    pub attention_partial: Kernel,
    /// Attention in one dispatch while the context fits one chunk.
    pub attention_single: Kernel,
    /// Decode attention part 2: merges the chunks of each head.
    pub attention_combine: Kernel,
    /// The variants chosen.
    pub options: KernelOptions,
    matrix: std::sync::Mutex<std::collections::HashMap<MatrixKernel, Kernel>>,
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
    /// Write silu(row 2i) * row 2i+1 for output i.
    pub glu: bool,
    /// Decode only: the rows are one token's `[q | k | v]`; turn q and k by RoPE, write q to
    /// `y` and k, v into the caches at the step's position.
    pub rope_kv: Option<RopeKv<'a>>,
    /// Decode only: the input is every head's attention for the queries in `x` over the cache
    /// (positions 0 ..= the step's, at most [`ATTENTION_CHUNK`]), computed in the kernel.
    pub attention: Option<AttentionInput<'a>>,
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
}

/// The ATTENTION prologue's operands (see [`LinearOp::attention`]); the queries are the op's `x`.
pub struct AttentionInput<'a> {
    /// `[n_heads, n_kv_heads, head_dim]`.
    pub shape: [u32; 3],
    /// The layer's K cache, already holding the step's row.
    pub keys: &'a wgpu::Buffer,
    /// The layer's V cache.
    pub values: &'a wgpu::Buffer,
}

impl<'a> LinearOp<'a> {
    /// A plain `y = W x`.
    pub fn new(w: &'a GpuMatrix, x: &'a wgpu::Buffer, y: Bind<'a>) -> Self {
        LinearOp { w, x, y, accumulate: false, last_token: false, norm: None, glu: false, rope_kv: None, attention: None }
    }
}

impl Kernels {
    /// Compiles the fixed kernels with the variants [`KernelOptions::for_device`] picks.
    pub fn new(ctx: &GpuContext) -> Result<Self> {
        Self::with_options(ctx, KernelOptions::for_device(ctx))
    }

    /// Compiles the fixed kernels; matrix kernels will use `threads_per_row` threads (a power
    /// of two <= 64) per row, plain reductions and an f32 cache.
    pub fn with_threads_per_row(ctx: &GpuContext, threads_per_row: u32) -> Result<Self> {
        Self::with_options(ctx, KernelOptions::plain(threads_per_row))
    }

    /// Compiles the fixed kernels of the variants `options` names. Subgroups on a device
    /// without them are an error.
    pub fn with_options(ctx: &GpuContext, options: KernelOptions) -> Result<Self> {
        let threads_per_row = options.threads_per_row;
        if !threads_per_row.is_power_of_two() || threads_per_row > WORKGROUP {
            return Err(Error::Backend(format!("{threads_per_row} threads per row: a power of two up to {WORKGROUP} is needed")));
        }
        if options.subgroups && !KernelOptions::subgroups_usable(ctx) {
            return Err(Error::Backend(format!(
                "{} has no subgroup operations the kernels can use (subgroups of {:?} lanes; at most {WORKGROUP} are needed)",
                ctx.info.name, ctx.info.subgroup_sizes
            )));
        }
        let wg = [("WG", WORKGROUP as f64)];
        let attention =
            |single| pipeline(ctx, &AttentionKernel { single, subgroup: options.subgroups, kv_f16: options.kv_f16 }.source(), &wg);
        Ok(Kernels {
            embedding: pipeline(ctx, &source("embedding.wgsl", EMBEDDING, &[]), &wg)?,
            rope_kv: pipeline(ctx, &rope_kv_source(options.kv_f16), &wg)?,
            attention_partial: attention(false)?,
            attention_single: attention(true)?,
            attention_combine: pipeline(ctx, &source("attention_combine.wgsl", ATTENTION_COMBINE, &[]), &wg)?,
            options,
            matrix: Default::default(),
        })
    }

    /// The pipeline of a matrix variant, compiled the first time it is asked for.
    pub fn matrix(&self, ctx: &GpuContext, variant: MatrixKernel) -> Result<Kernel> {
        let mut cache = self.matrix.lock().map_err(|_| Error::Backend("the kernel cache was poisoned".into()))?;
        if let Some(k) = cache.get(&variant) {
            return Ok(k.clone());
        }
        let k = pipeline(ctx, &variant.source(), &[("WG", WORKGROUP as f64), ("TPR", self.options.threads_per_row as f64)])?;
        cache.insert(variant, k.clone());
        Ok(k)
    }

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
        let threads_per_row = self.options.threads_per_row;
        let pairs = op.glu || op.rope_kv.is_some();
        if pairs && (!w.rows.is_multiple_of(2) || op.accumulate || threads_per_row > WORKGROUP / 2) {
            return Err(Error::Backend(format!(
                "the SwiGLU and RoPE epilogues need an even row count ({}), no accumulate, and at most {} threads per row ({threads_per_row})",
                w.rows,
                WORKGROUP / 2,
            )));
        }
        let shape = check_fusions(op, prefill)?;
        let subgroup = self.options.subgroups && !prefill;
        let variant = MatrixKernel {
            norm: op.norm.is_some(),
            glu: op.glu,
            rope_kv: op.rope_kv.is_some(),
            attention: op.attention.is_some(),
            kv_f16: shape.is_some() && self.options.kv_f16,
            ..MatrixKernel::plain(prefill, w.format, subgroup)
        };
        let kernel = self.matrix(ctx, variant)?;
        let [n_heads, n_kv_heads, head_dim] = shape.unwrap_or_default();
        let params = MatrixParams {
            rows: w.rows,
            cols: w.cols,
            accumulate: op.accumulate as u32,
            last_token: op.last_token as u32,
            eps: op.norm.map_or(0.0, |(_, eps)| eps),
            n_heads,
            n_kv_heads,
            head_dim,
        };
        let params = ctx.uniform("linear", &[params]);
        let groups = w.rows.div_ceil(WORKGROUP / threads_per_row);
        if groups > MAX_GROUPS {
            return Err(Error::Backend(format!(
                "a {}-row matrix needs {groups} workgroups, more than one dispatch allows ({MAX_GROUPS})",
                w.rows
            )));
        }
        // The weights' buffers by their names in the format's layout.
        let (a, b) = match w.format {
            WeightFormat::Q4_1 => ("qs", Some("dm")),
            WeightFormat::Q8_0 => ("qs", Some("d")),
            WeightFormat::F16 | WeightFormat::F32 => ("w", None),
        };
        let mut binds = vec![("params", whole(&params)), (a, whole(&w.a))];
        if let (Some(name), Some(buffer)) = (b, &w.b) {
            binds.push((name, whole(buffer)));
        }
        let x = if op.attention.is_some() { "q" } else { "x" };
        binds.extend([(x, whole(op.x)), ("y", op.y), ("step", whole(step))]);
        if let Some((gain, _)) = op.norm {
            binds.push(("gain", whole(gain)));
        }
        if let Some(r) = &op.rope_kv {
            binds.extend([("k_cache", r.keys), ("v_cache", r.values), ("table", whole(r.table))]);
        }
        if let Some(a) = &op.attention {
            binds.extend([("k_cache", whole(a.keys)), ("v_cache", whole(a.values))]);
        }
        let mut d = prepare(ctx, &kernel, &binds, groups)?;
        d.weight_bytes = w.bytes();
        Ok(d)
    }

    /// `x[b] = table[tokens[b]]` for the step's tokens, dequantized: the embedding lookup
    /// from a matvec-layout table.
    pub fn embedding(&self, ctx: &GpuContext, table: &GpuMatrix, x: Bind, step: &wgpu::Buffer, tokens: &wgpu::Buffer) -> Result<Dispatch> {
        let params = ctx.uniform("embedding", &[EmbeddingParams { dim: table.cols, format: table.format as u32, ..Default::default() }]);
        let b = table.b.as_ref().unwrap_or(&table.a);
        let binds = [
            ("params", whole(&params)),
            ("a", whole(&table.a)),
            ("b", whole(b)),
            ("x", x),
            ("step", whole(step)),
            ("tokens", whole(tokens)),
        ];
        Ok(prepare(ctx, &self.embedding, &binds, groups_for(table.cols))?.per_token(1, 1))
    }
}

/// Floats of chunk statistics split-K attention needs for `tokens` tokens per step:
/// `[tokens, n_heads, n_chunks, 2 + head_dim]`.
pub fn attention_parts_len(shape: [u32; 3], capacity: usize, tokens: usize) -> usize {
    tokens * shape[0] as usize * capacity.div_ceil(ATTENTION_CHUNK).max(1) * (2 + shape[2] as usize)
}

/// Attention for one layer, `out = attention(q, cache[0..n_pos])` for every head: one
/// dispatch while the step's tokens see at most [`ATTENTION_CHUNK`] positions, split-K's two
/// after.
pub struct Attention {
    /// The whole attention in one dispatch (only while `pos + n_tokens <= ATTENTION_CHUNK`).
    pub single: Dispatch,
    /// Split-K part 1 (all chunks up to the capacity; empty ones return at once).
    pub partial: Dispatch,
    /// Split-K part 2.
    pub combine: Dispatch,
}

impl Kernels {
    /// Prepares decode attention over caches of up to `capacity` positions, with
    /// `[n_heads, n_kv_heads, head_dim]` from `shape` and `parts` (at least
    /// [`attention_parts_len`] floats) as scratch for the chunk statistics.
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &self,
        ctx: &GpuContext,
        shape: [u32; 3],
        capacity: usize,
        q: &wgpu::Buffer,
        keys: &wgpu::Buffer,
        values: &wgpu::Buffer,
        parts: Bind,
        out: Bind,
        step: &wgpu::Buffer,
    ) -> Result<Attention> {
        let [n_heads, n_kv_heads, head_dim] = shape;
        let n_chunks = capacity.div_ceil(ATTENTION_CHUNK).max(1) as u32;
        let params = ctx.uniform("attention", &[AttentionParams { n_heads, n_kv_heads, head_dim, n_chunks }]);
        let inputs =
            || [("params", whole(&params)), ("q", whole(q)), ("k_cache", whole(keys)), ("v_cache", whole(values)), ("step", whole(step))];
        let single = prepare(ctx, &self.attention_single, &[&inputs()[..], &[("out", out)]].concat(), n_heads)?.per_token(2, 1);
        let mut partial = prepare(ctx, &self.attention_partial, &[&inputs()[..], &[("parts", parts)]].concat(), n_heads)?.per_token(2, 1);
        partial.groups[1] = n_chunks;
        let combine_binds = [("params", whole(&params)), ("parts", parts), ("out", out), ("step", whole(step))];
        let combine = prepare(ctx, &self.attention_combine, &combine_binds, n_heads)?.per_token(1, 1);
        Ok(Attention { single, partial, combine })
    }
}

impl Kernels {
    /// Rotary embedding of the step's queries and keys, and the KV-cache write: from `qkv`
    /// (`[n_tokens, n_heads * head_dim + 2 kv]`) into `q` and rows `pos..` of the caches,
    /// with cos/sin from `table` ([`rope_table`]); `shape` is `[n_heads, n_kv_heads, head_dim]`.
    #[allow(clippy::too_many_arguments)]
    pub fn rope_kv(
        &self,
        ctx: &GpuContext,
        shape: [u32; 3],
        qkv: &wgpu::Buffer,
        q: Bind,
        keys: Bind,
        values: Bind,
        table: &wgpu::Buffer,
        step: &wgpu::Buffer,
    ) -> Result<Dispatch> {
        let [n_heads, n_kv_heads, head_dim] = shape;
        let params = ctx.uniform("rope_kv", &[RopeParams { n_heads, n_kv_heads, head_dim, ..Default::default() }]);
        let width = (n_heads + 2 * n_kv_heads) * head_dim;
        let binds = [
            ("params", whole(&params)),
            ("qkv", whole(qkv)),
            ("q", q),
            ("k_cache", keys),
            ("v_cache", values),
            ("table", whole(table)),
            ("step", whole(step)),
        ];
        Ok(prepare(ctx, &self.rope_kv, &binds, groups_for(width / 2))?.per_token(1, 1))
    }
}

/// A weight matrix on the GPU, in the layout of its [`WeightFormat`].
pub struct GpuMatrix {
    /// How it is stored.
    pub format: WeightFormat,
    /// Quant words (Q4_1, Q8_0) or the weights (F16, F32).
    pub a: wgpu::Buffer,
    /// Block scales (Q4_1: packed d and m; Q8_0: f32 d); none for F16 and F32.
    pub b: Option<wgpu::Buffer>,
    /// Output features.
    pub rows: u32,
    /// Input features.
    pub cols: u32,
}

impl GpuMatrix {
    /// Uploads a repacked matrix of `rows` x `cols`.
    pub fn upload(ctx: &GpuContext, w: &Repacked, rows: u32, cols: u32) -> Result<Self> {
        if !cols.is_multiple_of(2) {
            return Err(Error::Backend(format!("a matrix with {cols} columns cannot run on the GPU (an even count is needed)")));
        }
        let (format, a, b) = match w {
            Repacked::Q4_1 { dm, qs } => (WeightFormat::Q4_1, ctx.storage("qs", qs), Some(ctx.storage("dm", dm))),
            Repacked::Q8_0 { d, qs } => (WeightFormat::Q8_0, ctx.storage("qs", qs), Some(ctx.storage("d", d))),
            Repacked::F16 { w } => (WeightFormat::F16, ctx.storage("w f16", w), None),
            Repacked::F32 { w } => (WeightFormat::F32, ctx.storage("w f32", w), None),
        };
        Ok(GpuMatrix { format, a, b, rows, cols })
    }

    /// Bytes of weight data the kernel reads per use.
    pub fn bytes(&self) -> u64 {
        self.a.size() + self.b.as_ref().map_or(0, |b| b.size())
    }
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

    /// Workgroups for a step of `n_tokens` tokens.
    pub fn groups_for_tokens(&self, n_tokens: u32) -> [u32; 3] {
        let mut g = self.groups;
        if let Some((axis, per)) = self.per_token {
            g[axis] = n_tokens.div_ceil(per);
        }
        g
    }
}

/// A binding: a whole buffer, or `size` bytes from `offset`.
#[derive(Clone, Copy)]
pub struct Bind<'a>(pub &'a wgpu::Buffer, pub u64, pub Option<u64>);

/// Checks the RoPE/KV and attention fusions of `op` (decode only, one at a time, shapes that
/// fit the matrix) and returns their `[n_heads, n_kv_heads, head_dim]`, if any.
fn check_fusions(op: &LinearOp, prefill: bool) -> Result<Option<[u32; 3]>> {
    let (w, fused) = (op.w, op.rope_kv.is_some() || op.attention.is_some());
    if fused && (prefill || op.glu || op.last_token || (op.rope_kv.is_some() && op.attention.is_some())) {
        return Err(Error::Backend(
            "the RoPE/KV epilogue and the attention prologue are decode-only, one at a time, without SwiGLU".into(),
        ));
    }
    let shape = match (&op.rope_kv, &op.attention) {
        (Some(r), _) => r.shape,
        (_, Some(a)) => a.shape,
        _ => return Ok(None),
    };
    let [n_heads, n_kv_heads, head_dim] = shape;
    if n_kv_heads == 0 || !n_heads.is_multiple_of(n_kv_heads) || !head_dim.is_multiple_of(2) {
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
    if op.attention.is_some() && (w.cols != n_heads * head_dim || w.cols as usize > FUSED_ATTENTION_MAX_WIDTH) {
        return Err(Error::Backend(format!(
            "the attention prologue needs n_heads * head_dim = {} columns, at most {FUSED_ATTENTION_MAX_WIDTH} (the matrix has {})",
            n_heads * head_dim,
            w.cols
        )));
    }
    Ok(Some(shape))
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
        weight_bytes: 0,
    })
}

/// Encodes dispatches into one compute pass, for a step of `n_tokens` tokens.
pub fn encode(encoder: &mut wgpu::CommandEncoder, dispatches: &[Dispatch], n_tokens: u32) {
    encode_timed(encoder, dispatches, n_tokens, None);
}

/// As [`encode`], with a timestamp written into `timestamps` (at least `dispatches.len() + 1`
/// queries; the device needs TIMESTAMP_QUERY_INSIDE_PASSES) before the first dispatch and
/// after each: query i + 1 minus query i is dispatch i's GPU time.
pub fn encode_timed(encoder: &mut wgpu::CommandEncoder, dispatches: &[Dispatch], n_tokens: u32, timestamps: Option<&wgpu::QuerySet>) {
    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("forward"), timestamp_writes: None });
    if let Some(q) = timestamps {
        pass.write_timestamp(q, 0);
    }
    for (i, d) in dispatches.iter().enumerate() {
        pass.set_pipeline(&d.pipeline);
        pass.set_bind_group(0, &d.group, &[]);
        let [x, y, z] = d.groups_for_tokens(n_tokens);
        pass.dispatch_workgroups(x, y, z);
        if let Some(q) = timestamps {
            pass.write_timestamp(q, i as u32 + 1);
        }
    }
}

/// Submits one dispatch on its own for a step of `n_tokens` tokens (for the kernel tests).
pub fn run_once(ctx: &GpuContext, d: Dispatch, n_tokens: u32) {
    let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
    encode(&mut encoder, &[d], n_tokens);
    ctx.queue.submit([encoder.finish()]);
}

/// The per-step uniform the kernels read: the step's first position and how many tokens it
/// runs (1 for decode).
pub fn step_uniform(ctx: &GpuContext, pos: u32, n_tokens: u32) -> wgpu::Buffer {
    ctx.uniform("step", &[StepParams::new(pos, n_tokens)])
}

/// cos/sin of every RoPE angle, `[context, head_dim / 2, 2]`, computed in f64.
pub fn rope_table(context: usize, head_dim: usize, base: f32) -> Vec<f32> {
    let mut t = Vec::with_capacity(context * head_dim);
    for pos in 0..context {
        for i in 0..head_dim / 2 {
            let theta = pos as f64 * (base as f64).powf(-2.0 * i as f64 / head_dim as f64);
            t.push(theta.cos() as f32);
            t.push(theta.sin() as f32);
        }
    }
    t
}

/// Workgroups to cover `n` items with one thread each.
pub fn groups_for(n: u32) -> u32 {
    n.div_ceil(WORKGROUP)
}

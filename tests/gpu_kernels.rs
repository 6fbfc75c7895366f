//! Every WGSL kernel against its CPU twin on random inputs with odd sizes (not multiples of
//! the workgroup size), natively through wgpu (lavapipe on machines without a GPU), with
//! sentinel regions around each output that must come back untouched. A missing adapter is
//! a failure: `scripts/setup.sh` installs lavapipe.
#![cfg(not(target_arch = "wasm32"))]

use candle_core::quantized::ggml_file::qtensor_from_ggml;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use tokenscope::backend::cpu::ops;
use tokenscope::backend::gpu::kernels::{self, Bind, KernelOptions, Kernels, StepParams};
use tokenscope::backend::gpu::ops::{
    self as gpu_ops, AttentionInput, CombineInput, GpuMatrix, HeadGains, HeadParts, HeadsInput, LinearOp, QkvBiases, RopeKv,
};
use tokenscope::backend::gpu::{repack, GpuContext};
use tokenscope::model::alibi::alibi_slope;
use tokenscope::model::architecture::Activation;
use tokenscope::model::weights::to_vec;
use tokenscope::model::{HeadNormSpan, RopeFrequencies};

/// Floats before and after each output (256 bytes: the storage offset alignment).
const PAD: usize = 64;
/// A NaN bit pattern no kernel writes.
const SENTINEL: u32 = 0x7f8c_0de5;

fn context() -> GpuContext {
    match pollster::block_on(GpuContext::new()) {
        Ok(ctx) => {
            eprintln!("GPU adapter: {} ({}, software: {})", ctx.info.name, ctx.info.backend, ctx.info.software);
            ctx
        }
        Err(e) => panic!("{e}: the GPU tests need an adapter (run scripts/setup.sh)"),
    }
}

/// The test device must offer subgroups (lavapipe does), so every variant is tested.
fn context_with_subgroups() -> GpuContext {
    let ctx = context();
    assert!(ctx.info.subgroups, "{} offers no subgroups: the subgroup kernels would go untested", ctx.info.name);
    eprintln!("subgroup sizes {:?}", ctx.info.subgroup_sizes);
    ctx
}

/// The variants a kernel test runs: every row sharing the plain kernels support in
/// workgroups of 64 (one thread per row as on software adapters, a few, the whole
/// workgroup), subgroups with 64 and 8 rows per workgroup, a hardware GPU's shape (32
/// threads per row in workgroups of 256, plain and with subgroups: on lavapipe's subgroups
/// of 8, a row spans 4 of them, SHARED_ROWS), a row spanning 16 subgroups (128 threads a row,
/// 2 rows a workgroup), two and four rows a subgroup at once (a row a subgroup of 8 with 16
/// or 32 rows a workgroup, and the hardware shape's, a row pair or two over 4 subgroups, 16 or
/// 32 rows a workgroup), and half-float
/// caches (all with 2 units of a row in flight, the default, but the 32-threads-a-row shapes,
/// whose decode rows take theirs fitted as a GPU's do, one row or several at once: `fitted`;
/// `check_linear` adds 4 and 8).
fn all_options() -> Vec<KernelOptions> {
    let mut all: Vec<KernelOptions> = [1, 8, 64].map(KernelOptions::plain).into();
    all.extend([subgroups(1, 64, false), subgroups(8, 64, false), fitted(subgroups(32, 256, false)), subgroups(128, 256, false)]);
    for n in [2, 4] {
        all.extend([rows(n, subgroups(8, 64, false)), fitted(rows(n, subgroups(32, 256, false)))]);
    }
    all.extend([
        fitted(KernelOptions { workgroup: 256, ..KernelOptions::plain(32) }),
        KernelOptions { kv_f16: true, ..KernelOptions::plain(1) },
        fitted(subgroups(32, 256, true)),
    ]);
    all
}

/// `o` with a decode row's units in flight fitted to it, as a hardware GPU's default has
/// them (`KernelOptions::units_in_flight_for`): in the 32-threads-a-row shapes the cases'
/// rows take 1 to 7 units a thread (Q4_1's 576 columns 3, 1568 7; Q8_0's 576 5), all in one
/// round, units past the row's end clamped and dropped in the last slot only.
fn fitted(o: KernelOptions) -> KernelOptions {
    KernelOptions { fit_units_in_flight: true, ..o }
}

/// Subgroup reductions with `threads_per_row` threads a row in workgroups of `workgroup`.
fn subgroups(threads_per_row: u32, workgroup: u32, kv_f16: bool) -> KernelOptions {
    KernelOptions { threads_per_row, workgroup, subgroups: true, kv_f16, ..KernelOptions::plain(1) }
}

/// `o` taking `rows_per_subgroup` rows a subgroup at once.
fn rows(rows_per_subgroup: u32, o: KernelOptions) -> KernelOptions {
    KernelOptions { rows_per_subgroup, ..o }
}

/// A weight type enters a matrix kernel only through its unit product (`row_unit` in
/// matrix.wgsl: a unit's weights times the input's columns, with NORM their squares), the
/// same inside every form around it. These forms reach it every way it is called: one
/// thread a row walking every unit (software adapters), a few threads a row, a hardware
/// GPU's shape over several subgroups (SHARED_ROWS) with its units in flight fitted to each
/// row (`fitted`: 1 to 8 slots of `row_dot`), four rows a subgroup (`slot_dot`: four rows'
/// units on the same input columns, a row past the matrix clamped), and four units of a row
/// in flight (`slot_or_zero`: units past the row clamped and dropped). Every weight
/// type runs these; the default model's Q4_1, the LM head's Q8_0 and the commonest K-quant,
/// Q4_K, run every form of [`all_options`] too (the forms' own logic, checked on them, is
/// the same for every type). The whole list at every type compiled three times as many
/// kernels, most of a cold `make test`'s lavapipe time.
fn unit_forms() -> Vec<KernelOptions> {
    vec![
        KernelOptions::plain(1),
        KernelOptions::plain(8),
        fitted(subgroups(32, 256, false)),
        rows(4, subgroups(8, 64, false)),
        KernelOptions { units_in_flight: 4, ..KernelOptions::plain(8) },
    ]
}

/// The types that run every form: see [`unit_forms`].
const EVERY_FORM_TYPES: [GgmlDType; 3] = [GgmlDType::Q4_1, GgmlDType::Q8_0, GgmlDType::Q4K];

#[test]
fn every_kernel_variant_compiles_natively_and_makes_a_pipeline() {
    let ctx = context_with_subgroups();
    let scopes = ctx.error_scopes();
    let all = kernels::all_shaders();
    for shader in &all {
        kernels::pipeline(&ctx, shader, &[("WG", 64.0)]).expect("expands");
    }
    pollster::block_on(scopes.finish("compiling every kernel variant")).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        all.iter().any(|s| s.name == "matvec_q4_1_norm_glu_subgroup.wgsl")
            && all.iter().any(|s| s.name == "attention_single_subgroup_kv_f16.wgsl")
    );
    eprintln!("{} kernel variants compiled", all.len());
}

/// The host binds every kernel's buffers by name, from its own reading of the WGSL's binding
/// declarations (`kernels::binding_numbers`): that reading equals naga's, name for name and
/// number for number, in every variant.
#[test]
fn every_kernels_bindings_are_read_as_naga_reads_them() {
    for shader in kernels::all_shaders() {
        let code = shader.code().expect("expands");
        let module = naga::front::wgsl::parse_str(&code).unwrap_or_else(|e| panic!("{}: {e}", shader.name));
        let mut want: Vec<(String, u32)> =
            module.global_variables.iter().filter_map(|(_, v)| Some((v.name.clone()?, v.binding.as_ref()?.binding))).collect();
        let mut got = kernels::binding_numbers(&code).expect("reads");
        want.sort();
        got.sort();
        assert!(!want.is_empty(), "{} declares no bindings", shader.name);
        assert_eq!(got, want, "{}", shader.name);
    }
    assert!(kernels::binding_numbers("@group(0) @binding(x) var<uniform> p: P;").is_err());
}

/// Every uniform struct's WGSL (generated from its Rust definition) has the Rust struct's
/// layout: the same fields at the same offsets, as naga lays them out for a uniform buffer.
#[test]
fn every_uniform_struct_has_one_layout_on_both_sides() {
    for (wgsl, offsets) in tokenscope::backend::gpu::params::all_layouts() {
        let module = naga::front::wgsl::parse_str(&wgsl).unwrap_or_else(|e| panic!("{wgsl}: {e}"));
        let members = module
            .types
            .iter()
            .find_map(|(_, t)| match &t.inner {
                naga::TypeInner::Struct { members, .. } => Some(members.clone()),
                _ => None,
            })
            .expect("a struct");
        let wgsl_offsets: Vec<(&str, usize)> = members.iter().map(|m| (m.name.as_deref().unwrap_or(""), m.offset as usize)).collect();
        assert_eq!(wgsl_offsets, offsets, "{wgsl}");
    }
}

/// A dispatch binds buffers by their WGSL names: a name the kernel lacks, or a binding left
/// out, is an error naming it (before anything reaches the device).
#[test]
fn a_dispatch_refuses_a_binding_name_the_kernel_lacks_or_leaves_out() {
    let ctx = context();
    let k = Kernels::new(&ctx).expect("every kernel compiles");
    let b = ctx.storage("b", &[0u32; 64]);
    let named = |names: &[&'static str]| names.iter().map(|n| (*n, kernels::whole(&b))).collect::<Vec<_>>();
    let embedding = k.embedding_kernel(&ctx, gpu_ops::WeightFormat::Q4_1, false).expect("compiles");
    let missing = kernels::prepare(&ctx, &embedding, &named(&["params", "qs", "dm", "x", "step"]), 1).err().expect("refused");
    assert!(missing.to_string().contains("tokens"), "{missing}");
    let extra = named(&["params", "qs", "dm", "x", "step", "tokens", "gain"]);
    let unknown = kernels::prepare(&ctx, &embedding, &extra, 1).err().expect("refused");
    assert!(unknown.to_string().contains("no binding named gain"), "{unknown}");
}

/// `v` rounded to half floats (what a half-float cache can hold), back in f32.
fn to_f16_and_back(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect()
}

/// A cache's contents as the kernels hold it: f32, or half floats two to a word (low half
/// the even element), as f32 bit patterns.
fn cache_words(v: &[f32], kv_f16: bool) -> Vec<u32> {
    if kv_f16 {
        v.chunks_exact(2)
            .map(|p| u32::from(half::f16::from_f32(p[0]).to_bits()) | (u32::from(half::f16::from_f32(p[1]).to_bits()) << 16))
            .collect()
    } else {
        v.iter().map(|x| x.to_bits()).collect()
    }
}

/// The values of a cache read back as words (see [`cache_words`]).
fn cache_values(words: &[f32], kv_f16: bool) -> Vec<f32> {
    if kv_f16 {
        words.iter().flat_map(|w| [w.to_bits() as u16, (w.to_bits() >> 16) as u16].map(|h| half::f16::from_bits(h).to_f32())).collect()
    } else {
        words.to_vec()
    }
}

fn random(rng: &mut ChaCha8Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| scale * (rng.random::<f32>() * 2.0 - 1.0)).collect()
}

/// An output buffer `[PAD | n | PAD]` full of sentinels; kernels write at byte `PAD * 4`.
fn guarded(ctx: &GpuContext, n: usize) -> wgpu::Buffer {
    ctx.storage("out", &vec![SENTINEL; n + 2 * PAD])
}

/// Reads a guarded output, checks both sentinel regions, returns the `n` values between.
fn read_guarded(ctx: &GpuContext, buf: &wgpu::Buffer, n: usize) -> Vec<f32> {
    let all = pollster::block_on(ctx.read_f32(buf, n + 2 * PAD)).expect("readback");
    for (i, v) in all[..PAD].iter().chain(&all[PAD + n..]).enumerate() {
        assert_eq!(v.to_bits(), SENTINEL, "sentinel {i} around the output was overwritten");
    }
    all[PAD..PAD + n].to_vec()
}

fn assert_close(got: &[f32], want: &[f32], tol: impl Fn(usize) -> f32, what: &str) {
    assert_eq!(got.len(), want.len());
    let mut worst = 0.0f32;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let d = (g - w).abs();
        assert!(d <= tol(i), "{what}[{i}]: GPU {g} vs CPU {w} (|diff| {d} > {})", tol(i));
        worst = worst.max(d);
    }
    eprintln!("{what}: worst |diff| {worst:.2e} over {} values", got.len());
}

/// What a case fuses around the product (norm, glu, gelu, bias, act): nothing, the RMSNorm
/// prologue, the RMSNorm prologue and the gated epilogue, SwiGLU's or GeGLU's, SwiGLU alone
/// (OLMo 2's feed-forward, with no pre-norm), a bias on each row (GPT-2's output and down
/// projections), or the bias then GELU (its up projection): the forms the forward pass uses.
const FUSIONS: [(bool, bool, Activation, bool, bool); 9] = [
    (false, false, Activation::Silu, false, false),
    (true, false, Activation::Silu, false, false),
    (true, true, Activation::Silu, false, false),
    (true, true, Activation::GeluTanh, false, false),
    (false, true, Activation::Silu, false, false),
    (false, false, Activation::Silu, true, false),
    (false, false, Activation::GeluTanh, true, true),
    (true, false, Activation::ReluSquared, false, true),
    (false, false, Activation::ReluSquared, false, true),
];

/// Checks the decode (matvec, one token) and prefill (matmul, `n_tokens` tokens) kernels of
/// one weight type, plain and with each fusion, against the CPU twins: `ops::rmsnorm` of each
/// token's input row (NORM), the dequantized matrix times it, then `ops::swiglu` (or
/// `ops::geglu`) of rows 2i and 2i + 1 (GLU), or each row's bias added (BIAS) and `ops::gelu`
/// or `ops::relu_squared` of that (ACT; the squared ReLU normed or alone, without a bias, as
/// Arcee and Nemotron run it).
fn check_linear(dtype: GgmlDType, seed: u64) {
    check_linear_in(dtype, seed, |q| repack::repack(q).expect("repack"));
}

/// [`check_linear`] with `dtype`'s weights in the GPU layout `layout` makes of them.
fn check_linear_in(dtype: GgmlDType, seed: u64, layout: fn(&QTensor) -> repack::Repacked) {
    let ctx = context_with_subgroups();
    // Every row sharing the kernels support: one thread per row (software adapters), a few,
    // and the whole workgroup on one row (no GLU there: a row pair must share a workgroup),
    // and the subgroup reductions (the KV cache's precision does not touch these kernels);
    // and a row's units loaded 4 and 8 at a time as well as the default 2. Types outside
    // EVERY_FORM_TYPES run the forms that reach their unit product every way (`unit_forms`).
    let in_flight = |units_in_flight| KernelOptions { units_in_flight, ..KernelOptions::plain(8) };
    let eight_with_subgroups = KernelOptions { units_in_flight: 8, subgroups: true, ..KernelOptions::plain(1) };
    let forms = if EVERY_FORM_TYPES.contains(&dtype) {
        all_options().into_iter().filter(|o| !o.kv_f16).chain([in_flight(4), in_flight(8), eight_with_subgroups]).collect()
    } else {
        unit_forms()
    };
    for options in forms {
        let threads_per_row = options.threads_per_row;
        let k = Kernels::with_options(&ctx, options).expect("every kernel compiles");
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // (rows, cols, position, tokens, accumulate, output scale): the position must not
        // matter; the scale (Granite's residual scale, or any) multiplies each product where
        // it is stored or added (not a GLU's, whose epilogue writes its own).
        let cases = [
            (1usize, 32usize, 0u32, 1usize, false, 1.0f32),
            (37, 96, 0, 3, false, 1.0),
            (70, 1568, 0, 5, true, 0.22),
            (129, 576, 3, 1, false, 0.125),
            (45, 160, 2, 13, true, 1.0),
            (33, 64, 0, 4, false, 1.0),
            (38, 96, 1, 1, true, 3.0),
            (2, 32, 0, 6, false, 1.0),
        ];
        for (rows, cols, pos, n, accumulate, scale) in cases {
            let cols = columns(dtype, cols);
            let w = random(&mut rng, rows * cols, 0.5);
            // Large inputs, like this model's residual stream (|x| up to ~22,500), where the
            // norm reads them.
            let x = random(&mut rng, n * cols, 3_000.0);
            let gain = random(&mut rng, cols, 2.0);
            let t = Tensor::from_vec(w, (rows, cols), &Device::Cpu).expect("tensor");
            let q = QTensor::quantize(&t, dtype).expect("quantize");
            let dense = to_vec(&q).expect("dequantize");
            let m = GpuMatrix::upload(&ctx, &layout(&q), rows as u32, cols as u32).expect("upload");
            let (xb, gb) = (ctx.storage("x", &x), ctx.storage("gain", &gain));
            // Each row's bias, padded to whole vec4s as the kernels read it; GELU's input is
            // kept within a few units (its curve, not its saturated tails), x scaled by 1e-4.
            let bias = random(&mut rng, rows, 2.0);
            let bb = ctx.storage("bias", &[&bias[..], &vec![0.0; gpu_ops::own_bias_len(rows) - rows]].concat());
            let x_small: Vec<f32> = x.iter().map(|v| v * 1e-4).collect();
            let xs = ctx.storage("x small", &x_small);
            for (norm, glu, activation, biased, act) in FUSIONS {
                let gelu = activation == Activation::GeluTanh;
                // GELU's input stays small (its curve); the squared ReLU's is the products'.
                let small = act && gelu;
                if glu && (rows % 2 == 1 || threads_per_row > options.workgroup / 2) {
                    continue;
                }
                let accumulate = accumulate && !glu && !act;
                let out_scale = if glu { 1.0 } else { scale };
                // The input rows the product reads, and W x (with the f32 rounding bound of
                // each: 1e-5 of the sum of |w x|).
                let mut product = vec![0.0f32; n * rows];
                let mut bound = vec![0.0f32; n * rows];
                let x = if small { &x_small } else { &x };
                for b in 0..n {
                    let mut xr = x[b * cols..][..cols].to_vec();
                    if norm {
                        ops::rmsnorm(&x[b * cols..][..cols], &gain, 1e-5, &mut xr);
                    }
                    for r in 0..rows {
                        let row = &dense[r * cols..][..cols];
                        let b_r = if biased { bias[r] } else { 0.0 };
                        product[b * rows + r] = ops::dot(row, &xr) + b_r;
                        bound[b * rows + r] = 1e-5 * row.iter().zip(&xr).map(|(a, b)| (a * b).abs()).sum::<f32>() + 1e-5 + 1e-7 * b_r.abs();
                    }
                }
                let outputs = if glu { rows / 2 } else { rows };
                let prior = random(&mut rng, n * outputs, 1.0);
                let (want, tol): (Vec<f32>, Vec<f32>) = if glu {
                    product
                        .chunks_exact(2)
                        .zip(bound.chunks_exact(2))
                        .map(|(p, e)| {
                            let v = [glu_twin(p[0], p[1], gelu)];
                            // silu' and gelu' are at most 1.13 and |silu(g)|, |gelu(g)| at most
                            // |g|; GELU's 1 + tanh cancels for negative g, where a few ulps of
                            // tanh (the GPU writes it through exp) are 4e-7 |g u|.
                            let tanh_ulps = if gelu { 4e-7 * (p[0] * p[1]).abs() } else { 0.0 };
                            (v[0], 1.13 * p[1].abs() * e[0] + p[0].abs() * e[1] + 1e-5 * v[0].abs() + 1e-6 + tanh_ulps)
                        })
                        .unzip()
                } else if act && gelu {
                    // gelu' is at most 1.13, and a few ulps of tanh through exp are 4e-7 |g|.
                    let v = |p: f32| out_scale * ops::gelu(p);
                    let e = |(p, e): (&f32, &f32)| out_scale.max(1.0) * (1.13 * e + 4e-7 * p.abs()) + 1e-5 * v(*p).abs() + 1e-6;
                    (product.iter().map(|p| v(*p)).collect(), product.iter().zip(&bound).map(e).collect())
                } else if act {
                    // (p + e)^2 - p^2 is at most 2 |p| e + e^2 (and the square's own rounding).
                    let v = |p: f32| out_scale * ops::relu_squared(p);
                    let e = |(p, e): (&f32, &f32)| out_scale.max(1.0) * (2.0 * p.abs() * e + e * e) + 1e-6 * v(*p).abs() + 1e-6;
                    (product.iter().map(|p| v(*p)).collect(), product.iter().zip(&bound).map(e).collect())
                } else {
                    let want = product.iter().zip(&prior).map(|(p, y)| out_scale * p + if accumulate { *y } else { 0.0 }).collect();
                    (want, bound.iter().map(|e| e * out_scale.max(1.0)).collect())
                };
                let mut variants = vec![("matmul", n)];
                if n == 1 {
                    variants.push(("matvec", 1));
                }
                for (kind, n) in variants {
                    let mut init = vec![SENTINEL; 2 * PAD];
                    init.splice(PAD..PAD, prior.iter().map(|v| v.to_bits()));
                    let out = ctx.storage("out", &init);
                    let y = Bind(&out, (PAD * 4) as u64, Some((prior.len() * 4) as u64));
                    let at = StepParams::new(pos, n as u32);
                    let step = kernels::step_uniform(&ctx, at);
                    let norm = norm.then_some((&gb, 1e-5));
                    let bias = biased.then_some(&bb);
                    let input = if small { &xs } else { &xb };
                    let op = LinearOp { accumulate, norm, glu, activation, bias, act, out_scale, ..LinearOp::new(&m, input, y) };
                    let d = match kind {
                        "matvec" => k.matvec(&ctx, &op, &step),
                        _ => k.matmul(&ctx, &op, &step),
                    }
                    .expect("dispatch");
                    kernels::run_once(&ctx, d, at);
                    let got = read_guarded(&ctx, &out, prior.len());
                    assert_close(
                        &got,
                        &want,
                        |i| tol[i],
                        &format!(
                            "{kind} {dtype:?} {rows}x{cols} pos {pos} tokens {n} accumulate {accumulate} scale {out_scale} norm {} glu {glu} {activation:?} bias {biased} act {act} {options:?}",
                            norm.is_some()
                        ),
                    );
                }
            }
        }
    }
}

#[test]
fn the_swiglu_epilogue_refuses_what_it_cannot_do() {
    let ctx = context();
    let t = Tensor::from_vec(vec![0.5f32; 3 * 32], (3, 32), &Device::Cpu).expect("tensor");
    let q = QTensor::quantize(&t, GgmlDType::Q8_0).expect("quantize");
    let m = GpuMatrix::upload(&ctx, &repack::repack(&q).expect("repack"), 3, 32).expect("upload");
    let (x, y) = (ctx.storage("x", &[1.0f32; 32]), ctx.storage("y", &[0.0f32; 4]));
    let at = StepParams::new(0, 1);
    let step = kernels::step_uniform(&ctx, at);
    let k = Kernels::new(&ctx).expect("every kernel compiles");
    let odd_rows = LinearOp { glu: true, ..LinearOp::new(&m, &x, Bind(&y, 0, None)) };
    assert!(k.matvec(&ctx, &odd_rows, &step).is_err(), "3 rows cannot pair into gate/up");
    let whole_workgroup = Kernels::with_threads_per_row(&ctx, 64).expect("every kernel compiles");
    let t = Tensor::from_vec(vec![0.5f32; 4 * 32], (4, 32), &Device::Cpu).expect("tensor");
    let m4 = GpuMatrix::upload(&ctx, &repack::repack(&QTensor::quantize(&t, GgmlDType::Q8_0).expect("quantize")).expect("repack"), 4, 32)
        .expect("upload");
    let pair = LinearOp { glu: true, ..LinearOp::new(&m4, &x, Bind(&y, 0, None)) };
    assert!(k.matvec(&ctx, &pair, &step).is_ok());
    assert!(whole_workgroup.matvec(&ctx, &pair, &step).is_err(), "one row per workgroup cannot pair rows");
    let scaled = LinearOp { out_scale: 0.5, ..LinearOp { glu: true, ..LinearOp::new(&m4, &x, Bind(&y, 0, None)) } };
    assert!(k.matvec(&ctx, &scaled, &step).is_err(), "the SwiGLU epilogue writes its own outputs, unscaled");
    let accumulating = LinearOp { accumulate: true, ..pair };
    assert!(k.matvec(&ctx, &accumulating, &step).is_err(), "SwiGLU output cannot be added to y");
}

/// Kernel options the kernels cannot take are refused in words, before any pipeline.
#[test]
fn kernel_options_out_of_range_are_refused() {
    let ctx = context();
    let refused = |options: KernelOptions, words: &str| match Kernels::with_options(&ctx, options) {
        Ok(_) => panic!("{options:?} was taken"),
        Err(e) => assert!(e.to_string().contains(words), "{options:?}: {e}"),
    };
    refused(KernelOptions { units_in_flight: 3, ..KernelOptions::plain(1) }, "one of [2, 4, 8] is possible");
    refused(KernelOptions { prefill_threads_per_row: 3, ..KernelOptions::plain(1) }, "3 threads per row");
    refused(KernelOptions { split_chunk: 0, ..KernelOptions::plain(1) }, "split-K chunks of 0");
    refused(KernelOptions { rows_per_subgroup: 3, subgroups: true, ..KernelOptions::plain(1) }, "3 rows a subgroup: one of [1, 2, 4]");
    refused(KernelOptions { rows_per_subgroup: 2, ..KernelOptions::plain(1) }, "without subgroups take one row");
}

/// Matrices stacked for one kernel keep their format when they share it; quantized ones
/// whose formats differ (a Q4_K_M file's Q6_K V beside Q4_K Q and K) all take the common
/// 8-bit layout with a scale and offset per 16 weights, at 1.5 bytes a weight; one of float
/// weights among them sends them all to F32.
#[test]
fn stacks_of_differing_formats_share_the_affine_layout_unless_one_holds_floats() {
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let (rows, cols) = (8usize, 256usize);
    let quantize = |t: GgmlDType, rng: &mut ChaCha8Rng| {
        QTensor::quantize(&Tensor::from_vec(random(rng, rows * cols, 1.0), (rows, cols), &Device::Cpu).expect("tensor"), t)
            .expect("quantize")
    };
    let (q4k, q6k, f16) = (quantize(GgmlDType::Q4K, &mut rng), quantize(GgmlDType::Q6K, &mut rng), quantize(GgmlDType::F16, &mut rng));
    let formats = |parts: &[&QTensor]| repack::repack_together(parts).expect("repack").iter().map(|r| r.format).collect::<Vec<_>>();
    assert_eq!(formats(&[&q4k, &q4k]), [gpu_ops::WeightFormat::Q4K; 2]);
    assert_eq!(formats(&[&q4k, &q4k, &q6k]), [gpu_ops::WeightFormat::Affine16; 3]);
    assert_eq!(formats(&[&q4k, &f16]), [gpu_ops::WeightFormat::F32; 2]);
    let affine = repack::repack_together(&[&q4k, &q6k]).expect("repack");
    let bytes: usize = affine.iter().map(|r| 4 * (r.a.len() + r.b.len())).sum();
    assert_eq!(bytes, 2 * rows * cols * 3 / 2, "1.5 bytes a weight");
}

/// The gate/up interleave the SwiGLU epilogue reads equals the interleaved dense matrix,
/// row for row, in every weight format.
#[test]
fn interleaved_gate_and_up_rows_are_the_dense_rows_interleaved() {
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let rows = 7usize;
    for dtype in ALL_TYPES {
        let cols = columns(dtype, 96);
        let quantize =
            |v: Vec<f32>| QTensor::quantize(&Tensor::from_vec(v, (rows, cols), &Device::Cpu).expect("tensor"), dtype).expect("quantize");
        let (gate, up) = (quantize(random(&mut rng, rows * cols, 1.0)), quantize(random(&mut rng, rows * cols, 1.0)));
        let (dg, du) = (to_vec(&gate).expect("dequantize"), to_vec(&up).expect("dequantize"));
        let woven = repack::interleave_rows(repack::repack(&gate).expect("repack"), repack::repack(&up).expect("repack"), rows)
            .expect("interleave");
        // The file's own row bytes interleaved (re-quantizing dequantized K-quant rows is not
        // the identity, so the expected matrix is built from the raw rows).
        let (gb, ub) = (gate.data().expect("bytes"), up.data().expect("bytes"));
        let row_bytes = gb.len() / rows;
        let raw: Vec<u8> =
            gb.chunks_exact(row_bytes).zip(ub.chunks_exact(row_bytes)).flat_map(|(g, u)| g.iter().chain(u).copied()).collect();
        let both = qtensor_from_ggml(dtype, &raw, vec![2 * rows, cols], &Device::Cpu).expect("interleaved tensor");
        let dense: Vec<f32> = dg.chunks_exact(cols).zip(du.chunks_exact(cols)).flat_map(|(g, u)| g.iter().chain(u).copied()).collect();
        assert_eq!(to_vec(&both).expect("dequantize"), dense, "{dtype:?}: the raw interleave is the dense interleave");
        let expect = repack::repack(&both).expect("repack");
        assert_eq!((woven.format, &woven.a, &woven.b), (expect.format, &expect.a, &expect.b), "{dtype:?}");
    }
}

#[test]
fn matvec_reads_the_last_token_row_for_the_lm_head() {
    let ctx = context();
    let k = Kernels::new(&ctx).expect("every kernel compiles");
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let (rows, cols, n) = (101usize, 96usize, 7usize);
    let t = Tensor::from_vec(random(&mut rng, rows * cols, 0.5), (rows, cols), &Device::Cpu).expect("tensor");
    let q = QTensor::quantize(&t, GgmlDType::Q8_0).expect("quantize");
    let dense = to_vec(&q).expect("dequantize");
    let m = GpuMatrix::upload(&ctx, &repack::repack(&q).expect("repack"), rows as u32, cols as u32).expect("upload");
    let x = random(&mut rng, n * cols, 3.0);
    let out = guarded(&ctx, rows);
    let at = StepParams::new(40, n as u32);
    let step = kernels::step_uniform(&ctx, at);
    let xb = ctx.storage("x", &x);
    let op = LinearOp { last_token: true, ..LinearOp::new(&m, &xb, Bind(&out, (PAD * 4) as u64, Some((rows * 4) as u64))) };
    let d = k.matvec(&ctx, &op, &step).expect("dispatch");
    kernels::run_once(&ctx, d, at);
    let got = read_guarded(&ctx, &out, rows);
    let last = &x[(n - 1) * cols..];
    let want: Vec<f32> = dense.chunks_exact(cols).map(|r| ops::dot(r, last)).collect();
    assert_close(&got, &want, |_| 1e-4, "LM head on the last of 7 rows");
}

#[test]
fn a_matmul_band_writes_its_rows_of_each_tokens_outputs_and_nothing_between() {
    // A 101-row matrix as the band at rows 64 .. 165 of a 301-row LM head: each of 7 tokens'
    // outputs go to y[t * 301 + 64 + r]; every other cell of y keeps its sentinel.
    let ctx = context();
    let k = Kernels::new(&ctx).expect("every kernel compiles");
    let mut rng = ChaCha8Rng::seed_from_u64(10);
    let (rows, cols, n, stride, first) = (101usize, 96usize, 7usize, 301usize, 64usize);
    let t = Tensor::from_vec(random(&mut rng, rows * cols, 0.5), (rows, cols), &Device::Cpu).expect("tensor");
    let q = QTensor::quantize(&t, GgmlDType::Q8_0).expect("quantize");
    let dense = to_vec(&q).expect("dequantize");
    let m = GpuMatrix::upload(&ctx, &repack::repack(&q).expect("repack"), rows as u32, cols as u32).expect("upload");
    let x = random(&mut rng, n * cols, 3.0);
    let xb = ctx.storage("x", &x);
    let out = guarded(&ctx, n * stride);
    let at = StepParams::new(0, n as u32);
    let step = kernels::step_uniform(&ctx, at);
    let y = Bind(&out, ((PAD + first) * 4) as u64, Some(((n * stride - first) * 4) as u64));
    let op = LinearOp { y_stride: Some(stride as u32), ..LinearOp::new(&m, &xb, y) };
    kernels::run_once(&ctx, k.matmul(&ctx, &op, &step).expect("dispatch"), at);
    let got = read_guarded(&ctx, &out, n * stride);
    for tok in 0..n {
        for (c, v) in got[tok * stride..(tok + 1) * stride].iter().enumerate() {
            if (first..first + rows).contains(&c) {
                let want = ops::dot(&dense[(c - first) * cols..][..cols], &x[tok * cols..][..cols]);
                assert!((v - want).abs() <= 1e-4 * want.abs().max(1.0), "token {tok}, row {c}: {v} against {want}");
            } else {
                assert_eq!(v.to_bits(), SENTINEL, "token {tok}, row {c} is outside the band: it must stay untouched");
            }
        }
    }
}

#[test]
fn matvec_and_matmul_q4_1_match_their_cpu_twin() {
    check_linear(GgmlDType::Q4_1, 2);
}

#[test]
fn matvec_and_matmul_q4_0_match_their_cpu_twin() {
    check_linear(GgmlDType::Q4_0, 4);
}

#[test]
fn matvec_and_matmul_q8_0_match_their_cpu_twin() {
    check_linear(GgmlDType::Q8_0, 3);
}

#[test]
fn matvec_and_matmul_f16_match_their_cpu_twin() {
    check_linear(GgmlDType::F16, 5);
}

#[test]
fn matvec_and_matmul_f32_match_their_cpu_twin() {
    check_linear(GgmlDType::F32, 6);
}

#[test]
fn matvec_and_matmul_q5_0_match_their_cpu_twin() {
    check_linear(GgmlDType::Q5_0, 13);
}

#[test]
fn matvec_and_matmul_q5_1_match_their_cpu_twin() {
    check_linear(GgmlDType::Q5_1, 14);
}

#[test]
fn matvec_and_matmul_q4_k_match_their_cpu_twin() {
    check_linear(GgmlDType::Q4K, 15);
}

#[test]
fn matvec_and_matmul_q5_k_match_their_cpu_twin() {
    check_linear(GgmlDType::Q5K, 16);
}

/// The common layout of a stack whose parts' formats differ (8-bit integers, a scale and
/// offset per 16 weights), made from Q6_K (negative integers, offsets 0) and from Q2_K
/// (offsets: its mins).
#[test]
fn matvec_and_matmul_of_the_mixed_stacks_layout_match_their_cpu_twin() {
    let affine = |q: &QTensor| {
        let m = repack::repack_affine16(q).expect("repack").expect("a quantized type");
        assert_eq!(m.format, gpu_ops::WeightFormat::Affine16);
        m
    };
    check_linear_in(GgmlDType::Q6K, 21, affine);
    check_linear_in(GgmlDType::Q2K, 22, affine);
}

#[test]
fn matvec_and_matmul_q2_k_match_their_cpu_twin() {
    check_linear(GgmlDType::Q2K, 20);
}

#[test]
fn matvec_and_matmul_q3_k_match_their_cpu_twin() {
    check_linear(GgmlDType::Q3K, 19);
}

#[test]
fn matvec_and_matmul_q6_k_match_their_cpu_twin() {
    check_linear(GgmlDType::Q6K, 17);
}

#[test]
fn matvec_and_matmul_bf16_match_their_cpu_twin() {
    check_linear(GgmlDType::BF16, 18);
}

/// Every weight type the engine reads.
const ALL_TYPES: [GgmlDType; 13] = tokenscope::gguf::SUPPORTED_TYPES;

/// `cols` rounded up to whole blocks of `dtype` (256 weights for the K formats), so the K
/// formats run every case at a nearby width.
fn columns(dtype: GgmlDType, cols: usize) -> usize {
    cols.next_multiple_of(dtype.block_size())
}

#[test]
fn embedding_lookup_matches_the_dequantized_row_exactly() {
    let ctx = context();
    let k = Kernels::new(&ctx).expect("every kernel compiles");
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let vocab = 301usize;
    for dtype in ALL_TYPES {
        let dim = columns(dtype, 608);
        let table = random(&mut rng, vocab * dim, 1.0);
        let t = Tensor::from_vec(table, (vocab, dim), &Device::Cpu).expect("tensor");
        let q = QTensor::quantize(&t, dtype).expect("quantize");
        let dense = to_vec(&q).expect("dequantize");
        // The type's own layout, and a quantized type's in the mixed stacks' common one too.
        let mut layouts = vec![repack::repack(&q).expect("repack")];
        layouts.extend(repack::repack_affine16(&q).expect("repack"));
        for layout in layouts {
            let m = GpuMatrix::upload(&ctx, &layout, vocab as u32, dim as u32).expect("upload");
            let ids = [0u32, 1, 150, vocab as u32 - 1, 150];
            for n in [1usize, ids.len()] {
                let out = guarded(&ctx, n * dim);
                let at = StepParams::new(5, n as u32);
                let step = kernels::step_uniform(&ctx, at);
                let tokens = ctx.storage("tokens", &ids);
                // One token's row as it is; several scaled as Gemma 3's are (by sqrt(dim)), and
                // again with each position's row of a learned table added (GPT-2's: positions
                // 5 .. 5 + n of 16).
                let scale = if n == 1 { 1.0 } else { (dim as f32).sqrt() };
                for positions in [None, Some(random(&mut rng, 16 * dim, 0.5))].into_iter().take(n) {
                    let table = positions.as_ref().map(|p| ctx.storage("positions", p));
                    let x = Bind(&out, (PAD * 4) as u64, Some((n * dim * 4) as u64));
                    let d = k.embedding(&ctx, &m, 0, scale, table.as_ref(), x, &step, &tokens);
                    kernels::run_once(&ctx, d.expect("dispatch"), at);
                    let got = read_guarded(&ctx, &out, n * dim);
                    let position = |b: usize, i: usize| positions.as_ref().map_or(0.0, |p| p[(5 + b) * dim + i]);
                    let (dense, position) = (&dense, &position);
                    let row = |(b, &t): (usize, &u32)| (0..dim).map(move |i| dense[t as usize * dim + i] * scale + position(b, i));
                    let want: Vec<f32> = ids[..n].iter().enumerate().flat_map(row).collect();
                    // The same dequantization arithmetic as candle's, and the one product the
                    // CPU path makes: bit-exact (a zero's sign aside); with positions, the add
                    // may fuse with the product (one rounding of the row's, 2^-24 of it).
                    let tol = |i: usize| if positions.is_some() { want[i].abs() * 6e-8 } else { 0.0 };
                    let what = format!("embedding {dtype:?} as {:?} of {n} tokens, positions {}", layout.format, positions.is_some());
                    assert_close(&got, &want, tol, &what);
                }
            }
        }
    }
}

/// The post norm (Gemma's, norm_add.wgsl) against its twin `ops::add_normed`, alone and with
/// another sublayer's term added first (FIRST, a decode step's last dispatch of a layer whose
/// feed-forward read the attention's post-normed output: the twin twice, in that order):
/// rows of odd widths (not multiples of the workgroup), a decode step's one token and a
/// prefill's many, sublayer outputs as large as a residual stream's and as small as 1e-3
/// (where eps counts); the step's rows of x change, a row past the step's tokens and the
/// sentinels around x stay.
#[test]
fn the_post_norm_adds_the_normed_row_and_nothing_else() {
    let ctx = context();
    let k = Kernels::new(&ctx).expect("every kernel compiles");
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    for (dim, n, scale) in [(577usize, 1usize, 1.0f32), (640, 3, 3_000.0), (33, 13, 1e-3), (1001, 64, 20.0)] {
        for with_first in [false, true] {
            let eps = 1e-6;
            // n rows of the step, and one more that is not the step's.
            let y = random(&mut rng, (n + 1) * dim, scale);
            let gain = random(&mut rng, dim, 2.0);
            let first = random(&mut rng, (n + 1) * dim, 3.0 * scale);
            let first_gain = random(&mut rng, dim, 2.0);
            let prior = random(&mut rng, (n + 1) * dim, 5.0);
            let mut init = vec![SENTINEL; 2 * PAD];
            init.splice(PAD..PAD, prior.iter().map(|v| v.to_bits()));
            let x = ctx.storage("x", &init);
            let at = StepParams::new(9, n as u32);
            let step = kernels::step_uniform(&ctx, at);
            let (yb, gb) = (ctx.storage("y", &y), ctx.storage("gain", &gain));
            let (fb, fgb) = (ctx.storage("first", &first), ctx.storage("first gain", &first_gain));
            let op = gpu_ops::PostNorm {
                dim: dim as u32,
                eps,
                y: Bind(&yb, 0, None),
                gain: &gb,
                x: Bind(&x, (PAD * 4) as u64, Some(((n + 1) * dim * 4) as u64)),
                first: with_first.then_some((Bind(&fb, 0, None), &fgb)),
            };
            kernels::run_once(&ctx, k.post_norm(&ctx, &op, &step).expect("dispatch"), at);
            let got = read_guarded(&ctx, &x, (n + 1) * dim);
            let mut want = prior.clone();
            if with_first {
                ops::add_normed(&mut want[..n * dim], &first[..n * dim], &first_gain, eps);
            }
            ops::add_normed(&mut want[..n * dim], &y[..n * dim], &gain, eps);
            // f32 sums of squares against the twin's f64: 1e-5 of each term (bounded by the
            // largest of them, the first's where it is added).
            let tol =
                |i: usize| 1e-5 * (prior[i].abs() + 2.0 * (want[i] - prior[i]).abs() + if with_first { 10.0 * scale } else { 0.0 }) + 1e-6;
            let what = format!("post norm{}, {n} rows of {dim} (|y| up to {scale})", if with_first { " with a first term" } else { "" });
            assert_close(&got[..n * dim], &want[..n * dim], tol, &what);
            assert_eq!(&got[n * dim..], &prior[n * dim..], "{what}: the row past the step's tokens was written");
        }
    }
    // A row wider than its buffers is refused.
    let small = ctx.storage("small", &[0.0f32; 8]);
    let step = kernels::step_uniform(&ctx, StepParams::new(0, 1));
    assert!(k.norm_add(&ctx, 9, 1e-6, Bind(&small, 0, None), &small, Bind(&small, 0, None), &step).is_err());
}

/// The short convolution (LFM2's, short_conv.wgsl) against its twins
/// `short_conv::gated_inputs` and `convolve`: odd widths (not multiples of the workgroup), a
/// decode step's one token and a prefill's many, from position 0 (the kernel reaching before
/// it, zeros) and from later ones (its earlier rows read from the cache), kernels of 2 to 4
/// positions. The step's cache rows get each token's `b * x'` exactly (one f32 product, as
/// the twin's); the rows before the step, the rows after it, the output row past the step's
/// tokens and the sentinels around both buffers stay as they were.
#[test]
fn the_short_convolution_writes_its_rows_and_nothing_else() {
    use tokenscope::backend::cpu::short_conv::{convolve, gated_inputs};
    let ctx = context();
    let k = Kernels::new(&ctx).expect("every kernel compiles");
    let mut rng = ChaCha8Rng::seed_from_u64(74);
    for (dim, n, pos, width) in
        [(65usize, 1usize, 0usize, 3usize), (577, 1, 9, 3), (33, 13, 4, 3), (100, 5, 1, 4), (1001, 64, 2, 2), (7, 3, 0, 4)]
    {
        let capacity = pos + n + 1;
        // n rows of the step, and one more that is not the step's.
        let bcx = random(&mut rng, (n + 1) * 3 * dim, 2.0);
        let kernel = random(&mut rng, dim * width, 1.0);
        let history = random(&mut rng, pos * dim, 3.0);
        // The cache: the earlier steps' rows, then sentinels where the step writes and past it.
        let mut init = vec![SENTINEL; PAD];
        init.extend(history.iter().map(|v| v.to_bits()));
        init.extend(vec![SENTINEL; (capacity - pos) * dim + PAD]);
        let cache = ctx.storage("cache", &init);
        let out = guarded(&ctx, (n + 1) * dim);
        let at = StepParams::new(pos as u32, n as u32);
        let step = kernels::step_uniform(&ctx, at);
        let (bb, kb) = (ctx.storage("bcx", &bcx), ctx.storage("kernel", &kernel));
        let op = gpu_ops::ShortConv {
            dim: dim as u32,
            width: width as u32,
            bcx: Bind(&bb, 0, None),
            kernel: &kb,
            cache: Bind(&cache, (PAD * 4) as u64, Some((capacity * dim * 4) as u64)),
            out: Bind(&out, (PAD * 4) as u64, Some(((n + 1) * dim * 4) as u64)),
        };
        kernels::run_once(&ctx, k.short_conv(&ctx, &op, &step).expect("dispatch"), at);
        let what = format!("short convolution, {n} tokens from position {pos}, {dim} channels over {width}");
        let gated = gated_inputs(&bcx[..n * 3 * dim], dim);
        let all_rows = [&history[..], &gated].concat();
        let mut want = vec![0.0f32; n * dim];
        convolve(&bcx[..n * 3 * dim], &all_rows, &kernel, width, pos, &mut want);
        let got_cache = read_guarded(&ctx, &cache, capacity * dim);
        assert_eq!(&got_cache[..pos * dim], &history[..], "{what}: a row before the step was written");
        assert_eq!(&got_cache[pos * dim..(pos + n) * dim], &gated[..], "{what}: the step's gated inputs");
        assert!(got_cache[(pos + n) * dim..].iter().all(|v| v.to_bits() == SENTINEL), "{what}: a cache row past the step was written");
        // f32 sums of `width` products in the twin's order: a fused multiply-add may round each
        // term once less, 2e-6 of the sum of the terms' sizes times |c|.
        let tol = |i: usize| {
            let (t, ch) = (i / dim, i % dim);
            let c = bcx[t * 3 * dim + dim + ch].abs();
            let terms: f32 = (0..width)
                .filter_map(|j| (pos + t + j + 1).checked_sub(width).map(|q| (kernel[ch * width + j] * all_rows[q * dim + ch]).abs()))
                .sum();
            2e-6 * c * terms + 1e-30
        };
        let got = read_guarded(&ctx, &out, (n + 1) * dim);
        assert_close(&got[..n * dim], &want, tol, &what);
        assert!(got[n * dim..].iter().all(|v| v.to_bits() == SENTINEL), "{what}: the row past the step's tokens was written");
    }
    // A kernel or a cache row smaller than its channels need is refused.
    let (small, step) = (ctx.storage("small", &[0.0f32; 8]), kernels::step_uniform(&ctx, StepParams::new(0, 1)));
    let big = ctx.storage("big", &[0.0f32; 64]);
    for (dim, width, kernel, cache) in [(8u32, 3u32, &small, &big), (9, 1, &big, &small)] {
        let op = gpu_ops::ShortConv { dim, width, bcx: Bind(&big, 0, None), kernel, cache: Bind(cache, 0, None), out: Bind(&big, 0, None) };
        assert!(k.short_conv(&ctx, &op, &step).is_err(), "{dim} channels over {width}");
    }
}

/// The LayerNorm (StableLM's, layer_norm.wgsl) against its twin `ops::layer_norm`: rows of
/// odd widths (not multiples of the workgroup), a decode step's one token and a prefill's
/// many, rows centred far from 0 (a mean 1000 times their spread, where a one-pass variance
/// would cancel) and rows as small as 1e-3 (where eps counts); the step's rows are written, a
/// row past the step's tokens and the sentinels around the output stay.
#[test]
fn the_layer_norm_writes_the_normed_rows_and_nothing_else() {
    let ctx = context();
    let k = Kernels::new(&ctx).expect("every kernel compiles");
    let mut rng = ChaCha8Rng::seed_from_u64(23);
    for (dim, n, scale, offset) in [(577usize, 1usize, 1.0f32, 0.0f32), (640, 3, 3.0, 3_000.0), (33, 13, 1e-3, 0.0), (1001, 64, 20.0, -5.0)]
    {
        let eps = 1e-5;
        // n rows of the step, and one more that is not the step's.
        let x: Vec<f32> = random(&mut rng, (n + 1) * dim, scale).into_iter().map(|v| v + offset).collect();
        let (gain, bias) = (random(&mut rng, dim, 2.0), random(&mut rng, dim, 1.0));
        let out = guarded(&ctx, (n + 1) * dim);
        let at = StepParams::new(9, n as u32);
        let step = kernels::step_uniform(&ctx, at);
        let (xb, nb) = (ctx.storage("x", &x), ctx.storage("norm", &[&gain[..], &bias].concat()));
        let op = gpu_ops::LayerNorm {
            dim: dim as u32,
            eps,
            x: Bind(&xb, 0, None),
            norm: &nb,
            out: Bind(&out, (PAD * 4) as u64, Some(((n + 1) * dim * 4) as u64)),
        };
        kernels::run_once(&ctx, k.layer_norm(&ctx, &op, &step).expect("dispatch"), at);
        let got = read_guarded(&ctx, &out, (n + 1) * dim);
        let mut want = vec![0.0f32; n * dim];
        for (row, w) in x.chunks_exact(dim).zip(want.chunks_exact_mut(dim)) {
            ops::layer_norm(row, &gain, &bias, eps, w);
        }
        // f32 sums against the twin's f64, the centred row's rounding (offset / scale of its
        // spread): 2e-5 of each normed value's gain, plus that rounding.
        let rounding = 1e-7 * offset.abs() / scale;
        let tol = |i: usize| (2e-5 + rounding) * gain[i % dim].abs() * 4.0 + 1e-6;
        let what = format!("LayerNorm, {n} rows of {dim} (spread {scale}, centred at {offset})");
        assert_close(&got[..n * dim], &want, tol, &what);
        assert!(got[n * dim..].iter().all(|v| v.to_bits() == SENTINEL), "{what}: the row past the step's tokens was written");
    }
    // A row wider than its buffers, or a norm without its bias, is refused.
    let (small, step) = (ctx.storage("small", &[0.0f32; 8]), kernels::step_uniform(&ctx, StepParams::new(0, 1)));
    for (dim, norm_len) in [(9usize, 18usize), (8, 8)] {
        let norm = ctx.storage("norm", &vec![0.0f32; norm_len]);
        let op = gpu_ops::LayerNorm { dim: dim as u32, eps: 1e-5, x: Bind(&small, 0, None), norm: &norm, out: Bind(&small, 0, None) };
        assert!(k.layer_norm(&ctx, &op, &step).is_err(), "rows of {dim} with {norm_len} norm floats");
    }
}

#[test]
fn an_embedding_band_writes_its_own_tokens_rows_and_nothing_else() {
    // Rows 64 .. 164 of a 301-row table, uploaded as a band: tokens in it get their dense
    // rows, tokens outside it (before, just past, far past) leave x as it was.
    let ctx = context();
    let k = Kernels::new(&ctx).expect("every kernel compiles");
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let (vocab, dim, first, rows) = (301usize, 96usize, 64usize, 100usize);
    let t = Tensor::from_vec(random(&mut rng, vocab * dim, 1.0), (vocab, dim), &Device::Cpu).expect("tensor");
    let q = QTensor::quantize(&t, GgmlDType::Q8_0).expect("quantize");
    let dense = to_vec(&q).expect("dequantize");
    let whole = repack::repack(&q).expect("repack");
    let (a_row, b_row) = (whole.a.len() / vocab, whole.b.len() / vocab);
    let band = repack::Repacked {
        format: whole.format,
        a: whole.a[first * a_row..(first + rows) * a_row].to_vec(),
        b: whole.b[first * b_row..(first + rows) * b_row].to_vec(),
    };
    let m = GpuMatrix::upload(&ctx, &band, rows as u32, dim as u32).expect("upload");
    let ids = [63u32, 64, 100, 163, 164, 300];
    let out = guarded(&ctx, ids.len() * dim);
    let at = StepParams::new(0, ids.len() as u32);
    let step = kernels::step_uniform(&ctx, at);
    let d = k.embedding(
        &ctx,
        &m,
        first as u32,
        1.0,
        None,
        Bind(&out, (PAD * 4) as u64, Some((ids.len() * dim * 4) as u64)),
        &step,
        &ctx.storage("tokens", &ids),
    );
    kernels::run_once(&ctx, d.expect("dispatch"), at);
    let got = read_guarded(&ctx, &out, ids.len() * dim);
    for (b, &id) in ids.iter().enumerate() {
        let row = &got[b * dim..(b + 1) * dim];
        if (first..first + rows).contains(&(id as usize)) {
            assert_close(row, &dense[id as usize * dim..][..dim], |_| 0.0, &format!("token {id} in the band"));
        } else {
            assert!(row.iter().all(|v| v.to_bits() == SENTINEL), "token {id} is outside the band: its row must stay untouched");
        }
    }
}

/// The argmax kernel picks what the sampler's greedy step picks (`ranking::top(_, 1)`: the
/// highest by `f32::total_cmp`, ties to the lower id) on random logits of odd lengths, with
/// the winner planted first, last, tied at two ids, among equal values, as +0 against -0 and
/// among negative values only; it writes `tokens[0]` and nothing else (the sentinels after
/// it stay).
#[test]
fn argmax_picks_the_samplers_greedy_token_and_writes_nothing_else() {
    let ctx = context();
    let k = Kernels::new(&ctx).expect("every kernel compiles");
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut cases: Vec<(String, Vec<f32>)> = Vec::new();
    for n in [1usize, 3, 255, 257, 2049, 4099, 49157] {
        cases.push((format!("random {n}"), random(&mut rng, n, 30.0)));
    }
    let n = 3001;
    let mut first = random(&mut rng, n, 1.0);
    first[0] = 5.0;
    let mut last = random(&mut rng, n, 1.0);
    last[n - 1] = 5.0;
    let mut tie = random(&mut rng, n, 1.0);
    tie[1999] = 5.0;
    tie[777] = 5.0;
    let mut zeros = vec![-1.0f32; n];
    zeros[5] = -0.0;
    zeros[2900] = 0.0;
    let negative: Vec<f32> = random(&mut rng, n, 1.0).iter().map(|v| -1.0 - v.abs()).collect();
    cases.extend([
        ("the first".to_string(), first),
        ("the last".to_string(), last),
        ("a tie".to_string(), tie),
        ("all equal".to_string(), vec![0.25; n]),
        ("+0 against -0".to_string(), zeros),
        ("negative only".to_string(), negative),
    ]);
    for (what, logits) in cases {
        let want = tokenscope::sampler::ranking::top(&logits, 1)[0];
        let buf = ctx.storage("logits", &logits);
        let tokens = ctx.storage("tokens", &vec![SENTINEL; 1 + PAD]);
        let d = k.argmax(&ctx, kernels::whole(&buf), logits.len() as u32, &tokens).expect("dispatch");
        kernels::run_once(&ctx, d, StepParams::new(0, 1));
        let got = pollster::block_on(ctx.read_f32(&tokens, 1 + PAD)).expect("readback");
        assert_eq!(got[0].to_bits(), want, "argmax of {what} ({} logits)", logits.len());
        assert!(got[1..].iter().all(|v| v.to_bits() == SENTINEL), "argmax of {what}: it wrote past tokens[0]");
    }
    // The logits a binding holds bound it.
    let small = ctx.storage("logits", &[1.0f32; 10]);
    assert!(k.argmax(&ctx, kernels::whole(&small), 11, &small).is_err(), "11 logits from a binding of 10 must be refused");
}

#[test]
fn rope_kv_matches_its_cpu_twin_at_far_positions() {
    let ctx = context();
    // Every variant: an f32 cache and a half-float one (the same rotation, each written value
    // then rounded to the nearest half either way, WGSL letting pack2x16float round up or down:
    // within 2^-10 of it, relatively, 2^-24 absolutely among subnormals), each plain, with
    // Q/K/V biases (Qwen2), with head norms (each head's, Qwen3; the whole of q's and of k's,
    // OLMo 2, whose rows of 9 * 64 + 3 * 64 + 3 * 64 floats take a workgroup each, 7.5 pairs
    // a thread) and with both; each head's norm after RoPE too (Hunyuan's); RoPE with Llama
    // 3's per-pair factors.
    let (heads, kv_heads, hd, context_len) = (9usize, 3usize, 64usize, 5000usize);
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let factors: Vec<f32> = (0..hd / 2).map(|_| rng.random_range(1.0..8.0)).collect();
    let freqs = RopeFrequencies::new(hd, hd, 100_000.0, 1.0, Some(&factors));
    for variant in gpu_ops::RopeKvKernel::all() {
        let kv_f16 = variant.kv_f16;
        let k = Kernels::with_options(&ctx, KernelOptions { kv_f16, ..KernelOptions::plain(1) }).expect("every kernel compiles");
        let (qd, kv) = (heads * hd, kv_heads * hd);
        let width = qd + 2 * kv;
        let words = if kv_f16 { context_len * kv / 2 } else { context_len * kv };
        let table = ctx.storage("table", &gpu_ops::rope_table(context_len, &freqs));
        let rounding = |w: f32| if kv_f16 { w.abs() / 1024.0 + 6e-8 } else { 0.0 };
        let bias = variant.bias.then(|| random(&mut rng, width, 2.0));
        // Each head's gain (q's then k's), or one per element of q and of k.
        let gain_widths = variant.head_norm.map(|span| match span {
            HeadNormSpan::Head => (hd, hd),
            HeadNormSpan::Whole => (qd, kv),
        });
        let gains = gain_widths.map(|(q, k)| random(&mut rng, q + k, 2.0));
        let (bias_buf, gain_buf) = (bias.as_ref().map(|b| ctx.storage("bias", b)), gains.as_ref().map(|g| ctx.storage("gains", g)));
        // (first position, tokens): decode near and far, and prefill batches; every other
        // case of the variants without head norms (no model has both) clamps q, k and v to
        // [-3, 3] after the biases (OLMo 1.7's clamp): the values reach 5 and the biases 2.
        for (case, (pos, n)) in [(0usize, 1usize), (1, 1), (4999, 1), (2, 5), (4990, 9)].into_iter().enumerate() {
            let clamp = if variant.head_norm.is_none() && case % 2 == 1 { 3.0 } else { 0.0 };
            // Every other case of each head's norm norms after RoPE (Hunyuan's).
            let after_rope = variant.head_norm == Some(HeadNormSpan::Head) && case % 2 == 1;
            let qkv = random(&mut rng, n * width, 5.0);
            // Priors a half-float cache holds exactly: rows not written must come back as they were.
            let (mut k_prior, mut v_prior) = (random(&mut rng, context_len * kv, 1.0), random(&mut rng, context_len * kv, 1.0));
            if kv_f16 {
                (k_prior, v_prior) = (to_f16_and_back(&k_prior), to_f16_and_back(&v_prior));
            }
            let q_out = guarded(&ctx, n * qd);
            let (kc, vc) = (guarded_cache(&ctx, &k_prior, kv_f16), guarded_cache(&ctx, &v_prior, kv_f16));
            let at = StepParams::new(pos as u32, n as u32);
            let step = kernels::step_uniform(&ctx, at);
            let cache = |buf| Bind(buf, (PAD * 4) as u64, Some((words * 4) as u64));
            let qkv_buf = ctx.storage("qkv", &qkv);
            let q_bind = Bind(&q_out, (PAD * 4) as u64, Some((n * qd * 4) as u64));
            let op = gpu_ops::RopeKvOp {
                bias: bias_buf.as_ref(),
                head_norm: gain_buf.as_ref().zip(variant.head_norm).map(|(g, span)| (g, 1e-6, span)),
                clamp,
                norm_after_rope: after_rope,
                ..gpu_ops::RopeKvOp::new([heads as u32, kv_heads as u32, hd as u32], &qkv_buf, q_bind, cache(&kc), cache(&vc), &table)
            };
            kernels::run_once(&ctx, k.rope_kv(&ctx, &op, &step).expect("dispatch"), at);
            let (mut want_q, mut want_k, mut want_v) = (Vec::new(), k_prior.clone(), v_prior.clone());
            for b in 0..n {
                let mut row = qkv[b * width..][..width].to_vec();
                if let Some(bias) = &bias {
                    ops::add_rows(&mut row, bias);
                }
                if clamp > 0.0 {
                    ops::clamp_all(&mut row, clamp);
                }
                let (mut qr, mut kr) = (row[..qd].to_vec(), row[qd..qd + kv].to_vec());
                let norm = |qr: &mut Vec<f32>, kr: &mut Vec<f32>| {
                    if let (Some(g), Some((q_gain, _))) = (&gains, gain_widths) {
                        ops::rmsnorm_heads(qr, &g[..q_gain], 1e-6);
                        ops::rmsnorm_heads(kr, &g[q_gain..], 1e-6);
                    }
                };
                if !after_rope {
                    norm(&mut qr, &mut kr);
                }
                ops::rope(&mut qr, &freqs, pos + b);
                ops::rope(&mut kr, &freqs, pos + b);
                if after_rope {
                    norm(&mut qr, &mut kr);
                }
                want_q.extend(qr);
                let at = (pos + b) * kv;
                want_k[at..at + kv].copy_from_slice(&kr);
                want_v[at..at + kv].copy_from_slice(&row[qd + kv..]);
            }
            let what =
                |part: &str| format!("rope_kv {part}, pos {pos}, {n} tokens, clamp {clamp}, norm after RoPE {after_rope}, {variant:?}");
            let got_q = read_guarded(&ctx, &q_out, n * qd);
            assert_close(&got_q, &want_q, |i| 1e-5 * (1.0 + want_q[i].abs()) + 1e-5, &what("q"));
            // Every other cache row must come back untouched.
            let got_k = cache_values(&read_guarded(&ctx, &kc, words), kv_f16);
            assert_close(&got_k, &want_k, |i| 1e-5 * (1.0 + want_k[i].abs()) + 1e-5 + rounding(want_k[i]), &what("K cache"));
            let got_v = cache_values(&read_guarded(&ctx, &vc, words), kv_f16);
            if kv_f16 {
                assert_close(&got_v, &want_v, |i| rounding(want_v[i]), &what("V cache"));
            } else {
                // Copied, or given its bias by the same one f32 addition on both sides.
                assert_eq!(got_v, want_v, "{}", what("V cache rows"));
            }
        }
    }
}

#[test]
fn split_k_causal_attention_matches_its_cpu_twins_on_long_caches() {
    let ctx = context_with_subgroups();
    // Plain and subgroup reductions, over f32 and half-float caches (the twins read the same
    // halves, widened: the tolerances stay), in split-K chunks of the default length, of 37
    // positions (odd: chunk edges off every power of two) and of 128 (each thread's slice of
    // the values 8 positions: the most it holds in registers; the default's are 4, and the
    // one-dispatch form's up to 16 walk the cache). Rows per workgroup do not touch attention.
    let default = KernelOptions::plain(8).split_chunk;
    for (subgroups, kv_f16, split_chunk) in [
        (false, false, default),
        (true, false, default),
        (false, true, default),
        (true, true, default),
        (true, false, 37),
        (false, true, 128),
    ] {
        check_attention(&ctx, KernelOptions { subgroups, kv_f16, split_chunk, ..KernelOptions::plain(8) });
    }
}

fn check_attention(ctx: &GpuContext, options: KernelOptions) {
    let kv_f16 = options.kv_f16;
    let k = Kernels::with_options(ctx, options).expect("every kernel compiles");
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    // (first position, tokens, cache capacity): decode at one position, chunk edges (of
    // split-K's chunks of 64 and of the one-dispatch form's 256), odd
    // sizes, a cache far past one workgroup's memory, empty chunks, and prefill batches whose
    // tokens each see a different number of positions (causal), across chunk edges; this
    // model's heads on all of them, and on some, heads of 24 (256 / 24: ten slices of the
    // positions and 16 idle threads when weighing values) and of 320 (wider than the
    // workgroup: a dimension per thread in turn).
    let cases = [
        (0usize, 1usize, 1usize),
        (1, 1, 700),
        (254, 1, 256),
        (63, 2, 130),
        (256, 1, 300),
        (999, 1, 2048),
        (5000, 1, 5001),
        (3000, 1, 8192),
        (0, 7, 7),
        (200, 56, 300),
        (250, 13, 600),
        (2990, 40, 3100),
    ];
    let shapes = [(9usize, 3usize, 64usize, &cases[..]), (4, 2, 24, &cases[1..5]), (2, 1, 320, &[cases[2], cases[10]])];
    // Each case over every position (window 0), and some over a sliding window (Gemma's): of
    // 1 position, of 37 (odd, inside a chunk, its edges off every chunk's), of 100 for a
    // prefill batch whose tokens' windows start at different chunks, of 513 far past a
    // chunk; and some with every score capped (Gemma 2's softcap, here small enough to bend
    // most scores: they reach about 10), in one chunk, in many, and with a window; and two
    // with the scores scaled by other than 1 / sqrt(head width) (Granite's attention scale:
    // 2.5 times it, sharper weights across many chunks, and 0.3 times it, flatter ones); and
    // four with ALiBi's biases (BLOOM's largest bias of 8, its 9 heads' slopes 1/2 to 1/256
    // and one between: not a power of two): decode in one chunk and across many, a prefill
    // batch across chunk edges, and over a window.
    let scoped = [
        (1usize, 1usize, 700usize, 1usize, 0.0f32, 1.0f32, 0.0f32),
        (254, 1, 256, 37, 0.0, 1.0, 0.0),
        (200, 56, 300, 100, 0.0, 1.0, 0.0),
        (2990, 40, 3100, 513, 0.0, 1.0, 0.0),
        (63, 2, 130, 0, 2.0, 1.0, 0.0),
        (999, 1, 2048, 0, 0.7, 1.0, 0.0),
        (2990, 40, 3100, 513, 2.0, 1.0, 0.0),
        (999, 1, 2048, 0, 0.0, 2.5, 0.0),
        (200, 56, 300, 0, 0.0, 0.3, 0.0),
        (40, 1, 64, 0, 0.0, 1.0, 8.0),
        (999, 1, 2048, 0, 0.0, 1.0, 8.0),
        (250, 13, 600, 0, 0.0, 1.0, 8.0),
        (254, 1, 256, 37, 0.0, 1.0, 8.0),
    ];
    let runs = shapes
        .iter()
        .flat_map(|&(heads, kv_heads, hd, cases)| cases.iter().map(move |&(p, n, c)| (p, n, c, 0, 0.0, 1.0, 0.0, heads, kv_heads, hd)))
        .chain(scoped.iter().map(|&(p, n, c, w, cap, factor, alibi)| (p, n, c, w, cap, factor, alibi, 9, 3, 64)));
    for (pos, n, capacity, window, softcap, factor, alibi_max_bias, heads, kv_heads, hd) in runs {
        let score_scale = factor / (hd as f32).sqrt();
        let kv = kv_heads * hd;
        let q = random(&mut rng, n * heads * hd, 1.0);
        // Large scores in some chunks and small in others test the rescaling between chunks.
        let mut keys: Vec<f32> =
            (0..capacity * kv).map(|i| if (i / kv) % 300 < 40 { 3.0 } else { 1.0 } * (rng.random::<f32>() * 2.0 - 1.0)).collect();
        let mut values = random(&mut rng, capacity * kv, 2.0);
        if kv_f16 {
            (keys, values) = (to_f16_and_back(&keys), to_f16_and_back(&values));
        }
        let out = guarded(ctx, n * heads * hd);
        let at = StepParams::new(pos as u32, n as u32);
        let step = kernels::step_uniform(ctx, at);
        let (qb, kb, vb) =
            (ctx.storage("q", &q), ctx.storage("k", &cache_words(&keys, kv_f16)), ctx.storage("v", &cache_words(&values, kv_f16)));
        let shape = [heads as u32, kv_heads as u32, hd as u32];
        let split = options.split_chunk as usize;
        let parts_len = gpu_ops::attention_parts_len(shape, capacity, n, options.split_chunk);
        let n_chunks = capacity.div_ceil(split);
        assert_eq!(parts_len, n * heads * n_chunks * (2 + hd));
        let parts_buf = guarded(ctx, parts_len);
        // The layer's attention dispatches, writing into the guarded output `into`.
        let attention_into = |into| {
            k.attention(
                ctx,
                shape,
                capacity,
                gpu_ops::AttentionScope { window: window as u32, softcap, score_scale, alibi_max_bias },
                &qb,
                &kb,
                &vb,
                Bind(&parts_buf, (PAD * 4) as u64, Some((parts_len * 4) as u64)),
                Bind(into, (PAD * 4) as u64, Some((n * heads * hd * 4) as u64)),
                &step,
            )
            .expect("dispatches")
        };
        let att = attention_into(&out);
        kernels::run_once(ctx, att.partial, at);
        // Part 1 against its twin, chunk by chunk; chunks past a token's position stay unwritten,
        // and chunks wholly before its window hold empty statistics.
        let parts = read_guarded(ctx, &parts_buf, parts_len);
        let mut want = vec![0.0; n * heads * hd];
        let mut worst = 0.0f32;
        let mut capped_gap = 0.0f32;
        let mut scaled_gap = 0.0f32;
        let mut biased_gap = 0.0f32;
        for b in 0..n {
            let n_pos = pos + b + 1;
            for h in 0..heads {
                let input = ops::AttentionInput {
                    q: &q[(b * heads + h) * hd..][..hd],
                    keys: &keys,
                    values: &values,
                    kv_stride: kv,
                    kv_offset: (h / (heads / kv_heads)) * hd,
                    n_pos,
                    first: if window > 0 { n_pos.saturating_sub(window) } else { 0 },
                    scale: score_scale,
                    softcap: (softcap > 0.0).then_some(softcap),
                    alibi_slope: if alibi_max_bias > 0.0 { alibi_slope(h, heads, alibi_max_bias) } else { 0.0 },
                };
                let mut chunks = Vec::new();
                for c in 0..n_chunks {
                    let got = &parts[((b * heads + h) * n_chunks + c) * (2 + hd)..][..2 + hd];
                    let start = c * split;
                    if start >= n_pos {
                        assert!(
                            got.iter().all(|v| v.to_bits() == SENTINEL),
                            "token {b}: chunk {c} past position {} was written",
                            n_pos - 1
                        );
                        continue;
                    }
                    let end = (start + split).min(n_pos);
                    if end <= input.first {
                        assert!(
                            got[0] <= -1e38 && got[1..].iter().all(|&v| v == 0.0),
                            "token {b} head {h}: chunk {c} before the window (from {}) holds m {} l {}",
                            input.first,
                            got[0],
                            got[1]
                        );
                        continue;
                    }
                    let twin = ops::attention_chunk(&input, start.max(input.first)..end);
                    // ALiBi's biases reach -slope * distance: a score that large carries its
                    // own rounding (an ulp of it, at most 2 eps of it) on each side, and its
                    // weight exp(s - m) that much relative error, twice (s and m).
                    let biased = 4.0 * f32::EPSILON * input.alibi_slope * (n_pos - 1 - start.max(input.first)) as f32;
                    assert!(
                        (got[0] - twin.max).abs() <= 1e-5 * twin.max.abs().max(1.0),
                        "token {b} head {h} chunk {c} max {} vs {}",
                        got[0],
                        twin.max
                    );
                    let tol = 2e-5 + biased;
                    assert!((got[1] - twin.sum).abs() <= tol * twin.sum, "token {b} head {h} chunk {c} sum {} vs {}", got[1], twin.sum);
                    for (g, w) in got[2..].iter().zip(&twin.out) {
                        let d = (g - w).abs();
                        worst = worst.max(d / twin.sum);
                        assert!(d <= tol * twin.sum, "token {b} head {h} chunk {c}: {g} vs {w}");
                    }
                    chunks.push(twin);
                }
                let o = &mut want[(b * heads + h) * hd..][..hd];
                ops::combine_chunks(&chunks, o);
                // The split twin agrees with the one-pass reference attention.
                let mut reference = vec![0.0; hd];
                ops::attention(&input, &mut vec![0.0; n_pos], &mut reference);
                for (a, r) in o.iter().zip(&reference) {
                    assert!((a - r).abs() <= 2e-5, "split twin vs one-pass attention, token {b} head {h}: {a} vs {r}");
                }
                if softcap > 0.0 {
                    // The cap bites: uncapped, this head's output is far from the tolerance.
                    let mut uncapped = vec![0.0; hd];
                    ops::attention(&ops::AttentionInput { softcap: None, ..input }, &mut vec![0.0; n_pos], &mut uncapped);
                    capped_gap = capped_gap.max(uncapped.iter().zip(&reference).map(|(u, r)| (u - r).abs()).fold(0.0, f32::max));
                }
                if alibi_max_bias > 0.0 {
                    // The bias bites: without it, this head's output is far from the tolerance.
                    let mut unbiased = vec![0.0; hd];
                    ops::attention(&ops::AttentionInput { alibi_slope: 0.0, ..input }, &mut vec![0.0; n_pos], &mut unbiased);
                    biased_gap = biased_gap.max(unbiased.iter().zip(&reference).map(|(u, r)| (u - r).abs()).fold(0.0, f32::max));
                }
                if factor != 1.0 {
                    // The scale bites: at 1 / sqrt(hd), this head's output is far from it.
                    let mut plain = vec![0.0; hd];
                    let input = ops::AttentionInput { scale: 1.0 / (hd as f32).sqrt(), ..input };
                    ops::attention(&input, &mut vec![0.0; n_pos], &mut plain);
                    scaled_gap = scaled_gap.max(plain.iter().zip(&reference).map(|(u, r)| (u - r).abs()).fold(0.0, f32::max));
                }
            }
        }
        if softcap > 0.0 {
            assert!(capped_gap > 1e-2, "softcap {softcap} changes no output (gap {capped_gap}): the case cannot tell it");
        }
        if alibi_max_bias > 0.0 {
            assert!(biased_gap > 1e-2, "ALiBi changes no output (gap {biased_gap}): the case cannot tell it");
        }
        if factor != 1.0 {
            assert!(
                scaled_gap > 1e-2,
                "a score scale of {factor} / sqrt(hd) changes no output (gap {scaled_gap}): the case cannot tell it"
            );
        }
        eprintln!(
            "attention_partial {options:?}, {heads}/{kv_heads} heads of {hd}, {n} tokens from position {pos} (capacity {capacity}, window {window}, softcap {softcap}, score scale {factor} / sqrt(hd), ALiBi {alibi_max_bias}): worst |diff| / l {worst:.2e}"
        );
        // Part 2 on the GPU's part 1, against the twins' combine.
        kernels::run_once(ctx, att.combine, at);
        let got = read_guarded(ctx, &out, n * heads * hd);
        assert_close(
            &got,
            &want,
            |_| 2e-5,
            &format!("split-K attention {options:?}, {n} tokens from position {pos} (capacity {capacity}, window {window})"),
        );
        // While every token sees at most one chunk, the forward pass runs the whole attention
        // in one dispatch instead: the same result into a fresh guarded output.
        if pos + n <= kernels::ATTENTION_CHUNK {
            let single_out = guarded(ctx, n * heads * hd);
            kernels::run_once(ctx, attention_into(&single_out).single, at);
            let got = read_guarded(ctx, &single_out, n * heads * hd);
            assert_close(
                &got,
                &want,
                |_| 2e-5,
                &format!("one-dispatch attention {options:?}, {n} tokens from position {pos} (capacity {capacity}, window {window})"),
            );
        }
    }
}

/// How far a GPU attention weight may sit from its CPU twin's (both softmax rows of f32
/// scores; the GPU's exp and sums differ in the last bits).
const WEIGHT_TOL: f32 = 1e-5;

/// The attention-weights kernel (an inspecting step's) against its twin
/// `ops::attention_weights`, for the step's last token, over f32 and half-float caches: each
/// head's row lands at its layer's place in `[layers, heads, positions]`, every other layer's
/// rows and the sentinels around the output stay as they were, and heads of one group read
/// the same keys (equal queries give equal rows).
#[test]
fn attention_weights_match_their_cpu_twin_at_their_layers_place() {
    let ctx = context_with_subgroups();
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    // (first position, tokens, layer, layers, [heads, kv heads, head dim], sliding window or
    // 0, softcap or 0): over every position, over windows (Gemma's) shorter than the context,
    // an odd one and one past a workgroup's stride, and with capped scores (Gemma 2's); every
    // third case with ALiBi's biases (BLOOM's largest bias of 8; 9, 5 and 7 heads, none a
    // power of two).
    let cases = [
        (0usize, 1usize, 0usize, 1usize, [9usize, 3, 64], 0usize, 0.0f32),
        (6, 1, 2, 3, [9, 3, 64], 0, 0.0),
        (300, 1, 1, 2, [9, 3, 64], 0, 0.0),
        (997, 3, 4, 5, [5, 1, 6], 0, 0.0),
        (70, 1, 0, 2, [7, 7, 10], 0, 0.0),
        (300, 1, 1, 2, [9, 3, 64], 77, 0.0),
        (997, 3, 4, 5, [5, 1, 6], 500, 0.0),
        (6, 1, 2, 3, [9, 3, 64], 0, 0.5),
        (300, 1, 1, 2, [9, 3, 64], 77, 1.5),
    ];
    // Scores scaled by 1 / sqrt(hd), and (Granite's attention scale) by 2.5 times that in
    // every other case.
    let factors = [1.0f32, 2.5];
    for kv_f16 in [false, true] {
        let k = Kernels::with_options(&ctx, KernelOptions { kv_f16, ..KernelOptions::plain(1) }).expect("every kernel compiles");
        for (i, (pos, n, layer, layers, [heads, kv_heads, hd], window, softcap)) in cases.into_iter().enumerate() {
            let factor = factors[i % 2];
            let score_scale = factor / (hd as f32).sqrt();
            let alibi_max_bias = if i % 3 == 2 { 8.0 } else { 0.0 };
            let positions = pos + n;
            let kv = kv_heads * hd;
            let group = heads / kv_heads;
            let mut q = random(&mut rng, n * heads * hd, 1.0);
            // The last token's second head of group 0 asks what its first asks.
            if group > 1 {
                let last = (n - 1) * heads * hd;
                q.copy_within(last..last + hd, last + hd);
            }
            let mut keys = random(&mut rng, positions * kv, 2.0);
            if kv_f16 {
                keys = to_f16_and_back(&keys);
            }
            let out_len = layers * heads * positions;
            let out = guarded(&ctx, out_len);
            let at = StepParams::new(pos as u32, n as u32);
            let step = kernels::step_uniform(&ctx, at);
            let (qb, kb) = (ctx.storage("q", &q), ctx.storage("k", &cache_words(&keys, kv_f16)));
            let shape = [heads as u32, kv_heads as u32, hd as u32];
            let d = k
                .attention_weights(
                    &ctx,
                    shape,
                    layer as u32,
                    gpu_ops::AttentionScope { window: window as u32, softcap, score_scale, alibi_max_bias },
                    &qb,
                    &kb,
                    Bind(&out, (PAD * 4) as u64, Some((out_len * 4) as u64)),
                    &step,
                )
                .expect("dispatch");
            kernels::run_once(&ctx, d, at);
            let got = read_guarded(&ctx, &out, out_len);
            let what = format!(
                "attention weights, kv_f16 {kv_f16}, {n} tokens from {pos}, layer {layer} of {layers}, {heads}/{kv_heads} heads of {hd}, window {window}, softcap {softcap}, score scale {factor} / sqrt(hd), ALiBi {alibi_max_bias}"
            );
            for (l, rows) in got.chunks_exact(heads * positions).enumerate() {
                if l != layer {
                    assert!(rows.iter().all(|v| v.to_bits() == SENTINEL), "{what}: layer {l}'s rows were written");
                }
            }
            let mut want = vec![0.0; heads * positions];
            for h in 0..heads {
                let input = ops::AttentionInput {
                    q: &q[((n - 1) * heads + h) * hd..][..hd],
                    keys: &keys,
                    values: &keys,
                    kv_stride: kv,
                    kv_offset: (h / group) * hd,
                    n_pos: positions,
                    first: if window > 0 { positions.saturating_sub(window) } else { 0 },
                    scale: score_scale,
                    softcap: (softcap > 0.0).then_some(softcap),
                    alibi_slope: if alibi_max_bias > 0.0 { alibi_slope(h, heads, alibi_max_bias) } else { 0.0 },
                };
                ops::attention_weights(&input, &mut want[h * positions..][..positions]);
                if alibi_max_bias > 0.0 && positions > 1 {
                    let mut unbiased = vec![0.0; positions];
                    ops::attention_weights(&ops::AttentionInput { alibi_slope: 0.0, ..input }, &mut unbiased);
                    let gap = unbiased.iter().zip(&want[h * positions..][..positions]).map(|(u, w)| (u - w).abs()).fold(0.0, f32::max);
                    assert!(gap > 100.0 * WEIGHT_TOL, "{what}: ALiBi changes head {h}'s weights by only {gap}");
                }
                if factor != 1.0 && positions > 1 {
                    let mut plain = vec![0.0; positions];
                    ops::attention_weights(&ops::AttentionInput { scale: 1.0 / (hd as f32).sqrt(), ..input }, &mut plain);
                    let gap = plain.iter().zip(&want[h * positions..][..positions]).map(|(u, w)| (u - w).abs()).fold(0.0, f32::max);
                    assert!(gap > 100.0 * WEIGHT_TOL, "{what}: the score scale changes head {h}'s weights by only {gap}");
                }
                if softcap > 0.0 && positions > 1 {
                    let mut uncapped = vec![0.0; positions];
                    ops::attention_weights(&ops::AttentionInput { softcap: None, ..input }, &mut uncapped);
                    let gap = uncapped.iter().zip(&want[h * positions..][..positions]).map(|(u, w)| (u - w).abs()).fold(0.0, f32::max);
                    assert!(gap > 100.0 * WEIGHT_TOL, "{what}: the cap changes head {h}'s weights by only {gap}");
                }
            }
            let mine = &got[layer * heads * positions..][..heads * positions];
            assert_close(mine, &want, |_| WEIGHT_TOL, &what);
            for row in mine.chunks_exact(positions) {
                let sum: f32 = row.iter().sum();
                assert!((sum - 1.0).abs() <= 1e-5, "{what}: a row sums to {sum}");
            }
            if group > 1 && positions > 1 && alibi_max_bias == 0.0 {
                // (ALiBi gives each head a slope of its own: its rows differ.)
                assert_eq!(mine[..positions], mine[positions..2 * positions], "{what}: heads 0 and 1 share keys and a query");
                assert_ne!(mine[..positions], mine[2 * positions..3 * positions], "{what}: head 2 asks something else");
            }
        }
    }
}

/// A random `rows x cols` matrix in `dtype`: its dequantized values (the CPU twin's) and the
/// GPU's copy.
fn random_matrix(ctx: &GpuContext, rng: &mut ChaCha8Rng, rows: usize, cols: usize, dtype: GgmlDType) -> (Vec<f32>, GpuMatrix) {
    let t = Tensor::from_vec(random(rng, rows * cols, 0.5), (rows, cols), &Device::Cpu).expect("tensor");
    let q = QTensor::quantize(&t, dtype).expect("quantize");
    let m = GpuMatrix::upload(ctx, &repack::repack(&q).expect("repack"), rows as u32, cols as u32).expect("upload");
    (to_vec(&q).expect("dequantize"), m)
}

/// A guarded cache buffer (sentinels around it) holding `v` as the kernels store it, and its
/// binding.
fn guarded_cache(ctx: &GpuContext, v: &[f32], kv_f16: bool) -> wgpu::Buffer {
    ctx.storage("cache", &[vec![SENTINEL; PAD], cache_words(v, kv_f16), vec![SENTINEL; PAD]].concat())
}

/// One decode step's attention inputs and its CPU twin's output (see [`attention_case`]).
struct AttentionCase {
    /// The rotated queries, `[heads * hd]`.
    q: Vec<f32>,
    /// The caches, `[capacity, kv_heads * hd]`, as the kernels read them (rounded through
    /// half floats for a half-float cache).
    keys: Vec<f32>,
    values: Vec<f32>,
    /// `ops::attention` of each query head over positions 0..=pos of its KV head.
    att: Vec<f32>,
}

/// Random queries and caches for `[heads, kv_heads, hd]` at position `pos` of `capacity`, the
/// positions past `pos` holding garbage (1e4) that must not be read, and the attention's twin,
/// each query-key product scaled by `score_scale`, capped at `softcap` and biased by ALiBi under
/// `alibi_max_bias` (0: none).
#[allow(clippy::too_many_arguments)]
fn attention_case(
    rng: &mut ChaCha8Rng,
    [heads, kv_heads, hd]: [usize; 3],
    pos: usize,
    capacity: usize,
    kv_f16: bool,
    score_scale: f32,
    softcap: Option<f32>,
    alibi_max_bias: f32,
) -> AttentionCase {
    let (cols, kv) = (heads * hd, kv_heads * hd);
    let q = random(rng, cols, 1.0);
    let (mut keys, mut values) = (random(rng, capacity * kv, 3.0), random(rng, capacity * kv, 2.0));
    if kv_f16 {
        (keys, values) = (to_f16_and_back(&keys), to_f16_and_back(&values));
    }
    for v in keys[(pos + 1) * kv..].iter_mut().chain(&mut values[(pos + 1) * kv..]) {
        *v = 1e4;
    }
    let mut att = vec![0.0; cols];
    for h in 0..heads {
        let input = ops::AttentionInput {
            q: &q[h * hd..][..hd],
            keys: &keys,
            values: &values,
            kv_stride: kv,
            kv_offset: (h / (heads / kv_heads)) * hd,
            n_pos: pos + 1,
            first: 0,
            scale: score_scale,
            softcap,
            alibi_slope: if alibi_max_bias > 0.0 { alibi_slope(h, heads, alibi_max_bias) } else { 0.0 },
        };
        ops::attention(&input, &mut vec![0.0; pos + 1], &mut att[h * hd..][..hd]);
    }
    AttentionCase { q, keys, values, att }
}

/// The decode Q/K/V projection with RoPE and the KV-cache write in its epilogue (ROPE_KV)
/// against its twins: `ops::rmsnorm`, the dequantized matrix times the row, `ops::rope` of
/// the q and k parts; the q part comes out in `y` and the k and v parts land in cache row
/// `pos`, every other cache row untouched; with Q/K/V biases (Qwen2's, the second and third
/// cases; StableLM 2's without the input's norm, in a buffer of their own, the eighth) each
/// row's added before RoPE (`ops::add_rows`); with head norms (Qwen3's and Gemma 3's, EXAONE
/// 4's without the input's norm: a head a workgroup, heads of 12, 64 and 256 rows in one round
/// or several) each q and k head RMS-normed first (`ops::rmsnorm_heads`; at odd positions
/// after RoPE, Hunyuan's); the last with
/// neither and no norm (StableLM 3B's); at even positions without head norms every value
/// clamped after its bias (OLMo 1.7's, `ops::clamp_all`). Every weight format
/// (the head norms on EVERY_FORM_TYPES: the epilogue takes the products alike from every
/// type), every row sharing that pairs rows (at most 32 threads per row), subgroups, both
/// cache precisions; a head too wide for an option's workgroup memory is refused.
#[test]
fn the_rope_kv_epilogue_matches_the_projection_then_rope() {
    let ctx = context_with_subgroups();
    let base = 10_000.0;
    for options in all_options().into_iter().filter(|o| o.threads_per_row <= 32) {
        let kv_f16 = options.kv_f16;
        let k = Kernels::with_options(&ctx, options).expect("every kernel compiles");
        let mut rng = ChaCha8Rng::seed_from_u64(21);
        // Every type in the forms that reach its unit product every way, the rest on
        // EVERY_FORM_TYPES (the epilogue takes the products alike from every type).
        let types: &[GgmlDType] = if unit_forms().contains(&options) { &ALL_TYPES } else { &EVERY_FORM_TYPES };
        for &dtype in types {
            // (query heads, KV heads, head_dim, cols, position, capacity, biases, head norms,
            // the input RMS-normed): odd row counts (50, 60, 84) and this model's shape at a
            // far position; columns rounded up to whole blocks (256 for the K-quants); without
            // the input's norm (StableLM's projection reads its LayerNorm's output, EXAONE 4's
            // the residual stream) the biases or the head gains in a buffer of their own.
            let cases = [
                (3usize, 1usize, 10usize, 64usize, 0usize, 5usize, false, false, true),
                (6, 2, 6, 96, 4, 9, true, false, true),
                (9, 3, 64, 576, 4999, 5000, true, false, true),
                (5, 1, 12, 96, 3, 7, false, true, true),
                (4, 2, 64, 576, 4999, 5000, false, true, true),
                (2, 1, 256, 256, 6, 8, false, true, true),
                (3, 1, 16, 64, 2, 4, false, true, false),
                (3, 1, 10, 64, 2, 5, true, false, false),
                (6, 2, 6, 96, 1, 4, false, false, false),
            ];
            for (heads, kv_heads, hd, cols, pos, capacity, biased, head_norm, pre_norm) in cases {
                if head_norm && !EVERY_FORM_TYPES.contains(&dtype) {
                    continue;
                }
                let cols = columns(dtype, cols);
                let (qd, kv) = (heads * hd, kv_heads * hd);
                let rows = qd + 2 * kv;
                let freqs = RopeFrequencies::plain(hd, hd, base);
                let (dense, m) = random_matrix(&ctx, &mut rng, rows, cols, dtype);
                let x = random(&mut rng, cols, 3_000.0);
                let gain = random(&mut rng, cols, 2.0);
                let mut xn = x.clone();
                if pre_norm {
                    ops::rmsnorm(&x, &gain, 1e-5, &mut xn);
                }
                let (mut product, bound): (Vec<f32>, Vec<f32>) = dense
                    .chunks_exact(cols)
                    .map(|r| (ops::dot(r, &xn), 1e-5 * r.iter().zip(&xn).map(|(a, b)| (a * b).abs()).sum::<f32>() + 1e-5))
                    .unzip();
                let bias = biased.then(|| random(&mut rng, rows, 50.0));
                if let Some(bias) = &bias {
                    ops::add_rows(&mut product, bias);
                }
                // OLMo 1.7's clamp of q, k and v at even positions of the cases without head
                // norms (no model has both), at half the largest value: it clamps many of them.
                // A clamp moves no value further from its twin (it is 1-Lipschitz): the bounds
                // stay.
                let clamp = (!head_norm && pos % 2 == 0).then(|| 0.5 * product.iter().fold(0.0f32, |m, v| m.max(v.abs())));
                if let Some(limit) = clamp {
                    ops::clamp_all(&mut product, limit);
                }
                // Each head's norm gains, q's then k's, and the bound on each normed value:
                // g / rms times the product's own error and its share of the rms's. At odd
                // positions each head is normed after RoPE (Hunyuan's): the turned head's rms is
                // the head's, and a value's gain is its turned pair's, so the pair's largest
                // gain bounds it.
                let after_rope = head_norm && pos % 2 == 1;
                let head_gains = head_norm.then(|| random(&mut rng, 2 * hd, 2.0));
                let mut bound = bound;
                let mut normed = product.clone();
                if let Some(g) = &head_gains {
                    let mut turned = product.clone();
                    ops::rope(&mut turned[..qd + kv], &freqs, pos);
                    for (h, (head, err)) in normed[..qd + kv].chunks_exact_mut(hd).zip(bound.chunks_exact_mut(hd)).enumerate() {
                        let gain = if h < heads { &g[..hd] } else { &g[hd..] };
                        let rms = (head.iter().map(|v| v * v).sum::<f32>() / hd as f32 + 1e-5).sqrt();
                        let rms_err = head.iter().zip(err.iter()).map(|(v, e)| v.abs() * e).sum::<f32>() / (hd as f32 * rms * rms);
                        for (i, (e, v)) in err.iter_mut().zip(head.iter()).enumerate() {
                            let g = if after_rope { gain[i & !1].abs().max(gain[i | 1].abs()) } else { gain[i].abs() };
                            *e = 2.0 * g / rms * (*e + v.abs() * rms_err) + 1e-6;
                        }
                        if after_rope {
                            head.copy_from_slice(&turned[h * hd..][..hd]);
                        }
                        ops::rmsnorm_heads(head, gain, 1e-5);
                    }
                }
                // A pair turns by an angle: each output mixes both products' errors.
                let pair_bound: Vec<f32> = bound.chunks_exact(2).flat_map(|p| [p[0] + p[1]; 2]).collect();
                let mut want_q = normed[..qd].to_vec();
                let mut k_row = normed[qd..qd + kv].to_vec();
                if !after_rope {
                    ops::rope(&mut want_q, &freqs, pos);
                    ops::rope(&mut k_row, &freqs, pos);
                }
                let (mut k_prior, mut v_prior) = (random(&mut rng, capacity * kv, 1.0), random(&mut rng, capacity * kv, 1.0));
                if kv_f16 {
                    (k_prior, v_prior) = (to_f16_and_back(&k_prior), to_f16_and_back(&v_prior));
                }
                let (mut want_k, mut want_v) = (k_prior.clone(), v_prior.clone());
                want_k[pos * kv..][..kv].copy_from_slice(&k_row);
                want_v[pos * kv..][..kv].copy_from_slice(&product[qd + kv..]);

                let words = if kv_f16 { capacity * kv / 2 } else { capacity * kv };
                let (kc, vc) = (guarded_cache(&ctx, &k_prior, kv_f16), guarded_cache(&ctx, &v_prior, kv_f16));
                let cache = |buf| Bind(buf, (PAD * 4) as u64, Some((words * 4) as u64));
                let q_out = guarded(&ctx, qd);
                // The biases, or the head gains, after the gains, in one buffer (RopeKv::biased,
                // RopeKv::head_norm).
                let gain_and_bias = [&gain[..], bias.as_deref().unwrap_or(&[]), head_gains.as_deref().unwrap_or(&[])].concat();
                let (xb, gb) = (ctx.storage("x", &x), ctx.storage("gain", &gain_and_bias));
                // Without the input's norm, the head gains alone (HeadGains::Own), or the
                // biases alone in whole vec4s (QkvBiases::Own).
                let own = ctx.storage("head gains", head_gains.as_deref().unwrap_or(&[0.0]));
                let gains = if pre_norm { HeadGains::AfterNorm } else { HeadGains::Own(&own, 1e-5) };
                let mut padded = bias.clone().unwrap_or_default();
                padded.resize(gpu_ops::own_bias_len(padded.len()).max(4), 0.0);
                let own_bias = ctx.storage("biases", &padded);
                let biases = if pre_norm { QkvBiases::AfterNorm } else { QkvBiases::Own(&own_bias) };
                let table = ctx.storage("table", &gpu_ops::rope_table(capacity, &freqs));
                let at = StepParams::new(pos as u32, 1);
                let step = kernels::step_uniform(&ctx, at);
                let shape = [heads as u32, kv_heads as u32, hd as u32];
                let rope_kv = RopeKv {
                    shape,
                    keys: cache(&kc),
                    values: cache(&vc),
                    table: &table,
                    bias: bias.as_ref().map(|_| biases),
                    head_norm: head_norm.then_some(gains),
                    clamp: clamp.unwrap_or(0.0),
                    norm_after_rope: after_rope,
                };
                let op = LinearOp {
                    norm: pre_norm.then_some((&gb, 1e-5)),
                    rope_kv: Some(rope_kv),
                    ..LinearOp::new(&m, &xb, Bind(&q_out, (PAD * 4) as u64, Some((qd * 4) as u64)))
                };
                let what = |part: &str| {
                    format!(
                        "{part}: {dtype:?} {heads}/{kv_heads} heads of {hd}, {cols} cols, pos {pos}, bias {biased}, head norm {head_norm} (after RoPE {after_rope}), pre-norm {pre_norm}, clamp {clamp:?}, {options:?}"
                    )
                };
                if head_norm && !k.head_norm_epilogue_fits(&ctx, hd as u32) {
                    assert!(k.matvec(&ctx, &op, &step).is_err(), "{}", what("refused"));
                    continue;
                }
                kernels::run_once(&ctx, k.matvec(&ctx, &op, &step).expect("dispatch"), at);

                let rounding = |w: f32| if kv_f16 { w.abs() / 1024.0 + 6e-8 } else { 0.0 };
                let got_q = read_guarded(&ctx, &q_out, qd);
                assert_close(&got_q, &want_q, |i| pair_bound[i] + 1e-5 * want_q[i].abs(), &what("queries"));
                let in_row = |i: usize| i / kv == pos;
                let got_k = cache_values(&read_guarded(&ctx, &kc, words), kv_f16);
                let k_tol = |i: usize| {
                    let written = if in_row(i) { pair_bound[qd + i % kv] + 1e-5 * want_k[i].abs() } else { 0.0 };
                    written + rounding(want_k[i])
                };
                assert_close(&got_k, &want_k, k_tol, &what("K cache"));
                let got_v = cache_values(&read_guarded(&ctx, &vc, words), kv_f16);
                let v_tol = |i: usize| if in_row(i) { bound[qd + kv + i % kv] } else { 0.0 } + rounding(want_v[i]);
                assert_close(&got_v, &want_v, v_tol, &what("V cache"));
            }
        }
    }
}

/// The decode output projection with every head's attention in its prologue (ATTENTION)
/// against its twins: `ops::attention` of each query head over cache positions 0..=pos of
/// its KV head, then the dequantized matrix times the heads' outputs, added to y. Odd row
/// counts, head shapes other than this model's, positions up to the last the prologue takes
/// (`ATTENTION_CHUNK`; the host's default stops at `FUSED_ATTENTION_POSITIONS`), heads in one
/// round or several, every row sharing,
/// subgroups, both cache precisions. The same for split-K's part 1 followed by the
/// projection with the COMBINE prologue (the decode step past the short context), at those
/// positions and past one and two chunks.
#[test]
fn the_attention_and_combine_prologues_match_attention_then_the_projection() {
    let ctx = context_with_subgroups();
    // Every variant, and split-K in chunks of 37 positions (the merge prologue's SPLIT override).
    for (i, options) in all_options().into_iter().chain([KernelOptions { split_chunk: 37, ..KernelOptions::plain(8) }]).enumerate() {
        let kv_f16 = options.kv_f16;
        let k = Kernels::with_options(&ctx, options).expect("every kernel compiles");
        let mut rng = ChaCha8Rng::seed_from_u64(22);
        // (query heads, KV heads, head_dim, rows, weight type, position, capacity).
        // The prologue takes min(SCORES / (pos + 1), WG) heads a round: every head in one
        // round below 64 positions here (34 heads at 10 positions: more heads than a workgroup
        // of 64 has threads for their (KV head, 4 dimensions), so each walks every position),
        // 2 heads a round over the whole chunk (256 positions; the rounds split this model's
        // groups of 3 query heads per KV head), 4 at 101. A key is loaded in pieces of 64
        // dimensions (hd 96: 64 and 32; hd 40, 16 and 8: one piece, partly past its end);
        // grouped-query groups of 1 to 6 heads. In workgroups of 256 each thread's slice of
        // the values is at most 8 positions (held in registers) up to 40 positions (pos 39:
        // exactly 8 in each slice), more past them (pos 63: 13, walking the cache).
        let last = kernels::FUSED_ATTENTION_POSITIONS - 1;
        // The prologues come before the product alike for every weight type (the twin tests
        // above check each type's product in every form): a variant's quantized cases take
        // Q4_1 or Q8_0, its float cases F32 or F16, in turn over the variants, so every form
        // meets a quantized and a float type without compiling four types' kernels for each
        // (the Q4_0 case goes with Q4_1: its blocks become Q4_1's).
        let quant = [GgmlDType::Q4_1, GgmlDType::Q8_0][i % 2];
        let float = [GgmlDType::F32, GgmlDType::F16][(i / 2) % 2];
        let cases = [
            (9usize, 3usize, 64usize, 129usize, quant, 0usize, 300usize),
            (9, 3, 64, 37, quant, last, last + 1),
            (4, 2, 8, 37, float, 5, 7),
            (18, 3, 16, 70, float, last, 300),
            (34, 17, 16, 45, quant, 9, 10),
            (2, 2, 16, 1, if quant == GgmlDType::Q4_1 { GgmlDType::Q4_0 } else { quant }, 12, 13),
            (4, 2, 96, 37, quant, 2, 5),
            (3, 1, 40, 21, float, 7, 9),
            (9, 3, 64, 129, quant, 300, 600),
            (4, 2, 16, 37, quant, 700, 1000),
            (9, 3, 64, 37, quant, 63, 64),
            (9, 3, 64, 37, quant, 39, 41),
            (4, 2, 96, 21, float, 100, 130),
            (9, 3, 64, 21, quant, kernels::ATTENTION_CHUNK - 1, 300),
        ];
        // Each head shape is a pipeline of its own (the shape is an override), about 5 s of
        // lavapipe's compiler: every variant runs this model's shape (9 heads of 64 over 3 KV
        // heads) at all its positions and two of the other shapes in turn, each of those in
        // four variants (all of them in every variant compiled eight shapes a variant, most
        // of a cold `make test`'s time in this test).
        let (ours, others): (Vec<_>, Vec<_>) = cases.iter().partition(|c| (c.0, c.1, c.2) == (9, 3, 64));
        let turn = [others[(2 * i) % others.len()], others[(2 * i + 1) % others.len()]];
        for (j, &(heads, kv_heads, hd, rows, dtype, pos, capacity)) in ours.into_iter().chain(turn).enumerate() {
            let cols = heads * hd;
            let (dense, m) = random_matrix(&ctx, &mut rng, rows, cols, dtype);
            // Scores scaled by 1 / sqrt(hd), or (Granite's attention scale) otherwise, in turn,
            // and every other case capped at 0.8 (Gemma 2's softcap, here bending most
            // scores).
            let score_scale = [1.0, 2.5, 0.3][(i + j) % 3] / (hd as f32).sqrt();
            let softcap = [None, Some(0.8)][(i + j) % 2];
            // ALiBi's biases (BLOOM's largest bias of 8) in every fourth case.
            let alibi_max_bias = if (i + j) % 4 == 3 { 8.0 } else { 0.0 };
            let AttentionCase { q, keys, values, att } =
                attention_case(&mut rng, [heads, kv_heads, hd], pos, capacity, kv_f16, score_scale, softcap, alibi_max_bias);
            let prior = random(&mut rng, rows, 1.0);
            let (want, tol): (Vec<f32>, Vec<f32>) = dense
                .chunks_exact(cols)
                .zip(&prior)
                .map(|(r, y)| {
                    let bound = r.iter().zip(&att).map(|(a, b)| 1e-5 * (a * b).abs() + 2e-5 * a.abs()).sum::<f32>() + 1e-5;
                    (y + ops::dot(r, &att), bound)
                })
                .unzip();
            let mut init = vec![SENTINEL; 2 * PAD];
            init.splice(PAD..PAD, prior.iter().map(|v| v.to_bits()));
            let out = ctx.storage("out", &init);
            let (qb, kb, vb) =
                (ctx.storage("q", &q), ctx.storage("k", &cache_words(&keys, kv_f16)), ctx.storage("v", &cache_words(&values, kv_f16)));
            let at = StepParams::new(pos as u32, 1);
            let step = kernels::step_uniform(&ctx, at);
            let shape = [heads as u32, kv_heads as u32, hd as u32];
            let y = Bind(&out, (PAD * 4) as u64, Some((rows * 4) as u64));
            let what = |form| {
                format!(
                    "{form} + projection {dtype:?} {heads}/{kv_heads} heads of {hd}, {rows} rows, pos {pos}, cap {softcap:?}, ALiBi {alibi_max_bias}, {options:?}"
                )
            };
            if pos < kernels::ATTENTION_CHUNK {
                let op = LinearOp {
                    accumulate: true,
                    attention: Some(AttentionInput {
                        shape,
                        keys: &kb,
                        values: &vb,
                        score_scale,
                        softcap: softcap.unwrap_or(0.0),
                        alibi_max_bias,
                    }),
                    ..LinearOp::new(&m, &qb, y)
                };
                kernels::run_once(&ctx, k.matvec(&ctx, &op, &step).expect("dispatch"), at);
                assert_close(&read_guarded(&ctx, &out, rows), &want, |i| tol[i], &what("attention"));
                ctx.queue.write_buffer(&out, (PAD * 4) as u64, bytemuck::cast_slice(&prior));
            }
            // Split-K part 1 into its chunk statistics, then the projection merging them.
            let parts = ctx.storage("parts", &vec![0.0f32; gpu_ops::attention_parts_len(shape, capacity, 1, options.split_chunk)]);
            let scratch = ctx.storage("att", &vec![0.0f32; cols]);
            let a = k
                .attention(
                    &ctx,
                    shape,
                    capacity,
                    gpu_ops::AttentionScope {
                        score_scale,
                        softcap: softcap.unwrap_or(0.0),
                        alibi_max_bias,
                        ..gpu_ops::AttentionScope::whole(hd as u32)
                    },
                    &qb,
                    &kb,
                    &vb,
                    Bind(&parts, 0, None),
                    Bind(&scratch, 0, None),
                    &step,
                )
                .expect("attention");
            kernels::run_once(&ctx, a.partial, at);
            let merged =
                CombineInput { shape, parts: Bind(&parts, 0, None), n_chunks: gpu_ops::attention_chunks(capacity, options.split_chunk) };
            let op = LinearOp { accumulate: true, combine: Some(merged), ..LinearOp::new(&m, &qb, y) };
            kernels::run_once(&ctx, k.matvec(&ctx, &op, &step).expect("dispatch"), at);
            assert_close(&read_guarded(&ctx, &out, rows), &want, |i| tol[i], &what("split-K, combine"));
        }
    }
}

/// act(gate) * up, act GELU's tanh form (`gelu`: `ops::geglu`) or SiLU (`ops::swiglu`).
fn glu_twin(gate: f32, up: f32, gelu: bool) -> f32 {
    let mut v = [gate];
    if gelu {
        ops::geglu(&mut v, &[up]);
    } else {
        ops::swiglu(&mut v, &[up]);
    }
    v[0]
}

/// The decode gate/up projection's twin on an input row `merged` (each value within
/// `merged_tol` of exact): `ops::rmsnorm` with `gain` (or the row as it is), the dequantized interleaved gate/up
/// rows, then `ops::geglu` (`gelu`) or `ops::swiglu`; each output with its bound (the input's
/// error carried through the norm and the rows, the product's rounding, the gate's
/// activation, whose slope is at most 1.2 for both).
fn gated_twin(gate_up: &[f32], merged: &[f32], merged_tol: &[f32], gain: Option<&[f32]>, eps: f32, gelu: bool) -> (Vec<f32>, Vec<f32>) {
    let dim = merged.len();
    // Without a gain, the row as it is (no pre-norm: OLMo 2's): a gain of 1 and an rms of 1.
    let ones = vec![1.0; dim];
    let mut xn = merged.to_vec();
    let rms = match gain {
        Some(gain) => {
            ops::rmsnorm(merged, gain, eps, &mut xn);
            (merged.iter().map(|v| v * v).sum::<f32>() / dim as f32 + eps).sqrt()
        }
        None => 1.0,
    };
    let gain = gain.unwrap_or(&ones);
    let (products, bounds): (Vec<f32>, Vec<f32>) = gate_up
        .chunks_exact(dim)
        .map(|r| {
            let carried = r.iter().zip(merged_tol).zip(gain).map(|((w, e), g)| (w * e * g).abs()).sum::<f32>() / rms;
            let rounding = 2e-5 * r.iter().zip(&xn).map(|(a, b)| (a * b).abs()).sum::<f32>();
            (ops::dot(r, &xn), carried + rounding + 1e-5)
        })
        .unzip();
    products
        .chunks_exact(2)
        .zip(bounds.chunks_exact(2))
        .map(|(p, e)| {
            let v = glu_twin(p[0], p[1], gelu);
            (v, 1.2 * p[1].abs() * e[0] + p[0].abs() * e[1] + 1e-5 * v.abs() + 1e-6)
        })
        .unzip()
}

/// The decode output projection per query head (HEADS) and the feed-forward's two matrices
/// merging its parts (MERGE_IN: the gate/up rows read x + the projected attention, RMSNorm-ed,
/// through SwiGLU; MERGE_OUT: the down projection adds it to the residual stream beside its
/// product) against their twins: `ops::attention` of each query head over positions 0..=pos,
/// the dequantized output projection times the heads' outputs, then `ops::rmsnorm`, the
/// dequantized gate/up rows and `ops::swiglu`, and the down projection's product added to
/// x + the projected attention. Odd row counts (the model's dim and the feed-forward's),
/// head shapes other than this model's, grouped-query groups of 1 to 3, positions in the
/// first chunk and past one and two, one chunk more in the parts than the position reaches
/// (its parts stay unwritten sentinels, NaN, which the merge must not read), every row
/// sharing that pairs rows, subgroups (the merges), both cache precisions, and split-K chunks
/// of 37 positions. Sentinels around every output and around the parts.
#[test]
fn the_per_head_projection_and_its_merges_match_attention_then_the_feed_forward() {
    let ctx = context_with_subgroups();
    for (i, options) in all_options()
        .into_iter()
        .filter(|o| o.threads_per_row <= 32)
        .chain([KernelOptions { split_chunk: 37, ..KernelOptions::plain(8) }])
        .enumerate()
    {
        let kv_f16 = options.kv_f16;
        let split = options.split_chunk as usize;
        let k = Kernels::with_options(&ctx, options).expect("every kernel compiles");
        let mut rng = ChaCha8Rng::seed_from_u64(24);
        // (query heads, KV heads, head_dim, output projection type, dim, feed-forward type,
        // ffn, position): dims and ffn whole blocks of the feed-forward's type.
        let cases = [
            (9usize, 3usize, 64usize, GgmlDType::Q4_1, 96usize, GgmlDType::Q8_0, 64usize, 0usize),
            (9, 3, 64, GgmlDType::Q4_1, 576, GgmlDType::Q4_1, 1536, 69),
            (4, 2, 32, GgmlDType::Q8_0, 70, GgmlDType::F32, 46, 40),
            (3, 1, 40, GgmlDType::F32, 38, GgmlDType::F16, 22, 100),
            (2, 2, 32, GgmlDType::Q5_1, 256, GgmlDType::Q4K, 256, 5),
            (6, 2, 64, GgmlDType::F16, 64, GgmlDType::Q5_1, 96, 130),
        ];
        // Every variant runs this model's shapes (the first two cases) and one of the others
        // in turn: the merges come before and after the products alike for every weight type
        // (the twin tests check each type's product in every form), and all six cases in
        // every variant compiled 17 kernels a variant.
        for (j, (heads, kv_heads, hd, wo_type, dim, ffn_type, ffn, pos)) in [cases[0], cases[1], cases[2 + i % 4]].into_iter().enumerate() {
            let cols = heads * hd;
            let n_chunks = (pos + 1).div_ceil(split) + 1;
            let (wo_dense, wo) = random_matrix(&ctx, &mut rng, dim, cols, wo_type);
            let (gu_dense, gate_up) = random_matrix(&ctx, &mut rng, 2 * ffn, dim, ffn_type);
            let (down_dense, down) = random_matrix(&ctx, &mut rng, dim, ffn, ffn_type);
            // In every other case Granite's scales: the scores by other than 1 / sqrt(hd),
            // each sublayer's output by its residual scale (the parts, and the down product).
            let granite = (i + j) % 2 == 1;
            let (score_scale, s) = if granite { (2.5 / (hd as f32).sqrt(), 0.22) } else { (1.0 / (hd as f32).sqrt(), 1.0) };
            let AttentionCase { q, keys, values, att } =
                attention_case(&mut rng, [heads, kv_heads, hd], pos, pos + 3, kv_f16, score_scale, None, 0.0);
            // x + s Wo att, each value's bound: the projection's rounding and the attention's
            // (the merge's weights carry the softmax's).
            let x = random(&mut rng, dim, 2.0);
            let (merged, merged_tol): (Vec<f32>, Vec<f32>) = wo_dense
                .chunks_exact(cols)
                .zip(&x)
                .map(|(r, x)| {
                    let bound = r.iter().zip(&att).map(|(a, b)| 2e-5 * (a * b).abs() + 4e-5 * a.abs()).sum::<f32>() + 1e-5;
                    (x + s * ops::dot(r, &att), bound + 1e-6 * x.abs())
                })
                .unzip();
            // The gate/up rows' twin: SwiGLU of the normed merged row.
            let gain = random(&mut rng, dim, 2.0);
            let (want_hidden, hidden_tol) = gated_twin(&gu_dense, &merged, &merged_tol, Some(&gain), 1e-5, false);
            // The down projection's twin: x + s Wo att + s Wd h.
            let h = random(&mut rng, ffn, 1.0);
            let (want_x, x_tol): (Vec<f32>, Vec<f32>) = down_dense
                .chunks_exact(ffn)
                .zip(merged.iter().zip(&merged_tol))
                .map(|(r, (m, e))| (m + s * ops::dot(r, &h), e + 1e-5 * r.iter().zip(&h).map(|(a, b)| (a * b).abs()).sum::<f32>() + 1e-6))
                .unzip();

            let (qb, kb, vb) =
                (ctx.storage("q", &q), ctx.storage("k", &cache_words(&keys, kv_f16)), ctx.storage("v", &cache_words(&values, kv_f16)));
            let at = StepParams::new(pos as u32, 1);
            let step = kernels::step_uniform(&ctx, at);
            let shape = [heads as u32, kv_heads as u32, hd as u32];
            let parts_len = heads * n_chunks * (2 + dim);
            let parts = guarded(&ctx, parts_len);
            let parts_bind = Bind(&parts, (PAD * 4) as u64, Some((parts_len * 4) as u64));
            let what = |form| {
                format!("{form}: {heads}/{kv_heads} heads of {hd}, {wo_type:?} {dim} rows, {ffn_type:?} ffn {ffn}, pos {pos}, Granite's scales {granite}, {options:?}")
            };
            let heads_op = LinearOp {
                heads: Some(HeadsInput { shape, keys: &kb, values: &vb, score_scale, n_chunks: n_chunks as u32 }),
                out_scale: s,
                ..LinearOp::new(&wo, &qb, parts_bind)
            };
            kernels::run_once(&ctx, k.matvec(&ctx, &heads_op, &step).expect("dispatch"), at);
            // The chunk past the position is never written.
            let written = read_guarded(&ctx, &parts, parts_len);
            for (i, v) in written.iter().enumerate() {
                let live = (i / (2 + dim)) % n_chunks < n_chunks - 1;
                assert_eq!(live, v.to_bits() != SENTINEL, "{}: part value {i} written: {}", what("per-head projection"), !live);
            }
            let merge = Some(HeadParts { parts: parts_bind, n_heads: heads as u32, n_chunks: n_chunks as u32 });

            let (xb, gb, hb) = (ctx.storage("x", &x), ctx.storage("gain", &gain), ctx.storage("h", &h));
            let hidden = guarded(&ctx, ffn);
            let gate_up_op = LinearOp {
                norm: Some((&gb, 1e-5)),
                glu: true,
                merge_in: merge,
                ..LinearOp::new(&gate_up, &xb, Bind(&hidden, (PAD * 4) as u64, Some((ffn * 4) as u64)))
            };
            kernels::run_once(&ctx, k.matvec(&ctx, &gate_up_op, &step).expect("dispatch"), at);
            assert_close(&read_guarded(&ctx, &hidden, ffn), &want_hidden, |i| hidden_tol[i], &what("merged into the gate/up rows"));

            let mut init = vec![SENTINEL; 2 * PAD];
            init.splice(PAD..PAD, x.iter().map(|v| v.to_bits()));
            let residual = ctx.storage("residual", &init);
            let down_op = LinearOp {
                accumulate: true,
                merge_out: merge,
                out_scale: s,
                ..LinearOp::new(&down, &hb, Bind(&residual, (PAD * 4) as u64, Some((dim * 4) as u64)))
            };
            kernels::run_once(&ctx, k.matvec(&ctx, &down_op, &step).expect("dispatch"), at);
            assert_close(&read_guarded(&ctx, &residual, dim), &want_x, |i| x_tol[i], &what("merged into the down projection's sum"));
        }
    }
}

/// The decode feed-forward's gate/up projection after a post-normed attention (POST_NORM_IN:
/// its rows read x + the attention's output RMS-normed with its own gain, RMSNorm-ed with the
/// feed-forward's, through GeGLU or SwiGLU) against its twin: `ops::add_normed`, then
/// `ops::rmsnorm`, the dequantized gate/up rows and `ops::geglu` or `ops::swiglu`. Odd widths
/// (f32 and f16 rows of 38 and 334 columns, the even widths they need; the quantized types' whole blocks, Gemma 3
/// 270M's 640 and 1B's 1152 among them), odd feed-forward widths, attention outputs as large
/// as a residual stream's and as small as 1e-3 (where eps counts), every row sharing that
/// pairs rows, subgroups; sentinels around the output, and x left as it was.
#[test]
fn the_post_norm_prologue_reads_x_plus_the_normed_attention_then_the_feed_forward() {
    let ctx = context_with_subgroups();
    for options in all_options().into_iter().filter(|o| o.threads_per_row <= 32) {
        let k = Kernels::with_options(&ctx, options).expect("every kernel compiles");
        let mut rng = ChaCha8Rng::seed_from_u64(26);
        let cases = [
            (GgmlDType::F32, 38usize, 23usize, true, 1.0f32),
            (GgmlDType::Q8_0, 640, 101, true, 300.0),
            (GgmlDType::Q4_1, 1152, 33, false, 1e-3),
            (GgmlDType::F16, 334, 17, true, 5.0),
            (GgmlDType::Q4K, 256, 45, true, 1.0),
        ];
        for (dtype, dim, ffn, gelu, scale) in cases {
            let eps = 1e-6;
            let (gu_dense, gate_up) = random_matrix(&ctx, &mut rng, 2 * ffn, dim, dtype);
            let x = random(&mut rng, dim, 2.0);
            let att = random(&mut rng, dim, scale);
            let (att_gain, gain) = (random(&mut rng, dim, 2.0), random(&mut rng, dim, 2.0));
            // x + rmsnorm(att) * att_gain, each value's bound: f32 sums of squares against
            // the twin's f64, 1e-5 of each term.
            let mut merged = x.clone();
            ops::add_normed(&mut merged, &att, &att_gain, eps);
            let merged_tol: Vec<f32> = merged.iter().zip(&x).map(|(m, x)| 1e-5 * (x.abs() + (m - x).abs()) + 1e-6).collect();
            let at = StepParams::new(3, 1);
            let step = kernels::step_uniform(&ctx, at);
            let (xb, ab, agb, gb) =
                (ctx.storage("x", &x), ctx.storage("att", &att), ctx.storage("att gain", &att_gain), ctx.storage("gain", &gain));
            // With the feed-forward's pre-norm after it (Gemma's), and without (OLMo 2's).
            for pre_norm in [true, false] {
                let (want, tol) = gated_twin(&gu_dense, &merged, &merged_tol, pre_norm.then_some(&gain[..]), eps, gelu);
                let hidden = guarded(&ctx, ffn);
                let op = LinearOp {
                    norm: pre_norm.then_some((&gb, eps)),
                    glu: true,
                    activation: if gelu { Activation::GeluTanh } else { Activation::Silu },
                    post_norm_in: Some(gpu_ops::PostNormInput { y: Bind(&ab, 0, None), gain: &agb, eps }),
                    ..LinearOp::new(&gate_up, &xb, Bind(&hidden, (PAD * 4) as u64, Some((ffn * 4) as u64)))
                };
                kernels::run_once(&ctx, k.matvec(&ctx, &op, &step).expect("dispatch"), at);
                let what = format!(
                    "{dtype:?} gate/up rows of {dim} after a post norm (|att| up to {scale}), pre-norm {pre_norm}, ffn {ffn}, gelu {gelu}, {options:?}"
                );
                assert_close(&read_guarded(&ctx, &hidden, ffn), &want, |i| tol[i], &what);
                assert_eq!(pollster::block_on(ctx.read_f32(&xb, dim)).expect("readback"), x, "{what}: x was written");
            }
        }
    }
}

/// The fusions refuse the shapes and combinations they cannot run.
#[test]
fn the_fused_epilogue_and_prologue_refuse_what_they_cannot_do() {
    let ctx = context();
    let k = Kernels::new(&ctx).expect("every kernel compiles");
    let mut rng = ChaCha8Rng::seed_from_u64(23);
    let (_, m) = random_matrix(&ctx, &mut rng, 50, 64, GgmlDType::Q8_0);
    let (x, y, table) = (ctx.storage("x", &[1.0f32; 64]), ctx.storage("y", &[0.0f32; 64]), ctx.storage("t", &[0.0f32; 64]));
    let (kc, vc) = (ctx.storage("k", &[0.0f32; 64]), ctx.storage("v", &[0.0f32; 64]));
    let at = StepParams::new(0, 1);
    let step = kernels::step_uniform(&ctx, at);
    let rope = |shape| RopeKv {
        shape,
        keys: Bind(&kc, 0, None),
        values: Bind(&vc, 0, None),
        table: &table,
        bias: None,
        head_norm: None,
        clamp: 0.0,
        norm_after_rope: false,
    };
    let with_rope = |shape| LinearOp { rope_kv: Some(rope(shape)), ..LinearOp::new(&m, &x, Bind(&y, 0, None)) };
    assert!(k.matvec(&ctx, &with_rope([3, 1, 10]), &step).is_ok(), "50 rows are [q | k | v] of 3 + 2 heads of 10");
    assert!(k.matvec(&ctx, &with_rope([3, 1, 12]), &step).is_err(), "50 rows are not 5 heads of 12");
    assert!(k.matvec(&ctx, &with_rope([3, 2, 10]), &step).is_err(), "3 query heads cannot share 2 KV heads");
    assert!(k.matmul(&ctx, &with_rope([3, 1, 10]), &step).is_err(), "the epilogue is decode-only");
    assert!(k.matvec(&ctx, &LinearOp { accumulate: true, ..with_rope([3, 1, 10]) }, &step).is_err(), "queries are not added to");
    // Biases sit after the norm's gains: no norm, or a gain buffer of the gains alone, is
    // refused; without a norm, in a buffer of their own of whole vec4s (52 floats for 50).
    let biased = |bias, norm| LinearOp {
        rope_kv: Some(RopeKv { bias: Some(bias), ..rope([3, 1, 10]) }),
        norm,
        ..LinearOp::new(&m, &x, Bind(&y, 0, None))
    };
    let (gains, gains_and_biases) = (ctx.storage("gain", &[1.0f32; 64]), ctx.storage("gain", &[1.0f32; 64 + 50]));
    let (own, unpadded) = (ctx.storage("biases", &[1.0f32; 52]), ctx.storage("biases", &[1.0f32; 50]));
    assert!(k.matvec(&ctx, &biased(QkvBiases::AfterNorm, None), &step).is_err(), "biases without the norm's buffer");
    assert!(k.matvec(&ctx, &biased(QkvBiases::AfterNorm, Some((&gains, 1e-5))), &step).is_err(), "64 gains and no room for 50 biases");
    assert!(k.matvec(&ctx, &biased(QkvBiases::AfterNorm, Some((&gains_and_biases, 1e-5))), &step).is_ok(), "64 gains, then 50 biases");
    assert!(k.matvec(&ctx, &biased(QkvBiases::Own(&own), None), &step).is_ok(), "50 biases of their own, in 13 vec4s");
    assert!(k.matvec(&ctx, &biased(QkvBiases::Own(&unpadded), None), &step).is_err(), "50 biases, the last vec4 cut short");
    assert!(k.matvec(&ctx, &biased(QkvBiases::Own(&own), Some((&gains, 1e-5))), &step).is_err(), "biases of their own beside a norm");
    // Head gains sit after the norm's gains too; no biases beside them, heads of a multiple of
    // 4. The matrix's 48 rows are [q | k | v] of 2 + 2 heads of 12 (refused over heads of 10).
    let (_, m48) = random_matrix(&ctx, &mut rng, 48, 64, GgmlDType::Q8_0);
    let normed = |shape, biased: bool, norm| LinearOp {
        rope_kv: Some(RopeKv { bias: biased.then_some(QkvBiases::AfterNorm), head_norm: Some(HeadGains::AfterNorm), ..rope(shape) }),
        norm,
        ..LinearOp::new(&m48, &x, Bind(&y, 0, None))
    };
    let (head_gains, all_three) = (ctx.storage("gain", &[1.0f32; 64 + 24]), ctx.storage("gain", &[1.0f32; 64 + 48 + 24]));
    assert!(k.matvec(&ctx, &normed([2, 1, 12], false, Some((&head_gains, 1e-5))), &step).is_ok(), "64 gains, then 2 of 12");
    assert!(k.matvec(&ctx, &normed([2, 1, 12], false, None), &step).is_err(), "head gains without the norm's buffer");
    // Without a norm (EXAONE 4's), the head gains in a buffer of their own, 2 heads' worth.
    let (own, short) = (ctx.storage("head gains", &[1.0f32; 24]), ctx.storage("head gains", &[1.0f32; 20]));
    let own_gains = |gains, norm| LinearOp {
        rope_kv: Some(RopeKv { head_norm: Some(gains), ..rope([2, 1, 12]) }),
        norm,
        ..LinearOp::new(&m48, &x, Bind(&y, 0, None))
    };
    assert!(k.matvec(&ctx, &own_gains(HeadGains::Own(&own, 1e-5), None), &step).is_ok(), "24 gains of their own");
    assert!(k.matvec(&ctx, &own_gains(HeadGains::Own(&short, 1e-5), None), &step).is_err(), "20 gains for heads of 12");
    assert!(k.matvec(&ctx, &own_gains(HeadGains::Own(&own, 1e-5), Some((&head_gains, 1e-5))), &step).is_err(), "own gains beside a norm");
    assert!(k.matvec(&ctx, &normed([2, 1, 12], false, Some((&gains, 1e-5))), &step).is_err(), "no room for the head gains");
    assert!(k.matvec(&ctx, &normed([2, 1, 12], true, Some((&all_three, 1e-5))), &step).is_err(), "biases and head norms at once");
    assert!(k.matvec(&ctx, &normed([4, 2, 6], false, Some((&head_gains, 1e-5))), &step).is_err(), "heads of 6");
    assert!(k.matmul(&ctx, &normed([2, 1, 12], false, Some((&head_gains, 1e-5))), &step).is_err(), "decode-only");
    let attention = |shape| LinearOp {
        attention: Some(AttentionInput { shape, keys: &kc, values: &vc, score_scale: 0.25, softcap: 0.0, alibi_max_bias: 0.0 }),
        ..LinearOp::new(&m, &x, Bind(&y, 0, None))
    };
    assert!(k.matvec(&ctx, &attention([4, 2, 16]), &step).is_ok(), "64 columns are 4 heads of 16");
    assert!(k.matvec(&ctx, &attention([4, 2, 8]), &step).is_err(), "64 columns are not 4 heads of 8");
    assert!(k.matvec(&ctx, &attention([32, 32, 2]), &step).is_err(), "heads of 2: values go 4 dimensions at a time");
    let parts = ctx.storage("parts", &[0.0f32; 4 * 18]);
    let combine = |shape, n_chunks| LinearOp {
        combine: Some(CombineInput { shape, parts: Bind(&parts, 0, None), n_chunks }),
        ..LinearOp::new(&m, &x, Bind(&y, 0, None))
    };
    assert!(k.matvec(&ctx, &combine([4, 2, 16], 1), &step).is_ok(), "64 columns are 4 heads of 16, merged from one chunk");
    assert!(k.matvec(&ctx, &combine([4, 2, 8], 1), &step).is_err(), "64 columns are not 4 heads of 8");
    assert!(k.matvec(&ctx, &combine([4, 2, 16], 0), &step).is_err(), "no chunks to merge");
    assert!(k.matmul(&ctx, &combine([4, 2, 16], 1), &step).is_err(), "the combine prologue is decode-only");
    let both = LinearOp {
        attention: Some(AttentionInput { shape: [4, 2, 16], keys: &kc, values: &vc, score_scale: 0.25, softcap: 0.0, alibi_max_bias: 0.0 }),
        ..combine([4, 2, 16], 1)
    };
    assert!(k.matvec(&ctx, &both, &step).is_err(), "one prologue at a time");
    let split_k = |shape: [u32; 3]| {
        k.attention(&ctx, shape, 4, gpu_ops::AttentionScope::whole(shape[2]), &x, &kc, &vc, Bind(&parts, 0, None), Bind(&y, 0, None), &step)
            .map(|_| ())
    };
    assert!(split_k([4, 2, 16]).is_ok(), "4 heads of 16 over 2 KV heads");
    assert!(split_k([8, 4, 6]).is_err(), "heads of 6: values go 4 dimensions at a time");
    assert!(split_k([3, 2, 16]).is_err(), "3 query heads cannot share 2 KV heads");
    assert!(k.matmul(&ctx, &attention([4, 2, 16]), &step).is_err(), "the prologue is decode-only");
    let (_, wide) = random_matrix(&ctx, &mut rng, 2, 4096, GgmlDType::Q8_0);
    let too_wide = LinearOp {
        attention: Some(AttentionInput {
            shape: [32, 8, 128],
            keys: &kc,
            values: &vc,
            score_scale: 0.25,
            softcap: 0.0,
            alibi_max_bias: 0.0,
        }),
        ..LinearOp::new(&wide, &x, Bind(&y, 0, None))
    };
    assert!(k.matvec(&ctx, &too_wide, &step).is_err(), "4096 columns exceed the prologue's workgroup memory");
    // The post-norm prologue: with the RMSNorm and SwiGLU (50 rows are 25 pairs), decode
    // only, alone, over rows its operands hold, at most the prologue's row.
    let (gain, att) = (ctx.storage("gain", &[1.0f32; 4096]), ctx.storage("att", &[0.0f32; 64]));
    let post_normed = Some(gpu_ops::PostNormInput { y: Bind(&att, 0, None), gain: &gain, eps: 1e-6 });
    let post = |m| LinearOp { norm: Some((&gain, 1e-6)), glu: true, post_norm_in: post_normed, ..LinearOp::new(m, &x, Bind(&y, 0, None)) };
    assert!(k.matvec(&ctx, &post(&m), &step).is_ok(), "the gate/up rows after a post norm");
    assert!(k.matmul(&ctx, &post(&m), &step).is_err(), "the post-norm prologue is decode-only");
    assert!(k.matvec(&ctx, &LinearOp { glu: false, ..post(&m) }, &step).is_err(), "the post-norm prologue comes with SwiGLU");
    assert!(k.matvec(&ctx, &LinearOp { norm: None, ..post(&m) }, &step).is_ok(), "without a pre-norm after it (OLMo 2)");
    let other_eps = LinearOp { norm: Some((&gain, 1e-5)), ..post(&m) };
    assert!(k.matvec(&ctx, &other_eps, &step).is_err(), "the two norms take one epsilon");
    let short = ctx.storage("short", &[0.0f32; 63]);
    let short_row =
        LinearOp { post_norm_in: Some(gpu_ops::PostNormInput { y: Bind(&short, 0, None), gain: &gain, eps: 1e-6 }), ..post(&m) };
    assert!(k.matvec(&ctx, &short_row, &step).is_err(), "63 floats are not a row of 64");
    let (_, wide_pairs) = random_matrix(&ctx, &mut rng, 2, 4096, GgmlDType::Q8_0);
    assert!(k.matvec(&ctx, &post(&wide_pairs), &step).is_err(), "4096 columns exceed the prologue's workgroup memory");
}

/// Picks `[n, used, 2]` as the pick kernel writes them: each token's experts and their
/// weights, random (distinct experts a token).
fn random_picks(rng: &mut ChaCha8Rng, n: usize, used: usize, count: usize) -> (Vec<usize>, Vec<f32>) {
    let mut experts = Vec::with_capacity(n * used);
    for _ in 0..n {
        let mut all: Vec<usize> = (0..count).collect();
        for k in 0..used {
            let j = rng.random_range(k..count);
            all.swap(k, j);
        }
        experts.extend_from_slice(&all[..used]);
    }
    (experts, random(rng, n * used, 1.0))
}

/// The picks as their buffer's words: expert, weight bits.
fn pick_words(experts: &[usize], weights: &[f32]) -> Vec<u32> {
    experts.iter().zip(weights).flat_map(|(&e, w)| [e as u32, w.to_bits()]).collect()
}

/// The router's pick (expert_pick.wgsl) against its twin `experts::route`: odd expert counts
/// (not multiples of the workgroup) from 1 to 300, a decode step's one token and a prefill's
/// many, weights renormalized or not. Each token's experts come out the twin's, in its
/// order, their weights within 2e-6 of its (exp through the GPU's own exp: a few ulps of
/// each probability); the token past the step's and the sentinels around the picks stay.
#[test]
fn the_expert_pick_matches_its_twin_and_writes_nothing_else() {
    use tokenscope::backend::cpu::experts::route;
    let ctx = context();
    let k = Kernels::new(&ctx).expect("every kernel compiles");
    let mut rng = ChaCha8Rng::seed_from_u64(77);
    for (count, used, n, normalized) in
        [(8usize, 3usize, 1usize, true), (37, 5, 13, false), (128, 8, 64, true), (1, 1, 2, true), (300, 2, 3, false), (65, 65, 1, true)]
    {
        // n tokens' scores, and one more token's that is not the step's.
        let scores = random(&mut rng, (n + 1) * count, 4.0);
        let sb = ctx.storage("scores", &scores);
        let words = (n + 1) * used * 2;
        let picks = guarded(&ctx, words);
        let at = StepParams::new(5, n as u32);
        let step = kernels::step_uniform(&ctx, at);
        let routing = gpu_ops::Routing { count: count as u32, used: used as u32, normalized };
        let op =
            gpu_ops::ExpertPick { routing, scores: Bind(&sb, 0, None), picks: Bind(&picks, (PAD * 4) as u64, Some((words * 4) as u64)) };
        kernels::run_once(&ctx, k.expert_pick(&ctx, &op, &step).expect("dispatch"), at);
        let got = read_guarded(&ctx, &picks, words);
        let want = route(&scores[..n * count], count, used, normalized);
        let what = format!("expert pick, {used} of {count} experts for {n} tokens, normalized {normalized}");
        for (t, token) in want.iter().enumerate() {
            for (slot, p) in token.iter().enumerate() {
                let at = 2 * (t * used + slot);
                assert_eq!(got[at].to_bits(), p.expert, "{what}: token {t}'s pick {slot}");
                let w = got[at + 1];
                assert!(
                    (w - p.weight).abs() <= 2e-6 * p.weight.max(1e-3),
                    "{what}: token {t}'s pick {slot} weighs {w}, the twin {}",
                    p.weight
                );
            }
        }
        assert!(got[n * used * 2..].iter().all(|v| v.to_bits() == SENTINEL), "{what}: the token past the step's was written");
    }
    // More picks than experts, or no experts, are refused.
    let (small, step) = (ctx.storage("small", &[0.0f32; 64]), kernels::step_uniform(&ctx, StepParams::new(0, 1)));
    for (count, used) in [(4u32, 5u32), (0, 0), (2, 0)] {
        let op = gpu_ops::ExpertPick {
            routing: gpu_ops::Routing { count, used, normalized: true },
            scores: Bind(&small, 0, None),
            picks: Bind(&small, 0, None),
        };
        assert!(k.expert_pick(&ctx, &op, &step).is_err(), "{used} of {count}");
    }
}

/// The experts' projections (matrix.wgsl's EXPERTS) against the dequantized matrices: a stack
/// of 5 experts, each token's 2 picks, a decode step's one token and a prefill's many; the
/// gate/up projection (the RMSNorm prologue, each expert's gate and up rows interleaved,
/// SwiGLU) from each token's row into `[n, used, ffn]`, and the down projection from each
/// pick's row into `[n, used, dim]`, in Q4_1, Q8_0 and F32 (vec4 and scalar inputs), every
/// way a row's unit product is reached ([`unit_forms`]). Odd row counts; each pick's rows
/// within the f32 bound of its sum of |w x|; the pick past the step's tokens and the
/// sentinels stay.
#[test]
fn the_experts_projections_match_the_dequantized_experts_and_write_nothing_else() {
    let ctx = context_with_subgroups();
    let mut rng = ChaCha8Rng::seed_from_u64(78);
    let (count, used) = (5usize, 2usize);
    for dtype in [GgmlDType::Q4_1, GgmlDType::Q8_0, GgmlDType::F32] {
        for options in unit_forms() {
            let k = Kernels::with_options(&ctx, options).expect("every kernel compiles");
            // (ffn, dim, tokens): each expert's gate/up rows 2 ffn over dim columns, its down
            // rows dim over ffn columns.
            for (ffn, dim, n) in [(37usize, 96usize, 1usize), (32, 45, 7), (19, 64, 3)] {
                // Whole blocks, and an even count (a float format's rows are words of two).
                let (dim_cols, ffn_cols) = (columns(dtype, dim).next_multiple_of(2), columns(dtype, ffn).next_multiple_of(2));
                let gates: Vec<QTensor> = (0..count).map(|_| quantized(&mut rng, ffn, dim_cols, dtype)).collect();
                let ups: Vec<QTensor> = (0..count).map(|_| quantized(&mut rng, ffn, dim_cols, dtype)).collect();
                let downs: Vec<QTensor> = (0..count).map(|_| quantized(&mut rng, dim, ffn_cols, dtype)).collect();
                let parts: Vec<&QTensor> = gates.iter().zip(&ups).flat_map(|(g, u)| [g, u]).collect();
                let mut packed = repack::repack_together(&parts).expect("repack").into_iter();
                let mut pairs = Vec::new();
                while let (Some(g), Some(u)) = (packed.next(), packed.next()) {
                    pairs.push(repack::interleave_rows(g, u, ffn).expect("interleave"));
                }
                let stacked = repack::stack(pairs).expect("stack");
                let mut gate_up = GpuMatrix::upload(&ctx, &stacked, (count * 2 * ffn) as u32, dim_cols as u32).expect("upload");
                gate_up.rows = 2 * ffn as u32;
                let down_parts: Vec<&QTensor> = downs.iter().collect();
                let stacked = repack::stack(repack::repack_together(&down_parts).expect("repack")).expect("stack");
                let mut down = GpuMatrix::upload(&ctx, &stacked, (count * dim) as u32, ffn_cols as u32).expect("upload");
                down.rows = dim as u32;
                let (experts, weights) = random_picks(&mut rng, n + 1, used, count);
                let pb = ctx.storage("picks", &pick_words(&experts, &weights));
                let chosen = Some(gpu_ops::ExpertPicks { picks: &pb, used: used as u32, count: count as u32 });
                let x = random(&mut rng, n * dim_cols, 3_000.0);
                let gain = random(&mut rng, dim_cols, 2.0);
                // Each pick's hidden row (the down projection's input), ffn_cols wide: the
                // columns past ffn are the padding a block format's row ends with.
                let hidden = random(&mut rng, n * used * ffn_cols, 2.0);
                let (xb, gb, hb) = (ctx.storage("x", &x), ctx.storage("gain", &gain), ctx.storage("hidden", &hidden));
                let at = StepParams::new(3, n as u32);
                let step = kernels::step_uniform(&ctx, at);
                let what = format!("experts {dtype:?} ffn {ffn} dim {dim} tokens {n} {options:?}");
                // The gate/up projection.
                let outputs = (n + 1) * used * ffn;
                let out = guarded(&ctx, outputs);
                let y = Bind(&out, (PAD * 4) as u64, Some((outputs * 4) as u64));
                let op = LinearOp { norm: Some((&gb, 1e-5)), glu: true, experts: chosen, ..LinearOp::new(&gate_up, &xb, y) };
                kernels::run_once(&ctx, k.matvec(&ctx, &op, &step).expect("dispatch"), at);
                let got = read_guarded(&ctx, &out, outputs);
                let (mut want, mut tol) = (Vec::new(), Vec::new());
                for t in 0..n {
                    let mut xr = vec![0.0f32; dim_cols];
                    ops::rmsnorm(&x[t * dim_cols..][..dim_cols], &gain, 1e-5, &mut xr);
                    for s in 0..used {
                        let e = experts[t * used + s];
                        let (g, u) = (to_vec(&gates[e]).expect("gate"), to_vec(&ups[e]).expect("up"));
                        for r in 0..ffn {
                            let (gr, ur) = (&g[r * dim_cols..][..dim_cols], &u[r * dim_cols..][..dim_cols]);
                            let (p0, p1) = (ops::dot(gr, &xr), ops::dot(ur, &xr));
                            let bound = |row: &[f32]| 1e-5 * row.iter().zip(&xr).map(|(a, b)| (a * b).abs()).sum::<f32>() + 1e-5;
                            let v = glu_twin(p0, p1, false);
                            want.push(v);
                            tol.push(1.13 * p1.abs() * bound(gr) + p0.abs() * bound(ur) + 1e-5 * v.abs() + 1e-6);
                        }
                    }
                }
                assert_close(&got[..n * used * ffn], &want, |i| tol[i], &format!("{what}: gate/up"));
                assert!(got[n * used * ffn..].iter().all(|v| v.to_bits() == SENTINEL), "{what}: gate/up wrote past the step's picks");
                // The down projection.
                let outputs = (n + 1) * used * dim;
                let out = guarded(&ctx, outputs);
                let y = Bind(&out, (PAD * 4) as u64, Some((outputs * 4) as u64));
                let op = LinearOp { experts: chosen, ..LinearOp::new(&down, &hb, y) };
                kernels::run_once(&ctx, k.matvec(&ctx, &op, &step).expect("dispatch"), at);
                let got = read_guarded(&ctx, &out, outputs);
                let (mut want, mut tol) = (Vec::new(), Vec::new());
                for pick in 0..n * used {
                    let d = to_vec(&downs[experts[pick]]).expect("down");
                    let h = &hidden[pick * ffn_cols..][..ffn_cols];
                    for r in 0..dim {
                        let row = &d[r * ffn_cols..][..ffn_cols];
                        want.push(ops::dot(row, h));
                        tol.push(1e-5 * row.iter().zip(h).map(|(a, b)| (a * b).abs()).sum::<f32>() + 1e-5);
                    }
                }
                assert_close(&got[..n * used * dim], &want, |i| tol[i], &format!("{what}: down"));
                assert!(got[n * used * dim..].iter().all(|v| v.to_bits() == SENTINEL), "{what}: down wrote past the step's picks");
            }
        }
    }
    // The experts' form adds to nothing and fuses nothing but the RMSNorm with SwiGLU.
    let k = Kernels::new(&ctx).expect("every kernel compiles");
    let q = quantized(&mut rng, 4, 32, GgmlDType::F32);
    let m = GpuMatrix::upload(&ctx, &repack::repack(&q).expect("repack"), 4, 32).expect("upload");
    let (buf, step) = (ctx.storage("buf", &[0.0f32; 256]), kernels::step_uniform(&ctx, StepParams::new(0, 1)));
    let chosen = Some(gpu_ops::ExpertPicks { picks: &buf, used: 1, count: 1 });
    let y = Bind(&buf, 0, None);
    for op in [
        LinearOp { experts: chosen, accumulate: true, ..LinearOp::new(&m, &buf, y) },
        LinearOp { experts: chosen, glu: true, ..LinearOp::new(&m, &buf, y) },
        LinearOp { experts: Some(gpu_ops::ExpertPicks { picks: &buf, used: 2, count: 1 }), ..LinearOp::new(&m, &buf, y) },
    ] {
        assert!(k.matvec(&ctx, &op, &step).is_err(), "a form the experts' kernels do not take");
    }
}

/// A random `[rows, cols]` matrix quantized to `dtype`.
fn quantized(rng: &mut ChaCha8Rng, rows: usize, cols: usize, dtype: GgmlDType) -> QTensor {
    let t = Tensor::from_vec(random(rng, rows * cols, 0.5), (rows, cols), &Device::Cpu).expect("tensor");
    QTensor::quantize(&t, dtype).expect("quantize")
}

/// The experts' sum (expert_sum.wgsl) against its twin, `CpuExperts::forward`'s: each pick's
/// output times its weight, added in pick order, times the residual scale, added to x. Odd
/// widths, 1 to 8 picks, a decode step's one token and a prefill's many; the step's rows of
/// x within 2e-6 of the terms' sizes, the row past them and the sentinels as they were.
#[test]
fn the_expert_sum_adds_the_weighted_picks_and_nothing_else() {
    let ctx = context();
    let k = Kernels::new(&ctx).expect("every kernel compiles");
    let mut rng = ChaCha8Rng::seed_from_u64(79);
    for (dim, used, n, scale) in [(65usize, 2usize, 1usize, 1.0f32), (577, 8, 13, 0.22), (33, 1, 64, 1.0), (1001, 3, 3, 2.5)] {
        let (experts, weights) = random_picks(&mut rng, n, used, 8);
        let pb = ctx.storage("picks", &pick_words(&experts, &weights));
        let outs = random(&mut rng, n * used * dim, 2.0);
        let ob = ctx.storage("outs", &outs);
        let prior = random(&mut rng, (n + 1) * dim, 5.0);
        let mut init = vec![SENTINEL; 2 * PAD];
        init.splice(PAD..PAD, prior.iter().map(|v| v.to_bits()));
        let x = ctx.storage("x", &init);
        let at = StepParams::new(2, n as u32);
        let step = kernels::step_uniform(&ctx, at);
        let op = gpu_ops::ExpertSum {
            routing: gpu_ops::Routing { count: 8, used: used as u32, normalized: true },
            dim: dim as u32,
            picks: Bind(&pb, 0, None),
            out: Bind(&ob, 0, None),
            x: Bind(&x, (PAD * 4) as u64, Some(((n + 1) * dim * 4) as u64)),
            out_scale: scale,
        };
        kernels::run_once(&ctx, k.expert_sum(&ctx, &op, &step).expect("dispatch"), at);
        let got = read_guarded(&ctx, &x, (n + 1) * dim);
        let mut want = prior[..n * dim].to_vec();
        let mut tol = vec![0.0f32; n * dim];
        for t in 0..n {
            let mut sum = vec![0.0f32; dim];
            for s in 0..used {
                let w = weights[t * used + s];
                let row = &outs[(t * used + s) * dim..][..dim];
                for ((acc, v), e) in sum.iter_mut().zip(row).zip(&mut tol[t * dim..][..dim]) {
                    *acc += w * v;
                    *e += 2e-6 * (w * v).abs() * scale;
                }
            }
            ops::add_scaled(&mut want[t * dim..][..dim], &sum, scale);
        }
        let what = format!("expert sum, {used} picks of {dim} rows for {n} tokens, scale {scale}");
        assert_close(&got[..n * dim], &want, |i| tol[i] + 2e-6 * prior[i].abs() + 1e-6, &what);
        assert_eq!(&got[n * dim..], &prior[n * dim..], "{what}: the row past the step's tokens was written");
    }
}

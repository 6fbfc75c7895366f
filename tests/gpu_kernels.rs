//! Every WGSL kernel against its CPU twin on random inputs with odd sizes (not multiples of
//! the workgroup size), natively through wgpu (lavapipe on machines without a GPU), with
//! sentinel regions around each output that must come back untouched. A missing adapter is
//! a failure: `scripts/setup.sh` installs lavapipe.
#![cfg(not(target_arch = "wasm32"))]

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use tokenscope::backend::cpu::ops;
use tokenscope::backend::gpu::kernels::{self, Bind, GpuMatrix, Kernels};
use tokenscope::backend::gpu::{repack, GpuContext};
use tokenscope::model::weights::to_vec;

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

#[test]
fn rmsnorm_matches_its_cpu_twin() {
    let ctx = context();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for (rows, n) in [(1usize, 64usize), (5, 577), (3, 1000)] {
        // Large values like this model's residual stream (|x| up to ~22,500).
        let x = random(&mut rng, rows * n, 20_000.0);
        let gain = random(&mut rng, n, 2.0);
        let out = guarded(&ctx, rows * n);
        let (xb, gb) = (ctx.storage("x", &x), ctx.storage("gain", &gain));
        let params = ctx.uniform("p", &[n as u32, rows as u32, 1e-5f32.to_bits(), 0]);
        let k = Kernels::new(&ctx);
        let d = kernels::prepare(&ctx, &k.rmsnorm, &[Bind(&params, 0, None), Bind(&xb, 0, None), Bind(&gb, 0, None), Bind(&out, (PAD * 4) as u64, Some((rows * n * 4) as u64))], rows as u32);
        kernels::run_once(&ctx, d);
        let got = read_guarded(&ctx, &out, rows * n);
        let mut want = vec![0.0; rows * n];
        for r in 0..rows {
            ops::rmsnorm(&x[r * n..][..n], &gain, 1e-5, &mut want[r * n..][..n]);
        }
        // f32 sum of squares vs the twin's f64: relative 1e-5 of each value, plus a floor.
        assert_close(&got, &want, |i| 1e-5 * want[i].abs() + 1e-6, &format!("rmsnorm {rows}x{n}"));
    }
}

fn check_matvec(dtype: GgmlDType, seed: u64) {
    let ctx = context();
    let k = Kernels::new(&ctx);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for (rows, cols, pos, accumulate) in [(1usize, 32usize, 0u32, false), (37, 96, 0, false), (70, 1568, 0, true), (129, 576, 3, false), (45, 160, 2, true)] {
        let w = random(&mut rng, rows * cols, 0.5);
        let x = random(&mut rng, cols, 3.0);
        let t = Tensor::from_vec(w, (rows, cols), &Device::Cpu).expect("tensor");
        let q = QTensor::quantize(&t, dtype).expect("quantize");
        let dense = to_vec(&q).expect("dequantize");
        let want: Vec<f32> = dense.chunks_exact(cols).map(|r| ops::dot(r, &x)).collect();
        let scale: Vec<f32> = dense.chunks_exact(cols).map(|r| r.iter().zip(&x).map(|(a, b)| (a * b).abs()).sum()).collect();
        let m = GpuMatrix::upload(&ctx, &repack::repack(&q).expect("repack"), rows as u32, cols as u32);
        // Output row `pos` of a [pos + 1, rows] buffer (how K/V reach the cache), optionally
        // added to what is there (how the residual add is fused).
        let prior = random(&mut rng, (pos as usize + 1) * rows, 1.0);
        let mut init = vec![SENTINEL; 2 * PAD];
        init.splice(PAD..PAD, prior.iter().map(|v| v.to_bits()));
        let out = ctx.storage("out", &init);
        let params = kernels::matvec_params(&ctx, &m, accumulate, rows as u32);
        let step = kernels::step_uniform(&ctx, pos);
        let xb = ctx.storage("x", &x);
        let d = kernels::prepare(&ctx, k.matvec(&m), &[Bind(&params, 0, None), Bind(&m.qs, 0, None), Bind(&m.scales, 0, None), Bind(&xb, 0, None), Bind(&out, (PAD * 4) as u64, Some((prior.len() * 4) as u64)), Bind(&step, 0, None)], rows as u32);
        kernels::run_once(&ctx, d);
        let all = read_guarded(&ctx, &out, prior.len());
        let row0 = pos as usize * rows;
        assert_eq!(&all[..row0], &prior[..row0], "rows before `pos` untouched");
        let got = all[row0..].to_vec();
        let want: Vec<f32> = if accumulate { want.iter().zip(&prior[row0..]).map(|(a, b)| a + b).collect() } else { want };
        // Same products, another summation order: 1e-5 of the sum of |w x| bounds f32 rounding.
        assert_close(&got, &want, |i| 1e-5 * scale[i] + 1e-5, &format!("matvec {dtype:?} {rows}x{cols} pos {pos} accumulate {accumulate}"));
    }
}

#[test]
fn matvec_q4_1_matches_its_cpu_twin() {
    check_matvec(GgmlDType::Q4_1, 2);
}

#[test]
fn matvec_q8_0_matches_its_cpu_twin() {
    check_matvec(GgmlDType::Q8_0, 3);
}

#[test]
fn rope_matches_its_cpu_twin_at_far_positions() {
    let ctx = context();
    let k = Kernels::new(&ctx);
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let (heads, hd, context_len) = (3usize, 64usize, 5000usize);
    let table = ctx.storage("table", &kernels::rope_table(context_len, hd, 100_000.0));
    for (pos, stride) in [(0u32, 0u32), (1, 0), (4999, 0), (7, (heads * hd) as u32)] {
        let rows = if stride == 0 { 1 } else { pos as usize + 1 };
        let x = random(&mut rng, rows * heads * hd, 5.0);
        let buf = ctx.storage("x", &[vec![SENTINEL; PAD], x.iter().map(|v| v.to_bits()).collect(), vec![SENTINEL; PAD]].concat());
        let params = ctx.uniform("p", &[heads as u32, hd as u32, stride, 0]);
        let step = kernels::step_uniform(&ctx, pos);
        let d = kernels::prepare(&ctx, &k.rope, &[Bind(&params, 0, None), Bind(&buf, (PAD * 4) as u64, Some((x.len() * 4) as u64)), Bind(&table, 0, None), Bind(&step, 0, None)], kernels::groups_for((heads * hd / 2) as u32));
        kernels::run_once(&ctx, d);
        let got = read_guarded(&ctx, &buf, x.len());
        let mut want = x.clone();
        let at = if stride == 0 { 0 } else { pos as usize * heads * hd };
        ops::rope(&mut want[at..at + heads * hd], hd, pos as usize, 100_000.0);
        assert_close(&got, &want, |i| 1e-5 * (1.0 + x[i].abs()) + 1e-5, &format!("rope pos {pos} stride {stride}"));
    }
}

#[test]
fn decode_attention_matches_its_cpu_twin_on_long_caches() {
    let ctx = context();
    let k = Kernels::new(&ctx);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let (heads, kv_heads, hd) = (9usize, 3usize, 64usize);
    let kv = kv_heads * hd;
    for n_pos in [1usize, 2, 63, 65, 1000, 3001] {
        let q = random(&mut rng, heads * hd, 1.0);
        let keys = random(&mut rng, n_pos * kv, 1.0);
        let values = random(&mut rng, n_pos * kv, 2.0);
        let out = guarded(&ctx, heads * hd);
        let params = ctx.uniform("p", &[heads as u32, kv_heads as u32, hd as u32, 0]);
        let step = kernels::step_uniform(&ctx, n_pos as u32 - 1);
        let (qb, kb, vb) = (ctx.storage("q", &q), ctx.storage("k", &keys), ctx.storage("v", &values));
        let d = kernels::prepare(&ctx, &k.attention, &[Bind(&params, 0, None), Bind(&qb, 0, None), Bind(&kb, 0, None), Bind(&vb, 0, None), Bind(&out, (PAD * 4) as u64, Some((heads * hd * 4) as u64)), Bind(&step, 0, None)], heads as u32);
        kernels::run_once(&ctx, d);
        let got = read_guarded(&ctx, &out, heads * hd);
        let mut want = vec![0.0; heads * hd];
        let mut scores = vec![0.0; n_pos];
        for h in 0..heads {
            let input = ops::AttentionInput { q: &q[h * hd..][..hd], keys: &keys, values: &values, kv_stride: kv, kv_offset: (h / (heads / kv_heads)) * hd, n_pos };
            ops::attention(&input, &mut scores, &mut want[h * hd..][..hd]);
        }
        assert_close(&got, &want, |_| 2e-5, &format!("attention over {n_pos} positions"));
    }
}

#[test]
fn swiglu_matches_its_cpu_twin() {
    let ctx = context();
    let k = Kernels::new(&ctx);
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    for n in [1usize, 63, 1537] {
        let gate = random(&mut rng, n, 30.0);
        let up = random(&mut rng, n, 3.0);
        let buf = ctx.storage("gate", &[vec![SENTINEL; PAD], gate.iter().map(|v| v.to_bits()).collect(), vec![SENTINEL; PAD]].concat());
        let params = ctx.uniform("p", &[n as u32, 0, 0, 0]);
        let ub = ctx.storage("up", &up);
        let d = kernels::prepare(&ctx, &k.swiglu, &[Bind(&params, 0, None), Bind(&buf, (PAD * 4) as u64, Some((n * 4) as u64)), Bind(&ub, 0, None)], kernels::groups_for(n as u32));
        kernels::run_once(&ctx, d);
        let got = read_guarded(&ctx, &buf, n);
        let mut want = gate.clone();
        ops::swiglu(&mut want, &up);
        assert_close(&got, &want, |i| 1e-5 * (1.0 + want[i].abs()), &format!("swiglu {n}"));
    }
}

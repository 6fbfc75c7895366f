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
use tokenscope::backend::gpu::{kernels, repack, GpuContext};
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
        kernels::rmsnorm(&ctx, &ctx.storage("x", &x), &ctx.storage("gain", &gain), n as u32, rows as u32, 1e-5, &out, (PAD * 4) as u64);
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
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for (rows, cols) in [(1usize, 32usize), (37, 96), (70, 1568), (129, 576)] {
        let w = random(&mut rng, rows * cols, 0.5);
        let x = random(&mut rng, cols, 3.0);
        let t = Tensor::from_vec(w, (rows, cols), &Device::Cpu).expect("tensor");
        let q = QTensor::quantize(&t, dtype).expect("quantize");
        let dense = to_vec(&q).expect("dequantize");
        let want: Vec<f32> = dense.chunks_exact(cols).map(|r| ops::dot(r, &x)).collect();
        let scale: Vec<f32> = dense.chunks_exact(cols).map(|r| r.iter().zip(&x).map(|(a, b)| (a * b).abs()).sum()).collect();
        let packed = repack::repack(&q).expect("repack");
        let out = guarded(&ctx, rows);
        kernels::matvec(&ctx, &packed, rows as u32, cols as u32, &ctx.storage("x", &x), &out, (PAD * 4) as u64).expect("matvec");
        let got = read_guarded(&ctx, &out, rows);
        // Same products, another summation order: 1e-5 of the sum of |w x| bounds f32 rounding.
        assert_close(&got, &want, |i| 1e-5 * scale[i] + 1e-6, &format!("matvec {dtype:?} {rows}x{cols}"));
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

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
    // Every row sharing the kernels support: one thread per row (software adapters), a few,
    // and the whole workgroup on one row.
    for threads_per_row in [1, 8, 64] {
        let k = Kernels::with_threads_per_row(&ctx, threads_per_row);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for (rows, cols, pos, accumulate) in [(1usize, 32usize, 0u32, false), (37, 96, 0, false), (70, 1568, 0, true), (129, 576, 3, false), (45, 160, 2, true)] {
            let w = random(&mut rng, rows * cols, 0.5);
            let x = random(&mut rng, cols, 3.0);
            let t = Tensor::from_vec(w, (rows, cols), &Device::Cpu).expect("tensor");
            let q = QTensor::quantize(&t, dtype).expect("quantize");
            let dense = to_vec(&q).expect("dequantize");
            let want: Vec<f32> = dense.chunks_exact(cols).map(|r| ops::dot(r, &x)).collect();
            let scale: Vec<f32> = dense.chunks_exact(cols).map(|r| r.iter().zip(&x).map(|(a, b)| (a * b).abs()).sum()).collect();
            let m = GpuMatrix::upload(&ctx, &repack::repack(&q).expect("repack"), rows as u32, cols as u32).expect("upload");
            // Output row `pos` of a [pos + 1, rows] buffer (how K/V reach the cache), optionally
            // added to what is there (how the residual add is fused).
            let prior = random(&mut rng, (pos as usize + 1) * rows, 1.0);
            let mut init = vec![SENTINEL; 2 * PAD];
            init.splice(PAD..PAD, prior.iter().map(|v| v.to_bits()));
            let out = ctx.storage("out", &init);
            let step = kernels::step_uniform(&ctx, pos, 0);
            let xb = ctx.storage("x", &x);
            let d = k.matvec(&ctx, &m, &xb, Bind(&out, (PAD * 4) as u64, Some((prior.len() * 4) as u64)), accumulate, rows as u32, &step).expect("dispatch");
            kernels::run_once(&ctx, d);
            let all = read_guarded(&ctx, &out, prior.len());
            let row0 = pos as usize * rows;
            assert_eq!(&all[..row0], &prior[..row0], "rows before `pos` untouched");
            let got = all[row0..].to_vec();
            let want: Vec<f32> = if accumulate { want.iter().zip(&prior[row0..]).map(|(a, b)| a + b).collect() } else { want };
            // Same products, another summation order: 1e-5 of the sum of |w x| bounds f32 rounding.
            assert_close(&got, &want, |i| 1e-5 * scale[i] + 1e-5, &format!("matvec {dtype:?} {rows}x{cols} pos {pos} accumulate {accumulate} threads/row {threads_per_row}"));
        }
    }
}

#[test]
fn matvec_q4_1_matches_its_cpu_twin() {
    check_matvec(GgmlDType::Q4_1, 2);
}

#[test]
fn matvec_q4_0_matches_its_cpu_twin() {
    check_matvec(GgmlDType::Q4_0, 4);
}

#[test]
fn matvec_q8_0_matches_its_cpu_twin() {
    check_matvec(GgmlDType::Q8_0, 3);
}

#[test]
fn matvec_f16_matches_its_cpu_twin() {
    check_matvec(GgmlDType::F16, 5);
}

#[test]
fn matvec_f32_matches_its_cpu_twin() {
    check_matvec(GgmlDType::F32, 6);
}

#[test]
fn embedding_lookup_matches_the_dequantized_row_exactly() {
    let ctx = context();
    let k = Kernels::new(&ctx);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let (vocab, dim) = (301usize, 608usize);
    let table = random(&mut rng, vocab * dim, 1.0);
    let t = Tensor::from_vec(table, (vocab, dim), &Device::Cpu).expect("tensor");
    for dtype in [GgmlDType::Q4_0, GgmlDType::Q4_1, GgmlDType::Q8_0, GgmlDType::F16, GgmlDType::F32] {
        let q = QTensor::quantize(&t, dtype).expect("quantize");
        let dense = to_vec(&q).expect("dequantize");
        let m = GpuMatrix::upload(&ctx, &repack::repack(&q).expect("repack"), vocab as u32, dim as u32).expect("upload");
        for token in [0u32, 1, 150, vocab as u32 - 1] {
            let out = guarded(&ctx, dim);
            let step = kernels::step_uniform(&ctx, 5, token);
            let d = k.embedding(&ctx, &m, Bind(&out, (PAD * 4) as u64, Some((dim * 4) as u64)), &step);
            kernels::run_once(&ctx, d);
            let got = read_guarded(&ctx, &out, dim);
            // The same dequantization arithmetic as candle's: bit-exact.
            assert_close(&got, &dense[token as usize * dim..][..dim], |_| 0.0, &format!("embedding {dtype:?} token {token}"));
        }
    }
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
        let step = kernels::step_uniform(&ctx, pos, 0);
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
fn split_k_decode_attention_matches_its_cpu_twins_on_long_caches() {
    let ctx = context();
    let k = Kernels::new(&ctx);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let (heads, kv_heads, hd) = (9usize, 3usize, 64usize);
    let kv = kv_heads * hd;
    // (positions attended, cache capacity): one position, chunk edges, odd sizes, a cache far
    // past one workgroup's memory, and empty chunks past n_pos.
    for (n_pos, capacity) in [(1usize, 1usize), (2, 700), (255, 256), (257, 300), (1000, 2048), (5001, 5001), (3001, 8192)] {
        let q = random(&mut rng, heads * hd, 1.0);
        // Large scores in some chunks and small in others test the rescaling between chunks.
        let keys: Vec<f32> = (0..capacity * kv).map(|i| if (i / kv) % 300 < 40 { 3.0 } else { 1.0 } * (rng.random::<f32>() * 2.0 - 1.0)).collect();
        let values = random(&mut rng, capacity * kv, 2.0);
        let out = guarded(&ctx, heads * hd);
        let step = kernels::step_uniform(&ctx, n_pos as u32 - 1, 0);
        let (qb, kb, vb) = (ctx.storage("q", &q), ctx.storage("k", &keys), ctx.storage("v", &values));
        let shape = [heads as u32, kv_heads as u32, hd as u32];
        let parts_len = kernels::attention_parts_len(shape, capacity);
        let n_chunks = capacity.div_ceil(kernels::ATTENTION_CHUNK);
        assert_eq!(parts_len, heads * n_chunks * (2 + hd));
        let parts_buf = guarded(&ctx, parts_len);
        let att = k.attention(&ctx, shape, capacity, &qb, &kb, &vb, Bind(&parts_buf, (PAD * 4) as u64, Some((parts_len * 4) as u64)), Bind(&out, (PAD * 4) as u64, Some((heads * hd * 4) as u64)), &step);
        kernels::run_once(&ctx, att.partial);
        // Part 1 against its twin, chunk by chunk (empty chunks: m = -3e38, l = 0, o = 0).
        let parts = read_guarded(&ctx, &parts_buf, parts_len);
        let mut want = vec![0.0; heads * hd];
        let mut worst = 0.0f32;
        for h in 0..heads {
            let input = ops::AttentionInput { q: &q[h * hd..][..hd], keys: &keys, values: &values, kv_stride: kv, kv_offset: (h / (heads / kv_heads)) * hd, n_pos };
            let mut chunks = Vec::new();
            for c in 0..n_chunks {
                let got = &parts[(h * n_chunks + c) * (2 + hd)..][..2 + hd];
                let start = c * kernels::ATTENTION_CHUNK;
                if start >= n_pos {
                    assert_eq!(got[0], -3.0e38, "empty chunk {c} max");
                    assert!(got[1..].iter().all(|&v| v == 0.0), "empty chunk {c} sums");
                    continue;
                }
                let twin = ops::attention_chunk(&input, start..(start + kernels::ATTENTION_CHUNK).min(n_pos));
                assert!((got[0] - twin.max).abs() <= 1e-5 * twin.max.abs().max(1.0), "head {h} chunk {c} max {} vs {}", got[0], twin.max);
                assert!((got[1] - twin.sum).abs() <= 2e-5 * twin.sum, "head {h} chunk {c} sum {} vs {}", got[1], twin.sum);
                for (g, w) in got[2..].iter().zip(&twin.out) {
                    let d = (g - w).abs();
                    worst = worst.max(d / twin.sum);
                    assert!(d <= 2e-5 * twin.sum, "head {h} chunk {c}: {g} vs {w}");
                }
                chunks.push(twin);
            }
            ops::combine_chunks(&chunks, &mut want[h * hd..][..hd]);
            // The split twin agrees with the one-pass reference attention.
            let mut reference = vec![0.0; hd];
            ops::attention(&input, &mut vec![0.0; n_pos], &mut reference);
            assert_close(&want[h * hd..][..hd], &reference, |_| 2e-5, &format!("split twin vs one-pass attention, head {h}, {n_pos} positions"));
        }
        eprintln!("attention_partial over {n_pos} positions (capacity {capacity}): worst |diff| / l {worst:.2e}");
        // Part 2 on the GPU's part 1, against the twins' combine.
        kernels::run_once(&ctx, att.combine);
        let got = read_guarded(&ctx, &out, heads * hd);
        assert_close(&got, &want, |_| 2e-5, &format!("split-K attention over {n_pos} positions (capacity {capacity})"));
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

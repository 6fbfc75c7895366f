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
        let k = Kernels::new(&ctx).expect("every kernel compiles");
        let d = kernels::prepare(
            &ctx,
            &k.rmsnorm,
            &[Bind(&params, 0, None), Bind(&xb, 0, None), Bind(&gb, 0, None), Bind(&out, (PAD * 4) as u64, Some((rows * n * 4) as u64))],
            1,
        )
        .per_token(0, 1);
        kernels::run_once(&ctx, d, rows as u32);
        let got = read_guarded(&ctx, &out, rows * n);
        let mut want = vec![0.0; rows * n];
        for r in 0..rows {
            ops::rmsnorm(&x[r * n..][..n], &gain, 1e-5, &mut want[r * n..][..n]);
        }
        // f32 sum of squares vs the twin's f64: relative 1e-5 of each value, plus a floor.
        assert_close(&got, &want, |i| 1e-5 * want[i].abs() + 1e-6, &format!("rmsnorm {rows}x{n}"));
    }
}

/// Checks the decode (matvec, one token) and prefill (matmul, `n_tokens` tokens) kernels of
/// one weight type against the dequantized matrix times each token's input row.
fn check_linear(dtype: GgmlDType, seed: u64) {
    let ctx = context();
    // Every row sharing the kernels support: one thread per row (software adapters), a few,
    // and the whole workgroup on one row.
    for threads_per_row in [1, 8, 64] {
        let k = Kernels::with_threads_per_row(&ctx, threads_per_row).expect("every kernel compiles");
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // (rows, cols, position, tokens, accumulate): the position must not matter.
        let cases = [
            (1usize, 32usize, 0u32, 1usize, false),
            (37, 96, 0, 3, false),
            (70, 1568, 0, 5, true),
            (129, 576, 3, 1, false),
            (45, 160, 2, 13, true),
            (33, 64, 0, 4, false),
        ];
        for (rows, cols, pos, n, accumulate) in cases {
            let w = random(&mut rng, rows * cols, 0.5);
            let x = random(&mut rng, n * cols, 3.0);
            let t = Tensor::from_vec(w, (rows, cols), &Device::Cpu).expect("tensor");
            let q = QTensor::quantize(&t, dtype).expect("quantize");
            let dense = to_vec(&q).expect("dequantize");
            let m = GpuMatrix::upload(&ctx, &repack::repack(&q).expect("repack"), rows as u32, cols as u32).expect("upload");
            // Output rows: token b goes to row b; `accumulate` adds to what is there.
            let prior = random(&mut rng, n * rows, 1.0);
            let mut want = prior.clone();
            let mut scale = vec![0.0f32; n * rows];
            for b in 0..n {
                let xr = &x[b * cols..][..cols];
                for r in 0..rows {
                    let row = &dense[r * cols..][..cols];
                    let i = b * rows + r;
                    want[i] = ops::dot(row, xr) + if accumulate { prior[i] } else { 0.0 };
                    scale[i] = row.iter().zip(xr).map(|(a, b)| (a * b).abs()).sum();
                }
            }
            let xb = ctx.storage("x", &x);
            let mut variants = vec![("matmul", n)];
            if n == 1 {
                variants.push(("matvec", 1));
            }
            for (kind, n) in variants {
                let mut init = vec![SENTINEL; 2 * PAD];
                init.splice(PAD..PAD, prior.iter().map(|v| v.to_bits()));
                let out = ctx.storage("out", &init);
                let y = Bind(&out, (PAD * 4) as u64, Some((prior.len() * 4) as u64));
                let step = kernels::step_uniform(&ctx, pos, n as u32);
                let d = match kind {
                    "matvec" => k.matvec(&ctx, &m, &xb, y, accumulate, false, &step),
                    _ => k.matmul(&ctx, &m, &xb, y, accumulate, &step),
                }
                .expect("dispatch");
                kernels::run_once(&ctx, d, n as u32);
                let got = read_guarded(&ctx, &out, prior.len());
                // Same products, another summation order: 1e-5 of the sum of |w x| bounds f32 rounding.
                assert_close(
                    &got,
                    &want,
                    |i| 1e-5 * scale[i] + 1e-5,
                    &format!("{kind} {dtype:?} {rows}x{cols} pos {pos} tokens {n} accumulate {accumulate} threads/row {threads_per_row}"),
                );
            }
        }
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
    let step = kernels::step_uniform(&ctx, 40, n as u32);
    let d = k
        .matvec(&ctx, &m, &ctx.storage("x", &x), Bind(&out, (PAD * 4) as u64, Some((rows * 4) as u64)), false, true, &step)
        .expect("dispatch");
    kernels::run_once(&ctx, d, n as u32);
    let got = read_guarded(&ctx, &out, rows);
    let last = &x[(n - 1) * cols..];
    let want: Vec<f32> = dense.chunks_exact(cols).map(|r| ops::dot(r, last)).collect();
    assert_close(&got, &want, |_| 1e-4, "LM head on the last of 7 rows");
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
fn embedding_lookup_matches_the_dequantized_row_exactly() {
    let ctx = context();
    let k = Kernels::new(&ctx).expect("every kernel compiles");
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let (vocab, dim) = (301usize, 608usize);
    let table = random(&mut rng, vocab * dim, 1.0);
    let t = Tensor::from_vec(table, (vocab, dim), &Device::Cpu).expect("tensor");
    for dtype in [GgmlDType::Q4_0, GgmlDType::Q4_1, GgmlDType::Q8_0, GgmlDType::F16, GgmlDType::F32] {
        let q = QTensor::quantize(&t, dtype).expect("quantize");
        let dense = to_vec(&q).expect("dequantize");
        let m = GpuMatrix::upload(&ctx, &repack::repack(&q).expect("repack"), vocab as u32, dim as u32).expect("upload");
        let ids = [0u32, 1, 150, vocab as u32 - 1, 150];
        for n in [1usize, ids.len()] {
            let out = guarded(&ctx, n * dim);
            let step = kernels::step_uniform(&ctx, 5, n as u32);
            let d = k.embedding(&ctx, &m, Bind(&out, (PAD * 4) as u64, Some((n * dim * 4) as u64)), &step, &ctx.storage("tokens", &ids));
            kernels::run_once(&ctx, d, n as u32);
            let got = read_guarded(&ctx, &out, n * dim);
            let want: Vec<f32> = ids[..n].iter().flat_map(|&t| dense[t as usize * dim..][..dim].to_vec()).collect();
            // The same dequantization arithmetic as candle's: bit-exact.
            assert_close(&got, &want, |_| 0.0, &format!("embedding {dtype:?} of {n} tokens"));
        }
    }
}

#[test]
fn rope_kv_matches_its_cpu_twin_at_far_positions() {
    let ctx = context();
    let k = Kernels::new(&ctx).expect("every kernel compiles");
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let (heads, kv_heads, hd, context_len) = (9usize, 3usize, 64usize, 5000usize);
    let (qd, kv) = (heads * hd, kv_heads * hd);
    let width = qd + 2 * kv;
    let table = ctx.storage("table", &kernels::rope_table(context_len, hd, 100_000.0));
    let params = ctx.uniform("p", &[heads as u32, kv_heads as u32, hd as u32, 0]);
    // (first position, tokens): decode near and far, and prefill batches.
    for (pos, n) in [(0usize, 1usize), (1, 1), (4999, 1), (2, 5), (4990, 9)] {
        let qkv = random(&mut rng, n * width, 5.0);
        let (k_prior, v_prior) = (random(&mut rng, context_len * kv, 1.0), random(&mut rng, context_len * kv, 1.0));
        let q_out = guarded(&ctx, n * qd);
        let with_guards =
            |v: &[f32]| ctx.storage("cache", &[vec![SENTINEL; PAD], v.iter().map(|x| x.to_bits()).collect(), vec![SENTINEL; PAD]].concat());
        let (kc, vc) = (with_guards(&k_prior), with_guards(&v_prior));
        let step = kernels::step_uniform(&ctx, pos as u32, n as u32);
        let cache = |buf| Bind(buf, (PAD * 4) as u64, Some((context_len * kv * 4) as u64));
        let binds = [
            Bind(&params, 0, None),
            Bind(&ctx.storage("qkv", &qkv), 0, None),
            Bind(&q_out, (PAD * 4) as u64, Some((n * qd * 4) as u64)),
            cache(&kc),
            cache(&vc),
            Bind(&table, 0, None),
            Bind(&step, 0, None),
        ];
        let d = kernels::prepare(&ctx, &k.rope_kv, &binds, kernels::groups_for((width / 2) as u32)).per_token(1, 1);
        kernels::run_once(&ctx, d, n as u32);
        let (mut want_q, mut want_k, mut want_v) = (Vec::new(), k_prior.clone(), v_prior.clone());
        for b in 0..n {
            let row = &qkv[b * width..][..width];
            let mut qr = row[..qd].to_vec();
            ops::rope(&mut qr, hd, pos + b, 100_000.0);
            want_q.extend(qr);
            let at = (pos + b) * kv;
            want_k[at..at + kv].copy_from_slice(&row[qd..qd + kv]);
            ops::rope(&mut want_k[at..at + kv], hd, pos + b, 100_000.0);
            want_v[at..at + kv].copy_from_slice(&row[qd + kv..]);
        }
        let got_q = read_guarded(&ctx, &q_out, n * qd);
        assert_close(&got_q, &want_q, |i| 1e-5 * (1.0 + want_q[i].abs()) + 1e-5, &format!("rope_kv q, pos {pos}, {n} tokens"));
        // Every other cache row must come back untouched.
        assert_close(
            &read_guarded(&ctx, &kc, context_len * kv),
            &want_k,
            |i| 1e-5 * (1.0 + want_k[i].abs()) + 1e-5,
            &format!("rope_kv K cache, pos {pos}, {n} tokens"),
        );
        assert_eq!(read_guarded(&ctx, &vc, context_len * kv), want_v, "V cache rows, pos {pos}, {n} tokens");
    }
}

#[test]
fn split_k_causal_attention_matches_its_cpu_twins_on_long_caches() {
    let ctx = context();
    let k = Kernels::new(&ctx).expect("every kernel compiles");
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let (heads, kv_heads, hd) = (9usize, 3usize, 64usize);
    let kv = kv_heads * hd;
    // (first position, tokens, cache capacity): decode at one position, chunk edges, odd
    // sizes, a cache far past one workgroup's memory, empty chunks, and prefill batches whose
    // tokens each see a different number of positions (causal), across chunk edges.
    let cases = [
        (0usize, 1usize, 1usize),
        (1, 1, 700),
        (254, 1, 256),
        (256, 1, 300),
        (999, 1, 2048),
        (5000, 1, 5001),
        (3000, 1, 8192),
        (0, 7, 7),
        (250, 13, 600),
        (2990, 40, 3100),
    ];
    for (pos, n, capacity) in cases {
        let q = random(&mut rng, n * heads * hd, 1.0);
        // Large scores in some chunks and small in others test the rescaling between chunks.
        let keys: Vec<f32> =
            (0..capacity * kv).map(|i| if (i / kv) % 300 < 40 { 3.0 } else { 1.0 } * (rng.random::<f32>() * 2.0 - 1.0)).collect();
        let values = random(&mut rng, capacity * kv, 2.0);
        let out = guarded(&ctx, n * heads * hd);
        let step = kernels::step_uniform(&ctx, pos as u32, n as u32);
        let (qb, kb, vb) = (ctx.storage("q", &q), ctx.storage("k", &keys), ctx.storage("v", &values));
        let shape = [heads as u32, kv_heads as u32, hd as u32];
        let parts_len = kernels::attention_parts_len(shape, capacity, n);
        let n_chunks = capacity.div_ceil(kernels::ATTENTION_CHUNK);
        assert_eq!(parts_len, n * heads * n_chunks * (2 + hd));
        let parts_buf = guarded(&ctx, parts_len);
        let att = k.attention(
            &ctx,
            shape,
            capacity,
            &qb,
            &kb,
            &vb,
            Bind(&parts_buf, (PAD * 4) as u64, Some((parts_len * 4) as u64)),
            Bind(&out, (PAD * 4) as u64, Some((n * heads * hd * 4) as u64)),
            &step,
        );
        kernels::run_once(&ctx, att.partial, n as u32);
        // Part 1 against its twin, chunk by chunk; chunks past a token's position stay unwritten.
        let parts = read_guarded(&ctx, &parts_buf, parts_len);
        let mut want = vec![0.0; n * heads * hd];
        let mut worst = 0.0f32;
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
                };
                let mut chunks = Vec::new();
                for c in 0..n_chunks {
                    let got = &parts[((b * heads + h) * n_chunks + c) * (2 + hd)..][..2 + hd];
                    let start = c * kernels::ATTENTION_CHUNK;
                    if start >= n_pos {
                        assert!(
                            got.iter().all(|v| v.to_bits() == SENTINEL),
                            "token {b}: chunk {c} past position {} was written",
                            n_pos - 1
                        );
                        continue;
                    }
                    let twin = ops::attention_chunk(&input, start..(start + kernels::ATTENTION_CHUNK).min(n_pos));
                    assert!(
                        (got[0] - twin.max).abs() <= 1e-5 * twin.max.abs().max(1.0),
                        "token {b} head {h} chunk {c} max {} vs {}",
                        got[0],
                        twin.max
                    );
                    assert!((got[1] - twin.sum).abs() <= 2e-5 * twin.sum, "token {b} head {h} chunk {c} sum {} vs {}", got[1], twin.sum);
                    for (g, w) in got[2..].iter().zip(&twin.out) {
                        let d = (g - w).abs();
                        worst = worst.max(d / twin.sum);
                        assert!(d <= 2e-5 * twin.sum, "token {b} head {h} chunk {c}: {g} vs {w}");
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
            }
        }
        eprintln!("attention_partial, {n} tokens from position {pos} (capacity {capacity}): worst |diff| / l {worst:.2e}");
        // Part 2 on the GPU's part 1, against the twins' combine.
        kernels::run_once(&ctx, att.combine, n as u32);
        let got = read_guarded(&ctx, &out, n * heads * hd);
        assert_close(&got, &want, |_| 2e-5, &format!("split-K attention, {n} tokens from position {pos} (capacity {capacity})"));
    }
}

#[test]
fn swiglu_matches_its_cpu_twin() {
    let ctx = context();
    let k = Kernels::new(&ctx).expect("every kernel compiles");
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    for (n, rows) in [(1usize, 1usize), (63, 1), (1537, 1), (65, 3)] {
        // Rows of [gate | up], as the fused projection leaves them.
        let gate_up = random(&mut rng, rows * 2 * n, 30.0);
        let out = guarded(&ctx, rows * n);
        let params = ctx.uniform("p", &[n as u32, 0, 0, 0]);
        let step = kernels::step_uniform(&ctx, 0, rows as u32);
        let d = kernels::prepare(
            &ctx,
            &k.swiglu,
            &[
                Bind(&params, 0, None),
                Bind(&ctx.storage("gate_up", &gate_up), 0, None),
                Bind(&out, (PAD * 4) as u64, Some((rows * n * 4) as u64)),
                Bind(&step, 0, None),
            ],
            kernels::groups_for(n as u32),
        )
        .per_token(1, 1);
        kernels::run_once(&ctx, d, rows as u32);
        let got = read_guarded(&ctx, &out, rows * n);
        let mut want = Vec::new();
        for r in gate_up.chunks_exact(2 * n) {
            let mut g = r[..n].to_vec();
            ops::swiglu(&mut g, &r[n..]);
            want.extend(g);
        }
        assert_close(&got, &want, |i| 1e-5 * (1.0 + want[i].abs()), &format!("swiglu {n}"));
    }
}

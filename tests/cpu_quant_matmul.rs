//! The page's threaded CPU matmul (`QuantMatrix` on the band pool: Q8_0 and Q4_1 weights, and
//! Q4_0, Q4_K, Q5_0, Q5_1, Q5_K, Q2_K, Q3_K and Q6_K repacked exactly into them) against candle on the same weights: odd sizes
//! (row counts that are no multiple of a band, token counts that are no multiple of a tile),
//! decode and prefill, products small enough to run on the calling thread and large enough to
//! be threaded, and sentinels past the output's end; each token alone gives the same bits as
//! among others. For Q8_0 and Q4_1 both round the
//! activations to 8 bits the same way and sum the same integer products per block, so they
//! agree to float summation order: within 1e-5 of sum |w x| per output; the repacked types are
//! held to candle's dequantized weights. Every dot-product kernel the build has is checked
//! (natively AVX2 and the portable loops; in wasm relaxed SIMD, SIMD128 and the portable
//! loops). Float weights (F32, F16, BF16) are held to the exact product of candle's dequantized
//! weights, their stored values drawn from the type's bit patterns (subnormals, zeros of both signs, F16's
//! largest values; no infinities or NaNs).

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokenscope::backend::cpu::quant_matmul::{DotKernel, FloatRows, Q2KRows, Q4_1Rows, Q8_0Rows, QuantMatrix};

const SENTINEL: f32 = -12345.5;

fn random(rng: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// Weights `[rows, cols]` in `dtype` as candle stores them.
fn candle_weights(w: &[f32], rows: usize, cols: usize, dtype: GgmlDType) -> QTensor {
    let wt = Tensor::from_slice(w, (rows, cols), &Device::Cpu).expect("weights");
    QTensor::quantize(&wt, dtype).expect("quantize")
}

/// candle's answer: `[n, rows]`.
fn candle_matmul(q: QTensor, cols: usize, x: &[f32], n: usize) -> Vec<f32> {
    let m = QMatMul::from_qtensor(q).expect("qmatmul");
    let xt = Tensor::from_slice(x, (n, cols), &Device::Cpu).expect("x");
    m.forward(&xt).and_then(|y| y.flatten_all()).and_then(|y| y.to_vec1::<f32>()).expect("forward")
}

/// `QuantMatrix` in `dtype` against candle on random weights and activations of each shape
/// `(rows, cols, tokens)`, with sentinels past the output.
fn check_against_candle(dtype: GgmlDType, shapes: &[(usize, usize, usize)], bytes_per_block: usize) {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for &(rows, cols, n) in shapes {
        let w = random(&mut rng, rows * cols);
        let x = random(&mut rng, n * cols);
        let q = candle_weights(&w, rows, cols, dtype);
        let m = match dtype {
            GgmlDType::Q8_0 => QuantMatrix::Q8_0(Q8_0Rows::from_ggml(&q.data().expect("blocks"), rows, cols).expect("repack")),
            GgmlDType::Q4_1 => QuantMatrix::Q4_1(Q4_1Rows::from_ggml(&q.data().expect("blocks"), rows, cols).expect("repack")),
            other => panic!("no QuantMatrix for {other:?}"),
        };
        assert_eq!((m.rows(), m.cols()), (rows, cols));
        assert_eq!(m.bytes(), rows * cols / 32 * bytes_per_block);
        let want = candle_matmul(q, cols, &x, n);
        for kernel in DotKernel::available() {
            let mut out = vec![SENTINEL; n * rows + 9];
            m.forward_with(kernel, &x, n, &mut out).expect("forward");
            let at = format!("{dtype:?} [{rows}, {cols}] x {n} on {}", kernel.name());
            assert!(out[n * rows..].iter().all(|&v| v == SENTINEL), "{at}: written past the output");
            let mut worst = 0f32;
            for t in 0..n {
                for r in 0..rows {
                    let scale: f32 = (0..cols).map(|c| (w[r * cols + c] * x[t * cols + c]).abs()).sum();
                    let err = (out[t * rows + r] - want[t * rows + r]).abs() / scale;
                    worst = worst.max(err);
                }
            }
            assert!(worst <= 1e-5, "{at}: worst error {worst:e} of sum |w x|");
            same_bits_alone(&m, kernel, &x, n, &out, &at);
        }
    }
}

/// Each token alone (a decode step) gives the bits it gave among the `n` of `x` (a prefill,
/// the logit lens's rows; `out` `[n, rows]`): whatever order the loops take (sixteen tokens at
/// a time in a prefill on x86), each output sums its blocks in one order.
fn same_bits_alone(m: &QuantMatrix, kernel: DotKernel, x: &[f32], n: usize, out: &[f32], at: &str) {
    let (rows, cols) = (m.rows(), m.cols());
    for t in 0..n {
        let mut alone = vec![SENTINEL; rows];
        m.forward_with(kernel, &x[t * cols..(t + 1) * cols], 1, &mut alone).expect("forward");
        let same = alone.iter().zip(&out[t * rows..(t + 1) * rows]).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{at}: token {t} alone differs from its row among {n}");
    }
}

/// The kernels each build promises: the portable loops everywhere, SIMD128 in wasm (in Node.js,
/// `make test-wasm`), relaxed SIMD too in the build with it (in Chromium, `make
/// test-wasm-relaxed`, as the page's `www/pkg-relaxed` is built), AVX2 on x86-64 CPUs that
/// have it; the default is the first listed. A kernel the build lacks is refused, not
/// silently replaced.
#[test]
fn each_build_runs_the_kernels_it_promises() {
    #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
    let promised = vec![DotKernel::RelaxedSimd, DotKernel::Simd128, DotKernel::Portable];
    #[cfg(all(target_arch = "wasm32", not(target_feature = "relaxed-simd")))]
    let promised = vec![DotKernel::Simd128, DotKernel::Portable];
    #[cfg(target_arch = "x86_64")]
    use std::arch::is_x86_feature_detected as has;
    #[cfg(target_arch = "x86_64")]
    let avx2 = has!("avx2") && has!("fma") && has!("f16c");
    #[cfg(target_arch = "x86_64")]
    let promised = if avx2 && has!("avx512f") && has!("avx512bw") && has!("avx512vl") && has!("avx512vnni") {
        vec![DotKernel::Avx512Vnni, DotKernel::Avx2, DotKernel::Portable]
    } else if avx2 {
        vec![DotKernel::Avx2, DotKernel::Portable]
    } else {
        vec![DotKernel::Portable]
    };
    #[cfg(not(any(target_arch = "wasm32", target_arch = "x86_64")))]
    let promised = vec![DotKernel::Portable];
    let kernels = DotKernel::available();
    assert_eq!(kernels, promised, "the kernels this build and CPU run, fastest first");
    assert_eq!(DotKernel::best(), promised[0], "the default is the fastest of them");
    let blocks = candle_weights(&[0.5; 64], 2, 32, GgmlDType::Q4_1).data().expect("blocks").to_vec();
    let m = QuantMatrix::Q4_1(Q4_1Rows::from_ggml(&blocks, 2, 32).expect("repack"));
    let missing = [DotKernel::Avx512Vnni, DotKernel::Avx2, DotKernel::RelaxedSimd, DotKernel::Simd128]
        .into_iter()
        .find(|k| !kernels.contains(k))
        .expect("one kernel this build lacks");
    let mut out = [SENTINEL; 2];
    let err = m.forward_with(missing, &[1.0; 32], 1, &mut out).expect_err("a missing kernel refused");
    assert!(err.to_string().contains(missing.name()), "{err}");
    assert!(out.iter().all(|&v| v == SENTINEL));
}

#[test]
fn the_threaded_q8_0_matmul_matches_candle_on_odd_sizes() {
    let shapes =
        [(37, 96, 1), (37, 96, 3), (53, 160, 11), (7, 32, 9), (101, 576, 17), (1, 64, 1), (579, 192, 1), (331, 416, 19), (4099, 512, 1)];
    check_against_candle(GgmlDType::Q8_0, &shapes, 36);
}

/// Q4_1 read from candle's blocks as a GGUF file stores them, like Q8_0 above (candle's Q4_1
/// product needs an even number of blocks per row).
#[test]
fn the_threaded_q4_1_matmul_matches_candle_on_odd_sizes() {
    let shapes =
        [(37, 64, 1), (37, 64, 3), (53, 128, 11), (7, 64, 9), (101, 576, 17), (1, 64, 1), (579, 192, 1), (331, 448, 19), (4099, 512, 1)];
    check_against_candle(GgmlDType::Q4_1, &shapes, 24);
}

/// A `QuantMatrix` repacked exactly from another type (`build`) against that type's
/// dequantized weights (candle's), on each kernel: 127 times the identity as activations (which
/// round to 8 bits exactly, with scale 1) recovers 127 times every weight (within 1e-5 of its
/// row's largest, far below one quantization step, so a misplaced nibble or scale fails), and
/// random activations give the dense product within the bound of their 8-bit rounding (half
/// a step, `amax / 254`, per activation).
fn check_exact_repack(
    dtype: GgmlDType,
    shapes: &[(usize, usize)],
    bytes_per_block: f64,
    build: impl Fn(&[u8], usize, usize) -> QuantMatrix,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(17);
    for &(rows, cols) in shapes {
        let q = candle_weights(&random(&mut rng, rows * cols), rows, cols, dtype);
        let dense = q.dequantize(&Device::Cpu).and_then(|t| t.flatten_all()).and_then(|t| t.to_vec1::<f32>()).expect("dequantize");
        let m = build(&q.data().expect("blocks"), rows, cols);
        assert_eq!((m.rows(), m.cols(), m.bytes() as f64), (rows, cols, (rows * cols / 32) as f64 * bytes_per_block));
        // Each row read back on its own (a tied embedding's lookup) is candle's row.
        let mut row_out = vec![SENTINEL; cols + 1];
        for r in 0..rows {
            m.dequantize_row(r, &mut row_out[..cols]);
            let row = &dense[r * cols..(r + 1) * cols];
            let largest = row.iter().fold(0f32, |a, v| a.max(v.abs()));
            assert!(row_out.iter().zip(row).all(|(g, w)| (g - w).abs() <= 1e-6 * largest), "{dtype:?} [{rows}, {cols}]: row {r} read back");
            assert_eq!(row_out[cols], SENTINEL, "{dtype:?}: a row read back writes nothing past it");
        }
        let identity: Vec<f32> = (0..cols * cols).map(|i| if i / cols == i % cols { 127.0 } else { 0.0 }).collect();
        let x = random(&mut rng, 5 * cols);
        for kernel in DotKernel::available() {
            let at = format!("{dtype:?} [{rows}, {cols}] on {}", kernel.name());
            let mut out = vec![SENTINEL; cols * rows + 9];
            m.forward_with(kernel, &identity, cols, &mut out).expect("forward");
            assert!(out[cols * rows..].iter().all(|&v| v == SENTINEL), "{at}: written past the output");
            for r in 0..rows {
                let row = &dense[r * cols..(r + 1) * cols];
                let largest = row.iter().fold(0f32, |a, v| a.max(v.abs()));
                for (c, &w) in row.iter().enumerate() {
                    let got = out[c * rows + r] / 127.0;
                    assert!((got - w).abs() <= 1e-5 * largest, "{at}: weight ({r}, {c}) is {got}, candle's {w}");
                }
            }
            let mut out = vec![SENTINEL; 5 * rows + 9];
            m.forward_with(kernel, &x, 5, &mut out).expect("forward");
            assert!(out[5 * rows..].iter().all(|&v| v == SENTINEL), "{at}: written past the output");
            same_bits_alone(&m, kernel, &x, 5, &out, &at);
            for t in 0..5 {
                let xt = &x[t * cols..(t + 1) * cols];
                for r in 0..rows {
                    let row = &dense[r * cols..(r + 1) * cols];
                    let want: f32 = row.iter().zip(xt).map(|(w, x)| w * x).sum();
                    let bound: f32 = row
                        .chunks_exact(32)
                        .zip(xt.chunks_exact(32))
                        .map(|(w, x)| w.iter().map(|v| v.abs()).sum::<f32>() * x.iter().fold(0f32, |a, v| a.max(v.abs())) / 254.0)
                        .sum();
                    let got = out[t * rows + r];
                    assert!((got - want).abs() <= bound * 1.01 + 1e-5, "{at}: token {t} row {r}: {got} vs dense {want} (bound {bound})");
                }
            }
        }
    }
}

/// A repacked format: [`check_exact_repack`] on odd shapes (row lengths of whole 256-weight
/// super-blocks for K-quants), and a row of part of a block and a truncated block refused.
fn check_format(dtype: GgmlDType, repacked_bytes_per_block: f64, repack: fn(&[u8], usize, usize) -> tokenscope::Result<QuantMatrix>) {
    let (weights, bytes) = (dtype.block_size(), dtype.type_size());
    let shapes: &[(usize, usize)] =
        if weights == 256 { &[(37, 256), (7, 512), (1, 256), (130, 768)] } else { &[(37, 96), (7, 32), (1, 64), (131, 416)] };
    check_exact_repack(dtype, shapes, repacked_bytes_per_block, |b, r, c| repack(b, r, c).expect("repack"));
    let partial = if weights == 256 { 96 } else { 40 };
    assert!(repack(&vec![0; bytes], 1, partial).is_err(), "{dtype:?}: a row of part of a block refused");
    assert!(repack(&vec![0; 2 * bytes - 1], 2, weights).is_err(), "{dtype:?}: a truncated block refused");
}

/// A random 16-bit pattern that `keep` accepts.
fn bits(rng: &mut ChaCha8Rng, keep: impl Fn(u16) -> bool) -> u16 {
    loop {
        let b = rng.random::<u16>();
        if keep(b) {
            return b;
        }
    }
}

/// Float weights of `dtype` from random bit patterns (no infinity or NaN: exponent not all ones;
/// BF16's below 2^64), as candle stores them.
fn float_weights(rng: &mut ChaCha8Rng, rows: usize, cols: usize, dtype: GgmlDType) -> QTensor {
    let w: Vec<f32> = (0..rows * cols)
        .map(|_| match dtype {
            GgmlDType::F32 => rng.random_range(-4.0f32..4.0),
            GgmlDType::F16 => half::f16::from_bits(bits(rng, |b| b & 0x7c00 != 0x7c00)).to_f32(),
            // Exponents up to 2^64, so a row's f32 sums stay finite.
            GgmlDType::BF16 => half::bf16::from_bits(bits(rng, |b| (b >> 7) & 0xff < 0xc0)).to_f32(),
            other => panic!("{other:?} is no float type"),
        })
        .collect();
    candle_weights(&w, rows, cols, dtype)
}

/// A float type's `QuantMatrix` against the exact product (f64 sums) of candle's dequantized
/// weights with unrounded inputs, on every kernel, odd shapes, decode and prefill token counts
/// and sentinels past the output: within 1e-5 of sum |w x| per output (f32 summation order).
fn check_float(dtype: GgmlDType, build: fn(&[u8], usize, usize) -> tokenscope::Result<FloatRows>) {
    let mut rng = ChaCha8Rng::seed_from_u64(23);
    let bytes = if dtype == GgmlDType::F32 { 4 } else { 2 };
    for (rows, cols, n) in [(37, 96, 1), (37, 96, 3), (53, 160, 11), (7, 32, 9), (101, 576, 17), (1, 64, 1), (579, 192, 1), (4099, 256, 1)]
    {
        let q = float_weights(&mut rng, rows, cols, dtype);
        let w = q.dequantize(&Device::Cpu).and_then(|t| t.flatten_all()).and_then(|t| t.to_vec1::<f32>()).expect("dequantize");
        let m = QuantMatrix::Float(build(&q.data().expect("bytes"), rows, cols).expect("float rows"));
        assert_eq!((m.rows(), m.cols(), m.bytes()), (rows, cols, rows * cols * bytes));
        let mut row_out = vec![SENTINEL; cols + 1];
        m.dequantize_row(rows / 2, &mut row_out[..cols]);
        assert_eq!(&row_out[..cols], &w[rows / 2 * cols..(rows / 2 + 1) * cols], "{dtype:?}: a row read back is candle's, exactly");
        assert_eq!(row_out[cols], SENTINEL);
        let x = random(&mut rng, n * cols);
        for kernel in DotKernel::available() {
            let at = format!("{dtype:?} [{rows}, {cols}] x {n} on {}", kernel.name());
            let mut out = vec![SENTINEL; n * rows + 9];
            m.forward_with(kernel, &x, n, &mut out).expect("forward");
            assert!(out[n * rows..].iter().all(|&v| v == SENTINEL), "{at}: written past the output");
            for t in 0..n {
                let xt = &x[t * cols..(t + 1) * cols];
                for r in 0..rows {
                    let wr = &w[r * cols..(r + 1) * cols];
                    let want: f64 = wr.iter().zip(xt).map(|(&w, &x)| f64::from(w) * f64::from(x)).sum();
                    let scale: f64 = wr.iter().zip(xt).map(|(&w, &x)| (f64::from(w) * f64::from(x)).abs()).sum();
                    let got = f64::from(out[t * rows + r]);
                    assert!((got - want).abs() <= 1e-5 * scale, "{at}: token {t} row {r}: {got} vs exact {want} (sum |w x| {scale})");
                }
            }
        }
    }
    assert!(build(&vec![0; 40 * bytes], 1, 40).is_err(), "{dtype:?}: a row of part of a block refused");
    assert!(build(&vec![0; 64 * bytes - 1], 2, 32).is_err(), "{dtype:?}: a truncated matrix refused");
}

#[test]
fn f32_weights_match_the_exact_product_on_every_kernel() {
    check_float(GgmlDType::F32, FloatRows::from_f32);
}

#[test]
fn f16_weights_match_the_exact_product_on_every_kernel() {
    check_float(GgmlDType::F16, FloatRows::from_f16);
}

#[test]
fn bf16_weights_match_the_exact_product_on_every_kernel() {
    check_float(GgmlDType::BF16, FloatRows::from_bf16);
}

/// An F16 matrix holding an infinity or NaN is kept as F32 (four bytes a weight), and its
/// products carry them as the exact product would.
#[test]
fn f16_weights_with_an_infinity_are_widened_at_load() {
    let mut bits = [0x3c00u16; 2 * 32]; // 1.0
    bits[40] = 0x7c00; // +infinity in row 1
    let bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
    let m = QuantMatrix::Float(FloatRows::from_f16(&bytes, 2, 32).expect("float rows"));
    assert_eq!(m.bytes(), 2 * 32 * 4);
    for kernel in DotKernel::available() {
        let mut out = [SENTINEL; 3];
        m.forward_with(kernel, &[0.5; 32], 1, &mut out).expect("forward");
        assert_eq!(out, [16.0, f32::INFINITY, SENTINEL], "{}", kernel.name());
    }
}

/// Q4_0 (4-bit weights, `d (q - 8)`) read as Q4_1 blocks with offset `-8 d`, exactly.
#[test]
fn q4_0_weights_repack_exactly_into_the_q4_1_kernels() {
    check_format(GgmlDType::Q4_0, 24.0, |b, r, c| Q4_1Rows::from_q4_0(b, r, c).map(QuantMatrix::Q4_1));
}

/// Q4_K (256-weight super-blocks of 6-bit scales and mins) read as Q4_1 blocks, exactly.
#[test]
fn q4_k_weights_repack_exactly_into_the_q4_1_kernels() {
    check_format(GgmlDType::Q4K, 24.0, |b, r, c| Q4_1Rows::from_q4_k(b, r, c).map(QuantMatrix::Q4_1));
}

/// Q5_0 (5-bit weights, `d (q - 16)`) read as 5-bit Q4_1 blocks with offset `-16 d`, exactly.
#[test]
fn q5_0_weights_repack_exactly_into_the_q4_1_kernels() {
    check_format(GgmlDType::Q5_0, 28.0, |b, r, c| Q4_1Rows::from_q5_0(b, r, c).map(QuantMatrix::Q4_1));
}

/// Q5_0 read as Q8_0 blocks, exactly (the wasm engine's choice: `q - 16` fits a signed byte).
#[test]
fn q5_0_weights_repack_exactly_into_the_q8_0_kernels() {
    check_format(GgmlDType::Q5_0, 36.0, |b, r, c| Q8_0Rows::from_q5_0(b, r, c).map(QuantMatrix::Q8_0));
}

/// Q5_1 (5-bit weights, `d q + m`) read as 5-bit Q4_1 blocks, as stored.
#[test]
fn q5_1_weights_repack_exactly_into_the_q4_1_kernels() {
    check_format(GgmlDType::Q5_1, 28.0, |b, r, c| Q4_1Rows::from_q5_1(b, r, c).map(QuantMatrix::Q4_1));
}

/// Q5_K (256-weight super-blocks of 6-bit scales and mins, 5-bit weights) read as 5-bit Q4_1
/// blocks, exactly.
#[test]
fn q5_k_weights_repack_exactly_into_the_q4_1_kernels() {
    check_format(GgmlDType::Q5K, 28.0, |b, r, c| Q4_1Rows::from_q5_k(b, r, c).map(QuantMatrix::Q4_1));
}

/// Q6_K (256-weight super-blocks, 6-bit weights, a signed 8-bit scale per 16) read as Q8_0
/// blocks with their halves' scales, exactly.
#[test]
fn q6_k_weights_repack_exactly_into_the_q8_0_kernels() {
    check_format(GgmlDType::Q6K, 38.0, |b, r, c| Q8_0Rows::from_q6_k(b, r, c).map(QuantMatrix::Q8_0));
}

/// Q2_K (256-weight super-blocks, 2-bit weights, a 4-bit scale and min per 16) read as Q8_0
/// blocks with their halves' scales and the mins beside them (40.5 bytes per 32 weights),
/// exactly.
#[test]
fn q2_k_weights_repack_exactly_into_the_q8_0_kernels_and_mins() {
    check_format(GgmlDType::Q2K, 40.5, |b, r, c| Q2KRows::from_q2_k(b, r, c).map(QuantMatrix::Q2K));
}

/// Q3_K (256-weight super-blocks, 3-bit weights, a 6-bit scale per 16) read as Q8_0 blocks with
/// their halves' scales, exactly.
#[test]
fn q3_k_weights_repack_exactly_into_the_q8_0_kernels() {
    check_format(GgmlDType::Q3K, 38.0, |b, r, c| Q8_0Rows::from_q3_k(b, r, c).map(QuantMatrix::Q8_0));
}

/// Every quantized type the engine reads, repacked for the CPU's kernels and converted to the
/// GPU's common layout of mixed stacks (8-bit integers with a scale and offset per 16
/// weights), gives back candle's dequantized weights exactly (a zero's sign aside: Q4_0's
/// `(q - 8) d` is -0 where `d` is negative, `d q - 8 d` +0): `a q + b` is each format's own
/// arithmetic. Float types have no such layout.
#[test]
fn every_quantized_type_converts_to_affine16_exactly() {
    let mut rng = ChaCha8Rng::seed_from_u64(29);
    for dtype in tokenscope::gguf::SUPPORTED_TYPES {
        let (rows, cols) = (3, if dtype.block_size() == 256 { 512 } else { 96 });
        let q = candle_weights(&random(&mut rng, rows * cols), rows, cols, dtype);
        let dense = q.dequantize(&Device::Cpu).and_then(|t| t.flatten_all()).and_then(|t| t.to_vec1::<f32>()).expect("dequantize");
        let m = QuantMatrix::from_ggml(dtype, &q.data().expect("blocks"), rows, cols).expect("repack");
        let Some(affine) = m.affine16() else {
            assert!(matches!(dtype, GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16), "{dtype:?} has no affine layout");
            continue;
        };
        assert_eq!((affine.q.len(), affine.ab.len()), (rows * cols, rows * cols / 16), "{dtype:?}");
        for (i, &w) in dense.iter().enumerate() {
            let [a, b] = affine.ab[i / 16];
            let got = a * f32::from(affine.q[i]) + b;
            assert!(got == w, "{dtype:?}: weight {i} is {got}, candle's {w}");
        }
    }
}

#[test]
fn no_tokens_write_nothing_and_bad_shapes_are_refused() {
    let blocks = candle_weights(&[0.5; 64], 2, 32, GgmlDType::Q8_0).data().expect("blocks").to_vec();
    let m = QuantMatrix::Q8_0(Q8_0Rows::from_ggml(&blocks, 2, 32).expect("repack"));
    let mut out = [SENTINEL; 4];
    m.forward(&[], 0, &mut out).expect("no tokens");
    assert!(out.iter().all(|&v| v == SENTINEL));
    // Too short an input or output is an error, not a panic or a write out of bounds.
    assert!(m.forward(&[1.0; 31], 1, &mut out).is_err());
    assert!(m.forward(&[1.0; 64], 2, &mut out[..3]).is_err());
    // Rows that are no whole number of 32-element blocks, or too few blocks, are refused.
    let err = Q8_0Rows::from_ggml(&[0; 34], 1, 40).err().expect("40 columns refused");
    assert!(err.to_string().contains("32-element blocks"), "{err}");
    let err = Q4_1Rows::from_ggml(&[0; 20], 1, 40).err().expect("40 columns refused");
    assert!(err.to_string().contains("32-element blocks"), "{err}");
    assert!(Q4_1Rows::from_ggml(&[0; 39], 2, 32).is_err(), "a truncated block refused");
    assert!(Q8_0Rows::from_ggml(&[0; 67], 2, 32).is_err(), "a truncated block refused");
}

/// Every task of every job runs exactly once: back to back (workers spinning) and after the
/// workers have gone to sleep (natively; the one-thread wasm engine has no workers).
#[test]
fn the_band_pool_runs_every_task_of_every_job_once() {
    check_band_pool(tokenscope::backend::cpu::band_pool::pool(), 20_000);
}

/// The same with more workers than cores: workers are preempted between reading a job and
/// claiming a task of it, which is where a worker could once claim a task of the next job
/// (seen as one task run twice and another not at all).
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn an_oversubscribed_band_pool_runs_every_task_of_every_job_once() {
    let workers = 4 * std::thread::available_parallelism().map_or(2, |n| n.get()) + 1;
    let pool = tokenscope::backend::cpu::band_pool::BandPool::start(workers);
    check_band_pool(&pool, 400_000);
}

/// `rest` puts the workers to sleep at once, where these would otherwise spin for a minute or
/// more, and the next job wakes them and still runs every task once; over and over, as the
/// engine rests the pool after every forward pass.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn a_resting_band_pool_sleeps_at_once_and_wakes_for_the_next_job() {
    let workers = 3;
    let pool = tokenscope::backend::cpu::band_pool::BandPool::start_spinning(workers, u32::MAX);
    for cycle in 0..20 {
        check_band_pool_jobs(&pool, 0..50);
        pool.rest();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while pool.asleep() < workers {
            assert!(std::time::Instant::now() < deadline, "cycle {cycle}: {} of {workers} workers asleep 20 s after rest", pool.asleep());
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    check_band_pool_jobs(&pool, 0..50);
}

fn check_band_pool(pool: &tokenscope::backend::cpu::band_pool::BandPool, jobs: usize) {
    check_band_pool_jobs(pool, 0..jobs);
    #[cfg(not(target_arch = "wasm32"))]
    for job in 0..5 {
        std::thread::sleep(std::time::Duration::from_millis(30));
        check_band_pool_jobs(pool, job + 3..job + 4);
    }
    assert!(pool.threads() >= 1);
}

/// Runs jobs of 1 to 37 tasks (by job number) and checks that each task ran exactly once.
fn check_band_pool_jobs(pool: &tokenscope::backend::cpu::band_pool::BandPool, jobs: std::ops::Range<usize>) {
    use std::sync::atomic::{AtomicU32, Ordering};
    for job in jobs {
        let tasks = 1 + job % 37;
        let hits: Vec<AtomicU32> = (0..tasks).map(|_| AtomicU32::new(0)).collect();
        pool.run(tasks, |i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
        });
        let counts: Vec<u32> = hits.iter().map(|h| h.load(Ordering::Relaxed)).collect();
        assert!(counts.iter().all(|&c| c == 1), "job {job}: task run counts {counts:?}");
    }
}

/// Activations round to 8 bits halves away from zero, as ggml's `roundf` does, through the
/// `trunc`-based rounding the wasm build vectorizes: exact halves, the floats just below them,
/// and random values, against `f32::round`.
#[test]
fn activations_round_halves_away_from_zero() {
    use tokenscope::backend::cpu::quant_matmul::Activations;
    // amax 127 makes the scale 1, so each value is rounded as it stands.
    let mut block = vec![127.0, 2.5, -2.5, 0.5, -0.5, 1.5, -1.5, 126.5, -126.5, 0.499_999_97, -0.499_999_97, 3.499_999_8, -0.0, 0.0];
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    block.extend((block.len()..32).map(|_| rng.random_range(-127.0f32..127.0)));
    let rounded = Activations::quantize(&block, 32);
    let want: Vec<i8> = block.iter().map(|v| v.round() as i8).collect();
    assert_eq!(rounded.q, want);
    assert_eq!(&rounded.q[..12], &[127, 3, -3, 1, -1, 2, -2, 127, -127, 0, 0, 3]);
    // Random blocks at other scales, several rows.
    let values = random(&mut rng, 5 * 96);
    let rounded = Activations::quantize(&values, 96);
    assert_eq!((rounded.rows(), rounded.cols()), (5, 96));
    for (b, block) in values.chunks_exact(32).enumerate() {
        let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
        let inverse = 1.0 / (amax / 127.0);
        let want: Vec<i8> = block.iter().map(|v| (v * inverse).round() as i8).collect();
        assert_eq!(&rounded.q[b * 32..][..32], &want[..], "block {b}");
    }
}

/// `for_each_piece` hands every piece to exactly one call, with its index, and writes
/// nothing outside the slice: odd piece counts, more tasks than pieces, one task, and an
/// oversubscribed pool (natively).
#[test]
fn the_band_pool_hands_out_every_piece_once() {
    use tokenscope::backend::cpu::band_pool::{pool, BandPool};
    let check = |pool: &BandPool| {
        for (pieces, len, tasks) in [(257, 5, 8), (3, 7, 16), (1, 1, 4), (40, 3, 1), (0, 4, 3), (19, 64, 2)] {
            let mut out = vec![SENTINEL; pieces * len + 3];
            pool.for_each_piece(&mut out[..pieces * len], len, tasks, |i, piece| {
                assert_eq!(piece.len(), len);
                for v in piece.iter_mut() {
                    assert_eq!(*v, SENTINEL, "piece {i} handed out twice");
                    *v = i as f32;
                }
            });
            for (i, piece) in out[..pieces * len].chunks_exact(len).enumerate() {
                assert!(piece.iter().all(|&v| v == i as f32), "{pieces} pieces on {tasks} tasks: piece {i} is {piece:?}");
            }
            assert!(out[pieces * len..].iter().all(|&v| v == SENTINEL), "written past the slice");
        }
    };
    check(pool());
    #[cfg(not(target_arch = "wasm32"))]
    check(&BandPool::start(5));
}

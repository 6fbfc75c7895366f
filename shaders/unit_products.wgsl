// unit_products.wgsl: the product of one unit of a matrix row with the input, for each weight
// format (weight_formats.wgsl: its layout and bindings); included by matrix.wgsl, whose
// row_dot adds a row's units up. The includer defines Acc (f32 for one token, vec4<f32> for
// four), params (cols), X(col) and dot4(w, col) (the input's columns, normed where it asks),
// and the format's helpers (weight_formats.wgsl: bytes_of, k_scales, scale16, ...).
//
// A matrix row is read in units, each one word of weights (8 of Q4_1's, 4 of Q8_0's, 2 of
// F16's; Q5_1's with its block's high bits, the K formats' with their scales): each format
// gives UNIT_WEIGHTS, the weights in a unit, and unit_dot(row, u), unit u of row `row` times
// the input.
#ifdef Q4_1
const UNIT_WEIGHTS: u32 = 8u;

fn unit_dot(row: u32, w: u32) -> Acc {
    let s = unpack2x16float(dm[row * (params.cols / 32u) + w / 4u]);
    let word = qs[row * (params.cols / 8u) + w];
    let base = (w / 4u) * 32u + (w % 4u) * 4u;
    let q = bytes_of(word);
    let lo = vec4<f32>(q & vec4<u32>(0xfu)) * s.x + s.y;
    let hi = vec4<f32>(q >> vec4<u32>(4u)) * s.x + s.y;
    return dot4(lo, base) + dot4(hi, base + 16u);
}
#endif
#ifdef Q8_0
const UNIT_WEIGHTS: u32 = 4u;

fn unit_dot(row: u32, w: u32) -> Acc {
    let q = signed_bytes_of(qs[row * (params.cols / 4u) + w]);
    return dot4(vec4<f32>(q), w * 4u) * d[row * (params.cols / 32u) + w / 8u];
}
#endif
#ifdef AFFINE_16
// A unit is one word of integers: 4 weights of one 16-weight group.
const UNIT_WEIGHTS: u32 = 4u;

fn unit_dot(row: u32, w: u32) -> Acc {
    let q = signed_bytes_of(qs[row * (params.cols / 4u) + w]);
    let g = (row * (params.cols / 16u) + w / 4u) * 2u;
    return dot4(ab[g] * vec4<f32>(q) + ab[g + 1u], w * 4u);
}
#endif
#ifdef Q5_1
// Q4_1's unit with its block's high bits.
const UNIT_WEIGHTS: u32 = 8u;

fn unit_dot(row: u32, w: u32) -> Acc {
    let b = row * (params.cols / 32u) + w / 4u;
    let s = unpack2x16float(dm[b]);
    let high = qs[b * 5u];
    let word = qs[b * 5u + 1u + w % 4u];
    let base = (w / 4u) * 32u + (w % 4u) * 4u;
    // The high bits of weights i .. i + 3 of the block and of i + 16 .. i + 19.
    let i = vec4<u32>((w % 4u) * 4u) + vec4<u32>(0u, 1u, 2u, 3u);
    let one = vec4<u32>(1u);
    let q = bytes_of(word);
    let lo = vec4<f32>((q & vec4<u32>(0xfu)) | (((vec4<u32>(high) >> i) & one) << vec4<u32>(4u))) * s.x + s.y;
    let hi = vec4<f32>((q >> vec4<u32>(4u)) | (((vec4<u32>(high) >> (i + 16u)) & one) << vec4<u32>(4u))) * s.x + s.y;
    return dot4(lo, base) + dot4(hi, base + 16u);
}
#endif
#ifdef K_SCALES
// A unit is one word of a block's nibbles: 4 bytes, 8 weights of two sub-blocks.
const UNIT_WEIGHTS: u32 = 8u;

fn unit_dot(row: u32, u: u32) -> Acc {
    let base = (row * params.cols / 256u + u / 32u) * BLOCK_WORDS;
    let w = u % 32u;
    let c = w / 8u;
    let i0 = (w % 8u) * 4u;
    let col = (u / 32u) * 256u + 64u * c + i0;
    let s_lo = k_scales(base, 2u * c);
    let s_hi = k_scales(base, 2u * c + 1u);
#ifdef Q4_K
    let word = blocks[base + 4u + w];
#endif
#ifdef Q5_K
    let word = blocks[base + 12u + w];
    let high = blocks[base + 4u + w % 8u];
#endif
    let q = bytes_of(word);
#ifdef Q4_K
    let q_lo = q & vec4<u32>(0xfu);
    let q_hi = q >> vec4<u32>(4u);
#endif
#ifdef Q5_K
    let h = bytes_of(high);
    let q_lo = (q & vec4<u32>(0xfu)) + 16u * ((h >> vec4<u32>(2u * c)) & vec4<u32>(1u));
    let q_hi = (q >> vec4<u32>(4u)) + 16u * ((h >> vec4<u32>(2u * c + 1u)) & vec4<u32>(1u));
#endif
    let lo = s_lo.x * vec4<f32>(q_lo) - s_lo.y;
    let hi = s_hi.x * vec4<f32>(q_hi) - s_hi.y;
    return dot4(lo, col) + dot4(hi, col + 32u);
}
#endif
#ifdef SCALES_16
// Q6_K, Q3_K and Q2_K: a unit is 16 weights of a 128-weight half of a block, 4 adjacent
// columns (col + k, k < 4) in each of its 32-weight quarters, one word of each of the block's
// bit planes; a quarter's 4 columns share one of its 16-weight scales (scale16), and with
// Q2_K one of its mins (min16).
const UNIT_WEIGHTS: u32 = 16u;

fn unit_dot(row: u32, u: u32) -> Acc {
    let base = (row * params.cols / 256u + u / 16u) * BLOCK_WORDS;
    let h = u % 16u;
    let n = h / 8u;
    let l0 = (h % 8u) * 4u;
    let col = (u / 16u) * 256u + n * 128u + l0;
    let sc = n * 8u + l0 / 16u;
    let s = vec4<f32>(scale16(base, sc), scale16(base, sc + 2u), scale16(base, sc + 4u), scale16(base, sc + 6u));
    let q = unit_quarters(base, h, n);
#ifdef Q2_K
    let m = vec4<f32>(min16(base, sc), min16(base, sc + 2u), min16(base, sc + 4u), min16(base, sc + 6u));
    return dot4(s.x * q[0] - m.x, col) + dot4(s.y * q[1] - m.y, col + 32u) + dot4(s.z * q[2] - m.z, col + 64u)
        + dot4(s.w * q[3] - m.w, col + 96u);
#else
    return dot4(s.x * q[0], col) + dot4(s.y * q[1], col + 32u) + dot4(s.z * q[2], col + 64u) + dot4(s.w * q[3], col + 96u);
#endif
}
#endif
#ifdef Q2_K
// Unit h's integers (0..=3) by quarter (shift j of the bit pairs), columns k < 4 of each: a
// word of its half's bit pairs.
fn unit_quarters(base: u32, h: u32, n: u32) -> mat4x4<f32> {
    let q = bytes_of(blocks[base + 4u + h]);
    let two = vec4<u32>(3u);
    return mat4x4<f32>(
        vec4<f32>(q & two),
        vec4<f32>((q >> vec4<u32>(2u)) & two),
        vec4<f32>((q >> vec4<u32>(4u)) & two),
        vec4<f32>((q >> vec4<u32>(6u)) & two),
    );
}
#endif
#ifdef Q6_K
// Unit h's integers (q - 32) by quarter, columns k < 4 of each: a word of its half's high
// bit pairs and the two words of low nibbles they belong to.
fn unit_quarters(base: u32, h: u32, n: u32) -> mat4x4<f32> {
    let p = bytes_of(blocks[base + 32u + h]);
    let a = bytes_of(blocks[base + 16u * n + h % 8u]);
    let b = bytes_of(blocks[base + 16u * n + 8u + h % 8u]);
    let low = vec4<u32>(0xfu);
    let two = vec4<u32>(3u);
    let up = vec4<u32>(4u);
    let q0 = vec4<i32>((a & low) | ((p & two) << up)) - vec4<i32>(32);
    let q1 = vec4<i32>((b & low) | (((p >> vec4<u32>(2u)) & two) << up)) - vec4<i32>(32);
    let q2 = vec4<i32>((a >> up) | (((p >> up) & two) << up)) - vec4<i32>(32);
    let q3 = vec4<i32>((b >> up) | (((p >> vec4<u32>(6u)) & two) << up)) - vec4<i32>(32);
    return mat4x4<f32>(vec4<f32>(q0), vec4<f32>(q1), vec4<f32>(q2), vec4<f32>(q3));
}
#endif
#ifdef Q3_K
// Unit h's integers (-4..=3) by quarter (shift j of the low bit pairs), columns k < 4 of
// each: a word of its half's low bit pairs, and the word of high bits (bit 4n + j) over the
// same 4 columns.
fn unit_quarters(base: u32, h: u32, n: u32) -> mat4x4<f32> {
    let q = bytes_of(blocks[base + 8u + h]);
    let m = bytes_of(blocks[base + h % 8u]) >> vec4<u32>(4u * n);
    let two = vec4<u32>(3u);
    let one = vec4<u32>(1u);
    let four = vec4<i32>(4);
    let q0 = vec4<i32>(q & two) - four + four * vec4<i32>(m & one);
    let q1 = vec4<i32>((q >> vec4<u32>(2u)) & two) - four + four * vec4<i32>((m >> vec4<u32>(1u)) & one);
    let q2 = vec4<i32>((q >> vec4<u32>(4u)) & two) - four + four * vec4<i32>((m >> vec4<u32>(2u)) & one);
    let q3 = vec4<i32>((q >> vec4<u32>(6u)) & two) - four + four * vec4<i32>((m >> vec4<u32>(3u)) & one);
    return mat4x4<f32>(vec4<f32>(q0), vec4<f32>(q1), vec4<f32>(q2), vec4<f32>(q3));
}
#endif
#ifdef BF16
const UNIT_WEIGHTS: u32 = 2u;

fn unit_dot(row: u32, i: u32) -> Acc {
    let pair = unpack_bf16(w[row * (params.cols / 2u) + i]);
    return pair.x * X(2u * i) + pair.y * X(2u * i + 1u);
}
#endif
#ifdef F16
const UNIT_WEIGHTS: u32 = 2u;

fn unit_dot(row: u32, i: u32) -> Acc {
    let pair = unpack2x16float(w[row * (params.cols / 2u) + i]);
    return pair.x * X(2u * i) + pair.y * X(2u * i + 1u);
}
#endif
#ifdef F32
const UNIT_WEIGHTS: u32 = 1u;

fn unit_dot(row: u32, i: u32) -> Acc {
    return w[row * params.cols + i] * X(i);
}
#endif

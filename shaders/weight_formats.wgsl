// weight_formats.wgsl: the weight formats a matrix is stored in on the GPU (repacked at load
// by src/backend/gpu/repack.rs, 4-byte aligned, nothing dequantized): one define each, its
// bindings (group 0, bindings 1 and 2) and weight_at(e), the weight at element e = row * cols
// + col of the row-major matrix, with candle's dequantization arithmetic (bit-exact where
// no multiply-add is contracted). Included by matrix.wgsl (whose row_dot reads the same
// layouts a word at a time) and embedding.wgsl.
//   Q4_1: qs: array<u32> [rows * cols / 8], a block of 32 weights as 4 words of its 16 nibble
//     bytes (byte k: weight k low, k + 16 high); dm: array<u32> [rows * cols / 32], f16 d
//     (low half) | f16 m (high half); w = q d + m. Q4_0 (w = (q - 8) d) lands here exactly,
//     with m = -8 d.
//   Q5_1: qs: array<u32> [rows * cols / 32 * 5], a block as its 32 high bits (bit k: weight k)
//     then the 4 nibble words as Q4_1's; dm as Q4_1's; w = (q | high << 4) d + m. Q5_0
//     (w = (q - 16) d) lands here exactly, with m = -16 d.
//   Q8_0: qs: array<u32> [rows * cols / 4], 32 signed bytes a block; d: array<f32>
//     [rows * cols / 32]; w = q d.
//   Q4_K: blocks: array<u32> [rows * cols / 256 * 36], a 256-weight block as the file stores
//     it: f16 d | f16 dmin, 12 bytes of 6-bit scales and mins, 128 nibble bytes (64 weights
//     per 32 bytes: weight 64c + i low, 64c + 32 + i high); w = d sc q - dmin m.
//   Q5_K: blocks: array<u32> [rows * cols / 256 * 44]: as Q4_K with 32 bytes of high bits
//     before the nibbles (bit 2c of byte i: weight 64c + i, bit 2c + 1: 64c + 32 + i).
//   Q6_K: blocks: array<u32> [rows * cols / 256 * 53], the file's 210 bytes and 2 of padding:
//     128 bytes of low nibbles, 64 of high bit pairs, 16 signed scales (one per 16 weights),
//     f16 d; w = d sc (q - 32).
//   Q2_K: blocks: array<u32> [rows * cols / 256 * 21], the file's 84 bytes: 16 of 4-bit
//     scales (low nibble) and mins (high), one per 16 weights, 64 of bit pairs (bits 2j, 2j + 1
//     of byte 32n + l: weight 128n + 32j + l), f16 d | f16 dmin; w = d sc q - dmin m.
//   Q3_K: blocks: array<u32> [rows * cols / 256 * 28], the file's 110 bytes and 2 of padding:
//     32 bytes of high bits (bit 4n + j of byte l: weight 128n + 32j + l), 64 of low bit pairs
//     (bits 2j, 2j + 1 of byte 32n + l), 12 of 6-bit scales (one per 16 weights), f16 d;
//     w = d (sc - 32) q, q = low - 4 where the high bit is clear (-4..=3).
//   AFFINE_16: qs: array<u32> [rows * cols / 4], 4 signed bytes a word; ab: array<f32>
//     [rows * cols / 16 * 2], each 16 weights' a, b; w = a q + b (a stack whose parts'
//     quantized formats differ, each converted exactly).
//   F16, BF16: w: array<u32> [rows * cols / 2], two weights a word, low half first.
//   F32: w: array<f32> [rows * cols].
// K_SCALES is set with Q4_K and Q5_K (their 6-bit scales and mins), SCALES_16 with Q6_K and
// Q3_K (a signed scale per 16 weights, scale16), and with Q2_K too (whose min16 is the
// offset beside it).

#ifdef Q4_1
@group(0) @binding(1) var<storage, read> qs: array<u32>;
@group(0) @binding(2) var<storage, read> dm: array<u32>;
#endif
#ifdef Q5_1
@group(0) @binding(1) var<storage, read> qs: array<u32>;
@group(0) @binding(2) var<storage, read> dm: array<u32>;
#endif
#ifdef Q8_0
@group(0) @binding(1) var<storage, read> qs: array<u32>;
@group(0) @binding(2) var<storage, read> d: array<f32>;
#endif
#ifdef Q4_K
@group(0) @binding(1) var<storage, read> blocks: array<u32>;
const BLOCK_WORDS: u32 = 36u;
#endif
#ifdef Q5_K
@group(0) @binding(1) var<storage, read> blocks: array<u32>;
const BLOCK_WORDS: u32 = 44u;
#endif
#ifdef Q6_K
@group(0) @binding(1) var<storage, read> blocks: array<u32>;
const BLOCK_WORDS: u32 = 53u;
#endif
#ifdef Q2_K
@group(0) @binding(1) var<storage, read> blocks: array<u32>;
const BLOCK_WORDS: u32 = 21u;
#endif
#ifdef Q3_K
@group(0) @binding(1) var<storage, read> blocks: array<u32>;
const BLOCK_WORDS: u32 = 28u;
#endif
#ifdef AFFINE_16
@group(0) @binding(1) var<storage, read> qs: array<u32>;
@group(0) @binding(2) var<storage, read> ab: array<f32>;
#endif
#ifdef F16
@group(0) @binding(1) var<storage, read> w: array<u32>;
#endif
#ifdef BF16
@group(0) @binding(1) var<storage, read> w: array<u32>;
#endif
#ifdef F32
@group(0) @binding(1) var<storage, read> w: array<f32>;
#endif

// Byte k (little-endian) of a word.
fn byte_of(word: u32, k: u32) -> u32 {
    return (word >> (8u * k)) & 0xffu;
}

// The 4 bytes of a word, lowest first.
fn bytes_of(word: u32) -> vec4<u32> {
    return (vec4<u32>(word) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu);
}

// The 4 signed bytes of a word, lowest first: each byte to the top of a word, then back down
// with its sign.
fn signed_bytes_of(word: u32) -> vec4<i32> {
    return bitcast<vec4<i32>>(vec4<u32>(word) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u);
}

// Signed byte k (little-endian) of a word.
fn signed_byte_of(word: u32, k: u32) -> i32 {
    return bitcast<i32>(word << (24u - 8u * k)) >> 24u;
}

// Two bf16 weights of a word, low half first.
fn unpack_bf16(word: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<f32>(word << 16u), bitcast<f32>(word & 0xffff0000u));
}

#ifdef K_SCALES
// Sub-block j's (scale, min) of the K block at word `base`: 6 bits each, packed in the
// 12 bytes at words base + 1 ..= base + 3 (ggml's get_scale_min_k4).
fn scale_min(base: u32, j: u32) -> vec2<f32> {
    if (j < 4u) {
        return vec2<f32>(f32(k_byte(base, j) & 63u), f32(k_byte(base, j + 4u) & 63u));
    }
    let hi = k_byte(base, j + 4u);
    let s = (hi & 0xfu) | ((k_byte(base, j - 4u) >> 6u) << 4u);
    let m = (hi >> 4u) | ((k_byte(base, j) >> 6u) << 4u);
    return vec2<f32>(f32(s), f32(m));
}

// Byte k of the 12 scale bytes of the K block at word `base`.
fn k_byte(base: u32, k: u32) -> u32 {
    return byte_of(blocks[base + 1u + k / 4u], k % 4u);
}

// Sub-block j's (d sc, dmin m) of the K block at word `base`.
fn k_scales(base: u32, j: u32) -> vec2<f32> {
    let dmin = unpack2x16float(blocks[base]);
    let sm = scale_min(base, j);
    return vec2<f32>(dmin.x * sm.x, dmin.y * sm.y);
}
#endif

#ifdef Q6_K
// Signed scale j (0..16) of the Q6_K block at word `base`, times its d.
fn scale16(base: u32, j: u32) -> f32 {
    let word = blocks[base + 48u + j / 4u];
    let s = bitcast<i32>(word << (24u - 8u * (j % 4u))) >> 24u;
    return unpack2x16float(blocks[base + 52u]).x * f32(s);
}

// The integer (q - 32) at column l of quarter j of half n of the block at word `base`: a
// nibble (quarters 0 and 1 the low ones of the half's two 32-byte runs, 2 and 3 the high
// ones) and a bit pair above it.
fn quarter_int(base: u32, n: u32, j: u32, l: u32) -> f32 {
    let lo_at = n * 64u + l + 32u * (j % 2u);
    let lo = byte_of(blocks[base + lo_at / 4u], lo_at % 4u);
    let nibble = select(lo & 0xfu, lo >> 4u, j >= 2u);
    let hi_at = n * 32u + l;
    let pair = (byte_of(blocks[base + 32u + hi_at / 4u], hi_at % 4u) >> (2u * j)) & 3u;
    return f32(i32(nibble | (pair << 4u)) - 32);
}
#endif

#ifdef Q2_K
// Scale j (0..16) of the Q2_K block at word `base` (the low nibble of its byte j) times d.
fn scale16(base: u32, j: u32) -> f32 {
    return unpack2x16float(blocks[base + 20u]).x * f32(byte_of(blocks[base + j / 4u], j % 4u) & 0xfu);
}

// Min j (the high nibble of scale byte j) times dmin.
fn min16(base: u32, j: u32) -> f32 {
    return unpack2x16float(blocks[base + 20u]).y * f32(byte_of(blocks[base + j / 4u], j % 4u) >> 4u);
}

// The integer (0..=3) at column l of quarter j of half n of the block at word `base`.
fn quarter_int(base: u32, n: u32, j: u32, l: u32) -> f32 {
    return f32((byte_of(blocks[base + 4u + (32u * n + l) / 4u], l % 4u) >> (2u * j)) & 3u);
}
#endif

#ifdef Q3_K
// Scale j (0..16) of the Q3_K block at word `base`, less 32, times its d: the low nibble of
// scale byte j % 8 (its high nibble from j = 8 on), and bits 2 (j / 4) of byte 8 + j % 4 above.
fn scale16(base: u32, j: u32) -> f32 {
    let low = byte_of(blocks[base + 24u + (j % 8u) / 4u], j % 4u) >> (4u * (j / 8u));
    let top = (byte_of(blocks[base + 26u], j % 4u) >> (2u * (j / 4u))) & 3u;
    let s = i32((low & 0xfu) | (top << 4u)) - 32;
    return unpack2x16float(blocks[base + 27u]).x * f32(s);
}

// The integer (-4..=3) at column l of quarter j of half n of the block at word `base`: its
// low bit pair, less 4 where its high bit is clear.
fn quarter_int(base: u32, n: u32, j: u32, l: u32) -> f32 {
    let low = (byte_of(blocks[base + 8u + (32u * n + l) / 4u], l % 4u) >> (2u * j)) & 3u;
    let high = (byte_of(blocks[base + l / 4u], l % 4u) >> (4u * n + j)) & 1u;
    return f32(i32(low) - 4 + 4 * i32(high));
}
#endif

// The weight at element e (row * cols + col) of the matrix.
fn weight_at(e: u32) -> f32 {
#ifdef Q4_1
    let b = e / 32u;
    let k = e % 32u;
    let s = unpack2x16float(dm[b]);
    let byte = byte_of(qs[b * 4u + (k % 16u) / 4u], k % 4u);
    return f32(select(byte & 0xfu, byte >> 4u, k >= 16u)) * s.x + s.y;
#endif
#ifdef Q5_1
    let b = e / 32u;
    let k = e % 32u;
    let s = unpack2x16float(dm[b]);
    let byte = byte_of(qs[b * 5u + 1u + (k % 16u) / 4u], k % 4u);
    let q = select(byte & 0xfu, byte >> 4u, k >= 16u) | (((qs[b * 5u] >> k) & 1u) << 4u);
    return f32(q) * s.x + s.y;
#endif
#ifdef Q8_0
    let q = signed_byte_of(qs[e / 4u], e % 4u);
    return f32(q) * d[e / 32u];
#endif
#ifdef AFFINE_16
    let q = signed_byte_of(qs[e / 4u], e % 4u);
    return ab[(e / 16u) * 2u] * f32(q) + ab[(e / 16u) * 2u + 1u];
#endif
#ifdef K_SCALES
    let base = (e / 256u) * BLOCK_WORDS;
    let j = e % 256u;
    let c = j / 64u;
    let high = (j % 64u) >= 32u;
    let i = j % 32u;
    let sub = 2u * c + u32(high);
    let s = k_scales(base, sub);
#ifdef Q4_K
    let byte = byte_of(blocks[base + 4u + (32u * c + i) / 4u], i % 4u);
    let q = select(byte & 0xfu, byte >> 4u, high);
#endif
#ifdef Q5_K
    let byte = byte_of(blocks[base + 12u + (32u * c + i) / 4u], i % 4u);
    let bit = (byte_of(blocks[base + 4u + i / 4u], i % 4u) >> sub) & 1u;
    let q = select(byte & 0xfu, byte >> 4u, high) + 16u * bit;
#endif
    return s.x * f32(q) - s.y;
#endif
#ifdef SCALES_16
    // Weight e's block, its 128-weight half n, its 32-weight quarter j and column l there; k
    // its 16-weight scale.
    let base = (e / 256u) * BLOCK_WORDS;
    let n = (e % 256u) / 128u;
    let j = (e % 128u) / 32u;
    let l = e % 32u;
    let k = n * 8u + 2u * j + l / 16u;
#ifdef Q2_K
    return scale16(base, k) * quarter_int(base, n, j, l) - min16(base, k);
#else
    return scale16(base, k) * quarter_int(base, n, j, l);
#endif
#endif
#ifdef F16
    let pair = unpack2x16float(w[e / 2u]);
    return select(pair.x, pair.y, (e % 2u) == 1u);
#endif
#ifdef BF16
    let pair = unpack_bf16(w[e / 2u]);
    return select(pair.x, pair.y, (e % 2u) == 1u);
#endif
#ifdef F32
    return w[e];
#endif
}

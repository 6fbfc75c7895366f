// matvec_q4_1.wgsl: y = W x for a Q4_1 matrix W [rows, cols], dequantized on the fly.
// The decode kernel (one token); matmul_q4_1.wgsl is its prefill twin.
// Layout (repacked at load, 4-byte aligned): a Q4_1 block of 32 weights is
//   dm[b]: u32 = f16 d (low half) | f16 m (high half)      -> array<u32> [rows * cols / 32]
//   qs[4b .. 4b+4]: the block's 16 nibble bytes as 4 u32   -> array<u32> [rows * cols / 8]
// Byte k of a block holds weight k (low nibble) and weight k + 16 (high nibble);
// w = q * d + m. Word j of a block therefore holds weights 4j..4j+3 and 4j+16..4j+19.
// Q4_0 blocks (w = (q - 8) d) are repacked into this layout with m = -8 d, which is exact.
// Bindings (group 0): 0 uniform Params {rows, cols, accumulate, last_token};
//   1 qs (read); 2 dm (read); 3 x: array<f32> [n_tokens, cols] (read; row 0, or row n_tokens - 1 when
//   last_token != 0, as the LM head after a prefill); 4 y: array<f32> (read_write);
//   5 uniform Step {pos, n_tokens}.
// Output: y[r] = (W x)[r], or += when accumulate != 0 (the residual add fused into the output
// projections).
// Dispatch: (ceil(rows / (WG / TPR)), 1, 1) workgroups of WG threads (overrides: WG a power
// of two <= 256, TPR a power of two <= WG). TPR threads share a row: each takes every TPR-th
// word (8 weights) of it, then they add up their sums in workgroup memory; a workgroup covers WG / TPR
// rows. Threads past the last row compute nothing and write nothing.

override WG: u32 = 64u;
override TPR: u32 = 8u;

struct Params {
    rows: u32,
    cols: u32,
    accumulate: u32,
    last_token: u32,
}

struct Step {
    pos: u32,
    n_tokens: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> qs: array<u32>;
@group(0) @binding(2) var<storage, read> dm: array<u32>;
@group(0) @binding(3) var<storage, read> x: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<uniform> step: Step;

var<workgroup> partial: array<f32, 256>;
var<private> x_base: u32;

fn X(col: u32) -> f32 {
    return x[x_base + col];
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = lid.x;
    let lane = t % TPR;
    let row = wg.x * (WG / TPR) + t / TPR;
    x_base = select(0u, (step.n_tokens - 1u) * params.cols, params.last_token != 0u);
    var sum = 0.0;
    if (row < params.rows) {
        let words = params.cols / 8u;
        let blocks = params.cols / 32u;
        for (var w = lane; w < words; w = w + TPR) {
            let b = w / 4u;
            let s = unpack2x16float(dm[row * blocks + b]);
            let word = qs[row * words + w];
            let base = b * 32u + (w % 4u) * 4u;
            for (var k = 0u; k < 4u; k = k + 1u) {
                let q = (word >> (8u * k)) & 0xffu;
                let lo = f32(q & 0xfu) * s.x + s.y;
                let hi = f32(q >> 4u) * s.x + s.y;
                sum = sum + lo * X(base + k) + hi * X(base + 16u + k);
            }
        }
    }
    partial[t] = sum;
    workgroupBarrier();
    for (var stride = TPR / 2u; stride > 0u; stride = stride / 2u) {
        if (lane < stride) {
            partial[t] = partial[t] + partial[t + stride];
        }
        workgroupBarrier();
    }
    if (lane == 0u && row < params.rows) {
        let i = row;
        if (params.accumulate != 0u) {
            y[i] = y[i] + partial[t];
        } else {
            y[i] = partial[t];
        }
    }
}

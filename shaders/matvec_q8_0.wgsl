// matvec_q8_0.wgsl: y = W x for a Q8_0 matrix W [rows, cols], dequantized on the fly.
// Layout (repacked at load, 4-byte aligned): a Q8_0 block of 32 weights is
//   d[b]: f32 scale (the file's f16, widened)            -> array<f32> [rows * cols / 32]
//   qs[8b .. 8b+8]: its 32 signed bytes as 8 u32         -> array<u32> [rows * cols / 4]
// w = q * d with q the sign-extended byte.
// Bindings (group 0): 0 uniform Params {rows, cols, accumulate, out_stride}; 1 qs (read); 2 d (read);
//   3 x: array<f32> [cols] (read); 4 y: array<f32> (read_write); 5 uniform Step {pos, n_pos}.
// Output: y[step.pos * out_stride + r] = (W x)[r], or += when accumulate != 0 (the residual
// add fused into the output projections; out_stride = kv_dim writes K/V into the cache row).
// Dispatch: (rows, 1, 1) workgroups of WG threads (override, power of two <= 256);
// workgroup r computes y[r]: threads take the row's words in turn, then reduce.

override WG: u32 = 64u;

struct Params {
    rows: u32,
    cols: u32,
    accumulate: u32,
    out_stride: u32,
}

struct Step {
    pos: u32,
    n_pos: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> qs: array<u32>;
@group(0) @binding(2) var<storage, read> d: array<f32>;
@group(0) @binding(3) var<storage, read> x: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<uniform> step: Step;

var<workgroup> partial: array<f32, 256>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let row = wg.x;
    let t = lid.x;
    let words = params.cols / 4u;
    let blocks = params.cols / 32u;
    var sum = 0.0;
    for (var w = t; w < words; w = w + WG) {
        let scale = d[row * blocks + w / 8u];
        let word = qs[row * words + w];
        let base = w * 4u;
        var dot = 0.0;
        for (var k = 0u; k < 4u; k = k + 1u) {
            let q = bitcast<i32>(word << (24u - 8u * k)) >> 24u;
            dot = dot + f32(q) * x[base + k];
        }
        sum = sum + dot * scale;
    }
    partial[t] = sum;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (t < stride) {
            partial[t] = partial[t] + partial[t + stride];
        }
        workgroupBarrier();
    }
    if (t == 0u && row < params.rows) {
        let i = step.pos * params.out_stride + row;
        if (params.accumulate != 0u) {
            y[i] = y[i] + partial[0];
        } else {
            y[i] = partial[0];
        }
    }
}

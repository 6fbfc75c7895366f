// matmul_f16.wgsl: Y = X W^T for an F16 matrix W [rows, cols] (cols even), widened on the fly
// with unpack2x16float (no shader-f16 feature needed), and a batch X of the step's
// n_tokens input rows: the prefill twin of matvec_f16.wgsl. Each thread takes 4 tokens at
// once (a vec4 accumulator), so every weight it dequantizes is used 4 times.
// Layout: w[i]: u32 = weights 2i (low half) and 2i + 1 (high half), row-major -> array<u32>
//   [rows * cols / 2] (the file's bytes as they are).
// Bindings (group 0): 0 uniform Params {rows, cols, accumulate};
//   1 w (read); 3 x: array<f32> [n_tokens, cols] (read); 4 y: array<f32> (read_write);
//   5 uniform Step {pos, n_tokens}.
// Output for token b < n_tokens: y[b * rows + r] = (W x_b)[r], or += when accumulate != 0.
// Dispatch: (ceil(rows / (WG / TPR)), ceil(n_tokens / 4), 1) workgroups of WG threads
// (overrides as in matvec). Workgroup (g, j) covers rows g * WG / TPR .. and tokens 4j .. 4j + 3;
// TPR threads share a row, each taking every TPR-th word (2 weights), then add up in workgroup memory.
// Tokens past n_tokens read a valid row (the last) and write nothing; so do rows past `rows`.

override WG: u32 = 64u;
override TPR: u32 = 8u;

struct Params {
    rows: u32,
    cols: u32,
    accumulate: u32,
    _pad: u32,
}

struct Step {
    pos: u32,
    n_tokens: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read> x: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<uniform> step: Step;

var<workgroup> partial: array<vec4<f32>, 256>;
var<private> x_rows: vec4<u32>;

// Column `col` of the thread's 4 token rows.
fn X(col: u32) -> vec4<f32> {
    return vec4<f32>(x[x_rows.x + col], x[x_rows.y + col], x[x_rows.z + col], x[x_rows.w + col]);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = lid.x;
    let lane = t % TPR;
    let row = wg.x * (WG / TPR) + t / TPR;
    let b0 = wg.y * 4u;
    let last = step.n_tokens - 1u;
    x_rows = vec4<u32>(min(b0, last), min(b0 + 1u, last), min(b0 + 2u, last), min(b0 + 3u, last)) * params.cols;
    var sum = vec4<f32>(0.0);
    if (row < params.rows && b0 < step.n_tokens) {
        let words = params.cols / 2u;
        for (var i = lane; i < words; i = i + TPR) {
            let pair = unpack2x16float(w[row * words + i]);
            sum = sum + pair.x * X(2u * i) + pair.y * X(2u * i + 1u);
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
        let total = partial[t];
        for (var j = 0u; j < 4u; j = j + 1u) {
            let b = b0 + j;
            if (b < step.n_tokens) {
                let i = b * params.rows + row;
                if (params.accumulate != 0u) {
                    y[i] = y[i] + total[j];
                } else {
                    y[i] = total[j];
                }
            }
        }
    }
}

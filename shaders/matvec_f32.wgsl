// matvec_f32.wgsl: y = W x for an F32 matrix W [rows, cols].
// The decode kernel (one token); matmul_f32.wgsl is its prefill twin.
// Layout: w: array<f32> [rows * cols], row-major (the file's values as they are).
// Bindings (group 0): 0 uniform Params {rows, cols, accumulate, last_token};
//   1 w (read); 3 x: array<f32> [n_tokens, cols] (read; row 0, or row n_tokens - 1 when
//   last_token != 0, as the LM head after a prefill); 4 y: array<f32> (read_write);
//   5 uniform Step {pos, n_tokens}.
// Output: y[r] = (W x)[r], or += when accumulate != 0 (the residual add fused into the output
// projections).
// Dispatch: (ceil(rows / (WG / TPR)), 1, 1) workgroups of WG threads (overrides: WG a power
// of two <= 256, TPR a power of two <= WG). TPR threads share a row: each takes every TPR-th
// weight of it, then they add up their sums in workgroup memory; a workgroup covers WG / TPR
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
@group(0) @binding(1) var<storage, read> w: array<f32>;
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
        for (var i = lane; i < params.cols; i = i + TPR) {
            sum = sum + w[row * params.cols + i] * X(i);
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

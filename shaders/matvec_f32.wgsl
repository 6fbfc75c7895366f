// matvec_f32.wgsl: y = W x for an F32 matrix W [rows, cols].
// Layout: w: array<f32> [rows * cols], row-major (the file's values as they are).
// Bindings (group 0): 0 uniform Params {rows, cols, accumulate, out_stride}; 1 w (read);
//   3 x: array<f32> [cols] (read); 4 y: array<f32> (read_write); 5 uniform Step {pos, n_pos, token}.
// Output: y[step.pos * out_stride + r] = (W x)[r], or += when accumulate != 0 (the residual
// add fused into the output projections; out_stride = kv_dim writes K/V into the cache row).
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
    out_stride: u32,
}

struct Step {
    pos: u32,
    n_pos: u32,
    token: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> x: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<uniform> step: Step;

var<workgroup> partial: array<f32, 256>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = lid.x;
    let lane = t % TPR;
    let row = wg.x * (WG / TPR) + t / TPR;
    var sum = 0.0;
    if (row < params.rows) {
        for (var i = lane; i < params.cols; i = i + TPR) {
            sum = sum + w[row * params.cols + i] * x[i];
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
        let i = step.pos * params.out_stride + row;
        if (params.accumulate != 0u) {
            y[i] = y[i] + partial[t];
        } else {
            y[i] = partial[t];
        }
    }
}

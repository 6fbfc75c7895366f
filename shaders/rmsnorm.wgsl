// rmsnorm.wgsl: RMSNorm of each row, out[r, i] = x[r, i] / sqrt(mean_i(x[r, i]^2) + eps) * gain[i].
// Bindings (group 0): 0 uniform Params {n, rows, eps}; 1 x: array<f32> [rows, n] (read);
//   2 gain: array<f32> [n] (read); 3 out: array<f32> [rows, n] (read_write).
// Dispatch: (rows, 1, 1) workgroups of WG threads (override, <= 256); workgroup r reduces row r
// (in the forward pass, rows = the step's tokens); rows past params.rows write nothing.
// Each thread sums a strided slice of squares; a tree reduction in workgroup memory gives the mean.

override WG: u32 = 64u;

struct Params {
    n: u32,
    rows: u32,
    eps: f32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> gain: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

var<workgroup> partial: array<f32, 256>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let row = wg.x;
    let t = lid.x;
    let base = row * params.n;
    var sum = 0.0;
    for (var i = t; i < params.n; i = i + WG) {
        let v = x[base + i];
        sum = sum + v * v;
    }
    partial[t] = sum;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (t < stride) {
            partial[t] = partial[t] + partial[t + stride];
        }
        workgroupBarrier();
    }
    let scale = inverseSqrt(partial[0] / f32(params.n) + params.eps);
    if (row < params.rows) {
        for (var i = t; i < params.n; i = i + WG) {
            out[base + i] = x[base + i] * scale * gain[i];
        }
    }
}

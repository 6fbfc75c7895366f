// layer_norm.wgsl: a sublayer's or the LM head's input LayerNorm-ed (StableLM's norms), for
// each of the step's tokens b < n_tokens:
//   out[b, i] = (x[b, i] - mean_j x[b, j]) / sqrt(var_j x[b, j] + eps) * norm[i] + norm[dim + i],
// var the mean of the squares of the centred row. An RMSNorm runs inside the projection after
// it (matrix.wgsl's NORM); a LayerNorm's mean and bias take this dispatch, whose output the
// projection reads. The mean, then the centred squares, each summed in f32 by the workgroup
// (workgroup_reduce.wgsl's tree): two reads of the row, no cancellation however far it sits
// from 0.
// Bindings (group 0): 0 uniform Params {dim, eps}; 1 x: array<f32> [n_tokens, dim] (read);
//   2 norm: array<f32> [2 dim] (read: the gain, then the bias); 3 out: array<f32>
//   [n_tokens, dim] (read_write); 4 uniform Step {pos, n_tokens}.
// Dispatch: (n_tokens, 1, 1) workgroups of WG threads (override, a power of two up to 256);
// workgroup b's thread t owns elements t, t + WG, ... of row b of out and writes nothing else.

override WG: u32 = 64u;

#include norm_params.wgsl

#include step.wgsl

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> norm: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<uniform> step: Step;

var<workgroup> partial: array<f32, 256>;

#include workgroup_reduce.wgsl

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let b = wg.x;
    if (b >= step.n_tokens) {
        return;
    }
    let t = lid.x;
    let row = b * params.dim;
    let n = f32(params.dim);
    var sum = 0.0;
    for (var i = t; i < params.dim; i = i + WG) {
        sum = sum + x[row + i];
    }
    let mean = reduce(sum, t, false) / n;
    var squares = 0.0;
    for (var i = t; i < params.dim; i = i + WG) {
        let c = x[row + i] - mean;
        squares = squares + c * c;
    }
    let inv_sd = inverseSqrt(reduce(squares, t, false) / n + params.eps);
    for (var i = t; i < params.dim; i = i + WG) {
        out[row + i] = (x[row + i] - mean) * inv_sd * norm[i] + norm[params.dim + i];
    }
}

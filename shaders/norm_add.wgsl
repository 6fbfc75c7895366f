// norm_add.wgsl: a sublayer's output RMS-normed and added to the residual stream (Gemma 3's
// norms after the attention's output projection and after the feed-forward's down
// projection), for each of the step's tokens b < n_tokens:
//   x[b, i] += y[b, i] / sqrt(mean_j(y[b, j]^2) + eps) * gain[i].
// FIRST (a decode step's last dispatch of a layer whose feed-forward read the attention's
// post-normed output in its prologue, matrix.wgsl's POST_NORM_IN): the attention's term is
// added first, in the order of two post norms one after the other,
//   x[b, i] = (x[b, i] + first_y[b, i] / rms(first_y[b]) * first_gain[i]) + y[b, i] / rms(y[b]) * gain[i].
// Each mean of squares is summed in f32 by each workgroup (workgroup_reduce.wgsl's tree).
// Bindings (group 0): 0 uniform Params {dim, eps}; 1 y: array<f32> [n_tokens, dim] (read);
//   2 gain: array<f32> [dim] (read); 3 x: array<f32> [n_tokens, dim] (read_write);
//   4 uniform Step {pos, n_tokens}; FIRST: 5 first_y: array<f32> [n_tokens, dim] (read),
//   6 first_gain: array<f32> [dim] (read).
// Dispatch: (n_tokens, 1, 1) workgroups of WG threads (override, a power of two up to 256);
// workgroup b's thread t owns elements t, t + WG, ... of row b of x and writes nothing else.

override WG: u32 = 64u;

#include norm_params.wgsl

#include step.wgsl

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> y: array<f32>;
@group(0) @binding(2) var<storage, read> gain: array<f32>;
@group(0) @binding(3) var<storage, read_write> x: array<f32>;
@group(0) @binding(4) var<uniform> step: Step;
#ifdef FIRST
@group(0) @binding(5) var<storage, read> first_y: array<f32>;
@group(0) @binding(6) var<storage, read> first_gain: array<f32>;
#endif

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
    var squares = 0.0;
    for (var i = t; i < params.dim; i = i + WG) {
        let v = y[row + i];
        squares = squares + v * v;
    }
    let inv_rms = inverseSqrt(reduce(squares, t, false) / f32(params.dim) + params.eps);
#ifdef FIRST
    var first_squares = 0.0;
    for (var i = t; i < params.dim; i = i + WG) {
        let v = first_y[row + i];
        first_squares = first_squares + v * v;
    }
    let first_inv_rms = inverseSqrt(reduce(first_squares, t, false) / f32(params.dim) + params.eps);
#endif
    for (var i = t; i < params.dim; i = i + WG) {
#ifdef FIRST
        let base = x[row + i] + first_y[row + i] * first_inv_rms * first_gain[i];
#else
        let base = x[row + i];
#endif
        x[row + i] = base + y[row + i] * inv_rms * gain[i];
    }
}

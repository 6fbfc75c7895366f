// expert_sum.wgsl: a mixture of experts' outputs into the residual stream. For each of the
// step's tokens b < n_tokens and each row r < dim, with the token's picks (expert_pick.wgsl)
// and each pick's down projection out[b, k] (the matrix kernel's EXPERTS variant):
//   x[b, r] += out_scale * (w_0 out[b, 0, r] + w_1 out[b, 1, r] + ...)
// summed k = 0, 1, ... in f32 (the CPU twin's order, cpu::experts: each weighted output,
// then their sum in pick order).
// Bindings (group 0): 0 uniform Params {count (unused here), used, normalized (unused here),
//   dim, out_scale}; 1 picks: array<u32> [n_tokens, used, 2] (read: expert, weight bits);
//   2 out: array<f32> [n_tokens, used, dim] (read); 3 x: array<f32> [n_tokens, dim]
//   (read_write: the step's rows added to, nothing else); 4 uniform Step {pos, n_tokens}.
// Dispatch: (ceil(dim / WG), n_tokens, 1) workgroups of WG threads (override); thread (r, b)
// writes x[b, r] alone.

override WG: u32 = 64u;

#include expert_params.wgsl

#include step.wgsl

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> picks: array<u32>;
@group(0) @binding(2) var<storage, read> out: array<f32>;
@group(0) @binding(3) var<storage, read_write> x: array<f32>;
@group(0) @binding(4) var<uniform> step: Step;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let r = gid.x;
    let b = gid.y;
    if (r >= params.dim || b >= step.n_tokens) {
        return;
    }
    let first = b * params.used;
    var sum = bitcast<f32>(picks[2u * first + 1u]) * out[first * params.dim + r];
    for (var k = 1u; k < params.used; k = k + 1u) {
        sum = sum + bitcast<f32>(picks[2u * (first + k) + 1u]) * out[(first + k) * params.dim + r];
    }
    x[b * params.dim + r] = x[b * params.dim + r] + params.out_scale * sum;
}

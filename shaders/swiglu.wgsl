// swiglu.wgsl: out[r, i] = silu(gate[r, i]) * up[r, i], silu(x) = x / (1 + e^-x), where the
// fused gate/up projection leaves each row as gate_up[r] = [gate (n) | up (n)].
// Bindings (group 0): 0 uniform Params {n}; 1 gate_up: array<f32> [rows, 2n] (read);
//   2 out: array<f32> [rows, n] (read_write); 3 uniform Step {pos, n_tokens}: rows = n_tokens.
// Dispatch: (ceil(n / WG), n_tokens, 1) workgroups of WG threads (override); one thread per output.

override WG: u32 = 64u;

struct Params {
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

#include step.wgsl

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> gate_up: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> step: Step;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x >= params.n || gid.y >= step.n_tokens) {
        return;
    }
    let g = gate_up[gid.y * 2u * params.n + gid.x];
    let u = gate_up[gid.y * 2u * params.n + params.n + gid.x];
    out[gid.y * params.n + gid.x] = g / (1.0 + exp(-g)) * u;
}

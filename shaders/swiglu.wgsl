// swiglu.wgsl: gate[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + e^-x), in place.
// Bindings (group 0): 0 uniform Params {n}; 1 gate: array<f32> [rows, n] (read_write);
//   2 up: array<f32> [rows, n] (read); 3 uniform Step {pos, n_tokens}: rows = n_tokens.
// Dispatch: (ceil(n / WG), n_tokens, 1) workgroups of WG threads (override); one thread per element.

override WG: u32 = 64u;

struct Params {
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

struct Step {
    pos: u32,
    n_tokens: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> gate: array<f32>;
@group(0) @binding(2) var<storage, read> up: array<f32>;
@group(0) @binding(3) var<uniform> step: Step;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x >= params.n || gid.y >= step.n_tokens) {
        return;
    }
    let i = gid.y * params.n + gid.x;
    let g = gate[i];
    gate[i] = g / (1.0 + exp(-g)) * up[i];
}

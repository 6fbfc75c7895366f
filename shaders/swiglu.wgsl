// swiglu.wgsl: gate[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + e^-x), in place.
// Bindings (group 0): 0 uniform Params {n}; 1 gate: array<f32> [n] (read_write);
//   2 up: array<f32> [n] (read).
// Dispatch: (ceil(n / WG), 1, 1) workgroups of WG threads; one thread per element.

override WG: u32 = 64u;

struct Params {
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> gate: array<f32>;
@group(0) @binding(2) var<storage, read> up: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i >= params.n) {
        return;
    }
    let g = gate[i];
    gate[i] = g / (1.0 + exp(-g)) * up[i];
}

// rope.wgsl: rotary position embedding on adjacent pairs (llama.cpp "NORM" mode), in place.
// Pair i of each head, (x[2i], x[2i+1]), turns by angle pos * base^(-2i / head_dim).
// The angles' cos/sin come precomputed from the CPU in f64 (f32 angles lose ~1e-3 rad at
// position 8192): table[(pos * head_dim / 2 + i) * 2 + {0: cos, 1: sin}].
// Bindings (group 0): 0 uniform Params {n_heads, head_dim, x_stride}; 1 x: array<f32>
//   (read_write): token b (position step.pos + b) has its vector at
//   x[(step.pos + b) * x_stride ..] when x_stride != 0 (a K cache of rows x_stride wide), else
//   at x[b * n_heads * head_dim ..] (a [n_tokens, n_heads * head_dim] batch of queries);
//   2 table: array<f32> [context * head_dim] (read); 3 uniform Step {pos, n_tokens}.
// Dispatch: (ceil(n_heads * head_dim / 2 / WG), n_tokens, 1) workgroups of WG threads (override);
// one thread per pair of one token.

override WG: u32 = 64u;

struct Params {
    n_heads: u32,
    head_dim: u32,
    x_stride: u32,
    _pad: u32,
}

struct Step {
    pos: u32,
    n_tokens: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> table: array<f32>;
@group(0) @binding(3) var<uniform> step: Step;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let half_dim = params.head_dim / 2u;
    let pair = gid.x;
    let tok = gid.y;
    if (pair >= params.n_heads * half_dim || tok >= step.n_tokens) {
        return;
    }
    let pos = step.pos + tok;
    let i = pair % half_dim;
    let t = (pos * half_dim + i) * 2u;
    let c = table[t];
    let s = table[t + 1u];
    let row = select(tok * params.n_heads * params.head_dim, pos * params.x_stride, params.x_stride != 0u);
    let at = row + 2u * pair;
    let a = x[at];
    let b = x[at + 1u];
    x[at] = a * c - b * s;
    x[at + 1u] = a * s + b * c;
}

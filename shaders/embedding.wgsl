// embedding.wgsl: x[b] = row tokens[b] of the token embedding table E [vocab, dim], dequantized,
// for the step's tokens b < n_tokens.
// The table is in the layout of its matvec kernel (it is also the tied LM head):
//   format 0 = Q4_1 (and Q4_0): a = qs (4 u32 per 32-weight block), b = dm (u32 f16 d | f16 m << 16)
//   format 1 = Q8_0: a = qs (8 u32 of signed bytes per block), b = d (f32 bits per block)
//   format 2 = F16:  a = b = w (u32 = two f16, low half first)
//   format 3 = F32:  a = b = w (f32 bits)
// Bindings (group 0): 0 uniform Params {dim, format}; 1 a: array<u32> (read); 2 b: array<u32>
//   (read); 3 x: array<f32> [n_tokens, dim] (read_write); 4 uniform Step {pos, n_tokens};
//   5 tokens: array<u32> [n_tokens] (read).
// Dispatch: (ceil(dim / WG), n_tokens, 1) workgroups of WG threads (override); thread (i, b)
// writes x[b * dim + i] for i < dim and nothing else. A token id past the table would read
// out of bounds: the host checks ids against the vocabulary before each step.

override WG: u32 = 64u;

#include embedding_params.wgsl

#include step.wgsl

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> a: array<u32>;
@group(0) @binding(2) var<storage, read> b: array<u32>;
@group(0) @binding(3) var<storage, read_write> x: array<f32>;
@group(0) @binding(4) var<uniform> step: Step;
@group(0) @binding(5) var<storage, read> tokens: array<u32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    let row = gid.y;
    if (i >= params.dim || row >= step.n_tokens) {
        return;
    }
    let e = tokens[row] * params.dim + i; // element index in the table
    let block = e / 32u;
    let k = e % 32u;
    var v = 0.0;
    switch params.format {
        case 0u: {
            let s = unpack2x16float(b[block]);
            let byte = (a[block * 4u + (k % 16u) / 4u] >> (8u * (k % 4u))) & 0xffu;
            let q = select(byte & 0xfu, byte >> 4u, k >= 16u);
            v = f32(q) * s.x + s.y;
        }
        case 1u: {
            let word = a[e / 4u];
            let q = bitcast<i32>(word << (24u - 8u * (e % 4u))) >> 24u;
            v = f32(q) * bitcast<f32>(b[block]);
        }
        case 2u: {
            let pair = unpack2x16float(a[e / 2u]);
            v = select(pair.x, pair.y, (e % 2u) == 1u);
        }
        default: {
            v = bitcast<f32>(a[e]);
        }
    }
    x[row * params.dim + i] = v;
}

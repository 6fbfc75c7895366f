// embedding.wgsl: x[b] = row tokens[b] of the token embedding table E [vocab, dim], dequantized
// and multiplied by params.scale (Gemma 3's sqrt(dim), else 1), for the step's tokens
// b < n_tokens. One variant per weight format (the table is in the
// layout of its matvec kernel, since it is also the tied LM head): weight_formats.wgsl's
// define, bindings and weight_at.
// With POSITIONS (GPT-2's learned positions) each row also adds row step.pos + b of the
// position table P [context, dim] (f32): x[b] = scale * E[tokens[b]] + P[step.pos + b], in the
// band that writes the row, so once.
// A table too large for one binding is split into bands of rows, one dispatch each: a band
// holds token ids first_row .. first_row + rows and writes only its tokens' rows of x.
// Bindings (group 0): 0 uniform Params {dim, first_row, rows, scale}; 1 and 2 the table (weight_formats.wgsl);
//   3 x: array<f32> [n_tokens, dim] (read_write); 4 uniform Step {pos, n_tokens};
//   5 tokens: array<u32> [n_tokens] (read); 6 positions: array<f32> [context, dim] (read;
//   POSITIONS only).
// Dispatch: (ceil(dim / WG), n_tokens, 1) workgroups of WG threads (override); thread (i, b)
// writes x[b * dim + i] for i < dim when token b is in the band, and nothing else.

override WG: u32 = 64u;

#include embedding_params.wgsl

#include step.wgsl

#include weight_formats.wgsl

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(3) var<storage, read_write> x: array<f32>;
@group(0) @binding(4) var<uniform> step: Step;
@group(0) @binding(5) var<storage, read> tokens: array<u32>;
#ifdef POSITIONS
@group(0) @binding(6) var<storage, read> positions: array<f32>;
#endif

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    let row = gid.y;
    if (i >= params.dim || row >= step.n_tokens) {
        return;
    }
    let token = tokens[row];
    if (token < params.first_row || token - params.first_row >= params.rows) {
        return;
    }
    var v = weight_at((token - params.first_row) * params.dim + i) * params.scale;
#ifdef POSITIONS
    v = v + positions[(step.pos + row) * params.dim + i];
#endif
    x[row * params.dim + i] = v;
}

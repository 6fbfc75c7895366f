// short_conv.wgsl: LFM2's gated short convolution, a convolving layer's mixer in place of
// attention. For each of the step's tokens b < n_tokens, at position p = pos + b, and each
// channel ch < dim, with bcx the input projection's rows [b | c | x']:
//   g[p, ch]   = bcx[b, ch] * bcx[b, 2 dim + ch]                  (the cache's row p)
//   out[b, ch] = bcx[b, dim + ch] * sum_j kernel[ch, j] * g[p - width + 1 + j, ch]
// summed j = 0, 1, ... in f32 from 0 (the CPU twin's order). The step's own rows of g are
// computed from bcx, not read back from the cache (no thread reads another's write); the
// rows before pos come from the cache, written by earlier steps; before position 0, zeros.
// Bindings (group 0): 0 uniform Params {dim, width}; 1 bcx: array<f32> [n_tokens, 3 dim]
//   (read); 2 kernel: array<f32> [dim, width] (read); 3 cache: array<f32> [capacity, dim]
//   (read_write: rows < pos read, rows pos..pos + n_tokens written); 4 out: array<f32>
//   [n_tokens, dim] (read_write); 5 uniform Step {pos, n_tokens}.
// Dispatch: (ceil(dim / WG), n_tokens, 1) workgroups of WG threads (override); thread
// (ch, b) writes cache[pos + b, ch] and out[b, ch] and nothing else.

override WG: u32 = 64u;

#include conv_params.wgsl

#include step.wgsl

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> bcx: array<f32>;
@group(0) @binding(2) var<storage, read> kernel: array<f32>;
@group(0) @binding(3) var<storage, read_write> cache: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<uniform> step: Step;

// The gated input of channel ch at position q, the step's token q - pos or a cached row.
fn gated(q: u32, ch: u32) -> f32 {
    if (q >= step.pos) {
        let row = (q - step.pos) * 3u * params.dim;
        return bcx[row + ch] * bcx[row + 2u * params.dim + ch];
    }
    return cache[q * params.dim + ch];
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let ch = gid.x;
    let b = gid.y;
    if (ch >= params.dim || b >= step.n_tokens) {
        return;
    }
    let p = step.pos + b;
    var acc = 0.0;
    for (var j = 0u; j < params.width; j = j + 1u) {
        // The position weight j reads, width - 1 - j back; none before position 0.
        if (p + j + 1u >= params.width) {
            acc = acc + kernel[ch * params.width + j] * gated(p + j + 1u - params.width, ch);
        }
    }
    cache[p * params.dim + ch] = gated(p, ch);
    out[b * params.dim + ch] = bcx[b * 3u * params.dim + params.dim + ch] * acc;
}

// attention_combine.wgsl: split-K decode attention, part 2 of 2. Merges the per-chunk softmax
// statistics of attention_partial.wgsl for query head h (the online-softmax rescaling):
//   M = max_c m_c,  out[d] = sum_c exp(m_c - M) o_c[d] / sum_c exp(m_c - M) l_c.
// Empty chunks (m = -3e38, l = 0) weigh exp(-huge) = 0; chunk 0 is never empty.
// Bindings (group 0): 0 uniform Params {n_heads, n_kv_heads, head_dim, n_chunks};
//   1 parts: array<f32> [n_heads, n_chunks, 2 + head_dim] (read);
//   2 out: array<f32> [n_heads * head_dim] (read_write).
// Dispatch: (n_heads, 1, 1) workgroups of WG threads (override); thread t owns output
// dimensions d = t, t + WG, ... and walks the chunks itself (no barriers).

override WG: u32 = 64u;

struct Params {
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    n_chunks: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> parts: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let h = wg.x;
    let hd = params.head_dim;
    if (h >= params.n_heads) {
        return;
    }
    let base = h * params.n_chunks * (2u + hd);
    var m = parts[base];
    for (var c = 1u; c < params.n_chunks; c = c + 1u) {
        m = max(m, parts[base + c * (2u + hd)]);
    }
    for (var d = lid.x; d < hd; d = d + WG) {
        var num = 0.0;
        var den = 0.0;
        for (var c = 0u; c < params.n_chunks; c = c + 1u) {
            let at = base + c * (2u + hd);
            let w = exp(parts[at] - m);
            den = den + w * parts[at + 1u];
            num = num + w * parts[at + 2u + d];
        }
        out[h * hd + d] = num / den;
    }
}

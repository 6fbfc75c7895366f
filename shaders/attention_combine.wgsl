// attention_combine.wgsl: split-K causal attention, part 2 of 2. Merges the per-chunk softmax
// statistics of attention_partial.wgsl for query head h of token b (the online-softmax rescaling):
//   M = max_c m_c,  out[d] = sum_c exp(m_c - M) o_c[d] / sum_c exp(m_c - M) l_c.
// Token b (position p = step.pos + b) reads its chunks 0..=p / CHUNK, the ones part 1 wrote.
// Bindings (group 0): 0 uniform Params {n_heads, n_kv_heads, head_dim, n_chunks};
//   1 parts: array<f32> [n_tokens, n_heads, n_chunks, 2 + head_dim] (read);
//   2 out: array<f32> [n_tokens, n_heads * head_dim] (read_write); 3 uniform Step {pos, n_tokens}.
// Dispatch: (n_heads, n_tokens, 1) workgroups of WG threads (override); thread t owns output
// dimensions d = t, t + WG, ... and walks the chunks itself (no barriers).

override WG: u32 = 64u;

#include attention_params.wgsl

#include step.wgsl

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> parts: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> step: Step;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let h = wg.x;
    let b = wg.y;
    let hd = params.head_dim;
    if (h >= params.n_heads || b >= step.n_tokens) {
        return;
    }
    let base = (b * params.n_heads + h) * params.n_chunks * (2u + hd);
    let used = min((step.pos + b) / CHUNK + 1u, params.n_chunks);
    var m = parts[base];
    for (var c = 1u; c < used; c = c + 1u) {
        m = max(m, parts[base + c * (2u + hd)]);
    }
    for (var d = lid.x; d < hd; d = d + WG) {
        var num = 0.0;
        var den = 0.0;
        for (var c = 0u; c < used; c = c + 1u) {
            let at = base + c * (2u + hd);
            let w = exp(parts[at] - m);
            den = den + w * parts[at + 1u];
            num = num + w * parts[at + 2u + d];
        }
        out[(b * params.n_heads + h) * hd + d] = num / den;
    }
}

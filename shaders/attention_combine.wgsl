// attention_combine.wgsl: split-K causal attention, part 2 of 2. Merges the per-chunk softmax
// statistics of attention_partial.wgsl for query head h of token b (attention_merge.wgsl;
// a decode step of a model whose attention fits ATT_MAX merges them in the output
// projection's COMBINE prologue instead).
// Token b (position p = step.pos + b) reads its chunks 0..=p / SPLIT, the ones part 1 wrote.
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

#include attention_merge.wgsl

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let h = wg.x;
    let b = wg.y;
    let hd = params.head_dim;
    if (h >= params.n_heads || b >= step.n_tokens) {
        return;
    }
    let base = (b * params.n_heads + h) * params.n_chunks * (2u + hd);
    let used = min((step.pos + b) / SPLIT + 1u, params.n_chunks);
    for (var d = lid.x; d < hd; d = d + WG) {
        out[(b * params.n_heads + h) * hd + d] = merge_chunks(base, used, hd, d);
    }
}

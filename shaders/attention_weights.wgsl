// attention_weights.wgsl: the attention weights of the step's last token, kept when a decode
// step is asked to show its inside (the page's Attention panel, `generate --inspect`). Run
// once per layer, after the layer's RoPE/KV write, in a step of its own; an ordinary step
// never runs it. Query head h of the token at position p = step.pos + step.n_tokens - 1,
// against every position 0..=p of its KV head h / (n_heads / n_kv_heads), or in a
// sliding-window layer (params.window > 0) the last `window` of them, the weights before
// them 0:
//   w_j = exp(s_j - m) / sum_i exp(s_i - m),  s_j = capped(score_scale q.k_j, softcap) - slope_h (p - j),
//   m = max_j s_j, the scores attention_head.wgsl computes (softcap.wgsl; params.softcap 0: none), in three strided sweeps over the head's row of
// `out` (no CHUNK limit: the row lives in the output, not in workgroup memory).
// Bindings (group 0): 0 uniform Params {n_heads, n_kv_heads, head_dim, n_chunks (unused), window,
//   softcap, score_scale (1 / sqrt(head_dim), or Granite's attention scale), alibi_max_bias
//   (ALiBi's slopes, alibi.wgsl; 0: none)};
//   1 q: array<f32> [n_tokens, n_heads * head_dim] (read; the step's rotated queries);
//   2 k_cache: array<f32> [context, n_kv_heads * head_dim] (read, holding this step's rows;
//   KV_F16: array<u32> [context, kv / 2]); 3 out: array<f32> [layers, n_heads, p + 1]
//   (read_write; this layer's rows start at layer * n_heads * (p + 1)); 4 uniform Step
//   {pos, n_tokens}; 5 uniform Inspect {layer}.
// Dispatch: (n_heads, 1, 1) workgroups of WG threads (override); thread t owns positions
// t, t + WG, ... of its head's row and writes nothing else.
// KV_F16 (define): the half-float cache, as attention_partial.wgsl reads it.

override WG: u32 = 64u;

#include attention_params.wgsl

#include step.wgsl

#include inspect_params.wgsl

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
#ifdef KV_F16
@group(0) @binding(2) var<storage, read> k_cache: array<u32>;
#else
@group(0) @binding(2) var<storage, read> k_cache: array<f32>;
#endif
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<uniform> step: Step;
@group(0) @binding(5) var<uniform> inspect: Inspect;

var<workgroup> partial: array<f32, 256>;

#include softcap.wgsl

#include alibi.wgsl

#include cache_keys.wgsl

#include workgroup_reduce.wgsl

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let h = wg.x;
    if (h >= params.n_heads || step.n_tokens == 0u) {
        return;
    }
    let t = lid.x;
    let hd = params.head_dim;
    let n = step.pos + step.n_tokens; // positions 0..=p
    let q_off = ((step.n_tokens - 1u) * params.n_heads + h) * hd;
    let stride = params.n_kv_heads * hd;
    let kv_off = (h / (params.n_heads / params.n_kv_heads)) * hd;
    let row = (inspect.layer * params.n_heads + h) * n;
    let scale = params.score_scale;
    let slope = alibi_slope(h, params.n_heads, params.alibi_m0, params.alibi_m1);
    var first = 0u;
    if (params.window > 0u && n > params.window) {
        first = n - params.window;
    }
    var local_max = EMPTY;
    for (var j = t; j < n; j = j + WG) {
        if (j < first) {
            out[row + j] = 0.0;
            continue;
        }
        let s = capped(key_score(q_off, j * stride + kv_off, hd) * scale, params.softcap) + alibi_bias(slope, n - 1u - j);
        out[row + j] = s;
        local_max = max(local_max, s);
    }
    let m = reduce(local_max, t, true);
    var local_sum = 0.0;
    for (var j = t; j < n; j = j + WG) {
        if (j < first) {
            continue;
        }
        let e = exp(out[row + j] - m);
        out[row + j] = e;
        local_sum = local_sum + e;
    }
    let l = reduce(local_sum, t, false);
    for (var j = t; j < n; j = j + WG) {
        if (j >= first) {
            out[row + j] = out[row + j] / l;
        }
    }
}

// attention_partial.wgsl: split-K causal attention, part 1 of 2. Token b of the step sits at
// position p = step.pos + b and attends to positions f..=p, f = 0, or in a sliding-window
// layer (params.window > 0) f = max(0, p + 1 - window). Workgroup (h, c, b) scores query
// head h of token b against positions [max(c * SPLIT, f), min((c + 1) * SPLIT, p + 1)) of its KV head
// (grouped-query: query head h reads KV head h / (n_heads / n_kv_heads)) and writes that
// chunk's softmax statistics, so long caches keep every workgroup busy:
//   m = max_j s_j,  l = sum_j exp(s_j - m),  o[d] = sum_j exp(s_j - m) v_j[d],
//   s_j = capped(score_scale q.k_j, softcap) - slope_h (p - j) (softcap.wgsl; params.softcap
//   0: uncapped; params.score_scale 1 / sqrt(hd), or Granite's attention scale; slope_h
//   ALiBi's, alibi.wgsl, from params.alibi_max_bias, 0: none).
// attention_combine.wgsl merges the chunks (the online-softmax rescaling). Prefill runs
// every prompt token of the step at once; decode the one-token case (matrix.wgsl's ATTENTION
// prologue instead while the context fits one chunk). The per-head work is
// attention_run.wgsl's.
// Bindings (group 0): 0 uniform Params {n_heads, n_kv_heads, head_dim, n_chunks, window, softcap,
//   score_scale, alibi_max_bias};
//   1 q: array<f32> [n_tokens, n_heads * head_dim] (read); 2 k_cache, 3 v_cache: array<f32>
//   [context, n_kv_heads * head_dim] (read, already holding this step's rows);
//   4 parts: array<f32> [n_tokens, n_heads, n_chunks, 2 + head_dim] (read_write; per chunk
//   m, l, o[0..head_dim]); 5 uniform Step {pos, n_tokens}.
// Dispatch: (n_heads, n_chunks, n_tokens) workgroups of WG threads (override; the host's
// ATTENTION_WORKGROUP, 256: when scoring, a thread per position, or several sharing one where
// the run has fewer positions than threads (attention_head.wgsl), and 4 WG / head_dim
// slices of the run's positions at once when weighing the values, 4 dimensions a thread;
// head_dim a multiple of 4). n_chunks =
// ceil(capacity / SPLIT) is fixed at load (the parts' layout); the host dispatches only the
// chunks the step's last token reaches (at most n_chunks), so no workgroup starts only to
// return (a browser zero-fills each one's workgroup memory first). A chunk past a token's own
// position p returns at once and writes nothing (the combine reads only chunks 0..=p / SPLIT);
// a chunk wholly before the window's first position f writes empty statistics (m = EMPTY,
// l = 0, o = 0), which the merge weighs by exp(EMPTY - M) = 0.
// SINGLE (define): the whole attention in one dispatch while every token of the step sees
// at most CHUNK positions (the host picks it then: step.pos + n_tokens <= CHUNK): one chunk,
// and binding 4 is out: array<f32> [n_tokens, n_heads * head_dim] (read_write), written
// o[d] / l. Dispatch (n_heads, 1, n_tokens).
// KV_F16 (define): k_cache and v_cache are array<u32> [context, kv / 2], two halves per word
//   (rope_kv.wgsl's KV_F16 layout, widened with unpack2x16float: no shader-f16 needed).
// SUBGROUP (define; the adapter's subgroups feature): the max and the sum over the workgroup
//   reduce in each subgroup first (subgroupMax, subgroupAdd), then across the subgroups'
//   results in workgroup memory: one barrier each instead of a tree of log2(WG).

#include enable_subgroups.wgsl

override WG: u32 = 64u;

#include attention_params.wgsl

#include step.wgsl

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
#ifdef KV_F16
@group(0) @binding(2) var<storage, read> k_cache: array<u32>;
@group(0) @binding(3) var<storage, read> v_cache: array<u32>;
#else
@group(0) @binding(2) var<storage, read> k_cache: array<f32>;
@group(0) @binding(3) var<storage, read> v_cache: array<f32>;
#endif
#ifdef SINGLE
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
#else
@group(0) @binding(4) var<storage, read_write> parts: array<f32>;
#endif
@group(0) @binding(5) var<uniform> step: Step;

var<workgroup> scores: array<f32, CHUNK>;
var<workgroup> partial: array<f32, 256>;
// Each thread's 4 value sums, for adding up the slices.
var<workgroup> wide: array<vec4<f32>, 256>;

#include workgroup_reduce.wgsl

#include softcap.wgsl

#include alibi.wgsl

#include attention_head.wgsl

#include attention_run.wgsl

@compute @workgroup_size(WG)
#ifdef SUBGROUP
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32, @builtin(num_subgroups) n_sg: u32) {
    sg_id = sg;
    sg_lane = lane;
    sg_count = n_sg;
#else
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
#endif
    let h = wg.x;
    let c = wg.y;
    let b = wg.z;
    let t = lid.x;
    let hd = params.head_dim;
    let at = ((b * params.n_heads + h) * params.n_chunks + c) * (2u + hd);
#ifdef SINGLE
    let len = CHUNK;
#else
    let len = SPLIT;
#endif
    let n_pos = step.pos + b + 1u;
    if (h >= params.n_heads || c >= params.n_chunks || b >= step.n_tokens) {
        return;
    }
    if (c * len >= n_pos) {
        return;
    }
    // The window's first position (0 without one), and this chunk's part of it.
    var first = 0u;
    if (params.window > 0u && n_pos > params.window) {
        first = n_pos - params.window;
    }
    let start = max(c * len, first);
    let end = min((c + 1u) * len, n_pos);
#ifndef SINGLE
    if (start >= end) {
        for (var d = t; d < hd; d = d + WG) {
            parts[at + 2u + d] = 0.0;
        }
        if (t == 0u) {
            parts[at] = EMPTY;
            parts[at + 1u] = 0.0;
        }
        return;
    }
#endif
    let n = end - start;
    let stride = params.n_kv_heads * hd;
    let kv_off = (h / (params.n_heads / params.n_kv_heads)) * hd;
    let q_off = (b * params.n_heads + h) * hd;
    out_q = q_off;
    out_at = at;
    let slope = alibi_slope(h, params.n_heads, params.alibi_m0, params.alibi_m1);
    let ml = head_run(q_off, kv_off, stride, start, n, t, params.softcap, slope, n_pos - 1u - start);
#ifndef SINGLE
    if (t == 0u) {
        parts[at] = ml.x;
        parts[at + 1u] = ml.y;
    }
#endif
}

// Where the workgroup's head writes: its queries' offset (SINGLE's output row has the same
// layout) and its chunk's statistics.
var<private> out_q: u32;
var<private> out_at: u32;

// Dimension `dim` of the head's result (head_run): o[dim] / l into `out` (SINGLE), or o[dim]
// into the chunk's statistics.
fn write_dim(dim: u32, acc: f32, l: f32) {
#ifdef SINGLE
    out[out_q + dim] = acc / l;
#else
    parts[out_at + 2u + dim] = acc;
#endif
}

// attention_partial.wgsl: split-K causal attention, part 1 of 2. Token b of the step sits at
// position p = step.pos + b and attends to positions 0..=p. Workgroup (h, c, b) scores query
// head h of token b against positions [c * CHUNK, min((c + 1) * CHUNK, p + 1)) of its KV head
// (grouped-query: query head h reads KV head h / (n_heads / n_kv_heads)) and writes that
// chunk's softmax statistics, so long caches keep every workgroup busy:
//   m = max_j s_j,  l = sum_j exp(s_j - m),  o[d] = sum_j exp(s_j - m) v_j[d],  s_j = q.k_j / sqrt(hd).
// attention_combine.wgsl merges the chunks (the online-softmax rescaling). Decode is the
// one-token case; prefill runs every prompt token of the step at once.
// Bindings (group 0): 0 uniform Params {n_heads, n_kv_heads, head_dim, n_chunks};
//   1 q: array<f32> [n_tokens, n_heads * head_dim] (read); 2 keys, 3 values: array<f32>
//   [context, n_kv_heads * head_dim] (read, already holding this step's rows);
//   4 parts: array<f32> [n_tokens, n_heads, n_chunks, 2 + head_dim] (read_write; per chunk
//   m, l, o[0..head_dim]); 5 uniform Step {pos, n_tokens}.
// Dispatch: (n_heads, n_chunks, n_tokens) workgroups of WG threads (override). n_chunks =
// ceil(capacity / CHUNK) is fixed at load; a chunk past p returns at once and writes nothing
// (the combine reads only chunks 0..=p / CHUNK).
// SINGLE (define): the whole attention in one dispatch while every token of the step sees
// at most CHUNK positions (the host picks it then: step.pos + n_tokens <= CHUNK): one chunk,
// and binding 4 is out: array<f32> [n_tokens, n_heads * head_dim] (read_write), written
// o[d] / l. Dispatch (n_heads, 1, n_tokens).
// KV_F16 (define): keys and values are array<u32> [context, kv / 2], two halves per word
//   (rope_kv.wgsl's KV_F16 layout, widened with unpack2x16float: no shader-f16 needed).
// SUBGROUP (define; the adapter's subgroups feature): the max and the sum over the workgroup
//   reduce in each subgroup first (subgroupMax, subgroupAdd), then across the subgroups'
//   results in workgroup memory: one barrier each instead of a tree of log2(WG).

#include enable_subgroups.wgsl

override WG: u32 = 64u;
const EMPTY: f32 = -3.0e38; // below any real score; Tint rejects literals at the f32 limit

#include attention_params.wgsl

#include step.wgsl

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
#ifdef KV_F16
@group(0) @binding(2) var<storage, read> keys: array<u32>;
@group(0) @binding(3) var<storage, read> values: array<u32>;
#else
@group(0) @binding(2) var<storage, read> keys: array<f32>;
@group(0) @binding(3) var<storage, read> values: array<f32>;
#endif
#ifdef SINGLE
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
#else
@group(0) @binding(4) var<storage, read_write> parts: array<f32>;
#endif
@group(0) @binding(5) var<uniform> step: Step;

var<workgroup> scores: array<f32, CHUNK>;
var<workgroup> partial: array<f32, 256>;

// Keys i and i + 1 of the cache (i even: a head's dimensions come in pairs).
fn key_pair(i: u32) -> vec2<f32> {
#ifdef KV_F16
    return unpack2x16float(keys[i / 2u]);
#else
    return vec2<f32>(keys[i], keys[i + 1u]);
#endif
}

// Value i of the cache.
fn value(i: u32) -> f32 {
#ifdef KV_F16
    return unpack2x16float(values[i / 2u])[i % 2u];
#else
    return values[i];
#endif
}

#ifdef SUBGROUP
// Which subgroup the thread is in, its lane, and how many subgroups the workgroup has.
var<private> sg_id: u32;
var<private> sg_lane: u32;
var<private> sg_count: u32;

// max (is_max) or sum of v over the workgroup, for every thread. Called by all threads
// (barriers).
fn reduce(v: f32, t: u32, is_max: bool) -> f32 {
    var r = select(subgroupAdd(v), subgroupMax(v), is_max);
    if (sg_lane == 0u) {
        partial[sg_id] = r;
    }
    workgroupBarrier();
    r = partial[0];
    for (var i = 1u; i < sg_count; i = i + 1u) {
        r = select(r + partial[i], max(r, partial[i]), is_max);
    }
    workgroupBarrier();
    return r;
}
#else
// max (is_max) or sum of v over the workgroup, for every thread: a tree in workgroup
// memory. Called by all threads (barriers).
fn reduce(v: f32, t: u32, is_max: bool) -> f32 {
    partial[t] = v;
    workgroupBarrier();
    for (var r = WG / 2u; r > 0u; r = r / 2u) {
        if (t < r) {
            partial[t] = select(partial[t] + partial[t + r], max(partial[t], partial[t + r]), is_max);
        }
        workgroupBarrier();
    }
    let total = partial[0];
    workgroupBarrier();
    return total;
}
#endif

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
    let start = c * CHUNK;
    let n_pos = step.pos + b + 1u;
    if (h >= params.n_heads || c >= params.n_chunks || b >= step.n_tokens) {
        return;
    }
    if (start >= n_pos) {
        return;
    }
    let n = min(CHUNK, n_pos - start);
    let stride = params.n_kv_heads * hd;
    let kv_off = (h / (params.n_heads / params.n_kv_heads)) * hd;
    let q_off = (b * params.n_heads + h) * hd;
    let scale = inverseSqrt(f32(hd));

    var local_max = EMPTY;
    for (var j = t; j < n; j = j + WG) {
        let row = (start + j) * stride + kv_off;
        var s = 0.0;
        for (var d = 0u; d < hd; d = d + 2u) {
            let k = key_pair(row + d);
            s = s + q[q_off + d] * k.x + q[q_off + d + 1u] * k.y;
        }
        s = s * scale;
        scores[j] = s;
        local_max = max(local_max, s);
    }
    let m = reduce(local_max, t, true);

    var local_sum = 0.0;
    for (var j = t; j < n; j = j + WG) {
        let e = exp(scores[j] - m);
        scores[j] = e;
        local_sum = local_sum + e;
    }
    let l = reduce(local_sum, t, false);
#ifndef SINGLE
    if (t == 0u) {
        parts[at] = m;
        parts[at + 1u] = l;
    }
#endif
    for (var d = t; d < hd; d = d + WG) {
        var acc = 0.0;
        for (var j = 0u; j < n; j = j + 1u) {
            acc = acc + scores[j] * value((start + j) * stride + kv_off + d);
        }
#ifdef SINGLE
        out[q_off + d] = acc / l;
#else
        parts[at + 2u + d] = acc;
#endif
    }
}

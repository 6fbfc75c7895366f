// attention_head.wgsl: one query head's attention over a run of cached positions, by one
// workgroup; included by attention_partial.wgsl (a head and chunk per workgroup) and by
// matrix.wgsl's ATTENTION prologue (every head, one after another, in each workgroup of the
// output projection). For query q (head_dim values) and positions start .. start + n of its
// KV head (n <= CHUNK):
//   head_softmax leaves w_j = exp(s_j - m) in `scores` and returns (m, l), with
//     s_j = q.k_j / sqrt(head_dim), m = max_j s_j, l = sum_j w_j;
//   head_value(d) = sum_j w_j v_j[d] (divide by l for the attention output).
// The includer declares: WG (override), CHUNK (constants.wgsl), `q: array<f32>` (the
// queries), `k_cache`, `v_cache` (array<f32> [context, kv], or with KV_F16
// array<u32> [context, kv / 2], two halves per word as rope_kv.wgsl writes them),
// `scores: array<f32, CHUNK>` and `partial: array<f32, 256>` in workgroup memory, and with
// SUBGROUP sets sg_id, sg_lane and sg_count before the first call. Every thread of the
// workgroup calls both functions (barriers); a caller reusing `scores` for the next head
// puts a workgroupBarrier between.

const EMPTY: f32 = -3.0e38; // below any real score; Tint rejects literals at the f32 limit

// Keys i and i + 1 of the cache (i even: a head's dimensions come in pairs).
fn key_pair(i: u32) -> vec2<f32> {
#ifdef KV_F16
    return unpack2x16float(k_cache[i / 2u]);
#else
    return vec2<f32>(k_cache[i], k_cache[i + 1u]);
#endif
}

// Value i of the cache.
fn value(i: u32) -> f32 {
#ifdef KV_F16
    return unpack2x16float(v_cache[i / 2u])[i % 2u];
#else
    return v_cache[i];
#endif
}

#ifdef SUBGROUP
// Which subgroup the thread is in, its lane, and how many subgroups the workgroup has.
var<private> sg_id: u32;
var<private> sg_lane: u32;
var<private> sg_count: u32;

// max (is_max) or sum of v over the workgroup, for every thread: in each subgroup first
// (subgroupMax, subgroupAdd), then across the subgroups' results in workgroup memory.
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
// max (is_max) or sum of v over the workgroup, for every thread: a tree in workgroup memory.
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

// Scores of the query at q[q_off ..] against positions start .. start + n (n <= CHUNK) of
// the KV head at column kv_off of cache rows `stride` wide; leaves exp(s_j - m) in
// scores[j] and returns (m, l). Thread t takes positions t, t + WG, ...
fn head_softmax(q_off: u32, kv_off: u32, stride: u32, start: u32, n: u32, t: u32) -> vec2<f32> {
    let hd = params.head_dim;
    let scale = inverseSqrt(f32(hd));
    var local_max = EMPTY;
    for (var j = t; j < n; j = j + WG) {
        let row = (start + j) * stride + kv_off;
        var s = 0.0;
        for (var dim = 0u; dim < hd; dim = dim + 2u) {
            let k = key_pair(row + dim);
            s = s + q[q_off + dim] * k.x + q[q_off + dim + 1u] * k.y;
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
    // reduce ends on a barrier: every thread then sees every score.
    let l = reduce(local_sum, t, false);
    return vec2<f32>(m, l);
}

// sum_j scores[j] v_j[dim] over the positions head_softmax scored.
fn head_value(dim: u32, kv_off: u32, stride: u32, start: u32, n: u32) -> f32 {
    var acc = 0.0;
    for (var j = 0u; j < n; j = j + 1u) {
        acc = acc + scores[j] * value((start + j) * stride + kv_off + dim);
    }
    return acc;
}

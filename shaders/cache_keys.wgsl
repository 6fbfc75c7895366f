// cache_keys.wgsl: a query against one cached key, for the kernels that score queries
// against the KV cache (attention_head.wgsl, attention_weights.wgsl). The includer declares
// `q: array<f32>` (the queries) and `k_cache`: array<f32> [context, kv], or with KV_F16
// array<u32> [context, kv / 2], two halves per word as rope_kv.wgsl writes them.

// Keys i and i + 1 of the cache (i even: a head's dimensions come in pairs).
fn key_pair(i: u32) -> vec2<f32> {
#ifdef KV_F16
    return unpack2x16float(k_cache[i / 2u]);
#else
    return vec2<f32>(k_cache[i], k_cache[i + 1u]);
#endif
}

// q[at] k.x + q[at + 1] k.y.
fn pair_dot(at: u32, k: vec2<f32>) -> f32 {
    return q[at] * k.x + q[at + 1u] * k.y;
}

// q[q_off .. q_off + hd] . k_cache[row .. row + hd] (hd even), before the 1 / sqrt(hd) scale.
// Sixteen dimensions an iteration, their eight key loads issued before the first is used,
// into two sums: a loop of one pair at a time waited out each load's latency in turn (on an
// H100 the fused attention took 189 us a layer for 5 positions that way).
fn key_score(q_off: u32, row: u32, hd: u32) -> f32 {
    var s0 = 0.0;
    var s1 = 0.0;
    var dim = 0u;
    for (; dim + 16u <= hd; dim = dim + 16u) {
        let r = row + dim;
        let k0 = key_pair(r);
        let k1 = key_pair(r + 2u);
        let k2 = key_pair(r + 4u);
        let k3 = key_pair(r + 6u);
        let k4 = key_pair(r + 8u);
        let k5 = key_pair(r + 10u);
        let k6 = key_pair(r + 12u);
        let k7 = key_pair(r + 14u);
        s0 = s0 + pair_dot(q_off + dim, k0) + pair_dot(q_off + dim + 4u, k2) + pair_dot(q_off + dim + 8u, k4) + pair_dot(q_off + dim + 12u, k6);
        s1 = s1 + pair_dot(q_off + dim + 2u, k1) + pair_dot(q_off + dim + 6u, k3) + pair_dot(q_off + dim + 10u, k5) + pair_dot(q_off + dim + 14u, k7);
    }
    for (; dim < hd; dim = dim + 2u) {
        s0 = s0 + pair_dot(q_off + dim, key_pair(row + dim));
    }
    return s0 + s1;
}

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

// q[q_off .. q_off + hd] . k_cache[row .. row + hd] (hd even), before the 1 / sqrt(hd) scale.
// Eight dimensions an iteration, their four key loads issued before the first is used, into
// two sums: a loop of one pair at a time waited out each load's latency in turn (on an H100
// the fused attention took 189 us a layer for 5 positions that way).
fn key_score(q_off: u32, row: u32, hd: u32) -> f32 {
    var s0 = 0.0;
    var s1 = 0.0;
    var dim = 0u;
    for (; dim + 8u <= hd; dim = dim + 8u) {
        let k0 = key_pair(row + dim);
        let k1 = key_pair(row + dim + 2u);
        let k2 = key_pair(row + dim + 4u);
        let k3 = key_pair(row + dim + 6u);
        let at = q_off + dim;
        s0 = s0 + q[at] * k0.x + q[at + 1u] * k0.y + q[at + 4u] * k2.x + q[at + 5u] * k2.y;
        s1 = s1 + q[at + 2u] * k1.x + q[at + 3u] * k1.y + q[at + 6u] * k3.x + q[at + 7u] * k3.y;
    }
    for (; dim < hd; dim = dim + 2u) {
        let k = key_pair(row + dim);
        s0 = s0 + q[q_off + dim] * k.x + q[q_off + dim + 1u] * k.y;
    }
    return s0 + s1;
}

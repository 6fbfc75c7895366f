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
fn key_score(q_off: u32, row: u32, hd: u32) -> f32 {
    return key_share(q_off, row, hd, 0u, 1u);
}

// Share `share` of `shares` of that dot product: the dimension pairs share, share + shares,
// ..., so threads sharing a key read adjacent words of it (a key in whole 32-byte pieces
// when 4 share it). Eight pairs an iteration, their loads issued before the first is used,
// into two sums: a loop of one pair at a time waited out each load's latency in turn (on an
// H100 the fused attention took 189 us a layer for 5 positions that way).
fn key_share(q_off: u32, row: u32, hd: u32, share: u32, shares: u32) -> f32 {
    let step = 2u * shares;
    var s0 = 0.0;
    var s1 = 0.0;
    var dim = 2u * share;
    for (; dim + 7u * step < hd; dim = dim + 8u * step) {
        let r = row + dim;
        let k0 = key_pair(r);
        let k1 = key_pair(r + step);
        let k2 = key_pair(r + 2u * step);
        let k3 = key_pair(r + 3u * step);
        let k4 = key_pair(r + 4u * step);
        let k5 = key_pair(r + 5u * step);
        let k6 = key_pair(r + 6u * step);
        let k7 = key_pair(r + 7u * step);
        let d = q_off + dim;
        s0 = s0 + pair_dot(d, k0) + pair_dot(d + 2u * step, k2) + pair_dot(d + 4u * step, k4) + pair_dot(d + 6u * step, k6);
        s1 = s1 + pair_dot(d + step, k1) + pair_dot(d + 3u * step, k3) + pair_dot(d + 5u * step, k5) + pair_dot(d + 7u * step, k7);
    }
    for (; dim < hd; dim = dim + step) {
        s0 = s0 + pair_dot(q_off + dim, key_pair(row + dim));
    }
    return s0 + s1;
}

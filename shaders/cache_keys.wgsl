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
fn key_score(q_off: u32, row: u32, hd: u32) -> f32 {
    var s = 0.0;
    for (var dim = 0u; dim < hd; dim = dim + 2u) {
        let k = key_pair(row + dim);
        s = s + q[q_off + dim] * k.x + q[q_off + dim + 1u] * k.y;
    }
    return s;
}

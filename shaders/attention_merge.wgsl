// attention_merge.wgsl: split-K attention's chunks merged (the online-softmax rescaling), for
// attention_combine.wgsl (a dispatch of its own) and matrix.wgsl's COMBINE prologue (the
// output projection's input row). The includer declares `parts: array<f32>`, the chunk
// statistics attention_partial.wgsl writes: per chunk m, l, o[0..head_dim].

// Statistic `at` (0: m, 1: l, 2 + d: o[d]) of chunk c, where chunk `last` stands in for the
// chunks past it (the loads stay in bounds; the caller gives those chunks no weight).
fn chunk_stat(base: u32, c: u32, last: u32, hd: u32, at: u32) -> f32 {
    return parts[base + min(c, last) * (2u + hd) + at];
}

// Dimension d of one head's attention output from its first `used` chunks (at least one),
// the first at parts[base] and each 2 + hd floats on:
//   M = max_c m_c,  out[d] = sum_c exp(m_c - M) o_c[d] / sum_c exp(m_c - M) l_c.
// Four chunks an iteration, all their loads issued before the first is used: a chunk at a
// time waited out each load in turn, and a long context has many (32 at 2048 positions in
// chunks of 64).
fn merge_chunks(base: u32, used: u32, hd: u32, d: u32) -> f32 {
    let last = used - 1u;
    var m = parts[base];
    for (var c = 0u; c < used; c = c + 4u) {
        let m0 = chunk_stat(base, c, last, hd, 0u);
        let m1 = chunk_stat(base, c + 1u, last, hd, 0u);
        let m2 = chunk_stat(base, c + 2u, last, hd, 0u);
        let m3 = chunk_stat(base, c + 3u, last, hd, 0u);
        m = max(m, max(max(m0, m1), max(m2, m3)));
    }
    var num = 0.0;
    var den = 0.0;
    for (var c = 0u; c < used; c = c + 4u) {
        let m0 = chunk_stat(base, c, last, hd, 0u);
        let m1 = chunk_stat(base, c + 1u, last, hd, 0u);
        let m2 = chunk_stat(base, c + 2u, last, hd, 0u);
        let m3 = chunk_stat(base, c + 3u, last, hd, 0u);
        let l = vec4<f32>(chunk_stat(base, c, last, hd, 1u), chunk_stat(base, c + 1u, last, hd, 1u),
            chunk_stat(base, c + 2u, last, hd, 1u), chunk_stat(base, c + 3u, last, hd, 1u));
        let o = vec4<f32>(chunk_stat(base, c, last, hd, 2u + d), chunk_stat(base, c + 1u, last, hd, 2u + d),
            chunk_stat(base, c + 2u, last, hd, 2u + d), chunk_stat(base, c + 3u, last, hd, 2u + d));
        let live = vec4<u32>(c, c + 1u, c + 2u, c + 3u) < vec4<u32>(used);
        let w = select(vec4<f32>(0.0), exp(vec4<f32>(m0, m1, m2, m3) - m), live);
        den = den + dot(w, l);
        num = num + dot(w, o);
    }
    return num / den;
}

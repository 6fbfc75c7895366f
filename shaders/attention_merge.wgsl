// attention_merge.wgsl: split-K attention's chunks merged (the online-softmax rescaling), for
// attention_combine.wgsl (a dispatch of its own) and matrix.wgsl's COMBINE prologue (the
// output projection's input row). The includer declares `parts: array<f32>`, the chunk
// statistics attention_partial.wgsl writes: per chunk m, l, o[0..head_dim].

// Dimension d of one head's attention output from its first `used` chunks, the first at
// parts[base] and each 2 + hd floats on:
//   M = max_c m_c,  out[d] = sum_c exp(m_c - M) o_c[d] / sum_c exp(m_c - M) l_c.
fn merge_chunks(base: u32, used: u32, hd: u32, d: u32) -> f32 {
    var m = parts[base];
    for (var c = 1u; c < used; c = c + 1u) {
        m = max(m, parts[base + c * (2u + hd)]);
    }
    var num = 0.0;
    var den = 0.0;
    for (var c = 0u; c < used; c = c + 1u) {
        let at = base + c * (2u + hd);
        let w = exp(parts[at] - m);
        den = den + w * parts[at + 1u];
        num = num + w * parts[at + 2u + d];
    }
    return num / den;
}

// alibi.wgsl: ALiBi's bias on attention scores (BLOOM's; src/model/alibi.rs is the CPU's
// twin, bit for bit). Each scaled (and capped) score of query head h at position p against
// position j gains alibi_bias(slope, p - j) = -slope * (p - j), the slopes a geometric series
// over the heads: with n the largest power of two up to n_heads, head h < n takes m0^(h + 1)
// and the rest m1^(2 (h - n) + 1), the bases m0 = 2^(-max_bias / n) and m1 = 2^(-max_bias / 2n)
// computed by the host (alibi_bases) and raised here by the same multiplications as the CPU's
// (alibi.rs's power). m0 0 (every other model) gives slope 0, whose bias leaves each score as
// it is. No bindings; included beside softcap.wgsl by attention_partial.wgsl,
// attention_weights.wgsl and matrix.wgsl.

fn alibi_power(base: f32, k: u32) -> f32 {
    var result = 1.0;
    var square = base;
    var e = k;
    loop {
        if ((e & 1u) == 1u) {
            result = result * square;
        }
        e = e >> 1u;
        if (e == 0u) {
            break;
        }
        square = square * square;
    }
    return result;
}

fn alibi_slope(h: u32, n_heads: u32, m0: f32, m1: f32) -> f32 {
    if (m0 == 0.0) {
        return 0.0;
    }
    let n = 1u << firstLeadingBit(max(n_heads, 1u));
    if (h < n) {
        return alibi_power(m0, h + 1u);
    }
    return alibi_power(m1, 2u * (h - n) + 1u);
}

fn alibi_bias(slope: f32, distance: u32) -> f32 {
    return -slope * f32(distance);
}

// head_norm_rope.wgsl: matrix.wgsl's HEAD_NORM epilogue (MATVEC with ROPE_KV, NORM or not:
// the Q/K/V projection of a decode step for a model that RMS-norms each q and k head before
// RoPE, Qwen3's, Gemma 3's and EXAONE 4's). Each workgroup computes one head's head_dim rows
// of the token's [q (n_heads * hd) | k (kv) | v (kv)], kv = n_kv_heads * hd: workgroup g the
// rows g hd .. (g + 1) hd - 1, so (n_heads + 2 n_kv_heads, 1, 1) workgroups. The products
// (after the input's RMSNorm, with NORM) are kept in head_rows by matrix.wgsl's store(); then
// this file writes what rope_kv.wgsl's HEAD_NORM would from them: a q or k head is normed,
//   x' = x / sqrt(mean(x^2) + eps) * gain,
// (with params.norm_after_rope, Hunyuan's, the gain multiplies the turned pair instead: the
// head normed after RoPE, whose rotation keeps its mean square),
// gain being q's or k's per-dimension gain from matrix.wgsl's gain binding (q's, then k's:
// after its cols gains with NORM, [cols + 2 * hd], else alone, [2 * hd], as EXAONE 4 has no
// pre-norm) and eps params.eps (the input norm's, which the model's norms share), then turned
// by RoPE and stored (rope_pair.wgsl: the queries into y, the key into row step.pos of the K
// cache); a v head is stored as it is. Every thread sums the head's squares itself (hd reads
// of workgroup memory, no barrier), then takes every WG-th pair. The includer declares
// params, step, gain_at, the caches, the table, store_query and rope_and_store
// (rope_pair.wgsl), and the override HEAD_WIDTH (the host sets it to hd, at most its maximum;
// head_rows is that long).

// The workgroup's head's rows, as the products left them.
var<workgroup> head_rows: array<f32, HEAD_WIDTH>;
// The workgroup's first row: its head's.
var<private> head_first: u32;

// Row r of the matrix (one of the workgroup's head's) came to `product`.
fn keep_head_row(r: u32, product: f32) {
    head_rows[r - head_first] = product;
}

// The head's norm, RoPE and store. Called by all threads after the rows' products, behind a
// workgroup barrier.
fn head_norm_epilogue(t: u32) {
    let hd = params.head_dim;
    let qd = params.n_heads * hd;
    let kv = params.n_kv_heads * hd;
    // q and k heads are normed, v heads are not.
    let normed = head_first < qd + kv;
    var scale = 1.0;
    if (normed) {
        var squares = 0.0;
        for (var e = 0u; e < hd; e = e + 1u) {
            squares = squares + head_rows[e] * head_rows[e];
        }
        scale = inverseSqrt(squares / f32(hd) + params.eps);
    }
    // The head's gains: q's, or k's hd further on (after the input norm's).
#ifdef NORM
    let gains = params.cols + select(0u, hd, head_first >= qd);
#else
    let gains = select(0u, hd, head_first >= qd);
#endif
    for (var p = t; p < hd / 2u; p = p + WG) {
        var a = head_rows[2u * p];
        var b = head_rows[2u * p + 1u];
        var gain = vec2<f32>(1.0, 1.0);
        if (normed) {
            gain = vec2<f32>(gain_at(gains + 2u * p), gain_at(gains + 2u * p + 1u));
            if (params.norm_after_rope != 0u) {
                a = a * scale;
                b = b * scale;
            } else {
                a = a * scale * gain.x;
                b = b * scale * gain.y;
                gain = vec2<f32>(1.0, 1.0);
            }
        }
        rope_and_store_gained(head_first + 2u * p, 0u, step.pos, a, b, gain);
    }
}

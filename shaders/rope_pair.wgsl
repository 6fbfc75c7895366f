// rope_pair.wgsl: rotary position embedding (llama.cpp "NORM" mode: adjacent pairs) of one
// pair of a token's projected row [q (n_heads * hd) | k (kv) | v (kv)], and the KV-cache
// write; included by rope_kv.wgsl (a pair per thread) and by matrix.wgsl's ROPE_KV epilogue
// (the Q/K/V projection writing its row pairs this way, decode). Pair i of a head,
// (x[2i], x[2i+1]), turns by the angle of pair i at position p (src/model/rope.rs:
// p * base^(-2i / hd), scaled as the model asks; a split-half model's rows were made
// adjacent at load); the angles' cos/sin come precomputed from the CPU in f64 (f32 angles
// lose ~1e-3 rad at position 8192):
// table[(p * hd / 2 + i) * 2 + {0: cos, 1: sin}]. q pairs go to store_query, k pairs to
// k_cache row p, v pairs (unturned) to v_cache row p. Where params.clamp_kqv > 0 (OLMo 1.7's
// clamp) each value is first clamped to [-clamp_kqv, clamp_kqv]: the includer passes it
// after its bias, and no model with a clamp has head norms (src/model/config.rs).
// rope_and_store_gained multiplies the turned pair by a gain pair after RoPE: a head norm's
// gains where the model norms each head after RoPE (Hunyuan's; params.norm_after_rope, the
// includer scaling the pair by the head's 1 / rms before: RoPE keeps a head's sum of squares).
// The includer declares `params` with n_heads, n_kv_heads, head_dim and clamp_kqv; `table:
// array<f32>`; `k_cache`, `v_cache`: array<f32> [context, kv] (read_write), or with KV_F16
// array<u32> [context, kv / 2] holding each pair as two halves (pack2x16float: low half the
// even element), half the memory of f32, no shader-f16 needed; and
// `fn store_query(at: u32, a: f32, b: f32)` writing elements at, at + 1 of the queries.

// Writes elements at, at + 1 (at even) of the K cache (is_key) or the V cache.
fn store_pair(is_key: bool, at: u32, a: f32, b: f32) {
#ifdef KV_F16
    let word = pack2x16float(vec2<f32>(a, b));
    if (is_key) {
        k_cache[at / 2u] = word;
    } else {
        v_cache[at / 2u] = word;
    }
#else
    if (is_key) {
        k_cache[at] = a;
        k_cache[at + 1u] = b;
    } else {
        v_cache[at] = a;
        v_cache[at + 1u] = b;
    }
#endif
}

// Elements e, e + 1 (e even) of token `tok`'s row are (x, y), at KV-cache position `pos`.
fn rope_and_store(e: u32, tok: u32, pos: u32, x: f32, y: f32) {
    rope_and_store_gained(e, tok, pos, x, y, vec2<f32>(1.0, 1.0));
}

// rope_and_store, the turned q or k pair multiplied by `gain` (v pairs are not turned and
// take no gain).
fn rope_and_store_gained(e: u32, tok: u32, pos: u32, x: f32, y: f32, gain: vec2<f32>) {
    var a = x;
    var b = y;
    let limit = params.clamp_kqv;
    if (limit > 0.0) {
        a = clamp(a, -limit, limit);
        b = clamp(b, -limit, limit);
    }
    let hd = params.head_dim;
    let qd = params.n_heads * hd;
    let kv = params.n_kv_heads * hd;
    if (e >= qd + kv) {
        store_pair(false, pos * kv + (e - qd - kv), a, b);
        return;
    }
    let i = (e % hd) / 2u; // pair index within the head (qd is a whole number of heads)
    let t = (pos * (hd / 2u) + i) * 2u;
    let c = table[t];
    let s = table[t + 1u];
    let ra = (a * c - b * s) * gain.x;
    let rb = (a * s + b * c) * gain.y;
    if (e < qd) {
        store_query(tok * qd + e, ra, rb);
    } else {
        store_pair(true, pos * kv + (e - qd), ra, rb);
    }
}

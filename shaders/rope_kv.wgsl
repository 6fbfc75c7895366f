// rope_kv.wgsl: rotary position embedding of the step's queries and keys, and the KV cache
// write, for a prefill pass, and for a decode step whose Q/K/V projection cannot do it in
// its epilogue (matrix.wgsl's ROPE_KV, which adds QKV_BIAS too, and with its HEAD_NORM a
// head's norm) because the model has WHOLE_NORM, biases beside HEAD_NORM, or heads its
// epilogue does not fit, or KernelOptions::fold_head_norms is off. The
// fused Q/K/V projection leaves token b (position p = step.pos + b) as one row qkv[b] =
// [q (n_heads * hd) | k (kv) | v (kv)]; this kernel writes
//   q[b]            = rope(norm(q part + bias), p)  -> the attention's queries
//   k_cache[p]      = rope(norm(k part + bias), p)  -> the layer's K cache row
//   v_cache[p]      = v part + bias                 -> the layer's V cache row
// (each part first clamped to [-clamp_kqv, clamp_kqv] where the model clamps, OLMo 1.7's)
// (the rotation and the cache layouts: rope_pair.wgsl).
// Bindings (group 0): 0 uniform Params {n_heads, n_kv_heads, head_dim, eps, clamp_kqv,
//   norm_after_rope}; 1 qkv:
//   array<f32> [n_tokens, n_heads * hd + 2 * kv] (read); 2 q: array<f32> [n_tokens,
//   n_heads * hd] (read_write); 3 k_cache, 4 v_cache: array<f32> [context, kv] (read_write),
//   kv = n_kv_heads * hd; 5 table: array<f32> [context * hd] (read); 6 uniform Step {pos,
//   n_tokens}; 7 bias: array<f32> [n_heads * hd + 2 * kv] (QKV_BIAS only); 8 head_gain:
//   array<f32> [2 * hd], q's gain then k's (HEAD_NORM), or [n_heads * hd + kv] (WHOLE_NORM).
// Dispatch: (ceil((n_heads * hd + 2 * kv) / 2 / WG), n_tokens, 1) workgroups of WG threads
// (override); thread (j, b) handles pair j of row qkv[b]: a q pair, a k pair or two v values.
// WHOLE_NORM: (1, n_tokens, 1) workgroups, WG a power of two up to 256; workgroup b handles
// row qkv[b], each thread every WG-th pair.
// Defines: KV_F16: the caches are array<u32> [context, kv / 2] of half pairs. QKV_BIAS: the
//   bias is added to every element first (Qwen2). HEAD_NORM: each head of q and of k is
//   RMS-normed (x / sqrt(mean(x^2) + eps) * gain) before RoPE (Qwen3), or with
//   params.norm_after_rope after it (Hunyuan's: the pair scaled by 1 / rms, turned, then
//   multiplied by its gains, as RoPE keeps the head's mean square); each thread sums its
//   head's squares itself (hd reads), so no workgroup shape is imposed. WHOLE_NORM: all of q
//   and all of k are each RMS-normed as one row (OLMo 2), with a gain per element; the
//   workgroup sums the row's squares together first (workgroup_reduce.wgsl).

override WG: u32 = 64u;

#include rope_params.wgsl

#include step.wgsl

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;
@group(0) @binding(2) var<storage, read_write> q: array<f32>;
#ifdef KV_F16
@group(0) @binding(3) var<storage, read_write> k_cache: array<u32>;
@group(0) @binding(4) var<storage, read_write> v_cache: array<u32>;
#else
@group(0) @binding(3) var<storage, read_write> k_cache: array<f32>;
@group(0) @binding(4) var<storage, read_write> v_cache: array<f32>;
#endif
@group(0) @binding(5) var<storage, read> table: array<f32>;
@group(0) @binding(6) var<uniform> step: Step;
#ifdef QKV_BIAS
@group(0) @binding(7) var<storage, read> bias: array<f32>;
#endif
#ifdef HEAD_NORM
@group(0) @binding(8) var<storage, read> head_gain: array<f32>;
#endif
#ifdef WHOLE_NORM
@group(0) @binding(8) var<storage, read> head_gain: array<f32>;
var<workgroup> partial: array<f32, 256>;

#include workgroup_reduce.wgsl
#endif

fn store_query(at: u32, a: f32, b: f32) {
    q[at] = a;
    q[at + 1u] = b;
}

#include rope_pair.wgsl

// Element e of the row starting at `row`, with its bias where the model has one.
fn element(row: u32, e: u32) -> f32 {
#ifdef QKV_BIAS
    return qkv[row + e] + bias[e];
#else
    return qkv[row + e];
#endif
}

#ifdef WHOLE_NORM
@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let t = lid.x;
    let tok = wid.y;
    if (tok >= step.n_tokens) {
        return; // the whole workgroup: the barriers below stay uniform
    }
    let hd = params.head_dim;
    let qd = params.n_heads * hd;
    let kv = params.n_kv_heads * hd;
    let width = qd + 2u * kv;
    let row = tok * width;
    var q_squares = 0.0;
    for (var e = t; e < qd; e = e + WG) {
        let v = element(row, e);
        q_squares = q_squares + v * v;
    }
    var k_squares = 0.0;
    for (var e = qd + t; e < qd + kv; e = e + WG) {
        let v = element(row, e);
        k_squares = k_squares + v * v;
    }
    let q_inv_rms = inverseSqrt(reduce(q_squares, t, false) / f32(qd) + params.eps);
    let k_inv_rms = inverseSqrt(reduce(k_squares, t, false) / f32(kv) + params.eps);
    for (var j = t; 2u * j < width; j = j + WG) {
        let e = 2u * j;
        var a = element(row, e);
        var b = element(row, e + 1u);
        if (e < qd + kv) {
            // head_gain holds q's gains then k's, one per element of the row up to v.
            let inv_rms = select(k_inv_rms, q_inv_rms, e < qd);
            a = a * inv_rms * head_gain[e];
            b = b * inv_rms * head_gain[e + 1u];
        }
        rope_and_store(e, tok, step.pos + tok, a, b);
    }
}
#else
@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let width = (params.n_heads + 2u * params.n_kv_heads) * params.head_dim;
    let j = gid.x; // pair index within the row
    let tok = gid.y;
    if (2u * j >= width || tok >= step.n_tokens) {
        return;
    }
    let row = tok * width;
    let e = 2u * j;
    var a = element(row, e);
    var b = element(row, e + 1u);
#ifdef HEAD_NORM
    let hd = params.head_dim;
    let qd = params.n_heads * hd;
    if (e < qd + params.n_kv_heads * hd) {
        // A q or k pair: its head (q and kv are whole heads) normed with q's or k's gain.
        let head = e - e % hd;
        var squares = 0.0;
        for (var i = 0u; i < hd; i = i + 1u) {
            let v = element(row, head + i);
            squares = squares + v * v;
        }
        let inv_rms = inverseSqrt(squares / f32(hd) + params.eps);
        let at = select(hd, 0u, e < qd) + e % hd;
        let gain = vec2<f32>(head_gain[at], head_gain[at + 1u]);
        if (params.norm_after_rope != 0u) {
            // Hunyuan's norm after RoPE: the gains multiply the turned pair.
            rope_and_store_gained(e, tok, step.pos + tok, a * inv_rms, b * inv_rms, gain);
            return;
        }
        a = a * inv_rms * gain.x;
        b = b * inv_rms * gain.y;
    }
#endif
    rope_and_store(e, tok, step.pos + tok, a, b);
}
#endif

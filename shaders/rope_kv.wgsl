// rope_kv.wgsl: rotary position embedding (llama.cpp "NORM" mode: adjacent pairs) on the
// step's queries and keys, and the KV cache write. The fused Q/K/V projection leaves token b
// (position p = step.pos + b) as one row qkv[b] = [q (n_heads * hd) | k (kv) | v (kv)]; this
// kernel writes
//   q[b]            = rope(q part, p)        -> the attention's queries
//   k_cache[p]      = rope(k part, p)        -> the layer's K cache row
//   v_cache[p]      = v part                 -> the layer's V cache row
// Pair i of a head, (x[2i], x[2i+1]), turns by angle p * base^(-2i / hd). The angles' cos/sin
// come precomputed from the CPU in f64 (f32 angles lose ~1e-3 rad at position 8192):
// table[(p * hd / 2 + i) * 2 + {0: cos, 1: sin}].
// Bindings (group 0): 0 uniform Params {n_heads, n_kv_heads, head_dim}; 1 qkv: array<f32>
//   [n_tokens, n_heads * hd + 2 * kv] (read); 2 q: array<f32> [n_tokens, n_heads * hd]
//   (read_write); 3 k_cache, 4 v_cache: array<f32> [context, kv] (read_write), kv =
//   n_kv_heads * hd; 5 table: array<f32> [context * hd] (read); 6 uniform Step {pos, n_tokens}.
// Dispatch: (ceil((n_heads * hd + 2 * kv) / 2 / WG), n_tokens, 1) workgroups of WG threads
// (override); thread (j, b) handles pair j of row qkv[b]: a q pair, a k pair or two v values.
// KV_F16 (define): the caches are array<u32> [context, kv / 2] holding the pair as two halves
//   (pack2x16float: low half the even element), half the memory of f32; no shader-f16 needed.

override WG: u32 = 64u;

struct Params {
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    _pad: u32,
}

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

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let hd = params.head_dim;
    let qd = params.n_heads * hd;
    let kv = params.n_kv_heads * hd;
    let j = gid.x; // pair index within the row
    let tok = gid.y;
    if (2u * j >= qd + 2u * kv || tok >= step.n_tokens) {
        return;
    }
    let pos = step.pos + tok;
    let row = tok * (qd + 2u * kv);
    let a = qkv[row + 2u * j];
    let b = qkv[row + 2u * j + 1u];
    if (2u * j >= qd + kv) {
        store_pair(false, pos * kv + (2u * j - qd - kv), a, b);
        return;
    }
    let i = j % (hd / 2u); // pair index within the head
    let t = (pos * (hd / 2u) + i) * 2u;
    let c = table[t];
    let s = table[t + 1u];
    let ra = a * c - b * s;
    let rb = a * s + b * c;
    if (2u * j < qd) {
        let at = tok * qd + 2u * j;
        q[at] = ra;
        q[at + 1u] = rb;
    } else {
        store_pair(true, pos * kv + (2u * j - qd), ra, rb);
    }
}

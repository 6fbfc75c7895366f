// rope_kv.wgsl: rotary position embedding of the step's queries and keys, and the KV cache
// write, for a prefill pass (decode does the same in the Q/K/V projection's epilogue,
// matrix.wgsl's ROPE_KV). The fused Q/K/V projection leaves token b (position p = step.pos
// + b) as one row qkv[b] = [q (n_heads * hd) | k (kv) | v (kv)]; this kernel writes
//   q[b]            = rope(q part, p)        -> the attention's queries
//   k_cache[p]      = rope(k part, p)        -> the layer's K cache row
//   v_cache[p]      = v part                 -> the layer's V cache row
// (the rotation and the cache layouts: rope_pair.wgsl).
// Bindings (group 0): 0 uniform Params {n_heads, n_kv_heads, head_dim}; 1 qkv: array<f32>
//   [n_tokens, n_heads * hd + 2 * kv] (read); 2 q: array<f32> [n_tokens, n_heads * hd]
//   (read_write); 3 k_cache, 4 v_cache: array<f32> [context, kv] (read_write), kv =
//   n_kv_heads * hd; 5 table: array<f32> [context * hd] (read); 6 uniform Step {pos, n_tokens}.
// Dispatch: (ceil((n_heads * hd + 2 * kv) / 2 / WG), n_tokens, 1) workgroups of WG threads
// (override); thread (j, b) handles pair j of row qkv[b]: a q pair, a k pair or two v values.
// KV_F16 (define): the caches are array<u32> [context, kv / 2] of half pairs.

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

fn store_query(at: u32, a: f32, b: f32) {
    q[at] = a;
    q[at + 1u] = b;
}

#include rope_pair.wgsl

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let width = (params.n_heads + 2u * params.n_kv_heads) * params.head_dim;
    let j = gid.x; // pair index within the row
    let tok = gid.y;
    if (2u * j >= width || tok >= step.n_tokens) {
        return;
    }
    let row = tok * width;
    rope_and_store(2u * j, tok, step.pos + tok, qkv[row + 2u * j], qkv[row + 2u * j + 1u]);
}

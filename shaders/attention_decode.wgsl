// attention_decode.wgsl: one query head attends over the cached positions 0..n_pos of its
// KV head (grouped-query: query head h reads KV head h / group), with a max-subtracted softmax.
// Bindings (group 0): 0 uniform Params {n_heads, n_kv_heads, head_dim}; 5 uniform Step {pos, n_pos};
//   1 q: array<f32> [n_heads * head_dim] (read); 2 keys, 3 values: array<f32>
//   [context, n_kv_heads * head_dim] (read); 4 out: array<f32> [n_heads * head_dim] (read_write).
// Dispatch: (n_heads, 1, 1) workgroups of WG threads; n_pos <= 3072 (the scores live in
// workgroup memory). Threads score positions in turn, reduce max and sum, then each thread
// owns output dimensions d = t, t + WG, ... and sums over positions.

override WG: u32 = 64u;
const MAX_POS: u32 = 3072u;

struct Params {
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    _pad: u32,
}

struct Step {
    pos: u32,
    n_pos: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> keys: array<f32>;
@group(0) @binding(3) var<storage, read> values: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<uniform> step: Step;

var<workgroup> scores: array<f32, 3072>; // 12 KiB: with `partial`, inside the 16 KiB default
var<workgroup> partial: array<f32, 256>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let h = wg.x;
    let t = lid.x;
    let hd = params.head_dim;
    let stride = params.n_kv_heads * hd;
    let kv_off = (h / (params.n_heads / params.n_kv_heads)) * hd;
    let q_off = h * hd;
    let n_pos = min(step.n_pos, MAX_POS);
    let scale = inverseSqrt(f32(hd));

    var local_max = -3.0e38; // below any real score; Tint rejects literals at the f32 limit
    for (var j = t; j < n_pos; j = j + WG) {
        var s = 0.0;
        for (var d = 0u; d < hd; d = d + 1u) {
            s = s + q[q_off + d] * keys[j * stride + kv_off + d];
        }
        s = s * scale;
        scores[j] = s;
        local_max = max(local_max, s);
    }
    partial[t] = local_max;
    workgroupBarrier();
    for (var r = WG / 2u; r > 0u; r = r / 2u) {
        if (t < r) {
            partial[t] = max(partial[t], partial[t + r]);
        }
        workgroupBarrier();
    }
    let m = partial[0];
    workgroupBarrier();

    var local_sum = 0.0;
    for (var j = t; j < n_pos; j = j + WG) {
        let e = exp(scores[j] - m);
        scores[j] = e;
        local_sum = local_sum + e;
    }
    partial[t] = local_sum;
    workgroupBarrier();
    for (var r = WG / 2u; r > 0u; r = r / 2u) {
        if (t < r) {
            partial[t] = partial[t] + partial[t + r];
        }
        workgroupBarrier();
    }
    let inv = 1.0 / partial[0];

    for (var d = t; d < hd; d = d + WG) {
        var acc = 0.0;
        for (var j = 0u; j < n_pos; j = j + 1u) {
            acc = acc + scores[j] * values[j * stride + kv_off + d];
        }
        if (h < params.n_heads) {
            out[q_off + d] = acc * inv;
        }
    }
}

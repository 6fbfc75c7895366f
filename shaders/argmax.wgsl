// argmax.wgsl: the id of the highest-ranked of the first N logits, ranked as the sampler's
// greedy choice ranks them (src/sampler/ranking.rs: by f32::total_cmp, so +0 above -0 and a
// NaN by its sign and bits; ties to the lower id), written to tokens[0]: there the next
// decode step's embedding reads its token when the GPU runs a greedy step ahead of the
// CPU's choice (GpuBackend's run-ahead).
// Bindings (group 0): 0 logits: array<f32> [>= N] (read); 1 tokens: array<u32> [>= 1]
//   (read_write: only tokens[0] is written).
// Overrides: WG threads (a power of two <= 256), N the logits ranked (>= 1).
// Dispatch: (1, 1, 1): one workgroup; thread t ranks logits t, t + WG, t + 2 WG, ..., 8 loads
// in flight at once (an index past N is clamped into the row and then ignored), then the
// threads' winners meet in a tree in workgroup memory and thread 0 writes tokens[0].

override WG: u32 = 256u;
override N: u32 = 1u;

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> tokens: array<u32>;

// Each thread's winner so far: its ranking key and its id.
var<workgroup> best_key: array<u32, 256>;
var<workgroup> best_id: array<u32, 256>;

const IN_FLIGHT: u32 = 8u;

// The logit's place in total_cmp's ascending order as an unsigned integer: a negative
// value's bits all flipped, the others with the sign bit set.
fn order_key(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}

// Whether (key, id) ranks above (best, best_at): a higher key, or the same at a lower id.
fn ranks_above(key: u32, id: u32, best: u32, best_at: u32) -> bool {
    return key > best || (key == best && id < best_at);
}

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_id) lid: vec3<u32>) {
    let t = lid.x;
    // Key 0 is below every logit's (a key always has its sign bit set or comes from a
    // negative value's flipped bits, and -NaN with every bit set flips to 0): id N loses
    // any tie with a real logit.
    var best = 0u;
    var best_at = N;
    for (var i = t; i < N; i = i + IN_FLIGHT * WG) {
        var keys: array<u32, 8>;
        for (var k = 0u; k < IN_FLIGHT; k = k + 1u) {
            keys[k] = order_key(logits[min(i + k * WG, N - 1u)]);
        }
        for (var k = 0u; k < IN_FLIGHT; k = k + 1u) {
            let id = i + k * WG;
            if (id < N && ranks_above(keys[k], id, best, best_at)) {
                best = keys[k];
                best_at = id;
            }
        }
    }
    best_key[t] = best;
    best_id[t] = best_at;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (t < stride && ranks_above(best_key[t + stride], best_id[t + stride], best_key[t], best_id[t])) {
            best_key[t] = best_key[t + stride];
            best_id[t] = best_id[t + stride];
        }
        workgroupBarrier();
    }
    if (t == 0u) {
        tokens[0] = min(best_id[0], N - 1u);
    }
}

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

const IN_FLIGHT: u32 = 8u;

#include rank_reduce.wgsl

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
    reduce_ranked(t);
    if (t == 0u) {
        tokens[0] = min(best_id[0], N - 1u);
    }
}

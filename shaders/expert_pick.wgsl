// expert_pick.wgsl: a mixture of experts' router, from its scores to each token's picks.
// For each of the step's tokens b < n_tokens, with s = scores[b] (count values, the router
// matrix times the token's normed row):
//   p[e]    = exp(s[e] - max(s)) / sum_f exp(s[f] - max(s))       (the softmax)
//   picks   = the `used` largest p[e], largest first, the lower index first among equals
//   weight  = p[e], or with params.normalized != 0, p[e] / max(sum of the picked p, 2^-14)
// and writes picks[b, k] = (e, bitcast<u32>(weight)) for k < used, the CPU twin's values
// (cpu::experts::route) in its order.
// Bindings (group 0): 0 uniform Params {count, used, normalized, dim (unused here),
//   out_scale (unused here)}; 1 scores: array<f32> [n_tokens, count] (read); 2 picks:
//   array<u32> [n_tokens, used, 2] (read_write: this token's used pairs written, nothing
//   else); 3 uniform Step {pos, n_tokens}.
// Dispatch: (1, 1, n_tokens) workgroups of WG threads (override, a power of two <= 256):
// workgroup (0, 0, b) takes token b, its threads each a stride of the experts, reduced in
// workgroup memory (workgroup_reduce.wgsl's max, rank_reduce.wgsl's picks); count <=
// MAX_EXPERTS.

override WG: u32 = 64u;

// The most experts a layer may hold (config.rs's MAX_EXPERTS).
const MAX_EXPERTS: u32 = 1024u;
// The smallest sum the picked probabilities are divided by (llama.cpp's, the CPU twin's).
const MIN_WEIGHT_SUM: f32 = 6.1035156e-5;

#include expert_params.wgsl

#include step.wgsl

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> scores: array<f32>;
@group(0) @binding(2) var<storage, read_write> picks: array<u32>;
@group(0) @binding(3) var<uniform> step: Step;

// Each expert's exp(s - max), then taken experts marked by -1 (below every probability).
var<workgroup> probs: array<f32, MAX_EXPERTS>;
// The max's reduction (workgroup_reduce.wgsl).
var<workgroup> partial: array<f32, 256>;
// The picks so far: expert and probability.
var<workgroup> picked: array<u32, MAX_EXPERTS>;
var<workgroup> picked_p: array<f32, MAX_EXPERTS>;

#include workgroup_reduce.wgsl

#include rank_reduce.wgsl

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = lid.x;
    let b = wg.z;
    // Uniform across the workgroup: every thread returns or none does.
    if (b >= step.n_tokens || params.count > MAX_EXPERTS || params.used > params.count) {
        return;
    }
    let row = b * params.count;
    var m = EMPTY;
    for (var e = t; e < params.count; e = e + WG) {
        m = max(m, scores[row + e]);
    }
    let max_score = reduce(m, t, true);
    for (var e = t; e < params.count; e = e + WG) {
        probs[e] = exp(scores[row + e] - max_score);
    }
    workgroupBarrier();
    // The softmax's denominator, summed in the CPU twin's order (expert 0 first) by one
    // thread.
    if (t == 0u) {
        var total = 0.0;
        for (var e = 0u; e < params.count; e = e + 1u) {
            total = total + probs[e];
        }
        partial[0] = total;
    }
    workgroupBarrier();
    let total = partial[0];
    // The picks, one round each: the best expert not yet taken.
    for (var k = 0u; k < params.used; k = k + 1u) {
        var best = 0u;
        var best_at = params.count;
        for (var e = t; e < params.count; e = e + WG) {
            let key = order_key(probs[e]);
            if (ranks_above(key, e, best, best_at)) {
                best = key;
                best_at = e;
            }
        }
        best_key[t] = best;
        best_id[t] = best_at;
        reduce_ranked(t);
        if (t == 0u) {
            let e = best_id[0];
            picked[k] = e;
            picked_p[k] = probs[e] / total;
            probs[e] = -1.0;
        }
        workgroupBarrier();
    }
    if (t == 0u) {
        var sum = 0.0;
        for (var k = 0u; k < params.used; k = k + 1u) {
            sum = sum + picked_p[k];
        }
        let divisor = select(1.0, max(sum, MIN_WEIGHT_SUM), params.normalized != 0u);
        for (var k = 0u; k < params.used; k = k + 1u) {
            let at = 2u * (b * params.used + k);
            picks[at] = picked[k];
            picks[at + 1u] = bitcast<u32>(picked_p[k] / divisor);
        }
    }
}

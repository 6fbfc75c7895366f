// attention_prologue.wgsl: matrix.wgsl's ATTENTION prologue, every query head's attention for
// a decode step's one token over cache positions 0 ..= step.pos (n of them, at most the host's
// limit, at most CHUNK), computed into att_in by each workgroup of the output projection before
// its rows' products. The includer declares WG (override), params (n_heads, n_kv_heads,
// head_dim, score_scale: what each q.k is multiplied by, softcap: each scaled score's cap, 0
// for none: softcap.wgsl's `capped`, alibi_max_bias: ALiBi's slopes, 0 for none:
// alibi.wgsl), step, q: array<f32> [n_heads * hd] (the rotated queries), k_cache and v_cache
// (cache_keys.wgsl's layouts), `partial: array<f32, 256>` and att_in: array<f32, ATT_WIDTH>
// (at least n_heads * head_dim) in workgroup memory.
// Heads go in rounds of as many as `scores` holds (SCORES / n, at most WG: all 9 of this
// model's up to 71 positions), each round in three phases, each one round of loads from
// device memory wherever the workgroup has a thread per piece of work (a GPU waits out a
// load's latency, about 1 us on an H100, for each load a thread issues after using the one
// before, and the work itself is small):
//   1. scores: a thread per (KV head, position) the round reads, its key loaded whole (up to
//      64 dimensions at once, 16 vec4) and dotted with each of the round's query heads that
//      read that KV head (grouped-query attention: the key is read once for all of them);
//   2. softmax: L threads per head (L the largest power of two with heads * L <= WG), each
//      taking every L-th score (capped first, Gemma 2's): its max m and sum of exp(s - m), the (m, l) pairs then merged
//      in a tree in `wide` (log2 L barriers); the scores become exp(s - M) and l goes to
//      partial[head];
//   3. values: a thread per (KV head, 4 dimensions) and slice of the positions (WG / lanes
//      slices), walking its slice for each query head of that KV head in turn, each head's
//      slices then summed in `wide` and divided by l into att_in. A slice of at most HELD
//      positions (every slice up to 40 positions for this model in workgroups of 256) has its
//      values loaded into registers at the start of the round, beside phase 1's keys, so the
//      whole round waits out one load latency; a longer one walks the cache for each head
//      (the first walk from device memory, the rest mostly from the cache).
// Called by all threads (barriers); every branch around a barrier is uniform.

#include attention_head.wgsl

// Scores of one round: heads * n <= SCORES (kernels.rs keeps SCORES >= CHUNK).
var<workgroup> scores: array<f32, SCORES>;
// Softmax (m, l) pairs in the tree, then each thread's 4 value sums of a slice.
var<workgroup> wide: array<vec4<f32>, 256>;

// Dimensions of a key one thread holds at once in phase 1.
const KEY_PIECE: u32 = 64u;

// Keys i .. i + 3 of the cache (i a multiple of 4).
fn keys4(i: u32) -> vec4<f32> {
    return vec4<f32>(key_pair(i), key_pair(i + 2u));
}

// Vec4 `i` of the key piece at `base` (m vec4 long), or 0 past it (the load clamped into the
// piece, so it stays in bounds and needs no branch).
fn key4_within(base: u32, i: u32, m: u32) -> vec4<f32> {
    return select(vec4<f32>(0.0), keys4(base + 4u * min(i, m - 1u)), i < m);
}

// Vec4 `i` of the query piece at `at` (m vec4 long), clamped into it (the key's vec4 is 0 there).
fn q4_within(at: u32, i: u32, m: u32) -> vec4<f32> {
    let a = at + 4u * min(i, m - 1u);
    return vec4<f32>(q[a], q[a + 1u], q[a + 2u], q[a + 3u]);
}

// Phase 1 for one (KV head, position): the key at cache word `row` against query heads
// h_lo .. h_hi (those of the round that read it), into scores[(h - h0) * n + j], scaled.
fn score_key(row: u32, h_lo: u32, h_hi: u32, h0: u32, n: u32, j: u32, scale: f32) {
    let hd = params.head_dim;
    for (var d0 = 0u; d0 < hd; d0 = d0 + KEY_PIECE) {
        let m = min(hd - d0, KEY_PIECE) / 4u;
        let base = row + d0;
        // The whole piece's loads, issued before the first is used.
        let k0 = key4_within(base, 0u, m);
        let k1 = key4_within(base, 1u, m);
        let k2 = key4_within(base, 2u, m);
        let k3 = key4_within(base, 3u, m);
        let k4 = key4_within(base, 4u, m);
        let k5 = key4_within(base, 5u, m);
        let k6 = key4_within(base, 6u, m);
        let k7 = key4_within(base, 7u, m);
        let k8 = key4_within(base, 8u, m);
        let k9 = key4_within(base, 9u, m);
        let k10 = key4_within(base, 10u, m);
        let k11 = key4_within(base, 11u, m);
        let k12 = key4_within(base, 12u, m);
        let k13 = key4_within(base, 13u, m);
        let k14 = key4_within(base, 14u, m);
        let k15 = key4_within(base, 15u, m);
        for (var h = h_lo; h < h_hi; h = h + 1u) {
            let at = h * hd + d0;
            let s = ((dot(k0, q4_within(at, 0u, m)) + dot(k1, q4_within(at, 1u, m)))
                + (dot(k2, q4_within(at, 2u, m)) + dot(k3, q4_within(at, 3u, m))))
                + ((dot(k4, q4_within(at, 4u, m)) + dot(k5, q4_within(at, 5u, m)))
                + (dot(k6, q4_within(at, 6u, m)) + dot(k7, q4_within(at, 7u, m))))
                + ((dot(k8, q4_within(at, 8u, m)) + dot(k9, q4_within(at, 9u, m)))
                + (dot(k10, q4_within(at, 10u, m)) + dot(k11, q4_within(at, 11u, m))))
                + ((dot(k12, q4_within(at, 12u, m)) + dot(k13, q4_within(at, 13u, m)))
                + (dot(k14, q4_within(at, 14u, m)) + dot(k15, q4_within(at, 15u, m))));
            let i = (h - h0) * n + j;
            scores[i] = select(scores[i], 0.0, d0 == 0u) + s * scale;
        }
    }
}

// Phase 2: the round's `heads` rows of n scores (query heads h0 ..), each capped and biased
// by ALiBi (its head's slope times the key's distance back from the step's position n - 1),
// become exp(s - M), each row's sum l into partial[row].
fn softmax_rows(t: u32, heads: u32, n: u32, h0: u32) {
    var lanes = 1u;
    while (2u * lanes * heads <= WG) {
        lanes = 2u * lanes;
    }
    let row = t / lanes;
    let lane = t % lanes;
    var m = EMPTY;
    var l = 0.0;
    if (row < heads) {
        // Each score capped first (params.softcap, Gemma 2's; 0: none) and biased (ALiBi's,
        // BLOOM's; slope 0: none): a score is this lane's alone.
        let slope = alibi_slope(h0 + row, params.n_heads, params.alibi_m0, params.alibi_m1);
        for (var j = lane; j < n; j = j + lanes) {
            let s = capped(scores[row * n + j], params.softcap) + alibi_bias(slope, n - 1u - j);
            scores[row * n + j] = s;
            m = max(m, s);
        }
        for (var j = lane; j < n; j = j + lanes) {
            l = l + exp(scores[row * n + j] - m);
        }
    }
    wide[t] = vec4<f32>(m, l, 0.0, 0.0);
    workgroupBarrier();
    // (m, l) and (m', l') merge into (M, l e^(m - M) + l' e^(m' - M)), M = max(m, m'); a
    // lane with no scores holds (EMPTY, 0), which adds nothing.
    for (var r = lanes / 2u; r > 0u; r = r / 2u) {
        if (lane < r) {
            let a = wide[t];
            let b = wide[t + r];
            let top = max(a.x, b.x);
            wide[t] = vec4<f32>(top, a.y * exp(a.x - top) + b.y * exp(b.x - top), 0.0, 0.0);
        }
        workgroupBarrier();
    }
    if (row < heads) {
        let total = wide[row * lanes];
        for (var j = lane; j < n; j = j + lanes) {
            scores[row * n + j] = exp(scores[row * n + j] - total.x);
        }
        if (lane == 0u) {
            partial[row] = total.y;
        }
    }
    workgroupBarrier();
}

// Every head's attention output for the step's token into att_in (see the header).
fn attention_prologue(t: u32) {
    let hd = params.head_dim;
    let n = min(step.pos + 1u, CHUNK);
    let stride = params.n_kv_heads * hd;
    let group = params.n_heads / params.n_kv_heads;
    let scale = params.score_scale;
    let quads = hd / 4u;
    let per = min(min(params.n_heads, SCORES / n), WG);
    for (var h0 = 0u; h0 < params.n_heads; h0 = h0 + per) {
        let heads = min(per, params.n_heads - h0);
        let kv_first = h0 / group;
        let kvs = (h0 + heads - 1u) / group - kv_first + 1u;
        // Phase 3's layout, decided first: a thread per (KV head, 4 dimensions) and slice of
        // the positions, where the workgroup has a thread for every (KV head, 4 dimensions).
        let lanes = kvs * quads;
        let slices = max(WG / lanes, 1u);
        let s = t / lanes;
        let lane = t % lanes;
        let kv_v = kv_first + lane / quads;
        let dim = 4u * (lane % quads);
        let per_slice = (n + slices - 1u) / slices;
        let j0 = min(s * per_slice, n);
        let j1 = min(j0 + per_slice, n);
        // Short slices: their values loaded now, beside the keys, so the round waits out one
        // load latency, not two.
        let hold = lanes <= WG && per_slice <= HELD;
        var held: array<vec4<f32>, 8>;
        if (hold) {
            held = held_values(kv_v * hd + dim, stride, j0, n);
        }
        // 1. Scores: a thread per (KV head, position).
        for (var it = t; it < kvs * n; it = it + WG) {
            let kv = kv_first + it / n;
            let j = it % n;
            let h_lo = max(h0, kv * group);
            let h_hi = min(h0 + heads, (kv + 1u) * group);
            score_key(j * stride + kv * hd, h_lo, h_hi, h0, n, j, scale);
        }
        workgroupBarrier();
        // 2. Softmax.
        softmax_rows(t, heads, n, h0);
        // 3. Values.
        if (lanes <= WG) {
            for (var g = 0u; g < group; g = g + 1u) {
                let h = kv_v * group + g;
                let in_round = h >= h0 && h < h0 + heads;
                var acc = vec4<f32>(0.0);
                if (s < slices && in_round) {
                    if (hold) {
                        acc = held_sum(held, (h - h0) * n, j0, j1 - j0, n);
                    } else {
                        acc = head_values(dim, kv_v * hd, stride, j0, j1 - j0, (h - h0) * n + j0);
                    }
                }
                wide[t] = acc;
                workgroupBarrier();
                if (t < lanes && in_round) {
                    var sum = vec4<f32>(0.0);
                    for (var k = 0u; k < slices; k = k + 1u) {
                        sum = sum + wide[k * lanes + t];
                    }
                    let v = sum / partial[h - h0];
                    for (var k = 0u; k < 4u; k = k + 1u) {
                        att_in[h * hd + dim + k] = v[k];
                    }
                }
                workgroupBarrier();
            }
        } else {
            // More (KV head, 4 dimensions) than threads: each thread walks all n positions.
            for (var o = t; o < lanes; o = o + WG) {
                let kv = kv_first + o / quads;
                let dim = 4u * (o % quads);
                for (var g = 0u; g < group; g = g + 1u) {
                    let h = kv * group + g;
                    if (h >= h0 && h < h0 + heads) {
                        let v = head_values(dim, kv * hd, stride, 0u, n, (h - h0) * n) / partial[h - h0];
                        for (var k = 0u; k < 4u; k = k + 1u) {
                            att_in[h * hd + dim + k] = v[k];
                        }
                    }
                }
            }
            workgroupBarrier();
        }
    }
}

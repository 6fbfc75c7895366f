// attention_head.wgsl: one query head's attention over a run of cached positions, by one
// workgroup: the pieces, put together by attention_run.wgsl (attention_partial.wgsl: a head
// and chunk per workgroup; matrix.wgsl's HEADS prologue: the same in the output projection)
// and by attention_prologue.wgsl (matrix.wgsl's ATTENTION prologue: every head of a short context,
// in each workgroup of the output projection, which takes head_values and the cache reads).
// For query q (head_dim values) and positions start .. start + n of its KV head (n <= CHUNK):
//   head_softmax leaves w_j = exp(s_j - m) in `scores` and returns (m, l), with
//     s_j = capped(params.score_scale q.k_j, cap) (1 / sqrt(head_dim), or Granite's own;
//     softcap.wgsl: uncapped for cap 0),
//     m = max_j s_j, l = sum_j w_j;
//   head_values(d, ..., w) = sum_j w_j v_j[d .. d + 4] (divide by l for the attention
//     output; d and head_dim multiples of 4), the weights read from scores[w ..]
//     (attention_prologue.wgsl keeps several heads' there);
//   held_values and held_sum the same for a slice of at most HELD positions, its values
//     loaded into registers first (before the softmax: one load latency for the keys and
//     the values together).
// The includer declares: WG (override), CHUNK (constants.wgsl), params (head_dim,
// score_scale), `q: array<f32>` (the
// queries), `k_cache`, `v_cache` (array<f32> [context, kv], or with KV_F16
// array<u32> [context, kv / 2], two halves per word as rope_kv.wgsl writes them),
// `scores: array<f32, CHUNK or more>` and `partial: array<f32, 256>` in workgroup memory, includes
// workgroup_reduce.wgsl (`reduce`), softcap.wgsl (`capped`) and alibi.wgsl (`alibi_bias`), and with SUBGROUP sets sg_id, sg_lane and sg_count
// before the first call. Every thread of the
// workgroup calls both functions (barriers); a caller reusing `scores` for the next head
// puts a workgroupBarrier between.

#include cache_keys.wgsl

// Values i .. i + 3 of the cache (i a multiple of 4, as head_dim is: the host checks).
fn values4(i: u32) -> vec4<f32> {
#ifdef KV_F16
    return vec4<f32>(unpack2x16float(v_cache[i / 2u]), unpack2x16float(v_cache[i / 2u + 1u]));
#else
    return vec4<f32>(v_cache[i], v_cache[i + 1u], v_cache[i + 2u], v_cache[i + 3u]);
#endif
}

// Scores of the query at q[q_off ..] against positions start .. start + n (n <= CHUNK) of
// the KV head at column kv_off of cache rows `stride` wide; leaves exp(s_j - m) in
// scores[j] and returns (m, l), each scaled score capped at `cap` (0: none) and biased by
// ALiBi's alibi_bias(slope, last - j) (alibi.wgsl; `last` the query's place in the run, so
// last - j is the key's distance back; slope 0: none). Thread t takes positions t, t + WG, ... where the run has
// more than WG / 2; a shorter one leaves threads over, so `shares` threads share each
// position (the most, a power of two up to hd / 16, that n * shares <= WG allows: 4 for a
// split-K chunk of 64 and heads of 64), each taking every shares-th pair of its dimensions
// (cache_keys.wgsl's key_share: at least eight pairs a share, one round of its loads), their
// sums then added up in `partial`.
fn head_softmax(q_off: u32, kv_off: u32, stride: u32, start: u32, n: u32, t: u32, cap: f32, slope: f32, last: u32) -> vec2<f32> {
    let hd = params.head_dim;
    let scale = params.score_scale;
    var shares = 1u;
    while (2u * shares * n <= WG && 32u * shares <= hd) {
        shares = 2u * shares;
    }
    var local_max = EMPTY;
    if (shares == 1u) {
        for (var j = t; j < n; j = j + WG) {
            let s = capped(key_score(q_off, (start + j) * stride + kv_off, hd) * scale, cap) + alibi_bias(slope, last - j);
            scores[j] = s;
            local_max = max(local_max, s);
        }
    } else {
        // n * shares <= WG: a share per thread at most.
        let j = t / shares;
        var part = 0.0;
        if (j < n) {
            part = key_share(q_off, (start + j) * stride + kv_off, hd, t % shares, shares);
        }
        partial[t] = part;
        workgroupBarrier();
        if (t < n) {
            var s = 0.0;
            for (var i = 0u; i < shares; i = i + 1u) {
                s = s + partial[t * shares + i];
            }
            s = capped(s * scale, cap) + alibi_bias(slope, last - t);
            scores[t] = s;
            local_max = s;
        }
        // reduce writes `partial` first: every sum above has read it by then.
        workgroupBarrier();
    }
    let m = reduce(local_max, t, true);
    var local_sum = 0.0;
    for (var j = t; j < n; j = j + WG) {
        let e = exp(scores[j] - m);
        scores[j] = e;
        local_sum = local_sum + e;
    }
    // reduce ends on a barrier: every thread then sees every score.
    let l = reduce(local_sum, t, false);
    return vec2<f32>(m, l);
}

// scores[w + j] v_j[dim .. dim + 4] for position start + j of the run (n long), or 0 for
// j >= n (the loads then read the run's last position, so they stay in bounds).
fn weighted_values(dim: u32, kv_off: u32, stride: u32, start: u32, n: u32, w: u32, j: u32) -> vec4<f32> {
    let p = min(j, n - 1u);
    return select(vec4<f32>(0.0), scores[w + p] * values4((start + p) * stride + kv_off + dim), j < n);
}

// sum_j scores[w + j] v_j[dim .. dim + 4] over positions start .. start + n (dim a multiple
// of 4), with the weights from scores[w] on (head_softmax leaves them at w = 0): eight
// positions an iteration, the last one padded with zero weights, so all their loads are in
// flight before the first is used (as key_score does), into two sums.
fn head_values(dim: u32, kv_off: u32, stride: u32, start: u32, n: u32, w: u32) -> vec4<f32> {
    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    for (var j = 0u; j < n; j = j + 8u) {
        a0 = a0 + weighted_values(dim, kv_off, stride, start, n, w, j) + weighted_values(dim, kv_off, stride, start, n, w, j + 2u)
            + weighted_values(dim, kv_off, stride, start, n, w, j + 4u) + weighted_values(dim, kv_off, stride, start, n, w, j + 6u);
        a1 = a1 + weighted_values(dim, kv_off, stride, start, n, w, j + 1u) + weighted_values(dim, kv_off, stride, start, n, w, j + 3u)
            + weighted_values(dim, kv_off, stride, start, n, w, j + 5u) + weighted_values(dim, kv_off, stride, start, n, w, j + 7u);
    }
    return a0 + a1;
}

// Positions of a slice of the values a thread holds in registers, loaded beside the keys
// before the softmax (weighing them then needs no loads of its own), where every slice has
// at most this many.
const HELD: u32 = 8u;

// The value vec4s of the slice's first HELD positions j0, j0 + 1, ... (clamped into the n
// positions, so the loads stay in bounds; held_sum gives the clamped ones no weight) at
// column `col` of cache rows `stride` wide (the run's first row's offset included): all 8
// loads issued at once.
fn held_values(col: u32, stride: u32, j0: u32, n: u32) -> array<vec4<f32>, 8> {
    let last = n - 1u;
    return array<vec4<f32>, 8>(
        values4(min(j0, last) * stride + col), values4(min(j0 + 1u, last) * stride + col),
        values4(min(j0 + 2u, last) * stride + col), values4(min(j0 + 3u, last) * stride + col),
        values4(min(j0 + 4u, last) * stride + col), values4(min(j0 + 5u, last) * stride + col),
        values4(min(j0 + 6u, last) * stride + col), values4(min(j0 + 7u, last) * stride + col));
}

// Weight of position j0 + i of a slice `len` long in the score row at `w` (n long), or 0 past
// the slice.
fn held_weight(w: u32, j0: u32, i: u32, len: u32, n: u32) -> f32 {
    return select(0.0, scores[w + min(j0 + i, n - 1u)], i < len);
}

// sum_i w_i v_i over the slice's held values (len <= HELD).
fn held_sum(v: array<vec4<f32>, 8>, w: u32, j0: u32, len: u32, n: u32) -> vec4<f32> {
    return ((held_weight(w, j0, 0u, len, n) * v[0] + held_weight(w, j0, 1u, len, n) * v[1])
        + (held_weight(w, j0, 2u, len, n) * v[2] + held_weight(w, j0, 3u, len, n) * v[3]))
        + ((held_weight(w, j0, 4u, len, n) * v[4] + held_weight(w, j0, 5u, len, n) * v[5])
        + (held_weight(w, j0, 6u, len, n) * v[6] + held_weight(w, j0, 7u, len, n) * v[7]));
}

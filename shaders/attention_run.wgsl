// attention_run.wgsl: the whole of one query head's attention over a run of cached
// positions, by one workgroup (attention_head.wgsl's pieces in order: the values of a short
// slice loaded beside the keys, the softmax, the weighted values summed over the slices);
// included by attention_partial.wgsl (a head and chunk per workgroup, split-K's part 1 or the
// whole attention) and matrix.wgsl's HEADS prologue (head_attention.wgsl: a head and chunk
// per workgroup of the output projection). The includer includes attention_head.wgsl first
// and declares what it needs, `wide: array<vec4<f32>, 256>` in workgroup memory, and
// write_dim(dim, sum, l), which takes each dimension's result.

// One head's attention: the query at q[q_off ..] against positions start .. start + n
// (n <= CHUNK) of the KV head at column kv_off of cache rows `stride` wide, each score
// capped at `cap` (0: none) and biased by ALiBi's `slope` times its distance back from the
// query at `last` in the run (head_softmax's). Returns (m, l) (head_softmax's) and hands each dimension's sum_j w_j v_j[dim] to write_dim(dim, sum, l)
// (the output is sum / l). Every thread calls it (barriers).
fn head_run(q_off: u32, kv_off: u32, stride: u32, start: u32, n: u32, t: u32, cap: f32, slope: f32, last: u32) -> vec2<f32> {
    let hd = params.head_dim;
    // The values: 4 dimensions a thread, so hd / 4 threads take a run of positions, and
    // WG / (hd / 4) runs (slices of the chunk) go at once, their sums then added up in `wide`.
    // Each thread's loop is 1 / slices of the chunk. Heads wider than 4 WG: in turn. A slice
    // of at most HELD positions (a split-K chunk of 64 at heads of 64: 4) is loaded now,
    // beside the keys.
    let lanes = hd / 4u;
    let slices = max(WG / lanes, 1u);
    let s = t / lanes;
    let per = (n + slices - 1u) / slices;
    let j0 = min(s * per, n);
    let j1 = min(j0 + per, n);
    let col = (t % lanes) * 4u;
    let hold = lanes <= WG && per <= HELD;
    var held: array<vec4<f32>, 8>;
    if (hold) {
        held = held_values(start * stride + kv_off + col, stride, j0, n);
    }
    let ml = head_softmax(q_off, kv_off, stride, start, n, t, cap, slope, last);
    if (lanes <= WG) {
        var acc = vec4<f32>(0.0);
        if (s < slices) {
            if (hold) {
                acc = held_sum(held, 0u, j0, j1 - j0, n);
            } else {
                acc = head_values(col, kv_off, stride, start + j0, j1 - j0, j0);
            }
        }
        wide[t] = acc;
        workgroupBarrier();
        for (var dim = t; dim < hd; dim = dim + WG) {
            var sum = 0.0;
            for (var i = 0u; i < slices; i = i + 1u) {
                sum = sum + wide[i * lanes + dim / 4u][dim % 4u];
            }
            write_dim(dim, sum, ml.y);
        }
    } else {
        for (var dim = 4u * t; dim < hd; dim = dim + 4u * WG) {
            let v = head_values(dim, kv_off, stride, start, n, 0u);
            for (var k = 0u; k < 4u; k = k + 1u) {
                write_dim(dim + k, v[k], ml.y);
            }
        }
    }
    return ml;
}

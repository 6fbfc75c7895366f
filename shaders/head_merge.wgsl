// head_merge.wgsl: the HEADS parts (head_attention.wgsl) merged into the attention's
// projected output, for the kernels after it: matrix.wgsl's MERGE_IN prologue (the
// feed-forward's first matrix: its input row is x + that output, in att_in) and MERGE_OUT
// epilogue (its second: each output row r adds output r beside its product, so the residual
// stream gets the attention's share there, the first matrix having only read it). Per part
// (head h, chunk c) the weight exp(m_hc - M_h) / sum_c' exp(m_hc' - M_h) l_hc', M_h = max_c m_hc,
// over the chunks the step's position reaches; the merged value of row r is the weighted sum
// of the parts' row r.
// Binding 10 head_parts: array<f32> [n_heads, n_chunks, 2 + part_rows] (read). The includer
// declares params (n_heads, n_chunks, part_rows), step, WG and includes workgroup_reduce.wgsl
// (EMPTY).

#include split_chunk.wgsl

@group(0) @binding(10) var<storage, read> head_parts: array<f32>;

// Each live part's weight, head-major: (h, c) at h * used + c (the host keeps
// n_heads * n_chunks <= 256).
var<workgroup> part_weights: array<f32, 256>;
// Chunks per head the step's position reaches.
var<private> used: u32;

// The parts' weights into part_weights, a thread per head. Called by all threads (a barrier).
fn merge_weights(t: u32) {
    used = min(step.pos / SPLIT + 1u, params.n_chunks);
    let width = 2u + params.part_rows;
    for (var h = t; h < params.n_heads; h = h + WG) {
        let base = h * params.n_chunks * width;
        var m = EMPTY;
        for (var c = 0u; c < used; c = c + 1u) {
            m = max(m, head_parts[base + c * width]);
        }
        var l = 0.0;
        for (var c = 0u; c < used; c = c + 1u) {
            l = l + exp(head_parts[base + c * width] - m) * head_parts[base + c * width + 1u];
        }
        for (var c = 0u; c < used; c = c + 1u) {
            part_weights[h * used + c] = exp(head_parts[base + c * width] - m) / l;
        }
    }
    workgroupBarrier();
}

// Part k's (of n) weighted row r, or 0 for k >= n (the load clamped into the parts).
fn weighted_part(k: u32, n: u32, r: u32) -> f32 {
    let i = min(k, n - 1u);
    let at = ((i / used) * params.n_chunks + i % used) * (2u + params.part_rows) + 2u + r;
    return select(0.0, part_weights[i] * head_parts[at], k < n);
}

// Row r of the attention's projected output: four parts an iteration, their loads issued
// before the first is used.
fn merged(r: u32) -> f32 {
    let n = params.n_heads * used;
    var a = 0.0;
    var b = 0.0;
    for (var k = 0u; k < n; k = k + 4u) {
        a = a + weighted_part(k, n, r) + weighted_part(k + 2u, n, r);
        b = b + weighted_part(k + 1u, n, r) + weighted_part(k + 3u, n, r);
    }
    return a + b;
}

#ifdef MERGE_IN
// The input row x + the attention's output into att_in. Called by all threads (barriers).
fn merge_input(t: u32) {
    merge_weights(t);
    for (var col = t; col < params.cols; col = col + WG) {
        att_in[col] = x_at(x_rows.x + col) + merged(col);
    }
    workgroupBarrier();
}
#endif

// head_attention.wgsl: matrix.wgsl's HEADS prologue, the output projection of a decode step
// taken per query head: workgroup (g, h, c) computes head h's attention over chunk c of the
// cache (positions c * SPLIT .. min((c + 1) * SPLIT, step.pos + 1), attention_run.wgsl) into
// att_in, un-normalized (o[d] = sum_j exp(s_j - m) v_j[d]), and its rows' products with the
// head's columns of the matrix (h * head_dim .. + head_dim) come out as that (head, chunk)'s
// part: y [n_heads, n_chunks, 2 + rows] holds per part m, l (written by the workgroups of
// g = 0) and the rows' products. No workgroup needs another's result, so the step's whole
// attention and its projection are one dispatch, and each workgroup computes one head's
// attention over one chunk, not every head's (the ATTENTION prologue's); head_merge.wgsl
// merges the parts where the feed-forward reads them:
//   out[r] = sum_h sum_c exp(m_hc - M_h) P_hc[r] / sum_c exp(m_hc - M_h) l_hc,  M_h = max_c m_hc.
// The includer declares params (n_heads, n_kv_heads, head_dim, n_chunks, rows, score_scale),
// step, q (the
// rotated queries, [n_heads * hd]), k_cache and v_cache, y, att_in (at least head_dim) and
// `partial: array<f32, 256>` in workgroup memory, and includes workgroup_reduce.wgsl.

#include split_chunk.wgsl

#include attention_head.wgsl

#include attention_run.wgsl

// A chunk's scores.
var<workgroup> scores: array<f32, CHUNK>;
// attention_run.wgsl's slice sums.
var<workgroup> wide: array<vec4<f32>, 256>;
// The head's first column: att_in[i] is column col0 + i of the input row.
var<private> col0: u32;
// Where the workgroup's part starts in y.
var<private> part_at: u32;

// Dimension `dim` of the head's un-normalized output (head_run), the projection's input.
fn write_dim(dim: u32, acc: f32, l: f32) {
    att_in[dim] = acc;
}

// Head h's attention over chunk c (h < n_heads, c < n_chunks, c * SPLIT <= step.pos: the
// caller returns first otherwise) into att_in, and its statistics into the part (by the
// workgroups of the first rows, `first`). Called by all threads (barriers).
fn heads_prologue(t: u32, h: u32, c: u32, first: bool) {
    let hd = params.head_dim;
    let start = c * SPLIT;
    let n_pos = step.pos + 1u;
    let n = min(SPLIT, n_pos - start);
    let stride = params.n_kv_heads * hd;
    let kv_off = (h / (params.n_heads / params.n_kv_heads)) * hd;
    col0 = h * hd;
    part_at = (h * params.n_chunks + c) * (2u + params.rows);
    // Uncapped and unbiased: a model that caps its scores (Gemma 2) or biases them by ALiBi
    // (BLOOM) never runs this form (GpuBackend).
    let ml = head_run(h * hd, kv_off, stride, start, n, t, 0.0, 0.0, step.pos - start);
    if (first && t == 0u) {
        y[part_at] = ml.x;
        y[part_at + 1u] = ml.y;
    }
    workgroupBarrier();
}

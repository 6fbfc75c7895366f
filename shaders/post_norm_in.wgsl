// post_norm_in.wgsl: matrix.wgsl's POST_NORM_IN prologue (a decode step's feed-forward gate
// and up rows after a post-normed attention, Gemma 3's): the input row is the residual
// stream plus the attention's projected output RMS-normed with its own gain,
//   att_in[c] = x[c] + post_proj[c] / sqrt(mean_j(post_proj[j]^2) + eps) * post_gain[c],
// computed by each workgroup into workgroup memory before its rows' products (which then
// RMSNorm att_in with the feed-forward's gain, NORM, where the model has pre-norms: not
// OLMo 2's; params.eps is the post norm's, and NORM's the same). x is only read: the step's last
// dispatch of the layer (norm_add.wgsl's FIRST) adds the same term to x.
// Bindings (group 0): 11 post_proj: array<f32> [cols] (read: the output projection's
// output), 12 post_gain: array<f32> [cols] (read). The includer declares params (cols,
// eps), WG (override), x_at and x_rows (the input row), att_in (ATT_IN), and includes
// workgroup_reduce.wgsl (`reduce`). Called by all threads (barriers).

@group(0) @binding(11) var<storage, read> post_proj: array<f32>;
@group(0) @binding(12) var<storage, read> post_gain: array<f32>;

fn post_norm_input(t: u32) {
    var squares = 0.0;
    for (var col = t; col < params.cols; col = col + WG) {
        let v = post_proj[col];
        squares = squares + v * v;
    }
    let inv_rms = inverseSqrt(reduce(squares, t, false) / f32(params.cols) + params.eps);
    for (var col = t; col < params.cols; col = col + WG) {
        att_in[col] = x_at(x_rows.x + col) + post_proj[col] * inv_rms * post_gain[col];
    }
    workgroupBarrier();
}

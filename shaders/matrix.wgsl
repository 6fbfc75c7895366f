// matrix.wgsl: the template of every weight-matrix kernel, expanded by
// src/backend/gpu/wgsl_defs.rs into the variants kernels.rs declares. Defines:
//   MATVEC (decode): y = W x for one input row;
//   MATMUL (prefill): Y = X W^T for the step's n_tokens rows, 4 tokens per thread at once
//     (a vec4 accumulator, so every weight dequantized is used 4 times);
//   and one weight format, W [rows, cols] dequantized on the fly from its layout (repacked
//   at load, 4-byte aligned): Q4_1 (and Q4_0), Q5_1 (and Q5_0), Q8_0, Q2_K, Q3_K, Q4_K,
//   Q5_K, Q6_K, AFFINE_16 (8-bit integers, a scale and offset per 16), F16, BF16 or F32, as
//   weight_formats.wgsl describes them and declares their bindings (and unit_products.wgsl
//   multiplies a unit of each by the input);
//   and optionally, fused around the product:
//   NORM (prologue): the input row(s) are RMSNorm-ed on the fly, x' = x / sqrt(mean(x^2) +
//     eps) * gain, each workgroup reducing the sums of squares of its rows itself (so the
//     norm before a projection needs no dispatch of its own), after its rows' products of
//     x * gain, which 1 / rms then scales;
//   GLU (epilogue): rows 2i and 2i + 1 are the gate and up rows of output i (stacked
//     interleaved at load), and the kernel writes act(gate) * up, act (params.activation)
//     silu(g) = g / (1 + e^-g), or with ACT_GELU GELU's tanh form (Gemma's GeGLU):
//     y [n_tokens, rows / 2]. Both rows of a pair are always in one workgroup (WG / TPR is
//     even: TPR <= WG / 2). Not with accumulate.
//   BIAS (epilogue, not with NORM or a pair epilogue; GPT-2's output, up and down
//     projections): each row's bias is added to its product, read from the gain binding
//     (the biases alone, padded to whole vec4s): y[r] = s ((W x)[r] + b[r]).
//   ACT (epilogue, not with GLU; the ungated up projection): each row's value, its bias
//     added with BIAS, goes through params.activation (GPT-2's ACT_GELU, Arcee's and
//     Nemotron's ACT_RELU_SQUARED, relu(v)^2): y[r] = act((W x)[r] + b[r]).
//   ROPE_KV (MATVEC epilogue; with NORM, the Q/K/V projection of a decode step): the rows are
//     one token's [q (n_heads * hd) | k (kv) | v (kv)], kv = n_kv_heads * hd, and the kernel
//     writes what rope_kv.wgsl would from them (rope_pair.wgsl): the turned queries into y
//     [n_heads * hd], the turned keys and the values into row step.pos of the caches. Rows
//     pair up as GLU's do (a pair is a head's 2i, 2i + 1). Not with accumulate. With
//     QKV_BIAS each row's bias is added first (Qwen2's and StableLM 2's Q/K/V biases), read
//     from the gain binding after its cols gains with NORM (the kernel has no storage binding
//     to spare), from its start without (StableLM's projection reads a LayerNorm's output);
//     then, where params.clamp_kqv > 0, each row's value is clamped to [-clamp_kqv,
//     clamp_kqv] (OLMo 1.7's clamp, rope_pair.wgsl).
//   HEAD_NORM (with ROPE_KV, not QKV_BIAS; Qwen3's, Gemma 3's and EXAONE 4's head norms):
//     each workgroup computes one head's rows, keeps them in workgroup memory, and RMS-norms a
//     q or k head with its gain before RoPE (after it with params.norm_after_rope, Hunyuan's;
//     head_norm_rope.wgsl); the gain binding holds q's
//     and k's head gains, after its cols gains with NORM. Rows do not pair up across threads
//     (no PAIRS).
//   ATTENTION (MATVEC prologue; the output projection of a decode step while the context
//     is short, pos < the host's limit, at most CHUNK): the input row is the attention output of every head for
//     the step's token over cache positions 0 ..= step.pos (attention_prologue.wgsl: heads
//     in rounds, grouped-query heads sharing each key and value load), which each
//     workgroup computes into workgroup memory (cols = n_heads * hd <= ATT_MAX) before its
//     rows' products: no dispatch of its own, and no trip through device memory.
//   COMBINE (MATVEC prologue; the output projection of a decode step past them): the input
//     row is split-K attention's chunk statistics merged (attention_merge.wgsl, as
//     attention_combine.wgsl would write it), which each workgroup computes into workgroup
//     memory: split-K takes its own dispatch for part 1 only.
//   HEADS (MATVEC, not SUBGROUP; the output projection of a decode step per query head while
//     the context is short): workgroup (g, h, c) computes head h's attention over chunk c of
//     the cache and its rows' products with the head's columns only, into that part of y
//     (head_attention.wgsl: y [n_heads, n_chunks, 2 + rows], per part m, l, then the rows),
//     adding nothing to x: the feed-forward's two matrices merge the parts (MERGE_IN,
//     MERGE_OUT). Every head of the step's attention and its projection in one dispatch
//     without each workgroup computing every head.
//   MERGE_IN (MATVEC prologue; with NORM and GLU the feed-forward's gate and up rows after
//     HEADS): the input row is x + the HEADS parts merged (head_merge.wgsl), in att_in.
//   MERGE_OUT (MATVEC epilogue, with accumulate; the down projection after HEADS): each row
//     adds the merged parts' same row too, y[r] = (y[r] + merged[r]) + s (W x)[r], the order of
//     the residual adds of the steps without HEADS.
//   POST_NORM_IN (MATVEC prologue; with GLU, and NORM but for OLMo 2, the feed-forward's gate
//     and up rows after a post-normed attention, Gemma's): the input row is x + the attention's projected
//     output RMS-normed with its post norm's gain (post_norm_in.wgsl), in att_in; the layer's
//     last dispatch adds that term to x (norm_add.wgsl's FIRST), so x is only read here.
//   EXPERTS (MATVEC, with NORM and GLU or plain; a mixture of experts' projections, decode
//     and prefill alike): the matrix is a stack of experts' matrices of params.rows rows each,
//     and workgroup (g, k, b) computes rows g.. of the expert token b picked k-th (picks, binding
//     13, [n_tokens, experts_used, 2]: expert, weight bits; expert_pick.wgsl): with GLU (the
//     experts' gate and up rows, interleaved per expert) from token b's input row, into
//     y [n_tokens, experts_used, rows / 2]; without (the down projections) from its pick's
//     input row, x [n_tokens, experts_used, cols], into y [n_tokens, experts_used, rows]
//     (written, for expert_sum.wgsl to weigh and add up).
//   PAIRS: set by the host with GLU and ROPE_KV but HEAD_NORM (rows handled as pairs); GAINS
//   with NORM, QKV_BIAS, HEAD_NORM or BIAS (the gain binding); KV_CACHE with
//   ROPE_KV, ATTENTION and HEADS (the cache bindings); QUERIES with ATTENTION and HEADS
//   (binding 3 is q); ATT_IN with ATTENTION, COMBINE, HEADS and MERGE_IN (the input row in
//   workgroup memory; POST_NORM_IN too); HEAD_PARTS with MERGE_IN and MERGE_OUT (binding 10); X_VEC4 with
//   MATVEC of a quantized format (rows of whole blocks: the input and the gain as vec4s).
//   KV_F16 (with ROPE_KV or ATTENTION): the caches hold half floats, two per u32.
// Bindings (group 0): 0 uniform Params {rows, cols, accumulate, last_token, eps, n_heads,
//   n_kv_heads, head_dim (those three: ROPE_KV, ATTENTION and COMBINE), y_stride (MATMUL),
//   n_chunks (COMBINE), score_scale (ATTENTION, HEADS: what each q.k is multiplied by),
//   out_scale (what each product is multiplied by where it is stored: Granite's residual
//   scale; 1 otherwise; not the pair epilogues'), clamp_kqv (ROPE_KV: the clamp of q, k and
//   v, 0 for none), norm_after_rope (HEAD_NORM: 1 where each head is normed after RoPE,
//   Hunyuan's)}; 1 and 2 the weights (weight_formats.wgsl: qs, dm or d, blocks, or
//   w); 3 x: array<f32> [n_tokens, cols] (read; X_VEC4: array<vec4<f32>>, the same floats
//   four at a time), with ATTENTION q: array<f32> [n_heads * hd],
//   the step's rotated queries, with COMBINE parts: array<f32> [n_heads, n_chunks, 2 + hd]
//   (attention_partial.wgsl's chunk statistics for the step's token); 4 y: array<f32>
//   (read_write); 5 uniform Step {pos, n_tokens}; 6 gain: array<f32> [cols] (read; NORM
//   only; X_VEC4: as vec4s; BIAS: [rows] the rows' biases, padded to whole vec4s; QKV_BIAS: [cols + rows], the rows' biases after the gains, or without NORM the biases alone, padded to whole vec4s; HEAD_NORM: [cols + 2 hd], q's and k's head gains after them, or without NORM [2 hd]); 7 k_cache, 8 v_cache (ROPE_KV writes them, ATTENTION reads them; declared
//   read_write for both): array<f32> [context, kv] or KV_F16 array<u32> [context, kv / 2];
//   9 table: array<f32> [context * hd] (ROPE_KV: RoPE's cos/sin); 10 head_parts:
//   array<f32> [n_heads, n_chunks, 2 + part_rows] (read; HEAD_PARTS: the HEADS parts);
//   11 post_proj, 12 post_gain: array<f32> [cols] (read; POST_NORM_IN: the attention's
//   projected output and its post norm's gain); 13 picks: array<u32> [n_tokens,
//   experts_used, 2] (read; EXPERTS).
// MATVEC reads input row 0, or row n_tokens - 1 when last_token != 0 (the LM head after a
//   prefill), and writes y[r] = out_scale (W x)[r].
// MATMUL writes y[b * y_stride + r] = out_scale (W x_b)[r] for tokens b < n_tokens (last_token unused;
//   y_stride = rows, or the whole LM head's rows when W is one band of it, y bound at the
//   band's first row).
// Either adds to y instead when accumulate != 0 (the residual add fused into the output
// projections).
// SUBGROUP (MATVEC only; the adapter's subgroups feature): the same dispatch and the same
//   WG / TPR rows per workgroup, but whole subgroups share a row: one subgroup where it has
//   TPR lanes or more, else TPR / subgroup_size of them (a row group), their lanes taking every
//   (group's lanes)-th unit and each subgroup adding up with subgroupAdd. With NORM each
//   subgroup also sums the squares of the input columns its lanes read for its first row (a
//   row group's subgroups read every column once), so a subgroup that has the row alone has
//   the row's 1 / rms itself: no second read of the input, and no reduction across the
//   workgroup. Rows go to row groups round-robin (row i of the workgroup to group
//   i % groups), so any subgroup size up to WG and any subgroup layout of the workgroup gives
//   the same rows (the host takes no wider subgroups: lanes = subgroup_size would skip
//   unfilled lanes); with PAIRS the two rows of a pair meet in workgroup memory. With
//   SHARED_ROWS (an override the host sets where the adapter's narrowest subgroups have fewer
//   lanes than TPR, so a row may span several) every subgroup's sum, and for NORM the first
//   group's squares, meet in workgroup memory after one barrier, and a thread per row (PAIRS:
//   per pair) adds them up: no subgroup idles for want of a row of its own (TPR 32 in
//   subgroups of 8 or 16, as Intel's GPUs run, left 3 in 4 or half of them idle before).
//   With ROWS = 2 or 4 (an override, SUBGROUP only) a row group takes that many consecutive
//   rows at once (row_dot's slots, slot_dot): each unit's input columns (and gains) are loaded and squared
//   once for all the rows' products, a workgroup covers ROWS WG / TPR rows (1 / ROWS of the
//   workgroups), and a SwiGLU or RoPE pair is one group's, its epilogue written by its lane
//   0 with no trip through workgroup memory.
// Dispatch: (ceil(rows / (ROWS WG / TPR)), MATVEC 1 | MATMUL ceil(n_tokens / 4), 1) workgroups
// (HEADS: (ceil(rows / (WG / TPR)), n_heads, n_chunks); EXPERTS: (ceil(rows / (ROWS WG /
// TPR)), experts_used, n_tokens); HEAD_NORM: (rows / head_dim, 1, 1), a
// head a workgroup, its rows in rounds of ROWS WG / TPR)
// of WG threads (overrides: WG a power of two <= 256, TPR a power of two <= WG, IN_FLIGHT 1 to 8
// units of a row loaded at once by each thread). TPR threads
// share a row, each taking every TPR-th unit of it (row_dot), then add up their sums in workgroup
// memory; workgroup (g, j) covers rows g WG / TPR .. and (MATMUL) tokens 4j .. 4j + 3.
// Threads past the last row, and tokens past n_tokens, write nothing (a MATMUL thread
// reads the last valid row in their place).

#include enable_subgroups.wgsl

override WG: u32 = 64u;
override TPR: u32 = 8u;
// Units of a row each thread has in flight at once in row_dot (with ROWS > 1, of each of
// its rows), 1 to 8: 2 (the host's default, UNITS_IN_FLIGHT), 4 or 8 as asked, or fitted to a
// decode row (see row_dot).
override IN_FLIGHT: u32 = 2u;

#include matrix_params.wgsl

#include step.wgsl

#include constants.wgsl

#ifdef MATVEC
// The accumulator: one token.
alias Acc = f32;
#endif
#ifdef MATMUL
// The accumulator: 4 tokens.
alias Acc = vec4<f32>;
#endif

@group(0) @binding(0) var<uniform> params: Params;
#include weight_formats.wgsl

#ifdef QUERIES
@group(0) @binding(3) var<storage, read> q: array<f32>;
#else
#ifdef COMBINE
@group(0) @binding(3) var<storage, read> parts: array<f32>;
#else
#ifdef X_VEC4
// The input row(s) as vec4s (a row is whole blocks, so each starts on one): a decode step's
// product reads 4 of its columns with one load (dot4).
@group(0) @binding(3) var<storage, read> x: array<vec4<f32>>;
#else
@group(0) @binding(3) var<storage, read> x: array<f32>;
#endif

// Element i of x.
fn x_at(i: u32) -> f32 {
#ifdef X_VEC4
    return x[i / 4u][i % 4u];
#else
    return x[i];
#endif
}
#endif
#endif
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<uniform> step: Step;
#ifdef GAINS
#ifdef X_VEC4
@group(0) @binding(6) var<storage, read> gain: array<vec4<f32>>;
#else
@group(0) @binding(6) var<storage, read> gain: array<f32>;
#endif
#endif
#ifdef KV_CACHE
#ifdef KV_F16
@group(0) @binding(7) var<storage, read_write> k_cache: array<u32>;
@group(0) @binding(8) var<storage, read_write> v_cache: array<u32>;
#else
@group(0) @binding(7) var<storage, read_write> k_cache: array<f32>;
@group(0) @binding(8) var<storage, read_write> v_cache: array<f32>;
#endif
#endif
#ifdef ROPE_KV
@group(0) @binding(9) var<storage, read> table: array<f32>;
#endif
#ifdef EXPERTS
@group(0) @binding(13) var<storage, read> picks: array<u32>;
// The picked expert's first row in the stack, and the pick's first output in y.
var<private> expert_first_row: u32;
var<private> y_first: u32;

// Workgroup (g, k, b)'s pick: its expert's rows, its input row (GLU: the token's; else the
// pick's own), its output rows.
fn expert_prologue(wg: vec3<u32>) {
    let pick = wg.z * params.experts_used + wg.y;
    expert_first_row = picks[2u * pick] * params.rows;
#ifdef GLU
    x_rows = vec4<u32>(wg.z * params.cols);
    y_first = pick * (params.rows / 2u);
#else
    x_rows = vec4<u32>(pick * params.cols);
    y_first = pick * params.rows;
#endif
}
#endif


var<workgroup> partial: array<Acc, 256>;
#ifdef MATVEC
#include workgroup_reduce.wgsl

#include softcap.wgsl

#include alibi.wgsl
#endif
#ifdef SUBGROUP
// Rows span several subgroups, whose sums meet in workgroup memory (see SUBGROUP above; the
// host sets it where the adapter's narrowest subgroups have fewer than TPR lanes).
override SHARED_ROWS: bool = false;
// Rows a row group takes at once: 1 (a GPU's default, ROWS_PER_SUBGROUP), 2 or 4, with
// IN_FLIGHT units of each in flight (row_dot, slot_dot).
override ROWS: u32 = 1u;
#ifdef NORM
// With SHARED_ROWS: the squares each subgroup of the first row group read (its parts, at
// most the workgroup's subgroups), adding up to the input row's.
var<workgroup> group_squares: array<f32, 256>;
#endif
#endif
#ifdef ATT_IN
// The input row's width: the matrix's columns, at most ATT_MAX (the host sets it, so a
// workgroup declares, and a browser zero-fills, only what the model needs).
override ATT_WIDTH: u32 = ATT_MAX;
// The attention output: the input row of the product.
var<workgroup> att_in: array<f32, ATT_WIDTH>;
#endif
#ifdef COMBINE
#include split_chunk.wgsl

#include attention_merge.wgsl

// Every head's attention output for the step's one token, merged from the chunks split-K's
// part 1 wrote for positions 0 ..= step.pos, into att_in: a thread per (head, dimension).
// Called by all threads (a barrier).
fn combine_prologue(t: u32) {
    let hd = params.head_dim;
    let used = min(step.pos / SPLIT + 1u, params.n_chunks);
    for (var o = t; o < params.n_heads * hd; o = o + WG) {
        att_in[o] = merge_chunks((o / hd) * params.n_chunks * (2u + hd), used, hd, o % hd);
    }
    workgroupBarrier();
}
#endif
#ifdef ATTENTION
#include attention_prologue.wgsl
#endif
#ifdef HEADS
#include head_attention.wgsl
#endif
#ifdef HEAD_PARTS
#include head_merge.wgsl
#endif
#ifdef POST_NORM_IN
#include post_norm_in.wgsl
#endif
#ifdef ROPE_KV
fn store_query(at: u32, a: f32, b: f32) {
    y[at] = a;
    y[at + 1u] = b;
}

#include rope_pair.wgsl
#endif
#ifdef HEAD_NORM
// The head's rows in workgroup memory: head_dim (the host sets it).
override HEAD_WIDTH: u32 = 128u;

#include head_norm_rope.wgsl
#endif
// Offsets of the thread's input row(s) in x.
var<private> x_rows: vec4<u32>;
#ifdef NORM
// 1 / rms of the input row(s) (the prologue's result; with SUBGROUP, the subgroup's).
var<private> inv_rms: Acc;
#ifdef SUBGROUP
// The squares of the input columns this lane has read in row_dot (X), past-the-row units'
// excepted (slot_or_zero).
var<private> squares: f32;
#endif
#endif

// Column `col` of the input row(s), as stored.
fn X_raw(col: u32) -> Acc {
#ifdef HEADS
    return att_in[col - col0];
#else
#ifdef ATT_IN
    return att_in[col];
#else
#ifdef MATVEC
    return x_at(x_rows.x + col);
#endif
#endif
#endif
#ifdef MATMUL
    return vec4<f32>(x_at(x_rows.x + col), x_at(x_rows.y + col), x_at(x_rows.z + col), x_at(x_rows.w + col));
#endif
}

#ifdef GAINS
// Element i of the gain binding (with QKV_BIAS the rows' biases follow the cols gains; with
// HEAD_NORM the heads' gains, after them with NORM).
fn gain_at(i: u32) -> f32 {
#ifdef X_VEC4
    return gain[i / 4u][i % 4u];
#else
    return gain[i];
#endif
}
#endif

// Column `col` of the input row(s) the product reads: with NORM, times the gain (the
// 1 / rms factor is the same for the whole row, so it multiplies the row's sum instead).
fn X(col: u32) -> Acc {
#ifdef NORM
    let v = X_raw(col);
#ifdef SUBGROUP
    squares = squares + v * v;
#endif
    return v * gain_at(col);
#else
    return X_raw(col);
#endif
}

#ifdef X_VEC4
// Columns col .. col + 3 of the input row, as stored (col a multiple of 4).
fn X4_raw(col: u32) -> vec4<f32> {
#ifdef ATT_IN
#ifdef HEADS
    let c = col - col0;
#else
    let c = col;
#endif
    return vec4<f32>(att_in[c], att_in[c + 1u], att_in[c + 2u], att_in[c + 3u]);
#else
    return x[(x_rows.x + col) / 4u];
#endif
}

// Columns col .. col + 3 the product reads: X's four at once (one load of x, one of the gain).
fn X4(col: u32) -> vec4<f32> {
#ifdef NORM
    let v = X4_raw(col);
#ifdef SUBGROUP
    squares = squares + dot(v, v);
#endif
    return v * gain[col / 4u];
#else
    return X4_raw(col);
#endif
}
#endif

// Weights w of columns col .. col + 3 (col a multiple of 4) times the input's: one vector
// load of each with X_VEC4 (a lane's 4 columns are adjacent, so a subgroup's loads take a
// quarter of the cache lines scalar loads did), else column by column (MATMUL: 4 tokens each).
fn dot4(w: vec4<f32>, col: u32) -> Acc {
#ifdef X_VEC4
    return dot(w, X4(col));
#else
    return w.x * X(col) + w.y * X(col + 1u) + w.z * X(col + 2u) + w.w * X(col + 3u);
#endif
}

// Adds up `partial` in groups of `width` consecutive slots (a power of two), into the
// first slot of each group: a tree in workgroup memory. Every thread calls it (barriers);
// each writes its own slot first.
fn tree_sum(t: u32, width: u32) {
    workgroupBarrier();
    for (var stride = width / 2u; stride > 0u; stride = stride / 2u) {
        if (t % width < stride) {
            partial[t] = partial[t] + partial[t + stride];
        }
        workgroupBarrier();
    }
}

#ifdef NORM
#ifndef SUBGROUP
// Column `col` of the input row(s), or 0 past the row.
fn X_within(col: u32) -> Acc {
    return select(Acc(0.0), X_raw(min(col, params.cols - 1u)), col < params.cols);
}

// This thread's share of the sum of squares of the input row(s): columns t, t + WG, ...,
// four loads an iteration, issued before the first is used.
fn row_squares(t: u32) -> Acc {
    var a = Acc(0.0);
    var b = Acc(0.0);
    for (var col = t; col < params.cols; col = col + 4u * WG) {
        let v0 = X_raw(col);
        let v1 = X_within(col + WG);
        let v2 = X_within(col + 2u * WG);
        let v3 = X_within(col + 3u * WG);
        a = a + v0 * v0 + v2 * v2;
        b = b + v1 * v1 + v3 * v3;
    }
    return a + b;
}

// 1 / rms of the input row(s) into inv_rms, every thread's share of the squares summed over
// the whole workgroup in a tree (with SUBGROUP each subgroup has its own from its products'
// reads instead). Called by all threads (barriers), after the rows' products: the factor is
// the same for the whole row, so it scales each row's sum, and the products' weight loads
// (from device memory) need not wait behind the reduction's barriers (no load moves across a
// barrier). `partial` is free again when it returns.
fn norm_prologue(t: u32) {
    partial[t] = row_squares(t);
    tree_sum(t, WG);
    let total = partial[0];
    workgroupBarrier();
    inv_rms = inverseSqrt(total / f32(params.cols) + params.eps);
}
#endif
#endif

#include unit_products.wgsl

// Units in a row (HEADS: in the head's columns, whole blocks: the host checks).
fn row_units() -> u32 {
#ifdef HEADS
    return params.head_dim / UNIT_WEIGHTS;
#else
    return params.cols / UNIT_WEIGHTS;
#endif
}

// Unit u of the row's units the product reads (HEADS: counted from the head's first column).
fn row_unit(row: u32, u: u32) -> Acc {
#ifdef HEADS
    return unit_dot(row, col0 / UNIT_WEIGHTS + u);
#else
#ifdef EXPERTS
    return unit_dot(expert_first_row + row, u);
#else
    return unit_dot(row, u);
#endif
#endif
}

#ifdef SUBGROUP
// What a thread's slot of row_dot holds: with subgroups, the products of a row group's rows
// (ROWS of them, .x .. in order; ROWS = 1: .x alone, 2: .xy), as a subgroup takes ROWS
// consecutive rows at once.
alias Dot = vec4<f32>;

// Unit u of rows row .. row + ROWS - 1 (a row past the matrix clamped to its last, whose sum
// the caller drops) times the input: the products read the same input columns with no store
// between them, so the compiler loads them (and their gains) once; with NORM only the first
// row's squares count.
fn slot_dot(row: u32, u: u32) -> Dot {
    let last = params.rows - 1u;
    var p = Dot(0.0);
    p.x = row_unit(row, u);
#ifdef NORM
    let counted = squares;
#endif
    if (ROWS > 1u) {
        p.y = row_unit(min(row + 1u, last), u);
    }
    if (ROWS == 4u) {
        p.z = row_unit(min(row + 2u, last), u);
        p.w = row_unit(min(row + 3u, last), u);
    }
#ifdef NORM
    squares = counted;
#endif
    return p;
}
#else
// What a thread's slot of row_dot holds: the row's product (MATMUL: for 4 tokens).
alias Dot = Acc;

// Unit u of row `row` times the input.
fn slot_dot(row: u32, u: u32) -> Dot {
    return row_unit(row, u);
}
#endif

// Unit `v` of the slot's rows (of `n` units) times the input, or 0 past the row: the index is
// clamped into the row, so the load goes out whatever the select keeps (no branch; with NORM
// and SUBGROUP the squares of a unit past the row are dropped the same way).
fn slot_or_zero(row: u32, v: u32, n: u32) -> Dot {
#ifdef NORM
#ifdef SUBGROUP
    let kept = squares;
#endif
#endif
    let dot = slot_dot(row, min(v, max(n, 1u) - 1u));
#ifdef NORM
#ifdef SUBGROUP
    squares = select(kept, squares, v < n);
#endif
#endif
    return select(Dot(0.0), dot, v < n);
}

// This thread's share of row `row` times the input (with subgroups, of rows row .. row +
// ROWS - 1 at once: each unit's input loaded once for all of them): units lane, lane + lanes,
// ..., IN_FLIGHT an iteration into as many sums, so their loads are in flight at once (a GPU
// waits out each load's latency otherwise: on an H100 a Q4_1 matvec took about 1 us per
// serial load, 23-28 us a dispatch, 2026-11-26). An iteration's units past the end of the
// row are loaded clamped into it and their products dropped (a select, no branch between
// the loads), so the row's last units go in the same round as the rest of their iteration.
// Each such unit still costs its product: the host fits IN_FLIGHT to a decode row that a
// thread covers in at most 8 units (KernelOptions::units_in_flight_for: for 32 threads a row,
// a row of 576 Q4_1 columns is 3 units a thread, of 1536 6, and the LM head's 576 Q8_0 5),
// so that row is one round with no unit past its end for a whole subgroup. Each unit appears
// once in the loop body (its first always lies in the row; a slot past IN_FLIGHT is an
// override's constant branch, gone when the pipeline is made), which keeps the compiled
// kernel small: a separate tail after the loop doubled the inlined unit products, and with
// them the compile time (lavapipe took over a minute for the Q6_K kernels at 8 units in
// flight). The sums add up in one order for every IN_FLIGHT (a slot not taken adds 0).
fn row_dot(row: u32, lane: u32, lanes: u32) -> Dot {
    let n = row_units();
    var a = Dot(0.0);
    var b = Dot(0.0);
    var c = Dot(0.0);
    var d = Dot(0.0);
    var e = Dot(0.0);
    var f = Dot(0.0);
    var g = Dot(0.0);
    var h = Dot(0.0);
    for (var u = lane; u < n; u = u + IN_FLIGHT * lanes) {
        a = a + slot_dot(row, u);
        if (IN_FLIGHT > 1u) {
            b = b + slot_or_zero(row, u + lanes, n);
        }
        if (IN_FLIGHT > 2u) {
            c = c + slot_or_zero(row, u + 2u * lanes, n);
        }
        if (IN_FLIGHT > 3u) {
            d = d + slot_or_zero(row, u + 3u * lanes, n);
        }
        if (IN_FLIGHT > 4u) {
            e = e + slot_or_zero(row, u + 4u * lanes, n);
        }
        if (IN_FLIGHT > 5u) {
            f = f + slot_or_zero(row, u + 5u * lanes, n);
        }
        if (IN_FLIGHT > 6u) {
            g = g + slot_or_zero(row, u + 6u * lanes, n);
        }
        if (IN_FLIGHT > 7u) {
            h = h + slot_or_zero(row, u + 7u * lanes, n);
        }
    }
    return ((a + b) + (c + d)) + ((e + f) + (g + h));
}

// The gated output for gate g and up u: act(g) * u (SwiGLU, GeGLU).
fn glu(g: Acc, u: Acc) -> Acc {
    return activate(g) * u;
}

// The activation params.activation names: silu(v) = v / (1 + e^-v) (0), GELU's tanh form
// (ACT_GELU) or the squared ReLU, max(v, 0)^2 (ACT_RELU_SQUARED).
fn activate(v: Acc) -> Acc {
    if (params.activation == ACT_GELU) {
        return gelu(v);
    }
    if (params.activation == ACT_RELU_SQUARED) {
        let r = max(v, Acc(0.0));
        return r * r;
    }
    return v / (1.0 + exp(-v));
}

// GELU's tanh form, gelu(g) = 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3))). tanh is
// written through exp as softcap.wgsl's stable_tanh writes it (here for Acc, a vec4 in
// MATMUL, where that function takes an f32).
fn gelu(g: Acc) -> Acc {
    let z = 0.7978846 * (g + 0.044715 * g * g * g);
    let tanh_z = 1.0 - 2.0 / (exp(2.0 * z) + 1.0);
    return 0.5 * g * (1.0 + tanh_z);
}

// Row `row`'s sum (each token's, in MATMUL) as its epilogue leaves it before store(): its
// bias added (BIAS), then the activation (ACT); as it is without either.
fn finish(row: u32, sum: Acc) -> Acc {
    var v = sum;
#ifdef BIAS
    v = v + gain_at(row);
#endif
#ifdef ACT
    v = activate(v);
#endif
    return v;
}

#ifdef QKV_BIAS
// Row r's bias, in the gain binding after its cols gains (with NORM), or from its start.
fn qkv_bias(r: u32) -> f32 {
#ifdef NORM
    return gain_at(params.cols + r);
#else
    return gain_at(r);
#endif
}
#endif

#ifdef MATVEC
// The pair epilogue: rows `row` (even) and row + 1 came to a and b.
fn pair_out(row: u32, a: f32, b: f32) {
#ifdef GLU
#ifdef EXPERTS
    y[y_first + row / 2u] = glu(a, b);
#else
    y[row / 2u] = glu(a, b);
#endif
#endif
#ifdef ROPE_KV
#ifdef QKV_BIAS
    rope_and_store(row, 0u, step.pos, a + qkv_bias(row), b + qkv_bias(row + 1u));
#else
    rope_and_store(row, 0u, step.pos, a, b);
#endif
#endif
}
#endif

// What the fused forms compute before the rows' products, in workgroup memory: the
// attention (ATTENTION), the merged chunks (COMBINE), the input row plus the merged per-head
// parts (MERGE_IN), the parts' weights (MERGE_OUT), the input row plus the post-normed
// attention output (POST_NORM_IN). Called by all threads (barriers).
fn prologues(t: u32) {
#ifdef ATTENTION
    attention_prologue(t);
#endif
#ifdef COMBINE
    combine_prologue(t);
#endif
#ifdef MERGE_IN
    merge_input(t);
#endif
#ifdef POST_NORM_IN
    post_norm_input(t);
#endif
#ifdef MERGE_OUT
    merge_weights(t);
#endif
}

// y[i] = s v, or y[i] += s v, s = params.out_scale (MERGE_OUT: y[i] += merged[i] first;
// HEADS: row i of the part; HEAD_NORM: kept for the epilogue, s = 1).
fn store(i: u32, product: f32) {
#ifdef HEAD_NORM
    keep_head_row(i, product);
#else
    let v = product * params.out_scale;
#ifdef HEADS
    y[part_at + 2u + i] = v;
#else
#ifdef MERGE_OUT
    y[i] = (y[i] + merged(i)) + v;
#else
#ifdef EXPERTS
    y[y_first + i] = v;
#else
    if (params.accumulate != 0u) {
        y[i] = y[i] + v;
    } else {
        y[i] = v;
    }
#endif
#endif
#endif
#endif
}

#ifdef SUBGROUP
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) lanes: u32,
        @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) n_sg: u32) {
    let t = lid.x;
    x_rows = vec4<u32>(select(0u, (step.n_tokens - 1u) * params.cols, params.last_token != 0u));
#ifdef EXPERTS
    expert_prologue(wg);
#endif
    sg_id = sg;
    sg_lane = lane;
    sg_count = n_sg;
    prologues(t);
    // Rows of the workgroup; a row group takes ROWS consecutive ones a round.
#ifdef HEAD_NORM
    // One head's (head_norm_rope.wgsl), in as many rounds as it takes.
    let units = params.head_dim;
    head_first = wg.x * units;
#else
    let units = ROWS * WG / TPR;
#endif
    let first = wg.x * units;
    // Subgroups a row spans (its row group: one without SHARED_ROWS), and this one's place
    // among them.
    let parts = select(1u, max(1u, TPR / lanes), SHARED_ROWS);
    let groups = n_sg / parts;
    let group = sg / parts;
    let part = sg % parts;
    // The same trip count in every subgroup, so subgroupAdd runs in uniform control flow.
    let rounds = (units / ROWS + groups - 1u) / groups;
    for (var k = 0u; k < rounds; k = k + 1u) {
        let i = (group + k * groups) * ROWS;
        let row = first + i;
        let live = i < units && row < params.rows;
        // The round's rows' sums, .x .. in order (.y a pair's up row).
        var sum = vec4<f32>(0.0);
        if (live) {
            sum = row_dot(row, part * lanes + lane, parts * lanes);
        }
        if (ROWS == 4u) {
            sum = subgroupAdd(sum);
        } else if (ROWS == 2u) {
            sum = vec4<f32>(subgroupAdd(sum.xy), 0.0, 0.0);
        } else {
            sum.x = subgroupAdd(sum.x);
        }
#ifdef NORM
        // The RMSNorm's 1 / rms: the group's first row read every column of the input once,
        // so its lanes' squares add up to the row's (a subgroup whose first row is past the
        // matrix has no row to scale).
        if (k == 0u) {
            let sq = subgroupAdd(squares);
            if (SHARED_ROWS) {
                if (group == 0u && lane == 0u) {
                    group_squares[part] = sq;
                }
            } else {
                inv_rms = inverseSqrt(sq / f32(params.cols) + params.eps);
                sum = sum * inv_rms;
            }
        } else if (!SHARED_ROWS) {
            sum = sum * inv_rms;
        }
#endif
        if (live && lane == 0u) {
            if (SHARED_ROWS) {
                for (var r = 0u; r < ROWS && row + r < params.rows; r = r + 1u) {
                    partial[(i + r) * parts + part] = sum[r];
                }
            } else {
#ifdef PAIRS
                if (ROWS == 1u) {
                    partial[i] = sum.x;
                } else {
                    // The pairs are this group's: their epilogue needs no other's sums (rows
                    // come in pairs and row is even, so a second pair is whole or absent).
                    pair_out(row, sum.x, sum.y);
                    if (ROWS == 4u && row + 2u < params.rows) {
                        pair_out(row + 2u, sum.z, sum.w);
                    }
                }
#else
                for (var r = 0u; r < ROWS && row + r < params.rows; r = r + 1u) {
                    store(row + r, finish(row + r, sum[r]));
                }
#endif
            }
        }
    }
    if (SHARED_ROWS) {
        // A row's subgroups' sums meet in workgroup memory; a thread per row (PAIRS: per
        // pair) adds them up.
        workgroupBarrier();
        var scale = 1.0;
#ifdef NORM
        var sq = 0.0;
        for (var p = 0u; p < parts; p = p + 1u) {
            sq = sq + group_squares[p];
        }
        scale = inverseSqrt(sq / f32(params.cols) + params.eps);
#endif
#ifdef PAIRS
        let row = first + 2u * t;
        if (2u * t < units && row + 1u < params.rows) {
            pair_out(row, row_total(2u * t, parts) * scale, row_total(2u * t + 1u, parts) * scale);
        }
#else
        for (var r = t; r < units && first + r < params.rows; r = r + WG) {
            store(first + r, finish(first + r, row_total(r, parts) * scale));
        }
#endif
    } else if (ROWS == 1u) {
#ifdef PAIRS
        // Each row went to its own subgroup: the pair's two sums meet in workgroup memory.
        workgroupBarrier();
        let row = first + 2u * t;
        if (2u * t < units && row + 1u < params.rows) {
            pair_out(row, partial[2u * t], partial[2u * t + 1u]);
        }
#endif
    }
#ifdef HEAD_NORM
    workgroupBarrier();
    head_norm_epilogue(t);
#endif
}

// With SHARED_ROWS: row i of the workgroup, its `parts` subgroups' sums added up in order.
fn row_total(i: u32, parts: u32) -> f32 {
    var total = 0.0;
    for (var p = 0u; p < parts; p = p + 1u) {
        total = total + partial[i * parts + p];
    }
    return total;
}
#else
#ifdef HEAD_NORM
// One head a workgroup (head_norm_rope.wgsl): its rows in rounds of WG / TPR, the input's
// 1 / rms first (the rounds' products then wait behind its barriers, unlike the main below).
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = lid.x;
    let lane = t % TPR;
    x_rows = vec4<u32>(select(0u, (step.n_tokens - 1u) * params.cols, params.last_token != 0u));
    head_first = wg.x * params.head_dim;
#ifdef NORM
    norm_prologue(t);
#endif
    let per_round = WG / TPR;
    for (var k = 0u; k * per_round < params.head_dim; k = k + 1u) {
        let i = k * per_round + t / TPR;
        let row = head_first + i;
        let live = i < params.head_dim && row < params.rows;
        var sum = 0.0;
        if (live) {
            sum = row_dot(row, lane, TPR);
        }
#ifdef NORM
        sum = sum * inv_rms;
#endif
        partial[t] = sum;
        tree_sum(t, TPR);
        if (lane == 0u && live) {
            store(row, partial[t]);
        }
    }
    workgroupBarrier();
    head_norm_epilogue(t);
}
#else
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = lid.x;
    let lane = t % TPR;
    let row = wg.x * (WG / TPR) + t / TPR;
#ifdef MATVEC
    x_rows = vec4<u32>(select(0u, (step.n_tokens - 1u) * params.cols, params.last_token != 0u));
#ifdef EXPERTS
    expert_prologue(wg);
#endif
    let live = row < params.rows;
#endif
#ifdef MATMUL
    let b0 = wg.y * 4u;
    let last = step.n_tokens - 1u;
    x_rows = vec4<u32>(min(b0, last), min(b0 + 1u, last), min(b0 + 2u, last), min(b0 + 3u, last)) * params.cols;
    let live = row < params.rows && b0 < step.n_tokens;
#endif
#ifdef HEADS
    // A chunk past the step's position (or a spare workgroup) has nothing to write.
    if (wg.y >= params.n_heads || wg.z >= params.n_chunks || wg.z * SPLIT > step.pos) {
        return;
    }
    heads_prologue(t, wg.y, wg.z, wg.x == 0u);
#endif
    prologues(t);
    var sum = Acc(0.0);
    if (live) {
        sum = row_dot(row, lane, TPR);
    }
#ifdef NORM
    // The RMSNorm's 1 / rms after the product (see norm_prologue).
    norm_prologue(t);
    sum = sum * inv_rms;
#endif
    partial[t] = sum;
    tree_sum(t, TPR);
#ifdef PAIRS
    // Lane 0 of row 2i reads row 2i + 1's sum, TPR slots further on (tree_sum ended on a
    // barrier).
    if (lane == 0u && row % 2u == 0u && row + 1u < params.rows) {
        let g = partial[t];
        let u = partial[t + TPR];
#ifdef MATVEC
        pair_out(row, g, u);
#endif
#ifdef MATMUL
        let v = glu(g, u);
        let outputs = params.rows / 2u;
        for (var j = 0u; j < 4u; j = j + 1u) {
            if (b0 + j < step.n_tokens) {
                y[(b0 + j) * outputs + row / 2u] = v[j];
            }
        }
#endif
    }
#else
    if (lane == 0u && row < params.rows) {
#ifdef MATVEC
        store(row, finish(row, partial[t]));
#endif
#ifdef MATMUL
        let total = finish(row, partial[t]);
        for (var j = 0u; j < 4u; j = j + 1u) {
            if (b0 + j < step.n_tokens) {
                store((b0 + j) * params.y_stride + row, total[j]);
            }
        }
#endif
    }
#endif
}
#endif
#endif

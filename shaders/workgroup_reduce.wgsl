// workgroup_reduce.wgsl: the max or the sum of one value per thread over the whole
// workgroup, for every thread (attention_head.wgsl, attention_weights.wgsl). The includer
// declares WG (override) and `partial: array<f32, 256>` in workgroup memory, and with
// SUBGROUP sets sg_id, sg_lane and sg_count before the first call. Every thread calls it
// (barriers).

const EMPTY: f32 = -3.0e38; // below any real score; Tint rejects literals at the f32 limit

#ifdef SUBGROUP
// Which subgroup the thread is in, its lane, and how many subgroups the workgroup has.
var<private> sg_id: u32;
var<private> sg_lane: u32;
var<private> sg_count: u32;

// max (is_max) or sum of v over the workgroup, for every thread: in each subgroup first
// (subgroupMax, subgroupAdd), then across the subgroups' results in workgroup memory.
fn reduce(v: f32, t: u32, is_max: bool) -> f32 {
    var r = select(subgroupAdd(v), subgroupMax(v), is_max);
    if (sg_lane == 0u) {
        partial[sg_id] = r;
    }
    workgroupBarrier();
    r = partial[0];
    for (var i = 1u; i < sg_count; i = i + 1u) {
        r = select(r + partial[i], max(r, partial[i]), is_max);
    }
    workgroupBarrier();
    return r;
}
#else
// max (is_max) or sum of v over the workgroup, for every thread: a tree in workgroup memory.
fn reduce(v: f32, t: u32, is_max: bool) -> f32 {
    partial[t] = v;
    workgroupBarrier();
    for (var r = WG / 2u; r > 0u; r = r / 2u) {
        if (t < r) {
            partial[t] = select(partial[t] + partial[t + r], max(partial[t], partial[t + r]), is_max);
        }
        workgroupBarrier();
    }
    let total = partial[0];
    workgroupBarrier();
    return total;
}
#endif

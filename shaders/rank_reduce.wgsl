// rank_reduce.wgsl: the highest-ranked (key, id) over a workgroup, ranked as the sampler's
// greedy choice ranks logits (src/sampler/ranking.rs: f32::total_cmp through order_key; ties
// to the lower id): argmax.wgsl's and expert_pick.wgsl's. The includer declares WG
// (override, a power of two <= 256); each thread writes its own (key, id) to best_key[t]
// and best_id[t], then every thread calls reduce_ranked (barriers), after which slot 0
// holds the winner.

// Each thread's winner so far: its ranking key and its id.
var<workgroup> best_key: array<u32, 256>;
var<workgroup> best_id: array<u32, 256>;

// The value's place in total_cmp's ascending order as an unsigned integer: a negative
// value's bits all flipped, the others with the sign bit set.
fn order_key(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}

// Whether (key, id) ranks above (best, best_at): a higher key, or the same at a lower id.
fn ranks_above(key: u32, id: u32, best: u32, best_at: u32) -> bool {
    return key > best || (key == best && id < best_at);
}

// The workgroup's threads' (best_key[t], best_id[t]) reduced into slot 0, in a tree.
fn reduce_ranked(t: u32) {
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (t < stride && ranks_above(best_key[t + stride], best_id[t + stride], best_key[t], best_id[t])) {
            best_key[t] = best_key[t + stride];
            best_id[t] = best_id[t + stride];
        }
        workgroupBarrier();
    }
}

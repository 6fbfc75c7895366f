//! The ranking of the vocabulary: effective logit descending, ties by lower id first.
//!
//! A token's place is one `u64` key (the logit's order in the high half, inverted so
//! larger logits come first, and the id in the low half), so the ranking is the keys'
//! plain order: no comparator reaching back into the logits, and no two keys equal.

use std::collections::BinaryHeap;

/// The ranking key of token `id` with effective logit `e`: smaller key, higher rank. Ranks
/// as `f32::total_cmp` orders the logits (descending), then by id (ascending).
#[inline(always)]
pub fn key(e: f32, id: u32) -> u64 {
    let b = e.to_bits();
    // Ascending with total_cmp: negative values have all bits flipped, the rest the sign set.
    let ordered = if b & 0x8000_0000 != 0 { !b } else { b | 0x8000_0000 };
    (u64::from(!ordered) << 32) | u64::from(id)
}

/// The `m` highest-ranked token ids in rank order (all of them when `m >= e.len()`).
pub fn top(e: &[f32], m: usize) -> Vec<u32> {
    let m = m.min(e.len());
    let keys = if m == 0 {
        Vec::new()
    } else if m * 16 <= e.len() {
        // Few wanted: one pass keeping the m smallest keys in a max-heap; most tokens are
        // turned away by a single comparison with the heap's top.
        let mut heap: BinaryHeap<u64> = e[..m].iter().enumerate().map(|(id, &x)| key(x, id as u32)).collect();
        let mut worst = heap.peek().copied().unwrap_or(u64::MAX);
        for (id, &x) in e.iter().enumerate().skip(m) {
            let k = key(x, id as u32);
            if k < worst {
                if let Some(mut top) = heap.peek_mut() {
                    *top = k;
                }
                worst = heap.peek().copied().unwrap_or(u64::MAX);
            }
        }
        heap.into_sorted_vec()
    } else {
        let mut keys: Vec<u64> = e.iter().enumerate().map(|(id, &x)| key(x, id as u32)).collect();
        if m < keys.len() {
            keys.select_nth_unstable(m);
            keys.truncate(m);
        }
        keys.sort_unstable();
        keys
    };
    keys.into_iter().map(|k| k as u32).collect()
}

/// The 0-based rank of token `id`: how many tokens rank above it.
pub fn rank_of(e: &[f32], id: u32) -> usize {
    let k = key(e[id as usize], id);
    e.iter().enumerate().filter(|&(j, &x)| key(x, j as u32) < k).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both paths (heap and selection) against a full comparator sort, with ties, signed
    /// zeros and infinities, on odd sizes.
    #[test]
    fn top_matches_a_full_sort() {
        for n in [1usize, 2, 15, 17, 33, 1000, 4099] {
            let mut e: Vec<f32> = (0..n).map(|i| ((i * 2654435761) % 97) as f32 / 7.0 - 6.0).collect();
            e[n / 2] = -0.0;
            e[n - 1] = 0.0;
            if n > 3 {
                e[1] = f32::INFINITY;
                e[2] = f32::NEG_INFINITY;
            }
            let mut want: Vec<u32> = (0..n as u32).collect();
            want.sort_by(|&a, &b| e[b as usize].total_cmp(&e[a as usize]).then(a.cmp(&b)));
            for m in [0, 1, 3, n / 16, n / 16 + 1, n / 2, n - 1, n, n + 5] {
                assert_eq!(top(&e, m), want[..m.min(n)], "n {n} m {m}");
            }
            for (r, &id) in want.iter().enumerate().step_by(7) {
                assert_eq!(rank_of(&e, id), r, "n {n} id {id}");
            }
        }
    }
}

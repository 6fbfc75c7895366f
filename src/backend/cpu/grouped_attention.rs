//! Attention over the KV cache's keys in blocks of positions, the query heads of one KV
//! head together (every layer's attention on the CPU, a prefill's and a decode step's).
//!
//! [`ops::dot`] gives one query's product with one key: sixteen lanes of partial sums, then
//! the lanes added one after another, a chain of sixteen dependent additions for every
//! score, and each query loads every key and value again. Here the cache keeps each layer's
//! keys in blocks of [`LANES`] positions, `[head_dim][LANES]` per KV head, and a query's
//! products with a block's keys are `LANES` sums side by side in one vector; the query heads
//! that share a KV head (a token's group, with the same positions) take each block's keys,
//! then each position's values, from one load. The multiplications and additions are
//! [`ops::attention`]'s, in its order, so every weight and output has the same bits as one
//! query and one position at a time (that function, over keys in rows, stays the twin the
//! GPU's kernels are tested against).

use super::cache_float::CacheFloat;
use super::ops::{self, AttentionInput, HeadValues};
use std::ops::Range;

/// Positions in one block: the vector the products of one query with a block's keys are
/// summed in.
pub const LANES: usize = 8;

/// Lanes of partial sums in `ops::dot`: position `i` of a head joins lane `i % CHUNK`, the
/// lanes are added in order, then the positions past the last whole chunk.
const CHUNK: usize = 16;

/// One layer's cached keys in blocks of [`LANES`] positions, grown as positions arrive, each
/// stored as `T` ([`CacheFloat`]: `f32`, or a half float).
///
/// Layout: `[n_blocks][n_kv_heads][head_dim]` columns of `[LANES]`: position `j` of KV head
/// `h` in block `j / LANES`, lane `j % LANES`. The last block's lanes past the positions held
/// are 0.
#[derive(Debug, Clone)]
pub struct KeyBlocks<T = f32> {
    columns: Vec<[T; LANES]>,
    head_dim: usize,
    n_kv_heads: usize,
    len: usize,
}

impl<T: CacheFloat> KeyBlocks<T> {
    /// No positions yet, for keys of `n_kv_heads` heads of `head_dim`.
    pub fn new(head_dim: usize, n_kv_heads: usize) -> Self {
        KeyBlocks { columns: Vec::new(), head_dim, n_kv_heads, len: 0 }
    }

    /// Appends one row of keys per position. Shapes: `keys`: `[n, n_kv_heads * head_dim]`.
    pub fn append(&mut self, keys: &[f32]) {
        let width = self.head_dim * self.n_kv_heads;
        for row in keys.chunks_exact(width) {
            let (block, lane) = self.grow();
            for (column, &k) in self.columns[block * width..][..width].iter_mut().zip(row) {
                column[lane] = T::store(k);
            }
        }
    }

    /// Appends `n` positions of zero keys (a layer a pass skips).
    pub fn append_zeros(&mut self, n: usize) {
        for _ in 0..n {
            self.grow();
        }
    }

    /// One more position: its block and lane, the block added (zeros) where it is a new one.
    fn grow(&mut self) -> (usize, usize) {
        let (block, lane) = (self.len / LANES, self.len % LANES);
        if lane == 0 {
            self.columns.resize((block + 1) * self.head_dim * self.n_kv_heads, [T::default(); LANES]);
        }
        self.len += 1;
        (block, lane)
    }

    /// Forgets every position from `len` on (their lanes back to 0).
    pub fn truncate(&mut self, len: usize) {
        if len >= self.len {
            return;
        }
        let width = self.head_dim * self.n_kv_heads;
        self.columns.truncate(len.div_ceil(LANES) * width);
        if !len.is_multiple_of(LANES) {
            for column in &mut self.columns[len / LANES * width..] {
                column[len % LANES..].fill(T::default());
            }
        }
        self.len = len;
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of the keys held, `len * n_kv_heads * head_dim * T::BYTES` (the last block's lanes
    /// past them not counted: the cache grows a position at a time, as the page shows it).
    pub fn bytes(&self) -> usize {
        self.len * self.n_kv_heads * self.head_dim * T::BYTES
    }

    /// `dots[r * row + j] = queries[r] . k_j` for the positions `j` in `range` of KV head
    /// `kv_head`, each with the bits [`ops::dot`] gives for the key as stored; nothing else in
    /// `dots` is written.
    /// Shapes: `queries[r]`: `[head_dim]`; `dots`: `[queries.len() * row]`, `row >= range.end`,
    /// `range.end <= len()`.
    pub fn dots(&self, kv_head: usize, queries: &[&[f32]], range: Range<usize>, dots: &mut [f32], row: usize) {
        // The common head sizes with their loops' bounds known.
        match self.head_dim {
            64 => self.dots_sized(64, kv_head, queries, range, dots, row),
            128 => self.dots_sized(128, kv_head, queries, range, dots, row),
            hd => self.dots_sized(hd, kv_head, queries, range, dots, row),
        }
    }

    #[inline(always)]
    fn dots_sized(&self, hd: usize, kv_head: usize, queries: &[&[f32]], range: Range<usize>, dots: &mut [f32], row: usize) {
        debug_assert!(range.end <= self.len && range.end <= row && hd == self.head_dim);
        let keys = HeadBlocks { columns: &self.columns, hd, stride: hd * self.n_kv_heads, offset: kv_head * hd };
        let blocks = range.start / LANES..range.end.div_ceil(LANES);
        // Four queries at a time with two blocks in flight, three with two (a group of three
        // query heads, SmolLM2's, loading each key once), two with four, one with four: six to
        // eight sums' chains interleaved where the queries allow.
        let mut r = 0;
        while r < queries.len() {
            let (q, rows) = (&queries[r..], &mut dots[r * row..]);
            r += match q.len() {
                4.. => query_dots::<T, 4, 2>(&keys, q, blocks.clone(), &range, rows, row),
                3 => query_dots::<T, 3, 2>(&keys, q, blocks.clone(), &range, rows, row),
                2 => query_dots::<T, 2, 4>(&keys, q, blocks.clone(), &range, rows, row),
                _ => query_dots::<T, 1, 4>(&keys, q, blocks.clone(), &range, rows, row),
            };
        }
    }
}

/// One KV head's blocks: block `b`'s `hd` columns start at `b * stride + offset`.
struct HeadBlocks<'a, T> {
    columns: &'a [[T; LANES]],
    hd: usize,
    stride: usize,
    offset: usize,
}

impl<T> HeadBlocks<'_, T> {
    #[inline(always)]
    fn block(&self, b: usize) -> &[[T; LANES]] {
        &self.columns[b * self.stride + self.offset..][..self.hd]
    }
}

/// [`KeyBlocks::dots`] for the first `Q` of `queries` over one KV head's `blocks` of `keys`,
/// `B` blocks at a time; returns `Q`.
#[inline(always)]
fn query_dots<T: CacheFloat, const Q: usize, const B: usize>(
    keys: &HeadBlocks<T>,
    queries: &[&[f32]],
    blocks: Range<usize>,
    range: &Range<usize>,
    dots: &mut [f32],
    row: usize,
) -> usize {
    let queries: [&[f32]; Q] = std::array::from_fn(|r| &queries[r][..keys.hd]);
    let mut b = blocks.start;
    while b < blocks.end {
        let take = B.min(blocks.end - b);
        let mut sums = [[[0.0f32; LANES]; B]; Q];
        if take == B {
            block_dots::<T, Q, B>(&queries, std::array::from_fn(|bb| keys.block(b + bb)), &mut sums);
        } else {
            for bb in 0..take {
                let mut one = [[[0.0f32; LANES]; 1]; Q];
                block_dots::<T, Q, 1>(&queries, [keys.block(b + bb)], &mut one);
                for (s, o) in sums.iter_mut().zip(&one) {
                    s[bb] = o[0];
                }
            }
        }
        // The lanes inside `range`.
        for (r, sums) in sums.iter().enumerate() {
            for (bb, sum) in sums[..take].iter().enumerate() {
                let base = (b + bb) * LANES;
                for (lane, &s) in sum.iter().enumerate() {
                    if range.contains(&(base + lane)) {
                        dots[r * row + base + lane] = s;
                    }
                }
            }
        }
        b += take;
    }
    Q
}

/// `sums[r][b][lane] = queries[r] . k` for the key in lane `lane` of `blocks[b]` (`head_dim`
/// columns each), summed as [`ops::dot`] sums: each of its `CHUNK` lanes of partial products
/// in chunk order, then those lanes in order from -0.0 (an `f32` sum's start), then the tail
/// past the last whole chunk, summed from 0.0.
#[inline(always)]
fn block_dots<T: CacheFloat, const Q: usize, const B: usize>(
    queries: &[&[f32]; Q],
    blocks: [&[[T; LANES]]; B],
    sums: &mut [[[f32; LANES]; B]; Q],
) {
    let hd = queries[0].len();
    let blocks: [&[[T; LANES]]; B] = std::array::from_fn(|b| &blocks[b][..hd]);
    let whole = hd / CHUNK * CHUNK;
    let mut total = [[[-0.0f32; LANES]; B]; Q];
    for i in 0..CHUNK {
        let mut partial = [[[0.0f32; LANES]; B]; Q];
        for d in (i..whole).step_by(CHUNK) {
            products::<T, Q, B>(queries, &blocks, d, &mut partial);
        }
        for r in 0..Q {
            for b in 0..B {
                for l in 0..LANES {
                    total[r][b][l] += partial[r][b][l];
                }
            }
        }
    }
    let mut tail = [[[0.0f32; LANES]; B]; Q];
    for d in whole..hd {
        products::<T, Q, B>(queries, &blocks, d, &mut tail);
    }
    for r in 0..Q {
        for b in 0..B {
            for l in 0..LANES {
                sums[r][b][l] = total[r][b][l] + tail[r][b][l];
            }
        }
    }
}

/// `acc[r][b][lane] += queries[r][d] * k[d]` for the key in lane `lane` of `blocks[b]`
/// (widened to `f32` once for the `Q` queries).
#[inline(always)]
fn products<T: CacheFloat, const Q: usize, const B: usize>(
    queries: &[&[f32]; Q],
    blocks: &[&[[T; LANES]]; B],
    d: usize,
    acc: &mut [[[f32; LANES]; B]; Q],
) {
    for b in 0..B {
        let k = T::widen(&blocks[b][d]);
        for r in 0..Q {
            let x = queries[r][d];
            for l in 0..LANES {
                acc[r][b][l] += x * k[l];
            }
        }
    }
}

/// The attention outputs of query heads `heads` of one KV head (`kv_head`), all of one token
/// (the same positions), into `out` (`[heads.len() * head_dim]`), each head's weights left
/// in `scores[h * n_pos..][..n_pos]` (0 before `first`): [`ops::attention`]'s bits for the
/// keys and values as stored, the keys from `blocks` and the values from `values`
/// (`[positions, kv_stride]`; this layer's: the heads' `keys` and `values` are not read),
/// each position's values loaded once for the heads.
pub fn attend_heads<T: CacheFloat>(
    blocks: &KeyBlocks<T>,
    values: &[T],
    kv_head: usize,
    heads: &[AttentionInput],
    scores: &mut [f32],
    out: &mut [f32],
) {
    let (a, hd) = (&heads[0], blocks.head_dim);
    let n_pos = a.n_pos;
    attention_weights(blocks, kv_head, heads, scores);
    let v = HeadValues { values, kv_stride: a.kv_stride, kv_offset: a.kv_offset, first: a.first };
    let weights: Vec<&[f32]> = scores.chunks_exact(n_pos).map(|w| &w[a.first..]).collect();
    let mut outs: Vec<&mut [f32]> = out.chunks_exact_mut(hd).collect();
    // Four or three heads at a time (each position's values loaded once for a group of
    // three), else two, 32 columns each (16 vectors of sums for four), where the head's size
    // allows; else one head at a time as `ops::attention` sums.
    let mut h = 0;
    while h < heads.len() {
        h += match (hd % 32, heads.len() - h) {
            (0, 4..) => sums_of::<T, 4>(&v, &weights[h..], &mut outs[h..]),
            (0, 3) => sums_of::<T, 3>(&v, &weights[h..], &mut outs[h..]),
            (0, 2) => sums_of::<T, 2>(&v, &weights[h..], &mut outs[h..]),
            _ => {
                ops::weighted_sum(&v, weights[h], outs[h]);
                1
            }
        };
    }
}

/// The attention weights of query heads `heads` of one KV head (`kv_head`), all of one
/// token, into `weights[h * n_pos..][..n_pos]` (0 before `first`):
/// [`ops::attention_weights`]'s bits, the keys from `blocks`.
pub fn attention_weights<T: CacheFloat>(blocks: &KeyBlocks<T>, kv_head: usize, heads: &[AttentionInput], weights: &mut [f32]) {
    let a = &heads[0];
    let queries: Vec<&[f32]> = heads.iter().map(|h| h.q).collect();
    blocks.dots(kv_head, &queries, a.first..a.n_pos, weights, a.n_pos);
    for (h, weights) in heads.iter().zip(weights.chunks_exact_mut(a.n_pos)) {
        ops::weights_of_dots(h, weights);
    }
}

/// [`ops::weighted_sums`] of the first `H` heads, 32 columns at a time; returns `H`.
fn sums_of<T: CacheFloat, const H: usize>(v: &HeadValues<T>, weights: &[&[f32]], outs: &mut [&mut [f32]]) -> usize {
    let weights: [&[f32]; H] = std::array::from_fn(|h| weights[h]);
    let outs: &mut [&mut [f32]; H] = (&mut outs[..H]).try_into().expect("H outputs");
    ops::weighted_sums::<T, H, 32>(v, weights, outs);
    H
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::ops;
    use half::f16;

    /// `n_pos` rows of keys appended in pieces of 1, 2, 3, ... positions (blocks filled
    /// across appends).
    fn blocks_of<T: CacheFloat>(keys: &[f32], hd: usize, n_kv: usize, n_pos: usize) -> KeyBlocks<T> {
        let mut blocks = KeyBlocks::new(hd, n_kv);
        let (mut at, mut piece) = (0, 1);
        while at < n_pos {
            let take = piece.min(n_pos - at);
            blocks.append(&keys[at * hd * n_kv..][..take * hd * n_kv]);
            (at, piece) = (at + take, piece + 1);
        }
        assert_eq!(blocks.len(), n_pos);
        blocks
    }

    /// Deterministic values in about [-2, 2] with every bit of the mantissa in play.
    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s as f32 / u32::MAX as f32) * 4.0 - 2.0
            })
            .collect()
    }

    /// `xs` as the cache stores them as `T`, back in `f32`s: what the reference twins read.
    fn as_stored<T: CacheFloat>(xs: &[f32]) -> Vec<f32> {
        xs.iter().map(|&x| T::store(x).to_f32()).collect()
    }

    #[test]
    fn every_score_has_the_bits_of_ops_dot() {
        scores_have_the_bits_of_ops_dot::<f32>();
        scores_have_the_bits_of_ops_dot::<f16>();
    }

    /// Each score's bits for keys stored as `T` against [`ops::dot`]'s for those keys in
    /// `f32`.
    fn scores_have_the_bits_of_ops_dot<T: CacheFloat>() {
        // Head sizes with and without a tail past the last chunk of 16 (and one below 16),
        // position counts that are not multiples of the block or of the blocks in flight,
        // ranges starting mid-block (a sliding window's), 1 to 7 queries at once.
        for (hd, n_kv, n_pos, n_q) in [(64, 3, 37, 4), (80, 2, 29, 3), (72, 1, 45, 7), (7, 2, 9, 1), (128, 1, 8, 5), (64, 2, 1, 2)] {
            let stride = hd * n_kv;
            let keys = values(n_pos * stride, (hd * 31 + n_pos) as u32);
            let blocks = blocks_of::<T>(&keys, hd, n_kv, n_pos);
            let keys = as_stored::<T>(&keys);
            let q = values(hd * n_q, hd as u32);
            let queries: Vec<&[f32]> = q.chunks_exact(hd).collect();
            let row = n_pos + 2;
            for h in 0..n_kv {
                for start in [0, 1, n_pos / 2, n_pos - 1] {
                    // Planted outside each query's range: nothing is written there.
                    let mut dots = vec![f32::NAN; n_q * row];
                    blocks.dots(h, &queries, start..n_pos, &mut dots, row);
                    for (r, (query, dots)) in queries.iter().zip(dots.chunks_exact(row)).enumerate() {
                        for (j, got) in dots.iter().enumerate() {
                            if (start..n_pos).contains(&j) {
                                let want = ops::dot(query, &keys[j * stride + h * hd..][..hd]);
                                assert_eq!(
                                    got.to_bits(),
                                    want.to_bits(),
                                    "hd {hd}, head {h}, query {r}, position {j}: {got} against {want}"
                                );
                            } else {
                                assert!(got.is_nan(), "hd {hd}, query {r}: position {j} outside {start}..{n_pos} written");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_groups_outputs_and_weights_have_ops_attentions_bits() {
        outputs_and_weights_have_ops_attentions_bits::<f32>();
        outputs_and_weights_have_ops_attentions_bits::<f16>();
    }

    /// A group's outputs and weights over keys and values stored as `T` against
    /// [`ops::attention`]'s over those keys and values in `f32`.
    fn outputs_and_weights_have_ops_attentions_bits<T: CacheFloat>() {
        // Groups of 1 to 7 query heads (four, two and one at a time), head sizes summed 32
        // columns at a time and not, sliding windows, ALiBi slopes and a softcap.
        for (hd, n_kv, group, n_pos, first, softcap) in [
            (64, 2, 4, 37, 0, None),
            (64, 1, 7, 21, 5, Some(3.0)),
            (96, 2, 3, 13, 0, None),
            (80, 1, 2, 19, 4, None),
            (24, 3, 1, 11, 0, Some(1.5)),
        ] {
            let stride = hd * n_kv;
            let keys = values(n_pos * stride, (hd + n_pos) as u32);
            let vals = values(n_pos * stride, (hd * 7 + n_pos) as u32);
            let q = values(hd * group, (group * 5 + hd) as u32);
            let blocks = blocks_of::<T>(&keys, hd, n_kv, n_pos);
            let mut stored_values = Vec::new();
            T::extend(&mut stored_values, &vals);
            let (keys, vals) = (as_stored::<T>(&keys), as_stored::<T>(&vals));
            for kv_head in 0..n_kv {
                let heads: Vec<AttentionInput> = (0..group)
                    .map(|h| AttentionInput {
                        q: &q[h * hd..][..hd],
                        keys: &keys,
                        values: &vals,
                        kv_stride: stride,
                        kv_offset: kv_head * hd,
                        n_pos,
                        first,
                        scale: 1.0 / (hd as f32).sqrt(),
                        softcap,
                        alibi_slope: if softcap.is_some() { 0.25 * h as f32 } else { 0.0 },
                    })
                    .collect();
                let mut scores = vec![f32::NAN; group * n_pos];
                // Planted past the heads' outputs: nothing is written there.
                let mut out = vec![f32::NAN; group * hd + 5];
                attend_heads(&blocks, &stored_values, kv_head, &heads, &mut scores, &mut out[..group * hd]);
                assert!(out[group * hd..].iter().all(|x| x.is_nan()), "written past the outputs");
                for (h, a) in heads.iter().enumerate() {
                    let (mut want_weights, mut want) = (vec![0.0f32; n_pos], vec![0.0f32; hd]);
                    ops::attention(a, &mut want_weights, &mut want);
                    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    let of = std::any::type_name::<T>();
                    assert_eq!(bits(&scores[h * n_pos..][..n_pos]), bits(&want_weights), "{of}, hd {hd}, group {group}, head {h}: weights");
                    assert_eq!(bits(&out[h * hd..][..hd]), bits(&want), "{of}, hd {hd}, group {group}, head {h}: output");
                }
            }
        }
    }

    #[test]
    fn cut_back_and_grown_again_the_blocks_hold_what_a_fresh_copy_holds() {
        cut_back_and_grown_again::<f32>();
        cut_back_and_grown_again::<f16>();
    }

    fn cut_back_and_grown_again<T: CacheFloat>() {
        // 21 positions, cut to 13 (mid-block), 3 zero positions and 9 others appended: as if
        // those 25 rows had been appended from the start, each score's bits equal.
        let (hd, n_kv) = (16, 2);
        let width = hd * n_kv;
        let first = values(21 * width, 3);
        let later = values(9 * width, 4);
        let mut blocks = blocks_of::<T>(&first, hd, n_kv, 21);
        blocks.truncate(13);
        blocks.append_zeros(3);
        blocks.append(&later);
        let mut rows = first[..13 * width].to_vec();
        rows.extend(std::iter::repeat_n(0.0, 3 * width));
        rows.extend(&later);
        let fresh = blocks_of::<T>(&rows, hd, n_kv, 25);
        assert_eq!((blocks.len(), blocks.bytes()), (25, 25 * width * T::BYTES));
        let q = values(hd, 5);
        for h in 0..n_kv {
            let (mut got, mut want) = (vec![0.0f32; 25], vec![0.0f32; 25]);
            blocks.dots(h, &[&q], 0..25, &mut got, 25);
            fresh.dots(h, &[&q], 0..25, &mut want, 25);
            assert_eq!(
                got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                "head {h}"
            );
        }
    }
}

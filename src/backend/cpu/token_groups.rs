//! A prefill's 8-bit activations regrouped sixteen tokens at a time, the form the x86 prefill
//! loops ([`super::x86_prefill`]) multiply: 64 bytes (one AVX-512 vector, or two AVX2 ones of
//! eight tokens) then hold one 4-column chunk of a block for sixteen tokens, so one
//! instruction sums four byte products for each token against one weight row's chunk
//! (broadcast), and a row's block sums land in lanes, a token each, with no horizontal
//! additions.
//!
//! Layout, per group `g` of sixteen tokens (`16 g .. 16 g + 16`; past the last token, zeros):
//! `q` `[groups, blocks, 8 chunks, 16 tokens, 4 bytes]`, `d` and `s` `[groups, blocks, 16
//! tokens]`, the same integers, scales and scaled sums as [`Activations`]' rows.

use super::activations::{Activations, BLOCK};

/// Tokens in a group.
pub const GROUP: usize = 16;

/// Columns in a chunk: the bytes one 32-bit lane's dot product sums.
pub const CHUNK: usize = 4;

/// Bytes of one block of a group: 8 chunks of 16 tokens' 4 bytes.
pub const GROUP_BLOCK_BYTES: usize = BLOCK * GROUP;

/// Bytes of one chunk of a group: 16 tokens' 4 bytes.
pub const GROUP_CHUNK_BYTES: usize = CHUNK * GROUP;

/// [`Activations`] regrouped sixteen tokens at a time; see the module comment.
pub struct TokenGroups {
    q: Vec<i8>,
    d: Vec<f32>,
    s: Vec<f32>,
    blocks: usize,
    tokens: usize,
}

/// One group of sixteen tokens: `q` `[blocks, 8 chunks, 16 tokens, 4 bytes]`, `d`, `s`
/// `[blocks, 16 tokens]`.
#[derive(Clone, Copy)]
pub struct TokenGroup<'a> {
    /// The tokens' integers, chunk by chunk.
    pub q: &'a [i8],
    /// The tokens' block scales.
    pub d: &'a [f32],
    /// The tokens' blocks' scaled sums.
    pub s: &'a [f32],
    /// The group's tokens before its padding (1 to 16).
    pub tokens: usize,
}

impl TokenGroups {
    /// Regroups every row of `x`.
    pub fn new(x: &Activations) -> Self {
        let (tokens, cols) = (x.rows(), x.cols());
        let blocks = cols / BLOCK;
        let groups = tokens.div_ceil(GROUP);
        let mut q = vec![0i8; groups * blocks * GROUP_BLOCK_BYTES];
        let (mut d, mut s) = (vec![0f32; groups * blocks * GROUP], vec![0f32; groups * blocks * GROUP]);
        for t in 0..tokens {
            let (g, i) = (t / GROUP, t % GROUP);
            let (xq, xd, xs) = x.row(t);
            for b in 0..blocks {
                let block = (g * blocks + b) * GROUP_BLOCK_BYTES;
                for c in 0..BLOCK / CHUNK {
                    let at = block + c * GROUP_CHUNK_BYTES + i * CHUNK;
                    q[at..at + CHUNK].copy_from_slice(&xq[b * BLOCK + c * CHUNK..][..CHUNK]);
                }
                d[(g * blocks + b) * GROUP + i] = xd[b];
                s[(g * blocks + b) * GROUP + i] = xs[b];
            }
        }
        TokenGroups { q, d, s, blocks, tokens }
    }

    /// Groups of sixteen tokens (the last one padded with zeros).
    pub fn groups(&self) -> usize {
        self.tokens.div_ceil(GROUP)
    }

    /// Blocks per token.
    pub fn blocks(&self) -> usize {
        self.blocks
    }

    /// Group `g`: tokens `16 g .. 16 g + 16`.
    pub fn group(&self, g: usize) -> TokenGroup<'_> {
        let (q, v) = (self.blocks * GROUP_BLOCK_BYTES, self.blocks * GROUP);
        let tokens = self.tokens.saturating_sub(g * GROUP).min(GROUP);
        TokenGroup { q: &self.q[g * q..(g + 1) * q], d: &self.d[g * v..(g + 1) * v], s: &self.s[g * v..(g + 1) * v], tokens }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every token's every byte, scale and sum lands where the layout says, and the padding
    /// past the last token is zero.
    #[test]
    fn regroups_every_value() {
        let (tokens, cols) = (21, 96);
        let values: Vec<f32> = (0..tokens * cols).map(|i| ((i * 37 % 255) as f32 - 127.0) / 13.0).collect();
        let x = Activations::quantize(&values, cols);
        let o = TokenGroups::new(&x);
        assert_eq!((o.groups(), o.blocks()), (2, 3));
        assert_eq!((o.group(0).tokens, o.group(1).tokens), (16, 5), "tokens before the padding");
        for t in 0..32 {
            let g = o.group(t / GROUP);
            let i = t % GROUP;
            for b in 0..3 {
                for c in 0..BLOCK {
                    let got = g.q[b * GROUP_BLOCK_BYTES + c / CHUNK * GROUP_CHUNK_BYTES + i * CHUNK + c % CHUNK];
                    let want = if t < tokens { x.row(t).0[b * BLOCK + c] } else { 0 };
                    assert_eq!(got, want, "token {t} block {b} column {c}");
                }
                let (d, s) = if t < tokens { (x.row(t).1[b], x.row(t).2[b]) } else { (0.0, 0.0) };
                assert_eq!((g.d[b * GROUP + i], g.s[b * GROUP + i]), (d, s), "token {t} block {b}");
            }
        }
    }
}

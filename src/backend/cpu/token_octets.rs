//! A prefill's 8-bit activations regrouped eight tokens at a time, the form the x86 prefill
//! loops ([`super::avx2_octets`]) multiply: a vector of 32 bytes then holds one 4-column
//! chunk of a block for eight tokens, so one instruction sums four byte products for each of
//! the eight tokens against one weight row's chunk (broadcast), and a row's block sums land in
//! eight lanes, a token each, with no horizontal additions.
//!
//! Layout, per group `g` of eight tokens (`8 g .. 8 g + 8`; past the last token, zeros):
//! `q` `[groups, blocks, 8 chunks, 8 tokens, 4 bytes]`, `d` and `s` `[groups, blocks, 8
//! tokens]`, the same integers, scales and scaled sums as [`Activations`]' rows.

use super::activations::{Activations, BLOCK};

/// Tokens in a group.
pub const OCTET: usize = 8;

/// Columns in a chunk: the bytes one 32-bit lane's dot product sums.
pub const CHUNK: usize = 4;

/// Bytes of one block of a group: 8 chunks of 8 tokens' 4 bytes.
pub const GROUP_BLOCK_BYTES: usize = BLOCK * OCTET;

/// [`Activations`] regrouped eight tokens at a time; see the module comment.
pub struct TokenOctets {
    q: Vec<i8>,
    d: Vec<f32>,
    s: Vec<f32>,
    blocks: usize,
    tokens: usize,
}

/// One group of eight tokens: `q` `[blocks, 8 chunks, 8 tokens, 4 bytes]`, `d`, `s` `[blocks, 8
/// tokens]`.
#[derive(Clone, Copy)]
pub struct OctetGroup<'a> {
    /// The tokens' integers, chunk by chunk.
    pub q: &'a [i8],
    /// The tokens' block scales.
    pub d: &'a [f32],
    /// The tokens' blocks' scaled sums.
    pub s: &'a [f32],
}

impl TokenOctets {
    /// Regroups every row of `x`.
    pub fn new(x: &Activations) -> Self {
        let (tokens, cols) = (x.rows(), x.cols());
        let blocks = cols / BLOCK;
        let groups = tokens.div_ceil(OCTET);
        let mut q = vec![0i8; groups * blocks * GROUP_BLOCK_BYTES];
        let (mut d, mut s) = (vec![0f32; groups * blocks * OCTET], vec![0f32; groups * blocks * OCTET]);
        for t in 0..tokens {
            let (g, i) = (t / OCTET, t % OCTET);
            let (xq, xd, xs) = x.row(t);
            for b in 0..blocks {
                let block = (g * blocks + b) * GROUP_BLOCK_BYTES;
                for c in 0..BLOCK / CHUNK {
                    let at = block + (c * OCTET + i) * CHUNK;
                    q[at..at + CHUNK].copy_from_slice(&xq[b * BLOCK + c * CHUNK..][..CHUNK]);
                }
                d[(g * blocks + b) * OCTET + i] = xd[b];
                s[(g * blocks + b) * OCTET + i] = xs[b];
            }
        }
        TokenOctets { q, d, s, blocks, tokens }
    }

    /// Groups of eight tokens (the last one padded with zeros).
    pub fn groups(&self) -> usize {
        self.tokens.div_ceil(OCTET)
    }

    /// Blocks per token.
    pub fn blocks(&self) -> usize {
        self.blocks
    }

    /// Group `g`: tokens `8 g .. 8 g + 8`.
    pub fn group(&self, g: usize) -> OctetGroup<'_> {
        let (q, v) = (self.blocks * GROUP_BLOCK_BYTES, self.blocks * OCTET);
        OctetGroup { q: &self.q[g * q..(g + 1) * q], d: &self.d[g * v..(g + 1) * v], s: &self.s[g * v..(g + 1) * v] }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every token's every byte, scale and sum lands where the layout says, and the padding
    /// past the last token is zero.
    #[test]
    fn regroups_every_value() {
        let (tokens, cols) = (11, 96);
        let values: Vec<f32> = (0..tokens * cols).map(|i| ((i * 37 % 255) as f32 - 127.0) / 13.0).collect();
        let x = Activations::quantize(&values, cols);
        let o = TokenOctets::new(&x);
        assert_eq!((o.groups(), o.blocks()), (2, 3));
        for t in 0..16 {
            let g = o.group(t / OCTET);
            let i = t % OCTET;
            for b in 0..3 {
                for c in 0..BLOCK {
                    let got = g.q[b * GROUP_BLOCK_BYTES + (c / CHUNK * OCTET + i) * CHUNK + c % CHUNK];
                    let want = if t < tokens { x.row(t).0[b * BLOCK + c] } else { 0 };
                    assert_eq!(got, want, "token {t} block {b} column {c}");
                }
                let (d, s) = if t < tokens { (x.row(t).1[b], x.row(t).2[b]) } else { (0.0, 0.0) };
                assert_eq!((g.d[b * OCTET + i], g.s[b * OCTET + i]), (d, s), "token {t} block {b}");
            }
        }
    }
}

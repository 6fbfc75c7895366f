//! LFM2's gated short convolution on the CPU, the mixer of its convolving layers in place of
//! attention:
//!
//! ```text
//! [b | c | x'] = W_in xb                       [n, 3 dim]
//! g[p]         = b[p] * x'[p]                  [dim] per position, cached
//! y[p]         = c[p] * sum_j k[j] g[p - w + 1 + j]   (each channel its own kernel k, [w])
//! out          = W_out y                       [n, dim]
//! ```
//!
//! The gated inputs `g` are the layer's cache rows, one per position like an attending
//! layer's keys, so a step reads the `w - 1` before it from the cache and a cut back to a
//! position (a branch, a rejected draft) forgets them with the keys. Positions before the
//! first are zeros, as llama.cpp's convolution state starts.

use super::kv_cache::KvCache;
use super::linear::{Linear, SharedInput};
use crate::error::{Error, Result};

/// A convolving layer's weights as the CPU runs them.
pub struct ShortConvInput<'a> {
    /// `[3 dim, dim]`: b's rows, c's, x''s.
    pub in_proj: &'a Linear,
    /// Each channel's kernel, `[dim, width]`, its last weight on the current position.
    pub kernel: &'a [f32],
    /// `[dim, dim]`.
    pub out_proj: &'a Linear,
    /// Positions each kernel spans.
    pub width: usize,
}

/// Runs layer `layer`'s convolution on `xb` (`[n, dim]`, normed, tokens at positions
/// `start..start + n`): appends each token's gated input to the layer's cache rows and
/// writes `W_out y` to `out` (`[n, dim]`).
pub fn short_conv(
    conv: &ShortConvInput,
    cache: &mut KvCache,
    layer: usize,
    xb: &[f32],
    n: usize,
    start: usize,
    out: &mut [f32],
) -> Result<()> {
    let d = xb.len() / n.max(1);
    let mut bcx = vec![0.0f32; n * 3 * d]; // [n, 3 dim]
    conv.in_proj.forward_shared(&SharedInput::new(xb, n), &mut bcx)?;
    cache.append(layer, &gated_inputs(&bcx, d), &[]);
    let history =
        cache.rows(layer).ok_or_else(|| Error::Backend(format!("layer {layer} convolves but its cache holds attention's keys")))?; // [start + n, dim]
    let mut y = vec![0.0f32; n * d]; // [n, dim]
    convolve(&bcx, history, conv.kernel, conv.width, start, &mut y);
    conv.out_proj.forward(&y, n, out)
}

/// Each token's gated input `b * x'`, `[n, dim]`, from its input projection's row
/// `[b | c | x']` (`bcx`, `[n, 3 dim]`).
pub fn gated_inputs(bcx: &[f32], dim: usize) -> Vec<f32> {
    bcx.chunks_exact(3 * dim).flat_map(|row| (0..dim).map(move |ch| row[ch] * row[2 * dim + ch])).collect()
}

/// `y = c * conv(g)` (`out`, `[n, dim]`) for the tokens at positions `start..start + n`,
/// `bcx` their input projection's rows (`[n, 3 dim]`), `history` the gated inputs of every
/// position up to the last token's (`[start + n, dim]`), `kernel` each channel's weights
/// (`[dim, width]`), summed in f32 from 0 in the kernel's order (short_conv.wgsl's twin).
pub fn convolve(bcx: &[f32], history: &[f32], kernel: &[f32], width: usize, start: usize, out: &mut [f32]) {
    let d = kernel.len() / width.max(1);
    for (t, row) in out.chunks_exact_mut(d).enumerate() {
        let p = start + t;
        for (ch, y) in row.iter_mut().enumerate() {
            let mut acc = 0.0f32;
            for (j, &w) in kernel[ch * width..][..width].iter().enumerate() {
                // The position this weight reads, `width - 1 - j` back; before the first, zero.
                if let Some(q) = (p + j + 1).checked_sub(width) {
                    acc += w * history[q * d + ch];
                }
            }
            *y = bcx[t * 3 * d + d + ch] * acc;
        }
    }
}

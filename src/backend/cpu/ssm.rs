//! Granite 4.0 H's Mamba-2 scan on the CPU, the mixer of its scanning layers in place of
//! attention (shapes from [`Ssm`]: `inner = heads * head_dim`, `conv_dim = inner + 2 groups
//! state`):
//!
//! ```text
//! [z | xBC | dt] = W_in xb                                  [n, inner + conv_dim + heads]
//! [x | B | C]    = SiLU(bias + sum_j k[j] xBC[p - w + 1 + j]) [conv_dim] per position
//! s              = softplus(dt_h + b_h)                     per head h (group g)
//! S_h            = exp(s A_h) S_h + s x_h B_g^T             [head_dim, state], the layer's state
//! y_h            = S_h C_g + D_h x_h                        [head_dim]
//! out            = W_out rmsnorm_groups(y * SiLU(z))        [n, dim]
//! ```
//!
//! The layer's cache ([`ScanCache`]) keeps each position's `xBC` and `dt` as rows, like an
//! attending layer's keys, and the state after the positions scanned so far: one state, so a
//! step costs the same at any position. A cut back to a position (a branch, a rejected draft)
//! forgets rows as it forgets keys, and the state is rebuilt from the rows: from a
//! checkpoint kept 16 to 32 positions behind the last pass (so a rejected draft rescans a
//! few dozen positions), or from the first position after a longer cut. Positions before
//! the first are zeros, as llama.cpp's convolution and scan states start.

use super::band_pool::{self, SharedOut};
use super::kv_cache::KvCache;
use super::linear::{Linear, SharedInput};
use super::quant_matmul;
use crate::error::{Error, Result};
use crate::model::Ssm;

/// The checkpoint sits at a multiple of this many positions...
const CHECKPOINT_EVERY: usize = 16;
/// ...at least this many behind the end of the last pass (more than a verify pass's
/// [`MAX_VERIFY_TOKENS`](crate::backend::MAX_VERIFY_TOKENS), so a rejected draft's cut
/// lands after it).
const CHECKPOINT_LAG: usize = 16;

/// A scanning layer's weights as the CPU runs them.
pub struct SsmInput<'a> {
    /// `[inner + conv_dim + heads, dim]`: z's rows, x's, B's, C's, dt's.
    pub in_proj: &'a Linear,
    /// `[dim, inner]`.
    pub out_proj: &'a Linear,
    /// Everything between the two projections.
    pub scan: ScanParams<'a>,
}

/// A scanning layer's small tensors and shape: what runs between its projections.
pub struct ScanParams<'a> {
    /// Each convolution channel's kernel, `[conv_dim, conv_width]`.
    pub conv_kernel: &'a [f32],
    /// `[conv_dim]`.
    pub conv_bias: &'a [f32],
    /// `[heads]`.
    pub dt_bias: &'a [f32],
    /// Each head's decay rate, `[heads]`.
    pub a: &'a [f32],
    /// Each head's skip, `[heads]`.
    pub d: &'a [f32],
    /// The gated output's RMSNorm gains, `[inner]`.
    pub norm: &'a [f32],
    /// The scan's shape.
    pub shape: &'a Ssm,
    /// The gated norm's epsilon (the model's).
    pub eps: f32,
}

/// A scanning layer's cache: its inputs at every position and its state.
pub struct ScanCache {
    /// Each position's `xBC` (before the convolution) and `dt`, `[positions, conv_dim + heads]`.
    rows: Vec<f32>,
    /// Floats a row holds.
    width: usize,
    /// The state after the first `state_pos` positions, `[heads, head_dim, state]`; `None`
    /// after a cut back before it (rebuilt when the next pass needs it).
    state: Vec<f32>,
    state_pos: Option<usize>,
    /// The state after the first `checkpoint_pos` positions, which a rebuild starts from.
    checkpoint: Vec<f32>,
    checkpoint_pos: usize,
}

impl ScanCache {
    /// An empty cache for a layer of shape `shape`.
    pub fn new(shape: &Ssm) -> Self {
        let zeros = vec![0.0; shape.state_floats()];
        ScanCache {
            rows: Vec::new(),
            width: shape.row_floats(),
            state: zeros.clone(),
            state_pos: Some(0),
            checkpoint: zeros,
            checkpoint_pos: 0,
        }
    }

    /// Appends positions' rows, `[n, conv_dim + heads]`.
    pub fn append(&mut self, rows: &[f32]) {
        self.rows.extend_from_slice(rows);
    }

    /// Appends `n` positions of zeros (a layer a pass skips: its state stays where it was).
    pub fn append_zeros(&mut self, n: usize) {
        self.rows.resize(self.rows.len() + n * self.width, 0.0);
    }

    /// Forgets every position from `len` on, and a state or checkpoint past it.
    pub fn truncate(&mut self, len: usize) {
        self.rows.truncate(len * self.width);
        if self.state_pos.is_some_and(|p| p > len) {
            self.state_pos = None;
        }
        if self.checkpoint_pos > len {
            self.checkpoint.fill(0.0);
            self.checkpoint_pos = 0;
        }
    }

    /// Each position's rows, `[positions, conv_dim + heads]`, uncommitted ones included.
    pub fn rows(&self) -> &[f32] {
        &self.rows
    }

    /// Bytes held: the rows, the state and the checkpoint.
    pub fn bytes(&self) -> usize {
        (self.rows.len() + self.state.len() + self.checkpoint.len()) * 4
    }
}

/// Runs layer `layer`'s scan on `xb` (`[n, dim]`, normed, tokens at positions `start..start
/// + n`): appends each token's rows to the layer's cache, brings its state to `start` if a
/// cut back left it elsewhere, scans the tokens and writes `W_out` of the gated, normed
/// output to `out` (`[n, dim]`).
pub fn ssm(input: &SsmInput, cache: &mut KvCache, layer: usize, xb: &[f32], n: usize, start: usize, out: &mut [f32]) -> Result<()> {
    let s = input.scan.shape;
    let proj_rows = s.in_proj_rows();
    let mut proj = vec![0.0f32; n * proj_rows]; // [n, z | xBC | dt]
    input.in_proj.forward_shared(&SharedInput::new(xb, n), &mut proj)?;
    let rows: Vec<f32> = proj.chunks_exact(proj_rows).flat_map(|r| r[s.inner..].iter().copied()).collect(); // [n, conv_dim + heads]
    cache.append(layer, &rows, &[]);
    let scan = cache.scan_mut(layer).ok_or_else(|| Error::Backend(format!("layer {layer} scans but its cache holds other rows")))?;
    if scan.state_pos != Some(start) {
        // A cut back (or a pass that skipped this layer) left the state elsewhere: rebuild it
        // from the checkpoint.
        scan.state.copy_from_slice(&scan.checkpoint);
        let from = scan.checkpoint_pos;
        advance(&input.scan, scan, from, start, None);
    }
    let mut y = vec![0.0f32; n * s.inner]; // [n, inner]
    advance(&input.scan, scan, start, start + n, Some(&mut y));
    gate_and_norm(&mut y, &proj, &input.scan);
    input.out_proj.forward(&y, n, out)
}

/// Scans positions `from..to` from the state at `from`, writing each position's `y` (`[m,
/// inner]` for the `m` positions, before the gate) where asked, and keeps a checkpoint where
/// one falls due.
/// The positions' convolutions come first; then each head runs through every position on its
/// own (heads share nothing), the heads spread over the band pool's threads when the work is
/// worth handing over.
fn advance(input: &ScanParams, scan: &mut ScanCache, from: usize, to: usize, y: Option<&mut [f32]>) {
    let s = input.shape;
    let m = to - from;
    let due = (to.saturating_sub(CHECKPOINT_LAG) / CHECKPOINT_EVERY) * CHECKPOINT_EVERY;
    let checkpoint_at = (due > scan.checkpoint_pos && (from..=to).contains(&due)).then(|| due - from);
    let mut xbc = vec![0.0f32; m * s.conv_dim()]; // [m, x | B | C]
    for (p, row) in (from..to).zip(xbc.chunks_exact_mut(s.conv_dim())) {
        convolve(input, &scan.rows, scan.width, p, row);
    }
    let dt: Vec<f32> = (from..to).flat_map(|p| scan.rows[p * scan.width + s.conv_dim()..][..s.heads].iter().copied()).collect(); // [m, heads]
    let head_floats = s.head_dim() * s.state;
    let mut y_heads = vec![0.0f32; if y.is_some() { s.heads * m * s.head_dim() } else { 0 }]; // [heads, m, head_dim]
    let (ys, checkpoint) = (SharedOut::new(&mut y_heads), SharedOut::new(&mut scan.checkpoint));
    let write_y = y.is_some();
    let pool = band_pool::pool();
    let tasks = if m * s.inner * s.state >= quant_matmul::MIN_THREADED_MACS { pool.threads() } else { 1 };
    pool.for_each_piece(&mut scan.state, head_floats, tasks, |h, state| {
        // SAFETY: head h alone writes its part of the outputs and of the checkpoint.
        let y_h = write_y.then(|| unsafe { ys.piece(h, m * s.head_dim()) });
        let keep = checkpoint_at.map(|t| (t, unsafe { checkpoint.piece(h, head_floats) }));
        scan_head(input, h, &xbc, &dt, state, y_h, keep);
    });
    if checkpoint_at.is_some() {
        scan.checkpoint_pos = due;
    }
    if let Some(y) = y {
        for (h, head) in y_heads.chunks_exact(m * s.head_dim()).enumerate() {
            for (t, out) in head.chunks_exact(s.head_dim()).enumerate() {
                y[t * s.inner + h * s.head_dim()..][..s.head_dim()].copy_from_slice(out);
            }
        }
    }
    scan.state_pos = Some(to);
}

/// Position `p`'s `[x | B | C]`: each channel's causal convolution of the rows' `xBC` with
/// its kernel, plus its bias, through SiLU (zeros before the first position).
pub fn convolve(input: &ScanParams, rows: &[f32], width: usize, p: usize, out: &mut [f32]) {
    let w = input.shape.conv_width;
    for (ch, o) in out.iter_mut().enumerate() {
        let mut acc = input.conv_bias[ch];
        for (j, &k) in input.conv_kernel[ch * w..][..w].iter().enumerate() {
            if let Some(q) = (p + j + 1).checked_sub(w) {
                acc += k * rows[q * width + ch];
            }
        }
        *o = silu(acc);
    }
}

/// Lanes each state row's read-out is summed in (then folded), as vector units sum it.
const LANES: usize = 16;

/// Head `h` through the positions: `xbc` their convolved `[x | B | C]` (`[m, conv_dim]`),
/// `dt` their raw steps (`[m, heads]`), `state` the head's `[head_dim, state]`; writes the
/// head's `y = S C + D x` (`[m, head_dim]`) where asked, and copies the state into
/// `keep.1` before position `keep.0` (or after the last, where it equals `m`).
pub fn scan_head(
    input: &ScanParams,
    h: usize,
    xbc: &[f32],
    dt: &[f32],
    state: &mut [f32],
    mut y: Option<&mut [f32]>,
    keep: Option<(usize, &mut [f32])>,
) {
    let s = input.shape;
    let (hd, n) = (s.head_dim(), s.state);
    let g = h / (s.heads / s.groups);
    let m = dt.len() / s.heads;
    let mut keep = keep;
    for t in 0..m {
        if let Some((_, into)) = keep.take_if(|(at, _)| *at == t) {
            into.copy_from_slice(state);
        }
        let row = &xbc[t * s.conv_dim()..][..s.conv_dim()];
        let (b, c) = (&row[s.inner + g * n..][..n], &row[s.inner + (s.groups + g) * n..][..n]);
        let step = softplus(dt[t * s.heads + h] + input.dt_bias[h]);
        let decay = (step * input.a[h]).exp();
        for (i, st) in state.chunks_exact_mut(n).enumerate() {
            let x = row[h * hd + i];
            let fed = x * step;
            let mut lanes = [0.0f32; LANES];
            let mut tail = 0.0f32;
            let whole = n - n % LANES;
            for ((st, b), c) in st[..whole].chunks_exact_mut(LANES).zip(b.chunks_exact(LANES)).zip(c.chunks_exact(LANES)) {
                for l in 0..LANES {
                    st[l] = st[l] * decay + b[l] * fed;
                    lanes[l] += st[l] * c[l];
                }
            }
            for j in whole..n {
                st[j] = st[j] * decay + b[j] * fed;
                tail += st[j] * c[j];
            }
            if let Some(y) = y.as_deref_mut() {
                y[t * hd + i] = lanes.iter().sum::<f32>() + tail + input.d[h] * x;
            }
        }
    }
    if let Some((_, into)) = keep.filter(|(at, _)| *at == m) {
        into.copy_from_slice(state);
    }
}

/// `y * SiLU(z)`, each group's span RMS-normed and scaled by its gains, in place (`y`:
/// `[n, inner]`, `proj` the tokens' input projections, z their first `inner` values).
pub fn gate_and_norm(y: &mut [f32], proj: &[f32], input: &ScanParams) {
    let s = input.shape;
    let span = s.inner / s.groups;
    for (row, p) in y.chunks_exact_mut(s.inner).zip(proj.chunks_exact(s.in_proj_rows())) {
        for (v, &z) in row.iter_mut().zip(&p[..s.inner]) {
            *v *= silu(z);
        }
        for (group, gains) in row.chunks_exact_mut(span).zip(input.norm.chunks_exact(span)) {
            let mean = group.iter().map(|v| v * v).sum::<f32>() / span as f32;
            let scale = 1.0 / (mean + input.eps).sqrt();
            for (v, &g) in group.iter_mut().zip(gains) {
                *v = *v * scale * g;
            }
        }
    }
}

/// `ln(1 + e^x)`, or `x` itself above 20 (where the two agree in f32), as Mamba and
/// llama.cpp compute it.
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain twin of the scan: position by position, every channel's state summed in order.
    fn plain_scan(p: &ScanParams, rows: &[f32], width: usize, m: usize) -> (Vec<f32>, Vec<f32>) {
        let s = p.shape;
        let (hd, n) = (s.head_dim(), s.state);
        let mut state = vec![0.0f32; s.state_floats()];
        let mut y = vec![0.0f32; m * s.inner];
        let mut xbc = vec![0.0f32; s.conv_dim()];
        for t in 0..m {
            for (ch, o) in xbc.iter_mut().enumerate() {
                let mut acc = p.conv_bias[ch];
                for j in 0..s.conv_width {
                    if t + j + 1 >= s.conv_width {
                        acc += p.conv_kernel[ch * s.conv_width + j] * rows[(t + j + 1 - s.conv_width) * width + ch];
                    }
                }
                *o = acc / (1.0 + (-acc).exp());
            }
            for h in 0..s.heads {
                let g = h / (s.heads / s.groups);
                let raw = rows[t * width + s.conv_dim() + h] + p.dt_bias[h];
                let step = if raw > 20.0 { raw } else { raw.exp().ln_1p() };
                let decay = (step * p.a[h]).exp();
                for i in 0..hd {
                    let x = xbc[h * hd + i];
                    let mut sum = 0.0f32;
                    for j in 0..n {
                        let st = &mut state[(h * hd + i) * n + j];
                        *st = *st * decay + xbc[s.inner + g * n + j] * x * step;
                        sum += *st * xbc[s.inner + (s.groups + g) * n + j];
                    }
                    y[t * s.inner + h * hd + i] = sum + p.d[h] * x;
                }
            }
        }
        (y, state)
    }

    /// The scan on odd shapes (state widths not a multiple of its lanes, heads in groups of 3,
    /// 7 positions on one thread and 600 spread over the band pool's), from a fresh cache:
    /// every output and the final state within 1e-5 (relative to the largest) of the plain
    /// twin, the checkpoint the plain twin's state at its position, and a rebuild from that
    /// checkpoint the same state again, bit for bit.
    #[test]
    fn the_scan_matches_its_plain_twin_on_odd_shapes() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rand = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        };
        for (m, state, heads, head_dim, groups) in [(7usize, 21usize, 6usize, 3usize, 2usize), (600, 37, 6, 17, 2)] {
            let shape = Ssm { layers: vec![true], conv_width: 4, inner: heads * head_dim, state, heads, groups };
            let mut vec_of = |len: usize, scale: f32, offset: f32| (0..len).map(|_| offset + scale * rand()).collect::<Vec<f32>>();
            let (kernel, bias, dt_bias) =
                (vec_of(shape.conv_dim() * 4, 0.6, 0.0), vec_of(shape.conv_dim(), 0.3, 0.0), vec_of(heads, 1.0, 0.0));
            let (a, d, norm) = (vec_of(heads, 0.9, -1.0), vec_of(heads, 0.5, 1.0), vec_of(shape.inner, 0.2, 1.0));
            let rows = vec_of(m * shape.row_floats(), 1.0, 0.0);
            let p = ScanParams {
                conv_kernel: &kernel,
                conv_bias: &bias,
                dt_bias: &dt_bias,
                a: &a,
                d: &d,
                norm: &norm,
                shape: &shape,
                eps: 1e-5,
            };
            let (want_y, want_state) = plain_scan(&p, &rows, shape.row_floats(), m);
            let mut cache = ScanCache::new(&shape);
            cache.append(&rows);
            let mut y = vec![0.0f32; m * shape.inner];
            advance(&p, &mut cache, 0, m, Some(&mut y));
            let close = |got: &[f32], want: &[f32], what: &str| {
                let scale = want.iter().fold(1.0f32, |s, v| s.max(v.abs()));
                let worst = got.iter().zip(want).fold(0.0f32, |w, (g, e)| w.max((g - e).abs()));
                assert!(worst <= 1e-5 * scale, "{m} positions, state {state}: {what} off by {worst} (largest {scale})");
            };
            close(&y, &want_y, "outputs");
            close(&cache.state, &want_state, "the final state");
            assert_eq!(cache.state_pos, Some(m));
            let due = (m - CHECKPOINT_LAG.min(m)) / CHECKPOINT_EVERY * CHECKPOINT_EVERY;
            assert_eq!(cache.checkpoint_pos, due, "the checkpoint 16 to 32 positions behind the end");
            let (_, at_due) = plain_scan(&p, &rows, shape.row_floats(), due);
            close(&cache.checkpoint, &at_due, "the checkpoint");
            let final_state = cache.state.clone();
            cache.truncate(m - 1);
            cache.append(&rows[(m - 1) * shape.row_floats()..]);
            assert_eq!(cache.state_pos, None, "a cut back before the state forgets it");
            cache.state.copy_from_slice(&cache.checkpoint.clone());
            advance(&p, &mut cache, due, m, None);
            assert_eq!(cache.state, final_state, "rebuilt from the checkpoint: the same bits");
        }
    }
}

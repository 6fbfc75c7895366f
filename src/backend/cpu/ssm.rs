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

use super::kv_cache::KvCache;
use super::linear::{Linear, SharedInput};
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
    /// `[dim, inner]`.
    pub out_proj: &'a Linear,
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
    let s = input.shape;
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
        advance(input, scan, from, start, None);
    }
    let mut y = vec![0.0f32; n * s.inner]; // [n, inner]
    advance(input, scan, start, start + n, Some(&mut y));
    gate_and_norm(&mut y, &proj, input);
    input.out_proj.forward(&y, n, out)
}

/// Scans positions `from..to` from the state at `from`, writing each position's `y` (`[to
/// - from, inner]`, before the gate) where asked, and keeps a checkpoint where one falls due.
fn advance(input: &SsmInput, scan: &mut ScanCache, from: usize, to: usize, mut y: Option<&mut [f32]>) {
    let s = input.shape;
    let due = (to.saturating_sub(CHECKPOINT_LAG) / CHECKPOINT_EVERY) * CHECKPOINT_EVERY;
    let mut xbc = vec![0.0f32; s.conv_dim()]; // [x | B | C] at one position
    for p in from..to {
        if p == due && due > scan.checkpoint_pos {
            scan.checkpoint.copy_from_slice(&scan.state);
            scan.checkpoint_pos = due;
        }
        convolve(input, &scan.rows, scan.width, p, &mut xbc);
        let dt = &scan.rows[p * scan.width + s.conv_dim()..][..s.heads];
        let y_p = y.as_deref_mut().map(|y| &mut y[(p - from) * s.inner..][..s.inner]);
        step(input, &xbc, dt, &mut scan.state, y_p);
    }
    if to == due && due > scan.checkpoint_pos {
        scan.checkpoint.copy_from_slice(&scan.state);
        scan.checkpoint_pos = due;
    }
    scan.state_pos = Some(to);
}

/// Position `p`'s `[x | B | C]`: each channel's causal convolution of the rows' `xBC` with
/// its kernel, plus its bias, through SiLU (zeros before the first position).
pub fn convolve(input: &SsmInput, rows: &[f32], width: usize, p: usize, out: &mut [f32]) {
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

/// One position's scan: every head's state decayed and fed, and (where asked) its output
/// `y = S C + D x`, `[inner]`. `xbc` is the position's convolved `[x | B | C]`, `dt` its
/// heads' raw steps.
pub fn step(input: &SsmInput, xbc: &[f32], dt: &[f32], state: &mut [f32], mut y: Option<&mut [f32]>) {
    let s = input.shape;
    let (hd, n) = (s.head_dim(), s.state);
    let heads_per_group = s.heads / s.groups;
    for h in 0..s.heads {
        let g = h / heads_per_group;
        let b = &xbc[s.inner + g * n..][..n];
        let c = &xbc[s.inner + (s.groups + g) * n..][..n];
        let step = softplus(dt[h] + input.dt_bias[h]);
        let decay = (step * input.a[h]).exp();
        for i in 0..hd {
            let x = xbc[h * hd + i];
            let fed = x * step;
            let row = &mut state[(h * hd + i) * n..][..n];
            let mut sum = 0.0f32;
            for ((st, &b), &c) in row.iter_mut().zip(b).zip(c) {
                *st = *st * decay + b * fed;
                sum += *st * c;
            }
            if let Some(y) = y.as_deref_mut() {
                y[h * hd + i] = sum + input.d[h] * x;
            }
        }
    }
}

/// `y * SiLU(z)`, each group's span RMS-normed and scaled by its gains, in place (`y`:
/// `[n, inner]`, `proj` the tokens' input projections, z their first `inner` values).
pub fn gate_and_norm(y: &mut [f32], proj: &[f32], input: &SsmInput) {
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

//! Activations rounded to 8-bit blocks, the form every quantized product multiplies, and the
//! shape check every repacked weight format shares. The lowest layer of the CPU kernels: the
//! weight formats ([`super::q4_1_rows`], [`super::q8_0_rows`]), their inner loops
//! ([`super::dot_kernel`]) and the product over them ([`super::quant_matmul`]) build on it.

use std::sync::OnceLock;

use half::f16;

use super::band_pool::{pool, SharedOut};
use super::dot_kernel::InputRows;
use super::token_groups::TokenGroups;
use crate::error::{Error, Result};

/// Elements per quantization block (Q8_0, Q8_1, Q4_1).
pub const BLOCK: usize = 32;

/// Activation rows rounded to 8-bit blocks as ggml's reference does (and candle's
/// `BlockQ8_0`/`BlockQ8_1::from_float`): per block `d = max |v| / 127`, stored as f16, and
/// `q = round(v / d)` with the unrounded `d`; `s` is Q8_1's `d * sum(q)` in f16, for
/// formats with an offset (Q4_1).
pub struct Activations {
    /// `[rows, cols]` integers.
    pub q: Vec<i8>,
    /// `[rows, cols / 32]` scales.
    pub d: Vec<f32>,
    /// `[rows, cols / 32]` scaled sums.
    pub s: Vec<f32>,
    cols: usize,
    /// The rows regrouped sixteen tokens at a time, made on first use (a prefill on x86).
    groups: OnceLock<TokenGroups>,
}

impl Activations {
    /// Rounds row-major `values` `[rows, cols]`; `cols` is a multiple of 32. A prefill's rows
    /// are shared out to the band pool's threads.
    pub fn quantize(values: &[f32], cols: usize) -> Self {
        let blocks = values.len() / BLOCK;
        let (mut q, mut d, mut s) = (vec![0i8; blocks * BLOCK], vec![0f32; blocks], vec![0f32; blocks]);
        let rows = values.len().checked_div(cols).unwrap_or(0);
        let pool = pool();
        let tasks = if values.len() >= THREADED_VALUES { pool.threads() } else { 1 };
        let (q_out, d_out, s_out) = (SharedOut::new(&mut q), SharedOut::new(&mut d), SharedOut::new(&mut s));
        let row_blocks = cols / BLOCK;
        pool.run(tasks, |task| {
            for r in (task..rows).step_by(tasks) {
                // SAFETY: row r lies inside every output (r < rows), and only task r % tasks
                // touches it.
                let (q, d, s) = unsafe { (q_out.piece(r, cols), d_out.piece(r, row_blocks), s_out.piece(r, row_blocks)) };
                let row = &values[r * cols..(r + 1) * cols];
                for (((block, q), d), s) in row.chunks_exact(BLOCK).zip(q.chunks_exact_mut(BLOCK)).zip(d).zip(s) {
                    (*d, *s) = round_block(block, q);
                }
            }
        });
        Activations { q, d, s, cols, groups: OnceLock::new() }
    }

    /// Input features per row.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Rows rounded.
    pub fn rows(&self) -> usize {
        self.q.len().checked_div(self.cols).unwrap_or(0)
    }

    /// Row `t`: integers, scales, scaled sums.
    pub fn row(&self, t: usize) -> (&[i8], &[f32], &[f32]) {
        let blocks = self.cols / BLOCK;
        let b = t * blocks..(t + 1) * blocks;
        (&self.q[t * self.cols..(t + 1) * self.cols], &self.d[b.clone()], &self.s[b])
    }
}

impl InputRows for Activations {
    type Row<'a> = ActivationRow<'a>;

    fn rows(&self) -> usize {
        Activations::rows(self)
    }

    fn cols(&self) -> usize {
        self.cols
    }

    fn row(&self, t: usize) -> ActivationRow<'_> {
        Activations::row(self, t)
    }

    fn token_groups(&self) -> Option<&TokenGroups> {
        Some(self.groups.get_or_init(|| TokenGroups::new(self)))
    }
}

/// Values a rounding must hold before the band pool's threads share it (a prefill's rows;
/// a decode step's one row stays on the calling thread). Natively: prefilling 257 tokens on
/// this project's 2-core EPYC went from about 790 to 845 tok/s with the rows shared.
#[cfg(not(target_arch = "wasm32"))]
const THREADED_VALUES: usize = 4096;
/// In the page a handover to the Web Workers costs tens of microseconds
/// ([`MIN_THREADED_MACS`](super::quant_matmul::MIN_THREADED_MACS)), so only long prefills'
/// roundings are shared there (not measured in the page).
#[cfg(target_arch = "wasm32")]
const THREADED_VALUES: usize = 1 << 16;

/// Rounds one block of 32 values into `q`; returns its scale `d` and scaled sum `s`.
fn round_block(block: &[f32], q: &mut [i8]) -> (f32, f32) {
    // `if a > m` rather than `f32::max`, which is a libm call per element in wasm; the same
    // result here (a NaN is skipped either way).
    let amax = block.iter().fold(0f32, |m, v| if v.abs() > m { v.abs() } else { m });
    let scale = amax / 127.0;
    let inverse = if scale != 0.0 { 1.0 / scale } else { 0.0 };
    for (q, v) in q.iter_mut().zip(block) {
        *q = round_half_away(v * inverse) as i8;
    }
    let sum: i32 = q.iter().map(|&v| i32::from(v)).sum();
    let scale16 = f16::from_f32(scale);
    (scale16.to_f32(), (f16::from_f32(sum as f32) * scale16).to_f32())
}

/// `x.round()` (halves away from zero), from `trunc`, which wasm has as an instruction
/// (`f32x4.trunc` when vectorized) where `round` is a libm call per element. Exact: `x - t` is
/// the fraction of `x`, with no rounding.
fn round_half_away(x: f32) -> f32 {
    let t = x.trunc();
    if (x - t).abs() >= 0.5 {
        t + 1f32.copysign(x)
    } else {
        t
    }
}

/// One quantized activation row: integers, scales, scaled sums.
pub type ActivationRow<'a> = (&'a [i8], &'a [f32], &'a [f32]);

/// Checks that `cols` is a whole number of blocks and `len` is what `[rows, cols]` in the
/// format `what` takes.
pub(super) fn check_shape(what: &str, rows: usize, cols: usize, len: usize, want: usize) -> Result<()> {
    if !cols.is_multiple_of(BLOCK) || len != want {
        return Err(Error::Backend(format!("a {what} matrix needs rows of whole 32-element blocks: [{rows}, {cols}] from {len} values")));
    }
    Ok(())
}

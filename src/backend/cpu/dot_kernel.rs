//! Which inner loops compute [`QuantMatrix`](super::quant_matmul::QuantMatrix)'s block dot
//! products: one set per instruction set, the fastest this build and CPU can run chosen by
//! default, every one of them checked against the portable loops by the tests
//! (`tests/cpu_quant_matmul.rs` walks [`DotKernel::available`]), and [`RowDot`], what each
//! weight format computes with them.

use std::ops::Range;

use super::token_groups::{TokenGroup, TokenGroups, GROUP};

/// A set of dot-product loops (Q8_0 and Q4_1 blocks against 8-bit activations, float weights
/// widened against f32 inputs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DotKernel {
    /// x86-64 with AVX-512 (F, BW, VL, VNNI) besides AVX2: a prefill's products through
    /// `vpdpbusd` (four byte products summed into each 32-bit lane in one instruction) on
    /// sixteen tokens at once in one 512-bit vector ([`TokenGroups`]); a decode step's as
    /// [`Self::Avx2`]'s loops with `vpdpbusd` on 256-bit vectors for `vpmaddubsw` and
    /// `vpmaddwd`: the same bits either way.
    Avx512Vnni,
    /// x86-64 AVX2, FMA and F16C (`vpmaddubsw`/`vpmaddwd`, `vcvtph2ps`), detected at run time;
    /// a prefill on sixteen tokens at once, as two vectors of eight ([`TokenGroups`]).
    Avx2,
    /// wasm relaxed SIMD: Q4_1 blocks through `i32x4.relaxed_dot_i8x16_i7x16_add_s` (the
    /// nibbles are the 7-bit operand), 16 products per instruction, and so Q8_0 blocks whose
    /// integers all lie in -32..=31 (Q5_0's and Q6_K's, repacked), 32 added to each; other Q8_0
    /// as [`Self::Simd128`], since their signed weights fit no 7-bit operand. Built into the page's engine for browsers
    /// that validate relaxed SIMD (`www/pkg-relaxed`, `www/pkg-threads`).
    RelaxedSimd,
    /// wasm SIMD128: bytes widened to 16 bits and summed by `i32x4.dot_i16x8_s`, 8 products per
    /// instruction. Any browser with wasm SIMD (`www/pkg`).
    Simd128,
    /// Plain Rust, one block at a time: any CPU, and the reference the others are tested
    /// against.
    Portable,
}

/// Every kernel, fastest first.
const ALL: [DotKernel; 5] = [DotKernel::Avx512Vnni, DotKernel::Avx2, DotKernel::RelaxedSimd, DotKernel::Simd128, DotKernel::Portable];

impl DotKernel {
    /// Whether this build runs the kernel on this CPU.
    pub fn is_available(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            DotKernel::Avx512Vnni => super::x86_prefill::vnni_available(),
            #[cfg(target_arch = "x86_64")]
            DotKernel::Avx2 => super::avx2_dot::available(),
            DotKernel::RelaxedSimd => cfg!(all(target_arch = "wasm32", target_feature = "relaxed-simd")),
            DotKernel::Simd128 => cfg!(all(target_arch = "wasm32", target_feature = "simd128")),
            DotKernel::Portable => true,
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The kernels this build runs on this CPU, fastest first.
    pub fn available() -> Vec<DotKernel> {
        ALL.into_iter().filter(|k| k.is_available()).collect()
    }

    /// The fastest available kernel: what [`QuantMatrix::forward`](super::quant_matmul::QuantMatrix::forward) uses.
    pub fn best() -> DotKernel {
        ALL.into_iter().find(|k| k.is_available()).unwrap_or(DotKernel::Portable)
    }

    /// Whether a prefill on this kernel multiplies sixteen tokens at a time from the input's
    /// [`TokenGroups`] ([`RowDot::dot_group`]).
    pub fn interleaves_prefill(self) -> bool {
        matches!(self, DotKernel::Avx512Vnni | DotKernel::Avx2)
    }

    /// A short name for stats and benchmarks: `avx512-vnni`, `avx2`, `relaxed-simd`,
    /// `simd128`, `portable`.
    pub fn name(self) -> &'static str {
        match self {
            DotKernel::Avx512Vnni => "avx512-vnni",
            DotKernel::Avx2 => "avx2",
            DotKernel::RelaxedSimd => "relaxed-simd",
            DotKernel::Simd128 => "simd128",
            DotKernel::Portable => "portable",
        }
    }
}

/// The input rows a weight format multiplies: 8-bit blocks
/// ([`Activations`](super::activations::Activations)) for the quantized formats, f32
/// ([`FloatInput`](super::float_rows::FloatInput)) for float weights.
pub trait InputRows: Sync {
    /// One row as the format's kernels read it.
    type Row<'a>: Copy
    where
        Self: 'a;
    /// Rows (tokens).
    fn rows(&self) -> usize;
    /// Input features per row.
    fn cols(&self) -> usize;
    /// Row `t`.
    fn row(&self, t: usize) -> Self::Row<'_>;
    /// The rows regrouped sixteen tokens at a time for the prefill loops that read them
    /// ([`DotKernel::interleaves_prefill`]), made on first use; `None` for inputs those loops
    /// do not take (f32 rows).
    fn token_groups(&self) -> Option<&TokenGroups> {
        None
    }
}

/// A weight format's dot products: `R` consecutive weight rows starting at `first` with `T`
/// input rows, one f32 per (token, row).
pub trait RowDot: Sync {
    /// The input rows this format multiplies.
    type Input: InputRows;
    /// Output features.
    fn rows(&self) -> usize;
    /// Input features.
    fn cols(&self) -> usize;
    /// Bytes read per use of the whole matrix.
    fn bytes(&self) -> usize;
    /// `out[t][i] = w[first + i] . x[t]` on `kernel`; `first + R <= rows`.
    fn dot<const R: usize, const T: usize>(
        &self,
        kernel: DotKernel,
        first: usize,
        x: [<Self::Input as InputRows>::Row<'_>; T],
    ) -> [[f32; R]; T];
    /// `out[i] = w[r] . x[16 g + i]` for each row `r` of `rows` and the tokens of one group
    /// of the input's [`TokenGroups`], on `kernel`'s prefill loops, handed to `write(r, &out)`
    /// (past the group's tokens, `out` holds what the padding gave), giving each output the
    /// bits [`RowDot::dot`] gives it; false, writing nothing, where this format or kernel has
    /// no such loops.
    fn dot_group(&self, kernel: DotKernel, rows: Range<usize>, x: TokenGroup<'_>, write: impl FnMut(usize, &[f32; GROUP])) -> bool {
        let _ = (kernel, rows, x, write);
        false
    }
}

/// The blocks of a row past its last whole group of four (`range`), one at a time, as every
/// SIMD kernel ends its row: `block(r, b)` gives weight row `r`'s scale and offset for block
/// `b` and its integer sums against each token's block (in the kernel's own vector type `S`);
/// `fold(acc, sums, d_w d_x)` adds those sums, scaled, into the kernel's vector accumulator
/// `acc[t][r]` (of its type `A`). Returns the offsets' part, `[token][row]` sums of `m_w s_x`.
///
/// # Safety
/// Every token's scales and sums in `x` hold the blocks of `range` (`block` is the caller's to
/// keep in bounds).
#[inline(always)]
pub(super) unsafe fn tail_blocks<S: Copy, A: Copy, const R: usize, const T: usize>(
    range: std::ops::Range<usize>,
    x: &[super::activations::ActivationRow; T],
    acc: &mut [[A; R]; T],
    block: impl Fn(usize, usize) -> ((f32, f32), [S; T]),
    fold: impl Fn(A, S, f32) -> A,
) -> [[f32; R]; T] {
    let mut rest = [[0f32; R]; T];
    for b in range {
        for r in 0..R {
            let ((dw, mw), sums) = block(r, b);
            for (t, (_, dx, sx)) in x.iter().enumerate() {
                // SAFETY: b lies in `range`, which every token's scales and sums hold.
                let (dx, sx) = unsafe { (*dx.get_unchecked(b), *sx.get_unchecked(b)) };
                acc[t][r] = fold(acc[t][r], sums[t], dw * dx);
                rest[t][r] += mw * sx;
            }
        }
    }
    rest
}

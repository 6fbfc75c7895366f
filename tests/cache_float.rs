//! The KV cache's half floats (src/backend/cpu/cache_float.rs) against the `half` crate's own
//! conversions: every one of the 65,536 bit patterns widened one at a time, eight at a time
//! (F16C natively where the build has it, wasm's SIMD128 in the wasm build, which
//! `make test-wasm` runs) and by the portable bit operations; and values stored rounded to
//! the nearest half float, ties to even.

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use half::f16;
use tokenscope::backend::cpu::cache_float::{widen_bits, CacheFloat};

/// Bits to compare: NaNs as one (F16C quiets a signalling NaN, `half` may not).
fn key(x: f32) -> u32 {
    if x.is_nan() {
        u32::MAX
    } else {
        x.to_bits()
    }
}

#[test]
fn every_half_float_widens_as_half_converts_it() {
    let all: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
    for (i, h) in all.iter().enumerate() {
        let want = h.to_f32();
        assert_eq!(key(widen_bits(h.to_bits())), key(want), "{:#06x}: {} against {want}", i, widen_bits(h.to_bits()));
        assert_eq!(key(h.to_f32()), key(CacheFloat::to_f32(*h)));
    }
    // Eight at a time (F16C's or SIMD128's where the build has them) and 32 at a time, as
    // attention reads.
    for eights in all.chunks_exact(32) {
        let wide = <f16 as CacheFloat>::widen::<32>(eights.try_into().expect("32"));
        for (h, w) in eights.iter().zip(wide) {
            assert_eq!(key(w), key(h.to_f32()), "{:#06x}", h.to_bits());
        }
    }
}

#[test]
fn stored_values_round_to_the_nearest_half_float() {
    let xs = [0.0f32, -0.0, 1.0, 1.0 + 1.0 / 4096.0, 65504.0, 65520.0, 1e-7, -2.71, 6.0e-8];
    let mut stored = Vec::new();
    f16::extend(&mut stored, &xs);
    for (&x, s) in xs.iter().zip(&stored) {
        assert_eq!(s.to_bits(), f16::store(x).to_bits(), "{x}");
        assert_eq!(s.to_bits(), f16::from_f32(x).to_bits(), "{x}");
    }
    // Ties to even; 65520 is past the largest half float (65504) by half its last step.
    assert_eq!(f16::store(1.0 + 1.0 / 4096.0).to_f32(), 1.0);
    assert!(f16::store(65520.0).to_f32().is_infinite());
    assert_eq!(f32::store(-3.25).to_bits(), (-3.25f32).to_bits());
}

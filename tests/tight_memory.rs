//! A tensor larger than the memory can take is refused in words, not the end of the process:
//! with an allocator that refuses any single allocation over 4 MiB (as a full heap would), a
//! model whose 5 MiB embedding is read after everything else fits loads to a `TooLarge` error
//! naming the tensor's size.
#![cfg(not(target_arch = "wasm32"))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};

use candle_core::quantized::GgmlDType;
use tokenscope::model::synthetic::{SyntheticModel, SyntheticSpec};
use tokenscope::model::Model;
use tokenscope::{Error, ModelError};

/// Largest single allocation while [`TIGHT`] is set.
const LIMIT: usize = 4 << 20;
static TIGHT: AtomicBool = AtomicBool::new(false);

/// The system allocator, returning null (an allocation failure) for one block over [`LIMIT`]
/// while [`TIGHT`] is set.
struct Tight;

unsafe impl GlobalAlloc for Tight {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if TIGHT.load(Ordering::Relaxed) && layout.size() > LIMIT {
            return std::ptr::null_mut();
        }
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Tight = Tight;

#[test]
fn a_tensor_the_memory_cannot_take_is_refused_with_its_size() {
    // 20,000 x 64 F32 embedding: 5,120,000 bytes, over the limit; everything else far under.
    let spec = SyntheticSpec { vocab_size: Some(20_000), embedding_type: GgmlDType::F32, ..SyntheticSpec::default() };
    let bytes = SyntheticModel::new(&spec).expect("model").to_bytes().expect("bytes");
    assert!(Model::read(&mut std::io::Cursor::new(&bytes), &mut |_, _| {}).is_ok(), "it loads with the memory it needs");
    TIGHT.store(true, Ordering::Relaxed);
    let result = Model::read(&mut std::io::Cursor::new(&bytes), &mut |_, _| {});
    TIGHT.store(false, Ordering::Relaxed);
    let err = result.err().expect("refused");
    assert!(matches!(err, Error::Model(ModelError::TooLarge { part: "weights", needed: 5_120_000, .. })), "{err}");
    assert!(err.to_string().contains("need 4 MB of memory"), "{err}");
}

//! A mutation fuzzer over the GGUF reader and the model loader, on the stable toolchain.
//!
//! Inputs are derived deterministically from `(seed, index)`, so any input can be rebuilt from
//! its index alone: a crash is reported as an index and replayed with `--replay`. Each input
//! is a seed file (a tiny synthetic model, or one of the hand-made hostile files) with one to
//! four mutations, most of them aimed at the header where the numbers are. A global allocator
//! ([`BoundedAllocator`]) watches every allocation while an input loads: more live bytes than
//! [`allocation_bound`] of the input's size stops the run with the input's index.
//!
//! Shared by `tests/gguf_hostile.rs` (a short smoke in `make test`) and
//! `examples/fuzz_gguf.rs` (`make fuzz`, a million inputs).

#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Write;

use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::GgmlDType;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use tokenscope::model::synthetic::{SyntheticModel, SyntheticSpec};
use tokenscope::model::Model;

/// The largest number of live bytes loading an input of `len` bytes may hold: weights are kept
/// as stored (1x), norms dequantized (4x of F32 at most), the tokenizer's tables a small
/// multiple of its strings; 64x the file plus 16 MiB of fixed overhead covers them all.
pub fn allocation_bound(len: usize) -> usize {
    len.saturating_mul(64).saturating_add(16 << 20)
}

/// A global allocator that counts each thread's live bytes and, while the thread is loading an
/// input, aborts the process with the input's index when an allocation would pass the bound.
pub struct BoundedAllocator;

/// Per-thread watch state (const-initialized thread-locals allocate nothing, so the allocator
/// may use them).
struct Watch {
    live: Cell<isize>,
    armed: Cell<bool>,
    baseline: Cell<isize>,
    bound: Cell<isize>,
    index: Cell<usize>,
    peak: Cell<isize>,
}

thread_local! {
    static WATCH: Watch = const {
        Watch { live: Cell::new(0), armed: Cell::new(false), baseline: Cell::new(0), bound: Cell::new(isize::MAX), index: Cell::new(0), peak: Cell::new(0) }
    };
}

unsafe impl GlobalAlloc for BoundedAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = WATCH.try_with(|w| {
            let live = w.live.get().wrapping_add(layout.size() as isize);
            w.live.set(live);
            if live > w.peak.get() {
                w.peak.set(live);
            }
            if w.armed.get() && live.wrapping_sub(w.baseline.get()) > w.bound.get() {
                over_bound(w.index.get(), layout.size(), w.bound.get());
            }
        });
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let _ = WATCH.try_with(|w| w.live.set(w.live.get().wrapping_sub(layout.size() as isize)));
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Reports the input that passed its bound without allocating, then aborts (an allocator
/// must not unwind).
fn over_bound(index: usize, size: usize, bound: isize) -> ! {
    let mut buf = [0u8; 160];
    let mut w = &mut buf[..];
    let _ = writeln!(w, "fuzz: input #{index} asked for {size} bytes, past its bound of {bound} live bytes; replay it with --replay");
    let used = 160 - w.len();
    let _ = std::io::stderr().write_all(&buf[..used]);
    std::process::abort()
}

/// Loads `bytes` as a model with the allocation bound armed on this thread (when the binary
/// installed [`BoundedAllocator`]); returns the error text, or `None` when the model loaded.
pub fn load(index: usize, bytes: &[u8]) -> Option<String> {
    WATCH.with(|w| {
        w.index.set(index);
        w.bound.set(allocation_bound(bytes.len()) as isize);
        w.baseline.set(w.live.get());
        w.peak.set(w.live.get());
        w.armed.set(std::env::var_os("FUZZ_UNBOUNDED").is_none());
    });
    let result = Model::read(&mut std::io::Cursor::new(bytes), &mut |_, _| {});
    WATCH.with(|w| w.armed.set(false));
    result.err().map(|e| e.to_string())
}

/// The most live bytes the last [`load`] on this thread held above what was live before it.
pub fn last_peak() -> usize {
    WATCH.with(|w| w.peak.get().saturating_sub(w.baseline.get()).max(0) as usize)
}

/// The smallest synthetic model: the base of every mutation.
pub fn tiny_model() -> SyntheticModel {
    let spec = SyntheticSpec { n_layers: 1, dim: 32, ffn_dim: 32, n_heads: 2, n_kv_heads: 1, context_len: 16, ..SyntheticSpec::default() };
    SyntheticModel::new(&spec).expect("the tiny synthetic model builds")
}

/// Hand-made hostile files: the crashes found by hand and what the loader must say of each.
/// Each is `(file name, bytes, a fragment the error must contain)`.
pub fn crafted() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let with = |key: &str, v: Value| {
        let mut m = tiny_model();
        m.set_meta(key, v);
        m.to_bytes().expect("bytes")
    };
    let escaped_name = {
        let mut m = tiny_model();
        let t = m.tensors.iter().position(|(n, _)| n == "blk.0.ffn_down.weight").expect("tensor");
        m.tensors[t].0 = "\u{1b}[2J\u{1b}]0;owned\u{7}".to_string();
        let bytes = m.to_bytes().expect("bytes");
        bytes[..bytes.len() - 64].to_vec()
    };
    let unsupported = {
        let mut m = tiny_model();
        let t = candle_core::Tensor::zeros((32, 32), candle_core::DType::F32, &candle_core::Device::Cpu).expect("zeros");
        m.set_tensor("blk.0.attn_q.weight", candle_core::quantized::QTensor::quantize(&t, GgmlDType::Q8_1).expect("q8_1"));
        m.to_bytes().expect("bytes")
    };
    // The same key or tensor read two ways: candle drops a key's trailing NUL bytes and keeps
    // the last of two entries of one name.
    let pushed = |key: &str, v: Value| {
        let mut m = tiny_model();
        m.metadata.push((key.to_string(), v));
        m.to_bytes().expect("bytes")
    };
    let tensor_twice = {
        let mut m = tiny_model();
        let t = m.tensors.iter().position(|(n, _)| n == "blk.0.ffn_up.weight").expect("tensor");
        m.tensors[t].0 = "blk.0.ffn_gate.weight".to_string();
        m.to_bytes().expect("bytes")
    };
    vec![
        ("alignment-zero.gguf", with("general.alignment", Value::U32(0)), "general.alignment"),
        ("alignment-key-nul.gguf", pushed("general.alignment\0", Value::U32(0)), "general.alignment"),
        ("alignment-u64.gguf", with("general.alignment", Value::U64(64)), "general.alignment"),
        ("key-twice.gguf", pushed("llama.block_count", Value::U32(1)), "given twice"),
        ("tensor-twice.gguf", tensor_twice, "named twice"),
        ("alignment-odd.gguf", with("general.alignment", Value::U32(24)), "general.alignment"),
        ("block-count-max.gguf", with("llama.block_count", Value::U32(u32::MAX)), "llama.block_count"),
        ("context-length-max.gguf", with("llama.context_length", Value::U32(u32::MAX)), "llama.context_length"),
        ("embedding-length-max.gguf", with("llama.embedding_length", Value::U64(u64::MAX)), "llama.embedding_length"),
        ("rms-eps-nan.gguf", with("llama.attention.layer_norm_rms_epsilon", Value::F32(f32::NAN)), "layer_norm_rms_epsilon"),
        ("rope-base-nan.gguf", with("llama.rope.freq_base", Value::F32(f32::NAN)), "llama.rope.freq_base"),
        ("rope-base-infinite.gguf", with("llama.rope.freq_base", Value::F64(f64::INFINITY)), "llama.rope.freq_base"),
        ("tensor-name-escapes.gguf", escaped_name, "\\u{1b}[2J"),
        ("tensor-type-q8_1.gguf", unsupported, "Q8_1"),
    ]
}

/// The files mutations start from.
pub fn seeds() -> Vec<Vec<u8>> {
    let mut seeds = vec![tiny_model().to_bytes().expect("bytes")];
    seeds.extend(crafted().into_iter().map(|(_, bytes, _)| bytes));
    seeds
}

/// Where a seed's header ends (the tensor data starts): the first byte after the last
/// tensor name, found by searching for it; mutations favour the bytes before it.
fn header_len(seed: &[u8]) -> usize {
    let needle = b"blk.0.ffn_down.weight";
    seed.windows(needle.len()).rposition(|w| w == needle).map_or(seed.len(), |p| (p + needle.len() + 64).min(seed.len()))
}

const INTERESTING: [u64; 12] = [0, 1, 2, 3, 31, 32, 255, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff, 0x8000_0000_0000_0000, u64::MAX];

/// Input number `index` of the run seeded by `seed`.
pub fn input(seeds: &[Vec<u8>], seed: u64, index: usize) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut bytes = seeds[rng.random_range(0..seeds.len())].clone();
    let header = header_len(&bytes);
    for _ in 0..rng.random_range(1..=4) {
        if bytes.is_empty() {
            break;
        }
        let at = if rng.random_bool(0.85) { rng.random_range(0..header.min(bytes.len()).max(1)) } else { rng.random_range(0..bytes.len()) };
        match rng.random_range(0..7) {
            0 => bytes[at] ^= 1 << rng.random_range(0..8),
            1 => bytes[at] = [0u8, 1, 0x7f, 0x80, 0xff][rng.random_range(0..5)],
            2 | 3 => {
                let v = if rng.random_bool(0.8) { INTERESTING[rng.random_range(0..INTERESTING.len())] } else { rng.random() };
                let width = if rng.random_bool(0.5) { 4 } else { 8 };
                let le = v.to_le_bytes();
                for (i, b) in le.iter().take(width).enumerate() {
                    if let Some(slot) = bytes.get_mut(at + i) {
                        *slot = *b;
                    }
                }
            }
            4 => bytes.truncate(at),
            5 => {
                let end = (at + rng.random_range(1..64)).min(bytes.len());
                bytes.drain(at..end);
            }
            _ => {
                let end = (at + rng.random_range(1..64)).min(bytes.len());
                let chunk = bytes[at..end].to_vec();
                let to = rng.random_range(0..bytes.len());
                bytes.splice(to..to, chunk);
            }
        }
    }
    bytes
}

/// Runs inputs `range` of the run seeded by `seed`; returns how many loaded and how many were
/// refused. A panic propagates with the input's index in its message.
pub fn run(seeds: &[Vec<u8>], seed: u64, range: std::ops::Range<usize>) -> (usize, usize) {
    let (mut loaded, mut refused) = (0, 0);
    for index in range {
        let bytes = input(seeds, seed, index);
        let outcome = std::panic::catch_unwind(|| load(index, &bytes));
        match outcome {
            Ok(None) => loaded += 1,
            Ok(Some(_)) => refused += 1,
            Err(_) => panic!("fuzz: input #{index} (seed {seed}) panicked; replay it with --replay {index} --seed {seed}"),
        }
    }
    (loaded, refused)
}

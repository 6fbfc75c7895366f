//! Hostile model files: every crash found (by hand or by the fuzzer) is kept as a file in
//! tests/fixtures/gguf_hostile/ and must be refused in words, and a short run of the fuzzer
//! (`make fuzz` runs a million) finds no panic and no allocation past the bound.

#![cfg(not(target_arch = "wasm32"))]

mod fuzz;

#[global_allocator]
static ALLOCATOR: fuzz::BoundedAllocator = fuzz::BoundedAllocator;

use std::path::PathBuf;

fn hostile_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf_hostile")
}

#[test]
fn every_kept_hostile_file_is_refused_in_words() {
    let crafted = fuzz::crafted();
    let mut seen = 0;
    for entry in std::fs::read_dir(hostile_dir()).expect("tests/fixtures/gguf_hostile exists") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "gguf") {
            continue;
        }
        seen += 1;
        let name = path.file_name().and_then(|n| n.to_str()).expect("name").to_string();
        let bytes = std::fs::read(&path).expect("read");
        let error = fuzz::load(0, &bytes).unwrap_or_else(|| panic!("{name} loaded; it must be refused"));
        assert!(!error.chars().any(|c| c.is_control()), "{name}: the message carries control characters: {error:?}");
        // Files the fuzzer found must simply be refused; the hand-made ones name their field.
        if let Some((_, _, fragment)) = crafted.iter().find(|(n, _, _)| *n == name) {
            assert!(error.contains(fragment), "{name}: {error:?} does not mention {fragment:?}");
        }
    }
    assert!(seen >= crafted.len(), "only {seen} files in tests/fixtures/gguf_hostile (regenerate with make fuzz-crafted)");
}

#[test]
fn the_kept_files_are_the_crafted_ones_as_built_today() {
    for (name, bytes, _) in fuzz::crafted() {
        let kept = std::fs::read(hostile_dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e} (run make fuzz-crafted)"));
        assert_eq!(kept, bytes, "{name} differs from what fuzz::crafted builds (run make fuzz-crafted)");
    }
}

#[test]
fn the_seed_model_loads_so_mutations_start_from_a_valid_file() {
    let seed = fuzz::tiny_model().to_bytes().expect("bytes");
    assert_eq!(fuzz::load(0, &seed), None);
}

#[test]
fn a_short_fuzz_run_finds_no_panic_and_no_unbounded_allocation() {
    let seeds = fuzz::seeds();
    let inputs = std::env::var("FUZZ_SMOKE_INPUTS").ok().and_then(|v| v.parse().ok()).unwrap_or(50_000);
    let (loaded, refused) = fuzz::run(&seeds, 7, 0..inputs);
    assert_eq!(loaded + refused, inputs);
    // Mutations must reach past the magic: some inputs load, most are refused.
    assert!(loaded > 0 && refused > inputs / 2, "{loaded} loaded, {refused} refused");
}

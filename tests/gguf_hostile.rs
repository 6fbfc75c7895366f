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
    // Mutations must reach past the magic: some inputs load, most are refused.
    assert!(loaded > 0 && refused > inputs / 2, "{loaded} loaded, {refused} refused");
}

/// The header check the page runs before it frees the model in use says exactly what the
/// full load says about every kept hostile file and a few thousand mutated ones, finds the
/// real model sound from its first 4 MiB, and says "inconclusive" (not "bad") when the
/// header runs past the bytes it was given.
#[test]
fn the_header_check_refuses_what_the_load_refuses() {
    use tokenscope::model::{HeaderCheck, Model};
    const START: usize = 4 << 20;
    let verdicts = |bytes: &[u8]| {
        let full = Model::read(&mut std::io::Cursor::new(bytes), &mut |_, _| {}).err().map(|e| e.to_string());
        let early = Model::check_header(&bytes[..bytes.len().min(START)], bytes.len() as u64);
        (full, early)
    };
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(hostile_dir())
        .expect("tests/fixtures/gguf_hostile exists")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
        .map(|p| (p.display().to_string(), std::fs::read(&p).expect("read")))
        .collect();
    let seeds = fuzz::seeds();
    files.extend((0..3000).map(|i| (format!("mutated input {i}"), fuzz::input(&seeds, 7, i))));
    let (mut refused, mut sound) = (0, 0);
    for (name, bytes) in &files {
        match verdicts(bytes) {
            (Some(full), Err(early)) => {
                assert_eq!(early.to_string(), full, "{name}: the header check and the load disagree");
                refused += 1;
            }
            // Sound headers whose data is bad (a NaN weight does not fail a load either) and
            // loads that succeed.
            (_, Ok(HeaderCheck::Sound)) => sound += 1,
            (full, early) => panic!("{name}: the load says {full:?}, the header check {early:?}"),
        }
    }
    assert!(refused > 100 && sound > 0, "{refused} refused, {sound} sound: the inputs do not cover both sides");

    let model = std::fs::read(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/SmolLM2-135M-Instruct.Q4_1.gguf"))
        .expect("the model (make model)");
    assert_eq!(Model::check_header(&model[..START], model.len() as u64).expect("sound"), HeaderCheck::Sound);
    assert_eq!(Model::check_header(&model[..1000], model.len() as u64).expect("no verdict"), HeaderCheck::Inconclusive);
    // A download cut short is refused from its header: its tensors run past its end.
    let cut = model.len() as u64 - 1;
    assert!(Model::check_header(&model[..START], cut).expect_err("truncated").to_string().contains("truncated"));
}

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

/// Every kept hostile file: `(path, bytes)`.
fn hostile_files() -> Vec<(String, Vec<u8>)> {
    std::fs::read_dir(hostile_dir())
        .expect("tests/fixtures/gguf_hostile exists")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
        .map(|p| (p.display().to_string(), std::fs::read(&p).expect("read")))
        .collect()
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
    let mut files = hostile_files();
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

/// Our header walk is the one reader of truth, and candle's parse must agree with it: on every
/// seed, every kept hostile file, the real model, and thousands of mutations, wherever both
/// read the header, they name the same keys with the same value types and array lengths, the
/// same tensors with the same shapes, types and offsets, and the same start of the tensor data.
/// And the comparison does see a difference: the walk of one file held to candle's parse of
/// another (one key more) is named.
#[test]
fn the_header_walk_and_candle_agree_on_every_key_of_every_seed() {
    use candle_core::quantized::gguf_file::Content;
    use tokenscope::gguf::scan::{check_header, Header};
    use tokenscope::gguf::stand_in::PatchedHeader;
    // candle is asked only where the walk reads the header: elsewhere it may panic (it divides
    // by a zero alignment the walk refuses). It reads the header as the engine has it read:
    // shown a stand-in's type id where the file has a type candle does not know (IQ4_NL's as
    // Q4_0's, IQ4_XS's as Q4_K's).
    let read = |bytes: &[u8]| -> (Option<Header>, Option<Content>) {
        let header = check_header(&mut std::io::Cursor::new(bytes), bytes.len() as u64).ok();
        let content = header.as_ref().and_then(|h| {
            let mut cursor = std::io::Cursor::new(bytes);
            Content::read(&mut PatchedHeader::new(&mut cursor, h.stand_in_patches())).ok()
        });
        (header, content)
    };
    let seeds = fuzz::seeds();
    let mut files = hostile_files();
    files.extend(seeds.iter().enumerate().map(|(i, s)| (format!("seed {i}"), s.clone())));
    let model = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let real = std::fs::read(model).expect("the model (make model)");
    // The real model with a tensor relabelled IQ4_NL (20) or IQ4_XS (23), read through the
    // stand-in (the 1536-wide rows of ffn_down are whole IQ4_XS super-blocks).
    let walked = check_header(&mut std::io::Cursor::new(&real), real.len() as u64).expect("the real model walks");
    let entry = walked.tensors.iter().find(|t| t.name == "blk.0.ffn_down.weight").expect("the tensor");
    let at = entry.type_at as usize;
    for (id, type_name) in [(20u32, "IQ4_NL"), (23, "IQ4_XS")] {
        let mut relabelled = real.clone();
        relabelled[at..at + 4].copy_from_slice(&id.to_le_bytes());
        assert!(matches!(read(&relabelled), (Some(_), Some(_))), "the walk and candle both read the {type_name}-relabelled header");
        files.push((format!("the real model with an {type_name} tensor"), relabelled));
    }
    files.push(("the real model".into(), real));
    files.extend((0..10_000).map(|i| (format!("mutated input {i}"), fuzz::input(&seeds, 11, i))));
    let (mut compared, mut keys) = (0, 0);
    for (name, bytes) in &files {
        if let (Some(header), Some(content)) = read(bytes) {
            assert_eq!(header.disagreement(&content), None, "{name}: the walk and candle read the header differently");
            compared += 1;
            keys += header.keys.len();
        }
    }
    assert!(compared > 1000 && keys > 10 * compared, "{compared} files compared, {keys} keys: too few to say much");
    // What candle would read one way and llama.cpp another, the walk refuses: a key or a tensor
    // named twice (candle keeps the last), an alignment in a type candle ignores.
    for (name, bytes, _) in
        fuzz::crafted().into_iter().filter(|(n, _, _)| ["key-twice.gguf", "tensor-twice.gguf", "alignment-u64.gguf"].contains(n))
    {
        assert!(Content::read(&mut std::io::Cursor::new(&bytes)).is_ok(), "{name}: candle reads it");
        assert!(read(&bytes).0.is_none(), "{name}: the walk refuses it");
    }

    let base = seeds[0].clone();
    let mut more = fuzz::tiny_model();
    more.metadata.push(("general.extra".into(), candle_core::quantized::gguf_file::Value::U32(1)));
    let (header, _) = read(&base);
    let (_, content) = read(&more.to_bytes().expect("bytes"));
    let difference = header.expect("the seed walks").disagreement(&content.expect("candle reads it")).expect("a difference");
    assert!(difference.contains("metadata keys"), "{difference}");
}

//! `make fuzz`: a million mutated GGUF files through the reader and the model loader, on every
//! core, with no panic, no abort and no allocation past a bound of each input's size.
//!
//! ```text
//! cargo run --release --example fuzz_gguf -- [--inputs N] [--seed S] [--threads T]
//! cargo run --release --example fuzz_gguf -- --replay INDEX [--seed S] [--save FILE]
//! cargo run --release --example fuzz_gguf -- --write-crafted DIR
//! ```
//! A crash prints the input's index; `--replay` rebuilds that input, loads it and `--save`
//! writes it out (keep it in tests/fixtures/gguf_hostile/ as a regression).

#![cfg_attr(target_arch = "wasm32", allow(dead_code, unused_imports))]

#[path = "../tests/fuzz/mod.rs"]
mod fuzz;

#[cfg(not(target_arch = "wasm32"))]
#[global_allocator]
static ALLOCATOR: fuzz::BoundedAllocator = fuzz::BoundedAllocator;

use std::time::Instant;

/// The fuzzer runs natively only (it uses threads and the file system).
#[cfg(target_arch = "wasm32")]
fn main() {}

fn arg<T: std::str::FromStr>(args: &[String], name: &str) -> Option<T> {
    let i = args.iter().position(|a| a == name)?;
    match args.get(i + 1).map(|v| v.parse()) {
        Some(Ok(v)) => Some(v),
        _ => {
            eprintln!("{name} needs a value");
            std::process::exit(2)
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seed: u64 = arg(&args, "--seed").unwrap_or(1);
    if let Some(dir) = arg::<String>(&args, "--write-crafted") {
        for (name, bytes, _) in fuzz::crafted() {
            let path = std::path::Path::new(&dir).join(name);
            std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
            println!("wrote {}", path.display());
        }
        return;
    }
    let seeds = fuzz::seeds();
    if let Some(index) = arg::<usize>(&args, "--replay") {
        let bytes = fuzz::input(&seeds, seed, index);
        if let Some(path) = arg::<String>(&args, "--save") {
            std::fs::write(&path, &bytes).unwrap_or_else(|e| panic!("cannot write {path}: {e}"));
            println!("saved input #{index} ({} bytes) to {path}", bytes.len());
        }
        let outcome = fuzz::load(index, &bytes);
        let peak = fuzz::last_peak();
        match outcome {
            None => println!("input #{index}: loaded, peak {peak} live bytes"),
            Some(e) => println!("input #{index}: refused ({e}), peak {peak} live bytes"),
        }
        return;
    }
    let inputs: usize = arg(&args, "--inputs").unwrap_or(1_000_000);
    let threads: usize = arg(&args, "--threads").unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let start = Instant::now();
    let per = inputs.div_ceil(threads);
    let results: Vec<(usize, usize)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let seeds = &seeds;
                s.spawn(move || fuzz::run(seeds, seed, t * per..((t + 1) * per).min(inputs)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| std::process::exit(1))).collect()
    });
    let (loaded, refused) = results.iter().fold((0, 0), |a, r| (a.0 + r.0, a.1 + r.1));
    let secs = start.elapsed().as_secs_f64();
    println!(
        "fuzz: {inputs} inputs (seed {seed}, {threads} threads) in {secs:.0} s ({:.0}/s): {loaded} loaded, {refused} refused in words, 0 panics, 0 aborts, no allocation past 64x the input + 16 MiB",
        inputs as f64 / secs
    );
}

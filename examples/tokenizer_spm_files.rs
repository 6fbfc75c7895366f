//! Writes the SentencePiece tokenizer files the SentencePiece fixture is made from (see
//! tests/common/spm_fixture.rs) into DIR, for bench/make-tokenizer-fixtures.mjs:
//!
//! ```text
//! cargo run --example tokenizer_spm_files -- DIR
//! ```

#[path = "../tests/common/spm_fixture.rs"]
mod spm_fixture;

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: tokenizer_spm_files DIR");
        std::process::exit(2);
    };
    for (name, add_space_prefix) in spm_fixture::FILES {
        let path = std::path::Path::new(&dir).join(format!("{name}.gguf"));
        if let Err(e) = std::fs::write(&path, spm_fixture::tokenizer_file(add_space_prefix)) {
            eprintln!("cannot write {}: {e}", path.display());
            std::process::exit(1);
        }
        println!("wrote {}", path.display());
    }
}

//! Writes the tokenizer files the pre-tokenizer fixture is made from (one per name tokenscope
//! builds and per alias of one, see tests/common/pre_fixture.rs) into DIR, for
//! bench/make-tokenizer-fixtures.mjs:
//!
//! ```text
//! cargo run --example tokenizer_pre_files -- DIR
//! ```

#[path = "../tests/common/pre_fixture.rs"]
mod pre_fixture;

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: tokenizer_pre_files DIR");
        std::process::exit(2);
    };
    use tokenscope::tokenizer::pre::{PRE_ALIASES, SUPPORTED_PRE};
    for pre in SUPPORTED_PRE.iter().chain(&PRE_ALIASES).map(|(name, _)| name) {
        let path = std::path::Path::new(&dir).join(format!("{pre}.gguf"));
        if let Err(e) = std::fs::write(&path, pre_fixture::tokenizer_file(Some(pre))) {
            eprintln!("cannot write {}: {e}", path.display());
            std::process::exit(1);
        }
        println!("wrote {}", path.display());
    }
}

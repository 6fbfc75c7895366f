//! What the shape examples share: writing the model one builds to the path its command line
//! names (its directory made first), or saying in words why not.

use tokenscope::model::synthetic::SyntheticModel;

/// Builds the model and writes it to the first argument, exiting 2 without one and 1 when
/// building or writing fails.
pub fn write_from_args(example: &str, build: fn() -> tokenscope::Result<SyntheticModel>) {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: {example} OUT.gguf");
        std::process::exit(2);
    };
    let path = std::path::Path::new(&path);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Err(e) = std::fs::create_dir_all(dir) {
            eprintln!("cannot make {}: {e}", dir.display());
            std::process::exit(1);
        }
    }
    match build().and_then(|m| m.to_bytes()) {
        Ok(bytes) => match std::fs::write(path, &bytes) {
            Ok(()) => println!("wrote {} ({} bytes)", path.display(), bytes.len()),
            Err(e) => {
                eprintln!("cannot write {}: {e}", path.display());
                std::process::exit(1);
            }
        },
        Err(e) => {
            eprintln!("cannot build the model: {e}");
            std::process::exit(1);
        }
    }
}

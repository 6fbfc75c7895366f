//! The `tokenscope` command line: generate, tokenize and bench (native only; on wasm32 the
//! library's web API is the front end, and this binary is empty).

#[cfg(not(target_arch = "wasm32"))]
mod cli;

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    use clap::Parser;
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::from(cli::exit_code(&e))
        }
    }
}

#[cfg(target_arch = "wasm32")]
fn main() {}

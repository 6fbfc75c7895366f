//! `tokenscope serve`: a small static server for the page and the model, on localhost.
//!
//! Serves `www/` at `/` and the model folder at `/models/`, nothing else: no directory
//! listings, no paths outside those folders, correct MIME types (including
//! `application/wasm`), and a Content-Security-Policy that allows only this origin.

use std::path::{Component, Path, PathBuf};

use tiny_http::{Header, Method, Response, Server, StatusCode};

use tokenscope::{Error, Result};

/// Only this origin; wasm compilation allowed; workers from this origin.
const CSP: &str = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; worker-src 'self'; \
style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Port on 127.0.0.1.
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Folder with the page.
    #[arg(long, default_value = "www")]
    www: PathBuf,
    /// Folder with the models, served under /models/.
    #[arg(long, default_value = "models")]
    models: PathBuf,
}

pub fn run(a: ServeArgs) -> Result<()> {
    let io = |context: String| move |source| Error::Io { context, source };
    let www = a.www.canonicalize().map_err(io(format!("page folder {}", a.www.display())))?;
    let models = a.models.canonicalize().map_err(io(format!("model folder {}", a.models.display())))?;
    let addr = format!("127.0.0.1:{}", a.port);
    let server = Server::http(&addr).map_err(|e| Error::Io {
        context: format!("cannot listen on {addr} (is another server using the port? try --port)"),
        source: std::io::Error::other(e.to_string()),
    })?;
    println!("tokenscope: serving http://{addr}/ (page from {}, models from {})", www.display(), models.display());
    for request in server.incoming_requests() {
        let url = request.url().to_string();
        let response = match request.method() {
            Method::Get | Method::Head => resolve(&www, &models, &url),
            _ => Err(StatusCode(405)),
        };
        let result = match response {
            Ok(path) => match std::fs::File::open(&path) {
                Ok(file) => {
                    let mut r = Response::from_file(file).with_header(header("Content-Type", mime(&path)));
                    for (k, v) in common_headers() {
                        r.add_header(header(k, v));
                    }
                    request.respond(r)
                }
                Err(_) => request.respond(error_page(404)),
            },
            Err(code) => request.respond(error_page(code.0)),
        };
        if let Err(e) = result {
            eprintln!("tokenscope: {url}: {e}");
        }
    }
    Ok(())
}

/// Maps a URL path to a file inside one of the two folders, or an HTTP status.
fn resolve(www: &Path, models: &Path, url: &str) -> std::result::Result<PathBuf, StatusCode> {
    let path = url.split(['?', '#']).next().unwrap_or("/");
    let path = percent_decode(path).ok_or(StatusCode(400))?;
    let (root, rest) = match path.strip_prefix("/models/") {
        Some(rest) => (models, rest.to_string()),
        None if path == "/" => (www, "index.html".to_string()),
        None => (www, path.trim_start_matches('/').to_string()),
    };
    let rel = Path::new(&rest);
    if rest.is_empty() || rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(StatusCode(404));
    }
    let full = root.join(rel).canonicalize().map_err(|_| StatusCode(404))?;
    if !full.starts_with(root) || !full.is_file() {
        return Err(StatusCode(404));
    }
    Ok(full)
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn mime(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "wasm" => "application/wasm",
        "json" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "txt" | "md" | "wgsl" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

fn common_headers() -> [(&'static str, &'static str); 4] {
    [
        ("Content-Security-Policy", CSP),
        ("X-Content-Type-Options", "nosniff"),
        ("Cache-Control", "no-cache"),
        ("Cross-Origin-Opener-Policy", "same-origin"),
    ]
}

fn header(k: &str, v: &str) -> Header {
    Header::from_bytes(k.as_bytes(), v.as_bytes())
        .unwrap_or_else(|_| Header::from_bytes(&b"X-Invalid"[..], &b"1"[..]).expect("static header"))
}

fn error_page(code: u16) -> Response<std::io::Cursor<Vec<u8>>> {
    let text = match code {
        400 => "400 bad request",
        405 => "405 method not allowed",
        _ => "404 not found",
    };
    let mut r = Response::from_string(text).with_status_code(code).with_header(header("Content-Type", "text/plain; charset=utf-8"));
    for (k, v) in common_headers() {
        r.add_header(header(k, v));
    }
    r
}

//! `tokenscope serve`: the page and the models over HTTP on localhost.
//!
//! hyper serves each connection on its own task (a stalled download blocks no one), with a
//! header size limit and a header read timeout; tower-http's `ServeDir` answers files with
//! Content-Length, Range (206) and Last-Modified, and refuses paths that leave their folder in
//! any encoding. On top: an ETag with If-None-Match (304) for every file, a Host check against
//! DNS rebinding (only the loopback names, or the `--host` given, with the bound port, in the
//! Host header and in a request line in absolute form; one Host header only), GET and
//! HEAD only, a path over 4 KB refused (414) and a segment no file name can have answered 404,
//! a request for several ranges answered with the whole file, and the headers that keep the
//! page to itself and cross-origin isolated (so it may use threads): CSP, nosniff, COOP, COEP
//! and CORP.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tower_http::services::ServeDir;

use tokenscope::{Error, Result};

/// Only this origin; wasm compilation allowed; workers from this origin, and from blob: URLs
/// made on it (the threaded engine's helper starts its Web Workers from a blob of its own,
/// same-origin script).
const CSP: &str = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; worker-src 'self' blob:; \
style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

/// Most bytes of request line and headers a client may send (hyper's minimum is 8 KiB).
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
/// How long a client may take to send its request headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on. Anything but a loopback address exposes the page and the models
    /// to the network (a warning says so).
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    host: IpAddr,
    /// Port (0 picks a free one; the real port is printed).
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
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(io("cannot start the server's runtime".into()))?;
    runtime.block_on(serve(SocketAddr::new(a.host, a.port), www, models))
}

async fn serve(addr: SocketAddr, www: PathBuf, models: PathBuf) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| Error::Io {
        context: format!("cannot listen on {addr} (is another server using the port? try --port, or --port 0 for any free one)"),
        source,
    })?;
    let bound = listener.local_addr().map_err(|source| Error::Io { context: "cannot read the bound address".into(), source })?;
    if !addr.ip().is_loopback() {
        eprintln!(
            "warning: listening on {} makes the page and the models reachable from other machines; the default, 127.0.0.1, does not",
            addr.ip()
        );
    }
    let hosts = AllowedHosts { bind: addr.ip(), port: bound.port() };
    let app = Router::new()
        .nest_service("/models", ServeDir::new(&models).append_index_html_on_directories(false))
        .fallback_service(ServeDir::new(&www))
        .layer(middleware::from_fn(etag))
        .layer(middleware::from_fn_with_state(hosts, guard));
    println!("tokenscope: serving http://{}/ (page from {}, models from {})", display_addr(bound), www.display(), models.display());
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                // Out of file descriptors and the like: wait a moment rather than spin.
                eprintln!("tokenscope: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .max_buf_size(MAX_HEADER_BYTES)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// `127.0.0.1:8080`, or `[::1]:8080`, as a browser's address bar wants it.
fn display_addr(addr: SocketAddr) -> String {
    let ip = if addr.ip().is_unspecified() { IpAddr::V4(Ipv4Addr::LOCALHOST) } else { addr.ip() };
    SocketAddr::new(ip, addr.port()).to_string()
}

/// The Host headers this server answers: the loopback names with the bound port, the `--host`
/// address itself, or any name when listening on every address (0.0.0.0, ::).
#[derive(Clone, Copy)]
struct AllowedHosts {
    bind: IpAddr,
    port: u16,
}

impl AllowedHosts {
    fn allows(&self, host: &str) -> bool {
        let Some((name, port)) = host.rsplit_once(':') else { return false };
        if port.parse() != Ok(self.port) {
            return false;
        }
        let name = name.trim_start_matches('[').trim_end_matches(']');
        if self.bind.is_unspecified() {
            return true;
        }
        matches!(name.to_ascii_lowercase().as_str(), "localhost" | "127.0.0.1" | "::1") || name.parse() == Ok(self.bind)
    }
}

/// Longest request path answered, in bytes (a longer one gets 414).
const MAX_PATH_BYTES: usize = 4096;
/// Longest path segment a file name can have, in bytes (a longer one names no file: 404).
const MAX_SEGMENT_BYTES: usize = 255;

/// Refuses a second Host header, foreign hosts (in the Host header or in a request line in
/// absolute form), methods other than GET and HEAD, and paths no file can have; serves a
/// request for several ranges the whole file; adds the security and isolation headers to
/// every answer.
async fn guard(State(hosts): State<AllowedHosts>, mut request: Request, next: Next) -> Response {
    let host = request.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    let hosts_sent = request.headers().get_all(header::HOST).iter().count();
    let authority_allowed = request.uri().authority().is_none_or(|a| hosts.allows(a.as_str()));
    let path = request.uri().path();
    // mime_guess knows no WGSL: shaders are text, shown in a browser rather than downloaded.
    let text = path.ends_with(".wgsl");
    let mut response = if hosts_sent > 1 {
        (StatusCode::BAD_REQUEST, "400 bad request: one Host header, please\n").into_response()
    } else if !hosts.allows(host) || !authority_allowed {
        (StatusCode::FORBIDDEN, "403 forbidden: this server answers only to its own address (localhost)\n").into_response()
    } else if request.method() != Method::GET && request.method() != Method::HEAD {
        (StatusCode::METHOD_NOT_ALLOWED, "405 method not allowed: GET and HEAD only\n").into_response()
    } else if path.len() > MAX_PATH_BYTES {
        (StatusCode::URI_TOO_LONG, "414 URI too long\n").into_response()
    } else if path.split('/').any(|segment| segment.len() > MAX_SEGMENT_BYTES) {
        (StatusCode::NOT_FOUND, "404 not found\n").into_response()
    } else {
        // Several ranges would need a multipart answer: the whole file (200) says it all.
        if request.headers().get(header::RANGE).is_some_and(|r| r.as_bytes().contains(&b',')) {
            request.headers_mut().remove(header::RANGE);
        }
        next.run(request).await
    };
    if response.status() == StatusCode::NOT_FOUND && response.headers().get(header::CONTENT_TYPE).is_none() {
        response = (StatusCode::NOT_FOUND, "404 not found\n").into_response();
    }
    let h = response.headers_mut();
    if text && h.contains_key(header::CONTENT_TYPE) {
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    }
    for (name, value) in [
        ("content-security-policy", CSP),
        ("x-content-type-options", "nosniff"),
        ("cache-control", "no-cache"),
        ("cross-origin-opener-policy", "same-origin"),
        ("cross-origin-embedder-policy", "require-corp"),
        ("cross-origin-resource-policy", "same-origin"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// Gives every file an ETag (its size and modification time, from the headers `ServeDir`
/// set) and answers a matching If-None-Match with 304 Not Modified.
async fn etag(request: Request, next: Next) -> Response {
    let if_none_match = request.headers().get(header::IF_NONE_MATCH).cloned();
    let mut response = next.run(request).await;
    let Some(tag) = tag_of(response.headers()) else { return response };
    let matches = if_none_match
        .as_ref()
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').map(str::trim).any(|t| t == "*" || t.trim_start_matches("W/") == tag));
    if matches && response.status().is_success() {
        let mut not_modified = StatusCode::NOT_MODIFIED.into_response();
        if let Some(lm) = response.headers().get(header::LAST_MODIFIED).cloned() {
            not_modified.headers_mut().insert(header::LAST_MODIFIED, lm);
        }
        response = not_modified;
    }
    if let Ok(v) = HeaderValue::from_str(&tag) {
        response.headers_mut().insert(header::ETAG, v);
    }
    response
}

/// `"<size hex>-<mtime hex>"` from Last-Modified and the full size (Content-Range's total
/// for a 206, Content-Length otherwise).
fn tag_of(headers: &HeaderMap) -> Option<String> {
    let modified = headers.get(header::LAST_MODIFIED)?.to_str().ok()?;
    let secs = httpdate::parse_http_date(modified).ok()?.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    let size: u64 = match headers.get(header::CONTENT_RANGE) {
        Some(range) => range.to_str().ok()?.rsplit('/').next()?.parse().ok()?,
        None => headers.get(header::CONTENT_LENGTH)?.to_str().ok()?.parse().ok()?,
    };
    Some(format!("\"{size:x}-{secs:x}\""))
}

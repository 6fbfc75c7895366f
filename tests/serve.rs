//! `tokenscope serve`: the page and the models, nothing else, to many clients at once, with
//! the right headers, and nothing for a hostile request.
#![cfg(not(target_arch = "wasm32"))]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `tokenscope serve` on a port it chose itself (`--port 0`), killed on drop.
struct Server {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Size of the test model: large enough that a client that stops reading stalls its download.
const MODEL_BYTES: usize = 16 << 20;

/// A page folder, a models folder with a `MODEL_BYTES` file, and a secret beside them.
fn fixture(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tokenscope-serve-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("www/pkg")).expect("dirs");
    std::fs::create_dir_all(dir.join("models")).expect("dirs");
    std::fs::write(dir.join("www/index.html"), "<!doctype html><title>t</title>").expect("write");
    std::fs::write(dir.join("www/pkg/engine.wasm"), b"\0asm\x01\0\0\0").expect("write");
    std::fs::write(dir.join("www/main.js"), "export {}").expect("write");
    std::fs::write(dir.join("www/k.wgsl"), "@compute @workgroup_size(1) fn main() {}").expect("write");
    let model: Vec<u8> = (0..MODEL_BYTES).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.join("models/m.gguf"), model).expect("write");
    std::fs::write(dir.join("secret.txt"), "outside").expect("write");
    dir
}

fn start_with(name: &str, extra: &[&str]) -> (Server, String) {
    let dir = fixture(name);
    let mut child = Command::new(env!("CARGO_BIN_EXE_tokenscope"))
        .args(["serve", "--port", "0"])
        .args(extra)
        .arg("--www")
        .arg(dir.join("www"))
        .arg("--models")
        .arg(dir.join("models"))
        .stdout(Stdio::piped())
        .stderr(if extra.is_empty() { Stdio::inherit() } else { Stdio::piped() })
        .spawn()
        .expect("serve starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("a first line");
    let port = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|addr| addr.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("serve --port 0 prints the real port: {line:?}"));
    let mut stderr = String::new();
    if let Some(mut err) = child.stderr.take() {
        // With extra flags stderr is captured: a warning comes before the address line.
        let mut buf = [0u8; 4096];
        let n = err.read(&mut buf).unwrap_or(0);
        stderr = String::from_utf8_lossy(&buf[..n]).into_owned();
    }
    (Server { child, port, dir }, stderr)
}

fn start(name: &str) -> Server {
    start_with(name, &[]).0
}

/// Sends one raw request and returns (status, lower-cased header block, body); status 0 when
/// the server closed the connection without an answer.
fn send(port: u16, request_head: &str) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connects");
    s.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    if let Err(e) = s.write_all(request_head.as_bytes()) {
        // A server may answer and close before a long request is fully written (an oversized
        // header): the write then fails, and whatever answer arrived is still read below.
        let closed = matches!(e.kind(), std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset);
        assert!(closed, "writes: {e}");
    }
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else { return (0, String::new(), raw) };
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).expect("status");
    (status, head.to_lowercase(), raw[split + 4..].to_vec())
}

fn get(port: u16, path: &str, extra: &str) -> (u16, String, Vec<u8>) {
    send(port, &format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n{extra}\r\n"))
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| l.strip_prefix(&format!("{name}: ")))
}

fn expected_model() -> Vec<u8> {
    (0..MODEL_BYTES).map(|i| (i % 251) as u8).collect()
}

#[test]
fn serves_the_page_and_the_models_with_types_and_isolation_headers() {
    let server = start("page");
    let port = server.port;
    let (status, head, body) = get(port, "/", "");
    assert_eq!(status, 200);
    assert!(head.contains("content-type: text/html"), "{head}");
    assert!(body.starts_with(b"<!doctype html>"));
    for (name, value) in [
        ("content-security-policy", "default-src 'self'"),
        ("x-content-type-options", "nosniff"),
        ("cross-origin-opener-policy", "same-origin"),
        ("cross-origin-embedder-policy", "require-corp"),
        ("cross-origin-resource-policy", "same-origin"),
    ] {
        assert!(header(&head, name).is_some_and(|v| v.starts_with(value)), "{name} in {head}");
    }
    let (status, head, _) = get(port, "/pkg/engine.wasm", "");
    assert_eq!(status, 200);
    assert_eq!(header(&head, "content-type"), Some("application/wasm"));
    let (_, head, _) = get(port, "/main.js?v=1", "");
    assert!(header(&head, "content-type").is_some_and(|t| t.starts_with("text/javascript")), "{head}");
    let (_, head, _) = get(port, "/k.wgsl", "");
    assert_eq!(header(&head, "content-type"), Some("text/plain; charset=utf-8"), "a shader is shown, not downloaded");
    let (status, head, body) = get(port, "/models/m.gguf", "");
    assert_eq!(status, 200);
    assert_eq!(header(&head, "content-length"), Some(MODEL_BYTES.to_string().as_str()), "the progress bar needs the size");
    assert!(body == expected_model(), "the model arrives whole");
    let (status, head, body) = send(port, &format!("HEAD /models/m.gguf HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n"));
    assert_eq!((status, body.len()), (200, 0));
    assert_eq!(header(&head, "content-length"), Some(MODEL_BYTES.to_string().as_str()));
}

#[test]
fn no_path_leaves_the_two_folders_in_any_encoding() {
    let server = start("traversal");
    let port = server.port;
    for path in [
        "/../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E/secret.txt",
        "/.%2e/secret.txt",
        "/%2e%2e%2fsecret.txt",
        "/..%2fsecret.txt",
        "/..%5csecret.txt",
        "/..\\secret.txt",
        "/%252e%252e/secret.txt",
        "/%c0%ae%c0%ae/secret.txt",
        "/models/../secret.txt",
        "/models/%2e%2e/secret.txt",
        "/models/..%2f..%2fsecret.txt",
        "//secret.txt",
        "/pkg/",
        "/models/",
        "/nope.html",
        "/%zz",
        "/index.html%00.js",
    ] {
        let (status, _, body) = get(port, path, "");
        assert!((400..500).contains(&status) || status == 0, "{path}: {status}");
        assert!(!String::from_utf8_lossy(&body).contains("outside"), "{path} leaked a file");
    }
    let (status, head, _) =
        send(port, &format!("POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"));
    assert_eq!(status, 405, "{head}");
}

#[test]
fn a_range_request_gets_206_and_an_unchanged_model_304() {
    let server = start("range");
    let port = server.port;
    let (status, head, body) = get(port, "/models/m.gguf", "Range: bytes=1000-1999\r\n");
    assert_eq!(status, 206, "{head}");
    assert_eq!(header(&head, "content-range"), Some(format!("bytes 1000-1999/{MODEL_BYTES}").as_str()));
    assert_eq!(body, expected_model()[1000..2000]);
    let (_, head, _) = get(port, "/models/m.gguf", "Range: bytes=0-0\r\n");
    let tag = header(&head, "etag").expect("an ETag on every file").to_string();
    let (status, head, body) = get(port, "/models/m.gguf", &format!("If-None-Match: {tag}\r\n"));
    assert_eq!((status, body.len()), (304, 0), "{head}");
    let (status, _, _) = get(port, "/models/m.gguf", "If-None-Match: \"something-else\"\r\n");
    assert_eq!(status, 200);
}

#[test]
fn a_foreign_host_is_refused() {
    let server = start("host");
    let port = server.port;
    for host in [format!("evil.example:{port}"), format!("127.0.0.1:{}", port.wrapping_add(1)), "127.0.0.1".into(), "".into()] {
        let (status, _, body) = send(port, &format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"));
        assert!(status == 403 || status == 400, "Host {host:?}: {status}");
        assert!(!body.starts_with(b"<!doctype"), "Host {host:?} got the page");
    }
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}"), format!("LOCALHOST:{port}")] {
        assert_eq!(send(port, &format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")).0, 200, "{host}");
    }
}

#[test]
fn an_oversized_header_is_refused_and_the_server_goes_on() {
    let server = start("header");
    let port = server.port;
    let huge = "a".repeat(1 << 20);
    let (status, _, _) = get(port, "/", &format!("X-Huge: {huge}\r\n"));
    assert!(status == 431 || status == 400 || status == 0, "{status}");
    assert_eq!(get(port, "/", "").0, 200);
}

#[test]
fn a_stalled_download_does_not_block_the_page() {
    let server = start("stall");
    let port = server.port;
    // Ask for the model and never read it: the server's writes fill the socket and stop.
    let mut stalled = TcpStream::connect(("127.0.0.1", port)).expect("connects");
    write!(stalled, "GET /models/m.gguf HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").expect("writes");
    std::thread::sleep(Duration::from_millis(300));
    let mut worst = Duration::ZERO;
    for _ in 0..5 {
        let t = Instant::now();
        assert_eq!(get(port, "/", "").0, 200);
        worst = worst.max(t.elapsed());
    }
    println!("GET / beside a stalled download: slowest of 5 answered in {:.1} ms", worst.as_secs_f64() * 1e3);
    // A server blocked by the stalled client would not answer at all (the read times out after
    // 20 s and the status is 0); this bound only keeps a slow answer from passing unnoticed.
    assert!(worst < Duration::from_secs(5), "GET / took {worst:?} beside a stalled download");
    let _ = stalled.shutdown(std::net::Shutdown::Both);
}

#[test]
fn two_hundred_clients_download_the_model_at_once() {
    let server = start("concurrent");
    let port = server.port;
    let expected = expected_model();
    let ranges: Vec<_> = (0..200)
        .map(|i| {
            let start = i * 80_000;
            std::thread::spawn(move || {
                // Whole downloads would be 3.2 GB; each client takes its own 64 KiB slice plus
                // a few whole files, so all 200 are open at once.
                let (status, _, body) = if i % 40 == 0 {
                    get(port, "/models/m.gguf", "")
                } else {
                    get(port, "/models/m.gguf", &format!("Range: bytes={start}-{}\r\n", start + 65_535))
                };
                (i, start, status, body)
            })
        })
        .collect();
    for handle in ranges {
        let (i, start, status, body) = handle.join().expect("client thread");
        if i % 40 == 0 {
            assert_eq!(status, 200, "client {i}");
            assert!(body == expected, "client {i}: the whole model");
        } else {
            assert_eq!(status, 206, "client {i}");
            assert!(body == expected[start..start + 65_536], "client {i}: its slice");
        }
    }
}

#[test]
fn a_host_beyond_loopback_is_announced_with_a_warning() {
    let (server, stderr) = start_with("wide", &["--host", "0.0.0.0"]);
    assert!(stderr.contains("warning") && stderr.contains("other machines"), "{stderr}");
    assert_eq!(get(server.port, "/", "").0, 200);
}

/// The last edges of a request: a path segment no file name can have gets 404 and a path
/// over 4 KB 414 (both were 500), a second Host header 400, a request line in absolute form
/// naming a foreign host 403 (it was answered), and several ranges the whole file with 200
/// (it was 416); one range still gets 206.
#[test]
fn long_paths_two_hosts_absolute_forms_and_multi_ranges_get_their_own_answers() {
    let server = start("edges");
    let port = server.port;
    let segment = "a".repeat(300);
    assert_eq!(get(port, &format!("/{segment}"), "").0, 404);
    assert_eq!(get(port, &format!("/models/{segment}.gguf"), "").0, 404);
    let long = format!("/{}", vec!["b".repeat(200); 25].join("/"));
    assert_eq!(get(port, &long, "").0, 414);
    let two_hosts = format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nHost: evil.example:{port}\r\nConnection: close\r\n\r\n");
    assert_eq!(send(port, &two_hosts).0, 400);
    let absolute = format!("GET http://evil.example:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    let (status, _, body) = send(port, &absolute);
    assert_eq!(status, 403);
    assert!(!body.starts_with(b"<!doctype"));
    let own = format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    assert_eq!(send(port, &own).0, 200);
    let (status, head, body) = get(port, "/models/m.gguf", "Range: bytes=0-1,5-6\r\n");
    assert_eq!(status, 200, "{head}");
    assert_eq!(body, expected_model());
    assert_eq!(get(port, "/models/m.gguf", "Range: bytes=5-6\r\n").0, 206);
}

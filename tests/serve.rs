//! `tokenscope serve`: serves the page and the models, nothing else, with the right headers.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command};
use std::time::Duration;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends one raw HTTP/1.0 request and returns (status, headers, body).
fn request(port: u16, method: &str, path: &str) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connects");
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    write!(s, "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").expect("writes");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("reads");
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a header block");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).expect("status");
    (status, head.to_lowercase(), raw[split + 4..].to_vec())
}

fn start(dir: &std::path::Path, port: u16) -> Server {
    let child = Command::new(env!("CARGO_BIN_EXE_tokenscope"))
        .args(["serve", "--port", &port.to_string()])
        .arg("--www")
        .arg(dir.join("www"))
        .arg("--models")
        .arg(dir.join("models"))
        .spawn()
        .expect("serve starts");
    let server = Server(child);
    for _ in 0..100 {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return server;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the server did not start");
}

#[test]
fn serves_only_the_page_and_the_models_with_mime_types_and_csp() {
    let dir = std::env::temp_dir().join(format!("tokenscope-serve-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("www/pkg")).expect("dirs");
    std::fs::create_dir_all(dir.join("models")).expect("dirs");
    std::fs::write(dir.join("www/index.html"), "<!doctype html><title>t</title>").expect("write");
    std::fs::write(dir.join("www/pkg/engine.wasm"), b"\0asm\x01\0\0\0").expect("write");
    std::fs::write(dir.join("www/main.js"), "export {}").expect("write");
    std::fs::write(dir.join("models/m.gguf"), b"GGUF").expect("write");
    std::fs::write(dir.join("secret.txt"), "outside").expect("write");
    let port = 20000 + (std::process::id() % 5000) as u16;
    let _server = start(&dir, port);

    let (status, head, body) = request(port, "GET", "/");
    assert_eq!(status, 200);
    assert!(head.contains("content-type: text/html"), "{head}");
    assert!(head.contains("content-security-policy: default-src 'self'"), "{head}");
    assert!(body.starts_with(b"<!doctype html>"));

    let (status, head, _) = request(port, "GET", "/pkg/engine.wasm");
    assert_eq!(status, 200);
    assert!(head.contains("content-type: application/wasm"), "{head}");
    let (_, head, _) = request(port, "GET", "/main.js?v=1");
    assert!(head.contains("content-type: text/javascript"), "{head}");
    let (status, _, body) = request(port, "GET", "/models/m.gguf");
    assert_eq!((status, body.as_slice()), (200, &b"GGUF"[..]));

    for path in ["/../secret.txt", "/%2e%2e/secret.txt", "/models/../secret.txt", "/pkg/", "/models/", "/nope.html", "/%zz"] {
        let (status, _, body) = request(port, "GET", path);
        assert!(status == 404 || status == 400, "{path}: {status}");
        assert!(!String::from_utf8_lossy(&body).contains("outside"), "{path} leaked a file");
    }
    assert_eq!(request(port, "POST", "/").0, 405);
    let _ = std::fs::remove_dir_all(&dir);
}

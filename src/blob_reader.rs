//! A model file read in place from a JavaScript `Blob` (wasm32 only): `Read + Seek` over the
//! Blob, each read one synchronous `FileReaderSync` call on the byte range asked for, so the
//! file is never copied whole into the wasm memory (which never shrinks) nor held whole in
//! JavaScript. A dropped file's Blob is backed by the file on disk; Cache Storage's by the
//! browser's blob store. `FileReaderSync` exists in workers only, where the engine runs.

use std::io::{Error, ErrorKind, Read, Result, Seek, SeekFrom};

use js_sys::Uint8Array;
use wasm_bindgen::JsCast;
use web_sys::{Blob, FileReaderSync};

/// Most bytes one read asks of the Blob (`read_exact` of a whole tensor loops over reads).
const MAX_READ: usize = 4 << 20;

/// `Read + Seek` over a Blob. Wrap it in a `BufReader`: the GGUF header is read a few bytes at
/// a time, and each read here crosses into JavaScript.
pub struct BlobReader {
    blob: Blob,
    reader: FileReaderSync,
    len: u64,
    pos: u64,
}

impl BlobReader {
    /// A reader at the start of `blob`. Fails outside a worker (no `FileReaderSync`).
    pub fn new(blob: Blob) -> Result<Self> {
        let reader = FileReaderSync::new().map_err(|e| js_error("cannot read the file here (FileReaderSync)", &e))?;
        let len = blob.size() as u64;
        Ok(BlobReader { blob, reader, len, pos: 0 })
    }
}

/// Frees an ArrayBuffer's memory now rather than at the garbage collector's leisure: moving
/// its contents out (`transfer(0)`, where the browser has it) detaches it and leaves an empty
/// one. A load reads the whole file through such buffers; left to the collector they can add
/// hundreds of MB to the tab's peak.
fn release(buffer: &js_sys::ArrayBuffer) {
    if let Ok(transfer) = js_sys::Reflect::get(buffer, &"transfer".into()) {
        if let Some(transfer) = transfer.dyn_ref::<js_sys::Function>() {
            let _ = transfer.call1(buffer, &0.into());
        }
    }
}

fn js_error(context: &str, e: &wasm_bindgen::JsValue) -> Error {
    Error::other(format!("{context}: {}", e.as_string().unwrap_or_else(|| format!("{e:?}"))))
}

impl Read for BlobReader {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        // Each read leaves an ArrayBuffer of its size for JavaScript's garbage collector: in
        // pieces of at most MAX_READ, a 200 MB tensor never has 200 MB of them waiting.
        let want = buf.len().min(MAX_READ) as u64;
        let end = self.len.min(self.pos.saturating_add(want));
        if end <= self.pos {
            return Ok(0);
        }
        let slice = self.blob.slice_with_f64_and_f64(self.pos as f64, end as f64).map_err(|e| js_error("cannot slice the file", &e))?;
        let bytes = self.reader.read_as_array_buffer(&slice).map_err(|e| js_error("cannot read the file", &e))?;
        let view = Uint8Array::new(&bytes);
        let n = view.length() as usize;
        if n as u64 != end - self.pos {
            return Err(Error::new(ErrorKind::UnexpectedEof, format!("the file gave {n} bytes of {} asked", end - self.pos)));
        }
        view.copy_to(&mut buf[..n]);
        release(&bytes);
        self.pos = end;
        Ok(n)
    }
}

impl Seek for BlobReader {
    fn seek(&mut self, to: SeekFrom) -> Result<u64> {
        let target = match to {
            SeekFrom::Start(at) => Some(at),
            SeekFrom::End(delta) => self.len.checked_add_signed(delta),
            SeekFrom::Current(delta) => self.pos.checked_add_signed(delta),
        };
        self.pos = target.ok_or_else(|| Error::new(ErrorKind::InvalidInput, "seek before the start of the file"))?;
        Ok(self.pos)
    }
}

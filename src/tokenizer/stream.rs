//! Incremental detokenization: token bytes in, text out, never half a UTF-8 character.

/// Collects token bytes and releases the longest complete UTF-8 prefix.
///
/// An incomplete character at the end is held until the next token completes it; a byte
/// sequence that can never become valid UTF-8 is released as U+FFFD, like a lossy decode.
#[derive(Debug, Default, Clone)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// An empty stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one token's bytes and returns the text that is now complete (possibly empty).
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // Safe: `valid_up_to` bytes were just checked to be UTF-8.
                    out.push_str(std::str::from_utf8(&self.pending[..valid]).unwrap_or_default());
                    match e.error_len() {
                        None => {
                            // An incomplete character at the end: keep it for the next token.
                            self.pending.drain(..valid);
                            return out;
                        }
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + bad);
                        }
                    }
                }
            }
        }
    }

    /// Releases whatever is held at the end of generation (an unfinished character as U+FFFD).
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }

    /// Bytes held back because they do not yet form a complete character.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }
}

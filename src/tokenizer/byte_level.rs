//! The byte-level alphabet of GPT-2 style BPE vocabularies: each byte is stored in the
//! vocabulary as one printable character. Mapping token strings back to raw bytes lets the
//! streaming decoder cut text only at UTF-8 character boundaries.

/// Table from a vocabulary character back to the byte it stands for.
pub struct ByteAlphabet {
    /// `Some(byte)` for each alphabet character, indexed by code point (all are < 324).
    back: Vec<Option<u8>>,
    /// The character standing for each byte.
    forward: Vec<char>,
}

impl ByteAlphabet {
    /// Builds the mapping: printable Latin-1 bytes stand for themselves, the other 68 bytes
    /// are shifted to code points 256.. in byte order.
    pub fn new() -> Self {
        let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        let mut back = vec![None; 256 + 68];
        let mut forward = Vec::with_capacity(256);
        let mut shifted = 256usize;
        for b in 0u32..256 {
            let code = if printable(b) {
                b as usize
            } else {
                let c = shifted;
                shifted += 1;
                c
            };
            back[code] = Some(b as u8);
            forward.push(char::from_u32(code as u32).unwrap_or(char::REPLACEMENT_CHARACTER));
        }
        ByteAlphabet { back, forward }
    }

    /// The vocabulary form of raw bytes (each byte becomes its alphabet character).
    pub fn to_piece(&self, bytes: &[u8]) -> String {
        bytes.iter().map(|&b| self.forward[b as usize]).collect()
    }

    /// Raw bytes of a vocabulary entry; characters outside the alphabet keep their UTF-8.
    pub fn to_bytes(&self, piece: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(piece.len());
        for ch in piece.chars() {
            match self.back.get(ch as usize).copied().flatten() {
                Some(b) => out.push(b),
                None => {
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                }
            }
        }
        out
    }
}

impl Default for ByteAlphabet {
    fn default() -> Self {
        Self::new()
    }
}

//! A bounds-checked walk over a GGUF header, before candle's reader sees the bytes.
//!
//! candle trusts a few numbers it reads: `general.alignment` is a divisor (0 panics), and a
//! tensor's dimensions are multiplied without overflow checks. This walk reads every length,
//! count, dimension and the alignment with explicit limits derived from the file's size and
//! allocates nothing proportional to what the file claims, so a hostile header fails here with
//! a message naming the field. It also adds up what candle's parsed metadata will take in
//! memory (every value, an array's elements each, is a [`Value`]), for the caller to check
//! against the memory there is before candle allocates it.

use std::io::Read;

use candle_core::quantized::gguf_file::Value;

use crate::error::ModelError;

/// Bytes one parsed metadata value takes in memory besides a string's or an array's contents.
const VALUE_BYTES: u64 = std::mem::size_of::<Value>() as u64;

/// Largest tensor rank GGUF allows (`GGML_MAX_DIMS`).
const MAX_DIMS: u64 = 4;
/// The GGML type ids a tensor may have (those candle's reader knows; it computes with fewer).
const GGML_TYPE_IDS: [u32; 15] = [0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 30];
/// GGUF's value type id of a boolean.
const BOOL: u32 = 7;
/// Deepest nesting of arrays inside arrays we accept.
const MAX_DEPTH: usize = 8;
/// Largest `general.alignment` we accept (GGUF's default is 32).
const MAX_ALIGNMENT: u64 = 1 << 16;
/// No GGML type stores fewer than 1.5 bits per element, so a tensor cannot hold more than
/// `8 / 1.5` elements per byte of file; 8 per byte is a safe ceiling.
const MAX_ELEMENTS_PER_FILE_BYTE: u64 = 8;

/// Walks the header of a GGUF file of `file_len` bytes (the magic already checked by the
/// caller, `reader` positioned at byte 0) and checks every count and size against the bytes
/// that remain, every tensor's rank and element count against the file's size, and
/// `general.alignment` for a power of two. Returns the bytes candle's parse of the metadata
/// will take in memory: keys, values (each array element a [`Value`]) and strings.
pub fn check_header<R: Read>(reader: &mut R, file_len: u64) -> Result<u64, ModelError> {
    let mut s = Scan { reader, pos: 0, file_len, metadata_bytes: 0 };
    s.skip(4, "the magic")?;
    let version = s.u32("the version")?;
    let wide = match version {
        1 => false,
        2 | 3 => true,
        v => return Err(ModelError::Malformed(format!("GGUF version {v} is not one of 1, 2, 3"))),
    };
    let tensor_count = s.len(wide, "the tensor count")?;
    let kv_count = s.len(wide, "the metadata count")?;
    // Each metadata entry needs at least a key length, a type and one byte; each tensor entry a
    // name length, a rank, a type and an offset.
    let prefix = if wide { 8 } else { 4 };
    s.fits(kv_count, prefix + 5, "the metadata count")?;
    s.fits(tensor_count, prefix + 16, "the tensor count")?;
    for _ in 0..kv_count {
        let key = s.string(wide, "a metadata key")?;
        s.metadata_bytes = s.metadata_bytes.saturating_add(key.len() as u64 + VALUE_BYTES);
        let ty = s.u32("a metadata type")?;
        if key == "general.alignment" {
            let alignment = s.integer(ty, "general.alignment")?;
            if alignment == 0 || !alignment.is_power_of_two() || alignment > MAX_ALIGNMENT {
                return Err(ModelError::Metadata {
                    key: "general.alignment".into(),
                    problem: format!("is {alignment}; it must be a power of two from 1 to {MAX_ALIGNMENT}"),
                });
            }
        } else {
            s.value(ty, wide, 0, &key)?;
        }
    }
    let max_elements = file_len.saturating_mul(MAX_ELEMENTS_PER_FILE_BYTE);
    for _ in 0..tensor_count {
        let name = s.string(wide, "a tensor name")?;
        let rank = u64::from(s.u32("a tensor rank")?);
        if rank > MAX_DIMS {
            return Err(ModelError::Malformed(format!("tensor {} has {rank} dimensions; GGUF allows at most {MAX_DIMS}", shown(&name))));
        }
        let mut elements = 1u64;
        for _ in 0..rank {
            let d = if wide { s.u64("a tensor dimension")? } else { u64::from(s.u32("a tensor dimension")?) };
            elements = elements.checked_mul(d).filter(|&n| n <= max_elements).ok_or_else(|| {
                ModelError::Malformed(format!("tensor {} claims more elements than a {file_len}-byte file can hold", shown(&name)))
            })?;
        }
        let ty = s.u32("a tensor type")?;
        if !GGML_TYPE_IDS.contains(&ty) {
            return Err(ModelError::Malformed(format!("tensor {} has type id {ty}, which is no GGML type", shown(&name))));
        }
        s.skip(8, "a tensor offset")?;
    }
    Ok(s.metadata_bytes)
}

/// A file string made safe to print: control characters (terminal escapes among them) and
/// quotes are escaped, and the result is cut at 80 characters.
pub fn shown(s: &str) -> String {
    let mut out: String = s.chars().take(80).flat_map(char::escape_debug).collect();
    if s.chars().count() > 80 {
        out.push('…');
    }
    out
}

struct Scan<'a, R: Read> {
    reader: &'a mut R,
    pos: u64,
    file_len: u64,
    /// What the metadata walked so far will take in memory once candle parses it.
    metadata_bytes: u64,
}

impl<R: Read> Scan<'_, R> {
    fn remaining(&self) -> u64 {
        self.file_len.saturating_sub(self.pos)
    }

    fn truncated(&self, what: &str) -> ModelError {
        ModelError::Truncated { detail: format!("the header ends inside {what} at byte {}", self.pos) }
    }

    fn bytes<const N: usize>(&mut self, what: &str) -> Result<[u8; N], ModelError> {
        let mut b = [0u8; N];
        self.reader.read_exact(&mut b).map_err(|_| self.truncated(what))?;
        self.pos += N as u64;
        Ok(b)
    }

    fn u32(&mut self, what: &str) -> Result<u32, ModelError> {
        self.bytes::<4>(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64, ModelError> {
        self.bytes::<8>(what).map(u64::from_le_bytes)
    }

    fn len(&mut self, wide: bool, what: &str) -> Result<u64, ModelError> {
        if wide {
            self.u64(what)
        } else {
            self.u32(what).map(u64::from)
        }
    }

    /// Checks that `count` items of at least `each` bytes fit in what is left of the file.
    fn fits(&self, count: u64, each: u64, what: &str) -> Result<(), ModelError> {
        if count.checked_mul(each).is_none_or(|n| n > self.remaining()) {
            return Err(ModelError::Malformed(format!("{what} ({count}) cannot fit in the {} bytes left in the file", self.remaining())));
        }
        Ok(())
    }

    /// Skips `n` bytes, copying through a small buffer (no allocation sized by the file).
    fn skip(&mut self, n: u64, what: &str) -> Result<(), ModelError> {
        if n > self.remaining() {
            return Err(self.truncated(what));
        }
        let mut left = n;
        let mut buf = [0u8; 4096];
        while left > 0 {
            let take = left.min(buf.len() as u64) as usize;
            self.reader.read_exact(&mut buf[..take]).map_err(|_| self.truncated(what))?;
            left -= take as u64;
        }
        self.pos += n;
        Ok(())
    }

    /// Reads a length-prefixed string; only short ones (keys, names) are kept whole.
    fn string(&mut self, wide: bool, what: &str) -> Result<String, ModelError> {
        let n = self.len(wide, what)?;
        if n > self.remaining() {
            return Err(self.truncated(what));
        }
        if n > 4096 {
            self.skip(n, what)?;
            return Ok(String::from("(a string over 4096 bytes)"));
        }
        let mut v = vec![0u8; n as usize];
        self.reader.read_exact(&mut v).map_err(|_| self.truncated(what))?;
        self.pos += n;
        Ok(String::from_utf8_lossy(&v).into_owned())
    }

    /// Size in bytes of a fixed-size GGUF value type, or `None` for strings and arrays.
    fn fixed_size(ty: u32, key: &str) -> Result<Option<u64>, ModelError> {
        Ok(match ty {
            0 | 1 | 7 => Some(1),
            2 | 3 => Some(2),
            4..=6 => Some(4),
            10..=12 => Some(8),
            8 | 9 => None,
            t => return Err(ModelError::Malformed(format!("metadata {} has unknown value type {t}", shown(key)))),
        })
    }

    fn value(&mut self, ty: u32, wide: bool, depth: usize, key: &str) -> Result<(), ModelError> {
        self.metadata_bytes = self.metadata_bytes.saturating_add(VALUE_BYTES);
        if ty == BOOL {
            return self.boolean(key);
        }
        if let Some(size) = Self::fixed_size(ty, key)? {
            return self.skip(size, key);
        }
        if ty == 8 {
            let n = self.len(wide, key)?;
            self.skip(n, key)?;
            self.metadata_bytes = self.metadata_bytes.saturating_add(n);
            return Ok(());
        }
        if depth >= MAX_DEPTH {
            return Err(ModelError::Malformed(format!("metadata {} nests arrays deeper than {MAX_DEPTH}", shown(key))));
        }
        let elem = self.u32(key)?;
        let n = self.len(wide, key)?;
        match Self::fixed_size(elem, key)? {
            Some(_) if elem == BOOL => {
                self.fits(n, 1, &format!("the length of array {}", shown(key)))?;
                self.metadata_bytes = self.metadata_bytes.saturating_add(n.saturating_mul(VALUE_BYTES));
                (0..n).try_for_each(|_| self.boolean(key))
            }
            Some(size) => {
                self.fits(n, size, &format!("the length of array {}", shown(key)))?;
                self.metadata_bytes = self.metadata_bytes.saturating_add(n.saturating_mul(VALUE_BYTES));
                self.skip(n * size, key)
            }
            None => {
                // Strings and arrays take at least their length prefix each.
                self.fits(n, if wide { 8 } else { 4 }, &format!("the length of array {}", shown(key)))?;
                for _ in 0..n {
                    self.value(elem, wide, depth + 1, key)?;
                }
                Ok(())
            }
        }
    }

    /// Reads a boolean: one byte, 0 or 1.
    fn boolean(&mut self, key: &str) -> Result<(), ModelError> {
        match self.bytes::<1>(key)?[0] {
            0 | 1 => Ok(()),
            b => Err(ModelError::Metadata { key: shown(key), problem: format!("holds a boolean byte {b}, not 0 or 1") }),
        }
    }

    /// Reads an integer value of any GGUF integer type as `u64` (negative values are refused).
    fn integer(&mut self, ty: u32, key: &str) -> Result<u64, ModelError> {
        let bad = |problem: &str| ModelError::Metadata { key: key.to_string(), problem: problem.to_string() };
        let v: i128 = match ty {
            0 => self.bytes::<1>(key)?[0].into(),
            1 => (self.bytes::<1>(key)?[0] as i8).into(),
            2 => u16::from_le_bytes(self.bytes::<2>(key)?).into(),
            3 => i16::from_le_bytes(self.bytes::<2>(key)?).into(),
            4 => u32::from_le_bytes(self.bytes::<4>(key)?).into(),
            5 => i32::from_le_bytes(self.bytes::<4>(key)?).into(),
            10 => u64::from_le_bytes(self.bytes::<8>(key)?).into(),
            11 => i64::from_le_bytes(self.bytes::<8>(key)?).into(),
            _ => return Err(bad("is not an integer")),
        };
        u64::try_from(v).map_err(|_| bad("is negative"))
    }
}

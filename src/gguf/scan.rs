//! A bounds-checked walk over a GGUF header, before candle's reader sees the bytes: the reader
//! of truth for what the header says.
//!
//! candle trusts a few numbers it reads: `general.alignment` is a divisor (0 panics), and a
//! tensor's dimensions are multiplied without overflow checks. This walk reads every length,
//! count, dimension and the alignment with explicit limits derived from the file's size and
//! allocates nothing proportional to what the file claims, so a hostile header fails here with
//! a message naming the field. It names keys and tensors exactly as candle does (trailing NUL
//! bytes dropped, invalid UTF-8 replaced), refuses a key or tensor name given twice (candle
//! would keep the last, llama.cpp refuses), and honours `general.alignment` only in the types
//! candle reads it from, so the two readings cannot differ about which value is checked; the
//! [`Header`] it returns lists every key and tensor it walked, and [`Header::disagreement`]
//! holds candle's parse to it. It also adds up what candle's parsed metadata will take in
//! memory (every value, an array's elements each, is a [`Value`]), for the caller to check
//! against the memory there is before candle allocates it.

use std::io::Read;

use std::collections::HashSet;

use candle_core::quantized::gguf_file::{Content, Value};

use super::stand_in;
use crate::error::ModelError;

/// Bytes one parsed metadata value takes in memory besides a string's or an array's contents.
const VALUE_BYTES: u64 = std::mem::size_of::<Value>() as u64;

/// Largest tensor rank GGUF allows (`GGML_MAX_DIMS`).
const MAX_DIMS: u64 = 4;
/// The GGML type ids candle's reader knows (the engine computes with fewer); a tensor may also
/// have a type read through a stand-in ([`stand_in::STAND_INS`]).
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

/// The GGUF value type ids `general.alignment` is read from (u8, i8, u16, i16, u32, i32: those
/// candle honours; it ignores any other and aligns to 32).
const ALIGNMENT_TYPES: std::ops::RangeInclusive<u32> = 0..=5;
/// GGUF's alignment where `general.alignment` is absent.
const DEFAULT_ALIGNMENT: u64 = 32;
/// Longest key or tensor name we accept (llama.cpp's tensor names are under 64 bytes).
const MAX_NAME_BYTES: u64 = 4096;

/// What a GGUF header says, as walked by [`check_header`].
#[derive(Debug, Default)]
pub struct Header {
    /// Bytes candle's parse of the metadata will take in memory: keys, values (each array
    /// element a [`Value`]) and strings.
    pub metadata_bytes: u64,
    /// Each metadata key in file order, named as candle names it, with its value type id and,
    /// for an array, its length.
    pub keys: Vec<(String, u32, Option<u64>)>,
    /// Each tensor in file order.
    pub tensors: Vec<TensorEntry>,
    /// Where the tensor data starts: the header's end rounded up to the alignment.
    pub data_offset: u64,
}

/// One tensor's entry in the header.
#[derive(Debug)]
pub struct TensorEntry {
    /// Its name, as candle names it.
    pub name: String,
    /// Its dimensions, innermost first, as stored.
    pub dims: Vec<u64>,
    /// Its GGML type id.
    pub ty: u32,
    /// The byte in the file where that type id is stored.
    pub type_at: u64,
    /// Its offset in the tensor data.
    pub offset: u64,
}

/// GGUF's value type id of a parsed value.
fn type_id(v: &Value) -> u32 {
    match v {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::String(_) => 8,
        Value::Array(_) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

impl Header {
    /// Where candle must be shown a stand-in's type id in place of the file's
    /// ([`super::stand_in::PatchedHeader`]'s patches): each such tensor's type field.
    pub fn stand_in_patches(&self) -> Vec<(u64, [u8; 4])> {
        let patch = |t: &TensorEntry| stand_in::for_id(t.ty).map(|s| (t.type_at, crate::gguf::type_id(s.parsed_as).to_le_bytes()));
        self.tensors.iter().filter_map(patch).collect()
    }

    /// Where candle's parse of the same bytes says something else than this walk: a key, a
    /// value type, an array length, a tensor's shape, type or offset, or where the data starts;
    /// `None` when the two agree on all of it.
    pub fn disagreement(&self, content: &Content) -> Option<String> {
        if content.metadata.len() != self.keys.len() {
            return Some(format!("{} metadata keys against candle's {}", self.keys.len(), content.metadata.len()));
        }
        for (key, ty, len) in &self.keys {
            let Some(value) = content.metadata.get(key) else {
                return Some(format!("key {} is not among candle's", shown(key)));
            };
            let candle_len = match value {
                Value::Array(a) => Some(a.len() as u64),
                _ => None,
            };
            if type_id(value) != *ty || candle_len != *len {
                return Some(format!(
                    "key {} is type {ty} (length {len:?}), candle's type {} (length {candle_len:?})",
                    shown(key),
                    type_id(value)
                ));
            }
        }
        if content.tensor_infos.len() != self.tensors.len() {
            return Some(format!("{} tensors against candle's {}", self.tensors.len(), content.tensor_infos.len()));
        }
        for TensorEntry { name, dims, ty, offset, .. } in &self.tensors {
            let Some(info) = content.tensor_infos.get(name) else {
                return Some(format!("tensor {} is not among candle's", shown(name)));
            };
            let candle_dims: Vec<u64> = info.shape.dims().iter().rev().map(|&d| d as u64).collect();
            let candle_type = crate::gguf::type_id(info.ggml_dtype);
            // A type read through a stand-in is shown to candle as the stand-in.
            let shown_type = stand_in::for_id(*ty).map_or(*ty, |s| crate::gguf::type_id(s.parsed_as));
            if candle_dims != *dims || candle_type != shown_type || info.offset != *offset {
                return Some(format!(
                    "tensor {} is {dims:?} of type {ty} at {offset}, candle's {candle_dims:?} of type {candle_type} at {}",
                    shown(name),
                    info.offset
                ));
            }
        }
        (content.tensor_data_offset != self.data_offset)
            .then(|| format!("the tensor data starts at byte {}, candle's at {}", self.data_offset, content.tensor_data_offset))
    }
}

/// Walks the header of a GGUF file of `file_len` bytes (the magic already checked by the
/// caller, `reader` positioned at byte 0) and checks every count and size against the bytes
/// that remain, every tensor's rank and element count against the file's size, every key and
/// tensor name for a second use, and `general.alignment` for a power of two in a type candle
/// reads. Returns what the header says ([`Header`]).
pub fn check_header<R: Read>(reader: &mut R, file_len: u64) -> Result<Header, ModelError> {
    let mut s = Scan { reader, pos: 0, file_len, metadata_bytes: 0 };
    let mut header = Header::default();
    let mut alignment = DEFAULT_ALIGNMENT;
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
    let mut seen = HashSet::new();
    for _ in 0..kv_count {
        let key = s.string(wide, "a metadata key")?;
        if !seen.insert(key.clone()) {
            return Err(ModelError::Metadata { key: shown(&key), problem: "is given twice".into() });
        }
        s.metadata_bytes = s.metadata_bytes.saturating_add(key.len() as u64 + VALUE_BYTES);
        let ty = s.u32("a metadata type")?;
        let mut len = None;
        if key == "general.alignment" {
            if !ALIGNMENT_TYPES.contains(&ty) {
                return Err(ModelError::Metadata {
                    key: key.clone(),
                    problem: format!("has value type {ty}; it must be an integer of at most 32 bits"),
                });
            }
            alignment = s.integer(ty, "general.alignment")?;
            if alignment == 0 || !alignment.is_power_of_two() || alignment > MAX_ALIGNMENT {
                return Err(ModelError::Metadata {
                    key: "general.alignment".into(),
                    problem: format!("is {alignment}; it must be a power of two from 1 to {MAX_ALIGNMENT}"),
                });
            }
        } else {
            len = s.value(ty, wide, 0, &key)?;
        }
        header.keys.push((key, ty, len));
    }
    let max_elements = file_len.saturating_mul(MAX_ELEMENTS_PER_FILE_BYTE);
    let mut names = HashSet::new();
    for _ in 0..tensor_count {
        let name = s.string(wide, "a tensor name")?;
        if !names.insert(name.clone()) {
            return Err(ModelError::Malformed(format!("tensor {} is named twice", shown(&name))));
        }
        let rank = u64::from(s.u32("a tensor rank")?);
        if rank > MAX_DIMS {
            return Err(ModelError::Malformed(format!("tensor {} has {rank} dimensions; GGUF allows at most {MAX_DIMS}", shown(&name))));
        }
        let mut elements = 1u64;
        let mut dims = Vec::with_capacity(rank as usize);
        for _ in 0..rank {
            let d = if wide { s.u64("a tensor dimension")? } else { u64::from(s.u32("a tensor dimension")?) };
            elements = elements.checked_mul(d).filter(|&n| n <= max_elements).ok_or_else(|| {
                ModelError::Malformed(format!("tensor {} claims more elements than a {file_len}-byte file can hold", shown(&name)))
            })?;
            dims.push(d);
        }
        let type_at = s.pos;
        let ty = s.u32("a tensor type")?;
        if !GGML_TYPE_IDS.contains(&ty) && stand_in::for_id(ty).is_none() {
            // A type ggml has (an IQ quantization, say) that candle's reader does not know is
            // a file of the wrong kind for this engine, not a malformed one: named as such.
            return Err(match super::ggml_type_name(ty) {
                Some(dtype) => ModelError::UnsupportedTensorType {
                    name: shown(&name),
                    dtype: dtype.to_string(),
                    supported: super::supported_type_names(),
                },
                None => ModelError::Malformed(format!("tensor {} has type id {ty}, which is no GGML type", shown(&name))),
            });
        }
        let offset = s.u64("a tensor offset")?;
        header.tensors.push(TensorEntry { name, dims, ty, type_at, offset });
    }
    header.metadata_bytes = s.metadata_bytes;
    header.data_offset = s.pos.div_ceil(alignment) * alignment;
    Ok(header)
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

    /// Reads a key or tensor name (at most [`MAX_NAME_BYTES`]) as candle does: trailing NUL
    /// bytes dropped, invalid UTF-8 replaced.
    fn string(&mut self, wide: bool, what: &str) -> Result<String, ModelError> {
        let n = self.len(wide, what)?;
        if n > self.remaining() {
            return Err(self.truncated(what));
        }
        if n > MAX_NAME_BYTES {
            return Err(ModelError::Malformed(format!("{what} is {n} bytes long; at most {MAX_NAME_BYTES} are accepted")));
        }
        let mut v = vec![0u8; n as usize];
        self.reader.read_exact(&mut v).map_err(|_| self.truncated(what))?;
        self.pos += n;
        while v.last() == Some(&0) {
            v.pop();
        }
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

    /// Walks a value of type `ty`; returns its length if it is an array.
    fn value(&mut self, ty: u32, wide: bool, depth: usize, key: &str) -> Result<Option<u64>, ModelError> {
        self.metadata_bytes = self.metadata_bytes.saturating_add(VALUE_BYTES);
        if ty == BOOL {
            return self.boolean(key).map(|_| None);
        }
        if let Some(size) = Self::fixed_size(ty, key)? {
            return self.skip(size, key).map(|_| None);
        }
        if ty == 8 {
            let n = self.len(wide, key)?;
            self.skip(n, key)?;
            self.metadata_bytes = self.metadata_bytes.saturating_add(n);
            return Ok(None);
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
                (0..n).try_for_each(|_| self.boolean(key))?;
            }
            Some(size) => {
                self.fits(n, size, &format!("the length of array {}", shown(key)))?;
                self.metadata_bytes = self.metadata_bytes.saturating_add(n.saturating_mul(VALUE_BYTES));
                self.skip(n * size, key)?;
            }
            None => {
                // Strings and arrays take at least their length prefix each.
                self.fits(n, if wide { 8 } else { 4 }, &format!("the length of array {}", shown(key)))?;
                for _ in 0..n {
                    self.value(elem, wide, depth + 1, key)?;
                }
            }
        }
        Ok(Some(n))
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

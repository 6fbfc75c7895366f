//! GGUF bytes -> header, metadata and tensors, through candle-core's GGUF reader: the bottom
//! of the data flow, read by the model's loader and the tokenizer alike.
//!
//! [`check_header`] walks the header first, so nothing candle reads is trusted blindly, and
//! candle's parse is then held to what the walk found ([`scan::Header::disagreement`]).
//! Everything a user can get wrong (a foreign file, a truncated download, a tensor type
//! we cannot compute with) becomes a [`ModelError`], never a panic. A type candle does not
//! know but the engine holds in another (IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S, IQ2_XXS, IQ1_S, TQ1_0,
//! TQ2_0, Q2_0 and Q1_0 as Q8_0, IQ2_XS and IQ2_S as F16, IQ1_M as Q6_K) goes through a
//! stand-in ([`stand_in`]).

use std::io::{Read, Seek, SeekFrom};

use candle_core::quantized::ggml_file::qtensor_from_ggml;
use candle_core::quantized::gguf_file::{Content, TensorInfo, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Device;

pub mod iq1_m;
pub mod iq1_s;
pub mod iq2_grids;
pub mod iq2_s_grids;
pub mod iq2_xs;
pub mod iq2_xxs;
pub mod iq3;
pub mod iq3_grids;
pub mod iq4_nl;
pub mod iq4_xs;
pub mod q1_0;
pub mod scan;
pub mod stand_in;
pub mod ternary;

use std::collections::HashMap;

use crate::error::ModelError;
use scan::{check_header, shown};
use stand_in::{PatchedHeader, StandIn};

/// Tensor types the engine computes with, on every backend; it also reads the types in
/// [`stand_in::STAND_INS`], each held as one of these.
pub const SUPPORTED_TYPES: [GgmlDType; 13] = [
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_0,
    GgmlDType::Q2K,
    GgmlDType::Q3K,
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
    GgmlDType::F16,
    GgmlDType::BF16,
    GgmlDType::F32,
];

/// Every tensor type id ggml names (ggml.h's `ggml_type`; the ids it retired left out), with
/// its name as llama.cpp writes it. candle reads the first fifteen of them and BF16.
const GGML_TYPES: [(u32, &str); 35] = [
    (0, "F32"),
    (1, "F16"),
    (2, "Q4_0"),
    (3, "Q4_1"),
    (6, "Q5_0"),
    (7, "Q5_1"),
    (8, "Q8_0"),
    (9, "Q8_1"),
    (10, "Q2_K"),
    (11, "Q3_K"),
    (12, "Q4_K"),
    (13, "Q5_K"),
    (14, "Q6_K"),
    (15, "Q8_K"),
    (16, "IQ2_XXS"),
    (17, "IQ2_XS"),
    (18, "IQ3_XXS"),
    (19, "IQ1_S"),
    (20, "IQ4_NL"),
    (21, "IQ3_S"),
    (22, "IQ2_S"),
    (23, "IQ4_XS"),
    (24, "I8"),
    (25, "I16"),
    (26, "I32"),
    (27, "I64"),
    (28, "F64"),
    (29, "IQ1_M"),
    (30, "BF16"),
    (34, "TQ1_0"),
    (35, "TQ2_0"),
    (39, "MXFP4"),
    (40, "NVFP4"),
    (41, "Q1_0"),
    (42, "Q2_0"),
];

/// The name of GGML tensor type `id` (`IQ4_NL` for 20, ...), if ggml has one.
pub fn ggml_type_name(id: u32) -> Option<&'static str> {
    GGML_TYPES.iter().find(|(i, _)| *i == id).map(|(_, name)| *name)
}

/// A tensor type's name as llama.cpp writes it (`Q4_K`, `BF16`, ...).
pub fn type_name(t: GgmlDType) -> &'static str {
    ggml_type_name(type_id(t)).unwrap_or("an unnamed type")
}

/// A tensor type's GGML id, as a GGUF file stores it.
pub fn type_id(t: GgmlDType) -> u32 {
    match t {
        GgmlDType::F32 => 0,
        GgmlDType::F16 => 1,
        GgmlDType::Q4_0 => 2,
        GgmlDType::Q4_1 => 3,
        GgmlDType::Q5_0 => 6,
        GgmlDType::Q5_1 => 7,
        GgmlDType::Q8_0 => 8,
        GgmlDType::Q8_1 => 9,
        GgmlDType::Q2K => 10,
        GgmlDType::Q3K => 11,
        GgmlDType::Q4K => 12,
        GgmlDType::Q5K => 13,
        GgmlDType::Q6K => 14,
        GgmlDType::Q8K => 15,
        GgmlDType::BF16 => 30,
    }
}

/// The types the engine reads by name, comma-separated, for error messages:
/// [`SUPPORTED_TYPES`], then those read through a stand-in.
pub fn supported_type_names() -> String {
    let stand_ins = stand_in::STAND_INS.iter().filter_map(|s| ggml_type_name(s.id));
    SUPPORTED_TYPES.map(type_name).into_iter().chain(stand_ins).collect::<Vec<_>>().join(", ")
}

/// A parsed GGUF header: metadata and tensor directory, checked against the file size.
pub struct Gguf {
    content: Content,
    file_len: u64,
    /// The tensors whose type is read through a stand-in, by name.
    stand_ins: HashMap<String, &'static StandIn>,
}

impl Gguf {
    /// Reads the header of a GGUF file and checks that every tensor lies inside the file.
    pub fn read<R: Read + Seek>(reader: &mut R) -> Result<Self, ModelError> {
        let file_len = reader.seek(SeekFrom::End(0)).map_err(|e| ModelError::Malformed(format!("cannot measure the file: {e}")))?;
        reader.seek(SeekFrom::Start(0)).map_err(|e| ModelError::Malformed(format!("cannot rewind the file: {e}")))?;
        let mut magic = [0u8; 4];
        let got = read_up_to(reader, &mut magic)?;
        if got < 4 || &magic != b"GGUF" {
            let found = String::from_utf8_lossy(&magic[..got]).escape_debug().to_string();
            return Err(ModelError::NotGguf { found });
        }
        reader.seek(SeekFrom::Start(0)).map_err(|e| ModelError::Malformed(format!("cannot rewind the file: {e}")))?;
        let header = check_header(reader, file_len)?;
        crate::memory::check_fits("metadata", header.metadata_bytes, crate::memory::available_bytes())?;
        reader.seek(SeekFrom::Start(0)).map_err(|e| ModelError::Malformed(format!("cannot rewind the file: {e}")))?;
        let stand_ins: HashMap<String, &'static StandIn> =
            header.tensors.iter().filter_map(|t| stand_in::for_id(t.ty).map(|s| (t.name.clone(), s))).collect();
        let content = Content::read(&mut PatchedHeader::new(reader, header.stand_in_patches())).map_err(|e| classify_read_error(&e))?;
        // Our walk is the truth about the header; candle's parse of it must say the same.
        if let Some(difference) = header.disagreement(&content) {
            return Err(ModelError::ReadersDisagree(difference));
        }
        let gguf = Gguf { content, file_len, stand_ins };
        gguf.check_extents()?;
        Ok(gguf)
    }

    /// Total size of the file in bytes.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    fn check_extents(&self) -> Result<(), ModelError> {
        // In file order, so the message names the first tensor that runs past the end (the
        // directory is a hash map: its own order changes from one read to the next).
        let mut infos: Vec<_> = self.content.tensor_infos.iter().collect();
        infos.sort_by_key(|(name, info)| (info.offset, name.as_str()));
        for (name, info) in infos {
            // A block never spans two rows (llama.cpp refuses such a file the same way).
            let row = info.shape.dims().last().copied().unwrap_or(1);
            let (block, _) = self.stored_block(name, info);
            if row % block != 0 {
                return Err(ModelError::Malformed(format!(
                    "tensor {} has rows of {row} weights, not a multiple of its type's block of {block}",
                    shown(name)
                )));
            }
            let bytes = self.tensor_bytes(name);
            let end = self.content.tensor_data_offset.saturating_add(info.offset).saturating_add(bytes);
            if end > self.file_len {
                return Err(ModelError::Truncated {
                    detail: format!("tensor {} ends at byte {end} but the file has {} bytes", shown(name), self.file_len),
                });
            }
        }
        Ok(())
    }

    /// Number of tensors in the file's directory.
    pub fn tensor_count(&self) -> usize {
        self.content.tensor_infos.len()
    }

    /// Every metadata entry (key, value), in no particular order.
    pub fn metadata(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.content.metadata.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The metadata value under `key`, if present.
    pub fn value(&self, key: &str) -> Option<&Value> {
        self.content.metadata.get(key)
    }

    /// A required string value.
    pub fn string(&self, key: &str) -> Result<&str, ModelError> {
        self.string_opt(key)?.ok_or_else(|| meta_err(key, "is missing"))
    }

    /// An optional string value (present but not a string is an error).
    pub fn string_opt(&self, key: &str) -> Result<Option<&str>, ModelError> {
        match self.value(key) {
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(meta_err(key, "is not a string")),
            None => Ok(None),
        }
    }

    /// A required non-negative integer value, whatever its stored width.
    pub fn usize(&self, key: &str) -> Result<usize, ModelError> {
        let v = self.value(key).ok_or_else(|| meta_err(key, "is missing"))?;
        as_usize(v).ok_or_else(|| meta_err(key, "is not a non-negative integer"))
    }

    /// An optional non-negative integer value.
    pub fn usize_opt(&self, key: &str) -> Result<Option<usize>, ModelError> {
        match self.value(key) {
            None => Ok(None),
            Some(v) => as_usize(v).map(Some).ok_or_else(|| meta_err(key, "is not a non-negative integer")),
        }
    }

    /// An optional count that llama.cpp reads as one value or one a layer
    /// (`get_key_or_arr`: the head counts and the feed-forward width): an array must hold
    /// `n_layers` values, all equal, since every block here has one shape. Granite 4's dense
    /// files write `attention.head_count_kv` so; OpenELM's, LFM2's and the hybrids' arrays
    /// vary and are refused, naming the values.
    pub fn layer_usize_opt(&self, key: &str, n_layers: usize) -> Result<Option<usize>, ModelError> {
        let arr = match self.value(key) {
            Some(Value::Array(a)) => a,
            _ => return self.usize_opt(key),
        };
        if arr.len() != n_layers {
            return Err(meta_err(key, &format!("holds {} values for {n_layers} layers", arr.len())));
        }
        let values = arr
            .iter()
            .map(|v| as_usize(v).ok_or_else(|| meta_err(key, "holds a value that is not a non-negative integer")))
            .collect::<Result<Vec<_>, _>>()?;
        let mut distinct = values.clone();
        distinct.sort_unstable();
        distinct.dedup();
        match distinct[..] {
            [] => Err(meta_err(key, "is an empty array")),
            [one] => Ok(Some(one)),
            _ => Err(meta_err(key, &format!("varies by layer ({values:?}); tokenscope runs models whose blocks all have one shape"))),
        }
    }

    /// A required count read as [`Gguf::layer_usize_opt`] reads it.
    pub fn layer_usize(&self, key: &str, n_layers: usize) -> Result<usize, ModelError> {
        self.layer_usize_opt(key, n_layers)?.ok_or_else(|| meta_err(key, "is missing"))
    }

    /// An optional floating-point value.
    pub fn f32_opt(&self, key: &str) -> Result<Option<f32>, ModelError> {
        match self.value(key) {
            None => Ok(None),
            Some(Value::F32(x)) => Ok(Some(*x)),
            Some(Value::F64(x)) => Ok(Some(*x as f32)),
            Some(_) => Err(meta_err(key, "is not a number")),
        }
    }

    /// A required boolean value.
    pub fn bool(&self, key: &str) -> Result<bool, ModelError> {
        match self.value(key) {
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(meta_err(key, "is not a boolean")),
            None => Err(meta_err(key, "is missing")),
        }
    }

    /// An optional boolean value.
    pub fn bool_opt(&self, key: &str) -> Option<bool> {
        match self.value(key) {
            Some(Value::Bool(b)) => Some(*b),
            _ => None,
        }
    }

    /// A required array of strings.
    pub fn strings(&self, key: &str) -> Result<Vec<&str>, ModelError> {
        let arr = match self.value(key) {
            Some(Value::Array(a)) => a,
            Some(_) => return Err(meta_err(key, "is not an array")),
            None => return Err(meta_err(key, "is missing")),
        };
        arr.iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.as_str()),
                _ => Err(meta_err(key, "holds a value that is not a string")),
            })
            .collect()
    }

    /// An optional array of integers.
    pub fn ints_opt(&self, key: &str) -> Result<Option<Vec<i64>>, ModelError> {
        self.array_opt(key, "an integer", as_i64)
    }

    /// An optional array of numbers, as f32.
    pub fn floats_opt(&self, key: &str) -> Result<Option<Vec<f32>>, ModelError> {
        let number = |v: &Value| match v {
            Value::F32(x) => Some(*x),
            Value::F64(x) => Some(*x as f32),
            _ => None,
        };
        self.array_opt(key, "a number", number)
    }

    /// An optional array, each element read by `item` (`None`: not `what` it must be).
    fn array_opt<T>(&self, key: &str, what: &str, item: impl Fn(&Value) -> Option<T>) -> Result<Option<Vec<T>>, ModelError> {
        let arr = match self.value(key) {
            Some(Value::Array(a)) => a,
            Some(_) => return Err(meta_err(key, "is not an array")),
            None => return Ok(None),
        };
        arr.iter()
            .map(|v| item(v).ok_or_else(|| meta_err(key, &format!("holds a value that is not {what}"))))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// Shape (rows first, as candle reports it) and type of a tensor as [`Gguf::tensor`]
    /// returns it (the held type of one read through a stand-in), if present.
    pub fn tensor_info(&self, name: &str) -> Option<(Vec<usize>, GgmlDType)> {
        let held = |i: &TensorInfo| self.stand_ins.get(name).map_or(i.ggml_dtype, |s| s.held_as);
        self.content.tensor_infos.get(name).map(|i| (i.shape.dims().to_vec(), held(i)))
    }

    /// The name of the type a tensor has in the file (`IQ4_NL` where [`Gguf::tensor_info`]
    /// says Q8_0), if present.
    pub fn stored_type_name(&self, name: &str) -> Option<&'static str> {
        match self.stand_ins.get(name) {
            Some(s) => ggml_type_name(s.id),
            None => self.content.tensor_infos.get(name).map(|i| type_name(i.ggml_dtype)),
        }
    }

    /// How many tensors the file stores in each type, by llama.cpp's name for it (`Q4_K`: 16).
    pub fn tensor_type_counts(&self) -> std::collections::BTreeMap<&'static str, usize> {
        let mut counts = std::collections::BTreeMap::new();
        for name in self.content.tensor_infos.keys() {
            *counts.entry(self.stored_type_name(name).unwrap_or("an unnamed type")).or_insert(0) += 1;
        }
        counts
    }

    /// Refuses a missing tensor or one whose type is outside [`SUPPORTED_TYPES`].
    pub fn check_type(&self, name: &str) -> Result<(), ModelError> {
        let (_, dtype) = self.tensor_info(name).ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        if !SUPPORTED_TYPES.contains(&dtype) {
            return Err(ModelError::UnsupportedTensorType {
                name: name.to_string(),
                dtype: type_name(dtype).to_string(),
                supported: supported_type_names(),
            });
        }
        Ok(())
    }

    /// Reads one tensor's data, refusing types outside [`SUPPORTED_TYPES`] and the stand-ins
    /// (whose blocks are rewritten into their held type here). Its bytes are read into a
    /// buffer reserved fallibly (candle's own read allocates it outright), so a tensor the
    /// memory cannot take is refused with its size and what is free, not the end of the
    /// process; the checked extents bound it by the file's size.
    pub fn tensor<R: Read + Seek>(&self, reader: &mut R, name: &str) -> Result<QTensor, ModelError> {
        self.check_type(name)?;
        let info = self.content.tensor_infos.get(name).ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        let bytes = self.tensor_bytes(name);
        let too_large =
            || ModelError::TooLarge { part: "weights", needed: bytes, available: crate::memory::available_bytes().unwrap_or(0) };
        let len = usize::try_from(bytes).map_err(|_| too_large())?;
        let mut raw = Vec::new();
        raw.try_reserve_exact(len).map_err(|_| too_large())?;
        raw.resize(len, 0);
        let start = self.content.tensor_data_offset.saturating_add(info.offset);
        reader.seek(SeekFrom::Start(start)).map_err(|e| ModelError::Malformed(format!("cannot seek to tensor {}: {e}", shown(name))))?;
        reader.read_exact(&mut raw).map_err(|e| {
            let detail = format!("tensor {} at byte {start}: {e}", shown(name));
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                ModelError::Truncated { detail }
            } else {
                ModelError::Malformed(format!("cannot read {detail}"))
            }
        })?;
        let (dtype, raw) = match self.stand_ins.get(name) {
            Some(s) => {
                let named = |e| match e {
                    ModelError::Malformed(m) => ModelError::Malformed(format!("tensor {}: {m}", shown(name))),
                    other => other,
                };
                (s.held_as, (s.convert)(&raw).map_err(named)?)
            }
            None => (info.ggml_dtype, raw),
        };
        qtensor_from_ggml(dtype, &raw, info.shape.dims().to_vec(), &Device::Cpu).map_err(|e| classify_read_error(&e))
    }

    /// Size in bytes of a tensor as [`Gguf::tensor`] holds it: its stored data, rewritten
    /// for a type read through a stand-in.
    pub fn held_bytes(&self, name: &str) -> u64 {
        let stored = self.tensor_bytes(name);
        self.stand_ins.get(name).map_or(stored, |s| (s.held_bytes)(stored))
    }

    /// Size in bytes of a tensor's stored data.
    pub fn tensor_bytes(&self, name: &str) -> u64 {
        let bytes = |i| {
            let (block, block_bytes) = self.stored_block(name, i);
            (i.shape.elem_count() / block * block_bytes) as u64
        };
        self.content.tensor_infos.get(name).map(bytes).unwrap_or(0)
    }

    /// Weights and bytes per block of a tensor's type in the file (a stand-in's own, not the
    /// type candle was shown).
    fn stored_block(&self, name: &str, info: &TensorInfo) -> (usize, usize) {
        match self.stand_ins.get(name) {
            Some(s) => (s.block, s.block_bytes),
            None => (info.ggml_dtype.block_size(), info.ggml_dtype.type_size()),
        }
    }
}

fn read_up_to<R: Read>(reader: &mut R, buf: &mut [u8]) -> Result<usize, ModelError> {
    let mut got = 0;
    while got < buf.len() {
        match reader.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => return Err(ModelError::Malformed(format!("cannot read the file: {e}"))),
        }
    }
    Ok(got)
}

/// Maps candle's reader errors to a truncated file or a malformed one.
fn classify_read_error(e: &candle_core::Error) -> ModelError {
    // candle's messages quote tensor names from the file: escape them before they are shown.
    // Only the first line: with RUST_BACKTRACE set candle appends a backtrace.
    let text = e.to_string().lines().next().unwrap_or_default().escape_debug().to_string();
    let eof = matches!(e, candle_core::Error::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof)
        || text.contains("remaining")
        || text.contains("failed to fill whole buffer");
    if eof {
        ModelError::Truncated { detail: text }
    } else {
        ModelError::Malformed(text)
    }
}

fn meta_err(key: &str, problem: &str) -> ModelError {
    ModelError::Metadata { key: key.to_string(), problem: problem.to_string() }
}

fn as_i64(v: &Value) -> Option<i64> {
    Some(match v {
        Value::U8(x) => *x as i64,
        Value::I8(x) => *x as i64,
        Value::U16(x) => *x as i64,
        Value::I16(x) => *x as i64,
        Value::U32(x) => *x as i64,
        Value::I32(x) => *x as i64,
        Value::U64(x) => i64::try_from(*x).ok()?,
        Value::I64(x) => *x,
        _ => return None,
    })
}

pub(crate) fn as_usize(v: &Value) -> Option<usize> {
    as_i64(v).and_then(|x| usize::try_from(x).ok())
}

//! Tensor types candle's reader does not know that the engine reads through one it does:
//! candle parses the header with the stand-in's type id in their place (a type whose blocks
//! divide the file's, so candle's shapes are the file's; the extents are computed from the
//! file's own weights and bytes per block, [`StandIn::block_bytes`]), and each tensor's blocks are
//! rewritten into the type it is held in when it is read.

use std::io::{Read, Seek, SeekFrom};

use candle_core::quantized::GgmlDType;

use crate::error::ModelError;

/// One type read through a stand-in.
pub struct StandIn {
    /// The type's GGML id in the file.
    pub id: u32,
    /// Weights per block in the file.
    pub block: usize,
    /// Bytes per block in the file.
    pub block_bytes: usize,
    /// The type candle parses the header with: its blocks divide the file's, so candle's
    /// shapes are the file's.
    pub parsed_as: GgmlDType,
    /// The type the tensor is held and computed in.
    pub held_as: GgmlDType,
    /// Bytes held for a tensor of this many bytes in the file.
    pub held_bytes: fn(u64) -> u64,
    /// Rewrites the file's blocks into `held_as`'s.
    pub convert: fn(&[u8]) -> Result<Vec<u8>, ModelError>,
}

/// Every type read through a stand-in, each shown to candle as a type whose blocks divide its
/// own (IQ4_NL, Q2_0 and Q1_0 as Q4_0, the rest, of 256-weight super-blocks, as Q4_K):
/// - held as Q8_0: IQ4_NL, TQ1_0, TQ2_0, Q2_0 and Q1_0 exactly ([`super::ternary`],
///   [`super::q1_0`]); IQ4_XS, IQ3_XXS,
///   IQ3_S, IQ2_XXS and IQ1_S with each 32-weight block's scale rounded to f16
///   ([`super::iq4_xs`], [`super::iq3`], [`super::iq2_xxs`] and [`super::iq1_s`] bound it);
/// - held as F16: IQ2_XS and IQ2_S, each weight rounded to f16 ([`super::iq2_xs`]);
/// - held as Q6_K: IQ1_M, exactly unless its scale over 8 is subnormal ([`super::iq1_m`]).
pub const STAND_INS: [StandIn; 13] = [
    StandIn {
        id: 20,
        block: super::iq4_nl::BLOCK,
        block_bytes: super::iq4_nl::BLOCK_BYTES,
        parsed_as: GgmlDType::Q4_0,
        held_as: GgmlDType::Q8_0,
        held_bytes: super::iq4_nl::q8_0_bytes,
        convert: super::iq4_nl::to_q8_0,
    },
    StandIn {
        id: 23,
        block: super::iq4_xs::SUPER_BLOCK,
        block_bytes: super::iq4_xs::SUPER_BLOCK_BYTES,
        parsed_as: GgmlDType::Q4K,
        held_as: GgmlDType::Q8_0,
        held_bytes: super::iq4_xs::q8_0_bytes,
        convert: super::iq4_xs::to_q8_0,
    },
    StandIn {
        id: 18,
        block: super::iq3::SUPER_BLOCK,
        block_bytes: super::iq3::XXS_BYTES,
        parsed_as: GgmlDType::Q4K,
        held_as: GgmlDType::Q8_0,
        held_bytes: super::iq3::xxs_q8_0_bytes,
        convert: super::iq3::xxs_to_q8_0,
    },
    StandIn {
        id: 21,
        block: super::iq3::SUPER_BLOCK,
        block_bytes: super::iq3::S_BYTES,
        parsed_as: GgmlDType::Q4K,
        held_as: GgmlDType::Q8_0,
        held_bytes: super::iq3::s_q8_0_bytes,
        convert: super::iq3::s_to_q8_0,
    },
    StandIn {
        id: 16,
        block: super::iq3::SUPER_BLOCK,
        block_bytes: super::iq2_xxs::BYTES,
        parsed_as: GgmlDType::Q4K,
        held_as: GgmlDType::Q8_0,
        held_bytes: super::iq2_xxs::q8_0_bytes,
        convert: super::iq2_xxs::to_q8_0,
    },
    StandIn {
        id: 19,
        block: super::iq3::SUPER_BLOCK,
        block_bytes: super::iq1_s::BYTES,
        parsed_as: GgmlDType::Q4K,
        held_as: GgmlDType::Q8_0,
        held_bytes: super::iq1_s::q8_0_bytes,
        convert: super::iq1_s::to_q8_0,
    },
    StandIn {
        id: 17,
        block: super::iq3::SUPER_BLOCK,
        block_bytes: super::iq2_xs::XS_BYTES,
        parsed_as: GgmlDType::Q4K,
        held_as: GgmlDType::F16,
        held_bytes: super::iq2_xs::xs_f16_bytes,
        convert: super::iq2_xs::xs_to_f16,
    },
    StandIn {
        id: 22,
        block: super::iq3::SUPER_BLOCK,
        block_bytes: super::iq2_xs::S_BYTES,
        parsed_as: GgmlDType::Q4K,
        held_as: GgmlDType::F16,
        held_bytes: super::iq2_xs::s_f16_bytes,
        convert: super::iq2_xs::s_to_f16,
    },
    StandIn {
        id: 29,
        block: super::iq3::SUPER_BLOCK,
        block_bytes: super::iq1_m::BYTES,
        parsed_as: GgmlDType::Q4K,
        held_as: GgmlDType::Q6K,
        held_bytes: super::iq1_m::q6_k_bytes,
        convert: super::iq1_m::to_q6_k,
    },
    StandIn {
        id: 34,
        block: super::iq3::SUPER_BLOCK,
        block_bytes: super::ternary::TQ1_0_BYTES,
        parsed_as: GgmlDType::Q4K,
        held_as: GgmlDType::Q8_0,
        held_bytes: super::ternary::tq1_0_q8_0_bytes,
        convert: super::ternary::tq1_0_to_q8_0,
    },
    StandIn {
        id: 35,
        block: super::iq3::SUPER_BLOCK,
        block_bytes: super::ternary::TQ2_0_BYTES,
        parsed_as: GgmlDType::Q4K,
        held_as: GgmlDType::Q8_0,
        held_bytes: super::ternary::tq2_0_q8_0_bytes,
        convert: super::ternary::tq2_0_to_q8_0,
    },
    StandIn {
        id: 42,
        block: super::ternary::Q2_0_BLOCK,
        block_bytes: super::ternary::Q2_0_BYTES,
        parsed_as: GgmlDType::Q4_0,
        held_as: GgmlDType::Q8_0,
        held_bytes: super::ternary::q2_0_q8_0_bytes,
        convert: super::ternary::q2_0_to_q8_0,
    },
    StandIn {
        id: 41,
        block: super::q1_0::WEIGHTS,
        block_bytes: super::q1_0::BYTES,
        parsed_as: GgmlDType::Q4_0,
        held_as: GgmlDType::Q8_0,
        held_bytes: super::q1_0::q8_0_bytes,
        convert: super::q1_0::to_q8_0,
    },
];

/// The stand-in for GGML type `id`, if it is read through one.
pub fn for_id(id: u32) -> Option<&'static StandIn> {
    STAND_INS.iter().find(|s| s.id == id)
}

/// A reader over a GGUF file that shows candle each stand-in's type id in place of the
/// file's: `patches` are the byte positions of those tensors' type fields with the id to show.
/// It keeps its own position (the inner reader must start at byte 0).
pub struct PatchedHeader<'a, R> {
    inner: &'a mut R,
    pos: u64,
    patches: Vec<(u64, [u8; 4])>,
}

impl<'a, R: Read + Seek> PatchedHeader<'a, R> {
    /// Wraps `inner`, positioned at byte 0.
    pub fn new(inner: &'a mut R, patches: Vec<(u64, [u8; 4])>) -> Self {
        PatchedHeader { inner, pos: 0, patches }
    }
}

impl<R: Read> Read for PatchedHeader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let (start, end) = (self.pos, self.pos + n as u64);
        for (at, bytes) in &self.patches {
            for (i, &b) in bytes.iter().enumerate() {
                let p = at + i as u64;
                if (start..end).contains(&p) {
                    buf[(p - start) as usize] = b;
                }
            }
        }
        self.pos = end;
        Ok(n)
    }
}

impl<R: Seek> Seek for PatchedHeader<'_, R> {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        self.pos = self.inner.seek(to)?;
        Ok(self.pos)
    }

    /// The position this reader keeps, without asking the inner one: candle asks before every
    /// length-prefixed read (each of a vocabulary's tokens), and the default, a seek by 0,
    /// would make a `BufReader` drop its buffer and read it again each time (in the page, a
    /// megabyte of the Blob per token string).
    fn stream_position(&mut self) -> std::io::Result<u64> {
        Ok(self.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_stand_in_s_blocks_are_whole_blocks_of_its_candle_types() {
        for s in &STAND_INS {
            assert_eq!(s.block % s.parsed_as.block_size(), 0, "type {}", s.id);
            assert_eq!(s.block % s.held_as.block_size(), 0, "type {}", s.id);
            assert!(crate::gguf::SUPPORTED_TYPES.contains(&s.held_as), "type {}", s.id);
        }
    }

    #[test]
    fn the_patched_bytes_are_shown_however_the_reads_split_them() {
        let file: Vec<u8> = (0..32).collect();
        let mut cursor = std::io::Cursor::new(file);
        let mut r = PatchedHeader::new(&mut cursor, vec![(6, [0xa0, 0xa1, 0xa2, 0xa3])]);
        let mut got = Vec::new();
        for len in [5, 2, 3, 22] {
            let mut buf = vec![0; len];
            r.read_exact(&mut buf).expect("read");
            got.extend(buf);
        }
        let mut want: Vec<u8> = (0..32).collect();
        want[6..10].copy_from_slice(&[0xa0, 0xa1, 0xa2, 0xa3]);
        assert_eq!(got, want);
        r.seek(SeekFrom::Start(8)).expect("seek");
        let mut buf = [0; 3];
        r.read_exact(&mut buf).expect("read");
        assert_eq!(buf, [0xa2, 0xa3, 10]);
    }

    /// Reads the inner reader is asked for, counted.
    struct Counting {
        inner: std::io::Cursor<Vec<u8>>,
        reads: usize,
    }

    impl Read for Counting {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.reads += 1;
            self.inner.read(buf)
        }
    }

    impl Seek for Counting {
        fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
            self.inner.seek(to)
        }
    }

    #[test]
    fn asking_the_position_does_not_make_a_buffered_reader_read_again() {
        let mut buffered = std::io::BufReader::with_capacity(64, Counting { inner: std::io::Cursor::new(vec![7; 32]), reads: 0 });
        let mut r = PatchedHeader::new(&mut buffered, Vec::new());
        for i in 1..=8 {
            r.read_exact(&mut [0; 4]).expect("read");
            assert_eq!(r.stream_position().expect("position"), 4 * i);
        }
        assert_eq!(buffered.get_ref().reads, 1, "the 32 bytes come from one fill of the buffer");
    }
}

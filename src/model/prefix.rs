//! The first bytes of a file read as if they were the whole file (its full length known),
//! so the header can be checked before the rest has been copied anywhere.

use std::io::{Error, ErrorKind, Read, Result, Seek, SeekFrom};

/// A reader over the start of a file of `len` bytes; reading past the start fails and is
/// remembered ([`PrefixReader::ran_out`]).
pub struct PrefixReader<'a> {
    start: &'a [u8],
    len: u64,
    pos: u64,
    ran_out: bool,
}

impl<'a> PrefixReader<'a> {
    /// `start` holds the first bytes of a file of `len` bytes.
    pub fn new(start: &'a [u8], len: u64) -> Self {
        PrefixReader { start, len: len.max(start.len() as u64), pos: 0, ran_out: false }
    }

    /// Whether a read went past the bytes given (and so a failure proves nothing).
    pub fn ran_out(&self) -> bool {
        self.ran_out
    }
}

impl Read for PrefixReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        if buf.is_empty() || self.pos >= self.len {
            return Ok(0);
        }
        let Some(rest) = usize::try_from(self.pos).ok().and_then(|p| self.start.get(p..)).filter(|r| !r.is_empty()) else {
            self.ran_out = true;
            return Err(Error::new(ErrorKind::UnexpectedEof, "past the bytes given for the header check"));
        };
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for PrefixReader<'_> {
    fn seek(&mut self, to: SeekFrom) -> Result<u64> {
        let target = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = target.ok_or_else(|| Error::new(ErrorKind::InvalidInput, "seek before the start"))?;
        Ok(self.pos)
    }
}

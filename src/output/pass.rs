//! The writer's one pass over an output: what must see every byte (each record's CRC-32 and
//! digest, the NaN/Inf scan) sees it in order, in the buffer the chunked writer is about to write
//! ([`super::direct`]), and makes the bytes that depend on the bytes before them (a zip's data
//! descriptors and central directory), so no input byte is read twice.

use crate::error::Result;

/// Whatever sees an output once, in order, as it is written.
pub(crate) trait Pass: Send {
    /// Bytes `from..from + bytes.len()` of piece `piece` (piece 0 is the header, then every
    /// segment in order, flattened), in the buffer about to be written. The bytes of a
    /// [`super::segment::Segment::Pass`] piece are zero here and must be written here.
    fn see(&mut self, piece: usize, from: u64, bytes: &mut [u8]) -> Result<()>;

    /// Forget what was seen: the writer starts again from the first byte.
    fn restart(&mut self);
}

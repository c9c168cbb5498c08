//! `encode`: turns framed batches back into stream bytes, and builds new records for stages that
//! add or rewrite them.
//!
//! Records that no stage changed go out byte for byte: [`perfpipe_core::Batch::runs`] merges adjacent spans, so an
//! untouched batch is one contiguous slice of the buffer `read` filled, handed to `writev(2)` by
//! [`write`](crate::write) without a copy. `encode` runs inside the `write` thread: a separate thread
//! would only add a hand-off.

use crate::format::{Endian, EventHeader};

/// Encodes a record: an 8-byte header of `type_` and `misc` followed by `body`, zero-padded to a
/// multiple of 8 when `pad8` is set.
///
/// # Panics
/// Panics if the record would exceed 65535 bytes, the largest `header.size`.
pub fn record(type_: u32, misc: u16, body: &[u8], pad8: bool, e: Endian) -> Vec<u8> {
    let mut len = 8 + body.len();
    if pad8 {
        len = len.next_multiple_of(8);
    }
    let size = u16::try_from(len).expect("a perf record is at most 65535 bytes");
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&EventHeader { type_, misc, size }.to_bytes(e));
    out.extend_from_slice(body);
    out.resize(len, 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_is_padded_and_sized() {
        let r = record(68, 0, &[], true, Endian::Little);
        assert_eq!(r, [68, 0, 0, 0, 0, 0, 8, 0]);
        let r = record(67, 2, &[1, 2, 3], true, Endian::Big);
        assert_eq!(r.len(), 16);
        assert_eq!(&r[..8], &[0, 0, 0, 67, 0, 2, 0, 16]);
        assert_eq!(&r[8..11], &[1, 2, 3]);
        assert_eq!(record(1, 0, &[9; 5], false, Endian::Little).len(), 13);
    }
}

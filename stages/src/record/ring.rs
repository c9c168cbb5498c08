//! Reading the kernel's rings, as `tools/lib/perf/mmap.c` does.
//!
//! - **Forward** ([`read_forward`]): `data_head` is read with acquire semantics, records from our
//!   `data_tail` up to it are copied out (a record that wraps the end of the data area is copied in
//!   two pieces), and the new `data_tail` is published with release semantics, which lets the kernel
//!   reuse the space. A full ring makes the kernel drop records and later write a LOST record.
//! - **Backward** ([`read_backward`]): `write_backward` events in a read-only map. The kernel moves
//!   `data_head` down by each record's size and writes the record at the new head, overwriting the
//!   oldest data; `data_head` always starts the newest record. With the ring paused
//!   (`PERF_EVENT_IOC_PAUSE_OUTPUT`), the records between `data_head` and the head of the previous
//!   read (newest first) are parsed forward; when more than the ring's size was written since,
//!   the walk stops at the last record that fits whole (`overwrite_rb_find_range()`), or at a
//!   zero header (never written).

use super::sys::Mmap;

/// Copies `len` bytes of the ring starting at the unmasked position `pos` into `out`.
fn copy_wrapped(data: &[u8], pos: u64, len: usize, out: &mut Vec<u8>) {
    let mask = data.len() as u64 - 1;
    let at = (pos & mask) as usize;
    let first = len.min(data.len() - at);
    out.extend_from_slice(&data[at..at + first]);
    out.extend_from_slice(&data[..len - first]);
}

/// The `size` of the record header at unmasked `pos` (the header may itself wrap).
fn size_at(data: &[u8], pos: u64) -> usize {
    let mut h = Vec::with_capacity(8);
    copy_wrapped(data, pos, 8, &mut h);
    usize::from(u16::from_ne_bytes([h[6], h[7]]))
}

/// What one read of a ring found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Records copied.
    pub records: u64,
    /// Bytes copied.
    pub bytes: u64,
    /// Events the kernel reported lost (sum of the LOST records' `lost`).
    pub lost: u64,
}

impl ReadStats {
    fn note(&mut self, rec: &[u8]) {
        self.records += 1;
        self.bytes += rec.len() as u64;
        if u32::from_ne_bytes(rec[..4].try_into().expect("4 bytes")) == 2 && rec.len() >= 24 {
            self.lost += u64::from_ne_bytes(rec[16..24].try_into().expect("8 bytes"));
        }
    }
}

/// Appends every record the kernel has published in a forward ring to `out`, and releases their
/// space. Stops early (leaving the rest for the next call) at a malformed header, which only a
/// kernel bug could produce.
pub fn read_forward(ring: &Mmap, out: &mut Vec<u8>) -> ReadStats {
    let mut stats = ReadStats::default();
    let head = ring.head();
    let mut tail = ring.tail();
    let data = ring.data();
    while tail < head {
        let size = size_at(data, tail);
        if size < 8 || (head - tail) < size as u64 {
            break;
        }
        let at = out.len();
        copy_wrapped(data, tail, size, out);
        stats.note(&out[at..]);
        tail += size as u64;
    }
    ring.set_tail(tail);
    stats
}

/// Reads a paused backward ring: the records written since the head `prev` of the previous read
/// (0 before the first), newest first, each as its own byte vector. Returns them and the head to
/// pass as `prev` next time.
pub fn read_backward(ring: &Mmap, prev: u64) -> (Vec<Vec<u8>>, u64, ReadStats) {
    let mut stats = ReadStats::default();
    let head = ring.head();
    let data = ring.data();
    let size = data.len() as u64;
    // Bytes written since the previous read; the head counts down from 0, so this wraps.
    let written = prev.wrapping_sub(head);
    let limit = written.min(size);
    let mut records = Vec::new();
    let mut pos = head;
    loop {
        let done = pos.wrapping_sub(head);
        if done + 8 > limit {
            break;
        }
        let len = size_at(data, pos);
        // A zero header is space never written; a record running past the limit is one the
        // kernel has partly overwritten (or one from before `prev`).
        if len < 8 || done + len as u64 > limit {
            break;
        }
        let mut rec = Vec::with_capacity(len);
        copy_wrapped(data, pos, len, &mut rec);
        stats.note(&rec);
        records.push(rec);
        pos = pos.wrapping_add(len as u64);
    }
    (records, head, stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_across_the_end() {
        let data: Vec<u8> = (0..16).collect();
        let mut out = Vec::new();
        copy_wrapped(&data, 16 * 3 + 12, 8, &mut out);
        assert_eq!(out, [12, 13, 14, 15, 0, 1, 2, 3]);
        // A header that wraps: size bytes are 6 and 7 of the record.
        let mut ring = vec![0u8; 16];
        ring[14] = 40; // byte 6 of a header at 8
        assert_eq!(size_at(&ring, 8), 40);
        ring[14] = 0;
        ring[0] = 24; // header at 10: bytes 10..16 then 0..2; size at 16, 17 = ring[0], ring[1]
        assert_eq!(size_at(&ring, 10), 24);
    }
}

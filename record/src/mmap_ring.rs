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
//!
//! Both copy the ring's bytes out with [`Mmap::copy_out`] (volatile reads through raw pointers):
//! no reference to the data area, which the kernel writes concurrently, is ever made.

use super::sys::Mmap;

/// The `size` of the record header at unmasked `pos` (the header may itself wrap).
fn size_at(ring: &Mmap, pos: u64) -> usize {
    let mut h = [0u8; 8];
    ring.read_into(pos, &mut h);
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
    while tail < head {
        let size = size_at(ring, tail);
        if size < 8 || (head - tail) < size as u64 || size > ring.data_size() {
            break;
        }
        let at = out.len();
        ring.copy_out(tail, size, out);
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
    let size = ring.data_size() as u64;
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
        let len = size_at(ring, pos);
        // A zero header is space never written; a record running past the limit is one the
        // kernel has partly overwritten (or one from before `prev`).
        if len < 8 || done + len as u64 > limit {
            break;
        }
        let mut rec = Vec::with_capacity(len);
        ring.copy_out(pos, len, &mut rec);
        stats.note(&rec);
        records.push(rec);
        pos = pos.wrapping_add(len as u64);
    }
    (records, head, stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record of `size` bytes (a multiple of 8) whose body bytes all differ from its neighbours'.
    fn record(type_: u32, size: u16, seed: u8) -> Vec<u8> {
        let mut r = type_.to_ne_bytes().to_vec();
        r.extend_from_slice(&0u16.to_ne_bytes());
        r.extend_from_slice(&size.to_ne_bytes());
        r.extend((8..size).map(|i| seed.wrapping_mul(31).wrapping_add(i as u8) | 1));
        r
    }

    /// Sizes that, written one after another, cross the end of a one-page ring at every kind of
    /// offset: 8, 16, … and one near a page.
    fn sizes() -> impl Iterator<Item = u16> {
        [8u16, 16, 24, 40, 64, 136, 256, 1000, 2048, 4088]
            .into_iter()
            .cycle()
            .take(30)
    }

    #[test]
    fn copy_out_wraps_at_every_position_and_length() {
        let ring = Mmap::anonymous(1);
        let n = ring.data_size();
        let model: Vec<u8> = (0..n).map(|i| (i * 7 + i / 256) as u8).collect();
        ring.poke(0, &model);
        let lap = 3 * n as u64; // unmasked positions beyond the first lap, as a long recording has
        for pos in 0..n {
            for len in [
                0,
                1,
                7,
                8,
                9,
                15,
                16,
                17,
                63,
                n - pos,
                n - pos + 1,
                n - 1,
                n,
            ] {
                let len = len.min(n);
                let want: Vec<u8> = (0..len).map(|i| model[(pos + i) % n]).collect();
                let mut out = vec![0xee];
                ring.copy_out(lap + pos as u64, len, &mut out);
                assert_eq!(out[0], 0xee, "what was in `out` stays");
                assert_eq!(&out[1..], &want[..], "pos {pos} len {len}");
                let mut dst = vec![0; len];
                ring.read_into(lap + pos as u64, &mut dst);
                assert_eq!(dst, want, "read_into pos {pos} len {len}");
            }
        }
        // A header split across the end: its size is bytes 6 and 7.
        ring.poke(n as u64 - 6, &[0, 0, 0, 0, 0, 0, 0x28, 0]);
        assert_eq!(size_at(&ring, n as u64 - 6), 0x28);
        ring.poke(n as u64 - 7, &[0, 0, 0, 0, 0, 0, 0x30, 0]);
        assert_eq!(size_at(&ring, n as u64 - 7), 0x30);
    }

    #[test]
    #[should_panic(expected = "from a ring of")]
    fn copy_out_refuses_more_than_the_ring() {
        let ring = Mmap::anonymous(1);
        ring.copy_out(0, ring.data_size() + 1, &mut Vec::new());
    }

    /// The kernel's side of a forward ring: records written from `data_head` on, then the new head
    /// published.
    fn write_forward(ring: &Mmap, head: &mut u64, recs: &[Vec<u8>]) {
        for r in recs {
            ring.poke(*head, r);
            *head += r.len() as u64;
        }
        ring.set_head(*head);
    }

    #[test]
    fn forward_reads_are_whole_records_at_every_start_position() {
        let ring = Mmap::anonymous(1);
        let n = ring.data_size() as u64;
        for start in (0..n).step_by(8) {
            // A tail left anywhere by earlier reads, some laps in.
            let mut head = 5 * n + start;
            ring.set_head(head);
            ring.set_tail(head);
            let mut seed = start as u8;
            let mut want_total = 0;
            // Fill the ring up to its size in each round, so every round wraps once.
            let mut sizes = sizes().skip((start / 8) as usize % 10);
            for _ in 0..3 {
                let mut recs = Vec::new();
                let mut used = 0;
                loop {
                    let size = sizes.next().unwrap_or(8);
                    if used + u64::from(size) > n {
                        break;
                    }
                    used += u64::from(size);
                    seed = seed.wrapping_add(1);
                    recs.push(record(9, size, seed));
                }
                write_forward(&ring, &mut head, &recs);
                let mut out = vec![1, 2, 3];
                let stats = read_forward(&ring, &mut out);
                assert_eq!(&out[..3], &[1, 2, 3]);
                assert_eq!(out[3..], recs.concat()[..], "start {start}");
                assert_eq!(stats.records, recs.len() as u64);
                assert_eq!(stats.bytes, used);
                assert_eq!(ring.tail(), head, "data_tail released up to data_head");
                want_total += used;
            }
            assert!(want_total > 2 * n);
        }
    }

    #[test]
    fn forward_read_counts_lost_and_leaves_a_partial_record() {
        let ring = Mmap::anonymous(1);
        let n = ring.data_size() as u64;
        let mut head = n - 16;
        ring.set_tail(head);
        let mut lost = record(2, 24, 0);
        lost[16..24].copy_from_slice(&7u64.to_ne_bytes());
        let sample = record(9, 48, 3);
        write_forward(&ring, &mut head, &[lost.clone(), sample.clone()]);
        // A record whose header is published but whose end is not (a head inside it): a kernel
        // bug, never read.
        ring.poke(head, &record(9, 64, 4)[..8]);
        ring.set_head(head + 8);
        let mut out = Vec::new();
        let stats = read_forward(&ring, &mut out);
        assert_eq!(out, [lost, sample].concat());
        assert_eq!((stats.records, stats.lost), (2, 7));
        assert_eq!(ring.tail(), head, "stops before the partial record");
        // A zero header is never read either.
        ring.poke(head, &[0; 8]);
        assert_eq!(read_forward(&ring, &mut out), ReadStats::default());
        assert_eq!(ring.tail(), head);
    }

    /// The kernel's side of a backward ring: `data_head` moves down by each record's size and the
    /// record is written at the new head.
    fn write_backward(ring: &Mmap, head: &mut u64, recs: &[Vec<u8>]) {
        for r in recs {
            *head = head.wrapping_sub(r.len() as u64);
            ring.poke(*head, r);
        }
        ring.set_head(*head);
    }

    #[test]
    fn backward_reads_at_every_position_and_after_overwrite() {
        let ring = Mmap::anonymous(1);
        let n = ring.data_size() as u64;
        let mut overwritten = 0;
        for start in (0..n).step_by(8) {
            // The head at the previous read, `start` bytes below a lap boundary (the head counts
            // down from 0, so the first read of a recording has prev 0).
            let prev = 0u64.wrapping_sub(2 * n + start);
            let mut head = prev;
            ring.set_head(head);
            let mut written = Vec::new();
            let mut seed = start as u8;
            let k = (start / 8) as usize;
            for size in sizes().skip(k % 10).take(3 + k % 7) {
                seed = seed.wrapping_add(1);
                written.push(record(9, size, seed));
            }
            write_backward(&ring, &mut head, &written);
            // What the ring still holds whole: the newest records that fit in its size.
            let mut want = Vec::new();
            let mut used = 0;
            for r in written.iter().rev() {
                if used + r.len() as u64 > n {
                    break;
                }
                used += r.len() as u64;
                want.push(r.clone());
            }
            overwritten += usize::from(want.len() < written.len());
            let (got, new_head, stats) = read_backward(&ring, prev);
            assert_eq!(new_head, head);
            assert_eq!(got.len(), want.len(), "start {start}");
            assert_eq!(got, want, "start {start}: newest first");
            assert_eq!(stats.bytes, used);
            // Nothing written since: nothing read.
            let (again, _, _) = read_backward(&ring, new_head);
            assert!(again.is_empty());
            // Two more records: only they are read next time.
            let more = [record(9, 32, 200), record(2, 24, 201)];
            write_backward(&ring, &mut head, &more);
            let (got, _, stats) = read_backward(&ring, new_head);
            assert_eq!(got, [more[1].clone(), more[0].clone()]);
            assert_eq!(stats.records, 2);
        }
        assert!(overwritten > 100, "{overwritten} reads after an overwrite");
    }

    #[test]
    fn backward_read_stops_at_a_zero_header() {
        let ring = Mmap::anonymous(1);
        // A head that claims more was written than the ring holds, over a ring never written past
        // one record: the walk ends at the zero header after it.
        let one = record(9, 40, 9);
        ring.poke(0u64.wrapping_sub(4 * ring.data_size() as u64), &one);
        ring.set_head(0u64.wrapping_sub(4 * ring.data_size() as u64));
        let (got, _, _) = read_backward(&ring, 0);
        assert_eq!(got, [one]);
    }
}

//! [`RecordRing`]: the newest records up to a byte budget, oldest dropped first.
//!
//! Records are copied into chunks of a few hundred KiB, each record behind an 8-byte prefix (its
//! length, kind and tag), so the ring holds no per-record allocation and its memory is the budget
//! plus at most one partly used chunk (and one idle spare). Dropping the oldest record advances a
//! cursor in the first chunk; a chunk is freed (kept as the spare) once every record in it has gone.

use std::collections::VecDeque;

/// Bytes of the prefix stored before each record: `u32` length, `u16` kind, `u16` tag.
pub const PREFIX: usize = 8;

/// One record held by the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The record's bytes (as framed: any payload after `header.size` included).
    pub bytes: &'a [u8],
    /// The span kind it had.
    pub kind: u32,
    /// The span tag it had.
    pub tag: u32,
}

#[derive(Debug, Default)]
struct Chunk {
    data: Vec<u8>,
    /// Offset of the first live entry's prefix.
    head: usize,
}

/// An overwrite ring of records: [`RecordRing::push`] adds the newest and drops the oldest until
/// the held bytes (records plus prefixes) fit the capacity. The newest record is always kept, even
/// one larger than the capacity.
#[derive(Debug)]
pub struct RecordRing {
    chunks: VecDeque<Chunk>,
    spare: Option<Vec<u8>>,
    capacity: usize,
    chunk_bytes: usize,
    held: usize,
    records: usize,
}

fn entry_at(data: &[u8], at: usize) -> (Entry<'_>, usize) {
    let len = u32::from_ne_bytes(data[at..at + 4].try_into().expect("4 bytes")) as usize;
    let kind = u16::from_ne_bytes(data[at + 4..at + 6].try_into().expect("2 bytes"));
    let tag = u16::from_ne_bytes(data[at + 6..at + 8].try_into().expect("2 bytes"));
    let start = at + PREFIX;
    let entry = Entry {
        bytes: &data[start..start + len],
        kind: u32::from(kind),
        tag: u32::from(tag),
    };
    (entry, PREFIX + len)
}

impl RecordRing {
    /// An empty ring that holds at most `capacity` bytes of records and prefixes.
    pub fn new(capacity: usize) -> RecordRing {
        RecordRing {
            chunks: VecDeque::new(),
            spare: None,
            capacity,
            chunk_bytes: (capacity / 8).clamp(4 << 10, 1 << 20),
            held: 0,
            records: 0,
        }
    }

    /// The byte budget.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes held: records plus their prefixes.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Bytes allocated for records (held bytes, the unused tail of the last chunk and the spare).
    pub fn allocated(&self) -> usize {
        self.chunks.iter().map(|c| c.data.capacity()).sum::<usize>()
            + self.spare.as_ref().map_or(0, Vec::capacity)
    }

    /// Number of records held.
    pub fn len(&self) -> usize {
        self.records
    }

    /// Whether the ring holds no record.
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Adds `bytes` as the newest record, then drops the oldest ones, handing each to `dropped`,
    /// until the ring fits its capacity again (the newest record always stays). Kinds and tags
    /// above `u16::MAX` are stored as `u16::MAX`.
    pub fn push(&mut self, bytes: &[u8], kind: u32, tag: u32, dropped: &mut impl FnMut(Entry<'_>)) {
        let need = PREFIX + bytes.len();
        let fits = self
            .chunks
            .back()
            .is_some_and(|c| c.data.len() + need <= c.data.capacity());
        if !fits {
            let data = match self.spare.take() {
                Some(v) if v.capacity() >= need => v,
                _ => Vec::with_capacity(self.chunk_bytes.max(need)),
            };
            self.chunks.push_back(Chunk { data, head: 0 });
        }
        let chunk = self.chunks.back_mut().expect("a chunk was just ensured");
        let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        chunk.data.extend_from_slice(&len.to_ne_bytes());
        chunk
            .data
            .extend_from_slice(&u16::try_from(kind).unwrap_or(u16::MAX).to_ne_bytes());
        chunk
            .data
            .extend_from_slice(&u16::try_from(tag).unwrap_or(u16::MAX).to_ne_bytes());
        chunk.data.extend_from_slice(bytes);
        self.held += need;
        self.records += 1;
        while self.held > self.capacity && self.records > 1 {
            self.pop_front(dropped);
        }
    }

    /// Drops the oldest record, handing it to `dropped`. Returns false if the ring was empty.
    pub fn pop_front(&mut self, dropped: &mut impl FnMut(Entry<'_>)) -> bool {
        let Some(chunk) = self.chunks.front_mut() else {
            return false;
        };
        let (entry, size) = entry_at(&chunk.data, chunk.head);
        dropped(entry);
        chunk.head += size;
        self.held -= size;
        self.records -= 1;
        if chunk.head == chunk.data.len() {
            let mut done = self.chunks.pop_front().expect("front exists").data;
            if done.capacity() == self.chunk_bytes {
                done.clear();
                self.spare = Some(done);
            }
        }
        true
    }

    /// Drops every record, oldest first, handing each to `dropped`.
    pub fn clear(&mut self, dropped: &mut impl FnMut(Entry<'_>)) {
        while self.pop_front(dropped) {}
    }

    /// The records held, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = Entry<'_>> + '_ {
        self.chunks.iter().flat_map(|c| {
            let mut at = c.head;
            std::iter::from_fn(move || {
                (at < c.data.len()).then(|| {
                    let (e, size) = entry_at(&c.data, at);
                    at += size;
                    e
                })
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(n: u8, len: usize) -> Vec<u8> {
        vec![n; len]
    }

    #[test]
    fn keeps_the_newest_within_capacity_and_reports_the_dropped_in_order() {
        let mut ring = RecordRing::new(10 * (PREFIX + 100));
        let mut dropped = Vec::new();
        for n in 0..50u8 {
            ring.push(&rec(n, 100), 9, u32::from(n % 3), &mut |e| {
                dropped.push(e.bytes[0])
            });
            assert!(ring.held() <= ring.capacity());
        }
        assert_eq!(ring.len(), 10);
        assert_eq!(dropped, (0..40).collect::<Vec<u8>>());
        let kept: Vec<(u8, u32, u32)> = ring.iter().map(|e| (e.bytes[0], e.kind, e.tag)).collect();
        let want: Vec<(u8, u32, u32)> = (40..50).map(|n| (n, 9, u32::from(n % 3))).collect();
        assert_eq!(kept, want);
        // Memory: the budget plus at most about two chunks (the last one and the spare).
        assert!(
            ring.allocated() <= ring.capacity() + 2 * ring.chunk_bytes + 2 * (PREFIX + 100),
            "{}",
            ring.allocated()
        );
    }

    #[test]
    fn a_record_larger_than_the_ring_is_kept_alone() {
        let mut ring = RecordRing::new(64);
        let mut n = 0;
        ring.push(&rec(1, 8), 1, 0, &mut |_| n += 1);
        ring.push(&rec(2, 500), 1, 0, &mut |_| n += 1);
        assert_eq!((ring.len(), n), (1, 1));
        assert_eq!(ring.iter().next().unwrap().bytes.len(), 500);
        ring.push(&rec(3, 8), 1, 0, &mut |_| n += 1);
        assert_eq!((ring.len(), n), (1, 2));
        ring.clear(&mut |_| n += 1);
        assert!(ring.is_empty());
        assert_eq!((ring.held(), n), (0, 3));
    }

    #[test]
    fn steady_state_reuses_its_chunks() {
        let mut ring = RecordRing::new(1 << 16);
        for i in 0..100_000u32 {
            ring.push(&rec(i as u8, 24 + (i % 7) as usize * 8), 9, 0, &mut |_| {});
        }
        assert!(ring.held() <= 1 << 16);
        assert!(ring.allocated() <= (1 << 16) + 3 * ring.chunk_bytes);
    }
}

//! [`RecordRing`]: the newest records **by event time** up to a byte budget.
//!
//! perf drains one cpu's buffer after another, so records arrive in time order per cpu but not
//! overall: with a single FINISHED_ROUND for the whole stream, all of cpu 0's records can come
//! before any of cpu 1's. Keeping the newest bytes in *arrival* order would then keep one cpu's
//! records from the whole recording and none of the other's from the same time. The ring keeps
//! instead exactly the records whose time is above a **cut**, the lowest cut whose records fit the
//! budget: when the budget is exceeded, every record of the oldest time leaves (all of that time
//! at once, so a time is either wholly in the window or wholly out of it) and the cut rises to that
//! time. The cut only rises, so a record that arrives at or below it could never be in the window
//! again: [`RecordRing::push`] refuses it (a **late** record) and the caller counts it.
//!
//! **Records without a time** (no `PERF_SAMPLE_TIME`, or side-band without `sample_id_all`) take
//! the time of the record that arrived before them (0 at the start), as perf delivers them where
//! they arrive; they leave one at a time, oldest first, without raising the cut, so a stream with
//! no times at all keeps the newest bytes in arrival order.
//!
//! **Layout.** Records are copied in arrival order into chunks of a few hundred KiB, each behind a
//! 16-byte prefix (length and flag, kind, tag, time), so the ring holds no per-record allocation.
//! Arrival order splits into **runs**, maximal stretches whose times do not decrease (about one per
//! cpu and round); each run's live records are a suffix of it, so eviction takes the head of the run
//! whose head is oldest (a binary heap keyed by head time, one entry per live run). A chunk is freed
//! once every run's head has passed it. A run with a far newer head can pin old chunks; when the
//! chunks exceed twice the budget (or dead runs pile up) the live records are copied into fresh
//! chunks, so memory stays within about twice the budget plus two chunks, and the copy is paid for
//! by at least a budget's worth of pushes since the previous one.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Bytes of the prefix stored before each record: `u32` length (top bit: no time of its own),
/// `u16` kind, `u16` tag, `u64` time.
pub const PREFIX: usize = 16;

/// Flag in the stored length: the record had no time and took the previous record's.
const UNTIMED: u32 = 1 << 31;

/// One record held by the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The record's bytes (as framed: any payload after `header.size` included).
    pub bytes: &'a [u8],
    /// The span kind it had.
    pub kind: u32,
    /// The span tag it had.
    pub tag: u32,
    /// Its time, or for a record without one the time of the record that arrived before it.
    pub time: u64,
    /// Whether the record had a time of its own.
    pub timed: bool,
}

/// A position in the arrival log: absolute chunk number and offset in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pos {
    chunk: u64,
    at: usize,
}

/// A run: consecutive arrivals whose times do not decrease; its live records start at `head`.
#[derive(Clone, Copy, Debug)]
struct Run {
    head: Pos,
    records: usize,
    /// Time of its last record (a new record joins the run if not older).
    tail_time: u64,
}

/// An overwrite ring of records that keeps the newest by event time; see the module docs.
#[derive(Debug)]
pub struct RecordRing {
    chunks: VecDeque<Vec<u8>>,
    /// Absolute number of `chunks[0]`.
    first_chunk: u64,
    spare: Option<Vec<u8>>,
    runs: VecDeque<Run>,
    /// Absolute number of `runs[0]`.
    first_run: u64,
    /// (head time, run number) of every run that holds records.
    heads: BinaryHeap<Reverse<(u64, u64)>>,
    capacity: usize,
    chunk_bytes: usize,
    held: usize,
    records: usize,
    /// Records held without a time of their own (none: eviction need not look at the head).
    untimed: usize,
    /// Time of the last record offered (stored or late), for the next one without a time.
    last_time: u64,
    /// Newest time held since the ring was last emptied.
    newest: u64,
    /// Every record at or below this time has left (or was refused).
    cut: Option<u64>,
}

fn entry_at(data: &[u8], at: usize) -> (Entry<'_>, usize) {
    let word = u32::from_ne_bytes(data[at..at + 4].try_into().expect("4 bytes"));
    let kind = u16::from_ne_bytes(data[at + 4..at + 6].try_into().expect("2 bytes"));
    let tag = u16::from_ne_bytes(data[at + 6..at + 8].try_into().expect("2 bytes"));
    let time = u64::from_ne_bytes(data[at + 8..at + 16].try_into().expect("8 bytes"));
    let len = (word & !UNTIMED) as usize;
    let start = at + PREFIX;
    let entry = Entry {
        bytes: &data[start..start + len],
        kind: u32::from(kind),
        tag: u32::from(tag),
        time,
        timed: word & UNTIMED == 0,
    };
    (entry, PREFIX + len)
}

impl RecordRing {
    /// An empty ring that holds at most `capacity` bytes of records and prefixes.
    pub fn new(capacity: usize) -> RecordRing {
        RecordRing {
            chunks: VecDeque::new(),
            first_chunk: 0,
            spare: None,
            runs: VecDeque::new(),
            first_run: 0,
            heads: BinaryHeap::new(),
            capacity,
            chunk_bytes: (capacity / 8).clamp(4 << 10, 1 << 20),
            held: 0,
            records: 0,
            untimed: 0,
            last_time: 0,
            newest: 0,
            cut: None,
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

    /// Bytes allocated for records (held bytes, dead bytes in chunks not yet freed, the unused
    /// tail of the last chunk and the spare).
    pub fn allocated(&self) -> usize {
        self.chunks.iter().map(Vec::capacity).sum::<usize>()
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

    /// The time at or below which records have left: the window holds every record offered since
    /// the ring was last emptied whose time is above it (`None`: nothing timed has left).
    pub fn cut(&self) -> Option<u64> {
        self.cut
    }

    /// The oldest time held.
    pub fn oldest(&self) -> Option<u64> {
        self.heads.peek().map(|Reverse((t, _))| *t)
    }

    /// Offers a record with its own `time` (if it has one), then makes room by handing the oldest
    /// records to `dropped` until the ring fits its capacity again. The newest time's records
    /// always stay, even when they alone exceed the capacity. Returns false, storing nothing, for
    /// a late record: its time (or the previous record's, if it has none) is at or below the cut.
    /// Kinds and tags above `u16::MAX` are stored as `u16::MAX`.
    #[inline]
    pub fn push(
        &mut self,
        bytes: &[u8],
        kind: u32,
        tag: u32,
        time: Option<u64>,
        dropped: &mut impl FnMut(Entry<'_>),
    ) -> bool {
        let t = time.unwrap_or(self.last_time);
        self.last_time = t;
        if self.cut.is_some_and(|c| t <= c) {
            return false;
        }
        let pos = self.append(bytes, kind, tag, t, time.is_none());
        match self.runs.back_mut() {
            Some(r) if r.records > 0 && t >= r.tail_time => {
                r.records += 1;
                r.tail_time = t;
            }
            Some(r) if r.records == 0 => {
                *r = Run {
                    head: pos,
                    records: 1,
                    tail_time: t,
                };
                let id = self.first_run + self.runs.len() as u64 - 1;
                self.heads.push(Reverse((t, id)));
            }
            _ => {
                self.runs.push_back(Run {
                    head: pos,
                    records: 1,
                    tail_time: t,
                });
                let id = self.first_run + self.runs.len() as u64 - 1;
                self.heads.push(Reverse((t, id)));
            }
        }
        self.newest = self.newest.max(t);
        while self.held > self.capacity && self.records > 1 {
            if !self.evict(dropped) {
                break;
            }
        }
        self.tidy();
        true
    }

    /// Copies a record behind its prefix to the end of the log; returns where it starts.
    #[inline]
    fn append(&mut self, bytes: &[u8], kind: u32, tag: u32, time: u64, untimed: bool) -> Pos {
        let need = PREFIX + bytes.len();
        let fits = self
            .chunks
            .back()
            .is_some_and(|c| c.len() + need <= c.capacity());
        if !fits {
            let data = match self.spare.take() {
                Some(v) if v.capacity() >= need => v,
                _ => Vec::with_capacity(self.chunk_bytes.max(need)),
            };
            self.chunks.push_back(data);
        }
        let id = self.first_chunk + self.chunks.len() as u64 - 1;
        let chunk = self.chunks.back_mut().expect("a chunk was just ensured");
        let pos = Pos {
            chunk: id,
            at: chunk.len(),
        };
        let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX) & !UNTIMED;
        let word = if untimed { len | UNTIMED } else { len };
        chunk.extend_from_slice(&word.to_ne_bytes());
        chunk.extend_from_slice(&u16::try_from(kind).unwrap_or(u16::MAX).to_ne_bytes());
        chunk.extend_from_slice(&u16::try_from(tag).unwrap_or(u16::MAX).to_ne_bytes());
        chunk.extend_from_slice(&time.to_ne_bytes());
        chunk.extend_from_slice(bytes);
        self.held += need;
        self.records += 1;
        self.untimed += usize::from(untimed);
        pos
    }

    /// `pos`, moved to the next chunk if it is at the end of a full one.
    #[inline]
    fn norm(&self, pos: Pos) -> Pos {
        let i = (pos.chunk - self.first_chunk) as usize;
        if pos.at == self.chunks[i].len() && i + 1 < self.chunks.len() {
            Pos {
                chunk: pos.chunk + 1,
                at: 0,
            }
        } else {
            pos
        }
    }

    #[inline]
    fn entry(&self, pos: Pos) -> (Entry<'_>, usize) {
        entry_at(
            &self.chunks[(pos.chunk - self.first_chunk) as usize],
            pos.at,
        )
    }

    /// Makes room once: the oldest time's records leave (one record if it has no time of its
    /// own). Returns false if the oldest time is also the newest (its records stay).
    #[inline]
    fn evict(&mut self, dropped: &mut impl FnMut(Entry<'_>)) -> bool {
        let Some(&Reverse((t, id))) = self.heads.peek() else {
            return false;
        };
        if self.untimed > 0 {
            let head = self.norm(self.runs[(id - self.first_run) as usize].head);
            if !self.entry(head).0.timed {
                self.pop_oldest(dropped);
                return true;
            }
        }
        if t >= self.newest {
            return false;
        }
        self.cut = Some(t);
        while self.heads.peek().is_some_and(|Reverse((h, _))| *h == t) {
            self.pop_oldest(dropped);
        }
        true
    }

    /// Hands the oldest record (the head of the run whose head is oldest) to `dropped`.
    #[inline]
    fn pop_oldest(&mut self, dropped: &mut impl FnMut(Entry<'_>)) {
        let Some(mut top) = self.heads.peek_mut() else {
            return;
        };
        let Reverse((_, id)) = *top;
        let ri = (id - self.first_run) as usize;
        let head = {
            let p = self.runs[ri].head;
            let i = (p.chunk - self.first_chunk) as usize;
            if p.at == self.chunks[i].len() && i + 1 < self.chunks.len() {
                Pos {
                    chunk: p.chunk + 1,
                    at: 0,
                }
            } else {
                p
            }
        };
        let data = &self.chunks[(head.chunk - self.first_chunk) as usize];
        let (entry, size) = entry_at(data, head.at);
        self.untimed -= usize::from(!entry.timed);
        dropped(entry);
        self.held -= size;
        self.records -= 1;
        let run = &mut self.runs[ri];
        run.records -= 1;
        run.head = Pos {
            chunk: head.chunk,
            at: head.at + size,
        };
        if run.records == 0 {
            std::collections::binary_heap::PeekMut::pop(top);
        } else {
            let next = {
                let p = run.head;
                let i = (p.chunk - self.first_chunk) as usize;
                let p = if p.at == self.chunks[i].len() && i + 1 < self.chunks.len() {
                    Pos {
                        chunk: p.chunk + 1,
                        at: 0,
                    }
                } else {
                    p
                };
                entry_at(&self.chunks[(p.chunk - self.first_chunk) as usize], p.at)
                    .0
                    .time
            };
            *top = Reverse((next, id));
        }
    }

    /// Forgets empty runs at the front, frees chunks no run needs, and compacts when dead runs or
    /// pinned chunks have piled up.
    #[inline]
    fn tidy(&mut self) {
        while self.runs.len() > 1 && self.runs.front().is_some_and(|r| r.records == 0) {
            self.runs.pop_front();
            self.first_run += 1;
        }
        let low = match self.runs.front() {
            Some(r) if r.records > 0 => {
                // Its head may sit at the end of a chunk about to be freed: move it on first.
                let head = self.norm(r.head);
                self.runs[0].head = head;
                head.chunk
            }
            _ => self.first_chunk + self.chunks.len() as u64 - 1,
        };
        while self.first_chunk < low {
            let mut done = self.chunks.pop_front().expect("a chunk below the low mark");
            self.first_chunk += 1;
            if done.capacity() == self.chunk_bytes {
                done.clear();
                self.spare = Some(done);
            }
        }
        let chunks_max = 2 * (self.capacity.max(self.held) / self.chunk_bytes) + 4;
        if self.chunks.len() > chunks_max || self.runs.len() > 2 * self.heads.len() + 64 {
            self.compact();
        }
    }

    /// Copies the live records into fresh chunks, run by run, and renumbers the runs.
    #[cold]
    fn compact(&mut self) {
        let old_chunks = std::mem::take(&mut self.chunks);
        let old_first = self.first_chunk;
        let old_runs = std::mem::take(&mut self.runs);
        self.first_chunk = old_first + old_chunks.len() as u64;
        self.first_run += old_runs.len() as u64;
        self.heads.clear();
        self.held = 0;
        self.records = 0;
        self.untimed = 0;
        let spare = self.spare.take();
        for run in old_runs.into_iter().filter(|r| r.records > 0) {
            let mut p = run.head;
            let mut new_head = None;
            for _ in 0..run.records {
                let i = (p.chunk - old_first) as usize;
                if p.at == old_chunks[i].len() {
                    p = Pos {
                        chunk: p.chunk + 1,
                        at: 0,
                    };
                }
                let (e, size) = entry_at(&old_chunks[(p.chunk - old_first) as usize], p.at);
                let at = self.append(e.bytes, e.kind, e.tag, e.time, !e.timed);
                new_head.get_or_insert((at, e.time));
                p.at += size;
            }
            let (head, time) = new_head.expect("a run with records");
            self.runs.push_back(Run {
                head,
                records: run.records,
                tail_time: run.tail_time,
            });
            let id = self.first_run + self.runs.len() as u64 - 1;
            self.heads.push(Reverse((time, id)));
        }
        self.spare = spare;
    }

    /// Drops every record, oldest time first, handing each to `dropped`; the ring starts afresh
    /// (no cut).
    pub fn clear(&mut self, dropped: &mut impl FnMut(Entry<'_>)) {
        while !self.heads.is_empty() {
            self.pop_oldest(dropped);
        }
        self.runs.clear();
        while let Some(mut c) = self.chunks.pop_front() {
            self.first_chunk += 1;
            if c.capacity() == self.chunk_bytes {
                c.clear();
                self.spare = Some(c);
            }
        }
        debug_assert_eq!((self.held, self.records, self.untimed), (0, 0, 0));
        self.newest = 0;
        self.cut = None;
    }

    /// The records held, in arrival order.
    pub fn iter(&self) -> impl Iterator<Item = Entry<'_>> + '_ {
        self.runs.iter().flat_map(move |run| {
            let mut p = run.head;
            (0..run.records).map(move |_| {
                p = self.norm(p);
                let (e, size) = self.entry(p);
                p.at += size;
                e
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
    fn in_time_order_keeps_the_newest_within_capacity_and_reports_the_dropped_in_order() {
        let mut ring = RecordRing::new(10 * (PREFIX + 100));
        let mut dropped = Vec::new();
        for n in 0..50u8 {
            ring.push(
                &rec(n, 100),
                9,
                u32::from(n % 3),
                Some(u64::from(n)),
                &mut |e| dropped.push(e.bytes[0]),
            );
            assert!(ring.held() <= ring.capacity());
        }
        assert_eq!(ring.len(), 10);
        assert_eq!(dropped, (0..40).collect::<Vec<u8>>());
        assert_eq!(ring.cut(), Some(39));
        let kept: Vec<(u8, u32, u32, u64)> = ring
            .iter()
            .map(|e| (e.bytes[0], e.kind, e.tag, e.time))
            .collect();
        let want: Vec<(u8, u32, u32, u64)> = (40..50)
            .map(|n| (n, 9, u32::from(n % 3), u64::from(n)))
            .collect();
        assert_eq!(kept, want);
        // Memory: the budget plus at most about two chunks (the last one and the spare).
        assert!(
            ring.allocated() <= ring.capacity() + 2 * ring.chunk_bytes + 2 * (PREFIX + 100),
            "{}",
            ring.allocated()
        );
    }

    #[test]
    fn without_times_it_keeps_the_newest_in_arrival_order() {
        let mut ring = RecordRing::new(10 * (PREFIX + 100));
        let mut dropped = Vec::new();
        for n in 0..50u8 {
            assert!(ring.push(&rec(n, 100), 9, 0, None, &mut |e| dropped.push(e.bytes[0])));
        }
        assert_eq!(dropped, (0..40).collect::<Vec<u8>>());
        assert_eq!(ring.cut(), None);
        let kept: Vec<u8> = ring.iter().map(|e| e.bytes[0]).collect();
        assert_eq!(kept, (40..50).collect::<Vec<u8>>());
        assert!(ring.iter().all(|e| !e.timed && e.time == 0));
    }

    #[test]
    fn cpus_drained_one_after_another_keep_the_same_window_on_each() {
        // All of cpu 0 (times 0, 2, 4, …) arrives before any of cpu 1 (1, 3, 5, …): the ring keeps
        // the newest times of both, refuses cpu 1's records below the cut, and drops cpu 0's oldest.
        let mut ring = RecordRing::new(20 * (PREFIX + 32));
        let mut dropped = 0;
        let mut late = 0;
        for cpu in 0..2u64 {
            for i in 0..100u64 {
                if !ring.push(&rec(cpu as u8, 32), 9, 0, Some(2 * i + cpu), &mut |_| {
                    dropped += 1
                }) {
                    late += 1;
                }
            }
        }
        let mut kept: Vec<u64> = ring.iter().map(|e| e.time).collect();
        kept.sort_unstable();
        assert_eq!(kept, (180..200).collect::<Vec<u64>>());
        assert_eq!(ring.cut(), Some(179));
        // cpu 0 kept 160..198 (cut 158), so cpu 1's 1..157 were late; 101 left to make room.
        assert_eq!((late, dropped), (79, 101));
    }

    /// A small deterministic generator (xorshift), for the property test.
    fn next(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn any_arrival_order_keeps_exactly_the_largest_newest_window_that_fits() {
        for seed in 1..200u64 {
            let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let cap = 512 + (next(&mut s) % 8192) as usize;
            let mut ring = RecordRing::new(cap);
            let mut pushed: Vec<(u64, usize)> = Vec::new();
            let n = 50 + next(&mut s) % 400;
            let sources = 1 + next(&mut s) % 4;
            let mut clock = vec![0u64; sources as usize];
            for _ in 0..n {
                // Each source's times increase, with jumps; sources interleave at random, and now
                // and then a record comes from far in the past or the future.
                let src = (next(&mut s) % sources) as usize;
                clock[src] += next(&mut s) % 50;
                let t = match next(&mut s) % 20 {
                    0 => next(&mut s) % 200,
                    1 => clock[src] + 10_000,
                    _ => clock[src],
                };
                let len = 8 + (next(&mut s) % 120) as usize;
                let before = ring.cut();
                let kept = ring.push(&rec(0, len), 9, 0, Some(t), &mut |_| {});
                assert_eq!(kept, before.is_none_or(|c| t > c), "seed {seed}");
                pushed.push((t, PREFIX + len));
                assert!(ring.held() <= cap || ring.oldest() == Some(ring.newest));
                assert!(
                    ring.allocated() <= 2 * cap + 6 * ring.chunk_bytes + 256,
                    "seed {seed}: {} allocated for {cap}",
                    ring.allocated()
                );
            }
            let mut kept: Vec<u64> = ring.iter().map(|e| e.time).collect();
            kept.sort_unstable();
            let Some(&lo) = kept.first() else { continue };
            // Exactly every record offered at or above the window's oldest time…
            let mut want: Vec<u64> = pushed.iter().map(|p| p.0).filter(|&t| t >= lo).collect();
            want.sort_unstable();
            assert_eq!(kept, want, "seed {seed}");
            // …and the window is the largest: with the next older time it would not fit.
            if let Some(cut) = ring.cut() {
                assert!(lo > cut);
                let wider: usize = pushed.iter().filter(|p| p.0 >= cut).map(|p| p.1).sum();
                assert!(wider > cap, "seed {seed}: {wider} would fit {cap}");
            }
        }
    }

    #[test]
    fn a_record_larger_than_the_ring_is_kept_alone() {
        let mut ring = RecordRing::new(64);
        let mut n = 0;
        ring.push(&rec(1, 8), 1, 0, Some(1), &mut |_| n += 1);
        ring.push(&rec(2, 500), 1, 0, Some(2), &mut |_| n += 1);
        assert_eq!((ring.len(), n), (1, 1));
        assert_eq!(ring.iter().next().unwrap().bytes.len(), 500);
        ring.push(&rec(3, 8), 1, 0, Some(3), &mut |_| n += 1);
        assert_eq!((ring.len(), n), (1, 2));
        ring.clear(&mut |_| n += 1);
        assert!(ring.is_empty());
        assert_eq!((ring.held(), n), (0, 3));
        assert_eq!(ring.cut(), None);
    }

    #[test]
    fn steady_state_reuses_its_chunks() {
        let mut ring = RecordRing::new(1 << 16);
        for i in 0..100_000u32 {
            let t = u64::from(i) + if i % 2 == 0 { 3 } else { 0 };
            ring.push(
                &rec(i as u8, 24 + (i % 7) as usize * 8),
                9,
                0,
                Some(t),
                &mut |_| {},
            );
        }
        assert!(ring.held() <= 1 << 16);
        assert!(ring.allocated() <= (1 << 16) + 3 * ring.chunk_bytes);
    }

    #[test]
    fn a_far_future_record_does_not_pin_unbounded_memory() {
        // One record per chunk-full from far in the future stays while everything around it
        // leaves: without compaction each would pin a chunk.
        let mut ring = RecordRing::new(1 << 15);
        for i in 0..200_000u64 {
            let t = if i % 500 == 0 { 1 << 40 } else { i };
            ring.push(&rec(0, 40), 9, 0, Some(t), &mut |_| {});
            assert!(ring.allocated() <= 2 * (1 << 15) + 6 * ring.chunk_bytes);
        }
        assert!(ring.held() <= 1 << 15);
    }
}

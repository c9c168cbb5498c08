//! The kept samples, spilled: a sample is 16 bytes (thread, stack node, time), gathered in runs
//! of [`RUN`] samples; a full run is sorted by (thread, time) and written to an unnamed temporary
//! file (`tempfile::tempfile`, in `$TMPDIR`; gone when the sink is), so the sink holds at most one
//! run of samples in memory however long the recording. When a profile is written, each thread's
//! samples are merged by time from its segment of every run ([`Spill::thread`]): time order, and
//! the order they came in among samples of the same time. A run the file cannot take (no
//! `$TMPDIR`, a full disk) stays in memory: the profile is still whole, only larger.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::os::unix::fs::FileExt;

/// Samples a run holds (4 MiB of them).
pub(super) const RUN: usize = 1 << 18;

/// One sample: its thread (the sink's index), stack (a node of the sink's stack tree) and time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Point {
    pub thread: u32,
    pub node: u32,
    pub time: u64,
}

const POINT: usize = 16;

impl Point {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.thread.to_le_bytes());
        out.extend_from_slice(&self.node.to_le_bytes());
        out.extend_from_slice(&self.time.to_le_bytes());
    }

    fn decode(b: &[u8]) -> Point {
        let word = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        Point {
            thread: word(0),
            node: word(4),
            time: u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")),
        }
    }
}

/// Where a run's samples are.
#[derive(Debug)]
enum Place {
    /// At this byte offset of the spill file.
    File(u64),
    /// In memory (the file could not take it).
    Memory(Vec<Point>),
}

/// A sorted run: its samples' place and each thread's segment in it, by thread.
#[derive(Debug)]
pub(super) struct Run {
    place: Place,
    /// (thread, first sample in the run, samples), sorted by thread.
    segments: Vec<(u32, u32, u32)>,
}

/// The samples so far: sorted runs and the run being filled.
#[derive(Debug)]
pub(super) struct Spill {
    run_len: usize,
    open: Vec<Point>,
    runs: Vec<Run>,
    /// The spill file (made at the first full run) and its length; `None` once it failed.
    file: Option<(File, u64)>,
    failed: bool,
    len: u64,
}

impl Default for Spill {
    fn default() -> Spill {
        Spill::with_run(RUN)
    }
}

impl Spill {
    /// Samples gathered in runs of `run_len`.
    pub(super) fn with_run(run_len: usize) -> Spill {
        Spill {
            run_len: run_len.max(1),
            open: Vec::new(),
            runs: Vec::new(),
            file: None,
            failed: false,
            len: 0,
        }
    }

    /// The number of samples.
    pub(super) fn len(&self) -> u64 {
        self.len
    }

    pub(super) fn push(&mut self, p: Point) {
        if self.open.capacity() == 0 {
            self.open.reserve_exact(self.run_len);
        }
        self.open.push(p);
        self.len += 1;
        if self.open.len() >= self.run_len {
            let mut run = std::mem::take(&mut self.open);
            run.sort_by_key(|p| (p.thread, p.time));
            self.close(run);
        }
    }

    /// Keeps a sorted run: in the file if it takes it, else in memory.
    fn close(&mut self, run: Vec<Point>) {
        let segments = segments(&run);
        let place = match self.append(&run) {
            Some(at) => Place::File(at),
            None => Place::Memory(run),
        };
        self.runs.push(Run { place, segments });
    }

    /// Appends a run to the spill file: its offset, `None` when the file cannot be had or written.
    fn append(&mut self, run: &[Point]) -> Option<u64> {
        if self.failed {
            return None;
        }
        if self.file.is_none() {
            match tempfile::tempfile() {
                Ok(f) => self.file = Some((f, 0)),
                Err(_) => {
                    self.failed = true;
                    return None;
                }
            }
        }
        let (file, end) = self.file.as_mut().expect("made above");
        let mut bytes = Vec::with_capacity(run.len() * POINT);
        for p in run {
            p.encode(&mut bytes);
        }
        // Positioned writes: a failed one leaves what the other runs wrote as it was.
        if file.write_all_at(&bytes, *end).is_err() {
            self.failed = true;
            return None;
        }
        let at = *end;
        *end += bytes.len() as u64;
        Some(at)
    }

    /// The samples of `thread`, in time order (among samples of one time, the order they came
    /// in), read [`CHUNK`] samples a run at a time; `open` is [`Spill::sorted_open`].
    pub(super) fn thread<'a>(&'a self, open: &'a Run, thread: u32) -> Merge<'a> {
        let mut cursors = Vec::new();
        for (r, run) in self.runs.iter().chain([open]).enumerate() {
            if let Ok(i) = run.segments.binary_search_by_key(&thread, |s| s.0) {
                let (_, first, n) = run.segments[i];
                cursors.push(Cursor {
                    place: &run.place,
                    next: first as usize,
                    end: first as usize + n as usize,
                    buf: Vec::new(),
                    at: 0,
                    run: r,
                });
            }
        }
        let mut merge = Merge {
            file: self.file.as_ref().map(|f| &f.0),
            cursors,
            heap: BinaryHeap::new(),
            error: None,
        };
        for c in 0..merge.cursors.len() {
            merge.refill(c);
        }
        merge
    }

    /// The open run, sorted, as a run in memory (what [`Spill::thread`] reads it as).
    pub(super) fn sorted_open(&self) -> Run {
        let mut run = self.open.clone();
        run.sort_by_key(|p| (p.thread, p.time));
        Run {
            segments: segments(&run),
            place: Place::Memory(run),
        }
    }

    /// The closed runs (tests).
    #[cfg(test)]
    pub(super) fn runs(&self) -> usize {
        self.runs.len()
    }
}

/// Each thread's segment of a run sorted by thread.
fn segments(run: &[Point]) -> Vec<(u32, u32, u32)> {
    let mut segments: Vec<(u32, u32, u32)> = Vec::new();
    for (i, p) in run.iter().enumerate() {
        match segments.last_mut() {
            Some(s) if s.0 == p.thread => s.2 += 1,
            _ => segments.push((p.thread, i as u32, 1)),
        }
    }
    segments
}

/// Samples a cursor reads from the file at a time (64 KiB).
const CHUNK: usize = 4096;

/// A thread's segment of one run, read a chunk at a time.
struct Cursor<'a> {
    place: &'a Place,
    next: usize,
    end: usize,
    buf: Vec<Point>,
    at: usize,
    run: usize,
}

/// A thread's samples from every run, merged by (time, run).
pub(super) struct Merge<'a> {
    file: Option<&'a File>,
    cursors: Vec<Cursor<'a>>,
    heap: BinaryHeap<Reverse<(u64, usize, usize)>>,
    error: Option<std::io::Error>,
}

impl Merge<'_> {
    /// Puts cursor `c`'s next sample on the heap, reading its next chunk if needed.
    fn refill(&mut self, c: usize) {
        let cur = &mut self.cursors[c];
        if cur.at == cur.buf.len() {
            cur.buf.clear();
            cur.at = 0;
            let n = (cur.end - cur.next).min(CHUNK);
            if n == 0 {
                return;
            }
            match cur.place {
                Place::Memory(v) => cur.buf.extend_from_slice(&v[cur.next..cur.next + n]),
                Place::File(at) => {
                    let mut bytes = vec![0u8; n * POINT];
                    let file = self.file.expect("a run in the file");
                    let offset = at + (cur.next * POINT) as u64;
                    if let Err(e) = file.read_exact_at(&mut bytes, offset) {
                        self.error.get_or_insert(e);
                        cur.next = cur.end;
                        return;
                    }
                    cur.buf.extend(bytes.chunks_exact(POINT).map(Point::decode));
                }
            }
            cur.next += n;
        }
        let p = cur.buf[cur.at];
        self.heap.push(Reverse((p.time, cur.run, c)));
    }

    /// The next sample in time order; `Ok(None)` at the end.
    ///
    /// # Errors
    /// When the spill file could not be read back.
    pub(super) fn next_point(&mut self) -> std::io::Result<Option<Point>> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let Some(Reverse((_, _, c))) = self.heap.pop() else {
            return Ok(None);
        };
        let cur = &mut self.cursors[c];
        let p = cur.buf[cur.at];
        cur.at += 1;
        self.refill(c);
        Ok(Some(p))
    }
}

impl std::fmt::Debug for Merge<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Merge")
            .field("runs", &self.cursors.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_threads_samples_come_back_in_time_order_then_arrival_from_file_and_memory() {
        let mut spill = Spill::with_run(5);
        let mut all = Vec::new();
        // Three threads, times out of order within a thread and across runs, ties kept in order.
        for i in 0..23u32 {
            let p = Point {
                thread: i % 3,
                node: i,
                time: u64::from((i * 7919) % 11),
            };
            spill.push(p);
            all.push(p);
        }
        assert_eq!((spill.runs(), spill.len()), (4, 23));
        // A run the file did not take stays in memory.
        spill.failed = true;
        for i in 23..30u32 {
            let p = Point {
                thread: 1,
                node: i,
                time: 3,
            };
            spill.push(p);
            all.push(p);
        }
        assert!(matches!(spill.runs[4].place, Place::Memory(_)));
        assert!(matches!(spill.runs[0].place, Place::File(_)));
        let open = spill.sorted_open();
        for t in 0..4 {
            let mut want: Vec<Point> = all.iter().filter(|p| p.thread == t).copied().collect();
            want.sort_by_key(|p| p.time); // stable: arrival order among equal times
            let mut merge = spill.thread(&open, t);
            let mut got = Vec::new();
            while let Some(p) = merge.next_point().unwrap() {
                got.push(p);
            }
            assert_eq!(got, want, "thread {t}");
        }
    }
}

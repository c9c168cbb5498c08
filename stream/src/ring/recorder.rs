//! [`Recorder`]: the flight recorder's state, apart from the stage that feeds it, so that any
//! producer of records (the `ring` stage; a native `record --overwrite` source) can keep the newest
//! events and dump them as a complete stream.
//!
//! It keeps three things:
//! - the **preamble**: every record before FINISHED_INIT (or before the first SAMPLE in a stream
//!   without one) that is not a process's side-band — pipe header, HEADER_ATTRs, HEADER_FEATUREs,
//!   ID_INDEX, EVENT_UPDATEs, THREAD_MAP, CPU_MAP, TRACING_DATA, the kernel MMAP… — plus the header
//!   records that arrive later (a late HEADER_ATTR, EVENT_UPDATE or BUILD_ID), kept for every dump;
//! - the **ring** of the newest events by event time ([`RecordRing`]), side-band records (COMM,
//!   MMAP, FORK…) included, so that a window replays the changes made during it. The window is
//!   every event since the last dump whose time is above a cut, the lowest cut that fits the
//!   budget, whatever order perf drained the cpus in; an event that arrives at or below the cut
//!   (its cpu was drained after newer events had filled the window) is dropped as **late**, and
//!   counted ([`Recorder::take_late`]);
//! - the **side-band state** at the start of the window ([`Sideband`]): the preamble's process
//!   records, and the side-band records that left the window (evicted or late), applied **in time
//!   order**. Records arrive in rounds, one cpu after another, so a child's COMM and MMAPs can
//!   arrive before the parent's FORK that creates it; applied in arrival order, the FORK would
//!   then replace the child's image with a copy of the parent's. A record that left the window
//!   waits in a pending heap (bounded by [`PENDING_MAX`]) until perf's round contract says that
//!   nothing older can still arrive (see `Reorder`), and a dump replays the pending ones with the
//!   window.
//!
//! A dump is: the preamble; the side-band state of every process the window references (samples'
//! pids, side-band records' pids and parents), kernel maps first; FINISHED_INIT if the input had
//! one; the pending side-band and the window sorted by time (records without a time keep the time
//! of the record that arrived before them); one FINISHED_ROUND. The ring is then emptied into the
//! side-band state and its cut forgotten, so the next dump covers the events that arrive after
//! this one.
//!
//! **Completeness.** A dump at the end of the input holds every event of the input since the
//! previous dump whose time lies in its window. A dump taken mid-stream (a request, a trigger)
//! holds what has arrived: perf may not have drained the other cpus' newest records yet (at most
//! about a round of them); they arrive after it and go to the next window.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};

use perfpipe_core::Batch;

use super::buffer::{Entry, RecordRing};
use super::sideband::{is_kernel_map, is_sideband, Sideband};
use crate::format::build;
use crate::format::{Endian, EventHeader, Record, RecordType, StreamInfo, PIPE_HEADER_KIND};

/// A record kept whole (preamble).
#[derive(Clone, Debug)]
struct Kept {
    bytes: Vec<u8>,
    kind: u32,
    tag: u32,
}

/// Most side-band records kept pending (left the window, not yet known to be older than every
/// record still to come); past it the oldest is applied to the state early.
pub const PENDING_MAX: usize = 4096;

/// A side-band record that left the window, waiting to be applied in time order.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Pending {
    time: u64,
    seq: u64,
    bytes: Vec<u8>,
    tag: u32,
}

/// Side-band records that left the window (evicted, or late), applied to the state in time order
/// once perf's round contract says no older record can still arrive.
///
/// perf writes a FINISHED_ROUND after each pass over the cpus' buffers, and its reader relies on
/// this: at a FINISHED_ROUND it delivers the records up to the largest time seen at the *previous*
/// one (`process_finished_round()` in `tools/perf/util/session.c`, `OE_FLUSH__ROUND` in
/// `ordered-events.c`), so no later record is older than that. Until then a record older than one
/// already applied may still come (another cpu's FORK before the child's COMM): applied in arrival
/// order, the FORK would replace the child's image with its parent's.
#[derive(Debug, Default)]
struct Reorder {
    /// Arrival number of the next record held.
    seq: u64,
    /// Largest time seen, and what it was at the last FINISHED_ROUND.
    seen: Option<u64>,
    at_round: Option<u64>,
    /// Records older than this can no longer be preceded by a late arrival.
    safe: Option<u64>,
    heap: BinaryHeap<Reverse<Pending>>,
    bytes: usize,
}

impl Reorder {
    /// Notes the time of a record that arrived.
    #[inline(always)]
    fn saw(&mut self, time: Option<u64>) {
        if let Some(t) = time {
            self.seen = Some(self.seen.map_or(t, |s| s.max(t)));
        }
    }

    /// A FINISHED_ROUND: what was the largest time at the previous one is now safe.
    fn round(&mut self) {
        self.safe = self.at_round;
        self.at_round = self.seen;
    }

    /// Takes a record that left the window: a side-band one with a time waits in the heap, one
    /// without is applied at once (there is no order to restore).
    #[inline(always)]
    fn left(&mut self, entry: Entry<'_>, e: Endian, info: &StreamInfo, sideband: &mut Sideband) {
        if !is_sideband(RecordType(entry.kind)) {
            return;
        }
        let rec = Record::new(entry.bytes, e, info.attr(entry.tag as u16));
        if entry.timed {
            self.bytes += rec.bytes.len();
            self.seq += 1;
            self.heap.push(Reverse(Pending {
                time: entry.time,
                seq: self.seq,
                bytes: rec.bytes.to_vec(),
                tag: entry.tag,
            }));
        } else {
            sideband.apply(&rec);
        }
    }

    /// Applies the pending records older than `horizon` (the window's oldest time) and than the
    /// round contract's safe time (all of them when `everything`), oldest first, and the oldest
    /// beyond [`PENDING_MAX`].
    #[inline]
    fn settle(
        &mut self,
        everything: bool,
        horizon: Option<u64>,
        sideband: &mut Sideband,
        e: Endian,
        info: &StreamInfo,
    ) {
        let horizon = if everything {
            u64::MAX
        } else {
            horizon.unwrap_or(u64::MAX).min(self.safe.unwrap_or(0))
        };
        while let Some(Reverse(p)) = self.heap.peek() {
            if p.time >= horizon && self.heap.len() <= PENDING_MAX {
                break;
            }
            let Reverse(p) = self.heap.pop().expect("peeked");
            self.bytes -= p.bytes.len();
            sideband.apply(&Record::new(&p.bytes, e, info.attr(p.tag as u16)));
        }
    }
}

/// What one dump held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DumpStats {
    /// Records of the window (events and side-band from the ring).
    pub events: u64,
    /// Side-band records replayed from the state.
    pub sideband: u64,
    /// Bytes of the whole dump.
    pub bytes: u64,
}

/// The flight recorder's state; see the module docs.
#[derive(Debug)]
pub struct Recorder {
    preamble: Vec<Kept>,
    preamble_bytes: usize,
    in_preamble: bool,
    finished_init: Option<Vec<u8>>,
    ring: RecordRing,
    sideband: Sideband,
    reorder: Reorder,
    dropped: u64,
    late: u64,
}

/// Header records that may arrive after the preamble and belong with it.
fn is_late_header(t: RecordType) -> bool {
    matches!(
        t,
        RecordType::HEADER_ATTR
            | RecordType::HEADER_EVENT_TYPE
            | RecordType::HEADER_TRACING_DATA
            | RecordType::HEADER_BUILD_ID
            | RecordType::ID_INDEX
            | RecordType::AUXTRACE_INFO
            | RecordType::THREAD_MAP
            | RecordType::CPU_MAP
            | RecordType::STAT_CONFIG
            | RecordType::EVENT_UPDATE
            | RecordType::TIME_CONV
            | RecordType::HEADER_FEATURE
            | RecordType::BPF_METADATA
    )
}

/// The time of a record: a sample's TIME, else its `sample_id` trailer's.
fn time_of(rec: &Record<'_>) -> Option<u64> {
    match rec.sample() {
        Some(s) => s.time(),
        None => rec.sample_id()?.time,
    }
}

impl Recorder {
    /// A recorder whose ring keeps `size` bytes of events.
    pub fn new(size: usize) -> Recorder {
        Recorder {
            preamble: Vec::new(),
            preamble_bytes: 0,
            in_preamble: true,
            finished_init: None,
            ring: RecordRing::new(size),
            sideband: Sideband::new(),
            reorder: Reorder::default(),
            dropped: 0,
            late: 0,
        }
    }

    /// Bytes of events held in the ring (records plus their 16-byte prefixes).
    pub fn ring_bytes(&self) -> usize {
        self.ring.held()
    }

    /// Bytes of the side-band state (pending records included) and the preamble.
    pub fn sideband_bytes(&self) -> usize {
        self.sideband.bytes() + self.reorder.bytes + self.preamble_bytes
    }

    /// Records held in the ring.
    pub fn events(&self) -> usize {
        self.ring.len()
    }

    /// Events dropped since the last call: those that left the window to make room (oldest time
    /// first) and the late ones ([`Recorder::take_late`]).
    pub fn take_dropped(&mut self) -> u64 {
        std::mem::take(&mut self.dropped)
    }

    /// Events dropped since the last call because they arrived at or below the window's cut
    /// (perf drained their cpu after newer records had filled the window); counted in
    /// [`Recorder::take_dropped`] too.
    pub fn take_late(&mut self) -> u64 {
        std::mem::take(&mut self.late)
    }

    /// The time at or below which the current window has lost records (see [`RecordRing::cut`]).
    pub fn cut(&self) -> Option<u64> {
        self.ring.cut()
    }

    /// Takes in one record (`kind` and `tag` as `decode` framed it).
    pub fn push(&mut self, info: &StreamInfo, bytes: &[u8], kind: u32, tag: u32) {
        let t = RecordType(kind);
        let rec = Record::new(bytes, info.endian, info.attr(tag as u16));
        if self.in_preamble {
            match t {
                RecordType::FINISHED_INIT => {
                    self.in_preamble = false;
                    self.finished_init = Some(bytes.to_vec());
                    return;
                }
                RecordType::FINISHED_ROUND => return,
                RecordType::SAMPLE => self.in_preamble = false,
                _ if is_sideband(t) && !is_kernel_map(&rec) => {
                    self.sideband.apply(&rec);
                    return;
                }
                _ => return self.keep(bytes, kind, tag),
            }
        }
        match t {
            _ if kind == PIPE_HEADER_KIND || is_late_header(t) => self.keep(bytes, kind, tag),
            RecordType::FINISHED_ROUND => self.reorder.round(),
            RecordType::FINISHED_INIT | RecordType::COMPRESSED | RecordType::COMPRESSED2 => {}
            _ => {
                let (endian, sideband, reorder, dropped) = (
                    info.endian,
                    &mut self.sideband,
                    &mut self.reorder,
                    &mut self.dropped,
                );
                let time = time_of(&rec);
                reorder.saw(time);
                let kept = self
                    .ring
                    .push(bytes, kind, tag, time, &mut |entry: Entry<'_>| {
                        *dropped += 1;
                        reorder.left(entry, endian, info, sideband);
                    });
                if !kept {
                    // Behind the window's cut: it could never be in this window again.
                    self.dropped += 1;
                    self.late += 1;
                    let entry = Entry {
                        bytes,
                        kind,
                        tag,
                        time: time.unwrap_or(0),
                        timed: time.is_some(),
                    };
                    self.reorder.left(entry, endian, info, &mut self.sideband);
                }
                if !self.reorder.heap.is_empty() {
                    let oldest = self.ring.oldest();
                    self.reorder
                        .settle(false, oldest, &mut self.sideband, endian, info);
                }
            }
        }
    }

    fn keep(&mut self, bytes: &[u8], kind: u32, tag: u32) {
        self.preamble_bytes += bytes.len();
        self.preamble.push(Kept {
            bytes: bytes.to_vec(),
            kind,
            tag,
        });
    }

    /// Writes a dump as a complete stream into batches of about `batch_bytes` (each from `take`,
    /// carrying `info` as context; the last marked [`Batch::ends_stream`]), then empties the ring
    /// into the side-band state.
    pub fn dump(
        &mut self,
        info: &std::sync::Arc<StreamInfo>,
        batch_bytes: usize,
        take: &mut impl FnMut() -> Batch,
        out: &mut Vec<Batch>,
    ) -> DumpStats {
        let mut stats = DumpStats::default();
        let mut w = Writer {
            batch: None,
            batch_bytes,
            info,
            take,
            out,
            bytes: 0,
        };
        for k in &self.preamble {
            w.put(&k.bytes, k.kind, k.tag);
        }
        let e = info.endian;
        let attr = |tag: u32| info.attr(tag as u16);
        // The processes the window references, in first-reference order.
        let mut seen = HashSet::new();
        let mut pids = Vec::new();
        // The window: pending side-band (earlier arrivals: first among equal times), then the ring.
        let pending: Vec<&Pending> = self.reorder.heap.iter().map(|Reverse(p)| p).collect();
        let mut times = Vec::with_capacity(pending.len() + self.ring.len());
        times.extend(
            pending
                .iter()
                .enumerate()
                .map(|(i, p)| (p.time, 0, p.seq, i)),
        );
        let pending_at = times.len();
        let window = pending
            .iter()
            .map(|p| (Record::new(&p.bytes, e, attr(p.tag)), p.time))
            .chain(
                self.ring
                    .iter()
                    .map(|entry| (Record::new(entry.bytes, e, attr(entry.tag)), entry.time)),
            );
        for (i, (rec, time)) in window.enumerate() {
            if i >= pending_at {
                times.push((time, 1, i as u64, i - pending_at));
            }
            let mut note = |pid: Option<u32>| {
                if let Some(p) = pid.filter(|&p| p != u32::MAX && seen.insert(p)) {
                    pids.push(p);
                }
            };
            if let Some(s) = rec.sample() {
                note(s.pid());
            } else if let Some(m) = rec.mmap() {
                note(Some(m.pid));
            } else if let Some(c) = rec.comm() {
                note(Some(c.pid));
            } else if let Some(t) = rec.task() {
                note(Some(t.ppid));
                note(Some(t.pid));
            } else {
                note(rec.sample_id().and_then(|s| s.pid));
            }
        }
        self.sideband.emit(pids, &mut |bytes| {
            let kind = kind_of(bytes, e);
            w.put(bytes, kind, u32::from(info.attr_index(kind, bytes)));
            stats.sideband += 1;
        });
        if let Some(init) = &self.finished_init {
            w.put(init, RecordType::FINISHED_INIT.0, 0);
        }
        times.sort_unstable();
        let entries: Vec<Entry<'_>> = self.ring.iter().collect();
        for &(_, class, _, at) in &times {
            if class == 0 {
                let p = pending[at];
                let kind = kind_of(&p.bytes, e);
                w.put(&p.bytes, kind, p.tag);
                stats.sideband += 1;
            } else {
                let entry = entries[at];
                w.put(entry.bytes, entry.kind, entry.tag);
            }
        }
        stats.events = entries.len() as u64;
        let round = build::record(RecordType::FINISHED_ROUND.0, 0, &[], true, e);
        w.put(&round, RecordType::FINISHED_ROUND.0, 0);
        if let Some(last) = &mut w.batch {
            last.ends_stream = true;
        }
        w.finish();
        stats.bytes = w.bytes;
        drop(entries);
        drop(pending);
        let (sideband, reorder) = (&mut self.sideband, &mut self.reorder);
        self.ring
            .clear(&mut |entry: Entry<'_>| reorder.left(entry, e, info, sideband));
        reorder.settle(true, None, sideband, e, info);
        stats
    }
}

/// The record type of encoded bytes, as a span kind.
fn kind_of(bytes: &[u8], e: Endian) -> u32 {
    EventHeader::parse(bytes, e).map_or(0, |h| h.type_)
}

/// Appends records to batches of about `batch_bytes`.
struct Writer<'a, T: FnMut() -> Batch> {
    batch: Option<Batch>,
    batch_bytes: usize,
    info: &'a std::sync::Arc<StreamInfo>,
    take: &'a mut T,
    out: &'a mut Vec<Batch>,
    bytes: u64,
}

impl<T: FnMut() -> Batch> Writer<'_, T> {
    fn put(&mut self, bytes: &[u8], kind: u32, tag: u32) {
        if self
            .batch
            .as_ref()
            .is_some_and(|b| b.data.len() + bytes.len() > self.batch_bytes && !b.spans.is_empty())
        {
            self.finish();
        }
        let info = self.info;
        let take = &mut *self.take;
        let batch = self.batch.get_or_insert_with(|| {
            let mut b = take();
            b.context = Some(info.clone());
            b
        });
        let span = batch.append(bytes, kind, tag);
        batch.spans.push(span);
        self.bytes += bytes.len() as u64;
    }

    fn finish(&mut self) {
        if let Some(b) = self.batch.take() {
            self.out.push(b);
        }
    }
}

//! `perfpipe-record`: the native recorder, the source of `perfpipe record`. Opens software events
//! and tracepoints with `perf_event_open(2)`, one mmap ring per cpu, and produces the pipe-mode
//! stream `perf record -o -` would, so `decode` and every other stage take it unchanged.
//!
//! The stream: pipe header; one HEADER_ATTR per event (with its ids); HEADER_FEATURE records
//! (HOSTNAME, OSRELEASE, VERSION, ARCH, NRCPUS, CMDLINE, EVENT_DESC, then the LAST_FEATURE end
//! mark); with tracepoints, HEADER_TRACING_DATA and the tracing data read from tracefs (mounted if
//! it is not); ID_INDEX; the kernel MMAP; COMM/MMAP2 of the processes that already run (`-a`: all,
//! `-p`: that one, read from `/proc` after the events are enabled, so that what changes while it
//! is read is recorded too; for `-- CMD` the kernel writes them itself, `comm_exec`/`mmap2`);
//! FINISHED_INIT; then the kernel's records, every ring drained once per pass and a
//! FINISHED_ROUND after each pass, which is the ordering perf's readers sort by.
//!
//! Samples carry `IDENTIFIER|IP|TID|TIME|CPU` (`PERIOD` with `-F` and for tracepoints, `RAW` for
//! tracepoints, `CALLCHAIN` with `-g`) and every record a `sample_id` trailer; the identifier lets
//! several attrs share the stream (several events, and the dummy of overwrite mode).
//!
//! - **Forward mode** (default): see [`read_forward`]. LOST records pass through and are
//!   counted (`lost_events`).
//! - **Overwrite mode** ([`RecordConfig::overwrite`]): the sampling event is `write_backward` in
//!   read-only maps (the kernel keeps the newest samples, overwriting the oldest); a `dummy` event
//!   in forward rings carries the side-band (COMM, MMAP2, FORK, EXIT), drained continuously into a
//!   [`Recorder`], the flight recorder's state. On a dump request
//!   ([`RecordConfig::dumps`], SIGUSR2 in the CLI), a [trigger](RecordConfig::trigger) (the
//!   samples written since the last look are copied out, paused, after each poll and matched,
//!   then left in the ring; [`RecordConfig::after`] later) and at the end, every ring is paused, read
//!   newest-first ([`read_backward`]), resumed, and the recorder writes a **complete stream**:
//!   header records, the side-band of the processes the window references, the window in time
//!   order. The window starts where every cpu's ring is complete: a ring that wrapped since the
//!   last dump lost what came before its oldest record, so older records of the other rings are
//!   cut (`dump_cut_records`, `dump_cut_bytes`; see `complete_from`). Dumps are emitted as framed batches (what `decode` would give), so the CLI runs the
//!   stages without `decode`; each dump starts with its own pipe header. With
//!   [`RecordConfig::once`] (one output, one stream) the first dump ends the recording; a
//!   `-- CMD` workload then runs on, unrecorded.
//!
//! **Order**: per ring in kernel order, rings one after another per pass. **Buffering**: the
//! kernel rings (`mmap_pages` pages per cpu and direction), one pass of records, and in overwrite
//! mode the recorder (side-band since the last dump plus one dump's samples). **End**: the
//! workload exits, the `-p` process exits, or the stop flag is set (SIGINT in the CLI): the events
//! are disabled (a workload still running gets SIGTERM, as from `perf record`), the rings drained
//! (or dumped), then [`Flow::Stop`].

#![deny(missing_docs)]

mod config;
mod event;
mod mmap_ring;
mod synthetic_events;
mod sys;
mod tracefs;
mod workload;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use perfpipe_core::{Batch, Counter, Flow, Out, Source, StageError};

pub use config::{Period, RecordConfig, Target};
pub use event::{parse_event, parse_events, EventName};
pub use mmap_ring::{read_backward, read_forward, ReadStats};
pub use sys::{perf_event_attr, Event, Mmap};
pub use workload::Workload;

use perfpipe_stream::filter::Filter;
use perfpipe_stream::format::{Endian, EventHeader, RecordType, StreamInfo};
use perfpipe_stream::read::HEADROOM;
use perfpipe_stream::ring::Recorder;
use perfpipe_stream::Error;

/// How long one poll of the rings waits at most.
const POLL: Duration = Duration::from_millis(100);

fn perf_err(op: &'static str, what: impl Into<String>, source: std::io::Error) -> Error {
    Error::Perf {
        op,
        what: what.into(),
        source,
    }
}

/// Whether a process exists and is not a zombie.
fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, r)| r.trim_start().chars().next());
    !matches!(state, Some('Z' | 'X') | None)
}

/// The backward ring of one cpu's sampling event (overwrite mode).
#[derive(Debug)]
struct Backward {
    map: Mmap,
    /// Index in `Record::events` of the event that owns the ring (paused and resumed).
    owner: usize,
    /// The head at the previous dump: the next dump reads what was written since.
    dumped: u64,
    /// The head at the previous look for a trigger.
    peeked: u64,
}

impl Backward {
    /// Pauses the ring, reads the records written since `since` (oldest first), resumes it.
    /// Returns them with the head to read from next time.
    fn read(&self, events: &[Event], since: u64) -> Result<(Vec<Vec<u8>>, u64, ReadStats), Error> {
        let ev = &events[self.owner];
        ev.pause_output(true)
            .map_err(|e| perf_err("ioctl PAUSE_OUTPUT", "pause", e))?;
        let (mut recs, head, stats) = read_backward(&self.map, since);
        ev.pause_output(false)
            .map_err(|e| perf_err("ioctl PAUSE_OUTPUT", "resume", e))?;
        recs.reverse(); // oldest first
        Ok((recs, head, stats))
    }
}

/// One cpu's rings.
#[derive(Debug)]
struct CpuRings {
    /// The forward ring: samples and side-band (forward mode) or side-band only (overwrite).
    forward: Mmap,
    /// The fd that owns `forward`, for poll(2).
    forward_fd: i32,
    /// The backward ring of the sampling event (overwrite mode).
    backward: Option<Backward>,
}

/// The running `record` source.
#[derive(Debug)]
pub struct Record {
    events: Vec<Event>,
    rings: Vec<CpuRings>,
    workload: Option<Workload>,
    pid: Option<i32>,
    preamble: Option<Vec<u8>>,
    started: bool,
    stop: Option<Arc<AtomicBool>>,
    dumps: Option<Arc<AtomicBool>>,
    once: bool,
    recorder: Option<(Recorder, Arc<StreamInfo>)>,
    trigger: Option<Filter>,
    after: Option<Duration>,
    /// A trigger fired; the dump is due at this instant (`after` later).
    pending: Option<Instant>,
    offset: u64,
    waited: Duration,
    lost: Counter,
    dumped: Counter,
    triggers: Counter,
    records: Counter,
    /// Records (and bytes) of backward rings older than a dump's complete window.
    cut_records: Counter,
    cut_bytes: Counter,
}

impl Record {
    fn start(&mut self) -> Result<(), Error> {
        self.started = true;
        // The events are running already (`-a`, `-p`: enabled before /proc was read) or start
        // at the workload's exec.
        if let Some(w) = &mut self.workload {
            w.start()
                .map_err(|e| perf_err("start", "the workload", e))?;
        }
        Ok(())
    }

    fn stop_requested(&self) -> bool {
        self.stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
    }

    /// Whether the recording should end: workload or process gone, or stop requested.
    fn ended(&mut self) -> bool {
        if self.stop_requested() {
            return true;
        }
        if let Some(w) = &mut self.workload {
            return w.exited();
        }
        self.pid.is_some_and(|p| !alive(p))
    }

    /// Waits until a forward ring has data or [`POLL`] passes.
    fn poll(&mut self) {
        let mut fds: Vec<libc::pollfd> = self
            .rings
            .iter()
            .map(|r| libc::pollfd {
                fd: r.forward_fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let t0 = Instant::now();
        // SAFETY: a valid array of pollfds for the duration of the call.
        let n = unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                POLL.as_millis() as i32,
            )
        };
        // An exited task's events report POLLHUP at once and forever: do not spin on them.
        if n > 0 && fds.iter().all(|f| f.revents & libc::POLLIN == 0) {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.waited += t0.elapsed();
    }

    /// Drains every forward ring into `buf`; appends a FINISHED_ROUND if anything was read.
    fn drain(&mut self, buf: &mut Vec<u8>) -> ReadStats {
        let mut total = ReadStats::default();
        for r in &self.rings {
            let s = read_forward(&r.forward, buf);
            total.records += s.records;
            total.bytes += s.bytes;
            total.lost += s.lost;
        }
        if total.records > 0 {
            perfpipe_stream::format::build::empty(
                buf,
                RecordType::FINISHED_ROUND,
                synthetic_events::endian(),
            );
        }
        self.lost.add(total.lost);
        self.records.add(total.records);
        total
    }

    /// Forward mode: one pass over the rings, straight into a pooled batch after decode's
    /// headroom.
    fn forward(&mut self, out: &mut Out<'_>) {
        let mut batch = out.take();
        batch.data.resize(HEADROOM, 0);
        self.drain(&mut batch.data);
        if batch.data.len() > HEADROOM {
            batch.start = HEADROOM;
            batch.stream_offset = self.offset;
            self.offset += (batch.data.len() - HEADROOM) as u64;
            out.push(batch);
        } else {
            out.recycle(batch);
        }
    }

    fn emit_raw(&mut self, out: &mut Out<'_>, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let mut batch = out.take();
        batch.data.reserve(HEADROOM + bytes.len());
        batch.data.resize(HEADROOM, 0);
        batch.data.extend_from_slice(bytes);
        batch.start = HEADROOM;
        batch.stream_offset = self.offset;
        self.offset += bytes.len() as u64;
        out.push(batch);
    }

    /// Overwrite mode: pauses, reads and resumes every backward ring, and writes a dump.
    fn dump(&mut self, out: &mut Out<'_>) -> Result<(), Error> {
        let mut side = Vec::new();
        self.drain(&mut side);
        let Some((rec, info)) = &mut self.recorder else {
            return Ok(());
        };
        for_each_side(&side, info, rec);
        let mut rings: Vec<(Vec<Vec<u8>>, bool)> = Vec::new();
        for r in &mut self.rings {
            let Some(b) = &mut r.backward else {
                continue;
            };
            let (recs, head, stats) = b.read(&self.events, b.dumped)?;
            // More was written since the last dump than could be read: the ring wrapped and
            // lost its older records.
            let wrapped = stats.bytes < b.dumped.wrapping_sub(head);
            (b.dumped, b.peeked) = (head, head);
            self.lost.add(stats.lost);
            self.records.add(stats.records);
            rings.push((recs, wrapped));
        }
        let (keep, cut) = complete_from(&rings, info);
        self.cut_records.add(cut.records);
        self.cut_bytes.add(cut.bytes);
        for (recs, _) in &rings {
            for bytes in recs.iter().filter(|r| keep(r)) {
                let kind = EventHeader::parse(bytes, info.endian).map_or(0, |h| h.type_);
                let tag = u32::from(info.attr_index(kind, bytes));
                rec.push(info, bytes, kind, tag);
            }
        }
        let mut batches = Vec::new();
        let batch_bytes = out.batch_bytes();
        rec.dump(info, batch_bytes, &mut || out.take(), &mut batches);
        for b in batches {
            self.offset += b.stream_bytes();
            out.push(b);
        }
        self.dumped.add(1);
        self.pending = None;
        Ok(())
    }

    /// Overwrite mode with a trigger: whether a sample written since the last look (or a dump)
    /// matches. The filter sees `side` (the side-band just drained, so that `comm` and `dso`
    /// resolve) and then each ring's new samples; the rings are paused only while copied.
    fn triggered(&mut self, side: &[u8]) -> Result<bool, Error> {
        let (Some(filter), Some((_, info))) = (&mut self.trigger, &self.recorder) else {
            return Ok(false);
        };
        let mut batch = Batch {
            context: Some(info.clone()),
            ..Batch::default()
        };
        let mut add = |bytes: &[u8]| {
            let kind = EventHeader::parse(bytes, info.endian).map_or(0, |h| h.type_);
            let span = batch.append(bytes, kind, u32::from(info.attr_index(kind, bytes)));
            batch.spans.push(span);
        };
        for_each_whole(side, info.endian, &mut add);
        for r in &mut self.rings {
            let Some(b) = &mut r.backward else {
                continue;
            };
            let (recs, head, _) = b.read(&self.events, b.peeked)?;
            b.peeked = head;
            recs.iter().for_each(|r| add(r));
        }
        Ok(filter.first_match(&batch).is_some())
    }

    /// Disables the events; on a stop request, also ends a `-- CMD` workload that still runs,
    /// as `perf record` does (after the first dump of a single output it runs on, unrecorded).
    fn finish(&mut self) -> Result<(), Error> {
        for ev in &self.events {
            // A task's events may be gone with it; nothing to do then.
            let _ = ev.disable();
        }
        if self.stop_requested() {
            if let Some(w) = &mut self.workload {
                w.terminate();
            }
        }
        Ok(())
    }
}

/// What [`complete_from`] cut.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Cut {
    records: u64,
    bytes: u64,
}

/// The time of a record read from a ring: a sample's TIME, else its `sample_id` trailer's.
fn time_in(bytes: &[u8], info: &StreamInfo) -> Option<u64> {
    let kind = EventHeader::parse(bytes, info.endian).map_or(0, |h| h.type_);
    let rec = perfpipe_stream::format::Record::new(
        bytes,
        info.endian,
        info.attr(info.attr_index(kind, bytes)),
    );
    match rec.sample() {
        Some(s) => s.time(),
        None => rec.sample_id()?.time,
    }
}

/// The records of an overwrite dump that belong to its complete window, from each cpu's backward
/// ring (`(records oldest first, whether the ring wrapped since the last dump)`). A ring that
/// wrapped lost everything before its oldest record, so the window can only start there: the
/// window starts at the latest such oldest time over the rings that wrapped (a ring that did not
/// wrap is complete since the last dump), and older records of the other rings are cut, so no
/// cpu looks idle while another's samples say it ran. Returns the filter and what it cuts.
fn complete_from<'a>(
    rings: &[(Vec<Vec<u8>>, bool)],
    info: &'a StreamInfo,
) -> (impl Fn(&[u8]) -> bool + 'a, Cut) {
    let start = rings
        .iter()
        .filter(|(_, wrapped)| *wrapped)
        .filter_map(|(recs, _)| recs.iter().filter_map(|r| time_in(r, info)).min())
        .max();
    let keep = move |r: &[u8]| match (start, time_in(r, info)) {
        (Some(s), Some(t)) => t >= s,
        _ => true,
    };
    let mut cut = Cut::default();
    for r in rings.iter().flat_map(|(recs, _)| recs).filter(|r| !keep(r)) {
        cut.records += 1;
        cut.bytes += r.len() as u64;
    }
    (keep, cut)
}

/// Calls `f` on each record of `bytes`, a run of whole records.
fn for_each_whole(bytes: &[u8], e: Endian, f: &mut impl FnMut(&[u8])) {
    let mut pos = 0;
    while let Some(h) = bytes.get(pos..).and_then(|b| EventHeader::parse(b, e)) {
        let size = usize::from(h.size);
        if size < 8 || pos + size > bytes.len() {
            break;
        }
        f(&bytes[pos..pos + size]);
        pos += size;
    }
}

/// Pushes the side-band records of `bytes` (a run of whole records) into the recorder.
fn for_each_side(bytes: &[u8], info: &Arc<StreamInfo>, rec: &mut Recorder) {
    for_each_whole(bytes, info.endian, &mut |r| {
        let kind = EventHeader::parse(r, info.endian).map_or(0, |h| h.type_);
        rec.push(info, r, kind, u32::from(info.attr_index(kind, r)));
    });
}

impl Source for Record {
    fn produce(&mut self, out: &mut Out<'_>) -> Result<Flow, StageError> {
        if let Some(pre) = self.preamble.take() {
            if self.recorder.is_none() {
                self.emit_raw(out, &pre);
                // `-a`, `-p`: the events ran while /proc was read, and on a busy machine that
                // read can take long enough for the rings to fill (seconds of a slow, starved
                // recorder: every cpu's switches with their stacks). Read out before the
                // workload starts, so that its exec, maps and first samples find room: started
                // with full rings, they were lost, and its samples had no comm and no symbols.
                self.forward(out);
            }
            self.start()?;
            return Ok(Flow::Continue);
        }
        debug_assert!(self.started);
        let ended = self.ended();
        if !ended {
            self.poll();
        } else {
            self.finish()?;
        }
        if self.recorder.is_some() {
            let asked = self
                .dumps
                .as_ref()
                .is_some_and(|d| d.swap(false, Ordering::Relaxed));
            let due = self.pending.is_some_and(|at| Instant::now() >= at);
            let mut fire = ended || asked || due;
            if !fire {
                let mut side = Vec::new();
                self.drain(&mut side);
                if let Some((rec, info)) = &mut self.recorder {
                    for_each_side(&side, info, rec);
                }
                if self.pending.is_none() && self.triggered(&side)? {
                    // Once, as the ring stage's trigger: later matches do not dump again.
                    self.trigger = None;
                    self.triggers.add(1);
                    match self.after {
                        None => fire = true,
                        Some(after) => self.pending = Some(Instant::now() + after),
                    }
                }
            }
            if fire {
                self.dump(out)?;
                if self.once && !ended {
                    self.finish()?;
                    return Ok(Flow::Stop);
                }
            }
        } else {
            self.forward(out);
        }
        Ok(if ended { Flow::Stop } else { Flow::Continue })
    }

    fn take_io_wait(&mut self) -> Duration {
        std::mem::take(&mut self.waited)
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![
            ("kernel_records", self.records.clone()),
            ("lost_events", self.lost.clone()),
            ("dumps", self.dumped.clone()),
            ("triggers", self.triggers.clone()),
            ("dump_cut_records", self.cut_records.clone()),
            ("dump_cut_bytes", self.cut_bytes.clone()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfpipe_stream::format::Attr;
    use perfpipe_stream::synth::SynthStream;

    /// The attr of a synthetic stream, and one sample per time on `cpu`, oldest first.
    fn ring(info: &mut Option<StreamInfo>, cpu: u32, times: &[u64]) -> Vec<Vec<u8>> {
        let mut s = SynthStream::new();
        let head = s.bytes().len();
        for &t in times {
            s.sample(10 + cpu, 10 + cpu, t, cpu, 0x1000, &[]);
        }
        let bytes = s.into_bytes();
        let e = Endian::Little;
        let attr_len = usize::from(EventHeader::parse(&bytes[16..], e).unwrap().size);
        let mut i = StreamInfo::new(e);
        i.add_attr(Attr::parse(&bytes[16 + 8..16 + attr_len], e).unwrap());
        info.get_or_insert(i);
        let mut recs = Vec::new();
        for_each_whole(&bytes[head..], e, &mut |r| recs.push(r.to_vec()));
        recs
    }

    #[test]
    fn an_overwrite_dump_starts_where_every_wrapped_ring_is_complete() {
        let mut info = None;
        // cpu 0 wrapped and kept 500..; cpu 1 wrapped and kept 700..; cpu 2 never wrapped and
        // holds everything since the last dump (from 0).
        let a = ring(&mut info, 0, &(500..1000).step_by(10).collect::<Vec<_>>());
        let b = ring(&mut info, 1, &(700..1000).step_by(10).collect::<Vec<_>>());
        let c = ring(&mut info, 2, &(0..1000).step_by(10).collect::<Vec<_>>());
        let info = info.unwrap();
        let time = |r: &Vec<u8>| time_in(r, &info).unwrap();
        let rings = vec![(a.clone(), true), (b, true), (c.clone(), false)];
        let (keep, cut) = complete_from(&rings, &info);
        for (recs, _) in &rings {
            for r in recs {
                assert_eq!(keep(r), time(r) >= 700, "{}", time(r));
            }
        }
        // cpu 0's 500..690 and cpu 2's 0..690.
        assert_eq!(cut.records, 20 + 70);
        assert_eq!(cut.bytes, 90 * a[0].len() as u64);

        // Nothing wrapped: every ring is complete since the last dump; nothing is cut.
        let rings = vec![(a, false), (c, false)];
        let (keep, cut) = complete_from(&rings, &info);
        assert!(rings.iter().flat_map(|r| &r.0).all(|r| keep(r)));
        assert_eq!(cut, Cut::default());
    }
}

//! `record`: the native capture source. Opens software events with `perf_event_open(2)`, one
//! mmap ring per cpu, and produces the pipe-mode stream `perf record -o -` would, so `decode` and
//! every other stage take it unchanged.
//!
//! The stream: pipe header; one HEADER_ATTR per event (with its ids); HEADER_FEATURE records
//! (HOSTNAME, OSRELEASE, VERSION, ARCH, NRCPUS, CMDLINE, EVENT_DESC, then the LAST_FEATURE end
//! mark); ID_INDEX; the kernel MMAP; COMM/MMAP2 of the processes that already run (`-a`: all,
//! `-p`: that one; for `-- CMD` the kernel writes them itself, `comm_exec`/`mmap2`); FINISHED_INIT;
//! then the kernel's records, every ring drained once per pass and a FINISHED_ROUND after each
//! pass, which is the ordering perf's readers sort by.
//!
//! Samples carry `IDENTIFIER|IP|TID|TIME|CPU` (`PERIOD` with `-F`, `CALLCHAIN` with `-g`) and every record a
//! `sample_id` trailer; the identifier lets several attrs share the stream (overwrite mode).
//!
//! - **Forward mode** (default): see [`ring::read_forward`]. LOST records pass through and are
//!   counted (`lost_events`).
//! - **Overwrite mode** ([`RecordConfig::overwrite`]): the sampling event is `write_backward` in
//!   read-only maps (the kernel keeps the newest samples, overwriting the oldest); a `dummy` event
//!   in forward rings carries the side-band (COMM, MMAP2, FORK, EXIT), drained continuously into a
//!   [`Recorder`](crate::ring::Recorder), the flight recorder's state. On a dump request
//!   ([`RecordConfig::dumps`], SIGUSR2 in the CLI) and at the end, every ring is paused, read
//!   newest-first ([`ring::read_backward`]), resumed, and the recorder writes a **complete stream**:
//!   header records, the side-band of the processes the window references, the window in time
//!   order. Dumps are emitted as framed batches (what `decode` would give), so the CLI runs the
//!   stages without `decode`; each dump starts with its own pipe header.
//!
//! **Order**: per ring in kernel order, rings one after another per pass. **Buffering**: the
//! kernel rings (`mmap_pages` pages per cpu and direction), one pass of records, and in overwrite
//! mode the recorder (side-band since the last dump plus one dump's samples). **End**: the
//! workload exits, the `-p` process exits, or the stop flag is set (SIGINT in the CLI): the events
//! are disabled, the rings drained (or dumped), then [`Flow::Stop`].

mod ring;
mod synth;
mod sys;
mod workload;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use perfpipe_core::{Counter, Flow, Out, Source, StageError};

pub use ring::{read_backward, read_forward, ReadStats};
pub use sys::{perf_event_attr, Event, Mmap};
pub use workload::Workload;

use crate::format::{sample, Attr, EventHeader, RecordType, StreamInfo, PIPE_HEADER_KIND};
use crate::read::HEADROOM;
use crate::ring::Recorder;
use crate::Error;
use synth::{EventDesc, IdEntry};
use sys::flag;

/// What to record from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Every cpu, every process (`-a`).
    System,
    /// One running process and its threads (`-p PID`).
    Pid(i32),
    /// A command started for the recording (`-- CMD…`), followed into its children.
    Command(Vec<String>),
}

/// Sampling period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Period {
    /// One sample every N events (`-c`; nanoseconds for the clock events).
    Count(u64),
    /// About N samples a second (`-F`).
    Freq(u64),
}

/// Configuration of the `record` source. Plain data; `build` does the I/O.
#[derive(Clone, Debug)]
pub struct RecordConfig {
    /// Event name: `cpu-clock`, `task-clock` or `page-faults`.
    pub event: String,
    /// Sampling period.
    pub period: Period,
    /// Record callchains (`-g`).
    pub callchain: bool,
    /// What to record.
    pub target: Target,
    /// Overwrite mode: keep the newest samples in backward rings, dump on request and at the end.
    pub overwrite: bool,
    /// Data pages per ring (a power of two).
    pub mmap_pages: usize,
    /// Ends the recording when set.
    pub stop: Option<Arc<AtomicBool>>,
    /// Asks for a dump when set (overwrite mode); the source clears it.
    pub dumps: Option<Arc<AtomicBool>>,
    /// Overwrite mode: end the recording after the first dump (the output holds one stream).
    pub once: bool,
    /// Send the workload's standard output to standard error (when the stream goes to stdout).
    pub workload_stdout_to_stderr: bool,
    /// The command line, for the CMDLINE feature.
    pub cmdline: Vec<String>,
}

impl Default for RecordConfig {
    fn default() -> RecordConfig {
        RecordConfig {
            event: "cpu-clock".into(),
            period: Period::Freq(4000),
            callchain: false,
            target: Target::System,
            overwrite: false,
            mmap_pages: 128,
            stop: None,
            dumps: None,
            once: false,
            workload_stdout_to_stderr: false,
            cmdline: Vec::new(),
        }
    }
}

/// How long one poll of the rings waits at most.
const POLL: Duration = Duration::from_millis(100);

fn perf_err(op: &'static str, what: impl Into<String>, source: std::io::Error) -> Error {
    Error::Perf {
        op,
        what: what.into(),
        source,
    }
}

/// `(config, name)` of a supported software event.
///
/// # Errors
/// [`Error::BadOption`] for any other name.
pub fn parse_event(name: &str) -> Result<(u64, &'static str), Error> {
    match name {
        "cpu-clock" => Ok((sys::SW_CPU_CLOCK, "cpu-clock")),
        "task-clock" => Ok((sys::SW_TASK_CLOCK, "task-clock")),
        "page-faults" | "faults" => Ok((sys::SW_PAGE_FAULTS, "page-faults")),
        _ => Err(Error::BadOption {
            option: "-e",
            message: format!("`{name}`: supported events are cpu-clock, task-clock, page-faults"),
        }),
    }
}

/// Parses a cpu list like `0-3,5`.
fn cpu_list(s: &str) -> Vec<i32> {
    let mut v = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<i32>(), b.parse::<i32>()) {
                    v.extend(a..=b);
                }
            }
            None => v.extend(part.parse::<i32>().ok()),
        }
    }
    v
}

fn sys_cpus(which: &str) -> Vec<i32> {
    std::fs::read_to_string(format!("/sys/devices/system/cpu/{which}"))
        .map(|s| cpu_list(&s))
        .unwrap_or_default()
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

/// One cpu's rings.
#[derive(Debug)]
struct CpuRings {
    /// The forward ring: samples and side-band (forward mode) or side-band only (overwrite).
    forward: Mmap,
    /// The fd that owns `forward`, for poll(2).
    forward_fd: i32,
    /// The backward ring of the sampling event (overwrite mode), its owner, and the head of the
    /// previous read.
    backward: Option<(Mmap, usize, u64)>,
}

impl RecordConfig {
    fn attr(&self, config: u64, tracking: bool, backward: bool, pages: usize) -> perf_event_attr {
        let mut sample_type =
            sample::IDENTIFIER | sample::IP | sample::TID | sample::TIME | sample::CPU;
        // Only with a frequency, as perf does: a software event that samples PERIOD with a fixed
        // period writes a sample for *every* event (`perf_swevent_event()` in
        // kernel/events/core.c), whatever `sample_period` says.
        if matches!(self.period, Period::Freq(_)) {
            sample_type |= sample::PERIOD;
        }
        if self.callchain {
            sample_type |= sample::CALLCHAIN;
        }
        let mut flags = flag::DISABLED | flag::SAMPLE_ID_ALL;
        if tracking {
            flags |= flag::MMAP | flag::COMM | flag::TASK | flag::MMAP2 | flag::COMM_EXEC;
        }
        if backward {
            flags |= flag::WRITE_BACKWARD;
        } else {
            // Wake the poll when a quarter of the ring is used.
            flags |= flag::WATERMARK;
        }
        if matches!(self.target, Target::Command(_) | Target::Pid(_)) {
            flags |= flag::INHERIT;
        }
        if matches!(self.target, Target::Command(_)) {
            flags |= flag::ENABLE_ON_EXEC;
        }
        let (type_, config, period) = if config == sys::SW_DUMMY {
            (sys::TYPE_SOFTWARE, sys::SW_DUMMY, 1)
        } else {
            let p = match self.period {
                Period::Count(c) => c,
                Period::Freq(f) => {
                    flags |= flag::FREQ;
                    f
                }
            };
            (sys::TYPE_SOFTWARE, config, p)
        };
        perf_event_attr {
            type_,
            size: sys::ATTR_SIZE,
            config,
            sample_period: period,
            sample_type,
            flags,
            wakeup_events: if backward {
                0
            } else {
                (pages * sys::page_size() / 4) as u32
            },
            ..perf_event_attr::default()
        }
    }

    /// Opens the events and maps the rings; with `-- CMD`, forks the workload (held before exec
    /// until the first [`Source::produce`]).
    ///
    /// # Errors
    /// [`Error::BadOption`] for an unknown event or a ring size that is not a power of two;
    /// [`Error::Perf`] when an event cannot be opened or mapped (permissions, limits).
    pub fn build(&self) -> Result<Record, Error> {
        let (config, name) = parse_event(&self.event)?;
        if !self.mmap_pages.is_power_of_two() {
            return Err(Error::BadOption {
                option: "-m",
                message: format!("{} pages: must be a power of two", self.mmap_pages),
            });
        }
        let cpus = sys_cpus("online");
        let possible = sys_cpus("possible").len().max(cpus.len());
        let mut workload = None;
        let tids: Vec<i32> = match &self.target {
            Target::System => vec![-1],
            Target::Pid(pid) => {
                let mut t: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
                    .map_err(|e| perf_err("open", format!("/proc/{pid}/task"), e))?
                    .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect();
                t.sort_unstable();
                t
            }
            Target::Command(argv) => {
                let w = Workload::prepare(argv, self.workload_stdout_to_stderr)
                    .map_err(|e| perf_err("fork", argv.join(" "), e))?;
                let pid = w.pid();
                workload = Some(w);
                vec![pid]
            }
        };
        let cpu_wide = matches!(self.target, Target::System);
        // attr 0 samples; in overwrite mode attr 1 (dummy) carries the side-band forward.
        let mut specs = vec![(
            self.attr(config, !self.overwrite, self.overwrite, self.mmap_pages),
            name.to_string(),
        )];
        if self.overwrite {
            specs.push((
                self.attr(sys::SW_DUMMY, true, false, self.mmap_pages),
                "dummy:HG".to_string(),
            ));
        }
        let mut events: Vec<Event> = Vec::new();
        let mut descs: Vec<EventDesc> = specs
            .iter()
            .map(|(a, n)| EventDesc {
                attr: a.to_bytes(),
                name: n.clone(),
                ids: Vec::new(),
            })
            .collect();
        let mut index = Vec::new();
        let mut rings = Vec::new();
        for &cpu in &cpus {
            // Per attr, the fd that owns this cpu's ring of that direction.
            let mut owners: Vec<Option<usize>> = vec![None; specs.len()];
            for &tid in &tids {
                for (idx, (attr, n)) in specs.iter().enumerate() {
                    let ev = Event::open(attr, tid, cpu)
                        .map_err(|e| perf_err("perf_event_open", format!("{n} on cpu {cpu}"), e))?;
                    let id = ev.id().map_err(|e| perf_err("ioctl ID", n.clone(), e))?;
                    descs[idx].ids.push(id);
                    index.push(IdEntry {
                        id,
                        idx: idx as u64,
                        cpu: cpu as u64,
                        tid: if cpu_wide { u64::MAX } else { tid as u64 },
                    });
                    match owners[idx] {
                        Some(o) => ev
                            .set_output(&events[o])
                            .map_err(|e| perf_err("ioctl SET_OUTPUT", n.clone(), e))?,
                        None => owners[idx] = Some(events.len()),
                    }
                    events.push(ev);
                }
            }
            let map = |o: usize, writable: bool| {
                Mmap::new(&events[o], self.mmap_pages, writable).map_err(|e| {
                    perf_err(
                        "mmap",
                        format!("{} pages on cpu {cpu} (see -m)", self.mmap_pages),
                        e,
                    )
                })
            };
            let fwd_idx = usize::from(self.overwrite);
            let fwd_owner = owners[fwd_idx].expect("one fd per cpu");
            let backward = if self.overwrite {
                let o = owners[0].expect("one fd per cpu");
                Some((map(o, false)?, o, 0))
            } else {
                None
            };
            rings.push(CpuRings {
                forward: map(fwd_owner, true)?,
                forward_fd: events[fwd_owner].raw_fd(),
                backward,
            });
        }

        let e = synth::endian();
        let mut pre = Vec::new();
        pre.extend_from_slice(&e.put_u64(crate::format::PIPE_MAGIC));
        pre.extend_from_slice(&e.put_u64(16));
        for d in &descs {
            pre.extend_from_slice(&synth::header_attr(d));
        }
        let uts = uname();
        pre.extend_from_slice(&synth::string_feature(synth::feat::HOSTNAME, &uts[0]));
        pre.extend_from_slice(&synth::string_feature(synth::feat::OSRELEASE, &uts[1]));
        pre.extend_from_slice(&synth::string_feature(
            synth::feat::VERSION,
            concat!("perfpipe ", env!("CARGO_PKG_VERSION")),
        ));
        pre.extend_from_slice(&synth::string_feature(synth::feat::ARCH, &uts[2]));
        pre.extend_from_slice(&synth::nrcpus(possible as u32, cpus.len() as u32));
        pre.extend_from_slice(&synth::cmdline(&self.cmdline));
        pre.extend_from_slice(&synth::event_desc(&descs));
        pre.extend_from_slice(&synth::last_feature());
        pre.extend_from_slice(&synth::id_index(&index));
        if let Some(k) = synth::kernel_mmap() {
            pre.extend_from_slice(&k);
        }
        match &self.target {
            Target::System => {
                for pid in synth::all_pids() {
                    synth::process(pid, &mut pre);
                }
            }
            Target::Pid(pid) => synth::process(*pid as u32, &mut pre),
            Target::Command(_) => {
                // The forked child before its exec, as perf's thread map synthesis writes it.
                if let Some(w) = &workload {
                    let pid = w.pid() as u32;
                    if let Ok(c) = std::fs::read_to_string(format!("/proc/{pid}/comm")) {
                        pre.extend_from_slice(&synth::comm(pid, pid, c.trim_end()));
                    }
                }
            }
        }
        pre.extend_from_slice(&crate::encode::record(
            RecordType::FINISHED_INIT.0,
            0,
            &[],
            true,
            e,
        ));

        let recorder = if self.overwrite {
            let mut info = StreamInfo::new(e);
            for d in &descs {
                let rec = synth::header_attr(d);
                let attr = Attr::parse(&rec[8..], e).map_err(|err| Error::BadOption {
                    option: "record",
                    message: format!("internal: our own attr does not parse: {err}"),
                })?;
                info.add_attr(attr);
            }
            let ring_bytes = rings.len() * self.mmap_pages * sys::page_size();
            let mut rec = Recorder::new(2 * ring_bytes + (4 << 20));
            let info = Arc::new(info);
            for_each_record(&pre, |bytes, kind| {
                let tag = u32::from(info.attr_index(kind, bytes));
                rec.push(&info, bytes, kind, tag);
            });
            Some((rec, info))
        } else {
            None
        };
        Ok(Record {
            events,
            rings,
            workload,
            pid: match self.target {
                Target::Pid(p) => Some(p),
                _ => None,
            },
            preamble: Some(pre),
            started: false,
            stop: self.stop.clone(),
            dumps: self.dumps.clone(),
            once: self.once,
            recorder,
            offset: 0,
            waited: Duration::ZERO,
            lost: Counter::new(),
            dumped: Counter::new(),
            records: Counter::new(),
        })
    }
}

/// `[nodename, release, machine]` of uname(2).
fn uname() -> [String; 3] {
    // SAFETY: utsname is plain old data; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a utsname.
    unsafe { libc::uname(&mut u) };
    let s = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    [s(&u.nodename), s(&u.release), s(&u.machine)]
}

/// Calls `f(bytes, kind)` for the pipe header and each record of a native-order stream.
fn for_each_record(stream: &[u8], mut f: impl FnMut(&[u8], u32)) {
    let e = synth::endian();
    f(&stream[..16], PIPE_HEADER_KIND);
    let mut pos = 16;
    while let Some(h) = stream.get(pos..).and_then(|b| EventHeader::parse(b, e)) {
        let size = usize::from(h.size);
        if size < 8 || pos + size > stream.len() {
            break;
        }
        f(&stream[pos..pos + size], h.type_);
        pos += size;
    }
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
    offset: u64,
    waited: Duration,
    lost: Counter,
    dumped: Counter,
    records: Counter,
}

impl Record {
    fn start(&mut self) -> Result<(), Error> {
        self.started = true;
        if let Some(w) = &mut self.workload {
            return w.start().map_err(|e| perf_err("start", "the workload", e));
        }
        for ev in &self.events {
            ev.enable()
                .map_err(|e| perf_err("ioctl ENABLE", "an event", e))?;
        }
        Ok(())
    }

    /// Whether the recording should end: workload or process gone, or stop requested.
    fn ended(&mut self) -> bool {
        if self
            .stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
        {
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
            buf.extend_from_slice(&crate::encode::record(
                RecordType::FINISHED_ROUND.0,
                0,
                &[],
                true,
                synth::endian(),
            ));
        }
        self.lost.add(total.lost);
        self.records.add(total.records);
        total
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
        let mut samples: Vec<Vec<u8>> = Vec::new();
        for r in &mut self.rings {
            let Some((map, owner, prev)) = &mut r.backward else {
                continue;
            };
            let ev = &self.events[*owner];
            ev.pause_output(true)
                .map_err(|e| perf_err("ioctl PAUSE_OUTPUT", "pause", e))?;
            let (mut recs, head, stats) = read_backward(map, *prev);
            ev.pause_output(false)
                .map_err(|e| perf_err("ioctl PAUSE_OUTPUT", "resume", e))?;
            *prev = head;
            self.lost.add(stats.lost);
            self.records.add(stats.records);
            recs.reverse(); // oldest first
            samples.append(&mut recs);
        }
        for bytes in &samples {
            let kind = EventHeader::parse(bytes, info.endian).map_or(0, |h| h.type_);
            let tag = u32::from(info.attr_index(kind, bytes));
            rec.push(info, bytes, kind, tag);
        }
        let mut batches = Vec::new();
        let batch_bytes = out.batch_bytes();
        rec.dump(info, batch_bytes, &mut || out.take(), &mut batches);
        for b in batches {
            self.offset += b.stream_bytes();
            out.push(b);
        }
        self.dumped.add(1);
        Ok(())
    }

    fn finish(&mut self) -> Result<(), Error> {
        for ev in &self.events {
            // A task's events may be gone with it; nothing to do then.
            let _ = ev.disable();
        }
        Ok(())
    }
}

/// Pushes the side-band records of `bytes` (a run of whole records) into the recorder.
fn for_each_side(bytes: &[u8], info: &Arc<StreamInfo>, rec: &mut Recorder) {
    let mut pos = 0;
    while let Some(h) = bytes
        .get(pos..)
        .and_then(|b| EventHeader::parse(b, info.endian))
    {
        let size = usize::from(h.size);
        if size < 8 || pos + size > bytes.len() {
            break;
        }
        let r = &bytes[pos..pos + size];
        rec.push(info, r, h.type_, u32::from(info.attr_index(h.type_, r)));
        pos += size;
    }
}

impl Source for Record {
    fn produce(&mut self, out: &mut Out<'_>) -> Result<Flow, StageError> {
        if let Some(pre) = self.preamble.take() {
            if self.recorder.is_none() {
                self.emit_raw(out, &pre);
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
            if ended || asked {
                self.dump(out)?;
                if self.once && !ended {
                    self.finish()?;
                    return Ok(Flow::Stop);
                }
            } else {
                let mut side = Vec::new();
                self.drain(&mut side);
                if let Some((rec, info)) = &mut self.recorder {
                    for_each_side(&side, info, rec);
                }
            }
        } else {
            let mut buf = Vec::new();
            self.drain(&mut buf);
            self.emit_raw(out, &buf);
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
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(cpu_list("0-3,5\n"), vec![0, 1, 2, 3, 5]);
        assert_eq!(cpu_list("0"), vec![0]);
        assert!(cpu_list("").is_empty());
    }

    #[test]
    fn events_are_the_software_ones() {
        assert_eq!(parse_event("cpu-clock").unwrap().0, sys::SW_CPU_CLOCK);
        assert_eq!(parse_event("page-faults").unwrap().1, "page-faults");
        assert!(parse_event("cycles").is_err());
    }

    #[test]
    fn attrs_follow_the_mode() {
        let mut c = RecordConfig {
            target: Target::Command(vec!["true".into()]),
            period: Period::Count(10_000),
            callchain: true,
            ..RecordConfig::default()
        };
        let a = c.attr(sys::SW_CPU_CLOCK, true, false, 8);
        assert_ne!(a.flags & flag::ENABLE_ON_EXEC, 0);
        assert_ne!(a.flags & flag::INHERIT, 0);
        assert_ne!(a.sample_type & sample::CALLCHAIN, 0);
        assert_eq!(a.flags & flag::FREQ, 0);
        // A fixed period must not sample PERIOD: software events would then sample every event.
        assert_eq!(a.sample_type & sample::PERIOD, 0);
        assert_eq!(a.sample_period, 10_000);
        c.target = Target::System;
        let b = c.attr(sys::SW_CPU_CLOCK, false, true, 8);
        assert_ne!(b.flags & flag::WRITE_BACKWARD, 0);
        assert_eq!(b.flags & (flag::MMAP | flag::INHERIT), 0);
        // The bytes parse back as the attr perfpipe's decoder sees.
        let parsed = Attr::parse(&b.to_bytes(), synth::endian()).unwrap();
        assert_eq!(parsed.sample_type, b.sample_type);
        assert!(parsed.sample_id_all());
    }
}

//! [`RecordConfig`]: what to record and how, and `build`, which opens the events, maps the
//! rings and writes the preamble (the records before the kernel's).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use perfpipe_core::Counter;

use super::event::{parse_events, EventName};
use super::synthetic_events::{self, EventDesc, IdEntry};
use super::sys::{self, flag, perf_event_attr, Event, Mmap};
use super::tracefs::Tracefs;
use super::workload::Workload;
use super::{perf_err, Backward, CpuRings, Record};
use perfpipe_stream::filter::{Expr, FilterConfig};
use perfpipe_stream::format::{
    feature, sample, tracing, Attr, EventHeader, RecordType, StreamInfo, PIPE_HEADER_KIND,
};
use perfpipe_stream::ring::Recorder;
use perfpipe_stream::Error;

/// What to record from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Every cpu, every process (`-a`).
    System,
    /// One running process and its threads (`-p PID`).
    Pid(i32),
    /// A command started for the recording (`-- CMD…`), followed into its children.
    Command(Vec<String>),
    /// Every cpu, every process, while a command started for the recording runs (`-a -- CMD…`,
    /// as perf takes it).
    SystemWhile(Vec<String>),
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
    /// Event names ([`parse_events`]): software events and tracepoints `SYSTEM:NAME`; each a
    /// name or a comma-separated list. The first carries the side-band (and the SWITCH records).
    pub events: Vec<String>,
    /// Sampling period of every event; `None` for perf's defaults: `-F 4000` for the software
    /// events, every event (`-c 1`) for tracepoints.
    pub period: Option<Period>,
    /// Record callchains (`-g`).
    pub callchain: bool,
    /// `--switch-events`: `context_switch` on the first event, so the kernel writes
    /// PERF_RECORD_SWITCH (per task) or SWITCH_CPU_WIDE (`-a`) records.
    pub switch_events: bool,
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
    /// Overwrite mode: dump when a sample matches this expression (`--ring-trigger`; once, at the
    /// first match). The new samples are looked at after each poll (at least every 100 ms),
    /// without being taken out.
    pub trigger: Option<Expr>,
    /// With `trigger`: keep recording this long (wall time) after the match before the dump.
    pub after: Option<Duration>,
    /// Send the workload's standard output to standard error (when the stream goes to stdout).
    pub workload_stdout_to_stderr: bool,
    /// The command line, for the CMDLINE feature.
    pub cmdline: Vec<String>,
}

impl Default for RecordConfig {
    fn default() -> RecordConfig {
        RecordConfig {
            events: vec!["cpu-clock".into()],
            period: None,
            callchain: false,
            switch_events: false,
            target: Target::System,
            overwrite: false,
            mmap_pages: 128,
            stop: None,
            dumps: None,
            once: false,
            trigger: None,
            after: None,
            workload_stdout_to_stderr: false,
            cmdline: Vec::new(),
        }
    }
}

/// An event resolved for `perf_event_open`: its attr's type and config, and its name.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Resolved {
    type_: u32,
    config: u64,
    name: String,
}

impl Resolved {
    fn dummy() -> Resolved {
        Resolved {
            type_: sys::TYPE_SOFTWARE,
            config: sys::SW_DUMMY,
            name: "dummy:HG".into(),
        }
    }

    fn is_dummy(&self) -> bool {
        self.type_ == sys::TYPE_SOFTWARE && self.config == sys::SW_DUMMY
    }

    fn is_tracepoint(&self) -> bool {
        self.type_ == sys::TYPE_TRACEPOINT
    }
}

/// The events of `names` resolved (tracepoint ids from tracefs, found or mounted), and the
/// tracing data of the tracepoints among them (`None` without any).
fn resolve(names: &[EventName]) -> Result<(Vec<Resolved>, Option<Vec<u8>>), Error> {
    let mut tracefs = None;
    let mut tps = Vec::new();
    let mut out = Vec::new();
    for n in names {
        let r = match n {
            EventName::Software(config, _) => Resolved {
                type_: sys::TYPE_SOFTWARE,
                config: *config,
                name: n.display(),
            },
            EventName::Tracepoint { system, name } => {
                let t = match &tracefs {
                    Some(t) => t,
                    None => tracefs.insert(Tracefs::find_or_mount()?),
                };
                tps.push((system.clone(), name.clone()));
                Resolved {
                    type_: sys::TYPE_TRACEPOINT,
                    config: t.id(system, name)?,
                    name: n.display(),
                }
            }
        };
        if out.contains(&r) {
            return Err(Error::BadOption {
                option: "-e",
                message: format!("`{}` is named twice", r.name),
            });
        }
        out.push(r);
    }
    let data = match &tracefs {
        Some(t) => Some(t.tracing_data(&tps)?),
        None => None,
    };
    Ok((out, data))
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

impl RecordConfig {
    /// The attr of `ev`: `tracking` puts the side-band (and `--switch-events`' records) on it,
    /// `backward` makes it write backward (overwrite mode).
    fn attr(&self, ev: &Resolved, tracking: bool, backward: bool, pages: usize) -> perf_event_attr {
        let mut sample_type =
            sample::IDENTIFIER | sample::IP | sample::TID | sample::TIME | sample::CPU;
        let period = match self.period {
            Some(p) => p,
            None if ev.is_tracepoint() => Period::Count(1),
            None => Period::Freq(4000),
        };
        // A software event samples PERIOD only with a frequency, as perf does: with PERIOD and a
        // fixed period it writes a sample for *every* event (`perf_swevent_event()` in
        // kernel/events/core.c), whatever `sample_period` says. perf samples PERIOD for
        // tracepoints always (the same kernel path: `-c N` on a tracepoint samples every hit,
        // with perf as with us); their payload is RAW.
        if matches!(period, Period::Freq(_)) || ev.is_tracepoint() {
            sample_type |= sample::PERIOD;
        }
        if ev.is_tracepoint() {
            sample_type |= sample::RAW;
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
            // Wake the poll when half the ring is used, as perf record's rings do (the kernel's
            // default watermark): a quarter woke the reader twice as often for nothing.
            flags |= flag::WATERMARK;
        }
        if matches!(self.target, Target::Command(_) | Target::Pid(_)) {
            flags |= flag::INHERIT;
        }
        if matches!(self.target, Target::Command(_)) {
            flags |= flag::ENABLE_ON_EXEC;
        }
        let sample_period = if ev.is_dummy() {
            1
        } else {
            match period {
                Period::Count(c) => c,
                Period::Freq(f) => {
                    flags |= flag::FREQ;
                    f
                }
            }
        };
        perf_event_attr {
            type_: ev.type_,
            size: sys::ATTR_SIZE,
            config: ev.config,
            sample_period,
            sample_type,
            flags,
            wakeup_events: if backward {
                0
            } else {
                (pages * sys::page_size() / 2) as u32
            },
            ..perf_event_attr::default()
        }
    }

    /// Opens the events and maps the rings; with `-- CMD`, forks the workload (held before exec
    /// until the first [`perfpipe_core::Source::produce`]).
    ///
    /// # Errors
    /// [`Error::BadOption`] for an unknown event or a ring size that is not a power of two;
    /// [`Error::Perf`] when an event cannot be opened or mapped (permissions, limits).
    pub fn build(&self) -> Result<Record, Error> {
        let names = parse_events(&self.events)?;
        if (self.trigger.is_some() || self.after.is_some()) && !self.overwrite {
            return Err(Error::BadOption {
                option: "--ring-trigger",
                message: "a trigger drives --overwrite dumps (or a --ring stage): give one".into(),
            });
        }
        if self.after.is_some() && self.trigger.is_none() {
            return Err(Error::BadOption {
                option: "--ring-after",
                message: "needs --ring-trigger".into(),
            });
        }
        if !self.mmap_pages.is_power_of_two() {
            return Err(Error::BadOption {
                option: "-m",
                message: format!("{} pages: must be a power of two", self.mmap_pages),
            });
        }
        // Before the workload is forked: a missing tracepoint or tracefs ends it here.
        let (resolved, tracing_data) = resolve(&names)?;
        let cpus = sys_cpus("online");
        let possible = sys_cpus("possible").len().max(cpus.len());
        let mut workload = None;
        let tids: Vec<i32> = match &self.target {
            Target::System => vec![-1],
            Target::SystemWhile(argv) => {
                let w = Workload::prepare(argv, self.workload_stdout_to_stderr)
                    .map_err(|e| perf_err("fork", argv.join(" "), e))?;
                workload = Some(w);
                vec![-1]
            }
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
        let cpu_wide = matches!(self.target, Target::System | Target::SystemWhile(_));
        // One attr per event, the first one tracking (the side-band, and `--switch-events`' SWITCH
        // records, which so travel with its samples); in overwrite mode the events write backward
        // and a last attr (dummy) carries the side-band forward.
        let mut specs: Vec<(perf_event_attr, String, bool)> = Vec::new();
        for (i, ev) in resolved.iter().enumerate() {
            let mut attr = self.attr(
                ev,
                i == 0 && !self.overwrite,
                self.overwrite,
                self.mmap_pages,
            );
            if i == 0 && self.switch_events {
                attr.flags |= flag::CONTEXT_SWITCH;
            }
            specs.push((attr, ev.name.clone(), self.overwrite));
        }
        if self.overwrite {
            let dummy = Resolved::dummy();
            let attr = self.attr(&dummy, true, false, self.mmap_pages);
            specs.push((attr, dummy.name, false));
        }
        let mut events: Vec<Event> = Vec::new();
        let mut descs: Vec<EventDesc> = specs
            .iter()
            .map(|(a, n, _)| EventDesc {
                attr: a.to_bytes(),
                name: n.clone(),
                ids: Vec::new(),
            })
            .collect();
        let mut index = Vec::new();
        let mut rings = Vec::new();
        for &cpu in &cpus {
            // The fd that owns this cpu's forward ring, and its backward one: every other event
            // of the cpu writes into the ring of its direction, redirected once that ring is
            // mapped (the kernel refuses SET_OUTPUT to an event without a ring: EINVAL).
            let (mut fwd_owner, mut bwd_owner): (Option<usize>, Option<usize>) = (None, None);
            let mut redirect: Vec<(usize, usize)> = Vec::new();
            for &tid in &tids {
                for (idx, (attr, n, backward)) in specs.iter().enumerate() {
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
                    let owner = if *backward {
                        &mut bwd_owner
                    } else {
                        &mut fwd_owner
                    };
                    match *owner {
                        Some(o) => redirect.push((events.len(), o)),
                        None => *owner = Some(events.len()),
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
            let fwd_owner = fwd_owner.expect("one forward fd per cpu");
            let backward = match bwd_owner {
                Some(o) => Some(Backward {
                    map: map(o, false)?,
                    owner: o,
                    dumped: 0,
                    peeked: 0,
                }),
                None => None,
            };
            rings.push(CpuRings {
                forward: map(fwd_owner, true)?,
                forward_fd: events[fwd_owner].raw_fd(),
                backward,
            });
            for (from, to) in redirect {
                events[from].set_output(&events[to]).map_err(|e| {
                    perf_err("ioctl SET_OUTPUT", format!("event {from} on cpu {cpu}"), e)
                })?;
            }
        }

        // `-a` and `-p`: the events run before /proc is read, so whatever a process maps, names
        // or forks while (or after) its state is read is recorded too: perf's immediate tracking
        // event for `-a`. (Enabled after, a process exec'd in between kept no map and its
        // samples were `[unknown]` for its whole life.) Samples taken meanwhile wait in the rings
        // until the preamble is out, and are read out before a workload starts (`-a -- CMD`).
        // `-- CMD`'s events start at its exec (`enable_on_exec`).
        if !matches!(self.target, Target::Command(_)) {
            for ev in &events {
                ev.enable()
                    .map_err(|e| perf_err("ioctl ENABLE", "an event", e))?;
            }
        }

        let e = synthetic_events::endian();
        let mut pre = Vec::new();
        pre.extend_from_slice(&e.put_u64(perfpipe_stream::format::PIPE_MAGIC));
        pre.extend_from_slice(&e.put_u64(16));
        for d in &descs {
            pre.extend_from_slice(&synthetic_events::header_attr(d));
        }
        let uts = uname();
        pre.extend_from_slice(&synthetic_events::string_feature(
            feature::HOSTNAME,
            &uts[0],
        ));
        pre.extend_from_slice(&synthetic_events::string_feature(
            feature::OSRELEASE,
            &uts[1],
        ));
        pre.extend_from_slice(&synthetic_events::string_feature(
            feature::VERSION,
            concat!("perfpipe ", env!("CARGO_PKG_VERSION")),
        ));
        pre.extend_from_slice(&synthetic_events::string_feature(feature::ARCH, &uts[2]));
        pre.extend_from_slice(&synthetic_events::nrcpus(
            possible as u32,
            cpus.len() as u32,
        ));
        pre.extend_from_slice(&synthetic_events::cmdline(&self.cmdline));
        pre.extend_from_slice(&synthetic_events::event_desc(&descs));
        pre.extend_from_slice(&synthetic_events::last_feature());
        if let Some(blob) = &tracing_data {
            // After the features and before ID_INDEX, where perf 6.1 writes it.
            tracing::pipe_record(&mut pre, e, blob);
        }
        pre.extend_from_slice(&synthetic_events::id_index(&index));
        if let Some(k) = synthetic_events::kernel_mmap() {
            pre.extend_from_slice(&k);
        }
        match &self.target {
            Target::System | Target::SystemWhile(_) => {
                for pid in synthetic_events::all_pids() {
                    synthetic_events::process(pid, &mut pre);
                }
            }
            Target::Pid(pid) => synthetic_events::process(*pid as u32, &mut pre),
            Target::Command(_) => {
                // The forked child before its exec, as perf's thread map synthesis writes it.
                if let Some(w) = &workload {
                    let pid = w.pid() as u32;
                    if let Ok(c) = std::fs::read_to_string(format!("/proc/{pid}/comm")) {
                        pre.extend_from_slice(&synthetic_events::comm(pid, pid, c.trim_end()));
                    }
                }
            }
        }
        perfpipe_stream::format::build::empty(&mut pre, RecordType::FINISHED_INIT, e);

        let recorder = if self.overwrite {
            let mut info = StreamInfo::new(e);
            info.tracing = tracing_data
                .as_deref()
                .map(|b| Arc::new(tracing::TracingData::parse(b)));
            for d in &descs {
                let rec = synthetic_events::header_attr(d);
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
            trigger: self.trigger.clone().map(|e| FilterConfig::new(e).build()),
            after: self.after,
            pending: None,
            offset: 0,
            waited: Duration::ZERO,
            lost: Counter::new(),
            dumped: Counter::new(),
            triggers: Counter::new(),
            records: Counter::new(),
            cut_records: Counter::new(),
            cut_bytes: Counter::new(),
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
    let e = synthetic_events::endian();
    f(&stream[..16], PIPE_HEADER_KIND);
    let mut pos = 16;
    while let Some(h) = stream.get(pos..).and_then(|b| EventHeader::parse(b, e)) {
        let mut size = usize::from(h.size);
        if h.type_ == RecordType::HEADER_TRACING_DATA.0 {
            // Its blob follows the record, its size in the record's `u32 size`.
            size += e.u32(stream, pos + 8).map_or(0, |n| n as usize);
        }
        if size < 8 || pos + size > stream.len() {
            break;
        }
        f(&stream[pos..pos + size], h.type_);
        pos += size;
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

    fn software(config: u64) -> Resolved {
        Resolved {
            type_: sys::TYPE_SOFTWARE,
            config,
            name: "x".into(),
        }
    }

    #[test]
    fn attrs_follow_the_mode() {
        let mut c = RecordConfig {
            target: Target::Command(vec!["true".into()]),
            period: Some(Period::Count(10_000)),
            callchain: true,
            ..RecordConfig::default()
        };
        let a = c.attr(&software(sys::SW_CPU_CLOCK), true, false, 8);
        assert_ne!(a.flags & flag::ENABLE_ON_EXEC, 0);
        assert_ne!(a.flags & flag::INHERIT, 0);
        assert_ne!(a.sample_type & sample::CALLCHAIN, 0);
        assert_eq!(a.flags & flag::FREQ, 0);
        // A fixed period must not sample PERIOD: software events would then sample every event.
        assert_eq!(a.sample_type & sample::PERIOD, 0);
        assert_eq!(a.sample_period, 10_000);
        c.target = Target::System;
        let b = c.attr(&software(sys::SW_CPU_CLOCK), false, true, 8);
        assert_ne!(b.flags & flag::WRITE_BACKWARD, 0);
        assert_eq!(b.flags & (flag::MMAP | flag::INHERIT), 0);
        // The bytes parse back as the attr perfpipe's decoder sees.
        let parsed = Attr::parse(&b.to_bytes(), synthetic_events::endian()).unwrap();
        assert_eq!(parsed.sample_type, b.sample_type);
        assert!(parsed.sample_id_all());
    }

    #[test]
    fn tracepoints_sample_every_hit_with_their_raw_payload_as_perf_does() {
        let tp = Resolved {
            type_: sys::TYPE_TRACEPOINT,
            config: 372,
            name: "sched:sched_switch".into(),
        };
        let c = RecordConfig {
            callchain: true,
            ..RecordConfig::default()
        };
        // perf record -a -g -e sched:sched_switch: period 1, IP|TID|TIME|CALLCHAIN|CPU|PERIOD|RAW.
        let a = c.attr(&tp, true, false, 8);
        assert_eq!((a.type_, a.config, a.sample_period), (2, 372, 1));
        let want = sample::IDENTIFIER
            | sample::IP
            | sample::TID
            | sample::TIME
            | sample::CPU
            | sample::PERIOD
            | sample::RAW
            | sample::CALLCHAIN;
        assert_eq!(a.sample_type, want);
        assert_eq!(a.flags & flag::FREQ, 0);
        // The software events keep perf's default frequency, without RAW.
        let s = c.attr(&software(sys::SW_CONTEXT_SWITCHES), false, false, 8);
        assert_eq!((s.sample_period, s.flags & flag::FREQ), (4000, flag::FREQ));
        assert_eq!(s.sample_type & sample::RAW, 0);
        // The dummy samples nothing of its own.
        assert_eq!(c.attr(&Resolved::dummy(), true, false, 8).sample_period, 1);
    }
}

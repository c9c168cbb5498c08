//! [`RecordConfig`]: what to record and how, and `build`, which opens the events, maps the
//! rings and writes the preamble (the records before the kernel's).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use perfpipe_core::Counter;

use super::synthetic_events::{self, EventDesc, IdEntry};
use super::sys::{self, flag, perf_event_attr, Event, Mmap};
use super::workload::Workload;
use super::{perf_err, Backward, CpuRings, Record};
use perfpipe_stream::filter::{Expr, FilterConfig};
use perfpipe_stream::format::{
    feature, sample, Attr, EventHeader, RecordType, StreamInfo, PIPE_HEADER_KIND,
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
            event: "cpu-clock".into(),
            period: Period::Freq(4000),
            callchain: false,
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
        let (config, name) = parse_event(&self.event)?;
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
                Some(Backward {
                    map: map(o, false)?,
                    owner: o,
                    dumped: 0,
                    peeked: 0,
                })
            } else {
                None
            };
            rings.push(CpuRings {
                forward: map(fwd_owner, true)?,
                forward_fd: events[fwd_owner].raw_fd(),
                backward,
            });
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
        pre.extend_from_slice(&synthetic_events::id_index(&index));
        if let Some(k) = synthetic_events::kernel_mmap() {
            pre.extend_from_slice(&k);
        }
        match &self.target {
            Target::System => {
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
        let size = usize::from(h.size);
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
        let parsed = Attr::parse(&b.to_bytes(), synthetic_events::endian()).unwrap();
        assert_eq!(parsed.sample_type, b.sample_type);
        assert!(parsed.sample_id_all());
    }
}

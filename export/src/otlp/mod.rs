//! `otlp`: OpenTelemetry profiles (`-o FILE.otlp.pb`, `--otlp`, `--format otlp`), and pushing
//! them to a collector (`-o http://HOST:4318/v1development/profiles`) one request per
//! `--window`: one `ExportProfilesServiceRequest` of `opentelemetry.proto.profiles.v1development`
//! (proto v1.10/v1.11, [`proto`]), what the OpenTelemetry collector's OTLP receiver and
//! Pyroscope 2 take.
//!
//! - **Dictionary**: one `ProfilesDictionary` shared by every profile of the request: a mapping
//!   per dso (file name, and the attribute `process.executable.build_id.gnu` when the stream or
//!   the file gives a build id), a location per distinct frame (its file offset, as pprof's; the
//!   inlined functions as `Line`s of that one location, callee first), a function per name, a
//!   stack per distinct stack (leaf first), the strings and the attributes.
//! - **Resources**: one `ResourceProfiles` per process, with `host.name` (the stream's HOSTNAME),
//!   `process.pid` and `process.executable.name` (the name of its main thread, else of the
//!   first of its threads sampled); scope `perfpipe`.
//! - **Profiles**: one per event, its `sample_type` and `period_type` the event's name and unit
//!   (`cpu-clock`/`nanoseconds`, `cycles`/`count`), `period` the attr's fixed period; and, when the
//!   stream has switches (`sched:sched_switch` or `context-switches`, as `--weight offcpu`
//!   reads them, [`perfpipe_profile::offcpu`]), one `off_cpu`/`nanoseconds` profile of the
//!   intervals from each switch-out to its thread's next switch-in, charged to the switch-out's
//!   stack and attributed `thread.state` (`S`, `D`, `R`…; `open_at_end` = `true` for the intervals
//!   the stream or window ended in).
//! - **Samples**: one per distinct (stack, thread, cpu), attributed `thread.id`, `thread.name`
//!   and `cpu.logical_number`; each observation is one value (the sample's period, the
//!   interval's ns) and one timestamp (`timestamps_unix_nano`), so the sample count is the number
//!   of timestamps and the weight their values' sum. Times are perf's clock made wall-clock by the
//!   stream's CLOCK_DATA (`perf record -k CLOCK`), else as if perf's clock were this host's
//!   `CLOCK_MONOTONIC` (true of a live recording on this host).
//! - **Names**: the functions are named as every other output names them
//!   ([`perfpipe_profile::kit::names`]): `name` as folded stacks show it, `system_name` the full
//!   demangled name; an address no symbol covers has no line (its mapping says where it is).
//!
//! Memory grows with the distinct stacks, frames and threads, and with one timestamp and one
//! value a sample (16 bytes) until the profile is written: pushed in windows, a window's worth.

mod encode;
pub mod proto;
pub mod push;
#[cfg(feature = "pprof")]
pub mod pyroscope;
pub mod window;

use std::io::Write;

use perfpipe_core::spec::{BuildCtx, Flag, FormatSpec, Kind, Options, StageOption};
use perfpipe_core::{Batch, Counter, Sink, StageError};
use perfpipe_profile::kit::{
    At, Comms, Events, NameSources, OffCpuSamples, Profile, SampleSink, SnapshotSink, StackTable,
};
use perfpipe_profile::offcpu::Switch;
use perfpipe_stream::format::features::{feature_record, feature_string, ClockData};
use perfpipe_stream::format::{feature, RecordType, StreamInfo};
use rustc_hash::FxHashMap;

pub use window::{WindowSink, Windowed};

/// `key[0]` of an off-CPU sample: this plus the state's place in `State::ALL`, plus [`OPEN`] for
/// an interval still open at the end.
const OFF_CPU: u32 = 1 << 20;

/// In `key[0] - OFF_CPU`: the interval was still open at the end (closed at the last event).
const OPEN: u32 = 1 << 10;

/// A sample's key: `[attr or OFF_CPU + state, comm, pid, tid, cpu, stack]`.
type Key = [u32; 6];

/// What a stream says of itself that every window needs: its host and its clock.
#[derive(Clone, Debug, Default)]
pub struct StreamFacts {
    /// The HOSTNAME feature.
    pub host: Option<String>,
    /// The CLOCK_DATA feature.
    pub clock: Option<ClockData>,
    /// Wall-clock minus `CLOCK_MONOTONIC` when the facts were made (ns): the fallback date.
    pub monotonic_to_wall: i128,
}

impl StreamFacts {
    /// Facts of a stream not yet read, the fallback clock read now.
    pub fn now() -> StreamFacts {
        StreamFacts {
            monotonic_to_wall: monotonic_to_wall(),
            ..StreamFacts::default()
        }
    }

    /// Takes in the HEADER_FEATURE records of a batch.
    fn observe(&mut self, batch: &Batch, info: &StreamInfo) {
        for span in batch.spans.iter() {
            if span.kind != RecordType::HEADER_FEATURE.0 {
                continue;
            }
            let Some((id, data)) = feature_record(batch.bytes(span), info.endian) else {
                continue;
            };
            match id {
                feature::HOSTNAME => {
                    self.host = feature_string(data, info.endian)
                        .filter(|h| !h.is_empty())
                        .map(|h| String::from_utf8_lossy(h).into_owned());
                }
                feature::CLOCK_DATA => self.clock = ClockData::parse(data, info.endian),
                _ => {}
            }
        }
    }

    /// The wall-clock time (ns since the epoch) of perf time `time`.
    pub fn wall_ns(&self, time: u64) -> u64 {
        match &self.clock {
            Some(c) => c.wall_ns(time),
            None => u64::try_from((i128::from(time) + self.monotonic_to_wall).max(0))
                .unwrap_or(u64::MAX),
        }
    }
}

/// `CLOCK_REALTIME - CLOCK_MONOTONIC` now, in ns.
fn monotonic_to_wall() -> i128 {
    let read = |clock| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; clock_gettime writes only it.
        unsafe { libc::clock_gettime(clock, &mut ts) };
        i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
    };
    let mono = read(libc::CLOCK_MONOTONIC);
    read(libc::CLOCK_REALTIME) - mono
}

/// One value and one timestamp (perf time) per observation of a sample.
#[derive(Debug, Default, Clone)]
struct Observations {
    values: Vec<i64>,
    times: Vec<u64>,
}

/// A switch-out's key without its attr: comm, pid, tid, stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffKey([u32; 4]);

/// An OTLP profiles request of the samples so far (see the module doc).
#[derive(Debug, Default)]
pub struct Otlp {
    samples: FxHashMap<Key, Observations>,
    stacks: StackTable,
    comms: Comms,
    events: Events,
    sources: NameSources,
    facts: StreamFacts,
    /// The attrs' fixed periods by attr index (0: by frequency; `None`: not seen).
    periods: Vec<Option<u64>>,
    first_time: Option<u64>,
    last_time: u64,
    /// The window this profile is of, perf time `[start, end)`, when pushed in windows.
    window: Option<(u64, u64)>,
    off: OffCpuSamples<OffKey>,
    counted: Counter,
    off_cpu_intervals: Counter,
}

impl Otlp {
    /// An empty profile of a stream whose facts are `facts`.
    pub fn new(facts: StreamFacts) -> Otlp {
        Otlp {
            facts,
            ..Otlp::default()
        }
    }

    /// Counts the intervals closed so far as off-CPU observations, timed at their switch-out.
    fn charge(&mut self) {
        let mut charged = 0;
        for iv in self.off.drain() {
            let Some(OffKey([comm, pid, tid, stack])) = iv.stack else {
                continue;
            };
            let open = if iv.open_at_end { OPEN } else { 0 };
            let kind = OFF_CPU + open + iv.state.index() as u32;
            let o = self
                .samples
                .entry([kind, comm, pid, tid, u32::MAX, stack])
                .or_default();
            o.values.push(iv.duration() as i64);
            o.times.push(iv.start);
            charged += 1;
        }
        self.off_cpu_intervals.add(charged);
    }

    /// The request, encoded.
    pub fn encode(&self, pool: Option<&rayon::ThreadPool>) -> Vec<u8> {
        use prost::Message;
        encode::request(self, pool).encode_to_vec()
    }

    /// The request, as a message.
    pub fn request(&self, pool: Option<&rayon::ThreadPool>) -> proto::ExportProfilesServiceRequest {
        encode::request(self, pool)
    }
}

impl Profile for Otlp {
    fn add(&mut self, batch: &Batch) {
        if self.first_time.is_none() {
            if let Some(info) = StreamInfo::of(batch) {
                self.facts.observe(batch, info);
            }
        }
        let mut off = std::mem::take(&mut self.off);
        let Ok(read) = off.add(batch, self);
        self.off = off;
        self.counted.add(read.samples);
        self.charge();
    }

    fn write(&self, pool: Option<&rayon::ThreadPool>, out: &mut dyn Write) -> std::io::Result<()> {
        out.write_all(&self.encode(pool))
    }

    fn finish(&mut self) {
        self.off.finish();
        self.charge();
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![
            ("samples", self.counted.clone()),
            ("off_cpu_intervals", self.off_cpu_intervals.clone()),
        ]
    }
}

impl SampleSink for Otlp {
    type Key = OffKey;
    type Error = std::convert::Infallible;

    fn sources(&mut self) -> &mut NameSources {
        &mut self.sources
    }

    /// Takes in the sample: its observation; its key is its comm, pid, tid and stack.
    fn sample(&mut self, at: At<'_>, _: Option<&Switch>) -> Result<Option<OffKey>, Self::Error> {
        let (info, s) = (at.info, at.sample);
        self.events.id(info, s.attr);
        let a = usize::from(s.attr);
        if self.periods.len() <= a {
            self.periods.resize(a + 1, None);
        }
        if self.periods[a].is_none() {
            let attr = info.attr(s.attr).filter(|a| !a.freq());
            self.periods[a] = Some(attr.map_or(0, |a| a.sample_period));
        }
        let comm = self.comms.id(at.stacks, s);
        let stack = self.stacks.id(at.frames());
        let o = self
            .samples
            .entry([u32::from(s.attr), comm, s.pid, s.tid, s.cpu, stack])
            .or_default();
        o.values.push(s.period as i64);
        o.times.push(s.time);
        if s.time != 0 {
            self.first_time = Some(self.first_time.map_or(s.time, |t| t.min(s.time)));
            self.last_time = self.last_time.max(s.time);
        }
        Ok(Some(OffKey([comm, s.pid, s.tid, stack])))
    }
}

impl Windowed for Otlp {
    fn next_window(&self) -> Otlp {
        Otlp {
            facts: self.facts.clone(),
            periods: self.periods.clone(),
            counted: self.counted.clone(),
            off_cpu_intervals: self.off_cpu_intervals.clone(),
            ..Otlp::default()
        }
    }

    fn set_window(&mut self, facts: &StreamFacts, start: u64, end: u64) {
        self.facts = facts.clone();
        self.window = Some((start, end));
    }

    fn has_samples(&self) -> bool {
        !self.samples.is_empty()
    }
}

/// `--window`: what makes the output a push of one request per window.
pub const WINDOW_OPTION: StageOption = StageOption {
    key: "window",
    kind: Kind::Duration,
    help: "cut the stream by sample time: one request per window (needs -o URL)",
};

/// The push options both pushing formats take.
pub const PUSH_OPTIONS: [StageOption; 4] = [
    WINDOW_OPTION,
    StageOption {
        key: "queue",
        kind: Kind::Count,
        help: "windows waiting to be sent (default 4); a window that finds the queue full is dropped, counted and named at the end",
    },
    StageOption {
        key: "retries",
        kind: Kind::Count,
        help: "retries of a request that failed, with backoff from 500 ms doubling (default 3)",
    },
    StageOption {
        key: "timeout",
        kind: Kind::Duration,
        help: "each request's time limit, and at the end the time the windows still queued have to be sent (default 10s)",
    },
];

/// The flags of the push options.
pub const PUSH_FLAGS: [Flag; 1] = [Flag::option(
    "window",
    "window",
    "otlp and pyroscope outputs to a URL: one request per DURATION of sample time (10s), so that `perfpipe record -a -g --window 10s -o URL` runs as an agent",
)];

const FLAGS: [Flag; 2] = [
    Flag::stage(
        "otlp",
        "write OpenTelemetry profiles (what -o FILE.otlp.pb and -o http://HOST:PORT/v1development/profiles choose)",
    ),
    PUSH_FLAGS[0],
];

/// How the command line offers the format.
pub const SPEC: FormatSpec = FormatSpec {
    name: crate::offered::OTLP.name,
    help: "OpenTelemetry profiles (an ExportProfilesServiceRequest, v1development) to a file, or POSTed to a collector's /v1development/profiles per --window",
    extensions: crate::offered::OTLP.extensions,
    flags: &FLAGS,
    options: &PUSH_OPTIONS,
    needs: &["symbolize"],
    sets: perfpipe_core::spec::no_settings,
    build: build_otlp,
};

/// A file output (a [`SnapshotSink`]) or a push to a URL (a [`WindowSink`]).
fn build_otlp(
    ctx: &BuildCtx,
    o: &Options,
    path: &std::path::Path,
) -> Result<Box<dyn Sink>, StageError> {
    let profile = Otlp::new(StreamFacts::now());
    match push::Target::otlp(path) {
        Some(target) => Ok(Box::new(WindowSink::build(ctx, o, target, profile)?)),
        None => {
            window::file_output("otlp", o, path)?;
            Ok(Box::new(SnapshotSink::build(ctx, path, profile)?))
        }
    }
}

#[cfg(test)]
mod tests;

//! `pprof`: the output format of pprof profiles (`-o FILE.pb.gz`, `--pprof`), what `go tool
//! pprof`, Pyroscope, Parca and the OpenTelemetry profiles signal read: `profile.proto`
//! (github.com/google/pprof, `proto/profile.proto`) encoded with `prost` and gzip'd.
//!
//! - **Sample types**: two per event, `EVENT_samples`/`count` and the event's period in its unit
//!   (`cpu-clock`/`nanoseconds`); the first event is the default.
//! - **Samples**: one per distinct (event, stack, comm, pid, tid, cpu), labelled `comm`, `pid`,
//!   `tid`, `cpu`, with the sample count and the period sum.
//! - **Off-CPU**: when the stream has a `sched:sched_switch` or `context-switches` event, two more
//!   sample types, `off_cpu_intervals`/`count` and `off_cpu`/`nanoseconds`: each switch-out's
//!   stack with the time until its thread is next switched in
//!   ([`perfpipe_profile::offcpu`]), labelled `state` (`S`, `D`, `R`…) besides `comm`,
//!   `pid`, `tid` (`go tool pprof -sample_index=off_cpu`). Intervals still open at the end are
//!   closed at the last event time and labelled `open_at_end` = `true` as well (leave them out
//!   with `-tagignore open_at_end=true`). When the stream also has `sched:sched_waking` or
//!   `sched:sched_wakeup` samples, an interval some thread woke is labelled `waker` with that
//!   thread's comm (`-tagfocus=waker=write_later`); `swapper` is an interrupt on an idle cpu.
//! - **Mappings**: one per dso, with its file name and **build id** (so that a back end can
//!   symbolize later; the stream's, else read from the file), `memory_start` 0 and
//!   `file_offset` 0: a location's `address` is the file
//!   offset of the frame (`ip - map.start + map.pgoff`, as perf maps it), the same in every process
//!   that maps the file; kernel frames keep their address.
//! - **Locations and functions**: one location per distinct frame, its lines the resolved
//!   functions, innermost inlined function first and the caller last (pprof's order); an address
//!   no symbol covers has no line (pprof then shows the address).
//! - `time_nanos` and `duration_nanos`: the first sample's time and the span to the last, on
//!   perf's clock.
//!
//! Like the folded sink it keeps distinct keys only (memory grows with them, not with samples),
//! names each frame once when it writes, writes at end of input and on SIGUSR2, atomically (a
//! [`SnapshotSink`]); events are named by the kit's rule ([`perfpipe_profile::kit::event`]).

use std::io::Write;

use perfpipe_core::{Batch, Counter};
use prost::Message;
use rustc_hash::FxHashMap;

use perfpipe_core::spec::{Flag, FormatSpec};
use perfpipe_profile::kit::{
    self, At, Comms, Events, NameSources, OffCpuSamples, Profile, SampleSink, SnapshotSink,
    StackTable,
};
use perfpipe_profile::offcpu::{State, Switch};
use perfpipe_profile::symbolize::Resolved;

/// `key[0]` of an off-CPU sample: this plus the state's place in [`State::ALL`], plus [`OPEN`] for
/// intervals still open at the end.
const OFF_CPU: u32 = 1 << 20;

/// In `key[0] - OFF_CPU`: the intervals were still open at the end (closed at the last event).
const OPEN: u32 = 1 << 10;

/// A switch-out's sample key without its attr: comm, pid, tid, stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffKey([u32; 4]);

/// The messages of `profile.proto` that perfpipe writes, field numbers as upstream's.
pub mod proto {
    /// `perftools.profiles.Profile`
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        /// `sample_type`
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        /// `sample`
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        /// `mapping`
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        /// `location`
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        /// `function`
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        /// `string_table`; entry 0 is "".
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        /// `time_nanos`
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        /// `duration_nanos`
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        /// `period_type`
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        /// `period`
        #[prost(int64, tag = "12")]
        pub period: i64,
        /// `comment` (string table indices)
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        /// `default_sample_type`
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    /// `ValueType`
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        /// `type`
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        /// `unit`
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    /// `Sample`
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        /// `location_id`, leaf first.
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        /// `value`, one per sample type.
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        /// `label`
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    /// `Label`
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        /// `key`
        #[prost(int64, tag = "1")]
        pub key: i64,
        /// `str`
        #[prost(int64, tag = "2")]
        pub str: i64,
        /// `num`
        #[prost(int64, tag = "3")]
        pub num: i64,
        /// `num_unit`
        #[prost(int64, tag = "4")]
        pub num_unit: i64,
    }

    /// `Mapping`
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        /// `id`
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// `memory_start`
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        /// `memory_limit`
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        /// `file_offset`
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        /// `filename`
        #[prost(int64, tag = "5")]
        pub filename: i64,
        /// `build_id`
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        /// `has_functions`
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
        /// `has_inline_frames`
        #[prost(bool, tag = "10")]
        pub has_inline_frames: bool,
    }

    /// `Location`
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        /// `id`
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// `mapping_id`
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        /// `address`
        #[prost(uint64, tag = "3")]
        pub address: u64,
        /// `line`: innermost inlined function first, the caller last.
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
    }

    /// `Line`
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        /// `function_id`
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        /// `line`
        #[prost(int64, tag = "2")]
        pub line: i64,
    }

    /// `Function`
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        /// `id`
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// `name`
        #[prost(int64, tag = "2")]
        pub name: i64,
        /// `system_name`
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        /// `filename`
        #[prost(int64, tag = "4")]
        pub filename: i64,
    }
}

/// The strings of a profile, each once.
#[derive(Debug, Default)]
pub(crate) struct Strings {
    pub(crate) table: Vec<String>,
    index: FxHashMap<String, i64>,
}

impl Strings {
    pub(crate) fn new() -> Strings {
        let mut s = Strings::default();
        s.get("");
        s
    }

    pub(crate) fn get(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// A pprof profile of the samples so far.
#[derive(Debug, Default)]
pub struct Pprof {
    /// `[attr, comm, pid, tid, cpu, stack]` → (samples, period).
    samples: FxHashMap<[u32; 6], (u64, u64)>,
    stacks: StackTable,
    comms: Comms,
    events: Events,
    sources: NameSources,
    first_time: Option<u64>,
    last_time: u64,
    counted: Counter,
    distinct: Counter,
    distinct_stacks: Counter,
    off: OffCpuSamples<OffKey>,
    /// Off-CPU intervals counted.
    off_cpu_intervals: Counter,
}

/// The sink of a pprof profile.
pub type PprofSink = SnapshotSink<Pprof>;

impl Profile for Pprof {
    fn add(&mut self, batch: &Batch) {
        let mut off = std::mem::take(&mut self.off);
        let Ok(read) = off.add(batch, self);
        self.off = off;
        self.counted.add(read.samples);
        if self.off.active() {
            self.charge();
        }
    }

    fn write(&self, pool: Option<&rayon::ThreadPool>, out: &mut dyn Write) -> std::io::Result<()> {
        crate::gzip(out, |w| self.encode(pool, w))
    }

    fn finish(&mut self) {
        self.off.finish();
        self.charge();
        self.distinct.set_once(self.samples.len() as u64);
        self.distinct_stacks.set_once(self.stacks.len() as u64);
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![
            ("samples", self.counted.clone()),
            ("profile_samples", self.distinct.clone()),
            ("stacks", self.distinct_stacks.clone()),
            ("off_cpu_intervals", self.off_cpu_intervals.clone()),
        ]
    }
}

impl SampleSink for Pprof {
    type Key = OffKey;
    type Error = std::convert::Infallible;

    fn sources(&mut self) -> &mut NameSources {
        &mut self.sources
    }

    /// Counts the sample in its pprof sample (event, comm, pid, tid, cpu, stack); its key is
    /// its comm, pid, tid and stack.
    fn sample(&mut self, at: At<'_>, _: Option<&Switch>) -> Result<Option<OffKey>, Self::Error> {
        let s = at.sample;
        self.events.id(at.info, s.attr);
        let comm = self.comms.id(at.stacks, s);
        let stack = self.stacks.id(at.frames());
        let v = self
            .samples
            .entry([u32::from(s.attr), comm, s.pid, s.tid, s.cpu, stack])
            .or_default();
        v.0 += 1;
        v.1 += s.period;
        if s.time != 0 {
            self.first_time.get_or_insert(s.time);
            self.last_time = self.last_time.max(s.time);
        }
        Ok(Some(OffKey([comm, s.pid, s.tid, stack])))
    }
}

impl Pprof {
    /// Counts the intervals closed so far as off-CPU samples.
    fn charge(&mut self) {
        let mut charged = 0;
        for iv in self.off.drain() {
            let Some(OffKey([comm, pid, tid, stack])) = iv.stack else {
                continue;
            };
            let state = iv.state.index();
            let open = if iv.open_at_end { OPEN } else { 0 };
            // An off-CPU sample has no cpu: its place holds the waker's comm.
            let waker = iv
                .waker
                .and_then(|w| w.stack)
                .map_or(u32::MAX, |OffKey([comm, ..])| comm);
            let v = self
                .samples
                .entry([OFF_CPU + open + state as u32, comm, pid, tid, waker, stack])
                .or_default();
            v.0 += 1;
            v.1 += iv.duration();
            charged += 1;
        }
        self.off_cpu_intervals.add(charged);
    }

    /// Whether the profile has off-CPU samples types.
    fn has_off_cpu(&self) -> bool {
        self.off.active()
    }
    /// The profile so far without its samples, and the strings of their labels.
    fn profile_head(&self, pool: Option<&rayon::ThreadPool>) -> (proto::Profile, Labels) {
        let mut strings = Strings::new();
        let mut p = proto::Profile::default();
        for kit::Event { name, unit, .. } in self.events.list() {
            p.sample_type.push(proto::ValueType {
                r#type: strings.get(&format!("{name}_samples")),
                unit: strings.get("count"),
            });
            p.sample_type.push(proto::ValueType {
                r#type: strings.get(name),
                unit: strings.get(unit),
            });
        }
        if let Some(kit::Event { name, unit, .. }) = self.events.list().first() {
            p.period_type = Some(proto::ValueType {
                r#type: strings.get(name),
                unit: strings.get(unit),
            });
            p.default_sample_type = p.sample_type[1].r#type;
        }
        if self.has_off_cpu() {
            p.sample_type.push(proto::ValueType {
                r#type: strings.get("off_cpu_intervals"),
                unit: strings.get("count"),
            });
            p.sample_type.push(proto::ValueType {
                r#type: strings.get("off_cpu"),
                unit: strings.get("nanoseconds"),
            });
        }
        let state_key = strings.get("state");
        let waker_key = strings.get("waker");
        let states: Vec<i64> = State::ALL.iter().map(|s| strings.get(s.name())).collect();
        let (open_key, open_true) = (strings.get("open_at_end"), strings.get("true"));
        p.time_nanos = self.first_time.unwrap_or(0) as i64;
        p.duration_nanos = self.last_time.saturating_sub(self.first_time.unwrap_or(0)) as i64;
        let Some(namer) = self.sources.namer(pool) else {
            let keys = ["comm", "pid", "tid", "cpu"].map(|k| strings.get(k));
            p.string_table = strings.table;
            return (
                p,
                Labels {
                    keys,
                    comms: Vec::new(),
                    state_key,
                    states,
                    waker_key,
                    open_key,
                    open_true,
                },
            );
        };
        let used = self.stacks.used_frames();
        let resolved: Vec<Vec<Resolved>> = namer.each_used(&used, |_, r| r);
        let (symbols, dsos) = (&namer.tables().symbols, &namer.tables().dsos);
        // Mappings: one per dso, id = dso id + 1; one more for unmapped addresses.
        let mut mapping_of: FxHashMap<Option<u32>, u64> = FxHashMap::default();
        let mut functions: FxHashMap<(i64, i64), u64> = FxHashMap::default();
        for (i, f) in namer.frames().iter().enumerate() {
            if !used.contains(i as u32) {
                continue;
            }
            let dso = f.query.dso.map(|d| d.0);
            let next = p.mapping.len() as u64 + 1;
            let mapping_id = *mapping_of.entry(dso).or_insert_with(|| {
                let info = f.query.dso.and_then(|d| Some((d, dsos.get(d)?)));
                let (file, build_id) = match &info {
                    Some((id, d)) => {
                        let file = strings.get(&d.name);
                        let build_id = namer.build_id(*id, Some(d));
                        (file, build_id.map_or(0, |b| strings.get(&b)))
                    }
                    None => (strings.get("[unknown]"), 0),
                };
                p.mapping.push(proto::Mapping {
                    id: next,
                    memory_start: 0,
                    memory_limit: u64::MAX,
                    file_offset: 0,
                    filename: file,
                    build_id,
                    has_functions: true,
                    has_inline_frames: symbols.config().inline,
                });
                next
            });
            let mut line = Vec::new();
            for r in &resolved[i] {
                let Some(n) = &r.name else { continue };
                let name = strings.get(n);
                let file = strings.get(&r.dso);
                let next = functions.len() as u64 + 1;
                let id = *functions.entry((name, file)).or_insert_with(|| {
                    p.function.push(proto::Function {
                        id: next,
                        name,
                        system_name: name,
                        filename: file,
                    });
                    next
                });
                line.push(proto::Line {
                    function_id: id,
                    line: 0,
                });
            }
            p.location.push(proto::Location {
                id: i as u64 + 1,
                mapping_id,
                address: kit::names::address(f),
                line,
            });
        }
        let keys = ["comm", "pid", "tid", "cpu"].map(|k| strings.get(k));
        let comms = self.comms.names().iter().map(|c| strings.get(c)).collect();
        p.string_table = strings.table;
        (
            p,
            Labels {
                keys,
                comms,
                state_key,
                states,
                waker_key,
                open_key,
                open_true,
            },
        )
    }

    /// One sample of the profile.
    fn sample(&self, key: &[u32; 6], count: u64, period: u64, labels: &Labels) -> proto::Sample {
        let events = self.events.list().len().max(1);
        let off = key[0].checked_sub(OFF_CPU);
        let ev = match off {
            Some(_) => events,
            None => u16::try_from(key[0])
                .ok()
                .and_then(|attr| self.events.of_attr(attr))
                .unwrap_or(0) as usize,
        };
        let mut value = vec![0i64; 2 * events + if self.has_off_cpu() { 2 } else { 0 }];
        value[2 * ev] = count as i64;
        value[2 * ev + 1] = period as i64;
        let mut label = vec![proto::Label {
            key: labels.keys[0],
            str: labels.comms[key[1] as usize],
            ..Default::default()
        }];
        if let Some(off) = off {
            label.push(proto::Label {
                key: labels.state_key,
                str: labels.states[(off & (OPEN - 1)) as usize],
                ..Default::default()
            });
            if off & OPEN != 0 {
                label.push(proto::Label {
                    key: labels.open_key,
                    str: labels.open_true,
                    ..Default::default()
                });
            }
        }
        if let (Some(_), Some(&waker)) = (off, labels.comms.get(key[4] as usize)) {
            label.push(proto::Label {
                key: labels.waker_key,
                str: waker,
                ..Default::default()
            });
        }
        // pid, tid, and the cpu of an event's sample (an off-CPU sample's is its waker's comm).
        let numbers = if off.is_some() { 2 } else { 3 };
        for (k, &v) in labels.keys[1..].iter().zip(&key[2..5]).take(numbers) {
            if v != u32::MAX {
                label.push(proto::Label {
                    key: *k,
                    num: i64::from(v),
                    ..Default::default()
                });
            }
        }
        proto::Sample {
            location_id: self
                .stacks
                .get(key[5])
                .iter()
                .map(|&f| u64::from(f) + 1)
                .collect(),
            value,
            label,
        }
    }

    /// Encodes the profile: everything but the samples as one message, then each sample as a
    /// field of its own (a protobuf message is the concatenation of its fields), so the samples
    /// are never all held encoded or decoded at once.
    pub fn encode(
        &self,
        pool: Option<&rayon::ThreadPool>,
        out: &mut dyn Write,
    ) -> std::io::Result<()> {
        let (head, labels) = self.profile_head(pool);
        out.write_all(&head.encode_to_vec())?;
        let mut buf = Vec::new();
        for (key, &(count, period)) in &self.samples {
            buf.clear();
            prost::encoding::message::encode(
                2,
                &self.sample(key, count, period, &labels),
                &mut buf,
            );
            out.write_all(&buf)?;
        }
        Ok(())
    }
}

/// The string indices of the labels' keys and of each comm.
struct Labels {
    keys: [i64; 4],
    comms: Vec<i64>,
    /// `state`, and each off-CPU state's name.
    state_key: i64,
    states: Vec<i64>,
    /// `waker`.
    waker_key: i64,
    /// `open_at_end` and `true`.
    open_key: i64,
    open_true: i64,
}

/// How the command line offers the format.
pub const SPEC: FormatSpec = kit::snapshot::format::<Pprof>(
    crate::offered::PPROF.name,
    "a pprof profile (gzip'd profile.proto) for go tool pprof, Pyroscope, Parca: mappings with build ids, labels comm/pid/tid/cpu",
    crate::offered::PPROF.extensions,
    &[Flag::stage(
        "pprof",
        "write a pprof profile (what -o FILE.pb.gz chooses)",
    )],
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::written_gz;

    const MULTIPROC: &[u8] = include_bytes!("../../tests/fixtures/multiproc.pipe.data");

    #[test]
    fn the_profile_counts_every_sample_and_decodes_as_profile_proto() {
        let raw = written_gz(Pprof::default(), MULTIPROC);
        let p = proto::Profile::decode(&raw[..]).unwrap();
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(s(0), "");
        let types: Vec<(&str, &str)> = p
            .sample_type
            .iter()
            .map(|t| (s(t.r#type), s(t.unit)))
            .collect();
        assert_eq!(
            types,
            [("cpu-clock_samples", "count"), ("cpu-clock", "nanoseconds")]
        );
        // fixtures/README.md: 1838 records of which 1664 samples, -c 200000.
        let count: i64 = p.sample.iter().map(|x| x.value[0]).sum();
        let period: i64 = p.sample.iter().map(|x| x.value[1]).sum();
        assert_eq!((count, period), (1664, 1664 * 200_000));
        // Every location id a sample names exists, and every location's mapping.
        let locations: std::collections::HashSet<u64> = p.location.iter().map(|l| l.id).collect();
        let mappings: std::collections::HashSet<u64> = p.mapping.iter().map(|m| m.id).collect();
        assert!(p
            .sample
            .iter()
            .all(|x| x.location_id.iter().all(|l| locations.contains(l))));
        assert!(p.location.iter().all(|l| mappings.contains(&l.mapping_id)));
        assert!(p
            .mapping
            .iter()
            .any(|m| s(m.filename).ends_with("libc.so.6")));
        let labels: std::collections::BTreeSet<&str> = p
            .sample
            .iter()
            .flat_map(|x| x.label.iter().map(|l| s(l.key)))
            .collect();
        // The fixture's samples carry no CPU (sample_type 0x67): no cpu label.
        assert_eq!(
            labels.into_iter().collect::<Vec<_>>(),
            ["comm", "pid", "tid"]
        );
        assert!(p.duration_nanos > 0);
    }
}

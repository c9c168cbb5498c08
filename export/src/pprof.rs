//! `pprof`: the output format of pprof profiles (`-o FILE.pb.gz`, `--pprof`), what `go tool
//! pprof`, Pyroscope, Parca and the OpenTelemetry profiles signal read: `profile.proto`
//! (github.com/google/pprof, `proto/profile.proto`) encoded with `prost` and gzip'd.
//!
//! - **Sample types**: two per event, `EVENT_samples`/`count` and the event's period in its unit
//!   (`cpu-clock`/`nanoseconds`); the first event is the default.
//! - **Samples**: one per distinct (event, stack, comm, pid, tid, cpu), labelled `comm`, `pid`,
//!   `tid`, `cpu`, with the sample count and the period sum.
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
//! names each frame once when it writes, writes at end of input and on SIGUSR2, atomically.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use perfpipe_core::{Batch, Counter, Flow, Sink, StageError};
use prost::Message;
use rayon::prelude::*;
use rustc_hash::FxHashMap;

use perfpipe_core::spec::{BuildCtx, Flag, FormatSpec, Options};
use perfpipe_profile::symbolize::{resolve, Frame, Resolved, Sources, Stacks};
use perfpipe_stream::format::{RecordType, StreamInfo};
use perfpipe_stream::write::atomic::write_file;
use perfpipe_stream::Error;

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
struct Strings {
    table: Vec<String>,
    index: FxHashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        let mut s = Strings::default();
        s.get("");
        s
    }

    fn get(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// The event name and period unit of an attr, for its sample types.
fn event_of(info: &StreamInfo, attr: u16) -> (String, &'static str) {
    let Some(a) = info.attr(attr) else {
        return (format!("event{attr}"), "count");
    };
    // PERF_TYPE_SOFTWARE: cpu-clock (0) and task-clock (1) count nanoseconds.
    match (a.type_, a.config) {
        (1, 0) => ("cpu-clock".into(), "nanoseconds"),
        (1, 1) => ("task-clock".into(), "nanoseconds"),
        (0, 0) => ("cycles".into(), "count"),
        (0, 1) => ("instructions".into(), "count"),
        (t, c) => (format!("event{attr}-type{t}-config{c:#x}"), "count"),
    }
}

/// The sink of a pprof profile.
#[derive(Debug)]
pub struct Pprof {
    path: PathBuf,
    dump: Option<Arc<AtomicBool>>,
    pool: Option<Arc<rayon::ThreadPool>>,
    /// `[attr, comm, pid, tid, cpu, stack]` → (samples, period).
    samples: FxHashMap<[u32; 6], (u64, u64)>,
    /// Distinct stacks (frame ids, leaf first) by id.
    stacks: FxHashMap<Arc<[u32]>, u32>,
    stack_list: Vec<Arc<[u32]>>,
    comms: Vec<String>,
    comm_ids: FxHashMap<String, u32>,
    /// Events by attr index, in the order their samples first came.
    events: Vec<(u16, String, &'static str)>,
    symbols: Option<Sources>,
    first_time: Option<u64>,
    last_time: u64,
    counted: Counter,
    distinct: Counter,
    distinct_stacks: Counter,
    snapshots: Counter,
}

impl Pprof {
    /// A sink writing to `path` (`-`: standard output); names resolved on `pool`; `dump` is a
    /// snapshot request's flag.
    pub fn new(
        path: &Path,
        dump: Option<Arc<AtomicBool>>,
        pool: Option<Arc<rayon::ThreadPool>>,
    ) -> Pprof {
        Pprof {
            path: path.to_path_buf(),
            dump,
            pool,
            samples: FxHashMap::default(),
            stacks: FxHashMap::default(),
            stack_list: Vec::new(),
            comms: Vec::new(),
            comm_ids: FxHashMap::default(),
            events: Vec::new(),
            symbols: None,
            first_time: None,
            last_time: 0,
            counted: Counter::new(),
            distinct: Counter::new(),
            distinct_stacks: Counter::new(),
            snapshots: Counter::new(),
        }
    }

    fn add_batch(&mut self, batch: &Batch) {
        let (Some(stacks), Some(info)) = (batch.annotation::<Stacks>(), StreamInfo::of(batch))
        else {
            return;
        };
        if self.symbols.is_none() {
            self.symbols = Some(stacks.sources());
        }
        if let Some(s) = &mut self.symbols {
            s.host_kernel = stacks.host_kernel;
        }
        let list = stacks.samples();
        let mut counted = 0;
        for span in batch
            .spans
            .iter()
            .filter(|s| s.kind == RecordType::SAMPLE.0)
        {
            let Ok(i) = list.binary_search_by_key(&span.start, |s| s.start) else {
                continue;
            };
            let s = &list[i];
            if !self.events.iter().any(|e| e.0 == s.attr) {
                let (name, unit) = event_of(info, s.attr);
                self.events.push((s.attr, name, unit));
            }
            let comm = s.comm_name();
            let comm = match self.comm_ids.get(comm.as_ref()) {
                Some(&c) => c,
                None => {
                    let c = self.comms.len() as u32;
                    self.comms.push(comm.to_string());
                    self.comm_ids.insert(comm.to_string(), c);
                    c
                }
            };
            let frames = stacks.frames(s);
            let stack = match self.stacks.get(frames) {
                Some(&id) => id,
                None => {
                    let id = self.stack_list.len() as u32;
                    let shared: Arc<[u32]> = frames.into();
                    self.stack_list.push(shared.clone());
                    self.stacks.insert(shared, id);
                    id
                }
            };
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
            counted += 1;
        }
        self.counted.add(counted);
    }

    /// The profile so far without its samples, and the strings of their labels.
    fn profile_head(&self) -> (proto::Profile, Labels) {
        let mut strings = Strings::new();
        let mut p = proto::Profile::default();
        for (_, name, unit) in &self.events {
            p.sample_type.push(proto::ValueType {
                r#type: strings.get(&format!("{name}_samples")),
                unit: strings.get("count"),
            });
            p.sample_type.push(proto::ValueType {
                r#type: strings.get(name),
                unit: strings.get(unit),
            });
        }
        if let Some((_, name, unit)) = self.events.first() {
            p.period_type = Some(proto::ValueType {
                r#type: strings.get(name),
                unit: strings.get(unit),
            });
            p.default_sample_type = p.sample_type[1].r#type;
        }
        p.time_nanos = self.first_time.unwrap_or(0) as i64;
        p.duration_nanos = self.last_time.saturating_sub(self.first_time.unwrap_or(0)) as i64;
        let Some(Sources {
            symbols,
            table,
            dsos,
            host_kernel: host,
        }) = &self.symbols
        else {
            let keys = ["comm", "pid", "tid", "cpu"].map(|k| strings.get(k));
            p.string_table = strings.table;
            return (
                p,
                Labels {
                    keys,
                    comms: Vec::new(),
                },
            );
        };
        let frames = table.snapshot();
        let mut used = vec![false; frames.len()];
        for stack in &self.stack_list {
            for &f in stack.iter() {
                used[f as usize] = true;
            }
        }
        let name = |(i, f): (usize, &Frame)| -> Vec<Resolved> {
            let mut r = Vec::new();
            if used[i] {
                resolve(symbols, *host, f, &mut r);
            }
            r
        };
        let resolved: Vec<Vec<Resolved>> = match &self.pool {
            Some(pool) => pool.install(|| frames.par_iter().enumerate().map(name).collect()),
            None => frames.iter().enumerate().map(name).collect(),
        };
        // Mappings: one per dso, id = dso id + 1; one more for unmapped addresses.
        let mut mapping_of: FxHashMap<Option<u32>, u64> = FxHashMap::default();
        let mut functions: FxHashMap<(i64, i64), u64> = FxHashMap::default();
        for (i, f) in frames.iter().enumerate() {
            if !used[i] {
                continue;
            }
            let dso = f.query.dso.map(|d| d.0);
            let next = p.mapping.len() as u64 + 1;
            let mapping_id = *mapping_of.entry(dso).or_insert_with(|| {
                let info = f.query.dso.and_then(|d| Some((d, dsos.get(d)?)));
                let (file, build_id) = match &info {
                    Some((id, d)) => {
                        // The stream's id, else the file's own (as perf reads it).
                        let bid = d.build_id.as_ref().map(|b| b.to_vec());
                        let bid = bid.or_else(|| symbols.build_id(*id));
                        (
                            strings.get(&d.name),
                            bid.map_or(0, |b| {
                                strings
                                    .get(&b.iter().map(|x| format!("{x:02x}")).collect::<String>())
                            }),
                        )
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
            let address = if f.query.dso.is_some() {
                f.query.rel
            } else {
                f.query.ip
            };
            p.location.push(proto::Location {
                id: i as u64 + 1,
                mapping_id,
                address,
                line,
            });
        }
        let keys = ["comm", "pid", "tid", "cpu"].map(|k| strings.get(k));
        let comms = self.comms.iter().map(|c| strings.get(c)).collect();
        p.string_table = strings.table;
        (p, Labels { keys, comms })
    }

    /// One sample of the profile.
    fn sample(&self, key: &[u32; 6], count: u64, period: u64, labels: &Labels) -> proto::Sample {
        let ev = self
            .events
            .iter()
            .position(|e| u32::from(e.0) == key[0])
            .unwrap_or(0);
        let mut value = vec![0i64; 2 * self.events.len().max(1)];
        value[2 * ev] = count as i64;
        value[2 * ev + 1] = period as i64;
        let mut label = vec![proto::Label {
            key: labels.keys[0],
            str: labels.comms[key[1] as usize],
            ..Default::default()
        }];
        for (k, &v) in labels.keys[1..].iter().zip(&key[2..5]) {
            if v != u32::MAX {
                label.push(proto::Label {
                    key: *k,
                    num: i64::from(v),
                    ..Default::default()
                });
            }
        }
        proto::Sample {
            location_id: self.stack_list[key[5] as usize]
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
    pub fn encode(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let (head, labels) = self.profile_head();
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

    fn write(&self) -> Result<(), Error> {
        write_file(&self.path, |w| {
            let gz = flate2::write::GzEncoder::new(w, flate2::Compression::default());
            let mut buf = std::io::BufWriter::with_capacity(1 << 20, gz);
            self.encode(&mut buf)?;
            buf.into_inner()
                .map_err(|e| e.into_error())?
                .finish()
                .map(|_| ())
        })
    }
}

/// The string indices of the labels' keys and of each comm.
struct Labels {
    keys: [i64; 4],
    comms: Vec<i64>,
}

impl Sink for Pprof {
    fn consume(&mut self, batch: &Batch) -> Result<Flow, StageError> {
        self.add_batch(batch);
        if self
            .dump
            .as_ref()
            .is_some_and(|d| d.swap(false, Ordering::SeqCst))
        {
            self.write()?;
            self.snapshots.add(1);
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self) -> Result<(), StageError> {
        self.distinct.set_once(self.samples.len() as u64);
        self.distinct_stacks.set_once(self.stack_list.len() as u64);
        self.write()?;
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![
            ("samples", self.counted.clone()),
            ("profile_samples", self.distinct.clone()),
            ("stacks", self.distinct_stacks.clone()),
            ("snapshots", self.snapshots.clone()),
        ]
    }
}

/// How the command line offers the format.
pub const SPEC: FormatSpec = FormatSpec {
    name: "pprof",
    help: "a pprof profile (gzip'd profile.proto) for go tool pprof, Pyroscope, Parca: mappings with build ids, labels comm/pid/tid/cpu",
    extensions: &["pb.gz", "pprof"],
    flags: &[Flag::stage(
        "pprof",
        "write a pprof profile (what -o FILE.pb.gz chooses)",
    )],
    options: &[],
    needs: &["symbolize"],
    sets: perfpipe_core::spec::no_settings,
    build: build_sink,
};

fn build_sink(
    ctx: &BuildCtx,
    _: &Options,
    path: &Path,
) -> Result<Box<dyn Sink>, perfpipe_core::StageError> {
    Ok(Box::new(Pprof::new(
        path,
        Some(ctx.requests.subscribe(perfpipe_core::DUMP)),
        Some(ctx.workers.pool()?),
    )))
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use perfpipe_core::harness::{raw_batches, run_stage};

    use super::*;
    use perfpipe_profile::symbolize::SymbolizeConfig;
    use perfpipe_stream::decode::DecodeConfig;

    const MULTIPROC: &[u8] = include_bytes!("../../tests/fixtures/multiproc.pipe.data");

    #[test]
    fn the_profile_counts_every_sample_and_decodes_as_profile_proto() {
        let decoded = run_stage(
            &mut DecodeConfig::default().build(),
            raw_batches(MULTIPROC, &[MULTIPROC.len()], 0),
        )
        .unwrap();
        let batches = run_stage(&mut SymbolizeConfig::default().build(None), decoded).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cpu.pb.gz");
        let mut sink = Pprof::new(&path, None, None);
        for b in &batches {
            assert_eq!(sink.consume(b).unwrap(), Flow::Continue);
        }
        sink.finish().unwrap();
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap())
            .read_to_end(&mut raw)
            .unwrap();
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

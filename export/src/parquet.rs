//! `parquet`: the output format of Parquet tables (`-o FILE.parquet`, or a dataset directory with
//! `--parquet -o DIR/ [--rotate DURATION|SIZE]`), what DuckDB, DataFusion, Spark and Trino query.
//! Behind the `parquet` cargo feature (on in the `perfpipe` binary).
//!
//! One row per sample, written in row groups as the stream goes (memory: one row group of rows,
//! the distinct stacks and the names of their frames). The schema (see `docs/parquet.md`):
//!
//! | column | type | |
//! |---|---|---|
//! | `time` | `UInt64` | perf clock, ns |
//! | `pid`, `tid`, `cpu` | `UInt32` | null when the sample has none |
//! | `comm`, `event` | `Utf8` | the thread's name at the sample, the event's name ([`kit::event::name`]) |
//! | `period` | `UInt64` | the sample's period (the fixed one with `-c`) |
//! | `stack_id` | `UInt64` | the distinct stack (by frame addresses) in this file |
//! | `stack` | `List<Struct<function: Utf8, dso: Utf8, build_id: Utf8?, address: UInt64, inlined: Boolean>>` | root first; `function` named as in folded stacks |
//!
//! A directory output is a Hive-partitioned dataset, `DIR/host=HOST/date=YYYY-MM-DD/part-…`, with
//! a new part every `--rotate` (a duration of wall-clock time or a size of written rows) and on
//! SIGUSR2; each file is written under a temporary name and renamed when complete, so readers
//! of the dataset never see half a file. Many hosts can write into one dataset (part names carry
//! the host, the start time and the process id).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use ::parquet::arrow::ArrowWriter;
use ::parquet::basic::{Compression, ZstdLevel};
use ::parquet::file::properties::WriterProperties;
use arrow_array::builder::{StringBuilder, UInt32Builder, UInt64Builder};
use arrow_array::{
    ArrayRef, BooleanArray, ListArray, RecordBatch, StringArray, StructArray, UInt64Array,
};
use arrow_schema::{DataType, Field, Fields, Schema};
use perfpipe_core::{Batch, Counter, Flow, Sink, StageError};

use perfpipe_core::spec::{
    parse_duration, parse_size, BuildCtx, Flag, FormatSpec, Kind, Options, StageOption,
};
use perfpipe_profile::kit::{
    self, frame_name, Comms, Events, Join, NameSources, Naming, Request, StackTable,
};
use perfpipe_stream::Error;

/// Rows per row group (and per batch handed to the writer).
pub const ROW_GROUP: usize = 1 << 17;

/// When a dataset starts a new part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rotate {
    /// Never (a single file).
    Never,
    /// After this much wall-clock time.
    Every(Duration),
    /// After about this many bytes of rows.
    Size(u64),
}

impl Rotate {
    /// `1m`, `30s` (a duration) or `1G`, `256M` (a size).
    ///
    /// # Errors
    /// A message naming the text.
    pub fn parse(s: &str) -> Result<Rotate, String> {
        if s.ends_with(['K', 'k', 'M', 'G', 'g'])
            || s.bytes().all(|b| b.is_ascii_digit()) && s.len() > 6
        {
            return parse_size(s).map(Rotate::Size);
        }
        parse_duration(s)
            .map(Rotate::Every)
            .map_err(|_| format!("`{s}` is neither a duration (30s, 1m) nor a size (256M, 1G)"))
    }
}

/// One frame's names as the `stack` column holds them (inlined functions expanded, root first).
#[derive(Clone, Debug)]
struct Named {
    function: String,
    dso: Arc<str>,
    build_id: Option<Arc<str>>,
    address: u64,
    inlined: bool,
}

#[derive(Clone, Copy, Debug)]
struct Row {
    time: u64,
    pid: u32,
    tid: u32,
    cpu: u32,
    comm: u32,
    event: u32,
    period: u64,
    stack: u32,
}

/// The sink of Parquet output.
#[derive(Debug)]
pub struct ParquetSink {
    target: Target,
    rotate: Rotate,
    dump: Request,
    pool: Option<Arc<rayon::ThreadPool>>,
    schema: Arc<Schema>,
    open: Option<Part>,
    parts: u64,
    rows: Vec<Row>,
    comms: Comms,
    events: Events,
    stacks: StackTable,
    /// Names of frames by frame id, filled as row groups need them.
    names: Vec<Option<Vec<Named>>>,
    sources: NameSources,
    written: Counter,
    files: Counter,
}

/// Where the rows go.
#[derive(Clone, Debug)]
enum Target {
    File(PathBuf),
    Dataset { dir: PathBuf, host: String },
}

/// The file being written.
struct Part {
    writer: ArrowWriter<File>,
    tmp: PathBuf,
    path: PathBuf,
    opened: Instant,
}

impl std::fmt::Debug for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Part").field("path", &self.path).finish()
    }
}

fn io(op: &'static str, path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn pq(path: &Path, e: parquet::errors::ParquetError) -> Error {
    io("write", path, std::io::Error::other(e))
}

/// The schema of the rows.
pub fn schema() -> Arc<Schema> {
    let frame = Fields::from(vec![
        Field::new("function", DataType::Utf8, false),
        Field::new("dso", DataType::Utf8, false),
        Field::new("build_id", DataType::Utf8, true),
        Field::new("address", DataType::UInt64, false),
        Field::new("inlined", DataType::Boolean, false),
    ]);
    Arc::new(Schema::new(vec![
        Field::new("time", DataType::UInt64, false),
        Field::new("pid", DataType::UInt32, true),
        Field::new("tid", DataType::UInt32, true),
        Field::new("cpu", DataType::UInt32, true),
        Field::new("comm", DataType::Utf8, false),
        Field::new("event", DataType::Utf8, false),
        Field::new("period", DataType::UInt64, false),
        Field::new("stack_id", DataType::UInt64, false),
        Field::new(
            "stack",
            DataType::List(Arc::new(Field::new("item", DataType::Struct(frame), false))),
            false,
        ),
    ]))
}

/// `uname -n`.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// `YYYY-MM-DD` of a time since the epoch (UTC), by the civil-from-days algorithm.
fn date(t: SystemTime) -> String {
    let days = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400) as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

impl ParquetSink {
    /// A sink writing one file `path`, or with `dataset` a partitioned dataset under `path`.
    pub fn new(
        path: &Path,
        dataset: bool,
        rotate: Rotate,
        dump: Option<Arc<AtomicBool>>,
        pool: Option<Arc<rayon::ThreadPool>>,
    ) -> ParquetSink {
        ParquetSink {
            target: if dataset {
                Target::Dataset {
                    dir: path.to_path_buf(),
                    host: hostname(),
                }
            } else {
                Target::File(path.to_path_buf())
            },
            rotate,
            dump: Request::new(dump),
            pool,
            schema: schema(),
            open: None,
            parts: 0,
            rows: Vec::with_capacity(ROW_GROUP),
            comms: Comms::default(),
            events: Events::default(),
            stacks: StackTable::default(),
            names: Vec::new(),
            sources: NameSources::default(),
            written: Counter::new(),
            files: Counter::new(),
        }
    }

    fn add_batch(&mut self, batch: &Batch) -> Result<(), Error> {
        let Some(mut join) = Join::of(batch) else {
            return Ok(());
        };
        let (stacks, Some(info)) = (join.stacks(), join.info()) else {
            return Ok(());
        };
        self.sources.observe(stacks);
        for (_, s) in join.by_ref() {
            self.rows.push(Row {
                time: s.time,
                pid: s.pid,
                tid: s.tid,
                cpu: s.cpu,
                comm: self.comms.id(s),
                event: self.events.id(info, s.attr),
                period: s.period,
                stack: self.stacks.id(stacks.frames(s)),
            });
            if self.rows.len() >= ROW_GROUP {
                self.flush_rows()?;
            }
        }
        Ok(())
    }

    /// Names the frames the pending rows use and not named yet, on the pool.
    fn name_frames(&mut self) {
        let Some(namer) = self.sources.namer(self.pool.as_deref()) else {
            return;
        };
        let frames = namer.frames();
        if self.names.len() < frames.len() {
            self.names.resize(frames.len(), None);
        }
        let mut want: Vec<u32> = Vec::new();
        let mut seen = vec![false; frames.len()];
        for r in &self.rows {
            for &f in self.stacks.get(r.stack) {
                let i = f as usize;
                if self.names[i].is_none() && !std::mem::replace(&mut seen[i], true) {
                    want.push(f);
                }
            }
        }
        let dsos = &namer.sources().dsos;
        let named: Vec<Vec<Named>> = namer.each(&want, |_, frame, resolved| {
            let build_id = frame
                .query
                .dso
                .and_then(|d| namer.build_id(d, dsos.get(d).as_ref()))
                .map(Arc::from);
            resolved
                .iter()
                .rev()
                .map(|r| {
                    let mut function = String::new();
                    frame_name(r, frame.query.ip, Naming::default(), &mut function);
                    Named {
                        function,
                        dso: r.dso.clone(),
                        build_id: build_id.clone(),
                        address: kit::names::address(frame),
                        inlined: r.inlined,
                    }
                })
                .collect()
        });
        for (f, n) in want.into_iter().zip(named) {
            self.names[f as usize] = Some(n);
        }
    }

    fn record_batch(&self) -> Result<RecordBatch, arrow_schema::ArrowError> {
        let n = self.rows.len();
        let mut time = UInt64Builder::with_capacity(n);
        let (mut pid, mut tid, mut cpu) = (
            UInt32Builder::with_capacity(n),
            UInt32Builder::with_capacity(n),
            UInt32Builder::with_capacity(n),
        );
        let mut comm = StringBuilder::new();
        let mut event = StringBuilder::new();
        let mut period = UInt64Builder::with_capacity(n);
        let mut stack_id = UInt64Builder::with_capacity(n);
        let mut offsets: Vec<i32> = Vec::with_capacity(n + 1);
        offsets.push(0);
        let (mut function, mut dso, mut build_id) = (
            StringBuilder::new(),
            StringBuilder::new(),
            StringBuilder::new(),
        );
        let mut address: Vec<u64> = Vec::new();
        let mut inlined: Vec<bool> = Vec::new();
        let opt = |v: u32| (v != u32::MAX).then_some(v);
        for r in &self.rows {
            time.append_value(r.time);
            pid.append_option(opt(r.pid));
            tid.append_option(opt(r.tid));
            cpu.append_option(opt(r.cpu));
            comm.append_value(self.comms.name(r.comm));
            event.append_value(&self.events.get(r.event).name);
            period.append_value(r.period);
            stack_id.append_value(u64::from(r.stack));
            // Root first: the stack's ids are innermost first.
            for &f in self.stacks.get(r.stack).iter().rev() {
                for nm in self.names[f as usize].iter().flatten() {
                    function.append_value(&nm.function);
                    dso.append_value(&nm.dso);
                    build_id.append_option(nm.build_id.as_deref());
                    address.push(nm.address);
                    inlined.push(nm.inlined);
                }
            }
            offsets.push(i32::try_from(address.len()).unwrap_or(i32::MAX));
        }
        let DataType::List(item) = self.schema.field(8).data_type().clone() else {
            unreachable!("stack is a list");
        };
        let DataType::Struct(fields) = item.data_type().clone() else {
            unreachable!("a frame is a struct");
        };
        let frames = StructArray::try_new(
            fields,
            vec![
                Arc::new(function.finish()) as ArrayRef,
                Arc::new(dso.finish()),
                Arc::new(build_id.finish()),
                Arc::new(UInt64Array::from(address)),
                Arc::new(BooleanArray::from(inlined)),
            ],
            None,
        )?;
        let stack = ListArray::try_new(
            item,
            arrow_buffer::OffsetBuffer::new(arrow_buffer::ScalarBuffer::from(offsets)),
            Arc::new(frames),
            None,
        )?;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(time.finish()),
            Arc::new(pid.finish()),
            Arc::new(tid.finish()),
            Arc::new(cpu.finish()),
            Arc::new(comm.finish()) as Arc<StringArray>,
            Arc::new(event.finish()),
            Arc::new(period.finish()),
            Arc::new(stack_id.finish()),
            Arc::new(stack),
        ];
        RecordBatch::try_new(self.schema.clone(), columns)
    }

    fn open_part(&mut self) -> Result<&mut Part, Error> {
        if self.open.is_none() {
            let now = SystemTime::now();
            let path = match &self.target {
                Target::File(p) => p.clone(),
                Target::Dataset { dir, host } => {
                    let d = dir
                        .join(format!("host={host}"))
                        .join(format!("date={}", date(now)));
                    std::fs::create_dir_all(&d).map_err(|e| io("create", &d, e))?;
                    let secs = now
                        .duration_since(SystemTime::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs());
                    d.join(format!(
                        "part-{secs}-{host}-{}-{}.parquet",
                        std::process::id(),
                        self.parts
                    ))
                }
            };
            let name = path
                .file_name()
                .map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
            let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
            let file = File::create(&tmp).map_err(|e| io("create", &tmp, e))?;
            let props = WriterProperties::builder()
                .set_compression(Compression::ZSTD(ZstdLevel::try_new(1).expect("level 1")))
                .set_max_row_group_row_count(Some(ROW_GROUP))
                .build();
            let writer = ArrowWriter::try_new(file, self.schema.clone(), Some(props))
                .map_err(|e| pq(&tmp, e))?;
            self.parts += 1;
            self.open = Some(Part {
                writer,
                tmp,
                path,
                opened: Instant::now(),
            });
        }
        Ok(self.open.as_mut().expect("opened"))
    }

    fn flush_rows(&mut self) -> Result<(), Error> {
        if self.rows.is_empty() {
            return Ok(());
        }
        self.name_frames();
        let batch = self
            .record_batch()
            .map_err(|e| io("write", Path::new("parquet"), std::io::Error::other(e)))?;
        let n = self.rows.len() as u64;
        let part = self.open_part()?;
        part.writer.write(&batch).map_err(|e| pq(&part.tmp, e))?;
        self.rows.clear();
        self.written.add(n);
        let due = match (self.rotate, &self.open) {
            (Rotate::Every(d), Some(p)) => p.opened.elapsed() >= d,
            (Rotate::Size(s), Some(p)) => p.writer.bytes_written() as u64 >= s,
            _ => false,
        };
        if due {
            self.close_part()?;
        }
        Ok(())
    }

    /// Finishes the open file and renames it to its name.
    fn close_part(&mut self) -> Result<(), Error> {
        let Some(part) = self.open.take() else {
            return Ok(());
        };
        let Part {
            writer, tmp, path, ..
        } = part;
        let result = writer
            .close()
            .map_err(|e| pq(&tmp, e))
            .and_then(|_| std::fs::rename(&tmp, &path).map_err(|e| io("rename", &path, e)));
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        } else {
            self.files.add(1);
        }
        result
    }
}

impl Sink for ParquetSink {
    fn consume(&mut self, batch: &Batch) -> Result<Flow, StageError> {
        self.add_batch(batch)?;
        let asked = self.dump.take();
        let timed = matches!((self.rotate, &self.open), (Rotate::Every(d), Some(p)) if p.opened.elapsed() >= d);
        if (asked || timed) && matches!(self.target, Target::Dataset { .. }) {
            self.flush_rows()?;
            self.close_part()?;
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self) -> Result<(), StageError> {
        self.flush_rows()?;
        if self.open.is_none() && matches!(self.target, Target::File(_)) {
            // No samples: still a valid, empty table.
            self.open_part()?;
        }
        self.close_part()?;
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![
            ("rows", self.written.clone()),
            ("files", self.files.clone()),
        ]
    }
}

/// How the command line offers the format.
pub const SPEC: FormatSpec = FormatSpec {
    name: "parquet",
    help: "Parquet rows, one per sample with its stack, for DuckDB, Spark, DataFusion; a directory is a Hive-partitioned dataset (host=…/date=…)",
    extensions: &["parquet"],
    flags: &[
        Flag::stage(
            "parquet",
            "write Parquet (what -o FILE.parquet chooses); with -o DIR/, a partitioned dataset",
        ),
        Flag::option(
            "rotate",
            "rotate",
            "Parquet dataset: a new part file every DURATION (1m) or SIZE (256M), and on SIGUSR2",
        ),
    ],
    options: &[StageOption {
        key: "rotate",
        kind: Kind::Text("DURATION|SIZE"),
        help: "a dataset's new part file every DURATION (30s, 1m) or SIZE (256M, 1G)",
    }],
    needs: &["symbolize"],
    sets: perfpipe_core::spec::no_settings,
    build: build_sink,
};

fn build_sink(
    ctx: &BuildCtx,
    o: &Options,
    path: &Path,
) -> Result<Box<dyn Sink>, perfpipe_core::StageError> {
    let rotate = match o.text("rotate") {
        Some(r) => Rotate::parse(r).map_err(|message| Error::BadOption {
            option: "rotate",
            message,
        })?,
        None => Rotate::Never,
    };
    let text = path.to_string_lossy();
    let dataset = text.ends_with('/') || path.is_dir() || rotate != Rotate::Never;
    if dataset && path.extension().is_some_and(|e| e == "parquet") {
        return Err(Error::BadOption {
            option: "rotate",
            message: format!("{text}: a dataset is a directory (-o DIR/), not a .parquet file"),
        }
        .into());
    }
    if path == Path::new("-") {
        return Err(Error::BadOption {
            option: "parquet",
            message: "Parquet needs a file or a directory, not standard output".into(),
        }
        .into());
    }
    Ok(Box::new(ParquetSink::new(
        path,
        dataset,
        rotate,
        Some(ctx.requests.subscribe(perfpipe_core::DUMP)),
        Some(ctx.workers.pool()?),
    )))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use ::parquet::file::reader::{FileReader, SerializedFileReader};

    use super::*;
    use crate::test_support::symbolized;

    const MULTIPROC: &[u8] = include_bytes!("../../tests/fixtures/multiproc.pipe.data");

    fn batches() -> Vec<Batch> {
        let out = symbolized(MULTIPROC, 16 << 10);
        assert!(out.len() > 2);
        out
    }

    #[test]
    fn a_file_has_a_row_per_sample_and_a_dataset_is_partitioned() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.parquet");
        let mut sink = ParquetSink::new(&path, false, Rotate::Never, None, None);
        for b in &batches() {
            assert_eq!(sink.consume(b).unwrap(), Flow::Continue);
        }
        sink.finish().unwrap();
        let r = SerializedFileReader::new(File::open(&path).unwrap()).unwrap();
        assert_eq!(
            r.metadata().file_metadata().num_rows(),
            1664,
            "fixtures/README.md: 1664 samples"
        );
        let names: Vec<String> = r
            .metadata()
            .file_metadata()
            .schema_descr()
            .columns()
            .iter()
            .map(|c| c.path().string())
            .collect();
        assert!(
            names.contains(&"stack.list.item.function".to_string()),
            "{names:?}"
        );

        let data = dir.path().join("ds");
        let dump = Arc::new(AtomicBool::new(false));
        let mut sink = ParquetSink::new(&data, true, Rotate::Never, Some(dump.clone()), None);
        let bs = batches();
        let (a, b) = bs.split_at(bs.len() / 2);
        for x in a {
            assert_eq!(sink.consume(x).unwrap(), Flow::Continue);
        }
        dump.store(true, Ordering::SeqCst);
        for x in b {
            assert_eq!(sink.consume(x).unwrap(), Flow::Continue);
        }
        sink.finish().unwrap();
        let mut rows = 0;
        let mut files = 0;
        for host in std::fs::read_dir(&data).unwrap() {
            let host = host.unwrap().path();
            assert!(host
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("host="));
            for day in std::fs::read_dir(&host).unwrap() {
                let day = day.unwrap().path();
                assert!(day
                    .file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .starts_with("date=20"));
                for f in std::fs::read_dir(&day).unwrap() {
                    let f = f.unwrap().path();
                    assert!(
                        f.extension().is_some_and(|e| e == "parquet"),
                        "{f:?}: no temporary file left"
                    );
                    let r = SerializedFileReader::new(File::open(&f).unwrap()).unwrap();
                    rows += r.metadata().file_metadata().num_rows();
                    files += 1;
                }
            }
        }
        assert_eq!((rows, files), (1664, 2), "SIGUSR2 starts a new part");
    }

    #[test]
    fn rotation_and_dates_parse() {
        assert_eq!(
            Rotate::parse("1m"),
            Ok(Rotate::Every(Duration::from_secs(60)))
        );
        assert_eq!(Rotate::parse("256M"), Ok(Rotate::Size(256 << 20)));
        assert!(Rotate::parse("soon").is_err());
        assert_eq!(date(SystemTime::UNIX_EPOCH), "1970-01-01");
        assert_eq!(
            date(SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000)),
            "2026-11-18"
        );
    }
}

//! `parquet`: the output format of Parquet tables (`-o FILE.parquet`, or a dataset directory with
//! `--parquet -o DIR/ [--rotate DURATION|SIZE]`), what DuckDB, DataFusion, Spark and Trino query.
//! Behind the `parquet` cargo feature (on in the `perfpipe` binary).
//!
//! One row per sample, written in row groups as the stream goes (memory: the row group being
//! filled and the one being encoded, the distinct stacks and the names of their frames). The
//! schema (see `docs/parquet.md`):
//!
//! | column | type | |
//! |---|---|---|
//! | `time` | `UInt64` | perf clock, ns |
//! | `pid`, `tid`, `cpu` | `UInt32` | null when the sample has none |
//! | `comm`, `event` | `Utf8` | the thread's name at the sample, the event's name ([`kit::event::name`]) |
//! | `period` | `UInt64` | the sample's period (the fixed one with `-c`) |
//! | `stack_id` | `UInt64` | the distinct stack (by frame addresses) in this file |
//! | `stack` | `List<Struct<function: Utf8, dso: Utf8, build_id: Utf8?, address: UInt64, inlined: Boolean>>` | root first; `function` named as in folded stacks; never null, empty when the callchain holds only context markers |
//! | `off_cpu_end` | `UInt64` | an off-CPU interval's row: when the thread was switched in again; null for a sample |
//! | `off_cpu_state` | `Utf8` | an off-CPU interval's row: the state it left the cpu in (`S`, `D`, `R`, `S\|D`…); null for a sample |
//! | `off_cpu_open_at_end` | `Boolean` | an off-CPU interval's row: still open at the end of the stream, closed at its last event time; null for a sample |
//! | `off_cpu_waker_tid`, `off_cpu_waker_comm` | `UInt32`, `Utf8` | an off-CPU interval's row: the thread whose wakeup ended it (`sched_waking`/`sched_wakeup` samples); null when none was recorded or the waker's tid is unknown (-1: a thread that was exiting), and for a sample |
//! | `tp` | `Map<Utf8, Utf8>` | a tracepoint sample's fields by name, from the recording's format files, as `perf script -F trace` shows them; null for other rows |
//!
//! A stream with switches (`sched:sched_switch`, or `context-switches` with `--switch-events`)
//! also gets one row per off-CPU interval ([`perfpipe_profile::offcpu`]): `time` is the
//! switch-out, `period` the ns off the cpu, `stack` and `event` the switch-out sample's, `cpu`
//! null; an interval still open at the end is closed at the last event time, and its
//! `off_cpu_open_at_end` is true.
//!
//! A directory output is a Hive-partitioned dataset, `DIR/host=HOST/date=YYYY-MM-DD/part-…`, with
//! a new part every `--rotate` (a duration of wall-clock time from the part's first row, or a size
//! of written rows) and on SIGUSR2; each file is written under a temporary name and renamed when
//! complete, so readers of the dataset never see half a file. The partition is the recording's,
//! read from the stream: `host` is its HOSTNAME feature (this machine's name only for a stream
//! without one), `date` the UTC day of its samples when the stream dates them (the CLOCK_DATA
//! feature of `perf record -k CLOCKID`; a part never spans two days), else the day the part is
//! written. Many hosts, or collectors, can write into one dataset: part names carry the start
//! time, the writing machine and its process id.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use ::parquet::arrow::arrow_writer::{
    compute_leaves, ArrowColumnChunk, ArrowRowGroupWriterFactory,
};
use ::parquet::arrow::ArrowWriter;
use ::parquet::basic::{Compression, ZstdLevel};
use ::parquet::errors::ParquetError;
use ::parquet::file::properties::WriterProperties;
use ::parquet::file::writer::SerializedFileWriter;
use arrow_array::builder::{StringBuilder, UInt32Builder, UInt64Builder};
use arrow_array::{
    Array, ArrayRef, BooleanArray, ListArray, RecordBatch, StringArray, StructArray, UInt32Array,
    UInt32DictionaryArray, UInt64Array,
};
use arrow_schema::{DataType, Field, Fields, Schema};
use perfpipe_core::{Batch, Counter, Flow, Sink, StageError};
use rustc_hash::FxHashMap;

use perfpipe_core::spec::{
    parse_duration, parse_size, BuildCtx, Flag, FormatSpec, Kind, Options, StageOption,
};
use perfpipe_profile::kit::{
    self, frame_name, At, Comms, Events, NameSources, Naming, OffCpuSamples, Request, SampleSink,
    StackTable,
};
use perfpipe_profile::offcpu::{Interval, State, Switch};
use perfpipe_stream::format::features::{feature_record, feature_string, ClockData};
use perfpipe_stream::format::{feature, RecordType, StreamInfo};
use perfpipe_stream::Error;

use crate::day_date;

/// A switch-out's row without its interval: comm, event, stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffKey([u32; 3]);

/// `Row::tp` of a row without tracepoint fields.
const NO_TP: (u32, u32) = (0, u32::MAX);

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
    /// An off-CPU interval's end (0: a sample's row).
    end: u64,
    /// Its state.
    state: Option<State>,
    /// It was still open at the end (closed at the last event time).
    open_at_end: bool,
    /// Its waker's tid and comm (`u32::MAX`: none).
    waker: (u32, u32),
    /// A tracepoint sample's fields: `(start, len)` in [`ParquetSink::tp_values`]; `len`
    /// `u32::MAX` for a row without (null).
    tp: (u32, u32),
}

/// How one attr's tracepoint samples become the `tp` column.
#[derive(Debug)]
struct TpFormat {
    format: perfpipe_stream::format::tracing::EventFormat,
    /// The event's own fields (not the common ones), with their names shared by every row.
    fields: Vec<(perfpipe_stream::format::tracing::FieldFormat, Arc<str>)>,
}

/// The `tp` column's formats, per attr, for the (attrs, tracing data) they were computed for.
#[derive(Debug, Default)]
struct TpFormats {
    by_attr: Vec<Option<TpFormat>>,
    computed_for: (usize, usize),
}

impl TpFormats {
    fn of(&mut self, info: &StreamInfo, attr: usize) -> Option<&TpFormat> {
        let key = (
            info.attrs.len(),
            info.tracing.as_ref().map_or(0, |t| Arc::as_ptr(t) as usize),
        );
        if key != self.computed_for {
            self.computed_for = key;
            self.by_attr = (0..info.attrs.len())
                .map(|i| {
                    let ev = info.tracepoint(i)?;
                    let fields = ev
                        .fields
                        .iter()
                        .filter(|f| !f.common)
                        .map(|f| (f.clone(), Arc::from(f.name.as_str())))
                        .collect();
                    Some(TpFormat {
                        format: ev.clone(),
                        fields,
                    })
                })
                .collect();
        }
        self.by_attr.get(attr)?.as_ref()
    }
}

/// A tracepoint field's value as `perf script -F trace` shows it: the print format's text for a
/// flags or symbolic field (`prev_state` → `S`, `R+`), a number in decimal, a string up to its
/// NUL, other arrays as hex; `None` when the payload is too short for it.
fn tp_value(
    format: &perfpipe_stream::format::tracing::EventFormat,
    f: &perfpipe_stream::format::tracing::FieldFormat,
    raw: &[u8],
    e: perfpipe_stream::format::Endian,
) -> Option<String> {
    use perfpipe_stream::format::tracing::Value;
    let v = f.read(raw, e)?;
    let number = match v {
        Value::Int(v) => v as u64,
        Value::UInt(v) => v,
        Value::Str(b) => return Some(String::from_utf8_lossy(b).into_owned()),
        Value::Bytes(b) => return Some(b.iter().map(|b| format!("{b:02x}")).collect()),
    };
    if let Some(t) = format.render.text(&f.name, number) {
        return Some(t);
    }
    Some(match v {
        Value::Int(v) => v.to_string(),
        _ => number.to_string(),
    })
}

/// The `stack` column of one row group, built a frame and a stack at a time: each frame's names
/// (its inlined functions expanded, root first) are entries numbered once, and each stack the
/// list of its entries' numbers, which every row of that stack copies.
#[derive(Debug, Default)]
struct StackEntries {
    /// Frame id → its entries `(first, count)`.
    of_frame: FxHashMap<u32, (u32, u32)>,
    /// Stack id → its entries' numbers, root first: `(start, len)` in `lists`.
    of_stack: FxHashMap<u32, (u32, u32)>,
    lists: Vec<u32>,
    function: StringBuilder,
    dso: StringBuilder,
    build_id: StringBuilder,
    address: Vec<u64>,
    inlined: Vec<bool>,
    has_build_id: Vec<bool>,
}

impl StackEntries {
    /// The entries of stack `id`, root first.
    fn of(&mut self, id: u32, stacks: &StackTable, names: &[Option<Vec<Named>>]) -> &[u32] {
        let (start, len) = match self.of_stack.get(&id) {
            Some(&at) => at,
            None => {
                let start = self.lists.len();
                // Root first: the stack's ids are innermost first.
                for &f in stacks.get(id).iter().rev() {
                    let (first, count) = self.of_frame(f, names);
                    self.lists.extend(first..first + count);
                }
                let at = (start as u32, (self.lists.len() - start) as u32);
                self.of_stack.insert(id, at);
                at
            }
        };
        &self.lists[start as usize..(start + len) as usize]
    }

    fn of_frame(&mut self, f: u32, names: &[Option<Vec<Named>>]) -> (u32, u32) {
        if let Some(&at) = self.of_frame.get(&f) {
            return at;
        }
        let first = self.address.len() as u32;
        for nm in names[f as usize].iter().flatten() {
            self.function.append_value(&nm.function);
            self.dso.append_value(&nm.dso);
            self.build_id
                .append_value(nm.build_id.as_deref().unwrap_or(""));
            self.has_build_id.push(nm.build_id.is_some());
            self.address.push(nm.address);
            self.inlined.push(nm.inlined);
        }
        let at = (first, self.address.len() as u32 - first);
        self.of_frame.insert(f, at);
        at
    }

    /// The frame struct's columns for rows whose entries are `keys`, in the order of
    /// [`schema`]'s frame fields.
    fn columns(mut self, keys: Vec<u32>) -> Result<Vec<ArrayRef>, arrow_schema::ArrowError> {
        let address: UInt64Array = keys.iter().map(|&k| self.address[k as usize]).collect();
        let inlined: BooleanArray = keys
            .iter()
            .map(|&k| Some(self.inlined[k as usize]))
            .collect();
        let with_build_id: arrow_buffer::NullBuffer = keys
            .iter()
            .map(|&k| self.has_build_id[k as usize])
            .collect();
        let keys = arrow_buffer::ScalarBuffer::from(keys);
        let build_id_keys = UInt32Array::new(keys.clone(), Some(with_build_id));
        let keys = UInt32Array::new(keys, None);
        Ok(vec![
            Arc::new(UInt32DictionaryArray::try_new(
                keys.clone(),
                Arc::new(self.function.finish()),
            )?),
            Arc::new(UInt32DictionaryArray::try_new(
                keys,
                Arc::new(self.dso.finish()),
            )?),
            Arc::new(UInt32DictionaryArray::try_new(
                build_id_keys,
                Arc::new(self.build_id.finish()),
            )?),
            Arc::new(address),
            Arc::new(inlined),
        ])
    }
}

/// `fields` with each text field a dictionary of `UInt32` keys: the types of
/// [`StackEntries::columns`].
fn dictionary_fields(fields: &Fields) -> Fields {
    fields
        .iter()
        .map(|f| match f.data_type() {
            DataType::Utf8 => Field::new(
                f.name(),
                DataType::Dictionary(Box::new(DataType::UInt32), Box::new(DataType::Utf8)),
                f.is_nullable(),
            ),
            _ => f.as_ref().clone(),
        })
        .collect()
}

/// How the columns are written: zstd level 1, `row_group` rows a group. Not as dictionaries:
/// `time` (every value differs, so a dictionary is built and dropped in every row group: the
/// file is 14 % larger with one) and the frames' `address` (as large with one, 5 % more CPU).
/// No statistics for the frames' fields: a query cannot skip a page by the range of the
/// functions of its stacks' lists, and computing them compared every name of every frame.
fn writer_properties(row_group: usize) -> WriterProperties {
    let frame = |leaf: &str| {
        ::parquet::schema::types::ColumnPath::new(
            ["stack", "list", "item", leaf].map(String::from).to_vec(),
        )
    };
    let mut props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1).expect("level 1")))
        .set_max_row_group_row_count(Some(row_group))
        .set_column_dictionary_enabled("time".into(), false)
        .set_column_dictionary_enabled(frame("address"), false);
    for leaf in ["function", "dso", "build_id", "address", "inlined"] {
        props = props.set_column_statistics_enabled(
            frame(leaf),
            ::parquet::file::properties::EnabledStatistics::None,
        );
    }
    props.build()
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
    /// Rows a row group ([`ROW_GROUP`]).
    row_group: usize,
    comms: Comms,
    events: Events,
    stacks: StackTable,
    /// Names of frames by frame id, filled as row groups need them.
    names: Vec<Option<Vec<Named>>>,
    /// The stacks whose frames are named: ids below this.
    named_stacks: usize,
    sources: NameSources,
    written: Counter,
    files: Counter,
    /// The stream's HOSTNAME and CLOCK_DATA features, as their records arrive.
    stream_host: Option<String>,
    clock: Option<ClockData>,
    /// The day (since the epoch, UTC) of the rows of the part being filled, for a dated stream.
    day: Option<i64>,
    /// When the first row of the part being filled arrived (what `--rotate DURATION` counts from).
    since: Option<Instant>,
    off: OffCpuSamples<OffKey>,
    off_cpu_rows: Counter,
    /// The `tp` column: each attr's tracepoint format, and the pending rows' fields.
    tp_formats: TpFormats,
    tp_values: Vec<(Arc<str>, Option<String>)>,
}

/// Where the rows go.
#[derive(Clone, Debug)]
enum Target {
    File(PathBuf),
    /// A dataset under `dir`, written by the machine `writer` (in the part names).
    Dataset {
        dir: PathBuf,
        writer: String,
    },
}

/// The file being written: its row groups are encoded column by column on the worker pool
/// ([`ParquetSink::flush_rows`]), in the bytes `ArrowWriter` writes. A row group is encoded
/// while the sink builds the next one, and appended when that one is due or the file closes.
struct Part {
    writer: SerializedFileWriter<File>,
    columns: ArrowRowGroupWriterFactory,
    /// Rows written into the file.
    rows: u64,
    /// The row group being encoded, and its rows.
    encoding: Option<(Encoding, u64)>,
    tmp: PathBuf,
    path: PathBuf,
}

/// A row group's column chunks, as the pool hands them back.
type Encoding = std::sync::mpsc::Receiver<Result<Vec<ArrowColumnChunk>, ParquetError>>;

impl Part {
    /// Appends the row group being encoded, once it is.
    fn append_encoded(&mut self) -> Result<(), ParquetError> {
        let Some((chunks, rows)) = self.encoding.take() else {
            return Ok(());
        };
        let chunks = chunks
            .recv()
            .map_err(|_| ParquetError::General("a row group's encoding was lost".into()))??;
        let mut group = self.writer.next_row_group()?;
        for chunk in chunks {
            chunk.append_to_row_group(&mut group)?;
        }
        group.close()?;
        self.rows += rows;
        Ok(())
    }

    /// Starts encoding `batch` as the next row group, on `pool` (here without one), after
    /// appending the one before.
    fn encode(
        &mut self,
        batch: RecordBatch,
        pool: Option<&rayon::ThreadPool>,
    ) -> Result<(), ParquetError> {
        self.append_encoded()?;
        let index = self.writer.flushed_row_groups().len();
        let writers = self.columns.create_column_writers(index)?;
        let rows = batch.num_rows() as u64;
        let (done, chunks) = std::sync::mpsc::channel();
        match pool {
            Some(pool) => pool.spawn(move || {
                let _ = done.send(encode_row_group(&batch, writers, true));
            }),
            None => {
                let _ = done.send(encode_row_group(&batch, writers, false));
            }
        }
        self.encoding = Some((chunks, rows));
        Ok(())
    }
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

fn pq(path: &Path, e: ParquetError) -> Error {
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
        Field::new("off_cpu_end", DataType::UInt64, true),
        Field::new("off_cpu_state", DataType::Utf8, true),
        Field::new("off_cpu_open_at_end", DataType::Boolean, true),
        Field::new("off_cpu_waker_tid", DataType::UInt32, true),
        Field::new("off_cpu_waker_comm", DataType::Utf8, true),
        Field::new_map(
            "tp",
            "entries",
            Field::new("key", DataType::Utf8, false),
            Field::new("value", DataType::Utf8, true),
            false,
            true,
        ),
    ]))
}

/// `uname -n`.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Days since the epoch (UTC) of a time in ns since the epoch.
fn day_of_ns(ns: u64) -> i64 {
    (ns / 86_400_000_000_000) as i64
}

/// `YYYY-MM-DD` of a time since the epoch (UTC).
fn date(t: SystemTime) -> String {
    let ns = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    day_date(day_of_ns(ns))
}

/// A partition value as a directory name holds it: the characters Hive escapes (`/`, `=`, `%`,
/// `:`, …, control characters) as `%XX`, which Spark and DuckDB decode; empty is Hive's null.
fn partition_value(v: &str) -> String {
    if v.is_empty() {
        return "__HIVE_DEFAULT_PARTITION__".into();
    }
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        if c.is_control() || "\"#%'*/:=?\\{[]^".contains(c) {
            let mut b = [0; 4];
            for byte in c.encode_utf8(&mut b).bytes() {
                out.push_str(&format!("%{byte:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
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
                    writer: hostname(),
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
            rows: Vec::new(),
            row_group: ROW_GROUP,
            comms: Comms::default(),
            events: Events::default(),
            stacks: StackTable::default(),
            names: Vec::new(),
            named_stacks: 0,
            sources: NameSources::default(),
            written: Counter::new(),
            files: Counter::new(),
            stream_host: None,
            clock: None,
            day: None,
            since: None,
            off: OffCpuSamples::default(),
            off_cpu_rows: Counter::new(),
            tp_formats: TpFormats::default(),
            tp_values: Vec::new(),
        }
    }

    /// Takes in a HEADER_FEATURE record: the stream's hostname and clock reference. Another
    /// hostname ends the part being filled (its rows are of the host before).
    fn note_feature(&mut self, rec: &[u8], info: &StreamInfo) -> Result<(), Error> {
        let Some((id, data)) = feature_record(rec, info.endian) else {
            return Ok(());
        };
        match id {
            feature::HOSTNAME => {
                let name = feature_string(data, info.endian)
                    .filter(|h| !h.is_empty())
                    .map(|h| String::from_utf8_lossy(h).into_owned());
                let filling = !self.rows.is_empty() || self.open.is_some();
                if filling && name.is_some() && self.stream_host != name {
                    self.flush_rows()?;
                    self.close_part()?;
                }
                self.stream_host = name;
            }
            feature::CLOCK_DATA => self.clock = ClockData::parse(data, info.endian),
            _ => {}
        }
        Ok(())
    }

    fn add_batch(&mut self, batch: &Batch) -> Result<(), Error> {
        let dataset = matches!(self.target, Target::Dataset { .. });
        if let (true, Some(info)) = (dataset, StreamInfo::of(batch)) {
            // A pipe's feature records come before its samples.
            for span in &batch.spans {
                if span.kind == RecordType::HEADER_FEATURE.0 {
                    self.note_feature(batch.bytes(span), info)?;
                }
            }
        }
        let mut off = std::mem::take(&mut self.off);
        let read = off
            .add(batch, self)
            .and_then(|_| self.interval_rows(off.closed()));
        self.off = off;
        read
    }

    /// Rows for the off-CPU intervals closed so far, taken out of `intervals`.
    fn interval_rows(&mut self, intervals: &mut Vec<Interval<OffKey>>) -> Result<(), Error> {
        // Counted once for all the intervals with a stack, each of which makes a row.
        let rows = intervals.iter().filter(|iv| iv.stack.is_some()).count();
        self.off_cpu_rows.add(rows as u64);
        for iv in intervals.drain(..) {
            let Some(OffKey([comm, event, stack])) = iv.stack else {
                continue;
            };
            self.rows.push(Row {
                time: iv.start,
                pid: iv.pid,
                tid: iv.tid,
                cpu: u32::MAX,
                comm,
                event,
                period: iv.duration(),
                stack,
                end: iv.end,
                state: Some(iv.state),
                open_at_end: iv.open_at_end,
                waker: iv
                    .waker
                    .and_then(|w| Some((w.tid, w.stack?.0[0])))
                    .unwrap_or((u32::MAX, u32::MAX)),
                tp: NO_TP,
            });
            if self.rows.len() >= self.row_group {
                self.flush_rows()?;
            }
        }
        Ok(())
    }

    /// The row of one sample.
    fn sample_row(
        &mut self,
        s: &perfpipe_profile::symbolize::StackSample,
        rec: &perfpipe_stream::format::Record<'_>,
        info: &StreamInfo,
        stacks: &perfpipe_profile::symbolize::Stacks,
        dataset: bool,
    ) -> Result<(), Error> {
        let tp = self.tp_fields(rec, info, s.attr);
        if let (true, Some(clock)) = (dataset, self.clock) {
            // A part holds one day: a sample of another day ends it.
            let day = day_of_ns(clock.wall_ns(s.time));
            if self.day.is_some_and(|d| d != day) {
                self.flush_rows()?;
                self.close_part()?;
            }
            self.day = Some(day);
        }
        self.since.get_or_insert_with(Instant::now);
        let row = Row {
            time: s.time,
            pid: s.pid,
            tid: s.tid,
            cpu: s.cpu,
            comm: self.comms.id(stacks, s),
            event: self.events.id(info, s.attr),
            period: s.period,
            stack: self.stacks.id(stacks.frames(s)),
            end: 0,
            state: None,
            open_at_end: false,
            waker: (u32::MAX, u32::MAX),
            tp,
        };
        self.rows.push(row);
        if self.rows.len() >= self.row_group {
            self.flush_rows()?;
        }
        Ok(())
    }

    /// A tracepoint sample's fields, appended to `tp_values`: `(start, len)`, or [`NO_TP`].
    fn tp_fields(
        &mut self,
        rec: &perfpipe_stream::format::Record<'_>,
        info: &StreamInfo,
        attr: u16,
    ) -> (u32, u32) {
        let Some(tp) = self.tp_formats.of(info, usize::from(attr)) else {
            return NO_TP;
        };
        let Some(raw) = rec.sample().and_then(|s| s.raw()) else {
            return NO_TP;
        };
        let start = self.tp_values.len();
        for (f, name) in &tp.fields {
            let v = tp_value(&tp.format, f, raw, info.endian);
            self.tp_values.push((name.clone(), v));
        }
        (start as u32, (self.tp_values.len() - start) as u32)
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
        // Only the stacks made since the last row group can hold frames not named yet.
        let mut want: Vec<u32> = Vec::new();
        for id in self.named_stacks..self.stacks.len() {
            let frames = self.stacks.get(id as u32).iter();
            want.extend(frames.filter(|&&f| self.names[f as usize].is_none()));
        }
        want.sort_unstable();
        want.dedup();
        self.named_stacks = self.stacks.len();
        let dsos = &namer.tables().dsos;
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

    /// The pending rows as Arrow columns. The text columns a row repeats (`comm`, `event` and the
    /// stack's `function`, `dso`, `build_id`) are dictionary arrays: a row holds keys, each name
    /// is built once per row group, and a stack's entries once per row group too. The writer
    /// encodes a dictionary array as the text it stands for: the file is the same.
    fn record_batch(&self) -> Result<RecordBatch, arrow_schema::ArrowError> {
        let n = self.rows.len();
        let mut time = UInt64Builder::with_capacity(n);
        let (mut pid, mut tid, mut cpu) = (
            UInt32Builder::with_capacity(n),
            UInt32Builder::with_capacity(n),
            UInt32Builder::with_capacity(n),
        );
        let mut comm: Vec<u32> = Vec::with_capacity(n);
        let mut event: Vec<u32> = Vec::with_capacity(n);
        let mut period = UInt64Builder::with_capacity(n);
        let mut stack_id = UInt64Builder::with_capacity(n);
        let mut offsets: Vec<i32> = Vec::with_capacity(n + 1);
        offsets.push(0);
        let mut entries = StackEntries::default();
        let mut keys: Vec<u32> = Vec::new();
        let mut off_end = UInt64Builder::with_capacity(n);
        let mut off_state = StringBuilder::new();
        let mut off_open: Vec<Option<bool>> = Vec::with_capacity(n);
        let mut waker_tid = UInt32Builder::with_capacity(n);
        let mut waker_comm = StringBuilder::new();
        let mut tp =
            arrow_array::builder::MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
        let opt = |v: u32| (v != u32::MAX).then_some(v);
        // Rows of off-CPU intervals, of tracepoint samples: without them, their columns are null.
        let off_rows = self.rows.iter().any(|r| r.state.is_some());
        let tp_rows = self.rows.iter().any(|r| r.tp != NO_TP);
        for r in &self.rows {
            if off_rows {
                off_end.append_option((r.end != 0).then_some(r.end));
                off_state.append_option(r.state.map(State::name));
                off_open.push(r.state.is_some().then_some(r.open_at_end));
                waker_tid.append_option(opt(r.waker.0));
                waker_comm.append_option(opt(r.waker.1).map(|c| self.comms.name(c)));
            }
            if tp_rows {
                let from = r.tp.0 as usize;
                let fields =
                    (r.tp.1 != u32::MAX).then(|| &self.tp_values[from..][..r.tp.1 as usize]);
                for (k, v) in fields.into_iter().flatten() {
                    tp.keys().append_value(k);
                    tp.values().append_option(v.as_deref());
                }
                tp.append(fields.is_some())?;
            }
            time.append_value(r.time);
            pid.append_option(opt(r.pid));
            tid.append_option(opt(r.tid));
            cpu.append_option(opt(r.cpu));
            comm.push(r.comm);
            event.push(r.event);
            period.append_value(r.period);
            stack_id.append_value(u64::from(r.stack));
            keys.extend_from_slice(entries.of(r.stack, &self.stacks, &self.names));
            offsets.push(i32::try_from(keys.len()).unwrap_or(i32::MAX));
        }
        let DataType::List(item) = self.schema.field(8).data_type().clone() else {
            unreachable!("stack is a list");
        };
        let DataType::Struct(fields) = item.data_type().clone() else {
            unreachable!("a frame is a struct");
        };
        let frames =
            StructArray::try_new(dictionary_fields(&fields), entries.columns(keys)?, None)?;
        let item = Arc::new(Field::new(
            item.name(),
            frames.data_type().clone(),
            item.is_nullable(),
        ));
        let stack = ListArray::try_new(
            item,
            arrow_buffer::OffsetBuffer::new(arrow_buffer::ScalarBuffer::from(offsets)),
            Arc::new(frames),
            None,
        )?;
        let comm_names = StringArray::from_iter_values(self.comms.names());
        let event_names =
            StringArray::from_iter_values(self.events.list().iter().map(|e| e.name.as_str()));
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(time.finish()),
            Arc::new(pid.finish()),
            Arc::new(tid.finish()),
            Arc::new(cpu.finish()),
            Arc::new(UInt32DictionaryArray::try_new(
                UInt32Array::from(comm),
                Arc::new(comm_names),
            )?),
            Arc::new(UInt32DictionaryArray::try_new(
                UInt32Array::from(event),
                Arc::new(event_names),
            )?),
            Arc::new(period.finish()),
            Arc::new(stack_id.finish()),
            Arc::new(stack),
            Arc::new(off_end.finish()),
            Arc::new(off_state.finish()),
            Arc::new(BooleanArray::from(off_open)),
            Arc::new(waker_tid.finish()),
            Arc::new(waker_comm.finish()),
            Arc::new(tp.finish()),
        ];
        // The columns only off-CPU intervals (9 to 13) and tracepoint samples (14) fill.
        let all_null = (9..14)
            .filter(|_| !off_rows)
            .chain((!tp_rows).then_some(14));
        for i in all_null {
            columns[i] = arrow_array::new_null_array(self.schema.field(i).data_type(), n);
        }
        let schema = Schema::new(
            self.schema
                .fields()
                .iter()
                .zip(&columns)
                .map(|(f, c)| {
                    Field::new(f.name(), c.data_type().clone(), f.is_nullable())
                        .with_metadata(f.metadata().clone())
                })
                .collect::<Vec<_>>(),
        );
        RecordBatch::try_new(Arc::new(schema), columns)
    }

    fn open_part(&mut self) -> Result<&mut Part, Error> {
        if self.open.is_none() {
            let now = SystemTime::now();
            let path = match &self.target {
                Target::File(p) => p.clone(),
                Target::Dataset { dir, writer } => {
                    let host = self.stream_host.clone().unwrap_or_else(|| writer.clone());
                    let day = self.day.map_or_else(|| date(now), day_date);
                    let d = dir
                        .join(format!("host={}", partition_value(&host)))
                        .join(format!("date={day}"));
                    std::fs::create_dir_all(&d).map_err(|e| io("create", &d, e))?;
                    let secs = now
                        .duration_since(SystemTime::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs());
                    d.join(format!(
                        "part-{secs}-{}-{}-{}.parquet",
                        partition_value(writer),
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
            let props = writer_properties(self.row_group);
            // `ArrowWriter` makes the file's schema and metadata (the Arrow schema among them);
            // its row groups are written here, a column per task.
            let (writer, columns) = ArrowWriter::try_new(file, self.schema.clone(), Some(props))
                .and_then(ArrowWriter::into_serialized_writer)
                .map_err(|e| pq(&tmp, e))?;
            self.parts += 1;
            self.open = Some(Part {
                writer,
                columns,
                rows: 0,
                encoding: None,
                tmp,
                path,
            });
        }
        Ok(self.open.as_mut().expect("opened"))
    }

    /// Writes the pending rows as a row group, its columns encoded on the pool.
    fn flush_rows(&mut self) -> Result<(), Error> {
        if self.rows.is_empty() {
            return Ok(());
        }
        self.name_frames();
        let batch = self
            .record_batch()
            .map_err(|e| io("write", Path::new("parquet"), std::io::Error::other(e)))?;
        let n = self.rows.len() as u64;
        let pool = self.pool.clone();
        let part = self.open_part()?;
        part.encode(batch, pool.as_deref())
            .map_err(|e| pq(&part.tmp, e))?;
        self.rows.clear();
        self.tp_values.clear();
        self.written.add(n);
        let due = match (self.rotate, &mut self.open) {
            (Rotate::Every(d), Some(_)) => self.since.is_some_and(|t| t.elapsed() >= d),
            (Rotate::Size(s), Some(p)) => {
                p.append_encoded().map_err(|e| pq(&p.tmp, e))?;
                p.writer.bytes_written() as u64 >= s
            }
            _ => false,
        };
        if due {
            self.close_part()?;
        }
        Ok(())
    }

    /// `--rotate SIZE`: whether the rows written and those pending (at the size a row of the
    /// part has taken so far) reach the size; a part with no row group written yet writes its
    /// rows to learn it.
    fn size_reached(&mut self, size: u64) -> Result<bool, Error> {
        if let Some(p) = &mut self.open {
            p.append_encoded().map_err(|e| pq(&p.tmp, e))?;
        }
        match &self.open {
            Some(p) if p.rows > 0 => {
                let written = p.writer.bytes_written() as u64;
                Ok(written + self.rows.len() as u64 * written.div_ceil(p.rows) >= size)
            }
            _ => {
                self.flush_rows()?;
                Ok(false)
            }
        }
    }

    /// Finishes the open file and renames it to its name.
    fn close_part(&mut self) -> Result<(), Error> {
        self.since = None;
        let Some(mut part) = self.open.take() else {
            return Ok(());
        };
        let appended = part.append_encoded();
        let Part {
            writer, tmp, path, ..
        } = part;
        let result = appended
            .and_then(|()| writer.close().map(|_| ()))
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

impl SampleSink for ParquetSink {
    type Key = OffKey;
    type Error = Error;

    fn sources(&mut self) -> &mut NameSources {
        &mut self.sources
    }

    /// The sample's row; its key, when the stream has switches, its comm, event and stack.
    fn sample(&mut self, at: At<'_>, switch: Option<&Switch>) -> Result<Option<OffKey>, Error> {
        let dataset = matches!(self.target, Target::Dataset { .. });
        let (s, info, stacks) = (at.sample, at.info, at.stacks);
        self.sample_row(s, &at.record(), info, stacks, dataset)?;
        if switch.is_none() {
            return Ok(None);
        }
        Ok(Some(OffKey([
            self.comms.id(stacks, s),
            self.events.id(info, s.attr),
            self.stacks.id(stacks.frames(s)),
        ])))
    }

    fn round(&mut self, intervals: &mut Vec<Interval<OffKey>>) -> Result<(), Error> {
        self.interval_rows(intervals)
    }
}

impl Sink for ParquetSink {
    fn consume(&mut self, batch: &Batch) -> Result<Flow, StageError> {
        self.add_batch(batch)?;
        let asked = self.dump.take();
        if matches!(self.target, Target::Dataset { .. }) {
            let timed = matches!((self.rotate, self.since), (Rotate::Every(d), Some(t)) if t.elapsed() >= d);
            if asked || timed {
                self.flush_rows()?;
                self.close_part()?;
            } else if let Rotate::Size(size) = self.rotate {
                if self.size_reached(size)? {
                    self.flush_rows()?;
                    self.close_part()?;
                }
            }
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self) -> Result<(), StageError> {
        self.off.finish();
        let mut off = std::mem::take(&mut self.off);
        let rows = self.interval_rows(off.closed());
        self.off = off;
        rows?;
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
            ("off_cpu_rows", self.off_cpu_rows.clone()),
        ]
    }
}

/// The column chunks of `batch` as a row group: its leaf columns encoded one per task (on the
/// current pool when `parallel`), each column writer alone, as `ArrowWriter` encodes them one
/// after another: the same bytes.
fn encode_row_group(
    batch: &RecordBatch,
    writers: Vec<::parquet::arrow::arrow_writer::ArrowColumnWriter>,
    parallel: bool,
) -> Result<Vec<ArrowColumnChunk>, ParquetError> {
    use rayon::prelude::*;
    let mut writers = writers.into_iter();
    let mut work = Vec::new();
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        for leaf in compute_leaves(field, column)? {
            let writer = writers.next().expect("a writer per leaf column");
            work.push((writer, leaf));
        }
    }
    let encode = |(mut w, leaf): (::parquet::arrow::arrow_writer::ArrowColumnWriter, _)| {
        w.write(&leaf)?;
        w.close()
    };
    if parallel {
        work.into_par_iter().map(encode).collect()
    } else {
        work.into_iter().map(encode).collect()
    }
}

/// How the command line offers the format.
pub const SPEC: FormatSpec = FormatSpec {
    name: crate::offered::PARQUET.name,
    help: "Parquet rows, one per sample with its stack, for DuckDB, Spark, DataFusion; a directory is a Hive-partitioned dataset (host=…/date=…)",
    extensions: crate::offered::PARQUET.extensions,
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
        batches_of(MULTIPROC)
    }

    fn batches_of(stream: &[u8]) -> Vec<Batch> {
        let out = symbolized(stream, 16 << 10);
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

    /// Row groups encoded on the pool while the next is built are the bytes of row groups
    /// encoded one after another on the sink's thread, in order, every row in its place.
    #[test]
    fn row_groups_encoded_on_the_pool_are_the_bytes_of_those_encoded_in_turn() {
        use ::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
        let dir = tempfile::tempdir().unwrap();
        let pool = Arc::new(
            rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .unwrap(),
        );
        let write = |name: &str, pool: Option<Arc<rayon::ThreadPool>>| {
            let path = dir.path().join(name);
            let mut sink = ParquetSink::new(&path, false, Rotate::Never, None, pool);
            sink.row_group = 100;
            for b in &batches() {
                assert_eq!(sink.consume(b).unwrap(), Flow::Continue);
            }
            sink.finish().unwrap();
            path
        };
        let (pooled, in_turn) = (
            write("pool.parquet", Some(pool)),
            write("turn.parquet", None),
        );
        let bytes = std::fs::read(&pooled).unwrap();
        assert!(bytes == std::fs::read(in_turn).unwrap(), "the same bytes");
        let reader =
            ParquetRecordBatchReaderBuilder::try_new(File::open(&pooled).unwrap()).unwrap();
        let groups = reader.metadata().num_row_groups();
        let mut times = Vec::new();
        for batch in reader.build().unwrap() {
            let batch = batch.unwrap();
            let time = batch.column_by_name("time").unwrap();
            let time = time.as_any().downcast_ref::<UInt64Array>().unwrap();
            times.extend(time.values().iter().copied());
        }
        let expected: Vec<u64> = batches()
            .iter()
            .filter_map(|b| b.annotation::<perfpipe_profile::symbolize::Stacks>())
            .flat_map(|s| s.samples().iter().map(|x| x.time).collect::<Vec<_>>())
            .collect();
        assert_eq!(times, expected, "every row in its place");
        assert_eq!(groups, 17, "1664 rows in row groups of 100");
    }

    /// The fixture with its HOSTNAME and CLOCK_DATA feature records replaced by `features`, put
    /// where the first kernel record was.
    fn with_features(features: &[(u32, Vec<u8>)]) -> Vec<u8> {
        use perfpipe_stream::format::{build, Endian};
        let e = Endian::Little;
        let mut out = MULTIPROC[..16].to_vec();
        let mut put = false;
        let mut at = 16;
        while at < MULTIPROC.len() {
            let rec = &MULTIPROC[at..];
            let size = usize::from(e.u16(rec, 6).unwrap());
            let kind = e.u32(rec, 0).unwrap();
            at += size;
            if kind < 64 && !put {
                for (id, data) in features {
                    build::feature(&mut out, e, *id, data);
                }
                put = true;
            }
            let id = feature_record(&rec[..size], e).map(|(id, _)| id);
            if kind == RecordType::HEADER_FEATURE.0
                && matches!(id, Some(feature::HOSTNAME | feature::CLOCK_DATA))
            {
                continue;
            }
            out.extend_from_slice(&rec[..size]);
        }
        out
    }

    /// `(host=…/date=… directory, rows)` of every part of a dataset, sorted.
    fn parts(dir: &Path) -> Vec<(String, i64)> {
        let mut out = Vec::new();
        for host in std::fs::read_dir(dir).unwrap() {
            let host = host.unwrap().path();
            for day in std::fs::read_dir(&host).unwrap() {
                let day = day.unwrap().path();
                for f in std::fs::read_dir(&day).unwrap() {
                    let f = f.unwrap().path();
                    let r = SerializedFileReader::new(File::open(&f).unwrap()).unwrap();
                    let name = day
                        .strip_prefix(dir)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned();
                    out.push((name, r.metadata().file_metadata().num_rows()));
                }
            }
        }
        out.sort();
        out
    }

    fn write_dataset(dir: &Path, batches: &[Batch], rotate: Rotate) {
        let mut sink = ParquetSink::new(dir, true, rotate, None, None);
        for b in batches {
            assert_eq!(sink.consume(b).unwrap(), Flow::Continue);
        }
        sink.finish().unwrap();
    }

    /// The partition is the recording's: its HOSTNAME (escaped as Hive escapes), the UTC day of
    /// each sample by its CLOCK_DATA (a part never spans midnight); without them, this machine's
    /// name and the day written.
    #[test]
    fn partitions_come_from_the_stream() {
        let e = perfpipe_stream::format::Endian::Little;
        let times: Vec<u64> = batches()
            .iter()
            .filter_map(|b| b.annotation::<perfpipe_profile::symbolize::Stacks>())
            .flat_map(|s| s.samples().iter().map(|x| x.time).collect::<Vec<_>>())
            .collect();
        assert_eq!(times.len(), 1664);
        // Midnight, 2021-03-05 UTC, falls on the 1000th sample.
        let midnight = 18_691 * 86_400 * 1_000_000_000;
        let clock = ClockData {
            version: 1,
            clockid: 1,
            tod_ns: midnight,
            clockid_ns: times[1000],
        };
        let before = times.iter().filter(|&&t| t < times[1000]).count() as i64;
        let mut name = 16u32.to_le_bytes().to_vec();
        name.extend_from_slice(b"db/1:other\0\0\0\0\0\0");
        let stream = with_features(&[
            (feature::HOSTNAME, name),
            (feature::CLOCK_DATA, clock.to_bytes(e)),
        ]);
        let dir = tempfile::tempdir().unwrap();
        write_dataset(dir.path(), &batches_of(&stream), Rotate::Never);
        // A pipe's samples are in time order only per CPU: around midnight a day may come back,
        // with a part of its own each time.
        let mut rows = std::collections::BTreeMap::<String, i64>::new();
        for (partition, n) in parts(dir.path()) {
            *rows.entry(partition).or_default() += n;
        }
        assert_eq!(
            rows.into_iter().collect::<Vec<_>>(),
            [
                ("host=db%2F1%3Aother/date=2021-03-04".to_string(), before),
                (
                    "host=db%2F1%3Aother/date=2021-03-05".to_string(),
                    1664 - before
                ),
            ]
        );

        let bare = with_features(&[]);
        let dir = tempfile::tempdir().unwrap();
        let t0 = date(SystemTime::now());
        write_dataset(dir.path(), &batches_of(&bare), Rotate::Never);
        let got = parts(dir.path());
        let t1 = date(SystemTime::now());
        let host = partition_value(&hostname());
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(
            [t0, t1]
                .iter()
                .any(|d| got[0].0 == format!("host={host}/date={d}")),
            "{got:?}"
        );
        assert_eq!(got[0].1, 1664);
    }

    /// `--rotate SIZE` counts the rows the writer holds, so a small stream makes parts too;
    /// `--rotate DURATION` counts from the part's first row.
    #[test]
    fn rotation_makes_parts_of_small_streams() {
        let bs = batches();
        let dir = tempfile::tempdir().unwrap();
        write_dataset(dir.path(), &bs, Rotate::Size(1));
        let got = parts(dir.path());
        let with_rows = bs
            .iter()
            .filter(|b| {
                b.annotation::<perfpipe_profile::symbolize::Stacks>()
                    .is_some_and(|s| !s.samples().is_empty())
            })
            .count();
        assert_eq!(got.len(), with_rows, "a part per batch with samples");
        assert_eq!(got.iter().map(|p| p.1).sum::<i64>(), 1664);

        let dir = tempfile::tempdir().unwrap();
        write_dataset(dir.path(), &bs, Rotate::Every(Duration::ZERO));
        let got = parts(dir.path());
        assert!(got.len() > 1, "{got:?}");
        assert_eq!(got.iter().map(|p| p.1).sum::<i64>(), 1664);
    }

    #[test]
    fn partition_values_are_escaped_as_hive_does() {
        assert_eq!(partition_value("web-01.example"), "web-01.example");
        assert_eq!(partition_value("a/b=c%"), "a%2Fb%3Dc%25");
        assert_eq!(partition_value("x\ny"), "x%0Ay");
        assert_eq!(partition_value(""), "__HIVE_DEFAULT_PARTITION__");
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
        assert_eq!(day_date(18_691), "2021-03-05");
        assert_eq!(
            date(SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000)),
            "2026-11-18"
        );
    }
}

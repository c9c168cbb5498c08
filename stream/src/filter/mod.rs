//! `filter`: keeps the SAMPLE records for which an expression holds; every other record (MMAP,
//! COMM, FORK, EXIT, attrs, features…) passes, so the output still resolves symbols.
//!
//! The language (see [`expr`]): predicates `field op value` and `field in [v, …]` over `pid`,
//! `tid`, `comm`, `cpu`, `time`, `event`, `ip`, `cpumode`, `period` and `dso`, joined with `&&`,
//! `||`, `!` and parentheses:
//!
//! ```text
//! comm == "gz*" && cpu in [0, 1]        time >= 12345.5s && time < +2s       !(cpumode == kernel)
//! ```
//!
//! - Strings (`comm`, `event`, `dso`) are quoted globs (`*`, `?`, `[..]`), compared with `==`/`!=`.
//! - `time` values take a unit (`ns` by default, `us`, `ms`, `s`): absolute timestamps as perf script
//!   prints them (`time >= 12345.678s`); with a `+`, relative to the first sample (`time < +1.5s`).
//! - `comm` is the thread's name at the sample's time, tracked from COMM and FORK records (see
//!   [`crate::model::threads`]); `event` the attr's event name by the rule the profiles name events
//!   with ([`crate::model::events::name`]: `cpu-clock`, `sched:sched_switch`); `dso` the file
//!   mapped at the sample's ip, from the [`crate::model::machine`] model (`[unknown]` when none,
//!   `[kernel.kallsyms]` for the kernel).
//! - `tp.NAME` is the field `NAME` of a tracepoint sample's raw payload, read at the offset, size
//!   and signedness its format file gives (from the recording's tracing data, see
//!   [`crate::format::tracing`]): `tp.prev_state == "D" && tp.prev_comm == "kworker*"`. Numbers
//!   compare with numbers; a string is a glob on a string field, or on the text the print format
//!   gives a flags or symbolic field (`prev_state`: `S`, `D`, `R`, `R+` for preempted, `I`…), as
//!   `perf script -F trace` prints it. A payload shorter than the field makes the predicate false
//!   and is counted (`tracepoint_fields_short`).
//! - A predicate on a field the sample does not carry (`cpu` without `PERF_SAMPLE_CPU`, `tp.x` on
//!   a sample that is not a tracepoint's or whose tracepoint has no field `x`) is false.
//!
//! The expression is parsed once when the stage is built and compiled once per attr (fields become
//! byte offsets of that attr's sample layout, `event` a constant), again only when an attr or the
//! tracing data arrives. Batches with at least [`FilterConfig::parallel_min`] samples are evaluated on
//! rayon's pool, unless the expression uses `dso` (whose map state changes record by record).
//!
//! **Order**: input order, records only removed. **Buffering**: none, except with `comm`: perf
//! sorts records by time before it names a sample's thread, and a COMM (on one cpu) may come later
//! in the stream than a sample (on another) that it names. FINISHED_ROUND guarantees that records
//! of round N+2 are later than every record of round N, so a batch is held (whole, not copied)
//! until two more FINISHED_ROUNDs have arrived, or until
//! [`HOLD_MAX_BYTES`](crate::model::hold::HOLD_MAX_BYTES) are held, then decided (the stream
//! model's [`Hold`], as `aslr`, `symbolize` and `unwind` hold batches). `dso` follows the maps in
//! stream order (the [`crate::model::machine`] model). **EOF**: held batches are decided and
//! emitted.

pub mod expr;
mod program;
mod shorthand;

use std::sync::Arc;

use perfpipe_core::{Batch, Counter, Flow, Out, Span, Stage, StageError};
use rayon::prelude::*;

use crate::format::{Record, RecordType, StreamInfo};
use crate::model::events;
use crate::model::hold::Hold;
use crate::model::machine::Machine;
use crate::model::threads::Threads;
pub use expr::{parse, Expr, ExprError, Field};
use perfpipe_core::spec::{BuildCtx, Flag, Kind, Options, StageOption, StageSpec};
use program::{Cx, Prog};
pub use shorthand::{cpu_list, id_list, name_list, time_range};

/// Samples per batch from which evaluation goes to rayon's pool by default: never, as measured on
/// the 416 MB benchmark recording (see docs/filtering.md): a compiled predicate costs a
/// few ns per sample, less than handing a 256 KiB batch's ~2,700 samples to other threads.
pub const PARALLEL_MIN_DEFAULT: usize = usize::MAX;

/// Configuration of a `filter` stage: a parsed expression. Plain data; no I/O.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterConfig {
    /// The expression samples must satisfy.
    pub expr: Expr,
    /// Samples per batch from which evaluation runs on rayon's pool (`usize::MAX`: never).
    pub parallel_min: usize,
}

impl FilterConfig {
    /// Parses `--filter EXPR`.
    ///
    /// # Errors
    /// [`ExprError`] with the column and a hint.
    pub fn parse(src: &str) -> Result<FilterConfig, ExprError> {
        Ok(FilterConfig::new(parse(src)?))
    }

    /// A filter for an expression built elsewhere (the shorthand flags).
    pub fn new(expr: Expr) -> FilterConfig {
        FilterConfig {
            expr,
            parallel_min: PARALLEL_MIN_DEFAULT,
        }
    }

    /// Builds the stage.
    pub fn build(&self) -> Filter {
        let uses_dso = self.expr.uses(Field::Dso);
        Filter {
            expr: self.expr.clone(),
            parallel_min: if uses_dso {
                usize::MAX
            } else {
                self.parallel_min
            },
            track_comm: self.expr.uses(Field::Comm),
            machine: uses_dso.then(Machine::new),
            threads: Threads::default(),
            first_time: None,
            held: Hold::default(),
            progs: Vec::new(),
            compiled_for: (usize::MAX, 0),
            kept: Counter::new(),
            dropped: Counter::new(),
            short: Counter::new(),
            pool: None,
        }
    }
}

const FILTER_HELP: &str =
    "keep the samples for which EXPR holds, e.g. 'comm == \"gz*\" && cpu == 0' (repeatable)";

/// How `filter` appears on the command line: `--filter EXPR`, and perf script's shorthands
/// `--pid`, `--tid`, `--comm`, `--cpu`, `--time`, each a filter stage of its own where it stands.
pub const SPEC: StageSpec = StageSpec {
    name: "filter",
    help: FILTER_HELP,
    flags: &[
        Flag::stage_value("filter", "expr", FILTER_HELP),
        Flag::stage_value(
            "pid",
            "pid",
            "keep the samples of these processes: PID[,PID...] (perf script --pid)",
        ),
        Flag::stage_value(
            "tid",
            "tid",
            "keep the samples of these threads: TID[,TID...] (perf script --tid)",
        ),
        Flag::stage_value(
            "comm",
            "comm",
            "keep the samples of threads with these names: COMM[,COMM...] (perf script --comm)",
        ),
        Flag::stage_value(
            "cpu",
            "cpu",
            "keep the samples taken on these cpus: 0-2,5 (perf script --cpu)",
        ),
        Flag::stage_value(
            "time",
            "time",
            "keep the samples in START,END (seconds as perf script prints them; ends included)",
        ),
        Flag::option(
            "filter-parallel-min",
            "parallel-min",
            "evaluate batches with at least N samples on the worker pool (default: never; see docs/filtering.md)",
        ),
    ],
    options: &[
        StageOption {
            key: "expr",
            kind: Kind::Text("EXPR"),
            help: "the expression samples must satisfy",
        },
        StageOption {
            key: "pid",
            kind: Kind::Text("LIST"),
            help: "process ids, comma-separated",
        },
        StageOption {
            key: "tid",
            kind: Kind::Text("LIST"),
            help: "thread ids, comma-separated",
        },
        StageOption {
            key: "comm",
            kind: Kind::Text("LIST"),
            help: "exact thread names, comma-separated",
        },
        StageOption {
            key: "cpu",
            kind: Kind::Text("LIST"),
            help: "cpus: 0-2,5",
        },
        StageOption {
            key: "time",
            kind: Kind::Text("START,END"),
            help: "a time range in seconds, ends included",
        },
        StageOption {
            key: "parallel-min",
            kind: Kind::Count,
            help: "samples per batch from which evaluation runs on the worker pool",
        },
    ],
    build: build_stage,
    needs: &["decompress"],
};

/// Builds a filter stage from its options: the conjunction of the expression and the shorthands
/// given (one of them, from a flag).
fn build_stage(
    ctx: &BuildCtx,
    o: &Options,
) -> Result<Box<dyn perfpipe_core::Stage>, perfpipe_core::StageError> {
    let mut parts = Vec::new();
    if let Some(e) = o.text("expr") {
        parts.push(parse(e)?);
    }
    if let Some(v) = o.text("pid") {
        parts.push(id_list(Field::Pid, v)?);
    }
    if let Some(v) = o.text("tid") {
        parts.push(id_list(Field::Tid, v)?);
    }
    if let Some(v) = o.text("comm") {
        parts.push(name_list(v)?);
    }
    if let Some(v) = o.text("cpu") {
        parts.push(cpu_list(v)?);
    }
    if let Some(v) = o.text("time") {
        parts.push(time_range(v)?);
    }
    let expr = parts
        .into_iter()
        .reduce(|a, b| Expr::And(Box::new(a), Box::new(b)))
        .ok_or_else(|| crate::Error::BadOption {
            option: "--filter",
            message: "needs an expression".into(),
        })?;
    let mut config = FilterConfig::new(expr);
    if let Some(n) = o.count("parallel-min") {
        config.parallel_min = usize::try_from(n).unwrap_or(usize::MAX);
    }
    let filter = config.build();
    Ok(Box::new(if config.parallel_min < usize::MAX {
        filter.on_pool(ctx.workers.pool()?)
    } else {
        filter
    }))
}

/// The running `filter` stage.
#[derive(Debug)]
pub struct Filter {
    expr: Expr,
    parallel_min: usize,
    track_comm: bool,
    machine: Option<Machine>,
    threads: Threads,
    /// Time of the first sample, for relative times.
    first_time: Option<u64>,
    /// Batches held for a `comm` filter.
    held: Hold,
    /// The program for each attr index; the last entry is for samples of an unknown attr.
    progs: Vec<Prog>,
    /// (number of attrs, tracing data) the programs were compiled for.
    compiled_for: (usize, usize),
    kept: Counter,
    dropped: Counter,
    /// Tracepoint fields read past the end of a sample's raw payload (the predicate is false).
    short: Counter,
    /// Where batches of at least `parallel_min` samples are evaluated (rayon's global pool if
    /// none).
    pool: Option<std::sync::Arc<rayon::ThreadPool>>,
}

impl Filter {
    /// The same filter, evaluating large batches on `pool`.
    pub fn on_pool(self, pool: std::sync::Arc<rayon::ThreadPool>) -> Filter {
        Filter {
            pool: Some(pool),
            ..self
        }
    }
}

impl Filter {
    fn compile(&mut self, info: &StreamInfo) {
        let key = (
            info.attrs.len(),
            info.tracing.as_ref().map_or(0, |t| Arc::as_ptr(t) as usize),
        );
        if key == self.compiled_for {
            return;
        }
        self.progs = info
            .attrs
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let event = events::name(info, i as u16);
                Prog::compile(
                    &self.expr,
                    Some(&a.layout),
                    Some(&event),
                    info.tracepoint(i),
                )
            })
            .collect();
        self.progs.push(Prog::compile(&self.expr, None, None, None));
        self.compiled_for = key;
    }

    fn prog(&self, tag: u32) -> &Prog {
        let last = self.progs.len() - 1;
        &self.progs[(tag as usize).min(last)]
    }

    /// Takes in a side-band record (thread names; not maps); notes the first sample's time.
    fn observe(&mut self, span: &Span, rec: &Record<'_>, info: &StreamInfo) {
        match RecordType(span.kind) {
            RecordType::SAMPLE if self.first_time.is_none() => {
                if let Some(t) = rec.sample().and_then(|s| s.time()) {
                    self.first_time = Some(*info.first_sample_time.get_or_init(|| t));
                }
            }
            RecordType::COMM | RecordType::FORK if self.track_comm => self.threads.observe(rec),
            _ => {}
        }
    }

    fn observe_all(&mut self, batch: &Batch, info: &StreamInfo) {
        for span in &batch.spans {
            if span.kind != RecordType::SAMPLE.0 || self.first_time.is_none() {
                self.observe(span, &info.record(batch, span), info);
            }
        }
    }

    fn cx<'a>(&'a self, info: &StreamInfo) -> Cx<'a> {
        Cx {
            threads: &self.threads,
            first_time: self.first_time.unwrap_or(0),
            endian: info.endian,
            machine: self.machine.as_ref(),
            short: &self.short,
        }
    }

    /// Applies the maps and decides in stream order, for `dso`, whose maps change record by record.
    fn in_order(&mut self, batch: &Batch, info: &StreamInfo) -> Vec<Span> {
        let mut kept = Vec::with_capacity(batch.spans.len());
        for span in &batch.spans {
            let rec = info.record(batch, span);
            if span.kind != RecordType::SAMPLE.0 {
                if let Some(m) = &mut self.machine {
                    m.apply(&rec);
                }
            } else {
                self.compile(info);
                if !self.prog(span.tag).eval(rec.bytes, &self.cx(info)) {
                    continue;
                }
            }
            kept.push(*span);
        }
        kept
    }

    /// Decides the samples of an observed batch, on rayon's pool when it has enough of them.
    fn decide(&mut self, batch: &Batch, info: &StreamInfo, samples: usize) -> Vec<Span> {
        self.compile(info);
        let cx = self.cx(info);
        let keep = |span: &Span| {
            span.kind != RecordType::SAMPLE.0 || self.prog(span.tag).eval(batch.bytes(span), &cx)
        };
        if samples < self.parallel_min {
            return batch.spans.iter().filter(|s| keep(s)).copied().collect();
        }
        let par = || -> Vec<bool> {
            batch
                .spans
                .par_iter()
                .with_min_len(1024)
                .map(keep)
                .collect()
        };
        let keep = match &self.pool {
            Some(pool) => pool.install(par),
            None => par(),
        };
        batch
            .spans
            .iter()
            .zip(keep)
            .filter_map(|(s, k)| k.then_some(*s))
            .collect()
    }

    /// Filters an observed batch and emits it.
    fn emit(&mut self, batch: Batch, out: &mut Out<'_>) {
        let Some(info) = StreamInfo::shared(&batch) else {
            out.push(batch);
            return;
        };
        let samples = count_samples(&batch);
        let kept = if self.machine.is_some() {
            self.in_order(&batch, &info)
        } else {
            self.decide(&batch, &info, samples)
        };
        self.finish(batch, kept, samples, out);
    }

    fn finish(&self, mut batch: Batch, kept: Vec<Span>, samples: usize, out: &mut Out<'_>) {
        let dropped = batch.spans.len() - kept.len();
        self.kept.add((samples - dropped) as u64);
        self.dropped.add(dropped as u64);
        batch.spans = kept;
        out.push_or_recycle(batch);
    }
}

impl Filter {
    /// The index in `batch.spans` of the first sample the expression selects, decided at once
    /// (a `comm` predicate is not held for later COMM records): for a stage that uses an
    /// expression as a trigger, as `ring --ring-trigger` does. Observes the batch like
    /// [`Stage::process`], so call it on every batch, in order.
    pub fn first_match(&mut self, batch: &Batch) -> Option<usize> {
        let info = StreamInfo::shared(batch)?;
        self.observe_all(batch, &info);
        let kept = if self.machine.is_some() {
            self.in_order(batch, &info)
        } else {
            self.decide(batch, &info, 0)
        };
        let first = kept.iter().find(|s| s.kind == RecordType::SAMPLE.0)?;
        batch.spans.iter().position(|s| s == first)
    }
}

fn count_samples(batch: &Batch) -> usize {
    batch
        .spans
        .iter()
        .filter(|s| s.kind == RecordType::SAMPLE.0)
        .count()
}

impl Stage for Filter {
    fn process(&mut self, batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        let Some(info) = StreamInfo::shared(&batch) else {
            // Not decoded perf data (cannot happen after `decode`): pass it, behind held batches.
            if self.held.is_empty() {
                out.push(batch);
            } else {
                self.held.push(batch, 0);
            }
            return Ok(Flow::Continue);
        };
        self.observe_all(&batch, &info);
        if !self.track_comm {
            self.emit(batch, out);
            return Ok(Flow::Continue);
        }
        self.held.push(batch, 0);
        while let Some(b) = self.held.pop(false) {
            self.emit(b, out);
        }
        Ok(Flow::Continue)
    }

    fn flush(&mut self, out: &mut Out<'_>) -> Result<(), StageError> {
        while let Some(b) = self.held.pop(true) {
            self.emit(b, out);
        }
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![
            ("samples_kept", self.kept.clone()),
            ("samples_dropped", self.dropped.clone()),
            ("tracepoint_fields_short", self.short.clone()),
        ]
    }
}

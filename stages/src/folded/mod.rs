//! `folded`: the output format of folded stacks (`-o FILE.folded`, `--folded`, `--format folded`):
//! one line per distinct stack, `comm;outer;…;inner COUNT`, what `stackcollapse-perf.pl` and
//! `inferno-collapse-perf` make of `perf script`'s output, written straight from the stream.
//!
//! The sink reads the frames that the `symbolize` stage (added by itself at the end of the chain
//! when the command line has none) attaches to each batch, and keeps the distinct stacks
//! ([`aggregate::Aggregate`]); frames are named once each when the profile is written
//! ([`names`]). It writes at end of input and, as a snapshot that does not end the run, on
//! SIGUSR2 ([`perfpipe_core::DUMP`]). A file is replaced atomically (written under a temporary
//! name, then renamed), so a reader sees the previous profile or the new one, never half of one.
//!
//! - **Counts**: by default the sum of the samples' periods, as the collapsers count `perf
//!   script`'s lines; `weight=samples` counts samples.
//! - **Events**: the first event whose samples arrive, as the collapsers keep the first event of
//!   `perf script`'s output; samples of other events are counted (`samples_other_event`).
//! - **Counters**: `samples`, `stacks`, `frames`, `samples_other_event`, `samples_empty`,
//!   `samples_unannotated`.

pub mod aggregate;
pub mod names;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use perfpipe_core::{Batch, Counter, Flow, Sink, StageError};

pub use aggregate::{Aggregate, FoldOptions, WeightBy};
pub use names::Naming;

use crate::registry::{BuildCtx, Flag, FlagValue, FormatSpec, Kind, Options, StageOption};
use crate::write::atomic::write_file;
use crate::Error;

/// Turns the folded stacks into the bytes of a file.
pub trait Render: Send + std::fmt::Debug {
    /// Writes `lines` (sorted `(stack, count)`) to `out`.
    ///
    /// # Errors
    /// What writing to `out` returns.
    fn render(&self, lines: &[(String, u64)], out: &mut dyn Write) -> std::io::Result<()>;
}

/// Folded stacks as text, one `stack count` line each.
#[derive(Clone, Copy, Debug, Default)]
pub struct Lines;

impl Render for Lines {
    fn render(&self, lines: &[(String, u64)], out: &mut dyn Write) -> std::io::Result<()> {
        for (stack, count) in lines {
            writeln!(out, "{stack} {count}")?;
        }
        Ok(())
    }
}

/// The options of the folded format that the flame graph format shares, from checked options.
pub fn fold_options(o: &Options) -> FoldOptions {
    FoldOptions {
        pid: o.switch("pid"),
        tid: o.switch("tid"),
        naming: Naming {
            addrs: o.switch("addrs"),
            annotate: o.switch("annotate"),
        },
        weight: match o.text("weight") {
            Some("samples") => WeightBy::Samples,
            _ => WeightBy::Period,
        },
    }
}

/// The sink of a profile of folded stacks: aggregates, and renders at the end (and on request).
#[derive(Debug)]
pub struct Fold {
    aggregate: Aggregate,
    render: Box<dyn Render>,
    path: PathBuf,
    dump: Option<Arc<AtomicBool>>,
    pool: Option<Arc<rayon::ThreadPool>>,
    stacks: Counter,
    frames: Counter,
    snapshots: Counter,
}

impl Fold {
    /// A sink writing `render`'s output of the stacks to `path` (`-`: standard output). Names are
    /// resolved on `pool`; `dump` is the flag of a snapshot request.
    pub fn new(
        options: FoldOptions,
        render: Box<dyn Render>,
        path: &Path,
        dump: Option<Arc<AtomicBool>>,
        pool: Option<Arc<rayon::ThreadPool>>,
    ) -> Fold {
        Fold {
            aggregate: Aggregate::new(options),
            render,
            path: path.to_path_buf(),
            dump,
            pool,
            stacks: Counter::new(),
            frames: Counter::new(),
            snapshots: Counter::new(),
        }
    }

    /// The stacks so far.
    pub fn aggregate(&self) -> &Aggregate {
        &self.aggregate
    }

    fn write(&self) -> Result<(), Error> {
        let lines = self.aggregate.folded(self.pool.as_deref());
        write_file(&self.path, |w| self.render.render(&lines, w))
    }
}

impl Sink for Fold {
    fn consume(&mut self, batch: &Batch) -> Result<Flow, StageError> {
        self.aggregate.add_batch(batch);
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
        self.stacks.set_once(self.aggregate.stacks() as u64);
        self.frames.set_once(self.aggregate.frames() as u64);
        self.write()?;
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        let a = &self.aggregate;
        vec![
            ("samples", a.samples.clone()),
            ("stacks", self.stacks.clone()),
            ("frames", self.frames.clone()),
            ("samples_other_event", a.other_event.clone()),
            ("samples_empty", a.empty.clone()),
            ("samples_unannotated", a.unannotated.clone()),
            ("snapshots", self.snapshots.clone()),
        ]
    }
}

/// The options of folded stacks, which the flame graph format takes too.
pub const FOLD_OPTIONS: [StageOption; 5] = [
    StageOption {
        key: "weight",
        kind: Kind::Choice(&["period", "samples"]),
        help: "count the samples' periods (as inferno-collapse-perf counts perf script's lines) or the samples",
    },
    StageOption {
        key: "pid",
        kind: Kind::Switch,
        help: "the root frame is comm-PID",
    },
    StageOption {
        key: "tid",
        kind: Kind::Switch,
        help: "the root frame is comm-PID/TID",
    },
    StageOption {
        key: "addrs",
        kind: Kind::Switch,
        help: "unknown frames show their address: [libc.so.6 <7f0c…>]",
    },
    StageOption {
        key: "annotate",
        kind: Kind::Switch,
        help: "kernel frames end in _[k], JIT frames in _[j]",
    },
];

/// Flags that set the folded options, of whichever of folded and flamegraph the output is.
pub const FOLD_FLAGS: [Flag; 5] = [
    Flag::option(
        "weight",
        "weight",
        "what folded stacks and flame graphs count: period (default) or samples",
    ),
    Flag {
        name: "stack-pid",
        help: "folded stacks and flame graphs: a root frame per process, comm-PID",
        value: FlagValue::None,
        set: &[("pid", "yes")],
        adds_stage: false,
    },
    Flag {
        name: "stack-tid",
        help: "folded stacks and flame graphs: a root frame per thread, comm-PID/TID",
        value: FlagValue::None,
        set: &[("tid", "yes")],
        adds_stage: false,
    },
    Flag {
        name: "addrs",
        help: "folded stacks and flame graphs: unknown frames show their address",
        value: FlagValue::None,
        set: &[("addrs", "yes")],
        adds_stage: false,
    },
    Flag {
        name: "annotate",
        help: "folded stacks and flame graphs: kernel frames end in _[k], JIT frames in _[j]",
        value: FlagValue::None,
        set: &[("annotate", "yes")],
        adds_stage: false,
    },
];

const FLAGS: [Flag; 6] = [
    Flag::stage(
        "folded",
        "write folded stacks (what -o FILE.folded chooses): comm;outer;…;inner COUNT",
    ),
    FOLD_FLAGS[0],
    FOLD_FLAGS[1],
    FOLD_FLAGS[2],
    FOLD_FLAGS[3],
    FOLD_FLAGS[4],
];

/// How the command line offers the format.
pub const SPEC: FormatSpec = FormatSpec {
    name: "folded",
    help: "folded stacks, comm;outer;…;inner COUNT, as perf script | inferno-collapse-perf writes them",
    extensions: &["folded"],
    flags: &FLAGS,
    options: &FOLD_OPTIONS,
    needs: &["symbolize"],
    build: |ctx, o, path| Ok(Box::new(build(ctx, o, path, Box::new(Lines))?)),
};

/// Builds a folded-stack sink that renders with `render` (the flame graph format uses it too).
///
/// # Errors
/// When the worker pool cannot start.
pub fn build(
    ctx: &BuildCtx,
    o: &Options,
    path: &Path,
    render: Box<dyn Render>,
) -> Result<Fold, Error> {
    Ok(Fold::new(
        fold_options(o),
        render,
        path,
        Some(ctx.requests.subscribe(perfpipe_core::DUMP)),
        Some(ctx.workers.pool()?),
    ))
}

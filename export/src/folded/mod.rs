//! `folded`: the output format of folded stacks (`-o FILE.folded`, `--folded`, `--format folded`):
//! one line per distinct stack, `comm;outer;…;inner COUNT`, what `stackcollapse-perf.pl` and
//! `inferno-collapse-perf` make of `perf script`'s output, written straight from the stream.
//!
//! The sink reads the frames that the `symbolize` stage (added by itself at the end of the chain
//! when the command line has none) attaches to each batch, and keeps the distinct stacks
//! ([`aggregate::Aggregate`]); frames are named once each when the profile is written, by the
//! collapsers' rules ([`perfpipe_profile::kit::names`]). Like every profile written whole it is a
//! [`SnapshotSink`]: written at end of input and on SIGUSR2, the file replaced atomically.
//!
//! - **Counts**: by default the sum of the samples' periods, as the collapsers count `perf
//!   script`'s lines; `weight=samples` counts samples; `weight=offcpu` the ns each thread spent off
//!   the cpu from a switch-out to its next switch-in, charged to the switch-out's stack under an
//!   `[off-cpu: S]` (`D`, `R`, …; `[off-cpu: S, open at end]` for the intervals the stream
//!   ended in, closed at its last event time) frame after the comm ([`perfpipe_profile::offcpu`]: a
//!   `perf record -g -a -e sched:sched_switch` or `-e context-switches -c 1 --switch-events`
//!   recording); `weight=wall` that and the `cpu-clock`/`task-clock` samples' periods (ns), on-
//!   and off-CPU side by side; `weight=offwake` the off-CPU ns with each blocked stack followed
//!   by its waker's, `…;inner;--;waker inner;…;waker outer;waker comm` (Brendan Gregg's off-wake
//!   stacks; needs `sched:sched_waking` or `sched:sched_wakeup` samples with callchains).
//! - **Events**: the first event whose samples arrive, as the collapsers keep the first event of
//!   `perf script`'s output; samples of other events are counted (`samples_other_event`).
//! - **Counters**: `samples`, `stacks`, `frames`, `samples_other_event`, `samples_empty`,
//!   `samples_unannotated`, and for off-CPU weights `offcpu_intervals`, `offcpu_open_at_end`
//!   (intervals still open at the end, closed at the last event time), `offcpu_unusable`,
//!   `offcpu_exits` (exiting threads' last switches, which open no interval) and
//!   `offcpu_lost_ins` (intervals whose switch-in was lost, closed at the previous switch of the
//!   cpu the thread next left), and for `weight=offwake` `offcpu_woken` (the intervals charged
//!   with a waker's stack).

pub mod aggregate;

use std::io::Write;
use std::path::Path;

use perfpipe_core::{Batch, Counter};

pub use aggregate::{Aggregate, FoldOptions, WeightBy};
pub use perfpipe_profile::kit::Naming;

use perfpipe_core::spec::{BuildCtx, Flag, FlagValue, FormatSpec, Kind, Options, StageOption};
use perfpipe_profile::kit::{Profile, SnapshotSink};
use perfpipe_stream::Error;

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
        let mut n = itoa::Buffer::new();
        for (stack, count) in lines {
            out.write_all(stack.as_bytes())?;
            out.write_all(b" ")?;
            out.write_all(n.format(*count).as_bytes())?;
            out.write_all(b"\n")?;
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
            Some("offcpu") => WeightBy::OffCpu,
            Some("wall") => WeightBy::Wall,
            Some("offwake") => WeightBy::OffWake,
            _ => WeightBy::Period,
        },
    }
}

/// What folded stacks (and flame graphs) set on the `symbolize` stage: unless `addrs` shows
/// them, the user addresses no map covers are all `[unknown]`, so the stage makes them one frame
/// ([`merge_unmapped`](perfpipe_profile::symbolize::merge_unmapped)).
pub fn symbolize_settings(o: &Options) -> &'static [(&'static str, &'static str, &'static str)] {
    if o.switch("addrs") {
        &[]
    } else {
        perfpipe_profile::symbolize::merge_unmapped(o)
    }
}

/// A profile of folded stacks: the aggregate, rendered when written.
#[derive(Debug)]
pub struct Folded {
    aggregate: Aggregate,
    render: Box<dyn Render>,
    stacks: Counter,
    frames: Counter,
}

/// The sink of folded stacks (and, with another [`Render`], of flame graphs).
pub type Fold = SnapshotSink<Folded>;

impl Folded {
    /// An empty profile, to be written by `render`.
    pub fn new(options: FoldOptions, render: Box<dyn Render>) -> Folded {
        Folded {
            aggregate: Aggregate::new(options),
            render,
            stacks: Counter::new(),
            frames: Counter::new(),
        }
    }

    /// The stacks so far.
    pub fn aggregate(&self) -> &Aggregate {
        &self.aggregate
    }
}

impl Profile for Folded {
    fn add(&mut self, batch: &Batch) {
        self.aggregate.add_batch(batch);
    }

    fn write(&self, pool: Option<&rayon::ThreadPool>, out: &mut dyn Write) -> std::io::Result<()> {
        self.render.render(&self.aggregate.folded(pool), out)
    }

    fn finish(&mut self) {
        self.aggregate.finish();
        self.stacks.set_once(self.aggregate.stacks() as u64);
        self.frames.set_once(self.aggregate.frames() as u64);
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
            ("offcpu_intervals", a.offcpu_intervals.clone()),
            ("offcpu_open_at_end", a.offcpu_open_at_end.clone()),
            ("offcpu_unusable", a.offcpu_unusable.clone()),
            ("offcpu_exits", a.offcpu_exits.clone()),
            ("offcpu_lost_ins", a.offcpu_lost_ins.clone()),
            ("offcpu_woken", a.offcpu_woken.clone()),
        ]
    }
}

/// The options of folded stacks, which the flame graph format takes too.
pub const FOLD_OPTIONS: [StageOption; 5] = [
    StageOption {
        key: "weight",
        kind: Kind::Choice(&["period", "samples", "offcpu", "wall", "offwake"]),
        help: "count the samples' periods (as inferno-collapse-perf counts perf script's lines), the samples, off-CPU ns (sched_switch or context-switches recordings), wall-clock ns (cpu-clock plus sched_switch) or off-CPU ns with the waker's stack after each blocked one (plus sched_wakeup or sched_waking)",
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
        help: "kernel frames end in _[k], JIT frames in _[j], inlined functions in _[i]",
    },
];

/// Flags that set the folded options, of whichever of folded and flamegraph the output is.
pub const FOLD_FLAGS: [Flag; 5] = [
    Flag::option(
        "weight",
        "weight",
        "what folded stacks and flame graphs count: period (default), samples, offcpu (ns off the cpu from each switch-out to the next switch-in, under [off-cpu: STATE]), wall (on-CPU periods and off-CPU ns) or offwake (offcpu, each blocked stack followed by --, the waker's stack reversed and its comm; needs -e sched:sched_wakeup)",
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
        help: "folded stacks and flame graphs: kernel frames end in _[k], JIT frames in _[j], inlined functions (--inline) in _[i]",
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
    name: crate::offered::FOLDED.name,
    help: "folded stacks, comm;outer;…;inner COUNT, as perf script | inferno-collapse-perf writes them",
    extensions: crate::offered::FOLDED.extensions,
    flags: &FLAGS,
    options: &FOLD_OPTIONS,
    needs: &["symbolize"],
    sets: symbolize_settings,
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
    SnapshotSink::build(ctx, path, Folded::new(fold_options(o), render))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use perfpipe_core::{Flow, Sink};

    use super::*;
    use crate::test_support::{symbolized, symbolized_with};
    use perfpipe_profile::symbolize::SymbolizeConfig;
    use perfpipe_stream::format::{RecordType, StreamInfo};

    const CALLGRAPH: &[u8] = include_bytes!("../../../tests/fixtures/callgraph.pipe.data");

    /// The samples' raw stacks counted straight from the records: (tid, callchain) → count.
    fn raw_stacks(batches: &[Batch]) -> HashMap<(u32, Vec<u64>), u64> {
        let mut out = HashMap::new();
        for b in batches {
            let info = StreamInfo::of(b).unwrap();
            for span in b.spans.iter().filter(|s| s.kind == RecordType::SAMPLE.0) {
                let s = info.record(b, span).sample().unwrap();
                let chain: Vec<u64> = s.callchain().unwrap().entries().collect();
                *out.entry((s.tid().unwrap(), chain)).or_default() += 1;
            }
        }
        out
    }

    #[test]
    fn every_sample_is_counted_once_with_its_period_whatever_the_batching() {
        let reference = raw_stacks(&symbolized(CALLGRAPH, 1 << 20));
        let samples: u64 = reference.values().sum();
        assert_eq!(samples, 1777, "perf report --stats: 1777 samples");
        for batch in [4096, 65536, 1 << 20] {
            let batches = symbolized(CALLGRAPH, batch);
            let mut agg = Aggregate::new(FoldOptions {
                tid: true,
                ..FoldOptions::default()
            });
            for b in &batches {
                agg.add_batch(b);
            }
            assert_eq!(agg.samples.get(), samples, "batch {batch}");
            assert_eq!(agg.unannotated.get(), 0);
            // At most one stack per sample; a thread's samples of one callchain are one stack
            // unless its maps or name changed in between (an exec).
            assert!((reference.len() - 10..=samples as usize).contains(&agg.stacks()));
            let lines = agg.folded(None);
            let total: u64 = lines.iter().map(|(_, c)| c).sum();
            assert_eq!(
                total,
                samples * 200_000,
                "weights are the fixed period (-c 200000)"
            );
            assert!(lines.windows(2).all(|w| w[0].0 < w[1].0), "sorted, merged");
            for (stack, _) in &lines {
                let root = stack.split(';').next().unwrap();
                let (comm, ids) = root.rsplit_once('-').unwrap();
                let (pid, tid) = ids.split_once('/').unwrap();
                assert!(!comm.is_empty() && !comm.contains(' '), "{root}");
                assert!(
                    pid.parse::<u32>().is_ok() && tid.parse::<u32>().is_ok(),
                    "{root}"
                );
            }
        }
    }

    #[test]
    fn unmapped_addresses_merged_change_no_stack_unless_addresses_are_shown() {
        // (lines, distinct frames, distinct stacks, distinct `[unknown <addr>]` names)
        let fold = |merge_unmapped: bool, addrs: bool| {
            let config = SymbolizeConfig {
                merge_unmapped,
                ..SymbolizeConfig::default()
            };
            let batches = symbolized_with(&config, CALLGRAPH, 1 << 20);
            let mut agg = Aggregate::new(FoldOptions {
                naming: Naming {
                    addrs,
                    ..Naming::default()
                },
                ..FoldOptions::default()
            });
            for b in &batches {
                agg.add_batch(b);
            }
            let lines = agg.folded(None);
            let mut unknown: Vec<&str> = lines
                .iter()
                .flat_map(|(s, _)| s.split(';'))
                .filter(|f| f.starts_with("[unknown <"))
                .collect();
            unknown.sort_unstable();
            unknown.dedup();
            let unknown = unknown.len();
            (lines.clone(), agg.frames(), agg.stacks(), unknown)
        };
        let (kept, kept_frames, kept_stacks, _) = fold(false, false);
        let (merged, merged_frames, merged_stacks, _) = fold(true, false);
        assert_eq!(merged, kept, "without addresses the lines are the same");
        assert!(
            merged_frames < kept_frames && merged_stacks < kept_stacks,
            "frames {merged_frames} < {kept_frames}, stacks {merged_stacks} < {kept_stacks}"
        );
        // With addresses shown, kept addresses are many names; merged they would be one.
        let (_, _, _, kept_unknown) = fold(false, true);
        let (_, _, _, merged_unknown) = fold(true, true);
        assert!(kept_unknown > 50, "{kept_unknown} addresses");
        assert_eq!(merged_unknown, 1);
    }

    #[test]
    fn samples_of_other_events_and_unannotated_batches_are_counted_apart() {
        let batches = symbolized(CALLGRAPH, 1 << 20);
        let mut agg = Aggregate::new(FoldOptions {
            weight: WeightBy::Samples,
            ..FoldOptions::default()
        });
        let mut bare = batches[0].clone();
        bare.annotations.clear();
        let in_bare = bare
            .spans
            .iter()
            .filter(|s| s.kind == RecordType::SAMPLE.0)
            .count() as u64;
        agg.add_batch(&bare);
        assert_eq!(agg.unannotated.get(), in_bare);
        for b in &batches[1..] {
            agg.add_batch(b);
        }
        let total: u64 = agg.folded(None).iter().map(|(_, c)| c).sum();
        assert_eq!(total + in_bare, 1777, "weight=samples counts samples");
    }

    #[test]
    fn the_sink_writes_the_file_at_the_end_and_on_request() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.folded");
        let dump = Arc::new(AtomicBool::new(false));
        let mut sink = Fold::new(
            Folded::new(FoldOptions::default(), Box::new(Lines)),
            &path,
            Some(dump.clone()),
            None,
        );
        let batches = symbolized(CALLGRAPH, 65536);
        let (first, rest) = batches.split_at(batches.len() / 2);
        for b in first {
            assert_eq!(sink.consume(b).unwrap(), Flow::Continue);
        }
        assert!(
            !path.exists(),
            "nothing is written before the end unless asked"
        );
        dump.store(true, Ordering::SeqCst);
        assert_eq!(sink.consume(&rest[0]).unwrap(), Flow::Continue);
        let snapshot = std::fs::read_to_string(&path).unwrap();
        for b in &rest[1..] {
            assert_eq!(sink.consume(b).unwrap(), Flow::Continue);
        }
        sink.finish().unwrap();
        let end = std::fs::read_to_string(&path).unwrap();
        let total = |s: &str| -> u64 {
            s.lines()
                .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
                .sum()
        };
        assert!(0 < total(&snapshot) && total(&snapshot) < total(&end));
        assert_eq!(total(&end), 1777 * 200_000);
        let snapshots = sink
            .counters()
            .into_iter()
            .find(|c| c.0 == "snapshots")
            .unwrap();
        assert_eq!(snapshots.1.get(), 1, "one snapshot");
    }
}

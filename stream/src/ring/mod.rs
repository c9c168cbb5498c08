//! `ring`: the flight recorder. Keeps the newest SIZE bytes of events in an overwrite ring and
//! passes nothing downstream until a trigger; then it emits a **dump**: a complete pipe-mode stream
//! that `perf script`/`perf report` read on its own and resolve like the full input (see
//! [`Recorder`] for what a dump holds and in which order).
//!
//! Triggers:
//! - **end of input**: the last window is dumped (also when no trigger fired at all);
//! - **a dump request**: the stage subscribes to the build context's
//!   [`DUMP`](perfpipe_core::DUMP) request (the CLI raises it on SIGUSR2), polled at every batch and, while the input is quiet, every [`TICK`];
//! - **`--ring-trigger EXPR`**: the first sample the filter expression selects (see
//!   [`crate::filter`]); with `--ring-after DURATION` recording goes on until a record at least
//!   DURATION later in event time arrives (or, on a quiet input, that long in wall time), then
//!   dumps. Matches while a dump is pending are ignored.
//!
//! The window is the newest events **by event time** that fit SIZE: every event whose time is
//! above a cut, whatever order perf drained the cpus in (see [`RecordRing`]); `events_dropped`
//! counts the events that left it or arrived behind its cut (`events_late`, also in the former).
//!
//! After a dump the ring starts empty, so consecutive dumps cover consecutive windows. With
//! [`RingConfig::once`] (a single output: perf's pipe reader rejects a second stream in one pipe)
//! the stage stops after its first dump.
//!
//! **Order**: a dump is the stream's header records, then side-band, then the window sorted by
//! time. **Buffering**: SIZE bytes of events (each with a 16-byte prefix) plus the side-band state (bounded by live processes),
//! reported as `ring_bytes` and `sideband_bytes` (high-water marks; the latter counts the kept
//! header records too); while a dump is built, its batches add up to its size once more.
//! **EOF**: dumps what it holds, unless it stopped after its one dump.
//!
//! Options ([`SPEC`]): `size` (`--ring SIZE`), `trigger` (`--ring-trigger EXPR`), `after`
//! (`--ring-after DURATION`), `once` (set by the build context for a single output).
//! [`RingConfig::parse`] reads them as one string, `SIZE[,once][,after=DURATION][,trigger=EXPR]`
//! (the trigger last because an expression may hold commas), for tests and programs.

mod buffer;
mod recorder;
mod sideband;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use perfpipe_core::{Batch, Counter, Flow, Out, Stage, StageError};

pub use buffer::{Entry, RecordRing};
pub use recorder::{DumpStats, Recorder};
pub use sideband::Sideband;

use crate::filter::{Expr, Filter, FilterConfig};
use crate::format::{Record, StreamInfo};
use crate::Error;
use perfpipe_core::spec::{Flag, Kind, Options, StageOption, StageSpec};

/// How often the stage looks at the dump request flag while its input is quiet.
pub const TICK: Duration = Duration::from_millis(50);

/// Configuration of the `ring` stage. Plain data; no I/O.
#[derive(Clone, Debug)]
pub struct RingConfig {
    /// Bytes of events to keep.
    pub size: usize,
    /// Dump when a sample matches this expression (once: the first match).
    pub trigger: Option<Expr>,
    /// After a trigger, keep recording this long (event time) before the dump.
    pub after: Option<Duration>,
    /// Stop after the first dump (the output holds one stream).
    pub once: bool,
    /// A flag that asks for a dump when set (the stage clears it).
    pub requests: Option<Arc<AtomicBool>>,
}

fn bad(message: String) -> Error {
    Error::BadOption {
        option: "--ring",
        message,
    }
}

/// Parses `64M`, `512K`, `1G`, `4096`: at least 4096 bytes.
fn parse_size(s: &str) -> Result<usize, Error> {
    perfpipe_core::spec::parse_size(s)
        .ok()
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n >= 4096)
        .ok_or_else(|| {
            bad(format!(
                "`{}` is not a size of at least 4096 bytes like 64M",
                s.trim()
            ))
        })
}

/// Parses `500ms`, `2s`, `1.5s`, `100us`, `1m`; a bare number is seconds.
pub fn parse_duration(s: &str) -> Result<Duration, Error> {
    perfpipe_core::spec::parse_duration(s).map_err(|message| Error::BadOption {
        option: "--ring-after",
        message,
    })
}

/// The trigger that the `ring` stage's options `trigger` and `after` give, parsed; for a source
/// that dumps on the same trigger (`record --overwrite`).
///
/// # Errors
/// [`Error::BadExpression`] for a trigger that does not parse; [`Error::BadOption`] for `after`
/// without `trigger`.
pub fn trigger_of(o: &Options) -> Result<(Option<Expr>, Option<Duration>), Error> {
    let trigger = o.text("trigger").map(crate::filter::parse).transpose()?;
    let after = o.duration("after");
    if after.is_some() && trigger.is_none() {
        return Err(Error::BadOption {
            option: "--ring-after",
            message: "needs --ring-trigger".into(),
        });
    }
    Ok((trigger, after))
}

impl RingConfig {
    /// The configuration the `ring` stage's options give.
    ///
    /// # Errors
    /// [`Error::BadOption`] for a size under 4096 bytes, or `after` without `trigger`;
    /// [`Error::BadExpression`] for a trigger that does not parse.
    pub fn from_options(o: &Options) -> Result<RingConfig, Error> {
        let size = o.size("size").unwrap_or(0);
        let (trigger, after) = trigger_of(o)?;
        let config = RingConfig {
            size: parse_size(&size.to_string())?,
            trigger,
            after,
            once: o.switch("once"),
            requests: None,
        };
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), Error> {
        if self.after.is_some() && self.trigger.is_none() {
            return Err(Error::BadOption {
                option: "--ring-after",
                message: "needs --ring-trigger".into(),
            });
        }
        Ok(())
    }

    /// Parses the stage's value `SIZE[,once][,after=DURATION][,trigger=EXPR]`.
    ///
    /// # Errors
    /// [`Error::BadOption`] for a bad size, duration or item; [`Error::BadExpression`] for a
    /// trigger that does not parse.
    pub fn parse(value: &str) -> Result<RingConfig, Error> {
        let (head, trigger) = match value.find("trigger=") {
            Some(i) => (&value[..i], Some(&value[i + "trigger=".len()..])),
            None => (value, None),
        };
        let mut items = head.split(',').map(str::trim).filter(|i| !i.is_empty());
        let size = parse_size(items.next().unwrap_or_default())?;
        let mut config = RingConfig {
            size,
            trigger: trigger.map(crate::filter::parse).transpose()?,
            after: None,
            once: false,
            requests: None,
        };
        for item in items {
            match item.split_once('=') {
                None if item == "once" => config.once = true,
                Some(("after", d)) => config.after = Some(parse_duration(d)?),
                _ => {
                    return Err(bad(format!(
                        "`{item}`: expected SIZE[,once][,after=DURATION][,trigger=EXPR]"
                    )))
                }
            }
        }
        config.check()?;
        Ok(config)
    }

    /// Builds the stage.
    pub fn build(&self) -> Ring {
        Ring {
            recorder: Recorder::new(self.size),
            trigger: self.trigger.clone().map(|e| FilterConfig::new(e).build()),
            after: self.after,
            once: self.once,
            requests: self.requests.clone(),
            pending: None,
            info: None,
            dumped: 0,
            ring_bytes: Counter::new(),
            sideband_bytes: Counter::new(),
            dumps: Counter::new(),
            events_dropped: Counter::new(),
            events_late: Counter::new(),
        }
    }
}

const RING_HELP: &str = "flight recorder: keep the newest SIZE bytes of events, dump a complete \
    stream at the end, on SIGUSR2 or on --ring-trigger (-o NAME-%n.data: one file per dump)";

/// How `ring` appears on the command line: `--ring SIZE`, with `--ring-trigger EXPR` and
/// `--ring-after DURATION` setting its trigger wherever they stand. It listens to the
/// [`DUMP`](perfpipe_core::DUMP) request (SIGUSR2 on the command line) and dumps once when the
/// output takes a single stream.
pub const SPEC: StageSpec = StageSpec {
    name: "ring",
    help: RING_HELP,
    flags: &[
        Flag::stage_value("ring", "size", RING_HELP),
        Flag::option(
            "ring-trigger",
            "trigger",
            "with --ring: dump when a sample matches EXPR (the --filter language), e.g. 'comm == \"db*\"'",
        ),
        Flag::option(
            "ring-after",
            "after",
            "with --ring-trigger: keep recording for DURATION of event time after the trigger (500ms, 2s)",
        ),
    ],
    options: &[
        StageOption {
            key: "size",
            kind: Kind::Size,
            help: "bytes of events to keep (at least 4096)",
        },
        StageOption {
            key: "trigger",
            kind: Kind::Text("EXPR"),
            help: "dump when a sample matches EXPR (once)",
        },
        StageOption {
            key: "after",
            kind: Kind::Duration,
            help: "after a trigger, record DURATION more",
        },
        StageOption {
            key: "once",
            kind: Kind::Switch,
            help: "stop after the first dump (set for a single output)",
        },
    ],
    build: |ctx, o| {
        let mut config = RingConfig::from_options(o)?;
        config.once |= ctx.single_output;
        config.requests = Some(ctx.requests.subscribe(perfpipe_core::DUMP));
        Ok(Box::new(config.build()))
    },
    needs: &["decompress"],
};

/// A trigger fired and the dump waits for `--ring-after`.
#[derive(Clone, Copy, Debug)]
struct Pending {
    /// Event time from which the dump happens.
    deadline: u64,
    /// Wall time of the trigger, for a quiet input.
    since: Instant,
}

/// The running `ring` stage.
#[derive(Debug)]
pub struct Ring {
    recorder: Recorder,
    trigger: Option<Filter>,
    after: Option<Duration>,
    once: bool,
    requests: Option<Arc<AtomicBool>>,
    pending: Option<Pending>,
    info: Option<Arc<StreamInfo>>,
    dumped: u64,
    ring_bytes: Counter,
    sideband_bytes: Counter,
    dumps: Counter,
    events_dropped: Counter,
    events_late: Counter,
}

impl Ring {
    /// Emits a dump (nothing before the stream's header arrived) and reports whether to stop.
    fn dump(&mut self, out: &mut Out<'_>) -> Flow {
        let Some(info) = self.info.clone() else {
            return Flow::Continue;
        };
        let mut batches = Vec::new();
        self.recorder
            .dump(&info, out.batch_bytes(), &mut || out.take(), &mut batches);
        for b in batches {
            out.push(b);
        }
        self.pending = None;
        self.dumped += 1;
        self.dumps.add(1);
        if self.once {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }

    fn requested(&self) -> bool {
        self.requests
            .as_ref()
            .is_some_and(|r| r.swap(false, Ordering::Relaxed))
    }

    fn update_counters(&mut self) {
        self.ring_bytes.max(self.recorder.ring_bytes() as u64);
        self.sideband_bytes
            .max(self.recorder.sideband_bytes() as u64);
        self.events_dropped.add(self.recorder.take_dropped());
        self.events_late.add(self.recorder.take_late());
    }
}

impl Stage for Ring {
    fn process(&mut self, batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        let Some(info) = StreamInfo::shared(&batch) else {
            out.recycle(batch);
            return Ok(Flow::Continue);
        };
        self.info = Some(info.clone());
        if self.requested() && self.dump(out) == Flow::Stop {
            out.recycle(batch);
            return Ok(Flow::Stop);
        }
        let matched = match &mut self.trigger {
            Some(f) => f.first_match(&batch),
            None => None,
        };
        if matched.is_some() {
            // A trigger fires once: a condition that holds for a while would otherwise dump
            // every batch. SIGUSR2 and the end still dump.
            self.trigger = None;
        }
        let mut flow = Flow::Continue;
        for (i, span) in batch.spans.iter().enumerate() {
            let bytes = batch.bytes(span);
            if let Some(p) = self.pending {
                let rec = Record::new(bytes, info.endian, info.attr(span.tag as u16));
                let time = rec
                    .sample()
                    .and_then(|s| s.time())
                    .or_else(|| rec.sample_id().and_then(|s| s.time));
                if time.is_some_and(|t| t >= p.deadline) && self.dump(out) == Flow::Stop {
                    flow = Flow::Stop;
                    break;
                }
            }
            self.recorder.push(&info, bytes, span.kind, span.tag);
            if matched == Some(i) && self.pending.is_none() {
                match self.after {
                    None => {
                        if self.dump(out) == Flow::Stop {
                            flow = Flow::Stop;
                            break;
                        }
                    }
                    Some(after) => {
                        let rec = info.record(&batch, span);
                        let t = rec.sample().and_then(|s| s.time()).unwrap_or(0);
                        self.pending = Some(Pending {
                            deadline: t.saturating_add(after.as_nanos() as u64),
                            since: Instant::now(),
                        });
                    }
                }
            }
        }
        out.recycle(batch);
        self.update_counters();
        Ok(flow)
    }

    fn tick_interval(&self) -> Option<Duration> {
        Some(TICK)
    }

    fn tick(&mut self, out: &mut Out<'_>) -> Result<Flow, StageError> {
        let late = match (self.pending, self.after) {
            (Some(p), Some(after)) => p.since.elapsed() >= after,
            _ => false,
        };
        let flow = if self.requested() || late {
            self.dump(out)
        } else {
            Flow::Continue
        };
        self.update_counters();
        Ok(flow)
    }

    fn flush(&mut self, out: &mut Out<'_>) -> Result<(), StageError> {
        let stopped = self.once && self.dumped > 0;
        if !stopped && (self.dumped == 0 || self.recorder.events() > 0 || self.pending.is_some()) {
            let _ = self.dump(out);
        }
        self.update_counters();
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![
            ("ring_bytes", self.ring_bytes.clone()),
            ("sideband_bytes", self.sideband_bytes.clone()),
            ("dumps", self.dumps.clone()),
            ("events_dropped", self.events_dropped.clone()),
            ("events_late", self.events_late.clone()),
        ]
    }
}

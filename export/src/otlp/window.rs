//! [`WindowSink`]: a profile pushed to a URL, one request per `--window` of sample time (or one
//! for the whole stream without `--window`), through a [`Pusher`].
//!
//! - **Windows**: a window is `--window` long and starts at a multiple of it on the wall clock
//!   (10 s windows start at :00, :10, …), so that every agent of a fleet cuts at the same
//!   instants. A sample belongs to the window its time falls in; a batch that spans a boundary
//!   is cut there (the records before the first sample past it go to the window that ends). A
//!   sample that comes late (perf orders samples per round, not across them) is counted in the
//!   window being filled. Windows in which no sample came send nothing.
//! - **What a window holds**: the profile of its samples alone, complete in itself (its own
//!   dictionary, its resources); off-CPU intervals are cut with it (an interval still open at a
//!   window's end is charged to it up to its last event, `open_at_end`).
//! - **The end**: the last window is sent, then the [`Pusher`] has its timeout to send what is
//!   queued; a window dropped on the way fails the run, each one named.
//!
//! The stream's HOSTNAME and CLOCK_DATA are read here once ([`StreamFacts`]) and given to every
//! window's profile.

use std::path::Path;
use std::sync::Arc;

use perfpipe_core::spec::{BuildCtx, Options};
use perfpipe_core::{Batch, Counter, Flow, Sink, StageError};
use perfpipe_profile::kit::{Join, Profile};
use perfpipe_stream::format::{RecordType, StreamInfo};

use super::push::{PushConfig, Pusher, Target, Window};
use super::StreamFacts;

/// A profile that can be pushed in windows.
pub trait Windowed: Profile + Sized + 'static {
    /// An empty profile of the next window of the same stream (its counters shared).
    fn next_window(&self) -> Self;

    /// Says which window the profile is of, perf time `[start, end)`, and what the stream says
    /// of itself.
    fn set_window(&mut self, facts: &StreamFacts, start: u64, end: u64);

    /// Whether any sample was taken in.
    fn has_samples(&self) -> bool;
}

/// Fails for `--window` (or another push option) given to an output that is a file.
///
/// # Errors
/// Naming the option and the outputs that take it.
pub fn file_output(format: &str, o: &Options, path: &Path) -> Result<(), StageError> {
    for key in ["window", "queue", "retries", "timeout"] {
        if o.has(key) {
            return Err(format!(
                "--{key}: an option of a push, and -o {} is a file; push to a URL \
                 (-o http://HOST:4318/v1development/profiles, -o pyroscope+http://HOST:4040) \
                 or leave it out ({format} output)",
                path.display()
            )
            .into());
        }
    }
    Ok(())
}

/// The sink of a profile pushed in windows (see the module doc).
#[derive(Debug)]
pub struct WindowSink<P> {
    profile: P,
    facts: StreamFacts,
    /// The window's length in ns; `None`: the whole stream is one window.
    width: Option<u64>,
    /// The window being filled, perf time `[start, end)`; `None` before the first sample.
    current: Option<(u64, u64)>,
    /// The first and the last sample time of the stream.
    seen: Option<(u64, u64)>,
    index: u64,
    pusher: Pusher,
    pool: Option<Arc<rayon::ThreadPool>>,
    windows_empty: Counter,
}

impl<P: Windowed> WindowSink<P> {
    /// A sink pushing `profile`'s windows to `target`, as `o` says (`window`, `queue`,
    /// `retries`, `timeout`).
    ///
    /// # Errors
    /// When the worker pool or the sending thread cannot start.
    pub fn build(
        ctx: &BuildCtx,
        o: &Options,
        target: Target,
        profile: P,
    ) -> Result<WindowSink<P>, StageError> {
        let defaults = PushConfig::default();
        let config = PushConfig {
            queue: o.count("queue").map_or(defaults.queue, |n| n as usize),
            retries: o.count("retries").map_or(defaults.retries, |n| n as u32),
            timeout: o.duration("timeout").unwrap_or(defaults.timeout),
            backoff: defaults.backoff,
        };
        let width = o.duration("window").map(|d| d.as_nanos() as u64);
        if width == Some(0) {
            return Err("--window: a window must last longer than 0".into());
        }
        Ok(WindowSink {
            pool: Some(ctx.workers.pool()?),
            ..WindowSink::new(profile, target, width, config)?
        })
    }

    /// A sink without a worker pool (names made on the sink's thread).
    ///
    /// # Errors
    /// When the sending thread cannot start.
    pub fn new(
        profile: P,
        target: Target,
        width: Option<u64>,
        config: PushConfig,
    ) -> std::io::Result<WindowSink<P>> {
        Ok(WindowSink {
            profile,
            facts: StreamFacts::now(),
            width,
            current: None,
            seen: None,
            index: 0,
            pusher: Pusher::start(target, config)?,
            pool: None,
            windows_empty: Counter::new(),
        })
    }

    /// The window of a first sample at `time`: the multiple of the width on the wall clock
    /// that holds it.
    fn first_window(&self, time: u64, width: u64) -> (u64, u64) {
        let into = self.facts.wall_ns(time) % width;
        let start = time.saturating_sub(into);
        (start, start + width)
    }

    /// Ends the window being filled: its request queued (unless it has no sample), a new
    /// profile begun.
    fn emit(&mut self, end_of_stream: bool) {
        let (start, end) = match (self.current, self.seen) {
            (Some((s, e)), Some((_, last))) if end_of_stream => (s, e.min(last + 1)),
            (Some(w), _) => w,
            (None, Some((first, last))) => (first, last + 1),
            (None, None) => (0, 0),
        };
        self.profile.finish();
        if self.profile.has_samples() {
            self.profile.set_window(&self.facts, start, end);
            let mut body = Vec::new();
            // Writing to a Vec cannot fail.
            let _ = self.profile.write(self.pool.as_deref(), &mut body);
            self.index += 1;
            self.pusher.push(Window {
                index: self.index,
                start_ns: self.facts.wall_ns(start),
                end_ns: self.facts.wall_ns(end),
                body,
            });
        } else {
            self.windows_empty.add(1);
        }
        self.profile = self.profile.next_window();
    }

    /// The indices of the spans at which the batch is cut, each with the window it ends and the
    /// one it begins.
    fn cuts(&mut self, batch: &Batch, width: u64) -> Vec<(usize, (u64, u64), (u64, u64))> {
        let Some(join) = Join::of(batch) else {
            return Vec::new();
        };
        let mut samples = join.map(|(_, s)| (s.start, s.time)).peekable();
        let mut cuts = Vec::new();
        for (i, span) in batch.spans.iter().enumerate() {
            if span.kind != RecordType::SAMPLE.0 {
                continue;
            }
            let Some((_, time)) = samples.next_if(|&(start, _)| start == span.start) else {
                continue;
            };
            if time == 0 {
                continue;
            }
            let (start, end) = match self.current {
                Some(w) => w,
                None => {
                    let w = self.first_window(time, width);
                    self.current = Some(w);
                    w
                }
            };
            // A sample before `start` came late: it is counted in the window being filled.
            if time >= end {
                let next = end + (time - end) / width * width;
                cuts.push((i, (start, end), (next, next + width)));
                self.current = Some((next, next + width));
            }
            self.note(time);
        }
        cuts
    }

    /// Notes a sample time of the window being filled.
    fn note(&mut self, time: u64) {
        self.seen = Some(match self.seen {
            Some((first, last)) => (first.min(time), last.max(time)),
            None => (time, time),
        });
    }
}

impl<P: Windowed> Sink for WindowSink<P> {
    fn consume(&mut self, batch: &Batch) -> Result<Flow, StageError> {
        if let (None, Some(info)) = (self.seen, StreamInfo::of(batch)) {
            // A pipe's feature records come before its samples.
            self.facts.observe(batch, info);
        }
        let Some(width) = self.width else {
            if let Some(join) = Join::of(batch) {
                for (_, s) in join.filter(|(_, s)| s.time != 0) {
                    self.note(s.time);
                }
            }
            self.profile.add(batch);
            return Ok(Flow::Continue);
        };
        let cuts = self.cuts(batch, width);
        if cuts.is_empty() {
            self.profile.add(batch);
            return Ok(Flow::Continue);
        }
        // The batch cut at each boundary: the spans before it end the window.
        let mut part = Batch {
            spans: Vec::new(),
            ..batch.clone()
        };
        let mut from = 0;
        for (at, ended, next) in cuts {
            part.spans.clear();
            part.spans.extend_from_slice(&batch.spans[from..at]);
            self.profile.add(&part);
            self.current = Some(ended);
            self.emit(false);
            self.current = Some(next);
            from = at;
        }
        part.spans.clear();
        part.spans.extend_from_slice(&batch.spans[from..]);
        self.profile.add(&part);
        Ok(Flow::Continue)
    }

    fn finish(&mut self) -> Result<(), StageError> {
        self.emit(true);
        let dropped = self.pusher.finish();
        if dropped.is_empty() {
            return Ok(());
        }
        Err(format!(
            "{} of {} windows were not delivered:\n  {}",
            dropped.len(),
            self.index,
            dropped.join("\n  ")
        )
        .into())
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        let mut c = self.profile.counters();
        c.extend(self.pusher.counters());
        c.push(("windows_empty", self.windows_empty.clone()));
        c
    }
}

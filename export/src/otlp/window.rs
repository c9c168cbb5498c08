//! [`WindowSink`]: a profile pushed to a URL, one request per `--window` of sample time (or one
//! for the whole stream without `--window`), through a [`Pusher`].
//!
//! - **Windows**: a window is `--window` long and starts at a multiple of it on the wall clock
//!   (10 s windows start at :00, :10, …), so that every agent of a fleet cuts at the same
//!   instants. A sample belongs to the window its time falls in, whatever order it comes in (a
//!   pipe orders samples only per round); another record goes with the sample before it. A
//!   window is sent once no sample to come can fall in it: at a FINISHED_ROUND whose previous
//!   round saw a later sample (perf's own rule for sorting a pipe), or once a sample a whole
//!   window later came. A sample whose window was already sent is counted in the oldest open
//!   one (`samples_late`). Windows in which no sample came send nothing.
//! - **What a window holds**: the profile of its samples alone, complete in itself (its own
//!   dictionary, its resources); off-CPU intervals are cut with it (an interval still open at a
//!   window's end is charged to it up to its last event, `open_at_end`).
//! - **The end**: the last window is sent, then the [`Pusher`] has its timeout to send what is
//!   queued; a window dropped on the way fails the run, each one named.
//!
//! The stream's HOSTNAME and CLOCK_DATA are read here once ([`StreamFacts`]) and given to every
//! window's profile.

use std::collections::BTreeMap;
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
    /// The profile every window's is made from ([`Windowed::next_window`]).
    template: P,
    /// The windows open, by start (perf time); without `--window`, one at 0.
    open: BTreeMap<u64, P>,
    facts: StreamFacts,
    /// The window's length in ns; `None`: the whole stream is one window.
    width: Option<u64>,
    /// Where windows start: `start % width == offset` (a multiple of the width on the wall
    /// clock), set at the first sample.
    offset: Option<u64>,
    /// The first and the last sample time of the stream.
    seen: Option<(u64, u64)>,
    /// The latest sample time before the FINISHED_ROUND before the last one: every sample
    /// still to come is later (perf's ordering of a pipe).
    round_max: u64,
    /// The latest sample time before the last FINISHED_ROUND.
    round_pending: u64,
    /// The end of the last window sent.
    sent_until: u64,
    /// The window of the latest sample, where other records go.
    last_window: u64,
    index: u64,
    pusher: Pusher,
    pool: Option<Arc<rayon::ThreadPool>>,
    samples_late: Counter,
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
            template: profile,
            open: BTreeMap::new(),
            facts: StreamFacts::now(),
            width,
            offset: None,
            seen: None,
            round_max: 0,
            round_pending: 0,
            sent_until: 0,
            last_window: 0,
            index: 0,
            pusher: Pusher::start(target, config)?,
            pool: None,
            samples_late: Counter::new(),
        })
    }

    /// The start of the window of sample time `time`.
    fn window_of(&mut self, time: u64) -> u64 {
        let Some(width) = self.width else { return 0 };
        let offset = *self.offset.get_or_insert_with(|| {
            (time % width + width - self.facts.wall_ns(time) % width) % width
        });
        let start = time.saturating_sub((time + width - offset) % width);
        if start < self.sent_until {
            // Later than its window, which is sent: counted in the oldest open one.
            self.samples_late.add(1);
            return self.open.keys().next().copied().unwrap_or(self.sent_until);
        }
        start
    }

    /// Sends window `start` (unless it has no sample).
    fn emit(&mut self, start: u64, mut profile: P, end_of_stream: bool) {
        let (first, last) = self.seen.unwrap_or((0, 0));
        let (start, end) = match self.width {
            Some(w) if end_of_stream => (start, (start + w).min(last + 1)),
            Some(w) => (start, start + w),
            None => (first, last + 1),
        };
        self.sent_until = self.sent_until.max(end);
        profile.finish();
        if !profile.has_samples() {
            return;
        }
        profile.set_window(&self.facts, start, end);
        let mut body = Vec::new();
        // Writing to a Vec cannot fail.
        let _ = profile.write(self.pool.as_deref(), &mut body);
        self.index += 1;
        self.pusher.push(Window {
            index: self.index,
            start_ns: self.facts.wall_ns(start),
            end_ns: self.facts.wall_ns(end),
            body,
        });
    }

    /// Sends the windows that no sample to come can fall in: those that end by the time perf's
    /// last round guarantees, or a whole window before the latest sample.
    fn emit_closed(&mut self) {
        let Some(width) = self.width else { return };
        let latest = self.seen.map_or(0, |s| s.1);
        while let Some((&start, _)) = self.open.first_key_value() {
            let end = start + width;
            if end > self.round_max && end + width > latest {
                break;
            }
            let profile = self.open.remove(&start).expect("the first window");
            self.emit(start, profile, false);
        }
    }

    /// Notes a sample time.
    fn note(&mut self, time: u64) {
        self.seen = Some(match self.seen {
            Some((first, last)) => (first.min(time), last.max(time)),
            None => (time, time),
        });
    }

    /// The window of each span of `batch` (a sample's by its time, another record's that of the
    /// sample before it), and whether a FINISHED_ROUND came.
    fn assign(&mut self, batch: &Batch) -> (Vec<u64>, bool) {
        let mut windows = Vec::with_capacity(batch.spans.len());
        let mut round = false;
        let mut samples = Join::of(batch)
            .map(|j| j.map(|(_, s)| (s.start, s.time)).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .peekable();
        for span in &batch.spans {
            if span.kind == RecordType::FINISHED_ROUND.0 {
                round = true;
                // perf's rule: once a round ends, no sample to come is earlier than the latest
                // of the round before it.
                self.round_max = self.round_max.max(self.round_pending);
                self.round_pending = self.seen.map_or(0, |s| s.1);
            }
            let time = match samples.next_if(|&(start, _)| start == span.start) {
                Some((_, t)) if t != 0 && span.kind == RecordType::SAMPLE.0 => Some(t),
                _ => None,
            };
            if let Some(t) = time {
                self.last_window = self.window_of(t);
                self.note(t);
            }
            windows.push(self.last_window);
        }
        (windows, round)
    }
}

impl<P: Windowed> Sink for WindowSink<P> {
    fn consume(&mut self, batch: &Batch) -> Result<Flow, StageError> {
        if let (None, Some(info)) = (self.seen, StreamInfo::of(batch)) {
            // A pipe's feature records come before its samples.
            self.facts.observe(batch, info);
        }
        let (windows, round) = self.assign(batch);
        let mut distinct: Vec<u64> = windows.clone();
        distinct.sort_unstable();
        distinct.dedup();
        for &w in &distinct {
            if !self.open.contains_key(&w) {
                let fresh = self.template.next_window();
                self.open.insert(w, fresh);
            }
        }
        match distinct[..] {
            [] => {}
            [w] => self.open.get_mut(&w).expect("opened").add(batch),
            _ => {
                // The batch's records of each window, in stream order.
                let mut part = Batch {
                    spans: Vec::new(),
                    ..batch.clone()
                };
                for w in distinct {
                    part.spans.clear();
                    let spans = batch.spans.iter().zip(&windows);
                    part.spans
                        .extend(spans.filter(|(_, &x)| x == w).map(|(s, _)| *s));
                    self.open.get_mut(&w).expect("opened").add(&part);
                }
            }
        }
        if round || self.open.len() > 2 {
            self.emit_closed();
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self) -> Result<(), StageError> {
        let open = std::mem::take(&mut self.open);
        let last = open.len();
        for (i, (start, profile)) in open.into_iter().enumerate() {
            self.emit(start, profile, i + 1 == last);
        }
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
        let mut c = self.template.counters();
        c.extend(self.pusher.counters());
        c.push(("samples_late", self.samples_late.clone()));
        c
    }
}

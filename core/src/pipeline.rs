//! The pipeline builder and runner.
//!
//! [`Pipeline`] chains one [`Source`], any number of [`Stage`]s and one [`Sink`]. [`Pipeline::spawn`]
//! runs each on its own named OS thread, joined by `crossbeam_channel::bounded` channels of
//! [`Batch`]es. The runner owns the threads, the channels and the counting:
//!
//! - **End of stream** travels by disconnection: when a stage's input channel is empty and every
//!   sender is gone, the stage is flushed and drops its own sender, which ends the next stage.
//! - **Early stop** ([`Flow::Stop`]): the stage is flushed and closes its output like at end of stream,
//!   and drops its input, so the stage before it stops at its next send.
//! - **Errors and panics** end the failing stage the same way, without flushing it. Everything it
//!   emitted before the error still reaches the sink; upstream stages stop at their next send. The
//!   error is reported with the stage's name, and no error is lost: [`Report::errors`] holds all of
//!   them in the order they happened.
//! - **Parallel stages** ([`Pipeline::parallel_stage`]): the runner starts the workers with the
//!   other threads, reports a failure to start one as [`Error::Spawn`], and joins them in
//!   [`Running::wait`] before it reports.
//! - **Ticks**: a stage whose [`Stage::tick_interval`] is set waits for input at most that long,
//!   then [`Stage::tick`] runs, so it can act (and emit) while its input is quiet.
//! - A source blocked in a read when the rest of the pipeline has ended is left behind (detached)
//!   rather than waited for; [`Report::ends`] says so.
//! - **Timeline** ([`Pipeline::timeline`]): one more thread samples every stage's counters
//!   periodically, for [`Report::timeline`] ([`crate::Timeline`]).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::batch::{Batch, BufferPool};
use crate::metrics::{Phase, StageMetrics, StageSnapshot};
use crate::parallel::{self, Factory};
use crate::stage::{Flow, Out, Sink, Source, Stage, StageError};
use crate::timeline::{Recorder, Sampler, Timeline};

/// Tunables of a pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Target size of a batch in bytes; sources read this much at a time.
    pub batch_bytes: usize,
    /// Capacity of each channel between two stages, in batches.
    pub queue_capacity: usize,
    /// Whether the runner counts and times (three clock reads per batch per stage, plus the
    /// I/O stages' two per syscall). Off only to measure what measuring costs.
    pub measure: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            batch_bytes: 256 * 1024,
            queue_capacity: 4,
            measure: true,
        }
    }
}

impl Settings {
    /// The most batches that can be alive at once in a pipeline of `stages` threads: one in each
    /// queue slot plus one being worked on by each thread, plus the idle pool. Multiply by
    /// `batch_bytes` for the memory bound of the batch buffers.
    pub fn max_batches(&self, stages: usize) -> usize {
        stages.saturating_sub(1) * self.queue_capacity + stages + self.pool_capacity(stages)
    }

    fn pool_capacity(&self, stages: usize) -> usize {
        stages + self.queue_capacity
    }
}

/// An error reported by the runner.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A stage returned an error.
    #[error("{stage}: {source}")]
    Stage {
        /// Name of the stage.
        stage: String,
        /// What the stage reported.
        #[source]
        source: StageError,
    },
    /// A stage panicked.
    #[error("{stage}: panicked: {message}")]
    Panic {
        /// Name of the stage.
        stage: String,
        /// The panic message, when it was a string.
        message: String,
    },
    /// The pipeline was built without a source or without a sink.
    #[error("a pipeline needs a source and a sink")]
    Incomplete,
    /// A stage thread could not be started.
    #[error("{stage}: cannot start thread: {source}")]
    Spawn {
        /// Name of the stage.
        stage: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// The name of the stage the error belongs to, if any.
    pub fn stage(&self) -> Option<&str> {
        match self {
            Error::Stage { stage, .. }
            | Error::Panic { stage, .. }
            | Error::Spawn { stage, .. } => Some(stage),
            Error::Incomplete => None,
        }
    }
}

/// How a stage's thread ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Its input ended (or, for a source, its input was exhausted).
    Eof,
    /// It returned [`Flow::Stop`].
    Stopped,
    /// The stage after it had gone, so it stopped.
    DownstreamClosed,
    /// The pipeline was cancelled ([`Running::cancel`]).
    Cancelled,
    /// It returned an error or panicked.
    Failed,
    /// It had not ended when the rest of the pipeline had (a source blocked in a read).
    Detached,
}

/// The result of a run: final metrics, how each stage ended and every error.
#[derive(Debug)]
pub struct Report {
    /// Final metrics, in pipeline order.
    pub stages: Vec<StageSnapshot>,
    /// How each stage ended, in pipeline order.
    pub ends: Vec<End>,
    /// Every error, in the order the runner saw them. The first is the cause of the end.
    pub errors: Vec<Error>,
    /// Wall time from spawn to the end.
    pub wall: Duration,
    /// The counters as they changed, when [`Pipeline::timeline`] asked for them.
    pub timeline: Option<Timeline>,
}

impl Report {
    /// Whether every stage ended normally.
    pub fn is_ok(&self) -> bool {
        self.errors.is_empty()
    }
}

enum Node {
    Source(Box<dyn Source>),
    Stage(Box<dyn Stage>),
    /// A stage run on `workers` threads; becomes a `Stage` (the coordinator) at spawn.
    Parallel {
        workers: usize,
        make: Factory,
    },
    Sink(Box<dyn Sink>),
}

/// Builds a pipeline: `source → stage* → sink`.
///
/// ```
/// use perfpipe_core::{Batch, Flow, Out, Pipeline, Settings, Sink, Source, StageError};
///
/// struct Numbers(u8);
/// impl Source for Numbers {
///     fn produce(&mut self, out: &mut Out<'_>) -> Result<Flow, StageError> {
///         if self.0 == 0 { return Ok(Flow::Stop) }
///         let mut b = out.take();
///         b.data.push(self.0);
///         self.0 -= 1;
///         out.push(b);
///         Ok(Flow::Continue)
///     }
/// }
/// struct Sum(std::sync::Arc<std::sync::atomic::AtomicU64>);
/// impl Sink for Sum {
///     fn consume(&mut self, b: &Batch) -> Result<Flow, StageError> {
///         self.0.fetch_add(b.payload()[0] as u64, std::sync::atomic::Ordering::Relaxed);
///         Ok(Flow::Continue)
///     }
/// }
/// let total = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
/// let report = Pipeline::new(Settings::default())
///     .source("numbers", Numbers(4))
///     .sink("sum", Sum(total.clone()))
///     .run();
/// assert!(report.is_ok());
/// assert_eq!(total.load(std::sync::atomic::Ordering::Relaxed), 4 + 3 + 2 + 1);
/// assert_eq!(report.stages[1].input.batches, 4);
/// ```
pub struct Pipeline {
    settings: Settings,
    nodes: Vec<(String, Node)>,
    timeline: bool,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.nodes.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Pipeline")
            .field("settings", &self.settings)
            .field("nodes", &names)
            .field("timeline", &self.timeline)
            .finish()
    }
}

impl Pipeline {
    /// An empty pipeline with these settings.
    pub fn new(settings: Settings) -> Pipeline {
        Pipeline {
            settings,
            nodes: Vec::new(),
            timeline: false,
        }
    }

    /// Samples every stage's counters while the pipeline runs, on a thread of its own
    /// (`timeline`), into [`Report::timeline`]: every 62.5 ms at first, less often as the run
    /// grows (at most [`crate::timeline::MAX_INTERVALS`] intervals). Without it, no thread and no
    /// cost. See [`crate::Timeline`].
    ///
    /// ```
    /// use perfpipe_core::harness::{framed, Collect, Feed};
    /// use perfpipe_core::{Pipeline, Settings};
    ///
    /// let input: Vec<_> = (0..100u8).map(|i| framed(&[(&[i], 0)])).collect();
    /// let report = Pipeline::new(Settings::default())
    ///     .source("feed", Feed::new(input))
    ///     .sink("collect", Collect::new())
    ///     .timeline()
    ///     .run();
    /// let timeline = report.timeline.expect("asked for");
    /// // The intervals add up to the totals.
    /// let records: u64 = timeline.intervals().iter().map(|i| i.stages[1].records_in).sum();
    /// assert_eq!(records, report.stages[1].input.records);
    /// assert_eq!(records, 100);
    /// ```
    pub fn timeline(mut self) -> Pipeline {
        self.timeline = true;
        self
    }

    /// Sets the source (the first node). Replaces any previous source.
    pub fn source(mut self, name: impl Into<String>, source: impl Source + 'static) -> Pipeline {
        self.nodes.retain(|(_, n)| !matches!(n, Node::Source(_)));
        self.nodes
            .insert(0, (name.into(), Node::Source(Box::new(source))));
        self
    }

    /// Appends a transform stage.
    pub fn stage(self, name: impl Into<String>, stage: impl Stage + 'static) -> Pipeline {
        self.boxed_stage(name, Box::new(stage))
    }

    /// Appends a boxed transform stage (as built from a registry).
    pub fn boxed_stage(self, name: impl Into<String>, stage: Box<dyn Stage>) -> Pipeline {
        self.transform(name.into(), Node::Stage(stage))
    }

    /// Appends a stage that runs on `workers` threads (0: one per available CPU), each with its
    /// own instance built by `make`, without reordering the stream: for a slow per-record
    /// transform. Batches are numbered as they arrive, handed to whichever worker is free, and
    /// their results are released strictly in arrival order, so the output is byte-identical to
    /// running one instance sequentially, provided the stage treats each batch on its own (a stage
    /// whose output depends on earlier batches cannot be split this way).
    ///
    /// The workers are the runner's threads, named `{name}/{index}`: they are started by
    /// [`Pipeline::spawn`] (a failure is [`Error::Spawn`]) and joined by [`Running::wait`]. They take
    /// their batches from the pipeline's pool. The stage is measured like any other under `name`,
    /// with the counters `reorder_buffered_max` (most results held waiting for an earlier one) and
    /// `head_of_line_wait_ns` (time spent waiting for the oldest batch while later ones were
    /// done); the workers' own [`Stage::counters`] are not registered.
    ///
    /// - **Order**: input order, always.
    /// - **Buffering**: at most `2 × workers` batches in flight; when that many are out, the stage
    ///   waits for the oldest (head-of-line wait).
    /// - **EOF**: every outstanding batch is collected, then each worker's instance is flushed,
    ///   worker 0 first, and what they emit follows in that order.
    /// - **Errors**: a worker's error or panic is reported when its batch's turn comes, after every
    ///   earlier batch's output has been emitted.
    ///
    /// ```
    /// use perfpipe_core::harness::{framed, Collect, Feed};
    /// use perfpipe_core::{Batch, Flow, Out, Pipeline, Settings, Stage, StageError};
    ///
    /// /// Upper-cases every record: the stand-in for a slow per-record transform.
    /// struct Upper;
    /// impl Stage for Upper {
    ///     fn process(&mut self, mut b: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
    ///         b.data.make_ascii_uppercase();
    ///         out.push(b);
    ///         Ok(Flow::Continue)
    ///     }
    /// }
    /// let input: Vec<Batch> = (b'a'..=b'z').map(|c| framed(&[(&[c], 0)])).collect();
    /// let sink = Collect::new();
    /// let report = Pipeline::new(Settings::default())
    ///     .source("letters", Feed::new(input))
    ///     .parallel_stage("upper", 3, || Upper)
    ///     .sink("collect", sink.clone())
    ///     .run();
    /// assert!(report.is_ok(), "{:?}", report.errors);
    /// assert_eq!(sink.bytes(), b"ABCDEFGHIJKLMNOPQRSTUVWXYZ");
    /// assert!(report.stages[1].counters.iter().any(|(n, _)| *n == "reorder_buffered_max"));
    /// ```
    pub fn parallel_stage<S, F>(
        self,
        name: impl Into<String>,
        workers: usize,
        mut make: F,
    ) -> Pipeline
    where
        S: Stage + 'static,
        F: FnMut() -> S + Send + 'static,
    {
        let workers = match workers {
            0 => std::thread::available_parallelism().map_or(1, usize::from),
            n => n,
        };
        let make: Factory = Box::new(move || Box::new(make()));
        self.transform(name.into(), Node::Parallel { workers, make })
    }

    /// Inserts a transform node before the sink.
    fn transform(mut self, name: String, node: Node) -> Pipeline {
        let at = self
            .nodes
            .iter()
            .position(|(_, n)| matches!(n, Node::Sink(_)))
            .unwrap_or(self.nodes.len());
        self.nodes.insert(at, (name, node));
        self
    }

    /// Sets the sink (the last node). Replaces any previous sink.
    pub fn sink(mut self, name: impl Into<String>, sink: impl Sink + 'static) -> Pipeline {
        self.nodes.retain(|(_, n)| !matches!(n, Node::Sink(_)));
        self.nodes.push((name.into(), Node::Sink(Box::new(sink))));
        self
    }

    /// Spawns and waits: `self.spawn()?.wait()`, with a spawn failure reported in the [`Report`].
    pub fn run(self) -> Report {
        match self.spawn() {
            Ok(running) => running.wait(),
            Err(e) => Report {
                stages: Vec::new(),
                ends: Vec::new(),
                errors: vec![e],
                wall: Duration::ZERO,
                timeline: None,
            },
        }
    }

    /// Starts one thread per node and returns at once.
    ///
    /// # Errors
    /// [`Error::Incomplete`] without a source or a sink; [`Error::Spawn`] if a thread cannot start
    /// (the threads already started are then ended by disconnection).
    pub fn spawn(self) -> Result<Running, Error> {
        let n = self.nodes.len();
        let complete = n >= 2
            && matches!(self.nodes[0].1, Node::Source(_))
            && matches!(self.nodes[n - 1].1, Node::Sink(_));
        if !complete {
            return Err(Error::Incomplete);
        }
        let settings = self.settings;
        let pool = BufferPool::new(settings.pool_capacity(n), settings.batch_bytes);
        let cancel = Arc::new(AtomicBool::new(false));
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        let started = Instant::now();

        let mut metrics = Vec::with_capacity(n);
        let mut handles = Vec::with_capacity(n);
        let mut workers = Vec::with_capacity(n);
        let mut upstream: Option<Receiver<Sent>> = None;
        for (index, (name, node)) in self.nodes.into_iter().enumerate() {
            let (node, node_workers) = match node {
                Node::Parallel { workers, mut make } => {
                    let started = parallel::start(&name, workers, &mut make, &pool);
                    let (coordinator, threads) = started.inspect_err(|_| {
                        cancel.store(true, Ordering::Relaxed);
                    })?;
                    (Node::Stage(Box::new(coordinator)), threads)
                }
                node => (node, Vec::new()),
            };
            workers.push(node_workers);
            let counters = match &node {
                Node::Source(s) => s.counters(),
                Node::Stage(s) => s.counters(),
                Node::Parallel { .. } => unreachable!("started above"),
                Node::Sink(s) => s.counters(),
            };
            let notes = match &node {
                Node::Stage(s) => s.notes(),
                _ => None,
            };
            let is_sink = matches!(node, Node::Sink(_));
            let capacity = if is_sink { 0 } else { settings.queue_capacity };
            let m = StageMetrics::new(name.clone(), capacity, counters, notes, metrics.last());
            let (tx, rx) = if is_sink {
                (None, None)
            } else {
                let (tx, rx) = crossbeam_channel::bounded(settings.queue_capacity);
                (Some(tx), Some(rx))
            };
            let ctx = Ctx {
                measure: settings.measure,
                phases: settings.measure && self.timeline,
                epoch: started,
                metrics: m.clone(),
                pool: pool.clone(),
                cancel: cancel.clone(),
            };
            let input = upstream.take();
            upstream = rx;
            let done = done_tx.clone();
            let thread_name = name.clone();
            let body = move || {
                let born = Instant::now();
                let result = catch_unwind(AssertUnwindSafe(|| match node {
                    Node::Source(s) => run_source(s, tx.expect("source has output"), &ctx),
                    Node::Stage(s) => run_stage(
                        s,
                        input.expect("stage has input"),
                        tx.expect("stage has output"),
                        &ctx,
                    ),
                    Node::Parallel { .. } => unreachable!("started as a stage"),
                    Node::Sink(s) => run_sink(s, input.expect("sink has input"), &ctx),
                }));
                let (end, error) = match result {
                    Ok((end, None)) => (end, None),
                    Ok((end, Some(source))) => (
                        end,
                        Some(Error::Stage {
                            stage: name,
                            source,
                        }),
                    ),
                    Err(payload) => (
                        End::Failed,
                        Some(Error::Panic {
                            stage: name,
                            message: panic_message(&*payload),
                        }),
                    ),
                };
                // No cancel flag here: a stage that ends drops its input, and the stages before it
                // stop at their next send without flushing. Stopping the source directly instead
                // would hand the stages in between an early end of stream, which they would take
                // for a truncated input.
                ctx.metrics.set_lifetime(born.elapsed());
                let _ = done.send(Done { index, end, error });
            };
            match std::thread::Builder::new()
                .name(thread_name.clone())
                .spawn(body)
            {
                Ok(h) => handles.push(Some(h)),
                Err(source) => {
                    cancel.store(true, Ordering::Relaxed);
                    return Err(Error::Spawn {
                        stage: thread_name,
                        source,
                    });
                }
            }
            metrics.push(m);
        }
        let sampler = if self.timeline {
            let sampler = Sampler::start(&metrics, started).map_err(|source| {
                cancel.store(true, Ordering::Relaxed);
                Error::Spawn {
                    stage: "timeline".into(),
                    source,
                }
            })?;
            Some(sampler)
        } else {
            None
        };
        Ok(Running {
            metrics,
            handles,
            workers,
            done_rx,
            cancel,
            started,
            sampler,
        })
    }
}

/// A pipeline whose threads are running.
#[derive(Debug)]
pub struct Running {
    metrics: Vec<StageMetrics>,
    handles: Vec<Option<JoinHandle<()>>>,
    /// The worker threads of each node (only parallel stages have any).
    workers: Vec<Vec<JoinHandle<()>>>,
    done_rx: Receiver<Done>,
    cancel: Arc<AtomicBool>,
    started: Instant,
    sampler: Option<Sampler>,
}

#[derive(Debug)]
struct Done {
    index: usize,
    end: End,
    error: Option<Error>,
}

impl Running {
    /// Live metrics handles, in pipeline order; read them while the pipeline runs (e.g. for progress).
    pub fn metrics(&self) -> &[StageMetrics] {
        &self.metrics
    }

    /// The samples taken so far, when [`Pipeline::timeline`] asked for them: for a report made
    /// without waiting for the threads.
    pub fn timeline(&self) -> Option<Recorder> {
        self.sampler.as_ref().map(|s| s.recorder().clone())
    }

    /// Time since the pipeline was spawned.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Asks the source to stop producing. What it already produced still flows to the sink.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    /// A handle that cancels like [`Running::cancel`], usable from another thread (e.g. a signal
    /// handler thread).
    pub fn cancel_flag(&self) -> Arc<AtomicBool> {
        self.cancel.clone()
    }

    /// Waits until every stage after the source has ended (and the source too, unless it is blocked
    /// with nowhere left to send), then returns the report.
    pub fn wait(mut self) -> Report {
        let n = self.handles.len();
        let mut ends: Vec<Option<End>> = vec![None; n];
        let mut errors = Vec::new();
        // Every node but the source must report; the source is waited for only while the rest runs.
        while ends[1..].iter().any(Option::is_none) {
            let Ok(done) = self.done_rx.recv() else { break };
            self.record(done, &mut ends, &mut errors);
        }
        // The rest has ended: give the source a moment to notice, then leave it if blocked.
        self.cancel.store(true, Ordering::Relaxed);
        if ends[0].is_none() {
            if let Ok(done) = self.done_rx.recv_timeout(Duration::from_millis(50)) {
                self.record(done, &mut ends, &mut errors);
            }
        }
        let wall = self.started.elapsed();
        let ends = ends
            .into_iter()
            .map(|e| e.unwrap_or(End::Detached))
            .collect();
        // The last sample and the report read the same final counters.
        let timeline = self.sampler.take().map(|s| s.finish(wall));
        Report {
            stages: self.metrics.iter().map(StageMetrics::snapshot).collect(),
            ends,
            errors,
            wall,
            timeline,
        }
    }

    fn record(&mut self, done: Done, ends: &mut [Option<End>], errors: &mut Vec<Error>) {
        ends[done.index] = Some(done.end);
        if let Some(e) = done.error {
            errors.push(e);
        }
        if let Some(h) = self.handles[done.index].take() {
            let _ = h.join();
        }
        // The node has gone, and with it the workers' job queue: each finishes the batch it
        // holds, if any, and returns.
        for h in self.workers[done.index].drain(..) {
            let _ = h.join();
        }
    }
}

struct Ctx {
    measure: bool,
    /// Whether to publish each [`Phase`] for the timeline's sampler.
    phases: bool,
    epoch: Instant,
    metrics: StageMetrics,
    pool: BufferPool,
    cancel: Arc<AtomicBool>,
}

impl Ctx {
    /// The time, or a fixed instant when not measuring (all durations then come out zero).
    #[inline]
    fn now(&self) -> Instant {
        if self.measure {
            Instant::now()
        } else {
            self.epoch
        }
    }

    /// Publishes the phase the thread enters at `at`, when a timeline samples them. Called before
    /// [`StageMetrics::add_times`] for the phases it closes.
    #[inline]
    fn enter(&self, phase: Phase, at: Instant) {
        if self.phases {
            self.metrics.enter(phase, at - self.epoch);
        }
    }
}

/// A batch in a channel, with its stream bytes as counted once by the sender, so the receiver
/// counts its input without another pass over the spans.
struct Sent {
    batch: Batch,
    bytes: u64,
}

/// Sends every batch in `pending`, counting and timing. Returns false if downstream has gone.
fn send_all(pending: &mut Vec<Batch>, tx: &Sender<Sent>, ctx: &Ctx) -> bool {
    for batch in pending.drain(..) {
        let bytes = if ctx.measure {
            ctx.metrics.sample_queue(tx.len());
            ctx.metrics.output().count(&batch)
        } else {
            0
        };
        if let Err(e) = tx.send(Sent { batch, bytes }) {
            // Downstream has gone; the rest of `pending` is dropped with the drain.
            ctx.pool.put(e.into_inner().batch);
            return false;
        }
    }
    true
}

fn run_source(
    mut source: Box<dyn Source>,
    tx: Sender<Sent>,
    ctx: &Ctx,
) -> (End, Option<StageError>) {
    let mut pending = Vec::new();
    let mut t0 = ctx.now();
    ctx.enter(Phase::Other, t0);
    loop {
        if ctx.cancel.load(Ordering::Relaxed) {
            return (End::Cancelled, None);
        }
        let result = source.produce(&mut Out::new(&mut pending, &ctx.pool));
        let t1 = ctx.now();
        ctx.enter(Phase::Blocked, t1);
        let waited = source.take_io_wait().min(t1 - t0);
        let sent = send_all(&mut pending, &tx, ctx);
        let t2 = ctx.now();
        ctx.enter(Phase::Other, t2);
        ctx.metrics.add_times(t1 - t0 - waited, waited, t2 - t1);
        t0 = t2;
        match result {
            Err(e) => return (End::Failed, Some(e)),
            Ok(_) if !sent => return (End::DownstreamClosed, None),
            Ok(Flow::Stop) => return (End::Eof, None),
            Ok(Flow::Continue) => {}
        }
    }
}

fn run_stage(
    mut stage: Box<dyn Stage>,
    rx: Receiver<Sent>,
    tx: Sender<Sent>,
    ctx: &Ctx,
) -> (End, Option<StageError>) {
    let mut pending = Vec::new();
    let mut t0 = ctx.now();
    ctx.enter(Phase::Starved, t0);
    let tick = stage.tick_interval();
    let end = loop {
        let received = match tick {
            None => rx.recv().ok(),
            Some(d) => match rx.recv_timeout(d) {
                Ok(sent) => Some(sent),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => break End::Eof,
            },
        };
        let t1 = ctx.now();
        ctx.enter(Phase::Working, t1);
        let result = match received {
            Some(Sent { batch, bytes }) => {
                if ctx.measure {
                    ctx.metrics.input().count_received(&batch, bytes);
                }
                stage.process(batch, &mut Out::new(&mut pending, &ctx.pool))
            }
            None if tick.is_none() => break End::Eof,
            None => stage.tick(&mut Out::new(&mut pending, &ctx.pool)),
        };
        let t2 = ctx.now();
        ctx.enter(Phase::Blocked, t2);
        let sent = send_all(&mut pending, &tx, ctx);
        let t3 = ctx.now();
        let goes_on = sent && matches!(result, Ok(Flow::Continue));
        ctx.enter(
            if goes_on {
                Phase::Starved
            } else {
                Phase::Other
            },
            t3,
        );
        ctx.metrics.add_times(t2 - t1, t1 - t0, t3 - t2);
        t0 = t3;
        match result {
            Err(e) => return (End::Failed, Some(e)),
            Ok(_) if !sent => return (End::DownstreamClosed, None),
            Ok(Flow::Stop) => break End::Stopped,
            Ok(Flow::Continue) => {}
        }
    };
    // Drop the input first so upstream stops at once rather than after our flush.
    drop(rx);
    let t1 = ctx.now();
    ctx.enter(Phase::Working, t1);
    let result = stage.flush(&mut Out::new(&mut pending, &ctx.pool));
    let t2 = ctx.now();
    ctx.enter(Phase::Blocked, t2);
    let sent = send_all(&mut pending, &tx, ctx);
    let t3 = ctx.now();
    ctx.enter(Phase::Other, t3);
    // The last wait for input, the one that ended in a disconnection, is starved time too.
    ctx.metrics.add_times(t2 - t1, t1 - t0, t3 - t2);
    match result {
        Err(e) => (End::Failed, Some(e)),
        Ok(()) if !sent => (End::DownstreamClosed, None),
        Ok(()) => (end, None),
    }
}

fn run_sink(mut sink: Box<dyn Sink>, rx: Receiver<Sent>, ctx: &Ctx) -> (End, Option<StageError>) {
    let mut t0 = ctx.now();
    ctx.enter(Phase::Starved, t0);
    let end = loop {
        let Ok(Sent { batch, bytes }) = rx.recv() else {
            break End::Eof;
        };
        let t1 = ctx.now();
        ctx.enter(Phase::Other, t1);
        if ctx.measure {
            ctx.metrics.input().count_received(&batch, bytes);
        }
        let result = sink.consume(&batch);
        ctx.pool.put(batch);
        let t2 = ctx.now();
        let goes_on = matches!(result, Ok(Flow::Continue));
        ctx.enter(
            if goes_on {
                Phase::Starved
            } else {
                Phase::Other
            },
            t2,
        );
        let waited = sink.take_io_wait().min(t2 - t1);
        ctx.metrics.add_times(t2 - t1 - waited, t1 - t0, waited);
        t0 = t2;
        match result {
            Err(e) => return (End::Failed, Some(e)),
            Ok(Flow::Stop) => break End::Stopped,
            Ok(Flow::Continue) => {}
        }
    };
    drop(rx);
    let t1 = ctx.now();
    ctx.enter(Phase::Other, t1);
    let result = sink.finish();
    let t2 = ctx.now();
    let waited = sink.take_io_wait().min(t2 - t1);
    // The last wait for input, the one that ended in a disconnection, is starved time too.
    ctx.metrics.add_times(t2 - t1 - waited, t1 - t0, waited);
    match result {
        Err(e) => (End::Failed, Some(e)),
        Ok(()) => (end, None),
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

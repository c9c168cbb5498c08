//! The order-preserving parallel stage that [`Pipeline::parallel_stage`] adds and the runner
//! spawns: a coordinator ([`Parallel`], run by the runner like any stage) and its worker threads.
//!
//! Each worker owns its own instance of the stage (built by a factory, so per-worker state is
//! allowed). Batches are numbered as they arrive, handed to whichever worker is free, and their
//! results go through a reorder buffer that releases them strictly in arrival order. The guarantees
//! (order, buffering, EOF, errors) are listed on [`Pipeline::parallel_stage`].
//!
//! Counters: `reorder_buffered_max` (most results held waiting for an earlier one) and
//! `head_of_line_wait_ns` (time spent waiting for the oldest batch while later ones were done).
//!
//! [`Pipeline::parallel_stage`]: crate::Pipeline::parallel_stage

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use crate::batch::{Batch, BufferPool};
use crate::metrics::Counter;
use crate::pipeline::Error;
use crate::stage::{Flow, Out, Stage, StageError};

/// What a worker sends back for one batch.
type Outcome = Result<(Vec<Batch>, Flow), StageError>;

enum Job {
    Batch(u64, Batch),
    Flush,
}

/// Builds one worker's instance of a parallel stage.
pub(crate) type Factory = Box<dyn FnMut() -> Box<dyn Stage> + Send>;

/// The coordinator of a parallel stage: numbers batches, hands them to the workers and releases
/// their results in order. Its workers are started by [`start`].
pub(crate) struct Parallel {
    jobs: Option<Sender<Job>>,
    results: Receiver<(u64, Outcome)>,
    flushed: Receiver<(usize, Result<Vec<Batch>, StageError>)>,
    workers: usize,
    next_seq: u64,
    next_out: u64,
    ready: BTreeMap<u64, Outcome>,
    stopped: bool,
    buffered_max: Counter,
    hol_wait_ns: Counter,
}

impl std::fmt::Debug for Parallel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parallel")
            .field("workers", &self.workers)
            .field("in_flight", &(self.next_seq - self.next_out))
            .finish()
    }
}

/// Starts `workers` threads named `{name}/{index}`, each running its own instance of the stage
/// `make` builds and taking its batches from `pool`; returns the coordinator, to be run as the
/// stage, and the threads, which end once the coordinator has gone.
///
/// # Errors
/// [`Error::Spawn`] if a thread cannot start; the workers started before it then end at once.
pub(crate) fn start(
    name: &str,
    workers: usize,
    make: &mut Factory,
    pool: &BufferPool,
) -> Result<(Parallel, Vec<JoinHandle<()>>), Error> {
    let (jobs_tx, jobs_rx) = crossbeam_channel::bounded::<Job>(workers);
    let (res_tx, results) = crossbeam_channel::unbounded();
    let (flush_tx, flushed) = crossbeam_channel::unbounded();
    let mut handles = Vec::with_capacity(workers);
    for index in 0..workers {
        let mut stage = make();
        let (jobs, res, flush, pool) = (
            jobs_rx.clone(),
            res_tx.clone(),
            flush_tx.clone(),
            pool.clone(),
        );
        let started = std::thread::Builder::new()
            .name(format!("{name}/{index}"))
            .spawn(move || worker(index, &mut *stage, &jobs, &res, &flush, &pool));
        match started {
            Ok(h) => handles.push(h),
            // Dropping `jobs_tx` on return ends the workers already started.
            Err(source) => {
                return Err(Error::Spawn {
                    stage: name.to_string(),
                    source,
                })
            }
        }
    }
    let coordinator = Parallel {
        jobs: Some(jobs_tx),
        results,
        flushed,
        workers,
        next_seq: 0,
        next_out: 0,
        ready: BTreeMap::new(),
        stopped: false,
        buffered_max: Counter::new(),
        hol_wait_ns: Counter::new(),
    };
    Ok((coordinator, handles))
}

impl Parallel {
    /// Emits every result that is next in order. Returns the first error, in order.
    fn release(&mut self, out: &mut Out<'_>) -> Result<(), StageError> {
        while let Some(outcome) = self.ready.remove(&self.next_out) {
            self.next_out += 1;
            let (batches, flow) = outcome?;
            if !self.stopped {
                batches.into_iter().for_each(|b| out.push(b));
            } else {
                batches.into_iter().for_each(|b| out.recycle(b));
            }
            self.stopped |= flow == Flow::Stop;
        }
        Ok(())
    }

    /// Moves finished results into the reorder buffer; blocks for one if `wait`.
    fn collect(&mut self, wait: bool) {
        if wait {
            let t = Instant::now();
            if let Ok((seq, r)) = self.results.recv() {
                self.ready.insert(seq, r);
            }
            if !self.ready.contains_key(&self.next_out) || self.ready.len() > 1 {
                self.hol_wait_ns.add(t.elapsed().as_nanos() as u64);
            }
        }
        while let Ok((seq, r)) = self.results.try_recv() {
            self.ready.insert(seq, r);
        }
        let held = self
            .ready
            .len()
            .saturating_sub(usize::from(self.ready.contains_key(&self.next_out)));
        self.buffered_max.max(held as u64);
    }
}

fn worker(
    index: usize,
    stage: &mut dyn Stage,
    jobs: &Receiver<Job>,
    results: &Sender<(u64, Outcome)>,
    flushed: &Sender<(usize, Result<Vec<Batch>, StageError>)>,
    pool: &BufferPool,
) {
    while let Ok(job) = jobs.recv() {
        match job {
            Job::Batch(seq, batch) => {
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    let mut emitted = Vec::new();
                    let flow = stage.process(batch, &mut Out::new(&mut emitted, pool))?;
                    Ok((emitted, flow))
                }))
                .unwrap_or_else(|p| Err(panic_error(index, &*p)));
                if results.send((seq, outcome)).is_err() {
                    return;
                }
            }
            Job::Flush => {
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    let mut emitted = Vec::new();
                    stage.flush(&mut Out::new(&mut emitted, pool))?;
                    Ok(emitted)
                }))
                .unwrap_or_else(|p| Err(panic_error(index, &*p)));
                let _ = flushed.send((index, outcome));
                return;
            }
        }
    }
}

fn panic_error(index: usize, payload: &(dyn std::any::Any + Send)) -> StageError {
    let msg = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into());
    format!("worker {index} panicked: {msg}").into()
}

impl Stage for Parallel {
    fn process(&mut self, batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        let in_flight = (self.next_seq - self.next_out) as usize;
        if in_flight >= 2 * self.workers {
            // Wait until the oldest batch is back.
            while !self.ready.contains_key(&self.next_out) {
                self.collect(true);
            }
        }
        let jobs = self.jobs.as_ref().expect("jobs open until flush");
        jobs.send(Job::Batch(self.next_seq, batch))
            .map_err(|_| "parallel workers have gone")?;
        self.next_seq += 1;
        self.collect(false);
        self.release(out)?;
        Ok(if self.stopped {
            Flow::Stop
        } else {
            Flow::Continue
        })
    }

    fn flush(&mut self, out: &mut Out<'_>) -> Result<(), StageError> {
        while self.next_out < self.next_seq {
            if !self.ready.contains_key(&self.next_out) {
                self.collect(true);
            }
            self.release(out)?;
        }
        let jobs = self.jobs.take().expect("flushed once");
        for _ in 0..self.workers {
            let _ = jobs.send(Job::Flush);
        }
        drop(jobs);
        let mut flushed: Vec<(usize, Result<Vec<Batch>, StageError>)> =
            self.flushed.iter().take(self.workers).collect();
        flushed.sort_by_key(|(i, _)| *i);
        for (_, r) in flushed {
            r?.into_iter().for_each(|b| out.push(b));
        }
        // The workers return after their flush; the runner joins them.
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![
            ("reorder_buffered_max", self.buffered_max.clone()),
            ("head_of_line_wait_ns", self.hol_wait_ns.clone()),
        ]
    }
}

impl Drop for Parallel {
    fn drop(&mut self) {
        // Closing the job channel ends idle workers; busy ones finish their batch and see it closed.
        self.jobs.take();
    }
}

//! [`Parallel`]: runs a stage on several worker threads without reordering the stream.
//!
//! Each worker owns its own instance of the stage (built by a factory, so per-worker state is
//! allowed). Batches are numbered as they arrive, handed to whichever worker is free, and their
//! results go through a reorder buffer that releases them strictly in arrival order. So a slow,
//! CPU-heavy per-record transform scales across cores while the output stays byte-identical to
//! running the stage sequentially — provided the stage treats each batch on its own (a stage whose
//! output depends on earlier batches cannot be split this way).
//!
//! - **Order**: input order, always.
//! - **Buffering**: at most `2 × workers` batches in flight; when that many are out, the wrapper
//!   waits for the oldest (head-of-line wait).
//! - **EOF**: every outstanding batch is collected, then each worker's stage is flushed, worker 0
//!   first, and what they emit follows in that order.
//! - **Errors**: a worker's error or panic is reported when its batch's turn comes, after every
//!   earlier batch's output has been emitted.
//!
//! Counters: `reorder_buffered_max` (most results held waiting for an earlier one) and
//! `head_of_line_wait_ns` (time spent waiting for the oldest batch while later ones were done).

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use crate::batch::{Batch, BufferPool};
use crate::metrics::Counter;
use crate::stage::{Flow, Out, Stage, StageError};

/// What a worker sends back for one batch.
type Outcome = Result<(Vec<Batch>, Flow), StageError>;

enum Job {
    Batch(u64, Batch),
    Flush,
}

/// An order-preserving parallel wrapper around a stage; see the module docs.
pub struct Parallel {
    jobs: Option<Sender<Job>>,
    results: Receiver<(u64, Outcome)>,
    flushed: Receiver<(usize, Result<Vec<Batch>, StageError>)>,
    workers: Vec<JoinHandle<()>>,
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
            .field("workers", &self.workers.len())
            .field("in_flight", &(self.next_seq - self.next_out))
            .finish()
    }
}

impl Parallel {
    /// Runs `workers` instances of the stage `make` builds, each on its own thread.
    ///
    /// # Panics
    /// Panics if `workers` is 0 or a worker thread cannot be started.
    pub fn new<S, F>(workers: usize, mut make: F) -> Parallel
    where
        S: Stage + 'static,
        F: FnMut() -> S,
    {
        assert!(workers > 0, "a parallel stage needs at least one worker");
        let (jobs_tx, jobs_rx) = crossbeam_channel::bounded::<Job>(workers);
        let (res_tx, results) = crossbeam_channel::unbounded();
        let (flush_tx, flushed) = crossbeam_channel::unbounded();
        let handles = (0..workers)
            .map(|index| {
                let mut stage = make();
                let jobs = jobs_rx.clone();
                let res = res_tx.clone();
                let flush = flush_tx.clone();
                std::thread::Builder::new()
                    .name(format!("worker-{index}"))
                    .spawn(move || worker(index, &mut stage, &jobs, &res, &flush))
                    .expect("cannot start a worker thread")
            })
            .collect();
        Parallel {
            jobs: Some(jobs_tx),
            results,
            flushed,
            workers: handles,
            next_seq: 0,
            next_out: 0,
            ready: BTreeMap::new(),
            stopped: false,
            buffered_max: Counter::new(),
            hol_wait_ns: Counter::new(),
        }
    }

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
) {
    let pool = BufferPool::new(2, 64 * 1024);
    while let Ok(job) = jobs.recv() {
        match job {
            Job::Batch(seq, batch) => {
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    let mut emitted = Vec::new();
                    let flow = stage.process(batch, &mut Out::new(&mut emitted, &pool))?;
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
                    stage.flush(&mut Out::new(&mut emitted, &pool))?;
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
        if in_flight >= 2 * self.workers.len() {
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
        for _ in 0..self.workers.len() {
            let _ = jobs.send(Job::Flush);
        }
        drop(jobs);
        let mut flushed: Vec<(usize, Result<Vec<Batch>, StageError>)> =
            self.flushed.iter().take(self.workers.len()).collect();
        flushed.sort_by_key(|(i, _)| *i);
        for (_, r) in flushed {
            r?.into_iter().for_each(|b| out.push(b));
        }
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
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

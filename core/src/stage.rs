//! The three kinds of stage: [`Source`], [`Stage`] and [`Sink`].
//!
//! Each runs on its own thread, one batch at a time. The runner, not the stage, receives, sends and
//! counts; a stage only transforms.

use crate::batch::{Batch, BufferPool};
use crate::metrics::{Counter, Notes};

/// The error type stages return. The runner wraps it with the stage's name.
pub type StageError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What a stage wants after handling a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Flow {
    /// Keep going.
    Continue,
    /// Stop this stage early: it is flushed, its output is closed (downstream sees end of stream after
    /// draining what was sent) and its input is dropped (upstream stops when it next sends).
    Stop,
}

/// Where a stage puts the batches it emits. The runner sends them downstream, in push order, after
/// the call returns, and counts that time as *blocked*.
#[derive(Debug)]
pub struct Out<'a> {
    batches: &'a mut Vec<Batch>,
    pool: &'a BufferPool,
}

impl<'a> Out<'a> {
    pub(crate) fn new(batches: &'a mut Vec<Batch>, pool: &'a BufferPool) -> Out<'a> {
        Out { batches, pool }
    }

    /// Emits a batch downstream.
    #[inline]
    pub fn push(&mut self, batch: Batch) {
        self.batches.push(batch);
    }

    /// Emits a batch downstream if it holds a record, else gives it back to the pool: for a
    /// stage that removes records, whose batch may end up with none.
    #[inline]
    pub fn push_or_recycle(&mut self, batch: Batch) {
        if batch.spans.is_empty() {
            self.recycle(batch);
        } else {
            self.push(batch);
        }
    }

    /// A cleared batch from the pipeline's pool (recycled when possible).
    #[inline]
    pub fn take(&self) -> Batch {
        self.pool.take()
    }

    /// Gives a batch that will not be emitted back to the pool.
    #[inline]
    pub fn recycle(&self, batch: Batch) {
        self.pool.put(batch)
    }

    /// The pipeline's batch size setting, in bytes.
    pub fn batch_bytes(&self) -> usize {
        self.pool.batch_bytes()
    }
}

/// The start of a pipeline: produces batches until its input ends.
///
/// `produce` is called in a loop; each call should emit at most a few batches. Returning
/// [`Flow::Stop`] means end of input. The runner also stops calling it once the pipeline is
/// cancelled (an error or early stop downstream), so a source should not block for long inside one
/// call when it can avoid it.
pub trait Source: Send {
    /// Emits the next batches into `out`, or returns [`Flow::Stop`] at end of input (after emitting
    /// whatever remained).
    ///
    /// # Errors
    /// An error ends the pipeline; batches emitted before it are still delivered downstream.
    fn produce(&mut self, out: &mut Out<'_>) -> Result<Flow, StageError>;

    /// Time spent waiting on the input (e.g. blocked in `read(2)` on a pipe) since the last call.
    /// The runner counts it as *starved* instead of *working*, which is how it tells a slow producer
    /// from a slow source. The default reports none.
    fn take_io_wait(&mut self) -> std::time::Duration {
        std::time::Duration::ZERO
    }

    /// Counters specific to this source, registered once when the pipeline is built.
    fn counters(&self) -> Vec<(&'static str, Counter)> {
        Vec::new()
    }
}

/// A transform: takes batches, emits batches.
///
/// Implement `process`; `flush` runs once at end of stream (or after [`Flow::Stop`]) and has a
/// default that emits nothing. A stage that does not emit a batch it received should hand it to
/// [`Out::recycle`].
pub trait Stage: Send {
    /// Handles one batch.
    ///
    /// # Errors
    /// An error ends the pipeline. Batches pushed into `out` before the error are still delivered, so
    /// downstream writes every record that came before the fault.
    fn process(&mut self, batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError>;

    /// Called once when the input has ended or the stage stopped itself, to emit what it holds.
    ///
    /// # Errors
    /// As for [`Stage::process`].
    fn flush(&mut self, out: &mut Out<'_>) -> Result<(), StageError> {
        let _ = out;
        Ok(())
    }

    /// Counters specific to this stage, registered once when the pipeline is built.
    fn counters(&self) -> Vec<(&'static str, Counter)> {
        Vec::new()
    }

    /// Findings beyond counters (`--stats-json`'s stage `notes`), registered once when the
    /// pipeline is built; the default has none.
    fn notes(&self) -> Option<Notes> {
        None
    }

    /// How long the stage may wait for input before [`Stage::tick`] is called: for a stage that
    /// must act while its input is quiet (e.g. on a signal). `None`, the default, never ticks.
    fn tick_interval(&self) -> Option<std::time::Duration> {
        None
    }

    /// Called when no batch arrived within [`Stage::tick_interval`]; may emit like
    /// [`Stage::process`]. The default does nothing.
    ///
    /// # Errors
    /// As for [`Stage::process`].
    fn tick(&mut self, out: &mut Out<'_>) -> Result<Flow, StageError> {
        let _ = out;
        Ok(Flow::Continue)
    }
}

/// The end of a pipeline: consumes batches. The runner recycles each batch after `consume`.
pub trait Sink: Send {
    /// Consumes one batch.
    ///
    /// # Errors
    /// An error ends the pipeline; upstream stages stop when they next send.
    fn consume(&mut self, batch: &Batch) -> Result<Flow, StageError>;

    /// Called once at end of stream (also after [`Flow::Stop`]), e.g. to flush buffered output.
    ///
    /// # Errors
    /// As for [`Sink::consume`].
    fn finish(&mut self) -> Result<(), StageError> {
        Ok(())
    }

    /// Time spent waiting on the output (e.g. blocked in `write(2)` on a full pipe) since the last
    /// call. The runner counts it as *blocked* instead of *working*, which is how it tells a slow
    /// consumer from a slow sink. The default reports none.
    fn take_io_wait(&mut self) -> std::time::Duration {
        std::time::Duration::ZERO
    }

    /// Counters specific to this sink, registered once when the pipeline is built.
    fn counters(&self) -> Vec<(&'static str, Counter)> {
        Vec::new()
    }
}

impl<S: Stage + ?Sized> Stage for Box<S> {
    fn process(&mut self, batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        (**self).process(batch, out)
    }
    fn flush(&mut self, out: &mut Out<'_>) -> Result<(), StageError> {
        (**self).flush(out)
    }
    fn counters(&self) -> Vec<(&'static str, Counter)> {
        (**self).counters()
    }
    fn notes(&self) -> Option<Notes> {
        (**self).notes()
    }
    fn tick_interval(&self) -> Option<std::time::Duration> {
        (**self).tick_interval()
    }
    fn tick(&mut self, out: &mut Out<'_>) -> Result<Flow, StageError> {
        (**self).tick(out)
    }
}

impl<S: Sink + ?Sized> Sink for Box<S> {
    fn consume(&mut self, batch: &Batch) -> Result<Flow, StageError> {
        (**self).consume(batch)
    }
    fn finish(&mut self) -> Result<(), StageError> {
        (**self).finish()
    }
    fn take_io_wait(&mut self) -> std::time::Duration {
        (**self).take_io_wait()
    }
    fn counters(&self) -> Vec<(&'static str, Counter)> {
        (**self).counters()
    }
}

//! Pieces for tests and benchmarks of stages: drive one stage without the runner
//! ([`run_stage`]), feed a pipeline given batches ([`Feed`], [`raw_batches`], [`framed`]) and
//! collect what comes out of it ([`Collect`]).
//!
//! ```
//! use perfpipe_core::harness::{framed, Collect, Feed};
//! use perfpipe_core::{Pipeline, Settings};
//!
//! let sink = Collect::new();
//! let report = Pipeline::new(Settings::default())
//!     .source("feed", Feed::new(vec![framed(&[(b"ab", 1)]), framed(&[(b"c", 2), (b"d", 2)])]))
//!     .sink("collect", sink.clone())
//!     .run();
//! assert!(report.is_ok(), "{:?}", report.errors);
//! let got = sink.collected();
//! assert_eq!(got.bytes, b"abcd");
//! assert_eq!(got.batches, 2);
//! assert_eq!(got.spans.iter().map(|s| s.kind).collect::<Vec<_>>(), [1, 2, 2]);
//! assert_eq!(got.record(2), b"d");
//! assert!(got.finished);
//! ```

use std::sync::{Arc, Mutex, MutexGuard};

use crate::batch::{Batch, BufferPool, Span};
use crate::stage::{Flow, Out, Sink, Source, Stage, StageError};

/// Feeds `input` to `stage` in order, then flushes it (also after [`Flow::Stop`]), and returns
/// every batch it emitted, in order. No threads, no channels, no metrics.
///
/// ```
/// use perfpipe_core::{harness, Batch, Flow, Out, Span, Stage, StageError};
///
/// struct Double;
/// impl Stage for Double {
///     fn process(&mut self, b: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
///         out.push(b);
///         let mut extra = out.take();
///         extra.data.push(7);
///         extra.spans.push(Span { start: 0, len: 1, kind: 0, tag: 0 });
///         out.push(extra);
///         Ok(Flow::Continue)
///     }
/// }
/// let out = harness::run_stage(&mut Double, vec![Batch::default()]).unwrap();
/// assert_eq!(out.len(), 2);
/// assert_eq!(out[1].data, [7]);
/// ```
///
/// # Errors
/// The first error the stage returns; what it emitted before is lost with it.
pub fn run_stage(stage: &mut dyn Stage, input: Vec<Batch>) -> Result<Vec<Batch>, StageError> {
    let pool = BufferPool::new(4, 64 * 1024);
    let mut emitted = Vec::new();
    for batch in input {
        if stage.process(batch, &mut Out::new(&mut emitted, &pool))? == Flow::Stop {
            break;
        }
    }
    stage.flush(&mut Out::new(&mut emitted, &pool))?;
    Ok(emitted)
}

/// A framed batch holding `records` (bytes, kind) back to back, in order, with tag 0.
///
/// # Panics
/// Panics if the records add up to 4 GiB or more.
pub fn framed(records: &[(&[u8], u32)]) -> Batch {
    let mut b = Batch::with_capacity(records.iter().map(|(r, _)| r.len()).sum());
    for &(bytes, kind) in records {
        let span = b.append(bytes, kind, 0);
        b.spans.push(span);
    }
    b
}

/// `stream` cut into raw batches as a reader makes them: chunk sizes taken from `sizes` in turn
/// (cycled; 0 counts as 1), each chunk after `headroom` bytes of free space (see
/// [`Batch::start`]), with its `stream_offset` set.
///
/// # Panics
/// Panics if `sizes` is empty.
pub fn raw_batches(stream: &[u8], sizes: &[usize], headroom: usize) -> Vec<Batch> {
    assert!(!sizes.is_empty(), "raw_batches needs at least one size");
    let mut batches = Vec::new();
    let mut pos = 0;
    for &size in sizes.iter().cycle() {
        if pos == stream.len() {
            break;
        }
        let end = (pos + size.max(1)).min(stream.len());
        let mut b = Batch::with_capacity(headroom + end - pos);
        b.data.resize(headroom, 0);
        b.data.extend_from_slice(&stream[pos..end]);
        b.start = headroom;
        b.stream_offset = pos as u64;
        batches.push(b);
        pos = end;
    }
    batches
}

/// A source that emits the batches it is given, in order, one per call, then ends.
///
/// Any iterator will do: a `Vec` of batches, or a lazy one for a long or endless input
/// (`std::iter::repeat_with(|| framed(&[(b"x", 0)]))` runs until the pipeline stops it).
pub struct Feed {
    batches: Box<dyn Iterator<Item = Batch> + Send>,
    emitted: u64,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed")
            .field("emitted", &self.emitted)
            .finish_non_exhaustive()
    }
}

impl Feed {
    /// A source emitting `batches`.
    pub fn new<I>(batches: I) -> Feed
    where
        I: IntoIterator<Item = Batch>,
        I::IntoIter: Send + 'static,
    {
        Feed {
            batches: Box::new(batches.into_iter()),
            emitted: 0,
        }
    }
}

impl Source for Feed {
    fn produce(&mut self, out: &mut Out<'_>) -> Result<Flow, StageError> {
        match self.batches.next() {
            Some(b) => {
                self.emitted += 1;
                out.push(b);
                Ok(Flow::Continue)
            }
            None => Ok(Flow::Stop),
        }
    }
}

/// What a [`Collect`] sink has received.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Collected {
    /// The stream bytes, in order: the records of framed batches ([`Batch::runs`]) and the payload
    /// of raw ones ([`Batch::payload`]), as a writer would write them.
    pub bytes: Vec<u8>,
    /// One span per record received, with `start` rebased to where the record is in `bytes`.
    pub spans: Vec<Span>,
    /// Batches received.
    pub batches: u64,
    /// Whether the sink was finished (end of stream, or after [`Flow::Stop`]).
    pub finished: bool,
}

impl Collected {
    /// The bytes of record `index` (in `spans`).
    ///
    /// # Panics
    /// Panics if `index` is out of range.
    pub fn record(&self, index: usize) -> &[u8] {
        &self.bytes[self.spans[index].range()]
    }
}

/// A sink that keeps everything it receives, for assertions. Clones share what was collected, so
/// keep one clone and give the other to the pipeline.
#[derive(Clone, Debug, Default)]
pub struct Collect(Arc<Mutex<Collected>>);

impl Collect {
    /// An empty collector.
    pub fn new() -> Collect {
        Collect::default()
    }

    /// A copy of what was collected so far.
    pub fn collected(&self) -> Collected {
        self.lock().clone()
    }

    /// The stream bytes collected so far (see [`Collected::bytes`]).
    pub fn bytes(&self) -> Vec<u8> {
        self.lock().bytes.clone()
    }

    fn lock(&self) -> MutexGuard<'_, Collected> {
        // A panic elsewhere while the lock was held leaves the data as it was: still readable.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Sink for Collect {
    fn consume(&mut self, batch: &Batch) -> Result<Flow, StageError> {
        let mut c = self.lock();
        c.batches += 1;
        if !batch.is_framed() {
            c.bytes.extend_from_slice(batch.payload());
            return Ok(Flow::Continue);
        }
        for s in &batch.spans {
            let start = u32::try_from(c.bytes.len()).map_err(|_| "Collect holds 4 GiB already")?;
            c.spans.push(Span { start, ..*s });
            c.bytes.extend_from_slice(batch.bytes(s));
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self) -> Result<(), StageError> {
        self.lock().finished = true;
        Ok(())
    }
}

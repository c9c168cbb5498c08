//! Batches: the unit of work that flows between stages.
//!
//! A [`Batch`] owns one byte buffer and an index of [`Span`]s, each a framed record that lives in that
//! buffer. Stages pass a batch on by value, so records stay slices of the buffer that the source filled
//! until some stage changes them: a stage that rewrites or inserts a record appends the new bytes to
//! [`Batch::data`] and points a span at them.
//!
//! Batches are recycled through a [`BufferPool`]: the runner hands every batch that the sink has
//! consumed back to the pool, and sources take their buffers from it, so in steady state the hot path
//! allocates nothing.

use std::any::Any;
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

/// One framed record inside a [`Batch`]: a byte range of [`Batch::data`] plus two domain-defined words.
///
/// The runtime never interprets `kind` or `tag`; it only counts records by `kind`. A format crate
/// decides their meaning (the perf stages put the record type in `kind` and the attr index in `tag`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    /// Offset of the record's first byte in [`Batch::data`].
    pub start: u32,
    /// Length of the record in bytes, including any payload that belongs to it.
    pub len: u32,
    /// Record kind, as the domain defines it.
    pub kind: u32,
    /// A second domain-defined word.
    pub tag: u32,
}

impl Span {
    /// The byte range of this span in [`Batch::data`].
    #[inline]
    pub fn range(&self) -> std::ops::Range<usize> {
        self.start as usize..self.start as usize + self.len as usize
    }
}

/// Shared, read-only context that a stage may attach to the batches it emits (for example the
/// stream's header and attribute table), so that downstream stages need not rebuild it.
pub type BatchContext = Arc<dyn Any + Send + Sync>;

/// A value a stage attaches to the batch it emits, about the records of that batch (e.g. the
/// resolved stacks of its samples), for downstream stages and the sink to read; see
/// [`Batch::annotate`]. Like GStreamer's buffer metadata, it travels with the buffer and is gone
/// when the batch is recycled.
pub type Annotation = Arc<dyn Any + Send + Sync>;

/// A buffer of bytes and the records framed in it.
///
/// A batch is in one of two shapes:
/// - **raw**: `spans` is empty and the payload is `data[start..]`, as a source reads it;
/// - **framed**: each span is a record; records are written out in span order and bytes of
///   `data` that no span covers are not part of the stream.
#[derive(Clone, Default)]
pub struct Batch {
    /// The backing bytes.
    pub data: Vec<u8>,
    /// First byte of the raw payload. Sources may leave headroom before it so that a framing stage can
    /// prepend a partial record from the previous batch without copying the whole batch.
    pub start: usize,
    /// The framed records, in stream order.
    pub spans: Vec<Span>,
    /// Byte position in the input stream of `data[start]`.
    pub stream_offset: u64,
    /// Context attached by an upstream stage, if any.
    pub context: Option<BatchContext>,
    /// This batch ends a logical stream (one snapshot, one file's worth) that a stage emitted
    /// whole: a sink that writes one file per stream finishes the file now rather than at the
    /// start of the next stream, which may be hours away. Stages that pass batches on keep the
    /// flag; the runtime never reads it.
    pub ends_stream: bool,
    /// Annotations attached by upstream stages, at most one of each type.
    pub annotations: Vec<Annotation>,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("data.len", &self.data.len())
            .field("start", &self.start)
            .field("spans", &self.spans.len())
            .field("stream_offset", &self.stream_offset)
            .field("context", &self.context.is_some())
            .field("ends_stream", &self.ends_stream)
            .field("annotations", &self.annotations.len())
            .finish()
    }
}

impl Batch {
    /// An empty batch whose buffer can hold `bytes` bytes without reallocating.
    pub fn with_capacity(bytes: usize) -> Batch {
        Batch {
            data: Vec::with_capacity(bytes),
            ..Batch::default()
        }
    }

    /// Empties the batch, keeping its allocations.
    pub fn clear(&mut self) {
        self.data.clear();
        self.spans.clear();
        self.start = 0;
        self.stream_offset = 0;
        self.context = None;
        self.ends_stream = false;
        self.annotations.clear();
    }

    /// Attaches `value` to this batch, replacing an annotation of the same type. Annotations are
    /// about records by their position in [`Batch::data`] (a span's `start`), which stays valid
    /// while later stages remove records or insert new ones; a record a stage rewrites gets a new
    /// `start`, so an annotation keyed by it no longer applies.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use perfpipe_core::Batch;
    ///
    /// #[derive(Debug, PartialEq)]
    /// struct Weight(u64);
    /// let mut batch = Batch::default();
    /// batch.annotate(Arc::new(Weight(3)));
    /// batch.annotate(Arc::new(Weight(4)));
    /// assert_eq!(batch.annotation::<Weight>(), Some(&Weight(4)));
    /// assert_eq!(batch.annotations.len(), 1);
    /// ```
    pub fn annotate<T: Any + Send + Sync>(&mut self, value: Arc<T>) {
        self.annotations.retain(|a| !a.is::<T>());
        self.annotations.push(value);
    }

    /// The annotation of type `T`, if an upstream stage attached one.
    pub fn annotation<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.annotations.iter().find_map(|a| a.downcast_ref::<T>())
    }

    /// Whether the batch holds framed records (as opposed to a raw payload).
    pub fn is_framed(&self) -> bool {
        !self.spans.is_empty()
    }

    /// The raw payload, `data[start..]`.
    pub fn payload(&self) -> &[u8] {
        &self.data[self.start.min(self.data.len())..]
    }

    /// Number of records: the number of spans of a framed batch, 0 for a raw one.
    pub fn records(&self) -> usize {
        self.spans.len()
    }

    /// Bytes this batch contributes to the stream: the sum of span lengths of a framed batch, or the
    /// payload length of a raw one.
    pub fn stream_bytes(&self) -> u64 {
        if self.spans.is_empty() {
            self.payload().len() as u64
        } else {
            self.spans.iter().map(|s| u64::from(s.len)).sum()
        }
    }

    /// The bytes of one span.
    ///
    /// # Panics
    /// Panics if the span lies outside `data`, which only a buggy stage can cause.
    #[inline]
    pub fn bytes(&self, span: &Span) -> &[u8] {
        &self.data[span.range()]
    }

    /// Appends `bytes` to `data` and returns a span covering them, for a stage that adds or rewrites a
    /// record. The span is not inserted into `spans`; the caller places it.
    ///
    /// # Panics
    /// Panics if the buffer would exceed 4 GiB, the limit of a span offset.
    pub fn append(&mut self, bytes: &[u8], kind: u32, tag: u32) -> Span {
        let start = u32::try_from(self.data.len()).expect("batch buffer exceeds 4 GiB");
        let len = u32::try_from(bytes.len()).expect("record exceeds 4 GiB");
        self.data.extend_from_slice(bytes);
        Span {
            start,
            len,
            kind,
            tag,
        }
    }

    /// Rewrites record `index`: appends `bytes` to `data` and points the span at them, keeping its
    /// kind and tag. The old bytes stay in the buffer, unreferenced; the records around it stay
    /// zero-copy.
    ///
    /// # Panics
    /// Panics if `index` is out of range.
    pub fn replace(&mut self, index: usize, bytes: &[u8]) {
        let Span { kind, tag, .. } = self.spans[index];
        self.spans[index] = self.append(bytes, kind, tag);
    }

    /// Contiguous byte runs covering the records in order: adjacent spans are merged, so an unchanged
    /// batch is a single run. This is what a writer hands to `write_vectored`.
    pub fn runs(&self) -> Runs<'_> {
        Runs {
            batch: self,
            next: 0,
        }
    }
}

/// Iterator over the contiguous byte runs of a framed batch; see [`Batch::runs`].
#[derive(Debug)]
pub struct Runs<'a> {
    batch: &'a Batch,
    next: usize,
}

impl<'a> Iterator for Runs<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let spans = &self.batch.spans;
        let first = *spans.get(self.next)?;
        let start = first.start as usize;
        let mut end = start + first.len as usize;
        self.next += 1;
        while let Some(s) = spans.get(self.next) {
            if s.start as usize != end {
                break;
            }
            end += s.len as usize;
            self.next += 1;
        }
        Some(&self.batch.data[start..end])
    }
}

/// A pool of recycled batches, shared by every stage of a pipeline.
///
/// Taking from an empty pool allocates a new batch; returning to a full pool drops the batch, so the
/// pool bounds the memory it holds.
#[derive(Clone, Debug)]
pub struct BufferPool {
    tx: Sender<Batch>,
    rx: Receiver<Batch>,
    batch_bytes: usize,
}

impl BufferPool {
    /// A pool holding at most `max_idle` idle batches; new batches get `batch_bytes` of capacity.
    pub fn new(max_idle: usize, batch_bytes: usize) -> BufferPool {
        let (tx, rx) = crossbeam_channel::bounded(max_idle.max(1));
        BufferPool {
            tx,
            rx,
            batch_bytes,
        }
    }

    /// The configured batch size in bytes.
    pub fn batch_bytes(&self) -> usize {
        self.batch_bytes
    }

    /// A cleared batch, recycled if one is idle, else newly allocated.
    pub fn take(&self) -> Batch {
        self.rx
            .try_recv()
            .unwrap_or_else(|_| Batch::with_capacity(self.batch_bytes))
    }

    /// Returns a batch to the pool for reuse.
    pub fn put(&self, mut batch: Batch) {
        batch.clear();
        // A full pool means enough batches are idle already: drop this one.
        let _ = self.tx.try_send(batch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_merge_adjacent_spans() {
        let mut b = Batch::with_capacity(64);
        b.data.extend_from_slice(b"aabbbcdd");
        b.spans = vec![
            Span {
                start: 0,
                len: 2,
                kind: 0,
                tag: 0,
            },
            Span {
                start: 2,
                len: 3,
                kind: 0,
                tag: 0,
            },
            Span {
                start: 6,
                len: 2,
                kind: 0,
                tag: 0,
            },
        ];
        let extra = b.append(b"XY", 1, 0);
        b.spans.insert(1, extra);
        b.replace(3, b"D");
        let runs: Vec<&[u8]> = b.runs().collect();
        assert_eq!(runs, vec![&b"aa"[..], b"XY", b"bbb", b"D"]);
        assert_eq!(b.stream_bytes(), 8);
    }

    #[test]
    fn pool_recycles_and_bounds() {
        let pool = BufferPool::new(1, 128);
        let mut a = pool.take();
        a.data.extend_from_slice(b"hello");
        let cap = a.data.capacity();
        pool.put(a);
        pool.put(Batch::with_capacity(8)); // dropped: pool holds one
        let b = pool.take();
        assert!(b.data.is_empty());
        assert_eq!(b.data.capacity(), cap);
        assert_eq!(pool.take().data.capacity(), 128);
    }
}

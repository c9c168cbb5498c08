//! `perfpipe-core`: a streaming runtime of batch-at-a-time stages.
//!
//! A pipeline is one [`Source`], any number of [`Stage`]s and one [`Sink`], each on its own named OS
//! thread, joined by bounded `crossbeam_channel` channels that carry [`Batch`]es: a byte buffer plus
//! the [`Span`]s of the records framed in it. Built with [`Pipeline`], run with [`Pipeline::spawn`] or
//! [`Pipeline::run`], and measured by the runner per stage ([`StageMetrics`], [`Report`]). A stage
//! changes a batch's records in one pass with [`Batch::edit`] ([`Editor`]); a slow one runs on
//! several threads, in order, with [`Pipeline::parallel_stage`]. [`harness`] has a source and a sink
//! for tests. Asked for, the runner also keeps the counters as they changed ([`Timeline`]).
//!
//! [`spec`] is the vocabulary in which a stage declares itself to a command line: its flags, its
//! typed options and its constructor ([`spec::StageSpec`], [`spec::FormatSpec`]), what a
//! constructor gets ([`spec::BuildCtx`], with the pipeline's shared worker pool [`spec::Workers`]),
//! and the [`spec::Registry`] that holds such declarations.
//!
//! This crate knows nothing of any data format: a span's `kind` and `tag` mean what the stages that
//! frame records say they mean.
//!
//! ```
//! use perfpipe_core::{Batch, Flow, Out, Pipeline, Settings, Sink, Source, Span, Stage, StageError};
//!
//! /// Emits three one-byte records per batch, two batches.
//! struct Letters(u32);
//! impl Source for Letters {
//!     fn produce(&mut self, out: &mut Out<'_>) -> Result<Flow, StageError> {
//!         if self.0 == 2 { return Ok(Flow::Stop) }
//!         self.0 += 1;
//!         let mut b = out.take();
//!         for (i, c) in b"abc".iter().enumerate() {
//!             b.data.push(*c);
//!             b.spans.push(Span { start: i as u32, len: 1, kind: 0, tag: 0 });
//!         }
//!         out.push(b);
//!         Ok(Flow::Continue)
//!     }
//! }
//!
//! /// Drops every `b`.
//! struct DropB;
//! impl Stage for DropB {
//!     fn process(&mut self, mut batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
//!         let mut ed = batch.edit();
//!         while let Some(span) = ed.next_record() {
//!             if ed.bytes(&span) == b"b" {
//!                 ed.remove();
//!             }
//!         }
//!         ed.finish();
//!         out.push(batch);
//!         Ok(Flow::Continue)
//!     }
//! }
//!
//! /// Collects the output.
//! struct Collect(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
//! impl Sink for Collect {
//!     fn consume(&mut self, batch: &Batch) -> Result<Flow, StageError> {
//!         batch.runs().for_each(|r| self.0.lock().unwrap().extend_from_slice(r));
//!         Ok(Flow::Continue)
//!     }
//! }
//!
//! let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
//! let report = Pipeline::new(Settings::default())
//!     .source("letters", Letters(0))
//!     .stage("drop-b", DropB)
//!     .sink("collect", Collect(got.clone()))
//!     .run();
//! assert!(report.is_ok(), "{:?}", report.errors);
//! assert_eq!(&*got.lock().unwrap(), b"acac");
//! let drop_b = &report.stages[1];
//! assert_eq!((drop_b.input.records, drop_b.output.records), (6, 4));
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod batch;
mod edit;
pub mod harness;
mod metrics;
mod parallel;
mod pipeline;
mod requests;
pub mod spec;
mod stage;
mod summary;
mod tap;
pub mod timeline;

pub use batch::{Batch, BatchContext, BufferPool, Runs, Span};
pub use edit::Editor;
pub use metrics::{
    Counter, FlowSnapshot, Note, NoteValue, Notes, StageMetrics, StageSnapshot, KIND_SLOTS,
};
pub use pipeline::{End, Error, Pipeline, Report, Running, Settings};
pub use requests::{Requests, DUMP};
pub use stage::{Flow, Out, Sink, Source, Stage, StageError};
pub use summary::{render_json, render_table, verdict, KindName, Verdict};
pub use tap::Tap;
pub use timeline::Timeline;

//! [`StreamInfo`]: the [`AttrTable`] of a stream, as the `decode` stage attaches it to every batch
//! it emits ([`perfpipe_core::Batch::context`]), plus what stages share about the stream. It is
//! copied only when a new HEADER_ATTR arrives.
//!
//! It dereferences to its [`AttrTable`] (`info.endian`, `info.attrs`, `info.attr_index(..)`), the
//! part of it that belongs to the perf format and lives in `perfpipe-format`; what ties it to
//! batches lives here, since that crate knows nothing of the runtime.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, OnceLock};

use perfpipe_core::{Batch, Span};

use crate::format::tracing::{EventFormat, TracingData};
use crate::format::{AttrTable, Endian, Record, PERF_TYPE_TRACEPOINT};

/// Byte order and attrs of a stream, and what stages share about it.
#[derive(Clone, Debug, Default)]
pub struct StreamInfo {
    table: AttrTable,
    /// Time of the stream's first SAMPLE, set by the first stage that needs it (`filter`, for
    /// times relative to it) and shared by every copy of this info, so that a later stage still
    /// knows it after an earlier one dropped that sample.
    pub first_sample_time: Arc<OnceLock<u64>>,
    /// The tracing data (the tracepoints' formats), once `decode` has read a HEADER_TRACING_DATA.
    pub tracing: Option<Arc<TracingData>>,
}

impl StreamInfo {
    /// A stream of this byte order with no attrs yet.
    pub fn new(endian: Endian) -> StreamInfo {
        StreamInfo {
            table: AttrTable::new(endian),
            first_sample_time: Arc::default(),
            tracing: None,
        }
    }

    /// The stream info attached to a batch by `decode`, if any.
    pub fn of(batch: &Batch) -> Option<&StreamInfo> {
        batch.context.as_ref()?.downcast_ref::<StreamInfo>()
    }

    /// The stream info attached to a batch as a shared handle, if any.
    pub fn shared(batch: &Batch) -> Option<Arc<StreamInfo>> {
        batch.context.clone()?.downcast::<StreamInfo>().ok()
    }

    /// The format of the tracepoint that attr `index` records, if it is a tracepoint and the
    /// tracing data has its format.
    pub fn tracepoint(&self, index: usize) -> Option<&EventFormat> {
        let attr = self.attrs.get(index)?;
        if attr.type_ != PERF_TYPE_TRACEPOINT {
            return None;
        }
        self.tracing.as_ref()?.event(attr.config)
    }

    /// A typed view of the record `span` of `batch` (its `tag` is the attr index).
    pub fn record<'a>(&'a self, batch: &'a Batch, span: &Span) -> Record<'a> {
        self.table.view(batch.bytes(span), span.tag as u16)
    }
}

impl Deref for StreamInfo {
    type Target = AttrTable;

    fn deref(&self) -> &AttrTable {
        &self.table
    }
}

impl DerefMut for StreamInfo {
    fn deref_mut(&mut self) -> &mut AttrTable {
        &mut self.table
    }
}

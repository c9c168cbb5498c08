//! `encode`: turns framed batches back into stream bytes.
//!
//! Records that no stage changed go out byte for byte: [`perfpipe_core::Batch::runs`] merges adjacent spans, so an
//! untouched batch is one contiguous slice of the buffer `read` filled, handed to `writev(2)` by
//! [`write`](crate::write) without a copy. `encode` runs inside the `write` thread: a separate thread
//! would only add a hand-off.
//!
//! Stages that add or rewrite records build them with the format's writer,
//! [`format::build`](crate::format::build) ([`RecordWriter`](crate::format::build::RecordWriter)
//! and a builder per record type), which lays them out as perf does.

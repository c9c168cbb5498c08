//! `perfpipe-format`: the Linux perf data format, on its own: what `perf record` writes and `perf
//! report` reads, in pipe mode (`perf record -o -`) and in file mode (`perf.data`).
//!
//! It depends on no other crate, perfpipe's included, so a tool that reads or writes perf data
//! can use it alone. The principal types:
//! - [`RecordType`] and the other constants ([`misc`], [`sample`], [`flag`], [`feature`]…), named
//!   after the kernel's `include/uapi/linux/perf_event.h` and perf's `tools/perf/util/header.h`;
//! - [`Endian`], the stream's byte order, decided once from the magic, and [`EventHeader`];
//! - [`Attr`] (`struct perf_event_attr`) and its [`SampleLayout`]: where each sample field and
//!   each `sample_id` trailer field lies;
//! - [`AttrTable`]: the attrs of a stream and which attr a record belongs to;
//! - [`Record`], a zero-copy typed view of one record ([`Sample`], [`Mmap`], [`Comm`], [`Task`],
//!   [`BuildIdEvent`], [`SampleId`]), reading only the field asked for;
//! - [`build`]: the record writer ([`RecordWriter`](build::RecordWriter)) and a builder per
//!   record type, taking the same structs the views return;
//! - [`header`]: the file-mode header ([`FileHeader`]), its attrs, features and build-id table,
//!   read and written in one place;
//! - [`features`]: what is read of a feature section, in a file or a pipe's HEADER_FEATURE record
//!   (a string feature such as HOSTNAME; [`ClockData`](features::ClockData), which dates samples);
//! - [`tracing`]: the tracing data of tracepoint recordings, and each tracepoint's fields by name.
//!
//! Build a record, then read it back:
//!
//! ```
//! use perfpipe_format::build::{self, Trailer};
//! use perfpipe_format::{sample, Attr, Comm, Endian, Record, RecordType, SampleId};
//!
//! // An attr that samples TID|TIME with sample_id_all (flags bit 18), as a HEADER_ATTR body.
//! let e = Endian::Little;
//! let mut body = vec![0u8; 64];
//! body[4..8].copy_from_slice(&64u32.to_le_bytes()); // attr.size
//! body[24..32].copy_from_slice(&(sample::TID | sample::TIME).to_le_bytes());
//! body[40..48].copy_from_slice(&(1u64 << 18).to_le_bytes());
//! let attr = Attr::parse(&body, e).unwrap();
//!
//! let comm = Comm { pid: 42, tid: 43, comm: b"worker", exec: true };
//! let id = SampleId { pid: Some(42), tid: Some(43), time: Some(1_000), ..SampleId::default() };
//! let mut buf = Vec::new();
//! build::comm(&mut buf, e, &comm, Trailer::of(Some(&attr), id));
//! assert_eq!(buf.len(), 8 + 16 + 16); // header, fields and name padded to 8, trailer
//!
//! let rec = Record::new(&buf, e, Some(&attr));
//! assert_eq!(rec.record_type(), RecordType::COMM);
//! assert_eq!(rec.comm(), Some(comm));
//! assert_eq!(rec.sample_id().and_then(|s| s.time), Some(1_000));
//! ```
//!
//! Sources: `tools/perf/util/header.c`, `tools/perf/util/synthetic-events.c` and
//! `include/uapi/linux/perf_event.h` in the kernel tree; perfpipe's
//! `shared/reference/perf-format.md` summarises them.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod attr;
pub mod build;
mod constants;
mod endian;
pub mod features;
pub mod header;
mod record;
mod table;
pub mod tracing;

pub use attr::{Attr, AttrError, SampleLayout, TrailerLayout, PERF_TYPE_TRACEPOINT};
pub use constants::{
    context, feature, flag, misc, read_format, sample, RecordType, EVENT_HEADER_SIZE,
    FILE_HEADER_SIZE, OTHER_KIND, PIPE_HEADER_KIND, PIPE_HEADER_SIZE, PIPE_MAGIC,
};
pub use endian::{Endian, EventHeader};
pub use header::{FileAttr, FileHeader, FileSection, HeaderError};
pub use record::{
    BuildIdEvent, Callchain, CallchainDeferred, Comm, FileId, Mmap, Record, Sample, SampleId, Task,
};
pub use table::{AttrTable, MAX_ATTRS};

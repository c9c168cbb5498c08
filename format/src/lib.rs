//! `perfpipe-format`: the Linux perf data format, on its own.
//!
//! See `tools/perf/util/header.c` and `include/uapi/linux/perf_event.h` in the kernel tree; the
//! project's `shared/reference/perf-format.md` summarises both.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod attr;
mod constants;
mod endian;
pub mod header;
mod record;
mod table;

pub use attr::{Attr, AttrError, SampleLayout, TrailerLayout};
pub use constants::{
    context, feature, flag, misc, read_format, sample, RecordType, EVENT_HEADER_SIZE,
    FILE_HEADER_SIZE, OTHER_KIND, PIPE_HEADER_KIND, PIPE_HEADER_SIZE, PIPE_MAGIC,
};
pub use endian::{Endian, EventHeader};
pub use header::{FileAttr, FileHeader, FileSection, HeaderError};
pub use record::{Callchain, Comm, FileId, Mmap, Record, Sample, SampleId, Task};
pub use table::{AttrTable, MAX_ATTRS};

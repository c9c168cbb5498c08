//! The error type of the perf stages. Every variant about the input names the byte offset in the
//! input stream, and the record type where it is known.

use std::path::PathBuf;

use crate::format::header::BUILD_ID_ENTRY_RULE;
use crate::format::{AttrError, HeaderError, RecordType};

/// An error of a perf stage.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The input ended before the 16-byte pipe header.
    #[error("empty input: expected a perf pipe stream (the output of `perf record -o -`)")]
    EmptyInput,
    /// The first 8 bytes are not `PERFILE2` in either byte order.
    #[error("offset {offset}: not a perf pipe stream: magic {found:?} is not \"PERFILE2\"")]
    BadMagic {
        /// Where the magic was read.
        offset: u64,
        /// What was there, lossily as text.
        found: String,
    },
    /// A file-mode `perf.data` header (size 104) where a pipe header was expected: file mode is read
    /// from a file (`-i FILE`, by positioned reads), not from a stream.
    #[error(
        "offset 0: this is a file-mode perf.data (header size 104) arriving as a stream; \
         pass it as `-i FILE` (perfpipe reads file-mode input itself), or convert with \
         `perf inject -i FILE -o - | perfpipe`"
    )]
    FileMode,
    /// A file-mode `perf.data` whose header or header sections cannot be used.
    #[error("offset {offset}: file-mode perf.data header: {what}")]
    BadFileHeader {
        /// Where the bad field or structure is in the file.
        offset: u64,
        /// What is wrong.
        what: String,
    },
    /// A section of a file-mode `perf.data` (attrs, ids, data, a feature) that lies beyond the end
    /// of the file.
    #[error(
        "offset {offset}: file-mode perf.data: the {section} section at {start}..{} lies beyond \
         the end of the file ({file_len} bytes); the file is truncated or corrupt",
        .start.saturating_add(*.size)
    )]
    SectionOutOfBounds {
        /// Where the section's `{offset, size}` pair is in the file.
        offset: u64,
        /// Which section (`attrs`, `data`, `ids of attr 0`, `feature HOSTNAME`…).
        section: String,
        /// The section's offset.
        start: u64,
        /// The section's size.
        size: u64,
        /// The file's length.
        file_len: u64,
    },
    /// The pipe header's size is not 16.
    #[error("offset {offset}: pipe header size is {size}, expected 16")]
    BadHeaderSize {
        /// Where the size was read.
        offset: u64,
        /// The size found.
        size: u64,
    },
    /// `header.size` is smaller than the 8-byte header itself.
    #[error(
        "offset {offset}: {record_type} record has size {size}, smaller than its 8-byte header"
    )]
    RecordTooSmall {
        /// Offset of the record.
        offset: u64,
        /// Its type.
        record_type: RecordType,
        /// Its `header.size`.
        size: u16,
    },
    /// A record type that cannot be framed safely (0, absurdly large, or unknown with a size that
    /// is not a multiple of 8, which perf itself rejects).
    #[error("offset {offset}: invalid record type {type_} (size {size}); the stream is corrupt or not perf data")]
    InvalidType {
        /// Offset of the record.
        offset: u64,
        /// The raw type.
        type_: u32,
        /// Its `header.size`.
        size: u16,
    },
    /// A record too short for the fields its type requires.
    #[error("offset {offset}: {record_type} record of {size} bytes is too short: {what}")]
    Malformed {
        /// Offset of the record.
        offset: u64,
        /// Its type.
        record_type: RecordType,
        /// Its size.
        size: usize,
        /// What is missing.
        what: &'static str,
    },
    /// The input ended inside a record (or inside the pipe header).
    #[error("offset {offset}: input truncated inside {}: {have} of {need} bytes present", describe(.record_type))]
    Truncated {
        /// Offset of the record.
        offset: u64,
        /// Its type, if its header was complete (`PIPE_HEADER` for the 16-byte pipe header).
        record_type: Option<RecordType>,
        /// Bytes present.
        have: u64,
        /// Bytes the record needs.
        need: u64,
    },
    /// A payload that follows a record (tracing data, AUX data) is larger than perfpipe accepts.
    #[error(
        "offset {offset}: {record_type} payload of {size} bytes exceeds the limit of {limit} bytes"
    )]
    PayloadTooLarge {
        /// Offset of the record.
        offset: u64,
        /// Its type.
        record_type: RecordType,
        /// The declared payload size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// A COMPRESSED or COMPRESSED2 record whose zstd payload cannot be decompressed, or whose
    /// decompressed records are malformed or cut short at the end of the stream.
    #[error("offset {offset}: {record_type} record: {detail}")]
    Decompress {
        /// Offset of the COMPRESSED record (for a record cut short, the one it began in).
        offset: u64,
        /// COMPRESSED or COMPRESSED2.
        record_type: RecordType,
        /// What went wrong.
        detail: String,
    },
    /// A filter expression (or shorthand flag value) that does not parse; it says where and why.
    #[error(transparent)]
    BadExpression(#[from] ExprError),
    /// A HEADER_ATTR record whose attr cannot be used.
    #[error("offset {offset}: ATTR record: {source}")]
    BadAttr {
        /// Offset of the record.
        offset: u64,
        /// What was wrong.
        source: AttrError,
    },
    /// A stage option that cannot be used (e.g. a malformed `--known-build-ids` list).
    #[error("{option}: {message}")]
    BadOption {
        /// The option.
        option: &'static str,
        /// What is wrong with its value.
        message: String,
    },
    /// An I/O error on a named file or standard stream.
    #[error("{op} {}: {source}", .path.display())]
    Io {
        /// What was being done ("read", "write", "open", "create").
        op: &'static str,
        /// The path (`-` for a standard stream).
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A perf_event_open(2), mmap(2) or ioctl(2) of the native capture source (`record`) failed.
    #[error("{op} {what}: {source}")]
    Perf {
        /// The call ("perf_event_open", "mmap", "ioctl ID"…).
        op: &'static str,
        /// What it was for (the event and cpu, the process…).
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// A file-mode header error becomes the variant that names the same structure.
impl From<HeaderError> for Error {
    fn from(e: HeaderError) -> Error {
        match e {
            HeaderError::Bad { offset, what } => Error::BadFileHeader { offset, what },
            HeaderError::SectionOutOfBounds {
                offset,
                section,
                start,
                size,
                file_len,
            } => Error::SectionOutOfBounds {
                offset,
                section,
                start,
                size,
                file_len,
            },
            HeaderError::Attr { offset, source } => Error::BadAttr { offset, source },
            HeaderError::BuildIdEntry { offset, size } => Error::Malformed {
                offset,
                record_type: RecordType::HEADER_BUILD_ID,
                size,
                what: BUILD_ID_ENTRY_RULE,
            },
            other => Error::BadFileHeader {
                offset: other.offset(),
                what: other.to_string(),
            },
        }
    }
}

/// A syntax error in an expression (`--filter`, the shorthand flags, `ring`'s trigger): where
/// (1-based character column), what, and how to fix it. Defined here, not in the filter, so that
/// the crate's error type depends on no stage; the filter re-exports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExprError {
    /// The expression.
    pub expr: String,
    /// 1-based character column of the fault.
    pub column: usize,
    /// What is wrong.
    pub message: String,
    /// A hint, if there is one.
    pub hint: Option<String>,
}

impl std::fmt::Display for ExprError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "column {}: {}", self.column, self.message)?;
        writeln!(f, "    {}", self.expr)?;
        write!(f, "    {}^", " ".repeat(self.column.saturating_sub(1)))?;
        if let Some(h) = &self.hint {
            write!(f, "\n  hint: {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ExprError {}

fn describe(t: &Option<RecordType>) -> String {
    match t {
        Some(RecordType::PIPE_HEADER) => "the pipe header".to_string(),
        Some(t) => format!("a {t} record"),
        None => "a record header".to_string(),
    }
}

impl Error {
    /// The input offset the error is about, if it is about the input.
    pub fn offset(&self) -> Option<u64> {
        match self {
            Error::EmptyInput | Error::FileMode => Some(0),
            Error::BadMagic { offset, .. }
            | Error::BadHeaderSize { offset, .. }
            | Error::RecordTooSmall { offset, .. }
            | Error::InvalidType { offset, .. }
            | Error::Malformed { offset, .. }
            | Error::Truncated { offset, .. }
            | Error::PayloadTooLarge { offset, .. }
            | Error::BadAttr { offset, .. }
            | Error::BadFileHeader { offset, .. }
            | Error::SectionOutOfBounds { offset, .. }
            | Error::Decompress { offset, .. } => Some(*offset),
            Error::Io { .. }
            | Error::Perf { .. }
            | Error::BadOption { .. }
            | Error::BadExpression(_) => None,
        }
    }
}

impl From<perfpipe_core::spec::OptionError> for Error {
    fn from(e: perfpipe_core::spec::OptionError) -> Error {
        Error::BadOption {
            option: e.option,
            message: e.message,
        }
    }
}

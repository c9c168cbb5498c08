//! `perfpipe-chain`: the catalogue of built-in stages and output formats, and the one way a
//! pipeline is assembled from them. The `perfpipe` binary only maps its arguments to [`Word`]s;
//! a program of your own gets the same chain from the same words.
//!
//! - [`builtin`]: every built-in stage ([`TRANSFORMS`]) and output format
//!   ([`perfpipe_export::FORMATS`], as compiled in), in a [`Registry`] a program can add to;
//!   [`FIXED`] the stages every run has.
//! - [`Plan`]: the stages and the format that words name, completed by the rules: the output's
//!   format by flag, `--format` or extension (a directory is a Parquet dataset); what a format
//!   needs (`symbolize`) and sets; the stages a stage needs (`decompress`) put before it; option
//!   flags attached to their stage.
//! - [`output`]: what an output can be, checked before anything is read: a directory only as a
//!   dataset, no extension of a format compiled out, a place that exists and takes a file.
//! - [`Chain`]: a source, a plan, taps and a sink, built into a [`perfpipe_core::Pipeline`].
//!
//! ```
//! use perfpipe_chain::{builtin, Plan, Word};
//!
//! let registry = builtin();
//! let words = [
//!     Word::Flag { name: "comm", value: Some("db*") },
//!     Word::Flag { name: "weight", value: Some("samples") },
//! ];
//! let mut plan = Plan::from_words(&words, &registry).unwrap();
//! plan.choose_output(&registry, Some("db.folded".as_ref())).unwrap();
//! plan.complete(&registry).unwrap();
//! let stages: Vec<&str> = plan.stages.iter().map(|s| s.label.as_str()).collect();
//! // The filter reads samples `perf record -z` may hide, and folded stacks need named frames
//! // (and deferred user callchains stitched in).
//! assert_eq!(stages, ["decompress", "comm", "stitch", "symbolize"]);
//! assert_eq!(plan.format.unwrap().spec.name, "folded");
//! ```

#![deny(missing_docs)]

mod assemble;
pub mod output;
mod plan;

use perfpipe_core::spec::{Registry, StageSpec};
use perfpipe_core::StageError;

pub use assemble::{path_or_std, Chain, SinkSpec, SourceSpec};
pub use plan::{format_choices, FormatUse, Plan, StageUse, Word, PERF_FORMAT};

/// The built-in stages and output formats.
pub fn builtin() -> Registry {
    Registry::of(TRANSFORMS, perfpipe_export::FORMATS)
}

/// The transform stages, each declared in its own file; one line per stage.
pub const TRANSFORMS: &[StageSpec] = &[
    perfpipe_stream::decompress::SPEC,
    perfpipe_stream::buildid::SPEC,
    perfpipe_stream::filter::SPEC,
    perfpipe_stream::drop::SPEC,
    perfpipe_stream::prune_sideband::SPEC,
    perfpipe_stream::ring::SPEC,
    perfpipe_stream::stitch::SPEC,
    perfpipe_stream::aslr::SPEC,
    perfpipe_stream::downgrade::SPEC,
    perfpipe_profile::unwind::SPEC,
    perfpipe_profile::symbolize::SPEC,
];

/// The fixed stages every run has, in order, with one line of help each.
pub const FIXED: &[(&str, &str)] = &[
    (
        "read",
        "source: read standard input or -i FILE in large chunks; a file-mode perf.data is read with pread(2) and presented as the pipe stream",
    ),
    (
        "decode",
        "frame records, validate the pipe header, track attrs",
    ),
    (
        "write",
        "sink: encode records (unchanged ones byte for byte) to standard output or -o FILE (a regular file in file mode)",
    ),
];

/// Why a chain cannot be assembled.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The words are wrong: a flag, `--stage` or `--format` naming nothing, two output formats.
    /// A command line's usage error (exit status 2).
    #[error("{0}")]
    Usage(String),
    /// A value that does not parse, or a stage or output that cannot be built: where it was
    /// given (`--ring`, `pprof output`) and why.
    #[error("{0}")]
    Value(String, #[source] StageError),
    /// A rule of assembly the words break: an option of a format the output does not have, an
    /// option flag without its stage, symbols in perf's format, a tap naming no stage.
    #[error("{0}")]
    Rule(String),
    /// The output cannot be written as asked, found before anything is read: a directory for a
    /// format of one file, an extension whose format is compiled out, a missing or read-only
    /// place (see [`output`]). A command line's usage error (exit status 2).
    #[error("{0}")]
    Output(String),
    /// The input or the output cannot be opened.
    #[error(transparent)]
    Stream(#[from] perfpipe_stream::Error),
}

impl Error {
    fn value(context: String, e: impl std::error::Error + Send + Sync + 'static) -> Error {
        Error::Value(context, Box::new(e))
    }

    /// Whether the command line is at fault (a usage error, exit status 2 as clap, grep and
    /// ripgrep use), rather than the input, the output or a stage's work (exit status 1): every
    /// error but [`Error::Stream`], and an [`Error::Value`] when its value is what is wrong (an
    /// option that does not parse, a filter expression, an option the output cannot take), not
    /// when a stage failed to start (a file it cannot open).
    pub fn is_usage(&self) -> bool {
        match self {
            Error::Usage(_) | Error::Rule(_) | Error::Output(_) => true,
            Error::Value(_, e) => {
                e.downcast_ref::<perfpipe_core::spec::OptionError>()
                    .is_some()
                    || e.downcast_ref::<perfpipe_stream::filter::ExprError>()
                        .is_some()
                    || matches!(
                        e.downcast_ref::<perfpipe_stream::Error>(),
                        Some(
                            perfpipe_stream::Error::BadOption { .. }
                                | perfpipe_stream::Error::BadExpression(_)
                        )
                    )
            }
            Error::Stream(_) => false,
        }
    }
}

#[cfg(test)]
mod tests;

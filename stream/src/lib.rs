//! `perfpipe-stream`: the stages that stream Linux perf data, and the models they share.
//!
//! The stream that `perf record -o -` writes flows as [`perfpipe_core::Batch`]es: [`read`] fills raw
//! batches, [`decode`] frames them into records (spans of the same buffer, kind = record type, tag =
//! attr index) and attaches a [`format::StreamInfo`], transforms read fields through typed views
//! ([`format::Record`], [`format::Sample`]), and [`write`](mod@write) writes them back, unchanged records byte
//! for byte.
//!
//! The perf format itself (record types, attrs, views, the record writer [`format::build`], the
//! perf.data header [`format::header`]) is the `perfpipe-format` crate, re-exported as
//! [`format`](mod@format); this crate adds [`format::StreamInfo`], the attr table as it rides on
//! batches.
//!
//! Stages, one file or folder each, named after their CLI name:
//! - [`read`]: source; standard input or a file, in large reads.
//! - [`read::file`]: source; a file-mode `perf.data`, read with `pread(2)` and presented as the pipe stream.
//! - [`decode`]: frames records, validates the header, tracks attrs.
//! - [`aslr`]: remaps every recorded address to a canonical layout (`--aslr`, `perf inject --aslr`).
//! - [`decompress`]: replaces COMPRESSED records (`perf record -z`) with the records they hold.
//! - [`buildid`]: injects a BUILD_ID record before the first sample that hits each dso (`perf inject -b`).
//! - [`buildid::all`]: injects a BUILD_ID record before the map of every dso (`--buildid-all`).
//! - [`filter`]: keeps the samples an expression selects (`--filter`, `--pid`, `--comm`, `--time`…).
//! - [`drop`](mod@drop): removes the records of the named types (`--drop switch,lost`).
//! - [`prune_sideband`]: removes the side-band of processes without samples (`--prune-sideband`).
//! - [`stitch`]: merges deferred user callchains (CALLCHAIN_DEFERRED records) into their samples, assembles raw-data `offcpu-time` samples (`--stitch`).
//! - [`downgrade`]: makes a perf 7.x stream readable by perf 6.1 and 6.12 (`--downgrade`).
//! - [`ring`]: the flight recorder; keeps the newest events and dumps complete streams on a trigger.
//! - [`write`](mod@write): sink; standard output or a file, with `writev`.
//! - [`write::file`]: sink; a file-mode `perf.data` (header, attrs, data, features), renamed at the end.
//! - [`write::split`]: sink; one file per stream (`-o dump-%n.data`, for `ring`'s dumps).
//!
//! The models the stages share, in [`model`]: [`model::machine`] (the per-process address spaces),
//! [`model::dso`] (dso files and build ids), [`model::threads`] (thread and event names).
//! Synthetic streams (`perfpipe bench --synthetic`, the benchmarks, the tests): [`synth`].
//!
//! ```
//! use perfpipe_core::{Pipeline, Settings};
//! use perfpipe_stream::{decode::DecodeConfig, read::ReadConfig, write::WriteConfig};
//!
//! let dir = std::env::temp_dir().join(format!("perfpipe-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let (input, output) = (dir.join("in.data"), dir.join("out.data"));
//! // A pipe header and one FINISHED_ROUND record (type 68, size 8).
//! let mut stream = b"PERFILE2".to_vec();
//! stream.extend_from_slice(&16u64.to_le_bytes());
//! stream.extend_from_slice(&[68, 0, 0, 0, 0, 0, 8, 0]);
//! std::fs::write(&input, &stream).unwrap();
//!
//! let report = Pipeline::new(Settings::default())
//!     .source("read", ReadConfig { path: Some(input), ..Default::default() }.build().unwrap())
//!     .stage("decode", DecodeConfig::default().build())
//!     .sink("write", WriteConfig { path: Some(output.clone()), ..Default::default() }.build().unwrap())
//!     .run();
//! assert!(report.is_ok(), "{:?}", report.errors);
//! assert_eq!(std::fs::read(&output).unwrap(), stream);
//! assert_eq!(report.stages[1].output.records, 2); // the header and the record
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

#![deny(missing_docs)]

pub mod aslr;
pub mod buildid;
pub mod decode;
pub mod decompress;
pub mod downgrade;
pub mod drop;
mod error;
pub mod filter;
pub mod model;
pub mod prune_sideband;
pub mod read;
pub mod ring;
pub mod stitch;
mod stream_info;
pub mod synth;
#[cfg(test)]
mod test_child;
pub mod write;

pub use error::Error;

/// The perf format: [`perfpipe_format`], re-exported whole, and [`StreamInfo`](format::StreamInfo),
/// the stream's attr table as it travels on batches.
pub mod format {
    pub use crate::stream_info::StreamInfo;
    pub use perfpipe_format::*;
}

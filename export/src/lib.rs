//! `perfpipe-export`: the profile output formats, each a sink declared by a
//! [`FormatSpec`](perfpipe_core::spec::FormatSpec) and chosen by the output's extension, by
//! `--format NAME` or by its own flag.
//!
//! - [`folded`]: folded stacks (`-o FILE.folded`), what `inferno-collapse-perf` makes of
//!   `perf script`.
//! - [`flamegraph`]: flame graph SVGs (`-o FILE.svg`), drawn by `inferno`; feature `flamegraph`.
//! - [`pprof`]: pprof profiles (`-o FILE.pb.gz`); feature `pprof`.
//! - [`firefox`]: the Firefox Profiler's processed-profile JSON (`-o FILE.json.gz`); feature
//!   `firefox`.
//! - [`parquet`](mod@parquet): Parquet tables and datasets (`-o FILE.parquet`, `-o DIR/`); feature
//!   `parquet`.
//!
//! Every format reads the frames the `symbolize` stage attaches to each batch
//! ([`perfpipe_profile::symbolize::Stacks`]).

#![deny(missing_docs)]

#[cfg(feature = "firefox")]
pub mod firefox;
#[cfg(feature = "flamegraph")]
pub mod flamegraph;
pub mod folded;
#[cfg(feature = "parquet")]
pub mod parquet;
#[cfg(feature = "pprof")]
pub mod pprof;

/// Writes what `write` writes to `out` gzip'd (default level), through a 1 MiB buffer: the
/// writers of profiles make small writes, deflate wants large ones.
#[cfg(any(feature = "pprof", feature = "firefox"))]
fn gzip(
    out: &mut dyn std::io::Write,
    write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    let mut buf = std::io::BufWriter::with_capacity(1 << 20, gz);
    write(&mut buf)?;
    buf.into_inner()
        .map_err(|e| e.into_error())?
        .finish()
        .map(|_| ())
}

/// The output formats compiled in, in the order the help lists them.
pub const FORMATS: &[perfpipe_core::spec::FormatSpec] = &[
    folded::SPEC,
    #[cfg(feature = "flamegraph")]
    flamegraph::SPEC,
    #[cfg(feature = "pprof")]
    pprof::SPEC,
    #[cfg(feature = "firefox")]
    firefox::SPEC,
    #[cfg(feature = "parquet")]
    parquet::SPEC,
];

//! Where the output goes, decided and checked before the first byte is read: a live `perf record
//! -o - | perfpipe -o …` learns that its output cannot be written when it starts, not after the
//! recording session.
//!
//! - **A directory output** (a path that ends in `/`, or a directory that exists) is a Parquet
//!   dataset ([`DATASET_FORMAT`]), whatever else the command line says about the format; a
//!   format of one file chosen for it (`--folded -o DIR/`, `--format perf -o DIR/`), or a build
//!   without Parquet, is refused, naming `--parquet`.
//! - **An extension whose format is compiled out** (`-o x.svg` in a build without the
//!   `flamegraph` feature) is refused, naming the feature, instead of being written in perf's
//!   format under that name.
//! - **A format that needs a file** (Parquet) is refused on standard output.
//! - **A URL** (`http(s)://…`, `pyroscope+http(s)://…`) is pushed to, by the `otlp` or the
//!   `pyroscope` format ([`url_format`]); another format chosen for it is refused.
//! - **The place** must exist and take a new file ([`check_writable`]): the directory a file
//!   goes in (where its temporary file is made and renamed), or the dataset's directory or the
//!   one it is to be made in. A missing or read-only place is refused.
//!
//! Each refusal is an [`Error::Output`] whose text names the output and the problem.

use std::path::{Path, PathBuf};

use perfpipe_core::spec::{FormatSpec, Registry};

use crate::Error;

/// The format a directory output writes: a Hive-partitioned dataset.
pub const DATASET_FORMAT: &str = perfpipe_export::offered::PARQUET.name;

/// Every output format of `perfpipe-export`, compiled in or not (declared there, once).
pub use perfpipe_export::offered::{Offered, OFFERED};

/// The scheme of a Pyroscope push: `pyroscope+http://HOST:4040`.
const PYROSCOPE: &str = "pyroscope+";

/// The format a URL output pushes to (`http(s)://…` OTLP, `pyroscope+http(s)://…` Pyroscope),
/// `None` for an output that is not a URL.
pub fn url_format(path: &Path) -> Option<&'static str> {
    let s = path.to_str()?;
    let (format, rest) = match s.strip_prefix(PYROSCOPE) {
        Some(rest) => ("pyroscope", rest),
        None => ("otlp", s),
    };
    (rest.starts_with("http://") || rest.starts_with("https://")).then_some(format)
}

/// The format of a URL output, or why it cannot be: `chosen` is the format the command line
/// chose otherwise.
///
/// # Errors
/// [`Error::Output`] for a format that does not push, or a build without the one the URL needs.
pub(crate) fn url_output(
    registry: &Registry,
    url: &Path,
    chosen: Option<&FormatSpec>,
) -> Result<Option<FormatSpec>, Error> {
    let Some(name) = url_format(url) else {
        return Ok(None);
    };
    if let Some(f) = chosen.filter(|f| f.name != name) {
        return Err(Error::Output(format!(
            "-o {}: a URL is pushed to ({name} output), and {} output is written to a file",
            url.display(),
            f.name
        )));
    }
    match registry.format(name) {
        Some(f) => Ok(Some(*f)),
        None => {
            let o = OFFERED.iter().find(|o| o.name == name);
            Err(Error::Output(format!(
                "-o {}: a URL is pushed to ({name} output), and {}",
                url.display(),
                o.map_or_else(|| format!("{name} is not registered"), without)
            )))
        }
    }
}

/// Whether `path` names a directory output: it ends in `/` or is a directory that exists (a URL
/// never is).
pub fn is_directory(path: &Path) -> bool {
    url_format(path).is_none()
        && (path.as_os_str().as_encoded_bytes().ends_with(b"/") || path.is_dir())
}

/// Whether `format` writes a directory at `path`: a directory output, or a Parquet output with
/// `--rotate` (its parts make a dataset under `path`), as the Parquet sink decides it.
pub fn writes_directory(format: &crate::FormatUse, path: &Path) -> bool {
    format.spec.name == DATASET_FORMAT && (is_directory(path) || format.options.has("rotate"))
}

/// The offered format whose extension ends `path`'s name (the longest wins).
fn offered_of_path(path: &Path) -> Option<&'static Offered> {
    let name = path.file_name()?.to_str()?;
    OFFERED
        .iter()
        .flat_map(|o| o.extensions.iter().map(move |e| (o, *e)))
        .filter(|(_, e)| {
            name.len() > e.len() + 1
                && name.ends_with(e)
                && name.as_bytes()[name.len() - e.len() - 1] == b'.'
        })
        .max_by_key(|(_, e)| e.len())
        .map(|(o, _)| o)
}

/// The text of a missing feature: `built without the cargo feature `flamegraph``: the features
/// of the format this build lacks, or all of them (a registry made without the format).
fn without(o: &Offered) -> String {
    let mut missing = o.missing();
    if missing.is_empty() {
        missing = o.features.to_vec();
    }
    match missing.as_slice() {
        [] => "this perfpipe's registry has no such format".into(),
        [f] => format!("this perfpipe is built without the cargo feature `{f}`"),
        more => format!(
            "this perfpipe is built without the cargo features `{}`",
            more.join("`, `")
        ),
    }
}

/// The format a directory output writes, or why it cannot: `chosen` is the format the command
/// line chose (`Some(None)` for `--format perf`).
///
/// # Errors
/// [`Error::Output`] for a format of one file, or a build without the dataset format.
pub(crate) fn dataset_format(
    registry: &Registry,
    output: &Path,
    chosen: Option<Option<&FormatSpec>>,
) -> Result<FormatSpec, Error> {
    let shown = output.display();
    let one_file = |what: String, file: String| {
        Error::Output(format!(
            "-o {shown}: a directory, and {what} is one file ({file}); a directory output is \
             a Parquet dataset (--parquet -o DIR/)"
        ))
    };
    match chosen {
        Some(None) => Err(one_file("perf's format".into(), "-o FILE.data".into())),
        Some(Some(f)) if f.name != DATASET_FORMAT => Err(one_file(
            format!("{} output", f.name),
            f.extensions
                .first()
                .map_or_else(|| "-o FILE".into(), |e| format!("-o FILE.{e}")),
        )),
        _ => registry.format(DATASET_FORMAT).copied().ok_or_else(|| {
            let o = OFFERED.iter().find(|o| o.name == DATASET_FORMAT);
            Error::Output(format!(
                "-o {shown}: a directory output is a Parquet dataset (--parquet -o DIR/), and {}",
                o.map_or_else(|| "Parquet is not registered".into(), without)
            ))
        }),
    }
}

/// Fails for an output whose extension names a format this build lacks, when no format was
/// chosen otherwise.
///
/// # Errors
/// [`Error::Output`] naming the format and its feature.
pub(crate) fn check_extension(registry: &Registry, output: &Path) -> Result<(), Error> {
    let Some(o) = offered_of_path(output) else {
        return Ok(());
    };
    if registry.format(o.name).is_some() {
        return Ok(());
    }
    Err(Error::Output(format!(
        "-o {}: .{} is {} output, and {} (write another format, or `--format perf` for perf's)",
        output.display(),
        o.extensions
            .iter()
            .find(|e| output.to_string_lossy().ends_with(*e))
            .unwrap_or(&o.name),
        o.name,
        without(o)
    )))
}

/// Fails for a format that needs a file, on standard output.
///
/// # Errors
/// [`Error::Output`] naming the format's ways to a file.
pub(crate) fn check_stdout(format: &FormatSpec) -> Result<(), Error> {
    match OFFERED.iter().find(|o| o.name == format.name) {
        Some(o) if !o.to_stdout => Err(Error::Output(format!(
            "{} output needs a file (-o FILE.{}) or a directory (-o DIR/), not standard output",
            format.name,
            format.extensions.first().unwrap_or(&format.name)
        ))),
        _ => Ok(()),
    }
}

/// Checks that `output` can be written: a file or a dataset that does not exist yet needs a
/// directory that exists and takes a new file; a dataset that exists must be a directory that
/// takes a new file; an existing file that is not a regular one (a FIFO, `/dev/null`) is opened
/// as it is. Taking a new file is tried: a file is created and removed at once
/// (`.perfpipe-probe-PID-N`), which is what a read-only mount, permissions or a full inode table
/// answer truthfully.
///
/// # Errors
/// [`Error::Output`] naming the output and the problem.
pub fn check_writable(output: &Path, directory: bool) -> Result<(), Error> {
    if output == Path::new("-") || url_format(output).is_some() {
        return Ok(());
    }
    let shown = output.display();
    let meta = std::fs::metadata(output);
    if let Ok(m) = &meta {
        if directory {
            if !m.is_dir() {
                return Err(Error::Output(format!(
                    "-o {shown}: not a directory (a dataset is one)"
                )));
            }
            return probe(output).map_err(|e| {
                Error::Output(format!("-o {shown}: cannot write in this directory: {e}"))
            });
        }
        if !m.is_file() && !m.is_dir() {
            return Ok(());
        }
    }
    let parent = match output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    match std::fs::metadata(&parent) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::Output(format!(
            "-o {shown}: no directory {} to write it in",
            parent.display()
        ))),
        Ok(m) if !m.is_dir() => Err(Error::Output(format!(
            "-o {shown}: {} is not a directory",
            parent.display()
        ))),
        _ => probe(&parent).map_err(|e| {
            Error::Output(format!(
                "-o {shown}: cannot write in {}: {e}",
                parent.display()
            ))
        }),
    }
}

/// Creates a file in `dir` and removes it.
fn probe(dir: &Path) -> std::io::Result<()> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.join(format!(".perfpipe-probe-{}-{n}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)?;
    std::fs::remove_file(&path)
}

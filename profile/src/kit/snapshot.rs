//! [`SnapshotSink`]: the sink of a profile written whole, at the end of input and, as a snapshot
//! that does not end the run, on each DUMP request ([`perfpipe_core::DUMP`], SIGUSR2). A file is
//! replaced atomically ([`perfpipe_stream::write::atomic`]: written under a temporary name, then
//! renamed), so a reader sees the previous profile or the new one, never half of one; `-` is
//! standard output.
//!
//! A format implements [`Profile`]: how a batch's samples are taken in and how the profile so far
//! is written. The sink does the rest, the same for every format.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use perfpipe_core::spec::{no_settings, BuildCtx, Flag, FormatSpec, Options};
use perfpipe_core::{Batch, Counter, Flow, Sink, StageError};
use perfpipe_stream::write::atomic::write_file;
use perfpipe_stream::Error;

/// What a [`SnapshotSink`] keeps: a profile of the samples so far, which it can write at any time.
pub trait Profile: Send + fmt::Debug {
    /// Takes in the samples of a batch.
    fn add(&mut self, batch: &Batch);

    /// Writes the profile so far to `out`; names are made on `pool` if given.
    ///
    /// # Errors
    /// What writing to `out` returns.
    fn write(&self, pool: Option<&rayon::ThreadPool>, out: &mut dyn Write) -> std::io::Result<()>;

    /// Called once at the end of input, before the last write (to set counters of the whole).
    fn finish(&mut self) {}

    /// The profile's counters, registered once when the pipeline is built.
    fn counters(&self) -> Vec<(&'static str, Counter)> {
        Vec::new()
    }
}

/// A request to act now, as a stage that subscribed to it sees it: the flag a DUMP request
/// (SIGUSR2) sets, taken (read and cleared) once per batch.
#[derive(Clone, Debug, Default)]
pub struct Request(Option<Arc<AtomicBool>>);

impl Request {
    /// A request seen through `flag` (never, for `None`).
    pub fn new(flag: Option<Arc<AtomicBool>>) -> Request {
        Request(flag)
    }

    /// The pipeline's DUMP request ([`perfpipe_core::DUMP`]), subscribed to.
    pub fn dump(ctx: &BuildCtx) -> Request {
        Request(Some(ctx.requests.subscribe(perfpipe_core::DUMP)))
    }

    /// Whether the request came since the last call.
    pub fn take(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|d| d.swap(false, Ordering::SeqCst))
    }
}

/// The sink of a [`Profile`] written whole to one file (see the module doc).
///
/// - **Counters**: the profile's, then `snapshots` (writes on request).
/// - **At the end**: [`Profile::finish`], then the last write; an error of any write ends the
///   pipeline with the file named.
#[derive(Debug)]
pub struct SnapshotSink<P> {
    profile: P,
    path: PathBuf,
    request: Request,
    pool: Option<Arc<rayon::ThreadPool>>,
    snapshots: Counter,
}

impl<P: Profile> SnapshotSink<P> {
    /// A sink writing `profile` to `path` (`-`: standard output), with names made on `pool`;
    /// `dump` is the flag of a snapshot request.
    pub fn new(
        profile: P,
        path: &Path,
        dump: Option<Arc<AtomicBool>>,
        pool: Option<Arc<rayon::ThreadPool>>,
    ) -> SnapshotSink<P> {
        SnapshotSink {
            profile,
            path: path.to_path_buf(),
            request: Request::new(dump),
            pool,
            snapshots: Counter::new(),
        }
    }

    /// The sink of `profile` in a pipeline: snapshots on its DUMP request, names on its worker
    /// pool.
    ///
    /// # Errors
    /// When the worker pool cannot start.
    pub fn build(ctx: &BuildCtx, path: &Path, profile: P) -> Result<SnapshotSink<P>, Error> {
        Ok(SnapshotSink {
            request: Request::dump(ctx),
            pool: Some(ctx.workers.pool()?),
            ..SnapshotSink::new(profile, path, None, None)
        })
    }

    /// The profile so far.
    pub fn profile(&self) -> &P {
        &self.profile
    }

    fn write(&self) -> Result<(), Error> {
        write_file(&self.path, |out| {
            self.profile.write(self.pool.as_deref(), out)
        })
    }
}

/// How the command line offers a profile written whole that has no options of its own: chosen by
/// one of `extensions` or by its flag (`flags`), reading the frames of the `symbolize` stage,
/// written by a [`SnapshotSink`] of `P::default()` ([`build_sink`]).
pub const fn format<P: Profile + Default + 'static>(
    name: &'static str,
    help: &'static str,
    extensions: &'static [&'static str],
    flags: &'static [Flag],
) -> FormatSpec {
    FormatSpec {
        name,
        help,
        extensions,
        flags,
        options: &[],
        needs: &["symbolize"],
        sets: no_settings,
        build: build_sink::<P>,
    }
}

/// The [`FormatSpec::build`] of a format that has no options of its own: [`SnapshotSink::build`]
/// of `P::default()`.
///
/// # Errors
/// When the worker pool cannot start.
pub fn build_sink<P: Profile + Default + 'static>(
    ctx: &BuildCtx,
    _: &Options,
    path: &Path,
) -> Result<Box<dyn Sink>, StageError> {
    Ok(Box::new(SnapshotSink::build(ctx, path, P::default())?))
}

impl<P: Profile> Sink for SnapshotSink<P> {
    fn consume(&mut self, batch: &Batch) -> Result<Flow, StageError> {
        self.profile.add(batch);
        if self.request.take() {
            self.write()?;
            self.snapshots.add(1);
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self) -> Result<(), StageError> {
        self.profile.finish();
        self.write()?;
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        let mut counters = self.profile.counters();
        counters.push(("snapshots", self.snapshots.clone()));
        counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile of how many batches came.
    #[derive(Debug, Default)]
    struct Batches {
        seen: u64,
        finished: bool,
    }

    impl Profile for Batches {
        fn add(&mut self, _: &Batch) {
            self.seen += 1;
        }

        fn write(&self, _: Option<&rayon::ThreadPool>, out: &mut dyn Write) -> std::io::Result<()> {
            write!(out, "{} {}", self.seen, self.finished)
        }

        fn finish(&mut self) {
            self.finished = true;
        }

        fn counters(&self) -> Vec<(&'static str, Counter)> {
            vec![("batches", Counter::new())]
        }
    }

    #[test]
    fn the_profile_is_written_on_request_and_at_the_end_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        let dump = Arc::new(AtomicBool::new(false));
        let mut sink = SnapshotSink::new(Batches::default(), &path, Some(dump.clone()), None);
        let batch = Batch::default();
        assert_eq!(sink.consume(&batch).unwrap(), Flow::Continue);
        assert!(
            !path.exists(),
            "nothing is written before the end unless asked"
        );
        dump.store(true, Ordering::SeqCst);
        assert_eq!(sink.consume(&batch).unwrap(), Flow::Continue);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "2 false");
        assert!(!dump.load(Ordering::SeqCst), "the request is taken");
        assert_eq!(sink.consume(&batch).unwrap(), Flow::Continue);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "2 false");
        sink.finish().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "3 true");
        assert_eq!(sink.profile().seen, 3);
        let names: Vec<&str> = sink.counters().iter().map(|c| c.0).collect();
        assert_eq!(names, ["batches", "snapshots"]);
        assert_eq!(sink.counters()[1].1.get(), 1);
        let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(files.len(), 1, "no temporary file left");

        // A file that cannot be written is an error naming where.
        let mut bad = SnapshotSink::new(
            Batches::default(),
            &dir.path().join("no/such/dir"),
            None,
            None,
        );
        let err = bad.finish().unwrap_err().to_string();
        assert!(err.contains("no/such/"), "{err}");
    }
}

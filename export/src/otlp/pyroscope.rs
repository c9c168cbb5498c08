//! `pyroscope`: pprof profiles pushed to Pyroscope's `/ingest` (`-o pyroscope+http://HOST:4040`,
//! `--format pyroscope`), one `POST /ingest?name=APP&from=S&until=S&format=pprof` per `--window`
//! (or one for the whole stream), the body the gzip'd `profile.proto` that `-o FILE.pb.gz`
//! writes ([`crate::pprof`]) of the window's samples. The application is `perfpipe` unless the
//! URL names it (`pyroscope+http://HOST:4040/?name=db{env=prod}`, labels in braces as Pyroscope
//! reads them). Sent as [`super::push`] sends OTLP requests: bounded queue, retries, every
//! dropped window named at the end.

use std::io::Write;
use std::path::Path;

use perfpipe_core::spec::{BuildCtx, Flag, FormatSpec, Options};
use perfpipe_core::{Batch, Counter, Sink, StageError};
use perfpipe_profile::kit::join::sample_count;
use perfpipe_profile::kit::Profile;

use super::push::Target;
use super::{StreamFacts, WindowSink, Windowed, PUSH_FLAGS, PUSH_OPTIONS};
use crate::pprof::Pprof;

/// A window's pprof profile, and whether it has samples.
#[derive(Debug, Default)]
pub struct PprofWindow {
    pprof: Pprof,
    samples: u64,
    counted: Counter,
}

impl Profile for PprofWindow {
    fn add(&mut self, batch: &Batch) {
        let n = sample_count(batch);
        self.samples += n;
        self.counted.add(n);
        self.pprof.add(batch);
    }

    fn write(&self, pool: Option<&rayon::ThreadPool>, out: &mut dyn Write) -> std::io::Result<()> {
        self.pprof.write(pool, out)
    }

    fn finish(&mut self) {
        self.pprof.finish();
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![("samples", self.counted.clone())]
    }
}

impl Windowed for PprofWindow {
    fn next_window(&self) -> PprofWindow {
        PprofWindow {
            counted: self.counted.clone(),
            ..PprofWindow::default()
        }
    }

    fn set_window(&mut self, _: &StreamFacts, _: u64, _: u64) {}

    fn has_samples(&self) -> bool {
        self.samples > 0
    }
}

const FLAGS: [Flag; 2] = [
    Flag::stage(
        "pyroscope",
        "push pprof profiles to Pyroscope's /ingest (what -o pyroscope+http://HOST:4040 chooses)",
    ),
    PUSH_FLAGS[0],
];

/// How the command line offers the format.
pub const SPEC: FormatSpec = FormatSpec {
    name: crate::offered::PYROSCOPE.name,
    help: "pprof profiles POSTed to Pyroscope's /ingest (-o pyroscope+http://HOST:4040[/?name=APP]), one per --window",
    extensions: crate::offered::PYROSCOPE.extensions,
    flags: &FLAGS,
    options: &PUSH_OPTIONS,
    needs: &["symbolize"],
    sets: perfpipe_core::spec::no_settings,
    build: build_pyroscope,
};

fn build_pyroscope(ctx: &BuildCtx, o: &Options, path: &Path) -> Result<Box<dyn Sink>, StageError> {
    let Some(target) = Target::pyroscope(path) else {
        return Err(format!(
            "-o {}: pyroscope output is pushed to a server, -o pyroscope+http://HOST:4040",
            path.display()
        )
        .into());
    };
    Ok(Box::new(WindowSink::build(
        ctx,
        o,
        target,
        PprofWindow::default(),
    )?))
}

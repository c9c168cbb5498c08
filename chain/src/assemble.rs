//! [`Chain`]: everything a pipeline is made of — a source, the [`Plan`]'s stages, the `--tap`s, a
//! sink — and [`Chain::build`], the one way it becomes a [`Pipeline`]: `decode` after the source
//! (unless the source frames its records itself), the stages in plan order, a tap after any stage
//! that asked for one, then the output format's sink or perf's writer.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use perfpipe_core::spec::{BuildCtx, Registry, Shared, Workers};
use perfpipe_core::{Pipeline, Requests, Settings, Stage, Tap};
#[cfg(feature = "record")]
use perfpipe_record::RecordConfig;
use perfpipe_stream::decode::DecodeConfig;
use perfpipe_stream::read::file::Input;
use perfpipe_stream::read::{Memory, ReadConfig};
use perfpipe_stream::write::file::{Output, OutputMode};
use perfpipe_stream::write::split::WriteSplitConfig;
use perfpipe_stream::write::{Discard, WriteConfig};

use crate::{output, Error, Plan};

/// Where the stream comes from.
#[derive(Debug)]
pub enum SourceSpec {
    /// A pipe-mode stream or a file-mode perf.data (`-` for standard input).
    Input {
        /// The file, or `-`.
        path: PathBuf,
        /// Grow the input pipe's buffer to this (0: leave it).
        pipe_buffer: usize,
    },
    /// `perfpipe record`'s own recording (the cargo feature `record`).
    #[cfg(feature = "record")]
    Record(Box<RecordConfig>),
    /// A stream held in memory (`bench`).
    Memory(Arc<Vec<u8>>),
}

/// Where the stream goes.
#[derive(Debug)]
pub enum SinkSpec {
    /// A file, `-` for standard output, or `NAME-%n.data` for one file per stream.
    Output {
        /// The file, `-` or a pattern.
        path: PathBuf,
        /// Pipe or file mode.
        mode: OutputMode,
        /// Grow the output pipe's buffer to this (0: leave it).
        pipe_buffer: usize,
    },
    /// Nowhere (`bench`).
    Discard,
}

impl SinkSpec {
    /// Whether the output takes a single stream (not one file per stream).
    pub fn single_output(&self) -> bool {
        match self {
            SinkSpec::Output { path, .. } => !WriteSplitConfig::is_pattern(path),
            SinkSpec::Discard => false,
        }
    }

    /// The output's path, if it is a file (or `-`).
    pub fn path(&self) -> Option<&Path> {
        match self {
            SinkSpec::Output { path, .. } => Some(path),
            SinkSpec::Discard => None,
        }
    }
}

/// Everything a pipeline is made of.
pub struct Chain<'a> {
    /// Batch size, queue length, measuring.
    pub settings: Settings,
    /// The source.
    pub source: SourceSpec,
    /// The stages, in order (the stages they need are added where needed).
    pub plan: Plan,
    /// `--tap STAGE=FILE` requests: a copy of what leaves that stage, in perf's format.
    pub taps: &'a [(String, PathBuf)],
    /// The sink.
    pub sink: SinkSpec,
    /// The outside requests stages may subscribe to.
    pub requests: Requests,
    /// Called with the requests once every stage and the sink are built and before the source
    /// is, so that a signal raised as soon as a recording runs is not lost (the CLI wires
    /// SIGUSR2 to [`DUMP`](perfpipe_core::DUMP) here). `None` for a chain built in a loop.
    pub before_source: Option<&'a dyn Fn(&Requests)>,
}

impl std::fmt::Debug for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain")
            .field("settings", &self.settings)
            .field("source", &self.source)
            .field("plan", &self.plan)
            .field("taps", &self.taps)
            .field("sink", &self.sink)
            .finish_non_exhaustive()
    }
}

impl Chain<'_> {
    /// Whether the output takes a single stream (standard output, one file).
    pub fn single_output(&self) -> bool {
        self.sink.single_output()
    }

    /// Builds the pipeline: chooses the output's format, checks that the output can be written
    /// ([`output::check_writable`]), completes the plan, builds every stage and the sink, then
    /// the source. Nothing is read before it returns, so an output that cannot be written is
    /// refused before the first byte of a live recording.
    ///
    /// # Errors
    /// What [`Plan::choose_output`], [`output::check_writable`] and [`Plan::complete`] return;
    /// [`Error::Value`] naming the
    /// stage or output that cannot be built; [`Error::Stream`] when the input or output cannot
    /// be opened; [`Error::Rule`] for a tap that names no stage.
    pub fn build(self, registry: &Registry) -> Result<Pipeline, Error> {
        let Chain {
            settings,
            source,
            mut plan,
            taps,
            sink,
            requests,
            before_source,
        } = self;
        plan.choose_output(registry, sink.path())?;
        if let SinkSpec::Output { path, .. } = &sink {
            let directory = plan
                .format
                .as_ref()
                .is_some_and(|f| output::writes_directory(f, path));
            output::check_writable(path, directory)?;
        }
        plan.complete(registry)?;
        let ctx = BuildCtx {
            settings,
            single_output: sink.single_output(),
            requests,
            workers: Workers::new(0),
            // The resources the stages share (the dso file sources of `unwind` and `symbolize`):
            // one store per pipeline, as one worker pool.
            shared: Shared::default(),
        };
        let mut stages: Vec<(String, Box<dyn Stage>)> = Vec::new();
        for s in &plan.stages {
            let stage = (s.spec.build)(&ctx, &s.options)
                .map_err(|e| Error::Value(format!("--{}", s.label), e))?;
            stages.push((s.label.clone(), stage));
        }
        // A profile's sink is built with the stages: it subscribes to the requests too.
        let profile = match (&plan.format, &sink) {
            (Some(format), SinkSpec::Output { path, .. }) => Some((
                format.spec.name,
                (format.spec.build)(&ctx, &format.options, path)
                    .map_err(|e| Error::Value(format!("{} output", format.spec.name), e))?,
            )),
            _ => None,
        };
        if let Some(hook) = before_source {
            hook(&ctx.requests);
        }
        let mut taps = Taps::new(taps);
        let (name, decode, mut pipeline) = match source {
            SourceSpec::Input { path, pipe_buffer } => {
                let read = Input::open(&ReadConfig {
                    path: path_or_std(&path),
                    pipe_buffer,
                })?;
                ("read", true, Pipeline::new(settings).source("read", read))
            }
            #[cfg(feature = "record")]
            SourceSpec::Record(config) => {
                // The overwrite dumps arrive framed, with their stream info: nothing to decode.
                let decode = !config.overwrite;
                let record = config.build()?;
                (
                    "record",
                    decode,
                    Pipeline::new(settings).source("record", record),
                )
            }
            SourceSpec::Memory(data) => (
                "memory",
                true,
                Pipeline::new(settings).source("memory", Memory::new(data)),
            ),
        };
        let mut nodes: Vec<(String, Box<dyn Stage>)> = Vec::new();
        if decode {
            nodes.push((
                "decode".to_string(),
                Box::new(DecodeConfig::default().build()),
            ));
        }
        nodes.extend(stages);
        if let Some(tap) = taps.take(name)? {
            pipeline = pipeline.stage(format!("tap:{name}"), tap);
        }
        for (name, stage) in nodes {
            let tap = taps.take(&name)?;
            pipeline = pipeline.boxed_stage(name.clone(), stage);
            if let Some(tap) = tap {
                pipeline = pipeline.stage(format!("tap:{name}"), tap);
            }
        }
        taps.check_all_used()?;
        if let Some((name, sink)) = profile {
            return Ok(pipeline.sink(name, sink));
        }
        Ok(match sink {
            SinkSpec::Discard => pipeline.sink("discard", Discard),
            SinkSpec::Output {
                path,
                mode,
                pipe_buffer,
            } if WriteSplitConfig::is_pattern(&path) => pipeline.sink(
                "write",
                WriteSplitConfig {
                    pattern: path,
                    mode,
                    pipe_buffer,
                }
                .build()?,
            ),
            SinkSpec::Output {
                path,
                mode,
                pipe_buffer,
            } => pipeline.sink(
                "write",
                Output::open(
                    &WriteConfig {
                        path: path_or_std(&path),
                        pipe_buffer,
                    },
                    mode,
                )?,
            ),
        })
    }
}

/// `None` for `-` (a standard stream), else the path.
pub fn path_or_std(p: &Path) -> Option<PathBuf> {
    (p != Path::new("-")).then(|| p.to_path_buf())
}

/// The `--tap STAGE=FILE` requests of a chain, taken as the stages are put in.
struct Taps {
    wanted: Vec<(String, PathBuf, bool)>,
    seen: Vec<String>,
}

impl Taps {
    fn new(taps: &[(String, PathBuf)]) -> Taps {
        Taps {
            wanted: taps
                .iter()
                .map(|(s, p)| (s.clone(), p.clone(), false))
                .collect(),
            seen: Vec::new(),
        }
    }

    /// A tap for the stage `name`, if one was asked for.
    fn take(&mut self, name: &str) -> Result<Option<Tap<BufWriter<File>>>, Error> {
        self.seen.push(name.to_string());
        let Some(entry) = self
            .wanted
            .iter_mut()
            .find(|(s, _, used)| s == name && !*used)
        else {
            return Ok(None);
        };
        entry.2 = true;
        let file = File::create(&entry.1).map_err(|e| {
            Error::Value(format!("--tap {name}={}", entry.1.display()), Box::new(e))
        })?;
        Ok(Some(Tap::new(BufWriter::with_capacity(1 << 20, file))))
    }

    /// Fails if a tap named a stage that is not in the pipeline.
    fn check_all_used(&self) -> Result<(), Error> {
        match self.wanted.iter().find(|(_, _, used)| !used) {
            Some((s, _, _)) => Err(Error::Rule(format!(
                "--tap {s}=…: no stage named `{s}` in this pipeline (stages: {})",
                self.seen.join(", ")
            ))),
            None => Ok(()),
        }
    }
}

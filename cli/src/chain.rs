//! The one way a pipeline is assembled: a source, `decode`, the stages in command-line order (with
//! `decompress` put in front of the first that needs it), the `--tap`s, a sink. The main command,
//! `record`, `inject` and `bench` each say what they want and build it here.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::ArgMatches;
use perfpipe_core::{Pipeline, Requests, Settings};
use perfpipe_stages::decode::DecodeConfig;
use perfpipe_stages::read::file::Input;
use perfpipe_stages::read::{Memory, ReadConfig};
use perfpipe_stages::record::RecordConfig;
use perfpipe_stages::registry::{
    BuildCtx, FlagValue, FormatSpec, Options, Registry, Spec, StageSpec, Workers,
};
use perfpipe_stages::write::file::{Output, OutputMode};
use perfpipe_stages::write::split::WriteSplitConfig;
use perfpipe_stages::write::{Discard, WriteConfig};

use crate::args::path_or_std;
use crate::run::Taps;

/// One stage of a chain: the flag that named it (its row in `--stats`, `name#2` when repeated),
/// its spec and its options.
#[derive(Clone, Debug)]
pub struct StageUse {
    /// The row name: the flag's name.
    pub label: String,
    /// The stage.
    pub spec: StageSpec,
    /// Its checked options.
    pub options: Options,
}

/// The stages a command line names, in order.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// The stages, in command-line order.
    pub stages: Vec<StageUse>,
    /// Options given by flags of a stage the chain does not have: (stage, flag, options).
    unattached: Vec<(&'static str, &'static str, Options)>,
    /// The output format a flag or `--format` chose, with its options.
    pub format: Option<FormatUse>,
    /// Options given by flags of output formats: (flag, options), applied to the output's format.
    format_settings: Vec<(&'static str, Options)>,
}

/// The output format a chain writes, and its checked options.
#[derive(Clone, Debug)]
pub struct FormatUse {
    /// The format.
    pub spec: FormatSpec,
    /// Its options.
    pub options: Options,
}

/// Why a command line's stage flags cannot make a plan.
#[derive(Debug)]
pub enum PlanError {
    /// The words are wrong (a `--stage` naming no stage): exit status 2.
    Usage(String),
    /// A value is (an option that does not parse): exit status 1.
    Value(anyhow::Error),
}

impl Plan {
    /// The stages named on the command line by their flags or by `--stage NAME[:VALUE]`, in
    /// command-line order; flags that set an option apply to every instance of their stage.
    ///
    /// # Errors
    /// [`PlanError::Usage`] for a `--stage` that names no stage-adding flag;
    /// [`PlanError::Value`] for a value its option does not take.
    pub fn from_matches(matches: &ArgMatches, registry: &Registry) -> Result<Plan, PlanError> {
        let mut uses: Vec<(usize, &'static str, Option<String>, bool)> = Vec::new();
        for spec in registry.specs() {
            for flag in spec.flags {
                let Some(indices) = matches.indices_of(flag.name) else {
                    continue;
                };
                let values: Vec<Option<String>> = match flag.value {
                    FlagValue::None => indices.clone().map(|_| None).collect(),
                    _ => matches
                        .get_many::<String>(flag.name)
                        .into_iter()
                        .flatten()
                        .map(|v| Some(v.clone()))
                        .collect(),
                };
                uses.extend(indices.zip(values).map(|(i, v)| (i, flag.name, v, false)));
            }
        }
        if let (Some(indices), Some(values)) = (
            matches.indices_of("stage"),
            matches.get_many::<String>("stage"),
        ) {
            for (i, arg) in indices.zip(values) {
                let (name, value) = match arg.split_once(':') {
                    Some((n, v)) => (n, Some(v.to_string())),
                    None => (arg.as_str(), None),
                };
                match registry.flag(name) {
                    Some((_, flag)) if flag.adds_stage => uses.push((i, flag.name, value, true)),
                    _ => {
                        let known: Vec<&str> = registry
                            .specs()
                            .iter()
                            .flat_map(|s| s.flags.iter().filter(|f| f.adds_stage))
                            .map(|f| f.name)
                            .collect();
                        return Err(PlanError::Usage(format!(
                            "--stage {arg}: no stage named `{name}` (stages: {})",
                            known.join(", ")
                        )));
                    }
                }
            }
        }
        let mut plan = Plan::default();
        plan.format_flags(matches, registry)?;
        uses.sort_by_key(|(i, _, _, _)| *i);
        let mut settings = Vec::new();
        for (_, name, value, generic) in uses {
            let (spec, flag) = registry.flag(name).expect("flags come from the registry");
            // `--stage NAME:VALUE` gives what the flag takes; for a switch, `key=value,…` options.
            let options = match (generic, flag.value, value) {
                (true, FlagValue::None, Some(list)) => {
                    spec.options_of(flag, None).and_then(|mut o| {
                        spec.parse_list(&mut o, &list)?;
                        Ok(o)
                    })
                }
                (_, _, value) => spec.options_of(flag, value.as_deref()),
            }
            .with_context(|| format!("--{name}"))
            .map_err(PlanError::Value)?;
            if flag.adds_stage {
                plan.push(flag.name, *spec, options);
            } else {
                settings.push((spec.name, flag.name, options));
            }
        }
        for (stage, flag, options) in settings {
            plan.set(stage, flag, &options);
        }
        Ok(plan)
    }

    /// Takes in the flags of the output formats and `--format NAME[:key=value,…]`.
    fn format_flags(&mut self, matches: &ArgMatches, registry: &Registry) -> Result<(), PlanError> {
        let mut chosen: Vec<(usize, FormatSpec, Options)> = Vec::new();
        let value_err = |name: &str, e: perfpipe_stages::Error| {
            PlanError::Value(anyhow::Error::new(e).context(format!("--{name}")))
        };
        for spec in registry.formats() {
            for flag in spec.flags {
                let Some(indices) = matches.indices_of(flag.name) else {
                    continue;
                };
                let values: Vec<Option<String>> = match flag.value {
                    FlagValue::None => indices.clone().map(|_| None).collect(),
                    _ => matches
                        .get_many::<String>(flag.name)
                        .into_iter()
                        .flatten()
                        .map(|v| Some(v.clone()))
                        .collect(),
                };
                for (i, v) in indices.zip(values) {
                    let options = spec
                        .options_of(flag, v.as_deref())
                        .map_err(|e| value_err(flag.name, e))?;
                    if flag.adds_stage {
                        chosen.push((i, *spec, options));
                    } else {
                        self.format_settings.push((flag.name, options));
                    }
                }
            }
        }
        if let (Some(indices), Some(values)) = (
            matches.indices_of("format"),
            matches.get_many::<String>("format"),
        ) {
            for (i, arg) in indices.zip(values) {
                let (name, list) = arg.split_once(':').unwrap_or((arg.as_str(), ""));
                if name == "perf" {
                    chosen.push((i, PERF_FORMAT, Options::new()));
                    continue;
                }
                let Some(spec) = registry.format(name) else {
                    let known: Vec<&str> = std::iter::once("perf")
                        .chain(registry.formats().iter().map(|f| f.name))
                        .collect();
                    return Err(PlanError::Usage(format!(
                        "--format {arg}: no format named `{name}` (formats: {})",
                        known.join(", ")
                    )));
                };
                let mut options = Options::new();
                spec.parse_list(&mut options, list)
                    .map_err(|e| value_err("format", e))?;
                chosen.push((i, *spec, options));
            }
        }
        chosen.sort_by_key(|(i, _, _)| *i);
        if let [first, rest @ ..] = &chosen[..] {
            if let Some(other) = rest.iter().find(|c| c.1.name != first.1.name) {
                return Err(PlanError::Usage(format!(
                    "two output formats given: {} and {}",
                    first.1.name, other.1.name
                )));
            }
        }
        self.format = chosen.first().map(|(_, spec, _)| {
            let mut options = Options::new();
            for (_, _, o) in &chosen {
                options.extend(o);
            }
            FormatUse {
                spec: *spec,
                options,
            }
        });
        Ok(())
    }

    /// Decides the output's format: the one a flag or `--format` chose, else the one the
    /// output's extension names, else perf's own. Applies the format flags to it and puts the
    /// stages it needs (`symbolize`) at the end of the chain unless the chain has them.
    ///
    /// # Errors
    /// A format flag the format does not take (`--title` for folded stacks), or `--symbolize`
    /// before perf output, which carries no symbols.
    pub fn choose_output(&mut self, registry: &Registry, sink: &SinkSpec) -> anyhow::Result<()> {
        if self.format.is_none() {
            if let SinkSpec::Output { path, .. } = sink {
                self.format = registry.format_of_path(path).map(|spec| FormatUse {
                    spec: *spec,
                    options: Options::new(),
                });
            }
        }
        let format = self
            .format
            .take()
            .filter(|f| f.spec.name != PERF_FORMAT.name);
        let Some(mut format) = format else {
            if let Some((flag, _)) = self.format_settings.first() {
                let (spec, _) = registry
                    .format_flag(flag)
                    .expect("format flags come from the registry");
                anyhow::bail!(
                    "--{flag}: an option of {} output ({})",
                    spec.name,
                    format_choices(spec)
                );
            }
            if matches!(sink, SinkSpec::Output { .. }) {
                if let Some(s) = self.stages.iter().find(|s| s.spec.name == "symbolize") {
                    anyhow::bail!(
                        "--{}: perf's format carries no symbols; write a profile instead ({})",
                        s.label,
                        registry
                            .formats()
                            .iter()
                            .map(format_choices)
                            .collect::<Vec<_>>()
                            .join("; ")
                    );
                }
            }
            return Ok(());
        };
        for (flag, options) in std::mem::take(&mut self.format_settings) {
            if let Some(key) = options.keys().find(|k| format.spec.option(k).is_none()) {
                let owner = registry
                    .formats()
                    .iter()
                    .find(|f| f.option(key).is_some())
                    .map_or("another", |f| f.name);
                anyhow::bail!(
                    "--{flag}: an option of {owner} output, not of {}",
                    format.spec.name
                );
            }
            // Options from flags first, so `--format NAME:key=…` wins.
            let mut merged = options.clone();
            merged.extend(&format.options);
            format.options = merged;
        }
        for need in format.spec.needs {
            if self.stages.iter().any(|s| s.spec.name == *need) {
                continue;
            }
            let Some(spec) = registry.find(need) else {
                anyhow::bail!(
                    "{} output needs the `{need}` stage, which is not registered",
                    format.spec.name
                );
            };
            let options = self.take_unattached(need).unwrap_or_default();
            self.push(need, *spec, options);
        }
        for &(stage, key, value) in (format.spec.sets)(&format.options) {
            for s in &mut self.stages {
                if s.spec.name == stage && !s.options.has(key) {
                    s.spec.parse_option(&mut s.options, key, value)?;
                }
            }
        }
        self.format = Some(format);
        Ok(())
    }

    /// Appends a stage, labelled `label` (`label#2`, `#3`… when repeated).
    pub fn push(&mut self, label: &str, spec: StageSpec, options: Options) {
        let seen = self
            .stages
            .iter()
            .filter(|s| s.label.split('#').next() == Some(label))
            .count();
        let label = if seen == 0 {
            label.to_string()
        } else {
            format!("{label}#{}", seen + 1)
        };
        self.stages.push(StageUse {
            label,
            spec,
            options,
        });
    }

    /// Sets `options` on every instance of `stage`; kept aside if there is none.
    fn set(&mut self, stage: &'static str, flag: &'static str, options: &Options) {
        let mut found = false;
        for s in self.stages.iter_mut().filter(|s| s.spec.name == stage) {
            s.options.extend(options);
            found = true;
        }
        if !found {
            self.unattached.push((stage, flag, options.clone()));
        }
    }

    /// The options given by flags of `stage` when the chain has no such stage (e.g. the flight
    /// recorder's trigger, which `record --overwrite` takes for its own dumps), merged.
    pub fn take_unattached(&mut self, stage: &str) -> Option<Options> {
        let mut merged: Option<Options> = None;
        self.unattached.retain(|(s, _, o)| {
            if *s != stage {
                return true;
            }
            merged.get_or_insert_with(Options::new).extend(o);
            false
        });
        merged
    }

    /// Fails if a flag set an option of a stage the chain does not have.
    ///
    /// # Errors
    /// Names the flag and the stage's own flag, e.g. `--ring-trigger: options of ring need --ring SIZE`.
    pub fn check_attached(&self, registry: &Registry) -> anyhow::Result<()> {
        let Some((stage, flag, _)) = self.unattached.first() else {
            return Ok(());
        };
        let main = registry.find(stage).and_then(|s| {
            let f = s.main_flag()?;
            Some(match s.value_name(f) {
                Some(v) => format!("--{} {v}", f.name),
                None => format!("--{}", f.name),
            })
        });
        anyhow::bail!(
            "--{flag}: options of `{stage}` need {}",
            main.unwrap_or_else(|| format!("the `{stage}` stage"))
        )
    }

    /// Puts one `decompress` before the first stage that needs decompressed records, unless a
    /// `decompress` already runs before it.
    fn insert_decompress(&mut self, registry: &Registry) {
        let Some(decompress) = registry.find("decompress") else {
            return;
        };
        let at = insert_at(
            self.stages
                .iter()
                .map(|s| (s.spec.name == decompress.name, s.spec.needs_decompressed)),
        );
        if let Some(i) = at {
            self.stages.insert(
                i,
                StageUse {
                    label: decompress.name.to_string(),
                    spec: *decompress,
                    options: Options::new(),
                },
            );
        }
    }
}

/// `--format perf`: perf's own format, the default, which no [`FormatSpec`] declares.
const PERF_FORMAT: FormatSpec = FormatSpec {
    name: "perf",
    help: "perf's own format (pipe or file mode)",
    extensions: &[],
    flags: &[],
    options: &[],
    needs: &[],
    sets: perfpipe_stages::registry::no_settings,
    build: |_, _, _| Err(perfpipe_stages::Error::EmptyInput),
};

/// How the command line chooses a format: `-o FILE.svg or --flamegraph`.
fn format_choices(spec: &FormatSpec) -> String {
    let mut ways: Vec<String> = spec
        .extensions
        .iter()
        .map(|e| format!("-o FILE.{e}"))
        .collect();
    ways.extend(
        spec.flags
            .iter()
            .filter(|f| f.adds_stage)
            .map(|f| format!("--{}", f.name)),
    );
    ways.join(" or ")
}

/// Where `decompress` goes among stages given as (is decompress, needs decompressed).
fn insert_at(stages: impl Iterator<Item = (bool, bool)>) -> Option<usize> {
    for (i, (is_decompress, needs)) in stages.enumerate() {
        if is_decompress {
            return None;
        }
        if needs {
            return Some(i);
        }
    }
    None
}

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
    /// `perfpipe record`'s own recording.
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
}

/// Everything a pipeline is made of.
#[derive(Debug)]
pub struct Chain<'a> {
    /// Batch size, queue length, measuring.
    pub settings: Settings,
    /// The source.
    pub source: SourceSpec,
    /// The stages, in order (`decompress` is added where needed).
    pub plan: Plan,
    /// `--tap STAGE=FILE` requests.
    pub taps: &'a [(String, PathBuf)],
    /// The sink.
    pub sink: SinkSpec,
    /// The outside requests stages may subscribe to.
    pub requests: Requests,
    /// Raise the requests on their signals (SIGUSR2: [`DUMP`](perfpipe_core::DUMP)), wired after
    /// the stages are built and before the source starts, so a signal that comes as soon as the
    /// recording runs is not lost. Off for `bench`, which builds chains in a loop.
    pub signals: bool,
}

impl Chain<'_> {
    /// Whether the output takes a single stream (standard output, one file).
    pub fn single_output(&self) -> bool {
        self.sink.single_output()
    }

    /// Builds the pipeline.
    ///
    /// # Errors
    /// When the input or output cannot be opened, a stage cannot be built or a tap names no stage.
    pub fn build(self, registry: &Registry) -> anyhow::Result<Pipeline> {
        let Chain {
            settings,
            source,
            mut plan,
            taps,
            sink,
            requests,
            signals,
        } = self;
        plan.choose_output(registry, &sink)?;
        plan.check_attached(registry)?;
        plan.insert_decompress(registry);
        let ctx = BuildCtx {
            settings,
            single_output: sink.single_output(),
            requests,
            workers: Workers::new(0),
        };
        let mut stages: Vec<(String, Box<dyn perfpipe_core::Stage>)> = Vec::new();
        for s in &plan.stages {
            let stage =
                (s.spec.build)(&ctx, &s.options).with_context(|| format!("--{}", s.label))?;
            stages.push((s.label.clone(), stage));
        }
        // A profile's sink is built with the stages: it subscribes to SIGUSR2 too.
        let profile = match (&plan.format, &sink) {
            (Some(format), SinkSpec::Output { path, .. }) => Some((
                format.spec.name,
                (format.spec.build)(&ctx, &format.options, path)
                    .with_context(|| format!("{} output", format.spec.name))?,
            )),
            _ => None,
        };
        if signals {
            crate::run::watch_requests(&ctx.requests);
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
        let mut nodes: Vec<(String, Box<dyn perfpipe_core::Stage>)> = Vec::new();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decompress_goes_before_the_first_stage_that_needs_it() {
        let at = |v: &[(bool, bool)]| insert_at(v.iter().copied());
        assert_eq!(at(&[(false, false), (false, true), (false, true)]), Some(1));
        // Already there, earlier: nothing added.
        assert_eq!(at(&[(true, false), (false, true)]), None);
        // Only later than the first stage that needs it: one more goes before it.
        assert_eq!(at(&[(false, true), (true, false)]), Some(0));
        assert_eq!(at(&[(false, false)]), None);
    }

    #[test]
    fn plan_labels_repeats_and_puts_decompress_first() {
        let r = Registry::builtin();
        let m = crate::command_with(&r)
            .try_get_matches_from(["perfpipe", "--drop", "lost", "--comm", "a", "--drop", "x"])
            .unwrap();
        let mut plan = Plan::from_matches(&m, &r).unwrap();
        plan.insert_decompress(&r);
        let labels: Vec<&str> = plan.stages.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["decompress", "drop", "comm", "drop#2"]);
        assert_eq!(plan.stages[2].spec.name, "filter");
        assert_eq!(plan.stages[2].options.text("comm"), Some("a"));
    }

    #[test]
    fn option_flags_attach_to_their_stage_wherever_it_is() {
        let r = Registry::builtin();
        let argv = [
            "perfpipe",
            "--ring-trigger",
            "pid == 1",
            "--buildid",
            "--ring",
            "1M",
            "--buildid-all",
            "--host-ids",
            "no",
        ];
        let m = crate::command_with(&r).try_get_matches_from(argv).unwrap();
        let plan = Plan::from_matches(&m, &r).unwrap();
        assert!(plan.check_attached(&r).is_ok());
        let ring = &plan.stages[1].options;
        assert_eq!(
            (ring.size("size"), ring.text("trigger")),
            (Some(1 << 20), Some("pid == 1"))
        );
        for s in [&plan.stages[0], &plan.stages[2]] {
            assert_eq!(s.options.text("host"), Some("no"), "{}", s.label);
        }
        assert!(plan.stages[2].options.switch("all"));

        let m = crate::command_with(&r)
            .try_get_matches_from(["perfpipe", "--ring-after", "1s"])
            .unwrap();
        let mut plan = Plan::from_matches(&m, &r).unwrap();
        let err = plan.check_attached(&r).unwrap_err().to_string();
        assert_eq!(err, "--ring-after: options of `ring` need --ring SIZE");
        let taken = plan.take_unattached("ring").unwrap();
        assert_eq!(
            taken.duration("after"),
            Some(std::time::Duration::from_secs(1))
        );
        assert!(plan.check_attached(&r).is_ok());
    }

    #[test]
    fn generic_stage_flag_keeps_command_line_order() {
        let r = Registry::builtin();
        let argv = [
            "perfpipe",
            "--drop",
            "lost",
            "--stage",
            "buildid-all",
            "--stage",
            "drop:switch",
            "--buildid",
        ];
        let m = crate::command_with(&r).try_get_matches_from(argv).unwrap();
        let plan = Plan::from_matches(&m, &r).unwrap();
        let got: Vec<(&str, Option<&str>)> = plan
            .stages
            .iter()
            .map(|s| (s.label.as_str(), s.options.text("types")))
            .collect();
        assert_eq!(
            got,
            [
                ("drop", Some("lost")),
                ("buildid-all", None),
                ("drop#2", Some("switch")),
                ("buildid", None),
            ]
        );
        let bad = |argv: &[&str]| {
            let m = crate::command_with(&r).try_get_matches_from(argv).unwrap();
            match Plan::from_matches(&m, &r) {
                Err(PlanError::Usage(e)) => e,
                Err(PlanError::Value(e)) => format!("value: {e:#}"),
                Ok(_) => "ok".into(),
            }
        };
        assert!(bad(&["perfpipe", "--stage", "nope"]).contains("no stage named `nope`"));
        assert!(bad(&["perfpipe", "--stage", "ring-trigger:x"]).contains("no stage named"));
        assert!(bad(&["perfpipe", "--stage", "buildid:x"]).contains("unknown option `x`"));
        assert!(bad(&["perfpipe", "--buildid", "--stage", "buildid:host=no"]) == "ok");
        assert!(bad(&["perfpipe", "--ring", "lots"]).contains("is not a size"));
    }
}

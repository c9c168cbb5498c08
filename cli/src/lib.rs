//! The `perfpipe` command line: turns argv into a pipeline of stages and runs it. It holds no record
//! logic; everything it runs lives in `perfpipe-stages`.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use perfpipe_core::{Pipeline, Settings};
use perfpipe_stages::decode::DecodeConfig;
use perfpipe_stages::read::ReadConfig;
use perfpipe_stages::read_file::Input;
use perfpipe_stages::registry::{Registry, BUILTIN};
use perfpipe_stages::write::WriteConfig;
use perfpipe_stages::write_file::{Output, OutputMode};
use perfpipe_stages::write_split::WriteSplitConfig;

mod bench;
mod bench_inject;
mod inject;
mod progress;
mod record;
mod run;

/// Exit status when the pipeline failed (bad input, I/O error, a stage error).
pub const EXIT_FAILURE: u8 = 1;
/// Exit status for a command-line usage error (clap's convention).
pub const EXIT_USAGE: u8 = 2;

const AFTER_HELP: &str = "\
Stage flags run in the order given on the command line, between decode and write.

Exit status: 0 when the whole input was written, and also when the downstream reader closed the pipe
early (like `head`, a closed pipe is a normal end: perfpipe stops at once and says nothing); 1 when
the input is malformed or truncated (every record before the fault is still written) or on an I/O or
stage error; 2 on a usage error.

Example:
  perf record -o - -- ./workload | perfpipe --stats | perf report -i -";

/// Stream Linux perf pipe-mode data through composable stages.
#[derive(Debug, Parser)]
#[command(name = "perfpipe", version, about, after_help = AFTER_HELP)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the stages, one line each.
    Stages,
    /// Measure stage chains on in-memory workloads.
    Bench {
        #[command(subcommand)]
        what: bench::BenchCommand,
    },
    /// A drop-in for `perf inject`: -i, -o, -b, --buildid-all, --known-build-ids, -v.
    Inject(inject::InjectArgs),
    /// Record with perf_event_open itself: -e, -c/-F, -g, -a/-p/-- CMD, --overwrite, stage flags.
    Record(record::RecordArgs),
}

/// Options of a pipeline run.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Input: a perf.data in file mode (mapped; told apart by its header, whatever its name) or
    /// a pipe-mode stream; `-` is standard input (pipe mode).
    #[arg(short, long, value_name = "FILE", default_value = "-")]
    input: PathBuf,
    /// Output; `-` is standard output. A regular file is written in file mode (perf.data, under a
    /// temporary name renamed at the end), a FIFO or device in pipe mode; see --pipe and --file.
    #[arg(short, long, value_name = "FILE", default_value = "-")]
    output: PathBuf,
    /// Write pipe mode even to a regular file.
    #[arg(long, conflicts_with = "file")]
    pipe: bool,
    /// Write file mode (perf.data) even to a FIFO or device; needs -o FILE.
    #[arg(long)]
    file: bool,
    /// Print a per-stage table (records, MB/s, working/starved/blocked time, the bottleneck) on
    /// stderr at the end, whatever the end: input exhausted, error, interrupt, closed downstream.
    #[arg(long)]
    stats: bool,
    /// Write the same figures as JSON to FILE at the end (schema: docs/stats.schema.json).
    #[arg(long, value_name = "FILE")]
    stats_json: Option<PathBuf>,
    /// Show live per-stage progress on stderr (default: only when stderr is a terminal).
    #[arg(long, overrides_with = "no_progress")]
    progress: bool,
    /// Never show live progress.
    #[arg(long)]
    no_progress: bool,
    /// Copy the stream as it leaves STAGE (read, decode, a stage flag's name; `name#2` for a
    /// repeated one) to FILE, a pipe-mode stream that `perf script -i FILE` reads. Repeatable.
    #[arg(long, value_name = "STAGE=FILE", value_parser = run::parse_tap)]
    tap: Vec<(String, PathBuf)>,
    /// Bytes per batch (suffixes K, M): the size of each read and of the unit passed between stages.
    #[arg(long, value_name = "SIZE", default_value = "256K", value_parser = parse_size)]
    batch_size: usize,
    /// Batches each channel between two stages holds.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    queue: u16,
    /// Do not count or time anything (--stats then shows zeros): only to measure what measuring
    /// costs, side by side with a normal run (benches/passthrough.sh does).
    #[arg(long)]
    no_measure: bool,
    /// Grow the input and output pipes' kernel buffers to SIZE (Linux F_SETPIPE_SZ; 0 to leave them).
    #[arg(long, value_name = "SIZE", default_value = "1M", value_parser = parse_size)]
    pipe_buffer: usize,
    /// With --ring: dump when a sample matches EXPR (the --filter language), e.g. 'comm == "db*"'.
    #[arg(long, value_name = "EXPR")]
    ring_trigger: Option<String>,
    /// With --ring-trigger: keep recording for DURATION of event time after the trigger (500ms, 2s).
    #[arg(long, value_name = "DURATION")]
    ring_after: Option<String>,
}

impl RunArgs {
    /// Defaults with no reporting, for building a report-only copy.
    fn quiet() -> RunArgs {
        RunArgs {
            input: "-".into(),
            output: "-".into(),
            pipe: false,
            file: false,
            stats: false,
            stats_json: None,
            progress: false,
            no_progress: true,
            tap: Vec::new(),
            no_measure: false,
            batch_size: 256 << 10,
            queue: 4,
            pipe_buffer: 0,
            ring_trigger: None,
            ring_after: None,
        }
    }
}

impl RunArgs {
    /// The output format that --pipe / --file ask for.
    fn output_mode(&self) -> OutputMode {
        match (self.pipe, self.file) {
            (true, _) => OutputMode::Pipe,
            (_, true) => OutputMode::File,
            _ => OutputMode::Auto,
        }
    }
}

/// Parses `256K`, `1M`, `4096`.
fn parse_size(s: &str) -> Result<usize, String> {
    let (digits, mult) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 1 << 10),
        Some(b'm' | b'M') => (&s[..s.len() - 1], 1 << 20),
        Some(b'g' | b'G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let n: usize = digits
        .parse()
        .map_err(|_| format!("`{s}` is not a size like 4096, 256K or 1M"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("`{s}` is too large"))
}

/// The clap command of the built-in registry.
pub fn command() -> clap::Command {
    command_with(&Registry::builtin())
}

/// The clap command: the derived options plus one flag per stage of `registry` and the generic
/// `--stage`, on the main command and on `bench pipeline`.
pub fn command_with(registry: &Registry) -> clap::Command {
    stage_args(Cli::command(), registry)
        .mut_subcommand("bench", |b| {
            b.mut_subcommand("pipeline", |p| stage_args(p, registry))
                .subcommand(bench_inject::command())
        })
        .mut_subcommand("record", |r| stage_args(r, registry))
}

/// Adds one flag per registered transform stage, and `--stage`.
fn stage_args(mut cmd: clap::Command, registry: &Registry) -> clap::Command {
    const HEADING: &str = "Stages (run in command-line order)";
    for spec in registry.specs() {
        let mut arg = clap::Arg::new(spec.name)
            .long(spec.name)
            .help(spec.help)
            .help_heading(HEADING)
            .action(clap::ArgAction::Append);
        arg = match spec.value {
            Some(v) => arg.value_name(v).num_args(1),
            None => arg.num_args(0).default_missing_value(""),
        };
        cmd = cmd.arg(arg);
    }
    cmd.arg(
        clap::Arg::new("stage")
            .long("stage")
            .value_name("NAME[:VALUE]")
            .help("run any registered stage: NAME, or NAME:VALUE with what its flag takes (e.g. drop:switch, count:top=5); see `perfpipe stages`")
            .help_heading(HEADING)
            .action(clap::ArgAction::Append),
    )
}

/// The transform stages named on the command line (by their flags or by `--stage`), in
/// command-line order, with their values.
///
/// # Errors
/// A `--stage` that names no registered stage, or gives a value to a stage that takes none.
pub fn stage_flags(
    matches: &ArgMatches,
    registry: &Registry,
) -> Result<Vec<(&'static str, Option<String>)>, String> {
    let mut flags = Vec::new();
    for spec in registry.specs() {
        let Some(indices) = matches.indices_of(spec.name) else {
            continue;
        };
        let values: Vec<Option<String>> = match spec.value {
            Some(_) => matches
                .get_many::<String>(spec.name)
                .into_iter()
                .flatten()
                .map(|v| Some(v.clone()))
                .collect(),
            None => indices.clone().map(|_| None).collect(),
        };
        flags.extend(indices.zip(values).map(|(i, v)| (i, spec.name, v)));
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
            let Some(spec) = registry.find(name) else {
                let known: Vec<&str> = registry.specs().iter().map(|s| s.name).collect();
                return Err(format!(
                    "--stage {arg}: no stage named `{name}` (stages: {})",
                    known.join(", ")
                ));
            };
            if spec.value.is_none() && value.is_some() {
                return Err(format!("--stage {arg}: `{name}` takes no value"));
            }
            flags.push((i, spec.name, value));
        }
    }
    flags.sort_by_key(|(i, _, _)| *i);
    Ok(flags.into_iter().map(|(_, n, v)| (n, v)).collect())
}

fn path_or_std(p: &std::path::Path) -> Option<PathBuf> {
    (p != std::path::Path::new("-")).then(|| p.to_path_buf())
}

/// The stages after `read`: `decode`, then the named transforms in order (with `decompress` put in
/// front of the first that needs decompressed input). A stage named twice is labelled `name#2`.
///
/// # Errors
/// When a stage cannot be built from its flag's value.
pub fn chain(
    registry: &Registry,
    stages: &[(&'static str, Option<String>)],
) -> anyhow::Result<Vec<(String, Box<dyn perfpipe_core::Stage>)>> {
    let mut stages = stages.to_vec();
    registry.insert_decompress(&mut stages, None);
    let mut nodes: Vec<(String, Box<dyn perfpipe_core::Stage>)> = vec![(
        "decode".to_string(),
        Box::new(DecodeConfig::default().build()),
    )];
    for (name, value) in &stages {
        let spec = registry.find(name).expect("flags come from the registry");
        let stage = (spec.build)(value.as_deref()).with_context(|| format!("--{name}"))?;
        // A stage named twice gets `#2`, `#3`… so that rows and taps can tell them apart.
        let seen = nodes
            .iter()
            .filter(|(n, _)| n.split('#').next() == Some(*name))
            .count();
        let label = if seen == 0 {
            name.to_string()
        } else {
            format!("{name}#{}", seen + 1)
        };
        nodes.push((label, stage));
    }
    Ok(nodes)
}

/// Builds the pipeline for a run.
///
/// # Errors
/// When the input or output cannot be opened or a stage cannot be built.
pub fn build(
    registry: &Registry,
    args: &RunArgs,
    stages: &[(&'static str, Option<String>)],
) -> anyhow::Result<Pipeline> {
    let settings = Settings {
        batch_bytes: args.batch_size.max(4096),
        queue_capacity: usize::from(args.queue),
        measure: !args.no_measure,
    };
    let read = Input::open(&ReadConfig {
        path: path_or_std(&args.input),
        pipe_buffer: args.pipe_buffer,
    })?;
    let split = WriteSplitConfig::is_pattern(&args.output);
    let stages = ring_value(args, stages, split)?;
    let write = if split {
        None
    } else {
        Some(Output::open(
            &WriteConfig {
                path: path_or_std(&args.output),
                pipe_buffer: args.pipe_buffer,
            },
            args.output_mode(),
        )?)
    };
    let nodes = chain(registry, &stages)?;
    let mut pipeline = Pipeline::new(settings).source("read", read);
    let mut taps = run::Taps::new(&args.tap)?;
    if let Some(tap) = taps.take("read")? {
        pipeline = pipeline.stage("tap:read", tap);
    }
    for (name, stage) in nodes {
        let tap = taps.take(&name)?;
        pipeline = pipeline.boxed_stage(name.clone(), stage);
        if let Some(tap) = tap {
            pipeline = pipeline.stage(format!("tap:{name}"), tap);
        }
    }
    taps.check_all_used()?;
    Ok(match write {
        Some(w) => pipeline.sink("write", w),
        None => pipeline.sink(
            "write",
            WriteSplitConfig {
                pattern: args.output.clone(),
                mode: args.output_mode(),
                pipe_buffer: args.pipe_buffer,
            }
            .build()?,
        ),
    })
}

/// `stages` with `--ring`'s value completed from `--ring-trigger` and `--ring-after`, and with
/// `once` when the output is a single stream (`split` false): perf reads one stream per pipe or
/// file, so one output takes one dump.
///
/// # Errors
/// `--ring-trigger`/`--ring-after` without `--ring`.
fn ring_value(
    args: &RunArgs,
    stages: &[(&'static str, Option<String>)],
    split: bool,
) -> anyhow::Result<Vec<(&'static str, Option<String>)>> {
    let mut stages = stages.to_vec();
    let ring = stages.iter_mut().find(|(n, _)| *n == "ring");
    let Some((_, value)) = ring else {
        if args.ring_trigger.is_some() || args.ring_after.is_some() {
            anyhow::bail!("--ring-trigger and --ring-after need --ring SIZE");
        }
        return Ok(stages);
    };
    let mut v = value.take().unwrap_or_default();
    if !split {
        v.push_str(",once");
    }
    if let Some(d) = &args.ring_after {
        v.push_str(&format!(",after={d}"));
    }
    if let Some(e) = &args.ring_trigger {
        v.push_str(&format!(",trigger={e}"));
    }
    *value = Some(v);
    Ok(stages)
}

/// Runs the command line with the built-in stages; the whole of `main`.
pub fn main() -> ExitCode {
    main_with(Registry::builtin())
}

/// Runs the command line with the stages of `registry`: a program of your own adds its stages to
/// [`Registry::builtin`] and gets the whole CLI (flags, `--stage`, `perfpipe stages`, `--stats`,
/// `bench pipeline`) with them. See `docs/custom-stages.md`.
pub fn main_with(registry: Registry) -> ExitCode {
    let matches = match command_with(&registry).try_get_matches() {
        Ok(m) => m,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    if let Some(m) = matches
        .subcommand_matches("bench")
        .and_then(|b| b.subcommand_matches(bench_inject::NAME))
    {
        return bench_inject::main_matches(m);
    }
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match &cli.command {
        Some(Command::Stages) => {
            print_stages(&registry);
            return ExitCode::SUCCESS;
        }
        Some(Command::Bench { what }) => {
            let sub = matches
                .subcommand_matches("bench")
                .and_then(|m| m.subcommand().map(|(_, m)| m))
                .expect("bench has a subcommand");
            return match stage_flags(sub, &registry) {
                Ok(flags) => bench::run(what, &registry, &flags),
                Err(e) => {
                    eprintln!("perfpipe: {e}");
                    ExitCode::from(EXIT_USAGE)
                }
            };
        }
        Some(Command::Inject(args)) => return inject::main(args),
        Some(Command::Record(args)) => {
            let sub = matches
                .subcommand_matches("record")
                .expect("record has its matches");
            return record::main(args, sub, &registry);
        }
        None => {}
    }
    let stages = match stage_flags(&matches, &registry) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("perfpipe: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let pipeline = match build(&registry, &cli.run, &stages) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("perfpipe: {e:#}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    if stages.iter().any(|(n, _)| *n == "ring") {
        run::watch_dump_requests();
    }
    run::run(pipeline, &cli.run)
}

fn print_stages(registry: &Registry) {
    let mut out = std::io::stdout().lock();
    let (first, rest) = BUILTIN.split_at(2);
    for (name, help) in first {
        let _ = writeln!(out, "{name:<24} {help}");
    }
    for spec in registry.specs() {
        let flag = match spec.value {
            Some(v) => format!("--{} {v}", spec.name),
            None => format!("--{}", spec.name),
        };
        let _ = writeln!(out, "{flag:<24} {}", spec.help);
        for o in spec.options {
            let _ = writeln!(out, "{:<24}   {}=…  {}", "", o.key, o.help);
        }
    }
    for (name, help) in rest {
        let _ = writeln!(out, "{name:<24} {help}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("256K"), Ok(256 << 10));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert!(parse_size("lots").is_err());
    }

    #[test]
    fn defaults_are_stdin_stdout() {
        let m = command().try_get_matches_from(["perfpipe"]).unwrap();
        let cli = Cli::from_arg_matches(&m).unwrap();
        assert_eq!(cli.run.input, PathBuf::from("-"));
        assert_eq!(cli.run.output, PathBuf::from("-"));
        assert_eq!(cli.run.batch_size, 256 << 10);
        assert!(stage_flags(&m, &Registry::builtin()).unwrap().is_empty());
    }

    #[test]
    fn pipe_and_file_pick_the_output_format() {
        let mode = |argv: &[&str]| {
            let m = command().try_get_matches_from(argv).unwrap();
            Cli::from_arg_matches(&m).unwrap().run.output_mode()
        };
        assert_eq!(mode(&["perfpipe", "-o", "x.data"]), OutputMode::Auto);
        assert_eq!(mode(&["perfpipe", "--pipe", "-o", "x"]), OutputMode::Pipe);
        assert_eq!(mode(&["perfpipe", "--file", "-o", "x"]), OutputMode::File);
        assert!(command()
            .try_get_matches_from(["perfpipe", "--pipe", "--file"])
            .is_err());
    }

    #[test]
    fn stage_flags_and_generic_stage_keep_command_line_order() {
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
        let m = command_with(&r).try_get_matches_from(argv).unwrap();
        let flags = stage_flags(&m, &r).unwrap();
        assert_eq!(
            flags,
            vec![
                ("drop", Some("lost".to_string())),
                ("buildid-all", None),
                ("drop", Some("switch".to_string())),
                ("buildid", None),
            ]
        );
        let bad = command_with(&r)
            .try_get_matches_from(["perfpipe", "--stage", "nope"])
            .unwrap();
        assert!(stage_flags(&bad, &r)
            .unwrap_err()
            .contains("no stage named `nope`"));
        let bad = command_with(&r)
            .try_get_matches_from(["perfpipe", "--stage", "buildid:x"])
            .unwrap();
        assert!(stage_flags(&bad, &r)
            .unwrap_err()
            .contains("takes no value"));
    }

    #[test]
    fn help_lists_every_option() {
        let help = command().render_long_help().to_string();
        for flag in [
            "--input",
            "--output",
            "--stats",
            "--batch-size",
            "--queue",
            "--pipe-buffer",
        ] {
            assert!(help.contains(flag), "{flag} missing from --help");
        }
        assert!(help.contains("Exit status"));
    }
}

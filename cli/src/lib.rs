//! The `perfpipe` command line: turns argv into a pipeline of stages and runs it. It holds no record
//! logic and no assembly rule: the stages live in the stage crates, the catalogue and the one way
//! a chain is assembled in `perfpipe-chain`.
//!
//! - [`args`]: the option groups commands share (output, reporting, batches, pipes);
//! - [`chain`]: the mapping from the stage and format arguments to the library's words;
//! - `diff`: `perfpipe diff`, two profiles compared (each side a chain ending in the
//!   `diff-side` format);
//! - `timeline`: the `--timeline` SVG;
//! - this file: the commands, the stage flags generated from the registry, and `main`.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use perfpipe_chain::{Chain, Plan, SinkSpec, SourceSpec, FIXED};
use perfpipe_core::spec::{FlagValue, Kind, Registry, Spec};
use perfpipe_core::Requests;
use perfpipe_stream::write::file::OutputMode;

mod archive;
pub mod args;
mod bench;
mod bench_inject;
pub mod chain;
mod diff;
mod inject;
mod progress;
mod record;
mod run;
mod timeline;

use args::{BatchArgs, IoArgs, OutputArgs, ReportArgs};

/// Exit status when the pipeline failed (bad input, I/O error, a stage error).
pub const EXIT_FAILURE: u8 = 1;
/// Exit status for a command-line usage error (clap's convention), an output that cannot be
/// written among them (refused before anything is read).
pub const EXIT_USAGE: u8 = 2;

const AFTER_HELP: &str = "\
Stage flags run in the order given on the command line, between decode and write.

Exit status: 0 when the whole input was written, and also when the downstream reader closed the
pipe early (like `head`, a closed pipe is a normal end: perfpipe stops at once and says nothing);
1 when the input is malformed or truncated (every record before the fault is still written) or on
an I/O or stage error; 2 on a usage error, and on an output that cannot be written (a directory
for a format of one file, a missing or read-only place, a format not built in), refused before
anything is read. A directory output (`-o DIR/`, or a directory that exists) is a Parquet dataset.

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
    /// List the stages, one line each, with their flags and options.
    Stages,
    /// Measure stage chains on in-memory workloads.
    Bench {
        #[command(subcommand)]
        what: bench::BenchCommand,
    },
    /// A drop-in for `perf inject`: -i, -o, -b, --buildid-all, -B, --mmap2-buildid-all,
    /// --known-build-ids, -v; perf inject's other options are refused by name.
    #[command(after_help = inject::after_help())]
    Inject(inject::InjectArgs),
    /// Record with perf_event_open itself: -e (software events, tracepoints), -c/-F, -g,
    /// --switch-events, -a/-p/-- CMD, --overwrite, stage flags.
    Record(record::RecordArgs),
    /// On the recording host: a tar of the files that name a recording's frames (perf's
    /// build-id-cache layout), for `--symbols ARCHIVE` or `tar xf ARCHIVE -C ~/.debug` elsewhere.
    Archive(archive::ArchiveArgs),
    /// Compare two profiles (recordings or folded stacks) stack by stack: three-column folded
    /// stacks, a differential flame graph or pprof; NEW is standard input by default.
    Diff(diff::DiffArgs),
}

/// Options of a pipeline run.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Input: a perf.data in file mode (read with pread(2); told apart by its header, whatever
    /// its name) or a pipe-mode stream; `-` is standard input (pipe mode).
    #[arg(short, long, value_name = "FILE", default_value = "-")]
    input: PathBuf,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    report: ReportArgs,
    #[command(flatten)]
    batch: BatchArgs,
    #[command(flatten)]
    io: IoArgs,
}

/// The clap command of the built-in registry.
pub fn command() -> clap::Command {
    command_with(&perfpipe_chain::builtin())
}

/// The clap command: the derived options plus every flag the stages of `registry` declare and the
/// generic `--stage`, on the main command, `record` and `bench pipeline`.
pub fn command_with(registry: &Registry) -> clap::Command {
    stage_args(Cli::command(), registry)
        .mut_subcommand("bench", |b| {
            b.mut_subcommand("pipeline", |p| stage_args(p, registry))
                .subcommand(bench_inject::command())
        })
        .mut_subcommand("record", |r| stage_args(r, registry))
        .mut_subcommand("diff", |d| stage_args(d, registry))
}

/// Adds the flags the registered stages declare, and `--stage`.
fn stage_args(mut cmd: clap::Command, registry: &Registry) -> clap::Command {
    const HEADING: &str = "Stages (run in command-line order)";
    for spec in registry.specs() {
        for flag in spec.flags {
            if cmd.get_arguments().any(|a| a.get_id() == flag.name) {
                continue; // a flag two stages share (--symfs)
            }
            let mut arg = clap::Arg::new(flag.name)
                .long(flag.name)
                .help(flag.help)
                .help_heading(HEADING)
                .action(clap::ArgAction::Append);
            arg = match (help_value_name(spec, flag), flag.value) {
                // A list of options may be empty: `--count` alone takes the defaults.
                (Some(v), FlagValue::Options) => {
                    arg.value_name(v).num_args(0..=1).default_missing_value("")
                }
                (Some(v), _) => arg.value_name(v).num_args(1),
                (None, _) => arg.num_args(0).default_missing_value(""),
            };
            if let FlagValue::Option(key) = flag.value {
                if let Some(Kind::Choice(words)) = spec.option(key).map(|o| o.kind) {
                    arg = arg.value_parser(clap::builder::PossibleValuesParser::new(words.iter()));
                }
            }
            cmd = cmd.arg(arg);
        }
    }
    const FORMATS: &str = "Output formats (chosen by -o FILE.EXT, a format flag or --format)";
    for spec in registry.formats() {
        for flag in spec.flags {
            if cmd.get_arguments().any(|a| a.get_id() == flag.name) {
                continue; // a flag two formats share
            }
            let mut arg = clap::Arg::new(flag.name)
                .long(flag.name)
                .help(flag.help)
                .help_heading(FORMATS)
                .action(clap::ArgAction::Append);
            arg = match help_value_name(spec, flag) {
                Some(v) => arg.value_name(v).num_args(1),
                None => arg.num_args(0).default_missing_value(""),
            };
            if let FlagValue::Option(key) = flag.value {
                if let Some(Kind::Choice(words)) = spec.option(key).map(|o| o.kind) {
                    arg = arg.value_parser(clap::builder::PossibleValuesParser::new(words.iter()));
                }
            }
            cmd = cmd.arg(arg);
        }
    }
    let names: Vec<&str> = std::iter::once("perf")
        .chain(registry.formats().iter().map(|f| f.name))
        .collect();
    cmd = cmd.arg(
        clap::Arg::new("format")
            .long("format")
            .value_name("NAME[:OPTIONS]")
            .help(format!(
                "the output's format, whatever its name: {} (default: by -o's extension, else perf); see `perfpipe stages`",
                names.join(", ")
            ))
            .help_heading(FORMATS)
            .action(clap::ArgAction::Append),
    );
    cmd.arg(
        clap::Arg::new("stage")
            .long("stage")
            .value_name("NAME[:VALUE]")
            .help("run any registered stage: NAME, or NAME:VALUE with what its flag takes (e.g. drop:switch, ring:64M), or for a flag without a value NAME:key=value,… of its options (e.g. buildid:host=no); see `perfpipe stages`")
            .help_heading(HEADING)
            .action(clap::ArgAction::Append),
    )
}

/// The longest value name `--help` shows whole; a longer one (a list of choices) is the option's
/// key in capitals, as clap lists the choices after the help (`--weight <WEIGHT>`).
const HELP_VALUE_NAME_MAX: usize = 16;

/// What `--help` shows as `flag`'s value: short, so that a section keeps one help column that
/// starts well before the middle of a 100-column line (`tests/help.rs`).
fn help_value_name(spec: &dyn Spec, flag: &perfpipe_core::spec::Flag) -> Option<String> {
    let name = spec.value_name(flag)?;
    match flag.value {
        FlagValue::Option(key) if name.chars().count() > HELP_VALUE_NAME_MAX => {
            Some(key.to_uppercase().replace('-', "_"))
        }
        _ => Some(name),
    }
}

/// The plan of a command line's stage flags, or the exit status for a bad one.
fn plan(matches: &clap::ArgMatches, registry: &Registry, who: &str) -> Result<Plan, ExitCode> {
    chain::plan(matches, registry).map_err(|e| chain_error(e, who))
}

/// Prints a chain's error and gives its exit status: 2 when the command line is at fault, else 1.
fn chain_error(e: perfpipe_chain::Error, who: &str) -> ExitCode {
    let status = if e.is_usage() {
        EXIT_USAGE
    } else {
        EXIT_FAILURE
    };
    eprintln!("{who}: {:#}", anyhow::Error::new(e));
    ExitCode::from(status)
}

/// Runs `plan` from `input` (a file or `-`) to `output` with the default settings and 1 MiB
/// pipe buffers, SIGUSR2 wired: the file-to-file commands (`inject`, `archive`, each side of
/// `diff`).
fn run_file_to_file(
    plan: Plan,
    (input, output, mode): (&std::path::Path, &std::path::Path, OutputMode),
    registry: &Registry,
    report: &ReportArgs,
    who: &str,
) -> ExitCode {
    let chain = Chain {
        settings: perfpipe_core::Settings::default(),
        source: SourceSpec::Input {
            path: input.to_path_buf(),
            pipe_buffer: 1 << 20,
        },
        plan,
        taps: &[],
        sink: SinkSpec::Output {
            path: output.to_path_buf(),
            mode,
            pipe_buffer: 1 << 20,
        },
        requests: Requests::default(),
        before_source: Some(&run::watch_requests),
    };
    build_and_run(chain, registry, report, Some(input), who)
}

/// Builds the chain and runs it; `input` is the input file, for the progress bar.
fn build_and_run(
    chain: Chain<'_>,
    registry: &Registry,
    report: &ReportArgs,
    input: Option<&std::path::Path>,
    who: &str,
) -> ExitCode {
    let pipeline = match chain.build(registry) {
        Ok(p) => p,
        Err(e) => return chain_error(e, who),
    };
    run::run(pipeline, report, input)
}

/// Runs the command line with the built-in stages; the whole of `main`.
pub fn main() -> ExitCode {
    main_with(perfpipe_chain::builtin())
}

/// Runs the command line with the stages of `registry`: a program of your own adds its stages to
/// [`perfpipe_chain::builtin`] and gets the whole CLI (flags, `--stage`, `perfpipe stages`, `--stats`,
/// `bench pipeline`, `record`) with them. See `docs/custom-stages.md`.
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
            return match plan(sub, &registry, "perfpipe bench") {
                Ok(plan) => bench::run(what, &registry, &plan),
                Err(code) => code,
            };
        }
        Some(Command::Inject(args)) => return inject::main(args, &registry),
        Some(Command::Archive(args)) => return archive::main(args, &registry),
        Some(Command::Diff(args)) => {
            let sub = matches
                .subcommand_matches("diff")
                .expect("diff has its matches");
            return diff::main(args, sub, &registry);
        }
        Some(Command::Record(args)) => {
            let sub = matches
                .subcommand_matches("record")
                .expect("record has its matches");
            return match plan(sub, &registry, "perfpipe record") {
                Ok(plan) => record::main(args, plan, &registry),
                Err(code) => code,
            };
        }
        None => {}
    }
    let plan = match plan(&matches, &registry, "perfpipe") {
        Ok(p) => p,
        Err(code) => return code,
    };
    let run = &cli.run;
    let chain = Chain {
        settings: run.batch.settings(!run.io.no_measure),
        source: SourceSpec::Input {
            path: run.input.clone(),
            pipe_buffer: run.io.pipe_buffer,
        },
        plan,
        taps: &run.report.tap,
        sink: SinkSpec::Output {
            path: run.output.output.clone(),
            mode: run.output.mode(),
            pipe_buffer: run.io.pipe_buffer,
        },
        requests: Requests::default(),
        before_source: Some(&run::watch_requests),
    };
    build_and_run(chain, &registry, &run.report, Some(&run.input), "perfpipe")
}

fn print_stages(registry: &Registry) {
    let mut out = std::io::stdout().lock();
    let (first, rest) = FIXED.split_at(2);
    for (name, help) in first {
        let _ = writeln!(out, "{name:<24} {help}");
    }
    for spec in registry.specs() {
        for (i, flag) in spec.flags.iter().enumerate() {
            let usage = match spec.value_name(flag) {
                Some(v) => format!("--{} {v}", flag.name),
                None => format!("--{}", flag.name),
            };
            let indent = if i == 0 { "" } else { "  " };
            let _ = writeln!(out, "{indent}{usage:<24} {}", flag.help);
        }
        for o in spec.options {
            let _ = writeln!(
                out,
                "{:<24}   {}={}  {}",
                "",
                o.key,
                o.kind.value_name(),
                o.help
            );
        }
    }
    for (name, help) in rest {
        let _ = writeln!(out, "{name:<24} {help}");
    }
    let _ = writeln!(
        out,
        "\noutput formats (-o FILE.EXT, a format flag, or --format NAME[:key=value,…]):"
    );
    let _ = writeln!(
        out,
        "{:<24} perf's own format, pipe or file mode (the default)",
        "perf"
    );
    for spec in registry.formats() {
        let exts: Vec<String> = spec.extensions.iter().map(|e| format!(".{e}")).collect();
        let exts = if exts.is_empty() {
            String::new()
        } else {
            format!(" ({})", exts.join(", "))
        };
        let _ = writeln!(out, "{:<24} {}{exts}", spec.name, spec.help);
        for flag in spec.flags {
            let usage = match spec.value_name(flag) {
                Some(v) => format!("--{} {v}", flag.name),
                None => format!("--{}", flag.name),
            };
            let _ = writeln!(out, "  {usage:<22} {}", flag.help);
        }
        for o in spec.options {
            let _ = writeln!(
                out,
                "{:<24}   {}={}  {}",
                "",
                o.key,
                o.kind.value_name(),
                o.help
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfpipe_stream::write::file::OutputMode;

    #[test]
    fn defaults_are_stdin_stdout() {
        let m = command().try_get_matches_from(["perfpipe"]).unwrap();
        let cli = Cli::from_arg_matches(&m).unwrap();
        assert_eq!(cli.run.input, PathBuf::from("-"));
        assert_eq!(cli.run.output.output, PathBuf::from("-"));
        assert_eq!(cli.run.batch.batch_size, 256 << 10);
        assert!(chain::plan(&m, &perfpipe_chain::builtin())
            .unwrap()
            .stages
            .is_empty());
    }

    #[test]
    fn pipe_and_file_pick_the_output_format() {
        let mode = |argv: &[&str]| {
            let m = command().try_get_matches_from(argv).unwrap();
            Cli::from_arg_matches(&m).unwrap().run.output.mode()
        };
        assert_eq!(mode(&["perfpipe", "-o", "x.data"]), OutputMode::Auto);
        assert_eq!(mode(&["perfpipe", "--pipe", "-o", "x"]), OutputMode::Pipe);
        assert_eq!(mode(&["perfpipe", "--file", "-o", "x"]), OutputMode::File);
        assert!(command()
            .try_get_matches_from(["perfpipe", "--pipe", "--file"])
            .is_err());
    }

    /// A stage added by a program: its flags, its option flag and `--stage` come from its spec
    /// alone, with nothing in this crate naming it.
    #[test]
    fn a_registered_stage_gets_its_flags_from_its_spec() {
        use perfpipe_core::spec::{Flag, StageOption, StageSpec};
        const SPEC: StageSpec = StageSpec {
            name: "tally",
            help: "count",
            flags: &[
                Flag::stage_options("tally", "count things"),
                Flag::option("tally-top", "top", "rows"),
            ],
            options: &[StageOption {
                key: "top",
                kind: Kind::Count,
                help: "rows",
            }],
            build: |_, o| {
                assert_eq!(o.count("top"), Some(3));
                Ok(Box::new(
                    perfpipe_stream::drop::DropConfig { types: vec![] }.build(),
                ))
            },
            needs: &[],
        };
        let mut r = perfpipe_chain::builtin();
        r.add(SPEC);
        let help = command_with(&r).render_long_help().to_string();
        assert!(help.contains("--tally [<OPTIONS>]"), "{help}");
        assert!(help.contains("--tally-top <N>"), "{help}");
        for argv in [
            &["perfpipe", "--tally-top", "3", "--tally"][..],
            &["perfpipe", "--stage", "tally:top=3"],
            &["perfpipe", "--tally", "top=3"],
        ] {
            let m = command_with(&r).try_get_matches_from(argv).unwrap();
            let plan = chain::plan(&m, &r).unwrap();
            assert_eq!(plan.stages.len(), 1, "{argv:?}");
            let s = &plan.stages[0];
            assert!((s.spec.build)(&Default::default(), &s.options).is_ok());
        }
    }

    /// The output's format: by extension, by flag, by `--format`; format flags check that the
    /// format takes them; profile formats bring their `symbolize` stage.
    #[test]
    fn outputs_choose_their_format_and_bring_what_they_need() {
        let r = perfpipe_chain::builtin();
        let choose = |argv: &[&str]| -> Result<Plan, String> {
            let m = command_with(&r)
                .try_get_matches_from(argv)
                .map_err(|e| e.to_string())?;
            let cli = Cli::from_arg_matches(&m).unwrap();
            let text = |e: perfpipe_chain::Error| format!("{:#}", anyhow::Error::new(e));
            let mut plan = chain::plan(&m, &r).map_err(text)?;
            plan.choose_output(&r, Some(&cli.run.output.output))
                .map_err(text)?;
            plan.check_attached(&r).map_err(text)?;
            Ok(plan)
        };
        let format = |p: &Plan| p.format.as_ref().map(|f| f.spec.name);
        let labels = |p: &Plan| p.stages.iter().map(|s| s.label.clone()).collect::<Vec<_>>();

        let p = choose(&[
            "perfpipe",
            "-o",
            "flame.svg",
            "--title",
            "db, 30 s",
            "--inline",
        ])
        .unwrap();
        assert_eq!(format(&p), Some("flamegraph"));
        assert_eq!(
            p.format.as_ref().unwrap().options.text("title"),
            Some("db, 30 s")
        );
        assert_eq!(labels(&p), ["symbolize"]);
        assert!(
            p.stages[0].options.switch("inline"),
            "--inline reaches the added stage"
        );

        let p = choose(&[
            "perfpipe",
            "--comm",
            "db*",
            "-o",
            "db.folded",
            "--weight",
            "samples",
        ])
        .unwrap();
        assert_eq!(format(&p), Some("folded"));
        assert_eq!(
            p.format.as_ref().unwrap().options.text("weight"),
            Some("samples")
        );
        assert_eq!(labels(&p), ["comm", "symbolize"]);

        // Folded stacks tell symbolize that unmapped addresses need not be told apart, unless
        // --addrs shows them or the user chose; nor does the Firefox profile, whose frames are
        // labels; pprof shows every address.
        let unmapped = |argv: &[&str]| -> Vec<String> {
            let p = choose(argv).unwrap();
            let s = p.stages.iter().filter(|s| s.spec.name == "symbolize");
            s.map(|s| s.options.text("unmapped").unwrap_or("-").to_string())
                .collect()
        };
        assert_eq!(unmapped(&["perfpipe", "-o", "x.folded"]), ["merge"]);
        assert_eq!(unmapped(&["perfpipe", "-o", "x.svg"]), ["merge"]);
        assert_eq!(unmapped(&["perfpipe", "-o", "x.svg", "--addrs"]), ["-"]);
        assert_eq!(unmapped(&["perfpipe", "-o", "x.pb.gz"]), ["-"]);
        assert_eq!(unmapped(&["perfpipe", "-o", "x.json.gz"]), ["merge"]);
        assert_eq!(
            unmapped(&["perfpipe", "--symbolize", "unmapped=keep", "--folded"]),
            ["keep"]
        );
        assert_eq!(
            unmapped(&["perfpipe", "--symbolize", "--folded"]),
            ["merge"]
        );

        // Named by the user: not added again, and where the user put it.
        let p = choose(&["perfpipe", "--symbolize", "--comm", "x", "--folded"]).unwrap();
        assert_eq!(labels(&p), ["symbolize", "comm"]);
        assert_eq!(format(&p), Some("folded"));
        let p = choose(&["perfpipe", "-o", "x.data", "--format", "flamegraph:title=T"]).unwrap();
        assert_eq!(p.format.as_ref().unwrap().options.text("title"), Some("T"));
        let p = choose(&["perfpipe", "-o", "x.svg", "--format", "perf"]).unwrap();
        assert_eq!(format(&p), None);
        assert!(choose(&["perfpipe", "-o", "x.data"])
            .unwrap()
            .format
            .is_none());

        let err = |argv: &[&str]| choose(argv).unwrap_err();
        assert_eq!(
            err(&["perfpipe", "-o", "x.folded", "--title", "T"]),
            "--title: an option of flamegraph output, not of folded"
        );
        assert!(err(&["perfpipe", "--title", "T"])
            .contains("--title: an option of flamegraph output (-o FILE.svg or --flamegraph)"));
        assert!(err(&["perfpipe", "--symbolize"]).contains("perf's format carries no symbols"));
        assert!(err(&["perfpipe", "--inline"]).contains("options of `symbolize` need --symbolize"));
        assert!(err(&["perfpipe", "--format", "png"]).contains("no format named `png`"));
        assert!(err(&["perfpipe", "--folded", "--flamegraph"]).contains("two output formats"));
        assert!(
            err(&["perfpipe", "--format", "folded:colour=red"]).contains("unknown option `colour`")
        );
    }

    #[test]
    fn choices_are_checked_by_the_parser() {
        assert!(command()
            .try_get_matches_from(["perfpipe", "--buildid", "--host-ids", "maybe"])
            .is_err());
        assert!(command()
            .try_get_matches_from(["perfpipe", "--buildid", "--host-ids", "no"])
            .is_ok());
    }

    #[test]
    fn help_lists_every_option_and_every_stage_flag() {
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
        for spec in perfpipe_chain::builtin().specs() {
            for flag in spec.flags {
                assert!(
                    help.contains(&format!("--{}", flag.name)),
                    "--{}",
                    flag.name
                );
            }
        }
        assert!(help.contains("Exit status"));
    }
}

//! `perfpipe record`: the native capture source in front of the usual stages, instead of
//! `perf record -o - | perfpipe`.
//!
//! `perfpipe record [-e EVENT] [-c N | -F HZ] [-g] [-a | -p PID | -- CMD…] [--overwrite]
//! [stage flags…] [-o FILE]` runs record → decode → the named stages → write. With `--overwrite`
//! the source emits framed dumps itself (each a complete stream), so `decode` is left out.
//!
//! Signals: SIGINT/SIGTERM end the recording (the rings are drained or dumped, the stream
//! completed); a second one stops at once (see `run`). SIGUSR2 asks `--overwrite` for a dump (and
//! any `--ring` stage, like the main command).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::{ArgMatches, Args};
use perfpipe_core::{Pipeline, Settings};
use perfpipe_stages::record::{Period, RecordConfig, Target};
use perfpipe_stages::registry::Registry;
use perfpipe_stages::write::WriteConfig;
use perfpipe_stages::write_file::{Output, OutputMode};
use perfpipe_stages::write_split::WriteSplitConfig;

use crate::{chain, path_or_std, stage_flags, RunArgs, EXIT_FAILURE, EXIT_USAGE};

/// Options of `perfpipe record`, named as `perf record` names them.
#[derive(Debug, Args)]
pub(crate) struct RecordArgs {
    /// Event: cpu-clock, task-clock or page-faults.
    #[arg(short, long, value_name = "EVENT", default_value = "cpu-clock")]
    event: String,
    /// Sample every N events (nanoseconds for the clocks).
    #[arg(short = 'c', long = "count", value_name = "N", conflicts_with = "freq")]
    count: Option<u64>,
    /// Sample about HZ times a second (default 4000).
    #[arg(short = 'F', long = "freq", value_name = "HZ")]
    freq: Option<u64>,
    /// Record callchains.
    #[arg(short = 'g')]
    callchain: bool,
    /// Record every cpu, every process.
    #[arg(short = 'a', long = "all-cpus", conflicts_with = "target_pid")]
    all: bool,
    /// Record a running process (all its threads, and the children it forks). Only `-p`: the
    /// long `--pid` is the filter stage's, as on the main command.
    #[arg(
        short = 'p',
        long = "target-pid",
        id = "target_pid",
        value_name = "PID"
    )]
    pid: Option<i32>,
    /// Keep only the newest samples in the kernel's backward rings; dump on SIGUSR2 and at the
    /// end, each dump a complete stream.
    #[arg(long)]
    overwrite: bool,
    /// Data pages per ring (a power of two; 128 = 512 KiB).
    #[arg(
        short = 'm',
        long = "mmap-pages",
        value_name = "PAGES",
        default_value_t = 128
    )]
    mmap_pages: usize,
    /// Output; `-` is standard output; a regular file gets a file-mode perf.data. With
    /// --overwrite, a single output takes one dump (the first SIGUSR2 or the end) and ends the
    /// recording; `NAME-%n.data` writes one file per dump and records until the end.
    #[arg(short, long, value_name = "FILE", default_value = "-")]
    output: PathBuf,
    /// Print the per-stage table (with lost_events) on stderr at the end.
    #[arg(long)]
    stats: bool,
    /// Write the figures of --stats as JSON to FILE (docs/stats.schema.json).
    #[arg(long, value_name = "FILE")]
    stats_json: Option<PathBuf>,
    /// Live per-stage progress on stderr (default: on when stderr is a terminal).
    #[arg(long, conflicts_with = "no_progress")]
    progress: bool,
    /// Never show live progress.
    #[arg(long)]
    no_progress: bool,
    /// Copy the stream as it leaves STAGE (record, decode, a stage flag's name) to FILE, a
    /// pipe-mode stream `perf script -i FILE` reads. Repeatable.
    #[arg(long, value_name = "STAGE=FILE", value_parser = crate::run::parse_tap)]
    tap: Vec<(String, PathBuf)>,
    /// Dump when a sample matches EXPR (the --filter language): with --overwrite, the kernel's
    /// rings are looked at after each poll; with a --ring stage, that stage's trigger.
    #[arg(long, value_name = "EXPR")]
    ring_trigger: Option<String>,
    /// With --ring-trigger: keep recording for DURATION after the match before the dump.
    #[arg(long, value_name = "DURATION")]
    ring_after: Option<String>,
    /// The command to record, after `--`.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

impl RecordArgs {
    /// The reporting options, as the main command's run takes them.
    fn run_args(&self) -> RunArgs {
        let mut run = RunArgs::quiet();
        run.output = self.output.clone();
        run.stats = self.stats;
        run.stats_json = self.stats_json.clone();
        run.progress = self.progress;
        run.no_progress = self.no_progress;
        run.tap = self.tap.clone();
        run.ring_trigger = self.ring_trigger.clone();
        run.ring_after = self.ring_after.clone();
        run
    }

    fn target(&self) -> Result<Target, String> {
        match (self.all, self.pid, self.command.is_empty()) {
            (true, None, true) => Ok(Target::System),
            (false, Some(p), true) => Ok(Target::Pid(p)),
            (false, None, false) => Ok(Target::Command(self.command.clone())),
            (false, None, true) => Err("nothing to record: give -a, -p PID or -- CMD".into()),
            _ => Err("-a, -p and -- CMD exclude each other".into()),
        }
    }

    fn config(&self, target: Target) -> RecordConfig {
        RecordConfig {
            event: self.event.clone(),
            period: match (self.count, self.freq) {
                (Some(c), _) => Period::Count(c),
                (None, Some(f)) => Period::Freq(f),
                (None, None) => Period::Freq(4000),
            },
            callchain: self.callchain,
            target,
            overwrite: self.overwrite,
            mmap_pages: self.mmap_pages,
            workload_stdout_to_stderr: self.output == std::path::Path::new("-"),
            cmdline: std::env::args().collect(),
            ..RecordConfig::default()
        }
    }
}

/// Sets `flag` on each of `signals`; a failure only loses that signal's handling.
fn on_signals(signals: &[i32], flag: &Arc<AtomicBool>) {
    for &s in signals {
        if let Err(e) = signal_hook::flag::register(s, flag.clone()) {
            eprintln!("perfpipe record: cannot handle signal {s}: {e}");
        }
    }
}

fn pipeline(
    args: &RecordArgs,
    target: Target,
    registry: &Registry,
    stages: &[(&'static str, Option<String>)],
) -> anyhow::Result<Pipeline> {
    use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR2};
    let stop = Arc::new(AtomicBool::new(false));
    let dumps = Arc::new(AtomicBool::new(false));
    on_signals(&[SIGINT, SIGTERM], &stop);
    on_signals(&[SIGUSR2], &dumps);
    on_signals(&[SIGUSR2], &perfpipe_stages::ring::requests());
    let cfg = RecordConfig {
        stop: Some(stop),
        dumps: Some(dumps),
        ..args.config(target)
    };
    let split = WriteSplitConfig::is_pattern(&args.output);
    let cfg = RecordConfig {
        // One output holds one stream: the first dump ends the recording.
        once: !split,
        ..cfg
    };
    let run = args.run_args();
    // The trigger drives a --ring stage when there is one, else the --overwrite dumps.
    let has_ring = stages.iter().any(|(n, _)| *n == "ring");
    let stages = if has_ring {
        crate::ring_value(&run, stages, split)?
    } else {
        stages.to_vec()
    };
    let cfg = if has_ring {
        cfg
    } else {
        RecordConfig {
            trigger: args
                .ring_trigger
                .as_deref()
                .map(perfpipe_stages::filter::parse)
                .transpose()?,
            after: args
                .ring_after
                .as_deref()
                .map(perfpipe_stages::ring::parse_duration)
                .transpose()?,
            ..cfg
        }
    };
    let source = cfg.build()?;
    let mut nodes = chain(registry, &stages)?;
    if args.overwrite {
        // The dumps arrive framed, with their stream info: decode has nothing to do.
        nodes.retain(|(name, _)| name != "decode");
    }
    let mut p = Pipeline::new(Settings::default()).source("record", source);
    let mut taps = crate::run::Taps::new(&args.tap)?;
    if let Some(tap) = taps.take("record")? {
        p = p.stage("tap:record", tap);
    }
    for (name, stage) in nodes {
        let tap = taps.take(&name)?;
        p = p.boxed_stage(name.clone(), stage);
        if let Some(tap) = tap {
            p = p.stage(format!("tap:{name}"), tap);
        }
    }
    taps.check_all_used()?;
    if split {
        let sink = WriteSplitConfig {
            pattern: args.output.clone(),
            mode: OutputMode::Auto,
            pipe_buffer: 0,
        }
        .build()?;
        return Ok(p.sink("write", sink));
    }
    let write = Output::open(
        &WriteConfig {
            path: path_or_std(&args.output),
            pipe_buffer: 1 << 20,
        },
        OutputMode::Auto,
    )?;
    Ok(p.sink("write", write))
}

/// Runs `perfpipe record`; `matches` are the subcommand's, for the stage flags.
pub(crate) fn main(args: &RecordArgs, matches: &ArgMatches, registry: &Registry) -> ExitCode {
    let target = match args.target() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("perfpipe record: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let stages = match stage_flags(matches, registry) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("perfpipe record: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let p = match pipeline(args, target, registry, &stages) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("perfpipe record: {e:#}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    if stages.iter().any(|(n, _)| *n == "ring") {
        crate::run::watch_dump_requests();
    }
    crate::run::run(p, &args.run_args())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> Result<RecordArgs, clap::Error> {
        use clap::FromArgMatches;
        let m = crate::command().try_get_matches_from(argv)?;
        let m = m.subcommand_matches("record").expect("record");
        RecordArgs::from_arg_matches(m)
    }

    #[test]
    fn perf_record_flags_parse() {
        let a = parse(&[
            "perfpipe",
            "record",
            "-e",
            "task-clock",
            "-c",
            "10000",
            "-g",
            "--",
            "ls",
            "-l",
        ])
        .unwrap();
        assert_eq!(a.event, "task-clock");
        assert_eq!(a.count, Some(10000));
        assert!(a.callchain);
        assert_eq!(
            a.target().unwrap(),
            Target::Command(vec!["ls".into(), "-l".into()])
        );
        assert_eq!(a.config(a.target().unwrap()).period, Period::Count(10000));
        let a = parse(&["perfpipe", "record", "-a", "--overwrite", "-m", "4"]).unwrap();
        assert_eq!(a.target().unwrap(), Target::System);
        assert!(a.overwrite);
        assert_eq!(a.mmap_pages, 4);
        let a = parse(&["perfpipe", "record", "-p", "1", "-F", "99"]).unwrap();
        assert_eq!(a.config(Target::Pid(1)).period, Period::Freq(99));
        assert!(parse(&["perfpipe", "record", "-c", "1", "-F", "2", "-a"]).is_err());
        assert!(parse(&["perfpipe", "record"]).unwrap().target().is_err());
        assert!(parse(&["perfpipe", "record", "-a", "--", "ls"])
            .unwrap()
            .target()
            .is_err());
    }

    #[test]
    fn stage_flags_follow_record() {
        let r = Registry::builtin();
        let m = crate::command_with(&r)
            .try_get_matches_from(["perfpipe", "record", "-a", "--drop", "lost"])
            .unwrap();
        let m = m.subcommand_matches("record").unwrap();
        assert_eq!(
            stage_flags(m, &r).unwrap(),
            vec![("drop", Some("lost".to_string()))]
        );
    }
}

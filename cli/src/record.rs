//! `perfpipe record`: the native capture source in front of the usual stages, instead of
//! `perf record -o - | perfpipe`.
//!
//! `perfpipe record [-e EVENT]… [-c N | -F HZ] [-g] [--switch-events] [-a | -p PID | -- CMD…]
//! [--overwrite] [stage flags…] [-o FILE]` runs record → decode → the named stages → write. With `--overwrite`
//! the source emits framed dumps itself (each a complete stream), so `decode` is left out.
//!
//! Signals: SIGINT/SIGTERM end the recording (the rings are drained or dumped, the stream
//! completed); a second one stops at once (see `run`). SIGUSR2 asks `--overwrite` for a dump (and
//! any `--ring` stage, like the main command).

use std::process::ExitCode;
#[cfg(feature = "record")]
use std::sync::{atomic::AtomicBool, Arc};

use clap::Args;
use perfpipe_chain::Plan;
use perfpipe_core::spec::Registry;

use crate::args::{BatchArgs, IoArgs, OutputArgs, ReportArgs};
use crate::EXIT_USAGE;
#[cfg(feature = "record")]
use {
    crate::EXIT_FAILURE,
    perfpipe_chain::{Chain, SinkSpec, SourceSpec},
    perfpipe_core::Requests,
    perfpipe_record::{Period, RecordConfig, Target},
};

/// Options of `perfpipe record`, named as `perf record` names them.
#[derive(Debug, Args)]
pub(crate) struct RecordArgs {
    /// Event, repeatable or comma-separated: cpu-clock (default), task-clock, page-faults,
    /// context-switches, cpu-migrations, or a tracepoint SYSTEM:NAME (sched:sched_switch).
    #[arg(short, long, value_name = "EVENT")]
    event: Vec<String>,
    /// Sample every N events (nanoseconds for the clocks).
    #[arg(short = 'c', long = "count", value_name = "N", conflicts_with = "freq")]
    count: Option<u64>,
    /// Sample about HZ times a second (default: 4000 for software events, every hit of a
    /// tracepoint).
    #[arg(short = 'F', long = "freq", value_name = "HZ")]
    freq: Option<u64>,
    /// Record callchains.
    #[arg(short = 'g')]
    callchain: bool,
    /// Record context switches: PERF_RECORD_SWITCH records (SWITCH_CPU_WIDE with -a).
    #[arg(long = "switch-events")]
    switch_events: bool,
    /// Record every cpu, every process (until SIGINT, or while `-- CMD` runs).
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
    /// end, each dump a complete stream. --ring-trigger/--ring-after drive these dumps unless a
    /// --ring stage is in the chain. A single output takes one dump (the first SIGUSR2, trigger
    /// or the end) and ends the recording; `-o NAME-%n.data` writes one file per dump.
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
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    report: ReportArgs,
    #[command(flatten)]
    batch: BatchArgs,
    #[command(flatten)]
    io: IoArgs,
    /// The command to record, after `--`.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// `perfpipe record` in a build without the cargo feature `record`: a usage error that names it.
#[cfg(not(feature = "record"))]
pub(crate) fn main(_: &RecordArgs, _: Plan, _: &Registry) -> ExitCode {
    eprintln!("perfpipe record: this perfpipe is built without the cargo feature `record`");
    ExitCode::from(EXIT_USAGE)
}

#[cfg(feature = "record")]
impl RecordArgs {
    fn target(&self) -> Result<Target, String> {
        match (self.all, self.pid, self.command.is_empty()) {
            (true, None, true) => Ok(Target::System),
            (false, Some(p), true) => Ok(Target::Pid(p)),
            (false, None, false) => Ok(Target::Command(self.command.clone())),
            (true, None, false) => Ok(Target::SystemWhile(self.command.clone())),
            (false, None, true) => Err("nothing to record: give -a, -p PID or -- CMD".into()),
            _ => Err("-p excludes -a and -- CMD".into()),
        }
    }

    fn config(&self, target: Target) -> RecordConfig {
        RecordConfig {
            events: if self.event.is_empty() {
                vec!["cpu-clock".into()]
            } else {
                self.event.clone()
            },
            period: match (self.count, self.freq) {
                (Some(c), _) => Some(Period::Count(c)),
                (None, Some(f)) => Some(Period::Freq(f)),
                (None, None) => None,
            },
            callchain: self.callchain,
            switch_events: self.switch_events,
            target,
            overwrite: self.overwrite,
            mmap_pages: self.mmap_pages,
            workload_stdout_to_stderr: self.output.output == std::path::Path::new("-"),
            cmdline: std::env::args().collect(),
            ..RecordConfig::default()
        }
    }
}

/// Sets `flag` on each of `signals`; a failure only loses that signal's handling.
#[cfg(feature = "record")]
fn on_signals(signals: &[i32], flag: &Arc<AtomicBool>) {
    for &s in signals {
        if let Err(e) = signal_hook::flag::register(s, flag.clone()) {
            eprintln!("perfpipe record: cannot handle signal {s}: {e}");
        }
    }
}

/// Runs `perfpipe record` with the stages of `plan`.
#[cfg(feature = "record")]
pub(crate) fn main(args: &RecordArgs, mut plan: Plan, registry: &Registry) -> ExitCode {
    let target = match args.target() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("perfpipe record: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // A name that is no event is a usage error; a tracepoint that is not there is found (and
    // reported, exit 1) when the recording is built.
    let config = args.config(target);
    if let Err(e) = perfpipe_record::parse_events(&config.events) {
        eprintln!("perfpipe record: {e}");
        return ExitCode::from(EXIT_USAGE);
    }
    let requests = Requests::default();
    let sink = SinkSpec::Output {
        path: args.output.output.clone(),
        mode: args.output.mode(),
        pipe_buffer: args.io.pipe_buffer,
    };
    // The trigger flags drive a --ring stage when there is one, else the --overwrite dumps.
    let trigger = match plan
        .take_unattached("ring")
        .map(|o| perfpipe_stream::ring::trigger_of(&o))
        .transpose()
    {
        Ok(t) => t.unwrap_or_default(),
        Err(e) => {
            eprintln!("perfpipe record: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    use signal_hook::consts::{SIGINT, SIGTERM};
    on_signals(&[SIGINT, SIGTERM], &stop);
    let config = RecordConfig {
        stop: Some(stop),
        dumps: args
            .overwrite
            .then(|| requests.subscribe(perfpipe_core::DUMP)),
        // One output holds one stream: the first dump ends the recording.
        once: sink.single_output(),
        trigger: trigger.0,
        after: trigger.1,
        ..config
    };
    let chain = Chain {
        settings: args.batch.settings(!args.io.no_measure),
        source: SourceSpec::Record(Box::new(config)),
        plan,
        taps: &args.report.tap,
        sink,
        requests,
        before_source: Some(&crate::run::watch_requests),
    };
    crate::build_and_run(chain, registry, &args.report, None, "perfpipe record")
}

#[cfg(all(test, feature = "record"))]
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
        assert_eq!(a.event, ["task-clock"]);
        assert_eq!(a.count, Some(10000));
        assert!(a.callchain);
        assert!(!a.switch_events);
        assert_eq!(
            a.target().unwrap(),
            Target::Command(vec!["ls".into(), "-l".into()])
        );
        assert_eq!(
            a.config(a.target().unwrap()).period,
            Some(Period::Count(10000))
        );
        // perf's defaults per event when neither -c nor -F is given; cpu-clock without -e.
        let a = parse(&["perfpipe", "record", "-a"]).unwrap();
        let c = a.config(Target::System);
        assert_eq!((c.period, c.events), (None, vec!["cpu-clock".to_string()]));
        let a = parse(&["perfpipe", "record", "-a", "--overwrite", "-m", "4"]).unwrap();
        assert_eq!(a.target().unwrap(), Target::System);
        assert!(a.overwrite);
        assert_eq!(a.mmap_pages, 4);
        let a = parse(&["perfpipe", "record", "-p", "1", "-F", "99"]).unwrap();
        assert_eq!(a.config(Target::Pid(1)).period, Some(Period::Freq(99)));
        // -e repeats; --switch-events.
        let a = parse(&[
            "perfpipe",
            "record",
            "-e",
            "cpu-clock",
            "-e",
            "sched:sched_switch",
            "--switch-events",
            "-a",
        ])
        .unwrap();
        let c = a.config(Target::System);
        assert_eq!(c.events, ["cpu-clock", "sched:sched_switch"]);
        assert!(c.switch_events);
        assert!(parse(&["perfpipe", "record", "-c", "1", "-F", "2", "-a"]).is_err());
        assert!(parse(&["perfpipe", "record"]).unwrap().target().is_err());
        assert_eq!(
            parse(&["perfpipe", "record", "-a", "--", "ls"])
                .unwrap()
                .target()
                .unwrap(),
            Target::SystemWhile(vec!["ls".into()])
        );
        assert!(parse(&["perfpipe", "record", "-p", "1", "--", "ls"])
            .unwrap()
            .target()
            .is_err());
    }

    #[test]
    fn stage_flags_follow_record() {
        let r = perfpipe_chain::builtin();
        let m = crate::command_with(&r)
            .try_get_matches_from([
                "perfpipe",
                "record",
                "-a",
                "--drop",
                "lost",
                "--batch-size",
                "64K",
            ])
            .unwrap();
        let m = m.subcommand_matches("record").unwrap();
        let plan = crate::chain::plan(m, &r).unwrap();
        assert_eq!(plan.stages.len(), 1);
        assert_eq!(plan.stages[0].options.text("types"), Some("lost"));
        use clap::FromArgMatches;
        assert_eq!(
            RecordArgs::from_arg_matches(m).unwrap().batch.batch_size,
            64 << 10
        );
    }
}

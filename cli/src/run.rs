//! Running a pipeline from the command line: signals, progress, and the end-of-run report.
//!
//! Every kind of end prints the `--stats` table and writes `--stats-json` and `--timeline`: the
//! input exhausted, an error, an interrupt, a closed downstream. The runner samples its counters
//! over time only when `--timeline` or `--stats-json` asks for them.
//!
//! - **First SIGINT or SIGTERM**: keep going until the input ends. In a shell pipeline `perf record`
//!   gets the same Ctrl-C, flushes and closes its output, so perfpipe then writes everything it
//!   received and ends normally (status 0 if nothing else went wrong).
//! - **Second SIGINT or SIGTERM**: stop at once, print the figures so far, exit 130.
//! - **SIGUSR2** (only when a stage or the source subscribed to the
//!   [`DUMP`](perfpipe_core::DUMP) request: `--ring`, `record --overwrite`): a dump now; the ring
//!   answers within a batch, or within its tick on a quiet input.

use std::io::{IsTerminal as _, Write as _};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use perfpipe_core::timeline::Recorder;
use perfpipe_core::{render_json, render_table, Pipeline, Report, Requests, StageMetrics};

use crate::args::ReportArgs;
use crate::progress::Progress;
use crate::EXIT_FAILURE;

/// Exit status after a second interrupt (128 + SIGINT).
pub const EXIT_INTERRUPTED: u8 = 130;

/// Names a span kind for the stats: the perf record type name.
fn kind_name(kind: u32) -> String {
    perfpipe_stream::format::RecordType(kind)
        .name()
        .map_or_else(|| format!("type {kind}"), str::to_string)
}

/// Whether an error chain ends in a closed downstream pipe.
fn is_broken_pipe(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::BrokenPipe {
                return true;
            }
        }
        cur = e.source();
    }
    false
}

/// Writes the end-of-run figures that were asked for.
fn report_figures(report: &Report, args: &ReportArgs) {
    if args.stats {
        let _ = writeln!(
            std::io::stderr().lock(),
            "{}",
            render_table(report, &kind_name)
        );
    }
    if let Some(path) = &args.stats_json {
        if let Err(e) = std::fs::write(path, render_json(report, &kind_name)) {
            eprintln!("perfpipe: --stats-json {}: {e}", path.display());
        }
    }
    if let Some(path) = &args.timeline {
        let svg = crate::timeline::render(report).unwrap_or_default();
        if let Err(e) = std::fs::write(path, svg) {
            eprintln!("perfpipe: --timeline {}: {e}", path.display());
        }
    }
}

/// A report from live metrics, for an end that does not wait for the threads.
fn snapshot(metrics: &[StageMetrics], timeline: Option<&Recorder>, wall: Duration) -> Report {
    Report {
        stages: metrics.iter().map(StageMetrics::snapshot).collect(),
        ends: Vec::new(),
        errors: Vec::new(),
        wall,
        timeline: timeline.map(Recorder::now),
    }
}

/// Runs the pipeline to its end and reports; returns the exit status. `input` is the input file,
/// if there is one, for the progress bar.
pub(crate) fn run(pipeline: Pipeline, args: &ReportArgs, input: Option<&Path>) -> ExitCode {
    let pipeline = if args.timeline.is_some() || args.stats_json.is_some() {
        pipeline.timeline()
    } else {
        pipeline
    };
    let running = match pipeline.spawn() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("perfpipe: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let metrics = running.metrics().to_vec();
    let started = std::time::Instant::now();
    let done = Arc::new(AtomicBool::new(false));
    watch_signals(
        metrics.clone(),
        running.timeline(),
        args,
        started,
        done.clone(),
    );

    let show = !args.no_progress && (args.progress || std::io::stderr().is_terminal());
    let input_size = input
        .filter(|p| *p != Path::new("-"))
        .and_then(|p| std::fs::metadata(p).ok())
        .map(|m| m.len());
    let progress = show.then(|| Progress::start(metrics, input_size));

    let report = running.wait();
    done.store(true, Ordering::SeqCst);
    if let Some(p) = progress {
        p.finish();
    }
    report_figures(&report, args);

    let mut status = ExitCode::SUCCESS;
    let mut stderr = std::io::stderr().lock();
    for err in &report.errors {
        if is_broken_pipe(err) {
            if args.stats {
                let written = report.stages.last().map_or(0, |s| s.input.records);
                let _ = writeln!(
                    stderr,
                    "perfpipe: downstream closed after {written} records"
                );
            }
            continue;
        }
        let _ = writeln!(stderr, "perfpipe: {err}");
        status = ExitCode::from(EXIT_FAILURE);
    }
    status
}

/// First SIGINT/SIGTERM: note it and let the pipeline drain; second: report and exit 130.
fn watch_signals(
    metrics: Vec<StageMetrics>,
    timeline: Option<Recorder>,
    args: &ReportArgs,
    started: std::time::Instant,
    done: Arc<AtomicBool>,
) {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else {
        return; // Without the handler the default action (terminate) applies.
    };
    let args_for_report = ReportArgs {
        stats: args.stats,
        stats_json: args.stats_json.clone(),
        timeline: args.timeline.clone(),
        ..ReportArgs::default()
    };
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut count = 0;
            for _ in signals.forever() {
                count += 1;
                if count == 1 {
                    // Say why we keep running, unless the input ends promptly (the usual case:
                    // perf record got the same Ctrl-C and is closing the pipe).
                    let done = done.clone();
                    std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_secs(1));
                        if !done.load(Ordering::SeqCst) {
                            eprintln!(
                                "perfpipe: interrupted: writing what the input still sends \
                                 (interrupt again to stop at once)"
                            );
                        }
                    });
                    continue;
                }
                let report = snapshot(&metrics, timeline.as_ref(), started.elapsed());
                report_figures(&report, &args_for_report);
                eprintln!("perfpipe: interrupted twice: stopped before the end of the input");
                std::process::exit(i32::from(EXIT_INTERRUPTED));
            }
        })
        .ok();
}

/// SIGUSR2 raises the [`DUMP`](perfpipe_core::DUMP) request of the stages (and sources) that
/// subscribed to it. With no subscriber SIGUSR2 keeps its default action (terminate), as before.
pub(crate) fn watch_requests(requests: &Requests) {
    for flag in requests.flags(perfpipe_core::DUMP) {
        if let Err(e) = signal_hook::flag::register(signal_hook::consts::SIGUSR2, flag) {
            eprintln!("perfpipe: cannot handle SIGUSR2 ({e}); dumps happen only at the end");
        }
    }
}

//! `perfpipe bench`: measure stage chains on in-memory workloads.
//!
//! `bench pipeline` replays a stream held in memory (a recording given with `-i`, or a synthetic
//! profile-shaped workload) through `decode` and the stage flags given, into a sink that discards,
//! so that disk and pipes are out of the picture. Each round runs the chain three times: with the
//! runner measuring, without, and measuring with a timeline sampled (`--timeline`), so the report
//! shows per-stage throughput and what measuring and sampling themselves cost.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use perfpipe_core::spec::Registry;
use perfpipe_core::{render_table, Requests};

use crate::args::{parse_size, BatchArgs};
use crate::EXIT_FAILURE;
use perfpipe_chain::{Chain, Plan, SinkSpec, SourceSpec};

/// What to benchmark.
#[derive(Debug, Subcommand)]
pub(crate) enum BenchCommand {
    /// Replay an in-memory stream through decode and the given stage flags; report per-stage
    /// throughput and the cost of measuring.
    Pipeline(PipelineBench),
}

/// Options of `bench pipeline`.
#[derive(Debug, Args)]
pub(crate) struct PipelineBench {
    /// A recorded pipe-mode stream to replay (read into memory first). Default: a synthetic
    /// workload (8 processes, 16 libraries each, samples with 4–20-frame callchains).
    #[arg(short, long, value_name = "FILE")]
    input: Option<PathBuf>,
    /// Size of the synthetic workload (suffixes K, M, G).
    #[arg(long, value_name = "SIZE", default_value = "128M", value_parser = parse_size)]
    synthetic: usize,
    /// Rounds; each runs the chain measured, unmeasured and measured with a timeline. Medians are
    /// reported.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    #[command(flatten)]
    batch: BatchArgs,
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Runs `bench` with the stage flags given; returns the exit status.
pub(crate) fn run(what: &BenchCommand, registry: &Registry, plan: &Plan) -> ExitCode {
    let BenchCommand::Pipeline(args) = what;
    match pipeline(args, registry, plan) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("perfpipe bench: {e:#}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

fn pipeline(args: &PipelineBench, registry: &Registry, plan: &Plan) -> anyhow::Result<()> {
    plan.clone().choose_output(registry, None)?;
    plan.check_attached(registry)?;
    let (data, what) = match &args.input {
        Some(p) => (
            std::fs::read(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?,
            p.display().to_string(),
        ),
        None => (
            perfpipe_stream::synth::workload(args.synthetic),
            "synthetic workload".to_string(),
        ),
    };
    let data = Arc::new(data);
    let names: Vec<String> = plan
        .stages
        .iter()
        .map(|s| format!("--{}", s.label.split('#').next().unwrap_or_default()))
        .collect();
    println!(
        "input: {what}, {:.1} MB; chain: decode {}; {} rounds",
        data.len() as f64 / 1e6,
        names.join(" "),
        args.rounds
    );
    let (mut measured, mut unmeasured, mut sampled) = (Vec::new(), Vec::new(), Vec::new());
    let mut last = None;
    // (measure, timeline)
    let modes = [(true, false), (false, false), (true, true)];
    for round in 0..args.rounds {
        // Rotate which mode goes first, so none always runs on a warmer machine.
        for k in 0..modes.len() {
            let (measure, timeline) = modes[(k + round as usize) % modes.len()];
            let chain = Chain {
                settings: args.batch.settings(measure),
                source: SourceSpec::Memory(data.clone()),
                plan: plan.clone(),
                taps: &[],
                sink: SinkSpec::Discard,
                requests: Requests::default(),
                before_source: None,
            };
            let pipeline = chain.build(registry)?;
            let report = if timeline {
                pipeline.timeline().run()
            } else {
                pipeline.run()
            };
            if let Some(e) = report.errors.first() {
                anyhow::bail!("{e}");
            }
            match (measure, timeline) {
                (true, false) => {
                    measured.push(report.wall);
                    last = Some(report);
                }
                (false, _) => unmeasured.push(report.wall),
                (true, true) => sampled.push(report.wall),
            }
        }
    }
    let report = last.expect("at least one round");
    let kind = |k: u32| {
        perfpipe_stream::format::RecordType(k)
            .name()
            .map_or_else(|| format!("type {k}"), str::to_string)
    };
    println!("{}", render_table(&report, &kind));
    let (m, u, t) = (median(measured), median(unmeasured), median(sampled));
    let mb = data.len() as f64 / 1e6;
    let records = report.stages.get(1).map_or(0, |s| s.output.records);
    println!(
        "median wall: measured {:.3} s ({:.0} MB/s, {:.2} M records/s), unmeasured {:.3} s",
        m.as_secs_f64(),
        mb / m.as_secs_f64(),
        records as f64 / 1e6 / m.as_secs_f64(),
        u.as_secs_f64()
    );
    let batches = report.stages.first().map_or(0, |s| s.output.batches);
    let extra = m.as_secs_f64() - u.as_secs_f64();
    println!(
        "cost of measuring: {:+.1}% wall in memory ({:+.1} ms, {:.0} ns per batch over {} batches: \
         3 clock reads per batch per stage, 2 per syscall in the I/O stages, one pass over the \
         spans per edge)",
        100.0 * extra / u.as_secs_f64(),
        extra * 1e3,
        extra * 1e9 / batches.max(1) as f64,
        batches
    );
    let sampling = t.as_secs_f64() - m.as_secs_f64();
    println!(
        "cost of a timeline (--timeline, --stats-json): {:+.1}% wall over measuring ({:+.1} ms; \
         median {:.3} s: a thread sampling the counters every 62.5 ms, each stage publishing its phase)",
        100.0 * sampling / m.as_secs_f64(),
        sampling * 1e3,
        t.as_secs_f64()
    );
    Ok(())
}

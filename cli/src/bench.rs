//! `perfpipe bench`: measure stage chains on in-memory workloads.
//!
//! `bench pipeline` replays a stream held in memory (a recording given with `-i`, or a synthetic
//! profile-shaped workload) through `decode` and the stage flags given, into a sink that discards,
//! so that disk and pipes are out of the picture. Each round runs the chain twice, once with the
//! runner measuring and once without, so the report shows per-stage throughput and what measuring
//! itself costs.

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
    /// Rounds; each runs the chain measured and unmeasured. Medians are reported.
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
            perfpipe_stream::test_stream::workload(args.synthetic),
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
    let (mut measured, mut unmeasured) = (Vec::new(), Vec::new());
    let mut last = None;
    for round in 0..args.rounds {
        // Alternate which mode goes first, so neither always runs on a warmer machine.
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for measure in order {
            let chain = Chain {
                settings: args.batch.settings(measure),
                source: SourceSpec::Memory(data.clone()),
                plan: plan.clone(),
                taps: &[],
                sink: SinkSpec::Discard,
                requests: Requests::default(),
                before_source: None,
            };
            let report = chain.build(registry)?.run();
            if let Some(e) = report.errors.first() {
                anyhow::bail!("{e}");
            }
            if measure {
                measured.push(report.wall);
                last = Some(report);
            } else {
                unmeasured.push(report.wall);
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
    let (m, u) = (median(measured), median(unmeasured));
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
    Ok(())
}

//! Per-stage throughput: each stage alone on the same decoded input, no threads or channels.
//!
//! What it shows: the cost of a stage's own transformation per record and per byte, so that a
//! stage that gets slower shows here before it shows as a pipeline bottleneck. Input: the
//! synthetic profile-shaped workload (`perfpipe_stream::synth::workload`, 16 MB: ~95k records,
//! mostly samples with 4–20-frame callchains). Throughput is reported in bytes and, in a second
//! group, records. `iter_batched` keeps the copy of the input batches out of the timing.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use perfpipe_core::spec;
use perfpipe_core::{harness, Batch, Stage};
use perfpipe_stream::decode::DecodeConfig;
use perfpipe_stream::read::HEADROOM;

const INPUT_BYTES: usize = 16 << 20;
const BATCH_BYTES: usize = 256 << 10;

/// The workload as raw batches, as `read` produces them.
fn raw_batches() -> Vec<Batch> {
    let data = perfpipe_stream::synth::workload(INPUT_BYTES);
    harness::raw_batches(&data, &[BATCH_BYTES], HEADROOM)
}

/// The workload as framed batches, as `decode` emits them.
fn framed_batches() -> Vec<Batch> {
    harness::run_stage(&mut DecodeConfig::default().build(), raw_batches()).expect("decodes")
}

fn records(batches: &[Batch]) -> u64 {
    batches.iter().map(|b| b.spans.len() as u64).sum()
}

/// The transforms measured, with the flag value each gets.
const TRANSFORMS: &[(&str, Option<&str>)] = &[
    ("decompress", None),
    ("buildid-all", None),
    ("buildid", None),
    ("filter", Some("comm == \"worker3\" || cpu == 0")),
    ("drop", Some("finished_round")),
];

fn bench_stage(
    c: &mut Criterion,
    name: &str,
    input: &[Batch],
    mut make: impl FnMut() -> Box<dyn Stage>,
) {
    let bytes: u64 = input.iter().map(|b| b.payload().len() as u64).sum();
    let bytes = if records(input) > 0 {
        input.iter().map(Batch::stream_bytes).sum()
    } else {
        bytes
    };
    for (unit, throughput) in [
        ("bytes", Throughput::Bytes(bytes)),
        (
            "records",
            Throughput::Elements(records(input).max(records(&framed_batches()))),
        ),
    ] {
        let mut group = c.benchmark_group(format!("perfpipe_stream::{name}/{unit}"));
        group.throughput(throughput);
        group.sample_size(10);
        group.bench_function(name, |b| {
            b.iter_batched(
                || (make(), input.to_vec()),
                |(mut stage, batches)| harness::run_stage(stage.as_mut(), batches).expect("runs"),
                BatchSize::LargeInput,
            )
        });
        group.finish();
    }
}

fn stages(c: &mut Criterion) {
    let raw = raw_batches();
    bench_stage(c, "decode", &raw, || {
        Box::new(DecodeConfig::default().build())
    });
    let framed = framed_batches();
    for (name, value) in TRANSFORMS {
        let registry = perfpipe_chain::builtin();
        bench_stage(c, &name.replace('-', "_"), &framed, || {
            registry
                .build_flag(name, *value, &spec::BuildCtx::default())
                .unwrap_or_else(|e| panic!("--{name}: {e}"))
        });
    }
}

criterion_group!(benches, stages);
criterion_main!(benches);

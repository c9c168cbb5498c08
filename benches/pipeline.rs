//! Pipeline shapes: the runner with its threads and channels, source to sink, in memory.
//!
//! What it shows: what the runtime itself costs per batch and how it scales with the number of
//! stages, without pipes or disks. Shapes: `chain2` = memory → decode → discard; `chain4` =
//! memory → decode → buildid-all → drop → discard. Input: the 64 MB synthetic workload.
//! Throughput in bytes. The `perfpipe_core::Parallel` group runs a deliberately CPU-heavy stage
//! (a few rounds of hashing over every record) sequentially and as a parallel stage on 2 workers
//! (`Pipeline::parallel_stage`), to show the order-preserving speed-up.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use perfpipe_core::spec;
use perfpipe_core::{Batch, Flow, Out, Pipeline, Settings, Stage, StageError};
use perfpipe_stream::decode::DecodeConfig;
use perfpipe_stream::read::Memory;
use perfpipe_stream::write::Discard;

fn run(data: &Arc<Vec<u8>>, transforms: &[(&str, Option<&str>)]) {
    let mut p = Pipeline::new(Settings::default())
        .source("memory", Memory::new(data.clone()))
        .stage("decode", DecodeConfig::default().build());
    for (name, value) in transforms {
        let stage = perfpipe_chain::builtin()
            .build_flag(name, *value, &spec::BuildCtx::default())
            .expect("builds");
        p = p.boxed_stage(*name, stage);
    }
    let report = p.sink("discard", Discard).run();
    assert!(report.is_ok(), "{:?}", report.errors);
}

fn shapes(c: &mut Criterion) {
    let data = Arc::new(perfpipe_stream::synth::workload(64 << 20));
    let mut group = c.benchmark_group("perfpipe_core::Pipeline");
    group.throughput(Throughput::Bytes(data.len() as u64));
    group.sample_size(10);
    group.bench_function("chain2", |b| b.iter(|| run(&data, &[])));
    group.bench_function("chain4", |b| {
        b.iter(|| {
            run(
                &data,
                &[("buildid-all", None), ("drop", Some("finished_round"))],
            )
        })
    });
    group.finish();
}

/// Hashes every record's bytes a few times: a stand-in for a slow per-record transform.
struct Heavy;

impl Stage for Heavy {
    fn process(&mut self, batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for span in &batch.spans {
            for _ in 0..4 {
                for &b in batch.bytes(span) {
                    h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
                }
            }
        }
        std::hint::black_box(h);
        out.push(batch);
        Ok(Flow::Continue)
    }
}

fn parallel(c: &mut Criterion) {
    let data = Arc::new(perfpipe_stream::synth::workload(16 << 20));
    let mut group = c.benchmark_group("perfpipe_core::Parallel");
    group.throughput(Throughput::Bytes(data.len() as u64));
    group.sample_size(10);
    for workers in [0usize, 2] {
        let name = if workers == 0 {
            "sequential".to_string()
        } else {
            format!("{workers}_workers")
        };
        group.bench_function(name, |b| {
            b.iter(|| {
                let p = Pipeline::new(Settings::default())
                    .source("memory", Memory::new(data.clone()))
                    .stage("decode", DecodeConfig::default().build());
                let p = if workers == 0 {
                    p.stage("heavy", Heavy)
                } else {
                    p.parallel_stage("heavy", workers, || Heavy)
                };
                let report = p.sink("discard", Discard).run();
                assert!(report.is_ok());
            })
        });
    }
    group.finish();
}

criterion_group!(benches, shapes, parallel);
criterion_main!(benches);

//! Pipeline shapes: the runner with its threads and channels, source to sink, in memory.
//!
//! What it shows: what the runtime itself costs per batch and how it scales with the number of
//! stages, without pipes or disks. Shapes: `chain2` = memory → decode → discard; `chain4` =
//! memory → decode → buildid-all → drop → discard. Input: the 64 MB synthetic workload.
//! Throughput in bytes.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use perfpipe_core::{Batch, Flow, Out, Pipeline, Settings, Sink, Source, StageError};
use perfpipe_stages::decode::DecodeConfig;
use perfpipe_stages::read::HEADROOM;
use perfpipe_stages::registry;

struct Memory(Arc<Vec<u8>>, usize);

impl Source for Memory {
    fn produce(&mut self, out: &mut Out<'_>) -> Result<Flow, StageError> {
        if self.1 == self.0.len() {
            return Ok(Flow::Stop);
        }
        let end = (self.1 + out.batch_bytes()).min(self.0.len());
        let mut b = out.take();
        b.data.resize(HEADROOM, 0);
        b.data.extend_from_slice(&self.0[self.1..end]);
        b.start = HEADROOM;
        self.1 = end;
        out.push(b);
        Ok(Flow::Continue)
    }
}

struct Discard;

impl Sink for Discard {
    fn consume(&mut self, batch: &Batch) -> Result<Flow, StageError> {
        std::hint::black_box(batch.spans.len());
        Ok(Flow::Continue)
    }
}

fn run(data: &Arc<Vec<u8>>, transforms: &[(&str, Option<&str>)]) {
    let mut p = Pipeline::new(Settings::default())
        .source("memory", Memory(data.clone(), 0))
        .stage("decode", DecodeConfig::default().build());
    for (name, value) in transforms {
        let spec = registry::find(name).expect("registered");
        p = p.boxed_stage(*name, (spec.build)(*value).expect("builds"));
    }
    let report = p.sink("discard", Discard).run();
    assert!(report.is_ok(), "{:?}", report.errors);
}

fn shapes(c: &mut Criterion) {
    let data = Arc::new(perfpipe_stages::synth::workload(64 << 20));
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

criterion_group!(benches, shapes);
criterion_main!(benches);

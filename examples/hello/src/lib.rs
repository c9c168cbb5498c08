//! `hello`: the smallest useful stage. It passes every record through unchanged and counts the
//! samples it saw. This file is the code of the guide, `docs/custom-stages.md`; a test checks that
//! the guide quotes it exactly.

// guide:begin stage
use perfpipe_core::{Batch, Counter, Flow, Out, Stage, StageError};
use perfpipe_stream::format::RecordType;

/// Counts samples; changes nothing.
#[derive(Debug, Default)]
pub struct Hello {
    samples: Counter,
}

impl Stage for Hello {
    fn process(&mut self, batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        // One pass over the batch's index; the records themselves are not read.
        let n = batch
            .spans
            .iter()
            .filter(|s| s.kind == RecordType::SAMPLE.0)
            .count();
        self.samples.add(n as u64); // once per batch, not per record
        out.push(batch); // pass the batch on: zero-copy
        Ok(Flow::Continue)
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![("samples_seen", self.samples.clone())]
    }
}
// guide:end stage

// guide:begin spec
use perfpipe_core::spec::{Flag, StageSpec};

/// How `hello` appears on the command line: `--hello`, or `--stage hello`.
pub const SPEC: StageSpec = StageSpec {
    name: "hello",
    help: "count the samples going by (a worked example)",
    // Its flags: `--hello` adds the stage where it stands on the command line.
    flags: &[Flag::stage(
        "hello",
        "count the samples going by (a worked example)",
    )],
    // Its `key=value` options, typed (none here).
    options: &[],
    // Builds it; the context has the settings, the requests and the worker pool.
    build: |_ctx, _options| Ok(Box::new(Hello::default())),
    // It reads samples, so `perf record -z` input is decompressed before it.
    needs: &["decompress"],
};
// guide:end spec

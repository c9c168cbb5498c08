//! `hello`: the smallest useful stage. It passes every record through unchanged and counts the
//! samples it saw. This file is the code of the guide, `docs/custom-stages.md`; a test checks that
//! the guide quotes it exactly.

// guide:begin stage
use perfpipe_core::{Batch, Counter, Flow, Out, Stage, StageError};
use perfpipe_stages::format::RecordType;

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
use perfpipe_stages::registry::StageSpec;

/// How `hello` appears on the command line: `--hello`, or `--stage hello`.
pub const SPEC: StageSpec = StageSpec {
    name: "hello",
    help: "count the samples going by (a worked example)",
    value: None,
    options: &[],
    build: |_| Ok(Box::new(Hello::default())),
    needs_decompressed: true,
};
// guide:end spec

//! [`Join`]: the SAMPLE records of a batch, each with its entry in the batch's [`Stacks`]
//! annotation, the one loop every profile sink reads samples with.

use std::slice;

use perfpipe_core::{Batch, Span};
use perfpipe_stream::format::{RecordType, StreamInfo};

use crate::symbolize::{StackSample, Stacks};

/// The SAMPLE records of a batch in record order, each joined with its [`StackSample`]: an
/// iterator of `(index in Stacks::samples, sample)`.
///
/// The spans and the stack samples are both in record order unless a stage appended records, so
/// the next entry is tried first and a binary search by the record's start finds the others. A
/// SAMPLE record no entry matches (one a stage after `symbolize` added or rewrote) is skipped and
/// counted in [`Join::missing`].
#[derive(Debug)]
pub struct Join<'a> {
    stacks: &'a Stacks,
    info: Option<&'a StreamInfo>,
    list: &'a [StackSample],
    spans: slice::Iter<'a, Span>,
    next: usize,
    missing: u64,
}

impl<'a> Join<'a> {
    /// The samples of `batch` with their stacks, or `None` when no `symbolize` stage annotated
    /// the batch (its samples are then [`sample_count`]).
    pub fn of(batch: &'a Batch) -> Option<Join<'a>> {
        let stacks = batch.annotation::<Stacks>()?;
        Some(Join {
            stacks,
            info: StreamInfo::of(batch),
            list: stacks.samples(),
            spans: batch.spans.iter(),
            next: 0,
            missing: 0,
        })
    }

    /// The batch's annotation: where the samples' frames are ([`Stacks::frames`]).
    pub fn stacks(&self) -> &'a Stacks {
        self.stacks
    }

    /// The batch's attrs, for the events' names ([`crate::kit::event::name`]).
    pub fn info(&self) -> Option<&'a StreamInfo> {
        self.info
    }

    /// SAMPLE records passed so far that have no entry in the annotation.
    pub fn missing(&self) -> u64 {
        self.missing
    }
}

impl<'a> Iterator for Join<'a> {
    type Item = (usize, &'a StackSample);

    #[inline]
    fn next(&mut self) -> Option<(usize, &'a StackSample)> {
        for span in self.spans.by_ref() {
            if span.kind != RecordType::SAMPLE.0 {
                continue;
            }
            let i = match self.list.get(self.next) {
                Some(s) if s.start == span.start => self.next,
                _ => match self.list.binary_search_by_key(&span.start, |s| s.start) {
                    Ok(i) => i,
                    Err(_) => {
                        self.missing += 1;
                        continue;
                    }
                },
            };
            self.next = i + 1;
            return Some((i, &self.list[i]));
        }
        None
    }
}

/// The SAMPLE records of a batch.
pub fn sample_count(batch: &Batch) -> u64 {
    batch
        .spans
        .iter()
        .filter(|s| s.kind == RecordType::SAMPLE.0)
        .count() as u64
}

#[cfg(test)]
mod tests {
    use perfpipe_core::harness::{raw_batches, run_stage};
    use perfpipe_stream::decode::DecodeConfig;

    use super::*;
    use crate::symbolize::SymbolizeConfig;

    const CALLGRAPH: &[u8] = include_bytes!("../../../tests/fixtures/callgraph.pipe.data");

    #[test]
    fn every_sample_is_joined_once_and_a_rewritten_one_is_counted_missing() {
        let decoded = run_stage(
            &mut DecodeConfig::default().build(),
            raw_batches(CALLGRAPH, &[1 << 16; 4], 0),
        )
        .unwrap();
        let batches = run_stage(&mut SymbolizeConfig::default().build(None), decoded).unwrap();
        let mut joined = 0;
        for b in &batches {
            let mut join = Join::of(b).unwrap();
            let starts: Vec<u32> = join.by_ref().map(|(_, s)| s.start).collect();
            assert!(starts.windows(2).all(|w| w[0] < w[1]), "record order");
            assert_eq!(join.missing(), 0);
            assert_eq!(starts.len() as u64, sample_count(b));
            joined += starts.len();
        }
        assert_eq!(joined, 1777, "perf report --stats: 1777 samples");

        // A sample moved by a later stage has no entry: skipped and counted.
        let mut moved = batches[0].clone();
        let at = moved
            .spans
            .iter()
            .position(|s| s.kind == RecordType::SAMPLE.0)
            .unwrap();
        moved.spans[at].start += 1;
        let mut join = Join::of(&moved).unwrap();
        assert_eq!(join.by_ref().count() as u64, sample_count(&moved) - 1);
        assert_eq!(join.missing(), 1);

        let mut bare = batches[0].clone();
        bare.annotations.clear();
        assert!(Join::of(&bare).is_none());
    }
}

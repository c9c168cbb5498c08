//! [`OffCpuSamples`]: a profile's samples read through the off-CPU model when the stream has
//! switches ([`perfpipe_stream::model::offcpu`]), the loop a profile format that charges
//! off-CPU intervals shares: each sample given to the format, which returns its key, every
//! record given to the model, the intervals closed so far handed back keyed.

use perfpipe_core::Batch;
use perfpipe_stream::format::{RecordType, StreamInfo};
use perfpipe_stream::model::offcpu::{Interval, OffCpu, Switches};

use super::{Join, NameSources};
use crate::symbolize::{StackSample, Stacks};

/// The switches of a stream and the intervals they close, each keyed by the switch-out
/// sample's key `K` (see the module doc).
#[derive(Debug)]
pub struct OffCpuSamples<K> {
    switches: Switches,
    model: OffCpu<K>,
    intervals: Vec<Interval<K>>,
    /// Whether the stream has a source of switches (decided at its first batch with attrs).
    active: Option<bool>,
}

impl<K> Default for OffCpuSamples<K> {
    fn default() -> OffCpuSamples<K> {
        OffCpuSamples {
            switches: Switches::default(),
            model: OffCpu::default(),
            intervals: Vec::new(),
            active: None,
        }
    }
}

impl<K: Copy> OffCpuSamples<K> {
    /// Reads the samples of `batch`: each one given to `sample` (with the batch's attrs and
    /// stacks), whose key the model keeps for its switch-out; `sources` observes the batch. The
    /// number of samples read.
    pub fn add(
        &mut self,
        batch: &Batch,
        sources: &mut NameSources,
        mut sample: impl FnMut(&StreamInfo, &Stacks, &StackSample) -> K,
    ) -> u64 {
        let Some(join) = Join::of(batch) else {
            return 0;
        };
        let (stacks, Some(info)) = (join.stacks(), join.info()) else {
            return 0;
        };
        sources.observe(stacks);
        let active = self.switches.reads(&mut self.active, info, batch);
        if !active {
            let mut n = 0;
            for (_, s) in join {
                sample(info, stacks, s);
                n += 1;
            }
            return n;
        }
        let mut join = join.peekable();
        let mut n = 0;
        for span in &batch.spans {
            if span.kind == RecordType::FINISHED_ROUND.0 {
                self.model.round(&mut self.intervals);
                continue;
            }
            let rec = info.record(batch, span);
            let is_sample = span.kind == RecordType::SAMPLE.0;
            let joined = join.next_if(|&(_, s)| is_sample && s.start == span.start);
            let sw = self.switches.read(&rec, span.tag, info);
            let key = joined.map(|(_, s)| {
                if s.time != 0 {
                    self.model.note_time(s.time);
                }
                n += 1;
                sample(info, stacks, s)
            });
            self.model.add(&sw, key, &mut self.intervals);
        }
        n
    }

    /// Closes the intervals still open (at the last event time, `open_at_end`).
    pub fn finish(&mut self) {
        self.model.finish(&mut self.intervals);
    }

    /// The intervals closed since the last call.
    pub fn drain(&mut self) -> std::vec::Drain<'_, Interval<K>> {
        self.intervals.drain(..)
    }
}

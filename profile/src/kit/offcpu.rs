//! [`OffCpuSamples`]: the one per-batch loop of every profile sink: a batch's samples, each with
//! its stack, given to the format (a [`SampleSink`]), and, when the profile reads switches, every
//! record given to the off-CPU model ([`crate::offcpu`]) in order, the intervals it closes kept
//! keyed by what the format returned for their switch-out's sample.
//!
//! A format implements [`SampleSink::sample`] (take in one sample, return its key), and drains the
//! closed intervals ([`OffCpuSamples::drain`]) after each batch and at the end; one that writes
//! rows as it goes takes them at each round's end too ([`SampleSink::round`]).

use perfpipe_core::{Batch, Span};
use perfpipe_stream::format::{Record, RecordType, StreamInfo};

use super::{Join, NameSources};
use crate::offcpu::{Interval, OffCpu, OffCpuCounts, Switch, Switches};
use crate::symbolize::{StackSample, Stacks};

/// When a profile reads its samples through the off-CPU model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    /// Never: samples only (an on-CPU folded profile).
    Never,
    /// When the stream has a source of switches (`sched:sched_switch`, `context-switches`,
    /// perf's `offcpu-time`), decided at its first annotated batch; wakeups read (pprof,
    /// Parquet, OTLP).
    WhenSwitches,
    /// Always, wakeups read or not (`--weight offcpu|wall|offwake`).
    Always {
        /// Read `sched_waking`/`sched_wakeup` samples as wakeups ([`Switches::wakeups`]).
        wakeups: bool,
    },
}

/// One sample as [`OffCpuSamples`] hands it to a format.
#[derive(Clone, Copy, Debug)]
pub struct At<'a> {
    /// The batch's attrs.
    pub info: &'a StreamInfo,
    /// The batch's annotation: where the sample's frames are ([`Stacks::frames`]).
    pub stacks: &'a Stacks,
    /// The sample.
    pub sample: &'a StackSample,
    /// Its index in [`Stacks::samples`].
    pub index: usize,
    batch: &'a Batch,
    span: &'a Span,
}

impl<'a> At<'a> {
    /// The sample's record, for the fields the annotation does not carry (tracepoint payloads).
    pub fn record(&self) -> Record<'a> {
        self.info.record(self.batch, self.span)
    }

    /// The sample's frames, innermost first.
    pub fn frames(&self) -> &'a [u32] {
        self.stacks.frames(self.sample)
    }
}

/// What a profile format does with the samples [`OffCpuSamples`] reads.
pub trait SampleSink {
    /// What the format keys a switch-out's (or a wakeup's) sample by until its interval closes.
    type Key: Copy;
    /// What taking in a sample can fail with (a format that writes as it goes).
    type Error;

    /// The name sources the batches carry, which every annotated batch is observed into.
    fn sources(&mut self) -> &mut NameSources;

    /// Takes in one sample. `switch` is what the off-CPU model reads of its record (`None` when
    /// the profile does not read switches); the key returned is what the model keeps for it
    /// (a switch-out's or a wakeup's stack), `None` for none.
    ///
    /// # Errors
    /// The format's, which ends the batch.
    fn sample(
        &mut self,
        at: At<'_>,
        switch: Option<&Switch>,
    ) -> Result<Option<Self::Key>, Self::Error>;

    /// At a round's end (FINISHED_ROUND), the intervals closed so far: a format that writes rows
    /// in order takes them here; by default they wait for [`OffCpuSamples::drain`].
    ///
    /// # Errors
    /// The format's, which ends the batch.
    fn round(&mut self, intervals: &mut Vec<Interval<Self::Key>>) -> Result<(), Self::Error> {
        let _ = intervals;
        Ok(())
    }
}

/// What [`OffCpuSamples::add`] read of a batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Read {
    /// Samples given to the format.
    pub samples: u64,
    /// SAMPLE records of an annotated batch with no entry in its annotation (a later stage
    /// rewrote them).
    pub missing: u64,
    /// SAMPLE records of a batch no `symbolize` stage annotated.
    pub unannotated: u64,
}

/// The switches of a stream and the intervals they close, each keyed by the switch-out
/// sample's key `K` (see the module doc).
#[derive(Debug)]
pub struct OffCpuSamples<K> {
    switches: Switches,
    model: OffCpu<K>,
    intervals: Vec<Interval<K>>,
    when: Model,
    /// Whether the model reads this stream (decided at its first annotated batch).
    active: Option<bool>,
}

impl<K> Default for OffCpuSamples<K> {
    fn default() -> OffCpuSamples<K> {
        OffCpuSamples::new(Model::WhenSwitches)
    }
}

impl<K> OffCpuSamples<K> {
    /// A profile's samples, read through the model `when` says.
    pub fn new(when: Model) -> OffCpuSamples<K> {
        let mut switches = Switches::default();
        switches.wakeups = match when {
            Model::Never => false,
            Model::WhenSwitches => true,
            Model::Always { wakeups } => wakeups,
        };
        OffCpuSamples {
            switches,
            model: OffCpu::default(),
            intervals: Vec::new(),
            when,
            active: None,
        }
    }

    /// Whether the samples go through the off-CPU model (false until a batch decided it).
    pub fn active(&self) -> bool {
        self.active == Some(true)
    }

    /// The model's counts so far ([`OffCpu::counts`]).
    pub fn counts(&self) -> OffCpuCounts {
        self.model.counts
    }

    /// The switch reader: its counts of unusable tracepoint samples.
    pub fn switches(&self) -> &Switches {
        &self.switches
    }

    /// Whether `batch` goes through the model. [`Model::WhenSwitches`] decides at the first batch
    /// that holds a sample (every attr and the tracing data come before the samples): decided at
    /// a batch of header records cut before the tracing data (a pipe read that ended there), a
    /// `sched_switch` stream had no format yet and would be read without the model, timing
    /// decided. Batches before it go through the model, which takes their NRCPUS feature and
    /// nothing else.
    fn decide(&mut self, info: &StreamInfo, batch: &Batch) -> bool {
        if let Some(active) = self.active {
            return active;
        }
        let active = match self.when {
            Model::Never => false,
            Model::Always { .. } => true,
            Model::WhenSwitches => {
                if !batch.spans.iter().any(|s| s.kind == RecordType::SAMPLE.0) {
                    return true;
                }
                self.switches.active(info)
            }
        };
        self.active = Some(active);
        active
    }
}

impl<K: Copy> OffCpuSamples<K> {
    /// Reads the samples of `batch` into `sink` (see the module doc): each joined with its stack,
    /// in record order, and with the off-CPU model, every record through it.
    ///
    /// # Errors
    /// The first error of `sink`, which ends the batch (what was taken in stays).
    pub fn add<S: SampleSink<Key = K>>(
        &mut self,
        batch: &Batch,
        sink: &mut S,
    ) -> Result<Read, S::Error> {
        let mut read = Read::default();
        let Some(mut join) = Join::of(batch) else {
            read.unannotated = super::join::sample_count(batch);
            return Ok(read);
        };
        let (stacks, Some(info)) = (join.stacks(), join.info()) else {
            return Ok(read);
        };
        sink.sources().observe(stacks);
        let active = self.decide(info, batch);
        let mut samples = join.by_ref().peekable();
        for span in &batch.spans {
            let joined = samples
                .next_if(|&(_, s)| span.kind == RecordType::SAMPLE.0 && s.start == span.start);
            let at = joined.map(|(index, sample)| At {
                info,
                stacks,
                sample,
                index,
                batch,
                span,
            });
            if !active {
                if let Some(at) = at {
                    read.samples += 1;
                    sink.sample(at, None)?;
                }
                continue;
            }
            if span.kind == RecordType::FINISHED_ROUND.0 {
                self.model.round(&mut self.intervals);
                sink.round(&mut self.intervals)?;
                continue;
            }
            let sw = self
                .switches
                .read(&info.record(batch, span), span.tag, info);
            let key = match at {
                Some(at) => {
                    if at.sample.time != 0 {
                        self.model.note_time(at.sample.time);
                    }
                    read.samples += 1;
                    sink.sample(at, Some(&sw))?
                }
                None => None,
            };
            self.model.add(&sw, key, &mut self.intervals);
        }
        drop(samples);
        read.missing = join.missing();
        Ok(read)
    }

    /// Closes the intervals still open (at the last event time, `open_at_end`).
    pub fn finish(&mut self) {
        self.model.finish(&mut self.intervals);
    }

    /// The intervals closed and not taken yet, for a format to take (and leave empty).
    pub fn closed(&mut self) -> &mut Vec<Interval<K>> {
        &mut self.intervals
    }

    /// The intervals closed since the last call.
    pub fn drain(&mut self) -> std::vec::Drain<'_, Interval<K>> {
        self.intervals.drain(..)
    }
}

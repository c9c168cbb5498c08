//! Batches held until the records that belong before them in time have come: the one mechanism
//! of every stage that looks a sample up in a model fed by side-band records (`aslr`, `filter`
//! with a `comm` predicate, `symbolize`, `unwind`).
//!
//! perf orders records by time only across FINISHED_ROUNDs (it flushes its time-ordered queue one
//! round behind), so the side-band older than a sample (the FORK or MMAP of its process, the COMM
//! that names its thread) may come up to two rounds after it in the stream. A [`Hold`] keeps each
//! batch whole (not copied) until two more FINISHED_ROUNDs have come after it, or until more than
//! [`HOLD_MAX_BYTES`] are held; the stage takes the side-band of a batch into its model when the
//! batch comes and looks its samples up when it goes. Batches go in the order they came.
//!
//! With the address-space model, [`Hold::keep_for_next`] and [`Hold::keep_for_held`] tell the
//! [`Machine`] which rounds the held samples may still look up, so it forgets no older history.

use std::collections::VecDeque;
use std::sync::Arc;

use perfpipe_core::{Batch, Out};

use super::machine::Machine;
use crate::format::{RecordType, StreamInfo};

/// Most bytes of batches a [`Hold`] keeps: past it, the oldest go however few rounds came after
/// them (a sample may then miss side-band that is later still; the bound keeps memory bounded
/// on a stream of rare FINISHED_ROUNDs).
pub const HOLD_MAX_BYTES: usize = 32 << 20;

/// Batches held two FINISHED_ROUNDs (see the module doc).
#[derive(Debug, Default)]
pub struct Hold {
    held: VecDeque<Held>,
    bytes: usize,
    /// FINISHED_ROUNDs in the batches pushed so far.
    rounds: u64,
}

#[derive(Debug)]
struct Held {
    batch: Batch,
    /// FINISHED_ROUNDs up to its end.
    rounds: u64,
    /// The model's round when it came.
    round: u64,
}

impl Hold {
    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Holds `batch`, counting its FINISHED_ROUNDs (a batch without stream info has none);
    /// `round` is the model's round when it came (0 for a stage without the address-space model).
    pub fn push(&mut self, batch: Batch, round: u64) {
        if StreamInfo::of(&batch).is_some() {
            let finished = batch
                .spans
                .iter()
                .filter(|s| s.kind == RecordType::FINISHED_ROUND.0)
                .count();
            self.rounds += finished as u64;
        }
        self.bytes += batch.data.len();
        self.held.push_back(Held {
            batch,
            rounds: self.rounds,
            round,
        });
    }

    /// The oldest batch if it is due: two FINISHED_ROUNDs have come after it, or more than
    /// [`HOLD_MAX_BYTES`] are held. With `all` (at the end of the stream, or for a snapshot),
    /// the oldest, due or not.
    pub fn pop(&mut self, all: bool) -> Option<Batch> {
        let h = self.held.front()?;
        if !all && self.rounds < h.rounds + 2 && self.bytes <= HOLD_MAX_BYTES {
            return None;
        }
        let h = self.held.pop_front()?;
        self.bytes -= h.batch.data.len();
        Some(h.batch)
    }

    /// What becomes of a batch that comes, before [`Hold::push`]: `None` when it goes on at once
    /// (it has no stream info, and nothing is held before it); else the model's round to push it
    /// with, and its stream info, whose side-band the stage then takes in (the model keeps the
    /// history from the oldest held batch: [`Hold::keep_for_next`]).
    pub fn admit(
        &self,
        batch: &Batch,
        machine: &mut Machine,
    ) -> Option<(u64, Option<Arc<StreamInfo>>)> {
        match StreamInfo::shared(batch) {
            Some(info) => Some((self.keep_for_next(machine), Some(info))),
            None if self.is_empty() => None,
            None => Some((machine.round(), None)),
        }
    }

    /// Before a batch is taken into `machine`: the model keeps its history from the round of the
    /// oldest held batch, or from now for the batch about to be held. Returns the model's round,
    /// for [`Hold::push`].
    pub fn keep_for_next(&self, machine: &mut Machine) -> u64 {
        let now = machine.round();
        machine.hold(Some(self.held.front().map_or(now, |h| h.round)));
        now
    }

    /// After batches went: the model keeps the history the held ones may still look up (none
    /// when nothing is held).
    pub fn keep_for_held(&self, machine: &mut Machine) {
        machine.hold(self.held.front().map(|h| h.round));
    }
}

/// A stage whose batches wait in a [`Hold`] for the side-band older than their samples, its
/// [`Machine`] fed as they come (`aslr`, `symbolize`, `unwind`): it says how to take a batch's
/// side-band in and what becomes of a batch when it goes; [`Holding::hold`] is its `process` and
/// [`Holding::release_due`] its `flush`.
pub trait Holding {
    /// Its hold and its model.
    fn parts(&mut self) -> (&mut Hold, &mut Machine);

    /// Takes in the side-band of a batch as it comes.
    fn take_in(&mut self, batch: &Batch, info: &Arc<StreamInfo>);

    /// Emits a batch that is due: its samples looked up or rewritten (a batch without stream
    /// info too, in its place).
    fn release(&mut self, batch: Batch, out: &mut Out<'_>);

    /// After batches went: what else the stage forgets (nothing by default).
    fn released(&mut self) {}

    /// Holds a batch that comes (or passes it on at once: no stream info, nothing held before
    /// it), taking its side-band in, then emits the batches that are due.
    fn hold(&mut self, batch: Batch, out: &mut Out<'_>) {
        let (hold, machine) = self.parts();
        let Some((round, info)) = hold.admit(&batch, machine) else {
            out.push(batch);
            return;
        };
        if let Some(info) = info {
            self.take_in(&batch, &info);
        }
        // Its last samples are of the round the batch ends in.
        self.parts().0.push(batch, round);
        self.release_due(out, false);
    }

    /// Emits the held batches that are due (all of them with `all`: at the end of the stream,
    /// or for a snapshot); the model then keeps the history the held ones may still look up.
    fn release_due(&mut self, out: &mut Out<'_>, all: bool) {
        while let Some(batch) = self.parts().0.pop(all) {
            self.release(batch, out);
        }
        let (hold, machine) = self.parts();
        hold.keep_for_held(machine);
        self.released();
    }
}

#[cfg(test)]
mod tests {
    use perfpipe_core::Span;

    use super::*;
    use crate::format::{Endian, StreamInfo};

    /// A batch of `bytes` bytes with `rounds` FINISHED_ROUND records, decoded or not.
    fn batch(bytes: usize, rounds: usize, decoded: bool) -> Batch {
        let mut b = Batch {
            data: vec![0; bytes],
            ..Batch::default()
        };
        b.spans = (0..rounds)
            .map(|i| Span {
                start: i as u32 * 8,
                len: 8,
                kind: RecordType::FINISHED_ROUND.0,
                ..Span::default()
            })
            .collect();
        if decoded {
            b.context = Some(Arc::new(StreamInfo::new(Endian::Little)));
        }
        b
    }

    #[test]
    fn a_batch_goes_two_rounds_after_it_in_order() {
        let mut h = Hold::default();
        h.push(batch(16, 1, true), 0);
        h.push(batch(8, 0, true), 0);
        assert!(h.pop(false).is_none(), "no round after them yet");
        h.push(batch(8, 1, true), 0);
        assert!(h.pop(false).is_none(), "one round after the first");
        h.push(batch(24, 1, true), 0);
        assert_eq!(
            h.pop(false).map(|b| b.data.len()),
            Some(16),
            "the first, first"
        );
        assert_eq!(h.pop(false).map(|b| b.data.len()), Some(8));
        assert!(
            h.pop(false).is_none(),
            "the third ends one round before the last"
        );
        assert_eq!(h.pop(true).map(|b| b.data.len()), Some(8));
        assert_eq!(h.pop(true).map(|b| b.data.len()), Some(24));
        assert!(h.is_empty() && h.pop(true).is_none());
    }

    #[test]
    fn rounds_count_only_in_decoded_batches_and_bytes_bound_the_hold() {
        let mut h = Hold::default();
        // Raw bytes that happen to look like FINISHED_ROUNDs are no rounds.
        h.push(batch(8, 0, true), 0);
        h.push(batch(64, 4, false), 0);
        assert!(h.pop(false).is_none());
        h.push(batch(HOLD_MAX_BYTES, 0, true), 0);
        assert_eq!(
            h.pop(false).map(|b| b.data.len()),
            Some(8),
            "over the bound"
        );
        assert_eq!(
            h.pop(false).map(|b| b.data.len()),
            Some(64),
            "still over it"
        );
        assert!(h.pop(false).is_none(), "at the bound, not over it");
    }

    #[test]
    fn the_model_keeps_the_history_of_the_oldest_held_batch() {
        let mut m = Machine::default();
        let mut h = Hold::default();
        assert_eq!(h.keep_for_next(&mut m), 0);
        h.push(batch(8, 0, true), 0);
        for _ in 0..5 {
            m.finished_round();
        }
        assert_eq!(h.keep_for_next(&mut m), 5, "the model's round now");
        assert_eq!(m.held(), Some(0), "the oldest held batch came at round 0");
        h.pop(true);
        h.keep_for_held(&mut m);
        assert_eq!(m.held(), None, "nothing held");
    }
}

//! Frames that fell in no map when their sample came, kept for a retry at the next
//! FINISHED_ROUNDs: records are in time order only across rounds, so a sample (or a callchain
//! frame) can come before the MMAP it falls in (another cpu's ring, drained later in the same
//! pass). perf, which sorts, resolves it; the build-id stages retry it.
//!
//! One entry per distinct frame (process, cpumode, address), not per sample: the frames that never
//! resolve (a frame-pointer chain through code built without them reads return addresses out of
//! stack garbage, `0` ends many chains) repeat the same few addresses in thousands of samples,
//! and a list per sample filled up with them, so that a frame that would have resolved was dropped
//! (`perf bench sched messaging` at start-up: ~6500 unresolved frames in a round, 131 distinct).
//! An entry keeps the earliest and the latest time it was seen at, the lookups a retry makes: a
//! map that came late is found from its time on, so the latest sees the newest map and the
//! earliest the oldest (a third map replaced at the address between the two inside the window is
//! the one thing not seen).
//!
//! **Memory**: at most [`MAX_FRAMES`] entries; a frame more is not kept (counted by the caller).

use std::collections::HashMap;

/// Most distinct unresolved frames waiting at once.
pub const MAX_FRAMES: usize = 65_536;

/// Rounds a frame waits: records are ordered across rounds, so its map comes in the round of
/// the sample or the next.
const ROUNDS: u8 = 2;

/// Where a frame is: (pid, cpumode, address).
pub type Key = (u32, u16, u64);

/// A frame waiting for its map: the samples it was seen in at the earliest and latest times
/// (`T` is what the caller needs of a sample, with its time).
#[derive(Clone, Copy, Debug)]
struct Entry<T> {
    key: Key,
    earliest: (u64, T),
    latest: (u64, T),
    left: u8,
}

/// The frames waiting for their maps, in the order they first came (so retries, and the records
/// they insert, come out in the same order every run).
#[derive(Debug)]
pub struct Pending<T> {
    entries: Vec<Entry<T>>,
    index: HashMap<Key, usize>,
}

impl<T> Default for Pending<T> {
    fn default() -> Self {
        Pending {
            entries: Vec::new(),
            index: HashMap::new(),
        }
    }
}

impl<T: Copy> Pending<T> {
    /// Notes that `key` fell in no map in a sample at `time`; it waits the next two rounds.
    /// Returns false when it could not be kept ([`MAX_FRAMES`] others wait).
    pub fn add(&mut self, key: Key, time: u64, sample: T) -> bool {
        if let Some(&i) = self.index.get(&key) {
            let e = &mut self.entries[i];
            if time < e.earliest.0 {
                e.earliest = (time, sample);
            }
            if time >= e.latest.0 {
                e.latest = (time, sample);
            }
            e.left = ROUNDS;
            return true;
        }
        if self.entries.len() >= MAX_FRAMES {
            return false;
        }
        self.index.insert(key, self.entries.len());
        self.entries.push(Entry {
            key,
            earliest: (time, sample),
            latest: (time, sample),
            left: ROUNDS,
        });
        true
    }

    /// Frames waiting.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no frame waits.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// At a FINISHED_ROUND: looks each frame up again with `resolve(key, time, sample)` (true:
    /// it fell in a map), at its earliest and latest times. A frame found at both is done; one
    /// not found waits one round less, and is forgotten after its last.
    pub fn retry(&mut self, mut resolve: impl FnMut(Key, u64, &T) -> bool) {
        let entries = std::mem::take(&mut self.entries);
        self.index.clear();
        for mut e in entries {
            let first = resolve(e.key, e.earliest.0, &e.earliest.1);
            let last = if e.latest.0 == e.earliest.0 {
                first
            } else {
                resolve(e.key, e.latest.0, &e.latest.1)
            };
            if (first && last) || e.left <= 1 {
                continue;
            }
            // The end already found is not looked up again (its map is written once, even after
            // its process's EXIT): only the other waits.
            if first {
                e.earliest = e.latest;
            } else if last {
                e.latest = e.earliest;
            }
            e.left -= 1;
            self.index.insert(e.key, self.entries.len());
            self.entries.push(e);
        }
    }

    /// At the end of the stream: a last lookup of every frame, then none waits.
    pub fn finish(&mut self, resolve: impl FnMut(Key, u64, &T) -> bool) {
        self.retry(resolve);
        self.entries.clear();
        self.index.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_seen_again_is_one_entry_with_its_earliest_and_latest_times() {
        let mut p = Pending::default();
        for t in [50, 10, 90, 30] {
            assert!(p.add((1, 2, 0x1000), t, t));
        }
        assert!(p.add((1, 2, 0x2000), 5, 5));
        assert_eq!(p.len(), 2);
        let mut seen = Vec::new();
        p.retry(|k, t, s| {
            assert_eq!(t, *s);
            seen.push((k.2, t));
            false
        });
        assert_eq!(seen, [(0x1000, 10), (0x1000, 90), (0x2000, 5)]);
    }

    #[test]
    fn a_frame_waits_two_rounds_and_a_new_sample_of_it_restarts_them() {
        let mut p = Pending::default();
        p.add((1, 2, 0x1000), 1, ());
        p.retry(|_, _, _| false);
        assert_eq!(p.len(), 1);
        p.add((1, 2, 0x1000), 2, ());
        p.retry(|_, _, _| false);
        assert_eq!(p.len(), 1, "seen again in the last round: waits one more");
        p.retry(|_, _, _| false);
        assert!(p.is_empty());
        // Found at both times: done.
        p.add((1, 2, 0x1000), 1, ());
        p.add((1, 2, 0x1000), 9, ());
        p.retry(|_, t, _| t == 9);
        assert_eq!(p.len(), 1, "found at its latest time only: tried again");
        p.retry(|_, _, _| true);
        assert!(p.is_empty());
    }

    #[test]
    fn the_same_garbage_in_many_samples_leaves_room_for_a_frame_that_resolves() {
        let mut p = Pending::default();
        for t in 0..10 * MAX_FRAMES as u64 {
            assert!(p.add((7, 2, t % 100), t, ()));
        }
        assert!(p.add((7, 2, 0x7f00_0000), 1, ()));
        for a in 0..MAX_FRAMES as u64 {
            p.add((8, 2, a), 0, ());
        }
        assert_eq!(p.len(), MAX_FRAMES);
        assert!(!p.add((9, 2, 0), 0, ()), "full: not kept");
        let mut found = false;
        p.finish(|k, _, _| {
            found |= k.2 == 0x7f00_0000;
            false
        });
        assert!(found && p.is_empty());
    }

    #[test]
    fn an_end_found_is_not_looked_up_again() {
        let mut p: Pending<u64> = Pending::default();
        assert!(p.add((1, 2, 0x1000), 10, 10));
        assert!(p.add((1, 2, 0x1000), 20, 20));
        let mut asked = Vec::new();
        // The earliest sample's map is there, the latest's not yet.
        p.retry(|_, time, _| {
            asked.push(time);
            time == 10
        });
        p.retry(|_, time, _| {
            asked.push(time);
            true
        });
        assert_eq!(asked, [10, 20, 20]);
        assert!(p.is_empty());
    }
}

//! Per-stage metrics, counted by the runner.
//!
//! Every stage gets a [`StageMetrics`]: batches, records and bytes in and out, records per kind in and
//! out, and the time its thread spent *working*, *starved* (waiting on an empty input) and *blocked*
//! (waiting on a full output), plus the fill of its output queue. All are relaxed atomics updated once
//! per batch, so they can be read while the pipeline runs. Stages add their own [`Counter`]s.

use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};
use std::sync::Arc;
use std::time::Duration;

/// One finding a stage reports at its end beyond its counters (e.g. one dso whose frames stayed
/// unnamed): named fields, written as one object into `--stats-json`'s stage `notes`.
pub type Note = Vec<(&'static str, NoteValue)>;

/// A field's value in a [`Note`].
#[derive(Clone, Debug, PartialEq)]
pub enum NoteValue {
    /// A string.
    Text(String),
    /// A count.
    Int(u64),
    /// A fraction, a share or a time.
    Num(f64),
    /// A list of strings.
    List(Vec<String>),
    /// Nothing (JSON `null`).
    Null,
}

/// A stage's findings, shared between the stage and the runner like a [`Counter`]: the stage
/// registers one in [`crate::Stage::notes`] and [`Notes::set`]s them (typically in `flush`); the
/// runner copies them into [`StageSnapshot::notes`].
#[derive(Clone, Debug, Default)]
pub struct Notes(Arc<std::sync::Mutex<Vec<Note>>>);

impl Notes {
    /// No notes yet.
    pub fn new() -> Notes {
        Notes::default()
    }
    /// Replaces the notes with `notes`.
    pub fn set(&self, notes: Vec<Note>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = notes;
    }
    /// The notes now.
    pub fn get(&self) -> Vec<Note> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Number of distinct record kinds counted individually; larger kinds are counted in the last slot.
pub const KIND_SLOTS: usize = 256;

/// A stage-specific counter (e.g. `build_ids_injected`), shared between the stage and the runner.
#[derive(Clone, Debug, Default)]
pub struct Counter(Arc<AtomicU64>);

impl Counter {
    /// A new counter at zero.
    pub fn new() -> Counter {
        Counter::default()
    }
    /// Adds `n`. Call it once per batch with a local sum, not once per record.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Relaxed);
    }
    /// Raises the value to `v` if it is larger: a high-water mark (e.g. the latest timestamp seen).
    #[inline]
    pub fn max(&self, v: u64) {
        self.0.fetch_max(v, Relaxed);
    }
    /// Sets the value if it is still zero: a first-seen mark.
    #[inline]
    pub fn set_once(&self, v: u64) {
        let _ = self.0.compare_exchange(0, v, Relaxed, Relaxed);
    }
    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// Counts of one direction (in or out) of a stage.
#[derive(Debug)]
pub(crate) struct Flow {
    batches: AtomicU64,
    records: AtomicU64,
    bytes: AtomicU64,
    kinds: Box<[AtomicU64]>,
}

impl Default for Flow {
    fn default() -> Flow {
        Flow {
            batches: AtomicU64::new(0),
            records: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            kinds: (0..KIND_SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl Flow {
    /// Counts one batch sent: one pass over its spans, then one atomic add per field and per kind
    /// seen. Returns the batch's stream bytes, which travel with it to the receiver.
    pub(crate) fn count(&self, batch: &crate::Batch) -> u64 {
        self.batches.fetch_add(1, Relaxed);
        if batch.spans.is_empty() {
            let bytes = batch.payload().len() as u64;
            self.bytes.fetch_add(bytes, Relaxed);
            return bytes;
        }
        // Two interleaved histograms: runs of one kind (SAMPLE, SAMPLE, …) would otherwise chain
        // every increment on the previous one's store.
        let mut kinds = [[0u32; KIND_SLOTS]; 2];
        let mut bytes = 0u64;
        let mut pairs = batch.spans.chunks_exact(2);
        for p in &mut pairs {
            bytes += u64::from(p[0].len) + u64::from(p[1].len);
            kinds[0][(p[0].kind as usize).min(KIND_SLOTS - 1)] += 1;
            kinds[1][(p[1].kind as usize).min(KIND_SLOTS - 1)] += 1;
        }
        for s in pairs.remainder() {
            bytes += u64::from(s.len);
            kinds[0][(s.kind as usize).min(KIND_SLOTS - 1)] += 1;
        }
        self.records.fetch_add(batch.spans.len() as u64, Relaxed);
        self.bytes.fetch_add(bytes, Relaxed);
        for (slot, (&a, &b)) in self.kinds.iter().zip(kinds[0].iter().zip(&kinds[1])) {
            if a + b != 0 {
                slot.fetch_add(u64::from(a + b), Relaxed);
            }
        }
        bytes
    }

    /// Counts one batch received, whose bytes the sender counted. Kinds are not counted again: a
    /// stage's input kinds are its upstream's output kinds.
    pub(crate) fn count_received(&self, batch: &crate::Batch, bytes: u64) {
        self.batches.fetch_add(1, Relaxed);
        self.records.fetch_add(batch.spans.len() as u64, Relaxed);
        self.bytes.fetch_add(bytes, Relaxed);
    }

    fn snapshot(&self) -> FlowSnapshot {
        FlowSnapshot {
            batches: self.batches.load(Relaxed),
            records: self.records.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            kinds: self
                .kinds
                .iter()
                .enumerate()
                .filter_map(|(k, n)| {
                    let n = n.load(Relaxed);
                    (n != 0).then_some((k as u32, n))
                })
                .collect(),
        }
    }
}

/// The live metrics of one stage. Cheap to clone (shared).
#[derive(Clone, Debug)]
pub struct StageMetrics {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    name: String,
    /// The stage before this one, whose output kinds are this one's input kinds.
    upstream: Option<Arc<Inner>>,
    input: Flow,
    output: Flow,
    working_ns: AtomicU64,
    starved_ns: AtomicU64,
    blocked_ns: AtomicU64,
    queue_samples: AtomicU64,
    queue_fill_sum: AtomicU64,
    queue_fill_max: AtomicU64,
    queue_capacity: u64,
    counters: Vec<(&'static str, Counter)>,
    notes: Option<Notes>,
    lifetime_ns: AtomicU64,
    /// What the thread is doing and since when ([`Phase`] in the top two bits, nanoseconds since
    /// the pipeline's start below), kept only for a timeline.
    phase: AtomicU64,
}

/// What a stage thread is doing now, as far as the runner knows without asking the stage: a
/// timeline's sample counts the time since it began, so that a long wait shows while it lasts
/// rather than all at once when it ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Ended, or in code whose time splits only afterwards (a source's `produce`, which may wait
    /// in `read(2)`; a sink's `consume`, which may wait in `write(2)`).
    Other = 0,
    /// Waiting on an empty input.
    Starved = 1,
    /// In the stage's own code.
    Working = 2,
    /// Waiting on a full output.
    Blocked = 3,
}

const SINCE_MASK: u64 = (1 << 62) - 1;

impl StageMetrics {
    pub(crate) fn new(
        name: String,
        queue_capacity: usize,
        counters: Vec<(&'static str, Counter)>,
        notes: Option<Notes>,
        upstream: Option<&StageMetrics>,
    ) -> StageMetrics {
        StageMetrics {
            inner: Arc::new(Inner {
                name,
                upstream: upstream.map(|u| u.inner.clone()),
                input: Flow::default(),
                output: Flow::default(),
                working_ns: AtomicU64::new(0),
                starved_ns: AtomicU64::new(0),
                blocked_ns: AtomicU64::new(0),
                queue_samples: AtomicU64::new(0),
                queue_fill_sum: AtomicU64::new(0),
                queue_fill_max: AtomicU64::new(0),
                queue_capacity: queue_capacity as u64,
                counters,
                notes,
                lifetime_ns: AtomicU64::new(0),
                phase: AtomicU64::new(0),
            }),
        }
    }

    pub(crate) fn input(&self) -> &Flow {
        &self.inner.input
    }
    pub(crate) fn output(&self) -> &Flow {
        &self.inner.output
    }
    /// Adds the times of a batch. Release: a sample that sees the new times also sees the
    /// [`Phase`] entered before them ([`StageMetrics::sample`]).
    pub(crate) fn add_times(&self, working: Duration, starved: Duration, blocked: Duration) {
        let i = &self.inner;
        i.working_ns.fetch_add(working.as_nanos() as u64, Release);
        i.starved_ns.fetch_add(starved.as_nanos() as u64, Release);
        i.blocked_ns.fetch_add(blocked.as_nanos() as u64, Release);
    }
    /// The thread enters `phase` at `since` (from the pipeline's start). Entered before the times
    /// of the phases it closes are added, so a sample never counts a phase twice.
    pub(crate) fn enter(&self, phase: Phase, since: Duration) {
        let since = (since.as_nanos() as u64) & SINCE_MASK;
        self.inner
            .phase
            .store((phase as u64) << 62 | since, Relaxed);
    }
    pub(crate) fn set_lifetime(&self, d: Duration) {
        self.inner.lifetime_ns.store(d.as_nanos() as u64, Relaxed);
    }
    pub(crate) fn sample_queue(&self, len: usize) {
        let i = &self.inner;
        i.queue_samples.fetch_add(1, Relaxed);
        i.queue_fill_sum.fetch_add(len as u64, Relaxed);
        i.queue_fill_max.fetch_max(len as u64, Relaxed);
    }

    /// The cumulative counters a [`Timeline`](crate::Timeline) samples at `now` (from the
    /// pipeline's start, read before this call), with the time since the thread entered its
    /// current [`Phase`] (kept only when the pipeline has a timeline): a few loads, no lock.
    ///
    /// Never more than the counters will say once the phase has ended: the times are loaded
    /// before the phase, and a phase is entered before the times of the one it closes are added,
    /// so a sample sees either the old times and a phase still open, or the new ones and the new
    /// phase; and `now` precedes the loads.
    pub fn sample(&self, now: Duration) -> crate::timeline::StageSample {
        let i = &self.inner;
        let mut working = i.working_ns.load(Acquire);
        let mut starved = i.starved_ns.load(Acquire);
        let mut blocked = i.blocked_ns.load(Acquire);
        let phase = i.phase.load(Relaxed);
        let open = (now.as_nanos() as u64).saturating_sub(phase & SINCE_MASK);
        match phase >> 62 {
            1 => starved += open,
            2 => working += open,
            3 => blocked += open,
            _ => {}
        }
        crate::timeline::StageSample {
            working: Duration::from_nanos(working),
            starved: Duration::from_nanos(starved),
            blocked: Duration::from_nanos(blocked),
            records_in: i.input.records.load(Relaxed),
            records_out: i.output.records.load(Relaxed),
            bytes_in: i.input.bytes.load(Relaxed),
            bytes_out: i.output.bytes.load(Relaxed),
            sends: i.queue_samples.load(Relaxed),
            queued: i.queue_fill_sum.load(Relaxed),
        }
    }

    /// The stage's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// A consistent-enough copy of the current values (each field is read atomically).
    pub fn snapshot(&self) -> StageSnapshot {
        let i = &self.inner;
        let samples = i.queue_samples.load(Relaxed);
        StageSnapshot {
            name: i.name.clone(),
            input: FlowSnapshot {
                kinds: i
                    .upstream
                    .as_ref()
                    .map(|u| u.output.snapshot().kinds)
                    .unwrap_or_default(),
                ..i.input.snapshot()
            },
            output: i.output.snapshot(),
            working: Duration::from_nanos(i.working_ns.load(Relaxed)),
            starved: Duration::from_nanos(i.starved_ns.load(Relaxed)),
            blocked: Duration::from_nanos(i.blocked_ns.load(Relaxed)),
            queue_capacity: i.queue_capacity,
            queue_fill_avg: if samples == 0 {
                0.0
            } else {
                i.queue_fill_sum.load(Relaxed) as f64 / samples as f64
            },
            queue_fill_max: i.queue_fill_max.load(Relaxed),
            counters: i.counters.iter().map(|(n, c)| (*n, c.get())).collect(),
            notes: i.notes.as_ref().map(Notes::get).unwrap_or_default(),
            lifetime: Duration::from_nanos(i.lifetime_ns.load(Relaxed)),
        }
    }
}

/// Counts of one direction of a stage at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlowSnapshot {
    /// Batches.
    pub batches: u64,
    /// Records (spans); raw batches count none.
    pub records: u64,
    /// Stream bytes.
    pub bytes: u64,
    /// Records per kind, as `(kind, count)` for every kind seen, ascending. Kinds at or above
    /// [`KIND_SLOTS`]` - 1` share the last slot.
    pub kinds: Vec<(u32, u64)>,
}

/// The metrics of one stage at one moment.
#[derive(Clone, Debug)]
pub struct StageSnapshot {
    /// Stage name.
    pub name: String,
    /// What came in (nothing for a source).
    pub input: FlowSnapshot,
    /// What went out (nothing for a sink).
    pub output: FlowSnapshot,
    /// Time spent in the stage's own code.
    pub working: Duration,
    /// Time spent waiting on an empty input queue.
    pub starved: Duration,
    /// Time spent waiting on a full output queue.
    pub blocked: Duration,
    /// Capacity of the output queue, in batches (0 for a sink).
    pub queue_capacity: u64,
    /// Mean number of batches already queued at each send.
    pub queue_fill_avg: f64,
    /// Largest number of batches already queued at a send.
    pub queue_fill_max: u64,
    /// The stage's own counters.
    pub counters: Vec<(&'static str, u64)>,
    /// The stage's findings ([`Notes`]), empty for most stages.
    pub notes: Vec<Note>,
    /// How long the stage's thread ran, start to end; zero while it runs. The time split
    /// (working + starved + blocked) covers it but for the thread's first and last instants.
    pub lifetime: Duration,
}

impl StageSnapshot {
    /// Working + starved + blocked.
    pub fn total(&self) -> Duration {
        self.working + self.starved + self.blocked
    }

    /// `d` as a percentage of [`StageSnapshot::total`].
    pub fn pct(&self, d: Duration) -> f64 {
        let t = self.total().as_secs_f64();
        if t == 0.0 {
            0.0
        } else {
            100.0 * d.as_secs_f64() / t
        }
    }
}

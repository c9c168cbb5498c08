//! [`Aggregate`]: the distinct stacks of a stream's samples and their weights, as the `symbolize`
//! stage's [`Stacks`] annotations give them, named only when written.
//!
//! Memory is bounded by the distinct stacks and frames, not by the samples: a stack is a key of
//! interned frame ids (one `u32` a frame) with its sample count and period sum, and a frame is
//! named once, however many stacks hold it, when the profile is written.
//!
//! A stack is found by its 128-bit XXH3 fingerprint, so a sample costs one probe of a table of
//! plain values and never reads the stored key (the keys lie in one arena, read only to write
//! the profile). Two distinct stacks share a fingerprint with probability about n²/2¹²⁹: for a
//! million stacks, 10⁻²⁷.

use rustc_hash::FxHashMap as HashMap;
use twox_hash::XxHash3_128;

use perfpipe_core::{Batch, Counter};
use rayon::prelude::*;

use perfpipe_profile::kit::{
    frame_name, kept, At, Comms, FirstEvent, FrameSet, Model, NameSources, Naming, OffCpuSamples,
    SampleSink, StackTable,
};
use perfpipe_profile::offcpu::{State, Switch, Waker};
use perfpipe_profile::symbolize::{StackSample, Stacks};
use perfpipe_stream::format::StreamInfo;

/// Entries of a stack's key before its frames: comm, pid, tid, and the off-CPU mark (0 on the
/// cpu, else 1 + the state's code, see [`mark_of`]).
const ROOT: usize = 4;

/// `PERF_TYPE_SOFTWARE` `cpu-clock` (0) and `task-clock` (1): the on-CPU samples of a wall-clock
/// profile, whose periods are nanoseconds.
fn is_clock(info: &StreamInfo, attr: u16) -> bool {
    info.attrs
        .get(usize::from(attr))
        .is_some_and(|a| a.type_ == 1 && a.config <= 1)
}

/// An off-CPU interval's mark: 1 + its state's place in [`State::ALL`].
fn mark_of(state: State) -> u32 {
    1 + state.index() as u32
}

/// The mark's bit of an interval still open at the end of the stream.
const OPEN_AT_END: u32 = 1 << 8;

/// In a stack's key, after the blocked frames: the waker's part follows (`--`, its frames
/// innermost first, then its comm, pid, tid). No frame id is this.
const WAKER: u32 = u32::MAX;

/// The frame an off-CPU mark shows as: `[off-cpu: S]`, `[off-cpu: S, open at end]` for an
/// interval the stream ended in (closed at its last event time: a lower bound).
fn mark_name(mark: u32) -> String {
    let state = State::ALL
        .get((mark & !OPEN_AT_END) as usize - 1)
        .copied()
        .unwrap_or(State::Other(b'?'));
    let open = if mark & OPEN_AT_END != 0 {
        ", open at end"
    } else {
        ""
    };
    format!("[off-cpu: {}{open}]", state.name())
}

/// The stack of a switch-out, until its interval closes: the root the options keep and the
/// id of its frames in [`Aggregate::off_stacks`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffKey {
    root: [u32; 3],
    stack: u32,
}

/// What a stack's weight is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WeightBy {
    /// The sum of the samples' periods (what `perf script | inferno-collapse-perf` counts: the
    /// period perf script prints, e.g. nanoseconds for cpu-clock).
    #[default]
    Period,
    /// One per sample.
    Samples,
    /// Off-CPU time in ns: each switch-out's stack weighs the time until its thread is next
    /// switched in ([`perfpipe_profile::offcpu`]), under an `[off-cpu: STATE]` frame.
    OffCpu,
    /// Wall-clock time in ns: the on-CPU stacks of `cpu-clock`/`task-clock` samples weighted by
    /// their periods, and the off-CPU stacks as [`WeightBy::OffCpu`] weighs them.
    Wall,
    /// Off-CPU time in ns as [`WeightBy::OffCpu`], each blocked stack followed by the stack of
    /// the wakeup that ended its interval (`sched_waking`/`sched_wakeup` samples): Brendan
    /// Gregg's off-wake stacks, `comm;[off-cpu: S];outer;…;inner;--;waker inner;…;waker
    /// outer;waker comm`.
    OffWake,
}

/// How stacks are told apart and named.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FoldOptions {
    /// The root frame is `comm-PID` (the collapsers' `--pid`).
    pub pid: bool,
    /// The root frame is `comm-PID/TID` (`--tid`).
    pub tid: bool,
    /// How frames are named.
    pub naming: Naming,
    /// What the counts are.
    pub weight: WeightBy,
}

/// A distinct stack: its weight and where its key is in [`Aggregate::keys`].
#[derive(Clone, Copy, Debug, Default)]
struct Stack {
    samples: u64,
    period: u64,
    at: u32,
    len: u32,
}

/// The distinct stacks of a stream.
#[derive(Debug, Default)]
pub struct Aggregate {
    options: FoldOptions,
    /// The fingerprint of `[comm, pid, tid, frame ids root first…]` → the stack.
    stacks: HashMap<u128, Stack>,
    /// The stacks' keys, one after another.
    keys: Vec<u32>,
    /// The frames the stacks use.
    used: FrameSet,
    sources: NameSources,
    comms: Comms,
    /// The event whose samples are counted.
    event: FirstEvent,
    /// The key being built, as bytes to fingerprint.
    key: Vec<u8>,
    /// A batch's keys with their samples' indices, before the table is probed.
    found: Vec<(([u32; ROOT], u128), u32)>,
    /// A batch's samples counted, of other events, without frames (added once a batch).
    tally: [u64; 3],
    /// Samples counted.
    pub samples: Counter,
    /// Samples of other events than the first.
    pub other_event: Counter,
    /// Samples without frames (no ip, or an empty callchain).
    pub empty: Counter,
    /// Samples no `symbolize` stage annotated (rewritten by a later stage).
    pub unannotated: Counter,
    /// The samples, read through the off-CPU model for off-CPU (and wall-clock) profiles.
    off: OffCpuSamples<OffKey>,
    /// The frames of switch-out stacks, interned.
    off_stacks: StackTable,
    /// Off-CPU intervals counted, and those of them still open at the end (closed at the last
    /// event time).
    pub offcpu_intervals: Counter,
    /// Off-CPU intervals still open at the end of the stream, closed at the last event time.
    pub offcpu_open_at_end: Counter,
    /// Switches the model could not use: switch-outs whose switch-in was lost, `sched_switch`
    /// samples shorter than their format, tracepoints without a format.
    pub offcpu_unusable: Counter,
    /// Exiting threads' last switches (`prev_state` `X`/`Z`, or the sample's tid -1): no interval.
    pub offcpu_exits: Counter,
    /// Intervals whose switch-in was lost, closed at the previous `sched_switch` of the cpu the
    /// thread was next switched out on ([`perfpipe_profile::offcpu::OffCpuCounts::lost_ins`]);
    /// counted in `offcpu_intervals` too.
    pub offcpu_lost_ins: Counter,
    /// Off-wake profiles: the intervals charged with their waker's stack (the others, with no
    /// wakeup recorded, keep their blocked stack alone).
    pub offcpu_woken: Counter,
}

impl Aggregate {
    /// An empty aggregate.
    pub fn new(options: FoldOptions) -> Aggregate {
        let when = match options.weight {
            WeightBy::Period | WeightBy::Samples => Model::Never,
            WeightBy::OffCpu | WeightBy::Wall => Model::Always { wakeups: false },
            WeightBy::OffWake => Model::Always { wakeups: true },
        };
        Aggregate {
            options,
            off: OffCpuSamples::new(when),
            ..Aggregate::default()
        }
    }

    /// Whether the profile weighs off-CPU intervals (`--weight offcpu|wall|offwake`).
    fn off_cpu(&self) -> bool {
        !matches!(self.options.weight, WeightBy::Period | WeightBy::Samples)
    }

    /// Number of distinct stacks.
    pub fn stacks(&self) -> usize {
        self.stacks.len()
    }

    /// Number of distinct frames in the stacks.
    pub fn frames(&self) -> usize {
        self.used.len()
    }

    /// Adds the samples of a batch. Off-CPU and wall-clock profiles read every record through
    /// the off-CPU model, in order; a switch-out's stack waits in it until its interval closes.
    pub fn add_batch(&mut self, batch: &Batch) {
        let mut off = std::mem::take(&mut self.off);
        let Ok(read) = off.add(batch, self);
        self.off = off;
        // The table is probed only once every key of the batch is made: the probes are then
        // independent loads the processor overlaps, where one probe after each key's making
        // waited for its cache miss alone.
        if !self.found.is_empty() {
            if let Some(stacks) = batch.annotation::<Stacks>() {
                let list = stacks.samples();
                let mut found = std::mem::take(&mut self.found);
                for (key, i) in found.drain(..) {
                    self.add(key, stacks, &list[i as usize]);
                }
                self.found = found;
            }
        }
        let [counted, other, empty] = std::mem::take(&mut self.tally);
        self.samples.add(counted);
        self.other_event.add(other);
        self.empty.add(empty);
        self.unannotated.add(read.unannotated + read.missing);
        if self.off_cpu() {
            self.charge();
        }
    }

    /// Charges the intervals closed so far to their stacks, under their state's mark.
    fn charge(&mut self) {
        let mut off = std::mem::take(&mut self.off);
        let off_stacks = std::mem::take(&mut self.off_stacks);
        // Counted once for all (an atomic add each interval went against `Counter::add`).
        let (mut empty, mut intervals, mut open_at_end, mut woken) = (0, 0, 0, 0);
        for iv in off.drain() {
            let Some(k) = iv.stack else {
                // A switch-out without a stack (a SWITCH record with no sample before it).
                empty += 1;
                continue;
            };
            intervals += 1;
            open_at_end += u64::from(iv.open_at_end);
            let frames = off_stacks.get(k.stack);
            let open = if iv.open_at_end { OPEN_AT_END } else { 0 };
            let mut root = [k.root[0], k.root[1], k.root[2], mark_of(iv.state) | open];
            if !(self.options.pid || self.options.tid) {
                root[1] = 0;
            }
            if !self.options.tid {
                root[2] = 0;
            }
            let waker = iv.waker.and_then(|w| self.waker_of(&off_stacks, w));
            woken += u64::from(waker.is_some());
            let fp = self.fingerprint_of(&root, frames, waker);
            self.count((root, fp), frames, waker, iv.duration());
        }
        self.empty.add(empty);
        self.offcpu_intervals.add(intervals);
        self.offcpu_open_at_end.add(open_at_end);
        self.offcpu_woken.add(woken);
        self.off = off;
        self.off_stacks = off_stacks;
    }

    /// The waker's part of an off-wake stack: its root (comm, and pid and tid as the options
    /// show them) and its frames, innermost first.
    fn waker_of<'a>(
        &self,
        stacks: &'a StackTable,
        w: Waker<OffKey>,
    ) -> Option<([u32; 3], &'a [u32])> {
        // Every wakeup sample has a key (its thread), with or without frames.
        let k = w.stack?;
        let (root, frames) = (k.root, stacks.get(k.stack));
        let pid = if self.options.pid || self.options.tid {
            root[1]
        } else {
            0
        };
        let tid = if self.options.tid { root[2] } else { 0 };
        Some(([root[0], pid, tid], frames))
    }

    /// Ends an off-CPU profile: switches still waiting are decided, and threads still off the
    /// cpu are charged up to the last event time.
    pub fn finish(&mut self) {
        if !self.off_cpu() {
            return;
        }
        self.off.finish();
        let (c, sw) = (self.off.counts(), self.off.switches());
        self.offcpu_unusable
            .add(c.unmatched + sw.short_payloads + sw.no_format);
        self.offcpu_exits.add(c.exits);
        self.offcpu_lost_ins.add(c.lost_ins);
        self.charge();
    }

    /// The root of a sample's stack: comm, pid, tid.
    fn root_of(&mut self, stacks: &Stacks, s: &StackSample) -> [u32; 3] {
        [self.comms.id(stacks, s), s.pid, s.tid]
    }

    /// The fingerprint of a key `root, frames root first` (frames given innermost first), and
    /// of the waker's part after them, if any.
    fn fingerprint_of(
        &mut self,
        root: &[u32; ROOT],
        frames: &[u32],
        waker: Option<([u32; 3], &[u32])>,
    ) -> u128 {
        let key = &mut self.key;
        key.clear();
        key.resize(4 * (ROOT + frames.len()), 0);
        let (head, tail) = key.split_at_mut(4 * ROOT);
        for (to, id) in head.chunks_exact_mut(4).zip(root) {
            to.copy_from_slice(&id.to_le_bytes());
        }
        for (to, id) in tail.chunks_exact_mut(4).zip(frames.iter().rev()) {
            to.copy_from_slice(&id.to_le_bytes());
        }
        if let Some((wroot, wframes)) = waker {
            for id in std::iter::once(&WAKER).chain(wframes).chain(&wroot) {
                key.extend_from_slice(&id.to_le_bytes());
            }
        }
        XxHash3_128::oneshot(key)
    }

    /// The key of a sample's stack: its root (comm, and pid and tid when the options show
    /// them) and its fingerprint.
    fn key_of(&mut self, stacks: &Stacks, s: &StackSample) -> ([u32; ROOT], u128) {
        let frames = stacks.frames(s);
        let comm = self.comms.id(stacks, s);
        let pid = if self.options.pid || self.options.tid {
            s.pid
        } else {
            0
        };
        let tid = if self.options.tid { s.tid } else { 0 };
        let root = [comm, pid, tid, 0];
        // The bytes of `root, frames root first`, written in place: what `fingerprint` makes of
        // the same ids, without an iterator chain and a capacity check an id (a tenth of the
        // sink's instructions).
        let key = &mut self.key;
        key.clear();
        key.resize(4 * (root.len() + frames.len()), 0);
        let (head, tail) = key.split_at_mut(4 * root.len());
        for (to, id) in head.chunks_exact_mut(4).zip(root) {
            to.copy_from_slice(&id.to_le_bytes());
        }
        for (to, id) in tail.chunks_exact_mut(4).zip(frames.iter().rev()) {
            to.copy_from_slice(&id.to_le_bytes());
        }
        (root, XxHash3_128::oneshot(key))
    }

    /// Counts a sample with frames in the stack of `key`.
    fn add(&mut self, key: ([u32; ROOT], u128), stacks: &Stacks, s: &StackSample) {
        self.count(key, stacks.frames(s), None, s.period);
    }

    /// Counts one sample of `period` in the stack of `root` and `frames` (whose fingerprint is
    /// `fingerprint`), with the waker's part of an off-wake stack, made at its first sample.
    fn count(
        &mut self,
        (root, fingerprint): ([u32; ROOT], u128),
        frames: &[u32],
        waker: Option<([u32; 3], &[u32])>,
        period: u64,
    ) {
        let stack = self.stacks.entry(fingerprint).or_insert_with(|| {
            let at = self.keys.len() as u32;
            self.keys.extend(root);
            self.keys.extend(frames.iter().rev());
            self.used.insert_all(frames);
            if let Some((wroot, wframes)) = waker {
                self.keys.push(WAKER);
                self.keys.extend(wframes);
                self.keys.extend(wroot);
                self.used.insert_all(wframes);
            }
            Stack {
                at,
                len: self.keys.len() as u32 - at,
                ..Stack::default()
            }
        });
        stack.samples += 1;
        stack.period += period;
    }

    /// The folded stacks, `(stack, count)` sorted by stack, stacks that name the same functions
    /// merged. Names are resolved once per distinct frame, on `pool` if given.
    pub fn folded(&self, pool: Option<&rayon::ThreadPool>) -> Vec<(String, u64)> {
        let Some(namer) = self.sources.namer(pool) else {
            return Vec::new();
        };
        let naming = self.options.naming;
        let names: Vec<Vec<String>> = namer.each_used(&self.used, |f, resolved| {
            // Innermost first; a folded stack goes root first.
            resolved
                .iter()
                .rev()
                .filter(|r| kept(r))
                .map(|r| {
                    let mut s = String::new();
                    frame_name(r, f.query.ip, naming, &mut s);
                    s
                })
                .collect()
        });
        // The collapsers' process names: spaces made underscores.
        let comms: Vec<String> = self
            .comms
            .names()
            .iter()
            .map(|c| c.replace(' ', "_"))
            .collect();
        // Stacks that name the same functions (two addresses in one function) are one line:
        // they are grouped by their sequence of name ids, so a line is built once per group, not
        // once per stack, and no string is hashed or compared but in the final sort.
        let mut name_ids: HashMap<&str, u32> = HashMap::default();
        let mut frame_names: Vec<(u32, u32)> = Vec::with_capacity(names.len());
        let mut arena: Vec<u32> = Vec::new();
        for list in &names {
            let at = arena.len() as u32;
            for n in list {
                let next = name_ids.len() as u32;
                arena.push(*name_ids.entry(n.as_str()).or_insert(next));
            }
            frame_names.push((at, arena.len() as u32));
        }
        let stacks: Vec<&Stack> = self.stacks.values().collect();
        let weight = self.options.weight;
        // (fingerprint of the root and the names, stack, count) of every stack that names a
        // frame, computed on the pool; sorted by fingerprint, a run of equal ones is a group.
        let keyed = |seq: &mut Vec<u8>, (i, w): (usize, &&Stack)| -> Option<(u128, u32, u64)> {
            let key = &self.keys[w.at as usize..(w.at + w.len) as usize];
            // The root is [comm, pid, tid] as the options kept them (zeros when not shown), and
            // the off-CPU mark.
            let (root, frames) = key.split_at(ROOT);
            let (frames, waker) = split_waker(frames);
            if frames.iter().all(|&f| names[f as usize].is_empty()) {
                return None; // every frame dropped: the collapsers count no stack
            }
            let name_ids = |f: &u32| {
                let (a, b) = frame_names[*f as usize];
                &arena[a as usize..b as usize]
            };
            let named = frames.iter().flat_map(name_ids).copied();
            // The waker's part: `--`, its names innermost first, its root.
            let woken = waker.into_iter().flat_map(|(wframes, wroot)| {
                std::iter::once(WAKER)
                    .chain(
                        wframes
                            .iter()
                            .flat_map(|f| name_ids(f).iter().rev())
                            .copied(),
                    )
                    .chain(wroot.iter().copied())
            });
            let count = match weight {
                WeightBy::Samples => w.samples,
                _ => w.period,
            };
            if count == 0 {
                return None; // an off-CPU stack whose interval a snapshot does not hold yet
            }
            let ids = root.iter().copied().chain(named).chain(woken);
            Some((fingerprint(seq, ids), i as u32, count))
        };
        let mut keys: Vec<(u128, u32, u64)> = match pool {
            Some(p) => p.install(|| {
                let mut v: Vec<_> = stacks
                    .par_iter()
                    .enumerate()
                    .map_init(Vec::new, |seq, s| keyed(seq, s))
                    .flatten_iter()
                    .collect();
                v.par_sort_unstable_by_key(|k| k.0);
                v
            }),
            None => {
                let mut seq = Vec::new();
                let mut v: Vec<_> = stacks
                    .iter()
                    .enumerate()
                    .filter_map(|s| keyed(&mut seq, s))
                    .collect();
                v.sort_unstable_by_key(|k| k.0);
                v
            }
        };
        keys.dedup_by(|next, kept| {
            let same = next.0 == kept.0;
            if same {
                kept.2 += next.2;
            }
            same
        });
        let line_of = |&(_, i, count): &(u128, u32, u64)| -> (String, u64) {
            let w = stacks[i as usize];
            let key = &self.keys[w.at as usize..(w.at + w.len) as usize];
            let (frames, waker) = split_waker(&key[ROOT..]);
            let named = || frames.iter().flat_map(|&f| &names[f as usize]);
            // One allocation a line: its length is known before it is built.
            let len =
                comms[key[0] as usize].len() + 24 + named().map(|n| n.len() + 1).sum::<usize>();
            let mut line = String::with_capacity(len);
            let root = |line: &mut String, r: &[u32]| {
                line.push_str(comms.get(r[0] as usize).map_or("[unknown]", |c| c.as_str()));
                if self.options.tid {
                    line.push_str(&format!("-{}/{}", r[1], r[2]));
                } else if self.options.pid {
                    line.push_str(&format!("-{}", r[1]));
                }
            };
            root(&mut line, key);
            if key[3] != 0 {
                line.push(';');
                line.push_str(&mark_name(key[3]));
            }
            for n in named() {
                line.push(';');
                line.push_str(n);
            }
            if let Some((wframes, wroot)) = waker {
                // The waker's stack reversed, innermost first, ending at its comm.
                line.push_str(";--");
                for n in wframes.iter().flat_map(|&f| names[f as usize].iter().rev()) {
                    line.push(';');
                    line.push_str(n);
                }
                line.push(';');
                root(&mut line, wroot);
            }
            (line, count)
        };
        let mut lines: Vec<(String, u64)> = match pool {
            Some(p) => p.install(|| {
                let mut v: Vec<_> = keys.par_iter().map(line_of).collect();
                v.par_sort_unstable();
                v
            }),
            None => {
                let mut v: Vec<_> = keys.iter().map(line_of).collect();
                v.sort_unstable();
                v
            }
        };
        // Lines equal by another split into names (a `;` in a comm) are merged too.
        lines.dedup_by(|next, kept| {
            let same = next.0 == kept.0;
            if same {
                kept.1 += next.1;
            }
            same
        });
        lines
    }
}

impl SampleSink for Aggregate {
    type Key = OffKey;
    type Error = std::convert::Infallible;

    fn sources(&mut self) -> &mut NameSources {
        &mut self.sources
    }

    /// An on-CPU profile's sample: its key made, to be counted at the batch's end. With the
    /// off-CPU model: a switch-out's or a wakeup's sample is kept by the model (its key), and a
    /// wall-clock profile counts the clock samples' stacks.
    fn sample(
        &mut self,
        at: At<'_>,
        switch: Option<&Switch>,
    ) -> Result<Option<OffKey>, Self::Error> {
        let (s, frames) = (at.sample, at.frames());
        let Some(sw) = switch else {
            if !self.event.admits(s.attr) {
                self.tally[1] += 1;
            } else if frames.is_empty() {
                self.tally[2] += 1;
            } else {
                let key = self.key_of(at.stacks, s);
                self.found.push((key, at.index as u32));
                self.tally[0] += 1;
            }
            return Ok(None);
        };
        if sw.stack || sw.stack_of.is_some() || sw.wake.is_some() {
            // A waker is named by its thread even without frames.
            return Ok((!frames.is_empty() || sw.wake.is_some()).then(|| OffKey {
                root: self.root_of(at.stacks, s),
                stack: self.off_stacks.id(frames),
            }));
        }
        // A switch-in alone (the idle task's switch to the thread) or nothing.
        if self.options.weight == WeightBy::Wall && is_clock(at.info, s.attr) {
            if frames.is_empty() {
                self.tally[2] += 1;
            } else {
                let key = self.key_of(at.stacks, s);
                self.add(key, at.stacks, s);
                self.tally[0] += 1;
            }
        }
        Ok(None)
    }
}

/// The waker's part of an off-wake stack's key: its frames innermost first, and its root (comm,
/// pid, tid).
type WakerPart<'a> = (&'a [u32], &'a [u32]);

/// A key's frames (after its root): the blocked frames, root first, and the waker's part of an
/// off-wake stack, if any.
fn split_waker(frames: &[u32]) -> (&[u32], Option<WakerPart<'_>>) {
    match frames.iter().position(|&f| f == WAKER) {
        Some(at) => {
            let (wframes, wroot) = frames[at + 1..].split_at(frames.len() - at - 1 - 3);
            (&frames[..at], Some((wframes, wroot)))
        }
        None => (frames, None),
    }
}

/// The 128-bit XXH3 fingerprint of a sequence of ids, built in `buf`.
fn fingerprint(buf: &mut Vec<u8>, ids: impl Iterator<Item = u32>) -> u128 {
    buf.clear();
    for id in ids {
        buf.extend_from_slice(&id.to_le_bytes());
    }
    XxHash3_128::oneshot(buf)
}

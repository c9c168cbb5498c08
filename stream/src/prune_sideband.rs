//! `prune-sideband`: removes the side-band records (MMAP, MMAP2, COMM, FORK, EXIT, NAMESPACES) of
//! processes that no sample reaching this stage belongs to, so a filtered stream also sheds the
//! maps and names it no longer needs. Put it after the filters (`--comm gzip --prune-sideband`).
//!
//! Whether a process will have a sample is only known later, so its side-band is **held** (copied
//! out of the batch) until its first sample arrives; then the held records of that process and of
//! its ancestors (a forked child starts with its parent's maps) go out, in their original order,
//! just before that sample. perf sorts records by time within a round, so it still handles them
//! before the sample (it may count them as "out of order" when they come from an earlier round).
//! Records of the kernel (pid −1) and the idle task (pid 0), and records without a pid, always pass.
//!
//! Held records of a process are discarded once it and every child it forked have exited and two
//! more FINISHED_ROUNDs have passed (a sample may trail its EXIT by a round), and at the end of the
//! stream. If samples carry no pid (`PERF_SAMPLE_TID` unset), nothing is pruned.
//!
//! **Order**: input order, except that held records move later (before the first sample that needs
//! them). **Buffering**: held side-band, at most [`MAX_HELD_BYTES`]; past that the oldest held
//! records are released (kept) to bound memory. **EOF**: held records are dropped.

use std::collections::{HashMap, HashSet, VecDeque};

use perfpipe_core::{Batch, Counter, Editor, Flow, Out, Stage, StageError};

use crate::format::{Record, RecordType, StreamInfo};
use perfpipe_core::spec::{Flag, StageSpec};

/// Most bytes of side-band held at once.
pub const MAX_HELD_BYTES: usize = 256 << 20;

/// How `prune-sideband` appears on the command line: `--prune-sideband` (after the filters).
pub const SPEC: StageSpec = StageSpec {
    name: "prune-sideband",
    help: "remove MMAP/COMM/FORK/EXIT records of processes without samples (after the filters)",
    flags: &[Flag::stage(
        "prune-sideband",
        "remove MMAP/COMM/FORK/EXIT records of processes without samples (after the filters)",
    )],
    options: &[],
    build: |_, _| Ok(Box::new(PruneSidebandConfig::default().build())),
    needs: &["decompress"],
};

/// Configuration of the `prune-sideband` stage (it has no options).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PruneSidebandConfig {}

impl PruneSidebandConfig {
    /// Builds the stage.
    pub fn build(&self) -> PruneSideband {
        PruneSideband {
            needed: HashSet::new(),
            parent: HashMap::new(),
            children: HashMap::new(),
            exited: HashSet::new(),
            retire: Vec::new(),
            rounds: 0,
            held: VecDeque::new(),
            held_bytes: 0,
            disabled: false,
            pruned: Counter::new(),
            released: Counter::new(),
        }
    }
}

/// A side-band record waiting for its process's first sample.
#[derive(Debug)]
struct Held {
    pid: u32,
    kind: u32,
    tag: u32,
    bytes: Vec<u8>,
}

/// The running `prune-sideband` stage.
#[derive(Debug)]
pub struct PruneSideband {
    /// Processes with a sample: their side-band passes.
    needed: HashSet<u32>,
    /// pid → parent pid, from FORK records that create a process.
    parent: HashMap<u32, u32>,
    /// pid → number of its child processes that have not exited.
    children: HashMap<u32, u32>,
    /// Processes whose main thread exited.
    exited: HashSet<u32>,
    /// (round count at which to drop, pid).
    retire: Vec<(u64, u32)>,
    rounds: u64,
    held: VecDeque<Held>,
    held_bytes: usize,
    /// Samples without a pid were seen: prune nothing.
    disabled: bool,
    pruned: Counter,
    released: Counter,
}

/// The pid a side-band record belongs to, with (for FORK and EXIT) the task fields.
fn owner(rec: &Record<'_>) -> Option<u32> {
    match rec.record_type() {
        RecordType::MMAP | RecordType::MMAP2 => rec.mmap().map(|m| m.pid),
        RecordType::COMM => rec.comm().map(|c| c.pid),
        RecordType::FORK | RecordType::EXIT => rec.task().map(|t| t.pid),
        RecordType::NAMESPACES => rec.endian.u32(rec.bytes, 8),
        _ => None,
    }
}

impl PruneSideband {
    /// Marks `pid` and its ancestors as needed.
    fn need(&mut self, pid: u32) {
        let mut p = pid;
        for _ in 0..4096 {
            if !self.needed.insert(p) {
                return;
            }
            match self.parent.get(&p) {
                Some(&pp) if pp != p => p = pp,
                _ => return,
            }
        }
    }

    /// Moves the held records of needed processes into the batch, in order, before the current
    /// record.
    fn release_needed(&mut self, ed: &mut Editor<'_>) {
        let mut rest = VecDeque::with_capacity(self.held.len());
        let mut n = 0;
        for h in self.held.drain(..) {
            if self.needed.contains(&h.pid) {
                self.held_bytes -= h.bytes.len();
                ed.insert_before(&h.bytes, h.kind, h.tag);
                n += 1;
            } else {
                rest.push_back(h);
            }
        }
        self.held = rest;
        self.released.add(n);
    }

    /// Notes FORK/EXIT for retirement; schedules processes that are gone with all their children.
    fn track(&mut self, rec: &Record<'_>) {
        let Some(t) = rec.task() else { return };
        if rec.record_type() == RecordType::FORK {
            if t.pid != t.ppid {
                self.parent.insert(t.pid, t.ppid);
                *self.children.entry(t.ppid).or_default() += 1;
            }
        } else if t.pid == t.tid {
            self.exited.insert(t.pid);
            self.maybe_retire(t.pid);
        }
    }

    fn maybe_retire(&mut self, pid: u32) {
        if self.exited.contains(&pid) && self.children.get(&pid).copied().unwrap_or(0) == 0 {
            self.retire.push((self.rounds + 2, pid));
        }
    }

    /// FINISHED_ROUND: drops the held records of processes due for retirement.
    fn round(&mut self) {
        self.rounds += 1;
        let due: Vec<u32> = self
            .retire
            .iter()
            .filter(|(r, _)| *r <= self.rounds)
            .map(|(_, p)| *p)
            .collect();
        if due.is_empty() {
            return;
        }
        self.retire.retain(|(r, _)| *r > self.rounds);
        for pid in due {
            self.exited.remove(&pid);
            self.children.remove(&pid);
            if !self.needed.contains(&pid) {
                let before = self.held.len();
                let mut bytes = 0;
                self.held.retain(|h| {
                    let keep = h.pid != pid;
                    if !keep {
                        bytes += h.bytes.len();
                    }
                    keep
                });
                self.held_bytes -= bytes;
                self.pruned.add((before - self.held.len()) as u64);
            }
            if let Some(pp) = self.parent.remove(&pid) {
                if let Some(c) = self.children.get_mut(&pp) {
                    *c = c.saturating_sub(1);
                }
                self.maybe_retire(pp);
            }
        }
    }

    /// Stops pruning: everything held goes out now, before the current record.
    fn disable(&mut self, ed: &mut Editor<'_>) {
        self.disabled = true;
        let n = self.held.len() as u64;
        for h in self.held.drain(..) {
            ed.insert_before(&h.bytes, h.kind, h.tag);
        }
        self.held_bytes = 0;
        self.released.add(n);
    }
}

impl Stage for PruneSideband {
    fn process(&mut self, mut batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        let Some(info) = StreamInfo::shared(&batch) else {
            out.push(batch);
            return Ok(Flow::Continue);
        };
        if self.disabled {
            out.push(batch);
            return Ok(Flow::Continue);
        }
        let mut ed = batch.edit();
        while let Some(span) = ed.next_record() {
            let rec = info.record(ed.batch(), &span);
            match RecordType(span.kind) {
                RecordType::SAMPLE => match rec.sample().and_then(|s| s.pid()) {
                    Some(pid) if !self.needed.contains(&pid) => {
                        self.need(pid);
                        self.release_needed(&mut ed);
                    }
                    Some(_) => {}
                    None => self.disable(&mut ed),
                },
                RecordType::FINISHED_ROUND => self.round(),
                _ if self.disabled => {}
                _ => {
                    let Some(pid) = owner(&rec) else { continue };
                    self.track(&rec);
                    if pid == u32::MAX || pid == 0 || self.needed.contains(&pid) {
                        continue;
                    }
                    let bytes = rec.bytes.to_vec();
                    ed.remove();
                    self.held_bytes += bytes.len();
                    self.held.push_back(Held {
                        pid,
                        kind: span.kind,
                        tag: span.tag,
                        bytes,
                    });
                    while self.held_bytes > MAX_HELD_BYTES {
                        let Some(h) = self.held.pop_front() else {
                            break;
                        };
                        self.held_bytes -= h.bytes.len();
                        ed.insert(&h.bytes, h.kind, h.tag);
                        self.released.add(1);
                    }
                }
            }
        }
        ed.finish();
        out.push_or_recycle(batch);
        Ok(Flow::Continue)
    }

    fn flush(&mut self, _out: &mut Out<'_>) -> Result<(), StageError> {
        self.pruned.add(self.held.len() as u64);
        self.held.clear();
        self.held_bytes = 0;
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![
            ("sideband_pruned", self.pruned.clone()),
            ("sideband_held_then_kept", self.released.clone()),
        ]
    }
}

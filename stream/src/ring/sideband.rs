//! [`Sideband`]: the side-band state a window of samples needs — for every live process its
//! threads' COMM records and the MMAP/MMAP2 records of its current address space, plus the kernel
//! maps — kept as the original record bytes so that a dump can replay them.
//!
//! The model follows perf's (`tools/perf/util/machine.c`, `thread.c`), as [`crate::model::machine`] does:
//! - MMAP/MMAP2 add a map to their pid's process (kernel maps, pid −1 or kernel cpumode, go to one
//!   kernel list); maps that the new one covers entirely are forgotten, partial overlaps are kept
//!   and replayed in order, so perf resolves them as it did.
//! - FORK of a new process copies the parent's maps and the parent thread's COMM, rewritten to the
//!   child's pid and tid (body and `sample_id` trailer), so the child replays without its parent.
//!   A FORK of a thread adds a thread named like its creator.
//! - COMM names a thread (creating the process lazily, as perf does for streams that attach
//!   mid-run). COMM_EXEC keeps the maps: perf keeps the old image's maps after an exec (samples
//!   taken inside `execve()` after its COMM resolve to the old libc), and the new image's MMAPs
//!   replace what they cover.
//! - EXIT of a thread forgets it; of the main thread, moves the process to a small retired list
//!   ([`RETIRED_MAX`]), still replayed when a window references it (perf keeps exited threads for
//!   the samples that arrive late in the same round).
//!
//! **Bounds**: processes are bounded by live processes plus [`RETIRED_MAX`]; maps per process by
//! [`MAPS_MAX`] (the oldest are dropped past it, like an address space that never unmaps).

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::format::{misc, Record, RecordType};

/// Exited processes kept for windows that still reference them.
pub const RETIRED_MAX: usize = 64;

/// Most maps kept per process; past it the oldest are dropped.
pub const MAPS_MAX: usize = 16 << 10;

/// Per-record bookkeeping counted in [`Sideband::bytes`] besides the record bytes.
const OVERHEAD: usize = 48;

/// `pid` of perf's kernel maps.
const KERNEL_PID: u32 = u32::MAX;

#[derive(Clone, Debug)]
struct MapRec {
    start: u64,
    end: u64,
    bytes: Vec<u8>,
}

#[derive(Clone, Debug, Default)]
struct Process {
    /// tid → its latest COMM record.
    threads: BTreeMap<u32, Vec<u8>>,
    maps: Vec<MapRec>,
}

impl Process {
    fn bytes(&self) -> usize {
        self.threads
            .values()
            .map(|c| c.len() + OVERHEAD)
            .sum::<usize>()
            + self
                .maps
                .iter()
                .map(|m| m.bytes.len() + OVERHEAD)
                .sum::<usize>()
    }
}

/// The side-band state: see the module docs.
#[derive(Debug, Default)]
pub struct Sideband {
    processes: HashMap<u32, Process>,
    retired: VecDeque<(u32, Process)>,
    kernel: Vec<MapRec>,
    bytes: usize,
}

/// Whether a record type is side-band that [`Sideband::apply`] keeps.
pub fn is_sideband(t: RecordType) -> bool {
    matches!(
        t,
        RecordType::MMAP
            | RecordType::MMAP2
            | RecordType::COMM
            | RecordType::FORK
            | RecordType::EXIT
    )
}

/// `bytes` with the `pid`/`tid` pair at `at` (body) and in the `sample_id` trailer replaced.
fn with_ids(rec: &Record<'_>, at: usize, pid: u32, tid: u32) -> Vec<u8> {
    let mut b = rec.bytes.to_vec();
    let e = rec.endian;
    let mut put = |o: usize| {
        if let Some(dst) = b.get_mut(o..o + 8) {
            dst[..4].copy_from_slice(&e.put_u32(pid));
            dst[4..].copy_from_slice(&e.put_u32(tid));
        }
    };
    put(at);
    let sized = rec.sized().len();
    if let Some(t) = rec.attr.and_then(|a| a.layout.trailer) {
        if let Some(o) = t
            .tid
            .and_then(|o| sized.checked_sub(usize::from(o)))
            .filter(|&o| o >= at + 8)
        {
            put(o);
        }
    }
    b
}

fn insert_map(maps: &mut Vec<MapRec>, map: MapRec, bytes: &mut usize) {
    maps.retain(|m| {
        let covered = m.start >= map.start && m.end <= map.end;
        if covered {
            *bytes -= m.bytes.len() + OVERHEAD;
        }
        !covered
    });
    *bytes += map.bytes.len() + OVERHEAD;
    maps.push(map);
    if maps.len() > MAPS_MAX {
        let old = maps.remove(0);
        *bytes -= old.bytes.len() + OVERHEAD;
    }
}

impl Sideband {
    /// An empty state.
    pub fn new() -> Sideband {
        Sideband::default()
    }

    /// Bytes held: record bytes plus bookkeeping.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Number of live processes.
    pub fn processes(&self) -> usize {
        self.processes.len()
    }

    /// Applies a side-band record (see `is_sideband`); other records and malformed ones are
    /// ignored. Returns whether the record changed the state.
    pub fn apply(&mut self, rec: &Record<'_>) -> bool {
        match rec.record_type() {
            RecordType::MMAP | RecordType::MMAP2 => self.mmap(rec),
            RecordType::COMM => self.comm(rec),
            RecordType::FORK => self.fork(rec),
            RecordType::EXIT => self.exit(rec),
            _ => false,
        }
    }

    fn process(&mut self, pid: u32) -> &mut Process {
        if !self.processes.contains_key(&pid) {
            self.retired.retain(|(p, _)| *p != pid);
        }
        self.processes.entry(pid).or_default()
    }

    fn mmap(&mut self, rec: &Record<'_>) -> bool {
        let Some(m) = rec.mmap() else { return false };
        let map = MapRec {
            start: m.addr,
            end: m.addr.saturating_add(m.len),
            bytes: rec.bytes.to_vec(),
        };
        let kernel =
            m.pid == KERNEL_PID || m.cpumode == misc::KERNEL || m.cpumode == misc::GUEST_KERNEL;
        let mut bytes = self.bytes;
        if kernel {
            insert_map(&mut self.kernel, map, &mut bytes);
        } else {
            insert_map(&mut self.process(m.pid).maps, map, &mut bytes);
        }
        self.bytes = bytes;
        true
    }

    fn comm(&mut self, rec: &Record<'_>) -> bool {
        let Some(c) = rec.comm() else { return false };
        let mut bytes = self.bytes;
        let p = self.process(c.pid);
        if let Some(old) = p.threads.insert(c.tid, rec.bytes.to_vec()) {
            bytes -= old.len() + OVERHEAD;
        }
        self.bytes = bytes + rec.bytes.len() + OVERHEAD;
        true
    }

    fn fork(&mut self, rec: &Record<'_>) -> bool {
        let Some(t) = rec.task() else { return false };
        // The COMM of the creating thread, rewritten to name the new one.
        let parent = self.processes.get(&t.ppid).or_else(|| {
            self.retired
                .iter()
                .find(|(p, _)| *p == t.ppid)
                .map(|(_, p)| p)
        });
        let comm = parent
            .and_then(|p| p.threads.get(&t.ptid).or_else(|| p.threads.get(&t.ppid)))
            .map(|c| {
                let view = Record::new(c, rec.endian, rec.attr);
                with_ids(&view, 8, t.pid, t.tid)
            });
        if t.pid != t.ppid {
            // A new process: a copy of the parent's address space, under the child's ids.
            let maps: Vec<MapRec> = parent
                .map(|p| {
                    p.maps
                        .iter()
                        .map(|m| MapRec {
                            start: m.start,
                            end: m.end,
                            bytes: with_ids(
                                &Record::new(&m.bytes, rec.endian, rec.attr),
                                8,
                                t.pid,
                                t.tid,
                            ),
                        })
                        .collect()
                })
                .unwrap_or_default();
            if let Some(old) = self.processes.remove(&t.pid) {
                self.bytes -= old.bytes();
            }
            let mut child = Process {
                threads: BTreeMap::new(),
                maps,
            };
            if let Some(c) = comm {
                child.threads.insert(t.tid, c);
            }
            self.bytes += child.bytes();
            self.retired.retain(|(p, _)| *p != t.pid);
            self.processes.insert(t.pid, child);
        } else if let Some(c) = comm {
            let len = c.len();
            if let Some(old) = self.process(t.pid).threads.insert(t.tid, c) {
                self.bytes -= old.len() + OVERHEAD;
            }
            self.bytes += len + OVERHEAD;
        } else {
            self.process(t.pid);
        }
        true
    }

    fn exit(&mut self, rec: &Record<'_>) -> bool {
        let Some(t) = rec.task() else { return false };
        if t.pid != t.tid {
            if let Some(p) = self.processes.get_mut(&t.pid) {
                if let Some(old) = p.threads.remove(&t.tid) {
                    self.bytes -= old.len() + OVERHEAD;
                }
            }
            return true;
        }
        let Some(p) = self.processes.remove(&t.pid) else {
            return false;
        };
        self.retired.push_back((t.pid, p));
        if self.retired.len() > RETIRED_MAX {
            let (_, old) = self.retired.pop_front().expect("not empty");
            self.bytes -= old.bytes();
        }
        true
    }

    /// Emits the state for the processes `pids` (in the order given, each once; unknown ones are
    /// skipped), after the kernel maps: per process its main thread's COMM, its other threads'
    /// COMMs, then its maps in the order they were recorded.
    pub fn emit(&self, pids: impl IntoIterator<Item = u32>, out: &mut impl FnMut(&[u8])) {
        for m in &self.kernel {
            out(&m.bytes);
        }
        for pid in pids {
            let p = self.processes.get(&pid).or_else(|| {
                self.retired
                    .iter()
                    .rev()
                    .find(|(r, _)| *r == pid)
                    .map(|(_, p)| p)
            });
            let Some(p) = p else { continue };
            if let Some(c) = p.threads.get(&pid) {
                out(c);
            }
            for (_, c) in p.threads.iter().filter(|(&tid, _)| tid != pid) {
                out(c);
            }
            for m in &p.maps {
                out(&m.bytes);
            }
        }
    }
}

/// Whether a record is an MMAP/MMAP2 of the kernel's address space (pid −1), not a process's.
pub fn is_kernel_map(rec: &Record<'_>) -> bool {
    rec.mmap().is_some_and(|m| {
        m.pid == KERNEL_PID || m.cpumode == misc::KERNEL || m.cpumode == misc::GUEST_KERNEL
    })
}

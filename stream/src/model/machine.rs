//! The address-space model of a recorded machine, as perf's `machine`/`thread`/`maps` model it: which
//! file is mapped where, in which process, at each point of the stream.
//!
//! Feed it the task and map records in stream order ([`Machine::apply`] takes any record and ignores
//! those it does not need), then ask what an address of a sample is ([`Machine::find`]).
//!
//! - **Processes own maps; threads share them.** Maps are kept per process (pid). A thread (tid) only
//!   says which process it belongs to, so every thread of a process sees its maps.
//! - **FORK** with `pid != ppid` creates a process whose maps are a copy of the parent's (copied
//!   lazily: the two share one list until either changes it). A FORK with `pid == ppid` is a new
//!   thread. A FORK of a pid that still exists replaces it (pid reuse), unless that process was
//!   created by its own records before its FORK arrived: records are ordered by time only across
//!   rounds, so a child's COMM/MMAP2s (on the cpu it runs on) can come before the FORK (on the
//!   parent's cpu). Then the FORK is late, not a new process: the child's own maps are kept on top
//!   of the copy of the parent's, which is what perf, sorting by time, builds.
//!   The other way round too: a parent's MMAP that comes after a FORK in the stream but is older
//!   in time (the parent exec'd on one cpu, forked on another, and the forking cpu's buffer was
//!   read first in the round) is given to the children forked after it, for two rounds.
//! - **COMM with `COMM_EXEC`** changes nothing here: perf keeps the old image's maps after an exec
//!   (`____thread__set_comm()` only flushes unwind caches), and the new image's MMAPs replace what
//!   they overlap. Samples taken inside `execve()` after its COMM still resolve to the old libc.
//! - **EXIT** of a process's main thread retires the process, but only after two more
//!   FINISHED_ROUND records: records are ordered between rounds, not within one, so a sample of the
//!   process may still come after its EXIT in the same round or the next. This bounds memory (in a
//!   stream without rounds, at most 1024 exited processes are kept).
//! - Processes first seen mid-stream (recording attached to a running task, lost FORK) are created
//!   empty on their first MMAP or lookup.
//! - **Kernel maps** (MMAP/MMAP2 with pid −1 or cpumode KERNEL: `[kernel.kallsyms]_text`, modules)
//!   form one separate list that every kernel-mode lookup uses.
//! - A new map replaces the parts of older maps it overlaps, as `maps__fixup_overlappings()` does.
//!
//! Files are interned as [`Dso`]s by name and identity (MMAP2's device/inode, or its build id), so the
//! same library mapped by a thousand processes is one [`DsoId`]. The kernel map's
//! `[kernel.kallsyms]_text` is named `[kernel.kallsyms]`, as perf names the kernel dso.
//!
//! The model keeps no build ids or hit marks itself: users index their own tables by [`DsoId`].
//!
//! Every change of a process's maps (or of the kernel's) gives them a new **stamp**, a number
//! never given before ([`Space::stamp`]): what a lookup of (pid, address) found stays true while
//! the stamp is the same, so a caller may cache it by stamp.
//!
//! ```
//! use perfpipe_stream::model::machine::{Machine, MapEvent};
//! use perfpipe_stream::format::misc;
//!
//! let mut m = Machine::new();
//! let libc = m.mmap(&MapEvent { pid: 10, start: 0x7000, len: 0x1000, pgoff: 0,
//!                               name: b"/usr/lib/libc.so.6", identity: Default::default(),
//!                               cpumode: misc::USER });
//! m.fork(11, 10, 11); // a new process, copy of 10
//! m.fork(10, 10, 12); // a thread of 10
//! let pid = m.pid_of(12).unwrap(); // samples carry the pid; threads map to theirs
//! assert_eq!(m.find(pid, misc::USER, 0x7010).map(|map| map.dso), Some(libc));
//! assert_eq!(m.find(11, misc::USER, 0x7010).map(|map| map.dso), Some(libc));
//! assert_eq!(m.dso(libc).name, b"/usr/lib/libc.so.6");
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use crate::format::{misc, FileId, Record, RecordType};
use crate::model::IdMap;

/// The index of an interned [`Dso`] in its [`Machine`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DsoId(pub u32);

/// How a mapped file is identified beyond its name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Identity {
    /// No identity (MMAP records, synthesized maps).
    #[default]
    None,
    /// MMAP2's device and inode.
    Inode {
        /// `maj`
        maj: u32,
        /// `min`
        min: u32,
        /// `ino`
        ino: u64,
        /// `ino_generation`
        ino_generation: u64,
    },
    /// MMAP2 in build-id form (`PERF_RECORD_MISC_MMAP_BUILD_ID`): the build id itself.
    BuildId(Vec<u8>),
}

impl Identity {
    /// The identity of an MMAP/MMAP2's [`FileId`].
    pub fn of(id: &FileId<'_>) -> Identity {
        match *id {
            FileId::None => Identity::None,
            FileId::Inode {
                maj,
                min,
                ino,
                ino_generation,
            } => Identity::Inode {
                maj,
                min,
                ino,
                ino_generation,
            },
            FileId::BuildId(b) => Identity::BuildId(b.to_vec()),
        }
    }
}

/// A mapped object ("dynamic shared object" in perf's words, though it may be any file or pseudo
/// file): its name as the record gave it, its identity, and whether it is kernel code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dso {
    /// The file name (`[kernel.kallsyms]` for the kernel map, `[vdso]`, `//anon`, a path, …).
    pub name: Vec<u8>,
    /// Identity from the MMAP2, if any.
    pub identity: Identity,
    /// Mapped by a kernel map (the kernel image or a module).
    pub kernel: bool,
}

/// One mapping: `[start, end)` of an address space showing `dso` from file offset `pgoff`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Map {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// The mapped object.
    pub dso: DsoId,
}

/// The fields of an MMAP/MMAP2 that the model uses.
#[derive(Clone, Debug, Default)]
pub struct MapEvent<'a> {
    /// `pid` (−1 as u32 for kernel maps).
    pub pid: u32,
    /// `addr`
    pub start: u64,
    /// `len`
    pub len: u64,
    /// `pgoff`
    pub pgoff: u64,
    /// `filename`
    pub name: &'a [u8],
    /// MMAP2 identity.
    pub identity: Identity,
    /// cpumode of the record's misc.
    pub cpumode: u16,
}

/// Exited processes kept for late samples before the oldest is dropped regardless of rounds.
const MAX_RETIRING: usize = 1024;

/// Most forks remembered for [`Machine::inherit_late`] in a stream without rounds.
const MAX_RECENT_FORKS: usize = 16384;

/// The pid of kernel maps, −1.
pub const KERNEL_PID: u32 = u32::MAX;

/// A sorted list of non-overlapping maps, and the stamp of its last change.
#[derive(Clone, Debug, Default)]
struct Maps {
    list: Vec<Map>,
    stamp: u64,
}

impl Maps {
    /// Whether a map covers any of `start..end`.
    fn overlaps(&self, start: u64, end: u64) -> bool {
        let i = self.list.partition_point(|m| m.start < end);
        i.checked_sub(1)
            .and_then(|i| self.list.get(i))
            .is_some_and(|m| m.end > start)
    }

    fn find(&self, addr: u64) -> Option<&Map> {
        let i = self.list.partition_point(|m| m.start <= addr);
        let m = self.list.get(i.checked_sub(1)?)?;
        (addr < m.end).then_some(m)
    }

    /// Inserts `new`, trimming or splitting the maps it overlaps, and takes `stamp`.
    fn insert(&mut self, new: Map, stamp: u64) {
        self.stamp = stamp;
        if new.end <= new.start {
            return;
        }
        let v = &mut self.list;
        // First map that may overlap: the last one starting at or before new.start, else the next.
        let mut i = v
            .partition_point(|m| m.start <= new.start)
            .saturating_sub(1);
        let mut keep = Vec::new();
        let from = loop {
            match v.get(i) {
                Some(m) if m.end <= new.start => i += 1,
                _ => break i,
            }
        };
        let mut to = from;
        while let Some(m) = v.get(to) {
            if m.start >= new.end {
                break;
            }
            if m.start < new.start {
                keep.push(Map {
                    end: new.start,
                    ..*m
                });
            }
            if m.end > new.end {
                keep.push(Map {
                    start: new.end,
                    pgoff: m.pgoff.wrapping_add(new.end - m.start),
                    ..*m
                });
            }
            to += 1;
        }
        keep.push(new);
        keep.sort_by_key(|m| m.start);
        v.splice(from..to, keep);
    }
}

/// The address spaces of one process as a sample sees them: [`Machine::space`].
#[derive(Clone, Copy, Debug)]
pub struct Space<'a> {
    user: Option<&'a Maps>,
    kernel: &'a Maps,
}

impl<'a> Space<'a> {
    /// The stamp of the maps a lookup in `cpumode` searches: equal stamps, equal answers (for
    /// one pid). 0 for none (a process not seen, a mode without maps).
    #[inline]
    pub fn stamp(&self, cpumode: u16) -> u64 {
        match cpumode {
            misc::KERNEL | misc::GUEST_KERNEL => self.kernel.stamp,
            misc::USER => self.user.map_or(0, |m| m.stamp),
            _ => 0,
        }
    }

    /// The map holding `addr` in `cpumode`: kernel modes look in the kernel maps, user mode in
    /// the process's. Other modes (hypervisor, guest user, unknown) find nothing, since this
    /// models one host.
    #[inline]
    pub fn find(&self, cpumode: u16, addr: u64) -> Option<&'a Map> {
        match cpumode {
            misc::KERNEL | misc::GUEST_KERNEL => self.kernel.find(addr),
            misc::USER => self.user?.find(addr),
            _ => None,
        }
    }
}

/// The address spaces of one machine (the host); see the module doc.
///
/// **Memory**: one entry per live process and thread, processes retired two rounds after their exit,
/// and one [`Dso`] per distinct mapped file.
#[derive(Debug, Default)]
pub struct Machine {
    dsos: Vec<Dso>,
    dso_index: HashMap<(Vec<u8>, Identity), DsoId>,
    /// pid → maps, shared copy-on-write after a fork.
    processes: IdMap<u32, Arc<Maps>>,
    /// tid → pid.
    threads: IdMap<u32, u32>,
    kernel: Maps,
    /// Processes created by their own records (an MMAP) before any FORK of them arrived.
    unforked: IdMap<u32, ()>,
    /// Processes that exited, with the round count at which to drop them.
    retiring: Vec<(u32, u64)>,
    /// The forks of the last two rounds, by parent: (child, time of the fork, round to forget it).
    recent_forks: IdMap<u32, Vec<(u32, u64, u64)>>,
    recent_fork_count: usize,
    rounds: u64,
    /// The last stamp given to changed maps.
    stamps: u64,
}

impl Machine {
    /// An empty machine.
    pub fn new() -> Machine {
        Machine::default()
    }

    /// Applies a record: MMAP, MMAP2, FORK, COMM, EXIT and FINISHED_ROUND change the model; other
    /// records are ignored. Returns the dso an MMAP/MMAP2 introduced or mapped again.
    pub fn apply(&mut self, rec: &Record<'_>) -> Option<DsoId> {
        match rec.record_type() {
            RecordType::MMAP | RecordType::MMAP2 => {
                let m = rec.mmap()?;
                let ev = MapEvent {
                    pid: m.pid,
                    start: m.addr,
                    len: m.len,
                    pgoff: m.pgoff,
                    name: m.filename,
                    identity: Identity::of(&m.file_id),
                    cpumode: m.cpumode,
                };
                let dso = self.mmap(&ev);
                if let Some(time) = rec.sample_id().and_then(|id| id.time) {
                    self.inherit_late(&ev, dso, time);
                }
                Some(dso)
            }
            RecordType::FORK => {
                let t = rec.task()?;
                self.fork(t.pid, t.ppid, t.tid);
                if t.pid != t.ppid && t.pid == t.tid {
                    self.note_fork(t.pid, t.ppid, t.time);
                }
                None
            }
            RecordType::EXIT => {
                let t = rec.task()?;
                self.exit(t.pid, t.tid);
                None
            }
            RecordType::COMM => {
                let c = rec.comm()?;
                self.threads.entry(c.tid).or_insert(c.pid);
                None
            }
            RecordType::FINISHED_ROUND => {
                self.finished_round();
                None
            }
            _ => None,
        }
    }

    /// Interns a dso by name and identity.
    pub fn intern(&mut self, name: &[u8], identity: Identity, kernel: bool) -> DsoId {
        let name = if kernel && name.starts_with(b"[kernel.kallsyms]") {
            &b"[kernel.kallsyms]"[..]
        } else {
            name
        };
        let key = (name.to_vec(), identity);
        if let Some(&id) = self.dso_index.get(&key) {
            return id;
        }
        let id = DsoId(u32::try_from(self.dsos.len()).unwrap_or(u32::MAX));
        self.dsos.push(Dso {
            name: key.0.clone(),
            identity: key.1.clone(),
            kernel,
        });
        self.dso_index.insert(key, id);
        id
    }

    fn next_stamp(&mut self) -> u64 {
        self.stamps += 1;
        self.stamps
    }

    /// Adds a map (MMAP/MMAP2) and returns its dso.
    pub fn mmap(&mut self, ev: &MapEvent<'_>) -> DsoId {
        let kernel =
            ev.pid == KERNEL_PID || ev.cpumode == misc::KERNEL || ev.cpumode == misc::GUEST_KERNEL;
        let dso = self.intern(ev.name, ev.identity.clone(), kernel);
        let map = Map {
            start: ev.start,
            end: ev.start.saturating_add(ev.len),
            pgoff: ev.pgoff,
            dso,
        };
        let stamp = self.next_stamp();
        if kernel {
            self.kernel.insert(map, stamp);
        } else {
            self.threads.entry(ev.pid).or_insert(ev.pid);
            let maps = self.processes.entry(ev.pid).or_insert_with(|| {
                self.unforked.insert(ev.pid, ());
                Arc::default()
            });
            Arc::make_mut(maps).insert(map, stamp);
        }
        dso
    }

    /// FORK: `tid` of process `pid` was created by process `ppid`.
    pub fn fork(&mut self, pid: u32, ppid: u32, tid: u32) {
        if pid != ppid && pid == tid {
            // A new process: a copy of the parent's maps (shared until either side changes).
            let mut maps = self.processes.get(&ppid).cloned().unwrap_or_default();
            let exited = self.retiring.iter().any(|&(p, _)| p == pid);
            if self.unforked.remove(&pid).is_some() && !exited {
                // A late FORK (see the module doc): the child's maps came after the fork in
                // time, so they go on top of what it inherited.
                let stamp = self.next_stamp();
                if let Some(own) = self.processes.get(&pid) {
                    let merged = Arc::make_mut(&mut maps);
                    for m in &own.list {
                        merged.insert(*m, stamp);
                    }
                }
            }
            self.processes.insert(pid, maps);
            self.retiring.retain(|&(p, _)| p != pid);
        } else {
            // A thread: its process exists from now on, forked or not (yet).
            self.processes.entry(pid).or_insert_with(|| {
                self.unforked.insert(pid, ());
                Arc::default()
            });
        }
        self.threads.insert(tid, pid);
    }

    /// Remembers a fork for two rounds, for [`Machine::inherit_late`].
    fn note_fork(&mut self, child: u32, parent: u32, time: u64) {
        if self.recent_fork_count >= MAX_RECENT_FORKS {
            // A stream without rounds: forget them all rather than grow without bound.
            self.recent_forks.clear();
            self.recent_fork_count = 0;
        }
        self.recent_forks
            .entry(parent)
            .or_default()
            .push((child, time, self.rounds + 2));
        self.recent_fork_count += 1;
    }

    /// A map of `ev.pid` that is older than a recent fork of it, though later in the stream
    /// (records are ordered by time only across rounds: the parent's exec MMAPs on one cpu can
    /// come after its FORKs on another), belongs to the children forked after it too, and to
    /// their children, as perf, sorting by time, copies it. Where a child has a map of its own
    /// there (newer than the fork), the child's stays.
    fn inherit_late(&mut self, ev: &MapEvent<'_>, dso: DsoId, time: u64) {
        if self.recent_forks.is_empty() || ev.pid == KERNEL_PID || ev.cpumode != misc::USER {
            return;
        }
        let map = Map {
            start: ev.start,
            end: ev.start.saturating_add(ev.len),
            pgoff: ev.pgoff,
            dso,
        };
        let mut work = vec![ev.pid];
        while let Some(parent) = work.pop() {
            let Some(children) = self.recent_forks.get(&parent) else {
                continue;
            };
            for &(child, forked, _) in children {
                if time >= forked {
                    continue;
                }
                if let Some(maps) = self.processes.get_mut(&child) {
                    if !maps.overlaps(map.start, map.end) {
                        self.stamps += 1;
                        Arc::make_mut(maps).insert(map, self.stamps);
                        work.push(child);
                    }
                }
            }
        }
    }

    /// EXIT of thread `tid` of `pid`. The main thread's exit retires the process two rounds later.
    pub fn exit(&mut self, pid: u32, tid: u32) {
        if pid == tid {
            self.retiring.push((pid, self.rounds + 2));
            // A stream without FINISHED_ROUND (a single round): retire the oldest exits early
            // rather than grow without bound.
            if self.retiring.len() > MAX_RETIRING {
                let (old, _) = self.retiring.remove(0);
                self.processes.remove(&old);
                self.unforked.remove(&old);
                self.threads.retain(|_, p| *p != old);
            }
        } else {
            self.threads.remove(&tid);
        }
    }

    /// FINISHED_ROUND: drops the processes whose retirement is due.
    pub fn finished_round(&mut self) {
        self.rounds += 1;
        let now = self.rounds;
        if self.recent_fork_count > 0 {
            let mut count = 0;
            self.recent_forks.retain(|_, children| {
                children.retain(|&(_, _, due)| due > now);
                count += children.len();
                !children.is_empty()
            });
            self.recent_fork_count = count;
        }
        let (processes, threads, unforked) =
            (&mut self.processes, &mut self.threads, &mut self.unforked);
        self.retiring.retain(|&(pid, due)| {
            if due > now {
                return true;
            }
            processes.remove(&pid);
            unforked.remove(&pid);
            threads.retain(|_, p| *p != pid);
            false
        });
    }

    /// The map holding `addr` for a sample of process `pid` in `cpumode` ([`Space::find`]).
    #[inline]
    pub fn find(&self, pid: u32, cpumode: u16, addr: u64) -> Option<&Map> {
        self.space(pid).find(cpumode, addr)
    }

    /// What a sample of process `pid` sees: its maps and the kernel's, looked up once for all
    /// the frames of a callchain.
    #[inline]
    pub fn space(&self, pid: u32) -> Space<'_> {
        Space {
            user: self.processes.get(&pid).map(|m| &**m),
            kernel: &self.kernel,
        }
    }

    /// The process a thread belongs to, if the thread is known.
    pub fn pid_of(&self, tid: u32) -> Option<u32> {
        self.threads.get(&tid).copied()
    }

    /// The dso of an id.
    ///
    /// # Panics
    /// If the id comes from another machine and is out of range.
    pub fn dso(&self, id: DsoId) -> &Dso {
        &self.dsos[id.0 as usize]
    }

    /// Number of interned dsos.
    pub fn dso_count(&self) -> usize {
        self.dsos.len()
    }

    /// Number of live processes (retiring ones included).
    pub fn process_count(&self) -> usize {
        self.processes.len()
    }

    /// The maps of a process, sorted by address.
    pub fn maps(&self, pid: u32) -> &[Map] {
        self.processes.get(&pid).map_or(&[], |m| &m.list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Endian;

    fn map(m: &mut Machine, pid: u32, start: u64, len: u64, name: &str) -> DsoId {
        m.mmap(&MapEvent {
            pid,
            start,
            len,
            pgoff: 0,
            name: name.as_bytes(),
            identity: Identity::None,
            cpumode: misc::USER,
        })
    }

    /// A COMM record with `COMM_EXEC` for thread `pid` of `pid`.
    fn comm_exec(pid: u32, name: &str) -> Vec<u8> {
        let c = crate::format::Comm {
            pid,
            tid: pid,
            comm: name.as_bytes(),
            exec: true,
        };
        let mut out = Vec::new();
        let none = crate::format::build::Trailer::None;
        crate::format::build::comm(&mut out, Endian::Little, &c, none);
        out
    }

    fn dso_at(m: &Machine, pid: u32, addr: u64) -> Option<String> {
        let map = m.find(pid, misc::USER, addr)?;
        Some(String::from_utf8_lossy(&m.dso(map.dso).name).into_owned())
    }

    #[test]
    fn threads_share_maps_added_after_they_start() {
        let mut m = Machine::new();
        m.fork(100, 1, 100);
        m.fork(100, 100, 101); // thread
        map(&mut m, 100, 0x1000, 0x1000, "/bin/a");
        assert_eq!(m.pid_of(101), Some(100));
        assert_eq!(dso_at(&m, 100, 0x1800).as_deref(), Some("/bin/a"));
        assert_eq!(m.process_count(), 1);
    }

    #[test]
    fn a_stamp_changes_with_the_maps_it_stands_for() {
        let mut m = Machine::new();
        let user = |m: &Machine, pid| m.space(pid).stamp(misc::USER);
        let kernel = |m: &Machine| m.space(1).stamp(misc::KERNEL);
        assert_eq!((user(&m, 1), kernel(&m)), (0, 0), "no maps yet");
        map(&mut m, 1, 0x1000, 0x1000, "/bin/parent");
        let parent = user(&m, 1);
        assert_ne!(parent, 0);
        // A copy has the same maps, so the same stamp, until either side changes.
        m.fork(2, 1, 2);
        assert_eq!(user(&m, 2), parent);
        map(&mut m, 2, 0x5000, 0x1000, "/lib/child-only");
        let child = user(&m, 2);
        assert!(child != parent && user(&m, 1) == parent);
        map(&mut m, 1, 0x9000, 0x1000, "/lib/parent-only");
        assert!(
            ![0, parent, child].contains(&user(&m, 1)),
            "never given before"
        );
        assert_eq!(kernel(&m), 0, "user maps leave the kernel's alone");
        m.mmap(&MapEvent {
            pid: KERNEL_PID,
            start: 0xffff_0000,
            len: 0x1000,
            name: b"[kernel.kallsyms]_text",
            cpumode: misc::KERNEL,
            ..MapEvent::default()
        });
        assert!(kernel(&m) > user(&m, 1));
        assert_eq!(m.space(1).stamp(misc::HYPERVISOR), 0);
    }

    #[test]
    fn fork_copies_and_the_copies_diverge() {
        let mut m = Machine::new();
        map(&mut m, 1, 0x1000, 0x1000, "/bin/parent");
        m.fork(2, 1, 2);
        map(&mut m, 2, 0x5000, 0x1000, "/lib/child-only");
        map(&mut m, 1, 0x9000, 0x1000, "/lib/parent-only");
        assert_eq!(dso_at(&m, 2, 0x1000).as_deref(), Some("/bin/parent"));
        assert_eq!(dso_at(&m, 2, 0x5000).as_deref(), Some("/lib/child-only"));
        assert_eq!(dso_at(&m, 1, 0x5000), None);
        assert_eq!(dso_at(&m, 2, 0x9000), None);
        assert_eq!(dso_at(&m, 1, 0x9000).as_deref(), Some("/lib/parent-only"));
    }

    #[test]
    fn exec_keeps_the_old_image_like_perf() {
        let mut m = Machine::new();
        map(&mut m, 1, 0x1000, 0x1000, "/bin/sh");
        m.fork(2, 1, 2);
        let exec = comm_exec(2, "gzip");
        assert!(m.apply(&Record::new(&exec, Endian::Little, None)).is_none());
        map(&mut m, 2, 0x1800, 0x1000, "/bin/gzip");
        // The part the new image does not cover still resolves to the old one, as in perf.
        assert_eq!(dso_at(&m, 2, 0x1000).as_deref(), Some("/bin/sh"));
        assert_eq!(dso_at(&m, 2, 0x1800).as_deref(), Some("/bin/gzip"));
        assert_eq!(dso_at(&m, 1, 0x1800).as_deref(), Some("/bin/sh"));
    }

    #[test]
    fn unknown_processes_are_created_lazily() {
        let mut m = Machine::new();
        assert_eq!(dso_at(&m, 77, 0x1000), None);
        map(&mut m, 77, 0x1000, 0x100, "/bin/late");
        assert_eq!(dso_at(&m, 77, 0x10ff).as_deref(), Some("/bin/late"));
        assert_eq!(dso_at(&m, 77, 0x1100), None);
    }

    /// A parent's map, later in the stream than a FORK but older in time.
    fn late_map(m: &mut Machine, pid: u32, start: u64, name: &str, time: u64) {
        let ev = MapEvent {
            pid,
            start,
            len: 0x1000,
            pgoff: 0,
            name: name.as_bytes(),
            identity: Identity::None,
            cpumode: misc::USER,
        };
        let dso = m.mmap(&ev);
        m.inherit_late(&ev, dso, time);
    }

    #[test]
    fn maps_older_than_a_fork_reach_its_children_though_later_in_the_stream() {
        let mut m = Machine::new();
        map(&mut m, 10, 0x1000, 0x1000, "/usr/bin/env");
        m.fork(11, 10, 11);
        m.note_fork(11, 10, 100);
        m.fork(12, 11, 12);
        m.note_fork(12, 11, 150);
        map(&mut m, 11, 0x9000, 0x1000, "/usr/bin/gzip"); // the child's own, after its fork
        late_map(&mut m, 10, 0x5000, "/usr/bin/bash", 50);
        late_map(&mut m, 10, 0x7000, "/usr/lib/libc.so.6", 120);
        late_map(&mut m, 10, 0x9000, "/usr/lib/libtinfo.so", 60);
        assert_eq!(dso_at(&m, 11, 0x5000).as_deref(), Some("/usr/bin/bash"));
        assert_eq!(
            dso_at(&m, 12, 0x5000).as_deref(),
            Some("/usr/bin/bash"),
            "grandchild"
        );
        assert_eq!(dso_at(&m, 11, 0x7000), None, "mapped after the fork");
        assert_eq!(
            dso_at(&m, 11, 0x9000).as_deref(),
            Some("/usr/bin/gzip"),
            "its own stays"
        );
        assert_eq!(
            dso_at(&m, 10, 0x9000).as_deref(),
            Some("/usr/lib/libtinfo.so")
        );
        // Two rounds later the fork is forgotten: the stream is ordered by then.
        m.finished_round();
        m.finished_round();
        late_map(&mut m, 10, 0xb000, "/usr/lib/late.so", 10);
        assert_eq!(dso_at(&m, 11, 0xb000), None);
        assert_eq!(m.recent_fork_count, 0);
    }

    #[test]
    fn exit_retires_after_two_rounds() {
        let mut m = Machine::new();
        map(&mut m, 5, 0x1000, 0x1000, "/bin/x");
        m.fork(5, 5, 6);
        m.exit(5, 6);
        assert_eq!(m.pid_of(6), None);
        m.exit(5, 5);
        m.finished_round();
        assert_eq!(dso_at(&m, 5, 0x1000).as_deref(), Some("/bin/x"));
        m.finished_round();
        assert_eq!(dso_at(&m, 5, 0x1000), None);
        assert_eq!(m.process_count(), 0);
    }

    #[test]
    fn exits_without_rounds_stay_bounded() {
        let mut m = Machine::new();
        for pid in 1..=(MAX_RETIRING as u32 + 10) {
            map(&mut m, pid, 0x1000, 0x1000, "/bin/x");
            m.exit(pid, pid);
        }
        assert_eq!(m.process_count(), MAX_RETIRING);
        assert_eq!(dso_at(&m, 1, 0x1000), None);
        assert!(dso_at(&m, MAX_RETIRING as u32 + 10, 0x1000).is_some());
    }

    #[test]
    fn pid_reuse_after_exit_is_not_retired() {
        let mut m = Machine::new();
        map(&mut m, 1, 0x1000, 0x1000, "/bin/init");
        m.exit(9, 9);
        m.fork(9, 1, 9);
        m.finished_round();
        m.finished_round();
        assert_eq!(dso_at(&m, 9, 0x1000).as_deref(), Some("/bin/init"));
    }

    #[test]
    fn a_late_fork_keeps_the_maps_the_child_made_before_it_arrived() {
        // Stream order of a child that runs on another cpu than its parent: its exec's MMAP2s
        // come before its FORK (perf sorts them back by time).
        let mut m = Machine::new();
        map(&mut m, 1, 0x1000, 0x1000, "/bin/sh");
        map(&mut m, 1, 0x7000, 0x1000, "/lib/libc.so.6");
        map(&mut m, 2, 0x5000, 0x1000, "/usr/bin/perl");
        map(&mut m, 2, 0x1800, 0x1000, "/lib/libcrypt.so.1");
        m.fork(2, 1, 2);
        assert_eq!(dso_at(&m, 2, 0x5000).as_deref(), Some("/usr/bin/perl"));
        assert_eq!(dso_at(&m, 2, 0x1800).as_deref(), Some("/lib/libcrypt.so.1"));
        assert_eq!(dso_at(&m, 2, 0x1000).as_deref(), Some("/bin/sh"));
        assert_eq!(dso_at(&m, 2, 0x7000).as_deref(), Some("/lib/libc.so.6"));
        assert_eq!(dso_at(&m, 1, 0x5000), None);
        // The same when a thread's FORK came first and created the process.
        m.fork(3, 3, 4);
        map(&mut m, 3, 0x9000, 0x1000, "/bin/t");
        m.fork(3, 1, 3);
        assert_eq!(dso_at(&m, 3, 0x9000).as_deref(), Some("/bin/t"));
        assert_eq!(dso_at(&m, 3, 0x1000).as_deref(), Some("/bin/sh"));
        // A second FORK of a forked process is pid reuse: it starts from its parent again.
        m.exit(2, 2);
        m.fork(2, 1, 2);
        assert_eq!(dso_at(&m, 2, 0x5000), None);
        assert_eq!(dso_at(&m, 2, 0x1000).as_deref(), Some("/bin/sh"));
    }

    #[test]
    fn overlapping_maps_are_split() {
        let mut m = Machine::new();
        map(&mut m, 1, 0x1000, 0x3000, "/a");
        map(&mut m, 1, 0x2000, 0x1000, "/b");
        assert_eq!(dso_at(&m, 1, 0x1fff).as_deref(), Some("/a"));
        assert_eq!(dso_at(&m, 1, 0x2000).as_deref(), Some("/b"));
        assert_eq!(dso_at(&m, 1, 0x3000).as_deref(), Some("/a"));
        let tail = m.maps(1)[2];
        assert_eq!((tail.start, tail.end, tail.pgoff), (0x3000, 0x4000, 0x2000));
        map(&mut m, 1, 0x0, 0x10000, "/c");
        assert_eq!(m.maps(1).len(), 1);
    }

    #[test]
    fn kernel_maps_are_separate_and_named_like_perf() {
        let mut m = Machine::new();
        let k = m.mmap(&MapEvent {
            pid: KERNEL_PID,
            start: 0xffff_ffff_8100_0000,
            len: 0x100_0000,
            pgoff: 0xffff_ffff_8100_0000,
            name: b"[kernel.kallsyms]_text",
            identity: Identity::None,
            cpumode: misc::KERNEL,
        });
        assert_eq!(m.dso(k).name, b"[kernel.kallsyms]");
        assert!(m.dso(k).kernel);
        let a = 0xffff_ffff_8100_1000;
        assert_eq!(m.find(42, misc::KERNEL, a).map(|x| x.dso), Some(k));
        assert!(m.find(42, misc::USER, a).is_none());
        assert!(m.find(42, misc::HYPERVISOR, a).is_none());
    }

    #[test]
    fn dsos_are_interned_by_name_and_identity() {
        let mut m = Machine::new();
        let a = map(&mut m, 1, 0x1000, 0x1000, "/lib/x.so");
        let b = map(&mut m, 2, 0x8000, 0x1000, "/lib/x.so");
        assert_eq!(a, b);
        let c = m.intern(
            b"/lib/x.so",
            Identity::Inode {
                maj: 8,
                min: 1,
                ino: 5,
                ino_generation: 0,
            },
            false,
        );
        assert_ne!(a, c);
        assert_eq!(m.dso_count(), 2);
    }
}

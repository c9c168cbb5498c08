//! The address-space model of a recorded machine, as perf's `machine`/`thread`/`maps` model it: which
//! file is mapped where, in which process, at each point in time.
//!
//! **The rule.** Every map, fork and exit is kept with its record's time, and a lookup is made at a
//! time: [`Machine::find`] answers what perf, which sorts the records by time before it applies
//! them (`ordered_events`), would find for a sample taken then, whatever order the records came
//! in. A process's own maps made at or before that time count (at each address the newest); where
//! none covers the address, its parent's maps at the time of its FORK do, and so on up; a FORK of a
//! pid that existed before (pid reuse) starts a new life, and the maps of the old one stop counting.
//! The history this needs is forgotten once no lookup can ask for it: records are ordered by time
//! across rounds, so a sample that came in round `r` is no older than the newest record of round
//! `r − 2` (perf's flush point; an older one is out of order for perf too), and the user of the model
//! says with [`Machine::hold`] the oldest round whose samples it has still to look up (the stages
//! that look frames up hold a batch two rounds, or [`HOLD_MAX_BYTES`](super::hold::HOLD_MAX_BYTES)
//! of batches: [`Hold`](super::hold::Hold)). At each FINISHED_ROUND the maps older than that point
//! that a newer map covers, the exits before it and the fork links before it (the child then gets a
//! copy of its parent's maps, as perf copies them) are dropped. A stream without FINISHED_ROUND (a
//! file without rounds is one round) counts a round every [`VIRTUAL_ROUND`] side-band records
//! instead, so memory stays bounded; perf sorts such a stream whole, so there a record further out
//! of place than that may be looked up as stream order has it.
//! - **Processes own maps; threads share them.** Maps are kept per process (pid). A thread (tid) only
//!   says which process it belongs to, so every thread of a process sees its maps.
//! - **COMM with `COMM_EXEC`** changes nothing here: perf keeps the old image's maps after an exec
//!   (`____thread__set_comm()` only flushes unwind caches), and the new image's MMAPs replace what
//!   they overlap. Samples taken inside `execve()` after its COMM still resolve to the old libc.
//! - Processes first seen mid-stream (recording attached to a running task, lost FORK) are created
//!   empty on their first MMAP or lookup. A record without a time (no `sample_id_all`) counts
//!   just after the newest time seen so far ([`Machine::saw`] tells the model samples' times), as
//!   perf applies such records when they come; a sample without a time is looked up at the end
//!   of time.
//! - **Kernel maps** (MMAP/MMAP2 with pid −1 or cpumode KERNEL: `[kernel.kallsyms]_text`, modules)
//!   form one separate list that every kernel-mode lookup uses, in stream order.
//! - A new map replaces the parts of older maps it overlaps, as `maps__fixup_overlappings()` does.
//!
//! Files are interned as [`Dso`]s by name and identity (MMAP2's device/inode, or its build id), so the
//! same library mapped by a thousand processes is one [`DsoId`]. The kernel map's
//! `[kernel.kallsyms]_text` is named `[kernel.kallsyms]`, as perf names the kernel dso.
//!
//! The model keeps no build ids or hit marks itself: users index their own tables by [`DsoId`].
//!
//! What a lookup of (pid, time, address) finds stays true while [`Space::stamp`] is the same, a
//! number never given to other maps, so a caller may cache it by stamp. A stamp changes only
//! where the answers do: a map made after a lookup's time (in time order, the usual case) leaves
//! the stamp of that lookup as it was, so the caches of samples held for the two rounds stay good
//! while the maps of later times come in; a record older than the process's newest change, or a
//! parent's before a fork, changes all of its (the child's) stamps.
//!
//! ```
//! use perfpipe_stream::model::machine::{Machine, MapEvent};
//! use perfpipe_stream::format::misc;
//!
//! let mut m = Machine::new();
//! let libc = m.mmap(&MapEvent { pid: 10, start: 0x7000, len: 0x1000, pgoff: 0,
//!                               name: b"/usr/lib/libc.so.6", identity: Default::default(),
//!                               cpumode: misc::USER, time: Some(100) });
//! m.fork(11, 10, 11, 200); // a new process, forked at 200
//! m.fork(10, 10, 12, 300); // a thread of 10
//! let bash = m.mmap(&MapEvent { pid: 11, start: 0x7000, len: 0x1000, pgoff: 0,
//!                               name: b"/usr/bin/bash", identity: Default::default(),
//!                               cpumode: misc::USER, time: Some(400) });
//! let pid = m.pid_of(12).unwrap(); // samples carry the pid; threads map to theirs
//! assert_eq!(m.find(pid, misc::USER, 0x7010, 500).map(|map| map.dso), Some(libc));
//! assert_eq!(m.find(11, misc::USER, 0x7010, 300).map(|map| map.dso), Some(libc)); // its parent's
//! assert_eq!(m.find(11, misc::USER, 0x7010, 400).map(|map| map.dso), Some(bash));
//! assert_eq!(m.dso(libc).name, b"/usr/lib/libc.so.6");
//! ```

use std::collections::HashMap;
use std::collections::VecDeque;

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
    /// Anonymous memory (`//anon`, `/dev/zero`, `/anon_hugepage`: perf's `is_anon_memory()`):
    /// the process that mapped it. perf names such a map `/tmp/perf-PID.map` by that process
    /// (`map__new()`), so two processes' JIT code at one address are two dsos, and a child keeps
    /// the one its parent mapped.
    Anon {
        /// The MMAP's pid.
        pid: u32,
    },
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
    /// The record's time (its sample-id trailer's); `None`: the newest time seen so far.
    pub time: Option<u64>,
}

/// The pid of kernel maps, −1.
pub const KERNEL_PID: u32 = u32::MAX;

/// Side-band records after which a stream that has shown no FINISHED_ROUND counts a round.
pub const VIRTUAL_ROUND: u64 = 4096;

/// Fork links and parents followed at most in one lookup (a cycle is corrupt input).
const MAX_DEPTH: usize = 64;

/// A map and the time it was made.
#[derive(Clone, Copy, Debug)]
struct Piece {
    map: Map,
    from: u64,
}

/// A piece a newer one covers, and the time of that newer one.
#[derive(Clone, Copy, Debug)]
struct Shadow {
    piece: Piece,
    until: u64,
}

impl Piece {
    /// The part `[start, end)` of the piece.
    fn part(&self, start: u64, end: u64) -> Piece {
        Piece {
            map: Map {
                start,
                end,
                pgoff: self.map.pgoff.wrapping_add(start - self.map.start),
                dso: self.map.dso,
            },
            from: self.from,
        }
    }
}

/// A sorted list of non-overlapping pieces: at each address, the newest piece made there.
#[derive(Clone, Debug, Default)]
struct Maps {
    list: Vec<Piece>,
    stamp: u64,
}

impl Maps {
    #[inline]
    fn find(&self, addr: u64) -> Option<&Piece> {
        let i = self.list.partition_point(|m| m.map.start <= addr);
        let m = self.list.get(i.checked_sub(1)?)?;
        (addr < m.map.end).then_some(m)
    }

    /// Inserts `new`: where it overlaps an older piece it replaces it (the older part goes to
    /// `shadows`, until `new.from`); where it overlaps a newer one (a record that came late), it
    /// goes to `shadows` itself. Ties go to the one inserted last, as perf's stable sort has it.
    fn insert(&mut self, new: Piece, shadows: &mut Vec<Shadow>) {
        let (s, e) = (new.map.start, new.map.end);
        if e <= s {
            return;
        }
        let v = &mut self.list;
        let from = v.partition_point(|m| m.map.end <= s);
        let to = from + v[from..].partition_point(|m| m.map.start < e);
        let mut out: Vec<Piece> = Vec::with_capacity(to - from + 2);
        let push = |out: &mut Vec<Piece>, p: Piece| {
            if p.map.end <= p.map.start {
                return;
            }
            // Parts of one new piece around a newer one are joined again where they touch.
            if let Some(last) = out.last_mut() {
                if last.map.end == p.map.start
                    && last.map.dso == p.map.dso
                    && last.from == p.from
                    && last.map.pgoff.wrapping_add(last.map.end - last.map.start) == p.map.pgoff
                {
                    last.map.end = p.map.end;
                    return;
                }
            }
            out.push(p);
        };
        let mut cursor = s;
        for m in &v[from..to] {
            let (ms, me) = (m.map.start, m.map.end);
            if ms < s {
                push(&mut out, m.part(ms, s));
            }
            let (os, oe) = (ms.max(s), me.min(e));
            if cursor < os {
                push(&mut out, new.part(cursor, os));
            }
            if m.from > new.from {
                push(&mut out, m.part(os, oe));
                shadows.push(Shadow {
                    piece: new.part(os, oe),
                    until: m.from,
                });
            } else {
                push(&mut out, new.part(os, oe));
                shadows.push(Shadow {
                    piece: m.part(os, oe),
                    until: new.from,
                });
            }
            cursor = oe;
            if me > e {
                push(&mut out, m.part(e, me));
            }
        }
        if cursor < e {
            push(&mut out, new.part(cursor, e));
        }
        v.splice(from..to, out);
    }
}

/// Whether perf names a map of this file name by its process (`is_anon_memory()`).
fn is_anon_memory(name: &[u8]) -> bool {
    name == b"//anon" || name.starts_with(b"/dev/zero") || name.starts_with(b"/anon_hugepage")
}

/// The parts of `m` that no map of `list` (sorted, non-overlapping) covers, pushed to `out`.
fn uncovered(list: &[Map], m: &Map, out: &mut Vec<Map>) {
    let part = |start: u64, end: u64| Map {
        start,
        end,
        pgoff: m.pgoff.wrapping_add(start - m.start),
        dso: m.dso,
    };
    let mut cursor = m.start;
    let from = list.partition_point(|x| x.end <= m.start);
    for x in &list[from..] {
        if x.start >= m.end {
            break;
        }
        if x.start > cursor {
            out.push(part(cursor, x.start));
        }
        cursor = cursor.max(x.end);
    }
    if cursor < m.end {
        out.push(part(cursor, m.end));
    }
}

/// One life of a pid: from its FORK (by `parent`, whose maps at that time it starts with).
#[derive(Clone, Copy, Debug)]
struct Life {
    forked: u64,
    parent: Option<u32>,
}

/// A process (a pid): its own maps over time and its lives.
#[derive(Clone, Debug, Default)]
struct Proc {
    maps: Maps,
    /// Pieces a newer piece covers, for lookups at times before it.
    shadows: Vec<Shadow>,
    /// FORKs of the pid, by time; before the first, the pid has an unknown life of its own.
    lives: Vec<Life>,
    /// The time of its main thread's last EXIT.
    exit: Option<u64>,
    /// Processes forked from it that still look its maps up: (pid, fork time).
    kids: Vec<(u32, u64)>,
    /// The times its answers change at (its maps' and its FORKs' since the last forgetting).
    times: Vec<u64>,
    /// How many such times were forgotten: a lookup's version counts them too, so versions stay
    /// what they were when times are forgotten.
    times_forgotten: u64,
    /// The newest of its change times, forgotten ones included.
    newest: u64,
}

impl Proc {
    /// Where the life at `time` begins, and its parent and fork time if it has one.
    #[inline]
    fn life_at(&self, time: u64) -> (u64, Option<(u32, u64)>) {
        match self.lives.iter().rev().find(|l| l.forked <= time) {
            Some(l) => (l.forked, l.parent.map(|p| (p, l.forked))),
            None => (0, None),
        }
    }

    /// The own piece covering `addr` at `time`, of the life that began at `lower`.
    #[inline]
    fn own(&self, addr: u64, time: u64, lower: u64) -> Option<&Map> {
        let p = self.maps.find(addr)?;
        if p.from <= time {
            return (p.from >= lower).then_some(&p.map);
        }
        self.shadows
            .iter()
            .filter(|s| {
                let p = &s.piece;
                p.from <= time && p.from >= lower && p.map.start <= addr && addr < p.map.end
            })
            .max_by_key(|s| s.piece.from)
            .map(|s| &s.piece.map)
    }

    /// Whether the last life ended before `time`.
    fn gone_before(&self, time: u64) -> bool {
        self.exit
            .is_some_and(|x| x < time && self.lives.last().is_none_or(|l| l.forked <= x))
    }

    fn note_time(&mut self, time: u64) {
        let at = self.times.partition_point(|&t| t <= time);
        self.times.insert(at, time);
    }
}

/// The address spaces of one process as a sample at one time sees them: [`Machine::space`].
#[derive(Clone, Copy, Debug)]
pub struct Space<'a> {
    machine: &'a Machine,
    pid: u32,
    time: u64,
    user: u64,
}

impl<'a> Space<'a> {
    /// The stamp of what a lookup in `cpumode` searches: equal stamps, equal answers (for one
    /// pid). 0 for none (a process not seen, a mode without maps).
    #[inline]
    pub fn stamp(&self, cpumode: u16) -> u64 {
        match cpumode {
            misc::KERNEL | misc::GUEST_KERNEL => self.machine.kernel.stamp << STAMP_SHIFT,
            misc::USER => self.user,
            _ => 0,
        }
    }

    /// The map holding `addr` in `cpumode`: kernel modes look in the kernel maps, user mode in
    /// the process's at the space's time. Other modes (hypervisor, guest user, unknown) find
    /// nothing, since this models one host.
    #[inline]
    pub fn find(&self, cpumode: u16, addr: u64) -> Option<&'a Map> {
        match cpumode {
            misc::KERNEL | misc::GUEST_KERNEL => self.machine.kernel.find(addr).map(|p| &p.map),
            misc::USER => self.machine.find_user(self.pid, addr, self.time),
            _ => None,
        }
    }
}

/// A stamp is `(change << STAMP_SHIFT) | version`: the change that made the maps as they are, and
/// how many of the process's change times are at or before the lookup's time.
const STAMP_SHIFT: u32 = 24;

/// The address spaces of one machine (the host); see the module doc.
///
/// **Memory**: one entry per live process and thread, the history of the rounds not yet settled
/// (see the module doc), and one [`Dso`] per distinct mapped file.
#[derive(Debug, Default)]
pub struct Machine {
    dsos: Vec<Dso>,
    dso_index: HashMap<(Vec<u8>, Identity), DsoId>,
    procs: IdMap<u32, Proc>,
    /// tid → pid.
    threads: IdMap<u32, u32>,
    kernel: Maps,
    /// Processes with something to forget: lives, shadows, kids, an exit.
    history: IdMap<u32, ()>,
    /// Rounds so far (FINISHED_ROUNDs, or virtual ones in a stream without them).
    rounds: u64,
    /// The newest time at the end of each round not yet settled: (round, time).
    round_ends: VecDeque<(u64, u64)>,
    /// The newest record time seen.
    now: u64,
    /// Whether the stream has had a FINISHED_ROUND.
    real_rounds: bool,
    /// Side-band records since the last round.
    since_round: u64,
    /// The oldest round whose samples are still to be looked up ([`Machine::hold`]).
    held: Option<u64>,
    /// The time before which history is forgotten.
    settled: u64,
    /// The last stamp given.
    stamps: u64,
}

impl Machine {
    /// An empty machine.
    pub fn new() -> Machine {
        Machine::default()
    }

    /// Whether [`Machine::apply`] takes records of type `rt` in: the maps, the processes'
    /// lives and the rounds (MMAP, MMAP2, FORK, EXIT, COMM, FINISHED_ROUND).
    pub fn takes(rt: RecordType) -> bool {
        matches!(
            rt,
            RecordType::MMAP
                | RecordType::MMAP2
                | RecordType::FORK
                | RecordType::EXIT
                | RecordType::COMM
                | RecordType::FINISHED_ROUND
        )
    }

    /// Applies a record: MMAP, MMAP2, FORK, COMM, EXIT and FINISHED_ROUND change the model; other
    /// records are ignored. Returns the dso an MMAP/MMAP2 introduced or mapped again.
    pub fn apply(&mut self, rec: &Record<'_>) -> Option<DsoId> {
        let rt = rec.record_type();
        let time = || rec.sample_id().and_then(|id| id.time);
        let out = match rt {
            RecordType::MMAP | RecordType::MMAP2 => {
                let m = rec.mmap()?;
                Some(self.mmap(&MapEvent {
                    pid: m.pid,
                    start: m.addr,
                    len: m.len,
                    pgoff: m.pgoff,
                    name: m.filename,
                    identity: Identity::of(&m.file_id),
                    cpumode: m.cpumode,
                    time: time(),
                }))
            }
            RecordType::FORK => {
                let t = rec.task()?;
                self.fork(t.pid, t.ppid, t.tid, time().unwrap_or(t.time));
                None
            }
            RecordType::EXIT => {
                let t = rec.task()?;
                self.exit(t.pid, t.tid, time().unwrap_or(t.time));
                None
            }
            RecordType::COMM => {
                let c = rec.comm()?;
                self.threads.entry(c.tid).or_insert(c.pid);
                None
            }
            RecordType::FINISHED_ROUND => {
                self.real_rounds = true;
                self.finished_round();
                return None;
            }
            _ => return None,
        };
        self.since_round += 1;
        if !self.real_rounds && self.since_round >= VIRTUAL_ROUND {
            self.finished_round();
        }
        out
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

    /// A time of a record: its own, or just after the newest seen.
    fn at(&mut self, time: Option<u64>) -> u64 {
        match time {
            Some(t) => {
                self.now = self.now.max(t);
                t
            }
            None => self.now.saturating_add(1),
        }
    }

    /// Tells the model the time of a record it does not take in (a sample), for the records
    /// without a time of their own that come after it (see the module doc).
    pub fn saw(&mut self, time: u64) {
        self.now = self.now.max(time);
    }

    /// A change of process `pid` at `time` (already in its `times`): answers at `time` and later
    /// change. A lookup's version (how many change times are at or before it) tells those apart
    /// from the older ones while the changes come in time order, so the stamp stays and a cached
    /// answer of an older time stays good; a change older than the process's newest one, its
    /// first, and a change of a parent before a fork (for the child, at all its times) take a new
    /// stamp.
    fn changed(&mut self, pid: u32, time: u64) {
        let mut work = vec![(pid, time, 0)];
        while let Some((pid, time, depth)) = work.pop() {
            let Some(p) = self.procs.get_mut(&pid) else {
                continue;
            };
            let late = p.newest > time;
            if depth == 0 {
                p.newest = p.newest.max(time);
            }
            if depth > 0 || late || p.maps.stamp == 0 {
                self.stamps += 1;
                p.maps.stamp = self.stamps;
            }
            if depth < MAX_DEPTH {
                work.extend(
                    p.kids
                        .iter()
                        .filter(|&&(_, forked)| forked >= time)
                        .map(|&(kid, forked)| (kid, forked, depth + 1)),
                );
            }
        }
    }

    /// Adds a map (MMAP/MMAP2) and returns its dso.
    pub fn mmap(&mut self, ev: &MapEvent<'_>) -> DsoId {
        let kernel =
            ev.pid == KERNEL_PID || ev.cpumode == misc::KERNEL || ev.cpumode == misc::GUEST_KERNEL;
        let identity = if !kernel && is_anon_memory(ev.name) {
            Identity::Anon { pid: ev.pid }
        } else {
            ev.identity.clone()
        };
        let dso = self.intern(ev.name, identity, kernel);
        let time = self.at(ev.time);
        let map = Map {
            start: ev.start,
            end: ev.start.saturating_add(ev.len),
            pgoff: ev.pgoff,
            dso,
        };
        if kernel {
            // In stream order: every kernel piece is of time 0, so the last one wins.
            let stamp = self.next_stamp();
            self.kernel.insert(Piece { map, from: 0 }, &mut Vec::new());
            self.kernel.stamp = stamp;
            return dso;
        }
        self.threads.entry(ev.pid).or_insert(ev.pid);
        let p = self.procs.entry(ev.pid).or_default();
        p.maps.insert(Piece { map, from: time }, &mut p.shadows);
        p.note_time(time);
        self.history.insert(ev.pid, ());
        self.changed(ev.pid, time);
        dso
    }

    /// FORK at `time`: `tid` of process `pid` was created by process `ppid`.
    pub fn fork(&mut self, pid: u32, ppid: u32, tid: u32, time: u64) {
        let time = self.at(Some(time));
        self.threads.insert(tid, pid);
        if pid == ppid || pid != tid {
            // A thread: its process exists from now on, forked or not (yet).
            self.procs.entry(pid).or_default();
            return;
        }
        let p = self.procs.entry(pid).or_default();
        if p.lives
            .iter()
            .any(|l| l.forked == time && l.parent == Some(ppid))
        {
            return;
        }
        let at = p.lives.partition_point(|l| l.forked <= time);
        p.lives.insert(
            at,
            Life {
                forked: time,
                parent: Some(ppid),
            },
        );
        p.note_time(time);
        self.procs.entry(ppid).or_default().kids.push((pid, time));
        self.history.insert(pid, ());
        self.history.insert(ppid, ());
        self.changed(pid, time);
    }

    /// EXIT at `time` of thread `tid` of `pid`. The main thread's exit ends the process's life:
    /// it is forgotten once no lookup can come before that time.
    pub fn exit(&mut self, pid: u32, tid: u32, time: u64) {
        let time = self.at(Some(time));
        if pid == tid {
            if let Some(p) = self.procs.get_mut(&pid) {
                p.exit = Some(p.exit.map_or(time, |x| x.max(time)));
                self.history.insert(pid, ());
            }
        } else {
            self.threads.remove(&tid);
        }
    }

    /// Says that the samples of the rounds before `round` are all looked up (`None`: every
    /// sample so far is): the history older than what they could ask for may be forgotten at the
    /// next round. Without it, each sample is taken to be looked up when it comes.
    pub fn hold(&mut self, round: Option<u64>) {
        self.held = round;
    }

    /// The round given to [`Machine::hold`] last: the oldest whose samples are not all looked up.
    pub fn held(&self) -> Option<u64> {
        self.held
    }

    /// The rounds so far: FINISHED_ROUNDs, or virtual ones (see the module doc).
    pub fn round(&self) -> u64 {
        self.rounds
    }

    /// The end of a round (FINISHED_ROUND, or a virtual one): forgets what no lookup can need.
    pub fn finished_round(&mut self) {
        self.round_ends.push_back((self.rounds, self.now));
        self.rounds += 1;
        self.since_round = 0;
        // A sample of round `a` is no older than the newest record of round `a − 2`.
        let oldest = self.held.unwrap_or(self.rounds).min(self.rounds);
        let Some(bound) = oldest.checked_sub(2) else {
            return;
        };
        let mut time = None;
        while let Some(&(r, t)) = self.round_ends.front() {
            if r > bound {
                break;
            }
            time = Some(t);
            self.round_ends.pop_front();
        }
        if let Some(t) = time {
            if t > self.settled {
                self.forget_before(t);
            }
        }
    }

    /// Forgets the history no lookup at `time` or later needs: fork links before it become
    /// copies of the parent's maps, maps covered before it go, processes that exited before it go.
    pub fn forget_before(&mut self, time: u64) {
        self.settled = time;
        let pids: Vec<u32> = self.history.keys().copied().collect();
        // Copies first, while every parent still has its history.
        let mut copies = Vec::new();
        for &pid in &pids {
            let Some(p) = self.procs.get(&pid) else {
                continue;
            };
            if p.gone_before(time) {
                continue;
            }
            if let (_, Some((parent, forked))) = p.life_at(time) {
                copies.push((pid, forked, self.view(parent, forked)));
            }
        }
        for (pid, forked, inherited) in copies {
            let p = self.procs.get_mut(&pid).expect("listed");
            if let Some(l) = p.lives.iter_mut().rev().find(|l| l.forked == forked) {
                l.parent = None;
            }
            for m in inherited {
                p.maps.insert(
                    Piece {
                        map: m,
                        from: forked,
                    },
                    &mut p.shadows,
                );
            }
        }
        let mut dropped = Vec::new();
        for pid in pids {
            let Some(p) = self.procs.get_mut(&pid) else {
                self.history.remove(&pid);
                continue;
            };
            if p.gone_before(time) {
                self.procs.remove(&pid);
                self.history.remove(&pid);
                dropped.push(pid);
                continue;
            }
            let lower = p.life_at(time).0;
            let first = p.lives.partition_point(|l| l.forked <= time);
            p.lives.drain(..first.saturating_sub(1));
            p.maps.list.retain(|m| m.from >= lower);
            p.shadows
                .retain(|s| s.until > time && s.piece.from >= lower);
            p.kids.retain(|&(_, forked)| forked > time);
            let before = p.times.len();
            p.times.retain(|&t| t > time);
            p.times_forgotten += (before - p.times.len()) as u64;
            if p.exit.is_some_and(|x| x < lower) {
                p.exit = None;
            }
            let quiet = p.shadows.is_empty()
                && p.times.is_empty()
                && p.kids.is_empty()
                && p.exit.is_none()
                && p.lives.iter().all(|l| l.parent.is_none());
            if quiet {
                p.lives.clear();
                self.history.remove(&pid);
            }
            // No answer at `time` or later changed, so the stamp stays, unless the versions
            // would run out.
            if p.times_forgotten > 1 << (STAMP_SHIFT - 2) {
                p.times_forgotten = 0;
                let stamp = self.next_stamp();
                self.procs.get_mut(&pid).expect("kept").maps.stamp = stamp;
            }
        }
        if !dropped.is_empty() {
            let dropped: IdMap<u32, ()> = dropped.into_iter().map(|p| (p, ())).collect();
            self.threads.retain(|_, p| !dropped.contains_key(p));
        }
    }

    /// The maps of process `pid` at `time`, as one sorted list: each generation's pieces of the
    /// time (a shadow where the newest piece is too new), under the younger generation's.
    fn view(&self, pid: u32, time: u64) -> Vec<Map> {
        let mut out: Vec<Map> = Vec::new();
        let mut parts = Vec::new();
        let (mut pid, mut time) = (pid, time);
        for _ in 0..MAX_DEPTH {
            let Some(p) = self.procs.get(&pid) else {
                break;
            };
            let (lower, parent) = p.life_at(time);
            let fits = |from: u64| from >= lower && from <= time;
            let mut own: Vec<Map> = p
                .maps
                .list
                .iter()
                .filter(|x| fits(x.from))
                .map(|x| x.map)
                .collect();
            if p.maps.list.iter().any(|x| x.from > time) {
                // Under a piece too new: the newest shadow of the time (the last made, of two
                // of one time).
                let mut shadows: Vec<&Piece> = p
                    .shadows
                    .iter()
                    .rev()
                    .map(|s| &s.piece)
                    .filter(|x| fits(x.from))
                    .collect();
                shadows.sort_by_key(|x| std::cmp::Reverse(x.from));
                for s in shadows {
                    parts.clear();
                    uncovered(&own, &s.map, &mut parts);
                    for &q in &parts {
                        let at = own.partition_point(|x| x.start < q.start);
                        own.insert(at, q);
                    }
                }
            }
            if out.is_empty() {
                out = own;
            } else {
                parts.clear();
                for m in &own {
                    uncovered(&out, m, &mut parts);
                }
                out.extend_from_slice(&parts);
                out.sort_unstable_by_key(|m| m.start);
            }
            match parent {
                Some((pp, forked)) => (pid, time) = (pp, time.min(forked)),
                None => break,
            }
        }
        out
    }

    #[inline]
    fn find_user(&self, pid: u32, addr: u64, time: u64) -> Option<&Map> {
        let (mut pid, mut time) = (pid, time);
        for _ in 0..MAX_DEPTH {
            let p = self.procs.get(&pid)?;
            let (lower, parent) = p.life_at(time);
            if let Some(m) = p.own(addr, time, lower) {
                return Some(m);
            }
            let (pp, forked) = parent?;
            (pid, time) = (pp, time.min(forked));
        }
        None
    }

    /// The map holding `addr` for a sample of process `pid` in `cpumode` at `time`
    /// ([`Space::find`]).
    #[inline]
    pub fn find(&self, pid: u32, cpumode: u16, addr: u64, time: u64) -> Option<&Map> {
        self.space(pid, time).find(cpumode, addr)
    }

    /// What a sample of process `pid` at `time` sees: its maps and the kernel's, looked up once
    /// for all the frames of a callchain.
    #[inline]
    pub fn space(&self, pid: u32, time: u64) -> Space<'_> {
        let user = self.procs.get(&pid).map_or(0, |p| {
            let version = p.times_forgotten + p.times.partition_point(|&t| t <= time) as u64;
            (p.maps.stamp << STAMP_SHIFT) | version.min((1 << STAMP_SHIFT) - 1)
        });
        Space {
            machine: self,
            pid,
            time,
            user,
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

    /// Number of processes known (exited ones not yet forgotten included).
    pub fn process_count(&self) -> usize {
        self.procs.len()
    }

    /// The maps of process `pid` as a sample at `time` sees them, sorted by address.
    pub fn maps(&self, pid: u32, time: u64) -> Vec<Map> {
        self.view(pid, time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Endian;

    fn map_at(m: &mut Machine, pid: u32, start: u64, len: u64, name: &str, time: u64) -> DsoId {
        m.mmap(&MapEvent {
            pid,
            start,
            len,
            pgoff: 0,
            name: name.as_bytes(),
            identity: Identity::None,
            cpumode: misc::USER,
            time: Some(time),
        })
    }

    fn map(m: &mut Machine, pid: u32, start: u64, len: u64, name: &str) -> DsoId {
        let now = m.now + 1;
        map_at(m, pid, start, len, name, now)
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

    /// The name of the dso at `addr` of `pid` at `time`.
    fn dso_then(m: &Machine, pid: u32, addr: u64, time: u64) -> Option<String> {
        let map = m.find(pid, misc::USER, addr, time)?;
        Some(String::from_utf8_lossy(&m.dso(map.dso).name).into_owned())
    }

    /// The same at the end of time.
    fn dso_at(m: &Machine, pid: u32, addr: u64) -> Option<String> {
        dso_then(m, pid, addr, u64::MAX)
    }

    #[test]
    fn threads_share_maps_added_after_they_start() {
        let mut m = Machine::new();
        m.fork(100, 1, 100, 1);
        m.fork(100, 100, 101, 2); // thread
        map(&mut m, 100, 0x1000, 0x1000, "/bin/a");
        assert_eq!(m.pid_of(101), Some(100));
        assert_eq!(dso_at(&m, 100, 0x1800).as_deref(), Some("/bin/a"));
    }

    #[test]
    fn a_stamp_changes_with_the_answers_it_stands_for() {
        let mut m = Machine::new();
        let user = |m: &Machine, pid, t| m.space(pid, t).stamp(misc::USER);
        let kernel = |m: &Machine| m.space(1, 0).stamp(misc::KERNEL);
        assert_eq!((user(&m, 1, 5), kernel(&m)), (0, 0), "no maps yet");
        map_at(&mut m, 1, 0x1000, 0x1000, "/bin/parent", 10);
        let parent = user(&m, 1, 20);
        assert_ne!(parent, 0);
        assert_ne!(user(&m, 1, 5), parent, "before the map: another answer");
        m.fork(2, 1, 2, 30);
        map_at(&mut m, 2, 0x5000, 0x1000, "/lib/child-only", 40);
        let (child_before, child) = (user(&m, 2, 35), user(&m, 2, 45));
        assert_ne!(child_before, child);
        // A late map of the parent, older than the fork: the child's answers change too.
        map_at(&mut m, 1, 0x9000, 0x1000, "/lib/parent-late", 25);
        assert!(![child_before, child].contains(&user(&m, 2, 35)));
        assert_eq!(
            dso_then(&m, 2, 0x9000, 35).as_deref(),
            Some("/lib/parent-late")
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
        assert_ne!(kernel(&m), 0);
        assert_eq!(m.space(1, 0).stamp(misc::HYPERVISOR), 0);
    }

    #[test]
    fn a_stamp_stays_for_the_answers_a_newer_change_leaves_alone() {
        let mut m = Machine::new();
        let user = |m: &Machine, pid, t| m.space(pid, t).stamp(misc::USER);
        map_at(&mut m, 1, 0x1000, 0x1000, "/bin/a", 10);
        let at20 = user(&m, 1, 20);
        map_at(&mut m, 1, 0x2000, 0x1000, "/lib/b", 30);
        assert_eq!(
            user(&m, 1, 20),
            at20,
            "a map made at 30 changes nothing at 20"
        );
        let at40 = user(&m, 1, 40);
        assert_ne!(at40, at20);
        // A map older than the newest change: every stamp of the process changes.
        map_at(&mut m, 1, 0x3000, 0x1000, "/lib/c", 25);
        let (late20, late40) = (user(&m, 1, 20), user(&m, 1, 40));
        assert!(![at20, at40].contains(&late20) && ![at20, at40].contains(&late40));
        assert_ne!(late20, late40);
        // Also once the times before it are forgotten.
        m.forget_before(50);
        let at60 = user(&m, 1, 60);
        assert_eq!(at60, late40, "forgetting changes no answer");
        map_at(&mut m, 1, 0x4000, 0x1000, "/lib/d", 45);
        assert!(![at20, at40, late20, late40].contains(&user(&m, 1, 60)));
        assert_eq!(dso_then(&m, 1, 0x4000, 60).as_deref(), Some("/lib/d"));
    }

    #[test]
    fn fork_copies_and_the_copies_diverge() {
        let mut m = Machine::new();
        map_at(&mut m, 1, 0x1000, 0x1000, "/bin/parent", 10);
        m.fork(2, 1, 2, 20);
        map_at(&mut m, 2, 0x5000, 0x1000, "/lib/child-only", 30);
        map_at(&mut m, 1, 0x9000, 0x1000, "/lib/parent-only", 30);
        assert_eq!(dso_at(&m, 2, 0x1000).as_deref(), Some("/bin/parent"));
        assert_eq!(dso_at(&m, 2, 0x5000).as_deref(), Some("/lib/child-only"));
        assert_eq!(dso_at(&m, 1, 0x5000), None);
        assert_eq!(dso_at(&m, 2, 0x9000), None);
        assert_eq!(dso_at(&m, 1, 0x9000).as_deref(), Some("/lib/parent-only"));
        // The same after the fork link is forgotten (a copy then).
        m.forget_before(100);
        assert_eq!(dso_at(&m, 2, 0x1000).as_deref(), Some("/bin/parent"));
        assert_eq!(dso_at(&m, 2, 0x9000), None);
        assert_eq!(m.maps(2, 100).len(), 2);
    }

    #[test]
    fn exec_keeps_the_old_image_like_perf() {
        let mut m = Machine::new();
        map_at(&mut m, 1, 0x1000, 0x1000, "/bin/sh", 10);
        m.fork(2, 1, 2, 20);
        let exec = comm_exec(2, "gzip");
        assert!(m.apply(&Record::new(&exec, Endian::Little, None)).is_none());
        map_at(&mut m, 2, 0x1800, 0x1000, "/bin/gzip", 30);
        // The part the new image does not cover still resolves to the old one, as in perf.
        assert_eq!(dso_at(&m, 2, 0x1000).as_deref(), Some("/bin/sh"));
        assert_eq!(dso_at(&m, 2, 0x1800).as_deref(), Some("/bin/gzip"));
        assert_eq!(
            dso_then(&m, 2, 0x1800, 25).as_deref(),
            Some("/bin/sh"),
            "before the exec"
        );
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

    /// A record of the order tests: `(b'm', pid, address, file, time)` maps a page of `file`,
    /// `(b'f', child, parent, "", time)` forks.
    type Rec = (u8, u32, u64, &'static str, u64);

    fn apply(m: &mut Machine, &(kind, pid, x, name, time): &Rec) {
        if kind == b'm' {
            map_at(m, pid, x, 0x1000, name, time);
        } else {
            m.fork(pid, x as u32, pid, time);
        }
    }

    #[test]
    fn records_in_any_order_give_the_answers_of_time_order() {
        // A child's exec maps before its FORK in the stream (another cpu), the parent's maps
        // after its FORKs though older, a grandchild: every order of the same records.
        let records: [Rec; 7] = [
            (b'm', 10, 0x1000, "/usr/bin/env", 10),
            (b'm', 10, 0x5000, "/usr/bin/bash", 50),
            (b'f', 11, 10, "", 100),
            (b'm', 10, 0x7000, "/usr/lib/libc.so.6", 120),
            (b'f', 12, 11, "", 150),
            (b'm', 11, 0x9000, "/usr/bin/gzip", 200),
            (b'm', 12, 0x5000, "/usr/bin/perl", 300),
        ];
        let mut orders = vec![records.to_vec()];
        let mut rev = records.to_vec();
        rev.reverse();
        orders.push(rev);
        orders.push(vec![
            records[5], records[2], records[6], records[4], records[1], records[0], records[3],
        ]);
        for order in orders {
            let mut m = Machine::new();
            for r in &order {
                apply(&mut m, r);
            }
            let q = |pid, addr, t| dso_then(&m, pid, addr, t);
            assert_eq!(
                q(11, 0x5000, 110).as_deref(),
                Some("/usr/bin/bash"),
                "{order:?}"
            );
            assert_eq!(q(11, 0x7000, 130), None, "mapped after the fork");
            assert_eq!(
                q(12, 0x1000, 160).as_deref(),
                Some("/usr/bin/env"),
                "grandchild"
            );
            assert_eq!(q(12, 0x5000, 160).as_deref(), Some("/usr/bin/bash"));
            assert_eq!(q(12, 0x5000, 300).as_deref(), Some("/usr/bin/perl"));
            assert_eq!(
                q(12, 0x9000, 400),
                None,
                "the child's map after the grandchild's fork"
            );
            assert_eq!(q(11, 0x9000, 250).as_deref(), Some("/usr/bin/gzip"));
            assert_eq!(q(11, 0x9000, 190), None);
            assert_eq!(q(10, 0x7000, 130).as_deref(), Some("/usr/lib/libc.so.6"));
            // The whole list at a time says what each lookup then says.
            for (pid, t) in [(10, 60), (11, 110), (11, 250), (12, 160), (12, 400)] {
                let list = m.maps(pid, t);
                assert!(list.windows(2).all(|w| w[0].end <= w[1].start), "{list:?}");
                for addr in (0..0xb000).step_by(0x400) {
                    let in_list = list.iter().find(|x| x.start <= addr && addr < x.end);
                    let found = m.find(pid, misc::USER, addr, t);
                    assert_eq!(
                        in_list.map(|x| x.dso),
                        found.map(|x| x.dso),
                        "{pid} {addr:#x} {t}"
                    );
                }
            }
        }
    }

    #[test]
    fn equal_stamps_give_equal_maps_in_every_order() {
        // The promise a cache by stamp rests on, after every record of every order of records
        // like those above (the last two changed so that maps replace maps of the same
        // address): one stamp of a pid is one list of maps, whenever it was given.
        let records: [Rec; 7] = [
            (b'm', 10, 0x1000, "/usr/bin/env", 10),
            (b'm', 10, 0x5000, "/usr/bin/bash", 50),
            (b'f', 11, 10, "", 100),
            (b'm', 10, 0x7000, "/usr/lib/libc.so.6", 120),
            (b'f', 12, 11, "", 150),
            (b'm', 11, 0x5000, "/usr/bin/gzip", 200),
            (b'm', 10, 0x5000, "/usr/bin/perl", 300),
        ];
        fn orders(n: usize) -> Vec<Vec<usize>> {
            if n == 0 {
                return vec![Vec::new()];
            }
            let mut out = Vec::new();
            for o in orders(n - 1) {
                for at in 0..=o.len() {
                    let mut o = o.clone();
                    o.insert(at, n - 1);
                    out.push(o);
                }
            }
            out
        }
        for order in orders(records.len()) {
            let mut m = Machine::new();
            // (pid, stamp) → the maps first seen with it.
            let mut seen: HashMap<(u32, u64), Vec<Map>> = HashMap::new();
            for &k in &order {
                apply(&mut m, &records[k]);
                for pid in [10, 11, 12] {
                    for t in [5, 10, 60, 100, 110, 125, 150, 160, 200, 250, 300, 400] {
                        let stamp = m.space(pid, t).stamp(misc::USER);
                        let list = m.maps(pid, t);
                        let first = seen.entry((pid, stamp)).or_insert_with(|| list.clone());
                        assert_eq!(
                            *first, list,
                            "{order:?}: pid {pid} at {t}, stamp {stamp:#x}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_reused_pid_starts_from_its_new_parent() {
        let mut m = Machine::new();
        map_at(&mut m, 1, 0x1000, 0x1000, "/bin/sh", 1);
        m.fork(2, 1, 2, 10);
        map_at(&mut m, 2, 0x5000, 0x1000, "/usr/bin/perl", 20);
        m.exit(2, 2, 30);
        // The new life's map comes before its FORK in the stream.
        map_at(&mut m, 2, 0x8000, 0x1000, "/usr/bin/awk", 50);
        m.fork(2, 1, 2, 40);
        assert_eq!(
            dso_then(&m, 2, 0x5000, 25).as_deref(),
            Some("/usr/bin/perl")
        );
        assert_eq!(dso_then(&m, 2, 0x5000, 45), None, "the old life's");
        assert_eq!(dso_then(&m, 2, 0x1000, 45).as_deref(), Some("/bin/sh"));
        assert_eq!(dso_then(&m, 2, 0x8000, 55).as_deref(), Some("/usr/bin/awk"));
        m.forget_before(60);
        assert_eq!(dso_at(&m, 2, 0x5000), None);
        assert_eq!(dso_at(&m, 2, 0x8000).as_deref(), Some("/usr/bin/awk"));
        assert_eq!(dso_at(&m, 2, 0x1000).as_deref(), Some("/bin/sh"));
    }

    #[test]
    fn an_exited_process_answers_until_its_exit_is_settled() {
        let mut m = Machine::new();
        map_at(&mut m, 5, 0x1000, 0x1000, "/bin/x", 1);
        m.fork(5, 5, 6, 2);
        m.exit(5, 6, 3);
        assert_eq!(m.pid_of(6), None);
        m.exit(5, 5, 10);
        // Rounds end at times 10, 20, 30: a sample of round r is no older than round r − 2's end,
        // so after the third the process (exited at 10) is forgotten.
        m.now = 10;
        m.finished_round();
        m.now = 20;
        m.finished_round();
        assert_eq!(dso_then(&m, 5, 0x1000, 9).as_deref(), Some("/bin/x"));
        m.now = 30;
        m.finished_round();
        assert_eq!(dso_at(&m, 5, 0x1000), None);
        assert_eq!(m.process_count(), 0);
    }

    #[test]
    fn a_hold_keeps_the_history_its_samples_need() {
        let mut m = Machine::new();
        map_at(&mut m, 5, 0x1000, 0x1000, "/bin/x", 1);
        m.exit(5, 5, 5);
        m.hold(Some(0));
        for t in 1..10 {
            m.now = t * 10;
            m.finished_round();
        }
        assert_eq!(dso_then(&m, 5, 0x1000, 4).as_deref(), Some("/bin/x"));
        m.hold(None);
        m.finished_round();
        assert_eq!(m.process_count(), 0);
    }

    #[test]
    fn history_stays_bounded_without_rounds() {
        let mut m = Machine::new();
        let mut rec = Vec::new();
        for pid in 1..=(3 * VIRTUAL_ROUND as u32) {
            let t = crate::format::Task {
                pid,
                ppid: 1,
                tid: pid,
                ptid: 1,
                time: u64::from(pid) * 10,
            };
            for kind in [RecordType::FORK, RecordType::EXIT] {
                rec.clear();
                let none = crate::format::build::Trailer::None;
                crate::format::build::task(&mut rec, Endian::Little, kind, 0, &t, none);
                m.apply(&Record::new(&rec, Endian::Little, None));
            }
        }
        assert!(m.round() >= 5, "{} rounds", m.round());
        assert!(
            m.process_count() < 2 * VIRTUAL_ROUND as usize,
            "{}",
            m.process_count()
        );
    }

    #[test]
    fn a_late_older_map_counts_only_before_the_newer_one() {
        let mut m = Machine::new();
        map_at(&mut m, 1, 0x1000, 0x1000, "/new", 20);
        map_at(&mut m, 1, 0x0800, 0x2000, "/old", 10);
        assert_eq!(dso_then(&m, 1, 0x1800, 15).as_deref(), Some("/old"));
        assert_eq!(dso_then(&m, 1, 0x1800, 25).as_deref(), Some("/new"));
        assert_eq!(dso_then(&m, 1, 0x0900, 25).as_deref(), Some("/old"));
        assert_eq!(dso_then(&m, 1, 0x2100, 25).as_deref(), Some("/old"));
        assert_eq!(dso_then(&m, 1, 0x1800, 5), None);
        let v = m.maps(1, 25);
        assert_eq!(v.len(), 3);
        assert_eq!((v[2].start, v[2].pgoff), (0x2000, 0x1800));
    }

    #[test]
    fn overlapping_maps_are_split() {
        let mut m = Machine::new();
        map(&mut m, 1, 0x1000, 0x3000, "/a");
        map(&mut m, 1, 0x2000, 0x1000, "/b");
        assert_eq!(dso_at(&m, 1, 0x1fff).as_deref(), Some("/a"));
        assert_eq!(dso_at(&m, 1, 0x2000).as_deref(), Some("/b"));
        assert_eq!(dso_at(&m, 1, 0x3000).as_deref(), Some("/a"));
        let tail = m.maps(1, u64::MAX)[2];
        assert_eq!((tail.start, tail.end, tail.pgoff), (0x3000, 0x4000, 0x2000));
        map(&mut m, 1, 0x0, 0x10000, "/c");
        assert_eq!(m.maps(1, u64::MAX).len(), 1);
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
            time: None,
        });
        assert_eq!(m.dso(k).name, b"[kernel.kallsyms]");
        assert!(m.dso(k).kernel);
        let a = 0xffff_ffff_8100_1000;
        assert_eq!(m.find(42, misc::KERNEL, a, 0).map(|x| x.dso), Some(k));
        assert!(m.find(42, misc::USER, a, 0).is_none());
        assert!(m.find(42, misc::HYPERVISOR, a, 0).is_none());
    }

    #[test]
    fn anonymous_memory_is_a_dso_of_the_process_that_mapped_it() {
        let mut m = Machine::new();
        let a = map_at(&mut m, 1, 0x7000, 0x1000, "//anon", 1);
        let b = map_at(&mut m, 2, 0x7000, 0x1000, "//anon", 2);
        assert_ne!(a, b, "two JITs' code at one address");
        assert_eq!(m.dso(b).identity, Identity::Anon { pid: 2 });
        m.fork(3, 1, 3, 5);
        assert_eq!(
            m.find(3, misc::USER, 0x7800, 6).map(|x| x.dso),
            Some(a),
            "the parent's"
        );
        let c = map_at(&mut m, 1, 0x9000, 0x1000, "/usr/lib/libc.so.6", 7);
        let d = map_at(&mut m, 2, 0x9000, 0x1000, "/usr/lib/libc.so.6", 8);
        assert_eq!(c, d);
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

//! `--mmap2-buildid-all` and `--mmap2-buildids` (`perf inject --mmap2-buildid-all` and `-B`): the
//! build ids go into the maps themselves, as MMAP2 records in build-id form, instead of
//! HEADER_BUILD_ID records beside them.
//!
//! The record is laid out as the kernel writes it with `perf record --buildid-mmap` and as
//! upstream's `perf_event__synthesize_mmap2_build_id()` (`tools/perf/util/synthetic-events.c`)
//! writes it: type MMAP2, misc | `PERF_RECORD_MISC_MMAP_BUILD_ID` (bit 14); `pid, tid, start, len,
//! pgoff`; in place of `maj, min, ino, ino_generation` the 24 bytes `u8 build_id_size, u8
//! __reserved_1, u16 __reserved_2, u8 build_id[20]` (zero-padded); `prot, flags`; the file name,
//! NUL-terminated and zero-padded to 8 bytes; then the `sample_id` trailer.
//!
//! - **`--mmap2-buildid-all`** ([`Mmap2All`]): every MMAP and MMAP2 whose file has a build id is
//!   rewritten in place, keeping its trailer byte for byte (an MMAP becomes an MMAP2 with `prot`
//!   `PROT_EXEC` and `flags` 0, as upstream writes it). MMAP2 records that already carry an id are
//!   left alone; MMAP2 records without one (a `--buildid-mmap` recording where the kernel could not
//!   read the id because the ELF pages were not in memory) are filled from the file. Pseudo maps
//!   (`//anon`, `[heap]`, …), missing files and files without an id pass unchanged and are counted.
//!   One difference from upstream: the original misc bits beside the cpumode (`MMAP_DATA`,
//!   `PROC_MAP_PARSE_TIMEOUT`) are kept, where upstream keeps only the cpumode.
//! - **`--mmap2-buildids`** ([`Mmap2Hit`], `-B`): as upstream's lazy style, only the maps samples
//!   hit are written. The MMAP/MMAP2 of a user-space file with a build id is held back (dropped);
//!   the first sample (or callchain frame) that falls in such a map in a process gets, just
//!   before it, an MMAP2 in build-id form of that map as it stands then (its range after any later
//!   map cut it), with the sample's pid and tid, `USER | MMAP_BUILD_ID` and a `sample_id` trailer
//!   from the sample (as upstream's `mark_dso_hit()`). A forked child inherits what was written
//!   for its parent. Maps never hit are never written, which is what makes the output small.
//!   Kept as they are, so that every sample still resolves as it did: kernel maps (rewritten in
//!   place as with `--mmap2-buildid-all`: there is one per kernel image or module), MMAP2 records
//!   that carry an id, and maps without one (anonymous and JIT memory, missing files).
//!   A sample that falls in no map when it arrives (its MMAP comes later in the stream, from
//!   another cpu) is retried at the next two FINISHED_ROUNDs, as `--buildid` does.
//!
//! perf 6.1 reads these records (`machine__process_mmap2_event()` takes the id into the dso), and
//! `perf buildid-list` of a pipe output lists the ids from them. A file-mode output's build-id
//! table (what `perf buildid-list -i FILE` and `perf archive` read) is built from HEADER_BUILD_ID
//! records, so at the end of the stream both stages emit one for each dso whose id they put into
//! an MMAP2 (`-B`: the dsos samples hit and the kernel; `--mmap2-buildid-all`: every one), as
//! upstream's file output lists its dsos' ids; pipe readers take them in after every sample.
//!
//! **Order**: input order; records rewritten in place, or (`-B`) held back and inserted before the
//! sample that needs them. **Buffering**: none beyond the batch; one entry per dso, and per live
//! process the maps written for it. **EOF**: one batch of HEADER_BUILD_ID records (above); frames
//! still waiting for their map when the stream ends get none.

use std::collections::HashSet;

use perfpipe_core::{Batch, Counter, Flow, Out, Stage, StageError};

use crate::buildid::pending::Pending;
use crate::buildid::{note_header, BuildidConfig};
use crate::format::build::{self, Trailer};
use crate::format::{misc, Endian, FileId, Mmap, RecordType, SampleId, StreamInfo};
use crate::model::dso::{BuildId, Outcome, Resolver};
use crate::model::machine::{DsoId, Identity, Machine, Map, KERNEL_PID};
use crate::model::{IdHasher, IdMap};

/// The maps written for one process: start → dso.
type Written = std::collections::HashMap<u64, DsoId, std::hash::BuildHasherDefault<IdHasher>>;

/// `PROT_EXEC`, the `prot` upstream gives an MMAP it rewrites.
const PROT_EXEC: u32 = 4;

/// The MMAP2 in build-id form of map `m` with build id `id` (`misc` gets MMAP_BUILD_ID added),
/// followed by `trailer`. An MMAP's `prot` becomes `PROT_EXEC` and its `flags` 0, as upstream.
pub fn mmap2_build_id(
    m: &Mmap<'_>,
    id: &BuildId,
    misc_: u16,
    trailer: Trailer<'_>,
    e: Endian,
) -> Vec<u8> {
    let map = Mmap {
        file_id: FileId::BuildId(id.as_bytes()),
        ..*m
    };
    let mut out = Vec::with_capacity((72 + m.filename.len() + 1).next_multiple_of(8) + 48);
    build::mmap2(&mut out, e, &map, trailer);
    out[4..6].copy_from_slice(&e.put_u16(misc_ | misc::MMAP_BUILD_ID));
    out
}

/// Rewrites one MMAP or MMAP2 record (`rec`, its `header.size` bytes) to build-id form, keeping its
/// misc bits and its trailer (the bytes after the padded file name) as they are.
pub fn rewrite(rec: &[u8], m: &Mmap<'_>, id: &BuildId, e: Endian) -> Vec<u8> {
    let is_mmap = e.u32(rec, 0) == Some(RecordType::MMAP.0);
    let name_at = if is_mmap { 40 } else { 72 };
    let trailer_at = (name_at + m.filename.len() + 1).next_multiple_of(8);
    let trailer = rec.get(trailer_at..).unwrap_or_default();
    let m = if is_mmap {
        Mmap {
            prot: PROT_EXEC,
            flags: 0,
            ..*m
        }
    } else {
        *m
    };
    let misc_ = e.u16(rec, 4).unwrap_or(m.cpumode);
    mmap2_build_id(&m, id, misc_, Trailer::Raw(trailer), e)
}

/// Whether a map record is a kernel map (pid −1 or a kernel cpumode).
fn is_kernel(m: &Mmap<'_>) -> bool {
    m.pid == KERNEL_PID || m.cpumode == misc::KERNEL || m.cpumode == misc::GUEST_KERNEL
}

/// Counters both styles share.
#[derive(Debug, Default)]
struct Counts {
    rewritten: Counter,
    carried: Counter,
    missing: Counter,
    no_id: Counter,
}

impl Counts {
    fn outcome(&self, o: &Outcome) {
        match o {
            Outcome::Missing => self.missing.add(1),
            Outcome::NoBuildId => self.no_id.add(1),
            Outcome::Found(_) | Outcome::Skipped => {}
        }
    }

    fn list(&self) -> Vec<(&'static str, Counter)> {
        vec![
            ("mmaps_rewritten", self.rewritten.clone()),
            ("mmap2_ids_carried", self.carried.clone()),
            ("dsos_missing", self.missing.clone()),
            ("dsos_without_build_id", self.no_id.clone()),
        ]
    }
}

impl BuildidConfig {
    /// Builds the `--mmap2-buildid-all` stage.
    pub fn build_mmap2_all(&self) -> Mmap2All {
        Mmap2All {
            dsos: Machine::new(),
            resolver: self.resolver(),
            counted: Vec::new(),
            present: HashSet::new(),
            counts: Counts::default(),
            listed: Vec::new(),
            listed_at_end: Counter::new(),
            info: None,
        }
    }

    /// Builds the `--mmap2-buildids` (`-B`) stage.
    pub fn build_mmap2_hit(&self) -> Mmap2Hit {
        Mmap2Hit {
            machine: Machine::new(),
            resolver: self.resolver(),
            held: Vec::new(),
            prot: Vec::new(),
            counted: Vec::new(),
            written: IdMap::default(),
            born: IdMap::default(),
            pending: Pending::default(),
            pending_dropped: Counter::new(),
            present: HashSet::new(),
            counts: Counts::default(),
            held_back: Counter::new(),
            emitted: Counter::new(),
            listed: Vec::new(),
            listed_at_end: Counter::new(),
            info: None,
        }
    }
}

/// The running `--mmap2-buildid-all` stage.
#[derive(Debug)]
pub struct Mmap2All {
    /// Used only to intern dsos.
    dsos: Machine,
    resolver: Resolver,
    /// Per dso: its missing/no-id outcome was counted.
    counted: Vec<bool>,
    /// Names with a BUILD_ID record in the stream: not listed again at the end.
    present: HashSet<Vec<u8>>,
    counts: Counts,
    /// Per dso: the id its rewritten MMAPs got, listed at the end.
    listed: Vec<Option<BuildId>>,
    listed_at_end: Counter,
    info: Option<std::sync::Arc<StreamInfo>>,
}

impl Mmap2All {
    /// The same stage, reading files on `pool` (the pipeline's workers).
    pub fn on_pool(mut self, pool: std::sync::Arc<rayon::ThreadPool>) -> Mmap2All {
        self.resolver.on_pool(pool);
        self
    }

    /// Notes the id `dso`'s MMAP2 records carry, to list it at the end.
    fn list(&mut self, dso: DsoId, id: Option<BuildId>) {
        let k = dso.0 as usize;
        if self.listed.len() <= k {
            self.listed.resize(k + 1, None);
        }
        if id.is_some() {
            self.listed[k] = id;
        }
    }

    fn count_once(&mut self, dso: DsoId, o: &Outcome) {
        let k = dso.0 as usize;
        if self.counted.len() <= k {
            self.counted.resize(k + 1, false);
        }
        if !std::mem::replace(&mut self.counted[k], true) {
            self.counts.outcome(o);
        }
    }
}

impl Stage for Mmap2All {
    fn process(&mut self, mut batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        let Some(info) = StreamInfo::shared(&batch) else {
            out.push(batch);
            return Ok(Flow::Continue);
        };
        let e = info.endian;
        // Pass 1: intern the maps' dsos and start their reads, so the reads of a batch overlap.
        let mut todo: Vec<(usize, DsoId, u32)> = Vec::new();
        let mut carried = 0;
        for (i, span) in batch.spans.iter().enumerate() {
            match RecordType(span.kind) {
                RecordType::MMAP | RecordType::MMAP2 => {
                    let rec = info.record(&batch, span);
                    let Some(m) = rec.mmap() else { continue };
                    let dso = self
                        .dsos
                        .intern(m.filename, Identity::of(&m.file_id), is_kernel(&m));
                    if let FileId::BuildId(b) = m.file_id {
                        // Left alone, and listed at the end like the rest.
                        carried += 1;
                        self.list(dso, BuildId::new(b));
                        continue;
                    }
                    self.resolver.prefetch(dso, self.dsos.dso(dso), m.pid);
                    todo.push((i, dso, m.pid));
                }
                RecordType::HEADER_FEATURE | RecordType::HEADER_BUILD_ID => {
                    note_header(&mut self.resolver, &mut self.present, batch.bytes(span), e)
                }
                _ => {}
            }
        }
        // Pass 2: rewrite those whose id is known.
        let mut rewrites: Vec<(usize, Vec<u8>)> = Vec::new();
        for (i, dso, pid) in todo {
            let outcome = self.resolver.resolve(dso, self.dsos.dso(dso), pid);
            self.count_once(dso, &outcome);
            if let Outcome::Found(id) = outcome {
                self.list(dso, Some(id));
                let rec = info.record(&batch, &batch.spans[i]);
                if let Some(m) = rec.mmap() {
                    rewrites.push((i, rewrite(rec.sized(), &m, &id, e)));
                }
            }
        }
        self.info = Some(info);
        if carried != 0 {
            self.counts.carried.add(carried);
        }
        if !rewrites.is_empty() {
            self.counts.rewritten.add(rewrites.len() as u64);
            for (i, bytes) in rewrites {
                let old = batch.spans[i];
                let span = batch.append(&bytes, RecordType::MMAP2.0, old.tag);
                batch.spans[i] = span;
            }
        }
        out.push(batch);
        Ok(Flow::Continue)
    }

    /// At the end, one HEADER_BUILD_ID record per dso whose MMAP2 records carry an id (rewritten
    /// or already so), for a file-mode output's build-id table (see [`Mmap2Hit`]'s).
    fn flush(&mut self, out: &mut Out<'_>) -> Result<(), StageError> {
        let ids = self
            .listed
            .iter()
            .enumerate()
            .filter_map(|(k, id)| Some((DsoId(k as u32), (*id)?)));
        list_at_end(
            ids,
            &self.dsos,
            &self.present,
            self.info.clone(),
            &self.listed_at_end,
            out,
        );
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        let mut c = self.counts.list();
        c.push(("build_ids_listed_at_end", self.listed_at_end.clone()));
        c
    }
}

/// Emits one batch of HEADER_BUILD_ID records for `ids` (dsos of `machine`), but for names that
/// already have one in the stream.
fn list_at_end(
    ids: impl Iterator<Item = (DsoId, BuildId)>,
    machine: &Machine,
    present: &HashSet<Vec<u8>>,
    info: Option<std::sync::Arc<StreamInfo>>,
    counter: &Counter,
    out: &mut Out<'_>,
) {
    let Some(info) = info else { return };
    let records: Vec<Vec<u8>> = ids
        .map(|(dso, id)| (machine.dso(dso), id))
        .filter(|(d, _)| !present.contains(&d.name))
        .map(|(d, id)| crate::buildid::record::build_id(&id, &d.name, d.kernel, info.endian))
        .collect();
    if records.is_empty() {
        return;
    }
    counter.add(records.len() as u64);
    let mut batch = out.take();
    for bytes in &records {
        let span = batch.append(bytes, RecordType::HEADER_BUILD_ID.0, 0);
        batch.spans.push(span);
    }
    batch.context = Some(info);
    out.push(batch);
}

/// When a process was forked, and when it last mapped each held-back dso (the times of the
/// records, from their `sample_id` trailers).
#[derive(Debug, Default)]
struct Times {
    fork: Option<u64>,
    maps: std::collections::HashMap<DsoId, u64>,
}

/// What to do with one record of a batch (`--mmap2-buildids`).
enum Action {
    /// Drop it (a map held back).
    Remove,
    /// Put these bytes in its place (kind MMAP2).
    Replace(Vec<u8>),
    /// Insert this MMAP2 (with this attr tag) before it.
    Before(Vec<u8>, u32),
}

/// A user-mode frame of a sample: its process and address, the sample's trailer values and attr.
#[derive(Clone, Copy, Debug)]
struct Frame {
    pid: u32,
    ip: u64,
    id: SampleId,
    attr: u16,
}

/// The running `--mmap2-buildids` (`-B`) stage.
#[derive(Debug)]
pub struct Mmap2Hit {
    machine: Machine,
    resolver: Resolver,
    /// Per dso: its maps are held back, with this id (a user-space file with a build id); for a
    /// kernel dso, the id its rewritten MMAP got.
    held: Vec<Option<BuildId>>,
    /// Per dso: `prot` and `flags` of its last MMAP2.
    prot: Vec<(u32, u32)>,
    /// Per dso: its missing/no-id outcome was counted.
    counted: Vec<bool>,
    /// Per process: the maps (start, dso) written for it so far.
    written: IdMap<u32, Written>,
    /// Per process: when it was forked and when it mapped each held-back dso.
    born: IdMap<u32, Times>,
    /// Frames that fell in no map when they came, retried at the next two FINISHED_ROUNDs: one
    /// entry per distinct (process, address), with its earliest and latest samples
    /// ([`crate::buildid::pending`]).
    pending: Pending<Frame>,
    /// Distinct unresolved frames not kept for a retry.
    pending_dropped: Counter,
    present: HashSet<Vec<u8>>,
    counts: Counts,
    held_back: Counter,
    emitted: Counter,
    /// Per dso: an MMAP2 in build-id form was written for it (listed at the end).
    listed: Vec<bool>,
    listed_at_end: Counter,
    /// The stream's info, for the batch `flush` emits.
    info: Option<std::sync::Arc<StreamInfo>>,
}

impl Mmap2Hit {
    /// Marks `dso` as written in build-id form.
    fn list(&mut self, dso: DsoId) {
        let k = dso.0 as usize;
        if self.listed.len() <= k {
            self.listed.resize(k + 1, false);
        }
        self.listed[k] = true;
    }

    /// The same stage, reading files on `pool` (the pipeline's workers).
    pub fn on_pool(mut self, pool: std::sync::Arc<rayon::ThreadPool>) -> Mmap2Hit {
        self.resolver.on_pool(pool);
        self
    }

    /// The MMAP2 for map `m` of `p.pid` at a frame of sample `p`, if it is a held-back map not
    /// yet written for that process.
    fn hit(&mut self, m: Map, p: &Frame, info: &StreamInfo) -> Option<Vec<u8>> {
        let id = (*self.held.get(m.dso.0 as usize)?)?;
        if self
            .written
            .entry(p.pid)
            .or_default()
            .insert(m.start, m.dso)
            == Some(m.dso)
        {
            return None;
        }
        let (prot, flags) = self
            .prot
            .get(m.dso.0 as usize)
            .copied()
            .unwrap_or((PROT_EXEC, 0));
        let d = self.machine.dso(m.dso);
        let map = Mmap {
            pid: p.id.pid.unwrap_or(p.pid),
            tid: p.id.tid.unwrap_or(p.pid),
            addr: m.start,
            len: m.end - m.start,
            pgoff: m.pgoff,
            file_id: FileId::None,
            prot,
            flags,
            filename: &d.name,
            cpumode: misc::USER,
        };
        // perf's reader sorts by time, and within a round the samples of other cpus come in any
        // order: the map must be in place before every sample that falls in it, not just this
        // one. So its time is that of the process's own MMAP of the dso (before any sample in
        // it), or for a map inherited from the parent, just after the process's FORK; failing
        // both, just before this sample.
        let time = self
            .born
            .get(&p.pid)
            .and_then(|b| b.maps.get(&m.dso).copied().or(b.fork.map(|t| t + 1)))
            .or(p.id.time.map(|t| t.saturating_sub(1)));
        let id_fields = SampleId { time, ..p.id };
        let trailer = Trailer::of(info.attr(p.attr), id_fields);
        self.emitted.add(1);
        let bytes = mmap2_build_id(&map, &id, misc::USER, trailer, info.endian);
        self.list(m.dso);
        Some(bytes)
    }

    /// The user-mode frames of a sample (its ip, then its callchain), into `out`.
    fn frames(s: &crate::format::Sample<'_>, out: &mut Vec<u64>) {
        out.clear();
        let mode = s.cpumode();
        if mode == misc::USER {
            out.extend(s.ip());
        }
        if let Some(cc) = s.callchain() {
            out.extend(
                cc.frames(mode)
                    .filter(|&(m, _)| m == misc::USER)
                    .map(|(_, ip)| ip),
            );
        }
    }
}

impl Stage for Mmap2Hit {
    fn process(&mut self, mut batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        let Some(info) = StreamInfo::shared(&batch) else {
            out.push(batch);
            return Ok(Flow::Continue);
        };
        let e = info.endian;
        // Samples wait for their maps two rounds at most: the model keeps their history.
        self.machine
            .hold(Some(self.machine.round().saturating_sub(2)));
        // Pass 1: start the reads of the batch's new dsos.
        for span in &batch.spans {
            if matches!(RecordType(span.kind), RecordType::MMAP | RecordType::MMAP2) {
                let rec = info.record(&batch, span);
                if let Some(m) = rec.mmap() {
                    let dso =
                        self.machine
                            .intern(m.filename, Identity::of(&m.file_id), is_kernel(&m));
                    self.resolver.prefetch(dso, self.machine.dso(dso), m.pid);
                }
            }
        }
        // Pass 2: in order, model the machine and decide what each record becomes.
        let mut actions: Vec<(usize, Action)> = Vec::new();
        let mut carried = 0;
        let mut rewritten = 0;
        let mut held_back = 0;
        let mut dropped = 0;
        let mut ips: Vec<u64> = Vec::new();
        for (i, span) in batch.spans.iter().enumerate() {
            match RecordType(span.kind) {
                RecordType::SAMPLE => {
                    let rec = info.record(&batch, span);
                    let Some(s) = rec.sample() else { continue };
                    let pid = s.pid().unwrap_or(u32::MAX);
                    let id = SampleId {
                        pid: s.pid(),
                        tid: s.tid(),
                        time: s.time(),
                        id: s.id(),
                        cpu: s.cpu(),
                    };
                    Self::frames(&s, &mut ips);
                    let mut last: Option<(u64, u64)> = None;
                    for &ip in &ips {
                        if last.is_some_and(|(a, b)| (a..b).contains(&ip)) {
                            continue;
                        }
                        let p = Frame {
                            pid,
                            ip,
                            id,
                            attr: span.tag as u16,
                        };
                        match self
                            .machine
                            .find(pid, misc::USER, ip, id.time.unwrap_or(u64::MAX))
                            .copied()
                        {
                            None => {
                                let time = id.time.unwrap_or(u64::MAX);
                                if !self.pending.add((pid, misc::USER, ip), time, p) {
                                    dropped += 1;
                                }
                            }
                            Some(m) => {
                                last = Some((m.start, m.end));
                                if let Some(r) = self.hit(m, &p, &info) {
                                    actions.push((i, Action::Before(r, span.tag)));
                                }
                            }
                        }
                    }
                }
                RecordType::MMAP | RecordType::MMAP2 => {
                    let rec = info.record(&batch, span);
                    let Some(m) = rec.mmap() else { continue };
                    let Some(dso) = self.machine.apply(&rec) else {
                        continue;
                    };
                    if matches!(m.file_id, FileId::BuildId(_)) {
                        carried += 1;
                        continue;
                    }
                    let outcome = self.resolver.resolve(dso, self.machine.dso(dso), m.pid);
                    let k = dso.0 as usize;
                    if self.held.len() <= k {
                        self.held.resize(k + 1, None);
                        self.prot.resize(k + 1, (PROT_EXEC, 0));
                        self.counted.resize(k + 1, false);
                    }
                    if !std::mem::replace(&mut self.counted[k], true) {
                        self.counts.outcome(&outcome);
                    }
                    let Outcome::Found(id) = outcome else {
                        continue;
                    };
                    if is_kernel(&m) {
                        actions.push((i, Action::Replace(rewrite(rec.sized(), &m, &id, e))));
                        rewritten += 1;
                        // Only user-mode frames look maps up here: this only keeps the id.
                        self.held[k] = Some(id);
                        self.list(dso);
                    } else {
                        self.held[k] = Some(id);
                        if let Some(t) = rec.sample_id().and_then(|i| i.time) {
                            self.born.entry(m.pid).or_default().maps.insert(dso, t);
                        }
                        if RecordType(span.kind) == RecordType::MMAP2 {
                            self.prot[k] = (m.prot, m.flags);
                        }
                        actions.push((i, Action::Remove));
                        held_back += 1;
                    }
                }
                RecordType::FORK => {
                    let rec = info.record(&batch, span);
                    if let Some(t) = rec.task() {
                        if t.pid != t.ppid && t.pid == t.tid {
                            let inherited = self.written.get(&t.ppid).cloned().unwrap_or_default();
                            self.written.insert(t.pid, inherited);
                            let time = rec.sample_id().and_then(|i| i.time).unwrap_or(t.time);
                            self.born.insert(
                                t.pid,
                                Times {
                                    fork: Some(time),
                                    ..Times::default()
                                },
                            );
                        }
                    }
                    self.machine.apply(&rec);
                }
                RecordType::FINISHED_ROUND => {
                    let mut pending = std::mem::take(&mut self.pending);
                    pending.retry(|_, time, p| {
                        let Some(m) = self.machine.find(p.pid, misc::USER, p.ip, time).copied()
                        else {
                            return false;
                        };
                        if let Some(r) = self.hit(m, p, &info) {
                            actions.push((i, Action::Before(r, u32::from(p.attr))));
                        }
                        true
                    });
                    self.pending = pending;
                    self.machine.apply(&info.record(&batch, span));
                }
                RecordType::EXIT => {
                    let rec = info.record(&batch, span);
                    if let Some(t) = rec.task().filter(|t| t.pid == t.tid) {
                        // A sample after the EXIT (another cpu's) gets its map again: harmless.
                        self.written.remove(&t.pid);
                        self.born.remove(&t.pid);
                    }
                    self.machine.apply(&rec);
                }
                RecordType::COMM => {
                    self.machine.apply(&info.record(&batch, span));
                }
                RecordType::HEADER_FEATURE | RecordType::HEADER_BUILD_ID => {
                    note_header(&mut self.resolver, &mut self.present, batch.bytes(span), e)
                }
                _ => {}
            }
        }
        self.info = Some(info);
        if carried != 0 {
            self.counts.carried.add(carried);
        }
        if rewritten != 0 {
            self.counts.rewritten.add(rewritten);
        }
        if dropped != 0 {
            self.pending_dropped.add(dropped);
        }
        if held_back != 0 {
            self.held_back.add(held_back);
        }
        if !actions.is_empty() {
            let mut ed = batch.edit();
            let mut at = 0;
            let mut actions = actions.into_iter().peekable();
            while let Some(&(i, _)) = actions.peek() {
                at += ed.skip(i - at);
                ed.next_record();
                at += 1;
                while let Some((_, a)) = actions.next_if(|(j, _)| *j == i) {
                    match a {
                        Action::Before(bytes, tag) => {
                            ed.insert_before(&bytes, RecordType::MMAP2.0, tag)
                        }
                        Action::Replace(bytes) => ed.replace(&bytes),
                        Action::Remove => ed.remove(),
                    }
                }
            }
            ed.finish();
        }
        out.push_or_recycle(batch);
        Ok(Flow::Continue)
    }

    /// At the end of the stream, one HEADER_BUILD_ID record for each dso whose id went into an
    /// MMAP2 here (the dsos samples hit, and the kernel's): a file-mode output's build-id table,
    /// which `perf buildid-list` and `perf archive` read, then lists them, as upstream's `-B`
    /// output lists its hit dsos. perf's pipe readers take them in after every sample.
    fn flush(&mut self, out: &mut Out<'_>) -> Result<(), StageError> {
        let ids = self
            .listed
            .iter()
            .enumerate()
            .filter(|(_, &l)| l)
            .filter_map(|(k, _)| Some((DsoId(k as u32), (*self.held.get(k)?)?)));
        list_at_end(
            ids,
            &self.machine,
            &self.present,
            self.info.clone(),
            &self.listed_at_end,
            out,
        );
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        let mut c = self.counts.list();
        c.push(("build_ids_listed_at_end", self.listed_at_end.clone()));
        c.push(("mmaps_held_back", self.held_back.clone()));
        c.push(("mmap2_written_at_hit", self.emitted.clone()));
        c.push(("pending_frames_dropped", self.pending_dropped.clone()));
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> BuildId {
        BuildId::from_hex("0123456789abcdef0123456789abcdef01234567").unwrap()
    }

    fn map<'a>(name: &'a [u8]) -> Mmap<'a> {
        Mmap {
            pid: 7,
            tid: 8,
            addr: 0x1000,
            len: 0x2000,
            pgoff: 0x3000,
            file_id: FileId::Inode {
                maj: 8,
                min: 1,
                ino: 99,
                ino_generation: 5,
            },
            prot: 5,
            flags: 2,
            filename: name,
            cpumode: misc::USER,
        }
    }

    /// The byte layout of `struct perf_record_mmap2` in build-id form, field by field.
    #[test]
    fn layout_is_the_kernels() {
        let e = Endian::Little;
        let name = b"/usr/lib/libc.so.6";
        let m = map(name);
        let mut orig = Vec::new();
        let trailer = [0xaau8; 24];
        build::mmap2(&mut orig, e, &m, Trailer::Raw(&trailer));
        // A data map's misc bit is kept.
        orig[4..6].copy_from_slice(&e.put_u16(misc::USER | misc::COMM_EXEC));
        let r = rewrite(&orig, &m, &id(), e);
        assert_eq!(r.len(), orig.len(), "same size as the inode form");
        assert_eq!(e.u32(&r, 0), Some(10));
        assert_eq!(e.u16(&r, 4), Some(misc::USER | misc::COMM_EXEC | (1 << 14)));
        assert_eq!(usize::from(e.u16(&r, 6).unwrap()), r.len());
        assert_eq!((e.u32(&r, 8), e.u32(&r, 12)), (Some(7), Some(8)));
        assert_eq!(e.u64(&r, 16), Some(0x1000));
        assert_eq!(e.u64(&r, 24), Some(0x2000));
        assert_eq!(e.u64(&r, 32), Some(0x3000));
        assert_eq!(
            &r[40..44],
            &[20, 0, 0, 0],
            "build_id_size, __reserved_1, __reserved_2"
        );
        assert_eq!(&r[44..64], id().as_bytes());
        assert_eq!((e.u32(&r, 64), e.u32(&r, 68)), (Some(5), Some(2)));
        assert_eq!(&r[72..72 + name.len()], name);
        assert_eq!(r[72 + name.len()], 0);
        assert_eq!(&r[r.len() - 24..], &trailer, "the trailer is kept");
        let view = crate::format::Record::new(&r, e, None).mmap().unwrap();
        assert_eq!(view.file_id, FileId::BuildId(id().as_bytes()));
        assert_eq!(view.filename, name);
    }

    #[test]
    fn an_mmap_becomes_an_mmap2_with_prot_exec_and_a_short_id_is_padded() {
        let e = Endian::Big;
        let name = b"/bin/x";
        let m = Mmap {
            file_id: FileId::None,
            prot: 0,
            flags: 0,
            ..map(name)
        };
        let mut orig = Vec::new();
        build::mmap(&mut orig, e, &m, Trailer::Raw(&[1, 2, 3, 4, 5, 6, 7, 8]));
        let short = BuildId::from_hex("0102030405060708").unwrap();
        let r = rewrite(&orig, &m, &short, e);
        assert_eq!(r.len(), orig.len() + 32);
        assert_eq!(e.u32(&r, 0), Some(RecordType::MMAP2.0));
        assert_eq!(&r[40..44], &[8, 0, 0, 0]);
        assert_eq!(&r[44..52], short.as_bytes());
        assert_eq!(&r[52..64], &[0; 12]);
        assert_eq!((e.u32(&r, 64), e.u32(&r, 68)), (Some(PROT_EXEC), Some(0)));
        assert_eq!(&r[r.len() - 8..], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(r.len() % 8, 0);
    }
}

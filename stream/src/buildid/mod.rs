//! `buildid`: injects a PERF_RECORD_HEADER_BUILD_ID for every dso a sample hits, as
//! `perf inject -b` does, but streaming: each record goes out just before the first record of the
//! output that needs it, and nothing is reordered or held back.
//!
//! - The address spaces are modelled by [`crate::model::machine::Machine`] from the MMAP/MMAP2/FORK/COMM/
//!   EXIT records as they pass.
//! - A sample hits the dso mapped at its IP (in the sample's cpumode: kernel samples resolve in the
//!   kernel maps); with `callchain` set (`--buildid-callchain`) every callchain frame hits too,
//!   context markers switching the cpumode, as upstream perf ≥ 6.12 does.
//! - Build ids come from [`Resolver`]: read from the ELF file when its MMAP arrives (on the
//!   rayon pool, so a sample rarely waits), taken from MMAP2 records that carry one, from
//!   `--known-build-ids`, from `/sys/kernel/notes` for `[kernel.kallsyms]` and from this process's
//!   vdso for `[vdso]` when the recording is of this host ([`HostMode`]).
//! - Pseudo maps (`//anon`, `[heap]`, `[stack]`, `/SYSV…`, …) are skipped as perf skips them; files
//!   that are missing or have no build id are counted (`dsos_missing`, `dsos_without_build_id`) and
//!   skipped.
//!
//! The record follows current upstream ([`record::build_id`]): misc = KERNEL or USER |
//! `PERF_RECORD_MISC_BUILD_ID_SIZE`, the size byte set, padded to 8 bytes. perf 6.1 reads it.
//!
//! A dso whose name already has a BUILD_ID record earlier in the stream (a stream injected before,
//! or an earlier build-id stage) gets no second one.
//!
//! A dso whose MMAP2 carried its build id (`perf record --buildid-mmap`, perf record's default
//! since 6.17) is done: it gets no BUILD_ID record, as `perf inject` marks it hit at its MMAP2 "not
//! to inject build-id" (counter `mmap2_ids_in_stream` for those samples hit). A file-mode output
//! still lists it in its build-id table: `write`'s file mode adds every id an MMAP2 carries to the
//! table it writes (`stream/src/write/file.rs`), as perf's table lists every dso so marked.
//!
//! **Order**: input order; BUILD_ID records are inserted. **Buffering**: none beyond the batch; state
//! is one entry per live process and one per dso. **EOF**: one batch of BUILD_ID records: samples
//! and frames still waiting for their map, and an unhit vdso (see [`Stage::flush`] of
//! [`Buildid`]).

pub mod all;
pub mod bench_input;
pub mod mmap2;
pub mod pending;
pub mod record;

use std::collections::{HashMap, HashSet};

use perfpipe_core::{Batch, Counter, Flow, Out, Stage, StageError};

use crate::format::{misc, RecordType, StreamInfo};
use crate::model::dso::{BuildId, HostIds, HostMode, Outcome, Resolver};
use crate::model::machine::{DsoId, Identity, Machine};
use crate::Error;
use pending::Pending;
use perfpipe_core::spec::{Flag, Kind, Options, StageOption, StageSpec};

/// Configuration of the `buildid` and `buildid-all` stages: validated, no I/O.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BuildidConfig {
    /// Mark every callchain frame's dso as hit, not only the IP's (`--buildid-callchain`).
    pub callchain: bool,
    /// Ids given by the user, by file name (`--known-build-ids`).
    pub known: Vec<(Vec<u8>, BuildId)>,
    /// Whether kernel and vdso ids may come from this host.
    pub host: HostMode,
}

impl BuildidConfig {
    /// Parses perf's `--known-build-ids` list: `PATH=HEXID` pairs separated by commas.
    ///
    /// # Errors
    /// [`Error::BadOption`] naming the malformed pair.
    pub fn parse_known(list: &str) -> Result<Vec<(Vec<u8>, BuildId)>, Error> {
        let bad = |message: String| Error::BadOption {
            option: "--known-build-ids",
            message,
        };
        list.split(',')
            .filter(|p| !p.trim().is_empty())
            .map(|pair| {
                let (path, id) = pair
                    .rsplit_once('=')
                    .ok_or_else(|| bad(format!("`{pair}` is not PATH=BUILDID")))?;
                let id = BuildId::from_hex(id).ok_or_else(|| {
                    bad(format!(
                        "`{id}` is not a build id (1 to 20 bytes in hex) in `{pair}`"
                    ))
                })?;
                Ok((path.trim().as_bytes().to_vec(), id))
            })
            .collect()
    }

    /// The configuration the `buildid` stage's options give.
    ///
    /// # Errors
    /// [`Error::BadOption`] for a malformed `known` list.
    pub fn from_options(o: &Options) -> Result<BuildidConfig, Error> {
        Ok(BuildidConfig {
            callchain: o.switch("callchain"),
            known: o
                .text("known")
                .map(BuildidConfig::parse_known)
                .transpose()?
                .unwrap_or_default(),
            host: match o.text("host") {
                Some("yes") => HostMode::Yes,
                Some("no") => HostMode::No,
                _ => HostMode::Auto,
            },
        })
    }

    pub(crate) fn resolver(&self) -> Resolver {
        Resolver::new(
            self.known.iter().cloned().collect::<HashMap<_, _>>(),
            HostIds::of_this_host(),
            self.host,
        )
    }

    /// Builds the `buildid` stage (reads the host's kernel and vdso ids).
    pub fn build(&self) -> Buildid {
        Buildid {
            callchain: self.callchain,
            machine: Machine::new(),
            resolver: self.resolver(),
            hit: Vec::new(),
            present: HashSet::new(),
            injected: Counter::new(),
            missing: Counter::new(),
            no_id: Counter::new(),
            vdso: None,
            info: None,
            vdso_unhit: Counter::new(),
            in_stream: Counter::new(),
            pending: Pending::default(),
            pending_dropped: Counter::new(),
        }
    }
}

impl Buildid {
    /// The same stage, reading files on `pool` (the pipeline's workers).
    pub fn on_pool(mut self, pool: std::sync::Arc<rayon::ThreadPool>) -> Buildid {
        self.resolver.on_pool(pool);
        self
    }
}

/// The running `buildid` stage.
#[derive(Debug)]
pub struct Buildid {
    callchain: bool,
    machine: Machine,
    resolver: Resolver,
    /// Per dso: already hit (whatever the outcome).
    hit: Vec<bool>,
    /// Names that already have a BUILD_ID record in the stream (an injected stream, or an earlier
    /// build-id stage): not injected again.
    present: HashSet<Vec<u8>>,
    injected: Counter,
    pub(crate) missing: Counter,
    pub(crate) no_id: Counter,
    /// The first `[vdso]` map seen (dso, pid): listed at the end even if no sample hit it.
    vdso: Option<(DsoId, u32)>,
    /// The stream's info, for the batch `flush` emits.
    info: Option<std::sync::Arc<StreamInfo>>,
    /// BUILD_ID records of a vdso no sample hit, emitted at the end.
    vdso_unhit: Counter,
    /// Dsos hit whose MMAP2 carried the id: no BUILD_ID record for them.
    in_stream: Counter,
    /// Sample ips (and, with `callchain`, frames) that fell in no map when they arrived, one
    /// entry per distinct (pid, cpumode, address): see [`pending`]. Retried at each
    /// FINISHED_ROUND for two rounds, and the BUILD_ID goes before that round's end, where perf's
    /// reader still has the sample queued.
    pending: Pending<()>,
    /// Distinct unresolved frames not kept for a retry ([`pending::MAX_FRAMES`] others waited).
    pending_dropped: Counter,
}

/// Per-batch tallies, added to the counters once per batch.
#[derive(Default)]
pub(crate) struct Tally {
    pub injected: u64,
    /// Hits of dsos whose MMAP2 carried the id (`buildid` only).
    pub in_stream: u64,
    pub missing: u64,
    pub no_id: u64,
}

/// New records to insert into a batch: (index of the span they go before, bytes).
pub(crate) type Inserts = Vec<(usize, Vec<u8>)>;

/// What both build-id stages learn from header records: the host a FEATURE names (hostname,
/// kernel release) and the names that already have a BUILD_ID record, not to be injected again.
pub(crate) fn note_header(
    resolver: &mut Resolver,
    present: &mut HashSet<Vec<u8>>,
    rec: &[u8],
    e: crate::format::Endian,
) {
    match crate::format::EventHeader::parse(rec, e).map(|h| RecordType(h.type_)) {
        Some(RecordType::HEADER_FEATURE) => resolver.note_feature(&rec[8.min(rec.len())..], e),
        Some(RecordType::HEADER_BUILD_ID) => {
            if let Some((_, name, _)) = record::parse(rec, e) {
                present.insert(name.to_vec());
            }
        }
        _ => {}
    }
}

/// Places new records before the spans they precede (indices in increasing order), keeping the
/// other spans as they are; one pass, in place.
pub(crate) fn apply_inserts(batch: &mut Batch, inserts: Inserts) {
    if inserts.is_empty() {
        return;
    }
    let mut ed = batch.edit();
    let mut at = 0;
    for (before, bytes) in inserts {
        at += ed.skip(before.saturating_sub(at));
        ed.insert(&bytes, RecordType::HEADER_BUILD_ID.0, 0);
    }
}

impl Buildid {
    /// Marks `dso` hit; if this is its first hit and it has a build id, returns the record.
    fn hit(
        &mut self,
        dso: DsoId,
        pid: u32,
        e: crate::format::Endian,
        t: &mut Tally,
    ) -> Option<Vec<u8>> {
        let i = dso.0 as usize;
        if self.hit.len() <= i {
            self.hit.resize(i + 1, false);
        }
        if std::mem::replace(&mut self.hit[i], true) {
            return None;
        }
        let d = self.machine.dso(dso);
        if self.present.contains(&d.name) {
            return None;
        }
        if matches!(d.identity, Identity::BuildId(_)) {
            // Its MMAP2 carries the id: done, as perf inject marks it at the MMAP2.
            t.in_stream += 1;
            return None;
        }
        match self.resolver.resolve(dso, d, pid) {
            Outcome::Found(id) => {
                t.injected += 1;
                Some(record::build_id(&id, &d.name, d.kernel, e))
            }
            Outcome::Missing => {
                t.missing += 1;
                None
            }
            Outcome::NoBuildId => {
                t.no_id += 1;
                None
            }
            Outcome::Skipped => None,
        }
    }

    /// Retries the frames that fell in no map (`last`: the end of the stream, for the last
    /// time); returns the BUILD_ID records of new hits.
    fn retry_pending(
        &mut self,
        e: crate::format::Endian,
        t: &mut Tally,
        last: bool,
    ) -> Vec<Vec<u8>> {
        let mut records = Vec::new();
        let mut pending = std::mem::take(&mut self.pending);
        let resolve = |(pid, mode, ip): pending::Key, time: u64, _: &()| {
            let Some(dso) = self.machine.find(pid, mode, ip, time).map(|m| m.dso) else {
                return false;
            };
            if self.is_new_hit(dso) {
                records.extend(self.hit(dso, pid, e, t));
            }
            true
        };
        if last {
            pending.finish(resolve);
        } else {
            pending.retry(resolve);
        }
        self.pending = pending;
        records
    }

    /// Keeps a frame that fell in no map for a retry.
    #[inline]
    fn wait(&mut self, pid: u32, mode: u16, ip: u64, time: u64, dropped: &mut u64) {
        if !self.pending.add((pid, mode, ip), time, ()) {
            *dropped += 1;
        }
    }

    #[inline]
    fn is_new_hit(&self, dso: DsoId) -> bool {
        !self.hit.get(dso.0 as usize).copied().unwrap_or(false)
    }
}

impl Stage for Buildid {
    fn process(&mut self, mut batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        let Some(info) = StreamInfo::shared(&batch) else {
            out.push(batch);
            return Ok(Flow::Continue);
        };
        let e = info.endian;
        // Samples wait for their maps two rounds at most: the model keeps their history.
        self.machine
            .hold(Some(self.machine.round().saturating_sub(2)));
        let mut inserts: Inserts = Vec::new();
        let mut t = Tally::default();
        let mut hits: Vec<(DsoId, u32)> = Vec::new();
        let mut dropped = 0;
        for (i, span) in batch.spans.iter().enumerate() {
            match RecordType(span.kind) {
                RecordType::SAMPLE => {
                    let rec = info.record(&batch, span);
                    let Some(s) = rec.sample() else { continue };
                    let pid = s.pid().unwrap_or(u32::MAX);
                    let mode = s.cpumode();
                    let time = s.time().unwrap_or(u64::MAX);
                    hits.clear();
                    if let Some(ip) = s.ip() {
                        match self.machine.find(pid, mode, ip, time) {
                            Some(m) if self.is_new_hit(m.dso) => hits.push((m.dso, pid)),
                            Some(_) => {}
                            None => self.wait(pid, mode, ip, time, &mut dropped),
                        }
                    }
                    if self.callchain {
                        if let Some(cc) = s.callchain() {
                            let mut last: Option<(u16, u64, u64)> = None;
                            for (mode, ip) in cc.frames(mode) {
                                if last.is_some_and(|(m, a, b)| m == mode && (a..b).contains(&ip)) {
                                    continue;
                                }
                                match self.machine.find(pid, mode, ip, time) {
                                    Some(m) => {
                                        last = Some((mode, m.start, m.end));
                                        if self.is_new_hit(m.dso)
                                            && !hits.iter().any(|h| h.0 == m.dso)
                                        {
                                            hits.push((m.dso, pid));
                                        }
                                    }
                                    // Its map (or its process's FORK) may come later in the
                                    // round: retried as a sample ip is.
                                    None => self.wait(pid, mode, ip, time, &mut dropped),
                                }
                            }
                        }
                    }
                    for &(dso, pid) in &hits {
                        if let Some(r) = self.hit(dso, pid, e, &mut t) {
                            inserts.push((i, r));
                        }
                    }
                }
                RecordType::MMAP | RecordType::MMAP2 => {
                    let rec = info.record(&batch, span);
                    if let Some(dso) = self.machine.apply(&rec) {
                        let pid = rec.mmap().map_or(u32::MAX, |m| m.pid);
                        self.resolver.prefetch(dso, self.machine.dso(dso), pid);
                        if self.vdso.is_none() && self.machine.dso(dso).name == b"[vdso]" {
                            self.vdso = Some((dso, pid));
                        }
                    }
                }
                RecordType::FINISHED_ROUND => {
                    for r in self.retry_pending(e, &mut t, false) {
                        inserts.push((i, r));
                    }
                    self.machine.apply(&info.record(&batch, span));
                }
                RecordType::FORK | RecordType::EXIT | RecordType::COMM => {
                    self.machine.apply(&info.record(&batch, span));
                }
                RecordType::HEADER_FEATURE | RecordType::HEADER_BUILD_ID => {
                    note_header(&mut self.resolver, &mut self.present, batch.bytes(span), e)
                }
                _ => {}
            }
        }
        apply_inserts(&mut batch, inserts);
        t.flush(&self.injected, &self.missing, &self.no_id);
        if t.in_stream != 0 {
            self.in_stream.add(t.in_stream);
        }
        if dropped != 0 {
            self.pending_dropped.add(dropped);
        }
        self.info = Some(info);
        out.push(batch);
        Ok(Flow::Continue)
    }

    /// At the end of the stream, in one batch of BUILD_ID records:
    /// - the hits of samples and frames still waiting for their map (the stream ended before the
    ///   next FINISHED_ROUND could retry them);
    /// - the vdso, mapped but never hit: perf's table always lists it (counter
    ///   `vdso_listed_unhit`).
    ///
    /// A file-mode output's table thus lists what `perf inject -b`'s lists (the dsos whose MMAP2
    /// carried an id, which perf marks hit there, `write` adds itself). perf's pipe readers
    /// ignore the unhit ones (no sample needs them).
    fn flush(&mut self, out: &mut Out<'_>) -> Result<(), StageError> {
        let Some(info) = self.info.clone() else {
            return Ok(());
        };
        let e = info.endian;
        let mut t = Tally::default();
        let mut records = self.retry_pending(e, &mut t, true);
        t.flush(&self.injected, &self.missing, &self.no_id);
        if t.in_stream != 0 {
            self.in_stream.add(t.in_stream);
        }

        if let Some((dso, pid)) = self.vdso {
            let d = self.machine.dso(dso);
            if self.is_new_hit(dso) && !self.present.contains(&d.name) {
                if let Outcome::Found(id) = self.resolver.resolve(dso, d, pid) {
                    records.push(record::build_id(&id, &d.name, d.kernel, e));
                    self.vdso_unhit.add(1);
                }
            }
        }

        if !records.is_empty() {
            let mut batch = out.take();
            for bytes in &records {
                let span = batch.append(bytes, RecordType::HEADER_BUILD_ID.0, 0);
                batch.spans.push(span);
            }
            batch.context = Some(info);
            out.push(batch);
        }
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        let mut c = counters(&self.injected, &self.missing, &self.no_id);
        c.push(("mmap2_ids_in_stream", self.in_stream.clone()));
        c.push(("vdso_listed_unhit", self.vdso_unhit.clone()));
        c.push(("pending_frames_dropped", self.pending_dropped.clone()));
        c
    }
}

impl Tally {
    pub(crate) fn flush(&self, injected: &Counter, missing: &Counter, no_id: &Counter) {
        if self.injected != 0 {
            injected.add(self.injected);
        }
        if self.missing != 0 {
            missing.add(self.missing);
        }
        if self.no_id != 0 {
            no_id.add(self.no_id);
        }
    }
}

pub(crate) fn counters(
    injected: &Counter,
    missing: &Counter,
    no_id: &Counter,
) -> Vec<(&'static str, Counter)> {
    vec![
        ("build_ids_injected", injected.clone()),
        ("dsos_missing", missing.clone()),
        ("dsos_without_build_id", no_id.clone()),
    ]
}

/// The cpumode misc of a BUILD_ID record for a dso.
pub(crate) fn misc_for(kernel: bool) -> u16 {
    if kernel {
        misc::KERNEL
    } else {
        misc::USER
    }
}

/// How the build-id stages appear on the command line: `--buildid` (`perf inject -b`),
/// `--buildid-callchain`, `--known-build-ids LIST` and `--buildid-all` each add a stage where they
/// stand; `--host-ids WHEN` sets how every one of them treats the kernel and vdso.
pub const SPEC: StageSpec = StageSpec {
    name: "buildid",
    help: "inject a BUILD_ID record before the first sample that hits each dso (perf inject -b)",
    flags: &[
        Flag::stage(
            "buildid",
            "inject a BUILD_ID record before the first sample that hits each dso (perf inject -b)",
        ),
        Flag::stage(
            "buildid-callchain",
            "like --buildid, and every callchain frame's dso counts as hit (perf >= 6.12)",
        )
        .setting(&[("callchain", "yes")]),
        Flag::stage_value(
            "known-build-ids",
            "known",
            "like --buildid, with build ids given as PATH=HEXID,... (perf inject --known-build-ids)",
        ),
        Flag::stage(
            "buildid-all",
            "inject a BUILD_ID record before the MMAP of every dso (perf inject --buildid-all)",
        )
        .setting(&[("all", "yes")]),
        Flag::stage(
            "mmap2-buildids",
            "put the build id into the MMAP2 of each map a sample hits, dropping the maps no \
             sample hits (perf inject -B)",
        )
        .setting(&[("mmap2", "yes")]),
        Flag::stage(
            "mmap2-buildid-all",
            "rewrite every MMAP/MMAP2 of a file with a build id as an MMAP2 carrying it \
             (perf inject --mmap2-buildid-all)",
        )
        .setting(&[("mmap2", "yes"), ("all", "yes")]),
        Flag::option(
            "host-ids",
            "host",
            "whether [kernel.kallsyms] and [vdso] get this host's build ids: auto (unless the \
             stream's hostname or kernel release names another host), yes or no",
        ),
    ],
    options: &[
        StageOption {
            key: "callchain",
            kind: Kind::Switch,
            help: "every callchain frame's dso counts as hit, not only the sample ip's",
        },
        StageOption {
            key: "known",
            kind: Kind::Text("LIST"),
            help: "build ids to use instead of reading the files: PATH=HEXID,...",
        },
        StageOption {
            key: "all",
            kind: Kind::Switch,
            help: "every mapped dso, before its MMAP, hit or not (--buildid-all)",
        },
        StageOption {
            key: "mmap2",
            kind: Kind::Switch,
            help: "build ids go into MMAP2 records instead of BUILD_ID records (with all: every \
                   map; else the maps samples hit)",
        },
        StageOption {
            key: "host",
            kind: Kind::Choice(&["auto", "yes", "no"]),
            help: "kernel and vdso ids from this host: auto, yes or no",
        },
    ],
    build: |ctx, o| {
        let config = BuildidConfig::from_options(o)?;
        let pool = ctx.workers.pool()?;
        Ok(if o.switch("mmap2") && o.switch("all") {
            Box::new(config.build_mmap2_all().on_pool(pool))
        } else if o.switch("mmap2") {
            Box::new(config.build_mmap2_hit().on_pool(pool))
        } else if o.switch("all") {
            Box::new(config.build_all().on_pool(pool))
        } else {
            Box::new(config.build().on_pool(pool))
        })
    },
    needs: &["decompress"],
};

#[cfg(test)]
pub(crate) mod tests;

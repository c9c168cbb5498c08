//! `symbolize`: resolves each sample's ip and callchain to frames of (dso, function, offset), for
//! the profile outputs (folded stacks, flame graphs) to aggregate and name.
//!
//! The stage follows the address spaces of the stream with the [`perfpipe_stream::model::machine`] model (MMAP,
//! MMAP2, FORK, EXIT, kept by time) and each thread's name over time (COMM, FORK). For every
//! SAMPLE it maps the ip, or each callchain entry with its context markers applied, to a
//! [`Frame`]: the dso and the file-relative address (`ip - map.start + map.pgoff`, perf's
//! `map__map_ip()`), in the maps of the sample's process **at the sample's time**, as perf finds
//! them after sorting the records by time. It attaches the frames of a batch's samples to the
//! batch as a [`Stacks`] annotation; records pass unchanged.
//!
//! Names come from [`Symbols`]: each dso's symbol table starts loading on the pipeline's worker
//! pool when the first sample hits it (not at its MMAP: a system-wide recording maps every dso of
//! every process, and its samples hit a few), and a name is looked up once per distinct address, by the
//! sink, when it writes (so a million samples of one loop cost one lookup, and the stream never
//! waits for a file). Kernel frames are named from this host's `/proc/kallsyms` when the recording
//! is of this host (`kernel=auto`: the stream's hostname and kernel release, as `--host-ids`).
//!
//! - **Order**: input order. **Buffering**: a batch is held until two more FINISHED_ROUNDs have
//!   arrived (or [`HOLD_MAX_BYTES`](perfpipe_stream::model::hold::HOLD_MAX_BYTES) are held: the
//!   stream model's [`Hold`]), and its samples are looked up then: records are ordered by time only
//!   across rounds, so the maps, FORKs and COMMs older than a sample may come up to two rounds
//!   after it in the stream (perf flushes its time-ordered queue one round behind). Side-band
//!   records are applied to the models as they arrive.
//! - **Counters**: `samples`, `frames`, `samples_without_ip`, `callchains_corrupt`,
//!   `frames_unmapped` (user frames no map covered at the sample's time: `[unknown]`), and the
//!   symbol tables'; the sources' when it is the first stage of the pipeline to take them (they
//!   are shared with `unwind`, which comes first when the chain has it: one set a run).

#[cfg(test)]
mod stage_tests;

use std::collections::BTreeMap;
use std::sync::Arc;

use perfpipe_core::{Batch, Counter, Flow, NoteValue, Notes, Out, Stage, StageError};

use crate::symbols::sources::locate::Inode;
pub use crate::symbols::{DsoDesc, FrameKind, Query, Resolved, Symbols, SymbolsConfig};
use perfpipe_core::spec::{BuildCtx, Flag, FlagValue, Kind, Options, StageOption, StageSpec};
use perfpipe_stream::format::{context, misc, Endian, Record, RecordType, Sample, StreamInfo};
use perfpipe_stream::model::dso::{HostIds, HostMode, StreamHost};
use perfpipe_stream::model::hold::{Hold, Holding};
use perfpipe_stream::model::machine::{DsoId, Machine, Map};
use perfpipe_stream::model::threads::Threads;

/// Configuration of a `symbolize` stage. Plain data; no I/O.
#[derive(Clone, Debug, Default)]
pub struct SymbolizeConfig {
    /// Inlined functions as frames of their own (`--inline`).
    pub inline: bool,
    /// Keep names mangled.
    pub no_demangle: bool,
    /// Whether kernel frames are named from this host's kallsyms.
    pub kernel: HostMode,
    /// The user addresses no map covers are one frame (`unmapped=merge`), not one per address
    /// and process: for outputs that name them all `[unknown]` (folded stacks without `addrs`).
    pub merge_unmapped: bool,
    /// Where else symbols are looked for: `--symbols`, `--symfs`, `debuginfod` (the
    /// environment's, as perf and elfutils read it, is added in `build`).
    pub sources: crate::symbols::sources::SourcesConfig,
    /// `--kallsyms FILE`: the kernel's symbols, whatever the stream says.
    pub kallsyms: Option<std::path::PathBuf>,
    /// `debuginfod=URLS|no`: the servers instead of `DEBUGINFOD_URLS` (`no`: none).
    pub debuginfod: Option<String>,
}

impl SymbolizeConfig {
    /// The configuration that checked options give.
    pub fn from_options(o: &Options) -> SymbolizeConfig {
        SymbolizeConfig {
            inline: o.switch("inline"),
            no_demangle: o.has("demangle") && !o.switch("demangle"),
            kernel: match o.text("kernel") {
                Some("yes") => HostMode::Yes,
                Some("no") => HostMode::No,
                _ => HostMode::Auto,
            },
            merge_unmapped: o.text("unmapped") == Some("merge"),
            sources: crate::symbols::sources::SourcesConfig {
                symfs: o.text("symfs").map(Into::into),
                symbols: o.texts("symbols").map(Into::into).collect(),
                ..Default::default()
            },
            kallsyms: o.text("kallsyms").map(Into::into),
            debuginfod: o.text("debuginfod").map(Into::into),
        }
    }

    /// The sources this configuration names, opened, with the environment's build-id cache and
    /// debuginfod servers.
    ///
    /// # Errors
    /// A `--symbols` that is neither a directory nor a file.
    pub fn open_sources(&self) -> Result<crate::symbols::sources::Sources, String> {
        self.sources.open_with(self.debuginfod.as_deref())
    }

    /// [`SymbolizeConfig::open_sources`] once per pipeline: shared with the pipeline's other
    /// stages that read dsos' files ([`SourcesConfig::shared`](crate::symbols::sources::SourcesConfig::shared)).
    ///
    /// # Errors
    /// As [`SymbolizeConfig::open_sources`].
    pub fn shared_sources(
        &self,
        ctx: &BuildCtx,
    ) -> Result<Arc<crate::symbols::sources::Sources>, String> {
        self.sources.shared(ctx, self.debuginfod.as_deref())
    }

    /// Builds the stage; symbol tables load on `pool` (inline when `None`), looked for in
    /// `sources` too (opened for this stage, or shared with the pipeline's other stages).
    pub fn build_with(
        &self,
        pool: Option<Arc<rayon::ThreadPool>>,
        sources: impl Into<Arc<crate::symbols::sources::Sources>>,
    ) -> Symbolize {
        let sources = sources.into();
        sources.warm(pool.as_deref());
        let reports_sources = sources.join();
        let symbols = Symbols::new(
            SymbolsConfig {
                inline: self.inline,
                demangle: !self.no_demangle,
                host_kernel: self.kernel != HostMode::No,
                kallsyms_file: self.kallsyms.clone(),
                sources,
                ..SymbolsConfig::default()
            },
            pool,
        );
        Symbolize {
            reports_sources,
            symbols: Arc::new(symbols),
            dsos: Arc::default(),
            frames_by_key: Interner {
                merge_unmapped: self.merge_unmapped,
                ..Interner::default()
            },
            cache: FrameCache::default(),
            chains: ChainCache::default(),
            kernel: self.kernel,
            host: StreamHost::default(),
            this_host: HostIds::of_this_host(),
            machine: Machine::new(),
            threads: Threads::default(),
            anon: Vec::new(),
            wanted: Wanted::default(),
            held: Hold::default(),
            untimed: Vec::new(),
            frames_per_record: 0,
            last_chain: Vec::new(),
            last_space: (u32::MAX, (u64::MAX, u64::MAX)),
            chain: Vec::new(),
            comm_index: Default::default(),
            samples: Counter::new(),
            frames: Counter::new(),
            no_ip: Counter::new(),
            corrupt: Counter::new(),
            unmapped_frames: Counter::new(),
            unnamed: Counter::new(),
            leaf_samples: LeafSamples::default(),
            notes: Notes::new(),
            dump: None,
        }
    }

    /// Builds the stage with no source but the recorded paths (and this host's kernel).
    pub fn build(&self, pool: Option<Arc<rayon::ThreadPool>>) -> Symbolize {
        self.build_with(pool, crate::symbols::sources::Sources::none())
    }
}

/// What an output that names every user address no map covers `[unknown]` sets on the stage (a
/// [`FormatSpec::sets`](perfpipe_core::spec::FormatSpec::sets)): one frame for them all
/// (`unmapped=merge`), instead of one per address and process. On a recording of programs whose
/// frame-pointer chains run into junk (interpreters, code built without frame pointers) those
/// are most of the distinct frames (930 K of 945 K on the benchmark's), and so most of the
/// distinct stacks, of the stage's time and of the sink's memory.
pub fn merge_unmapped(_: &Options) -> &'static [(&'static str, &'static str, &'static str)] {
    &[("symbolize", "unmapped", "merge")]
}

/// What identifies a frame's code; see [`Frame::key`].
pub type FrameKey = (Option<DsoId>, u64, bool, u32);

/// One frame of a sample: where its address is, for [`Symbols::resolve`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The address to resolve.
    pub query: Query,
    /// The address means the same code in every process (a file or the kernel), so the frames of
    /// two processes at one dso and offset are one frame; false for anonymous (JIT) memory and
    /// unmapped addresses, which are per process.
    pub shared: bool,
}

impl Frame {
    /// What identifies the frame's code: (dso, address, kernel, pid) with the pid 0 for a shared
    /// frame and the raw address for an unmapped one.
    pub fn key(&self) -> FrameKey {
        let q = &self.query;
        let addr = if q.dso.is_some() { q.rel } else { q.ip };
        (q.dso, addr, q.kernel, if self.shared { 0 } else { q.pid })
    }
}

/// A frame's id: its index in the stream's [`Frames`].
pub type FrameId = u32;

/// Every distinct frame of a stream, by [`FrameId`]: the stage interns each frame it maps (one
/// hash lookup, on the stage's thread) and the sinks aggregate ids, reading the frames themselves
/// only when they write. Append-only.
#[derive(Debug, Default)]
pub struct Frames(std::sync::RwLock<Vec<Frame>>);

impl Frames {
    /// The frames so far (a copy, taken under the lock once).
    pub fn snapshot(&self) -> Vec<Frame> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn push(&self, frame: Frame) {
        self.0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(frame);
    }
}

/// A frame of the sample being mapped: its cpumode and address, then its id and the dso of the
/// map that covered it.
#[derive(Clone, Copy, Debug)]
struct Step {
    mode: u16,
    ip: u64,
    id: FrameId,
    dso: Place,
}

/// The dso of the map that covered a frame ([`DsoId`]'s index), or [`UNMAPPED`].
type Place = u32;

/// The [`Place`] of a frame no map covered.
const UNMAPPED: Place = Place::MAX;

/// One sample of a [`Stacks`] annotation.
#[derive(Clone, Debug)]
pub struct StackSample {
    /// The sample's record: its span's `start` in the batch.
    pub start: u32,
    /// Its attr's index (the span's `tag`).
    pub attr: u16,
    /// `pid`, `tid` (`u32::MAX` when the sample has none).
    pub pid: u32,
    /// `tid`
    pub tid: u32,
    /// `cpu` (`u32::MAX` when the sample has none).
    pub cpu: u32,
    /// `time` (0 when the sample has none).
    pub time: u64,
    /// `period` (1 when the sample has none).
    pub period: u64,
    /// The thread's name at the sample's time, in [`Stacks::comm`]; [`NO_COMM`] for a thread no
    /// COMM named.
    comm: u32,
    frames: (u32, u32),
}

/// A [`StackSample`] of a thread no COMM named.
const NO_COMM: u32 = u32::MAX;

/// A dso as the stream named it, for outputs that describe the mappings (pprof's `Mapping`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DsoInfo {
    /// The file name from the MMAP.
    pub name: Arc<str>,
    /// The build id the MMAP2 carried, if any.
    pub build_id: Option<Arc<[u8]>>,
    /// Mapped by a kernel map.
    pub kernel: bool,
}

/// The dsos of a stream by [`DsoId`], shared by the stage (which adds them as MMAPs arrive) and
/// the sinks; append-only.
#[derive(Debug, Default)]
pub struct Dsos(std::sync::RwLock<Vec<Option<DsoInfo>>>);

impl Dsos {
    /// The dso of an id, if the stage has seen it.
    pub fn get(&self, id: DsoId) -> Option<DsoInfo> {
        let v = self
            .0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        v.get(id.0 as usize).cloned().flatten()
    }

    fn set(&self, id: DsoId, info: DsoInfo) {
        let mut v = self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let i = id.0 as usize;
        if v.len() <= i {
            v.resize(i + 1, None);
        }
        v[i] = Some(info);
    }
}

/// The frames of a batch's samples, as the `symbolize` stage attaches them
/// ([`Batch::annotation`]); a sink reads a sample's frames by its record
/// ([`Stacks::samples`] are in record order).
#[derive(Debug)]
pub struct Stacks {
    /// Where to look names up.
    pub symbols: Arc<Symbols>,
    /// The stream's dsos.
    pub dsos: Arc<Dsos>,
    /// The stream's frames, which [`Stacks::frames`] gives the ids of.
    pub table: Arc<Frames>,
    /// Whether kernel frames may be named from this host's kallsyms.
    pub host_kernel: bool,
    samples: Vec<StackSample>,
    frames: Vec<FrameId>,
    /// The thread names of the batch's samples, each once: a sample holds an index, so that the
    /// names' reference counts move once a batch, not once a sample (an atomic the stage's and
    /// the sink's threads both wrote, 3 % of the CPU of `-o x.folded`).
    comms: Vec<Arc<[u8]>>,
}

impl Stacks {
    /// The samples, in record order.
    pub fn samples(&self) -> &[StackSample] {
        &self.samples
    }

    /// A sample's thread name at its time; `None` for a thread no COMM named.
    pub fn comm(&self, s: &StackSample) -> Option<&Arc<[u8]>> {
        self.comms.get(s.comm as usize)
    }

    /// A sample's thread name as perf shows it (`:<tid>` for an unnamed thread).
    pub fn comm_name(&self, s: &StackSample) -> std::borrow::Cow<'_, str> {
        match self.comm(s) {
            Some(c) => String::from_utf8_lossy(c),
            None => Threads::name_of(s.tid).into(),
        }
    }

    /// A sample's frames, innermost (the ip) first, as perf prints a callchain.
    pub fn frames(&self, s: &StackSample) -> &[FrameId] {
        &self.frames[s.frames.0 as usize..s.frames.1 as usize]
    }

    /// Resolves a frame, innermost (inlined) function first, the frame's function last; kernel
    /// frames of a recording of another host are `[unknown]` in `[kernel.kallsyms]`.
    pub fn resolve(&self, frame: &Frame, out: &mut Vec<Resolved>) {
        resolve(&self.symbols, self.host_kernel, frame, out);
    }
}

/// The tables a sink keeps, past the batches, to name frames when it writes:
/// [`Stacks::frame_tables`]. (Where a dso's files are found is [`crate::symbols::sources`].)
#[derive(Clone, Debug)]
pub struct FrameTables {
    /// The symbol tables.
    pub symbols: Arc<Symbols>,
    /// The stream's frames.
    pub table: Arc<Frames>,
    /// The stream's dsos.
    pub dsos: Arc<Dsos>,
    /// Whether kernel frames may be named from this host's kallsyms.
    pub host_kernel: bool,
}

impl Stacks {
    /// The tables this batch's frames are named from.
    pub fn frame_tables(&self) -> FrameTables {
        FrameTables {
            symbols: self.symbols.clone(),
            table: self.table.clone(),
            dsos: self.dsos.clone(),
            host_kernel: self.host_kernel,
        }
    }
}

/// See [`Stacks::resolve`]; for a sink that keeps frames past their batch.
pub fn resolve(symbols: &Symbols, host_kernel: bool, frame: &Frame, out: &mut Vec<Resolved>) {
    if frame.query.kernel && !host_kernel && !symbols.names_foreign_kernel() {
        let q = &frame.query;
        out.push(crate::symbols::unnamed_kernel_frame(q, q.dso.is_some()));
    } else {
        symbols.resolve_for(&frame.query, host_kernel, out);
    }
}

/// The stream's frames by [`Frame::key`], and the table the sinks read them from.
#[derive(Debug, Default)]
struct Interner {
    ids: rustc_hash::FxHashMap<FrameKey, FrameId>,
    table: Arc<Frames>,
    /// The user addresses no map covers are one frame (`unmapped=merge`): this one, once seen.
    merge_unmapped: bool,
    merged: Option<FrameId>,
}

impl Interner {
    fn intern(&mut self, frame: Frame) -> FrameId {
        let unmapped_user = frame.query.dso.is_none() && !frame.query.kernel;
        if unmapped_user && self.merge_unmapped {
            if let Some(id) = self.merged {
                return id;
            }
        }
        let next = self.ids.len() as FrameId;
        let id = *self.ids.entry(frame.key()).or_insert(next);
        if id == next {
            self.table.push(frame);
            if unmapped_user && self.merge_unmapped {
                self.merged = Some(id);
            }
        }
        id
    }
}

/// Frames looked up lately, by (pid, cpumode, address) and the stamp of the maps they were
/// found in ([`perfpipe_stream::model::machine::Space::stamp`]): a callchain's frames repeat in sample after
/// sample, and a hit costs one slot read instead of a map search and a hash lookup. Kernel
/// frames are one process's (pid 0): the kernel's maps are every process's, and a recording of
/// many short-lived processes repeats the same kernel paths in each (keyed by pid, 1.77 M of
/// 5.98 M kernel probes missed on the 576 MB benchmark recording; 0.56 M keyed by pid 0).
/// Direct-mapped; a slot holds the last frame hashed to it.
#[derive(Debug)]
struct FrameCache {
    slots: Vec<Slot>,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    ip: u64,
    stamp: u64,
    pid: u32,
    /// `u16::MAX` for an empty slot (no cpumode is).
    mode: u16,
    dso: Place,
    id: FrameId,
}

impl FrameCache {
    const BITS: u32 = 14;

    fn index(pid: u32, ip: u64) -> usize {
        let h = (ip ^ u64::from(pid).rotate_left(40)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> (64 - Self::BITS)) as usize
    }

    #[inline]
    fn get(&self, pid: u32, mode: u16, ip: u64, stamp: u64) -> Option<(FrameId, Place)> {
        let s = &self.slots[Self::index(pid, ip)];
        (s.ip == ip && s.pid == pid && s.mode == mode && s.stamp == stamp).then_some((s.id, s.dso))
    }

    #[inline]
    fn put(&mut self, pid: u32, mode: u16, ip: u64, stamp: u64, (id, dso): (FrameId, Place)) {
        self.slots[Self::index(pid, ip)] = Slot {
            ip,
            stamp,
            pid,
            mode,
            dso,
            id,
        };
    }
}

impl Default for FrameCache {
    fn default() -> FrameCache {
        let empty = Slot {
            ip: 0,
            stamp: 0,
            pid: 0,
            mode: u16::MAX,
            dso: UNMAPPED,
            id: 0,
        };
        FrameCache {
            slots: vec![empty; 1 << Self::BITS],
        }
    }
}

/// Callchains mapped lately: a sample's callchain entries (markers included) with its process,
/// cpumode and the stamps of its kernel and user maps, to the frames they were mapped to. The
/// samples of a recording repeat a few thousand callchains (an off-CPU recording's switches,
/// the same kernel path out of `schedule()` under the same user frames): a hit costs one hash
/// of the entries and one compare, where mapping the frames one by one cost a cache probe each
/// (the frames of a system-wide `sched_switch` recording, whose consecutive samples are of other
/// threads, shared nothing with the sample before: 18 % of perfpipe's CPU time went there).
/// Consulted only for a sample of another process (or maps) than the sample before's: one of the
/// same process shares its outer frames with the last chain, which costs no hash. Direct-mapped;
/// a slot holds the last callchain hashed to it. Corrupt callchains (counted a sample) are not
/// kept.
#[derive(Debug)]
struct ChainCache {
    slots: Vec<ChainSlot>,
}

#[derive(Clone, Debug, Default)]
struct ChainSlot {
    /// (pid, cpumode, kernel stamp, user stamp); `mode` `u16::MAX` for an empty slot.
    pid: u32,
    mode: u16,
    stamps: (u64, u64),
    entries: Vec<u8>,
    steps: Vec<Step>,
}

impl ChainCache {
    const BITS: u32 = 12;

    fn index(pid: u32, mode: u16, stamps: (u64, u64), entries: &[u8]) -> usize {
        use std::hash::Hasher;
        let mut h = rustc_hash::FxHasher::default();
        h.write_u64(u64::from(pid) << 16 | u64::from(mode));
        h.write_u64(stamps.0 ^ stamps.1.rotate_left(32));
        h.write(entries);
        (h.finish().wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - Self::BITS)) as usize
    }

    /// The frames of a callchain mapped before, with the slot it is (or would be) in.
    #[inline]
    fn get(
        &self,
        pid: u32,
        mode: u16,
        stamps: (u64, u64),
        entries: &[u8],
    ) -> (usize, Option<&[Step]>) {
        let i = Self::index(pid, mode, stamps, entries);
        let s = &self.slots[i];
        let hit = s.mode == mode && s.pid == pid && s.stamps == stamps && s.entries == entries;
        (i, hit.then_some(&s.steps[..]))
    }

    fn put(
        &mut self,
        i: usize,
        pid: u32,
        mode: u16,
        stamps: (u64, u64),
        entries: &[u8],
        steps: &[Step],
    ) {
        let s = &mut self.slots[i];
        (s.pid, s.mode, s.stamps) = (pid, mode, stamps);
        s.entries.clear();
        s.entries.extend_from_slice(entries);
        s.steps.clear();
        s.steps.extend_from_slice(steps);
    }
}

impl Default for ChainCache {
    fn default() -> ChainCache {
        let empty = ChainSlot {
            mode: u16::MAX,
            ..ChainSlot::default()
        };
        ChainCache {
            slots: vec![empty; 1 << Self::BITS],
        }
    }
}

/// Samples by the dso of their own (first) frame, for the end's lines on unnamed dsos: counted
/// by dso, a small array, rather than by frame (a random increment in an array of every frame
/// the stream has: 8 % of the stage's samples in `perf annotate` fell on it).
#[derive(Debug, Default)]
struct LeafSamples {
    /// Samples whose own frame is a kernel one.
    kernel: u64,
    /// By [`DsoId`] index, samples whose own frame is a user one in that dso.
    user: Vec<u64>,
}

impl LeafSamples {
    #[inline]
    fn count(&mut self, leaf: &Step) {
        if misc::is_kernel(leaf.mode) {
            self.kernel += 1;
        } else if leaf.dso != UNMAPPED {
            let i = leaf.dso as usize;
            if self.user.len() <= i {
                self.user.resize(i + 1, 0);
            }
            self.user[i] += 1;
        }
    }

    /// (dso index, samples) of each dso a user sample's own frame was in.
    fn user_dsos(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        let hit = self.user.iter().enumerate().filter(|(_, n)| **n > 0);
        hit.map(|(d, n)| (d as u32, *n))
    }
}

/// The dsos (and the kernel) whose symbol tables were asked for: a table starts loading at the
/// first frame in its dso ([`Symbols::want`]), not at its MMAP, since a system-wide recording maps
/// every dso of every process and samples hit a few.
#[derive(Debug, Default)]
struct Wanted {
    dsos: Vec<bool>,
    kernel: bool,
}

impl Wanted {
    fn want(&mut self, symbols: &Symbols, dso: Option<DsoId>, mode: u16) {
        if !self.kernel && misc::is_kernel(mode) {
            self.kernel = true;
            symbols.want_kernel();
        }
        let Some(d) = dso else {
            return;
        };
        let i = d.0 as usize;
        if self.dsos.len() <= i {
            self.dsos.resize(i + 1, false);
        }
        if !self.dsos[i] {
            self.dsos[i] = true;
            symbols.want(d);
        }
    }
}

/// The frame of `ip` in `map` (if one covers it) for a sample of `pid` in `mode`; `anon` tells,
/// per dso, whether its memory is anonymous.
fn frame_of(map: Option<&Map>, anon: &[bool], pid: u32, mode: u16, ip: u64) -> Frame {
    let kernel = misc::is_kernel(mode);
    let dso = map.map(|m| m.dso);
    let rel = match map {
        Some(m) if !kernel => ip.wrapping_sub(m.start).wrapping_add(m.pgoff),
        _ => ip,
    };
    let shared = match dso {
        Some(d) => !anon.get(d.0 as usize).copied().unwrap_or(false),
        None => kernel,
    };
    Frame {
        query: Query {
            dso,
            pid,
            ip,
            rel,
            kernel,
        },
        shared,
    }
}

/// The running `symbolize` stage.
#[derive(Debug)]
pub struct Symbolize {
    symbols: Arc<Symbols>,
    /// The first stage of the pipeline to take the sources: their counters are in its row.
    reports_sources: bool,
    dsos: Arc<Dsos>,
    frames_by_key: Interner,
    cache: FrameCache,
    chains: ChainCache,
    kernel: HostMode,
    host: StreamHost,
    this_host: HostIds,
    machine: Machine,
    threads: Threads,
    /// Per dso: its memory is anonymous (JIT code, named by `/tmp/perf-PID.map`).
    anon: Vec<bool>,
    /// The dsos whose tables were asked for.
    wanted: Wanted,
    /// Batches waiting for the side-band older than their samples.
    held: Hold,
    /// By attr index: its samples carry a time but its other records none (no `sample_id_all`),
    /// so the model learns the time from the samples.
    untimed: Vec<bool>,
    /// Frames a record in the last batch (rounded up): how much room the next batch's get.
    frames_per_record: usize,
    /// The last sample's frames, and its process and the stamps of its kernel and user maps.
    last_chain: Vec<Step>,
    last_space: (u32, (u64, u64)),
    /// The sample being mapped (kept for its allocation).
    chain: Vec<Step>,
    /// The batch's thread names by allocation, to their index in its [`Stacks::comm`] table
    /// (kept for its allocation).
    comm_index: rustc_hash::FxHashMap<usize, u32>,
    samples: Counter,
    frames: Counter,
    no_ip: Counter,
    corrupt: Counter,
    unmapped_frames: Counter,
    /// Hit file dsos whose frames stayed unnamed (counted at the end).
    unnamed: Counter,
    /// Samples by the dso of their own (first) frame: each unnamed dso's share of samples.
    leaf_samples: LeafSamples,
    /// The unnamed dsos, for `--stats-json`.
    notes: Notes,
    /// A snapshot request (SIGUSR2), so that the sink after it hears of it while the input is
    /// quiet: the stage then sends it an empty batch.
    dump: Option<Arc<std::sync::atomic::AtomicBool>>,
}

/// How often a quiet stage looks at the snapshot request.
pub const TICK: std::time::Duration = std::time::Duration::from_millis(50);

/// Whether perf names the code of a map of this name from `/tmp/perf-PID.map`
/// (`is_anon_memory()`, and `/memfd:` and `[anon:` maps, which JITs also use).
fn is_anon(name: &[u8]) -> bool {
    name.starts_with(b"//anon")
        || name.starts_with(b"[anon")
        || name.starts_with(b"/memfd:")
        || name.starts_with(b"/tmp/perf-")
}

impl Symbolize {
    /// The symbol tables this stage loads, for a sink built with it in a program of your own.
    pub fn symbols(&self) -> Arc<Symbols> {
        self.symbols.clone()
    }

    fn host_kernel(&self) -> bool {
        self.host.is_host(&self.this_host, self.kernel)
    }

    /// Resolves one sample's frames into `stacks`; returns how many of its user frames no map
    /// holds, which the caller sums and counts once a batch, as [`Counter::add`] asks (an atomic
    /// add a sample cost 3 % of the CPU time of `-o out.folded`).
    fn sample(
        &mut self,
        s: &Sample<'_>,
        fixed_period: u64,
        start: u32,
        attr: u16,
        stacks: &mut Stacks,
    ) -> u64 {
        let pid = s.pid().unwrap_or(u32::MAX);
        let first = stacks.frames.len();
        let mode = s.cpumode();
        let mut chain = std::mem::take(&mut self.chain);
        chain.clear();
        // Looked up at the sample's time; one without a time, at the end of time.
        let space = self.machine.space(pid, s.time().unwrap_or(u64::MAX));
        let stamps = (space.stamp(misc::KERNEL), space.stamp(misc::USER));
        let cc = s.callchain().filter(|c| !c.is_empty());
        // The cache serves the samples of another process (or maps) than the sample before's,
        // whose frames the last chain cannot give: a profile of one process's deep stacks keeps
        // to the last chain, and pays no hash of its entries.
        let other = (pid, stamps) != self.last_space;
        let mut slot = None;
        if let Some(c) = cc.filter(|_| other) {
            let (i, hit) = self.chains.get(pid, mode, stamps, c.bytes());
            match hit {
                Some(steps) => chain.extend_from_slice(steps),
                None => slot = Some(i),
            }
        }
        if cc.is_none() || !other || slot.is_some() {
            // The sample's frames as (cpumode, address), innermost first.
            let mut corrupt = false;
            match cc {
                Some(cc) => {
                    let mut mode = mode;
                    for ip in cc.entries() {
                        if ip >= context::MAX {
                            mode = match ip {
                                context::HV => misc::HYPERVISOR,
                                context::KERNEL => misc::KERNEL,
                                context::USER => misc::USER,
                                _ => {
                                    // perf 6.1 (`add_callchain_ip()`) takes any other marker
                                    // for a corrupt callchain and discards all of it.
                                    chain.clear();
                                    self.corrupt.add(1);
                                    corrupt = true;
                                    break;
                                }
                            };
                            continue;
                        }
                        chain.push(Step {
                            mode,
                            ip,
                            id: 0,
                            dso: UNMAPPED,
                        });
                    }
                }
                None => match s.ip() {
                    Some(ip) => chain.push(Step {
                        mode,
                        ip,
                        id: 0,
                        dso: UNMAPPED,
                    }),
                    None => self.no_ip.add(1),
                },
            }
            // The outer frames the last sample shares with this one (same process, same maps,
            // same cpumodes and addresses, counted from the root) keep its frame ids: a
            // thread's samples differ mostly in their inner frames, and comparing two short
            // arrays costs less than the frame cache's probes.
            let shared = if !other {
                chain
                    .iter()
                    .rev()
                    .zip(self.last_chain.iter().rev())
                    .take_while(|(a, b)| a.ip == b.ip && a.mode == b.mode)
                    .count()
            } else {
                0
            };
            let split = chain.len() - shared;
            let (fresh, kept) = chain.split_at_mut(split);
            let last = &self.last_chain[self.last_chain.len() - shared..];
            for (step, old) in kept.iter_mut().zip(last) {
                (step.id, step.dso) = (old.id, old.dso);
            }
            for step in fresh {
                let (mode, ip) = (step.mode, step.ip);
                let stamp = space.stamp(mode);
                let kernel = misc::is_kernel(mode);
                let cached = if kernel { 0 } else { pid };
                (step.id, step.dso) = match self.cache.get(cached, mode, ip, stamp) {
                    Some(hit) => hit,
                    None => {
                        let map = space.find(mode, ip);
                        self.wanted.want(&self.symbols, map.map(|m| m.dso), mode);
                        let frame = frame_of(map, &self.anon, pid, mode, ip);
                        let id = self.frames_by_key.intern(frame);
                        let dso = map.map_or(UNMAPPED, |m| m.dso.0);
                        self.cache.put(cached, mode, ip, stamp, (id, dso));
                        (id, dso)
                    }
                };
            }
            if let (Some(cc), Some(i), false) = (cc, slot, corrupt) {
                self.chains.put(i, pid, mode, stamps, cc.bytes(), &chain);
            }
        }
        if let Some(first) = chain.first() {
            self.leaf_samples.count(first);
        }
        let mut unmapped = 0;
        for step in &chain {
            unmapped += u64::from(step.dso == UNMAPPED && step.mode == misc::USER);
            stacks.frames.push(step.id);
        }
        self.last_space = (pid, stamps);
        self.chain = std::mem::replace(&mut self.last_chain, chain);
        let n = stacks.frames.len();
        stacks.samples.push(StackSample {
            start,
            attr,
            pid,
            tid: s.tid().unwrap_or(u32::MAX),
            cpu: s.cpu().unwrap_or(u32::MAX),
            time: s.time().unwrap_or(0),
            period: s.period().unwrap_or(fixed_period),
            comm: NO_COMM,
            frames: (first as u32, n as u32),
        });
        unmapped
    }

    fn observe(&mut self, rec: &Record<'_>, e: Endian) {
        match rec.record_type() {
            RecordType::MMAP | RecordType::MMAP2 => {
                let Some(dso) = self.machine.apply(rec) else {
                    return;
                };
                let d = self.machine.dso(dso);
                let i = dso.0 as usize;
                if self.anon.len() <= i {
                    self.anon.resize(i + 1, false);
                }
                self.anon[i] = is_anon(&d.name);
                let build_id = match &d.identity {
                    perfpipe_stream::model::machine::Identity::BuildId(b) => Some(&b[..]),
                    _ => None,
                };
                let pid = rec.mmap().map_or(u32::MAX, |m| m.pid);
                if self.dsos.get(dso).is_none() {
                    self.dsos.set(
                        dso,
                        DsoInfo {
                            name: Arc::from(String::from_utf8_lossy(&d.name)),
                            build_id: build_id.map(Arc::from),
                            kernel: d.kernel,
                        },
                    );
                }
                let inode = match d.identity {
                    perfpipe_stream::model::machine::Identity::Inode { maj, min, ino, .. } => {
                        Some(Inode { maj, min, ino })
                    }
                    _ => None,
                };
                self.symbols.note(
                    dso,
                    DsoDesc {
                        name: &d.name,
                        build_id,
                        kernel: d.kernel,
                        pid,
                        inode,
                    },
                );
            }
            RecordType::COMM | RecordType::FORK => {
                self.machine.apply(rec);
                self.threads.observe(rec);
            }
            RecordType::EXIT => {
                self.machine.apply(rec);
            }
            RecordType::FINISHED_ROUND => {
                self.machine.apply(rec);
            }
            RecordType::HEADER_FEATURE => {
                let b = rec.sized();
                self.host.note_feature(&b[8.min(b.len())..], e);
            }
            // The kernel's build id, for its kallsyms in a build-id cache or an archive.
            RecordType::HEADER_BUILD_ID => {
                if let Some(b) = rec.build_id() {
                    if b.filename == b"[kernel.kallsyms]" {
                        self.symbols.note_kernel_build_id(b.build_id);
                    } else {
                        self.symbols.note_build_id(b.filename, b.build_id);
                    }
                }
            }
            _ => {}
        }
    }

    /// Whether attr `attr`'s samples tell the model the time (see `untimed`).
    fn untimed(&mut self, info: &StreamInfo, attr: u16) -> bool {
        let i = usize::from(attr);
        if self.untimed.len() != info.attrs.len() {
            self.untimed = info
                .attrs
                .iter()
                .map(|a| {
                    !a.sample_id_all() && a.sample_type & perfpipe_stream::format::sample::TIME != 0
                })
                .collect();
        }
        self.untimed.get(i).copied().unwrap_or(false)
    }
}

impl Holding for Symbolize {
    /// Takes in a batch's side-band as it comes (maps, names, rounds), and the times of its
    /// samples where its other records have none.
    fn take_in(&mut self, batch: &Batch, info: &Arc<StreamInfo>) {
        let e = info.endian;
        for span in &batch.spans {
            let rec = info.record(batch, span);
            if RecordType(span.kind) == RecordType::SAMPLE {
                if self.untimed(info, span.tag as u16) {
                    if let Some(t) = rec.sample().and_then(|s| s.time()) {
                        self.machine.saw(t);
                        self.threads.saw(t);
                    }
                }
            } else {
                self.observe(&rec, e);
            }
        }
    }

    /// Maps a held batch's samples, at their times, fills their thread names and attaches the
    /// stacks.
    fn release(&mut self, mut batch: Batch, out: &mut Out<'_>) {
        let Some(info) = StreamInfo::shared(&batch) else {
            batch.annotate(Arc::new(self.empty_stacks(0, 0)));
            out.push(batch);
            return;
        };
        // Sized for the batch at the last batch's frames a record (plus one), so the vectors
        // are allocated once instead of growing (growth was 5 % of the stage's time).
        let records = batch.spans.len();
        let mut stacks = self.empty_stacks(records, records * (self.frames_per_record + 1));
        let (mut samples, mut frames, mut unmapped) = (0u64, 0u64, 0u64);
        for span in &batch.spans {
            if RecordType(span.kind) != RecordType::SAMPLE {
                continue;
            }
            if let Some(s) = info.record(&batch, span).sample() {
                let before = stacks.frames.len();
                let fixed = info.attr(span.tag as u16).map_or(1, |a| a.fixed_period());
                unmapped += self.sample(&s, fixed, span.start, span.tag as u16, &mut stacks);
                samples += 1;
                frames += (stacks.frames.len() - before) as u64;
            }
        }
        self.samples.add(samples);
        self.frames.add(frames);
        self.unmapped_frames.add(unmapped);
        self.frames_per_record = stacks.frames.len().div_ceil(records.max(1));
        // Spans are usually in buffer order; a stage before may have appended records.
        if !stacks.samples.is_sorted_by_key(|s| s.start) {
            stacks.samples.sort_by_key(|s| s.start);
        }
        stacks.host_kernel = self.host_kernel();
        // Each name once a batch, by its allocation; consecutive samples are mostly of one
        // thread, whose name is then found by a pointer compare.
        let mut last: Option<(*const u8, u32)> = None;
        self.comm_index.clear();
        for s in &mut stacks.samples {
            let Some(c) = self.threads.comm_at(s.tid, s.time) else {
                continue;
            };
            let ptr = c.as_ptr();
            s.comm = match last {
                Some((p, i)) if p == ptr => i,
                _ => {
                    let comms = &mut stacks.comms;
                    let i = *self.comm_index.entry(ptr as usize).or_insert_with(|| {
                        comms.push(c.clone());
                        comms.len() as u32 - 1
                    });
                    last = Some((ptr, i));
                    i
                }
            };
        }
        batch.annotate(Arc::new(stacks));
        out.push(batch);
    }

    fn parts(&mut self) -> (&mut Hold, &mut Machine) {
        (&mut self.held, &mut self.machine)
    }
}

impl Stage for Symbolize {
    fn process(&mut self, batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        // This batch's samples are looked up later: the model keeps their history from now.
        self.hold(batch, out);
        Ok(Flow::Continue)
    }

    fn flush(&mut self, out: &mut Out<'_>) -> Result<(), StageError> {
        self.release_due(out, true);
        self.say_what_is_missing();
        Ok(())
    }

    fn tick_interval(&self) -> Option<std::time::Duration> {
        self.dump.as_ref().map(|_| TICK)
    }

    fn tick(&mut self, out: &mut Out<'_>) -> Result<Flow, StageError> {
        if let Some(d) = &self.dump {
            if d.swap(false, std::sync::atomic::Ordering::SeqCst) {
                // What is held goes first, so the snapshot has every sample read so far.
                self.release_due(out, true);
                out.push(Batch::default());
            }
        }
        Ok(Flow::Continue)
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        let c = self.symbols.counters();
        let mut v = vec![
            ("samples", self.samples.clone()),
            ("frames", self.frames.clone()),
            ("samples_without_ip", self.no_ip.clone()),
            ("callchains_corrupt", self.corrupt.clone()),
            ("frames_unmapped", self.unmapped_frames.clone()),
            ("dsos_loaded", c.dsos_loaded.clone()),
            ("dsos_missing", c.dsos_missing.clone()),
            ("dsos_stripped", c.dsos_stripped.clone()),
            ("dsos_build_id_mismatch", c.dsos_build_id_mismatch.clone()),
            ("addresses_unresolved", c.unresolved.clone()),
            ("dsos_unnamed", self.unnamed.clone()),
        ];
        // The sources' counters, in the row of the first stage that took them (`unwind`'s
        // when the chain has one: one set for the run).
        if self.reports_sources {
            v.extend(self.symbols.config().sources.counter_rows());
        }
        v
    }

    fn notes(&self) -> Option<Notes> {
        Some(self.notes.clone())
    }
}

use crate::symbols::sources::hex as sources_hex;

/// What the end lines and `--stats-json` say to do about unnamed dsos (the locator's advice,
/// said once a run).
pub const UNNAMED_HINT: &str = crate::symbols::sources::locate::HOW_TO_GET;

impl Symbolize {
    /// With sources to look in (`--symbols`, `--symfs`, `--kallsyms`, debuginfod), or for a
    /// recording whose stream names another host: one line per hit dso whose frames stay
    /// unnamed, with its build id, what was tried and how to get it; counted in `dsos_unnamed`.
    /// The kernel is one of them when its frames are `[unknown]` (another host's, no kallsyms).
    /// How to get them, and debuginfod's failures, are said once a run ([`Sources::end`]).
    ///
    /// [`Sources::end`]: crate::symbols::sources::Sources::end
    fn say_what_is_missing(&self) {
        // What the tables found is known once their loads are done.
        self.symbols.settle();
        let unnamed = self.unnamed_lines();
        self.symbols.config().sources.end("symbolize", unnamed > 0);
    }

    /// The lines of [`Symbolize::say_what_is_missing`] but the run's: how many dsos they named.
    fn unnamed_lines(&self) -> usize {
        let src = &self.symbols.config().sources;
        let explicit = src.symfs().is_some()
            || self.symbols.config().kallsyms_file.is_some()
            || src.debuginfod().is_some()
            || src.tried().iter().any(|t| t.starts_with("--symbols"));
        let foreign = !self.host.is_host(&self.this_host, HostMode::Auto);
        // A file of another build than the recording's is named whatever the sources.
        let mismatch = self.symbols.counters().dsos_build_id_mismatch.get() > 0;
        if !explicit && !foreign && !mismatch {
            return 0;
        }
        // Each hit file dso and the samples whose own frame is in it (perf report --sort dso).
        let hit: BTreeMap<u32, u64> = self.leaf_samples.user_dsos().collect();
        let kernel = self.leaf_samples.kernel;
        let total = self.samples.get();
        // By (name, build id): one dso mapped under several ids is one line.
        // (name, build id, samples, the last place tried: the file, or this host's kallsyms).
        let mut unnamed: Vec<(String, String, u64, String)> = Vec::new();
        if kernel > 0 && !self.host_kernel() && !self.symbols.names_foreign_kernel() {
            let id = self.symbols.kernel_build_id().unwrap_or_default();
            let hex = id.iter().map(|b| format!("{b:02x}")).collect();
            let last = "this host's kallsyms (not used: the stream names another host)";
            unnamed.push(("[kernel.kallsyms]".into(), hex, kernel, last.into()));
        }
        for (&d, &n) in &hit {
            for (name, id, others) in self.symbols.unnamed_with_others(&[DsoId(d)]) {
                match unnamed.iter_mut().find(|u| u.0 == name && u.1 == id) {
                    Some(u) => u.2 += n,
                    None if others.is_empty() => unnamed.push((name, id, n, "the file".into())),
                    None => {
                        let at: Vec<String> = others
                            .iter()
                            .map(|o| {
                                let oid = o.id.as_deref().map_or("none".into(), sources_hex);
                                format!("{} (build id {oid})", o.at)
                            })
                            .collect();
                        let last = format!("found only another build, not used: {}", at.join(", "));
                        unnamed.push((name, id, n, last))
                    }
                }
            }
        }
        unnamed.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
        self.unnamed.add(unnamed.len() as u64);
        let tried = src.tried();
        let tried_text = tried.join(", ");
        let mut notes = Vec::with_capacity(unnamed.len());
        for (name, id, n, last) in &unnamed {
            let share = if total == 0 {
                0.0
            } else {
                *n as f64 / total as f64
            };
            eprintln!(
                "perfpipe: symbolize: no symbols for {name} (build id {}): {:.2}% of samples ({n} of {total}); tried {tried_text} and {last}",
                if id.is_empty() { "none" } else { id },
                share * 100.0
            );
            notes.push(vec![
                ("kind", NoteValue::Text("dso_unnamed".into())),
                ("dso", NoteValue::Text(name.clone())),
                (
                    "build_id",
                    if id.is_empty() {
                        NoteValue::Null
                    } else {
                        NoteValue::Text(id.clone())
                    },
                ),
                ("samples", NoteValue::Int(*n)),
                ("share", NoteValue::Num(share)),
                (
                    "tried",
                    NoteValue::List(tried.iter().cloned().chain([last.clone()]).collect()),
                ),
                ("hint", NoteValue::Text(UNNAMED_HINT.into())),
            ]);
        }
        self.notes.set(notes);
        unnamed.len()
    }

    /// Stacks with room for `samples` samples and `frames` frames.
    fn empty_stacks(&self, samples: usize, frames: usize) -> Stacks {
        Stacks {
            symbols: self.symbols.clone(),
            dsos: self.dsos.clone(),
            table: self.frames_by_key.table.clone(),
            host_kernel: true,
            samples: Vec::with_capacity(samples),
            frames: Vec::with_capacity(frames),
            comms: Vec::new(),
        }
    }
}

/// How the command line offers the stage: `--symbolize [OPTIONS]`, and `--inline` (an option of
/// whichever `symbolize` the chain has, also of the one a profile output adds).
pub const SPEC: StageSpec = StageSpec {
    name: "symbolize",
    help: "resolve each sample's ip and callchain to (dso, function, offset) for the profile outputs (-o FILE.folded, FILE.svg); symbol tables load in the background",
    flags: &[
        Flag::stage_options(
            "symbolize",
            "resolve frames to functions (added by itself before a profile output)",
        ),
        Flag {
            name: "inline",
            help: "inlined functions as frames of their own, from DWARF (like perf script --inline)",
            value: FlagValue::None,
            set: &[("inline", "yes")],
            adds_stage: false,
        },
        crate::symbols::sources::SYMBOLS_FLAG,
        crate::symbols::sources::SYMFS_FLAG,
        Flag::option(
            "kallsyms",
            "kallsyms",
            "name kernel frames from this kallsyms file, the recording host's (perf report --kallsyms)",
        ),
    ],
    options: &[
        StageOption {
            key: "inline",
            kind: Kind::Switch,
            help: "inlined functions as frames of their own, from DWARF",
        },
        StageOption {
            key: "demangle",
            kind: Kind::Switch,
            help: "demangle C++ and Rust names (default yes)",
        },
        StageOption {
            key: "kernel",
            kind: Kind::Choice(&["auto", "yes", "no"]),
            help: "name kernel frames from this host's /proc/kallsyms: auto (unless the stream's hostname or kernel release names another host), yes or no",
        },
        StageOption {
            key: "unmapped",
            kind: Kind::Choice(&["keep", "merge"]),
            help: "user addresses no map covers: keep (a frame each, by address and process; default) or merge (one [unknown] frame; what folded stacks and flame graphs without --addrs set)",
        },
        StageOption {
            key: "symbols",
            kind: Kind::Text("ARCHIVE|DIR"),
            help: "an archive or build-id-cache directory to look symbols up in, by build id (repeatable)",
        },
        crate::symbols::sources::SYMFS_OPTION,
        StageOption {
            key: "kallsyms",
            kind: Kind::Text("FILE"),
            help: "the kallsyms kernel frames are named from",
        },
        crate::symbols::sources::DEBUGINFOD_OPTION,
    ],
    build: build_stage,
    needs: &["decompress", "stitch"],
};

fn build_stage(ctx: &BuildCtx, o: &Options) -> Result<Box<dyn Stage>, perfpipe_core::StageError> {
    let pool = ctx.workers.pool()?;
    let config = SymbolizeConfig::from_options(o);
    if let Some(k) = &config.kallsyms {
        std::fs::File::open(k).map_err(|e| format!("--kallsyms {}: {e}", k.display()))?;
    }
    let sources = config.shared_sources(ctx)?;
    let mut stage = config.build_with(Some(pool), sources);
    stage.dump = Some(ctx.requests.subscribe(perfpipe_core::DUMP));
    Ok(Box::new(stage))
}

//! `unwind`: DWARF unwinding in the stream (`--unwind`). Samples recorded with
//! `perf record --call-graph dwarf` carry the user registers (`PERF_SAMPLE_REGS_USER`) and a copy
//! of the user stack (`PERF_SAMPLE_STACK_USER`, 8 KiB by default); this stage unwinds that stack
//! with the `.eh_frame`/`.eh_frame_hdr`/`.debug_frame` of the dsos mapped in the sample's process
//! (with [`framehop`], samply's unwinder) and writes the sample again as a frame-pointer-style one:
//! its callchain is the kernel part the kernel recorded, then `PERF_CONTEXT_USER` and the user
//! frames, and the registers and stack copy are gone. The attr's `sample_type` loses `REGS_USER`
//! and `STACK_USER` and gains `CALLCHAIN` (the HEADER_ATTR records, which the file-mode writer
//! turns into the attrs section, and the attr table the batches carry downstream), so perf reads
//! the output as a `perf record -g` recording, 10–100× smaller.
//!
//! - **Frames** are the user ip (from the registers), then each return address minus one, as
//!   perf's libunwind and libdw unwinders give them (`perf script` prints the same addresses on
//!   the input and on the output).
//! - **Address spaces** are the [`Machine`] model (MMAP, MMAP2, FORK, EXIT, kept by time): a
//!   sample is unwound with its process's maps at the sample's time, as perf finds them after
//!   sorting the records by time. A process's framehop unwinder is built for the maps a sample
//!   sees, lazily, and kept while the next samples of the process see the same (the model's
//!   stamp says so, else the list of maps is compared); it is made of framehop modules kept by
//!   map, so a change of the maps costs a module of each new map only, and a dso's unwind data
//!   is parsed once per place it is mapped at. Unwinders and modules no sample asked for in
//!   four rounds (`KEEP_ROUNDS`) are dropped. A dso's unwind sections are read once (see [`dso`]).
//! - **Frames framehop cannot step** (CFI whose CFA is on a register other than `rsp`/`rbp`, or an
//!   expression that reads memory: ld.so's lazy-binding trampolines, signal frames) are stepped
//!   by [`cfi`] with gimli on every sampled register, and framehop goes on from the caller.
//! - **Bounded**: at most `max-frames` frames per sample (default 1024), stack reads only inside
//!   the copy (`dyn_size` bytes of it, clamped to its size), and unwinding stops at a frame in code
//!   without unwind information. Garbage registers, truncated copies and looping unwind info end
//!   a sample's walk early; they are counted, never an error.
//! - **Parallel**: the samples of a batch of at least `parallel-min` (64) samples are unwound on
//!   the pipeline's worker pool ([`BuildCtx::workers`]), in order; smaller batches, and every
//!   batch with `parallel=no`, on the stage's thread.
//!
//! **Order**: input order; samples are rewritten in place, nothing is added or reordered.
//! **Buffering**: a batch is held until two more FINISHED_ROUNDs have arrived (or
//! [`HOLD_MAX_BYTES`](perfpipe_stream::model::hold::HOLD_MAX_BYTES) are held: the stream model's
//! [`Hold`]), and its samples are unwound then: records are ordered by time only across rounds, so
//! the maps and FORKs older than a sample may come up to two rounds after it in the stream.
//! Side-band records are applied to the model as they arrive. An unwound sample is written over its
//! own bytes, and a batch whose records then fill less than a quarter of its buffer is copied to
//! one of their size, the big buffer going back to the pool, so the batches downstream hold what
//! they carry. **EOF**: the held batches. Counters: `samples_unwound` (the walk reached the
//! outermost frame), `samples_partial` (it stopped early; per reason `partial_stack_end`,
//! `partial_no_unwind_info`, `partial_bad_frame`, `partial_frame_cap`,
//! `partial_unwinder_panic`, `partial_cfi_fallback_failed`), `cfi_fallback_steps`,
//! `samples_no_unwind_info`
//! (the sample's ip is in no dso with unwind information), `samples_no_user_regs` (kernel threads,
//! 32-bit processes), `samples_malformed` (dropped: a field runs past the record),
//! `dyn_size_clamped`, `user_frames`, `dsos_loaded`, `dsos_missing`, `dsos_without_unwind_info`,
//! `dsos_build_id_mismatch`, and the sources' ([`Sources::counter_rows`]) when it is the first
//! stage of the pipeline to take them (they are shared with `symbolize`: one set a run).

pub mod cfi;
pub mod dso;
pub mod sample;
mod spec;
#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{Error as WalkError, FrameAddress, Module, Unwinder as _};
use perfpipe_core::{Batch, Counter, Flow, NoteValue, Notes, Out, Stage, StageError};
use rayon::prelude::*;

use dso::{Bytes, Missing, UnwindInfo};
use perfpipe_core::spec::{BuildCtx, Options};
use perfpipe_stream::format::{
    misc, Attr, Endian, RecordType, SampleLayout, StreamInfo, EVENT_HEADER_SIZE,
};
use perfpipe_stream::model::dso::ProcessRoot;
use perfpipe_stream::model::hold::{Hold, Holding};
use perfpipe_stream::model::machine::{DsoId, Identity, Machine, Map};
use perfpipe_stream::model::IdMap;
use perfpipe_stream::Error;
use sample::AttrExtra;
pub use spec::SPEC;

use crate::symbols::sources::locate::HOW_TO_GET;
use crate::symbols::sources::locate::{Inode, Wanted};
use crate::symbols::sources::{hex, Sources, SourcesConfig};

fn build_stage(ctx: &BuildCtx, o: &Options) -> Result<Box<dyn Stage>, perfpipe_core::StageError> {
    let config = UnwindConfig::from_options(o)?;
    let pool = if config.parallel {
        Some(ctx.workers.pool()?)
    } else {
        None
    };
    let sources = config.shared_sources(ctx)?;
    Ok(Box::new(config.build_with(pool, sources)))
}

/// Default of `parallel-min`.
pub const PARALLEL_MIN: usize = 64;

/// Default of `max-frames`.
pub const MAX_FRAMES: usize = 1024;

/// Configuration of an `unwind` stage. Plain data; no I/O.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnwindConfig {
    /// Unwind on the worker pool.
    pub parallel: bool,
    /// Most user frames per sample.
    pub max_frames: usize,
    /// Fewest samples in a batch for the pool to unwind them: handing a batch to the pool costs
    /// more than unwinding a few samples (see docs/unwinding.md's figures).
    pub parallel_min: usize,
    /// `--symfs DIR`: the recorded paths are read under DIR (and the build-id cache is DIR/.debug).
    pub symfs: Option<PathBuf>,
    /// `--symbols ARCHIVE|DIR`, in order: looked in by build id first.
    pub symbols: Vec<PathBuf>,
    /// `debuginfod=URLS|no`: the servers instead of `DEBUGINFOD_URLS` (`no`: none).
    pub debuginfod: Option<String>,
}

impl Default for UnwindConfig {
    fn default() -> Self {
        UnwindConfig {
            parallel: true,
            max_frames: MAX_FRAMES,
            parallel_min: PARALLEL_MIN,
            symfs: None,
            symbols: Vec::new(),
            debuginfod: None,
        }
    }
}

impl UnwindConfig {
    /// The configuration that checked options give.
    ///
    /// # Errors
    /// [`Error::BadOption`] for `max-frames=0`.
    pub fn from_options(o: &Options) -> Result<UnwindConfig, Error> {
        let max_frames = match o.count("max-frames") {
            Some(0) => {
                return Err(Error::BadOption {
                    option: "unwind",
                    message: "max-frames must be at least 1".into(),
                })
            }
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
            None => MAX_FRAMES,
        };
        Ok(UnwindConfig {
            parallel: !o.has("parallel") || o.switch("parallel"),
            max_frames,
            parallel_min: o
                .count("parallel-min")
                .map_or(PARALLEL_MIN, |n| usize::try_from(n).unwrap_or(usize::MAX)),
            symfs: o.text("symfs").map(Into::into),
            symbols: o.texts("symbols").map(Into::into).collect(),
            debuginfod: o.text("debuginfod").map(Into::into),
        })
    }

    /// The sources dsos' files are looked for in (`--symfs`, `--symbols`, the build-id cache,
    /// debuginfod), opened.
    ///
    /// # Errors
    /// A `--symbols` that is neither a directory nor a file.
    pub fn open_sources(&self) -> Result<Sources, String> {
        self.sources_config().open_with(self.debuginfod.as_deref())
    }

    /// [`UnwindConfig::open_sources`] once per pipeline: shared with the pipeline's other
    /// stages that read dsos' files ([`SourcesConfig::shared`]).
    ///
    /// # Errors
    /// As [`UnwindConfig::open_sources`].
    pub fn shared_sources(&self, ctx: &BuildCtx) -> Result<Arc<Sources>, String> {
        self.sources_config()
            .shared(ctx, self.debuginfod.as_deref())
    }

    fn sources_config(&self) -> SourcesConfig {
        SourcesConfig {
            symfs: self.symfs.clone(),
            symbols: self.symbols.clone(),
            ..SourcesConfig::default()
        }
    }

    /// Builds the stage with no source but this host's files (by path, and through
    /// `/proc/PID/root`); samples are unwound on `pool` (on the stage's thread when `None`).
    pub fn build(&self, pool: Option<Arc<rayon::ThreadPool>>) -> Unwind {
        self.build_with(pool, Sources::none())
    }

    /// Builds the stage; dsos' files are looked for in `sources` (opened for this stage, or
    /// shared with the pipeline's other stages), samples unwound on `pool`.
    pub fn build_with(
        &self,
        pool: Option<Arc<rayon::ThreadPool>>,
        sources: impl Into<Arc<Sources>>,
    ) -> Unwind {
        let sources = sources.into();
        sources.warm(pool.as_deref());
        let reports_sources = sources.join();
        Unwind {
            sources,
            reports_sources,
            noted_ids: HashMap::new(),
            unfound: Vec::new(),
            notes: Notes::new(),
            pool,
            max_frames: self.max_frames,
            parallel_min: self.parallel_min.max(2),
            machine: Machine::new(),
            dsos: Vec::new(),
            roots: Vec::new(),
            processes: IdMap::default(),
            modules: Modules::default(),
            extras: Vec::new(),
            info_in: None,
            info_out: None,
            extras_changed: false,
            held: Hold::default(),
            swept: 0,
            c: Counters::default(),
        }
    }
}

/// The stage's counters.
#[derive(Clone, Debug, Default)]
struct Counters {
    unwound: Counter,
    partial: Counter,
    stack_end: Counter,
    no_info_later: Counter,
    bad_frame: Counter,
    frame_cap: Counter,
    unwinder_panic: Counter,
    cfi_failed: Counter,
    cfi_steps: Counter,
    no_unwind_info: Counter,
    no_regs: Counter,
    malformed: Counter,
    dyn_clamped: Counter,
    frames: Counter,
    dsos_loaded: Counter,
    dsos_missing: Counter,
    dsos_no_info: Counter,
    dsos_mismatch: Counter,
}

/// A dso whose right file was not found: for the line that says so at the end.
#[derive(Debug)]
struct Unfound {
    name: String,
    build_id: Option<Vec<u8>>,
    pid: u32,
    /// Whether its process was gone when its maps were read.
    gone: bool,
    other_builds: Vec<crate::symbols::sources::locate::OtherBuild>,
}

/// A process's unwinder and the maps of its modules with unwind information.
pub struct Process {
    unwinder: UnwinderX86_64<Bytes>,
    /// Sorted, non-overlapping maps whose dso has unwind information.
    covered: Vec<Covered>,
    /// Sorted `[start, end)` of the code whose CFI framehop cannot evaluate (in any of the maps):
    /// stepped by [`cfi`].
    hard: Vec<(u64, u64)>,
}

/// A map of a dso with unwind information: `[start, end)`, its load bias and the information.
struct Covered {
    start: u64,
    end: u64,
    base: u64,
    info: UnwindInfo,
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let covered: Vec<(u64, u64)> = self.covered.iter().map(|c| (c.start, c.end)).collect();
        f.debug_struct("Process")
            .field("covered", &covered)
            .field("hard", &self.hard)
            .finish_non_exhaustive()
    }
}

impl Default for Process {
    fn default() -> Self {
        Process::new()
    }
}

/// Module adds so far, by every stage (see [`CACHE_EPOCH_ADDS`]).
static MODULES_ADDED: AtomicU64 = AtomicU64::new(0);

impl Process {
    /// A process with no maps.
    pub fn new() -> Process {
        Process {
            unwinder: UnwinderX86_64::new(),
            covered: Vec::new(),
            hard: Vec::new(),
        }
    }

    /// Adds a map `[start, end)` of a file with unwind information `info`, at file offset `pgoff`.
    pub fn add(&mut self, info: &UnwindInfo, name: &str, start: u64, end: u64, pgoff: u64) {
        if end <= start {
            return;
        }
        let base = info.base_avma(start, pgoff);
        self.add_module(info.module(name, start..end, base), info);
    }

    /// Adds a module (made by [`UnwindInfo::module`] of `info`; a clone shares its parsed unwind
    /// data).
    pub fn add_module(&mut self, module: Module<Bytes>, info: &UnwindInfo) {
        let (start, end) = (module.avma_range().start, module.avma_range().end);
        if end <= start {
            return;
        }
        let base = module.base_avma();
        self.unwinder.add_module(module);
        let i = self.covered.partition_point(|r| r.start < start);
        self.covered.insert(
            i,
            Covered {
                start,
                end,
                base,
                info: info.clone(),
            },
        );
        let hard = info.hard().iter().filter_map(|&(a, b)| {
            let (a, b) = (
                a.wrapping_add(base).max(start),
                b.wrapping_add(base).min(end),
            );
            (a < b).then_some((a, b))
        });
        let mut hard: Vec<(u64, u64)> = self.hard.iter().copied().chain(hard).collect();
        hard.sort_unstable();
        self.hard = hard;
        if MODULES_ADDED.fetch_add(1, Ordering::Relaxed) % CACHE_EPOCH_ADDS == CACHE_EPOCH_ADDS - 1
        {
            CACHE_EPOCH.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The map holding `addr`.
    fn map(&self, addr: u64) -> Option<&Covered> {
        let i = self.covered.partition_point(|r| r.start <= addr);
        (i > 0 && addr < self.covered[i - 1].end).then(|| &self.covered[i - 1])
    }

    fn covers(&self, addr: u64) -> bool {
        self.map(addr).is_some()
    }

    /// Whether `addr` lies in code whose CFI framehop cannot evaluate.
    fn is_hard(&self, addr: u64) -> bool {
        // Maps do not overlap, nor do a sound file's FDEs; where a hostile file's overlap, a frame
        // may be missed here and framehop steps it, as it did before.
        let i = self.hard.partition_point(|r| r.0 <= addr);
        i > 0 && addr < self.hard[i - 1].1
    }
}

/// How one sample's walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The outermost frame was reached.
    Complete,
    /// The stack copy ended (the usual end with 8 KiB copies of deep stacks).
    StackEnd,
    /// A frame (after the first) lies in code without unwind information.
    NoInfoLater,
    /// The unwinder gave up on a frame (it did not advance, moved backwards, a null return address).
    BadFrame,
    /// `max-frames` frames were found.
    FrameCap,
    /// The unwinder panicked on a frame (framehop's unchecked `cfa - 8`, see `walk_stack`).
    UnwinderPanic,
    /// A frame whose CFI framehop cannot evaluate could not be stepped by the fallback either
    /// ([`cfi`]: CFI it cannot read or evaluate, a register the sample lacks, a replayed frame
    /// that disagrees with framehop).
    CfiFallbackFailed,
    /// The sample's own ip lies in no dso with unwind information: only that frame is written.
    NoUnwindInfo,
    /// No usable user registers: no user frames.
    NoRegs,
    /// A field runs past the record: the sample is dropped.
    Malformed,
}

/// A sample's walk: its new record (none if malformed), how it ended and the user frames written.
#[derive(Debug)]
pub struct Walked {
    /// The rewritten record.
    pub record: Option<Vec<u8>>,
    /// How the walk ended.
    pub outcome: Outcome,
    /// User frames in the new callchain.
    pub frames: usize,
    /// `dyn_size` exceeded the stack copy.
    pub dyn_clamped: bool,
    /// Frames stepped by the CFI fallback ([`cfi`]).
    pub fallback_steps: u32,
}

/// Adds of modules after which the unwind caches are replaced: framehop tells its unwinders apart in
/// its rule caches by a global 16-bit generation that wraps after 65,536 module adds.
const CACHE_EPOCH_ADDS: u64 = 30_000;
static CACHE_EPOCH: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static CACHE: RefCell<(u64, Option<CacheX86_64>)> = const { RefCell::new((0, None)) };
}

/// Unwinds and rewrites one sample record.
pub fn walk(
    rec: &[u8],
    e: Endian,
    layout: &SampleLayout,
    extra: &AttrExtra,
    process: Option<&Process>,
    max_frames: usize,
) -> Walked {
    let Some(parts) = sample::parse(rec, e, layout, extra) else {
        return Walked {
            record: None,
            outcome: Outcome::Malformed,
            frames: 0,
            dyn_clamped: false,
            fallback_steps: 0,
        };
    };
    let mut frames: Vec<u64> = Vec::new();
    let mut fallback_steps = 0;
    let outcome = match (parts.regs, process) {
        (None, _) => Outcome::NoRegs,
        (Some((ip, _, _)), None) => {
            frames.push(ip);
            Outcome::NoUnwindInfo
        }
        (Some((ip, _, _)), Some(p)) if !p.covers(ip) => {
            frames.push(ip);
            Outcome::NoUnwindInfo
        }
        (Some(_), Some(p)) => {
            let stack = &rec[parts.stack.clone()];
            let regs = cfi::Regs::from_perf(&rec[parts.user_regs.clone()], extra.regs_user, e);
            CACHE.with(|c| {
                let mut c = c.borrow_mut();
                let epoch = CACHE_EPOCH.load(Ordering::Relaxed);
                if c.0 != epoch || c.1.is_none() {
                    *c = (epoch, Some(CacheX86_64::new()));
                }
                let cache = c.1.as_mut().expect("set above");
                let (outcome, steps) =
                    walk_stack(p, &regs, stack, e, cache, max_frames, &mut frames);
                fallback_steps = steps;
                outcome
            })
        }
    };
    let mut out = Vec::with_capacity(rec.len().min(parts.head.len() + 16 + 8 * frames.len() + 64));
    let n = sample::rewrite(rec, e, &parts, &frames, &mut out);
    Walked {
        record: Some(out),
        outcome,
        frames: n,
        dyn_clamped: parts.dyn_size_clamped,
        fallback_steps,
    }
}

/// Walks a sample's stack from its registers `regs` (its ip, `rsp` and `rbp` at least) over its
/// stack copy `stack` (which starts at `rsp`), pushing the frames to `frames` (the ip, then each
/// return address minus one): framehop steps each frame, except those whose CFI it cannot
/// evaluate, which [`cfi`] steps. Returns how the walk ended and how many frames [`cfi`] stepped.
pub(crate) fn walk_stack(
    p: &Process,
    regs: &cfi::Regs,
    stack: &[u8],
    e: Endian,
    cache: &mut CacheX86_64,
    max_frames: usize,
    frames: &mut Vec<u64>,
) -> (Outcome, u32) {
    let (Some(ip), Some(sp), Some(bp)) = (regs.reg(cfi::IP), regs.reg(cfi::SP), regs.reg(cfi::BP))
    else {
        return (Outcome::NoRegs, 0);
    };
    // framehop 0.16 (its latest release) computes the return address's slot as `cfa - 8`
    // unchecked (`x86_64/dwarf.rs:68`) when a CFI row's return-address rule is not `[CFA-8]` and
    // yields nothing: a CFA below 8, which a hostile CFI row with the sample's registers or stack
    // words gives, panics with overflow checks (release builds wrap, and the read fails). The CFA
    // is computed inside framehop, from the stack copy, so no check of the input before the walk
    // can rule it out: the walk is the boundary, and a panic in it ends the sample's walk with the
    // frames found so far (`partial_unwinder_panic`). The rule cache is made anew, since a panic
    // may have left it half-written.
    let mut read = |addr: u64| -> Result<u64, ()> {
        let off = usize::try_from(addr.checked_sub(sp).ok_or(())?).map_err(|_| ())?;
        let b = stack.get(off..off.checked_add(8).ok_or(())?).ok_or(())?;
        e.u64(b, 0).ok_or(())
    };
    let mut steps = 0;
    let walked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut at = FrameAddress::InstructionPointer(ip);
        let mut fh = UnwindRegsX86_64::new(ip, sp, bp);
        let mut replay = cfi::Replay::new(*regs);
        let first = frames.len();
        frames.push(ip);
        loop {
            let next = if p.is_hard(at.address_for_lookup()) {
                let map = |a: u64| p.map(a).map(|c| (&c.info, c.base));
                match replay.step_last(&frames[first..], map, &mut read) {
                    Ok(cfi::Stepped::Caller(r)) => {
                        let (Some(ra), Some(sp)) = (r.reg(cfi::IP), r.reg(cfi::SP)) else {
                            return Outcome::CfiFallbackFailed;
                        };
                        fh = UnwindRegsX86_64::new(ra, sp, r.reg(cfi::BP).unwrap_or(0));
                        steps += 1;
                        Ok(Some(ra))
                    }
                    Ok(cfi::Stepped::End) => {
                        steps += 1;
                        Ok(None)
                    }
                    Err(cfi::Failed::StackEnd) => return Outcome::StackEnd,
                    Err(_) => return Outcome::CfiFallbackFailed,
                }
            } else {
                p.unwinder.unwind_frame(at, &mut fh, cache, &mut read)
            };
            match next {
                Ok(Some(ra)) => {
                    let Some(ra) = FrameAddress::from_return_address(ra) else {
                        return Outcome::BadFrame;
                    };
                    if frames.len() >= max_frames {
                        return Outcome::FrameCap;
                    }
                    let next_at = ra.address() - 1;
                    frames.push(next_at);
                    if !p.covers(next_at) {
                        return Outcome::NoInfoLater;
                    }
                    at = ra;
                }
                Ok(None) => return Outcome::Complete,
                Err(WalkError::CouldNotReadStack(_)) => return Outcome::StackEnd,
                Err(_) => return Outcome::BadFrame,
            }
        }
    }));
    let outcome = walked.unwrap_or_else(|_| {
        *cache = CacheX86_64::new();
        Outcome::UnwinderPanic
    });
    (outcome, steps)
}

/// The running `unwind` stage.
#[derive(Debug)]
pub struct Unwind {
    /// Where dsos' files are looked for.
    sources: Arc<Sources>,
    /// The first stage of the pipeline to take the sources: their counters are in its row.
    reports_sources: bool,
    /// Build ids of dsos by name, from BUILD_ID records (for MMAPs without one).
    noted_ids: HashMap<Vec<u8>, Vec<u8>>,
    /// The dsos without unwind information for want of the right file, for the end lines.
    unfound: Vec<Unfound>,
    notes: Notes,
    pool: Option<Arc<rayon::ThreadPool>>,
    max_frames: usize,
    parallel_min: usize,
    machine: Machine,
    /// By [`perfpipe_stream::model::machine::DsoId`]: the dso's unwind information, once looked for.
    dsos: Vec<Option<Result<UnwindInfo, Missing>>>,
    /// By dso: the root of the process whose map brought it in, held open from then when that
    /// process sees other files than we do (a container): its files are read two rounds later,
    /// when the process may have exited.
    roots: Vec<Option<Arc<ProcessRoot>>>,
    /// pid → its unwinder as last built.
    processes: IdMap<u32, Built>,
    /// Modules by map (dso, start, end, file offset): a process's unwinder is made again of the
    /// modules of its maps that it had (and a fork's child of its parent's), so a dso's unwind
    /// data is parsed (a `.debug_frame` indexed) once per place it is mapped at, not once per
    /// change of the maps. At most [`MODULES_MAX`], then made again as needed.
    modules: Modules,
    /// By attr index: the attr's extra fields, for attrs whose samples are unwound.
    extras: Vec<Option<AttrExtra>>,
    info_in: Option<Arc<StreamInfo>>,
    info_out: Option<Arc<StreamInfo>>,
    extras_changed: bool,
    /// Batches held back for their side-band.
    held: Hold,
    /// The model's round when `processes` was last swept of unwinders not asked for.
    swept: u64,
    c: Counters,
}

/// A process's unwinder, the maps it was built of, and the stamp
/// ([`perfpipe_stream::model::machine::Space::stamp`]) a lookup last found them at.
#[derive(Debug)]
struct Built {
    stamp: u64,
    maps: Vec<Map>,
    process: Arc<Process>,
    /// The model's round ([`Machine::round`]) when a sample last asked for it.
    used: u64,
}

/// Rounds after which an unwinder no sample asked for is dropped (exited processes, idle ones:
/// made again if one is sampled again), and a module no unwinder was made of.
const KEEP_ROUNDS: u64 = 4;

/// Most modules kept for making unwinders again ([`Unwind`]'s `modules`).
const MODULES_MAX: usize = 4096;

/// Modules by map (dso, start, end, file offset), with the model's round when an unwinder last
/// took them.
#[derive(Default)]
struct Modules(HashMap<MapKey, (Module<Bytes>, u64)>);

/// A map as modules are kept by: (dso, start, end, file offset).
type MapKey = (u32, u64, u64, u64);

impl std::fmt::Debug for Modules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} modules", self.0.len())
    }
}

/// One sample to unwind: its span's index in the batch, its attr and its process's unwinder.
struct Job {
    span: usize,
    attr: u16,
    extra: AttrExtra,
    process: Option<Arc<Process>>,
}

/// A batch after pass one.
struct Scanned {
    info: Arc<StreamInfo>,
    info_out: Arc<StreamInfo>,
    jobs: Vec<Job>,
    attrs: Vec<(usize, Vec<u8>)>,
}

impl Unwind {
    /// Notes the extra fields of a dwarf attr (its HEADER_ATTR record `rec`); false if the attr
    /// is not in the stream's table.
    fn note_attr(&mut self, info: &StreamInfo, attr: &Attr, rec: &[u8]) -> bool {
        let Some(j) = info.attrs.iter().position(|a| a == attr) else {
            return false;
        };
        if self.extras.len() <= j {
            self.extras.resize(j + 1, None);
        }
        let extra = Some(sample::attr_extra(rec, info.endian));
        if self.extras[j] != extra {
            self.extras[j] = extra;
            self.extras_changed = true;
        }
        true
    }

    /// Pass one over a held batch: the rewritten dwarf attrs, and a job of each sample to unwind
    /// with its process's unwinder at the sample's time.
    fn scan(&mut self, batch: &Batch) -> Option<Scanned> {
        let info = StreamInfo::shared(batch)?;
        if info.endian != Endian::Little {
            // Only x86-64 is unwound; big-endian streams come from other machines.
            return None;
        }
        let e = info.endian;
        let mut jobs: Vec<Job> = Vec::new();
        let mut attrs: Vec<(usize, Vec<u8>)> = Vec::new();
        for (i, span) in batch.spans.iter().enumerate() {
            match RecordType(span.kind) {
                RecordType::HEADER_ATTR => {
                    let rec = batch.bytes(span);
                    let Ok(attr) = Attr::parse(&rec[EVENT_HEADER_SIZE.min(rec.len())..], e) else {
                        continue;
                    };
                    if sample::wants_unwinding(attr.sample_type)
                        && info.attrs.iter().any(|a| a == &attr)
                    {
                        attrs.push((i, sample::rewrite_attr(rec, e)));
                    }
                }
                RecordType::SAMPLE => {
                    let attr = span.tag as u16;
                    let Some(extra) = self.extras.get(usize::from(attr)).copied().flatten() else {
                        continue;
                    };
                    let s = info.record(batch, span).sample();
                    let process = s.as_ref().and_then(|s| s.pid()).map(|pid| {
                        let time = s.as_ref().and_then(|s| s.time()).unwrap_or(u64::MAX);
                        self.process(pid, time)
                    });
                    jobs.push(Job {
                        span: i,
                        attr,
                        extra,
                        process,
                    });
                }
                _ => {}
            }
        }
        let info_out = self.info_out(&info);
        Some(Scanned {
            info,
            info_out,
            jobs,
            attrs,
        })
    }

    /// Pass two: unwinds the jobs (on the pool), rewrites the samples and attrs, emits the batch.
    fn finish(&mut self, mut batch: Batch, s: Scanned, out: &mut Out<'_>) {
        let Scanned {
            info,
            info_out,
            jobs,
            attrs,
        } = s;
        if jobs.is_empty() && attrs.is_empty() {
            batch.context = Some(info_out);
            out.push(batch);
            return;
        }
        let (e, max_frames) = (info.endian, self.max_frames);
        let walked: Vec<Walked> = {
            let b = &batch;
            let one = |job: &Job| {
                let span = &b.spans[job.span];
                let layout = &info.attrs[usize::from(job.attr)].layout;
                walk(
                    b.bytes(span),
                    e,
                    layout,
                    &job.extra,
                    job.process.as_deref(),
                    max_frames,
                )
            };
            match &self.pool {
                Some(pool) if jobs.len() >= self.parallel_min => {
                    pool.install(|| jobs.par_iter().with_min_len(2).map(one).collect())
                }
                _ => jobs.iter().map(one).collect(),
            }
        };
        for w in &walked {
            self.count(w);
        }
        let mut removed = false;
        for (i, rec) in attrs {
            rewrite(&mut batch, i, &rec);
        }
        for (job, w) in jobs.iter().zip(walked) {
            match w.record {
                Some(rec) => rewrite(&mut batch, job.span, &rec),
                None => {
                    batch.spans[job.span].len = 0;
                    removed = true;
                }
            }
        }
        if removed {
            // Only a malformed sample is removed: a record is never empty (its header is 8 bytes).
            batch.spans.retain(|s| s.len != 0);
        }
        compact(&mut batch, out);
        batch.context = Some(info_out);
        out.push_or_recycle(batch);
    }

    /// The unwinder of process `pid` with its maps at `time`: the one last built for it while
    /// the maps are the same (the stamp says so without listing them), else one made of the
    /// modules of the maps.
    fn process(&mut self, pid: u32, time: u64) -> Arc<Process> {
        let stamp = self.machine.space(pid, time).stamp(misc::USER);
        let round = self.machine.round();
        if let Some(b) = self.processes.get_mut(&pid) {
            if b.stamp == stamp {
                b.used = round;
                return b.process.clone();
            }
        }
        let maps = self.machine.maps(pid, time);
        if let Some(b) = self.processes.get_mut(&pid) {
            if b.maps == maps {
                (b.stamp, b.used) = (stamp, round);
                return b.process.clone();
            }
        }
        if self.modules.0.len() >= MODULES_MAX {
            self.modules.0.clear();
        }
        let mut p = Process::new();
        for map in &maps {
            let i = map.dso.0 as usize;
            if self.dsos.len() <= i {
                self.dsos.resize_with(i + 1, || None);
            }
            if self.dsos[i].is_none() {
                let loaded = self.load(map.dso, pid);
                self.dsos[i] = Some(loaded);
            }
            let Some(Ok(info)) = &self.dsos[i] else {
                continue;
            };
            let (module, used) = self
                .modules
                .0
                .entry((map.dso.0, map.start, map.end, map.pgoff))
                .or_insert_with(|| {
                    // framehop keeps the name only for debugging.
                    let base = info.base_avma(map.start, map.pgoff);
                    (info.module("", map.start..map.end, base), round)
                });
            *used = round;
            p.add_module(module.clone(), info);
        }
        let p = Arc::new(p);
        self.processes.insert(
            pid,
            Built {
                stamp,
                maps,
                process: p.clone(),
                used: round,
            },
        );
        p
    }

    /// Looks for the unwind information of dso `id`, first mapped by process `pid`, checked
    /// against the build id the recording gives (its MMAP2's, else a BUILD_ID record's).
    fn load(&mut self, id: DsoId, pid: u32) -> Result<UnwindInfo, Missing> {
        let d = self.machine.dso(id);
        let build_id = match &d.identity {
            Identity::BuildId(b) if !b.is_empty() => Some(b.clone()),
            _ => self.noted_ids.get(&d.name).cloned(),
        };
        let root = self.roots.get(id.0 as usize).cloned().flatten();
        let inode = match d.identity {
            Identity::Inode { maj, min, ino, .. } => Some(Inode { maj, min, ino }),
            _ => None,
        };
        let found = dso::find(
            &self.sources,
            &d.name,
            pid,
            root.as_deref(),
            inode,
            build_id.as_deref(),
        );
        match &found.info {
            Ok(_) => self.c.dsos_loaded.add(1),
            Err(Missing::NotFound) => self.c.dsos_missing.add(1),
            Err(Missing::NoInfo) => self.c.dsos_no_info.add(1),
            Err(Missing::OtherBuild) => self.c.dsos_mismatch.add(1),
            Err(Missing::Pseudo) => {}
        }
        let name = String::from_utf8_lossy(&d.name).into_owned();
        let said = |u: &Unfound| u.name == name && u.build_id == build_id;
        // One line per file (a dso mapped under several identities is one).
        let new = !self.unfound.iter().any(said);
        if new && matches!(found.info, Err(Missing::NotFound | Missing::OtherBuild)) {
            let gone = !std::path::Path::new(&format!("/proc/{pid}")).exists();
            self.unfound.push(Unfound {
                name,
                build_id: build_id.or_else(|| {
                    use std::os::unix::ffi::OsStrExt;
                    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(&d.name));
                    self.sources.expected_id(&Wanted {
                        path,
                        build_id: None,
                        pid,
                        root: None,
                        inode: None,
                    })
                }),
                pid,
                gone,
                other_builds: found.other_builds,
            });
        }
        found.info
    }

    /// At the end, one line per dso whose unwind tables were not read for want of the right
    /// file: the files of other builds passed, or that its process was gone, and how to get it.
    fn say_what_is_missing(&self) {
        let mut notes = Vec::new();
        for u in &self.unfound {
            let id = u.build_id.as_deref().map(hex);
            let shown = id.as_deref().unwrap_or("unknown");
            let why = if !u.other_builds.is_empty() {
                let others: Vec<String> = u
                    .other_builds
                    .iter()
                    .map(|o| {
                        let oid = o.id.as_deref().map_or("none".into(), hex);
                        format!("{} (build id {oid})", o.at)
                    })
                    .collect();
                format!("only another build was found: {}", others.join(", "))
            } else if u.gone {
                format!(
                    "it is not at its path here and process {} was gone before its maps were read \
                     (a container's files are kept by `perfpipe archive` run on the host while it runs)",
                    u.pid
                )
            } else {
                "it is not at its path here".into()
            };
            eprintln!(
                "perfpipe: unwind: no unwind tables for {} (build id {shown}): {why}",
                u.name
            );
            let kind = if u.other_builds.is_empty() {
                "dso_not_found"
            } else {
                "dso_build_id_mismatch"
            };
            notes.push(vec![
                ("kind", NoteValue::Text(kind.into())),
                ("dso", NoteValue::Text(u.name.clone())),
                ("build_id", id.map_or(NoteValue::Null, NoteValue::Text)),
                (
                    "other_builds",
                    NoteValue::List(u.other_builds.iter().map(|o| o.at.clone()).collect()),
                ),
                ("hint", NoteValue::Text(HOW_TO_GET.into())),
            ]);
        }
        self.notes.set(notes);
        // How to get them, and debuginfod's failures: once a run.
        self.sources.end("unwind", !self.unfound.is_empty());
    }

    /// The stream info for downstream: the attrs of unwound samples rewritten.
    fn info_out(&mut self, info: &Arc<StreamInfo>) -> Arc<StreamInfo> {
        let same = self.info_in.as_ref().is_some_and(|i| Arc::ptr_eq(i, info));
        if same && !self.extras_changed {
            if let Some(o) = &self.info_out {
                return o.clone();
            }
        }
        let mut out = StreamInfo::clone(info);
        for (j, attr) in out.attrs.iter_mut().enumerate() {
            if self.extras.get(j).copied().flatten().is_some() {
                unwound_attr(attr);
            }
        }
        let out = Arc::new(out);
        self.info_in = Some(info.clone());
        self.info_out = Some(out.clone());
        self.extras_changed = false;
        out
    }

    fn count(&self, w: &Walked) {
        let c = &self.c;
        match w.outcome {
            Outcome::Complete => c.unwound.add(1),
            Outcome::StackEnd => c.stack_end.add(1),
            Outcome::NoInfoLater => c.no_info_later.add(1),
            Outcome::BadFrame => c.bad_frame.add(1),
            Outcome::FrameCap => c.frame_cap.add(1),
            Outcome::UnwinderPanic => c.unwinder_panic.add(1),
            Outcome::CfiFallbackFailed => c.cfi_failed.add(1),
            Outcome::NoUnwindInfo => c.no_unwind_info.add(1),
            Outcome::NoRegs => c.no_regs.add(1),
            Outcome::Malformed => c.malformed.add(1),
        }
        if matches!(
            w.outcome,
            Outcome::StackEnd
                | Outcome::NoInfoLater
                | Outcome::BadFrame
                | Outcome::FrameCap
                | Outcome::UnwinderPanic
                | Outcome::CfiFallbackFailed
        ) {
            c.partial.add(1);
        }
        if w.dyn_clamped {
            c.dyn_clamped.add(1);
        }
        c.frames.add(w.frames as u64);
        if w.fallback_steps > 0 {
            c.cfi_steps.add(u64::from(w.fallback_steps));
        }
    }
}

/// Rewrites record `i` of `batch` as `rec`: over its own bytes when it fits (an unwound sample is
/// its stack copy smaller), so the buffer does not grow, else appended. A batch with annotations
/// (about records by their start) gets the new record appended, as [`Batch::replace`] does.
fn rewrite(batch: &mut Batch, i: usize, rec: &[u8]) {
    let span = batch.spans[i];
    if rec.len() <= span.len as usize && batch.annotations.is_empty() {
        let start = span.start as usize;
        batch.data[start..start + rec.len()].copy_from_slice(rec);
        batch.spans[i].len = rec.len() as u32;
    } else {
        batch.replace(i, rec);
    }
}

/// Moves the records of an unwound batch to a buffer of their size when they fill less than a
/// quarter of it (the stack copies were most of it), and gives the big buffer back to the pool
/// for the reader: the batches queued downstream hold only what they carry. Not for a batch with
/// annotations (about records by their start).
fn compact(batch: &mut Batch, out: &Out<'_>) {
    let live: usize = batch.spans.iter().map(|s| s.len as usize).sum();
    if !batch.annotations.is_empty() || live.saturating_mul(4) >= batch.data.capacity() {
        return;
    }
    let mut data = Vec::with_capacity(live);
    for span in &mut batch.spans {
        let from = span.range();
        span.start = data.len() as u32;
        data.extend_from_slice(&batch.data[from]);
    }
    let big = std::mem::replace(&mut batch.data, data);
    batch.start = 0;
    out.recycle(Batch {
        data: big,
        ..Batch::default()
    });
}

/// An attr as it is after its samples are unwound.
pub fn unwound_attr(attr: &mut Attr) {
    attr.sample_type = sample::unwound_type(attr.sample_type);
    attr.flags = sample::unwound_flags(attr.flags);
    attr.layout = SampleLayout::new(attr.sample_type, attr.read_format, attr.sample_id_all());
}

impl Holding for Unwind {
    fn parts(&mut self) -> (&mut Hold, &mut Machine) {
        (&mut self.held, &mut self.machine)
    }

    /// Takes in a batch as it comes: notes its dwarf attrs and applies its side-band records to
    /// the address spaces.
    fn take_in(&mut self, batch: &Batch, info: &Arc<StreamInfo>) {
        let e = info.endian;
        for span in &batch.spans {
            let rt = RecordType(span.kind);
            match rt {
                RecordType::HEADER_ATTR => {
                    let rec = batch.bytes(span);
                    let Ok(attr) = Attr::parse(&rec[EVENT_HEADER_SIZE.min(rec.len())..], e) else {
                        continue;
                    };
                    if sample::wants_unwinding(attr.sample_type) {
                        self.note_attr(info, &attr, rec);
                    }
                }
                RecordType::HEADER_BUILD_ID => {
                    if let Some(b) = info.record(batch, span).build_id() {
                        if !b.build_id.is_empty() {
                            self.noted_ids
                                .entry(b.filename.to_vec())
                                .or_insert_with(|| b.build_id.to_vec());
                        }
                    }
                }
                rt if Machine::takes(rt) => {
                    let rec = info.record(batch, span);
                    let dso = self.machine.apply(&rec);
                    // A new dso of a user map: its process's root while it lives.
                    if let (Some(d), Some(m)) = (dso, rec.mmap()) {
                        let i = d.0 as usize;
                        if self.roots.len() <= i {
                            self.roots.resize(i + 1, None);
                            if m.cpumode != misc::KERNEL {
                                self.roots[i] = self.sources.root_of(m.pid);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// Unwinds a batch that is due and emits it.
    fn release(&mut self, batch: Batch, out: &mut Out<'_>) {
        match self.scan(&batch) {
            Some(s) => self.finish(batch, s, out),
            None => out.push(batch),
        }
    }

    /// Drops the unwinders and modules no sample asked for in [`KEEP_ROUNDS`] rounds.
    fn released(&mut self) {
        let round = self.machine.round();
        if round != self.swept {
            self.swept = round;
            let keep = |used: u64| used.saturating_add(KEEP_ROUNDS) >= round;
            self.processes.retain(|_, b| keep(b.used));
            self.modules.0.retain(|_, (_, used)| keep(*used));
        }
    }
}

impl Stage for Unwind {
    fn process(&mut self, batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        // This batch's samples are unwound later: the model keeps their history from now.
        self.hold(batch, out);
        Ok(Flow::Continue)
    }

    fn flush(&mut self, out: &mut Out<'_>) -> Result<(), StageError> {
        self.release_due(out, true);
        self.say_what_is_missing();
        Ok(())
    }

    fn notes(&self) -> Option<Notes> {
        Some(self.notes.clone())
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        let c = &self.c;
        let mut v = vec![
            ("samples_unwound", c.unwound.clone()),
            ("samples_partial", c.partial.clone()),
            ("partial_stack_end", c.stack_end.clone()),
            ("partial_no_unwind_info", c.no_info_later.clone()),
            ("partial_bad_frame", c.bad_frame.clone()),
            ("partial_frame_cap", c.frame_cap.clone()),
            ("partial_unwinder_panic", c.unwinder_panic.clone()),
            ("partial_cfi_fallback_failed", c.cfi_failed.clone()),
            ("cfi_fallback_steps", c.cfi_steps.clone()),
            ("samples_no_unwind_info", c.no_unwind_info.clone()),
            ("samples_no_user_regs", c.no_regs.clone()),
            ("samples_malformed", c.malformed.clone()),
            ("dyn_size_clamped", c.dyn_clamped.clone()),
            ("user_frames", c.frames.clone()),
            ("dsos_loaded", c.dsos_loaded.clone()),
            ("dsos_missing", c.dsos_missing.clone()),
            ("dsos_without_unwind_info", c.dsos_no_info.clone()),
            ("dsos_build_id_mismatch", c.dsos_mismatch.clone()),
        ];
        // The sources' counters, when this stage took them first (one set for the run).
        if self.reports_sources {
            v.extend(self.sources.counter_rows());
        }
        v
    }
}

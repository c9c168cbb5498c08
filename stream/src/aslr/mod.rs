//! `aslr`: remaps every recorded address to a canonical layout (`--aslr`), so that a recording
//! can be shared without the address-space layout of its host (the randomized bases of its
//! processes' libraries, stacks and heaps, and the kernel's KASLR offset), as perf 7.3's `perf
//! inject --aslr` does (`tools/perf/util/aslr.c`), on pipes as well as files.
//!
//! **The rule** (perf's): each process's maps are laid out again in the order their MMAP records
//! come, from `0x200000`, each at the next page after the one before, with a page of gap unless
//! the map continued the one before it in the input; the kernel's maps (`[kernel.kallsyms]_text`,
//! modules, BPF programs' KSYMBOLs) likewise from `0xffff800010000000`. A map keeps its file
//! offset, so every address names the same place of the same file; the maps of one file at one
//! load bias in one process (`start − pgoff`, which survives perf's splitting of overlapped maps)
//! share one base. Then:
//! - MMAP/MMAP2 `addr` is the new one; `pgoff`, for anonymous memory (`//anon`, `[heap]`,
//!   `[stack…]`, `/SYSV…`) and the kernel's own map (whose `pgoff` is the relocated `_text`), is
//!   the new address too (perf 6.1 and 7 relocate kallsyms by it, so kernel frames keep their names).
//! - A sample's `ip`, `addr`, callchain entries (context markers and the deferred cookie kept) and
//!   branch `from`/`to` are looked up in the input's address space at the sample's time (the
//!   [`Machine`] model, in the sample's cpumode, else the other one) and moved with their map; an
//!   address in no map becomes 0 (`addresses_unmapped`). CALLCHAIN_DEFERRED frames are moved too
//!   (perf 7.3 passes those unchanged).
//! - `REGS_USER` and `REGS_INTR` are taken out of the samples and the attrs (registers hold
//!   addresses); samples with a stack copy, raw data (tracepoints), a physical address or AUX
//!   data, and `offcpu-time` (BPF output) samples are dropped (`samples_dropped`), as perf drops
//!   them "as possible ASLR leak"; TEXT_POKE, AUX and AUXTRACE records are dropped, and so is the
//!   `BPF_PROG_INFO` feature (it lists the programs' kernel addresses); a breakpoint attr's
//!   `bp_addr` is zeroed.
//!
//! A forked process starts with its parent's layout (perf 7.3 gives the addresses of maps a child
//! inherited 0: it looks them up under the child's pid, where no MMAP put them).
//!
//! What still identifies the host: file paths and build ids (which name the binaries, and are
//! what symbolization needs), MMAP2's device and inode numbers, `comm`s, pids, times, and the
//! features (hostname, os release, command line, cpu). Options `drop-build-ids` (BUILD_ID records,
//! and the build ids of MMAP2 records, which become MMAP2s of device and inode 0) and `drop-host`
//! (the features `HOSTNAME`, `OSRELEASE`, `CMDLINE`, `CPUDESC`, `CPUID`, `TOTAL_MEM`,
//! `CPU_TOPOLOGY`, `NUMA_TOPOLOGY`, `MEM_TOPOLOGY`, `CACHE`) drop those too.
//!
//! **Order**: input order; records are rewritten or dropped, none added. **Buffering**: a batch is
//! held until two more FINISHED_ROUNDs have come (at most
//! [`HOLD_MAX_BYTES`](crate::model::hold::HOLD_MAX_BYTES) of batches; the stream model's [`Hold`],
//! as `unwind` and `symbolize` hold them): records are in time order only across rounds, so a
//! process's FORK and maps may come after its first samples; side-band records are applied to the
//! model as they come, the batch rewritten when it goes. **EOF**: the held batches.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use perfpipe_core::spec::{Flag, Kind, Options, StageOption, StageSpec};
use perfpipe_core::{Batch, Counter, Editor, Flow, Out, Span, Stage, StageError};

use crate::format::{
    context, feature, misc, sample, Attr, Record, RecordType, SampleLayout, StreamInfo,
    EVENT_HEADER_SIZE,
};
use crate::model::hold::{Hold, Holding};
use crate::model::machine::{Machine, Map};

mod rewrite;

/// How `aslr` appears on the command line: `--aslr [drop-build-ids,drop-host]`.
pub const SPEC: StageSpec = StageSpec {
    name: "aslr",
    help: "remap every recorded address to a canonical layout (perf inject --aslr), so no map address of the host survives",
    flags: &[Flag::stage_options(
        "aslr",
        "remap every recorded address to a canonical layout (perf inject --aslr)",
    )],
    options: &[
        StageOption {
            key: "drop-build-ids",
            kind: Kind::Switch,
            help: "also drop BUILD_ID records and MMAP2 build ids",
        },
        StageOption {
            key: "drop-host",
            kind: Kind::Switch,
            help: "also drop the features that name the host (hostname, os release, command line, cpu, memory)",
        },
    ],
    build: |_, o| Ok(Box::new(AslrConfig::from_options(o).build())),
    needs: &["decompress"],
};

/// Where perf 7.3 starts each process's maps.
pub const USER_START: u64 = 0x20_0000;
/// Where perf 7.3 starts the kernel's maps (64-bit).
pub const KERNEL_START: u64 = 0xffff_8000_1000_0000;
const PAGE: u64 = 4096;
/// The layout key of the kernel's maps (pid −1).
const KERNEL_PID: u32 = u32::MAX;

/// `PERF_SAMPLE_BRANCH_STACK`
const BRANCH_STACK: u64 = 1 << 11;
/// `PERF_SAMPLE_REGS_USER`
const REGS_USER: u64 = 1 << 12;
/// `PERF_SAMPLE_STACK_USER`
const STACK_USER: u64 = 1 << 13;
/// `PERF_SAMPLE_WEIGHT`, `DATA_SRC`, `TRANSACTION`: copied, between REGS_USER and REGS_INTR.
const BEFORE_INTR: [u64; 3] = [1 << 14, 1 << 15, 1 << 17];
/// `PERF_SAMPLE_WEIGHT_STRUCT` (in place of WEIGHT)
const WEIGHT_STRUCT: u64 = 1 << 24;
/// `PERF_SAMPLE_REGS_INTR`
const REGS_INTR: u64 = 1 << 18;
/// `PERF_SAMPLE_PHYS_ADDR`
const PHYS_ADDR: u64 = 1 << 19;
/// `PERF_SAMPLE_AUX`
const AUX: u64 = 1 << 20;
/// Samples with these fields are dropped (perf: "possible ASLR leak").
const LEAKY: u64 = sample::RAW | STACK_USER | PHYS_ADDR | AUX;
/// `PERF_SAMPLE_BRANCH_HW_INDEX` and `PERF_SAMPLE_BRANCH_COUNTERS` of `branch_sample_type`.
const BRANCH_HW_INDEX: u64 = 1 << 17;
const BRANCH_COUNTERS: u64 = 1 << 19;
/// `PERF_TYPE_SOFTWARE`, `PERF_COUNT_SW_BPF_OUTPUT` (perf's `offcpu-time` event),
/// `PERF_TYPE_BREAKPOINT`.
const TYPE_SOFTWARE: u32 = 1;
const SW_BPF_OUTPUT: u64 = 10;
const TYPE_BREAKPOINT: u32 = 5;
/// Offsets in `struct perf_event_attr`.
const ATTR_SAMPLE_TYPE: usize = 24;
const ATTR_BP_ADDR: usize = 56;
const ATTR_BRANCH_SAMPLE_TYPE: usize = 72;
const ATTR_SAMPLE_REGS_USER: usize = 80;
const ATTR_SAMPLE_REGS_INTR: usize = 96;
/// The features `drop-host` drops.
const HOST_FEATURES: [u32; 10] = [
    feature::HOSTNAME,
    feature::OSRELEASE,
    feature::CMDLINE,
    feature::CPUDESC,
    feature::CPUID,
    feature::TOTAL_MEM,
    feature::CPU_TOPOLOGY,
    feature::NUMA_TOPOLOGY,
    feature::MEM_TOPOLOGY,
    feature::CACHE,
];

/// Configuration of an `aslr` stage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AslrConfig {
    /// Drop BUILD_ID records and MMAP2 build ids too.
    pub drop_build_ids: bool,
    /// Drop the features that name the host.
    pub drop_host: bool,
}

impl AslrConfig {
    /// The configuration that checked options give.
    pub fn from_options(o: &Options) -> AslrConfig {
        AslrConfig {
            drop_build_ids: o.switch("drop-build-ids"),
            drop_host: o.switch("drop-host"),
        }
    }

    /// Builds the stage.
    pub fn build(&self) -> Aslr {
        Aslr {
            config: self.clone(),
            machine: Machine::new(),
            parents: HashMap::new(),
            held: Hold::default(),
            layouts: HashMap::new(),
            placed: VecDeque::new(),
            ksymbols: Vec::new(),
            extras: Vec::new(),
            info_in: None,
            info_out: None,
            c: Counters::default(),
        }
    }
}

/// A process's new layout: the end of its highest map, and each map's new base by (dso, load
/// bias).
#[derive(Clone, Debug, Default)]
struct Layout {
    top: Option<u64>,
    bases: HashMap<(Option<u32>, u64), u64>,
}

/// What a sample of an attr needs beyond its [`SampleLayout`].
#[derive(Clone, Copy, Debug, Default)]
struct Extra {
    branch_sample_type: u64,
    regs_user: u64,
    regs_intr: u64,
    /// perf's `offcpu-time` (a BPF output event): dropped.
    offcpu: bool,
}

#[derive(Clone, Debug, Default)]
struct Counters {
    remapped: Counter,
    unmapped: Counter,
    maps: Counter,
    dropped_samples: Counter,
    dropped_records: Counter,
}

/// The running `aslr` stage.
#[derive(Debug)]
pub struct Aslr {
    config: AslrConfig,
    machine: Machine,
    /// pid → the pid it was forked from.
    parents: HashMap<u32, u32>,
    /// Batches held back for their side-band.
    held: Hold,
    /// By pid ([`KERNEL_PID`] for the kernel's).
    layouts: HashMap<u32, Layout>,
    /// The new addresses of the MMAP, MMAP2 and KSYMBOL records taken in and not yet written,
    /// in stream order (`None`: a record too short to read).
    placed: VecDeque<Option<u64>>,
    /// KSYMBOLs: (address, length, new address).
    ksymbols: Vec<(u64, u64, u64)>,
    /// By attr index.
    extras: Vec<Extra>,
    info_in: Option<Arc<StreamInfo>>,
    info_out: Option<Arc<StreamInfo>>,
    c: Counters,
}

/// Anonymous memory and memory of no file (`is_anon_memory()`, `is_no_dso_memory()`): laid out by
/// address, not by file offset.
fn is_anon(name: &[u8]) -> bool {
    name == b"//anon"
        || name.starts_with(b"/dev/zero")
        || name.starts_with(b"/anon_hugepage")
        || name.starts_with(b"[stack")
        || name.starts_with(b"/SYSV")
        || name == b"[heap]"
}

/// The kernel's own map (not a module): its `pgoff` is an address.
fn is_kernel_image(name: &[u8]) -> bool {
    name.starts_with(b"[kernel.kallsyms]") || name.starts_with(b"[guest.kernel.kallsyms")
}

fn round_up(a: u64) -> u64 {
    a.wrapping_add(PAGE - 1) & !(PAGE - 1)
}

impl Aslr {
    fn layout_key(pid: u32, cpumode: u16) -> u32 {
        if misc::is_kernel(cpumode) {
            KERNEL_PID
        } else {
            pid
        }
    }

    /// The base key of a map: (dso, load bias), or (none, start) for anonymous memory.
    fn key(&self, map: &Map) -> (Option<u32>, u64) {
        if is_anon(&self.machine.dso(map.dso).name) {
            (Some(map.dso.0), map.start)
        } else {
            (Some(map.dso.0), map.start.wrapping_sub(map.pgoff))
        }
    }

    /// The new address of a map of `len` bytes at `start` (perf's `aslr_tool__findnew_mapping()`).
    fn findnew(
        &mut self,
        pid: u32,
        cpumode: u16,
        start: u64,
        len: u64,
        pgoff: u64,
        time: u64,
    ) -> u64 {
        let map = self.machine.find(pid, cpumode, start, time).copied();
        let (key, map_start, map_pgoff) = match &map {
            Some(m) => (self.key(m), m.start, m.pgoff),
            None => ((None, start), start, pgoff),
        };
        let contiguous = start
            .checked_sub(1)
            .and_then(|p| self.machine.find(pid, cpumode, p, time))
            .is_some_and(|m| m.end == start);
        let kernel = misc::is_kernel(cpumode);
        let key_pid = Self::layout_key(pid, cpumode);
        if !self.layouts.contains_key(&key_pid) {
            let inherited = self.ancestor_layout(key_pid).cloned().unwrap_or_default();
            self.layouts.insert(key_pid, inherited);
        }
        let layout = self.layouts.get_mut(&key_pid).expect("inserted above");
        let offset = map_pgoff.wrapping_add(start.wrapping_sub(map_start));
        if let Some(&base) = layout.bases.get(&key) {
            let new = base.wrapping_add(offset);
            layout.top = Some(
                layout
                    .top
                    .map_or(new.wrapping_add(len), |t| t.max(new.wrapping_add(len))),
            );
            return new;
        }
        let new = match layout.top {
            Some(top) if contiguous => round_up(top),
            Some(top) => round_up(top).wrapping_add(PAGE),
            None => round_up(if kernel { KERNEL_START } else { USER_START }),
        };
        layout.top = Some(
            layout
                .top
                .map_or(new.wrapping_add(len), |t| t.max(new.wrapping_add(len))),
        );
        layout.bases.insert(key, new.wrapping_sub(offset));
        self.c.maps.add(1);
        new
    }

    /// The layout of the nearest ancestor of `pid` that has one.
    fn ancestor_layout(&self, pid: u32) -> Option<&Layout> {
        let mut p = pid;
        for _ in 0..64 {
            p = *self.parents.get(&p)?;
            if let Some(l) = self.layouts.get(&p) {
                return Some(l);
            }
        }
        None
    }

    /// The base of map `m` in the layout of `pid` or, for a map it inherited, of its ancestors.
    fn base(&self, pid: u32, m: &Map) -> Option<u64> {
        let key = self.key(m);
        let mut p = pid;
        for _ in 0..64 {
            if let Some(&b) = self.layouts.get(&p).and_then(|l| l.bases.get(&key)) {
                return Some(b);
            }
            p = *self.parents.get(&p)?;
        }
        None
    }

    /// The new address of `addr` as a sample of `pid` in `cpumode` at `time` sees it; 0 if no
    /// map holds it.
    fn remap(&self, pid: u32, cpumode: u16, addr: u64, time: u64) -> u64 {
        let other = match cpumode {
            misc::KERNEL => misc::USER,
            misc::USER => misc::KERNEL,
            misc::GUEST_KERNEL => misc::GUEST_USER,
            misc::GUEST_USER => misc::GUEST_KERNEL,
            m => m,
        };
        let space = self.machine.space(pid, time);
        for mode in [cpumode, other] {
            if let Some(m) = space.find(mode, addr) {
                if let Some(base) = self.base(Self::layout_key(pid, mode), m) {
                    return base
                        .wrapping_add(m.pgoff)
                        .wrapping_add(addr.wrapping_sub(m.start));
                }
            }
            if misc::is_kernel(mode) {
                if let Some(&(s, _, new)) = self
                    .ksymbols
                    .iter()
                    .rev()
                    .find(|&&(s, l, _)| addr >= s && addr - s < l)
                {
                    return new.wrapping_add(addr - s);
                }
            }
        }
        0
    }

    fn count(&self, new: u64) -> u64 {
        if new == 0 {
            self.c.unmapped.add(1);
        } else {
            self.c.remapped.add(1);
        }
        new
    }

    /// Lays out the map of an MMAP/MMAP2 as it comes (just applied to the model): maps are laid
    /// out in stream order, before the samples held with them look addresses up.
    fn place_mmap(&mut self, rec: &Record<'_>) -> Option<u64> {
        let m = rec.mmap()?;
        let time = rec.sample_id().and_then(|s| s.time).unwrap_or(u64::MAX);
        Some(self.findnew(m.pid, rec.cpumode(), m.addr, m.len, m.pgoff, time))
    }

    /// An MMAP/MMAP2 written with the new address [`Aslr::place_mmap`] gave it.
    fn mmap(&mut self, rec: &Record<'_>) -> Option<Vec<u8>> {
        let new = self.placed.pop_front().flatten()?;
        let m = rec.mmap()?;
        let e = rec.endian;
        let cpumode = rec.cpumode();
        let mut out = rec.bytes.to_vec();
        out[16..24].copy_from_slice(&e.put_u64(new));
        if is_anon(m.filename) || (misc::is_kernel(cpumode) && is_kernel_image(m.filename)) {
            out[32..40].copy_from_slice(&e.put_u64(new));
        }
        let misc_ = rec.header().misc;
        if self.config.drop_build_ids
            && rec.record_type() == RecordType::MMAP2
            && misc_ & misc::MMAP_BUILD_ID != 0
            && out.len() >= 64
        {
            out[4..6].copy_from_slice(&e.put_u16(misc_ & !misc::MMAP_BUILD_ID));
            out[40..64].fill(0);
        }
        Some(out)
    }

    /// Lays out a KSYMBOL as it comes, in the kernel's layout.
    fn place_ksymbol(&mut self, rec: &Record<'_>) -> Option<u64> {
        let e = rec.endian;
        let b = rec.sized();
        let (addr, len) = (e.u64(b, 8)?, u64::from(e.u32(b, 16)?));
        let time = rec.sample_id().and_then(|s| s.time).unwrap_or(u64::MAX);
        let new = self.findnew(KERNEL_PID, misc::KERNEL, addr, len, 0, time);
        self.ksymbols.push((addr, len, new));
        Some(new)
    }

    /// A KSYMBOL written with its new address.
    fn ksymbol(&mut self, rec: &Record<'_>) -> Option<Vec<u8>> {
        let new = self.placed.pop_front().flatten()?;
        let e = rec.endian;
        let mut out = rec.bytes.to_vec();
        out[8..16].copy_from_slice(&e.put_u64(new));
        Some(out)
    }

    /// A CALLCHAIN_DEFERRED's user frames moved.
    fn deferred(&self, rec: &Record<'_>) -> Option<Vec<u8>> {
        let d = rec.callchain_deferred()?;
        let id = rec.sample_id().unwrap_or_default();
        let pid = id.pid.unwrap_or(0);
        let time = id.time.unwrap_or(u64::MAX);
        let e = rec.endian;
        let mut out = rec.bytes.to_vec();
        let mut mode = misc::USER;
        for (i, ip) in d.ips.entries().enumerate() {
            let new = if ip >= context::MAX {
                mode = context_mode(ip).unwrap_or(mode);
                ip
            } else {
                self.count(self.remap(pid, mode, ip, time))
            };
            out[24 + 8 * i..32 + 8 * i].copy_from_slice(&e.put_u64(new));
        }
        Some(out)
    }

    /// The stream info for downstream: every attr without the register bits.
    fn info_out(&mut self, info: &Arc<StreamInfo>) -> Arc<StreamInfo> {
        if let (Some(i), Some(o)) = (&self.info_in, &self.info_out) {
            if Arc::ptr_eq(i, info) {
                return o.clone();
            }
        }
        let mut out = StreamInfo::clone(info);
        for attr in out.attrs.iter_mut() {
            attr.sample_type = stripped_type(attr.sample_type);
            attr.layout =
                SampleLayout::new(attr.sample_type, attr.read_format, attr.sample_id_all());
        }
        let out = Arc::new(out);
        self.info_in = Some(info.clone());
        self.info_out = Some(out.clone());
        out
    }

    /// One record: kept, rewritten or dropped.
    fn record(&mut self, info: &StreamInfo, ed: &mut Editor<'_>, span: Span) {
        let rec = info.record(ed.batch(), &span);
        let new = match RecordType(span.kind) {
            RecordType::HEADER_ATTR => Some(self.attr(info, &rec)),
            RecordType::MMAP | RecordType::MMAP2 => self.mmap(&rec),
            RecordType::FORK => return,
            RecordType::SAMPLE => {
                let extra = self
                    .extras
                    .get(span.tag as usize)
                    .copied()
                    .unwrap_or_default();
                let new = self.sample(&rec, &extra);
                if new.is_none() {
                    self.c.dropped_samples.add(1);
                    ed.remove();
                    return;
                }
                new
            }
            RecordType::KSYMBOL => self.ksymbol(&rec),
            RecordType::CALLCHAIN_DEFERRED => self.deferred(&rec),
            RecordType::TEXT_POKE
            | RecordType::AUX
            | RecordType::AUXTRACE
            | RecordType::AUXTRACE_INFO
            | RecordType::AUXTRACE_ERROR => None,
            RecordType::HEADER_BUILD_ID if self.config.drop_build_ids => None,
            RecordType::HEADER_FEATURE => {
                let id = rec.endian.u64(rec.bytes, 8).unwrap_or(0);
                let host =
                    self.config.drop_host && HOST_FEATURES.iter().any(|&f| u64::from(f) == id);
                if !host && id != u64::from(feature::BPF_PROG_INFO) {
                    return;
                }
                None
            }
            _ => return,
        };
        match new {
            Some(bytes) => ed.replace(&bytes),
            None => {
                self.c.dropped_records.add(1);
                ed.remove();
            }
        }
    }
}

/// The cpumode a callchain context marker sets; `None` for one perf does not know (perf drops
/// such a sample).
fn context_mode(ip: u64) -> Option<u16> {
    Some(match ip {
        context::HV => misc::HYPERVISOR,
        context::KERNEL => misc::KERNEL,
        context::USER | context::USER_DEFERRED => misc::USER,
        context::GUEST | context::GUEST_KERNEL => misc::GUEST_KERNEL,
        context::GUEST_USER => misc::GUEST_USER,
        _ => return None,
    })
}

/// A sample_type without the register fields.
pub fn stripped_type(t: u64) -> u64 {
    t & !(REGS_USER | REGS_INTR)
}

impl Holding for Aslr {
    fn parts(&mut self) -> (&mut Hold, &mut Machine) {
        (&mut self.held, &mut self.machine)
    }

    /// Applies a batch's side-band to the address spaces as it comes, and lays its maps out.
    fn take_in(&mut self, batch: &Batch, info: &Arc<StreamInfo>) {
        for span in &batch.spans {
            let rt = RecordType(span.kind);
            match rt {
                rt if Machine::takes(rt) => {
                    let rec = info.record(batch, span);
                    self.machine.apply(&rec);
                    match rt {
                        RecordType::MMAP | RecordType::MMAP2 => {
                            let new = self.place_mmap(&rec);
                            self.placed.push_back(new);
                        }
                        RecordType::FORK => {
                            if let Some(t) = rec.task().filter(|t| t.pid != t.ppid) {
                                self.parents.insert(t.pid, t.ppid);
                                // The child's own maps go on after its parent's.
                                if let Some(l) = self.ancestor_layout(t.pid).cloned() {
                                    self.layouts.entry(t.pid).or_insert(l);
                                }
                            }
                        }
                        _ => {}
                    }
                }
                RecordType::KSYMBOL => {
                    let new = self.place_ksymbol(&info.record(batch, span));
                    self.placed.push_back(new);
                }
                _ => {}
            }
        }
    }

    /// Rewrites a batch that is due and emits it.
    fn release(&mut self, mut batch: Batch, out: &mut Out<'_>) {
        let Some(info) = StreamInfo::shared(&batch) else {
            out.push(batch);
            return;
        };
        let mut ed = batch.edit();
        while let Some(span) = ed.next_record() {
            self.record(&info, &mut ed, span);
        }
        ed.finish();
        batch.context = Some(self.info_out(&info));
        out.push_or_recycle(batch);
    }
}

impl Stage for Aslr {
    fn process(&mut self, batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        self.hold(batch, out);
        Ok(Flow::Continue)
    }

    fn flush(&mut self, out: &mut Out<'_>) -> Result<(), StageError> {
        self.release_due(out, true);
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        let c = &self.c;
        vec![
            ("addresses_remapped", c.remapped.clone()),
            ("addresses_unmapped", c.unmapped.clone()),
            ("maps_laid_out", c.maps.clone()),
            ("samples_dropped", c.dropped_samples.clone()),
            ("records_dropped", c.dropped_records.clone()),
        ]
    }
}

#[cfg(test)]
mod tests;

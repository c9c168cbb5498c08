//! perf's `offcpu-time` samples as perf ≥ 6.15 writes them: their fields in raw data, put back
//! where every reader of samples looks for them.
//!
//! `perf record --off-cpu` (BPF at `sched_switch`) writes samples of its `offcpu-time` event (a
//! BPF-output software event) whose attr has `PERF_SAMPLE_RAW` and no `PERF_SAMPLE_CALLCHAIN`
//! (`OFFCPU_SAMPLE_TYPES` in `tools/perf/util/off_cpu.h`). The raw data is, in u64s:
//!
//! ```text
//! [ pid word ][ period: ns off the cpu ][ nr ][ PERF_CONTEXT_USER, ips… (nr entries) ][ cgroup id ]
//! ```
//!
//! written by the BPF program for an interval past `--off-cpu-thresh` when the task is switched
//! back in (`off_cpu_dump()` in `util/bpf_skel/off_cpu.bpf.c`: pid word `tgid << 32 | pid`), and
//! by `off_cpu_write()` in `util/bpf_off_cpu.c` for the intervals summed in the BPF map, at the
//! end of the recording (pid word `pid << 32 | tgid`, time `OFF_CPU_TIMESTAMP` and up, the
//! sample's own tid, ip and period 0). perf reads both alike (`__set_offcpu_sample()` in
//! `util/evsel.c`, for a BPF-output event named `offcpu-time` with `PERF_SAMPLE_RAW`): the pid
//! word's first u32 in memory is the sample's pid, the second its tid; the period, the callchain
//! and the cgroup id replace the sample's, and its ip is the callchain's second entry (the first
//! after `PERF_CONTEXT_USER`). (So perf 7.3 shows a thread's direct dump with pid and tid
//! swapped; perfpipe reads it as perf does, so its profiles are perf's.)
//!
//! This part of `stitch` does what that parse does, in the stream: the attr of a BPF-output event
//! with `RAW` and without `CALLCHAIN` gets `CALLCHAIN`, and each of its samples a callchain before
//! its raw data: a sample of an event named `offcpu-time` whose raw data is that layout gets the
//! raw callchain, and its `TID`, `PERIOD` and `IP` fields the raw values (`offcpu_assembled`);
//! any other sample of such an attr an empty callchain (`nr` 0) and nothing else changed
//! (`offcpu_unassembled` counts those of an `offcpu-time` event whose raw data is not the
//! layout). The raw data stays, so perf 7 reads the output as it reads the input; perf 6.1, which
//! knows only the callchain, reads the output's samples as 7.x reads the input's. The off-CPU
//! model then charges them as samples of the older form: a BPF-output event whose samples have a
//! period and a callchain (`perfpipe_profile::offcpu`). The raw cgroup id becomes the sample's
//! `PERF_SAMPLE_CGROUP` field, as perf takes it for the sample's (`data->cgroup`, which `perf
//! report --sort cgroup` and `perf script -F cgroup` show): the cgroup of the thread that was off
//! the cpu, where the kernel wrote the cgroup of the task running the BPF program. (Only when no
//! field of its own size lies between the raw data and the cgroup, as in perf's attr; with a
//! branch stack or registers in between the field is left as it is.)

use std::sync::Arc;

use perfpipe_core::{Counter, Editor, Span};

use crate::format::{sample, Endian, RecordType, SampleLayout, StreamInfo, EVENT_HEADER_SIZE};
use crate::model::events::PerfNames;

/// `PERF_TYPE_SOFTWARE`.
const TYPE_SOFTWARE: u32 = 1;
/// `PERF_COUNT_SW_BPF_OUTPUT`.
const SW_BPF_OUTPUT: u64 = 10;
/// The event `perf record --off-cpu` adds (`OFFCPU_EVENT`).
const OFFCPU_EVENT: &str = "offcpu-time";
/// Offset of `sample_type` in a HEADER_ATTR record (after the 8-byte header: `u32 type, size`,
/// `u64 config`, `u64 sample_period`).
const ATTR_SAMPLE_TYPE: usize = EVENT_HEADER_SIZE + 24;

/// Whether an attr of this type, config and sample_type carries its callchain in raw data.
fn carries_raw(type_: u32, config: u64, sample_type: u64) -> bool {
    type_ == TYPE_SOFTWARE
        && config == SW_BPF_OUTPUT
        && sample_type & sample::RAW != 0
        && sample_type & sample::CALLCHAIN == 0
}

/// The raw-data `offcpu-time` samples' assembly: the state `stitch` keeps for it.
#[derive(Debug, Default)]
pub(super) struct OffCpu {
    events: PerfNames,
    /// The stream info last seen, and the one downstream gets for it (`None`: the same).
    info_in: Option<Arc<StreamInfo>>,
    info_out: Option<Arc<StreamInfo>>,
    pub(super) assembled: Counter,
    pub(super) unassembled: Counter,
}

impl OffCpu {
    /// The stream info downstream gets for `info`: every raw-data BPF-output attr with
    /// `CALLCHAIN` added. The same `Arc` when there is none.
    pub(super) fn info_out(&mut self, info: &Arc<StreamInfo>) -> Arc<StreamInfo> {
        if let (Some(i), Some(o)) = (&self.info_in, &self.info_out) {
            if Arc::ptr_eq(i, info) {
                return o.clone();
            }
        }
        let out = if info
            .attrs
            .iter()
            .any(|a| carries_raw(a.type_, a.config, a.sample_type))
        {
            let mut out = StreamInfo::clone(info);
            for a in out.attrs.iter_mut() {
                if carries_raw(a.type_, a.config, a.sample_type) {
                    a.sample_type |= sample::CALLCHAIN;
                    a.layout = SampleLayout::new(a.sample_type, a.read_format, a.sample_id_all());
                }
            }
            Arc::new(out)
        } else {
            info.clone()
        };
        self.info_in = Some(info.clone());
        self.info_out = Some(out.clone());
        out
    }

    /// Whether the sample `span` is one of a raw-data BPF-output attr (this part's to write).
    pub(super) fn takes(&self, info: &StreamInfo, span: &Span) -> bool {
        info.attrs
            .get(span.tag as usize)
            .is_some_and(|a| carries_raw(a.type_, a.config, a.sample_type))
    }

    /// One record of the stream (as `info`, upstream's, reads it).
    pub(super) fn record(&mut self, info: &StreamInfo, ed: &mut Editor<'_>, span: &Span) {
        match RecordType(span.kind) {
            RecordType::EVENT_UPDATE | RecordType::HEADER_FEATURE => {
                self.events
                    .observe(ed.bytes(span), RecordType(span.kind), info);
            }
            RecordType::HEADER_ATTR => {
                let b = ed.bytes(span);
                let e = info.endian;
                let (Some(t), Some(config), Some(st)) = (
                    e.u32(b, EVENT_HEADER_SIZE),
                    e.u64(b, EVENT_HEADER_SIZE + 8),
                    e.u64(b, ATTR_SAMPLE_TYPE),
                ) else {
                    return;
                };
                if carries_raw(t, config, st) {
                    let mut out = b.to_vec();
                    out[ATTR_SAMPLE_TYPE..ATTR_SAMPLE_TYPE + 8]
                        .copy_from_slice(&e.put_u64(st | sample::CALLCHAIN));
                    ed.replace(&out);
                }
            }
            RecordType::SAMPLE => {
                let Some(a) = info.attrs.get(span.tag as usize) else {
                    return;
                };
                if !carries_raw(a.type_, a.config, a.sample_type) {
                    return;
                }
                let named = self.events.name(span.tag as usize) == Some(OFFCPU_EVENT);
                let rec = info.record(ed.batch(), span);
                let new = assemble(rec.bytes, info.endian, &a.layout, named);
                if named && !new.1 {
                    self.unassembled.add(1);
                }
                if new.1 {
                    self.assembled.add(1);
                }
                if let Some(bytes) = new.0 {
                    ed.replace(&bytes);
                }
            }
            _ => {}
        }
    }
}

/// A sample of a raw-data attr laid out with `CALLCHAIN`: with the raw data's fields when
/// `named` and its raw data is the off-CPU layout (then `.1`), else with an empty callchain.
/// `None` when the record is too short to read its raw data (left as it is).
pub(super) fn assemble(
    rec: &[u8],
    e: Endian,
    layout: &SampleLayout,
    named: bool,
) -> (Option<Vec<u8>>, bool) {
    let fixed = usize::from(layout.fixed_end);
    let Some(read) = layout.read_size(rec, fixed, e) else {
        return (None, false);
    };
    let at = fixed + read;
    // The raw field: u32 size, then the data.
    let Some(size) = e.u32(rec, at).map(|s| s as usize) else {
        return (None, false);
    };
    let Some(raw) = rec.get(at + 4..at + 4 + size) else {
        return (None, false);
    };
    let parsed = named.then(|| offcpu_raw(raw, e)).flatten();
    let chain: &[u8] = match parsed {
        Some(p) => &raw[16..24 + 8 * p.nr],
        None => &[0; 8],
    };
    let mut out = Vec::with_capacity(rec.len() + chain.len());
    out.extend_from_slice(&rec[..at]);
    if let Some(p) = &parsed {
        let mut put = |off: Option<u16>, bytes: &[u8]| {
            if let Some(o) = off.map(usize::from) {
                out[o..o + 8].copy_from_slice(bytes);
            }
        };
        put(layout.tid, &raw[..8]);
        put(layout.period, &raw[8..16]);
        if let Some(ip) = p.ip {
            put(layout.ip, &raw[ip..ip + 8]);
        }
    }
    out.extend_from_slice(chain);
    out.extend_from_slice(&rec[at..]);
    if let (Some(p), Some(cg)) = (&parsed, cgroup_after_raw(layout)) {
        // perf takes the raw cgroup id for the sample's (`data->cgroup`): so does the field
        // when it follows the raw data, as in perf's own attr.
        let to = at + chain.len() + 4 + size + cg;
        if let Some(field) = out.get_mut(to..to + 8) {
            field.copy_from_slice(&raw[p.cgroup..p.cgroup + 8]);
        }
    }
    if out.len() > usize::from(u16::MAX) {
        return (None, false);
    }
    let n = out.len() as u16;
    out[6..8].copy_from_slice(&e.put_u16(n));
    (Some(out), parsed.is_some())
}

/// Where a sample of `layout` holds its `PERF_SAMPLE_CGROUP` field, counted from the end of its
/// raw data: 0 when no field lies between them (perf's `offcpu-time` attr:
/// `OFFCPU_SAMPLE_TYPES`); `None` without the field, or with fields of their own size between
/// (branch stack, registers, user stack…), which this part does not walk.
fn cgroup_after_raw(layout: &SampleLayout) -> Option<usize> {
    let t = layout.sample_type;
    let between = sample::BRANCH_STACK | sample::REGS_USER | sample::STACK_USER | sample::REGS_INTR;
    if t & sample::CGROUP == 0 || t & between != 0 {
        return None;
    }
    // The fixed-size fields between: WEIGHT (or WEIGHT_STRUCT), DATA_SRC, TRANSACTION,
    // PHYS_ADDR, a u64 each.
    let fixed = [
        sample::WEIGHT | sample::WEIGHT_STRUCT,
        sample::DATA_SRC,
        sample::TRANSACTION,
        sample::PHYS_ADDR,
    ];
    Some(8 * fixed.iter().filter(|&&f| t & f != 0).count())
}

/// What [`offcpu_raw`] found in raw data.
#[derive(Clone, Copy, Debug)]
pub(super) struct Raw {
    /// Callchain entries.
    nr: usize,
    /// Where the sample's ip (the second entry) is, if there is one.
    ip: Option<usize>,
    /// Where the cgroup id is.
    cgroup: usize,
}

/// Reads raw data as the off-CPU layout, as `__set_offcpu_sample()` does: pid word, period, `nr`,
/// `nr` entries, the cgroup id; `None` if it does not hold them all.
pub(super) fn offcpu_raw(raw: &[u8], e: Endian) -> Option<Raw> {
    let nr = usize::try_from(e.u64(raw, 16)?).ok()?;
    let end = nr.checked_mul(8)?.checked_add(24)?;
    // The cgroup id follows the entries.
    e.u64(raw, end)?;
    Some(Raw {
        nr,
        ip: (nr >= 2).then_some(32),
        cgroup: end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> SampleLayout {
        // perf's offcpu-time: IDENTIFIER | IP | TID | TIME | CPU | PERIOD | RAW.
        SampleLayout::new(
            sample::IDENTIFIER
                | sample::IP
                | sample::TID
                | sample::TIME
                | sample::CPU
                | sample::PERIOD
                | sample::RAW,
            0,
            true,
        )
    }

    /// A sample as `off_cpu_write()` writes it: fixed fields 0 but id and time, then the raw data.
    fn written(words: &[u64]) -> Vec<u8> {
        let mut v = vec![9, 0, 0, 0, 2, 0, 0, 0];
        for f in [7u64, 0, 0, !0 << 32, 0, 0] {
            v.extend_from_slice(&f.to_le_bytes());
        }
        v.extend_from_slice(&((words.len() * 8 + 4) as u32).to_le_bytes());
        for w in words {
            v.extend_from_slice(&w.to_le_bytes());
        }
        v.extend_from_slice(&[0; 4]);
        let n = v.len() as u16;
        v[6..8].copy_from_slice(&n.to_le_bytes());
        v
    }

    #[test]
    fn the_raw_fields_become_the_samples() {
        let user = crate::format::context::USER;
        let rec = written(&[100 << 32 | 200, 5000, 3, user, 0x401000, 0x402000, 77]);
        let l = layout();
        let (out, done) = assemble(&rec, Endian::Little, &l, true);
        let out = out.unwrap();
        assert!(done);
        let l2 = SampleLayout::new(l.sample_type | sample::CALLCHAIN, 0, true);
        let s = crate::format::Sample::new(&out, Endian::Little, &l2);
        // perf: the first u32 of the pid word is the pid, the second the tid.
        assert_eq!((s.pid(), s.tid()), (Some(200), Some(100)));
        assert_eq!(s.period(), Some(5000));
        assert_eq!(s.ip(), Some(0x401000));
        assert_eq!(s.time(), Some(!0 << 32));
        let chain: Vec<u64> = s.callchain().unwrap().entries().collect();
        assert_eq!(chain, [user, 0x401000, 0x402000]);
        // The raw data is still there, whole.
        assert_eq!(s.raw().unwrap().len(), 7 * 8 + 4);
        assert_eq!(usize::from(u16::from_le_bytes([out[6], out[7]])), out.len());
    }

    #[test]
    fn the_raw_cgroup_id_becomes_the_samples() {
        // perf's attr has PERF_SAMPLE_CGROUP: the kernel wrote the cgroup of the task that ran
        // the BPF program (here 0xdead) after the raw data; perf reads the raw one (77).
        let user = crate::format::context::USER;
        let l = SampleLayout::new(layout().sample_type | sample::CGROUP, 0, true);
        let with_cgroup = |words: &[u64]| {
            let mut rec = written(words);
            rec.extend_from_slice(&0xdeadu64.to_le_bytes());
            let n = rec.len() as u16;
            rec[6..8].copy_from_slice(&n.to_le_bytes());
            rec
        };
        let rec = with_cgroup(&[100 << 32 | 200, 5000, 3, user, 0x401000, 0x402000, 77]);
        let cgroup = |out: &[u8]| u64::from_le_bytes(out[out.len() - 8..].try_into().unwrap());
        let (out, done) = assemble(&rec, Endian::Little, &l, true);
        let out = out.unwrap();
        assert!(done);
        assert_eq!(cgroup(&out), 77);
        let l2 = SampleLayout::new(l.sample_type | sample::CALLCHAIN, 0, true);
        let s = crate::format::Sample::new(&out, Endian::Little, &l2);
        assert_eq!(s.callchain().unwrap().len(), 3);
        assert_eq!(s.raw().unwrap().len(), 7 * 8 + 4);
        // Not perf's layout (another event's raw data): the sample's own cgroup stays.
        let (out, done) = assemble(&rec, Endian::Little, &l, false);
        assert!(!done);
        assert_eq!(cgroup(&out.unwrap()), 0xdead);
        // A field of its own size between the raw data and the cgroup: left as it is.
        let regs = SampleLayout::new(l.sample_type | sample::REGS_USER, 0, true);
        assert_eq!(cgroup_after_raw(&regs), None);
        let weight = SampleLayout::new(l.sample_type | sample::WEIGHT, 0, true);
        assert_eq!(cgroup_after_raw(&weight), Some(8));
    }

    #[test]
    fn other_raw_data_gets_an_empty_callchain() {
        let l = layout();
        let l2 = SampleLayout::new(l.sample_type | sample::CALLCHAIN, 0, true);
        // Not named offcpu-time: left as it is, with nr 0.
        let rec = written(&[1, 2, 3, 4]);
        for (named, rec) in [(false, rec.clone()), (true, written(&[1, 2, 9]))] {
            let (out, done) = assemble(&rec, Endian::Little, &l, named);
            let out = out.unwrap();
            assert!(!done);
            let s = crate::format::Sample::new(&out, Endian::Little, &l2);
            assert_eq!(s.callchain().unwrap().len(), 0);
            assert_eq!(s.period(), Some(0));
            assert_eq!(out.len(), rec.len() + 8);
        }
        // A raw size past the record: left alone.
        let mut bad = written(&[1, 2, 3]);
        let at = 8 + 48;
        bad[at..at + 4].copy_from_slice(&1000u32.to_le_bytes());
        assert!(assemble(&bad, Endian::Little, &l, true).0.is_none());
    }
}

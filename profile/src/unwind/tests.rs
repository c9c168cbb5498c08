//! Unit tests of the `unwind` stage: the attr and sample rewrites, and walks over real unwind
//! information (this test binary's own `.eh_frame`) with stacks built to end each way a walk can:
//! complete, at the end of the copy, at the frame cap (unwind information that loops), on garbage
//! registers and stacks, on `dyn_size` past the copy, on truncated records; and the CFI fallback
//! over a synthetic `.eh_frame` whose CFA is in `rbx`, as ld.so's lazy-binding trampoline's is.

use std::path::PathBuf;

use object::{Object, ObjectSymbol, SymbolKind};
use perfpipe_core::harness;

use super::dso::{self, UnwindInfo};
use super::sample::{self, AttrExtra, REGS_ABI_64, REGS_USER, STACK_USER};
use super::*;
use perfpipe_stream::format::build::{self as fbuild, RecordWriter};
use perfpipe_stream::format::{
    context, misc, sample as st, Attr, Endian, Record, RecordType, PIPE_MAGIC,
};
use perfpipe_stream::synth::decoded;

const E: Endian = Endian::Little;
/// AX, BP, SP, IP: the registers in sample order are AX, BP, SP, IP.
const MASK: u64 = 1 << 0 | 1 << 6 | 1 << 7 | 1 << 8;
const TYPE: u64 = st::IP | st::TID | st::TIME | st::CALLCHAIN | REGS_USER | STACK_USER;
const PID: u32 = 77;
const SP: u64 = 0x7ffd_0000_1000;

fn attr_body(sample_type: u64) -> Vec<u8> {
    let mut a = vec![0u8; 128];
    a[4..8].copy_from_slice(&128u32.to_le_bytes());
    a[24..32].copy_from_slice(&sample_type.to_le_bytes());
    let flags = perfpipe_stream::format::flag::SAMPLE_ID_ALL | sample::EXCLUDE_CALLCHAIN_USER;
    a[40..48].copy_from_slice(&flags.to_le_bytes());
    a[80..88].copy_from_slice(&MASK.to_le_bytes());
    a[88..92].copy_from_slice(&8192u32.to_le_bytes());
    a
}

fn header_attr(sample_type: u64) -> Vec<u8> {
    let mut rec = Vec::new();
    fbuild::header_attr(&mut rec, E, &attr_body(sample_type), &[1, 2]);
    rec
}

struct S<'a> {
    ip: u64,
    chain: &'a [u64],
    abi: u64,
    regs: (u64, u64, u64),
    stack: &'a [u8],
    size: u64,
    dyn_size: u64,
}

impl Default for S<'_> {
    fn default() -> Self {
        S {
            ip: 0x1000,
            chain: &[context::KERNEL, 0xffff_ffff_8100_0000],
            abi: REGS_ABI_64,
            regs: (0x1000, SP, 0),
            stack: &[],
            size: 0,
            dyn_size: 0,
        }
    }
}

/// A SAMPLE of [`TYPE`] (the stack copy's size field is `size`, its bytes `stack`, padded).
fn sample_rec(s: &S<'_>) -> Vec<u8> {
    let mut rec = Vec::new();
    let mut w = RecordWriter::new(&mut rec, RecordType::SAMPLE, misc::USER, E);
    w.u64(s.ip).u32(PID).u32(PID).u64(5);
    w.u64(s.chain.len() as u64);
    for &c in s.chain {
        w.u64(c);
    }
    w.u64(s.abi);
    if s.abi != 0 {
        let (ip, sp, bp) = s.regs;
        w.u64(0xaa).u64(bp).u64(sp).u64(ip);
    }
    w.u64(s.size);
    if s.size != 0 {
        w.bytes(s.stack);
        w.zeros((s.size as usize).saturating_sub(s.stack.len()));
        w.u64(s.dyn_size);
    }
    w.finish();
    rec
}

fn extra() -> AttrExtra {
    AttrExtra {
        regs_user: MASK,
        branch_hw_index: false,
    }
}

fn layouts() -> (SampleLayout, Attr) {
    let attr = Attr::parse(&attr_body(TYPE), E).unwrap();
    let mut out = attr.clone();
    unwound_attr(&mut out);
    (attr.layout, out)
}

/// The user frames of a rewritten sample, read back through the unwound attr.
fn user_frames(rec: &[u8], out: &Attr) -> (Vec<u64>, Vec<u64>) {
    let s = Record::new(rec, E, Some(out)).sample().expect("a sample");
    let entries: Vec<u64> = s.callchain().expect("a callchain").entries().collect();
    let at = entries.iter().position(|&x| x == context::USER);
    match at {
        Some(i) => (entries[..i].to_vec(), entries[i + 1..].to_vec()),
        None => (entries, Vec::new()),
    }
}

#[test]
fn attr_rewrite_drops_regs_and_stack_and_keeps_the_rest() {
    let rec = header_attr(TYPE & !st::CALLCHAIN);
    let out = sample::rewrite_attr(&rec, E);
    assert_eq!(out.len(), rec.len());
    let a = Attr::parse(&out[8..], E).unwrap();
    assert_eq!(a.sample_type, st::IP | st::TID | st::TIME | st::CALLCHAIN);
    assert_eq!(a.ids, [1, 2]);
    assert_eq!(a.flags & sample::EXCLUDE_CALLCHAIN_USER, 0);
    assert!(a.sample_id_all());
    assert_eq!(
        &out[8 + 80..8 + 92],
        &[0; 12],
        "sample_regs_user, sample_stack_user"
    );
    assert_eq!(sample::attr_extra(&rec, E), extra());
    // A short (64-byte, version 0) attr has no regs fields: nothing past it is touched.
    let mut short = Vec::new();
    fbuild::header_attr(&mut short, E, &attr_body(TYPE)[..64], &[9]);
    short[8 + 4..8 + 8].copy_from_slice(&64u32.to_le_bytes());
    let out = sample::rewrite_attr(&short, E);
    assert_eq!(&out[8 + 64..], &9u64.to_le_bytes());
}

#[test]
fn rewrite_keeps_the_kernel_part_and_appends_the_user_frames() {
    let (layout, out) = layouts();
    let stack = [7u8; 64];
    let rec = sample_rec(&S {
        chain: &[
            context::KERNEL,
            0xffff_ffff_8100_0010,
            context::USER,
            0x1234,
        ],
        stack: &stack,
        size: 64,
        dyn_size: 32,
        ..S::default()
    });
    let parts = sample::parse(&rec, E, &layout, &extra()).unwrap();
    assert_eq!(parts.regs, Some((0x1000, SP, 0)));
    assert_eq!(parts.stack.len(), 32);
    assert!(!parts.dyn_size_clamped);
    let mut new = Vec::new();
    assert_eq!(
        sample::rewrite(&rec, E, &parts, &[0x1000, 0x2000], &mut new),
        2
    );
    assert!(new.len() < rec.len());
    assert_eq!(u16::from_le_bytes([new[6], new[7]]) as usize, new.len());
    let (kernel, user) = user_frames(&new, &out);
    assert_eq!(kernel, [context::KERNEL, 0xffff_ffff_8100_0010]);
    assert_eq!(user, [0x1000, 0x2000]);
    let s = Record::new(&new, E, Some(&out)).sample().unwrap();
    assert_eq!(
        (s.ip(), s.pid(), s.time()),
        (Some(0x1000), Some(PID), Some(5))
    );
    // No user frames: no PERF_CONTEXT_USER either.
    let mut new = Vec::new();
    sample::rewrite(&rec, E, &parts, &[], &mut new);
    assert_eq!(user_frames(&new, &out).0.len(), 2);
}

/// This test binary's own unwind information, mapped at `BASE`, and a function's entry address.
struct Own {
    info: UnwindInfo,
    process: Process,
    /// Entry (svma) of a function with unwind information and its size.
    func: (u64, u64),
}

const BASE: u64 = 0x5555_0000_0000;

fn own() -> Own {
    let exe: PathBuf = std::env::current_exe().unwrap();
    let info = dso::load(exe.as_os_str().as_encoded_bytes(), std::process::id()).unwrap();
    let data = std::fs::read(&exe).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let func = obj
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.size() >= 64)
        .find(|s| s.name().is_ok_and(|n| n.contains("unwind")))
        .map(|s| (s.address(), s.size()))
        .expect("a function symbol");
    let &(vaddr, off, filesz) = info
        .loads()
        .iter()
        .find(|&&(v, _, sz)| func.0 >= v && func.0 < v + sz)
        .expect("the function's PT_LOAD");
    let mut process = Process::new();
    process.add(
        &info,
        "self",
        BASE + (vaddr & !0xfff),
        BASE + vaddr + filesz,
        off & !0xfff,
    );
    Own {
        info,
        process,
        func,
    }
}

/// A stack whose every word returns to just after `func`'s entry: at the entry the CFA is
/// `rsp + 8`, so each frame unwinds to the same rule 8 bytes up — unwind information that loops.
fn looping_stack(func: u64, bytes: usize) -> Vec<u8> {
    (0..bytes / 8)
        .flat_map(|_| (BASE + func + 1).to_le_bytes())
        .collect()
}

fn walk_with(o: &Own, s: &S<'_>, max_frames: usize) -> (Walked, Vec<u64>) {
    let (layout, out) = layouts();
    let rec = sample_rec(s);
    let w = walk(&rec, E, &layout, &extra(), Some(&o.process), max_frames);
    let frames = w
        .record
        .as_ref()
        .map(|r| user_frames(r, &out).1)
        .unwrap_or_default();
    (w, frames)
}

#[test]
fn module_bias_from_the_pt_loads() {
    let o = own();
    assert!(o.info.has_unwind_info());
    assert!(o.process.covers(BASE + o.func.0));
    assert!(!o.process.covers(BASE - 1));
    let &(vaddr, off, _) = o.info.loads().iter().find(|l| l.0 <= o.func.0).unwrap();
    assert_eq!(
        o.info.base_avma(BASE + (vaddr & !0xfff), off & !0xfff),
        BASE
    );
}

#[test]
fn looping_unwind_info_stops_at_the_frame_cap() {
    let o = own();
    let ip = BASE + o.func.0;
    let stack = looping_stack(o.func.0, 65000);
    let s = S {
        ip,
        regs: (ip, SP, 0),
        stack: &stack,
        size: 65000,
        dyn_size: 65000,
        ..S::default()
    };
    let (w, frames) = walk_with(&o, &s, MAX_FRAMES);
    assert_eq!(w.outcome, Outcome::FrameCap);
    assert_eq!(frames.len(), MAX_FRAMES);
    assert_eq!(frames[0], ip);
    assert!(frames[1..].iter().all(|&f| f == ip), "return address - 1");
    let (w, frames) = walk_with(&o, &s, 5);
    assert_eq!((w.outcome, frames.len()), (Outcome::FrameCap, 5));
}

#[test]
fn the_end_of_the_copy_ends_the_walk() {
    let o = own();
    let ip = BASE + o.func.0;
    let stack = looping_stack(o.func.0, 256);
    let (w, frames) = walk_with(
        &o,
        &S {
            ip,
            regs: (ip, SP, 0),
            stack: &stack,
            size: 256,
            dyn_size: 256,
            ..S::default()
        },
        MAX_FRAMES,
    );
    assert_eq!(w.outcome, Outcome::StackEnd);
    assert_eq!(frames.len(), 1 + 256 / 8);
    // Only dyn_size bytes of the copy are read, even if the copy holds more.
    let (w, frames) = walk_with(
        &o,
        &S {
            ip,
            regs: (ip, SP, 0),
            stack: &stack,
            size: 256,
            dyn_size: 64,
            ..S::default()
        },
        MAX_FRAMES,
    );
    assert_eq!((w.outcome, frames.len()), (Outcome::StackEnd, 1 + 8));
}

#[test]
fn dyn_size_past_the_copy_is_clamped() {
    let o = own();
    let ip = BASE + o.func.0;
    let stack = looping_stack(o.func.0, 128);
    let (w, frames) = walk_with(
        &o,
        &S {
            ip,
            regs: (ip, SP, 0),
            stack: &stack,
            size: 128,
            dyn_size: 1 << 40,
            ..S::default()
        },
        MAX_FRAMES,
    );
    assert!(w.dyn_clamped);
    assert_eq!((w.outcome, frames.len()), (Outcome::StackEnd, 1 + 16));
}

#[test]
fn truncated_records_are_malformed_and_dropped() {
    let o = own();
    let (layout, _) = layouts();
    let stack = [0u8; 512];
    let rec = sample_rec(&S {
        stack: &stack,
        size: 512,
        dyn_size: 512,
        ..S::default()
    });
    for cut in [rec.len() - 8, rec.len() - 300, 60, 48, 40, 8] {
        let mut short = rec[..cut].to_vec();
        short[6..8].copy_from_slice(&(cut as u16).to_le_bytes());
        let w = walk(&short, E, &layout, &extra(), Some(&o.process), MAX_FRAMES);
        assert_eq!(w.outcome, Outcome::Malformed, "cut at {cut}");
        assert!(w.record.is_none());
    }
    // A stack size field far past the record.
    let mut rec = sample_rec(&S::default());
    let n = rec.len();
    rec[n - 8..].copy_from_slice(&(u64::MAX - 3).to_le_bytes());
    let w = walk(&rec, E, &layout, &extra(), Some(&o.process), MAX_FRAMES);
    assert_eq!(w.outcome, Outcome::Malformed);
}

#[test]
fn no_regs_and_no_unwind_info() {
    let o = own();
    let (layout, out) = layouts();
    // A kernel thread: abi 0, no registers; the kernel part stays, no user frames.
    let rec = sample_rec(&S {
        abi: 0,
        ..S::default()
    });
    let w = walk(&rec, E, &layout, &extra(), Some(&o.process), MAX_FRAMES);
    assert_eq!(w.outcome, Outcome::NoRegs);
    let (kernel, user) = user_frames(w.record.as_ref().unwrap(), &out);
    assert_eq!((kernel.len(), user.len()), (2, 0));
    // An ip in no module: that frame only.
    let rec = sample_rec(&S::default());
    let w = walk(&rec, E, &layout, &extra(), Some(&o.process), MAX_FRAMES);
    assert_eq!(w.outcome, Outcome::NoUnwindInfo);
    assert_eq!(user_frames(w.record.as_ref().unwrap(), &out).1, [0x1000]);
    let w = walk(&rec, E, &layout, &extra(), None, MAX_FRAMES);
    assert_eq!(w.outcome, Outcome::NoUnwindInfo);
    // A 32-bit process (abi 1): no usable registers.
    let rec = sample_rec(&S {
        abi: 1,
        ..S::default()
    });
    let w = walk(&rec, E, &layout, &extra(), Some(&o.process), MAX_FRAMES);
    assert_eq!(w.outcome, Outcome::NoRegs);
}

#[test]
fn garbage_registers_and_stacks_never_hang_or_crash() {
    let o = own();
    let (layout, out) = layouts();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let text = o.func.0;
    for round in 0..3000 {
        let stack: Vec<u8> = (0..1024)
            .flat_map(|i| {
                let r = rand();
                // Mix plausible return addresses and stack pointers with noise.
                match (r >> 60, i % 3) {
                    (0..=5, _) => (BASE + text + r % 4096).to_le_bytes(),
                    (6..=8, _) => (SP + r % 8192).to_le_bytes(),
                    _ => r.to_le_bytes(),
                }
            })
            .collect();
        let ip = match round % 3 {
            0 => BASE + text + rand() % o.func.1,
            1 => BASE + text + rand() % 65536,
            _ => rand(),
        };
        let (sp, bp) = match round % 4 {
            0 => (SP, SP + rand() % 8192),
            1 => (rand(), rand()),
            2 => (u64::MAX - 7, u64::MAX),
            _ => (0, 0),
        };
        let rec = sample_rec(&S {
            ip,
            regs: (ip, sp, bp),
            stack: &stack,
            size: stack.len() as u64,
            dyn_size: rand() % 16384,
            ..S::default()
        });
        let w = walk(&rec, E, &layout, &extra(), Some(&o.process), 64);
        let frames = user_frames(w.record.as_ref().expect("well-formed"), &out).1;
        assert!(!frames.is_empty() && frames.len() <= 64, "{}", frames.len());
        assert_eq!(frames.len(), w.frames);
    }
}

/// The sample-id trailer of [`TYPE`]'s attr: `pid`, `time`.
fn trailer(pid: u32, time: u64) -> fbuild::Trailer<'static> {
    let layout = perfpipe_stream::format::SampleLayout::new(TYPE, 0, true)
        .trailer
        .expect("sample_id_all");
    let id = perfpipe_stream::format::SampleId {
        pid: Some(pid),
        tid: Some(pid),
        time: Some(time),
        ..Default::default()
    };
    fbuild::Trailer::SampleId(id, layout)
}

/// A pipe stream: header, the dwarf attr, an MMAP2 of this test binary (at time 1), then
/// `samples` (at time 5).
fn stream(o: &Own, samples: &[Vec<u8>]) -> Vec<u8> {
    let mut s = Vec::new();
    s.extend_from_slice(&PIPE_MAGIC.to_le_bytes());
    s.extend_from_slice(&16u64.to_le_bytes());
    s.extend_from_slice(&header_attr(TYPE));
    let exe = std::env::current_exe().unwrap();
    let &(vaddr, off, filesz) = o
        .info
        .loads()
        .iter()
        .find(|&&(v, _, sz)| o.func.0 >= v && o.func.0 < v + sz)
        .unwrap();
    let m = perfpipe_stream::format::Mmap {
        pid: PID,
        tid: PID,
        addr: BASE + (vaddr & !0xfff),
        len: (vaddr & 0xfff) + filesz,
        pgoff: off & !0xfff,
        file_id: perfpipe_stream::format::FileId::None,
        prot: 5,
        flags: 2,
        filename: exe.as_os_str().as_encoded_bytes(),
        cpumode: misc::USER,
    };
    fbuild::mmap2(&mut s, E, &m, trailer(PID, 1));
    for r in samples {
        s.extend_from_slice(r);
    }
    s
}

#[test]
fn the_stage_rewrites_attrs_and_samples_in_order_sequential_or_parallel() {
    let o = own();
    let ip = BASE + o.func.0;
    let stack = looping_stack(o.func.0, 80);
    let good = sample_rec(&S {
        ip,
        regs: (ip, SP, 0),
        stack: &stack,
        size: 80,
        dyn_size: 80,
        ..S::default()
    });
    let mut bad = sample_rec(&S::default());
    let n = bad.len();
    bad[n - 8..].copy_from_slice(&4096u64.to_le_bytes()); // a copy past the record
    let samples: Vec<Vec<u8>> = (0..40)
        .map(|i| if i == 17 { bad.clone() } else { good.clone() })
        .collect();
    let input = stream(&o, &samples);
    let pool = Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap(),
    );
    let mut outputs = Vec::new();
    for (parallel, chunk) in [(false, 1 << 20), (true, 1 << 20), (true, 700), (false, 333)] {
        let cfg = UnwindConfig {
            parallel,
            parallel_min: 2,
            ..UnwindConfig::default()
        };
        let mut stage = cfg.build(parallel.then(|| pool.clone()));
        let out = harness::run_stage(&mut stage, decoded(&input, chunk)).unwrap();
        let mut recs: Vec<(u32, Vec<u8>)> = Vec::new();
        for b in &out {
            let info = StreamInfo::of(b).expect("the stream info rides on");
            assert_eq!(
                info.attrs[0].sample_type,
                sample::unwound_type(TYPE),
                "downstream sees the new layout"
            );
            for s in &b.spans {
                recs.push((s.kind, b.bytes(s).to_vec()));
            }
        }
        let kinds: Vec<u32> = recs.iter().map(|r| r.0).collect();
        assert_eq!(
            kinds.iter().filter(|&&k| k == RecordType::SAMPLE.0).count(),
            39
        );
        let attr = &recs
            .iter()
            .find(|r| r.0 == RecordType::HEADER_ATTR.0)
            .unwrap()
            .1;
        let attr = Attr::parse(&attr[8..], E).unwrap();
        assert_eq!(attr.sample_type, sample::unwound_type(TYPE));
        for (_, r) in recs.iter().filter(|r| r.0 == RecordType::SAMPLE.0) {
            let (kernel, user) = user_frames(r, &attr);
            assert_eq!(kernel.len(), 2);
            assert_eq!(user.len(), 1 + 10);
            assert!(user.iter().all(|&f| f == ip));
        }
        let c = stage.counters();
        let get = |name: &str| c.iter().find(|(n, _)| *n == name).unwrap().1.get();
        assert_eq!(get("samples_malformed"), 1);
        assert_eq!(get("partial_stack_end"), 39);
        assert_eq!(get("samples_partial"), 39);
        assert_eq!(get("dsos_loaded"), 1);
        outputs.push(recs);
    }
    assert!(
        outputs.windows(2).all(|w| w[0] == w[1]),
        "same output every way"
    );
}

/// The pieces of a stream for the hold tests: the header and attr, the MMAP2 of this test
/// binary, a sample of `pid` that unwinds to 11 frames there, and a FINISHED_ROUND.
struct Pieces {
    head: Vec<u8>,
    mmap: Vec<u8>,
    good: Vec<u8>,
    round: Vec<u8>,
}

fn pieces(pid: u32) -> Pieces {
    let o = own();
    let ip = BASE + o.func.0;
    let stack = looping_stack(o.func.0, 80);
    let mut good = sample_rec(&S {
        ip,
        regs: (ip, SP, 0),
        stack: &stack,
        size: 80,
        dyn_size: 80,
        ..S::default()
    });
    good[16..20].copy_from_slice(&pid.to_le_bytes());
    good[20..24].copy_from_slice(&pid.to_le_bytes());
    let mut full = stream(&o, &[]);
    let mmap = full.split_off(16 + header_attr(TYPE).len());
    let mut round = Vec::new();
    fbuild::empty(&mut round, RecordType::FINISHED_ROUND, E);
    Pieces {
        head: full,
        mmap,
        good,
        round,
    }
}

/// Runs `s` through the stage in large and small batches: every one of its `samples` samples is
/// unwound in full, none without unwind information.
fn assert_all_unwound_after_a_hold(s: &[u8], samples: usize) {
    let attr_out = layouts().1;
    for chunk in [1 << 20, 200] {
        let mut stage = UnwindConfig::default().build(None);
        let out = harness::run_stage(&mut stage, decoded(s, chunk)).unwrap();
        let recs: Vec<&[u8]> = out
            .iter()
            .flat_map(|b| {
                b.spans
                    .iter()
                    .filter(|s| s.kind == RecordType::SAMPLE.0)
                    .map(|s| b.bytes(s))
            })
            .collect();
        assert_eq!(recs.len(), samples);
        for r in &recs {
            assert_eq!(user_frames(r, &attr_out).1.len(), 11, "chunk {chunk}");
        }
        let c = stage.counters();
        let get = |name: &str| c.iter().find(|(n, _)| *n == name).unwrap().1.get();
        assert_eq!(get("samples_no_unwind_info"), 0, "chunk {chunk}");
    }
}

fn task(kind: RecordType, pid: u32, ppid: u32, time: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let t = perfpipe_stream::format::Task {
        pid,
        ppid,
        tid: pid,
        ptid: ppid,
        time,
    };
    fbuild::task(&mut out, E, kind, 0, &t, trailer(pid, time));
    out
}

#[test]
fn a_child_sampled_before_its_fork_and_its_parents_maps_is_unwound_with_them() {
    // Records are ordered by time only across rounds: the child's samples (on its cpu) can come
    // before its FORK and before the parent's MMAP2 (on the parent's cpu).
    let p = pieces(88);
    let mut s = p.head;
    for _ in 0..5 {
        s.extend_from_slice(&p.good);
    }
    s.extend_from_slice(&task(RecordType::FORK, 88, PID, 3));
    s.extend_from_slice(&p.round);
    s.extend_from_slice(&p.mmap);
    s.extend_from_slice(&p.good);
    s.extend_from_slice(&p.round);
    s.extend_from_slice(&p.good);
    assert_all_unwound_after_a_hold(&s, 7);
}

#[test]
fn samples_held_past_their_processs_exit_are_unwound_with_its_maps() {
    // Under load, a whole short run can sit in the hold: samples before the process's MMAP2 (other
    // cpus), the MMAP2, the EXIT, and the rounds after it that retire the process.
    let p = pieces(PID);
    let mut s = p.head;
    for _ in 0..5 {
        s.extend_from_slice(&p.good);
    }
    s.extend_from_slice(&p.mmap);
    s.extend_from_slice(&p.good);
    s.extend_from_slice(&task(RecordType::EXIT, PID, PID, 9));
    for _ in 0..3 {
        s.extend_from_slice(&p.round);
    }
    assert_all_unwound_after_a_hold(&s, 6);
}

#[test]
fn unwinders_of_processes_no_sample_asks_for_are_dropped() {
    // 60 short children of the mapped process, one after the other, a round each: every sample
    // is unwound with the maps its child inherited, the children share their parent's modules,
    // and the unwinders of the children gone for KEEP_ROUNDS rounds are dropped (each EXIT is
    // held with its samples, whose unwinder would otherwise stay).
    let parent = pieces(PID);
    let mut s = parent.head.clone();
    s.extend_from_slice(&parent.mmap);
    s.extend_from_slice(&parent.round);
    for child in 1000..1060 {
        let p = pieces(child);
        s.extend_from_slice(&task(RecordType::FORK, child, PID, 3));
        s.extend_from_slice(&p.good);
        s.extend_from_slice(&p.good);
        s.extend_from_slice(&task(RecordType::EXIT, child, child, 9));
        s.extend_from_slice(&p.round);
    }
    assert_all_unwound_after_a_hold(&s, 120);
    // In batches of a record or two, so that they are let go round by round.
    let mut stage = UnwindConfig::default().build(None);
    harness::run_stage(&mut stage, decoded(&s, 200)).unwrap();
    assert!(
        stage.processes.len() <= KEEP_ROUNDS as usize + 3,
        "{} unwinders kept",
        stage.processes.len()
    );
    assert_eq!(stage.modules.0.len(), 1, "one module: the parent's map");
}

#[test]
fn a_file_of_another_build_gives_no_unwind_information() {
    use std::os::unix::ffi::OsStrExt;
    let exe = std::env::current_exe().unwrap();
    let name = exe.as_os_str().as_bytes();
    let none = crate::symbols::sources::Sources::none();
    let other = dso::find(&none, name, u32::MAX, None, None, Some(&[0xab; 20]));
    assert_eq!(other.info.unwrap_err(), dso::Missing::OtherBuild);
    assert_eq!(other.other_builds.len(), 1);
    assert_eq!(other.other_builds[0].at, exe.display().to_string());
    let data = std::fs::read(&exe).unwrap();
    let id = perfpipe_stream::model::dso::elf_build_id(&data).expect("a build id");
    let right = dso::find(&none, name, u32::MAX, None, None, Some(id.as_bytes()));
    assert!(right.info.is_ok_and(|i| i.has_unwind_info()));
    assert_eq!(right.from, Some(exe.display().to_string()));
    // No id: the file at the path is trusted.
    assert!(dso::load(name, u32::MAX).is_ok());
}

/// An `.eh_frame` (augmentation "", absolute 8-byte addresses) of one CIE (`CFA=rsp+8`, return
/// address at `CFA-8`) and an FDE per `(start, len, instructions)`.
fn eh_frame(fdes: &[(u64, u64, &[u8])]) -> Vec<u8> {
    let entry = |v: &mut Vec<u8>, mut body: Vec<u8>| {
        while (4 + body.len()) % 8 != 0 {
            body.push(0); // DW_CFA_nop
        }
        v.extend((body.len() as u32).to_le_bytes());
        v.extend(body);
    };
    let mut v = Vec::new();
    // id 0, version 1, "", code align 1, data align -8, RA column 16; def_cfa rsp+8, RA at c-8.
    entry(
        &mut v,
        vec![0, 0, 0, 0, 1, 0, 1, 0x78, 16, 0x0c, 7, 8, 0x90, 1],
    );
    for &(start, len, ins) in fdes {
        let mut body = ((v.len() + 4) as u32).to_le_bytes().to_vec();
        body.extend(start.to_le_bytes());
        body.extend(len.to_le_bytes());
        body.extend(ins);
        entry(&mut v, body);
    }
    v.extend([0; 4]);
    v
}

/// `trampoline` keeps its CFA in rbx (`CFA=rbx+32`, rbx saved at `CFA-32`), as ld.so's
/// `_dl_runtime_resolve_xsavec` does; `saver` (`CFA=rsp+16`) saves its caller's rbx at `CFA-16`.
const TRAMPOLINE: (u64, u64, &[u8]) = (0x1000, 0x100, &[0x0d, 3, 0x0e, 32, 0x83, 4]);
const SAVER: (u64, u64, &[u8]) = (0x1100, 0x100, &[0x0e, 16, 0x83, 2]);
/// `popped` is `saver` at its `ret`, as GCC's CFI has it after `pop %rbx`: `CFA=rsp+8`, and rbx
/// still at `CFA-16`, below `rsp`.
const POPPED: (u64, u64, &[u8]) = (0x1200, 0x100, &[0x0e, 8, 0x83, 2]);

fn trampoline_process() -> Process {
    let info = UnwindInfo::with_eh_frame(0x2000, &eh_frame(&[TRAMPOLINE, SAVER, POPPED]));
    assert_eq!(
        info.hard(),
        &[(0x1000, 0x1100)],
        "only the rbx-based FDE is beyond framehop"
    );
    let mut p = Process::new();
    p.add(&info, "synthetic", BASE, BASE + 0x3000, 0);
    p
}

#[test]
fn a_cfa_in_rbx_is_stepped_with_the_registers_replayed_through_framehops_frames() {
    // The sample is in `saver`, called by `trampoline`, called from outside the maps. The
    // sampled rbx is `saver`'s own; the trampoline's is the one `saver` saved at [sp]: the
    // fallback finds it by stepping `saver` again with every register.
    let sp = 0x7ffd_0000_1000u64;
    let rbx = sp + 0x40; // the trampoline's aligned stack
    let (ra1, ra2) = (BASE + 0x1050, 0x7000_0000u64);
    let mut stack = vec![0u8; 0x100];
    let mut put = |at: u64, v: u64| {
        let o = (at - sp) as usize;
        stack[o..o + 8].copy_from_slice(&v.to_le_bytes());
    };
    put(sp, rbx); // saver: the caller's rbx at CFA-16 = sp
    put(sp + 8, ra1); // saver's return address, into the trampoline
    put(rbx, 0x1111); // the trampoline: its caller's rbx at CFA-32 = rbx
    put(rbx + 24, ra2); // its return address at CFA-8
    let p = trampoline_process();
    let mut regs = cfi::Regs::ip_sp_bp(BASE + 0x1150, sp, 0);
    regs.set(3, Some(0xdead)); // rbx as `saver` left it
    let mut cache = framehop::x86_64::CacheX86_64::new();
    let mut frames = Vec::new();
    let walked = walk_stack(&p, &regs, &stack, E, &mut cache, 64, &mut frames);
    assert_eq!(walked, (Outcome::NoInfoLater, 1));
    assert_eq!(frames, [BASE + 0x1150, ra1 - 1, ra2 - 1]);
    // Sampled in the trampoline itself: its rbx is the sample's.
    let mut regs = cfi::Regs::ip_sp_bp(BASE + 0x1010, sp, 0);
    regs.set(3, Some(rbx));
    frames.clear();
    let walked = walk_stack(&p, &regs, &stack, E, &mut cache, 64, &mut frames);
    assert_eq!(walked, (Outcome::NoInfoLater, 1));
    assert_eq!(frames, [BASE + 0x1010, ra2 - 1]);
    // Without rbx in the sample (a recording with fewer user registers), the step is not made:
    // counted, never a guess.
    regs.set(3, None);
    frames.clear();
    let walked = walk_stack(&p, &regs, &stack, E, &mut cache, 64, &mut frames);
    assert_eq!(walked, (Outcome::CfiFallbackFailed, 0));
    assert_eq!(frames, [BASE + 0x1010]);
}

#[test]
fn a_register_saved_below_the_stack_copy_ends_the_walk_as_the_copy_does() {
    // Sampled at `popped`'s `ret`, called by the trampoline: the CFI names rbx's slot at
    // CFA-16, below `rsp` where the copy starts, so the trampoline's CFA is not known. perf's
    // unwinders stop there too (`_dl_fixup`'s epilogue under `_dl_runtime_resolve_xsavec`): the
    // stack's end, not a failure of the fallback.
    let sp = 0x7ffd_0000_1000u64;
    let ra1 = BASE + 0x1050;
    let mut stack = vec![0u8; 0x100];
    stack[..8].copy_from_slice(&ra1.to_le_bytes());
    let p = trampoline_process();
    let mut regs = cfi::Regs::ip_sp_bp(BASE + 0x1250, sp, 0);
    regs.set(3, Some(sp + 0x40)); // the popped rbx: right, but the CFI does not say so
    let mut cache = framehop::x86_64::CacheX86_64::new();
    let mut frames = Vec::new();
    let walked = walk_stack(&p, &regs, &stack, E, &mut cache, 64, &mut frames);
    assert_eq!(walked, (Outcome::StackEnd, 0));
    assert_eq!(frames, [BASE + 0x1250, ra1 - 1]);
}

#[test]
fn the_fallback_on_garbage_registers_and_stacks_never_panics() {
    let p = trampoline_process();
    let mut cache = framehop::x86_64::CacheX86_64::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..2000 {
        let mut regs = cfi::Regs::default();
        for n in 0..cfi::REGS {
            regs.set(n, Some(next()));
        }
        let sp = next() & !7;
        regs.set(7, Some(sp));
        regs.set(16, Some(BASE + 0x1000 + next() % 0x200));
        regs.set(3, Some(sp.wrapping_add(next() % 0x100)));
        let stack: Vec<u8> = (0..32).flat_map(|_| next().to_le_bytes()).collect();
        let mut frames = Vec::new();
        let (outcome, _) = walk_stack(&p, &regs, &stack, E, &mut cache, 16, &mut frames);
        assert_ne!(outcome, Outcome::UnwinderPanic);
        assert!(frames.len() <= 16);
    }
}

#[test]
fn sampled_registers_are_taken_in_perfs_order() {
    // perf's 0xff0fff: ax … ss (0–11), r8 … r15 (16–23), each value its perf index here.
    let values: Vec<u8> = (0u64..12)
        .chain(16..24)
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let r = cfi::Regs::from_perf(&values, 0xff0fff, E);
    // DWARF order: rax rdx rcx rbx rsi rdi rbp rsp r8 … r15, then the ip.
    let want: Vec<Option<u64>> = [0, 3, 2, 1, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23, 8]
        .map(Some)
        .to_vec();
    assert_eq!((0..cfi::REGS).map(|n| r.reg(n)).collect::<Vec<_>>(), want);
    let r = cfi::Regs::from_perf(&values[..8 * 3], 0b1_1000_0001, E);
    assert_eq!(
        (r.reg(0), r.reg(7), r.reg(16), r.reg(6), r.reg(3)),
        (Some(0), Some(1), Some(2), None, None)
    );
}

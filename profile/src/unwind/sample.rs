//! A `--call-graph dwarf` sample taken apart (where its callchain, user registers and user stack
//! copy lie) and put back together without the registers and the stack, with a new callchain; and
//! the HEADER_ATTR of such samples rewritten to match.
//!
//! Field order as `include/uapi/linux/perf_event.h` gives it for `PERF_RECORD_SAMPLE`: the fixed
//! fields (IDENTIFIER … PERIOD), READ, CALLCHAIN, RAW, BRANCH_STACK, REGS_USER, STACK_USER, then
//! WEIGHT … AUX, which are copied as they are.

use std::ops::Range;

use perfpipe_stream::format::{context, sample, Endian, SampleLayout, EVENT_HEADER_SIZE};

/// `PERF_SAMPLE_BRANCH_STACK`
pub const BRANCH_STACK: u64 = 1 << 11;
/// `PERF_SAMPLE_REGS_USER`
pub const REGS_USER: u64 = 1 << 12;
/// `PERF_SAMPLE_STACK_USER`
pub const STACK_USER: u64 = 1 << 13;
/// `PERF_SAMPLE_BRANCH_HW_INDEX` of `branch_sample_type`.
const BRANCH_HW_INDEX: u64 = 1 << 17;
/// `exclude_callchain_user` of the attr's flags.
pub const EXCLUDE_CALLCHAIN_USER: u64 = 1 << 22;
/// `PERF_SAMPLE_REGS_ABI_64`
pub const REGS_ABI_64: u64 = 2;

/// x86-64 `perf_regs` indexes (`arch/x86/include/uapi/asm/perf_regs.h`).
const REG_BP: u32 = 6;
const REG_SP: u32 = 7;
const REG_IP: u32 = 8;

/// What the samples of one attr need beyond its [`SampleLayout`]: fields of `perf_event_attr` that
/// perfpipe's `Attr` does not keep.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AttrExtra {
    /// `sample_regs_user`
    pub regs_user: u64,
    /// `branch_sample_type` has `PERF_SAMPLE_BRANCH_HW_INDEX`.
    pub branch_hw_index: bool,
}

/// Offsets of a HEADER_ATTR body's fields (`struct perf_event_attr`).
const ATTR_SAMPLE_TYPE: usize = 24;
const ATTR_FLAGS: usize = 40;
const ATTR_BRANCH_SAMPLE_TYPE: usize = 72;
const ATTR_SAMPLE_REGS_USER: usize = 80;
const ATTR_SAMPLE_STACK_USER: usize = 88;

/// Whether samples of this sample_type carry what unwinding needs.
pub fn wants_unwinding(sample_type: u64) -> bool {
    sample_type & (REGS_USER | STACK_USER) == REGS_USER | STACK_USER
}

/// The sample_type after unwinding: no registers or stack copy, a callchain.
pub fn unwound_type(sample_type: u64) -> u64 {
    (sample_type & !(REGS_USER | STACK_USER)) | sample::CALLCHAIN
}

/// Reads the fields of [`AttrExtra`] from a HEADER_ATTR record.
pub fn attr_extra(rec: &[u8], e: Endian) -> AttrExtra {
    let body = &rec[EVENT_HEADER_SIZE.min(rec.len())..];
    AttrExtra {
        regs_user: e.u64(body, ATTR_SAMPLE_REGS_USER).unwrap_or(0),
        branch_hw_index: e
            .u64(body, ATTR_BRANCH_SAMPLE_TYPE)
            .is_some_and(|b| b & BRANCH_HW_INDEX != 0),
    }
}

/// A HEADER_ATTR record rewritten for unwound samples: sample_type without REGS_USER and
/// STACK_USER and with CALLCHAIN, `sample_regs_user` and `sample_stack_user` zero, and (for a
/// little-endian stream, where the flags bitfield is in host order) `exclude_callchain_user`
/// cleared, so that the attr reads like a `perf record -g` one. The ids are kept.
pub fn rewrite_attr(rec: &[u8], e: Endian) -> Vec<u8> {
    let mut out = rec.to_vec();
    let body = EVENT_HEADER_SIZE;
    let size = match e.u32(rec, body + 4) {
        Some(0) => 64,
        Some(s) => s as usize,
        None => return out,
    };
    let put = |out: &mut Vec<u8>, at: usize, bytes: &[u8]| {
        if at + bytes.len() <= body + size && body + at + bytes.len() <= out.len() {
            out[body + at..body + at + bytes.len()].copy_from_slice(bytes);
        }
    };
    if let Some(t) = e.u64(rec, body + ATTR_SAMPLE_TYPE) {
        put(&mut out, ATTR_SAMPLE_TYPE, &e.put_u64(unwound_type(t)));
    }
    put(&mut out, ATTR_SAMPLE_REGS_USER, &[0; 8]);
    put(&mut out, ATTR_SAMPLE_STACK_USER, &[0; 4]);
    if e == Endian::Little {
        if let Some(f) = e.u64(rec, body + ATTR_FLAGS) {
            put(
                &mut out,
                ATTR_FLAGS,
                &e.put_u64(f & !EXCLUDE_CALLCHAIN_USER),
            );
        }
    }
    out
}

/// The parts of a sample record (byte ranges of the record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parts {
    /// Everything before the callchain (header, fixed fields, READ).
    pub head: Range<usize>,
    /// The callchain entries (without `nr`); empty if the sample has none.
    pub callchain: Range<usize>,
    /// RAW and BRANCH_STACK, copied.
    pub middle: Range<usize>,
    /// REGS_USER's `abi`, and the registers `(ip, sp, bp)` if the abi is 64-bit and the mask has them.
    pub abi: u64,
    /// `(ip, sp, bp)`
    pub regs: Option<(u64, u64, u64)>,
    /// The REGS_USER values (in the order of `sample_regs_user`'s set bits); empty if none.
    pub user_regs: Range<usize>,
    /// The stack copy's bytes that the kernel filled (`dyn_size` of them, at most `size`).
    pub stack: Range<usize>,
    /// `dyn_size` exceeded the copy's size (clamped).
    pub dyn_size_clamped: bool,
    /// Everything after STACK_USER, copied.
    pub tail: Range<usize>,
}

/// Takes a sample apart; `None` when a field runs past the record.
pub fn parse(rec: &[u8], e: Endian, layout: &SampleLayout, extra: &AttrExtra) -> Option<Parts> {
    let t = layout.sample_type;
    let len = rec.len();
    let mut at = usize::from(layout.fixed_end);
    at = at.checked_add(layout.read_size(rec, at, e)?)?;
    let head = 0..at;
    let mut callchain = at..at;
    if t & sample::CALLCHAIN != 0 {
        let nr = usize::try_from(e.u64(rec, at)?).ok()?;
        let start = at + 8;
        let end = start.checked_add(nr.checked_mul(8)?)?;
        if end > len {
            return None;
        }
        callchain = start..end;
        at = end;
    }
    let middle_start = at;
    if t & sample::RAW != 0 {
        let size = e.u32(rec, at)? as usize;
        at = at.checked_add(4 + size)?;
    }
    if t & BRANCH_STACK != 0 {
        let nr = usize::try_from(e.u64(rec, at)?).ok()?;
        at = at.checked_add(8 + if extra.branch_hw_index { 8 } else { 0 })?;
        at = at.checked_add(nr.checked_mul(24)?)?;
    }
    if at > len {
        return None;
    }
    let middle = middle_start..at;
    let mut abi = 0;
    let mut regs = None;
    let mut user_regs = at..at;
    if t & REGS_USER != 0 {
        abi = e.u64(rec, at)?;
        at += 8;
        if abi != 0 {
            let n = extra.regs_user.count_ones() as usize;
            let base = at;
            at = at.checked_add(n * 8)?;
            if at > len {
                return None;
            }
            user_regs = base..at;
            let reg = |r: u32| {
                (extra.regs_user & (1 << r) != 0).then(|| {
                    let i = (extra.regs_user & ((1 << r) - 1)).count_ones() as usize;
                    e.u64(rec, base + 8 * i)
                })?
            };
            if abi == REGS_ABI_64 {
                regs = Some((reg(REG_IP)?, reg(REG_SP)?, reg(REG_BP)?)).filter(|_| {
                    extra.regs_user & (1 << REG_IP | 1 << REG_SP | 1 << REG_BP)
                        == (1 << REG_IP | 1 << REG_SP | 1 << REG_BP)
                });
            }
        }
    }
    let mut stack = at..at;
    let mut dyn_size_clamped = false;
    if t & STACK_USER != 0 {
        let size = usize::try_from(e.u64(rec, at)?).ok()?;
        at += 8;
        if size != 0 {
            let data = at;
            at = at.checked_add(size)?;
            let dyn_size = usize::try_from(e.u64(rec, at)?).unwrap_or(usize::MAX);
            at += 8;
            if dyn_size > size {
                dyn_size_clamped = true;
            }
            stack = data..data + dyn_size.min(size);
        }
    }
    if at > len {
        return None;
    }
    Some(Parts {
        head,
        callchain,
        middle,
        abi,
        regs,
        user_regs,
        stack,
        dyn_size_clamped,
        tail: at..len,
    })
}

/// The largest record perf can frame (`perf_event_header.size` is a u16), rounded down to 8.
const MAX_RECORD: usize = 0xfff8;

/// Writes the sample again into `out`: its callchain is the kernel part of the old one (the
/// entries before any `PERF_CONTEXT_USER`), then `PERF_CONTEXT_USER` and `user` (if any), and the
/// registers and stack copy are gone. User frames that would make the record larger than 64 KiB
/// are left out. Returns the number of user frames written.
pub fn rewrite(rec: &[u8], e: Endian, parts: &Parts, user: &[u64], out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.extend_from_slice(&rec[parts.head.clone()]);
    let kernel: Vec<u64> = rec[parts.callchain.clone()]
        .chunks_exact(8)
        .map(|c| e.u64(c, 0).unwrap_or(0))
        .take_while(|&ip| ip != context::USER)
        .collect();
    let fixed = parts.head.len() + 8 + 8 * kernel.len() + parts.middle.len() + parts.tail.len();
    let room = MAX_RECORD.saturating_sub(fixed) / 8;
    let user = if user.is_empty() || room < 2 {
        &[][..]
    } else {
        &user[..user.len().min(room - 1)]
    };
    let nr = kernel.len() + if user.is_empty() { 0 } else { 1 + user.len() };
    out.extend_from_slice(&e.put_u64(nr as u64));
    for ip in kernel {
        out.extend_from_slice(&e.put_u64(ip));
    }
    if !user.is_empty() {
        out.extend_from_slice(&e.put_u64(context::USER));
        for &ip in user {
            out.extend_from_slice(&e.put_u64(ip));
        }
    }
    out.extend_from_slice(&rec[parts.middle.clone()]);
    out.extend_from_slice(&rec[parts.tail.clone()]);
    let size = (out.len() - start) as u16;
    out[start + 6..start + 8].copy_from_slice(&e.put_u16(size));
    user.len()
}

/// The flags word of an `Attr` (normalized to little-endian bit order) after unwinding.
pub fn unwound_flags(flags: u64) -> u64 {
    flags & !EXCLUDE_CALLCHAIN_USER
}

//! A sample and an attr written again by the `aslr` stage: the walk over a sample's fields in
//! `perf_event.h`'s order (the fixed ones, READ, CALLCHAIN, RAW, BRANCH_STACK, REGS_USER,
//! STACK_USER, WEIGHT, DATA_SRC, TRANSACTION, REGS_INTR, …) that moves each address and leaves
//! the registers out, as `aslr_tool__process_sample()` walks it.

use super::*;

impl Aslr {
    /// A sample written again with its addresses moved and its registers gone; `None` drops it.
    pub(super) fn sample(&self, rec: &Record<'_>, extra: &Extra) -> Option<Vec<u8>> {
        let attr = rec.attr?;
        let layout = &attr.layout;
        let t = layout.sample_type;
        if t & LEAKY != 0 || extra.offcpu {
            return None;
        }
        let s = rec.sample()?;
        let b = rec.sized();
        let e = rec.endian;
        let pid = s.pid().unwrap_or(0);
        let time = s.time().unwrap_or(u64::MAX);
        let cpumode = s.cpumode();
        let mut out = b.to_vec();
        let put =
            |out: &mut Vec<u8>, at: usize, v: u64| out[at..at + 8].copy_from_slice(&e.put_u64(v));
        if let Some(at) = layout.ip {
            let ip = e.u64(b, usize::from(at))?;
            put(
                &mut out,
                usize::from(at),
                self.count(self.remap(pid, cpumode, ip, time)),
            );
        }
        if let Some(at) = layout.addr {
            let a = e.u64(b, usize::from(at))?;
            put(
                &mut out,
                usize::from(at),
                self.count(self.remap(pid, cpumode, a, time)),
            );
        }
        let mut at = usize::from(layout.fixed_end);
        at = at.checked_add(layout.read_size(b, at, e)?)?;
        if t & sample::CALLCHAIN != 0 {
            let nr = usize::try_from(e.u64(b, at)?).ok()?;
            at += 8;
            let end = at.checked_add(nr.checked_mul(8)?)?;
            (end <= b.len()).then_some(())?;
            let mut mode = cpumode;
            let mut i = at;
            while i < end {
                let ip = e.u64(b, i)?;
                if ip >= context::MAX {
                    if ip == context::USER_DEFERRED {
                        i += 8; // the cookie, kept
                    }
                    mode = context_mode(ip)?;
                } else {
                    put(&mut out, i, self.count(self.remap(pid, mode, ip, time)));
                }
                i += 8;
            }
            at = end;
        }
        if t & BRANCH_STACK != 0 {
            let nr = usize::try_from(e.u64(b, at)?).ok()?;
            at += 8;
            if extra.branch_sample_type & BRANCH_HW_INDEX != 0 {
                at += 8;
            }
            let end = at.checked_add(nr.checked_mul(24)?)?;
            (end <= b.len()).then_some(())?;
            for k in 0..nr {
                for f in [at + 24 * k, at + 24 * k + 8] {
                    let a = e.u64(b, f)?;
                    put(&mut out, f, self.count(self.remap(pid, cpumode, a, time)));
                }
            }
            at = end;
            if extra.branch_sample_type & BRANCH_COUNTERS != 0 {
                at = at.checked_add(nr.checked_mul(8)?)?;
            }
        }
        // REGS_USER goes; what follows up to REGS_INTR is copied; REGS_INTR goes; the rest is copied.
        let regs = |at: usize, mask: u64| -> Option<usize> {
            let abi = e.u64(b, at)?;
            Some(
                8 + if abi != 0 {
                    8 * mask.count_ones() as usize
                } else {
                    0
                },
            )
        };
        let user = if t & REGS_USER != 0 {
            regs(at, extra.regs_user)?
        } else {
            0
        };
        let mid_start = at + user;
        let mid = BEFORE_INTR
            .iter()
            .chain(&[WEIGHT_STRUCT])
            .filter(|&&bit| t & bit != 0)
            .count()
            * 8;
        let intr_at = mid_start + mid;
        let intr = if t & REGS_INTR != 0 {
            regs(intr_at, extra.regs_intr)?
        } else {
            0
        };
        (intr_at + intr <= b.len()).then_some(())?;
        if user + intr == 0 {
            return Some(out);
        }
        let mut v = Vec::with_capacity(out.len() - user - intr);
        v.extend_from_slice(&out[..at]);
        v.extend_from_slice(&out[mid_start..intr_at]);
        v.extend_from_slice(&out[intr_at + intr..]);
        let size = v.len() as u16;
        v[6..8].copy_from_slice(&e.put_u16(size));
        Some(v)
    }

    /// A HEADER_ATTR: notes what its samples need and writes it without registers or breakpoint
    /// address.
    pub(super) fn attr(&mut self, info: &StreamInfo, rec: &Record<'_>) -> Vec<u8> {
        let e = rec.endian;
        let b = rec.bytes;
        let body = EVENT_HEADER_SIZE;
        let mut out = b.to_vec();
        let Ok(attr) = Attr::parse(&b[body.min(b.len())..], e) else {
            return out;
        };
        let size = match attr.size {
            0 => 64,
            s => s as usize,
        };
        let get = |at: usize| {
            (at + 8 <= size)
                .then(|| e.u64(b, body + at))
                .flatten()
                .unwrap_or(0)
        };
        let extra = Extra {
            branch_sample_type: get(ATTR_BRANCH_SAMPLE_TYPE),
            regs_user: get(ATTR_SAMPLE_REGS_USER),
            regs_intr: get(ATTR_SAMPLE_REGS_INTR),
            offcpu: attr.type_ == TYPE_SOFTWARE && attr.config == SW_BPF_OUTPUT,
        };
        if let Some(j) = info.attrs.iter().position(|a| a == &attr) {
            if self.extras.len() <= j {
                self.extras.resize(j + 1, Extra::default());
            }
            self.extras[j] = extra;
        }
        let mut put = |at: usize, v: u64| {
            if at + 8 <= size && body + at + 8 <= out.len() {
                out[body + at..body + at + 8].copy_from_slice(&e.put_u64(v));
            }
        };
        put(ATTR_SAMPLE_TYPE, stripped_type(attr.sample_type));
        put(ATTR_SAMPLE_REGS_USER, 0);
        put(ATTR_SAMPLE_REGS_INTR, 0);
        if attr.type_ == TYPE_BREAKPOINT {
            put(ATTR_BP_ADDR, 0);
        }
        out
    }
}

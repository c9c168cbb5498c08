//! The fallback for frames whose CFI framehop cannot evaluate: such a frame's row is evaluated
//! with gimli (its `UnwindTable`) on every register the sample gives, then framehop goes on from
//! the caller.
//!
//! framehop's x86-64 unwinder tracks `rip`, `rsp` and `rbp` only, so a CFA defined on any other
//! register (`DW_CFA_def_cfa_register rbx`), or an expression that reads another register or
//! memory, is beyond it; it then takes the frame pointer instead (its `fallback_rule`, without a
//! word), which skips or invents the caller. glibc's lazy-binding trampolines in `ld.so`
//! (`_dl_runtime_resolve_xsavec`, `_xsave`, `_fxsave`, `_dl_runtime_profile_*`) realign the
//! stack (`and $-64,%rsp`) and keep the CFA in `rbx` (`CFA=rbx+32`, `rbx+56` in `readelf
//! --debug-dump=frames-interp`); the kernel's signal return (`__restore_rt`) defines it by
//! an expression that reads the stack. perf's libunwind and libdw track every register and
//! step through both.
//!
//! - **Which frames**: a dso's FDEs are scanned once when its unwind sections are read
//!   ([`hard_ranges`], linear in the section's size); an FDE whose CIE or own instructions define
//!   the CFA, the return address or `rbp` in a way framehop's evaluation cannot follow is marked, and a frame whose lookup
//!   address lies in a marked FDE is stepped here, never by framehop.
//! - **Registers**: the sample's user registers (perf records all of them for `--call-graph
//!   dwarf` on x86-64: `sample_regs_user` 0xff0fff) are the first frame's; a frame framehop
//!   stepped changed only `rip`, `rsp` and `rbp` for framehop, so the registers of the frame to
//!   step here are found by stepping again, with gimli, the frames framehop stepped since the
//!   last fallback ([`Replay`]), each checked against the return address framehop found. Every
//!   walk of a sample replays each frame at most once.
//! - **Bounded**: a row is found through `.eh_frame_hdr`'s table (else by gimli's linear
//!   search, over a section of at most 256 MiB), expressions run at most
//!   [`MAX_EXPRESSION_STEPS`] operations. Bad CFI, a register the sample lacks, or a replayed frame
//!   that disagrees with framehop end the walk there ([`Failed`]), counted.
//! - **Outside the stack copy**: a register whose rule reads a word the copy lacks is not known,
//!   and a frame that needs it ends the walk as the copy's end does ([`Failed::StackEnd`]), as
//!   perf's unwinders stop there. An epilogue is the usual case: GCC's CFI for `pop %rbx` moves
//!   the CFA but still names rbx's slot, now below `rsp` where the copy starts, so a sample in
//!   `_dl_fixup`'s epilogue cannot step the trampoline that called it (rbx is its CFA).

use gimli::{
    BaseAddresses, CallFrameInstruction, CfaRule, CieOrFde, DebugFrame, EhFrame, EhFrameHdr,
    Encoding, EndianSlice, Evaluation, EvaluationResult, Expression, LittleEndian, Location,
    Operation, Register, RegisterRule, UnwindContext, UnwindSection, UnwindTableRow, Value, X86_64,
};
use perfpipe_stream::format::Endian;

use super::dso::UnwindInfo;

type R<'a> = EndianSlice<'a, LittleEndian>;

/// The DWARF registers of x86-64 that unwinding uses: 0 to 15 (`rax`, `rdx`, `rcx`, `rbx`, `rsi`,
/// `rdi`, `rbp`, `rsp`, `r8`…`r15`) and 16, the return address column (the ip).
pub const REGS: usize = 17;

/// The `perf_regs` index (`arch/x86/include/uapi/asm/perf_regs.h`) of each DWARF register.
const PERF_OF_DWARF: [u32; REGS] = [0, 3, 2, 1, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23, 8];

/// Registers a call keeps (System V x86-64 ABI): a frame without a rule for one has its
/// caller's value.
const CALLEE_SAVED: [u16; 6] = [3, 6, 12, 13, 14, 15];

/// Most operations an expression of a CFI row runs.
pub const MAX_EXPRESSION_STEPS: u32 = 256;

/// A frame's registers by DWARF number, each known or not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regs {
    values: [u64; REGS],
    /// Bit `n`: register `n` is known.
    known: u32,
    /// Bit `n`: register `n` is not known because the word its rule reads lies outside the
    /// stack copy (as in an epilogue, whose CFI still names the slot a `pop` has left below
    /// `rsp`).
    outside: u32,
}

impl Regs {
    /// The registers of a sample's `REGS_USER` values (`values`, in the order of the set bits
    /// of `mask`, the attr's `sample_regs_user`).
    pub fn from_perf(values: &[u8], mask: u64, e: Endian) -> Regs {
        let mut r = Regs::default();
        for (d, &p) in PERF_OF_DWARF.iter().enumerate() {
            if mask & (1 << p) != 0 {
                let i = (mask & ((1u64 << p) - 1)).count_ones() as usize;
                r.set(d, e.u64(values, 8 * i));
            }
        }
        r
    }

    /// Registers of which only the ip, `rsp` and `rbp` are known.
    pub fn ip_sp_bp(ip: u64, sp: u64, bp: u64) -> Regs {
        let mut r = Regs::default();
        r.set(IP, Some(ip));
        r.set(SP, Some(sp));
        r.set(BP, Some(bp));
        r
    }

    /// DWARF register `n`, if known.
    pub fn reg(&self, n: usize) -> Option<u64> {
        (n < REGS && self.known & (1 << n) != 0).then(|| self.values[n])
    }

    /// Sets DWARF register `n` (below [`REGS`]), known or not.
    pub fn set(&mut self, n: usize, v: Option<u64>) {
        if n < REGS {
            self.values[n] = v.unwrap_or(0);
            self.known = match v {
                Some(_) => self.known | 1 << n,
                None => self.known & !(1 << n),
            };
            self.outside &= !(1 << n);
        }
    }

    fn get(&self, r: Register) -> Option<u64> {
        self.reg(usize::from(r.0))
    }

    /// Register `r`, or why it is not known: [`Failed::StackEnd`] if its word lies outside
    /// the stack copy, else [`Failed::BadCfi`].
    fn need(&self, r: Register) -> Result<u64, Failed> {
        let n = usize::from(r.0);
        self.get(r)
            .ok_or(if n < REGS && self.outside & (1 << n) != 0 {
                Failed::StackEnd
            } else {
                Failed::BadCfi
            })
    }

    /// Sets register `n` (below [`REGS`]) to the word its rule read: not known, and marked as
    /// outside the stack copy, if the read failed.
    fn set_read(&mut self, n: usize, v: Option<u64>) {
        self.set(n, v);
        if n < REGS && v.is_none() {
            self.outside |= 1 << n;
        }
    }
}

/// `rbp`
pub const BP: usize = 6;
/// `rsp`
pub const SP: usize = 7;
/// The ip (the return address column).
pub const IP: usize = 16;

/// Why the fallback could not step a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failed {
    /// A word the frame's rules read lies outside the stack copy.
    StackEnd,
    /// The CFI could not be read or evaluated, a register it needs is not known, or it gives a
    /// frame that does not advance.
    BadCfi,
    /// A replayed frame's return address is not the one framehop found.
    Disagrees,
}

/// A frame stepped: the caller's registers, or the end of the stack (an undefined return address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stepped {
    /// The caller's registers (`rip`, `rsp` known).
    Caller(Regs),
    /// The outermost frame.
    End,
}

/// What a frame is stepped with: the unwind information of the map holding its lookup address
/// and the map's load bias.
pub type MapCfi<'a> = (&'a UnwindInfo, u64);

/// The registers known at one frame of a walk, for the frames after it to be replayed from.
#[derive(Clone, Copy, Debug)]
pub struct Replay {
    /// The frame's index in the walk's frames.
    at: usize,
    regs: Regs,
}

impl Replay {
    /// The first frame's registers: the sample's.
    pub fn new(regs: Regs) -> Replay {
        Replay { at: 0, regs }
    }

    /// Steps the last of `frames` (the walk so far: the ip, then each return address minus one)
    /// here: replays the frames framehop stepped since the last call (each one's return address
    /// checked against the next of `frames`), then steps the last one. `map` gives the unwind
    /// information of an address.
    pub fn step_last<'a>(
        &mut self,
        frames: &[u64],
        map: impl Fn(u64) -> Option<MapCfi<'a>>,
        read: &mut impl FnMut(u64) -> Result<u64, ()>,
    ) -> Result<Stepped, Failed> {
        let last = frames.len().checked_sub(1).ok_or(Failed::BadCfi)?;
        while self.at < last {
            let at = self.at;
            match step(map(frames[at]), frames[at], at == 0, &self.regs, read)? {
                Stepped::Caller(r) if r.reg(IP) == Some(frames[at + 1].wrapping_add(1)) => {
                    self.regs = r;
                    self.at += 1;
                }
                _ => return Err(Failed::Disagrees),
            }
        }
        let stepped = step(map(frames[last]), frames[last], last == 0, &self.regs, read)?;
        if let Stepped::Caller(r) = stepped {
            self.regs = r;
            self.at += 1;
        }
        Ok(stepped)
    }
}

/// Steps one frame: `lookup` is its ip (the first frame) or its return address minus one, `regs`
/// its registers, `map` the unwind information and load bias of the map holding it (`None`: a
/// frame framehop stepped without it, as it does, by the frame pointer).
pub fn step(
    map: Option<MapCfi<'_>>,
    lookup: u64,
    first: bool,
    regs: &Regs,
    read: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> Result<Stepped, Failed> {
    let Some((info, base)) = map else {
        return without_cfi(first, regs, read);
    };
    let svma = lookup.wrapping_sub(base);
    let bases = bases(info);
    let mut ctx = Box::new(UnwindContext::new());
    let found = if let Some((_, data)) = &info.eh_frame {
        let mut s = EhFrame::new(data, LittleEndian);
        s.set_address_size(8);
        let fde = match info.eh_frame_hdr.as_ref().and_then(|(_, h)| {
            EhFrameHdr::new(h, LittleEndian)
                .parse(&bases, 8)
                .ok()
                .filter(|p| p.table().is_some())
        }) {
            Some(hdr) => hdr.table().expect("filtered").fde_for_address(
                &s,
                &bases,
                svma,
                EhFrame::cie_from_offset,
            ),
            None => s.fde_for_address(&bases, svma, EhFrame::cie_from_offset),
        };
        fde.and_then(|fde| {
            let encoding = fde.cie().encoding();
            let row = fde.unwind_info_for_address(&s, &bases, &mut ctx, svma)?;
            Ok(apply(&s, row, encoding, first, regs, read))
        })
    } else if let Some(data) = &info.debug_frame {
        let mut s = DebugFrame::new(data, LittleEndian);
        s.set_address_size(8);
        s.fde_for_address(&bases, svma, DebugFrame::cie_from_offset)
            .and_then(|fde| {
                let encoding = fde.cie().encoding();
                let row = fde.unwind_info_for_address(&s, &bases, &mut ctx, svma)?;
                Ok(apply(&s, row, encoding, first, regs, read))
            })
    } else {
        Err(gimli::Error::NoUnwindInfoForAddress)
    };
    match found {
        Ok(stepped) => stepped,
        // framehop's rule for code no FDE covers.
        Err(gimli::Error::NoUnwindInfoForAddress) => without_cfi(first, regs, read),
        Err(_) => Err(Failed::BadCfi),
    }
}

/// framehop's step of a frame no FDE covers (`JustReturnIfFirstFrameOtherwiseFp`): the first
/// frame returns (`[rsp]`), the others are followed by the frame pointer.
fn without_cfi(
    first: bool,
    regs: &Regs,
    read: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> Result<Stepped, Failed> {
    let mut out = callee_saved(regs);
    let (cfa, ra) = if first {
        let sp = regs.reg(SP).ok_or(Failed::BadCfi)?;
        (sp.checked_add(8).ok_or(Failed::BadCfi)?, read(sp))
    } else {
        let bp = regs.reg(BP).ok_or(Failed::BadCfi)?;
        let cfa = bp.checked_add(16).ok_or(Failed::BadCfi)?;
        out.set(BP, read(bp).ok());
        (cfa, read(bp + 8))
    };
    out.set(SP, Some(cfa));
    out.set(IP, Some(ra.map_err(|_| Failed::StackEnd)?));
    Ok(Stepped::Caller(out))
}

fn callee_saved(regs: &Regs) -> Regs {
    let mut out = Regs::default();
    for r in CALLEE_SAVED {
        out.set(usize::from(r), regs.reg(usize::from(r)));
        out.outside |= regs.outside & (1 << r);
    }
    out
}

/// The base addresses of a dso's unwind sections, as framehop takes them.
fn bases(info: &UnwindInfo) -> BaseAddresses {
    let start = |r: Option<&std::ops::Range<u64>>| r.map_or(0, |r| r.start);
    BaseAddresses::default()
        .set_eh_frame(start(info.eh_frame.as_ref().map(|s| &s.0)))
        .set_eh_frame_hdr(start(info.eh_frame_hdr.as_ref().map(|s| &s.0)))
        .set_text(start(info.text.as_ref()))
        .set_got(start(info.got.as_ref()))
}

/// Evaluates a CFI row on `regs`: the caller's registers.
fn apply<'a, S: UnwindSection<R<'a>>>(
    s: &S,
    row: &UnwindTableRow<usize>,
    encoding: Encoding,
    first: bool,
    regs: &Regs,
    read: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> Result<Stepped, Failed> {
    let cfa = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => regs
            .need(*register)?
            .checked_add_signed(*offset)
            .ok_or(Failed::BadCfi)?,
        CfaRule::Expression(e) => {
            let e = e.get(s).map_err(|_| Failed::BadCfi)?;
            evaluate(e, encoding, None, regs, read)?
        }
    };
    let ra_rule = row.register(X86_64::RA);
    if matches!(ra_rule, RegisterRule::Undefined) {
        return Ok(Stepped::End);
    }
    let mut out = callee_saved(regs);
    for (reg, rule) in row.registers() {
        let i = usize::from(reg.0);
        if i >= REGS || *reg == X86_64::RSP {
            continue;
        }
        let value = match rule {
            RegisterRule::Undefined => None,
            RegisterRule::SameValue => regs.get(*reg),
            RegisterRule::Offset(o) => {
                let word = cfa.checked_add_signed(*o).and_then(|a| read(a).ok());
                out.set_read(i, word);
                continue;
            }
            RegisterRule::ValOffset(o) => cfa.checked_add_signed(*o),
            RegisterRule::Register(r) => regs.get(*r),
            RegisterRule::Expression(e) => {
                let e = e.get(s).map_err(|_| Failed::BadCfi)?;
                match evaluate(e, encoding, Some(cfa), regs, read) {
                    Ok(a) => out.set_read(i, read(a).ok()),
                    Err(_) => out.set(i, None),
                }
                continue;
            }
            RegisterRule::ValExpression(e) => {
                let e = e.get(s).map_err(|_| Failed::BadCfi)?;
                evaluate(e, encoding, Some(cfa), regs, read).ok()
            }
            _ => None,
        };
        out.set(i, value);
    }
    let ra = out.need(X86_64::RA)?;
    // framehop's checks: a frame that does not advance, a stack that grows back.
    let sp = regs.reg(SP).ok_or(Failed::BadCfi)?;
    if (cfa == sp && Some(ra) == regs.reg(IP)) || (!first && cfa < sp) {
        return Err(Failed::BadCfi);
    }
    out.set(SP, Some(cfa));
    Ok(Stepped::Caller(out))
}

/// Evaluates a DWARF expression of a CFI row (`cfa`: pushed first, for a register's rule), at
/// most [`MAX_EXPRESSION_STEPS`] operations.
fn evaluate(
    e: Expression<R<'_>>,
    encoding: Encoding,
    cfa: Option<u64>,
    regs: &Regs,
    read: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> Result<u64, Failed> {
    let mut eval = Evaluation::new(e.0, encoding);
    eval.set_max_iterations(MAX_EXPRESSION_STEPS);
    if let Some(cfa) = cfa {
        eval.set_initial_value(cfa);
    }
    let bad = |_| Failed::BadCfi;
    let mut result = eval.evaluate().map_err(bad)?;
    for _ in 0..MAX_EXPRESSION_STEPS {
        result = match result {
            EvaluationResult::Complete => break,
            EvaluationResult::RequiresRegister { register, .. } => {
                let v = regs.need(register)?;
                eval.resume_with_register(Value::Generic(v)).map_err(bad)?
            }
            EvaluationResult::RequiresMemory { address, size, .. } => {
                let v = read(address).map_err(|_| Failed::StackEnd)?;
                let v = match size {
                    1..=7 => v & ((1u64 << (8 * u32::from(size))) - 1),
                    _ => v,
                };
                eval.resume_with_memory(Value::Generic(v)).map_err(bad)?
            }
            EvaluationResult::RequiresCallFrameCfa => {
                let cfa = cfa.ok_or(Failed::BadCfi)?;
                eval.resume_with_call_frame_cfa(cfa).map_err(bad)?
            }
            _ => return Err(Failed::BadCfi),
        };
    }
    if !matches!(result, EvaluationResult::Complete) {
        return Err(Failed::BadCfi);
    }
    match eval.as_result().last().map(|p| &p.location) {
        Some(Location::Address { address }) => Ok(*address),
        Some(Location::Value {
            value: Value::Generic(v),
        }) => Ok(*v),
        _ => Err(Failed::BadCfi),
    }
}

/// The registers framehop's x86-64 unwinder knows: `rbp`, `rsp`, and the ip (the return address
/// column).
fn framehop_knows(r: Register) -> bool {
    r == X86_64::RBP || r == X86_64::RSP || r == X86_64::RA
}

/// Whether framehop's evaluation of a DWARF expression can run it: it answers registers it knows
/// and nothing else (no memory, no CFA, no call).
fn framehop_evaluates(e: Expression<R<'_>>, encoding: Encoding) -> bool {
    let mut bytes = e.0;
    while !bytes.is_empty() {
        let Ok(op) = Operation::parse(&mut bytes, encoding) else {
            return false;
        };
        let ok = match op {
            Operation::RegisterOffset { register, .. } => framehop_knows(register),
            Operation::Drop
            | Operation::Pick { .. }
            | Operation::Swap
            | Operation::Rot
            | Operation::Abs
            | Operation::And
            | Operation::Div
            | Operation::Minus
            | Operation::Mod
            | Operation::Mul
            | Operation::Neg
            | Operation::Not
            | Operation::Or
            | Operation::Plus
            | Operation::PlusConstant { .. }
            | Operation::Shl
            | Operation::Shr
            | Operation::Shra
            | Operation::Xor
            | Operation::Bra { .. }
            | Operation::Eq
            | Operation::Ge
            | Operation::Gt
            | Operation::Le
            | Operation::Lt
            | Operation::Ne
            | Operation::Skip { .. }
            | Operation::UnsignedConstant { .. }
            | Operation::SignedConstant { .. }
            | Operation::Nop => true,
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

/// Whether CFI instructions define the CFA, the return address or `rbp` in a way framehop cannot
/// evaluate. Instructions that cannot be read end the look (framehop falls back to the frame
/// pointer on them, as it did before).
fn beyond_framehop<'a, S: UnwindSection<R<'a>>>(
    s: &S,
    encoding: Encoding,
    mut instructions: gimli::CallFrameInstructionIter<'_, R<'a>>,
) -> bool {
    let expr = |e: &gimli::UnwindExpression<usize>| {
        e.get(s).is_ok_and(|e| !framehop_evaluates(e, encoding))
    };
    let watched = |r: Register| r == X86_64::RA || r == X86_64::RBP;
    while let Ok(Some(i)) = instructions.next() {
        let hard = match i {
            CallFrameInstruction::DefCfa { register, .. }
            | CallFrameInstruction::DefCfaSf { register, .. }
            | CallFrameInstruction::DefCfaRegister { register } => !framehop_knows(register),
            CallFrameInstruction::DefCfaExpression { expression } => expr(&expression),
            CallFrameInstruction::Expression {
                register,
                expression,
            }
            | CallFrameInstruction::ValExpression {
                register,
                expression,
            } => watched(register) && expr(&expression),
            CallFrameInstruction::Register {
                dest_register,
                src_register,
            } => watched(dest_register) && !framehop_knows(src_register),
            _ => false,
        };
        if hard {
            return true;
        }
    }
    false
}

/// The address ranges (the file's addresses, `[start, end)`, sorted) of the FDEs of a dso whose
/// CFI framehop cannot evaluate ([`beyond_framehop`]), in the section framehop reads
/// (`.eh_frame`, else `.debug_frame`). One pass over the section's entries.
pub fn hard_ranges(info: &UnwindInfo) -> Vec<(u64, u64)> {
    let bases = bases(info);
    let mut out = if let Some((_, data)) = &info.eh_frame {
        let mut s = EhFrame::new(data, LittleEndian);
        s.set_address_size(8);
        scan(&s, &bases)
    } else if let Some(data) = &info.debug_frame {
        let mut s = DebugFrame::new(data, LittleEndian);
        s.set_address_size(8);
        scan(&s, &bases)
    } else {
        Vec::new()
    };
    out.sort_unstable();
    out
}

/// [`hard_ranges`] of one section: an FDE is marked when its CIE's initial instructions or its
/// own are [`beyond_framehop`]; a CIE's are looked at once, however many FDEs share it, so the
/// work is linear in the section's size.
fn scan<'a, S: UnwindSection<R<'a>>>(s: &S, bases: &BaseAddresses) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut cies: std::collections::HashMap<usize, bool> = std::collections::HashMap::new();
    let mut last: Option<gimli::CommonInformationEntry<R<'a>>> = None;
    let mut entries = s.entries(bases);
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        // The last CIE parsed is taken again without parsing (FDEs follow their CIE).
        let Ok(fde) = partial.parse(|s, bases, offset| match &last {
            Some(c) if S::Offset::from(c.offset()) == offset => Ok(c.clone()),
            _ => s.cie_from_offset(bases, offset),
        }) else {
            continue;
        };
        last = Some(fde.cie().clone());
        if fde.len() == 0 {
            continue;
        }
        let cie = fde.cie();
        let encoding = cie.encoding();
        let cie_hard = *cies
            .entry(cie.offset())
            .or_insert_with(|| beyond_framehop(s, encoding, cie.instructions(s, bases)));
        if cie_hard || beyond_framehop(s, encoding, fde.instructions(s, bases)) {
            out.push((fde.initial_address(), fde.end_address()));
        }
    }
    out
}

//! A symbol table as perf keeps one (`struct dso`'s rb-tree of `struct symbol`), as a sorted
//! `Vec`: perf's fix-ups (`symbols__fixup_end`, `symbols__fixup_duplicate` with
//! `choose_best_symbol`) applied once at load, names in one arena, demangled on first use.
//! Also the text formats perf reads symbols from: `/proc/kallsyms` and `/tmp/perf-PID.map`.

use std::sync::{Arc, OnceLock};

use object::elf::{SymbolBind, STB_GLOBAL, STB_WEAK};

/// One symbol while a table is built: `[start, end)` (end == start for a zero-size symbol, until
/// the fix-ups), its ELF binding, and its name as a range of the arena.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawSym {
    pub start: u64,
    pub end: u64,
    pub bind: SymbolBind,
    /// Index into the module names (kallsyms); 0 otherwise.
    pub module: u16,
    pub name: (u32, u32),
}

/// Builds a [`Table`]: push symbols in the order the file lists them (perf's rb-tree keeps equal
/// starts in insertion order, which `choose_best_symbol`'s last tie-break depends on).
#[derive(Debug, Default)]
pub(crate) struct Builder {
    syms: Vec<RawSym>,
    arena: Vec<u8>,
    /// Whether names are demangled (perf demangles before choosing among aliases).
    pub demangle: bool,
}

impl Builder {
    pub fn new(demangle: bool) -> Builder {
        Builder {
            demangle,
            ..Builder::default()
        }
    }

    pub fn len(&self) -> usize {
        self.syms.len()
    }

    pub fn push(&mut self, start: u64, size: u64, bind: SymbolBind, module: u16, name: &[u8]) {
        let a = self.arena.len() as u32;
        self.arena.extend_from_slice(name);
        self.syms.push(RawSym {
            start,
            end: start.saturating_add(size),
            bind,
            module,
            name: (a, name.len() as u32),
        });
    }

    fn name(&self, s: &RawSym) -> &[u8] {
        &self.arena[s.name.0 as usize..(s.name.0 + s.name.1) as usize]
    }

    /// perf's `symbols__fixup_end` then `symbols__fixup_duplicate` (the order of
    /// `dso__load_sym` and `dso__load_kallsyms`).
    pub fn fixup(&mut self, kallsyms: bool) {
        // Stable: equal starts keep insertion order, as perf's rb-tree does.
        self.syms.sort_by_key(|s| s.start);
        let n = self.syms.len();
        for i in 1..n {
            let (curr_start, curr_mod) = (self.syms[i].start, self.syms[i].module != 0);
            let prev = &mut self.syms[i - 1];
            if prev.end == prev.start {
                if kallsyms && ((prev.module != 0) != curr_mod) {
                    prev.end = round_up(prev.end.saturating_add(4096), 4096);
                } else {
                    prev.end = curr_start;
                }
            }
        }
        if let Some(last) = self.syms.last_mut() {
            if last.end == last.start {
                last.end = round_up(last.start, 4096).saturating_add(4096);
            }
        }
        // symbols__fixup_duplicate: of each run of equal starts keep the one perf keeps.
        let mut out: Vec<RawSym> = Vec::with_capacity(n);
        for s in std::mem::take(&mut self.syms) {
            match out.last() {
                Some(cur) if cur.start == s.start => {
                    if self.choose_b(cur, &s) {
                        *out.last_mut().expect("last") = s;
                    }
                }
                _ => out.push(s),
            }
        }
        self.syms = out;
    }

    /// perf's `choose_best_symbol(a, b) == SYMBOL_B`.
    fn choose_b(&self, a: &RawSym, b: &RawSym) -> bool {
        let (la, lb) = (a.end - a.start, b.end - b.start);
        if la == 0 && lb > 0 {
            return true;
        }
        if lb == 0 && la > 0 {
            return false;
        }
        let (wa, wb) = (a.bind == STB_WEAK, b.bind == STB_WEAK);
        if wa != wb {
            return wa;
        }
        let (ga, gb) = (a.bind == STB_GLOBAL, b.bind == STB_GLOBAL);
        if ga != gb {
            return gb;
        }
        // perf compares the demangled names.
        let na = self.shown(a);
        let nb = self.shown(b);
        let (ua, ub) = (underscores(&na), underscores(&nb));
        if ua != ub {
            return ua > ub;
        }
        nb.len() > na.len()
    }

    fn shown(&self, s: &RawSym) -> String {
        let raw = self.name(s);
        if self.demangle {
            if let Some(d) = super::demangle::demangle(raw) {
                return d;
            }
        }
        String::from_utf8_lossy(raw).into_owned()
    }

    /// Overrides or adds symbols with sizes after the fix-ups (perf inserts `name@plt` after
    /// them): keeps sorted order.
    pub fn finish(self, extra: Vec<(u64, u64, String)>) -> Table {
        let Builder {
            mut syms,
            mut arena,
            demangle,
        } = self;
        if !extra.is_empty() {
            for (start, size, name) in extra {
                let a = arena.len() as u32;
                arena.extend_from_slice(name.as_bytes());
                syms.push(RawSym {
                    start,
                    end: start + size,
                    bind: STB_GLOBAL,
                    module: 0,
                    // Marked already demangled by the top bit of the length.
                    name: (a, name.len() as u32 | PLAIN),
                });
            }
            syms.sort_by_key(|s| s.start);
        }
        let names = (0..syms.len()).map(|_| OnceLock::new()).collect();
        Table {
            syms,
            arena,
            demangle,
            names,
            modules: Vec::new(),
        }
    }
}

/// A name length flag: the name is shown as is (already demangled).
const PLAIN: u32 = 1 << 31;

fn underscores(s: &str) -> usize {
    s.bytes().take_while(|&b| b == b'_').count()
}

fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to).saturating_mul(to)
}

/// A loaded symbol table: lookups by binary search.
#[derive(Debug, Default)]
pub struct Table {
    syms: Vec<RawSym>,
    arena: Vec<u8>,
    demangle: bool,
    names: Vec<OnceLock<Arc<str>>>,
    /// Module names by [`RawSym::module`] (kallsyms: `[xfs]`); index 0 is the main dso.
    pub(crate) modules: Vec<Arc<str>>,
}

/// A symbol found by [`Table::find`].
#[derive(Clone, Debug)]
pub struct Hit {
    /// Its name as perf shows it.
    pub name: Arc<str>,
    /// Its start.
    pub start: u64,
    /// Its module (kallsyms), 0 for the main dso.
    pub module: u16,
}

impl Table {
    /// The number of symbols.
    pub fn len(&self) -> usize {
        self.syms.len()
    }

    /// Whether it has no symbols.
    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }

    /// The symbol covering `addr`: the last one starting at or before it, or, when that one
    /// ends before `addr`, a nearby earlier one that covers it (nested symbols).
    pub fn find(&self, addr: u64) -> Option<Hit> {
        let i = self.syms.partition_point(|s| s.start <= addr);
        let lo = i.saturating_sub(8);
        let j = (lo..i).rev().find(|&j| addr < self.syms[j].end)?;
        let s = &self.syms[j];
        let name = self.names[j].get_or_init(|| {
            let (a, l) = s.name;
            let raw = &self.arena[a as usize..(a + (l & !PLAIN)) as usize];
            if self.demangle && l & PLAIN == 0 {
                if let Some(d) = super::demangle::demangle(raw) {
                    return Arc::from(d);
                }
            }
            Arc::from(String::from_utf8_lossy(raw))
        });
        Some(Hit {
            name: name.clone(),
            start: s.start,
            module: s.module,
        })
    }

    /// `(start, end)` of every symbol, sorted (for tests and the bench).
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.syms.iter().map(|s| (s.start, s.end))
    }
}

/// Whether perf keeps a kallsyms symbol of this type (`symbol_type__filter`: text, weak, data,
/// bss, either case).
pub fn kallsyms_type_kept(t: u8) -> bool {
    matches!(t.to_ascii_uppercase(), b'T' | b'W' | b'D' | b'B')
}

/// Parses `/proc/kallsyms` text as perf does (`kallsyms__parse`, `map__process_kallsym_symbol`,
/// `dso__load_kallsyms`): every kept symbol with size 0, fixed up with the kallsyms rule, module
/// symbols (`name\t[xfs]`) in the module `[xfs]`. Addresses of 0 (an unprivileged reader)
/// give an empty table.
pub fn parse_kallsyms(text: &[u8]) -> Table {
    let mut b = Builder::new(false);
    let mut modules: Vec<Arc<str>> = vec![Arc::from("[kernel.kallsyms]")];
    let mut nonzero = false;
    for line in text.split(|&c| c == b'\n') {
        let mut it = line.splitn(3, |&c| c == b' ');
        let (Some(addr), Some(ty), Some(rest)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        let Some(addr) = parse_hex(addr) else {
            continue;
        };
        if ty.len() != 1 || !kallsyms_type_kept(ty[0]) {
            continue;
        }
        let (name, module) = match rest.iter().position(|&c| c == b'\t') {
            Some(p) => (&rest[..p], Some(&rest[p + 1..])),
            None => (rest, None),
        };
        // Ignore local symbols for ARM modules.
        if name.is_empty() || name[0] == b'$' {
            continue;
        }
        let m = match module {
            Some(m) => {
                let m = String::from_utf8_lossy(m.trim_ascii());
                match modules.iter().position(|x| **x == *m) {
                    Some(i) => i,
                    None => {
                        modules.push(Arc::from(m.as_ref()));
                        modules.len() - 1
                    }
                }
            }
            None => 0,
        };
        nonzero |= addr != 0;
        let bind = if ty[0].is_ascii_uppercase() {
            if ty[0] == b'W' {
                STB_WEAK
            } else {
                STB_GLOBAL
            }
        } else {
            object::elf::STB_LOCAL
        };
        b.push(addr, 0, bind, m.min(u16::MAX as usize) as u16, name);
    }
    if !nonzero {
        return Table::default();
    }
    b.fixup(true);
    let mut t = b.finish(Vec::new());
    t.modules = modules;
    t
}

/// Parses a `/tmp/perf-PID.map` (`START SIZE NAME` per line, hex, as `dso__load_perf_map`):
/// names as written (perf does not demangle them).
pub fn parse_perf_map(text: &[u8]) -> Table {
    let mut b = Builder::new(false);
    for line in text.split(|&c| c == b'\n') {
        if line.len() < 5 {
            continue;
        }
        let mut it = line.splitn(3, |&c| c == b' ');
        let (Some(start), Some(size), Some(name)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        let (Some(start), Some(size)) = (parse_hex(start), parse_hex(size)) else {
            continue;
        };
        b.push(
            start,
            size,
            STB_GLOBAL,
            0,
            name.strip_suffix(b"\r").unwrap_or(name),
        );
    }
    b.fixup(false);
    b.finish(Vec::new())
}

fn parse_hex(s: &[u8]) -> Option<u64> {
    let s = s
        .strip_prefix(b"0x")
        .or_else(|| s.strip_prefix(b"0X"))
        .unwrap_or(s);
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    let mut v = 0u64;
    for &c in s {
        v = (v << 4) | (c as char).to_digit(16)? as u64;
    }
    Some(v)
}

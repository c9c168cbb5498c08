//! A symbol table as perf keeps one (`struct dso`'s rb-tree of `struct symbol`), as a sorted
//! `Vec` of starts, ends and name offsets: perf's fix-ups (`symbols__fixup_end`,
//! `symbols__fixup_duplicate` with `choose_best_symbol`) applied at load as far as they need no
//! name, the names themselves read (and demangled) only for the symbols a lookup hits. An ELF
//! table's names stay in its string section (in memory when small, read by positioned reads
//! from the file when large): loading rustc's or LLVM's table (165 k and 258 k symbols, 20 and
//! 18 MB of names) reads no name. A run of aliases (symbols at one start) that perf would choose
//! among by their demangled names is kept whole and chosen at its first lookup.
//! Where symbols overlap, perf 6.1's answer is the first node on its rb-tree's search path
//! (`symbols__find`): an ELF table rebuilds that tree (`rbtree.rs`) at the first lookup
//! that lands in an overlap, keeps the answers that differ from the search by start, and drops it.
//! Also the text formats perf reads symbols from: `/proc/kallsyms` and `/tmp/perf-PID.map`.

use std::borrow::Cow;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use object::elf::{SymbolBind, STB_GLOBAL, STB_WEAK};

use super::rbtree::{Tree, NIL};

/// A name length: the name runs to its NUL (an ELF string section's).
const TO_NUL: u32 = u32::MAX;

/// [`RawSym::flags`]: the name is shown as is (already demangled).
const PLAIN: u8 = 1;
/// [`RawSym::flags`]: a `.plt` entry: the name demangled, then `@plt`.
const PLT: u8 = 2;
/// [`RawSym::flags`]: a run of aliases still to choose among: `name` indexes [`Table::runs`].
const RUN: u8 = 4;

/// String sections smaller than this are read into memory at load; larger ones stay in the
/// file (one open file per such table).
const IN_MEMORY: u64 = 1 << 20;

/// At most this many tables keep a file open for their names (perf bounds its open dso files
/// too, `dso__data_open_cnt`); past it a table reads its names into memory, as a small one does,
/// so that a profile of hundreds of big binaries never runs out of file descriptors.
const MAX_OPEN: usize = 256;

/// The tables holding a file open for their names ([`Strings::File`]).
static OPEN: AtomicUsize = AtomicUsize::new(0);

/// One symbol: `[start, end)` (end == start for a zero-size symbol, until the fix-ups), its ELF
/// binding, and where its name is: `len` bytes (or up to the NUL) at `name` of the table's
/// string source `src`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawSym {
    pub start: u64,
    pub end: u64,
    name: u32,
    len: u32,
    pub bind: SymbolBind,
    src: u8,
    flags: u8,
    /// Index into the module names (kallsyms); 0 otherwise.
    pub module: u16,
}

/// Where names are read from: a string section in memory, or one in a file.
#[derive(Debug)]
pub(crate) enum Strings {
    Mem(Vec<u8>),
    File {
        file: Arc<File>,
        at: u64,
        len: u64,
        /// The count this table is in (given back at drop).
        open: &'static AtomicUsize,
    },
}

impl Drop for Strings {
    fn drop(&mut self) {
        if let Strings::File { open, .. } = self {
            open.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Strings {
    /// The string section of `len` bytes at `at` of `file`: read now when small.
    pub fn file(file: Arc<File>, at: u64, len: u64) -> Option<Strings> {
        Strings::file_counted(file, at, len, &OPEN, MAX_OPEN)
    }

    /// [`Strings::file`], counted in `open`, at most `max` of them kept in their file.
    fn file_counted(
        file: Arc<File>,
        at: u64,
        len: u64,
        open: &'static AtomicUsize,
        max: usize,
    ) -> Option<Strings> {
        if len < IN_MEMORY || open.fetch_add(1, Ordering::Relaxed) >= max {
            if len >= IN_MEMORY {
                open.fetch_sub(1, Ordering::Relaxed);
            }
            let mut v = vec![0u8; len as usize];
            file.read_exact_at(&mut v, at).ok()?;
            return Some(Strings::Mem(v));
        }
        Some(Strings::File {
            file,
            at,
            len,
            open,
        })
    }

    fn len(&self) -> u64 {
        match self {
            Strings::Mem(v) => v.len() as u64,
            Strings::File { len, .. } => *len,
        }
    }

    /// The offset of the last NUL (a name at an offset after it has no end: `object`'s
    /// `StringTable::get` fails on it, and the symbol is skipped).
    pub fn last_nul(&self) -> Option<u64> {
        match self {
            Strings::Mem(v) => v.iter().rposition(|&b| b == 0).map(|p| p as u64),
            Strings::File { file, at, len, .. } => {
                let mut end = *len;
                let mut buf = vec![0u8; 4096];
                while end > 0 {
                    let n = end.min(buf.len() as u64);
                    let b = &mut buf[..n as usize];
                    file.read_exact_at(b, at + end - n).ok()?;
                    if let Some(p) = b.iter().rposition(|&c| c == 0) {
                        return Some(end - n + p as u64);
                    }
                    end -= n;
                }
                None
            }
        }
    }

    /// The bytes at `off`: `len` of them, or up to the NUL (`None` when there is none, or the
    /// file cannot be read).
    fn get(&self, off: u32, len: u32) -> Option<Cow<'_, [u8]>> {
        let off = off as u64;
        if off > self.len() {
            return None;
        }
        match self {
            Strings::Mem(v) => {
                let rest = &v[off as usize..];
                if len != TO_NUL {
                    return rest.get(..len as usize).map(Cow::Borrowed);
                }
                let p = rest.iter().position(|&b| b == 0)?;
                Some(Cow::Borrowed(&rest[..p]))
            }
            Strings::File {
                file,
                at,
                len: size,
                ..
            } => {
                let mut out: Vec<u8> = Vec::new();
                let mut pos = off;
                let mut chunk = 256u64;
                while pos < *size {
                    let n = chunk.min(*size - pos) as usize;
                    let from = out.len();
                    out.resize(from + n, 0);
                    file.read_exact_at(&mut out[from..], at + pos).ok()?;
                    if let Some(p) = out[from..].iter().position(|&b| b == 0) {
                        out.truncate(from + p);
                        if len != TO_NUL {
                            out.truncate(len as usize);
                        }
                        return Some(Cow::Owned(out));
                    }
                    pos += n as u64;
                    chunk = (chunk * 2).min(1 << 16);
                }
                None
            }
        }
    }
}

/// Builds a [`Table`]: push symbols in the order the file lists them (perf's rb-tree keeps equal
/// starts in insertion order, which `choose_best_symbol`'s last tie-break depends on).
#[derive(Debug, Default)]
pub(crate) struct Builder {
    syms: Vec<RawSym>,
    /// Names pushed as bytes (source 0).
    arena: Vec<u8>,
    /// Further name sources (1, 2, …): string sections.
    strs: Vec<Strings>,
    /// `.plt` entries, added after the fix-ups (perf inserts them after).
    plt: Vec<RawSym>,
    /// Runs of aliases left to choose among at lookup: ranges of `aliases`.
    runs: Vec<(u32, u32)>,
    aliases: Vec<RawSym>,
    /// Whether names are demangled (perf demangles before choosing among aliases).
    pub demangle: bool,
    /// Whether lookups where symbols overlap answer as perf 6.1's rb-tree does ([`Tree`]): an
    /// ELF dso's table (perf splits kallsyms into per-module trees, and loads perf maps with
    /// no fix-ups: those keep answering by start).
    pub emulate_tree: bool,
    /// Set by [`Builder::fixup`] for the tree: what perf did to it before the `.plt` entries.
    tree: PreTree,
}

/// What perf 6.1 did to a dso's rb-tree before its `.plt` entries went in, in terms of the
/// symbols sorted as the tree holds them (by start, equal starts in insertion order), before
/// `symbols__fixup_duplicate`: their "positions". Kept (about 4 bytes a symbol) by a table with
/// overlaps until a lookup needs the tree.
#[derive(Debug, Default)]
struct PreTree {
    /// How many symbols were inserted.
    n: u32,
    /// The positions in insertion order (empty: inserted sorted).
    ins: Vec<u32>,
    /// The runs of aliases (`at`, `len`) in position order: all but one of each erased.
    runs: Vec<(u32, u32)>,
    /// `symbols__fixup_duplicate`'s erasures, in its order.
    dups: Vec<Dup>,
}

/// What a table with overlaps keeps to build perf's tree at the first lookup that needs it.
#[derive(Debug)]
struct LazyTree {
    pre: PreTree,
    /// The sorted index of each symbol inserted after the fix-ups (`.plt`), in insertion order.
    added: Vec<u32>,
}

/// An erasure of `symbols__fixup_duplicate`.
#[derive(Debug, Clone, Copy)]
enum Dup {
    /// The symbol at this position.
    Erase(u32),
    /// Those of a run of `len` aliases from position `at` that `choose_best_symbol` drops, by
    /// their names: replayed with the names when the tree is built (`run` indexes
    /// [`Table::runs`]).
    Named { at: u32, len: u32, run: u32 },
}

impl Builder {
    pub fn new(demangle: bool) -> Builder {
        Builder {
            demangle,
            emulate_tree: true,
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
            name: a,
            len: name.len() as u32,
            bind,
            src: 0,
            flags: 0,
            module,
        });
    }

    /// Adds a source of names; `None` past 255 of them.
    pub fn strings(&mut self, s: Strings) -> Option<u8> {
        if self.strs.len() >= u8::MAX as usize {
            return None;
        }
        self.strs.push(s);
        Some(self.strs.len() as u8)
    }

    /// Pushes a symbol named by the NUL-terminated string at `off` of source `src`.
    pub fn push_at(&mut self, start: u64, size: u64, bind: SymbolBind, src: u8, off: u32) {
        self.syms.push(RawSym {
            start,
            end: start.saturating_add(size),
            name: off,
            len: TO_NUL,
            bind,
            src,
            flags: 0,
            module: 0,
        });
    }

    /// A `.plt` entry named `NAME@plt` by the string at `off` of `src` (no name: `@plt`).
    pub fn push_plt(&mut self, start: u64, size: u64, name: Option<(u8, u32)>) {
        let (src, off, len) = match name {
            Some((s, o)) => (s, o, TO_NUL),
            None => (0, 0, 0),
        };
        self.plt.push(RawSym {
            start,
            end: start.saturating_add(size),
            name: off,
            len,
            bind: STB_GLOBAL,
            src,
            flags: PLT,
            module: 0,
        });
    }

    /// perf's `symbols__fixup_end` then `symbols__fixup_duplicate` (the order of
    /// `dso__load_sym` and `dso__load_kallsyms`); a choice among aliases that needs their names
    /// is left to the first lookup.
    pub fn fixup(&mut self, kallsyms: bool) {
        // Stable: equal starts keep insertion order, as perf's rb-tree does. Sorted as keys of
        // start and index (an unstable sort of integers, then one gather: the stable sort of the
        // symbols themselves was a quarter of loading rustc's and LLVM's tables).
        // kallsyms: perf splits the table into one tree per module (`maps__split_kallsyms`),
        // which is not emulated.
        self.emulate_tree &= !kallsyms;
        let tree = self.emulate_tree;
        let n = self.syms.len();
        if !self.syms.is_sorted_by_key(|s| s.start) {
            let mut keys: Vec<u128> = self
                .syms
                .iter()
                .enumerate()
                .map(|(i, s)| ((s.start as u128) << 64) | i as u128)
                .collect();
            keys.sort_unstable();
            self.syms = keys.iter().map(|&k| self.syms[k as u64 as usize]).collect();
            if tree {
                // Position of the i-th inserted symbol.
                let mut ins = vec![0u32; n];
                for (pos, &k) in keys.iter().enumerate() {
                    ins[k as u64 as usize] = pos as u32;
                }
                self.tree.ins = ins;
            }
        }
        self.tree.n = n as u32;
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
        let syms = std::mem::take(&mut self.syms);
        // Room for the `.plt` entries `finish` merges in (no second copy of a big table).
        let mut out: Vec<RawSym> = Vec::with_capacity(n + self.plt.len());
        let mut i = 0;
        while i < syms.len() {
            let j = i + syms[i..]
                .iter()
                .take_while(|s| s.start == syms[i].start)
                .count();
            let run = &syms[i..j];
            // perf's loop, the tree's erasures noted; named: no tie needed the names.
            let mark = self.tree.dups.len();
            let mut named = true;
            let keep = survivor(
                run.len(),
                |a, b| {
                    choose_b_nameless(&run[a], &run[b]).unwrap_or_else(|| {
                        named = false;
                        false
                    })
                },
                |k| {
                    if tree {
                        self.tree.dups.push(Dup::Erase((i + k) as u32));
                    }
                },
            );
            if tree && run.len() > 1 {
                self.tree.runs.push((i as u32, run.len() as u32));
                if !named {
                    // Replayed with the names when the tree is built.
                    self.tree.dups.truncate(mark);
                    self.tree.dups.push(Dup::Named {
                        at: i as u32,
                        len: run.len() as u32,
                        run: self.runs.len() as u32,
                    });
                }
            }
            if named {
                out.push(run[keep]);
            } else {
                self.runs
                    .push((self.aliases.len() as u32, run.len() as u32));
                self.aliases.extend_from_slice(run);
                out.push(RawSym {
                    name: self.runs.len() as u32 - 1,
                    flags: RUN,
                    ..run[0]
                });
            }
            i = j;
        }
        self.syms = out;
    }

    /// Adds the `.plt` entries and `extra` symbols with sizes after the fix-ups (perf inserts
    /// `name@plt` after them, in this order): keeps sorted order. Where symbols then overlap,
    /// works out perf's answers ([`Table::overrides`]).
    pub fn finish(self, extra: Vec<(u64, u64, String)>) -> Table {
        let Builder {
            mut syms,
            mut arena,
            strs,
            plt,
            runs,
            aliases,
            demangle,
            emulate_tree,
            tree,
        } = self;
        let fixed = syms.len();
        let mut add = plt;
        for (start, size, name) in extra {
            let a = arena.len() as u32;
            arena.extend_from_slice(name.as_bytes());
            add.push(RawSym {
                start,
                end: start + size,
                name: a,
                len: name.len() as u32,
                bind: STB_GLOBAL,
                src: 0,
                flags: PLAIN,
                module: 0,
            });
        }
        let added = add.len();
        // Merged in by start (stable: after the fixed-up ones of their start), noting the
        // sorted index of each added symbol, in insertion order.
        let mut added_at: Vec<u32> = vec![0; added];
        if added > 0 {
            let mut order: Vec<u32> = (0..added as u32).collect();
            order.sort_by_key(|&j| add[j as usize].start);
            // In place, from the back (no second copy of a big table).
            syms.resize(fixed + added, add[0]);
            let mut i = fixed;
            let mut w = fixed + added;
            for &j in order.iter().rev() {
                let a = add[j as usize];
                while i > 0 && syms[i - 1].start > a.start {
                    w -= 1;
                    i -= 1;
                    syms[w] = syms[i];
                }
                w -= 1;
                syms[w] = a;
                added_at[j as usize] = w as u32;
            }
        }
        let names = (0..syms.len()).map(|_| OnceLock::new()).collect();
        let mut all = vec![Strings::Mem(arena)];
        all.extend(strs);
        let mut t = Table {
            syms,
            strs: all,
            demangle,
            names,
            runs: runs.into_iter().map(|r| (r, OnceLock::new())).collect(),
            aliases,
            modules: Vec::new(),
            spans: Vec::new(),
            lazy: Mutex::new(None),
            overrides: OnceLock::new(),
        };
        // (A builder never fixed up has no record of perf's insertions: no tree.)
        if emulate_tree && tree.n as usize >= fixed {
            t.spans = t.overlap_spans();
            if !t.spans.is_empty() {
                t.lazy = Mutex::new(Some(Box::new(LazyTree {
                    pre: tree,
                    added: added_at,
                })));
            }
        }
        t
    }
}

/// Where an address range's answer is perf's rb-tree's, not the search by start's: `[start,
/// end)` and the index of the symbol, or [`NONE`].
type Override = (u64, u64, u32);

/// [`Override`]: no symbol.
const NONE: u32 = u32::MAX;

/// The end of the addresses perf's `symbols__find` finds `s` at: `[start, end)`, and a
/// zero-size symbol at its start only.
fn cover_end(s: &RawSym) -> u64 {
    if s.end == s.start {
        s.start.saturating_add(1)
    } else {
        s.end
    }
}

/// perf's `choose_best_symbol(a, b) == SYMBOL_B` as far as it goes without names (`None`: the
/// names decide).
fn choose_b_nameless(a: &RawSym, b: &RawSym) -> Option<bool> {
    let (la, lb) = (a.end - a.start, b.end - b.start);
    if la == 0 && lb > 0 {
        return Some(true);
    }
    if lb == 0 && la > 0 {
        return Some(false);
    }
    let (wa, wb) = (a.bind == STB_WEAK, b.bind == STB_WEAK);
    if wa != wb {
        return Some(wa);
    }
    let (ga, gb) = (a.bind == STB_GLOBAL, b.bind == STB_GLOBAL);
    if ga != gb {
        return Some(gb);
    }
    None
}

/// The rest of `choose_best_symbol` for two names that the nameless rules tie: the name with
/// fewer leading underscores, then the longer one. A name's key: (leading `_`s, length) of the
/// demangled name (perf compares those).
fn name_key(name: &str) -> (usize, usize) {
    (name.bytes().take_while(|&b| b == b'_').count(), name.len())
}

/// [`name_key`]s `a` and `b`: whether perf keeps `b`.
fn choose_b_by_name(a: (usize, usize), b: (usize, usize)) -> bool {
    if a.0 != b.0 {
        a.0 > b.0
    } else {
        b.1 > a.1
    }
}

/// perf's `symbols__fixup_duplicate` over a run of `len` aliases: keeps the first, replaces it
/// with each later one that `choose_b(kept, later)` prefers. Calls `erase` with each one dropped,
/// in perf's order; returns the one kept.
fn survivor(
    len: usize,
    mut choose_b: impl FnMut(usize, usize) -> bool,
    mut erase: impl FnMut(usize),
) -> usize {
    let mut c = 0;
    for k in 1..len {
        if choose_b(c, k) {
            erase(c);
            c = k;
        } else {
            erase(k);
        }
    }
    c
}

fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to).saturating_mul(to)
}

/// A loaded symbol table: lookups by binary search.
#[derive(Debug, Default)]
pub struct Table {
    syms: Vec<RawSym>,
    /// Name sources by [`RawSym::src`]: 0 the names pushed as bytes, then string sections.
    strs: Vec<Strings>,
    demangle: bool,
    names: Vec<OnceLock<Arc<str>>>,
    /// Runs of aliases (ranges of `aliases`) and the index of the one perf keeps, chosen at
    /// the first lookup.
    runs: Vec<((u32, u32), OnceLock<u32>)>,
    aliases: Vec<RawSym>,
    /// Module names by [`RawSym::module`] (kallsyms: `[xfs]`); index 0 is the main dso.
    pub(crate) modules: Vec<Arc<str>>,
    /// The address ranges where symbols may overlap (sorted, disjoint; by the furthest end of
    /// a run of aliases), where perf 6.1's rb-tree may answer otherwise than the search by
    /// start ([`Builder::emulate_tree`]).
    spans: Vec<(u64, u64)>,
    /// What builds that tree, taken by the first lookup in a span.
    lazy: Mutex<Option<Box<LazyTree>>>,
    /// Sorted, disjoint address ranges in the spans where the tree answers otherwise than the
    /// search by start, with its answer; worked out at the first lookup in a span.
    overrides: OnceLock<Vec<Override>>,
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

    /// The symbol perf 6.1 finds at `addr`: where symbols overlap, the one its rb-tree
    /// answers (`overrides`); elsewhere the last one starting at or before it, or, when
    /// that one ends before `addr`, a nearby earlier one that covers it (nested symbols).
    pub fn find(&self, addr: u64) -> Option<Hit> {
        let j = self.find_index(addr)?;
        let s = self.sym(j);
        let name = self.names[j].get_or_init(|| {
            let raw = self.raw(s);
            let mut shown = None;
            if self.demangle && s.flags & PLAIN == 0 {
                shown = super::demangle::demangle(&raw).map(Arc::<str>::from);
            }
            let shown = shown.unwrap_or_else(|| Arc::from(String::from_utf8_lossy(&raw)));
            if s.flags & PLT != 0 {
                return Arc::from(format!("{shown}@plt"));
            }
            shown
        });
        Some(Hit {
            name: name.clone(),
            start: s.start,
            module: s.module,
        })
    }

    /// The index of the symbol [`Table::find`] finds.
    fn find_index(&self, addr: u64) -> Option<usize> {
        if !self.spans.is_empty() {
            let k = self.spans.partition_point(|s| s.0 <= addr);
            if k.checked_sub(1).is_some_and(|k| addr < self.spans[k].1) {
                let overrides = self.overrides.get_or_init(|| {
                    let lazy = self.lazy.lock().unwrap_or_else(|e| e.into_inner()).take();
                    lazy.map(|l| self.tree_answers(&l)).unwrap_or_default()
                });
                let k = overrides.partition_point(|o| o.0 <= addr);
                if let Some(&(_, end, j)) = k.checked_sub(1).map(|k| &overrides[k]) {
                    if addr < end {
                        return (j != NONE).then_some(j as usize);
                    }
                }
            }
        }
        self.find_by_start(addr)
    }

    /// The last symbol starting at or before `addr`, or, when that one ends before `addr`, a
    /// nearby earlier one that covers it.
    fn find_by_start(&self, addr: u64) -> Option<usize> {
        let i = self.syms.partition_point(|s| s.start <= addr);
        let lo = i.saturating_sub(8);
        (lo..i).rev().find(|&j| addr < self.sym(j).end)
    }

    /// The ranges where symbols may overlap (a run of aliases counted by the furthest end of
    /// its members): the union of each group of two or more that overlap.
    fn overlap_spans(&self) -> Vec<(u64, u64)> {
        let end = |s: &RawSym| {
            if s.flags & RUN == 0 {
                return cover_end(s);
            }
            let ((at, n), _) = self.runs[s.name as usize];
            self.aliases[at as usize..(at + n) as usize]
                .iter()
                .map(cover_end)
                .max()
                .unwrap_or(s.start)
        };
        let mut out = Vec::new();
        let mut j = 0;
        while j < self.syms.len() {
            let (start, mut stop) = (self.syms[j].start, end(&self.syms[j]));
            let mut e = j + 1;
            while e < self.syms.len() && self.syms[e].start < stop {
                stop = stop.max(end(&self.syms[e]));
                e += 1;
            }
            if e - j > 1 {
                out.push((start, stop));
            }
            j = e;
        }
        out
    }

    /// Builds perf 6.1's rb-tree of this table as `dso__load_sym`, `symbols__fixup_duplicate`
    /// and `dso__synthesize_plt_symbols` leave it, and returns, for each range where symbols
    /// overlap, the answer of its `symbols__find` where it differs from the search by start.
    /// The answer is constant between consecutive starts and ends of the overlapping symbols
    /// (each comparison of the search is with one of them, or with a symbol that lies wholly
    /// before or after them). Runs of aliases chosen among by name have their names read here.
    fn tree_answers(&self, lazy: &LazyTree) -> Vec<Override> {
        let LazyTree { pre, added } = lazy;
        let n = pre.n as usize;
        // The sorted index of each position: its run's survivor's index among the fixed-up
        // symbols, moved up by the added symbols sorted before it.
        let mut at: Vec<u32> = Vec::with_capacity(n);
        let mut runs = pre.runs.iter().peekable();
        let mut fixed = 0u32;
        let mut p = 0u32;
        while (p as usize) < n {
            let len = match runs.peek() {
                Some(&&(a, len)) if a == p => {
                    runs.next();
                    len
                }
                _ => 1,
            };
            at.extend(std::iter::repeat_n(fixed, len as usize));
            fixed += 1;
            p += len;
        }
        if !added.is_empty() {
            let mut starts: Vec<u32> = added.clone();
            starts.sort_unstable();
            // Fixed-up symbol i lands at i + the number of added ones sorted before it.
            let mut k = 0;
            for a in at.iter_mut() {
                while k < starts.len() && starts[k] <= *a + k as u32 {
                    k += 1;
                }
                *a += k as u32;
            }
        }
        let index = |node: u32| -> usize {
            let node = node as usize;
            match node.checked_sub(n) {
                Some(j) => added[j] as usize,
                None => at[node] as usize,
            }
        };
        let added = added.len();
        let mut tree = Tree::new(n + added);
        // dso__load_sym: inserted in the file's order. A later one goes left of an earlier
        // one iff its start is lower, i.e. iff its position is lower.
        for i in 0..n {
            let p = if pre.ins.is_empty() {
                i as u32
            } else {
                pre.ins[i]
            };
            tree.insert(p, |q| p < q);
        }
        // symbols__fixup_end changes no shape; symbols__fixup_duplicate erases.
        for d in &pre.dups {
            match *d {
                Dup::Erase(p) => tree.erase(p),
                Dup::Named { at, len, run } => {
                    let ((from, _), chosen) = &self.runs[run as usize];
                    let members = &self.aliases[*from as usize..(*from + len) as usize];
                    // Each member's name read once.
                    let mut keys: Vec<Option<(usize, usize)>> = vec![None; members.len()];
                    let mut key = |i: usize| {
                        *keys[i].get_or_insert_with(|| name_key(&self.shown(&members[i])))
                    };
                    let c = survivor(
                        members.len(),
                        |a, b| {
                            choose_b_nameless(&members[a], &members[b])
                                .unwrap_or_else(|| choose_b_by_name(key(a), key(b)))
                        },
                        |k| tree.erase(at + k as u32),
                    );
                    let _ = chosen.set(c as u32);
                }
            }
        }
        // dso__synthesize_plt_symbols: the `.plt` entries, in `.rela.plt`'s order.
        for j in 0..added {
            let node = (n + j) as u32;
            let start = self.syms[index(node)].start;
            tree.insert(node, |q| start < self.syms[index(q)].start);
        }
        // symbols__find.
        let find = |ip: u64| -> u32 {
            let mut node = tree.root();
            while node != NIL {
                let j = index(node);
                let s = self.sym(j);
                if ip < s.start {
                    node = tree.left(node);
                } else if ip > s.end || (ip == s.end && ip != s.start) {
                    node = tree.right(node);
                } else {
                    return j as u32;
                }
            }
            NONE
        };
        let mut out: Vec<Override> = Vec::new();
        let mut bounds: Vec<u64> = Vec::new();
        for &(from, to) in &self.spans {
            let j = self.syms.partition_point(|s| s.start < from);
            let e = self.syms.partition_point(|s| s.start < to);
            bounds.clear();
            for k in j..e {
                let s = self.sym(k);
                bounds.extend([s.start, cover_end(s)]);
            }
            bounds.sort_unstable();
            bounds.dedup();
            for w in bounds.windows(2) {
                let want = find(w[0]);
                let have = self.find_by_start(w[0]).map_or(NONE, |i| i as u32);
                if want == have {
                    continue;
                }
                match out.last_mut() {
                    Some(o) if o.1 == w[0] && o.2 == want => o.1 = w[1],
                    _ => out.push((w[0], w[1], want)),
                }
            }
        }
        out
    }

    /// The raw bytes of a symbol's name (empty when they cannot be read).
    fn raw(&self, s: &RawSym) -> Cow<'_, [u8]> {
        self.strs
            .get(s.src as usize)
            .and_then(|st| st.get(s.name, s.len))
            .unwrap_or(Cow::Borrowed(b""))
    }

    /// The name a symbol shows (perf compares demangled names when it chooses among aliases).
    fn shown(&self, s: &RawSym) -> String {
        let raw = self.raw(s);
        if self.demangle && s.flags & PLAIN == 0 {
            if let Some(d) = super::demangle::demangle(&raw) {
                return d;
            }
        }
        String::from_utf8_lossy(&raw).into_owned()
    }

    /// Symbol `j`, its run of aliases chosen among (at the first call) as perf does.
    fn sym(&self, j: usize) -> &RawSym {
        let s = &self.syms[j];
        if s.flags & RUN == 0 {
            return s;
        }
        let ((at, n), chosen) = &self.runs[s.name as usize];
        let run = &self.aliases[*at as usize..(*at + *n) as usize];
        let k = chosen.get_or_init(|| {
            survivor(run.len(), |a, b| self.choose_b(&run[a], &run[b]), |_| {}) as u32
        });
        &run[*k as usize]
    }

    /// perf's `choose_best_symbol(a, b) == SYMBOL_B`.
    fn choose_b(&self, a: &RawSym, b: &RawSym) -> bool {
        if let Some(b) = choose_b_nameless(a, b) {
            return b;
        }
        choose_b_by_name(name_key(&self.shown(a)), name_key(&self.shown(b)))
    }

    /// `(start, end)` of every symbol, sorted (for tests and the bench).
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        (0..self.syms.len()).map(|j| {
            let s = self.sym(j);
            (s.start, s.end)
        })
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
    for line in lines(text) {
        let Some(KallsymsLine {
            addr,
            ty,
            name,
            module,
        }) = kallsyms_line(line)
        else {
            continue;
        };
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
        let bind = if ty.is_ascii_uppercase() {
            if ty == b'W' {
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

/// One line of kallsyms that perf loads (the others are `None`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct KallsymsLine<'a> {
    pub addr: u64,
    pub ty: u8,
    pub name: &'a [u8],
    /// `xfs` of `name\t[xfs]`, as written.
    pub module: Option<&'a [u8]>,
}

/// `ADDR TYPE NAME[\tMODULE]` when perf loads it: a hex address, a kept type
/// ([`kallsyms_type_kept`]), a name that is not an ARM module's local `$` symbol. The one reading
/// of a line, for [`parse_kallsyms`] and `slim::kallsyms`.
pub(crate) fn kallsyms_line(line: &[u8]) -> Option<KallsymsLine<'_>> {
    let (addr, ty, rest) = kallsyms_fields(line)?;
    let addr = parse_hex(addr)?;
    if ty.len() != 1 || !kallsyms_type_kept(ty[0]) {
        return None;
    }
    let (name, module) = match memchr::memchr(b'\t', rest) {
        Some(p) => (&rest[..p], Some(&rest[p + 1..])),
        None => (rest, None),
    };
    // Ignore local symbols for ARM modules.
    if name.is_empty() || name[0] == b'$' {
        return None;
    }
    Some(KallsymsLine {
        addr,
        ty: ty[0],
        name,
        module,
    })
}

/// A kallsyms line's three fields, split at its first two spaces (`ADDR`, `TYPE`,
/// `NAME[\tMODULE]`).
pub(crate) fn kallsyms_fields(line: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let a = memchr::memchr(b' ', line)?;
    let rest = &line[a + 1..];
    let t = memchr::memchr(b' ', rest)?;
    Some((&line[..a], &rest[..t], &rest[t + 1..]))
}

/// The lines of `text`, split at `\n` as `split` splits them (an empty last one after a final
/// `\n`), found by `memchr` rather than byte by byte: kallsyms is megabytes of short lines.
pub(crate) fn lines(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let r = rest?;
        match memchr::memchr(b'\n', r) {
            Some(i) => {
                rest = Some(&r[i + 1..]);
                Some(&r[..i])
            }
            None => {
                rest = None;
                Some(r)
            }
        }
    })
}

/// Parses a `/tmp/perf-PID.map` (`START SIZE NAME` per line, hex, as `dso__load_perf_map`):
/// names as written (perf does not demangle them).
pub fn parse_perf_map(text: &[u8]) -> Table {
    let mut b = Builder::new(false);
    // No tree shape is emulated for a map: perf 6.1's `dso__load` inserts its lines and goes
    // to `out` with no fix-ups, which this table still applies.
    b.emulate_tree = false;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Past `max` tables kept in their file, a big string section is read into memory, names the
    /// same; a dropped table gives its place back.
    #[test]
    fn at_most_max_tables_keep_their_file_open() {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let mut f = tempfile::tempfile().unwrap();
        let mut section = vec![b'x'; IN_MEMORY as usize];
        section[..6].copy_from_slice(b"\0main\0");
        std::io::Write::write_all(&mut f, &section).unwrap();
        let f = Arc::new(f);
        let open = |n| {
            (0..n)
                .map(|_| Strings::file_counted(f.clone(), 0, IN_MEMORY, &COUNT, 3).unwrap())
                .collect::<Vec<_>>()
        };
        let in_file = |v: &[Strings]| {
            v.iter()
                .filter(|s| matches!(s, Strings::File { .. }))
                .count()
        };
        let mut tables = open(5);
        assert_eq!(in_file(&tables), 3);
        assert_eq!(COUNT.load(Ordering::Relaxed), 3);
        for t in &tables {
            assert_eq!(t.get(1, TO_NUL).as_deref(), Some(&b"main"[..]));
        }
        tables.retain(|t| !matches!(t, Strings::File { .. }));
        assert_eq!(COUNT.load(Ordering::Relaxed), 0);
        tables.extend(open(1));
        assert_eq!(in_file(&tables), 1);
    }
}

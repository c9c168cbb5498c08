//! Loading one ELF dso's symbols the way perf 6.1's `dso__load` does, from the files the one
//! locator offers ([`super::sources::locate`]: where files are looked for, in perf's order, each
//! of the dso's build; this module only reads them): symbols from the first with a `.symtab`
//! (else `.dynsym` of the runtime file); addresses made file offsets
//! with the runtime file's PT_LOADs (so `Query::rel` looks them up); `name@plt` from
//! `.rela.plt` (`dso__synthesize_plt_symbols`). Files are read by positioned reads
//! ([`ReadCache`]), never mapped.

use std::fs::File;
use std::sync::Arc;

use object::elf::{
    SHN_ABS, SHN_LORESERVE, SHN_UNDEF, SHT_DYNSYM, SHT_NOBITS, SHT_RELA, SHT_SYMTAB, STT_FUNC,
    STT_GNU_IFUNC, STT_NOTYPE, STT_OBJECT,
};
use object::read::elf::{ElfFile, FileHeader, ProgramHeader, Rela, SectionHeader, Sym};
use object::read::ReadCache;
use object::{Endianness, FileKind, Object, ObjectSection, ReadRef};

use super::sources::locate::{OtherBuild, Reader, Role, Wanted};
use super::sources::{Cand, Sources, Window};
use super::table::{Builder, Strings, Table};

/// Most bytes of a decompressed `.gnu_debugdata` (bounded work on a hostile file).
const MINIDEBUG_MAX: u64 = 256 << 20;

/// A PT_LOAD: `(p_vaddr, p_offset, max(p_memsz, p_filesz))`.
pub(crate) type Load = (u64, u64, u64);

/// What one candidate file has.
#[derive(Debug, Default)]
pub(crate) struct Info {
    pub build_id: Option<Vec<u8>>,
    pub symtab: bool,
    pub dynsym: bool,
    pub dwarf: bool,
    pub loads: Vec<Load>,
    pub debugdata: bool,
    /// It holds code (an executable section with bytes): its program headers place the code,
    /// where a separate debug file's (`objcopy --only-keep-debug`) may not.
    pub code: bool,
}

/// Bytes to read an ELF from: a file (or an archive member) by positioned reads, or memory
/// (MiniDebugInfo, the vdso). A file also keeps its handle and where the ELF starts in it, for
/// a table that reads its names later.
pub(crate) enum Src {
    File(ReadCache<Window>, Arc<File>, u64),
    Mem(Vec<u8>),
}

impl Src {
    pub fn open_cand(c: &Cand) -> Option<Src> {
        let w = c.window()?;
        let (file, base) = w.handle();
        Some(Src::File(ReadCache::new(w), file, base))
    }

    /// The `len` bytes at `at` as a source of names (checked in bounds by the caller).
    fn strings(&self, at: u64, len: u64) -> Option<Strings> {
        match self {
            Src::File(_, file, base) => Strings::file(file.clone(), base + at, len),
            Src::Mem(m) => {
                let end = at.checked_add(len)?;
                Some(Strings::Mem(m.get(at as usize..end as usize)?.to_vec()))
            }
        }
    }
}

macro_rules! with_elf {
    ($src:expr, $f:ident ( $($arg:expr),* )) => {
        match $src {
            Src::File(c, _, _) => with_elf!(@kind c, $f($($arg),*)),
            Src::Mem(m) => with_elf!(@kind &m[..], $f($($arg),*)),
        }
    };
    (@kind $data:expr, $f:ident ( $($arg:expr),* )) => {{
        let data = $data;
        match FileKind::parse(data) {
            Ok(FileKind::Elf64) => $f::<object::elf::FileHeader64<Endianness>, _>(data $(, $arg)*),
            Ok(FileKind::Elf32) => $f::<object::elf::FileHeader32<Endianness>, _>(data $(, $arg)*),
            _ => None,
        }
    }};
}

/// What `src` has (`None`: not an ELF file we can read).
pub(crate) fn info(src: &Src) -> Option<Info> {
    with_elf!(src, info_impl())
}

fn info_impl<'d, E: FileHeader<Endian = Endianness>, R: ReadRef<'d>>(data: R) -> Option<Info> {
    let f = ElfFile::<E, R>::parse(data).ok()?;
    let endian = f.endian();
    let sections = f.elf_section_table();
    let has = |t: object::elf::SectionType| {
        sections.iter().any(|s| {
            s.sh_type(endian) == t
                && s.sh_size(endian).into() > 0
                && s.sh_type(endian) != SHT_NOBITS
        })
    };
    let loads = f
        .elf_program_headers()
        .iter()
        .filter(|p| p.p_type(endian) == object::elf::PT_LOAD)
        .map(|p| {
            let sz = p.p_memsz(endian).into().max(p.p_filesz(endian).into());
            (p.p_vaddr(endian).into(), p.p_offset(endian).into(), sz)
        })
        .filter(|l| l.2 > 0)
        .collect();
    let dwarf = f
        .section_by_name(".debug_info")
        .is_some_and(|s| s.kind() != object::SectionKind::UninitializedData && s.size() > 0);
    Some(Info {
        build_id: f.build_id().ok().flatten().map(<[u8]>::to_vec),
        symtab: has(SHT_SYMTAB),
        dynsym: has(SHT_DYNSYM),
        dwarf,
        loads,
        debugdata: f.section_by_name(".gnu_debugdata").is_some(),
        code: sections.iter().any(|s| {
            s.sh_flags(endian).0 & object::elf::SHF_EXECINSTR.0 != 0
                && s.sh_type(endian) != SHT_NOBITS
                && s.sh_size(endian).into() > 0
        }),
    })
}

/// perf's `elf_read_program_header` + adjust: the file offset of `vaddr`.
pub(crate) fn to_offset(loads: &[Load], vaddr: u64) -> Option<u64> {
    loads
        .iter()
        .find(|&&(v, _, sz)| vaddr >= v && vaddr - v < sz)
        .and_then(|&(v, o, _)| (vaddr - v).checked_add(o))
}

/// The virtual address of file offset `off` (for DWARF lookups).
pub(crate) fn to_vaddr(loads: &[Load], off: u64) -> Option<u64> {
    loads
        .iter()
        .find(|&&(_, o, sz)| off >= o && off - o < sz)
        .and_then(|&(v, o, _)| (off - o).checked_add(v))
}

/// Pushes the function symbols of `src` (`.symtab`, or `.dynsym` when `dynsym`) onto `b`, at
/// file offsets by `loads`, with perf's filter (`elf_sym__filter`, text labels), their names
/// left in the string section (read when a lookup hits them). Returns how many were pushed.
pub(crate) fn symbols(src: &Src, dynsym: bool, loads: &[Load], b: &mut Builder) -> Option<usize> {
    let strings = |at, len| src.strings(at, len);
    with_elf!(src, symbols_impl(dynsym, loads, b, &strings))
}

/// A string section's `(file offset, size)`, when it lies within `data`.
fn string_range<'d, E: FileHeader<Endian = Endianness>, R: ReadRef<'d>>(
    data: R,
    sections: &object::read::elf::SectionTable<'d, E, R>,
    endian: Endianness,
    index: object::SectionIndex,
) -> Option<(u64, u64)> {
    let (at, size) = sections.section(index).ok()?.file_range(endian)?;
    (at.checked_add(size)? <= data.len().ok()?).then_some((at, size))
}

fn symbols_impl<'d, E: FileHeader<Endian = Endianness>, R: ReadRef<'d>>(
    data: R,
    dynsym: bool,
    loads: &[Load],
    b: &mut Builder,
    strings: &dyn Fn(u64, u64) -> Option<Strings>,
) -> Option<usize> {
    let f = ElfFile::<E, R>::parse(data).ok()?;
    let endian = f.endian();
    let sections = f.elf_section_table();
    let table = sections
        .symbols(endian, data, if dynsym { SHT_DYNSYM } else { SHT_SYMTAB })
        .ok()?;
    // No name is read here: a symbol keeps the offset of its name in the string section (through
    // a `ReadCache`, `table.strings()` read each name with a read of its own, then the names
    // were copied, sorted and demangled for rustc's and LLVM's hundred thousand symbols, of
    // which a profile prints a few hundred). A name with no NUL after it is skipped, as
    // `StringTable::get` fails on it.
    let Some((src, last_nul)) = string_range(data, sections, endian, table.string_section())
        .and_then(|(at, size)| strings(at, size))
        .and_then(|s| {
            let last = s.last_nul()?;
            Some((b.strings(s)?, last))
        })
    else {
        return Some(0);
    };
    let before = b.len();
    for sym in table.symbols() {
        let ty = sym.st_type();
        let shndx = sym.st_shndx(endian);
        if sym.st_name(endian) == 0
            || shndx == SHN_UNDEF
            || shndx == SHN_ABS
            || shndx.0 >= SHN_LORESERVE
        {
            continue;
        }
        let func = ty == STT_FUNC || ty == STT_GNU_IFUNC || ty == STT_OBJECT;
        if !func {
            if ty != STT_NOTYPE {
                continue;
            }
            // A label counts in a text section only (`elf_sec__filter`).
            let Ok(sec) = sections.section(object::SectionIndex(shndx.0 as usize)) else {
                continue;
            };
            let Ok(name) = sections.section_name(endian, sec) else {
                continue;
            };
            if !name.windows(4).any(|w| w == b"text") {
                continue;
            }
        }
        let name = sym.st_name(endian);
        if name as u64 > last_nul {
            continue;
        }
        let Some(start) = to_offset(loads, sym.st_value(endian).into()) else {
            continue;
        };
        b.push_at(start, sym.st_size(endian).into(), sym.st_bind(), src, name);
    }
    Some(b.len() - before)
}

/// perf's `dso__synthesize_plt_symbols`: `name@plt` for each `.rela.plt` (or `.rel.plt`) entry
/// whose symbol table is `.dynsym`, at `.plt`'s file offset + (i + 1) × `sh_entsize`; pushed
/// onto `b` (added after its fix-ups), their names read at lookup.
pub(crate) fn plt(src: &Src, b: &mut Builder) {
    let strings = |at, len| src.strings(at, len);
    with_elf!(src, plt_impl(b, &strings));
}

fn plt_impl<'d, E: FileHeader<Endian = Endianness>, R: ReadRef<'d>>(
    data: R,
    b: &mut Builder,
    strings: &dyn Fn(u64, u64) -> Option<Strings>,
) -> Option<()> {
    let f = ElfFile::<E, R>::parse(data).ok()?;
    let endian = f.endian();
    let sections = f.elf_section_table();
    let dynsym = sections.symbols(endian, data, SHT_DYNSYM).ok()?;
    if dynsym.is_empty() {
        return None;
    }
    let (_, rel) = sections
        .section_by_name(endian, b".rela.plt")
        .or_else(|| sections.section_by_name(endian, b".rel.plt"))?;
    if rel.sh_link(endian) as usize != dynsym.section().0 {
        return None;
    }
    let (_, plt) = sections.section_by_name(endian, b".plt")?;
    // perf 6.1 (x86 and every machine but ARM, AArch64 and SPARC) takes header and entry size
    // from `sh_entsize`, 0 included (lld's `.plt`): then every entry is a zero-size symbol at
    // `.plt`'s offset. They find nothing by themselves, but perf inserts them into its rb-tree
    // after the fix-ups, which changes what its search finds over `.plt` (an earlier zero-size
    // `_fini` extended over it: some addresses then find no symbol).
    let entsize: u64 = plt.sh_entsize(endian).into();
    // Offsets past 2^64 (a hostile header) end the entries.
    let offset: u64 = plt.sh_offset(endian).into();
    let mut off = offset.checked_add(entsize)?; // the PLT header
    let idx: Vec<u32> = if rel.sh_type(endian) == SHT_RELA {
        let (relas, _) = rel.rela(endian, data).ok()??;
        relas.iter().map(|r| r.r_sym(endian, false)).collect()
    } else {
        let (rels, _) = rel.rel(endian, data).ok()??;
        rels.iter()
            .map(|r| object::read::elf::Rel::r_sym(r, endian))
            .collect()
    };
    // A name that cannot be read is empty (`@plt`), as before.
    let src = string_range(data, sections, endian, dynsym.string_section())
        .and_then(|(at, size)| strings(at, size))
        .and_then(|s| b.strings(s));
    for i in idx {
        let name = dynsym
            .symbol(object::SymbolIndex(i as usize))
            .ok()
            .map(|s| s.st_name(endian))
            .zip(src)
            .map(|(n, s)| (s, n));
        b.push_plt(off, entsize, name);
        let Some(next) = off.checked_add(entsize) else {
            break;
        };
        off = next;
    }
    Some(())
}

/// The decompressed `.gnu_debugdata` (MiniDebugInfo: an xz'd ELF with a `.symtab`).
pub(crate) fn debugdata(src: &Src) -> Option<Src> {
    let xz = with_elf!(src, section_bytes(".gnu_debugdata"))?;
    let mut out = Limited(Vec::new());
    lzma_rs::xz_decompress(&mut &xz[..], &mut out).ok()?;
    Some(Src::Mem(out.0))
}

/// A `Vec` writer that fails past [`MINIDEBUG_MAX`] bytes (an xz bomb stops there).
struct Limited(Vec<u8>);

impl std::io::Write for Limited {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + b.len() > MINIDEBUG_MAX as usize {
            return Err(std::io::Error::other("MiniDebugInfo too large"));
        }
        self.0.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn section_bytes<'d, E: FileHeader<Endian = Endianness>, R: ReadRef<'d>>(
    data: R,
    name: &str,
) -> Option<Vec<u8>> {
    let f = ElfFile::<E, R>::parse(data).ok()?;
    let s = f.section_by_name(name)?;
    if s.size() > MINIDEBUG_MAX || !size_believable(&s) {
        return None;
    }
    Some(s.uncompressed_data().ok()?.into_owned())
}

/// Whether a compressed section's declared size is believable: at most about zlib's best ratio
/// (1032:1) over its compressed bytes. The size is untrusted and `uncompressed_data` allocates
/// (and zeroes) it before inflating: a 9 KiB file declaring gigabytes took seconds and 2 GiB
/// (found by the `elf_symbols` and `unwind_info` fuzz targets,
/// `regression::r40_compressed_section_size_is_believed_up_to_zlib_ratio`).
pub(crate) fn size_believable<'d, S: ObjectSection<'d>>(s: &S) -> bool {
    match s.compressed_data() {
        Ok(c) if c.format != object::CompressionFormat::None => {
            c.uncompressed_size
                <= (c.data.len() as u64)
                    .saturating_mul(1100)
                    .saturating_add(4096)
        }
        Ok(_) => true,
        Err(_) => false,
    }
}

/// The DWARF sections of `src`, decompressed, for an `addr2line` context.
pub(crate) fn dwarf_sections(src: &Src) -> Option<Vec<(gimli::SectionId, Vec<u8>)>> {
    with_elf!(src, dwarf_impl())
}

fn dwarf_impl<'d, E: FileHeader<Endian = Endianness>, R: ReadRef<'d>>(
    data: R,
) -> Option<Vec<(gimli::SectionId, Vec<u8>)>> {
    use gimli::SectionId::*;
    let f = ElfFile::<E, R>::parse(data).ok()?;
    let mut out = Vec::new();
    for id in [
        DebugAbbrev,
        DebugAddr,
        DebugAranges,
        DebugInfo,
        DebugLine,
        DebugLineStr,
        DebugRanges,
        DebugRngLists,
        DebugStr,
        DebugStrOffsets,
    ] {
        if let Some(s) = f.section_by_name(id.name()) {
            if !size_believable(&s) {
                continue;
            }
            if let Ok(d) = s.uncompressed_data() {
                out.push((id, d.into_owned()));
            }
        }
    }
    Some(out)
}

/// A dso's symbols as perf would load them, and where its DWARF is.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    pub table: Table,
    pub loads: Vec<Load>,
    /// The file with the DWARF (the symbol file's, else the runtime file's).
    pub dwarf: Option<Cand>,
    /// No file of the dso's build could be read.
    pub missing: bool,
    /// The dso's build id: the stream's, else the file's own (as perf reads it).
    pub build_id: Option<Vec<u8>>,
    /// The file the runtime role was read from (the `.dynsym`, the PT_LOADs), else the symbol
    /// file.
    pub runtime: Option<Cand>,
    /// The separate debug file the `.symtab` was read from, when it is not the runtime file.
    pub debug: Option<Cand>,
    /// With `missing`: the files found of another build than the dso's (never read).
    pub other_builds: Vec<OtherBuild>,
}

/// The files a dso's symbols are read from, as the locator offers them: the first with a
/// `.symtab` (perf's `syms_ss`) and the first with a `.dynsym` (`runtime_ss`).
#[derive(Default)]
struct SymbolFiles {
    syms: Option<(Src, Info, Cand)>,
    runtime: Option<(Src, Info, Cand)>,
    /// The program headers of the first file that holds code: where the symbols are placed when
    /// no file has a `.dynsym` (a static binary), not by a debug file's, whose offsets may be
    /// anything.
    code_loads: Option<Vec<Load>>,
}

impl Reader for SymbolFiles {
    type Out = ();

    fn read(&mut self, c: &Cand) -> Option<()> {
        let src = Src::open_cand(c)?;
        let inf = info(&src)?;
        if self.code_loads.is_none() && inf.code {
            self.code_loads = Some(inf.loads.clone());
        }
        let (want_syms, want_rt) = (
            self.syms.is_none() && inf.symtab,
            self.runtime.is_none() && inf.dynsym,
        );
        if want_syms && want_rt {
            // One file is both: keep it as the symbol source, reopen for the runtime role.
            if let (Some(a), Some(i2)) = (Src::open_cand(c), info(&src)) {
                self.runtime = Some((a, i2, c.clone()));
            }
            self.syms = Some((src, inf, c.clone()));
        } else if want_syms {
            self.syms = Some((src, inf, c.clone()));
        } else if want_rt {
            self.runtime = Some((src, inf, c.clone()));
        }
        (self.syms.is_some() && self.runtime.is_some()).then_some(())
    }

    /// debuginfod's debug file while no file had a `.symtab`, its executable while no file was
    /// read at all.
    fn wants(&self, role: Role) -> bool {
        match role {
            Role::Debug => self.syms.is_none(),
            Role::Runtime => self.syms.is_none() && self.runtime.is_none(),
        }
    }
}

/// Loads the symbols of the dso `w` asks for (its path, its build id when the stream gives it,
/// the process that maps it and that process's root held open, its MMAP2's inode), from the files the locator finds ([`Sources::find`], [`Role::Debug`]: by build id in
/// `--symbols` and the cache, perf's debug files, the file at its path, debuginfod), each of the
/// dso's build.
pub(crate) fn load(
    w: &Wanted<'_>,
    demangle: bool,
    minidebuginfo: bool,
    sources: &Sources,
) -> Loaded {
    let mut files = SymbolFiles::default();
    let found = sources.find(w, Role::Debug, &mut files);
    let SymbolFiles {
        syms,
        runtime,
        code_loads,
    } = files;

    let bid = found.build_id;
    if syms.is_none() && runtime.is_none() {
        return Loaded {
            missing: true,
            build_id: bid,
            other_builds: found.other_builds,
            ..Loaded::default()
        };
    }
    let mut b = Builder::new(demangle);
    let rt_loads = match (&runtime, code_loads, &syms) {
        (Some(r), _, _) => r.1.loads.clone(),
        (None, Some(l), _) => l,
        (None, None, s) => s.as_ref().map(|s| s.1.loads.clone()).unwrap_or_default(),
    };
    let dwarf = [&syms, &runtime]
        .into_iter()
        .flatten()
        .find(|s| s.1.dwarf)
        .map(|s| s.2.clone());
    match &syms {
        Some((src, _, _)) => {
            symbols(src, false, &rt_loads, &mut b);
        }
        None => {
            let (src, inf, _) = runtime.as_ref().expect("one of them");
            symbols(src, true, &rt_loads, &mut b);
            if minidebuginfo && inf.debugdata {
                if let Some(mini) = debugdata(src) {
                    symbols(&mini, false, &rt_loads, &mut b);
                }
            }
        }
    }
    if b.len() > 0 {
        if let Some(r) = &runtime {
            plt(&r.0, &mut b);
        }
    }
    b.fixup(false);
    let debug = match (&syms, &runtime) {
        (Some(s), Some(r)) if s.2 != r.2 => Some(s.2.clone()),
        _ => None,
    };
    Loaded {
        table: b.finish(Vec::new()),
        loads: rt_loads,
        dwarf,
        missing: false,
        build_id: bid,
        runtime: runtime.or(syms).map(|r| r.2),
        debug,
        other_builds: Vec::new(),
    }
}

//! Slim copies of ELF files for `perfpipe archive`: only what naming frames and unwinding read.
//!
//! A copy keeps, whole: the notes (the build id), the symbol tables and their strings (`.symtab`,
//! `.dynsym`, `.strtab`, `.dynstr`, their hash and version tables, `.dynamic`), the unwind tables
//! (`.eh_frame`, `.eh_frame_hdr`, `.debug_frame`), what perf and perfpipe make `name@plt` entries
//! from (`.plt`, `.plt.sec`, `.plt.got`, `.got`, `.got.plt`, `.rela.plt`/`.rel.plt`), MiniDebugInfo
//! (`.gnu_debugdata`), the debug links, and the section and program headers. Every other section
//! that the program loads (`.text`, `.rodata`, `.data`, …) becomes `SHT_NOBITS` with its address,
//! size and file offset unchanged, as `objcopy --only-keep-debug` does, so `sh_addr - sh_offset`
//! (perf's symbol adjustment) and the program headers (perfpipe's) are those of the original. The
//! sections kept are packed one after another, except code (`.plt`…), which stays at its offset:
//! perf and perfpipe number `name@plt` entries by file offsets from `.plt`'s. Other sections that are not loaded (`.comment`,
//! DWARF other than `.debug_frame` unless `dwarf` is asked for: `--inline` reads it) are dropped.
//!
//! A kallsyms copy ([`kallsyms`]) keeps the lines that name the kernel addresses the recording
//! hit, and the lines that bound them, so every hit is named as with the whole file.
//!
//! The rewriting is `object::build::elf::Builder`'s (read, change sections, write). A file it
//! cannot read or write, a relocatable one (a kernel module: its relocations apply to the
//! sections dropped), or a copy whose build id is not the original's is packed whole.

use object::build::elf::{Builder, SectionData};
use object::elf;

/// Whether a section stays whole in a slim copy.
fn kept(name: &[u8], sh_type: elf::SectionType, dwarf: bool) -> bool {
    const NAMES: &[&[u8]] = &[
        b".eh_frame",
        b".eh_frame_hdr",
        b".debug_frame",
        b".gnu_debugdata",
        b".gnu_debuglink",
        b".gnu_debugaltlink",
        b".plt",
        b".plt.sec",
        b".plt.got",
        b".got",
        b".got.plt",
        b".rela.plt",
        b".rel.plt",
        b".interp",
    ];
    matches!(
        sh_type,
        elf::SHT_NOTE
            | elf::SHT_SYMTAB
            | elf::SHT_DYNSYM
            | elf::SHT_STRTAB
            | elf::SHT_SYMTAB_SHNDX
            | elf::SHT_HASH
            | elf::SHT_GNU_HASH
            | elf::SHT_GNU_VERSYM
            | elf::SHT_GNU_VERDEF
            | elf::SHT_GNU_VERNEED
            | elf::SHT_DYNAMIC
            | elf::SHT_NOBITS
    ) || NAMES.contains(&name)
        || (dwarf && (name.starts_with(b".debug_") || name.starts_with(b".zdebug_")))
}

/// The slim copy of the ELF file `data`, or `None` when it is to be packed whole (see the module
/// doc). `dwarf` keeps the DWARF debug sections too.
pub fn slim(data: &[u8], dwarf: bool) -> Option<Vec<u8>> {
    let id = perfpipe_stream::model::dso::elf_build_id(data)?;
    let mut b = Builder::read(data).ok()?;
    if !matches!(b.header.e_type, elf::ET_EXEC | elf::ET_DYN) {
        return None;
    }
    // Sections the program loads, in file order: those kept are packed from the first one on.
    let mut alloc: Vec<_> = b
        .sections
        .iter()
        .filter(|s| s.is_alloc() && s.sh_type != elf::SHT_NOBITS)
        .map(|s| (s.sh_offset, s.id()))
        .collect();
    alloc.sort_by_key(|a| a.0);
    let mut at = alloc.first().map(|a| a.0)?;
    for (_, sid) in alloc {
        let s = b.sections.get_mut(sid);
        if kept(&s.name, s.sh_type, dwarf) {
            if s.sh_flags.0 & elf::SHF_EXECINSTR.0 != 0 {
                // Code stays where it was: `name@plt` entries are file offsets from `.plt`'s.
                at = s.sh_offset;
            } else {
                let align = s.sh_addralign.max(1);
                at = at.div_ceil(align) * align;
                s.sh_offset = at;
            }
            at += s.sh_size;
        } else {
            s.sh_type = elf::SHT_NOBITS;
            s.data = SectionData::UninitializedData(s.sh_size);
        }
    }
    for s in b.sections.iter_mut() {
        if !s.is_alloc() && s.sh_type != elf::SHT_NULL && !kept(&s.name, s.sh_type, dwarf) {
            s.delete = true;
        }
    }
    let mut out = Vec::new();
    b.write(&mut out).ok()?;
    // Only a copy that still says what it is (and was written as asked) is used.
    let same = perfpipe_stream::model::dso::elf_build_id(&out).is_some_and(|b| b == id);
    (same && out.len() < data.len()).then_some(out)
}

/// Names perf looks kallsyms up by whatever the samples hit: the relocation reference
/// (`kallsyms__delta`, the kernel MMAP's `[kernel.kallsyms]_text`) and the text bounds.
const KALLSYMS_ANCHORS: &[&[u8]] = &[b"_text", b"_stext", b"_etext", b"_sinittext", b"_einittext"];

/// The lines of the kallsyms `text` that name the kernel addresses `hits` as the whole file does.
///
/// perf (`dso__load_kallsyms`) and perfpipe ([`super::table::parse_kallsyms`]) load the lines of
/// types T, W, D and B (either case), give each symbol the end the next loaded address starts
/// at (or a page past its start where kernel and module symbols meet, or for the last one), and
/// of equal starts keep one by their lengths. An address is named by the symbol of the greatest
/// start at or below it, when it lies before that symbol's end. So keeping, for every hit, all the
/// lines at that start and all the lines at the next loaded start gives each hit the same start,
/// the same end and the same choice among equal starts: the same name. Lines are kept in their
/// order (equal starts are chosen among in file order), plus the `KALLSYMS_ANCHORS`.
pub fn kallsyms(text: &[u8], hits: &[u64]) -> Vec<u8> {
    use super::table::{kallsyms_fields, kallsyms_line, lines};
    // Each line and its address as the table reads it (a `0x` prefix, no `+`, at most 16
    // digits), read once.
    let read: Vec<(&[u8], Option<u64>)> = lines(text)
        .map(|l| (l, kallsyms_line(l).map(|k| k.addr)))
        .collect();
    let mut starts: Vec<u64> = read.iter().filter_map(|r| r.1).collect();
    starts.sort_unstable();
    starts.dedup();
    let mut keep = rustc_hash::FxHashSet::default();
    for &a in hits {
        let i = starts.partition_point(|&s| s <= a);
        if i > 0 {
            keep.insert(starts[i - 1]);
            if let Some(&next) = starts.get(i) {
                keep.insert(next);
            }
        }
    }
    let mut out = Vec::new();
    for (line, addr) in read {
        let anchor = kallsyms_fields(line).is_some_and(|(_, _, n)| KALLSYMS_ANCHORS.contains(&n));
        if anchor || addr.is_some_and(|a| keep.contains(&a)) {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};

    fn names(data: &[u8]) -> Vec<(String, u64, u64)> {
        let f = object::File::parse(data).unwrap();
        let mut v: Vec<_> = f
            .symbols()
            .chain(f.dynamic_symbols())
            .map(|s| (s.name().unwrap_or("").to_string(), s.address(), s.size()))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_slim_copy_keeps_symbols_unwind_tables_and_layout() {
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let Some(small) = slim(&me, false) else {
            panic!("this test binary was not slimmed");
        };
        assert_eq!(names(&me), names(&small));
        let (a, b) = (
            object::File::parse(&me[..]).unwrap(),
            object::File::parse(&small[..]).unwrap(),
        );
        let eh = |f: &object::File<'_>| {
            f.section_by_name(".eh_frame")
                .map(|s| s.data().unwrap().to_vec())
        };
        assert_eq!(eh(&a), eh(&b));
        let text = |f: &object::File<'_>| {
            let s = f.section_by_name(".text").unwrap();
            (s.address(), s.size(), s.file_range().map(|r| r.0))
        };
        assert_eq!(text(&a).0, text(&b).0);
        assert_eq!(text(&a).1, text(&b).1);
        assert!(text(&b).2.is_none(), ".text keeps no bytes");
        // Smaller by at least the code (how much more depends on the build's debuginfo).
        assert!(
            small.len() as u64 + text(&a).1 <= me.len() as u64,
            "slim {} bytes, .text {} bytes, whole {} bytes",
            small.len(),
            text(&a).1,
            me.len()
        );
        let loads = |f: &object::File<'_>| {
            f.segments()
                .map(|s| (s.address(), s.file_range().0))
                .collect::<Vec<_>>()
        };
        assert_eq!(loads(&a), loads(&b));
        let plt = |f: &object::File<'_>| f.section_by_name(".plt").map(|s| s.file_range());
        assert_eq!(plt(&a), plt(&b), "`.plt` stays where it was");
        assert!(a.section_by_name(".debug_info").is_some());
        assert!(b.section_by_name(".debug_info").is_none());
        let dwarf = slim(&me, true).unwrap();
        let c = object::File::parse(&dwarf[..]).unwrap();
        assert!(c.section_by_name(".debug_info").is_some());
    }

    #[test]
    fn slim_kallsyms_names_every_hit_as_the_whole_file() {
        // Aliases at one start (chosen among by length and order), a weak symbol, data and
        // read-only lines, a module whose first symbol ends a kernel symbol at a page, the last.
        let text = b"ffffffff81000000 T _text\n\
ffffffff81000000 T _stext\n\
ffffffff81000100 t alias_b\n\
ffffffff81000100 T alias_a\n\
ffffffff81000180 r __ro_data\n\
ffffffff81000200 W weak_fn\n\
ffffffff81000300 T before_module\n\
ffffffff81002000 D some_data\n\
ffffffffa0000000 t mod_fn\t[xfs]\n\
ffffffffa0000100 t mod_fn2\t[xfs]\n\
ffffffffa0000200 T mod_last\t[xfs]\n";
        let whole = crate::symbols::table::parse_kallsyms(text);
        let hits: Vec<u64> = [
            0xffffffff81000000u64,
            0xffffffff81000150,
            0xffffffff81000190,
            0xffffffff81000250,
            0xffffffff81000f00,
            0xffffffff81002100,
            0xffffffffa0000050,
            0xffffffffa0000300,
            0xffffffffa0002000,
            0x1000,
        ]
        .to_vec();
        for n in 1..=hits.len() {
            let small = kallsyms(text, &hits[..n]);
            assert!(small.len() < text.len());
            let slim = crate::symbols::table::parse_kallsyms(&small);
            for &a in &hits[..n] {
                let name = |t: &crate::symbols::table::Table| t.find(a).map(|h| h.name.to_string());
                assert_eq!(name(&whole), name(&slim), "{a:x} with {n} hits");
            }
        }
        let small = String::from_utf8(kallsyms(text, &[0xffffffff81000250])).unwrap();
        assert_eq!(
            small,
            "ffffffff81000000 T _text\nffffffff81000000 T _stext\n\
ffffffff81000200 W weak_fn\nffffffff81000300 T before_module\n"
        );
    }

    #[test]
    fn what_is_not_an_executable_or_library_is_packed_whole() {
        assert!(slim(b"not an ELF file", false).is_none());
        assert!(slim(&[0x7f, b'E', b'L', b'F', 2, 1, 1], false).is_none());
    }
}

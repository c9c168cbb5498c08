//! Per-dso unwind information: the `.eh_frame`, `.eh_frame_hdr` and `.debug_frame` sections of an
//! ELF file, read once per dso by positioned reads (never mapped), and turned into a framehop
//! [`Module`] for each map of the dso with the map's load bias (from the MMAP's address and file
//! offset and the file's PT_LOAD headers).
//!
//! The file is found by [`find`] through the one locator of dso files
//! ([`crate::symbols::sources::locate`]), checked by build id.
//!
//! The `[vdso]` is unwound with this process's own vdso image, as perf does (it copies its own vdso
//! to `/tmp/perf-vdso.so-*`): right when the recording is of this kernel.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use framehop::{Module, ModuleSectionInfo};
use object::read::elf::{ElfFile, FileHeader, ProgramHeader};
use object::read::ReadCache;
use object::{Endianness, FileKind, Object, ObjectSection, ReadRef};
use perfpipe_stream::model::dso::ProcessRoot;

use crate::symbols::sources::locate::{Inode, OtherBuild, Role, Wanted};
use crate::symbols::sources::Sources;

/// Section bytes shared by every module made from one dso.
pub type Bytes = Arc<[u8]>;

/// Most bytes read from one unwind section (bounded work on a hostile file).
const SECTION_MAX: u64 = 256 << 20;

/// A PT_LOAD: `(p_vaddr, p_offset, p_filesz)`.
type Load = (u64, u64, u64);

/// What unwinding needs of one ELF file.
#[derive(Debug, Default, Clone)]
pub struct UnwindInfo {
    pub(super) eh_frame: Option<(Range<u64>, Bytes)>,
    pub(super) eh_frame_hdr: Option<(Range<u64>, Bytes)>,
    pub(super) debug_frame: Option<Bytes>,
    pub(super) text: Option<Range<u64>>,
    pub(super) got: Option<Range<u64>>,
    loads: Vec<Load>,
    /// The FDEs (file addresses, sorted) whose CFI framehop cannot evaluate: their frames are
    /// stepped by [`super::cfi`].
    hard: Arc<[(u64, u64)]>,
}

impl UnwindInfo {
    /// Whether the file has any unwind section.
    pub fn has_unwind_info(&self) -> bool {
        self.eh_frame.is_some() || self.debug_frame.is_some()
    }

    /// The PT_LOADs: `(p_vaddr, p_offset, p_filesz)`.
    pub fn loads(&self) -> &[(u64, u64, u64)] {
        &self.loads
    }

    /// The address ranges (file addresses, `[start, end)`, sorted) of the FDEs whose CFI framehop
    /// cannot evaluate ([`super::cfi::hard_ranges`]).
    pub fn hard(&self) -> &[(u64, u64)] {
        &self.hard
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.eh_frame.as_ref().map_or(0, |s| s.1.len())
            + self.eh_frame_hdr.as_ref().map_or(0, |s| s.1.len())
            + self.debug_frame.as_ref().map_or(0, |s| s.len())
    }

    /// The load bias of a map of this file at `start` showing file offset `pgoff`: the address
    /// minus the file's virtual address there. perf and the dynamic loader map a PT_LOAD from its
    /// offset rounded down to a page, so the PT_LOAD that starts in that page (else the one
    /// whose page-rounded file range holds `pgoff`) gives it; without one, offsets and addresses are taken as equal.
    pub fn base_avma(&self, start: u64, pgoff: u64) -> u64 {
        // Two PT_LOADs can share a file page (the end of one, the start of the next): the map
        // starting at that page is of the one that starts there.
        let load = self
            .loads
            .iter()
            .find(|&&(_, off, _)| off & !0xfff == pgoff)
            .or_else(|| {
                self.loads.iter().find(|&&(_, off, filesz)| {
                    pgoff >= off & !0xfff && pgoff < off.saturating_add(filesz)
                })
            });
        let svma = load.map_or(pgoff, |&(vaddr, off, _)| {
            vaddr.wrapping_add(pgoff).wrapping_sub(off)
        });
        start.wrapping_sub(svma)
    }

    /// The unwind information of a file with only an `.eh_frame` (of `data`, at `at`), for tests.
    #[cfg(test)]
    pub(super) fn with_eh_frame(at: u64, data: &[u8]) -> UnwindInfo {
        let mut info = UnwindInfo {
            eh_frame: Some((at..at + data.len() as u64, Bytes::from(data))),
            ..UnwindInfo::default()
        };
        info.hard = super::cfi::hard_ranges(&info).into();
        info
    }

    /// A framehop module for a map `[start, end)` of this file at load bias `base`.
    pub fn module(&self, name: &str, range: Range<u64>, base: u64) -> Module<Bytes> {
        Module::new(name.to_string(), range, base, Sections(self))
    }
}

/// [`UnwindInfo`] as framehop asks for it: each section's data once (shared bytes), and its
/// ranges.
struct Sections<'a>(&'a UnwindInfo);

impl ModuleSectionInfo<Bytes> for Sections<'_> {
    fn base_svma(&self) -> u64 {
        0
    }

    fn section_svma_range(&mut self, name: &[u8]) -> Option<Range<u64>> {
        match name {
            b".eh_frame" => self.0.eh_frame.as_ref().map(|s| s.0.clone()),
            b".eh_frame_hdr" => self.0.eh_frame_hdr.as_ref().map(|s| s.0.clone()),
            b".text" => self.0.text.clone(),
            b".got" => self.0.got.clone(),
            _ => None,
        }
    }

    fn section_data(&mut self, name: &[u8]) -> Option<Bytes> {
        match name {
            b".eh_frame" => self.0.eh_frame.as_ref().map(|s| s.1.clone()),
            b".eh_frame_hdr" => self.0.eh_frame_hdr.as_ref().map(|s| s.1.clone()),
            b".debug_frame" => self.0.debug_frame.clone(),
            _ => None,
        }
    }
}

/// Why a dso has no unwind information.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    /// A pseudo map (`//anon`, `[heap]`, JIT code…): nothing to read.
    Pseudo,
    /// The file could not be opened.
    NotFound,
    /// Not an ELF file this unwinder reads, or one without unwind sections.
    NoInfo,
    /// Only files of another build than the recording's were found: none is used
    /// (`dsos_build_id_mismatch`).
    OtherBuild,
}

/// Names that are not files (perf's `is_no_dso_memory`, anonymous and special maps).
fn is_pseudo(name: &[u8]) -> bool {
    name.is_empty()
        || name.starts_with(b"//")
        || name.starts_with(b"[") && name != b"[vdso]"
        || name.starts_with(b"/dev/")
        || name.starts_with(b"/SYSV")
        || name.starts_with(b"/memfd:")
        || name.starts_with(b"/anon_hugepage")
        || !name.starts_with(b"/") && name != b"[vdso]"
}

/// Loads the unwind information of the dso `name` mapped in process `pid`, with no source but
/// the files of this host ([`find`] with [`Sources::none`] and no build id).
pub fn load(name: &[u8], pid: u32) -> Result<UnwindInfo, Missing> {
    find(&Sources::none(), name, pid, None, None, None).info
}

/// A dso's unwind information as [`find`] found it.
#[derive(Debug)]
pub struct Found {
    /// The information, or why there is none.
    pub info: Result<UnwindInfo, Missing>,
    /// Where it was read from.
    pub from: Option<String>,
    /// The files of other builds that were passed.
    pub other_builds: Vec<OtherBuild>,
}

/// Loads the unwind information of dso `name` (build id `build_id` when the recording gives it)
/// mapped in process `pid` (whose root, held open since its map came, is `root`; `inode` its
/// MMAP2's device and inode), from the first
/// file the locator finds that has some, in its order ([`crate::symbols::sources::locate`]:
/// `--symbols` archives and directories and the build-id cache by build id, `--symfs`, the
/// process's root (else `/proc/PID/root`) for a process in a container, the path,
/// debuginfod's `/executable` then `/debuginfo`): never from a file of another build. The
/// `[vdso]` is this process's own image (perf's choice), or the one a source holds by its id.
pub fn find(
    sources: &Sources,
    name: &[u8],
    pid: u32,
    root: Option<&ProcessRoot>,
    inode: Option<Inode>,
    build_id: Option<&[u8]>,
) -> Found {
    let done = |info, from, other_builds| Found {
        info,
        from,
        other_builds,
    };
    if name == b"[vdso]" {
        let id = build_id.filter(|b| !b.is_empty());
        let from_source = id
            .and_then(|id| sources.special(id, "vdso"))
            .and_then(|c| c.read_all(1 << 24).ok());
        let Some(image) = from_source.or_else(crate::symbols::vdso_image) else {
            return done(Err(Missing::NotFound), None, Vec::new());
        };
        if let Some(id) = id {
            let got = perfpipe_stream::model::dso::elf_build_id(&image);
            if got.as_ref().map(|b| b.as_bytes()) != Some(id) {
                let other = OtherBuild {
                    at: "this host's [vdso]".into(),
                    id: got.map(|b| b.as_bytes().to_vec()),
                };
                return done(Err(Missing::OtherBuild), None, vec![other]);
            }
        }
        let info = parse(&image[..]).ok_or(Missing::NoInfo);
        return done(info, Some("[vdso]".into()), Vec::new());
    }
    if is_pseudo(name) {
        return done(Err(Missing::Pseudo), None, Vec::new());
    }
    use std::os::unix::ffi::OsStrExt;
    let path = Path::new(std::ffi::OsStr::from_bytes(name));
    let wanted = Wanted {
        path,
        build_id,
        pid,
        root,
        inode,
    };
    // Whether some file of the dso's build was read at all (else: not found).
    let mut read_one = false;
    let found = sources.find(
        &wanted,
        Role::Runtime,
        &mut |c: &crate::symbols::sources::Cand| {
            let w = c.window()?;
            read_one = true;
            parse(&ReadCache::new(w))
        },
    );
    match found.hit {
        Some((info, c)) => {
            let from = match (&c, root) {
                (crate::symbols::sources::Cand::Path(p), Some(r)) => r.shown(p),
                _ => c.describe(),
            };
            done(Ok(info), Some(from), found.other_builds)
        }
        None if read_one => done(Err(Missing::NoInfo), None, found.other_builds),
        None if !found.other_builds.is_empty() => {
            done(Err(Missing::OtherBuild), None, found.other_builds)
        }
        None => done(Err(Missing::NotFound), None, Vec::new()),
    }
}

/// The unwind information of an ELF image (`None`: not an ELF file, or no unwind sections).
pub fn parse<'d, R: ReadRef<'d>>(data: R) -> Option<UnwindInfo> {
    let info = match FileKind::parse(data).ok()? {
        FileKind::Elf64 => parse_elf::<object::elf::FileHeader64<Endianness>, R>(data)?,
        _ => return None,
    };
    info.has_unwind_info().then_some(info)
}

fn parse_elf<'d, E: FileHeader<Endian = Endianness>, R: ReadRef<'d>>(
    data: R,
) -> Option<UnwindInfo> {
    let f = ElfFile::<E, R>::parse(data).ok()?;
    if f.architecture() != object::Architecture::X86_64 {
        return None;
    }
    let endian = f.endian();
    let loads = f
        .elf_program_headers()
        .iter()
        .filter(|p| p.p_type(endian) == object::elf::PT_LOAD)
        .map(|p| {
            (
                p.p_vaddr(endian).into(),
                p.p_offset(endian).into(),
                p.p_filesz(endian).into(),
            )
        })
        .collect();
    let range = |name: &str| {
        f.section_by_name(name)
            .map(|s| s.address()..s.address().saturating_add(s.size()))
    };
    let bytes = |name: &str| -> Option<Bytes> {
        let s = f.section_by_name(name)?;
        if s.kind() == object::SectionKind::UninitializedData
            || s.size() > SECTION_MAX
            || !crate::symbols::elf::size_believable(&s)
        {
            return None;
        }
        let d = s.uncompressed_data().ok()?;
        (!d.is_empty() && d.len() as u64 <= SECTION_MAX).then(|| Bytes::from(&d[..]))
    };
    let with_range = |name: &str| Some((range(name)?, bytes(name)?));
    let eh_frame = with_range(".eh_frame");
    let eh_frame_hdr = with_range(".eh_frame_hdr").filter(|(r, d)| {
        let at = |s: &Option<Range<u64>>| s.as_ref().map_or(0, |r| r.start);
        eh_frame.as_ref().is_some_and(|(f, _)| {
            eh_frame_hdr_sound(d, r.start, f.start, at(&range(".text")), at(&range(".got")))
        })
    });
    let mut info = UnwindInfo {
        eh_frame,
        eh_frame_hdr,
        debug_frame: bytes(".debug_frame"),
        text: range(".text"),
        got: range(".got"),
        loads,
        hard: Arc::new([]),
    };
    info.hard = super::cfi::hard_ranges(&info).into();
    Some(info)
}

/// Whether every FDE the `.eh_frame_hdr` search table (at `hdr_addr`) points to lies at or after
/// the `.eh_frame` it names: gimli 0.33 (framehop's) subtracts the two unchecked when a lookup
/// lands on an entry, which panics with overflow checks (and wraps without) on a hostile file
/// (found by the `unwind_info` fuzz target, `regression::r40_eh_frame_hdr_pointing_before_eh_frame`).
/// A table that is not sound is dropped: framehop then indexes `.eh_frame` itself.
fn eh_frame_hdr_sound(hdr: &[u8], hdr_addr: u64, eh_frame: u64, text: u64, got: u64) -> bool {
    use gimli::{BaseAddresses, EhFrameHdr, LittleEndian};
    let bases = BaseAddresses::default()
        .set_eh_frame_hdr(hdr_addr)
        .set_eh_frame(eh_frame)
        .set_text(text)
        .set_got(got);
    let Ok(parsed) = EhFrameHdr::new(hdr, LittleEndian).parse(&bases, 8) else {
        return false;
    };
    let Ok(start) = parsed.eh_frame_ptr().direct() else {
        return false;
    };
    let Some(table) = parsed.table() else {
        return true;
    };
    let mut rows = table.iter(&bases);
    loop {
        match rows.next() {
            Ok(Some((_, fde))) if fde.direct().is_ok_and(|a| a >= start) => {}
            Ok(None) => return true,
            _ => return false,
        }
    }
}

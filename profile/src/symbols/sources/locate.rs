//! Where a dso's file is looked for, by (recorded path, build id): one order for everything that
//! reads one (the unwinder's tables, the symbol tables, `perfpipe archive`), apart from how an
//! ELF file is read (samply's `wholesym`/`samply-symbols` split: a new source is a new arm here,
//! the readers do not change). A reader ([`Reader`]) is offered each file of the dso's build in
//! order and says when it has what it needs.
//!
//! The order, for a user dso (`docs/another-machine.md`, "Where files are looked for"):
//!
//! 1. by build id: each `--symbols ARCHIVE|DIR` in the order given, then perf's build-id cache
//!    (`PATH/ID/elf`, then `PATH/ID/debug`);
//! 2. the file at its path: `--symfs DIR`: `DIR/PATH` (and nothing else by path, as perf's
//!    `--symfs`); else the file as the process sees it ([`process_views`]): `/proc/PID/root/PATH`
//!    first while the process lives in another mount namespace or under another root (a
//!    container, a chroot: perf's `nsinfo`), then `PATH` itself;
//! 3. perf's separate debug files ([`debug_files`]): the `.gnu_debuglink` of the dso's file
//!    (the first of 1 and 2 of its build, an archive's copy included) in the file's directory,
//!    its `.debug/` and `/usr/lib/debug/DIR/`; `/usr/lib/debug/PATH.debug`,
//!    `/usr/lib/debug/PATH`, `/usr/lib/debug/.build-id/xx/rest.debug`. The debug directories
//!    are under `--symfs DIR` when given; else, for a live process that sees other files than
//!    we do (a container, a chroot), its own first, through `/proc/PID/root`, then this host's
//!    ([`Sources::debug_dirs_of`]), as its file is read (perf enters the process's mount
//!    namespace for them). A reader of symbols ([`Role::Debug`]) is offered them
//!    before 2, as perf's `dso__load` tries them before the file itself; the unwinder
//!    ([`Role::Runtime`]) after it;
//! 4. debuginfod by build id: `/executable` for a runtime file (unwind tables, `.dynsym`),
//!    `/debuginfo` for a debug file (`.symtab`, DWARF, `.debug_frame`), the role's first, each
//!    only while the reader still wants it ([`Reader::wants`]).
//!
//! **What is checked**: the dso's build id is the recording's (an MMAP2 with one, a BUILD_ID
//! record), else the one an explicit `--symbols` source holds for the path (the archive was made
//! for this recording), else the build id of the file at its path (2, as perf's `dso__load` reads
//! it), else, that file being gone, the one build the build-id cache holds for the path. A file
//! whose build id differs, or that has none, is never offered: it is reported as another build
//! ([`Found::other_builds`]). Only when none of these gives an id (the file at the path has no
//! build id note) is every file that reads offered, the path's first, as perf trusts it.

use std::path::{Path, PathBuf};

use object::read::elf::{ElfFile32, ElfFile64};
use object::read::ReadCache;
use object::{FileKind, Object};
use perfpipe_stream::model::dso::{
    elf_build_id_in, in_process_root, process_views_in, sees_other_files, ProcessRoot,
};

use super::{hex, Cand, Sources};

/// A dso to find.
#[derive(Clone, Copy, Debug)]
pub struct Wanted<'a> {
    /// The path the recording names.
    pub path: &'a Path,
    /// Its build id, when the recording gives one.
    pub build_id: Option<&'a [u8]>,
    /// A process that maps it (`u32::MAX` or 0: none known).
    pub pid: u32,
    /// Its root, held open when it was seen alive ([`ProcessRoot`]): its files are read through
    /// it even after it has exited (else through `/proc/PID/root` while it lives).
    pub root: Option<&'a ProcessRoot>,
    /// The device and inode its MMAP2 gave: of the places it is looked for at by path, the one
    /// that is this file comes first (a process that chrooted after it mapped its first files
    /// sees other files at their paths now).
    pub inode: Option<Inode>,
}

/// A file's device and inode as an MMAP2 names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inode {
    /// The device's major number.
    pub maj: u32,
    /// Its minor number.
    pub min: u32,
    /// The inode.
    pub ino: u64,
}

impl Inode {
    /// Whether the file at `p` is this one.
    fn is(&self, p: &Path) -> bool {
        use std::os::unix::fs::MetadataExt as _;
        // glibc's `makedev`.
        let (maj, min) = (u64::from(self.maj), u64::from(self.min));
        let dev = (maj & 0xffff_f000) << 32
            | (maj & 0xfff) << 8
            | (min & 0xffff_ff00) << 12
            | (min & 0xff);
        std::fs::metadata(p).is_ok_and(|m| m.ino() == self.ino && m.dev() == dev)
    }
}

/// Which debuginfod file a reader asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The file as it runs (`/executable`): `.eh_frame`, `.dynsym`.
    Runtime,
    /// Its separate debug file (`/debuginfo`): `.symtab`, DWARF, `.debug_frame`.
    Debug,
}

impl Role {
    fn debuginfod_kind(self) -> &'static str {
        match self {
            Role::Runtime => "executable",
            Role::Debug => "debuginfo",
        }
    }

    fn other(self) -> Role {
        match self {
            Role::Runtime => Role::Debug,
            Role::Debug => Role::Runtime,
        }
    }
}

/// What reads the files [`Sources::find`] offers. A closure `FnMut(&Cand) -> Option<T>` is one
/// that takes the first file it can read.
pub trait Reader {
    /// What the reader makes of the files.
    type Out;
    /// Reads `c`, a file of the dso's build; `Some` ends the search.
    fn read(&mut self, c: &Cand) -> Option<Self::Out>;
    /// Whether a file of `role` is still worth a debuginfod request (default: yes).
    fn wants(&self, _role: Role) -> bool {
        true
    }
}

impl<T, F: FnMut(&Cand) -> Option<T>> Reader for F {
    type Out = T;
    fn read(&mut self, c: &Cand) -> Option<T> {
        self(c)
    }
}

/// A file that was found but is another build than the recording's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtherBuild {
    /// Where it is.
    pub at: String,
    /// Its build id (`None`: it has none).
    pub id: Option<Vec<u8>>,
}

/// What a search found: what the reader made of the files, and the files of other builds it
/// passed.
#[derive(Debug)]
pub struct Found<T> {
    /// What the reader made of the file that ended the search, and that file.
    pub hit: Option<(T, Cand)>,
    /// Files at the places looked in whose build id is not the dso's: never read.
    pub other_builds: Vec<OtherBuild>,
    /// The build id the files were checked against (`None`: none known, none checked).
    pub build_id: Option<Vec<u8>>,
    /// Files of the dso's build offered to the reader.
    pub offered: usize,
}

impl<T> Default for Found<T> {
    fn default() -> Self {
        Found {
            hit: None,
            other_builds: Vec::new(),
            build_id: None,
            offered: 0,
        }
    }
}

/// The build id of the ELF file `c` (`None`: not an ELF file, or one without a GNU build id).
pub(crate) fn build_id_of(c: &Cand) -> Option<Vec<u8>> {
    let cache = ReadCache::new(c.window()?);
    elf_build_id_in(&cache).map(|b| b.as_bytes().to_vec())
}

/// The `.gnu_debuglink` file name of the ELF file `c`.
fn debuglink_of(c: &Cand) -> Option<Vec<u8>> {
    let cache = ReadCache::new(c.window()?);
    let link = match FileKind::parse(&cache).ok()? {
        FileKind::Elf64 => ElfFile64::<object::Endianness, _>::parse(&cache)
            .ok()?
            .gnu_debuglink(),
        FileKind::Elf32 => ElfFile32::<object::Endianness, _>::parse(&cache)
            .ok()?
            .gnu_debuglink(),
        _ => return None,
    };
    link.ok().flatten().map(|(n, _)| n.to_vec())
}

/// perf's separate debug files of dso `name` whose file is in directory `dir` (`dso__load`'s
/// `DEBUGLINK`, `FEDORA_DEBUGINFO`, `UBUNTU_DEBUGINFO`, `BUILDID_DEBUGINFO`, in its order):
/// with a debuglink `LINK`, `DIR/LINK`, `DIR/.debug/LINK` and `D/NAMEDIR/LINK` for each debug
/// directory `D`; then `D/NAME.debug`, `D/NAME`, and with build id `ID`,
/// `D/.build-id/xx/rest.debug`.
pub fn debug_files(
    name: &Path,
    dir: &Path,
    debuglink: Option<&[u8]>,
    build_id: Option<&[u8]>,
    debug_dirs: &[PathBuf],
) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let ndir = name.parent().unwrap_or(Path::new("/"));
    let rel = |p: &Path| {
        p.strip_prefix("/")
            .map(Path::to_path_buf)
            .unwrap_or(p.into())
    };
    if let Some(link) = debuglink {
        let link = Path::new(std::str::from_utf8(link).unwrap_or(""));
        // A link is a file name: one with a directory in it could point anywhere.
        if link.components().count() == 1 && !link.as_os_str().is_empty() {
            out.push(dir.join(link));
            out.push(dir.join(".debug").join(link));
            for d in debug_dirs {
                out.push(d.join(rel(ndir)).join(link));
            }
        }
    }
    for d in debug_dirs {
        let mut p = d.join(rel(name)).into_os_string();
        p.push(".debug");
        out.push(p.into());
        out.push(d.join(rel(name)));
    }
    if let Some(bid) = build_id.filter(|b| b.len() > 1) {
        let h = hex(bid);
        for d in debug_dirs {
            out.push(
                d.join(".build-id")
                    .join(&h[..2])
                    .join(format!("{}.debug", &h[2..])),
            );
        }
    }
    out
}

impl Sources {
    /// The paths a dso's file is looked for at, in order: `--symfs DIR/PATH`, else where the
    /// process sees it ([`process_views_in`]: through its root when that was held open), the
    /// one that is the file the MMAP2 named ([`Inode`]) first when exactly one is.
    pub fn paths(&self, w: &Wanted<'_>) -> Vec<PathBuf> {
        let mut paths = match self.symfs() {
            Some(fs) => return vec![fs.join(w.path.strip_prefix("/").unwrap_or(w.path))],
            None => process_views_in(w.path, Some(w.pid), w.root),
        };
        if let Some(inode) = w.inode.filter(|_| paths.len() > 1) {
            let is: Vec<bool> = paths.iter().map(|p| inode.is(p)).collect();
            if is.iter().filter(|&&b| b).count() == 1 {
                let at = is.iter().position(|&b| b).unwrap_or(0);
                let p = paths.remove(at);
                paths.insert(0, p);
            }
        }
        paths
    }

    /// The first path of [`Sources::paths`] that is a file (else the first path): where a
    /// reader that opens one file by path opens it.
    pub fn path_of(&self, w: &Wanted<'_>) -> PathBuf {
        let paths = self.paths(w);
        paths
            .iter()
            .find(|p| p.is_file())
            .unwrap_or(&paths[0])
            .clone()
    }

    /// Where separate debug files of a dso of process `pid` are looked for: the debug
    /// directories (under `--symfs` when given), and before them, for a process that sees other
    /// files than we do (a container, a chroot), the same directories as it sees them: through
    /// `root` when it was held open, else through `/proc/PID/root` while it lives
    /// ([`sees_other_files`]).
    pub fn debug_dirs_of(&self, pid: u32, root: Option<&ProcessRoot>) -> Vec<PathBuf> {
        let inside = match root {
            _ if self.symfs().is_some() => None,
            Some(r) => Some(r.join(Path::new("/"))),
            None => sees_other_files(pid).then(|| in_process_root(Path::new("/"), pid)),
        };
        self.debug_dirs_under(inside.as_deref())
    }

    /// The debug directories, each under `root` first when given.
    fn debug_dirs_under(&self, root: Option<&Path>) -> Vec<PathBuf> {
        let inside = root.into_iter().flat_map(|r| {
            self.debug_dirs()
                .iter()
                .map(move |d| r.join(d.strip_prefix("/").unwrap_or(d)))
        });
        inside.chain(self.debug_dirs().iter().cloned()).collect()
    }

    /// The build id the dso is checked against before its files are looked at: the
    /// recording's, else the one an explicit `--symbols` source holds for its path (the archive
    /// was made for this recording).
    pub fn expected_id(&self, w: &Wanted<'_>) -> Option<Vec<u8>> {
        match w.build_id {
            Some(b) if !b.is_empty() => Some(b.to_vec()),
            _ => self.id_by_name(&w.path.to_string_lossy(), true),
        }
    }

    /// Looks for the files of `w` in the order of the module doc, offering each whose build id
    /// is the dso's (any readable file, when no id is known) to `reader`, until it takes one
    /// (`Some`). debuginfod is asked last, for `role`'s file then the other's, each only while
    /// `reader` wants it and the id is known.
    pub fn find<R: Reader>(&self, w: &Wanted<'_>, role: Role, reader: &mut R) -> Found<R::Out> {
        let by_path: Vec<Cand> = self
            .paths(w)
            .into_iter()
            .filter(|p| p.is_file())
            .map(Cand::Path)
            .collect();
        let want = self
            .expected_id(w)
            // perf reads the id from the file when the recording gives none (`dso__load`).
            .or_else(|| by_path.iter().find_map(build_id_of))
            // The file is gone: the one build the cache holds for its path.
            .or_else(|| {
                by_path
                    .is_empty()
                    .then(|| self.id_by_name(&w.path.to_string_lossy(), false))
                    .flatten()
            });
        let mut s = Search {
            want,
            found: Found::default(),
            seen: Vec::new(),
            root: w.root,
        };
        s.found.build_id = s.want.clone();
        let by_id = s
            .want
            .as_deref()
            .map(|id| self.by_build_id(id))
            .unwrap_or_default();
        for c in &by_id {
            if s.offer(c.clone(), reader) {
                return s.found;
            }
        }
        // The dso's own file (its debuglink names its debug file): the first of its build.
        let main = by_id
            .iter()
            .chain(&by_path)
            .find(|c| s.is_of_build(c))
            .cloned();
        let debug = |want: Option<&[u8]>| {
            let dir = match &main {
                Some(Cand::Path(p)) if by_path.contains(&Cand::Path(p.clone())) => {
                    p.parent().map(Path::to_path_buf)
                }
                _ => None,
            }
            .unwrap_or_else(|| {
                let p = self.path_of(w);
                p.parent().unwrap_or(Path::new("/")).to_path_buf()
            });
            let link = main.as_ref().and_then(debuglink_of);
            debug_files(
                w.path,
                &dir,
                link.as_deref(),
                want,
                &self.debug_dirs_of(w.pid, w.root),
            )
            .into_iter()
            .filter(|p| p.is_file())
            .map(Cand::Path)
            .collect::<Vec<_>>()
        };
        // The symbols try the debug files before the file itself (perf's order); the unwinder
        // the file first (its `.eh_frame`), the debug files only when it has none.
        let (first, debug_done) = match role {
            Role::Debug => (debug(s.want.as_deref()), true),
            Role::Runtime => (Vec::new(), false),
        };
        for c in first.into_iter().chain(by_path.iter().cloned()) {
            if s.offer(c, reader) {
                return s.found;
            }
        }
        if !debug_done {
            for c in debug(s.want.as_deref()) {
                if s.offer(c, reader) {
                    return s.found;
                }
            }
        }
        if let (Some(d), Some(id)) = (self.debuginfod(), s.want.clone()) {
            let check = |p: &Path| build_id_of(&Cand::Path(p.to_path_buf())).as_ref() == Some(&id);
            for r in [role, role.other()] {
                if !reader.wants(r) {
                    continue;
                }
                if let Ok(p) = d.fetch(&id, r.debuginfod_kind(), &check) {
                    if s.offer(Cand::Path(p), reader) {
                        return s.found;
                    }
                }
            }
        }
        s.found
    }
}

/// How to get the right files of dsos whose files here are missing or other builds: said once
/// a run ([`Sources::end`]), and the `hint` of each note about such a dso.
pub const HOW_TO_GET: &str = "run `perfpipe archive -i REC -o ARCHIVE.tar` where it was recorded (for a container: on the host, while it runs) and pass --symbols ARCHIVE.tar (it holds the kernel's kallsyms too; else --kallsyms with a copy of that host's /proc/kallsyms), give the container's or the other machine's root with --symfs ROOT, or set DEBUGINFOD_URLS to a debuginfod server that has their build ids (docs/another-machine.md)";

/// One search's state: the id files are checked against, what was found, the files seen.
struct Search<'r, T> {
    want: Option<Vec<u8>>,
    found: Found<T>,
    seen: Vec<Cand>,
    /// The process's root held open, to show its paths as `/proc/PID/root/PATH`.
    root: Option<&'r ProcessRoot>,
}

impl<T> Search<'_, T> {
    /// Whether `c` is a readable file of the dso's build (any readable file with no id known).
    fn is_of_build(&self, c: &Cand) -> bool {
        match &self.want {
            Some(w) => build_id_of(c).as_ref() == Some(w),
            None => c.window().is_some(),
        }
    }

    /// Offers `c` to the reader when it is of the dso's build (else notes it as another build);
    /// true when the reader took it.
    fn offer<R: Reader<Out = T>>(&mut self, c: Cand, reader: &mut R) -> bool {
        if self.seen.contains(&c) {
            return false;
        }
        self.seen.push(c.clone());
        if let Some(want) = &self.want {
            let got = build_id_of(&c);
            if got.as_ref() != Some(want) {
                // A path that is no file is no build; a file that is not ELF is skipped.
                if c.window().is_some() {
                    let at = match (&c, self.root) {
                        (Cand::Path(p), Some(r)) => r.shown(p),
                        _ => c.describe(),
                    };
                    let other = OtherBuild { at, id: got };
                    if !self.found.other_builds.contains(&other) {
                        self.found.other_builds.push(other);
                    }
                }
                return false;
            }
        }
        self.found.offered += 1;
        match reader.read(&c) {
            Some(t) => {
                self.found.hit = Some((t, c));
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols::sources::SourcesConfig;

    fn this_exe() -> PathBuf {
        std::env::current_exe().unwrap()
    }

    #[test]
    fn a_file_of_another_build_is_never_given_to_the_reader() {
        let s = Sources::none();
        let exe = this_exe();
        let w = Wanted {
            path: &exe,
            build_id: Some(&[0xab; 20]),
            pid: u32::MAX,
            root: None,
            inode: None,
        };
        let f = s.find(&w, Role::Runtime, &mut |_: &Cand| Some(()));
        assert!(f.hit.is_none());
        assert_eq!(f.other_builds.len(), 1, "{:?}", f.other_builds);
        assert_eq!(f.other_builds[0].at, exe.display().to_string());
    }

    #[test]
    fn the_right_build_and_an_unknown_one_are_read() {
        let s = Sources::none();
        let exe = this_exe();
        let id = build_id_of(&Cand::Path(exe.clone()));
        for build_id in [id.as_deref(), None] {
            let w = Wanted {
                path: &exe,
                build_id,
                pid: u32::MAX,
                root: None,
                inode: None,
            };
            let f = s.find(&w, Role::Runtime, &mut |c: &Cand| Some(c.describe()));
            assert_eq!(f.hit.map(|h| h.0), Some(exe.display().to_string()));
            assert!(f.other_builds.is_empty());
        }
    }

    #[test]
    fn symfs_replaces_the_path_and_a_live_process_of_this_root_reads_the_path_first() {
        let dir = tempfile::tempdir().unwrap();
        let s = Sources::open(&SourcesConfig {
            symfs: Some(dir.path().to_path_buf()),
            no_cache: true,
            ..SourcesConfig::default()
        })
        .unwrap();
        let me = std::process::id();
        let w = Wanted {
            path: Path::new("/usr/lib/libc.so.6"),
            build_id: None,
            pid: me,
            root: None,
            inode: None,
        };
        assert_eq!(s.paths(&w), vec![dir.path().join("usr/lib/libc.so.6")]);
        let none = Sources::none();
        let p = none.paths(&w);
        assert_eq!(p[0], Path::new("/usr/lib/libc.so.6"));
        assert_eq!(
            p[1],
            Path::new(&format!("/proc/{me}/root/usr/lib/libc.so.6"))
        );
    }

    #[test]
    fn a_process_that_sees_other_files_has_its_debug_directories_first() {
        let none = Sources::none();
        // This process sees our files: this host's directory only.
        assert_eq!(
            none.debug_dirs_of(std::process::id(), None),
            [PathBuf::from("/usr/lib/debug")]
        );
        assert_eq!(
            none.debug_dirs_under(Some(Path::new("/proc/42/root"))),
            [
                PathBuf::from("/proc/42/root/usr/lib/debug"),
                PathBuf::from("/usr/lib/debug")
            ]
        );
        // The build-id rule looks in the process's directory first.
        let id = [0xab, 0xcd, 0xef];
        let files = debug_files(
            Path::new("/usr/bin/x"),
            Path::new("/proc/42/root/usr/bin"),
            None,
            Some(&id),
            &none.debug_dirs_under(Some(Path::new("/proc/42/root"))),
        );
        let by_id: Vec<&PathBuf> = files
            .iter()
            .filter(|p| p.to_string_lossy().contains(".build-id"))
            .collect();
        assert_eq!(
            by_id,
            [
                &PathBuf::from("/proc/42/root/usr/lib/debug/.build-id/ab/cdef.debug"),
                &PathBuf::from("/usr/lib/debug/.build-id/ab/cdef.debug")
            ]
        );
    }
}

//! Where a dso's file is looked for, by (recorded path, build id): one order for everything that
//! reads one (the unwinder's tables, the symbol tables, `perfpipe archive`), apart from how an
//! ELF file is read (samply's `wholesym`/`samply-symbols` split: a new source is a new arm here,
//! the readers do not change).
//!
//! The order, for a user dso (`docs/another-machine.md`, "Where files are looked for"):
//!
//! 1. by build id: each `--symbols ARCHIVE|DIR` in the order given, then perf's build-id cache
//!    (`PATH/ID/elf`, then `PATH/ID/debug`);
//! 2. `--symfs DIR`: `DIR/PATH` (and nothing else by path, as perf's `--symfs`);
//! 3. else the file as the process sees it ([`process_views`]): `/proc/PID/root/PATH` first while
//!    the process lives in another mount namespace or under another root (a container, a
//!    chroot: perf's `nsinfo`), then `PATH` itself;
//! 4. debuginfod by build id: `/executable` for a runtime file (unwind tables, `.dynsym`),
//!    `/debuginfo` for a debug file (`.symtab`, DWARF, `.debug_frame`).
//!
//! **What is checked**: when the recording gives the dso's build id (an MMAP2 with one, a
//! BUILD_ID record, or the one id an explicit `--symbols` source holds for the path), a file
//! whose build id differs, or that has none, is never used: it is reported as another build
//! ([`Found::other_builds`]). When no id is known, the first file that reads is trusted, as perf
//! trusts it.

use std::path::{Path, PathBuf};

use object::read::ReadCache;
use perfpipe_stream::model::dso::{elf_build_id_in, process_views};

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
}

/// Which debuginfod file a reader asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The file as it runs (`/executable`): `.eh_frame`, `.dynsym`.
    Runtime,
    /// Its separate debug file (`/debuginfo`): `.symtab`, DWARF, `.debug_frame`.
    Debug,
}

/// A file that was found but is another build than the recording's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtherBuild {
    /// Where it is.
    pub at: String,
    /// Its build id (`None`: it has none).
    pub id: Option<Vec<u8>>,
}

/// What a search found: the first file the reader took, and the files of other builds it passed.
#[derive(Debug)]
pub struct Found<T> {
    /// What the reader made of the file, and the file.
    pub hit: Option<(T, Cand)>,
    /// Files at the places looked in whose build id is not the dso's: never read.
    pub other_builds: Vec<OtherBuild>,
}

impl<T> Default for Found<T> {
    fn default() -> Self {
        Found {
            hit: None,
            other_builds: Vec::new(),
        }
    }
}

/// The build id of the ELF file `c` (`None`: not an ELF file, or one without a GNU build id).
fn build_id_of(c: &Cand) -> Option<Vec<u8>> {
    let cache = ReadCache::new(c.window()?);
    elf_build_id_in(&cache).map(|b| b.as_bytes().to_vec())
}

impl Sources {
    /// The paths a dso's file is looked for at, in order: `--symfs DIR/PATH`, else where the
    /// process sees it ([`process_views`]).
    pub fn paths(&self, path: &Path, pid: u32) -> Vec<PathBuf> {
        match self.symfs() {
            Some(fs) => vec![fs.join(path.strip_prefix("/").unwrap_or(path))],
            None => process_views(path, Some(pid)),
        }
    }

    /// The first path of [`Sources::paths`] that is a file (else the first path): where a
    /// reader that opens one file by path opens it.
    pub fn path_of(&self, path: &Path, pid: u32) -> PathBuf {
        let paths = self.paths(path, pid);
        paths
            .iter()
            .find(|p| p.is_file())
            .unwrap_or(&paths[0])
            .clone()
    }

    /// The build id the dso is checked against: the recording's, else the one an explicit
    /// `--symbols` source holds for its path (the archive was made for this recording).
    pub fn expected_id(&self, w: &Wanted<'_>) -> Option<Vec<u8>> {
        match w.build_id {
            Some(b) if !b.is_empty() => Some(b.to_vec()),
            _ => self.id_by_name(&w.path.to_string_lossy(), true),
        }
    }

    /// Looks for the file of `w` in the order of the module doc, giving each file whose build id
    /// is the dso's (any readable file, when no id is known) to `read`, until `read` takes one
    /// (`Some`). debuginfod is asked, for `role`'s file then the other's, only when nothing local
    /// was taken and the id is known.
    pub fn find<T>(
        &self,
        w: &Wanted<'_>,
        role: Role,
        mut read: impl FnMut(&Cand) -> Option<T>,
    ) -> Found<T> {
        let want = self.expected_id(w);
        let mut found = Found::default();
        let mut seen: Vec<Cand> = Vec::new();
        let mut consider = |c: Cand, found: &mut Found<T>| -> bool {
            if seen.contains(&c) {
                return false;
            }
            seen.push(c.clone());
            if let Some(want) = &want {
                let got = build_id_of(&c);
                if got.as_ref() != Some(want) {
                    // A path that is no file is no build; a file that is not ELF is skipped.
                    if c.window().is_some() {
                        let other = OtherBuild {
                            at: c.describe(),
                            id: got,
                        };
                        if !found.other_builds.contains(&other) {
                            found.other_builds.push(other);
                        }
                    }
                    return false;
                }
            }
            match read(&c) {
                Some(t) => {
                    found.hit = Some((t, c));
                    true
                }
                None => false,
            }
        };
        let by_id = want
            .as_deref()
            .map(|id| self.by_build_id(id))
            .unwrap_or_default();
        let by_path = self
            .paths(w.path, w.pid)
            .into_iter()
            .filter(|p| p.is_file())
            .map(Cand::Path);
        for c in by_id.into_iter().chain(by_path) {
            if consider(c, &mut found) {
                return found;
            }
        }
        if let (Some(d), Some(id)) = (self.debuginfod(), want.as_deref()) {
            let check =
                |p: &Path| build_id_of(&Cand::Path(p.to_path_buf())).is_some_and(|b| b == id);
            let kinds = match role {
                Role::Runtime => ["executable", "debuginfo"],
                Role::Debug => ["debuginfo", "executable"],
            };
            for kind in kinds {
                if let Ok(p) = d.fetch(id, kind, &check) {
                    if consider(Cand::Path(p), &mut found) {
                        return found;
                    }
                }
            }
        }
        found
    }

    /// How to get the right file of a dso whose file here is another build, for the end lines.
    pub fn how_to_get(&self, id: &[u8]) -> String {
        format!(
            "give the recording's files: --symfs ROOT (the container's or the other machine's root), \
             --symbols ARCHIVE (`perfpipe archive` run where it was recorded, while the process runs), \
             or a debuginfod server that has build id {}",
            hex(id)
        )
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
        };
        let f = s.find(&w, Role::Runtime, |_| Some(()));
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
            };
            let f = s.find(&w, Role::Runtime, |c| Some(c.describe()));
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
        assert_eq!(
            s.paths(Path::new("/usr/lib/libc.so.6"), std::process::id()),
            vec![dir.path().join("usr/lib/libc.so.6")]
        );
        let none = Sources::none();
        let me = std::process::id();
        let p = none.paths(Path::new("/usr/lib/libc.so.6"), me);
        assert_eq!(p[0], Path::new("/usr/lib/libc.so.6"));
        assert_eq!(
            p[1],
            Path::new(&format!("/proc/{me}/root/usr/lib/libc.so.6"))
        );
    }
}

//! The sources of a dso's files ([`Sources`]): perf's build-id cache, archives (`perfpipe
//! archive`'s tars, `perf archive`'s `.tar.bz2`) and directories (`--symbols`), a `--symfs`
//! tree, perf's debug directories, and debuginfod ([`debuginfod`]). The one order
//! in which everything that reads a dso's file looks in them, and what is checked, is
//! [`locate`]'s ([`Sources::find`]); this module holds the stores and reads archives.
//!
//! Kernel symbols: `--kallsyms FILE` (`symbolize`'s own), else `[kernel.kallsyms]/ID/kallsyms` by
//! the stream's kernel build id, else this host's `/proc/kallsyms` for a recording of this host,
//! else the one kallsyms an explicit source holds.
//!
//! **One per pipeline**: the stages that read dsos' files (`unwind`, `symbolize` and the profile
//! outputs and `perfpipe archive` through it) take their sources from the pipeline's
//! [`Shared`](perfpipe_core::spec::Shared) store ([`SourcesConfig::shared`]): opened once per
//! configuration, so an archive is listed once, a debuginfod file fetched once, and the sources'
//! counters ([`Sources::counter_rows`]) and the run's end lines ([`Sources::end`]) are said once,
//! by one stage.
//!
//! Archives are read in place: a tar's members are windows of the file (positioned reads, never
//! unpacked); a `.tar.bz2` is decompressed once, on the worker pool, into an unlinked temporary
//! file. Member names and links are untrusted: a name with `..` or a leading `/`, or a link that
//! leads out of the archive, is skipped and counted (`archive_entries_rejected`); nothing is ever
//! written from an archive. A damaged archive keeps the members listed before the damage
//! (`archives_truncated`); a member that claims more bytes than the archive holds is never read
//! (`archive_members_truncated`), and [`Cand::read_all`] never returns a short read.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, OnceLock};

use perfpipe_core::Counter;
use perfpipe_stream::model::dso::ProcessRoot;

pub mod debuginfod;
pub mod locate;
#[cfg(test)]
mod tests;

use debuginfod::{Debuginfod, DebuginfodConfig};

/// Most bytes a `.tar.bz2` may decompress to (a bzip2 bomb stops there).
pub const ARCHIVE_MAX_BYTES: u64 = 16 << 30;
/// Most members an archive may list.
const ARCHIVE_MAX_MEMBERS: usize = 1 << 20;
/// Most links followed to resolve one name.
const MAX_HOPS: usize = 32;

/// Where symbols are looked for besides the recorded paths. Plain data; [`Sources::open`] does
/// the I/O.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourcesConfig {
    /// `--symfs DIR`: every recorded path is read under DIR, and the build-id cache is DIR/.debug.
    pub symfs: Option<PathBuf>,
    /// `--symbols ARCHIVE|DIR`, in order.
    pub symbols: Vec<PathBuf>,
    /// The build-id cache; `None`: `$PERF_BUILDID_DIR`, else `$HOME/.debug`.
    pub buildid_dir: Option<PathBuf>,
    /// Read no build-id cache.
    pub no_cache: bool,
    /// debuginfod; `None`: none.
    pub debuginfod: Option<DebuginfodConfig>,
    /// Where separate debug files are looked for ([`locate::debug_files`]); `None`:
    /// `/usr/lib/debug`, as perf. Under `--symfs DIR` when given.
    pub debug_dirs: Option<Vec<PathBuf>>,
}

/// The `symfs` option of every stage that reads dsos' files ([`SYMFS_FLAG`] sets it).
pub const SYMFS_OPTION: perfpipe_core::spec::StageOption = perfpipe_core::spec::StageOption {
    key: "symfs",
    kind: perfpipe_core::spec::Kind::Text("DIR"),
    help: "the root every dso path is looked up under",
};

/// The `debuginfod` option of every stage that reads dsos' files (`symbolize`, `unwind`).
pub const DEBUGINFOD_OPTION: perfpipe_core::spec::StageOption = perfpipe_core::spec::StageOption {
    key: "debuginfod",
    kind: perfpipe_core::spec::Kind::Text("URLS|no"),
    help: "debuginfod servers (space-separated) instead of DEBUGINFOD_URLS; no: none",
};

/// `--symfs DIR`, an option of every stage that reads dsos' files (`symbolize`, `unwind`): one
/// definition, declared alike by each.
pub const SYMFS_FLAG: perfpipe_core::spec::Flag = perfpipe_core::spec::Flag::option(
    "symfs",
    "symfs",
    "look every dso up under DIR, and the build-id cache in DIR/.debug (perf report --symfs); for symbols and unwind tables",
);

/// `--symbols ARCHIVE|DIR`, shared as [`SYMFS_FLAG`] is.
pub const SYMBOLS_FLAG: perfpipe_core::spec::Flag = perfpipe_core::spec::Flag::option(
    "symbols",
    "symbols",
    "also look dsos' files up in this archive (perfpipe archive's tar, perf archive's .tar.bz2) or build-id-cache directory, by build id, for symbols and unwind tables; repeatable (docs/another-machine.md)",
);

impl SourcesConfig {
    /// These sources with the debuginfod servers of `debuginfod` (`Some("no")`: none; `None`:
    /// the environment's, as perf and elfutils read it), opened.
    ///
    /// # Errors
    /// As [`Sources::open`]; servers named in a build without the `debuginfod` feature.
    pub fn open_with(&self, debuginfod: Option<&str>) -> Result<Sources, String> {
        debuginfod::check_option(debuginfod)?;
        let mut c = self.clone();
        c.debuginfod = match debuginfod {
            Some("no") => None,
            Some(urls) => DebuginfodConfig::with_urls(urls),
            None => DebuginfodConfig::from_env(),
        };
        Sources::open(&c)
    }

    /// [`SourcesConfig::open_with`], once per pipeline: the sources an earlier stage of the
    /// pipeline `ctx` builds opened for an equal configuration, else these, opened and kept in
    /// its [`Shared`](perfpipe_core::spec::Shared) store for the later ones.
    ///
    /// # Errors
    /// As [`SourcesConfig::open_with`].
    pub fn shared(
        &self,
        ctx: &perfpipe_core::spec::BuildCtx,
        debuginfod: Option<&str>,
    ) -> Result<Arc<Sources>, String> {
        let key = (self.clone(), debuginfod.map(str::to_string));
        ctx.shared
            .get_or_try_make(key, || self.open_with(debuginfod))
    }

    /// The configuration the environment gives, as perf and elfutils read it:
    /// `PERF_BUILDID_DIR`, `DEBUGINFOD_URLS` and the client's other variables.
    pub fn from_env() -> SourcesConfig {
        SourcesConfig {
            debuginfod: DebuginfodConfig::from_env(),
            ..SourcesConfig::default()
        }
    }
}

/// One source read by build id: a directory in perf's cache layout or an archive.
#[derive(Debug)]
enum Store {
    Dir(PathBuf),
    Archive(Arc<Archive>),
}

/// Counters of the sources, for `--stats`.
#[derive(Clone, Debug, Default)]
pub struct SourceCounters {
    /// Files found in the build-id cache, the archives and `--symbols` directories.
    pub found_by_build_id: Counter,
    /// Archive members skipped: a name that escapes the archive, a link out of it.
    pub archive_entries_rejected: Counter,
    /// Archives that could not be read at all (not a tar, too large).
    pub archives_unreadable: Counter,
    /// Archives read only in part: a bad tar header, a broken bzip2 stream or a member past the
    /// end stopped the listing; the members listed before it are used.
    pub archives_truncated: Counter,
    /// Archive members that claim more bytes than the archive holds: never used.
    pub archive_members_truncated: Counter,
    /// Archives listed (each once a run, however many stages read it).
    pub archives_indexed: Counter,
}

/// The end of the stages that read files through one [`Sources`]: the last to end says the
/// run's lines.
#[derive(Debug, Default)]
struct Ending {
    /// Stages that took the sources and have not ended.
    users: usize,
    /// Stages that took them so far (the first reports their counters).
    joined: usize,
    /// A stage named a dso whose right file was not found: the advice is due.
    advise: bool,
}

/// The sources, opened: where a dso's files are looked for ([`locate`]).
#[derive(Debug)]
pub struct Sources {
    /// `--symbols`, then the cache.
    stores: Vec<(Store, bool)>,
    symfs: Option<PathBuf>,
    /// Where separate debug files are looked for (under `--symfs` when given).
    debug_dirs: Vec<PathBuf>,
    debuginfod: Option<Arc<Debuginfod>>,
    counters: SourceCounters,
    /// What each source was, for the line on what is missing.
    names: Vec<String>,
    /// Which stages use them, for the counters and the run's end lines.
    ending: std::sync::Mutex<Ending>,
    /// The roots of processes that see other files than we do, held open, one per view
    /// ([`ProcessRoot::id`]): a run keeps as many open files as there are containers.
    roots: std::sync::Mutex<HashMap<(u64, u64, u64), Arc<ProcessRoot>>>,
}

/// A file a source offers: a path, or a member of an archive.
#[derive(Clone, Debug)]
pub enum Cand {
    /// A file.
    Path(PathBuf),
    /// `len` bytes at `offset` of an archive's tar.
    Member {
        /// The archive's tar (the decompressed copy of a `.tar.bz2`).
        file: Arc<File>,
        /// The archive, for messages.
        archive: Arc<Path>,
        /// Where the member's bytes start in the tar.
        offset: u64,
        /// Its size.
        len: u64,
        /// Its name in the archive.
        name: String,
    },
}

impl PartialEq for Cand {
    fn eq(&self, o: &Cand) -> bool {
        match (self, o) {
            (Cand::Path(a), Cand::Path(b)) => a == b,
            (
                Cand::Member {
                    file: a, offset: x, ..
                },
                Cand::Member {
                    file: b, offset: y, ..
                },
            ) => Arc::ptr_eq(a, b) && x == y,
            _ => false,
        }
    }
}

impl Cand {
    /// A readable window of the candidate's bytes.
    pub(crate) fn window(&self) -> Option<Window> {
        match self {
            Cand::Path(p) => {
                let f = File::open(p).ok()?;
                let m = f.metadata().ok()?;
                if !m.is_file() {
                    return None;
                }
                Some(Window::new(Arc::new(f), 0, m.len()))
            }
            Cand::Member {
                file, offset, len, ..
            } => Some(Window::new(file.clone(), *offset, *len)),
        }
    }

    /// All its bytes.
    ///
    /// # Errors
    /// It cannot be opened, it has more than `max` bytes, or fewer than it claims (an archive
    /// member that runs past the archive's end, a file that shrank): never a short copy.
    pub fn read_all(&self, max: u64) -> std::io::Result<Vec<u8>> {
        let err = |m: String| std::io::Error::other(format!("{}: {m}", self.describe()));
        let mut w = self
            .window()
            .ok_or_else(|| err("cannot be opened as a file".into()))?;
        if w.len > max {
            return Err(err(format!("{} bytes, more than {max}", w.len)));
        }
        let mut out = Vec::with_capacity(w.len.min(1 << 26) as usize);
        w.read_to_end(&mut out)?;
        if out.len() as u64 != w.len {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: {} bytes claimed, {} read (truncated)",
                    self.describe(),
                    w.len,
                    out.len()
                ),
            ));
        }
        Ok(out)
    }

    /// Where it is, for messages.
    pub fn describe(&self) -> String {
        match self {
            Cand::Path(p) => p.display().to_string(),
            Cand::Member { archive, name, .. } => format!("{}:{name}", archive.display()),
        }
    }
}

/// `len` bytes of a file from `base`, read with positioned reads (`Read + Seek` for `object`'s
/// `ReadCache`).
#[derive(Debug)]
pub(crate) struct Window {
    file: Arc<File>,
    base: u64,
    len: u64,
    pos: u64,
}

impl Window {
    /// Its file and where the window starts in it (for positioned reads that outlive it).
    pub(crate) fn handle(&self) -> (Arc<File>, u64) {
        (self.file.clone(), self.base)
    }

    fn new(file: Arc<File>, base: u64, len: u64) -> Window {
        Window {
            file,
            base,
            len,
            pos: 0,
        }
    }
}

impl Read for Window {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.len.saturating_sub(self.pos);
        let n = (buf.len() as u64).min(left) as usize;
        if n == 0 {
            return Ok(0);
        }
        let got = self.file.read_at(&mut buf[..n], self.base + self.pos)?;
        self.pos += got as u64;
        Ok(got)
    }
}

impl Seek for Window {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let p = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        match p {
            Some(p) => {
                self.pos = p;
                Ok(p)
            }
            None => Err(std::io::Error::other("seek before the start")),
        }
    }
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// perf's build-id cache directory: `dir`, else `$PERF_BUILDID_DIR`, else `$HOME/.debug`.
pub fn buildid_dir(dir: Option<&Path>) -> Option<PathBuf> {
    dir.map(Path::to_path_buf)
        .or_else(|| {
            std::env::var_os("PERF_BUILDID_DIR")
                .filter(|d| !d.is_empty())
                .map(PathBuf::from)
        })
        .or_else(|| home().map(|h| h.join(".debug")))
}

/// Lower-case hex, as perf writes build ids.
pub fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 || !(32..=40).contains(&s.len()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// perf's cache directory of a dso name: `[kernel.kallsyms]` and `[vdso]` as they are, a path
/// without its leading `/`.
pub fn cache_dir_of(name: &str) -> String {
    name.trim_start_matches('/').to_string()
}

/// perf's directory of separate debug files.
pub const DEBUG_DIR: &str = "/usr/lib/debug";

impl Default for Sources {
    /// No source besides the recorded paths and `/usr/lib/debug`.
    fn default() -> Sources {
        Sources {
            stores: Vec::new(),
            symfs: None,
            debug_dirs: vec![PathBuf::from(DEBUG_DIR)],
            debuginfod: None,
            counters: SourceCounters::default(),
            names: Vec::new(),
            ending: std::sync::Mutex::default(),
            roots: std::sync::Mutex::default(),
        }
    }
}

impl Sources {
    /// No source besides the recorded paths and `/usr/lib/debug`.
    pub fn none() -> Sources {
        Sources::default()
    }

    /// Opens the sources `c` names: each `--symbols` must be a directory or a readable archive.
    ///
    /// # Errors
    /// A message naming a `--symbols` that is neither.
    pub fn open(c: &SourcesConfig) -> Result<Sources, String> {
        let symfs = c.symfs.clone().filter(|d| d != Path::new("/"));
        let debug_dirs = c
            .debug_dirs
            .clone()
            .unwrap_or_else(|| vec![PathBuf::from(DEBUG_DIR)])
            .into_iter()
            .map(|d| match &symfs {
                Some(fs) => fs.join(d.strip_prefix("/").unwrap_or(&d)),
                None => d,
            })
            .collect();
        let mut s = Sources {
            symfs,
            debug_dirs,
            ..Sources::default()
        };
        for p in &c.symbols {
            let m = std::fs::metadata(p).map_err(|e| format!("--symbols {}: {e}", p.display()))?;
            if m.is_dir() {
                s.stores.push((Store::Dir(p.clone()), true));
            } else {
                let a = Archive::new(p, s.counters.clone());
                s.stores.push((Store::Archive(Arc::new(a)), true));
            }
            s.names.push(format!("--symbols {}", p.display()));
        }
        if !c.no_cache {
            let dir = match &s.symfs {
                Some(fs) if c.buildid_dir.is_none() => Some(fs.join(".debug")),
                _ => buildid_dir(c.buildid_dir.as_deref()),
            };
            if let Some(d) = dir {
                s.names.push(format!("build-id cache {}", d.display()));
                s.stores.push((Store::Dir(d), false));
            }
        }
        if let Some(d) = &c.debuginfod {
            let client = Debuginfod::new(d.clone());
            s.names.push(format!("debuginfod {}", d.urls.join(" ")));
            s.debuginfod = Some(Arc::new(client));
        }
        Ok(s)
    }

    /// The counters.
    pub fn counters(&self) -> &SourceCounters {
        &self.counters
    }

    /// The debuginfod client, if any.
    pub fn debuginfod(&self) -> Option<&Arc<Debuginfod>> {
        self.debuginfod.as_ref()
    }

    /// `--symfs DIR`.
    pub fn symfs(&self) -> Option<&Path> {
        self.symfs.as_deref()
    }

    /// The root of process `pid` while it lives and sees other files than we do (the one held
    /// open for its view: [`ProcessRoot`]), for the readers of its files that may come after it
    /// has exited; `None` otherwise, or under `--symfs` (which replaces every view). Asked when
    /// a dso's map comes in, the earliest a stage can.
    pub fn root_of(&self, pid: u32) -> Option<Arc<ProcessRoot>> {
        if self.symfs.is_some() {
            return None;
        }
        let root = ProcessRoot::open(pid)?;
        let mut roots = self.roots.lock().unwrap_or_else(|e| e.into_inner());
        Some(
            roots
                .entry(root.id())
                .or_insert_with(|| Arc::new(root))
                .clone(),
        )
    }

    /// Where separate debug files are looked for (under `--symfs` when given).
    pub fn debug_dirs(&self) -> &[PathBuf] {
        &self.debug_dirs
    }

    /// What was tried, in order, for the line on what is missing.
    pub fn tried(&self) -> Vec<String> {
        self.names.clone()
    }

    /// A stage takes these sources (at its build): true for the first, which reports their
    /// counters ([`Sources::counter_rows`]); each calls [`Sources::end`] once at its end.
    pub fn join(&self) -> bool {
        let mut e = self.ending.lock().unwrap_or_else(|e| e.into_inner());
        e.users += 1;
        e.joined += 1;
        e.joined == 1
    }

    /// A stage that [joined](Sources::join) ends, `advise` when it named a dso whose right file
    /// was not found. The last to end says the run's lines, prefixed `perfpipe: STAGE:`: how to
    /// get the right files (once, however many stages named such dsos) and one line per
    /// debuginfod server that failed requests (with every stage's requests counted).
    pub fn end(&self, stage: &str, advise: bool) {
        let mut e = self.ending.lock().unwrap_or_else(|e| e.into_inner());
        e.advise |= advise;
        e.users = e.users.saturating_sub(1);
        if e.users > 0 {
            return;
        }
        if std::mem::take(&mut e.advise) {
            eprintln!(
                "perfpipe: {stage}: to get the right files, {}",
                locate::HOW_TO_GET
            );
        }
        for line in self.debuginfod().map(|d| d.failures()).unwrap_or_default() {
            eprintln!("perfpipe: {stage}: {line}");
        }
    }

    /// The sources' counters, for the `--stats` row of the stage that reports them: the
    /// archives' and build-id stores' when there is more than the recorded paths to look in,
    /// debuginfod's when it is asked.
    pub fn counter_rows(&self) -> Vec<(&'static str, Counter)> {
        let mut v = Vec::new();
        if !self.names.is_empty() {
            let s = &self.counters;
            v.extend([
                ("files_found_by_build_id", s.found_by_build_id.clone()),
                ("archives_indexed", s.archives_indexed.clone()),
                (
                    "archive_entries_rejected",
                    s.archive_entries_rejected.clone(),
                ),
                ("archives_unreadable", s.archives_unreadable.clone()),
                ("archives_truncated", s.archives_truncated.clone()),
                (
                    "archive_members_truncated",
                    s.archive_members_truncated.clone(),
                ),
            ]);
        }
        if let Some(d) = self.debuginfod() {
            let d = d.counters();
            v.extend([
                ("debuginfod_requests", d.requests.clone()),
                ("debuginfod_downloaded", d.downloaded.clone()),
                ("debuginfod_bytes", d.bytes.clone()),
                ("debuginfod_cache_hits", d.cache_hits.clone()),
                ("debuginfod_misses", d.misses.clone()),
                ("debuginfod_rejected", d.rejected.clone()),
                ("debuginfod_errors", d.errors.clone()),
                ("debuginfod_tls_errors", d.tls_errors.clone()),
                ("debuginfod_urls_unsupported", d.urls_unsupported.clone()),
            ]);
        }
        v
    }

    /// Starts reading the archives' indexes on `pool` (a `.tar.bz2` decompresses there).
    pub fn warm(&self, pool: Option<&rayon::ThreadPool>) {
        for (s, _) in &self.stores {
            if let Store::Archive(a) = s {
                let a = a.clone();
                match pool {
                    Some(p) => p.spawn(move || {
                        a.index();
                    }),
                    None => {
                        a.index();
                    }
                }
            }
        }
    }

    /// The files the stores hold for build id `id` of a dso, in order: per store the `elf`,
    /// then the `debug` file (or an old-style cache's file itself).
    pub fn by_build_id(&self, id: &[u8]) -> Vec<Cand> {
        let mut out = Vec::new();
        for (s, _) in &self.stores {
            for file in ["elf", "debug"] {
                if let Some(c) = s.member(id, file) {
                    self.counters.found_by_build_id.add(1);
                    out.push(c);
                }
            }
        }
        out
    }

    /// `[kernel.kallsyms]/ID/kallsyms` (or `[vdso]/ID/vdso`) of the first store that has it.
    pub fn special(&self, id: &[u8], file: &str) -> Option<Cand> {
        self.stores.iter().find_map(|(s, _)| s.member(id, file))
    }

    /// The build id the explicit sources (`--symbols`; with `explicit_only` false, the cache
    /// too) hold for dso `name`, when exactly one.
    pub fn id_by_name(&self, name: &str, explicit_only: bool) -> Option<Vec<u8>> {
        let mut found: Vec<Vec<u8>> = Vec::new();
        for (s, explicit) in &self.stores {
            if explicit_only && !explicit {
                continue;
            }
            for id in s.ids_of(name) {
                if !found.contains(&id) {
                    found.push(id);
                }
            }
        }
        (found.len() == 1).then(|| found.remove(0))
    }
}

impl Store {
    /// `PATH/ID/file` through the `.build-id/xx/rest` link (or its old-style file for `elf`).
    fn member(&self, id: &[u8], file: &str) -> Option<Cand> {
        if id.len() < 2 {
            return None;
        }
        let h = hex(id);
        let link = format!(".build-id/{}/{}", &h[..2], &h[2..]);
        match self {
            Store::Dir(d) => {
                let l = d.join(&link);
                let m = std::fs::metadata(&l).ok()?;
                if m.is_file() {
                    return (file == "elf").then_some(Cand::Path(l));
                }
                let p = l.join(file);
                p.is_file().then_some(Cand::Path(p))
            }
            Store::Archive(a) => a.member(&link, file),
        }
    }

    /// The build ids the store has under dso `name` (`PATH/ID/` directories).
    fn ids_of(&self, name: &str) -> Vec<Vec<u8>> {
        let dir = cache_dir_of(name);
        match self {
            Store::Dir(d) => {
                let Ok(rd) = std::fs::read_dir(d.join(&dir)) else {
                    return Vec::new();
                };
                rd.flatten()
                    .filter_map(|e| unhex(e.file_name().to_str()?))
                    .collect()
            }
            Store::Archive(a) => a.ids_of(&dir),
        }
    }
}

/// What an archive member is.
#[derive(Clone, Debug)]
enum Node {
    File { offset: u64, len: u64 },
    Link(String),
    Dir,
}

/// An archive's members by normalized name.
#[derive(Debug, Default)]
struct Index {
    nodes: BTreeMap<String, Node>,
    /// The file read (the tar itself, or the decompressed copy of a `.tar.bz2`).
    file: Option<Arc<File>>,
}

/// A tar (or `.tar.bz2`) in perf's build-id-cache layout, read in place.
#[derive(Debug)]
pub struct Archive {
    path: PathBuf,
    index: OnceLock<Index>,
    counters: SourceCounters,
}

impl Archive {
    fn new(path: &Path, counters: SourceCounters) -> Archive {
        Archive {
            path: path.to_path_buf(),
            index: OnceLock::new(),
            counters,
        }
    }

    fn index(&self) -> &Index {
        self.index.get_or_init(|| {
            self.counters.archives_indexed.add(1);
            match read_index(&self.path, &self.counters) {
                Ok(i) => i,
                Err(_) => {
                    self.counters.archives_unreadable.add(1);
                    Index::default()
                }
            }
        })
    }

    /// Follows links from `name` inside the archive; `None` when it leads out or nowhere.
    fn resolve(&self, name: &str) -> Option<(String, Node)> {
        let idx = self.index();
        let mut cur = name.to_string();
        for _ in 0..MAX_HOPS {
            // Resolve links in the directories above, then the name itself.
            let mut built = String::new();
            let mut parts = cur.split('/').filter(|p| !p.is_empty()).peekable();
            let mut restarted = false;
            while let Some(part) = parts.next() {
                let next = if built.is_empty() {
                    part.to_string()
                } else {
                    format!("{built}/{part}")
                };
                match idx.nodes.get(&next) {
                    Some(Node::Link(t)) => {
                        let base = built.clone();
                        let rest: Vec<&str> = parts.collect();
                        let Some(target) = join_inside(&base, t) else {
                            self.counters.archive_entries_rejected.add(1);
                            return None;
                        };
                        cur = if rest.is_empty() {
                            target
                        } else {
                            format!("{target}/{}", rest.join("/"))
                        };
                        restarted = true;
                        break;
                    }
                    Some(_) => built = next,
                    None if parts.peek().is_none() && !is_dir_prefix(&idx.nodes, &next) => {
                        return None
                    }
                    // A directory with no entry of its own (tar lists files only).
                    None => built = next,
                }
            }
            if !restarted {
                let node = match idx.nodes.get(&built) {
                    Some(n) => n.clone(),
                    // A directory tar lists no entry for: some member lies under it.
                    None if is_dir_prefix(&idx.nodes, &built) => Node::Dir,
                    None => return None,
                };
                return Some((built, node));
            }
        }
        None
    }

    fn member(&self, link: &str, file: &str) -> Option<Cand> {
        let (name, offset, len) = self.member_at(link, file)?;
        Some(Cand::Member {
            file: self.index().file.clone()?,
            archive: Arc::from(self.path.as_path()),
            offset,
            len,
            name,
        })
    }

    /// `link/file` (or `link` itself for `elf`, an old-style cache's file): its name, and where
    /// its bytes are in the tar.
    pub(crate) fn member_at(&self, link: &str, file: &str) -> Option<(String, u64, u64)> {
        let (name, node) = self.resolve(link)?;
        let (name, node) = match node {
            Node::File { .. } if file == "elf" => (name, node),
            Node::File { .. } => return None,
            _ => self.resolve(&format!("{name}/{file}"))?,
        };
        match node {
            Node::File { offset, len } => Some((name, offset, len)),
            _ => None,
        }
    }

    /// The members' names, in order.
    #[cfg(any(test, all(feature = "unwind", feature = "debuginfod")))]
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.index().nodes.keys().map(String::as_str)
    }

    /// The archive `data` holds (a tar, or a `.tar.bz2` decompressed up to `max` bytes), listed
    /// as [`Archive`] lists a file's (for the fuzz target `archive`), and the tar's bytes. Its
    /// members have no file behind them: [`Archive::member_at`] finds them, nothing opens them.
    ///
    /// # Errors
    /// As reading a file's index: past `max`, no tar header.
    #[cfg(any(test, all(feature = "unwind", feature = "debuginfod")))]
    pub(crate) fn of_bytes(
        data: &[u8],
        max: u64,
        counters: SourceCounters,
    ) -> std::io::Result<(Archive, std::borrow::Cow<'_, [u8]>)> {
        let mut truncated = false;
        let tar = if data.starts_with(b"BZh") {
            let mut v = Vec::new();
            truncated = unbzip2(data, &mut v, max)?;
            std::borrow::Cow::Owned(v)
        } else {
            std::borrow::Cow::Borrowed(data)
        };
        let len = tar.len() as u64;
        let (nodes, cut) = tar_members(std::io::Cursor::new(&tar[..]), len, &counters)?;
        if truncated || cut {
            counters.archives_truncated.add(1);
        }
        let a = Archive {
            path: PathBuf::from("fuzz.tar"),
            index: OnceLock::from(Index { nodes, file: None }),
            counters,
        };
        Ok((a, tar))
    }

    pub(crate) fn ids_of(&self, dir: &str) -> Vec<Vec<u8>> {
        let idx = self.index();
        let prefix = format!("{dir}/");
        let mut out: Vec<Vec<u8>> = Vec::new();
        for k in idx
            .nodes
            .range(prefix.clone()..)
            .map(|(k, _)| k)
            .take_while(|k| k.starts_with(&prefix))
        {
            let first = k[prefix.len()..].split('/').next().unwrap_or("");
            if let Some(id) = unhex(first) {
                if !out.contains(&id) {
                    out.push(id);
                }
            }
        }
        out
    }
}

fn is_dir_prefix(nodes: &BTreeMap<String, Node>, dir: &str) -> bool {
    let prefix = format!("{dir}/");
    nodes
        .range(prefix.clone()..)
        .next()
        .is_some_and(|(k, _)| k.starts_with(&prefix))
}

/// `target` (a link's text) seen from directory `base`, normalized; `None` if it leaves the
/// archive (absolute, or more `..` than there are directories).
fn join_inside(base: &str, target: &str) -> Option<String> {
    if target.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = base.split('/').filter(|p| !p.is_empty()).collect();
    for p in target.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

/// A member's name normalized (`./` and trailing `/` dropped); `None` if it escapes.
fn clean(name: &Path) -> Option<String> {
    let mut parts = Vec::new();
    for c in name.components() {
        match c {
            Component::Normal(p) => parts.push(p.to_str()?.to_string()),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// An archive's members, listed: as many as can be read. A tar whose listing breaks (a bad
/// header, a truncated file, a broken bzip2 stream) keeps the members listed before the break
/// (`archives_truncated`); a member that claims more bytes than the archive holds is not listed
/// (`archive_members_truncated`).
///
/// # Errors
/// The file cannot be opened, decompresses past [`ARCHIVE_MAX_BYTES`], or has no tar header.
fn read_index(path: &Path, counters: &SourceCounters) -> std::io::Result<Index> {
    let mut f = File::open(path)?;
    let mut magic = [0u8; 3];
    let n = f.read(&mut magic)?;
    f.seek(SeekFrom::Start(0))?;
    let mut truncated = false;
    let file = if n == 3 && &magic == b"BZh" {
        let mut tmp = tempfile::tempfile()?;
        truncated = unbzip2(std::io::BufReader::new(f), &mut tmp, ARCHIVE_MAX_BYTES)?;
        tmp
    } else {
        f
    };
    let file = Arc::new(file);
    let file_len = file.metadata()?.len();
    let (nodes, cut) = tar_members(Window::new(file.clone(), 0, file_len), file_len, counters)?;
    if truncated || cut {
        counters.archives_truncated.add(1);
    }
    Ok(Index {
        nodes,
        file: Some(file),
    })
}

/// Decompresses the bzip2 stream `from` into `to`, at most `max` bytes. Returns whether the
/// stream broke (what came before the break is written: the listing keeps it).
///
/// # Errors
/// `to` cannot be written, or the stream decompresses past `max`.
fn unbzip2(from: impl Read, to: &mut impl std::io::Write, max: u64) -> std::io::Result<bool> {
    let mut capped = bzip2::read::BzDecoder::new(from).take(max + 1);
    let mut copied = 0u64;
    let mut buf = [0u8; 64 << 10];
    // A broken stream ends the copy: what came before it is listed.
    let broke = loop {
        match capped.read(&mut buf) {
            Ok(0) => break false,
            Ok(n) => {
                to.write_all(&buf[..n])?;
                copied += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break true,
        }
    };
    if copied > max {
        return Err(std::io::Error::other("archive decompresses past the cap"));
    }
    Ok(broke)
}

/// The members of the tar `r` holds (`len` bytes), by normalized name: the one reading of an
/// archive's tar, from a file (`--symbols`) or from memory (the fuzz target `archive`), and
/// whether the listing broke (a bad header, a member past the end: the members before the break
/// stay). Names and links that escape are counted and skipped.
///
/// # Errors
/// `r` has no tar header at all.
fn tar_members<R: Read + Seek>(
    r: R,
    len: u64,
    counters: &SourceCounters,
) -> std::io::Result<(BTreeMap<String, Node>, bool)> {
    let mut truncated = false;
    let mut nodes = BTreeMap::new();
    let mut ar = tar::Archive::new(r);
    for e in ar.entries_with_seek()? {
        let Ok(e) = e else {
            // The tar crate cannot go on past a bad header (it does not know the next one's
            // place): the listing stops, the members before stay.
            truncated = true;
            break;
        };
        if nodes.len() >= ARCHIVE_MAX_MEMBERS {
            break;
        }
        let Some(name) = e.path().ok().and_then(|p| clean(&p)) else {
            counters.archive_entries_rejected.add(1);
            continue;
        };
        let node = match e.header().entry_type() {
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let (offset, size) = (e.raw_file_position(), e.size());
                if offset.checked_add(size).is_none_or(|end| end > len) {
                    counters.archive_members_truncated.add(1);
                    truncated = true;
                    continue;
                }
                Node::File { offset, len: size }
            }
            tar::EntryType::Directory => Node::Dir,
            tar::EntryType::Symlink => match e.link_name().ok().flatten() {
                Some(t) => Node::Link(t.to_string_lossy().into_owned()),
                None => continue,
            },
            // A hard link names another member: the same bytes.
            tar::EntryType::Link => {
                let target = e.link_name().ok().flatten().and_then(|t| clean(&t));
                match target.and_then(|t| nodes.get(&t).cloned()) {
                    Some(n) => n,
                    None => {
                        counters.archive_entries_rejected.add(1);
                        continue;
                    }
                }
            }
            _ => continue,
        };
        nodes.insert(name, node);
    }
    Ok((nodes, truncated))
}

/// The archive members' names that [`Sources`] reads, listed (for tests and `archive`'s check).
pub fn list_archive(path: &Path) -> Vec<String> {
    read_index(path, &SourceCounters::default())
        .map(|i| i.nodes.into_keys().collect())
        .unwrap_or_default()
}

/// Build ids of the files `--symbols` sources name, by dso path: for the report.
pub type IdsByName = HashMap<String, Vec<u8>>;

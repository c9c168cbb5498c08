//! [`Symbols`]: the symbol tables of the dsos a stream maps, loaded once each on the worker pool
//! as soon as a sample first hits them ([`Symbols::note`] at the MMAP, [`Symbols::want`] at the
//! first frame in it), and the lookups of addresses in them.
//!
//! The rules are perf 6.1's (`tools/perf/util/symbol.c`, `symbol-elf.c`), so that names equal
//! `perf script`'s; `docs/symbolization.md` lists them with what perf prints.
//!
//! - **ELF dsos** (`elf`): `.symtab` from the first file of the dso's build the locator
//!   ([`sources::locate`]) finds in perf's order (`--symbols` and the cache by build id,
//!   debuglink, `/usr/lib/debug/PATH[.debug]`, `/usr/lib/debug/.build-id/xx/rest.debug`, the
//!   file, debuginfod), else `.dynsym`, else MiniDebugInfo; `name@plt`; a table per build id
//!   (else per path), loaded once on the pool; lookups by file offset ([`Query::rel`]).
//! - **Kernel**: `/proc/kallsyms` (modules as `[name]`), once, when `host_kernel`.
//! - **JIT**: `/tmp/perf-PID.map` for anonymous memory, read at the first lookup (the JIT
//!   appends to it while the recording runs).
//! - **`[vdso]`**: the image a source holds by the vdso's build id (`[vdso]/ID/vdso` in an archive
//!   or the cache), else the vdso image of this process (the host's, as the recording's when it is of
//!   this host).
//!
//! A lookup is a binary search; names are demangled on first use and shared (`Arc<str>`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use perfpipe_core::Counter;

use elf::Loaded;
use perfpipe_stream::model::dso::ProcessRoot;
use perfpipe_stream::model::machine::DsoId;
use sources::locate::{Inode, Wanted};
use sources::Sources;
use table::Table;

pub mod archive;
mod demangle;
pub(crate) mod elf;
mod rbtree;
pub mod slim;
pub mod sources;
pub mod table;
#[cfg(test)]
mod tests;

/// How names are resolved.
#[derive(Clone, Debug)]
pub struct SymbolsConfig {
    /// Expand inlined functions from DWARF (`--inline`).
    pub inline: bool,
    /// Demangle C++ and Rust names.
    pub demangle: bool,
    /// Kernel symbols from this host's `/proc/kallsyms` (the recording is of this host); otherwise
    /// kernel frames are `[unknown]` in `[kernel.kallsyms]`.
    pub host_kernel: bool,
    /// Read MiniDebugInfo (`.gnu_debugdata`) of files with no `.symtab` and no debug file. perf
    /// 6.1 does not (it came in a later perf); Debian ships none, so this changes nothing there.
    pub minidebuginfo: bool,
    /// Where `/proc/kallsyms` is read from (a fixture in tests).
    pub kallsyms: PathBuf,
    /// `--kallsyms FILE`: the kernel's symbols, whatever the stream says.
    pub kallsyms_file: Option<PathBuf>,
    /// Where JIT maps are: `{tmp}/perf-PID.map`.
    pub perf_map_dir: PathBuf,
    /// Where files are looked for ([`sources::locate`]): `--symbols`, perf's build-id cache,
    /// `--symfs`, the path, perf's debug files, `--kallsyms`, debuginfod.
    pub sources: Arc<Sources>,
}

impl Default for SymbolsConfig {
    fn default() -> SymbolsConfig {
        SymbolsConfig {
            inline: false,
            demangle: true,
            host_kernel: true,
            minidebuginfo: true,
            kallsyms: PathBuf::from("/proc/kallsyms"),
            kallsyms_file: None,
            perf_map_dir: PathBuf::from("/tmp"),
            sources: Arc::new(Sources::none()),
        }
    }
}

/// A dso as the stream names it.
#[derive(Clone, Copy, Debug)]
pub struct DsoDesc<'a> {
    /// The file name from the MMAP (`[kernel.kallsyms]`, `[vdso]`, `//anon`, a path, a module).
    pub name: &'a [u8],
    /// Its build id, when the stream or the file gave one.
    pub build_id: Option<&'a [u8]>,
    /// Mapped by a kernel map.
    pub kernel: bool,
    /// A process that maps it (for `/proc/PID/root/…` and `/tmp/perf-PID.map`).
    pub pid: u32,
    /// The device and inode its MMAP2 gave (`None`: an MMAP, or an MMAP2 in build-id form).
    pub inode: Option<Inode>,
}

/// What kind of code a frame is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// User code in a file.
    User,
    /// The kernel or a module.
    Kernel,
    /// JIT code named by `/tmp/perf-PID.map`.
    Jit,
}

/// One resolved frame (a function, or an inlined function inside it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Resolved {
    /// The function name, demangled; `None` when no symbol covers the address (perf's
    /// `[unknown]`).
    pub name: Option<Arc<str>>,
    /// Address minus the symbol's start.
    pub offset: u64,
    /// The dso's name as perf shows it (`/usr/lib/x86_64-linux-gnu/libc.so.6`,
    /// `[kernel.kallsyms]`, `[xfs]`, `[unknown]`).
    pub dso: Arc<str>,
    /// Kernel, user or JIT code.
    pub kind: FrameKind,
    /// An inlined function (the frames of one address are pushed innermost first, the last is
    /// the real function).
    pub inlined: bool,
}

/// One address to resolve: its dso (if the machine model mapped it), the raw address and the
/// file-relative address (`ip - map.start + map.pgoff`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Query {
    /// The dso, or `None` for an address no map covers.
    pub dso: Option<DsoId>,
    /// The process.
    pub pid: u32,
    /// The address as sampled.
    pub ip: u64,
    /// `ip - map.start + map.pgoff` (the file offset).
    pub rel: u64,
    /// The sample's cpumode for this frame was kernel.
    pub kernel: bool,
}

/// Counters for `--stats`.
#[derive(Clone, Debug, Default)]
pub struct SymbolCounters {
    /// Dsos whose symbols were loaded.
    pub dsos_loaded: Counter,
    /// Dsos whose file could not be opened.
    pub dsos_missing: Counter,
    /// Dsos with no symbols at all (stripped).
    pub dsos_stripped: Counter,
    /// Dsos missing because the only files found were of another build (counted in
    /// `dsos_missing` too).
    pub dsos_build_id_mismatch: Counter,
    /// Addresses no symbol covers.
    pub unresolved: Counter,
}

/// The symbol tables of one stream's dsos. Shared (`Arc`) by the stage that sees the MMAPs and the
/// sinks that resolve addresses.
#[derive(Debug)]
pub struct Symbols {
    config: SymbolsConfig,
    counters: SymbolCounters,
    pool: Option<Arc<rayon::ThreadPool>>,
    /// By [`DsoId`]: what the dso is, and its table's slot.
    dsos: RwLock<Vec<Option<Arc<Entry>>>>,
    /// Tables by build id (hex) or path: one load per file.
    by_key: Mutex<HashMap<String, Arc<Slot>>>,
    kallsyms: Arc<OnceLock<Table>>,
    /// A kallsyms load was handed to the pool (so a hundred module MMAPs spawn one job).
    kallsyms_started: std::sync::atomic::AtomicBool,
    vdso: Arc<Slot>,
    /// The vdso's slot by its BUILD_ID record ([`Symbols::vdso_noted`]).
    vdso_noted: OnceLock<Arc<Slot>>,
    perf_maps: Mutex<HashMap<u32, Arc<OnceLock<Table>>>>,
    /// The kernel's build id, as the stream gives it (a kernel MMAP2 or BUILD_ID record).
    kernel_id: Mutex<Option<Vec<u8>>>,
    /// Build ids of user dsos by name, from BUILD_ID records before their MMAP.
    noted_ids: Mutex<HashMap<Vec<u8>, Vec<u8>>>,
    /// kallsyms from `--kallsyms`, or from a source by the kernel's build id.
    kallsyms_by_id: Arc<OnceLock<Option<Table>>>,
    /// kallsyms that the explicit sources hold for `[kernel.kallsyms]`, when exactly one.
    kallsyms_by_name: OnceLock<Option<Table>>,
}

/// What a dso is, for naming its frames.
#[derive(Debug)]
struct Entry {
    /// As perf shows it.
    name: Arc<str>,
    kind: EntryKind,
    pid: u32,
}

#[derive(Debug)]
enum EntryKind {
    Elf(Arc<Slot>),
    Kernel,
    /// Anonymous memory: named by `/tmp/perf-PID.map`.
    Anon,
    /// The vdso: the recording's image from a source by its build id, else this host's (`None`:
    /// decided at the first lookup, by a BUILD_ID record).
    Vdso(Option<Arc<Slot>>),
    /// A map with no file (`[vsyscall]`, `[uprobes]`).
    NoFile,
}

/// One file's table, loaded at most once (by whoever gets there first: the pool, or a lookup
/// that cannot wait), and its DWARF for `--inline`.
#[derive(Debug, Default)]
struct Slot {
    spec: Spec,
    /// A load was handed to the pool ([`Symbols::want`]).
    started: std::sync::atomic::AtomicBool,
    loaded: OnceLock<Loaded>,
    dwarf: OnceLock<Option<Mutex<Dwarf>>>,
}

#[derive(Debug, Default, Clone)]
struct Spec {
    name: PathBuf,
    /// A process that maps it (its files are looked for as it sees them).
    pid: u32,
    /// Its root, held open from when the dso was noted, when it sees other files than we do:
    /// the table may load after the process has exited.
    root: Option<Arc<ProcessRoot>>,
    /// The device and inode its MMAP2 gave.
    inode: Option<Inode>,
    build_id: Option<Vec<u8>>,
    vdso: bool,
}

type Reader = gimli::EndianArcSlice<gimli::RunTimeEndian>;

pub(crate) struct Dwarf(addr2line::Context<Reader>);

impl Dwarf {
    /// The raw names of the functions at `vaddr`, innermost first (`??` for a frame without
    /// one); at most 257 (a deeper inline chain is a broken file).
    pub(crate) fn frames(&self, vaddr: u64) -> Vec<String> {
        let mut names = Vec::new();
        let Ok(mut frames) = self.0.find_frames(vaddr).skip_all_loads() else {
            return names;
        };
        while let Ok(Some(f)) = frames.next() {
            if names.len() > 256 {
                break;
            }
            let n = f
                .function
                .as_ref()
                .and_then(|n| n.raw_name().ok().map(|s| s.into_owned()))
                .unwrap_or_else(|| "??".into());
            names.push(n);
        }
        names
    }
}

/// The `addr2line` context of the DWARF sections of `src` (`None`: none it can read).
pub(crate) fn dwarf_context(src: &elf::Src) -> Option<Dwarf> {
    let secs = elf::dwarf_sections(src)?;
    let endian = gimli::RunTimeEndian::Little;
    let mut map: HashMap<gimli::SectionId, Arc<[u8]>> =
        secs.into_iter().map(|(k, v)| (k, Arc::from(v))).collect();
    let dwarf = gimli::Dwarf::load(|id| {
        let d = map.remove(&id).unwrap_or_else(|| Arc::from(&[][..]));
        Ok::<_, gimli::Error>(gimli::EndianArcSlice::new(d, endian))
    })
    .ok()?;
    addr2line::Context::from_dwarf(dwarf).ok().map(Dwarf)
}

impl std::fmt::Debug for Dwarf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Dwarf")
    }
}

/// How perf 6.1 classes a map by its file name (`map__new`: `is_anon_memory`,
/// `is_no_dso_memory`, `is_vdso_map`), plus `[anon:…]` and `/memfd:` maps, which JITs use.
fn classify(name: &[u8]) -> &'static str {
    let anon = name == b"//anon"
        || name.starts_with(b"/dev/zero")
        || name.starts_with(b"/anon_hugepage")
        || name.starts_with(b"[stack")
        || name.starts_with(b"/SYSV")
        || name == b"[heap]"
        || name.starts_with(b"/tmp/perf-");
    if anon {
        "anon"
    } else if name.starts_with(b"[anon") || name.starts_with(b"/memfd:") {
        // perf 6.1 shows these under their own names (and cannot name their code); we keep the
        // name and still look the JIT's map up.
        "anon-named"
    } else if name == b"[vdso]" {
        "vdso"
    } else if name.starts_with(b"[") || name.is_empty() {
        "nofile"
    } else {
        "file"
    }
}

/// A kernel dso's name as perf shows it: `[kernel.kallsyms]`, or `[xfs]` for
/// `/lib/modules/…/xfs.ko.xz` (`kmod_path__parse`: the base name without `.ko…`, `-` as `_`).
pub fn kernel_dso_name(name: &[u8]) -> String {
    let s = String::from_utf8_lossy(name);
    if s.starts_with('[') || s.is_empty() {
        return if s.is_empty() {
            "[kernel.kallsyms]".into()
        } else {
            s.into_owned()
        };
    }
    let base = s.rsplit('/').next().unwrap_or(&s);
    match base.find(".ko") {
        Some(i) => format!("[{}]", base[..i].replace('-', "_")),
        None => "[kernel.kallsyms]".into(),
    }
}

impl Symbols {
    /// Symbols resolved as `config` says, loading on `pool` (inline when `None`).
    pub fn new(config: SymbolsConfig, pool: Option<Arc<rayon::ThreadPool>>) -> Symbols {
        let vdso = Arc::new(Slot {
            spec: Spec {
                vdso: true,
                ..Spec::default()
            },
            ..Slot::default()
        });
        Symbols {
            config,
            counters: SymbolCounters::default(),
            pool,
            dsos: RwLock::default(),
            by_key: Mutex::default(),
            kallsyms: Arc::default(),
            kallsyms_started: Default::default(),
            vdso,
            vdso_noted: OnceLock::new(),
            perf_maps: Mutex::default(),
            kernel_id: Mutex::default(),
            noted_ids: Mutex::default(),
            kallsyms_by_id: Arc::default(),
            kallsyms_by_name: OnceLock::new(),
        }
    }

    /// Notes the kernel's build id from the stream (the kallsyms of that kernel are looked up
    /// by it).
    pub fn note_kernel_build_id(&self, id: &[u8]) {
        let mut k = self.kernel_id.lock().unwrap_or_else(|e| e.into_inner());
        if k.is_none() && !id.is_empty() {
            *k = Some(id.to_vec());
            drop(k);
            // Kernel frames came before the id: load the kallsyms they will be named from.
            if self
                .kallsyms_started
                .load(std::sync::atomic::Ordering::Relaxed)
            {
                self.spawn_kernel_load();
            }
        }
    }

    /// Notes the build id a BUILD_ID record gives dso `name` (used for its MMAPs after it).
    pub fn note_build_id(&self, name: &[u8], id: &[u8]) {
        if id.is_empty() {
            return;
        }
        self.noted_ids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name.to_vec())
            .or_insert_with(|| id.to_vec());
    }

    /// The kernel's build id, if the stream gave one.
    pub fn kernel_build_id(&self) -> Option<Vec<u8>> {
        self.kernel_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// `--kallsyms FILE`, else the sources' kallsyms of the stream's kernel build id.
    fn kallsyms_by_id(&self) -> Option<&Table> {
        self.kallsyms_by_id
            .get_or_init(|| {
                let file = self.config.kallsyms_file.as_deref();
                kallsyms_by_id(&self.config.sources, file, self.kernel_build_id())
            })
            .as_ref()
    }

    /// The one kallsyms the explicit sources hold, for a recording without a kernel build id.
    fn kallsyms_by_name(&self) -> Option<&Table> {
        self.kallsyms_by_name
            .get_or_init(|| {
                let src = &self.config.sources;
                let id = src.id_by_name("[kernel.kallsyms]", true)?;
                let c = src.special(&id, "kallsyms")?;
                c.read_all(1 << 30).ok().map(|t| table::parse_kallsyms(&t))
            })
            .as_ref()
    }

    /// The kallsyms kernel frames are named from: `--kallsyms`, else by the stream's kernel build
    /// id, else this host's for a recording of this host (`host`), else the one an archive holds.
    fn kernel_table(&self, host: bool) -> Option<&Table> {
        if let Some(t) = self.kallsyms_by_id() {
            return Some(t);
        }
        if host && self.config.host_kernel {
            return Some(self.kallsyms());
        }
        if host {
            return None;
        }
        self.kallsyms_by_name()
    }

    /// Whether kernel frames of a recording of another host can be named (`--kallsyms`, or a
    /// source's kallsyms).
    pub fn names_foreign_kernel(&self) -> bool {
        self.kernel_table(false).is_some()
    }

    /// The configuration.
    pub fn config(&self) -> &SymbolsConfig {
        &self.config
    }

    /// Notes dso `id` and starts loading its table in the background; later calls for the same id
    /// do nothing. [`Symbols::note`] then [`Symbols::want`].
    pub fn prefetch(&self, id: DsoId, dso: DsoDesc<'_>) {
        self.note(id, dso);
        self.want(id);
    }

    /// Notes what dso `id` is (its file, build id, kind) without loading anything: a system-wide
    /// recording maps every dso of every process, and most are never in a sample. Later calls
    /// for the same id do nothing.
    pub fn note(&self, id: DsoId, dso: DsoDesc<'_>) {
        let i = id.0 as usize;
        {
            let v = self.dsos.read().unwrap_or_else(|e| e.into_inner());
            if v.get(i).is_some_and(Option::is_some) {
                return;
            }
        }
        let entry = self.entry(&dso);
        let mut v = self.dsos.write().unwrap_or_else(|e| e.into_inner());
        if v.len() <= i {
            v.resize(i + 1, None);
        }
        if v[i].is_none() {
            v[i] = Some(Arc::new(entry));
        }
    }

    /// Starts loading the table of dso `id` (noted before) on the pool, unless it is loaded or
    /// loading: called at the first sample that hits the dso, so that a table loads while the
    /// stream goes on, and only if a frame will be named from it.
    pub fn want(&self, id: DsoId) {
        let entry = {
            let v = self.dsos.read().unwrap_or_else(|e| e.into_inner());
            v.get(id.0 as usize).cloned().flatten()
        };
        let Some(entry) = entry else {
            return;
        };
        let slot = match &entry.kind {
            EntryKind::Kernel => return self.want_kernel(),
            EntryKind::Elf(slot) => slot.clone(),
            EntryKind::Vdso(slot) => slot.clone().unwrap_or_else(|| self.vdso_noted()),
            EntryKind::Anon | EntryKind::NoFile => return,
        };
        if slot
            .started
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            return;
        }
        let c = self.config.clone();
        let k = self.counters.clone();
        self.spawn(Box::new(move || {
            slot.get(&c, &k);
        }));
    }

    /// Waits for every table whose load was started ([`Symbols::want`]) on the pool: after it,
    /// the counters say what the loads found (a stage's end reads them while a pool thread
    /// may still be loading, and a file of another build not yet counted said nothing).
    pub fn settle(&self) {
        let mut slots: Vec<Arc<Slot>> = self
            .by_key
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        slots.push(self.vdso.clone());
        slots.extend(self.vdso_noted.get().cloned());
        for s in slots {
            if s.started.load(std::sync::atomic::Ordering::Relaxed) {
                s.get(&self.config, &self.counters);
            }
        }
    }

    /// Starts loading the kallsyms that kernel frames will be named from ([`Symbols::resolve`]'s
    /// choice: by the kernel's build id, else this host's) on the pool, once.
    pub fn want_kernel(&self) {
        if !self
            .kallsyms_started
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            self.spawn_kernel_load();
        }
    }

    fn spawn_kernel_load(&self) {
        let sources = self.config.sources.clone();
        let id = self.kernel_build_id();
        let by_id = self.kallsyms_by_id.clone();
        let file = self.config.kallsyms_file.clone();
        let explicit = id.is_some() || file.is_some();
        let host = self
            .config
            .host_kernel
            .then(|| (self.kallsyms.clone(), self.config.kallsyms.clone()));
        self.spawn(Box::new(move || {
            // With no id yet, `kallsyms_by_id` is left for the lookup (the id may come later).
            if explicit
                && by_id
                    .get_or_init(|| kallsyms_by_id(&sources, file.as_deref(), id))
                    .is_some()
            {
                return;
            }
            if let Some((k, path)) = host {
                k.get_or_init(|| load_kallsyms(&path));
            }
        }));
    }

    fn spawn(&self, job: Box<dyn FnOnce() + Send>) {
        let fetch = self.config.sources.debuginfod().and_then(|d| d.pool());
        match (fetch, &self.pool) {
            (Some(p), Some(_)) => p.spawn(job),
            (_, Some(p)) => p.spawn(job),
            (_, None) => job(),
        }
    }

    /// The entry for a new dso (its table shared with the dsos of the same file).
    fn entry(&self, dso: &DsoDesc<'_>) -> Entry {
        let class = classify(dso.name);
        let shown = String::from_utf8_lossy(dso.name);
        if dso.kernel {
            if kernel_dso_name(dso.name) == "[kernel.kallsyms]" {
                if let Some(id) = dso.build_id {
                    self.note_kernel_build_id(id);
                }
            }
            return Entry {
                name: Arc::from(kernel_dso_name(dso.name)),
                kind: EntryKind::Kernel,
                pid: dso.pid,
            };
        }
        let (kind, name) = match class {
            "anon" => (EntryKind::Anon, format!("/tmp/perf-{}.map", dso.pid)),
            "anon-named" => (EntryKind::Anon, shown.into_owned()),
            "vdso" => (EntryKind::Vdso(self.vdso_slot(dso)), shown.into_owned()),
            "nofile" => (EntryKind::NoFile, shown.into_owned()),
            _ => {
                let name = PathBuf::from(
                    <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(dso.name),
                );
                // The process's root while it lives (a container's process may be gone by the
                // time its table loads), one per view. Where the locator looks by path
                // (`--symfs`, else as the process sees it): the table of a dso without build id
                // is shared by the dsos of that file.
                let root = self.config.sources.root_of(dso.pid);
                let open = self.config.sources.path_of(&Wanted {
                    path: &name,
                    build_id: None,
                    pid: dso.pid,
                    root: root.as_deref(),
                    inode: dso.inode,
                });
                // An id the stream gave in a BUILD_ID record (a perf.data's build-id table).
                let noted = match dso.build_id {
                    Some(b) if !b.is_empty() => None,
                    _ => self
                        .noted_ids
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get(dso.name)
                        .cloned(),
                };
                let build_id = noted.as_deref().or(dso.build_id);
                let key = match build_id {
                    Some(b) if !b.is_empty() => b.iter().map(|b| format!("{b:02x}")).collect(),
                    _ => format!("path:{}", open.display()),
                };
                let mut map = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
                let slot = match map.get(&key) {
                    Some(s) => s.clone(),
                    None => {
                        let s = Arc::new(Slot {
                            spec: Spec {
                                name,
                                pid: dso.pid,
                                root,
                                inode: dso.inode,
                                build_id: build_id.map(<[u8]>::to_vec),
                                vdso: false,
                            },
                            ..Slot::default()
                        });
                        map.insert(key, s.clone());
                        s
                    }
                };
                drop(map);
                (EntryKind::Elf(slot), shown.into_owned())
            }
        };
        Entry {
            name: Arc::from(name),
            kind,
            pid: dso.pid,
        }
    }

    /// The vdso's slot when the stream gave its build id with its MMAP2 (else `None`: see
    /// [`Symbols::vdso_noted`]).
    fn vdso_slot(&self, dso: &DsoDesc<'_>) -> Option<Arc<Slot>> {
        match dso.build_id {
            Some(b) if !b.is_empty() => Some(self.vdso_by_id(b)),
            _ => None,
        }
    }

    /// The vdso's slot for a stream that gives its build id in a BUILD_ID record (perf inject
    /// writes it after the MMAP, at the first sample), decided at the first lookup.
    fn vdso_noted(&self) -> Arc<Slot> {
        self.vdso_noted
            .get_or_init(|| {
                let id = self
                    .noted_ids
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&b"[vdso]"[..])
                    .cloned();
                match id {
                    Some(id) => self.vdso_by_id(&id),
                    None => self.vdso.clone(),
                }
            })
            .clone()
    }

    /// The image a source holds as `[vdso]/ID/vdso` for build id `id`, else this host's.
    fn vdso_by_id(&self, id: &[u8]) -> Arc<Slot> {
        if self.config.sources.special(id, "vdso").is_none() {
            return self.vdso.clone();
        }
        let key = format!("[vdso]:{}", sources::hex(id));
        let mut map = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(key)
            .or_insert_with(|| {
                Arc::new(Slot {
                    spec: Spec {
                        name: PathBuf::from("[vdso]"),
                        build_id: Some(id.to_vec()),
                        vdso: true,
                        ..Spec::default()
                    },
                    ..Slot::default()
                })
            })
            .clone()
    }

    fn kallsyms(&self) -> &Table {
        self.kallsyms
            .get_or_init(|| load_kallsyms(&self.config.kallsyms))
    }

    fn perf_map(&self, pid: u32) -> Arc<OnceLock<Table>> {
        let m = self
            .perf_maps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(pid)
            .or_default()
            .clone();
        m
    }

    /// The build id of dso `id`: the stream's, else read from its file (waiting for the file to
    /// load, as [`Symbols::resolve`] does). None for the kernel, anonymous maps and files
    /// without one.
    pub fn build_id(&self, id: DsoId) -> Option<Vec<u8>> {
        let entry = {
            let v = self.dsos.read().unwrap_or_else(|e| e.into_inner());
            v.get(id.0 as usize).cloned().flatten()
        }?;
        match &entry.kind {
            EntryKind::Elf(slot) => slot.get(&self.config, &self.counters).build_id.clone(),
            EntryKind::Vdso(slot) => {
                let slot = slot.clone().unwrap_or_else(|| self.vdso_noted());
                slot.get(&self.config, &self.counters).build_id.clone()
            }
            _ => None,
        }
    }

    /// Resolves one address, waiting for its dso's table if it is still loading: pushes its frames
    /// onto `out`, innermost (inlined) first, the function itself last; always at least one.
    pub fn resolve(&self, q: &Query, out: &mut Vec<Resolved>) {
        self.resolve_for(q, true, out);
    }

    /// [`Symbols::resolve`] for a recording of this host (`host`) or of another: kernel frames of
    /// another host are named only from `--kallsyms` or a source's kallsyms.
    pub fn resolve_for(&self, q: &Query, host: bool, out: &mut Vec<Resolved>) {
        let entry = q.dso.and_then(|id| {
            let v = self.dsos.read().unwrap_or_else(|e| e.into_inner());
            v.get(id.0 as usize).cloned().flatten()
        });
        let before = out.len();
        match entry.as_deref() {
            // No kernel map covers it (a user address after a `PERF_CONTEXT_KERNEL` that is a
            // stack word, or a stream without the kernel's map): named from kallsyms if a symbol
            // holds it, else `[unknown]` in `[unknown]`, as perf names a frame of no map.
            None if q.kernel => self.resolve_kernel(q, host, None, out),
            None => out.push(unknown(q.ip, "[unknown]".into(), FrameKind::User)),
            Some(e) => match &e.kind {
                EntryKind::Kernel => self.resolve_kernel(q, host, Some(&e.name), out),
                _ if q.kernel => self.resolve_kernel(q, host, Some("[kernel.kallsyms]"), out),
                EntryKind::Anon => {
                    let pid = if e.pid == u32::MAX { q.pid } else { e.pid };
                    let m = self.perf_map(pid);
                    let t = m.get_or_init(|| load_perf_map(&self.config.perf_map_dir, pid));
                    push_hit(t, q.ip, &e.name, FrameKind::Jit, out);
                }
                EntryKind::NoFile => out.push(unknown(q.rel, e.name.clone(), FrameKind::User)),
                EntryKind::Vdso(slot) => {
                    let slot = slot.clone().unwrap_or_else(|| self.vdso_noted());
                    let l = slot.get(&self.config, &self.counters);
                    push_hit(&l.table, q.rel, &e.name, FrameKind::User, out);
                }
                EntryKind::Elf(slot) => {
                    let l = slot.get(&self.config, &self.counters);
                    if self.config.inline {
                        self.inlined(slot, l, q.rel, out);
                    }
                    push_hit(&l.table, q.rel, &e.name, FrameKind::User, out);
                }
            },
        }
        if out.last().is_some_and(|r| r.name.is_none()) && out.len() > before {
            self.counters.unresolved.add(1);
        }
    }

    /// A kernel frame, in the map of `dso` (`None`: no map covers it).
    fn resolve_kernel(&self, q: &Query, host: bool, dso: Option<&str>, out: &mut Vec<Resolved>) {
        let Some(t) = self.kernel_table(host) else {
            out.push(unnamed_kernel_frame(q, dso.is_some()));
            return;
        };
        match t.find(q.ip) {
            Some(h) => out.push(Resolved {
                name: Some(h.name),
                offset: q.ip - h.start,
                dso: t
                    .modules
                    .get(h.module as usize)
                    .cloned()
                    .unwrap_or_else(|| dso.unwrap_or("[kernel.kallsyms]").into()),
                kind: FrameKind::Kernel,
                inlined: false,
            }),
            None => out.push(unknown(
                q.ip,
                dso.unwrap_or("[unknown]").into(),
                FrameKind::Kernel,
            )),
        }
    }

    /// Pushes the inlined frames at `rel` (innermost first), named as perf's `new_inline_sym`
    /// names them: the DWARF linkage name (else the name), demangled.
    fn inlined(&self, slot: &Slot, l: &Loaded, rel: u64, out: &mut Vec<Resolved>) {
        let Some(d) = slot.dwarf.get_or_init(|| {
            let src = elf::Src::open_cand(l.dwarf.as_ref()?)?;
            dwarf_context(&src).map(Mutex::new)
        }) else {
            return;
        };
        let Some(vaddr) = elf::to_vaddr(&l.loads, rel) else {
            return;
        };
        let Some(hit) = l.table.find(rel) else {
            return;
        };
        let mut names = d.lock().unwrap_or_else(|e| e.into_inner()).frames(vaddr);
        // The last is the function itself, which the symbol table names.
        names.pop();
        for n in names {
            let shown = if self.config.demangle {
                demangle::demangle(n.as_bytes()).unwrap_or(n)
            } else {
                n
            };
            out.push(Resolved {
                name: Some(Arc::from(shown)),
                offset: rel - hit.start,
                dso: Arc::from(slot.spec.name.to_string_lossy().as_ref()),
                kind: FrameKind::User,
                inlined: true,
            });
        }
    }

    /// The file dsos among `ids` whose frames stay unnamed (no file found, or no symbols in it),
    /// waiting for their loads: `(name, build id in hex or "")`.
    pub fn unnamed(&self, ids: &[DsoId]) -> Vec<(String, String)> {
        self.unnamed_with_others(ids)
            .into_iter()
            .map(|(n, id, _)| (n, id))
            .collect()
    }

    /// [`Symbols::unnamed`], with the files of other builds that were found for each (never
    /// read).
    pub fn unnamed_with_others(
        &self,
        ids: &[DsoId],
    ) -> Vec<(String, String, Vec<sources::locate::OtherBuild>)> {
        let mut out = Vec::new();
        for id in ids {
            let entry = {
                let v = self.dsos.read().unwrap_or_else(|e| e.into_inner());
                v.get(id.0 as usize).cloned().flatten()
            };
            let Some(e) = entry else { continue };
            if let EntryKind::Elf(slot) = &e.kind {
                let l = slot.get(&self.config, &self.counters);
                if l.missing || l.table.is_empty() {
                    let id = l.build_id.as_deref().map(sources::hex).unwrap_or_default();
                    let line = (e.name.to_string(), id, l.other_builds.clone());
                    if !out
                        .iter()
                        .any(|o: &(String, String, _)| o.0 == line.0 && o.1 == line.1)
                    {
                        out.push(line);
                    }
                }
            }
        }
        out
    }

    /// The files dso `id`'s table was read from, waiting for its load: the runtime file (the
    /// `.dynsym`'s, else the symbol file) and the separate debug file its `.symtab` came from
    /// (when another file), as the locator found them; `None`s when none was found.
    pub fn files(&self, id: DsoId) -> (Option<sources::Cand>, Option<sources::Cand>) {
        let entry = {
            let v = self.dsos.read().unwrap_or_else(|e| e.into_inner());
            v.get(id.0 as usize).cloned().flatten()
        };
        match entry.as_deref().map(|e| &e.kind) {
            Some(EntryKind::Elf(slot)) => {
                let l = slot.get(&self.config, &self.counters);
                (l.runtime.clone(), l.debug.clone())
            }
            _ => (None, None),
        }
    }

    /// The counters.
    pub fn counters(&self) -> &SymbolCounters {
        &self.counters
    }
}

impl Slot {
    /// The loaded table, loading it here if nobody has started (waits if somebody has).
    fn get(&self, c: &SymbolsConfig, k: &SymbolCounters) -> &Loaded {
        self.loaded.get_or_init(|| {
            let l = if self.spec.vdso {
                let image = match &self.spec.build_id {
                    // Only an image that is the build asked for.
                    Some(id) => c
                        .sources
                        .special(id, "vdso")
                        .and_then(|cand| cand.read_all(1 << 24).ok())
                        .filter(|img| {
                            perfpipe_stream::model::dso::elf_build_id(img)
                                .is_some_and(|b| b.as_bytes() == &id[..])
                        }),
                    None => vdso_image(),
                };
                load_vdso(image, c.demangle)
            } else {
                let w = Wanted {
                    path: &self.spec.name,
                    build_id: self.spec.build_id.as_deref(),
                    pid: self.spec.pid,
                    root: self.spec.root.as_deref(),
                    inode: self.spec.inode,
                };
                elf::load(&w, c.demangle, c.minidebuginfo, &c.sources)
            };
            if l.missing {
                k.dsos_missing.add(1);
                if !l.other_builds.is_empty() {
                    k.dsos_build_id_mismatch.add(1);
                }
            } else if l.table.is_empty() {
                k.dsos_stripped.add(1);
            } else {
                k.dsos_loaded.add(1);
            }
            l
        })
    }
}

/// A kernel frame no table names: in `[kernel.kallsyms]` when a kernel map covers it (`in_map`),
/// else in `[unknown]`, as perf names a frame of no map (a stack word after a
/// `PERF_CONTEXT_KERNEL` marker in a user callchain is such a "kernel" frame).
pub fn unnamed_kernel_frame(q: &Query, in_map: bool) -> Resolved {
    let dso = if in_map {
        "[kernel.kallsyms]"
    } else {
        "[unknown]"
    };
    unknown(q.ip, dso.into(), FrameKind::Kernel)
}

fn unknown(offset: u64, dso: Arc<str>, kind: FrameKind) -> Resolved {
    Resolved {
        name: None,
        offset,
        dso,
        kind,
        inlined: false,
    }
}

fn push_hit(t: &Table, addr: u64, dso: &Arc<str>, kind: FrameKind, out: &mut Vec<Resolved>) {
    out.push(match t.find(addr) {
        Some(h) => Resolved {
            name: Some(h.name),
            offset: addr - h.start,
            dso: dso.clone(),
            kind,
            inlined: false,
        },
        None => unknown(addr, dso.clone(), kind),
    });
}

/// `--kallsyms FILE`, else the sources' kallsyms of kernel build id `id`.
fn kallsyms_by_id(src: &Sources, file: Option<&Path>, id: Option<Vec<u8>>) -> Option<Table> {
    if let Some(f) = file {
        return Some(load_kallsyms(f));
    }
    let c = src.special(&id?, "kallsyms")?;
    c.read_all(1 << 30).ok().map(|t| table::parse_kallsyms(&t))
}

fn load_kallsyms(path: &Path) -> Table {
    std::fs::read(path)
        .map(|t| table::parse_kallsyms(&t))
        .unwrap_or_default()
}

fn load_perf_map(dir: &Path, pid: u32) -> Table {
    let name = format!("perf-{pid}.map");
    let in_ns = Path::new("/proc")
        .join(pid.to_string())
        .join("root")
        .join(dir.strip_prefix("/").unwrap_or(dir))
        .join(&name);
    std::fs::read(&in_ns)
        .or_else(|_| std::fs::read(dir.join(&name)))
        .map(|t| table::parse_perf_map(&t))
        .unwrap_or_default()
}

/// The table of a vdso `image`: the recording's from a source, or this process's (`[vdso]` in
/// `/proc/self/maps`, copied out of memory: the same image every process of this kernel maps).
fn load_vdso(image: Option<Vec<u8>>, demangle: bool) -> Loaded {
    let Some(bytes) = image else {
        return Loaded {
            missing: true,
            ..Loaded::default()
        };
    };
    let src = elf::Src::Mem(bytes);
    let Some(info) = elf::info(&src) else {
        return Loaded::default();
    };
    let mut b = table::Builder::new(demangle);
    elf::symbols(&src, !info.symtab, &info.loads, &mut b);
    b.fixup(false);
    Loaded {
        table: b.finish(Vec::new()),
        loads: info.loads,
        dwarf: None,
        missing: false,
        build_id: info.build_id,
        ..Loaded::default()
    }
}

pub(crate) fn vdso_image() -> Option<Vec<u8>> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.ends_with("[vdso]"))?;
    let range = line.split(' ').next()?;
    let (a, b) = range.split_once('-')?;
    let (a, b) = (
        u64::from_str_radix(a, 16).ok()?,
        u64::from_str_radix(b, 16).ok()?,
    );
    if b <= a || b - a > 1 << 20 {
        return None;
    }
    // The vdso is mapped readable in this process for its whole life; copy it by reading our own
    // memory through /proc/self/mem (no unsafe, and a failed read is an error, not a fault).
    use std::os::unix::fs::FileExt;
    let mem = std::fs::File::open("/proc/self/mem").ok()?;
    let mut buf = vec![0u8; (b - a) as usize];
    mem.read_exact_at(&mut buf, a).ok()?;
    Some(buf)
}

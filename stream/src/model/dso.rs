//! Where build ids come from, and the cache that reads each file at most once, in the background.
//!
//! [`Resolver::prefetch`] is called when an MMAP first introduces a dso: ids that need no file
//! (an MMAP2 in build-id form, `--known-build-ids`, the host kernel, the host vdso) are settled at
//! once, pseudo maps are settled as skipped, and a file read is started on the pipeline's worker pool.
//! [`Resolver::resolve`] is called when the id is needed (a sample hits the dso, or `--buildid-all`
//! is about to emit it); it only blocks if that read has not finished yet.

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object::read::elf::FileHeader;
use object::read::{ReadCache, ReadRef};

use crate::format::feature;
use crate::model::machine::{Dso, DsoId, Identity};

/// A build id: up to 20 bytes (a GNU build id is 20 with SHA-1, 16 with MD5, 8 with xxhash).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct BuildId {
    bytes: [u8; 20],
    len: u8,
}

impl BuildId {
    /// A build id of `b` (at most its first 20 bytes are kept). `None` if `b` is empty.
    pub fn new(b: &[u8]) -> Option<BuildId> {
        if b.is_empty() {
            return None;
        }
        let len = b.len().min(20);
        let mut bytes = [0; 20];
        bytes[..len].copy_from_slice(&b[..len]);
        Some(BuildId {
            bytes,
            len: len as u8,
        })
    }

    /// Parses lowercase or uppercase hex, as `perf buildid-list` prints it.
    pub fn from_hex(s: &str) -> Option<BuildId> {
        let s = s.trim();
        if s.len() % 2 != 0 || s.len() > 40 {
            return None;
        }
        let v: Option<Vec<u8>> = (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
            .collect();
        BuildId::new(&v?)
    }

    /// The id's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl std::fmt::Debug for BuildId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl std::fmt::Display for BuildId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_bytes()
            .iter()
            .try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// What became of a dso's build id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Found.
    Found(BuildId),
    /// A pseudo map (anonymous, heap, stack, SysV shm, …) or a kernel/vdso id not taken from this
    /// host: nothing to inject, as perf.
    Skipped,
    /// The file (and its `/proc/<pid>/root` view) does not exist or cannot be opened.
    Missing,
    /// The file is not an ELF file with a GNU build-id note.
    NoBuildId,
}

/// Whether kernel and vdso ids may be taken from this host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HostMode {
    /// Yes, unless the stream's HOSTNAME or OSRELEASE feature names another host or kernel.
    #[default]
    Auto,
    /// Always (the user says the recording was made here, on the running kernel).
    Yes,
    /// Never.
    No,
}

/// Whether perf skips a map of this name: `is_anon_memory()` and `is_no_dso_memory()` of
/// `tools/perf/util/map.h`, plus every other `[…]` pseudo name but `[vdso]` and the kernel.
pub fn is_pseudo(name: &[u8]) -> bool {
    const PREFIXES: &[&[u8]] = &[
        b"//anon",
        b"/dev/zero",
        b"/anon_hugepage",
        b"[stack",
        b"/SYSV",
        b"[heap]",
        b"/memfd:",
    ];
    if PREFIXES.iter().any(|p| name.starts_with(p)) {
        return true;
    }
    name.starts_with(b"[")
        && name != b"[vdso]"
        && !name.starts_with(b"[kernel.kallsyms]")
        && !name.starts_with(b"[guest.kernel.kallsyms")
        || name.is_empty()
}

/// The ids that come from the running host rather than from files.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostIds {
    /// From `/sys/kernel/notes`.
    pub kernel: Option<BuildId>,
    /// From this process's own vdso image.
    pub vdso: Option<BuildId>,
    /// `uname -r`
    release: Option<[u8; 65]>,
    /// `uname -n`
    nodename: Option<[u8; 65]>,
}

impl HostIds {
    /// Reads the running kernel's and vdso's build ids and the host's name and release.
    pub fn of_this_host() -> HostIds {
        // SAFETY: utsname is plain old data (arrays of c_char), for which all zeroes is valid.
        let mut u: libc::utsname = unsafe { std::mem::zeroed() };
        // SAFETY: `u` is a valid, writable utsname.
        let ok = unsafe { libc::uname(&mut u) } == 0;
        let field = |f: &[libc::c_char; 65]| {
            let mut out = [0u8; 65];
            for (o, c) in out.iter_mut().zip(f.iter()) {
                *o = *c as u8;
            }
            out
        };
        HostIds {
            kernel: std::fs::read("/sys/kernel/notes")
                .ok()
                .and_then(|n| gnu_build_id_in_notes(&n, false)),
            vdso: vdso_build_id(),
            release: ok.then(|| field(&u.release)),
            nodename: ok.then(|| field(&u.nodename)),
        }
    }

    fn release(&self) -> &[u8] {
        cstr(self.release.as_ref().map_or(&[][..], |r| &r[..]))
    }
    fn nodename(&self) -> &[u8] {
        cstr(self.nodename.as_ref().map_or(&[][..], |r| &r[..]))
    }
}

/// The host a stream names in its HOSTNAME and OSRELEASE features.
#[derive(Clone, Debug, Default)]
pub struct StreamHost {
    name: Option<Vec<u8>>,
    release: Option<Vec<u8>>,
}

impl StreamHost {
    /// Takes in a HEADER_FEATURE record's body (after its 8-byte header).
    pub fn note_feature(&mut self, body: &[u8], e: crate::format::Endian) {
        let (host, release): (u64, u64) = (feature::HOSTNAME.into(), feature::OSRELEASE.into());
        let Some(id) = e.u64(body, 0) else { return };
        if id != host && id != release {
            return;
        }
        // A perf string: u32 len (NUL and padding included), then the bytes.
        let Some(len) = e.u32(body, 8) else { return };
        let s = body.get(12..12 + len as usize).map(|s| cstr(s).to_vec());
        if id == host {
            self.name = s;
        } else {
            self.release = s;
        }
    }

    /// Whether the recording is taken to be of `host`: as `mode` says, and for
    /// [`HostMode::Auto`] unless the stream names another hostname or kernel release.
    pub fn is_host(&self, host: &HostIds, mode: HostMode) -> bool {
        match mode {
            HostMode::Yes => true,
            HostMode::No => false,
            HostMode::Auto => {
                self.name.as_deref().is_none_or(|h| h == host.nodename())
                    && self.release.as_deref().is_none_or(|r| r == host.release())
            }
        }
    }
}

fn cstr(b: &[u8]) -> &[u8] {
    &b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())]
}

/// Finds the GNU build-id note (`NT_GNU_BUILD_ID` = 3, name `GNU`) in a raw ELF note section such
/// as `/sys/kernel/notes` (native byte order, 4-byte aligned entries).
pub fn gnu_build_id_in_notes(notes: &[u8], big_endian: bool) -> Option<BuildId> {
    let rd = |at: usize| -> Option<usize> {
        let a: [u8; 4] = notes.get(at..at + 4)?.try_into().ok()?;
        Some(if big_endian {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        } as usize)
    };
    let mut at = 0;
    while at + 12 <= notes.len() {
        let (namesz, descsz, type_) = (rd(at)?, rd(at + 4)?, rd(at + 8)?);
        let name_at = at + 12;
        let desc_at = name_at.checked_add(namesz.next_multiple_of(4))?;
        let next = desc_at.checked_add(descsz.next_multiple_of(4))?;
        let name = notes.get(name_at..name_at + namesz)?;
        if type_ == 3 && cstr(name) == b"GNU" {
            return BuildId::new(notes.get(desc_at..desc_at + descsz)?);
        }
        at = next;
    }
    None
}

/// The build id of the vdso mapped into this process (`getauxval(AT_SYSINFO_EHDR)`), which is the
/// vdso of the running kernel for processes of this process's ABI.
fn vdso_build_id() -> Option<BuildId> {
    // SAFETY: getauxval has no preconditions.
    let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) } as usize;
    if base == 0 {
        return None;
    }
    // The mapping's length, from /proc/self/maps (the `[vdso]` line).
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.ends_with("[vdso]"))?;
    let range = line.split_whitespace().next()?;
    let (s, e) = range.split_once('-')?;
    let (s, e) = (
        usize::from_str_radix(s, 16).ok()?,
        usize::from_str_radix(e, 16).ok()?,
    );
    if s != base || e <= s {
        return None;
    }
    // SAFETY: [s, e) is this process's vdso mapping, readable for the life of the process.
    let image = unsafe { std::slice::from_raw_parts(s as *const u8, e - s) };
    elf_build_id(image)
}

/// The GNU build id of an ELF image, if it is one and has one.
pub fn elf_build_id(image: &[u8]) -> Option<BuildId> {
    elf_build_id_in(image)
}

/// The GNU build id of the ELF file that `data` reads: an image in memory, or a [`ReadCache`]
/// over a [`File`](std::fs::File), which reads with positioned reads and sees a file that shrinks
/// as a short read (an error here), never a fault.
///
/// Where `object`'s `File::build_id` looks, and only there: the `SHT_NOTE` sections, or the
/// `PT_NOTE` segments of a file without section headers. Nothing else is read (no symbol table,
/// no string table), so a file costs its ELF header, its section (or program) headers and its
/// notes.
pub fn elf_build_id_in<'data, R: ReadRef<'data>>(data: R) -> Option<BuildId> {
    use object::elf::{FileHeader32, FileHeader64};
    use object::{Endianness, FileKind};
    let id = match FileKind::parse(data).ok()? {
        FileKind::Elf32 => gnu_build_id_note::<FileHeader32<Endianness>, R>(data),
        FileKind::Elf64 => gnu_build_id_note::<FileHeader64<Endianness>, R>(data),
        _ => return None,
    };
    BuildId::new(id.ok()??)
}

/// The descriptor of the first `NT_GNU_BUILD_ID` note named `GNU`.
fn gnu_build_id_note<'data, Elf: FileHeader, R: ReadRef<'data>>(
    data: R,
) -> object::read::Result<Option<&'data [u8]>> {
    use object::read::elf::{ProgramHeader as _, SectionHeader as _};
    let header = Elf::parse(data)?;
    let endian = header.endian()?;
    let mut found = None;
    let mut check = |notes: Option<object::read::elf::NoteIterator<'data, Elf>>| {
        let Some(mut notes) = notes else {
            return Ok(false);
        };
        while let Some(note) = notes.next()? {
            if note.name() == object::elf::ELF_NOTE_GNU
                && note.n_type(endian) == object::elf::NT_GNU_BUILD_ID
            {
                found = Some(note.desc());
                return Ok(true);
            }
        }
        Ok::<_, object::read::Error>(false)
    };
    let sections = header.section_headers(endian, data)?;
    if !sections.is_empty() {
        for s in sections {
            if check(s.notes(endian, data)?)? {
                break;
            }
        }
    } else {
        for p in header.program_headers(endian, data)? {
            if check(p.notes(endian, data)?)? {
                break;
            }
        }
    }
    Ok(found)
}

/// The build id of loaded kernel module `name` (`-` and `_` are the same in module names), from
/// `/sys/module/<name>/notes/.note.gnu.build-id` of the running kernel.
pub fn module_notes(name: &str) -> Option<BuildId> {
    let notes = format!(
        "/sys/module/{}/notes/.note.gnu.build-id",
        name.replace('-', "_")
    );
    gnu_build_id_in_notes(&std::fs::read(notes).ok()?, cfg!(target_endian = "big"))
}

/// Whether process `pid` (still alive) lives in another mount namespace than this process.
fn other_mount_namespace(pid: u32) -> bool {
    match (
        std::fs::read_link(format!("/proc/{pid}/ns/mnt")),
        std::fs::read_link("/proc/self/ns/mnt"),
    ) {
        (Ok(a), Ok(b)) => a != b,
        _ => false,
    }
}

/// Whether process `pid`, alive, sees other files than this process at the same paths: it lives
/// in another mount namespace (a container; perf's `nsinfo`), or under another root (`chroot`,
/// which perf does not see).
pub fn sees_other_files(pid: u32) -> bool {
    if pid == u32::MAX || pid == 0 {
        return false;
    }
    let root = |p: &str| std::fs::read_link(p).ok();
    other_mount_namespace(pid)
        || matches!(
            (root(&format!("/proc/{pid}/root")), root("/proc/self/root")),
            (Some(a), Some(b)) if a != b
        )
}

/// The root directory of a live process that sees other files than we do ([`sees_other_files`]:
/// a container, a chroot), held open (`O_PATH`): the files the process saw stay readable through
/// it, at `/proc/self/fd/N/PATH`, after the process has exited. `/proc/PID/root` goes with the
/// process, and a reader that comes later (a table loaded on a pool, a stage behind the stream)
/// would find nothing, or this host's file at the same path.
#[derive(Debug)]
pub struct ProcessRoot {
    _dir: std::fs::File,
    at: PathBuf,
    pid: u32,
    id: (u64, u64, u64),
}

impl ProcessRoot {
    /// The root of process `pid`, while it lives and sees other files than we do.
    pub fn open(pid: u32) -> Option<ProcessRoot> {
        use std::os::fd::AsRawFd as _;
        use std::os::unix::fs::MetadataExt as _;
        if !sees_other_files(pid) {
            return None;
        }
        let dir = std::fs::File::options()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(format!("/proc/{pid}/root"))
            .ok()?;
        let meta = dir.metadata().ok()?;
        // The mount namespace too: one directory mounted differently is another view.
        let ns = std::fs::metadata(format!("/proc/{pid}/ns/mnt")).map_or(0, |m| m.ino());
        let at = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
        Some(ProcessRoot {
            _dir: dir,
            at,
            pid,
            id: (meta.dev(), meta.ino(), ns),
        })
    }

    /// `path` under this root.
    pub fn join(&self, path: &Path) -> PathBuf {
        self.at.join(path.strip_prefix("/").unwrap_or(path))
    }

    /// A path under this root as messages show it: `/proc/PID/root/PATH` (PID the process it
    /// was opened for); any other path as it is.
    pub fn shown(&self, p: &Path) -> String {
        match p.strip_prefix(&self.at) {
            Ok(rest) => in_process_root(rest, self.pid).display().to_string(),
            Err(_) => p.display().to_string(),
        }
    }

    /// Which view it is (the root directory's device and inode, the mount namespace's inode):
    /// the processes of one container share it.
    pub fn id(&self) -> (u64, u64, u64) {
        self.id
    }
}

/// `path` as process `pid` sees it: `/proc/PID/root/PATH`.
pub fn in_process_root(path: &Path, pid: u32) -> PathBuf {
    let mut p = PathBuf::from(format!("/proc/{pid}/root"));
    p.push(path.strip_prefix("/").unwrap_or(path));
    p
}

/// Where the file a process maps at `path` is, in order: its view through `/proc/PID/root` first
/// when the process, alive, sees other files than we do ([`sees_other_files`]: a container, a
/// chroot), then the path itself, then (a process of this namespace) the view through its root.
/// The one order every reader of a dso's file on this host follows (`perfpipe_profile`'s locator
/// puts `--symfs` and the build-id sources around it).
pub fn process_views(path: &Path, pid: Option<u32>) -> Vec<PathBuf> {
    process_views_in(path, pid, None)
}

/// [`process_views`], with the process's root held open when it was seen alive
/// ([`ProcessRoot`]): that view first, whether or not the process still lives.
pub fn process_views_in(path: &Path, pid: Option<u32>, root: Option<&ProcessRoot>) -> Vec<PathBuf> {
    if let Some(r) = root.filter(|_| path.is_absolute()) {
        return vec![r.join(path), path.to_path_buf()];
    }
    let mut out: Vec<PathBuf> = vec![path.to_path_buf()];
    if let Some(pid) = pid.filter(|&p| p != u32::MAX && p != 0) {
        if path.is_absolute() {
            let p = in_process_root(path, pid);
            if sees_other_files(pid) {
                out.insert(0, p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// Reads a file's build id: where [`process_views`] says the process's file is, else, for a
/// kernel module, `/sys/module/<name>/notes`.
pub fn read_build_id(path: &Path, pid: Option<u32>, kernel: bool) -> Outcome {
    let candidates = process_views(path, pid);
    let mut missing = true;
    for c in &candidates {
        // O_NONBLOCK: opening a FIFO without a writer must not block (it would hang `resolve`).
        let Ok(file) = std::fs::File::options()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(c)
        else {
            continue;
        };
        missing = false;
        // Only a regular file can hold an ELF image: a directory, FIFO, socket or device has no
        // build id (mapping a device could block or have side effects).
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            continue;
        }
        // Positioned reads of the few parts that hold the id, never a map: a file truncated while
        // mapped raises SIGBUS on the next access to a lost page, which kills the process (no
        // `catch_unwind` catches it); a read of a file that shrank just comes up short.
        let cache = ReadCache::new(file);
        #[cfg(test)]
        if let Some(hook) = *tests::AFTER_OPEN.lock().unwrap() {
            hook(c);
        }
        if let Some(id) = elf_build_id_in(&cache) {
            return Outcome::Found(id);
        }
    }
    if kernel {
        // A module: the running kernel exposes its notes.
        let stem = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.split(".ko").next());
        if let Some(id) = stem.and_then(module_notes) {
            return Outcome::Found(id);
        }
    }
    if missing {
        Outcome::Missing
    } else {
        Outcome::NoBuildId
    }
}

#[derive(Clone, Copy, Debug)]
enum Slot {
    Unseen,
    Pending,
    Done(Outcome),
}

/// The build-id cache of a stream: one slot per dso, file reads on the pipeline's worker pool
/// ([`Resolver::on_pool`]; rayon's global pool without one), answered over a channel.
///
/// **Memory**: one slot per dso. Each file is read at most once per dso (name + identity), by
/// positioned reads of its ELF headers and notes (never mapped), freed as soon as its id is read.
#[derive(Debug)]
pub struct Resolver {
    known: HashMap<Vec<u8>, BuildId>,
    host: HostIds,
    mode: HostMode,
    /// The stream's HOSTNAME / OSRELEASE features, when seen.
    stream: StreamHost,
    slots: Vec<Slot>,
    tx: crossbeam_channel::Sender<(DsoId, Outcome)>,
    rx: crossbeam_channel::Receiver<(DsoId, Outcome)>,
    /// Where file reads run.
    pool: Option<Arc<rayon::ThreadPool>>,
}

impl Resolver {
    /// A resolver with user-supplied ids (`--known-build-ids`) and the host's ids.
    pub fn new(known: HashMap<Vec<u8>, BuildId>, host: HostIds, mode: HostMode) -> Resolver {
        let (tx, rx) = crossbeam_channel::unbounded();
        Resolver {
            known,
            host,
            mode,
            stream: StreamHost::default(),
            slots: Vec::new(),
            tx,
            rx,
            pool: None,
        }
    }

    /// Runs the file reads on `pool` (the pipeline's workers, from the build context).
    pub fn on_pool(&mut self, pool: Arc<rayon::ThreadPool>) {
        self.pool = Some(pool);
    }

    /// Notes a HEADER_FEATURE record's body (`u64 feat_id` then the feature data), to tell
    /// whether the stream was recorded on this host.
    pub fn note_feature(&mut self, body: &[u8], e: crate::format::Endian) {
        self.stream.note_feature(body, e);
    }

    /// Whether the recording is taken to be of this host (for kernel and vdso ids).
    pub fn is_host(&self) -> bool {
        self.stream.is_host(&self.host, self.mode)
    }

    fn slot(&mut self, id: DsoId) -> &mut Slot {
        let i = id.0 as usize;
        if self.slots.len() <= i {
            self.slots.resize(i + 1, Slot::Unseen);
        }
        &mut self.slots[i]
    }

    /// Settles what needs no file, or starts reading the file in the background. `pid` is a
    /// process that maps the dso (for the `/proc/<pid>/root` fallback).
    pub fn prefetch(&mut self, id: DsoId, dso: &Dso, pid: u32) {
        if !matches!(self.slot(id), Slot::Unseen) {
            return;
        }
        let settled = if let Identity::BuildId(b) = &dso.identity {
            Some(BuildId::new(b).map_or(Outcome::NoBuildId, Outcome::Found))
        } else if let Some(k) = self.known.get(&dso.name) {
            Some(Outcome::Found(*k))
        } else if dso.name == b"[kernel.kallsyms]" || dso.name == b"[vdso]" {
            let host = if dso.kernel {
                self.host.kernel
            } else {
                self.host.vdso
            };
            Some(match host {
                Some(id) if self.is_host() => Outcome::Found(id),
                _ => Outcome::Skipped,
            })
        } else if dso.kernel && dso.name.starts_with(b"[") && dso.name.ends_with(b"]") {
            // A module perf found no file for is named `[name]`: the running kernel's notes.
            let name = String::from_utf8_lossy(&dso.name[1..dso.name.len() - 1]).into_owned();
            Some(match module_notes(&name) {
                Some(id) if self.is_host() && !name.contains("kallsyms") => Outcome::Found(id),
                _ => Outcome::Skipped,
            })
        } else if is_pseudo(&dso.name) {
            Some(Outcome::Skipped)
        } else {
            None
        };
        if let Some(o) = settled {
            *self.slot(id) = Slot::Done(o);
            return;
        }
        *self.slot(id) = Slot::Pending;
        let tx = self.tx.clone();
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(&dso.name));
        let kernel = dso.kernel;
        let read = move || {
            // Always answer, even if parsing a hostile file panicked, so `resolve` cannot hang.
            let outcome = std::panic::catch_unwind(|| read_build_id(&path, Some(pid), kernel))
                .unwrap_or(Outcome::NoBuildId);
            let _ = tx.send((id, outcome));
        };
        match &self.pool {
            Some(pool) => pool.spawn(read),
            None => rayon::spawn(read),
        }
    }

    /// The outcome for a dso, waiting for its read if it is still running.
    pub fn resolve(&mut self, id: DsoId, dso: &Dso, pid: u32) -> Outcome {
        self.prefetch(id, dso, pid);
        loop {
            if let Slot::Done(o) = *self.slot(id) {
                return o;
            }
            match self.rx.recv() {
                Ok((got, o)) => *self.slot(got) = Slot::Done(o),
                // Unreachable: we hold a sender. Treat as unreadable rather than hang.
                Err(_) => return Outcome::Missing,
            }
        }
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    /// Called by [`read_build_id`] on each file it has opened, before it reads it.
    pub(super) static AFTER_OPEN: std::sync::Mutex<Option<fn(&Path)>> = std::sync::Mutex::new(None);

    #[test]
    fn hex_round_trips() {
        let id = BuildId::from_hex("00ff10ABcd").unwrap();
        assert_eq!(id.as_bytes(), &[0, 0xff, 0x10, 0xab, 0xcd]);
        assert_eq!(id.to_string(), "00ff10abcd");
        assert!(BuildId::from_hex("abc").is_none());
        assert!(BuildId::from_hex("zz").is_none());
        assert!(BuildId::from_hex("").is_none());
    }

    #[test]
    fn pseudo_maps_are_skipped_like_perf() {
        for n in [
            "//anon",
            "[heap]",
            "[stack]",
            "/SYSV0000",
            "/dev/zero",
            "[vvar]",
            "/anon_hugepage (deleted)",
        ] {
            assert!(is_pseudo(n.as_bytes()), "{n}");
        }
        for n in ["[vdso]", "[kernel.kallsyms]", "/usr/lib/libc.so.6"] {
            assert!(!is_pseudo(n.as_bytes()), "{n}");
        }
    }

    #[test]
    fn notes_are_parsed() {
        let mut n = Vec::new();
        // An unrelated note first, then the GNU build id.
        n.extend_from_slice(&[4, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0]);
        n.extend_from_slice(b"Xen\0");
        n.extend_from_slice(&[1, 2, 3, 4]);
        n.extend_from_slice(&[4, 0, 0, 0, 20, 0, 0, 0, 3, 0, 0, 0]);
        n.extend_from_slice(b"GNU\0");
        n.extend((1..=20).map(|x| x as u8));
        let id = gnu_build_id_in_notes(&n, false).unwrap();
        assert_eq!(id.as_bytes(), (1..=20).collect::<Vec<u8>>());
        assert!(gnu_build_id_in_notes(&n[..30], false).is_none());
    }

    #[test]
    fn own_executable_and_missing_files() {
        let exe = std::env::current_exe().unwrap();
        assert!(matches!(
            read_build_id(&exe, None, false),
            Outcome::Found(_) | Outcome::NoBuildId
        ));
        assert_eq!(
            read_build_id(Path::new("/nonexistent/lib.so"), None, false),
            Outcome::Missing
        );
        assert_eq!(
            read_build_id(Path::new("/proc/self/status"), None, false),
            Outcome::NoBuildId
        );
    }

    #[test]
    fn kernel_dsos_resolve_by_kind() {
        use crate::model::machine::{Dso, DsoId, Identity};
        let host = HostIds::of_this_host();
        let mut r = Resolver::new(HashMap::new(), host, HostMode::Yes);
        let dso = |name: &str, kernel| Dso {
            name: name.as_bytes().to_vec(),
            identity: Identity::None,
            kernel,
        };
        let kallsyms = r.resolve(DsoId(0), &dso("[kernel.kallsyms]", true), u32::MAX);
        assert_eq!(
            kallsyms,
            host.kernel.map_or(Outcome::Skipped, Outcome::Found)
        );
        let unknown_module = r.resolve(DsoId(1), &dso("[no_such_module]", true), u32::MAX);
        assert_eq!(unknown_module, Outcome::Skipped);
        assert!(module_notes("no_such_module").is_none());
        let gone = "/lib/modules/0.0/kernel/no_such_module.ko";
        assert_eq!(
            r.resolve(DsoId(2), &dso(gone, true), u32::MAX),
            Outcome::Missing
        );
        let vdso = r.resolve(DsoId(3), &dso("[vdso]", false), 1);
        assert_eq!(vdso, host.vdso.map_or(Outcome::Skipped, Outcome::Found));
        let mut no = Resolver::new(HashMap::new(), host, HostMode::No);
        assert_eq!(
            no.resolve(DsoId(0), &dso("[kernel.kallsyms]", true), 0),
            Outcome::Skipped
        );
        assert_eq!(
            no.resolve(DsoId(1), &dso("[vdso]", false), 0),
            Outcome::Skipped
        );
    }

    #[test]
    fn host_ids_are_read() {
        let h = HostIds::of_this_host();
        assert!(!h.release().is_empty());
        if std::path::Path::new("/sys/kernel/notes").exists() {
            assert!(h.kernel.is_some());
        }
        if cfg!(all(target_os = "linux", target_arch = "x86_64")) {
            assert!(h.vdso.is_some(), "the x86_64 vdso has a build id");
        }
    }

    #[test]
    fn stream_of_another_host_disables_host_ids() {
        let host = HostIds::of_this_host();
        let mut r = Resolver::new(HashMap::new(), host, HostMode::Auto);
        assert!(r.is_host());
        let mut body = 4u64.to_le_bytes().to_vec();
        body.extend_from_slice(&8u32.to_le_bytes());
        body.extend_from_slice(b"0.0-x\0\0\0");
        r.note_feature(&body, crate::format::Endian::Little);
        assert!(!r.is_host());
        let mut y = Resolver::new(HashMap::new(), host, HostMode::Yes);
        y.note_feature(&body, crate::format::Endian::Little);
        assert!(y.is_host());
    }

    /// Positioned reads of the headers and notes find what `object::File::build_id` finds on the
    /// whole image, for ELF files with and without build ids (and non-ELF files).
    #[test]
    fn positioned_reads_find_the_ids_object_finds() {
        use object::Object as _;
        let mut files = Vec::new();
        for dir in [
            "/usr/lib",
            "/usr/bin",
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib/debug",
        ] {
            let Ok(rd) = std::fs::read_dir(dir) else {
                continue;
            };
            let mut v: Vec<PathBuf> = rd.filter_map(|e| Some(e.ok()?.path())).collect();
            v.sort();
            files.extend(v.into_iter().filter(|p| p.is_file()).take(60));
        }
        let (mut with, mut without) = (0, 0);
        for p in &files {
            let Ok(image) = std::fs::read(p) else {
                continue;
            };
            let want = object::File::parse(&*image)
                .ok()
                .and_then(|f| f.build_id().ok().flatten())
                .and_then(BuildId::new);
            let got = match read_build_id(p, None, false) {
                Outcome::Found(id) => Some(id),
                _ => None,
            };
            assert_eq!(got, want, "{}", p.display());
            assert_eq!(elf_build_id(&image), want, "{}", p.display());
            if want.is_some() {
                with += 1;
            } else {
                without += 1;
            }
        }
        assert!(
            with >= 10 && without >= 1,
            "{with} files with ids, {without} without"
        );
    }

    /// The [`AFTER_OPEN`] hook of [`dso_truncated_between_open_and_read`]: empties files named
    /// `shrinks.so`, as a library rebuilt in place while a recording is processed.
    fn truncate_shrinking(path: &Path) {
        if path.file_name() == Some("shrinks.so".as_ref()) {
            std::fs::File::options()
                .write(true)
                .open(path)
                .and_then(|f| f.set_len(0))
                .unwrap();
        }
    }

    /// A dso file truncated between the stage's open and its read is counted as one without a
    /// build id, and the stream goes on. Mapping the file (as 816e9da did) died of SIGBUS there,
    /// which no `catch_unwind` catches: the test runs itself in a child process so that such a
    /// death fails the test rather than killing the test binary.
    #[test]
    fn dso_truncated_between_open_and_read() {
        use crate::buildid::bench_input::{collect_dsos, generate, Rng, Shape};
        use crate::buildid::tests::{records, run};
        use crate::buildid::BuildidConfig;
        use crate::format::RecordType;

        const CHILD: &str = "PERFPIPE_TEST_TRUNCATED_DSO_CHILD";
        const NAME: &str = "model::dso::tests::dso_truncated_between_open_and_read";
        if !crate::test_child::in_child(CHILD, NAME) {
            return;
        }

        *AFTER_OPEN.lock().unwrap() = Some(truncate_shrinking);
        let good = collect_dsos(Path::new("/usr/lib"), 1)
            .pop()
            .expect("an ELF file with a build id under /usr/lib");
        let dir = std::env::temp_dir().join(format!("perfpipe-shrinks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let shrinks = dir.join("shrinks.so");

        std::fs::copy(&good, &shrinks).unwrap();
        assert_eq!(read_build_id(&shrinks, None, false), Outcome::NoBuildId);
        assert_eq!(shrinks.metadata().unwrap().len(), 0, "the hook ran");

        // Through the stage: counted, the stream continues, the other dso's id is injected.
        std::fs::copy(&good, &shrinks).unwrap();
        let pool = [shrinks.clone(), good.clone()];
        let shape = Shape {
            nr_mmaps: 8,
            nr_samples: 2,
            pid: 81,
        };
        let input = generate(&pool, shape, &mut Rng::new(11));
        let named = |p: &Path| {
            input
                .windows(p.as_os_str().len())
                .any(|w| w == p.as_os_str().as_encoded_bytes())
        };
        assert!(named(&shrinks) && named(&good), "the stream maps both");
        let stage = BuildidConfig::default().build();
        let (no_id, missing) = (stage.no_id.clone(), stage.missing.clone());
        let out = run(Box::new(stage), &input, 4096);
        assert_eq!((no_id.get(), missing.get()), (1, 0));
        let ids: Vec<_> = records(&out)
            .into_iter()
            .filter(|r| r.0 == RecordType::HEADER_BUILD_ID.0)
            .collect();
        assert_eq!(ids.len(), 1);
        assert!(ids[0]
            .1
            .windows(good.as_os_str().len())
            .any(|w| w == good.as_os_str().as_encoded_bytes()));
        assert_eq!(
            records(&out).len(),
            records(&input).len() + 1,
            "every input record is kept"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

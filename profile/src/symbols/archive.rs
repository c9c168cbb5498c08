//! `perfpipe archive`: on the recording host, what another machine needs to name a recording's
//! frames, as a tar in perf's build-id-cache layout (so `tar xf ARCHIVE -C ~/.debug` serves perf
//! too, and `--symbols ARCHIVE` reads it in place):
//!
//! - for every file dso a sample (or a callchain frame) hit: `PATH/ID/elf`, the file its symbols'
//!   runtime layout was read from, and `PATH/ID/debug`, the separate debug file its `.symtab`
//!   came from when another one (by debuglink, `/usr/lib/debug/…`, debuginfod), as the one
//!   locator found them (`super::sources::locate`), each of the dso's build, with the link
//!   `.build-id/xx/rest` → `../../PATH/ID`;
//! - when a kernel frame was hit: `[kernel.kallsyms]/ID/kallsyms`, this host's `/proc/kallsyms`
//!   under the running kernel's build id (a copy whose addresses `kptr_restrict` hid is refused);
//! - when the vdso was hit: `[vdso]/ID/vdso`, the image this process maps.
//!
//! ELF files go in as slim copies ([`super::slim`]: the symbol tables, unwind tables and headers,
//! not the code and data), unless the `whole` option asks for the files as they are; `dwarf` keeps
//! the DWARF `--inline` reads. An output named `*.bz2` is compressed (bzip2, as `perf archive`'s
//! tarballs are), and read back the same way.
//!
//! It is an output format of the pipeline ([`SPEC`], `symbolize` before it), so it reads what
//! `-i` reads (a pipe stream or a perf.data) and knows the hit dsos exactly as the profiles do.
//! The tar is written beside the output and renamed into place at the end.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use perfpipe_core::spec::{BuildCtx, FormatSpec, Kind, Options, StageOption};
use perfpipe_core::{Batch, Counter, Flow, Sink, StageError};
use perfpipe_stream::model::dso::gnu_build_id_in_notes;

use super::sources::{hex, Cand};
use crate::symbolize::{FrameTables, Stacks};

/// Most bytes of one file packed (a dso's file or debug file).
const FILE_MAX: u64 = 16 << 30;

/// How `perfpipe archive` offers the format (it is not among the outputs `-o` chooses).
pub const SPEC: FormatSpec = FormatSpec {
    name: "archive",
    help: "a tar of the files that name the recording's frames, in perf's build-id-cache layout (perfpipe archive)",
    extensions: &[],
    flags: &[],
    options: &[
        StageOption {
            key: "whole",
            kind: Kind::Switch,
            help: "pack the files as they are, not slim copies of their symbol and unwind tables",
        },
        StageOption {
            key: "dwarf",
            kind: Kind::Switch,
            help: "keep the DWARF debug sections in the slim copies (what --inline reads)",
        },
    ],
    needs: &["symbolize"],
    sets: |_| &[("symbolize", "kernel", "yes")],
    build: build_sink,
};

fn build_sink(_: &BuildCtx, o: &Options, path: &Path) -> Result<Box<dyn Sink>, StageError> {
    let mut sink = ArchiveSink::new(path);
    sink.slim = match (o.switch("whole"), o.switch("dwarf")) {
        (true, _) => Slim::No,
        (false, dwarf) => Slim::Yes { dwarf },
    };
    Ok(Box::new(sink))
}

/// Whether ELF files go in as slim copies ([`super::slim`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slim {
    /// The files as they are.
    No,
    /// Slim copies; `dwarf` keeps the DWARF debug sections.
    Yes {
        /// Keep `.debug_*` (what `--inline` reads).
        dwarf: bool,
    },
}

/// What went into an archive.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Files written (not links).
    pub files: usize,
    /// Their bytes (as packed: slim copies, before any compression).
    pub bytes: u64,
    /// The bytes the files packed have whole (equal to `bytes` without slimming).
    pub bytes_whole: u64,
    /// Dsos hit that got a file.
    pub dsos: usize,
    /// Dsos hit whose file is gone or is another build now: `(name, build id hex)`.
    pub missing: Vec<(String, String)>,
}

/// The sink: collects the frames hit, writes the tar at the end.
#[derive(Debug)]
pub struct ArchiveSink {
    path: PathBuf,
    /// Slim copies of ELF files, or the files whole.
    pub slim: Slim,
    tables: Option<FrameTables>,
    hit: rustc_hash::FxHashSet<u32>,
    files: Counter,
    bytes: Counter,
    bytes_whole: Counter,
    missing: Counter,
    /// What the last run wrote (for the command's closing lines).
    pub summary: Summary,
}

impl ArchiveSink {
    /// A sink writing `path`.
    pub fn new(path: &Path) -> ArchiveSink {
        ArchiveSink {
            path: path.to_path_buf(),
            slim: Slim::Yes { dwarf: false },
            tables: None,
            hit: Default::default(),
            files: Counter::new(),
            bytes: Counter::new(),
            bytes_whole: Counter::new(),
            missing: Counter::new(),
            summary: Summary::default(),
        }
    }
}

impl Sink for ArchiveSink {
    fn consume(&mut self, batch: &Batch) -> Result<Flow, StageError> {
        let Some(stacks) = batch.annotation::<Stacks>() else {
            return Ok(Flow::Continue);
        };
        if self.tables.is_none() {
            self.tables = Some(stacks.frame_tables());
        }
        for s in stacks.samples() {
            self.hit.extend(stacks.frames(s).iter().copied());
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self) -> Result<(), StageError> {
        let members = match &self.tables {
            Some(src) => members(src, &self.hit, self.slim, &mut self.summary),
            None => Vec::new(),
        };
        write_tar(&self.path, &members, self.slim, &mut self.summary)?;
        self.files.add(self.summary.files as u64);
        self.bytes.add(self.summary.bytes);
        self.bytes_whole.add(self.summary.bytes_whole);
        self.missing.add(self.summary.missing.len() as u64);
        let name = self.path.display();
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        let whole = if self.summary.bytes_whole != self.summary.bytes {
            format!(", {:.1} MiB whole", mib(self.summary.bytes_whole))
        } else {
            String::new()
        };
        eprintln!(
            "perfpipe archive: {} files ({:.1} MiB{whole}) for {} dsos in {name}; on the other machine: perfpipe --symbols {name} …, or tar xf {name} -C ~/.debug for perf",
            self.summary.files,
            mib(self.summary.bytes),
            self.summary.dsos,
        );
        for (dso, id) in &self.summary.missing {
            eprintln!("perfpipe archive: no file for {dso} (build id {id}): gone, or another build since the recording");
        }
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![
            ("files", self.files.clone()),
            ("bytes", self.bytes.clone()),
            ("bytes_whole", self.bytes_whole.clone()),
            ("dsos_without_file", self.missing.clone()),
        ]
    }
}

/// One thing the tar holds.
#[derive(Debug)]
enum Member {
    /// A file's bytes from `from` (a path), or in memory.
    File {
        name: String,
        from: Content,
    },
    Link {
        name: String,
        target: String,
    },
}

#[derive(Debug)]
enum Content {
    /// A file the locator found (a path, or an archive's member).
    File(Cand),
    Bytes(Arc<[u8]>),
}

/// The members for the frames `hit`, by build id (each once).
fn members(
    src: &FrameTables,
    hit: &rustc_hash::FxHashSet<u32>,
    slim: Slim,
    summary: &mut Summary,
) -> Vec<Member> {
    let frames = src.table.snapshot();
    let mut dsos = BTreeMap::new();
    let mut kernel = false;
    // The kernel addresses hit (a slim kallsyms keeps what names them).
    let mut kernel_ips = Vec::new();
    for &id in hit {
        let Some(f) = frames.get(id as usize) else {
            continue;
        };
        let in_kernel = f
            .query
            .dso
            .and_then(|d| src.dsos.get(d))
            .is_some_and(|i| i.kernel);
        if f.query.kernel || in_kernel {
            kernel = true;
            kernel_ips.push(f.query.ip);
            continue;
        }
        if let Some(d) = f.query.dso {
            dsos.insert(d.0, d);
        }
    }
    let mut out = Vec::new();
    let mut ids_done: Vec<Vec<u8>> = Vec::new();
    let mut add = |out: &mut Vec<Member>, dir: &str, id: &[u8], files: Vec<(&str, Content)>| {
        if files.is_empty() || ids_done.iter().any(|d| d == id) {
            return;
        }
        ids_done.push(id.to_vec());
        let h = hex(id);
        let dir = format!("{}/{h}", dir.trim_start_matches('/'));
        out.push(Member::Link {
            name: format!(".build-id/{}/{}", &h[..2], &h[2..]),
            target: format!("../../{dir}"),
        });
        for (f, c) in files {
            out.push(Member::File {
                name: format!("{dir}/{f}"),
                from: c,
            });
        }
    };
    for d in dsos.into_values() {
        let Some(info) = src.dsos.get(d) else {
            continue;
        };
        if info.kernel {
            kernel = true;
            continue;
        }
        let name = info.name.to_string();
        if name == "[vdso]" {
            if let Some(img) = super::vdso_image() {
                if let Some(id) = perfpipe_stream::model::dso::elf_build_id(&img) {
                    add(
                        &mut out,
                        "[vdso]",
                        id.as_bytes(),
                        vec![("vdso", Content::Bytes(Arc::from(img.clone())))],
                    );
                    summary.dsos += 1;
                    summary.bytes_whole += img.len() as u64;
                }
            }
            continue;
        }
        if !name.starts_with('/') || perfpipe_stream::model::dso::is_pseudo(name.as_bytes()) {
            continue;
        }
        let Some(id) = src.symbols.build_id(d) else {
            continue;
        };
        // The files the symbols were read from, as the one locator found them (a container's
        // through `/proc/PID/root` while it runs, a debug file by its debuglink or build id),
        // each of the dso's build.
        let (runtime, debug) = src.symbols.files(d);
        let mut files = Vec::new();
        if let Some(c) = runtime {
            files.push(("elf", Content::File(c)));
        }
        if let Some(c) = debug {
            files.push(("debug", Content::File(c)));
        }
        let h = hex(&id);
        if files.is_empty() {
            summary.missing.push((name, h));
            continue;
        }
        summary.dsos += 1;
        add(&mut out, &name, &id, files);
    }
    if kernel {
        let id = std::fs::read("/sys/kernel/notes")
            .ok()
            .and_then(|n| gnu_build_id_in_notes(&n, cfg!(target_endian = "big")));
        let text = std::fs::read("/proc/kallsyms")
            .ok()
            .filter(|t| has_addresses(t));
        match (id, text) {
            (Some(id), Some(t)) => {
                summary.bytes_whole += t.len() as u64;
                let t = match slim {
                    Slim::Yes { .. } => super::slim::kallsyms(&t, &kernel_ips),
                    Slim::No => t,
                };
                add(
                    &mut out,
                    "[kernel.kallsyms]",
                    id.as_bytes(),
                    vec![("kallsyms", Content::Bytes(Arc::from(t)))],
                );
                summary.dsos += 1;
            }
            (id, _) => summary.missing.push((
                "[kernel.kallsyms] (/proc/kallsyms hides its addresses: run as root or lower kernel.kptr_restrict)".into(),
                id.map(|i| hex(i.as_bytes())).unwrap_or_default(),
            )),
        }
    }
    out
}

/// Whether a kallsyms copy has addresses (`kptr_restrict` shows zeros).
fn has_addresses(t: &[u8]) -> bool {
    t.split(|&c| c == b'\n')
        .take(1000)
        .any(|l| l.iter().take_while(|&&c| c != b' ').any(|&c| c != b'0'))
}

fn write_tar(
    path: &Path,
    members: &[Member],
    slim: Slim,
    summary: &mut Summary,
) -> Result<(), StageError> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let base = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{base}.perfpipe-{}.tmp", std::process::id()));
    let file = std::fs::File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let out = std::io::BufWriter::new(file);
    let bz2 = path.extension().is_some_and(|e| e == "bz2");
    let mut b = tar::Builder::new(if bz2 {
        Packed::Bz2(bzip2::write::BzEncoder::new(
            out,
            bzip2::Compression::best(),
        ))
    } else {
        Packed::Plain(out)
    });
    b.mode(tar::HeaderMode::Deterministic);
    let r = (|| -> std::io::Result<()> {
        for m in members {
            match m {
                Member::Link { name, target } => {
                    let mut h = tar::Header::new_gnu();
                    h.set_entry_type(tar::EntryType::Symlink);
                    h.set_size(0);
                    h.set_mode(0o777);
                    b.append_link(&mut h, name, target)?;
                }
                Member::File { name, from } => {
                    let mut h = tar::Header::new_gnu();
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_mode(0o644);
                    let n = match from {
                        Content::File(c) => {
                            let whole = c.read_all(FILE_MAX)?;
                            summary.bytes_whole += whole.len() as u64;
                            let small = match slim {
                                Slim::Yes { dwarf } => super::slim::slim(&whole, dwarf),
                                Slim::No => None,
                            };
                            let bytes = small.as_deref().unwrap_or(&whole);
                            h.set_size(bytes.len() as u64);
                            b.append_data(&mut h, name, bytes)?;
                            bytes.len() as u64
                        }
                        Content::Bytes(bytes) => {
                            h.set_size(bytes.len() as u64);
                            b.append_data(&mut h, name, &bytes[..])?;
                            bytes.len() as u64
                        }
                    };
                    summary.files += 1;
                    summary.bytes += n;
                }
            }
        }
        let w = match b.into_inner()? {
            Packed::Plain(w) => w,
            Packed::Bz2(z) => z.finish()?,
        };
        let f = w.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()
    })();
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("{}: {e}", path.display()).into());
    }
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(())
}

/// The tar's bytes, as they are or bzip2-compressed (`-o NAME.tar.bz2`).
enum Packed<W: Write> {
    Plain(W),
    Bz2(bzip2::write::BzEncoder<W>),
}

impl<W: Write> Write for Packed<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Packed::Plain(w) => w.write(buf),
            Packed::Bz2(w) => w.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Packed::Plain(w) => w.flush(),
            Packed::Bz2(w) => w.flush(),
        }
    }
}

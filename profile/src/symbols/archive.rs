//! `perfpipe archive`: on the recording host, what another machine needs to name a recording's
//! frames, as a tar in perf's build-id-cache layout (so `tar xf ARCHIVE -C ~/.debug` serves perf
//! too, and `--symbols ARCHIVE` reads it in place):
//!
//! - for every file dso a sample (or a callchain frame) hit: `PATH/ID/elf`, the file itself, and
//!   `PATH/ID/debug`, its separate debug file when this host has one (`/usr/lib/debug/.build-id/
//!   xx/rest.debug`), each only when its build id is the dso's, with the link
//!   `.build-id/xx/rest` → `../../PATH/ID`;
//! - when a kernel frame was hit: `[kernel.kallsyms]/ID/kallsyms`, this host's `/proc/kallsyms`
//!   under the running kernel's build id (a copy whose addresses `kptr_restrict` hid is refused);
//! - when the vdso was hit: `[vdso]/ID/vdso`, the image this process maps.
//!
//! It is an output format of the pipeline ([`SPEC`], `symbolize` before it), so it reads what
//! `-i` reads (a pipe stream or a perf.data) and knows the hit dsos exactly as the profiles do.
//! The tar is written beside the output and renamed into place at the end.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use perfpipe_core::spec::{BuildCtx, FormatSpec, Options};
use perfpipe_core::{Batch, Counter, Flow, Sink, StageError};
use perfpipe_stream::model::dso::gnu_build_id_in_notes;

use super::sources::hex;
use crate::symbolize::{Sources, Stacks};

/// How `perfpipe archive` offers the format (it is not among the outputs `-o` chooses).
pub const SPEC: FormatSpec = FormatSpec {
    name: "archive",
    help: "a tar of the files that name the recording's frames, in perf's build-id-cache layout (perfpipe archive)",
    extensions: &[],
    flags: &[],
    options: &[],
    needs: &["symbolize"],
    sets: |_| &[("symbolize", "kernel", "yes")],
    build: build_sink,
};

fn build_sink(_: &BuildCtx, _: &Options, path: &Path) -> Result<Box<dyn Sink>, StageError> {
    Ok(Box::new(ArchiveSink::new(path)))
}

/// What went into an archive.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Files written (not links).
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Dsos hit that got a file.
    pub dsos: usize,
    /// Dsos hit whose file is gone or is another build now: `(name, build id hex)`.
    pub missing: Vec<(String, String)>,
}

/// The sink: collects the frames hit, writes the tar at the end.
#[derive(Debug)]
pub struct ArchiveSink {
    path: PathBuf,
    sources: Option<Sources>,
    hit: rustc_hash::FxHashSet<u32>,
    files: Counter,
    bytes: Counter,
    missing: Counter,
    /// What the last run wrote (for the command's closing lines).
    pub summary: Summary,
}

impl ArchiveSink {
    /// A sink writing `path`.
    pub fn new(path: &Path) -> ArchiveSink {
        ArchiveSink {
            path: path.to_path_buf(),
            sources: None,
            hit: Default::default(),
            files: Counter::new(),
            bytes: Counter::new(),
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
        if self.sources.is_none() {
            self.sources = Some(stacks.sources());
        }
        for s in stacks.samples() {
            self.hit.extend(stacks.frames(s).iter().copied());
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self) -> Result<(), StageError> {
        let members = match &self.sources {
            Some(src) => members(src, &self.hit, &mut self.summary),
            None => Vec::new(),
        };
        write_tar(&self.path, &members, &mut self.summary)?;
        self.files.add(self.summary.files as u64);
        self.bytes.add(self.summary.bytes);
        self.missing.add(self.summary.missing.len() as u64);
        let name = self.path.display();
        eprintln!(
            "perfpipe archive: {} files ({:.1} MiB) for {} dsos in {name}; on the other machine: perfpipe --symbols {name} …, or tar xf {name} -C ~/.debug for perf",
            self.summary.files,
            self.summary.bytes as f64 / (1 << 20) as f64,
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
    Path(PathBuf),
    Bytes(Arc<[u8]>),
}

/// The members for the frames `hit`, by build id (each once).
fn members(src: &Sources, hit: &rustc_hash::FxHashSet<u32>, summary: &mut Summary) -> Vec<Member> {
    let frames = src.table.snapshot();
    let mut dsos = BTreeMap::new();
    let mut kernel = false;
    for &id in hit {
        let Some(f) = frames.get(id as usize) else {
            continue;
        };
        if f.query.kernel {
            kernel = true;
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
                        vec![("vdso", Content::Bytes(Arc::from(img)))],
                    );
                    summary.dsos += 1;
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
        let path = PathBuf::from(&name);
        let matches = |p: &Path| file_build_id(p).is_some_and(|b| b == id);
        let mut files = Vec::new();
        if matches(&path) {
            files.push(("elf", Content::Path(path.clone())));
        }
        let h = hex(&id);
        let debug = PathBuf::from(format!(
            "/usr/lib/debug/.build-id/{}/{}.debug",
            &h[..2],
            &h[2..]
        ));
        if matches(&debug) {
            files.push(("debug", Content::Path(debug)));
        }
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

fn file_build_id(p: &Path) -> Option<Vec<u8>> {
    super::elf::info(&super::elf::Src::open(p)?)?.build_id
}

fn write_tar(path: &Path, members: &[Member], summary: &mut Summary) -> Result<(), StageError> {
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
    let mut b = tar::Builder::new(std::io::BufWriter::new(file));
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
                        Content::Path(p) => {
                            let mut f = std::fs::File::open(p)?;
                            let len = f.metadata()?.len();
                            h.set_size(len);
                            b.append_data(&mut h, name, &mut f)?;
                            len
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
        let mut w = b.into_inner()?;
        w.flush()?;
        w.get_ref().sync_all()
    })();
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("{}: {e}", path.display()).into());
    }
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(())
}

//! `write`, file mode: writes the stream as a file-mode `perf.data`, laid out as
//! `perf_session__do_write_header()` in perf's `tools/perf/util/header.c` lays it out:
//! the 104-byte header, the id arrays, the `perf_file_attr` array, the data section, the feature
//! table and the feature sections.
//!
//! The pipe-only records that belong in the header leave the record stream:
//! - HEADER_ATTR → the attrs section and its ids (every attr is written with the largest
//!   `attr.size` seen, raised like perf does, because perf reads `attr.size` bytes per attr);
//! - HEADER_FEATURE → the feature section of its id (the LAST_FEATURE end mark is dropped);
//! - EVENT_UPDATE of type NAME that names an id as the EVENT_DESC feature (before it in the
//!   stream) does → nowhere: a file names its events in EVENT_DESC, and perf record writes NAME
//!   updates only into a pipe (so does `read` when it makes a pipe of a file); a file → pipe →
//!   file round trip gives the file's data section back. Any other NAME update stays;
//! - HEADER_TRACING_DATA → the TRACING_DATA feature (the blob that follows the record);
//! - HEADER_BUILD_ID → the BUILD_ID feature, rebuilt as `write_buildid()` writes it: the record's
//!   pid, misc and build id, the name NUL-padded to a multiple of 64 (`NAME_ALIGN`); one entry per
//!   distinct (pid, build id, name). When the stream has such records, the table also lists
//!   every id an MMAP2 carries (`PERF_RECORD_MISC_MMAP_BUILD_ID`, perf record's default since
//!   6.17): `perf inject -b` marks those dsos hit at their MMAP2 instead of injecting a record,
//!   and its `write_buildid()` lists every hit dso; a stream with no BUILD_ID record (a plain
//!   recording) gets no table, as perf record writes none for it.
//!
//! Every other record goes to the data section, byte for byte, with `writev(2)`.
//!
//! The file is written under a temporary name in the same directory
//! (`.NAME.perfpipe-PID.tmp`), synced, and renamed to its name at the end of the stream, so a crash
//! never leaves a half-written file under the final name; a run that is dropped before its end
//! removes the temporary file.
//!
//! - **Order**: records in stream order.
//! - **Buffering**: the data section streams out as batches arrive. The id and attr arrays are
//!   written when the first data record arrives (in a pipe every HEADER_ATTR precedes the records
//!   it describes); attrs that arrive later are written after the feature sections and the header
//!   points there (perf follows `attrs.offset`). Feature sections are held in memory to the end.
//! - **EOF**: writes the feature sections and the header, syncs, renames (no file at all when not
//!   even the stream's header arrived). After an upstream error
//!   the end of the stream is still a clean end: the file holds every record before the fault, as
//!   the pipe-mode `write` does.

use std::collections::{BTreeMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::IoSlice;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use perfpipe_core::{Batch, Counter, Flow, Sink, StageError};

use crate::format::header::{
    attr_stride, build_id_entry, event_desc_names, features_section, AttrsSection, FileAttr,
};
use crate::format::{
    feature, Endian, EventHeader, FileHeader, FileSection, RecordType, StreamInfo,
    FILE_HEADER_SIZE, PIPE_HEADER_KIND,
};
use crate::write::{Write, WriteConfig};
use crate::Error;

/// `PERF_EVENT_UPDATE__NAME`.
const EVENT_UPDATE_NAME: u64 = 2;

/// Which format `-o` writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutputMode {
    /// File mode for a regular file (or a path that does not exist yet), pipe mode for standard
    /// output, a FIFO, a character device (`/dev/null`) or anything else.
    #[default]
    Auto,
    /// Always pipe mode (`--pipe`).
    Pipe,
    /// Always file mode (`--file`); standard output cannot be written in file mode.
    File,
}

impl OutputMode {
    /// Whether output to `path` (`None` = standard output) is written in file mode.
    pub fn is_file(self, path: Option<&Path>) -> bool {
        match (self, path) {
            (OutputMode::Pipe, _) | (_, None) => false,
            (OutputMode::File, Some(_)) => true,
            (OutputMode::Auto, Some(p)) => match std::fs::metadata(p) {
                Ok(m) => m.is_file(),
                Err(e) => e.kind() == std::io::ErrorKind::NotFound,
            },
        }
    }
}

/// Configuration of the file-mode `write` sink.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteFileConfig {
    /// The `perf.data` to create (replacing it at the end).
    pub path: PathBuf,
}

impl WriteFileConfig {
    /// Creates the temporary file next to `path`.
    ///
    /// # Errors
    /// [`Error::Io`] if it cannot be created.
    pub fn build(&self) -> Result<WriteFile, Error> {
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = self.path.file_name().unwrap_or_default().to_string_lossy();
        let tmp = dir.join(format!(".{name}.perfpipe-{}.tmp", std::process::id()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(|source| Error::Io {
                op: "create",
                path: tmp.clone(),
                source,
            })?;
        Ok(WriteFile {
            file,
            tmp,
            path: self.path.clone(),
            endian: None,
            attrs: Vec::new(),
            attrs_written: 0,
            features: BTreeMap::new(),
            tracing: None,
            build_ids: Vec::new(),
            seen_ids: HashSet::new(),
            mmap2_ids: Vec::new(),
            build_id_records: false,
            data_offset: None,
            data_size: 0,
            runs: Vec::new(),
            done: false,
            waited: Duration::ZERO,
            moved: Counter::new(),
        })
    }
}

/// The running file-mode `write` sink.
#[derive(Debug)]
pub struct WriteFile {
    file: File,
    tmp: PathBuf,
    path: PathBuf,
    endian: Option<Endian>,
    attrs: Vec<FileAttr>,
    /// How many attrs the array at the front of the file holds.
    attrs_written: usize,
    features: BTreeMap<u32, Vec<u8>>,
    tracing: Option<Vec<u8>>,
    /// The BUILD_ID feature section, one entry per distinct (pid, build id, name).
    build_ids: Vec<u8>,
    /// The entries of `build_ids` without their header.
    seen_ids: HashSet<Vec<u8>>,
    /// Table entries for the ids MMAP2 records carry, added to a table that has entries.
    mmap2_ids: Vec<Vec<u8>>,
    /// Whether a HEADER_BUILD_ID record arrived: the file then gets a table.
    build_id_records: bool,
    /// File offset of the data section, once it has started.
    data_offset: Option<u64>,
    data_size: u64,
    /// Byte ranges of the current batch that go to the data section.
    runs: Vec<(usize, usize)>,
    done: bool,
    waited: Duration,
    /// Header records moved out of the record stream into the header (attrs, features, tracing
    /// data, build ids).
    moved: Counter,
}

impl WriteFile {
    fn io(&self, op: &'static str, source: std::io::Error) -> StageError {
        Error::Io {
            op,
            path: self.tmp.clone(),
            source,
        }
        .into()
    }

    fn e(&self) -> Endian {
        self.endian.unwrap_or_default()
    }

    /// Writes the id arrays and the `perf_file_attr` array at `at`; returns the attrs offset and
    /// where the arrays end.
    fn write_attrs(&mut self, at: u64) -> Result<(u64, u64), StageError> {
        let section = AttrsSection::new(&self.attrs, at, self.e());
        self.file
            .write_all_at(&section.bytes, at)
            .map_err(|err| self.io("write", err))?;
        self.attrs_written = self.attrs.len();
        Ok((section.offset, at + section.bytes.len() as u64))
    }

    /// Starts the data section after the id and attr arrays.
    fn start_data(&mut self) -> Result<u64, StageError> {
        if let Some(at) = self.data_offset {
            return Ok(at);
        }
        let (_, end) = self.write_attrs(FILE_HEADER_SIZE)?;
        self.data_offset = Some(end);
        Ok(end)
    }

    fn add_attr(&mut self, rec: &[u8]) {
        let body = &rec[8.min(rec.len())..];
        self.attrs.push(FileAttr::from_header_attr(body, self.e()));
    }

    fn add_feature(&mut self, rec: &[u8]) {
        let Some(feat) = self.e().u64(rec, 8) else {
            return;
        };
        let body = &rec[16..];
        // The end mark: an empty feature at or past perf 6.1's HEADER_LAST_FEATURE.
        if (body.is_empty() && feat >= u64::from(feature::LAST)) || feat >= 256 {
            return;
        }
        self.features.insert(feat as u32, body.to_vec());
    }

    /// Whether `rec` is an EVENT_UPDATE of type NAME giving an id the name the EVENT_DESC
    /// feature already gives it.
    fn named_already(&self, rec: &[u8]) -> bool {
        let e = self.e();
        if e.u64(rec, 8) != Some(EVENT_UPDATE_NAME) {
            return false;
        }
        let (Some(id), Some(name)) = (e.u64(rec, 16), rec.get(24..)) else {
            return false;
        };
        let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
        let Some(desc) = self.features.get(&feature::EVENT_DESC) else {
            return false;
        };
        event_desc_names(desc, e)
            .iter()
            .any(|(i, n)| *i == id && n.as_slice() == name)
    }

    fn add_build_id(&mut self, rec: &[u8]) {
        let Some(entry) = build_id_entry(rec, self.e()) else {
            return;
        };
        self.build_id_records = true;
        if self.seen_ids.insert(entry[8..].to_vec()) {
            self.build_ids.extend_from_slice(&entry);
        }
    }

    /// Notes the build id an MMAP2 carries as a table entry; the kernel's under its map's name
    /// (`[kernel.kallsyms]_text`) and under `[kernel.kallsyms]`, as perf 7.x's `inject -b` table
    /// lists it.
    fn add_mmap2_id(&mut self, rec: &[u8]) {
        let e = self.e();
        let Some(m) = crate::format::Record::new(rec, e, None).mmap() else {
            return;
        };
        let crate::format::FileId::BuildId(bytes) = m.file_id else {
            return;
        };
        let Some(id) = crate::model::dso::BuildId::new(bytes) else {
            return;
        };
        let kernel = m.cpumode == crate::format::misc::KERNEL;
        let mut names = vec![m.filename];
        if kernel && m.filename.starts_with(b"[kernel.kallsyms]") {
            names.push(b"[kernel.kallsyms]");
        }
        for name in names {
            let rec = crate::buildid::record::build_id(&id, name, kernel, e);
            if let Some(entry) = build_id_entry(&rec, e) {
                if self.seen_ids.insert(entry[8..].to_vec()) {
                    self.mmap2_ids.push(entry);
                }
            }
        }
    }

    /// Writes `self.runs` of `batch` at the end of the data section.
    fn write_runs(&mut self, batch: &Batch) -> Result<(), StageError> {
        const MAX: usize = 64;
        let mut at = self.start_data()? + self.data_size;
        let mut i = 0;
        while i < self.runs.len() {
            let mut slices = [IoSlice::new(&[]); MAX];
            let n = (self.runs.len() - i).min(MAX);
            for (slot, &(s, l)) in slices.iter_mut().zip(&self.runs[i..i + n]) {
                *slot = IoSlice::new(&batch.data[s..s + l]);
            }
            let mut rest = &mut slices[..n];
            while !rest.is_empty() {
                let t0 = Instant::now();
                let r = pwritev(&self.file, rest, at);
                self.waited += t0.elapsed();
                match r {
                    Ok(0) => return Err(self.io("write", std::io::ErrorKind::WriteZero.into())),
                    Ok(w) => {
                        at += w as u64;
                        self.data_size += w as u64;
                        IoSlice::advance_slices(&mut rest, w);
                    }
                    Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(err) => return Err(self.io("write", err)),
                }
            }
            i += n;
        }
        Ok(())
    }

    /// The feature sections in id order: the HEADER_FEATURE ones, tracing data and build ids.
    fn feature_sections(&mut self) -> BTreeMap<u32, Vec<u8>> {
        let mut all = std::mem::take(&mut self.features);
        if let Some(t) = self.tracing.take() {
            all.insert(feature::TRACING_DATA, t);
        }
        if self.build_id_records {
            for entry in self.mmap2_ids.drain(..) {
                self.build_ids.extend_from_slice(&entry);
            }
            all.insert(feature::BUILD_ID, std::mem::take(&mut self.build_ids));
        }
        all
    }

    fn finish_file(&mut self) -> Result<(), StageError> {
        if self.endian.is_none() {
            // Not one record arrived (the input failed before its header): leave no file.
            self.done = true;
            let _ = std::fs::remove_file(&self.tmp);
            return Ok(());
        }
        let e = self.e();
        let data_offset = self.start_data()?;
        let feat_offset = data_offset + self.data_size;
        let features = self.feature_sections();
        let (table, bitmap) = features_section(&features, feat_offset, e);
        self.file
            .write_all_at(&table, feat_offset)
            .map_err(|err| self.io("write", err))?;
        let end = feat_offset + table.len() as u64;
        let mut attrs_at =
            FILE_HEADER_SIZE + self.attrs.iter().map(|a| a.ids.len() as u64).sum::<u64>();
        if self.attrs_written != self.attrs.len() {
            // Attrs that came after the data started: the whole array goes after the features.
            attrs_at = self.write_attrs(end)?.0;
        }
        let attr_size = (attr_stride(&self.attrs) + 16) as u64;
        let h = FileHeader {
            endian: e,
            attr_size,
            attrs: FileSection {
                offset: attrs_at,
                size: attr_size * self.attrs.len() as u64,
            },
            data: FileSection {
                offset: data_offset,
                size: self.data_size,
            },
            features: bitmap,
        }
        .to_bytes();
        self.file
            .write_all_at(&h, 0)
            .map_err(|err| self.io("write", err))?;
        self.file.sync_all().map_err(|err| self.io("sync", err))?;
        std::fs::rename(&self.tmp, &self.path).map_err(|source| Error::Io {
            op: "rename",
            path: self.path.clone(),
            source,
        })?;
        self.done = true;
        // Make the rename durable too; failing to sync a directory is not worth an error.
        if let Some(dir) = self.tmp.parent().and_then(|d| File::open(d).ok()) {
            let _ = dir.sync_all();
        }
        Ok(())
    }
}

/// `pwritev(2)` at `offset`.
fn pwritev(file: &File, bufs: &[IoSlice<'_>], offset: u64) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd as _;
    let n = bufs.len().min(libc::c_int::MAX as usize) as libc::c_int;
    // SAFETY: IoSlice is ABI-compatible with iovec; the kernel only reads the buffers.
    let r = unsafe {
        libc::pwritev(
            file.as_raw_fd(),
            bufs.as_ptr().cast(),
            n,
            offset as libc::off_t,
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

impl Sink for WriteFile {
    fn consume(&mut self, batch: &Batch) -> Result<Flow, StageError> {
        if self.endian.is_none() {
            self.endian = StreamInfo::of(batch).map(|i| i.endian);
        }
        let e = self.e();
        self.runs.clear();
        let mut moved = 0;
        for span in &batch.spans {
            let rec = batch.bytes(span);
            match span.kind {
                PIPE_HEADER_KIND => continue,
                k if k == RecordType::HEADER_ATTR.0 => self.add_attr(rec),
                k if k == RecordType::HEADER_FEATURE.0 => self.add_feature(rec),
                k if k == RecordType::HEADER_BUILD_ID.0 => self.add_build_id(rec),
                k if k == RecordType::HEADER_TRACING_DATA.0 => {
                    let size = EventHeader::parse(rec, e).map_or(rec.len(), |h| h.size.into());
                    if self.tracing.is_none() {
                        self.tracing = Some(rec[size.min(rec.len())..].to_vec());
                    }
                }
                // A NAME update that says what the EVENT_DESC feature says is its pipe form
                // (perf record writes them only into a pipe, `read` synthesizes them when it
                // turns a file into one): it stays out of the data section.
                k if k == RecordType::EVENT_UPDATE.0 && self.named_already(rec) => {}
                _ => {
                    if span.kind == RecordType::MMAP2.0
                        && EventHeader::parse(rec, e)
                            .is_some_and(|h| h.misc & crate::format::misc::MMAP_BUILD_ID != 0)
                    {
                        self.add_mmap2_id(rec);
                    }
                    let (s, l) = (span.start as usize, span.len as usize);
                    match self.runs.last_mut() {
                        Some((rs, rl)) if *rs + *rl == s => *rl += l,
                        _ => self.runs.push((s, l)),
                    }
                    continue;
                }
            }
            moved += 1;
        }
        if moved > 0 {
            self.moved.add(moved);
        }
        if !self.runs.is_empty() {
            self.write_runs(batch)?;
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self) -> Result<(), StageError> {
        self.finish_file()
    }

    fn take_io_wait(&mut self) -> Duration {
        std::mem::take(&mut self.waited)
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![("header_records", self.moved.clone())]
    }
}

impl Drop for WriteFile {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// The output of a run: a pipe-mode stream ([`Write`]) or a file-mode `perf.data` ([`WriteFile`]).
#[derive(Debug)]
pub enum Output {
    /// Pipe mode.
    Pipe(Write),
    /// File mode.
    File(Box<WriteFile>),
}

impl Output {
    /// Opens `cfg.path` in the format `mode` picks for it.
    ///
    /// # Errors
    /// As [`WriteConfig::build`] and [`WriteFileConfig::build`]; [`Error::BadOption`] for `--file`
    /// to standard output.
    pub fn open(cfg: &WriteConfig, mode: OutputMode) -> Result<Output, Error> {
        match &cfg.path {
            None if mode == OutputMode::File => Err(Error::BadOption {
                option: "--file",
                message: "file mode needs a file to write (-o FILE), not standard output".into(),
            }),
            Some(p) if mode.is_file(Some(p)) => Ok(Output::File(Box::new(
                WriteFileConfig { path: p.clone() }.build()?,
            ))),
            _ => Ok(Output::Pipe(cfg.build()?)),
        }
    }

    /// Whether the output is written in file mode.
    pub fn is_file(&self) -> bool {
        matches!(self, Output::File(_))
    }
}

impl Sink for Output {
    fn consume(&mut self, batch: &Batch) -> Result<Flow, StageError> {
        match self {
            Output::Pipe(w) => w.consume(batch),
            Output::File(w) => w.consume(batch),
        }
    }

    fn finish(&mut self) -> Result<(), StageError> {
        match self {
            Output::Pipe(w) => w.finish(),
            Output::File(w) => w.finish(),
        }
    }

    fn take_io_wait(&mut self) -> Duration {
        match self {
            Output::Pipe(w) => w.take_io_wait(),
            Output::File(w) => w.take_io_wait(),
        }
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        match self {
            Output::Pipe(w) => w.counters(),
            Output::File(w) => w.counters(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::format::build::record;
    use crate::format::PIPE_MAGIC;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("perfpipe-wf-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn push(b: &mut Batch, bytes: &[u8], kind: u32) {
        let s = b.append(bytes, kind, 0);
        b.spans.push(s);
    }

    fn batch() -> Batch {
        let mut b = Batch {
            context: Some(Arc::new(StreamInfo::new(Endian::Little))),
            ..Batch::default()
        };
        let mut hdr = PIPE_MAGIC.to_le_bytes().to_vec();
        hdr.extend_from_slice(&16u64.to_le_bytes());
        push(&mut b, &hdr, PIPE_HEADER_KIND);
        b
    }

    /// A HEADER_ATTR with a 64-byte attr (size 64) and the ids 7 and 8.
    fn attr() -> Vec<u8> {
        let mut body = vec![0u8; 64];
        body[4..8].copy_from_slice(&64u32.to_le_bytes());
        body.extend_from_slice(&7u64.to_le_bytes());
        body.extend_from_slice(&8u64.to_le_bytes());
        record(64, 0, &body, false, Endian::Little)
    }

    fn section<'a>(f: &'a [u8], s: &FileSection) -> &'a [u8] {
        &f[s.offset as usize..(s.offset + s.size) as usize]
    }

    #[test]
    fn header_records_go_to_the_header_and_the_rest_to_the_data() {
        let d = dir("layout");
        let path = d.join("out.data");
        let e = Endian::Little;
        let round = record(68, 0, &[], true, e);
        let mut b = batch();
        push(&mut b, &attr(), 64);
        let mut feat = 3u64.to_le_bytes().to_vec();
        feat.extend_from_slice(b"host");
        push(&mut b, &record(80, 0, &feat, false, e), 80);
        push(&mut b, &record(80, 0, &32u64.to_le_bytes(), false, e), 80);
        push(&mut b, &round, 68);
        let mut bid = (-1i32).to_le_bytes().to_vec();
        bid.extend_from_slice(&[0xab; 20]);
        bid.extend_from_slice(&[20, 0, 0, 0]);
        bid.extend_from_slice(b"/bin/x\0");
        let bid = record(67, 0x8002, &bid, true, e);
        push(&mut b, &bid, 67);
        push(&mut b, &bid, 67); // the same id twice: one table entry
        push(&mut b, &round, 68);

        let mut w = WriteFileConfig { path: path.clone() }.build().unwrap();
        assert_eq!(w.consume(&b).unwrap(), Flow::Continue);
        w.finish().unwrap();
        let f = std::fs::read(&path).unwrap();
        let h = FileHeader::parse(&f).unwrap();
        assert_eq!(section(&f, &h.data), [round.clone(), round].concat());
        assert_eq!((h.attr_size, h.attrs.size), (80, 80));
        let ids_at = (h.attrs.offset + 64) as usize;
        let ids = FileSection {
            offset: e.u64(&f, ids_at).unwrap(),
            size: e.u64(&f, ids_at + 8).unwrap(),
        };
        assert_eq!(
            section(&f, &ids),
            [7u64.to_le_bytes(), 8u64.to_le_bytes()].concat()
        );
        let feats = h.feature_sections(&f).unwrap();
        assert_eq!(feats.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [2, 3]);
        assert_eq!(section(&f, &feats[1].1), b"host");
        let table = section(&f, &feats[0].1);
        assert_eq!(table.len(), 36 + 64, "one entry, name padded to 64");
        assert_eq!(&table[36..43], b"/bin/x\0");
        assert_eq!(e.u16(table, 4), Some(0x8002));
        assert!(
            std::fs::read_dir(&d).unwrap().count() == 1,
            "no temporary file left"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn attrs_after_the_data_go_after_the_features() {
        let d = dir("late");
        let path = d.join("out.data");
        let round = record(68, 0, &[], true, Endian::Little);
        let mut first = batch();
        push(&mut first, &round, 68);
        let mut second = batch();
        second.spans.clear();
        second.data.clear();
        push(&mut second, &attr(), 64);
        let mut w = WriteFileConfig { path: path.clone() }.build().unwrap();
        assert_eq!(w.consume(&first).unwrap(), Flow::Continue);
        assert_eq!(w.consume(&second).unwrap(), Flow::Continue);
        w.finish().unwrap();
        let f = std::fs::read(&path).unwrap();
        let h = FileHeader::parse(&f).unwrap();
        assert_eq!(section(&f, &h.data), round);
        assert_eq!(h.attrs.size, 80);
        assert!(h.attrs.offset >= h.data.offset + h.data.size);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn no_file_without_a_stream_and_none_left_when_dropped() {
        let d = dir("empty");
        let path = d.join("out.data");
        let mut w = WriteFileConfig { path: path.clone() }.build().unwrap();
        w.finish().unwrap();
        assert!(!path.exists());
        let w = WriteFileConfig { path: path.clone() }.build().unwrap();
        drop(w);
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn output_mode_follows_the_path() {
        let d = dir("mode");
        let regular = d.join("x.data");
        std::fs::write(&regular, b"").unwrap();
        let null = Path::new("/dev/null");
        assert!(OutputMode::Auto.is_file(Some(&regular)));
        assert!(OutputMode::Auto.is_file(Some(&d.join("new.data"))));
        assert!(!OutputMode::Auto.is_file(Some(null)));
        assert!(!OutputMode::Auto.is_file(None));
        assert!(OutputMode::File.is_file(Some(null)));
        assert!(!OutputMode::Pipe.is_file(Some(&regular)));
        std::fs::remove_dir_all(&d).unwrap();
    }
}

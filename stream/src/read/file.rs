//! `read`, file mode: a file-mode `perf.data` presented as the record stream a pipe gives, so that
//! `decode` and every stage after it work unchanged.
//!
//! `-i FILE` is read this way when its first bytes are a file-mode header, whatever its name; so is
//! standard input when it is a regular file (`perfpipe < perf.data`). The file is read with positioned
//! reads (`pread(2)`), never mapped: a file that shrinks while it is read is an error naming the
//! offset where it now ends, not a SIGBUS. Only its header sections are parsed (header, attrs with
//! their ids, the feature table; by [`perfpipe_format::header`], on the bytes read here), never the
//! data section ahead of time: the first batch is a synthesized pipe preamble and the data section
//! then flows in large chunks, as [`read`](crate::read) reads a pipe.
//!
//! The preamble is what `perf inject` writes when it converts a file to a pipe
//! (`perf_event__synthesize_for_pipe()`), plus the file's build-id table:
//! 1. a pipe header in the file's byte order;
//! 2. one HEADER_ATTR per attr, with its ids from the ids section (an `attr.size` smaller than the
//!    file's attr stride is raised to it, as `perf_session__do_write_header()` does, so that the ids
//!    are found after it);
//! 3. one HEADER_FEATURE per feature section that perf synthesizes for pipes (every known feature
//!    but TRACING_DATA, BUILD_ID, BRANCH_STACK, AUXTRACE, STAT, CACHE, DIR_FORMAT and
//!    HYBRID_TOPOLOGY, which have no pipe form in perf's `feat_ops[]`), the section bytes copied,
//!    then the HEADER_LAST_FEATURE end mark;
//! 4. one EVENT_UPDATE of type NAME per event of the EVENT_DESC feature, after the features as
//!    perf record writes them into a pipe (perf 7.x names a pipe's events from these; perf's own
//!    `inject` from a file writes none, and perf 7.x then prints `cpu-clock:H`);
//! 5. HEADER_TRACING_DATA and its blob when the file has the TRACING_DATA feature (tracepoints);
//! 6. the records of the HEADER_BUILD_ID feature section, as HEADER_BUILD_ID records (perf 6.1
//!    drops this table when it converts to a pipe; perfpipe keeps it), up to a bad entry if one
//!    is found (said and counted: `file_build_id_tables_cut`; perf reads the table as far).
//!
//! Feature sections larger than a record (64 KiB) and unknown feature ids (≥ 32, from a newer perf:
//! perf 6.1 rejects them in a pipe) are left out.
//!
//! - **Order**: preamble, then the data section in file order, as raw batches for `decode`.
//! - **Offsets**: data batches carry their *file* offsets as [`Batch::stream_offset`], so every
//!   error about a record names its byte offset in the file. The preamble counts from 0.
//! - **Buffering**: one batch at a time, read in batch-size chunks with
//!   [`HEADROOM`] before each, like `read`, so resident memory does not grow
//!   with the file.
//! - **EOF**: [`Flow::Stop`] after the end of the data section. A data size of 0 (a `perf record`
//!   that did not finish) means the data runs to the end of the file, as perf processes it.
//!
//! [`Batch::stream_offset`]: perfpipe_core::Batch::stream_offset

use std::fs::File;
use std::io::Read as _;
use std::os::fd::AsFd as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use perfpipe_core::{Counter, Flow, Out, Source, StageError};

use crate::format::build::{self, RecordWriter};
use crate::format::header::{build_id_records, event_desc_names};
use crate::format::{feature, Endian, RecordType, FILE_HEADER_SIZE, PIPE_MAGIC};
use crate::read::{Read, ReadConfig, HEADROOM};
use crate::Error;

pub use crate::format::feature::{display_name as feature_name, in_pipe as synthesized_in_pipe};
pub use crate::format::header::{FileHeader, FileSection};

/// `PERF_EVENT_UPDATE__NAME`: an EVENT_UPDATE record that names the event of an id.
const EVENT_UPDATE_NAME: u64 = 2;

/// Whether the file at `path` is a file-mode `perf.data` (from its first 16 bytes; a short or
/// unreadable file is not). A FIFO or other non-regular file is never opened for this.
pub fn is_file_mode(path: &Path) -> bool {
    let regular = std::fs::metadata(path).is_ok_and(|m| m.is_file());
    let mut head = [0u8; 16];
    regular
        && File::open(path)
            .and_then(|mut f| f.read_exact(&mut head))
            .is_ok()
        && FileHeader::detect(&head)
}

/// Standard input, when it is a regular file holding a file-mode `perf.data` (`perfpipe <
/// perf.data`): it is read like `-i FILE`.
fn stdin_file() -> Option<File> {
    let file = File::from(std::io::stdin().as_fd().try_clone_to_owned().ok()?);
    let mut head = [0u8; 16];
    (file.metadata().ok()?.is_file()
        && file.read_exact_at(&mut head, 0).is_ok()
        && FileHeader::detect(&head))
    .then_some(file)
}

/// Configuration of the file-mode `read` source.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadFileConfig {
    /// The `perf.data` file.
    pub path: PathBuf,
}

impl ReadFileConfig {
    /// Opens the file and checks its header and section bounds (not the data).
    ///
    /// # Errors
    /// [`Error::Io`] if it cannot be opened or read; the errors of [`FileHeader::parse`] and
    /// [`FileHeader::feature_sections`].
    pub fn build(&self) -> Result<ReadFile, Error> {
        let io = |op: &'static str| {
            let path = self.path.clone();
            move |source| Error::Io { op, path, source }
        };
        let file = File::open(&self.path).map_err(io("open"))?;
        ReadFile::from_file(&file, &self.path)
    }
}

impl ReadFile {
    /// Reads the header of an open file-mode `perf.data` (`name` is for errors) and checks it.
    ///
    /// # Errors
    /// As [`ReadFileConfig::build`].
    pub fn from_file(file: &File, name: &Path) -> Result<ReadFile, Error> {
        let io = |op: &'static str| {
            let path = name.to_path_buf();
            move |source| Error::Io { op, path, source }
        };
        let file = file.try_clone().map_err(io("open"))?;
        let len = file.metadata().map_err(io("stat"))?.len();
        let mut r = ReadFile {
            file,
            name: name.to_path_buf(),
            len,
            header: FileHeader {
                endian: Endian::Little,
                attr_size: 0,
                attrs: FileSection::default(),
                data: FileSection::default(),
                features: [0; 4],
            },
            features: Vec::new(),
            started: false,
            pos: 0,
            end: 0,
            data_bytes: Counter::new(),
            build_id_tables_cut: Counter::new(),
        };
        let head = r.read_at(0, len.min(FILE_HEADER_SIZE))?;
        r.header = FileHeader::parse_head(&head, len)?;
        let table = r.header.feature_table();
        table.check(40, "feature table", len)?;
        let table = r.read_at(table.offset, table.size)?;
        r.features = r.header.feature_sections_in(&table, len)?;
        (r.pos, r.end) = (
            r.header.data.offset,
            r.header.data.offset + r.header.data.size,
        );
        Ok(r)
    }

    /// The `size` bytes at file offset `offset`, read with `pread(2)`.
    ///
    /// # Errors
    /// [`Error::Io`] when the read fails, or comes up short because the file shrank since it was
    /// opened (the message names where it now ends).
    fn read_at(&self, offset: u64, size: u64) -> Result<Vec<u8>, Error> {
        let mut buf = vec![0; usize::try_from(size).unwrap_or(usize::MAX)];
        self.read_into(offset, &mut buf)?;
        Ok(buf)
    }

    /// Fills `buf` from file offset `offset`; as [`ReadFile::read_at`].
    fn read_into(&self, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        self.file
            .read_exact_at(buf, offset)
            .map_err(|source| self.read_error(offset, buf.len(), source))
    }

    /// Appends the `len` bytes at file offset `offset` to `buf`, read straight into its spare
    /// capacity: a batch's buffer is not zeroed before the kernel fills it (the zeroing was 2.8 %
    /// of the CPU time of `--weight offcpu` on a 149 MB file). Errors as [`ReadFile::read_at`].
    fn read_append(&self, offset: u64, len: usize, buf: &mut Vec<u8>) -> Result<(), Error> {
        use std::os::fd::AsRawFd as _;
        buf.reserve_exact(len);
        let mut done = 0;
        while done < len {
            let spare = &mut buf.spare_capacity_mut()[..len - done];
            let at = offset + done as u64;
            // SAFETY: the kernel writes at most `spare.len()` bytes into `spare`, which is
            // memory of `buf`'s allocation past its length.
            let r = unsafe {
                libc::pread(
                    self.file.as_raw_fd(),
                    spare.as_mut_ptr().cast(),
                    spare.len(),
                    at as libc::off_t,
                )
            };
            let n = match r {
                0 => {
                    let eof = std::io::ErrorKind::UnexpectedEof.into();
                    return Err(self.read_error(offset, len, eof));
                }
                n if n > 0 => n as usize,
                _ => {
                    let e = std::io::Error::last_os_error();
                    if e.kind() == std::io::ErrorKind::Interrupted {
                        continue;
                    }
                    return Err(self.read_error(offset, len, e));
                }
            };
            // SAFETY: `pread` initialised the first `n` bytes of the spare capacity
            // (`n <= spare.len()`).
            unsafe { buf.set_len(buf.len() + n) };
            done += n;
        }
        Ok(())
    }

    /// The error of a read of `len` bytes at `offset` that failed with `source`: for a read that
    /// came up short, where the file now ends.
    fn read_error(&self, offset: u64, len: usize, source: std::io::Error) -> Error {
        let source = if source.kind() == std::io::ErrorKind::UnexpectedEof {
            let now = self.file.metadata().map_or(0, |m| m.len());
            std::io::Error::new(
                source.kind(),
                format!(
                    "offset {offset}: the file ends at {now}, before the {len} bytes at \
                     {offset}..{} (it was {} bytes when opened: it shrank while being read)",
                    offset + len as u64,
                    self.len
                ),
            )
        } else {
            source
        };
        Error::Io {
            op: "read",
            path: self.name.clone(),
            source,
        }
    }
}

/// The running file-mode `read` source.
#[derive(Debug)]
pub struct ReadFile {
    file: File,
    /// The path, for errors.
    name: PathBuf,
    /// The file's size when opened.
    len: u64,
    header: FileHeader,
    features: Vec<(u32, FileSection)>,
    /// Whether the preamble has been emitted.
    started: bool,
    /// Next file offset of the data section to emit, and its end.
    pos: u64,
    end: u64,
    data_bytes: Counter,
    build_id_tables_cut: Counter,
}

impl ReadFile {
    /// The parsed header.
    pub fn header(&self) -> &FileHeader {
        &self.header
    }

    /// The pipe-mode preamble: pipe header, attrs, features, tracing data, build ids.
    ///
    /// # Errors
    /// [`Error::BadAttr`], [`Error::BadFileHeader`] or [`Error::SectionOutOfBounds`] naming the
    /// file offset of what is wrong; [`Error::Io`] when a header section cannot be read (the file
    /// shrank since it was opened).
    pub fn preamble(&self) -> Result<Vec<u8>, Error> {
        let (h, e) = (&self.header, self.header.endian);
        let attrs = self.read_at(h.attrs.offset, h.attrs.size)?;
        let mut out = Vec::with_capacity(64 << 10);
        out.extend_from_slice(&e.put_u64(PIPE_MAGIC));
        out.extend_from_slice(&e.put_u64(16));

        for (_, a) in h.attrs_in(&attrs, self.len, |ids| self.read_at(ids.offset, ids.size))? {
            // The ids are raw in the file's byte order, as the record carries them.
            let mut w = RecordWriter::new(&mut out, RecordType::HEADER_ATTR, 0, e);
            w.bytes(&a.attr).bytes(&a.ids);
            w.finish();
        }

        let bytes = |s: &FileSection| self.read_at(s.offset, s.size);
        let max_feature = usize::from(u16::MAX) - 16;
        for (feat, s) in &self.features {
            if synthesized_in_pipe(*feat) && (s.size as usize) <= max_feature {
                build::feature(&mut out, e, *feat, &bytes(s)?);
            }
        }
        build::feature(&mut out, e, feature::LAST, &[]);
        // Each event's name, as perf record writes it into a pipe (an EVENT_UPDATE of type
        // NAME, `perf_event__synthesize_event_update_name()`): perf 7.x names a pipe's events
        // from these, not from EVENT_DESC, and would print `cpu-clock:H` for `cpu-clock`.
        if let Some(s) = self
            .features
            .iter()
            .find(|f| f.0 == feature::EVENT_DESC)
            .map(|f| &f.1)
        {
            for (id, name) in event_desc_names(&bytes(s)?, e) {
                let mut w = RecordWriter::new(&mut out, RecordType::EVENT_UPDATE, 0, e);
                w.u64(EVENT_UPDATE_NAME).u64(id).cstr(&name).align8();
                w.finish();
            }
        }

        for (feat, s) in &self.features {
            match *feat {
                feature::TRACING_DATA => {
                    // header.size 16 as perf 6.1 writes it (u32 size + 4 bytes of padding); the
                    // blob follows, zero-padded to 8, its padded size in `size`
                    // (`perf_event__synthesize_tracing_data()`).
                    let padded = s.size.next_multiple_of(8);
                    let size = u32::try_from(padded).map_err(|_| Error::BadFileHeader {
                        offset: s.offset,
                        what: format!("tracing data of {} bytes", s.size),
                    })?;
                    build::tracing_data(&mut out, e, size);
                    out.extend_from_slice(&bytes(s)?);
                    out.resize(out.len() + (padded - s.size) as usize, 0);
                }
                feature::BUILD_ID => self.build_ids(s, &mut out)?,
                _ => {}
            }
        }
        Ok(out)
    }

    /// Appends the records of the HEADER_BUILD_ID feature section, byte for byte. A bad entry
    /// ends the table, as in perf: the entries before it are kept, the rest skipped, said on
    /// standard error and counted (`file_build_id_tables_cut`); the samples are read on.
    fn build_ids(&self, s: &FileSection, out: &mut Vec<u8>) -> Result<(), Error> {
        let bytes = self.read_at(s.offset, s.size)?;
        let (records, bad) = build_id_records(&bytes, s.offset, self.header.endian);
        out.extend(records);
        if let Some(bad) = bad {
            eprintln!(
                "perfpipe: read: {}: {bad}; the build-id table is read up to there, as perf reads it",
                self.name.display()
            );
            self.build_id_tables_cut.add(1);
        }
        Ok(())
    }
}

impl Source for ReadFile {
    fn produce(&mut self, out: &mut Out<'_>) -> Result<Flow, StageError> {
        if !self.started {
            self.started = true;
            let mut batch = out.take();
            batch.data = self.preamble()?;
            batch.start = 0;
            batch.stream_offset = 0;
            out.push(batch);
            return Ok(Flow::Continue);
        }
        let want = (out.batch_bytes().max(4096) as u64).min(self.end - self.pos) as usize;
        if want == 0 {
            return Ok(Flow::Stop);
        }
        let mut batch = out.take();
        batch.data.clear();
        batch.data.reserve_exact(HEADROOM + want);
        batch.data.resize(HEADROOM, 0);
        batch.start = HEADROOM;
        batch.stream_offset = self.pos;
        if let Err(e) = self.read_append(self.pos, want, &mut batch.data) {
            out.recycle(batch);
            return Err(e.into());
        }
        self.pos += want as u64;
        self.data_bytes.add(want as u64);
        out.push(batch);
        Ok(if self.pos == self.end {
            Flow::Stop
        } else {
            Flow::Continue
        })
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![
            ("file_data_bytes", self.data_bytes.clone()),
            ("file_build_id_tables_cut", self.build_id_tables_cut.clone()),
        ]
    }
}

/// The input of a run: a pipe-mode stream (standard input, a FIFO, a pipe-mode file) read by
/// [`Read`], or a file-mode `perf.data` read by [`ReadFile`].
#[derive(Debug)]
pub enum Input {
    /// Pipe mode.
    Pipe(Read),
    /// File mode.
    File(ReadFile),
}

impl Input {
    /// Opens `cfg.path`, in file mode when its first bytes say so (whatever its name), else as a
    /// pipe-mode stream.
    ///
    /// # Errors
    /// As [`ReadConfig::build`] and [`ReadFileConfig::build`].
    pub fn open(cfg: &ReadConfig) -> Result<Input, Error> {
        match &cfg.path {
            Some(p) if is_file_mode(p) => {
                Ok(Input::File(ReadFileConfig { path: p.clone() }.build()?))
            }
            None => match stdin_file() {
                Some(f) => Ok(Input::File(ReadFile::from_file(&f, Path::new("-"))?)),
                None => Ok(Input::Pipe(cfg.build()?)),
            },
            _ => Ok(Input::Pipe(cfg.build()?)),
        }
    }

    /// The file-mode reader, if the input is in file mode.
    pub fn file(&self) -> Option<&ReadFile> {
        match self {
            Input::File(f) => Some(f),
            Input::Pipe(_) => None,
        }
    }

    /// Bytes the source will emit, when known in advance (file mode: the data section, the
    /// preamble being small): for progress and ETA.
    pub fn expected_bytes(&self) -> Option<u64> {
        self.file().map(|f| f.header.data.size)
    }
}

impl Source for Input {
    fn produce(&mut self, out: &mut Out<'_>) -> Result<Flow, StageError> {
        match self {
            Input::Pipe(r) => r.produce(out),
            Input::File(r) => r.produce(out),
        }
    }

    fn take_io_wait(&mut self) -> Duration {
        match self {
            Input::Pipe(r) => r.take_io_wait(),
            Input::File(r) => r.take_io_wait(),
        }
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        match self {
            Input::Pipe(r) => r.counters(),
            Input::File(r) => r.counters(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::EventHeader;

    /// A file-mode input that shrinks after it was opened (a recording overwritten or truncated
    /// while perfpipe reads it) ends the run with an error naming the offset, not a SIGBUS: the
    /// file was mapped until 816e9da, and the copy of a page past the new end killed the process.
    /// The test runs itself in a child process so that such a death fails it rather than killing
    /// the test binary.
    #[test]
    fn input_truncated_while_read_is_an_error() {
        use perfpipe_core::{Pipeline, Settings};

        use crate::decode::DecodeConfig;
        use crate::write::WriteConfig;

        const CHILD: &str = "PERFPIPE_TEST_TRUNCATED_INPUT_CHILD";
        const NAME: &str = "read::file::tests::input_truncated_while_read_is_an_error";
        if !crate::test_child::in_child(CHILD, NAME) {
            return;
        }

        let dir = std::env::temp_dir().join(format!("perfpipe-shrinks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (path, out) = (dir.join("shrinks.data"), dir.join("out"));
        // A header without features, then 1 MiB of FINISHED_ROUND records.
        let size = 1u64 << 20;
        let mut f = FileHeader {
            endian: Endian::Little,
            attr_size: 144,
            attrs: FileSection {
                offset: 104,
                size: 0,
            },
            data: FileSection { offset: 104, size },
            features: [0; 4],
        }
        .to_bytes();
        let round = EventHeader {
            type_: RecordType::FINISHED_ROUND.0,
            misc: 0,
            size: 8,
        }
        .to_bytes(Endian::Little);
        for _ in 0..size / 8 {
            f.extend_from_slice(&round);
        }
        std::fs::write(&path, &f).unwrap();

        let source = ReadFileConfig { path: path.clone() }.build().unwrap();
        let cut = 104 + 8192 + 8;
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_len(cut))
            .unwrap();
        let report = Pipeline::new(Settings {
            batch_bytes: 64 << 10,
            ..Settings::default()
        })
        .source("read", source)
        .stage("decode", DecodeConfig::default().build())
        .sink(
            "write",
            WriteConfig {
                path: Some(out.clone()),
                ..Default::default()
            }
            .build()
            .unwrap(),
        )
        .run();
        let errors: Vec<String> = report.errors.iter().map(|e| e.to_string()).collect();
        assert_eq!(errors.len(), 1, "{errors:?}");
        let e = &errors[0];
        assert!(
            e.contains("offset 104:") && e.contains(&format!("the file ends at {cut}")),
            "{e}"
        );
        assert!(e.contains("shrank while being read"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

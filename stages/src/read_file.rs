//! `read`, file mode: a file-mode `perf.data` presented as the record stream a pipe gives, so that
//! `decode` and every stage after it work unchanged.
//!
//! `-i FILE` is read this way when its first bytes are a file-mode header, whatever its name; so is
//! standard input when it is a regular file (`perfpipe < perf.data`). The file is read with positioned
//! reads (`pread(2)`), never mapped: a file that shrinks while it is read is an error naming the
//! offset where it now ends, not a SIGBUS. Only its header sections are parsed (header, attrs with
//! their ids, the feature table), never the data section ahead of time: the first batch is a
//! synthesized pipe preamble and the data section then flows in large chunks, as
//! [`read`](crate::read) reads a pipe.
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
//! 4. HEADER_TRACING_DATA and its blob when the file has the TRACING_DATA feature (tracepoints);
//! 5. the records of the HEADER_BUILD_ID feature section, as HEADER_BUILD_ID records (perf 6.1
//!    drops this table when it converts to a pipe; perfpipe keeps it).
//!
//! Feature sections larger than a record (64 KiB) and unknown feature ids (≥ 32, from a newer perf:
//! perf 6.1 rejects them in a pipe) are left out.
//!
//! - **Order**: preamble, then the data section in file order, as raw batches for `decode`.
//! - **Offsets**: data batches carry their *file* offsets as [`Batch::stream_offset`], so every
//!   error about a record names its byte offset in the file. The preamble counts from 0.
//! - **Buffering**: one batch at a time, read in batch-size chunks with
//!   [`HEADROOM`](crate::read::HEADROOM) before each, like `read`, so resident memory does not grow
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

use crate::encode;
use crate::format::{
    feature, Attr, Endian, EventHeader, RecordType, EVENT_HEADER_SIZE, FILE_HEADER_SIZE, PIPE_MAGIC,
};
use crate::read::{Read, ReadConfig, HEADROOM};
use crate::Error;

/// Feature names (`enum` in `tools/perf/util/header.h`), index = feature id.
const FEATURE_NAMES: [&str; 32] = [
    "RESERVED",
    "TRACING_DATA",
    "BUILD_ID",
    "HOSTNAME",
    "OSRELEASE",
    "VERSION",
    "ARCH",
    "NRCPUS",
    "CPUDESC",
    "CPUID",
    "TOTAL_MEM",
    "CMDLINE",
    "EVENT_DESC",
    "CPU_TOPOLOGY",
    "NUMA_TOPOLOGY",
    "BRANCH_STACK",
    "PMU_MAPPINGS",
    "GROUP_DESC",
    "AUXTRACE",
    "STAT",
    "CACHE",
    "SAMPLE_TIME",
    "MEM_TOPOLOGY",
    "CLOCKID",
    "DIR_FORMAT",
    "BPF_PROG_INFO",
    "BPF_BTF",
    "COMPRESSED",
    "CPU_PMU_CAPS",
    "CLOCK_DATA",
    "HYBRID_TOPOLOGY",
    "PMU_CAPS",
];

/// The name of a feature id, as perf prints it.
pub fn feature_name(feat: u32) -> String {
    FEATURE_NAMES
        .get(feat as usize)
        .map_or_else(|| format!("feature {feat}"), |n| (*n).to_string())
}

/// Whether perf sends this feature as a HEADER_FEATURE record in a pipe (`feat_ops[].synthesize`,
/// i.e. declared with `FEAT_OPR` in `tools/perf/util/header.c`).
pub fn synthesized_in_pipe(feat: u32) -> bool {
    (3..feature::LAST).contains(&feat) && !matches!(feat, 15 | 18 | 19 | 20 | 24 | 30)
}

/// `struct perf_file_section`: `{u64 offset, size}`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileSection {
    /// `offset`
    pub offset: u64,
    /// `size`
    pub size: u64,
}

/// `struct perf_file_header` (104 bytes), the start of a file-mode `perf.data`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileHeader {
    /// Byte order, from the magic.
    pub endian: Endian,
    /// `attr_size`: `sizeof(struct perf_file_attr)` of the writer (attr + ids section).
    pub attr_size: u64,
    /// `attrs`
    pub attrs: FileSection,
    /// `data`
    pub data: FileSection,
    /// `adds_features`, as 256 bits in feature-id order.
    pub features: [u64; 4],
}

/// Reads `N` bytes at `off`.
fn at<const N: usize>(b: &[u8], off: u64) -> Option<[u8; N]> {
    let off = usize::try_from(off).ok()?;
    b.get(off..off.checked_add(N)?)?.try_into().ok()
}

impl FileHeader {
    /// Whether `head` (the first 16 bytes or more of an input) starts a file-mode `perf.data`:
    /// `PERFILE2` in either byte order and a header size of 104.
    pub fn detect(head: &[u8]) -> bool {
        let (Some(m), Some(s)) = (at::<8>(head, 0), at::<8>(head, 8)) else {
            return false;
        };
        let m = u64::from_le_bytes(m);
        (m == PIPE_MAGIC && u64::from_le_bytes(s) == FILE_HEADER_SIZE)
            || (m == PIPE_MAGIC.swap_bytes() && u64::from_be_bytes(s) == FILE_HEADER_SIZE)
    }

    /// Parses and checks the header of a file of `file.len()` bytes: the attrs and data sections
    /// must lie inside the file.
    ///
    /// # Errors
    /// [`Error::BadFileHeader`] for a short or malformed header, [`Error::SectionOutOfBounds`] for a
    /// section beyond the end of the file.
    pub fn parse(file: &[u8]) -> Result<FileHeader, Error> {
        Self::parse_head(file, file.len() as u64)
    }

    /// [`FileHeader::parse`] from the file's first bytes (104, or all of a shorter file) and its
    /// length.
    ///
    /// # Errors
    /// As [`FileHeader::parse`].
    pub fn parse_head(file: &[u8], len: u64) -> Result<FileHeader, Error> {
        if len < FILE_HEADER_SIZE || (file.len() as u64) < FILE_HEADER_SIZE {
            return Err(Error::BadFileHeader {
                offset: 0,
                what: format!(
                    "truncated: the file has {len} bytes, the header needs {FILE_HEADER_SIZE}"
                ),
            });
        }
        if !Self::detect(file) {
            return Err(Error::BadFileHeader {
                offset: 0,
                what: "not a file-mode perf.data (magic PERFILE2, header size 104)".into(),
            });
        }
        let endian = if file[..8] == PIPE_MAGIC.to_le_bytes() {
            Endian::Little
        } else {
            Endian::Big
        };
        let u = |off: u64| endian.u64(file, off as usize).expect("inside the header");
        let section = |off: u64| FileSection {
            offset: u(off),
            size: u(off + 8),
        };
        let attr_size = u(16);
        if attr_size < 64 + 16 || attr_size % 8 != 0 || attr_size > 4096 {
            return Err(Error::BadFileHeader {
                offset: 16,
                what: format!("attr_size {attr_size} is not a perf_file_attr size"),
            });
        }
        let mut h = FileHeader {
            endian,
            attr_size,
            attrs: section(24),
            data: section(40),
            features: [0; 4],
        };
        check_section(24, "attrs", h.attrs, len)?;
        if h.attrs.size % attr_size != 0 {
            return Err(Error::BadFileHeader {
                offset: 32,
                what: format!(
                    "attrs section size {} is not a multiple of attr_size {attr_size}",
                    h.attrs.size
                ),
            });
        }
        if h.data.size == 0 && h.data.offset <= len {
            // perf record did not finish: process what is there, as perf does.
            h.data.size = len - h.data.offset;
        }
        check_section(40, "data", h.data, len)?;
        let words: [u64; 4] = std::array::from_fn(|i| u(72 + 8 * i as u64));
        h.features = match endian {
            Endian::Little => words,
            // The bitmap is an array of `unsigned long`, whose size the reader cannot know: take it
            // as 64-bit words if that sets HOSTNAME (every perf sets it), else as 32-bit words
            // (`perf_file_header__read()`).
            Endian::Big if words[0] & (1 << 3) != 0 => words,
            Endian::Big => std::array::from_fn(|i| {
                let raw: [u8; 8] = file[72 + 8 * i..80 + 8 * i].try_into().expect("8 bytes");
                let lo = u64::from(u32::from_be_bytes(raw[..4].try_into().expect("4")));
                let hi = u64::from(u32::from_be_bytes(raw[4..].try_into().expect("4")));
                lo | hi << 32
            }),
        };
        Ok(h)
    }

    /// The set feature ids, in bit order (which is also the order of the feature table).
    pub fn feature_ids(&self) -> impl Iterator<Item = u32> + '_ {
        (0..256u32).filter(|&f| self.features[(f / 64) as usize] & (1 << (f % 64)) != 0)
    }

    /// The feature sections, `(id, section)` in table order, checked against the file.
    ///
    /// # Errors
    /// [`Error::SectionOutOfBounds`] when the table or a section lies beyond the end of the file.
    pub fn feature_sections(&self, file: &[u8]) -> Result<Vec<(u32, FileSection)>, Error> {
        let len = file.len() as u64;
        let table = self.feature_table();
        check_section(40, "feature table", table, len)?;
        let (start, end) = (table.offset as usize, (table.offset + table.size) as usize);
        self.feature_sections_in(&file[start..end], len)
    }

    /// Where the feature table is: after the data section, 16 bytes per set feature bit.
    pub fn feature_table(&self) -> FileSection {
        FileSection {
            offset: self.data.offset + self.data.size,
            size: 16 * self.feature_ids().count() as u64,
        }
    }

    /// [`FileHeader::feature_sections`] from the bytes of the [feature
    /// table](FileHeader::feature_table) and the file's length.
    ///
    /// # Errors
    /// [`Error::SectionOutOfBounds`] when a section lies beyond the end of the file.
    ///
    /// # Panics
    /// If `table` is shorter than the feature table.
    pub fn feature_sections_in(
        &self,
        table: &[u8],
        len: u64,
    ) -> Result<Vec<(u32, FileSection)>, Error> {
        let e = self.endian;
        let at = self.feature_table().offset;
        self.feature_ids()
            .enumerate()
            .map(|(i, feat)| {
                let entry = 16 * i;
                let s = FileSection {
                    offset: e.u64(table, entry).expect("the whole table"),
                    size: e.u64(table, entry + 8).expect("the whole table"),
                };
                let entry = at + entry as u64;
                check_section(entry, &format!("feature {}", feature_name(feat)), s, len)?;
                Ok((feat, s))
            })
            .collect()
    }
}

/// Checks that `s` (described at file offset `at`) lies inside a file of `len` bytes.
fn check_section(at: u64, name: &str, s: FileSection, len: u64) -> Result<(), Error> {
    match s.offset.checked_add(s.size) {
        Some(end) if end <= len => Ok(()),
        _ => Err(Error::SectionOutOfBounds {
            offset: at,
            section: name.to_string(),
            start: s.offset,
            size: s.size,
            file_len: len,
        }),
    }
}

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
        };
        let head = r.read_at(0, len.min(FILE_HEADER_SIZE))?;
        r.header = FileHeader::parse_head(&head, len)?;
        let table = r.header.feature_table();
        check_section(40, "feature table", table, len)?;
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
        self.file.read_exact_at(buf, offset).map_err(|source| {
            let source = if source.kind() == std::io::ErrorKind::UnexpectedEof {
                let now = self.file.metadata().map_or(0, |m| m.len());
                std::io::Error::new(
                    source.kind(),
                    format!(
                        "offset {offset}: the file ends at {now}, before the {} bytes at \
                         {offset}..{} (it was {} bytes when opened: it shrank while being read)",
                        buf.len(),
                        offset + buf.len() as u64,
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
        })
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
    /// file offset of what is wrong.
    pub fn preamble(&self) -> Result<Vec<u8>, Error> {
        let (h, e) = (&self.header, self.header.endian);
        let len = self.len;
        // Offsets in `attrs` are relative to the attrs section.
        let attrs = self.read_at(h.attrs.offset, h.attrs.size)?;
        let mut out = Vec::with_capacity(64 << 10);
        out.extend_from_slice(&e.put_u64(PIPE_MAGIC));
        out.extend_from_slice(&e.put_u64(16));

        let stride = (h.attr_size - 16) as usize;
        for i in 0..h.attrs.size / h.attr_size {
            let at_ = h.attrs.offset + i * h.attr_size;
            let a = (i * h.attr_size) as usize;
            let mut body = attrs[a..a + stride].to_vec();
            let ids_at = at_ + stride as u64;
            let ids = FileSection {
                offset: e.u64(&attrs, a + stride).expect("inside attrs"),
                size: e.u64(&attrs, a + stride + 8).expect("inside attrs"),
            };
            check_section(ids_at, &format!("ids of attr {i}"), ids, len)?;
            if ids.size % 8 != 0 || 8 + stride as u64 + ids.size > u64::from(u16::MAX) {
                return Err(Error::BadFileHeader {
                    offset: ids_at,
                    what: format!("attr {i}: ids section of {} bytes", ids.size),
                });
            }
            // The ids follow attr.size bytes in a HEADER_ATTR: make it the stride, as perf does.
            if e.u32(&body, 4) != Some(stride as u32) {
                body[4..8].copy_from_slice(&e.put_u32(stride as u32));
            }
            body.extend_from_slice(&self.read_at(ids.offset, ids.size)?);
            Attr::parse(&body, e).map_err(|source| Error::BadAttr {
                offset: at_,
                source,
            })?;
            out.extend(encode::record(
                RecordType::HEADER_ATTR.0,
                0,
                &body,
                false,
                e,
            ));
        }

        let bytes = |s: &FileSection| self.read_at(s.offset, s.size);
        let max_feature = usize::from(u16::MAX) - 16;
        for (feat, s) in &self.features {
            if synthesized_in_pipe(*feat) && (s.size as usize) <= max_feature {
                let mut rec = EventHeader {
                    type_: RecordType::HEADER_FEATURE.0,
                    misc: 0,
                    size: 16 + s.size as u16,
                }
                .to_bytes(e)
                .to_vec();
                rec.extend_from_slice(&e.put_u64(u64::from(*feat)));
                rec.extend_from_slice(&bytes(s)?);
                out.extend(rec);
            }
        }
        out.extend_from_slice(
            &EventHeader {
                type_: RecordType::HEADER_FEATURE.0,
                misc: 0,
                size: 16,
            }
            .to_bytes(e),
        );
        out.extend_from_slice(&e.put_u64(u64::from(feature::LAST)));

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
                    let mut body = e.put_u32(size).to_vec();
                    body.extend_from_slice(&[0; 4]);
                    out.extend(encode::record(
                        RecordType::HEADER_TRACING_DATA.0,
                        0,
                        &body,
                        false,
                        e,
                    ));
                    out.extend_from_slice(&bytes(s)?);
                    out.resize(out.len() + (padded - s.size) as usize, 0);
                }
                feature::BUILD_ID => self.build_ids(s, &mut out)?,
                _ => {}
            }
        }
        Ok(out)
    }

    /// Appends the records of the HEADER_BUILD_ID feature section, byte for byte.
    fn build_ids(&self, s: &FileSection, out: &mut Vec<u8>) -> Result<(), Error> {
        let e = self.header.endian;
        let table = self.read_at(s.offset, s.size)?;
        let at = |pos: u64| (pos - s.offset) as usize;
        let mut pos = s.offset;
        let end = s.offset + s.size;
        while end - pos >= EVENT_HEADER_SIZE as u64 {
            let h = EventHeader::parse(&table[at(pos)..], e).expect("8 bytes");
            let size = u64::from(h.size);
            if size < 36 || pos + size > end {
                return Err(Error::Malformed {
                    offset: pos,
                    record_type: RecordType::HEADER_BUILD_ID,
                    size: size as usize,
                    what: "an entry of the BUILD_ID feature section must hold 36 bytes and a name, inside the section",
                });
            }
            // write_buildid() leaves header.type 0 in the table: make it a BUILD_ID record.
            out.extend_from_slice(&e.put_u32(RecordType::HEADER_BUILD_ID.0));
            out.extend_from_slice(&table[at(pos) + 4..at(pos + size)]);
            pos += size;
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
        batch.data.reserve_exact(HEADROOM + want);
        batch.data.resize(HEADROOM + want, 0);
        batch.start = HEADROOM;
        batch.stream_offset = self.pos;
        if let Err(e) = self.read_into(self.pos, &mut batch.data[HEADROOM..]) {
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
        vec![("file_data_bytes", self.data_bytes.clone())]
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

    fn header(endian: Endian, data: FileSection, file_len: usize) -> Vec<u8> {
        let mut f = vec![0u8; file_len.max(104)];
        let w = |f: &mut Vec<u8>, off: usize, v: u64| {
            f[off..off + 8].copy_from_slice(&endian.put_u64(v));
        };
        w(&mut f, 0, PIPE_MAGIC);
        w(&mut f, 8, 104);
        w(&mut f, 16, 144);
        w(&mut f, 24, 104);
        w(&mut f, 32, 0);
        w(&mut f, 40, data.offset);
        w(&mut f, 48, data.size);
        w(&mut f, 72, 1 << 3);
        f.truncate(file_len);
        f
    }

    #[test]
    fn detects_both_byte_orders_and_not_pipes() {
        let data = FileSection {
            offset: 104,
            size: 0,
        };
        assert!(FileHeader::detect(&header(Endian::Little, data, 104)));
        assert!(FileHeader::detect(&header(Endian::Big, data, 104)));
        let mut pipe = b"PERFILE2".to_vec();
        pipe.extend_from_slice(&16u64.to_le_bytes());
        assert!(!FileHeader::detect(&pipe));
        assert!(!FileHeader::detect(b"PERFILE2"));
    }

    #[test]
    fn truncated_header_and_sections_name_their_offset() {
        let data = FileSection {
            offset: 104,
            size: 1000,
        };
        let short = header(Endian::Little, data, 60);
        let e = FileHeader::parse(&short).unwrap_err();
        assert_eq!(e.offset(), Some(0));
        assert!(e.to_string().contains("truncated"), "{e}");

        let f = header(Endian::Little, data, 200);
        let e = FileHeader::parse(&f).unwrap_err();
        assert_eq!(e.offset(), Some(40));
        assert!(e.to_string().contains("data section at 104..1104"), "{e}");

        let data = FileSection {
            offset: 104,
            size: 16,
        };
        let f = header(Endian::Big, data, 120);
        let h = FileHeader::parse(&f).unwrap();
        assert_eq!(h.endian, Endian::Big);
        assert_eq!(h.feature_ids().collect::<Vec<_>>(), vec![3]);
        // The feature table (one entry at 120) lies beyond the end.
        let e = h.feature_sections(&f).unwrap_err();
        assert!(e.to_string().contains("feature table"), "{e}");
    }

    #[test]
    fn pipe_features_follow_perf() {
        let yes: Vec<u32> = (0..40).filter(|&f| synthesized_in_pipe(f)).collect();
        assert!(yes.contains(&3) && yes.contains(&31) && yes.contains(&27));
        for no in [0, 1, 2, 15, 18, 19, 20, 24, 30, 32, 33] {
            assert!(!yes.contains(&no), "{no}");
        }
        assert_eq!(feature_name(2), "BUILD_ID");
        assert_eq!(feature_name(40), "feature 40");
    }

    /// A file-mode input that shrinks after it was opened (a recording overwritten or truncated
    /// while perfpipe reads it) ends the run with an error naming the offset, not a SIGBUS: the
    /// file was mapped until 816e9da, and the copy of a page past the new end killed the process.
    /// The test runs itself in a child process so that such a death fails it rather than killing
    /// the test binary.
    #[test]
    fn input_truncated_while_read_is_an_error() {
        use std::os::unix::process::ExitStatusExt as _;

        use perfpipe_core::{Pipeline, Settings};

        use crate::decode::DecodeConfig;
        use crate::write::WriteConfig;

        const CHILD: &str = "PERFPIPE_TEST_TRUNCATED_INPUT_CHILD";
        const NAME: &str = "read_file::tests::input_truncated_while_read_is_an_error";
        if std::env::var_os(CHILD).is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let log = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(
                out.status.signal(),
                None,
                "the child died of a signal (SIGBUS is {}):\n{log}",
                libc::SIGBUS
            );
            assert!(out.status.success(), "the child failed:\n{log}");
            assert!(log.contains("1 passed"), "the child ran no test:\n{log}");
            return;
        }

        let dir = std::env::temp_dir().join(format!("perfpipe-shrinks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (path, out) = (dir.join("shrinks.data"), dir.join("out"));
        // A header without features, then 1 MiB of FINISHED_ROUND records.
        let size = 1u64 << 20;
        let mut f = header(Endian::Little, FileSection { offset: 104, size }, 104);
        f[72..80].fill(0);
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

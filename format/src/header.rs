//! The header of a file-mode `perf.data`, read and written in one place.
//!
//! Layout, as `perf_session__do_write_header()` in `tools/perf/util/header.c` writes it: the
//! 104-byte [`FileHeader`] (magic, size, `attr_size`, the attrs, data and event-types sections,
//! the `adds_features` bitmap); the id arrays and the `perf_file_attr` array ([`FileAttr`],
//! [`AttrsSection`]); the data section; the feature table (`{u64 offset, size}` per set bit, in
//! bit order) and the feature sections ([`features_section`]). The BUILD_ID feature section is a
//! table of `perf_record_header_build_id` entries ([`build_id_entry`], [`build_id_records`]).
//!
//! Reading checks every section against the file's length and names the byte offset of what is
//! wrong ([`HeaderError`]); it never panics on a malformed file.

use std::collections::BTreeMap;

use crate::attr::{Attr, AttrError};
use crate::constants::{feature, RecordType, EVENT_HEADER_SIZE, FILE_HEADER_SIZE, PIPE_MAGIC};
use crate::endian::{Endian, EventHeader};

/// `NAME_ALIGN`: names in the BUILD_ID feature section are NUL-padded to a multiple of this.
pub const NAME_ALIGN: usize = 64;

/// The attr size written when a stream had no HEADER_ATTR (perf 6.1's `sizeof(perf_event_attr)`).
pub const DEFAULT_ATTR_SIZE: usize = 128;

/// Why a file-mode header cannot be used. Each variant names the file offset of the structure at
/// fault.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeaderError {
    /// A short or malformed header field or structure.
    Bad {
        /// Where the bad field or structure is in the file.
        offset: u64,
        /// What is wrong.
        what: String,
    },
    /// A section (attrs, ids, data, the feature table, a feature) that lies beyond the end of
    /// the file.
    SectionOutOfBounds {
        /// Where the section's `{offset, size}` pair is in the file.
        offset: u64,
        /// Which section (`attrs`, `data`, `ids of attr 0`, `feature HOSTNAME`…).
        section: String,
        /// The section's offset.
        start: u64,
        /// The section's size.
        size: u64,
        /// The file's length.
        file_len: u64,
    },
    /// An attr of the attrs section that does not parse.
    Attr {
        /// Where the attr is in the file.
        offset: u64,
        /// What is wrong with it.
        source: AttrError,
    },
    /// An entry of the BUILD_ID feature section shorter than its fixed part, or running past the
    /// section.
    BuildIdEntry {
        /// Where the entry is in the file.
        offset: u64,
        /// Its `header.size`.
        size: usize,
    },
}

impl HeaderError {
    /// The file offset the error is about.
    pub fn offset(&self) -> u64 {
        match self {
            HeaderError::Bad { offset, .. }
            | HeaderError::SectionOutOfBounds { offset, .. }
            | HeaderError::Attr { offset, .. }
            | HeaderError::BuildIdEntry { offset, .. } => *offset,
        }
    }
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderError::Bad { offset, what } => {
                write!(f, "offset {offset}: file-mode perf.data header: {what}")
            }
            HeaderError::SectionOutOfBounds {
                offset,
                section,
                start,
                size,
                file_len,
            } => write!(
                f,
                "offset {offset}: file-mode perf.data: the {section} section at {start}..{} lies \
                 beyond the end of the file ({file_len} bytes); the file is truncated or corrupt",
                start.saturating_add(*size)
            ),
            HeaderError::Attr { offset, source } => write!(f, "offset {offset}: ATTR: {source}"),
            HeaderError::BuildIdEntry { offset, size } => write!(
                f,
                "offset {offset}: BUILD_ID feature entry of {size} bytes: {BUILD_ID_ENTRY_RULE}"
            ),
        }
    }
}

impl std::error::Error for HeaderError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HeaderError::Attr { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// What a BUILD_ID feature entry must be, for [`HeaderError::BuildIdEntry`] messages.
pub const BUILD_ID_ENTRY_RULE: &str =
    "an entry of the BUILD_ID feature section must hold 36 bytes and a name, inside the section";

/// `struct perf_file_section`: `{u64 offset, size}`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileSection {
    /// `offset`
    pub offset: u64,
    /// `size`
    pub size: u64,
}

impl FileSection {
    /// The section's bytes in `file`, or `None` if it lies beyond the end.
    pub fn bytes<'a>(&self, file: &'a [u8]) -> Option<&'a [u8]> {
        let start = usize::try_from(self.offset).ok()?;
        let end = start.checked_add(usize::try_from(self.size).ok()?)?;
        file.get(start..end)
    }

    /// Checks that the section (whose `{offset, size}` is at file offset `at`) lies inside a file
    /// of `len` bytes.
    ///
    /// # Errors
    /// [`HeaderError::SectionOutOfBounds`] naming `at` and `name`.
    pub fn check(&self, at: u64, name: &str, len: u64) -> Result<(), HeaderError> {
        match self.offset.checked_add(self.size) {
            Some(end) if end <= len => Ok(()),
            _ => Err(HeaderError::SectionOutOfBounds {
                offset: at,
                section: name.to_string(),
                start: self.offset,
                size: self.size,
                file_len: len,
            }),
        }
    }
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
    /// must lie inside the file. A data size of 0 (a `perf record` that did not finish) is taken
    /// as "to the end of the file", as perf processes it.
    ///
    /// # Errors
    /// [`HeaderError::Bad`] for a short or malformed header, [`HeaderError::SectionOutOfBounds`]
    /// for a section beyond the end of the file.
    pub fn parse(file: &[u8]) -> Result<FileHeader, HeaderError> {
        Self::parse_head(file, file.len() as u64)
    }

    /// [`FileHeader::parse`] from the file's first bytes (`file`: the 104 header bytes, or all of
    /// a shorter file) and its length `len`, for a reader that does not hold the whole file.
    ///
    /// # Errors
    /// As [`FileHeader::parse`]; [`HeaderError::Bad`] too when `file` holds fewer than 104 bytes
    /// of a longer file.
    pub fn parse_head(file: &[u8], len: u64) -> Result<FileHeader, HeaderError> {
        if len < FILE_HEADER_SIZE {
            return Err(HeaderError::Bad {
                offset: 0,
                what: format!(
                    "truncated: the file has {len} bytes, the header needs {FILE_HEADER_SIZE}"
                ),
            });
        }
        if (file.len() as u64) < FILE_HEADER_SIZE {
            return Err(HeaderError::Bad {
                offset: 0,
                what: format!(
                    "{} header bytes given, the header needs {FILE_HEADER_SIZE}",
                    file.len()
                ),
            });
        }
        if !Self::detect(file) {
            return Err(HeaderError::Bad {
                offset: 0,
                what: "not a file-mode perf.data (magic PERFILE2, header size 104)".into(),
            });
        }
        let endian = if file[..8] == PIPE_MAGIC.to_le_bytes() {
            Endian::Little
        } else {
            Endian::Big
        };
        let u = |off: u64| endian.u64(file, off as usize).unwrap_or(0);
        let section = |off: u64| FileSection {
            offset: u(off),
            size: u(off + 8),
        };
        let attr_size = u(16);
        if attr_size < 64 + 16 || attr_size % 8 != 0 || attr_size > 4096 {
            return Err(HeaderError::Bad {
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
        h.attrs.check(24, "attrs", len)?;
        if h.attrs.size % attr_size != 0 {
            return Err(HeaderError::Bad {
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
        h.data.check(40, "data", len)?;
        let words: [u64; 4] = std::array::from_fn(|i| u(72 + 8 * i as u64));
        h.features = match endian {
            Endian::Little => words,
            // The bitmap is an array of `unsigned long`, whose size the reader cannot know: take it
            // as 64-bit words if that sets HOSTNAME (every perf sets it), else as 32-bit words
            // (`perf_file_header__read()`).
            Endian::Big if words[0] & (1 << feature::HOSTNAME) != 0 => words,
            Endian::Big => std::array::from_fn(|i| {
                let off = 72 + 8 * i as u64;
                let lo = u64::from(endian.u32(file, off as usize).unwrap_or(0));
                let hi = u64::from(endian.u32(file, off as usize + 4).unwrap_or(0));
                lo | hi << 32
            }),
        };
        Ok(h)
    }

    /// The 104 header bytes, in [`endian`](FileHeader::endian) order (`event_types` empty): what
    /// [`parse`](FileHeader::parse) reads back.
    pub fn to_bytes(&self) -> Vec<u8> {
        let e = self.endian;
        let mut h = Vec::with_capacity(FILE_HEADER_SIZE as usize);
        for v in [
            PIPE_MAGIC,
            FILE_HEADER_SIZE,
            self.attr_size,
            self.attrs.offset,
            self.attrs.size,
            self.data.offset,
            self.data.size,
            0,
            0,
        ] {
            h.extend_from_slice(&e.put_u64(v));
        }
        for w in self.features {
            h.extend_from_slice(&e.put_u64(w));
        }
        h
    }

    /// The set feature ids, in bit order (which is also the order of the feature table).
    pub fn feature_ids(&self) -> impl Iterator<Item = u32> + '_ {
        (0..256u32).filter(|&f| self.features[(f / 64) as usize] & (1 << (f % 64)) != 0)
    }

    /// The feature sections, `(id, section)` in table order, checked against the file.
    ///
    /// # Errors
    /// [`HeaderError::SectionOutOfBounds`] when the table or a section lies beyond the end of the
    /// file.
    pub fn feature_sections(&self, file: &[u8]) -> Result<Vec<(u32, FileSection)>, HeaderError> {
        let len = file.len() as u64;
        let table = self.feature_table();
        table.check(40, "feature table", len)?;
        self.feature_sections_in(table.bytes(file).unwrap_or_default(), len)
    }

    /// Where the feature table is: after the data section, 16 bytes per set feature bit. Check
    /// it against the file's length ([`FileSection::check`], at 40 as "feature table") before
    /// reading it.
    pub fn feature_table(&self) -> FileSection {
        FileSection {
            offset: self.data.offset.saturating_add(self.data.size),
            size: 16 * self.feature_ids().count() as u64,
        }
    }

    /// [`FileHeader::feature_sections`] from the bytes of the [feature
    /// table](FileHeader::feature_table) and the file's length `len`, for a reader that does not
    /// hold the whole file.
    ///
    /// # Errors
    /// [`HeaderError::SectionOutOfBounds`] when a section lies beyond the end of the file;
    /// [`HeaderError::Bad`] when `table` is shorter than the feature table.
    pub fn feature_sections_in(
        &self,
        table: &[u8],
        len: u64,
    ) -> Result<Vec<(u32, FileSection)>, HeaderError> {
        let (e, at) = (self.endian, self.feature_table());
        if (table.len() as u64) < at.size {
            return Err(HeaderError::Bad {
                offset: at.offset,
                what: format!(
                    "feature table: {} bytes given, the table has {}",
                    table.len(),
                    at.size
                ),
            });
        }
        self.feature_ids()
            .enumerate()
            .map(|(i, feat)| {
                let entry = 16 * i;
                let s = FileSection {
                    offset: e.u64(table, entry).unwrap_or(0),
                    size: e.u64(table, entry + 8).unwrap_or(0),
                };
                s.check(
                    at.offset + entry as u64,
                    &format!("feature {}", feature::display_name(feat)),
                    len,
                )?;
                Ok((feat, s))
            })
            .collect()
    }

    /// The attrs section: each `perf_file_attr` with the ids its ids section holds, in file order,
    /// as `(file offset, attr)`. An `attr.size` other than the stride (`attr_size` − 16) is set to
    /// the stride, as `perf_session__do_write_header()` does, so that a HEADER_ATTR built from it
    /// finds its ids after the attr.
    ///
    /// # Errors
    /// [`HeaderError::SectionOutOfBounds`] for an ids section beyond the end of the file,
    /// [`HeaderError::Bad`] for one whose size is not whole ids or too large for a HEADER_ATTR
    /// record, [`HeaderError::Attr`] for an attr that does not parse.
    pub fn attrs(&self, file: &[u8]) -> Result<Vec<(u64, FileAttr)>, HeaderError> {
        let len = file.len() as u64;
        // What of the attrs section the file holds: an attr beyond its end is an error of its own.
        let clamp = |at: u64| usize::try_from(at.min(len)).unwrap_or(file.len());
        let section = &file
            [clamp(self.attrs.offset)..clamp(self.attrs.offset.saturating_add(self.attrs.size))];
        self.attrs_in(section, len, |ids| {
            Ok(ids.bytes(file).unwrap_or_default().to_vec())
        })
    }

    /// [`FileHeader::attrs`] from the bytes of the attrs section (`section`, the
    /// [`attrs`](FileHeader::attrs) field's bytes) and the file's length `len`, for a reader that
    /// does not hold the whole file: `ids` is given each attr's ids section (checked against
    /// `len`) and returns its bytes.
    ///
    /// # Errors
    /// As [`FileHeader::attrs`], and whatever `ids` returns.
    pub fn attrs_in<E: From<HeaderError>>(
        &self,
        section: &[u8],
        len: u64,
        mut ids: impl FnMut(FileSection) -> Result<Vec<u8>, E>,
    ) -> Result<Vec<(u64, FileAttr)>, E> {
        let e = self.endian;
        let stride = (self.attr_size - 16) as usize;
        let mut out = Vec::new();
        for i in 0..self.attrs.size / self.attr_size {
            let at_ = self.attrs.offset + i * self.attr_size;
            let local = FileSection {
                offset: i * self.attr_size,
                size: self.attr_size,
            };
            let bytes = local.bytes(section).ok_or_else(|| HeaderError::Bad {
                offset: at_,
                what: format!("attr {i} lies beyond the end of the file"),
            })?;
            let mut attr = bytes[..stride].to_vec();
            let ids_at = at_ + stride as u64;
            let ids_section = FileSection {
                offset: e.u64(bytes, stride).unwrap_or(0),
                size: e.u64(bytes, stride + 8).unwrap_or(0),
            };
            ids_section.check(ids_at, &format!("ids of attr {i}"), len)?;
            if ids_section.size % 8 != 0
                || 8 + stride as u64 + ids_section.size > u64::from(u16::MAX)
            {
                return Err(HeaderError::Bad {
                    offset: ids_at,
                    what: format!("attr {i}: ids section of {} bytes", ids_section.size),
                }
                .into());
            }
            // The ids follow attr.size bytes in a HEADER_ATTR: make it the stride, as perf does.
            if e.u32(&attr, 4) != Some(stride as u32) {
                attr[4..8].copy_from_slice(&e.put_u32(stride as u32));
            }
            let a = FileAttr {
                attr,
                ids: ids(ids_section)?,
            };
            Attr::parse(&a.header_attr_body(), e).map_err(|source| HeaderError::Attr {
                offset: at_,
                source,
            })?;
            out.push((at_, a));
        }
        Ok(out)
    }
}

/// One attr of a file's attrs section: the `perf_event_attr` bytes and the bytes of its ids,
/// both raw in the file's byte order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileAttr {
    /// `perf_event_attr`, `attr.size` bytes of it.
    pub attr: Vec<u8>,
    /// The `u64` ids of the events opened for it.
    pub ids: Vec<u8>,
}

impl FileAttr {
    /// The attr and ids of a HEADER_ATTR record's body (the bytes after its 8-byte header): the
    /// ids start at `attr.size` (64 when it is 0, as perf bench's stream sends it); a partial id
    /// at the end is left out.
    pub fn from_header_attr(body: &[u8], e: Endian) -> FileAttr {
        let size = e.u32(body, 4).unwrap_or(0) as usize;
        let len = if size == 0 { 64 } else { size }.min(body.len());
        FileAttr {
            attr: body[..len].to_vec(),
            ids: body[len..body.len() - (body.len() - len) % 8].to_vec(),
        }
    }

    /// The body of the HEADER_ATTR record that carries this attr: the attr, then its ids.
    pub fn header_attr_body(&self) -> Vec<u8> {
        [&self.attr[..], &self.ids[..]].concat()
    }
}

/// The id arrays and the `perf_file_attr` array of `attrs`, to be written at file offset `at`:
/// every id array, then every attr zero-padded to the stride (the largest `attr.size`, or
/// [`DEFAULT_ATTR_SIZE`] when there is none) with `attr.size` set to it (perf reads `attr.size`
/// bytes per attr) and its ids section `{offset, size}` after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttrsSection {
    /// The bytes to write at `at`.
    pub bytes: Vec<u8>,
    /// The file offset of the `perf_file_attr` array (the header's `attrs.offset`).
    pub offset: u64,
    /// The header's `attr_size`: the stride + 16.
    pub attr_size: u64,
}

impl AttrsSection {
    /// The attrs section of `attrs` written at `at`, in byte order `e`.
    pub fn new(attrs: &[FileAttr], at: u64, e: Endian) -> AttrsSection {
        let stride = attr_stride(attrs);
        let mut buf = Vec::new();
        let mut id_offsets = Vec::with_capacity(attrs.len());
        for a in attrs {
            id_offsets.push(at + buf.len() as u64);
            buf.extend_from_slice(&a.ids);
        }
        let offset = at + buf.len() as u64;
        for (a, id_at) in attrs.iter().zip(id_offsets) {
            let start = buf.len();
            buf.extend_from_slice(&a.attr);
            buf.resize(start + stride, 0);
            buf[start + 4..start + 8].copy_from_slice(&e.put_u32(stride as u32));
            buf.extend_from_slice(&e.put_u64(id_at));
            buf.extend_from_slice(&e.put_u64(a.ids.len() as u64));
        }
        AttrsSection {
            bytes: buf,
            offset,
            attr_size: stride as u64 + 16,
        }
    }

    /// The header's `attrs` section for `count` attrs at [`offset`](AttrsSection::offset).
    pub fn section(&self, count: usize) -> FileSection {
        FileSection {
            offset: self.offset,
            size: self.attr_size * count as u64,
        }
    }
}

/// The attr stride of a file holding `attrs`: the largest `attr.size`, or [`DEFAULT_ATTR_SIZE`].
pub fn attr_stride(attrs: &[FileAttr]) -> usize {
    attrs
        .iter()
        .map(|a| a.attr.len())
        .max()
        .unwrap_or(DEFAULT_ATTR_SIZE)
}

/// The feature table and feature sections of `features` (by id), to be written at file offset
/// `at`, and the `adds_features` bitmap that goes with them. Ids of 256 and above are left out.
pub fn features_section(
    features: &BTreeMap<u32, Vec<u8>>,
    at: u64,
    e: Endian,
) -> (Vec<u8>, [u64; 4]) {
    let features: Vec<_> = features.iter().filter(|(&f, _)| f < 256).collect();
    let mut bitmap = [0u64; 4];
    let mut table = Vec::with_capacity(16 * features.len());
    let mut payload = Vec::new();
    let mut pos = at + 16 * features.len() as u64;
    for (&feat, bytes) in features {
        bitmap[(feat / 64) as usize] |= 1 << (feat % 64);
        table.extend_from_slice(&e.put_u64(pos));
        table.extend_from_slice(&e.put_u64(bytes.len() as u64));
        payload.extend_from_slice(bytes);
        pos += bytes.len() as u64;
    }
    table.extend_from_slice(&payload);
    (table, bitmap)
}

/// The BUILD_ID feature entry for a HEADER_BUILD_ID record, as `write_buildid()` writes it: the
/// record's header (its type and misc kept, its size adjusted), pid and build id, then the name
/// NUL-padded to a multiple of [`NAME_ALIGN`]. `None` for a record shorter than 36 bytes or whose
/// entry would not fit a `u16` size.
pub fn build_id_entry(rec: &[u8], e: Endian) -> Option<Vec<u8>> {
    let h = EventHeader::parse(rec, e)?;
    let size = usize::from(h.size).min(rec.len());
    if size < 36 {
        return None;
    }
    let name = &rec[36..size];
    let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
    let padded = (name.len() + 1).next_multiple_of(NAME_ALIGN);
    let total = u16::try_from(36 + padded).ok()?;
    let mut entry = Vec::with_capacity(usize::from(total));
    entry.extend_from_slice(&EventHeader { size: total, ..h }.to_bytes(e));
    entry.extend_from_slice(&rec[8..36]);
    entry.extend_from_slice(name);
    entry.resize(usize::from(total), 0);
    Some(entry)
}

/// The event names of an EVENT_DESC feature section (`write_event_desc()`: `u32 nr, u32
/// attr_size`, then per event the attr, `u32 nr_ids`, the name as `u32 len` + `len` NUL-padded
/// bytes, and `u64 ids[nr_ids]`): each event's first id and its name, without the NUL. A
/// section that runs short ends the list.
pub fn event_desc_names(section: &[u8], e: Endian) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let (Some(nr), Some(attr_size)) = (e.u32(section, 0), e.u32(section, 4)) else {
        return out;
    };
    let mut at = 8usize;
    for _ in 0..nr {
        let Some(nr_ids) = e.u32(section, at + attr_size as usize) else {
            break;
        };
        at += attr_size as usize + 4;
        let Some(len) = e.u32(section, at) else {
            break;
        };
        let Some(name) = section.get(at + 4..at + 4 + len as usize) else {
            break;
        };
        let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
        at += 4 + len as usize;
        if let Some(id) = e.u64(section, at).filter(|_| nr_ids > 0) {
            out.push((id, name.to_vec()));
        }
        at += 8 * nr_ids as usize;
    }
    out
}

/// The HEADER_BUILD_ID records of a BUILD_ID feature section (`section`, found at file offset
/// `offset`), byte for byte but for the type (`write_buildid()` leaves `header.type` 0 in the
/// table) and the size, rounded up to a multiple of 8 with zeros after the name (perf 6.1's
/// entries are 100 or 164 bytes, which perf 7.x refuses in a pipe). Trailing bytes shorter than
/// a record header are ignored.
///
/// The entries are self-sized, so the first bad one ends what can be read: the records before
/// it are returned with [`HeaderError::BuildIdEntry`] for it (shorter than 36 bytes or running
/// past the section). perf reads such a table up to there too (`perf_header__read_build_ids()`)
/// and goes on with the file, as a reader should: perf 6.12's `inject -b -o FILE` from a pipe
/// writes a section whose first entry is 0 bytes.
pub fn build_id_records(section: &[u8], offset: u64, e: Endian) -> (Vec<u8>, Option<HeaderError>) {
    let mut out = Vec::with_capacity(section.len());
    let mut pos = 0;
    while section.len() - pos >= EVENT_HEADER_SIZE {
        let size = EventHeader::parse(&section[pos..], e).map_or(0, |h| usize::from(h.size));
        if size < 36 || pos + size > section.len() {
            let bad = HeaderError::BuildIdEntry {
                offset: offset + pos as u64,
                size,
            };
            return (out, Some(bad));
        }
        // A record's size must be a multiple of 8 in a pipe (perf 7.x aborts on "BUILD_ID (67)
        // event size 100 is not 8-byte aligned"), and perf 6.1 wrote its table entries 36 bytes
        // + a name padded to 64: the name is NUL-terminated, so zeros pad it to 8 bytes.
        let padded = size.next_multiple_of(8);
        let Ok(padded16) = u16::try_from(padded) else {
            let bad = HeaderError::BuildIdEntry {
                offset: offset + pos as u64,
                size,
            };
            return (out, Some(bad));
        };
        out.extend_from_slice(&e.put_u32(RecordType::HEADER_BUILD_ID.0));
        out.extend_from_slice(&section[pos + 4..pos + 6]);
        out.extend_from_slice(&e.put_u16(padded16));
        out.extend_from_slice(&section[pos + 8..pos + size]);
        out.resize(out.len() + (padded - size), 0);
        pos += size;
    }
    (out, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(endian: Endian, data: FileSection, file_len: usize) -> Vec<u8> {
        let h = FileHeader {
            endian,
            attr_size: 144,
            attrs: FileSection {
                offset: 104,
                size: 0,
            },
            data,
            features: [1 << feature::HOSTNAME, 0, 0, 0],
        };
        let mut f = h.to_bytes();
        f.resize(file_len.max(104), 0);
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
        assert_eq!(e.offset(), 0);
        assert!(e.to_string().contains("truncated"), "{e}");

        let f = header(Endian::Little, data, 200);
        let e = FileHeader::parse(&f).unwrap_err();
        assert_eq!(e.offset(), 40);
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

    /// A whole file from the writing half (header, attrs, data, features), and its header.
    fn written(
        e: Endian,
        attrs: &[FileAttr],
        data: &[u8],
        feats: &BTreeMap<u32, Vec<u8>>,
    ) -> (FileHeader, Vec<u8>) {
        let a = AttrsSection::new(attrs, FILE_HEADER_SIZE, e);
        let data_at = FILE_HEADER_SIZE + a.bytes.len() as u64;
        let (table, bitmap) = features_section(feats, data_at + data.len() as u64, e);
        let h = FileHeader {
            endian: e,
            attr_size: a.attr_size,
            attrs: a.section(attrs.len()),
            data: FileSection {
                offset: data_at,
                size: data.len() as u64,
            },
            features: bitmap,
        };
        let f = [h.to_bytes(), a.bytes, data.to_vec(), table].concat();
        (h, f)
    }

    fn file(e: Endian, attrs: &[FileAttr], data: &[u8], feats: &BTreeMap<u32, Vec<u8>>) -> Vec<u8> {
        written(e, attrs, data, feats).1
    }

    fn attr(e: Endian, size: u32, ids: &[u64]) -> FileAttr {
        let mut attr = vec![0u8; size as usize];
        attr[4..8].copy_from_slice(&e.put_u32(size));
        FileAttr {
            attr,
            ids: ids.iter().flat_map(|&i| e.put_u64(i)).collect(),
        }
    }

    #[test]
    fn parse_reads_back_what_the_writer_wrote() {
        for e in [Endian::Little, Endian::Big] {
            // Two attrs of different sizes: both are written with the larger one.
            let attrs = [attr(e, 64, &[7, 8]), attr(e, 72, &[9])];
            let data = [0x5au8; 48];
            let feats: BTreeMap<u32, Vec<u8>> = [
                (feature::HOSTNAME, b"host".to_vec()),
                (feature::CMDLINE, vec![1; 12]),
                (200, vec![2; 3]),
            ]
            .into();
            let (written, f) = written(e, &attrs, &data, &feats);
            let h = FileHeader::parse(&f).unwrap();
            assert_eq!(h, written);
            assert_eq!((h.endian, h.attr_size), (e, 72 + 16));
            assert_eq!(h.data.bytes(&f), Some(&data[..]));
            let got: Vec<(u32, Vec<u8>)> = h
                .feature_sections(&f)
                .unwrap()
                .into_iter()
                .map(|(id, s)| (id, s.bytes(&f).unwrap().to_vec()))
                .collect();
            assert_eq!(got, feats.clone().into_iter().collect::<Vec<_>>());
            let read = h.attrs(&f).unwrap();
            assert_eq!(read.len(), 2);
            // The ids come back; every attr has the stride as its size, zero-padded.
            assert_eq!(read[0].1.ids, attrs[0].ids);
            assert_eq!(read[1].1, attrs[1]);
            assert_eq!(read[0].1.attr.len(), 72);
            assert_eq!(e.u32(&read[0].1.attr, 4), Some(72));
            let parsed = Attr::parse(&read[0].1.header_attr_body(), e).unwrap();
            assert_eq!(parsed.ids, [7, 8]);
        }
    }

    /// What a reader that holds only the pieces it read (`parse_head`, `feature_table`,
    /// `feature_sections_in`, `attrs_in`; perfpipe's `read::file` reads them with `pread`) gets
    /// is what the whole-file functions give.
    #[test]
    fn pieces_read_as_the_whole_file() {
        for e in [Endian::Little, Endian::Big] {
            let attrs = [attr(e, 64, &[7, 8]), attr(e, 72, &[9])];
            let feats: BTreeMap<u32, Vec<u8>> = [
                (feature::HOSTNAME, b"host".to_vec()),
                (feature::CMDLINE, vec![1; 12]),
            ]
            .into();
            let (_, f) = written(e, &attrs, &[0x5a; 48], &feats);
            let len = f.len() as u64;
            let h = FileHeader::parse_head(&f[..FILE_HEADER_SIZE as usize], len).unwrap();
            assert_eq!(h, FileHeader::parse(&f).unwrap());

            let table = h.feature_table();
            assert_eq!(table.offset, h.data.offset + h.data.size);
            assert_eq!(table.size, 32);
            table.check(40, "feature table", len).unwrap();
            let bytes = table.bytes(&f).unwrap();
            assert_eq!(
                h.feature_sections_in(bytes, len).unwrap(),
                h.feature_sections(&f).unwrap()
            );
            let err = h.feature_sections_in(&bytes[..20], len).unwrap_err();
            assert_eq!(err.offset(), table.offset);

            let mut asked = Vec::new();
            let got = h
                .attrs_in(h.attrs.bytes(&f).unwrap(), len, |ids| {
                    asked.push(ids);
                    Ok::<_, HeaderError>(ids.bytes(&f).unwrap().to_vec())
                })
                .unwrap();
            assert_eq!(got, h.attrs(&f).unwrap());
            assert_eq!(asked.len(), 2);
            assert_eq!(asked.iter().map(|s| s.size).collect::<Vec<_>>(), [16, 8]);
        }
        // The file's length decides truncation; fewer head bytes than 104 is an error too.
        let data = FileSection {
            offset: 104,
            size: 0,
        };
        let f = header(Endian::Little, data, 104);
        let e = FileHeader::parse_head(&f, 60).unwrap_err();
        assert!(e.to_string().contains("the file has 60 bytes"), "{e}");
        let e = FileHeader::parse_head(&f[..50], 104).unwrap_err();
        assert_eq!(e.offset(), 0);
    }

    #[test]
    fn header_attr_bodies_split_at_attr_size() {
        let e = Endian::Little;
        let a = attr(e, 64, &[7, 8]);
        assert_eq!(FileAttr::from_header_attr(&a.header_attr_body(), e), a);
        // attr.size 0 is version 0 (64 bytes); a partial id is dropped.
        let mut body = vec![0u8; 64];
        body.extend_from_slice(&[1; 12]);
        let got = FileAttr::from_header_attr(&body, e);
        assert_eq!((got.attr.len(), got.ids.len()), (64, 8));
    }

    #[test]
    fn bad_attrs_name_their_offset() {
        let e = Endian::Little;
        let mut f = file(e, &[attr(e, 64, &[7])], &[], &BTreeMap::new());
        let h = FileHeader::parse(&f).unwrap();
        let ids_at = h.attrs.offset + h.attr_size - 16;
        f[ids_at as usize + 8..ids_at as usize + 16].copy_from_slice(&e.put_u64(1 << 40));
        let err = h.attrs(&f).unwrap_err();
        assert_eq!(err.offset(), ids_at);
        assert!(err.to_string().contains("ids of attr 0"), "{err}");
        f[ids_at as usize + 8..ids_at as usize + 16].copy_from_slice(&e.put_u64(4));
        let err = h.attrs(&f).unwrap_err();
        assert!(err.to_string().contains("ids section of 4 bytes"), "{err}");
    }

    #[test]
    fn event_desc_names_give_each_events_first_id() {
        let e = Endian::Big;
        let mut sec = Vec::new();
        sec.extend_from_slice(&e.put_u32(2));
        sec.extend_from_slice(&e.put_u32(16)); // attr_size
        for (name, ids) in [(&b"cpu-clock"[..], &[7u64, 8][..]), (b"task-clock", &[9])] {
            sec.extend_from_slice(&[0xaa; 16]);
            sec.extend_from_slice(&e.put_u32(ids.len() as u32));
            let len = (name.len() + 1).next_multiple_of(8);
            sec.extend_from_slice(&e.put_u32(len as u32));
            sec.extend_from_slice(name);
            sec.resize(sec.len() + len - name.len(), 0);
            for id in ids {
                sec.extend_from_slice(&e.put_u64(*id));
            }
        }
        let want = vec![(7, b"cpu-clock".to_vec()), (9, b"task-clock".to_vec())];
        assert_eq!(event_desc_names(&sec, e), want);
        // Cut short: the events read so far.
        assert_eq!(event_desc_names(&sec[..sec.len() - 4], e), want[..1]);
        assert!(event_desc_names(&sec[..6], e).is_empty());
    }

    #[test]
    fn build_id_entries_round_trip_through_records() {
        let e = Endian::Little;
        let mut rec = EventHeader {
            type_: RecordType::HEADER_BUILD_ID.0,
            misc: 0x8002,
            size: 48,
        }
        .to_bytes(e)
        .to_vec();
        rec.extend_from_slice(&e.put_u32(u32::MAX));
        rec.extend_from_slice(&[0xab; 20]);
        rec.extend_from_slice(&[20, 0, 0, 0]);
        rec.extend_from_slice(b"/bin/x\0\0\0\0\0\0");
        let entry = build_id_entry(&rec, e).unwrap();
        assert_eq!(entry.len(), 36 + NAME_ALIGN);
        assert_eq!(&entry[36..43], b"/bin/x\0");
        // In the file the type is 0; reading gives the record back, padded as the table pads it.
        let mut table = entry.clone();
        table[..4].copy_from_slice(&[0; 4]);
        let (back, bad) = build_id_records(&table, 1000, e);
        assert!(bad.is_none());
        // The record is the entry, its size rounded up to 8 (36 + 64 = 100 → 104).
        let mut want = entry.clone();
        want[6..8].copy_from_slice(&e.put_u16(104));
        want.resize(104, 0);
        assert_eq!(back, want);
        assert_eq!(build_id_entry(&back, e).unwrap(), entry);
        // A bad entry ends the table; the entries before it are kept.
        let mut two = table.clone();
        two.extend_from_slice(&table[..40]);
        let (kept, bad) = build_id_records(&two, 1000, e);
        assert_eq!(kept, want);
        let err = bad.unwrap();
        assert_eq!(
            (err.offset(), err.to_string().contains("36 bytes")),
            (1000 + table.len() as u64, true)
        );
        let (none, bad) = build_id_records(&table[..40], 1000, e);
        assert!(none.is_empty() && bad.is_some_and(|b| b.offset() == 1000));
        assert!(build_id_entry(&rec[..30], e).is_none());
    }
}

//! Building records: [`RecordWriter`] writes one record field by field and sizes it at the end;
//! the functions below build each record perfpipe synthesizes from the typed view that reads it
//! back ([`Comm`], [`Mmap`], [`Task`], [`BuildIdEvent`]), with the `sample_id` trailer its attr
//! asks for ([`Trailer`]).
//!
//! Every builder appends to a caller's buffer, so that a stream of many records is built without
//! an allocation per record, and lays the record out as the kernel or perf does: fields, a
//! NUL-terminated name, zero padding to a multiple of 8, then the trailer.

use crate::attr::{Attr, TrailerLayout};
use crate::constants::{misc, RecordType};
use crate::endian::{Endian, EventHeader};
use crate::record::{BuildIdEvent, Comm, FileId, Mmap, SampleId, Task};

/// Writes one record into a buffer: the header first (its size left 0), then the fields in the
/// order they are given; [`finish`](RecordWriter::finish) sets `header.size`.
///
/// ```
/// use perfpipe_format::build::RecordWriter;
/// use perfpipe_format::{Endian, Record, RecordType};
///
/// let mut buf = Vec::new();
/// let mut w = RecordWriter::new(&mut buf, RecordType::COMM, 0, Endian::Little);
/// w.u32(7).u32(7).cstr(b"sh").align8();
/// assert_eq!(w.finish(), 24);
/// let comm = Record::new(&buf, Endian::Little, None).comm().unwrap();
/// assert_eq!((comm.pid, comm.comm), (7, &b"sh"[..]));
/// ```
#[derive(Debug)]
pub struct RecordWriter<'a> {
    out: &'a mut Vec<u8>,
    start: usize,
    e: Endian,
}

impl<'a> RecordWriter<'a> {
    /// Starts a record of `type_` and `misc` at the end of `out`.
    pub fn new(out: &'a mut Vec<u8>, type_: RecordType, misc: u16, e: Endian) -> RecordWriter<'a> {
        let start = out.len();
        let header = EventHeader {
            type_: type_.0,
            misc,
            size: 0,
        };
        out.extend_from_slice(&header.to_bytes(e));
        RecordWriter { out, start, e }
    }

    /// Appends a byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.out.push(v);
        self
    }

    /// Appends a `u16` in the stream's byte order.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.out.extend_from_slice(&self.e.put_u16(v));
        self
    }

    /// Appends a `u32` in the stream's byte order.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.out.extend_from_slice(&self.e.put_u32(v));
        self
    }

    /// Appends a `u64` in the stream's byte order.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.out.extend_from_slice(&self.e.put_u64(v));
        self
    }

    /// Appends bytes as they are.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.out.extend_from_slice(b);
        self
    }

    /// Appends `n` zero bytes.
    pub fn zeros(&mut self, n: usize) -> &mut Self {
        self.out.resize(self.out.len() + n, 0);
        self
    }

    /// Appends a string and its NUL.
    pub fn cstr(&mut self, s: &[u8]) -> &mut Self {
        self.out.extend_from_slice(s);
        self.out.push(0);
        self
    }

    /// Zero-pads the record (header included) to a multiple of 8 bytes.
    pub fn align8(&mut self) -> &mut Self {
        let len = self.out.len() - self.start;
        self.zeros(len.next_multiple_of(8) - len)
    }

    /// Pads the record to a multiple of 8 and appends `trailer`.
    pub fn trailer(&mut self, trailer: Trailer<'_>) -> &mut Self {
        self.align8();
        match trailer {
            Trailer::None => {}
            Trailer::Raw(b) => {
                self.bytes(b);
            }
            Trailer::SampleId(id, layout) => {
                let at = self.out.len();
                let size = usize::from(layout.size);
                self.zeros(size);
                let e = self.e;
                let mut put = |from_end: Option<u8>, v: &[u8]| {
                    if let Some(o) = from_end {
                        let o = at + size - usize::from(o);
                        self.out[o..o + v.len()].copy_from_slice(v);
                    }
                };
                let id_bytes = e.put_u64(id.id.unwrap_or(0));
                put(layout.tid, &e.put_u32(id.pid.unwrap_or(0)));
                put(layout.tid.map(|o| o - 4), &e.put_u32(id.tid.unwrap_or(0)));
                put(layout.time, &e.put_u64(id.time.unwrap_or(0)));
                put(layout.id, &id_bytes);
                put(layout.cpu, &e.put_u32(id.cpu.unwrap_or(0)));
                put(layout.identifier, &id_bytes);
            }
        }
        self
    }

    /// Sets `header.size` and returns the record's length.
    ///
    /// # Panics
    /// Panics if the record exceeds 65535 bytes, the largest `header.size`.
    pub fn finish(self) -> usize {
        let len = self.out.len() - self.start;
        let size = u16::try_from(len).expect("a perf record is at most 65535 bytes");
        self.out[self.start + 6..self.start + 8].copy_from_slice(&self.e.put_u16(size));
        len
    }
}

/// What follows the fields of a kernel non-sample record.
#[derive(Clone, Copy, Debug)]
pub enum Trailer<'a> {
    /// Nothing: the attr has no `sample_id_all`.
    None,
    /// The `sample_id` trailer of this layout (from [`SampleLayout::trailer`]) with these
    /// values; a field the layout has and the [`SampleId`] lacks is written as 0, and so is
    /// `STREAM_ID`.
    ///
    /// [`SampleLayout::trailer`]: crate::SampleLayout::trailer
    SampleId(SampleId, TrailerLayout),
    /// These bytes, as a tool wrote them (perf bench's inject-build-id stream writes 32 zero
    /// bytes whatever the attr).
    Raw(&'a [u8]),
}

impl Trailer<'_> {
    /// The trailer `attr` asks for: `id` laid out as its `sample_id` trailer when it has
    /// `sample_id_all`, else none.
    pub fn of(attr: Option<&Attr>, id: SampleId) -> Trailer<'static> {
        match attr.and_then(|a| a.layout.trailer) {
            Some(layout) => Trailer::SampleId(id, layout),
            None => Trailer::None,
        }
    }
}

/// A record of `type_` and `misc` with `body` after its header, zero-padded to a multiple of 8
/// when `pad8` is set: for a record whose body a caller already has (a rewritten record, a
/// HEADER_FEATURE section).
///
/// # Panics
/// Panics if the record would exceed 65535 bytes, the largest `header.size`.
pub fn record(type_: u32, misc: u16, body: &[u8], pad8: bool, e: Endian) -> Vec<u8> {
    let mut out = Vec::with_capacity((8 + body.len()).next_multiple_of(8));
    let mut w = RecordWriter::new(&mut out, RecordType(type_), misc, e);
    w.bytes(body);
    if pad8 {
        w.align8();
    }
    w.finish();
    out
}

/// A record that is only a header (FINISHED_ROUND, FINISHED_INIT).
pub fn empty(out: &mut Vec<u8>, type_: RecordType, e: Endian) {
    RecordWriter::new(out, type_, 0, e).finish();
}

/// PERF_RECORD_COMM (`misc` COMM_EXEC when `c.exec`).
///
/// # Panics
/// Panics if the record would exceed 65535 bytes.
pub fn comm(out: &mut Vec<u8>, e: Endian, c: &Comm<'_>, trailer: Trailer<'_>) {
    let misc_ = if c.exec { misc::COMM_EXEC } else { 0 };
    let mut w = RecordWriter::new(out, RecordType::COMM, misc_, e);
    w.u32(c.pid).u32(c.tid).cstr(c.comm).trailer(trailer);
    w.finish();
}

/// PERF_RECORD_MMAP (`misc` = `m.cpumode`; the MMAP2-only fields are not written).
///
/// # Panics
/// Panics if the record would exceed 65535 bytes.
pub fn mmap(out: &mut Vec<u8>, e: Endian, m: &Mmap<'_>, trailer: Trailer<'_>) {
    let mut w = RecordWriter::new(out, RecordType::MMAP, m.cpumode, e);
    w.u32(m.pid).u32(m.tid).u64(m.addr).u64(m.len).u64(m.pgoff);
    w.cstr(m.filename).trailer(trailer);
    w.finish();
}

/// PERF_RECORD_MMAP2 (`misc` = `m.cpumode`, plus MMAP_BUILD_ID for a [`FileId::BuildId`]; a
/// [`FileId::None`] is written as device and inode 0).
///
/// # Panics
/// Panics if the record would exceed 65535 bytes.
pub fn mmap2(out: &mut Vec<u8>, e: Endian, m: &Mmap<'_>, trailer: Trailer<'_>) {
    let build_id = matches!(m.file_id, FileId::BuildId(_));
    let misc_ = m.cpumode | if build_id { misc::MMAP_BUILD_ID } else { 0 };
    let mut w = RecordWriter::new(out, RecordType::MMAP2, misc_, e);
    w.u32(m.pid).u32(m.tid).u64(m.addr).u64(m.len).u64(m.pgoff);
    match m.file_id {
        FileId::None => {
            w.zeros(24);
        }
        FileId::Inode {
            maj,
            min,
            ino,
            ino_generation,
        } => {
            w.u32(maj).u32(min).u64(ino).u64(ino_generation);
        }
        FileId::BuildId(id) => {
            let id = &id[..id.len().min(20)];
            w.u8(id.len() as u8).zeros(3).bytes(id).zeros(20 - id.len());
        }
    }
    w.u32(m.prot).u32(m.flags).cstr(m.filename).trailer(trailer);
    w.finish();
}

/// PERF_RECORD_FORK or PERF_RECORD_EXIT (`type_`), with `misc` as given (FORK_EXEC, for one).
///
/// # Panics
/// Panics if the record would exceed 65535 bytes.
pub fn task(
    out: &mut Vec<u8>,
    e: Endian,
    type_: RecordType,
    misc_: u16,
    t: &Task,
    trailer: Trailer<'_>,
) {
    let mut w = RecordWriter::new(out, type_, misc_, e);
    w.u32(t.pid).u32(t.ppid).u32(t.tid).u32(t.ptid).u64(t.time);
    w.trailer(trailer);
    w.finish();
}

/// PERF_RECORD_HEADER_BUILD_ID (`struct perf_record_header_build_id`): pid, the build id in a
/// 20-byte field with its size byte set (perf reads it when `misc` has BUILD_ID_SIZE), the
/// name, padded to a multiple of 8. No `sample_id` trailer.
///
/// # Panics
/// Panics if the record would exceed 65535 bytes.
pub fn build_id(out: &mut Vec<u8>, e: Endian, b: &BuildIdEvent<'_>) {
    let id = &b.build_id[..b.build_id.len().min(20)];
    let mut w = RecordWriter::new(out, RecordType::HEADER_BUILD_ID, b.misc, e);
    w.u32(b.pid as u32).bytes(id).zeros(20 - id.len());
    w.u8(id.len() as u8).zeros(3).cstr(b.filename).align8();
    w.finish();
}

/// PERF_RECORD_HEADER_ATTR: the `perf_event_attr` bytes, then the ids (the attr's `size` field
/// is the caller's: readers find the ids after `attr.size` bytes).
///
/// # Panics
/// Panics if the record would exceed 65535 bytes.
pub fn header_attr(out: &mut Vec<u8>, e: Endian, attr: &[u8], ids: &[u64]) {
    let mut w = RecordWriter::new(out, RecordType::HEADER_ATTR, 0, e);
    w.bytes(attr);
    for &id in ids {
        w.u64(id);
    }
    w.finish();
}

/// PERF_RECORD_HEADER_FEATURE: `u64 feat_id`, then the feature section's bytes, not padded (as
/// perf writes it). An empty section with id [`feature::LAST`](crate::feature::LAST) is the end
/// mark of the feature records.
///
/// # Panics
/// Panics if the record would exceed 65535 bytes.
pub fn feature(out: &mut Vec<u8>, e: Endian, id: u32, data: &[u8]) {
    let mut w = RecordWriter::new(out, RecordType::HEADER_FEATURE, 0, e);
    w.u64(u64::from(id)).bytes(data);
    w.finish();
}

/// PERF_RECORD_HEADER_TRACING_DATA announcing a blob of `size` bytes (already padded to 8) that
/// the caller appends after it: `header.size` 16, as perf 6.1 writes it (`u32 size` and 4 bytes
/// of padding; `perf_event__synthesize_tracing_data()`).
pub fn tracing_data(out: &mut Vec<u8>, e: Endian, size: u32) {
    let mut w = RecordWriter::new(out, RecordType::HEADER_TRACING_DATA, 0, e);
    w.u32(size).zeros(4);
    w.finish();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attr::SampleLayout;
    use crate::constants::sample;
    use crate::record::Record;

    /// An attr of `sample_type` with `sample_id_all`.
    fn attr(sample_type: u64) -> Attr {
        let mut body = vec![0u8; 64];
        body[4..8].copy_from_slice(&64u32.to_le_bytes());
        body[24..32].copy_from_slice(&sample_type.to_le_bytes());
        body[40..48].copy_from_slice(&(1u64 << 18).to_le_bytes());
        Attr::parse(&body, Endian::Little).unwrap()
    }

    fn views<'a>(buf: &'a [u8], e: Endian, a: &'a Attr) -> Vec<Record<'a>> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < buf.len() {
            let size = usize::from(EventHeader::parse(&buf[at..], e).unwrap().size);
            assert_eq!(size % 8, 0, "every record is padded to 8");
            out.push(Record::new(&buf[at..at + size], e, Some(a)));
            at += size;
        }
        out
    }

    #[test]
    fn records_read_back_through_the_views() {
        let a = attr(sample::IDENTIFIER | sample::IP | sample::TID | sample::TIME | sample::CPU);
        for e in [Endian::Little, Endian::Big] {
            let id = SampleId {
                pid: Some(10),
                tid: Some(11),
                time: Some(12_345),
                id: Some(99),
                cpu: Some(3),
            };
            let t = Trailer::of(Some(&a), id);
            let c = Comm {
                pid: 10,
                tid: 11,
                comm: b"worker",
                exec: true,
            };
            let m2 = Mmap {
                pid: 10,
                tid: 11,
                addr: 0x40_0000,
                len: 0x1000,
                pgoff: 0x2000,
                file_id: FileId::Inode {
                    maj: 8,
                    min: 1,
                    ino: 77,
                    ino_generation: 2,
                },
                prot: 5,
                flags: 2,
                filename: b"/usr/bin/true",
                cpumode: misc::USER,
            };
            let m2b = Mmap {
                file_id: FileId::BuildId(&[0xab; 20]),
                filename: b"/lib/x.so",
                ..m2
            };
            let m = Mmap {
                pid: u32::MAX,
                tid: 0,
                file_id: FileId::None,
                prot: 0,
                flags: 0,
                filename: b"[kernel.kallsyms]_text",
                cpumode: misc::KERNEL,
                ..m2
            };
            let f = Task {
                pid: 10,
                ppid: 1,
                tid: 11,
                ptid: 1,
                time: 5,
            };
            let b = BuildIdEvent {
                pid: -1,
                build_id: &[1, 2, 3, 4, 5, 6, 7, 8],
                filename: b"/bin/sh",
                misc: misc::USER | misc::BUILD_ID_SIZE,
            };
            let mut buf = Vec::new();
            comm(&mut buf, e, &c, t);
            mmap2(&mut buf, e, &m2, t);
            mmap2(&mut buf, e, &m2b, t);
            mmap(&mut buf, e, &m, t);
            task(&mut buf, e, RecordType::EXIT, 0, &f, t);
            build_id(&mut buf, e, &b);
            empty(&mut buf, RecordType::FINISHED_ROUND, e);
            let r = views(&buf, e, &a);
            assert_eq!(r.len(), 7);
            assert_eq!(r[0].comm(), Some(c));
            assert_eq!(r[1].mmap(), Some(m2));
            assert_eq!(r[2].mmap(), Some(m2b));
            assert_eq!(r[3].mmap(), Some(m));
            assert_eq!(r[4].task(), Some(f));
            assert_eq!(r[4].record_type(), RecordType::EXIT);
            assert_eq!(r[5].build_id(), Some(b));
            assert_eq!(r[6].sized().len(), 8);
            for rec in &r[..5] {
                assert_eq!(rec.sample_id(), Some(id), "{:?}", rec.record_type());
            }
        }
    }

    #[test]
    fn trailers_follow_the_attr() {
        let e = Endian::Little;
        let c = Comm {
            pid: 1,
            tid: 2,
            comm: b"abcdefg",
            exec: false,
        };
        let id = SampleId {
            pid: Some(1),
            ..SampleId::default()
        };
        // No sample_id_all: no trailer; the name's NUL ends on the 8-byte boundary.
        let mut plain = attr(sample::TID);
        plain.layout = SampleLayout::new(sample::TID, 0, false);
        let mut buf = Vec::new();
        comm(&mut buf, e, &c, Trailer::of(Some(&plain), id));
        assert_eq!(buf.len(), 8 + 8 + 8);
        // TID|TIME|ID|STREAM_ID|CPU: 40 bytes, absent values as 0.
        let all = sample::TID | sample::TIME | sample::ID | sample::STREAM_ID | sample::CPU;
        let a = attr(all);
        let mut buf = Vec::new();
        comm(&mut buf, e, &c, Trailer::of(Some(&a), id));
        assert_eq!(buf.len(), 24 + 40);
        assert_eq!(&buf[24..32], &[1, 0, 0, 0, 0, 0, 0, 0]);
        assert!(buf[32..].iter().all(|&b| b == 0));
        // A raw trailer goes as given.
        let mut buf = Vec::new();
        comm(&mut buf, e, &c, Trailer::Raw(&[7; 32]));
        assert_eq!((buf.len(), buf[24]), (56, 7));
    }

    #[test]
    fn record_is_padded_and_sized() {
        let r = record(68, 0, &[], true, Endian::Little);
        assert_eq!(r, [68, 0, 0, 0, 0, 0, 8, 0]);
        let r = record(67, 2, &[1, 2, 3], true, Endian::Big);
        assert_eq!(r.len(), 16);
        assert_eq!(&r[..8], &[0, 0, 0, 67, 0, 2, 0, 16]);
        assert_eq!(&r[8..11], &[1, 2, 3]);
        assert_eq!(record(1, 0, &[9; 5], false, Endian::Little).len(), 13);
        let mut f = Vec::new();
        feature(&mut f, Endian::Little, 32, &[]);
        assert_eq!(f.len(), 16);
        assert_eq!(u64::from_le_bytes(f[8..].try_into().unwrap()), 32);
        let mut t = Vec::new();
        tracing_data(&mut t, Endian::Big, 4096);
        assert_eq!(t, [0, 0, 0, 66, 0, 0, 0, 16, 0, 0, 16, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn header_attr_parses_back() {
        let e = Endian::Big;
        let mut a = vec![0u8; 64];
        a[4..8].copy_from_slice(&e.put_u32(64));
        let mut buf = Vec::new();
        header_attr(&mut buf, e, &a, &[5, 6]);
        assert_eq!(Attr::parse(&buf[8..], e).unwrap().ids, [5, 6]);
    }

    #[test]
    #[should_panic(expected = "at most 65535")]
    fn oversized_records_panic_as_documented() {
        let mut buf = Vec::new();
        let mut w = RecordWriter::new(&mut buf, RecordType::COMM, 0, Endian::Little);
        w.zeros(65_536);
        w.finish();
    }
}

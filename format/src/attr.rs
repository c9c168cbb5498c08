//! `struct perf_event_attr` and the record layouts it implies.
//!
//! A [`SampleLayout`] is computed once per attr: the offsets of the fixed sample fields, and of the
//! `sample_id` trailer that non-sample records carry when `sample_id_all` is set.

use super::constants::{flag, read_format, sample};
use super::endian::Endian;

/// The fields of `struct perf_event_attr` that perfpipe uses. Offsets are those of the uapi struct.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    /// `type` (e.g. 1 = `PERF_TYPE_SOFTWARE`, 2 = `PERF_TYPE_TRACEPOINT`).
    pub type_: u32,
    /// `size`: the writer's `sizeof(perf_event_attr)`; 0 in some synthesized streams.
    pub size: u32,
    /// `config`
    pub config: u64,
    /// `sample_period` or `sample_freq` (the union at offset 16; which one: [`Attr::freq`]).
    pub sample_period: u64,
    /// `sample_type`
    pub sample_type: u64,
    /// `read_format`
    pub read_format: u64,
    /// The bitfield word after `read_format` (`disabled`, `inherit`, … `sample_id_all` = bit 18),
    /// normalised to little-endian bit numbering for byte-swapped streams.
    pub flags: u64,
    /// Kernel ids of the events opened for this attr (the `u64 id[]` after the attr).
    pub ids: Vec<u64>,
    /// The derived layout.
    pub layout: SampleLayout,
}

/// `PERF_TYPE_TRACEPOINT`: `attr.type` of a tracepoint event, whose `config` is the tracepoint's id
/// (the `ID:` of its format file).
pub const PERF_TYPE_TRACEPOINT: u32 = 2;

/// Size of `perf_event_attr` version 0, the smallest a stream may carry.
pub const ATTR_SIZE_VER0: u32 = 64;

/// Why a HEADER_ATTR body could not be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrError {
    /// The body is shorter than the attr it declares (or than version 0).
    TooShort {
        /// Bytes available.
        have: usize,
        /// Bytes needed.
        need: usize,
    },
    /// `attr.size` is smaller than version 0 or not a multiple of 8.
    BadSize(u32),
    /// A new attr when the stream already declared this many distinct ones (the limit).
    TooMany(usize),
}

impl std::fmt::Display for AttrError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttrError::TooShort { have, need } => {
                write!(f, "attr body of {have} bytes is shorter than {need}")
            }
            AttrError::BadSize(s) => write!(f, "attr.size {s} is not a valid perf_event_attr size"),
            AttrError::TooMany(n) => write!(f, "more than {n} distinct attrs in one stream"),
        }
    }
}

impl std::error::Error for AttrError {}

impl Attr {
    /// Parses the body of a HEADER_ATTR record (the bytes after its 8-byte header): the attr, then
    /// the ids, which start at `attr.size` (the writer's size, per upstream's
    /// `perf_record_header_attr_id()`). `attr.size == 0` is taken as version 0 (64 bytes), as perf
    /// bench's synthesized stream sends it.
    ///
    /// # Errors
    /// [`AttrError`] when the body is too short or `attr.size` is not a valid size.
    pub fn parse(body: &[u8], e: Endian) -> Result<Attr, AttrError> {
        let need = ATTR_SIZE_VER0 as usize;
        let short = AttrError::TooShort {
            have: body.len(),
            need,
        };
        let size = e.u32(body, 4).ok_or(short)?;
        let attr_len = match size {
            0 => ATTR_SIZE_VER0,
            s if s < ATTR_SIZE_VER0 || s % 8 != 0 => return Err(AttrError::BadSize(s)),
            s => s,
        } as usize;
        if body.len() < attr_len {
            return Err(AttrError::TooShort {
                have: body.len(),
                need: attr_len,
            });
        }
        let raw: [u8; 8] = body.get(40..48).ok_or(short)?.try_into().expect("8 bytes");
        let flags = match e {
            Endian::Little => u64::from_le_bytes(raw),
            // A big-endian compiler allocates bitfields from the most significant bit of each byte;
            // perf_event__attr_swap() does not swap the word but reverses the bits of every byte
            // (swap_bitfield), which yields the little-endian layout.
            Endian::Big => u64::from_le_bytes(raw.map(u8::reverse_bits)),
        };
        let sample_type = e.u64(body, 24).ok_or(short)?;
        let read_format = e.u64(body, 32).ok_or(short)?;
        let ids = body[attr_len..]
            .chunks_exact(8)
            .map(|c| e.u64(c, 0).unwrap_or(0))
            .collect();
        Ok(Attr {
            type_: e.u32(body, 0).ok_or(short)?,
            size,
            config: e.u64(body, 8).ok_or(short)?,
            sample_period: e.u64(body, 16).ok_or(short)?,
            sample_type,
            read_format,
            flags,
            ids,
            layout: SampleLayout::new(sample_type, read_format, flags & flag::SAMPLE_ID_ALL != 0),
        })
    }

    /// Whether `sample_period` is a frequency (`freq`), so each sample carries its period.
    pub fn freq(&self) -> bool {
        self.flags & flag::FREQ != 0
    }

    /// The period of a sample that does not carry one (`PERF_SAMPLE_PERIOD` not set): the
    /// fixed `sample_period`, as perf takes it (`evsel__parse_sample()`), or 1.
    pub fn fixed_period(&self) -> u64 {
        if self.freq() || self.sample_period == 0 {
            1
        } else {
            self.sample_period
        }
    }

    /// Whether non-sample records of this attr carry a `sample_id` trailer.
    pub fn sample_id_all(&self) -> bool {
        self.flags & flag::SAMPLE_ID_ALL != 0
    }
}

/// Where the fields of a SAMPLE record and of the `sample_id` trailer are, for one attr.
///
/// Sample offsets count from the start of the record (the 8-byte header included). Trailer offsets
/// count back from the end of the record, as perf parses it (`perf_evsel__parse_id_sample()`), since
/// bytes between a payload and its trailer are allowed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleLayout {
    /// `sample_type` of the attr.
    pub sample_type: u64,
    /// `read_format` of the attr.
    pub read_format: u64,
    /// Offset of `PERF_SAMPLE_IDENTIFIER`.
    pub identifier: Option<u16>,
    /// Offset of `PERF_SAMPLE_IP`.
    pub ip: Option<u16>,
    /// Offset of `PERF_SAMPLE_TID` (`u32 pid, tid`).
    pub tid: Option<u16>,
    /// Offset of `PERF_SAMPLE_TIME`.
    pub time: Option<u16>,
    /// Offset of `PERF_SAMPLE_ADDR`.
    pub addr: Option<u16>,
    /// Offset of `PERF_SAMPLE_ID`.
    pub id: Option<u16>,
    /// Offset of `PERF_SAMPLE_STREAM_ID`.
    pub stream_id: Option<u16>,
    /// Offset of `PERF_SAMPLE_CPU` (`u32 cpu, res`).
    pub cpu: Option<u16>,
    /// Offset of `PERF_SAMPLE_PERIOD`.
    pub period: Option<u16>,
    /// Offset just after the fixed part (where `READ`, if any, starts).
    pub fixed_end: u16,
    /// Offset of the id used to find the attr of a sample (`id_pos`), if any.
    pub sample_id_offset: Option<u16>,
    /// The `sample_id` trailer of non-sample records, if `sample_id_all`.
    pub trailer: Option<TrailerLayout>,
}

/// Offsets, counted back from the record's end, of the `sample_id` trailer fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrailerLayout {
    /// Size of the trailer in bytes.
    pub size: u8,
    /// `TID` (`u32 pid, tid`): bytes before the end.
    pub tid: Option<u8>,
    /// `TIME`: bytes before the end.
    pub time: Option<u8>,
    /// `ID`: bytes before the end.
    pub id: Option<u8>,
    /// `STREAM_ID`: bytes before the end.
    pub stream_id: Option<u8>,
    /// `CPU`: bytes before the end.
    pub cpu: Option<u8>,
    /// `IDENTIFIER`: bytes before the end.
    pub identifier: Option<u8>,
}

impl TrailerLayout {
    /// The offset, back from the end, of the id that tells attrs apart (`is_pos`), if any.
    pub fn id_offset(&self) -> Option<u8> {
        self.identifier.or(self.id)
    }
}

impl SampleLayout {
    /// Computes the layout for a `sample_type`, `read_format` and `sample_id_all`.
    pub fn new(sample_type: u64, read_format: u64, sample_id_all: bool) -> SampleLayout {
        let mut off = 8u16;
        let mut field = |bit: u64| {
            (sample_type & bit != 0).then(|| {
                let at = off;
                off += 8;
                at
            })
        };
        let identifier = field(sample::IDENTIFIER);
        let ip = field(sample::IP);
        let tid = field(sample::TID);
        let time = field(sample::TIME);
        let addr = field(sample::ADDR);
        let id = field(sample::ID);
        let stream_id = field(sample::STREAM_ID);
        let cpu = field(sample::CPU);
        let period = field(sample::PERIOD);
        let trailer = sample_id_all.then(|| {
            let bits = [
                sample::TID,
                sample::TIME,
                sample::ID,
                sample::STREAM_ID,
                sample::CPU,
                sample::IDENTIFIER,
            ];
            let n = bits.iter().filter(|&&b| sample_type & b != 0).count() as u8;
            let size = 8 * n;
            let mut at = 0u8;
            let mut slot = |bit: u64| {
                (sample_type & bit != 0).then(|| {
                    let from_end = size - at;
                    at += 8;
                    from_end
                })
            };
            TrailerLayout {
                size,
                tid: slot(sample::TID),
                time: slot(sample::TIME),
                id: slot(sample::ID),
                stream_id: slot(sample::STREAM_ID),
                cpu: slot(sample::CPU),
                identifier: slot(sample::IDENTIFIER),
            }
        });
        SampleLayout {
            sample_type,
            read_format,
            identifier,
            ip,
            tid,
            time,
            addr,
            id,
            stream_id,
            cpu,
            period,
            fixed_end: off,
            sample_id_offset: identifier.or(id),
            trailer,
        }
    }

    /// Size in bytes of the `READ` group of a sample starting at `at` in `rec`, or `None` if it runs
    /// past the record.
    pub fn read_size(&self, rec: &[u8], at: usize, e: Endian) -> Option<usize> {
        if self.sample_type & sample::READ == 0 {
            return Some(0);
        }
        let rf = self.read_format;
        let extra = |bit: u64| if rf & bit != 0 { 8 } else { 0 };
        if rf & read_format::GROUP != 0 {
            let nr = e.u64(rec, at)? as usize;
            let head =
                8 + extra(read_format::TOTAL_TIME_ENABLED) + extra(read_format::TOTAL_TIME_RUNNING);
            let each = 8 + extra(read_format::ID) + extra(read_format::LOST);
            let size = nr.checked_mul(each)?.checked_add(head)?;
            (at.checked_add(size)? <= rec.len()).then_some(size)
        } else {
            Some(
                8 + extra(read_format::TOTAL_TIME_ENABLED)
                    + extra(read_format::TOTAL_TIME_RUNNING)
                    + extra(read_format::ID)
                    + extra(read_format::LOST),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_of_perf_record_pipe_default() {
        // perf record -o - forces a sample id: IP|TID|TIME|CALLCHAIN|ID = 0x67.
        let l = SampleLayout::new(0x67, 0, true);
        assert_eq!(l.ip, Some(8));
        assert_eq!(l.tid, Some(16));
        assert_eq!(l.time, Some(24));
        assert_eq!(l.id, Some(32));
        assert_eq!(l.fixed_end, 40);
        assert_eq!(l.sample_id_offset, Some(32));
        let t = l.trailer.unwrap();
        assert_eq!(
            (t.size, t.tid, t.time, t.id),
            (24, Some(24), Some(16), Some(8))
        );
        assert_eq!(t.id_offset(), Some(8));
    }

    #[test]
    fn identifier_comes_first_in_samples_and_last_in_trailers() {
        let l = SampleLayout::new(
            sample::IDENTIFIER | sample::IP | sample::TID | sample::CPU,
            0,
            true,
        );
        assert_eq!(l.identifier, Some(8));
        assert_eq!(l.ip, Some(16));
        assert_eq!(l.cpu, Some(32));
        let t = l.trailer.unwrap();
        assert_eq!(
            (t.size, t.identifier, t.tid, t.cpu),
            (24, Some(8), Some(24), Some(16))
        );
    }
}

//! `decode`: frames the raw byte stream into records, without copying them.
//!
//! - Validates the pipe header (`PERFILE2`, size 16). A byte-swapped stream (`2ELIFREP`, recorded on a
//!   big-endian machine) is supported: records are framed with swapped sizes and [`StreamInfo`] says
//!   which byte order field readers must use. A file-mode `perf.data` gets an error that says how to
//!   convert it.
//! - Emits the header as a record of kind [`PIPE_HEADER_KIND`], then one span per record, with the
//!   record type as `kind` and the index of its attr as `tag`. Records stay slices of the batch buffer.
//! - A record split across two input batches is completed by copying its first part (at most 64 KiB)
//!   into the headroom that `read` leaves before the next batch. Larger units (tracing data) are
//!   accumulated in a side buffer.
//! - Records whose payload lies outside `header.size` (HEADER_TRACING_DATA, AUXTRACE) are framed
//!   together with that payload as one span, so no later stage can desynchronise on them.
//! - Keeps the HEADER_ATTR state and attaches it to each batch as a shared [`StreamInfo`], with the
//!   tracepoints' formats from HEADER_TRACING_DATA ([`crate::format::tracing`]); faults in the
//!   tracing data are printed and counted (`tracing_data_errors`), never fatal.
//!
//! **Order**: input order. **Buffering**: at most one partial record. **EOF**: a partial record left
//! over is an error ([`Error::Truncated`]); every complete record before it has been emitted.

use std::sync::Arc;

use perfpipe_core::{Batch, Counter, Flow, Out, Span, Stage, StageError};

use crate::format::{
    Attr, AttrError, Endian, EventHeader, RecordType, StreamInfo, EVENT_HEADER_SIZE,
    FILE_HEADER_SIZE, MAX_ATTRS, OTHER_KIND, PIPE_HEADER_KIND, PIPE_HEADER_SIZE, PIPE_MAGIC,
};

use crate::format::tracing::TracingData;
use crate::Error;

/// Largest payload accepted after a HEADER_TRACING_DATA or AUXTRACE record.
pub const MAX_PAYLOAD: u64 = 1 << 30;

/// Configuration of the `decode` stage (it has no options yet).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DecodeConfig {}

impl DecodeConfig {
    /// Builds the stage.
    pub fn build(&self) -> Decode {
        Decode {
            info: None,
            carry: Vec::new(),
            carry_offset: 0,
            need: 0,
            unknown_types: Counter::new(),
            tracing_errors: Counter::new(),
            first_time: Counter::new(),
            last_time: Counter::new(),
        }
    }
}

/// The running `decode` stage.
#[derive(Debug)]
pub struct Decode {
    /// `None` until the pipe header has been read.
    info: Option<Arc<StreamInfo>>,
    /// Bytes of an incomplete unit (or header) left over from the previous batch.
    carry: Vec<u8>,
    /// Input offset of `carry[0]`.
    carry_offset: u64,
    /// Total size of the unit that starts the carry, when known (0 if not yet known).
    need: usize,
    unknown_types: Counter,
    /// Faults met in the tracing data (each also printed).
    tracing_errors: Counter,
    /// Time of the first sample, for event-time progress.
    first_time: Counter,
    /// Latest sample time seen (samples from different CPUs interleave out of order).
    last_time: Counter,
}

/// What framing one batch ended with.
enum Framed {
    /// All complete units were framed; the rest (from this data offset) is a partial unit.
    Rest(usize, usize),
    /// An error at a data offset.
    Failed(Error),
}

impl Decode {
    /// Joins the carry with the new batch. Returns `None` when the carried unit is still incomplete.
    fn join(&mut self, mut batch: Batch, out: &Out<'_>) -> Option<Batch> {
        if self.carry.is_empty() {
            return Some(batch);
        }
        let n = self.carry.len();
        if n <= batch.start {
            batch.start -= n;
            batch.stream_offset -= n as u64;
            let start = batch.start;
            batch.data[start..start + n].copy_from_slice(&self.carry);
            self.carry.clear();
            return Some(batch);
        }
        // A big unit (tracing data): accumulate it in the side buffer until it is complete.
        self.carry.extend_from_slice(batch.payload());
        out.recycle(batch);
        if self.need != 0 && self.carry.len() < self.need {
            return None;
        }
        let mut joined = out.take();
        std::mem::swap(&mut joined.data, &mut self.carry);
        joined.start = 0;
        joined.stream_offset = self.carry_offset;
        Some(joined)
    }

    /// Frames the pipe header at `data[pos..]`; returns the stream info and the header's size.
    fn header(data: &[u8], offset: u64) -> Result<Option<StreamInfo>, Error> {
        let Some(magic) = data.get(..8) else {
            return Ok(None);
        };
        let magic = u64::from_le_bytes(magic.try_into().expect("8 bytes"));
        let endian = if magic == PIPE_MAGIC {
            Endian::Little
        } else if magic == PIPE_MAGIC.swap_bytes() {
            Endian::Big
        } else {
            return Err(Error::BadMagic {
                offset,
                found: String::from_utf8_lossy(&data[..8]).into_owned(),
            });
        };
        let Some(size) = endian.u64(data, 8) else {
            return Ok(None);
        };
        match size {
            16 => Ok(Some(StreamInfo::new(endian))),
            FILE_HEADER_SIZE => Err(Error::FileMode),
            size => Err(Error::BadHeaderSize {
                offset: offset + 8,
                size,
            }),
        }
    }

    /// Frames every complete unit of `batch.data[batch.start..]` into `batch.spans`.
    fn frame(&mut self, batch: &mut Batch) -> Framed {
        let base = batch.start;
        let offset0 = batch.stream_offset;
        let at = |pos: usize| offset0 + (pos - base) as u64;
        let data = &batch.data[..];
        let end = data.len();
        let mut pos = base;
        self.need = 0;

        let info = match &mut self.info {
            Some(info) => info,
            None => match Self::header(&data[pos..], at(pos)) {
                Ok(Some(info)) => {
                    batch.spans.push(Span {
                        start: pos as u32,
                        len: PIPE_HEADER_SIZE as u32,
                        kind: PIPE_HEADER_KIND,
                        tag: 0,
                    });
                    pos += PIPE_HEADER_SIZE;
                    self.info.insert(Arc::new(info))
                }
                Ok(None) => {
                    self.need = PIPE_HEADER_SIZE;
                    return Framed::Rest(pos, end);
                }
                Err(e) => return Framed::Failed(e),
            },
        };
        let e = info.endian;

        while end - pos >= EVENT_HEADER_SIZE {
            let h = EventHeader::parse(&data[pos..], e).expect("8 bytes available");
            let rt = RecordType(h.type_);
            let size = usize::from(h.size);
            if size < EVENT_HEADER_SIZE {
                return Framed::Failed(Error::RecordTooSmall {
                    offset: at(pos),
                    record_type: rt,
                    size: h.size,
                });
            }
            let known = rt.name().is_some() && rt != RecordType::PIPE_HEADER;
            if h.type_ == 0 || h.type_ > 0xffff || (!known && size % 8 != 0) {
                return Framed::Failed(Error::InvalidType {
                    offset: at(pos),
                    type_: h.type_,
                    size: h.size,
                });
            }
            // Bytes that belong to this record beyond header.size.
            let payload = match rt {
                RecordType::HEADER_TRACING_DATA | RecordType::AUXTRACE => {
                    let min = if rt == RecordType::AUXTRACE { 16 } else { 12 };
                    if size < min {
                        return Framed::Failed(Error::Malformed {
                            offset: at(pos),
                            record_type: rt,
                            size,
                            what: "no payload size field",
                        });
                    }
                    if end - pos < min {
                        self.need = 0;
                        break;
                    }
                    let p = if rt == RecordType::AUXTRACE {
                        e.u64(data, pos + 8).expect("in bounds")
                    } else {
                        u64::from(e.u32(data, pos + 8).expect("in bounds"))
                    };
                    if p > MAX_PAYLOAD {
                        return Framed::Failed(Error::PayloadTooLarge {
                            offset: at(pos),
                            record_type: rt,
                            size: p,
                            limit: MAX_PAYLOAD,
                        });
                    }
                    p as usize
                }
                _ => 0,
            };
            let unit = size + payload;
            if end - pos < unit {
                self.need = unit;
                break;
            }
            let rec = &data[pos..pos + size];
            if rt == RecordType::HEADER_ATTR {
                match Attr::parse(&rec[EVENT_HEADER_SIZE..], e) {
                    // A repeated attr changes nothing: no copy of the shared info.
                    Ok(attr) if info.has_attr(&attr) => {}
                    Ok(attr) => {
                        if !Arc::make_mut(info).add_attr(attr) {
                            return Framed::Failed(Error::BadAttr {
                                offset: at(pos),
                                source: AttrError::TooMany(MAX_ATTRS),
                            });
                        }
                    }
                    Err(source) => {
                        return Framed::Failed(Error::BadAttr {
                            offset: at(pos),
                            source,
                        })
                    }
                }
            }
            if rt == RecordType::HEADER_TRACING_DATA {
                let t = TracingData::parse(&data[pos + size..pos + unit]);
                for err in &t.errors {
                    eprintln!(
                        "perfpipe: decode: {err} (the fields of its tracepoints are unknown)"
                    );
                }
                self.tracing_errors.add(t.errors.len() as u64);
                Arc::make_mut(info).tracing = Some(Arc::new(t));
            }
            if !known {
                self.unknown_types.add(1);
            }
            batch.spans.push(Span {
                start: pos as u32,
                len: unit as u32,
                kind: h.type_.min(OTHER_KIND),
                tag: u32::from(info.attr_index(h.type_, rec)),
            });
            pos += unit;
        }
        Framed::Rest(pos, end)
    }

    /// Keeps `data[from..to]` as the carry for the next batch.
    fn keep_rest(&mut self, batch: &Batch, from: usize, to: usize) {
        self.carry.clear();
        self.carry.extend_from_slice(&batch.data[from..to]);
        self.carry_offset = batch.stream_offset + (from - batch.start) as u64;
    }

    /// Records the time of the batch's first and last sample: once per batch, a few spans read.
    fn note_times(&self, batch: &Batch) {
        let Some(info) = &self.info else { return };
        let time = |span: &Span| info.record(batch, span).sample()?.time();
        let mut samples = batch
            .spans
            .iter()
            .filter(|s| s.kind == RecordType::SAMPLE.0);
        if self.first_time.get() == 0 {
            if let Some(t) = samples.clone().find_map(time) {
                self.first_time.set_once(t);
            }
        }
        if let Some(t) = samples.next_back().and_then(time) {
            self.last_time.max(t);
        }
    }

    fn emit(&self, mut batch: Batch, out: &mut Out<'_>) {
        if batch.spans.is_empty() {
            out.recycle(batch);
        } else {
            self.note_times(&batch);
            batch.context = self.info.clone().map(|i| i as _);
            out.push(batch);
        }
    }
}

impl Stage for Decode {
    fn process(&mut self, batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        let Some(mut batch) = self.join(batch, out) else {
            return Ok(Flow::Continue);
        };
        batch.spans.clear();
        match self.frame(&mut batch) {
            Framed::Rest(from, to) => {
                self.keep_rest(&batch, from, to);
                self.emit(batch, out);
                Ok(Flow::Continue)
            }
            Framed::Failed(err) => {
                self.carry.clear();
                self.emit(batch, out);
                Err(err.into())
            }
        }
    }

    fn flush(&mut self, _out: &mut Out<'_>) -> Result<(), StageError> {
        if self.info.is_none() && self.carry.is_empty() {
            return Err(Error::EmptyInput.into());
        }
        if self.carry.is_empty() {
            return Ok(());
        }
        let have = self.carry.len() as u64;
        let offset = self.carry_offset;
        let (record_type, need) = if self.info.is_none() {
            // A header cut short is checked as far as it goes, so a bad magic is reported as such
            // however the input was split (found by fuzzing: batches without headroom).
            if let Err(e) = Self::header(&self.carry, offset) {
                self.carry.clear();
                return Err(e.into());
            }
            (Some(RecordType::PIPE_HEADER), PIPE_HEADER_SIZE as u64)
        } else {
            let e = self.info.as_ref().map_or(Endian::Little, |i| i.endian);
            match EventHeader::parse(&self.carry, e) {
                Some(h) => (
                    Some(RecordType(h.type_)),
                    if self.need != 0 {
                        self.need as u64
                    } else {
                        u64::from(h.size)
                    },
                ),
                None => (None, EVENT_HEADER_SIZE as u64),
            }
        };
        self.carry.clear();
        Err(Error::Truncated {
            offset,
            record_type,
            have,
            need,
        }
        .into())
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![
            ("unknown_record_types", self.unknown_types.clone()),
            ("tracing_data_errors", self.tracing_errors.clone()),
            ("sample_time_first_ns", self.first_time.clone()),
            ("sample_time_last_ns", self.last_time.clone()),
        ]
    }
}

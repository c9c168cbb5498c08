//! `decompress`: replaces `PERF_RECORD_COMPRESSED` (81) and `PERF_RECORD_COMPRESSED2` (83) records
//! with the records their zstd payload holds, so that later stages see the samples.
//!
//! `perf record -z` compresses the ring-buffer data into one continuous zstd stream cut into
//! COMPRESSED records (`perf_session__process_compressed_event()` in `tools/perf/util/session.c`), so
//! the stage keeps **one decompression context for the whole stream**, and a decompressed record that
//! straddles two COMPRESSED records is completed from the bytes kept from the first (perf's
//! `decomp_last_rem`). COMPRESSED's payload is everything after its 8-byte header (its size is not
//! padded to 8); COMPRESSED2 (2025) has `u64 data_size` and then the data, padded to 8.
//!
//! Decompressed records are appended to the batch buffer ([`Batch::append`]) with kind = record type
//! and tag = attr index, and take the place of the COMPRESSED record; every other record stays a
//! zero-copy slice of the input. Records inside the zstd stream are framed by `header.size` only:
//! perf compresses ring-buffer (kernel) records, which never carry a payload outside `header.size`.
//! A HEADER_ATTR inside the compressed stream would not update the stream's attrs (perf never
//! writes one there).
//!
//! The HEADER_FEATURE record for `HEADER_COMPRESSED` (feature 27) is kept: it only describes how
//! the data was recorded, and perf 6.1 `report` and `script` read the decompressed output with it
//! (checked by the tests).
//!
//! **Memory**: one COMPRESSED record may decompress to at most [`MAX_DECOMPRESSED`] bytes (perf's
//! own bound is the `comp_mmap_len` of the HEADER_COMPRESSED feature, the ring-buffer size); once an
//! output batch holds a batch size (`--batch-size`, at least [`SPILL_MIN`]) of decompressed records,
//! the following records go to a fresh batch from the pool, so no output batch grows much past
//! twice the batch size. **Order**: input order, each
//! COMPRESSED record replaced in place by its records. **Buffering**: at most one partial
//! decompressed record (< 64 KiB) between batches. **EOF**: a partial record left at the end of the
//! compressed stream is an error naming the COMPRESSED record it began in.

use perfpipe_core::{Batch, Counter, Editor, Flow, Out, Stage, StageError};
use zstd::stream::raw::{Decoder, InBuffer, Operation, OutBuffer};

use crate::format::{Endian, EventHeader, RecordType, StreamInfo, EVENT_HEADER_SIZE, OTHER_KIND};
use crate::Error;
use perfpipe_core::spec::{Flag, StageSpec};

/// Most bytes one COMPRESSED record may decompress to; more is reported as corrupt input.
pub const MAX_DECOMPRESSED: usize = 64 << 20;

/// Least decompressed bytes an output batch takes before the next records go to a new batch; the
/// limit is the pipeline's batch size or this, whichever is larger.
pub const SPILL_MIN: usize = 64 << 10;

/// How `decompress` appears on the command line: `--decompress`. Stages that read what COMPRESSED
/// records hide get one in front of them automatically.
pub const SPEC: StageSpec = StageSpec {
    name: "decompress",
    help: "replace COMPRESSED records (perf record -z) with the records they hold",
    flags: &[Flag::stage(
        "decompress",
        "replace COMPRESSED records (perf record -z) with the records they hold",
    )],
    options: &[],
    build: |_, _| Ok(Box::new(DecompressConfig::default().build()?)),
    needs: &[],
};

/// Configuration of the `decompress` stage (it has no options).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DecompressConfig {}

impl DecompressConfig {
    /// Builds the stage.
    ///
    /// # Errors
    /// [`Error::Decompress`] (offset 0) if zstd cannot create a decompression context.
    pub fn build(&self) -> Result<Decompress, Error> {
        let decoder = Decoder::new().map_err(|e| Error::Decompress {
            offset: 0,
            record_type: RecordType::COMPRESSED,
            detail: format!("cannot create a zstd context: {e}"),
        })?;
        Ok(Decompress {
            decoder,
            buf: Vec::new(),
            rem_offset: 0,
            rem_type: RecordType::COMPRESSED,
            endian: Endian::Little,
            compressed_records: Counter::new(),
            decompressed_bytes: Counter::new(),
        })
    }
}

/// The running `decompress` stage.
pub struct Decompress {
    decoder: Decoder<'static>,
    /// Decompressed bytes not yet framed: at most one partial record between calls.
    buf: Vec<u8>,
    /// Input offset and type of the COMPRESSED record in which the partial record in `buf` began.
    rem_offset: u64,
    rem_type: RecordType,
    endian: Endian,
    compressed_records: Counter,
    decompressed_bytes: Counter,
}

impl std::fmt::Debug for Decompress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decompress")
            .field("pending", &self.buf.len())
            .finish_non_exhaustive()
    }
}

/// Where decompressed records go: the input batch until it holds `limit` bytes of them, then
/// fresh batches.
struct Target {
    /// Decompressed bytes per output batch.
    limit: usize,
    /// Batches already closed, in order, after the input batch.
    spilled: Vec<Batch>,
    /// Decompressed bytes in the batch being filled.
    filled: usize,
}

impl Decompress {
    /// The zstd payload of a COMPRESSED or COMPRESSED2 record.
    fn payload(rec: &[u8], rt: RecordType, e: Endian, offset: u64) -> Result<&[u8], Error> {
        let size = EventHeader::parse(rec, e).map_or(rec.len(), |h| usize::from(h.size));
        let rec = &rec[..size.min(rec.len())];
        if rt == RecordType::COMPRESSED {
            return Ok(&rec[EVENT_HEADER_SIZE.min(rec.len())..]);
        }
        let malformed = |what| Error::Malformed {
            offset,
            record_type: rt,
            size: rec.len(),
            what,
        };
        let n = e.u64(rec, 8).ok_or(malformed("no data_size field"))?;
        let end = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_add(16))
            .filter(|&end| end <= rec.len())
            .ok_or(malformed("data_size runs past the record"))?;
        Ok(&rec[16..end])
    }

    /// Decompresses `input` onto the end of `self.buf`.
    fn inflate(&mut self, input: &[u8], rt: RecordType, offset: u64) -> Result<usize, Error> {
        let before = self.buf.len();
        let mut src = InBuffer::around(input);
        loop {
            if self.buf.capacity() - self.buf.len() < 32 << 10 {
                self.buf.reserve(128 << 10);
            }
            let len = self.buf.len();
            let mut dst = OutBuffer::around_pos(&mut self.buf, len);
            self.decoder
                .run(&mut src, &mut dst)
                .map_err(|e| Error::Decompress {
                    offset,
                    record_type: rt,
                    detail: format!("corrupt zstd data: {e}"),
                })?;
            let full = dst.pos() == dst.capacity();
            if self.buf.len() - before > MAX_DECOMPRESSED {
                return Err(Error::Decompress {
                    offset,
                    record_type: rt,
                    detail: format!("decompresses to more than {MAX_DECOMPRESSED} bytes"),
                });
            }
            // Done when all input is consumed and zstd had room to spare (so it holds nothing back).
            if src.pos() == input.len() && !full {
                return Ok(self.buf.len() - before);
            }
        }
    }

    /// Frames the complete records at the start of `self.buf` and appends them to the batch being
    /// filled (the edited one, in place of its COMPRESSED record, or the last spilled batch);
    /// keeps the partial rest in `self.buf`.
    fn frame(
        &mut self,
        ed: &mut Editor<'_>,
        target: &mut Target,
        info: Option<&StreamInfo>,
        out: &Out<'_>,
        at: (u64, RecordType),
    ) -> Result<(), Error> {
        let e = info.map_or(Endian::Little, |i| i.endian);
        let mut pos = 0;
        while let Some(h) = EventHeader::parse(&self.buf[pos..], e) {
            let size = usize::from(h.size);
            if size < EVENT_HEADER_SIZE {
                let (offset, record_type) = if pos == 0 {
                    (self.rem_offset, self.rem_type)
                } else {
                    at
                };
                return Err(Error::Decompress {
                    offset,
                    record_type,
                    detail: format!(
                        "decompressed record of type {} has size {size}, smaller than its header",
                        h.type_
                    ),
                });
            }
            if self.buf.len() - pos < size {
                break;
            }
            let rec = &self.buf[pos..pos + size];
            let tag = info.map_or(0, |i| i.attr_index(h.type_, rec));
            let kind = h.type_.min(OTHER_KIND);
            if target.filled >= target.limit {
                let mut next = out.take();
                next.context = ed.batch().context.clone();
                next.stream_offset = ed.batch().stream_offset;
                target.spilled.push(next);
                target.filled = 0;
            }
            match target.spilled.last_mut() {
                None => ed.insert(rec, kind, u32::from(tag)),
                Some(b) => {
                    let span = b.append(rec, kind, u32::from(tag));
                    b.spans.push(span);
                }
            }
            target.filled += size;
            pos += size;
        }
        self.buf.drain(..pos);
        // Give back the memory of an unusually large record once it is framed.
        if self.buf.capacity() > 8 << 20 && self.buf.len() < 1 << 20 {
            self.buf.shrink_to(1 << 20);
        }
        if !self.buf.is_empty() && pos != 0 {
            (self.rem_offset, self.rem_type) = at;
        }
        Ok(())
    }

    /// Replaces each COMPRESSED record of `batch` with the records it holds; once the batch holds
    /// `target.limit` decompressed bytes, every later record goes to the spilled batches instead.
    /// On error, the records from the failing one on are removed.
    fn process_batch(
        &mut self,
        batch: &mut Batch,
        target: &mut Target,
        out: &Out<'_>,
    ) -> Result<(), Error> {
        let info = StreamInfo::shared(batch);
        let e = info.as_ref().map_or(Endian::Little, |i| i.endian);
        self.endian = e;
        let mut offset = batch.stream_offset;
        let mut n_compressed = 0;
        let mut n_bytes = 0;
        let mut result = Ok(());
        let mut ed = batch.edit();
        while let Some(span) = ed.next_record() {
            let here = offset;
            offset += u64::from(span.len);
            let rt = RecordType(span.kind);
            if rt != RecordType::COMPRESSED && rt != RecordType::COMPRESSED2 {
                if let Some(b) = target.spilled.last_mut() {
                    let s = b.append(ed.bytes(&span), span.kind, span.tag);
                    b.spans.push(s);
                    ed.remove();
                }
                continue;
            }
            ed.remove();
            n_compressed += 1;
            if self.buf.is_empty() {
                (self.rem_offset, self.rem_type) = (here, rt);
            }
            let step = Self::payload(ed.bytes(&span), rt, e, here)
                .and_then(|p| self.inflate(p, rt, here))
                .and_then(|n| {
                    n_bytes += n;
                    self.frame(&mut ed, target, info.as_deref(), out, (here, rt))
                });
            if let Err(err) = step {
                ed.remove_rest();
                result = Err(err);
                break;
            }
        }
        ed.finish();
        self.compressed_records.add(n_compressed);
        self.decompressed_bytes.add(n_bytes as u64);
        result
    }
}

impl Stage for Decompress {
    fn process(&mut self, mut batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        if !batch
            .spans
            .iter()
            .any(|s| s.kind == RecordType::COMPRESSED.0 || s.kind == RecordType::COMPRESSED2.0)
        {
            out.push(batch);
            return Ok(Flow::Continue);
        }
        let mut target = Target {
            limit: out.batch_bytes().max(SPILL_MIN),
            spilled: Vec::new(),
            filled: 0,
        };
        let result = self.process_batch(&mut batch, &mut target, out);
        // On error, what was decompressed before the fault still goes out.
        out.push(batch);
        for b in target.spilled {
            out.push(b);
        }
        result?;
        Ok(Flow::Continue)
    }

    fn flush(&mut self, _out: &mut Out<'_>) -> Result<(), StageError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let have = self.buf.len();
        let what = EventHeader::parse(&self.buf, self.endian)
            .map(|h| {
                format!(
                    "{} record ({have} of {} bytes)",
                    RecordType(h.type_),
                    h.size
                )
            })
            .unwrap_or_else(|| format!("record header ({have} of 8 bytes)"));
        self.buf.clear();
        Err(Error::Decompress {
            offset: self.rem_offset,
            record_type: self.rem_type,
            detail: format!("the compressed stream ends inside a {what}"),
        }
        .into())
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![
            ("compressed_records", self.compressed_records.clone()),
            ("decompressed_bytes", self.decompressed_bytes.clone()),
        ]
    }
}

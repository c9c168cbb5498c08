//! `stitch`: puts the user frames of CALLCHAIN_DEFERRED records back into their samples.
//!
//! With deferred user callchains (Linux 6.19's unwind-deferred infrastructure, `perf record
//! --call-graph fp,defer`, `attr.defer_callchain`), the kernel writes a sample's kernel frames at
//! once and ends its callchain with `PERF_CONTEXT_USER_DEFERRED` and a cookie; the user frames
//! come later, when the task returns to user space, in a `PERF_RECORD_CALLCHAIN_DEFERRED` (22)
//! record `{ cookie, nr, ips[nr], sample_id }` that serves every sample the task took in that
//! kernel entry. This stage merges them as perf's session does (`evlist__deliver_deferred_callchain()`
//! in `tools/perf/util/session.c`, `sample__merge_deferred_callchain()` in `callchain.c`): a
//! sample whose attr has `defer_callchain` and whose callchain ends in that marker and a cookie is
//! held; when a CALLCHAIN_DEFERRED record of its thread comes, every held sample of the thread
//! goes out in its place, in order, each with its callchain rewritten as the kernel part, then
//! `PERF_CONTEXT_USER` and the record's frames when the cookies match (`deferred_stitched`), or
//! the kernel part alone when they do not (`deferred_unmatched`, perf delivers those unmerged
//! too). perf 7 keeps `PERF_CONTEXT_USER_DEFERRED` in the merged chain; `PERF_CONTEXT_USER` reads
//! the same to it and is what every older perf knows. The CALLCHAIN_DEFERRED records are consumed:
//! perf 6.1 stops reading a stream at the first one, so every output of this stage is readable by
//! it. A record no held sample waits for is dropped (`deferred_orphans`), as perf ignores it.
//!
//! It also assembles perf ≥ 6.15's `offcpu-time` samples, whose pid, period and callchain are in
//! their raw data, as perf's parse does (`stitch/offcpu.rs`): `offcpu_assembled`,
//! `offcpu_unassembled`.
//!
//! The profile outputs (through `symbolize`) and `unwind` need this stage, so the chain puts it
//! before them; passthrough and `--drop` keep the records as they are.
//!
//! **Order**: input order, except that a deferred sample moves to where its CALLCHAIN_DEFERRED
//! record was (perf delivers it there too). **Buffering**: the held samples, at most
//! [`MAX_HELD_BYTES`]; past that the oldest goes out at once with its kernel part only.
//! **EOF**: the held samples go out with their kernel part only, as perf flushes them.

use std::collections::VecDeque;
use std::sync::Arc;

use perfpipe_core::spec::{Flag, StageSpec};
use perfpipe_core::{Batch, Counter, Editor, Flow, Out, Stage, StageError};

use crate::format::{context, flag, Endian, RecordType, StreamInfo, EVENT_HEADER_SIZE};

mod offcpu;

/// Most bytes of samples held for their deferred frames at once.
pub const MAX_HELD_BYTES: usize = 64 << 20;

/// The largest record perf can frame (`perf_event_header.size` is a u16), rounded down to 8.
const MAX_RECORD: usize = 0xfff8;

/// How `stitch` appears on the command line: `--stitch` (the profile outputs and `--unwind` add it
/// themselves).
pub const SPEC: StageSpec = StageSpec {
    name: "stitch",
    help: "merge deferred user callchains (CALLCHAIN_DEFERRED records, --call-graph fp,defer) into their samples, by cookie",
    flags: &[Flag::stage(
        "stitch",
        "merge deferred user callchains (CALLCHAIN_DEFERRED records) into their samples",
    )],
    options: &[],
    build: |_, _| Ok(Box::new(StitchConfig::default().build())),
    needs: &["decompress"],
};

/// Configuration of the `stitch` stage (it has no options).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StitchConfig {}

impl StitchConfig {
    /// Builds the stage.
    pub fn build(&self) -> Stitch {
        Stitch {
            held: VecDeque::new(),
            held_bytes: 0,
            info: None,
            stitched: Counter::new(),
            unmatched: Counter::new(),
            orphans: Counter::new(),
            malformed: Counter::new(),
            offcpu: offcpu::OffCpu::default(),
        }
    }
}

/// A sample waiting for its deferred user frames.
#[derive(Debug)]
struct Held {
    tid: Option<u32>,
    cookie: u64,
    tag: u32,
    bytes: Vec<u8>,
}

/// The running `stitch` stage.
#[derive(Debug)]
pub struct Stitch {
    held: VecDeque<Held>,
    held_bytes: usize,
    /// The stream info of the last batch, for the batch the held samples go out in at EOF.
    info: Option<Arc<StreamInfo>>,
    stitched: Counter,
    unmatched: Counter,
    orphans: Counter,
    malformed: Counter,
    /// perf's raw-data `offcpu-time` samples, assembled ([`offcpu`]).
    offcpu: offcpu::OffCpu,
}

/// The sample `rec` with its callchain (at `cc`: `nr` and entries) made of `keep` entries of
/// the old one, then `PERF_CONTEXT_USER` and `user` (unless empty; no marker is added when
/// `user` starts with one). User frames that would make the record larger than perf can frame
/// are left out.
pub fn rewrite(
    rec: &[u8],
    e: Endian,
    cc: std::ops::Range<usize>,
    keep: usize,
    user: &[u64],
) -> Vec<u8> {
    let kernel = &rec[cc.start + 8..cc.start + 8 + 8 * keep];
    let marker = !user.is_empty() && user[0] < context::MAX;
    let fixed = rec.len() - (cc.end - cc.start) + 8 + kernel.len() + 8 * usize::from(marker);
    let room = MAX_RECORD.saturating_sub(fixed) / 8;
    let user = &user[..user.len().min(room)];
    let marker = marker && !user.is_empty();
    let nr = keep + usize::from(marker) + user.len();
    let mut out = Vec::with_capacity(fixed + 8 * user.len());
    out.extend_from_slice(&rec[..cc.start]);
    out.extend_from_slice(&e.put_u64(nr as u64));
    out.extend_from_slice(kernel);
    if marker {
        out.extend_from_slice(&e.put_u64(context::USER));
    }
    for &ip in user {
        out.extend_from_slice(&e.put_u64(ip));
    }
    out.extend_from_slice(&rec[cc.end..]);
    let size = out.len() as u16;
    out[6..8].copy_from_slice(&e.put_u16(size));
    out
}

impl Stitch {
    /// The held sample written again: with `user` frames, or (`None`) its kernel part alone.
    fn finish_sample(&self, info: &StreamInfo, h: &Held, user: Option<&[u64]>) -> Vec<u8> {
        let rec = crate::format::Record::new(&h.bytes, info.endian, info.attrs.get(h.tag as usize));
        let Some(cc) = rec.sample().and_then(|s| s.callchain_bytes()) else {
            return h.bytes.clone();
        };
        let n = (cc.end - cc.start) / 8 - 1;
        match user {
            Some(user) => {
                self.stitched.add(1);
                rewrite(&h.bytes, info.endian, cc, n - 2, user)
            }
            None => {
                self.unmatched.add(1);
                rewrite(&h.bytes, info.endian, cc, n - 2, &[])
            }
        }
    }

    /// Holds the current sample if it waits for deferred frames.
    fn hold(&mut self, info: &StreamInfo, ed: &mut Editor<'_>, span: perfpipe_core::Span) {
        let rec = info.record(ed.batch(), &span);
        let deferred = rec
            .attr
            .is_some_and(|a| a.flags & flag::DEFER_CALLCHAIN != 0);
        let Some(s) = rec.sample().filter(|_| deferred) else {
            return;
        };
        let Some(cookie) = s.callchain().and_then(|c| c.deferred_cookie()) else {
            return;
        };
        let held = Held {
            tid: s.tid(),
            cookie,
            tag: span.tag,
            bytes: rec.bytes.to_vec(),
        };
        ed.remove();
        self.held_bytes += held.bytes.len();
        self.held.push_back(held);
        while self.held_bytes > MAX_HELD_BYTES {
            let Some(h) = self.held.pop_front() else {
                break;
            };
            self.held_bytes -= h.bytes.len();
            let rec = self.finish_sample(info, &h, None);
            ed.insert(&rec, RecordType::SAMPLE.0, h.tag);
        }
    }

    /// A CALLCHAIN_DEFERRED record: every held sample of its thread goes out in its place.
    fn deliver(&mut self, info: &StreamInfo, ed: &mut Editor<'_>, span: perfpipe_core::Span) {
        let rec = info.record(ed.batch(), &span);
        let Some(d) = rec.callchain_deferred() else {
            self.malformed.add(1);
            ed.remove();
            return;
        };
        let tid = rec.sample_id().and_then(|s| s.tid);
        let user: Vec<u64> = d.ips.entries().collect();
        let cookie = d.cookie;
        ed.remove();
        let mut rest = VecDeque::with_capacity(self.held.len());
        let mut delivered = 0;
        for h in std::mem::take(&mut self.held) {
            let mine = match tid {
                Some(t) => h.tid == Some(t),
                None => h.cookie == cookie,
            };
            if !mine {
                rest.push_back(h);
                continue;
            }
            self.held_bytes -= h.bytes.len();
            let frames = (h.cookie == cookie).then_some(&user[..]);
            let out = self.finish_sample(info, &h, frames);
            ed.insert(&out, RecordType::SAMPLE.0, h.tag);
            delivered += 1;
        }
        self.held = rest;
        if delivered == 0 {
            self.orphans.add(1);
        }
    }
}

impl Stage for Stitch {
    fn process(&mut self, mut batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        let Some(info) = StreamInfo::shared(&batch) else {
            out.push(batch);
            return Ok(Flow::Continue);
        };
        let mut ed = batch.edit();
        while let Some(span) = ed.next_record() {
            match RecordType(span.kind) {
                RecordType::SAMPLE if self.offcpu.takes(&info, &span) => {
                    self.offcpu.record(&info, &mut ed, &span);
                }
                RecordType::SAMPLE => self.hold(&info, &mut ed, span),
                RecordType::CALLCHAIN_DEFERRED => self.deliver(&info, &mut ed, span),
                _ => self.offcpu.record(&info, &mut ed, &span),
            }
        }
        ed.finish();
        let info = self.offcpu.info_out(&info);
        batch.context = Some(info.clone());
        self.info = Some(info);
        out.push_or_recycle(batch);
        Ok(Flow::Continue)
    }

    fn flush(&mut self, out: &mut Out<'_>) -> Result<(), StageError> {
        let Some(info) = self.info.clone() else {
            return Ok(());
        };
        if self.held.is_empty() {
            return Ok(());
        }
        let mut batch = out.take();
        for h in std::mem::take(&mut self.held) {
            let rec = self.finish_sample(&info, &h, None);
            debug_assert!(rec.len() >= EVENT_HEADER_SIZE);
            let span = batch.append(&rec, RecordType::SAMPLE.0, h.tag);
            batch.spans.push(span);
        }
        self.held_bytes = 0;
        batch.context = Some(info);
        out.push(batch);
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![
            ("deferred_stitched", self.stitched.clone()),
            ("deferred_unmatched", self.unmatched.clone()),
            ("deferred_orphans", self.orphans.clone()),
            ("deferred_malformed", self.malformed.clone()),
            ("offcpu_assembled", self.offcpu.assembled.clone()),
            ("offcpu_unassembled", self.offcpu.unassembled.clone()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use perfpipe_core::harness;

    use super::*;
    use crate::synth::{decoded, SynthStream};

    const K: u64 = context::KERNEL;
    const D: u64 = context::USER_DEFERRED;

    /// A record let out: (type, tid, callchain) for a sample, (type, 0, []) else.
    type Out = (u32, u32, Vec<u64>);

    /// Every record the stage let out, and its counters.
    fn run(stream: &[u8], chunk: usize) -> (Vec<Out>, Vec<(&'static str, u64)>) {
        let mut stage = StitchConfig::default().build();
        let out = harness::run_stage(&mut stage, decoded(stream, chunk)).unwrap();
        let mut v = Vec::new();
        for b in &out {
            let info = StreamInfo::of(b).unwrap();
            for span in &b.spans {
                let rec = info.record(b, span);
                match rec.sample() {
                    Some(s) => v.push((
                        span.kind,
                        s.tid().unwrap(),
                        s.callchain().unwrap().entries().collect(),
                    )),
                    None => v.push((span.kind, 0, Vec::new())),
                }
            }
        }
        let c = stage
            .counters()
            .into_iter()
            .map(|(n, c)| (n, c.get()))
            .collect();
        (v, c)
    }

    #[test]
    fn samples_get_their_deferred_frames_by_thread_and_cookie() {
        let mut s = SynthStream::new();
        s.set_attr_flags(flag::DEFER_CALLCHAIN | flag::DEFER_OUTPUT);
        s.sample(1, 10, 100, 0, 0xa1, &[K, 0xa1, D, 7]);
        s.sample(1, 10, 110, 0, 0xa2, &[K, 0xa2, D, 7]);
        s.sample(1, 11, 115, 1, 0xb1, &[K, 0xb1, D, 9]);
        s.finished_round();
        s.callchain_deferred(1, 10, 120, 7, &[0x401000, 0x402000]);
        s.sample(1, 11, 125, 1, 0xb2, &[K, 0xb2, D, 8]);
        s.callchain_deferred(1, 11, 130, 8, &[0x403000]);
        s.sample(1, 12, 140, 0, 0xc1, &[K, 0xc1, D, 5]);
        s.callchain_deferred(1, 13, 150, 3, &[0x404000]);
        s.sample(1, 14, 160, 0, 0x405000, &[context::USER, 0x405000]);
        let stream = s.into_bytes();
        let u = context::USER;
        for chunk in [64, 4096, 1 << 20] {
            let (recs, counters) = run(&stream, chunk);
            let samples: Vec<(u32, Vec<u64>)> = recs
                .iter()
                .filter(|r| r.0 == RecordType::SAMPLE.0)
                .map(|r| (r.1, r.2.clone()))
                .collect();
            assert_eq!(
                samples,
                [
                    // At tid 10's deferred record, both of its samples, merged.
                    (10, vec![K, 0xa1, u, 0x401000, 0x402000]),
                    (10, vec![K, 0xa2, u, 0x401000, 0x402000]),
                    // At tid 11's (cookie 8): the cookie 9 sample unmerged, then the merged one.
                    (11, vec![K, 0xb1]),
                    (11, vec![K, 0xb2, u, 0x403000]),
                    // A sample that never waited passes where it is.
                    (14, vec![u, 0x405000]),
                    // Tid 12's never came: at the end, its kernel part.
                    (12, vec![K, 0xc1]),
                ],
                "chunk {chunk}"
            );
            assert!(!recs.iter().any(|r| r.0 == RecordType::CALLCHAIN_DEFERRED.0));
            let c = |n: &str| counters.iter().find(|(k, _)| *k == n).unwrap().1;
            assert_eq!(
                (
                    c("deferred_stitched"),
                    c("deferred_unmatched"),
                    c("deferred_orphans")
                ),
                (3, 2, 1)
            );
        }
    }

    #[test]
    fn without_defer_callchain_the_marker_is_left_alone() {
        // perf merges only samples of attrs with `defer_callchain`.
        let mut s = SynthStream::new();
        s.sample(1, 10, 100, 0, 0xa1, &[K, 0xa1, D, 7]);
        s.callchain_deferred(1, 10, 120, 7, &[0x401000]);
        let (recs, _) = run(&s.into_bytes(), 4096);
        assert_eq!(recs[recs.len() - 1].0, RecordType::SAMPLE.0);
        assert_eq!(recs[recs.len() - 1].2, [K, 0xa1, D, 7]);
    }

    #[test]
    fn a_merged_callchain_never_outgrows_a_record() {
        let mut s = SynthStream::new();
        s.set_attr_flags(flag::DEFER_CALLCHAIN);
        s.sample(1, 10, 100, 0, 0xa1, &[K, 0xa1, D, 7]);
        let user: Vec<u64> = (0..9000).map(|i| 0x400000 + i).collect();
        // The sample is the stream's last record: 8 header, 48 fixed, `nr` and 4 entries.
        let rec = &s.bytes()[s.bytes().len() - 96..];
        assert_eq!(u16::from_le_bytes([rec[6], rec[7]]), 96);
        let parts = rewrite(rec, Endian::Little, 56..96, 2, &user);
        assert!(parts.len() <= MAX_RECORD);
        assert_eq!(
            u16::from_le_bytes([parts[6], parts[7]]) as usize,
            parts.len()
        );
    }
}

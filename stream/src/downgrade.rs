//! `downgrade`: makes a stream written by a newer perf (7.x) readable by perf 6.1 and 6.12, whose
//! `perf report` stops at what it does not know.
//!
//! perf 6.1's and 6.12's `perf report` reject a pipe at the first HEADER_FEATURE record whose id
//! is past their `HEADER_LAST_FEATURE` (32): "failed: wrong feature ID: 33"
//! (`process_feature_event()` in `tools/perf/builtin-report.c`); perf 7.x writes 33 (`E_MACHINE`)
//! and 34 (`CLN_SIZE`) and ends its features with its own end mark, 35. Every perf stops reading a
//! pipe at a record type past its `PERF_RECORD_HEADER_MAX` ("failed to process type"), and 6.1 at
//! the first kernel record past its `PERF_RECORD_MAX` (22, CALLCHAIN_DEFERRED, is 7.x's). So this
//! stage
//! - drops every HEADER_FEATURE record of an id at or past [`feature::LAST`] (32) that has a
//!   payload (`features_dropped`): 33, 34, and 7.x's 32 (`CPU_DOMAIN_INFO`, `perf sched stats`);
//! - turns the first *empty* one, the newer perf's end mark, into perf 6.1's (id 32, empty), as a
//!   file converted to a pipe gets it (perf 7.x warns "Invalid HEADER_CPU_DOMAIN_INFO: section too
//!   small (0)" on it and reads on, as on every 6.1 pipe); a later empty one is dropped too;
//! - drops every record of a type perf 6.1 does not know (`records_dropped`): kernel types past
//!   `AUX_OUTPUT_HW_ID` (21) and user types past `FINISHED_INIT` (82): `BPF_METADATA`,
//!   `SCHEDSTAT_*` (what they say is lost to the older perf, which could not read it anyway).
//!
//! It needs `decompress` (perf 6.1's `report --stats` cannot decompress a `-z` pipe; perf 7.x's
//! `COMPRESSED2` records are 83) and `stitch` (perf 6.1 stops at the first CALLCHAIN_DEFERRED
//! record): the chain puts both before it, so the output has every sample, with its user frames.
//! The HEADER_COMPRESSED feature (27) stays: 6.1 knows it.
//!
//! **Order**: input order, records only removed or rewritten in place. **Buffering**: none.
//! **EOF**: nothing to flush.

use perfpipe_core::spec::{Flag, StageSpec};
use perfpipe_core::{Batch, Counter, Flow, Out, Stage, StageError};

use crate::format::{
    build, feature, Endian, RecordType, StreamInfo, EVENT_HEADER_SIZE, OTHER_KIND,
};

/// How `downgrade` appears on the command line: `--downgrade`.
pub const SPEC: StageSpec = StageSpec {
    name: "downgrade",
    help: "make a perf 7.x stream readable by perf 6.1 and 6.12 (drop the features and records they do not know)",
    flags: &[Flag::stage(
        "downgrade",
        "make a perf 7.x stream readable by perf 6.1 and 6.12's perf report: drop the features (ids 32 and up) and record types they do not know",
    )],
    options: &[],
    build: |_, _| Ok(Box::new(DowngradeConfig::default().build())),
    needs: &["decompress", "stitch"],
};

/// The last kernel record type perf 6.1 knows (`PERF_RECORD_AUX_OUTPUT_HW_ID`).
const LAST_KERNEL_TYPE: u32 = 21;

/// The last user record type perf 6.1 knows (`PERF_RECORD_FINISHED_INIT`).
const LAST_USER_TYPE: u32 = 82;

/// The first user record type (`PERF_RECORD_USER_TYPE_START`, HEADER_ATTR).
const USER_TYPE_START: u32 = 64;

/// Configuration of the `downgrade` stage (it has no options).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DowngradeConfig {}

impl DowngradeConfig {
    /// Builds the stage.
    pub fn build(&self) -> Downgrade {
        Downgrade {
            end_mark_written: false,
            features: Counter::new(),
            records: Counter::new(),
        }
    }
}

/// The running `downgrade` stage.
#[derive(Debug)]
pub struct Downgrade {
    /// Whether an end mark went out (a later empty newer feature is dropped).
    end_mark_written: bool,
    features: Counter,
    records: Counter,
}

/// What becomes of one record.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Keep,
    DropFeature,
    DropRecord,
    EndMark,
}

/// Whether perf 6.1 knows record type `t` (the stream's own kinds, the pipe header and
/// [`OTHER_KIND`], pass).
fn known_to_61(t: u32) -> bool {
    t <= LAST_KERNEL_TYPE || (USER_TYPE_START..=LAST_USER_TYPE).contains(&t) || t >= OTHER_KIND
}

impl Downgrade {
    fn verdict(&self, kind: u32, rec: &[u8], e: Endian) -> Verdict {
        if kind == RecordType::HEADER_FEATURE.0 {
            let id = e.u64(rec, EVENT_HEADER_SIZE).unwrap_or(0);
            if id < u64::from(feature::LAST) {
                return Verdict::Keep;
            }
            if id == u64::from(feature::LAST) && rec.len() == 16 && !self.end_mark_written {
                return Verdict::Keep;
            }
            if rec.len() == 16 && !self.end_mark_written {
                return Verdict::EndMark;
            }
            return Verdict::DropFeature;
        }
        if known_to_61(kind) {
            Verdict::Keep
        } else {
            Verdict::DropRecord
        }
    }
}

impl Stage for Downgrade {
    fn process(&mut self, mut batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        let e = StreamInfo::of(&batch).map_or(Endian::Little, |i| i.endian);
        let (mut features, mut records) = (0, 0);
        let mut ed = batch.edit();
        while let Some(span) = ed.next_record() {
            let rec = ed.bytes(&span);
            let verdict = self.verdict(span.kind, rec, e);
            let is_end_mark = span.kind == RecordType::HEADER_FEATURE.0 && rec.len() == 16;
            match verdict {
                Verdict::Keep => self.end_mark_written |= is_end_mark,
                Verdict::DropFeature => {
                    ed.remove();
                    features += 1;
                }
                Verdict::DropRecord => {
                    ed.remove();
                    records += 1;
                }
                Verdict::EndMark => {
                    let mut mark = Vec::with_capacity(16);
                    build::feature(&mut mark, e, feature::LAST, &[]);
                    ed.replace(&mark);
                    self.end_mark_written = true;
                }
            }
        }
        ed.finish();
        self.features.add(features);
        self.records.add(records);
        if batch.spans.is_empty() {
            out.recycle(batch);
        } else {
            out.push(batch);
        }
        Ok(Flow::Continue)
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![
            ("features_dropped", self.features.clone()),
            ("records_dropped", self.records.clone()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feature_record(id: u32, data: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        build::feature(&mut v, Endian::Little, id, data);
        v
    }

    #[test]
    fn newer_features_go_and_the_end_mark_becomes_6_1s() {
        let mut d = DowngradeConfig::default().build();
        let e = Endian::Little;
        let f = RecordType::HEADER_FEATURE.0;
        assert_eq!(d.verdict(f, &feature_record(27, &[0; 8]), e), Verdict::Keep);
        assert_eq!(d.verdict(f, &feature_record(31, &[0; 4]), e), Verdict::Keep);
        assert_eq!(
            d.verdict(f, &feature_record(32, &[0; 8]), e),
            Verdict::DropFeature
        );
        assert_eq!(
            d.verdict(f, &feature_record(33, &[1, 2]), e),
            Verdict::DropFeature
        );
        assert_eq!(d.verdict(f, &feature_record(35, &[]), e), Verdict::EndMark);
        d.end_mark_written = true;
        assert_eq!(
            d.verdict(f, &feature_record(36, &[]), e),
            Verdict::DropFeature
        );
        assert_eq!(
            d.verdict(f, &feature_record(32, &[]), e),
            Verdict::DropFeature
        );
        // A 6.1 pipe's own end mark stays as it is.
        let d = DowngradeConfig::default().build();
        assert_eq!(d.verdict(f, &feature_record(32, &[]), e), Verdict::Keep);
        // Big-endian ids are read as such.
        let mut be = Vec::new();
        build::feature(&mut be, Endian::Big, 33, &[7; 8]);
        assert_eq!(d.verdict(f, &be, Endian::Big), Verdict::DropFeature);
    }

    #[test]
    fn record_types_6_1_does_not_know_go() {
        let d = DowngradeConfig::default().build();
        let e = Endian::Little;
        let rec = [0u8; 8];
        for t in [1, 9, 10, 21, 64, 68, 81, 82, OTHER_KIND, 255] {
            assert_eq!(d.verdict(t, &rec, e), Verdict::Keep, "type {t}");
        }
        for t in [22, 23, 63, 83, 84, 85, 86, 200] {
            assert_eq!(d.verdict(t, &rec, e), Verdict::DropRecord, "type {t}");
        }
    }
}

//! `buildid-all`: injects a PERF_RECORD_HEADER_BUILD_ID for every mapped dso, just before the
//! MMAP/MMAP2 that first maps it, as `perf inject --buildid-all` does. Samples are not examined and
//! no address spaces are built, so it runs near passthrough speed.
//!
//! Per batch, every MMAP/MMAP2 that introduces a new dso (name + identity, see
//! [`crate::model::machine`]) starts its build-id read on the rayon pool first; the reads of one batch
//! thus overlap, and only then are the records placed. Ids come from the same sources as for
//! [`buildid`](crate::buildid) (MMAP2 build ids, `--known-build-ids`, host kernel and vdso, ELF
//! files with the `/proc/<pid>/root` fallback); pseudo maps are skipped; missing files and files
//! without an id are counted.
//!
//! A dso whose name already has a BUILD_ID record in the stream gets no second one, nor does a dso
//! whose MMAP2 carries its id (`perf record --buildid-mmap`, perf record's default since 6.17):
//! the id is in the stream already, and a file-mode `write` lists it in its table.
//!
//! **Order**: input order; BUILD_ID records are inserted. **Buffering**: none beyond the batch; one
//! entry per dso. **EOF**: nothing to flush.

use std::collections::HashSet;

use perfpipe_core::{Batch, Counter, Flow, Out, Stage, StageError};

use crate::buildid::{apply_inserts, counters, note_header, record, BuildidConfig, Inserts, Tally};
use crate::format::{misc, RecordType, StreamInfo};
use crate::model::dso::{Outcome, Resolver};
use crate::model::machine::{DsoId, Identity, Machine, KERNEL_PID};

impl BuildidConfig {
    /// Builds the `buildid-all` stage (reads the host's kernel and vdso ids).
    pub fn build_all(&self) -> BuildidAll {
        BuildidAll {
            dsos: Machine::new(),
            resolver: self.resolver(),
            seen: Vec::new(),
            present: HashSet::new(),
            injected: Counter::new(),
            missing: Counter::new(),
            no_id: Counter::new(),
        }
    }
}

/// The running `buildid-all` stage.
#[derive(Debug)]
pub struct BuildidAll {
    /// Used only to intern dsos (no maps are added).
    dsos: Machine,
    resolver: Resolver,
    seen: Vec<bool>,
    /// Names that already have a BUILD_ID record in the stream: not injected again.
    present: HashSet<Vec<u8>>,
    injected: Counter,
    missing: Counter,
    no_id: Counter,
}

impl Stage for BuildidAll {
    fn process(&mut self, mut batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        let Some(info) = StreamInfo::shared(&batch) else {
            out.push(batch);
            return Ok(Flow::Continue);
        };
        let e = info.endian;
        // Pass 1: intern the dsos of new maps and start their reads.
        let mut fresh: Vec<(usize, DsoId, u32)> = Vec::new();
        for (i, span) in batch.spans.iter().enumerate() {
            match RecordType(span.kind) {
                RecordType::MMAP | RecordType::MMAP2 => {
                    let rec = info.record(&batch, span);
                    let Some(m) = rec.mmap() else { continue };
                    let kernel = m.pid == KERNEL_PID
                        || m.cpumode == misc::KERNEL
                        || m.cpumode == misc::GUEST_KERNEL;
                    let dso = self
                        .dsos
                        .intern(m.filename, Identity::of(&m.file_id), kernel);
                    let k = dso.0 as usize;
                    if self.seen.len() <= k {
                        self.seen.resize(k + 1, false);
                    }
                    if !std::mem::replace(&mut self.seen[k], true) {
                        self.resolver.prefetch(dso, self.dsos.dso(dso), m.pid);
                        fresh.push((i, dso, m.pid));
                    }
                }
                RecordType::HEADER_FEATURE | RecordType::HEADER_BUILD_ID => {
                    note_header(&mut self.resolver, &mut self.present, batch.bytes(span), e)
                }
                _ => {}
            }
        }
        // Pass 2: wait for them in order and place the records.
        let mut inserts: Inserts = Vec::new();
        let mut t = Tally::default();
        for (i, dso, pid) in fresh {
            let d = self.dsos.dso(dso);
            // A name with a BUILD_ID record already, or an MMAP2 that carries the id itself
            // (perf inject marks such a dso hit "not to inject build-id").
            if self.present.contains(&d.name) || matches!(d.identity, Identity::BuildId(_)) {
                continue;
            }
            match self.resolver.resolve(dso, d, pid) {
                Outcome::Found(id) => {
                    t.injected += 1;
                    inserts.push((i, record::build_id(&id, &d.name, d.kernel, e)));
                }
                Outcome::Missing => t.missing += 1,
                Outcome::NoBuildId => t.no_id += 1,
                Outcome::Skipped => {}
            }
        }
        drop(info);
        apply_inserts(&mut batch, inserts);
        t.flush(&self.injected, &self.missing, &self.no_id);
        out.push(batch);
        Ok(Flow::Continue)
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        counters(&self.injected, &self.missing, &self.no_id)
    }
}

impl BuildidAll {
    /// The same stage, reading files on `pool` (the pipeline's workers).
    pub fn on_pool(mut self, pool: std::sync::Arc<rayon::ThreadPool>) -> BuildidAll {
        self.resolver.on_pool(pool);
        self
    }
}

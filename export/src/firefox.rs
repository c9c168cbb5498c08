//! `firefox`: the output format of the Firefox Profiler (`-o FILE.json.gz`, `--firefox`): its
//! processed-profile JSON, written with the `fxprof-processed-profile` crate (what `samply`
//! writes), gzip'd. Open it at profiler.firefox.com ("Load a profile from file").
//!
//! - A process per pid, a thread per tid (named by its comm), every sample on its thread's
//!   timeline at its time (relative to the first sample), with its stack; frames are labels of
//!   the resolved function names (`[dso]` for an address no symbol covers), in a `User` or
//!   `Kernel` category.
//! - The profile is a timeline, so the sink keeps every sample (24 bytes each, with its stack as a
//!   distinct-stack id), unlike the folded and pprof sinks; names are resolved once per distinct
//!   frame at the end.
//! - Written at end of input and on SIGUSR2, atomically.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fxprof_processed_profile::{
    CategoryColor, CategoryPairHandle, CpuDelta, Frame as FxFrame, FrameFlags, FrameInfo, Profile,
    ReferenceTimestamp, SamplingInterval, Timestamp,
};
use perfpipe_core::{Batch, Counter, Flow, Sink, StageError};
use rayon::prelude::*;
use rustc_hash::FxHashMap;

use perfpipe_core::spec::{BuildCtx, Flag, FormatSpec, Options};
use perfpipe_profile::kit::{frame_name, Naming};
use perfpipe_profile::symbolize::{resolve, FrameKind, Frames, Stacks, Symbols};
use perfpipe_stream::format::RecordType;
use perfpipe_stream::write::atomic::write_file;
use perfpipe_stream::Error;

/// One sample: its thread, time, distinct stack and weight.
#[derive(Clone, Copy, Debug)]
struct Point {
    pid: u32,
    tid: u32,
    time: u64,
    stack: u32,
}

/// The sink of a Firefox Profiler profile.
#[derive(Debug)]
pub struct Firefox {
    path: PathBuf,
    dump: Option<Arc<AtomicBool>>,
    pool: Option<Arc<rayon::ThreadPool>>,
    stacks: FxHashMap<Arc<[u32]>, u32>,
    stack_list: Vec<Arc<[u32]>>,
    points: Vec<Point>,
    /// (pid, tid) → the thread's comm (the last one seen).
    threads: FxHashMap<(u32, u32), String>,
    naming: Option<(Arc<Symbols>, Arc<Frames>, bool)>,
    attr: Option<u16>,
    counted: Counter,
    snapshots: Counter,
}

impl Firefox {
    /// A sink writing to `path` (`-`: standard output).
    pub fn new(
        path: &Path,
        dump: Option<Arc<AtomicBool>>,
        pool: Option<Arc<rayon::ThreadPool>>,
    ) -> Firefox {
        Firefox {
            path: path.to_path_buf(),
            dump,
            pool,
            stacks: FxHashMap::default(),
            stack_list: Vec::new(),
            points: Vec::new(),
            threads: FxHashMap::default(),
            naming: None,
            attr: None,
            counted: Counter::new(),
            snapshots: Counter::new(),
        }
    }

    fn add_batch(&mut self, batch: &Batch) {
        let Some(stacks) = batch.annotation::<Stacks>() else {
            return;
        };
        if self.naming.is_none() {
            self.naming = Some((
                stacks.symbols.clone(),
                stacks.table.clone(),
                stacks.host_kernel,
            ));
        }
        let list = stacks.samples();
        let mut counted = 0;
        for span in batch
            .spans
            .iter()
            .filter(|s| s.kind == RecordType::SAMPLE.0)
        {
            let Ok(i) = list.binary_search_by_key(&span.start, |s| s.start) else {
                continue;
            };
            let s = &list[i];
            // One event, as the folded stacks keep: the first whose samples arrive.
            if *self.attr.get_or_insert(s.attr) != s.attr {
                continue;
            }
            let frames = stacks.frames(s);
            let stack = match self.stacks.get(frames) {
                Some(&id) => id,
                None => {
                    let id = self.stack_list.len() as u32;
                    let shared: Arc<[u32]> = frames.into();
                    self.stack_list.push(shared.clone());
                    self.stacks.insert(shared, id);
                    id
                }
            };
            self.threads
                .entry((s.pid, s.tid))
                .or_insert_with(|| s.comm_name().into_owned());
            self.points.push(Point {
                pid: s.pid,
                tid: s.tid,
                time: s.time,
                stack,
            });
            counted += 1;
        }
        self.counted.add(counted);
    }

    /// The profile so far.
    pub fn profile(&self) -> Profile {
        let start = self.points.iter().map(|p| p.time).min().unwrap_or(0);
        let mut profile = Profile::new(
            "perfpipe",
            ReferenceTimestamp::from_millis_since_unix_epoch(0.0),
            SamplingInterval::from_millis(1),
        );
        let user: CategoryPairHandle = profile.add_category("User", CategoryColor::Yellow).into();
        let kernel: CategoryPairHandle =
            profile.add_category("Kernel", CategoryColor::Orange).into();
        let Some((symbols, table, host)) = &self.naming else {
            return profile;
        };
        let frames = table.snapshot();
        let mut used = vec![false; frames.len()];
        for s in &self.stack_list {
            for &f in s.iter() {
                used[f as usize] = true;
            }
        }
        // Each frame's names, caller first (inlined callees after their caller).
        let names = |(i, f): (usize, &perfpipe_profile::symbolize::Frame)| -> Vec<(String, bool)> {
            if !used[i] {
                return Vec::new();
            }
            let mut r = Vec::new();
            resolve(symbols, *host, f, &mut r);
            r.iter()
                .rev()
                .map(|x| {
                    let mut s = String::new();
                    frame_name(x, f.query.ip, Naming::default(), &mut s);
                    (s, x.kind == FrameKind::Kernel)
                })
                .collect()
        };
        let names: Vec<Vec<(String, bool)>> = match &self.pool {
            Some(p) => p.install(|| frames.par_iter().enumerate().map(names).collect()),
            None => frames.iter().enumerate().map(names).collect(),
        };
        let t0 = Timestamp::from_nanos_since_reference(0);
        let mut processes = FxHashMap::default();
        let mut threads = FxHashMap::default();
        let mut keys: Vec<&(u32, u32)> = self.threads.keys().collect();
        keys.sort_unstable();
        for key in keys {
            let (pid, tid) = *key;
            let comm = &self.threads[key];
            let process = *processes
                .entry(pid)
                .or_insert_with(|| profile.add_process(comm, pid, t0));
            let thread = profile.add_thread(process, tid, t0, pid == tid);
            profile.set_thread_name(thread, comm);
            threads.insert((pid, tid), thread);
        }
        let mut handles = FxHashMap::default();
        for p in &self.points {
            let thread = threads[&(p.pid, p.tid)];
            let stack = *handles.entry((p.pid, p.tid, p.stack)).or_insert_with(|| {
                let ids = &self.stack_list[p.stack as usize];
                // Stacks are innermost first; the profiler wants the caller first.
                let infos: Vec<FrameInfo> = ids
                    .iter()
                    .rev()
                    .flat_map(|&f| names[f as usize].iter())
                    .map(|(n, k)| FrameInfo {
                        frame: FxFrame::Label(profile.intern_string(n)),
                        category_pair: if *k { kernel } else { user },
                        flags: FrameFlags::empty(),
                    })
                    .collect();
                profile.intern_stack_frames(thread, infos.into_iter())
            });
            let at = Timestamp::from_nanos_since_reference(p.time.saturating_sub(start));
            profile.add_sample(thread, at, stack, CpuDelta::ZERO, 1);
        }
        profile
    }

    fn write(&self) -> Result<(), Error> {
        let profile = self.profile();
        write_file(&self.path, |w| {
            let gz = flate2::write::GzEncoder::new(w, flate2::Compression::default());
            // serde_json writes a few bytes at a time; deflate wants large writes.
            let mut buf = std::io::BufWriter::with_capacity(1 << 20, gz);
            serde_json::to_writer(&mut buf, &profile).map_err(std::io::Error::other)?;
            buf.into_inner()
                .map_err(|e| e.into_error())?
                .finish()
                .map(|_| ())
        })
    }
}

impl Sink for Firefox {
    fn consume(&mut self, batch: &Batch) -> Result<Flow, StageError> {
        self.add_batch(batch);
        if self
            .dump
            .as_ref()
            .is_some_and(|d| d.swap(false, Ordering::SeqCst))
        {
            self.write()?;
            self.snapshots.add(1);
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self) -> Result<(), StageError> {
        self.write()?;
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![
            ("samples", self.counted.clone()),
            ("snapshots", self.snapshots.clone()),
        ]
    }
}

/// How the command line offers the format.
pub const SPEC: FormatSpec = FormatSpec {
    name: "firefox",
    help: "a Firefox Profiler profile (processed format, gzip'd JSON): a thread per tid, every sample on its timeline",
    extensions: &["json.gz"],
    flags: &[Flag::stage(
        "firefox",
        "write a Firefox Profiler profile (what -o FILE.json.gz chooses)",
    )],
    options: &[],
    needs: &["symbolize"],
    sets: perfpipe_core::spec::no_settings,
    build: build_sink,
};

fn build_sink(
    ctx: &BuildCtx,
    _: &Options,
    path: &Path,
) -> Result<Box<dyn Sink>, perfpipe_core::StageError> {
    Ok(Box::new(Firefox::new(
        path,
        Some(ctx.requests.subscribe(perfpipe_core::DUMP)),
        Some(ctx.workers.pool()?),
    )))
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use perfpipe_core::harness::{raw_batches, run_stage};

    use super::*;
    use perfpipe_profile::symbolize::SymbolizeConfig;
    use perfpipe_stream::decode::DecodeConfig;

    const MULTIPROC: &[u8] = include_bytes!("../../tests/fixtures/multiproc.pipe.data");

    #[test]
    fn the_profile_is_processed_format_json_with_every_sample_on_its_thread() {
        let decoded = run_stage(
            &mut DecodeConfig::default().build(),
            raw_batches(MULTIPROC, &[MULTIPROC.len()], 0),
        )
        .unwrap();
        let batches = run_stage(&mut SymbolizeConfig::default().build(None), decoded).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.json.gz");
        let mut sink = Firefox::new(&path, None, None);
        for b in &batches {
            assert_eq!(sink.consume(b).unwrap(), Flow::Continue);
        }
        sink.finish().unwrap();
        let mut text = String::new();
        flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap())
            .read_to_string(&mut text)
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        // The processed format: meta with a version, threads with a samples table.
        assert!(
            v["meta"]["version"].as_u64().unwrap() >= 24,
            "{}",
            v["meta"]
        );
        assert!(v["meta"]["preprocessedProfileVersion"].as_u64().unwrap() >= 40);
        let threads = v["threads"].as_array().unwrap();
        assert!(threads.len() >= 4, "bash, workload.sh, gzip, sha256sum…");
        let samples: u64 = threads
            .iter()
            .map(|t| t["samples"]["length"].as_u64().unwrap())
            .sum();
        assert_eq!(samples, 1664, "fixtures/README.md: 1664 samples");
        let names: Vec<&str> = threads.iter().filter_map(|t| t["name"].as_str()).collect();
        assert!(names.contains(&"gzip"), "{names:?}");
    }
}

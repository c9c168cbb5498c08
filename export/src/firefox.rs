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
//! - Written at end of input and on SIGUSR2, atomically (a [`SnapshotSink`]).

use std::io::Write;

use fxprof_processed_profile::{
    CategoryColor, CategoryPairHandle, CpuDelta, Frame as FxFrame, FrameFlags, FrameInfo, Profile,
    ReferenceTimestamp, SamplingInterval, Timestamp,
};
use perfpipe_core::{Batch, Counter};
use rustc_hash::FxHashMap;

use perfpipe_core::spec::{Flag, FormatSpec};
use perfpipe_profile::kit::{
    self, frame_name, FirstEvent, Join, NameSources, Naming, SnapshotSink, StackTable,
};
use perfpipe_profile::symbolize::FrameKind;

/// One sample: its thread, time, distinct stack and weight.
#[derive(Clone, Copy, Debug)]
struct Point {
    pid: u32,
    tid: u32,
    time: u64,
    stack: u32,
}

/// A Firefox Profiler profile of the samples so far.
#[derive(Debug, Default)]
pub struct Firefox {
    stacks: StackTable,
    points: Vec<Point>,
    /// (pid, tid) → the thread's comm (the first one seen).
    threads: FxHashMap<(u32, u32), String>,
    sources: NameSources,
    event: FirstEvent,
    counted: Counter,
}

/// The sink of a Firefox Profiler profile.
pub type FirefoxSink = SnapshotSink<Firefox>;

impl kit::Profile for Firefox {
    fn add(&mut self, batch: &Batch) {
        let Some(mut join) = Join::of(batch) else {
            return;
        };
        let stacks = join.stacks();
        self.sources.observe(stacks);
        let mut counted = 0;
        for (_, s) in join.by_ref() {
            // One event, as the folded stacks keep.
            if !self.event.admits(s.attr) {
                continue;
            }
            let stack = self.stacks.id(stacks.frames(s));
            self.threads
                .entry((s.pid, s.tid))
                .or_insert_with(|| stacks.comm_name(s).into_owned());
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

    fn write(&self, pool: Option<&rayon::ThreadPool>, out: &mut dyn Write) -> std::io::Result<()> {
        let profile = self.profile(pool);
        crate::gzip(out, |w| {
            serde_json::to_writer(w, &profile).map_err(std::io::Error::other)
        })
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![("samples", self.counted.clone())]
    }
}

impl Firefox {
    /// The profile so far.
    pub fn profile(&self, pool: Option<&rayon::ThreadPool>) -> Profile {
        let start = self.points.iter().map(|p| p.time).min().unwrap_or(0);
        let mut profile = Profile::new(
            "perfpipe",
            ReferenceTimestamp::from_millis_since_unix_epoch(0.0),
            SamplingInterval::from_millis(1),
        );
        let user: CategoryPairHandle = profile.add_category("User", CategoryColor::Yellow).into();
        let kernel: CategoryPairHandle =
            profile.add_category("Kernel", CategoryColor::Orange).into();
        let Some(namer) = self.sources.namer(pool) else {
            return profile;
        };
        // Each frame's names, caller first (inlined callees after their caller).
        let names: Vec<Vec<(String, bool)>> =
            namer.each_used(&self.stacks.used_frames(), |f, r| {
                r.iter()
                    .rev()
                    .map(|x| {
                        let mut s = String::new();
                        frame_name(x, f.query.ip, Naming::default(), &mut s);
                        (s, x.kind == FrameKind::Kernel)
                    })
                    .collect()
            });
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
                let ids = self.stacks.get(p.stack);
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
}

/// How the command line offers the format.
pub const SPEC: FormatSpec = kit::snapshot::format::<Firefox>(
    crate::offered::FIREFOX.name,
    "a Firefox Profiler profile (processed format, gzip'd JSON): a thread per tid, every sample on its timeline",
    crate::offered::FIREFOX.extensions,
    &[Flag::stage(
        "firefox",
        "write a Firefox Profiler profile (what -o FILE.json.gz chooses)",
    )],
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::written_gz;

    const MULTIPROC: &[u8] = include_bytes!("../../tests/fixtures/multiproc.pipe.data");

    #[test]
    fn the_profile_is_processed_format_json_with_every_sample_on_its_thread() {
        let text = String::from_utf8(written_gz(Firefox::default(), MULTIPROC)).unwrap();
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

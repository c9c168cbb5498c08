//! `firefox`: the output format of the Firefox Profiler (`-o FILE.json.gz`, `--firefox`): its
//! processed-profile JSON (what `samply` writes, with the `fxprof-processed-profile` crate),
//! gzip'd. Open it at profiler.firefox.com ("Load a profile from file").
//!
//! - A process per pid, a thread per tid (named by its comm), every sample on its thread's
//!   timeline at its time (relative to the first sample), with its stack; frames are labels of
//!   the resolved function names (`[dso]` for an address no symbol covers), in a `User` or
//!   `Kernel` category.
//! - The profile is a timeline, so every sample is kept, unlike the folded and pprof sinks, and
//!   kept out of memory: 16 bytes (thread, stack node, time) in sorted runs spilled to a
//!   temporary file ([`spill`]), each thread's merged back by time when the profile is written.
//! - Stacks are kept as the profile's own stack tables are: a prefix tree a thread, a node for
//!   each (caller node, frame) ([`stacks`]); names are resolved once per distinct frame when the
//!   profile is written.
//! - Written at end of input and on SIGUSR2, atomically (a [`SnapshotSink`]), streamed: the
//!   crate writes the profile's frame (meta, categories, processes, threads with empty tables),
//!   and each thread's tables are written into their places as the JSON goes out ([`gecko`]),
//!   one thread's at a time, in the bytes the crate writes for them (issue 43: the sink's peak
//!   is its stack trees and one thread's tables, not the samples).

mod gecko;
mod spill;
mod stacks;

use std::io::Write;

use fxprof_processed_profile::{
    CategoryColor, CpuDelta, Profile, ReferenceTimestamp, SamplingInterval, Timestamp,
};
use perfpipe_core::{Batch, Counter};
use rustc_hash::FxHashMap;

use perfpipe_core::spec::{Flag, FormatSpec};
use perfpipe_profile::kit::{
    self, frame_name, At, FirstEvent, Model, NameSources, Naming, OffCpuSamples, SampleSink,
    SnapshotSink,
};
use perfpipe_profile::offcpu::Switch;
use perfpipe_profile::symbolize::FrameKind;

use gecko::{Names, ThreadTables, NONE};
use spill::{Point, Spill};
use stacks::StackTree;

/// A Firefox Profiler profile of the samples so far.
#[derive(Debug)]
pub struct Firefox {
    tree: StackTree,
    spill: Spill,
    /// Each thread's (pid, tid), comm (the first one seen) and samples, by index.
    threads: Vec<Thread>,
    thread_ids: FxHashMap<(u32, u32), u32>,
    /// The first sample's time (`u64::MAX` before any).
    start: u64,
    sources: NameSources,
    event: FirstEvent,
    samples: OffCpuSamples<()>,
    counted: Counter,
    /// Every sample in the order it came (the unit tests' whole profile).
    #[cfg(test)]
    arrivals: Vec<Point>,
}

/// A thread of the profile.
#[derive(Debug)]
struct Thread {
    key: (u32, u32),
    comm: String,
    samples: u64,
}

impl Default for Firefox {
    fn default() -> Firefox {
        Firefox::with_spill(Spill::default())
    }
}

/// The sink of a Firefox Profiler profile.
pub type FirefoxSink = SnapshotSink<Firefox>;

impl kit::Profile for Firefox {
    fn add(&mut self, batch: &Batch) {
        let before = self.spill.len();
        let mut samples = std::mem::take(&mut self.samples);
        let _ = samples.add(batch, self);
        self.samples = samples;
        self.counted.add(self.spill.len() - before);
    }

    fn write(&self, pool: Option<&rayon::ThreadPool>, out: &mut dyn Write) -> std::io::Result<()> {
        crate::gzip(out, |w| self.write_json(pool, w))
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![("samples", self.counted.clone())]
    }
}

impl SampleSink for Firefox {
    type Key = ();
    type Error = std::convert::Infallible;

    fn sources(&mut self) -> &mut NameSources {
        &mut self.sources
    }

    fn sample(&mut self, at: At<'_>, _: Option<&Switch>) -> Result<Option<()>, Self::Error> {
        let s = at.sample;
        // One event, as the folded stacks keep.
        if !self.event.admits(s.attr) {
            return Ok(None);
        }
        let next = self.threads.len() as u32;
        let thread = *self.thread_ids.entry((s.pid, s.tid)).or_insert(next);
        if thread == next {
            self.threads.push(Thread {
                key: (s.pid, s.tid),
                comm: at.stacks.comm_name(s).into_owned(),
                samples: 0,
            });
            self.tree.add_thread();
        }
        self.threads[thread as usize].samples += 1;
        let node = self.tree.node(thread, at.frames());
        self.start = self.start.min(s.time);
        let p = Point {
            thread,
            node,
            time: s.time,
        };
        #[cfg(test)]
        self.arrivals.push(p);
        self.spill.push(p);
        Ok(None)
    }
}

/// The samples table of a thread as the profile's frame holds it: one placeholder sample, no
/// stack, at `k` ms for the `k`th thread; the thread's own tables are written in its place.
const PLACEHOLDER: &[u8] =
    br#""samples":{"length":1,"weightType":"samples","stack":[null],"timeDeltas":["#;

/// Where a thread starts in the profile's frame, and what follows its frame and function
/// tables (empty there).
const THREAD: &[u8] = br#"{"frameTable":"#;
const MARKERS: &[u8] = br#","markers":"#;
/// A thread's (empty) stack and string tables in the profile's frame, after its samples table.
const EMPTY_STACKS: &[u8] =
    br#","stackTable":{"length":0,"prefix":[],"frame":[]},"stringArray":[]"#;

impl Firefox {
    fn with_spill(spill: Spill) -> Firefox {
        Firefox {
            tree: StackTree::default(),
            spill,
            threads: Vec::new(),
            thread_ids: FxHashMap::default(),
            start: u64::MAX,
            sources: NameSources::default(),
            event: FirstEvent::default(),
            samples: OffCpuSamples::new(Model::Never),
            counted: Counter::default(),
            #[cfg(test)]
            arrivals: Vec::new(),
        }
    }

    /// Each used frame's names (see [`Names`]); `None` before any batch named its sources.
    fn names(&self, pool: Option<&rayon::ThreadPool>) -> Option<Names> {
        let namer = self.sources.namer(pool)?;
        let named = namer.each_used(&self.tree.used_frames(), |f, r| {
            r.iter()
                .rev()
                .map(|x| {
                    let mut s = String::new();
                    frame_name(x, f.query.ip, Naming::default(), &mut s);
                    (s, x.kind == FrameKind::Kernel)
                })
                .collect::<Vec<_>>()
        });
        let mut names = Names::default();
        let mut ids: FxHashMap<String, u32> = FxHashMap::default();
        names.frames = named
            .into_iter()
            .map(|frame| {
                frame
                    .into_iter()
                    .map(|(s, kernel)| {
                        let next = names.strings.len() as u32;
                        let id = *ids.entry(s).or_insert_with_key(|s| {
                            names.strings.push(s.clone());
                            next
                        });
                        (id, kernel)
                    })
                    .collect()
            })
            .collect();
        Some(names)
    }

    /// The profile's frame as `fxprof-processed-profile` writes it: categories, a process per
    /// pid, the threads in (pid, tid) order each with one placeholder sample, at `k` ms for the
    /// `k`th, and empty tables; the categories' indexes; our thread index of each `k`.
    fn frame(&self, threads: bool) -> std::io::Result<(Vec<u8>, [u16; 2], Vec<u32>)> {
        let mut profile = Profile::new(
            "perfpipe",
            ReferenceTimestamp::from_millis_since_unix_epoch(0.0),
            SamplingInterval::from_millis(1),
        );
        let category = |h| -> u16 {
            serde_json::to_string(&h)
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0)
        };
        let user = category(profile.add_category("User", CategoryColor::Yellow));
        let kernel = category(profile.add_category("Kernel", CategoryColor::Orange));
        let mut keys: Vec<u32> = (0..self.threads.len() as u32).collect();
        if !threads {
            keys.clear();
        }
        keys.sort_unstable_by_key(|&t| self.threads[t as usize].key);
        let t0 = Timestamp::from_nanos_since_reference(0);
        let mut processes = FxHashMap::default();
        for (k, &t) in keys.iter().enumerate() {
            let Thread {
                key: (pid, tid),
                comm,
                ..
            } = &self.threads[t as usize];
            let process = *processes
                .entry(*pid)
                .or_insert_with(|| profile.add_process(comm, *pid, t0));
            let thread = profile.add_thread(process, *tid, t0, pid == tid);
            profile.set_thread_name(thread, comm);
            let at = Timestamp::from_nanos_since_reference(k as u64 * 1_000_000);
            profile.add_sample(thread, at, None, CpuDelta::ZERO, 1);
        }
        let frame = serde_json::to_vec(&profile).map_err(std::io::Error::other)?;
        Ok((frame, [user, kernel], keys))
    }

    /// Writes the profile's JSON: the frame, each thread's tables in their places.
    fn write_json(
        &self,
        pool: Option<&rayon::ThreadPool>,
        w: &mut dyn Write,
    ) -> std::io::Result<()> {
        let names = self.names(pool);
        let (frame, categories, order) = self.frame(names.is_some())?;
        let Some(names) = names else {
            return w.write_all(&frame);
        };
        let (nodes, starts) = self.tree.by_thread();
        let mut gecko = vec![NONE; self.tree.len()];
        let open = self.spill.sorted_open();
        let bad = |what: &str| std::io::Error::other(format!("the profile's frame: {what}"));
        let mut rest = &frame[..];
        while let Some(at) = find(rest, THREAD) {
            w.write_all(&rest[..at])?;
            let thread = &rest[at..];
            let markers = find(thread, MARKERS).ok_or_else(|| bad("no markers"))?;
            let samples = find(thread, PLACEHOLDER).ok_or_else(|| bad("no placeholder"))?;
            let k_at = samples + PLACEHOLDER.len();
            let end = k_at + find(&thread[k_at..], b"}").ok_or_else(|| bad("samples"))?;
            let k: usize = std::str::from_utf8(&thread[k_at..end])
                .ok()
                .and_then(|s| s.split(['.', ']']).next())
                .and_then(|n| n.parse().ok())
                .filter(|&k| k < order.len())
                .ok_or_else(|| bad("placeholder"))?;
            let tail = &thread[end + 1..];
            if !tail.starts_with(EMPTY_STACKS) {
                return Err(bad("stack tables"));
            }
            let t = order[k];
            let own = &nodes[starts[t as usize]..starts[t as usize + 1]];
            let tables = ThreadTables::build(&self.tree, own, &names, &mut gecko);
            w.write_all(THREAD)?;
            tables.write_frames(w, categories)?;
            w.write_all(&thread[markers..samples])?;
            w.write_all(&PLACEHOLDER[..10])?; // `"samples":`
            self.write_samples(w, &open, t, &gecko)?;
            w.write_all(br#","stackTable":"#)?;
            tables.write_stacks(w, &names)?;
            rest = &tail[EMPTY_STACKS.len()..];
        }
        w.write_all(rest)
    }

    /// Writes the samples table of thread `t` as `fxprof-processed-profile` serializes a
    /// `SampleTable` (time order, deltas in ms, weight 1, no cpu delta).
    fn write_samples(
        &self,
        w: &mut dyn Write,
        open: &spill::Run,
        t: u32,
        gecko: &[u32],
    ) -> std::io::Result<()> {
        let n = self.threads[t as usize].samples;
        write!(w, "{{\"length\":{n},\"weightType\":\"samples\",\"stack\":[")?;
        let mut merge = self.spill.thread(open, t);
        let mut buf = itoa::Buffer::new();
        let mut first = true;
        while let Some(p) = merge.next_point()? {
            if !std::mem::take(&mut first) {
                w.write_all(b",")?;
            }
            match gecko[p.node as usize] {
                NONE => w.write_all(b"null")?,
                s => w.write_all(buf.format(s).as_bytes())?,
            }
        }
        w.write_all(b"],\"timeDeltas\":[")?;
        let mut merge = self.spill.thread(open, t);
        let mut prev = 0;
        let mut first = true;
        while let Some(p) = merge.next_point()? {
            if !std::mem::take(&mut first) {
                w.write_all(b",")?;
            }
            let now = p.time.saturating_sub(self.start);
            serde_json::to_writer(&mut *w, &((now - prev) as f64 / 1_000_000.0))
                .map_err(std::io::Error::other)?;
            prev = now;
        }
        w.write_all(b"],\"weight\":[")?;
        for i in 0..n {
            w.write_all(if i > 0 { b",1" } else { b"1" })?;
        }
        w.write_all(b"],\"threadCPUDelta\":[")?;
        let zero = serde_json::to_string(&CpuDelta::ZERO).map_err(std::io::Error::other)?;
        for i in 0..n {
            if i > 0 {
                w.write_all(b",")?;
            }
            w.write_all(zero.as_bytes())?;
        }
        w.write_all(b"]}")
    }
}

/// Where `what` first is in `bytes`.
fn find(bytes: &[u8], what: &[u8]) -> Option<usize> {
    bytes.windows(what.len()).position(|w| w == what)
}

/// How the command line offers the format.
/// The profile's frames are labels, a user address no map covers `[unknown]` (with no address:
/// the frame table's are `-1`), so `symbolize` makes them one frame
/// ([`merge_unmapped`](perfpipe_profile::symbolize::merge_unmapped)): the same stacks to whoever
/// looks, and a stack tree of the named frames instead of one node per junk address of a
/// frame-pointer chain (the sink's peak, and most of the stage's time, on such recordings).
pub const SPEC: FormatSpec = FormatSpec {
    sets: perfpipe_profile::symbolize::merge_unmapped,
    ..kit::snapshot::format::<Firefox>(
        crate::offered::FIREFOX.name,
        "a Firefox Profiler profile (processed format, gzip'd JSON): a thread per tid, every sample on its timeline",
        crate::offered::FIREFOX.extensions,
        &[Flag::stage(
            "firefox",
            "write a Firefox Profiler profile (what -o FILE.json.gz chooses)",
        )],
    )
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::written_gz;

    const MULTIPROC: &[u8] = include_bytes!("../../../tests/fixtures/multiproc.pipe.data");

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

    /// The profile as `fxprof-processed-profile` writes it with every sample added in the order
    /// they came (what this sink wrote before it wrote the threads' tables itself).
    fn whole(ff: &Firefox) -> Vec<u8> {
        use fxprof_processed_profile::{
            CategoryPairHandle, Frame as FxFrame, FrameFlags, FrameInfo,
        };
        let start = ff.arrivals.iter().map(|p| p.time).min().unwrap_or(0);
        let mut profile = Profile::new(
            "perfpipe",
            ReferenceTimestamp::from_millis_since_unix_epoch(0.0),
            SamplingInterval::from_millis(1),
        );
        let user: CategoryPairHandle = profile.add_category("User", CategoryColor::Yellow).into();
        let kernel: CategoryPairHandle =
            profile.add_category("Kernel", CategoryColor::Orange).into();
        let names = ff.names(None).unwrap();
        let t0 = Timestamp::from_nanos_since_reference(0);
        let (mut processes, mut threads) = (FxHashMap::default(), FxHashMap::default());
        let mut keys: Vec<&Thread> = ff.threads.iter().collect();
        keys.sort_unstable_by_key(|t| t.key);
        for Thread {
            key: (pid, tid),
            comm,
            ..
        } in keys
        {
            let process = *processes
                .entry(*pid)
                .or_insert_with(|| profile.add_process(comm, *pid, t0));
            let thread = profile.add_thread(process, *tid, t0, pid == tid);
            profile.set_thread_name(thread, comm);
            threads.insert((*pid, *tid), thread);
        }
        for p in &ff.arrivals {
            let key = ff.threads[p.thread as usize].key;
            let thread = threads[&key];
            let infos: Vec<FrameInfo> = ff
                .tree
                .frames(p.node)
                .iter()
                .rev()
                .flat_map(|&f| names.frames[f as usize].iter())
                .map(|&(s, k)| FrameInfo {
                    frame: FxFrame::Label(profile.intern_string(&names.strings[s as usize])),
                    category_pair: if k { kernel } else { user },
                    flags: FrameFlags::empty(),
                })
                .collect();
            let stack = profile.intern_stack_frames(thread, infos.into_iter());
            let at = Timestamp::from_nanos_since_reference(p.time.saturating_sub(start));
            profile.add_sample(thread, at, stack, CpuDelta::ZERO, 1);
        }
        serde_json::to_vec(&profile).unwrap()
    }

    /// The JSON the sink writes (not gzip'd).
    fn written(ff: &Firefox) -> Vec<u8> {
        let mut out = Vec::new();
        ff.write_json(None, &mut out).unwrap();
        out
    }

    fn same(written: &[u8], whole: &[u8]) {
        if written != whole {
            let at = written
                .iter()
                .zip(whole)
                .take_while(|(a, b)| a == b)
                .count();
            let from = at.saturating_sub(200);
            panic!(
                "differ at byte {at}:\n{}\n{}",
                String::from_utf8_lossy(&written[from..(at + 200).min(written.len())]),
                String::from_utf8_lossy(&whole[from..(at + 200).min(whole.len())])
            );
        }
    }

    #[test]
    fn unmapped_addresses_merged_write_the_same_profile_from_fewer_nodes() {
        use kit::Profile as _;
        use perfpipe_profile::symbolize::SymbolizeConfig;
        // callgraph's frame-pointer chains run into junk: many user addresses no map covers.
        const CALLGRAPH: &[u8] = include_bytes!("../../../tests/fixtures/callgraph.pipe.data");
        let profile = |merge_unmapped: bool| {
            let config = SymbolizeConfig {
                merge_unmapped,
                ..SymbolizeConfig::default()
            };
            let mut ff = Firefox::default();
            for b in crate::test_support::symbolized_with(&config, CALLGRAPH, 1 << 20) {
                ff.add(&b);
            }
            (written(&ff), ff.tree.len())
        };
        let (kept, kept_nodes) = profile(false);
        let (merged, merged_nodes) = profile(true);
        same(&merged, &kept);
        // 2,625 nodes against 3,137 on this fixture; 319 against 618 MiB of peak RSS on the
        // 576 MB benchmark recording (benches/results/outputs.md).
        assert!(
            merged_nodes < kept_nodes,
            "{merged_nodes} nodes merged, {kept_nodes} kept"
        );
    }

    #[test]
    fn the_written_profile_is_the_bytes_fxprof_writes() {
        use kit::Profile as _;
        // Runs of 100 samples (16 of them, most spilled to the file), batches small enough that
        // threads' samples come out of time order across them.
        let mut ff = Firefox::with_spill(Spill::with_run(100));
        for b in crate::test_support::symbolized(MULTIPROC, 16 << 10) {
            ff.add(&b);
        }
        assert!(ff.threads.len() > 3 && ff.arrivals.len() == 1664);
        same(&written(&ff), &whole(&ff));
        // The same with every sample in memory, in one open run.
        let mut ff = Firefox::default();
        for b in crate::test_support::symbolized(MULTIPROC, 16 << 10) {
            ff.add(&b);
        }
        same(&written(&ff), &whole(&ff));
    }

    #[test]
    fn no_batch_is_an_empty_profile_that_the_crate_writes_too() {
        let ff = Firefox::default();
        let v: serde_json::Value = serde_json::from_slice(&written(&ff)).unwrap();
        assert_eq!(v["threads"].as_array().map(Vec::len), Some(0));
    }
}

//! `firefox`: the output format of the Firefox Profiler (`-o FILE.json.gz`, `--firefox`): its
//! processed-profile JSON, written with the `fxprof-processed-profile` crate (what `samply`
//! writes), gzip'd. Open it at profiler.firefox.com ("Load a profile from file").
//!
//! - A process per pid, a thread per tid (named by its comm), every sample on its thread's
//!   timeline at its time (relative to the first sample), with its stack; frames are labels of
//!   the resolved function names (`[dso]` for an address no symbol covers), in a `User` or
//!   `Kernel` category.
//! - The profile is a timeline, so the sink keeps every sample (16 bytes each: its thread, time
//!   and distinct-stack id), unlike the folded and pprof sinks; names are resolved once per
//!   distinct frame when the profile is written.
//! - Written at end of input and on SIGUSR2, atomically (a [`SnapshotSink`]), streamed: the
//!   profile's tables (threads, stacks, frames, strings) are made by `fxprof-processed-profile`
//!   without the samples, and each thread's samples table is written from the kept samples into
//!   its place as the JSON goes out ([`Splice`]), the bytes `fxprof-processed-profile` writes for
//!   them; so the samples are held once, not a second time in the profile's tables (issue 43).

use std::io::Write;

use fxprof_processed_profile::{
    CategoryColor, CategoryPairHandle, CpuDelta, Frame as FxFrame, FrameFlags, FrameInfo, Profile,
    ReferenceTimestamp, SamplingInterval, Timestamp,
};
use perfpipe_core::{Batch, Counter};
use rustc_hash::FxHashMap;

use perfpipe_core::spec::{Flag, FormatSpec};
use perfpipe_profile::kit::{
    self, frame_name, At, FirstEvent, Model, NameSources, Naming, OffCpuSamples, SampleSink,
    SnapshotSink, StackTable,
};
use perfpipe_profile::offcpu::Switch;
use perfpipe_profile::symbolize::FrameKind;

/// One sample: its thread (index in [`Firefox::threads`]), time and distinct stack.
#[derive(Clone, Copy, Debug)]
struct Point {
    thread: u32,
    stack: u32,
    time: u64,
}

/// A Firefox Profiler profile of the samples so far.
#[derive(Debug)]
pub struct Firefox {
    stacks: StackTable,
    points: Vec<Point>,
    /// Each thread's (pid, tid) and comm (the first one seen), by index.
    threads: Vec<((u32, u32), String)>,
    thread_ids: FxHashMap<(u32, u32), u32>,
    sources: NameSources,
    event: FirstEvent,
    samples: OffCpuSamples<()>,
    counted: Counter,
}

impl Default for Firefox {
    fn default() -> Firefox {
        Firefox {
            stacks: StackTable::default(),
            points: Vec::new(),
            threads: Vec::new(),
            thread_ids: FxHashMap::default(),
            sources: NameSources::default(),
            event: FirstEvent::default(),
            samples: OffCpuSamples::new(Model::Never),
            counted: Counter::default(),
        }
    }
}

/// The sink of a Firefox Profiler profile.
pub type FirefoxSink = SnapshotSink<Firefox>;

impl kit::Profile for Firefox {
    fn add(&mut self, batch: &Batch) {
        let before = self.points.len();
        let mut samples = std::mem::take(&mut self.samples);
        let _ = samples.add(batch, self);
        self.samples = samples;
        self.counted.add((self.points.len() - before) as u64);
    }

    fn write(&self, pool: Option<&rayon::ThreadPool>, out: &mut dyn Write) -> std::io::Result<()> {
        let (profile, tables) = self.tables(pool);
        crate::gzip(out, |w| {
            let mut splice = Splice::new(w, |k, w: &mut dyn Write| tables.write_thread(self, k, w));
            serde_json::to_writer(&mut splice, &profile).map_err(std::io::Error::other)?;
            splice.finish()
        })
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
        let stack = self.stacks.id(at.frames());
        let next = self.threads.len() as u32;
        let thread = *self.thread_ids.entry((s.pid, s.tid)).or_insert(next);
        if thread == next {
            self.threads
                .push(((s.pid, s.tid), at.stacks.comm_name(s).into_owned()));
        }
        self.points.push(Point {
            thread,
            stack,
            time: s.time,
        });
        Ok(None)
    }
}

/// What the samples tables are written from: each thread's place in the JSON, the profile's
/// stack index of each sample, the time the profile starts at.
struct Tables {
    /// Our thread index of each thread in the order its placeholder sample was added.
    order: Vec<u32>,
    /// The stack index (in its thread's stack table) of each point; `u32::MAX` for none.
    stack_index: Vec<u32>,
    /// The points of each thread (by our index), in point order: `by_thread[starts[t]..starts[t + 1]]`.
    by_thread: Vec<u32>,
    starts: Vec<usize>,
    start: u64,
}

impl Tables {
    /// Writes the samples table of the `k`th thread as `fxprof-processed-profile` serializes a
    /// `SampleTable` (time order, deltas in ms, weight 1, no cpu delta).
    fn write_thread(&self, ff: &Firefox, k: usize, w: &mut dyn Write) -> std::io::Result<()> {
        let t = self.order[k] as usize;
        let points = &self.by_thread[self.starts[t]..self.starts[t + 1]];
        let time = |i: usize| {
            ff.points[points[i] as usize]
                .time
                .saturating_sub(self.start)
        };
        let mut order: Vec<usize> = (0..points.len()).collect();
        if points.windows(2).any(|p| {
            ff.points[p[1] as usize].time.saturating_sub(self.start)
                < ff.points[p[0] as usize].time.saturating_sub(self.start)
        }) {
            order.sort_unstable_by_key(|&i| time(i));
        }
        let json = |w: &mut dyn Write, v: &dyn erased::Value| v.write(w);
        write!(
            w,
            "{{\"length\":{},\"weightType\":\"samples\",\"stack\":[",
            points.len()
        )?;
        for (n, &i) in order.iter().enumerate() {
            if n > 0 {
                w.write_all(b",")?;
            }
            match self.stack_index[points[i] as usize] {
                u32::MAX => w.write_all(b"null")?,
                s => write!(w, "{s}")?,
            }
        }
        w.write_all(b"],\"timeDeltas\":[")?;
        let mut prev = 0;
        for (n, &i) in order.iter().enumerate() {
            if n > 0 {
                w.write_all(b",")?;
            }
            let now = time(i);
            json(w, &((now - prev) as f64 / 1_000_000.0))?;
            prev = now;
        }
        w.write_all(b"],\"weight\":[")?;
        for n in 0..order.len() {
            w.write_all(if n > 0 { b",1" } else { b"1" })?;
        }
        w.write_all(b"],\"threadCPUDelta\":[")?;
        for n in 0..order.len() {
            if n > 0 {
                w.write_all(b",")?;
            }
            json(w, &CpuDelta::ZERO)?;
        }
        w.write_all(b"]}")
    }
}

/// Values written as `serde_json` writes them.
mod erased {
    /// A value `serde_json` can write.
    pub(super) trait Value {
        fn write(&self, w: &mut dyn std::io::Write) -> std::io::Result<()>;
    }

    impl Value for f64 {
        fn write(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
            serde_json::to_writer(w, self).map_err(std::io::Error::other)
        }
    }

    impl Value for fxprof_processed_profile::CpuDelta {
        fn write(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
            serde_json::to_writer(w, self).map_err(std::io::Error::other)
        }
    }
}

/// The samples table of a thread as the profile's tables hold it: one placeholder sample, no
/// stack, at `k` ms for the `k`th thread; [`Splice`] finds it and writes the thread's samples.
const PLACEHOLDER: &[u8] =
    br#""samples":{"length":1,"weightType":"samples","stack":[null],"timeDeltas":["#;

/// A writer that passes the JSON through, except each thread's placeholder samples table, which
/// it replaces with what `samples` writes for that thread.
struct Splice<'a, F> {
    out: &'a mut dyn Write,
    samples: F,
    /// Bytes that match the start of [`PLACEHOLDER`] so far, held back.
    held: Vec<u8>,
    /// After a whole [`PLACEHOLDER`]: the rest of the placeholder table, up to its `}`.
    tail: Option<Vec<u8>>,
    pass: Vec<u8>,
}

impl<'a, F: FnMut(usize, &mut dyn Write) -> std::io::Result<()>> Splice<'a, F> {
    fn new(out: &'a mut dyn Write, samples: F) -> Self {
        Splice {
            out,
            samples,
            held: Vec::new(),
            tail: None,
            pass: Vec::with_capacity(1 << 16),
        }
    }

    fn byte(&mut self, b: u8) -> std::io::Result<()> {
        if let Some(tail) = &mut self.tail {
            if b != b'}' {
                tail.push(b);
                return Ok(());
            }
            let text = String::from_utf8_lossy(tail);
            let k = text
                .split(['.', ']'])
                .next()
                .and_then(|n| n.parse::<usize>().ok())
                .ok_or_else(|| std::io::Error::other(format!("placeholder table {text}")))?;
            self.tail = None;
            self.out.write_all(&self.pass)?;
            self.pass.clear();
            self.out.write_all(&PLACEHOLDER[..10])?; // `"samples":`
            return (self.samples)(k, self.out);
        }
        self.held.push(b);
        if PLACEHOLDER.starts_with(&self.held) {
            if self.held.len() == PLACEHOLDER.len() {
                self.held.clear();
                self.tail = Some(Vec::new());
            }
            return Ok(());
        }
        // No match: the first held byte passes, the rest are tried again.
        let held = std::mem::take(&mut self.held);
        self.pass.push(held[0]);
        for &b in &held[1..] {
            self.byte(b)?;
        }
        if self.pass.len() >= 1 << 16 {
            self.out.write_all(&self.pass)?;
            self.pass.clear();
        }
        Ok(())
    }

    fn finish(mut self) -> std::io::Result<()> {
        let held = std::mem::take(&mut self.held);
        self.pass.extend_from_slice(&held);
        self.out.write_all(&self.pass)
    }
}

impl<F: FnMut(usize, &mut dyn Write) -> std::io::Result<()>> Write for Splice<'_, F> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for &b in buf {
            self.byte(b)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Firefox {
    /// Each used frame's names, caller first (inlined callees after their caller), and whether
    /// it is the kernel's; `None` before any batch named its sources.
    fn names(&self, pool: Option<&rayon::ThreadPool>) -> Option<Vec<Vec<(String, bool)>>> {
        let namer = self.sources.namer(pool)?;
        Some(namer.each_used(&self.stacks.used_frames(), |f, r| {
            r.iter()
                .rev()
                .map(|x| {
                    let mut s = String::new();
                    frame_name(x, f.query.ip, Naming::default(), &mut s);
                    (s, x.kind == FrameKind::Kernel)
                })
                .collect()
        }))
    }

    /// The frames of stack `stack`, caller first (stacks are innermost first), labelled with
    /// their names in the `[user, kernel]` category.
    fn frames(
        &self,
        profile: &mut Profile,
        names: &[Vec<(String, bool)>],
        stack: u32,
        [user, kernel]: [CategoryPairHandle; 2],
    ) -> Vec<FrameInfo> {
        self.stacks
            .get(stack)
            .iter()
            .rev()
            .flat_map(|&f| names[f as usize].iter())
            .map(|(n, k)| FrameInfo {
                frame: FxFrame::Label(profile.intern_string(n)),
                category_pair: if *k { kernel } else { user },
                flags: FrameFlags::empty(),
            })
            .collect()
    }

    /// The profile's tables (without the samples, a placeholder sample a thread), and what the
    /// samples tables are written from.
    fn tables(&self, pool: Option<&rayon::ThreadPool>) -> (Profile, Tables) {
        let start = self.points.iter().map(|p| p.time).min().unwrap_or(0);
        let mut profile = Profile::new(
            "perfpipe",
            ReferenceTimestamp::from_millis_since_unix_epoch(0.0),
            SamplingInterval::from_millis(1),
        );
        let user: CategoryPairHandle = profile.add_category("User", CategoryColor::Yellow).into();
        let kernel: CategoryPairHandle =
            profile.add_category("Kernel", CategoryColor::Orange).into();
        let mut tables = Tables {
            order: Vec::new(),
            stack_index: Vec::new(),
            by_thread: Vec::new(),
            starts: Vec::new(),
            start,
        };
        let Some(names) = self.names(pool) else {
            return (profile, tables);
        };
        let t0 = Timestamp::from_nanos_since_reference(0);
        let mut processes = FxHashMap::default();
        let mut handles = Vec::with_capacity(self.threads.len());
        let mut keys: Vec<u32> = (0..self.threads.len() as u32).collect();
        keys.sort_unstable_by_key(|&t| self.threads[t as usize].0);
        handles.resize(self.threads.len(), None);
        for (k, &t) in keys.iter().enumerate() {
            let ((pid, tid), comm) = &self.threads[t as usize];
            let process = *processes
                .entry(*pid)
                .or_insert_with(|| profile.add_process(comm, *pid, t0));
            let thread = profile.add_thread(process, *tid, t0, pid == tid);
            profile.set_thread_name(thread, comm);
            let at = Timestamp::from_nanos_since_reference(k as u64 * 1_000_000);
            profile.add_sample(thread, at, None, CpuDelta::ZERO, 1);
            handles[t as usize] = Some(thread);
        }
        tables.order = keys;
        // Stacks are interned in the order their samples came, as each sample is added.
        let mut interned: FxHashMap<(u32, u32), u32> = FxHashMap::default();
        tables.stack_index = self
            .points
            .iter()
            .map(|p| {
                let thread = handles[p.thread as usize].expect("every thread added");
                *interned.entry((p.thread, p.stack)).or_insert_with(|| {
                    let infos = self.frames(&mut profile, &names, p.stack, [user, kernel]);
                    profile
                        .intern_stack_frames(thread, infos.into_iter())
                        .map_or(u32::MAX, stack_index)
                })
            })
            .collect();
        // The points of each thread, in point order (a counting sort).
        let mut starts = vec![0usize; self.threads.len() + 1];
        for p in &self.points {
            starts[p.thread as usize + 1] += 1;
        }
        for t in 0..self.threads.len() {
            starts[t + 1] += starts[t];
        }
        let mut next = starts.clone();
        let mut by_thread = vec![0u32; self.points.len()];
        for (i, p) in self.points.iter().enumerate() {
            by_thread[next[p.thread as usize]] = i as u32;
            next[p.thread as usize] += 1;
        }
        tables.by_thread = by_thread;
        tables.starts = starts;
        (profile, tables)
    }
}

/// A stack's index in its thread's stack table, what the samples table names it by
/// (`fxprof-processed-profile` keeps it in the handle, which shows it only in its `Debug`:
/// `StackHandle(ThreadHandle(T), INDEX)`).
fn stack_index(h: fxprof_processed_profile::StackHandle) -> u32 {
    let text = format!("{h:?}");
    text.trim_end_matches(')')
        .rsplit([' ', ','])
        .next()
        .and_then(|n| n.parse().ok())
        .expect("StackHandle(ThreadHandle(T), INDEX)")
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

    /// The profile as `fxprof-processed-profile` writes it with every sample added (what this
    /// sink wrote before it streamed the samples tables): the same bytes.
    fn whole(ff: &Firefox) -> Vec<u8> {
        let start = ff.points.iter().map(|p| p.time).min().unwrap_or(0);
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
        let mut keys: Vec<&((u32, u32), String)> = ff.threads.iter().collect();
        keys.sort_unstable_by_key(|t| t.0);
        for ((pid, tid), comm) in keys {
            let process = *processes
                .entry(*pid)
                .or_insert_with(|| profile.add_process(comm, *pid, t0));
            let thread = profile.add_thread(process, *tid, t0, pid == tid);
            profile.set_thread_name(thread, comm);
            threads.insert((*pid, *tid), thread);
        }
        let mut handles = FxHashMap::default();
        for p in &ff.points {
            let key = ff.threads[p.thread as usize].0;
            let thread = threads[&key];
            let stack = *handles.entry((key, p.stack)).or_insert_with(|| {
                let infos = ff.frames(&mut profile, &names, p.stack, [user, kernel]);
                profile.intern_stack_frames(thread, infos.into_iter())
            });
            let at = Timestamp::from_nanos_since_reference(p.time.saturating_sub(start));
            profile.add_sample(thread, at, stack, CpuDelta::ZERO, 1);
        }
        serde_json::to_vec(&profile).unwrap()
    }

    #[test]
    fn the_streamed_samples_tables_are_the_bytes_of_the_whole_profile() {
        use kit::Profile as _;
        let mut ff = Firefox::default();
        // Batches small enough that threads' samples come out of time order across them.
        for b in crate::test_support::symbolized(MULTIPROC, 16 << 10) {
            ff.add(&b);
        }
        assert!(ff.threads.len() > 3 && ff.points.len() == 1664);
        let (profile, tables) = ff.tables(None);
        let mut streamed = Vec::new();
        let mut splice = Splice::new(&mut streamed, |k, w: &mut dyn Write| {
            tables.write_thread(&ff, k, w)
        });
        serde_json::to_writer(&mut splice, &profile).unwrap();
        splice.finish().unwrap();
        let whole = whole(&ff);
        assert!(
            streamed == whole,
            "{:.300}\n{:.300}",
            String::from_utf8_lossy(&streamed),
            String::from_utf8_lossy(&whole)
        );
    }
}

//! Unit tests of the `ring` stage on synthetic streams, decoded and fed through the harness.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use perfpipe_core::{harness, Batch, Flow, Out, Stage, StageError};

use super::{Ring, RingConfig};
use crate::format::RecordType;
use crate::synth::{decoded, SynthStream};

/// The streams in `batches`' output, split at each pipe header, as (type, bytes) records.
fn streams(batches: &[Batch]) -> Vec<Vec<(u32, Vec<u8>)>> {
    let mut out: Vec<Vec<(u32, Vec<u8>)>> = Vec::new();
    for b in batches {
        for s in &b.spans {
            if s.kind == crate::format::PIPE_HEADER_KIND {
                out.push(Vec::new());
            }
            out.last_mut()
                .expect("a stream starts with its header")
                .push((s.kind, b.bytes(s).to_vec()));
        }
    }
    out
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Sample time (synth layout: ip, pid/tid, time).
fn sample_time(rec: &[u8]) -> u64 {
    u64_at(rec, 24)
}

fn config(size: usize) -> RingConfig {
    RingConfig::parse(&size.to_string()).unwrap()
}

/// Two processes set up long before the window (a fork copies the parent's maps), then many
/// samples of the child; returns the stream and every sample time.
fn long_stream(samples: u64) -> (Vec<u8>, Vec<u64>) {
    let mut s = SynthStream::new();
    s.comm(100, 100, "parent", true, 1_000);
    s.mmap2(100, 0x40_0000, 0x1000, "/usr/bin/parent", 7, 1_100);
    s.mmap2(
        100,
        0x7f00_0000_0000,
        0x8_0000,
        "/usr/lib/libc.so.6",
        8,
        1_200,
    );
    s.fork(200, 100, 2_000);
    s.comm(200, 200, "child", false, 2_100);
    let mut times = Vec::new();
    for i in 0..samples {
        // Two cpus interleave slightly out of order within a round.
        let t = 10_000 + i * 1000 + if i % 2 == 0 { 500 } else { 0 };
        s.sample(200, 200, t, (i % 2) as u32, 0x7f00_0000_0100, &[]);
        times.push(t);
        if i % 100 == 99 {
            s.finished_round();
        }
    }
    (s.into_bytes(), times)
}

#[test]
fn end_of_input_dumps_the_newest_window_with_its_side_band() {
    let (stream, times) = long_stream(5000);
    let mut ring = config(16 << 10).build();
    let out = harness::run_stage(&mut ring, decoded(&stream, 4096)).unwrap();
    let dumps = streams(&out);
    assert_eq!(dumps.len(), 1);
    let d = &dumps[0];
    // Header first: the pipe header, then the attr.
    assert_eq!(d[0].0, crate::format::PIPE_HEADER_KIND);
    assert_eq!(d[1].0, RecordType::HEADER_ATTR.0);
    // Side-band of the child, rewritten from its parent: COMM, then both maps under pid 200.
    let side: Vec<&(u32, Vec<u8>)> = d
        .iter()
        .filter(|(t, _)| *t == RecordType::COMM.0 || *t == RecordType::MMAP2.0)
        .collect();
    assert_eq!(side.len(), 3, "{side:?}");
    assert_eq!(side[0].0, RecordType::COMM.0);
    assert_eq!(&side[0].1[16..21], b"child");
    for (t, rec) in &side[1..] {
        assert_eq!(*t, RecordType::MMAP2.0);
        assert_eq!((u32_at(rec, 8), u32_at(rec, 12)), (200, 200));
        // The trailer's pid/tid too (TID, TIME, ID, CPU: 32 bytes from the end).
        assert_eq!(u32_at(rec, rec.len() - 32), 200);
    }
    // The samples: the newest that fit in 16 KiB, sorted by time, ending with the last.
    let kept: Vec<u64> = d
        .iter()
        .filter(|(t, _)| *t == RecordType::SAMPLE.0)
        .map(|(_, r)| sample_time(r))
        .collect();
    let bytes: usize = d
        .iter()
        .filter(|(t, _)| *t == RecordType::SAMPLE.0)
        .map(|(_, r)| r.len() + super::buffer::PREFIX)
        .sum();
    assert!(bytes <= 16 << 10 && bytes > (16 << 10) - 200, "{bytes}");
    assert!(kept.windows(2).all(|w| w[0] <= w[1]), "not sorted");
    let mut newest = times[times.len() - kept.len()..].to_vec();
    newest.sort_unstable();
    assert_eq!(kept, newest);
    // It ends with one FINISHED_ROUND.
    assert_eq!(d.last().unwrap().0, RecordType::FINISHED_ROUND.0);
    assert!(ring.events_dropped.get() > 4000);
    assert_eq!(ring.dumps.get(), 1);
    assert!(ring.ring_bytes.get() <= 16 << 10);
    assert!(ring.sideband_bytes.get() > 0);
}

/// The MMAP2 file names and COMM names the dump replays for `pid`.
fn replayed(dump: &[(u32, Vec<u8>)], pid: u32) -> (Vec<String>, Vec<String>) {
    let name = |b: &[u8]| {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(&b[..end]).into_owned()
    };
    let of_pid = |t: u32| {
        dump.iter()
            .filter(move |(k, r)| *k == t && u32_at(r, 8) == pid)
            .map(|(_, r)| r)
    };
    let maps = of_pid(RecordType::MMAP2.0)
        .map(|r| name(&r[72..]))
        .collect();
    let comms = of_pid(RecordType::COMM.0).map(|r| name(&r[16..])).collect();
    (maps, comms)
}

#[test]
fn side_band_that_arrives_before_its_fork_is_applied_in_time_order() {
    // perf drains one cpu's buffer after another: here cpu 1's records of a new process (its exec
    // and its map) arrive before cpu 0's FORK that created it, which is earlier in time. All of
    // them leave the ring before the window; the state must still be the child's own image.
    let mut s = SynthStream::new();
    s.comm(100, 100, "parent", true, 1_000);
    s.mmap2(100, 0x40_0000, 0x1000, "/usr/bin/parent", 7, 1_100);
    s.sample(100, 100, 1_500, 0, 0x40_0100, &[]);
    s.comm(200, 200, "child", true, 2_100);
    s.mmap2(200, 0x50_0000, 0x1000, "/usr/bin/child", 9, 2_200);
    s.fork(200, 100, 2_000);
    s.finished_round();
    for i in 0..3000 {
        s.sample(200, 200, 10_000 + i * 1000, 0, 0x50_0100, &[]);
        if i % 100 == 99 {
            s.finished_round();
        }
    }
    let mut ring = config(16 << 10).build();
    let out = harness::run_stage(&mut ring, decoded(&s.into_bytes(), 4096)).unwrap();
    let dumps = streams(&out);
    let (maps, comms) = replayed(&dumps[0], 200);
    // The child's own map, and its parent's, which perf keeps after an exec.
    assert_eq!(maps, ["/usr/bin/parent", "/usr/bin/child"]);
    assert_eq!(comms, ["child"]);
    assert!(ring.events_dropped.get() > 2000);
}

/// Sets the request flag before the batches numbered in `at`.
struct Signaller {
    ring: Ring,
    flag: Arc<AtomicBool>,
    at: Vec<usize>,
    n: usize,
}

impl Stage for Signaller {
    fn process(&mut self, batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        self.n += 1;
        if self.at.contains(&self.n) {
            self.flag.store(true, Ordering::Relaxed);
        }
        self.ring.process(batch, out)
    }
    fn flush(&mut self, out: &mut Out<'_>) -> Result<(), StageError> {
        self.ring.flush(out)
    }
}

#[test]
fn requests_give_consecutive_windows_and_the_end_gives_the_last() {
    let (stream, _) = long_stream(3000);
    let flag = Arc::new(AtomicBool::new(false));
    let mut cfg = config(1 << 20);
    cfg.requests = Some(flag.clone());
    let input = decoded(&stream, 8192);
    let n = input.len();
    let mut s = Signaller {
        ring: cfg.build(),
        flag,
        at: vec![n / 3, 2 * n / 3],
        n: 0,
    };
    let out = harness::run_stage(&mut s, input).unwrap();
    let dumps = streams(&out);
    assert_eq!(dumps.len(), 3);
    let mut all = Vec::new();
    for d in &dumps {
        assert_eq!(d[1].0, RecordType::HEADER_ATTR.0);
        let t: Vec<u64> = d
            .iter()
            .filter(|(t, _)| *t == RecordType::SAMPLE.0)
            .map(|(_, r)| sample_time(r))
            .collect();
        assert!(!t.is_empty());
        // Every dump replays the child's side-band, recorded before any window.
        assert!(d
            .iter()
            .any(|(t, r)| *t == RecordType::COMM.0 && &r[16..21] == b"child"));
        all.push(t);
    }
    // Consecutive: nothing lost, nothing twice (the ring is larger than the stream).
    let total: usize = all.iter().map(Vec::len).sum();
    assert_eq!(total, 3000);
    assert!(all[0].last() < all[1].first() || all[0].last().unwrap() - all[1][0] <= 500);
}

#[test]
fn a_trigger_expression_dumps_at_the_matching_sample_and_once_stops() {
    let mut s = SynthStream::new();
    s.comm(5, 5, "w", true, 10);
    for i in 0..100u64 {
        let pid = if i == 60 { 6 } else { 5 };
        s.sample(pid, pid, 1000 + i, 0, 0x1000, &[]);
    }
    let stream = s.into_bytes();
    let mut ring = RingConfig::parse("64K,once,trigger=pid == 6")
        .unwrap()
        .build();
    let out = harness::run_stage(&mut ring, decoded(&stream, 1 << 20)).unwrap();
    let dumps = streams(&out);
    assert_eq!(dumps.len(), 1, "once: one dump only");
    let t: Vec<u64> = dumps[0]
        .iter()
        .filter(|(t, _)| *t == RecordType::SAMPLE.0)
        .map(|(_, r)| sample_time(r))
        .collect();
    assert_eq!(t, (1000..=1060).collect::<Vec<u64>>());

    // With --ring-after 20ns (event time) and no `once`: the dump waits for time >= 1080, then the
    // end of input dumps the rest.
    let mut ring = RingConfig::parse("64K,after=20ns,trigger=pid == 6")
        .unwrap()
        .build();
    let out = harness::run_stage(&mut ring, decoded(&stream, 1 << 20)).unwrap();
    let dumps = streams(&out);
    assert_eq!(dumps.len(), 2);
    let last = |d: &Vec<(u32, Vec<u8>)>| {
        d.iter()
            .filter(|(t, _)| *t == RecordType::SAMPLE.0)
            .map(|(_, r)| sample_time(r))
            .max()
    };
    assert_eq!(last(&dumps[0]), Some(1079));
    assert_eq!(last(&dumps[1]), Some(1099));

    // A trigger fires once: every sample of pid 5 matches, in batches of a few records, yet
    // there is one trigger dump (at the first sample) and the end's.
    let mut ring = RingConfig::parse("64K,trigger=pid == 5").unwrap().build();
    let out = harness::run_stage(&mut ring, decoded(&stream, 256)).unwrap();
    let dumps = streams(&out);
    assert_eq!(dumps.len(), 2);
    assert_eq!(last(&dumps[0]), Some(1000));
    assert_eq!(last(&dumps[1]), Some(1099));
}

#[test]
fn values_parse_and_bad_ones_are_refused() {
    let c = RingConfig::parse("64M").unwrap();
    assert_eq!((c.size, c.once, c.after), (64 << 20, false, None));
    let c =
        RingConfig::parse("1M,once,after=1.5s,trigger=comm == \"a,b\" && cpu in [0, 1]").unwrap();
    assert!(c.once && c.trigger.is_some());
    assert_eq!(c.after, Some(std::time::Duration::from_millis(1500)));
    for bad in [
        "",
        "lots",
        "100",
        "1M,sometimes",
        "1M,after=2s",
        "1M,trigger=pid ==",
        "1M,after=x,trigger=pid == 1",
    ] {
        assert!(RingConfig::parse(bad).is_err(), "{bad}");
    }
    assert_eq!(
        super::parse_duration("250ms").unwrap(),
        std::time::Duration::from_millis(250)
    );
}

#[test]
fn malformed_side_band_never_panics() {
    // Records cut short or with odd sizes in every side-band type, then samples.
    let mut stream = SynthStream::new().into_bytes();
    for t in [1u32, 3, 4, 7, 10, 9, 82, 68] {
        for len in [8usize, 16, 24, 40, 72] {
            let mut rec = vec![0u8; len];
            rec[..4].copy_from_slice(&t.to_le_bytes());
            rec[6..8].copy_from_slice(&(len as u16).to_le_bytes());
            for (i, b) in rec[8..].iter_mut().enumerate() {
                *b = (i * 37) as u8;
            }
            stream.extend_from_slice(&rec);
        }
    }
    let mut ring = config(4096).build();
    let out = harness::run_stage(&mut ring, decoded(&stream, 64)).unwrap();
    assert_eq!(streams(&out).len(), 1);
}

/// Samples of two processes on `cpus` cpus, one every 1000 ns per cpu from time 100_000, drained
/// as perf drains them: per round, one cpu's records after another's (cpu 0 first). `rounds` is
/// the number of FINISHED_ROUNDs (1: a single one at the end, as in a short `perf record -o -`).
/// Returns the stream and every sample as (time, cpu, bytes).
fn drained(cpus: u32, per_cpu: u64, rounds: u64) -> (Vec<u8>, Vec<(u64, u32, usize)>) {
    let mut s = SynthStream::new();
    s.comm(100, 100, "a", true, 1_000);
    s.comm(200, 200, "b", true, 1_100);
    let mut all = Vec::new();
    let per_round = per_cpu.div_ceil(rounds);
    for r in 0..rounds {
        for cpu in 0..cpus {
            for i in r * per_round..((r + 1) * per_round).min(per_cpu) {
                // cpus tick at offsets, so their times interleave
                let t = 100_000 + i * 1000 + u64::from(cpu) * 333;
                let pid = 100 * (cpu + 1);
                let chain: Vec<u64> = (0..(i % 5)).map(|k| 0x1000 + k).collect();
                let before = s.bytes().len();
                s.sample(pid, pid, t, cpu, 0x1000, &chain);
                all.push((t, cpu, s.bytes().len() - before));
            }
        }
        s.finished_round();
    }
    (s.into_bytes(), all)
}

/// The (time, cpu) of every sample of a dump.
fn dumped_samples(dump: &[(u32, Vec<u8>)]) -> Vec<(u64, u32)> {
    let mut v: Vec<(u64, u32)> = dump
        .iter()
        .filter(|(t, _)| *t == RecordType::SAMPLE.0)
        .map(|(_, r)| (sample_time(r), u32_at(r, 40)))
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn a_dump_is_every_sample_of_the_newest_time_window_whatever_the_drain_order() {
    let size = 16 << 10;
    for (cpus, rounds) in [(2, 1), (2, 7), (2, 40), (1, 1), (1, 40)] {
        let (stream, all) = drained(cpus, 2000, rounds);
        for chunk in [333, 1 << 16] {
            let mut ring = config(size).build();
            let out = harness::run_stage(&mut ring, decoded(&stream, chunk)).unwrap();
            let dumps = streams(&out);
            assert_eq!(dumps.len(), 1);
            let got = dumped_samples(&dumps[0]);
            let what = format!("{cpus} cpus, {rounds} rounds, chunk {chunk}");
            let lo = got.first().expect("samples").0;
            // Every sample of the input from the window's first time on, on every cpu.
            let mut want: Vec<(u64, u32)> = all
                .iter()
                .filter(|s| s.0 >= lo)
                .map(|s| (s.0, s.1))
                .collect();
            want.sort_unstable();
            assert_eq!(got, want, "{what}");
            assert_eq!(
                got.last().unwrap().0,
                all.iter().map(|s| s.0).max().unwrap()
            );
            // The newest window that fits: with the next older sample it would not.
            let bytes = |from: u64| -> usize {
                all.iter()
                    .filter(|s| s.0 >= from)
                    .map(|s| s.2 + super::buffer::PREFIX)
                    .sum()
            };
            let older = all.iter().map(|s| s.0).filter(|&t| t < lo).max().unwrap();
            assert!(bytes(lo) <= size && bytes(older) > size, "{what}");
            if cpus == 2 && rounds == 1 {
                // cpu 1's older samples came after cpu 0 had filled the window.
                assert!(ring.events_late.get() > 1000, "{what}");
            }
            assert_eq!(
                ring.events_dropped.get() as usize,
                all.len() - got.len(),
                "{what}"
            );
        }
    }
}

#[test]
fn a_late_fork_is_replayed_before_the_child_records_it_precedes() {
    // One round: cpu 1 (the child's exec COMM, its map and its samples) is drained before cpu 0
    // (the parent's samples and the FORK, earlier in time). By the time the FORK arrives the
    // window has moved past it, so it is late; it must still come before the child's COMM and
    // MMAP2, or perf would replace the child's image with its parent's.
    let mut s = SynthStream::new();
    s.comm(100, 100, "parent", true, 1_000);
    s.mmap2(100, 0x40_0000, 0x1000, "/usr/bin/parent", 7, 1_100);
    s.sample(100, 100, 1_200, 0, 0x40_0100, &[]);
    // cpu 1
    s.comm(200, 200, "child", true, 2_100);
    s.mmap2(200, 0x50_0000, 0x1000, "/usr/bin/child", 9, 2_200);
    for i in 0..2000 {
        s.sample(200, 200, 10_000 + i * 1000, 1, 0x50_0100, &[]);
    }
    // cpu 0
    s.fork(200, 100, 2_000);
    for i in 0..2000 {
        s.sample(100, 100, 10_500 + i * 1000, 0, 0x40_0100, &[]);
    }
    s.finished_round();
    let mut ring = config(16 << 10).build();
    let out = harness::run_stage(&mut ring, decoded(&s.into_bytes(), 4096)).unwrap();
    let dumps = streams(&out);
    let d = &dumps[0];
    assert!(ring.events_late.get() > 0);
    // The child's records in the order perf will see them: FORK, COMM, MMAP2 (or the state that
    // they make, replayed as the child's own COMM and maps).
    let child: Vec<u32> = d
        .iter()
        .filter(|(t, r)| {
            [RecordType::FORK.0, RecordType::COMM.0, RecordType::MMAP2.0].contains(t)
                && u32_at(r, 8) == 200
        })
        .map(|(t, _)| *t)
        .collect();
    let fork = child.iter().position(|&t| t == RecordType::FORK.0);
    let comm = child.iter().position(|&t| t == RecordType::COMM.0);
    let map = child.iter().rposition(|&t| t == RecordType::MMAP2.0);
    assert!(comm.is_some() && map.is_some(), "{child:?}");
    if let Some(f) = fork {
        assert!(f < comm.unwrap() && f < map.unwrap(), "{child:?}");
    }
    let (maps, comms) = replayed(d, 200);
    assert_eq!(maps.last().map(String::as_str), Some("/usr/bin/child"));
    assert_eq!(comms.last().map(String::as_str), Some("child"));
    // Both cpus' newest samples are there, over the same time window.
    let got = dumped_samples(d);
    let lo = got[0].0;
    assert!(got.iter().any(|s| s.1 == 0) && got.iter().any(|s| s.1 == 1));
    let on = |cpu: u32| got.iter().filter(|s| s.1 == cpu).count() as i64;
    assert!(
        (on(0) - on(1)).abs() <= 1,
        "{} vs {} from {lo}",
        on(0),
        on(1)
    );
}

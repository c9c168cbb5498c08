//! `perfpipe record` of tracepoints and context switches (issue 31): `-e sched:sched_switch -a
//! -g` and `-g -e context-switches -c 1 --switch-events -- CMD` read by every reader (perf 6.1
//! and 6.12); the tracing data byte for byte the blob `perf record` writes; `perf script -F
//! trace` printing the fields that tracing data describes, with the values perfpipe reads; the
//! same recording as a perf.data file, every sample counted by both; and the off-CPU and
//! wall-clock profiles of `offcpu.c` recorded by perfpipe, with its known waits on their
//! functions.

use crate::offcpu::{
    assert_known_waits, one_at_a_time, perf_trace_lines, profile, record_workload_with,
    switch_lines, through,
};
use crate::readers::{self, assert_every_reader_accepts, Input};
use crate::util::*;
use crate::workloads::offcpu_c;
use perfpipe_stream::format::tracing::{TracingData, MAGIC};

/// A shell that sleeps ten times: a few dozen switches of its own.
const NAPS: [&str; 3] = [
    "sh",
    "-c",
    "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 0.01; done",
];

/// The tracing-data blob of a pipe stream: the bytes after the HEADER_TRACING_DATA record, as
/// long as its `size` says (padded to 8).
fn tracing_blob(stream: &[u8]) -> &[u8] {
    let at = stream
        .windows(MAGIC.len())
        .position(|w| w == MAGIC)
        .expect("a stream with tracing data");
    let record = &stream[at - 16..at];
    assert_eq!(u32::from_le_bytes(record[0..4].try_into().unwrap()), 66);
    let size = u32::from_le_bytes(record[8..12].try_into().unwrap()) as usize;
    &stream[at..at + size]
}

/// The blob without its last section, the saved cmdlines (the comms tracefs saw lately, which may
/// change between two recordings), and its padding: a walk of the layout perf writes.
fn without_cmdlines(blob: &[u8]) -> &[u8] {
    let u32_at = |p: usize| u32::from_le_bytes(blob[p..p + 4].try_into().unwrap()) as usize;
    let u64_at = |p: usize| u64::from_le_bytes(blob[p..p + 8].try_into().unwrap()) as usize;
    let nul = |p: usize| p + blob[p..].iter().position(|&b| b == 0).unwrap() + 1;
    let mut p = nul(MAGIC.len()) + 2 + 4; // version, endian, long size, page size
    for _ in 0..2 {
        p = nul(p); // header_page, header_event
        p += 8 + u64_at(p);
    }
    let formats = |mut p: usize| {
        let n = u32_at(p);
        p += 4;
        for _ in 0..n {
            p += 8 + u64_at(p);
        }
        p
    };
    p = formats(p); // ftrace
    let systems = u32_at(p);
    p += 4;
    for _ in 0..systems {
        p = formats(nul(p));
    }
    for _ in 0..2 {
        p += 4 + u32_at(p); // kallsyms, printk formats
    }
    &blob[..p]
}

/// The names of the fields `perf script -F trace` prints on a line (`name=value …`; not the
/// `==>` between the two tasks).
fn printed_fields(line: &str) -> Vec<&str> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('=').map(|(k, _)| k))
        .filter(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .collect()
}

pipetest!(needs(perf, perf612, trixie, tracefs)
    /// `perfpipe record -a -g -e sched:sched_switch`: its tracing data is perf record's blob, byte
    /// for byte but for the saved cmdlines; every reader reads the stream, and its `perf script
    /// -F trace` prints for every sample the fields of the format in that tracing data, with the
    /// values perfpipe reads by name.
    record_sched_switch_system_wide_is_read_by_every_perf, |dir| {
    let (rec, _) = one_at_a_time(|| {
        perfpipe_record(&["-a", "-g", "-e", "sched:sched_switch", "-o", "-"], &NAPS)
    });
    let theirs = perf_record(&["-a", "-g", "-e", "sched:sched_switch"], &["true"]);
    let blob = tracing_blob(&rec);
    eqnice!(without_cmdlines(tracing_blob(&theirs)), without_cmdlines(blob));

    let tracing = TracingData::parse(blob);
    assert!(tracing.errors.is_empty(), "{:?}", tracing.errors);
    let [format] = &tracing.events[..] else {
        panic!("one format: {:?}", tracing.events);
    };
    let fields: Vec<&str> =
        format.fields.iter().filter(|f| !f.common).map(|f| f.name.as_str()).collect();
    assert_eq!(fields[0], "prev_comm");

    let file = dir.write("sw.pipe", &rec);
    let ours = switch_lines(&file);
    assert!(ours.len() > 50, "{} sched_switch samples", ours.len());
    for perf in readers() {
        readers::read(&perf, &readers::SCRIPT, Input::Stream(&rec))
            .unwrap_or_else(|e| panic!("{e}"));
        let lines = perf_trace_lines(&perf, Input::Stream(&rec));
        assert_eq!(lines.len(), ours.len(), "{}", perf.name);
        for line in &lines {
            assert_eq!(printed_fields(line), fields, "{}: {line}", perf.name);
        }
        let diff: Vec<_> = ours.iter().zip(&lines).filter(|(a, b)| a != b).take(5).collect();
        assert!(diff.is_empty(), "{}: first differences (ours, perf): {diff:#?}", perf.name);
    }
    // As a perf.data file (the tracing data in its feature section), where `perf report
    // --stats` reads tracepoints too: every reader counts every sample.
    let data = dir.path("sw.data");
    perfpipe_ok(&["-i", file.to_str().unwrap(), "-o", data.to_str().unwrap()], b"");
    let n = assert_every_reader_accepts("sched_switch as a file", Input::File(&data));
    assert_eq!(n, ours.len() as u64);
});

pipetest!(needs(perf, perf612, trixie, tracefs)
    /// `--switch-events`: per process (`-g -e context-switches -c 1`) every reader reads the
    /// stream, counts its samples alike and prints one SWITCH OUT per context-switches sample,
    /// and SWITCH IN records; system-wide, SWITCH_CPU_WIDE records.
    record_switch_events_are_read_by_every_perf, |_dir| {
    let args = ["-g", "-e", "context-switches", "-c", "1", "--switch-events", "-o", "-"];
    let (rec, _) = perfpipe_record(&args, &NAPS);
    let samples = assert_every_reader_accepts("context-switches --switch-events", Input::Stream(&rec));
    assert!(samples >= 10, "{samples} context switches of ten sleeps");
    for perf in readers() {
        let out = readers::read(&perf, &["script", "--show-switch-events"], Input::Stream(&rec))
            .unwrap_or_else(|e| panic!("{e}"));
        let count = |what: &str| out.lines().filter(|l| l.contains(what)).count() as u64;
        assert_eq!(count("PERF_RECORD_SWITCH OUT"), samples, "{}", perf.name);
        assert!(count("PERF_RECORD_SWITCH IN") >= samples, "{}", perf.name);
    }

    let (rec, _) = one_at_a_time(|| {
        perfpipe_record(&["-a", "-e", "sched:sched_switch", "--switch-events", "-o", "-"], &NAPS)
    });
    for perf in readers() {
        let out = readers::read(&perf, &["script", "--show-switch-events"], Input::Stream(&rec))
            .unwrap_or_else(|e| panic!("{e}"));
        let n = |what: &str| out.lines().filter(|l| l.contains(what)).count();
        assert!(n("PERF_RECORD_SWITCH_CPU_WIDE OUT") >= 10, "{}", perf.name);
        assert!(n("sched:sched_switch:") >= 10, "{}", perf.name);
    }
});

pipetest!(needs(perf, cc, tracefs)
    /// The off-CPU profiles of `offcpu.c` recorded by `perfpipe record` in both forms, and the
    /// wall-clock profile of `-e cpu-clock -e sched:sched_switch`: the known waits on their
    /// functions within 5 %, as from `perf record` (`offcpu`), and `spin`'s 300 ms on the cpu.
    record_offcpu_profiles_have_the_known_waits, |dir| {
    let exe = offcpu_c(&dir);
    let forms = [
        ["-a", "-g", "-e", "sched:sched_switch"].as_slice(),
        &["-g", "-e", "context-switches", "-c", "1", "--switch-events"],
    ];
    for args in forms {
        let form = args.join(" ");
        let (rec, measured) = record_workload_with(perfpipe_record, &exe, args);
        let (folded, stats) = profile(&dir, &rec, &["--weight", "offcpu"], "off.folded");
        assert_known_waits(&folded, &form, &measured);
        assert!(counter(&stats, "offcpu_intervals") >= 100, "{form}: {stats}");
        assert_eq!(counter(&stats, "tracing_data_errors"), 0, "{form}: {stats}");
    }
    let args = ["-a", "-g", "-e", "cpu-clock", "-e", "sched:sched_switch"];
    let (rec, measured) = record_workload_with(perfpipe_record, &exe, &args);
    let (wall, _) = profile(&dir, &rec, &["--weight", "wall"], "wall.folded");
    assert_known_waits(&wall, "wall", &measured);
    let spin = through(&wall, "spin");
    assert!(spin.abs_diff(300_000_000) <= 30_000_000, "spin on the cpu {spin} ns");
});

pipetest!(needs(perf, cc, tracefs)
    /// `perfpipe record -a -g -e sched:sched_switch -e sched:sched_waking`: perf reads its
    /// wakeups, and `--weight offwake` puts wait_pipe's 300 ms under the waker `writer` and its
    /// `write_later`, within 5 % of what the workload measured. (`sched_waking` fires in the
    /// waker's context; `sched_wakeup` on the woken thread's cpu when the wakeup is queued to
    /// it, under `swapper` when that cpu is idle: docs/off-cpu.md.)
    record_sched_waking_names_the_wakers, |dir| {
    let exe = offcpu_c(&dir);
    let args = ["-a", "-g", "-e", "sched:sched_switch", "-e", "sched:sched_waking"];
    let (rec, measured) = record_workload_with(perfpipe_record, &exe, &args);
    let out = readers::read(&oracle(), &["script", "-F", "event,trace"], Input::Stream(&rec))
        .unwrap_or_else(|e| panic!("{e}"));
    let wakeups = out.lines().filter(|l| l.contains("sched:sched_waking:")).count();
    assert!(wakeups >= 100, "{wakeups} sched_waking samples");
    let (folded, stats) = profile(&dir, &rec, &["--weight", "offwake"], "wake.folded");
    assert_eq!(counter(&stats, "tracing_data_errors"), 0, "{stats}");
    assert!(counter(&stats, "offcpu_woken") >= 100, "{stats}");
    let by_writer: u64 = folded
        .lines()
        .filter_map(|l| {
            let (stack, n) = l.rsplit_once(' ')?;
            let (blocked, waker) = stack.split_once(";--;")?;
            let ours = blocked.split(';').any(|f| f == "wait_pipe")
                && waker.split(';').any(|f| f == "write_later")
                && waker.ends_with(";writer");
            ours.then(|| n.parse::<u64>().unwrap())
        })
        .sum();
    let want = measured.iter().find(|m| m.0 == "wait_pipe").unwrap().1;
    assert!(by_writer.abs_diff(want) as f64 <= 0.05 * want as f64, "{by_writer} of {want}");
});

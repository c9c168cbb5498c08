//! Passthrough: `perfpipe` with no transform writes its input back byte for byte, and every reader
//! (perf 6.1 and 6.12) accepts it.

use crate::readers::{self, Input};
use crate::util::*;

pipetest!(
    /// Every checked-in fixture, at several batch sizes, comes back byte-identical.
    fixtures_round_trip_byte_identical, |_dir| {
    for name in all_fixtures() {
        let input = fixture_bytes(&name);
        for batch in ["4K", "64K", "256K", "1M"] {
            let out = perfpipe(&["--batch-size", batch], &input);
            assert!(
                out.status.success(),
                "{name} at {batch}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                out.stdout == input,
                "{name} at {batch}: output differs from input"
            );
        }
    }
});

pipetest!(
    /// `-i FILE -o FILE --pipe` works like standard input and output.
    files_in_and_out, |dir| {
    let input = fixture("multiproc.pipe.data");
    let output = dir.path("out.data");
    let out = perfpipe(
        &[
            "--pipe",
            "-i",
            input.to_str().unwrap(),
            "-o",
            output.to_str().unwrap(),
        ],
        b"",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    eqnice!(
        std::fs::read(&input).unwrap(),
        std::fs::read(&output).unwrap()
    );
});

pipetest!(
    /// `--stats` prints one row per stage with the records that passed.
    stats_table_counts_records, |_dir| {
    let input = fixture_bytes("cpu-clock.pipe.data");
    let out = perfpipe(&["--stats"], &input);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let decode = err
        .lines()
        .find(|l| l.starts_with("decode"))
        .unwrap_or_else(|| panic!("no decode row in {err}"));
    // 3501 records (perf report --stats) + the pipe header.
    assert!(decode.contains(" 3502 "), "{decode}");
    let write = err.lines().find(|l| l.starts_with("write")).unwrap();
    assert!(write.contains(" 3502 "), "{write}");
});

pipetest!(needs(perf, perf612, trixie)
    /// Every reader (perf 6.1 and 6.12) reads our output of every fixture, and sees the same
    /// side-band and samples.
    perf_script_accepts_fixture_output, |_dir| {
    for name in all_fixtures() {
        let input = fixture_bytes(&name);
        let out = perfpipe(&[], &input);
        assert!(out.status.success());
        let (input, ours) = (Input::Stream(&input), Input::Stream(&out.stdout));
        for perf in readers() {
            // Neither 6.1's nor 6.12's `report --stats` reads a `-z` pipe ("Couldn't decompress
            // data") or one with tracing data ("failed to process type: 1950615575": it takes the
            // tracing data's payload for records); `perf script` and `perf report` do.
            if name.starts_with("compressed") || name.starts_with("tracepoint") {
                let got = readers::same_script(&perf, &readers::SCRIPT, input, ours);
                let got = got.unwrap_or_else(|e| panic!("{name}: {e}"));
                assert!(count_samples(&got) > 10, "{name}: too few samples");
                let report = readers::read(&perf, &["report", "--stdio"], ours);
                let report = report.unwrap_or_else(|e| panic!("{name}: {e}"));
                assert!(report.contains("# Samples:"), "{name}: {report}");
            } else {
                let n = readers::reads_like(&perf, input, ours);
                assert!(n.unwrap_or_else(|e| panic!("{name}: {e}")) > 10, "{name}");
            }
        }
    }
});

pipetest!(needs(perf, perf612, trixie)
    /// Live recordings of every shape the issue lists: byte-identical, and accepted by every reader's
    /// `perf script` and `perf report --stats`.
    live_recordings_round_trip, |_dir| {
    let w = workload();
    let shapes: &[(&str, &[&str], &[&str])] = &[
        (
            "plain",
            &["-e", "cpu-clock", "-c", "200000"],
            &[&w, "single", "2"],
        ),
        (
            "-g",
            &["-e", "cpu-clock", "-c", "200000", "-g"],
            &[&w, "single", "2"],
        ),
        (
            "dwarf",
            &[
                "-e",
                "cpu-clock",
                "-c",
                "1000000",
                "--call-graph",
                "dwarf,2048",
            ],
            &[&w, "single", "1"],
        ),
        (
            "two events",
            &["-e", "cpu-clock,task-clock", "-c", "200000"],
            &[&w, "single", "2"],
        ),
        (
            "switch",
            &["-e", "cpu-clock", "-c", "200000", "--switch-events"],
            &[&w, "single", "2"],
        ),
        (
            "-z",
            &["-e", "cpu-clock", "-c", "200000", "-z"],
            &[&w, "single", "2"],
        ),
        (
            "multi-process",
            &["-e", "cpu-clock", "-c", "200000", "-g"],
            &[&w, "multi", "2"],
        ),
    ];
    for (what, args, workload) in shapes {
        let input = perf_record(args, workload);
        let out = perfpipe(&[], &input);
        assert!(
            out.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.stdout == input, "{what}: output differs from input");
        for perf in readers() {
            let ours = Input::Stream(&out.stdout);
            let script = readers::read(&perf, &readers::SCRIPT, ours);
            let script = script.unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(count_samples(&script) > 0, "{what}: no samples");
            if *what == "-z" {
                // Neither 6.1's nor 6.12's `report --stats` can decompress ("Couldn't decompress
                // data", exit 0); the full report can.
                let report = readers::read(&perf, &["report", "--stdio"], ours);
                let report = report.unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(report.contains("# Samples:"), "{what}: {report}");
            } else {
                readers::samples(&perf, ours).unwrap_or_else(|e| panic!("{what}: {e}"));
            }
        }
    }
});

pipetest!(
    /// A closed downstream ends the run at once with status 0 and no error text, like Unix filters.
    closed_downstream_is_a_quiet_success, |_dir| {
    use std::io::Read as _;
    use std::process::{Command, Stdio};
    let input = fixture_bytes("callgraph.pipe.data");
    let mut big = Vec::new();
    // Header once, then the records many times over: several MB, more than a pipe holds.
    big.extend_from_slice(&input);
    for _ in 0..40 {
        big.extend_from_slice(&input[16..]);
    }
    let mut child = Command::new(bin())
        .args(["--batch-size", "4K"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut sin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        use std::io::Write as _;
        let _ = sin.write_all(&big);
    });
    let mut first = vec![0u8; 1000];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // stdout is dropped here: the reader has gone.
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    assert_eq!(first[..16], input[..16]);
    assert!(out.status.success(), "status {:?}", out.status);
    eqnice!("", String::from_utf8_lossy(&out.stderr));
});

//! Passthrough: `perfpipe` with no transform writes its input back byte for byte, and perf accepts it.

use crate::util::*;

/// Every checked-in fixture, at several batch sizes, comes back byte-identical.
#[test]
fn fixtures_round_trip_byte_identical() {
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
}

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

/// `--stats` prints one row per stage with the records that passed.
#[test]
fn stats_table_counts_records() {
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
}

/// perf itself reads our output of every fixture, and sees the same samples.
#[test]
#[cfg_attr(skip_perf, ignore = "needs perf (missing at build time)")]
fn perf_script_accepts_fixture_output() {
    require(Need::Perf);
    for name in all_fixtures() {
        let input = fixture_bytes(&name);
        let out = perfpipe(&[], &input);
        assert!(out.status.success());
        let want = perf_script(&input);
        let got = perf_script(&out.stdout);
        assert!(count_samples(&got) > 10, "{name}: too few samples");
        assert!(want == got, "{name}: perf script output differs");
    }
}

/// Live recordings of every shape the issue lists: byte-identical, and accepted by
/// `perf script` and `perf report --stats`.
#[test]
#[cfg_attr(skip_perf, ignore = "needs perf (missing at build time)")]
fn live_recordings_round_trip() {
    require(Need::Perf);
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
        let script = perf_script(&out.stdout);
        assert!(count_samples(&script) > 0, "{what}: no samples");
        if *what == "-z" {
            // perf 6.1's `report --stats` cannot decompress ("Couldn't decompress data", exit 0);
            // its full report can.
            let report = perf_on(&["report", "--stdio"], &out.stdout);
            assert!(report.contains("# Samples:"), "{what}: {report}");
        } else {
            let stats = perf_on(&["report", "--stats"], &out.stdout);
            assert!(stats.contains("SAMPLE events"), "{what}: {stats}");
        }
    }
}

/// A closed downstream ends the run at once with status 0 and no error text, like Unix filters.
#[test]
fn closed_downstream_is_a_quiet_success() {
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
}

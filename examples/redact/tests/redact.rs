//! `perfpipe-redact` on real recordings: no comm or path of the input survives in the output bytes,
//! the samples are all still there, and perf reads the result.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use perfpipe_core::harness;
use perfpipe_stream::decode::DecodeConfig;
use perfpipe_stream::format::{RecordType, StreamInfo};
use perfpipe_stream::read::HEADROOM;

// The harness (`harness = false`) and what the tests need (perf), probed when they run: see the
// workspace's `tests/needs.rs`. No test here is a plain `#[test]` (it would never run).
#[allow(dead_code)]
#[path = "../../../tests/needs.rs"]
mod needs;
use needs::Need;

/// Registers the test `fn $name()` with what it needs (`Need`s).
macro_rules! register {
    ($($name:ident: [$($need:expr),*]),* $(,)?) => {
        $(inventory::submit! {
            needs::Test { module: module_path!(), name: stringify!($name), needs: &[$($need),*], run: $name }
        })*
    };
}

register! {
    perf_reads_the_redacted_streams: [Need::Perf],
    no_comm_or_path_survives_and_every_sample_does: [],
    kept_prefixes_stay: [],
    bad_options_are_errors: [],
}

fn main() -> std::process::ExitCode {
    needs::main()
}

fn fixture(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Comms and file paths in a stream (pseudo names like `[vdso]` and `//anon` excluded), its number
/// of samples, and the bytes of every record but the samples.
fn names_and_samples(stream: &[u8]) -> (Vec<Vec<u8>>, usize, Vec<u8>) {
    let mut b = perfpipe_core::Batch::with_capacity(HEADROOM + stream.len());
    b.data.resize(HEADROOM, 0);
    b.data.extend_from_slice(stream);
    b.start = HEADROOM;
    let out = harness::run_stage(&mut DecodeConfig::default().build(), vec![b]).unwrap();
    let (mut names, mut samples, mut side) = (Vec::new(), 0, Vec::new());
    for batch in &out {
        let info = StreamInfo::of(batch).unwrap();
        for span in &batch.spans {
            let rec = info.record(batch, span);
            if span.kind == RecordType::SAMPLE.0 {
                samples += 1;
            } else {
                side.extend_from_slice(batch.bytes(span));
            }
            if let Some(c) = rec.comm() {
                names.push(c.comm.to_vec());
            }
            if let Some(m) = rec.mmap() {
                if !m.filename.starts_with(b"[") && !m.filename.starts_with(b"//") {
                    names.push(m.filename.to_vec());
                }
            }
        }
    }
    names.sort();
    names.dedup();
    (names, samples, side)
}

fn redact(input: &[u8], args: &[&str]) -> Vec<u8> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_perfpipe-redact"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut sin = child.stdin.take().unwrap();
    let data = input.to_vec();
    let feeder = std::thread::spawn(move || std::io::Write::write_all(&mut sin, &data));
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn perf_script(stream: &[u8]) -> String {
    let mut child = Command::new("perf")
        .args(["script", "-i", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("perf");
    let mut sin = child.stdin.take().unwrap();
    let data = stream.to_vec();
    let feeder = std::thread::spawn(move || std::io::Write::write_all(&mut sin, &data));
    let out = child.wait_with_output().expect("perf script");
    let _ = feeder.join();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

/// The key every run here redacts with.
const KEY: &str = "key=000102030405060708090a0b0c0d0e0f";
/// The recordings redacted.
const FIXTURES: [&str; 4] = [
    "multiproc.pipe.data",
    "callgraph.pipe.data",
    "two-events.pipe.data",
    "switch.pipe.data",
];

/// perf reads the redacted streams and sees every sample.
fn perf_reads_the_redacted_streams() {
    for name in FIXTURES {
        let input = fixture(name);
        let out = redact(&input, &["--redact", KEY]);
        let (before, after) = (perf_script(&input), perf_script(&out));
        let count = |s: &str| {
            s.lines()
                .filter(|l| l.contains("cpu-clock") || l.contains("task-clock"))
                .count()
        };
        assert_eq!(count(&before), count(&after), "{name}");
        assert!(after.contains("[kernel.kallsyms]") || after.contains("/redacted/"));
    }
}

fn no_comm_or_path_survives_and_every_sample_does() {
    for name in FIXTURES {
        let input = fixture(name);
        let (names, samples, _) = names_and_samples(&input);
        assert!(names.len() > 5, "{name}: {names:?}");
        let out = redact(&input, &["--redact", KEY]);
        let (_, after, side) = names_and_samples(&out);
        assert_eq!(after, samples, "{name}");
        // Samples hold numbers only, but a frame-pointer callchain can hold any word of the
        // user stack (a "bash" from argv, say): redact leaves those values as they are, so the
        // check covers every record but the samples.
        for n in &names {
            assert!(
                !contains(&side, n),
                "{name}: {:?} survived",
                String::from_utf8_lossy(n)
            );
        }
        // The same key gives the same pseudonyms: the output is reproducible.
        let again = redact(&input, &["--stage", &format!("redact:{KEY}")]);
        assert!(again == out, "{name}: not stable under one key");
    }
}

fn kept_prefixes_stay() {
    let input = fixture("multiproc.pipe.data");
    let out = redact(&input, &["--redact", "keep=/usr/lib"]);
    assert!(contains(&out, b"/usr/lib/x86_64-linux-gnu/libc.so.6"));
    assert!(!contains(&out, b"/usr/bin/gzip"));
}

fn bad_options_are_errors() {
    let out = Command::new(env!("CARGO_BIN_EXE_perfpipe-redact"))
        .args(["--redact", "colour=red"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown option `colour` (keys: key, keep)"),
        "{err}"
    );
}

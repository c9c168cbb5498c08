//! What the output will be is decided, and an impossible output refused, before the first byte is
//! read (issue 34): on an input that never ends, `-o DIR/` writes the Parquet dataset while the
//! input is still open, and every output that cannot be written exits 2 within a second, naming
//! the problem, while the input is still open. The rules themselves are unit-tested in
//! `perfpipe-chain` (`chain/src/output.rs`); these run the binary as a user does.
//!
//! "An input that never ends" is a child process, `sh -c 'cat REC; echo sent >&2; exec sleep
//! 30'`, whose standard output is perfpipe's standard input: `(cat rec; sleep 30) | perfpipe …`.
//! The test knows the recording was offered when the child says `sent`, and knows the input has
//! not ended as long as the child runs.

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// `(cat rec; echo sent >&2; sleep 30)`: the recording, then an open pipe. Its stdout is for
/// perfpipe's stdin; its stderr says `sent` once `cat` is done.
fn never_ending(rec: &Path) -> Child {
    Command::new("sh")
        .args(["-c", "cat \"$0\"; echo sent >&2; exec sleep 30"])
        .arg(rec)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sh")
}

/// Waits for `child` to exit, at most `limit`: its status, or `None` if it still runs.
fn exit_within(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if t0.elapsed() >= limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Runs `program args` (perfpipe, or a wrapper that execs it) on a never-ending input; asserts
/// it exits 2 within a second with `says` on stderr while the input is still open.
fn refused_at_once(program: &Path, args: &[&str], says: &str, input: &Path) {
    let mut writer = never_ending(input);
    let t0 = Instant::now();
    let mut perfpipe = Command::new(program)
        .args(args)
        .stdin(Stdio::from(writer.stdout.take().unwrap()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = exit_within(&mut perfpipe, Duration::from_secs(10));
    let took = t0.elapsed();
    let input_open = writer.try_wait().unwrap().is_none();
    writer.kill().unwrap();
    writer.wait().unwrap();
    let Some(status) = status else {
        perfpipe.kill().unwrap();
        perfpipe.wait().unwrap();
        panic!("{args:?}: still running 10 s into an input that does not end");
    };
    let err = std::io::read_to_string(perfpipe.stderr.take().unwrap()).unwrap();
    eprintln!("{args:?}: exit {status} after {took:?}: {}", err.trim());
    assert_eq!(status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(says), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
    assert!(
        input_open,
        "{args:?}: the input was still open when it exited"
    );
    assert!(
        took < Duration::from_secs(1),
        "{args:?}: refused after {took:?}"
    );
}

pipetest!(
    every_output_that_cannot_be_written_is_refused_before_the_input_ends,
    |dir| {
        let input = fixture("callgraph.pipe.data");
        let ds = format!("{}/", dir.path("ds").display());
        let existing = dir.path("existing");
        std::fs::create_dir(&existing).unwrap();
        let file = dir.write("file", b"x");
        let missing = dir.path("no/such/dir/cpu.pb.gz");
        let under_file = file.join("x.svg");
        let cases: Vec<(Vec<&str>, String)> = vec![
            (
                vec!["--folded", "-o", &ds],
                format!(
                    "-o {ds}: a directory, and folded output is one file (-o FILE.folded); \
                 a directory output is a Parquet dataset (--parquet -o DIR/)"
                ),
            ),
            (
                vec!["--format", "perf", "-o", existing.to_str().unwrap()],
                "a directory, and perf's format is one file (-o FILE.data)".into(),
            ),
            (
                vec!["-o", missing.to_str().unwrap()],
                format!(
                    "no directory {} to write it in",
                    missing.parent().unwrap().display()
                ),
            ),
            (
                vec!["-o", under_file.to_str().unwrap()],
                format!("{} is not a directory", file.display()),
            ),
            (
                vec!["--parquet", "--rotate", "1m", "-o", file.to_str().unwrap()],
                "not a directory (a dataset is one)".into(),
            ),
            (
                vec!["--parquet"],
                "parquet output needs a file (-o FILE.parquet) or a directory (-o DIR/), \
             not standard output"
                    .into(),
            ),
            (
                vec!["--flamegraph", "-o", "/proc/flame.svg"],
                "-o /proc/flame.svg: cannot write in /proc: ".into(),
            ),
        ];
        for (args, says) in &cases {
            refused_at_once(&bin(), args, says, &input);
        }
        assert!(
            !dir.path("ds").exists(),
            "nothing was made for a refused output"
        );
    }
);

pipetest!(
    /// A value the command line gets wrong is a usage error (exit 2, as clap's own), wherever it
    /// is found: parsing a flag's value, a format's option, or building the stage from them. A
    /// file that cannot be opened (here: a `--tap` into a directory that does not exist) is a
    /// failure (exit 1).
    bad_values_are_usage_errors,
    |dir| {
        let input = std::fs::read(fixture("callgraph.pipe.data")).unwrap();
        let svg = dir.path("x.svg");
        let svg = svg.to_str().unwrap();
        let parquet = dir.path("x.parquet");
        let parquet = parquet.to_str().unwrap();
        let cases: &[(&[&str], i32, &str)] = &[
            (&["--ring", "xyz"], 2, "`xyz` is not a size"),
            (&["--filter", "bad(("], 2, "unknown field `bad`"),
            (&["--format", "folded:weight=zz"], 2, "expected period, samples"),
            (&["--format", "pprof:foo=1"], 2, "unknown option `foo` (it takes none)"),
            (&["-o", svg, "--colors", "nosuch"], 2, "nosuch"),
            (&["-o", parquet, "--rotate", "1M"], 2, "a dataset is a directory"),
            (&["--stage", "buildid:host=maybe"], 2, "host"),
            (&["--known-build-ids", "zz"], 2, "`zz` is not PATH=BUILDID"),
            (&["--tap", "read=/no/such/t"], 1, "/no/such/t: No such file"),
            (&["-o", svg, "--kallsyms", "/no/such"], 1, "--kallsyms /no/such: No such file"),
        ];
        for (args, code, says) in cases {
            let out = perfpipe(args, &input);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(*code), "{args:?}: {err}");
            assert!(err.contains(says), "{args:?}: {err}");
        }
    }
);

pipetest!(needs(mount) a_read_only_place_is_refused_before_the_input_ends, |dir| {
    let input = fixture("callgraph.pipe.data");
    let ro = dir.path("ro");
    std::fs::create_dir(&ro).unwrap();
    // A read-only tmpfs in a mount namespace of perfpipe's own: what root cannot write either.
    let wrapper = dir.write(
        "ro.sh",
        b"#!/bin/sh\nexec unshare --mount --propagation private sh -c \
          'mount -t tmpfs -o ro,size=64k tmpfs \"$0\" && exec \"$@\"' \"$@\"\n",
    );
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .unwrap();
    for out in ["x.svg", "ds/"] {
        let target = format!("{}/{out}", ro.display());
        refused_at_once(
            &wrapper,
            &[ro.to_str().unwrap(), bin().to_str().unwrap(), "-o", &target],
            &format!("cannot write in {}: Read-only file system", ro.display()),
            &input,
        );
    }
});

pipetest!(
    /// `(cat rec; sleep 30) | perfpipe -o DIR/`: the dataset, decided at once. SIGUSR2 while the
    /// input is quiet and still open puts a part in place; the rest is written when it ends.
    a_directory_output_writes_the_dataset_while_the_input_is_open,
    |dir| {
    let input = fixture("callgraph.pipe.data");
    let ds = dir.path("ds");
    let stats = dir.path("stats.json");
    let mut writer = never_ending(&input);
    let said = Watch::new(writer.stderr.take().unwrap());
    let perfpipe = Command::new(bin())
        .args(["-o", &format!("{}/", ds.display())])
        .args(["--stats-json", stats.to_str().unwrap()])
        .stdin(Stdio::from(writer.stdout.take().unwrap()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut perfpipe = Guard(perfpipe);
    said.wait_for("sent");
    signal(&perfpipe.0, libc::SIGUSR2);
    let t0 = Instant::now();
    let part = loop {
        if let Some(p) = parts(&ds).into_iter().next() {
            break p;
        }
        assert!(
            perfpipe.0.try_wait().unwrap().is_none(),
            "perfpipe ended on an open input"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no part 30 s after SIGUSR2"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(
        writer.try_wait().unwrap().is_none(),
        "the part came while the input was open"
    );
    let rel = part.strip_prefix(&ds).unwrap().to_string_lossy().into_owned();
    assert!(rel.starts_with("host="), "{rel}");
    assert!(rel.contains("/date=20"), "{rel}");
    // Now the input ends: any rows read after the signal go to a last part.
    writer.kill().unwrap();
    writer.wait().unwrap();
    said.finish();
    let status =
        exit_within(&mut perfpipe.0, Duration::from_secs(30)).expect("ends with its input");
    let err = std::io::read_to_string(perfpipe.0.stderr.take().unwrap()).unwrap();
    assert!(status.success(), "{err}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let sink = json["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "parquet")
        .expect("the parquet sink's row");
    assert_eq!(sink["counters"]["rows"], 1777, "fixtures/README.md: 1777 samples");
    // The part written on SIGUSR2, and one more if rows came after it.
    assert!(parts(&ds).contains(&part), "{:?}", parts(&ds));
    assert_eq!(sink["counters"]["files"], parts(&ds).len() as u64);
});

/// Every `*.parquet` under `host=…/date=…/` of a dataset.
fn parts(ds: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let read = |p: &Path| std::fs::read_dir(p).into_iter().flatten().flatten();
    for host in read(ds) {
        for day in read(&host.path()) {
            for f in read(&day.path()) {
                if f.path().extension().is_some_and(|e| e == "parquet") {
                    out.push(f.path());
                }
            }
        }
    }
    out.sort();
    out
}

/// A child killed if the test fails before it ends.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

//! A test that needs something the machine lacks never passes: when it runs, it is ignored with
//! the reason (counted in the summary), or under `CI` it fails with it. See `needs`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::needs::{is_ci, verdict, Need};
use crate::util::Dir;

/// How a test ended when run on its own.
#[derive(Debug, PartialEq)]
enum Outcome {
    Passed,
    Failed,
    Ignored,
}

/// Runs one test of this binary by its exact name, with `PATH` emptied (no perf, no cc, …) and
/// `CI` as given; returns how it ended, and its output.
fn run_alone_without_path(test: &str, ci: Option<&str>, dir: &Dir) -> (Outcome, String) {
    let empty = dir.path("empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    run_alone(test, ci, &[("PATH", empty.as_os_str())])
}

/// Runs one test of this binary by its exact name with `env` and `CI` as given; returns how it
/// ended, and its output.
fn run_alone(test: &str, ci: Option<&str>, env: &[(&str, &OsStr)]) -> (Outcome, String) {
    let mut cmd = Command::new(std::env::current_exe().expect("this test binary"));
    cmd.args([test, "--exact", "--test-threads", "1"])
        .envs(env.iter().copied())
        .env("RUST_BACKTRACE", "0");
    match ci {
        Some(v) => cmd.env("CI", v),
        None => cmd.env_remove("CI"),
    };
    let out = cmd.output().expect("run this test binary");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let outcome = if text.contains("test result: ok. 1 passed;") && out.status.success() {
        Outcome::Passed
    } else if text.contains("test result: FAILED. 0 passed; 1 failed;") {
        Outcome::Failed
    } else if text.contains("test result: ok. 0 passed; 0 failed; 1 ignored;") {
        Outcome::Ignored
    } else {
        panic!("{test}: not exactly one test ran:\n{text}")
    };
    (outcome, text)
}

pipetest!(
    /// A test that needs perf, run where perf is not on `PATH`, never passes: outside `CI` it is
    /// ignored, saying what it needs and why, and counted; under `CI` it fails saying so. On
    /// 816e9da it returned early and passed when `CI` was not set.
    a_test_that_needs_perf_never_passes_without_it, |dir| {
        let test = "passthrough::live_recordings_round_trip";
        let why = "needs perf (`perf --version` runs): `perf` is not on PATH";
        let (outcome, out) = run_alone_without_path(test, None, &dir);
        eqnice!(Outcome::Ignored, outcome);
        // The reason names each missing need (this test also needs the trixie root, which it
        // cannot find without `unshare`): perf's comes first.
        assert!(
            out.contains(&format!("test {test} ... ignored ({why}")),
            "no reason given:\n{out}"
        );
        let (outcome, out) = run_alone_without_path(test, Some("true"), &dir);
        eqnice!(Outcome::Failed, outcome);
        assert!(out.contains(why) && out.contains("CI is set"), "{out}");
    }
);

pipetest!(
    /// A test that needs perf 6.12 (every reader), run where `PERF_612` names no perf, never
    /// passes: it is ignored saying so, or under `CI` fails saying so.
    a_test_that_needs_perf_612_never_passes_without_it, |_dir| {
        let test = "readers::a_reader_that_rejects_a_broken_header_fails_the_check";
        let gone = OsStr::new("/nonexistent/perf-6.12/perf");
        for ci in [None, Some("true")] {
            let (outcome, out) = run_alone(test, ci, &[("PERF_612", gone)]);
            let want = if ci.is_some() { Outcome::Failed } else { Outcome::Ignored };
            assert_eq!(outcome, want, "CI={ci:?}:\n{out}");
            assert!(
                out.contains("needs perf 6.12") && out.contains("/nonexistent/perf-6.12/perf"),
                "CI={ci:?}: no reason given:\n{out}"
            );
        }
    }
);

pipetest!(
    /// A test with no need runs the same where `PATH` is empty: the harness probes only the needs
    /// of the tests it runs, and a missing one touches no other test.
    a_test_with_no_need_runs_without_path, |dir| {
        let (outcome, out) = run_alone_without_path("skipping::what_counts_as_ci", None, &dir);
        eqnice!(Outcome::Passed, outcome);
        assert!(!out.contains("ignored ("), "{out}");
    }
);

pipetest!(
    /// The reason of a test with several needs missing names each, with its probe's answer.
    every_missing_need_is_named, |_dir| {
        eqnice!(None, verdict(&[]));
        let why = verdict(&[(Need::Perf, "gone"), (Need::Cc, "`cc` is not on PATH")]);
        eqnice!(
            Some(
                "needs perf (`perf --version` runs): gone; needs a C compiler (`cc`): `cc` is not \
                 on PATH"
                    .to_string()
            ),
            why
        );
    }
);

pipetest!(
    /// `CI=true`, `CI=1`, `CI=yes` are CI; unset, empty, `0` and `false` are not.
    what_counts_as_ci, |_dir| {
        for (v, ci) in [
            (None, false),
            (Some(""), false),
            (Some("0"), false),
            (Some("false"), false),
            (Some("FALSE"), false),
            (Some("true"), true),
            (Some("1"), true),
            (Some("yes"), true),
        ] {
            assert_eq!(is_ci(v.map(OsStr::new)), ci, "CI={v:?}");
        }
    }
);

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pipetest!(
    /// No test is a plain `#[test]` function: the integration binaries run under `needs::main`
    /// (`harness = false`), where such a function is never run, never counted, and never fails.
    /// Every test is a `pipetest!` (or, in examples/redact, registered beside its harness).
    no_test_is_a_plain_test_fn, |_dir| {
        let mut files = Vec::new();
        rust_files(&root().join("tests"), &mut files);
        files.push(root().join("examples/redact/tests/redact.rs"));
        assert!(files.len() > 30, "{files:?}");
        let mut found = Vec::new();
        for f in &files {
            let text = std::fs::read_to_string(f).unwrap();
            for (n, line) in text.lines().enumerate() {
                if line.trim_start().starts_with("#[test]") {
                    found.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
                }
            }
        }
        assert!(
            found.is_empty(),
            "plain #[test] functions, which this harness never runs (declare them with \
             `pipetest!`):\n{}",
            found.join("\n")
        );
    }
);

pipetest!(
    /// No test skips on its own: every `CI` check and every "skipping" message goes through `needs`
    /// (a test that prints "skipping" and returns passes silently, as 44 did on 816e9da); and no
    /// skip is decided when a test is built (a `skip_*` cfg, or a build script: none of the
    /// workspace's packages has one, so building the binary probes nothing and says nothing).
    no_test_skips_by_itself, |_dir| {
        let root = root();
        let mut files = Vec::new();
        for dir in [
            "tests",
            "format",
            "core",
            "stream",
            "record",
            "profile",
            "export",
            "chain",
            "cli",
            "examples",
        ] {
            rust_files(&root.join(dir), &mut files);
        }
        assert!(files.len() > 30, "{files:?}");
        let mut found = Vec::new();
        for f in &files {
            if f.ends_with("tests/needs.rs") || f.ends_with("tests/skipping.rs") {
                continue;
            }
            let package = f.parent().is_some_and(|d| d.join("Cargo.toml").is_file());
            if package && f.ends_with("build.rs") {
                found.push(format!("{}: a build script", f.display()));
            }
            let text = std::fs::read_to_string(f).unwrap();
            for (n, line) in text.lines().enumerate() {
                let marks = [
                    "var_os(\"CI\")",
                    "var(\"CI\")",
                    "have_perf",
                    "\"skipping",
                    "(skip_",
                    "rustc-cfg=",
                ];
                if marks.iter().any(|p| line.contains(p)) {
                    found.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
                }
            }
        }
        assert!(
            found.is_empty(),
            "skips outside `needs`:\n{}",
            found.join("\n")
        );
    }
);

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if !p.ends_with("target") && !p.ends_with("fixtures") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

pipetest!(
    /// As with libtest, every filter on the command line selects tests (libtest-mimic alone takes
    /// one): two exact names run those two tests.
    several_filters_select_the_tests_of_each, |_dir| {
        let out = Command::new(std::env::current_exe().expect("this test binary"))
            .args(["--exact", "skipping::what_counts_as_ci", "skipping::every_missing_need_is_named"])
            .env_remove("CI")
            .output()
            .expect("run this test binary");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("test result: ok. 2 passed; 0 failed; 0 ignored;"), "{text}");
    }
);

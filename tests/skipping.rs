//! A test that needs something the machine lacks never passes: it is ignored with the reason
//! (when the tests were built without it), or it fails (always under `CI`). See `needs`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::needs::{build_lines, is_ci, rerun_lines, Need};
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
    cmd.args([test, "--exact", "--nocapture", "--test-threads", "1"])
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

/// A test that needs perf, run where perf is not on `PATH`, never passes: it fails saying what it
/// needs (built where perf was, or under `CI`), or is ignored saying so (built where perf was
/// missing). On 816e9da it returned early and passed when `CI` was not set.
#[test]
fn a_test_that_needs_perf_never_passes_without_it() {
    let dir = Dir::new("skipping");
    let test = "passthrough::live_recordings_round_trip";
    for ci in [None, Some("true")] {
        let (outcome, out) = run_alone_without_path(test, ci, &dir);
        match outcome {
            Outcome::Passed => panic!("{test} passed without perf (CI={ci:?}):\n{out}"),
            Outcome::Failed => assert!(
                out.contains("needs perf (`perf --version` runs): `perf` is not on PATH"),
                "CI={ci:?}: no reason given:\n{out}"
            ),
            Outcome::Ignored => assert!(
                out.contains(&format!("test {test} ... ignored, needs perf")),
                "CI={ci:?}: no reason given:\n{out}"
            ),
        }
        if ci.is_some() && outcome == Outcome::Failed {
            assert!(out.contains("CI is set"), "{out}");
        }
    }
}

/// A test that needs perf 6.12 (every reader), run where `PERF_612` names no perf, never passes:
/// it fails saying so (built where perf 6.12 was, or under `CI`), or is ignored saying so.
#[test]
fn a_test_that_needs_perf_612_never_passes_without_it() {
    let test = "readers::a_reader_that_rejects_a_broken_header_fails_the_check";
    let gone = OsStr::new("/nonexistent/perf-6.12/perf");
    for ci in [None, Some("true")] {
        let (outcome, out) = run_alone(test, ci, &[("PERF_612", gone)]);
        match outcome {
            Outcome::Passed => panic!("{test} passed without perf 6.12 (CI={ci:?}):\n{out}"),
            Outcome::Failed => assert!(
                out.contains("needs perf 6.12") && out.contains("/nonexistent/perf-6.12/perf"),
                "CI={ci:?}: no reason given:\n{out}"
            ),
            Outcome::Ignored => assert!(
                out.contains(&format!(
                    "test {test} ... ignored, needs perf and perf 6.12"
                )),
                "CI={ci:?}: no reason given:\n{out}"
            ),
        }
    }
}

/// Outside `CI`, a missing need sets its `skip_*` cfg (the tests that need it are ignored) and
/// says why in a build warning; a need that is there sets nothing.
#[test]
fn a_missing_need_is_a_skip_with_a_reason() {
    let lines = build_lines(
        false,
        &[
            (Need::Perf, Err("`perf` is not on PATH".into())),
            (Need::Cc, Ok(())),
        ],
    );
    eqnice!(
        "cargo::rustc-check-cfg=cfg(skip_perf, skip_perf612, skip_cc, skip_mount, skip_tracefs, \
         skip_script, skip_go, skip_duckdb, skip_inferno, skip_chromium, skip_debuginfod, skip_tls, \
         skip_uts, skip_spark, skip_trixie, skip_otelproto)",
        lines[0]
    );
    assert!(
        lines.contains(&"cargo::rustc-cfg=skip_perf".to_string()),
        "{lines:?}"
    );
    assert!(!lines
        .iter()
        .any(|l| l.contains("skip_cc") && l.contains("rustc-cfg=")));
    let warning = lines
        .iter()
        .find(|l| l.starts_with("cargo::warning="))
        .unwrap();
    assert!(
        warning.contains("ignored") && warning.contains("`perf` is not on PATH"),
        "{warning}"
    );
    eqnice!(3, lines.len());
}

/// Under `CI` no need is ever skipped: the cfgs are declared, none is set, and the warning says
/// the tests will fail.
#[test]
fn under_ci_a_missing_need_is_never_a_skip() {
    let missing = |n| (n, Err::<(), String>("gone".into()));
    let lines = build_lines(true, &Need::ALL.map(missing));
    assert!(
        lines.iter().all(|l| !l.starts_with("cargo::rustc-cfg=")),
        "{lines:?}"
    );
    assert_eq!(
        lines.iter().filter(|l| l.contains("will fail")).count(),
        Need::ALL.len()
    );
}

/// `CI=true`, `CI=1`, `CI=yes` are CI; unset, empty, `0` and `false` are not.
#[test]
fn what_counts_as_ci() {
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

/// A build script watches a program it found (its file) and, for one it did not find, every
/// directory on `PATH` (installing it there changes the directory): so the next build notices.
#[test]
fn reruns_when_a_program_appears_or_goes() {
    let dir = Dir::new("rerun");
    let (a, b) = (dir.path("a"), dir.path("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    std::fs::write(a.join("perf"), "").unwrap();
    let path = std::env::join_paths([&a, &b, Path::new("relative/ignored")]).unwrap();
    let env = [
        "cargo::rerun-if-env-changed=CI".to_string(),
        "cargo::rerun-if-env-changed=PATH".to_string(),
    ];
    let watch = |p: &Path| format!("cargo::rerun-if-changed={}", p.display());
    eqnice!(
        [&env[..], &[watch(&a.join("perf"))]].concat(),
        rerun_lines(&[Need::Perf], &path)
    );
    let mut dirs = vec![watch(&a), watch(&b)];
    dirs.sort();
    eqnice!([&env[..], &dirs].concat(), rerun_lines(&[Need::Cc], &path));
}

/// No test skips on its own: every `CI` check and every "skipping" message goes through `needs`
/// (a test that prints "skipping" and returns passes silently, as 44 did on 816e9da).
#[test]
fn no_test_skips_by_itself() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in [
        "tests",
        "core",
        "stream/src",
        "record/src",
        "profile/src",
        "export/src",
        "chain/src",
        "cli/src",
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
        let text = std::fs::read_to_string(f).unwrap();
        for (n, line) in text.lines().enumerate() {
            if ["var_os(\"CI\")", "var(\"CI\")", "have_perf", "\"skipping"]
                .iter()
                .any(|p| line.contains(p))
            {
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

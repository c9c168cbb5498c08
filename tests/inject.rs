//! `perfpipe inject` standing in for `perf inject`: upstream's `tools/perf/tests/shell/pipe_test.sh`
//! cases with our binary, for each build-id style; the MMAP2 styles (`-B`, `--mmap2-buildid-all`)
//! against perf 6.1's readers; the refused options' messages.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};

use crate::util::*;
use crate::workloads;

/// `perfpipe inject ARGS` with `stdin`.
fn inject(args: &[&str], stdin: &[u8]) -> Output {
    let mut all = vec!["inject"];
    all.extend_from_slice(args);
    perfpipe(&all, stdin)
}

/// `perfpipe inject ARGS`, asserting success; its standard output.
fn inject_ok(args: &[&str], stdin: &[u8]) -> Vec<u8> {
    let out = inject(args, stdin);
    assert!(
        out.status.success(),
        "perfpipe inject {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `perf report --stdio` of a file.
fn report_file(path: &Path) -> String {
    let out = Command::new("perf")
        .args(["report", "--stdio", "-i"])
        .arg(path)
        .output()
        .expect("perf report");
    assert!(
        out.status.success(),
        "perf report -i {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `perf record -e cpu-clock [-g] -o FILE -- noploop`: a file-mode recording.
fn record_file(dir: &Dir, w: &workloads::Workload, name: &str) -> std::path::PathBuf {
    let path = dir.path(name);
    let out = Command::new("perf")
        .args(["record", "-e", "cpu-clock", "-o"])
        .arg(&path)
        .arg("--")
        .args(w.argv())
        .output()
        .expect("perf record");
    assert!(
        out.status.success(),
        "perf record -o: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

/// The build-id styles pipe_test.sh runs (`test_inject_bids`), upstream's latest list.
const STYLES: [&str; 4] = ["-b", "--buildid-all", "-B", "--mmap2-buildid-all"];

/// The six cases of upstream `pipe_test.sh`'s `test_inject_bids`, each checked as it checks them
/// (`perf report` finds the workload's `noploop`), with `perfpipe inject` for `perf inject`:
/// pipe → pipe, `-g` pipe → pipe, pipe → file, file → pipe, pipe-format file → pipe, pipe-format
/// file → file; for `-b`, `--buildid-all`, `-B` and `--mmap2-buildid-all`.
#[test]
#[cfg_attr(
    any(skip_perf, skip_cc),
    ignore = "needs perf and cc (missing at build time)"
)]
fn pipe_test_cases_for_every_build_id_style() {
    require(Need::Perf);
    require(Need::Cc);
    let dir = Dir::new("pipe_test_cases");
    let w = workloads::noploop(&dir);
    let sym = "noploop";
    let plain = perf_record(&["-e", "cpu-clock"], &w.argv());
    let graph = perf_record(&["-e", "cpu-clock", "-g"], &w.argv());
    let file = record_file(&dir, &w, "perf.data");
    let pipe_file = dir.write("pipe.data", &plain);
    for style in STYLES {
        // #1: perf record -o - | perf inject OPT | perf report -i -
        let out = inject_ok(&[style], &plain);
        let r = perf_on(&["report", "--stdio"], &out);
        assert!(r.contains(sym), "{style} #1 pipe -> pipe:\n{r}");
        // #2: the same with -g.
        let out = inject_ok(&[style], &graph);
        let r = perf_on(&["report", "--stdio"], &out);
        assert!(r.contains(sym), "{style} #2 -g pipe -> pipe:\n{r}");
        // #3: perf record -o - | perf inject OPT -o FILE; perf report -i FILE
        let data = dir.path(&format!("out3{style}"));
        inject_ok(&[style, "-o", data.to_str().unwrap()], &plain);
        let r = report_file(&data);
        assert!(r.contains(sym), "{style} #3 pipe -> file:\n{r}");
        // #4: perf record -o FILE; perf inject OPT -i FILE | perf report -i -
        let out = inject_ok(&[style, "-i", file.to_str().unwrap()], b"");
        let r = perf_on(&["report", "--stdio"], &out);
        assert!(r.contains(sym), "{style} #4 file -> pipe:\n{r}");
        // #5: perf record -o - > FILE; perf inject OPT -i FILE | perf report -i -
        let out = inject_ok(&[style, "-i", pipe_file.to_str().unwrap()], b"");
        let r = perf_on(&["report", "--stdio"], &out);
        assert!(r.contains(sym), "{style} #5 pipe-format file -> pipe:\n{r}");
        // #6: perf record -o - > FILE; perf inject OPT -i FILE -o FILE2; perf report -i FILE2
        let data2 = dir.path(&format!("out6{style}"));
        let args = [
            style,
            "-i",
            pipe_file.to_str().unwrap(),
            "-o",
            data2.to_str().unwrap(),
        ];
        inject_ok(&args, b"");
        let r = report_file(&data2);
        assert!(r.contains(sym), "{style} #6 pipe-format file -> file:\n{r}");
    }
}

/// `perf script`'s frames (comm, ip, symbol, dso of every sample and callchain entry).
fn frames(stream: &[u8]) -> String {
    perf_on(&["script", "-F", "comm,tid,ip,sym,dso"], stream)
}

/// `(build id, path)` pairs `perf buildid-list -i -` lists.
fn pairs(stream: &[u8]) -> BTreeSet<(String, String)> {
    perf_on(&["buildid-list"], stream)
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.to_string(), w.next()?.to_string()))
        })
        .collect()
}

/// The MMAP2 styles on a multi-process `-g` recording: perf 6.1's `perf script` resolves every
/// frame as on the input, `perf buildid-list` lists the ids of the dsos samples hit (what it lists
/// for `-b`'s output), and the `-B` output is no larger than the `-b` output (it is the input
/// minus the maps no sample hit).
#[test]
#[cfg_attr(skip_perf, ignore = "needs perf (missing at build time)")]
fn mmap2_styles_keep_every_frame_and_list_the_ids() {
    require(Need::Perf);
    let input = perf_record(
        &["-e", "cpu-clock", "-c", "20000", "-g"],
        &[&workload(), "multi"],
    );
    let want = frames(&input);
    let b = inject_ok(&["-b"], &input);
    let big_b = inject_ok(&["-B"], &input);
    let all = inject_ok(&["--mmap2-buildid-all"], &input);
    eqnice!(want, frames(&big_b));
    eqnice!(want, frames(&all));
    let ids_b = pairs(&b);
    assert!(ids_b.len() >= 3, "{ids_b:?}");
    for ids in [pairs(&big_b), pairs(&all)] {
        for p in &ids_b {
            assert!(
                ids.contains(p) || p.1 == "[kernel.kallsyms]" || p.1 == "[vdso]",
                "{p:?} missing from {ids:?}"
            );
        }
    }
    eprintln!(
        "input {} bytes, -b {} bytes, -B {} bytes, --mmap2-buildid-all {} bytes",
        input.len(),
        b.len(),
        big_b.len(),
        all.len()
    );
    assert!(
        big_b.len() <= b.len(),
        "-B {} > -b {}",
        big_b.len(),
        b.len()
    );
    // --mmap2-buildid-all only rewrites in place: MMAP2 records keep their size.
    assert!(
        all.len() <= input.len() + 32 * 64,
        "{} vs {}",
        all.len(),
        input.len()
    );
}

/// A counter's value in the `-v` table.
fn counter(stats: &str, name: &str) -> u64 {
    stats
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix(name)?
                .trim()
                .strip_prefix("= ")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no counter {name} in:\n{stats}"))
}

/// A `--buildid-mmap` recording (perf record's default since 6.17): its MMAP2 records that carry
/// ids are left alone, the rest (perf's synthesized kernel MMAP, maps the kernel wrote without an
/// id) get theirs from the file; a second pass changes nothing. A recording without ids gets
/// every file's id, and perf resolves the same frames.
#[test]
#[cfg_attr(skip_perf, ignore = "needs perf (missing at build time)")]
fn mmap2_buildid_all_leaves_carried_ids_and_fills_the_rest() {
    require(Need::Perf);
    let carried = perf_record(
        &["-e", "cpu-clock", "--buildid-mmap"],
        &[&workload(), "single"],
    );
    let out = perfpipe(&["inject", "--mmap2-buildid-all", "-v"], &carried);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(counter(&err, "mmap2_ids_carried") > 0, "{err}");
    eqnice!(out.stdout, inject_ok(&["--mmap2-buildid-all"], &out.stdout));
    eqnice!(frames(&carried), frames(&out.stdout));

    let plain = perf_record(&["-e", "cpu-clock"], &[&workload(), "single"]);
    let out = perfpipe(&["inject", "--mmap2-buildid-all", "-v"], &plain);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(counter(&err, "mmaps_rewritten") > 0, "{err}");
    assert_eq!(counter(&err, "mmap2_ids_carried"), 0, "{err}");
    eqnice!(out.stdout, inject_ok(&["--mmap2-buildid-all"], &out.stdout));
    eqnice!(frames(&plain), frames(&out.stdout));
    assert!(!pairs(&out.stdout).is_empty());
}

/// Every refused perf inject option exits 2 with a message naming it, before reading any input;
/// `--help` lists the supported and the refused options.
#[test]
fn refused_options_are_named() {
    let cases: &[(&[&str], &str)] = &[
        (&["-s"], "-s/--sched-stat is not supported"),
        (&["--sched-stat"], "-s/--sched-stat is not supported"),
        (&["-j"], "-j/--jit is not supported"),
        (&["--jit"], "-j/--jit is not supported"),
        (&["--itrace"], "--itrace is not supported"),
        (&["--itrace=i100usg"], "--itrace is not supported"),
        (&["--strip"], "--strip is not supported"),
        (
            &["--vm-time-correlation"],
            "--vm-time-correlation is not supported",
        ),
        (
            &["--vm-time-correlation=dry-run"],
            "--vm-time-correlation is not supported",
        ),
        (
            &["--guest-data", "g.data,42"],
            "--guest-data is not supported",
        ),
        (&["--guestmount", "/tmp"], "--guestmount is not supported"),
        (&["-k", "/boot/vmlinux"], "-k/--vmlinux is not supported"),
        (
            &["--vmlinux", "/boot/vmlinux"],
            "-k/--vmlinux is not supported",
        ),
        (&["--ignore-vmlinux"], "--ignore-vmlinux is not supported"),
        (
            &["--kallsyms", "/proc/kallsyms"],
            "--kallsyms is not supported",
        ),
        (
            &["--convert-callchain"],
            "--convert-callchain is not supported",
        ),
        (&["--aslr"], "--aslr is not supported"),
        (&["-b", "--jit"], "-j/--jit is not supported"),
    ];
    for (args, want) in cases {
        let mut all = args.to_vec();
        all.extend_from_slice(&["-i", "/nonexistent/never-read"]);
        let out = inject(&all, b"");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(err.starts_with("perfpipe inject: "), "{args:?}: {err}");
        assert!(out.stdout.is_empty());
    }
    // -f changes nothing and is accepted.
    let input = fixture_bytes("callgraph.pipe.data");
    eqnice!(input, inject_ok(&["-f"], &input));
    // An option perf inject never had is clap's usage error, also exit 2.
    assert_eq!(inject(&["--no-such"], b"").status.code(), Some(2));
    let help = inject_ok(&["--help"], b"");
    let help = String::from_utf8_lossy(&help);
    for flag in [
        "--mmap2-buildids",
        "--mmap2-buildid-all",
        "--buildid-all",
        "--known-build-ids",
        "Refused",
        "--sched-stat",
        "--itrace",
        "--convert-callchain",
        "--aslr",
        "--vm-time-correlation",
        "--guest-data",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
}

//! Build-id injection (`--buildid`, `--buildid-callchain`, `--buildid-all`, the MMAP2 styles,
//! `perfpipe inject`) against `perf inject` on recordings made here: with every reader (perf 6.1,
//! 6.12 and 7.x), perf must list at least the (build id, path) pairs that the reader's own `perf inject`
//! lists for that style (the only additions being kernel, modules and vdso), and read the samples
//! and side-band of the input.

use std::collections::BTreeSet;
use std::io::{Read as _, Write as _};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::readers::{self, Input};
use crate::util::*;

/// `(build id, path)` pairs of the oracle's `perf buildid-list -i -`, without the dsos it lists
/// with no id.
fn pairs(stream: &[u8]) -> BTreeSet<(String, String)> {
    readers::buildid_pairs(&oracle(), Input::Stream(stream))
}

/// The dsos perf 6.1 pipe injection leaves without an id and we give one.
fn is_addition(path: &str) -> bool {
    // `[kernel.kallsyms]_text` too: the kernel map's own name, under which a file's table lists
    // the id its MMAP2 carries (as perf 7's does).
    path.starts_with("[kernel.kallsyms]")
        || path == "[vdso]"
        || path.starts_with("/tmp/perf-vdso.so-")
        || path.ends_with(".ko")
        || path.contains(".ko.")
}

fn perf_inject(args: &[&str], input: &[u8]) -> Vec<u8> {
    oracle().inject(args, input)
}

fn ours(args: &[&str], input: &[u8]) -> (Vec<u8>, String) {
    let mut all = vec!["--stats"];
    all.extend_from_slice(args);
    let out = perfpipe(&all, input);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "perfpipe {args:?}: {err}");
    (out.stdout, err)
}

fn sample_events(stream: &[u8]) -> String {
    perf_on(&["report", "--stats"], stream)
        .lines()
        .find(|l| l.contains("SAMPLE events"))
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .expect("a SAMPLE events line")
}

/// perf accepts `output` and sees the samples of `input`.
fn same_samples(input: &[u8], output: &[u8]) {
    eqnice!(sample_events(input), sample_events(output));
    eqnice!(
        count_samples(&perf_script(input)),
        count_samples(&perf_script(output))
    );
}

/// `ours` lists every pair `theirs` does; what it adds is kernel, modules or vdso.
fn superset(ours: &BTreeSet<(String, String)>, theirs: &BTreeSet<(String, String)>) {
    let missing: Vec<_> = theirs.difference(ours).collect();
    assert!(
        missing.is_empty(),
        "perf inject has pairs we lack: {missing:?}\nours: {ours:?}"
    );
    for (id, path) in ours.difference(theirs) {
        assert!(is_addition(path), "unexpected extra pair {id} {path}");
    }
    assert!(ours.len() >= 2, "too few dsos to be meaningful: {ours:?}");
}

/// Our style and the `perf inject` style of each reader that marks the same dsos. The `-b` of
/// perf 6.12 and 7.x also marks the dsos only callchains hit: our `--buildid-callchain`; 6.1's
/// marks those samples hit: our `--buildid`.
fn styles(perf: &Perf) -> [(&'static str, &'static str); 2] {
    if !perf.is_61() {
        [
            ("--buildid-callchain", "-b"),
            ("--buildid-all", "--buildid-all"),
        ]
    } else {
        [("--buildid", "-b"), ("--buildid-all", "--buildid-all")]
    }
}

/// The whole acceptance check for the build-id styles on one recording, with every reader: it
/// lists what its own `perf inject` lists for the style, and reads the input's side-band and
/// samples (`-b` of 6.12 and 7.x marks more than `--buildid`: ours lists no more than it, kernel
/// aside).
fn accept(input: &[u8]) {
    let (out, stats) = ours(&["--buildid"], input);
    // An id an MMAP2 carries is not injected again (`--buildid-mmap`, perf 7's default).
    let ids = counter(&stats, "build_ids_injected") + counter(&stats, "mmap2_ids_in_stream");
    assert!(ids >= 2, "{stats}");
    for perf in readers() {
        for (style, theirs) in styles(&perf) {
            let (out, _) = ours(&[style], input);
            let want = readers::buildid_pairs(&perf, Input::Stream(&perf.inject(&[theirs], input)));
            let got = readers::buildid_pairs(&perf, Input::Stream(&out));
            eprintln!(
                "{} inject {theirs}: {} pairs, ours {style}: {}",
                perf.name,
                want.len(),
                got.len()
            );
            superset(&got, &want);
            readers::reads_like(&perf, Input::Stream(input), Input::Stream(&out))
                .unwrap_or_else(|e| panic!("{style}: {e}"));
        }
        if !perf.is_61() {
            let theirs = readers::buildid_pairs(&perf, Input::Stream(&perf.inject(&["-b"], input)));
            let got = readers::buildid_pairs(&perf, Input::Stream(&out));
            let extra: Vec<_> = got
                .difference(&theirs)
                .filter(|p| !is_addition(&p.1))
                .collect();
            assert!(
                extra.is_empty(),
                "--buildid lists {extra:?}, which {}'s -b does not",
                perf.name
            );
            readers::reads_like(&perf, Input::Stream(input), Input::Stream(&out))
                .unwrap_or_else(|e| panic!("--buildid: {e}"));
        }
    }
}

pipetest!(needs(perf, perf612, trixie) multiprocess_callgraph, |_dir| {
    let w = workload();
    accept(&perf_record(
        &["-e", "cpu-clock", "-c", "200000", "-g"],
        &[&w, "multi", "2"],
    ));
});

pipetest!(needs(perf, perf612, trixie) dwarf_callgraph, |_dir| {
    let w = workload();
    accept(&perf_record(
        &[
            "-e",
            "cpu-clock",
            "-c",
            "1000000",
            "--call-graph",
            "dwarf,1024",
        ],
        &[&w, "single", "3"],
    ));
});

pipetest!(needs(perf, perf612, trixie) two_events, |_dir| {
    let w = workload();
    accept(&perf_record(
        &["-e", "cpu-clock,task-clock", "-c", "200000"],
        &[&w, "single"],
    ));
});

pipetest!(needs(perf, perf612, trixie) threads, |_dir| {
    // perf's own threaded benchmark: 2 groups of 20 sender/receiver threads.
    let input = perf_record(
        &["-e", "cpu-clock", "-c", "100000", "-g"],
        &[
            "perf",
            "bench",
            "sched",
            "messaging",
            "-t",
            "-g",
            "2",
            "-l",
            "50",
        ],
    );
    let forks = perf_on(&["report", "--stats"], &input)
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("FORK events:")?
                .split_whitespace()
                .next()?
                .parse::<u32>()
                .ok()
        })
        .unwrap_or(0);
    assert!(
        forks >= 40,
        "expected the benchmark's threads, got {forks} FORKs"
    );
    accept(&input);
});

pipetest!(needs(perf)
    /// `--buildid-callchain` marks at least what `--buildid` marks, and perf reads it.
    callchain_frames_hit_too, |_dir| {
    let input = fixture_bytes("callgraph.pipe.data");
    let (ip, _) = ours(&["--buildid"], &input);
    let (cc, stats) = ours(&["--buildid-callchain"], &input);
    let (ip, cc) = (pairs(&ip), pairs(&cc));
    assert!(cc.is_superset(&ip), "callchain: {cc:?}\nip: {ip:?}");
    assert_eq!(counter(&stats, "build_ids_injected") as usize, cc.len());
});

pipetest!(needs(perf)
    /// A byte-swapped (big-endian) stream gets its records in its own byte order.
    big_endian_stream, |_dir| {
    let input = fixture_bytes("bigendian.pipe.data");
    let (out, stats) = ours(&["--buildid"], &input);
    assert!(counter(&stats, "build_ids_injected") >= 2, "{stats}");
    eqnice!(
        count_samples(&perf_script(&input)),
        count_samples(&perf_script(&out))
    );
});

pipetest!(needs(perf, perf612, trixie) buildid_mmap, |_dir| {
    let w = workload();
    accept(&perf_record(
        &["-e", "cpu-clock", "-c", "200000", "--buildid-mmap"],
        &[&w, "single"],
    ));
});

pipetest!(needs(perf)
    /// A binary deleted between recording and injection is counted missing, not fatal, and the
    /// other dsos still get their ids.
    deleted_dso, |dir| {
    let exe = dir.path("gzip-copy");
    std::fs::copy("/usr/bin/gzip", &exe).unwrap();
    let script = format!(
        "for i in 1 2 3 4 5 6; do {} -1 -c /usr/bin/perf >/dev/null; done",
        exe.display()
    );
    let input = perf_record(&["-e", "cpu-clock", "-c", "100000"], &["sh", "-c", &script]);
    std::fs::remove_file(&exe).unwrap();
    let (out, stats) = ours(&["--buildid"], &input);
    assert!(counter(&stats, "dsos_missing") >= 1, "{stats}");
    let got = pairs(&out);
    assert!(got.iter().all(|(_, p)| !p.ends_with("gzip-copy")));
    superset(&got, &pairs(&perf_inject(&["-b"], &input)));
    same_samples(&input, &out);
});

pipetest!(needs(perf) compressed, |_dir| {
    let w = workload();
    let input = perf_record(&["-e", "cpu-clock", "-c", "100000", "-z"], &[&w, "single"]);
    let (out, stats) = ours(&["--buildid"], &input);
    assert!(counter(&stats, "build_ids_injected") >= 3, "{stats}");
    // perf 6.1 passes COMPRESSED records through with no ids; compare with what it injects into
    // the decompressed stream.
    let (plain, _) = ours(&["--decompress"], &input);
    superset(&pairs(&out), &pairs(&perf_inject(&["-b"], &plain)));
    // perf 6.1 cannot read its own compressed pipe streams ("Couldn't decompress data"): compare
    // with the decompressed input.
    same_samples(&plain, &out);
});

pipetest!(needs(perf, tracefs) tracepoints, |_dir| {
    let w = workload();
    let input = perf_record(&["-e", "sched:sched_switch"], &[&w, "multi", "2"]);
    // perf 6.1 inject -b and buildid-list fail on tracing data in a pipe ("tracing data size
    // mismatch"); perf script reads it, before and after.
    let (out, stats) = ours(&["--buildid"], &input);
    assert!(counter(&stats, "build_ids_injected") >= 1, "{stats}");
    let (a, b) = (perf_script(&input), perf_script(&out));
    assert!(count_samples(&a) > 0);
    eqnice!(count_samples(&a), count_samples(&b));
});

pipetest!(needs(perf) kernel_and_vdso_ids_come_from_this_host, |_dir| {
    // Recorded here and now: a fixture recorded on another kernel release is, rightly, not this
    // host, and gets no kernel id.
    let w = workload();
    let input = perf_record(
        &["-e", "cpu-clock", "-c", "100000", "-g"],
        &[&w, "multi", "1"],
    );
    let notes = std::fs::read("/sys/kernel/notes").unwrap_or_default();
    let (out, _) = ours(&["--buildid-all"], &input);
    let got = pairs(&out);
    let kernel = got
        .iter()
        .find(|(_, p)| p == "[kernel.kallsyms]")
        .expect("kernel id injected");
    let id: Vec<u8> = (0..kernel.0.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&kernel.0[i..i + 2], 16).unwrap())
        .collect();
    assert!(
        notes.windows(id.len()).any(|w| w == id),
        "kernel id is not in /sys/kernel/notes"
    );
    // `perfpipe inject --host-ids no` injects neither.
    let out = perfpipe(&["inject", "--buildid-all", "--host-ids", "no"], &input);
    assert!(out.status.success());
    assert!(pairs(&out.stdout).iter().all(|(_, p)| !is_addition(p)));
});

pipetest!(needs(perf) inject_is_a_drop_in, |_dir| {
    let input = fixture_bytes("multiproc.pipe.data");
    let a = perfpipe(&["inject", "-b", "-i", "-", "-o", "-"], &input);
    assert!(a.status.success());
    // Current perf's -b: the dsos of every callchain frame count as hit.
    let (b, _) = ours(&["--buildid-callchain"], &input);
    assert!(a.stdout == b, "inject -b differs from --buildid-callchain");
    let plain = perfpipe(&["inject", "-i", "-", "-o", "-"], &input);
    assert!(
        plain.stdout == input,
        "plain inject is not a byte-identical repipe"
    );
    // --known-build-ids replaces the file's id.
    let fake = "00112233445566778899aabbccddeeff00112233";
    let k = perfpipe(
        &[
            "inject",
            "-b",
            "--known-build-ids",
            &format!("/usr/bin/bash={fake}"),
        ],
        &input,
    );
    assert!(k.status.success());
    assert!(pairs(&k.stdout).contains(&(fake.to_string(), "/usr/bin/bash".to_string())));
    // A short (8-byte) id: perf 6.1 honours our size byte (PERF_RECORD_MISC_BUILD_ID_SIZE).
    let k = perfpipe(
        &[
            "inject",
            "-b",
            "--known-build-ids",
            "/usr/bin/bash=0011223344556677",
        ],
        &input,
    );
    assert!(
        pairs(&k.stdout).contains(&("0011223344556677".to_string(), "/usr/bin/bash".to_string()))
    );
    let bad = perfpipe(&["inject", "-b", "--known-build-ids", "nonsense"], &input);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--known-build-ids"));
});

pipetest!(
    /// Output flows while the input is still open: the BUILD_ID records and the samples after them come
    /// out before the writer closes the pipe.
    streams_before_input_ends, |_dir| {
    let input = fixture_bytes("multiproc.pipe.data");
    let mut child = Command::new(bin())
        .args(["--buildid", "--batch-size", "4K", "--queue", "1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        got
    });
    // All but the last 8 KB, then hold the pipe open.
    let cut = input.len() - 8192;
    stdin.write_all(&input[..cut]).unwrap();
    stdin.flush().unwrap();
    let t0 = Instant::now();
    // The reader thread owns stdout; poll the child's progress via /proc write counts instead.
    let pid = child.id();
    let mut written = 0;
    while t0.elapsed() < Duration::from_secs(10) {
        let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
        written = io
            .lines()
            .find_map(|l| l.strip_prefix("wchar: ")?.parse::<usize>().ok())
            .unwrap_or(0);
        if written >= cut / 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        written >= cut / 2,
        "only {written} bytes written of {cut} fed while the input was open"
    );
    stdin.write_all(&input[cut..]).unwrap();
    drop(stdin);
    let out = reader.join().unwrap();
    assert!(child.wait().unwrap().success());
    assert!(out.len() > input.len(), "no BUILD_ID records added");
    assert!(out.windows(8).any(|w| w == b"/usr/bin"), "no BUILD_ID path");
});

// ---------------------------------------------------------------------------------------------
// `perf record --buildid-mmap` (perf record's default since 6.17): the ids come in the MMAP2s.
// `perf inject -b` marks every such dso hit at its MMAP2, so its file-mode build-id table lists
// them all; `perf buildid-list` and `perf archive` on our file output must find at least those.

/// `(build id, path)` pairs `perf buildid-list -i FILE` prints, without the dsos it lists with no id.
fn file_pairs(file: &std::path::Path) -> BTreeSet<(String, String)> {
    let out = run(
        Command::new("perf").arg("buildid-list").arg("-i").arg(file),
        b"",
    );
    assert!(
        out.status.success(),
        "perf buildid-list -i {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    pairs_of(&String::from_utf8_lossy(&out.stdout))
}

fn pairs_of(list: &str) -> BTreeSet<(String, String)> {
    list.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (id, path) = (w.next()?, w.next()?);
            Some((id.to_string(), path.to_string()))
        })
        .collect()
}

/// Runs a command on files, asserting success.
fn run_ok(cmd: &mut Command) {
    let out = run(cmd, b"");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The multi-process `-g` recording both tests use, with `--buildid-mmap`.
const MMAP_IDS: [&str; 6] = ["-e", "cpu-clock", "-c", "100000", "-g", "--buildid-mmap"];

pipetest!(needs(perf, perf612, trixie)
    /// A file-mode `--buildid-mmap` recording, file → file, with every reader: `--buildid` and
    /// `--buildid-callchain` list every (id, path) `perf inject -b` lists (and no more than kernel,
    /// modules and vdso besides), `--buildid-all` every one `perf inject --buildid-all` lists.
    buildid_mmap_file_lists_what_perf_inject_lists, |dir| {
    let input = dir.path("in.data");
    run_ok(
        Command::new("perf")
            .args(["record", "-q", "-o"])
            .arg(&input)
            .args(MMAP_IDS)
            .arg("--")
            .args([workload().as_str(), "multi", "2"])
            .stdin(Stdio::null()),
    );
    // With every reader, against its own perf inject (file to file): 6.12's writes the usual
    // layout here, and its -b lists what our --buildid and --buildid-callchain list.
    for perf in readers() {
        for (ours_flag, perf_flag) in [
            ("--buildid", "-b"),
            ("--buildid-callchain", "-b"),
            ("--buildid-all", "--buildid-all"),
        ] {
            let (ours, theirs) = (dir.path("ours.data"), dir.path("theirs.data"));
            run_ok(Command::new(bin()).arg("-i").arg(&input).arg("-o").arg(&ours).arg(ours_flag));
            run_ok(
                perf.command()
                    .args(["inject", perf_flag, "-i"])
                    .arg(&input)
                    .arg("-o")
                    .arg(&theirs),
            );
            let list = |f: &std::path::Path| readers::buildid_pairs(&perf, Input::File(f));
            let (ours, theirs) = (list(&ours), list(&theirs));
            if perf_flag == "-b" {
                superset(&ours, &theirs);
            } else {
                // perf inject --buildid-all writes no table: buildid-list then lists what samples
                // hit, a subset of every mapped dso, which is what ours lists.
                let missing: Vec<_> = theirs.difference(&ours).collect();
                assert!(
                    missing.is_empty(),
                    "{} {ours_flag}: we lack {missing:?}\nours: {ours:?}",
                    perf.name
                );
            }
        }
    }
});

pipetest!(needs(perf)
    /// A pipe-mode `--buildid-mmap` recording: into a pipe (`perf buildid-list -i -`) and into a
    /// file (`-o out.data`, the table), `--buildid` and `--buildid-callchain` list every (id, path)
    /// `perf inject -b` lists for the same output mode.
    buildid_mmap_pipe_lists_what_perf_inject_lists, |dir| {
    let input = perf_record(&MMAP_IDS, &[&workload(), "multi", "2"]);
    let pipe = dir.write("in.pipe", &input);
    let theirs = pairs(&perf_inject(&["-b"], &input));
    let theirs_file = dir.path("theirs.data");
    // A pipe stream in a regular file: perf inject writes file mode, with the table.
    run_ok(Command::new("perf").args(["inject", "-b", "-i"]).arg(&pipe).arg("-o").arg(&theirs_file));
    let theirs_file = file_pairs(&theirs_file);
    for flag in ["--buildid", "--buildid-callchain"] {
        let (out, _) = ours(&[flag], &input);
        superset(&pairs(&out), &theirs);
        let ours_file = dir.path("ours.data");
        run_ok(Command::new(bin()).arg(flag).arg("-i").arg(&pipe).arg("-o").arg(&ours_file));
        superset(&file_pairs(&ours_file), &theirs_file);
    }
});

pipetest!(needs(mount)
    /// A file that exists only in another mount namespace (a tmpfs of a private namespace) is read
    /// through `/proc/<pid>/root`: with the pid its build id is the original's, without it the
    /// file is missing. The namespace's shell says `ready` once the file is there, and waits for
    /// its standard input to close (at the end of the test) before it exits.
    other_mount_namespace_is_read_through_proc_root, |dir| {
        use perfpipe_stream::model::dso::{read_build_id, Outcome};
        use std::io::BufRead as _;
        let at = dir.path("ns");
        std::fs::create_dir_all(&at).unwrap();
        let script = format!(
            "mount -t tmpfs none {d} && cp /usr/bin/gzip {d}/g && echo ready && cat >/dev/null",
            d = at.display()
        );
        let mut child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("unshare");
        let mut line = String::new();
        let _ = std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
        if line.trim() != "ready" {
            let _ = child.kill();
            let _ = child.wait();
            panic!("cannot make a mount namespace with a tmpfs in it");
        }
        let pid = child.id();
        let inside = at.join("g");
        let outcomes = (
            inside.exists(),
            read_build_id(std::path::Path::new("/usr/bin/gzip"), None, false),
            read_build_id(&inside, Some(pid), false),
            read_build_id(&inside, None, false),
        );
        drop(child.stdin.take());
        let _ = child.wait();
        let (visible, want, through_proc, without_pid) = outcomes;
        assert!(!visible, "the tmpfs is private to the namespace");
        assert!(matches!(want, Outcome::Found(_)), "{want:?}");
        assert_eq!(through_proc, want);
        assert_eq!(without_pid, Outcome::Missing);
    }
);

// ---------------------------------------------------------------------------------------------
// `perfpipe inject -b` is current perf's `-b` (issue 39): perf 7.x is the oracle.

/// One recording of the corpus: who records it and how.
struct Shape {
    name: String,
    perf: Perf,
    args: Vec<&'static str>,
    workload: Vec<String>,
}

/// The corpus: each recording shape (`-g` of several processes, no callchain, DWARF stacks,
/// `--buildid-mmap`, perf's threaded benchmark, `-z`) recorded by each perf (6.1, 6.12, 7.x),
/// and perf 7's own `--no-buildid-mmap` (perf 7 puts ids in the MMAP2s by default) and
/// `--latency`.
fn corpus() -> Vec<Shape> {
    let w = workload();
    let multi = || vec![w.clone(), "multi".into(), "1".into()];
    let single = || vec![w.clone(), "single".into(), "2".into()];
    let bench: Vec<String> = [
        "perf",
        "bench",
        "sched",
        "messaging",
        "-t",
        "-g",
        "2",
        "-l",
        "20",
    ]
    .map(String::from)
    .to_vec();
    let mut shapes = Vec::new();
    for perf in readers() {
        let cc = ["-e", "cpu-clock", "-c", "100000"];
        let mut add = |what: &str, extra: &[&'static str], workload: Vec<String>| {
            shapes.push(Shape {
                name: format!("{} {what}", perf.name),
                perf: perf.clone(),
                args: [&cc[..], extra].concat(),
                workload,
            });
        };
        add("-g multi", &["-g"], multi());
        add("no callchain", &[], single());
        add("dwarf", &["--call-graph", "dwarf,1024"], single());
        add("--buildid-mmap -g", &["-g", "--buildid-mmap"], multi());
        add("threads -g", &["-g"], bench.clone());
        add("-z -g", &["-g", "-z"], single());
        if perf.is_7() {
            add(
                "--no-buildid-mmap -g",
                &["-g", "--no-buildid-mmap"],
                multi(),
            );
            add("--latency -g", &["-g", "--latency"], multi());
        }
    }
    shapes
}

pipetest!(needs(perf, perf612, trixie)
    /// `perfpipe inject -b` against perf 7.x's `inject -b` over the corpus: perf 7's
    /// `buildid-list` lists the same (id, path) pairs in both outputs, but for the one difference
    /// docs/build-ids.md explains: where perf's pipe injection leaves this host's own images
    /// without an id (`[kernel.kallsyms]` when its map carries none, every recorder but 7.x's
    /// default; `[vdso]` at times), ours gives them this host's. A `-z` recording is compared through our `--decompress` (perf 7 cannot read its own
    /// compressed pipe: "Compressed events found but HEADER_COMPRESSED not set"). Every reader
    /// reads our output as it reads the input (perf 6.1 too). Prints the figures.
    inject_b_lists_what_perf_7_lists, |_dir| {
    let p7 = perf7();
    let (mut equal, mut host_only, mut differ) = (0, 0, Vec::new());
    for shape in corpus() {
        let argv: Vec<&str> = shape.workload.iter().map(String::as_str).collect();
        let recorded = shape.perf.record(&shape.args, &argv);
        let input = if shape.args.contains(&"-z") {
            perfpipe_ok(&["--decompress"], &recorded)
        } else {
            recorded
        };
        let ours = perfpipe_ok(&["inject", "-b"], &input);
        let theirs = readers::buildid_pairs(&p7, Input::Stream(&p7.inject(&["-b"], &input)));
        let got = readers::buildid_pairs(&p7, Input::Stream(&ours));
        assert!(theirs.len() >= 3, "{}: perf 7 lists {theirs:?}", shape.name);
        let extra: Vec<_> = got.difference(&theirs).collect();
        let host_added = extra
            .iter()
            .all(|p| is_addition(&p.1) && !theirs.iter().any(|q| q.1 == p.1));
        if got == theirs {
            equal += 1;
        } else if host_added && theirs.is_subset(&got) {
            host_only += 1;
        } else {
            differ.push(format!(
                "{}: perf 7 -b lists {:?} that ours lacks, ours {extra:?} that it lacks",
                shape.name,
                theirs.difference(&got).collect::<Vec<_>>()
            ));
        }
        // Without inlined frames: perf's addr2line lookups of them can time out under load.
        readers::assert_every_reader_reads_like_with(
            &shape.name,
            &["script", "--no-inline", "--show-task-events", "--show-mmap-events"],
            Input::Stream(&input),
            Input::Stream(&ours),
        );
    }
    eprintln!(
        "inject -b vs perf 7's: {equal} equal, {host_only} equal but for this host's kernel or vdso \
         id, {} differ",
        differ.len()
    );
    assert!(differ.is_empty(), "{}", differ.join("\n"));
    assert!(equal + host_only >= 20, "{equal} + {host_only}");
});

pipetest!(needs(perf, perf612, trixie)
    /// A perf 7.x recording (build ids in every MMAP2 but the vdso's, the kernel's too): `inject
    /// -b` injects no BUILD_ID record for a dso whose MMAP2 carries its id, hit or not (perf
    /// marks them hit at the MMAP2 "not to inject build-id"); a file output's build-id table
    /// lists every carried id, so perf 7 lists at least what the samples of its own `inject -b
    /// -o FILE` hit.
    inject_b_leaves_carried_ids_alone, |dir| {
    let p7 = perf7();
    let input = p7.record(&["-e", "cpu-clock", "-c", "100000", "-g"], &[&workload(), "multi", "1"]);
    let out = perfpipe(&["inject", "-b", "-v"], &input);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(counter(&err, "mmap2_ids_in_stream") >= 3, "{err}");
    // Only the vdso (its MMAP2 carries no id) may get a record.
    let names = build_id_names(&out.stdout);
    assert!(names.iter().all(|n| n == "[vdso]"), "{names:?}");
    let (ours, theirs) = (dir.path("ours.data"), dir.path("theirs.data"));
    let pipe = dir.write("in.pipe", &input);
    perfpipe_ok(&["inject", "-b", "-i", pipe.to_str().unwrap(), "-o", ours.to_str().unwrap()], b"");
    succeed(p7.command().args(["inject", "-b", "-i"]).arg(&pipe).arg("-o").arg(&theirs));
    // perf 7's `inject -b -i PIPE -o FILE` writes an empty build-id table (and drops most
    // features): what its samples hit (`buildid-list --with-hits`) is the list to match. Neither
    // perf 6.1 nor 6.12 reads a file of perf 7's 144-byte attrs, ours included
    // (docs/perf-versions.md).
    let with_hits = p7.on_file(&["buildid-list", "--with-hits"], &theirs);
    let want: BTreeSet<(String, String)> = with_hits
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.to_string(), w.next()?.to_string()))
        })
        .filter(|p| p.0.len() >= 16)
        .collect();
    assert!(want.len() >= 3, "{want:?}");
    let got = readers::buildid_pairs(&p7, Input::File(&ours));
    let missing: Vec<_> = want.difference(&got).collect();
    assert!(missing.is_empty(), "our file lacks {missing:?}");
});

/// The file names of a little-endian stream's BUILD_ID records.
fn build_id_names(stream: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    let mut at = 16;
    while at + 8 <= stream.len() {
        let kind = u32::from_le_bytes(stream[at..at + 4].try_into().unwrap());
        let size = usize::from(u16::from_le_bytes([stream[at + 6], stream[at + 7]]));
        assert!(size >= 8 && at + size <= stream.len(), "bad record at {at}");
        if kind == 67 {
            let name = &stream[at + 36..at + size];
            let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
            names.push(String::from_utf8_lossy(&name[..end]).into_owned());
        }
        at += size;
    }
    names
}

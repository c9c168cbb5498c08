//! `perfpipe inject` standing in for `perf inject`: upstream's `tools/perf/tests/shell/pipe_test.sh`
//! cases with our binary, for each build-id style, with perf 6.1, perf 6.12 and perf 7.x (25
//! each), and perf 7.x's own `pipe_test.sh` run as it ships, in the trixie root;
//! the MMAP2 styles (`-B`, `--mmap2-buildid-all`) against every reader and perf 6.12's own inject;
//! the refused options' messages.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Output;

use crate::readers::{self, Input};
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

/// `perf report --stdio ARGS` of a file, with `perf`.
fn report_file(perf: &Perf, path: &Path, args: &[&str]) -> String {
    let out = perf
        .command()
        .args(["report", "--stdio"])
        .args(args)
        .arg("-i")
        .arg(path)
        .output()
        .expect("perf report");
    assert!(
        out.status.success(),
        "{} report -i {}: {}",
        perf.name,
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The build-id styles pipe_test.sh runs (`test_inject_bids`), upstream's latest list.
const STYLES: [&str; 4] = ["-b", "--buildid-all", "-B", "--mmap2-buildid-all"];

/// pipe_test.sh's event: user-space task-clock.
const EVENT: [&str; 2] = ["-e", "task-clock:u"];

/// The cases of `pipe_test.sh` as perf 6.12 ships it (`tools/perf/tests/shell/pipe_test.sh`),
/// with `perf` recording and reading and perfpipe in the middle, each checked as it checks them
/// (`perf report` finds the workload's `noploop`): `test_record_report` with `perfpipe` between
/// record and report (one case: pipe → pipe, `-g` pipe → pipe, `-g` pipe saved to a file), then
/// `test_inject_bids`' six with `perfpipe inject` for `perf inject` (pipe → pipe, `-g` pipe →
/// pipe, pipe → file, file → pipe, pipe-format file → pipe, pipe-format file → file) for `-b`,
/// `--buildid-all`, `-B` and `--mmap2-buildid-all`: 25 cases. Returns how many passed.
fn pipe_test_cases(perf: &Perf, dir: &Dir) -> usize {
    let w = workloads::noploop(dir);
    let sym = "noploop";
    let plain = perf.record(&EVENT, &w.argv());
    let graph = perf.record(&[&EVENT[..], &["-g"]].concat(), &w.argv());
    let file = dir.path("perf.data");
    perf.record_file(&file, &EVENT, &w.argv());
    let pipe_file = dir.write("pipe.data", &plain);
    let name = perf.name;
    let mut passed = 0;
    // test_record_report: perf record -o - | perfpipe | perf report -i - --task (the task is
    // our workload, where upstream's is `perf test -w noploop`'s "perf").
    for (n, input) in [(1, &plain), (2, &graph)] {
        let r = perf.on(&["report", "--task"], &perfpipe_ok(&[], input));
        assert!(r.contains(sym), "{name} record+report #{n}:\n{r}");
    }
    let data = dir.write("rr3.data", &perfpipe_ok(&[], &graph));
    let r = report_file(perf, &data, &["--task"]);
    assert!(r.contains(sym), "{name} record+report #3:\n{r}");
    passed += 1;
    for style in STYLES {
        // #1: perf record -o - | perf inject OPT | perf report -i -
        let out = inject_ok(&[style], &plain);
        let r = perf.on(&["report", "--stdio"], &out);
        assert!(r.contains(sym), "{name} {style} #1 pipe -> pipe:\n{r}");
        // #2: the same with -g.
        let out = inject_ok(&[style], &graph);
        let r = perf.on(&["report", "--stdio"], &out);
        assert!(r.contains(sym), "{name} {style} #2 -g pipe -> pipe:\n{r}");
        // #3: perf record -o - | perf inject OPT -o FILE; perf report -i FILE
        let data = dir.path(&format!("out3{style}"));
        inject_ok(&[style, "-o", data.to_str().unwrap()], &plain);
        let r = report_file(perf, &data, &[]);
        assert!(r.contains(sym), "{name} {style} #3 pipe -> file:\n{r}");
        // #4: perf record -o FILE; perf inject OPT -i FILE | perf report -i -
        let out = inject_ok(&[style, "-i", file.to_str().unwrap()], b"");
        let r = perf.on(&["report", "--stdio"], &out);
        assert!(r.contains(sym), "{name} {style} #4 file -> pipe:\n{r}");
        // #5: perf record -o - > FILE; perf inject OPT -i FILE | perf report -i -
        let out = inject_ok(&[style, "-i", pipe_file.to_str().unwrap()], b"");
        let r = perf.on(&["report", "--stdio"], &out);
        assert!(
            r.contains(sym),
            "{name} {style} #5 pipe-format file -> pipe:\n{r}"
        );
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
        let r = report_file(perf, &data2, &[]);
        assert!(
            r.contains(sym),
            "{name} {style} #6 pipe-format file -> file:\n{r}"
        );
        // And the file's build-id table lists the workload (for the MMAP2 styles too).
        let ids = perf.on_file(&["buildid-list"], &data2);
        assert!(
            ids.contains(w.exe.to_str().unwrap()),
            "{name} {style} #6: buildid-list lacks {}:\n{ids}",
            w.exe.display()
        );
        passed += 6;
    }
    passed
}

pipetest!(needs(perf, cc)
    /// Upstream `pipe_test.sh`'s cases with the system perf (6.1) recording and reading.
    pipe_test_cases_for_every_build_id_style, |_dir| {
    let dir = Dir::new("pipe_test_cases");
    assert_eq!(pipe_test_cases(&oracle(), &dir), 25);
});

pipetest!(needs(perf, perf612, trixie, cc)
    /// Perf 6.12's own `pipe_test.sh` cases, all 25, with perf 6.12 recording and reading.
    pipe_test_cases_of_perf_612, |_dir| {
    let dir = Dir::new("pipe_test_cases_612");
    assert_eq!(pipe_test_cases(&perf612(), &dir), 25);
});

pipetest!(needs(perf, trixie, cc)
    /// Perf 7.x's cases of `pipe_test.sh`, all 25, with perf 7.x recording and reading (build ids
    /// in its MMAP2s: `-b` injects none for those, and the file output's table lists them).
    pipe_test_cases_of_perf_7, |_dir| {
    let dir = Dir::new("pipe_test_cases_7");
    assert_eq!(pipe_test_cases(&perf7(), &dir), 25);
});

/// A directory under the trixie root's `/tmp` for one test, removed at drop.
struct RootDir {
    host: std::path::PathBuf,
    inside: String,
}

impl RootDir {
    fn new(name: &str) -> RootDir {
        let inside = format!("/tmp/perfpipe-{name}-{}", std::process::id());
        let host = crate::needs::trixie_root().join(inside.trim_start_matches('/'));
        let _ = std::fs::remove_dir_all(&host);
        std::fs::create_dir_all(&host).expect("a directory in the trixie root");
        RootDir { host, inside }
    }
}

impl Drop for RootDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.host);
    }
}

pipetest!(needs(perf, cc, trixie)
    /// perf 7.x's own `tools/perf/tests/shell/pipe_test.sh`, as its package ships it
    /// (`usr/lib/perf-core/tests/shell`), run in the trixie root with `perf` on `PATH` a shim that
    /// runs `perfpipe inject` for `perf inject` and the root's perf 7.x for the rest: every case
    /// passes (its `Record+report` and the four `Inject … build-ids test`s say `[Success]`, it
    /// exits 0) and every `perf inject` of it was ours (24 calls). Two lines change, each asserted
    /// to be there: Debian's perf is stripped, so its `perf test -w noploop` workload has no
    /// `noploop` symbol to find (the script would skip itself); the workload is ours instead,
    /// `noploop.c` built as a binary named `perf` (the task the script looks for), and the skip
    /// check asks it for the symbol.
    perf_7s_own_pipe_test_sh, |dir| {
    let shell = crate::needs::trixie_root().join("usr/lib/perf-core/tests/shell");
    let script = std::fs::read_to_string(shell.join("pipe_test.sh")).expect("perf 7's pipe_test.sh");
    let root = RootDir::new("pipe-test");
    let at = &root.inside;
    for sub in ["bin", "w", "lib"] {
        std::fs::create_dir_all(root.host.join(sub)).unwrap();
    }
    for lib in std::fs::read_dir(shell.join("lib")).unwrap() {
        let lib = lib.unwrap();
        std::fs::copy(lib.path(), root.host.join("lib").join(lib.file_name())).unwrap();
    }
    std::fs::copy(bin(), root.host.join("perfpipe")).unwrap();
    let noploop = workloads::noploop(&dir);
    std::fs::copy(&noploop.exe, root.host.join("w/perf")).unwrap();
    let (prog, skip) = ("perf test -w noploop", "skip_test_missing_symbol ${sym}");
    assert!(script.contains(prog) && script.contains(skip), "pipe_test.sh changed:\n{script}");
    let script = script
        .replace(prog, &format!("{at}/w/perf"))
        .replace(skip, &format!("nm {at}/w/perf | grep -q ' T noploop$' || exit 2"));
    std::fs::write(root.host.join("pipe_test.sh"), script).unwrap();
    let shim = format!(
        "#!/bin/sh\n# perf 7.x, with perfpipe as perf inject\n\
         if [ \"$1\" = inject ]; then shift; echo \"$*\" >>{at}/inject.log; exec {at}/perfpipe inject \"$@\"; fi\n\
         exec /usr/bin/perf \"$@\"\n"
    );
    let shim_path = root.host.join("bin/perf");
    std::fs::write(&shim_path, shim).unwrap();
    let mode = <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755);
    std::fs::set_permissions(&shim_path, mode).unwrap();
    let path = format!("PATH={at}/bin:/usr/bin:/bin");
    let out = run(&mut in_trixie(&["env", &path, "bash", &format!("{at}/pipe_test.sh")]), b"");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && !text.contains("[Failed"),
        "perf 7's pipe_test.sh with perfpipe inject ({}):\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    eqnice!(5, text.matches("[Success]").count());
    let log = std::fs::read_to_string(root.host.join("inject.log")).unwrap_or_default();
    eqnice!(24, log.lines().count());
});

/// `perf script` printing frames (comm, ip, symbol, dso of every sample and callchain entry).
const FRAMES: [&str; 3] = ["script", "-F", "comm,tid,ip,sym,dso"];

/// The oracle's `perf script` frames.
fn frames(stream: &[u8]) -> String {
    perf_on(&FRAMES, stream)
}

/// `(build id, path)` pairs the oracle's `perf buildid-list -i -` lists.
fn pairs(stream: &[u8]) -> BTreeSet<(String, String)> {
    readers::buildid_pairs(&oracle(), Input::Stream(stream))
}

pipetest!(needs(perf, perf612, trixie)
    /// The MMAP2 styles on a multi-process `-g` recording: every reader's `perf script` resolves every
    /// frame as on the input and `report --stats` counts its samples; perf 6.1's `perf buildid-list`
    /// lists the ids of the dsos samples hit (what it lists for `-b`'s output), perf 6.12's what its
    /// own `perf inject -B` and `--mmap2-buildid-all` list (6.1 has neither); and the `-B` output
    /// leaves out the maps no sample hit. (Its size against `-b`'s is no invariant: the maps left out
    /// and the build-id records added are both a few KB; one local `.ci/run` saw -B 1,008 bytes
    /// larger of 9 MB, the next 2.8 KB smaller.)
    mmap2_styles_keep_every_frame_and_list_the_ids, |_dir| {
    let input = perf_record(
        &["-e", "cpu-clock", "-c", "20000", "-g"],
        &[&workload(), "multi"],
    );
    let b = inject_ok(&["-b"], &input);
    let big_b = inject_ok(&["-B"], &input);
    let all = inject_ok(&["--mmap2-buildid-all"], &input);
    for out in [&big_b, &all] {
        readers::assert_every_reader_reads_like_with(
            "MMAP2 styles",
            &FRAMES,
            Input::Stream(&input),
            Input::Stream(out),
        );
    }
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
    // Perf 6.12's own `inject -B` writes its MMAP2s with empty ids (`<>` in perf script) in pipe
    // mode, so its buildid-list lists none: ours is held to what its `-b` lists (the dsos samples
    // and callchains hit) instead.
    let p612 = perf612();
    for (style, theirs) in [("-B", "-b"), ("--mmap2-buildid-all", "--mmap2-buildid-all")] {
        let out = if style == "-B" { &big_b } else { &all };
        let list = |s: &[u8]| readers::buildid_pairs(&p612, Input::Stream(s));
        let theirs_out = p612.inject(&[theirs], &input);
        let (want, got) = (list(&theirs_out), list(out));
        eprintln!(
            "perf 6.12 lists {} ids in ours {style}, {} in its own {theirs}, {} in its own {style}",
            got.len(),
            want.len(),
            list(&p612.inject(&[style], &input)).len()
        );
        assert!(want.len() >= 3, "{want:?}");
        let missing: Vec<_> = want.difference(&got).collect();
        assert!(
            missing.is_empty(),
            "{style}: perf 6.12 inject {theirs} lists {missing:?}, we do not"
        );
    }
    eprintln!(
        "input {} bytes, -b {} bytes, -B {} bytes, --mmap2-buildid-all {} bytes",
        input.len(),
        b.len(),
        big_b.len(),
        all.len()
    );
    // `-B` writes an MMAP2 in build-id form (user mode, `MMAP_BUILD_ID`) of a file for a process
    // only where a frame of that process's samples hit the file: each (pid, file) it writes is
    // one the oracle's script of the input shows a frame of (the workload's processes have one
    // thread each, so a sample's tid is its pid). How many maps that is against the input's
    // depends on which maps this recording's samples hit (a child writes its own MMAP2 of a map
    // its parent mapped, which the input has once): no count to compare. The input's maps of a
    // (pid, file) no frame hit are left out.
    let script = frames(&input);
    let mut hit: BTreeSet<(u32, String)> = BTreeSet::new();
    let mut tid = 0;
    for l in script.lines() {
        if !l.starts_with(char::is_whitespace) {
            tid = l.split_whitespace().last().and_then(|t| t.parse().ok()).unwrap_or(0);
        } else if let Some((_, dso)) = l.strip_suffix(')').and_then(|l| l.rsplit_once(" (")) {
            hit.insert((tid, dso.to_string()));
        }
    }
    let pid_of = |r: &[u8]| u32::from_le_bytes(r[8..12].try_into().unwrap());
    let user_maps = |s: &[u8], built: bool| -> BTreeSet<(u32, String)> {
        split_records(s)
            .iter()
            .filter(|(t, r)| {
                let misc = u16::from_le_bytes([r[4], r[5]]);
                (*t == 1 || *t == 10) && misc & 7 == 2 && (!built || misc & 0x4000 != 0)
            })
            .map(|(t, r)| (pid_of(r), map_filename(*t, r)))
            .collect()
    };
    let built = user_maps(&big_b, true);
    assert!(!built.is_empty(), "-B wrote no MMAP2 in build-id form");
    let unhit: Vec<_> = built.difference(&hit).collect();
    assert!(unhit.is_empty(), "-B wrote maps no frame hit: {unhit:?}");
    let written = user_maps(&big_b, false);
    let left_out: Vec<_> = user_maps(&input, false)
        .into_iter()
        .filter(|m| m.1.starts_with('/') && !hit.contains(m))
        .collect();
    eprintln!(
        "-B: {} MMAP2s in build-id form; {} (pid, file) maps of the input no frame hit",
        built.len(),
        left_out.len()
    );
    for m in &left_out {
        // A file without a build id is kept as it came (there is nothing to put in its MMAP2).
        assert!(
            !written.contains(m) || build_id_hex(Path::new(&m.1)).is_none(),
            "-B kept {m:?}, which no frame hit"
        );
    }
    // --mmap2-buildid-all only rewrites in place: MMAP2 records keep their size.
    assert!(
        all.len() <= input.len() + 32 * 64,
        "{} vs {}",
        all.len(),
        input.len()
    );
});

pipetest!(needs(perf)
    /// A `--buildid-mmap` recording (perf record's default since 6.17): its MMAP2 records that carry
    /// ids are left alone, the rest (perf's synthesized kernel MMAP, maps the kernel wrote without an
    /// id) get theirs from the file; a second pass changes nothing. A recording without ids gets
    /// every file's id, and perf resolves the same frames.
    mmap2_buildid_all_leaves_carried_ids_and_fills_the_rest, |_dir| {
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
});

pipetest!(
    /// Every refused perf inject option exits 2 with a message naming it, before reading any input;
    /// `--help` lists the supported and the refused options.
    refused_options_are_named, |_dir| {
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
});

/// Records of a little-endian pipe stream after its 16-byte header: (type, bytes).
fn split_records(s: &[u8]) -> Vec<(u32, Vec<u8>)> {
    let mut v = Vec::new();
    let mut at = 16;
    while at + 8 <= s.len() {
        let t = u32::from_le_bytes(s[at..at + 4].try_into().unwrap());
        let size = usize::from(u16::from_le_bytes([s[at + 6], s[at + 7]]));
        // HEADER_TRACING_DATA and AUXTRACE carry a payload past header.size.
        assert!(t != 66 && t != 71, "a fixture without payload records");
        v.push((t, s[at..at + size].to_vec()));
        at += size;
    }
    assert_eq!(at, s.len());
    v
}

/// The file name of an MMAP (`type_` 1) or MMAP2 (10) record.
fn map_filename(type_: u32, r: &[u8]) -> String {
    let at = if type_ == 1 { 40 } else { 72 };
    let name = &r[at.min(r.len())..];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    String::from_utf8_lossy(&name[..end]).into_owned()
}

/// A record of `type_` and `misc` with `body` (a multiple of 8 bytes).
fn raw(type_: u32, misc: u16, body: &[u8]) -> Vec<u8> {
    assert_eq!(body.len() % 8, 0);
    let mut r = type_.to_le_bytes().to_vec();
    r.extend_from_slice(&misc.to_le_bytes());
    r.extend_from_slice(&u16::try_from(8 + body.len()).unwrap().to_le_bytes());
    r.extend_from_slice(body);
    r
}

/// One record of each type current perf added since 6.1, laid out as upstream declares them,
/// and three types no perf defines yet (a kernel one and two user ones).
fn new_records(with_compressed2: bool) -> Vec<(u32, Vec<u8>)> {
    let mut v = Vec::new();
    // PERF_RECORD_CALLCHAIN_DEFERRED (22): u64 cookie, u64 nr, u64 ips[nr].
    let mut b = 7u64.to_le_bytes().to_vec();
    b.extend_from_slice(&2u64.to_le_bytes());
    b.extend_from_slice(&0x40_1000u64.to_le_bytes());
    b.extend_from_slice(&0x40_2000u64.to_le_bytes());
    v.push((22, raw(22, 2, &b)));
    if with_compressed2 {
        // PERF_RECORD_COMPRESSED2 (83): u64 data_size, data padded to 8; here a zstd frame
        // of nothing, which `decompress` (put before --drop) replaces with no records.
        let data = zstd::bulk::compress(&[], 3).expect("zstd");
        let mut b = (data.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(&data);
        b.resize(b.len().next_multiple_of(8), 0);
        v.push((83, raw(83, 0, &b)));
    }
    // PERF_RECORD_BPF_METADATA (84): char prog_name[16], u64 nr_entries, entries of
    // char key[64] and char value[256].
    let mut b = vec![0u8; 16];
    b[..4].copy_from_slice(b"prog");
    b.extend_from_slice(&1u64.to_le_bytes());
    let mut entry = vec![0u8; 320];
    entry[..3].copy_from_slice(b"key");
    entry[64..69].copy_from_slice(b"value");
    b.extend_from_slice(&entry);
    v.push((84, raw(84, 0, &b)));
    // PERF_RECORD_SCHEDSTAT_CPU (85): u64 timestamp, u32 cpu, u16 version, pad, counters.
    let mut b = 123u64.to_le_bytes().to_vec();
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&17u16.to_le_bytes());
    b.extend_from_slice(&[0, 0]);
    b.extend((0..10u64).flat_map(u64::to_le_bytes));
    v.push((85, raw(85, 0, &b)));
    // PERF_RECORD_SCHEDSTAT_DOMAIN (86): u64 timestamp, u32 cpu, u16 version, u16 domain,
    // counters.
    let mut b = 124u64.to_le_bytes().to_vec();
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&17u16.to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend((0..12u64).flat_map(u64::to_le_bytes));
    v.push((86, raw(86, 0, &b)));
    for t in [23, 87, 200] {
        v.push((t, raw(t, 0, &[t as u8; 16])));
    }
    v
}

/// A real stream with the new records after its first sample and at its end.
fn with_new_records(base: &[u8], with_compressed2: bool) -> Vec<u8> {
    let mut out = base[..16].to_vec();
    let mut placed = false;
    for (t, r) in split_records(base) {
        out.extend_from_slice(&r);
        if t == 9 && !placed {
            placed = true;
            new_records(with_compressed2)
                .iter()
                .for_each(|(_, r)| out.extend_from_slice(r));
        }
    }
    assert!(placed);
    new_records(with_compressed2)
        .iter()
        .for_each(|(_, r)| out.extend_from_slice(r));
    out
}

/// The records of the types [`new_records`] makes, in order.
fn only_new(s: &[u8]) -> Vec<Vec<u8>> {
    let types = [22, 83, 84, 85, 86, 23, 87, 200];
    split_records(s)
        .into_iter()
        .filter(|(t, _)| types.contains(t))
        .map(|(_, r)| r)
        .collect()
}

pipetest!(
    /// Every record type of current perf (CALLCHAIN_DEFERRED 22, COMPRESSED2 83, BPF_METADATA 84,
    /// SCHEDSTAT_CPU 85, SCHEDSTAT_DOMAIN 86) and types no perf defines yet pass through byte for byte,
    /// are named in `--stats-json` and by `--drop`, and the unknown ones are counted; through
    /// `perfpipe inject` (every build-id style) they come out unchanged and in order.
    new_record_types_round_trip, |_dir| {
    let base = fixture_bytes("cpu-clock.pipe.data");
    let input = with_new_records(&base, true);
    let dir = Dir::new("new_record_types");
    let json = dir.path("stats.json");
    let out = perfpipe(&["--stats", "--stats-json", json.to_str().unwrap()], &input);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(out.stdout == input, "passthrough is not byte for byte");
    assert_eq!(counter(&err, "unknown_record_types"), 6, "{err}");
    let json = std::fs::read_to_string(&json).unwrap();
    for name in [
        "\"CALLCHAIN_DEFERRED\": 2",
        "\"COMPRESSED2\": 2",
        "\"BPF_METADATA\": 2",
        "\"SCHEDSTAT_CPU\": 2",
        "\"SCHEDSTAT_DOMAIN\": 2",
        "\"type 23\": 2",
        "\"type 87\": 2",
        "\"type 200\": 2",
    ] {
        assert!(json.contains(name), "{name} not in {json}");
    }

    let drop =
        "callchain_deferred,COMPRESSED2,bpf_metadata,schedstat_cpu,schedstat_domain,23,87,200";
    let out = perfpipe(&["--drop", drop], &input);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eqnice!(base, out.stdout);

    // perf inject decompresses (a COMPRESSED2 becomes what it holds), so without one here.
    let input = with_new_records(&base, false);
    let want = only_new(&input);
    assert_eq!(want.len(), 14);
    for style in ["-b", "--buildid-all", "-B", "--mmap2-buildid-all"] {
        let out = inject_ok(&[style], &input);
        eqnice!(want, only_new(&out));
    }
    eqnice!(input, inject_ok(&[], &input));
});

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// `file` (a little-endian file-mode perf.data) laid out as perf ≥ 6.12 writes a file it made
/// from a pipe (`perf_session__do_write_header()` with `write_attrs_after_data`, upstream
/// "perf header: Allow attributes to be written after data"): the header, the data section at
/// 104, the feature table and features after the data, then the attrs' id arrays and the attrs.
fn attrs_after_data(file: &[u8]) -> Vec<u8> {
    let attr_size = le64(file, 16) as usize;
    let (attrs_at, attrs_len) = (le64(file, 24) as usize, le64(file, 32) as usize);
    let (data_at, data_len) = (le64(file, 40) as usize, le64(file, 48) as usize);
    let bitmap = &file[72..104];
    let nr_features: u32 = (0..4).map(|i| le64(bitmap, i * 8).count_ones()).sum();
    let mut out = file[..104].to_vec();
    out.extend_from_slice(&file[data_at..data_at + data_len]);
    // The feature table, then each feature's bytes, at their new offsets.
    let table_at = data_at + data_len;
    let new_table_at = out.len();
    let mut next = new_table_at + 16 * nr_features as usize;
    let mut table = Vec::new();
    let mut bodies = Vec::new();
    for i in 0..nr_features as usize {
        let (off, size) = (
            le64(file, table_at + 16 * i) as usize,
            le64(file, table_at + 16 * i + 8),
        );
        table.extend_from_slice(&(next as u64).to_le_bytes());
        table.extend_from_slice(&size.to_le_bytes());
        bodies.extend_from_slice(&file[off..off + size as usize]);
        next += size as usize;
    }
    out.extend_from_slice(&table);
    out.extend_from_slice(&bodies);
    // The id arrays, then the attrs pointing at them.
    let mut attrs = Vec::new();
    for k in 0..attrs_len / attr_size {
        let a = &file[attrs_at + k * attr_size..attrs_at + (k + 1) * attr_size];
        let (ids_at, ids_len) = (
            le64(a, attr_size - 16) as usize,
            le64(a, attr_size - 8) as usize,
        );
        let new_ids_at = out.len() as u64;
        out.extend_from_slice(&file[ids_at..ids_at + ids_len]);
        let mut a = a.to_vec();
        a[attr_size - 16..attr_size - 8].copy_from_slice(&new_ids_at.to_le_bytes());
        attrs.extend_from_slice(&a);
    }
    let new_attrs_at = out.len() as u64;
    out.extend_from_slice(&attrs);
    out[24..32].copy_from_slice(&new_attrs_at.to_le_bytes());
    out[40..48].copy_from_slice(&104u64.to_le_bytes());
    out
}

pipetest!(
    /// Input conventions of current perf: a pipe-format stream saved to a regular file is read as a
    /// pipe (byte for byte back), and a file-mode perf.data with its attrs after the data (as perf
    /// ≥ 6.12 writes one it made from a pipe) reads as the same stream as the usual layout.
    pipe_format_files_and_attrs_after_data_are_read, |_dir| {
    let dir = Dir::new("input_conventions");
    let pipe = fixture_bytes("cpu-clock.pipe.data");
    let saved = dir.write("saved.pipe.data", &pipe);
    eqnice!(pipe, inject_ok(&["-i", saved.to_str().unwrap()], b""));

    let file = fixture_bytes("plain.file.data");
    let moved = attrs_after_data(&file);
    assert!(le64(&moved, 24) > le64(&moved, 40), "attrs after the data");
    assert_ne!(moved, file);
    let usual = dir.write("usual.data", &file);
    let late = dir.write("late.data", &moved);
    let want = inject_ok(&["-i", usual.to_str().unwrap()], b"");
    assert!(want.len() > 16 + file.len() / 2, "the stream is written");
    eqnice!(want, inject_ok(&["-i", late.to_str().unwrap()], b""));
    // And file to file: the output is a usual file-mode perf.data with the same stream.
    let out = dir.path("out.data");
    inject_ok(
        &["-i", late.to_str().unwrap(), "-o", out.to_str().unwrap()],
        b"",
    );
    eqnice!(want, inject_ok(&["-i", out.to_str().unwrap()], b""));
});

/// Turns every MMAP2 in build-id form back into the inode form with zeros (misc without
/// MMAP_BUILD_ID), as the kernel writes a `--buildid-mmap` map whose ELF pages it could not read.
fn strip_ids(stream: &[u8]) -> (Vec<u8>, usize) {
    let mut out = stream[..16].to_vec();
    let mut n = 0;
    for (t, mut r) in split_records(stream) {
        let misc = u16::from_le_bytes([r[4], r[5]]);
        if t == 10 && misc & (1 << 14) != 0 {
            r[4..6].copy_from_slice(&(misc & !(1 << 14)).to_le_bytes());
            r[40..64].fill(0);
            n += 1;
        }
        out.extend_from_slice(&r);
    }
    (out, n)
}

pipetest!(needs(perf)
    /// A `--buildid-mmap` recording whose MMAP2 records lost their ids (the kernel could not read
    /// them): `--mmap2-buildid-all` fills each from its file with exactly the bytes the kernel
    /// wrote, so the result equals that of the intact recording; and `-b` lists the same ids.
    buildid_mmap_maps_without_ids_are_filled, |_dir| {
    let rec = perf_record(
        &["-e", "cpu-clock", "--buildid-mmap"],
        &[&workload(), "multi"],
    );
    let (stripped, n) = strip_ids(&rec);
    assert!(n >= 5, "{n} MMAP2 records with ids");
    let want = inject_ok(&["--mmap2-buildid-all"], &rec);
    eqnice!(want, inject_ok(&["--mmap2-buildid-all"], &stripped));
    eqnice!(
        pairs(&inject_ok(&["-b"], &rec)),
        pairs(&inject_ok(&["-b"], &stripped))
    );
});

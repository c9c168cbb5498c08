//! Another userland on this machine (issue 38): processes recorded inside the Debian trixie root
//! (glibc 2.41; this host's is 2.36), their frames found and checked by build id. The oracle is
//! perf 7.3 run inside the root (`util::in_trixie`): `perf script --no-inline | inferno-collapse-perf`,
//! which reads the root's files at the recorded paths. perfpipe runs on the host and gets the
//! root's files through `--symfs ROOT`, an archive made inside the root by `perfpipe archive`, a
//! real debuginfod serving them, perf's build-id cache (`~/.debug` as `perf buildid-cache -a`
//! fills it), or live through `/proc/PID/root` (a process in a mount namespace and one only
//! chrooted); an archived stripped file's debuglink is looked up under `/usr/lib/debug` as perf
//! looks up the debuglink of the file at its path, and a live process's debug file in its own
//! root's `/usr/lib/debug` (by debuglink and by build id); at least 99.9 % of the weight must be on identical stacks, for
//! `--call-graph dwarf` (unwound by `--unwind`) and frame pointers (`-g`). With no source, the
//! host's libc (another build) is never read: `dsos_build_id_mismatch`, an end line naming it,
//! and no frame named from it.
//!
//! The workload (`until.c`) is compiled on the host and copied into a directory of the test's own
//! under `ROOT/tmp`, removed at the end; it runs with the root's libc.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::another_machine::{debuginfod_env, debuginfod_serving, free_port};
use crate::needs::trixie_root;
use crate::oracle::{assert_agrees, collapse};
use crate::util::*;

/// A directory of the test's own inside the root: `ROOT/tmp/perfpipe-NAME-PID` on the host,
/// `/tmp/perfpipe-NAME-PID` inside. Removed at drop.
pub(crate) struct InRoot {
    host: PathBuf,
    inside: String,
}

impl InRoot {
    pub(crate) fn new(name: &str) -> InRoot {
        let inside = format!("/tmp/perfpipe-{name}-{}", std::process::id());
        let host = trixie_root().join(inside.trim_start_matches('/'));
        let _ = std::fs::remove_dir_all(&host);
        std::fs::create_dir_all(&host).unwrap();
        InRoot { host, inside }
    }

    /// `NAME` inside the root, and on the host.
    pub(crate) fn file(&self, name: &str) -> (String, PathBuf) {
        (format!("{}/{name}", self.inside), self.host.join(name))
    }
}

impl Drop for InRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.host);
    }
}

/// `until.c` compiled on the host with `flags` into the root's directory; its path inside.
fn until(r: &InRoot, flags: &[&str], name: &str) -> String {
    let (inside, host) = r.file(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/workloads/until.c");
    // -fno-plt: no `name@plt` stubs, which perf 7.3 names as perf 6.1 (whose rules the symbol
    // tables follow) does not (`access@plt` against `_init` in a `-fcf-protection` binary).
    crate::workloads::compile(
        Command::new("cc")
            .args(flags)
            .arg("-fno-plt")
            .arg("-o")
            .arg(&host)
            .arg(src),
        &host,
    );
    inside
}

/// The rounds of `until.c` a recording runs (a few hundred milliseconds of CPU).
const ROUNDS: &str = "5000";

/// perf 7.3 inside the root: `perf record -e cpu-clock -F 4000 ARGS -o - -- ARGV`.
pub(crate) fn record_inside(args: &[&str], argv: &[&str]) -> Vec<u8> {
    record_inside_told(args, argv).0
}

/// [`record_inside`], with what perf said (its stderr: how the workload ended).
fn record_inside_told(args: &[&str], argv: &[&str]) -> (Vec<u8>, String) {
    let mut all = vec!["/usr/bin/perf", "record", "-e", "cpu-clock", "-F", "4000"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "-", "--"]);
    all.extend_from_slice(argv);
    let out = run(&mut in_trixie(&all), b"");
    let told = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success() && !out.stdout.is_empty(),
        "{all:?} inside the root: {told}"
    );
    (out.stdout, told)
}

/// The oracle: perf 7.3 inside the root, `perf script --no-inline | inferno-collapse-perf`.
fn truth(rec: &[u8]) -> String {
    truth_env(rec, &[])
}

/// [`truth`] with the environment `env` (a `HOME` whose `.debug` is a build-id cache).
fn truth_env(rec: &[u8], env: &[(&str, &str)]) -> String {
    let out = run(
        in_trixie(&["/usr/bin/perf", "script", "--no-inline", "-i", "-"]).envs(env.iter().copied()),
        rec,
    );
    assert!(
        out.status.success(),
        "perf script inside the root: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    collapse(&String::from_utf8_lossy(&out.stdout), &[])
}

/// `perfpipe -i REC -o out.folded --stats ARGS` with the environment `env`: the folded stacks
/// and the stderr.
fn ours_env(dir: &Dir, rec: &[u8], args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let input = dir.write("rec.data", rec);
    let out = dir.path("out.folded");
    let mut cmd = Command::new(bin());
    cmd.args([
        "-i",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--stats",
    ])
    .args(args)
    .envs(env.iter().copied());
    let r = run(&mut cmd, b"");
    let stderr = String::from_utf8_lossy(&r.stderr).into_owned();
    assert!(r.status.success(), "perfpipe {args:?}: {stderr}");
    (std::fs::read_to_string(&out).unwrap(), stderr)
}

/// [`ours_env`] with an empty build-id cache and no debuginfod: only what `args` names.
fn ours(dir: &Dir, rec: &[u8], args: &[&str]) -> (String, String) {
    let cache = dir.path("no-cache");
    std::fs::create_dir_all(&cache).unwrap();
    let env = [
        ("PERF_BUILDID_DIR", cache.to_str().unwrap()),
        ("DEBUGINFOD_URLS", ""),
    ];
    ours_env(dir, rec, args, &env)
}

/// The stacks of the workload's own process (`until`), the oracle's and ours: what the sources
/// are for (perf's own process, recorded too, runs the root's perf).
fn of_until(folded: &str) -> String {
    folded
        .lines()
        .filter(|l| l.starts_with("until"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Records `until` inside the root with `cg` (`-g` or `--call-graph dwarf`) and checks perfpipe
/// on the host with `args` against perf 7.3 inside it.
fn check(dir: &Dir, what: &str, rec: &[u8], args: &[&str]) -> String {
    let theirs = truth(rec);
    let (folded, stats) = ours(dir, rec, args);
    assert_agrees(what, &of_until(&folded), &of_until(&theirs));
    // The libc frames are named: the root's libc was read, not the host's (its `getppid`; below
    // `main`, only the unwinder reaches `__libc_start_main`, as libc has no frame pointers).
    let libc = ["getppid"]
        .into_iter()
        .chain(args.contains(&"--unwind").then_some("__libc_start_main"));
    for f in libc {
        assert!(
            theirs.contains(f) && folded.contains(f),
            "{what}: {f} not named\n{folded}"
        );
    }
    stats
}

pipetest!(needs(perf, cc, inferno, trixie) symfs_reads_the_roots_files_for_unwinding_and_names, |dir| {
    let r = InRoot::new("symfs");
    let dwarf = until(&r, &["-O2", "-fomit-frame-pointer"], "until");
    let fp = until(&r, &["-O1", "-fno-omit-frame-pointer"], "until-fp");
    let stop = format!("{}/never", r.inside);
    let root = trixie_root();
    let root = root.to_str().unwrap();
    let rec = record_inside(&["--call-graph", "dwarf"], &[&dwarf, &stop, ROUNDS]);
    let stats = check(&dir, "dwarf, --unwind --symfs ROOT", &rec, &["--unwind", "--symfs", root]);
    assert_eq!(counter(&stats, "dsos_build_id_mismatch"), 0, "{stats}");
    let rec = record_inside(&["-g"], &[&fp, &stop, ROUNDS]);
    check(&dir, "frame pointers, --symfs ROOT", &rec, &["--symfs", root]);
});

pipetest!(needs(perf, cc, inferno, trixie) an_archive_made_inside_the_root_unwinds_and_names_on_the_host, |dir| {
    let r = InRoot::new("archive");
    let exe = until(&r, &["-O2", "-fomit-frame-pointer"], "until");
    let stop = format!("{}/never", r.inside);
    let rec = record_inside(&["--call-graph", "dwarf"], &[&exe, &stop, ROUNDS]);
    // perfpipe itself, run inside the root (with the root's libc) on the recording there.
    let (pp, pp_host) = r.file("perfpipe");
    std::fs::copy(bin(), &pp_host).unwrap();
    let (rec_in, rec_host) = r.file("rec.data");
    std::fs::write(&rec_host, &rec).unwrap();
    let (tar_in, tar_host) = r.file("files.tar");
    let out = run(
        &mut in_trixie(&[&pp, "archive", "-i", &rec_in, "-o", &tar_in]),
        b"",
    );
    assert!(
        out.status.success(),
        "perfpipe archive inside the root: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tar = dir.path("files.tar");
    std::fs::copy(&tar_host, &tar).unwrap();
    let stats = check(
        &dir,
        "dwarf, --unwind --symbols ARCHIVE",
        &rec,
        &["--unwind", "--symbols", tar.to_str().unwrap()],
    );
    // The host's libc at the same path is another build: passed, never read.
    assert!(counter(&stats, "dsos_loaded") >= 3, "{stats}");
    // `unwind` and `symbolize` read the files through one set of sources: the archive listed
    // once, the sources' counters in one row.
    assert_eq!(counter_rows(&stats, "archives_indexed"), [1], "{stats}");
    let found = counter_rows(&stats, "files_found_by_build_id");
    assert!(found.len() == 1 && found[0] >= 3, "{stats}");
});

pipetest!(needs(perf, cc, inferno, debuginfod, trixie) debuginfod_serving_the_roots_files_unwinds_and_names, |dir| {
    let r = InRoot::new("debuginfod");
    let exe = until(&r, &["-O2", "-fomit-frame-pointer"], "until");
    let stop = format!("{}/never", r.inside);
    let rec = record_inside(&["--call-graph", "dwarf"], &[&exe, &stop, ROUNDS]);
    // The server indexes copies of the root's files the workload maps.
    let served = dir.path("served");
    std::fs::create_dir_all(&served).unwrap();
    let lib = trixie_root().join("usr/lib/x86_64-linux-gnu");
    for f in ["libc.so.6", "ld-linux-x86-64.so.2"] {
        std::fs::copy(lib.join(f), served.join(f)).unwrap();
    }
    std::fs::copy(r.file("until").1, served.join("until")).unwrap();
    let libc_id = build_id_of(&served.join("libc.so.6"));
    let port = free_port();
    let _server = debuginfod_serving(&served, port, &libc_id, "executable");
    let url = format!("http://127.0.0.1:{port}");
    let cache = dir.path("client-cache");
    let no_cache = dir.path("no-cache");
    std::fs::create_dir_all(&no_cache).unwrap();
    let mut env = debuginfod_env(&url, &cache, "10").to_vec();
    env.push(("PERF_BUILDID_DIR", no_cache.to_str().unwrap()));
    let theirs = truth(&rec);
    let (folded, stats) = ours_env(&dir, &rec, &["--unwind"], &env);
    assert_agrees(
        "dwarf, --unwind with DEBUGINFOD_URLS",
        &of_until(&folded),
        &of_until(&theirs),
    );
    assert!(folded.contains("__libc_start_main"), "{stats}");
});

pipetest!(needs(perf, cc, inferno, trixie) with_no_source_no_frame_is_named_from_another_build, |dir| {
    let r = InRoot::new("nosource");
    let exe = until(&r, &["-O2", "-fomit-frame-pointer"], "until");
    let stop = format!("{}/never", r.inside);
    let rec = record_inside(&["--call-graph", "dwarf"], &[&exe, &stop, ROUNDS]);
    let theirs = truth(&rec);
    let json = dir.path("stats.json");
    let (folded, stats) = ours(&dir, &rec, &["--unwind", "--stats-json", json.to_str().unwrap()]);
    // The host's libc and loader are other builds of the same paths: counted and named at the end.
    assert!(counter(&stats, "dsos_build_id_mismatch") >= 1, "{stats}");
    // The workload itself is nowhere here (its directory is in the root) and its process is
    // gone: the line says so, and what keeps a container's files.
    assert!(
        stats.contains(&format!("no unwind tables for {exe}"))
            && stats.contains("was gone before its maps were read")
            && stats.contains("`perfpipe archive` run on the host while it runs"),
        "{stats}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let schema = crate::stats::schema();
    crate::stats::validate(&schema, &schema, &doc, "$").unwrap();
    let libc_note = doc["stages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s.get("notes")?.as_array())
        .flatten()
        .find(|n| {
            n["kind"] == "dso_build_id_mismatch"
                && n["dso"] == "/usr/lib/x86_64-linux-gnu/libc.so.6"
        })
        .unwrap_or_else(|| panic!("no note of libc's other build: {doc}"));
    assert_eq!(
        libc_note["other_builds"][0],
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "{libc_note}"
    );
    assert!(
        stats.contains("no unwind tables for /usr/lib/x86_64-linux-gnu/libc.so.6")
            && stats.contains("only another build was found"),
        "{stats}"
    );
    // `unwind` and `symbolize` both name libc; how to get the right files is said once.
    assert!(
        stats.contains("no symbols for /usr/lib/x86_64-linux-gnu/libc.so.6"),
        "{stats}"
    );
    assert_eq!(stats.matches("to get the right files").count(), 1, "{stats}");
    // No frame is named from them: every function we name in the workload's stacks is named
    // by the oracle too, and none of libc's.
    let names = |f: &str| -> std::collections::BTreeSet<String> {
        of_until(f)
            .lines()
            .filter_map(|l| l.rsplit_once(' ').map(|x| x.0.to_string()))
            .flat_map(|s| s.split(';').map(str::to_string).collect::<Vec<_>>())
            .collect()
    };
    let (ours_names, their_names) = (names(&folded), names(&theirs));
    for libc in ["__libc_start_main", "_start", "getppid", "access"] {
        assert!(!ours_names.contains(libc), "{libc} named from another build:\n{folded}");
    }
    let foreign: Vec<&String> = ours_names
        .iter()
        .filter(|n| !their_names.contains(*n) && !n.starts_with('['))
        .collect();
    assert!(foreign.is_empty(), "frames perf 7.3 does not have: {foreign:?}\n{folded}");
    // Frame pointers: the symbols refuse the host's libc the same way.
    let fp = until(&r, &["-O1", "-fno-omit-frame-pointer"], "until-fp");
    let rec = record_inside(&["-g"], &[&fp, &stop, ROUNDS]);
    let (folded, stats) = ours(&dir, &rec, &[]);
    assert!(counter(&stats, "dsos_build_id_mismatch") >= 1, "{stats}");
    assert!(
        stats.contains("found only another build, not used: /usr/lib/x86_64-linux-gnu/libc.so.6"),
        "{stats}"
    );
    let named = names(&folded);
    for libc in ["getppid", "access"] {
        assert!(!named.contains(libc), "{libc} named from another build:\n{folded}");
    }
    assert!(named.contains("[libc.so.6]"), "{folded}");
});

pipetest!(needs(perf, cc, inferno, trixie) perfs_build_id_cache_unwinds_and_names_on_the_host, |dir| {
    let r = InRoot::new("buildid-cache");
    let exe = until(&r, &["-O2", "-fomit-frame-pointer"], "until");
    let stop = format!("{}/never", r.inside);
    let rec = record_inside(&["--call-graph", "dwarf"], &[&exe, &stop, ROUNDS]);
    // Where it was recorded, perf 7.3 fills the build-id cache of a HOME of the test's own with
    // the files the workload maps (`perf buildid-cache -a`, what `perf record -o FILE` does by
    // itself at its end).
    let (home, home_host) = r.file("home");
    std::fs::create_dir_all(&home_host).unwrap();
    let lib = "/usr/lib/x86_64-linux-gnu";
    for f in [
        exe.clone(),
        format!("{lib}/libc.so.6"),
        format!("{lib}/ld-linux-x86-64.so.2"),
    ] {
        let out = run(
            in_trixie(&["/usr/bin/perf", "buildid-cache", "-a", &f]).env("HOME", &home),
            b"",
        );
        assert!(
            out.status.success(),
            "perf buildid-cache -a {f}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // On the host, that `~/.debug` copied out (its links kept): the only source of the root's
    // files, by build id (the workload is nowhere on the host, its libc another build).
    let host_home = dir.path("home");
    std::fs::create_dir_all(&host_home).unwrap();
    let cp = Command::new("cp")
        .arg("-a")
        .arg(home_host.join(".debug"))
        .arg(&host_home)
        .status()
        .unwrap();
    assert!(cp.success());
    let env = [
        ("HOME", host_home.to_str().unwrap()),
        ("PERF_BUILDID_DIR", ""),
        ("DEBUGINFOD_URLS", ""),
    ];
    let theirs = truth(&rec);
    let (folded, stats) = ours_env(&dir, &rec, &["--unwind"], &env);
    assert_agrees(
        "dwarf, --unwind with the build-id cache in ~/.debug",
        &of_until(&folded),
        &of_until(&theirs),
    );
    for f in ["__libc_start_main", "getppid", "until_loop"] {
        assert!(folded.contains(f), "{f} not named: {stats}\n{folded}");
    }
    // Found there by build id, the host's files at the same paths never read.
    assert!(counter(&stats, "files_found_by_build_id") >= 3, "{stats}");
    assert_eq!(counter(&stats, "dsos_build_id_mismatch"), 0, "{stats}");
});

/// Removes a directory (or a file) at drop, and then its parents up to `up_to` while they are
/// empty.
struct Removed {
    dir: PathBuf,
    up_to: PathBuf,
}

impl Drop for Removed {
    fn drop(&mut self) {
        if self.dir.is_dir() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            let _ = std::fs::remove_file(&self.dir);
        }
        let mut d = self.dir.parent();
        while let Some(p) = d.filter(|p| p.starts_with(&self.up_to) && *p != self.up_to) {
            if std::fs::remove_dir(p).is_err() {
                break;
            }
            d = p.parent();
        }
    }
}

pipetest!(needs(perf, cc, inferno, trixie) an_archived_files_debuglink_is_looked_up_under_usr_lib_debug, |_dir| {
    let r = InRoot::new("debuglink");
    let full = until(&r, &["-O1", "-g", "-fno-omit-frame-pointer"], "until-full");
    let full = trixie_root().join(full.trim_start_matches('/'));
    // `until` stripped (its functions are in no `.dynsym`), with a debuglink to `until.dbg`: a
    // name only the debuglink finds (`/usr/lib/debug/PATH.debug` would be perf's Fedora rule).
    let (keep, keep_host) = r.file("keep");
    let _ = keep;
    std::fs::create_dir_all(&keep_host).unwrap();
    let dbg = keep_host.join("until.dbg");
    let (exe, exe_host) = r.file("until");
    for args in [
        vec!["--only-keep-debug".into(), full.clone(), dbg.clone()],
        vec!["--strip-all".into(), full.clone(), exe_host.clone()],
    ] {
        assert!(Command::new("objcopy").args(&args).status().unwrap().success());
    }
    let link = format!("--add-gnu-debuglink={}", dbg.display());
    assert!(Command::new("objcopy")
        .arg(&link)
        .arg(&exe_host)
        .status()
        .unwrap()
        .success());
    let stop = format!("{}/never", r.inside);
    let (rec, told) = record_inside_told(&["-g"], &[&exe, &stop, ROUNDS]);
    let (rec_in, rec_host) = r.file("rec.data");
    std::fs::write(&rec_host, &rec).unwrap();
    // perfpipe archive inside the root while the debug file is nowhere perf's rules look: the
    // archive holds the stripped file (its debuglink kept), no debug file.
    let (pp, pp_host) = r.file("perfpipe");
    std::fs::copy(bin(), &pp_host).unwrap();
    let (tar_in, tar_host) = r.file("files.tar");
    let out = run(
        &mut in_trixie(&[&pp, "archive", "-i", &rec_in, "-o", &tar_in]),
        b"",
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listed = perfpipe_profile::symbols::sources::list_archive(&tar_host);
    let of_exe: Vec<&String> = listed
        .iter()
        .filter(|n| n.starts_with(exe.trim_start_matches('/')))
        .collect();
    assert!(
        of_exe.iter().any(|n| n.ends_with("/elf")) && !of_exe.iter().any(|n| n.ends_with("/debug")),
        "{of_exe:?}"
    );
    // The debug file where perf's debuglink rule finds it: `/usr/lib/debug/DIR/LINK`.
    let usr_debug = trixie_root().join("usr/lib/debug");
    let placed = Removed {
        dir: usr_debug.join(r.inside.trim_start_matches('/')),
        up_to: trixie_root().join("usr/lib"),
    };
    std::fs::create_dir_all(&placed.dir).unwrap();
    std::fs::rename(&dbg, placed.dir.join("until.dbg")).unwrap();
    // perf 7.3 with the stripped file at its path: names from the debug file by its debuglink.
    let theirs = truth(&rec);
    assert!(
        theirs.contains("until_leaf"),
        "{theirs}\n{} bytes recorded; perf record said: {told}",
        rec.len()
    );
    // The file gone from its path, only in an archive, or in perf's own build-id cache: perf
    // reads a debuglink only from the file at the recorded path (`dso__read_binary_type_filename`,
    // DEBUGLINK), and `perf buildid-cache -a` takes a debug file only from
    // `/usr/lib/debug/.build-id/`, so perf 7.3 names none of its functions.
    let (home, home_host) = r.file("home");
    std::fs::create_dir_all(&home_host).unwrap();
    let out = run(
        in_trixie(&["/usr/bin/perf", "buildid-cache", "-a", &exe]).env("HOME", &home),
        b"",
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_file(&exe_host).unwrap();
    let perf_from_cache = truth_env(&rec, &[("HOME", &home)]);
    assert!(!perf_from_cache.contains("until_leaf"), "{perf_from_cache}");
    // perfpipe, run inside the root with the archive: the archived file's debuglink is looked
    // up as perf looks up the file's at its path, and finds the debug file.
    let (folded_in, folded_host) = r.file("out.folded");
    let (nocache, nocache_host) = r.file("no-cache");
    std::fs::create_dir_all(&nocache_host).unwrap();
    let out = run(
        in_trixie(&[
            &pp, "-i", &rec_in, "-o", &folded_in, "--stats", "--symbols", &tar_in,
        ])
        .env("PERF_BUILDID_DIR", &nocache)
        .env("DEBUGINFOD_URLS", ""),
        b"",
    );
    let stats = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stats}");
    let folded = std::fs::read_to_string(&folded_host).unwrap();
    assert_agrees(
        "-g, --symbols ARCHIVE, the debug file by the archived file's debuglink",
        &of_until(&folded),
        &of_until(&theirs),
    );
    assert!(folded.contains("until_leaf"), "{stats}\n{folded}");
});

/// The GNU build id of `file`, in hex (by `readelf -n`).
fn build_id_of(file: &Path) -> String {
    build_id_hex(file).unwrap_or_else(|| panic!("{} has no build id", file.display()))
}

/// Host perf records `WRAP… ROOT until STOP` with `record_args` (the process chrooted, or in a
/// mount namespace of its own too), its stream going live to `perfpipe PERFPIPE_ARGS -o -`. The
/// workload runs until the test has seen 512 KiB of perfpipe's output after the workload's exec
/// (so perfpipe read what it needed while the process lived), then stops. Returns the raw
/// recording and perfpipe's output.
fn live_stream(
    r: &InRoot,
    exe: &str,
    wrap: &[&str],
    record_args: &[&str],
    perfpipe_args: &[&str],
) -> (Vec<u8>, Vec<u8>) {
    let (stop, stop_host) = r.file("stop");
    let root = trixie_root();
    let mut perf = oracle().command();
    perf.args(["record", "-e", "cpu-clock", "-F", "4000"])
        .args(record_args)
        .args(["-o", "-", "--"])
        .args(wrap)
        .arg(&root)
        .args([exe, stop.as_str()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut perf = perf.spawn().expect("perf record");
    let mut from_perf = perf.stdout.take().unwrap();
    let mut pp = Command::new(bin())
        .args(perfpipe_args)
        .args(["-o", "-"])
        .env("DEBUGINFOD_URLS", "")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("perfpipe");
    let mut to_pp = pp.stdin.take().unwrap();
    // The raw stream, kept for the oracle, and fed to perfpipe as it comes.
    let tee = std::thread::spawn(move || {
        let mut raw = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = std::io::Read::read(&mut from_perf, &mut buf).unwrap_or(0);
            if n == 0 {
                break;
            }
            raw.extend_from_slice(&buf[..n]);
            let _ = to_pp.write_all(&buf[..n]);
        }
        raw
    });
    let out = Watch::new(pp.stdout.take().unwrap());
    let pp_err = Watch::new(pp.stderr.take().unwrap());
    // Its COMM, then 512 KiB: a thousand samples and more.
    out.wait_until("512 KiB of output after the workload's exec", |t| {
        t.find("until").is_some_and(|at| t.len() - at > 512 << 10)
    });
    std::fs::write(&stop_host, b"").unwrap();
    assert!(perf.wait().unwrap().success(), "perf record");
    let raw = tee.join().unwrap();
    assert!(
        pp.wait().unwrap().success(),
        "perfpipe: {}",
        pp_err.finish_text()
    );
    (raw, out.finish())
}

/// `perf record --call-graph dwarf -- WRAP… ROOT until | perfpipe --unwind` live: the unwinder
/// reads the process's files through `/proc/PID/root` while it runs.
fn live(dir: &Dir, name: &str, wrap: &[&str]) {
    let r = InRoot::new(name);
    let exe = until(&r, &["-O2", "-fomit-frame-pointer"], "until");
    let (raw, unwound) = live_stream(&r, &exe, wrap, &["--call-graph", "dwarf"], &["--unwind"]);
    // Named from the root's files on both sides: the frames are what the live unwinder found.
    let theirs = truth(&raw);
    let root = trixie_root();
    let (folded, _) = ours(dir, &unwound, &["--symfs", root.to_str().unwrap()]);
    assert_agrees(
        &format!("live, perf record -- {wrap:?} ROOT until | perfpipe --unwind"),
        &of_until(&folded),
        &of_until(&theirs),
    );
    assert!(folded.contains("__libc_start_main"), "{folded}");
}

pipetest!(needs(perf, cc, inferno, trixie) live_process_in_a_mount_namespace_is_unwound_through_its_root, |dir| {
    live(&dir, "live-ns", &["unshare", "-m", "chroot"]);
});

pipetest!(needs(perf, cc, inferno, trixie) live_chrooted_process_is_unwound_through_its_root, |dir| {
    live(&dir, "live-chroot", &["chroot"]);
});

pipetest!(needs(perf, cc, trixie) live_build_ids_are_the_roots_files, |dir| {
    // `--buildid` reads each dso's id from its file as the process sees it: the root's libc, not
    // this host's, for a process chrooted and one in a mount namespace.
    for (name, wrap) in [("bid-chroot", &["chroot"][..]), ("bid-ns", &["unshare", "-m", "chroot"])] {
        let r = InRoot::new(name);
        let exe = until(&r, &["-O1", "-fno-omit-frame-pointer"], "until");
        let (_, out) = live_stream(&r, &exe, wrap, &["-g"], &["--buildid"]);
        let file = dir.write("bid.data", &out);
        let converted = dir.path("bid.file.data");
        let r2 = perfpipe(
            &["-i", file.to_str().unwrap(), "-o", converted.to_str().unwrap()],
            b"",
        );
        assert!(r2.status.success(), "{}", String::from_utf8_lossy(&r2.stderr));
        let listed = Command::new("perf")
            .args(["buildid-list", "-i"])
            .arg(&converted)
            .output()
            .unwrap();
        let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
        let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
        let want = build_id_of(&trixie_root().join(libc.trim_start_matches('/')));
        let host = build_id_of(Path::new(libc));
        assert_ne!(want, host, "the root's libc is another build");
        assert!(
            listed.lines().any(|l| l.starts_with(&want) && l.ends_with(libc)),
            "{wrap:?}: the root's libc ({want}) not listed:\n{listed}"
        );
        assert!(!listed.contains(&host), "{wrap:?}: the host's libc listed:\n{listed}");
    }
});

/// How a live process's separate debug file is found in its own root.
#[derive(Clone, Copy, Debug)]
enum DebugRule {
    /// `/usr/lib/debug/DIR/LINK` by the binary's `.gnu_debuglink`.
    Debuglink,
    /// `/usr/lib/debug/.build-id/xx/rest.debug` by its build id.
    BuildId,
}

/// A stripped `until` recorded live with `-g` (`perf record -- WRAP… ROOT until`), its debug file
/// only in the root's `/usr/lib/debug` (by `rule`), named by `perfpipe -o x.folded` on the host
/// while the process runs: the locator looks in the process's own debug directories, through
/// `/proc/PID/root`, as perf does inside its mount namespace. The host's `/usr/lib/debug` has no
/// such file, so a name can only come from the root's.
fn live_debug_file(dir: &Dir, name: &str, wrap: &[&str], rule: DebugRule) {
    let r = InRoot::new(name);
    // A build id of this run's own: the file under `.build-id/` is this test's alone.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let id = format!("{:08x}{nanos:016x}{:016x}", std::process::id(), 0x5e45_u64);
    let build_id = format!("-Wl,--build-id=0x{id}");
    let full = until(
        &r,
        &["-O1", "-g", "-fno-omit-frame-pointer", &build_id],
        "until-full",
    );
    let full = trixie_root().join(full.trim_start_matches('/'));
    let (exe, exe_host) = r.file("until");
    let dbg = r.file("until.dbg").1;
    let mut steps = vec![
        vec!["--only-keep-debug".into(), full.clone(), dbg.clone()],
        vec!["--strip-all".into(), full.clone(), exe_host.clone()],
    ];
    if let DebugRule::Debuglink = rule {
        let link = format!("--add-gnu-debuglink={}", dbg.display());
        steps.push(vec![link.into(), exe_host.clone()]);
    }
    for args in steps {
        assert!(Command::new("objcopy")
            .args(&args)
            .status()
            .unwrap()
            .success());
    }
    std::fs::remove_file(&full).unwrap();
    // Where the root's `/usr/lib/debug` has it (removed at the end, with the directories made
    // for it), and where the host's would.
    let at = match rule {
        DebugRule::Debuglink => {
            format!(
                "usr/lib/debug/{}/until.dbg",
                r.inside.trim_start_matches('/')
            )
        }
        DebugRule::BuildId => {
            format!("usr/lib/debug/.build-id/{}/{}.debug", &id[..2], &id[2..])
        }
    };
    let placed = Removed {
        dir: trixie_root().join(&at),
        up_to: trixie_root().join("usr/lib"),
    };
    std::fs::create_dir_all(placed.dir.parent().unwrap()).unwrap();
    let on_host = Path::new("/").join(&at);
    std::fs::rename(&dbg, &placed.dir).unwrap();
    assert!(!on_host.exists(), "{} is on the host", on_host.display());
    // Live: perf's stream goes straight to perfpipe, which writes a snapshot of its profile on
    // each SIGUSR2; the workload runs until a snapshot has its leaf named, or has 400 of its
    // samples without (the name was not found), then is told to stop.
    let (stop, stop_host) = r.file("stop");
    let cache = dir.path("no-cache");
    std::fs::create_dir_all(&cache).unwrap();
    let out = dir.path("live.folded");
    let mut perf = oracle().command();
    perf.args([
        "record",
        "-e",
        "cpu-clock",
        "-F",
        "4000",
        "-g",
        "-o",
        "-",
        "--",
    ])
    .args(wrap)
    .arg(trixie_root())
    .args([exe.as_str(), stop.as_str()])
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    let mut perf = Killed(perf.spawn().expect("perf record"));
    let mut pp = Command::new(bin());
    pp.args(["-o", out.to_str().unwrap(), "--stats"])
        .env("DEBUGINFOD_URLS", "")
        .env("PERF_BUILDID_DIR", &cache)
        .stdin(Stdio::from(perf.0.stdout.take().unwrap()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut pp = Killed(pp.spawn().expect("perfpipe"));
    let said = Watch::new(pp.0.stderr.take().unwrap());
    let inode = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
    };
    loop {
        let before = inode(&out);
        signal(&pp.0, libc::SIGUSR2);
        let t0 = std::time::Instant::now();
        while inode(&out) == before {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(30),
                "no snapshot 30 s after SIGUSR2"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let snapshot = std::fs::read_to_string(&out).unwrap_or_default();
        let of_exe: u64 = of_until(&snapshot)
            .lines()
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
            .sum();
        if snapshot.contains("until_leaf") || of_exe >= 400 {
            break;
        }
    }
    std::fs::write(&stop_host, b"").unwrap();
    assert!(perf.0.wait().unwrap().success(), "perf record");
    let status = pp.0.wait().unwrap();
    let stats = said.finish_text();
    assert!(status.success(), "{stats}");
    let folded = std::fs::read_to_string(&out).unwrap();
    let ours = of_until(&folded);
    for f in ["until_leaf", "until_loop", "main"] {
        assert!(ours.contains(f), "{rule:?}: {f} not named\n{stats}\n{ours}");
    }
    // No frame of the stripped binary is left unnamed.
    assert!(!ours.contains("[until]"), "{rule:?}:\n{ours}");
    drop(placed);
}

/// A child killed (and reaped) at drop if it still runs: a failed test leaves no process.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

pipetest!(needs(perf, cc, trixie) live_processs_debug_file_by_debuglink_is_read_in_its_mount_namespace, |dir| {
    live_debug_file(&dir, "live-dbglink", &["unshare", "-m", "chroot"], DebugRule::Debuglink);
});

pipetest!(needs(perf, cc, trixie) live_processs_debug_file_by_build_id_is_read_in_its_root, |dir| {
    live_debug_file(&dir, "live-dbgid", &["chroot"], DebugRule::BuildId);
});

/// The address of symbol `sym` in the non-PIE ELF file `exe` (`nm`'s), and its file offset (made
/// with `readelf -lW`'s LOAD segments): a frame's `ip` and `rel` in a process that maps it.
fn address_and_offset(exe: &Path, sym: &str) -> (u64, u64) {
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    let nm = Command::new("nm").arg(exe).output().unwrap();
    let addr = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[2] == sym).then(|| hex(f[0]))
        })
        .unwrap_or_else(|| panic!("{sym} not in nm {}", exe.display()));
    let segs = Command::new("readelf")
        .arg("-lW")
        .arg(exe)
        .output()
        .unwrap();
    String::from_utf8_lossy(&segs.stdout)
        .lines()
        .filter(|l| l.trim_start().starts_with("LOAD"))
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (off, vaddr, filesz) = (hex(f[1]), hex(f[2]), hex(f[4]));
            (vaddr..vaddr + filesz)
                .contains(&addr)
                .then(|| (addr, addr - vaddr + off))
        })
        .unwrap_or_else(|| panic!("{sym} at {addr:#x} is in no LOAD of {}", exe.display()))
}

pipetest!(needs(cc, mount)
    /// A chrooted process's files are read through its root held open from when its dso was
    /// noted (`ProcessRoot`), so a table that loads after the process has exited (the pool is
    /// behind, the stream lags) still comes from its root: `/x` itself, and `/y`, stripped, by
    /// the debug file only its root's `/usr/lib/debug/.build-id/` holds. Without the held root
    /// (the dsos noted after the exit), neither is found: nothing at `/x` or `/y` on this host.
    /// chroot needs root, as mounting does. The process says `ready` once chrooted and exits
    /// when its standard input closes.
    a_chrooted_process_files_are_read_after_it_exits, |dir| {
        use perfpipe_profile::symbols::sources::locate::Inode;
        use perfpipe_profile::symbols::sources::{Sources, SourcesConfig};
        use perfpipe_profile::symbols::{DsoDesc, Query, Symbols, SymbolsConfig};
        use perfpipe_stream::model::machine::DsoId;
        use std::io::BufRead as _;
        let root = dir.path("root");
        std::fs::create_dir_all(&root).unwrap();
        let src = dir.write(
            "x.c",
            b"#include <stdio.h>\n#include <unistd.h>\n\
              __attribute__((noinline)) int in_the_root_only(int x) { return x * 7 + 3; }\n\
              int main(int argc, char **argv) {\n\
                char c;\n\
                printf(\"ready %d\\n\", in_the_root_only(argc));\n\
                fflush(stdout);\n\
                while (read(0, &c, 1) > 0) {}\n\
                return 0;\n\
              }\n",
        );
        let x = root.join("x");
        crate::workloads::compile(
            Command::new("cc").args(["-O1", "-static", "-no-pie", "-o"]).arg(&x).arg(&src),
            &x,
        );
        // `/y`: x stripped, its debug file where only the root's debug directory has it.
        let id = build_id_of(&x);
        let debug = root.join(format!("usr/lib/debug/.build-id/{}/{}.debug", &id[..2], &id[2..]));
        std::fs::create_dir_all(debug.parent().unwrap()).unwrap();
        let y = root.join("y");
        for args in [
            vec!["--only-keep-debug".as_ref(), x.as_os_str(), debug.as_os_str()],
            vec!["--strip-all".as_ref(), x.as_os_str(), y.as_os_str()],
        ] {
            assert!(Command::new("objcopy").args(&args).status().unwrap().success());
        }
        let (ip, rel) = address_and_offset(&x, "in_the_root_only");
        let mut child = Killed(
            Command::new("chroot")
                .arg(&root)
                .arg("/x")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("chroot"),
        );
        let mut line = String::new();
        let _ = std::io::BufReader::new(child.0.stdout.take().unwrap()).read_line(&mut line);
        assert!(line.starts_with("ready"), "the chrooted process said {line:?}");
        let pid = child.0.id();
        let symbols = || {
            let sources = Sources::open(&SourcesConfig {
                no_cache: true,
                ..SourcesConfig::default()
            })
            .unwrap();
            let config = SymbolsConfig {
                host_kernel: false,
                sources: std::sync::Arc::new(sources),
                ..SymbolsConfig::default()
            };
            Symbols::new(config, None)
        };
        let note = |s: &Symbols| {
            for (i, name) in [&b"/x"[..], b"/y"].into_iter().enumerate() {
                let desc = DsoDesc {
                    name,
                    build_id: None,
                    kernel: false,
                    pid,
                    inode: None,
                };
                s.note(DsoId(i as u32), desc);
            }
        };
        let names = |s: &Symbols| -> Vec<Option<String>> {
            (0..2)
                .map(|i| {
                    let q = Query {
                        dso: Some(DsoId(i)),
                        pid,
                        ip,
                        rel,
                        kernel: false,
                    };
                    let mut out = Vec::new();
                    s.resolve(&q, &mut out);
                    out.pop().and_then(|r| r.name).map(|n| n.to_string())
                })
                .collect()
        };
        // `/usr/bin/true` is in its root too, another file (the host's `false`): a map of the
        // host's, made before the chroot (as `chroot` maps its own files), is read from the
        // host's by its MMAP2's inode, which comes first whatever the order of the views.
        let fake = root.join("usr/bin/true");
        std::fs::create_dir_all(fake.parent().unwrap()).unwrap();
        std::fs::copy("/usr/bin/false", &fake).unwrap();
        let host_true = Path::new("/usr/bin/true");
        let inode = |p: &Path| {
            use std::os::unix::fs::MetadataExt as _;
            let m = std::fs::metadata(p).unwrap();
            let dev = m.dev();
            Inode {
                maj: (((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff)) as u32,
                min: ((dev & 0xff) | ((dev >> 12) & !0xff)) as u32,
                ino: m.ino(),
            }
        };
        let runtime_of = |s: &Symbols, i: u32, file: &Path| {
            s.note(
                DsoId(i),
                DsoDesc {
                    name: b"/usr/bin/true",
                    build_id: None,
                    kernel: false,
                    pid,
                    inode: Some(inode(file)),
                },
            );
            s.resolve(
                &Query {
                    dso: Some(DsoId(i)),
                    pid,
                    ip: 0x1000,
                    rel: 0x1000,
                    kernel: false,
                },
                &mut Vec::new(),
            );
            s.files(DsoId(i)).0.map(|c| c.describe())
        };
        // Noted while it lives, resolved once it has exited.
        let held = symbols();
        note(&held);
        let views = symbols();
        let (host_view, root_view) = (
            runtime_of(&views, 2, host_true),
            runtime_of(&views, 3, &fake),
        );
        drop(child.0.stdin.take());
        assert!(child.0.wait().unwrap().success());
        let want = Some("in_the_root_only".to_string());
        assert_eq!(names(&held), [want.clone(), want], "noted while it lived");
        assert_eq!(
            host_view.as_deref(),
            Some("/usr/bin/true"),
            "the host's map, by its inode"
        );
        // (Held open: `/proc/self/fd/N/usr/bin/true`.)
        assert!(
            root_view
                .as_deref()
                .is_some_and(|v| v.starts_with("/proc/self/fd/") && v.ends_with("/usr/bin/true")),
            "the root's file, by its inode: {root_view:?}"
        );
        let late = symbols();
        note(&late);
        assert_eq!(names(&late), [None, None], "noted after it exited");
    }
);

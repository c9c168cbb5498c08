//! Symbolizing a recording made on another machine (issue 30): `perfpipe archive` and
//! `--symbols` (ours, `perf archive`'s `.tar.bz2`, a cache filled with `tar xf`), archives whose
//! members leave them, `--kallsyms`, and debuginfod: a real `debuginfod` on loopback serving the
//! debug files of stripped workloads against `perf script | inferno-collapse-perf` of the same
//! recording with the unstripped binaries, and servers that stall, send another build's file, or
//! close mid-body.
//!
//! Every perfpipe run here gets `PERF_BUILDID_DIR` of its own (an empty directory unless the test
//! fills it), so the user's `~/.debug` never answers for it.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::oracle::{assert_agrees, collapse};
use crate::util::*;
use crate::workloads::{compile, FREQ};

/// `fp.c` built with symbols into `dir/w/` (a directory the tests remove).
fn workload(dir: &Dir) -> PathBuf {
    require(Need::Cc);
    let w = dir.path("w");
    std::fs::create_dir_all(&w).unwrap();
    let exe = w.join("fp");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/workloads/fp.c");
    compile(
        Command::new("cc")
            .args(["-O1", "-g", "-fno-omit-frame-pointer", "-o"])
            .arg(&exe)
            .arg(src),
        &exe,
    );
    exe
}

fn record(exe: &Path) -> Vec<u8> {
    perf_record(
        &["-e", "cpu-clock", "-F", FREQ, "-g"],
        &[exe.to_str().unwrap(), "300"],
    )
}

/// `perfpipe ARGS` with `PERF_BUILDID_DIR=cache` and `envs`; asserts success.
fn perfpipe_env(cache: &Path, envs: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args).env("PERF_BUILDID_DIR", cache);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = run(&mut cmd, b"");
    assert!(
        out.status.success(),
        "perfpipe {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `perfpipe -i REC -o DIR/out.folded ARGS` (as [`perfpipe_env`]): its standard error and the
/// folded stacks.
fn profile(
    dir: &Dir,
    cache: &Path,
    envs: &[(&str, &str)],
    rec: &Path,
    args: &[&str],
) -> (String, String) {
    let out = dir.path("out.folded");
    let mut all = vec!["-i", rec.to_str().unwrap(), "-o", out.to_str().unwrap()];
    all.extend_from_slice(args);
    let r = perfpipe_env(cache, envs, &all);
    (
        String::from_utf8_lossy(&r.stderr).into_owned(),
        std::fs::read_to_string(&out).unwrap(),
    )
}

/// Folded stacks of `rec` with `args` (sorted lines, so two runs compare as text).
fn fold(dir: &Dir, cache: &Path, envs: &[(&str, &str)], rec: &Path, args: &[&str]) -> String {
    let mut lines: Vec<String> = profile(dir, cache, envs, rec, args)
        .1
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    lines.join("\n")
}

pub(crate) fn empty_dir(dir: &Dir, name: &str) -> PathBuf {
    let p = dir.path(name);
    std::fs::create_dir_all(&p).unwrap();
    p
}

/// `perfpipe archive -i rec -o dir/NAME EXTRA…` (with an empty build-id cache): the archive.
fn archive(dir: &Dir, rec: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let at = dir.path(name);
    let none = empty_dir(dir, "no-cache");
    let mut args = vec![
        "archive",
        "-i",
        rec.to_str().unwrap(),
        "-o",
        at.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    perfpipe_env(&none, &[], &args);
    at
}

/// `tar xf archive -C dir/NAME` (perf's users' way to fill a build-id cache): the directory.
fn untar(dir: &Dir, archive: &Path, name: &str) -> PathBuf {
    let into = empty_dir(dir, name);
    let ok = Command::new("tar")
        .arg("xf")
        .arg(archive)
        .arg("-C")
        .arg(&into)
        .status()
        .unwrap()
        .success();
    assert!(ok, "tar xf {}", archive.display());
    into
}

pipetest!(needs(perf, cc) archive_names_the_frames_of_a_workload_that_is_gone, |dir| {
    let exe = workload(&dir);
    let rec = dir.write("rec.data", &record(&exe));
    let none = empty_dir(&dir, "no-cache");
    let before = fold(&dir, &none, &[], &rec, &[]);
    assert!(before.contains("fp_leaf_add"), "{before}");
    let archive = archive(&dir, &rec, "rec.tar", &[]);
    std::fs::remove_dir_all(dir.path("w")).unwrap();
    let gone = fold(&dir, &none, &[], &rec, &[]);
    assert!(!gone.contains("fp_leaf_add"), "the workload is gone, yet: {gone}");
    let after = fold(&dir, &none, &[], &rec, &["--symbols", archive.to_str().unwrap()]);
    eqnice!(before, after);
    // The same archive unpacked into a build-id cache, as perf's users do.
    let cache = untar(&dir, &archive, "cache");
    let from_cache = fold(&dir, &cache, &[], &rec, &[]);
    eqnice!(before, from_cache);
});

pipetest!(needs(perf, cc) perf_archive_tarballs_are_read_in_place, |dir| {
    let exe = workload(&dir);
    // perf record (file mode) fills $HOME/.debug; perf archive packs the hit dsos from there.
    let home = empty_dir(&dir, "home");
    let data = dir.path("perf.data");
    succeed(Command::new("perf")
        .env("HOME", &home)
        .args(["record", "-q", "-e", "cpu-clock", "-F", FREQ, "-g", "-o"])
        .arg(&data)
        .arg("--")
        .arg(&exe)
        .arg("300"));
    succeed(Command::new("perf")
        .env("HOME", &home)
        .arg("archive")
        .arg(&data));
    let tarball = dir.path("perf.data.tar.bz2");
    assert!(tarball.is_file());
    let none = empty_dir(&dir, "no-cache");
    let before = fold(&dir, &none, &[], &data, &[]);
    assert!(before.contains("fp_leaf_add"), "{before}");
    std::fs::remove_dir_all(dir.path("w")).unwrap();
    let after = fold(&dir, &none, &[], &data, &["--symbols", tarball.to_str().unwrap()]);
    eqnice!(before, after);
});

pipetest!(needs(perf, cc) slim_archives_name_frames_as_the_whole_files, |dir| {
    // The recording with build ids (the kernel's too), as perf needs them to look in a cache.
    let exe = workload(&dir);
    let piped = perfpipe_ok(&["inject", "-b"], &record(&exe));
    let rec = dir.write("rec.data", &piped);
    let slim = archive(&dir, &rec, "slim.tar", &[]);
    let whole = archive(&dir, &rec, "whole.tar", &["--whole"]);
    let packed = archive(&dir, &rec, "slim.tar.bz2", &[]);
    let size = |p: &Path| std::fs::metadata(p).unwrap().len();
    let (s, w, z) = (size(&slim), size(&whole), size(&packed));
    eprintln!("archive sizes: whole {w}, slim {s}, slim .tar.bz2 {z} bytes");
    assert!(s * 4 < w, "slim {s} bytes, whole {w}");
    assert!(z < s, "bzip2'd {z} bytes, tar {s}");
    std::fs::remove_dir_all(dir.path("w")).unwrap();
    // perfpipe: the same folded stacks from each.
    let none = empty_dir(&dir, "no-cache");
    let by = |a: &Path| fold(&dir, &none, &[], &rec, &["--symbols", a.to_str().unwrap()]);
    let from_whole = by(&whole);
    assert!(from_whole.contains("fp_leaf_add"), "{from_whole}");
    eqnice!(from_whole, by(&slim));
    eqnice!(from_whole, by(&packed));
    // perf: the same names with either unpacked into a build-id cache (under --symfs, so no file
    // of this host answers first) and its kallsyms.
    let script = |a: &Path, name: &str| {
        let cache = untar(&dir, a, &format!("{name}/.debug"));
        let root = dir.path(name);
        let kallsyms = std::fs::read_dir(cache.join("[kernel.kallsyms]"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path()
            .join("kallsyms");
        let out = succeed(Command::new("perf")
            .env("PERF_BUILDID_DIR", "/.debug")
            .arg("script")
            .arg("--symfs")
            .arg(&root)
            .arg("--kallsyms")
            .arg(&kallsyms)
            .args(["-F", "comm,tid,ip,sym,dso", "-i"])
            .arg(&rec));
        String::from_utf8(out.stdout).unwrap()
    };
    let (w, s) = (script(&whole, "perf-whole"), script(&slim, "perf-slim"));
    assert!(w.contains("fp_leaf_add") && w.contains("entry_SYSCALL"), "{w}");
    eqnice!(w, s);
});

/// A loop on clock_gettime and gettimeofday (the vdso's), built into `dir/`: `vd N` calls each
/// N times.
fn vdso_workload(dir: &Dir) -> PathBuf {
    require(Need::Cc);
    let src = dir.write(
        "vd.c",
        b"#include <stdio.h>\n#include <stdlib.h>\n#include <sys/time.h>\n#include <time.h>\n\
int main(int argc, char **argv) { struct timespec ts; struct timeval tv; long s = 0;\n\
long n = argc > 1 ? atol(argv[1]) : 3000000;\n\
for (long i = 0; i < n; i++) { clock_gettime(CLOCK_MONOTONIC, &ts);\n\
gettimeofday(&tv, 0); s += ts.tv_nsec + tv.tv_usec; }\n\
printf(\"%ld\\n\", s); return 0; }\n",
    );
    let exe = dir.path("vd");
    compile(
        Command::new("cc")
            .args(["-O1", "-fno-omit-frame-pointer", "-o"])
            .arg(&exe)
            .arg(&src),
        &exe,
    );
    exe
}

/// `archive` with its `[vdso]/ID/vdso` member's `from` renamed `to` (same length, so the image
/// and its build id stay valid): an image only the archive has.
fn rename_in_vdso(dir: &Dir, archive: &Path, from: &str, to: &str) -> PathBuf {
    let at = dir.path("patched.tar");
    let script = r#"
import io, sys, tarfile
src, dst, a, b = sys.argv[1:5]
t = tarfile.open(src); out = tarfile.open(dst, "w", format=tarfile.GNU_FORMAT)
for m in t.getmembers():
    if m.isfile():
        data = t.extractfile(m).read()
        if m.name.endswith("/vdso"):
            assert a.encode() in data
            data = data.replace(a.encode(), b.encode())
        m.size = len(data); out.addfile(m, io.BytesIO(data))
    else:
        out.addfile(m)
out.close()
"#;
    succeed(
        Command::new("python3")
            .args(["-c", script])
            .arg(archive)
            .arg(&at)
            .args([from, to]),
    );
    at
}

/// perf's names of the `[vdso]` frames of `rec` (`perf script -F ip,sym,dso` lines), and its
/// script.
fn vdso_names(rec: &[u8]) -> (std::collections::BTreeSet<String>, String) {
    let script = perf_on(&["script", "-F", "ip,sym,dso"], rec);
    let names = script
        .lines()
        .filter(|l| l.ends_with("([vdso])"))
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(|s| s.split('+').next().unwrap().to_string())
        .collect();
    (names, script)
}

pipetest!(needs(perf, cc) vdso_frames_are_named_from_the_archive, |dir| {
    // 3 million calls of each (about 1,000 samples at 10 kHz of the loop's CPU time, a third in
    // gettimeofday) until perf's script has a `__vdso_gettimeofday` frame: on 5eee5dc one
    // recording under other load had none (issue 40).
    let exe = vdso_workload(&dir);
    let (rec, _) = record_until(
        |round| {
            let n = (3_000_000u64 << round).to_string();
            perf_record(&["-e", "cpu-clock", "-F", FREQ, "-g"], &[exe.to_str().unwrap(), &n])
        },
        |rec| {
            let (names, _) = vdso_names(rec);
            (!names.contains("__vdso_gettimeofday"))
                .then(|| format!("a __vdso_gettimeofday frame (vdso frames: {names:?})"))
        },
    );
    let rec = dir.write("rec.data", &perfpipe_ok(&["inject", "-b"], &rec));
    let archive = archive(&dir, &rec, "rec.tar", &[]);
    let members = Command::new("tar").arg("tf").arg(&archive).output().unwrap();
    let members = String::from_utf8_lossy(&members.stdout).into_owned();
    assert!(members.lines().any(|m| m.starts_with("[vdso]/") && m.ends_with("/vdso")), "{members}");
    let none = empty_dir(&dir, "no-cache");
    let named = fold(&dir, &none, &[], &rec, &["--symbols", archive.to_str().unwrap()]);
    // perf's names for the vdso frames, after the injection too.
    let (theirs, script) = vdso_names(&std::fs::read(&rec).unwrap());
    assert!(theirs.contains("__vdso_gettimeofday"), "{script}");
    for name in &theirs {
        assert!(named.contains(name), "perf names a vdso frame {name}: {named}");
    }
    // An image only the archive has names them: the names come from it.
    let patched = rename_in_vdso(&dir, &archive, "__vdso_gettimeofday", "__vdso_gettimeofdaX");
    let from_patched = fold(&dir, &none, &[], &rec, &["--symbols", patched.to_str().unwrap()]);
    assert!(from_patched.contains("__vdso_gettimeofdaX"), "{from_patched}");
    assert!(!from_patched.contains("__vdso_gettimeofday"), "{from_patched}");
    eqnice!(named, from_patched.replace("__vdso_gettimeofdaX", "__vdso_gettimeofday"));
});

/// A tar whose members leave it: `../`, an absolute name, links out, a hard link out.
fn hostile_tar(dir: &Dir) -> PathBuf {
    let at = dir.path("hostile.tar");
    let id = "ab".repeat(20);
    let script = format!(
        r#"
import io, tarfile, sys
t = tarfile.open(sys.argv[1], "w", format=tarfile.GNU_FORMAT)
def add(name, data=b"x"):
    i = tarfile.TarInfo(name); i.size = len(data); t.addfile(i, io.BytesIO(data))
def link(name, target, kind=tarfile.SYMTYPE):
    i = tarfile.TarInfo(name); i.type = kind; i.linkname = target; t.addfile(i)
add("../escape")
add("/absolute")
link(".build-id/ab/{rest}", "../../../../../../../../etc")
link("[kernel.kallsyms]/{id}/kallsyms", "/proc/kallsyms")
link("hard", "../outside", tarfile.LNKTYPE)
t.close()
"#,
        rest = &id[2..],
    );
    succeed(Command::new("python3").arg("-c").arg(script).arg(&at));
    at
}

pipetest!(
    archive_members_that_leave_it_are_skipped_and_counted,
    |_dir| {
        let dir = Dir::new("hostile");
        let tar = hostile_tar(&dir);
        let none = empty_dir(&dir, "no-cache");
        let rec = fixture("callgraph.pipe.data");
        let args = ["--symbols", tar.to_str().unwrap(), "--stats"];
        let (stats, folded) = profile(&dir, &none, &[], &rec, &args);
        // `../escape`, `/absolute`, the hard link out, the link out of `.build-id` and the absolute
        // link the kernel's kallsyms was looked up through.
        assert!(counter(&stats, "archive_entries_rejected") >= 4, "{stats}");
        assert!(folded.contains("[[kernel.kallsyms]]"), "{folded}");
        assert!(!dir.path("escape").exists() && !Path::new("/absolute").exists());
    }
);

/// `record` as another host: in a UTS namespace of its own named `perfpipe-otherhost`, so the
/// stream's HEADER_HOSTNAME is not this machine's.
fn record_as_other_host(exe: &Path) -> Vec<u8> {
    let out = succeed(
        Command::new("unshare")
            .args([
                "--uts",
                "sh",
                "-c",
                "hostname perfpipe-otherhost && exec perf record \"$@\"",
                "sh",
            ])
            .args(["-e", "cpu-clock", "-F", FREQ, "-g", "-o", "-", "--"])
            .arg(exe)
            .arg("300")
            .stdin(std::process::Stdio::null()),
    );
    assert!(
        out.stdout.windows(18).any(|w| w == b"perfpipe-otherhost"),
        "the stream names its host"
    );
    out.stdout
}

pipetest!(needs(perf, cc, uts) kallsyms_of_the_recording_host_names_kernel_frames, |dir| {
    // A recording whose stream names another host gets [unknown] kernel frames (this host's
    // /proc/kallsyms is not that kernel's), and this host's names (perf's: it is the recording
    // host) with --kallsyms of a copy of its /proc/kallsyms, or with the archive made here.
    let exe = workload(&dir);
    let rec = dir.write("rec.data", &record_as_other_host(&exe));
    let none = empty_dir(&dir, "no-cache");
    let host = fold(&dir, &none, &[], &rec, &["--symbolize", "kernel=yes"]);
    assert!(host.contains("entry_SYSCALL_64"), "{host}");
    let (said, by_samples) = profile(&dir, &none, &[], &rec, &["--weight", "samples"]);
    let unknown = fold(&dir, &none, &[], &rec, &[]);
    assert!(unknown.contains("[[kernel.kallsyms]]"), "{unknown}");
    // With no source given, the end lines still say the kernel's frames stayed unnamed, how many
    // samples that is (those whose own frame is the kernel's, as the folded stacks count them),
    // and how to name them.
    let leaf_kernel: u64 = by_samples
        .lines()
        .filter(|l| l.rsplit_once(' ').unwrap().0.ends_with("[[kernel.kallsyms]]"))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert!(leaf_kernel > 0, "{by_samples}");
    let line = said
        .lines()
        .find(|l| l.contains("no symbols for [kernel.kallsyms]"))
        .unwrap_or_else(|| panic!("no line for the kernel: {said}"));
    assert!(line.contains(&format!("({leaf_kernel} of ")), "{line}");
    assert!(line.contains("this host's kallsyms (not used"), "{line}");
    assert!(said.contains("--kallsyms with a copy"), "{said}");
    assert!(!unknown.contains("entry_SYSCALL_64"), "{unknown}");
    assert!(unknown.contains("fp_leaf_add"), "{unknown}");
    let kallsyms = dir.write("kallsyms", &std::fs::read("/proc/kallsyms").unwrap());
    let named = fold(&dir, &none, &[], &rec, &["--kallsyms", kallsyms.to_str().unwrap()]);
    eqnice!(host, named);
    let archive = archive(&dir, &rec, "rec.tar", &[]);
    let from_archive = fold(&dir, &none, &[], &rec, &["--symbols", archive.to_str().unwrap()]);
    eqnice!(host, from_archive);
});

/// The workload stripped in place, its debug file in `dir/debug/`, and its build id.
fn stripped(dir: &Dir, exe: &Path) -> (PathBuf, String) {
    let debug = empty_dir(dir, "debug");
    let unstripped = dir.path("fp.unstripped");
    std::fs::copy(exe, &unstripped).unwrap();
    let ok = Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(exe)
        .arg(debug.join("fp.debug"))
        .status()
        .unwrap()
        .success()
        && Command::new("strip").arg(exe).status().unwrap().success();
    assert!(ok, "objcopy/strip");
    let notes = Command::new("readelf").arg("-n").arg(exe).output().unwrap();
    let id = String::from_utf8_lossy(&notes.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
        .expect("a build id");
    (unstripped, id)
}

/// The environment of a run that asks `urls` (`DEBUGINFOD_URLS`) with the client cache `cache`
/// and `DEBUGINFOD_TIMEOUT` `timeout`.
pub(crate) fn debuginfod_env<'a>(
    urls: &'a str,
    cache: &'a Path,
    timeout: &'a str,
) -> [(&'a str, &'a str); 3] {
    [
        ("DEBUGINFOD_URLS", urls),
        ("DEBUGINFOD_CACHE_PATH", cache.to_str().unwrap()),
        ("DEBUGINFOD_TIMEOUT", timeout),
    ]
}

/// A free loopback port (bound, then released for the server to take).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `debuginfod -F DIR` on `port`, killed at drop.
pub(crate) struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a real debuginfod indexing `debug` and waits (at most 30 s) until it serves `id`.
pub(crate) fn debuginfod(debug: &Path, port: u16, id: &str) -> Server {
    debuginfod_serving(debug, port, id, "debuginfo")
}

/// [`debuginfod`], waiting until it serves the `kind` (`debuginfo`, `executable`) of `id`.
pub(crate) fn debuginfod_serving(debug: &Path, port: u16, id: &str, kind: &str) -> Server {
    require(Need::Debuginfod);
    let child = Command::new("debuginfod")
        .args(["-F", "-d", ":memory:", "-t", "0", "-g", "0", "-p"])
        .arg(port.to_string())
        .arg(debug)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("debuginfod");
    let server = Server(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = write!(
                s,
                "GET /buildid/{id}/{kind} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            );
            let mut head = [0u8; 12];
            if s.read_exact(&mut head).is_ok() && head.ends_with(b"200") {
                return server;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("debuginfod on port {port} never served {id}");
}

pipetest!(needs(perf, cc, inferno, debuginfod) debuginfod_names_the_frames_of_stripped_binaries, |dir| {
    let exe = workload(&dir);
    let (unstripped, id) = stripped(&dir, &exe);
    let rec = dir.write("rec.data", &record(&exe));
    let none = empty_dir(&dir, "no-cache");
    // The oracle: perf script of the same recording with the unstripped binary in place.
    std::fs::copy(&exe, dir.path("fp.stripped")).unwrap();
    std::fs::copy(&unstripped, &exe).unwrap();
    let theirs = collapse(&perf_on(&["script"], &std::fs::read(&rec).unwrap()), &[]);
    std::fs::copy(dir.path("fp.stripped"), &exe).unwrap();
    let port = free_port();
    let server = debuginfod(&dir.path("debug"), port, &id);
    let url = format!("http://127.0.0.1:{port}");
    let cache = dir.path("client-cache");
    let env = debuginfod_env(&url, &cache, "10");
    let (stats, ours) = profile(&dir, &none, &env, &rec, &["--stats"]);
    assert_agrees("debuginfod: perfpipe vs perf script (unstripped)", &ours, &theirs);
    assert!(ours.contains("fp_leaf_add"), "{ours}");
    assert_eq!(counter(&stats, "debuginfod_downloaded"), 1, "{stats}");
    // Cached in the elfutils client's layout, and used from there with the server gone.
    assert!(cache.join(&id).join("debuginfo").is_file());
    drop(server);
    let (stats, again) = profile(&dir, &none, &env, &rec, &["--stats"]);
    assert_eq!(counter(&stats, "debuginfod_requests"), 0, "{stats}");
    assert!(counter(&stats, "debuginfod_cache_hits") >= 1, "{stats}");
    eqnice!(ours, again);
});

/// A server that answers each of up to `n` connections with `answer` (then closes).
fn fake_server(answer: Vec<u8>, n: usize) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().take(n) {
            let Ok(mut s) = s else { continue };
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(&answer);
        }
    });
    port
}

/// A stripped workload's recording, and a run of perfpipe on it asking `url`: (stats, folded,
/// seconds, the client cache, the build id).
fn ask(dir: &Dir, url: &str) -> (String, String, f64, PathBuf, String) {
    ask_with(dir, url, &[])
}

/// [`ask`] with more environment.
fn ask_with(dir: &Dir, url: &str, more: &[(&str, &str)]) -> (String, String, f64, PathBuf, String) {
    let exe = workload(dir);
    let (_, id) = stripped(dir, &exe);
    let rec = dir.write("rec.data", &record(&exe));
    let none = empty_dir(dir, "no-cache");
    let cache = dir.path("client-cache");
    let mut env = debuginfod_env(url, &cache, "1").to_vec();
    env.extend_from_slice(more);
    let t = Instant::now();
    let (stats, folded) = profile(dir, &none, &env, &rec, &["--stats"]);
    (stats, folded, t.elapsed().as_secs_f64(), cache, id)
}

fn nothing_cached(cache: &Path, id: &str) {
    for kind in ["debuginfo", "executable"] {
        let p = cache.join(id).join(kind);
        assert!(!p.exists(), "{} was cached after a failure", p.display());
    }
}

pipetest!(needs(perf, cc) debuginfod_that_never_answers_costs_a_bounded_delay, |dir| {
    // A listener that accepts (the kernel's backlog) and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}", silent.local_addr().unwrap().port());
    let (stats, folded, secs, cache, id) = ask(&dir, &url);
    assert!(secs < 20.0, "took {secs:.1} s with DEBUGINFOD_TIMEOUT=1");
    assert!(counter(&stats, "debuginfod_errors") >= 1, "{stats}");
    assert!(!folded.contains("fp_leaf_add"), "{folded}");
    assert!(stats.contains("no symbols for"), "{stats}");
    nothing_cached(&cache, &id);
    drop(silent);
});

pipetest!(needs(perf, cc) debuginfod_answering_with_another_build_is_rejected, |dir| {
    let other = std::fs::read("/bin/true").unwrap();
    let mut answer = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        other.len()
    )
    .into_bytes();
    answer.extend_from_slice(&other);
    let url = format!("http://127.0.0.1:{}", fake_server(answer, 8));
    let (stats, folded, _, cache, id) = ask(&dir, &url);
    assert!(counter(&stats, "debuginfod_rejected") >= 1, "{stats}");
    assert!(!folded.contains("fp_leaf_add"), "{folded}");
    nothing_cached(&cache, &id);
});

pipetest!(needs(perf, cc) debuginfod_closing_mid_body_is_an_error_not_a_file, |dir| {
    let mut answer =
        b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\nConnection: close\r\n\r\n".to_vec();
    answer.extend_from_slice(&[0x7f, b'E', b'L', b'F']);
    answer.extend_from_slice(&[0u8; 996]);
    let url = format!("http://127.0.0.1:{}", fake_server(answer, 8));
    let (stats, folded, _, cache, id) = ask(&dir, &url);
    assert!(counter(&stats, "debuginfod_errors") >= 1, "{stats}");
    assert!(!folded.contains("fp_leaf_add"), "{folded}");
    nothing_cached(&cache, &id);
});

/// perf report's overhead (percent, by period) and samples per dso (`--sort dso -n`, self only),
/// by the dso's short name.
fn perf_samples_by_dso(rec: &[u8]) -> Vec<(String, f64, u64)> {
    let report = perf_on(
        &[
            "report",
            "--stdio",
            "-q",
            "-n",
            "--no-children",
            "-g",
            "none",
            "--sort",
            "dso",
        ],
        rec,
    );
    report
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let pct = f.next()?.strip_suffix('%')?.parse().ok()?;
            let (n, dso) = (f.next()?.parse().ok()?, f.next()?);
            Some((dso.to_string(), pct, n))
        })
        .collect()
}

pipetest!(needs(perf, cc) unnamed_dsos_are_listed_with_their_share_of_samples, |dir| {
    // The workload is stripped, and a copy of it (another path: another dso) runs beside it
    // for a third of the time; an empty --symbols directory is all there is to look in. Both
    // stay unnamed, and the end lines and --stats-json say, largest first, how many samples
    // each costs, as perf report --sort dso counts them.
    let exe = workload(&dir);
    let (_, id) = stripped(&dir, &exe);
    let copy = dir.path("w/fp-copy");
    std::fs::copy(&exe, &copy).unwrap();
    let script = format!("{} 100 & {} 300; wait", copy.display(), exe.display());
    let bytes = perf_record(&["-e", "cpu-clock", "-F", FREQ, "-g"], &["sh", "-c", &script]);
    let rec = dir.write("rec.data", &bytes);
    let perf = perf_samples_by_dso(&bytes);
    let total: u64 = perf.iter().map(|(_, _, n)| n).sum();
    let of = |name: &str| {
        perf.iter()
            .find(|(d, ..)| d == name)
            .map_or((0.0, 0), |(_, pct, n)| (*pct, *n))
    };
    let none = empty_dir(&dir, "no-cache");
    let empty = empty_dir(&dir, "empty");
    let json = dir.path("stats.json");
    let args = ["--symbols", empty.to_str().unwrap(), "--stats-json", json.to_str().unwrap()];
    let (err, _) = profile(&dir, &none, &[], &rec, &args);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("no symbols for")).collect();
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let schema = crate::stats::schema();
    crate::stats::validate(&schema, &schema, &doc, "$").unwrap();
    let notes: Vec<&serde_json::Value> = doc["stages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s.get("notes")?.as_array())
        .flatten()
        .collect();
    for (short, path) in [("fp", &exe), ("fp-copy", &copy)] {
        let (overhead, theirs) = of(short);
        assert!(theirs * 10 > total, "{short} has few samples: {perf:?}");
        let at = format!("{} ", path.display());
        let line = lines
            .iter()
            .find(|l| l.contains(&at))
            .unwrap_or_else(|| panic!("no line for {short} in:\n{err}"));
        let pct = 100.0 * theirs as f64 / total as f64;
        let want = format!("{pct:.2}% of samples ({theirs} of {total})");
        assert!(line.contains(&want), "want {want:?} in {line:?} (perf report: {perf:?})");
        // perf's own percentage weighs samples by period (cpu-clock's vary a little while the
        // frequency settles): within half a point of the share of samples.
        assert!((overhead - pct).abs() < 0.5, "{short}: perf report {overhead}%, we {pct:.2}%");
        assert!(line.contains(&format!("tried --symbols {}", empty.display())), "{line}");
        assert!(line.contains(&id), "{line}");
        // The same in --stats-json, which follows its schema.
        let note = notes
            .iter()
            .find(|n| n["dso"].as_str() == path.to_str())
            .unwrap_or_else(|| panic!("no note for {short}: {notes:?}"));
        assert_eq!(note["kind"], "dso_unnamed");
        assert_eq!(note["samples"].as_u64(), Some(theirs), "{note}");
        let share = note["share"].as_f64().unwrap();
        assert!((share * 100.0 - pct).abs() < 1e-9, "{share} vs perf's {pct}");
        assert_eq!(note["build_id"].as_str(), Some(id.as_str()), "{note}");
        assert!(note["hint"].as_str().unwrap().contains("DEBUGINFOD_URLS"), "{note}");
    }
    // Largest first, and one hint line for all.
    let first = format!("{} ", exe.display());
    assert!(lines.first().is_some_and(|l| l.contains(&first)), "{lines:?}");
    assert_eq!(notes.first().and_then(|n| n["dso"].as_str()), exe.to_str());
    assert_eq!(err.matches("perfpipe archive -i REC").count(), 1, "one hint line:\n{err}");
});

/// The samples of folded stacks (the sum of their counts).
fn weight(folded: &str) -> u64 {
    folded
        .lines()
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum()
}

/// A CA and a certificate for 127.0.0.1 it signed, made by `openssl` in `dir/name/`:
/// (`ca.pem`, `server.pem` with the certificate and its key, as socat takes it).
pub(crate) fn test_ca(dir: &Dir, name: &str) -> (PathBuf, PathBuf) {
    let at = empty_dir(dir, name);
    let openssl = |args: &[&str]| {
        succeed(Command::new("openssl").args(args).current_dir(&at));
    };
    let rsa = ["-newkey", "rsa:2048", "-nodes"];
    let subject = format!("/CN=perfpipe test CA {name}");
    let ca = [
        "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", &subject,
    ];
    openssl(&[&["req", "-x509"], &rsa[..], &ca[..]].concat());
    openssl(
        &[
            &["req"],
            &rsa[..],
            &[
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=127.0.0.1",
            ],
        ]
        .concat(),
    );
    std::fs::write(
        at.join("san.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "san.ext",
        "-out",
        "server.crt",
    ]);
    let mut pem = std::fs::read(at.join("server.crt")).unwrap();
    pem.extend(std::fs::read(at.join("server.key")).unwrap());
    std::fs::write(at.join("server.pem"), pem).unwrap();
    (at.join("ca.pem"), at.join("server.pem"))
}

/// socat's TLS (`cert`) on a free loopback port in front of 127.0.0.1:`to`, killed at drop;
/// returned once it accepts connections.
pub(crate) fn tls_front(cert: &Path, to: u16) -> (Server, u16) {
    require(Need::Tls);
    let port = free_port();
    let child = Command::new("socat")
        .arg(format!(
            "OPENSSL-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,cert={},verify=0",
            cert.display()
        ))
        .arg(format!("TCP:127.0.0.1:{to}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("socat");
    let server = Server(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "socat on port {port} never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (server, port)
}

pipetest!(needs(perf, cc, debuginfod, tls) debuginfod_over_https_trusts_the_ca_store, |dir| {
    // A real debuginfod behind a real TLS terminator, with a certificate of a CA made here:
    // trusted through SSL_CERT_FILE, the https server names the frames as the http one does;
    // with another CA's file, its certificate is refused, counted and said, and the profile is
    // still written.
    let exe = workload(&dir);
    let (_, id) = stripped(&dir, &exe);
    let rec = dir.write("rec.data", &record(&exe));
    let none = empty_dir(&dir, "no-cache");
    let port = free_port();
    let _server = debuginfod(&dir.path("debug"), port, &id);
    let (ca, cert) = test_ca(&dir, "trusted");
    let (other_ca, _) = test_ca(&dir, "other");
    let (_tls, tls_port) = tls_front(&cert, port);
    let no_dir = empty_dir(&dir, "no-cert-dir");
    let run = |url: &str, ca: &Path, cache: &str| {
        let cache = dir.path(cache);
        let mut env = debuginfod_env(url, &cache, "10").to_vec();
        env.extend([("SSL_CERT_FILE", ca.to_str().unwrap()), ("SSL_CERT_DIR", no_dir.to_str().unwrap())]);
        let (stats, folded) = profile(&dir, &none, &env, &rec, &["--stats"]);
        (stats, folded, cache)
    };
    let (_, plain, _) = run(&format!("http://127.0.0.1:{port}"), &ca, "cache-http");
    assert!(plain.contains("fp_leaf_add"), "{plain}");
    let https = format!("https://127.0.0.1:{tls_port}");
    let (stats, tls, cache) = run(&https, &ca, "cache-https");
    eqnice!(plain, tls);
    assert_eq!(counter(&stats, "debuginfod_downloaded"), 1, "{stats}");
    assert_eq!(counter(&stats, "debuginfod_tls_errors"), 0, "{stats}");
    assert!(cache.join(&id).join("debuginfo").is_file());
    // A CA store that does not hold the server's CA.
    let (stats, refused, cache) = run(&https, &other_ca, "cache-untrusted");
    assert!(!refused.contains("fp_leaf_add"), "{refused}");
    assert_eq!(weight(&refused), weight(&plain), "the profile has every sample: {refused}");
    assert!(counter(&stats, "debuginfod_tls_errors") >= 1, "{stats}");
    assert_eq!(counter(&stats, "debuginfod_downloaded"), 0, "{stats}");
    let said = stats
        .lines()
        .find(|l| l.contains(&format!("debuginfod {https}: ")))
        .unwrap_or_else(|| panic!("no line on the refused server in:\n{stats}"));
    assert!(said.contains("certificate"), "{said}");
    nothing_cached(&cache, &id);
});

pipetest!(needs(perf, cc) debuginfod_redirect_loops_and_answers_over_the_cap_are_errors, |dir| {
    // One server redirects to itself for ever, the other sends a chunked body (no length to
    // refuse up front) past DEBUGINFOD_MAXSIZE: both are errors, bounded, and nothing is cached.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let hops = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = hops.clone();
    std::thread::spawn(move || {
        for s in l.incoming().take(64) {
            let Ok(mut s) = s else { continue };
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = s.read(&mut [0u8; 4096]);
            let _ = write!(
                s,
                "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:{port}/again\r\n\
                 Content-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    });
    let mut big = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".to_vec();
    big.extend_from_slice(b"1000\r\n\x7fELF");
    big.extend_from_slice(&[0u8; 0x1000 - 4]);
    big.extend_from_slice(b"\r\n0\r\n\r\n");
    let capped = fake_server(big, 8);
    let urls = format!("http://127.0.0.1:{port} http://127.0.0.1:{capped}");
    let (stats, folded, _, cache, id) = ask_with(&dir, &urls, &[("DEBUGINFOD_MAXSIZE", "1000")]);
    assert!(counter(&stats, "debuginfod_errors") >= 2, "{stats}");
    assert!(!folded.contains("fp_leaf_add"), "{folded}");
    let hops = hops.load(std::sync::atomic::Ordering::SeqCst);
    // Two files (debuginfo, executable), each followed at most MAX_REDIRECTS (8) times.
    assert!((2..=2 * 9).contains(&hops), "{hops} connections to the redirecting server");
    assert!(stats.contains("size cap"), "{stats}");
    assert!(stats.contains("redirect"), "{stats}");
    nothing_cached(&cache, &id);
});

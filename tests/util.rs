//! Helpers shared by the integration tests: the binary, fixtures, temp dirs, which real `perf` runs
//! ([`oracle`] for names, [`readers`] for reading what we write), and signals sent only once the
//! child catches them.
//!
//! Every test is declared by [`pipetest!`] (a plain `#[test]` would never run: the binary's
//! harness is `needs::main`). A test that needs perf (or another [`Need`]) says so:
//! `pipetest!(needs(perf) name, ..)`. It never returns early.

use std::io::{Read, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub use crate::needs::{require, Need};

/// Prints expected vs got between rulers when they differ.
#[macro_export]
macro_rules! eqnice {
    ($expected:expr, $got:expr) => {{
        let (expected, got) = (&$expected, &$got);
        if expected != got {
            panic!(
                "\n{:-^60}\nexpected:\n{:?}\n{:-^60}\ngot:\n{:?}\n{:-^60}",
                "", expected, "", got, ""
            );
        }
    }};
}

/// Declares a test that gets a fresh [`Dir`]: `pipetest!(name, |dir| { .. })`, or with what it
/// needs from the machine, `pipetest!(needs(perf, cc) name, |dir| { .. })`: any of the lower-case
/// names of `needs::named` (perf, perf612, cc, mount, tracefs, script, go, duckdb, inferno,
/// chromium, debuginfod, tls, uts, spark, trixie, otelproto), in any number and order. A missing need makes
/// the test ignored with the reason when it runs, or under `CI` a failure (see `needs`). Doc
/// comments go after `needs(..)`, before the name. The test's name is `module::name`. A test of
/// every reader ([`readers`]) names `perf612` and `trixie` (perf 7 is in the trixie root).
#[macro_export]
macro_rules! pipetest {
    (needs($($need:ident),+ $(,)?) $(#[$meta:meta])* $name:ident, |$dir:ident| $body:block) => {
        $crate::pipetest!(@test [$($crate::needs::named::$need),+] $(#[$meta])* $name, |$dir| $body);
    };
    ($(#[$meta:meta])* $name:ident, |$dir:ident| $body:block) => {
        $crate::pipetest!(@test [] $(#[$meta])* $name, |$dir| $body);
    };
    (@test [$($need:expr),*] $(#[$meta:meta])* $name:ident, |$dir:ident| $body:block) => {
        $(#[$meta])*
        fn $name() {
            let $dir = $crate::util::Dir::new(stringify!($name));
            $body
        }
        ::inventory::submit! {
            $crate::needs::Test {
                module: module_path!(),
                name: stringify!($name),
                needs: &[$($need),*],
                run: $name,
            }
        }
    };
}

/// A fresh temporary directory, removed at drop.
#[derive(Debug)]
pub struct Dir {
    tmp: tempfile::TempDir,
}

impl Dir {
    pub fn new(name: &str) -> Dir {
        Dir {
            tmp: tempfile::Builder::new()
                .prefix(&format!("perfpipe-{name}-"))
                .tempdir()
                .expect("temp dir"),
        }
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }
    pub fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, bytes).expect("write temp file");
        p
    }
}

/// The `perfpipe` binary under test.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_perfpipe"))
}

/// A checked-in fixture (see `tests/fixtures/README.md`).
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name)
}

/// Bytes of a checked-in fixture.
pub fn fixture_bytes(name: &str) -> Vec<u8> {
    std::fs::read(fixture(name)).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

/// Every `*.pipe.data` fixture name.
pub fn all_fixtures() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(fixture(""))
        .expect("fixtures dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".pipe.data"))
        .collect();
    v.sort();
    assert!(v.len() >= 10, "fixtures missing: {v:?}");
    v
}

/// Runs `perfpipe ARGS` with `stdin` as input; returns its output.
pub fn perfpipe(args: &[&str], stdin: &[u8]) -> Output {
    run(Command::new(bin()).args(args), stdin)
}

/// `perfpipe ARGS` on `stdin`, asserting success; its standard output.
///
/// # Panics
/// When perfpipe fails, with its standard error.
pub fn perfpipe_ok(args: &[&str], stdin: &[u8]) -> Vec<u8> {
    let out = perfpipe(args, stdin);
    assert!(
        out.status.success(),
        "perfpipe {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `perfpipe record ARGS -- WORKLOAD…`: the stream it writes to standard output and its standard
/// error (where the workload's own goes too), asserting success.
///
/// # Panics
/// When perfpipe record fails, with its standard error.
pub fn perfpipe_record(args: &[&str], workload: &[&str]) -> (Vec<u8>, String) {
    let out = Command::new(bin())
        .arg("record")
        .args(args)
        .arg("--")
        .args(workload)
        .stdin(Stdio::null())
        .output()
        .expect("perfpipe record");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "perfpipe record {args:?}: {err}");
    (out.stdout, err)
}

/// Runs `cmd` (standard input empty), asserting it exits 0 (else panics with the command and its
/// standard error); its output.
pub fn succeed(cmd: &mut Command) -> Output {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs a command feeding `stdin` from a thread (so a large output cannot deadlock us).
pub fn run(cmd: &mut Command, stdin: &[u8]) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut sin = child.stdin.take().expect("stdin");
    let input = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        // The child may legitimately stop reading early (bad input): ignore EPIPE.
        let _ = sin.write_all(&input);
    });
    let out = child.wait_with_output().expect("wait");
    feeder.join().expect("feeder");
    out
}

// ---------------------------------------------------------------------------------------------
// Which perf runs. One place says it: the name oracle is the system perf (Debian 12's 6.1), whose
// symbol and dso names the tests compare ours with; every reader is each perf that must read what
// we write in perf's format: the oracle, Debian's perf 6.12 (`Need::Perf612`, unpacked by
// `.ci/run`, found through `PERF_612`) and perf 7.x of the trixie root (`Need::Trixie`, made by
// `.ci/trixie-root`). 6.12 and 7.x are no name oracles: they name differently (see
// docs/perf-versions.md). The free functions below (`perf_on`, `perf_record`, …) run the oracle.

/// A perf the tests run; [`oracle`] and [`readers`] say which.
#[derive(Clone, Debug)]
pub struct Perf {
    /// `perf 6.1`, `perf 6.12` or `perf 7`, for messages.
    pub name: &'static str,
    program: PathBuf,
}

impl Perf {
    /// A command that runs this perf.
    pub fn command(&self) -> Command {
        Command::new(&self.program)
    }

    /// Whether this is Debian's perf 6.12 (not the oracle).
    pub fn is_612(&self) -> bool {
        self.name == "perf 6.12"
    }

    /// Whether this is perf 7.x of the trixie root.
    pub fn is_7(&self) -> bool {
        self.name == "perf 7"
    }

    /// Whether this is the system perf 6.1, the name oracle (6.12 and 7.x are current perf:
    /// `inject -b` and `buildid-list` mark callchain dsos, and more; docs/perf-versions.md).
    pub fn is_61(&self) -> bool {
        self.name == "perf 6.1"
    }

    /// Runs `perf ARGS -i -` on `input`, asserting success; returns stdout.
    pub fn on(&self, args: &[&str], input: &[u8]) -> String {
        let out = run(self.command().args(args).args(["-i", "-"]), input);
        assert!(
            out.status.success(),
            "{} {args:?} failed: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("perf output is UTF-8")
    }

    /// Runs `perf ARGS -i FILE`, asserting success; returns stdout.
    pub fn on_file(&self, args: &[&str], file: &Path) -> String {
        let out = run(self.command().args(args).arg("-i").arg(file), b"");
        assert!(
            out.status.success(),
            "{} {args:?} -i {}: {}",
            self.name,
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("perf output is UTF-8")
    }

    /// `perf script --show-task-events --show-mmap-events` of a stream: side-band and samples.
    pub fn script(&self, input: &[u8]) -> String {
        self.on(
            &["script", "--show-task-events", "--show-mmap-events"],
            input,
        )
    }

    /// `perf inject ARGS -i - -o -` on `input`, asserting success.
    pub fn inject(&self, args: &[&str], input: &[u8]) -> Vec<u8> {
        let out = run(
            self.command()
                .arg("inject")
                .args(args)
                .args(["-i", "-", "-o", "-"]),
            input,
        );
        assert!(
            out.status.success(),
            "{} inject {args:?}: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// Records `perf record ARGS -o - -- WORKLOAD…` and returns the pipe stream.
    pub fn record(&self, args: &[&str], workload: &[&str]) -> Vec<u8> {
        self.record_err(args, workload).0
    }

    /// [`Perf::record`], with perf's standard error (where the workload's own goes too).
    pub fn record_err(&self, args: &[&str], workload: &[&str]) -> (Vec<u8>, String) {
        self.record_env(&[], args, workload)
    }

    /// [`Perf::record_err`] with variables set in perf's environment, which the workload
    /// inherits (not through an `env` process: perf 6.1 and 6.12 unwind a `--call-graph dwarf`
    /// workload exec'd by `env` only to its innermost frames: docs/unwinding.md).
    pub fn record_env(
        &self,
        env: &[(&str, &str)],
        args: &[&str],
        workload: &[&str],
    ) -> (Vec<u8>, String) {
        let out = self
            .command()
            .envs(env.iter().copied())
            .arg("record")
            .args(args)
            .args(["-o", "-", "--"])
            .args(workload)
            .stdin(Stdio::null())
            .output()
            .expect("perf record");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "{} record {args:?} failed: {err}",
            self.name
        );
        assert!(out.stdout.len() > 16, "{} record wrote nothing", self.name);
        (out.stdout, err)
    }

    /// `perf record -q ARGS -o FILE -- WORKLOAD…`: a file-mode recording.
    pub fn record_file(&self, file: &Path, args: &[&str], workload: &[&str]) {
        let out = self
            .command()
            .args(["record", "-q", "-o"])
            .arg(file)
            .args(args)
            .arg("--")
            .args(workload)
            .stdin(Stdio::null())
            .output()
            .expect("perf record");
        assert!(
            out.status.success(),
            "{} record -o {} {args:?}: {}",
            self.name,
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The name oracle: the system perf (Debian 12's 6.1), the `perf` on `PATH`.
pub fn oracle() -> Perf {
    Perf {
        name: "perf 6.1",
        program: PathBuf::from("perf"),
    }
}

/// Debian's perf 6.12, which a test that calls this needs ([`require`]s [`Need::Perf612`]).
pub fn perf612() -> Perf {
    require(Need::Perf612);
    Perf {
        name: "perf 6.12",
        program: crate::needs::perf612_program(),
    }
}

/// perf 7.x of the trixie root, run on this machine's files through the root's loader (the
/// wrapper `.ci/trixie-root` writes); a test that calls this needs [`Need::Trixie`].
pub fn perf7() -> Perf {
    require(Need::Trixie);
    Perf {
        name: "perf 7",
        program: crate::needs::perf7_program(),
    }
}

/// A command that runs `args` inside the trixie root ([`crate::needs::trixie_root`]): in a
/// private mount namespace of its own, with the host's `/proc`, `/sys` and `/dev` bound into the
/// root only there, so no bound `/proc` is ever left under a directory of the host.
pub fn in_trixie(args: &[&str]) -> Command {
    require(Need::Trixie);
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(
            "r=$1; shift; for m in proc sys dev; do mount --rbind /$m $r/$m || exit 125; done; \
             exec chroot \"$r\" \"$@\"",
        )
        .arg("sh")
        .arg(crate::needs::trixie_root())
        .args(args);
    cmd
}

/// Every reader: the oracle, perf 6.12 and perf 7.x (a test that calls this needs all three:
/// `needs(perf, perf612 ..)`).
pub fn readers() -> [Perf; 3] {
    [oracle(), perf612(), perf7()]
}

/// Runs the oracle's `perf ARGS -i -` on `input`, asserting success; returns stdout.
pub fn perf_on(args: &[&str], input: &[u8]) -> String {
    oracle().on(args, input)
}

/// The oracle's `perf script` output of a stream.
pub fn perf_script(input: &[u8]) -> String {
    oracle().script(input)
}

/// Records the oracle's `perf record ARGS -o - -- WORKLOAD…` and returns the pipe stream.
pub fn perf_record(args: &[&str], workload: &[&str]) -> Vec<u8> {
    oracle().record(args, workload)
}

/// How many times [`record_until`] records at most: the workload does `2^(ROUNDS-1)` = 32 times
/// the first round's work in the last.
pub const RECORD_ROUNDS: u32 = 6;

/// Records until the recording has what the test needs, never for a time: `record(round)` makes
/// a recording whose workload does `2^round` times the work of round 0 (the test's choice of a
/// work count, doubled each round), and `lacks(&recording)` says what it still lacks (`None` once
/// it has everything). Returns the first recording that lacks nothing, with the round it took.
/// A sampled event that counts the workload's own CPU time gives samples in proportion to the
/// work done, whatever else runs on the machine; the rounds are for what a busy machine can still
/// take away (a sample rate the kernel throttles, an unlucky phase of a short loop).
///
/// # Panics
///
/// After [`RECORD_ROUNDS`] recordings that all lack something, naming what the last one lacked.
pub fn record_until(
    mut record: impl FnMut(u32) -> Vec<u8>,
    lacks: impl Fn(&[u8]) -> Option<String>,
) -> (Vec<u8>, u32) {
    let mut last = String::new();
    for round in 0..RECORD_ROUNDS {
        let rec = record(round);
        match lacks(&rec) {
            None => return (rec, round),
            Some(why) => {
                eprintln!("record_until: round {round} lacks {why}; recording twice the work");
                last = why;
            }
        }
    }
    panic!("{RECORD_ROUNDS} recordings, each of twice the work of the one before, all lack {last}")
}

/// [`perf_record`], with perf's standard error (where the workload's own goes too).
pub fn perf_record_err(args: &[&str], workload: &[&str]) -> (Vec<u8>, String) {
    oracle().record_err(args, workload)
}

/// The fixtures' workload script (`single` or `multi`), for live recordings.
pub fn workload() -> String {
    fixture("workload.sh").to_string_lossy().into_owned()
}

/// Sample lines of `perf script` output, for comparing what two streams contain.
pub fn count_samples(script: &str) -> usize {
    script
        .lines()
        .filter(|l| !l.contains("PERF_RECORD_") && !l.trim().is_empty())
        .count()
}

/// The callgraph fixture with its records repeated `times` more times after the first copy.
pub fn big_stream(times: usize) -> Vec<u8> {
    let input = fixture_bytes("callgraph.pipe.data");
    let mut big = input.clone();
    for _ in 0..times {
        big.extend_from_slice(&input[16..]);
    }
    big
}

/// Headless Chromium with the flags that let it run as root on a machine with no network, a
/// window of `width`×`height` and a profile in `dir`; add `--dump-dom URL` or `--screenshot=PNG URL`.
pub fn chromium(dir: &Dir, width: u32, height: u32) -> Command {
    let mut cmd = Command::new("chromium");
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        &format!("--window-size={width},{height}"),
        &format!("--user-data-dir={}", dir.path("chromium").display()),
    ]);
    cmd
}

/// Starts perfpipe with `args`, its three standard streams piped.
pub fn spawn(args: &[&str]) -> Child {
    Command::new(bin())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Sends `sig` to a child once it catches `sig` ([`await_handler`]): sent before the handler is
/// installed, SIGINT, SIGTERM or SIGUSR2 would kill it.
pub fn signal(child: &Child, sig: libc::c_int) {
    await_handler(child.id(), sig);
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0);
}

/// Waits, at most 30 s, until process `pid` catches `sig`: bit `sig - 1` of `SigCgt` in
/// `/proc/PID/status`, which the kernel sets when the handler is installed.
///
/// # Panics
///
/// When the process is gone or has not installed the handler in time.
pub fn await_handler(pid: u32, sig: libc::c_int) {
    let t0 = Instant::now();
    loop {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_else(|e| panic!("process {pid} is gone: {e}"));
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
                .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
        };
        let caught = u64::from_str_radix(field("SigCgt:"), 16).expect("SigCgt is hex");
        if caught >> (sig - 1) & 1 == 1 {
            return;
        }
        let state = field("State:");
        assert!(
            !state.starts_with('Z') && !state.starts_with('X'),
            "process {pid} exited before catching signal {sig}"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "process {pid} does not catch signal {sig} after 30 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What a [`Watch`] has read so far, and whether the stream has ended.
type Seen = (Mutex<(Vec<u8>, bool)>, Condvar);

/// A child's output stream, read on a thread, so a test can wait for a line while it runs.
#[derive(Debug)]
pub struct Watch {
    state: Arc<Seen>,
    thread: std::thread::JoinHandle<()>,
}

impl Watch {
    /// Starts reading `stream` to its end.
    pub fn new(mut stream: impl Read + Send + 'static) -> Watch {
        let state = Arc::new((Mutex::new((Vec::new(), false)), Condvar::new()));
        let thread = std::thread::spawn({
            let state = state.clone();
            move || {
                let mut buf = [0u8; 4096];
                loop {
                    let n = stream.read(&mut buf).unwrap_or(0);
                    let mut text = state.0.lock().unwrap();
                    text.0.extend_from_slice(&buf[..n]);
                    text.1 = n == 0;
                    state.1.notify_all();
                    if n == 0 {
                        return;
                    }
                }
            }
        });
        Watch { state, thread }
    }

    /// Waits, at most 30 s, until what was read contains the text `needle`.
    ///
    /// # Panics
    ///
    /// When the stream ends or the time is up first.
    pub fn wait_for(&self, needle: &str) {
        self.wait_until(needle, |text| text.contains(needle));
    }

    /// Waits, at most 30 s, until what was read satisfies `done` (`what` says what it waits for).
    ///
    /// # Panics
    ///
    /// When the stream ends or the time is up first.
    pub fn wait_until(&self, what: &str, done: impl Fn(&str) -> bool) {
        let t0 = Instant::now();
        let mut got = self.state.0.lock().unwrap();
        loop {
            let text = String::from_utf8_lossy(&got.0).into_owned();
            if done(&text) {
                return;
            }
            assert!(!got.1, "the stream ended without {what}: {text}");
            let left = Duration::from_secs(30).checked_sub(t0.elapsed());
            let left = left.unwrap_or_else(|| panic!("no {what} after 30 s: {text}"));
            got = self.state.1.wait_timeout(got, left).unwrap().0;
        }
    }

    /// Everything the stream held, once it has ended.
    pub fn finish(self) -> Vec<u8> {
        self.thread.join().expect("reader thread");
        std::mem::take(&mut self.state.0.lock().unwrap().0)
    }

    /// [`Watch::finish`], as text.
    pub fn finish_text(self) -> String {
        String::from_utf8_lossy(&self.finish()).into_owned()
    }
}

/// `VmHWM` (peak RSS) of a live process, in bytes.
pub fn vm_hwm(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmHWM");
    kb * 1024
}

/// The value of counter `name` in a `--stats` table (`name = N` on a line of its own).
///
/// # Panics
/// When the table has no such counter.
pub fn counter(stats: &str, name: &str) -> u64 {
    counter_rows(stats, name)
        .first()
        .copied()
        .unwrap_or_else(|| panic!("no counter {name} in:\n{stats}"))
}

/// Every value of counter `name` in a `--stats` table, one per stage row that has it.
pub fn counter_rows(stats: &str, name: &str) -> Vec<u64> {
    stats
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix(name)?
                .trim()
                .strip_prefix("= ")?
                .parse()
                .ok()
        })
        .collect()
}

/// The rows DuckDB (Python) gives for `sql`, one line each, values joined by `|`.
///
/// # Panics
/// When the query fails.
pub fn duckdb(sql: &str) -> String {
    let script = format!(
        "import duckdb\nfor row in duckdb.sql({sql:?}).fetchall():\n    print('|'.join(str(v) for v in row))\n"
    );
    let o = Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// A little-endian record header of type `ty` and size `size`, zero-filled to its size (at least
/// the 8-byte header): for streams made by hand, malformed on purpose.
pub fn raw_record(ty: u32, size: u16) -> Vec<u8> {
    let mut r = ty.to_le_bytes().to_vec();
    r.extend_from_slice(&0u16.to_le_bytes());
    r.extend_from_slice(&size.to_le_bytes());
    r.resize(usize::from(size).max(8), 0);
    r
}

/// The GNU build id of the file at `path`, in hex (by `readelf -n`), if it has one.
pub fn build_id_hex(path: &Path) -> Option<String> {
    let out = Command::new("readelf").arg("-n").arg(path).output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
}

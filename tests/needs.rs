//! What some tests need from the machine (perf, perf 6.12, a C compiler, mounting, tracefs, a
//! pseudo-terminal, debuginfod, a TLS terminator, a UTS namespace, Spark…), and the harness that
//! runs the integration tests (`tests/tests.rs`, `harness = false`): libtest's command line, output
//! and summary line (`libtest-mimic`), with each need probed when the tests run, never when they
//! are built.
//!
//! - A test declares what it needs: `pipetest!(needs(perf, cc) name, |dir| ..)` (tests/util.rs)
//!   registers it ([`Test`], collected by `inventory`) with its needs.
//! - When a test is about to run, each of its needs is probed, once per run of the binary
//!   ([`missing`]). A missing one makes the test *ignored* with the probe's reason (`test x ...
//!   ignored (needs perf (`perf --version` runs): `perf` is not on PATH)`), counted in the summary
//!   (`test result: ok. N passed; 0 failed; M ignored`).
//! - Under `CI` (set to anything but empty, `0` or `false`) the test runs all the same and fails
//!   with that reason, first thing: CI runs every test.
//! - Installing a tool, or gaining a privilege, is noticed by the next run: nothing is cached
//!   between runs, and nothing is probed by a build script (building the binary probes nothing).
//!
//! A test never returns early, and no test is a plain `#[test]` (that attribute is silently
//! dropped by a `harness = false` binary; `skipping::no_test_is_a_plain_test_fn` holds it).
//!
//! A new need: a [`Need`] variant, its line in [`Need::ALL`], [`Need::what`], [`Need::probe`] and
//! [`named`] (the lower-case name `pipetest!(needs(..))` takes), and its install in `.ci/run`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::OnceLock;

/// Something a test needs from the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// The real `perf`, the tests' oracle.
    Perf,
    /// Debian's perf 6.12 (bookworm-backports' `linux-perf`), unpacked beside the system perf by
    /// `.ci/run`: the second reader of what we write ([`perf612_program`]).
    Perf612,
    /// A C compiler (`cc`), for workloads compiled by the tests.
    Cc,
    /// Mounting a tmpfs (root, or `CAP_SYS_ADMIN`), in a mount namespace of its own or not.
    Mount,
    /// Tracepoints (`-e sched:…`): tracefs mounted, or mountable.
    Tracefs,
    /// util-linux `script`, for a pseudo-terminal.
    Script,
    /// The Go toolchain, for `go tool pprof` (Debian `golang-go`).
    Go,
    /// DuckDB's Python package (PyPI `duckdb`), to query our Parquet output.
    Duckdb,
    /// inferno's `inferno-collapse-perf` and `inferno-flamegraph`, the folded-stack oracle, and
    /// `inferno-diff-folded`, the diff's (`cargo install inferno --locked`).
    Inferno,
    /// Debian's `chromium`, a headless browser that renders our flame graphs.
    Chromium,
    /// elfutils' `debuginfod` server (Debian `debuginfod`), which the symbol-source tests start
    /// on loopback.
    Debuginfod,
    /// A TLS terminator and a CA to make its certificates (Debian `socat` and `openssl`), which
    /// the https debuginfod test puts in front of `debuginfod`.
    Tls,
    /// A UTS namespace of its own with another hostname (`unshare --uts`; root), to record as
    /// another host.
    Uts,
    /// Spark: PyPI's `pyspark` and a Java runtime for it (Debian `openjdk-17-jre-headless`).
    Spark,
    /// The Debian trixie root that `.ci/trixie-root` makes ([`trixie_root`]): another machine's
    /// userland (glibc 2.41 beside bookworm's 2.36) with perf 7.x from trixie-backports in it, and
    /// the wrapper that runs that perf on this machine's files ([`perf7_program`]).
    Trixie,
    /// The OpenTelemetry protobuf bindings for Python (PyPI `opentelemetry-proto`), the
    /// independent decoder of our OTLP profiles.
    OtelProto,
}

impl Need {
    /// Every need.
    pub const ALL: [Need; 16] = [
        Need::Perf,
        Need::Perf612,
        Need::Cc,
        Need::Mount,
        Need::Tracefs,
        Need::Script,
        Need::Go,
        Need::Duckdb,
        Need::Inferno,
        Need::Chromium,
        Need::Debuginfod,
        Need::Tls,
        Need::Uts,
        Need::Spark,
        Need::Trixie,
        Need::OtelProto,
    ];

    /// What it is, for messages.
    pub fn what(self) -> &'static str {
        match self {
            Need::Perf => "perf (`perf --version` runs)",
            Need::Perf612 => {
                "perf 6.12 (`$PERF_612 --version` says 6.12; `.ci/run` unpacks Debian's \
                 bookworm-backports linux-perf to /opt/perf-6.12)"
            }
            Need::Cc => "a C compiler (`cc`)",
            Need::Mount => "mounting a tmpfs (`unshare --mount`, `mount`; root)",
            Need::Tracefs => "tracefs (/sys/kernel/tracing, mounted or mountable)",
            Need::Script => "util-linux `script` (a pseudo-terminal)",
            Need::Go => "the Go toolchain (`go tool pprof`; Debian golang-go)",
            Need::Duckdb => "DuckDB for Python (`python3 -c 'import duckdb'`; PyPI duckdb)",
            Need::OtelProto => {
                "OpenTelemetry's protobuf bindings for Python (`python3 -c 'import \
                 opentelemetry.proto.profiles.v1development.profiles_pb2'`; PyPI opentelemetry-proto)"
            }
            Need::Inferno => {
                "inferno-collapse-perf, inferno-flamegraph and inferno-diff-folded (`cargo install inferno --locked`)"
            }
            Need::Chromium => "a headless browser (`chromium --version` runs; Debian chromium)",
            Need::Debuginfod => {
                "elfutils' debuginfod server (`debuginfod --version`; Debian debuginfod)"
            }
            Need::Tls => "socat and openssl (`socat -V`, `openssl version`; Debian socat, openssl)",
            Need::Uts => "a UTS namespace (`unshare --uts hostname NAME`; root)",
            Need::Spark => {
                "Spark (`python3 -c 'import pyspark'`, PyPI pyspark; `java -version`, Debian \
                 openjdk-17-jre-headless)"
            }
            Need::Trixie => {
                "the trixie root with perf 7.x (`.ci/trixie-root` makes it at $PERFPIPE_TRIXIE, \
                 else /var/cache/perfpipe/trixie)"
            }
        }
    }

    /// Probes for it now, with this process's `PATH` and privileges: `Err(why)` if it is missing.
    /// Side-effect free: a mount is tried inside a private mount namespace that ends with it.
    pub fn probe(self) -> Result<(), String> {
        match self {
            Need::Perf => runs("perf", &["--version"]),
            Need::Perf612 => {
                let prog = perf612_program().to_string_lossy().into_owned();
                runs(&prog, &["--version"])?;
                let out = Command::new(&prog).arg("--version").output();
                let says = out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
                match says {
                    Ok(v) if v.starts_with("perf version 6.12.") => Ok(()),
                    Ok(v) => Err(format!("`{prog} --version` says {v:?}, not 6.12")),
                    Err(e) => Err(format!("`{prog}`: {e}")),
                }
            }
            Need::Cc => runs("cc", &["--version"]),
            Need::Script => runs("script", &["--version"]),
            Need::Go => runs("go", &["version"]),
            Need::Duckdb => runs("python3", &["-c", "import duckdb"]),
            Need::OtelProto => runs(
                "python3",
                &[
                    "-c",
                    "import opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2",
                ],
            ),
            Need::Inferno => runs("inferno-collapse-perf", &["--help"])
                .and_then(|()| runs("inferno-flamegraph", &["--help"]))
                .and_then(|()| runs("inferno-diff-folded", &["--help"])),
            Need::Chromium => runs("chromium", &["--version"]),
            Need::Debuginfod => runs("debuginfod", &["--version"]),
            Need::Tls => runs("socat", &["-V"]).and_then(|()| runs("openssl", &["version"])),
            Need::Uts => runs("unshare", &["--uts", "hostname", "perfpipe-probe"]),
            Need::Spark => runs("java", &["-version"])
                .and_then(|()| runs("python3", &["-c", "import pyspark"])),
            Need::Trixie => {
                let prog = perf7_program().to_string_lossy().into_owned();
                let out = Command::new(&prog).arg("--version").output();
                let says = out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
                match says {
                    Ok(v) if v.starts_with("perf version 7.") => {
                        let root = trixie_root();
                        let libc = root.join("usr/lib/x86_64-linux-gnu/libc.so.6");
                        if libc.exists() {
                            Need::Mount.probe()
                        } else {
                            Err(format!("{} is missing", libc.display()))
                        }
                    }
                    Ok(v) => Err(format!("`{prog} --version` says {v:?}, not 7.x")),
                    Err(e) => Err(format!("`{prog}`: {e}")),
                }
            }
            Need::Mount => {
                let at = std::env::temp_dir().to_string_lossy().into_owned();
                let args = [
                    "--mount",
                    "--propagation",
                    "private",
                    "mount",
                    "-t",
                    "tmpfs",
                ];
                runs(
                    "unshare",
                    &[&args[..], &["-o", "size=64k", "tmpfs", &at]].concat(),
                )
            }
            Need::Tracefs if Path::new(TRACEFS_SCHED).exists() => Ok(()),
            Need::Tracefs => Need::Mount
                .probe()
                .map_err(|e| format!("{TRACEFS_SCHED} is missing and cannot be mounted: {e}")),
        }
    }
}

/// Each need by the lower-case name `pipetest!(needs(..))` takes: `needs(perf, cc)` is
/// [`Need::Perf`] and [`Need::Cc`].
#[allow(non_upper_case_globals)]
pub mod named {
    use super::Need;
    pub const perf: Need = Need::Perf;
    pub const perf612: Need = Need::Perf612;
    pub const cc: Need = Need::Cc;
    pub const mount: Need = Need::Mount;
    pub const tracefs: Need = Need::Tracefs;
    pub const script: Need = Need::Script;
    pub const go: Need = Need::Go;
    pub const duckdb: Need = Need::Duckdb;
    pub const inferno: Need = Need::Inferno;
    pub const chromium: Need = Need::Chromium;
    pub const debuginfod: Need = Need::Debuginfod;
    pub const tls: Need = Need::Tls;
    pub const uts: Need = Need::Uts;
    pub const spark: Need = Need::Spark;
    pub const trixie: Need = Need::Trixie;
    pub const otelproto: Need = Need::OtelProto;
}

/// Where `.ci/run` unpacks perf 6.12, and the tests look for it when `PERF_612` is not set: a
/// wrapper script that runs its `usr/bin/perf` with its own libraries and helpers.
pub const PERF_612_DEFAULT: &str = "/opt/perf-6.12/perf";

/// The perf 6.12 program: `PERF_612`, else [`PERF_612_DEFAULT`].
pub fn perf612_program() -> PathBuf {
    std::env::var_os("PERF_612")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(PERF_612_DEFAULT), PathBuf::from)
}

/// Where `.ci/trixie-root` makes the trixie root when `PERFPIPE_TRIXIE` is not set.
pub const TRIXIE_DEFAULT: &str = "/var/cache/perfpipe/trixie";

/// The trixie root: `PERFPIPE_TRIXIE`, else [`TRIXIE_DEFAULT`]. Its mounts are made only inside
/// private mount namespaces (`util::in_trixie`), never left on the host.
pub fn trixie_root() -> PathBuf {
    std::env::var_os("PERFPIPE_TRIXIE")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(TRIXIE_DEFAULT), PathBuf::from)
}

/// The wrapper `.ci/trixie-root` writes beside the root (`ROOT.perf7`): the root's perf 7.x run
/// on this machine's files through the root's own loader and libraries.
pub fn perf7_program() -> PathBuf {
    let mut p = trixie_root().into_os_string();
    p.push(".perf7");
    PathBuf::from(p)
}

/// Where tracepoint recordings look for the sched events.
pub const TRACEFS_SCHED: &str = "/sys/kernel/tracing/events/sched";

/// Runs `prog args`, quietly: `Err` with what went wrong unless it exits 0.
fn runs(prog: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    match out {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(format!("`{prog}` is not on PATH"))
        }
        Err(e) => Err(format!("`{prog}`: {e}")),
        Ok(o) if !o.status.success() => {
            let err = String::from_utf8_lossy(&o.stderr);
            let first = err.lines().next().unwrap_or("").trim();
            Err(format!(
                "`{prog} {}` failed ({}): {first}",
                args.join(" "),
                o.status
            ))
        }
        Ok(_) => Ok(()),
    }
}

/// Whether `CI` (its value) asks for a missing need to fail: set to anything but empty, `0` or
/// `false`.
pub fn is_ci(value: Option<&OsStr>) -> bool {
    value.is_some_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// Whether `need` is missing on this machine now: `Some(why)` if it is. Probed once per run of
/// the test binary (the first test that needs it waits for the probe); for [`Need::Tracefs`],
/// mounting tracefs is tried first.
pub fn missing(need: Need) -> Option<&'static str> {
    static PROBED: [OnceLock<Result<(), String>>; Need::ALL.len()] =
        [const { OnceLock::new() }; Need::ALL.len()];
    let at = Need::ALL
        .iter()
        .position(|&n| n == need)
        .expect("in Need::ALL");
    let result = PROBED[at].get_or_init(|| {
        if need == Need::Tracefs && !Path::new(TRACEFS_SCHED).exists() {
            let _ = Command::new("mount")
                .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        need.probe()
    });
    result.as_ref().err().map(String::as_str)
}

/// Why a test whose needs are `missing` (each with the probe's answer) cannot run, in one line:
/// its reason to be ignored, or under `CI` its failure. `None` when nothing is missing.
pub fn verdict(missing: &[(Need, &str)]) -> Option<String> {
    let reasons: Vec<String> = missing
        .iter()
        .map(|(need, why)| format!("needs {}: {why}", need.what()))
        .collect();
    (!reasons.is_empty()).then(|| reasons.join("; "))
}

/// Fails the calling test unless `need` is there: for a helper that needs something (a test's
/// declared needs are checked before it starts; this makes a forgotten declaration a failure that
/// names the need, never a pass).
///
/// # Panics
///
/// When the need is missing, with the probe's reason.
pub fn require(need: Need) {
    if let Some(why) = missing(need) {
        panic!("needs {}: {why}", need.what());
    }
}

/// One test of a `harness = false` binary: its path (`module::name`), its needs and its body.
/// `pipetest!` submits one per test; [`main`] runs every one submitted.
#[derive(Debug)]
pub struct Test {
    /// `module_path!()` where it is declared: the crate's name, then its modules.
    pub module: &'static str,
    /// Its function's name.
    pub name: &'static str,
    /// What it needs from the machine.
    pub needs: &'static [Need],
    /// The test: passes unless it panics.
    pub run: fn(),
}

inventory::collect!(Test);

impl Test {
    /// Its name as libtest prints and filters it: the module path below the crate, then the
    /// function (`fold::system_wide`).
    pub fn path(&self) -> String {
        match self.module.split_once("::") {
            Some((_crate, below)) => format!("{below}::{}", self.name),
            None => self.name.to_string(),
        }
    }

    /// The trial that runs it: its needs probed first (a missing one: ignored, or under `CI` a
    /// failure), then its body.
    fn trial(&self, ci: bool) -> libtest_mimic::Trial {
        let (needs, run) = (self.needs, self.run);
        libtest_mimic::Trial::ignorable_test(self.path(), move || {
            let gone: Vec<(Need, &str)> = needs
                .iter()
                .filter_map(|&n| missing(n).map(|why| (n, why)))
                .collect();
            match verdict(&gone) {
                Some(why) if ci => Err(format!("{why} (CI is set: a missing need fails)").into()),
                Some(why) => Ok(libtest_mimic::Completion::ignored_with(why)),
                None => {
                    run();
                    Ok(libtest_mimic::Completion::Completed)
                }
            }
        })
    }
}

/// Runs every submitted [`Test`] as libtest would (its arguments: filters, `--exact`, `--list`,
/// `--test-threads`, `--ignored`, …), in name order.
pub fn main() -> ExitCode {
    let (filters, rest) = filters(std::env::args().collect());
    let mut args = libtest_mimic::Arguments::from_iter(rest);
    // libtest's variable for --test-threads, which libtest-mimic does not read.
    if args.test_threads.is_none() {
        args.test_threads = std::env::var("RUST_TEST_THREADS")
            .ok()
            .and_then(|n| n.parse().ok());
    }
    let ci = is_ci(std::env::var_os("CI").as_deref());
    let mut tests: Vec<&Test> = inventory::iter::<Test>.into_iter().collect();
    tests.sort_by_key(|t| t.path());
    // libtest takes any number of filters (a test runs if it matches one); libtest-mimic takes
    // one: with more, they are applied here.
    let mut filtered_out = 0;
    match &filters[..] {
        [] => {}
        [one] => args.filter = Some(one.clone()),
        many => {
            let before = tests.len();
            tests.retain(|t| {
                let path = t.path();
                many.iter().any(|f| {
                    if args.exact {
                        path == *f
                    } else {
                        path.contains(f.as_str())
                    }
                })
            });
            filtered_out = before - tests.len();
        }
    }
    let trials = tests.iter().map(|t| t.trial(ci)).collect();
    let conclusion = libtest_mimic::run(&args, trials);
    if filtered_out > 0 && !args.list {
        println!("({filtered_out} more filtered out by the filters)");
    }
    conclusion.exit_code()
}

/// The filters (libtest's positional arguments) of a test binary's command line `argv`, and the
/// command line without them.
fn filters(argv: Vec<String>) -> (Vec<String>, Vec<String>) {
    const TAKE_A_VALUE: [&str; 6] = [
        "--test-threads",
        "--skip",
        "--logfile",
        "--color",
        "--format",
        "-Z",
    ];
    let mut rest = Vec::new();
    let mut filters = Vec::new();
    let mut args = argv.into_iter();
    rest.extend(args.next());
    while let Some(a) = args.next() {
        if TAKE_A_VALUE.contains(&a.as_str()) {
            rest.push(a);
            rest.extend(args.next());
        } else if a.starts_with('-') {
            rest.push(a);
        } else {
            filters.push(a);
        }
    }
    (filters, rest)
}

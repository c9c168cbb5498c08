//! What some tests need from the machine (perf, perf 6.12, a C compiler, mounting, tracefs, a
//! pseudo-terminal, debuginfod, a TLS terminator, a UTS namespace, Spark…),
//! and how a missing need shows: as a skip that libtest prints and counts, or, under `CI`, as a
//! failure. A test never returns early.
//!
//! One file for the build scripts (`cli/build.rs` for the integration tests, `stream/build.rs`,
//! `profile/build.rs` and `examples/redact/build.rs` include it) and the tests:
//!
//! - The build script probes each need of its package ([`build_script`]). A missing one sets the
//!   cfg `skip_<need>` ([`Need::cfg`]) and prints a build warning with the probe's reason. The tests
//!   that need it carry `#[cfg_attr(skip_perf, ignore = "needs perf …")]`, so libtest prints
//!   `test x ... ignored, needs perf …` and counts them (`test result: ok. N passed; 0 failed;
//!   M ignored`).
//! - Under `CI` (set to anything but empty, `0` or `false`) no `skip_*` cfg is set: those tests run,
//!   and [`require`], which each calls first, fails them with the probe's reason.
//! - A build script reruns when `CI` or `PATH` changes, when a program it found changes or goes,
//!   and, for a program it did not find, when any directory on `PATH` changes: installing perf is
//!   noticed by the next `cargo test`. Privileges (mounting) are probed when it runs; after
//!   changing them, `touch cli/build.rs`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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
    /// inferno's `inferno-collapse-perf` and `inferno-flamegraph`, the folded-stack oracle
    /// (`cargo install inferno --locked`).
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
    /// Every need, for the cfgs a build script declares.
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

    /// The cfg a build script sets when this need is missing and `CI` is not set.
    pub fn cfg(self) -> &'static str {
        match self {
            Need::Perf => "skip_perf",
            Need::Perf612 => "skip_perf612",
            Need::Cc => "skip_cc",
            Need::Mount => "skip_mount",
            Need::Tracefs => "skip_tracefs",
            Need::Script => "skip_script",
            Need::Go => "skip_go",
            Need::Duckdb => "skip_duckdb",
            Need::Inferno => "skip_inferno",
            Need::Chromium => "skip_chromium",
            Need::Debuginfod => "skip_debuginfod",
            Need::Tls => "skip_tls",
            Need::Uts => "skip_uts",
            Need::Spark => "skip_spark",
            Need::Trixie => "skip_trixie",
            Need::OtelProto => "skip_otelproto",
        }
    }

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
                "inferno-collapse-perf and inferno-flamegraph (`cargo install inferno --locked`)"
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

    /// The programs its probe runs.
    fn programs(self) -> &'static [&'static str] {
        match self {
            Need::Perf => &["perf"],
            // Not looked up on PATH: see `rerun_lines`.
            Need::Perf612 => &[],
            Need::Cc => &["cc"],
            Need::Mount | Need::Tracefs => &["unshare", "mount"],
            Need::Script => &["script"],
            Need::Go => &["go"],
            Need::Duckdb | Need::OtelProto => &["python3"],
            Need::Inferno => &["inferno-collapse-perf", "inferno-flamegraph"],
            Need::Chromium => &["chromium"],
            Need::Debuginfod => &["debuginfod"],
            Need::Tls => &["socat", "openssl"],
            Need::Uts => &["unshare", "hostname"],
            Need::Spark => &["python3", "java"],
            // Not looked up on PATH: see `rerun_lines`.
            Need::Trixie => &["unshare", "chroot"],
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
                .and_then(|()| runs("inferno-flamegraph", &["--help"])),
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

/// What a build script tells cargo about `probed` (each need with its probe's result): the
/// declaration of every `skip_*` cfg, one `skip_*` cfg per missing need unless `ci`, and a warning
/// per missing need that says which it is (a skip, or under `CI` a failure to come).
pub fn build_lines(ci: bool, probed: &[(Need, Result<(), String>)]) -> Vec<String> {
    let names: Vec<&str> = Need::ALL.iter().map(|n| n.cfg()).collect();
    let mut lines = vec![format!("cargo::rustc-check-cfg=cfg({})", names.join(", "))];
    for (need, result) in probed {
        let Err(why) = result else { continue };
        if ci {
            lines.push(format!(
                "cargo::warning=CI is set: the tests that need {} will fail: {why}",
                need.what()
            ));
        } else {
            lines.push(format!("cargo::rustc-cfg={}", need.cfg()));
            lines.push(format!(
                "cargo::warning=the tests that need {} are ignored (set CI=1 to fail them \
                 instead): {why}",
                need.what()
            ));
        }
    }
    lines
}

/// The rerun rules for `needs` under `path` (the value of `PATH`): `CI` and `PATH` themselves,
/// each program found (its file), and for a program not found every directory on `PATH`, so
/// that installing it is noticed. Perf 6.12 is not on `PATH`: `PERF_612`, and its program's file
/// or, while that is missing, the closest directory above it that exists.
pub fn rerun_lines(needs: &[Need], path: &OsStr) -> Vec<String> {
    let mut lines = vec![
        "cargo::rerun-if-env-changed=CI".to_string(),
        "cargo::rerun-if-env-changed=PATH".to_string(),
    ];
    let dirs: Vec<PathBuf> = std::env::split_paths(path)
        .filter(|d| d.is_absolute() && d.is_dir())
        .collect();
    let mut watched = Vec::new();
    for prog in needs.iter().flat_map(|n| n.programs()) {
        match dirs.iter().map(|d| d.join(prog)).find(|p| p.is_file()) {
            Some(found) => watched.push(found),
            None => watched.extend(dirs.iter().cloned()),
        }
    }
    if needs.contains(&Need::Perf612) {
        lines.push("cargo::rerun-if-env-changed=PERF_612".to_string());
        let prog = perf612_program();
        if let Some(at) = prog.ancestors().find(|p| p.exists()) {
            watched.push(at.to_path_buf());
        }
    }
    if needs.contains(&Need::Trixie) {
        lines.push("cargo::rerun-if-env-changed=PERFPIPE_TRIXIE".to_string());
    }
    watched.sort();
    watched.dedup();
    lines.extend(
        watched
            .iter()
            .map(|p| format!("cargo::rerun-if-changed={}", p.display())),
    );
    lines
}

/// The whole build script of a package whose tests have `needs`.
pub fn build_script(needs: &[Need]) {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let ci = is_ci(std::env::var_os("CI").as_deref());
    let probed: Vec<(Need, Result<(), String>)> = needs.iter().map(|&n| (n, n.probe())).collect();
    // The script and this file too: once a script names one file, cargo reruns it only for the
    // files it names, and a need added here would leave the cfgs declared by the last run.
    println!("cargo::rerun-if-changed=build.rs");
    if let Some(dir) = std::env::var_os("CARGO_MANIFEST_DIR") {
        let this = Path::new(&dir).join("../tests/needs.rs");
        println!("cargo::rerun-if-changed={}", this.display());
    }
    for line in rerun_lines(needs, &path)
        .into_iter()
        .chain(build_lines(ci, &probed))
    {
        println!("{line}");
    }
}

/// Fails the calling test unless `need` is there (mounting tracefs first, for [`Need::Tracefs`]).
/// Called first by every test that has a need, under its `#[cfg_attr(skip_…, ignore = …)]`: such
/// a test runs only when its need was there at build time, or under `CI`.
///
/// # Panics
///
/// When the need is missing, with the probe's reason.
pub fn require(need: Need) {
    if need == Need::Tracefs && !Path::new(TRACEFS_SCHED).exists() {
        let _ = Command::new("mount")
            .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
            .status();
    }
    if let Err(why) = need.probe() {
        let ci = is_ci(std::env::var_os("CI").as_deref());
        let then = if ci {
            "CI is set, so a missing need fails the test"
        } else {
            "it was there when this test binary was built; rebuild to skip the tests that need it"
        };
        panic!("needs {}: {why} ({then})", need.what());
    }
}

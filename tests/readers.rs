//! The reader check: every perf that must read what we write in perf's format
//! ([`readers`](crate::util::readers): the system perf 6.1, Debian's 6.12 and perf 7.x) reads our
//! output as it reads the input, and a check of the check (a reader that rejects a broken header
//! fails it).
//!
//! A reader *rejects* a stream or a file when it exits non-zero or says it could not process a
//! record: `perf report --stats` exits 0 after "failed to process type: 64" (6.1 and 6.12; 7.x
//! after "piped event processing failed"), so the exit status alone would pass a stream no perf
//! can read. Harmless warnings are no rejection: perf 7.x's `Invalid HEADER_CPU_DOMAIN_INFO` on
//! every 6.1 or 6.12 pipe (docs/perf-versions.md). Each comparison is one reader against itself
//! (its output on the input, its output on ours): the perfs print different column widths and
//! names, which is no reading difference.

use std::collections::BTreeSet;
use std::path::Path;

use crate::util::*;

/// What a reader reads: a pipe stream on standard input, or a file.
#[derive(Clone, Copy, Debug)]
pub enum Input<'a> {
    Stream(&'a [u8]),
    File(&'a Path),
}

/// What perf says on standard error when it skipped or could not read something, exit 0 or not.
const REJECTIONS: [&str; 6] = [
    "failed to process",
    // perf 7.x: "piped event processing failed for event of type: ATTR (64)".
    "event processing failed",
    "Couldn't",
    "Error:",
    "incompatible file format",
    "bad event header",
];

/// `perf ARGS -i -|FILE` with `perf`: its standard output, or why it rejected the input.
///
/// # Errors
///
/// When perf exits non-zero or its standard error has one of [`REJECTIONS`].
pub fn read(perf: &Perf, args: &[&str], input: Input<'_>) -> Result<String, String> {
    let out = match input {
        Input::Stream(bytes) => run(perf.command().args(args).args(["-i", "-"]), bytes),
        Input::File(file) => run(perf.command().args(args).arg("-i").arg(file), b""),
    };
    let err = String::from_utf8_lossy(&out.stderr);
    let said = REJECTIONS.iter().find(|r| err.contains(*r));
    if !out.status.success() || said.is_some() {
        return Err(format!(
            "{} {args:?} rejects it ({}): {}",
            perf.name,
            out.status,
            err.trim()
        ));
    }
    String::from_utf8(out.stdout).map_err(|e| format!("{} {args:?}: {e}", perf.name))
}

/// The SAMPLE count of `perf report --stats` (the first, aggregated, `SAMPLE events` line).
///
/// # Errors
///
/// When the reader rejects the input or counts no sample line.
pub fn samples(perf: &Perf, input: Input<'_>) -> Result<u64, String> {
    let stats = read(perf, &["report", "--stats"], input)?;
    stats
        .lines()
        .find_map(|l| {
            let n = l.trim().strip_prefix("SAMPLE events:")?;
            n.split_whitespace().next()?.parse().ok()
        })
        .ok_or_else(|| format!("{}: report --stats counts no SAMPLE:\n{stats}", perf.name))
}

/// Side-band and samples as `perf script` prints them (`--show-task-events --show-mmap-events`),
/// without inlined frames: perf 6.12 asks an `addr2line` process for them and gives up after one
/// second (`addr2line_timeout_ms`, no option in 6.12), so on a busy machine one of two runs on
/// the same data may print them and the other not. What a reader must read alike is the stream:
/// the records, their ips and the dsos and symbols they resolve to.
pub const SCRIPT: [&str; 4] = [
    "script",
    "--show-task-events",
    "--show-mmap-events",
    "--no-inline",
];

/// The reader check: `perf` reads `ours` as it reads `input`: the same `perf script` side-band
/// and samples, line for line, and `perf report --stats` accepts it with the same sample count.
/// Returns that count.
///
/// # Errors
///
/// When the reader rejects either, or sees in ours anything else than in the input.
pub fn reads_like(perf: &Perf, input: Input<'_>, ours: Input<'_>) -> Result<u64, String> {
    reads_like_with(perf, &SCRIPT, input, ours)
}

/// [`reads_like`] with `perf script` run with `script` (its `-F` fields, say).
///
/// # Errors
///
/// As [`reads_like`].
pub fn reads_like_with(
    perf: &Perf,
    script: &[&str],
    input: Input<'_>,
    ours: Input<'_>,
) -> Result<u64, String> {
    same_script(perf, script, input, ours)?;
    let (a, b) = (samples(perf, input)?, samples(perf, ours)?);
    if a != b || a == 0 {
        return Err(format!(
            "{}: report --stats counts {a} samples in the input, {b} in ours",
            perf.name
        ));
    }
    Ok(a)
}

/// `perf script` with `script` prints the same for `input` and `ours` (without `report --stats`,
/// which neither 6.1 nor 6.12 can run on a `perf record -z` pipe: "Couldn't decompress data").
/// Returns that output.
///
/// # Errors
///
/// When the reader rejects either, or prints anything else for ours.
pub fn same_script(
    perf: &Perf,
    script: &[&str],
    input: Input<'_>,
    ours: Input<'_>,
) -> Result<String, String> {
    let (want, got) = (read(perf, script, input)?, read(perf, script, ours)?);
    if want != got {
        let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
        let at = w
            .iter()
            .zip(&g)
            .position(|(a, b)| a != b)
            .unwrap_or(w.len().min(g.len()));
        return Err(format!(
            "{} script {script:?}: {} lines on the input, {} on ours; the first difference, line \
             {}:\n- {}\n+ {}",
            perf.name,
            w.len(),
            g.len(),
            at + 1,
            w.get(at).unwrap_or(&"(end)"),
            g.get(at).unwrap_or(&"(end)")
        ));
    }
    Ok(got)
}

/// [`reads_like`] with every reader; panics with every reader's reason.
pub fn assert_every_reader_reads_like(what: &str, input: Input<'_>, ours: Input<'_>) {
    assert_every_reader_reads_like_with(what, &SCRIPT, input, ours);
}

/// [`reads_like_with`] with every reader; panics with every reader's reason.
pub fn assert_every_reader_reads_like_with(
    what: &str,
    script: &[&str],
    input: Input<'_>,
    ours: Input<'_>,
) {
    let failed: Vec<String> = readers()
        .iter()
        .filter_map(|p| reads_like_with(p, script, input, ours).err())
        .collect();
    assert!(failed.is_empty(), "{what}:\n{}", failed.join("\n"));
}

/// Every reader accepts `ours` on its own (nothing to compare it with): `perf script` reads it and
/// `perf report --stats` counts its samples, the same number for every reader. Returns it.
///
/// # Panics
///
/// When a reader rejects it, or the readers count different samples.
pub fn assert_every_reader_accepts(what: &str, ours: Input<'_>) -> u64 {
    let mut counts = Vec::new();
    for perf in readers() {
        let n = read(&perf, &SCRIPT, ours)
            .and_then(|_| samples(&perf, ours))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        counts.push((perf.name, n));
    }
    assert!(
        counts.iter().all(|c| c.1 == counts[0].1 && c.1 > 0),
        "{what}: the readers count {counts:?}"
    );
    counts[0].1
}

/// `(build id, path)` pairs the reader's `perf buildid-list` lists, without the dsos it lists
/// with no id.
///
/// # Panics
///
/// When the reader rejects the input.
pub fn buildid_pairs(perf: &Perf, input: Input<'_>) -> BTreeSet<(String, String)> {
    read(perf, &["buildid-list"], input)
        .unwrap_or_else(|e| panic!("{e}"))
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (id, path) = (w.next()?, w.next()?);
            // perf 6.1 lists a vdso a sample hit under the temporary file it extracts it to, a
            // new name each run: it is `[vdso]`, whichever run listed it.
            let path = if path.starts_with("/tmp/perf-vdso.so-") {
                "[vdso]"
            } else {
                path
            };
            Some((id.to_string(), path.to_string()))
        })
        .collect()
}

/// The pipe fixture with its HEADER_ATTR's `attr.size` overwritten: a broken header.
fn broken_header() -> (Vec<u8>, Vec<u8>) {
    let good = fixture_bytes("cpu-clock.pipe.data");
    // The first record is the HEADER_ATTR (type 64); attr.size is the u32 after attr.type.
    assert_eq!(u32::from_le_bytes(good[16..20].try_into().unwrap()), 64);
    let mut bad = good.clone();
    bad[28..32].copy_from_slice(&0x4000u32.to_le_bytes());
    (good, bad)
}

pipetest!(needs(perf, perf612, trixie)
    /// The check of the check: a stream whose HEADER_ATTR is broken fails the reader check with
    /// each reader, saying why, although `perf report --stats` exits 0 on it; restored, it
    /// passes.
    a_reader_that_rejects_a_broken_header_fails_the_check, |_dir| {
    let (good, bad) = broken_header();
    for perf in readers() {
        let stats = run(perf.command().args(["report", "--stats", "-i", "-"]), &bad);
        assert!(stats.status.success(), "{}: report --stats now fails itself", perf.name);
        let err = reads_like(&perf, Input::Stream(&good), Input::Stream(&bad))
            .expect_err("the check passed a broken header");
        let said = err.contains("failed to process") || err.contains("event processing failed");
        assert!(err.contains(perf.name) && said, "{err}");
        assert!(samples(&perf, Input::Stream(&bad)).is_err(), "{}", perf.name);
        reads_like(&perf, Input::Stream(&good), Input::Stream(&good))
            .unwrap_or_else(|e| panic!("the restored header fails: {e}"));
    }
    let failed = std::panic::catch_unwind(|| {
        assert_every_reader_reads_like("broken", Input::Stream(&good), Input::Stream(&bad))
    });
    assert!(failed.is_err(), "the assertion passed a broken header");
});

/// `perf ARGS -i FILE` with the name oracle, stdout; asserts success and no processing errors.
///
/// # Panics
/// When perf fails or reports an error.
pub fn perf_file(args: &[&str], file: &std::path::Path) -> String {
    read(&crate::util::oracle(), args, Input::File(file))
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

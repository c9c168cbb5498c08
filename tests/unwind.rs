//! `--unwind` against perf's own DWARF unwinding (issue 18): live `perf record --call-graph dwarf`
//! recordings of workloads built without frame pointers, unwound by perfpipe into callchain
//! samples, and `perf script --no-inline -F comm,tid,time,ip,sym,dso` on the output compared with
//! the same on the input (where perf unwinds every sample with libunwind), by every reader (perf
//! 6.1 and 6.12, each against its own unwinding and names), sample by sample:
//! at least 99 % identical, the same number of samples, the output at most 10 % of the input's
//! bytes for the default 8 KiB stacks. `--no-inline`: perf 6.1 adds inlined frames to
//! DWARF-unwound callchains only, not to the frame-pointer-style callchains we write, so inline
//! frames are compared with them off on both sides. Every difference is printed.

use std::path::PathBuf;
use std::process::Command;

use crate::oracle::{assert_agrees, collapse};
use crate::readers::{self, Input};
use crate::util::*;

/// Share of samples whose perf script lines must be identical.
pub(crate) const MIN_IDENTICAL: f64 = 0.99;

fn source(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/workloads")
        .join(name)
}

/// Compiles a workload with `cmd ARGS -o EXE SRC`.
fn build(dir: &Dir, cmd: &str, args: &[&str], src: &str, exe: &str) -> String {
    let exe = dir.path(exe);
    let out = Command::new(cmd)
        .args(args)
        .arg("-o")
        .arg(&exe)
        .arg(source(src))
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success() && exe.is_file(),
        "{cmd} {src}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe.to_str().unwrap().to_string()
}

/// `fp.c` at `-O2 -fomit-frame-pointer`: three forked children in their own call chains
/// (`-fno-ipa-pure-const`, or -O2 calls the pure leaf functions once per child).
pub(crate) fn c_forking(dir: &Dir) -> Vec<String> {
    let exe = build(
        dir,
        "cc",
        &["-O2", "-fomit-frame-pointer", "-fno-ipa-pure-const"],
        "fp.c",
        "fp",
    );
    vec![exe, "150".into()]
}

/// `templates.cc` at `-O2 -fomit-frame-pointer -g`: templates, inlined helpers, `std::sort`.
fn cpp(dir: &Dir) -> Vec<String> {
    let exe = build(
        dir,
        "c++",
        &["-O2", "-fomit-frame-pointer", "-g"],
        "templates.cc",
        "templates",
    );
    vec![exe, "500".into()]
}

/// `frames.rs` as a release build without frame pointers: three threads.
fn rust_threads(dir: &Dir) -> Vec<String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let exe = build(
        dir,
        &rustc,
        &["-C", "opt-level=2", "-g", "--edition", "2021"],
        "frames.rs",
        "frames",
    );
    vec![exe, "60".into()]
}

/// `syscalls.c` at `-O2 -fomit-frame-pointer`: kernel frames above short user stacks.
fn syscalls(dir: &Dir) -> Vec<String> {
    let exe = build(
        dir,
        "cc",
        &["-O2", "-fomit-frame-pointer"],
        "syscalls.c",
        "sys",
    );
    vec![exe, "60000".into()]
}

/// `perf record -e cpu-clock -F 4000 --call-graph dwarf[,STACK] EXTRA -o - -- ARGV`.
fn record(argv: &[String], stack: Option<&str>, extra: &[&str]) -> Vec<u8> {
    let cg = match stack {
        Some(s) => format!("dwarf,{s}"),
        None => "dwarf".into(),
    };
    let mut args = vec!["-e", "cpu-clock", "-F", "4000", "--call-graph", &cg];
    args.extend_from_slice(extra);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    perf_record(&args, &argv)
}

/// `perfpipe --unwind ARGS` on `rec`; asserts success. Returns its output and its stderr.
fn unwound_with_stderr(rec: &[u8], args: &[&str]) -> (Vec<u8>, String) {
    let mut all = vec!["--unwind"];
    all.extend_from_slice(args);
    let out = perfpipe(&all, rec);
    assert!(
        out.status.success(),
        "perfpipe {all:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub(crate) const FIELDS: &[&str] = &["script", "--no-inline", "-F", "comm,tid,time,ip,sym,dso"];

/// perf script's samples of `rec`, each its lines (header then frames), whitespace normalised.
fn samples(script: &str) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut cur: Option<Vec<String>> = None;
    for line in script.lines() {
        if line.trim().is_empty() {
            out.extend(cur.take());
        } else if !line.starts_with([' ', '\t']) {
            out.extend(cur.take());
            cur = Some(vec![line.trim().to_string()]);
        } else if let Some(c) = cur.as_mut() {
            c.push(line.split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }
    out.extend(cur);
    out
}

/// Whether perf's unwinding of the input gave a sample no user frame at all where ours gives
/// exactly one, its leaf: the same kernel frames, then our one user frame. All three readers do
/// so for samples whose stack copy holds nothing to unwind (a copy-on-write fault in
/// `__libc_fork` of the parent just after the fork, `fork_exec_churn`): perf's libunwind and libdw
/// give up before the ip, which the sample's registers give (our walk stops there too). How many
/// such samples a run has depends on how the kernel interleaves the parent and the child, that is
/// on what else runs, so they are not differences of ours.
fn perf_gave_up(perf_frames: &[String], ours: &[String]) -> bool {
    ours.len() == perf_frames.len() + 1
        && ours.starts_with(perf_frames)
        && perf_frames[1..]
            .iter()
            .all(|l| l.ends_with("([kernel.kallsyms])"))
        && !ours[ours.len() - 1].ends_with("([kernel.kallsyms])")
}

/// Compares perf script on the input and on our output; prints up to 5 differing samples.
/// Returns the fraction of samples that are identical or where perf gave up on the user frames
/// ([`perf_gave_up`]).
pub(crate) fn compare(what: &str, input: &str, output: &str) -> f64 {
    let (a, b) = (samples(input), samples(output));
    assert!(a.len() >= 100, "{what}: only {} samples recorded", a.len());
    assert_eq!(a.len(), b.len(), "{what}: samples in and out");
    let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
    let gave_up = a.iter().zip(&b).filter(|(x, y)| perf_gave_up(x, y)).count();
    let fraction = (same + gave_up) as f64 / a.len() as f64;
    eprintln!(
        "=== {what}: {same} of {} samples identical, {gave_up} more where perf gave no user \
         frame and ours is the leaf ({:.2} %)",
        a.len(),
        100.0 * fraction
    );
    for (x, y) in a
        .iter()
        .zip(&b)
        .filter(|(x, y)| x != y && !perf_gave_up(x, y))
        .take(5)
    {
        eprintln!("--- perf unwinding the input\n{}", x.join("\n"));
        eprintln!("+++ perf reading our output\n{}", y.join("\n"));
    }
    fraction
}

/// The share of samples whose frames, as perf unwinds the input, begin the frames perf reads
/// in our output (equal ones included): perf 7.x's libdw unwinding stops early in Rust release
/// binaries (at `main`, or after the leaf), where perf 6.1, 6.12 and perfpipe go on to `_start`.
fn prefix_fraction(what: &str, input: &str, output: &str) -> f64 {
    let (a, b) = (samples(input), samples(output));
    assert_eq!(a.len(), b.len(), "{what}: samples in and out");
    let within = a.iter().zip(&b).filter(|(x, y)| y.starts_with(x)).count();
    eprintln!("=== {what}: {within} of {} samples begin ours", a.len());
    within as f64 / a.len().max(1) as f64
}

/// Unwinds and compares with every reader (perf 6.1, 6.12 and 7.x, each unwinding the input
/// itself; perf 7.x's stacks must begin ours where they are not ours, see [`prefix_fraction`]);
/// returns (input bytes, output bytes).
fn check(what: &str, rec: &[u8]) -> (usize, usize) {
    check_at(what, rec, MIN_IDENTICAL)
}

/// [`check`], with at least `min` of the samples identical.
fn check_at(what: &str, rec: &[u8], min: f64) -> (usize, usize) {
    let (out, stats) = unwound_with_stderr(rec, &["--stats"]);
    for perf in readers() {
        let what = format!("{what}, {}", perf.name);
        let (theirs, ours) = (perf.on(FIELDS, rec), perf.on(FIELDS, &out));
        let fraction = compare(&what, &theirs, &ours);
        let fraction = if perf.is_7() {
            fraction.max(prefix_fraction(&what, &theirs, &ours))
        } else {
            fraction
        };
        assert!(
            fraction >= min,
            "{what}: {:.2} % of samples identical, at least {} % must be; perfpipe --stats:\n{stats}",
            100.0 * fraction,
            100.0 * min
        );
        // The output reads as a -g recording: no sample keeps a stack copy.
        readers::samples(&perf, Input::Stream(&out)).unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    eprintln!(
        "{what}: {} bytes in, {} out ({:.2} %)",
        rec.len(),
        out.len(),
        100.0 * out.len() as f64 / rec.len() as f64
    );
    (rec.len(), out.len())
}

pipetest!(needs(perf, perf612, trixie, cc) c_without_frame_pointers_forking, |dir| {
    let rec = record(&c_forking(&dir), None, &[]);
    let (i, o) = check("C -O2 -fomit-frame-pointer, 3 forked children", &rec);
    assert!(o * 10 <= i, "output {o} bytes is more than 10 % of {i}");
});

pipetest!(needs(perf, perf612, trixie, cc) fork_exec_churn, |dir| {
    // Issue 32: processes that fork, exec and exit within a round on both cpus (`churn.c`), so
    // that their samples, FORKs and MMAP2s come out of time order in the stream; each sample is
    // unwound with its process's maps at its time, as perf does after sorting.
    let exe = build(
        &dir,
        "cc",
        &["-O2", "-fomit-frame-pointer", "-fno-ipa-pure-const"],
        "churn.c",
        "churn",
    );
    check_at("fork/exec churn", &record(&[exe, "250".into()], None, &[]), 0.999);
});

pipetest!(needs(perf, perf612, trixie, cc) cpp_with_inlining, |dir| {
    let rec = record(&cpp(&dir), None, &[]);
    let (i, o) = check("C++ -O2 -fomit-frame-pointer", &rec);
    assert!(o * 10 <= i, "output {o} bytes is more than 10 % of {i}");
});

pipetest!(needs(perf, perf612, trixie, cc) rust_release_threads, |dir| {
    let rec = record(&rust_threads(&dir), None, &[]);
    let (i, o) = check("Rust release, 3 threads", &rec);
    assert!(o * 10 <= i, "output {o} bytes is more than 10 % of {i}");
});

pipetest!(needs(perf, perf612, trixie, cc) kernel_heavy_syscalls, |dir| {
    check("syscalls", &record(&syscalls(&dir), None, &[]));
});

pipetest!(needs(perf, perf612, trixie, cc) stack_copies_of_4k_and_64k, |dir| {
    // A longer run: the start-up samples (deep stacks in ld.so, whose ends differ when the copy
    // is cut, see docs/unwinding.md) are a fixed number per process.
    let mut argv = c_forking(&dir);
    argv[1] = "400".into();
    check("4 KiB stacks", &record(&argv, Some("4096"), &[]));
    check("64 KiB stacks", &record(&cpp(&dir), Some("65528"), &[]));
});

pipetest!(needs(perf, perf612, trixie, cc) compressed_input, |dir| {
    // -z: a decompress stage goes in front by itself.
    check("perf record -z", &record(&cpp(&dir), None, &["-z"]));
});

pipetest!(needs(perf, perf612, trixie, cc) file_mode_in_and_out, |dir| {
    let argv = cpp(&dir);
    let data = dir.path("in.data");
    let out = Command::new("perf")
        .args(["record", "-e", "cpu-clock", "-F", "4000", "--call-graph", "dwarf", "-o"])
        .arg(&data)
        .arg("--")
        .args(&argv)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let unwound_data = dir.path("out.data");
    let r = perfpipe(
        &[
            "-i",
            data.to_str().unwrap(),
            "--unwind",
            "-o",
            unwound_data.to_str().unwrap(),
        ],
        b"",
    );
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    for perf in readers() {
        let script = |p: &PathBuf| perf.on_file(FIELDS, p);
        let what = format!("file mode, {}", perf.name);
        let fraction = compare(&what, &script(&data), &script(&unwound_data));
        assert!(fraction >= MIN_IDENTICAL, "{what}: {fraction}");
        // The attrs section says what the samples hold: no regs or stack, a callchain.
        let header = perf.on_file(&["evlist", "-v"], &unwound_data);
        assert!(header.contains("CALLCHAIN"), "{what}: {header}");
        assert!(!header.contains("REGS_USER") && !header.contains("STACK_USER"), "{header}");
    }
    let len = |p: &PathBuf| std::fs::metadata(p).unwrap().len();
    assert!(len(&unwound_data) * 10 <= len(&data));
});

pipetest!(needs(perf, cc, inferno) flame_graph_input_in_one_pass, |dir| {
    // --unwind then the symbolize stage the folded output adds by itself, against perf script
    // unwinding the input, collapsed by inferno.
    let argv = cpp(&dir);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let args = ["-e", "cpu-clock", "-F", "4000", "--call-graph", "dwarf"];
    let rec = oracle().record(&args, &argv);
    let file = dir.write("rec.data", &rec);
    let folded = dir.path("out.folded");
    let r = perfpipe(
        &[
            "-i",
            file.to_str().unwrap(),
            "--unwind",
            "-o",
            folded.to_str().unwrap(),
        ],
        b"",
    );
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let ours = std::fs::read_to_string(&folded).unwrap();
    let theirs = collapse(&perf_on(&["script", "--no-inline"], &rec), &[]);
    assert_agrees("--unwind -o out.folded", &ours, &theirs);
    let svg = dir.path("flame.svg");
    let r = perfpipe(
        &[
            "-i",
            file.to_str().unwrap(),
            "--unwind",
            "-o",
            svg.to_str().unwrap(),
        ],
        b"",
    );
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let svg = std::fs::read_to_string(svg).unwrap();
    assert!(svg.contains("tpl::run"), "the flame graph names the workload's frames");
});

pipetest!(needs(perf, cc, inferno)
    /// ld.so's lazy-binding trampoline (`_dl_runtime_resolve_xsavec`) aligns the stack and keeps
    /// its CFA in `rbx` (`CFA=rbx+32`), which framehop cannot evaluate (it took the frame pointer
    /// there and skipped the caller of the PLT entry); the CFI fallback (`profile/src/unwind/cfi.rs`)
    /// steps it with every sampled register. `lazy.c` loads and unloads a library 512 of whose
    /// calls bind lazily at every load; recorded until at least [`RESOLVER_SAMPLES`] samples
    /// have the trampoline in perf's stack, and `--unwind -o out.folded` must give perf's
    /// `perf script --no-inline | inferno-collapse-perf` for every sample whose frames perf names
    /// (none `[unknown]`), with the fallback counted and never failing.
    lazy_binding_trampolines_unwound_as_perf_does, |dir| {
    let lib = |name: &str, args: &[&str]| {
        let mut all = vec!["-shared", "-fPIC", "-nostartfiles", "-Wl,--no-as-needed"];
        all.extend_from_slice(args);
        build(&dir, "cc", &all, "lazy.c", name)
    };
    // -nostartfiles: no `_init` (crti's, without CFI: perf stops at its first page fault at
    // each load, where framehop's guess goes on), which is not what this test is about.
    lib("liblazydeps.so", &["-DLAZY_DEPS"]);
    let libdir = format!("-L{}", dir.path("").display());
    let lazy = lib(
        "liblazy.so",
        &["-DLAZY_LIB", "-Wl,-z,lazy", &libdir, "-llazydeps", "-Wl,-rpath,$ORIGIN"],
    );
    let exe = build(&dir, "cc", &["-O2", "-fomit-frame-pointer", "-Wl,-z,lazy"], "lazy.c", "lazy");
    let in_resolver = |rec: &[u8]| {
        perf_on(&["script", "--no-inline"], rec)
            .split("\n\n")
            .filter(|s| s.contains("_dl_runtime_resolve"))
            .count()
    };
    let (rec, _) = record_until(
        |round| {
            let rounds = (200u32 << round).to_string();
            let args = ["-e", "cpu-clock", "-F", "4000", "--call-graph", "dwarf"];
            perf_record(&args, &[&exe, &rounds, &lazy])
        },
        |rec| {
            let n = in_resolver(rec);
            (n < RESOLVER_SAMPLES).then(|| format!("samples in _dl_runtime_resolve* ({n})"))
        },
    );
    let file = dir.write("rec.data", &rec);
    let folded = dir.path("out.folded");
    let (file, out) = (file.to_str().unwrap(), folded.to_str().unwrap());
    let r = perfpipe(&["-i", file, "--unwind", "-o", out, "--stats"], b"");
    let stats = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{stats}");
    let steps = counter(&stats, "cfi_fallback_steps");
    assert!(steps as usize >= RESOLVER_SAMPLES, "{steps} fallback steps:\n{stats}");
    assert_eq!(counter(&stats, "partial_cfi_fallback_failed"), 0, "{stats}");
    let ours = std::fs::read_to_string(&folded).unwrap();
    let theirs = collapse(&perf_on(&["script", "--no-inline"], &rec), &[]);
    let agreement = crate::oracle::compare(&ours, &theirs);
    eprintln!("=== lazy binding: ours vs perf 6.1\n{agreement}");
    let unnamed: u64 = crate::oracle::parse(&theirs)
        .iter()
        .filter(|(stack, _)| stack.contains("[unknown]"))
        .map(|(_, w)| w)
        .sum();
    assert!(
        agreement.agreed + unnamed >= agreement.ours.max(agreement.theirs),
        "lazy binding: stacks differ where perf names every frame (above)"
    );
    assert!(
        crate::oracle::parse(&ours)
            .keys()
            .any(|s| s.contains("lazy_run;_dl_runtime_resolve")),
        "no stack through the trampoline with its caller"
    );
});

/// Samples with ld.so's lazy-binding trampoline in perf's stack that
/// [`lazy_binding_trampolines_unwound_as_perf_does`] records until it has.
const RESOLVER_SAMPLES: usize = 50;

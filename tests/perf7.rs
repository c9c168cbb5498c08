//! What perf 7.x added, with perf 7.3 (the trixie root's) as the oracle (issue 39, items 3–6):
//! `perfpipe inject --convert-callchain` against 7.3's own, on files and pipes; `perfpipe inject
//! --aslr` against 7.3's layout, with every frame named as on the input by 7.3 and 6.1 and no
//! address of the input's maps left; deferred user callchains (`CALLCHAIN_DEFERRED`) stitched
//! into their samples; perf's `offcpu-time` samples charged by `--weight offcpu` as 7.3 charges
//! them, in both layouts (period and callchain; ≥ 6.15's raw data). This kernel writes no deferred
//! callchains and Debian's 7.3 has no BPF skeletons, so those streams are made from real `-g`
//! recordings ([`defer`], [`offcpu_time`], [`offcpu_raw`]) and 7.3 is shown to read them as it
//! reads the recordings before ours are compared with it.
//!
//! Then every profile output of perf 7.3 recordings (on this machine, and inside the trixie root,
//! `-g` and `--call-graph dwarf`) against what 7.3 itself says of them ([`outputs_agree`]).
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::oracle::{assert_agrees, collapse};
use crate::util::*;

/// `fp.c` at `-O2 -fomit-frame-pointer`: three forked children (`-g` recordings of it have
/// frame-pointer-less user stacks where DWARF recordings need unwinding).
fn fp(dir: &Dir, frame_pointers: bool) -> Vec<String> {
    let exe = dir.path("fp");
    let fp_flag = if frame_pointers {
        "-fno-omit-frame-pointer"
    } else {
        "-fomit-frame-pointer"
    };
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/workloads/fp.c");
    let out = Command::new("cc")
        .args(["-O2", fp_flag, "-fno-ipa-pure-const", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("cc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    vec![exe.to_str().unwrap().to_string(), "150".into()]
}

/// `perf script` of a file or a stream by `perf`, folded by `inferno-collapse-perf`. (perf 7
/// adds inlined frames to frame-pointer callchains; perfpipe's folded stacks have them with
/// `--inline`: compare with `--no-inline`.)
fn folded_by(perf: &Perf, input: Input<'_>) -> String {
    let args = ["script", "--no-inline"];
    let script = match input {
        Input::File(f) => perf.on_file(&args, f),
        Input::Bytes(b) => perf.on(&args, b),
    };
    collapse(&script, &[])
}

/// `perfpipe ARGS -o x.folded` on `input`: its folded stacks.
fn folded_of(dir: &Dir, input: &[u8], args: &[&str]) -> String {
    let out = dir.path("out.folded");
    let mut all = args.to_vec();
    all.extend(["-o", out.to_str().unwrap()]);
    perfpipe_ok(&all, input);
    std::fs::read_to_string(&out).unwrap()
}

/// Where a test's input is.
#[derive(Clone, Copy)]
enum Input<'a> {
    File(&'a Path),
    Bytes(&'a [u8]),
}

pipetest!(needs(perf, cc, inferno, trixie) convert_callchain_matches_perf7_on_files_and_pipes, |dir| {
    let p7 = perf7();
    let argv = fp(&dir, false);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let input = dir.path("dwarf.data");
    p7.record_file(
        &input,
        &["-e", "cpu-clock", "-F", "4000", "--call-graph", "dwarf"],
        &argv,
    );
    // perf 7.3's own conversion (of a file only: "--convert-callchain cannot work with pipe").
    let theirs = dir.path("theirs.data");
    let out = p7
        .command()
        .args(["inject", "--convert-callchain", "-i"])
        .arg(&input)
        .arg("-o")
        .arg(&theirs)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let oracle = folded_by(&p7, Input::File(&theirs));
    // Ours, file to file.
    let ours = dir.path("ours.data");
    let out = Command::new(bin())
        .args(["inject", "--convert-callchain", "-i"])
        .arg(&input)
        .arg("-o")
        .arg(&ours)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_agrees(
        "perfpipe inject --convert-callchain -i FILE -o FILE, read by perf 7.3",
        &folded_by(&p7, Input::File(&ours)),
        &oracle,
    );
    // Ours, pipe to pipe: the recording as perf 7.3 pipes it.
    let out = p7.command().args(["inject", "-o", "-", "-i"]).arg(&input).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let bytes = out.stdout;
    assert!(bytes.starts_with(b"PERFILE2"));
    let piped = run(
        Command::new(bin()).args(["inject", "--convert-callchain", "-i", "-", "-o", "-"]),
        &bytes,
    );
    assert!(piped.status.success(), "{}", String::from_utf8_lossy(&piped.stderr));
    assert!(piped.stdout.starts_with(b"PERFILE2") && piped.stdout.len() < bytes.len() / 10);
    assert_agrees(
        "perfpipe inject --convert-callchain -i - -o -, read by perf 7.3",
        &folded_by(&p7, Input::Bytes(&piped.stdout)),
        &oracle,
    );
    // And perf 6.1 reads ours, with the frames 7.3 gives (7.3's output of a dwarf recording is
    // "incompatible" to it).
    assert_agrees(
        "perfpipe inject --convert-callchain -i - -o -, read by perf 6.1",
        &folded_by(&oracle_perf(), Input::Bytes(&piped.stdout)),
        &oracle,
    );
    let attrs = oracle_perf().on(&["evlist", "-v"], &piped.stdout);
    assert!(!attrs.contains("REGS_USER") && !attrs.contains("STACK_USER"), "{attrs}");
});

/// The oracle perf (6.1).
fn oracle_perf() -> Perf {
    oracle()
}

/// Every address `perf script` prints (the hex before a symbol, and `[0x…(0x…) @ 0x…` of MMAP
/// lines), for the "nothing of the input's layout survives" check.
fn addresses(script: &str) -> Vec<u64> {
    let mut v = Vec::new();
    for line in script.lines() {
        let t = line.trim_start();
        if let Some(hex) = t.split_whitespace().next() {
            if line.starts_with('\t') || line.starts_with(' ') {
                if let Ok(a) = u64::from_str_radix(hex, 16) {
                    v.push(a);
                }
            }
        }
        if let Some(i) = t.find("[0x") {
            let rest = &t[i + 3..];
            let end = rest.find('(').unwrap_or(0);
            if let Ok(a) = u64::from_str_radix(&rest[..end], 16) {
                v.push(a);
            }
        }
    }
    v
}

/// The maps `perf script --show-mmap-events` lists: `[start, start + len)`.
fn map_ranges(script: &str) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    for line in script.lines().filter(|l| l.contains("PERF_RECORD_MMAP")) {
        let Some(i) = line.find("[0x") else { continue };
        let rest = &line[i + 3..];
        let (start, rest) = rest.split_once("(0x").unwrap();
        let (len, _) = rest.split_once(')').unwrap();
        let start = u64::from_str_radix(start, 16).unwrap();
        let len = u64::from_str_radix(len, 16).unwrap();
        v.push((start, start.saturating_add(len)));
    }
    v
}

/// `perf script -F comm,tid,time,sym,dso` (frames by name, without their addresses).
fn frames(perf: &Perf, input: Input<'_>) -> String {
    let args = ["script", "-F", "comm,tid,time,ip,sym,dso"];
    let text = match input {
        Input::File(f) => perf.on_file(&args, f),
        Input::Bytes(b) => perf.on(&args, b),
    };
    // The ip column goes: only the names must be the same.
    text.lines()
        .map(|l| match l.trim_start().split_once(' ') {
            Some((hex, rest)) if l.starts_with('\t') && u64::from_str_radix(hex, 16).is_ok() => {
                format!("\t{}", rest.trim_start())
            }
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Asserts that no address of `ours` lies in a map of the input (`input_script`'s MMAP lines).
fn assert_no_input_address(what: &str, input_script: &str, ours_script: &str) {
    let maps = map_ranges(input_script);
    assert!(!maps.is_empty(), "{what}: the input lists no maps");
    let leaked: BTreeSet<u64> = addresses(ours_script)
        .into_iter()
        .filter(|&a| a != 0 && maps.iter().any(|&(s, e)| a >= s && a < e))
        .collect();
    assert!(
        leaked.is_empty(),
        "{what}: {} addresses of the input's maps survive: {:x?}",
        leaked.len(),
        leaked.iter().take(10).collect::<Vec<_>>()
    );
}

pipetest!(needs(perf, cc, trixie) aslr_keeps_every_frame_and_no_address_on_pipes, |dir| {
    let argv = fp(&dir, true);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let input = perf_record(&["-e", "cpu-clock", "-F", "4000", "-g"], &argv);
    let ours = perfpipe_ok(&["inject", "--aslr"], &input);
    for perf in [oracle(), perf7()] {
        let (a, b) = (frames(&perf, Input::Bytes(&input)), frames(&perf, Input::Bytes(&ours)));
        assert!(a.lines().count() > 1000, "{}: too few lines", perf.name);
        if a != b {
            let diff: Vec<(&str, &str)> =
                a.lines().zip(b.lines()).filter(|(x, y)| x != y).take(10).collect();
            panic!("{}: the frames differ: {diff:#?}", perf.name);
        }
    }
    let p7 = perf7();
    let show = ["script", "--show-mmap-events", "-F", "comm,tid,time,ip,sym,dso"];
    assert_no_input_address(
        "perfpipe inject --aslr (pipe)",
        &p7.on(&show, &input),
        &p7.on(&show, &ours),
    );
});

pipetest!(needs(perf, cc, trixie) aslr_lays_out_as_perf7_on_files, |dir| {
    let p7 = perf7();
    let argv = fp(&dir, true);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let input = dir.path("in.data");
    p7.record_file(&input, &["-e", "cpu-clock", "-F", "4000", "-g"], &argv);
    let theirs = dir.path("theirs.data");
    let ours = dir.path("ours.data");
    let out = p7
        .command()
        .args(["inject", "--aslr", "-i"])
        .arg(&input)
        .arg("-o")
        .arg(&theirs)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(bin())
        .args(["inject", "--aslr", "-i"])
        .arg(&input)
        .arg("-o")
        .arg(&ours)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The same layout: every map where 7.3 puts it.
    let mmaps = |f: &Path| -> Vec<String> {
        p7.on_file(&["script", "--show-mmap-events", "-F", "comm,tid"], f)
            .lines()
            .filter(|l| l.contains("PERF_RECORD_MMAP"))
            .map(str::to_string)
            .collect()
    };
    let (t, o) = (mmaps(&theirs), mmaps(&ours));
    assert!(t.len() >= 4, "{t:#?}");
    eqnice!(t, o);
    // Every frame named as on the input (7.3's own output loses the forked children's: it looks
    // their inherited maps up under their own pids, where no MMAP put them).
    eqnice!(
        frames(&p7, Input::File(&input)),
        frames(&p7, Input::File(&ours))
    );
    let show = ["script", "--show-mmap-events", "-F", "comm,tid,time,ip,sym,dso"];
    assert_no_input_address(
        "perfpipe inject --aslr (file)",
        &p7.on_file(&show, &input),
        &p7.on_file(&show, &ours),
    );
    // What names the host goes on request.
    let bare = dir.path("bare.data");
    let out = Command::new(bin())
        .args(["inject", "--aslr", "--aslr-drop", "build-ids,host", "-i"])
        .arg(&input)
        .arg("-o")
        .arg(&bare)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let header = p7.on_file(&["report", "--header-only"], &bare);
    assert!(!header.contains("# hostname"), "{header}");
    let with = p7.on_file(&["report", "--header-only"], &ours);
    assert!(with.contains("# hostname"), "{with}");
    let side = p7.on_file(&["script", "--show-mmap-events", "-F", "comm"], &bare);
    assert!(
        !side.lines().any(|l| l.contains("PERF_RECORD_MMAP2") && l.contains(" <")),
        "a build id is left: {side}"
    );
    let ids = p7.on_file(&["buildid-list"], &bare);
    assert!(
        !ids.lines().any(|l| l.split_whitespace().count() > 1),
        "a build id is left: {ids}"
    );
});

/// The records of a little-endian pipe stream after its header: (type, misc, bytes).
fn records(s: &[u8]) -> Vec<(u32, u16, Vec<u8>)> {
    let mut v = Vec::new();
    let mut at = 16;
    while at + 8 <= s.len() {
        let t = u32::from_le_bytes(s[at..at + 4].try_into().unwrap());
        let misc = u16::from_le_bytes([s[at + 4], s[at + 5]]);
        let size = usize::from(u16::from_le_bytes([s[at + 6], s[at + 7]]));
        assert!(
            size >= 8 && at + size <= s.len(),
            "a record runs past the stream"
        );
        v.push((t, misc, s[at..at + size].to_vec()));
        at += size;
    }
    v
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// `PERF_SAMPLE_*` bits the crafted streams lay out.
const IP: u64 = 1;
const TID: u64 = 2;
const TIME: u64 = 4;
const ADDR: u64 = 8;
const READ: u64 = 16;
const CALLCHAIN: u64 = 32;
const ID: u64 = 64;
const CPU: u64 = 128;
const PERIOD: u64 = 256;
const STREAM_ID: u64 = 512;
const IDENTIFIER: u64 = 1 << 16;
const CONTEXT_USER: u64 = -512i64 as u64;
const CONTEXT_USER_DEFERRED: u64 = -640i64 as u64;

/// The one attr of a recording: (sample_type, sample_id_all).
fn only_attr(recs: &[(u32, u16, Vec<u8>)]) -> u64 {
    let attrs: Vec<&Vec<u8>> = recs.iter().filter(|r| r.0 == 64).map(|r| &r.2).collect();
    assert_eq!(attrs.len(), 1, "one event recorded");
    let t = u64_at(attrs[0], 8 + 24);
    assert_eq!(t & READ, 0);
    t
}

/// Offsets of a sample's fixed fields: (`TID`, `PERIOD`, the callchain's `nr`), and the
/// sample-id trailer of the same sample (`TID`, `TIME`, `ID`, `STREAM_ID`, `CPU`, `IDENTIFIER`).
fn sample_fields(t: u64, rec: &[u8]) -> (usize, Option<usize>, usize, Vec<u8>) {
    let mut at = 8;
    let mut off = |bit: u64| {
        (t & bit != 0).then(|| {
            at += 8;
            at - 8
        })
    };
    let identifier = off(IDENTIFIER);
    off(IP);
    let tid = off(TID).expect("TID");
    let time = off(TIME);
    off(ADDR);
    let id = off(ID);
    let stream_id = off(STREAM_ID);
    let cpu = off(CPU);
    let period = off(PERIOD);
    let nr = at;
    let mut trailer = Vec::new();
    for f in [Some(tid), time, id, stream_id, cpu, identifier]
        .into_iter()
        .flatten()
    {
        trailer.extend_from_slice(&rec[f..f + 8]);
    }
    (tid, period, nr, trailer)
}

/// A `-g` recording made into what a kernel with deferred user callchains writes for it
/// (`perf record --call-graph fp,defer`): each sample with user frames keeps its kernel part and
/// ends its callchain with `PERF_CONTEXT_USER_DEFERRED` and a cookie, and its user frames follow
/// in a CALLCHAIN_DEFERRED record (`u64 cookie, nr, ips[nr]`, then the sample-id trailer the
/// kernel writes for the event, `misc` USER), as the kernel writes it when the task returns to
/// user space; the attr gets `defer_callchain` and `defer_output` (bits 38 and 39 of its flags),
/// as perf record sets them on its one event. Returns the stream and the deferred records made.
pub(crate) fn defer(input: &[u8]) -> (Vec<u8>, usize) {
    let recs = records(input);
    let t = only_attr(&recs);
    assert!(t & CALLCHAIN != 0);
    let mut out = input[..16].to_vec();
    let mut cookie = 0x1_0000_0000u64;
    let mut made = 0;
    for (ty, misc, mut rec) in recs {
        if ty == 64 {
            let flags = u64_at(&rec, 8 + 40) | 1 << 38 | 1 << 39;
            rec[8 + 40..8 + 48].copy_from_slice(&flags.to_le_bytes());
        }
        if ty != 9 {
            out.extend_from_slice(&rec);
            continue;
        }
        let (_, _, nr_at, trailer) = sample_fields(t, &rec);
        let nr = u64_at(&rec, nr_at) as usize;
        let ips: Vec<u64> = (0..nr).map(|i| u64_at(&rec, nr_at + 8 + 8 * i)).collect();
        let Some(k) = ips.iter().position(|&ip| ip == CONTEXT_USER) else {
            out.extend_from_slice(&rec);
            continue;
        };
        cookie += 1;
        let mut chain = ips[..k].to_vec();
        chain.extend([CONTEXT_USER_DEFERRED, cookie]);
        let mut s = rec[..nr_at].to_vec();
        s.extend_from_slice(&(chain.len() as u64).to_le_bytes());
        for ip in &chain {
            s.extend_from_slice(&ip.to_le_bytes());
        }
        s.extend_from_slice(&rec[nr_at + 8 + 8 * nr..]);
        let size = s.len() as u16;
        s[6..8].copy_from_slice(&size.to_le_bytes());
        out.extend_from_slice(&s);
        let user = &ips[k + 1..];
        let mut d = vec![22, 0, 0, 0];
        d.extend_from_slice(&2u16.to_le_bytes()); // PERF_RECORD_MISC_USER
        d.extend_from_slice(&0u16.to_le_bytes());
        d.extend_from_slice(&cookie.to_le_bytes());
        d.extend_from_slice(&(user.len() as u64).to_le_bytes());
        for ip in user {
            d.extend_from_slice(&ip.to_le_bytes());
        }
        d.extend_from_slice(&trailer);
        let size = d.len() as u16;
        d[6..8].copy_from_slice(&size.to_le_bytes());
        out.extend_from_slice(&d);
        made += 1;
        let _ = misc;
    }
    (out, made)
}

pipetest!(needs(perf, cc, inferno, trixie) deferred_callchains_are_stitched_as_perf7_merges_them, |dir| {
    let p7 = perf7();
    let argv = fp(&dir, true);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let input = perf_record(&["-e", "cpu-clock", "-F", "4000", "-g"], &argv);
    let (deferred, made) = defer(&input);
    assert!(made > 1000, "only {made} samples with user frames");
    let attrs = p7.on(&["evlist", "-v"], &deferred);
    assert!(attrs.contains("defer_callchain: 1") && attrs.contains("defer_output: 1"), "{attrs}");
    // First the crafted stream itself: perf 7.3 merges it into exactly the recording.
    let script = |perf: &Perf, b: &[u8]| perf.on(&["script", "-F", "comm,tid,time,ip,sym,dso"], b);
    eqnice!(script(&p7, &input), script(&p7, &deferred));
    // Every profile output stitches: the folded stacks of both streams are the same, and agree
    // with 7.3's.
    let folded = |b: &[u8]| folded_of(&dir, b, &[]);
    let ours = folded(&deferred);
    eqnice!(folded(&input), ours);
    assert_agrees("folded stacks of the deferred stream", &ours, &folded_by(&p7, Input::Bytes(&deferred)));
    // --stitch (and --unwind, which needs it) write what perf 6.1 reads as the recording.
    let stitched = perfpipe_ok(&["--stitch", "--stats"], &deferred);
    assert!(!records(&stitched).iter().any(|r| r.0 == 22));
    eqnice!(script(&oracle(), &input), script(&oracle(), &stitched));
    eqnice!(script(&p7, &input), script(&p7, &stitched));
    let unwound = perfpipe_ok(&["--unwind"], &deferred);
    eqnice!(script(&oracle(), &input), script(&oracle(), &unwound));
    // Passthrough and --drop keep them byte for byte.
    eqnice!(deferred, perfpipe_ok(&[], &deferred));
    let dropped = perfpipe_ok(&["--drop", "switch"], &deferred);
    assert_eq!(records(&dropped).iter().filter(|r| r.0 == 22).count(), made);
});

/// A `-g` recording made into what `perf record --off-cpu` writes for its `offcpu-time` event
/// (`off_cpu_write()` in `tools/perf/util/bpf_off_cpu.c`): the attr a BPF-output software event
/// (`PERF_TYPE_SOFTWARE`, `PERF_COUNT_SW_BPF_OUTPUT`), each sample's period a time off the cpu
/// in ns (here made from its time: 1–997 µs), its callchain where the thread blocked.
pub(crate) fn offcpu_time(input: &[u8]) -> Vec<u8> {
    let recs = records(input);
    let t = only_attr(&recs);
    assert!(t & PERIOD != 0 && t & TIME != 0);
    let mut out = input[..16].to_vec();
    for (ty, _, mut rec) in recs {
        if ty == 64 {
            rec[8..12].copy_from_slice(&1u32.to_le_bytes()); // PERF_TYPE_SOFTWARE
            rec[16..24].copy_from_slice(&10u64.to_le_bytes()); // PERF_COUNT_SW_BPF_OUTPUT
        }
        if ty == 9 {
            let (tid, period, _, _) = sample_fields(t, &rec);
            let time = u64_at(&rec, tid + 8);
            let ns = (time % 997 + 1) * 1000;
            let p = period.unwrap();
            rec[p..p + 8].copy_from_slice(&ns.to_le_bytes());
        }
        out.extend_from_slice(&rec);
    }
    out
}

pipetest!(needs(perf, cc, inferno, trixie) offcpu_time_samples_weigh_their_period_as_perf7_reports, |dir| {
    let p7 = perf7();
    let argv = fp(&dir, true);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let input = perf_record(&["-e", "cpu-clock", "-F", "4000", "-g"], &argv);
    let off = offcpu_time(&input);
    let attrs = p7.on(&["evlist", "-v"], &off);
    assert!(attrs.contains("PERF_COUNT_SW_BPF_OUTPUT"), "{attrs}");
    // 7.3 charges each sample its period: perf report's total is the sum.
    let report = p7.on(&["report", "--stdio", "--no-children", "--sort", "comm", "-F", "period,comm"], &off);
    let total: u64 = report
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    let theirs = folded_by(&p7, Input::Bytes(&off));
    let weights: u64 = crate::oracle::parse(&theirs).values().sum();
    assert_eq!(total, weights, "perf report's periods and perf script's differ: {report}");
    let ours = folded_of(&dir, &off, &["--weight", "offcpu"]);
    let ours = ours.replace("[off-cpu: S|D];", "");
    assert_agrees("--weight offcpu of offcpu-time samples", &ours, &theirs);
});

/// `PERF_SAMPLE_RAW`.
const RAW: u64 = 1 << 10;
/// perf's dummy time of the `offcpu-time` samples it writes at the end (`OFF_CPU_TIMESTAMP`).
const OFF_CPU_TIMESTAMP: u64 = !0 << 32;

/// A perf 7.x `-F … -g` pipe recording made into what perf ≥ 6.15 `record --off-cpu` writes for
/// its `offcpu-time` event, laid out as `tools/perf` of 7.3 states it: the attr a BPF-output
/// software event with `PERF_SAMPLE_RAW` instead of `PERF_SAMPLE_CALLCHAIN` (`OFFCPU_SAMPLE_TYPES`
/// in `util/off_cpu.h`), its EVENT_UPDATE name `offcpu-time`; each sample's fields in its raw
/// data, `u32 size` then u64s `[pid word][period][nr][PERF_CONTEXT_USER, ips…][cgroup id]` and 4
/// bytes of padding (the kernel pads a BPF output's raw data to 8 with its size). Every other
/// sample is a direct dump (`off_cpu_dump()` in `util/bpf_skel/off_cpu.bpf.c`: the switch-in's
/// time, pid word `tgid << 32 | pid`); the rest are what `off_cpu_write()` in
/// `util/bpf_off_cpu.c` writes at the end of the recording (ip, tid, period 0, time
/// `OFF_CPU_TIMESTAMP` counting up, pid word `pid << 32 | tgid`), moved to the end. The period is
/// made from the sample's time: 1–997 µs. With `at_end` false, every sample is a direct dump.
/// Returns the stream and the sum of the periods.
pub(crate) fn offcpu_raw(input: &[u8], at_end_too: bool) -> (Vec<u8>, u64) {
    offcpu_raw_named(input, at_end_too, b"offcpu-time\0\0\0\0\0")
}

/// [`offcpu_raw`] with the event named `name` (NUL-padded to 8).
fn offcpu_raw_named(input: &[u8], at_end_too: bool, name: &[u8]) -> (Vec<u8>, u64) {
    let recs = records(input);
    let t = only_attr(&recs);
    assert!(t & PERIOD != 0 && t & TIME != 0 && t & CALLCHAIN != 0 && t & IP != 0);
    let mut out = input[..16].to_vec();
    let mut at_end = Vec::new();
    let (mut total, mut n) = (0u64, 0u64);
    for (ty, _, mut rec) in recs {
        match ty {
            64 => {
                rec[8..12].copy_from_slice(&1u32.to_le_bytes()); // PERF_TYPE_SOFTWARE
                rec[16..24].copy_from_slice(&10u64.to_le_bytes()); // PERF_COUNT_SW_BPF_OUTPUT
                let st = (t & !CALLCHAIN) | RAW;
                rec[8 + 24..8 + 32].copy_from_slice(&st.to_le_bytes());
            }
            // EVENT_UPDATE NAME (type 2): the event perf --off-cpu names.
            78 if u64_at(&rec, 8) == 2 => {
                rec.truncate(24);
                rec.extend_from_slice(name);
                let size = rec.len() as u16;
                rec[6..8].copy_from_slice(&size.to_le_bytes());
            }
            9 => {
                let (tid_at, period, nr_at, _) = sample_fields(t, &rec);
                let p_at = period.unwrap();
                let ip_at = 8 + 8 * usize::from(t & IDENTIFIER != 0);
                let nr = u64_at(&rec, nr_at) as usize;
                let ips: Vec<u64> = (0..nr).map(|i| u64_at(&rec, nr_at + 8 + 8 * i)).collect();
                let Some(k) = ips.iter().position(|&ip| ip == CONTEXT_USER) else {
                    continue;
                };
                let user = &ips[k + 1..];
                let pid = u64::from(u32::from_le_bytes(
                    rec[tid_at..tid_at + 4].try_into().unwrap(),
                ));
                let tid = u64::from(u32::from_le_bytes(
                    rec[tid_at + 4..tid_at + 8].try_into().unwrap(),
                ));
                let time = u64_at(&rec, tid_at + 8);
                let ns = (time % 997 + 1) * 1000;
                total += ns;
                n += 1;
                let direct = !at_end_too || n % 2 == 1;
                let word = if direct {
                    pid << 32 | tid
                } else {
                    tid << 32 | pid
                };
                let mut raw = Vec::new();
                for w in [word, ns, user.len() as u64 + 1, CONTEXT_USER] {
                    raw.extend_from_slice(&w.to_le_bytes());
                }
                for ip in user {
                    raw.extend_from_slice(&ip.to_le_bytes());
                }
                raw.extend_from_slice(&0u64.to_le_bytes()); // the cgroup id
                let mut s = rec[..nr_at].to_vec();
                s[p_at..p_at + 8].copy_from_slice(&0u64.to_le_bytes());
                if !direct {
                    s[ip_at..ip_at + 8].copy_from_slice(&0u64.to_le_bytes());
                    s[tid_at..tid_at + 8].copy_from_slice(&0u64.to_le_bytes());
                    let dummy = OFF_CPU_TIMESTAMP + at_end.len() as u64;
                    s[tid_at + 8..tid_at + 16].copy_from_slice(&dummy.to_le_bytes());
                }
                s.extend_from_slice(&(raw.len() as u32 + 4).to_le_bytes());
                s.extend_from_slice(&raw);
                s.extend_from_slice(&[0; 4]);
                s.extend_from_slice(&rec[nr_at + 8 + 8 * nr..]);
                let size = s.len() as u16;
                s[6..8].copy_from_slice(&size.to_le_bytes());
                if direct {
                    out.extend_from_slice(&s);
                } else {
                    at_end.push(s);
                }
                continue;
            }
            _ => {}
        }
        out.extend_from_slice(&rec);
    }
    for s in at_end {
        out.extend_from_slice(&s);
    }
    (out, total)
}

pipetest!(needs(perf, cc, inferno, trixie)
    /// perf ≥ 6.15's `offcpu-time` samples, their fields in raw data ([`offcpu_raw`]): perf 7.3
    /// reads the stream as the layout says (its report's total is the raw periods' sum, its
    /// script gives each sample the raw stack); `--weight offcpu` charges each its raw period on
    /// its raw stack as 7.3 does; `--stitch` writes them with their callchains, so perf 6.1 (which
    /// does not read raw data) sees what 7.3 sees. The samples `off_cpu_write()` puts at the end
    /// are of threads that exited before: perf 7.3 has removed them (`:PID`, `[unknown]`);
    /// perfpipe, which keeps the maps by time, names their frames as perf 6.1 (which keeps exited
    /// threads) names them in our `--stitch` output: the same total, none unknown.
    offcpu_time_raw_samples_are_read_as_perf7_reads_them, |dir| {
    let p7 = perf7();
    let argv = fp(&dir, true);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let input = p7.record(&["-e", "cpu-clock", "-F", "4000", "-g"], &argv);
    let ours_of = |off: &[u8]| {
        let out = perfpipe(&["--weight", "offcpu", "--stats", "-o", dir.path("off.folded").to_str().unwrap()], off);
        let stats = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stats}");
        assert!(counter(&stats, "offcpu_assembled") > 0 && counter(&stats, "offcpu_unassembled") == 0, "{stats}");
        std::fs::read_to_string(dir.path("off.folded")).unwrap().replace("[off-cpu: S|D];", "")
    };
    let sum = |folded: &str| crate::oracle::parse(folded).values().sum::<u64>();
    for at_end in [false, true] {
        let (off, total) = offcpu_raw(&input, at_end);
        assert!(total > 0);
        let attrs = p7.on(&["evlist", "-v"], &off);
        assert!(attrs.contains("BPF_OUTPUT") && attrs.contains("RAW") && !attrs.contains("CALLCHAIN"), "{attrs}");
        let report = p7.on(&["report", "--stdio", "--no-children", "--sort", "comm", "-F", "period,comm"], &off);
        let reported: u64 = report
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
            .sum();
        assert_eq!(reported, total, "{report}");
        assert!(report.contains("of event 'offcpu-time'"), "{report}");
        let theirs = folded_by(&p7, Input::Bytes(&off));
        eqnice!(total, sum(&theirs));
        let ours = ours_of(&off);
        eqnice!(total, sum(&ours));
        let stitched = perfpipe_ok(&["--stitch"], &off);
        // Batches of 64 bytes (a record split across batches at every point) change nothing.
        assert!(stitched == perfpipe_ok(&["--stitch", "--batch-size", "64"], &off));
        // (Named fields: perf 6.1's default ones dump the raw data, bytes that are no text.)
        let by_61 = collapse(&oracle().on(&["script", "-F", "comm,tid,time,period,event,ip,sym,dso"], &stitched), &[]);
        eqnice!(theirs, folded_by(&p7, Input::Bytes(&stitched)));
        if !at_end {
            assert_agrees("perf 6.1 on --stitch of raw-data offcpu-time samples", &by_61, &theirs);
            assert_agrees("--weight offcpu of raw-data offcpu-time samples", &ours, &theirs);
        } else {
            // perf 6.1 keeps exited threads: it names the frames of those samples as we do.
            assert_agrees("samples written at the end: ours vs perf 6.1 on --stitch", &ours, &by_61);
            let lost: u64 = crate::oracle::parse(&theirs).iter().filter(|(k, _)| k.starts_with(':')).map(|(_, v)| v).sum();
            assert!(lost > 0, "perf 7.3 resolved the samples of exited threads:\n{theirs}");
            let unresolved: u64 = crate::oracle::parse(&ours).iter().filter(|(k, _)| k.starts_with(':')).map(|(_, v)| v).sum();
            assert_eq!(unresolved, 0, "ours has samples of threads it does not know:\n{ours}");
        }
    }
    // The same raw data in another BPF output event is no off-CPU time: perf 7.3 charges nothing
    // to a stack of it, and neither do we (its samples get an empty callchain, not the raw one).
    let (other, _) = offcpu_raw_named(&input, false, b"bpf-output\0\0\0\0\0\0");
    let out = perfpipe(&["--weight", "offcpu", "--stats", "--folded"], &other);
    let stats = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stats}");
    assert_eq!(counter(&stats, "offcpu_assembled"), 0, "{stats}");
    assert_eq!(counter(&stats, "offcpu_intervals"), 0, "{stats}");
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    let script = p7.on(&["script", "-F", "comm,tid,time,event,ip,sym"], &other);
    // (7.3 reads no callchain out of it: each sample is its own ip, no frame lines under it.)
    assert!(
        script.contains("bpf-output") && !script.lines().any(|l| l.starts_with('\t')),
        "{script:.2000}"
    );
});

// ---------------------------------------------------------------------------------------------
// Every profile output of perf 7.x recordings against what perf 7.3 itself says of them.

/// Where perf 7.3 runs: on this machine's files (`perf7()`), or inside the trixie root (the
/// recording's files are the root's: perfpipe reads them through `--symfs ROOT`).
#[derive(Clone, Copy, Debug)]
enum At {
    Host,
    Root,
}

/// perf 7.3's `perf ARGS -i -` on `rec`, where `at` says.
fn perf7_at(at: At, args: &[&str], rec: &[u8]) -> String {
    let out = match at {
        At::Host => run(perf7().command().args(args).args(["-i", "-"]), rec),
        At::Root => {
            let mut all = vec!["/usr/bin/perf"];
            all.extend_from_slice(args);
            all.extend_from_slice(&["-i", "-"]);
            run(&mut in_trixie(&all), rec)
        }
    };
    assert!(
        out.status.success(),
        "perf 7.3 {args:?} ({at:?}): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The frames of an SVG flame graph (`<title>NAME (N samples, P%)</title>`): each name's
/// samples summed over its frames.
fn svg_titles(svg: &str) -> std::collections::BTreeMap<String, u64> {
    let mut m = std::collections::BTreeMap::new();
    for t in svg.split("<title>").skip(1) {
        let Some((t, _)) = t.split_once("</title>") else {
            continue;
        };
        let Some((name, rest)) = t.rsplit_once(" (") else {
            continue;
        };
        let Some(n) = rest
            .split_once(' ')
            .and_then(|(n, _)| n.replace(',', "").parse::<u64>().ok())
        else {
            continue;
        };
        *m.entry(name.to_string()).or_default() += n;
    }
    m
}

/// `go tool pprof -traces` of a profile, by sample count, as folded stacks `comm;root;…;leaf N`.
fn pprof_traces(profile: &Path) -> String {
    let out = Command::new("go")
        .args([
            "tool",
            "pprof",
            "-traces",
            "-sample_index=cpu-clock_samples",
        ])
        .arg(profile)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut folded = String::new();
    for block in text
        .split("-----------+-------------------------------------------------------")
        .skip(1)
    {
        let (mut comm, mut count, mut frames) = (String::new(), 0u64, Vec::new());
        for line in block.lines().filter(|l| !l.trim().is_empty()) {
            let t = line.trim();
            if let Some(c) = t.strip_prefix("comm:") {
                comm = c.trim().to_string();
            } else if t.contains(':')
                && frames.is_empty()
                && !t.starts_with(|c: char| c.is_ascii_digit())
            {
                // Other labels (pid, tid).
            } else if frames.is_empty() {
                let (n, f) = t.split_once(char::is_whitespace).unwrap_or((t, ""));
                count = n
                    .parse()
                    .unwrap_or_else(|_| panic!("a trace's count: {line:?}"));
                frames.push(f.trim().to_string());
            } else {
                frames.push(t.to_string());
            }
            // pprof names a location without a function by its mapping, in brackets: ours of
            // an address in no map is the mapping `[unknown]`, which perf names `[unknown]`.
            if let Some(last) = frames.last_mut() {
                if last.starts_with("[[") && last.ends_with("]]") {
                    *last = last[1..last.len() - 1].to_string();
                }
            }
        }
        if count > 0 {
            frames.reverse();
            folded.push_str(&format!("{comm};{} {count}\n", frames.join(";")));
        }
    }
    folded
}

/// The Firefox profile's samples as folded stacks `thread name;root;…;leaf N` (each sample its
/// weight, 1 where the profile gives none).
fn firefox_folded(gz: &Path) -> String {
    let doc: serde_json::Value =
        serde_json::from_slice(&crate::export::gunzip(&std::fs::read(gz).unwrap())).unwrap();
    let mut stacks = std::collections::BTreeMap::<String, u64>::new();
    for t in doc["threads"].as_array().expect("threads") {
        let strings = t["stringArray"].as_array().expect("stringArray");
        let (st, ft, fu) = (&t["stackTable"], &t["frameTable"], &t["funcTable"]);
        let name_of_frame = |f: usize| -> String {
            let func = ft["func"][f].as_u64().unwrap() as usize;
            let s = fu["name"][func].as_u64().unwrap() as usize;
            strings[s].as_str().unwrap().to_string()
        };
        let samples = &t["samples"];
        let n = samples["length"].as_u64().unwrap() as usize;
        for i in 0..n {
            let weight = samples["weight"]
                .get(i)
                .and_then(|w| w.as_u64())
                .unwrap_or(1);
            let mut frames = Vec::new();
            let mut s = samples["stack"][i].as_u64();
            while let Some(at) = s {
                frames.push(name_of_frame(
                    st["frame"][at as usize].as_u64().unwrap() as usize
                ));
                s = st["prefix"][at as usize].as_u64();
            }
            frames.push(t["name"].as_str().unwrap().to_string());
            frames.reverse();
            *stacks.entry(frames.join(";")).or_default() += weight;
        }
    }
    stacks.iter().map(|(k, v)| format!("{k} {v}\n")).collect()
}

/// Every profile output of `rec` (read by perfpipe with `extra`) against perf 7.3 `at`:
/// folded stacks and the SVG flame graph against `perf script --no-inline |
/// inferno-collapse-perf` (and `inferno-flamegraph` of it), by period; pprof (`go tool pprof
/// -traces`) and the Firefox profile's samples against the same by sample count; the Parquet
/// rows' pid, tid, time (ns) and period against `perf script -F pid,tid,time,period --ns`, one
/// row per sample, and their leaf function against `-G -F tid,time,ip,sym` where perf names one.
fn outputs_agree(dir: &Dir, what: &str, rec: &[u8], at: At, extra: &[&str]) {
    let input = dir.write("rec.data", rec);
    let ours = |out: &str| -> PathBuf {
        let path = dir.path(out);
        let mut args = vec!["-i", input.to_str().unwrap(), "-o", path.to_str().unwrap()];
        args.extend_from_slice(extra);
        perfpipe_ok(&args, b"");
        path
    };
    // Folded stacks and the flame graph, by period.
    let theirs = collapse(&perf7_at(at, &["script", "--no-inline"], rec), &[]);
    let folded = std::fs::read_to_string(ours("out.folded")).unwrap();
    assert_agrees(&format!("{what}: folded"), &folded, &theirs);
    let svg = std::fs::read_to_string(ours("out.svg")).unwrap();
    let flamegraph = run(&mut Command::new("inferno-flamegraph"), theirs.as_bytes());
    assert!(flamegraph.status.success());
    let (a, b) = (
        svg_titles(&svg),
        svg_titles(&String::from_utf8_lossy(&flamegraph.stdout)),
    );
    let same: u64 = a
        .iter()
        .map(|(k, v)| (*v).min(b.get(k).copied().unwrap_or(0)))
        .sum();
    let all = a.values().sum::<u64>().max(b.values().sum::<u64>());
    assert!(
        a.len() > 10,
        "{what}: {} functions in the flame graph",
        a.len()
    );
    assert!(
        same * 1000 >= all * 999,
        "{what}: {same} of {all} samples of the flame graphs' frames alike; ours only: {:?}",
        a.keys()
            .filter(|k| !b.contains_key(*k))
            .take(10)
            .collect::<Vec<_>>()
    );
    // pprof and the Firefox profile, by sample count.
    let counted = collapse(
        &perf7_at(
            at,
            &[
                "script",
                "--no-inline",
                "-F",
                "comm,tid,time,event,ip,sym,dso",
            ],
            rec,
        ),
        &[],
    );
    assert_agrees(
        &format!("{what}: go tool pprof -traces"),
        &pprof_traces(&ours("out.pb.gz")),
        &counted,
    );
    assert_agrees(
        &format!("{what}: Firefox profile samples"),
        &firefox_folded(&ours("out.json.gz")),
        &counted,
    );
    // Parquet: a row per sample with perf's fields.
    let parquet = ours("out.parquet");
    let f = parquet.display();
    let mut rows: Vec<String> = duckdb(&format!(
        "select pid, tid, time, period from '{f}' where off_cpu_end is null"
    ))
    .lines()
    .map(|l| l.replace('|', " "))
    .collect();
    let mut want: Vec<String> = perf7_at(
        at,
        &["script", "-G", "-F", "pid,tid,time,period", "--ns"],
        rec,
    )
    .lines()
    .filter(|l| !l.trim().is_empty())
    .map(|l| {
        let w: Vec<&str> = l
            .split(|c: char| c.is_whitespace() || c == '/' || c == ':')
            .filter(|w| !w.is_empty())
            .collect();
        let ns = w[2].replace('.', "").trim_start_matches('0').to_string();
        format!("{} {} {ns} {}", w[0], w[1], w[3])
    })
    .collect();
    rows.sort();
    want.sort();
    assert!(want.len() > 100, "{what}: {} samples", want.len());
    eqnice!(want, rows);
    let leaf = |l: &str| -> Option<(String, String)> {
        let (key, f) = l.rsplit_once('|')?;
        Some((key.to_string(), f.to_string()))
    };
    let ours_leaf: std::collections::BTreeMap<String, String> = duckdb(&format!(
        "select tid, time, list_filter(stack, lambda x: not x.inlined)[-1].function from '{f}' where off_cpu_end is null"
    ))
    .lines()
    .filter_map(leaf)
    .collect();
    let (mut named, mut alike) = (0, 0);
    for l in perf7_at(
        at,
        &[
            "script",
            "-G",
            "--no-inline",
            "-F",
            "tid,time,ip,sym",
            "--ns",
        ],
        rec,
    )
    .lines()
    {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.len() < 4 || w[3].starts_with('[') {
            continue;
        }
        let ns = w[1]
            .trim_end_matches(':')
            .replace('.', "")
            .trim_start_matches('0')
            .to_string();
        named += 1;
        let sym = w[3];
        if ours_leaf
            .get(&format!("{}|{ns}", w[0]))
            .is_some_and(|o| o == sym)
        {
            alike += 1;
        }
    }
    assert!(
        named > 100 && alike * 1000 >= named * 999,
        "{what}: {alike} of {named} leaf functions alike"
    );
}

pipetest!(needs(perf, cc, inferno, go, duckdb, trixie)
    /// Recordings by perf 7.3 on this machine (`-g` of `fp.c` with frame pointers, `--call-graph
    /// dwarf` of it without, read with `--unwind`), with 7.x's defaults (build ids in every
    /// MMAP2): every profile output against 7.3's own `perf script` ([`outputs_agree`]). Deferred
    /// callchains (`--call-graph fp,defer`) where this kernel records them.
    perf7_host_recordings_every_output_as_perf7_says, |dir| {
    let p7 = perf7();
    let with_fp = fp(&dir, true);
    let with_fp: Vec<&str> = with_fp.iter().map(String::as_str).collect();
    let g = p7.record(&["-e", "cpu-clock", "-F", "4000", "-g"], &with_fp);
    assert!(records(&g).iter().any(|r| r.0 == 10 && r.1 & 0x4000 != 0), "7.x wrote no MMAP2 with a build id");
    outputs_agree(&dir, "perf 7.3 -g", &g, At::Host, &[]);
    let without = fp(&dir, false);
    let without: Vec<&str> = without.iter().map(String::as_str).collect();
    let dwarf = p7.record(&["-e", "cpu-clock", "-F", "4000", "--call-graph", "dwarf"], &without);
    outputs_agree(&dir, "perf 7.3 --call-graph dwarf", &dwarf, At::Host, &["--unwind"]);
    let defer = p7
        .command()
        .args(["record", "-e", "cpu-clock", "-F", "4000", "--call-graph", "fp,defer", "-o", "-", "--"])
        .args(&with_fp)
        .output()
        .unwrap();
    if defer.status.success() && records(&defer.stdout).iter().any(|r| r.0 == 22) {
        outputs_agree(&dir, "perf 7.3 --call-graph fp,defer", &defer.stdout, At::Host, &[]);
    } else {
        eprintln!(
            "perf 7.3 --call-graph fp,defer: this kernel ({}) writes no deferred callchains: {}",
            String::from_utf8_lossy(&Command::new("uname").arg("-r").output().unwrap().stdout).trim(),
            String::from_utf8_lossy(&defer.stderr).lines().last().unwrap_or("")
        );
    }
});

pipetest!(needs(perf, cc, inferno, go, duckdb, trixie)
    /// Recordings by perf 7.3 inside the trixie root (another userland: glibc 2.41), `-g` and
    /// `--call-graph dwarf` (`--unwind`): every profile output, perfpipe on the host reading the
    /// root's files through `--symfs ROOT`, against 7.3's `perf script` inside the root.
    perf7_recordings_in_the_trixie_root_every_output_as_perf7_says, |dir| {
    let r = crate::containers::InRoot::new("perf7-outputs");
    let root = crate::needs::trixie_root();
    let root = root.to_str().unwrap();
    for (frame_pointers, args, extra) in [
        (true, &["-g"][..], &["--symfs", root][..]),
        (false, &["--call-graph", "dwarf"][..], &["--symfs", root, "--unwind"][..]),
    ] {
        let argv = fp(&dir, frame_pointers);
        let (inside, host) = r.file("fp");
        std::fs::copy(&argv[0], &host).unwrap();
        let rec = crate::containers::record_inside(args, &[&inside, &argv[1]]);
        outputs_agree(&dir, &format!("perf 7.3 {args:?} inside the root"), &rec, At::Root, extra);
    }
});

//! File-mode `perf.data` in and out: file → pipe, pipe → file and file → file are stage-less runs
//! that keep every record; every reader (perf 6.1 and 6.12) reads our file output as it reads the
//! input, header features included; malformed files give an error that names the offset.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use perfpipe_stream::format::{Endian, EventHeader, RecordType};
use perfpipe_stream::read::file::{synthesized_in_pipe, FileHeader, FileSection};

use crate::readers::{self, perf_file, Input};
use crate::util::{fixture, fixture_bytes, oracle, perfpipe, readers, run, workload, Dir, Perf};

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "perfpipe failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `perfpipe ARGS` with no standard input; asserts success.
fn pp(args: &[&str]) -> Output {
    let out = perfpipe(args, b"");
    ok(&out);
    out
}

fn bytes_of<'a>(file: &'a [u8], sec: &FileSection) -> &'a [u8] {
    &file[sec.offset as usize..(sec.offset + sec.size) as usize]
}

/// The data section of a file-mode perf.data.
fn data_section(file: &[u8]) -> &[u8] {
    let h = FileHeader::parse(file).expect("a file-mode header");
    bytes_of(file, &h.data)
}

/// The feature sections of a file-mode perf.data, by id.
fn features(file: &[u8]) -> Vec<(u32, Vec<u8>)> {
    let h = FileHeader::parse(file).expect("a file-mode header");
    h.feature_sections(file)
        .expect("feature sections in bounds")
        .iter()
        .map(|(f, sec)| (*f, bytes_of(file, sec).to_vec()))
        .collect()
}

/// The records of a pipe stream that a file keeps in its data section: all but the pipe header,
/// HEADER_ATTR, HEADER_FEATURE, HEADER_TRACING_DATA (with its blob), HEADER_BUILD_ID and the
/// EVENT_UPDATEs of type NAME.
fn data_records(pipe: &[u8]) -> Vec<u8> {
    let e = if pipe[..8] == *b"PERFILE2" {
        Endian::Little
    } else {
        Endian::Big
    };
    let mut out = Vec::new();
    let mut pos = 16;
    while pos < pipe.len() {
        let h = EventHeader::parse(&pipe[pos..], e).expect("record header");
        let mut len = usize::from(h.size);
        let t = RecordType(h.type_);
        if t == RecordType::HEADER_TRACING_DATA {
            len += e.u32(pipe, pos + 8).unwrap() as usize;
        }
        let header = [
            RecordType::HEADER_ATTR,
            RecordType::HEADER_FEATURE,
            RecordType::HEADER_TRACING_DATA,
            RecordType::HEADER_BUILD_ID,
        ]
        .contains(&t);
        // EVENT_UPDATE NAME: a file names its events in EVENT_DESC.
        let name = t == RecordType::EVENT_UPDATE && e.u64(pipe, pos + 8) == Some(2);
        if !header && !name {
            out.extend_from_slice(&pipe[pos..pos + len]);
        }
        pos += len;
    }
    out
}

/// Files in `dir` whose name marks a temporary output.
fn temp_files(dir: &Dir) -> Vec<PathBuf> {
    std::fs::read_dir(dir.path(""))
        .unwrap()
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.to_string_lossy().ends_with(".tmp"))
        .collect()
}

pipetest!(
    /// File → pipe: a pipe stream whose records after the synthesized preamble are the data
    /// section, byte for byte; whatever the input file is called.
    file_to_pipe_ends_with_the_data_section, |dir| {
    let input = fixture_bytes("plain.file.data");
    let out = pp(&["-i", s(&fixture("plain.file.data"))]);
    assert_eq!(&out.stdout[..8], b"PERFILE2");
    assert_eq!(&out.stdout[8..16], &16u64.to_le_bytes());
    assert!(out.stdout.ends_with(data_section(&input)));
    // The build-id table (7 entries) became BUILD_ID records, the attr a HEADER_ATTR.
    let named = dir.write("looks-like.pipe", &input);
    let again = pp(&["-i", s(&named)]);
    eqnice!(out.stdout, again.stdout);
});

pipetest!(
    /// File → file keeps the data section byte for byte and every feature section that has a
    /// pipe form (perf sends CACHE, BRANCH_STACK, AUXTRACE, STAT, DIR_FORMAT, HYBRID_TOPOLOGY
    /// nowhere in a pipe), with the same bytes; the build-id table is rebuilt to the same size.
    file_to_file_keeps_data_and_features, |dir| {
    let input = fixture_bytes("plain.file.data");
    let out = dir.path("out.data");
    pp(&["-i", s(&fixture("plain.file.data")), "-o", s(&out)]);
    let got = std::fs::read(&out).unwrap();
    eqnice!(data_section(&input), data_section(&got));
    let want: Vec<(u32, Vec<u8>)> = features(&input)
        .into_iter()
        .filter(|(f, _)| *f <= 2 || synthesized_in_pipe(*f))
        .collect();
    let have = features(&got);
    eqnice!(
        want.iter().map(|(f, _)| *f).collect::<Vec<_>>(),
        have.iter().map(|(f, _)| *f).collect::<Vec<_>>()
    );
    for ((f, a), (_, b)) in want.iter().zip(&have) {
        if *f == 2 {
            assert_eq!(a.len(), b.len(), "BUILD_ID table size");
        } else {
            assert!(a == b, "feature {f} differs");
        }
    }
    assert!(temp_files(&dir).is_empty(), "{:?}", temp_files(&dir));
});

pipetest!(
    /// file → pipe → file → pipe: the two pipes are identical, and a file written again from our
    /// own file is identical to it.
    round_trips_are_stable, |dir| {
    for name in ["plain.file.data", "tracepoint.file.data"] {
        let (p1, f2, f3) = (dir.path("p1"), dir.path("f2.data"), dir.path("f3.data"));
        pp(&["-i", s(&fixture(name)), "-o", s(&p1), "--pipe"]);
        pp(&["-i", s(&p1), "-o", s(&f2)]);
        let p2 = pp(&["-i", s(&f2)]).stdout;
        assert!(std::fs::read(&p1).unwrap() == p2, "{name}: pipes differ");
        pp(&["-i", s(&f2), "-o", s(&f3)]);
        assert!(std::fs::read(&f2).unwrap() == std::fs::read(&f3).unwrap(), "{name}");
        assert_eq!(data_section(&fixture_bytes(name)), data_section(&std::fs::read(&f2).unwrap()));
    }
});

pipetest!(
    /// Tracepoint recordings keep their tracing data: a HEADER_TRACING_DATA record and its blob
    /// in the pipe, the TRACING_DATA feature (padded to 8) in the file.
    tracing_data_survives, |dir| {
    let input = fixture_bytes("tracepoint.file.data");
    let pipe = pp(&["-i", s(&fixture("tracepoint.file.data"))]).stdout;
    let at = pipe
        .windows(10)
        .position(|w| w == b"\x17\x08\x44tracing")
        .expect("tracing blob in the pipe");
    assert_eq!(&pipe[at - 16..at - 12], &66u32.to_le_bytes());
    let out = dir.path("out.data");
    pp(&["-i", s(&fixture("tracepoint.file.data")), "-o", s(&out)]);
    let theirs = features(&input).into_iter().find(|(f, _)| *f == 1).unwrap().1;
    let ours = features(&std::fs::read(&out).unwrap())
        .into_iter()
        .find(|(f, _)| *f == 1)
        .expect("TRACING_DATA feature")
        .1;
    assert_eq!(ours.len(), theirs.len().next_multiple_of(8));
    assert!(ours.starts_with(&theirs));
});

pipetest!(
    /// Pipe → file puts the attrs, features and build ids in the header and every other record,
    /// byte for byte, in the data section; little- and big-endian.
    pipe_to_file_moves_header_records_out_of_the_data, |dir| {
    for name in ["cpu-clock.pipe.data", "tracepoint.pipe.data", "bigendian.pipe.data"] {
        let out = dir.path("out.data");
        pp(&["-i", s(&fixture(name)), "-o", s(&out)]);
        let file = std::fs::read(&out).unwrap();
        let h = FileHeader::parse(&file).unwrap();
        assert_eq!(h.endian == Endian::Big, name.starts_with("big"), "{name}");
        assert_eq!(h.attrs.size, h.attr_size, "{name}: one attr");
        assert!(data_section(&file) == data_records(&fixture_bytes(name)), "{name}");
        assert!(features(&file).len() >= 18, "{name}");
    }
});

pipetest!(
    /// `--pipe` writes pipe mode to a regular file, a device gets pipe mode, `--file` needs a file.
    output_mode_flags, |dir| {
    let input = fixture("plain.file.data");
    let out = dir.path("x.data");
    pp(&["-i", s(&input), "-o", s(&out), "--pipe"]);
    assert_eq!(&std::fs::read(&out).unwrap()[8..16], &16u64.to_le_bytes());
    pp(&["-i", s(&input), "-o", "/dev/null"]);
    let bad = perfpipe(&["-i", s(&input), "--file"], b"");
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--file"));
    // `perfpipe inject` decides as perf inject does: a file in, a regular file out → file mode.
    let inj = dir.path("inj.data");
    pp(&["inject", "-i", s(&input), "-o", s(&inj)]);
    assert_eq!(&std::fs::read(&inj).unwrap()[8..16], &104u64.to_le_bytes());
});

/// Runs perfpipe on a damaged copy of `plain.file.data`; expects exit 1 with `needle` and
/// `offset N` in the message, no panic, and no output file or temporary file left.
fn damaged(dir: &Dir, bytes: &[u8], offset: u64, needle: &str) {
    let input = dir.write("bad.data", bytes);
    let out = dir.path("out.data");
    let r = perfpipe(&["-i", s(&input), "-o", s(&out)], b"");
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains(&format!("offset {offset}")),
        "want offset {offset}: {err}"
    );
    assert!(err.contains(needle), "want {needle:?}: {err}");
    assert!(
        !out.exists(),
        "an output was left for a file that could not be read"
    );
    assert!(temp_files(dir).is_empty(), "{:?}", temp_files(dir));
}

pipetest!(
    /// Malformed file-mode input: a clear error naming the offset, never a panic.
    malformed_files_name_the_offset, |dir| {
    let good = fixture_bytes("plain.file.data");
    let h = FileHeader::parse(&good).unwrap();
    let put = |b: &mut Vec<u8>, at: u64, v: u64| {
        b[at as usize..at as usize + 8].copy_from_slice(&v.to_le_bytes())
    };
    damaged(&dir, &good[..60], 0, "truncated");
    let data_end = h.data.offset + h.data.size;
    damaged(&dir, &good[..data_end as usize - 100], 40, "data section");
    damaged(&dir, &good[..data_end as usize + 8], 40, "feature table");
    let mut b = good.clone();
    put(&mut b, 24, 1 << 40);
    damaged(&dir, &b, 24, "attrs section");
    let mut b = good.clone();
    put(&mut b, h.attrs.offset + h.attr_size - 16, 1 << 40);
    damaged(&dir, &b, h.attrs.offset + h.attr_size - 16, "ids of attr 0");
    let mut b = good.clone();
    put(&mut b, 16, 12);
    damaged(&dir, &b, 16, "attr_size");
    let feats = h.feature_sections(&good).unwrap();
    let k = feats.iter().position(|(f, _)| *f == 3).unwrap() as u64;
    let mut b = good.clone();
    put(&mut b, data_end + 16 * k + 8, 1 << 40);
    damaged(&dir, &b, data_end + 16 * k, "feature HOSTNAME");
});

pipetest!(
    /// A bad record in the data section is reported at its offset in the file, after every
    /// record before it has been written.
    bad_record_offsets_are_file_offsets, |dir| {
    let good = fixture_bytes("plain.file.data");
    let h = FileHeader::parse(&good).unwrap();
    let at = h.data.offset + 64 * 8; // inside the data: find the record boundary there
    let mut pos = h.data.offset;
    while pos < at {
        pos += u64::from(u16::from_le_bytes([good[pos as usize + 6], good[pos as usize + 7]]));
    }
    let mut b = good.clone();
    b[pos as usize + 6..pos as usize + 8].copy_from_slice(&0u16.to_le_bytes());
    let input = dir.write("bad.data", &b);
    let r = perfpipe(&["-i", s(&input), "--pipe"], b"");
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("offset {pos}")), "want offset {pos}: {err}");
    assert!(r.stdout.ends_with(&good[h.data.offset as usize..pos as usize]));
});

// ---------------------------------------------------------------------------------------------
// Live recordings, checked with perf.

/// `perf ARGS -i FILE` with `perf`, stdout; asserts success and no processing errors.
fn read_file(perf: &Perf, args: &[&str], file: &Path) -> String {
    readers::read(perf, args, Input::File(file))
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

fn script(perf: &Perf, file: &Path) -> String {
    read_file(perf, &readers::SCRIPT, file)
}

/// `perf report --stats` without its `#` comment lines (which name the file).
fn stats(perf: &Perf, file: &Path) -> String {
    read_file(perf, &["report", "--stats"], file)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What `perf report --header-only` shows of a file: the name of each line (the text before its
/// `:`), e.g. `# cmdline`, `# CPU_TOPOLOGY info available, use -I to display`. CACHE is left out:
/// perf sends it nowhere in a pipe, so a file we write from one cannot have it.
fn header_lines(perf: &Perf, file: &Path) -> BTreeSet<String> {
    read_file(perf, &["report", "--header-only"], file)
        .lines()
        .filter(|l| l.starts_with("# ") && !l.starts_with("# ===") && !l.contains("CACHE info"))
        .map(|l| l.split(':').next().unwrap_or(l).trim().to_string())
        .collect()
}

/// Records a file with `args`, then checks that every reader (perf 6.1 and 6.12) sees the same in
/// our file-mode output, in a file → pipe → file round trip and (perf script) in the pipe, and
/// that `perf report --header-only` shows the same header lines (the features) for our files.
fn live(dir: &Dir, args: &[&str], work: &[&str]) {
    let input = dir.path("in.data");
    oracle().record_file(&input, args, work);
    let (out, pipe, back) = (dir.path("out.data"), dir.path("p"), dir.path("back.data"));
    pp(&["-i", s(&input), "-o", s(&out)]);
    pp(&["-i", s(&input), "-o", s(&pipe), "--pipe"]);
    pp(&["-i", s(&pipe), "-o", s(&back)]);
    for perf in readers() {
        let name = perf.name;
        let want = script(&perf, &input);
        assert!(want.lines().count() > 10, "{args:?}: a tiny recording");
        for f in [&out, &back, &pipe] {
            assert!(
                want == script(&perf, f),
                "{name} {args:?}: perf script differs on {}",
                f.display()
            );
        }
        let want = stats(&perf, &input);
        for f in [&out, &back] {
            eqnice!(want, stats(&perf, f));
        }
        let want = header_lines(&perf, &input);
        assert!(want.len() > 15, "{name}: {want:?}");
        for f in [&out, &back] {
            eqnice!(want, header_lines(&perf, f));
        }
    }
}

/// A live recording test; `tracefs` first for one that records tracepoints.
macro_rules! live_test {
    (tracefs $name:ident, $args:expr, $work:expr) => {
        live_test!(@(perf, perf612, tracefs) $name, $args, $work);
    };
    ($name:ident, $args:expr, $work:expr) => {
        live_test!(@(perf, perf612) $name, $args, $work);
    };
    (@($($need:ident),+) $name:ident, $args:expr, $work:expr) => {
        pipetest!(needs($($need),+) $name, |dir| {
            let w = workload();
            let work: Vec<&str> = $work
                .iter()
                .map(|a| if *a == "W" { w.as_str() } else { a })
                .collect();
            live(&dir, &$args, &work);
        });
    };
}

live_test!(
    live_plain,
    ["-e", "cpu-clock", "-c", "200000"],
    ["W", "single", "2"]
);
live_test!(
    live_callgraph,
    ["-e", "cpu-clock", "-c", "200000", "-g"],
    ["W", "single", "2"]
);
live_test!(
    tracefs live_tracepoint,
    ["-e", "sched:sched_switch"],
    ["W", "multi", "1"]
);
live_test!(
    live_compressed,
    ["-e", "cpu-clock", "-c", "200000", "-z"],
    ["W", "single", "2"]
);
live_test!(
    live_no_buildid,
    ["-e", "cpu-clock", "-c", "200000", "--no-buildid"],
    ["W", "single", "2"]
);
live_test!(
    live_buildid_mmap,
    ["-e", "cpu-clock", "-c", "200000", "--buildid-mmap"],
    ["W", "single", "2"]
);
live_test!(
    live_two_events,
    ["-e", "cpu-clock,task-clock", "-c", "200000"],
    ["W", "single", "1"]
);
live_test!(
    live_system_wide_switch,
    ["-a", "--switch-events", "-e", "cpu-clock", "-c", "200000"],
    ["sleep", "0.3"]
);

/// `perf buildid-list` lines as (id, path) pairs.
fn buildids(file: &Path) -> Vec<(String, String)> {
    perf_file(&["buildid-list"], file)
        .lines()
        .filter_map(|l| {
            let (id, path) = l.split_once(' ')?;
            Some((id.to_string(), path.to_string()))
        })
        .collect()
}

pipetest!(needs(perf)
    /// `--buildid` on a file (recorded with `--no-buildid`) lists every build id that
    /// `perf inject -b -i in.data -o out.data` lists, `[vdso]` included: perf's table always
    /// lists it, and the buildid stage lists a vdso no sample hit at the end. Only a vdso that perf
    /// names after its own temporary copy (`/tmp/perf-vdso.so-XXXXXX`) cannot match by name.
    buildid_file_lists_what_perf_inject_lists, |dir| {
    let input = dir.path("in.data");
    oracle().record_file(&input, &["-e", "cpu-clock", "-c", "100000", "--no-buildid"], &[&workload(), "single", "2"]);
    let (ours, theirs) = (dir.path("ours.data"), dir.path("theirs.data"));
    pp(&["-i", s(&input), "-o", s(&ours), "--buildid"]);
    let r = run(Command::new("perf").args(["inject", "-b", "-i", s(&input), "-o", s(&theirs)]), b"");
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let ours = buildids(&ours);
    let theirs = buildids(&theirs);
    assert!(ours.len() >= 3, "{ours:?}");
    for pair in &theirs {
        if pair.1.starts_with("/tmp/perf-vdso.so-") {
            continue;
        }
        assert!(ours.contains(pair), "missing {pair:?}: ours {ours:?}, perf inject {theirs:?}");
    }
});

pipetest!(needs(perf)
    /// A big-endian pipe written as a file: perf 6.1 reads it (its feature readers swap), and
    /// `perf script` prints what it prints for the little-endian original; `perf report --stats`,
    /// which fails on the big-endian pipe, works on the file.
    bigendian_file_is_read_by_perf, |dir| {
    let out = dir.path("be.data");
    pp(&["-i", s(&fixture("bigendian.pipe.data")), "-o", s(&out)]);
    let le = dir.path("le.data");
    pp(&["-i", s(&fixture("cpu-clock.pipe.data")), "-o", s(&le)]);
    // Plain `perf script`: perf 6.1 does not swap MMAP2 prot/flags back (fixtures README).
    let plain = |f: &Path| perf_file(&["script"], f);
    assert!(plain(&out) == plain(&le), "perf script differs");
    eqnice!(stats(&oracle(), &le), stats(&oracle(), &out));
});

pipetest!(
    /// `perfpipe < perf.data` maps standard input when it is a regular file; a file-mode header
    /// arriving through a real pipe gets an error that says to use `-i FILE`.
    stdin_redirect_is_file_mode_and_a_pipe_is_not, |dir| {
    let input = fixture("plain.file.data");
    let out = dir.path("out.data");
    let r = Command::new(crate::util::bin())
        .args(["-o", s(&out)])
        .stdin(std::fs::File::open(&input).unwrap())
        .output()
        .unwrap();
    ok(&r);
    let (want, got) = (fixture_bytes("plain.file.data"), std::fs::read(&out).unwrap());
    assert!(data_section(&want) == data_section(&got));
    let piped = perfpipe(&["-o", "/dev/null"], &fixture_bytes("plain.file.data"));
    assert_eq!(piped.status.code(), Some(1));
    let err = String::from_utf8_lossy(&piped.stderr);
    assert!(err.contains("offset 0") && err.contains("-i FILE"), "{err}");
});

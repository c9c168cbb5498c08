//! Input written by current perf: recordings made by Debian's perf 6.12 (`--buildid-mmap`, `-g`,
//! `--call-graph dwarf`, `-z`, tracepoints, file mode, and the file with its attrs after the data
//! that 6.12's `perf inject -o FILE` writes from a pipe) and by perf 7.x (build ids in every MMAP2
//! by default, `--latency`, `-z`, `--call-graph dwarf`) go through perfpipe's stages and profile
//! outputs. Every reader reads what we make of them as it reads the recording, where it can read
//! the recording (perf 6.1 cannot read the attrs-after-data file: "incompatible file format"); the
//! folded stacks are checked against perf 6.1's names (`perf script | inferno-collapse-perf`)
//! where 6.1 reads the input, else against the workload's own functions; those of a perf 7.x
//! recording against perf 7.x's own `perf script`.

use std::path::Path;

use crate::export;
use crate::oracle::{assert_agrees, collapse, parse};
use crate::readers::{self, Input};
use crate::unwind;
use crate::util::*;
use crate::workloads;

fn s(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

pipetest!(needs(perf, perf612, trixie)
    /// Pipe recordings by perf 6.12 (`-g --buildid-mmap` of several processes, and `-z`): passed
    /// through byte for byte; `--buildid`, `--buildid-callchain` and `--mmap2-buildid-all` read by
    /// every reader as the recording (the ids the kernel put in the MMAP2s carried, not
    /// re-injected); `--decompress` read as the `-z` recording.
    perf612_pipe_recordings_through_the_stages, |_dir| {
    let p612 = perf612();
    let w = workload();
    let ids = p612.record(
        &["-e", "cpu-clock", "-c", "100000", "-g", "--buildid-mmap"],
        &[&w, "multi", "2"],
    );
    eqnice!(ids, perfpipe_ok(&[], &ids));
    for style in ["--buildid", "--buildid-callchain"] {
        let out = perfpipe_ok(&[style], &ids);
        readers::assert_every_reader_reads_like(style, Input::Stream(&ids), Input::Stream(&out));
    }
    // --mmap2-buildid-all gives the maps the kernel wrote without an id (the vdso's) theirs, so
    // their side-band lines differ: the frames must not.
    let out = perfpipe_ok(&["--mmap2-buildid-all"], &ids);
    readers::assert_every_reader_reads_like_with(
        "--mmap2-buildid-all",
        &["script", "-F", "comm,tid,ip,sym,dso"],
        Input::Stream(&ids),
        Input::Stream(&out),
    );
    let stats = perfpipe(&["inject", "--mmap2-buildid-all", "-v"], &ids);
    let err = String::from_utf8_lossy(&stats.stderr);
    assert!(stats.status.success(), "{err}");
    assert!(err.contains("mmap2_ids_carried") && !err.contains("mmap2_ids_carried = 0"), "{err}");

    let z = p612.record(&["-e", "cpu-clock", "-c", "100000", "-z"], &[&w, "multi", "2"]);
    eqnice!(z, perfpipe_ok(&[], &z));
    let plain = perfpipe_ok(&["--decompress"], &z);
    for perf in readers() {
        let (input, out) = (Input::Stream(&z), Input::Stream(&plain));
        let got = readers::same_script(&perf, &readers::SCRIPT, input, out);
        let got = count_samples(&got.unwrap_or_else(|e| panic!("-z: {e}")));
        assert!(got > 50, "{}: {got} samples", perf.name);
        eqnice!(got as u64, readers::samples(&perf, out).unwrap_or_else(|e| panic!("{e}")));
    }
    let out = perfpipe_ok(&["--buildid"], &z);
    readers::assert_every_reader_reads_like_with(
        "-z --buildid",
        &readers::SCRIPT,
        Input::Stream(&plain),
        Input::Stream(&perfpipe_ok(&["--decompress"], &out)),
    );
});

pipetest!(needs(perf, perf612, trixie, cc)
    /// A perf 6.12 `--call-graph dwarf` recording of a C workload without frame pointers:
    /// `--unwind` gives callchains that every reader resolves as it unwinds the recording itself.
    perf612_dwarf_recording_unwinds, |dir| {
    let argv = unwind::c_forking(&dir);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let rec = perf612().record(&["-e", "cpu-clock", "-F", "4000", "--call-graph", "dwarf"], &argv);
    let out = perfpipe_ok(&["--unwind"], &rec);
    assert!(out.len() * 10 <= rec.len(), "{} of {} bytes", out.len(), rec.len());
    for perf in readers() {
        let what = format!("perf 6.12's dwarf recording, {}", perf.name);
        let fraction = unwind::compare(&what, &perf.on(unwind::FIELDS, &rec), &perf.on(unwind::FIELDS, &out));
        assert!(fraction >= unwind::MIN_IDENTICAL, "{what}: {fraction}");
    }
});

pipetest!(needs(perf, perf612, trixie, tracefs)
    /// A perf 6.12 tracepoint recording: passed through byte for byte, and `--buildid` read by every
    /// reader's `perf script` and `perf report` as the recording (neither 6.1's nor 6.12's
    /// `report --stats` reads tracing data in a pipe).
    perf612_tracepoints, |_dir| {
    let rec = perf612().record(&["-e", "sched:sched_switch"], &[&workload(), "multi", "2"]);
    eqnice!(rec, perfpipe_ok(&[], &rec));
    let out = perfpipe_ok(&["--buildid"], &rec);
    for perf in readers() {
        let script = readers::same_script(&perf, &readers::SCRIPT, Input::Stream(&rec), Input::Stream(&out));
        assert!(count_samples(&script.unwrap_or_else(|e| panic!("{e}"))) > 0, "{}", perf.name);
        let report = readers::read(&perf, &["report", "--stdio"], Input::Stream(&out));
        assert!(report.unwrap_or_else(|e| panic!("{e}")).contains("sched:sched_switch"));
    }
});

pipetest!(needs(perf, perf612, trixie)
    /// perf 6.12's file mode: a `perf record -o FILE`, and the file 6.12's `perf inject -o FILE`
    /// makes of a pipe, with its attrs after the data. perf 6.1 reads neither (6.12's attrs are
    /// 136 bytes: "File uses a more recent and unsupported ABI (8 bytes extra)"). perfpipe turns
    /// both into a pipe and a file that perf 6.12 reads as it reads the recording, and the pipe
    /// into one perf 6.1 reads too, counting the same samples.
    perf612_file_mode_and_attrs_after_data, |dir| {
    let p612 = perf612();
    let w = workload();
    let recorded = dir.path("rec.data");
    p612.record_file(&recorded, &["-e", "cpu-clock", "-c", "100000", "-g"], &[&w, "multi", "1"]);
    let pipe = p612.record(&["-e", "cpu-clock", "-c", "100000", "-g"], &[&w, "multi", "1"]);
    let late = dir.path("late.data");
    let r = run(p612.command().args(["inject", "-i", "-", "-o", s(&late)]), &pipe);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let bytes = std::fs::read(&late).unwrap();
    assert!(le64(&bytes, 24) > le64(&bytes, 40), "perf 6.12 wrote the attrs before the data");
    for input in [&recorded, &late] {
        let what = input.display();
        let refused = readers::read(&oracle(), &readers::SCRIPT, Input::File(input));
        eprintln!("perf 6.1 on perf 6.12's {what}: {refused:?}");
        let (as_pipe, as_file) = (dir.path("ours.pipe"), dir.path("ours.data"));
        perfpipe_ok(&["-i", s(input), "-o", s(&as_pipe), "--pipe"], b"");
        perfpipe_ok(&["-i", s(input), "-o", s(&as_file)], b"");
        for ours in [&as_pipe, &as_file] {
            let n = readers::reads_like(&p612, Input::File(input), Input::File(ours));
            n.unwrap_or_else(|e| panic!("{what}: {e}"));
        }
        let n = readers::samples(&p612, Input::File(input)).unwrap();
        eqnice!(n, readers::assert_every_reader_accepts("ours", Input::File(&as_pipe)));
    }
});

pipetest!(needs(perf, perf612, trixie, cc, inferno)
    /// Folded stacks of perf 6.12 recordings of the frame-pointer C workload: from a pipe, against
    /// perf 6.1's `perf script | inferno-collapse-perf` (≥ 99.9 % of the weight); from the
    /// attrs-after-data file 6.12 makes of the same pipe, which 6.1 cannot read, the same stacks,
    /// and every function of the workload among them.
    perf612_profiles_name_what_perf_6_1_names, |dir| {
    let p612 = perf612();
    let w = workloads::frame_pointer_c(&dir);
    let rec = p612.record(&["-e", "cpu-clock", "-F", workloads::FREQ, "-g"], &w.argv());
    let folded = String::from_utf8(perfpipe_ok(&["--folded"], &rec)).unwrap();
    let theirs = collapse(&perf_on(&["script"], &rec), &[]);
    assert_agrees("perf 6.12 pipe recording: folded vs perf 6.1", &folded, &theirs);

    let late = dir.path("late.data");
    let r = run(p612.command().args(["inject", "-i", "-", "-o", s(&late)]), &rec);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let out = dir.path("late.folded");
    perfpipe_ok(&["-i", s(&late), "-o", s(&out)], b"");
    let from_file = std::fs::read_to_string(&out).unwrap();
    eqnice!(parse(&folded), parse(&from_file));
    for f in w.functions {
        let frame = format!(";{f};");
        let hit = |folded: &str| folded.lines().filter(|l| l.contains(&frame) || l.contains(&format!(";{f} "))).count();
        assert!(hit(&from_file) > 0, "{f} is not in the folded stacks:\n{from_file}");
    }
});

pipetest!(needs(perf, perf612, trixie)
    /// perf 6.12's `perf inject -b -o FILE` from a pipe writes a BUILD_ID feature section that
    /// overlaps the attrs it puts after the data, so its first entry is 0 bytes and 6.12's own
    /// `buildid-list` lists nothing. perfpipe reads it as perf does: the table up to the bad
    /// entry (none of it here), said on standard error and counted, then every sample; both
    /// perfs read the pipe it makes, 6.12 as it reads the file. (perfpipe refused the file.)
    perf612_inject_b_file_with_a_broken_build_id_table, |dir| {
    let p612 = perf612();
    let w = workload();
    let pipe = p612.record(&["-e", "cpu-clock", "-c", "100000", "-g"], &[&w, "multi", "1"]);
    let injected = dir.path("injected.data");
    let r = run(p612.command().args(["inject", "-b", "-i", "-", "-o", s(&injected)]), &pipe);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let as_pipe = dir.path("ours.pipe");
    let out = perfpipe(&["-i", s(&injected), "-o", s(&as_pipe), "--pipe", "--stats"], b"");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("BUILD_ID feature entry of") && err.contains("read up to there"), "{err}");
    assert_eq!(counter(&err, "file_build_id_tables_cut"), 1, "{err}");
    readers::reads_like(&p612, Input::File(&injected), Input::File(&as_pipe))
        .unwrap_or_else(|e| panic!("{e}"));
    let n = readers::samples(&p612, Input::File(&injected)).unwrap();
    eqnice!(n, readers::assert_every_reader_accepts("ours", Input::File(&as_pipe)));
});

/// The perf-format stages a recording goes through, each read by every reader as the input:
/// those that keep the side-band as it is (`SCRIPT` compares it), then those that rewrite maps
/// (compared by frames).
const STREAM_STAGES: [&[&str]; 5] = [
    &["--buildid"],
    &["--buildid-callchain"],
    &["--buildid-all"],
    &["--decompress"],
    &["--drop", "lost"],
];
const MAP_STAGES: [&[&str]; 3] = [
    &["--mmap2-buildid-all"],
    &["--mmap2-buildids"],
    &["--prune-sideband"],
];
const FRAMES: [&str; 3] = ["script", "-F", "comm,tid,ip,sym,dso"];

pipetest!(needs(perf, perf612, trixie)
    /// Pipe recordings by perf 7.x: `-g` of several processes (its MMAP2s carry build ids, the
    /// kernel's too) and `--latency` (context switches): passed through byte for byte; every
    /// perf-format stage read by every reader (6.1, 6.12, 7.x) as the recording. A `-z`
    /// recording, which perf 7 itself cannot read from a pipe ("Compressed events found but
    /// HEADER_COMPRESSED not set"), becomes with `--decompress` a stream all three read, with
    /// the same samples.
    perf7_pipe_recordings_through_the_stages, |_dir| {
    let p7 = perf7();
    let w = workload();
    let g = p7.record(&["-e", "cpu-clock", "-c", "100000", "-g"], &[&w, "multi", "1"]);
    let lat = p7.record(&["-e", "cpu-clock", "-c", "100000", "-g", "--latency"], &[&w, "multi", "1"]);
    for (what, rec) in [("-g", &g), ("--latency", &lat)] {
        eqnice!(*rec, perfpipe_ok(&[], rec));
        for args in STREAM_STAGES {
            let out = perfpipe_ok(args, rec);
            readers::assert_every_reader_reads_like(&format!("perf 7 {what}, {args:?}"), Input::Stream(rec), Input::Stream(&out));
        }
        for args in MAP_STAGES {
            let out = perfpipe_ok(args, rec);
            readers::assert_every_reader_reads_like_with(
                &format!("perf 7 {what}, {args:?}"),
                &FRAMES,
                Input::Stream(rec),
                Input::Stream(&out),
            );
        }
    }
    let z = p7.record(&["-e", "cpu-clock", "-c", "100000", "-g", "-z"], &[&w, "single", "2"]);
    eqnice!(z, perfpipe_ok(&[], &z));
    let refused = readers::read(&p7, &["report", "--stats"], Input::Stream(&z));
    eprintln!("perf 7 on its own -z pipe: {refused:?}");
    let plain = perfpipe_ok(&["--decompress"], &z);
    let n = readers::assert_every_reader_accepts("perf 7 -z, --decompress", Input::Stream(&plain));
    assert!(n > 50, "{n} samples");
});

pipetest!(needs(perf, perf612, trixie, cc, inferno)
    /// Profiles of perf 7.x recordings of the frame-pointer C workload (`-g`, and `-g --latency`)
    /// against perf 7.x's own `perf script`: the folded stacks against `perf script |
    /// inferno-collapse-perf` (≥ 99.9 % of the weight), the pprof profile's functions against
    /// `perf report --no-children --sort sym` (the top 20 within 0.1 percentage point, every
    /// sample counted, the mappings with their MMAP2 build ids).
    perf7_profiles_name_what_perf_7_names, |dir| {
    let p7 = perf7();
    let w = workloads::frame_pointer_c(&dir);
    for extra in [&[][..], &["--latency"][..]] {
        let args = [&["-e", "cpu-clock", "-F", workloads::FREQ, "-g"][..], extra].concat();
        let rec = p7.record(&args, &w.argv());
        let what = format!("perf 7 record {args:?}");
        let folded = String::from_utf8(perfpipe_ok(&["--folded"], &rec)).unwrap();
        let theirs = collapse(&p7.on(&["script"], &rec), &[]);
        assert_agrees(&format!("{what}: folded vs perf 7"), &folded, &theirs);

        let samples = count_samples(&p7.on(&["script", "-G", "-F", "tid"], &rec)) as u64;
        let pprof = perfpipe_ok(&["--pprof"], &rec);
        let d = export::decode_profile(&export::gunzip(&pprof));
        eqnice!(samples, d.totals[0]);
        assert!(d.mappings_with_build_id > 0, "{what}: no mapping has a build id");
        export::assert_top20_agree(
            &format!("{what}: pprof vs perf 7 report"),
            &export::shares(&d.self_by_function, d.totals[1]),
            &export::perf_report_shares_of(&p7, &rec),
        );
    }
});

pipetest!(needs(perf, perf612, trixie, cc)
    /// A perf 7.x `--call-graph dwarf` recording of a C workload without frame pointers:
    /// `--unwind` gives callchains that every reader resolves as it unwinds the recording itself.
    perf7_dwarf_recording_unwinds, |dir| {
    let argv = unwind::c_forking(&dir);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let rec = perf7().record(&["-e", "cpu-clock", "-F", "4000", "--call-graph", "dwarf"], &argv);
    let out = perfpipe_ok(&["--unwind"], &rec);
    assert!(out.len() * 10 <= rec.len(), "{} of {} bytes", out.len(), rec.len());
    for perf in readers() {
        let what = format!("perf 7's dwarf recording, {}", perf.name);
        let fraction = unwind::compare(&what, &perf.on(unwind::FIELDS, &rec), &perf.on(unwind::FIELDS, &out));
        assert!(fraction >= unwind::MIN_IDENTICAL, "{what}: {fraction}");
    }
});

pipetest!(needs(perf, perf612, trixie)
    /// perf 7.x's features and attrs: its pipe ends its feature records at id 35 after two
    /// features 6.1 and 6.12 do not know (33 `E_MACHINE`, 34 `CLN_SIZE`), so their `perf report`
    /// (not `script`, not `report --stats`) stops at "wrong feature ID: 33", on the recording as
    /// on our byte-identical passthrough; its file's 144-byte attrs are "incompatible" to both.
    /// The pipe perfpipe makes of its file (`-i FILE --pipe`: the features 6.1 knows, 6.1's end
    /// mark) is read by all three, `perf report` included, with the file's samples; perf 7.x
    /// warns about that end mark (id 32 is its `CPU_DOMAIN_INFO`) and reads on.
    perf7_features_and_file_mode, |dir| {
    let p7 = perf7();
    let w = workload();
    let pipe = p7.record(&["-e", "cpu-clock", "-c", "100000", "-g"], &[&w, "single", "1"]);
    for perf in [oracle(), perf612()] {
        let err = readers::read(&perf, &["report", "--stdio"], Input::Stream(&pipe)).unwrap_err();
        assert!(err.contains("wrong feature ID: 33"), "{err}");
    }
    let file = dir.path("rec.data");
    p7.record_file(&file, &["-e", "cpu-clock", "-c", "100000", "-g"], &[&w, "single", "1"]);
    let as_pipe = dir.path("ours.pipe");
    perfpipe_ok(&["-i", s(&file), "-o", s(&as_pipe), "--pipe"], b"");
    let n = readers::samples(&p7, Input::File(&file)).unwrap();
    eqnice!(n, readers::assert_every_reader_accepts("perf 7's file as a pipe", Input::File(&as_pipe)));
    for perf in readers() {
        let report = readers::read(&perf, &["report", "--stdio"], Input::File(&as_pipe));
        assert!(report.unwrap_or_else(|e| panic!("{e}")).contains("cpu-clock"), "{}", perf.name);
        if !perf.is_7() {
            let err = readers::read(&perf, &["report", "--stats"], Input::File(&file)).unwrap_err();
            assert!(err.contains("incompatible file format"), "{err}");
        }
    }
    let warned = run(p7.command().args(["report", "--stdio", "-i"]).arg(&as_pipe), b"");
    assert!(String::from_utf8_lossy(&warned.stderr).contains("Invalid HEADER_CPU_DOMAIN_INFO"));
});

pipetest!(needs(perf, perf612, trixie)
    /// `--downgrade` makes perf 7.x pipes readable by perf 6.1's and 6.12's `perf report`, which
    /// stop at 7.x's feature 33 ("wrong feature ID: 33"): a `-g` recording, a `-z` one (which
    /// perf 7 itself cannot read from a pipe) and the `-g` one with its user frames made deferred
    /// (CALLCHAIN_DEFERRED, at which 6.1 stops reading). Each reader's `perf report --stdio`
    /// accepts ours where 6.1 and 6.12 rejected the input, counting the samples perf 7 counts in
    /// the recording; each reader's `perf script` prints for ours what it prints for the plain
    /// recording (for `-z`, its `--decompress`).
    perf7_downgrade_is_read_by_perf_6_1s_report, |_dir| {
    let p7 = perf7();
    let w = workload();
    let g = p7.record(&["-e", "cpu-clock", "-c", "100000", "-g"], &[&w, "single", "1"]);
    let z = p7.record(&["-e", "cpu-clock", "-c", "100000", "-g", "-z"], &[&w, "single", "1"]);
    let (deferred, made) = crate::perf7::defer(&g);
    assert!(made > 0, "no sample with user frames to defer");
    let z_plain = perfpipe_ok(&["--decompress"], &z);
    let frames = ["script", "-F", "comm,tid,time,ip,sym,dso"];
    for (what, input, reference) in [("-g", &g, &g), ("-z", &z, &z_plain), ("deferred", &deferred, &g)] {
        for perf in [oracle(), perf612()] {
            let err = readers::read(&perf, &["report", "--stdio"], Input::Stream(input)).unwrap_err();
            assert!(err.contains("wrong feature ID: 33") || err.contains("failed to process"), "{what}: {err}");
        }
        let out = perfpipe(&["--downgrade", "--stats"], input);
        let stats = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stats}");
        assert_eq!(counter(&stats, "features_dropped"), 2, "{what}: {stats}");
        let ours = out.stdout;
        assert!(ours == perfpipe_ok(&["--downgrade", "--batch-size", "64"], input), "{what}: batches of 64 bytes");
        let n = readers::samples(&p7, Input::Stream(reference)).unwrap();
        for perf in readers() {
            let report = readers::read(&perf, &["report", "--stdio"], Input::Stream(&ours))
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            // The report's header rounds a count above 1000; `--stats` gives it exactly.
            let want = format!("# Samples: {} of event 'cpu-clock'", perf_count(n));
            assert!(report.contains(&want), "{what}, {}: not `{want}`:\n{report}", perf.name);
            let counted = readers::samples(&perf, Input::Stream(&ours)).unwrap_or_else(|e| panic!("{what}: {e}"));
            eqnice!(n, counted);
            readers::same_script(&perf, &frames, Input::Stream(reference), Input::Stream(&ours))
                .unwrap_or_else(|e| panic!("{what}: {e}"));
        }
    }
});

/// A count as `perf report`'s header prints it (`convert_unit()` and `%lu%c`): above 1000 in
/// thousands with a `K` (1014 samples are `1K`), else the number and a space.
fn perf_count(n: u64) -> String {
    let (mut v, mut unit) = (n, ' ');
    for u in ['K', 'M', 'G'] {
        if v > 1000 {
            (v, unit) = (v / 1000, u);
        }
    }
    format!("{v}{unit}")
}

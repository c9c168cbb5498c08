//! The profile outputs (`-o FILE.folded`, `-o FILE.svg`) as a user runs them: the shape of every
//! stack against `perf script`'s, pipe and file input alike, `-z` streams, snapshots on SIGUSR2
//! while the input is quiet, and the errors of format flags. (The names in the stacks are checked
//! against `perf script | inferno-collapse-perf` in `fold`.)

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::{Command, Stdio};

use crate::util::*;

/// `(comm, frames)` → samples, from `perf script`'s default output: an event line, then one
/// line per callchain frame, then a blank line.
fn script_shapes(script: &str) -> BTreeMap<(String, usize), u64> {
    let mut out = BTreeMap::new();
    let mut current: Option<(String, usize)> = None;
    for line in script.lines().chain(std::iter::once("")) {
        if line.trim().is_empty() {
            if let Some(k) = current.take() {
                *out.entry(k).or_default() += 1;
            }
        } else if line.starts_with('\t') {
            if let Some(k) = &mut current {
                k.1 += 1;
            }
        } else {
            // Without callchains there is no blank line between samples.
            if let Some(k) = current.take() {
                *out.entry(k).or_default() += 1;
            }
            // `comm  tid  time: period event:`: the comm is what comes before the first number.
            let words: Vec<&str> = line.split_whitespace().collect();
            let at = words
                .iter()
                .position(|w| w.bytes().all(|b| b.is_ascii_digit() || b == b'/'))
                .expect("an event line has a tid");
            current = Some((words[..at].join("_"), 0));
        }
    }
    out
}

/// The same from folded stacks whose counts are `period`-weighted with a fixed period.
fn folded_shapes(folded: &str, period: u64) -> BTreeMap<(String, usize), u64> {
    let mut out = BTreeMap::new();
    for line in folded.lines() {
        let (stack, count) = line.rsplit_once(' ').expect("`stack count`");
        let count: u64 = count.parse().expect("a count");
        assert_eq!(count % period, 0, "{line}");
        let frames: Vec<&str> = stack.split(';').collect();
        *out.entry((frames[0].to_string(), frames.len() - 1))
            .or_default() += count / period;
    }
    out
}

pipetest!(needs(perf)
    every_stack_has_the_threads_and_depths_perf_script_prints,
    |dir| {
        // Names aside, each sample is one stack of as many frames as perf script prints, under
        // the thread name perf gives it; counts are the fixed period (-c 200000).
        for name in ["callgraph.pipe.data", "multiproc.pipe.data"] {
            let input = fixture_bytes(name);
            let out = dir.path("out.folded");
            perfpipe_ok(&["-i", fixture(name).to_str().unwrap(), "-o", out.to_str().unwrap()], b"");
            let ours = folded_shapes(&std::fs::read_to_string(&out).unwrap(), 200_000);
            let theirs = script_shapes(&perf_on(&["script"], &input));
            assert!(theirs.values().sum::<u64>() > 1000, "{name}");
            assert_eq!(ours, theirs, "{name}");
        }
    }
);

pipetest!(
    pipe_input_file_input_and_standard_output_give_the_same_stacks,
    |dir| {
        let input = fixture_bytes("multiproc.pipe.data");
        let out = dir.path("a.folded");
        perfpipe_ok(&["-o", out.to_str().unwrap()], &input);
        let from_pipe = std::fs::read(&out).unwrap();
        let from_file = perfpipe_ok(
            &[
                "-i",
                fixture("multiproc.pipe.data").to_str().unwrap(),
                "--folded",
            ],
            b"",
        );
        let from_format = perfpipe_ok(&["--format", "folded", "-o", "-"], &input);
        assert!(!from_pipe.is_empty());
        assert_eq!(from_pipe, from_file);
        assert_eq!(from_pipe, from_format);
        let lines = String::from_utf8(from_pipe).unwrap();
        let sorted: Vec<&str> = lines.lines().collect();
        assert!(
            sorted.windows(2).all(|w| w[0] < w[1]),
            "sorted, no line twice"
        );
        // Weighting by samples divides every count by the period.
        let by_samples = perfpipe_ok(&["--folded", "--weight", "samples"], &input);
        let by_samples = String::from_utf8(by_samples).unwrap();
        assert_eq!(
            folded_shapes(&lines, 200_000),
            folded_shapes(&by_samples, 1)
        );
    }
);

pipetest!(needs(perf)
    a_compressed_stream_gives_the_stacks_of_its_samples,
    |dir| {
        // -z: the samples exist only inside COMPRESSED records; decompress goes in by itself.
        let input = fixture_bytes("compressed.pipe.data");
        let out = dir.path("z.folded");
        let stats = dir.path("stats.json");
        perfpipe_ok(
            &["-o", out.to_str().unwrap(), "--stats-json", stats.to_str().unwrap()],
            &input,
        );
        // No callchains: one frame a sample, the ip; compare the samples per thread name.
        let per_comm = |m: BTreeMap<(String, usize), u64>| {
            let mut out = BTreeMap::new();
            for ((comm, _), n) in m {
                *out.entry(comm).or_insert(0u64) += n;
            }
            out
        };
        let ours = folded_shapes(&std::fs::read_to_string(&out).unwrap(), 100_000);
        assert!(ours.keys().all(|(_, depth)| *depth == 1), "{ours:?}");
        // perf 6.1 cannot read a compressed pipe: it reads our decompressed stream.
        let plain = perfpipe_ok(&["--decompress"], &input);
        let theirs = script_shapes(&perf_on(&["script"], &plain));
        assert!(!theirs.is_empty());
        assert_eq!(per_comm(ours), per_comm(theirs));
        let stats = std::fs::read_to_string(&stats).unwrap();
        assert!(stats.contains("\"decompress\""), "{stats}");
    }
);

pipetest!(
    a_flame_graph_of_the_sample_recording_is_an_svg_with_its_frames,
    |dir| {
        let out = dir.path("flame.svg");
        perfpipe_ok(
            &[
                "-i",
                fixture("callgraph.pipe.data").to_str().unwrap(),
                "-o",
                out.to_str().unwrap(),
                "--title",
                "callgraph, 0.3 s",
            ],
            b"",
        );
        let svg = std::fs::read_to_string(&out).unwrap();
        assert!(
            svg.starts_with("<?xml") && svg.contains("<svg"),
            "{}",
            &svg[..80]
        );
        assert!(svg.contains("callgraph, 0.3 s"));
        // One frame per distinct (stack prefix, function); every sample's comm is a root.
        let titles = svg.matches("<title>").count();
        assert!(titles > 50, "{titles} frames");
        assert!(
            svg.contains("<title>workload.sh ("),
            "the comm is the root frame"
        );
        // An icicle graph is another drawing of the same frames.
        let icicle = dir.path("icicle.svg");
        perfpipe_ok(
            &[
                "-i",
                fixture("callgraph.pipe.data").to_str().unwrap(),
                "-o",
                icicle.to_str().unwrap(),
                "--inverted",
            ],
            b"",
        );
        let icicle = std::fs::read_to_string(&icicle).unwrap();
        assert_eq!(icicle.matches("<title>").count(), titles);
        assert_ne!(icicle, svg);
    }
);

pipetest!(
    sigusr2_writes_a_snapshot_while_the_input_is_quiet_and_the_end_writes_all,
    |dir| {
        let input = fixture_bytes("callgraph.pipe.data");
        let out = dir.path("snap.folded");
        let mut child = Command::new(bin())
            .args(["-o", out.to_str().unwrap()])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let half = input.len() / 2;
        stdin.write_all(&input[..half]).unwrap();
        stdin.flush().unwrap();
        // The input then stays quiet: the snapshot must come without another batch.
        signal(&child, libc::SIGUSR2);
        let t0 = std::time::Instant::now();
        while !out.exists() {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(30),
                "no snapshot 30 s after SIGUSR2"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let snapshot = std::fs::read_to_string(&out).unwrap();
        stdin.write_all(&input[half..]).unwrap();
        drop(stdin);
        let status = child.wait().unwrap();
        assert!(status.success());
        let end = std::fs::read_to_string(&out).unwrap();
        let samples = |s: &str| folded_shapes(s, 200_000).values().sum::<u64>();
        assert!(
            samples(&snapshot) > 0,
            "the snapshot has the first half's samples"
        );
        assert!(samples(&snapshot) < samples(&end));
        assert_eq!(samples(&end), 1777, "fixtures/README.md: 1777 samples");
        let leftovers: Vec<_> = std::fs::read_dir(out.parent().unwrap())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
            .collect();
        assert!(leftovers.is_empty(), "no temporary file is left");
    }
);

pipetest!(format_flags_that_do_not_fit_the_output_are_refused, |dir| {
    let input = fixture_bytes("callgraph.pipe.data");
    let out = dir.path("x.folded");
    for (args, says) in [
        (
            vec!["-o", out.to_str().unwrap(), "--title", "T"],
            "--title: an option of flamegraph output, not of folded",
        ),
        (vec!["--symbolize"], "perf's format carries no symbols"),
        (vec!["--format", "png"], "no format named `png`"),
    ] {
        let r = perfpipe(&args, &input);
        assert!(!r.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(r.stdout.is_empty(), "{args:?}: nothing written");
    }
    assert!(!out.exists());
});

pipetest!(needs(go)
    go_tool_pprof_reads_the_profile_and_its_total_is_every_sample,
    |dir| {
        let out = dir.path("cpu.pb.gz");
        perfpipe_ok(
            &["-i", fixture("multiproc.pipe.data").to_str().unwrap(), "-o", out.to_str().unwrap()],
            b"",
        );
        let pprof = |args: &[&str]| {
            let o = Command::new("go")
                .args(["tool", "pprof"])
                .args(args)
                .arg(&out)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            String::from_utf8(o.stdout).unwrap()
        };
        // fixtures/README.md: 1664 samples of -c 200000 cpu-clock: 332.8 ms in all.
        let top = pprof(&["-top"]);
        assert!(top.contains("Type: cpu-clock"), "{top}");
        assert!(top.contains("Total samples = 332.80ms"), "{top}");
        let counts = pprof(&["-top", "-sample_index=cpu-clock_samples"]);
        assert!(counts.contains("Total samples = 1664"), "{counts}");
        // -raw lists every sample with its labels.
        let raw = pprof(&["-raw"]);
        for label in ["comm:[", "pid:[", "tid:["] {
            assert!(raw.contains(label), "{label} in {raw:.2000}");
        }
        assert!(raw.contains("libc.so.6"), "mappings name their files");
    }
);

pipetest!(
    a_firefox_profile_has_every_sample_on_its_threads_timeline,
    |dir| {
        let out = dir.path("p.json.gz");
        perfpipe_ok(
            &[
                "-i",
                fixture("multiproc.pipe.data").to_str().unwrap(),
                "-o",
                out.to_str().unwrap(),
            ],
            b"",
        );
        let gz = std::fs::read(&out).unwrap();
        let o = Command::new("gzip")
            .arg("-dc")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let text = {
            let mut o = o;
            o.stdin.take().unwrap().write_all(&gz).unwrap();
            let r = o.wait_with_output().unwrap();
            String::from_utf8(r.stdout).unwrap()
        };
        assert!(text.starts_with("{\"meta\":"), "{:.200}", text);
        assert!(text.contains("\"preprocessedProfileVersion\""));
        // Each thread's samples table has a length; they add up to the recording's 1664.
        let total: u64 = text
            .match_indices("\"samples\":{")
            .map(|(i, _)| {
                let rest = &text[i..];
                let at = rest.find("\"length\":").unwrap() + 9;
                rest[at..]
                    .split(|c: char| !c.is_ascii_digit())
                    .next()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
            })
            .sum();
        assert_eq!(total, 1664);
    }
);

pipetest!(needs(perf, duckdb)
    duckdb_reads_the_parquet_file_and_dataset_with_perf_scripts_samples,
    |dir| {
        let input = fixture_bytes("multiproc.pipe.data");
        let mut theirs: BTreeMap<String, u64> = BTreeMap::new();
        for ((comm, _), n) in script_shapes(&perf_on(&["script"], &input)) {
            *theirs.entry(comm).or_default() += n;
        }
        let file = dir.path("s.parquet");
        perfpipe_ok(&["-o", file.to_str().unwrap()], &input);
        let rows = duckdb(&format!(
            "select comm, count(*), sum(period) from '{}' group by comm order by comm",
            file.display()
        ));
        let mut ours = BTreeMap::new();
        for line in rows.lines() {
            let v: Vec<&str> = line.split('|').collect();
            let n: u64 = v[1].parse().unwrap();
            assert_eq!(v[2].parse::<u64>().unwrap(), n * 200_000, "{line}");
            ours.insert(v[0].to_string(), n);
        }
        assert_eq!(ours, theirs, "samples per thread name: ours (DuckDB) vs perf script");
        // Every row's stack is its frames, root first, as many as perf script prints.
        let depths = duckdb(&format!("select min(len(stack)), max(len(stack)) from '{}'", file.display()));
        assert!(depths.trim().starts_with('1'), "{depths}");

        // A dataset: two parts (SIGUSR2 would make more; --rotate 1G makes it a dataset), read as one table.
        let ds = dir.path("ds");
        perfpipe_ok(&["--parquet", "--rotate", "1G", "-o", &format!("{}/", ds.display())], &input);
        let count = duckdb(&format!(
            "select count(*), count(distinct host), min(date) from read_parquet('{}/**/*.parquet', hive_partitioning = true)",
            ds.display()
        ));
        let v: Vec<&str> = count.trim().split('|').collect();
        assert_eq!(v[0].parse::<u64>().unwrap(), theirs.values().sum::<u64>());
        assert_eq!(v[1], "1");
        assert!(v[2].starts_with("20"), "{count}");
    }
);

pipetest!(
    bad_input_gives_the_error_and_a_complete_profile_of_what_came_before,
    |dir| {
        let input = fixture_bytes("multiproc.pipe.data");
        let cut = &input[..100_000];
        // What perfpipe keeps of the truncated stream, as a stream of its own.
        let kept = perfpipe(&[], cut);
        assert_eq!(kept.status.code(), Some(1));
        for ext in ["folded", "svg", "pb.gz", "json.gz", "parquet"] {
            let broken = dir.path(&format!("broken.{ext}"));
            let r = perfpipe(&["-o", broken.to_str().unwrap()], cut);
            assert_eq!(r.status.code(), Some(1), "{ext}");
            let err = String::from_utf8_lossy(&r.stderr);
            assert!(
                err.contains("offset 99952") && err.contains("SAMPLE"),
                "{ext}: {err}"
            );
            let whole = dir.path(&format!("whole.{ext}"));
            perfpipe_ok(&["-o", whole.to_str().unwrap()], &kept.stdout);
            let leftovers = std::fs::read_dir(dir.path("."))
                .unwrap()
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
                .count();
            assert_eq!(leftovers, 0, "{ext}: no temporary file");
            if ext == "folded" || ext == "svg" {
                assert_eq!(
                    std::fs::read(&broken).unwrap(),
                    std::fs::read(&whole).unwrap(),
                    "{ext}: the profile of every complete record"
                );
            } else {
                assert!(std::fs::metadata(&broken).unwrap().len() > 0, "{ext}");
            }
        }
    }
);

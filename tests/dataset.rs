//! The Parquet dataset as a fleet writes it (issue 34): its partitions are the recording's (the
//! stream's hostname, the days CLOCK_DATA gives its samples), not the converting machine's, and
//! Spark and DuckDB read a dataset of two hosts with `--rotate` parts as `perf report` reads the
//! recordings: a row per sample, empty stacks included and counted, the same top leaf functions
//! per host. The queries of `docs/parquet.md` and `benches/spark_top.py` run on it.
//!
//! "Another host" is a recording made in a UTS namespace of its own whose hostname is
//! `otherhost` (`unshare --uts`), converted on this machine.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use perfpipe_stream::format::features::{feature_record, ClockData};
use perfpipe_stream::format::{feature, sample, Attr, Endian, RecordType};

use crate::util::*;
use crate::workloads::{self, Workload};

/// `PERF_CONTEXT_USER`, the callchain marker of the user-space frames that follow it.
const PERF_CONTEXT_USER: u64 = (-512i64) as u64;

/// The hostname of the recordings made in a namespace of their own.
const OTHER: &str = "otherhost";

/// This machine's hostname.
fn this_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

/// `perf record ARGS -o - -- ARGV`, as the host `host` when given (in a UTS namespace of its own
/// with that hostname), else as this one.
fn record_as(host: Option<&str>, args: &[&str], argv: &[&str]) -> Vec<u8> {
    let mut cmd = match host {
        Some(h) => {
            let mut c = Command::new("unshare");
            c.args([
                "--uts",
                "sh",
                "-c",
                "hostname \"$0\" && exec perf record \"$@\"",
                h,
            ]);
            c
        }
        None => {
            let mut c = Command::new("perf");
            c.arg("record");
            c
        }
    };
    let out = cmd
        .args(args)
        .args(["-o", "-", "--"])
        .args(argv)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "perf record {args:?} as {host:?}: {err}"
    );
    assert!(out.stdout.len() > 16, "perf record wrote nothing: {err}");
    out.stdout
}

/// The records of a little-endian pipe stream: `(offset, type, size)`.
fn records(rec: &[u8]) -> Vec<(usize, u32, usize)> {
    assert_eq!(&rec[..8], b"PERFILE2", "a little-endian pipe stream");
    let e = Endian::Little;
    let mut out = Vec::new();
    let mut at = 16;
    while at + 8 <= rec.len() {
        let size = usize::from(e.u16(rec, at + 6).unwrap());
        assert!(size >= 8 && at + size <= rec.len(), "a record at {at}");
        out.push((at, e.u32(rec, at).unwrap(), size));
        at += size;
    }
    out
}

/// `rec` with its CLOCK_DATA's wall-clock reference moved `days` days back: its samples are
/// dated then, by `perf script -F tod` as by us.
fn dated_back(rec: &[u8], days: u64) -> Vec<u8> {
    let e = Endian::Little;
    let mut out = rec.to_vec();
    let (at, _, size) = records(rec)
        .into_iter()
        .find(|&(at, kind, size)| {
            kind == RecordType::HEADER_FEATURE.0
                && feature_record(&rec[at..at + size], e).map(|f| f.0) == Some(feature::CLOCK_DATA)
        })
        .expect("perf record -k writes CLOCK_DATA");
    let mut clock = ClockData::parse(&rec[at + 16..at + size], e).unwrap();
    clock.tod_ns -= days * 86_400 * 1_000_000_000;
    out[at + 16..at + 16 + ClockData::SIZE].copy_from_slice(&clock.to_bytes(e));
    out
}

/// `rec` with `n` samples whose callchain holds no frame, only the marker `PERF_CONTEXT_USER`
/// (what the kernel leaves when it cannot walk the user stack), each a copy of one of the
/// recording's samples at an address no map covers. Issue 34's recording had 6 such samples in
/// 3.29 M (`perf script` shows them without a frame); perf cannot be made to write them on
/// purpose.
fn with_empty_stacks(rec: &[u8], n: usize) -> Vec<u8> {
    let e = Endian::Little;
    let all = records(rec);
    let (at, _, size) = *all
        .iter()
        .find(|r| r.1 == RecordType::HEADER_ATTR.0)
        .expect("an attr");
    let attr = Attr::parse(&rec[at + 8..at + size], e).unwrap();
    let l = attr.layout;
    let fixed = sample::IDENTIFIER
        | sample::IP
        | sample::TID
        | sample::TIME
        | sample::ADDR
        | sample::ID
        | sample::STREAM_ID
        | sample::CPU
        | sample::PERIOD;
    assert_eq!(
        l.sample_type & !fixed,
        sample::CALLCHAIN,
        "the callchain is the last field"
    );
    let (ip, chain) = (usize::from(l.ip.unwrap()), usize::from(l.fixed_end));
    let samples: Vec<_> = all.iter().filter(|r| r.1 == RecordType::SAMPLE.0).collect();
    let every = samples.len() / (n + 1);
    let chosen: BTreeSet<usize> = (1..=n).map(|i| samples[i * every].0).collect();
    let mut out = rec[..16].to_vec();
    for &(at, _, size) in &all {
        out.extend_from_slice(&rec[at..at + size]);
        if chosen.contains(&at) {
            let mut empty = rec[at..at + chain].to_vec();
            empty[6..8].copy_from_slice(&e.put_u16((chain + 16) as u16));
            empty[ip..ip + 8].copy_from_slice(&e.put_u64(0x1000));
            empty.extend_from_slice(&e.put_u64(1));
            empty.extend_from_slice(&e.put_u64(PERF_CONTEXT_USER));
            out.extend_from_slice(&empty);
        }
    }
    out
}

/// What perf says of a recording: samples, samples without a frame, and each named function's
/// samples by `perf report --no-children --sort sym` (unknown addresses, which perf lists each
/// apart, left out).
#[derive(Debug)]
struct Perf {
    samples: u64,
    empty: u64,
    functions: BTreeMap<String, u64>,
}

fn perf_says(rec: &[u8]) -> Perf {
    let samples = count_samples(&perf_on(&["script", "-G", "-F", "tid"], rec)) as u64;
    // A sample's event line, then a line per frame: an event line followed by another (or by
    // the end) has none.
    let script = perf_on(&["script", "-F", "tid,ip"], rec);
    let lines: Vec<&str> = script.lines().filter(|l| !l.trim().is_empty()).collect();
    let event = |l: &str| !l.starts_with('\t');
    let empty = (0..lines.len())
        .filter(|&i| event(lines[i]) && lines.get(i + 1).is_none_or(|l| event(l)))
        .count() as u64;
    let report = perf_on(
        &[
            "report",
            "--stdio",
            "--no-children",
            "--sort",
            "sym",
            "-n",
            "-g",
            "none",
            "--percent-limit",
            "0",
        ],
        rec,
    );
    let mut functions = BTreeMap::new();
    for line in report.lines() {
        // `    56.93%          6876  [.] fp_leaf_mul`
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() >= 4 && words[0].ends_with('%') && words[2].starts_with('[') {
            let name = words[3..].join(" ");
            if let (Ok(n), false) = (words[1].parse::<u64>(), name.starts_with("0x")) {
                *functions.entry(name).or_default() += n;
            }
        }
    }
    assert!(
        !functions.is_empty(),
        "perf report named nothing:\n{report}"
    );
    Perf {
        samples,
        empty,
        functions,
    }
}

/// The UTC days of a recording's samples by `perf script -F tod`.
fn perf_days(rec: &[u8]) -> BTreeSet<String> {
    let out = run(
        Command::new("perf")
            .env("TZ", "UTC")
            .args(["script", "-G", "-F", "tod", "-i", "-"]),
        rec,
    );
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().get(..10).map(str::to_string))
        .collect()
}

/// Today's UTC date.
fn today() -> String {
    let out = Command::new("date").args(["-u", "+%F"]).output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// `perfpipe ARGS` on `rec` (standard input); asserts success.
fn convert(rec: &[u8], args: &[&str]) {
    let out = perfpipe(args, rec);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every part of a dataset by its partition directory, `host=…/date=…`.
fn parts(ds: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    let mut out: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    let read = |p: &Path| std::fs::read_dir(p).into_iter().flatten().flatten();
    for host in read(ds) {
        for day in read(&host.path()) {
            let key = day
                .path()
                .strip_prefix(ds)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            for f in read(&day.path()) {
                let name = f.file_name().to_string_lossy().into_owned();
                assert!(
                    name.ends_with(".parquet"),
                    "{key}/{name}: no temporary file left"
                );
                out.entry(key.clone()).or_default().push(f.path());
            }
        }
    }
    out
}

pipetest!(needs(perf, uts)
    /// A recording made as `otherhost` with `-k CLOCK_MONOTONIC`, dated 1000 days back, lands
    /// under `host=otherhost/date=<the days perf script -F tod gives its samples>`.
    partitions_are_the_recorded_host_and_the_days_of_its_samples,
    |dir| {
        let rec = record_as(
            Some(OTHER),
            &["-k", "CLOCK_MONOTONIC", "-e", "cpu-clock", "-F", "1000", "-g"],
            &["bash", &workload(), "single", "2"],
        );
        let rec = dated_back(&rec, 1000);
        let days = perf_days(&rec);
        assert!(!days.is_empty() && !days.contains(&today()), "{days:?}");
        let ds = dir.path("ds");
        let stats = dir.path("stats.json");
        convert(
            &rec,
            &["-o", &format!("{}/", ds.display()), "--stats-json", stats.to_str().unwrap()],
        );
        let want: BTreeSet<String> = days
            .iter()
            .map(|d| format!("host={OTHER}/date={d}"))
            .collect();
        let got: BTreeSet<String> = parts(&ds).into_keys().collect();
        eqnice!(want, got);
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
        let sink = json["stages"].as_array().unwrap().iter().find(|s| s["name"] == "parquet");
        let samples = count_samples(&perf_on(&["script", "-G", "-F", "tid"], &rec)) as u64;
        assert_eq!(sink.unwrap()["counters"]["rows"], samples, "a row per sample");
    }
);

/// Reads a dataset with Spark (`local[2]`): per host its rows, its empty stacks and the top leaf
/// functions by `benches/spark_top.py`'s `top_leaves`; the partitions; then runs every `-- spark`
/// query of `docs/parquet.md`. Prints JSON. argv: dataset, benches/, docs/parquet.md.
const SPARK: &str = r#"
import json, re, sys
sys.path.insert(0, sys.argv[2])
import spark_top
from pyspark.sql import functions as F

ds = sys.argv[1]
spark = spark_top.session("local[2]")
df = spark.read.parquet(ds)
out = {"engine": "spark " + spark.version, "hosts": {}}
out["ansi"] = spark.conf.get("spark.sql.ansi.enabled")
by_partition = df.groupBy("host", "date").agg(F.count("*").alias("n")).collect()
out["partitions"] = sorted([r["host"], str(r["date"]), r["n"]] for r in by_partition)
for h in sorted(r["host"] for r in df.select("host").distinct().collect()):
    rows = df.where(F.col("host") == h)
    out["hosts"][h] = {
        "rows": rows.count(),
        "empty": rows.where(F.size("stack") == 0).count(),
        "top": [[r["leaf"], r["samples"]] for r in spark_top.top_leaves(rows, 10)],
    }
docs = open(sys.argv[3]).read()
ran = 0
for q in re.findall(r"```sql\n-- spark\n(.*?)```", docs, re.S):
    q = q.replace("s3a://bucket/profiles/", ds).replace("profiles/", ds)
    spark.sql(q).collect()
    ran += 1
out["doc_queries"] = ran
print(json.dumps(out))
spark.stop()
"#;

/// The same with DuckDB, and every `-- duckdb` query of `docs/parquet.md`.
const DUCKDB: &str = r#"
import json, re, sys
import duckdb

ds = sys.argv[1]
t = f"read_parquet('{ds}**/*.parquet', hive_partitioning = true)"
out = {"engine": "duckdb " + duckdb.__version__, "hosts": {}}
by_partition = duckdb.sql(f"select host, date, count(*) from {t} group by all").fetchall()
out["partitions"] = sorted([h, str(d), n] for h, d, n in by_partition)
for (h,) in duckdb.sql(f"select distinct host from {t} order by 1").fetchall():
    rows, empty = duckdb.execute(
        f"select count(*), count_if(len(stack) = 0) from {t} where host = ?", [h]).fetchone()
    top = duckdb.execute(
        f"select stack[-1].function as leaf, count(*) as n from {t} where host = ? "
        "group by leaf order by n desc, leaf asc nulls last limit 10", [h]).fetchall()
    out["hosts"][h] = {"rows": rows, "empty": empty, "top": [[l, n] for l, n in top]}
docs = open(sys.argv[2]).read()
ran = 0
for q in re.findall(r"```sql\n-- duckdb\n(.*?)```", docs, re.S):
    duckdb.sql(q.replace("profiles/", ds)).fetchall()
    ran += 1
out["doc_queries"] = ran
print(json.dumps(out))
"#;

/// Runs a Python program in `cwd`; its JSON.
fn python(program: &str, args: &[&str], cwd: &Path) -> serde_json::Value {
    let t0 = std::time::Instant::now();
    let out = Command::new("python3")
        .args(["-c", program])
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{}",
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_str(text.lines().last().unwrap_or("")).unwrap();
    eprintln!(
        "{} read the dataset in {:.1?}",
        json["engine"],
        t0.elapsed()
    );
    json
}

/// The leaf functions of an engine's top list that hold at least `share` of the host's rows,
/// with their samples.
fn top_named(host: &serde_json::Value, share: f64) -> BTreeMap<String, u64> {
    let rows = host["rows"].as_u64().unwrap() as f64;
    host["top"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| Some((r[0].as_str()?.to_string(), r[1].as_u64()?)))
        .filter(|(_, n)| *n as f64 >= share * rows)
        .collect()
}

pipetest!(needs(perf, cc, uts, duckdb, spark)
    /// Two hosts' recordings (this one; `otherhost`, recorded in a UTS namespace), each with
    /// empty stacks, converted here into one dataset with `--rotate` parts, read by Spark and by
    /// DuckDB: a row per sample, the empty stacks counted, partitions the two hosts and the
    /// days, and each host's top leaf functions (≥ 0.5 % of its samples) with perf report's
    /// sample counts.
    spark_and_duckdb_read_a_two_host_dataset_as_perf_report_does,
    |dir| {
        let t0 = std::time::Instant::now();
        let fp: Workload = workloads::frame_pointer_c(&dir);
        let spin: Workload = workloads::noploop(&dir);
        let here = this_host();
        assert_ne!(here, OTHER);
        let args = ["-e", "cpu-clock", "-F", workloads::FREQ, "-g"];
        // This host's samples dated by CLOCK_DATA, moved 400 days back so that their day is not
        // the day written; the other's dated by the day they are written.
        let mut dated = args.to_vec();
        dated.extend(["-k", "CLOCK_MONOTONIC"]);
        let fp_argv = [fp.exe.to_str().unwrap(), "100"];
        let recs = [
            (
                here.clone(),
                with_empty_stacks(&dated_back(&record_as(None, &dated, &fp_argv), 400), 3),
            ),
            (
                OTHER.to_string(),
                with_empty_stacks(&record_as(Some(OTHER), &args, &spin.argv()), 2),
            ),
        ];
        let ds = dir.path("ds");
        let target = format!("{}/", ds.display());
        let before = today();
        for (host, rec) in &recs {
            // A part of each batch's rows, at least: with 4K batches every host gets several,
            // however few samples the machine's load left the workload.
            let mut args = vec!["--rotate", "1K", "--batch-size", "4K", "-o", &target];
            // The other host is this machine under another name: its kallsyms is this one's,
            // given as a user gives the recording host's (perf report uses this host's anyway).
            if *host == OTHER {
                args.extend(["--kallsyms", "/proc/kallsyms"]);
            }
            convert(rec, &args);
        }
        let after = today();

        // The partitions: this host's are the days perf script -F tod gives its samples (not
        // today); the other's, the day it was written.
        let on_disk = parts(&ds);
        let mut perf = BTreeMap::new();
        for (host, rec) in &recs {
            let says = perf_says(rec);
            assert!(says.empty >= 2, "{host}: the empty stacks put in: {says:?}");
            let days: BTreeSet<String> = on_disk
                .keys()
                .filter_map(|k| k.strip_prefix(&format!("host={host}/date=")))
                .map(str::to_string)
                .collect();
            if *host == here {
                assert!(!days.contains(&before) && !days.contains(&after), "{days:?}");
                eqnice!(perf_days(rec), days);
            } else {
                assert!(!days.is_empty(), "{host}: {on_disk:?}");
                assert!(days.iter().all(|d| *d == before || *d == after), "{days:?}");
            }
            let files: usize = on_disk
                .iter()
                .filter(|(k, _)| k.starts_with(&format!("host={host}/")))
                .map(|(_, v)| v.len())
                .sum();
            assert!(files >= 2, "{host}: --rotate 1K makes parts: {files}");
            perf.insert(host.clone(), says);
        }
        let partitions: BTreeSet<String> = on_disk.into_keys().collect();

        let benches = Path::new(env!("CARGO_MANIFEST_DIR")).join("../benches");
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/parquet.md");
        let (benches, docs) = (benches.to_str().unwrap(), docs.to_str().unwrap());
        // In the test's directory: Spark makes its `spark-warehouse` where it runs (it was
        // left in cli/).
        let spark = python(SPARK, &[&target, benches, docs], dir.path("").as_path());
        assert_eq!(spark["ansi"], "true", "Spark 4's ANSI mode: element_at of [] fails");
        let duck = python(DUCKDB, &[&target, docs], dir.path("").as_path());
        for engine in [&spark, &duck] {
            let what = engine["engine"].as_str().unwrap();
            assert!(engine["doc_queries"].as_u64().unwrap() >= 2, "{what}: the docs' queries");
            let seen: BTreeSet<String> = engine["partitions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| format!("host={}/date={}", p[0].as_str().unwrap(), p[1].as_str().unwrap()))
                .collect();
            eqnice!(partitions, seen);
            let hosts: Vec<&String> = engine["hosts"].as_object().unwrap().keys().collect();
            assert_eq!(hosts.len(), 2, "{what}: {hosts:?}");
            for (host, says) in &perf {
                let h = &engine["hosts"][host];
                assert_eq!(h["rows"], says.samples, "{what} {host}: a row per sample");
                assert_eq!(h["empty"], says.empty, "{what} {host}: the empty stacks, counted");
                let ours = top_named(h, 0.005);
                let theirs: BTreeMap<String, u64> = says
                    .functions
                    .iter()
                    .filter(|(_, &n)| n as f64 >= 0.005 * says.samples as f64)
                    .map(|(k, &n)| (k.clone(), n))
                    .collect();
                assert!(!theirs.is_empty());
                eprintln!(
                    "{what} {host}: {} rows, {} empty, top {ours:?}",
                    h["rows"], h["empty"]
                );
                eqnice!(theirs, ours);
            }
        }
        eprintln!("the whole test: {:.1?}", t0.elapsed());
    }
);

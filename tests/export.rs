//! pprof and Parquet against `perf report` on live recordings (issue 17): the functions that hold
//! the samples, and how much, are the same as `perf report --no-children --sort sym` says, within
//! 0.1 percentage point for its top 20; the pprof file is also read by a protobuf decoder of our
//! own here (independent of the `prost` encoder the sink uses) and by `go tool pprof`.

use std::collections::BTreeMap;
use std::process::Command;

use crate::util::*;
use crate::workloads::{self, Workload};

/// A symbol's share of the period, in percent, by name.
pub(crate) type Shares = BTreeMap<String, f64>;

/// `perf report --no-children --sort sym`: each symbol's share of the period (self time), by
/// name; addresses no symbol covers (`0x…`) are left out, as they have no name to compare.
fn perf_report_shares(rec: &[u8]) -> Shares {
    perf_report_shares_of(&oracle(), rec)
}

/// [`perf_report_shares`] as `perf` reports them.
pub(crate) fn perf_report_shares_of(perf: &Perf, rec: &[u8]) -> Shares {
    let text = perf.on(
        &[
            "report",
            "--stdio",
            "--no-children",
            "--sort",
            "sym",
            "-g",
            "none",
            "--percent-limit",
            "0",
        ],
        rec,
    );
    let mut shares = Shares::new();
    for line in text.lines() {
        let line = line.trim();
        let Some((pct, rest)) = line.split_once("%  [") else {
            continue;
        };
        let Ok(pct) = pct.trim().parse::<f64>() else {
            continue;
        };
        // `[.] name` or `[k] name`
        let name = rest[2..].trim();
        if !name.starts_with("0x") {
            *shares.entry(name.to_string()).or_default() += pct;
        }
    }
    assert!(
        !shares.is_empty(),
        "perf report printed no symbols:\n{text}"
    );
    shares
}

/// The 20 largest of perf's shares, each compared with ours: at most 0.1 percentage point apart.
pub(crate) fn assert_top20_agree(what: &str, ours: &Shares, perf: &Shares) {
    let mut top: Vec<(&String, &f64)> = perf.iter().collect();
    top.sort_by(|a, b| b.1.total_cmp(a.1).then(a.0.cmp(b.0)));
    let mut report = String::new();
    let mut worst = 0f64;
    for (name, theirs) in top.into_iter().take(20) {
        let mine = ours.get(name).copied().unwrap_or(0.0);
        worst = worst.max((mine - theirs).abs());
        report += &format!("{theirs:7.2}% perf {mine:7.2}% ours  {name}\n");
    }
    eprintln!("{what}: top 20 of perf report, worst difference {worst:.3} pp\n{report}");
    assert!(
        worst <= 0.1 + 1e-9,
        "{what}: a top-20 function differs by {worst:.3} pp\n{report}"
    );
}

/// `gzip -dc`
pub(crate) fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let out = run(Command::new("gzip").arg("-dc"), bytes);
    assert!(out.status.success(), "gzip -dc failed");
    out.stdout
}

/// A protobuf wire-format reader: the fields of one message as (number, value).
mod wire {
    #[derive(Debug, Clone, Copy)]
    pub enum Value<'a> {
        Varint(u64),
        Bytes(&'a [u8]),
    }

    fn varint(b: &[u8], at: &mut usize) -> u64 {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = b[*at];
            *at += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return v;
            }
        }
        panic!("a varint of more than 10 bytes")
    }

    pub fn fields(b: &[u8]) -> Vec<(u64, Value<'_>)> {
        let mut at = 0;
        let mut out = Vec::new();
        while at < b.len() {
            let key = varint(b, &mut at);
            let value = match key & 7 {
                0 => Value::Varint(varint(b, &mut at)),
                2 => {
                    let n = varint(b, &mut at) as usize;
                    at += n;
                    Value::Bytes(&b[at - n..at])
                }
                1 => {
                    at += 8;
                    Value::Bytes(&b[at - 8..at])
                }
                5 => {
                    at += 4;
                    Value::Bytes(&b[at - 4..at])
                }
                t => panic!("wire type {t} at {at}"),
            };
            out.push((key >> 3, value));
        }
        out
    }

    /// A repeated integer field: packed (bytes of varints) or one varint.
    pub fn ints(v: Value<'_>) -> Vec<u64> {
        match v {
            Value::Varint(x) => vec![x],
            Value::Bytes(b) => {
                let mut at = 0;
                let mut out = Vec::new();
                while at < b.len() {
                    out.push(varint(b, &mut at));
                }
                out
            }
        }
    }

    pub fn int(v: Value<'_>) -> u64 {
        match v {
            Value::Varint(x) => x,
            Value::Bytes(_) => panic!("an integer field as bytes"),
        }
    }

    pub fn bytes(v: Value<'_>) -> &[u8] {
        match v {
            Value::Bytes(b) => b,
            Value::Varint(_) => panic!("a message field as a varint"),
        }
    }
}

/// What our decoder reads of a profile: the sample types, the total of each value, and each
/// function's self value (of the last sample type, the period) by name.
#[derive(Debug, Default)]
pub(crate) struct Decoded {
    pub sample_types: Vec<(String, String)>,
    pub totals: Vec<u64>,
    pub self_by_function: BTreeMap<String, u64>,
    pub mappings_with_build_id: usize,
}

pub(crate) fn decode_profile(profile: &[u8]) -> Decoded {
    use wire::*;
    let fields = fields(profile);
    let strings: Vec<String> = fields
        .iter()
        .filter(|(n, _)| *n == 6)
        .map(|&(_, v)| String::from_utf8(bytes(v).to_vec()).unwrap())
        .collect();
    assert_eq!(
        strings.first().map(String::as_str),
        Some(""),
        "string 0 is empty"
    );
    let string = |i: u64| strings[i as usize].clone();
    let mut d = Decoded::default();
    let mut functions = BTreeMap::new(); // id → name
    let mut locations = BTreeMap::new(); // id → innermost line's function id
    let mut samples = Vec::new();
    for &(n, v) in &fields {
        match n {
            1 => {
                let f = wire::fields(bytes(v));
                let get = |k| f.iter().find(|(n, _)| *n == k).map_or(0, |&(_, v)| int(v));
                d.sample_types.push((string(get(1)), string(get(2))));
            }
            2 => samples.push(bytes(v)),
            3 => {
                let f = wire::fields(bytes(v));
                if f.iter().any(|&(n, v)| n == 6 && int(v) != 0) {
                    d.mappings_with_build_id += 1;
                }
            }
            4 => {
                let f = wire::fields(bytes(v));
                let id = f
                    .iter()
                    .find(|(n, _)| *n == 1)
                    .map(|&(_, v)| int(v))
                    .unwrap();
                let first_line = f.iter().find(|(n, _)| *n == 4).map(|&(_, line)| {
                    wire::fields(bytes(line))
                        .iter()
                        .find(|(n, _)| *n == 1)
                        .map_or(0, |&(_, v)| int(v))
                });
                locations.insert(id, first_line);
            }
            5 => {
                let f = wire::fields(bytes(v));
                let get = |k| f.iter().find(|(n, _)| *n == k).map_or(0, |&(_, v)| int(v));
                functions.insert(get(1), string(get(2)));
            }
            _ => {}
        }
    }
    d.totals = vec![0; d.sample_types.len()];
    for s in samples {
        let f = wire::fields(s);
        let locs: Vec<u64> = f
            .iter()
            .filter(|(n, _)| *n == 1)
            .flat_map(|&(_, v)| ints(v))
            .collect();
        let values: Vec<u64> = f
            .iter()
            .filter(|(n, _)| *n == 2)
            .flat_map(|&(_, v)| ints(v))
            .collect();
        assert_eq!(values.len(), d.totals.len(), "a value per sample type");
        for (t, v) in d.totals.iter_mut().zip(&values) {
            *t += v;
        }
        let leaf = locs
            .first()
            .and_then(|l| locations[l])
            .and_then(|f| functions.get(&f));
        if let Some(name) = leaf {
            *d.self_by_function.entry(name.clone()).or_default() += values.last().unwrap();
        }
    }
    d
}

/// Percentages of a total.
pub(crate) fn shares(values: &BTreeMap<String, u64>, total: u64) -> Shares {
    values
        .iter()
        .map(|(k, &v)| (k.clone(), v as f64 * 100.0 / total as f64))
        .collect()
}

/// Records `w` with `-g` and writes it as `cpu.pb.gz`; checks the profile against perf report
/// with our decoder and with `go tool pprof -top`.
fn pprof_agrees(dir: &Dir, what: &str, w: &Workload) {
    let rec = w.record(&[]);
    let samples = count_samples(&perf_on(&["script", "-G", "-F", "tid"], &rec)) as u64;
    let perf = perf_report_shares(&rec);
    let input = dir.write("rec.data", &rec);
    let out = dir.path("cpu.pb.gz");
    let r = perfpipe(
        &["-i", input.to_str().unwrap(), "-o", out.to_str().unwrap()],
        b"",
    );
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));

    // Our own reader: every sample counted once, its period in nanoseconds.
    let d = decode_profile(&gunzip(&std::fs::read(&out).unwrap()));
    assert_eq!(
        d.sample_types,
        [
            ("cpu-clock_samples".to_string(), "count".to_string()),
            ("cpu-clock".to_string(), "nanoseconds".to_string())
        ]
    );
    assert_eq!(d.totals[0], samples, "{what}: the sample count");
    assert!(
        d.mappings_with_build_id > 0,
        "{what}: mappings carry build ids"
    );
    assert_top20_agree(
        &format!("{what} (decoded)"),
        &shares(&d.self_by_function, d.totals[1]),
        &perf,
    );

    // go tool pprof: the same total, and its flat percentages.
    let top = Command::new("go")
        .args([
            "tool",
            "pprof",
            "-top",
            "-nodecount=100000",
            "-nodefraction=0",
        ])
        .args(["-sample_index=cpu-clock_samples"])
        .arg(&out)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&top.stdout);
    assert!(
        top.status.success(),
        "{}",
        String::from_utf8_lossy(&top.stderr)
    );
    assert!(
        text.contains(&format!("Total samples = {samples}")),
        "{what}: {text:.600}"
    );
    let top = Command::new("go")
        .args([
            "tool",
            "pprof",
            "-top",
            "-nodecount=100000",
            "-nodefraction=0",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&top.stdout);
    let mut go = Shares::new();
    for line in text.lines() {
        // "     100ms 30.05% 30.05%      100ms 30.05%  name with spaces"
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() >= 6 && cols[1].ends_with('%') && cols[4].ends_with('%') {
            if let Ok(pct) = cols[1].trim_end_matches('%').parse::<f64>() {
                *go.entry(cols[5..].join(" ")).or_default() += pct;
            }
        }
    }
    assert_top20_agree(&format!("{what} (go tool pprof)"), &go, &perf);
}

pipetest!(needs(perf, cc, go)
    pprof_of_a_c_program_has_perf_reports_top_functions,
    |dir| {
        pprof_agrees(&dir, "fp.c", &workloads::frame_pointer_c(&dir));
    }
);

pipetest!(needs(perf, cc, go)
    pprof_of_a_kernel_heavy_program_has_perf_reports_top_functions,
    |dir| {
        pprof_agrees(&dir, "syscalls.c", &workloads::kernel_heavy(&dir));
    }
);

/// Records `w` with `-g` into a Parquet file; DuckDB's per-function totals of the leaf frames
/// against perf report, and its row count against the sample count.
fn parquet_agrees(dir: &Dir, what: &str, w: &Workload) {
    let rec = w.record(&[]);
    let samples = count_samples(&perf_on(&["script", "-G", "-F", "tid"], &rec)) as u64;
    let perf = perf_report_shares(&rec);
    let file = dir.path("s.parquet");
    let r = perfpipe(&["-o", file.to_str().unwrap()], &rec);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let f = file.display();
    let count = duckdb(&format!("select count(*) from '{f}'"));
    assert_eq!(
        count.trim().parse::<u64>().unwrap(),
        samples,
        "{what}: a row per sample"
    );
    let rows = duckdb(&format!(
        "select stack[len(stack)].function, sum(period) * 100.0 / (select sum(period) from '{f}') \
         from '{f}' where stack[len(stack)].function is not null group by 1"
    ));
    let mut ours = Shares::new();
    for line in rows.lines() {
        let (name, pct) = line.rsplit_once('|').unwrap();
        ours.insert(name.to_string(), pct.parse().unwrap());
    }
    assert_top20_agree(&format!("{what} (DuckDB)"), &ours, &perf);
    // The workload's own frames carry its build id, read from the file (perf 6.1's pipe has none).
    let ids = duckdb(&format!(
        "select count(distinct f.build_id) from (select unnest(stack) as f from '{f}') \
         where f.dso = '{}' and f.build_id is not null",
        w.exe.display()
    ));
    assert_eq!(
        ids.trim(),
        "1",
        "{what}: the workload's frames have its build id"
    );
}

pipetest!(needs(perf, cc, duckdb)
    parquet_of_a_cpp_program_has_perf_reports_totals_per_function,
    |dir| {
        parquet_agrees(&dir, "templates.cc", &workloads::cpp_templates(&dir));
    }
);

pipetest!(needs(perf, cc, duckdb)
    parquet_of_a_kernel_heavy_program_has_perf_reports_totals_per_function,
    |dir| {
        parquet_agrees(&dir, "syscalls.c", &workloads::kernel_heavy(&dir));
    }
);

// A tracepoint's samples are named as perf names its event, `system:name` from the stream's
// tracing data, in pprof's sample types; in pipe mode and from a perf.data file.
pipetest!(
    needs(perf) a_tracepoint_is_named_as_perf_names_it,
    |dir| {
        for name in ["tracepoint.pipe.data", "tracepoint.file.data"] {
            let input = fixture(name);
            let perf = Command::new("perf")
                .args(["script", "-F", "event", "-i"])
                .arg(&input)
                .output()
                .unwrap();
            let perf = String::from_utf8_lossy(&perf.stdout);
            let event = perf.split(':').take(2).collect::<Vec<_>>().join(":");
            assert_eq!(event.trim(), "sched:sched_switch", "{name}: {perf}");
            let out = dir.path("tp.pb.gz");
            perfpipe_ok(
                &["-i", input.to_str().unwrap(), "-o", out.to_str().unwrap()],
                b"",
            );
            let d = decode_profile(&gunzip(&std::fs::read(&out).unwrap()));
            // (Off-CPU sample types follow for sched_switch: see docs/off-cpu.md.)
            let types: Vec<&str> = d.sample_types.iter().take(2).map(|t| t.0.as_str()).collect();
            assert_eq!(
                types,
                [format!("{}_samples", event.trim()), event.trim().to_string()],
                "{name}"
            );
        }
    }
);

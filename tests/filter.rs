//! `--filter` and its shorthands, checked against `perf script`'s own filters on live recordings,
//! a property test of the expression algebra, and bad expressions.
//!
//! Exit status of a bad expression (or shorthand value): 1, with the column and a hint on stderr.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use proptest::prelude::*;

use crate::util::{fixture_bytes, perf_on, perf_record, perfpipe, workload};

/// Recordings shared by the tests of this module (recording takes a few seconds each).
struct Recordings {
    /// Multi-process, per task.
    multi: Vec<u8>,
    /// System-wide, every cpu (samples carry CPU).
    all_cpus: Vec<u8>,
    /// Two events.
    two_events: Vec<u8>,
}

fn recordings() -> &'static Recordings {
    static R: OnceLock<Recordings> = OnceLock::new();
    R.get_or_init(|| {
        let w = workload();
        Recordings {
            multi: perf_record(&["-e", "cpu-clock", "-c", "100000"], &[&w, "multi", "2"]),
            all_cpus: perf_record(
                &["-a", "-e", "cpu-clock", "-c", "200000"],
                &[&w, "multi", "2"],
            ),
            two_events: perf_record(
                &["-e", "cpu-clock,task-clock", "-c", "200000"],
                &[&w, "multi", "2"],
            ),
        }
    })
}

/// No `sym`: `-a` recordings sample other processes, whose files may change between two `perf
/// script` runs (a concurrent build), and symbols then differ for reasons unrelated to filtering.
const FIELDS: &str = "comm,pid,tid,time,event,ip";

/// `perf script -F FIELDS ARGS` on a stream: one line per sample.
fn script(input: &[u8], fields: &str, args: &[&str]) -> String {
    let mut a = vec!["script", "-F", fields, "-G"];
    a.extend_from_slice(args);
    perf_on(&a, input)
}

fn filtered(flags: &[&str], input: &[u8]) -> Vec<u8> {
    let out = perfpipe(flags, input);
    assert!(
        out.status.success(),
        "perfpipe {flags:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Asserts that `perfpipe FLAGS | perf script` equals `perf script PERF_ARGS` on every recording,
/// and that the filter kept some samples and dropped some on at least one of them.
fn same_as_perf(flags: &[&str], perf_args: &[&str], input: &[u8]) -> (usize, usize) {
    let want = script(input, FIELDS, perf_args);
    let got = script(&filtered(flags, input), FIELDS, &[]);
    eqnice!(want, got);
    let all = script(input, FIELDS, &[]).lines().count();
    (got.lines().count(), all)
}

/// The most common values of a `perf script -F comm,pid,tid,cpu` column.
fn top(input: &[u8], field: &str, n: usize) -> Vec<String> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for l in script(input, field, &[]).lines() {
        *counts.entry(l.trim().to_string()).or_default() += 1;
    }
    let mut v: Vec<(usize, String)> = counts.into_iter().map(|(k, c)| (c, k)).collect();
    v.sort_by(|a, b| b.cmp(a));
    v.into_iter().take(n).map(|(_, k)| k).collect()
}

fn check_all(name: &str, per_input: impl Fn(&[u8]) -> (usize, usize)) {
    let r = recordings();
    let mut partial = false;
    for (what, input) in [
        ("multi", &r.multi),
        ("all-cpus", &r.all_cpus),
        ("two-events", &r.two_events),
    ] {
        let (kept, all) = per_input(input);
        eprintln!("{name} on {what}: kept {kept} of {all} samples");
        partial |= kept > 0 && kept < all;
    }
    assert!(partial, "{name}: the filter never kept a strict subset");
}

pipetest!(needs(perf) pid_matches_perf_script, |_dir| {
    check_all("--pid", |input| {
        let pids = top(input, "pid", 2).join(",");
        same_as_perf(&["--pid", &pids], &["--pid", &pids], input)
    });
});

pipetest!(needs(perf) tid_matches_perf_script, |_dir| {
    check_all("--tid", |input| {
        let tid = top(input, "tid", 1).join(",");
        same_as_perf(&["--tid", &tid], &["--tid", &tid], input)
    });
});

pipetest!(needs(perf) comm_matches_perf_script, |_dir| {
    check_all("--comm", |input| {
        let one = same_as_perf(&["--comm", "gzip"], &["--comm", "gzip"], input);
        same_as_perf(
            &["--comm", "bash,sha256sum"],
            &["--comm", "bash,sha256sum"],
            input,
        );
        one
    });
});

pipetest!(needs(perf) time_matches_perf_script, |_dir| {
    check_all("--time", |input| {
        let times: Vec<String> = script(input, "time", &[])
            .lines()
            .map(|l| l.trim().trim_end_matches(':').to_string())
            .collect();
        let (a, b) = (&times[times.len() / 3], &times[times.len() * 2 / 3]);
        let range = format!("{a},{b}");
        same_as_perf(&["--time", &range], &["--time", &range], input);
        let open_end = format!("{b},");
        same_as_perf(&["--time", &open_end], &["--time", &open_end], input);
        let open_start = format!(",{a}");
        same_as_perf(&["--time", &open_start], &["--time", &open_start], input)
    });
});

pipetest!(needs(perf) cpu_matches_the_cpu_column, |_dir| {
    // perf 6.1 `script --cpu N` fails on pipe input ("Requested CPU N too large"): compare with the
    // unfiltered samples whose CPU column is N.
    let input = &recordings().all_cpus;
    let fields = "cpu,comm,pid,tid,time,ip";
    let all = script(input, fields, &[]);
    for cpu in [0u32, 1] {
        let want: String = all
            .lines()
            .filter(|l| l.contains(&format!(" [{cpu:03}] ")))
            .map(|l| format!("{l}\n"))
            .collect();
        let got = script(&filtered(&["--cpu", &cpu.to_string()], input), fields, &[]);
        assert!(!got.is_empty() && got.lines().count() < all.lines().count());
        eqnice!(want, got);
    }
    let both = script(&filtered(&["--cpu", "0-1"], input), fields, &[]);
    eqnice!(all, both);
});

pipetest!(needs(perf) filter_event_and_combinations, |_dir| {
    let input = &recordings().two_events;
    let task = script(input, FIELDS, &[]);
    let want: String = task
        .lines()
        .filter(|l| l.contains("task-clock:"))
        .map(|l| format!("{l}\n"))
        .collect();
    let got = script(
        &filtered(&["--filter", "event == \"task-*\""], input),
        FIELDS,
        &[],
    );
    assert!(!want.is_empty());
    eqnice!(want, got);
    // Two stages in a chain are the conjunction.
    let chain = filtered(
        &["--comm", "gzip", "--filter", "event == \"cpu-clock\""],
        input,
    );
    let and = filtered(
        &["--filter", "comm == \"gzip\" && event == \"cpu-clock\""],
        input,
    );
    assert!(chain == and, "chain and conjunction differ");
});

pipetest!(compressed_input_is_decompressed_first, |_dir| {
    // --filter needs decompressed records: the CLI inserts --decompress by itself.
    let input = fixture_bytes("compressed.pipe.data");
    let out = perfpipe(&["--filter", "comm == \"gzip\"", "--stats"], &input);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("decompress"), "{stderr}");
    let kept: u64 = stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("samples_kept = "))
        .and_then(|v| v.parse().ok())
        .expect("samples_kept counter");
    assert!(kept > 0 && kept < 3509, "{kept}");
});

pipetest!(needs(perf) drop_removes_types, |_dir| {
    let input = fixture_bytes("switch.pipe.data");
    let out = filtered(&["--drop", "switch,finished_round"], &input);
    let out2 = perfpipe(&["--drop", "SWITCH", "--stats"], &input);
    assert!(out2.status.success());
    assert!(String::from_utf8_lossy(&out2.stderr).contains("records_dropped = 306"));
    assert_eq!(input.len() - out.len(), 306 * record_size(&input, 14) + 8);
    let s = perf_on(&["script", "--show-switch-events"], &out);
    assert!(!s.contains("PERF_RECORD_SWITCH"));
});

/// Size of the records of `type_` in a little-endian stream (all equal in the fixture).
fn record_size(stream: &[u8], type_: u32) -> usize {
    let mut pos = 16;
    while pos + 8 <= stream.len() {
        let t = u32::from_le_bytes(stream[pos..pos + 4].try_into().unwrap());
        let size = usize::from(u16::from_le_bytes(
            stream[pos + 6..pos + 8].try_into().unwrap(),
        ));
        if t == type_ {
            return size;
        }
        pos += size;
    }
    0
}

pipetest!(bad_expressions_are_clear_errors, |_dir| {
    let input = fixture_bytes("cpu-clock.pipe.data");
    let cases: &[(&[&str], &str)] = &[
        (&["--filter", "comm == bash"], "column 9"),
        (&["--filter", "pid = 3"], "column 5"),
        (&["--filter", "cpu == 0 &&"], "column 12"),
        (&["--filter", "(pid == 1"], "expected `)`"),
        (&["--filter", "nosuchfield > 1"], "unknown field"),
        (&["--filter", "time > 5 parsecs"], "column 10"),
        (&["--pid", "12,abc"], "column 4"),
        (&["--cpu", "3-1"], "column 1"),
        (&["--time", "2,1"], "END is before START"),
        (&["--drop", "nonsense"], "unknown record type"),
    ];
    for (args, want) in cases {
        let out = perfpipe(args, &input);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(want),
            "{args:?}: want {want:?} in:\n{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: wrote output");
    }
});

// ---------------------------------------------------------------------------------------------
// Property: the samples an expression keeps are the set algebra of its predicates, each run as a
// single filter (&& = intersection, || = union, ! = complement), and `--filter A --filter B` is
// `--filter 'A && B'` byte for byte.

/// The SAMPLE records (type 9) of a little-endian stream without trailing payloads.
fn samples(stream: &[u8]) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    let mut pos = 16;
    while pos + 8 <= stream.len() {
        let t = u32::from_le_bytes(stream[pos..pos + 4].try_into().unwrap());
        let size = usize::from(u16::from_le_bytes(
            stream[pos + 6..pos + 8].try_into().unwrap(),
        ));
        if t == 9 {
            v.push(stream[pos..pos + size].to_vec());
        }
        pos += size;
    }
    v
}

const LEAVES: &[&str] = &[
    "comm == \"gzip\"",
    "comm == \"s*\"",
    "comm in [\"bash\", \"env\"]",
    "pid < 1000000",
    "tid != 1",
    "cpu == 0",
    "time < +40ms",
    "time >= +0.1s",
    "event == \"cpu-clock\"",
    "event == \"task-clock\"",
    "cpumode == kernel",
    "cpumode != user",
    "ip >= 0xffffffff80000000",
    "period > 100000",
    "dso == \"*libc*\"",
    "dso == \"[kernel.kallsyms]\"",
];

#[derive(Clone, Debug)]
enum Tree {
    Leaf(usize),
    And(Box<Tree>, Box<Tree>),
    Or(Box<Tree>, Box<Tree>),
    Not(Box<Tree>),
}

impl Tree {
    fn text(&self) -> String {
        match self {
            Tree::Leaf(i) => LEAVES[*i].to_string(),
            Tree::And(a, b) => format!("({} && {})", a.text(), b.text()),
            Tree::Or(a, b) => format!("({} || {})", a.text(), b.text()),
            Tree::Not(a) => format!("!{}", a.text()),
        }
    }

    fn eval(&self, leaves: &[BTreeSet<usize>], all: &BTreeSet<usize>) -> BTreeSet<usize> {
        match self {
            Tree::Leaf(i) => leaves[*i].clone(),
            Tree::And(a, b) => &a.eval(leaves, all) & &b.eval(leaves, all),
            Tree::Or(a, b) => &a.eval(leaves, all) | &b.eval(leaves, all),
            Tree::Not(a) => all - &a.eval(leaves, all),
        }
    }
}

fn tree() -> impl Strategy<Value = Tree> {
    let leaf = (0..LEAVES.len()).prop_map(Tree::Leaf);
    leaf.prop_recursive(3, 12, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Tree::And(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Tree::Or(Box::new(a), Box::new(b))),
            inner.prop_map(|a| Tree::Not(Box::new(a))),
        ]
    })
}

struct Oracle {
    input: Vec<u8>,
    index: BTreeMap<Vec<u8>, usize>,
    all: BTreeSet<usize>,
    leaves: Vec<BTreeSet<usize>>,
}

impl Oracle {
    fn new(name: &str) -> Oracle {
        let input = fixture_bytes(name);
        let all_samples = samples(&input);
        let index: BTreeMap<Vec<u8>, usize> = all_samples
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, s)| (s, i))
            .collect();
        assert_eq!(
            index.len(),
            all_samples.len(),
            "samples of {name} are not unique"
        );
        let mut o = Oracle {
            all: (0..all_samples.len()).collect(),
            input,
            index,
            leaves: Vec::new(),
        };
        o.leaves = LEAVES.iter().map(|l| o.run(&["--filter", l])).collect();
        o
    }

    fn run(&self, args: &[&str]) -> BTreeSet<usize> {
        samples(&filtered(args, &self.input))
            .iter()
            .map(|s| self.index[s])
            .collect()
    }
}

fn oracles() -> &'static [Oracle] {
    static O: OnceLock<Vec<Oracle>> = OnceLock::new();
    O.get_or_init(|| {
        ["multiproc.pipe.data", "two-events.pipe.data"]
            .into_iter()
            .map(Oracle::new)
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    fn expressions_are_the_algebra_cases(t in tree(), u in tree()) {
        for o in oracles() {
            let want = t.eval(&o.leaves, &o.all);
            prop_assert_eq!(o.run(&["--filter", &t.text()]), want, "{}", t.text());
            let (a, b) = (t.text(), u.text());
            let chained = filtered(&["--filter", &a, "--filter", &b], &o.input);
            let conj = filtered(&["--filter", &format!("{a} && {b}")], &o.input);
            prop_assert!(chained == conj, "chain != conjunction for {} / {}", a, b);
        }
    }
}

pipetest!(expressions_are_the_algebra_of_their_predicates, |_dir| {
    expressions_are_the_algebra_cases();
});

pipetest!(needs(perf) prune_sideband_keeps_what_kept_samples_need, |_dir| {
    let r = recordings();
    for input in [&r.all_cpus, &r.multi] {
        let plain = filtered(&["--comm", "gzip"], input);
        let pruned = filtered(&["--comm", "gzip", "--prune-sideband"], input);
        assert!(
            pruned.len() < plain.len(),
            "{} !< {}",
            pruned.len(),
            plain.len()
        );
        // The same samples, resolved to the same symbols and dsos.
        let fields = "comm,pid,tid,time,ip,sym,dso";
        let want = script(&plain, fields, &[]);
        assert!(!want.is_empty());
        eqnice!(want, script(&pruned, fields, &[]));
        perf_on(&["report", "--stats"], &pruned);
    }
});

pipetest!(every_batch_size_gives_the_same_output, |_dir| {
    // Held batches (comm), the first-sample time, attr recompiles and released side-band must not
    // depend on where batches end.
    for name in [
        "multiproc.pipe.data",
        "two-events.pipe.data",
        "compressed.pipe.data",
    ] {
        let input = fixture_bytes(name);
        for args in [
            &["--filter", "comm == \"gzip\" || time < +30ms"][..],
            &["--filter", "event == \"task-clock\" || dso == \"*libc*\""][..],
            &["--comm", "bash", "--prune-sideband"][..],
        ] {
            let want = filtered(args, &input);
            for batch in ["4096", "64K", "1M"] {
                let mut a = args.to_vec();
                a.extend(["--batch-size", batch]);
                assert!(
                    filtered(&a, &input) == want,
                    "{name} {args:?} --batch-size {batch}"
                );
            }
        }
    }
});

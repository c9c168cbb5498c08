//! The folded-stack oracle: `perf script | inferno-collapse-perf`, and the comparison of two
//! folded outputs that tells how much of the sample weight agrees and lists every difference.
//!
//! [`compare`] keys both sides by stack (`comm;outer;…;inner`, the text before a line's last
//! space). A stack agrees when both sides give it the same count; the agreement is the weight of
//! agreeing stacks over the larger of the two totals, so a stack missing on one side, an extra
//! one, and a count off by one all count against it. [`Agreement`]'s `Display` is the report the
//! lead reads: the totals, every differing stack largest difference first, and the frames whose
//! weight differs (a frame's weight is that of the stacks holding it), which usually names the
//! symbol that came out wrong.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::process::Command;

use crate::util::run;

/// The share of the weight that must agree with the oracle (issue 16's acceptance).
pub const MIN_AGREEMENT: f64 = 0.999;

/// `inferno-collapse-perf ARGS` on `perf script` output: its folded stacks.
///
/// # Panics
///
/// When it fails or writes nothing.
pub fn collapse(script: &str, args: &[&str]) -> String {
    let out = run(
        Command::new("inferno-collapse-perf").args(args),
        script.as_bytes(),
    );
    assert!(
        out.status.success(),
        "inferno-collapse-perf {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("folded stacks are UTF-8");
    assert!(
        !text.trim().is_empty(),
        "inferno-collapse-perf {args:?} wrote no stack"
    );
    text
}

/// Folded stacks as `stack → count`, counts of a stack given twice added up.
///
/// # Panics
///
/// On a line that is not `STACK COUNT`.
pub fn parse(folded: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in folded.lines().filter(|l| !l.is_empty()) {
        let (stack, count) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("not `STACK COUNT`: {line:?}"));
        let count: u64 = count
            .parse()
            .unwrap_or_else(|_| panic!("not a count at the end: {line:?}"));
        *out.entry(stack.to_string()).or_default() += count;
    }
    out
}

/// One stack whose counts differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diff {
    pub stack: String,
    pub ours: u64,
    pub theirs: u64,
}

impl Diff {
    fn size(&self) -> u64 {
        self.ours.abs_diff(self.theirs)
    }
}

/// How two folded outputs agree: see the module doc.
#[derive(Debug, Clone)]
pub struct Agreement {
    /// The weight of the stacks both sides count the same.
    pub agreed: u64,
    /// Each side's total weight.
    pub ours: u64,
    pub theirs: u64,
    /// The number of distinct stacks on each side.
    pub stacks: (usize, usize),
    /// Every stack whose counts differ, largest difference first.
    pub diffs: Vec<Diff>,
    /// Every frame whose weight differs, as (frame, ours, theirs), largest difference first.
    pub frames: Vec<(String, u64, u64)>,
}

impl Agreement {
    /// The agreeing share of the weight, 0 to 1 (1 when both sides are empty).
    pub fn fraction(&self) -> f64 {
        match self.ours.max(self.theirs) {
            0 => 1.0,
            total => self.agreed as f64 / total as f64,
        }
    }
}

/// Compares our folded stacks with the oracle's.
pub fn compare(ours: &str, theirs: &str) -> Agreement {
    let (a, b) = (parse(ours), parse(theirs));
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let mut agreed = 0;
    let mut diffs = Vec::new();
    for stack in keys {
        let (x, y) = (
            a.get(stack).copied().unwrap_or(0),
            b.get(stack).copied().unwrap_or(0),
        );
        if x == y {
            agreed += x;
        } else {
            diffs.push(Diff {
                stack: stack.clone(),
                ours: x,
                theirs: y,
            });
        }
    }
    diffs.sort_by(|p, q| q.size().cmp(&p.size()).then(p.stack.cmp(&q.stack)));
    let (fa, fb) = (frame_weights(&a), frame_weights(&b));
    let names: BTreeSet<&String> = fa.keys().chain(fb.keys()).collect();
    let mut frames: Vec<(String, u64, u64)> = names
        .into_iter()
        .map(|f| {
            let w = |m: &BTreeMap<String, u64>| m.get(f).copied().unwrap_or(0);
            (f.clone(), w(&fa), w(&fb))
        })
        .filter(|(_, x, y)| x != y)
        .collect();
    frames.sort_by(|p, q| {
        q.1.abs_diff(q.2)
            .cmp(&p.1.abs_diff(p.2))
            .then(p.0.cmp(&q.0))
    });
    Agreement {
        agreed,
        ours: a.values().sum(),
        theirs: b.values().sum(),
        stacks: (a.len(), b.len()),
        diffs,
        frames,
    }
}

/// Frame name → weight of the stacks holding it (once per stack; the comm root is not a frame).
fn frame_weights(stacks: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (stack, &count) in stacks {
        let frames: BTreeSet<&str> = stack.split(';').skip(1).collect();
        for f in frames {
            *out.entry(f.to_string()).or_default() += count;
        }
    }
    out
}

impl fmt::Display for Agreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pct = |w: u64| 100.0 * w as f64 / self.ours.max(self.theirs).max(1) as f64;
        writeln!(
            f,
            "{:.3}% of the weight agrees: {} of max(ours {}, oracle {}); stacks: ours {}, \
             oracle {}, {} differ",
            100.0 * self.fraction(),
            self.agreed,
            self.ours,
            self.theirs,
            self.stacks.0,
            self.stacks.1,
            self.diffs.len()
        )?;
        if self.diffs.is_empty() {
            return Ok(());
        }
        writeln!(
            f,
            "stacks that differ, largest difference first (ours, oracle, % of the weight, stack):"
        )?;
        for d in &self.diffs {
            writeln!(
                f,
                "  {:>12} {:>12} {:>7.3}%  {}",
                d.ours,
                d.theirs,
                pct(d.size()),
                d.stack
            )?;
        }
        writeln!(
            f,
            "frames whose weight differs, largest difference first (ours, oracle, frame):"
        )?;
        for (name, x, y) in &self.frames {
            writeln!(f, "  {x:>12} {y:>12}  {name}")?;
        }
        Ok(())
    }
}

/// Prints the comparison of `ours` with `theirs` (the report goes to the test's output, shown
/// when it fails or under `--nocapture`) and asserts that at least [`MIN_AGREEMENT`] of the
/// weight agrees.
///
/// # Panics
///
/// When less agrees, or when the oracle has no samples.
pub fn assert_agrees(what: &str, ours: &str, theirs: &str) -> Agreement {
    let agreement = compare(ours, theirs);
    eprintln!("=== {what}: ours vs the oracle\n{agreement}");
    assert!(agreement.theirs > 0, "{what}: the oracle counted nothing");
    assert!(
        agreement.fraction() >= MIN_AGREEMENT,
        "{what}: only {:.3}% of the weight agrees with the oracle (at least {}% must); the \
         differences are listed above",
        100.0 * agreement.fraction(),
        100.0 * MIN_AGREEMENT
    );
    agreement
}

pipetest!(identical_outputs_agree_whatever_their_order, |_dir| {
    let a = "p;main;f 30\np;main;g 70\n";
    let b = "p;main;g 70\np;main;f 30\n";
    let r = compare(a, b);
    assert_eq!((r.agreed, r.ours, r.theirs), (100, 100, 100));
    assert_eq!(r.fraction(), 1.0);
    assert!(r.diffs.is_empty() && r.frames.is_empty(), "{r}");
});

pipetest!(
    every_kind_of_difference_counts_against_the_agreement_and_is_listed_largest_first,
    |_dir| {
        // ours: `g` is a count short, `h` is extra; the oracle has `k` that we lack.
        let ours = "p;main;f 500\np;main;g 299\np;main;h 1\n";
        let theirs = "p;main;f 500\np;main;g 300\np;main;k 200\n";
        let r = compare(ours, theirs);
        assert_eq!((r.agreed, r.ours, r.theirs), (500, 800, 1000));
        assert_eq!(r.fraction(), 0.5);
        let got: Vec<(&str, u64, u64)> = r
            .diffs
            .iter()
            .map(|d| (d.stack.as_str(), d.ours, d.theirs))
            .collect();
        assert_eq!(
            got,
            [
                ("p;main;k", 0, 200),
                ("p;main;g", 299, 300),
                ("p;main;h", 1, 0)
            ]
        );
        assert_eq!(
            r.frames,
            [
                ("k".to_string(), 0, 200),
                ("main".to_string(), 800, 1000),
                ("g".to_string(), 299, 300),
                ("h".to_string(), 1, 0)
            ]
        );
        let report = r.to_string();
        assert!(
            report.starts_with("50.000% of the weight agrees"),
            "{report}"
        );
        assert!(
            report.contains("  0          200  20.000%  p;main;k"),
            "{report}"
        );
    }
);

pipetest!(
    stacks_with_spaces_parse_at_the_last_space_and_repeats_add_up,
    |_dir| {
        let m = parse("tpl;std::sort<int, (lambda)> 5\ntpl;std::sort<int, (lambda)> 7\n");
        assert_eq!(m.len(), 1);
        assert_eq!(m["tpl;std::sort<int, (lambda)>"], 12);
    }
);

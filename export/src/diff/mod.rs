//! `diff`: two profiles compared stack by stack, what `perfpipe diff BASE NEW` writes.
//!
//! Each side is folded stacks with the weights of one recording ([`Side`]): made by a chain
//! ending in the [`side`] format (the same stages and options a folded output gets), or read from
//! a folded file. [`Diff::new`] joins them by stack and scales BASE as [`Normalize`] says; the
//! outputs are
//!
//! - [`Diff::write_folded`]: `stack BASE NEW` lines, `inferno-diff-folded`'s three-column form
//!   (and for [`Normalize::Total`] the very numbers `inferno-diff-folded -n` writes);
//! - [`svg`]: a differential flame graph, every frame coloured by the change of its whole
//!   subtree;
//! - [`pprof`](mod@pprof) (feature `pprof`): NEW's samples positive and BASE's negative, what
//!   `go tool pprof -diff_base BASE NEW` shows.
//!
//! ```
//! use perfpipe_export::diff::{Diff, Normalize, Side};
//!
//! let base = Side::parse("app;main;old 30\napp;main;same 10\n").unwrap();
//! let new = Side::parse("app;main;new 40\napp;main;same 40\n").unwrap();
//! let diff = Diff::new(base, new, Normalize::Total).unwrap();
//! let mut out = Vec::new();
//! diff.write_folded(&mut out).unwrap();
//! // BASE (40 in all) is scaled to NEW's total (80): ×2.
//! assert_eq!(
//!     String::from_utf8(out).unwrap(),
//!     "app;main;new 0 40\napp;main;old 60 0\napp;main;same 20 40\n"
//! );
//! ```

#[cfg(feature = "pprof")]
pub mod pprof;
pub mod side;
pub mod svg;

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;

/// How BASE is scaled before it is compared with NEW.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Normalize {
    /// BASE scaled to NEW's total weight, as `inferno-diff-folded -n` and `difffolded.pl -n` do:
    /// the change of each stack's *share* of the profile. The default: two recordings of
    /// different lengths or rates compare without a second thought, and a stack that grew while
    /// the rest stayed shows as grown.
    #[default]
    Total,
    /// Both sides per second of their sample time (first to last sample), BASE expressed over
    /// NEW's time: the change of each stack's *rate*, for a steady load recorded for different
    /// lengths.
    Time,
    /// The raw weights: the change of each stack's *cost*, for a job run to its end twice at the
    /// same sampling rate.
    None,
}

impl Normalize {
    /// The words `--normalize` takes.
    pub const NAMES: [&'static str; 3] = ["total", "time", "none"];
}

impl std::str::FromStr for Normalize {
    type Err = String;

    fn from_str(s: &str) -> Result<Normalize, String> {
        match s {
            "total" => Ok(Normalize::Total),
            "time" => Ok(Normalize::Time),
            "none" => Ok(Normalize::None),
            _ => Err(format!("`{s}`: normalize by total, time or none")),
        }
    }
}

impl fmt::Display for Normalize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Normalize::Total => "total",
            Normalize::Time => "time",
            Normalize::None => "none",
        })
    }
}

/// One side of a diff: folded stacks and their weights, and the span of its samples' times.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Side {
    /// `(stack, weight)`, root first, `;` between frames.
    pub lines: Vec<(String, u64)>,
    /// Nanoseconds from the first sample to the last (`None`: not known, as for a folded file).
    pub span_ns: Option<u64>,
}

/// A folded line that does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// Its line number, from 1.
    pub line: usize,
    /// The line.
    pub text: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}: not `STACK COUNT` folded stacks: {:?}",
            self.line, self.text
        )
    }
}

impl std::error::Error for ParseError {}

impl Side {
    /// Folded stacks from their text: `stack count` lines (a count with a fraction is truncated,
    /// as inferno does; blank lines are skipped), and the first line [`side::HEADER`] wrote, if
    /// any.
    ///
    /// # Errors
    /// [`ParseError`] naming the first line that is not `STACK COUNT`.
    pub fn parse(text: &str) -> Result<Side, ParseError> {
        let mut side = Side::default();
        let mut merged: BTreeMap<&str, u64> = BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            if i == 0 {
                if let Some(span) = side::parse_header(line) {
                    side.span_ns = span;
                    continue;
                }
            }
            let line = line.trim_end();
            if line.is_empty() {
                continue;
            }
            let bad = || ParseError {
                line: i + 1,
                text: line.chars().take(200).collect(),
            };
            let (stack, count) = line.rsplit_once(' ').ok_or_else(bad)?;
            let whole = count.split_once('.').map_or(count, |(w, _)| w);
            let count: u64 = whole.parse().map_err(|_| bad())?;
            let stack = stack.trim_end();
            if stack.is_empty() {
                return Err(bad());
            }
            *merged.entry(stack).or_default() += count;
        }
        side.lines = merged
            .into_iter()
            .map(|(s, c)| (s.to_string(), c))
            .collect();
        Ok(side)
    }

    /// The sum of the weights.
    pub fn total(&self) -> u64 {
        self.lines.iter().map(|(_, c)| c).sum()
    }
}

/// Why two sides cannot be compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiffError {
    /// `--normalize time` and a side whose sample time is not known (a folded file) or zero.
    NoTime(&'static str),
    /// `--normalize total` and an empty BASE.
    EmptyBase,
}

impl fmt::Display for DiffError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DiffError::NoTime(side) => write!(
                f,
                "--normalize time: {side} has no sample time (a folded file, or fewer than two \
                 timed samples); use --normalize total or none"
            ),
            DiffError::EmptyBase => f.write_str("BASE has no samples: nothing to scale"),
        }
    }
}

impl std::error::Error for DiffError {}

/// One stack of a diff: BASE's weight (scaled) and NEW's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// The stack, root first.
    pub stack: String,
    /// BASE's weight, scaled as the diff normalizes.
    pub base: u64,
    /// NEW's weight.
    pub new: u64,
}

/// Two sides joined by stack, BASE scaled.
#[derive(Clone, Debug)]
pub struct Diff {
    /// Every stack of either side, sorted.
    pub rows: Vec<Row>,
    /// How BASE was scaled.
    pub normalize: Normalize,
    /// BASE's total before scaling, and after.
    pub base_total: (u64, u64),
    /// NEW's total.
    pub new_total: u64,
    /// The factor BASE's weights were multiplied by.
    pub factor: f64,
    /// The sides' sample times (ns), when known.
    pub spans: (Option<u64>, Option<u64>),
}

impl Diff {
    /// Joins `base` and `new` by stack and scales BASE. Scaling multiplies then divides in
    /// `f64` and truncates, the arithmetic of `inferno-diff-folded -n`, so a `total` diff has
    /// its numbers to the unit; it is skipped when the two measures are equal.
    ///
    /// # Errors
    /// [`DiffError::NoTime`] for `time` without both sample times; [`DiffError::EmptyBase`] for
    /// `total` with an empty BASE and a non-empty NEW.
    pub fn new(base: Side, new: Side, normalize: Normalize) -> Result<Diff, DiffError> {
        let (base_sum, new_sum) = (base.total(), new.total());
        let (num, den) = match normalize {
            Normalize::None => (1, 1),
            Normalize::Total if base_sum == 0 && new_sum != 0 => return Err(DiffError::EmptyBase),
            Normalize::Total => (new_sum, base_sum),
            Normalize::Time => match (base.span_ns, new.span_ns) {
                (Some(b), Some(n)) if b > 0 && n > 0 => (n, b),
                (Some(b), _) if b > 0 => return Err(DiffError::NoTime("NEW")),
                _ => return Err(DiffError::NoTime("BASE")),
            },
        };
        let scale = |w: u64| {
            if num == den {
                w
            } else {
                (w as f64 * num as f64 / den as f64) as u64
            }
        };
        let mut joined: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for (s, w) in base.lines {
            joined.entry(s).or_default().0 += w;
        }
        for (s, w) in new.lines {
            joined.entry(s).or_default().1 += w;
        }
        let rows: Vec<Row> = joined
            .into_iter()
            .map(|(stack, (b, n))| Row {
                stack,
                base: scale(b),
                new: n,
            })
            .collect();
        Ok(Diff {
            base_total: (base_sum, rows.iter().map(|r| r.base).sum()),
            new_total: new_sum,
            factor: if num == den {
                1.0
            } else {
                num as f64 / den as f64
            },
            spans: (base.span_ns, new.span_ns),
            rows,
            normalize,
        })
    }

    /// Writes `stack BASE NEW` lines, sorted by stack: `inferno-diff-folded`'s output (which
    /// `inferno-flamegraph` and `flamegraph.pl` draw as a differential flame graph).
    ///
    /// # Errors
    /// What writing to `out` returns.
    pub fn write_folded(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let (mut b, mut n) = (itoa::Buffer::new(), itoa::Buffer::new());
        for r in &self.rows {
            out.write_all(r.stack.as_bytes())?;
            out.write_all(b" ")?;
            out.write_all(b.format(r.base).as_bytes())?;
            out.write_all(b" ")?;
            out.write_all(n.format(r.new).as_bytes())?;
            out.write_all(b"\n")?;
        }
        Ok(())
    }

    /// One line naming the normalization and the totals, for the SVG's subtitle and the end of
    /// the run: `normalize=total: BASE 1200 ×0.83 = 1000, NEW 1000`.
    pub fn summary(&self) -> String {
        let secs =
            |s: Option<u64>| s.map_or(String::new(), |s| format!(" in {:.3} s", s as f64 / 1e9));
        let how = match self.normalize {
            Normalize::Total => "BASE scaled to NEW's total",
            Normalize::Time => "BASE scaled to NEW's sample time",
            Normalize::None => "raw weights",
        };
        format!(
            "normalize={} ({how}): BASE {}{} ×{:.4} = {}, NEW {}{}",
            self.normalize,
            self.base_total.0,
            secs(self.spans.0),
            self.factor,
            self.base_total.1,
            self.new_total,
            secs(self.spans.1),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(text: &str, span: Option<u64>) -> Side {
        Side {
            span_ns: span,
            ..Side::parse(text).unwrap()
        }
    }

    #[test]
    fn normalizations_scale_base_as_named() {
        let base = "a;x 10\na;y 30\n";
        let new = "a;x 60\na;z 20\n";
        let rows = |n: Normalize, spans: (Option<u64>, Option<u64>)| {
            let d = Diff::new(side(base, spans.0), side(new, spans.1), n).unwrap();
            d.rows
                .iter()
                .map(|r| (r.stack.clone(), r.base, r.new))
                .collect::<Vec<_>>()
        };
        let none = (None, None);
        let rows = |n, spans| -> Vec<(String, u64, u64)> { rows(n, spans) };
        let s = |v: [(&str, u64, u64); 3]| v.map(|(a, b, c)| (a.to_string(), b, c));
        assert_eq!(
            rows(Normalize::None, none),
            s([("a;x", 10, 60), ("a;y", 30, 0), ("a;z", 0, 20)])
        );
        // Totals 40 and 80: ×2.
        assert_eq!(
            rows(Normalize::Total, none),
            s([("a;x", 20, 60), ("a;y", 60, 0), ("a;z", 0, 20)])
        );
        // BASE over 4 s, NEW over 1 s: BASE's rate over NEW's second is a quarter.
        assert_eq!(
            rows(Normalize::Time, (Some(4_000_000_000), Some(1_000_000_000))),
            s([("a;x", 2, 60), ("a;y", 7, 0), ("a;z", 0, 20)])
        );
        let err = Diff::new(side(base, None), side(new, Some(1)), Normalize::Time);
        assert_eq!(err.unwrap_err(), DiffError::NoTime("BASE"));
        let err = Diff::new(side(base, Some(1)), side(new, None), Normalize::Time);
        assert_eq!(err.unwrap_err(), DiffError::NoTime("NEW"));
        let err = Diff::new(side("", None), side(new, None), Normalize::Total);
        assert_eq!(err.unwrap_err(), DiffError::EmptyBase);
    }

    #[test]
    fn folded_text_parses_merges_and_refuses_what_is_not_folded() {
        let s = Side::parse("a;b 3\n\na;b 4.0\nx y;z 2.7\n").unwrap();
        assert_eq!(s.lines, [("a;b".into(), 7), ("x y;z".into(), 2)]);
        assert_eq!(s.span_ns, None);
        let e = Side::parse("a;b 3\nPERFILE2\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(Side::parse("a;b x\n").is_err());
        assert!(Side::parse(" 5\n").is_err());
        let s = Side::parse(&format!("{} 10 2000000010\na 1\n", side::HEADER)).unwrap();
        assert_eq!(s.span_ns, Some(2_000_000_000));
        assert_eq!(s.total(), 1);
    }

    #[test]
    fn a_side_compared_with_itself_is_unchanged_whatever_the_normalization() {
        let text = "a;b 7\na;c 5\nd 1\n";
        for n in [Normalize::Total, Normalize::Time, Normalize::None] {
            let s = side(text, Some(123));
            let d = Diff::new(s.clone(), s, n).unwrap();
            assert!(d.rows.iter().all(|r| r.base == r.new), "{n}");
            assert_eq!(d.factor, 1.0);
        }
    }
}

//! `diff-side`: the output format of one side of a diff, what `perfpipe diff` ends each side's
//! chain with: the folded stacks a folded output of the same options writes ([`Folded`]), after a
//! first line with the span of the samples' times ([`HEADER`]), which `--normalize time` needs.
//!
//! It is no format of the main command: `perfpipe diff` adds it to its copy of the registry, so
//! each side is the chain `perfpipe -o side.folded` with the same words would assemble (the
//! filters, `--unwind`, `symbolize`, the folded options such as `--weight`).

use std::io::Write;

use perfpipe_core::spec::{FormatSpec, Options};
use perfpipe_core::{Batch, Counter};
use perfpipe_profile::kit::{Join, Profile, SnapshotSink};

use crate::folded::{self, Folded, Lines, FOLD_OPTIONS};

/// The first line of a side's file, before `FIRST LAST` (ns on perf's clock, `- -` when no
/// sample had a time).
pub const HEADER: &str = "# perfpipe-diff-side time";

/// The span a header line gives: `None` for another line, `Some(None)` for `- -` or one time.
pub fn parse_header(line: &str) -> Option<Option<u64>> {
    let rest = line.strip_prefix(HEADER)?.trim();
    let (first, last) = rest.split_once(' ')?;
    Some(match (first.parse::<u64>(), last.parse::<u64>()) {
        (Ok(f), Ok(l)) if l > f => Some(l - f),
        _ => None,
    })
}

/// A side's profile: the folded stacks and the first and last sample times.
#[derive(Debug)]
pub struct SideProfile {
    folded: Folded,
    first: u64,
    last: u64,
}

impl SideProfile {
    /// An empty side with the folded options `o`.
    pub fn new(o: &Options) -> SideProfile {
        SideProfile {
            folded: Folded::new(folded::fold_options(o), Box::new(Lines)),
            first: u64::MAX,
            last: 0,
        }
    }
}

impl Profile for SideProfile {
    fn add(&mut self, batch: &Batch) {
        self.folded.add(batch);
        if let Some(join) = Join::of(batch) {
            for (_, s) in join.filter(|(_, s)| s.time != 0) {
                self.first = self.first.min(s.time);
                self.last = self.last.max(s.time);
            }
        }
    }

    fn write(&self, pool: Option<&rayon::ThreadPool>, out: &mut dyn Write) -> std::io::Result<()> {
        if self.first <= self.last {
            writeln!(out, "{HEADER} {} {}", self.first, self.last)?;
        } else {
            writeln!(out, "{HEADER} - -")?;
        }
        self.folded.write(pool, out)
    }

    fn finish(&mut self) {
        self.folded.finish();
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        self.folded.counters()
    }
}

/// The format, for `perfpipe diff`'s registry: folded's options (so `--weight`, `--stack-pid`
/// and the others apply), no flag of its own (chosen by `--format diff-side`).
pub const SPEC: FormatSpec = FormatSpec {
    name: "diff-side",
    help: "one side of a diff: folded stacks after a line with the span of the sample times",
    extensions: &[],
    flags: &[],
    options: &FOLD_OPTIONS,
    needs: &["symbolize"],
    sets: folded::symbolize_settings,
    build: |ctx, o, path| {
        let sink = SnapshotSink::build(ctx, path, SideProfile::new(o))?;
        Ok(Box::new(sink))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::Side;
    use crate::test_support::symbolized;

    const CALLGRAPH: &[u8] = include_bytes!("../../../tests/fixtures/callgraph.pipe.data");

    #[test]
    fn a_side_is_the_folded_output_after_the_sample_times() {
        let mut side = SideProfile::new(&Options::new());
        let mut plain = Folded::new(Default::default(), Box::new(Lines));
        for b in &symbolized(CALLGRAPH, 65536) {
            side.add(b);
            plain.add(b);
        }
        side.finish();
        plain.finish();
        let (mut ours, mut folded) = (Vec::new(), Vec::new());
        side.write(None, &mut ours).unwrap();
        plain.write(None, &mut folded).unwrap();
        let ours = String::from_utf8(ours).unwrap();
        let (head, rest) = ours.split_once('\n').unwrap();
        assert_eq!(rest.as_bytes(), folded, "the folded output, line for line");
        let span = parse_header(head).expect("a header").expect("a span");
        assert!(side.first < side.last && span == side.last - side.first);
        let parsed = Side::parse(&ours).unwrap();
        assert_eq!(parsed.span_ns, Some(span));
        assert_eq!(parsed.total(), 1777 * 200_000);
        assert_eq!(parse_header(&format!("{HEADER} - -")), Some(None));
        assert_eq!(parse_header("a;b 1"), None);
    }
}

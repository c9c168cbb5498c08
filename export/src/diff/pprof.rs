//! A diff as one pprof profile: each stack's NEW weight as a sample and its (scaled) BASE weight
//! as another, negative and labelled `pprof::base` = `true`, which is how `go tool pprof
//! -diff_base BASE NEW` merges two profiles itself; `go tool pprof -top d.pb.gz` then lists what
//! `-diff_base` lists, and its percentages are of BASE's total, as there.
//!
//! A frame is a function named as the folded stacks name it (the root, the thread's name, is one
//! too), with one location each; there are no addresses or mappings, which folded stacks do not
//! keep. The profile's comment is the normalization ([`Diff::summary`]; `go tool pprof
//! -comments`).

use std::io::Write;

use prost::Message;
use rustc_hash::FxHashMap;

use super::Diff;
use crate::pprof::{proto, Strings};

/// Writes `diff` as a gzip'd pprof profile whose one sample type is `value` (`(type, unit)`,
/// e.g. `("samples", "count")`).
///
/// # Errors
/// What writing to `out` returns.
pub fn write(diff: &Diff, value: (&str, &str), out: &mut dyn Write) -> std::io::Result<()> {
    crate::gzip(out, |out| {
        out.write_all(&profile(diff, value).encode_to_vec())
    })
}

/// The profile of `diff` (see the module doc).
pub fn profile(diff: &Diff, value: (&str, &str)) -> proto::Profile {
    let mut strings = Strings::new();
    let mut p = proto::Profile::default();
    let sample_type = proto::ValueType {
        r#type: strings.get(value.0),
        unit: strings.get(value.1),
    };
    p.sample_type.push(sample_type.clone());
    p.period_type = Some(sample_type);
    p.period = 1;
    p.comment.push(strings.get(&diff.summary()));
    let base_label = proto::Label {
        key: strings.get("pprof::base"),
        str: strings.get("true"),
        ..proto::Label::default()
    };
    let mut ids: FxHashMap<String, u64> = FxHashMap::default();
    for row in &diff.rows {
        let mut locations: Vec<u64> = row
            .stack
            .split(';')
            .map(|frame| {
                if let Some(&id) = ids.get(frame) {
                    return id;
                }
                let id = ids.len() as u64 + 1;
                let name = strings.get(frame);
                p.function.push(proto::Function {
                    id,
                    name,
                    system_name: name,
                    filename: 0,
                });
                p.location.push(proto::Location {
                    id,
                    line: vec![proto::Line {
                        function_id: id,
                        line: 0,
                    }],
                    ..proto::Location::default()
                });
                ids.insert(frame.to_string(), id);
                id
            })
            .collect();
        locations.reverse(); // pprof's order: the leaf first
        if row.new > 0 {
            p.sample.push(proto::Sample {
                location_id: locations.clone(),
                value: vec![row.new as i64],
                label: Vec::new(),
            });
        }
        if row.base > 0 {
            p.sample.push(proto::Sample {
                location_id: locations,
                value: vec![-(row.base as i64)],
                label: vec![base_label.clone()],
            });
        }
    }
    p.string_table = strings.table;
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::{Normalize, Side};

    #[test]
    fn base_is_negative_and_labelled_new_positive() {
        let base = Side::parse("app;main;old 30\napp;main;same 10\n").unwrap();
        let new = Side::parse("app;main;new 40\napp;main;same 40\n").unwrap();
        let d = Diff::new(base, new, Normalize::None).unwrap();
        let p = profile(&d, ("samples", "count"));
        let s = |i: i64| p.string_table[i as usize].as_str();
        let name = |loc: u64| s(p.function[loc as usize - 1].name);
        let mut got: Vec<(String, i64, bool)> = p
            .sample
            .iter()
            .map(|x| {
                let stack: Vec<&str> = x.location_id.iter().map(|&l| name(l)).collect();
                (stack.join("<"), x.value[0], !x.label.is_empty())
            })
            .collect();
        got.sort();
        let want = [
            ("new<main<app", 40, false),
            ("old<main<app", -30, true),
            ("same<main<app", -10, true),
            ("same<main<app", 40, false),
        ];
        let want: Vec<(String, i64, bool)> = want
            .iter()
            .map(|(a, b, c)| (a.to_string(), *b, *c))
            .collect();
        assert_eq!(got, want);
        assert_eq!(s(p.sample_type[0].r#type), "samples");
        assert!(s(p.comment[0]).starts_with("normalize=none"));
        assert_eq!(p.function.len(), 5, "each frame name once");
    }
}

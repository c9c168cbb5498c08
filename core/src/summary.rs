//! Reading a run's metrics: the bottleneck verdict, the `--stats` table and the `--stats-json`
//! document (with the [`Timeline`] when there is one).
//!
//! The verdict follows from each thread's three-way time split. Under backpressure every stage runs
//! at the bottleneck's rate, so throughput alone cannot locate it; where the time goes can:
//! - a stage that is mostly **working**, with the stages before it mostly blocked and the stages after
//!   it mostly starved, is the bottleneck;
//! - a source that mostly **waits on its input** (inside `read(2)`), with every stage after it
//!   starved, means the producer upstream of the pipeline limits;
//! - a sink that mostly **waits on its output** (inside `write(2)`), with every stage before it
//!   blocked, means the consumer downstream limits.

use std::fmt::Write as _;
use std::time::Duration;

use crate::metrics::StageSnapshot;
use crate::pipeline::{End, Report};
use crate::timeline::{Interval, StageSample, Timeline};

/// Which part of the pipeline limits its throughput.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// A stage is mostly working.
    Stage {
        /// The stage.
        name: String,
        /// Its working share of its thread's time, in percent.
        working: f64,
    },
    /// The source mostly waits on its input.
    Input {
        /// The source.
        name: String,
        /// Its share of time waiting on input, in percent.
        waiting: f64,
    },
    /// The sink mostly waits on its output.
    Output {
        /// The sink.
        name: String,
        /// Its share of time waiting on output, in percent.
        waiting: f64,
    },
    /// Nothing measured (no stages, or no time).
    Unknown,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verdict::Stage { name, working } => write!(
                f,
                "bottleneck: {name} ({working:.0}% working; stages before it wait to send, stages after it wait for input)"
            ),
            Verdict::Input { name, waiting } => write!(
                f,
                "bottleneck: the input ({name} waits on it {waiting:.0}% of the time; every stage keeps up)"
            ),
            Verdict::Output { name, waiting } => write!(
                f,
                "bottleneck: the output ({name} waits on the consumer {waiting:.0}% of the time)"
            ),
            Verdict::Unknown => f.write_str("bottleneck: unknown (nothing was measured)"),
        }
    }
}

/// Names the part of the pipeline that limits it, from the stages' time splits (pipeline order:
/// source first, sink last).
pub fn verdict(stages: &[StageSnapshot]) -> Verdict {
    let splits: Vec<Split<'_>> = stages
        .iter()
        .map(|s| Split {
            name: &s.name,
            working: s.working,
            starved: s.starved,
            blocked: s.blocked,
        })
        .collect();
    verdict_of(&splits)
}

/// A stage's three-way time split, over a whole run or part of one.
pub(crate) struct Split<'a> {
    pub(crate) name: &'a str,
    pub(crate) working: Duration,
    pub(crate) starved: Duration,
    pub(crate) blocked: Duration,
}

impl Split<'_> {
    fn pct(&self, d: Duration) -> f64 {
        let t = (self.working + self.starved + self.blocked).as_secs_f64();
        if t == 0.0 {
            0.0
        } else {
            100.0 * d.as_secs_f64() / t
        }
    }
}

/// [`verdict`] on time splits: of a run (`--stats`) or of one second of it (the timeline).
pub(crate) fn verdict_of(stages: &[Split<'_>]) -> Verdict {
    let (Some(first), Some(last)) = (stages.first(), stages.last()) else {
        return Verdict::Unknown;
    };
    if stages
        .iter()
        .all(|s| (s.working + s.starved + s.blocked).is_zero())
    {
        return Verdict::Unknown;
    }
    let busiest = stages
        .iter()
        .max_by(|a, b| a.pct(a.working).total_cmp(&b.pct(b.working)))
        .expect("non-empty");
    let working = busiest.pct(busiest.working);
    let input = first.pct(first.starved);
    let output = last.pct(last.blocked);
    if output > working && output >= input {
        Verdict::Output {
            name: last.name.to_string(),
            waiting: output,
        }
    } else if input > working {
        Verdict::Input {
            name: first.name.to_string(),
            waiting: input,
        }
    } else {
        Verdict::Stage {
            name: busiest.name.to_string(),
            working,
        }
    }
}

/// Names record kinds for display; the runtime itself only knows numbers.
pub type KindName<'a> = &'a dyn Fn(u32) -> String;

fn mb_per_s(bytes: u64, d: Duration) -> f64 {
    let s = d.as_secs_f64();
    if s > 0.0 {
        bytes as f64 / 1e6 / s
    } else {
        0.0
    }
}

/// Formats the per-stage table printed by `--stats`: one row per stage, the records each stage
/// added or removed per kind, the stages' own counters, and the verdict.
pub fn render_table(report: &Report, kind_name: KindName<'_>) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<12} {:>11} {:>11} {:>9} {:>8} {:>6} {:>6} {:>6} {:>9}",
        "stage", "records in", "records out", "MB", "MB/s", "work%", "starv%", "block%", "queue"
    );
    for st in &report.stages {
        let bytes = if st.output.batches > 0 {
            st.output.bytes
        } else {
            st.input.bytes
        };
        let queue = if st.queue_capacity == 0 {
            "-".to_string()
        } else {
            format!("{:.1}/{}", st.queue_fill_avg, st.queue_capacity)
        };
        let _ = writeln!(
            s,
            "{:<12} {:>11} {:>11} {:>9.1} {:>8.1} {:>6.1} {:>6.1} {:>6.1} {:>9}",
            st.name,
            st.input.records,
            st.output.records,
            bytes as f64 / 1e6,
            mb_per_s(bytes, report.wall),
            st.pct(st.working),
            st.pct(st.starved),
            st.pct(st.blocked),
            queue
        );
        let changes = kind_changes(st, kind_name);
        if !changes.is_empty() {
            let _ = writeln!(s, "{:<12}   records: {changes}", "");
        }
        for (name, v) in &st.counters {
            let _ = writeln!(s, "{:<12}   {name} = {v}", "");
        }
    }
    let _ = writeln!(s, "{}", verdict(&report.stages));
    let _ = write!(s, "wall {:.3} s", report.wall.as_secs_f64());
    s
}

/// "+BUILD_ID 30 -SAMPLE 1200": kinds whose count differs between a transform's input and output.
fn kind_changes(st: &StageSnapshot, kind_name: KindName<'_>) -> String {
    if st.input.records == 0 || st.output.batches == 0 {
        return String::new();
    }
    let mut kinds: Vec<u32> = st
        .input
        .kinds
        .iter()
        .chain(&st.output.kinds)
        .map(|(k, _)| *k)
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    let count = |v: &[(u32, u64)], k: u32| v.iter().find(|(x, _)| *x == k).map_or(0, |(_, n)| *n);
    let mut out = String::new();
    for k in kinds {
        let (i, o) = (count(&st.input.kinds, k), count(&st.output.kinds, k));
        if i != o {
            let sign = if o > i { '+' } else { '-' };
            let _ = write!(
                out,
                "{}{sign}{} {}",
                if out.is_empty() { "" } else { " " },
                kind_name(k),
                o.abs_diff(i)
            );
        }
    }
    out
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_flow(f: &crate::metrics::FlowSnapshot, kind_name: KindName<'_>) -> String {
    let kinds: Vec<String> = f
        .kinds
        .iter()
        .map(|(k, n)| format!("{}: {n}", json_str(&kind_name(*k))))
        .collect();
    format!(
        "{{\"batches\": {}, \"records\": {}, \"bytes\": {}, \"kinds\": {{{}}}}}",
        f.batches,
        f.records,
        f.bytes,
        kinds.join(", ")
    )
}

/// A note as a JSON object (non-finite numbers as `null`).
fn json_note(n: &crate::metrics::Note) -> String {
    use crate::metrics::NoteValue;
    let fields: Vec<String> = n
        .iter()
        .map(|(k, v)| {
            let v = match v {
                NoteValue::Text(t) => json_str(t),
                NoteValue::Int(i) => i.to_string(),
                NoteValue::Num(x) if x.is_finite() => format!("{x}"),
                NoteValue::Num(_) | NoteValue::Null => "null".to_string(),
                NoteValue::List(l) => {
                    let items: Vec<String> = l.iter().map(|t| json_str(t)).collect();
                    format!("[{}]", items.join(", "))
                }
            };
            format!("{}: {v}", json_str(k))
        })
        .collect();
    format!("{{{}}}", fields.join(", "))
}

fn end_name(e: End) -> &'static str {
    match e {
        End::Eof => "eof",
        End::Stopped => "stopped",
        End::DownstreamClosed => "downstream_closed",
        End::Cancelled => "cancelled",
        End::Failed => "failed",
        End::Detached => "detached",
    }
}

/// The `--stats-json` document (schema: `docs/stats.schema.json`, version 1).
pub fn render_json(report: &Report, kind_name: KindName<'_>) -> String {
    let mut s = String::from("{\n  \"schema_version\": 1,\n");
    let _ = writeln!(s, "  \"wall_seconds\": {:.6},", report.wall.as_secs_f64());
    let v = verdict(&report.stages);
    let _ = writeln!(
        s,
        "  \"bottleneck\": {{{}, \"text\": {}}},",
        json_verdict(&v),
        json_str(&v.to_string())
    );
    let errors: Vec<String> = report
        .errors
        .iter()
        .map(|e| json_str(&e.to_string()))
        .collect();
    let _ = writeln!(s, "  \"errors\": [{}],", errors.join(", "));
    s.push_str("  \"stages\": [\n");
    for (i, st) in report.stages.iter().enumerate() {
        let counters: Vec<String> = st
            .counters
            .iter()
            .map(|(n, v)| format!("{}: {v}", json_str(n)))
            .collect();
        let end = report.ends.get(i).copied().map_or("unknown", end_name);
        let notes = if st.notes.is_empty() {
            String::new()
        } else {
            let n: Vec<String> = st.notes.iter().map(json_note).collect();
            format!(",\n     \"notes\": [{}]", n.join(",\n       "))
        };
        let _ = write!(
            s,
            "    {{\"name\": {}, \"end\": {}, \"input\": {}, \"output\": {},\n     \
             \"working_seconds\": {:.6}, \"starved_seconds\": {:.6}, \"blocked_seconds\": {:.6},\n     \
             \"queue\": {{\"capacity\": {}, \"fill_avg\": {:.3}, \"fill_max\": {}}}, \"counters\": {{{}}}{notes}}}",
            json_str(&st.name),
            json_str(end),
            json_flow(&st.input, kind_name),
            json_flow(&st.output, kind_name),
            st.working.as_secs_f64(),
            st.starved.as_secs_f64(),
            st.blocked.as_secs_f64(),
            st.queue_capacity,
            st.queue_fill_avg,
            st.queue_fill_max,
            counters.join(", ")
        );
        s.push_str(if i + 1 < report.stages.len() {
            ",\n"
        } else {
            "\n"
        });
    }
    s.push_str("  ]");
    if let Some(t) = &report.timeline {
        s.push_str(",\n");
        json_timeline(&mut s, t);
    }
    s.push_str("\n}\n");
    s
}

/// `"kind": …, "stage": …, "percent": …` of a verdict.
fn json_verdict(v: &Verdict) -> String {
    let (kind, stage, pct) = match v {
        Verdict::Stage { name, working } => ("stage", Some(name), *working),
        Verdict::Input { name, waiting } => ("input", Some(name), *waiting),
        Verdict::Output { name, waiting } => ("output", Some(name), *waiting),
        Verdict::Unknown => ("unknown", None, 0.0),
    };
    format!(
        "\"kind\": {}, \"stage\": {}, \"percent\": {pct:.1}",
        json_str(kind),
        stage.map_or("null".to_string(), |n| json_str(n))
    )
}

/// The `timeline` member: the intervals' ends, each stage's series (one value per interval), and
/// the bottleneck of each bin.
fn json_timeline(s: &mut String, t: &Timeline) {
    let ivs = t.intervals();
    let list = |f: &dyn Fn(&Interval) -> String| -> String {
        let v: Vec<String> = ivs.iter().map(f).collect();
        format!("[{}]", v.join(", "))
    };
    let _ = writeln!(
        s,
        "  \"timeline\": {{\"period_seconds\": {}, \"bin_seconds\": {},",
        t.period.as_secs_f64(),
        t.bin().as_secs_f64()
    );
    let _ = writeln!(
        s,
        "    \"t\": {},",
        list(&|i| format!("{:.6}", i.to.as_secs_f64()))
    );
    s.push_str("    \"stages\": [\n");
    for (k, name) in t.names.iter().enumerate() {
        let secs = |f: fn(&StageSample) -> Duration| {
            list(&|i| format!("{:.6}", f(&i.stages[k]).as_secs_f64()))
        };
        let count = |f: fn(&StageSample) -> u64| list(&|i| f(&i.stages[k]).to_string());
        let _ = write!(
            s,
            "      {{\"name\": {},\n       \"working_seconds\": {},\n       \"starved_seconds\": {},\n       \
             \"blocked_seconds\": {},\n       \"records_in\": {},\n       \"records_out\": {},\n       \
             \"bytes_in\": {},\n       \"bytes_out\": {},\n       \"queue_fill_avg\": {}}}",
            json_str(name),
            secs(|x| x.working),
            secs(|x| x.starved),
            secs(|x| x.blocked),
            count(|x| x.records_in),
            count(|x| x.records_out),
            count(|x| x.bytes_in),
            count(|x| x.bytes_out),
            list(&|i| i.stages[k]
                .queue_fill_avg()
                .map_or("null".to_string(), |q| format!("{q:.3}"))),
        );
        s.push_str(if k + 1 < t.names.len() { ",\n" } else { "\n" });
    }
    s.push_str("    ],\n    \"bottlenecks\": [");
    let bins: Vec<String> = t
        .bottlenecks()
        .iter()
        .map(|b| {
            format!(
                "\n      {{\"from\": {:.6}, \"to\": {:.6}, {}}}",
                b.from.as_secs_f64(),
                b.to.as_secs_f64(),
                json_verdict(&b.verdict)
            )
        })
        .collect();
    let _ = write!(s, "{}\n    ]\n  }}", bins.join(","));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::NoteValue;

    #[test]
    fn notes_are_json_objects() {
        let note = vec![
            ("kind", NoteValue::Text("dso_unnamed".into())),
            ("dso", NoteValue::Text("/a \"b\"".into())),
            ("build_id", NoteValue::Null),
            ("samples", NoteValue::Int(3)),
            ("share", NoteValue::Num(0.25)),
            ("bad", NoteValue::Num(f64::NAN)),
            ("tried", NoteValue::List(vec!["x".into(), "y".into()])),
        ];
        assert_eq!(
            json_note(&note),
            r#"{"kind": "dso_unnamed", "dso": "/a \"b\"", "build_id": null, "samples": 3, "share": 0.25, "bad": null, "tried": ["x", "y"]}"#
        );
    }
}

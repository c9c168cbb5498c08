//! `--timeline FILE.svg` and the `timeline` of `--stats-json` (issue 43 item 4): the series adds
//! up to the totals `--stats` prints, each second's bottleneck is the one its counters name (in
//! the JSON and in the picture), a slow reader shows as `blocked` in the sink's lane, and the
//! SVG renders in headless Chromium with one lane per stage.

use std::io::{Read as _, Write as _};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::stats::{schema, validate};
use crate::util::*;

/// A run's two documents.
struct Run {
    json: Value,
    svg: String,
}

fn read_run(dir: &Dir) -> Run {
    let json = std::fs::read(dir.path("stats.json")).expect("--stats-json written");
    let json: Value = serde_json::from_slice(&json).unwrap();
    let svg = std::fs::read_to_string(dir.path("timeline.svg")).expect("--timeline written");
    Run { json, svg }
}

/// `--stats-json` and `--timeline` into `dir`, then `args`.
fn report_args(dir: &Dir, args: &[&str]) -> Vec<String> {
    let mut all = vec![
        "--stats-json".to_string(),
        dir.path("stats.json").display().to_string(),
        "--timeline".to_string(),
        dir.path("timeline.svg").display().to_string(),
    ];
    all.extend(args.iter().map(|a| a.to_string()));
    all
}

/// A run that lasts more than a second whatever the machine: half the input, then the rest once
/// `--progress` (a line at the start, then one a second) has shown the first half read three
/// times, so two seconds have passed. Once was not enough: a run ended at 1.03 s, inside the
/// first second's bin, and the first line may already show the half read.
fn two_part_run(dir: &Dir, extra: &[&str]) -> Run {
    let input = big_stream(40);
    let args = report_args(dir, &[&["--progress", "-o", "/dev/null"], extra].concat());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = spawn(&args);
    let mut sin = child.stdin.take().unwrap();
    let err = Watch::new(child.stderr.take().unwrap());
    let half = input.len() / 2;
    sin.write_all(&input[..half]).unwrap();
    let shown = format!("input {:.1} MB read", half as f64 / 1e6);
    err.wait_until(&shown, |text| {
        let lines = text.lines().filter(|l| {
            l.strip_prefix("perfpipe: input ")
                .and_then(|r| r.split(' ').next()?.parse::<f64>().ok())
                .is_some_and(|mb| mb * 1e6 >= (half as f64) - 1e5)
        });
        lines.count() >= 3
    });
    sin.write_all(&input[half..]).unwrap();
    drop(sin);
    let status = child.wait().unwrap();
    let err = err.finish_text();
    assert!(status.success(), "{err}");
    read_run(dir)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{v} is not a number"))
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(f).collect()
}

/// Checks the series against the totals, and the bins against the series; returns the bins as
/// `(kind, stage, from, to)`.
fn check_series(doc: &Value) -> Vec<(String, String, f64, f64)> {
    let schema = schema();
    validate(&schema, &schema, doc, "$").unwrap();
    // The schema describes the series: the validator rejects one that breaks it.
    let mut broken = doc.clone();
    broken["timeline"]["stages"][0]["bytes_in"][0] = Value::from("many");
    assert!(validate(&schema, &schema, &broken, "$").is_err());
    let tl = &doc["timeline"];
    let period = f(&tl["period_seconds"]);
    let t = floats(&tl["t"]);
    assert!(!t.is_empty());
    assert!(t.windows(2).all(|w| w[0] < w[1]), "{t:?}");
    let wall = f(&doc["wall_seconds"]);
    assert!(
        (t[t.len() - 1] - wall).abs() < 1e-3,
        "ends at {t:?}, wall {wall}"
    );
    let stages = doc["stages"].as_array().unwrap();
    let series = tl["stages"].as_array().unwrap();
    assert_eq!(series.len(), stages.len());
    for (st, se) in stages.iter().zip(series) {
        assert_eq!(st["name"], se["name"]);
        // Times: the same counters, summed from rounded values (6 decimals each).
        for key in ["working_seconds", "starved_seconds", "blocked_seconds"] {
            let sum: f64 = floats(&se[key]).iter().sum();
            let total = f(&st[key]);
            assert!(
                (sum - total).abs() <= period,
                "{} {key}: series {sum}, total {total}",
                st["name"]
            );
            assert!((sum - total).abs() < 1e-6 * t.len() as f64 + 1e-6);
        }
        // Counts: exactly.
        for (key, dir, what) in [
            ("records_in", "input", "records"),
            ("records_out", "output", "records"),
            ("bytes_in", "input", "bytes"),
            ("bytes_out", "output", "bytes"),
        ] {
            let sum: u64 = se[key]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .sum();
            assert_eq!(sum, st[dir][what].as_u64().unwrap(), "{} {key}", st["name"]);
        }
    }
    // Every bin is `--stats`' verdict on the time split of its own intervals.
    let names: Vec<&str> = series.iter().map(|s| s["name"].as_str().unwrap()).collect();
    let mut bins = Vec::new();
    let mut expected_from = 0.0;
    for b in tl["bottlenecks"].as_array().unwrap() {
        let (from, to) = (f(&b["from"]), f(&b["to"]));
        assert!(
            (from - expected_from).abs() < 1e-6,
            "bins are contiguous: {b}"
        );
        expected_from = to;
        let inside: Vec<usize> = (0..t.len())
            .filter(|&j| {
                let start = if j == 0 { 0.0 } else { t[j - 1] };
                start >= from - 1e-6 && t[j] <= to + 1e-6
            })
            .collect();
        assert!(!inside.is_empty(), "{b}");
        let split: Vec<[f64; 3]> = series
            .iter()
            .map(|s| {
                let sum = |k: &str| inside.iter().map(|&j| f(&s[k][j])).sum::<f64>();
                [
                    sum("working_seconds"),
                    sum("starved_seconds"),
                    sum("blocked_seconds"),
                ]
            })
            .collect();
        let (kind, stage) = verdict(&names, &split);
        assert_eq!(
            (
                b["kind"].as_str().unwrap(),
                b["stage"].as_str().unwrap_or("")
            ),
            (kind, stage.as_str()),
            "{b}: {split:?}"
        );
        bins.push((kind.to_string(), stage, from, to));
    }
    assert!(
        (expected_from - wall).abs() < 1e-3,
        "the bins end with the run"
    );
    bins
}

/// The rule of docs/measuring.md, on one time split per stage: `(kind, stage)`.
fn verdict(names: &[&str], split: &[[f64; 3]]) -> (&'static str, String) {
    let pct = |s: &[f64; 3], i: usize| {
        let total: f64 = s.iter().sum();
        if total == 0.0 {
            0.0
        } else {
            100.0 * s[i] / total
        }
    };
    if split.iter().all(|s| s.iter().sum::<f64>() == 0.0) {
        return ("unknown", String::new());
    }
    let mut busiest = 0;
    for (i, s) in split.iter().enumerate() {
        if pct(s, 0) >= pct(&split[busiest], 0) {
            busiest = i;
        }
    }
    let working = pct(&split[busiest], 0);
    let input = pct(&split[0], 1);
    let output = pct(&split[split.len() - 1], 2);
    if output > working && output >= input {
        ("output", names[names.len() - 1].to_string())
    } else if input > working {
        ("input", names[0].to_string())
    } else {
        ("stage", names[busiest].to_string())
    }
}

/// The value of attribute `name` in the tag `tag`.
fn attr<'a>(tag: &'a str, name: &str) -> &'a str {
    let at = tag
        .find(&format!(" {name}=\""))
        .unwrap_or_else(|| panic!("no {name} in {tag}"));
    let rest = &tag[at + name.len() + 3..];
    &rest[..rest.find('"').unwrap()]
}

/// The opening tags `<NAME …>` in `svg` that have `class="CLASS"`.
fn tags<'a>(svg: &'a str, name: &str, class: &str) -> Vec<&'a str> {
    svg.split(&format!("<{name} "))
        .skip(1)
        .map(|t| &t[..t.find('>').unwrap()])
        .filter(|t| t.contains(&format!("class=\"{class}\"")))
        .map(|t| t.trim_start())
        .collect()
}

/// The marks the picture draws: `(kind, stage, from, to)`.
fn marks(svg: &str) -> Vec<(String, String, f64, f64)> {
    tags(svg, "rect", "mark")
        .into_iter()
        .map(|t| {
            let num = |n: &str| attr(t, n).parse::<f64>().unwrap();
            (
                attr(t, "data-kind").to_string(),
                attr(t, "data-stage").to_string(),
                num("data-from"),
                num("data-to"),
            )
        })
        .collect()
}

/// The top of each lane's band (its grey background), by stage name.
fn lane_tops(svg: &str) -> Vec<(String, f64)> {
    lanes(svg)
        .into_iter()
        .map(|name| {
            let start = svg
                .find(&format!("<g class=\"lane\" data-stage=\"{name}\">"))
                .unwrap();
            let lane = &svg[start..start + svg[start..].find("</g>").unwrap()];
            let rect = lane.split("<rect ").nth(1).expect("a background");
            let y = attr(&format!(" {rect}"), "y").parse().unwrap();
            (name, y)
        })
        .collect()
}

/// Each mark is drawn just above the lane of the stage it names, and above no other.
fn marks_sit_on_their_lanes(svg: &str) {
    let tops = lane_tops(svg);
    for t in tags(svg, "rect", "mark") {
        let y: f64 = attr(t, "y").parse().unwrap();
        let above: Vec<&str> = tops
            .iter()
            .filter(|(_, top)| top - y > 0.0 && top - y <= 12.0)
            .map(|(n, _)| n.as_str())
            .collect();
        assert_eq!(above, [attr(t, "data-stage")], "{t}: lanes at {tops:?}");
    }
}

/// The lanes' stage names, in order.
fn lanes(svg: &str) -> Vec<String> {
    let lanes: Vec<String> = tags(svg, "g", "lane")
        .into_iter()
        .map(|t| attr(t, "data-stage").to_string())
        .collect();
    lanes
}

/// Area per fill colour of the rectangles (`M x y H x V y H x Z`) in the paths of `stage`'s lane.
fn lane_areas(svg: &str, stage: &str) -> Vec<(String, f64)> {
    let start = svg
        .find(&format!("<g class=\"lane\" data-stage=\"{stage}\">"))
        .unwrap_or_else(|| panic!("no lane {stage}"));
    let lane = &svg[start..start + svg[start..].find("</g>").unwrap()];
    let mut out = Vec::new();
    for p in lane.split("<path ").skip(1) {
        let p = &p[..p.find("/>").unwrap()];
        let (d, fill) = (
            attr(&format!(" {p}"), "d").to_string(),
            attr(&format!(" {p}"), "fill").to_string(),
        );
        if fill == "none" {
            continue;
        }
        let mut area = 0.0;
        for r in d.split('M').filter(|r| !r.is_empty()) {
            // x0 y0 H x1 V y1 H x0 Z
            let n: Vec<f64> = r
                .split(|c: char| c == ' ' || c.is_ascii_alphabetic())
                .filter(|s| !s.is_empty())
                .map(|s| s.parse().unwrap())
                .collect();
            assert_eq!(n.len(), 5, "a rectangle: {r}");
            area += (n[2] - n[0]).abs() * (n[3] - n[1]).abs();
        }
        out.push((fill, area));
    }
    out
}

const BLOCKED: &str = "#f08c3a";

pipetest!(
    /// The series sums to the totals of the same run, each second's bottleneck is the verdict on
    /// its own intervals, and the picture marks exactly those, one lane per stage.
    the_timeline_adds_up_to_the_stats_totals,
    |dir| {
        let tap = dir.path("tap.data");
        let tap = format!("decode={}", tap.display());
        let run = two_part_run(&dir, &["--tap", &tap]);
        let bins = check_series(&run.json);
        assert!(bins.len() >= 2, "a run of over a second: {bins:?}");
        let names: Vec<String> = run.json["stages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect();
        eqnice!(names, ["read", "decode", "tap:decode", "write"]);
        eqnice!(names, lanes(&run.svg));
        let drawn = marks(&run.svg);
        marks_sit_on_their_lanes(&run.svg);
        assert_eq!(drawn.len(), bins.len() - bins.iter().filter(|b| b.0 == "unknown").count());
        for (d, b) in drawn.iter().zip(bins.iter().filter(|b| b.0 != "unknown")) {
            assert_eq!((&d.0, &d.1), (&b.0, &b.1));
            assert!((d.2 - b.2).abs() < 1e-5 && (d.3 - b.3).abs() < 1e-5, "{d:?} {b:?}");
        }
    }
);

pipetest!(
    /// A reader that takes its time: the sink's lane is mostly `blocked` (inside write), and the
    /// marks name the output, on that lane.
    a_slow_reader_shows_as_blocked_in_the_sinks_lane,
    |dir| {
        let big = big_stream(120);
        let args = report_args(&dir, &["--pipe-buffer", "0", "--batch-size", "64K"]);
        let mut child = Command::new(bin())
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut sin = child.stdin.take().unwrap();
        let feeder = std::thread::spawn(move || sin.write_all(&big).unwrap());
        let mut sout = child.stdout.take().unwrap();
        let mut buf = vec![0u8; 16 * 1024];
        // The throttle itself (about 8 MB/s), not a wait for an event.
        while sout.read(&mut buf).unwrap() > 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
        feeder.join().unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let run = read_run(&dir);
        crate::fold::keep("timeline-slow-reader", &[("timeline.svg", run.svg.as_bytes())]);
        let bins = check_series(&run.json);
        assert!(bins.len() >= 2, "{bins:?}");
        let output = bins.iter().filter(|b| b.0 == "output" && b.1 == "write").count();
        assert!(output * 2 > bins.len(), "most seconds name the output: {bins:?}");
        // The picture: the marks on write's lane say so, and its lane is mostly orange.
        let drawn = marks(&run.svg);
        marks_sit_on_their_lanes(&run.svg);
        assert!(drawn.iter().any(|m| m.0 == "output" && m.1 == "write"), "{drawn:?}");
        let areas = lane_areas(&run.svg, "write");
        let total: f64 = areas.iter().map(|a| a.1).sum();
        let blocked: f64 = areas.iter().filter(|a| a.0 == BLOCKED).map(|a| a.1).sum();
        assert!(blocked > 0.5 * total, "write's lane: {areas:?}");
        // Upstream waits to send: decode's lane is blocked more than it works.
        let areas = lane_areas(&run.svg, "decode");
        let blocked: f64 = areas.iter().filter(|a| a.0 == BLOCKED).map(|a| a.1).sum();
        let total: f64 = areas.iter().map(|a| a.1).sum();
        assert!(blocked > 0.5 * total, "decode's lane: {areas:?}");
    }
);

pipetest!(needs(chromium)
    /// Chromium parses the picture as SVG and lays out one lane per stage; the screenshot is kept
    /// under `PERFPIPE_KEEP` for a person to look at.
    the_timeline_renders_in_chromium_with_one_lane_per_stage,
    |dir| {
        let run = two_part_run(&dir, &["--drop", "switch"]);
        let stages = run.json["stages"].as_array().unwrap().len();
        let svg = dir.path("timeline.svg");
        let url = format!("file://{}", svg.display());
        let out = chromium(&dir, 1200, 760)
            .args(["--dump-dom", &url])
            .output()
            .expect("chromium");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let dom = String::from_utf8(out.stdout).unwrap();
        assert!(dom.contains("<svg") && !dom.contains("parsererror"), "{dom:.2000}");
        let in_dom = lanes(&dom);
        assert_eq!(in_dom.len(), stages, "{in_dom:?}");
        eqnice!(lanes(&run.svg), in_dom);
        assert_eq!(marks(&dom), marks(&run.svg));
        let png = dir.path("timeline.png");
        let shot = chromium(&dir, 1200, 760)
            .arg(format!("--screenshot={}", png.display()))
            .arg(&url)
            .output()
            .expect("chromium");
        assert!(shot.status.success(), "{}", String::from_utf8_lossy(&shot.stderr));
        let png = std::fs::read(&png).expect("a screenshot");
        assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "{} bytes", png.len());
        crate::fold::keep(
            "timeline",
            &[("timeline.svg", run.svg.as_bytes()), ("timeline.png", &png)],
        );
    }
);

//! `--timeline FILE.svg`: the run drawn from its [`Timeline`], the counters `--stats` prints as
//! they changed. Hand-written SVG, no script, readable in any browser:
//!
//! - on top, the bytes/s through the pipeline: read (the source's output) as an area, written
//!   (the sink's input) as a line;
//! - one lane per stage, in pipeline order: the share of its thread's time spent working,
//!   blocked and starved in each interval, stacked (grey where its time is not split yet: the
//!   source inside a read, the sink inside a write),
//!   and the mean fill of its output queue as a line (the lane's top is a full queue);
//! - above each lane, a mark on every second that stage limited the run (`--stats`' verdict on
//!   that second alone); on the source's lane when the input limited, on the sink's when the
//!   output did;
//! - a time axis in seconds.
//!
//! Every lane is a `<g class="lane" data-stage="NAME">`, every mark a `<rect class="mark">` with
//! `data-kind`, `data-stage`, `data-from` and `data-to`, for scripts and tests.

use std::fmt::Write as _;
use std::time::Duration;

use perfpipe_core::timeline::Interval;
use perfpipe_core::{verdict, Report, Timeline, Verdict};

const WIDTH: f64 = 1200.0;
/// Room for the lanes' labels.
const LEFT: f64 = 200.0;
const RIGHT: f64 = 24.0;
const RATE_TOP: f64 = 104.0;
const RATE_H: f64 = 90.0;
const MARK_H: f64 = 8.0;
const LANE_H: f64 = 46.0;
/// From the top of one lane's mark strip to the next one's.
const LANE_STEP: f64 = MARK_H + 2.0 + LANE_H + 16.0;

const WORKING: &str = "#3b9c4b";
const BLOCKED: &str = "#f08c3a";
const STARVED: &str = "#a6cee3";
const IDLE: &str = "#e4e4e4";
const QUEUE: &str = "#222222";
const READ: &str = "#c6dbef";
const WRITTEN: &str = "#08519c";
const MARK_STAGE: &str = "#c0143c";
const MARK_END: &str = "#7b4fa6";
const NOTE: &str = "#555555";
const GRID: &str = "#d0d0d0";
const PANEL: &str = "#f8f8f8";
const FRAME: &str = "#bbbbbb";

/// The SVG document of `report`'s timeline, if it has one.
pub(crate) fn render(report: &Report) -> Option<String> {
    let tl = report.timeline.as_ref()?;
    let ivs = tl.intervals();
    let end = tl.samples.last().map_or(Duration::ZERO, |s| s.t);
    let wall = end.max(report.wall).as_secs_f64().max(1e-6);
    let plot_w = WIDTH - LEFT - RIGHT;
    let x = |t: Duration| LEFT + plot_w * t.as_secs_f64() / wall;
    let lanes_top = RATE_TOP + RATE_H + 30.0;
    let axis_y = lanes_top + tl.names.len() as f64 * LANE_STEP;
    let height = axis_y + 58.0;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r#"<rect width="{WIDTH}" height="{height}" fill="white"/>"#
    );
    header(&mut s, report, tl, wall);
    axis(&mut s, wall, &x, axis_y);
    rates(&mut s, tl, &ivs, &x);
    for (k, name) in tl.names.iter().enumerate() {
        lane(
            &mut s,
            report,
            k,
            name,
            &ivs,
            &x,
            lanes_top + k as f64 * LANE_STEP,
        );
    }
    marks(&mut s, tl, &x, lanes_top);
    let _ = writeln!(
        s,
        r#"<text x="12" y="{:.1}" fill="{NOTE}">Lanes: each stage thread's time per {} (grey: not split yet, a read or a write under way); line: mean fill of its output queue (top = full). Marks: the bottleneck of each {}.</text>"#,
        axis_y + 46.0,
        duration(tl.period),
        if tl.bin() > Duration::from_secs(1) {
            duration(tl.bin())
        } else {
            "second".to_string()
        }
    );
    s.push_str("</svg>\n");
    Some(s)
}

/// The title, the run's figures and verdict, and the legend.
fn header(s: &mut String, report: &Report, tl: &Timeline, wall: f64) {
    let read = report.stages.first().map_or(0, |f| f.output.bytes);
    let _ = writeln!(
        s,
        r#"<text x="12" y="24" font-size="17" font-weight="bold">perfpipe: where the time went</text>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="12" y="44">{} stages, {wall:.3} s, {:.1} MB read — {}</text>"#,
        tl.names.len(),
        read as f64 / 1e6,
        esc(&verdict(&report.stages).to_string())
    );
    let items = [
        (WORKING, "working"),
        (BLOCKED, "blocked: waiting to send (the sink: inside write)"),
        (
            STARVED,
            "starved: waiting for input (the source: inside read)",
        ),
    ];
    legend(s, 12.0, 66.0, &items, true);
    let items = [
        (MARK_STAGE, "bottleneck: this stage"),
        (
            MARK_END,
            "bottleneck: the input (on the source) or the output (on the sink)",
        ),
    ];
    legend(s, 12.0, 84.0, &items, false);
}

/// Colour swatches and their labels in a row from (`x`, `y`), then the queue line's if `queue`.
fn legend(s: &mut String, mut x: f64, y: f64, items: &[(&str, &str)], queue: bool) {
    for (colour, label) in items {
        let _ = writeln!(
            s,
            r#"<rect x="{x}" y="{}" width="12" height="12" fill="{colour}"/><text x="{}" y="{}">{}</text>"#,
            y - 10.0,
            x + 16.0,
            y,
            esc(label)
        );
        // About 5.8 px per character of 12 px sans-serif.
        x += 34.0 + 5.8 * label.chars().count() as f64;
    }
    if queue {
        let _ = writeln!(
            s,
            r#"<path d="M{x} {}h16" stroke="{QUEUE}" stroke-width="1.5"/><text x="{}" y="{y}">queue fill</text>"#,
            y - 4.0,
            x + 20.0
        );
    }
}

/// Vertical grid lines and labels at round seconds.
fn axis(s: &mut String, wall: f64, x: &dyn Fn(Duration) -> f64, axis_y: f64) {
    let step = nice(wall / 10.0);
    let decimals = (-step.log10()).ceil().max(0.0) as usize;
    let mut k = 0u32;
    loop {
        let t = step * f64::from(k);
        if t > wall * 1.0001 {
            break;
        }
        let tx = x(Duration::from_secs_f64(t));
        let _ = writeln!(
            s,
            r#"<path d="M{tx:.1} {RATE_TOP}V{axis_y}" stroke="{GRID}" stroke-width="0.6"/><text x="{tx:.1}" y="{:.1}" text-anchor="middle">{t:.decimals$} s</text>"#,
            axis_y + 16.0
        );
        k += 1;
    }
}

/// The bytes/s read and written, per interval.
fn rates(s: &mut String, tl: &Timeline, ivs: &[Interval], x: &dyn Fn(Duration) -> f64) {
    let last = tl.names.len().saturating_sub(1);
    let rate = |bytes: u64, iv: &Interval| {
        let dt = (iv.to - iv.from).as_secs_f64();
        if dt > 0.0 {
            bytes as f64 / dt
        } else {
            0.0
        }
    };
    let read: Vec<f64> = ivs.iter().map(|i| rate(i.stages[0].bytes_out, i)).collect();
    let written: Vec<f64> = ivs
        .iter()
        .map(|i| rate(i.stages[last].bytes_in, i))
        .collect();
    let top = nice(read.iter().chain(&written).fold(1.0, |a, &b| a.max(b)));
    let base = RATE_TOP + RATE_H;
    let y = |v: f64| base - RATE_H * v / top;
    let _ = writeln!(
        s,
        r#"<g class="rates"><rect x="{LEFT}" y="{RATE_TOP}" width="{:.1}" height="{RATE_H}" fill="{PANEL}" stroke="{FRAME}" stroke-width="0.5"/>"#,
        WIDTH - LEFT - RIGHT
    );
    let _ = writeln!(
        s,
        r#"<text x="12" y="{}" font-weight="bold">bytes/s through</text><text x="12" y="{}" font-weight="bold">the pipeline</text>"#,
        RATE_TOP + 14.0,
        RATE_TOP + 28.0
    );
    let _ = writeln!(
        s,
        r#"<rect x="12" y="{}" width="12" height="12" fill="{READ}"/><text x="28" y="{}">read</text><path d="M70 {}h16" stroke="{WRITTEN}" stroke-width="2"/><text x="90" y="{}">written</text>"#,
        RATE_TOP + 42.0,
        RATE_TOP + 52.5,
        RATE_TOP + 48.0,
        RATE_TOP + 52.5
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="end">{}</text><text x="{}" y="{base}" text-anchor="end">0</text>"#,
        LEFT - 4.0,
        RATE_TOP + 10.0,
        mb_s(top),
        LEFT - 4.0
    );
    if let Some(first) = ivs.first() {
        let mut area = format!("M{:.1} {base:.1}", x(first.from));
        let mut line = String::new();
        for (iv, (r, w)) in ivs.iter().zip(read.iter().zip(&written)) {
            let _ = write!(area, "V{:.1}H{:.1}", y(*r), x(iv.to));
            if line.is_empty() {
                let _ = write!(line, "M{:.1} {:.1}", x(iv.from), y(*w));
            }
            let _ = write!(line, "V{:.1}H{:.1}", y(*w), x(iv.to));
        }
        let _ = writeln!(
            s,
            r#"<path d="{area}V{base:.1}Z" fill="{READ}"/><path d="{line}" fill="none" stroke="{WRITTEN}" stroke-width="1.5"/>"#
        );
    }
    s.push_str("</g>\n");
}

/// One stage's lane: its label, the stacked shares and the queue line.
fn lane(
    s: &mut String,
    report: &Report,
    k: usize,
    name: &str,
    ivs: &[Interval],
    x: &dyn Fn(Duration) -> f64,
    top: f64,
) {
    let y0 = top + MARK_H + 2.0;
    let bottom = y0 + LANE_H;
    let _ = writeln!(s, r#"<g class="lane" data-stage="{}">"#, esc(name));
    let _ = writeln!(
        s,
        r#"<text x="12" y="{:.1}" font-size="13" font-weight="bold">{}</text>"#,
        y0 + 12.0,
        esc(name)
    );
    let totals = report.stages.get(k).filter(|st| st.name == name);
    if let Some(st) = totals {
        let _ = writeln!(
            s,
            r#"<text x="12" y="{:.1}" font-size="11">work {:.0}% · blocked {:.0}% · starved {:.0}%</text>"#,
            y0 + 27.0,
            st.pct(st.working),
            st.pct(st.blocked),
            st.pct(st.starved)
        );
        if st.queue_capacity > 0 {
            let _ = writeln!(
                s,
                r#"<text x="12" y="{:.1}" font-size="11">queue {:.1}/{} on average</text>"#,
                y0 + 41.0,
                st.queue_fill_avg,
                st.queue_capacity
            );
        }
    }
    let _ = writeln!(
        s,
        r#"<rect x="{LEFT}" y="{y0:.1}" width="{:.1}" height="{LANE_H}" fill="{IDLE}"/>"#,
        WIDTH - LEFT - RIGHT
    );
    // Working at the bottom, then blocked, then starved, each as one path of rectangles.
    let mut bands = [String::new(), String::new(), String::new()];
    for iv in ivs {
        let st = &iv.stages[k];
        let total = st.total().as_secs_f64();
        if total <= 0.0 {
            continue;
        }
        let (x0, x1) = (x(iv.from), x(iv.to));
        let mut at = bottom;
        for (d, band) in [st.working, st.blocked, st.starved].iter().zip(&mut bands) {
            let h = LANE_H * d.as_secs_f64() / total;
            if h > 0.0 {
                let _ = write!(band, "M{x0:.1} {:.2}H{x1:.1}V{at:.2}H{x0:.1}Z", at - h);
            }
            at -= h;
        }
    }
    for (band, colour) in bands.iter().zip([WORKING, BLOCKED, STARVED]) {
        if !band.is_empty() {
            let _ = writeln!(s, r#"<path d="{band}" fill="{colour}"/>"#);
        }
    }
    let capacity = totals.map_or(0, |st| st.queue_capacity);
    if capacity > 0 {
        let mut line = String::new();
        let mut open = false;
        for iv in ivs {
            match iv.stages[k].queue_fill_avg() {
                Some(q) => {
                    let y = bottom - LANE_H * (q / capacity as f64).min(1.0);
                    let _ = if open {
                        write!(line, "V{y:.2}H{:.1}", x(iv.to))
                    } else {
                        write!(line, "M{:.1} {y:.2}H{:.1}", x(iv.from), x(iv.to))
                    };
                    open = true;
                }
                None => open = false,
            }
        }
        if !line.is_empty() {
            let _ = writeln!(
                s,
                r#"<path d="{line}" fill="none" stroke="{QUEUE}" stroke-width="1.2"/>"#
            );
        }
    }
    s.push_str("</g>\n");
}

/// The bottleneck of each bin, above the lane of the stage it names.
fn marks(s: &mut String, tl: &Timeline, x: &dyn Fn(Duration) -> f64, lanes_top: f64) {
    s.push_str("<g class=\"marks\">\n");
    for b in tl.bottlenecks() {
        let (kind, name, colour) = match &b.verdict {
            Verdict::Stage { name, .. } => ("stage", name, MARK_STAGE),
            Verdict::Input { name, .. } => ("input", name, MARK_END),
            Verdict::Output { name, .. } => ("output", name, MARK_END),
            Verdict::Unknown => continue,
        };
        // Input and output verdicts name the source and the sink: their lanes are the first and last.
        let Some(k) = tl.names.iter().position(|n| n == name) else {
            continue;
        };
        let (x0, x1) = (x(b.from), x(b.to));
        let _ = writeln!(
            s,
            r#"<rect class="mark" data-kind="{kind}" data-stage="{}" data-from="{:.6}" data-to="{:.6}" x="{x0:.1}" y="{:.1}" width="{:.1}" height="{MARK_H}" fill="{colour}"><title>{:.1}–{:.1} s: {}</title></rect>"#,
            esc(name),
            b.from.as_secs_f64(),
            b.to.as_secs_f64(),
            lanes_top + k as f64 * LANE_STEP,
            (x1 - x0 - 0.5).max(0.5),
            b.from.as_secs_f64(),
            b.to.as_secs_f64(),
            esc(&b.verdict.to_string())
        );
    }
    s.push_str("</g>\n");
}

/// The smallest 1, 2 or 5 × 10ⁿ at or above `v`.
fn nice(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|&n| n >= v * 0.999_999)
        .unwrap_or(10.0 * p)
}

fn mb_s(bytes_per_s: f64) -> String {
    let mb = bytes_per_s / 1e6;
    if mb >= 10.0 {
        format!("{mb:.0} MB/s")
    } else {
        format!("{mb:.1} MB/s")
    }
}

/// `62.5 ms`, `1 s`.
fn duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{} s", d.as_secs_f64())
    }
}

/// Text escaped for XML.
fn esc(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_steps() {
        assert_eq!(nice(0.07), 0.1);
        assert_eq!(nice(1.0), 1.0);
        assert_eq!(nice(1.3), 2.0);
        assert_eq!(nice(3.0), 5.0);
        assert_eq!(nice(420e6), 500e6);
        assert_eq!(duration(Duration::from_micros(62_500)), "62.5 ms");
        assert_eq!(esc("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
    }
}

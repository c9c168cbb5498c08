//! The differential flame graph of a [`Diff`]: frames as wide as NEW's weight (BASE's with
//! `negate`, so that what vanished shows), each coloured by the change of its **whole subtree**
//! (the frame's own weight and all its callees'): red grew, blue shrank, the colour the more
//! saturated the larger the change against the largest of any frame, grey unchanged.
//!
//! Drawn here rather than by inferno: inferno (as `flamegraph.pl`) colours a frame by the change
//! of its own samples only, so the ancestors of a hot spot that moved show as unchanged
//! (inferno#295), and its tooltips give one count. Each frame's tooltip (`<title>`) names both
//! weights and the change; the details line under the graph shows it on hover; `Search` (or
//! Ctrl-F) highlights the frames whose name matches a regular expression and shows their share;
//! a click zooms on a frame, `Reset zoom` undoes it.

use std::fmt::Write as _;
use std::io::Write;

use super::Diff;

/// How the graph is drawn. Plain data.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiffGraph {
    /// The title (default `Differential Flame Graph`).
    pub title: Option<String>,
    /// A line under the title, before the normalization's.
    pub subtitle: Option<String>,
    /// Width in pixels (default 1200).
    pub width: Option<usize>,
    /// Widths from BASE (scaled), so frames that vanished in NEW show.
    pub negate: bool,
}

const FRAME_H: f64 = 16.0;
const PAD_X: f64 = 10.0;
const PAD_TOP: f64 = 3.0 * FRAME_H + 18.0;
const PAD_BOTTOM: f64 = 2.0 * FRAME_H + 10.0;
const FONT: f64 = 12.0;
const CHAR_W: f64 = FONT * 0.59;
/// Frames narrower than this (pixels) are not drawn.
const MIN_W: f64 = 0.1;
/// The grey of an unchanged frame, and the lightest red or blue.
const NEUTRAL: u8 = 220;

/// A frame of the merged stacks: its name, depth (0: the root, `all`), place in width units, and
/// its subtree's weights on each side.
#[derive(Clone, Copy, Debug)]
struct Node<'a> {
    name: &'a str,
    depth: usize,
    x: u64,
    base: u64,
    new: u64,
}

/// The frames of the diff's stacks wider than `min` width units (the root always), merged as a
/// flame graph merges them. The stacks are taken in the order of their frames (`;` before any
/// character), so the stacks under a frame are consecutive: a frame opens at the first of them
/// and closes at the first stack that leaves it, and only the open frames (one per depth) are
/// held, never a tree of every frame: memory grows with the frames drawn, not with the stacks.
fn merged<'a>(diff: &'a Diff, negate: bool, min: f64) -> Vec<Node<'a>> {
    let width = |base: u64, new: u64| if negate { base } else { new };
    let mut rows: Vec<&super::Row> = diff.rows.iter().collect();
    rows.sort_unstable_by(|a, b| a.stack.split(';').cmp(b.stack.split(';')));
    let mut root = Node {
        name: "all",
        depth: 0,
        x: 0,
        base: 0,
        new: 0,
    };
    let mut open: Vec<Node<'a>> = Vec::new();
    let mut drawn = Vec::new();
    let close = |n: Node<'a>, drawn: &mut Vec<Node<'a>>| {
        if width(n.base, n.new) as f64 >= min {
            drawn.push(n);
        }
    };
    let mut x = 0u64;
    for row in rows {
        let mut same = 0;
        for frame in row.stack.split(';') {
            match open.get(same) {
                Some(n) if n.name == frame => same += 1,
                _ => break,
            }
        }
        while open.len() > same {
            let n = open.pop().expect("an open frame");
            close(n, &mut drawn);
        }
        for frame in row.stack.split(';').skip(same) {
            open.push(Node {
                name: frame,
                depth: open.len() + 1,
                x,
                base: 0,
                new: 0,
            });
        }
        for n in open.iter_mut().chain(std::iter::once(&mut root)) {
            n.base += row.base;
            n.new += row.new;
        }
        x += width(row.base, row.new);
    }
    while let Some(n) = open.pop() {
        close(n, &mut drawn);
    }
    drawn.push(root);
    drawn.sort_unstable_by_key(|n| (n.depth, n.x));
    drawn
}

/// The fill of a frame whose subtree changed by `delta`, `max` the largest change of any frame:
/// grey when unchanged or when the change is under 1/440 of the largest, else red (grown) or
/// blue (shrunk), from the palest to pure as the change goes to the largest.
pub fn fill(delta: f64, max: f64) -> (u8, u8, u8) {
    if delta == 0.0 || max <= 0.0 {
        return (NEUTRAL, NEUTRAL, NEUTRAL);
    }
    let s = (delta.abs() / max).min(1.0);
    let faded = (f64::from(NEUTRAL) * (1.0 - s)).round() as u8;
    if faded == NEUTRAL {
        // A change too small to take a shade (truncation's few units in a scaled BASE).
        (NEUTRAL, NEUTRAL, NEUTRAL)
    } else if delta > 0.0 {
        (255, faded, faded)
    } else {
        (faded, faded, 255)
    }
}

/// `name`, XML-escaped.
fn escape(name: &str, out: &mut String) {
    for c in name.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\t' => out.push('?'),
            c => out.push(c),
        }
    }
}

/// The tooltip of a frame: `NAME: NEW 120 (12.00%), BASE 100 (10.00%), +20 (+20.00%)`.
fn tooltip(n: &Node<'_>, totals: (u64, u64)) -> String {
    let pct = |w: u64, t: u64| {
        if t == 0 {
            0.0
        } else {
            w as f64 * 100.0 / t as f64
        }
    };
    let delta = n.new as i128 - n.base as i128;
    let change = if n.base == 0 {
        "new".to_string()
    } else {
        format!("{:+.2}%", delta as f64 * 100.0 / n.base as f64)
    };
    format!(
        "{}: NEW {} ({:.2}%), BASE {} ({:.2}%), {delta:+} ({change})",
        n.name,
        n.new,
        pct(n.new, totals.1),
        n.base,
        pct(n.base, totals.0),
    )
}

impl DiffGraph {
    /// Writes the SVG of `diff`.
    ///
    /// # Errors
    /// What writing to `out` returns.
    pub fn render(&self, diff: &Diff, out: &mut dyn Write) -> std::io::Result<()> {
        let image_w = self.width.unwrap_or(1200) as f64;
        let total: u64 = (diff.rows.iter())
            .map(|r| if self.negate { r.base } else { r.new })
            .sum();
        let scale = (image_w - 2.0 * PAD_X) / total.max(1) as f64;
        // The frames drawn, root first.
        let drawn = merged(diff, self.negate, MIN_W / scale);
        let width_of = |n: &Node<'_>| if self.negate { n.base } else { n.new };
        let depth = drawn.iter().map(|n| n.depth).max().unwrap_or(0);
        let image_h = PAD_TOP + (depth + 1) as f64 * FRAME_H + PAD_BOTTOM;
        let max = drawn
            .iter()
            .filter(|n| n.depth != 0)
            .map(|n| (n.new as f64 - n.base as f64).abs())
            .fold(0.0, f64::max);
        let root = drawn[0];
        let totals = (root.base, root.new);

        let mut s = String::with_capacity(drawn.len() * 300 + 8192);
        let title = self.title.as_deref().unwrap_or("Differential Flame Graph");
        let widths = if self.negate {
            "widths: BASE (--negate)"
        } else {
            "widths: NEW"
        };
        let mut sub = String::new();
        if let Some(t) = &self.subtitle {
            sub.push_str(t);
            sub.push_str(" — ");
        }
        let _ = write!(
            sub,
            "{}; {widths}; red grew, blue shrank (a frame with all it calls)",
            diff.summary()
        );
        let _ = write!(
            s,
            r#"<?xml version="1.0" standalone="no"?>
<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">
<svg version="1.1" width="{image_w}" height="{image_h}" viewBox="0 0 {image_w} {image_h}" xmlns="http://www.w3.org/2000/svg" xmlns:fg="http://github.com/jonhoo/inferno" onload="init(evt)">
<style type="text/css">
text {{ font-family: Verdana, sans-serif; font-size: {FONT}px; fill: rgb(0,0,0); }}
#title {{ text-anchor: middle; font-size: 17px; }}
#subtitle {{ text-anchor: middle; fill: rgb(80,80,80); }}
#search, #unzoom {{ cursor: pointer; }}
#unzoom.hide {{ display: none; }}
#frames > g {{ cursor: pointer; }}
#frames > g:hover > rect {{ stroke: black; stroke-width: 0.5; }}
.hide {{ display: none; }}
</style>
<rect x="0" y="0" width="{image_w}" height="{image_h}" fill="rgb(250,250,250)"/>
<text id="title" x="{cx}" y="24">"#,
            cx = image_w / 2.0,
        );
        escape(title, &mut s);
        let _ = write!(
            s,
            r#"</text><text id="subtitle" x="{}" y="44">"#,
            image_w / 2.0
        );
        escape(&sub, &mut s);
        let _ = write!(
            s,
            r#"</text><text id="unzoom" class="hide" x="{PAD_X}" y="24">Reset zoom</text><text id="search" x="{sx}" y="24">Search</text><text id="matched" x="{sx}" y="{my}"> </text><text id="details" x="{PAD_X}" y="{my}"> </text>
<svg id="frames" x="{PAD_X}" width="{fw}" total_samples="{total}">
"#,
            sx = image_w - PAD_X - 60.0,
            my = image_h - 17.0,
            fw = image_w - 2.0 * PAD_X,
            total = total,
        );
        for n in &drawn {
            let (d, x) = (n.depth, n.x);
            let w = width_of(n) as f64 * scale;
            let px = x as f64 * scale;
            let y = image_h - PAD_BOTTOM - (d + 1) as f64 * FRAME_H;
            let (r, g, b) = fill(n.new as f64 - n.base as f64, max);
            s.push_str("<g><title>");
            escape(&tooltip(n, totals), &mut s);
            let _ = write!(
                s,
                r#"</title><rect x="{px:.2}" y="{y:.1}" width="{w:.2}" height="{h}" rx="2" fill="rgb({r},{g},{b})" fg:x="{x}" fg:w="{fw}" fg:d="{d}"/><text x="{tx:.2}" y="{ty:.1}"{light}>"#,
                h = FRAME_H - 1.0,
                fw = width_of(n),
                tx = px + 3.0,
                ty = y + FRAME_H - 4.5,
                // White names on the deepest reds and blues.
                light = if 0.3 * f64::from(r) + 0.59 * f64::from(g) + 0.11 * f64::from(b) < 110.0 {
                    r#" style="fill:white""#
                } else {
                    ""
                },
            );
            let fits = ((w - 6.0) / CHAR_W).floor();
            if fits >= 3.0 {
                let chars = n.name.chars().count();
                if chars as f64 <= fits {
                    escape(n.name, &mut s);
                } else {
                    let keep: String = n.name.chars().take(fits as usize - 2).collect();
                    escape(&keep, &mut s);
                    s.push_str("..");
                }
            }
            s.push_str("</text></g>\n");
        }
        s.push_str("</svg>\n<script type=\"text/ecmascript\"><![CDATA[\n");
        s.push_str(SCRIPT);
        s.push_str("\n]]></script>\n</svg>\n");
        out.write_all(s.as_bytes())
    }
}

/// Hover details, search and click-to-zoom: frames carry their place in weight units
/// (`fg:x`, `fg:w`) and depth (`fg:d`), so the script lays them out again for any zoom.
const SCRIPT: &str = r#"
var frames, details, matched, searchbtn, unzoombtn, total, fw, zoomed = null, query = null;
function init(evt) {
  frames = document.getElementById("frames");
  details = document.getElementById("details").firstChild;
  matched = document.getElementById("matched").firstChild;
  searchbtn = document.getElementById("search");
  unzoombtn = document.getElementById("unzoom");
  total = +frames.getAttribute("total_samples");
  fw = +frames.getAttribute("width");
  searchbtn.addEventListener("click", function () { search_prompt(); });
  unzoombtn.addEventListener("click", function () { zoom(null); });
  window.addEventListener("keydown", function (e) {
    if (e.keyCode === 114 || ((e.ctrlKey || e.metaKey) && e.keyCode === 70)) { e.preventDefault(); search_prompt(); }
  });
  var gs = frames.getElementsByTagName("g");
  for (var i = 0; i < gs.length; i++) {
    var g = gs[i];
    g.addEventListener("mouseover", function () { details.nodeValue = this.firstChild.textContent; });
    g.addEventListener("mouseout", function () { details.nodeValue = " "; });
    g.addEventListener("click", function () { zoom(this); });
  }
}
function attr(g, a) { return +g.getElementsByTagName("rect")[0].getAttribute("fg:" + a); }
function name_of(g) { var t = g.firstChild.textContent; return t.substring(0, t.lastIndexOf(": NEW ")); }
function layout(from, width, depth) {
  var gs = frames.getElementsByTagName("g"), s = fw / width;
  for (var i = 0; i < gs.length; i++) {
    var g = gs[i], r = g.getElementsByTagName("rect")[0], t = g.getElementsByTagName("text")[0];
    var x = attr(g, "x"), w = attr(g, "w"), d = attr(g, "d");
    var inside = x + w > from && x < from + width;
    var below = d < depth;
    if (!inside || (below && zoomed !== null)) {
      g.setAttribute("class", (inside && below) ? "" : "hide");
    } else { g.setAttribute("class", ""); }
    var px = Math.max(0, (x - from) * s), pw = Math.min(fw, (x + w - from) * s) - px;
    if (below && zoomed !== null && inside) { px = 0; pw = fw; r.setAttribute("opacity", "0.5"); }
    else { r.removeAttribute("opacity"); }
    r.setAttribute("x", px.toFixed(2)); r.setAttribute("width", Math.max(0, pw).toFixed(2));
    t.setAttribute("x", (px + 3).toFixed(2));
    var name = name_of(g), fits = Math.floor((pw - 6) / 7.08);
    t.textContent = fits < 3 ? "" : (name.length <= fits ? name : name.substring(0, fits - 2) + "..");
  }
}
function zoom(g) {
  zoomed = g;
  if (g === null) { unzoombtn.setAttribute("class", "hide"); layout(0, total, 0); }
  else { unzoombtn.setAttribute("class", ""); layout(attr(g, "x"), attr(g, "w"), attr(g, "d")); }
  if (query !== null) search(query);
}
function search_prompt() {
  var term = prompt("Search for (regular expression):", query === null ? "" : query);
  if (term === null) return;
  search(term === "" ? null : term);
}
function search(term) {
  query = term;
  var gs = frames.getElementsByTagName("g"), re = term === null ? null : new RegExp(term), spans = [];
  for (var i = 0; i < gs.length; i++) {
    var g = gs[i], r = g.getElementsByTagName("rect")[0];
    if (r.getAttribute("data-fill") === null) r.setAttribute("data-fill", r.getAttribute("fill"));
    if (re !== null && re.test(name_of(g))) {
      r.setAttribute("fill", "rgb(230,0,230)");
      spans.push([attr(g, "x"), attr(g, "w")]);
    } else { r.setAttribute("fill", r.getAttribute("data-fill")); }
  }
  if (re === null) { matched.nodeValue = " "; searchbtn.firstChild.nodeValue = "Search"; return; }
  spans.sort(function (a, b) { return a[0] - b[0] || b[1] - a[1]; });
  var sum = 0, end = -1;
  for (var j = 0; j < spans.length; j++) {
    if (spans[j][0] >= end) { sum += spans[j][1]; end = spans[j][0] + spans[j][1]; }
  }
  searchbtn.firstChild.nodeValue = "Reset search";
  matched.nodeValue = "Matched: " + (total > 0 ? (100 * sum / total).toFixed(2) : "0") + "%";
}
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::{Normalize, Side};

    fn diff(base: &str, new: &str) -> Diff {
        Diff::new(
            Side::parse(base).unwrap(),
            Side::parse(new).unwrap(),
            Normalize::None,
        )
        .unwrap()
    }

    /// `(title, fill)` of every frame.
    fn frames(svg: &str) -> Vec<(String, String)> {
        svg.split("<g><title>")
            .skip(1)
            .map(|g| {
                let title = g.split("</title>").next().unwrap().to_string();
                let fill = g.split("fill=\"").nth(1).unwrap();
                (title, fill[..fill.find('"').unwrap()].to_string())
            })
            .collect()
    }

    #[test]
    fn ancestors_take_the_colour_of_their_whole_subtree() {
        // `main` has no samples of its own; `hot` under it grew, `cold` beside it did not.
        let d = diff(
            "app;main;hot 10\napp;cold 10\n",
            "app;main;hot 30\napp;cold 10\n",
        );
        let mut svg = Vec::new();
        DiffGraph::default().render(&d, &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        let f = frames(&svg);
        let of = |name: &str| {
            f.iter()
                .find(|(t, _)| t.starts_with(&format!("{name}: ")))
                .unwrap_or_else(|| panic!("{name} in {f:?}"))
                .clone()
        };
        assert_eq!(of("hot").1, "rgb(255,0,0)", "the largest change");
        assert_eq!(
            of("main").1,
            "rgb(255,0,0)",
            "its whole subtree grew as much"
        );
        assert_eq!(of("cold").1, "rgb(220,220,220)", "unchanged");
        assert_eq!(
            of("hot").0,
            "hot: NEW 30 (75.00%), BASE 10 (50.00%), +20 (+200.00%)"
        );
        assert!(svg.contains("normalize=none"), "the normalization is named");
        assert!(svg.contains("id=\"search\""));
    }

    #[test]
    fn shrunk_frames_are_blue_and_negate_draws_what_vanished() {
        let d = diff("a;gone 40\na;kept 10\n", "a;kept 10\na;new 5\n");
        let (mut plain, mut negated) = (Vec::new(), Vec::new());
        DiffGraph::default().render(&d, &mut plain).unwrap();
        let negate = DiffGraph {
            negate: true,
            ..DiffGraph::default()
        };
        negate.render(&d, &mut negated).unwrap();
        let names = |svg: &[u8]| -> Vec<String> {
            frames(std::str::from_utf8(svg).unwrap())
                .into_iter()
                .map(|(t, f)| format!("{} {f}", t.split(':').next().unwrap()))
                .collect()
        };
        // Widths from NEW: `gone` has none; `a` shrank by 35 (the largest change).
        assert_eq!(
            names(&plain),
            [
                "all rgb(0,0,255)",
                "a rgb(0,0,255)",
                "kept rgb(220,220,220)",
                "new rgb(255,189,189)"
            ]
        );
        // Widths from BASE: `gone` shows (and `new`, with none, does not).
        assert_eq!(
            names(&negated),
            [
                "all rgb(28,28,255)",
                "a rgb(28,28,255)",
                "gone rgb(0,0,255)",
                "kept rgb(220,220,220)"
            ]
        );
    }

    #[test]
    fn a_frame_is_one_frame_whatever_names_sort_between_its_stacks() {
        // As strings `x;a b` sorts between `x;a;c` and `x;a;d` (' ' < ';'); as frames it follows.
        let d = diff("x;a;c 1\nx;a b 4\nx;a;d 2\n", "x;a;c 1\nx;a b 4\nx;a;d 3\n");
        let nodes = merged(&d, false, 0.0);
        let got: Vec<(&str, usize, u64, u64, u64)> = nodes
            .iter()
            .map(|n| (n.name, n.depth, n.x, n.base, n.new))
            .collect();
        assert_eq!(
            got,
            [
                ("all", 0, 0, 7, 8),
                ("x", 1, 0, 7, 8),
                ("a", 2, 0, 3, 4),
                ("a b", 2, 4, 4, 4),
                ("c", 3, 0, 1, 1),
                ("d", 3, 1, 2, 3),
            ]
        );
        // Frames narrower than the least width are left out, with all they hold.
        let wide: Vec<&str> = merged(&d, false, 3.5).iter().map(|n| n.name).collect();
        assert_eq!(wide, ["all", "x", "a", "a b"]);
    }

    #[test]
    fn names_are_escaped() {
        let d = diff("a;operator<<&\"x\" 1\n", "a;operator<<&\"x\" 2\n");
        let mut svg = Vec::new();
        DiffGraph {
            title: Some("<t>".into()),
            ..DiffGraph::default()
        }
        .render(&d, &mut svg)
        .unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.contains("operator&lt;&lt;&amp;&quot;x&quot;"));
        assert!(svg.contains("&lt;t&gt;") && !svg.contains("<t>"));
    }
}

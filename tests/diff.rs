//! `perfpipe diff` (issue 42) on live recordings of `shift.c` whose hot function moves between two
//! runs (`shift 240 80`: BASE, most of the work in `shift_a`; `shift 80 240`: NEW, in `shift_b`):
//! the folded diff against `inferno-diff-folded -n` of our two folded outputs, the differential
//! flame graph rendered by headless Chromium (pixels red and blue where expected), the pprof diff
//! against `go tool pprof -diff_base`, a recording diffed with itself all neutral, `--normalize
//! time` against the sample times `perf script` prints, and NEW from a live `perf record` pipe.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::util::*;
use crate::workloads;

/// BASE and NEW recorded in `dir`: `(base.data, new.data)`, BASE in file mode (`perf record -o
/// FILE`), NEW in pipe mode (`perf record -o -`), so every test diffs both kinds.
fn record_pair(dir: &Dir) -> (PathBuf, PathBuf) {
    let base = dir.path("base.data");
    let w = workloads::shift(dir, (240, 80));
    oracle().record_file(
        &base,
        &["-e", "cpu-clock", "-F", workloads::FREQ, "-g"],
        &w.argv(),
    );
    let new = workloads::shift(dir, (80, 240)).record(&[]);
    (base, dir.write("new.data", &new))
}

fn s(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// `perfpipe diff ARGS` (standard input `stdin`), asserting success; its standard error.
fn diff_ok(args: &[&str], stdin: &[u8]) -> String {
    let mut all = vec!["diff"];
    all.extend_from_slice(args);
    let out = perfpipe(&all, stdin);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "perfpipe {all:?}: {err}");
    err
}

/// The lines of a text, sorted.
fn sorted(text: &str) -> Vec<&str> {
    let mut v: Vec<&str> = text.lines().collect();
    v.sort_unstable();
    v
}

/// Per leaf frame, the sums of a three-column diff's BASE and NEW.
fn by_leaf(folded: &str) -> BTreeMap<String, (i64, i64)> {
    let mut m: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for line in folded.lines() {
        let mut parts = line.rsplitn(3, ' ');
        let new: i64 = parts.next().unwrap().parse().unwrap();
        let base: i64 = parts.next().unwrap().parse().unwrap();
        let leaf = parts
            .next()
            .unwrap()
            .rsplit(';')
            .next()
            .unwrap()
            .to_string();
        let e = m.entry(leaf).or_default();
        e.0 += base;
        e.1 += new;
    }
    m
}

/// Asserts the work moved from `shift_a` to `shift_b` by at least a third of each's NEW weight
/// (each moved 160 of 470 rounds).
fn assert_work_moved(folded: &str) {
    let leaves = by_leaf(folded);
    let (a, b) = (leaves["shift_a"], leaves["shift_b"]);
    assert!(a.0 > 2 * a.1, "shift_a shrank: {a:?}");
    assert!(b.1 > 2 * b.0, "shift_b grew: {b:?}");
}

pipetest!(needs(perf, cc, inferno) total_normalized_folded_is_inferno_diff_folded_n_of_our_folded, |dir| {
    let (base, new) = record_pair(&dir);
    let (bf, nf) = (dir.path("base.folded"), dir.path("new.folded"));
    perfpipe_ok(&["-i", s(&base), "-o", s(&bf)], b"");
    perfpipe_ok(&["-i", s(&new), "-o", s(&nf)], b"");
    let oracle = succeed(Command::new("inferno-diff-folded").args(["-n", s(&bf), s(&nf)])).stdout;
    let oracle = String::from_utf8(oracle).unwrap();
    let d = dir.path("d.folded");
    let end = diff_ok(&[s(&base), s(&new), "-o", s(&d)], b"");
    let ours = std::fs::read_to_string(&d).unwrap();
    eqnice!(sorted(&oracle), sorted(&ours));
    assert!(ours.lines().count() > 10, "{ours}");
    assert_work_moved(&ours);
    // The default normalization is named at the end.
    assert!(end.contains("normalize=total"), "{end}");
    // From the folded files, and NEW from standard input (a pipe), the same.
    let from_folded = perfpipe_ok(&["diff", s(&bf), s(&nf)], b"");
    eqnice!(ours.as_str(), std::str::from_utf8(&from_folded).unwrap());
    let piped = perfpipe_ok(&["diff", s(&bf)], &std::fs::read(&new).unwrap());
    eqnice!(ours.as_str(), std::str::from_utf8(&piped).unwrap());
    // Without normalization the numbers are the two folded outputs' own.
    let raw = perfpipe_ok(&["diff", s(&bf), s(&nf), "--normalize", "none"], b"");
    let oracle = succeed(Command::new("inferno-diff-folded").args([s(&bf), s(&nf)])).stdout;
    eqnice!(
        sorted(std::str::from_utf8(&oracle).unwrap()),
        sorted(std::str::from_utf8(&raw).unwrap())
    );
});

/// A PNG's pixels as RGB rows (8-bit RGB or RGBA, not interlaced: what Chromium writes).
fn png_rgb(png: &[u8]) -> (usize, usize, Vec<[u8; 3]>) {
    use std::io::Read as _;
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG");
    let (mut at, mut idat, mut head) = (8, Vec::new(), None);
    while at + 8 <= png.len() {
        let len = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
        let kind = &png[at + 4..at + 8];
        let data = &png[at + 8..at + 8 + len];
        match kind {
            b"IHDR" => {
                head = Some((
                    data[..4].to_vec(),
                    data[4..8].to_vec(),
                    data[8],
                    data[9],
                    data[12],
                ))
            }
            b"IDAT" => idat.extend_from_slice(data),
            _ => {}
        }
        at += 12 + len;
    }
    let (w, h, depth, color, interlace) = head.expect("an IHDR chunk");
    let w = u32::from_be_bytes(w.try_into().unwrap()) as usize;
    let h = u32::from_be_bytes(h.try_into().unwrap()) as usize;
    assert!(
        depth == 8 && (color == 2 || color == 6) && interlace == 0,
        "8-bit RGB(A)"
    );
    let bpp = if color == 6 { 4 } else { 3 };
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(&idat[..])
        .read_to_end(&mut raw)
        .unwrap();
    let stride = w * bpp;
    let mut prev = vec![0u8; stride];
    let mut pixels = Vec::with_capacity(w * h);
    for y in 0..h {
        let row = &raw[y * (stride + 1)..(y + 1) * (stride + 1)];
        let mut cur = row[1..].to_vec();
        for i in 0..stride {
            let a = if i >= bpp { cur[i - bpp] as i16 } else { 0 };
            let b = prev[i] as i16;
            let c = if i >= bpp { prev[i - bpp] as i16 } else { 0 };
            let add = match row[0] {
                0 => 0,
                1 => a,
                2 => b,
                3 => (a + b) / 2,
                4 => {
                    let p = a + b - c;
                    let (pa, pb, pc) = ((p - a).abs(), (p - b).abs(), (p - c).abs());
                    if pa <= pb && pa <= pc {
                        a
                    } else if pb <= pc {
                        b
                    } else {
                        c
                    }
                }
                f => panic!("PNG filter {f}"),
            };
            cur[i] = cur[i].wrapping_add(add as u8);
        }
        pixels.extend(cur.chunks(bpp).map(|p| [p[0], p[1], p[2]]));
        prev = cur;
    }
    (w, h, pixels)
}

/// Chromium's screenshot of `svg`, at the SVG's own size: its pixels and width.
fn screenshot(dir: &Dir, svg: &Path, name: &str) -> (usize, Vec<[u8; 3]>) {
    let text = std::fs::read_to_string(svg).unwrap();
    let attr = |a: &str| -> usize {
        let v = text.split(&format!(" {a}=\"")).nth(1).unwrap();
        v[..v.find('"').unwrap()].parse().unwrap()
    };
    let (w, h) = (attr("width"), attr("height"));
    let png = dir.path(&format!("{name}.png"));
    // The flags that let Chromium run headless as root on a machine with no network.
    succeed(Command::new("chromium").args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        &format!("--window-size={w},{h}"),
        &format!("--user-data-dir={}", dir.path("chromium").display()),
        &format!("--screenshot={}", png.display()),
        &format!("file://{}", svg.display()),
    ]));
    let (pw, ph, pixels) = png_rgb(&std::fs::read(&png).unwrap());
    assert_eq!((pw, ph), (w, h), "the screenshot is the SVG's size");
    (pw, pixels)
}

/// Every frame of our differential SVG: (name, centre x, centre y, fill).
fn frames(svg: &str) -> Vec<(String, f64, f64, String)> {
    let num = |g: &str, a: &str| -> f64 {
        let v = g.split(&format!(" {a}=\"")).nth(1).unwrap();
        v[..v.find('"').unwrap()].parse().unwrap()
    };
    svg.split("<g><title>")
        .skip(1)
        .map(|g| {
            let title = g.split("</title>").next().unwrap();
            let name = title[..title.rfind(": NEW ").unwrap()].to_string();
            let fill = g.split("fill=\"").nth(1).unwrap();
            // The frames lie in an inner <svg> 10 px in.
            let x = 10.0 + num(g, "x") + num(g, "width") / 2.0;
            let y = num(g, "y") + 7.5;
            (name, x, y, fill[..fill.find('"').unwrap()].to_string())
        })
        .collect()
}

/// Runs our SVG's own script in Chromium, the SVG inlined in a page whose script searches `re`
/// and then zooms on the frame `zoom`: `(matched text, the zoomed frame's width, frames hidden)`.
fn search_and_zoom(dir: &Dir, svg: &str, re: &str, zoom: &str) -> (String, f64, usize) {
    let body = svg
        .split_once("<svg ")
        .map(|(_, b)| format!("<svg {b}"))
        .unwrap();
    let page = format!(
        r#"<!DOCTYPE html><html><body>{body}<script>
window.addEventListener("load", function () {{
  init(null);
  search({re:?});
  var gs = document.getElementById("frames").getElementsByTagName("g"), target = null, hidden = 0;
  for (var i = 0; i < gs.length; i++) if (name_of(gs[i]) === {zoom:?}) target = gs[i];
  zoom(target);
  for (var i = 0; i < gs.length; i++) if (gs[i].getAttribute("class") === "hide") hidden++;
  var out = document.createElement("pre");
  out.id = "report";
  out.textContent = document.getElementById("matched").textContent + "|" +
    target.getElementsByTagName("rect")[0].getAttribute("width") + "|" + hidden;
  document.body.appendChild(out);
}});
</script></body></html>"#
    );
    let html = dir.write("page.html", page.as_bytes());
    let out = succeed(Command::new("chromium").args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        &format!("--user-data-dir={}", dir.path("chromium").display()),
        "--dump-dom",
        &format!("file://{}", html.display()),
    ]));
    let dom = String::from_utf8(out.stdout).unwrap();
    let report = dom
        .split("<pre id=\"report\">")
        .nth(1)
        .and_then(|r| r.split("</pre>").next())
        .unwrap_or_else(|| panic!("the page's script reported nothing: {dom:.3000}"));
    let parts: Vec<&str> = report.split('|').collect();
    (
        parts[0].to_string(),
        parts[1].parse().unwrap(),
        parts[2].parse().unwrap(),
    )
}

/// NEW's weight of the frames named `name` (none nests in another), from their tooltips.
fn new_of(svg: &str, name: &str) -> u64 {
    let tip = format!("<title>{name}: NEW ");
    let tips = svg.split(&tip).skip(1);
    tips.map(|t| t[..t.find(' ').unwrap()].parse::<u64>().unwrap())
        .sum()
}

pipetest!(needs(perf, cc, chromium) the_differential_flame_graph_renders_red_and_blue_in_chromium, |dir| {
    let (base, new) = record_pair(&dir);
    let svg = dir.path("d.svg");
    diff_ok(&[s(&base), s(&new), "-o", s(&svg), "--title", "shift: BASE 240/80, NEW 80/240"], b"");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("normalize=total"), "the subtitle names the normalization");
    let (w, pixels) = screenshot(&dir, &svg, "d");
    let at = |x: f64, y: f64| pixels[y as usize * w + x as usize];
    let found = frames(&text);
    let pixel = |name: &str| {
        let f = found.iter().find(|f| f.0 == name).unwrap_or_else(|| panic!("{name}: {found:?}"));
        (at(f.1, f.2), f.3.clone())
    };
    let (grew, fill) = pixel("shift_b");
    assert!(grew[0] > 240 && grew[1] < 120 && grew[2] < 120, "shift_b red: {grew:?} ({fill})");
    let (shrank, fill) = pixel("shift_a");
    assert!(shrank[2] > 240 && shrank[0] < 120 && shrank[1] < 120, "shift_a blue: {shrank:?} ({fill})");
    // The ancestors of both take their subtree's change: `shift_work` gained and lost as much,
    // so it is no deeper a colour than either.
    let (work, _) = pixel("shift_work");
    let depth = |p: [u8; 3]| 255 - p[0].min(p[1]).min(p[2]);
    assert!(depth(work) < depth(grew) && depth(work) < depth(shrank), "{work:?}");

    // The search box and the zoom work in the browser: the share of `shift_a|shift_b` is
    // theirs of NEW's total, and a click on `shift_a` gives it the whole width.
    let text = std::fs::read_to_string(&svg).unwrap();
    let (matched, zoomed, hidden) = search_and_zoom(&dir, &text, "^shift_[ab]$", "shift_a");
    let share = (new_of(&text, "shift_a") + new_of(&text, "shift_b")) as f64 * 100.0
        / new_of(&text, "all") as f64;
    assert_eq!(matched, format!("Matched: {share:.2}%"));
    assert_eq!(zoomed, 1180.0, "the frames' width, 1200 less the margins");
    assert!(hidden > 0, "frames outside shift_a are hidden");

    // A recording diffed with itself: every frame grey, in the file and on the screen.
    let same = dir.path("same.svg");
    diff_ok(&[s(&base), s(&base), "-o", s(&same)], b"");
    let text = std::fs::read_to_string(&same).unwrap();
    let (w, pixels) = screenshot(&dir, &same, "same");
    let found = frames(&text);
    assert!(found.len() > 5, "{found:?}");
    for (name, x, y, fill) in &found {
        assert_eq!(fill, "rgb(220,220,220)", "{name}");
        if name.len() > 3 {
            let p = pixels[*y as usize * w + *x as usize];
            assert!(p[0] == p[1] && p[1] == p[2], "{name}: {p:?} is not grey");
        }
    }
});

/// `go tool pprof -top` of `args`: function → (flat, cum), every node listed.
fn pprof_top(args: &[&str]) -> BTreeMap<String, (i64, i64)> {
    let out = succeed(
        Command::new("go")
            .args([
                "tool",
                "pprof",
                "-top",
                "-nodecount=100000",
                "-nodefraction=0",
                "-edgefraction=0",
            ])
            .args(args),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut m = BTreeMap::new();
    for line in text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
    {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() < 6 {
            continue;
        }
        let n = |c: &str| c.parse::<i64>().unwrap_or_else(|_| panic!("{c} in {line}"));
        m.insert(cols[5..].join(" "), (n(cols[0]), n(cols[3])));
    }
    m
}

pipetest!(needs(perf, cc, go) go_tool_pprof_diff_base_lists_what_our_pprof_diff_lists, |dir| {
    let (base, new) = record_pair(&dir);
    let (bp, np) = (dir.path("base.pb.gz"), dir.path("new.pb.gz"));
    perfpipe_ok(&["-i", s(&base), "-o", s(&bp)], b"");
    perfpipe_ok(&["-i", s(&new), "-o", s(&np)], b"");
    // Sample type 0 of ours is the event's sample count.
    let theirs = pprof_top(&["-sample_index=0", "-diff_base", s(&bp), s(&np)]);
    let d = dir.path("d.pb.gz");
    let end = diff_ok(
        &[s(&base), s(&new), "-o", s(&d), "--normalize", "none", "--weight", "samples"],
        b"",
    );
    assert!(end.contains("normalize=none"), "{end}");
    let ours = pprof_top(&[s(&d)]);
    for f in ["shift_a", "shift_b", "shift_same", "shift_work", "main"] {
        assert_eq!(ours.get(f), theirs.get(f), "{f}: ours {ours:?}\ntheirs {theirs:?}");
    }
    assert!(ours["shift_a"].0 < 0 && ours["shift_b"].0 > 0, "{ours:?}");
});

pipetest!(needs(perf, cc) a_recording_diffed_with_itself_is_neutral_and_time_is_perf_scripts, |dir| {
    let (base, new) = record_pair(&dir);
    for how in ["total", "time", "none"] {
        let out = perfpipe_ok(&["diff", s(&base), s(&base), "--normalize", how], b"");
        let text = String::from_utf8(out).unwrap();
        assert!(text.lines().count() > 5);
        for line in text.lines() {
            let mut p = line.rsplitn(3, ' ');
            let (n, b) = (p.next().unwrap(), p.next().unwrap());
            assert_eq!(n, b, "{how}: {line}");
        }
    }
    // --normalize time scales BASE by NEW's sample time over BASE's, as perf script times them.
    let span = |rec: &Path| -> f64 {
        let script = oracle().on_file(&["script", "-F", "time"], rec);
        let times: Vec<f64> = script
            .lines()
            .filter_map(|l| l.trim().trim_end_matches(':').parse().ok())
            .collect();
        times.iter().cloned().fold(f64::MIN, f64::max) - times.iter().cloned().fold(f64::MAX, f64::min)
    };
    let want = span(&new) / span(&base);
    let end = diff_ok(&[s(&base), s(&new), "--normalize", "time", "-o", s(&dir.path("t.folded"))], b"");
    let factor: f64 = end.split(" ×").nth(1).and_then(|f| f.split(' ').next()).unwrap().parse().unwrap();
    assert!((factor - want).abs() < 1e-3, "×{factor}, perf script's spans give ×{want}: {end}");
    // Folded stacks have no sample time: refused before anything is read.
    let bf = dir.path("base.folded");
    perfpipe_ok(&["-i", s(&base), "-o", s(&bf)], b"");
    let out = perfpipe(&["diff", s(&bf), s(&new), "--normalize", "time"], b"");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no sample time"));

    // One pass: `perf record -o - | perfpipe diff base.folded -o d.svg`.
    let w = workloads::shift(&dir, (80, 240));
    let mut perf = oracle()
        .command()
        .args(["record", "-e", "cpu-clock", "-F", workloads::FREQ, "-g", "-o", "-", "--"])
        .args(w.argv())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("perf record");
    let d = dir.path("live.folded");
    let out = Command::new(bin())
        .args(["diff", s(&bf), "-o", s(&d)])
        .stdin(perf.stdout.take().unwrap())
        .output()
        .unwrap();
    assert!(perf.wait().unwrap().success());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_work_moved(&std::fs::read_to_string(&d).unwrap());
});

pipetest!(
    bad_sides_and_outputs_get_clear_errors_and_keep_what_was_read,
    |dir| {
        let good = fixture("callgraph.pipe.data");
        let bytes = fixture_bytes("callgraph.pipe.data");
        let cut = dir.write("cut.data", &bytes[..bytes.len() * 2 / 3 + 5]);
        let out = dir.path("d.folded");
        let run = |args: &[&str]| {
            let mut all = vec!["diff"];
            all.extend_from_slice(args);
            let r = perfpipe(&all, b"");
            (
                r.status.code(),
                String::from_utf8_lossy(&r.stderr).into_owned(),
            )
        };
        // A truncated NEW: the error, and the diff of what was read before it (exit 1).
        let (code, err) = run(&[s(&good), s(&cut), "-o", s(&out)]);
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains("truncated") && err.contains("what was read"),
            "{err}"
        );
        let new_total = |text: &str| -> u64 {
            let news = text
                .lines()
                .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap());
            news.sum()
        };
        let written = new_total(&std::fs::read_to_string(&out).unwrap());
        let whole =
            new_total(&String::from_utf8(perfpipe_ok(&["diff", s(&good), s(&good)], b"")).unwrap());
        assert!(0 < written && written < whole, "NEW {written} of {whole}");
        // Neither a recording nor folded stacks; a side that does not exist.
        let junk = dir.write("junk.txt", b"this is not a profile\n");
        let (code, err) = run(&[s(&good), s(&junk)]);
        assert_eq!(code, Some(1));
        assert!(
            err.contains("neither a perf recording nor folded stacks"),
            "{err}"
        );
        let (code, err) = run(&[s(&good), s(&dir.path("missing.data"))]);
        assert_eq!(code, Some(1));
        assert!(err.contains("missing.data"), "{err}");
        // Usage errors, found before anything is read (exit 2).
        for (args, says) in [
            (
                vec![s(&good), "-o", "x.data"],
                "a diff is written as folded stacks",
            ),
            (
                vec![s(&good), "-o", "x.json.gz"],
                "a diff is written as folded stacks",
            ),
            (vec![s(&good), "--negate"], "--negate draws a flame graph"),
            (vec![s(&good), "-o", "x.folded", "--title", "T"], "--title"),
            (
                vec![s(&good), "-o", "x.svg", "--colors", "mem"],
                "not one of a differential flame graph",
            ),
            (vec!["-", "-"], "cannot both be standard input"),
            (
                vec![s(&good), "--format", "folded:weight=samples"],
                "given as flags",
            ),
            (vec![s(&good), "--normalize", "sometimes"], "sometimes"),
        ] {
            let (code, err) = run(&args);
            assert_eq!(code, Some(2), "{args:?}: {err}");
            assert!(err.contains(says), "{args:?}: {err}");
        }
    }
);

pipetest!(needs(perf, cc, tracefs) each_side_is_the_profile_output_of_the_same_flags_off_cpu_too, |dir| {
    // `perfpipe diff base new --comm nap --weight offcpu`: where `nap` waited, each column the
    // folded output `perfpipe --comm nap --weight offcpu` makes of its side.
    let exe = workloads::offcpu_c(&dir);
    let args = ["-g", "-e", "sched:sched_switch", "--switch-events"];
    let rec = |name: &str| {
        let (bytes, _) = crate::offcpu::record_workload_with(perf_record_err, &exe, &args);
        dir.write(name, &bytes)
    };
    let (base, new) = (rec("base.data"), rec("new.data"));
    let flags = ["--comm", "nap", "--weight", "offcpu"];
    let folded = |rec: &Path| -> BTreeMap<String, u64> {
        let mut all = vec!["-i", s(rec), "--folded"];
        all.extend_from_slice(&flags);
        let out = String::from_utf8(perfpipe_ok(&all, b"")).unwrap();
        out.lines()
            .map(|l| {
                let (stack, n) = l.rsplit_once(' ').unwrap();
                (stack.to_string(), n.parse().unwrap())
            })
            .collect()
    };
    let (want_base, want_new) = (folded(&base), folded(&new));
    let mut all = vec!["diff", s(&base), s(&new), "--normalize", "none"];
    all.extend_from_slice(&flags);
    let out = String::from_utf8(perfpipe_ok(&all, b"")).unwrap();
    let (mut got_base, mut got_new) = (BTreeMap::new(), BTreeMap::new());
    for line in out.lines() {
        let mut p = line.rsplitn(3, ' ');
        let new: u64 = p.next().unwrap().parse().unwrap();
        let base: u64 = p.next().unwrap().parse().unwrap();
        let stack = p.next().unwrap().to_string();
        assert!(stack.starts_with("nap;"), "--comm nap reached the sides: {stack}");
        if base > 0 {
            got_base.insert(stack.clone(), base);
        }
        if new > 0 {
            got_new.insert(stack, new);
        }
    }
    assert!(want_new.keys().any(|k| k.starts_with("nap;[off-cpu: S];")), "{want_new:?}");
    eqnice!(want_base, got_base);
    eqnice!(want_new, got_new);
});

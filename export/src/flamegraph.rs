//! `flamegraph`: the output format of flame graph SVGs (`-o FILE.svg`, `--flamegraph`), rendered
//! by the `inferno` crate's flame graph writer from the folded stacks of the [`crate::folded`]
//! sink, so the SVG is the one `inferno-flamegraph` draws (search, zoom, tooltips in a browser).
//!
//! Options: all of folded's (`weight`, `pid`, `tid`, `addrs`, `annotate`) and `title`,
//! `subtitle`, `colors` (inferno's palettes: `hot`, `mem`, `io`, `java`, `rust`, …), `reverse`
//! (stacks reversed, leaf at the root), `inverted` (an icicle graph, root at the top) and `width`.

use std::io::Write;
use std::str::FromStr;

use inferno::flamegraph::{color::Palette, Direction, Options as FlameOptions};

use crate::folded::{self, Render, FOLD_OPTIONS};
use perfpipe_core::spec::{Flag, FlagValue, FormatSpec, Kind, Options, StageOption};
use perfpipe_stream::Error;

/// How the flame graph is drawn. Plain data.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlameGraph {
    /// The title (inferno's default: `Flame Graph`).
    pub title: Option<String>,
    /// A second line under the title.
    pub subtitle: Option<String>,
    /// The palette's name.
    pub colors: Option<String>,
    /// Leaf frames at the bottom (reversed stacks).
    pub reverse: bool,
    /// An icicle graph: root at the top.
    pub inverted: bool,
    /// Width in pixels.
    pub width: Option<usize>,
}

impl FlameGraph {
    /// The drawing options that checked options give.
    ///
    /// # Errors
    /// [`Error::BadOption`] for a palette inferno does not know.
    pub fn from_options(o: &Options) -> Result<FlameGraph, Error> {
        let colors = o.text("colors").map(str::to_string);
        if let Some(c) = &colors {
            Palette::from_str(c).map_err(|_| Error::BadOption {
                option: "colors",
                message: format!(
                    "`{c}` is not a palette (hot, mem, io, red, green, blue, aqua, yellow, purple, orange, wakeup, java, perl, js, rust)"
                ),
            })?;
        }
        Ok(FlameGraph {
            title: o.text("title").map(str::to_string),
            subtitle: o.text("subtitle").map(str::to_string),
            colors,
            reverse: o.switch("reverse"),
            inverted: o.switch("inverted"),
            width: o.count("width").map(|w| w as usize),
        })
    }
}

impl Render for FlameGraph {
    fn render(&self, lines: &[(String, u64)], out: &mut dyn Write) -> std::io::Result<()> {
        let mut opt = FlameOptions::default();
        if let Some(t) = &self.title {
            opt.title.clone_from(t);
        }
        opt.subtitle.clone_from(&self.subtitle);
        if let Some(p) = self
            .colors
            .as_deref()
            .and_then(|c| Palette::from_str(c).ok())
        {
            opt.colors = p;
        }
        opt.reverse_stack_order = self.reverse;
        if self.inverted {
            opt.direction = Direction::Inverted;
        }
        opt.image_width = self.width;
        // The `stack count` lines in one buffer (one allocation, not one a line).
        let mut buf = String::with_capacity(lines.iter().map(|(s, _)| s.len() + 21).sum());
        let mut at = Vec::with_capacity(lines.len());
        let mut n = itoa::Buffer::new();
        for (stack, count) in lines {
            let start = buf.len();
            buf.push_str(stack);
            buf.push(' ');
            buf.push_str(n.format(*count));
            at.push(start..buf.len());
        }
        let text: Vec<&str> = at.iter().map(|r| &buf[r.clone()]).collect();
        // The aggregate's lines come sorted: inferno need not sort them again (it always does
        // for reversed stacks). Its own check compares the trimmed lines.
        opt.no_sort = !self.reverse && text.windows(2).all(|w| w[0].trim() <= w[1].trim());
        if text.is_empty() {
            // inferno refuses an empty profile; an empty graph says what happened instead.
            opt.subtitle = Some("no samples".into());
            return inferno::flamegraph::from_lines(&mut opt, ["[no samples] 1"], out)
                .map_err(std::io::Error::other);
        }
        inferno::flamegraph::from_lines(&mut opt, text.iter().copied(), out)
            .map_err(std::io::Error::other)
    }
}

const OPTIONS: [StageOption; 11] = [
    FOLD_OPTIONS[0],
    FOLD_OPTIONS[1],
    FOLD_OPTIONS[2],
    FOLD_OPTIONS[3],
    FOLD_OPTIONS[4],
    StageOption {
        key: "title",
        kind: Kind::Text("TEXT"),
        help: "the title",
    },
    StageOption {
        key: "subtitle",
        kind: Kind::Text("TEXT"),
        help: "a second line under the title",
    },
    StageOption {
        key: "colors",
        kind: Kind::Text("PALETTE"),
        help: "hot (default), mem, io, java, rust, js, perl, red, green, blue, aqua, yellow, purple, orange, wakeup",
    },
    StageOption {
        key: "reverse",
        kind: Kind::Switch,
        help: "reverse the stacks: leaf functions at the bottom",
    },
    StageOption {
        key: "inverted",
        kind: Kind::Switch,
        help: "an icicle graph: the root at the top",
    },
    StageOption {
        key: "width",
        kind: Kind::Count,
        help: "width in pixels (default 1200)",
    },
];

const FLAGS: [Flag; 5] = [
    Flag::stage(
        "flamegraph",
        "write a flame graph SVG (what -o FILE.svg chooses)",
    ),
    Flag::option("title", "title", "the flame graph's title"),
    Flag::option("colors", "colors", "the flame graph's palette"),
    Flag {
        name: "reverse",
        help: "flame graph of reversed stacks (leaf functions at the bottom)",
        value: FlagValue::None,
        set: &[("reverse", "yes")],
        adds_stage: false,
    },
    Flag {
        name: "inverted",
        help: "an icicle graph (root at the top)",
        value: FlagValue::None,
        set: &[("inverted", "yes")],
        adds_stage: false,
    },
];

/// How the command line offers the format. Its folded-stack flags (`--weight`, `--stack-pid`…)
/// are declared by [`crate::folded`] and apply here too.
pub const SPEC: FormatSpec = FormatSpec {
    name: crate::offered::FLAMEGRAPH.name,
    help: "a flame graph SVG drawn by inferno, openable in a browser (search, zoom)",
    extensions: crate::offered::FLAMEGRAPH.extensions,
    flags: &FLAGS,
    options: &OPTIONS,
    needs: &["symbolize"],
    sets: folded::symbolize_settings,
    build: |ctx, o, path| {
        let render = FlameGraph::from_options(o)?;
        Ok(Box::new(folded::build(ctx, o, path, Box::new(render))?))
    },
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_an_svg_with_a_frame_per_function_and_the_title() {
        let lines = vec![
            ("app;main;work".to_string(), 30),
            ("app;main;idle".to_string(), 10),
        ];
        let mut out = Vec::new();
        let fg = FlameGraph {
            title: Some("db, 30 s".into()),
            ..FlameGraph::default()
        };
        fg.render(&lines, &mut out).unwrap();
        let svg = String::from_utf8(out).unwrap();
        assert!(svg.starts_with("<?xml"), "{}", &svg[..40]);
        assert!(svg.contains("db, 30 s"));
        for f in [
            "<title>work (30 samples, 75.00%)",
            "<title>idle (10 samples, 25.00%)",
        ] {
            assert!(svg.contains(f), "{f}");
        }
        let mut empty = Vec::new();
        fg.render(&[], &mut empty).unwrap();
        assert!(String::from_utf8(empty).unwrap().contains("no samples"));
    }

    #[test]
    fn an_unknown_palette_is_refused() {
        let spec = SPEC;
        let mut o = Options::new();
        perfpipe_core::spec::Spec::parse_list(&spec, &mut o, "colors=plaid").unwrap();
        assert!(FlameGraph::from_options(&o)
            .unwrap_err()
            .to_string()
            .contains("not a palette"));
    }
}

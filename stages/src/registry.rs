//! The stage registry: every transform stage the CLI can chain, with its flag, help and constructor,
//! in one place. The CLI builds its stage flags and `perfpipe stages` from this table.

use perfpipe_core::Stage;

/// Builds a stage from its flag's value.
pub type BuildFn = fn(Option<&str>) -> Result<Box<dyn Stage>, crate::Error>;

/// How a stage is offered on the command line.
#[derive(Clone, Copy, Debug)]
pub struct StageSpec {
    /// The stage's name (a verb); also its flag, `--<name>`, and its file, `src/<name>.rs`.
    pub name: &'static str,
    /// One line of help.
    pub help: &'static str,
    /// The value the flag takes, if any (e.g. `EXPR`).
    pub value: Option<&'static str>,
    /// Builds the stage from the flag's value.
    pub build: BuildFn,
}

/// The fixed stages every run has, in order, with one line of help each.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "read",
        "source: read standard input or -i FILE in large chunks",
    ),
    (
        "decode",
        "frame records, validate the pipe header, track attrs",
    ),
    (
        "write",
        "sink: encode records (unchanged ones byte for byte) to standard output or -o FILE",
    ),
];

/// Transform stages, chained by their flags in command-line order.
pub const TRANSFORMS: &[StageSpec] = &[];

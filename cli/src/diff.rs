//! `perfpipe diff BASE [NEW] -o OUT`: two profiles compared stack by stack (the library's
//! [`perfpipe_export::diff`]). BASE and NEW are recordings (pipe or file mode) or folded stacks;
//! NEW is standard input by default, so `perf record -g -o - -- ./new | perfpipe diff
//! base.folded -o d.svg` is one pass.
//!
//! Each recorded side is the chain `perfpipe` would assemble for a folded output with the same
//! stage and folded flags (filters, `--unwind`, `symbolize`, `--weight`), ending in the
//! `diff-side` format; the two run one after the other, standard input's first (a live `perf
//! record` is never left waiting). The output's format is chosen as for any output (`-o`'s
//! extension, `--folded`, `--flamegraph`, `--pprof`, `--format`), among folded stacks (the
//! default on standard output), a differential flame graph and pprof.

use std::io::Read as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{ArgMatches, Args};
use perfpipe_chain::{Plan, Word};
use perfpipe_core::spec::Registry;
use perfpipe_export::diff::{side, svg::DiffGraph, Diff, Normalize, Side};
use perfpipe_export::folded::{FOLD_FLAGS, FOLD_OPTIONS};
use perfpipe_export::offered::{self, Offered};
use perfpipe_stream::write::file::OutputMode;

use crate::args::ReportArgs;
use crate::{EXIT_FAILURE, EXIT_USAGE};

const WHO: &str = "perfpipe diff";

/// `perfpipe diff`'s options; the stage flags and output format flags are added from the
/// registry, as for the main command.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The profile before: a recording (pipe or file mode, told apart by its first bytes) or
    /// folded stacks (`stack count` lines); `-` is standard input.
    #[arg(value_name = "BASE")]
    base: PathBuf,
    /// The profile after, the same kinds; `-` (the default) is standard input (a pipe is read as
    /// a recording; folded stacks come as a file or `< FILE`).
    #[arg(value_name = "NEW", default_value = "-")]
    new: PathBuf,
    /// Output: `.folded` (three columns, `inferno-diff-folded`'s; the default on standard
    /// output), `.svg` (a differential flame graph), `.pb.gz` (pprof, BASE negative); `-` is
    /// standard output.
    #[arg(short, long, value_name = "FILE", default_value = "-")]
    output: PathBuf,
    /// How BASE is scaled: `total` to NEW's total weight (`inferno-diff-folded -n`: where the
    /// shares moved), `time` per second of each side's sample time (where the rates moved),
    /// `none` (raw weights: what a job run to its end twice costs). Named in the output.
    #[arg(long, value_name = "HOW", default_value = "total", value_parser = Normalize::NAMES)]
    normalize: String,
    /// Flame graph: frames as wide as BASE's weight, so frames that vanished from NEW show.
    #[arg(long)]
    negate: bool,
    /// Print each recorded side's per-stage table on stderr at its end (as `perfpipe --stats`).
    #[arg(long)]
    stats: bool,
    /// Show each recorded side's live progress on stderr (default: only when stderr is a
    /// terminal).
    #[arg(long, overrides_with = "no_progress")]
    progress: bool,
    /// Never show live progress.
    #[arg(long)]
    no_progress: bool,
}

/// What a side is.
enum Input {
    /// A recording, for a chain.
    Recording,
    /// Folded stacks, read.
    Folded(Side),
}

/// Whether the first bytes of a file are a perf recording's (pipe or file mode, either byte
/// order).
fn is_perf(head: &[u8]) -> bool {
    head.starts_with(b"PERFILE2") || head.starts_with(b"2ELIFREP")
}

/// Reads `path` as folded stacks, or says it is a recording (or a pipe, which is read as one).
fn classify(path: &Path) -> Result<Input, String> {
    let shown = path.display();
    let file = if path == Path::new("-") {
        use std::os::fd::AsFd as _;
        let fd = std::io::stdin()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| format!("-: {e}"))?;
        std::fs::File::from(fd)
    } else {
        std::fs::File::open(path).map_err(|e| format!("{shown}: {e}"))?
    };
    let regular = file.metadata().is_ok_and(|m| m.is_file());
    if !regular {
        return Ok(Input::Recording);
    }
    let mut head = [0u8; 8];
    let n = file.read_at(&mut head, 0).unwrap_or(0);
    if is_perf(&head[..n]) {
        return Ok(Input::Recording);
    }
    let mut text = String::new();
    let mut file = file;
    file.read_to_string(&mut text)
        .map_err(|e| format!("{shown}: neither a perf recording nor folded stacks ({e})"))?;
    Side::parse(&text)
        .map(Input::Folded)
        .map_err(|e| format!("{shown}: neither a perf recording nor folded stacks: {e}"))
}

/// The words of the sides' chains (stage flags, `--stage`, folded's options) and those of the
/// output (`--format`, format flags).
fn split_words<'m>(words: Vec<Word<'m>>, registry: &Registry) -> (Vec<Word<'m>>, Vec<Word<'m>>) {
    words.into_iter().partition(|w| match w {
        Word::Flag { name, .. } => {
            FOLD_FLAGS.iter().any(|f| f.name == *name) || registry.format_flag(name).is_none()
        }
        Word::Stage(_) => true,
        Word::Format(_) => false,
    })
}

/// The output a diff writes.
enum Output {
    Folded,
    Graph(DiffGraph),
    #[cfg(feature = "pprof")]
    Pprof,
}

/// The output's format from its words and `-o`.
fn output_of(words: &[Word<'_>], args: &DiffArgs, registry: &Registry) -> Result<Output, String> {
    let text = |e: perfpipe_chain::Error| format!("{:#}", anyhow::Error::new(e));
    let mut plan = Plan::from_words(words, registry).map_err(text)?;
    plan.choose_output(registry, Some(&args.output))
        .map_err(text)?;
    let Some(format) = plan.format else {
        return if args.output == Path::new("-") {
            Ok(Output::Folded)
        } else {
            let ext = |o: &Offered| o.extensions[0];
            Err(format!(
                "-o {}: a diff is written as folded stacks (.{}), a flame graph (.{}) or pprof (.{})",
                args.output.display(),
                ext(&offered::FOLDED),
                ext(&offered::FLAMEGRAPH),
                ext(&offered::PPROF),
            ))
        };
    };
    let o = &format.options;
    if let Some(k) = FOLD_OPTIONS.iter().map(|f| f.key).find(|k| o.has(k)) {
        return Err(format!(
            "--format {}:{k}=…: folded options are given as flags (--weight, --stack-pid, …), which apply to both sides",
            format.spec.name
        ));
    }
    match format.spec.name {
        "folded" => Ok(Output::Folded),
        "flamegraph" => {
            if let Some(k) = ["colors", "reverse", "inverted"].iter().find(|k| o.has(k)) {
                return Err(format!(
                    "the flame graph option `{k}` is not one of a differential flame graph (title, subtitle, width)"
                ));
            }
            Ok(Output::Graph(DiffGraph {
                title: o.text("title").map(str::to_string),
                subtitle: o.text("subtitle").map(str::to_string),
                width: o.count("width").map(|w| w as usize),
                negate: args.negate,
            }))
        }
        #[cfg(feature = "pprof")]
        "pprof" => Ok(Output::Pprof),
        other => Err(format!(
            "{other} output: a diff is written as folded stacks, a flame graph or pprof"
        )),
    }
}

/// pprof's sample type for the sides' weight.
#[cfg(feature = "pprof")]
fn value_type(weight: Option<&str>) -> (&'static str, &'static str) {
    match weight {
        Some("samples") => ("samples", "count"),
        Some("offcpu") | Some("offwake") => ("off_cpu", "nanoseconds"),
        Some("wall") => ("wall", "nanoseconds"),
        _ => ("period", "count"),
    }
}

/// Runs `perfpipe diff`.
pub(crate) fn main(args: &DiffArgs, matches: &ArgMatches, registry: &Registry) -> ExitCode {
    let usage = |e: String| {
        eprintln!("{WHO}: {e}");
        ExitCode::from(EXIT_USAGE)
    };
    let normalize: Normalize = match args.normalize.parse() {
        Ok(n) => n,
        Err(e) => return usage(e),
    };
    if args.base == Path::new("-") && args.new == Path::new("-") {
        return usage("BASE and NEW cannot both be standard input".into());
    }
    let (side_words, out_words) = split_words(crate::chain::words(matches, registry), registry);
    let output = match output_of(&out_words, args, registry) {
        Ok(o) => o,
        Err(e) => return usage(e),
    };
    if args.negate && !matches!(output, Output::Graph(_)) {
        return usage("--negate draws a flame graph (-o FILE.svg)".into());
    }
    // As for any output: a place that cannot take the file is refused before anything is read.
    if let Err(e) = perfpipe_chain::output::check_writable(&args.output, false) {
        return crate::chain_error(e, WHO);
    }
    let mut registry = registry.clone();
    registry.add_format(side::SPEC);
    let mut words = side_words;
    words.push(Word::Format(side::SPEC.name));
    let plan = match Plan::from_words(&words, &registry) {
        Ok(p) => p,
        Err(e) => return crate::chain_error(e, WHO),
    };
    #[cfg(feature = "pprof")]
    let value = value_type(plan.format.as_ref().and_then(|f| f.options.text("weight")));
    let mut inputs = Vec::new();
    for path in [&args.base, &args.new] {
        match classify(path) {
            Ok(i) => inputs.push(i),
            Err(e) => {
                eprintln!("{WHO}: {e}");
                return ExitCode::from(EXIT_FAILURE);
            }
        }
    }
    if normalize == Normalize::Time {
        if let Some(i) = inputs.iter().position(|i| matches!(i, Input::Folded(_))) {
            return usage(format!(
                "--normalize time: {} is folded stacks, which have no sample time; use --normalize total or none",
                ["BASE", "NEW"][i]
            ));
        }
    }
    // Standard input's side first: a live recording is read as it comes.
    let order = if args.new == Path::new("-") {
        [1, 0]
    } else {
        [0, 1]
    };
    let paths = [&args.base, &args.new];
    let report = ReportArgs {
        stats: args.stats,
        progress: args.progress,
        no_progress: args.no_progress,
        ..ReportArgs::default()
    };
    let mut sides: [Option<Side>; 2] = [None, None];
    let mut status = ExitCode::SUCCESS;
    for i in order {
        let side = match std::mem::replace(&mut inputs[i], Input::Recording) {
            Input::Folded(side) => side,
            Input::Recording => match run_side(paths[i], plan.clone(), &registry, &report) {
                (Some(side), code) => {
                    if code != ExitCode::SUCCESS {
                        status = code;
                    }
                    side
                }
                (None, code) => return code,
            },
        };
        sides[i] = Some(side);
    }
    let [Some(base), Some(new)] = sides else {
        unreachable!("both sides are read")
    };
    let diff = match Diff::new(base, new, normalize) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("{WHO}: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let written = perfpipe_stream::write::atomic::write_file(&args.output, |out| match &output {
        Output::Folded => diff.write_folded(out),
        Output::Graph(g) => g.render(&diff, out),
        #[cfg(feature = "pprof")]
        Output::Pprof => perfpipe_export::diff::pprof::write(&diff, value, out),
    });
    if let Err(e) = written {
        eprintln!("{WHO}: {e}");
        return ExitCode::from(EXIT_FAILURE);
    }
    let (grew, shrank) = diff.rows.iter().fold((0, 0), |(g, s), r| {
        (
            g + usize::from(r.new > r.base),
            s + usize::from(r.new < r.base),
        )
    });
    eprintln!(
        "{WHO}: {}; {} stacks, {grew} grew, {shrank} shrank",
        diff.summary(),
        diff.rows.len()
    );
    status
}

/// Runs one recorded side's chain into a temporary file and reads it back. A chain that fails
/// (a truncated or malformed recording) still gives the stacks read before the fault, with its
/// failing status: the diff is written of what was read, and the run exits 1.
fn run_side(
    input: &Path,
    plan: Plan,
    registry: &Registry,
    report: &ReportArgs,
) -> (Option<Side>, ExitCode) {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = std::env::temp_dir().join(format!("perfpipe-diff-{}-{n}.side", std::process::id()));
    let code =
        crate::run_file_to_file(plan, (input, &tmp, OutputMode::Auto), registry, report, WHO);
    let text = std::fs::read_to_string(&tmp);
    let _ = std::fs::remove_file(&tmp);
    let Ok(text) = text else {
        return (None, code); // the chain said why
    };
    match Side::parse(&text) {
        Ok(side) => {
            if code != ExitCode::SUCCESS {
                eprintln!(
                    "{WHO}: {}: the diff has what was read before the error",
                    input.display()
                );
            }
            (Some(side), code)
        }
        Err(e) => {
            eprintln!("{WHO}: {}: {e}", input.display());
            (None, ExitCode::from(EXIT_FAILURE))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_and_folded_flags_go_to_the_sides_format_flags_to_the_output() {
        let r = perfpipe_chain::builtin();
        let words = vec![
            Word::Flag {
                name: "comm",
                value: Some("db"),
            },
            Word::Flag {
                name: "weight",
                value: Some("offcpu"),
            },
            Word::Flag {
                name: "title",
                value: Some("T"),
            },
            Word::Format("flamegraph"),
            Word::Stage("drop:switch"),
        ];
        let (sides, out) = split_words(words, &r);
        let names = |w: &[Word<'_>]| -> Vec<String> {
            w.iter()
                .map(|w| match w {
                    Word::Flag { name, .. } => name.to_string(),
                    Word::Stage(s) | Word::Format(s) => s.to_string(),
                })
                .collect()
        };
        assert_eq!(names(&sides), ["comm", "weight", "drop:switch"]);
        assert_eq!(names(&out), ["title", "flamegraph"]);
    }

    #[test]
    fn perf_magic_in_either_byte_order_is_a_recording() {
        assert!(is_perf(b"PERFILE2\x68\0\0\0"));
        assert!(is_perf(b"2ELIFREP"));
        assert!(!is_perf(b"app;main 1"));
        assert!(!is_perf(b"PERF"));
    }
}

//! `perfpipe archive -i REC -o ARCHIVE.tar`: on the recording host, the files another machine
//! needs to name the recording's frames, in perf's build-id-cache layout (the library's
//! [`perfpipe_profile::symbols::archive`]); `perfpipe --symbols ARCHIVE` reads it there, and
//! `tar xf ARCHIVE -C ~/.debug` gives it to perf. A `--call-graph dwarf` recording is unwound on
//! the way, so the files of every frame are packed. See `docs/another-machine.md`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use perfpipe_chain::{Plan, Word};
use perfpipe_core::spec::Registry;
use perfpipe_stream::write::file::OutputMode;

use crate::args::ReportArgs;
use crate::EXIT_USAGE;

/// `perfpipe archive`'s options.
#[derive(Debug, Args)]
pub struct ArchiveArgs {
    /// The recording: a pipe-mode stream or a perf.data; `-` is standard input.
    #[arg(short, long, value_name = "FILE", default_value = "-")]
    input: PathBuf,
    /// The archive to write: a tar, bzip2-compressed when the name ends in `.bz2` (written beside
    /// it and renamed into place at the end).
    #[arg(short, long, value_name = "ARCHIVE")]
    output: PathBuf,
    /// Pack the files as they are, not slim copies of their symbol and unwind tables.
    #[arg(long)]
    whole: bool,
    /// Keep the DWARF debug sections in the slim copies (what `--inline` reads).
    #[arg(long, conflicts_with = "whole")]
    dwarf: bool,
    #[command(flatten)]
    report: ReportArgs,
}

/// Runs `perfpipe archive`.
pub(crate) fn main(args: &ArchiveArgs, registry: &Registry) -> ExitCode {
    let mut registry = registry.clone();
    registry.add_format(perfpipe_profile::symbols::archive::SPEC);
    let format = match (args.whole, args.dwarf) {
        (true, _) => "archive:whole",
        (false, true) => "archive:dwarf",
        (false, false) => "archive",
    };
    // `--unwind` first: a `--call-graph dwarf` recording's frames are known only once its stacks
    // are unwound, and every dso they pass through is packed (its unwind tables with it); other
    // samples pass through unchanged.
    let words = [
        Word::Flag {
            name: "unwind",
            value: None,
        },
        Word::Format(format),
    ];
    let plan = match Plan::from_words(&words, &registry) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("perfpipe archive: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    crate::run_file_to_file(
        plan,
        (&args.input, &args.output, OutputMode::Auto),
        &registry,
        &args.report,
        "perfpipe archive",
    )
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: ArchiveArgs,
    }

    #[test]
    fn archive_flags_parse() {
        let t = T::try_parse_from(["x", "-o", "a.tar.bz2", "--dwarf"]).unwrap();
        assert!(t.a.dwarf && !t.a.whole);
        assert_eq!(t.a.output, PathBuf::from("a.tar.bz2"));
        let t = T::try_parse_from(["x", "-i", "rec", "-o", "a.tar", "--whole"]).unwrap();
        assert!(t.a.whole && t.a.input == std::path::Path::new("rec"));
        assert!(T::try_parse_from(["x", "-o", "a.tar", "--whole", "--dwarf"]).is_err());
        assert!(T::try_parse_from(["x"]).is_err());
    }
}

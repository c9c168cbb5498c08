//! `perfpipe inject`: a drop-in for the common `perf inject` flags, so scripts can swap it in.
//!
//! `perfpipe inject -b -i - -o -` runs read → decode → decompress → buildid → write;
//! `--buildid-all` runs `buildid-all` instead; with neither flag the stream is passed through (as
//! `perf inject` repipes it, but byte for byte). `-v` prints the per-stage table and counters.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use perfpipe_core::{Pipeline, Settings, Stage};
use perfpipe_stages::buildid::source::HostMode;
use perfpipe_stages::buildid::BuildidConfig;
use perfpipe_stages::decode::DecodeConfig;
use perfpipe_stages::decompress::DecompressConfig;
use perfpipe_stages::read::ReadConfig;
use perfpipe_stages::read_file::Input;
use perfpipe_stages::write::WriteConfig;
use perfpipe_stages::write_file::{Output, OutputMode};

use crate::{path_or_std, RunArgs, EXIT_FAILURE};

/// Options of `perfpipe inject`, named as `perf inject` names them.
#[derive(Debug, Args)]
pub(crate) struct InjectArgs {
    /// Input file name; `-` is standard input.
    #[arg(short, long, value_name = "FILE", default_value = "-")]
    input: PathBuf,
    /// Output file name; `-` is standard output. As perf inject decides: pipe format when the
    /// input is `-` or the output is not a regular file, else a file-mode perf.data.
    #[arg(short, long, value_name = "FILE", default_value = "-")]
    output: PathBuf,
    /// Inject build ids of the dsos that samples hit (perf inject -b).
    #[arg(short = 'b', long = "build-ids")]
    build_ids: bool,
    /// Inject build ids of all mapped dsos.
    #[arg(long = "buildid-all", conflicts_with = "build_ids")]
    buildid_all: bool,
    /// Build ids to use instead of reading files: PATH=HEXID,...
    #[arg(long = "known-build-ids", value_name = "LIST")]
    known_build_ids: Option<String>,
    /// Count every callchain frame's dso as hit, not only the sample IP's (as perf >= 6.12 does).
    #[arg(long = "buildid-callchain")]
    callchain: bool,
    /// Whether `[kernel.kallsyms]` and `[vdso]` get this host's build ids: `auto` (unless the
    /// stream's hostname or kernel release feature names another host), `yes` or `no`.
    #[arg(long = "host-ids", value_name = "WHEN", default_value = "auto", value_parser = parse_host)]
    host_ids: HostMode,
    /// Print the per-stage table with the build-id counters on stderr at the end.
    #[arg(short, long)]
    verbose: bool,
}

fn parse_host(s: &str) -> Result<HostMode, String> {
    match s {
        "auto" => Ok(HostMode::Auto),
        "yes" | "always" => Ok(HostMode::Yes),
        "no" | "never" => Ok(HostMode::No),
        _ => Err(format!("`{s}`: expected auto, yes or no")),
    }
}

fn pipeline(args: &InjectArgs) -> anyhow::Result<Pipeline> {
    let known = args
        .known_build_ids
        .as_deref()
        .map(BuildidConfig::parse_known)
        .transpose()?
        .unwrap_or_default();
    let cfg = BuildidConfig {
        callchain: args.callchain,
        known,
        host: args.host_ids,
    };
    let stage: Option<Box<dyn Stage>> = if args.buildid_all {
        Some(Box::new(cfg.build_all()))
    } else if args.build_ids || args.known_build_ids.is_some() || args.callchain {
        Some(Box::new(cfg.build()))
    } else {
        None
    };
    let read = Input::open(&ReadConfig {
        path: path_or_std(&args.input),
        pipe_buffer: 1 << 20,
    })?;
    let mode = if args.input == std::path::Path::new("-") {
        OutputMode::Pipe
    } else {
        OutputMode::Auto
    };
    let write = Output::open(
        &WriteConfig {
            path: path_or_std(&args.output),
            pipe_buffer: 1 << 20,
        },
        mode,
    )?;
    let mut p = Pipeline::new(Settings::default())
        .source("read", read)
        .stage("decode", DecodeConfig::default().build());
    if let Some(stage) = stage {
        let name = if args.buildid_all {
            "buildid-all"
        } else {
            "buildid"
        };
        p = p
            .stage("decompress", DecompressConfig::default().build()?)
            .boxed_stage(name, stage);
    }
    Ok(p.sink("write", write))
}

/// Runs `perfpipe inject`.
pub(crate) fn main(args: &InjectArgs) -> ExitCode {
    let p = match pipeline(args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("perfpipe inject: {e:#}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let mut run_args = RunArgs::quiet();
    run_args.input = args.input.clone();
    run_args.output = args.output.clone();
    run_args.stats = args.verbose;
    crate::run::run(p, &run_args)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        a: InjectArgs,
    }

    #[test]
    fn perf_inject_flags_parse() {
        let t = T::try_parse_from(["x", "-b", "-i", "-", "-o", "out", "-v"]).unwrap();
        assert!(t.a.build_ids && t.a.verbose && !t.a.buildid_all);
        assert_eq!(t.a.output, PathBuf::from("out"));
        let t = T::try_parse_from(["x", "--buildid-all", "--known-build-ids", "/a=01"]).unwrap();
        assert!(t.a.buildid_all);
        assert_eq!(t.a.known_build_ids.as_deref(), Some("/a=01"));
        assert_eq!(t.a.host_ids, HostMode::Auto);
        let t = T::try_parse_from(["x", "-b", "--host-ids", "no"]).unwrap();
        assert_eq!(t.a.host_ids, HostMode::No);
        assert!(T::try_parse_from(["x", "-b", "--buildid-all"]).is_err());
        assert!(T::try_parse_from(["x", "--host-ids", "maybe"]).is_err());
    }
}

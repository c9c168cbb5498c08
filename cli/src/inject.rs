//! `perfpipe inject`: a drop-in for the common `perf inject` flags, so scripts can swap it in.
//!
//! `perfpipe inject -b -i - -o -` runs read → decode → decompress → buildid → write;
//! `--buildid-all` runs `buildid-all` instead; with neither flag the stream is passed through (as
//! `perf inject` repipes it, but byte for byte). `-v` prints the per-stage table and counters.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use perfpipe_core::{Requests, Settings};
use perfpipe_stages::registry::{Options, Registry, Spec};
use perfpipe_stages::write::file::OutputMode;

use crate::args::ReportArgs;
use crate::chain::{Chain, Plan, SinkSpec, SourceSpec};
use crate::EXIT_FAILURE;

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
    #[arg(long = "host-ids", value_name = "WHEN", default_value = "auto", value_parser = ["auto", "yes", "no"])]
    host_ids: String,
    /// Print the per-stage table with the build-id counters on stderr at the end.
    #[arg(short, long)]
    verbose: bool,
}

/// The build-id stage these flags ask for, if any: (its row name, its options).
fn stage(args: &InjectArgs, registry: &Registry) -> anyhow::Result<Option<Plan>> {
    let wanted =
        args.buildid_all || args.build_ids || args.known_build_ids.is_some() || args.callchain;
    if !wanted {
        return Ok(None);
    }
    let spec = *registry
        .find("buildid")
        .ok_or_else(|| anyhow::anyhow!("no buildid stage registered"))?;
    let mut options = Options::new();
    let mut set = |key: &str, value: &str| spec.parse_option(&mut options, key, value);
    set("host", &args.host_ids)?;
    if args.callchain {
        set("callchain", "yes")?;
    }
    if let Some(list) = &args.known_build_ids {
        set("known", list)?;
    }
    let label = if args.buildid_all {
        set("all", "yes")?;
        "buildid-all"
    } else {
        "buildid"
    };
    let mut plan = Plan::default();
    plan.push(label, spec, options);
    Ok(Some(plan))
}

/// Runs `perfpipe inject`.
pub(crate) fn main(args: &InjectArgs, registry: &Registry) -> ExitCode {
    let plan = match stage(args, registry) {
        Ok(p) => p.unwrap_or_default(),
        Err(e) => {
            eprintln!("perfpipe inject: {e:#}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    // As perf inject decides: pipe output for a pipe input, else by the output file.
    let mode = if args.input == std::path::Path::new("-") {
        OutputMode::Pipe
    } else {
        OutputMode::Auto
    };
    let chain = Chain {
        settings: Settings::default(),
        source: SourceSpec::Input {
            path: args.input.clone(),
            pipe_buffer: 1 << 20,
        },
        plan,
        taps: &[],
        sink: SinkSpec::Output {
            path: args.output.clone(),
            mode,
            pipe_buffer: 1 << 20,
        },
        requests: Requests::default(),
        signals: true,
    };
    let report = ReportArgs {
        stats: args.verbose,
        no_progress: true,
        ..ReportArgs::default()
    };
    crate::build_and_run(
        chain,
        registry,
        &report,
        Some(&args.input),
        "perfpipe inject",
    )
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
        assert_eq!(t.a.host_ids, "auto");
        let t = T::try_parse_from(["x", "-b", "--host-ids", "no"]).unwrap();
        assert_eq!(t.a.host_ids, "no");
        let plan = stage(&t.a, &Registry::builtin()).unwrap().unwrap();
        assert_eq!(plan.stages[0].label, "buildid");
        assert_eq!(plan.stages[0].options.text("host"), Some("no"));
        let t =
            T::try_parse_from(["x", "--buildid-all", "--known-build-ids", "/a=01,/b=02"]).unwrap();
        let plan = stage(&t.a, &Registry::builtin()).unwrap().unwrap();
        assert_eq!(plan.stages[0].label, "buildid-all");
        assert_eq!(plan.stages[0].options.text("known"), Some("/a=01,/b=02"));
        assert!(
            stage(&T::try_parse_from(["x"]).unwrap().a, &Registry::builtin())
                .unwrap()
                .is_none()
        );
        assert!(T::try_parse_from(["x", "-b", "--buildid-all"]).is_err());
        assert!(T::try_parse_from(["x", "--host-ids", "maybe"]).is_err());
    }
}

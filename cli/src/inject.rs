//! `perfpipe inject`: a drop-in for the common `perf inject` flags, so scripts can swap it in.
//!
//! `perfpipe inject -b -i - -o -` runs read → decode → decompress → buildid → write, with the
//! stage's `callchain` option on: current perf's `-b` (since 6.12) marks the dso of every callchain
//! frame, not only the sample ip's (docs/build-ids.md);
//! `--buildid-all` runs `buildid-all` instead, `-B`/`--mmap2-buildids` and `--mmap2-buildid-all`
//! the MMAP2 styles (`stream/src/buildid/mmap2.rs`); with none of them the stream is passed
//! through (as `perf inject` repipes it, but byte for byte). `-v` prints the per-stage table and
//! counters.
//!
//! Every other option of current `perf inject` (`tools/perf/builtin-inject.c`) is known here and
//! refused with a message naming it ([`REFUSED`]), so that none is silently ignored.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use perfpipe_core::spec::{Options, Registry, Spec, StageSpec};
use perfpipe_stream::write::file::OutputMode;

use crate::args::ReportArgs;
use crate::EXIT_FAILURE;
use perfpipe_chain::Plan;

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
    /// Inject build ids of the dsos that samples hit, callchain frames included, as current perf
    /// inject -b does (since 6.12); dsos whose MMAP2 carries the id get none.
    #[arg(short = 'b', long = "build-ids")]
    build_ids: bool,
    /// Inject build ids of all mapped dsos.
    #[arg(long = "buildid-all", conflicts_with = "build_ids")]
    buildid_all: bool,
    /// Put the build id into the MMAP2 of each map a sample hits (as perf writes it with
    /// --buildid-mmap); maps no sample hits are dropped. No BUILD_ID records (perf inject -B).
    #[arg(short = 'B', long = "mmap2-buildids", conflicts_with_all = ["build_ids", "buildid_all"])]
    mmap2_buildids: bool,
    /// Rewrite every MMAP/MMAP2 of a file with a build id as an MMAP2 carrying it; MMAP2 that
    /// already carry one are left alone.
    #[arg(long = "mmap2-buildid-all", conflicts_with_all = ["build_ids", "buildid_all", "mmap2_buildids"])]
    mmap2_buildid_all: bool,
    /// Build ids to use instead of reading files: PATH=HEXID,...
    #[arg(long = "known-build-ids", value_name = "LIST")]
    known_build_ids: Option<String>,
    /// Count every callchain frame's dso as hit, not only the sample IP's (as perf >= 6.12 does;
    /// -b does so already).
    #[arg(long = "buildid-callchain")]
    callchain: bool,
    /// Whether `[kernel.kallsyms]` and `[vdso]` get this host's build ids: `auto` (unless the
    /// stream's hostname or kernel release feature names another host), `yes` or `no`.
    #[arg(long = "host-ids", value_name = "WHEN", default_value = "auto", value_parser = ["auto", "yes", "no"])]
    host_ids: String,
    /// Unwind `--call-graph dwarf` samples into callchains and drop their registers and stack
    /// copies, as perf >= 7.0's --convert-callchain does, on pipes too (the `unwind` stage).
    /// With --aslr (which perf refuses), unwinding comes first.
    #[arg(long = "convert-callchain")]
    convert_callchain: bool,
    /// Remap every recorded address to a canonical layout, as perf >= 7.3's --aslr does, on
    /// pipes too (the `aslr` stage).
    #[arg(long = "aslr")]
    aslr: bool,
    /// With --aslr, also drop what still names the host: `build-ids` (BUILD_ID records and the
    /// ids in MMAP2 records), `host` (the hostname, os release, command line and cpu features).
    #[arg(long = "aslr-drop", value_name = "WHAT", requires = "aslr")]
    aslr_drop: Option<String>,
    /// Print the per-stage table with the build-id counters on stderr at the end.
    #[arg(short, long)]
    verbose: bool,
    /// Accepted, changes nothing: perf's -f lets it read a file another user owns; perfpipe
    /// reads any file it can open.
    #[arg(short = 'f', long = "force")]
    force: bool,
    #[command(flatten)]
    refused: Refused,
}

/// The options of current `perf inject` that perfpipe does not implement: each is parsed (with
/// its value, if it takes one) only to be refused by name.
#[derive(Debug, Args)]
#[command(next_help_heading = "Refused (perf inject options perfpipe does not implement)")]
struct Refused {
    /// Refused: merging sched_stat and sched_switch.
    #[arg(short = 's', long = "sched-stat")]
    sched_stat: bool,
    /// Refused: jitdump processing.
    #[arg(short = 'j', long = "jit")]
    jit: bool,
    /// Refused: decoding instruction traces (Intel PT, CoreSight).
    #[arg(long = "itrace", value_name = "OPTS", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    itrace: Option<String>,
    /// Refused: --strip goes with --itrace.
    #[arg(long = "strip")]
    strip: bool,
    /// Refused: correlating AUX timestamps of a guest, in place.
    #[arg(long = "vm-time-correlation", value_name = "OPTS", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    vm_time_correlation: Option<String>,
    /// Refused: inserting a guest's perf.data.
    #[arg(long = "guest-data", value_name = "SPEC")]
    guest_data: Option<String>,
    /// Refused: a guest's root file system.
    #[arg(long = "guestmount", value_name = "DIR")]
    guestmount: Option<String>,
    /// Refused: a vmlinux for the kernel's build id.
    #[arg(short = 'k', long = "vmlinux", value_name = "FILE")]
    vmlinux: Option<String>,
    /// Refused: not loading vmlinux.
    #[arg(long = "ignore-vmlinux")]
    ignore_vmlinux: bool,
    /// Refused: a kallsyms file.
    #[arg(long = "kallsyms", value_name = "FILE")]
    kallsyms: Option<String>,
}

/// Every refused option: (the flag as perf spells it, what it does, why perfpipe refuses it).
pub(crate) const REFUSED: &[(&str, &str, &str)] = &[
    (
        "-s/--sched-stat",
        "merges sched_stat and sched_switch events",
        "it needs the events of a task sorted and held back; use perf inject -s",
    ),
    (
        "-j/--jit",
        "turns jitdump files into ELF images and MMAP records",
        "perfpipe writes no files beside the stream; use perf inject -j",
    ),
    (
        "--itrace",
        "decodes Intel PT / CoreSight AUX data into synthesized events",
        "perfpipe has no instruction-trace decoder; use perf inject --itrace",
    ),
    (
        "--strip",
        "drops the events --itrace did not synthesize",
        "it goes with --itrace, which is refused",
    ),
    (
        "--vm-time-correlation",
        "rewrites a guest's AUX timestamps in place",
        "perfpipe never modifies its input; use perf inject --vm-time-correlation",
    ),
    (
        "--guest-data",
        "inserts the events of a guest's perf.data",
        "perfpipe models one host; use perf inject --guest-data",
    ),
    (
        "--guestmount",
        "names a guest's root file system",
        "perfpipe models one host and reads no guest files",
    ),
    (
        "-k/--vmlinux",
        "reads the kernel's build id from a vmlinux",
        "perfpipe takes the kernel's id from /sys/kernel/notes (see --host-ids)",
    ),
    (
        "--ignore-vmlinux",
        "does not load a vmlinux",
        "perfpipe never loads one",
    ),
    (
        "--kallsyms",
        "names a kallsyms file",
        "perfpipe's build-id stages read no kallsyms",
    ),
];

impl Refused {
    /// The first refused option given, as [`REFUSED`] names it.
    fn first(&self) -> Option<&'static (&'static str, &'static str, &'static str)> {
        let given = [
            self.sched_stat,
            self.jit,
            self.itrace.is_some(),
            self.strip,
            self.vm_time_correlation.is_some(),
            self.guest_data.is_some(),
            self.guestmount.is_some(),
            self.vmlinux.is_some(),
            self.ignore_vmlinux,
            self.kallsyms.is_some(),
        ];
        given.iter().position(|&g| g).map(|i| &REFUSED[i])
    }
}

/// The message for a refused option.
fn refusal(r: &(&str, &str, &str)) -> String {
    format!(
        "{} is not supported: perf inject {} {}, and {}",
        r.0, r.0, r.1, r.2
    )
}

/// The `--help` text after the options: what is supported and what is refused.
pub(crate) fn after_help() -> String {
    let mut s = String::from(
        "Supported perf inject options: -i, -o, -b/--build-ids, --buildid-all, \
         -B/--mmap2-buildids, --mmap2-buildid-all, --known-build-ids, --convert-callchain, --aslr, \
         -v/--verbose, -f/--force (changes nothing); perfpipe's own: --buildid-callchain, \
         --host-ids, --aslr-drop.\n\
         Refused, each with an error naming it (exit status 2):\n",
    );
    for (flag, what, _) in REFUSED {
        s.push_str(&format!("  {flag}: {what}\n"));
    }
    s
}

/// The stages these flags ask for, in perf inject's order (`unwind` for --convert-callchain,
/// `aslr`, a build-id stage), in a plan that writes perf's format; `None` for none of them (the
/// stream is passed through).
fn stage(args: &InjectArgs, registry: &Registry) -> anyhow::Result<Option<Plan>> {
    let find = |name: &str| {
        registry
            .find(name)
            .copied()
            .ok_or_else(|| anyhow::anyhow!("no {name} stage registered"))
    };
    let mut plan = perf_plan(registry);
    if args.convert_callchain {
        plan.push("unwind", find("unwind")?, Options::new());
    }
    if args.aslr {
        let spec = find("aslr")?;
        let mut options = Options::new();
        for what in args.aslr_drop.iter().flat_map(|w| w.split(',')) {
            match what.trim() {
                "build-ids" => spec.parse_option(&mut options, "drop-build-ids", "yes")?,
                "host" => spec.parse_option(&mut options, "drop-host", "yes")?,
                other => anyhow::bail!("--aslr-drop: `{other}` is neither build-ids nor host"),
            }
        }
        plan.push("aslr", spec, options);
    }
    if let Some((label, spec, options)) = buildid_stage(args, registry)? {
        plan.push(label, spec, options);
    }
    Ok((!plan.stages.is_empty()).then_some(plan))
}

/// The build-id stage these flags ask for, if any: (its row name, its spec, its options).
fn buildid_stage(
    args: &InjectArgs,
    registry: &Registry,
) -> anyhow::Result<Option<(&'static str, StageSpec, Options)>> {
    let wanted = args.buildid_all
        || args.build_ids
        || args.mmap2_buildids
        || args.mmap2_buildid_all
        || args.known_build_ids.is_some()
        || args.callchain;
    if !wanted {
        return Ok(None);
    }
    let spec = *registry
        .find("buildid")
        .ok_or_else(|| anyhow::anyhow!("no buildid stage registered"))?;
    let mut options = Options::new();
    let mut set = |key: &str, value: &str| spec.parse_option(&mut options, key, value);
    set("host", &args.host_ids)?;
    // Current perf's -b marks callchain dsos too (since 6.12, `build_id__mark_dso_hit()`).
    if args.callchain || args.build_ids {
        set("callchain", "yes")?;
    }
    if let Some(list) = &args.known_build_ids {
        set("known", list)?;
    }
    let label = if args.mmap2_buildid_all {
        set("mmap2", "yes")?;
        set("all", "yes")?;
        "mmap2-buildid-all"
    } else if args.mmap2_buildids {
        set("mmap2", "yes")?;
        "mmap2-buildids"
    } else if args.buildid_all {
        set("all", "yes")?;
        "buildid-all"
    } else {
        "buildid"
    };
    Ok(Some((label, spec, options)))
}

/// A plan that writes perf's format whatever the output's name, as `perf inject` does: a
/// directory output is refused, not taken for a Parquet dataset.
fn perf_plan(registry: &Registry) -> Plan {
    Plan::from_words(
        &[perfpipe_chain::Word::Format(perfpipe_chain::PERF_FORMAT)],
        registry,
    )
    .expect("perf's format is always there")
}

/// Runs `perfpipe inject`.
pub(crate) fn main(args: &InjectArgs, registry: &Registry) -> ExitCode {
    if let Some(r) = args.refused.first() {
        eprintln!("perfpipe inject: {}", refusal(r));
        return ExitCode::from(crate::EXIT_USAGE);
    }
    let plan = match stage(args, registry) {
        Ok(p) => p.unwrap_or_else(|| perf_plan(registry)),
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
    let report = ReportArgs {
        stats: args.verbose,
        no_progress: true,
        ..ReportArgs::default()
    };
    crate::run_file_to_file(
        plan,
        (&args.input, &args.output, mode),
        registry,
        &report,
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
        let plan = stage(&t.a, &perfpipe_chain::builtin()).unwrap().unwrap();
        assert_eq!(plan.stages[0].label, "buildid");
        assert_eq!(plan.stages[0].options.text("host"), Some("no"));
        // -b is current perf's: callchain frames hit too.
        assert!(plan.stages[0].options.switch("callchain"));
        let t = T::try_parse_from(["x", "--known-build-ids", "/a=01"]).unwrap();
        let plan = stage(&t.a, &perfpipe_chain::builtin()).unwrap().unwrap();
        assert!(!plan.stages[0].options.switch("callchain"));
        let t =
            T::try_parse_from(["x", "--buildid-all", "--known-build-ids", "/a=01,/b=02"]).unwrap();
        let plan = stage(&t.a, &perfpipe_chain::builtin()).unwrap().unwrap();
        assert_eq!(plan.stages[0].label, "buildid-all");
        assert_eq!(plan.stages[0].options.text("known"), Some("/a=01,/b=02"));
        assert!(stage(
            &T::try_parse_from(["x"]).unwrap().a,
            &perfpipe_chain::builtin()
        )
        .unwrap()
        .is_none());
        assert!(T::try_parse_from(["x", "-b", "--buildid-all"]).is_err());
        let t = T::try_parse_from(["x", "-B"]).unwrap();
        let plan = stage(&t.a, &perfpipe_chain::builtin()).unwrap().unwrap();
        assert_eq!(plan.stages[0].label, "mmap2-buildids");
        assert!(plan.stages[0].options.switch("mmap2") && !plan.stages[0].options.switch("all"));
        let t = T::try_parse_from(["x", "--mmap2-buildid-all"]).unwrap();
        let plan = stage(&t.a, &perfpipe_chain::builtin()).unwrap().unwrap();
        assert_eq!(plan.stages[0].label, "mmap2-buildid-all");
        assert!(plan.stages[0].options.switch("mmap2") && plan.stages[0].options.switch("all"));
        assert!(T::try_parse_from(["x", "-B", "-b"]).is_err());
        assert!(T::try_parse_from(["x", "-B", "--mmap2-buildid-all"]).is_err());
        let t = T::try_parse_from(["x", "--itrace=i100us"]).unwrap();
        assert_eq!(t.a.refused.first().unwrap().0, "--itrace");
        assert!(T::try_parse_from(["x", "-f"])
            .unwrap()
            .a
            .refused
            .first()
            .is_none());
        assert!(T::try_parse_from(["x", "--host-ids", "maybe"]).is_err());
        // perf 7's --convert-callchain and --aslr map to their stages, in perf inject's order;
        // perf refuses the pair, perfpipe unwinds first.
        let t = T::try_parse_from([
            "x",
            "-b",
            "--aslr",
            "--convert-callchain",
            "--aslr-drop",
            "build-ids,host",
        ])
        .unwrap();
        let plan = stage(&t.a, &perfpipe_chain::builtin()).unwrap().unwrap();
        let labels: Vec<&str> = plan.stages.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["unwind", "aslr", "buildid"]);
        assert!(plan.stages[1].options.switch("drop-build-ids"));
        assert!(plan.stages[1].options.switch("drop-host"));
        let t = T::try_parse_from(["x", "--aslr"]).unwrap();
        let plan = stage(&t.a, &perfpipe_chain::builtin()).unwrap().unwrap();
        assert!(!plan.stages[0].options.switch("drop-host"));
        assert!(T::try_parse_from(["x", "--aslr-drop", "host"]).is_err());
        let t = T::try_parse_from(["x", "--aslr", "--aslr-drop", "paths"]).unwrap();
        let e = stage(&t.a, &perfpipe_chain::builtin()).unwrap_err();
        assert!(e.to_string().contains("`paths`"), "{e}");
    }
}

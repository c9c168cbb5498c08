//! The option groups that several commands share, each flag defined once: the main command,
//! `record` and `bench pipeline` flatten the groups they take.

use std::path::PathBuf;

use clap::Args;
use perfpipe_core::Settings;
use perfpipe_stream::write::file::OutputMode;

/// `-o`, `--pipe`, `--file`.
#[derive(Clone, Debug, Args)]
pub struct OutputArgs {
    /// Output; `-` is standard output. A regular file is written in file mode (perf.data, under a
    /// temporary name renamed at the end), a FIFO or device in pipe mode; see --pipe and --file.
    /// `NAME-%n.data` writes one file per stream (the flight recorder's dumps). A directory
    /// (`DIR/`, or one that exists) is a Parquet dataset. A URL is pushed to: OTLP profiles to
    /// `http(s)://HOST:PORT/v1development/profiles`, pprof to `pyroscope+http(s)://HOST:4040`,
    /// one request per --window. An output that cannot be written is refused before anything is
    /// read (exit status 2).
    #[arg(short, long, value_name = "FILE", default_value = "-")]
    pub output: PathBuf,
    /// Write pipe mode even to a regular file.
    #[arg(long, conflicts_with = "file")]
    pub pipe: bool,
    /// Write file mode (perf.data) even to a FIFO or device; needs -o FILE.
    #[arg(long)]
    pub file: bool,
}

impl OutputArgs {
    /// The output format that --pipe / --file ask for.
    pub fn mode(&self) -> OutputMode {
        match (self.pipe, self.file) {
            (true, _) => OutputMode::Pipe,
            (_, true) => OutputMode::File,
            _ => OutputMode::Auto,
        }
    }
}

/// What to report: `--stats`, `--stats-json`, `--timeline`, `--progress`, `--tap`.
#[derive(Clone, Debug, Default, Args)]
pub struct ReportArgs {
    /// Print a per-stage table (records, MB/s, working/starved/blocked time, the bottleneck) on
    /// stderr at the end, whatever the end: input exhausted, error, interrupt, closed downstream.
    #[arg(long)]
    pub stats: bool,
    /// Write the same figures as JSON to FILE at the end (schema: docs/stats.schema.json).
    #[arg(long, value_name = "FILE")]
    pub stats_json: Option<PathBuf>,
    /// Draw the run to FILE (SVG) at the end: one lane per stage with its working, starved and
    /// blocked time as they changed, the bytes/s through the pipeline, the queue depths and the
    /// bottleneck of each second (docs/measuring.md).
    #[arg(long, value_name = "FILE.svg")]
    pub timeline: Option<PathBuf>,
    /// Show live per-stage progress on stderr (default: only when stderr is a terminal).
    #[arg(long, overrides_with = "no_progress")]
    pub progress: bool,
    /// Never show live progress.
    #[arg(long)]
    pub no_progress: bool,
    /// Copy the stream as it leaves STAGE (the source, decode, a stage flag's name; `name#2` for a
    /// repeated one) to FILE, a pipe-mode stream that `perf script -i FILE` reads. Repeatable.
    #[arg(long, value_name = "STAGE=FILE", value_parser = parse_tap)]
    pub tap: Vec<(String, PathBuf)>,
}

/// How batches flow: `--batch-size`, `--queue`.
#[derive(Clone, Copy, Debug, Args)]
pub struct BatchArgs {
    /// Bytes per batch (suffixes K, M): the size of each read and of the unit passed between stages.
    #[arg(long, value_name = "SIZE", default_value = "256K", value_parser = parse_size)]
    pub batch_size: usize,
    /// Batches each channel between two stages holds.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    pub queue: u16,
}

impl BatchArgs {
    /// The pipeline's settings, counting and timing when `measure`.
    pub fn settings(&self, measure: bool) -> Settings {
        Settings {
            batch_bytes: self.batch_size.max(4096),
            queue_capacity: usize::from(self.queue),
            measure,
        }
    }
}

/// Pipes and measuring: `--pipe-buffer`, `--no-measure`.
#[derive(Clone, Copy, Debug, Args)]
pub struct IoArgs {
    /// Grow the input and output pipes' kernel buffers to SIZE (Linux F_SETPIPE_SZ; 0 to leave them).
    #[arg(long, value_name = "SIZE", default_value = "1M", value_parser = parse_size)]
    pub pipe_buffer: usize,
    /// Do not count or time anything (--stats then shows zeros): only to measure what measuring
    /// costs, side by side with a normal run (benches/passthrough.sh does).
    #[arg(long)]
    pub no_measure: bool,
}

/// Parses `256K`, `1M`, `4096`.
pub fn parse_size(s: &str) -> Result<usize, String> {
    perfpipe_core::spec::parse_size(s)
        .and_then(|n| usize::try_from(n).map_err(|_| format!("`{s}` is too large")))
}

/// Parses `STAGE=FILE` for `--tap`.
pub fn parse_tap(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((stage, file)) if !stage.is_empty() && !file.is_empty() => {
            Ok((stage.to_string(), PathBuf::from(file)))
        }
        _ => Err(format!(
            "`{s}` is not STAGE=FILE (e.g. decode=/tmp/decoded.data)"
        )),
    }
}

pub use perfpipe_chain::path_or_std;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("256K"), Ok(256 << 10));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert!(parse_size("lots").is_err());
    }

    #[test]
    fn taps_parse() {
        assert_eq!(
            parse_tap("decode=/tmp/x"),
            Ok(("decode".to_string(), PathBuf::from("/tmp/x")))
        );
        assert!(parse_tap("decode").is_err());
        assert!(parse_tap("=x").is_err());
    }
}

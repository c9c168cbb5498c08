//! perfpipe's integration tests: one binary, one module per topic.
//!
//! - `util`: the binary, fixtures, temp dirs, which real `perf` runs (the name oracle, 6.1, or
//!   every reader, 6.1 and 6.12), signals sent once they are caught.
//! - `readers`: the reader check (every reader reads our output as it reads the input), and that a
//!   reader rejecting a broken header fails it.
//! - `needs`: the harness (`harness = false`: libtest's command line and summary through
//!   `libtest-mimic`, the tests that `pipetest!` declares collected by `inventory`) and what tests
//!   need (perf, cc, mounting, tracefs, `script`, …), probed when they run: a missing need makes its
//!   tests ignored with the reason, counted in the summary, or under `CI` failed; never a silent pass.
//! - `skipping`: that mechanism, checked: a test that needs perf is never a pass without it, no
//!   plain `#[test]` (it would never run), no test skips by itself.
//! - `passthrough`: byte-identical round trips over fixtures and live recordings, accepted by perf.
//! - `chunking`: the same stream in every read size and split gives the same output.
//! - `buildid`: `--buildid`/`--buildid-all`/`perfpipe inject` against `perf inject -b` on live recordings.
//! - `inject`: `perfpipe inject` in upstream `pipe_test.sh`'s six cases for every build-id style;
//!   `-B`/`--mmap2-buildid-all` against perf's readers; the refused options.
//! - `badinput`: malformed input gives a clear error with an offset, and keeps what came before.
//! - `current`: input written by perf 6.12 (pipe, `-z`, dwarf, tracepoints, file mode, attrs after
//!   the data) through the stages and profile outputs, read by every reader.
//! - `decompress`: `--decompress` of `perf record -z` streams, checked against perf.
//! - `filemode`: file-mode perf.data in and out (file ↔ pipe ↔ file), checked against perf.
//! - `filter`: `--filter` and the shorthands against `perf script`'s filters; the expression algebra.
//! - `malformed`: the catalogue of malformed input (issue 7), each row under a timeout and a memory limit.
//! - `ends`: every kind of end (signals, closed downstream, killed upstream, full disk) loses no complete record.
//! - `regression`: fuzz crashes turned into tests (`r7_*`).
//! - `record`: `perfpipe record` (native capture) against `perf record`: counts, symbols, forks, tiny rings, lost events, overwrite dumps.
//! - `record_tracepoints`: `perfpipe record -e sched:sched_switch` and `--switch-events` read by
//!   every reader, the tracing data as perf writes it, and the off-CPU profiles of `offcpu.c` it
//!   records (issue 31).
//! - `ring`: the flight recorder: newest window, side-band, SIGUSR2 dumps, bounded memory over 1 GiB.
//! - `profile`: folded stacks and flame graphs: stack shapes against `perf script`, pipe = file, `-z`, SIGUSR2 snapshots.
//! - `fold`: folded stacks and flame graphs of live C, C++, Rust, kernel-heavy, `-a` and `-z`
//!   recordings against `perf script | inferno-collapse-perf` (≥ 99.9 % of the weight), and the SVG
//!   rendered by headless Chromium; `oracle` holds the comparison, `workloads` the programs.
//! - `diff`: `perfpipe diff` of live recordings whose hot function moved, against
//!   `inferno-diff-folded -n`, `go tool pprof -diff_base` and `perf script`'s times; the
//!   differential flame graph's pixels in headless Chromium.
//! - `export`: pprof and Parquet against `perf report --sort sym` on live recordings (top 20 within
//!   0.1 pp), the pprof read by a protobuf decoder of its own and by `go tool pprof`, DuckDB's row counts.
//! - `another_machine`: symbols of a recording made elsewhere: `perfpipe archive`, `--symbols`
//!   (ours, `perf archive`'s, a cache filled with `tar xf`), hostile archives, `--kallsyms`, a
//!   real debuginfod on loopback against perf script of the unstripped binaries, and faulty servers.
//! - `containers`: processes recorded inside the Debian trixie root (another userland, perf 7.3),
//!   unwound and named on the host from `--symfs`, an archive made inside, a debuginfod serving the
//!   root's files, and live through `/proc/PID/root`, against perf 7.3 inside the root (≥ 99.9 %);
//!   with no source, no frame from a file of another build (issue 38).
//! - `offcpu`: tracepoint fields by name against `perf script -F trace`, off-CPU intervals against
//!   `perf sched timehist` and the known waits of `offcpu.c`, bad tracing data (issue 31).
//! - `timeline`: `--timeline` and the series of `--stats-json`: sums, each second's bottleneck, a
//!   slow reader in the sink's lane, the SVG rendered by headless Chromium.
//! - `memory`: RSS stays under the stated bound behind a throttled reader; a stalled producer costs no CPU.
//! - `otlp`: OTLP profiles folded back by OpenTelemetry's Python decoder against our folded
//!   stacks; windows pushed to a receiver on 127.0.0.1 summing to the whole; Pyroscope's
//!   `/ingest` read by `go tool pprof`; receivers that refuse, stall, are dead or die mid-stream.
//! - `outputs`: the output decided and checked before the first byte is read, on an input that never
//!   ends: `-o DIR/` writes the dataset while it is open; an impossible output exits 2 at once.
//! - `help`: every command's `--help` fits 100 columns, with one help column per section.
//! - `perf7`: what perf 7.x added, with perf 7.3 as the oracle: `inject --convert-callchain` and
//!   `--aslr` on files and pipes, deferred user callchains stitched, `offcpu-time` samples weighed
//!   (both layouts); every profile output of 7.3's recordings (host and trixie root, `-g` and
//!   dwarf) against 7.3's `perf script`.
//! - `dataset`: the Parquet dataset as a fleet writes it: partitions from the stream (a recording
//!   made in a UTS namespace, CLOCK_DATA dates), `--rotate` parts, read by Spark and DuckDB against
//!   `perf report`, and the queries of `docs/parquet.md` run on it.
//! - `fields`: what `decode` and the typed views read out of samples and sample-id trailers
//!   against `perf script`, with several attrs and byte-swapped input.
//! - `stats`: the `--stats` table, `--stats-json` against its schema, `--tap`, progress on a
//!   terminal only, figures printed on an interrupt.
//! - `unwind`: `--unwind` against perf's own DWARF unwinding, sample by sample, by every reader.
//! - `readme`: the README against the binary (usage flags, the stage and format tables, its main
//!   job run as written), and every path the docs, benches and this index name exists.

#[macro_use]
pub mod util;

pub mod needs;

mod another_machine;
mod badinput;
mod buildid;
mod chunking;
mod containers;
mod current;
mod dataset;
mod decompress;
mod diff;
mod ends;
mod export;
mod fields;
mod filemode;
mod filter;
mod fold;
mod help;
mod inject;
mod malformed;
mod memory;
mod offcpu;
pub mod oracle;
mod otlp;
mod outputs;
mod passthrough;
mod perf7;
mod profile;
pub mod readers;
mod readme;
mod record;
mod record_tracepoints;
mod regression;
mod ring;
mod skipping;
mod stats;
mod timeline;
mod unwind;
mod workloads;

fn main() -> std::process::ExitCode {
    needs::main()
}

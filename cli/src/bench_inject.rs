//! `perfpipe bench inject-build-id` (a variant of `bench::BenchCommand`): `perf bench internals inject-build-id`'s method applied to
//! perfpipe, with perf's own figures printed beside ours when perf is installed.
//!
//! Method (`tools/perf/bench/inject-buildid.c`): a pool of up to 4 × `nr_mmaps` ELF files with build
//! ids found under /usr/lib; per iteration a fresh synthetic stream
//! ([`perfpipe_stream::buildid::bench_input`]) is written into a pipe to a child `perfpipe --buildid`
//! (then `--buildid-all`) whose output is drained concurrently; the time from the first write to
//! the child's exit (`wait4`, which also gives `ru_maxrss`) is one sample. Printed: mean time ±
//! standard error of the mean, time per event (time / (nr_mmaps × (nr_samples + 2))), mean max RSS.
//!
//! Differences from perf's bench: our child is exec'd (perf forks itself and calls `cmd_inject`
//! in-process, so its RSS includes perf's own); the stream is written in one `write_all` rather
//! than one `write` per record.

use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use clap::{Args, FromArgMatches as _};
use perfpipe_stream::buildid::bench_input::{collect_dsos, generate, Rng, Shape};

/// Options, as perf's bench names them.
#[derive(Debug, Args)]
pub(crate) struct InjectBuildIdArgs {
    /// Number of iterations per mode.
    #[arg(short, long, default_value_t = 100)]
    iterations: usize,
    /// Number of MMAP2 records per stream.
    #[arg(short = 'm', long, default_value_t = 100)]
    nr_mmaps: usize,
    /// Number of SAMPLEs after each MMAP2.
    #[arg(short = 'n', long, default_value_t = 100)]
    nr_samples: usize,
    /// Do not run perf's own bench.
    #[arg(long)]
    no_perf: bool,
    /// Directory to collect the dso pool from.
    #[arg(long, default_value = "/usr/lib/")]
    pool: PathBuf,
}

/// Mean and standard error of the mean, as perf's `stddev_stats()` gives them.
fn mean_sem(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, (var / n).sqrt())
}

/// One timed run: (milliseconds, max RSS in KB).
fn run_once(exe: &std::path::Path, flag: &str, input: &[u8]) -> std::io::Result<(f64, f64)> {
    let mut child = Command::new(exe)
        .arg(flag)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut stdout = child.stdout.take().expect("piped");
    let drain = std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while matches!(stdout.read(&mut buf), Ok(n) if n > 0) {}
    });
    let mut stdin = child.stdin.take().expect("piped");
    let t0 = Instant::now();
    stdin.write_all(input)?;
    drop(stdin);
    let mut status = 0;
    // SAFETY: rusage is plain old data (integers and timevals), for which all zeroes is valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a child we spawned and have not waited for; valid out-pointers.
    let r = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut ru) };
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let _ = drain.join();
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((ms, ru.ru_maxrss as f64))
}

fn bench(args: &InjectBuildIdArgs) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let pool = collect_dsos(&args.pool, 4 * args.nr_mmaps);
    anyhow::ensure!(
        !pool.is_empty(),
        "no ELF file with a build id under {}",
        args.pool.display()
    );
    println!("# perfpipe: collected {} DSOs", pool.len());
    let shape = Shape {
        nr_mmaps: args.nr_mmaps,
        nr_samples: args.nr_samples,
        pid: std::process::id() + 1,
    };
    let events = (args.nr_mmaps * (args.nr_samples + 2)) as f64;
    for (flag, label) in [("--buildid", ""), ("--buildid-all", "-all")] {
        let mut rng = Rng::new(1);
        let (mut times, mut rss) = (Vec::new(), Vec::new());
        for _ in 0..args.iterations {
            let input = generate(&pool, shape, &mut rng);
            let (ms, kb) = run_once(&exe, flag, &input)?;
            times.push(ms);
            rss.push(kb);
        }
        let (t, ts) = mean_sem(&times);
        let (m, ms) = mean_sem(&rss);
        println!("# perfpipe {flag}");
        println!("  Average build-id{label} injection took: {t:.3} msec (+- {ts:.3} msec)");
        println!(
            "  Average time per event: {:.3} usec (+- {:.3} usec)",
            t * 1e3 / events,
            ts * 1e3 / events
        );
        println!("  Average memory usage: {m:.0} KB (+- {ms:.0} KB)");
    }
    if args.no_perf {
        return Ok(());
    }
    let perf = Command::new("perf")
        .args(["bench", "internals", "inject-build-id"])
        .args(["-i", &args.iterations.to_string()])
        .args(["-m", &args.nr_mmaps.to_string()])
        .args(["-n", &args.nr_samples.to_string()])
        .output();
    match perf {
        Ok(o) if o.status.success() => {
            println!("# perf bench internals inject-build-id (same -i -m -n)");
            print!("{}", String::from_utf8_lossy(&o.stdout));
        }
        Ok(o) => println!(
            "# perf bench failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(_) => println!("# perf not installed: no side-by-side figures"),
    }
    Ok(())
}

/// The subcommand's name under `perfpipe bench`.
pub(crate) const NAME: &str = "inject-build-id";

/// The `bench inject-build-id` subcommand, added to `bench` by `crate::command`.
pub(crate) fn command() -> clap::Command {
    InjectBuildIdArgs::augment_args(clap::Command::new(NAME)).about(
        "Time build-id injection on perf's synthetic stream, beside `perf bench internals \
         inject-build-id`",
    )
}

/// Runs `perfpipe bench inject-build-id` from its matches.
pub(crate) fn main_matches(m: &clap::ArgMatches) -> ExitCode {
    match InjectBuildIdArgs::from_arg_matches(m) {
        Ok(args) => main(&args),
        Err(e) => {
            let _ = e.print();
            ExitCode::from(crate::EXIT_USAGE)
        }
    }
}

/// Runs `perfpipe bench inject-build-id`.
pub(crate) fn main(args: &InjectBuildIdArgs) -> ExitCode {
    match bench(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("perfpipe bench inject-build-id: {e:#}");
            ExitCode::from(crate::EXIT_FAILURE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_standard_error() {
        let (m, s) = mean_sem(&[1.0, 2.0, 3.0, 4.0]);
        assert!((m - 2.5).abs() < 1e-12);
        // sample variance 5/3, sem = sqrt(5/3/4)
        assert!((s - (5.0f64 / 12.0).sqrt()).abs() < 1e-12);
        assert_eq!(mean_sem(&[]), (0.0, 0.0));
    }
}

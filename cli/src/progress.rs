//! Live progress on stderr: one line per stage (records, throughput, and what its thread is doing),
//! under a header that shows how far through the input the run is — by bytes with a percentage and
//! ETA for a file, by the recording's own timestamps for a pipe ("recorded time covered, replaying
//! at N× record speed").
//!
//! On a terminal the lines redraw in place (indicatif); forced on (`--progress`) elsewhere, a plain
//! status line is printed every second instead. It only reads the runner's metrics.

use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use perfpipe_core::{StageMetrics, StageSnapshot};

/// A running progress display.
pub(crate) struct Progress {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// Starts drawing the progress of `metrics` (pipeline order); `input_size` is the input file's
    /// size, if the input is a file.
    pub(crate) fn start(metrics: Vec<StageMetrics>, input_size: Option<u64>) -> Progress {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("progress".into())
            .spawn(move || {
                let mut view = View::new(metrics, input_size);
                if std::io::stderr().is_terminal() {
                    view.live(&flag);
                } else {
                    view.plain(&flag);
                }
            })
            .ok();
        Progress { stop, thread }
    }

    /// Draws the final state and stops.
    pub(crate) fn finish(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct View {
    metrics: Vec<StageMetrics>,
    input_size: Option<u64>,
    started: Instant,
    last: Vec<StageSnapshot>,
    last_at: Instant,
}

/// Bytes a stage moved between two snapshots: output bytes once it has sent something, else
/// input bytes (a sink). Decided on the newer snapshot and used for both, so a stage that sends
/// its first batch between two ticks does not subtract its input from its output (an overflow
/// CI caught); counters are read one by one, never all at once, so it saturates.
fn bytes_since(new: &StageSnapshot, old: &StageSnapshot) -> u64 {
    if new.output.batches > 0 {
        new.output.bytes.saturating_sub(old.output.bytes)
    } else {
        new.input.bytes.saturating_sub(old.input.bytes)
    }
}

impl View {
    fn new(metrics: Vec<StageMetrics>, input_size: Option<u64>) -> View {
        let last = metrics.iter().map(StageMetrics::snapshot).collect();
        View {
            metrics,
            input_size,
            started: Instant::now(),
            last,
            last_at: Instant::now(),
        }
    }

    /// One line per stage, from the change since the previous call, and the header line.
    fn tick(&mut self) -> (String, Vec<String>) {
        let now: Vec<StageSnapshot> = self.metrics.iter().map(StageMetrics::snapshot).collect();
        let dt = self.last_at.elapsed().as_secs_f64().max(1e-3);
        let lines = now
            .iter()
            .zip(&self.last)
            .map(|(n, l)| {
                let rate = bytes_since(n, l) as f64 / 1e6 / dt;
                let w = n.working.saturating_sub(l.working);
                let st = n.starved.saturating_sub(l.starved);
                let b = n.blocked.saturating_sub(l.blocked);
                let state = if w >= st && w >= b {
                    "working"
                } else if st >= b {
                    "waiting for input"
                } else {
                    "waiting to send"
                };
                let records = n.input.records.max(n.output.records);
                format!("{:<12} {records:>11} rec {rate:>9.1} MB/s  {state}", n.name)
            })
            .collect();
        let header = self.header(&now);
        self.last = now;
        self.last_at = Instant::now();
        (header, lines)
    }

    fn header(&self, now: &[StageSnapshot]) -> String {
        let read = now.first().map_or(0, |s| s.output.bytes);
        let elapsed = self.started.elapsed().as_secs_f64();
        let counter = |name: &str| {
            now.iter()
                .flat_map(|s| &s.counters)
                .find(|(n, _)| *n == name)
                .map_or(0, |(_, v)| *v)
        };
        let (first, last) = (
            counter("sample_time_first_ns"),
            counter("sample_time_last_ns"),
        );
        let covered = last.saturating_sub(first) as f64 / 1e9;
        let event_time = if covered > 0.0 && elapsed > 0.0 {
            format!(
                "; recorded time covered {covered:.1} s, replaying at {:.1}× record speed",
                covered / elapsed
            )
        } else {
            String::new()
        };
        match self.input_size {
            Some(total) if total > 0 => {
                let pct = 100.0 * read as f64 / total as f64;
                let eta = if read > 0 {
                    elapsed * (total.saturating_sub(read)) as f64 / read as f64
                } else {
                    0.0
                };
                format!(
                    "input {:.1}/{:.1} MB ({pct:.0}%), ETA {eta:.0} s{event_time}",
                    read as f64 / 1e6,
                    total as f64 / 1e6
                )
            }
            _ => format!("input {:.1} MB read{event_time}", read as f64 / 1e6),
        }
    }

    /// Redraws in place on a terminal.
    fn live(&mut self, stop: &AtomicBool) {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(8));
        let style = ProgressStyle::with_template("{msg}").expect("valid template");
        let header = match self.input_size {
            Some(total) if total > 0 => {
                let bar = multi.add(ProgressBar::new(total));
                bar.set_style(
                    ProgressStyle::with_template("{bar:30} {msg}").expect("valid template"),
                );
                bar
            }
            _ => {
                let bar = multi.add(ProgressBar::new_spinner());
                bar.set_style(style.clone());
                bar
            }
        };
        let rows: Vec<ProgressBar> = self
            .metrics
            .iter()
            .map(|_| {
                let b = multi.add(ProgressBar::new_spinner());
                b.set_style(style.clone());
                b
            })
            .collect();
        loop {
            let finished = stop.load(Ordering::SeqCst);
            let (head, lines) = self.tick();
            header.set_position(self.last.first().map_or(0, |s| s.output.bytes));
            header.set_message(head);
            for (row, line) in rows.iter().zip(lines) {
                row.set_message(line);
            }
            if finished {
                header.finish();
                rows.iter().for_each(ProgressBar::finish);
                return;
            }
            sleep_unless(stop, Duration::from_millis(250));
        }
    }

    /// A plain status line every second, for a forced `--progress` without a terminal.
    fn plain(&mut self, stop: &AtomicBool) {
        loop {
            let finished = stop.load(Ordering::SeqCst);
            let (head, lines) = self.tick();
            eprintln!("perfpipe: {head}");
            for l in lines {
                eprintln!("perfpipe:   {l}");
            }
            if finished {
                return;
            }
            sleep_unless(stop, Duration::from_secs(1));
        }
    }
}

/// Sleeps for `d`, waking early when `stop` is set.
fn sleep_unless(stop: &AtomicBool, d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until && !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfpipe_core::FlowSnapshot;

    fn snap(input: u64, output: u64, batches_out: u64) -> StageSnapshot {
        StageSnapshot {
            name: "decode".into(),
            input: FlowSnapshot {
                bytes: input,
                ..FlowSnapshot::default()
            },
            output: FlowSnapshot {
                bytes: output,
                batches: batches_out,
                ..FlowSnapshot::default()
            },
            working: Duration::ZERO,
            starved: Duration::ZERO,
            blocked: Duration::ZERO,
            queue_capacity: 4,
            queue_fill_avg: 0.0,
            queue_fill_max: 0,
            counters: Vec::new(),
            notes: Vec::new(),
            lifetime: Duration::ZERO,
        }
    }

    #[test]
    fn a_first_batch_between_two_ticks_is_no_underflow() {
        // Had read 1 MB, sent nothing; now sent its first 256 KiB.
        assert_eq!(
            bytes_since(&snap(1 << 20, 256 << 10, 1), &snap(1 << 20, 0, 0)),
            256 << 10
        );
        // A sink: input only.
        assert_eq!(bytes_since(&snap(3000, 0, 0), &snap(1000, 0, 0)), 2000);
        // Counters read at slightly different instants can look like going back.
        assert_eq!(bytes_since(&snap(10, 5, 1), &snap(10, 7, 1)), 0);
    }
}

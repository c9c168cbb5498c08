//! The run as it went: periodic samples of every stage's counters, for `--timeline` and the
//! `timeline` of `--stats-json`.
//!
//! [`Pipeline::timeline`](crate::Pipeline::timeline) asks the runner for one more thread,
//! `timeline`, which reads every stage's [`StageMetrics`] (the counters `--stats` prints, nothing
//! more) every [`FIRST_PERIOD`] and keeps them as cumulative [`Sample`]s. The first sample is all
//! zeros at the start; the last is taken when every stage has ended, from the counters
//! [`Report::stages`](crate::Report::stages) holds, so the [`Timeline::intervals`] add up to the
//! totals. Not asked for, the thread does not exist and the stages count exactly what they count
//! without it.
//!
//! - **Bounded**: past [`MAX_INTERVALS`] intervals every other sample is dropped and the period
//!   doubles (62.5 ms, 125 ms, … 1 s after about 17 minutes, 2 s after 34), so a day-long run
//!   keeps about a thousand samples.
//! - **Open phases**: the runner adds a thread's times once per batch, when the batch is done; with
//!   a timeline it also publishes what each thread is doing and since when (waiting for input,
//!   working, waiting to send), and a sample counts that time too, so a long wait shows while it
//!   lasts. A source's `produce` and a sink's `consume` split into working and waiting (in
//!   `read(2)`, `write(2)`) only when they return: their time shows then.
//! - **Bottleneck**: [`Timeline::bottlenecks`] applies `--stats`' [`verdict`](crate::verdict) to the
//!   time split of each second (of each interval once the period is longer than a second).

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{RecvTimeoutError, Sender};

use crate::metrics::StageMetrics;
use crate::summary::{verdict_of, Split, Verdict};

/// The period between samples at the start of a run: a sixteenth of a second, so that its
/// doublings (125 ms, 250 ms, 500 ms, 1 s, 2 s, …) keep whole seconds on sample boundaries.
pub const FIRST_PERIOD: Duration = Duration::from_micros(62_500);

/// The most intervals a [`Timeline`] keeps before it halves its resolution.
pub const MAX_INTERVALS: usize = 1024;

/// The width of a bottleneck bin: a second.
const BIN: Duration = Duration::from_secs(1);

/// One stage's cumulative counters at one moment: the same values as its
/// [`StageSnapshot`](crate::StageSnapshot), without the per-kind counts, the stage's own counters
/// and notes. Between two samples ([`StageSample::since`]) they are what happened in between.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StageSample {
    /// Time spent in the stage's own code.
    pub working: Duration,
    /// Time spent waiting on an empty input (a source: inside `read(2)`).
    pub starved: Duration,
    /// Time spent waiting on a full output (a sink: inside `write(2)`).
    pub blocked: Duration,
    /// Records received.
    pub records_in: u64,
    /// Records sent.
    pub records_out: u64,
    /// Stream bytes received.
    pub bytes_in: u64,
    /// Stream bytes sent.
    pub bytes_out: u64,
    /// Batches sent, each of which sampled the fill of the output queue.
    pub sends: u64,
    /// The sum of those fills: batches already queued at each send.
    pub queued: u64,
}

impl StageSample {
    /// What happened between `earlier` and `self`. Saturating: counters are read one by one, so
    /// two reads can disagree by a batch.
    pub fn since(&self, earlier: &StageSample) -> StageSample {
        StageSample {
            working: self.working.saturating_sub(earlier.working),
            starved: self.starved.saturating_sub(earlier.starved),
            blocked: self.blocked.saturating_sub(earlier.blocked),
            records_in: self.records_in.saturating_sub(earlier.records_in),
            records_out: self.records_out.saturating_sub(earlier.records_out),
            bytes_in: self.bytes_in.saturating_sub(earlier.bytes_in),
            bytes_out: self.bytes_out.saturating_sub(earlier.bytes_out),
            sends: self.sends.saturating_sub(earlier.sends),
            queued: self.queued.saturating_sub(earlier.queued),
        }
    }

    /// Raises each field to `o`'s if it is larger.
    fn at_least(&mut self, o: &StageSample) {
        self.working = self.working.max(o.working);
        self.starved = self.starved.max(o.starved);
        self.blocked = self.blocked.max(o.blocked);
        self.records_in = self.records_in.max(o.records_in);
        self.records_out = self.records_out.max(o.records_out);
        self.bytes_in = self.bytes_in.max(o.bytes_in);
        self.bytes_out = self.bytes_out.max(o.bytes_out);
        self.sends = self.sends.max(o.sends);
        self.queued = self.queued.max(o.queued);
    }

    fn add(&mut self, o: &StageSample) {
        self.working += o.working;
        self.starved += o.starved;
        self.blocked += o.blocked;
        self.records_in += o.records_in;
        self.records_out += o.records_out;
        self.bytes_in += o.bytes_in;
        self.bytes_out += o.bytes_out;
        self.sends += o.sends;
        self.queued += o.queued;
    }

    /// Working + starved + blocked.
    pub fn total(&self) -> Duration {
        self.working + self.starved + self.blocked
    }

    /// The mean number of batches already queued at a send, if there was a send.
    pub fn queue_fill_avg(&self) -> Option<f64> {
        (self.sends > 0).then(|| self.queued as f64 / self.sends as f64)
    }
}

/// Every stage's counters at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Time since the pipeline was spawned.
    pub t: Duration,
    /// One per stage, in pipeline order.
    pub stages: Vec<StageSample>,
}

/// What happened between two samples.
#[derive(Clone, Debug, PartialEq)]
pub struct Interval {
    /// Its start, since the pipeline was spawned.
    pub from: Duration,
    /// Its end.
    pub to: Duration,
    /// One per stage, in pipeline order: [`StageSample::since`] the interval's start.
    pub stages: Vec<StageSample>,
}

/// The bottleneck of one bin of time.
#[derive(Clone, Debug, PartialEq)]
pub struct Bottleneck {
    /// Its start, since the pipeline was spawned.
    pub from: Duration,
    /// Its end.
    pub to: Duration,
    /// `--stats`' verdict on the time split of the bin alone.
    pub verdict: Verdict,
}

/// A run's samples, first (all zeros, at 0) to last (at the end).
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    /// The stage names, in pipeline order.
    pub names: Vec<String>,
    /// The period between samples now: [`FIRST_PERIOD`], doubled each time the samples were
    /// thinned out. The last interval may be shorter (it ends with the run).
    pub period: Duration,
    /// Cumulative samples, in time order.
    pub samples: Vec<Sample>,
}

impl Timeline {
    /// No samples but the zeros at the start.
    pub fn new(names: Vec<String>) -> Timeline {
        let zeros = vec![StageSample::default(); names.len()];
        Timeline {
            names,
            period: FIRST_PERIOD,
            samples: vec![Sample {
                t: Duration::ZERO,
                stages: zeros,
            }],
        }
    }

    /// Appends a sample; at [`MAX_INTERVALS`] intervals, drops every other sample (never the
    /// first or the last) and doubles the period. Samples on the grid of the period are thinned
    /// out to the grid of the doubled one: the count is then odd, the last index even.
    ///
    /// A sample is raised to the one before it field by field: an open phase counted in one
    /// sample is counted in the counters only when it ends, and the phase after it may be
    /// sampled first ([`StageMetrics::sample`]); values never go back.
    pub fn push(&mut self, mut sample: Sample) {
        if let Some(last) = self.samples.last() {
            for (s, l) in sample.stages.iter_mut().zip(&last.stages) {
                s.at_least(l);
            }
        }
        self.samples.push(sample);
        if self.samples.len() > MAX_INTERVALS {
            let last = self.samples.len() - 1;
            let mut i = 0;
            self.samples.retain(|_| {
                let keep = i % 2 == 0 || i == last;
                i += 1;
                keep
            });
            self.period *= 2;
        }
    }

    /// What happened between each two consecutive samples.
    pub fn intervals(&self) -> Vec<Interval> {
        self.samples
            .windows(2)
            .map(|w| Interval {
                from: w[0].t,
                to: w[1].t,
                stages: w[1]
                    .stages
                    .iter()
                    .zip(&w[0].stages)
                    .map(|(b, a)| b.since(a))
                    .collect(),
            })
            .collect()
    }

    /// The width of a bottleneck bin: a second, or the period once it is longer.
    pub fn bin(&self) -> Duration {
        self.period.max(BIN)
    }

    /// The bottleneck of each bin: the intervals that start in `[k·bin, (k+1)·bin)` summed per
    /// stage, and `--stats`' verdict on that time split. Bins with no interval are left out; the
    /// last bin ends with the run.
    pub fn bottlenecks(&self) -> Vec<Bottleneck> {
        let bin = self.bin().as_secs_f64();
        let mut out: Vec<Bottleneck> = Vec::new();
        let mut current: Option<(u64, Duration, Duration, Vec<StageSample>)> = None;
        let mut close = |c: Option<(u64, Duration, Duration, Vec<StageSample>)>| {
            if let Some((_, from, to, sums)) = c {
                let splits: Vec<Split<'_>> = self
                    .names
                    .iter()
                    .zip(&sums)
                    .map(|(name, s)| Split {
                        name,
                        working: s.working,
                        starved: s.starved,
                        blocked: s.blocked,
                    })
                    .collect();
                let verdict = verdict_of(&splits);
                out.push(Bottleneck { from, to, verdict });
            }
        };
        for iv in self.intervals() {
            // An interval starts a little after its slot on the grid, never before.
            let k = ((iv.from.as_secs_f64() + 1e-9) / bin).floor() as u64;
            match &mut current {
                Some((bin_k, _, to, sums)) if *bin_k == k => {
                    *to = iv.to;
                    sums.iter_mut().zip(&iv.stages).for_each(|(s, d)| s.add(d));
                }
                _ => {
                    close(current.take());
                    current = Some((k, iv.from, iv.to, iv.stages));
                }
            }
        }
        close(current);
        out
    }
}

/// A handle on the samples of a running pipeline, from
/// [`Running::timeline`](crate::Running::timeline).
#[derive(Clone, Debug)]
pub struct Recorder {
    metrics: Vec<StageMetrics>,
    started: Instant,
    series: Arc<Mutex<Timeline>>,
}

impl Recorder {
    fn sample(&self, t: Duration) -> Sample {
        Sample {
            t,
            stages: self.metrics.iter().map(|m| m.sample(t)).collect(),
        }
    }

    /// Takes a sample now; returns the period after it.
    fn push_now(&self) -> Duration {
        let sample = self.sample(self.started.elapsed());
        let mut series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        series.push(sample);
        series.period
    }

    /// The samples so far and one taken now: the timeline of a run that ends without waiting for
    /// its threads (a second interrupt).
    pub fn now(&self) -> Timeline {
        let sample = self.sample(self.started.elapsed());
        let mut series = self
            .series
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        series.push(sample);
        series
    }
}

/// The sampling thread of a pipeline.
#[derive(Debug)]
pub(crate) struct Sampler {
    recorder: Recorder,
    /// Dropped to stop the thread at once.
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    /// Starts sampling `metrics` (pipeline order), counting time from `started`.
    pub(crate) fn start(metrics: &[StageMetrics], started: Instant) -> std::io::Result<Sampler> {
        let names = metrics.iter().map(|m| m.name().to_string()).collect();
        let recorder = Recorder {
            metrics: metrics.to_vec(),
            started,
            series: Arc::new(Mutex::new(Timeline::new(names))),
        };
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let r = recorder.clone();
        let thread = std::thread::Builder::new()
            .name("timeline".into())
            .spawn(move || {
                let mut next = FIRST_PERIOD;
                loop {
                    match stopped.recv_deadline(r.started + next) {
                        Err(RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                    let period = r.push_now();
                    // The next slot on the grid; slots missed (a descheduled thread) are skipped.
                    let t = r.started.elapsed();
                    while next <= t {
                        next += period;
                    }
                }
            })?;
        Ok(Sampler {
            recorder,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub(crate) fn recorder(&self) -> &Recorder {
        &self.recorder
    }

    /// Stops the thread and takes the last sample, at `t` (the run's wall time). A periodic
    /// sample less than half a period before it is replaced by it, so that the last interval is
    /// no sliver whose few batches would read as a burst of throughput. The sampler thread may
    /// have taken its last sample after `t` was read: that one is replaced too (a `Duration`
    /// subtraction below zero panics).
    pub(crate) fn finish(mut self, t: Duration) -> Timeline {
        drop(self.stop.take());
        if let Some(h) = self.thread.take() {
            let _ = h.join();
        }
        let sample = self.recorder.sample(t);
        let mut series = self
            .recorder
            .series
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let half = series.period / 2;
        if series.samples.len() > 1
            && series
                .samples
                .last()
                .is_some_and(|l| t.saturating_sub(l.t) < half)
        {
            series.samples.pop();
        }
        series.push(sample);
        series.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A sample at `t` where stage `a` has worked `w` and stage `b` has been blocked `w`.
    fn at(t: Duration, w: Duration) -> Sample {
        let a = StageSample {
            working: w,
            bytes_out: w.as_millis() as u64,
            ..StageSample::default()
        };
        let b = StageSample {
            blocked: w,
            bytes_in: w.as_millis() as u64,
            ..StageSample::default()
        };
        Sample {
            t,
            stages: vec![a, b],
        }
    }

    #[test]
    fn thinning_out_keeps_the_grid_the_ends_and_the_totals() {
        let mut tl = Timeline::new(vec!["a".into(), "b".into()]);
        let n = 3 * MAX_INTERVALS as u64;
        let p = FIRST_PERIOD;
        let mut k = 0u64;
        while k < n {
            k += 1;
            let t = p * k as u32;
            // Sample on the period now in force, as the sampler does.
            if (t.as_nanos() % tl.period.as_nanos()) == 0 {
                tl.push(at(t, t));
            }
        }
        let end = p * n as u32 + ms(3);
        tl.push(at(end, end));
        assert!(tl.samples.len() <= MAX_INTERVALS);
        assert_eq!(tl.period, p * 4);
        assert_eq!(tl.samples[0].t, Duration::ZERO);
        assert_eq!(tl.samples.last().unwrap().t, end);
        for w in tl.samples[..tl.samples.len() - 1].windows(2) {
            assert_eq!(w[1].t - w[0].t, tl.period, "a regular grid");
        }
        let ivs = tl.intervals();
        let total: Duration = ivs.iter().map(|i| i.stages[0].working).sum();
        assert_eq!(total, end);
        let bytes: u64 = ivs.iter().map(|i| i.stages[1].bytes_in).sum();
        assert_eq!(bytes, end.as_millis() as u64);
    }

    #[test]
    fn each_second_gets_the_verdict_of_its_own_time_split() {
        let names = vec!["read".to_string(), "decode".into(), "write".into()];
        let mut tl = Timeline::new(names);
        let (mut read, mut decode, mut write) = Default::default();
        let step = |s: &mut StageSample, w: u64, st: u64, b: u64| {
            s.working += ms(w);
            s.starved += ms(st);
            s.blocked += ms(b);
        };
        // Two seconds where decode works, then one where write waits on the consumer.
        for k in 1..=48u32 {
            let (r, d, w): (&mut StageSample, &mut StageSample, &mut StageSample) =
                (&mut read, &mut decode, &mut write);
            if k <= 32 {
                step(r, 5, 0, 57);
                step(d, 60, 2, 0);
                step(w, 2, 60, 0);
            } else {
                step(r, 2, 0, 60);
                step(d, 5, 0, 57);
                step(w, 2, 0, 60);
            }
            tl.push(Sample {
                t: FIRST_PERIOD * k + ms(1),
                stages: vec![read, decode, write],
            });
        }
        let b = tl.bottlenecks();
        let got: Vec<(u64, Verdict)> = b
            .iter()
            .map(|b| (b.from.as_millis() as u64, b.verdict.clone()))
            .collect();
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(
            matches!(&got[0].1, Verdict::Stage { name, .. } if name == "decode"),
            "{got:?}"
        );
        assert!(matches!(&got[1].1, Verdict::Stage { name, .. } if name == "decode"));
        assert!(matches!(&got[2].1, Verdict::Output { name, .. } if name == "write"));
        assert_eq!(got[1].0, 1001);
        assert_eq!(b[0].from, Duration::ZERO);
    }
}

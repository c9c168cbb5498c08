//! The order-preserving parallel wrapper: same output as the sequential stage, in order, with
//! errors reported in order and counters registered.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use perfpipe_core::harness::{framed, Collect, Feed};
use perfpipe_core::{Batch, Flow, Out, Pipeline, Report, Settings, Stage, StageError};

/// `batches` batches of 8 one-byte records numbered 0, 1, 2…
fn numbers(batches: u32) -> Feed {
    Feed::new((0..batches).map(|b| {
        let bytes: Vec<u8> = (b * 8..b * 8 + 8).map(|i| i as u8).collect();
        let records: Vec<(&[u8], u32)> = (0..8).map(|k| (&bytes[k..=k], 0)).collect();
        framed(&records)
    }))
}

/// Rewrites every record (byte → byte * 3 + 1), after a pause that varies by batch so that
/// workers finish out of order; fails or panics at byte `fail_at` when asked.
struct Heavy {
    fail_at: Option<(u8, bool)>,
    flushes: Arc<Mutex<u32>>,
}

impl Stage for Heavy {
    fn process(&mut self, mut batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        let first = batch.data[0];
        std::thread::sleep(Duration::from_micros(u64::from(first % 7) * 300));
        if let Some((at, panic)) = self.fail_at {
            if batch.data.contains(&at) {
                if panic {
                    panic!("heavy panicked at {at}");
                }
                return Err(format!("heavy failed at {at}").into());
            }
        }
        for b in &mut batch.data {
            *b = b.wrapping_mul(3).wrapping_add(1);
        }
        out.push(batch);
        Ok(Flow::Continue)
    }

    fn flush(&mut self, _out: &mut Out<'_>) -> Result<(), StageError> {
        *self.flushes.lock().unwrap() += 1;
        Ok(())
    }
}

/// Runs `numbers(batches)` through the stage that `add` appends, into a collector.
fn run(add: impl FnOnce(Pipeline) -> Pipeline, batches: u32) -> (Vec<u8>, Report) {
    let sink = Collect::new();
    let pipeline = Pipeline::new(Settings::default()).source("numbers", numbers(batches));
    let report = add(pipeline).sink("collect", sink.clone()).run();
    (sink.bytes(), report)
}

fn heavy(fail_at: Option<(u8, bool)>, flushes: &Arc<Mutex<u32>>) -> Heavy {
    Heavy {
        fail_at,
        flushes: flushes.clone(),
    }
}

#[test]
fn same_output_as_sequential_for_any_worker_count() {
    let flushes = Arc::new(Mutex::new(0));
    let f = flushes.clone();
    let (want, report) = run(|p| p.stage("heavy", heavy(None, &f)), 200);
    assert!(report.is_ok());
    assert_eq!(want.len(), 1600);
    for workers in [1, 2, 3, 8] {
        let f = flushes.clone();
        let (got, report) = run(
            |p| p.parallel_stage("heavy", workers, move || heavy(None, &f)),
            200,
        );
        assert!(report.is_ok(), "{:?}", report.errors);
        assert!(got == want, "{workers} workers reordered the stream");
        let counters = &report.stages[1].counters;
        assert!(counters.iter().any(|(n, _)| *n == "reorder_buffered_max"));
        assert!(counters.iter().any(|(n, _)| *n == "head_of_line_wait_ns"));
    }
    // Every worker of every run was flushed once: 1 + 2 + 3 + 8, plus the sequential run.
    assert_eq!(*flushes.lock().unwrap(), 15);
}

#[test]
fn errors_and_panics_come_in_order_after_earlier_output() {
    for panic in [false, true] {
        let flushes = Arc::new(Mutex::new(0));
        let f = flushes.clone();
        // Byte 80 is in batch 10: batches 0..=9 must come out, nothing after.
        let (got, report) = run(
            |p| p.parallel_stage("heavy", 3, move || heavy(Some((80, panic)), &f)),
            30,
        );
        assert_eq!(report.errors.len(), 1, "{:?}", report.errors);
        let msg = report.errors[0].to_string();
        assert!(msg.contains("at 80"), "{msg}");
        let want: Vec<u8> = (0..80u8)
            .map(|b| b.wrapping_mul(3).wrapping_add(1))
            .collect();
        assert_eq!(got, want);
    }
}

/// The speed-up itself is measured by `benches/pipeline.rs`; here only that two workers overlap.
#[test]
fn two_workers_overlap() {
    struct Sleepy;
    impl Stage for Sleepy {
        fn process(&mut self, batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
            std::thread::sleep(Duration::from_millis(20));
            out.push(batch);
            Ok(Flow::Continue)
        }
    }
    let (_, report) = run(|p| p.parallel_stage("sleepy", 2, || Sleepy), 10);
    assert!(report.is_ok());
    // Sequentially 10 × 20 ms = 200 ms of sleeping; two workers need about half.
    assert!(
        report.stages[1].working < Duration::from_millis(180),
        "{:?}",
        report.stages[1]
    );
}

/// The workers are the runner's: named after the stage, taking batches of the pipeline's size
/// from its pool, and joined before the report, also when the stage fails.
#[test]
fn workers_are_runner_threads() {
    /// Notes its thread's name and the batch size it is offered; fails on the batch holding
    /// byte 40 if asked; counts its drops (the end of its worker thread).
    struct Probe {
        seen: Arc<Mutex<Vec<(String, usize)>>>,
        fail: bool,
        dropped: Arc<Mutex<u32>>,
    }
    impl Stage for Probe {
        fn process(&mut self, batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
            let name = std::thread::current().name().unwrap_or("").to_string();
            self.seen.lock().unwrap().push((name, out.batch_bytes()));
            if self.fail && batch.data.contains(&40) {
                return Err("probe failed".into());
            }
            out.push(batch);
            Ok(Flow::Continue)
        }
    }
    impl Drop for Probe {
        fn drop(&mut self) {
            *self.dropped.lock().unwrap() += 1;
        }
    }
    for fail in [false, true] {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let dropped = Arc::new(Mutex::new(0));
        let (s, d) = (seen.clone(), dropped.clone());
        let settings = Settings {
            batch_bytes: 12345,
            ..Settings::default()
        };
        let report = Pipeline::new(settings)
            .source("numbers", numbers(20))
            .parallel_stage("probe", 3, move || Probe {
                seen: s.clone(),
                fail,
                dropped: d.clone(),
            })
            .sink("collect", Collect::new())
            .run();
        assert_eq!(report.is_ok(), !fail, "{:?}", report.errors);
        // Every worker thread had ended (and dropped its stage) when the report was made.
        assert_eq!(*dropped.lock().unwrap(), 3, "fail={fail}");
        let seen = seen.lock().unwrap();
        assert!(!seen.is_empty());
        for (name, batch_bytes) in seen.iter() {
            assert!(
                ["probe/0", "probe/1", "probe/2"].contains(&name.as_str()),
                "{name}"
            );
            assert_eq!(*batch_bytes, 12345);
        }
    }
}

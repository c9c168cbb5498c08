//! The order-preserving parallel wrapper: same output as the sequential stage, in order, with
//! errors reported in order and counters registered.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use perfpipe_core::{
    Batch, Flow, Out, Parallel, Pipeline, Settings, Sink, Source, Span, Stage, StageError,
};

/// Batches of 8 one-byte records numbered 0, 1, 2…
struct Numbers(u32, u32);

impl Source for Numbers {
    fn produce(&mut self, out: &mut Out<'_>) -> Result<Flow, StageError> {
        if self.0 == self.1 {
            return Ok(Flow::Stop);
        }
        let mut b = out.take();
        for i in 0..8u32 {
            b.data.push((self.0 * 8 + i) as u8);
            b.spans.push(Span {
                start: i,
                len: 1,
                kind: 0,
                tag: 0,
            });
        }
        self.0 += 1;
        out.push(b);
        Ok(Flow::Continue)
    }
}

#[derive(Clone, Default)]
struct Collect(Arc<Mutex<Vec<u8>>>);

impl Sink for Collect {
    fn consume(&mut self, batch: &Batch) -> Result<Flow, StageError> {
        let mut v = self.0.lock().unwrap();
        batch.runs().for_each(|r| v.extend_from_slice(r));
        Ok(Flow::Continue)
    }
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

fn run(stage: Box<dyn Stage>, batches: u32) -> (Vec<u8>, perfpipe_core::Report) {
    let sink = Collect::default();
    let report = Pipeline::new(Settings::default())
        .source("numbers", Numbers(0, batches))
        .boxed_stage("heavy", stage)
        .sink("collect", sink.clone())
        .run();
    let got = sink.0.lock().unwrap().clone();
    (got, report)
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
    let (want, report) = run(Box::new(heavy(None, &flushes)), 200);
    assert!(report.is_ok());
    assert_eq!(want.len(), 1600);
    for workers in [1, 2, 3, 8] {
        let f = flushes.clone();
        let (got, report) = run(
            Box::new(Parallel::new(workers, move || heavy(None, &f))),
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
            Box::new(Parallel::new(3, move || heavy(Some((80, panic)), &f))),
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
    let (_, report) = run(Box::new(Parallel::new(2, || Sleepy)), 10);
    assert!(report.is_ok());
    // Sequentially 10 × 20 ms = 200 ms of sleeping; two workers need about half.
    assert!(
        report.stages[1].working < Duration::from_millis(180),
        "{:?}",
        report.stages[1]
    );
}

//! Runtime behaviour with toy stages: end of stream, errors, panics, early stop, metrics.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use perfpipe_core::harness::{framed, Collect, Feed};
use perfpipe_core::{
    Batch, End, Error, Flow, Out, Pipeline, Settings, Sink, Source, Stage, StageError,
};

/// `batches` batches of `per` one-byte records holding a running counter (mod 256), of kinds
/// 0, 1, 2, 0… in turn; made as the source asks for them.
fn counting(batches: u32, per: u32) -> Feed {
    let per = u64::from(per);
    Feed::new((0..u64::from(batches)).map(move |b| {
        let bytes: Vec<u8> = (b * per..(b + 1) * per).map(|i| i as u8).collect();
        let records: Vec<(&[u8], u32)> = (0..bytes.len())
            .map(|k| (&bytes[k..=k], ((b * per + k as u64) % 3) as u32))
            .collect();
        framed(&records)
    }))
}

/// A source that never ends by itself.
fn endless() -> Feed {
    Feed::new(std::iter::repeat_with(|| framed(&[(&[1], 0)])))
}

/// Passes batches through; fails, panics or stops after `after` batches.
struct Faulty {
    after: u32,
    mode: &'static str,
}
impl Stage for Faulty {
    fn process(&mut self, batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        if self.after == 0 {
            match self.mode {
                "error" => return Err("toy failure".into()),
                "panic" => panic!("toy panic"),
                "stop" => {
                    out.push(batch);
                    return Ok(Flow::Stop);
                }
                _ => unreachable!(),
            }
        }
        self.after -= 1;
        out.push(batch);
        Ok(Flow::Continue)
    }
}

/// Sleeps per batch: a deliberately slow stage.
struct Slow(Duration);
impl Stage for Slow {
    fn process(&mut self, batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        std::thread::sleep(self.0);
        out.push(batch);
        Ok(Flow::Continue)
    }
}

fn expected(batches: u32, per: u32) -> Vec<u8> {
    (0..u64::from(batches * per)).map(|i| i as u8).collect()
}

fn small() -> Settings {
    Settings {
        batch_bytes: 64,
        queue_capacity: 2,
        ..Settings::default()
    }
}

#[test]
fn end_of_stream_delivers_everything_in_order() {
    let sink = Collect::new();
    let report = Pipeline::new(small())
        .source("src", counting(100, 7))
        .stage("a", Slow(Duration::ZERO))
        .stage("b", Slow(Duration::ZERO))
        .sink("sink", sink.clone())
        .run();
    assert!(report.is_ok(), "{:?}", report.errors);
    assert_eq!(sink.bytes(), expected(100, 7));
    assert_eq!(report.ends, vec![End::Eof; 4]);
    for st in &report.stages[1..] {
        assert_eq!(st.input.records, 700, "{}", st.name);
        assert_eq!(st.input.batches, 100);
        assert_eq!(st.input.kinds, vec![(0, 234), (1, 233), (2, 233)]);
    }
    assert_eq!(report.stages[0].output.records, 700);
}

#[test]
fn stage_error_stops_pipeline_and_keeps_earlier_output() {
    let sink = Collect::new();
    let src = counting(u32::MAX, 4);
    let report = Pipeline::new(small())
        .source("src", src)
        .stage(
            "faulty",
            Faulty {
                after: 5,
                mode: "error",
            },
        )
        .sink("sink", sink.clone())
        .run();
    assert_eq!(report.errors.len(), 1);
    let err = &report.errors[0];
    assert_eq!(err.stage(), Some("faulty"));
    assert_eq!(err.to_string(), "faulty: toy failure");
    assert_eq!(sink.bytes(), expected(5, 4));
    assert_eq!(report.ends[1], End::Failed);
    assert_eq!(report.ends[2], End::Eof);
    assert!(matches!(
        report.ends[0],
        End::DownstreamClosed | End::Cancelled
    ));
}

#[test]
fn stage_panic_is_reported_with_its_name() {
    let sink = Collect::new();
    let report = Pipeline::new(small())
        .source("src", endless())
        .stage(
            "boom",
            Faulty {
                after: 3,
                mode: "panic",
            },
        )
        .sink("sink", sink.clone())
        .run();
    assert_eq!(report.errors.len(), 1);
    match &report.errors[0] {
        Error::Panic { stage, message } => {
            assert_eq!(stage, "boom");
            assert_eq!(message, "toy panic");
        }
        other => panic!("expected a panic error, got {other:?}"),
    }
    assert_eq!(sink.bytes().len(), 3);
}

#[test]
fn early_stop_flushes_and_ends_cleanly() {
    let sink = Collect::new();
    let report = Pipeline::new(small())
        .source("src", endless())
        .stage(
            "head",
            Faulty {
                after: 9,
                mode: "stop",
            },
        )
        .sink("sink", sink.clone())
        .run();
    assert!(report.is_ok(), "{:?}", report.errors);
    assert_eq!(sink.bytes().len(), 10);
    assert_eq!(report.ends[1], End::Stopped);
    assert_eq!(report.ends[2], End::Eof);
}

/// A sink that fails at once while the source would run forever: no deadlock, error kept.
#[test]
fn sink_error_stops_an_endless_source() {
    struct Broken;
    impl Sink for Broken {
        fn consume(&mut self, _: &Batch) -> Result<Flow, StageError> {
            Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe).into())
        }
    }
    let started = Instant::now();
    let report = Pipeline::new(small())
        .source("src", endless())
        .stage("mid", Slow(Duration::ZERO))
        .sink("sink", Broken)
        .run();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(report.errors.len(), 1);
    assert_eq!(report.errors[0].stage(), Some("sink"));
    assert_eq!(report.ends[2], End::Failed);
    assert_eq!(report.ends[1], End::DownstreamClosed);
}

/// A source blocked forever is left behind once the rest of the pipeline has ended.
#[test]
fn blocked_source_is_detached() {
    /// Emits one batch, then blocks forever in its next call, like a read on a silent pipe.
    struct Blocked(crossbeam_channel::Receiver<()>, bool, Arc<AtomicU64>);
    impl Source for Blocked {
        fn produce(&mut self, out: &mut Out<'_>) -> Result<Flow, StageError> {
            if self.1 {
                self.2.store(1, Ordering::SeqCst);
                // Nobody ever sends: this blocks for the life of the test process.
                let _ = self.0.recv();
            }
            self.1 = true;
            out.push(framed(&[(&[0], 0)]));
            Ok(Flow::Continue)
        }
    }
    /// Stops once the source is inside its blocking call, so that it cannot see the cancel flag.
    struct StopWhenBlocked(Arc<AtomicU64>);
    impl Stage for StopWhenBlocked {
        fn process(&mut self, batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
            while self.0.load(Ordering::SeqCst) == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            out.push(batch);
            Ok(Flow::Stop)
        }
    }
    let (tx, rx) = crossbeam_channel::bounded::<()>(0);
    std::mem::forget(tx);
    let blocking = Arc::new(AtomicU64::new(0));
    let report = Pipeline::new(small())
        .source("src", Blocked(rx, false, blocking.clone()))
        .stage("head", StopWhenBlocked(blocking))
        .sink("sink", Collect::new())
        .run();
    assert!(report.is_ok());
    assert_eq!(report.ends[0], End::Detached);
}

/// The runner's time split adds up to each stage's thread time and shows the slow stage working.
#[test]
fn slow_stage_is_mostly_working_and_its_neighbours_wait() {
    let report = Pipeline::new(small())
        .source("src", counting(40, 1))
        .stage("slow", Slow(Duration::from_millis(5)))
        .sink("sink", Collect::new())
        .run();
    assert!(report.is_ok());
    let [src, slow, sink] = &report.stages[..] else {
        panic!()
    };
    assert!(slow.working >= Duration::from_millis(200), "{slow:?}");
    assert!(slow.working > slow.starved + slow.blocked, "{slow:?}");
    assert!(src.blocked > src.working, "{src:?}");
    assert!(sink.starved > sink.working, "{sink:?}");
    match perfpipe_core::verdict(&report.stages) {
        perfpipe_core::Verdict::Stage { name, working } => {
            assert_eq!(name, "slow");
            assert!(working > 80.0, "{working}");
        }
        other => panic!("expected the slow stage, got {other:?}"),
    }
    let table = perfpipe_core::render_table(&report, &|k| format!("kind{k}"));
    assert!(table.contains("bottleneck: slow ("), "{table}");
    for st in &report.stages {
        let (total, life) = (st.total(), st.lifetime);
        assert!(
            total <= report.wall,
            "{}: {total:?} > {:?}",
            st.name,
            report.wall
        );
        // The split accounts for the whole life of the thread, but for its first and last
        // instants (thread start, the final report).
        assert!(total <= life, "{}: {total:?} > lifetime {life:?}", st.name);
        assert!(
            life - total < Duration::from_millis(50),
            "{}: split {total:?} vs lifetime {life:?}",
            st.name
        );
    }
}

#[test]
fn incomplete_pipeline_is_an_error() {
    let report = Pipeline::new(small()).sink("sink", Collect::new()).run();
    assert!(matches!(report.errors[..], [Error::Incomplete]));
}

/// A source that sends one batch, then stays quiet for a while before it ends.
struct QuietAfterOne(u8);
impl Source for QuietAfterOne {
    fn produce(&mut self, out: &mut Out<'_>) -> Result<Flow, StageError> {
        self.0 += 1;
        match self.0 {
            1 => {
                out.push(framed(&[(b"a", 0)]));
                Ok(Flow::Continue)
            }
            2 => {
                std::thread::sleep(Duration::from_millis(300));
                Ok(Flow::Continue)
            }
            _ => Ok(Flow::Stop),
        }
    }
}

/// Emits one `t` per tick, at most three.
struct Ticking(u8);
impl Stage for Ticking {
    fn process(&mut self, batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        out.push(batch);
        Ok(Flow::Continue)
    }
    fn tick_interval(&self) -> Option<Duration> {
        Some(Duration::from_millis(20))
    }
    fn tick(&mut self, out: &mut Out<'_>) -> Result<Flow, StageError> {
        if self.0 < 3 {
            self.0 += 1;
            out.push(framed(&[(b"t", 0)]));
        }
        Ok(Flow::Continue)
    }
}

#[test]
fn a_stage_ticks_while_its_input_is_quiet() {
    let got = Collect::new();
    let report = Pipeline::new(small())
        .source("quiet", QuietAfterOne(0))
        .stage("ticking", Ticking(0))
        .sink("collect", got.clone())
        .run();
    assert!(report.is_ok(), "{:?}", report.errors);
    // The batch, then three ticks during the 300 ms of quiet; input counts only the real batch.
    assert_eq!(got.bytes(), b"attt");
    assert_eq!(report.stages[1].input.batches, 1);
    assert_eq!(report.stages[1].output.batches, 4);
}

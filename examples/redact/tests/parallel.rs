//! `Parallel` around `redact` gives byte-identical output to `redact` alone, on every recording
//! in the tests (tests/fixtures/*.pipe.data).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use perfpipe_core::{Batch, Flow, Parallel, Pipeline, Settings, Sink, Stage, StageError};
use perfpipe_stages::decode::DecodeConfig;
use perfpipe_stages::read::ReadConfig;

#[derive(Clone, Default)]
struct Collect(Arc<Mutex<Vec<u8>>>);

impl Sink for Collect {
    fn consume(&mut self, batch: &Batch) -> Result<Flow, StageError> {
        let mut v = self.0.lock().unwrap();
        batch.runs().for_each(|r| v.extend_from_slice(r));
        Ok(Flow::Continue)
    }
}

const KEY: Option<&str> = Some("key=00112233445566778899aabbccddeeff");

fn run(path: &Path, stage: Box<dyn Stage>) -> Vec<u8> {
    let sink = Collect::default();
    let read = ReadConfig {
        path: Some(path.to_path_buf()),
        pipe_buffer: 0,
    }
    .build()
    .unwrap();
    // Small batches, so every fixture spans many and the workers really interleave.
    let settings = Settings {
        batch_bytes: 8 * 1024,
        ..Settings::default()
    };
    let report = Pipeline::new(settings)
        .source("read", read)
        .stage("decode", DecodeConfig::default().build())
        .boxed_stage("redact", stage)
        .sink("collect", sink.clone())
        .run();
    assert!(report.is_ok(), "{:?}", report.errors);
    let out = sink.0.lock().unwrap().clone();
    out
}

#[test]
fn parallel_redact_is_byte_identical_on_every_fixture() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let mut fixtures: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".pipe.data"))
        .collect();
    fixtures.sort();
    assert!(fixtures.len() >= 10);
    for path in &fixtures {
        let seq = run(path, Box::new(perfpipe_example_redact::build(KEY).unwrap()));
        for workers in [2, 3] {
            let par = run(
                path,
                Box::new(Parallel::new(workers, || {
                    perfpipe_example_redact::build(KEY).unwrap()
                })),
            );
            assert!(par == seq, "{}: {workers} workers differ", path.display());
        }
        assert!(seq.len() > 1000);
    }
}

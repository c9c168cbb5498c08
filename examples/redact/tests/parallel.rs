//! `redact` as a parallel stage gives byte-identical output to `redact` alone, on every recording
//! in the tests (tests/fixtures/*.pipe.data).

use std::path::{Path, PathBuf};

use perfpipe_core::harness::Collect;
use perfpipe_core::{Pipeline, Settings};
use perfpipe_stream::decode::DecodeConfig;
use perfpipe_stream::read::ReadConfig;

const KEY: Option<&str> = Some("key=00112233445566778899aabbccddeeff");

/// `path` through decode and redact, sequential (`workers` 0) or on that many workers.
fn run(path: &Path, workers: usize) -> Vec<u8> {
    let sink = Collect::new();
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
    let pipeline = Pipeline::new(settings)
        .source("read", read)
        .stage("decode", DecodeConfig::default().build());
    let redact = || perfpipe_example_redact::build(KEY).unwrap();
    let pipeline = match workers {
        0 => pipeline.stage("redact", redact()),
        n => pipeline.parallel_stage("redact", n, redact),
    };
    let report = pipeline.sink("collect", sink.clone()).run();
    assert!(report.is_ok(), "{:?}", report.errors);
    sink.bytes()
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
        let seq = run(path, 0);
        for workers in [2, 3] {
            let par = run(path, workers);
            assert!(par == seq, "{}: {workers} workers differ", path.display());
        }
        assert!(seq.len() > 1000);
    }
}

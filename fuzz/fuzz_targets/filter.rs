//! Filter expressions: the input is `EXPR\0STREAM`. The expression is parsed (errors must render);
//! one that parses is compiled and evaluated over STREAM (decoded) or, if STREAM is empty, over a
//! fixed fixture (its first 400 records: two events, mmaps, comms and samples). Never panics; the
//! filter keeps a subset of the records, in order.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use perfpipe_core::harness;
use perfpipe_fuzz::{decode, written};
use perfpipe_stream::filter::FilterConfig;

static FIXTURE: &[u8] = include_bytes!("../../tests/fixtures/two-events.pipe.data");

/// The fixture up to the end of its 400th record: a whole stream, small enough to filter quickly.
fn fixture() -> &'static [u8] {
    static HEAD: OnceLock<Vec<u8>> = OnceLock::new();
    HEAD.get_or_init(|| {
        let (batches, err) = decode(FIXTURE, 0);
        assert!(err.is_none(), "the fixture decodes");
        let spans = batches
            .iter()
            .flat_map(|b| b.spans.iter().map(move |s| b.bytes(s)));
        spans.take(400).flatten().copied().collect()
    })
}

fuzz_target!(|data: &[u8]| {
    let (expr, stream) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(expr) = std::str::from_utf8(expr) else {
        return;
    };
    let config = match FilterConfig::parse(expr) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let stream = if stream.is_empty() { fixture() } else { stream };
    let (batches, _) = decode(stream, stream.len() as u64);
    let input = written(&batches);
    let mut config = config;
    config.parallel_min = usize::MAX; // rayon adds nothing to find here, and threads slow the fuzzer
    let mut stage = config.build();
    if let Ok(out) = harness::run_stage(&mut stage, batches) {
        // What the filter keeps is a subsequence of what it got.
        let kept = written(&out);
        assert!(kept.len() <= input.len());
    }
});

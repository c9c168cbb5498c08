//! Chunking: the decoder gives the same records whatever the read sizes, whichever records a read
//! boundary splits, with and without the reader's headroom (both join paths).

use std::sync::Arc;

use perfpipe_core::harness::{raw_batches, Collect, Feed};
use perfpipe_core::{Pipeline, Settings};
use perfpipe_stream::decode::DecodeConfig;
use perfpipe_stream::read::HEADROOM;
use proptest::prelude::*;

use crate::util::fixture_bytes;

/// Output bytes, and (length, kind) of each record.
type Decoded = (Vec<u8>, Vec<(u64, u32)>);

/// Decodes `input` read in `sizes` chunks (cycled, as `read` would emit them); returns the output
/// bytes and (len, kind) of each record.
fn decode(input: &Arc<Vec<u8>>, sizes: Vec<usize>, headroom: usize) -> Decoded {
    let sink = Collect::new();
    let report = Pipeline::new(Settings {
        batch_bytes: 4096,
        queue_capacity: 2,
        ..Settings::default()
    })
    .source("chunks", Feed::new(raw_batches(input, &sizes, headroom)))
    .stage("decode", DecodeConfig::default().build())
    .sink("collect", sink.clone())
    .run();
    assert!(report.is_ok(), "{:?}", report.errors);
    let got = sink.collected();
    let records = got
        .spans
        .iter()
        .map(|s| (u64::from(s.len), s.kind))
        .collect();
    (got.bytes, records)
}

fn reference(input: &Arc<Vec<u8>>) -> Decoded {
    decode(input, vec![input.len()], HEADROOM)
}

/// A fixture with unaligned FEATURE records, a tracing blob outside header.size and
/// compressed records.
fn inputs() -> Vec<Arc<Vec<u8>>> {
    [
        "tracepoint.pipe.data",
        "compressed.pipe.data",
        "two-events.pipe.data",
    ]
    .iter()
    .map(|n| {
        let mut v = fixture_bytes(n);
        v.truncate(24 * 1024);
        // Cut at the last record boundary so the prefix is a valid stream.
        let (_, recs) = decode_prefix(&v);
        v.truncate(recs);
        Arc::new(v)
    })
    .collect()
}

/// Framing by hand (header sizes, plus the tracing payload) to find a valid prefix length.
fn decode_prefix(v: &[u8]) -> ((), usize) {
    let mut pos = 16;
    loop {
        if pos + 8 > v.len() {
            return ((), pos);
        }
        let ty = u32::from_le_bytes(v[pos..pos + 4].try_into().unwrap());
        let size = u16::from_le_bytes(v[pos + 6..pos + 8].try_into().unwrap()) as usize;
        let extra = if ty == 66 {
            u32::from_le_bytes(v[pos + 8..pos + 12].try_into().unwrap()) as usize
        } else {
            0
        };
        if pos + size + extra > v.len() {
            return ((), pos);
        }
        pos += size + extra;
    }
}

pipetest!(
    /// Every read size from 1 byte up to several records gives the same output.
    every_read_size_gives_the_same_records, |_dir| {
    for input in inputs() {
        let want = reference(&input);
        assert_eq!(want.0, *input);
        for size in (1..=64).chain((65..=1200).step_by(7)) {
            for headroom in [0, HEADROOM] {
                let got = decode(&input, vec![size], headroom);
                assert!(got == want, "read size {size}, headroom {headroom}");
            }
        }
    }
});

pipetest!(
    /// Splitting the stream in two at every byte position gives the same records.
    every_split_point_gives_the_same_records, |_dir| {
    let input = inputs().remove(0);
    let want = reference(&input);
    for cut in 1..input.len() {
        let got = decode(&input, vec![cut, input.len()], HEADROOM);
        assert!(got == want, "split at {cut}");
    }
});

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Arbitrary sequences of read sizes give the same records.
    fn random_read_sizes_cases(sizes in proptest::collection::vec(1usize..5000, 1..40), headroom in prop::bool::ANY) {
        for input in inputs() {
            let want = reference(&input);
            let got = decode(&input, sizes.clone(), if headroom { HEADROOM } else { 0 });
            prop_assert!(got == want);
        }
    }
}

pipetest!(random_read_sizes, |_dir| {
    random_read_sizes_cases();
});

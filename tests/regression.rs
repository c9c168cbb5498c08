//! Fuzz crashes turned into tests (issue 7). Each test is named `r7_<what>`, says what the fuzzer
//! found, and replays the input the way the fuzz target did (`fuzz/src/lib.rs`: `decode` fed in
//! chunks, with or without `read`'s headroom), so it runs in CI without nightly.
//!
//! See: issue 7 ("Reliability: fuzzed decoder …").

use perfpipe_core::{harness, Batch};
use perfpipe_stages::decode::DecodeConfig;
use perfpipe_stages::read::HEADROOM;

/// Raw batches of `data` cut at `cuts`, each with `headroom` bytes before its payload.
fn batches(data: &[u8], cuts: &[usize], headroom: usize) -> Vec<Batch> {
    let mut out = Vec::new();
    let mut from = 0;
    for &to in cuts.iter().chain([&data.len()]) {
        let mut b = Batch::default();
        b.data.resize(headroom, 0);
        b.data.extend_from_slice(&data[from..to]);
        b.start = headroom;
        b.stream_offset = from as u64;
        out.push(b);
        from = to;
    }
    out
}

/// Decodes `data` cut at `cuts`; the error message, if any.
fn decode_error(data: &[u8], cuts: &[usize], headroom: usize) -> Option<String> {
    let mut stage = DecodeConfig::default().build();
    harness::run_stage(&mut stage, batches(data, cuts, headroom))
        .err()
        .map(|e| e.to_string())
}

/// Found by `fuzz/fuzz_targets/decode.rs` (14 artifacts, e.g. crash-2375c2f4…: 13 bytes after the
/// 8-byte seed): an input shorter than the 16-byte pipe header with a bad magic, split so that the
/// first batch held fewer than 8 bytes and the next had no headroom, was reported as "truncated
/// inside a record header" instead of "not a perf pipe stream": `decode` accumulated the header
/// without looking at the magic, and called the pipe header a record header. Fixed in
/// `Decode::flush` (check the magic of a partial header) and `Error::Truncated`'s text.
#[test]
fn r7_short_bad_magic_split_without_headroom() {
    let input = b"\x0b\x0b\x00\xaai\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x12";
    let whole = decode_error(input, &[], HEADROOM).expect("an error");
    assert!(
        whole.starts_with("offset 0: not a perf pipe stream: magic"),
        "{whole}"
    );
    for headroom in [0, HEADROOM] {
        for cut in 1..input.len() {
            let split = decode_error(input, &[cut], headroom).expect("an error");
            assert_eq!(split, whole, "cut at {cut}, headroom {headroom}");
        }
    }
}

/// The same fix: a good magic whose header is cut short names the pipe header, in every split.
#[test]
fn r7_short_pipe_header_is_named() {
    let input = b"PERFILE2\x10\x00";
    for headroom in [0, HEADROOM] {
        for cut in 0..input.len() {
            let cuts: &[usize] = if cut == 0 { &[] } else { &[cut] };
            let e = decode_error(input, cuts, headroom).expect("an error");
            assert_eq!(
                e, "offset 0: input truncated inside the pipe header: 10 of 16 bytes present",
                "cut at {cut}, headroom {headroom}"
            );
        }
    }
}

//! Malformed input: a clear error naming the byte offset (and record type where known), a non-zero
//! exit, no panic, no hang, and every record before the bad one still written.

use std::process::Output;

use crate::util::*;

/// A valid stream: pipe header, one FINISHED_ROUND (8 bytes) and one FINISHED_INIT (8 bytes).
fn valid() -> Vec<u8> {
    let mut v = b"PERFILE2".to_vec();
    v.extend_from_slice(&16u64.to_le_bytes());
    v.extend_from_slice(&raw_record(68, 8));
    v.extend_from_slice(&raw_record(82, 8));
    v
}

/// Asserts a failed run: status 1, stderr mentions `needle`, no panic, and the output is exactly
/// the first `kept` bytes of the input.
fn assert_fails(out: &Output, input: &[u8], kept: usize, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert!(err.contains(needle), "expected {needle:?} in: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.starts_with("perfpipe: decode: "), "{err}");
    eqnice!(input[..kept].to_vec(), out.stdout);
}

pipetest!(empty_input, |_dir| {
    let out = perfpipe(&[], b"");
    assert_fails(&out, b"", 0, "empty input");
});

pipetest!(wrong_magic, |_dir| {
    let mut v = valid();
    v[..8].copy_from_slice(b"NOTPERF!");
    assert_fails(
        &perfpipe(&[], &v),
        &v,
        0,
        "offset 0: not a perf pipe stream",
    );
});

pipetest!(file_mode_header_gets_a_conversion_hint, |_dir| {
    let mut v = b"PERFILE2".to_vec();
    v.extend_from_slice(&104u64.to_le_bytes());
    v.resize(200, 0);
    assert_fails(&perfpipe(&[], &v), &v, 0, "perf inject -i FILE -o -");
});

pipetest!(bad_header_size, |_dir| {
    let mut v = valid();
    v[8..16].copy_from_slice(&24u64.to_le_bytes());
    assert_fails(
        &perfpipe(&[], &v),
        &v,
        0,
        "offset 8: pipe header size is 24",
    );
});

pipetest!(truncated_header, |_dir| {
    let v = valid();
    assert_fails(&perfpipe(&[], &v[..11]), &v, 0, "offset 0: input truncated");
});

pipetest!(truncated_record, |_dir| {
    let mut v = valid();
    v.extend_from_slice(&raw_record(9, 48)[..30]);
    let out = perfpipe(&[], &v);
    assert_fails(
        &out,
        &v,
        32,
        "offset 32: input truncated inside a SAMPLE record: 30 of 48 bytes",
    );
});

pipetest!(truncated_record_header, |_dir| {
    let mut v = valid();
    v.extend_from_slice(&[9, 0, 0]);
    assert_fails(
        &perfpipe(&[], &v),
        &v,
        32,
        "offset 32: input truncated inside a record header",
    );
});

pipetest!(size_smaller_than_header, |_dir| {
    for size in [0u16, 4, 7] {
        let mut v = valid();
        v.extend_from_slice(&raw_record(9, 8)[..6]);
        v.extend_from_slice(&size.to_le_bytes());
        v.extend_from_slice(&[0; 32]);
        let out = perfpipe(&[], &v);
        assert_fails(
            &out,
            &v,
            32,
            &format!("offset 32: SAMPLE record has size {size}, smaller than its 8-byte header"),
        );
    }
});

pipetest!(absurd_tracing_data_size, |_dir| {
    let mut v = valid();
    let mut r = raw_record(66, 16);
    r[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    v.extend_from_slice(&r);
    let out = perfpipe(&[], &v);
    assert_fails(
        &out,
        &v,
        32,
        "offset 32: TRACING_DATA payload of 4294967295 bytes exceeds",
    );
});

pipetest!(tracing_data_beyond_the_stream, |_dir| {
    let mut v = valid();
    let mut r = raw_record(66, 16);
    r[8..12].copy_from_slice(&4096u32.to_le_bytes());
    v.extend_from_slice(&r);
    v.extend_from_slice(&[0; 100]);
    let out = perfpipe(&[], &v);
    assert_fails(
        &out,
        &v,
        32,
        "offset 32: input truncated inside a TRACING_DATA record: 116 of 4112 bytes",
    );
});

pipetest!(bogus_attr_size, |_dir| {
    let mut v = valid();
    let mut r = raw_record(64, 80);
    r[12..16].copy_from_slice(&13u32.to_le_bytes()); // attr.size
    v.extend_from_slice(&r);
    let out = perfpipe(&[], &v);
    assert_fails(&out, &v, 32, "offset 32: ATTR record: attr.size 13");
});

pipetest!(invalid_record_type, |_dir| {
    let mut v = valid();
    v.extend_from_slice(&raw_record(0x1234_5678, 16));
    let out = perfpipe(&[], &v);
    assert_fails(&out, &v, 32, "offset 32: invalid record type 305419896");
});

pipetest!(
    /// Random bytes after a valid start: an error (never a panic or a hang), and the valid records
    /// before the garbage are written.
    random_bytes_after_a_valid_start, |_dir| {
    let base = fixture_bytes("cpu-clock.pipe.data");
    // A prefix of whole records: the preamble up to and including the first FEATURE records.
    let keep = 16 + 8 * 1024;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..20 {
        let mut v = base[..keep.min(base.len())].to_vec();
        for _ in 0..(64 + round * 97) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            v.push(seed as u8);
        }
        let out = perfpipe(&[], &v);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "round {round}: {err}");
        assert!(err.contains("offset "), "round {round}: {err}");
        assert!(!err.contains("panicked"), "round {round}: {err}");
        // What was written is a prefix of the input made of whole records.
        assert!(v.starts_with(&out.stdout), "round {round}");
        assert!(out.stdout.len() >= 16, "round {round}");
    }
});

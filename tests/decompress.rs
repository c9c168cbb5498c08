//! `--decompress`: COMPRESSED records (`perf record -z`) replaced by the records they hold, read by
//! every reader (perf 6.1 and 6.12) as the compressed input, with records straddling two
//! COMPRESSED records, and clear errors on corrupt data.

use crate::readers::{self, Input};
use crate::util::{count_samples, fixture_bytes, perf_record, perfpipe, readers, workload};

/// Top-level records of a little-endian pipe stream without payloads outside `header.size`:
/// `(offset, type, bytes)`.
fn records(stream: &[u8]) -> Vec<(usize, u32, &[u8])> {
    let mut v = Vec::new();
    let mut pos = 16;
    while pos + 8 <= stream.len() {
        let t = u32::from_le_bytes(stream[pos..pos + 4].try_into().unwrap());
        let size = usize::from(u16::from_le_bytes(
            stream[pos + 6..pos + 8].try_into().unwrap(),
        ));
        v.push((pos, t, &stream[pos..pos + size]));
        pos += size;
    }
    assert_eq!(pos, stream.len(), "stream ends on a record boundary");
    v
}

/// A COMPRESSED record (type 81, size not padded) around `data`.
fn compressed(data: &[u8]) -> Vec<u8> {
    let size = u16::try_from(8 + data.len()).expect("COMPRESSED record fits");
    let mut r = 81u32.to_le_bytes().to_vec();
    r.extend_from_slice(&0u16.to_le_bytes());
    r.extend_from_slice(&size.to_le_bytes());
    r.extend_from_slice(data);
    r
}

/// A COMPRESSED2 record (type 83: `u64 data_size`, data, padded to 8) around `data`.
fn compressed2(data: &[u8]) -> Vec<u8> {
    let len = (16 + data.len()).next_multiple_of(8);
    let mut r = 83u32.to_le_bytes().to_vec();
    r.extend_from_slice(&0u16.to_le_bytes());
    r.extend_from_slice(&u16::try_from(len).unwrap().to_le_bytes());
    r.extend_from_slice(&(data.len() as u64).to_le_bytes());
    r.extend_from_slice(data);
    r.resize(len, 0);
    r
}

fn zstd(data: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(data, 3).expect("zstd compress")
}

/// `cpu-clock.pipe.data` re-packed as `perf record -z` would: the preamble (through FINISHED_INIT)
/// as is, the rest as zstd frames in COMPRESSED records built by `wrap`, cut at `cut` bytes of the
/// decompressed stream, where `cut` falls inside a record. Returns (original, compressed stream).
fn repacked(cut_in_record: usize, wrap: fn(&[u8]) -> Vec<u8>) -> (Vec<u8>, Vec<u8>) {
    let original = fixture_bytes("cpu-clock.pipe.data");
    let recs = records(&original);
    let init = recs.iter().position(|r| r.1 == 82).expect("FINISHED_INIT");
    let data_at = recs[init].0 + recs[init].2.len();
    let body = &original[data_at..];
    // Cut inside the record at index `cut_in_record` of the data part, 5 bytes into it.
    let cut = recs[init + 1 + cut_in_record].0 - data_at + 5;
    let mut stream = original[..data_at].to_vec();
    // Each COMPRESSED record holds < 64 KiB, so split each side into chunks; the first cut point is
    // exactly `cut`, which is inside a record.
    for part in [&body[..cut], &body[cut..]] {
        for chunk in part.chunks(20_000) {
            stream.extend_from_slice(&wrap(&zstd(chunk)));
        }
    }
    (original, stream)
}

pipetest!(needs(perf, perf612, trixie) fixture_gives_the_samples_perf_script_sees, |_dir| {
    let input = fixture_bytes("compressed.pipe.data");
    let out = perfpipe(&["--decompress", "--stats"], &input);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("compressed_records = 2"), "{stderr}");
    let recs = records(&out.stdout);
    assert!(
        !recs.iter().any(|r| r.1 == 81),
        "a COMPRESSED record is left"
    );
    assert_eq!(recs.iter().filter(|r| r.1 == 9).count(), 3509);
    // perf 6.1 script decompresses the original itself; the output with feature 27
    // (HEADER_COMPRESSED) kept must read the same, and `perf report` must accept it.
    decompressed_reads_like_the_input(&input, &out.stdout, 3509);
});

/// Every reader (perf 6.1 and 6.12) prints for the decompressed stream what it prints for the
/// compressed input, and `perf report --stats` (which reads no `-z` pipe) counts `n` samples in
/// it, or when `n` is 0 as many as `perf script` printed.
fn decompressed_reads_like_the_input(input: &[u8], out: &[u8], n: usize) {
    let script = &["script", "-F", "comm,pid,tid,time,ip,sym,dso,event"];
    for perf in readers() {
        let (input, out) = (Input::Stream(input), Input::Stream(out));
        let got = readers::same_script(&perf, script, input, out);
        let got = count_samples(&got.unwrap_or_else(|e| panic!("{e}")));
        assert!(
            got > 100 && (n == 0 || got == n),
            "{}: {got} samples",
            perf.name
        );
        let stats = readers::samples(&perf, out).unwrap_or_else(|e| panic!("{e}"));
        eqnice!(got as u64, stats);
        readers::read(&perf, &["report", "--stdio"], out).unwrap_or_else(|e| panic!("{e}"));
    }
}

pipetest!(needs(perf, perf612, trixie) live_perf_record_z, |_dir| {
    let w = workload();
    let input = perf_record(
        &["-e", "cpu-clock", "-c", "100000", "-z"],
        &[&w, "multi", "2"],
    );
    assert!(
        records(&input).iter().any(|r| r.1 == 81),
        "perf record -z wrote no COMPRESSED"
    );
    let out = perfpipe(&["--decompress"], &input);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    decompressed_reads_like_the_input(&input, &out.stdout, 0);
});

pipetest!(record_straddling_two_compressed_records, |_dir| {
    for wrap in [compressed as fn(&[u8]) -> Vec<u8>, compressed2] {
        for cut_in in [0, 7, 300] {
            let (original, stream) = repacked(cut_in, wrap);
            for batch in ["4096", "64K", "256K"] {
                let out = perfpipe(&["--decompress", "--batch-size", batch], &stream);
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                // The preamble then the decompressed records, in order: the original, byte for byte.
                assert!(
                    out.stdout == original,
                    "cut {cut_in}, batch {batch}: output differs"
                );
            }
        }
    }
});

pipetest!(one_frame_split_at_every_kind_of_point, |_dir| {
    // One zstd frame cut at arbitrary compressed bytes, as a continuous stream: one context.
    let original = fixture_bytes("cpu-clock.pipe.data");
    let recs = records(&original);
    let init = recs.iter().position(|r| r.1 == 82).expect("FINISHED_INIT");
    let data_at = recs[init].0 + recs[init].2.len();
    let z = zstd(&original[data_at..]);
    for piece in [1, 777, 30_000] {
        let mut stream = original[..data_at].to_vec();
        for c in z.chunks(piece.min(60_000)) {
            stream.extend_from_slice(&compressed(c));
        }
        let out = perfpipe(&["--decompress"], &stream);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.stdout == original, "piece {piece}: output differs");
    }
});

pipetest!(corrupt_zstd_names_the_offset, |_dir| {
    let mut input = fixture_bytes("compressed.pipe.data");
    let (at, _, rec) = *records(&input).iter().find(|r| r.1 == 81).unwrap();
    let len = rec.len();
    for b in &mut input[at + 8 + 40..at + len - 40] {
        *b ^= 0x5a;
    }
    let out = perfpipe(&["--decompress"], &input);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "offset {at}: COMPRESSED record: corrupt zstd data"
        )),
        "{stderr}"
    );
    // Everything before the bad record still went out.
    assert!(out.stdout.len() >= at, "{} < {at}", out.stdout.len());
});

pipetest!(compressed_stream_ending_inside_a_record, |_dir| {
    let original = fixture_bytes("cpu-clock.pipe.data");
    let recs = records(&original);
    let init = recs.iter().position(|r| r.1 == 82).expect("FINISHED_INIT");
    let data_at = recs[init].0 + recs[init].2.len();
    // The first three data records and 11 bytes of the fourth, in one COMPRESSED record.
    let end = recs[init + 4].0 + 11;
    let mut stream = original[..data_at].to_vec();
    let at = stream.len();
    stream.extend_from_slice(&compressed(&zstd(&original[data_at..end])));
    let out = perfpipe(&["--decompress"], &stream);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "offset {at}: COMPRESSED record: the compressed stream ends inside a"
        )),
        "{stderr}"
    );
    assert!(
        out.stdout == original[..recs[init + 4].0],
        "the complete records went out"
    );
});

pipetest!(garbage_compressed2_size_is_an_error, |_dir| {
    let original = fixture_bytes("cpu-clock.pipe.data");
    let mut stream = original[..16].to_vec();
    let at = stream.len();
    let mut r = compressed2(b"not zstd");
    r[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    stream.extend_from_slice(&r);
    let out = perfpipe(&["--decompress"], &stream);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("offset {at}: COMPRESSED2 record")),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
});

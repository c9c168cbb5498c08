//! Shared driving code for the fuzz targets: feed bytes to `decode` in chunks, read every field of
//! every record. The same logic, minus libFuzzer, backs `tests/regression.rs`.

use perfpipe_core::{harness, Batch, StageError};
use perfpipe_stream::decode::DecodeConfig;
use perfpipe_stream::format::StreamInfo;
use perfpipe_stream::read::HEADROOM;

/// Splits `data` into raw batches as `read` makes them. `seed` picks chunk sizes (1 byte to a few
/// KiB, or the whole input) and each batch's headroom: none (which forces `decode`'s side buffer
/// for a record split across batches), a few bytes (the carried part fits or not), or room for any
/// record of `data`. `decode` only asks whether the carried bytes fit in the headroom, so the last
/// choice behaves as `read`'s [`HEADROOM`] does, without zeroing 64 KiB per batch (which took
/// most of a fuzz execution's time).
pub fn chunks(data: &[u8], seed: u64) -> Vec<Batch> {
    let mut s = seed | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut out = Vec::new();
    let mut off = 0usize;
    while off < data.len() {
        let r = next();
        // At most 64 batches (each may carry 64 KiB of headroom): the last takes the rest.
        let n = match if out.len() == 63 { 0 } else { r % 4 } {
            0 => data.len() - off,
            1 => 1 + (r >> 8) as usize % 16,
            _ => 1 + (r >> 8) as usize % 4096,
        }
        .min(data.len() - off);
        let headroom = match (r >> 40) % 3 {
            0 => 0,
            1 => (r >> 48) as usize % 64,
            _ => data.len().min(HEADROOM),
        };
        let mut b = Batch::default();
        b.data.resize(headroom, 0);
        b.data.extend_from_slice(&data[off..off + n]);
        b.start = headroom;
        b.stream_offset = off as u64;
        out.push(b);
        off += n;
    }
    out
}

/// Decodes `data` in the chunks `seed` picks. Returns the batches emitted and the error, if any.
pub fn decode(data: &[u8], seed: u64) -> (Vec<Batch>, Option<StageError>) {
    let mut stage = DecodeConfig::default().build();
    match harness::run_stage(&mut stage, chunks(data, seed)) {
        Ok(b) => (b, None),
        // run_stage loses the batches emitted before an error; decode once more up to it is not
        // possible without them, so report the error alone.
        Err(e) => (Vec::new(), Some(e)),
    }
}

/// The bytes of every span of `batches`, in order: what `write` would write.
pub fn written(batches: &[Batch]) -> Vec<u8> {
    let mut v = Vec::new();
    for b in batches {
        for s in &b.spans {
            v.extend_from_slice(b.bytes(s));
        }
    }
    v
}

/// Reads every field of every record through the typed views; returns a checksum so the reads
/// cannot be optimised away.
pub fn read_all_fields(batches: &[Batch]) -> u64 {
    let mut acc = 0u64;
    let mut mix = |v: Option<u64>| acc = acc.rotate_left(5) ^ v.unwrap_or(0x9e37);
    for b in batches {
        let Some(info) = StreamInfo::of(b) else {
            continue;
        };
        for span in &b.spans {
            let rec = info.record(b, span);
            mix(Some(u64::from(rec.header().size)));
            mix(Some(u64::from(rec.cpumode())));
            mix(Some(rec.sized().len() as u64));
            if let Some(s) = rec.sample() {
                mix(s.ip());
                mix(s.pid().map(u64::from));
                mix(s.tid().map(u64::from));
                mix(s.time());
                mix(s.addr());
                mix(s.id());
                mix(s.cpu().map(u64::from));
                mix(s.period());
                mix(Some(u64::from(s.cpumode())));
                if let Some(cc) = s.callchain() {
                    mix(Some(cc.len() as u64));
                    for (mode, ip) in cc.frames(s.cpumode()) {
                        mix(Some(u64::from(mode) ^ ip));
                    }
                    for ip in cc.entries() {
                        mix(Some(ip));
                    }
                }
            }
            if let Some(m) = rec.mmap() {
                mix(Some(m.addr ^ m.len ^ m.pgoff ^ u64::from(m.pid)));
                mix(Some(m.filename.len() as u64));
            }
            if let Some(c) = rec.comm() {
                mix(Some(u64::from(c.pid) ^ c.comm.len() as u64));
            }
            if let Some(t) = rec.task() {
                mix(Some(t.time ^ u64::from(t.ppid)));
            }
            if let Some(id) = rec.sample_id() {
                mix(id.time);
                mix(id.id);
                mix(id.pid.map(u64::from));
                mix(id.cpu.map(u64::from));
            }
            mix(Some(u64::from(info.attr_index(span.kind, rec.bytes))));
        }
    }
    acc
}

/// A seed for chunking from the first 8 bytes of fuzz input, and the rest.
pub fn split_seed(data: &[u8]) -> (u64, &[u8]) {
    if data.len() < 8 {
        return (0x5eed, data);
    }
    let (s, rest) = data.split_at(8);
    (u64::from_le_bytes(s.try_into().expect("8 bytes")), rest)
}

/// Checks the house rule for bad input: the error renders, and names the byte offset where the
/// input went wrong (`offset N: …`), unless the input was empty.
pub fn check_error(e: &dyn std::fmt::Display) {
    let msg = e.to_string();
    assert!(
        msg.starts_with("offset ") || msg.starts_with("empty input"),
        "an error that names no offset: {msg}"
    );
}

/// A scratch file in /dev/shm for this fuzzing process and `target` (`fuzz/run.sh` removes it at
/// the end), holding `data`: for parsers that read files (archives, ELF files by positioned
/// reads).
pub fn scratch(
    target: &str,
    data: &[u8],
) -> &'static (std::sync::Arc<std::fs::File>, std::path::PathBuf) {
    use std::os::unix::fs::FileExt as _;
    static SCRATCH: std::sync::OnceLock<(std::sync::Arc<std::fs::File>, std::path::PathBuf)> =
        std::sync::OnceLock::new();
    let s = SCRATCH.get_or_init(|| {
        let path = std::path::PathBuf::from(format!(
            "/dev/shm/perfpipe-fuzz-{target}-{}",
            std::process::id()
        ));
        let file = std::fs::File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .expect("scratch file in /dev/shm");
        (std::sync::Arc::new(file), path)
    });
    s.0.set_len(0).expect("truncate scratch");
    s.0.write_all_at(data, 0).expect("write scratch");
    s
}

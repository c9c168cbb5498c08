//! The file-mode reader on arbitrary bytes as a `perf.data` file: the header and feature table are
//! parsed as `-i FILE` does (`ReadFile::from_file`, which maps the file, so each input is written
//! to a scratch file in /dev/shm first), the pipe preamble is synthesized, and the preamble and the
//! data section, cut as `ReadFile` cuts it (file offsets), are decoded and every field of every
//! record is read. Never panics; an error names its offset; the header parsed from the map is the one
//! parsed from the bytes.
#![no_main]

use std::fs::File;
use std::os::unix::fs::FileExt as _;
use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use perfpipe_core::{harness, Batch};
use perfpipe_fuzz::{check_error, chunks, read_all_fields};
use perfpipe_stream::decode::DecodeConfig;
use perfpipe_stream::read::file::{FileHeader, ReadFile};

/// One scratch file per fuzzing process, rewritten for each input.
fn scratch() -> &'static (File, PathBuf) {
    static SCRATCH: OnceLock<(File, PathBuf)> = OnceLock::new();
    SCRATCH.get_or_init(|| {
        let path = PathBuf::from(format!(
            "/dev/shm/perfpipe-fuzz-read_file-{}",
            std::process::id()
        ));
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .expect("scratch file in /dev/shm");
        (file, path)
    })
}

fuzz_target!(|data: &[u8]| {
    let (file, path) = scratch();
    file.set_len(0).expect("truncate scratch");
    file.write_all_at(data, 0).expect("write scratch");
    let rf = match ReadFile::from_file(file, path) {
        Ok(rf) => rf,
        Err(e) => {
            check_error(&e);
            return;
        }
    };
    let header = rf.header().clone();
    assert_eq!(
        FileHeader::parse(data).as_ref().ok(),
        Some(&header),
        "the map and the bytes parse alike"
    );
    let preamble = match rf.preamble() {
        Ok(p) => p,
        Err(e) => {
            check_error(&e);
            return;
        }
    };
    drop(rf);
    let mut batches = vec![Batch {
        data: preamble,
        ..Batch::default()
    }];
    let (from, to) = (
        header.data.offset as usize,
        (header.data.offset + header.data.size) as usize,
    );
    for mut b in chunks(&data[from..to], data.len() as u64) {
        b.stream_offset += from as u64;
        batches.push(b);
    }
    let mut stage = DecodeConfig::default().build();
    match harness::run_stage(&mut stage, batches) {
        Ok(out) => {
            std::hint::black_box(read_all_fields(&out));
        }
        Err(e) => {
            check_error(&e);
        }
    }
});

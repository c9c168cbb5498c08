//! `decompress` after `decode` on arbitrary bytes (COMPRESSED records with corrupt zstd data,
//! records straddling COMPRESSED boundaries, bad decompressed framing); then every field of the
//! decompressed records is read. Never panics; an error names its offset.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfpipe_core::harness;
use perfpipe_fuzz::{check_error, decode, read_all_fields, split_seed};
use perfpipe_stream::decompress::DecompressConfig;

fuzz_target!(|data: &[u8]| {
    let (seed, stream) = split_seed(data);
    let (batches, _) = decode(stream, seed);
    let mut stage = DecompressConfig::default().build().expect("zstd context");
    match harness::run_stage(&mut stage, batches) {
        Ok(out) => {
            std::hint::black_box(read_all_fields(&out));
        }
        Err(e) => check_error(&e),
    }
});

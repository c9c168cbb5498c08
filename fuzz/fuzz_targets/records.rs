//! Typed record views on arbitrary records: decode, then read every field of every record
//! (sample layout, callchain frames, mmap, comm, task, sample_id). Never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfpipe_fuzz::{decode, read_all_fields, split_seed};

fuzz_target!(|data: &[u8]| {
    let (seed, stream) = split_seed(data);
    let (batches, _) = decode(stream, seed);
    std::hint::black_box(read_all_fields(&batches));
});

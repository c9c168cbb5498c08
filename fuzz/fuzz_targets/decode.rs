//! `decode` on arbitrary bytes, in chunks picked by the first 8 bytes. Never panics; an error names
//! its offset; a stream that decodes is written back byte for byte; chunking does not change the
//! outcome.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfpipe_fuzz::{check_error, decode, split_seed, written};

fuzz_target!(|data: &[u8]| {
    let (seed, stream) = split_seed(data);
    let (chunked, err) = decode(stream, seed);
    let (whole, whole_err) = decode(stream, 0);
    if let Some(e) = &whole_err {
        check_error(e);
    }
    assert_eq!(
        err.as_ref().map(|e| e.to_string()),
        whole_err.as_ref().map(|e| e.to_string()),
        "chunking changed the outcome"
    );
    if err.is_none() {
        assert_eq!(written(&chunked), stream, "round trip (chunked)");
        assert_eq!(written(&whole), stream, "round trip (whole)");
    }
});

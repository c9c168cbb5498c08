//! The build-id reader on arbitrary bytes as an ELF image (`elf_build_id`, which `read_build_id`
//! applies to each mapped file) and as a raw note section (`gnu_build_id_in_notes`, for
//! `/sys/module/*/notes`). Never panics; a found id is at most 20 bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfpipe_stream::model::dso::{elf_build_id, gnu_build_id_in_notes};

fuzz_target!(|data: &[u8]| {
    if let Some(id) = elf_build_id(data) {
        assert!(id.as_bytes().len() <= 20);
    }
    for big in [false, true] {
        if let Some(id) = gnu_build_id_in_notes(data, big) {
            assert!(id.as_bytes().len() <= 20);
        }
    }
});

//! An ELF file's unwind information on arbitrary bytes, as `unwind` reads a dso
//! (`.eh_frame`, `.eh_frame_hdr`, `.debug_frame`, the PT_LOADs), made framehop modules for a map
//! of each PT_LOAD, and walked from addresses in each map over a stack of the input's bytes
//! (`profile::fuzz::unwind_info`). Never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    std::hint::black_box(perfpipe_profile::fuzz::unwind_info(data, data));
});

//! An ELF file's unwind information on arbitrary bytes, as `unwind` reads a dso
//! (`.eh_frame`, `.eh_frame_hdr`, `.debug_frame`, the PT_LOADs), made framehop modules for a map
//! of each PT_LOAD, and walked from addresses in each map over a stack of the input's bytes
//! (`profile::fuzz::unwind_info`; frames whose CFI framehop cannot evaluate through the CFI
//! fallback, `unwind::cfi`, with the ip, `rsp` and `rbp` as the only known registers). Never panics, but for the one known panic inside framehop 0.16
//! (its unchecked `cfa - 8`, `x86_64/dwarf.rs`), which `unwind::walk_stack` catches and counts
//! (`partial_unwinder_panic`, `regression::r40_framehop_cfa_below_8_is_a_partial_walk`):
//! libFuzzer's panic hook would abort on it even though it is caught, so that panic alone is let
//! through to the catch; any other panic aborts as libFuzzer's hook does.
#![no_main]

use libfuzzer_sys::fuzz_target;

fn let_framehop_cfa_through() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let libfuzzer = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let known = info.location().is_some_and(|l| {
                l.file().contains("framehop-0.16.") && l.file().ends_with("x86_64/dwarf.rs")
            }) && info
                .payload_as_str()
                .is_some_and(|m| m.contains("subtract with overflow"));
            if !known {
                libfuzzer(info);
            }
        }));
    });
}

fuzz_target!(|data: &[u8]| {
    let_framehop_cfa_through();
    std::hint::black_box(perfpipe_profile::fuzz::unwind_info(data, data));
});

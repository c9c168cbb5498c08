//! The debuginfod client's request on arbitrary server answers, with no socket: the client's own
//! `get` and agent configuration (redirects, timeouts, the size cap), over a ureq transport that
//! plays the input as what the server sends. Input: a byte that picks how the answer arrives
//! (whole, in pieces of one size from 1 to 64 bytes, in uneven pieces), a byte that picks the size
//! cap, then the answers, one per connection (a redirect reads the next), separated by `\0--\0`.
//! Never panics; never keeps more than the cap.
//!
//! ureq parses a response head anew from its start at each piece until it is whole, so an answer
//! played a byte at a time costs a parse per byte of its head: when a quarter of the inputs were
//! played so, they took most of the target's time. Pieces of 1 to 64 bytes still split a head,
//! a chunk size or a body at every place over the executions, at a parse per piece.
//!
//! The one known panic inside ureq 3.5 (a redirect whose chunked body ends at `0\r\n` with the
//! connection: `run.rs`, "remote to have signaled redirect") is caught by the client's `get`
//! and fails the request (`regression::r40_ureq_redirect_cut_after_last_chunk`); libFuzzer's
//! panic hook would abort on it even though it is caught, so that panic alone is let through to
//! the catch; any other panic aborts as libFuzzer's hook does.
#![no_main]

use libfuzzer_sys::fuzz_target;

fn let_ureq_redirect_through() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let libfuzzer = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let known = info
                .location()
                .is_some_and(|l| l.file().contains("ureq-3.") && l.file().ends_with("run.rs"))
                && info
                    .payload_as_str()
                    .is_some_and(|m| m.contains("remote to have signaled redirect"));
            if !known {
                libfuzzer(info);
            }
        }));
    });
}

fuzz_target!(|data: &[u8]| {
    let_ureq_redirect_through();
    let [a, b, rest @ ..] = data else { return };
    let pieces: Vec<usize> = match a % 4 {
        0 => Vec::new(),
        1 => vec![1 + usize::from(a / 4)],
        2 => vec![1 + usize::from(a / 4), 7, 64],
        _ => vec![usize::from(*a) * 3 + 1, 1, 2],
    };
    let max = match b % 4 {
        0 => 16,
        1 => 1000,
        2 => 1 << 20,
        _ => u64::from(*b),
    };
    std::hint::black_box(perfpipe_profile::fuzz::debuginfod(rest, &pieces, max));
});

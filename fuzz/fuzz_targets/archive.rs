//! `--symbols ARCHIVE` on arbitrary bytes as the archive (a tar, or a `.tar.bz2` when it starts
//! with `BZh`), from memory (`profile::fuzz::archive`: the same listing of a tar's members as a
//! file's, with no file): the index (member names and links untrusted), then every lookup the
//! symbol engine makes of it: the build ids a dso path has, the `elf`/`debug` files of a build id
//! through its `.build-id/xx/rest` link, `kallsyms` and `vdso`, and the members' bytes. Never
//! panics; a name or link that leaves the archive is never listed or served, and a member served
//! lies inside the tar.
//!
//! A `.tar.bz2` decompresses to at most 32 KiB here (twice the largest plain tar `fuzz/run.sh`
//! gives): the fuzzer soon finds small bzip2 streams that inflate to any cap, and at 1 MiB
//! inflating them was 95 % of the target's time, at a few hundred executions a second.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    std::hint::black_box(perfpipe_profile::fuzz::archive(data, 32 << 10));
});

//! `--symbols ARCHIVE` on arbitrary bytes as the archive (a tar, or a `.tar.bz2` when it starts
//! with `BZh`): the index `Sources` reads (member names and links untrusted), then every lookup
//! the symbol engine makes of it: the build ids a dso path has, the `elf`/`debug` files of a
//! build id through its `.build-id/xx/rest` link, `kallsyms` and `vdso`, and the members' bytes.
//! Never panics; a name or link that leaves the archive is never served.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfpipe_fuzz::scratch;
use perfpipe_profile::symbols::sources::{list_archive, Cand, Sources, SourcesConfig};

fn unhex(s: &str) -> Option<Vec<u8>> {
    let s: String = s.chars().filter(|&c| c != '/').collect();
    (s.len() % 2 == 0 && s.len() >= 4)
        .then(|| {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
                .collect()
        })
        .flatten()
}

fn check(c: &Cand) {
    if let Cand::Member { name, .. } = c {
        assert!(
            !name.starts_with('/') && !name.split('/').any(|p| p == ".."),
            "{name} served"
        );
    }
    if let Ok(b) = c.read_all(1 << 20) {
        std::hint::black_box(b.len());
    }
}

fuzz_target!(|data: &[u8]| {
    let (_, path) = scratch("archive", data);
    let names = list_archive(path);
    let src = Sources::open(&SourcesConfig {
        symbols: vec![path.clone()],
        no_cache: true,
        ..SourcesConfig::default()
    })
    .expect("the scratch file opens");
    src.warm(None);
    for n in names.iter().take(32) {
        assert!(
            !n.starts_with('/') && !n.split('/').any(|p| p == ".." || p.is_empty()),
            "{n} listed"
        );
        if let Some(link) = n.strip_prefix(".build-id/") {
            let Some(id) = unhex(link) else { continue };
            for c in src.by_build_id(&id) {
                check(&c);
            }
            for f in ["kallsyms", "vdso"] {
                if let Some(c) = src.special(&id, f) {
                    check(&c);
                }
            }
        } else if let Some((dir, _)) = n.rsplit_once('/') {
            let dso = dir.rsplit_once('/').map_or(dir, |d| d.0);
            std::hint::black_box(src.id_by_name(&format!("/{dso}"), true));
            std::hint::black_box(src.id_by_name(dso, false));
        }
    }
    let c = src.counters();
    std::hint::black_box(c.archive_entries_rejected.get() + c.archives_unreadable.get());
});

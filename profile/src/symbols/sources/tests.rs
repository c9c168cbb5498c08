//! Archives that are damaged: truncated, or with a bad entry in the middle. What was read before
//! the damage is used; the damage is counted; nothing is read short.

use std::path::Path;

use super::*;

const ID_A: [u8; 20] = [0xaa; 20];
const ID_B: [u8; 20] = [0xbb; 20];
const ID_C: [u8; 20] = [0xcc; 20];

/// A tar in perf's cache layout with `/a`, `/b`, `/c`, each an `elf` of `size` bytes of its
/// letter, in that order; its bytes, and where each `elf`'s data starts.
fn archive(size: usize) -> (Vec<u8>, Vec<u64>) {
    let mut b = tar::Builder::new(Vec::new());
    for (name, id) in [("a", ID_A), ("b", ID_B), ("c", ID_C)] {
        let h = hex(&id);
        let mut link = tar::Header::new_gnu();
        link.set_entry_type(tar::EntryType::Symlink);
        link.set_size(0);
        b.append_link(
            &mut link,
            format!(".build-id/{}/{}", &h[..2], &h[2..]),
            format!("../../{name}/{h}"),
        )
        .unwrap();
        let mut f = tar::Header::new_gnu();
        f.set_size(size as u64);
        f.set_mode(0o644);
        let data = vec![name.as_bytes()[0]; size];
        b.append_data(&mut f, format!("{name}/{h}/elf"), &data[..])
            .unwrap();
    }
    let bytes = b.into_inner().unwrap();
    // Where each `elf`'s data is: after its header, at a 512-byte block.
    let starts = ["a", "b", "c"]
        .iter()
        .map(|n| {
            let at = bytes
                .windows(size.min(64))
                .position(|w| w.iter().all(|&c| c == n.as_bytes()[0]))
                .unwrap();
            at as u64
        })
        .collect();
    (bytes, starts)
}

fn open(path: &Path) -> Sources {
    let s = Sources::open(&SourcesConfig {
        symbols: vec![path.to_path_buf()],
        no_cache: true,
        ..SourcesConfig::default()
    })
    .unwrap();
    s.warm(None);
    s
}

fn elf_of(s: &Sources, id: &[u8]) -> Option<Vec<u8>> {
    let c = s.by_build_id(id).into_iter().next()?;
    Some(c.read_all(1 << 20).unwrap())
}

#[test]
fn a_truncated_archive_keeps_the_members_before_the_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, starts) = archive(3000);
    // Cut in the middle of `b`'s data: `a` is whole, `b` claims more than is left, `c` is gone.
    let cut = dir.path().join("cut.tar");
    std::fs::write(&cut, &bytes[..starts[1] as usize + 1000]).unwrap();
    let s = open(&cut);
    assert_eq!(elf_of(&s, &ID_A), Some(vec![b'a'; 3000]));
    assert_eq!(
        elf_of(&s, &ID_B),
        None,
        "a member past the end is never read short"
    );
    assert_eq!(elf_of(&s, &ID_C), None);
    let c = s.counters();
    assert_eq!(
        (
            c.archives_truncated.get(),
            c.archive_members_truncated.get(),
            c.archives_unreadable.get()
        ),
        (1, 1, 0)
    );
    // The same cut in a header (between `a` and `b`): `a` is kept.
    let cut = dir.path().join("cut-header.tar");
    std::fs::write(&cut, &bytes[..starts[1] as usize - 100]).unwrap();
    let s = open(&cut);
    assert_eq!(elf_of(&s, &ID_A), Some(vec![b'a'; 3000]));
    assert_eq!(s.counters().archives_truncated.get(), 1);
}

#[test]
fn a_bad_entry_in_the_middle_keeps_the_members_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let (mut bytes, starts) = archive(3000);
    // `b`'s file header (the block before its data): a wrong checksum.
    let header = starts[1] as usize - 512;
    bytes[header + 148..header + 156].copy_from_slice(b"0000000\0");
    let bad = dir.path().join("bad.tar");
    std::fs::write(&bad, &bytes).unwrap();
    let s = open(&bad);
    assert_eq!(elf_of(&s, &ID_A), Some(vec![b'a'; 3000]));
    assert_eq!(elf_of(&s, &ID_B), None);
    let c = s.counters();
    assert_eq!(
        (c.archives_truncated.get(), c.archives_unreadable.get()),
        (1, 0)
    );
    // A whole archive counts nothing.
    let good = dir.path().join("good.tar");
    let (bytes, _) = archive(3000);
    std::fs::write(&good, &bytes).unwrap();
    let s = open(&good);
    for (id, c) in [(ID_A, b'a'), (ID_B, b'b'), (ID_C, b'c')] {
        assert_eq!(elf_of(&s, &id), Some(vec![c; 3000]));
    }
    assert_eq!(s.counters().archives_truncated.get(), 0);
}

#[test]
fn a_truncated_bzip2_archive_keeps_what_decompressed() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    // Data that does not compress, so the cut lands in `c`'s bytes.
    let mut b = tar::Builder::new(Vec::new());
    let mut x: u64 = 1;
    let mut noise = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    };
    for (name, id) in [("a", ID_A), ("c", ID_C)] {
        let mut f = tar::Header::new_gnu();
        let data = noise(200_000);
        f.set_size(data.len() as u64);
        b.append_data(&mut f, format!("{name}/{}/elf", hex(&id)), &data[..])
            .unwrap();
    }
    let tar = b.into_inner().unwrap();
    // 100 kB blocks (level 1): a block decompresses only whole, so `a` needs two of them.
    let mut z = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
    z.write_all(&tar).unwrap();
    let z = z.finish().unwrap();
    let cut = dir.path().join("cut.tar.bz2");
    std::fs::write(&cut, &z[..z.len() * 3 / 4]).unwrap();
    let names = list_archive(&cut);
    assert!(
        names.contains(&format!("a/{}/elf", hex(&ID_A))),
        "{names:?}"
    );
    let s = open(&cut);
    assert_eq!(s.id_by_name("/a", true), Some(ID_A.to_vec()));
    assert_eq!(s.counters().archives_truncated.get(), 1);
    assert_eq!(s.counters().archives_unreadable.get(), 0);
}

#[test]
fn a_member_longer_than_its_file_is_an_error_not_a_short_read() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    std::fs::write(&p, [7u8; 100]).unwrap();
    let file = Arc::new(File::open(&p).unwrap());
    let member = |offset, len| Cand::Member {
        file: file.clone(),
        archive: Arc::from(p.as_path()),
        offset,
        len,
        name: "x/elf".into(),
    };
    assert_eq!(member(10, 90).read_all(1000).unwrap(), vec![7u8; 90]);
    let e = member(10, 200).read_all(1000).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    assert!(e.to_string().contains("200 bytes claimed, 90 read"), "{e}");
    assert!(member(0, 100).read_all(99).is_err(), "past the cap");
}

#[test]
fn an_archive_read_from_memory_lists_and_finds_as_from_its_file() {
    // The fuzz target `archive` reads the bytes with `Archive::of_bytes`: the same members, the
    // same places, the same truncation as `--symbols` reading the file, for a whole tar, one cut
    // in a member, and a `.tar.bz2` cut mid-stream.
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let (tar, starts) = archive(3000);
    let mut z = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
    z.write_all(&tar).unwrap();
    let z = z.finish().unwrap();
    let cut_tar = tar[..starts[2] as usize + 100].to_vec();
    let cut_bz2 = z[..z.len() * 2 / 3].to_vec();
    for (n, bytes) in [
        ("whole.tar", tar),
        ("cut.tar", cut_tar),
        ("cut.tar.bz2", cut_bz2),
    ] {
        let p = dir.path().join(n);
        std::fs::write(&p, &bytes).unwrap();
        let from_file = Archive::new(&p, SourceCounters::default());
        let counters = SourceCounters::default();
        let (in_memory, tar) = Archive::of_bytes(&bytes, 1 << 20, counters.clone()).unwrap();
        let names: Vec<&str> = in_memory.names().collect();
        assert_eq!(names, from_file.names().collect::<Vec<_>>(), "{n}");
        assert_eq!(names, list_archive(&p), "{n}");
        for id in [ID_A, ID_B, ID_C] {
            let h = hex(&id);
            let link = format!(".build-id/{}/{}", &h[..2], &h[2..]);
            let at = in_memory.member_at(&link, "elf");
            assert_eq!(at, from_file.member_at(&link, "elf"), "{n} {h}");
            if let Some((_, offset, len)) = at {
                let end = (offset + len) as usize;
                assert!(end <= tar.len(), "{n}: a member past the end served");
            }
        }
        assert_eq!(
            counters.archives_truncated.get(),
            from_file.counters.archives_truncated.get(),
            "{n}"
        );
        assert_eq!(
            counters.archives_truncated.get(),
            u64::from(n != "whole.tar"),
            "{n}"
        );
    }
}

//! PERF_RECORD_HEADER_BUILD_ID (`struct perf_record_header_build_id` in
//! `tools/lib/perf/include/perf/event.h`): building and reading it.
//!
//! Layout: header; `s32 pid` (the machine: −1 for the host); `u8 data[20]; u8 size; u8 r1;
//! u16 r2` (the size byte is valid when misc has `PERF_RECORD_MISC_BUILD_ID_SIZE`, bit 15); the
//! NUL-terminated file name. As upstream writes it since 2023/2024: misc = KERNEL or USER |
//! BUILD_ID_SIZE and the record padded to a multiple of 8 (perf 6.1 itself wrote size byte 0, no
//! flag, and names padded to 64, leaving every later record misaligned). No `sample_id` trailer is
//! appended: upstream ≥ 6.11 adds one to sort the record, which a stream in input order does not
//! need, and readers ignore bytes after the name.

use super::misc_for;
use crate::format::{build, misc, BuildIdEvent, Endian, Record};
use crate::model::dso::BuildId;

/// The host machine's pid in a BUILD_ID record (`HOST_KERNEL_ID`).
pub const HOST_PID: i32 = -1;

/// Encodes a BUILD_ID record for `name` (a kernel dso when `kernel`).
pub fn build_id(id: &BuildId, name: &[u8], kernel: bool, e: Endian) -> Vec<u8> {
    let event = BuildIdEvent {
        pid: HOST_PID,
        build_id: id.as_bytes(),
        // Names longer than a record can hold are cut (a path is at most 4096 bytes anyway).
        filename: &name[..name.len().min(65_000)],
        misc: misc_for(kernel) | misc::BUILD_ID_SIZE,
    };
    let mut out = Vec::with_capacity((36 + event.filename.len() + 1).next_multiple_of(8));
    build::build_id(&mut out, e, &event);
    out
}

/// Reads a BUILD_ID record: `(build id, file name, misc)`, or `None` if it is malformed.
pub fn parse(rec: &[u8], e: Endian) -> Option<(BuildId, &[u8], u16)> {
    let b = Record::new(rec, e, None).build_id()?;
    Some((BuildId::new(b.build_id)?, b.filename, b.misc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_upstream() {
        let id = BuildId::from_hex(&"ab".repeat(20)).unwrap();
        let r = build_id(&id, b"/usr/lib/libc.so.6", false, Endian::Little);
        assert_eq!(r.len() % 8, 0);
        assert_eq!(r.len(), (36 + 19usize).next_multiple_of(8));
        assert_eq!(&r[..4], &67u32.to_le_bytes());
        assert_eq!(u16::from_le_bytes([r[4], r[5]]), 0x8002);
        assert_eq!(&r[8..12], &[0xff; 4]);
        assert_eq!(r[32], 20);
        let (got, name, m) = parse(&r, Endian::Little).unwrap();
        assert_eq!((got, name, m), (id, &b"/usr/lib/libc.so.6"[..], 0x8002));
    }

    #[test]
    fn short_ids_and_kernel_and_big_endian() {
        let id = BuildId::from_hex("0102030405060708").unwrap();
        let r = build_id(&id, b"[kernel.kallsyms]", true, Endian::Big);
        assert_eq!(&r[..4], &67u32.to_be_bytes());
        assert_eq!(u16::from_be_bytes([r[4], r[5]]), 0x8001);
        assert_eq!(r[32], 8);
        let (got, name, _) = parse(&r, Endian::Big).unwrap();
        assert_eq!(got.as_bytes(), id.as_bytes());
        assert_eq!(name, b"[kernel.kallsyms]");
        assert!(parse(&r[..20], Endian::Big).is_none());
    }
}

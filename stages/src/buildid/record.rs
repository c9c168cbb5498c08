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
use super::source::BuildId;
use crate::encode;
use crate::format::{misc, Endian, RecordType};

/// The host machine's pid in a BUILD_ID record (`HOST_KERNEL_ID`).
pub const HOST_PID: i32 = -1;

/// Encodes a BUILD_ID record for `name` (a kernel dso when `kernel`).
pub fn build_id(id: &BuildId, name: &[u8], kernel: bool, e: Endian) -> Vec<u8> {
    let mut body = Vec::with_capacity(28 + name.len() + 1);
    body.extend_from_slice(&e.put_u32(HOST_PID as u32));
    let mut data = [0u8; 24];
    data[..id.as_bytes().len()].copy_from_slice(id.as_bytes());
    data[20] = id.as_bytes().len() as u8;
    body.extend_from_slice(&data);
    // Names longer than a record can hold are cut (a path is at most 4096 bytes anyway).
    body.extend_from_slice(&name[..name.len().min(65_000)]);
    body.push(0);
    encode::record(
        RecordType::HEADER_BUILD_ID.0,
        misc_for(kernel) | misc::BUILD_ID_SIZE,
        &body,
        true,
        e,
    )
}

/// Reads a BUILD_ID record: `(build id, file name, misc)`, or `None` if it is malformed.
pub fn parse(rec: &[u8], e: Endian) -> Option<(BuildId, &[u8], u16)> {
    let misc_ = e.u16(rec, 4)?;
    let size = usize::from(e.u16(rec, 6)?).min(rec.len());
    let rec = &rec[..size];
    let len = if misc_ & misc::BUILD_ID_SIZE != 0 {
        usize::from(*rec.get(32)?).min(20)
    } else {
        20
    };
    let id = BuildId::new(rec.get(12..12 + len)?)?;
    let name = rec.get(36..)?;
    let name = &name[..name.iter().position(|&c| c == 0)?];
    Some((id, name, misc_))
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

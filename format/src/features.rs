//! What perfpipe reads of a feature section's bytes, wherever they come from: a file's feature
//! section, or the `PERF_RECORD_HEADER_FEATURE` record that carries one in a pipe
//! ([`feature_record`]).
//!
//! - [`feature_string`]: a string feature (HOSTNAME, OSRELEASE, ARCH…), `do_write_string()` in
//!   `tools/perf/util/header.c`;
//! - [`ClockData`]: the CLOCK_DATA feature, `write_clock_data()` in the same file, which dates
//!   every sample of a recording made with `perf record -k CLOCKID`.
//!
//! ```
//! use perfpipe_format::build;
//! use perfpipe_format::features::{feature_record, feature_string};
//! use perfpipe_format::{feature, Endian};
//!
//! let e = Endian::Little;
//! let mut data = 8u32.to_le_bytes().to_vec();
//! data.extend_from_slice(b"db1\0\0\0\0\0");
//! let mut rec = Vec::new();
//! build::feature(&mut rec, e, feature::HOSTNAME, &data);
//! let (id, body) = feature_record(&rec, e).unwrap();
//! assert_eq!((id, feature_string(body, e)), (feature::HOSTNAME, Some(&b"db1"[..])));
//! ```

use crate::endian::{Endian, EventHeader};

/// The feature id and the section's bytes of a `PERF_RECORD_HEADER_FEATURE` record (`rec`, its
/// header included): `u64 feat_id`, then the section, to the record's size. `None` for a record
/// too short to hold the id, or an id past `u32`.
pub fn feature_record(rec: &[u8], e: Endian) -> Option<(u32, &[u8])> {
    let size = usize::from(EventHeader::parse(rec, e)?.size).min(rec.len());
    let id = u32::try_from(e.u64(rec, 8)?).ok()?;
    Some((id, rec.get(16..size)?))
}

/// A string feature's value (`struct perf_header_string`: a `u32` length counting the NUL and
/// the padding to 8 bytes, then the bytes), up to its first NUL. `None` when the length runs past
/// the section.
pub fn feature_string(data: &[u8], e: Endian) -> Option<&[u8]> {
    let len = usize::try_from(e.u32(data, 0)?).ok()?;
    let s = data.get(4..4usize.checked_add(len)?)?;
    Some(&s[..s.iter().position(|&c| c == 0).unwrap_or(s.len())])
}

/// `HEADER_CLOCK_DATA` (perf 5.10 and later; `struct perf_env.clock`): one instant read on the
/// clock the samples were timed with and on the wall clock. `perf record` writes it only when
/// `-k`/`--clockid` chose that clock (the default `perf_clock` has no wall-clock reference), and
/// `perf script -F tod` dates samples by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockData {
    /// The section's version (1, the only one perf writes).
    pub version: u32,
    /// The clock of the samples' times (`CLOCK_MONOTONIC` = 1, …).
    pub clockid: u32,
    /// The wall-clock time of the reference instant (`CLOCK_REALTIME`), ns since the epoch.
    pub tod_ns: u64,
    /// The same instant on `clockid`, ns.
    pub clockid_ns: u64,
}

impl ClockData {
    /// Size of version 1 of the section: two `u32` then two `u64`.
    pub const SIZE: usize = 24;

    /// Reads a CLOCK_DATA section: `u32 version, u32 clockid, u64 tod_ns, u64 clockid_ns`, in the
    /// order `write_clock_data()` writes them. `None` for a short section or another version.
    pub fn parse(data: &[u8], e: Endian) -> Option<ClockData> {
        let c = ClockData {
            version: e.u32(data, 0)?,
            clockid: e.u32(data, 4)?,
            tod_ns: e.u64(data, 8)?,
            clockid_ns: e.u64(data, 16)?,
        };
        (c.version == 1).then_some(c)
    }

    /// The section's bytes.
    pub fn to_bytes(&self, e: Endian) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::SIZE);
        out.extend_from_slice(&e.put_u32(self.version));
        out.extend_from_slice(&e.put_u32(self.clockid));
        out.extend_from_slice(&e.put_u64(self.tod_ns));
        out.extend_from_slice(&e.put_u64(self.clockid_ns));
        out
    }

    /// The wall-clock time of a sample timed `time` on the recorded clock, ns since the epoch
    /// (UTC): `tod_ns + (time - clockid_ns)`, as `perf script -F tod` computes it
    /// (`tod_scnprintf()` in `builtin-script.c`); a time before the epoch is 0.
    pub fn wall_ns(&self, time: u64) -> u64 {
        let delta = i128::from(time) - i128::from(self.clockid_ns);
        u64::try_from((i128::from(self.tod_ns) + delta).max(0)).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build;
    use crate::feature;

    #[test]
    fn clock_data_round_trips_and_dates_samples() {
        for e in [Endian::Little, Endian::Big] {
            let c = ClockData {
                version: 1,
                clockid: 1,
                tod_ns: 1_796_522_986_920_149_000,
                clockid_ns: 1_216_903_364_593,
            };
            let mut rec = Vec::new();
            build::feature(&mut rec, e, feature::CLOCK_DATA, &c.to_bytes(e));
            let (id, data) = feature_record(&rec, e).unwrap();
            assert_eq!(id, feature::CLOCK_DATA);
            assert_eq!(ClockData::parse(data, e), Some(c));
            // perf script -F tod: 1216.995000 → 02:09:47.011784 (the reference is 02:09:46.920149).
            assert_eq!(c.wall_ns(1_216_995_000_000) / 1_000, 1_796_522_987_011_784);
            assert_eq!(c.wall_ns(0), c.tod_ns - c.clockid_ns);
            assert!(ClockData::parse(&data[..20], e).is_none());
        }
        let v2 = ClockData {
            version: 2,
            clockid: 1,
            tod_ns: 0,
            clockid_ns: 0,
        };
        let e = Endian::Little;
        assert!(
            ClockData::parse(&v2.to_bytes(e), e).is_none(),
            "unknown version"
        );
        let early = ClockData {
            version: 1,
            clockid: 1,
            tod_ns: 5,
            clockid_ns: 100,
        };
        assert_eq!(early.wall_ns(0), 0);
    }

    #[test]
    fn strings_end_at_their_nul_and_never_run_past_the_section() {
        let e = Endian::Little;
        let mut data = 8u32.to_le_bytes().to_vec();
        data.extend_from_slice(b"host\0\0\0\0");
        assert_eq!(feature_string(&data, e), Some(&b"host"[..]));
        data[0] = 9;
        assert_eq!(feature_string(&data, e), None);
        assert_eq!(feature_string(&data[..2], e), None);
        let mut rec = Vec::new();
        build::feature(&mut rec, e, feature::HOSTNAME, b"");
        assert_eq!(feature_record(&rec, e), Some((feature::HOSTNAME, &b""[..])));
        assert_eq!(feature_record(&rec[..12], e), None);
    }
}

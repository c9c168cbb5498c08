//! Byte order of a stream, decided once from the pipe header's magic.

/// The byte order of a perf stream: native little-endian (`PERFILE2`) or byte-swapped (`2ELIFREP`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Endian {
    /// Little-endian, as recorded on x86 and most arm64 machines.
    #[default]
    Little,
    /// Big-endian, as recorded on s390x or big-endian PowerPC.
    Big,
}

impl Endian {
    /// Reads a u16 at `off`, or `None` past the end.
    #[inline]
    pub fn u16(self, b: &[u8], off: usize) -> Option<u16> {
        let a: [u8; 2] = b.get(off..off + 2)?.try_into().ok()?;
        Some(match self {
            Endian::Little => u16::from_le_bytes(a),
            Endian::Big => u16::from_be_bytes(a),
        })
    }

    /// Reads a u32 at `off`, or `None` past the end.
    #[inline]
    pub fn u32(self, b: &[u8], off: usize) -> Option<u32> {
        let a: [u8; 4] = b.get(off..off + 4)?.try_into().ok()?;
        Some(match self {
            Endian::Little => u32::from_le_bytes(a),
            Endian::Big => u32::from_be_bytes(a),
        })
    }

    /// Reads a u64 at `off`, or `None` past the end.
    #[inline]
    pub fn u64(self, b: &[u8], off: usize) -> Option<u64> {
        let a: [u8; 8] = b.get(off..off + 8)?.try_into().ok()?;
        Some(match self {
            Endian::Little => u64::from_le_bytes(a),
            Endian::Big => u64::from_be_bytes(a),
        })
    }

    /// Encodes a u16 in this byte order.
    pub fn put_u16(self, v: u16) -> [u8; 2] {
        match self {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        }
    }

    /// Encodes a u32 in this byte order.
    pub fn put_u32(self, v: u32) -> [u8; 4] {
        match self {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        }
    }

    /// Encodes a u64 in this byte order.
    pub fn put_u64(self, v: u64) -> [u8; 8] {
        match self {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        }
    }
}

/// The `perf_event_header` of a record: `type`, `misc` and `size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventHeader {
    /// `type`
    pub type_: u32,
    /// `misc`
    pub misc: u16,
    /// `size`, including these 8 bytes.
    pub size: u16,
}

impl EventHeader {
    /// Parses the 8-byte header at the start of `b`.
    #[inline]
    pub fn parse(b: &[u8], e: Endian) -> Option<EventHeader> {
        Some(EventHeader {
            type_: e.u32(b, 0)?,
            misc: e.u16(b, 4)?,
            size: e.u16(b, 6)?,
        })
    }

    /// Encodes the header.
    pub fn to_bytes(self, e: Endian) -> [u8; 8] {
        let mut out = [0u8; 8];
        out[..4].copy_from_slice(&e.put_u32(self.type_));
        out[4..6].copy_from_slice(&e.put_u16(self.misc));
        out[6..].copy_from_slice(&e.put_u16(self.size));
        out
    }
}

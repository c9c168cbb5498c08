//! Typed, zero-copy views of records: each reads only the field asked for, from the record's bytes.

use super::attr::{Attr, SampleLayout};
use super::constants::{context, misc, sample, RecordType};
use super::endian::{Endian, EventHeader};

/// One record: its bytes (header included), the stream's byte order, and its attr when known.
#[derive(Clone, Copy, Debug)]
pub struct Record<'a> {
    /// The record's bytes, header included (and any payload that follows the header's size).
    pub bytes: &'a [u8],
    /// The stream's byte order.
    pub endian: Endian,
    /// The attr the record belongs to, if any attr is known.
    pub attr: Option<&'a Attr>,
}

impl<'a> Record<'a> {
    /// A view of `bytes`.
    pub fn new(bytes: &'a [u8], endian: Endian, attr: Option<&'a Attr>) -> Record<'a> {
        Record {
            bytes,
            endian,
            attr,
        }
    }

    /// The record header. A framed record always has one; a zeroed header is returned otherwise.
    #[inline]
    pub fn header(&self) -> EventHeader {
        EventHeader::parse(self.bytes, self.endian).unwrap_or(EventHeader {
            type_: 0,
            misc: 0,
            size: 0,
        })
    }

    /// The record type.
    #[inline]
    pub fn record_type(&self) -> RecordType {
        RecordType(self.header().type_)
    }

    /// `misc & PERF_RECORD_MISC_CPUMODE_MASK`.
    #[inline]
    pub fn cpumode(&self) -> u16 {
        self.header().misc & misc::CPUMODE_MASK
    }

    /// The bytes covered by `header.size` (without a trailing payload).
    pub fn sized(&self) -> &'a [u8] {
        let n = usize::from(self.header().size).min(self.bytes.len());
        &self.bytes[..n]
    }

    /// A SAMPLE view, if this is a sample whose attr is known.
    pub fn sample(&self) -> Option<Sample<'a>> {
        (self.record_type() == RecordType::SAMPLE).then_some(())?;
        Some(Sample {
            bytes: self.sized(),
            endian: self.endian,
            layout: &self.attr?.layout,
        })
    }

    /// The `sample_id` trailer of a kernel non-sample record, if its attr has `sample_id_all`.
    pub fn sample_id(&self) -> Option<SampleId> {
        let rt = self.record_type();
        if rt == RecordType::SAMPLE || !rt.is_kernel() {
            return None;
        }
        let t = self.attr?.layout.trailer?;
        let rec = self.sized();
        let e = self.endian;
        let at = |o: Option<u8>| o.and_then(|o| rec.len().checked_sub(usize::from(o)));
        if rec.len() < 8 + usize::from(t.size) {
            return None;
        }
        Some(SampleId {
            pid: at(t.tid).and_then(|o| e.u32(rec, o)),
            tid: at(t.tid).and_then(|o| e.u32(rec, o + 4)),
            time: at(t.time).and_then(|o| e.u64(rec, o)),
            id: at(t.identifier.or(t.id)).and_then(|o| e.u64(rec, o)),
            cpu: at(t.cpu).and_then(|o| e.u32(rec, o)),
        })
    }

    /// The MMAP or MMAP2 fields, if this is one.
    pub fn mmap(&self) -> Option<Mmap<'a>> {
        let rt = self.record_type();
        let rec = self.sized();
        let e = self.endian;
        let (name_at, mmap2) = match rt {
            RecordType::MMAP => (40, false),
            RecordType::MMAP2 => (72, true),
            _ => return None,
        };
        let misc_ = self.header().misc;
        let name = rec.get(name_at..)?;
        let name = &name[..name.iter().position(|&c| c == 0)?];
        let file_id = if !mmap2 {
            FileId::None
        } else if misc_ & misc::MMAP_BUILD_ID != 0 {
            let size = usize::from(*rec.get(40)?).min(20);
            FileId::BuildId(rec.get(44..44 + size)?)
        } else {
            FileId::Inode {
                maj: e.u32(rec, 40)?,
                min: e.u32(rec, 44)?,
                ino: e.u64(rec, 48)?,
                ino_generation: e.u64(rec, 56)?,
            }
        };
        Some(Mmap {
            pid: e.u32(rec, 8)?,
            tid: e.u32(rec, 12)?,
            addr: e.u64(rec, 16)?,
            len: e.u64(rec, 24)?,
            pgoff: e.u64(rec, 32)?,
            file_id,
            prot: if mmap2 { e.u32(rec, 64)? } else { 0 },
            flags: if mmap2 { e.u32(rec, 68)? } else { 0 },
            filename: name,
            cpumode: misc_ & misc::CPUMODE_MASK,
        })
    }

    /// The COMM fields, if this is one.
    pub fn comm(&self) -> Option<Comm<'a>> {
        (self.record_type() == RecordType::COMM).then_some(())?;
        let rec = self.sized();
        let name = rec.get(16..)?;
        Some(Comm {
            pid: self.endian.u32(rec, 8)?,
            tid: self.endian.u32(rec, 12)?,
            comm: &name[..name.iter().position(|&c| c == 0)?],
            exec: self.header().misc & misc::COMM_EXEC != 0,
        })
    }

    /// The HEADER_BUILD_ID fields, if this is one. The build id is `size` bytes when `misc` has
    /// BUILD_ID_SIZE (at most 20), else all 20 (perf 6.1 wrote no size).
    pub fn build_id(&self) -> Option<BuildIdEvent<'a>> {
        (self.record_type() == RecordType::HEADER_BUILD_ID).then_some(())?;
        let (rec, misc_) = (self.sized(), self.header().misc);
        let len = if misc_ & misc::BUILD_ID_SIZE != 0 {
            usize::from(*rec.get(32)?).min(20)
        } else {
            20
        };
        let name = rec.get(36..)?;
        Some(BuildIdEvent {
            pid: self.endian.u32(rec, 8)? as i32,
            build_id: rec.get(12..12 + len)?,
            filename: &name[..name.iter().position(|&c| c == 0)?],
            misc: misc_,
        })
    }

    /// The FORK or EXIT fields, if this is one.
    pub fn task(&self) -> Option<Task> {
        let rt = self.record_type();
        (rt == RecordType::FORK || rt == RecordType::EXIT).then_some(())?;
        let (rec, e) = (self.sized(), self.endian);
        Some(Task {
            pid: e.u32(rec, 8)?,
            ppid: e.u32(rec, 12)?,
            tid: e.u32(rec, 16)?,
            ptid: e.u32(rec, 20)?,
            time: e.u64(rec, 24)?,
        })
    }
}

/// The `sample_id` trailer fields present in a non-sample record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleId {
    /// `pid` of `TID`.
    pub pid: Option<u32>,
    /// `tid` of `TID`.
    pub tid: Option<u32>,
    /// `TIME`
    pub time: Option<u64>,
    /// `IDENTIFIER`, else `ID`.
    pub id: Option<u64>,
    /// `cpu` of `CPU`.
    pub cpu: Option<u32>,
}

/// A SAMPLE record read through its attr's [`SampleLayout`]. Each accessor returns `None` when the
/// field is not in the layout or lies beyond the record.
#[derive(Clone, Copy, Debug)]
pub struct Sample<'a> {
    bytes: &'a [u8],
    endian: Endian,
    layout: &'a SampleLayout,
}

impl<'a> Sample<'a> {
    /// A view of the SAMPLE record `bytes` laid out as `layout` says (for readers that keep a
    /// layout rather than the attr).
    pub fn new(bytes: &'a [u8], endian: Endian, layout: &'a SampleLayout) -> Sample<'a> {
        Sample {
            bytes,
            endian,
            layout,
        }
    }

    #[inline]
    fn u64_at(&self, off: Option<u16>) -> Option<u64> {
        self.endian.u64(self.bytes, usize::from(off?))
    }
    #[inline]
    fn u32_at(&self, off: Option<u16>, plus: usize) -> Option<u32> {
        self.endian.u32(self.bytes, usize::from(off?) + plus)
    }

    /// `misc & PERF_RECORD_MISC_CPUMODE_MASK`.
    pub fn cpumode(&self) -> u16 {
        self.endian.u16(self.bytes, 4).unwrap_or(0) & misc::CPUMODE_MASK
    }
    /// `PERF_SAMPLE_IP`
    pub fn ip(&self) -> Option<u64> {
        self.u64_at(self.layout.ip)
    }
    /// `pid` of `PERF_SAMPLE_TID`
    pub fn pid(&self) -> Option<u32> {
        self.u32_at(self.layout.tid, 0)
    }
    /// `tid` of `PERF_SAMPLE_TID`
    pub fn tid(&self) -> Option<u32> {
        self.u32_at(self.layout.tid, 4)
    }
    /// `PERF_SAMPLE_TIME`
    pub fn time(&self) -> Option<u64> {
        self.u64_at(self.layout.time)
    }
    /// `PERF_SAMPLE_ADDR`
    pub fn addr(&self) -> Option<u64> {
        self.u64_at(self.layout.addr)
    }
    /// `PERF_SAMPLE_IDENTIFIER`, else `PERF_SAMPLE_ID`.
    pub fn id(&self) -> Option<u64> {
        self.u64_at(self.layout.sample_id_offset)
    }
    /// `cpu` of `PERF_SAMPLE_CPU`
    pub fn cpu(&self) -> Option<u32> {
        self.u32_at(self.layout.cpu, 0)
    }
    /// `PERF_SAMPLE_PERIOD`
    pub fn period(&self) -> Option<u64> {
        self.u64_at(self.layout.period)
    }

    /// `PERF_SAMPLE_CALLCHAIN`: the callchain entries, context markers included, or `None` if the
    /// layout has none or `nr` runs past the record.
    pub fn callchain(&self) -> Option<Callchain<'a>> {
        let at = self.callchain_bytes()?;
        Some(Callchain {
            ips: self.bytes.get(at.start + 8..at.end)?,
            endian: self.endian,
        })
    }

    /// Where `PERF_SAMPLE_CALLCHAIN` lies in the record (its `nr` and entries), for a stage that
    /// writes the sample again with another callchain; `None` as for [`Sample::callchain`].
    pub fn callchain_bytes(&self) -> Option<std::ops::Range<usize>> {
        if self.layout.sample_type & sample::CALLCHAIN == 0 {
            return None;
        }
        let at = usize::from(self.layout.fixed_end);
        let at = at + self.layout.read_size(self.bytes, at, self.endian)?;
        let nr = usize::try_from(self.endian.u64(self.bytes, at)?).ok()?;
        let end = (at + 8).checked_add(nr.checked_mul(8)?)?;
        (end <= self.bytes.len()).then_some(at..end)
    }
}

impl<'a> Sample<'a> {
    /// `PERF_SAMPLE_RAW`: the raw payload (a tracepoint's fields, see [`crate::tracing`]), or
    /// `None` if the layout has none or its `size` runs past the record.
    pub fn raw(&self) -> Option<&'a [u8]> {
        let t = self.layout.sample_type;
        if t & sample::RAW == 0 {
            return None;
        }
        let mut at = usize::from(self.layout.fixed_end);
        at += self.layout.read_size(self.bytes, at, self.endian)?;
        if t & sample::CALLCHAIN != 0 {
            let nr = usize::try_from(self.endian.u64(self.bytes, at)?).ok()?;
            at = at.checked_add(8)?.checked_add(nr.checked_mul(8)?)?;
        }
        let size = self.endian.u32(self.bytes, at)? as usize;
        self.bytes.get(at + 4..at.checked_add(4 + size)?)
    }
}

/// Callchain entries of a sample, borrowed from the record.
#[derive(Clone, Copy, Debug)]
pub struct Callchain<'a> {
    ips: &'a [u8],
    endian: Endian,
}

impl<'a> Callchain<'a> {
    /// Number of entries (context markers included).
    pub fn len(&self) -> usize {
        self.ips.len() / 8
    }
    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.ips.is_empty()
    }
    /// The entries' bytes as the record holds them (`nr` 8-byte entries, markers included).
    pub fn bytes(&self) -> &'a [u8] {
        self.ips
    }
    /// Raw entries, context markers included.
    pub fn entries(&self) -> impl Iterator<Item = u64> + 'a {
        let e = self.endian;
        self.ips
            .chunks_exact(8)
            .map(move |c| e.u64(c, 0).unwrap_or(0))
    }
    /// `(cpumode, ip)` for every frame, context markers applied: a marker sets the cpumode of the
    /// frames after it, starting from `initial` (the sample's cpumode). The cookie after
    /// `PERF_CONTEXT_USER_DEFERRED` is no frame: a sample whose deferred user frames were not
    /// stitched in (see the `stitch` stage) has its kernel frames only.
    pub fn frames(&self, initial: u16) -> impl Iterator<Item = (u16, u64)> + 'a {
        let mut mode = initial;
        let mut cookie = false;
        self.entries().filter_map(move |ip| {
            if std::mem::take(&mut cookie) {
                return None;
            }
            if ip >= context::MAX {
                mode = match ip {
                    context::HV => misc::HYPERVISOR,
                    context::KERNEL => misc::KERNEL,
                    context::USER => misc::USER,
                    context::USER_DEFERRED => {
                        cookie = true;
                        misc::USER
                    }
                    context::GUEST_KERNEL => misc::GUEST_KERNEL,
                    context::GUEST_USER => misc::GUEST_USER,
                    _ => mode,
                };
                None
            } else {
                Some((mode, ip))
            }
        })
    }

    /// The cookie of a callchain that ends in `PERF_CONTEXT_USER_DEFERRED, cookie` (its user
    /// frames are in the CALLCHAIN_DEFERRED record of that cookie), as perf tests it.
    pub fn deferred_cookie(&self) -> Option<u64> {
        let n = self.len();
        if n < 2 {
            return None;
        }
        let e = self.endian;
        (e.u64(self.ips, 8 * (n - 2))? == context::USER_DEFERRED)
            .then(|| e.u64(self.ips, 8 * (n - 1)))?
    }
}

/// A CALLCHAIN_DEFERRED record (`PERF_RECORD_CALLCHAIN_DEFERRED`, 22): `u64 cookie; u64 nr;
/// u64 ips[nr]; struct sample_id`, the user frames of the samples whose callchain ends in
/// `PERF_CONTEXT_USER_DEFERRED, cookie`, written when the task returns to user space.
#[derive(Clone, Copy, Debug)]
pub struct CallchainDeferred<'a> {
    /// `cookie`
    pub cookie: u64,
    /// `ips`, borrowed from the record: the user frames, innermost first.
    pub ips: Callchain<'a>,
}

impl<'a> Record<'a> {
    /// The CALLCHAIN_DEFERRED fields, if this is one whose `nr` fits the record.
    pub fn callchain_deferred(&self) -> Option<CallchainDeferred<'a>> {
        (self.record_type() == RecordType::CALLCHAIN_DEFERRED).then_some(())?;
        let rec = self.sized();
        let e = self.endian;
        let nr = usize::try_from(e.u64(rec, 16)?).ok()?;
        let end = nr.checked_mul(8)?.checked_add(24)?;
        Some(CallchainDeferred {
            cookie: e.u64(rec, 8)?,
            ips: Callchain {
                ips: rec.get(24..end)?,
                endian: e,
            },
        })
    }
}

/// How an MMAP2 identifies its file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileId<'a> {
    /// MMAP (no identity).
    None,
    /// MMAP2 with device and inode.
    Inode {
        /// `maj`
        maj: u32,
        /// `min`
        min: u32,
        /// `ino`
        ino: u64,
        /// `ino_generation`
        ino_generation: u64,
    },
    /// MMAP2 with `PERF_RECORD_MISC_MMAP_BUILD_ID`: the build id bytes.
    BuildId(&'a [u8]),
}

/// Fields of MMAP (`PERF_RECORD_MMAP`) and MMAP2 (`PERF_RECORD_MMAP2`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mmap<'a> {
    /// `pid` (-1 as u32 for kernel maps)
    pub pid: u32,
    /// `tid`
    pub tid: u32,
    /// `addr` (`start` in perf's tools)
    pub addr: u64,
    /// `len`
    pub len: u64,
    /// `pgoff`
    pub pgoff: u64,
    /// The MMAP2 file identity.
    pub file_id: FileId<'a>,
    /// `prot` (MMAP2)
    pub prot: u32,
    /// `flags` (MMAP2)
    pub flags: u32,
    /// `filename`, without its NUL.
    pub filename: &'a [u8],
    /// cpumode from the header's misc.
    pub cpumode: u16,
}

/// Fields of COMM (`PERF_RECORD_COMM`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Comm<'a> {
    /// `pid`
    pub pid: u32,
    /// `tid`
    pub tid: u32,
    /// `comm`, without its NUL.
    pub comm: &'a [u8],
    /// `misc & PERF_RECORD_MISC_COMM_EXEC`: the thread exec'd.
    pub exec: bool,
}

/// Fields of FORK and EXIT (`PERF_RECORD_FORK`, `PERF_RECORD_EXIT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Task {
    /// `pid`
    pub pid: u32,
    /// `ppid`
    pub ppid: u32,
    /// `tid`
    pub tid: u32,
    /// `ptid`
    pub ptid: u32,
    /// `time`
    pub time: u64,
}

/// Fields of HEADER_BUILD_ID (`struct perf_record_header_build_id`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuildIdEvent<'a> {
    /// `pid`: the machine (−1, `HOST_KERNEL_ID`, for the host).
    pub pid: i32,
    /// The build id: `data[..size]`.
    pub build_id: &'a [u8],
    /// `filename`, without its NUL.
    pub filename: &'a [u8],
    /// The header's `misc`: cpumode and BUILD_ID_SIZE.
    pub misc: u16,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn le(words: &[u64]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn a_deferred_callchain_has_its_cookie_and_no_frame_for_it() {
        let ips = le(&[context::KERNEL, 0xffff_1000, context::USER_DEFERRED, 42]);
        let c = Callchain {
            ips: &ips,
            endian: Endian::Little,
        };
        assert_eq!(c.deferred_cookie(), Some(42));
        let frames: Vec<(u16, u64)> = c.frames(misc::USER).collect();
        assert_eq!(frames, [(misc::KERNEL, 0xffff_1000)]);
        let plain = le(&[context::USER, 0x401000, 42]);
        let c = Callchain {
            ips: &plain,
            endian: Endian::Little,
        };
        assert_eq!(c.deferred_cookie(), None);
        assert_eq!(c.frames(misc::KERNEL).count(), 2);
    }

    #[test]
    fn callchain_deferred_records_are_read_and_bounded() {
        // header (type 22, misc USER, size 40), cookie 7, nr 2, two ips.
        let mut rec = vec![22, 0, 0, 0, 2, 0, 40, 0];
        rec.extend(le(&[7, 2, 0x401000, 0x402000]));
        let r = Record::new(&rec, Endian::Little, None);
        let d = r.callchain_deferred().unwrap();
        assert_eq!(d.cookie, 7);
        assert_eq!(d.ips.entries().collect::<Vec<_>>(), [0x401000, 0x402000]);
        // An `nr` past the record reads as nothing, not as what follows.
        rec[16] = 3;
        assert!(Record::new(&rec, Endian::Little, None)
            .callchain_deferred()
            .is_none());
    }
}

//! The records `perf record` synthesizes before the kernel's: HEADER_ATTR, the HEADER_FEATURE
//! records (feature payloads laid out as `tools/perf/util/header.c` writes the file-mode sections),
//! ID_INDEX, the kernel MMAP, and the COMM/MMAP2 of processes that already run
//! (`tools/perf/util/synthetic-events.c`, from `/proc`). Native byte order, as the kernel's records.

use std::fs;

use perfpipe_stream::format::build::{self, RecordWriter, Trailer};
use perfpipe_stream::format::{
    feature, misc, sample, Comm, Endian, FileId, Mmap, RecordType, SampleId, SampleLayout,
};

const E: Endian = Endian::Little;

/// The machine's byte order (the kernel writes records in it).
pub fn endian() -> Endian {
    if cfg!(target_endian = "little") {
        E
    } else {
        Endian::Big
    }
}

/// `do_write_string()`: `u32 len` (the string, its NUL and padding to 64), then the bytes.
pub fn string(out: &mut Vec<u8>, s: &str) {
    let len = (s.len() + 1).next_multiple_of(64);
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    let at = out.len();
    out.extend_from_slice(s.as_bytes());
    out.resize(at + len, 0);
}

/// A HEADER_FEATURE record: `u64 feat_id` then the section bytes, not padded (as perf writes it).
/// `id` is one of [`feature`](perfpipe_stream::format::feature).
pub fn feature_record(id: u32, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + data.len());
    build::feature(&mut out, endian(), id, data);
    out
}

/// The HEADER_FEATURE end mark (`HEADER_LAST_FEATURE`).
pub fn last_feature() -> Vec<u8> {
    feature_record(feature::LAST, &[])
}

/// A string feature (HOSTNAME, OSRELEASE, VERSION, ARCH).
pub fn string_feature(id: u32, s: &str) -> Vec<u8> {
    let mut d = Vec::new();
    string(&mut d, s);
    feature_record(id, &d)
}

/// NRCPUS: `u32 nr_cpus_available, nr_cpus_online`.
pub fn nrcpus(available: u32, online: u32) -> Vec<u8> {
    let mut d = available.to_ne_bytes().to_vec();
    d.extend_from_slice(&online.to_ne_bytes());
    feature_record(feature::NRCPUS, &d)
}

/// CMDLINE: `u32 nr`, then `nr` strings.
pub fn cmdline(args: &[String]) -> Vec<u8> {
    let mut d = (args.len() as u32).to_ne_bytes().to_vec();
    for a in args {
        string(&mut d, a);
    }
    feature_record(feature::CMDLINE, &d)
}

/// One event of EVENT_DESC and HEADER_ATTR: the attr bytes, its name, its ids.
#[derive(Clone, Debug)]
pub struct EventDesc {
    /// `perf_event_attr` bytes.
    pub attr: Vec<u8>,
    /// The name perf shows (`cpu-clock`).
    pub name: String,
    /// Kernel ids of the opened fds.
    pub ids: Vec<u64>,
}

/// EVENT_DESC: `u32 nr, attr_size`, then per event the attr, `u32 nr_ids`, the name, the ids.
pub fn event_desc(events: &[EventDesc]) -> Vec<u8> {
    let size = events.first().map_or(0, |e| e.attr.len());
    let mut d = (events.len() as u32).to_ne_bytes().to_vec();
    d.extend_from_slice(&(size as u32).to_ne_bytes());
    for e in events {
        d.extend_from_slice(&e.attr);
        d.extend_from_slice(&(e.ids.len() as u32).to_ne_bytes());
        string(&mut d, &e.name);
        for id in &e.ids {
            d.extend_from_slice(&id.to_ne_bytes());
        }
    }
    feature_record(feature::EVENT_DESC, &d)
}

/// HEADER_ATTR: the attr then its ids.
pub fn header_attr(e: &EventDesc) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + e.attr.len() + 8 * e.ids.len());
    build::header_attr(&mut out, endian(), &e.attr, &e.ids);
    out
}

/// One ID_INDEX entry: `{u64 id, idx, cpu, tid}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdEntry {
    /// The kernel id.
    pub id: u64,
    /// Index of the attr.
    pub idx: u64,
    /// The cpu the fd was opened on.
    pub cpu: u64,
    /// The thread it was opened for (`-1` as u64 for all).
    pub tid: u64,
}

/// ID_INDEX.
pub fn id_index(entries: &[IdEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + 32 * entries.len());
    let mut w = RecordWriter::new(&mut out, RecordType::ID_INDEX, 0, endian());
    w.u64(entries.len() as u64);
    for e in entries {
        w.u64(e.id).u64(e.idx).u64(e.cpu).u64(e.tid);
    }
    w.finish();
    out
}

/// The `sample_id` bits of every attr `record` opens ([`RecordConfig`](super::RecordConfig)
/// always samples `IDENTIFIER|IP|TID|TIME|CPU`, with `sample_id_all`).
const SAMPLE_ID_BITS: u64 = sample::TID | sample::TIME | sample::CPU | sample::IDENTIFIER;

/// The `sample_id` trailer of a synthesized record: pid/tid set, time, cpu and identifier 0
/// (id 0 tells perf's readers "the first attr").
fn trailer(pid: u32, tid: u32) -> Trailer<'static> {
    let layout = SampleLayout::new(SAMPLE_ID_BITS, 0, true).trailer;
    let id = SampleId {
        pid: Some(pid),
        tid: Some(tid),
        ..SampleId::default()
    };
    Trailer::SampleId(id, layout.expect("sample_id_all"))
}

/// The kernel's map as perf synthesizes it (`perf_event__synthesize_kernel_mmap()`): MMAP, pid
/// −1, misc KERNEL, `[kernel.kallsyms]_text` from `_text` to the highest kernel symbol, pgoff =
/// `_text`. `None` when `/proc/kallsyms` hides addresses.
pub fn kernel_mmap() -> Option<Vec<u8>> {
    let syms = fs::read_to_string("/proc/kallsyms").ok()?;
    let mut text = None;
    let mut end = 0u64;
    for line in syms.lines() {
        let mut f = line.split_whitespace();
        let (Some(addr), Some(_), Some(name)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if f.next().is_some() {
            continue; // a module symbol: "[module]"
        }
        let Ok(addr) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        if name == "_text" {
            text = Some(addr);
        }
        end = end.max(addr);
    }
    let start = text.filter(|&t| t != 0)?;
    let m = Mmap {
        pid: u32::MAX,
        tid: 0,
        addr: start,
        len: end.saturating_sub(start).max(1),
        pgoff: start,
        file_id: FileId::None,
        prot: 0,
        flags: 0,
        filename: b"[kernel.kallsyms]_text",
        cpumode: misc::KERNEL,
    };
    let mut out = Vec::with_capacity(96);
    build::mmap(&mut out, endian(), &m, trailer(u32::MAX, 0));
    Some(out)
}

/// PERF_RECORD_COMM of a running thread.
pub fn comm(pid: u32, tid: u32, name: &str) -> Vec<u8> {
    let c = Comm {
        pid,
        tid,
        comm: name.as_bytes(),
        exec: false,
    };
    let mut out = Vec::with_capacity(64);
    build::comm(&mut out, endian(), &c, trailer(pid, tid));
    out
}

/// One line of `/proc/<pid>/maps` as an MMAP2 record, if it is an executable mapping (perf
/// synthesizes only those without `--data`).
pub fn maps_line(pid: u32, line: &str) -> Option<Vec<u8>> {
    let mut f = line.splitn(6, char::is_whitespace);
    let (range, perms, pgoff, dev, ino) = (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
    let name = f.next().map(str::trim).unwrap_or("");
    let p = perms.as_bytes();
    if p.get(2) != Some(&b'x') {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    let pgoff = u64::from_str_radix(pgoff, 16).ok()?;
    let (maj, min) = dev.split_once(':')?;
    let maj = u32::from_str_radix(maj, 16).ok()?;
    let min = u32::from_str_radix(min, 16).ok()?;
    let ino: u64 = ino.parse().ok()?;
    let name = if name.is_empty() { "//anon" } else { name };
    let mut prot = 0u32;
    for (i, bit) in [libc::PROT_READ, libc::PROT_WRITE, libc::PROT_EXEC]
        .into_iter()
        .enumerate()
    {
        if p.get(i).is_some_and(|&c| c != b'-') {
            prot |= bit as u32;
        }
    }
    let flags = if p.get(3) == Some(&b's') {
        libc::MAP_SHARED
    } else {
        libc::MAP_PRIVATE
    } as u32;
    let m = Mmap {
        pid,
        tid: pid,
        addr: start,
        len: end - start,
        pgoff,
        file_id: FileId::Inode {
            maj,
            min,
            ino,
            ino_generation: 0,
        },
        prot,
        flags,
        filename: name.as_bytes(),
        cpumode: misc::USER,
    };
    let mut out = Vec::with_capacity(128);
    build::mmap2(&mut out, endian(), &m, trailer(pid, pid));
    Some(out)
}

/// COMM of every thread of `pid` and MMAP2 of its executable maps, from `/proc` (a process that
/// exits meanwhile gives what could be read).
pub fn process(pid: u32, out: &mut Vec<u8>) {
    let read = |p: String| fs::read_to_string(p).ok();
    let tids: Vec<u32> = fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    for tid in tids {
        if let Some(name) = read(format!("/proc/{pid}/task/{tid}/comm")) {
            out.extend_from_slice(&comm(pid, tid, name.trim_end_matches('\n')));
        }
    }
    if let Some(maps) = read(format!("/proc/{pid}/maps")) {
        for line in maps.lines() {
            if let Some(r) = maps_line(pid, line) {
                out.extend_from_slice(&r);
            }
        }
    }
}

/// Every process in `/proc`.
pub fn all_pids() -> Vec<u32> {
    let mut v: Vec<u32> = fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_padded_to_64() {
        let mut d = Vec::new();
        string(&mut d, "x86_64");
        assert_eq!(d.len(), 4 + 64);
        assert_eq!(u32::from_ne_bytes(d[..4].try_into().unwrap()), 64);
        assert_eq!(&d[4..11], b"x86_64\0");
    }

    #[test]
    fn maps_lines_become_mmap2_of_exec_maps_only() {
        let line = "55d0c8a00000-55d0c8a28000 r-xp 00002000 fe:01 1234   /usr/bin/cat";
        let r = maps_line(7, line).unwrap();
        assert_eq!(u32::from_ne_bytes(r[..4].try_into().unwrap()), 10);
        assert_eq!(r.len() % 8, 0);
        let len = u64::from_ne_bytes(r[24..32].try_into().unwrap());
        assert_eq!(len, 0x28000);
        assert_eq!(u64::from_ne_bytes(r[32..40].try_into().unwrap()), 0x2000);
        assert_eq!(u32::from_ne_bytes(r[40..44].try_into().unwrap()), 0xfe);
        assert!(r.windows(12).any(|w| w == b"/usr/bin/cat"));
        assert!(maps_line(7, "7f00-7f10 rw-p 00000000 00:00 0 [heap]").is_none());
        let anon = maps_line(7, "7f00-7f10 r-xp 00000000 00:00 0").unwrap();
        assert!(anon.windows(6).any(|w| w == b"//anon"));
    }

    #[test]
    fn features_end_with_the_mark() {
        let m = last_feature();
        assert_eq!(m.len(), 16);
        assert_eq!(u32::from_ne_bytes(m[..4].try_into().unwrap()), 80);
        assert_eq!(u64::from_ne_bytes(m[8..].try_into().unwrap()), 32);
    }
}

//! Synthetic perf pipe-mode streams: the workload of `perfpipe bench --synthetic` and the
//! benchmarks ([`workload`]), and the streams the tests build. A pipe header, one attr
//! (`IP|TID|TIME|ID|CPU|PERIOD|CALLCHAIN`, `sample_id_all`; cpu-clock unless
//! [`SynthStream::with_event`] names another event), then whatever records the caller adds, laid
//! out as `perf record -o -` lays them out (sample-id trailers included), so that `perf script`
//! reads the result. [`decoded`] frames any stream as `decode` does, for tests of later stages.
use perfpipe_core::{harness, Batch};

use crate::decode::DecodeConfig;
use crate::format::build::{self, RecordWriter, Trailer};
use crate::format::{
    misc, sample, Comm, Endian, FileId, Mmap, RecordType, SampleId, SampleLayout, Task,
    TrailerLayout, PIPE_MAGIC,
};

/// The attr's `sample_type`.
pub const SAMPLE_TYPE: u64 = sample::IP
    | sample::TID
    | sample::TIME
    | sample::ID
    | sample::CPU
    | sample::PERIOD
    | sample::CALLCHAIN;
/// The event id of every record.
pub const ID: u64 = 1;

/// Builds a stream record by record.
#[derive(Clone, Debug)]
pub struct SynthStream {
    buf: Vec<u8>,
    e: Endian,
}

impl Default for SynthStream {
    fn default() -> SynthStream {
        SynthStream::new()
    }
}

impl SynthStream {
    /// A little-endian stream with its header and attr.
    pub fn new() -> SynthStream {
        SynthStream::with_event(1, 0)
    }

    /// The same stream with another event: the attr's `type` and `config` (`new` is cpu-clock,
    /// software 0).
    pub fn with_event(type_: u32, config: u64) -> SynthStream {
        let e = Endian::Little;
        let mut s = SynthStream {
            buf: Vec::with_capacity(1 << 20),
            e,
        };
        s.buf.extend_from_slice(&PIPE_MAGIC.to_le_bytes());
        s.buf.extend_from_slice(&16u64.to_le_bytes());
        let mut attr = vec![0u8; 128];
        attr[0..4].copy_from_slice(&type_.to_le_bytes());
        attr[4..8].copy_from_slice(&128u32.to_le_bytes()); // size
        attr[8..16].copy_from_slice(&config.to_le_bytes());
        attr[16..24].copy_from_slice(&20_000u64.to_le_bytes()); // sample_period
        attr[24..32].copy_from_slice(&SAMPLE_TYPE.to_le_bytes());
        // disabled, mmap, comm, task, sample_id_all, mmap2, comm_exec
        let flags: u64 = 1 | 1 << 8 | 1 << 9 | 1 << 13 | 1 << 18 | 1 << 23 | 1 << 24;
        attr[40..48].copy_from_slice(&flags.to_le_bytes());
        build::header_attr(&mut s.buf, e, &attr, &[ID]);
        s
    }

    /// The sample-id trailer of the attr: TID, TIME, ID, CPU.
    fn trailer(pid: u32, tid: u32, time: u64, cpu: u32) -> Trailer<'static> {
        let layout: TrailerLayout = SampleLayout::new(SAMPLE_TYPE, 0, true)
            .trailer
            .expect("sample_id_all");
        let id = SampleId {
            pid: Some(pid),
            tid: Some(tid),
            time: Some(time),
            id: Some(ID),
            cpu: Some(cpu),
        };
        Trailer::SampleId(id, layout)
    }

    /// PERF_RECORD_COMM.
    pub fn comm(&mut self, pid: u32, tid: u32, name: &str, exec: bool, time: u64) {
        let c = Comm {
            pid,
            tid,
            comm: name.as_bytes(),
            exec,
        };
        build::comm(&mut self.buf, self.e, &c, Self::trailer(pid, tid, time, 0));
    }

    /// PERF_RECORD_FORK of `pid` from `ppid` (a new process: tid = pid).
    pub fn fork(&mut self, pid: u32, ppid: u32, time: u64) {
        let t = Task {
            pid,
            ppid,
            tid: pid,
            ptid: ppid,
            time,
        };
        let trailer = Self::trailer(pid, pid, time, 0);
        build::task(&mut self.buf, self.e, RecordType::FORK, 0, &t, trailer);
    }

    /// PERF_RECORD_MMAP2 of an executable file mapping (`maj:min ino` given).
    pub fn mmap2(&mut self, pid: u32, addr: u64, len: u64, path: &str, ino: u64, time: u64) {
        let m = Mmap {
            pid,
            tid: pid,
            addr,
            len,
            pgoff: 0,
            file_id: FileId::Inode {
                maj: 8,
                min: 1,
                ino,
                ino_generation: 0,
            },
            prot: 5,  // PROT_READ|PROT_EXEC
            flags: 2, // MAP_PRIVATE
            filename: path.as_bytes(),
            cpumode: misc::USER,
        };
        build::mmap2(&mut self.buf, self.e, &m, Self::trailer(pid, pid, time, 0));
    }

    /// PERF_RECORD_SAMPLE with a callchain (context markers included as given).
    pub fn sample(&mut self, pid: u32, tid: u32, time: u64, cpu: u32, ip: u64, chain: &[u64]) {
        let mut w = RecordWriter::new(&mut self.buf, RecordType::SAMPLE, misc::USER, self.e);
        w.u64(ip)
            .u32(pid)
            .u32(tid)
            .u64(time)
            .u64(ID)
            .u32(cpu)
            .u32(0);
        w.u64(20_000); // period
        w.u64(chain.len() as u64);
        for &ip in chain {
            w.u64(ip);
        }
        w.finish();
    }

    /// PERF_RECORD_CALLCHAIN_DEFERRED: the user frames `ips` of the samples whose callchain ends
    /// in `PERF_CONTEXT_USER_DEFERRED, cookie`.
    pub fn callchain_deferred(&mut self, pid: u32, tid: u32, time: u64, cookie: u64, ips: &[u64]) {
        let mut w = RecordWriter::new(
            &mut self.buf,
            RecordType::CALLCHAIN_DEFERRED,
            misc::USER,
            self.e,
        );
        w.u64(cookie).u64(ips.len() as u64);
        for &ip in ips {
            w.u64(ip);
        }
        w.trailer(Self::trailer(pid, tid, time, 0));
        w.finish();
    }

    /// Sets bits of the attr's flags word (`flag::DEFER_CALLCHAIN`…).
    pub fn set_attr_flags(&mut self, bits: u64) {
        // The pipe header (16 bytes), the HEADER_ATTR's header (8), `flags` at 40.
        let at = 16 + 8 + 40;
        let f = u64::from_le_bytes(self.buf[at..at + 8].try_into().expect("8 bytes")) | bits;
        self.buf[at..at + 8].copy_from_slice(&f.to_le_bytes());
    }

    /// PERF_RECORD_FINISHED_ROUND.
    pub fn finished_round(&mut self) {
        build::empty(&mut self.buf, RecordType::FINISHED_ROUND, self.e);
    }

    /// The stream so far.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// The stream.
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }
}

/// A deterministic profile-shaped workload of about `target` bytes: 8 processes forked from one
/// parent, each mapping 16 libraries, then samples (90 % of records) with 4–20-frame user
/// callchains spread over those maps, across 2 CPUs, and a FINISHED_ROUND every 1000 records.
pub fn workload(target: usize) -> Vec<u8> {
    let mut s = SynthStream::new();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut time = 1_000_000_000u64;
    let pids: Vec<u32> = (0..8).map(|i| 1000 + i).collect();
    s.comm(999, 999, "bench", true, time);
    for &pid in &pids {
        time += 1000;
        s.fork(pid, 999, time);
        s.comm(pid, pid, &format!("worker{}", pid - 1000), true, time);
        for lib in 0..16u64 {
            let path = format!("/usr/lib/x86_64-linux-gnu/libbench{lib}.so");
            s.mmap2(
                pid,
                0x7f00_0000_0000 + lib * 0x10_0000,
                0x8_0000,
                &path,
                100 + lib,
                time,
            );
        }
    }
    let mut records = 0u64;
    let mut chain = Vec::with_capacity(24);
    while s.bytes().len() < target {
        let pid = pids[(next() % 8) as usize];
        time += 20_000;
        chain.clear();
        chain.push(crate::format::context::USER);
        for _ in 0..4 + next() % 17 {
            let lib = next() % 16;
            chain.push(0x7f00_0000_0000 + lib * 0x10_0000 + next() % 0x8_0000);
        }
        s.sample(pid, pid, time, (next() % 2) as u32, chain[1], &chain);
        records += 1;
        if records % 1000 == 0 {
            s.finished_round();
        }
    }
    s.into_bytes()
}

/// `stream` decoded into framed batches of about `chunk` input bytes each, as the `read` and
/// `decode` stages would give them to the next stage.
///
/// # Panics
/// When the stream does not decode.
pub fn decoded(stream: &[u8], chunk: usize) -> Vec<Batch> {
    let raw: Vec<Batch> = stream
        .chunks(chunk)
        .scan(0u64, |off, c| {
            let b = Batch {
                data: c.to_vec(),
                stream_offset: *off,
                ..Batch::default()
            };
            *off += c.len() as u64;
            Some(b)
        })
        .collect();
    harness::run_stage(&mut DecodeConfig::default().build(), raw).expect("decodes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_is_framed_and_sized() {
        let w = workload(200_000);
        assert!(w.len() >= 200_000 && w.len() < 210_000);
        // Walk the records: every size is a multiple of 8 and the walk ends on the last byte.
        let mut pos = 16;
        let mut samples = 0;
        while pos < w.len() {
            let t = u32::from_le_bytes(w[pos..pos + 4].try_into().unwrap());
            let size = u16::from_le_bytes(w[pos + 6..pos + 8].try_into().unwrap()) as usize;
            assert!(size >= 8 && size % 8 == 0);
            samples += usize::from(t == RecordType::SAMPLE.0);
            pos += size;
        }
        assert_eq!(pos, w.len());
        assert!(samples > 1000);
    }
}

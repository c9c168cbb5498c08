//! Synthetic input for build-id injection: the stream `perf bench internals inject-build-id`
//! generates (`tools/perf/bench/inject-buildid.c`), byte for byte in layout, for our benchmark and
//! tests.
//!
//! Stream: pipe header; HEADER_ATTR (software task-clock, exclude_kernel, sample_id_all,
//! sample_type IDENTIFIER|IP|TID|TIME, `attr.size` left 0 as perf's bench leaves it, one id 0);
//! FORK of the workload pid (FORK_EXEC, 32 zero trailer bytes); then `nr_mmaps` × { MMAP2 of a
//! random pool dso (maj 8, min 0, ino = pool index, start 0x400000 + ino × 8192, len 4096,
//! PROT_EXEC, a 32-byte trailer with a random time in slot 2), `nr_samples` SAMPLEs at the map's
//! start, time = t + k × 1000 }, FINISHED_ROUND after every 10th MMAP2.

use std::path::{Path, PathBuf};

use crate::format::build::{self, RecordWriter, Trailer};
use crate::format::{misc, Endian, FileId, Mmap, RecordType, Task, PIPE_MAGIC};

/// A small deterministic generator (xorshift64*), standing in for perf's `rand()`.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (0 is replaced).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    /// The next value below `n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
    }
}

/// Collects up to `max` regular files under `root` that have a GNU build id, as the bench's
/// `nftw(FTW_PHYS)` walk does (symlinks not followed), in directory order; paths are canonical.
pub fn collect_dsos(root: &Path, max: usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut entries: Vec<_> = rd.filter_map(|e| e.ok()).collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            if out.len() >= max {
                return out;
            }
            let Ok(ft) = e.file_type() else { continue };
            let p = e.path();
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file()
                && matches!(
                    crate::model::dso::read_build_id(&p, None, false),
                    crate::model::dso::Outcome::Found(_)
                )
            {
                out.push(std::fs::canonicalize(&p).unwrap_or(p));
            }
        }
    }
    out
}

/// Sizes of one generated stream.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// MMAP2 records (perf's `-m`, default 100).
    pub nr_mmaps: usize,
    /// SAMPLEs after each MMAP2 (perf's `-n`, default 100).
    pub nr_samples: usize,
    /// The workload pid.
    pub pid: u32,
}

impl Default for Shape {
    fn default() -> Shape {
        Shape {
            nr_mmaps: 100,
            nr_samples: 100,
            pid: 4242,
        }
    }
}

/// Generates one stream (little-endian) over the dso `pool`.
pub fn generate(pool: &[PathBuf], shape: Shape, rng: &mut Rng) -> Vec<u8> {
    let e = Endian::Little;
    let mut out = Vec::with_capacity(shape.nr_mmaps * (shape.nr_samples * 40 + 200));
    out.extend_from_slice(&PIPE_MAGIC.to_le_bytes());
    out.extend_from_slice(&16u64.to_le_bytes());

    // HEADER_ATTR: struct perf_event_attr (128 bytes, size field 0) + id 0.
    let mut attr = [0u8; 128];
    attr[..4].copy_from_slice(&1u32.to_le_bytes()); // PERF_TYPE_SOFTWARE
    attr[8..16].copy_from_slice(&1u64.to_le_bytes()); // PERF_COUNT_SW_TASK_CLOCK
    let sample_type: u64 = (1 << 16) | 1 | 2 | 4; // IDENTIFIER | IP | TID | TIME
    attr[24..32].copy_from_slice(&sample_type.to_le_bytes());
    let flags: u64 = (1 << 5) | (1 << 18); // exclude_kernel | sample_id_all
    attr[40..48].copy_from_slice(&flags.to_le_bytes());
    build::header_attr(&mut out, e, &attr, &[0]);

    // The bench writes a 32-byte zero trailer after FORK and MMAP2 whatever the attr (whose
    // sample_id trailer would be 24 bytes); perf reads it from the end, so only its last 24 count.
    let pid = shape.pid;
    let fork = Task {
        pid,
        ppid: 1,
        tid: pid,
        ptid: 1,
        time: 0,
    };
    let trailer = Trailer::Raw(&[0; 32]);
    build::task(
        &mut out,
        e,
        RecordType::FORK,
        misc::COMM_EXEC,
        &fork,
        trailer,
    );

    for m in 0..shape.nr_mmaps {
        let ino = rng.below(pool.len() as u64);
        let start = 0x40_0000 + ino * 8192;
        let time = rng.below(1_000_000);
        let name = pool[ino as usize].as_os_str().as_encoded_bytes();
        let map = Mmap {
            pid,
            tid: pid,
            addr: start,
            len: 4096,
            pgoff: 0,
            file_id: FileId::Inode {
                maj: 8,
                min: 0,
                ino,
                ino_generation: 0,
            },
            prot: 4, // PROT_EXEC
            flags: 0,
            filename: name,
            cpumode: misc::USER,
        };
        let mut trailer = [0u8; 32];
        trailer[16..24].copy_from_slice(&time.to_le_bytes());
        build::mmap2(&mut out, e, &map, Trailer::Raw(&trailer));

        for k in 0..shape.nr_samples as u64 {
            // IDENTIFIER (0) | IP | TID | TIME
            let mut w = RecordWriter::new(&mut out, RecordType::SAMPLE, misc::USER, e);
            w.u64(0).u64(start).u32(pid).u32(pid).u64(time + k * 1000);
            w.finish();
        }
        if m % 10 == 9 {
            build::empty(&mut out, RecordType::FINISHED_ROUND, e);
        }
    }
    out
}

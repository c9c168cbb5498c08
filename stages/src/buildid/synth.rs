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

use crate::format::{misc, RecordType, PIPE_MAGIC};

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
                    super::source::read_build_id(&p, None, false),
                    super::source::Outcome::Found(_)
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

fn rec(out: &mut Vec<u8>, type_: RecordType, misc_: u16, body: &[u8]) {
    out.extend_from_slice(&type_.0.to_le_bytes());
    out.extend_from_slice(&misc_.to_le_bytes());
    out.extend_from_slice(&((8 + body.len()) as u16).to_le_bytes());
    out.extend_from_slice(body);
}

/// Generates one stream (little-endian) over the dso `pool`.
pub fn generate(pool: &[PathBuf], shape: Shape, rng: &mut Rng) -> Vec<u8> {
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
    let mut body = attr.to_vec();
    body.extend_from_slice(&0u64.to_le_bytes());
    rec(&mut out, RecordType::HEADER_ATTR, 0, &body);

    let pid = shape.pid;
    let mut body = Vec::with_capacity(56);
    for v in [pid, 1, pid, 1] {
        body.extend_from_slice(&v.to_le_bytes());
    }
    body.extend_from_slice(&0u64.to_le_bytes());
    body.extend_from_slice(&[0; 32]);
    rec(&mut out, RecordType::FORK, misc::COMM_EXEC, &body);

    for m in 0..shape.nr_mmaps {
        let ino = rng.below(pool.len() as u64);
        let start = 0x40_0000 + ino * 8192;
        let time = rng.below(1_000_000);
        let name = pool[ino as usize].as_os_str().as_encoded_bytes();
        let mut body = Vec::with_capacity(64 + name.len() + 40);
        for v in [pid, pid] {
            body.extend_from_slice(&v.to_le_bytes());
        }
        for v in [start, 4096, 0] {
            body.extend_from_slice(&v.to_le_bytes());
        }
        body.extend_from_slice(&8u32.to_le_bytes());
        body.extend_from_slice(&0u32.to_le_bytes());
        body.extend_from_slice(&ino.to_le_bytes());
        body.extend_from_slice(&0u64.to_le_bytes());
        body.extend_from_slice(&4u32.to_le_bytes()); // PROT_EXEC
        body.extend_from_slice(&0u32.to_le_bytes());
        body.extend_from_slice(name);
        body.resize(body.len() + 8 - (name.len() % 8), 0);
        let mut trailer = [0u8; 32];
        trailer[16..24].copy_from_slice(&time.to_le_bytes());
        body.extend_from_slice(&trailer);
        rec(&mut out, RecordType::MMAP2, misc::USER, &body);

        for k in 0..shape.nr_samples as u64 {
            let mut s = [0u8; 32];
            s[8..16].copy_from_slice(&start.to_le_bytes());
            s[16..20].copy_from_slice(&pid.to_le_bytes());
            s[20..24].copy_from_slice(&pid.to_le_bytes());
            s[24..32].copy_from_slice(&(time + k * 1000).to_le_bytes());
            rec(&mut out, RecordType::SAMPLE, misc::USER, &s);
        }
        if m % 10 == 9 {
            rec(&mut out, RecordType::FINISHED_ROUND, 0, &[]);
        }
    }
    out
}

//! The `aslr` stage on synthetic streams.

use perfpipe_core::harness;

use super::*;
use crate::synth::{decoded, SynthStream};

/// (type, fields) of every record out: MMAP2 (pid, addr, pgoff), samples (tid, ip, chain).
fn run(stream: &[u8], chunk: usize) -> Vec<(u32, u32, u64, Vec<u64>)> {
    let mut stage = AslrConfig::default().build();
    let out = harness::run_stage(&mut stage, decoded(stream, chunk)).unwrap();
    let mut v = Vec::new();
    for b in &out {
        let info = StreamInfo::of(b).unwrap();
        for span in &b.spans {
            let rec = info.record(b, span);
            if let Some(m) = rec.mmap() {
                v.push((span.kind, m.pid, m.addr, vec![m.pgoff]));
            } else if let Some(s) = rec.sample() {
                let chain = s.callchain().unwrap().entries().collect();
                v.push((span.kind, s.tid().unwrap(), s.ip().unwrap(), chain));
            }
        }
    }
    v
}

#[test]
fn maps_pack_from_perfs_bases_and_children_keep_their_parents_layout() {
    let u = context::USER;
    let mut s = SynthStream::new();
    // A child's samples before its parent's maps and its own FORK, as a pipe without
    // FINISHED_ROUNDs brings them when the parent's cpu ring is read last.
    s.sample(
        20,
        20,
        300,
        1,
        0x5555_0000_1010,
        &[u, 0x5555_0000_1010, 0x7f00_0000_2020],
    );
    s.comm(10, 10, "app", true, 90);
    s.mmap2(10, 0x5555_0000_1000, 0x1000, "/bin/app", 1, 100);
    s.mmap2(10, 0x7f00_0000_0000, 0x20_0000, "/lib/libc.so.6", 2, 110);
    s.sample(
        10,
        10,
        200,
        0,
        0x5555_0000_1008,
        &[u, 0x5555_0000_1008, 0x9999],
    );
    s.fork(20, 10, 150);
    s.mmap2(20, 0x7f10_0000_0000, 0x1000, "/lib/libm.so.6", 3, 310);
    s.sample(20, 20, 320, 1, 0x7f10_0000_0010, &[u, 0x7f10_0000_0010]);
    let stream = s.into_bytes();
    for chunk in [64, 1 << 20] {
        let recs = run(&stream, chunk);
        let mmaps: Vec<(u32, u64)> = recs
            .iter()
            .filter(|r| r.0 == RecordType::MMAP2.0)
            .map(|r| (r.1, r.2))
            .collect();
        // app at 0x200000 (one page), a page of gap, libc at 0x202000; the child's own map
        // after its parent's, at the next page but one.
        assert_eq!(
            mmaps,
            [(10, 0x20_0000), (10, 0x20_2000), (20, 0x40_3000)],
            "chunk {chunk}"
        );
        let samples: Vec<(u32, u64, Vec<u64>)> = recs
            .iter()
            .filter(|r| r.0 == RecordType::SAMPLE.0)
            .map(|r| (r.1, r.2, r.3.clone()))
            .collect();
        assert_eq!(
            samples,
            [
                (20, 0x20_0010, vec![u, 0x20_0010, 0x20_4020]),
                // An address in no map is 0.
                (10, 0x20_0008, vec![u, 0x20_0008, 0]),
                (20, 0x40_3010, vec![u, 0x40_3010]),
            ],
            "chunk {chunk}"
        );
    }
}

//! Tests of the `symbolize` stage on streams built record by record.

use super::*;

/// A stream of `records` after the pipe header and one attr (`IP | TID | TIME | CALLCHAIN`, no
/// `sample_id_all`), then three FINISHED_ROUNDs, through decode and the stage in one batch.
fn symbolized(records: &[Vec<u8>]) -> Vec<Batch> {
    use perfpipe_stream::format::build as fbuild;
    use perfpipe_stream::format::{sample as st, PIPE_MAGIC};
    let mut s = Vec::new();
    s.extend_from_slice(&PIPE_MAGIC.to_le_bytes());
    s.extend_from_slice(&16u64.to_le_bytes());
    let mut attr = vec![0u8; 128];
    attr[4..8].copy_from_slice(&128u32.to_le_bytes());
    let sample_type = st::IP | st::TID | st::TIME | st::CALLCHAIN;
    attr[24..32].copy_from_slice(&sample_type.to_le_bytes());
    fbuild::header_attr(&mut s, Endian::Little, &attr, &[1]);
    for r in records {
        s.extend_from_slice(r);
    }
    for _ in 0..3 {
        fbuild::empty(&mut s, RecordType::FINISHED_ROUND, Endian::Little);
    }
    let decoded = perfpipe_core::harness::run_stage(
        &mut perfpipe_stream::decode::DecodeConfig::default().build(),
        perfpipe_core::harness::raw_batches(&s, &[s.len()], 0),
    )
    .unwrap();
    perfpipe_core::harness::run_stage(&mut SymbolizeConfig::default().build(None), decoded).unwrap()
}

/// A user-mode sample of process `pid` at `time` whose callchain is `chain` (innermost first).
fn user_sample(pid: u32, time: u64, chain: &[u64]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = perfpipe_stream::format::build::RecordWriter::new(
        &mut out,
        RecordType::SAMPLE,
        misc::USER,
        Endian::Little,
    );
    w.u64(chain[0]).u32(pid).u32(pid).u64(time);
    w.u64(chain.len() as u64 + 1).u64(context::USER);
    for &ip in chain {
        w.u64(ip);
    }
    w.finish();
    out
}

/// An MMAP2 of `name` at `addr` in process `pid`.
fn mmap2(pid: u32, addr: u64, name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let m = perfpipe_stream::format::Mmap {
        pid,
        tid: pid,
        addr,
        len: 0x10000,
        pgoff: 0,
        file_id: perfpipe_stream::format::FileId::None,
        prot: 5,
        flags: 2,
        filename: name.as_bytes(),
        cpumode: misc::USER,
    };
    perfpipe_stream::format::build::mmap2(
        &mut out,
        Endian::Little,
        &m,
        perfpipe_stream::format::build::Trailer::None,
    );
    out
}

#[test]
fn a_sample_like_the_last_one_is_mapped_again_when_the_maps_changed() {
    // Samples 1 and 2 have the same callchain; between them the process maps another file over
    // the same addresses. Sample 2's frames must be the new file's, though they repeat sample 1's
    // addresses (the stage reuses the last sample's frame ids only while the maps are the same),
    // and sample 3, like sample 2 with the maps unchanged, has sample 2's frames.
    let chain = [0x40_1000, 0x40_2000, 0x40_3000];
    let batches = symbolized(&[
        mmap2(10, 0x40_0000, "/nonexistent/a.so"),
        user_sample(10, 1, &chain),
        mmap2(10, 0x40_0000, "/nonexistent/b.so"),
        user_sample(10, 2, &chain),
        user_sample(10, 3, &chain),
    ]);
    let mut dsos_of_samples = Vec::new();
    let mut ids_of_samples = Vec::new();
    for b in &batches {
        let Some(stacks) = b.annotation::<Stacks>() else {
            continue;
        };
        let frames = stacks.table.snapshot();
        for s in stacks.samples() {
            let ids = stacks.frames(s).to_vec();
            let names: Vec<String> = ids
                .iter()
                .map(|&id| {
                    let dso = frames[id as usize]
                        .query
                        .dso
                        .expect("every frame is mapped");
                    stacks.dsos.get(dso).unwrap().name.to_string()
                })
                .collect();
            dsos_of_samples.push(names);
            ids_of_samples.push(ids);
        }
    }
    let all = |name: &str| vec![name.to_string(); 3];
    assert_eq!(
        dsos_of_samples,
        [
            all("/nonexistent/a.so"),
            all("/nonexistent/b.so"),
            all("/nonexistent/b.so")
        ]
    );
    assert_eq!(ids_of_samples[1], ids_of_samples[2]);
    assert_ne!(ids_of_samples[0], ids_of_samples[1]);
}

/// The dso names of each sample's frames, in stream order.
fn dsos_of_samples(batches: &[Batch]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for b in batches {
        let Some(stacks) = b.annotation::<Stacks>() else {
            continue;
        };
        let frames = stacks.table.snapshot();
        for s in stacks.samples() {
            let names = stacks.frames(s).iter().map(|&id| {
                let dso = frames[id as usize]
                    .query
                    .dso
                    .expect("every frame is mapped");
                stacks.dsos.get(dso).unwrap().name.to_string()
            });
            out.push(names.collect());
        }
    }
    out
}

#[test]
fn a_callchain_seen_before_is_mapped_in_its_own_process_and_maps() {
    // Two processes map other files at the same addresses and take turns with the same
    // callchain (so no sample shares frames with the one before it, and the callchain cache
    // answers from the second round on); then process 10 maps a third file there. Each sample's
    // frames are its own process's file at its time.
    let chain = [0x40_1000, 0x40_2000, 0x40_3000];
    let batches = symbolized(&[
        mmap2(10, 0x40_0000, "/nonexistent/a.so"),
        mmap2(20, 0x40_0000, "/nonexistent/b.so"),
        user_sample(10, 1, &chain),
        user_sample(20, 2, &chain),
        user_sample(10, 3, &chain),
        user_sample(20, 4, &chain),
        mmap2(10, 0x40_0000, "/nonexistent/c.so"),
        user_sample(10, 5, &chain),
        user_sample(20, 6, &chain),
        user_sample(10, 7, &chain),
    ]);
    let all = |name: &str| vec![name.to_string(); 3];
    let (a, b, c) = (
        all("/nonexistent/a.so"),
        all("/nonexistent/b.so"),
        all("/nonexistent/c.so"),
    );
    assert_eq!(
        dsos_of_samples(&batches),
        [a.clone(), b.clone(), a, b.clone(), c.clone(), b, c]
    );
}

//! Field access: what `decode` and the typed views read out of samples and sample-id trailers
//! matches what perf itself reads (`perf script`), including several attrs and byte-swapped input.

use std::sync::{Arc, Mutex};

use perfpipe_core::{Batch, Flow, Pipeline, Settings, Sink, StageError};
use perfpipe_stream::decode::DecodeConfig;
use perfpipe_stream::format::{RecordType, StreamInfo};
use perfpipe_stream::read::ReadConfig;

use crate::util::*;

/// What we read from one record.
#[derive(Clone, Debug, Default)]
struct Fields {
    /// Sample lines in `perf script -F pid,tid,time,ip` form, sorted.
    samples: Vec<String>,
    /// Samples per attr index.
    per_attr: Vec<usize>,
    /// Non-sample kernel records (COMM, MMAP2, FORK, EXIT) in `pid/tid time` form from their trailer.
    trailers: Vec<String>,
    /// Samples whose callchain starts with a context marker, and samples with a callchain.
    chains: (usize, usize),
}

#[derive(Clone, Default)]
struct Extract(Arc<Mutex<Fields>>);

fn time(ns: u64) -> String {
    format!("{}.{:06}", ns / 1_000_000_000, ns % 1_000_000_000 / 1000)
}

impl Sink for Extract {
    fn consume(&mut self, batch: &Batch) -> Result<Flow, StageError> {
        let info = StreamInfo::of(batch).expect("decode attaches stream info");
        let mut f = self.0.lock().unwrap();
        for span in &batch.spans {
            let rec = info.record(batch, span);
            if let Some(s) = rec.sample() {
                let line = format!(
                    "{}/{} {}: {:x}",
                    s.pid().unwrap(),
                    s.tid().unwrap(),
                    time(s.time().unwrap()),
                    s.ip().unwrap()
                );
                f.samples.push(line);
                let tag = span.tag as usize;
                if f.per_attr.len() <= tag {
                    f.per_attr.resize(tag + 1, 0);
                }
                f.per_attr[tag] += 1;
                if let Some(chain) = s.callchain() {
                    f.chains.1 += 1;
                    if chain
                        .entries()
                        .next()
                        .is_some_and(|ip| ip >= u64::MAX - 4095)
                    {
                        f.chains.0 += 1;
                    }
                }
            } else if matches!(
                rec.record_type(),
                RecordType::COMM | RecordType::MMAP2 | RecordType::FORK | RecordType::EXIT
            ) {
                if let Some(id) = rec.sample_id() {
                    f.trailers.push(format!(
                        "{}/{} {}",
                        id.pid.unwrap(),
                        id.tid.unwrap(),
                        time(id.time.unwrap())
                    ));
                }
            }
        }
        Ok(Flow::Continue)
    }
}

fn extract(name: &str) -> Fields {
    let sink = Extract::default();
    let report = Pipeline::new(Settings::default())
        .source(
            "read",
            ReadConfig {
                path: Some(fixture(name)),
                pipe_buffer: 0,
            }
            .build()
            .unwrap(),
        )
        .stage("decode", DecodeConfig::default().build())
        .sink("extract", sink.clone())
        .run();
    assert!(report.is_ok(), "{:?}", report.errors);
    let mut f = sink.0.lock().unwrap().clone();
    f.samples.sort();
    f.trailers.sort();
    f
}

/// Normalises `perf script -F pid,tid,time,ip` lines to our form, sorted.
fn perf_samples(script: &str) -> Vec<String> {
    let mut v: Vec<String> = script
        .lines()
        .filter(|l| !l.contains("PERF_RECORD"))
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (pt, t, ip) = (w.next()?, w.next()?, w.next()?);
            Some(format!("{pt} {t} {ip}"))
        })
        .collect();
    v.sort();
    v
}

pipetest!(
    /// Sample counts per attr follow the fixture's recorded stats (cpu-clock 1836, task-clock 1837).
    two_events_samples_are_told_apart_by_id, |_dir| {
    let f = extract("two-events.pipe.data");
    eqnice!(vec![1836, 1837], f.per_attr);
});

pipetest!(
    /// The big-endian fixture reads the same fields as the little-endian one it was made from.
    byte_swapped_stream_reads_the_same_fields, |_dir| {
    let le = extract("cpu-clock.pipe.data");
    let be = extract("bigendian.pipe.data");
    assert_eq!(le.samples.len(), 3333);
    eqnice!(le.samples, be.samples);
    eqnice!(le.trailers, be.trailers);
});

pipetest!(
    /// Callchains are found after the fixed fields, and start with a context marker.
    callchains_start_with_a_context_marker, |_dir| {
    let f = extract("callgraph.pipe.data");
    assert_eq!(f.chains.1, 1777);
    assert_eq!(f.chains.0, 1777);
});

pipetest!(needs(perf)
    /// pid, tid, time and ip of every sample, and pid/tid/time of every trailer, equal perf script's.
    fields_match_perf_script, |_dir| {
    for name in [
        "cpu-clock.pipe.data",
        "two-events.pipe.data",
        "callgraph.pipe.data",
        "tracepoint.pipe.data",
    ] {
        let input = fixture_bytes(name);
        let ours = extract(name);
        let script = perf_on(&["script", "-F", "pid,tid,time,ip", "-G"], &input);
        eqnice!(perf_samples(&script), ours.samples);
        let side = perf_on(
            &[
                "script",
                "-F",
                "pid,tid,time",
                "--show-task-events",
                "--show-mmap-events",
            ],
            &input,
        );
        let mut theirs: Vec<String> = side
            .lines()
            .filter(|l| l.contains("PERF_RECORD_") && !l.contains("PERF_RECORD_MMAP "))
            .filter(|l| !l.contains(" 0.000000:"))
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                Some(format!("{} {}", w.next()?, w.next()?.trim_end_matches(':')))
            })
            .collect();
        theirs.sort();
        let ours_nonzero: Vec<String> = ours
            .trailers
            .iter()
            .filter(|t| !t.ends_with(" 0.000000"))
            .cloned()
            .collect();
        eqnice!(theirs, ours_nonzero);
    }
});

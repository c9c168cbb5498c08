//! `count`: a sink-like stage that counts samples per comm and per DSO and prints the top N of
//! each on stderr at end of stream. Records pass through unchanged, so it can sit anywhere in a
//! chain.
//!
//! Comms come from COMM records (per thread); DSOs from the address-space model
//! ([`perfpipe_stream::model::machine::Machine`]) fed with every MMAP/MMAP2/FORK/COMM/EXIT in stream order.
//!
//! Options (`--count top=N` or `--stage count:top=N`): `top`, rows per table (default 10).

use std::collections::HashMap;
use std::io::Write as _;

use perfpipe_core::spec::{Flag, Kind, StageOption, StageSpec};
use perfpipe_core::{Batch, Counter, Flow, Out, Stage, StageError};
use perfpipe_stream::format::{RecordType, StreamInfo};
use perfpipe_stream::model::machine::Machine;

/// The running `count` stage.
pub struct Count {
    top: usize,
    machine: Machine,
    comm_of_tid: HashMap<u32, String>,
    per_comm: HashMap<String, u64>,
    per_dso: HashMap<String, u64>,
    samples: Counter,
    /// Where the tables go (stderr by default; a buffer in tests).
    sink: Box<dyn std::io::Write + Send>,
}

impl std::fmt::Debug for Count {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Count")
            .field("top", &self.top)
            .field("comms", &self.per_comm.len())
            .field("dsos", &self.per_dso.len())
            .finish()
    }
}

impl Count {
    /// A stage printing the top `top` rows to stderr.
    pub fn new(top: usize) -> Count {
        Count::to(top, Box::new(std::io::stderr()))
    }

    /// A stage printing to `sink`.
    pub fn to(top: usize, sink: Box<dyn std::io::Write + Send>) -> Count {
        Count {
            top,
            machine: Machine::new(),
            comm_of_tid: HashMap::new(),
            per_comm: HashMap::new(),
            per_dso: HashMap::new(),
            samples: Counter::new(),
            sink,
        }
    }

    fn table(&mut self, title: &str, counts: &HashMap<String, u64>) -> std::io::Result<()> {
        let total: u64 = counts.values().sum();
        let mut rows: Vec<(&String, &u64)> = counts.iter().collect();
        rows.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        writeln!(self.sink, "{:>10} {:>7}  {title}", "samples", "%")?;
        for (name, n) in rows.into_iter().take(self.top) {
            let pct = 100.0 * *n as f64 / total.max(1) as f64;
            writeln!(self.sink, "{n:>10} {pct:>6.2}%  {name}")?;
        }
        Ok(())
    }
}

impl Stage for Count {
    fn process(&mut self, batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        let Some(info) = StreamInfo::of(&batch) else {
            out.push(batch);
            return Ok(Flow::Continue);
        };
        let mut samples = 0;
        for span in &batch.spans {
            let rec = info.record(&batch, span);
            if let Some(s) = rec.sample() {
                samples += 1;
                let (pid, tid) = (s.pid().unwrap_or(0), s.tid().unwrap_or(0));
                let comm = self
                    .comm_of_tid
                    .get(&tid)
                    .cloned()
                    .unwrap_or_else(|| format!("[pid {pid}]"));
                *self.per_comm.entry(comm).or_default() += 1;
                let dso = s
                    .ip()
                    .and_then(|ip| {
                        self.machine
                            .find(pid, s.cpumode(), ip, s.time().unwrap_or(u64::MAX))
                    })
                    .map(|m| String::from_utf8_lossy(&self.machine.dso(m.dso).name).into_owned())
                    .unwrap_or_else(|| "[unknown]".to_string());
                *self.per_dso.entry(dso).or_default() += 1;
            } else {
                if span.kind == RecordType::COMM.0 {
                    if let Some(c) = rec.comm() {
                        let name = String::from_utf8_lossy(c.comm).into_owned();
                        self.comm_of_tid.insert(c.tid, name);
                    }
                }
                self.machine.apply(&rec);
            }
        }
        self.samples.add(samples);
        out.push(batch);
        Ok(Flow::Continue)
    }

    fn flush(&mut self, _out: &mut Out<'_>) -> Result<(), StageError> {
        let (comms, dsos) = (
            std::mem::take(&mut self.per_comm),
            std::mem::take(&mut self.per_dso),
        );
        self.table("comm", &comms)?;
        self.table("dso", &dsos)?;
        self.sink.flush()?;
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![("samples_counted", self.samples.clone())]
    }
}

/// The options `count` takes.
pub const OPTIONS: &[StageOption] = &[StageOption {
    key: "top",
    kind: Kind::Count,
    help: "rows per table (default 10)",
}];

const HELP: &str =
    "count samples per comm and per dso; print the top N of each on stderr at the end";

/// How `count` appears on the command line: `--count top=N`, or `--stage count:top=N`.
pub const SPEC: StageSpec = StageSpec {
    name: "count",
    help: HELP,
    flags: &[Flag::stage_options("count", HELP)],
    options: OPTIONS,
    build: |_, o| {
        let top = o.count("top").unwrap_or(10);
        Ok(Box::new(Count::new(
            usize::try_from(top).unwrap_or(usize::MAX),
        )))
    },
    needs: &["decompress"],
};

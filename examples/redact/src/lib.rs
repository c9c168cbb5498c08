//! `redact`: anonymise a recording before it is shared.
//!
//! - **Comm names** (COMM records, THREAD_MAP entries) become `c` + 8 hex digits, and **file
//!   paths** (MMAP, MMAP2, HEADER_BUILD_ID, CGROUP) become `/redacted/` + 16 hex digits: a keyed hash
//!   (SipHash-1-3 with a 128-bit key), so the same name always gets the same pseudonym within a run —
//!   and across runs given the same `key` — and nobody without the key can test a guess.
//! - Pseudo names (`[kernel.kallsyms]_text`, `[vdso]`, `[stack]`, `//anon`, …: anything starting with
//!   `[` or `//`) are kept, so perf still resolves kernel and vdso maps; `keep=/usr/lib:/lib` keeps
//!   paths under the given prefixes too.
//! - The HOSTNAME and CMDLINE feature records are dropped.
//! - Not redacted: the raw payload of tracepoint samples (e.g. `sched_switch`'s `prev_comm`), the
//!   tracing data blob, and callchain entries: a frame-pointer callchain of code built without
//!   frame pointers can hold arbitrary words of the user stack, text included.
//!
//! Options (`--redact key=HEX32,keep=PREFIX:PREFIX` or `--stage redact:…`): `key` (32 hex digits;
//! default: random per run), `keep` (colon-separated path prefixes to keep).
//!
//! The stage edits each batch in one pass (`Batch::edit`): a redacted record is rebuilt with its new
//! name (`Editor::replace`), its `sample_id` trailer kept at the end, where perf looks for it; a
//! dropped feature is removed (`Editor::remove`). Every other record stays a zero-copy slice.

use std::hash::Hasher as _;

use perfpipe_core::spec::{Flag, Kind, Options, Spec, StageOption, StageSpec};
use perfpipe_core::{Batch, Counter, Flow, Out, Span, Stage, StageError};
use perfpipe_stream::format::{build, feature, Endian, EventHeader, RecordType, StreamInfo};
use siphasher::sip::SipHasher13;

/// Features that name the machine or the command line.
const DROPPED_FEATURES: [u32; 2] = [feature::HOSTNAME, feature::CMDLINE];

/// The running `redact` stage.
#[derive(Debug)]
pub struct Redact {
    key: (u64, u64),
    keep: Vec<Vec<u8>>,
    rewritten: Counter,
    dropped: Counter,
}

impl Redact {
    /// A stage with this key and these kept path prefixes.
    pub fn new(key: (u64, u64), keep: Vec<Vec<u8>>) -> Redact {
        Redact {
            key,
            keep,
            rewritten: Counter::new(),
            dropped: Counter::new(),
        }
    }

    fn hash(&self, name: &[u8]) -> u64 {
        let mut h = SipHasher13::new_with_keys(self.key.0, self.key.1);
        h.write(name);
        h.finish()
    }

    fn kept(&self, name: &[u8]) -> bool {
        name.is_empty()
            || name.starts_with(b"[")
            || name.starts_with(b"//")
            || self.keep.iter().any(|p| name.starts_with(p))
    }

    /// The pseudonym of a comm (at most 15 bytes, as perf's comm fields are 16 with the NUL).
    pub fn comm(&self, name: &[u8]) -> Vec<u8> {
        format!("c{:08x}", self.hash(name) as u32).into_bytes()
    }

    /// The pseudonym of a path, or the path itself if it is kept.
    pub fn path(&self, name: &[u8]) -> Vec<u8> {
        if self.kept(name) {
            name.to_vec()
        } else {
            format!("/redacted/{:016x}", self.hash(name)).into_bytes()
        }
    }

    /// Rebuilds a record whose NUL-terminated name starts at `fixed`, with `name` instead, keeping
    /// the `trailer` bytes at the end.
    fn rebuild(
        rec: &[u8],
        fixed: usize,
        name: &[u8],
        trailer: usize,
        e: Endian,
    ) -> Option<Vec<u8>> {
        let h = EventHeader::parse(rec, e)?;
        let tail = rec.get(rec.len().checked_sub(trailer)?..)?;
        let mut body = rec.get(8..fixed)?.to_vec();
        body.extend_from_slice(name);
        body.push(0);
        body.resize((8 + body.len()).next_multiple_of(8) - 8, 0);
        body.extend_from_slice(tail);
        Some(build::record(h.type_, h.misc, &body, false, e))
    }

    /// The redacted form of one record, `None` to keep it, `Some(None)` to drop it.
    fn redact(&self, info: &StreamInfo, span: &Span, rec: &[u8]) -> Option<Option<Vec<u8>>> {
        let e = info.endian;
        let trailer = info
            .attr(span.tag as u16)
            .and_then(|a| a.layout.trailer)
            .map_or(0, |t| usize::from(t.size));
        let name_at = |fixed: usize| -> Option<&[u8]> {
            let n = rec.get(fixed..rec.len().checked_sub(trailer)?)?;
            Some(&n[..n.iter().position(|&c| c == 0)?])
        };
        let rewrite = |fixed: usize, new: Vec<u8>, trailer: usize| {
            Some(Some(Self::rebuild(rec, fixed, &new, trailer, e)?))
        };
        match RecordType(span.kind) {
            RecordType::COMM => rewrite(16, self.comm(name_at(16)?), trailer),
            RecordType::MMAP => {
                let n = name_at(40)?;
                (!self.kept(n)).then_some(())?;
                rewrite(40, self.path(n), trailer)
            }
            RecordType::MMAP2 => {
                let n = name_at(72)?;
                (!self.kept(n)).then_some(())?;
                rewrite(72, self.path(n), trailer)
            }
            RecordType::CGROUP => rewrite(16, self.path(name_at(16)?), trailer),
            RecordType::HEADER_BUILD_ID => {
                let n = rec.get(36..)?;
                let n = &n[..n.iter().position(|&c| c == 0).unwrap_or(n.len())];
                (!self.kept(n)).then_some(())?;
                rewrite(36, self.path(n), 0)
            }
            RecordType::THREAD_MAP => {
                let mut out = rec.to_vec();
                let nr = e.u64(rec, 8)? as usize;
                for i in 0..nr {
                    let at = 16 + i * 24 + 8;
                    let field = out.get_mut(at..at + 16)?;
                    let len = field.iter().position(|&c| c == 0).unwrap_or(16);
                    let new = self.comm(&field[..len]);
                    field.fill(0);
                    field[..new.len()].copy_from_slice(&new);
                }
                Some(Some(out))
            }
            RecordType::HEADER_FEATURE => {
                let feat = e.u64(rec, 8)?;
                DROPPED_FEATURES
                    .iter()
                    .any(|&f| u64::from(f) == feat)
                    .then_some(None)
            }
            _ => None,
        }
    }
}

impl Stage for Redact {
    fn process(&mut self, mut batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        let Some(info) = StreamInfo::shared(&batch) else {
            out.push(batch);
            return Ok(Flow::Continue);
        };
        let (mut rewritten, mut dropped) = (0, 0);
        let mut ed = batch.edit();
        while let Some(span) = ed.next_record() {
            match self.redact(&info, &span, ed.bytes(&span)) {
                Some(Some(bytes)) => {
                    ed.replace(&bytes);
                    rewritten += 1;
                }
                Some(None) => {
                    ed.remove();
                    dropped += 1;
                }
                None => {}
            }
        }
        ed.finish();
        self.rewritten.add(rewritten);
        self.dropped.add(dropped);
        out.push(batch);
        Ok(Flow::Continue)
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![
            ("records_redacted", self.rewritten.clone()),
            ("features_dropped", self.dropped.clone()),
        ]
    }
}

/// The options `redact` takes.
pub const OPTIONS: &[StageOption] = &[
    StageOption {
        key: "key",
        kind: Kind::Text("HEX32"),
        help: "32 hex digits: the hash key (default: random per run)",
    },
    StageOption {
        key: "keep",
        kind: Kind::Text("PREFIX:…"),
        help: "colon-separated path prefixes to keep (e.g. /usr/lib:/lib)",
    },
];

fn random_key() -> (u64, u64) {
    use std::io::Read as _;
    let mut b = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut b);
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (
        u64::from_le_bytes(b[..8].try_into().expect("8 bytes")) ^ t,
        u64::from_le_bytes(b[8..].try_into().expect("8 bytes")),
    )
}

fn bad(message: String) -> perfpipe_stream::Error {
    perfpipe_stream::Error::BadOption {
        option: "redact",
        message,
    }
}

/// Builds the stage from `key=…,keep=…`.
///
/// # Errors
/// An unknown option, or a key that is not 32 hex digits.
pub fn build(value: Option<&str>) -> Result<Redact, perfpipe_stream::Error> {
    let mut options = Options::new();
    SPEC.parse_list(&mut options, value.unwrap_or_default())?;
    from_options(&options)
}

/// Builds the stage from its checked options.
///
/// # Errors
/// A key that is not 32 hex digits.
pub fn from_options(o: &Options) -> Result<Redact, perfpipe_stream::Error> {
    let key = match o.text("key") {
        Some(v) => {
            let n = u128::from_str_radix(v, 16)
                .ok()
                .filter(|_| v.len() == 32)
                .ok_or_else(|| bad(format!("key={v} is not 32 hex digits")))?;
            Some(((n >> 64) as u64, n as u64))
        }
        None => None,
    };
    let keep = o
        .text("keep")
        .unwrap_or_default()
        .split(':')
        .filter(|p| !p.is_empty())
        .map(|p| p.as_bytes().to_vec())
        .collect();
    Ok(Redact::new(key.unwrap_or_else(random_key), keep))
}

const HELP: &str =
    "replace comm names and file paths with keyed pseudonyms; drop hostname and cmdline";

/// How `redact` appears on the command line: `--redact key=HEX32,keep=PREFIX:…`.
pub const SPEC: StageSpec = StageSpec {
    name: "redact",
    help: HELP,
    flags: &[Flag::stage_options("redact", HELP)],
    options: OPTIONS,
    build: |_, o| Ok(Box::new(from_options(o)?)),
    needs: &["decompress"],
};

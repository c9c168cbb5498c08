//! `drop`: removes every record of the named types (`--drop switch,lost`).
//!
//! Types are named as `perf report --stats` names them, case-insensitively (`switch`, `lost`,
//! `mmap2`, `finished_round`, `sample`…), or by number. The pipe header and HEADER_ATTR cannot be
//! dropped: perf could not read the output. Dropping MMAP/COMM/FORK records makes samples
//! unresolvable, which is the user's call.
//!
//! **Order**: input order, records only removed. **Buffering**: none. **EOF**: nothing to flush.

use perfpipe_core::{Batch, Counter, Flow, Out, Stage, StageError};

use crate::format::{RecordType, OTHER_KIND};
use crate::Error;
use perfpipe_core::spec::{Flag, Kind, StageOption, StageSpec};

/// How `drop` appears on the command line: `--drop TYPES`.
pub const SPEC: StageSpec = StageSpec {
    name: "drop",
    help: "remove every record of these types: switch,lost,... (perf report --stats names)",
    flags: &[Flag::stage_value(
        "drop",
        "types",
        "remove every record of these types: switch,lost,... (perf report --stats names)",
    )],
    options: &[StageOption {
        key: "types",
        kind: Kind::Text("TYPES"),
        help: "record types, by perf report --stats name or number, comma-separated",
    }],
    build: |_, o| {
        Ok(Box::new(
            DropConfig::parse(o.text("types").unwrap_or_default())?.build(),
        ))
    },
    needs: &["decompress"],
};

/// Configuration of a `drop` stage: the record types to remove.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DropConfig {
    /// The types to remove.
    pub types: Vec<RecordType>,
}

impl DropConfig {
    /// Parses `TYPE[,TYPE…]`.
    ///
    /// # Errors
    /// [`Error::BadOption`] for an unknown name, or a type that cannot be dropped.
    pub fn parse(src: &str) -> Result<DropConfig, Error> {
        let bad = |message: String| Error::BadOption {
            option: "--drop",
            message,
        };
        let mut types = Vec::new();
        for item in src.split(',').map(str::trim) {
            let t = match item.parse::<u32>() {
                Ok(n) => RecordType(n),
                Err(_) => (1..=255)
                    .map(RecordType)
                    .find(|t| t.name().is_some_and(|n| n.eq_ignore_ascii_case(item)))
                    .ok_or_else(|| {
                        bad(format!(
                            "unknown record type `{item}`; use the names of `perf report --stats` \
                             (switch, lost, mmap2, finished_round, …) or numbers"
                        ))
                    })?,
            };
            if t == RecordType::HEADER_ATTR || t == RecordType::PIPE_HEADER {
                return Err(bad(format!(
                    "{t} records cannot be dropped: perf could not read the output"
                )));
            }
            if t.0 == 0 || t.0 >= OTHER_KIND {
                return Err(bad(format!("record type {} cannot be selected", t.0)));
            }
            types.push(t);
        }
        Ok(DropConfig { types })
    }

    /// Builds the stage.
    pub fn build(&self) -> Drop {
        let mut set = [false; 256];
        for t in &self.types {
            set[t.0 as usize] = true;
        }
        Drop {
            set,
            dropped: Counter::new(),
        }
    }
}

/// The running `drop` stage.
#[derive(Debug)]
pub struct Drop {
    set: [bool; 256],
    dropped: Counter,
}

impl Stage for Drop {
    fn process(&mut self, mut batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        let mut dropped = 0;
        let mut ed = batch.edit();
        while let Some(span) = ed.next_record() {
            if self.set[(span.kind as usize).min(255)] {
                ed.remove();
                dropped += 1;
            }
        }
        ed.finish();
        self.dropped.add(dropped);
        out.push_or_recycle(batch);
        Ok(Flow::Continue)
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![("records_dropped", self.dropped.clone())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers() {
        let c = DropConfig::parse("switch, LOST,14,finished_round").unwrap();
        assert_eq!(
            c.types,
            vec![
                RecordType::SWITCH,
                RecordType::LOST,
                RecordType::SWITCH,
                RecordType::FINISHED_ROUND
            ]
        );
        assert!(DropConfig::parse("attr").is_err());
        assert!(DropConfig::parse("nonsense")
            .unwrap_err()
            .to_string()
            .contains("nonsense"));
        assert!(DropConfig::parse("300").is_err());
    }
}

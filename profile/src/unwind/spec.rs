//! How `unwind` appears on the command line, declared apart from the unwinder so that a build
//! without the cargo feature `unwind` (no framehop) still knows the flag, lists it, and refuses
//! it with an error that names the feature.

use perfpipe_core::spec::{Flag, Kind, StageOption, StageSpec};
#[cfg(not(feature = "unwind"))]
use perfpipe_core::{
    spec::{BuildCtx, Options},
    Stage, StageError,
};

use crate::symbols::sources::{DEBUGINFOD_OPTION, SYMBOLS_FLAG, SYMFS_FLAG, SYMFS_OPTION};

/// How `unwind` appears on the command line: `--unwind [parallel=no,parallel-min=N,max-frames=N]`.
pub const SPEC: StageSpec = StageSpec {
    name: "unwind",
    help: "unwind --call-graph dwarf samples' user stacks into callchains (.eh_frame/.debug_frame) and drop the stack copies",
    flags: &[
        Flag::stage_options(
            "unwind",
            "unwind --call-graph dwarf samples into callchains and drop their stack copies",
        ),
        SYMBOLS_FLAG,
        SYMFS_FLAG,
    ],
    options: &[
        StageOption {
            key: "parallel",
            kind: Kind::Switch,
            help: "unwind each batch's samples on the worker pool (default yes; no: on the stage's thread)",
        },
        StageOption {
            key: "parallel-min",
            kind: Kind::Count,
            help: "fewest samples in a batch for the pool to unwind them (default 64; fewer: on the stage's thread)",
        },
        StageOption {
            key: "max-frames",
            kind: Kind::Count,
            help: "most user frames per sample (default 1024)",
        },
        StageOption {
            key: "symbols",
            kind: Kind::Text("ARCHIVE|DIR"),
            help: "an archive or build-id-cache directory to look dsos' unwind tables up in, by build id (repeatable)",
        },
        SYMFS_OPTION,
        DEBUGINFOD_OPTION,
    ],
    build: build_stage,
    needs: &["decompress", "stitch"],
};

#[cfg(feature = "unwind")]
use super::build_stage;

/// The stage in a build without the `unwind` feature: an error that names it.
#[cfg(not(feature = "unwind"))]
fn build_stage(_: &BuildCtx, _: &Options) -> Result<Box<dyn Stage>, StageError> {
    Err("this perfpipe is built without the cargo feature `unwind` (DWARF unwinding)".into())
}

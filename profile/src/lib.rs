//! `perfpipe-profile`: what turns perf samples into profiles — names for their frames and stacks
//! for their callchains.
//!
//! - [`symbols`]: the symbol engine: the symbol tables of the dsos a stream maps (ELF `.symtab`,
//!   `.dynsym`, MiniDebugInfo, inline frames from DWARF, kallsyms), loaded once each on the worker
//!   pool, looked up by address, named as perf 6.1 names them.
//! - [`symbolize`]: the stage that resolves each sample's ip and callchain to frames and attaches
//!   them to its batch as [`symbolize::Stacks`], the annotation every profile output reads.
//! - [`unwind`]: the stage that unwinds `--call-graph dwarf` samples (DWARF CFI, with `framehop`)
//!   into frame-pointer-style callchains.
//! - [`offcpu`]: the off-CPU model: off-CPU intervals from scheduler switches (`sched_switch`
//!   samples, or `context-switches` samples and SWITCH records), where each thread blocked, for
//!   how long, in which state; the kit reads a batch's samples through it
//!   ([`kit::OffCpuSamples`]).
//! - [`kit`]: what every profile output is built from: samples joined with their stacks,
//!   interners, frames named on the pool, one event-naming rule, the snapshot-writing sink.
//!
//! The profile outputs themselves (folded stacks, flame graphs, pprof, Firefox, Parquet) are the
//! `perfpipe-export` crate, each a schema or message layout over the [`kit`].

#![deny(missing_docs)]

#[doc(hidden)]
#[cfg(all(feature = "unwind", feature = "debuginfod"))]
pub mod fuzz;
pub mod kit;
pub mod offcpu;
pub mod symbolize;
pub mod symbols;
#[cfg(feature = "unwind")]
pub mod unwind;
/// `unwind` in a build without the `unwind` feature: its flags, and an error naming the feature.
#[cfg(not(feature = "unwind"))]
#[path = "unwind/spec.rs"]
pub mod unwind;

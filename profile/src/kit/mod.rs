//! The profile-sink kit: what every profile output (folded stacks, flame graphs, pprof, Firefox,
//! Parquet) is built from, so that a format's file holds only what is its own, its schema or
//! message layout.
//!
//! - [`join`]: [`Join`], a batch's SAMPLE records each with its entry in the batch's
//!   [`Stacks`](crate::symbolize::Stacks) annotation (what the `symbolize` stage attaches).
//! - [`intern`]: ids for what a profile keeps many times: [`StackTable`] (distinct stacks),
//!   [`FrameSet`] (the frames those stacks use), [`Comms`] (thread names as perf shows them).
//! - [`names`]: frames named when a profile is written, once each, on the worker pool
//!   ([`Namer`], from the [`NameSources`] the batches carried), by the rules of
//!   `stackcollapse-perf.pl` and `inferno-collapse-perf` ([`frame_name`]).
//! - [`event`]: the one rule that names an event whose stream gives it no name
//!   ([`event::name`]), the unit of its period, and [`Events`], the events of a profile by id.
//! - [`offcpu`]: [`OffCpuSamples`], the one per-batch loop of every profile sink: a batch's
//!   samples with their stacks given to the format (a [`SampleSink`]), and, when the profile reads
//!   switches, every record given to the off-CPU model ([`crate::offcpu`]), the intervals it
//!   closes keyed by their switch-out's sample.
//! - [`snapshot`]: [`SnapshotSink`], the sink of a profile written whole: at the end of input and,
//!   as a snapshot that does not end the run, on a DUMP request (SIGUSR2), each time replacing the
//!   output file atomically (a reader sees the previous profile or the new one, never half of one).
//!   A format implements [`Profile`] (take in a batch, write the bytes) and nothing else.
//!
//! Memory: the kit's tables grow with the distinct stacks, frames, threads and events, never with
//! the samples; names are made only when a profile is written.
//!
//! ```
//! use perfpipe_profile::kit::{event, StackTable};
//!
//! let mut stacks = StackTable::default();
//! let loop_ = stacks.id(&[3, 2, 1]); // frame ids, innermost first
//! assert_eq!(stacks.id(&[3, 2, 1]), loop_, "a stack seen again has its id");
//! assert_eq!(stacks.get(loop_), &[3, 2, 1]);
//! let used = stacks.used_frames();
//! assert!(used.contains(2) && !used.contains(0));
//! // An event the stream does not name is named from its attr, the same in every format.
//! assert_eq!(event::name_of(1, 2), "page-faults");
//! assert_eq!(event::name_of(4, 0x1a2b), "type4-config0x1a2b");
//! ```

pub mod event;
pub mod intern;
pub mod join;
pub mod names;
pub mod offcpu;
pub mod snapshot;

pub use event::{Event, Events, FirstEvent};
pub use intern::{Comms, FrameSet, StackTable};
pub use join::Join;
pub use names::{frame_name, kept, NameSources, Namer, Naming};
pub use offcpu::{At, Model, OffCpuSamples, Read, SampleSink};
pub use snapshot::{Profile, Request, SnapshotSink};

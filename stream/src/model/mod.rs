//! The models the stream stages share, each fed with side-band records as they stream past:
//!
//! - [`machine`]: the per-process address spaces (maps by pid; fork, exec, exit), as perf's
//!   `machine`/`thread`/`maps` model them: what is mapped at an address of a sample.
//! - [`dso`]: dso files and their build ids: where an id comes from (the stream, the file, the
//!   host), read at most once per file, in the background.
//! - [`events`]: the one rule that names an event from its attr, a stream's events by id, and the
//!   names perf itself gave them (EVENT_UPDATE, EVENT_DESC).
//! - [`hold`]: batches held until the side-band older than their samples has come (two
//!   FINISHED_ROUNDs), for the stages that look samples up in these models.
//! - [`threads`]: each thread's command name over time (COMM, FORK).
//!
//! The off-CPU model, which only profiles read, is `perfpipe_profile::offcpu`.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

pub mod dso;
pub mod events;
pub mod hold;
pub mod machine;
pub mod threads;

/// A multiplicative hasher for pid/tid keys (the std SipHash costs more than the lookup).
#[derive(Clone, Copy, Debug, Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A `HashMap` keyed by small integers, hashed with [`IdHasher`].
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

//! Each thread's command name over time, from side-band records (COMM, FORK).

use std::sync::Arc;

use crate::format::{Record, RecordType};
use crate::model::IdMap;

/// The command names of threads, each with the time it took effect, the way perf's `thread`
/// keeps a comm list: a COMM record sets the name of its tid; a FORK gives the child its parent's
/// name at that time (`thread__fork()`); a thread never named is called `:<tid>` (`thread__new()`),
/// except the idle thread 0, which perf calls `swapper`.
///
/// A sample's comm is the last name set at or before the sample's time, which is what perf, which
/// sorts events by time before handling them, sees, whatever order the records came in. A COMM
/// without a time (no `sample_id_all`) counts just after the newest time seen ([`Threads::saw`]),
/// as perf applies such a record when it comes.
#[derive(Debug, Default)]
pub struct Threads {
    comms: IdMap<u32, Vec<(u64, Name)>>,
    /// The newest time seen.
    now: u64,
}

/// A thread's name from some time on.
#[derive(Clone, Debug)]
enum Name {
    /// Set by a COMM record.
    Set(Arc<[u8]>),
    /// Inherited at a FORK: the parent's name at that time, looked up when asked, since the
    /// parent's COMM may come later in the stream than the FORK while being earlier in time.
    Parent(u32),
}

impl Threads {
    /// The comm of `tid` at `time`, if the thread was named (see [`Threads::name_of`] for the
    /// name perf gives an unnamed one).
    pub fn comm_at(&self, tid: u32, time: u64) -> Option<&Arc<[u8]>> {
        let (mut tid, mut time) = (tid, time);
        // Follow FORK links up a bounded number of generations (a cycle is corrupt input).
        for _ in 0..64 {
            let list = self.comms.get(&tid)?;
            // Sorted by time (see `set`); the newest usually applies.
            let (t, name) = list.iter().rev().find(|(t, _)| *t <= time)?;
            match name {
                Name::Set(c) => return Some(c),
                Name::Parent(p) => (tid, time) = (*p, *t),
            }
        }
        None
    }

    /// The name perf gives a thread no COMM named: `swapper` for the idle thread 0, else
    /// `:<tid>` (`thread__new()`, a signed tid: `:-1`).
    pub fn name_of(tid: u32) -> String {
        if tid == 0 {
            "swapper".into()
        } else {
            format!(":{}", tid as i32)
        }
    }

    /// `f` of the name of `tid` at `time`: its comm, or the name perf gives a thread no COMM
    /// named ([`Threads::name_of`]).
    pub fn with_name<R>(&self, tid: u32, time: u64, f: impl FnOnce(&[u8]) -> R) -> R {
        match self.comm_at(tid, time) {
            Some(c) => f(c),
            None if tid == 0 => f(b"swapper"),
            None => f(Threads::name_of(tid).as_bytes()),
        }
    }

    /// Tells the model the time of a record it does not take in (a sample).
    pub fn saw(&mut self, time: u64) {
        self.now = self.now.max(time);
    }

    /// Takes in a COMM or FORK record.
    pub fn observe(&mut self, rec: &Record<'_>) {
        let time = match rec.sample_id().and_then(|s| s.time) {
            Some(t) => {
                self.now = self.now.max(t);
                t
            }
            None => self.now.saturating_add(1),
        };
        if let Some(c) = rec.comm() {
            self.set(c.tid, time, Name::Set(c.comm.into()));
        } else if let Some(t) = rec.task() {
            if rec.record_type() == RecordType::FORK && t.tid != t.ptid {
                self.set(t.tid, t.time, Name::Parent(t.ptid));
            }
        }
    }

    /// Records a name, keeping the list in time order: records from different cpus interleave
    /// out of time order within a round (a FORK can come after the child's exec COMM).
    fn set(&mut self, tid: u32, time: u64, name: Name) {
        let list = self.comms.entry(tid).or_default();
        let at = list
            .iter()
            .rposition(|(t, _)| *t <= time)
            .map_or(0, |i| i + 1);
        list.insert(at, (time, name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comm_is_looked_up_by_time_through_fork_links() {
        let mut t = Threads::default();
        let name = |s: &str| Name::Set(s.as_bytes().into());
        t.set(1, 0, name("bash"));
        // The child's exec COMM arrives before its FORK (another cpu), but is later in time.
        t.set(2, 300, name("gzip"));
        t.set(2, 200, Name::Parent(1));
        // The parent renames itself after the fork: the child keeps the name at fork time.
        t.set(1, 250, name("sh"));
        let at = |t: &Threads, tid, time| t.with_name(tid, time, |n| n.to_vec());
        assert_eq!(at(&t, 2, 100), b":2", "before the fork: never named");
        assert_eq!(at(&t, 2, 200), b"bash");
        assert_eq!(at(&t, 2, 299), b"bash");
        assert_eq!(at(&t, 2, 300), b"gzip");
        assert_eq!(at(&t, 1, 260), b"sh");
        assert_eq!(at(&t, 0, 5), b"swapper");
        // A FORK cycle (corrupt input) ends.
        t.set(3, 10, Name::Parent(4));
        t.set(4, 10, Name::Parent(3));
        assert_eq!(at(&t, 3, 20), b":3");
    }
}

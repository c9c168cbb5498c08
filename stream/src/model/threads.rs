//! What the filter learns from side-band records: each thread's command name over time (COMM,
//! FORK) and each attr's event name (EVENT_UPDATE, the EVENT_DESC feature).

use std::sync::Arc;

use crate::format::{feature, Endian, Record, RecordType, StreamInfo};
use crate::model::IdMap;

/// `PERF_EVENT_UPDATE__NAME`, the EVENT_UPDATE type that carries an event name.
const EVENT_UPDATE_NAME: u64 = 2;

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

/// Event names by attr index.
#[derive(Debug, Default)]
pub struct Events {
    names: Vec<Option<String>>,
    /// Bumped whenever a name changes, so programs are recompiled.
    pub generation: u64,
}

impl Events {
    /// The name of attr `index`, if known.
    pub fn name(&self, index: usize) -> Option<&str> {
        self.names.get(index)?.as_deref()
    }

    fn set(&mut self, index: usize, name: &[u8]) {
        if self.names.len() <= index {
            self.names.resize(index + 1, None);
        }
        let name = String::from_utf8_lossy(name).into_owned();
        if self.names[index].as_deref() != Some(name.as_str()) {
            self.names[index] = Some(name);
            self.generation += 1;
        }
    }

    fn index_of_id(info: &StreamInfo, id: u64) -> Option<usize> {
        info.attrs.iter().position(|a| a.ids.contains(&id))
    }

    /// Takes in an EVENT_UPDATE or HEADER_FEATURE record (others are ignored). Malformed records
    /// are ignored too: names only help `event` predicates, and perf reports such records itself.
    pub fn observe(&mut self, rec: &[u8], rt: RecordType, info: &StreamInfo) {
        let e = info.endian;
        if rt == RecordType::EVENT_UPDATE {
            if e.u64(rec, 8) != Some(EVENT_UPDATE_NAME) {
                return;
            }
            let (Some(id), Some(name)) = (e.u64(rec, 16), rec.get(24..)) else {
                return;
            };
            let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
            let index = match Events::index_of_id(info, id) {
                Some(i) => i,
                None if info.attrs.len() == 1 => 0,
                None => return,
            };
            self.set(index, name);
        } else if rt == RecordType::HEADER_FEATURE
            && e.u64(rec, 8) == Some(feature::EVENT_DESC.into())
        {
            self.event_desc(&rec[16.min(rec.len())..], e, info);
        }
    }

    /// `write_event_desc()` in `tools/perf/util/header.c`: `u32 nr, attr_size`, then per event the
    /// attr, `u32 nr_ids`, the name as `u32 len` + `len` bytes (NUL-padded), and `u64 ids[nr_ids]`.
    fn event_desc(&mut self, b: &[u8], e: Endian, info: &StreamInfo) -> Option<()> {
        let nr = e.u32(b, 0)? as usize;
        let attr_size = e.u32(b, 4)? as usize;
        let mut at = 8usize;
        for i in 0..nr.min(4096) {
            at = at.checked_add(attr_size)?;
            let nr_ids = e.u32(b, at)? as usize;
            let len = e.u32(b, at + 4)? as usize;
            let name = b.get(at + 8..at.checked_add(8)?.checked_add(len)?)?;
            let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
            at = at + 8 + len;
            let first_id = if nr_ids > 0 { e.u64(b, at) } else { None };
            at = at.checked_add(nr_ids.checked_mul(8)?)?;
            let index = first_id
                .and_then(|id| Events::index_of_id(info, id))
                .unwrap_or(i);
            self.set(index, name);
        }
        Some(())
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

//! Ids for what a profile holds many times: [`StackTable`] for distinct stacks, [`FrameSet`] for
//! the frames they use, [`Comms`] for thread names. Ids are given in order of first sight, so a
//! profile built from the same stream is built the same way.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::symbolize::{FrameId, StackSample, Stacks};

/// Distinct stacks (frame ids, innermost first, as [`Stacks::frames`] gives them) by id.
///
/// The stacks are one array of frame ids, indexed by a table of stack ids compared by their
/// frames there: 4 bytes a bucket and no allocation a stack, where a map of shared slices took
/// 24 and one (on a recording of 1.25 M distinct stacks, the Parquet sink's lookups missed the
/// cache twice each).
///
/// [`Stacks::frames`]: crate::symbolize::Stacks::frames
pub struct StackTable {
    index: hashbrown::HashTable<u32>,
    /// Stack `i`'s frames are `frames[starts[i]..starts[i + 1]]`.
    starts: Vec<usize>,
    frames: Vec<FrameId>,
}

impl Default for StackTable {
    fn default() -> StackTable {
        StackTable {
            index: hashbrown::HashTable::new(),
            starts: vec![0],
            frames: Vec::new(),
        }
    }
}

impl std::fmt::Debug for StackTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StackTable")
            .field("stacks", &self.len())
            .field("frames", &self.frames.len())
            .finish()
    }
}

fn hash_of(frames: &[FrameId]) -> u64 {
    use std::hash::BuildHasher;
    rustc_hash::FxBuildHasher.hash_one(frames)
}

impl StackTable {
    /// The id of a stack, a new one the first time it is seen.
    pub fn id(&mut self, frames: &[FrameId]) -> u32 {
        let hash = hash_of(frames);
        let (starts, all) = (&self.starts, &self.frames);
        let of = |id: u32| &all[starts[id as usize]..starts[id as usize + 1]];
        if let Some(&id) = self.index.find(hash, |&id| of(id) == frames) {
            return id;
        }
        let id = self.len() as u32;
        self.frames.extend_from_slice(frames);
        self.starts.push(self.frames.len());
        let (starts, all) = (&self.starts, &self.frames);
        self.index.insert_unique(hash, id, |&id| {
            hash_of(&all[starts[id as usize]..starts[id as usize + 1]])
        });
        id
    }

    /// The frames of stack `id`, innermost first.
    ///
    /// # Panics
    /// When `id` was not given by [`StackTable::id`].
    pub fn get(&self, id: u32) -> &[FrameId] {
        let i = id as usize;
        &self.frames[self.starts[i]..self.starts[i + 1]]
    }

    /// The number of distinct stacks.
    pub fn len(&self) -> usize {
        self.starts.len() - 1
    }

    /// No stack yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The frames the stacks use.
    pub fn used_frames(&self) -> FrameSet {
        let mut used = FrameSet::default();
        used.insert_all(&self.frames);
        used
    }
}

/// A set of frame ids (one bit a frame of the stream's table): the frames a profile names.
#[derive(Clone, Debug, Default)]
pub struct FrameSet {
    used: Vec<bool>,
    count: usize,
}

impl FrameSet {
    /// Adds the frames of a stack.
    pub fn insert_all(&mut self, frames: &[FrameId]) {
        for &id in frames {
            let i = id as usize;
            if self.used.len() <= i {
                self.used.resize(i + 1, false);
            }
            if !std::mem::replace(&mut self.used[i], true) {
                self.count += 1;
            }
        }
    }

    /// Whether frame `id` is in the set.
    pub fn contains(&self, id: FrameId) -> bool {
        self.used.get(id as usize).copied().unwrap_or(false)
    }

    /// The number of frames in the set.
    pub fn len(&self) -> usize {
        self.count
    }

    /// No frame.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// Thread names by id, each as perf shows it ([`Stacks::comm_name`]): names that show the
/// same are one id.
#[derive(Debug, Default)]
pub struct Comms {
    ids: FxHashMap<String, u32>,
    names: Vec<String>,
    /// The last name looked up: a thread's samples share its name's allocation, so most samples
    /// are found by a pointer compare.
    last: Option<(Arc<[u8]>, u32)>,
}

impl Comms {
    /// The id of the thread name of `s`, a sample of `stacks`.
    pub fn id(&mut self, stacks: &Stacks, s: &StackSample) -> u32 {
        let comm = stacks.comm(s);
        if let (Some(c), Some((last, id))) = (comm, &self.last) {
            if Arc::ptr_eq(c, last) {
                return *id;
            }
        }
        let name = stacks.comm_name(s);
        let id = match self.ids.get(name.as_ref()) {
            Some(&id) => id,
            None => {
                let id = self.names.len() as u32;
                self.names.push(name.to_string());
                self.ids.insert(name.into_owned(), id);
                id
            }
        };
        if let Some(c) = comm {
            self.last = Some((c.clone(), id));
        }
        id
    }

    /// The names by id.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The name of `id`.
    ///
    /// # Panics
    /// When `id` was not given by [`Comms::id`].
    pub fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_and_frames_are_interned_in_order_of_first_sight() {
        let mut t = StackTable::default();
        assert!(t.is_empty());
        assert_eq!(t.id(&[5, 1]), 0);
        assert_eq!(t.id(&[1]), 1);
        assert_eq!(t.id(&[5, 1]), 0);
        assert_eq!((t.len(), t.get(1)), (2, &[1][..]));
        let used = t.used_frames();
        assert_eq!(used.len(), 2);
        assert!(used.contains(5) && used.contains(1) && !used.contains(2) && !used.contains(99));
    }

    /// Through the index's growth: the empty stack, prefixes of one another, the same frames in
    /// another order, each its own id, and each found again with its frames.
    #[test]
    fn many_stacks_keep_their_ids_as_the_table_grows() {
        let mut t = StackTable::default();
        let stacks: Vec<Vec<FrameId>> = (0..20_000u32)
            .map(|i| (0..i % 9).map(|k| (i / 9 + k * 7) % 1000).collect())
            .collect();
        let mut distinct = Vec::<&[FrameId]>::new();
        for s in &stacks {
            let id = t.id(s) as usize;
            if id == distinct.len() {
                distinct.push(s);
            }
            assert_eq!(distinct[id], &s[..]);
        }
        assert_eq!(t.id(&[]), t.id(&[]));
        assert_ne!(t.id(&[1, 2]), t.id(&[2, 1]));
        assert_ne!(t.id(&[1]), t.id(&[1, 1]));
        for (id, s) in distinct.iter().enumerate() {
            assert_eq!(t.id(s), id as u32);
            assert_eq!(t.get(id as u32), *s);
        }
        assert!(t.len() > 2000, "{}", t.len());
    }
}

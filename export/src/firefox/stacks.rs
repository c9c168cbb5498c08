//! The sink's stack table: a prefix tree per thread, a node for each distinct (caller node,
//! frame), the shape of the Firefox Profiler's own stack tables (each entry a prefix and a
//! frame), so a sample is kept as one node and a stack's frames once however many samples and
//! longer stacks share them. A thread's last path is kept, so a sample is looked up only from
//! where its stack leaves the thread's previous one (one hash probe a new frame, none for the
//! shared part).
//!
//! The nodes are found by (parent, frame) in a table of node numbers alone, compared by the
//! nodes' own parent and frame: 4 bytes and a control byte a node, where a map of (parent,
//! frame) → node took 16 and one. The tree is most of the sink's memory on a recording of many
//! short-lived threads, each with a tree of its own.

use std::hash::BuildHasher;

use hashbrown::HashTable;
use perfpipe_profile::kit::FrameSet;
use perfpipe_profile::symbolize::FrameId;

/// The frame of a thread's root node (no frame).
const ROOT: FrameId = FrameId::MAX;

/// The hash of a node's (parent, frame).
#[inline]
fn key_hash(parent: u32, frame: FrameId) -> u64 {
    rustc_hash::FxBuildHasher.hash_one(u64::from(parent) << 32 | u64::from(frame))
}

/// The prefix trees of every thread's stacks; nodes are numbered in order of first sight.
#[derive(Debug, Default)]
pub(super) struct StackTree {
    /// Every node but the roots, by its (parent, frame) ([`key_hash`]).
    index: HashTable<u32>,
    /// Each node's parent; a root's thread.
    parent: Vec<u32>,
    /// Each node's frame; [`ROOT`] for a thread's root.
    frame: Vec<FrameId>,
    /// Each thread's root and the path of its last sample, caller first: (frame, node).
    paths: Vec<(u32, Vec<(FrameId, u32)>)>,
}

impl StackTree {
    /// Adds a thread (numbered in order, from 0).
    pub(super) fn add_thread(&mut self) {
        let root = self.parent.len() as u32;
        self.parent.push(self.paths.len() as u32);
        self.frame.push(ROOT);
        self.paths.push((root, Vec::new()));
    }

    /// The node of a stack of `thread`, its frames innermost first.
    pub(super) fn node(&mut self, thread: u32, frames: &[FrameId]) -> u32 {
        let (root, path) = &mut self.paths[thread as usize];
        let shared = path
            .iter()
            .zip(frames.iter().rev())
            .take_while(|(p, f)| p.0 == **f)
            .count();
        path.truncate(shared);
        let mut node = path.last().map_or(*root, |p| p.1);
        let (parent, frame) = (&mut self.parent, &mut self.frame);
        for &f in frames[..frames.len() - shared].iter().rev() {
            let hash = key_hash(node, f);
            let is = |&n: &u32| parent[n as usize] == node && frame[n as usize] == f;
            node = match self.index.find(hash, is) {
                Some(&n) => n,
                None => {
                    let next = parent.len() as u32;
                    parent.push(node);
                    frame.push(f);
                    let rehash = |&n: &u32| key_hash(parent[n as usize], frame[n as usize]);
                    self.index.insert_unique(hash, next, rehash);
                    next
                }
            };
            path.push((f, node));
        }
        node
    }

    /// The number of nodes (roots included).
    pub(super) fn len(&self) -> usize {
        self.parent.len()
    }

    /// The frames the stacks use.
    pub(super) fn used_frames(&self) -> FrameSet {
        let mut used = FrameSet::default();
        for &f in self.frame.iter().filter(|&&f| f != ROOT) {
            used.insert_all(&[f]);
        }
        used
    }

    /// Node `n`'s frame, `None` for a root.
    pub(super) fn frame(&self, n: u32) -> Option<FrameId> {
        Some(self.frame[n as usize]).filter(|&f| f != ROOT)
    }

    /// Node `n`'s parent (for a root: its thread).
    pub(super) fn parent(&self, n: u32) -> u32 {
        self.parent[n as usize]
    }

    /// Each thread's nodes in order of first sight (the first its root):
    /// `nodes[starts[t]..starts[t + 1]]`.
    pub(super) fn by_thread(&self) -> (Vec<u32>, Vec<usize>) {
        let threads = self.paths.len();
        // A node's thread is its parent's; parents come before their children.
        let mut thread = Vec::with_capacity(self.len());
        for n in 0..self.len() {
            let t = match self.frame[n] {
                ROOT => self.parent[n],
                _ => thread[self.parent[n] as usize],
            };
            thread.push(t);
        }
        let mut starts = vec![0usize; threads + 1];
        for &t in &thread {
            starts[t as usize + 1] += 1;
        }
        for t in 0..threads {
            starts[t + 1] += starts[t];
        }
        let mut next = starts.clone();
        let mut nodes = vec![0u32; self.len()];
        for (n, &t) in thread.iter().enumerate() {
            nodes[next[t as usize]] = n as u32;
            next[t as usize] += 1;
        }
        (nodes, starts)
    }

    /// The frames of node `n`, innermost first (tests).
    #[cfg(test)]
    pub(super) fn frames(&self, mut n: u32) -> Vec<FrameId> {
        let mut frames = Vec::new();
        while let Some(f) = self.frame(n) {
            frames.push(f);
            n = self.parent(n);
        }
        frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_is_a_path_of_nodes_shared_with_its_prefixes_per_thread() {
        let mut t = StackTree::default();
        t.add_thread();
        t.add_thread();
        let abc = t.node(0, &[3, 2, 1]); // innermost first: 1 calls 2 calls 3
        assert_eq!(t.len(), 2 + 3);
        let ab = t.node(0, &[2, 1]);
        assert_eq!(t.len(), 5, "a prefix is a node already");
        assert_eq!(t.node(0, &[3, 2, 1]), abc);
        let abd = t.node(0, &[4, 2, 1]);
        assert_eq!((t.len(), t.parent(abd), t.parent(abc)), (6, ab, ab));
        let other = t.node(1, &[3, 2, 1]);
        assert_ne!(other, abc, "threads have trees of their own");
        assert_eq!(t.frames(other), [3, 2, 1]);
        assert_eq!(t.frames(abd), [4, 2, 1]);
        assert_eq!(t.node(0, &[]), 0, "no frame: the root");
        assert_eq!(t.node(0, &[3, 2, 1]), abc, "after the root, found again");
        let (nodes, starts) = t.by_thread();
        assert_eq!(&nodes[starts[0]..starts[1]], [0, 2, 3, 4, 5]);
        assert_eq!(&nodes[starts[1]..starts[2]], [1, 6, 7, 8]);
        let used = t.used_frames();
        assert_eq!(used.len(), 4);
    }
}

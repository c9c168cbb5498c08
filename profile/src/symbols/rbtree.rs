//! Linux's red-black tree (`lib/rbtree.c`: `rb_insert_color` = `__rb_insert`, `rb_erase` =
//! `__rb_erase_augmented` + `____rb_erase_color`, with the dummy augment callbacks), ported step
//! for step over node indices, to reproduce the *shape* of the tree perf keeps a dso's symbols in.
//! perf 6.1's `symbols__find` returns the first node on its search path that contains the
//! address, so where symbols overlap its answer depends on that shape: on every rotation, colour
//! flip and successor choice of these functions. The `_cached` variants perf calls only track the
//! leftmost node, which changes no shape.
//!
//! Nodes are `0..n`, preallocated; links are [`NIL`] when absent. A node's parent and colour are
//! kept apart (the kernel packs them in `__rb_parent_color`); each helper below names the kernel
//! helper it stands for. The kernel writes each rebalancing case twice, once per side; here it is
//! written once over the side `d` (0 left, 1 right) and its mirror `o = 1 - d`.

/// No node (the kernel's `NULL`).
pub(crate) const NIL: u32 = u32::MAX;

/// A red-black tree over nodes `0..n`.
#[derive(Debug)]
pub(crate) struct Tree {
    /// `rb_left` (`child[0]`) and `rb_right` (`child[1]`).
    child: [Vec<u32>; 2],
    parent: Vec<u32>,
    black: Vec<bool>,
    root: u32,
}

impl Tree {
    /// An empty tree whose nodes will be `0..n`.
    pub fn new(n: usize) -> Tree {
        Tree {
            child: [vec![NIL; n], vec![NIL; n]],
            parent: vec![NIL; n],
            black: vec![false; n],
            root: NIL,
        }
    }

    pub fn root(&self) -> u32 {
        self.root
    }

    pub fn left(&self, n: u32) -> u32 {
        self.get(n, 0)
    }

    pub fn right(&self, n: u32) -> u32 {
        self.get(n, 1)
    }

    /// `n`'s child on side `d`.
    fn get(&self, n: u32, d: usize) -> u32 {
        self.child[d][n as usize]
    }

    /// Sets `n`'s child on side `d`.
    fn set(&mut self, n: u32, d: usize, c: u32) {
        self.child[d][n as usize] = c;
    }

    #[cfg(test)]
    pub fn parent(&self, n: u32) -> u32 {
        self.parent[n as usize]
    }

    #[cfg(test)]
    pub fn is_black(&self, n: u32) -> bool {
        self.black[n as usize]
    }

    /// `rb_parent`.
    fn par(&self, n: u32) -> u32 {
        self.parent[n as usize]
    }

    /// `rb_is_red`.
    fn red(&self, n: u32) -> bool {
        !self.black[n as usize]
    }

    /// `rb_set_parent_color`.
    fn set_pc(&mut self, n: u32, p: u32, black: bool) {
        self.parent[n as usize] = p;
        self.black[n as usize] = black;
    }

    /// `rb_set_parent` (the colour kept).
    fn set_parent(&mut self, n: u32, p: u32) {
        self.parent[n as usize] = p;
    }

    /// `__rb_change_child`.
    fn change_child(&mut self, old: u32, new: u32, parent: u32) {
        if parent != NIL {
            let d = usize::from(self.left(parent) != old);
            self.set(parent, d, new);
        } else {
            self.root = new;
        }
    }

    /// `__rb_rotate_set_parents`: `old`'s parent and colour go to `new`; `old` gets `new` as its
    /// parent and `black` as its colour.
    fn rotate_set_parents(&mut self, old: u32, new: u32, black: bool) {
        let parent = self.par(old);
        self.parent[new as usize] = self.parent[old as usize];
        self.black[new as usize] = self.black[old as usize];
        self.set_pc(old, new, black);
        self.change_child(old, new, parent);
    }

    /// perf's `__symbols__insert`: descend from the root, left where `go_left(existing)` (perf:
    /// `ip < s->start`), else right; link (`rb_link_node`: red, no children); then
    /// `rb_insert_color`.
    pub fn insert(&mut self, node: u32, go_left: impl Fn(u32) -> bool) {
        let mut parent = NIL;
        let mut p = self.root;
        let mut left = false;
        while p != NIL {
            parent = p;
            left = go_left(p);
            p = if left { self.left(p) } else { self.right(p) };
        }
        self.set_pc(node, parent, false);
        self.set(node, 0, NIL);
        self.set(node, 1, NIL);
        if parent == NIL {
            self.root = node;
        } else {
            self.set(parent, usize::from(!left), node);
        }
        self.insert_color(node);
    }

    /// `__rb_insert`.
    fn insert_color(&mut self, mut node: u32) {
        let mut parent = self.par(node); // rb_red_parent
        loop {
            if parent == NIL {
                self.set_pc(node, NIL, true);
                break;
            } else if !self.red(parent) {
                break;
            }
            let gparent = self.par(parent); // rb_red_parent
                                            // The side of gparent that parent is on (the kernel's first branch, `parent !=
                                            // gparent->rb_right`, is d = left), and the uncle's.
            let d = usize::from(parent == self.right(gparent));
            let o = 1 - d;
            let mut tmp = self.get(gparent, o);
            if tmp != NIL && self.red(tmp) {
                // Case 1 - color flips
                self.set_pc(tmp, gparent, true);
                self.set_pc(parent, gparent, true);
                node = gparent;
                parent = self.par(node);
                self.set_pc(node, parent, false);
                continue;
            }
            tmp = self.get(parent, o);
            if node == tmp {
                // Case 2 - rotate at parent (left rotate when d is left)
                tmp = self.get(node, d);
                self.set(parent, o, tmp);
                self.set(node, d, parent);
                if tmp != NIL {
                    self.set_pc(tmp, parent, true);
                }
                self.set_pc(parent, node, false);
                parent = node;
                tmp = self.get(node, o);
            }
            // Case 3 - rotate at gparent (right rotate when d is left)
            self.set(gparent, d, tmp); // == parent's child on side o
            self.set(parent, o, gparent);
            if tmp != NIL {
                self.set_pc(tmp, gparent, true);
            }
            self.rotate_set_parents(gparent, parent, false);
            break;
        }
    }

    /// `rb_erase` (`__rb_erase_augmented`, then `____rb_erase_color` when needed).
    pub fn erase(&mut self, node: u32) {
        let child = self.right(node);
        let mut tmp = self.left(node);
        let rebalance;
        if tmp == NIL {
            // Case 1: node to erase has no more than 1 child.
            let (pp, pb) = (self.par(node), self.black[node as usize]);
            self.change_child(node, child, pp);
            if child != NIL {
                self.set_pc(child, pp, pb);
                rebalance = NIL;
            } else {
                rebalance = if pb { pp } else { NIL };
            }
        } else if child == NIL {
            // Still case 1, but this time the child is node->rb_left.
            let (pp, pb) = (self.par(node), self.black[node as usize]);
            self.set_pc(tmp, pp, pb);
            self.change_child(node, tmp, pp);
            rebalance = NIL;
        } else {
            let mut successor = child;
            let parent;
            let child2;
            tmp = self.left(child);
            if tmp == NIL {
                // Case 2: node's successor is its right child.
                parent = successor;
                child2 = self.right(successor);
            } else {
                // Case 3: node's successor is leftmost under node's right child subtree.
                let mut p;
                loop {
                    p = successor;
                    successor = tmp;
                    tmp = self.left(tmp);
                    if tmp == NIL {
                        break;
                    }
                }
                parent = p;
                child2 = self.right(successor);
                self.set(parent, 0, child2);
                self.set(successor, 1, child);
                self.set_parent(child, successor);
            }
            tmp = self.left(node);
            self.set(successor, 0, tmp);
            self.set_parent(tmp, successor);
            let (pp, pb) = (self.par(node), self.black[node as usize]);
            self.change_child(node, successor, pp);
            if child2 != NIL {
                self.set_pc(successor, pp, pb);
                self.set_pc(child2, parent, true);
                rebalance = NIL;
            } else {
                let black2 = self.black[successor as usize];
                self.set_pc(successor, pp, pb);
                rebalance = if black2 { parent } else { NIL };
            }
        }
        self.set(node, 0, NIL);
        self.set(node, 1, NIL);
        self.set_parent(node, NIL);
        if rebalance != NIL {
            self.erase_color(rebalance);
        }
    }

    /// `____rb_erase_color`.
    fn erase_color(&mut self, mut parent: u32) {
        let mut node = NIL;
        loop {
            // The side of parent that node is on (the kernel's first branch, `node !=
            // parent->rb_right`, is d = left; node is NIL at first), and the sibling's.
            let d = usize::from(node == self.right(parent));
            let o = 1 - d;
            let mut sibling = self.get(parent, o);
            if self.red(sibling) {
                // Case 1 - rotate at parent (left rotate when d is left)
                let tmp1 = self.get(sibling, d);
                self.set(parent, o, tmp1);
                self.set(sibling, d, parent);
                self.set_pc(tmp1, parent, true);
                self.rotate_set_parents(parent, sibling, false);
                sibling = tmp1;
            }
            let mut tmp1 = self.get(sibling, o);
            if tmp1 == NIL || !self.red(tmp1) {
                let tmp2 = self.get(sibling, d);
                if tmp2 == NIL || !self.red(tmp2) {
                    // Case 2 - sibling color flip
                    self.set_pc(sibling, parent, false);
                    if self.red(parent) {
                        self.black[parent as usize] = true;
                    } else {
                        node = parent;
                        parent = self.par(node);
                        if parent != NIL {
                            continue;
                        }
                    }
                    break;
                }
                // Case 3 - rotate at sibling (right rotate when d is left)
                tmp1 = self.get(tmp2, o);
                self.set(sibling, d, tmp1);
                self.set(tmp2, o, sibling);
                self.set(parent, o, tmp2);
                if tmp1 != NIL {
                    self.set_pc(tmp1, sibling, true);
                }
                tmp1 = sibling;
                sibling = tmp2;
            }
            // Case 4 - rotate at parent (left rotate when d is left) + color flips
            let tmp2 = self.get(sibling, d);
            self.set(parent, o, tmp2);
            self.set(sibling, d, parent);
            self.set_pc(tmp1, sibling, true);
            if tmp2 != NIL {
                self.set_parent(tmp2, parent);
            }
            self.rotate_set_parents(parent, sibling, true);
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks the red-black and search-tree invariants and the parent links; returns the
    /// in-order sequence.
    fn check(t: &Tree) -> Vec<u32> {
        fn walk(t: &Tree, n: u32, parent: u32, out: &mut Vec<u32>) -> usize {
            if n == NIL {
                return 1;
            }
            assert_eq!(t.parent(n), parent, "parent link of {n}");
            if !t.is_black(n) {
                for c in [t.left(n), t.right(n)] {
                    assert!(c == NIL || t.is_black(c), "red {n} has a red child {c}");
                }
            }
            let l = walk(t, t.left(n), n, out);
            out.push(n);
            let r = walk(t, t.right(n), n, out);
            assert_eq!(l, r, "black heights under {n}");
            l + t.is_black(n) as usize
        }
        let mut out = Vec::new();
        if t.root() != NIL {
            assert!(t.is_black(t.root()), "the root is black");
        }
        walk(t, t.root(), NIL, &mut out);
        out
    }

    /// The shape as `(node L R)`, lower-case for red.
    fn shape(t: &Tree, n: u32) -> String {
        if n == NIL {
            return ".".into();
        }
        let c = if t.is_black(n) { "B" } else { "r" };
        if t.left(n) == NIL && t.right(n) == NIL {
            return format!("{c}{n}");
        }
        format!("({c}{n} {} {})", shape(t, t.left(n)), shape(t, t.right(n)))
    }

    /// Inserts keys (node i has key `keys[i]`) in order, ties going right as perf's do.
    fn build(keys: &[u64]) -> Tree {
        let mut t = Tree::new(keys.len());
        for (i, &k) in keys.iter().enumerate() {
            t.insert(i as u32, |q| k < keys[q as usize]);
        }
        t
    }

    /// Shapes worked out by hand from `__rb_insert`.
    #[test]
    fn insert_shapes_follow_linux() {
        // 1, 2, 3: case 3 (left rotate at the grandparent) on the right side.
        assert_eq!(shape(&build(&[1, 2, 3]), 0), "r0");
        let t = build(&[1, 2, 3]);
        assert_eq!(shape(&t, t.root()), "(B1 r0 r2)");
        // 3, 1, 2: case 2 (left rotate at the parent) then case 3.
        let t = build(&[3, 1, 2]);
        assert_eq!(shape(&t, t.root()), "(B2 r1 r0)");
        // 1..=4: the fourth insertion is a colour flip (case 1), the root stays black.
        let t = build(&[1, 2, 3, 4]);
        assert_eq!(shape(&t, t.root()), "(B1 B0 (B2 . r3))");
        // 1..=5: then a rotation at 3 (node 2).
        let t = build(&[1, 2, 3, 4, 5]);
        assert_eq!(shape(&t, t.root()), "(B1 B0 (B3 r2 r4))");
        // Equal keys go right: the in-order sequence is insertion order.
        let t = build(&[5, 5, 5, 5]);
        assert_eq!(check(&t), vec![0, 1, 2, 3]);
        assert_eq!(shape(&t, t.root()), "(B1 B0 (B2 . r3))");
    }

    /// Shapes worked out by hand from `rb_erase`.
    #[test]
    fn erase_shapes_follow_linux() {
        // (B1 B0 (B3 r2 r4)): erasing the root (two children, successor 2 is leftmost under
        // 3: case 3) puts 2 there; 2 was red, no rebalance.
        let mut t = build(&[1, 2, 3, 4, 5]);
        t.erase(1);
        assert_eq!(shape(&t, t.root()), "(B2 B0 (B3 . r4))");
        check(&t);
        // Erasing black leaf 0: rebalance at 2 with sibling 3 black and its right child red:
        // case 4, left rotate at 2.
        t.erase(0);
        assert_eq!(shape(&t, t.root()), "(B3 B2 B4)");
        check(&t);
        // Erasing black leaf 2: sibling 4 black, no red children: case 2, 4 red, then up at
        // the root: done.
        t.erase(2);
        assert_eq!(shape(&t, t.root()), "(B3 . r4)");
        check(&t);
        // Erasing the root with one child (case 1 with the right child): 4 takes its colour.
        t.erase(3);
        assert_eq!(shape(&t, t.root()), "B4");
        // Erasing a node whose successor is its right child (case 2).
        let mut t = build(&[2, 1, 3]);
        t.erase(0);
        assert_eq!(shape(&t, t.root()), "(B2 r1 .)");
        check(&t);
    }

    /// Random inserts and erases keep every invariant and the in-order sequence.
    #[test]
    fn random_sequences_keep_the_invariants() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..40 {
            let n = 1 + (rnd() % 300) as usize;
            let keys: Vec<u64> = (0..n).map(|_| rnd() % (n as u64 / 2 + 1)).collect();
            let mut t = build(&keys);
            let mut want: Vec<u32> = (0..n as u32).collect();
            want.sort_by_key(|&i| (keys[i as usize], i));
            assert_eq!(check(&t), want, "round {round}");
            for _ in 0..n / 2 {
                let k = (rnd() % want.len() as u64) as usize;
                let node = want.remove(k);
                t.erase(node);
                assert_eq!(check(&t), want, "round {round}, erased {node}");
            }
        }
    }
}

//! A thread's tables in the processed-profile JSON, written by the sink itself from its stack
//! tree, in the bytes `fxprof-processed-profile` writes for them (its `FrameTable`, `FuncTable`,
//! `StackTable`, thread string table and `SampleTable`; the unit test
//! `the_written_profile_is_the_bytes_fxprof_writes` compares with the whole profile the crate
//! makes): frames are labels (a function's name) in the User or Kernel category, one function a
//! name, interned in the order the crate interns them as each sample's stack is added.

use std::io::Write;

use rustc_hash::FxHashMap;

use super::stacks::StackTree;

/// No stack (a sample without frames), or no prefix (a root stack).
pub(super) const NONE: u32 = u32::MAX;

/// Every used frame's names, caller first (inlined callees after their caller), each a string
/// id and whether it is the kernel's; the strings by id.
#[derive(Debug, Default)]
pub(super) struct Names {
    pub frames: Vec<Vec<(u32, bool)>>,
    pub strings: Vec<String>,
}

/// One thread's frame, function, stack and string tables.
#[derive(Debug, Default)]
pub(super) struct ThreadTables {
    /// The profile's string ids, in the thread's order.
    strings: Vec<u32>,
    string_of: FxHashMap<u32, u32>,
    /// Each function's name (thread string index).
    funcs: Vec<u32>,
    func_of: FxHashMap<u32, u32>,
    /// Each frame's function and whether it is the kernel's.
    frames: Vec<(u32, bool)>,
    frame_of: FxHashMap<(u32, bool), u32>,
    /// Each stack's prefix ([`NONE`] for a root) and frame.
    stacks: Vec<(u32, u32)>,
    stack_of: FxHashMap<(u32, u32), u32>,
}

impl ThreadTables {
    /// The tables of a thread whose nodes (its root first, the rest in order of first sight) are
    /// `nodes`; sets `gecko[n]`, the stack index of each node ([`NONE`] for a root or a stack
    /// whose frames have no name).
    pub(super) fn build(
        tree: &StackTree,
        nodes: &[u32],
        names: &Names,
        gecko: &mut [u32],
    ) -> ThreadTables {
        let mut t = ThreadTables::default();
        for &n in nodes {
            let Some(f) = tree.frame(n) else {
                gecko[n as usize] = NONE;
                continue;
            };
            let mut prefix = gecko[tree.parent(n) as usize];
            for &(s, kernel) in names.frames.get(f as usize).map_or(&[][..], |v| v) {
                let next = t.strings.len() as u32;
                let string = *t.string_of.entry(s).or_insert(next);
                if string == next {
                    t.strings.push(s);
                }
                let next = t.frames.len() as u32;
                let frame = *t.frame_of.entry((string, kernel)).or_insert(next);
                if frame == next {
                    let next = t.funcs.len() as u32;
                    let func = *t.func_of.entry(string).or_insert(next);
                    if func == next {
                        t.funcs.push(string);
                    }
                    t.frames.push((func, kernel));
                }
                let next = t.stacks.len() as u32;
                let stack = *t.stack_of.entry((prefix, frame)).or_insert(next);
                if stack == next {
                    t.stacks.push((prefix, frame));
                }
                prefix = stack;
            }
            gecko[n as usize] = prefix;
        }
        t
    }

    /// `"frameTable":{…},"funcTable":{…}` without the keys' first quote: the frame table's
    /// value, then `,"funcTable":` and the function table's.
    pub(super) fn write_frames(
        &self,
        w: &mut dyn Write,
        [user, kernel]: [u16; 2],
    ) -> std::io::Result<()> {
        let n = self.frames.len();
        write!(w, "{{\"length\":{n},\"address\":")?;
        repeat(w, b"-1", n)?;
        w.write_all(b",\"inlineDepth\":")?;
        repeat(w, b"0", n)?;
        w.write_all(b",\"category\":")?;
        list(
            w,
            self.frames
                .iter()
                .map(|&(_, k)| u32::from(if k { kernel } else { user })),
        )?;
        w.write_all(b",\"subcategory\":")?;
        repeat(w, b"0", n)?;
        w.write_all(b",\"func\":")?;
        list(w, self.frames.iter().map(|f| f.0))?;
        w.write_all(b",\"nativeSymbol\":")?;
        repeat(w, b"null", n)?;
        w.write_all(b",\"innerWindowID\":")?;
        repeat(w, b"0", n)?;
        w.write_all(b",\"line\":")?;
        repeat(w, b"null", n)?;
        w.write_all(b",\"column\":")?;
        repeat(w, b"null", n)?;
        let n = self.funcs.len();
        write!(w, "}},\"funcTable\":{{\"length\":{n},\"name\":")?;
        list(w, self.funcs.iter().copied())?;
        for key in ["isJS", "relevantForJS"] {
            write!(w, ",\"{key}\":")?;
            repeat(w, b"false", n)?;
        }
        w.write_all(b",\"resource\":")?;
        repeat(w, b"-1", n)?;
        for key in ["fileName", "lineNumber", "columnNumber"] {
            write!(w, ",\"{key}\":")?;
            repeat(w, b"null", n)?;
        }
        w.write_all(b"}")
    }

    /// The stack table's value, then `,"stringArray":` and the thread's strings.
    pub(super) fn write_stacks(&self, w: &mut dyn Write, names: &Names) -> std::io::Result<()> {
        let n = self.stacks.len();
        write!(w, "{{\"length\":{n},\"prefix\":[")?;
        for (i, &(p, _)) in self.stacks.iter().enumerate() {
            if i > 0 {
                w.write_all(b",")?;
            }
            match p {
                NONE => w.write_all(b"null")?,
                p => w.write_all(itoa::Buffer::new().format(p).as_bytes())?,
            }
        }
        w.write_all(b"],\"frame\":")?;
        list(w, self.stacks.iter().map(|s| s.1))?;
        w.write_all(b"},\"stringArray\":[")?;
        for (i, &s) in self.strings.iter().enumerate() {
            if i > 0 {
                w.write_all(b",")?;
            }
            serde_json::to_writer(&mut *w, &names.strings[s as usize])
                .map_err(std::io::Error::other)?;
        }
        w.write_all(b"]")
    }
}

/// A JSON list of `n` copies of `item`.
fn repeat(w: &mut dyn Write, item: &[u8], n: usize) -> std::io::Result<()> {
    w.write_all(b"[")?;
    for i in 0..n {
        if i > 0 {
            w.write_all(b",")?;
        }
        w.write_all(item)?;
    }
    w.write_all(b"]")
}

/// A JSON list of numbers.
pub(super) fn list(w: &mut dyn Write, items: impl Iterator<Item = u32>) -> std::io::Result<()> {
    w.write_all(b"[")?;
    let mut buf = itoa::Buffer::new();
    for (i, x) in items.enumerate() {
        if i > 0 {
            w.write_all(b",")?;
        }
        w.write_all(buf.format(x).as_bytes())?;
    }
    w.write_all(b"]")
}

//! Frames named when a profile is written: where the names come from ([`NameSources`]), naming
//! each frame once on the worker pool ([`Namer`]), and how a resolved frame is named
//! ([`frame_name`]): the rules of `stackcollapse-perf.pl` and `inferno-collapse-perf` applied to
//! what `perf script` would have printed for it, so that folded output equals `perf script |
//! inferno-collapse-perf`; flame graphs, Firefox and Parquet name functions the same way.

use std::fmt::Write as _;

use rayon::prelude::*;

use crate::symbolize::{
    resolve, DsoInfo, Frame, FrameId, FrameKind, FrameTables, Resolved, Stacks,
};
use perfpipe_stream::model::machine::DsoId;

use super::intern::FrameSet;

/// Where a sink's frames are named, kept from the batches it reads: the symbol tables and frame
/// table of the first annotated batch (one stream has one of each), and whether kernel frames may
/// be named from this host's kallsyms as the latest batch says.
#[derive(Clone, Debug, Default)]
pub struct NameSources(Option<FrameTables>);

impl NameSources {
    /// Takes in a batch's annotation.
    pub fn observe(&mut self, stacks: &Stacks) {
        match &mut self.0 {
            Some(s) => s.host_kernel = stacks.host_kernel,
            None => self.0 = Some(stacks.frame_tables()),
        }
    }

    /// The tables, once a batch was annotated.
    pub fn get(&self) -> Option<&FrameTables> {
        self.0.as_ref()
    }

    /// A namer of the frames so far, on `pool` if given; `None` before any annotated batch.
    pub fn namer<'a>(&'a self, pool: Option<&'a rayon::ThreadPool>) -> Option<Namer<'a>> {
        let sources = self.0.as_ref()?;
        Some(Namer {
            frames: sources.table.snapshot(),
            sources,
            pool,
        })
    }
}

/// The frames of a stream as they are when a profile is written, each resolved once, on the
/// worker pool if there is one. Results come in the order asked, whatever the pool's order.
#[derive(Debug)]
pub struct Namer<'a> {
    sources: &'a FrameTables,
    frames: Vec<Frame>,
    pool: Option<&'a rayon::ThreadPool>,
}

impl Namer<'_> {
    /// The frames by id.
    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }

    /// The tables the names come from.
    pub fn tables(&self) -> &FrameTables {
        self.sources
    }

    /// `f` of each frame of `used` with its resolved functions (innermost first, as
    /// [`Stacks::resolve`] gives them), by frame id; `T::default()` for the frames not in `used`.
    pub fn each_used<T, F>(&self, used: &FrameSet, f: F) -> Vec<T>
    where
        T: Send + Default,
        F: Fn(&Frame, Vec<Resolved>) -> T + Sync,
    {
        let name = |(i, frame): (usize, &Frame)| -> T {
            if used.contains(i as FrameId) {
                f(frame, self.resolve(frame))
            } else {
                T::default()
            }
        };
        match self.pool {
            Some(p) => p.install(|| self.frames.par_iter().enumerate().map(name).collect()),
            None => self.frames.iter().enumerate().map(name).collect(),
        }
    }

    /// `f` of each frame of `ids` with its resolved functions, in the order of `ids`.
    ///
    /// # Panics
    /// When an id is not in the stream's frame table.
    pub fn each<T, F>(&self, ids: &[FrameId], f: F) -> Vec<T>
    where
        T: Send,
        F: Fn(FrameId, &Frame, Vec<Resolved>) -> T + Sync,
    {
        let name = |&id: &FrameId| -> T {
            let frame = &self.frames[id as usize];
            f(id, frame, self.resolve(frame))
        };
        match self.pool {
            Some(p) => p.install(|| ids.par_iter().map(name).collect()),
            None => ids.iter().map(name).collect(),
        }
    }

    fn resolve(&self, frame: &Frame) -> Vec<Resolved> {
        let mut out = Vec::new();
        resolve(
            &self.sources.symbols,
            self.sources.host_kernel,
            frame,
            &mut out,
        );
        out
    }

    /// The build id of a dso as hex: the one the stream gave (`info`, its MMAP2 or BUILD_ID
    /// record), else the file's own (as perf reads it).
    pub fn build_id(&self, dso: DsoId, info: Option<&DsoInfo>) -> Option<String> {
        let id = info.and_then(|d| d.build_id.as_ref().map(|b| b.to_vec()));
        let id = id.or_else(|| self.sources.symbols.build_id(dso))?;
        let mut hex = String::with_capacity(2 * id.len());
        for b in id {
            let _ = write!(hex, "{b:02x}");
        }
        Some(hex)
    }
}

/// The address a profile shows for a frame: its file offset (`ip - map.start + map.pgoff`, the
/// same in every process that maps the file) when a map covers it, else the address sampled.
pub fn address(frame: &Frame) -> u64 {
    if frame.query.dso.is_some() {
        frame.query.rel
    } else {
        frame.query.ip
    }
}

/// Options of the naming.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Naming {
    /// Unknown frames show their address: `[libc.so.6 <7f12…>]`, `[unknown <…>]` (`--addrs`).
    pub addrs: bool,
    /// Kernel frames end in `_[k]`, JIT frames in `_[j]`, inlined functions in `_[i]` (`--all` of
    /// the collapsers).
    pub annotate: bool,
}

/// Whether the collapsers keep a frame of this name: they drop frames whose symbol starts with `(`
/// (`stackcollapse-perf.pl`'s "skip process names", which also drops C++'s
/// `(anonymous namespace)::…` functions), and a sample left with no frame.
pub fn kept(r: &Resolved) -> bool {
    !r.name.as_deref().is_some_and(|n| n.starts_with('('))
}

/// The name of one frame: `function` (argument lists and Rust hashes dropped, `;` made `:`), or
/// for an address no symbol covers `[dso basename]` (`[unknown]` when no map covers it either).
pub fn frame_name(r: &Resolved, ip: u64, naming: Naming, out: &mut String) {
    let start = out.len();
    match &r.name {
        Some(name) => push_tidy(strip_rust_hash(name), out),
        None => {
            let dso: &str = &r.dso;
            let base = if dso == "[unknown]" {
                "unknown"
            } else {
                &dso[dso.rfind('/').map_or(0, |i| i + 1)..]
            };
            if dso == "[unknown]" && !naming.addrs {
                out.push_str("[unknown]");
            } else if naming.addrs {
                let _ = write!(out, "[{base} <{ip:x}>]");
            } else {
                out.push('[');
                push_tidy(base, out);
                out.push(']');
            }
        }
    }
    if naming.annotate {
        if r.inlined {
            // An inlined function (--inline): the collapsers mark inlined frames `_[i]`.
            out.push_str("_[i]");
            return;
        }
        match r.kind {
            FrameKind::Kernel => out.push_str("_[k]"),
            FrameKind::Jit if !out[start..].contains("_[j]") => out.push_str("_[j]"),
            _ => {}
        }
    }
}

/// A legacy-mangled Rust name that was demangled but kept its hash (`core::fmt::write::h0123…`):
/// the name without it, as the collapsers print it.
fn strip_rust_hash(name: &str) -> &str {
    const HASH: usize = 17; // `h` and 16 hex digits
    if name.len() > HASH + 2 {
        let (rest, hash) = name.split_at(name.len() - HASH);
        if hash.starts_with('h')
            && hash[1..].bytes().all(|b| b.is_ascii_hexdigit())
            && rest.ends_with("::")
        {
            return &rest[..rest.len() - 2];
        }
    }
    name
}

/// Appends `name` with `;` replaced by `:` and its argument list dropped: everything from the
/// first `(` that is outside `<…>`, `{…}`, `[…]` and `(…)`, unless it opens `(anonymous
/// namespace)` or directly follows a `.` (a Go method, `net/http.(*Client).Do`).
fn push_tidy(name: &str, out: &mut String) {
    let mut depth = 0i32;
    let mut end = name.len();
    let mut prev = '\0';
    for (i, c) in name.char_indices() {
        match c {
            '<' | '{' | '[' => depth += 1,
            '>' | '}' | ']' | ')' => depth -= 1,
            '(' => {
                if depth == 0 && prev != '.' && !name[i..].starts_with("(anonymous namespace)") {
                    end = i;
                    break;
                }
                depth += 1;
            }
            _ => {}
        }
        prev = c;
    }
    for c in name[..end].chars() {
        out.push(if c == ';' { ':' } else { c });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn name(n: Option<&str>, dso: &str, kind: FrameKind, naming: Naming) -> String {
        let r = Resolved {
            name: n.map(Arc::from),
            offset: 0,
            dso: Arc::from(dso),
            kind,
            inlined: false,
        };
        let mut s = String::new();
        frame_name(&r, 0x7f00_1234, naming, &mut s);
        s
    }

    #[test]
    fn names_follow_the_collapsers() {
        let plain = Naming::default();
        let u = FrameKind::User;
        assert_eq!(name(Some("main"), "/bin/x", u, plain), "main");
        assert_eq!(
            name(
                Some("std::vector<int, std::allocator<int> >::push_back(int const&)"),
                "/x",
                u,
                plain
            ),
            "std::vector<int, std::allocator<int> >::push_back"
        );
        assert_eq!(
            name(Some("ns::(anonymous namespace)::run(int)"), "/x", u, plain),
            "ns::(anonymous namespace)::run"
        );
        let anon = Resolved {
            name: Some(Arc::from("(anonymous namespace)::run(int)")),
            offset: 0,
            dso: Arc::from("/x"),
            kind: u,
            inlined: false,
        };
        assert!(!kept(&anon), "the collapsers drop frames that start with (");
        assert_eq!(
            name(Some("net/http.(*Client).Do"), "/x", u, plain),
            "net/http.(*Client).Do"
        );
        assert_eq!(
            name(
                Some("foo::{lambda(int)#1}::operator()(int) const"),
                "/x",
                u,
                plain
            ),
            "foo::{lambda(int)#1}::operator"
        );
        assert_eq!(name(Some("a;b"), "/x", u, plain), "a:b");
        assert_eq!(
            name(Some("core::fmt::write::h0123456789abcdef"), "/x", u, plain),
            "core::fmt::write"
        );
        assert_eq!(name(None, "/usr/lib/libc.so.6", u, plain), "[libc.so.6]");
        assert_eq!(name(None, "[unknown]", u, plain), "[unknown]");
        let addrs = Naming {
            addrs: true,
            ..plain
        };
        assert_eq!(
            name(None, "/usr/lib/libc.so.6", u, addrs),
            "[libc.so.6 <7f001234>]"
        );
        assert_eq!(name(None, "[unknown]", u, addrs), "[unknown <7f001234>]");
        let all = Naming {
            annotate: true,
            ..plain
        };
        assert_eq!(
            name(
                Some("schedule"),
                "[kernel.kallsyms]",
                FrameKind::Kernel,
                all
            ),
            "schedule_[k]"
        );
        assert_eq!(
            name(Some("Interp"), "/tmp/perf-1.map", FrameKind::Jit, all),
            "Interp_[j]"
        );
        assert_eq!(name(Some("main"), "/bin/x", u, all), "main");
    }
}

//! An expression compiled for one attr: fields resolved to byte offsets in that attr's samples,
//! `event` folded to a constant, so evaluating a sample is a few loads and compares.

use std::sync::Arc;

use perfpipe_core::Counter;

use super::expr::{balanced, CmpOp, Expr, Field, Value};
use crate::format::tracing::{self, EventFormat, FieldFormat, Render};
use crate::format::{Endian, Sample, SampleLayout};
use crate::model::machine::Machine;
use crate::model::threads::Threads;

/// What evaluation reads besides the record: the thread table and the first sample's time.
#[derive(Debug)]
pub(super) struct Cx<'a> {
    pub threads: &'a Threads,
    pub first_time: u64,
    pub endian: Endian,
    /// The address-space model, when the expression tests `dso`.
    pub machine: Option<&'a Machine>,
    /// Tracepoint fields read past a short payload.
    pub short: &'a Counter,
}

/// A compiled expression. A predicate on a field that the attr's samples lack is `false` (so its
/// negation is `true`), as is one on a field that lies beyond a short record.
#[derive(Clone, Debug)]
pub(super) enum Prog {
    Const(bool),
    Not(Box<Prog>),
    And(Box<Prog>, Box<Prog>),
    Or(Box<Prog>, Box<Prog>),
    U64 {
        at: usize,
        op: CmpOp,
        v: u64,
    },
    U32 {
        at: usize,
        op: CmpOp,
        v: u32,
    },
    RelTime {
        at: usize,
        op: CmpOp,
        v: u64,
    },
    Cpumode {
        op: CmpOp,
        v: u16,
    },
    Comm {
        tid: usize,
        time: Option<usize>,
        glob: Glob,
        eq: bool,
    },
    Dso {
        pid: usize,
        ip: usize,
        glob: Glob,
        eq: bool,
    },
    /// A field of the tracepoint's raw payload.
    Tp(Box<TpPred>),
}

/// A compiled `tp.NAME op value`.
#[derive(Clone, Debug)]
pub(super) struct TpPred {
    layout: SampleLayout,
    field: FieldFormat,
    op: CmpOp,
    test: TpTest,
}

#[derive(Clone, Debug)]
enum TpTest {
    /// The number against `v`.
    Num(i128),
    /// A glob on a string field.
    Str(Glob),
    /// A glob on the text the print format gives the number.
    Text(Arc<Render>, Glob),
}

impl TpPred {
    fn eval(&self, rec: &[u8], cx: &Cx<'_>) -> bool {
        let e = cx.endian;
        let raw = Sample::new(rec, e, &self.layout).raw();
        let Some(v) = raw.and_then(|raw| self.field.read(raw, e)) else {
            cx.short.add(1);
            return false;
        };
        let num = |v: tracing::Value<'_>| match v {
            tracing::Value::Int(i) => Some(i128::from(i)),
            tracing::Value::UInt(u) => Some(i128::from(u)),
            _ => None,
        };
        match &self.test {
            TpTest::Num(n) => num(v).is_some_and(|x| self.op.test(x, *n)),
            TpTest::Str(g) => match v {
                tracing::Value::Str(s) => g.matches(s) == (self.op == CmpOp::Eq),
                _ => false,
            },
            TpTest::Text(r, g) => num(v)
                .and_then(|x| r.text(&self.field.name, x as u64))
                .is_some_and(|t| g.matches(t.as_bytes()) == (self.op == CmpOp::Eq)),
        }
    }
}

impl Prog {
    /// Compiles `e` for samples of an attr with `layout` (none when the attr is unknown), event
    /// name `event` and, for a tracepoint, its format `tp`.
    pub fn compile(
        e: &Expr,
        layout: Option<&SampleLayout>,
        event: Option<&str>,
        tp: Option<&EventFormat>,
    ) -> Prog {
        match e {
            Expr::Or(a, b) => Prog::or(
                Prog::compile(a, layout, event, tp),
                Prog::compile(b, layout, event, tp),
            ),
            Expr::And(a, b) => Prog::and(
                Prog::compile(a, layout, event, tp),
                Prog::compile(b, layout, event, tp),
            ),
            Expr::Tp(name, op, v) => Prog::tp(name, *op, v, layout, tp),
            Expr::Not(a) => match Prog::compile(a, layout, event, tp) {
                Prog::Const(c) => Prog::Const(!c),
                p => Prog::Not(Box::new(p)),
            },
            Expr::Cmp(f, op, v) => Prog::pred(*f, *op, v, layout, event),
            // A balanced tree: a list of thousands of values must not make a program as deep.
            Expr::In(f, vs) => balanced(
                vs.iter()
                    .map(|v| Prog::pred(*f, CmpOp::Eq, v, layout, event))
                    .collect(),
                Prog::or,
            )
            .unwrap_or(Prog::Const(false)),
        }
    }

    /// `tp.NAME op v`: false when the attr is not a tracepoint, its format is unknown or has no
    /// such field, or the value's kind does not fit the field's.
    fn tp(
        name: &str,
        op: CmpOp,
        v: &Value,
        layout: Option<&SampleLayout>,
        tp: Option<&EventFormat>,
    ) -> Prog {
        let (Some(layout), Some(ev)) = (layout, tp) else {
            return Prog::Const(false);
        };
        let Some(field) = ev.field(name) else {
            return Prog::Const(false);
        };
        let test = match v {
            Value::Num(n) if field.kind == tracing::FieldKind::Scalar => {
                TpTest::Num(i128::from(*n))
            }
            Value::Str(s) if field.is_string() => TpTest::Str(Glob::new(s)),
            Value::Str(s) if ev.render.shows(name) => {
                TpTest::Text(Arc::new(ev.render.clone()), Glob::new(s))
            }
            _ => return Prog::Const(false),
        };
        Prog::Tp(Box::new(TpPred {
            layout: *layout,
            field: field.clone(),
            op,
            test,
        }))
    }

    fn or(a: Prog, b: Prog) -> Prog {
        match (a, b) {
            (Prog::Const(true), _) | (_, Prog::Const(true)) => Prog::Const(true),
            (Prog::Const(false), p) | (p, Prog::Const(false)) => p,
            (a, b) => Prog::Or(Box::new(a), Box::new(b)),
        }
    }

    fn and(a: Prog, b: Prog) -> Prog {
        match (a, b) {
            (Prog::Const(false), _) | (_, Prog::Const(false)) => Prog::Const(false),
            (Prog::Const(true), p) | (p, Prog::Const(true)) => p,
            (a, b) => Prog::And(Box::new(a), Box::new(b)),
        }
    }

    fn pred(
        f: Field,
        op: CmpOp,
        v: &Value,
        layout: Option<&SampleLayout>,
        event: Option<&str>,
    ) -> Prog {
        let Some(l) = layout else {
            return Prog::Const(false);
        };
        let at = |o: Option<u16>| o.map(usize::from);
        let num = match v {
            Value::Num(n) | Value::RelTime(n) => *n,
            Value::Str(_) => 0,
        };
        let u32_at = |o: Option<usize>| match (o, u32::try_from(num)) {
            (Some(at), Ok(v)) => Prog::U32 { at, op, v },
            // A value beyond u32: every present field is smaller.
            (Some(_), Err(_)) => Prog::Const(matches!(op, CmpOp::Ne | CmpOp::Lt | CmpOp::Le)),
            (None, _) => Prog::Const(false),
        };
        let u64_at = |o: Option<usize>| match o {
            Some(at) => Prog::U64 { at, op, v: num },
            None => Prog::Const(false),
        };
        match (f, v) {
            (Field::Pid, _) => u32_at(at(l.tid)),
            (Field::Tid, _) => u32_at(at(l.tid).map(|o| o + 4)),
            (Field::Cpu, _) => u32_at(at(l.cpu)),
            (Field::Ip, _) => u64_at(at(l.ip)),
            (Field::Period, _) => u64_at(at(l.period)),
            (Field::Time, Value::RelTime(n)) => match at(l.time) {
                Some(at) => Prog::RelTime { at, op, v: *n },
                None => Prog::Const(false),
            },
            (Field::Time, _) => u64_at(at(l.time)),
            (Field::Cpumode, _) => Prog::Cpumode {
                op,
                v: u16::try_from(num).unwrap_or(u16::MAX),
            },
            (Field::Event, Value::Str(s)) => match event {
                Some(name) => {
                    Prog::Const(Glob::new(s).matches(name.as_bytes()) == (op == CmpOp::Eq))
                }
                None => Prog::Const(false),
            },
            (Field::Comm, Value::Str(s)) => match at(l.tid) {
                Some(tid) => Prog::Comm {
                    tid: tid + 4,
                    time: at(l.time),
                    glob: Glob::new(s),
                    eq: op == CmpOp::Eq,
                },
                None => Prog::Const(false),
            },
            (Field::Dso, Value::Str(s)) => match (at(l.tid), at(l.ip)) {
                (Some(pid), Some(ip)) => Prog::Dso {
                    pid,
                    ip,
                    glob: Glob::new(s),
                    eq: op == CmpOp::Eq,
                },
                _ => Prog::Const(false),
            },
            // The parser rejects the rest (strings for numbers, numbers for strings, dso).
            _ => Prog::Const(false),
        }
    }

    /// Evaluates the program on one SAMPLE record.
    #[inline]
    pub fn eval(&self, rec: &[u8], cx: &Cx<'_>) -> bool {
        let e = cx.endian;
        match self {
            Prog::Const(c) => *c,
            Prog::Not(p) => !p.eval(rec, cx),
            Prog::And(a, b) => a.eval(rec, cx) && b.eval(rec, cx),
            Prog::Or(a, b) => a.eval(rec, cx) || b.eval(rec, cx),
            Prog::U64 { at, op, v } => e.u64(rec, *at).is_some_and(|x| op.test(x, *v)),
            Prog::U32 { at, op, v } => e.u32(rec, *at).is_some_and(|x| op.test(x, *v)),
            Prog::RelTime { at, op, v } => e
                .u64(rec, *at)
                .is_some_and(|x| op.test(x.saturating_sub(cx.first_time), *v)),
            Prog::Cpumode { op, v } => e
                .u16(rec, 4)
                .is_some_and(|m| op.test(m & crate::format::misc::CPUMODE_MASK, *v)),
            Prog::Comm {
                tid,
                time,
                glob,
                eq,
            } => {
                let Some(tid) = e.u32(rec, *tid) else {
                    return false;
                };
                let time = time.and_then(|t| e.u64(rec, t)).unwrap_or(u64::MAX);
                cx.threads.with_name(tid, time, |name| glob.matches(name)) == *eq
            }
            Prog::Dso { pid, ip, glob, eq } => {
                let (Some(pid), Some(ip), Some(m)) =
                    (e.u32(rec, *pid), e.u64(rec, *ip), cx.machine)
                else {
                    return false;
                };
                let mode = e.u16(rec, 4).unwrap_or(0) & crate::format::misc::CPUMODE_MASK;
                // The maps as the stream has them so far (`dso` follows stream order).
                let name = match m.find(pid, mode, ip, u64::MAX) {
                    Some(map) => &m.dso(map.dso).name[..],
                    None => b"[unknown]",
                };
                glob.matches(name) == *eq
            }
            Prog::Tp(t) => t.eval(rec, cx),
        }
    }
}

/// A shell-style glob over bytes: `*`, `?`, `[abc]`, `[a-z]`, `[!a]`; `\` escapes. A pattern
/// without wildcards is an exact comparison.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Glob {
    pat: Vec<u8>,
    literal: bool,
}

impl Glob {
    pub fn new(p: &str) -> Glob {
        let pat = p.as_bytes().to_vec();
        let literal = !pat.iter().any(|b| b"*?[\\".contains(b));
        Glob { pat, literal }
    }

    pub fn matches(&self, s: &[u8]) -> bool {
        if self.literal {
            return self.pat == s;
        }
        glob_match(&self.pat, s)
    }
}

fn glob_match(p: &[u8], s: &[u8]) -> bool {
    // Iterative with one backtrack point for the last `*` (linear for typical patterns).
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        let step = match p.get(pi) {
            Some(b'*') => {
                star = Some((pi, si));
                pi += 1;
                continue;
            }
            Some(b'?') => Some(1),
            Some(b'[') => class(&p[pi..], s[si]),
            Some(b'\\') if pi + 1 < p.len() => (p[pi + 1] == s[si]).then_some(2),
            Some(&c) => (c == s[si]).then_some(1),
            None => None,
        };
        match step {
            Some(n) => {
                pi += n;
                si += 1;
            }
            None => match star {
                Some((sp, ss)) => {
                    pi = sp + 1;
                    si = ss + 1;
                    star = Some((sp, ss + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the class at the start of `p` (`[...]`); returns the class's length.
fn class(p: &[u8], c: u8) -> Option<usize> {
    let mut i = 1;
    let negate = matches!(p.get(1), Some(b'!' | b'^'));
    if negate {
        i += 1;
    }
    let mut hit = false;
    let mut first = true;
    while i < p.len() && (p[i] != b']' || first) {
        first = false;
        let lo = p[i];
        if p.get(i + 1) == Some(&b'-') && p.get(i + 2).is_some_and(|&h| h != b']') {
            hit |= (lo..=p[i + 2]).contains(&c);
            i += 3;
        } else {
            hit |= lo == c;
            i += 1;
        }
    }
    if i >= p.len() {
        // No closing `]`: a literal `[`.
        return (c == b'[').then_some(1);
    }
    (hit != negate).then_some(i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        let m = |p: &str, s: &str| Glob::new(p).matches(s.as_bytes());
        assert!(m("bash", "bash"));
        assert!(!m("bash", "bash2"));
        assert!(m("gz*", "gzip"));
        assert!(m("*", ""));
        assert!(m("*sum", "sha256sum"));
        assert!(m("s?a*", "sha256sum"));
        assert!(m("[gs]*", "gzip") && m("[gs]*", "sha"));
        assert!(!m("[!gs]*", "gzip"));
        assert!(m("kworker/[0-9]*", "kworker/3:1"));
        assert!(m("a\\*", "a*") && !m("a\\*", "ab"));
        assert!(m("*a*b*", "xxaxxbxx") && !m("*a*b*", "xxbxxaxx"));
        assert!(m("[", "[") && !m("[", "a"));
    }
}

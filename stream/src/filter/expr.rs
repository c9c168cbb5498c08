//! The filter expression language: lexer, parser and syntax tree. Parsing needs no stream; fields
//! are resolved against each attr's layout later (`program`).
//!
//! ```text
//! expr   := or
//! or     := and (("||" | "or") and)*
//! and    := unary (("&&" | "and") unary)*
//! unary  := ("!" | "not") unary | "(" expr ")" | field op value | field "in" "[" value ("," value)* "]"
//! op     := "==" | "!=" | "<" | "<=" | ">" | ">="
//! value  := number | time | "string" | name
//! ```

pub use crate::error::ExprError;

/// A sample field an expression can test (a tracepoint's fields are [`Expr::Tp`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// `pid` of `PERF_SAMPLE_TID`.
    Pid,
    /// `tid` of `PERF_SAMPLE_TID`.
    Tid,
    /// The thread's command name, from COMM (and FORK) records, at the sample's time.
    Comm,
    /// `cpu` of `PERF_SAMPLE_CPU`.
    Cpu,
    /// `PERF_SAMPLE_TIME`, in ns.
    Time,
    /// The event name of the sample's attr.
    Event,
    /// `PERF_SAMPLE_IP`.
    Ip,
    /// `misc & CPUMODE_MASK`.
    Cpumode,
    /// `PERF_SAMPLE_PERIOD`.
    Period,
    /// The DSO the ip falls in.
    Dso,
}

impl Field {
    const ALL: &'static [(&'static str, Field)] = &[
        ("pid", Field::Pid),
        ("tid", Field::Tid),
        ("comm", Field::Comm),
        ("cpu", Field::Cpu),
        ("time", Field::Time),
        ("event", Field::Event),
        ("ip", Field::Ip),
        ("cpumode", Field::Cpumode),
        ("period", Field::Period),
        ("dso", Field::Dso),
    ];

    fn parse(name: &str) -> Option<Field> {
        Field::ALL.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
    }

    /// Its name in expressions.
    pub fn name(self) -> &'static str {
        Field::ALL
            .iter()
            .find(|(_, f)| *f == self)
            .map_or("?", |(n, _)| n)
    }

    fn is_string(self) -> bool {
        matches!(self, Field::Comm | Field::Event | Field::Dso)
    }
}

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl CmpOp {
    /// Applies the operator.
    #[inline]
    pub fn test<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }
}

/// A literal on the right of a comparison.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// An integer (decimal or `0x` hex); for `time`, nanoseconds (a unit converts).
    Num(u64),
    /// A time relative to the first sample (`+1.5s`), in ns.
    RelTime(u64),
    /// A quoted string: a glob for `comm`, `event` and `dso`.
    Str(String),
}

/// The syntax tree of an expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expr {
    /// `a || b`
    Or(Box<Expr>, Box<Expr>),
    /// `a && b`
    And(Box<Expr>, Box<Expr>),
    /// `!a`
    Not(Box<Expr>),
    /// `field op value`
    Cmp(Field, CmpOp, Value),
    /// `field in [values]`
    In(Field, Vec<Value>),
    /// `tp.NAME op value`: the field `NAME` of a tracepoint's raw payload, by its format file. A
    /// number compares with the field's value (signed as the format says); a string is a glob on a
    /// string field (`char` arrays, `__data_loc` strings) or on the text the print format gives a
    /// flags or symbolic field (`tp.prev_state == "D"`). `tp.NAME in [..]` is an `||` of these.
    Tp(String, CmpOp, Value),
}

impl Expr {
    /// Whether any predicate tests `field`.
    pub fn uses(&self, field: Field) -> bool {
        match self {
            Expr::Or(a, b) | Expr::And(a, b) => a.uses(field) || b.uses(field),
            Expr::Not(a) => a.uses(field),
            Expr::Cmp(f, _, _) | Expr::In(f, _) => *f == field,
            Expr::Tp(..) => false,
        }
    }

    /// Whether any predicate tests a tracepoint field.
    pub fn uses_tp(&self) -> bool {
        match self {
            Expr::Or(a, b) | Expr::And(a, b) => a.uses_tp() || b.uses_tp(),
            Expr::Not(a) => a.uses_tp(),
            Expr::Cmp(..) | Expr::In(..) => false,
            Expr::Tp(..) => true,
        }
    }

    /// Whether any predicate compares time relative to the first sample.
    pub fn uses_reltime(&self) -> bool {
        match self {
            Expr::Or(a, b) | Expr::And(a, b) => a.uses_reltime() || b.uses_reltime(),
            Expr::Not(a) => a.uses_reltime(),
            Expr::Cmp(_, _, v) => matches!(v, Value::RelTime(_)),
            Expr::In(_, vs) => vs.iter().any(|v| matches!(v, Value::RelTime(_))),
            Expr::Tp(..) => false,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Num(String),
    Str(String),
    Cmp(CmpOp),
    And,
    Or,
    Not,
    LParen,
    RParen,
    LBracket,
    RBracket,
    Comma,
    End,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Num(s) => format!("number `{s}`"),
            Tok::Str(s) => format!("string \"{s}\""),
            Tok::Cmp(_) => "a comparison".into(),
            Tok::And => "`&&`".into(),
            Tok::Or => "`||`".into(),
            Tok::Not => "`!`".into(),
            Tok::LParen => "`(`".into(),
            Tok::RParen => "`)`".into(),
            Tok::LBracket => "`[`".into(),
            Tok::RBracket => "`]`".into(),
            Tok::Comma => "`,`".into(),
            Tok::End => "the end of the expression".into(),
        }
    }
}

/// How deep `(` and `!` may nest. Far more than anyone writes; few enough that the parser's
/// recursion, and then every walk of the tree, stays well inside a thread's stack (60,000 levels,
/// which one `--filter` argument can hold, overflowed it: issue 15).
pub const MAX_NESTING: usize = 128;

/// Joins `items` pairwise, level by level, into a balanced tree (`a, b, c` gives `join(join(a,
/// b), c)`, as the left-associative `&&` and `||` read). Its depth is the log of the length, so a
/// long chain (`pid == 1 || pid == 2 || …`, or a long `in` list) cannot overflow the stack of
/// whoever evaluates or drops it. `None` for no items.
pub(crate) fn balanced<T>(mut items: Vec<T>, join: impl Fn(T, T) -> T) -> Option<T> {
    while items.len() > 1 {
        let mut level = Vec::with_capacity(items.len().div_ceil(2));
        let mut it = items.into_iter();
        while let Some(a) = it.next() {
            level.push(match it.next() {
                Some(b) => join(a, b),
                None => a,
            });
        }
        items = level;
    }
    items.pop()
}

struct Parser<'a> {
    src: &'a str,
    toks: Vec<(Tok, usize)>,
    pos: usize,
    /// `(` and `!` open around the current position.
    depth: usize,
}

/// Parses an expression.
///
/// # Errors
/// An [`ExprError`] pointing at the column of the first fault.
pub fn parse(src: &str) -> Result<Expr, ExprError> {
    let toks = lex(src)?;
    let mut p = Parser {
        src,
        toks,
        pos: 0,
        depth: 0,
    };
    let e = p.or()?;
    match p.peek() {
        Tok::End => Ok(e),
        Tok::RParen => Err(p.err("unbalanced `)`", Some("remove it, or add a `(` before"))),
        t => {
            let t = t.describe();
            Err(p.err(
                &format!("expected `&&`, `||` or the end, found {t}"),
                Some("join predicates with && or ||"),
            ))
        }
    }
}

fn lex(src: &str) -> Result<Vec<(Tok, usize)>, ExprError> {
    let chars: Vec<char> = src.chars().collect();
    let err = |col: usize, msg: &str, hint: Option<&str>| ExprError {
        expr: src.to_string(),
        column: col + 1,
        message: msg.to_string(),
        hint: hint.map(str::to_string),
    };
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        let two = |a: char, b: char| c == a && chars.get(i + 1) == Some(&b);
        let tok = if c.is_whitespace() {
            i += 1;
            continue;
        } else if two('&', '&') {
            i += 2;
            Tok::And
        } else if two('|', '|') {
            i += 2;
            Tok::Or
        } else if two('=', '=') {
            i += 2;
            Tok::Cmp(CmpOp::Eq)
        } else if two('!', '=') {
            i += 2;
            Tok::Cmp(CmpOp::Ne)
        } else if two('<', '=') {
            i += 2;
            Tok::Cmp(CmpOp::Le)
        } else if two('>', '=') {
            i += 2;
            Tok::Cmp(CmpOp::Ge)
        } else if c == '=' {
            return Err(err(i, "`=` is not an operator", Some("compare with `==`")));
        } else if c == '&' || c == '|' {
            return Err(err(
                i,
                &format!("`{c}` is not an operator"),
                Some("use `&&` or `||`"),
            ));
        } else if c == '"' || c == '\'' {
            let mut s = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    None => {
                        return Err(err(
                            start,
                            "unterminated string",
                            Some("close it with the same quote"),
                        ))
                    }
                    Some(&q) if q == c => break,
                    Some('\\') if chars.get(i + 1).is_some() => {
                        s.push(chars[i + 1]);
                        i += 2;
                        continue;
                    }
                    Some(&ch) => s.push(ch),
                }
                i += 1;
            }
            i += 1;
            Tok::Str(s)
        } else if c.is_ascii_digit()
            || (c == '+' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            i += 1;
            while chars
                .get(i)
                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '_')
            {
                i += 1;
            }
            Tok::Num(chars[start..i].iter().collect())
        } else if c.is_ascii_alphabetic() || c == '_' {
            while chars
                .get(i)
                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
            {
                i += 1;
            }
            // `tp.NAME`: a tracepoint field.
            if i - start == 2 && chars[start..i] == ['t', 'p'] && chars.get(i) == Some(&'.') {
                i += 1;
                while chars
                    .get(i)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_')
                {
                    i += 1;
                }
            }
            let word: String = chars[start..i].iter().collect();
            match word.as_str() {
                "and" => Tok::And,
                "or" => Tok::Or,
                "not" => Tok::Not,
                _ => Tok::Ident(word),
            }
        } else {
            i += 1;
            match c {
                '!' => Tok::Not,
                '<' => Tok::Cmp(CmpOp::Lt),
                '>' => Tok::Cmp(CmpOp::Gt),
                '(' => Tok::LParen,
                ')' => Tok::RParen,
                '[' => Tok::LBracket,
                ']' => Tok::RBracket,
                ',' => Tok::Comma,
                _ => {
                    return Err(err(
                        start,
                        &format!("unexpected character `{c}`"),
                        Some("strings are quoted: comm == \"bash\""),
                    ))
                }
            }
        };
        toks.push((tok, start));
    }
    toks.push((Tok::End, chars.len()));
    Ok(toks)
}

impl Parser<'_> {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos].0
    }

    fn next(&mut self) -> Tok {
        let t = self.toks[self.pos].0.clone();
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    fn err(&self, msg: &str, hint: Option<&str>) -> ExprError {
        self.err_at(self.toks[self.pos].1, msg, hint)
    }

    fn err_at(&self, col: usize, msg: &str, hint: Option<&str>) -> ExprError {
        ExprError {
            expr: self.src.to_string(),
            column: col + 1,
            message: msg.to_string(),
            hint: hint.map(str::to_string),
        }
    }

    fn or(&mut self) -> Result<Expr, ExprError> {
        let mut terms = vec![self.and()?];
        while *self.peek() == Tok::Or {
            self.next();
            terms.push(self.and()?);
        }
        Ok(balanced(terms, |a, b| Expr::Or(Box::new(a), Box::new(b))).expect("one term"))
    }

    fn and(&mut self) -> Result<Expr, ExprError> {
        let mut terms = vec![self.unary()?];
        while *self.peek() == Tok::And {
            self.next();
            terms.push(self.unary()?);
        }
        Ok(balanced(terms, |a, b| Expr::And(Box::new(a), Box::new(b))).expect("one term"))
    }

    fn unary(&mut self) -> Result<Expr, ExprError> {
        match self.peek().clone() {
            Tok::Not | Tok::LParen if self.depth == MAX_NESTING => Err(self.err(
                &format!("nested deeper than {MAX_NESTING} levels of `(` and `!`"),
                Some("write it with fewer levels, e.g. `pid in [1, 2]` for a chain of `||`"),
            )),
            Tok::Not => {
                self.next();
                self.depth += 1;
                let e = self.unary();
                self.depth -= 1;
                Ok(Expr::Not(Box::new(e?)))
            }
            Tok::LParen => {
                let open = self.toks[self.pos].1;
                self.next();
                self.depth += 1;
                let e = self.or();
                self.depth -= 1;
                let e = e?;
                if *self.peek() != Tok::RParen {
                    let found = self.peek().describe();
                    return Err(self.err(
                        &format!("expected `)`, found {found}"),
                        Some(&format!("the `(` at column {} is not closed", open + 1)),
                    ));
                }
                self.next();
                Ok(e)
            }
            Tok::Ident(name) => self.predicate(&name),
            t => Err(self.err(
                &format!("expected a field, `!` or `(`, found {}", t.describe()),
                Some(FIELDS_HINT),
            )),
        }
    }

    fn predicate(&mut self, name: &str) -> Result<Expr, ExprError> {
        if let Some(tp) = name.strip_prefix("tp.") {
            return self.tp_predicate(name, tp);
        }
        let Some(field) = Field::parse(name) else {
            return Err(self.err(&format!("unknown field `{name}`"), Some(FIELDS_HINT)));
        };
        self.next();
        match self.next() {
            Tok::Cmp(op) => {
                if field.is_string() && !matches!(op, CmpOp::Eq | CmpOp::Ne) {
                    self.pos -= 1;
                    return Err(self.err(
                        &format!("`{name}` is a string: only == and != apply"),
                        Some("== and != match a glob: comm == \"gz*\""),
                    ));
                }
                let v = self.value(field)?;
                Ok(Expr::Cmp(field, op, v))
            }
            Tok::Ident(w) if w == "in" => {
                if *self.peek() != Tok::LBracket {
                    return Err(self.err("expected `[` after `in`", Some("pid in [1, 2, 3]")));
                }
                self.next();
                let mut vs = vec![self.value(field)?];
                loop {
                    match self.next() {
                        Tok::Comma => vs.push(self.value(field)?),
                        Tok::RBracket => break,
                        t => {
                            self.pos -= 1;
                            return Err(self.err(
                                &format!("expected `,` or `]`, found {}", t.describe()),
                                Some("pid in [1, 2, 3]"),
                            ));
                        }
                    }
                }
                Ok(Expr::In(field, vs))
            }
            t => {
                self.pos -= 1;
                Err(self.err(
                    &format!(
                        "expected an operator after `{name}`, found {}",
                        t.describe()
                    ),
                    Some("operators: == != < <= > >= and `in [..]`"),
                ))
            }
        }
    }

    /// `tp.NAME op value` or `tp.NAME in [values]`.
    fn tp_predicate(&mut self, name: &str, tp: &str) -> Result<Expr, ExprError> {
        if tp.is_empty() {
            return Err(self.err(
                "`tp.` needs a field name",
                Some("e.g. tp.prev_state == \"D\" (the fields of a tracepoint's format file)"),
            ));
        }
        self.next();
        let one = |p: &mut Self, op: CmpOp| -> Result<Expr, ExprError> {
            let col = p.toks[p.pos].1;
            let v =
                match p.next() {
                    Tok::Str(s) => Value::Str(s),
                    Tok::Num(s) => match number(&s) {
                        Some(n) => Value::Num(n),
                        None => {
                            return Err(p.err_at(
                                col,
                                &format!("`{s}` is not a number"),
                                Some("integers are decimal or 0x hex"),
                            ))
                        }
                    },
                    t => return Err(p.err_at(
                        col,
                        &format!(
                            "expected a number or a quoted string, found {}",
                            t.describe()
                        ),
                        Some("tp.prev_pid == 42, tp.prev_comm == \"gz*\", tp.prev_state == \"D\""),
                    )),
                };
            if matches!(v, Value::Str(_)) && !matches!(op, CmpOp::Eq | CmpOp::Ne) {
                return Err(p.err_at(
                    col,
                    "a string compares with == and != only",
                    Some("== and != match a glob: tp.prev_comm == \"gz*\""),
                ));
            }
            Ok(Expr::Tp(tp.to_string(), op, v))
        };
        match self.next() {
            Tok::Cmp(op) => one(self, op),
            Tok::Ident(w) if w == "in" => {
                if *self.peek() != Tok::LBracket {
                    return Err(self.err(
                        "expected `[` after `in`",
                        Some("tp.prev_state in [\"D\", \"S\"]"),
                    ));
                }
                self.next();
                let mut vs = vec![one(self, CmpOp::Eq)?];
                loop {
                    match self.next() {
                        Tok::Comma => vs.push(one(self, CmpOp::Eq)?),
                        Tok::RBracket => break,
                        t => {
                            self.pos -= 1;
                            return Err(self.err(
                                &format!("expected `,` or `]`, found {}", t.describe()),
                                Some("tp.prev_state in [\"D\", \"S\"]"),
                            ));
                        }
                    }
                }
                Ok(balanced(vs, |a, b| Expr::Or(Box::new(a), Box::new(b))).expect("one value"))
            }
            t => {
                self.pos -= 1;
                Err(self.err(
                    &format!(
                        "expected an operator after `{name}`, found {}",
                        t.describe()
                    ),
                    Some("operators: == != < <= > >= and `in [..]`"),
                ))
            }
        }
    }

    fn value(&mut self, field: Field) -> Result<Value, ExprError> {
        let col = self.toks[self.pos].1;
        let tok = self.next();
        let bad = |p: &Self, msg: String, hint: &str| Err(p.err_at(col, &msg, Some(hint)));
        match (field, tok) {
            (f, Tok::Str(s)) if f.is_string() => Ok(Value::Str(s)),
            (f, Tok::Ident(s)) if f.is_string() => bad(
                self,
                format!("`{s}` is not quoted"),
                &format!("strings are quoted: {} == \"{s}\"", f.name()),
            ),
            (f, t) if f.is_string() => bad(
                self,
                format!("expected a quoted string, found {}", t.describe()),
                &format!("{} == \"...\" (a glob: * ? [..])", f.name()),
            ),
            (Field::Cpumode, Tok::Ident(s)) => match cpumode(&s) {
                Some(m) => Ok(Value::Num(m)),
                None => bad(self, format!("unknown cpumode `{s}`"), CPUMODE_HINT),
            },
            (Field::Time, Tok::Num(s)) => match time(&s) {
                Some(v) => Ok(v),
                None => bad(
                    self,
                    format!("`{s}` is not a time"),
                    "a number with a unit ns, us, ms or s (absolute: time >= 12345.5s), or \
                     +N for time since the first sample (time < +1.5s)",
                ),
            },
            (_, Tok::Num(s)) => match number(&s) {
                Some(n) => Ok(Value::Num(n)),
                None => bad(
                    self,
                    format!("`{s}` is not a number"),
                    "integers are decimal or 0x hex",
                ),
            },
            (f, t) => bad(
                self,
                format!("expected a number, found {}", t.describe()),
                if f == Field::Cpumode {
                    CPUMODE_HINT
                } else {
                    "e.g. pid == 1234, ip >= 0xffffffff81000000"
                },
            ),
        }
    }
}

const FIELDS_HINT: &str =
    "fields: pid tid comm cpu time event ip cpumode period dso, and tp.NAME for a tracepoint's \
     fields; e.g. comm == \"bash\" && cpu == 0";
const CPUMODE_HINT: &str =
    "cpumode is one of unknown kernel user hypervisor guest_kernel guest_user";

fn cpumode(s: &str) -> Option<u64> {
    Some(match s {
        "unknown" => 0,
        "kernel" => 1,
        "user" => 2,
        "hypervisor" | "hv" => 3,
        "guest_kernel" | "guest-kernel" => 4,
        "guest_user" | "guest-user" => 5,
        _ => return None,
    })
}

fn number(s: &str) -> Option<u64> {
    let s = s.replace('_', "");
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// `12`, `12ns`, `1.5s`, `+250ms`: ns, exactly (no floating point).
fn time(s: &str) -> Option<Value> {
    let (rel, s) = match s.strip_prefix('+') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let split = s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let scale_digits = match unit {
        "" | "ns" => 0,
        "us" => 3,
        "ms" => 6,
        "s" => 9,
        _ => return None,
    };
    let ns = decimal_scaled(num, scale_digits)?;
    Some(if rel {
        Value::RelTime(ns)
    } else {
        Value::Num(ns)
    })
}

/// `int[.frac]` × 10^`digits`, exactly; fraction digits beyond the scale must be zero... or are
/// truncated (perf's `parse_nsec_time` truncates past 9 digits too).
pub(crate) fn decimal_scaled(num: &str, digits: u32) -> Option<u64> {
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty() || !int.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut v: u64 = int.parse().ok()?;
    v = v.checked_mul(10u64.pow(digits))?;
    let mut scale = 10u64.pow(digits);
    for b in frac.bytes().take(digits as usize) {
        scale /= 10;
        v = v.checked_add(u64::from(b - b'0') * scale)?;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_and_forms() {
        let e = parse("comm == \"x\" || cpu == 0 && !(pid in [1, 0x10])").unwrap();
        let want = Expr::Or(
            Box::new(Expr::Cmp(Field::Comm, CmpOp::Eq, Value::Str("x".into()))),
            Box::new(Expr::And(
                Box::new(Expr::Cmp(Field::Cpu, CmpOp::Eq, Value::Num(0))),
                Box::new(Expr::Not(Box::new(Expr::In(
                    Field::Pid,
                    vec![Value::Num(1), Value::Num(16)],
                )))),
            )),
        );
        assert_eq!(e, want);
        assert_eq!(
            parse("time >= 1.5s and time < +250ms").unwrap(),
            Expr::And(
                Box::new(Expr::Cmp(Field::Time, CmpOp::Ge, Value::Num(1_500_000_000))),
                Box::new(Expr::Cmp(
                    Field::Time,
                    CmpOp::Lt,
                    Value::RelTime(250_000_000)
                )),
            )
        );
        assert_eq!(
            parse("cpumode == user").unwrap(),
            Expr::Cmp(Field::Cpumode, CmpOp::Eq, Value::Num(2))
        );
    }

    #[test]
    fn errors_point_at_the_column_with_a_hint() {
        let cases = [
            ("comm == bash", 9, "not quoted"),
            ("pid = 3", 5, "`=` is not an operator"),
            ("cpu == 0 &&", 12, "expected a field"),
            ("(pid == 1", 10, "expected `)`"),
            ("pid == 1)", 9, "unbalanced"),
            ("foo == 1", 1, "unknown field"),
            ("comm < \"a\"", 6, "only == and !="),
            ("time > 3parsecs", 8, "not a time"),
            ("pid in [1 2]", 11, "expected `,` or `]`"),
            ("comm == \"x", 9, "unterminated"),
            ("cpumode == sideways", 12, "unknown cpumode"),
            ("pid == 99999999999999999999", 8, "not a number"),
            ("", 1, "expected a field"),
            ("pid 3", 5, "expected an operator"),
            ("pid == 1 pid == 2", 10, "expected `&&`"),
        ];
        for (src, col, msg) in cases {
            let e = parse(src).expect_err(src);
            assert_eq!(e.column, col, "{src}: {e}");
            assert!(e.message.contains(msg), "{src}: {e}");
            assert!(e.hint.is_some(), "{src}: no hint");
            assert!(e.to_string().contains('^'));
        }
    }

    proptest::proptest! {
        #[test]
        fn any_input_parses_or_errors_inside_it(src in "[ -~]{0,40}") {
            if let Err(e) = parse(&src) {
                proptest::prop_assert!(e.column >= 1 && e.column <= src.chars().count() + 1);
                proptest::prop_assert!(e.hint.is_some());
            }
        }

        #[test]
        fn near_misses_of_valid_expressions_never_panic(
            src in r#"(pid|comm|time|cpu|event|dso|!|\(|\)|==|<=|&&|\|\||in|\[|\]|,|"g\*"|1\.5s|\+2ms|0x1f| ){0,12}"#
        ) {
            let _ = parse(&src);
        }
    }

    #[test]
    fn tracepoint_fields() {
        let tp = |n: &str, op, v| Expr::Tp(n.into(), op, v);
        assert_eq!(
            parse("tp.prev_state == \"D\" && tp.prev_pid >= 0x10").unwrap(),
            Expr::And(
                Box::new(tp("prev_state", CmpOp::Eq, Value::Str("D".into()))),
                Box::new(tp("prev_pid", CmpOp::Ge, Value::Num(16))),
            )
        );
        assert_eq!(
            parse("tp.prev_state in [\"S\", \"D\"]").unwrap(),
            Expr::Or(
                Box::new(tp("prev_state", CmpOp::Eq, Value::Str("S".into()))),
                Box::new(tp("prev_state", CmpOp::Eq, Value::Str("D".into()))),
            )
        );
        assert!(parse("tp.prev_state == \"D\"").unwrap().uses_tp());
        for (src, col, msg) in [
            ("tp. == 1", 1, "needs a field name"),
            ("tp.x < \"a\"", 8, "== and != only"),
            ("tp.x == user", 9, "expected a number or a quoted string"),
            ("tp.x in [1 2]", 12, "expected `,` or `]`"),
            ("tpx == 1", 1, "unknown field"),
        ] {
            let e = parse(src).expect_err(src);
            assert_eq!(e.column, col, "{src}: {e}");
            assert!(e.message.contains(msg), "{src}: {e}");
        }
    }

    #[test]
    fn times_are_exact() {
        assert_eq!(decimal_scaled("12345.678901", 9), Some(12_345_678_901_000));
        assert_eq!(decimal_scaled("1.0000000019", 9), Some(1_000_000_001));
        assert_eq!(decimal_scaled("7", 0), Some(7));
        assert_eq!(decimal_scaled(".5", 9), None);
        assert_eq!(decimal_scaled("99999999999", 9), None);
    }
}

//! The part of a tracepoint's `print fmt:` that turns numbers into words: `__print_flags`,
//! `__print_symbolic` and the conditional strings around them, e.g. `sched_switch`'s
//!
//! ```text
//! (REC->prev_state & 0xff) ? __print_flags(REC->prev_state & 0xff, "|", { 0x01, "S" }, …) : "R",
//! REC->prev_state & 0x100 ? "+" : ""
//! ```
//!
//! A field's text is the concatenation of every argument of the print format that depends on
//! that field alone and evaluates to a string (`"R"` then `"+"`: `R+`). The letters and masks come
//! from the format file, never from a table: they changed across kernels. Arguments this small C
//! expression evaluator cannot read are skipped. Rules as in libtraceevent's `print_str_arg()`.

/// An expression of the print format.
#[derive(Clone, Debug, PartialEq, Eq)]
enum E {
    Num(u64),
    Str(String),
    Field(String),
    Un(&'static str, Box<E>),
    Bin(&'static str, Box<E>, Box<E>),
    Cond(Box<E>, Box<E>, Box<E>),
    Call(String, Vec<E>),
    List(Vec<E>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum V {
    Int(u64),
    Str(String),
}

/// How the print format shows fields as text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Render {
    /// (field, the arguments that show it), in argument order.
    args: Vec<(String, E)>,
}

impl Render {
    /// Reads the arguments of a print format (`"fmt", arg, arg…`) that show a field of `fields`
    /// as text.
    pub(super) fn parse(print_fmt: &str, fields: &[super::FieldFormat]) -> Render {
        let mut args = Vec::new();
        let Some(toks) = lex(print_fmt) else {
            return Render::default();
        };
        // Skip the format string, then one expression per comma.
        let mut p = P {
            t: &toks,
            i: 0,
            depth: 0,
        };
        if !matches!(p.peek(), Some(T::Str(_))) {
            return Render::default();
        }
        p.i += 1;
        while p.eat(&T::P(",")) {
            let start = p.i;
            let e = p.expr();
            match e {
                Some(e) if matches!(p.peek(), None | Some(T::P(","))) => {
                    let mut names = Vec::new();
                    e.fields(&mut names);
                    names.dedup();
                    if let [name] = &names[..] {
                        if fields.iter().any(|f| &f.name == name) && e.stringy() {
                            args.push((name.clone(), e));
                        }
                    }
                }
                // Unreadable: skip to the next top-level comma.
                _ => {
                    p.i = start;
                    p.skip_arg();
                }
            }
        }
        Render { args }
    }

    /// Whether `field` is shown as text.
    pub fn shows(&self, field: &str) -> bool {
        self.args.iter().any(|(f, _)| f == field)
    }

    /// `field`'s text for the value `v`, or `None` if the print format does not show it as text.
    pub fn text(&self, field: &str, v: u64) -> Option<String> {
        let mut out: Option<String> = None;
        for (_, e) in self.args.iter().filter(|(f, _)| f == field) {
            if let Some(V::Str(s)) = e.eval(v) {
                out.get_or_insert_with(String::new).push_str(&s);
            }
        }
        out
    }
}

impl E {
    fn fields(&self, out: &mut Vec<String>) {
        match self {
            E::Field(f) => {
                if !out.contains(f) {
                    out.push(f.clone());
                }
            }
            E::Un(_, a) => a.fields(out),
            E::Bin(_, a, b) => {
                a.fields(out);
                b.fields(out);
            }
            E::Cond(a, b, c) => {
                a.fields(out);
                b.fields(out);
                c.fields(out);
            }
            E::Call(_, xs) | E::List(xs) => xs.iter().for_each(|x| x.fields(out)),
            E::Num(_) | E::Str(_) => {}
        }
    }

    /// Whether it can evaluate to a string.
    fn stringy(&self) -> bool {
        match self {
            E::Str(_) => true,
            E::Call(n, _) => n == "__print_flags" || n == "__print_symbolic",
            E::Cond(_, b, c) => b.stringy() || c.stringy(),
            _ => false,
        }
    }

    /// Evaluates with every field reference standing for `v`.
    fn eval(&self, v: u64) -> Option<V> {
        let int = |e: &E| match e.eval(v)? {
            V::Int(i) => Some(i),
            V::Str(_) => None,
        };
        Some(match self {
            E::Num(n) => V::Int(*n),
            E::Str(s) => V::Str(s.clone()),
            E::Field(_) => V::Int(v),
            E::Un(op, a) => {
                let a = int(a)?;
                V::Int(match *op {
                    "!" => u64::from(a == 0),
                    "~" => !a,
                    "-" => a.wrapping_neg(),
                    _ => return None,
                })
            }
            E::Bin(op, a, b) => {
                let (a, b) = (int(a)?, int(b)?);
                V::Int(match *op {
                    "|" => a | b,
                    "&" => a & b,
                    "^" => a ^ b,
                    "+" => a.wrapping_add(b),
                    "-" => a.wrapping_sub(b),
                    "*" => a.wrapping_mul(b),
                    "/" => a.checked_div(b)?,
                    "%" => a.checked_rem(b)?,
                    "<<" => a.checked_shl(u32::try_from(b).ok()?).unwrap_or(0),
                    ">>" => a.checked_shr(u32::try_from(b).ok()?).unwrap_or(0),
                    "==" => u64::from(a == b),
                    "!=" => u64::from(a != b),
                    "<" => u64::from(a < b),
                    ">" => u64::from(a > b),
                    "<=" => u64::from(a <= b),
                    ">=" => u64::from(a >= b),
                    "&&" => u64::from(a != 0 && b != 0),
                    "||" => u64::from(a != 0 || b != 0),
                    _ => return None,
                })
            }
            E::Cond(c, a, b) => {
                if int(c)? != 0 {
                    a.eval(v)?
                } else {
                    b.eval(v)?
                }
            }
            E::Call(name, args) => V::Str(call(name, args, v)?),
            E::List(_) => return None,
        })
    }
}

/// `__print_flags(val, delim, {v, "s"}…)` and `__print_symbolic(val, {v, "s"}…)`.
fn call(name: &str, args: &[E], v: u64) -> Option<String> {
    let pairs = |xs: &[E]| -> Option<Vec<(u64, String)>> {
        xs.iter()
            .map(|x| match x {
                E::List(p) => match &p[..] {
                    [k, E::Str(s)] => match k.eval(v)? {
                        V::Int(k) => Some((k, s.clone())),
                        V::Str(_) => None,
                    },
                    _ => None,
                },
                _ => None,
            })
            .collect()
    };
    let val = match args.first()?.eval(v)? {
        V::Int(x) => x,
        V::Str(_) => return None,
    };
    match name {
        "__print_flags" => {
            let delim = match args.get(1)? {
                E::Str(d) => d.clone(),
                _ => return None,
            };
            let flags = pairs(&args[2..])?;
            let mut out = String::new();
            let mut rest = val;
            for (f, s) in &flags {
                if rest == 0 && *f == 0 {
                    out.push_str(s);
                    break;
                }
                if *f != 0 && rest & f == *f {
                    if !out.is_empty() {
                        out.push_str(&delim);
                    }
                    out.push_str(s);
                    rest &= !f;
                }
            }
            if rest != 0 {
                if !out.is_empty() {
                    out.push_str(&delim);
                }
                out.push_str(&format!("0x{rest:x}"));
            }
            Some(out)
        }
        "__print_symbolic" => {
            let syms = pairs(&args[1..])?;
            Some(
                syms.iter()
                    .find(|(k, _)| *k == val)
                    .map_or_else(|| format!("0x{val:x}"), |(_, s)| s.clone()),
            )
        }
        _ => None,
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum T {
    Num(u64),
    Str(String),
    Id(String),
    P(&'static str),
}

fn lex(s: &str) -> Option<Vec<T>> {
    const PUNCT: [&str; 27] = [
        "->", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "(", ")", "{", "}", ",", "?", ":",
        "|", "&", "^", "~", "!", "+", "-", "*", "/", "%", "<",
    ];
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'"' {
            let mut v = Vec::new();
            i += 1;
            while *b.get(i)? != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                    v.push(match *b.get(i)? {
                        b'n' => b'\n',
                        b't' => b'\t',
                        o => o,
                    });
                } else {
                    v.push(b[i]);
                }
                i += 1;
            }
            i += 1;
            out.push(T::Str(String::from_utf8_lossy(&v).into_owned()));
        } else if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric()) {
                i += 1;
            }
            let w = s[start..i].trim_end_matches(['u', 'U', 'l', 'L']);
            let n = match w.strip_prefix("0x").or_else(|| w.strip_prefix("0X")) {
                Some(h) => u64::from_str_radix(h, 16).ok()?,
                None if w.len() > 1 && w.starts_with('0') => {
                    u64::from_str_radix(&w[1..], 8).ok()?
                }
                None => w.parse().ok()?,
            };
            out.push(T::Num(n));
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(T::Id(s[start..i].to_string()));
        } else {
            let p = PUNCT
                .iter()
                .find(|p| s[i..].starts_with(**p))
                .copied()
                .or_else(|| (c == b'>').then_some(">"))?;
            i += p.len();
            out.push(T::P(p));
        }
    }
    Some(out)
}

/// A precedence-climbing parser of C expressions over the tokens. `depth` counts the nesting
/// being parsed (parentheses, operands of unary operators and conditionals, operators chained at
/// one level): deeper than [`MAX_DEPTH`], the argument is unreadable, so that a hostile format
/// (the tracing data of a recording is another machine's) cannot overflow the stack, here or
/// where the tree is evaluated and dropped. Real formats nest a few levels.
struct P<'a> {
    t: &'a [T],
    i: usize,
    depth: usize,
}

/// Most nesting of one print format argument (see [`P`]).
const MAX_DEPTH: usize = 128;

const LEVELS: [&[&str]; 10] = [
    &["||"],
    &["&&"],
    &["|"],
    &["^"],
    &["&"],
    &["==", "!="],
    &["<", ">", "<=", ">="],
    &["<<", ">>"],
    &["+", "-"],
    &["*", "/", "%"],
];

impl P<'_> {
    fn peek(&self) -> Option<&T> {
        self.t.get(self.i)
    }
    fn eat(&mut self, t: &T) -> bool {
        let hit = self.peek() == Some(t);
        if hit {
            self.i += 1;
        }
        hit
    }
    fn skip_arg(&mut self) {
        let mut depth = 0i32;
        while let Some(t) = self.peek() {
            match t {
                T::P("(" | "{") => depth += 1,
                T::P(")" | "}") => depth -= 1,
                T::P(",") if depth <= 0 => return,
                _ => {}
            }
            self.i += 1;
        }
    }
    /// Runs `f` one level deeper; `None` past [`MAX_DEPTH`].
    fn deeper(&mut self, f: impl FnOnce(&mut Self) -> Option<E>) -> Option<E> {
        if self.depth >= MAX_DEPTH {
            return None;
        }
        self.depth += 1;
        let r = f(self);
        self.depth -= 1;
        r
    }
    fn expr(&mut self) -> Option<E> {
        self.deeper(Self::cond)
    }
    fn cond(&mut self) -> Option<E> {
        let c = self.bin(0)?;
        if self.eat(&T::P("?")) {
            let a = self.expr()?;
            if !self.eat(&T::P(":")) {
                return None;
            }
            let b = self.expr()?;
            return Some(E::Cond(Box::new(c), Box::new(a), Box::new(b)));
        }
        Some(c)
    }
    fn bin(&mut self, level: usize) -> Option<E> {
        if level == LEVELS.len() {
            return self.unary();
        }
        let mut a = self.bin(level + 1)?;
        let depth = self.depth;
        while let Some(T::P(op)) = self.peek() {
            let Some(op) = LEVELS[level].iter().find(|o| *o == op).copied() else {
                break;
            };
            self.i += 1;
            // Each operator chained makes the tree one deeper.
            self.depth += 1;
            let b = if self.depth <= MAX_DEPTH {
                self.bin(level + 1)
            } else {
                None
            };
            let Some(b) = b else {
                self.depth = depth;
                return None;
            };
            a = E::Bin(op, Box::new(a), Box::new(b));
        }
        self.depth = depth;
        Some(a)
    }
    fn unary(&mut self) -> Option<E> {
        for op in ["!", "~", "-"] {
            if self.eat(&T::P(op)) {
                let a = self.deeper(Self::unary)?;
                return Some(E::Un(op, Box::new(a)));
            }
        }
        self.primary()
    }
    fn primary(&mut self) -> Option<E> {
        match self.peek()?.clone() {
            T::Num(n) => {
                self.i += 1;
                Some(E::Num(n))
            }
            T::Str(s) => {
                self.i += 1;
                // Adjacent literals concatenate.
                let mut s = s;
                while let Some(T::Str(t)) = self.peek() {
                    s.push_str(t);
                    self.i += 1;
                }
                Some(E::Str(s))
            }
            T::Id(id) if id == "REC" => {
                self.i += 1;
                if !self.eat(&T::P("->")) {
                    return None;
                }
                match self.peek()?.clone() {
                    T::Id(f) => {
                        self.i += 1;
                        Some(E::Field(f))
                    }
                    _ => None,
                }
            }
            T::Id(id) => {
                self.i += 1;
                if !self.eat(&T::P("(")) {
                    return None;
                }
                let mut args = Vec::new();
                if !self.eat(&T::P(")")) {
                    loop {
                        args.push(self.expr()?);
                        if self.eat(&T::P(")")) {
                            break;
                        }
                        if !self.eat(&T::P(",")) {
                            return None;
                        }
                    }
                }
                Some(E::Call(id, args))
            }
            T::P("{") => {
                self.i += 1;
                let mut xs = vec![self.expr()?];
                while self.eat(&T::P(",")) {
                    xs.push(self.expr()?);
                }
                self.eat(&T::P("}")).then_some(E::List(xs))
            }
            T::P("(") => {
                self.i += 1;
                // A cast: `(` type words `)` before an operand.
                let mut j = self.i;
                while let Some(T::Id(w)) = self.t.get(j) {
                    if w == "REC" {
                        break;
                    }
                    j += 1;
                }
                if j > self.i && self.t.get(j) == Some(&T::P(")")) {
                    self.i = j + 1;
                    return self.unary();
                }
                let e = self.expr()?;
                self.eat(&T::P(")")).then_some(e)
            }
            T::P(_) => None,
        }
    }
}

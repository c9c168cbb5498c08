//! The tracing data perf puts in a recording of tracepoints (HEADER_TRACING_DATA in a pipe, the
//! TRACING_DATA feature in a file), and the events' `format` files in it: a typed view of each
//! tracepoint's raw payload (`PERF_SAMPLE_RAW`), field by name.
//!
//! Writer: `tools/perf/util/trace-event-info.c` `tracing_data_get()` (ours: [`Contents`], from the
//! files the caller read, and [`pipe_record`]); reader:
//! `tools/perf/util/trace-event-read.c` `trace_report()`; format files: the kernel's
//! `kernel/trace/trace_events.c` `f_show()`. Offsets, sizes and signedness always come from the
//! format file, never from a table: they differ across kernels (`prev_state` is a `long`, so 4 or
//! 8 bytes; RT kernels add common fields).
//!
//! Parsing never fails as a whole: [`TracingData::parse`] keeps every event it could read and
//! lists what it could not in [`TracingData::errors`], so a truncated blob still names the
//! tracepoints before the cut.
//!
//! ```
//! use perfpipe_format::tracing::{EventFormat, Value};
//! use perfpipe_format::Endian;
//!
//! let fmt = "name: demo\nID: 7\nformat:\n\
//!     \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\n\
//!     \tfield:char comm[8];\toffset:2;\tsize:8;\tsigned:0;\n\
//!     \tfield:int pid;\toffset:12;\tsize:4;\tsigned:1;\n\n\
//!     print fmt: \"comm=%s pid=%d\", REC->comm, REC->pid\n";
//! let ev = EventFormat::parse("demo_sys", fmt).unwrap();
//! let mut raw = vec![7, 0];
//! raw.extend_from_slice(b"cat\0\0\0\0\0\0\0");
//! raw.extend_from_slice(&(-5i32).to_le_bytes());
//! let pid = ev.field("pid").unwrap();
//! assert_eq!(pid.read(&raw, Endian::Little), Some(Value::Int(-5)));
//! assert_eq!(ev.field("comm").unwrap().read(&raw, Endian::Little), Some(Value::Str(b"cat")));
//! ```

mod print_fmt;
mod write;

use std::fmt;

use crate::Endian;
pub use print_fmt::Render;
pub use write::{pipe_record, Contents, VERSION};

/// The magic that opens the blob: `\x17\x08\x44` and `tracing` (`tracing_data_header()`).
pub const MAGIC: &[u8; 10] = b"\x17\x08\x44tracing";

/// The parsed tracing data of a recording.
#[derive(Clone, Debug, Default)]
pub struct TracingData {
    /// `"0.6"` today, `"0.5"` in old perf.
    pub version: String,
    /// Byte order of the numbers in the blob (and of the recording host).
    pub endian: Endian,
    /// `sizeof(long)` of the recording host.
    pub long_size: u8,
    /// Page size of the recording host.
    pub page_size: u32,
    /// The events whose format could be read, in blob order.
    pub events: Vec<EventFormat>,
    /// What could not be read: the first structural fault of the blob (parsing stops there) and
    /// every format file that did not parse (skipped).
    pub errors: Vec<TracingError>,
}

/// A fault in the tracing data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TracingError {
    /// Offset in the blob where it was met.
    pub offset: usize,
    /// What was wrong.
    pub message: String,
}

impl fmt::Display for TracingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tracing data offset {}: {}", self.offset, self.message)
    }
}

/// A cursor over the blob; every read is bounds-checked.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
    e: Endian,
}

impl<'a> Cursor<'a> {
    fn err(&self, message: impl Into<String>) -> TracingError {
        TracingError {
            offset: self.at,
            message: message.into(),
        }
    }
    fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8], TracingError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| {
                self.err(format!(
                    "truncated: {what} needs {n} bytes, {} left",
                    self.b.len() - self.at
                ))
            })?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self, what: &str) -> Result<u8, TracingError> {
        Ok(self.bytes(1, what)?[0])
    }
    fn u32(&mut self, what: &str) -> Result<u32, TracingError> {
        let b = self.bytes(4, what)?;
        Ok(self.e.u32(b, 0).expect("4 bytes"))
    }
    fn u64(&mut self, what: &str) -> Result<u64, TracingError> {
        let b = self.bytes(8, what)?;
        Ok(self.e.u64(b, 0).expect("8 bytes"))
    }
    fn cstr(&mut self, what: &str) -> Result<&'a [u8], TracingError> {
        let rest = &self.b[self.at..];
        let n = rest
            .iter()
            .position(|&c| c == 0)
            .ok_or_else(|| self.err(format!("truncated: {what} has no terminating NUL")))?;
        self.at += n + 1;
        Ok(&rest[..n])
    }
    /// A size-prefixed text of `size` bytes.
    fn sized(&mut self, size: u64, what: &str) -> Result<&'a [u8], TracingError> {
        let n = usize::try_from(size).map_err(|_| self.err(format!("{what}: size {size}")))?;
        self.bytes(n, what)
    }
}

impl TracingData {
    /// Parses a tracing-data blob. Never fails: what could not be read is in `errors`.
    pub fn parse(blob: &[u8]) -> TracingData {
        let mut t = TracingData::default();
        if let Err(e) = t.read(blob) {
            t.errors.push(e);
        }
        t
    }

    fn read(&mut self, blob: &[u8]) -> Result<(), TracingError> {
        let mut c = Cursor {
            b: blob,
            at: 0,
            e: Endian::Little,
        };
        if c.bytes(MAGIC.len(), "the magic")? != MAGIC {
            return Err(TracingError {
                offset: 0,
                message: "not tracing data (bad magic)".into(),
            });
        }
        self.version = String::from_utf8_lossy(c.cstr("the version")?).into_owned();
        c.e = if c.u8("the endian byte")? != 0 {
            Endian::Big
        } else {
            Endian::Little
        };
        self.endian = c.e;
        self.long_size = c.u8("the long size")?;
        self.page_size = c.u32("the page size")?;
        // header_page and header_event (`read_header_files()`).
        for name in [&b"header_page"[..], b"header_event"] {
            let at = c.at;
            let got = c.bytes(name.len() + 1, "a header file name")?;
            if &got[..name.len()] != name || got[name.len()] != 0 {
                return Err(TracingError {
                    offset: at,
                    message: format!("expected `{}`", String::from_utf8_lossy(name)),
                });
            }
            let size = c.u64("a header file size")?;
            c.sized(size, "a header file")?;
        }
        // ftrace formats (`read_ftrace_files()`), then the events by system (`read_event_files()`).
        let n = c.u32("the ftrace format count")?;
        for _ in 0..n {
            let size = c.u64("an ftrace format size")?;
            let text = c.sized(size, "an ftrace format")?;
            self.add("ftrace", text, c.at - text.len());
        }
        let systems = c.u32("the system count")?;
        for _ in 0..systems {
            let sys = String::from_utf8_lossy(c.cstr("a system name")?).into_owned();
            let n = c.u32("an event count")?;
            for _ in 0..n {
                let size = c.u64("an event format size")?;
                let text = c.sized(size, "an event format")?;
                self.add(&sys, text, c.at - text.len());
            }
        }
        // kallsyms, printk formats, saved cmdlines: not needed here, but their sizes are checked so
        // that a blob cut inside them is reported.
        let size = c.u32("the kallsyms size")?;
        c.sized(u64::from(size), "kallsyms")?;
        let size = c.u32("the printk formats size")?;
        c.sized(u64::from(size), "printk formats")?;
        if self.version.as_str() >= "0.6" {
            let size = c.u64("the saved cmdlines size")?;
            c.sized(size, "saved cmdlines")?;
        }
        Ok(())
    }

    fn add(&mut self, system: &str, text: &[u8], offset: usize) {
        match EventFormat::parse(system, &String::from_utf8_lossy(text)) {
            Ok(ev) => self.events.push(ev),
            Err(message) => self.errors.push(TracingError { offset, message }),
        }
    }

    /// The format of the tracepoint with this id (`attr.config` of a `PERF_TYPE_TRACEPOINT` attr).
    pub fn event(&self, id: u64) -> Option<&EventFormat> {
        self.events.iter().find(|e| e.id == id)
    }
}

/// What a field holds, from its declaration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKind {
    /// A number of `size` bytes.
    Scalar,
    /// `TYPE NAME[LEN]` (`len` `None` for `NAME[]`), `size` bytes in place.
    Array {
        /// Declared length, if any.
        len: Option<u32>,
    },
    /// `__data_loc TYPE[] NAME`: a u32 whose low 16 bits are the offset of the data from the
    /// payload's start, the high 16 bits its length.
    DataLoc,
    /// `__rel_loc TYPE[] NAME`: as `DataLoc`, the offset counted from the end of the field.
    RelLoc,
}

/// One field of a tracepoint's payload (a `field:` line of its format file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldFormat {
    /// Its name (`prev_state`).
    pub name: String,
    /// Its C type without the name and array suffix (`long`, `char`, `__data_loc char[]`).
    pub type_: String,
    /// Offset from the start of the raw payload.
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
    /// `signed:1`.
    pub signed: bool,
    /// Scalar, array or dynamic.
    pub kind: FieldKind,
    /// A common field (`common_pid`…), before the blank line.
    pub common: bool,
}

/// A field's value in one payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    /// A signed number.
    Int(i64),
    /// An unsigned number.
    UInt(u64),
    /// A string (a `char` array or `__data_loc char[]`), up to its first NUL.
    Str(&'a [u8]),
    /// Any other array, its bytes.
    Bytes(&'a [u8]),
}

impl FieldFormat {
    /// Whether its elements are characters (a string).
    pub fn is_string(&self) -> bool {
        self.kind != FieldKind::Scalar
            && self
                .type_
                .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                .any(|w| w == "char")
    }

    /// Reads the field from a raw payload in byte order `e`; `None` when the payload is shorter
    /// than the field (or its dynamic data).
    pub fn read<'a>(&self, raw: &'a [u8], e: Endian) -> Option<Value<'a>> {
        let at = self.offset as usize;
        let size = self.size as usize;
        let bytes = |from: usize, n: usize| raw.get(from..from.checked_add(n)?);
        let text = |b: &'a [u8]| {
            if self.is_string() {
                Value::Str(&b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())])
            } else {
                Value::Bytes(b)
            }
        };
        match self.kind {
            FieldKind::Scalar => {
                let v = match size {
                    1 => u64::from(*raw.get(at)?),
                    2 => u64::from(e.u16(raw, at)?),
                    4 => u64::from(e.u32(raw, at)?),
                    8 => e.u64(raw, at)?,
                    _ => return bytes(at, size).map(Value::Bytes),
                };
                Some(if self.signed {
                    let shift = 64 - 8 * size as u32;
                    Value::Int(((v << shift) as i64) >> shift)
                } else {
                    Value::UInt(v)
                })
            }
            FieldKind::Array { .. } => bytes(at, size).map(text),
            FieldKind::DataLoc | FieldKind::RelLoc => {
                let loc = e.u32(raw, at)?;
                let mut from = (loc & 0xffff) as usize;
                if self.kind == FieldKind::RelLoc {
                    from += at + size;
                }
                bytes(from, (loc >> 16) as usize).map(text)
            }
        }
    }
}

/// The format of one tracepoint.
#[derive(Clone, Debug)]
pub struct EventFormat {
    /// Its system (`sched`).
    pub system: String,
    /// Its name (`sched_switch`).
    pub name: String,
    /// Its id: `attr.config` of the perf event that records it.
    pub id: u64,
    /// Its fields, the common ones first.
    pub fields: Vec<FieldFormat>,
    /// The `print fmt:` line, after the colon.
    pub print_fmt: String,
    /// How the print format shows fields as text (flags and symbols).
    pub render: Render,
}

impl EventFormat {
    /// Parses a `format` file of system `system`.
    ///
    /// # Errors
    /// A message when a required line (`name:`, `ID:`) or a field line is malformed.
    pub fn parse(system: &str, text: &str) -> Result<EventFormat, String> {
        let mut name = None;
        let mut id = None;
        let mut fields = Vec::new();
        let mut print_fmt = String::new();
        let mut common = true;
        let mut in_format = false;
        for line in text.lines() {
            let t = line.trim();
            if let Some(v) = t.strip_prefix("name:") {
                name = Some(v.trim().to_string());
            } else if let Some(v) = t.strip_prefix("ID:") {
                id = Some(
                    v.trim()
                        .parse::<u64>()
                        .map_err(|_| format!("bad ID line `{t}`"))?,
                );
            } else if t == "format:" {
                in_format = true;
            } else if let Some(v) = t.strip_prefix("print fmt:") {
                print_fmt = v.trim().to_string();
                in_format = false;
            } else if t.starts_with("field:") {
                let mut f = parse_field(t).ok_or_else(|| format!("bad field line `{t}`"))?;
                f.common = common;
                fields.push(f);
            } else if t.is_empty() && in_format && !fields.is_empty() {
                common = false;
            }
        }
        let name = name.ok_or("no `name:` line")?;
        let id = id.ok_or_else(|| format!("{system}:{name}: no `ID:` line"))?;
        let render = Render::parse(&print_fmt, &fields);
        Ok(EventFormat {
            system: system.to_string(),
            name,
            id,
            fields,
            print_fmt,
            render,
        })
    }

    /// The field of this name, if the event has one.
    pub fn field(&self, name: &str) -> Option<&FieldFormat> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// Bytes of payload the format needs: the end of its last fixed field.
    pub fn min_size(&self) -> usize {
        self.fields
            .iter()
            .map(|f| f.offset as usize + f.size as usize)
            .max()
            .unwrap_or(0)
    }

    /// The field `field` as text, as the print format shows it, when it is shown through flags
    /// or symbols (`prev_state` → `"S"`, `"D"`, `"R+"`); `None` for other fields.
    pub fn text(&self, field: &str, raw: &[u8], e: Endian) -> Option<String> {
        let f = self.field(field)?;
        let v = match f.read(raw, e)? {
            Value::Int(v) => v as u64,
            Value::UInt(v) => v,
            _ => return None,
        };
        self.render.text(field, v)
    }
}

/// `field:TYPE NAME[LEN];\toffset:N;\tsize:N;\tsigned:N;`
fn parse_field(line: &str) -> Option<FieldFormat> {
    let mut decl = None;
    let (mut offset, mut size, mut signed) = (None, None, None);
    for part in line.split(';') {
        let part = part.trim();
        if let Some(v) = part.strip_prefix("field:") {
            decl = Some(v.trim());
        } else if let Some(v) = part.strip_prefix("offset:") {
            offset = v.trim().parse::<u32>().ok();
        } else if let Some(v) = part.strip_prefix("size:") {
            size = v.trim().parse::<u32>().ok();
        } else if let Some(v) = part.strip_prefix("signed:") {
            signed = Some(v.trim() == "1");
        }
    }
    let decl = decl?;
    let (offset, size) = (offset?, size?);
    // The name is the last word; an array suffix may follow it (`comm[16]`) or, for dynamic
    // arrays, sit in the type (`__data_loc char[] name`). Words part at ASCII white space, as
    // libtraceevent's `isspace` parts them (and a one-byte separator keeps `+ 1` on a char
    // boundary: a U+00A0 there panicked, `regression::r40_field_with_unicode_space_is_read`).
    let split = decl.rfind(|c: char| c.is_ascii_whitespace() || c == '*')? + 1;
    let (type_, mut name) = (decl[..split].trim(), &decl[split..]);
    let mut kind = FieldKind::Scalar;
    if let Some(open) = name.find('[') {
        let len = name[open + 1..].trim_end_matches(']');
        kind = FieldKind::Array {
            len: len.trim().parse().ok(),
        };
        name = &name[..open];
    }
    if type_.starts_with("__data_loc") {
        kind = FieldKind::DataLoc;
    } else if type_.starts_with("__rel_loc") {
        kind = FieldKind::RelLoc;
    } else if type_.ends_with("[]") {
        kind = FieldKind::Array { len: None };
    }
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    Some(FieldFormat {
        name: name.to_string(),
        type_: type_.to_string(),
        offset,
        size,
        // Very old kernels lack `signed:`; guess from the type.
        signed: signed.unwrap_or_else(|| !type_.contains("unsigned") && !type_.starts_with('u')),
        kind,
        common: true,
    })
}

#[cfg(test)]
mod tests;

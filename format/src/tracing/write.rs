//! The writer of the tracing data: the blob laid out as perf's `tracing_data_get()`
//! (`tools/perf/util/trace-event-info.c`) writes it, from the files it reads in tracefs, and the
//! pipe-mode record that carries it (`perf_event__synthesize_tracing_data()`). The files are
//! given, not read here: the reading of tracefs belongs to the recorder.

use super::MAGIC;
use crate::build;
use crate::Endian;

/// The version perf 6.x writes: 0.6 adds the saved cmdlines after the printk formats.
pub const VERSION: &str = "0.6";

/// What a tracing-data blob holds: the contents of the tracefs files perf copies, in its order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Contents<'a> {
    /// Byte order of the blob's numbers (the host's).
    pub endian: Endian,
    /// `sizeof(long)` of the host.
    pub long_size: u8,
    /// The host's page size.
    pub page_size: u32,
    /// `events/header_page`.
    pub header_page: &'a [u8],
    /// `events/header_event`.
    pub header_event: &'a [u8],
    /// The `format` files of the recorded events of the `ftrace` system (usually none).
    pub ftrace: Vec<&'a [u8]>,
    /// Per system (other than `ftrace`), its name and the `format` files of its recorded events.
    pub systems: Vec<(&'a str, Vec<&'a [u8]>)>,
    /// `/proc/kallsyms`: perf 6.x writes none (size 0), to keep old readers happy.
    pub kallsyms: &'a [u8],
    /// `printk_formats`.
    pub printk: &'a [u8],
    /// `saved_cmdlines`.
    pub saved_cmdlines: &'a [u8],
}

impl Contents<'_> {
    /// The blob: the magic, `"0.6\0"`, the endian byte (1 for big), `sizeof(long)`, the page size
    /// (u32); `header_page\0` and `header_event\0`, each followed by its u64 size and text; the
    /// ftrace formats (u32 count, then u64 size and text each); the systems (u32 count, then per
    /// system its NUL-terminated name, u32 count and the formats as before); kallsyms and printk
    /// formats (u32 size and text each); saved cmdlines (u64 size and text). Numbers in
    /// `self.endian`; not padded (see [`pipe_record`]).
    ///
    /// # Panics
    /// If `kallsyms` or `printk` exceeds 4 GiB, or a count exceeds `u32::MAX`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let e = self.endian;
        let u32_of = |n: usize| u32::try_from(n).expect("a tracing-data count or size over 4 GiB");
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(VERSION.as_bytes());
        out.push(0);
        out.push(u8::from(e == Endian::Big));
        out.push(self.long_size);
        out.extend_from_slice(&e.put_u32(self.page_size));
        let sized64 = |out: &mut Vec<u8>, text: &[u8]| {
            out.extend_from_slice(&e.put_u64(text.len() as u64));
            out.extend_from_slice(text);
        };
        for (name, text) in [
            (&b"header_page\0"[..], self.header_page),
            (b"header_event\0", self.header_event),
        ] {
            out.extend_from_slice(name);
            sized64(&mut out, text);
        }
        out.extend_from_slice(&e.put_u32(u32_of(self.ftrace.len())));
        for f in &self.ftrace {
            sized64(&mut out, f);
        }
        out.extend_from_slice(&e.put_u32(u32_of(self.systems.len())));
        for (system, formats) in &self.systems {
            out.extend_from_slice(system.as_bytes());
            out.push(0);
            out.extend_from_slice(&e.put_u32(u32_of(formats.len())));
            for f in formats {
                sized64(&mut out, f);
            }
        }
        for text in [self.kallsyms, self.printk] {
            out.extend_from_slice(&e.put_u32(u32_of(text.len())));
            out.extend_from_slice(text);
        }
        sized64(&mut out, self.saved_cmdlines);
        out
    }
}

/// Appends the pipe-mode PERF_RECORD_HEADER_TRACING_DATA that carries `blob`, as perf writes it:
/// the record (`header.size` 16, its `size` the blob's length rounded up to 8), the blob, then
/// zeros up to that size (`perf_event__synthesize_tracing_data()`).
///
/// # Panics
/// If the blob exceeds 4 GiB.
pub fn pipe_record(out: &mut Vec<u8>, e: Endian, blob: &[u8]) {
    let padded = blob.len().next_multiple_of(8);
    let size = u32::try_from(padded).expect("tracing data over 4 GiB");
    build::tracing_data(out, e, size);
    out.extend_from_slice(blob);
    out.resize(out.len() + padded - blob.len(), 0);
}

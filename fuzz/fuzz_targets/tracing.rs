//! Tracing data and tracepoint `format` text on arbitrary bytes: input that starts with the
//! tracing data's magic is parsed whole (`TracingData::parse`: the header, the page and event
//! headers, every event's format, print_fmt); other input is one event's `format` text
//! (`EventFormat::parse`). Then every field of every event is read from the input's bytes as a
//! sample's raw data, and shown as `perf script` shows it (print_fmt's symbolic values and
//! flags). Never panics; an error names where the data went wrong.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfpipe_format::tracing::{EventFormat, TracingData, MAGIC};
use perfpipe_format::Endian;

fn exercise(ev: &EventFormat, raw: &[u8], e: Endian) -> usize {
    let mut n = ev.min_size();
    for f in &ev.fields {
        n ^= usize::from(f.read(raw, e).is_some());
        n ^= ev.text(&f.name, raw, e).map_or(0, |t| t.len());
        if ev.render.shows(&f.name) {
            for v in [0, 1, 2, 0x41, 0x80, u64::MAX, raw.len() as u64] {
                n ^= ev.render.text(&f.name, v).map_or(0, |t| t.len());
            }
        }
    }
    n
}

fuzz_target!(|data: &[u8]| {
    if data.starts_with(MAGIC) {
        let td = TracingData::parse(data);
        for err in &td.errors {
            assert!(err.offset <= data.len(), "{err} past the end");
            std::hint::black_box(err.to_string());
        }
        for ev in &td.events {
            std::hint::black_box(exercise(ev, data, td.endian));
            std::hint::black_box(td.event(ev.id));
        }
    } else {
        let text = String::from_utf8_lossy(data);
        if let Ok(ev) = EventFormat::parse("fuzz", &text) {
            for e in [Endian::Little, Endian::Big] {
                std::hint::black_box(exercise(&ev, data, e));
            }
        }
    }
});

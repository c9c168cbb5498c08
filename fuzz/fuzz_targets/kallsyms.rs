//! Kallsyms text on arbitrary bytes, as `--kallsyms FILE`, an archive's `kallsyms` and
//! `/proc/kallsyms` are read (`parse_kallsyms`, perf's rules), and as `perfpipe archive` slims it
//! for the addresses hit (`slim::kallsyms`). Never panics; the slim copy names every hit as the
//! whole text does (its promise), and is no longer than the whole plus the anchors.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfpipe_profile::symbols::slim;
use perfpipe_profile::symbols::table::{parse_kallsyms, Table};

fn name(t: &Table, a: u64) -> Option<String> {
    t.find(a).map(|h| h.name.to_string())
}

fuzz_target!(|data: &[u8]| {
    let whole = parse_kallsyms(data);
    let mut hits = Vec::new();
    for (a, b) in whole.ranges().take(16) {
        hits.extend([a, a + b.saturating_sub(a) / 2, b.saturating_sub(1), b]);
    }
    // A few addresses from the input's own bytes: below, between and past the symbols.
    for w in data.chunks_exact(8).take(4) {
        hits.push(u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    let small = slim::kallsyms(data, &hits);
    assert!(small.len() <= data.len() + 1, "the slim copy grew");
    let slimmed = parse_kallsyms(&small);
    for &a in &hits {
        assert_eq!(
            name(&whole, a),
            name(&slimmed, a),
            "{a:#x} named otherwise by the slim copy"
        );
    }
});

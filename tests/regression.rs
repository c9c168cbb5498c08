//! Fuzz crashes turned into tests (issues 7, 15 and 40). Each test is named `r7_<what>` (or
//! `r15_`, `r40_` by issue), says what the fuzzer (or the review of what it cannot reach) found,
//! and replays the input the way the fuzz target did (`fuzz/src/lib.rs`: `decode` fed in chunks,
//! with or without `read`'s headroom; `fuzz/fuzz_targets/*.rs`), so it runs in CI without nightly.
//!
//! See: issue 7 ("Reliability: fuzzed decoder …").

use perfpipe_core::{harness, Batch};
use perfpipe_stream::decode::DecodeConfig;
use perfpipe_stream::read::HEADROOM;

/// Raw batches of `data` cut at `cuts`, each with `headroom` bytes before its payload.
fn batches(data: &[u8], cuts: &[usize], headroom: usize) -> Vec<Batch> {
    let mut out = Vec::new();
    let mut from = 0;
    for &to in cuts.iter().chain([&data.len()]) {
        let mut b = Batch::default();
        b.data.resize(headroom, 0);
        b.data.extend_from_slice(&data[from..to]);
        b.start = headroom;
        b.stream_offset = from as u64;
        out.push(b);
        from = to;
    }
    out
}

/// Decodes `data` cut at `cuts`; the error message, if any.
fn decode_error(data: &[u8], cuts: &[usize], headroom: usize) -> Option<String> {
    let mut stage = DecodeConfig::default().build();
    harness::run_stage(&mut stage, batches(data, cuts, headroom))
        .err()
        .map(|e| e.to_string())
}

pipetest!(
    /// Found by `fuzz/fuzz_targets/decode.rs` (14 artifacts, e.g. crash-2375c2f4…: 13 bytes after the
    /// 8-byte seed): an input shorter than the 16-byte pipe header with a bad magic, split so that the
    /// first batch held fewer than 8 bytes and the next had no headroom, was reported as "truncated
    /// inside a record header" instead of "not a perf pipe stream": `decode` accumulated the header
    /// without looking at the magic, and called the pipe header a record header. Fixed in
    /// `Decode::flush` (check the magic of a partial header) and `Error::Truncated`'s text.
    r7_short_bad_magic_split_without_headroom, |_dir| {
    let input = b"\x0b\x0b\x00\xaai\x0b\x0b\x0b\x0b\x0b\x0b\x0b\x12";
    let whole = decode_error(input, &[], HEADROOM).expect("an error");
    assert!(
        whole.starts_with("offset 0: not a perf pipe stream: magic"),
        "{whole}"
    );
    for headroom in [0, HEADROOM] {
        for cut in 1..input.len() {
            let split = decode_error(input, &[cut], headroom).expect("an error");
            assert_eq!(split, whole, "cut at {cut}, headroom {headroom}");
        }
    }
});

pipetest!(
    /// The same fix: a good magic whose header is cut short names the pipe header, in every split.
    r7_short_pipe_header_is_named, |_dir| {
    let input = b"PERFILE2\x10\x00";
    for headroom in [0, HEADROOM] {
        for cut in 0..input.len() {
            let cuts: &[usize] = if cut == 0 { &[] } else { &[cut] };
            let e = decode_error(input, cuts, headroom).expect("an error");
            assert_eq!(
                e, "offset 0: input truncated inside the pipe header: 10 of 16 bytes present",
                "cut at {cut}, headroom {headroom}"
            );
        }
    }
});

pipetest!(
    /// Found by the soak (`benches/soak.sh`, which repeats a recording's records, preamble
    /// included): every repeated HEADER_ATTR was added to the stream's attr table again, so memory
    /// grew with the stream's length (RSS 10 → 67 MiB after ~6 GB) and every batch that followed
    /// copied the growing table. Fixed in `StreamInfo::add_attr` (an attr equal to a known one is not
    /// added again) and `decode` (no copy of the shared info for a repeated attr; a new attr beyond
    /// 65535 distinct ones, which a `u16` tag cannot index, is an error).
    r7_repeated_attrs_do_not_accumulate, |_dir| {
    let one = crate::util::fixture_bytes("callgraph.pipe.data");
    let mut input = one.clone();
    for _ in 0..200 {
        input.extend_from_slice(&one[16..]);
    }
    let mut stage = DecodeConfig::default().build();
    let cuts: Vec<usize> = (1..input.len() / 65536).map(|i| i * 65536).collect();
    let out = harness::run_stage(&mut stage, batches(&input, &cuts, HEADROOM)).unwrap();
    let info = perfpipe_stream::format::StreamInfo::of(out.last().unwrap()).unwrap();
    assert_eq!(info.attrs.len(), 1, "201 copies of one attr");
    let mut written = Vec::new();
    for b in &out {
        for s in &b.spans {
            written.extend_from_slice(b.bytes(s));
        }
    }
    assert!(written == input, "round trip");
});

pipetest!(
    /// The limit of the same fix: the 65536th distinct attr is a clear error at its offset.
    r7_too_many_distinct_attrs_is_an_error, |_dir| {
    let mut input = b"PERFILE2".to_vec();
    input.extend_from_slice(&16u64.to_le_bytes());
    let n = perfpipe_stream::format::MAX_ATTRS + 1;
    let mut last = 0;
    for i in 0..n as u64 {
        last = input.len();
        // HEADER_ATTR: header, a 64-byte attr (size 64) whose config differs, one id.
        input.extend_from_slice(&64u32.to_le_bytes());
        input.extend_from_slice(&0u16.to_le_bytes());
        input.extend_from_slice(&80u16.to_le_bytes());
        let mut attr = [0u8; 64];
        attr[4..8].copy_from_slice(&64u32.to_le_bytes());
        attr[8..16].copy_from_slice(&i.to_le_bytes());
        input.extend_from_slice(&attr);
        input.extend_from_slice(&(i + 1).to_le_bytes());
    }
    let e = decode_error(&input, &[], HEADROOM).expect("an error");
    assert_eq!(
        e,
        format!("offset {last}: ATTR record: more than 65535 distinct attrs in one stream")
    );
});

// See: issue 15 item 6 ("Fuzzing to the bar … every crash found becomes a regression test").
//
pipetest!(
    /// Found while fuzzing for issue 15, from what `fuzz/fuzz_targets/filter.rs` cannot reach (its
    /// inputs are at most 4 KiB, a `--filter` argument up to 128 KiB): an expression nested 60,000
    /// levels deep in `(` or `!` overflowed the parser's stack, and perfpipe died of SIGABRT ("thread
    /// 'main' has overflowed its stack"), no error, no column. Fixed in `filter/expr.rs` (`Parser`:
    /// nesting deeper than `MAX_NESTING` is a syntax error at the `(` or `!` that goes too deep).
    r15_deeply_nested_filter_is_a_clear_error, |_dir| {
    let input = crate::util::fixture_bytes("cpu-clock.pipe.data");
    let parens = format!("{}pid == 1{}", "(".repeat(60_000), ")".repeat(60_000));
    let nots = format!("{}pid == 1", "!".repeat(100_000));
    for expr in [parens, nots] {
        let out = crate::util::perfpipe(&["--filter", &expr], &input);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let head: String = stderr.chars().take(300).collect();
        assert_eq!(out.status.code(), Some(2), "{head}");
        assert!(
            head.contains("column ") && head.contains("nested"),
            "{head}"
        );
        assert!(out.stdout.is_empty(), "wrote output");
    }
});

pipetest!(
    /// The same review: long but flat expressions, which a generated filter makes (`pid in [...]` of
    /// 9,156 pids, a `||` chain of 9,156 predicates, an `&&` chain of 8,000), built a syntax tree or
    /// program as deep, and the `filter` thread overflowed its stack when it evaluated or dropped it
    /// (SIGABRT). Fixed in `filter/expr.rs` (chains of `&&` and `||` are built as balanced trees) and
    /// `filter/program.rs` (so is an `in` list): the depth is the log of the length. Each keeps what
    /// `pid <= 9155` keeps, on the fixture's first 600 records (pids 9149 to 9159: some of each).
    r15_long_flat_filters_run, |_dir| {
    let all = crate::util::fixture_bytes("cpu-clock.pipe.data");
    let mut end = 16;
    for _ in 0..600 {
        end += usize::from(u16::from_le_bytes([all[end + 6], all[end + 7]]));
    }
    let input = &all[..end];
    let short = crate::util::perfpipe(&["--filter", "pid <= 9155"], input);
    assert_eq!(short.status.code(), Some(0));
    let kept = crate::util::perfpipe(&["--drop", "sample"], input)
        .stdout
        .len();
    assert!(
        kept < short.stdout.len() && short.stdout.len() < input.len(),
        "some samples are kept, some dropped"
    );
    let pids: Vec<String> = (0..=9155).map(|p| p.to_string()).collect();
    let list = format!("pid in [{}]", pids.join(", "));
    let chain = pids.iter().map(|p| format!("pid=={p}")).collect::<Vec<_>>();
    let chain = chain.join("||");
    let and_chain = vec!["pid <= 9155"; 8_000].join(" && ");
    for expr in [list, chain, and_chain] {
        let out = crate::util::perfpipe(&["--filter", &expr], input);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{}: {stderr}", &expr[..40]);
        assert!(
            out.stdout == short.stdout,
            "{}: not what pid <= 9155 keeps",
            &expr[..40]
        );
    }
});

/// A tracepoint `format` text with `print` as its print fmt line and one field `state`.
fn format_with_print(print: &str, offset: &str) -> String {
    format!(
        "name: fuzz\nID: 1\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\n\
\tfield:long state;\toffset:{offset};\tsize:8;\tsigned:1;\n\nprint fmt: {print}\n"
    )
}

pipetest!(
    /// Issue 40's review before the `tracing` fuzz target ran (a tracepoint format is read from the
    /// tracing data of a recording made on another machine, so it is untrusted): the print fmt parser
    /// recursed once per `(` (about 13 frames each), so a format of a few thousand `(` overflowed
    /// the stack, and a chain of operators made a tree as deep as it was long, which evaluating and
    /// dropping recursed through. Fixed in `format/src/tracing/print_fmt.rs`: nesting deeper than
    /// `MAX_DEPTH` makes the argument unreadable (skipped, as any argument the evaluator cannot read),
    /// on a thread with the 2 MiB stack of a test or a pool thread.
    r40_deeply_nested_print_fmt_is_skipped, |_dir| {
    use perfpipe_stream::format::tracing::EventFormat;
    let run = |print: String| {
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                let text = format_with_print(&print, "8");
                let ev = EventFormat::parse("fuzz", &text).expect("the format parses");
                (ev.render.shows("state"), ev.render.text("state", 1))
            })
            .unwrap()
            .join()
            .expect("no stack overflow")
    };
    let deep = |open: &str, close: &str, n: usize| {
        format!(
            "\"%s\", {}REC->state ? \"R\" : \"S\"{}",
            open.repeat(n),
            close.repeat(n)
        )
    };
    // Shallow nesting still reads; deep nesting of parentheses, negations, conditionals and
    // operator chains is skipped without overflowing.
    assert_eq!(run(deep("(", ")", 20)), (true, Some("R".into())));
    assert_eq!(run(deep("(", ")", 20_000)), (false, None));
    assert_eq!(run(deep("!", "", 100_000)), (false, None));
    assert_eq!(run(deep("1 ? ", " : \"x\"", 20_000)), (false, None));
    let chain = format!(
        "\"%s\", {}REC->state ? \"R\" : \"S\"",
        "1 + ".repeat(100_000)
    );
    assert!(!run(chain).0);
});

pipetest!(
    /// Found by issue 40's `tracing` fuzz target (20 crashes in 7.25 M executions, one cause): a
    /// field's declaration was split at its last white space by `char::is_whitespace`, then
    /// sliced one byte past it, so a U+00A0 (two bytes) before the name sliced inside a char: a
    /// panic (`field:int\u{a0}common_pid;`). Fixed in `format/src/tracing/mod.rs`: words part at
    /// ASCII white space, as libtraceevent's `isspace` parts them; a declaration with no such
    /// space has no name (a bad field line, an error), one with a U+00A0 in its type reads (the type
    /// trimmed of it).
    r40_field_with_unicode_space_is_read, |_dir| {
    use perfpipe_stream::format::tracing::EventFormat;
    let text = |decl: &str| {
        format!(
            "name: fuzz\nID: 1\nformat:\n\tfield:{decl};\toffset:0;\tsize:4;\tsigned:1;\n\n\
print fmt: \"%d\", REC->common_pid\n"
        )
    };
    let e = EventFormat::parse("fuzz", &text("int\u{a0}common_pid")).unwrap_err();
    assert!(e.contains("bad field line"), "{e}");
    let ev = EventFormat::parse("fuzz", &text("int\u{a0} common_pid")).expect("it reads");
    assert_eq!(ev.fields[0].name, "common_pid");
    assert_eq!(ev.fields[0].type_, "int");
    // The fuzz target's smallest input, read as it read it (not tracing data: one format text).
    let crash: &[u8] = b"name: raim\x01/\n\tfied56_xead\nID: 1933\nformat:\n\tfield:d igo_coom[16ld:\xc2\
\xa0];\toff char d: raiata;\tor1>;\toffset:16;\tsize:4080;\t\x10\x00\x00: sch sp\
tep  : tyed";
    std::hint::black_box(EventFormat::parse("fuzz", &String::from_utf8_lossy(crash)).is_ok());
});

pipetest!(
    /// Issue 40's review: a field's `offset:` and `size:` are u32s, and `EventFormat::min_size` added
    /// them in u32: `offset:4294967295; size:8;` overflowed (a panic with overflow checks, a wrong
    /// small size without). Fixed: added as usize.
    r40_field_end_past_u32_does_not_overflow, |_dir| {
    use perfpipe_stream::format::tracing::EventFormat;
    let text = format_with_print("\"%ld\", REC->state", "4294967295");
    let ev = EventFormat::parse("fuzz", &text).expect("the format parses");
    assert_eq!(ev.min_size(), 4294967295 + 8);
    assert!(ev.fields[1]
        .read(&[0u8; 64], perfpipe_stream::format::Endian::Little)
        .is_none());
});

pipetest!(
    /// Issue 40's review of `slim::kallsyms` against its promise (the `kallsyms` fuzz target asserts
    /// it): the slim copy read a line's address with `u64::from_str_radix`, the table with perf's
    /// rule (a `0x` prefix allowed, no `+`, at most 16 digits), so a line only one of them read was
    /// dropped from the copy while the whole file loaded it, or kept while the table skipped it, and
    /// a hit was named by another symbol in the copy. Fixed: both read a line with
    /// `table::kallsyms_line`.
    r40_slim_kallsyms_reads_lines_as_the_table_does, |_dir| {
    use perfpipe_profile::symbols::slim;
    use perfpipe_profile::symbols::table::{parse_kallsyms, Table};
    let name = |t: &Table, a: u64| t.find(a).map(|h| h.name.to_string());
    for (text, hit) in [
        (
            &b"ffffffff81000000 T a\n0xffffffff81000100 T b\nffffffff81000200 T c\n"[..],
            0xffffffff81000150u64,
        ),
        (
            b"ffffffff81000000 T a\n+ffffffff81000100 T b\nffffffff81000200 T c\n",
            0xffffffff81000150,
        ),
        (
            b"ffffffff81000000 T a\n000ffffffff81000100 T b\nffffffff81000200 T c\n",
            0xffffffff81000150,
        ),
    ] {
        let whole = parse_kallsyms(text);
        let small = parse_kallsyms(&slim::kallsyms(text, &[hit]));
        assert_eq!(
            name(&whole, hit),
            name(&small, hit),
            "{}",
            String::from_utf8_lossy(text)
        );
    }
});

/// The bytes of `tests/fixtures/NAME`.
fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The sample program's ELF file from the archive fixture (a slim copy: symbols, `.plt`,
/// `.rela.plt`, PT_LOADs), read through `--symbols` as the symbol engine reads it.
fn sample_elf() -> Vec<u8> {
    use perfpipe_profile::symbols::sources::{Sources, SourcesConfig};
    let src = Sources::open(&SourcesConfig {
        symbols: vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/sample.symbols.tar.bz2")],
        no_cache: true,
        ..SourcesConfig::default()
    })
    .expect("the fixture opens");
    let id: Vec<u8> = (0..20)
        .map(|i| {
            u8::from_str_radix(
                &"ea9906864300bd21399870660862705624651e3a"[2 * i..2 * i + 2],
                16,
            )
            .unwrap()
        })
        .collect();
    src.by_build_id(&id)[0]
        .read_all(1 << 20)
        .expect("the sample's elf")
}

/// `data` (an ELF64 little-endian file) with `field` (an offset into each matching header) set
/// to `v`: in every program header of type `p_type`, or in the section header named `section`.
fn patch_elf(
    data: &[u8],
    p_type: Option<u32>,
    section: Option<&[u8]>,
    field: usize,
    v: u64,
) -> Vec<u8> {
    let mut d = data.to_vec();
    let u16_at = |o: usize| u16::from_le_bytes(d[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |d: &[u8], o: usize| u32::from_le_bytes(d[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |d: &[u8], o: usize| u64::from_le_bytes(d[o..o + 8].try_into().unwrap()) as usize;
    let (phoff, shoff) = (u64_at(&d, 0x20), u64_at(&d, 0x28));
    let (phent, phnum, shent, shnum, shstr) = (
        u16_at(0x36),
        u16_at(0x38),
        u16_at(0x3a),
        u16_at(0x3c),
        u16_at(0x3e),
    );
    let mut at = Vec::new();
    if let Some(t) = p_type {
        at.extend(
            (0..phnum)
                .map(|i| phoff + i * phent)
                .filter(|&o| u32_at(&d, o) == t as usize),
        );
    }
    if let Some(name) = section {
        let strs = u64_at(&d, shoff + shstr * shent + 0x18);
        at.extend((0..shnum).map(|i| shoff + i * shent).filter(|&o| {
            let n = strs + u32_at(&d, o);
            d[n..].starts_with(name) && d[n + name.len()] == 0
        }));
    }
    assert!(!at.is_empty(), "nothing to patch");
    for o in at {
        d[o + field..o + field + 8].copy_from_slice(&v.to_le_bytes());
    }
    d
}

pipetest!(
    /// Issue 40's `elf_symbols` fuzz target (artifacts reproduced on the sample's ELF file): an ELF
    /// file's offsets were added unchecked. A PT_LOAD's `p_offset` near 2^64 overflowed
    /// `elf::to_offset` (a symbol's file offset) and `to_vaddr`; a `.plt` whose `sh_offset` (or
    /// `sh_entsize`) is near 2^64 overflowed the `name@plt` offsets. With overflow checks a panic,
    /// without them wrapped offsets: symbols at wrong places. Fixed: checked sums; a symbol whose
    /// offset does not fit is skipped, the `.plt` entries end where the offsets would overflow.
    r40_elf_offsets_near_2_64_do_not_overflow, |_dir| {
    let elf = sample_elf();
    assert!(perfpipe_profile::fuzz::elf_symbols(&elf, None) != 0);
    let load = patch_elf(&elf, Some(1), None, 8, 0xffff_ffff_ffff_ff00);
    let plt = patch_elf(&elf, None, Some(b".plt"), 0x18, 0xffff_ffff_ffff_fff0);
    let entsize = patch_elf(&elf, None, Some(b".plt"), 0x38, 0x7fff_ffff_ffff_fff0);
    for d in [load, plt, entsize] {
        std::hint::black_box(perfpipe_profile::fuzz::elf_symbols(&d, None));
    }
});

pipetest!(
    /// Found by issue 40's `unwind_info` fuzz target (8 artifacts in its first minutes, e.g. this
    /// one, `tests/fixtures/r40-eh-frame-hdr.elf`): an `.eh_frame_hdr` whose search table points to
    /// an FDE before the `.eh_frame` it names made gimli 0.33 (framehop's) subtract the two unchecked
    /// in `pointer_to_offset` while unwinding: a panic with overflow checks, a wrapped offset
    /// without. Fixed in `unwind::dso`: a table with an entry before `.eh_frame` (or one that does not
    /// parse) is dropped, and framehop indexes `.eh_frame` itself.
    r40_eh_frame_hdr_pointing_before_eh_frame, |_dir| {
    let data = fixture("r40-eh-frame-hdr.elf");
    std::hint::black_box(perfpipe_profile::fuzz::unwind_info(&data, &data));
    // The sample's own file still unwinds through its (sound) table.
    let elf = sample_elf();
    assert!(perfpipe_profile::unwind::dso::parse(&elf[..]).is_some_and(|i| i.has_unwind_info()));
});

pipetest!(
    /// Found by issue 40's `unwind_info` fuzz target (twice in 7.2 M executions, e.g. this one,
    /// `tests/fixtures/r40-framehop-cfa.elf`, artifact crash-5f676a47…): a CFI row whose
    /// return-address rule is not `[CFA-8]` and yields nothing, with a CFA below 8, made framehop
    /// 0.16 (its latest release) compute `cfa - 8` unchecked (`x86_64/dwarf.rs:68`): a panic with
    /// overflow checks, a wrapped address (and a failed read) without. The CFA comes from the
    /// sample's registers and stack words inside framehop, so no check of the file can rule it
    /// out: `unwind::walk_stack` is the boundary, and a panic in it ends the sample's walk with
    /// the frames found so far, counted (`partial_unwinder_panic`), never the run.
    r40_framehop_cfa_below_8_is_a_partial_walk, |_dir| {
    let data = fixture("r40-framehop-cfa.elf");
    use perfpipe_profile::unwind::Outcome;
    let outcomes = perfpipe_profile::fuzz::unwind_outcomes(&data, &data);
    assert!(!outcomes.is_empty(), "the file unwinds nowhere");
    // framehop's subtraction panics only where overflow checks are on (tests' default profile).
    let panicked = outcomes.contains(&Outcome::UnwinderPanic);
    assert_eq!(panicked, cfg!(debug_assertions), "{outcomes:?}");
    if !panicked {
        assert!(outcomes.contains(&Outcome::BadFrame), "{outcomes:?}");
    }
    // The next walks still unwind: the sample's own file, through the same thread's cache.
    let elf = sample_elf();
    assert!(perfpipe_profile::fuzz::unwind_outcomes(&elf, &elf)
        .iter()
        .all(|&o| o != Outcome::UnwinderPanic));
});

pipetest!(
    /// Found by issue 40's `elf_symbols` fuzz target (an OOM past 2 GiB and two 10 s timeouts, from
    /// the `-gz` seed): a compressed DWARF section (`SHF_COMPRESSED`) declaring gigabytes made
    /// `object`'s `uncompressed_data` allocate and zero them before inflating 9 KiB. Fixed in
    /// `symbols::elf`: a declared size beyond zlib's best ratio over the compressed bytes is not
    /// believed, and the section is skipped (as one that does not decompress).
    r40_compressed_section_size_is_believed_up_to_zlib_ratio, |_dir| {
    let data = fixture("r40-zdebug-bomb.elf");
    let read = perfpipe_profile::fuzz::dwarf_bytes(&data);
    assert!(
        read <= 1100 * data.len() as u64,
        "{read} bytes of DWARF from {} bytes",
        data.len()
    );
    std::hint::black_box(perfpipe_profile::fuzz::elf_symbols(&data, None));
    // The same in unwind sections (`unwind_info` target: an OOM, `r40-zdebug-unwind.elf`).
    let data = fixture("r40-zdebug-unwind.elf");
    let held = perfpipe_profile::unwind::dso::parse(&data[..]).map_or(0, |i| i.bytes());
    assert!(
        held <= 1100 * data.len(),
        "{held} bytes of unwind sections from {} bytes",
        data.len()
    );
});

pipetest!(
    /// Found by issue 40's `debuginfod` fuzz target (at 213f070, in its first 90 k executions):
    /// ureq 3.5 (its latest release) panics (`run.rs`: "remote to have signaled redirect") on a
    /// redirect whose chunked body ends at `0\r\n` with the connection: the end of the body skips
    /// the step that keeps the redirect, and the redirect is then taken for granted. The thread
    /// that asked ended, its server's answer never came (a miss was cached when it was the only
    /// server). Fixed in `symbols::sources::debuginfod::get`: a panic inside ureq fails the request
    /// (counted in `errors`, not cached). The input: the target's, played a byte at a time (its
    /// first two bytes), a 1 MiB cap.
    r40_ureq_redirect_cut_after_last_chunk, |_dir| {
    let data = fixture("r40-ureq-redirect.http");
    assert_eq!(&data[..2], b"\x01\x02", "a byte at a time, a 1 MiB cap");
    let (kept, kind) = perfpipe_profile::fuzz::debuginfod(&data[2..], &[1], 1 << 20);
    assert_eq!((kept, kind), (0, 2), "a failed request, nothing kept");
});

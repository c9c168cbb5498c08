//! Tests of the tracing-data parser, on format files copied from a 6.18 kernel's tracefs.

use super::*;

/// `events/sched/sched_switch/format` of Linux 6.18 (x86-64).
pub(crate) const SCHED_SWITCH: &str = r#"name: sched_switch
ID: 372
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:char prev_comm[16];	offset:8;	size:16;	signed:0;
	field:pid_t prev_pid;	offset:24;	size:4;	signed:1;
	field:int prev_prio;	offset:28;	size:4;	signed:1;
	field:long prev_state;	offset:32;	size:8;	signed:1;
	field:char next_comm[16];	offset:40;	size:16;	signed:0;
	field:pid_t next_pid;	offset:56;	size:4;	signed:1;
	field:int next_prio;	offset:60;	size:4;	signed:1;

print fmt: "prev_comm=%s prev_pid=%d prev_prio=%d prev_state=%s%s ==> next_comm=%s next_pid=%d next_prio=%d", REC->prev_comm, REC->prev_pid, REC->prev_prio, (REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1)) ? __print_flags(REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1), "|", { 0x00000001, "S" }, { 0x00000002, "D" }, { 0x00000004, "T" }, { 0x00000008, "t" }, { 0x00000010, "X" }, { 0x00000020, "Z" }, { 0x00000040, "P" }, { 0x00000080, "I" }) : "R", REC->prev_state & (((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) ? "+" : "", REC->next_comm, REC->next_pid, REC->next_prio
"#;

/// `events/sched/sched_process_exec/format` of Linux 6.18: a `__data_loc` string.
const SCHED_PROCESS_EXEC: &str = r#"name: sched_process_exec
ID: 365
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:__data_loc char[] filename;	offset:8;	size:4;	signed:0;
	field:pid_t pid;	offset:12;	size:4;	signed:1;
	field:pid_t old_pid;	offset:16;	size:4;	signed:1;

print fmt: "filename=%s pid=%d old_pid=%d", __get_str(filename), REC->pid, REC->old_pid
"#;

/// A tracing-data blob as perf 6.1 writes it (`tracing_data_get()`), with these event formats.
pub(crate) fn blob(events: &[(&str, &str)]) -> Vec<u8> {
    let mut b = MAGIC.to_vec();
    b.extend_from_slice(b"0.6\0");
    b.push(0); // little-endian
    b.push(8); // sizeof(long)
    b.extend_from_slice(&4096u32.to_le_bytes());
    for (name, text) in [
        ("header_page", "field: u64 timestamp;"),
        ("header_event", "# compressed"),
    ] {
        b.extend_from_slice(name.as_bytes());
        b.push(0);
        b.extend_from_slice(&(text.len() as u64).to_le_bytes());
        b.extend_from_slice(text.as_bytes());
    }
    b.extend_from_slice(&0u32.to_le_bytes()); // no ftrace formats
    b.extend_from_slice(&(events.len() as u32).to_le_bytes());
    for (sys, text) in events {
        b.extend_from_slice(sys.as_bytes());
        b.push(0);
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&(text.len() as u64).to_le_bytes());
        b.extend_from_slice(text.as_bytes());
    }
    b.extend_from_slice(&0u32.to_le_bytes()); // kallsyms
    b.extend_from_slice(&0u32.to_le_bytes()); // printk formats
    b.extend_from_slice(&0u64.to_le_bytes()); // saved cmdlines
    b
}

/// A sched_switch payload: `prev` switched out in `state` for `next`.
pub(crate) fn switch_payload(prev: (&[u8], i32), state: i64, next: (&[u8], i32)) -> Vec<u8> {
    let mut p = vec![0u8; 64];
    p[0..2].copy_from_slice(&372u16.to_le_bytes());
    p[8..8 + prev.0.len()].copy_from_slice(prev.0);
    p[24..28].copy_from_slice(&prev.1.to_le_bytes());
    p[28..32].copy_from_slice(&120i32.to_le_bytes());
    p[32..40].copy_from_slice(&state.to_le_bytes());
    p[40..40 + next.0.len()].copy_from_slice(next.0);
    p[56..60].copy_from_slice(&next.1.to_le_bytes());
    p[60..64].copy_from_slice(&120i32.to_le_bytes());
    p
}

#[test]
fn reads_the_blob_and_the_fields_of_sched_switch() {
    let t = TracingData::parse(&blob(&[
        ("sched", SCHED_SWITCH),
        ("sched", SCHED_PROCESS_EXEC),
    ]));
    assert_eq!(t.errors, vec![]);
    assert_eq!(
        (t.version.as_str(), t.long_size, t.page_size),
        ("0.6", 8, 4096)
    );
    let ev = t.event(372).expect("sched_switch by id");
    assert_eq!(
        (ev.system.as_str(), ev.name.as_str()),
        ("sched", "sched_switch")
    );
    assert_eq!(ev.fields.len(), 11);
    assert_eq!(ev.fields.iter().filter(|f| f.common).count(), 4);
    let st = ev.field("prev_state").unwrap();
    assert_eq!(
        (st.offset, st.size, st.signed, st.kind),
        (32, 8, true, FieldKind::Scalar)
    );
    let comm = ev.field("prev_comm").unwrap();
    assert_eq!(comm.kind, FieldKind::Array { len: Some(16) });
    assert!(comm.is_string());
    assert_eq!(ev.min_size(), 64);

    let raw = switch_payload((b"nap", 41), 2, (b"swapper/0", 0));
    let e = Endian::Little;
    assert_eq!(comm.read(&raw, e), Some(Value::Str(b"nap")));
    assert_eq!(
        ev.field("prev_pid").unwrap().read(&raw, e),
        Some(Value::Int(41))
    );
    assert_eq!(
        ev.field("next_comm").unwrap().read(&raw, e),
        Some(Value::Str(b"swapper/0"))
    );
    assert_eq!(
        ev.field("common_type").unwrap().read(&raw, e),
        Some(Value::UInt(372))
    );
    // Shorter than the field: no value.
    assert_eq!(ev.field("next_prio").unwrap().read(&raw[..62], e), None);
}

#[test]
fn prev_state_as_the_print_format_shows_it() {
    let ev = EventFormat::parse("sched", SCHED_SWITCH).unwrap();
    let text = |state: i64| {
        let raw = switch_payload((b"a", 1), state, (b"b", 2));
        ev.text("prev_state", &raw, Endian::Little)
    };
    assert_eq!(text(0).as_deref(), Some("R"));
    assert_eq!(text(1).as_deref(), Some("S"));
    assert_eq!(text(2).as_deref(), Some("D"));
    assert_eq!(text(0x80).as_deref(), Some("I"));
    assert_eq!(text(0x100).as_deref(), Some("R+"));
    assert_eq!(text(0x3).as_deref(), Some("S|D"));
    assert!(ev.render.shows("prev_state"));
    assert!(!ev.render.shows("prev_pid"));
    assert_eq!(
        ev.text(
            "prev_pid",
            &switch_payload((b"a", 1), 0, (b"b", 2)),
            Endian::Little
        ),
        None
    );
}

#[test]
fn symbolic_fields_and_casts() {
    let fmt = "name: x\nID: 1\nformat:\n\tfield:int mode;\toffset:8;\tsize:4;\tsigned:1;\n\n\
               print fmt: \"%s\", __print_symbolic((unsigned long)REC->mode, { 0, \"off\" }, { 1, \"on\" })\n";
    let ev = EventFormat::parse("s", fmt).unwrap();
    assert_eq!(ev.render.text("mode", 1).as_deref(), Some("on"));
    assert_eq!(ev.render.text("mode", 7).as_deref(), Some("0x7"));
}

#[test]
fn data_loc_strings() {
    let ev = EventFormat::parse("sched", SCHED_PROCESS_EXEC).unwrap();
    let f = ev.field("filename").unwrap();
    assert_eq!(f.kind, FieldKind::DataLoc);
    assert!(f.is_string());
    let mut raw = vec![0u8; 20];
    raw.extend_from_slice(b"/bin/true\0\0\0\0");
    let loc = 20u32 | (10 << 16);
    raw[8..12].copy_from_slice(&loc.to_le_bytes());
    assert_eq!(f.read(&raw, Endian::Little), Some(Value::Str(b"/bin/true")));
    // Data beyond the payload: no value.
    assert_eq!(f.read(&raw[..25], Endian::Little), None);
    // `__rel_loc`: the offset counts from the end of the field.
    let rel = FieldFormat {
        kind: FieldKind::RelLoc,
        ..f.clone()
    };
    let loc = 8u32 | (10 << 16);
    raw[8..12].copy_from_slice(&loc.to_le_bytes());
    assert_eq!(
        rel.read(&raw, Endian::Little),
        Some(Value::Str(b"/bin/true"))
    );
}

#[test]
fn every_prefix_of_a_blob_parses_with_an_error_and_without_a_panic() {
    let b = blob(&[("sched", SCHED_SWITCH), ("sched", SCHED_PROCESS_EXEC)]);
    for n in 0..b.len() {
        let t = TracingData::parse(&b[..n]);
        assert!(!t.errors.is_empty(), "prefix {n}: no error");
        assert!(t.events.len() <= 2);
    }
    // Cut after the first event: it is kept.
    let first_end = b.windows(10).position(|w| w == b"name: sche").unwrap() + SCHED_SWITCH.len();
    assert_eq!(TracingData::parse(&b[..first_end + 20]).events.len(), 1);
}

#[test]
fn malformed_format_files_are_skipped_and_reported() {
    let bad = "name: broken\nID: nine\n";
    let no_id = "name: noid\nformat:\n";
    let t = TracingData::parse(&blob(&[
        ("sched", bad),
        ("sched", SCHED_SWITCH),
        ("x", no_id),
    ]));
    assert_eq!(t.events.len(), 1);
    assert_eq!(t.errors.len(), 2, "{:?}", t.errors);
    assert!(t.errors[0].message.contains("bad ID"));
    let garbage = TracingData::parse(b"\x17\x08\x44tracingX");
    assert!(!garbage.errors.is_empty());
    assert!(TracingData::parse(b"not tracing data at all").errors[0]
        .message
        .contains("magic"));
}

#[test]
fn the_writer_lays_out_the_blob_as_perf_does_and_the_parser_reads_it_back() {
    let contents = |endian| Contents {
        endian,
        long_size: 8,
        page_size: 4096,
        header_page: b"field: u64 timestamp;",
        header_event: b"# compressed",
        systems: vec![
            ("sched", vec![SCHED_SWITCH.as_bytes()]),
            ("sched", vec![SCHED_PROCESS_EXEC.as_bytes()]),
        ],
        ..Contents::default()
    };
    // Byte for byte the blob perf 6.1 writes (the hand-made one above).
    let ours = contents(Endian::Little).to_bytes();
    assert_eq!(
        ours,
        blob(&[("sched", SCHED_SWITCH), ("sched", SCHED_PROCESS_EXEC)])
    );
    // Big-endian, with every optional part: it parses back, nothing left over or missing.
    let mut c = contents(Endian::Big);
    c.ftrace = vec![b"name: function\nID: 1\nformat:\n"];
    c.systems = vec![(
        "sched",
        vec![SCHED_SWITCH.as_bytes(), SCHED_PROCESS_EXEC.as_bytes()],
    )];
    c.kallsyms = b"ffffffff81000000 T _text\n";
    c.printk = b"0x1 : \"x\"\n";
    c.saved_cmdlines = b"1 init\n";
    let b = c.to_bytes();
    let t = TracingData::parse(&b);
    assert!(t.errors.is_empty(), "{:?}", t.errors);
    assert_eq!(
        (t.version.as_str(), t.endian, t.long_size),
        (VERSION, Endian::Big, 8)
    );
    let names: Vec<&str> = t.events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["function", "sched_switch", "sched_process_exec"]);
    // One byte less is a cut blob.
    assert!(!TracingData::parse(&b[..b.len() - 1]).errors.is_empty());
}

#[test]
fn the_pipe_record_pads_the_blob_to_8() {
    let blob = [7u8; 13];
    let mut out = Vec::new();
    pipe_record(&mut out, Endian::Little, &blob);
    assert_eq!(out.len(), 16 + 16);
    assert_eq!(u32::from_le_bytes(out[0..4].try_into().unwrap()), 66);
    assert_eq!(u16::from_le_bytes(out[6..8].try_into().unwrap()), 16);
    assert_eq!(u32::from_le_bytes(out[8..12].try_into().unwrap()), 16);
    assert_eq!(&out[16..29], &blob);
    assert_eq!(&out[29..], &[0, 0, 0]);
}

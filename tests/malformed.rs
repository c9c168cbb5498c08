//! The malformed-input catalogue (issue 7): one table row per class of bad input, each run through
//! the real binary under a timeout and an address-space limit. Every row ends in either a clear
//! error (status 1, `perfpipe: STAGE: offset N: …` naming the record type, every complete record
//! before the fault written) or a documented skip that a stage counts (status 0, the stream
//! written, the counter in `--stats-json`). Never a panic, a hang or an unbounded allocation.

use std::io::{Read as _, Write as _};
use std::os::unix::process::CommandExt as _;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use perfpipe_stream::synth::SynthStream;

use crate::util::*;

/// Address space granted to the child: enough for the runtime's threads and buffers, far less
/// than any size a malformed record can declare (1 GiB payloads, 4 GiB `u32` sizes).
pub const AS_LIMIT: u64 = 2 << 30;

/// What a guarded run produced.
#[derive(Debug)]
pub struct Run {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

/// Runs `perfpipe ARGS` on `stdin` with a deadline and [`AS_LIMIT`]; a run past the deadline is
/// killed and fails the test as a hang.
pub fn run_guarded(args: &[&str], stdin: &[u8], deadline: Duration) -> Run {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: AS_LIMIT,
                rlim_max: AS_LIMIT,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("spawn perfpipe");
    let mut sin = child.stdin.take().expect("stdin");
    let input = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = sin.write_all(&input);
    });
    let mut sout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = sout.read_to_end(&mut v);
        v
    });
    let mut serr = child.stderr.take().expect("stderr");
    let ereader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = serr.read_to_end(&mut v);
        v
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if t0.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("perfpipe {args:?} hung: still running after {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    feeder.join().expect("feeder");
    Run {
        status,
        stdout: reader.join().expect("stdout reader"),
        stderr: String::from_utf8_lossy(&ereader.join().expect("stderr reader")).into_owned(),
    }
}

/// How a row must end.
#[derive(Debug)]
enum Expect {
    /// Status 1; stderr is `perfpipe: STAGE: …` containing `needle`; stdout is the first `kept`
    /// bytes of the input.
    Error {
        stage: &'static str,
        kept: usize,
        needle: String,
    },
    /// Status 0; stdout is `output`; each `(stage, counter, value)` holds in `--stats-json`.
    Skip {
        output: Vec<u8>,
        counters: Vec<(&'static str, &'static str, u64)>,
    },
}

/// One row of the catalogue.
struct Case {
    name: &'static str,
    args: Vec<String>,
    input: Vec<u8>,
    expect: Expect,
}

fn le_header() -> Vec<u8> {
    let mut v = b"PERFILE2".to_vec();
    v.extend_from_slice(&16u64.to_le_bytes());
    v
}

/// Header + FINISHED_ROUND + FINISHED_INIT: 32 bytes of valid stream.
fn valid() -> Vec<u8> {
    let mut v = le_header();
    v.extend_from_slice(&raw_record(68, 8));
    v.extend_from_slice(&raw_record(82, 8));
    v
}

fn with(mut v: Vec<u8>, tail: &[u8]) -> Vec<u8> {
    v.extend_from_slice(tail);
    v
}

/// `(offset, type, size)` of each top-level record of a little-endian stream, following
/// TRACING_DATA payloads.
fn walk(stream: &[u8]) -> Vec<(usize, u32, usize)> {
    let mut v = Vec::new();
    let mut pos = 16;
    while pos + 8 <= stream.len() {
        let t = u32::from_le_bytes(stream[pos..pos + 4].try_into().unwrap());
        let mut size = usize::from(u16::from_le_bytes(
            stream[pos + 6..pos + 8].try_into().unwrap(),
        ));
        if t == 66 {
            size += u32::from_le_bytes(stream[pos + 8..pos + 12].try_into().unwrap()) as usize;
        }
        v.push((pos, t, size));
        pos += size;
    }
    v
}

/// A synthetic stream (one attr `IP|TID|TIME|ID|CPU|PERIOD|CALLCHAIN`): a process mapping `path` at
/// 0x400000 and one sample hitting it. Returns the stream.
fn hit_stream(path: &str) -> Vec<u8> {
    let mut s = SynthStream::new();
    s.comm(42, 42, "victim", true, 1_000);
    s.mmap2(42, 0x40_0000, 0x1_0000, path, 77, 2_000);
    s.sample(42, 42, 3_000, 0, 0x40_1234, &[0x40_1234]);
    s.finished_round();
    s.into_bytes()
}

/// The synthetic attr stream followed by one hand-made SAMPLE `body` (header added here).
fn synth_with_sample(body: &[u8]) -> (Vec<u8>, usize) {
    let mut s = SynthStream::new();
    s.comm(42, 42, "victim", true, 1_000);
    let v = s.into_bytes();
    let at = v.len();
    let size = u16::try_from(8 + body.len()).unwrap();
    let mut r = 9u32.to_le_bytes().to_vec();
    r.extend_from_slice(&2u16.to_le_bytes()); // misc USER
    r.extend_from_slice(&size.to_le_bytes());
    r.extend_from_slice(body);
    (with(v, &r), at)
}

fn u64s(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn err(stage: &'static str, kept: usize, needle: impl Into<String>) -> Expect {
    Expect::Error {
        stage,
        kept,
        needle: needle.into(),
    }
}

/// An ELF file whose GNU build-id note is corrupt, made from this test binary (which has one):
/// the note's `descsz` is set past the end of the file.
fn elf_with_corrupt_note() -> Vec<u8> {
    let mut elf = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    let pat: &[u8] = &[4, 0, 0, 0, 20, 0, 0, 0, 3, 0, 0, 0, b'G', b'N', b'U', 0];
    let at = elf
        .windows(pat.len())
        .position(|w| w == pat)
        .expect("the test binary has a GNU build-id note");
    elf[at + 4..at + 8].copy_from_slice(&0x7fff_fff0u32.to_le_bytes());
    elf
}

fn cases(dir: &Dir) -> Vec<Case> {
    let mut rows = Vec::new();
    let mut case = |name, args: &[&str], input: Vec<u8>, expect| {
        rows.push(Case {
            name,
            args: args.iter().map(|s| s.to_string()).collect(),
            input,
            expect,
        })
    };

    // --- the pipe header -------------------------------------------------------------------
    let mut bad = valid();
    bad[..8].copy_from_slice(b"NOTPERF!");
    case(
        "bad magic",
        &[],
        bad,
        err("decode", 0, "offset 0: not a perf pipe stream"),
    );
    for size in [0u64, 8, 24, u64::MAX] {
        let mut v = valid();
        v[8..16].copy_from_slice(&size.to_le_bytes());
        case(
            "header size not 16",
            &[],
            v,
            err(
                "decode",
                0,
                format!("offset 8: pipe header size is {size}, expected 16"),
            ),
        );
    }
    let mut v = valid();
    v[8..16].copy_from_slice(&104u64.to_le_bytes());
    case(
        "file-mode header",
        &[],
        v,
        err("decode", 0, "perf inject -i FILE -o -"),
    );

    // --- byte order ------------------------------------------------------------------------
    let be = fixture_bytes("bigendian.pipe.data");
    case(
        "byte-swapped, valid: passes through",
        &[],
        be.clone(),
        Expect::Skip {
            output: be.clone(),
            counters: vec![("decode", "unknown_record_types", 0)],
        },
    );
    // Byte-swapped garbage: a big-endian record header whose size (read big-endian) is 4.
    let mut v = be[..16].to_vec();
    v.extend_from_slice(&[0, 0, 0, 9, 0, 0, 0, 4]);
    v.extend_from_slice(&[0xab; 64]);
    case(
        "byte-swapped, garbage record",
        &[],
        v,
        err(
            "decode",
            16,
            "offset 16: SAMPLE record has size 4, smaller than its 8-byte header",
        ),
    );
    // The same bytes read little-endian would be type 0x09000000: byte order is honoured.
    let mut v = be[..16].to_vec();
    v.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 16]);
    v.extend_from_slice(&[0; 8]);
    case(
        "byte-swapped, invalid type",
        &[],
        v,
        err("decode", 16, "offset 16: invalid record type 3735928559"),
    );

    // --- truncation ------------------------------------------------------------------------
    case(
        "truncated pipe header",
        &[],
        valid()[..11].to_vec(),
        err("decode", 0, "offset 0: input truncated"),
    );
    case(
        "truncated record header",
        &[],
        with(valid(), &[9, 0, 0]),
        err(
            "decode",
            32,
            "offset 32: input truncated inside a record header: 3 of 8 bytes",
        ),
    );
    case(
        "truncated record",
        &[],
        with(valid(), &raw_record(9, 48)[..30]),
        err(
            "decode",
            32,
            "offset 32: input truncated inside a SAMPLE record: 30 of 48 bytes",
        ),
    );
    // A real recording cut inside its tracing-data blob (the payload after TRACING_DATA).
    let tp = fixture_bytes("tracepoint.pipe.data");
    let (at, _, size) = *walk(&tp).iter().find(|r| r.1 == 66).expect("TRACING_DATA");
    case(
        "truncated trailing payload (TRACING_DATA)",
        &[],
        tp[..at + size / 2].to_vec(),
        err(
            "decode",
            at,
            format!(
                "offset {at}: input truncated inside a TRACING_DATA record: {} of {size} bytes",
                size / 2
            ),
        ),
    );

    // --- sizes -----------------------------------------------------------------------------
    for size in [0u16, 1, 7] {
        let mut r = raw_record(9, 8);
        r[6..8].copy_from_slice(&size.to_le_bytes());
        case(
            "size < 8",
            &[],
            with(with(valid(), &r), &[0; 32]),
            err(
                "decode",
                32,
                format!("offset 32: SAMPLE record has size {size}, smaller than its 8-byte header"),
            ),
        );
    }
    case(
        "size beyond the stream",
        &[],
        with(valid(), &raw_record(9, 65528)[..200]),
        err(
            "decode",
            32,
            "offset 32: input truncated inside a SAMPLE record: 200 of 65528 bytes",
        ),
    );
    let mut r = raw_record(66, 16);
    r[8..12].copy_from_slice(&(1u32 << 20).to_le_bytes());
    case(
        "TRACING_DATA size beyond the stream",
        &[],
        with(with(valid(), &r), &[0; 100]),
        err(
            "decode",
            32,
            "offset 32: input truncated inside a TRACING_DATA record: 116 of 1048592 bytes",
        ),
    );
    let mut r = raw_record(66, 16);
    r[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    case(
        "TRACING_DATA size over the limit",
        &[],
        with(valid(), &r),
        err(
            "decode",
            32,
            "offset 32: TRACING_DATA payload of 4294967295 bytes exceeds",
        ),
    );
    let mut r = raw_record(71, 48);
    r[8..16].copy_from_slice(&(1u64 << 20).to_le_bytes());
    case(
        "AUXTRACE size beyond the stream",
        &[],
        with(with(valid(), &r), &[0; 100]),
        err(
            "decode",
            32,
            "offset 32: input truncated inside a AUXTRACE record: 148 of 1048624 bytes",
        ),
    );
    let mut r = raw_record(71, 48);
    r[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    case(
        "AUXTRACE size over the limit",
        &[],
        with(valid(), &r),
        err(
            "decode",
            32,
            "offset 32: AUXTRACE payload of 18446744073709551615 bytes exceeds",
        ),
    );

    // --- attrs -----------------------------------------------------------------------------
    for (attr_size, needle) in [
        (13u32, "offset 32: ATTR record: attr.size 13 is not a valid"),
        (
            4096,
            "offset 32: ATTR record: attr body of 72 bytes is shorter than 4096",
        ),
    ] {
        let mut r = raw_record(64, 80);
        r[12..16].copy_from_slice(&attr_size.to_le_bytes());
        case(
            "HEADER_ATTR with bogus attr.size",
            &[],
            with(valid(), &r),
            err("decode", 32, needle),
        );
    }

    // --- sample contents: passed through, and the stages that read them skip the bad fields --
    // The attr's layout is IP|TID|TIME|ID|CPU|PERIOD|CALLCHAIN (56 bytes before the chain);
    // this sample holds only the ip.
    let (short, _) = synth_with_sample(&u64s(&[0x40_1234]));
    for args in [
        &[][..],
        &["--buildid-callchain"],
        &["--filter", "pid == 42"],
    ] {
        let counters = if args.first() == Some(&"--filter") {
            // The predicate reads a field beyond the record: false, so the sample is dropped.
            vec![("filter", "samples_dropped", 1)]
        } else {
            vec![]
        };
        let output = if counters.is_empty() {
            short.clone()
        } else {
            short[..short.len() - 16].to_vec()
        };
        case(
            "sample shorter than its layout",
            args,
            short.clone(),
            Expect::Skip { output, counters },
        );
    }
    // A callchain whose nr runs far past the record.
    let (long_nr, _) = synth_with_sample(&u64s(&[
        0x40_1234,
        42 | 42 << 32,
        3_000,
        1,
        0,
        20_000,
        1 << 40,
        1,
    ]));
    for args in [&[][..], &["--buildid-callchain"]] {
        case(
            "callchain nr beyond the record",
            args,
            long_nr.clone(),
            Expect::Skip {
                output: long_nr.clone(),
                counters: vec![],
            },
        );
    }

    // --- COMPRESSED ------------------------------------------------------------------------
    let mut r = 81u32.to_le_bytes().to_vec();
    r.extend_from_slice(&0u16.to_le_bytes());
    r.extend_from_slice(&(8u16 + 37).to_le_bytes());
    r.extend_from_slice(&[0x28, 0xb5, 0x2f, 0xfd]); // zstd magic, then garbage
    r.extend_from_slice(&[0x5a; 33]);
    case(
        "corrupt COMPRESSED data",
        &["--decompress"],
        with(valid(), &r),
        err("decompress", 32, "offset 32: COMPRESSED record: "),
    );
    let mut r = 81u32.to_le_bytes().to_vec();
    r.extend_from_slice(&0u16.to_le_bytes());
    r.extend_from_slice(&(8u16 + 24).to_le_bytes());
    r.extend_from_slice(&[0xff; 24]); // not even a zstd frame
    case(
        "COMPRESSED data that is not zstd",
        &["--decompress"],
        with(valid(), &r),
        err("decompress", 32, "offset 32: COMPRESSED record: "),
    );

    // --- files read for build ids: skipped and counted --------------------------------------
    let elf = dir.write("corrupt-note.so", &elf_with_corrupt_note());
    let elf = elf.to_str().unwrap().to_string();
    let s = hit_stream(&elf);
    case(
        "ELF with a corrupt build-id note",
        &["--buildid"],
        s.clone(),
        Expect::Skip {
            output: s,
            counters: vec![
                ("buildid", "dsos_without_build_id", 1),
                ("buildid", "build_ids_injected", 0),
            ],
        },
    );
    let truncated = dir.write(
        "truncated.so",
        &std::fs::read(std::env::current_exe().unwrap()).unwrap()[..200],
    );
    let s = hit_stream(truncated.to_str().unwrap());
    case(
        "truncated ELF",
        &["--buildid"],
        s.clone(),
        Expect::Skip {
            output: s,
            counters: vec![("buildid", "dsos_without_build_id", 1)],
        },
    );
    let sub = dir.path("a-directory");
    std::fs::create_dir(&sub).unwrap();
    let s = hit_stream(sub.to_str().unwrap());
    case(
        "DSO path is a directory",
        &["--buildid"],
        s.clone(),
        Expect::Skip {
            output: s,
            counters: vec![("buildid", "dsos_without_build_id", 1)],
        },
    );
    let fifo = dir.path("a-fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let s = hit_stream(fifo.to_str().unwrap());
    case(
        "DSO path is a FIFO (nobody writes it: must not hang)",
        &["--buildid"],
        s.clone(),
        Expect::Skip {
            output: s,
            counters: vec![("buildid", "dsos_without_build_id", 1)],
        },
    );
    let s = hit_stream("/dev/urandom");
    case(
        "DSO path is a character device",
        &["--buildid"],
        s.clone(),
        Expect::Skip {
            output: s,
            counters: vec![("buildid", "dsos_without_build_id", 1)],
        },
    );
    rows
}

/// An unreadable DSO (mode 000) is counted as missing; root reads it anyway (CAP_DAC_OVERRIDE),
/// so as root the id is found and injected.
fn unreadable_case(dir: &Dir) -> Case {
    use std::os::unix::fs::PermissionsExt as _;
    let p = dir.write(
        "unreadable.so",
        &std::fs::read(std::env::current_exe().unwrap()).unwrap(),
    );
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o000)).unwrap();
    let s = hit_stream(p.to_str().unwrap());
    let readable = std::fs::File::open(&p).is_ok();
    let (stage, counter) = if readable {
        eprintln!("note: running as root: the mode-000 file is readable, so its id is injected");
        ("buildid", "build_ids_injected")
    } else {
        ("buildid", "dsos_missing")
    };
    // Output: the input (plus one BUILD_ID record when readable; checked by the counter).
    Case {
        name: "DSO unreadable (mode 000)",
        args: vec!["--buildid".into()],
        input: s.clone(),
        expect: Expect::Skip {
            output: if readable { Vec::new() } else { s },
            counters: vec![(stage, counter, 1)],
        },
    }
}

fn json_counter(stats: &serde_json::Value, stage: &str, name: &str) -> Option<u64> {
    stats["stages"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == stage)?["counters"][name]
        .as_u64()
}

fn check(case: &Case, dir: &Dir) {
    let json = dir.path("stats.json");
    let _ = std::fs::remove_file(&json);
    let mut args: Vec<&str> = case.args.iter().map(String::as_str).collect();
    args.extend(["--stats-json", json.to_str().unwrap()]);
    let run = run_guarded(&args, &case.input, Duration::from_secs(20));
    let name = case.name;
    assert!(
        !run.stderr.contains("panicked"),
        "{name}: panic: {}",
        run.stderr
    );
    match &case.expect {
        Expect::Error {
            stage,
            kept,
            needle,
        } => {
            assert_eq!(run.status.code(), Some(1), "{name}: {}", run.stderr);
            let prefix = format!("perfpipe: {stage}: ");
            assert!(
                run.stderr.lines().any(|l| l.starts_with(&prefix)),
                "{name}: expected {prefix:?} in: {}",
                run.stderr
            );
            assert!(
                run.stderr.contains(needle.as_str()),
                "{name}: expected {needle:?} in: {}",
                run.stderr
            );
            assert!(
                run.stdout == case.input[..*kept],
                "{name}: wrote {} bytes, expected the first {kept} of the input",
                run.stdout.len()
            );
        }
        Expect::Skip { output, counters } => {
            assert_eq!(run.status.code(), Some(0), "{name}: {}", run.stderr);
            if !output.is_empty() {
                assert!(
                    run.stdout == *output,
                    "{name}: wrote {} bytes, expected {}",
                    run.stdout.len(),
                    output.len()
                );
            }
            let stats: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&json).expect("stats json")).unwrap();
            for (stage, c, want) in counters {
                eqnice!(Some(*want), json_counter(&stats, stage, c));
            }
        }
    }
}

pipetest!(
    /// Every row of the catalogue.
    malformed_input_catalogue,
    |dir| {
        let mut all = cases(&dir);
        all.push(unreadable_case(&dir));
        assert!(all.len() >= 30, "{} rows", all.len());
        for case in &all {
            check(case, &dir);
        }
    }
);

pipetest!(
    /// The guard itself fails on a hang: `perfpipe` reading a pipe that never ends is killed.
    the_guard_detects_a_hang, |_dir| {
    let r = std::panic::catch_unwind(|| {
        // A writer that keeps the pipe open: feed from a FIFO nobody closes is simulated by
        // reading a path that blocks (a FIFO without writer) as the input file.
        let dir = Dir::new("guard");
        let fifo = dir.path("in");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        run_guarded(
            &["-i", fifo.to_str().unwrap()],
            b"",
            Duration::from_millis(500),
        )
    });
    assert!(r.is_err(), "a blocked run was not reported as a hang");
});

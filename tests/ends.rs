//! Every kind of end (issue 7), through the real binary: what is written and the exit status.
//! Extends `stats::interrupts_drain_then_abort` and `passthrough::closed_downstream_is_a_quiet_success`
//! (which cover INT-then-TERM and a quiet EPIPE) with: SIGTERM first, drains through a longer
//! pipeline, a prompt second SIGINT against an upstream that never ends, a closed downstream
//! against an endless upstream (with how far it got), an upstream killed mid-record, and a full
//! disk.

use std::io::{Read as _, Write as _};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// Offsets of every record boundary of a little-endian stream without payloads outside
/// `header.size` (16 = end of the pipe header, …, the stream's length).
fn boundaries(stream: &[u8]) -> Vec<usize> {
    let mut v = vec![16];
    let mut pos = 16;
    while pos + 8 <= stream.len() {
        pos += usize::from(u16::from_le_bytes([stream[pos + 6], stream[pos + 7]]));
        if pos <= stream.len() {
            v.push(pos);
        }
    }
    v
}

fn is_record_prefix(input: &[u8], got: &[u8]) -> bool {
    input.starts_with(got) && (got.is_empty() || boundaries(input).contains(&got.len()))
}

/// Waits for the child at most `limit`; kills it and fails the test if it is still running.
fn wait_within(child: &mut Child, limit: Duration, what: &str) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: perfpipe still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Reads a pipe to its end on a thread.
fn drain<R: std::io::Read + Send + 'static>(mut r: R) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        v
    })
}

pipetest!(
    /// First SIGINT or SIGTERM while the input is still coming: perfpipe keeps draining, says why
    /// after a second, writes every byte, prints the figures and exits 0. Through passthrough and
    /// through a four-thread pipeline. The signal goes once perfpipe catches it (`signal`), the rest
    /// of the input once the notice is out.
    first_signal_drains_until_upstream_ends, |_dir| {
    let input = big_stream(20);
    for sig in [libc::SIGINT, libc::SIGTERM] {
        for args in [&["--stats"][..], &["--stats", "--decompress"]] {
            let mut child = spawn(args);
            let mut sin = child.stdin.take().unwrap();
            let out = drain(child.stdout.take().unwrap());
            let err = Watch::new(child.stderr.take().unwrap());
            let half = input.len() / 2;
            sin.write_all(&input[..half]).unwrap();
            signal(&child, sig);
            err.wait_for("interrupted: writing what the input still sends");
            sin.write_all(&input[half..]).unwrap();
            drop(sin);
            let status = wait_within(&mut child, Duration::from_secs(20), "drain");
            let (out, err) = (out.join().unwrap(), err.finish_text());
            let what = format!("signal {sig} {args:?}");
            assert_eq!(status.code(), Some(0), "{what}: {err}");
            assert!(
                out == input,
                "{what}: wrote {} of {} bytes",
                out.len(),
                input.len()
            );
            assert!(err.contains("bottleneck:"), "{what}: no figures: {err}");
            assert!(
                err.contains("interrupted: writing what the input still sends"),
                "{what}: {err}"
            );
        }
    }
});

pipetest!(
    /// A second SIGINT stops at once even though the upstream never ends: status 130, the figures so
    /// far, and what was written is whole records from the start of the input.
    second_sigint_aborts_at_once, |_dir| {
    let input = big_stream(4);
    let mut child = spawn(&["--stats"]);
    let mut sin = child.stdin.take().unwrap();
    // Read the output as it comes, counting it, so the signals go when everything sent was
    // written (however loaded the machine).
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let out = std::thread::spawn({
        let (mut o, seen) = (child.stdout.take().unwrap(), seen.clone());
        move || {
            let (mut v, mut buf) = (Vec::new(), vec![0u8; 1 << 16]);
            while let Ok(n @ 1..) = o.read(&mut buf) {
                v.extend_from_slice(&buf[..n]);
                seen.store(v.len(), std::sync::atomic::Ordering::SeqCst);
            }
            v
        }
    });
    let err = Watch::new(child.stderr.take().unwrap());
    sin.write_all(&input).unwrap();
    // The upstream stays open (`sin` is kept): only the signals can end this run.
    let t0 = Instant::now();
    while seen.load(std::sync::atomic::Ordering::SeqCst) < input.len() {
        assert!(t0.elapsed() < Duration::from_secs(20), "input not written");
        std::thread::sleep(Duration::from_millis(10));
    }
    signal(&child, libc::SIGINT);
    // Two SIGINTs pending at once are one: the second goes once the first has been counted,
    // which the notice a second later shows.
    err.wait_for("interrupted: writing what the input still sends");
    let t0 = Instant::now();
    signal(&child, libc::SIGINT);
    let status = wait_within(&mut child, Duration::from_secs(5), "second SIGINT");
    let took = t0.elapsed();
    drop(sin);
    let (out, err) = (out.join().unwrap(), err.finish_text());
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(took < Duration::from_secs(3), "took {took:?} to stop");
    assert!(err.contains("interrupted twice"), "{err}");
    assert!(err.contains("bottleneck:"), "{err}");
    // Everything sent had been written before the signals, and nothing after it was torn.
    assert!(is_record_prefix(&input, &out), "{} bytes", out.len());
    eqnice!(input.len(), out.len());
});

/// A producer that writes the stream's records forever (until its reader goes away).
fn endless_upstream(mut sin: std::process::ChildStdin) -> std::thread::JoinHandle<u64> {
    let input = fixture_bytes("callgraph.pipe.data");
    std::thread::spawn(move || {
        let mut sent = 0u64;
        if sin.write_all(&input).is_err() {
            return sent;
        }
        loop {
            if sin.write_all(&input[16..]).is_err() {
                return sent;
            }
            sent += (input.len() - 16) as u64;
        }
    })
}

pipetest!(
    /// The downstream closes while the upstream never ends: perfpipe stops promptly with status 0,
    /// no error text, and with `--stats` says how many records it had written.
    closed_downstream_stops_promptly_and_says_how_far, |_dir| {
    let input = fixture_bytes("callgraph.pipe.data");
    for args in [&["--stats"][..], &["--stats", "--buildid-all"]] {
        let mut child = spawn(args);
        let feeder = endless_upstream(child.stdin.take().unwrap());
        let err = drain(child.stderr.take().unwrap());
        let mut first = vec![0u8; 64 * 1024];
        child.stdout.take().unwrap().read_exact(&mut first).unwrap();
        // stdout dropped: the reader has gone.
        let status = wait_within(&mut child, Duration::from_secs(10), "closed downstream");
        let err = String::from_utf8(err.join().unwrap()).unwrap();
        feeder.join().unwrap();
        assert_eq!(status.code(), Some(0), "{args:?}: {err}");
        assert_eq!(first[..16], input[..16]);
        let n: u64 = err
            .lines()
            .find_map(|l| l.strip_prefix("perfpipe: downstream closed after "))
            .and_then(|l| l.strip_suffix(" records"))
            .unwrap_or_else(|| panic!("{args:?}: no 'downstream closed' line: {err}"))
            .parse()
            .unwrap();
        // At least the records in the 64 KiB the reader took were written.
        let whole = boundaries(&input)
            .iter()
            .filter(|&&b| b <= first.len())
            .count() as u64;
        assert!(
            n >= whole,
            "{args:?}: {n} records reported, {whole} were read"
        );
        assert!(!err.contains("Broken pipe"), "{args:?}: {err}");
    }
});

pipetest!(
    /// The upstream is killed in the middle of a record: every complete record before it is written
    /// (through passthrough, and through `--buildid` exactly as for the input cut at the last
    /// boundary), the truncation is reported with its offset and type, and the status is 1.
    upstream_killed_mid_record, |_dir| {
    let input = big_stream(3);
    let dir = Dir::new("upstream-killed");
    let file = dir.write("in.data", &input);
    let b = boundaries(&input);
    let boundary = b[b.len() * 2 / 3];
    let cut = boundary + 30; // inside the next record (callgraph records are ≥ 40 bytes)
    assert!(b.iter().all(|&x| x <= boundary || x > cut));
    for args in [&[][..], &["--buildid"]] {
        // The producer writes the first `cut` bytes, then waits to be killed.
        let mut producer = Command::new("sh")
            .arg("-c")
            .arg(format!("head -c {cut} '{}'; exec sleep 60", file.display()))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut child = Command::new(bin())
            .args(args)
            .stdin(producer.stdout.take().unwrap())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = drain(child.stdout.take().unwrap());
        let err = drain(child.stderr.take().unwrap());
        // Killed only once `head` has written its bytes: the shell has become `sleep`.
        let comm = format!("/proc/{}/comm", producer.id());
        let t0 = Instant::now();
        while std::fs::read_to_string(&comm).unwrap().trim() != "sleep" {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the producer never slept"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        producer.kill().unwrap();
        producer.wait().unwrap();
        let status = wait_within(&mut child, Duration::from_secs(10), "killed upstream");
        let (out, err) = (
            out.join().unwrap(),
            String::from_utf8(err.join().unwrap()).unwrap(),
        );
        assert_eq!(status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(&format!(
                "perfpipe: decode: offset {boundary}: input truncated inside a"
            )),
            "{args:?}: {err}"
        );
        assert!(err.contains(": 30 of "), "{args:?}: {err}");
        let expected = if args.is_empty() {
            input[..boundary].to_vec()
        } else {
            let whole = perfpipe(args, &input[..boundary]);
            assert!(whole.status.success());
            whole.stdout
        };
        assert!(
            out == expected,
            "{args:?}: wrote {} bytes, expected {}",
            out.len(),
            expected.len()
        );
    }
});

/// A 1 MiB tmpfs, unmounted at drop.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    /// Mounts one (the test needs [`Need::Mount`]).
    fn mount(dir: &Dir) -> SmallDisk {
        require(Need::Mount);
        let p = dir.path("disk");
        std::fs::create_dir(&p).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(&p)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "cannot mount a tmpfs on {}", p.display());
        SmallDisk(p)
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

pipetest!(needs(mount)
    /// The output is on a full disk: a clear error naming the file (or stdout) and ENOSPC, status 1,
    /// and what reached the disk is the start of the stream, never a torn or reordered record run.
    output_on_a_full_disk, |_dir| {
    let dir = Dir::new("full-disk");
    let disk = SmallDisk::mount(&dir);
    let input = big_stream(20); // ~3 MB, three times the disk
    assert!(input.len() > 3 << 20);
    let piped = disk.0.join("piped.data");
    let redirected = disk.0.join("stdout.data");
    let perf_data = disk.0.join("file-mode.data");
    let runs: [(&str, Vec<String>, Option<&std::path::Path>); 3] = [
        (
            "--pipe -o FILE",
            vec!["--pipe".into(), "-o".into(), piped.display().to_string()],
            None,
        ),
        ("stdout to a file", vec![], Some(&redirected)),
        (
            "-o FILE (file mode)",
            vec!["-o".into(), perf_data.display().to_string()],
            None,
        ),
    ];
    for (what, args, stdout_file) in runs {
        let mut cmd = Command::new(bin());
        cmd.args(&args).stdin(Stdio::piped()).stderr(Stdio::piped());
        match stdout_file {
            Some(p) => cmd.stdout(std::fs::File::create(p).unwrap()),
            None => cmd.stdout(Stdio::null()),
        };
        let mut child = cmd.spawn().unwrap();
        let mut sin = child.stdin.take().unwrap();
        let data = input.clone();
        let feeder = std::thread::spawn(move || {
            let _ = sin.write_all(&data);
        });
        let err = drain(child.stderr.take().unwrap());
        let status = wait_within(&mut child, Duration::from_secs(20), what);
        feeder.join().unwrap();
        let err = String::from_utf8(err.join().unwrap()).unwrap();
        assert_eq!(status.code(), Some(1), "{what}: {err}");
        assert!(err.contains("No space left on device"), "{what}: {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
        assert!(err.starts_with("perfpipe: "), "{what}: {err}");
        let written = match (what, stdout_file) {
            (_, Some(p)) => Some(std::fs::read(p).unwrap()),
            ("--pipe -o FILE", _) => Some(std::fs::read(&piped).unwrap()),
            _ => None,
        };
        if let Some(w) = written {
            assert!(
                input.starts_with(&w),
                "{what}: the {} bytes on disk are not the start of the stream",
                w.len()
            );
            assert!(
                w.len() > 512 << 10,
                "{what}: only {} bytes written",
                w.len()
            );
        } else {
            // File mode writes under a temporary name: on failure neither it nor the final
            // name is left behind.
            let left: Vec<_> = std::fs::read_dir(&disk.0).unwrap().collect();
            assert!(left.is_empty(), "{what}: left {left:?}");
        }
        // Free the disk for the next run.
        for e in std::fs::read_dir(&disk.0).unwrap() {
            let _ = std::fs::remove_file(e.unwrap().path());
        }
    }
});

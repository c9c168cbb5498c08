//! The `otlp` output and the push outputs (issue 41): OTLP profiles read by OpenTelemetry's own
//! Python decoder (PyPI `opentelemetry-proto`) folded back into stacks equal to our folded
//! output; windows pushed to a receiver this test starts on 127.0.0.1, each one a complete
//! request, their sum the whole, over HTTP and over HTTPS (socat's TLS, the test's CA trusted
//! through `SSL_CERT_FILE`, another CA refused); Pyroscope's `/ingest` bodies read by `go tool
//! pprof`; and receivers that refuse, stall, are dead or die mid-stream: every window named, the
//! run failing, the end bounded.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use perfpipe_export::otlp::proto::ExportProfilesServiceRequest;
use prost::Message;

use crate::another_machine::{empty_dir, test_ca, tls_front};
use crate::util::*;

/// What the receiver does with each request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Behaviour {
    /// Answers 200.
    Accept,
    /// Answers this status.
    Refuse(u16),
    /// Reads the request and never answers.
    Stall,
    /// Answers 200 to this many requests, then closes its socket: later connections are refused.
    DieAfter(usize),
}

/// One request the receiver got.
#[derive(Clone, Debug)]
struct Request {
    /// The path and query.
    target: String,
    /// Header names (lower case) and values.
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

/// An HTTP/1.1 receiver on 127.0.0.1, stopped at drop.
struct Receiver {
    port: u16,
    got: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Receiver {
    fn start(behaviour: Behaviour) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (got, stop) = (got.clone(), stop.clone());
            move || serve(listener, behaviour, &got, &stop)
        });
        Receiver {
            port,
            got,
            stop,
            thread: Some(thread),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn requests(&self) -> Vec<Request> {
        self.got.lock().unwrap().clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(
    listener: TcpListener,
    behaviour: Behaviour,
    got: &Mutex<Vec<Request>>,
    stop: &AtomicBool,
) {
    let mut stalled = Vec::new();
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(mut conn) = conn else { continue };
        let Some(request) = read_request(&mut conn) else {
            continue;
        };
        got.lock().unwrap().push(request);
        let answered = got.lock().unwrap().len();
        let status = match behaviour {
            Behaviour::Accept | Behaviour::DieAfter(_) => 200,
            Behaviour::Refuse(status) => status,
            Behaviour::Stall => {
                stalled.push(conn);
                continue;
            }
        };
        let body = if status == 200 {
            ""
        } else {
            "refused by the test"
        };
        let _ = write!(
            conn,
            "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        if behaviour == Behaviour::DieAfter(answered) {
            return;
        }
    }
}

fn read_request(conn: &mut TcpStream) -> Option<Request> {
    conn.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let target = line.split_whitespace().nth(1)?.to_string();
    let mut headers = BTreeMap::new();
    loop {
        line.clear();
        reader.read_line(&mut line).ok()?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':')?;
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
    }
    let len: usize = headers.get("content-length")?.parse().ok()?;
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        target,
        headers,
        body,
    })
}

/// `perfpipe ARGS`, killed (and the test failed) if it has not ended within two minutes: the
/// end of a push must never hang, whatever the receiver does.
fn perfpipe_bounded(args: &[&str]) -> Output {
    perfpipe_bounded_env(args, &[])
}

/// [`perfpipe_bounded`] with these environment variables.
fn perfpipe_bounded_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let child = Command::new(bin())
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let out = child.wait_with_output().unwrap();
        let _ = tx.send(());
        out
    });
    if rx.recv_timeout(Duration::from_secs(120)).is_err() {
        // SAFETY: kill(2) of our own child's pid.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        panic!("perfpipe {args:?} did not end within 120 s");
    }
    waiter.join().unwrap()
}

/// The sum of the values and the number of observations of a request's profiles of
/// `sample_type`.
fn totals(r: &ExportProfilesServiceRequest, sample_type: &str) -> (i64, usize) {
    let d = r.dictionary.as_ref().unwrap();
    let mut t = (0, 0);
    for rp in &r.resource_profiles {
        for p in rp.scope_profiles.iter().flat_map(|s| &s.profiles) {
            let st = p.sample_type.unwrap();
            if d.string_table[st.type_strindex as usize] != sample_type {
                continue;
            }
            for x in &p.samples {
                t.0 += x.values.iter().sum::<i64>();
                t.1 += x.values.len();
            }
        }
    }
    t
}

/// Folded stacks as a map.
fn folded_map(text: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for line in text.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        *m.entry(stack.to_string()).or_default() += n.parse::<u64>().unwrap();
    }
    m
}

/// `fold_otlp.py SAMPLE_TYPE FILES…`: OpenTelemetry's decoder folding our requests.
fn python_folded(sample_type: &str, files: &[std::path::PathBuf]) -> BTreeMap<String, u64> {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/otlp/fold_otlp.py");
    let out = succeed(
        Command::new("python3")
            .arg(script)
            .arg(sample_type)
            .args(files),
    );
    folded_map(&String::from_utf8_lossy(&out.stdout))
}

pipetest!(needs(otelproto) opentelemetry_decodes_our_requests_into_our_folded_stacks, |dir| {
    for fixture_name in ["callgraph.pipe.data", "multiproc.pipe.data", "dwarf.pipe.data"] {
        let input = fixture(fixture_name);
        let input = input.to_str().unwrap();
        let otlp = dir.path("p.otlp.pb");
        let folded = dir.path("p.folded");
        perfpipe_ok(&["-i", input, "-o", otlp.to_str().unwrap()], b"");
        perfpipe_ok(&["-i", input, "-o", folded.to_str().unwrap()], b"");
        let ours = folded_map(&std::fs::read_to_string(&folded).unwrap());
        let theirs = python_folded("cpu-clock", std::slice::from_ref(&otlp));
        assert!(ours.len() > 10, "{fixture_name}: {} stacks", ours.len());
        eqnice!(ours, theirs);
        // --format otlp to standard output is the same request (the fixtures have no
        // CLOCK_DATA: their dates are made when read, all else is the same).
        let stdout = dir.write("stdout.otlp.pb", &perfpipe_ok(&["-i", input, "--format", "otlp"], b""));
        eqnice!(theirs, python_folded("cpu-clock", &[stdout]));
    }
    // Off-CPU: the off_cpu profile of a sched_switch recording is `--weight offcpu`'s folded
    // stacks, `[off-cpu: STATE]` from `thread.state` and `open_at_end`.
    let input = fixture("tracepoint.pipe.data");
    let input = input.to_str().unwrap();
    let otlp = dir.path("off.otlp.pb");
    let folded = dir.path("off.folded");
    perfpipe_ok(&["-i", input, "-o", otlp.to_str().unwrap()], b"");
    perfpipe_ok(&["-i", input, "--weight", "offcpu", "-o", folded.to_str().unwrap()], b"");
    let ours = folded_map(&std::fs::read_to_string(&folded).unwrap());
    assert!(ours.keys().any(|k| k.contains("[off-cpu: S]")), "{ours:?}");
    eqnice!(ours, python_folded("off_cpu", &[otlp]));
});

pipetest!(needs(perf, cc, otelproto) inlined_functions_are_lines_of_one_location, |dir| {
    // --inline: the functions inlined at an address are Lines of its one Location, callee
    // first, and fold as --inline's folded stacks do.
    let w = crate::workloads::cpp_templates(&dir);
    let rec = dir.write("rec.data", &w.record(&[]));
    let rec = rec.to_str().unwrap();
    let otlp = dir.path("inline.otlp.pb");
    let folded = dir.path("inline.folded");
    perfpipe_ok(&["-i", rec, "--inline", "-o", otlp.to_str().unwrap()], b"");
    perfpipe_ok(&["-i", rec, "--inline", "-o", folded.to_str().unwrap()], b"");
    let ours = folded_map(&std::fs::read_to_string(&folded).unwrap());
    eqnice!(ours, python_folded("cpu-clock", std::slice::from_ref(&otlp)));
    let req = ExportProfilesServiceRequest::decode(&std::fs::read(&otlp).unwrap()[..]).unwrap();
    let d = req.dictionary.unwrap();
    let name = |f: i32| d.string_table[d.function_table[f as usize].name_strindex as usize].clone();
    let inlined: Vec<Vec<String>> = (d.location_table.iter())
        .filter(|l| l.lines.len() > 1)
        .map(|l| l.lines.iter().map(|x| name(x.function_index)).collect())
        .collect();
    assert!(
        inlined.iter().any(|names| names[0].starts_with("tpl::Poly<double, 7>::eval")
            && names[1].starts_with("tpl::sum_poly<double>")),
        "{inlined:?}"
    );
});

pipetest!(needs(perf, otelproto) a_recording_agent_pushes_every_window_of_it, |dir| {
    // perfpipe record as an agent; --tap keeps the stream it pushed, to compare with the whole.
    let receiver = Receiver::start(Behaviour::Accept);
    let url = receiver.url("/v1development/profiles");
    let tap = dir.path("tap.data");
    let tap_arg = format!("decode={}", tap.display());
    let (_, err) = perfpipe_record(
        &["-g", "-F", "999", "--window", "100ms", "--tap", &tap_arg, "-o", &url, "--stats"],
        &[&workload(), "single"],
    );
    let requests = receiver.requests();
    assert!(requests.len() >= 3, "{} windows: {err}", requests.len());
    assert!(err.contains("windows_dropped = 0"), "{err}");
    let files: Vec<_> = (requests.iter().enumerate())
        .map(|(i, r)| dir.write(&format!("w{i}.otlp.pb"), &r.body))
        .collect();
    let whole = dir.path("whole.otlp.pb");
    perfpipe_ok(&["-i", tap.to_str().unwrap(), "-o", whole.to_str().unwrap()], b"");
    let windows = python_folded("cpu-clock", &files);
    assert!(windows.values().sum::<u64>() > 0);
    eqnice!(python_folded("cpu-clock", &[whole]), windows);
});

pipetest!(needs(otelproto) windows_pushed_to_a_collector_add_up_to_the_whole, |dir| {
    let input = fixture("callgraph.pipe.data");
    let input = input.to_str().unwrap();
    let receiver = Receiver::start(Behaviour::Accept);
    let url = receiver.url("/v1development/profiles");
    let out = perfpipe_bounded(&["-i", input, "--window", "50ms", "-o", &url, "--stats"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let requests = receiver.requests();
    assert!(requests.len() >= 3, "{} windows: {err}", requests.len());
    assert!(err.contains(&format!("windows_sent = {}", requests.len())), "{err}");
    let mut files = Vec::new();
    let mut sum = (0, 0);
    let mut spans = Vec::new();
    for (i, r) in requests.iter().enumerate() {
        assert_eq!(r.target, "/v1development/profiles");
        assert_eq!(r.headers["content-type"], "application/x-protobuf");
        assert_eq!(r.headers["otlp-profiles-development-version"], "1");
        let req = ExportProfilesServiceRequest::decode(&r.body[..]).unwrap();
        let t = totals(&req, "cpu-clock");
        assert!(t.1 > 0, "window {i} has samples");
        sum = (sum.0 + t.0, sum.1 + t.1);
        // Each window is complete in itself: every stack it names is in its own dictionary.
        let d = req.dictionary.as_ref().unwrap();
        for p in req.resource_profiles.iter().flat_map(|r| &r.scope_profiles).flat_map(|s| &s.profiles) {
            spans.push((p.time_unix_nano, p.duration_nano));
            for x in &p.samples {
                assert!((x.stack_index as usize) < d.stack_table.len());
                for &ts in &x.timestamps_unix_nano {
                    assert!(ts >= p.time_unix_nano && ts < p.time_unix_nano + p.duration_nano);
                }
            }
        }
        files.push(dir.write(&format!("w{i}.otlp.pb"), &r.body));
    }
    // Windows are 50 ms of the wall clock, in order, not overlapping.
    spans.sort_unstable();
    spans.dedup();
    assert!(spans.iter().all(|&(_, d)| d <= 50_000_000));
    assert!(spans.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0));
    // perf report --stats: 1777 samples, -c 200000; the whole as one file has the same.
    assert_eq!(sum, (1777 * 200_000, 1777));
    let whole = dir.path("whole.otlp.pb");
    perfpipe_ok(&["-i", input, "-o", whole.to_str().unwrap()], b"");
    let whole_req = ExportProfilesServiceRequest::decode(&std::fs::read(&whole).unwrap()[..]).unwrap();
    assert_eq!(totals(&whole_req, "cpu-clock"), sum);
    // And stack by stack, as OpenTelemetry's decoder folds them.
    eqnice!(python_folded("cpu-clock", &[whole]), python_folded("cpu-clock", &files));
});

pipetest!(needs(tls) windows_pushed_over_https_reach_the_collector, |dir| {
    // The receiver behind socat's TLS with a certificate of a CA made here: trusted through
    // SSL_CERT_FILE, every window arrives and they add up to the whole; with another CA's file
    // the certificate is refused, the run fails saying so and naming every window it dropped.
    let input = fixture("callgraph.pipe.data");
    let input = input.to_str().unwrap();
    let receiver = Receiver::start(Behaviour::Accept);
    let (ca, cert) = test_ca(&dir, "trusted");
    let (other_ca, _) = test_ca(&dir, "other");
    let (_tls, tls_port) = tls_front(&cert, receiver.port);
    let url = format!("https://127.0.0.1:{tls_port}/v1development/profiles");
    let no_dir = empty_dir(&dir, "no-cert-dir");
    let push = |ca: &std::path::Path, extra: &[&str]| {
        let mut args = vec!["-i", input, "--window", "50ms", "-o", &url, "--stats"];
        args.extend_from_slice(extra);
        let env = [
            ("SSL_CERT_FILE", ca.to_str().unwrap()),
            ("SSL_CERT_DIR", no_dir.to_str().unwrap()),
        ];
        let out = perfpipe_bounded_env(&args, &env);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out, err)
    };
    let (out, err) = push(&ca, &[]);
    assert!(out.status.success(), "{err}");
    let requests = receiver.requests();
    assert!(requests.len() >= 3, "{} windows: {err}", requests.len());
    assert!(err.contains(&format!("windows_sent = {}", requests.len())), "{err}");
    assert!(err.contains("windows_dropped = 0"), "{err}");
    let mut sum = (0, 0);
    for (i, r) in requests.iter().enumerate() {
        assert_eq!(r.target, "/v1development/profiles");
        let req = ExportProfilesServiceRequest::decode(&r.body[..]).unwrap();
        let t = totals(&req, "cpu-clock");
        assert!(t.1 > 0, "window {i} has samples");
        sum = (sum.0 + t.0, sum.1 + t.1);
    }
    let whole = dir.path("whole.otlp.pb");
    perfpipe_ok(&["-i", input, "-o", whole.to_str().unwrap()], b"");
    let whole_req =
        ExportProfilesServiceRequest::decode(&std::fs::read(&whole).unwrap()[..]).unwrap();
    assert_eq!(totals(&whole_req, "cpu-clock"), sum);
    assert_eq!(sum, (1777 * 200_000, 1777));
    // A CA store without the server's CA: nothing reaches the receiver. A queue longer than the
    // windows, so that each is refused by TLS, not dropped as queued behind the others.
    let before = requests.len();
    let (out, err) = push(&other_ca, &["--format", "otlp:retries=0,timeout=5s,queue=64"]);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let (n, of) = dropped(&err);
    assert!(n == of && n >= 3, "{err}");
    // Each window's line says why: rustls refused the certificate (UnknownIssuer).
    for i in 1..=n {
        let line = err
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("window {i} (")))
            .unwrap_or_else(|| panic!("window {i}: {err}"));
        assert!(line.contains("invalid peer certificate"), "{line}");
    }
    assert_eq!(receiver.requests().len(), before, "{err}");
});

pipetest!(needs(go) pyroscope_ingest_gets_each_window_as_pprof_that_go_tool_pprof_reads, |dir| {
    let input = fixture("multiproc.pipe.data");
    let receiver = Receiver::start(Behaviour::Accept);
    let url = format!("pyroscope+{}/?name=db{{env=test}}", receiver.url(""));
    let out = perfpipe_bounded(&["-i", input.to_str().unwrap(), "--window", "100ms", "-o", &url]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let requests = receiver.requests();
    assert!(requests.len() >= 2, "{} windows", requests.len());
    let mut total = 0;
    let mut last_until = 0u64;
    for (i, r) in requests.iter().enumerate() {
        let (path, query) = r.target.split_once('?').unwrap();
        assert_eq!(path, "/ingest");
        let q: BTreeMap<&str, &str> = query.split('&').filter_map(|kv| kv.split_once('=')).collect();
        assert_eq!(q["name"], "db%7Benv%3Dtest%7D");
        assert_eq!(q["format"], "pprof");
        let (from, until): (u64, u64) = (q["from"].parse().unwrap(), q["until"].parse().unwrap());
        assert!(from < until && from >= last_until.saturating_sub(1), "{query}");
        last_until = until;
        let file = dir.write(&format!("w{i}.pb.gz"), &r.body);
        let top = succeed(Command::new("go").args([
            "tool",
            "pprof",
            "-raw",
            "-sample_index=cpu-clock_samples",
        ]).arg(&file));
        let text = String::from_utf8_lossy(&top.stdout);
        // -raw: "Samples:" then one line per sample, its values first.
        let samples: i64 = text
            .lines()
            .skip_while(|l| !l.starts_with("Samples:"))
            .skip(2)
            .take_while(|l| !l.starts_with("Locations"))
            .filter_map(|l| l.split_whitespace().next()?.parse::<i64>().ok())
            .sum();
        assert!(samples > 0, "window {i}: {text:.800}");
        total += samples;
    }
    // fixtures/README.md: 1664 samples.
    assert_eq!(total, 1664);
});

/// Runs a windowed push of the callgraph fixture to `url` with small time limits: its output.
fn push_failing(url: &str, extra: &[&str]) -> (Output, String) {
    let input = fixture("callgraph.pipe.data");
    let mut args = vec![
        "-i",
        input.to_str().unwrap(),
        "--window",
        "100ms",
        "-o",
        url,
    ];
    args.extend_from_slice(extra);
    let out = perfpipe_bounded(&args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, err)
}

/// The windows the error names as not delivered, and how many it says there were.
fn dropped(err: &str) -> (usize, usize) {
    let line = err
        .lines()
        .find(|l| l.contains("windows were not delivered"))
        .unwrap_or_else(|| panic!("{err}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "of").unwrap();
    (
        words[at - 1].parse().unwrap(),
        words[at + 1].parse().unwrap(),
    )
}

pipetest!(
    a_receiver_that_refuses_fails_the_run_naming_every_window,
    |_dir| {
        let receiver = Receiver::start(Behaviour::Refuse(400));
        let (out, err) = push_failing(&receiver.url("/v1development/profiles"), &[]);
        assert_eq!(out.status.code(), Some(1), "{err}");
        let (n, of) = dropped(&err);
        assert!(n == of && n >= 3, "{err}");
        for i in 1..=n {
            assert!(err.contains(&format!("window {i} (")), "window {i}: {err}");
        }
        assert!(err.contains("HTTP 400 refused by the test"), "{err}");
        // A refusal is not retried: one request per window.
        assert_eq!(receiver.requests().len(), n);
    }
);

pipetest!(a_dead_receiver_fails_the_run_after_its_retries, |_dir| {
    // A port nothing listens on: connections are refused.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/v1development/profiles");
    let (out, err) = push_failing(&url, &["--format", "otlp:retries=1,timeout=2s"]);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let (n, of) = dropped(&err);
    assert!(n == of && n >= 3, "{err}");
    assert!(
        err.contains("push_retries") || err.contains("attempts"),
        "{err}"
    );
});

pipetest!(a_stalled_receiver_never_holds_up_the_end, |_dir| {
    let receiver = Receiver::start(Behaviour::Stall);
    let url = receiver.url("/v1development/profiles");
    let (out, err) = push_failing(&url, &["--format", "otlp:retries=0,timeout=1s,queue=1"]);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let (n, of) = dropped(&err);
    assert!(n == of && n >= 3, "{err}");
    assert!(!receiver.requests().is_empty());
});

pipetest!(a_receiver_that_dies_mid_stream_keeps_what_it_took, |_dir| {
    let receiver = Receiver::start(Behaviour::DieAfter(2));
    let url = receiver.url("/v1development/profiles");
    let (out, err) = push_failing(&url, &["--format", "otlp:retries=1,timeout=2s,queue=16"]);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let (n, of) = dropped(&err);
    assert_eq!(receiver.requests().len(), 2);
    assert_eq!(n + 2, of, "{err}");
    assert!(
        err.contains("window 3 ("),
        "the third is the first dropped: {err}"
    );
    assert!(!err.contains("window 2 ("), "{err}");
});

pipetest!(
    push_options_need_a_url_and_urls_need_a_pushing_format,
    |dir| {
        let input = fixture("callgraph.pipe.data");
        let input = input.to_str().unwrap();
        let file = dir.path("x.otlp.pb");
        let out = perfpipe(
            &["-i", input, "--window", "10s", "-o", file.to_str().unwrap()],
            b"",
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("--window"), "{err}");
        let out = perfpipe(
            &[
                "-i",
                input,
                "--folded",
                "-o",
                "http://127.0.0.1:9/v1development/profiles",
            ],
            b"",
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("a URL is pushed to"), "{err}");
    }
);

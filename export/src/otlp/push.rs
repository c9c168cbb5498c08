//! [`Pusher`]: the requests of a push output, sent one at a time from a thread of their own
//! through a bounded queue, so that a slow or dead receiver never holds up the stream (a
//! recording that waited on it would lose events in the kernel instead).
//!
//! - **Queue**: `queue` windows wait (default 4). A window that finds the queue full waits for
//!   room up to `timeout` while the receiver answers (so a file read faster than the receiver
//!   takes its windows loses none), and is dropped at once while the receiver fails (so a
//!   recording is never held up by a dead one). Memory is bounded by the queue and the window
//!   being filled.
//! - **Retries**: a request that fails in transport, or is answered 429 or 5xx, is retried up to
//!   `retries` times (default 3) after 500 ms, 1 s, 2 s…; one answered otherwise (400: the
//!   receiver refuses it) is not retried.
//! - **Time limits**: each request has `timeout` (default 10 s) in all; at the end the windows
//!   still queued have `timeout` from then to be sent, and what is left after it is dropped. The
//!   end never waits longer than that, however the receiver behaves.
//! - **Counters and the end**: `windows_sent`, `windows_dropped`, `push_retries`; every dropped
//!   window is named at the end (its index, its time span and why), and the run fails (exit
//!   status 1) if any was.
//!
//! HTTP and HTTPS go through `ureq` with rustls and the system's CA store, as debuginfod does
//! ([`perfpipe_profile::symbols::sources::debuginfod::tls_config`]).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, SendTimeoutError, Sender, TrySendError};
use perfpipe_core::Counter;

/// Where the requests go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// An OTLP/HTTP profiles endpoint: the URL as given (`…/v1development/profiles`).
    Otlp {
        /// The URL.
        url: String,
    },
    /// Pyroscope's `/ingest`, under the server's URL.
    Pyroscope {
        /// `http://HOST:4040` (without `pyroscope+`).
        base: String,
        /// The application name (`name=`, labels in `{}` included).
        name: String,
    },
}

/// The scheme prefix of a Pyroscope output.
pub const PYROSCOPE: &str = "pyroscope+";

/// Whether `path` is a URL output: `http://`, `https://`, `pyroscope+http(s)://`.
pub fn is_url(path: &Path) -> bool {
    let s = path.to_string_lossy();
    let s = s.strip_prefix(PYROSCOPE).unwrap_or(&s);
    s.starts_with("http://") || s.starts_with("https://")
}

impl Target {
    /// The OTLP target of an `http(s)://` output.
    pub fn otlp(path: &Path) -> Option<Target> {
        let s = path.to_str()?;
        (is_url(path) && !s.starts_with(PYROSCOPE)).then(|| Target::Otlp { url: s.into() })
    }

    /// The Pyroscope target of a `pyroscope+http(s)://HOST:PORT[/?name=APP]` output; the
    /// application is `perfpipe` unless the URL's `name=` says otherwise.
    pub fn pyroscope(path: &Path) -> Option<Target> {
        let s = path.to_str()?.strip_prefix(PYROSCOPE)?;
        if !is_url(Path::new(s)) {
            return None;
        }
        let (base, query) = s.split_once('?').unwrap_or((s, ""));
        let name = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("name="))
            .unwrap_or("perfpipe");
        Some(Target::Pyroscope {
            base: base.trim_end_matches('/').into(),
            name: name.into(),
        })
    }

    /// The URL and content type of the request of `window`.
    fn request(&self, window: &Window) -> (String, &'static str) {
        match self {
            Target::Otlp { url } => (url.clone(), "application/x-protobuf"),
            Target::Pyroscope { base, name } => (
                format!(
                    "{base}/ingest?name={}&from={}&until={}&format=pprof",
                    encode_query(name),
                    window.start_ns / 1_000_000_000,
                    window.end_ns.div_ceil(1_000_000_000),
                ),
                "application/octet-stream",
            ),
        }
    }
}

/// `s` percent-encoded for a query value (`{`, `}`, `=`, `,` and spaces of labels included).
fn encode_query(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One request: a window's body and its span on the wall clock.
#[derive(Debug)]
pub struct Window {
    /// Its place in the run, from 1.
    pub index: u64,
    /// Its start, ns since the epoch.
    pub start_ns: u64,
    /// Its end, ns since the epoch.
    pub end_ns: u64,
    /// The encoded request.
    pub body: Vec<u8>,
}

impl Window {
    /// `window 3 (2026-12-06 21:40:00–21:40:10 UTC)`.
    fn name(&self) -> String {
        format!(
            "window {} ({}–{} UTC)",
            self.index,
            utc(self.start_ns),
            &utc(self.end_ns)[11..]
        )
    }
}

/// `YYYY-MM-DD HH:MM:SS` of `ns` since the epoch.
fn utc(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    format!(
        "{} {:02}:{:02}:{:02}",
        crate::day_date(days),
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// How requests are sent.
#[derive(Clone, Copy, Debug)]
pub struct PushConfig {
    /// Windows waiting to be sent.
    pub queue: usize,
    /// Retries of a failed request.
    pub retries: u32,
    /// Each request's time limit, and the end's.
    pub timeout: Duration,
    /// The first retry's wait (doubling after).
    pub backoff: Duration,
}

impl Default for PushConfig {
    fn default() -> PushConfig {
        PushConfig {
            queue: 4,
            retries: 3,
            timeout: Duration::from_secs(10),
            backoff: Duration::from_millis(500),
        }
    }
}

/// What the sending thread and the sink share.
#[derive(Debug, Default)]
struct Shared {
    sent: Counter,
    dropped: Counter,
    retries: Counter,
    bytes: Counter,
    /// Each dropped window's name and why.
    dropped_list: Mutex<Vec<String>>,
    /// Set at the end: nothing is sent after it.
    deadline: Mutex<Option<Instant>>,
    /// The last attempt failed: a full queue drops windows at once rather than wait.
    failing: AtomicBool,
}

impl Shared {
    fn drop_window(&self, w: &Window, why: &str) {
        self.dropped.add(1);
        let mut list = self.dropped_list.lock().unwrap_or_else(|e| e.into_inner());
        list.push(format!("{}: {why}", w.name()));
    }

    fn deadline(&self) -> Option<Instant> {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The sender of a push output (see the module doc).
#[derive(Debug)]
pub struct Pusher {
    tx: Option<Sender<Window>>,
    thread: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
    config: PushConfig,
}

impl Pusher {
    /// Starts the sending thread.
    ///
    /// # Errors
    /// When the thread cannot start.
    pub fn start(target: Target, config: PushConfig) -> std::io::Result<Pusher> {
        let (tx, rx) = crossbeam_channel::bounded(config.queue.max(1));
        let shared = Arc::new(Shared::default());
        let agent = agent(config.timeout);
        let thread = std::thread::Builder::new()
            .name("perfpipe-push".into())
            .spawn({
                let shared = shared.clone();
                move || send_all(&agent, &target, config, &rx, &shared)
            })?;
        Ok(Pusher {
            tx: Some(tx),
            thread: Some(thread),
            shared,
            config,
        })
    }

    /// Queues a window. When the queue is full, waits for room up to the timeout while the
    /// receiver answers (a file read faster than it takes requests loses nothing), and drops the
    /// window (counted, named) at once while it fails (a recording is not held up by a dead
    /// receiver).
    pub fn push(&self, window: Window) {
        let Some(tx) = &self.tx else { return };
        let full = if self.shared.failing.load(Ordering::Relaxed) {
            match tx.try_send(window) {
                Ok(()) => return,
                Err(TrySendError::Full(w) | TrySendError::Disconnected(w)) => w,
            }
        } else {
            match tx.send_timeout(window, self.config.timeout) {
                Ok(()) => return,
                Err(SendTimeoutError::Timeout(w) | SendTimeoutError::Disconnected(w)) => w,
            }
        };
        self.shared
            .drop_window(&full, "the queue was full (the receiver failing or slow)");
    }

    /// Sends what is queued within the timeout, then stops the thread; the dropped windows, each
    /// named with why, if any was.
    pub fn finish(&mut self) -> Vec<String> {
        *self
            .shared
            .deadline
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(Instant::now() + self.config.timeout);
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        std::mem::take(
            &mut *self
                .shared
                .dropped_list
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        )
    }

    /// `windows_sent`, `windows_dropped`, `push_retries`, `push_bytes`.
    pub fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![
            ("windows_sent", self.shared.sent.clone()),
            ("windows_dropped", self.shared.dropped.clone()),
            ("push_retries", self.shared.retries.clone()),
            ("push_bytes", self.shared.bytes.clone()),
        ]
    }
}

impl Drop for Pusher {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.finish();
        }
    }
}

/// The HTTP agent: the CA store, no redirects, statuses as answers.
fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .max_redirects(0)
        .user_agent(concat!("perfpipe/", env!("CARGO_PKG_VERSION")))
        .tls_config(perfpipe_profile::symbols::sources::debuginfod::tls_config())
        .build()
        .into()
}

/// The sending thread: each window in turn, until the sink is done and the queue empty.
fn send_all(
    agent: &ureq::Agent,
    target: &Target,
    config: PushConfig,
    rx: &Receiver<Window>,
    shared: &Shared,
) {
    for w in rx {
        send(agent, target, config, &w, shared);
    }
}

/// What one attempt gave.
enum Attempt {
    Sent,
    /// Worth retrying (transport, 429, 5xx), and why.
    Retry(String),
    /// Refused (another status), and why.
    Refused(String),
}

/// Sends one window with retries, within its deadline.
fn send(agent: &ureq::Agent, target: &Target, config: PushConfig, w: &Window, shared: &Shared) {
    let (url, content_type) = target.request(w);
    let mut wait = config.backoff;
    for attempt in 0..=config.retries {
        let left = shared
            .deadline()
            .map(|d| d.saturating_duration_since(Instant::now()));
        if left == Some(Duration::ZERO) {
            shared.drop_window(w, "not sent by the end's time limit (timeout)");
            return;
        }
        let limit = left.map_or(config.timeout, |l| l.min(config.timeout));
        let why = match post(agent, &url, content_type, &w.body, limit) {
            Attempt::Sent => {
                shared.failing.store(false, Ordering::Relaxed);
                shared.sent.add(1);
                shared.bytes.add(w.body.len() as u64);
                return;
            }
            Attempt::Refused(why) => {
                shared.failing.store(true, Ordering::Relaxed);
                shared.drop_window(w, &why);
                return;
            }
            Attempt::Retry(why) => why,
        };
        shared.failing.store(true, Ordering::Relaxed);
        if attempt == config.retries {
            let tries = attempt + 1;
            let s = if tries == 1 { "" } else { "s" };
            shared.drop_window(w, &format!("{why} ({tries} attempt{s})"));
            return;
        }
        shared.retries.add(1);
        let left = shared
            .deadline()
            .map(|d| d.saturating_duration_since(Instant::now()));
        std::thread::sleep(left.map_or(wait, |l| l.min(wait)));
        wait *= 2;
    }
}

/// One POST.
fn post(
    agent: &ureq::Agent,
    url: &str,
    content_type: &str,
    body: &[u8],
    limit: Duration,
) -> Attempt {
    let answer = agent
        .post(url)
        .config()
        .timeout_global(Some(limit))
        .build()
        .header("Content-Type", content_type)
        .header("otlp-profiles-development-version", "1")
        .send(body);
    match answer {
        Err(e) => Attempt::Retry(format!("{url}: {e}")),
        Ok(mut r) => {
            let status = r.status().as_u16();
            if (200..300).contains(&status) {
                return Attempt::Sent;
            }
            let text = r
                .body_mut()
                .with_config()
                .limit(512)
                .read_to_string()
                .unwrap_or_default();
            let why = format!("{url}: HTTP {status} {}", text.trim());
            if status == 429 || status >= 500 {
                Attempt::Retry(why)
            } else {
                Attempt::Refused(why)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_choose_their_target() {
        let p = |s: &str| Path::new(s).to_path_buf();
        assert_eq!(
            Target::otlp(&p("http://h:4318/v1development/profiles")),
            Some(Target::Otlp {
                url: "http://h:4318/v1development/profiles".into()
            })
        );
        assert_eq!(Target::otlp(&p("pyroscope+http://h:4040")), None);
        assert_eq!(Target::otlp(&p("x.otlp.pb")), None);
        assert_eq!(
            Target::pyroscope(&p("pyroscope+https://h:4040/?name=db{env=prod}")),
            Some(Target::Pyroscope {
                base: "https://h:4040".into(),
                name: "db{env=prod}".into()
            })
        );
        let w = Window {
            index: 1,
            start_ns: 1_796_522_986_920_149_000,
            end_ns: 1_796_522_996_920_149_000,
            body: Vec::new(),
        };
        let t = Target::pyroscope(&p("pyroscope+http://h:4040")).unwrap();
        assert_eq!(
            t.request(&w).0,
            "http://h:4040/ingest?name=perfpipe&from=1796522986&until=1796522997&format=pprof"
        );
        assert_eq!(encode_query("a{b=c}"), "a%7Bb%3Dc%7D");
        assert_eq!(w.name(), "window 1 (2026-12-06 02:09:46–02:09:56 UTC)");
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert!(is_url(&p("https://x")) && !is_url(&p("/tmp/http:/x")));
    }
}

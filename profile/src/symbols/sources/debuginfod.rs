//! A debuginfod client: `DEBUGINFOD_URLS` (space-separated, as elfutils reads it),
//! `GET URL/buildid/ID/debuginfo` (then `/executable`), every URL at once, the first good answer
//! kept; files cached in the elfutils client's layout (`ROOT/ID/debuginfo`, `ROOT/ID/executable`,
//! an empty file for a miss, honoured for `cache_miss_s` seconds) so perf, gdb and perfpipe share
//! downloads. A downloaded file is kept only when its build id is the one asked for.
//!
//! HTTP and HTTPS through `ureq` (synchronous, no async runtime; rustls with the system's CA
//! store as `rustls-native-certs` reads it, so `SSL_CERT_FILE` and `SSL_CERT_DIR` are honoured as
//! curl and elfutils honour them; webpki's roots only when the system has none). One agent per
//! client: `DEBUGINFOD_TIMEOUT` bounds connecting and every read (a server silent that long fails
//! the request, as elfutils' low-speed limit does), redirects are followed at most
//! [`MAX_REDIRECTS`] times, the size cap is checked on `Content-Length` and while reading, and the
//! body streams into a temporary file of the cache. The choice, measured against the hand-written
//! client it replaced, attohttpc and rustls under `std::net`: `benches/results/http-clients.md`.
//!
//! The HTTP transport is the cargo feature `debuginfod` (on by default). A build without it reads
//! no `DEBUGINFOD_URLS` (as perf built without libdebuginfod) and refuses a `debuginfod=URLS`
//! option, naming the feature ([`check_option`]).
//!
//! Each failure is counted and ends only its request: a server that never answers (the read
//! timeout), one that closes mid-body (a short body), an answer larger than the cap, a file of
//! another build id. Only a miss (404 from every server) is cached, as elfutils caches only
//! `-ENOENT`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use perfpipe_core::Counter;

/// The HTTP agent of a client (nothing in a build without the `debuginfod` feature).
#[cfg(feature = "debuginfod")]
type Agent = ureq::Agent;
#[cfg(not(feature = "debuginfod"))]
type Agent = NoAgent;

/// The agent of a build without an HTTP transport.
#[cfg(not(feature = "debuginfod"))]
#[derive(Clone, Debug)]
pub(crate) struct NoAgent;

/// Fails a `debuginfod=URLS` option (any but `no`) in a build without the `debuginfod` feature.
///
/// # Errors
/// The text that names the feature.
pub fn check_option(value: Option<&str>) -> Result<(), String> {
    match value {
        Some(urls) if urls != "no" && !cfg!(feature = "debuginfod") => Err(format!(
            "debuginfod={urls}: this perfpipe is built without the cargo feature `debuginfod`"
        )),
        _ => Ok(()),
    }
}

/// The default of `DEBUGINFOD_TIMEOUT` (elfutils' 90 s).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(90);
/// The default size cap of one file (`DEBUGINFOD_MAXSIZE` overrides it).
pub const DEFAULT_MAX_SIZE: u64 = 2 << 30;
/// How long a cached miss holds when the cache has no `cache_miss_s` file (elfutils' 600 s).
pub const DEFAULT_MISS_SECS: u64 = 600;
/// Most redirects followed for one request.
pub const MAX_REDIRECTS: u32 = 8;

/// Where and how to ask. Plain data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DebuginfodConfig {
    /// The servers, as given.
    pub urls: Vec<String>,
    /// The client cache's root.
    pub cache: PathBuf,
    /// A server silent this long (connecting, or between two reads) fails the request.
    pub timeout: Duration,
    /// Most bytes of one file; larger answers are dropped.
    pub max_size: u64,
}

impl DebuginfodConfig {
    /// `DEBUGINFOD_URLS` and the client's variables, as elfutils reads them; `None` when
    /// `DEBUGINFOD_URLS` is unset or empty, or the build has no `debuginfod` feature.
    pub fn from_env() -> Option<DebuginfodConfig> {
        if !cfg!(feature = "debuginfod") {
            return None;
        }
        let urls = std::env::var("DEBUGINFOD_URLS").ok()?;
        DebuginfodConfig::with_urls(&urls)
    }

    /// The configuration for `urls` (space-separated), the rest from the environment.
    pub fn with_urls(urls: &str) -> Option<DebuginfodConfig> {
        let mut list: Vec<String> = Vec::new();
        for u in urls.split_whitespace() {
            if !list.iter().any(|l| l == u) {
                list.push(u.to_string());
            }
        }
        if list.is_empty() {
            return None;
        }
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let home = var("HOME").map(PathBuf::from);
        let cache = var("DEBUGINFOD_CACHE_PATH")
            .map(PathBuf::from)
            .or_else(|| {
                let old = home.as_ref()?.join(".debuginfod_client_cache");
                old.is_dir().then_some(old)
            })
            .or_else(|| var("XDG_CACHE_HOME").map(|x| Path::new(&x).join("debuginfod_client")))
            .unwrap_or_else(|| {
                home.unwrap_or_else(std::env::temp_dir)
                    .join(".cache/debuginfod_client")
            });
        let timeout = var("DEBUGINFOD_TIMEOUT")
            .and_then(|t| t.trim().parse::<u64>().ok())
            .filter(|&t| t > 0)
            .map_or(DEFAULT_TIMEOUT, Duration::from_secs);
        let max_size = var("DEBUGINFOD_MAXSIZE")
            .and_then(|t| t.trim().parse::<u64>().ok())
            .filter(|&t| t > 0)
            .unwrap_or(DEFAULT_MAX_SIZE);
        Some(DebuginfodConfig {
            urls: list,
            cache,
            timeout,
            max_size,
        })
    }
}

/// Counters, for `--stats`.
#[derive(Clone, Debug, Default)]
pub struct DebuginfodCounters {
    /// Requests sent (one per server and file).
    pub requests: Counter,
    /// Files downloaded and kept.
    pub downloaded: Counter,
    /// Their bytes.
    pub bytes: Counter,
    /// Answered from the cache (a file, or a cached miss).
    pub cache_hits: Counter,
    /// No server had the file (cached as a miss).
    pub misses: Counter,
    /// Downloads of another build id's file (or not an ELF file), dropped.
    pub rejected: Counter,
    /// Requests that failed: timeouts, connections closed mid-body, bad answers, too large.
    pub errors: Counter,
    /// Of the errors, TLS failures: a certificate the CA store does not trust, a handshake
    /// that failed.
    pub tls_errors: Counter,
    /// URLs that are not `http://` or `https://` (skipped).
    pub urls_unsupported: Counter,
}

/// How many dso loads may wait on servers at once: the loads run on a pool of their own so that a
/// cold fetch of N files costs about the slowest fetch, not their sum over the worker pool's
/// few threads.
pub const FETCH_THREADS: usize = 16;

/// The client.
#[derive(Debug)]
pub struct Debuginfod {
    config: DebuginfodConfig,
    counters: DebuginfodCounters,
    pool: std::sync::OnceLock<Option<rayon::ThreadPool>>,
    agent: std::sync::OnceLock<Agent>,
    /// Per server: its failed requests and the first one's error, for the end lines.
    failures: std::sync::Mutex<Vec<(String, u64, String)>>,
}

/// Why no file came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Miss {
    /// No server has it (cached).
    NotFound,
    /// Every request failed (not cached: a later run asks again).
    Failed(String),
}

static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

impl Debuginfod {
    /// A client for `config`.
    pub fn new(config: DebuginfodConfig) -> Debuginfod {
        Debuginfod {
            config,
            counters: DebuginfodCounters::default(),
            pool: std::sync::OnceLock::new(),
            agent: std::sync::OnceLock::new(),
            failures: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// The pool dso loads run on while debuginfod may be asked ([`FETCH_THREADS`] threads).
    pub fn pool(&self) -> Option<&rayon::ThreadPool> {
        self.pool
            .get_or_init(|| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(FETCH_THREADS)
                    .thread_name(|i| format!("debuginfod-{i}"))
                    .build()
                    .ok()
            })
            .as_ref()
    }

    /// The counters.
    pub fn counters(&self) -> &DebuginfodCounters {
        &self.counters
    }

    /// The configuration.
    pub fn config(&self) -> &DebuginfodConfig {
        &self.config
    }

    /// One line per server that failed requests: how many, and the first one's error.
    pub fn failures(&self) -> Vec<String> {
        let f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        f.iter()
            .map(|(url, n, first)| {
                let s = if *n == 1 { "" } else { "s" };
                format!("debuginfod {url}: {n} request{s} failed, the first: {first}")
            })
            .collect()
    }

    fn failed(&self, url: &str, why: &str) {
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        match f.iter_mut().find(|(u, ..)| u == url) {
            Some(e) => e.1 += 1,
            None => f.push((url.to_string(), 1, why.to_string())),
        }
    }

    /// The HTTP agent, made once: timeouts, redirects, the CA store.
    fn agent(&self) -> &Agent {
        self.agent.get_or_init(|| new_agent(self.config.timeout))
    }

    /// The file of build id `id` of `kind` (`debuginfo` or `executable`): from the cache, else
    /// from the first server that has it, checked by `check` (the file's build id), cached.
    pub fn fetch(
        &self,
        id: &[u8],
        kind: &str,
        check: &(dyn Fn(&Path) -> bool + Sync),
    ) -> Result<PathBuf, Miss> {
        if id.len() < 2 {
            return Err(Miss::NotFound);
        }
        let hex = super::hex(id);
        let dir = self.config.cache.join(&hex);
        let target = dir.join(kind);
        if let Ok(m) = std::fs::metadata(&target) {
            if m.len() > 0 {
                self.counters.cache_hits.add(1);
                return Ok(target);
            }
            let age = m
                .modified()
                .ok()
                .and_then(|t| SystemTime::now().duration_since(t).ok())
                .unwrap_or_default();
            if age.as_secs() <= self.miss_secs() {
                self.counters.cache_hits.add(1);
                return Err(Miss::NotFound);
            }
            let _ = std::fs::remove_file(&target);
        }
        if std::fs::create_dir_all(&dir).is_err() {
            return Err(Miss::Failed(format!("cannot create {}", dir.display())));
        }
        let (tx, rx) = mpsc::channel::<(String, Result<PathBuf, Answer>)>();
        let mut asked = 0;
        for url in &self.config.urls {
            let Some(base) = base_url(url) else {
                self.counters.urls_unsupported.add(1);
                continue;
            };
            asked += 1;
            self.counters.requests.add(1);
            let full = format!("{base}/buildid/{hex}/{kind}");
            let tmp = dir.join(format!(
                ".{kind}.perfpipe-{}-{}",
                std::process::id(),
                TMP_SEQ.fetch_add(1, Ordering::Relaxed)
            ));
            let max = self.config.max_size;
            let agent = self.agent().clone();
            let (tx, url) = (tx.clone(), url.clone());
            std::thread::spawn(move || {
                let r = std::fs::File::create(&tmp)
                    .map_err(|e| Answer::Failed(format!("{}: {e}", tmp.display()), false))
                    .and_then(|mut f| get(&agent, &full, max, &mut f))
                    .map(|_| tmp.clone());
                if r.is_err() {
                    let _ = std::fs::remove_file(&tmp);
                }
                let _ = tx.send((url, r));
            });
        }
        drop(tx);
        let mut found = None;
        let mut all_404 = asked > 0;
        let mut why = String::from("no http:// or https:// URL in DEBUGINFOD_URLS");
        for (url, r) in rx.iter() {
            match r {
                Ok(tmp) if found.is_none() => {
                    if check(&tmp) {
                        found = Some(tmp);
                    } else {
                        self.counters.rejected.add(1);
                        all_404 = false;
                        why = "a server sent another build id's file".into();
                        let _ = std::fs::remove_file(&tmp);
                    }
                }
                Ok(tmp) => {
                    let _ = std::fs::remove_file(&tmp);
                }
                Err(Answer::NotFound) => {}
                Err(Answer::Failed(e, tls)) => {
                    self.counters.errors.add(1);
                    if tls {
                        self.counters.tls_errors.add(1);
                    }
                    self.failed(&url, &e);
                    all_404 = false;
                    why = e;
                }
            }
            if found.is_some() {
                // The others finish on their own (bounded by the timeout) and remove their files.
                break;
            }
        }
        if let Some(tmp) = found {
            use std::os::unix::fs::PermissionsExt;
            let len = std::fs::metadata(&tmp).map(|m| m.len()).unwrap_or(0);
            let _ = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o400));
            if std::fs::rename(&tmp, &target).is_err() {
                let _ = std::fs::remove_file(&tmp);
                return Err(Miss::Failed(format!("cannot write {}", target.display())));
            }
            self.counters.downloaded.add(1);
            self.counters.bytes.add(len);
            return Ok(target);
        }
        if all_404 {
            self.counters.misses.add(1);
            let _ = std::fs::File::create(&target);
            return Err(Miss::NotFound);
        }
        Err(Miss::Failed(why))
    }

    fn miss_secs(&self) -> u64 {
        std::fs::read_to_string(self.config.cache.join("cache_miss_s"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(DEFAULT_MISS_SECS)
    }
}

/// An agent of [`agent_config`].
#[cfg(feature = "debuginfod")]
fn new_agent(timeout: Duration) -> Agent {
    agent_config(timeout).into()
}

/// No agent: the build has no HTTP transport ([`get`] fails naming the feature).
#[cfg(not(feature = "debuginfod"))]
fn new_agent(_: Duration) -> Agent {
    NoAgent
}

/// The agent's configuration: `timeout` for every step, redirects, the CA store (the fuzz target
/// `debuginfod` makes its agent of it too, with a transport that plays the server's answer).
#[cfg(feature = "debuginfod")]
pub(crate) fn agent_config(timeout: Duration) -> ureq::config::Config {
    let t = Some(timeout);
    ureq::Agent::config_builder()
        .timeout_resolve(t)
        .timeout_connect(t)
        .timeout_per_read(t)
        .timeout_per_write(t)
        .max_redirects(MAX_REDIRECTS)
        .http_status_as_error(false)
        .user_agent(concat!("perfpipe/", env!("CARGO_PKG_VERSION")))
        .tls_config(tls_config())
        .build()
}

/// A server's URL without its trailing `/`, when it is `http://` or `https://` (elfutils' client
/// also takes `file://`, which perfpipe does not).
fn base_url(url: &str) -> Option<&str> {
    let scheme = ["http://", "https://"].into_iter().find(|p| {
        url.get(..p.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(p))
    })?;
    let base = url.trim_end_matches('/');
    (base.len() > scheme.len()).then_some(base)
}

/// The CA store: the system's (`rustls-native-certs`: `SSL_CERT_FILE`, `SSL_CERT_DIR`, else the
/// distribution's bundle), webpki's roots only when that has none.
#[cfg(feature = "https")]
pub fn tls_config() -> ureq::tls::TlsConfig {
    let native = rustls_native_certs::load_native_certs();
    let certs: Vec<ureq::tls::Certificate<'static>> = native
        .certs
        .iter()
        .map(|c| ureq::tls::Certificate::from_der(c.as_ref()).to_owned())
        .collect();
    let roots = if certs.is_empty() {
        ureq::tls::RootCerts::WebPki
    } else {
        ureq::tls::RootCerts::new_with_certs(&certs)
    };
    ureq::tls::TlsConfig::builder().root_certs(roots).build()
}

/// What one request gave, besides a file.
#[derive(Debug)]
#[cfg_attr(not(feature = "debuginfod"), allow(dead_code))]
pub(crate) enum Answer {
    NotFound,
    /// Why, and whether it was TLS (the certificate or the handshake).
    Failed(String, bool),
}

/// `GET url` into `out` in a build without the `debuginfod` feature: a failure that names it.
#[cfg(not(feature = "debuginfod"))]
pub(crate) fn get(_: &Agent, url: &str, _: u64, _: &mut impl Write) -> Result<u64, Answer> {
    Err(Answer::Failed(
        format!("{url}: this perfpipe is built without the cargo feature `debuginfod`"),
        false,
    ))
}

/// `GET url` into `out`: at most `max` bytes.
///
/// ureq 3.5 (its latest release) panics on some broken answers: a redirect whose chunked body
/// ends at `0\r\n` with the connection (`run.rs`, "remote to have signaled redirect", found by
/// the `debuginfod` fuzz target). Such a panic fails this request, as any bad answer does (counted
/// in `errors`), instead of ending the thread that asked and leaving its server unanswered (which
/// cached a miss when it was the only one): `regression::r40_ureq_redirect_cut_after_last_chunk`.
#[cfg(feature = "debuginfod")]
pub(crate) fn get(
    agent: &ureq::Agent,
    url: &str,
    max: u64,
    out: &mut impl Write,
) -> Result<u64, Answer> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        get_once(agent, url, max, out)
    }))
    .unwrap_or_else(|p| {
        let why = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(Answer::Failed(
            format!("{url}: the HTTP client failed on the answer ({why})"),
            false,
        ))
    })
}

/// [`get`], which may panic inside ureq.
#[cfg(feature = "debuginfod")]
fn get_once(agent: &ureq::Agent, url: &str, max: u64, out: &mut impl Write) -> Result<u64, Answer> {
    let fail = |e: &dyn std::fmt::Display| Answer::Failed(format!("{url}: {e}"), false);
    let r = agent
        .get(url)
        .header("X-DEBUGINFOD-MAXSIZE", max.to_string())
        .header("Accept-Encoding", "identity")
        .call()
        .map_err(|e| Answer::Failed(format!("{url}: {e}"), is_tls(&e)))?;
    match r.status().as_u16() {
        200 => {}
        404 => return Err(Answer::NotFound),
        406 => return Err(fail(&"larger than the size cap (406)")),
        c => return Err(fail(&format!("HTTP status {c}"))),
    }
    let length = r
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if length.is_some_and(|l| l > max) {
        return Err(fail(&"larger than the size cap"));
    }
    // ureq ends a body at its Content-Length (a shorter one is an error: closed mid-body) or
    // chunked end, and fails past `limit`.
    let mut body = r.into_body().into_with_config().limit(max).reader();
    let n = std::io::copy(&mut body, out).map_err(|e| {
        let big = e
            .get_ref()
            .and_then(|i| i.downcast_ref::<ureq::Error>())
            .is_some_and(|u| matches!(u, ureq::Error::BodyExceedsLimit(_)));
        if big {
            fail(&"larger than the size cap")
        } else {
            fail(&format!("reading the body: {e}"))
        }
    })?;
    out.flush().map_err(|e| fail(&format!("writing: {e}")))?;
    Ok(n)
}

/// Whether a request failed in TLS: the certificate, the handshake (rustls' error, which ureq
/// passes up inside an I/O error).
#[cfg(feature = "debuginfod")]
fn is_tls(e: &ureq::Error) -> bool {
    match e {
        ureq::Error::Tls(_) | ureq::Error::Rustls(_) => true,
        ureq::Error::Io(io) => io.get_ref().is_some_and(|i| i.is::<rustls::Error>()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_http_or_https() {
        assert_eq!(
            base_url("http://127.0.0.1:8002"),
            Some("http://127.0.0.1:8002")
        );
        assert_eq!(
            base_url("https://example.invalid/debuginfod/"),
            Some("https://example.invalid/debuginfod")
        );
        assert_eq!(
            base_url("HTTPS://example.invalid"),
            Some("HTTPS://example.invalid")
        );
        assert_eq!(base_url("file:///srv"), None);
        assert_eq!(base_url("https://"), None);
        assert_eq!(base_url("ftp://example.invalid"), None);
    }

    #[test]
    fn a_build_without_the_feature_refuses_servers_naming_it() {
        assert_eq!(check_option(None), Ok(()));
        assert_eq!(check_option(Some("no")), Ok(()));
        let r = check_option(Some("http://127.0.0.1:1"));
        if cfg!(feature = "debuginfod") {
            assert_eq!(r, Ok(()));
        } else {
            assert_eq!(
                r.unwrap_err(),
                "debuginfod=http://127.0.0.1:1: this perfpipe is built without the cargo \
                 feature `debuginfod`"
            );
            assert_eq!(DebuginfodConfig::from_env(), None);
        }
    }
}

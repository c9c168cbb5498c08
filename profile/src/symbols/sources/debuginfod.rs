//! A debuginfod client: `DEBUGINFOD_URLS` (space-separated, as elfutils reads it),
//! `GET URL/buildid/ID/debuginfo` (then `/executable`), every URL at once, the first good answer
//! kept; files cached in the elfutils client's layout (`ROOT/ID/debuginfo`, `ROOT/ID/executable`,
//! an empty file for a miss, honoured for `cache_miss_s` seconds) so perf, gdb and perfpipe share
//! downloads. A downloaded file is kept only when its build id is the one asked for.
//!
//! HTTP is plain HTTP/1.1 over `std::net::TcpStream` (about a hundred lines, no crate): the
//! client needs one GET with a connect timeout, a per-read timeout (`DEBUGINFOD_TIMEOUT`: a
//! server silent that long fails the request, as elfutils' low-speed limit does), a size cap and
//! streaming into the cache file, which a crate would add nothing to; `https://` URLs need TLS,
//! which this build does not have: they are skipped and counted (`debuginfod_urls_unsupported`).
//!
//! Each failure is counted and ends only its request: a server that never answers (the read
//! timeout), one that closes mid-body (a short body), an answer larger than the cap, a file of
//! another build id. Only a miss (404 from every server) is cached, as elfutils caches only
//! `-ENOENT`.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use perfpipe_core::Counter;

/// The default of `DEBUGINFOD_TIMEOUT` (elfutils' 90 s).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(90);
/// The default size cap of one file (`DEBUGINFOD_MAXSIZE` overrides it).
pub const DEFAULT_MAX_SIZE: u64 = 2 << 30;
/// How long a cached miss holds when the cache has no `cache_miss_s` file (elfutils' 600 s).
pub const DEFAULT_MISS_SECS: u64 = 600;
/// Most bytes of an answer's status line and headers.
const MAX_HEAD: usize = 64 << 10;

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
    /// `DEBUGINFOD_URLS` is unset or empty.
    pub fn from_env() -> Option<DebuginfodConfig> {
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
    /// URLs this build cannot ask (`https://`).
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
        let (tx, rx) = mpsc::channel::<Result<PathBuf, Answer>>();
        let mut asked = 0;
        for url in &self.config.urls {
            let Some(u) = Url::parse(url) else {
                self.counters.urls_unsupported.add(1);
                continue;
            };
            asked += 1;
            self.counters.requests.add(1);
            let path = format!("{}buildid/{hex}/{kind}", u.path);
            let tmp = dir.join(format!(
                ".{kind}.perfpipe-{}-{}",
                std::process::id(),
                TMP_SEQ.fetch_add(1, Ordering::Relaxed)
            ));
            let (timeout, max) = (self.config.timeout, self.config.max_size);
            let tx = tx.clone();
            std::thread::spawn(move || {
                let r = std::fs::File::create(&tmp)
                    .map_err(|e| Answer::Failed(e.to_string()))
                    .and_then(|mut f| get(&u, &path, timeout, max, &mut f))
                    .map(|_| tmp.clone());
                if r.is_err() {
                    let _ = std::fs::remove_file(&tmp);
                }
                let _ = tx.send(r);
            });
        }
        drop(tx);
        let mut found = None;
        let mut all_404 = asked > 0;
        let mut why = String::from("no http:// URL in DEBUGINFOD_URLS");
        for r in rx.iter() {
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
                Err(Answer::Failed(e)) => {
                    self.counters.errors.add(1);
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

/// An `http://` URL: where to connect and the path prefix (ending in `/`).
#[derive(Debug, Clone)]
struct Url {
    host: String,
    port: u16,
    path: String,
}

impl Url {
    fn parse(url: &str) -> Option<Url> {
        let rest = url.strip_prefix("http://")?;
        let (auth, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = match auth.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || auth.starts_with('[') => {
                (h.to_string(), p.parse().ok()?)
            }
            _ => (auth.to_string(), 80),
        };
        let mut path = path.to_string();
        if !path.ends_with('/') {
            path.push('/');
        }
        (!host.is_empty()).then_some(Url { host, port, path })
    }
}

/// What one request gave, besides a file.
#[derive(Debug)]
enum Answer {
    NotFound,
    Failed(String),
}

/// `GET path` from `u` into `out`; at most `max` bytes, each read within `timeout`.
fn get(
    u: &Url,
    path: &str,
    timeout: Duration,
    max: u64,
    out: &mut impl Write,
) -> Result<u64, Answer> {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        Answer::Failed(format!("http://{}:{}{path}: {what}: {e}", u.host, u.port))
    };
    let host = u.host.trim_start_matches('[').trim_end_matches(']');
    let addrs = (host, u.port)
        .to_socket_addrs()
        .map_err(|e| fail("resolving", &e))?;
    let mut stream = None;
    let mut last = String::from("no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = e.to_string(),
        }
    }
    let mut s = stream.ok_or_else(|| fail("connecting", &last))?;
    s.set_read_timeout(Some(timeout))
        .and_then(|()| s.set_write_timeout(Some(timeout)))
        .map_err(|e| fail("socket", &e))?;
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {}:{}\r\nUser-Agent: perfpipe/{}\r\nX-DEBUGINFOD-MAXSIZE: {max}\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n",
        u.host,
        u.port,
        env!("CARGO_PKG_VERSION")
    );
    s.write_all(req.as_bytes())
        .map_err(|e| fail("sending", &e))?;
    // The head, byte runs until the blank line; what follows it is the body's start.
    let mut head = Vec::with_capacity(1024);
    let mut buf = vec![0u8; 64 << 10];
    let body_start;
    loop {
        let n = s
            .read(&mut buf)
            .map_err(|e| fail("reading the answer", &e))?;
        if n == 0 {
            return Err(fail("reading the answer", &"closed before the headers"));
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            body_start = i + 4;
            break;
        }
        if head.len() > MAX_HEAD {
            return Err(fail("reading the answer", &"headers too long"));
        }
    }
    let text = String::from_utf8_lossy(&head[..body_start]).into_owned();
    let mut lines = text.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| fail("reading the answer", &"no HTTP status line"))?;
    match status {
        200 => {}
        404 => return Err(Answer::NotFound),
        406 => return Err(fail("answer", &"larger than the size cap (406)")),
        c => return Err(fail("answer", &format!("HTTP status {c}"))),
    }
    let mut length = None;
    let mut chunked = false;
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let v = v.trim();
        if k.eq_ignore_ascii_case("content-length") {
            length = Some(
                v.parse::<u64>()
                    .map_err(|_| fail("answer", &"bad Content-Length"))?,
            );
        } else if k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked") {
            chunked = true;
        }
    }
    if length.is_some_and(|l| l > max) {
        return Err(fail("answer", &"larger than the size cap"));
    }
    let rest = head[body_start..].to_vec();
    let mut body = std::io::Read::chain(&rest[..], &mut s);
    let written = if chunked {
        copy_chunked(&mut body, out, max).map_err(|e| fail("reading the body", &e))?
    } else {
        let want = length.unwrap_or(max + 1);
        let n = std::io::copy(&mut (&mut body).take(want), out)
            .map_err(|e| fail("reading the body", &e))?;
        match length {
            Some(l) if n < l => {
                return Err(fail(
                    "reading the body",
                    &format!("closed after {n} of {l} bytes"),
                ))
            }
            None if n > max => return Err(fail("answer", &"larger than the size cap")),
            _ => n,
        }
    };
    out.flush().map_err(|e| fail("writing", &e))?;
    Ok(written)
}

/// Copies a chunked body (RFC 9112 §7.1) to `out`, at most `max` bytes.
fn copy_chunked(r: &mut impl Read, out: &mut impl Write, max: u64) -> std::io::Result<u64> {
    let mut total = 0u64;
    loop {
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while !line.ends_with(b"\r\n") {
            if r.read(&mut b)? == 0 {
                return Err(std::io::Error::other("closed inside a chunk header"));
            }
            line.push(b[0]);
            if line.len() > 1024 {
                return Err(std::io::Error::other("chunk header too long"));
            }
        }
        let size_text = String::from_utf8_lossy(&line[..line.len() - 2]);
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = u64::from_str_radix(size_text, 16)
            .map_err(|_| std::io::Error::other("bad chunk size"))?;
        if size == 0 {
            return Ok(total);
        }
        total += size;
        if total > max {
            return Err(std::io::Error::other("larger than the size cap"));
        }
        let n = std::io::copy(&mut r.take(size), out)?;
        if n < size {
            return Err(std::io::Error::other("closed inside a chunk"));
        }
        let mut crlf = [0u8; 2];
        r.read_exact(&mut crlf)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_as_elfutils_takes_them() {
        let u = Url::parse("http://127.0.0.1:8002").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("127.0.0.1", 8002, "/")
        );
        let u = Url::parse("http://example.invalid/debuginfod/").unwrap();
        assert_eq!((u.port, u.path.as_str()), (80, "/debuginfod/"));
        assert!(Url::parse("https://example.invalid").is_none());
        assert!(Url::parse("file:///srv").is_none());
    }

    #[test]
    fn chunked_bodies_are_joined_and_capped() {
        let body = b"4\r\nabcd\r\n3;x=y\r\nefg\r\n0\r\n\r\n";
        let mut out = Vec::new();
        assert_eq!(copy_chunked(&mut &body[..], &mut out, 100).unwrap(), 7);
        assert_eq!(out, b"abcdefg");
        assert!(copy_chunked(&mut &body[..], &mut Vec::new(), 5).is_err());
        assert!(copy_chunked(&mut &b"4\r\nab"[..], &mut Vec::new(), 100).is_err());
    }
}

//! benches/http_clients.sh's `rustls` candidate: fetches URL N times into OUT (`f-rustls URL OUT N`).
#[path = "../../common.rs"]
mod common;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;
fn get(
    s: &mut (impl Read + Write),
    auth: &str,
    path: &str,
    out: &mut std::fs::File,
) -> Result<u64, String> {
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {auth}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut all = Vec::new();
    match s.read_to_end(&mut all) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !all.is_empty() => {}
        Err(e) => return Err(e.to_string()),
    }
    let i = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no head")?
        + 4;
    if !all.starts_with(b"HTTP/1.1 200") {
        return Err("status".into());
    }
    out.write_all(&all[i..]).map_err(|e| e.to_string())?;
    Ok((all.len() - i) as u64)
}
fn config() -> Arc<rustls::ClientConfig> {
    static C: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
    C.get_or_init(|| {
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(c);
        }
        #[allow(deprecated)] // ring stays rustls' provider here, as in ureq.
        let p = Arc::new(rustls::crypto::ring::default_provider());
        Arc::new(
            rustls::ClientConfig::builder_with_provider(p)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth(),
        )
    })
    .clone()
}
fn fetch(url: &str, out: &mut std::fs::File) -> Result<u64, String> {
    let (tls, rest) = match url.strip_prefix("https://") {
        Some(r) => (true, r),
        None => (false, url.strip_prefix("http://").ok_or("scheme")?),
    };
    let (auth, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (host, port) = auth.rsplit_once(':').unwrap();
    let addr: std::net::SocketAddr = format!(
        "{}:{port}",
        if host == "localhost" {
            "127.0.0.1"
        } else {
            host
        }
    )
    .parse()
    .map_err(|e| format!("{e}"))?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    if !tls {
        return get(&mut s, auth, path, out);
    }
    let name =
        rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
    let c = rustls::ClientConnection::new(config(), name).map_err(|e| e.to_string())?;
    let mut t = rustls::StreamOwned::new(c, s);
    get(&mut t, auth, path, out)
}
fn main() {
    common::drive(&fetch)
}

//! benches/http_clients.sh's `std` candidate: fetches URL N times into OUT (`f-std URL OUT N`).
#[path = "../../common.rs"]
mod common;
use std::io::{Read, Write};
use std::time::Duration;
fn plain(url: &str, out: &mut std::fs::File) -> Result<u64, String> {
    let rest = url.strip_prefix("http://").ok_or("not http")?;
    let (auth, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let addr: std::net::SocketAddr = auth.parse().map_err(|e| format!("{e}"))?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    get(&mut s, auth, path, out)
}
pub fn get(
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
fn main() {
    common::drive(&plain)
}

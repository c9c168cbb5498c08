//! benches/http_clients.sh's `attohttpc` candidate: fetches URL N times into OUT (`f-attohttpc URL OUT N`).
#[path = "../../common.rs"]
mod common;
use std::time::Duration;
fn fetch(url: &str, out: &mut std::fs::File) -> Result<u64, String> {
    // attohttpc 0.31's tls-rustls-native-roots-ring feature compiles its native-roots loading
    // out (it is under cfg(feature = "tls-rustls-native-roots")): the roots are added here.
    let mut b = attohttpc::get(url);
    for c in rustls_native_certs::load_native_certs().certs {
        b = b.add_root_certificate(c);
    }
    let r = b
        .connect_timeout(Duration::from_secs(10))
        .read_timeout(Duration::from_secs(10))
        .max_redirections(8)
        .send()
        .map_err(|e| e.to_string())?;
    if !r.is_success() {
        return Err(format!("{}", r.status()));
    }
    let (_, _, mut body) = r.split();
    std::io::copy(&mut body, out).map_err(|e| e.to_string())
}
fn main() {
    common::drive(&fetch)
}

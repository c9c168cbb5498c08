//! benches/http_clients.sh's `ureq` candidate: fetches URL N times into OUT (`f-ureq URL OUT N`).
#[path = "../../common.rs"]
mod common;
use std::time::Duration;
fn agent() -> &'static ureq::Agent {
    static A: std::sync::OnceLock<ureq::Agent> = std::sync::OnceLock::new();
    A.get_or_init(|| {
        let certs: Vec<_> = rustls_native_certs::load_native_certs()
            .certs
            .into_iter()
            .map(|c| ureq::tls::Certificate::from_der(c.as_ref()).to_owned())
            .collect();
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::new_with_certs(&certs))
            .build();
        // 404 is an answer, not an error.
        ureq::Agent::config_builder()
            .timeout_connect(Some(Duration::from_secs(10)))
            .timeout_per_read(Some(Duration::from_secs(10)))
            .max_redirects(8)
            .http_status_as_error(false)
            .tls_config(tls)
            .build()
            .into()
    })
}
fn fetch(url: &str, out: &mut std::fs::File) -> Result<u64, String> {
    let r = agent().get(url).call().map_err(|e| e.to_string())?;
    if r.status() != 200 {
        return Err(format!("{}", r.status()));
    }
    let mut body = r.into_body().into_with_config().limit(2 << 30).reader();
    std::io::copy(&mut body, out).map_err(|e| e.to_string())
}
fn main() {
    common::drive(&fetch)
}

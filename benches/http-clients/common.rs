//! The driver the candidates share: times N fetches, prints the median and the minimum.
// Shared driver: fetch URL N times into OUT, print per-fetch median and min in ms.
pub fn drive(fetch: &dyn Fn(&str, &mut std::fs::File) -> Result<u64, String>) {
    let a: Vec<String> = std::env::args().collect();
    let (url, out, n) = (&a[1], &a[2], a[3].parse::<usize>().unwrap());
    let mut t = Vec::new();
    let mut bytes = 0;
    for _ in 0..n {
        let s = std::time::Instant::now();
        let mut f = std::fs::File::create(out).unwrap();
        match fetch(url, &mut f) {
            Ok(b) => bytes = b,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(1)
            }
        }
        t.push(s.elapsed().as_secs_f64() * 1e3);
    }
    t.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "bytes {bytes} median_ms {:.3} min_ms {:.3}",
        t[t.len() / 2],
        t[0]
    );
}

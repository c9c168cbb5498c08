// Shared by both variants (`include!`d after `type Request = …;`): encodes the request in
// `argv[1]` `argv[2]` times (default 50) and prints the median time of one encode.
fn main() {
    use prost::Message;
    let path = std::env::args().nth(1).expect("usage: VARIANT REQUEST.otlp.pb [ROUNDS]");
    let rounds: usize = std::env::args().nth(2).map_or(50, |n| n.parse().expect("ROUNDS"));
    let bytes = std::fs::read(&path).expect("REQUEST");
    let request = Request::decode(&bytes[..]).expect("an ExportProfilesServiceRequest");
    let mut times = Vec::with_capacity(rounds);
    let mut len = 0;
    for _ in 0..rounds {
        let t = std::time::Instant::now();
        len = std::hint::black_box(request.encode_to_vec()).len();
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    assert_eq!(len, bytes.len(), "re-encoded to another size");
    println!("{:.2} ms {:.0} MB/s {len} bytes", median * 1e3, len as f64 / median / 1e6);
}

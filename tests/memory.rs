//! Backpressure and memory (issue 7): behind a reader throttled to 4 MB/s the process's peak RSS
//! stays under the bound the runtime states, however long the input; with a stalled producer or a
//! stalled consumer nothing spins.
//!
//! **The bound.** At most [`Settings::max_batches`]`(stages)` batches exist at once — one in each
//! queue slot (`(stages − 1) × queue`), one in the hands of each thread (`stages`) and the idle
//! pool (`stages + queue`) — each of `batch-size` bytes plus `read`'s [`HEADROOM`] (64 KiB). With
//! the defaults (256 KiB, queue 4) the three-thread passthrough holds at most 18 × 320 KiB =
//! 5.6 MiB of batches; RSS is that plus a fixed [`ALLOWANCE`] for the binary, libc, thread stacks
//! and allocator slack (a run with 4 KiB batches peaks near 7 MiB in total).

use std::io::{Read as _, Write as _};
use std::time::{Duration, Instant};

use perfpipe_core::Settings;
use perfpipe_stream::read::HEADROOM;

use crate::util::*;

/// RSS beyond the batch buffers: code, libc, stacks, allocator slack, metrics.
const ALLOWANCE: u64 = 16 << 20;

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &s[s.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of stat(5); `rest` starts at field 3.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// Writes the callgraph fixture then its records `times` more times; returns the bytes written.
fn feed(mut sin: std::process::ChildStdin, times: usize) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let input = fixture_bytes("callgraph.pipe.data");
        sin.write_all(&input).unwrap();
        let mut n = input.len() as u64;
        for _ in 0..times {
            sin.write_all(&input[16..]).unwrap();
            n += (input.len() - 16) as u64;
        }
        n
    })
}

pipetest!(
    /// A reader throttled to 4 MB/s for 3 s cannot make perfpipe hold more than the bound, while the
    /// producer has ~64 MB ready to send; then everything is read and nothing was lost.
    rss_is_bounded_behind_a_throttled_reader, |_dir| {
    let configs: [(&[&str], usize, usize, usize); 3] = [
        (&[], 256 << 10, 4, 3),
        (&["--batch-size", "1M", "--queue", "2"], 1 << 20, 2, 3),
        (&["--decompress", "--batch-size", "128K"], 128 << 10, 4, 4),
    ];
    for (args, batch, queue, stages) in configs {
        let settings = Settings {
            batch_bytes: batch,
            queue_capacity: queue,
            ..Settings::default()
        };
        let batches = settings.max_batches(stages) as u64;
        let bound = batches * (batch + HEADROOM) as u64 + ALLOWANCE;
        let mut child = spawn(args);
        let feeder = feed(child.stdin.take().unwrap(), 420); // ~64 MB
        let mut out = child.stdout.take().unwrap();
        let mut buf = vec![0u8; 64 << 10];
        let (t0, rate) = (Instant::now(), 4e6);
        let mut got = 0u64;
        while t0.elapsed() < Duration::from_secs(3) {
            let n = out.read(&mut buf).unwrap();
            assert!(n > 0, "{args:?}: output ended early");
            got += n as u64;
            let due = Duration::from_secs_f64(got as f64 / rate);
            if let Some(wait) = due.checked_sub(t0.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        let peak = vm_hwm(child.id());
        // The rest, at full speed: nothing is lost.
        let mut rest = Vec::new();
        out.read_to_end(&mut rest).unwrap();
        got += rest.len() as u64;
        let sent = feeder.join().unwrap();
        let status = child.wait().unwrap();
        assert!(status.success(), "{args:?}");
        assert_eq!(got, sent, "{args:?}: bytes lost");
        eprintln!(
            "{args:?}: peak RSS {:.1} MiB, bound {:.1} MiB ({batches} batches of {} KiB + {} MiB)",
            peak as f64 / 1048576.0,
            bound as f64 / 1048576.0,
            (batch + HEADROOM) >> 10,
            ALLOWANCE >> 20
        );
        assert!(
            peak <= bound,
            "{args:?}: peak RSS {peak} over the bound {bound}"
        );
        // The input is far larger than the bound, so buffering it would have shown.
        assert!(
            sent > 2 * bound,
            "{args:?}: input too small to show a bound"
        );
    }
});

/// Waits `secs` and returns the CPU ticks the process used meanwhile.
fn ticks_over(pid: u32, secs: u64) -> u64 {
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(secs));
    cpu_ticks(pid) - before
}

pipetest!(
    /// A producer that stalls (the pipe open, nothing written) and a consumer that stalls (not
    /// reading): perfpipe blocks in `read`/`write`/`recv`, using no CPU (≤ 2 ticks, 20 ms, in 2 s).
    stalls_do_not_spin, |_dir| {
    let input = fixture_bytes("callgraph.pipe.data");
    for args in [&[][..], &["--stats", "--decompress", "--buildid-all"]] {
        // Stalled producer: part of the stream, then silence with the pipe open.
        let mut child = spawn(args);
        let mut sin = child.stdin.take().unwrap();
        sin.write_all(&input[..input.len() / 2]).unwrap();
        let out = std::thread::spawn({
            let mut o = child.stdout.take().unwrap();
            move || {
                let mut v = Vec::new();
                o.read_to_end(&mut v).unwrap();
                v
            }
        });
        std::thread::sleep(Duration::from_millis(500));
        let idle = ticks_over(child.id(), 2);
        sin.write_all(&input[input.len() / 2..]).unwrap();
        drop(sin);
        assert!(child.wait().unwrap().success(), "{args:?}");
        let out = out.join().unwrap();
        assert!(!out.is_empty());
        assert!(
            idle <= 2,
            "{args:?}: {idle} ticks of CPU while the producer stalled"
        );

        // Stalled consumer: plenty of input, nobody reads the output.
        let mut child = spawn(args);
        let feeder = std::thread::spawn({
            let mut sin = child.stdin.take().unwrap();
            let input = input.clone();
            move || {
                let _ = sin.write_all(&input);
                for _ in 0..100 {
                    if sin.write_all(&input[16..]).is_err() {
                        break;
                    }
                }
            }
        });
        std::thread::sleep(Duration::from_millis(1000));
        let idle = ticks_over(child.id(), 2);
        let mut o = child.stdout.take().unwrap();
        let mut all = Vec::new();
        o.read_to_end(&mut all).unwrap();
        feeder.join().unwrap();
        assert!(child.wait().unwrap().success(), "{args:?}");
        assert!(all.len() > 100 * (input.len() - 16));
        assert!(
            idle <= 2,
            "{args:?}: {idle} ticks of CPU while the consumer stalled"
        );
    }
});

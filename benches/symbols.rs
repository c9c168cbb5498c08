//! `Symbols` (the symbolize stage's engine) measured and checked against perf, on real files.
//!
//! Meant to show: table load time per dso, lookups per second, and agreement with `perf script`'s
//! names on the same addresses. Not a criterion bench: one run prints a table for
//! `docs/symbolization.md`.
//!
//! - `cargo bench -p perfpipe-profile --bench symbols -- load FILE...`: per file, the load time
//!   (median of 5, each in a fresh `Symbols`), the symbol count, and lookups/s over 1M addresses
//!   spread over the file (each address once: the sinks look each distinct address up once).
//! - `perf script -i REC -F ip,sym,dso --no-inline | cargo bench -p perfpipe-profile --bench
//!   symbols -- agree`: resolves every `ADDR SYM+OFF (DSO)` frame perf printed (user frames
//!   print the file offset, kernel frames the address) and counts agreement of name and offset;
//!   prints the first disagreements.

use std::collections::HashMap;
use std::io::BufRead;
use std::sync::Arc;
use std::time::Instant;

use perfpipe_profile::symbols::{DsoDesc, Query, Symbols, SymbolsConfig};
use perfpipe_stream::model::machine::DsoId;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    match args.first().map(String::as_str) {
        Some("load") => load(&args[1..]),
        Some("agree") => agree(),
        _ => eprintln!("usage: symbols load FILE... | symbols agree < perf-script-output"),
    }
}

fn desc(name: &str) -> DsoDesc<'_> {
    DsoDesc {
        name: name.as_bytes(),
        build_id: None,
        kernel: name.starts_with("[kernel") || name.ends_with("kallsyms"),
        pid: u32::MAX,
        inode: None,
    }
}

fn load(files: &[String]) {
    println!("| file | load ms (median of 5) | lookups/s (1M distinct) | resolved |");
    println!("|---|---|---|---|");
    for f in files {
        let mut times = Vec::new();
        let mut last = None;
        for _ in 0..5 {
            let s = Symbols::new(SymbolsConfig::default(), None);
            let t = Instant::now();
            s.prefetch(DsoId(0), desc(f));
            // With no pool, prefetch loads inline; a first lookup makes sure.
            let mut out = Vec::new();
            s.resolve(&query(f, 0), &mut out);
            times.push(t.elapsed().as_secs_f64() * 1e3);
            last = Some(s);
        }
        times.sort_by(f64::total_cmp);
        let s = last.expect("ran");
        let size = std::fs::metadata(f)
            .map(|m| m.len())
            .unwrap_or(1 << 20)
            .max(1);
        let kernel = desc(f).kernel;
        let n = 1_000_000u64;
        let base = if kernel { 0xffff_ffff_8100_0000 } else { 0 };
        let span = if kernel { 0x0200_0000 } else { size };
        let mut out = Vec::with_capacity(4);
        let mut named = 0u64;
        let t = Instant::now();
        for i in 0..n {
            out.clear();
            let a = base + (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % span);
            s.resolve(&query(f, a), &mut out);
            named += out.last().is_some_and(|r| r.name.is_some()) as u64;
        }
        let rate = n as f64 / t.elapsed().as_secs_f64();
        println!(
            "| {f} | {:.1} | {:.2}M | {:.0}% |",
            times[2],
            rate / 1e6,
            100.0 * named as f64 / n as f64
        );
    }
}

fn query(f: &str, a: u64) -> Query {
    Query {
        dso: Some(DsoId(0)),
        pid: u32::MAX,
        ip: a,
        rel: a,
        kernel: desc(f).kernel,
    }
}

fn agree() {
    let s = Symbols::new(SymbolsConfig::default(), None);
    let mut ids: HashMap<String, u32> = HashMap::new();
    let (mut same, mut total, mut shown) = (0u64, 0u64, 0);
    let mut seen = std::collections::HashSet::new();
    let t = Instant::now();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let l = line.trim();
        // ADDR SYM+0xOFF (DSO)  or  ADDR [unknown] (DSO)
        let Some((addr, rest)) = l.split_once(' ') else {
            continue;
        };
        let Ok(addr) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        // The dso is in the last parentheses that open with a path or a `[name]` (a symbol
        // may have parentheses, a dso may end in "(deleted)").
        let Some(open) = rest.rfind(" (/").max(rest.rfind(" ([")) else {
            continue;
        };
        let (sym, dso) = (&rest[..open], rest[open + 2..].trim_end_matches(')'));
        if !seen.insert((addr, dso.to_string())) {
            continue;
        }
        // perf's `[unknown]` dso: no map covers the address (our `dso: None`).
        let unmapped = dso == "[unknown]";
        let kernel = addr >= 0xffff_8000_0000_0000 && !unmapped;
        let next = ids.len() as u32;
        let id = *ids.entry(dso.to_string()).or_insert(next);
        let name: Arc<str> = Arc::from(dso);
        s.prefetch(
            DsoId(id),
            DsoDesc {
                name: name.as_bytes(),
                build_id: None,
                kernel,
                pid: u32::MAX,
                inode: None,
            },
        );
        let mut out = Vec::new();
        s.resolve(
            &Query {
                dso: (!unmapped).then_some(DsoId(id)),
                pid: u32::MAX,
                ip: addr,
                rel: addr,
                kernel,
            },
            &mut out,
        );
        let r = out.last().expect("one frame");
        let ours = match &r.name {
            Some(n) => format!("{n}+{:#x}", r.offset),
            None => "[unknown]".to_string(),
        };
        total += 1;
        if ours == sym && *r.dso == *dso {
            same += 1;
        } else if shown < 25 {
            shown += 1;
            println!("{addr:x}: perf {sym} ({dso})  ours {ours} ({})", r.dso);
        }
    }
    println!(
        "distinct frames {total}, same name+offset+dso {same} ({:.2}%), {:.2}s",
        100.0 * same as f64 / total.max(1) as f64,
        t.elapsed().as_secs_f64()
    );
}

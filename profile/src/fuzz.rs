//! Entry points for the fuzz targets (`fuzz/`, outside the workspace) into parsers of untrusted
//! input that are private to this crate: ELF symbol tables and DWARF as read from an archive
//! member, unwind sections as `unwind` turns them into framehop modules, and debuginfod answers
//! as the client reads them (played by an in-memory transport, no socket). Each drives the code
//! as the stages do and returns a checksum of what it read, so nothing is optimised away. Not an
//! API: no stage calls it.

use std::collections::VecDeque;
use std::fs::File;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use ureq::unversioned::resolver::{ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, LazyBuffers, NextTimeout, Transport,
};

use crate::symbols::sources::debuginfod;
use crate::symbols::sources::{hex, Archive, Cand, SourceCounters};
use crate::symbols::table::{Builder, Table};
use crate::symbols::{dwarf_context, elf};
use crate::unwind::{dso, walk_stack, Outcome, Process};

fn mix(acc: &mut u64, v: u64) {
    *acc = acc.rotate_left(5) ^ v.wrapping_mul(0x9e37_79b9_7f4a_7c15);
}

/// The addresses a table is probed at: each symbol range's start, middle and last byte, and the
/// byte past it (at most 64 ranges).
fn probes(t: &Table) -> Vec<u64> {
    let mut out = Vec::new();
    for (a, b) in t.ranges().take(64) {
        out.extend([a, a + b.saturating_sub(a) / 2, b.saturating_sub(1), b]);
    }
    out
}

fn look_up(t: &Table, acc: &mut u64) {
    for a in probes(t) {
        if let Some(h) = t.find(a) {
            mix(acc, h.start ^ h.name.len() as u64 ^ u64::from(h.module));
        }
    }
}

/// An ELF file's symbols as `elf::load` reads a candidate: what it has, `.symtab` (else
/// `.dynsym` and MiniDebugInfo), `name@plt`, the fixed-up table and lookups in it, then its DWARF
/// as `--inline` reads it. `file`: the same bytes as an archive member (positioned reads and
/// names read at lookup, as `--symbols ARCHIVE` reads them); else read from memory.
pub fn elf_symbols(data: &[u8], file: Option<Arc<File>>) -> u64 {
    let src = match file {
        Some(file) => {
            let len = file.metadata().map_or(0, |m| m.len());
            let member = Cand::Member {
                file,
                archive: Arc::from(Path::new("fuzz.tar")),
                offset: 0,
                len,
                name: "elf".into(),
            };
            match elf::Src::open_cand(&member) {
                Some(s) => s,
                None => return 0,
            }
        }
        None => elf::Src::Mem(data.to_vec()),
    };
    let Some(info) = elf::info(&src) else {
        return 0;
    };
    let mut acc = info.loads.len() as u64;
    let mut b = Builder::new(true);
    let dynsym = !info.symtab;
    mix(
        &mut acc,
        elf::symbols(&src, dynsym, &info.loads, &mut b).unwrap_or(0) as u64,
    );
    if dynsym && info.debugdata {
        if let Some(mini) = elf::debugdata(&src) {
            mix(
                &mut acc,
                elf::symbols(&mini, false, &info.loads, &mut b).unwrap_or(0) as u64,
            );
        }
    }
    if b.len() > 0 {
        elf::plt(&src, &mut b);
    }
    b.fixup(false);
    let table = b.finish(Vec::new());
    look_up(&table, &mut acc);
    if info.dwarf {
        if let Some(ctx) = dwarf_context(&src) {
            for a in probes(&table) {
                let Some(v) = elf::to_vaddr(&info.loads, a) else {
                    continue;
                };
                for n in ctx.frames(v) {
                    mix(&mut acc, n.len() as u64);
                }
            }
        }
    }
    acc
}

/// The bytes of the DWARF sections `--inline` would read of an ELF image, decompressed (for
/// `regression::r40_compressed_section_size_is_believed_up_to_zlib_ratio`).
pub fn dwarf_bytes(data: &[u8]) -> u64 {
    elf::dwarf_sections(&elf::Src::Mem(data.to_vec()))
        .map_or(0, |v| v.iter().map(|(_, d)| d.len() as u64).sum())
}

/// An ELF file's unwind sections as `unwind` reads a dso (`unwind::dso::parse`), mapped as each
/// PT_LOAD would be and made a framehop module, then a walk from addresses in each map over a
/// stack of `stack` (the walk as `unwind` does it, at most 64 frames).
pub fn unwind_info(data: &[u8], stack: &[u8]) -> u64 {
    let mut acc = 0;
    unwind_walks(data, stack, |bytes, o, n| {
        mix(&mut acc, bytes as u64 ^ o as u64 ^ n as u64)
    });
    acc
}

/// How [`unwind_info`]'s walks ended (for `regression::r40_framehop_cfa_below_8_is_a_partial_walk`).
pub fn unwind_outcomes(data: &[u8], stack: &[u8]) -> Vec<Outcome> {
    let mut out = Vec::new();
    unwind_walks(data, stack, |_, o, _| out.push(o));
    out
}

/// [`unwind_info`]'s walks, each told to `seen` (the unwind bytes held, the outcome, the frames).
fn unwind_walks(data: &[u8], stack: &[u8], mut seen: impl FnMut(usize, Outcome, usize)) {
    let Some(info) = dso::parse(data) else {
        return;
    };
    let mut p = Process::new();
    let mut maps = Vec::new();
    for (i, &(_, off, filesz)) in info.loads().iter().take(8).enumerate() {
        let start = 0x5555_0000_0000u64 + ((i as u64) << 32) + (off & 0xfff);
        let end = start.saturating_add(filesz.clamp(1, 1 << 30));
        p.add(&info, "fuzz", start & !0xfff, end, off & !0xfff);
        maps.push((start & !0xfff, end));
    }
    let sp = 0x7ffc_0000_0000u64;
    let mut cache = framehop::x86_64::CacheX86_64::new();
    let mut frames = Vec::new();
    for &(start, end) in &maps {
        for ip in [
            start,
            start + (end - start) / 3,
            start + (end - start) / 2,
            end - 1,
        ] {
            frames.clear();
            let (o, _) = walk_stack(
                &p,
                &crate::unwind::cfi::Regs::ip_sp_bp(ip, sp, sp + 16),
                stack,
                perfpipe_stream::format::Endian::Little,
                &mut cache,
                64,
                &mut frames,
            );
            seen(info.bytes(), o, frames.len());
        }
    }
}

/// An archive's bytes (a tar, or a `.tar.bz2` when they start with `BZh`, decompressed up to `max`
/// bytes: production's cap is [`crate::symbols::sources::ARCHIVE_MAX_BYTES`], the same check at a
/// size a fuzz input reaches) as `--symbols ARCHIVE` reads them, from memory: the listing (member names and links untrusted), then every lookup
/// the symbol engine makes of it: the build ids a dso path has, the `elf`/`debug`/`kallsyms`/
/// `vdso` files of a build id through its `.build-id/xx/rest` link, and the members' bytes.
/// Checks that no listed or served name leaves the archive and that every member served lies
/// inside the tar.
pub fn archive(data: &[u8], max: u64) -> u64 {
    let counters = SourceCounters::default();
    let Ok((a, tar)) = Archive::of_bytes(data, max, counters.clone()) else {
        return 0;
    };
    let escapes = |n: &str| n.starts_with('/') || n.split('/').any(|p| p == ".." || p.is_empty());
    let mut acc = 0;
    let names: Vec<String> = a.names().take(32).map(str::to_string).collect();
    for n in &names {
        assert!(!escapes(n), "{n} listed");
        if let Some(link) = n.strip_prefix(".build-id/") {
            let digits: String = link.chars().filter(|&c| c != '/').collect();
            let Some(id) = unhex_any(&digits) else {
                continue;
            };
            let h = hex(&id);
            let link = format!(".build-id/{}/{}", &h[..2], &h[2..]);
            for f in ["elf", "debug", "kallsyms", "vdso"] {
                if let Some((name, offset, len)) = a.member_at(&link, f) {
                    assert!(!escapes(&name), "{name} served");
                    let end = offset.checked_add(len).expect("a member's end fits");
                    let bytes = &tar[offset as usize..usize::try_from(end).expect("in memory")];
                    mix(&mut acc, bytes.iter().map(|&b| u64::from(b)).sum::<u64>());
                }
            }
        } else if let Some((dir, _)) = n.rsplit_once('/') {
            let dso = dir.rsplit_once('/').map_or(dir, |d| d.0);
            for id in a.ids_of(dso) {
                mix(&mut acc, id.len() as u64);
            }
        }
    }
    let c = &counters;
    mix(
        &mut acc,
        c.archive_entries_rejected.get() + c.archives_truncated.get(),
    );
    acc
}

/// Hex digits (at least two, an even count) as bytes.
fn unhex_any(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 || s.len() < 4 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The answers a connection plays, one per connection, each in pieces of the sizes `pieces`
/// cycles through.
#[derive(Debug, Default)]
struct Script {
    answers: VecDeque<Vec<u8>>,
    pieces: Vec<usize>,
}

#[derive(Debug, Clone, Default)]
struct Played(Arc<Mutex<Script>>);

impl<In: Transport> Connector<In> for Played {
    type Out = Answering;

    fn connect(
        &self,
        details: &ConnectionDetails<'_>,
        _: Option<In>,
    ) -> Result<Option<Answering>, ureq::Error> {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let Some(answer) = s.answers.pop_front() else {
            return Err(ureq::Error::ConnectionFailed);
        };
        // Buffers of a fuzz input's size, not the agent's 128 KiB (which malloc maps and the
        // kernel zeroes page by page on every connection, most of an execution's time): an
        // answer of at most `FUZZ_BUFFER` bytes fits whole in either, so ureq reads it alike.
        let c = details.config;
        Ok(Some(Answering {
            buffers: LazyBuffers::new(
                c.input_buffer_size().min(FUZZ_BUFFER),
                c.output_buffer_size().min(FUZZ_BUFFER),
            ),
            answer,
            at: 0,
            pieces: s.pieces.clone(),
            turn: 0,
        }))
    }
}

/// The size of a played connection's buffers: more than the largest input `fuzz/run.sh` gives
/// the `debuginfod` target.
pub const FUZZ_BUFFER: usize = 32 << 10;

/// A connection whose server says `answer` (and then closes).
#[derive(Debug)]
struct Answering {
    buffers: LazyBuffers,
    answer: Vec<u8>,
    at: usize,
    pieces: Vec<usize>,
    turn: usize,
}

impl Transport for Answering {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, _: usize, _: NextTimeout) -> Result<(), ureq::Error> {
        Ok(())
    }

    fn await_input(&mut self, _: NextTimeout) -> Result<bool, ureq::Error> {
        let piece = self.pieces.get(self.turn % self.pieces.len().max(1));
        self.turn += 1;
        let left = &self.answer[self.at..];
        let buf = self.buffers.input_append_buf();
        let n = left.len().min(buf.len()).min(*piece.unwrap_or(&usize::MAX));
        buf[..n].copy_from_slice(&left[..n]);
        self.buffers.input_appended(n);
        self.at += n;
        Ok(n > 0)
    }

    fn is_open(&mut self) -> bool {
        // Never reused: every request (a redirect's too) takes the next answer.
        false
    }
}

/// Every name is one address: the transport is played, nothing is resolved.
#[derive(Debug)]
struct Nowhere;

impl Resolver for Nowhere {
    fn resolve(
        &self,
        _: &ureq::http::Uri,
        _: &ureq::config::Config,
        _: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let mut a = self.empty();
        a.push(([127, 0, 0, 1], 80).into());
        Ok(a)
    }
}

/// Where answers separate in `debuginfod`'s input.
pub const ANSWER_SEP: &[u8] = b"\0--\0";

/// One debuginfod request (`GET /buildid/ID/debuginfo`) through the client's `get` with its
/// agent's configuration, the server's answers being `answers` (split at [`ANSWER_SEP`]: one per
/// connection, so a redirect reads the next), delivered in pieces of the sizes in `pieces`, the
/// size cap `max`. Returns the bytes kept and whether the request succeeded, missed (404) or
/// failed; checks that no more than `max` bytes were kept.
pub fn debuginfod(answers: &[u8], pieces: &[usize], max: u64) -> (usize, u8) {
    static AGENT: OnceLock<(ureq::Agent, Played)> = OnceLock::new();
    let (agent, played) = AGENT.get_or_init(|| {
        let played = Played::default();
        let config = debuginfod::agent_config(Duration::from_secs(5));
        let agent = ureq::Agent::with_parts(config, played.clone(), Nowhere);
        (agent, played)
    });
    {
        let mut s = played.0.lock().unwrap_or_else(|e| e.into_inner());
        s.answers = split(answers, ANSWER_SEP).map(<[u8]>::to_vec).collect();
        s.pieces = pieces.to_vec();
    }
    let mut out = Vec::new();
    let url =
        "http://debuginfod.invalid/buildid/0011223344556677889900112233445566778899/debuginfo";
    let r = debuginfod::get(agent, url, max, &mut out);
    assert!(
        out.len() as u64 <= max,
        "{} bytes kept past the cap {max}",
        out.len()
    );
    let kind = match r {
        Ok(n) => {
            assert_eq!(
                n,
                out.len() as u64,
                "the count returned is not the bytes kept"
            );
            0
        }
        Err(debuginfod::Answer::NotFound) => 1,
        Err(debuginfod::Answer::Failed(..)) => 2,
    };
    (out.len(), kind)
}

fn split<'a>(data: &'a [u8], sep: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
    let mut rest = Some(data);
    std::iter::from_fn(move || {
        let r = rest?;
        match r.windows(sep.len()).position(|w| w == sep) {
            Some(i) => {
                rest = Some(&r[i + sep.len()..]);
                Some(&r[..i])
            }
            None => {
                rest = None;
                Some(r)
            }
        }
    })
}

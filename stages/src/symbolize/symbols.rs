//! [`Symbols`]: the symbol tables of the dsos a stream maps, loaded once each on the worker pool
//! as soon as their first MMAP arrives, and the lookups of addresses in them.
//!
//! INTERFACE DRAFT: the lead's stage and sinks call exactly this API; the implementation behind
//! it is being written (ELF `.symtab`/`.dynsym`, MiniDebugInfo, debug files by build id and
//! debuglink, DWARF inlines, demangling, kallsyms, perf-PID.map).

use std::path::PathBuf;
use std::sync::Arc;

use perfpipe_core::Counter;

use crate::machine::DsoId;

/// How names are resolved.
#[derive(Clone, Debug)]
pub struct SymbolsConfig {
    /// Expand inlined functions from DWARF (`--inline`).
    pub inline: bool,
    /// Demangle C++ and Rust names.
    pub demangle: bool,
    /// Kernel symbols from this host's `/proc/kallsyms` (the recording is of this host); otherwise
    /// kernel frames are `[unknown]` in `[kernel.kallsyms]`.
    pub host_kernel: bool,
    /// Where separate debug files are looked up (`/usr/lib/debug`).
    pub debug_dirs: Vec<PathBuf>,
}

impl Default for SymbolsConfig {
    fn default() -> SymbolsConfig {
        SymbolsConfig {
            inline: false,
            demangle: true,
            host_kernel: true,
            debug_dirs: vec![PathBuf::from("/usr/lib/debug")],
        }
    }
}

/// A dso as the stream names it.
#[derive(Clone, Copy, Debug)]
pub struct DsoDesc<'a> {
    /// The file name from the MMAP (`[kernel.kallsyms]`, `[vdso]`, `//anon`, a path, a module).
    pub name: &'a [u8],
    /// Its build id, when the stream or the file gave one.
    pub build_id: Option<&'a [u8]>,
    /// Mapped by a kernel map.
    pub kernel: bool,
    /// A process that maps it (for `/proc/PID/root/…` and `/tmp/perf-PID.map`).
    pub pid: u32,
}

/// What kind of code a frame is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// User code in a file.
    User,
    /// The kernel or a module.
    Kernel,
    /// JIT code named by `/tmp/perf-PID.map`.
    Jit,
}

/// One resolved frame (a function, or an inlined function inside it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Resolved {
    /// The function name, demangled; `None` when no symbol covers the address (perf's
    /// `[unknown]`).
    pub name: Option<Arc<str>>,
    /// Address minus the symbol's start.
    pub offset: u64,
    /// The dso's name as perf shows it (`/usr/lib/x86_64-linux-gnu/libc.so.6`,
    /// `[kernel.kallsyms]`, `[xfs]`, `[unknown]`).
    pub dso: Arc<str>,
    /// Kernel, user or JIT code.
    pub kind: FrameKind,
    /// An inlined function (the frames of one address are pushed innermost first, the last is
    /// the real function).
    pub inlined: bool,
}

/// One address to resolve: its dso (if the machine model mapped it), the raw address and the
/// file-relative address (`ip - map.start + map.pgoff`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Query {
    /// The dso, or `None` for an address no map covers.
    pub dso: Option<DsoId>,
    /// The process.
    pub pid: u32,
    /// The address as sampled.
    pub ip: u64,
    /// `ip - map.start + map.pgoff` (the file offset).
    pub rel: u64,
    /// The sample's cpumode for this frame was kernel.
    pub kernel: bool,
}

/// Counters for `--stats`.
#[derive(Clone, Debug, Default)]
pub struct SymbolCounters {
    /// Dsos whose symbols were loaded.
    pub dsos_loaded: Counter,
    /// Dsos whose file could not be opened.
    pub dsos_missing: Counter,
    /// Dsos with no symbols at all (stripped).
    pub dsos_stripped: Counter,
    /// Addresses no symbol covers.
    pub unresolved: Counter,
}

/// The symbol tables of one stream's dsos. Shared (`Arc`) by the stage that sees the MMAPs and the
/// sinks that resolve addresses.
#[derive(Debug)]
pub struct Symbols {
    config: SymbolsConfig,
    counters: SymbolCounters,
    #[allow(dead_code)]
    pool: Option<Arc<rayon::ThreadPool>>,
}

impl Symbols {
    /// Symbols resolved as `config` says, loading on `pool` (inline when `None`).
    pub fn new(config: SymbolsConfig, pool: Option<Arc<rayon::ThreadPool>>) -> Symbols {
        Symbols {
            config,
            counters: SymbolCounters::default(),
            pool,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SymbolsConfig {
        &self.config
    }

    /// Starts loading `id`'s table in the background; later calls for the same id do nothing.
    pub fn prefetch(&self, id: DsoId, dso: DsoDesc<'_>) {
        let _ = (id, dso);
    }

    /// Resolves one address, waiting for its dso's table if it is still loading: pushes its frames
    /// onto `out`, innermost (inlined) first, the function itself last; always at least one.
    pub fn resolve(&self, q: &Query, out: &mut Vec<Resolved>) {
        self.counters.unresolved.add(1);
        out.push(Resolved {
            name: None,
            offset: q.rel,
            dso: Arc::from("[unknown]"),
            kind: if q.kernel {
                FrameKind::Kernel
            } else {
                FrameKind::User
            },
            inlined: false,
        });
    }

    /// The counters.
    pub fn counters(&self) -> &SymbolCounters {
        &self.counters
    }
}

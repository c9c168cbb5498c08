//! The raw perf interface, behind a small safe API: `struct perf_event_attr` as
//! `include/uapi/linux/perf_event.h` lays it out, `perf_event_open(2)`, the ioctls the source
//! uses, and the mmap of an event's ring (`struct perf_event_mmap_page` + data pages).
//!
//! The ring's data area is written by the kernel while we read it, so no reference (`&[u8]`,
//! `&T`) to it is ever made: [`Mmap::copy_out`] and [`Mmap::read_into`] copy bytes out through raw
//! pointers with volatile reads, and the two control words, `data_head` and `data_tail`, are
//! accessed as atomics. What the bytes mean, and when they are stable, is the business of the
//! callers in `ring.rs` (the head/tail protocol, or a paused ring).
//!
//! Most of the `unsafe` of the `record` source lives here; the rest is the `fork`/`exec` of the
//! workload (`workload.rs`) and `poll(2)` (`mod.rs`), each with its own SAFETY comment.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// `PERF_TYPE_SOFTWARE`
pub const TYPE_SOFTWARE: u32 = 1;
/// `PERF_COUNT_SW_CPU_CLOCK`
pub const SW_CPU_CLOCK: u64 = 0;
/// `PERF_COUNT_SW_TASK_CLOCK`
pub const SW_TASK_CLOCK: u64 = 1;
/// `PERF_COUNT_SW_PAGE_FAULTS`
pub const SW_PAGE_FAULTS: u64 = 2;
/// `PERF_COUNT_SW_CONTEXT_SWITCHES`
pub const SW_CONTEXT_SWITCHES: u64 = 3;
/// `PERF_COUNT_SW_CPU_MIGRATIONS`
pub const SW_CPU_MIGRATIONS: u64 = 4;
/// `PERF_COUNT_SW_DUMMY`: an event that never counts, used to carry side-band records.
pub const SW_DUMMY: u64 = 9;

pub use perfpipe_stream::format::flag;
/// `PERF_TYPE_TRACEPOINT`: `config` is the tracepoint's id in tracefs.
pub use perfpipe_stream::format::PERF_TYPE_TRACEPOINT as TYPE_TRACEPOINT;

/// `struct perf_event_attr`, `PERF_ATTR_SIZE_VER7` (128 bytes, up to `sig_data`): the size perf 6.1
/// writes, so its readers take our HEADER_ATTR as their own. Unions are named after their first
/// member (`sample_period` also holds `sample_freq`, `wakeup_events` also `wakeup_watermark`,
/// `config1` also `bp_addr`, `config2` also `bp_len`); the bitfield is the `flags` word.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct perf_event_attr {
    pub type_: u32,
    pub size: u32,
    pub config: u64,
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    pub flags: u64,
    pub wakeup_events: u32,
    pub bp_type: u32,
    pub config1: u64,
    pub config2: u64,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    pub clockid: i32,
    pub sample_regs_intr: u64,
    pub aux_watermark: u32,
    pub sample_max_stack: u16,
    pub reserved_2: u16,
    pub aux_sample_size: u32,
    pub reserved_3: u32,
    pub sig_data: u64,
}

/// `sizeof(struct perf_event_attr)` as written here.
pub const ATTR_SIZE: u32 = 128;
const _: () = assert!(std::mem::size_of::<perf_event_attr>() == ATTR_SIZE as usize);

impl perf_event_attr {
    /// The attr's bytes as a little-endian machine lays them out (the HEADER_ATTR body).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(ATTR_SIZE as usize);
        b.extend_from_slice(&self.type_.to_ne_bytes());
        b.extend_from_slice(&self.size.to_ne_bytes());
        for v in [
            self.config,
            self.sample_period,
            self.sample_type,
            self.read_format,
            self.flags,
        ] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        b.extend_from_slice(&self.wakeup_events.to_ne_bytes());
        b.extend_from_slice(&self.bp_type.to_ne_bytes());
        for v in [
            self.config1,
            self.config2,
            self.branch_sample_type,
            self.sample_regs_user,
        ] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        b.extend_from_slice(&self.sample_stack_user.to_ne_bytes());
        b.extend_from_slice(&self.clockid.to_ne_bytes());
        b.extend_from_slice(&self.sample_regs_intr.to_ne_bytes());
        b.extend_from_slice(&self.aux_watermark.to_ne_bytes());
        b.extend_from_slice(&self.sample_max_stack.to_ne_bytes());
        b.extend_from_slice(&self.reserved_2.to_ne_bytes());
        b.extend_from_slice(&self.aux_sample_size.to_ne_bytes());
        b.extend_from_slice(&self.reserved_3.to_ne_bytes());
        b.extend_from_slice(&self.sig_data.to_ne_bytes());
        b
    }
}

// ioctl numbers: _IO('$', n), _IOW('$', n, T), _IOR('$', n, T) on x86/arm64 encodings.
const IOC_ENABLE: libc::c_ulong = 0x2400;
const IOC_DISABLE: libc::c_ulong = 0x2401;
const IOC_SET_OUTPUT: libc::c_ulong = 0x2405;
const IOC_ID: libc::c_ulong = 0x8008_2407;
const IOC_PAUSE_OUTPUT: libc::c_ulong = 0x4004_2409;

/// An open perf event.
#[derive(Debug)]
pub struct Event {
    fd: OwnedFd,
}

impl Event {
    /// `perf_event_open(attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC)`.
    ///
    /// # Errors
    /// The OS error (EACCES/EPERM under `perf_event_paranoid`, ENOENT for an unknown event,
    /// ESRCH for a gone pid…).
    pub fn open(attr: &perf_event_attr, pid: i32, cpu: i32) -> io::Result<Event> {
        const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
        // SAFETY: the kernel reads `attr.size` bytes from a valid, initialised struct of that size;
        // the other arguments are plain integers.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                attr as *const perf_event_attr,
                pid as libc::c_long,
                cpu as libc::c_long,
                -1 as libc::c_long,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the syscall returned a new fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        Ok(Event { fd })
    }

    fn ioctl(&self, req: libc::c_ulong, arg: libc::c_ulong) -> io::Result<()> {
        // SAFETY: the perf ioctls used here take an integer argument (or, for ID, a pointer that
        // `id()` passes); the fd is ours.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), req as _, arg) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// `PERF_EVENT_IOC_ID`: the id the kernel puts in this event's records.
    ///
    /// # Errors
    /// The OS error.
    pub fn id(&self) -> io::Result<u64> {
        let mut id = 0u64;
        // SAFETY: IOC_ID writes one u64 through the pointer, which is valid for the call.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), IOC_ID as _, &mut id as *mut u64) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(id)
    }

    /// `PERF_EVENT_IOC_ENABLE`.
    ///
    /// # Errors
    /// The OS error.
    pub fn enable(&self) -> io::Result<()> {
        self.ioctl(IOC_ENABLE, 0)
    }

    /// `PERF_EVENT_IOC_DISABLE`.
    ///
    /// # Errors
    /// The OS error.
    pub fn disable(&self) -> io::Result<()> {
        self.ioctl(IOC_DISABLE, 0)
    }

    /// `PERF_EVENT_IOC_SET_OUTPUT`: write this event's records into `target`'s ring.
    ///
    /// # Errors
    /// The OS error (EINVAL when the two differ in cpu or direction).
    pub fn set_output(&self, target: &Event) -> io::Result<()> {
        self.ioctl(IOC_SET_OUTPUT, target.fd.as_raw_fd() as libc::c_ulong)
    }

    /// `PERF_EVENT_IOC_PAUSE_OUTPUT`: stop (`true`) or resume writing into the ring.
    ///
    /// # Errors
    /// The OS error.
    pub fn pause_output(&self, pause: bool) -> io::Result<()> {
        self.ioctl(IOC_PAUSE_OUTPUT, libc::c_ulong::from(pause))
    }

    /// The raw fd, for poll(2).
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// The size of a page.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).unwrap_or(4096)
}

/// An event's mapped ring: one `perf_event_mmap_page` then `2^n` data pages.
#[derive(Debug)]
pub struct Mmap {
    base: *mut u8,
    len: usize,
    data_size: usize,
    page: usize,
    writable: bool,
}

// SAFETY: the mapping is owned by this value and only accessed through its methods, which read the
// data area with volatile copies and the control words as atomics; no reference into it escapes.
unsafe impl Send for Mmap {}

/// Offsets in `struct perf_event_mmap_page`.
const DATA_HEAD: usize = 1024;
const DATA_TAIL: usize = 1032;

impl Mmap {
    /// Maps `data_pages` (a power of two) data pages of `event`'s ring; writable (forward mode:
    /// we own `data_tail`) or read-only (overwrite mode: the kernel ignores `data_tail`).
    ///
    /// # Errors
    /// The OS error (EPERM/ENOMEM above `perf_event_mlock_kb`, EINVAL for a bad page count).
    pub fn new(event: &Event, data_pages: usize, writable: bool) -> io::Result<Mmap> {
        let page = page_size();
        let data_size = data_pages * page;
        let len = data_size + page;
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh shared mapping of the event fd; the kernel validates the length.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                event.raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mmap {
            base: p.cast(),
            len,
            data_size,
            page,
            writable,
        })
    }

    fn word(&self, off: usize) -> &AtomicU64 {
        // SAFETY: `off` is 8-aligned inside the first (control) page, which stays mapped while
        // `self` lives; the kernel updates it concurrently, hence atomic access.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    /// `data_head`, read with acquire semantics (the `smp_rmb()` after it in perf's
    /// `perf_mmap__read_head()`): every record before it is fully written.
    pub fn head(&self) -> u64 {
        self.word(DATA_HEAD).load(Ordering::Acquire)
    }

    /// `data_tail`.
    pub fn tail(&self) -> u64 {
        self.word(DATA_TAIL).load(Ordering::Relaxed)
    }

    /// Publishes `data_tail` with release semantics (`perf_mmap__write_tail()`): the kernel may
    /// overwrite what lies before it only after our reads of it are done.
    ///
    /// # Panics
    /// If the ring was mapped read-only.
    pub fn set_tail(&self, tail: u64) {
        assert!(self.writable, "data_tail of a read-only ring");
        self.word(DATA_TAIL).store(tail, Ordering::Release);
    }

    /// Size of the data area (a power of two).
    pub fn data_size(&self) -> usize {
        self.data_size
    }

    /// Appends to `out` the `len` bytes of the data area that start at the unmasked ring position
    /// `pos`, wrapping at the end of the area (a record split across the end comes out whole).
    ///
    /// The bytes are copied with volatile reads through raw pointers, never through a reference,
    /// because the kernel writes the data area concurrently. Bytes the kernel is writing while they
    /// are copied come out as some mix of old and new values: read only the ranges the head/tail
    /// protocol (or a paused ring) makes stable.
    ///
    /// # Panics
    /// If `len` exceeds [`Mmap::data_size`].
    pub fn copy_out(&self, pos: u64, len: usize, out: &mut Vec<u8>) {
        assert!(
            len <= self.data_size,
            "{len} bytes from a ring of {}",
            self.data_size
        );
        out.reserve(len);
        let old = out.len();
        // SAFETY: `reserve` made room for `len` more bytes after `old`; `copy_raw` initialises
        // exactly those `len` bytes before `set_len` exposes them.
        unsafe {
            self.copy_raw(pos, len, out.as_mut_ptr().add(old));
            out.set_len(old + len);
        }
    }

    /// Fills `dst` with the bytes of the data area from the unmasked ring position `pos`, wrapping
    /// at the end; as [`Mmap::copy_out`].
    ///
    /// # Panics
    /// If `dst` is longer than [`Mmap::data_size`].
    pub fn read_into(&self, pos: u64, dst: &mut [u8]) {
        assert!(
            dst.len() <= self.data_size,
            "{} bytes from a ring of {}",
            dst.len(),
            self.data_size
        );
        // SAFETY: `dst` is valid for writes of its length.
        unsafe { self.copy_raw(pos, dst.len(), dst.as_mut_ptr()) }
    }

    /// Copies `len` (at most `data_size`) bytes from unmasked ring position `pos` to `dst`.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes and must not overlap the mapping.
    unsafe fn copy_raw(&self, pos: u64, len: usize, dst: *mut u8) {
        debug_assert!(len <= self.data_size);
        let at = (pos & (self.data_size as u64 - 1)) as usize;
        let first = len.min(self.data_size - at);
        // SAFETY: both runs lie inside the data area ([at, at + first) and [0, len - first), with
        // at + first <= data_size), and the caller vouches for `dst`.
        unsafe {
            let data = self.base.add(self.page).cast_const();
            copy_volatile(data.add(at), dst, first);
            copy_volatile(data, dst.add(first), len - first);
        }
    }
}

/// Copies `n` bytes from `src` to `dst` with volatile reads: 8 bytes at a time where `src` is
/// 8-aligned (every record in a ring is, the kernel keeps sizes multiples of 8), else byte by byte.
///
/// # Safety
/// `src` must be valid for reads and `dst` for writes of `n` bytes, and they must not overlap.
unsafe fn copy_volatile(src: *const u8, dst: *mut u8, n: usize) {
    let mut i = 0;
    // SAFETY: in all three loops every access is at an offset below `n` from `src` or `dst`, as the
    // caller guarantees valid; the u64 reads are from 8-aligned addresses, the writes unaligned.
    unsafe {
        while i < n && (src as usize + i) % 8 != 0 {
            dst.add(i).write(src.add(i).read_volatile());
            i += 1;
        }
        while i + 8 <= n {
            let w = src.add(i).cast::<u64>().read_volatile();
            dst.add(i).cast::<u64>().write_unaligned(w);
            i += 8;
        }
        while i < n {
            dst.add(i).write(src.add(i).read_volatile());
            i += 1;
        }
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping this value created, exactly once.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}

/// A stand-in for the kernel in tests: an anonymous mapping laid out as a ring, written through
/// raw pointers as the kernel writes the real one.
#[cfg(test)]
impl Mmap {
    /// A writable "ring" of `data_pages` (a power of two) zeroed data pages.
    pub(crate) fn anonymous(data_pages: usize) -> Mmap {
        let page = page_size();
        let len = (data_pages + 1) * page;
        // SAFETY: a fresh anonymous shared mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "{}", io::Error::last_os_error());
        Mmap {
            base: p.cast(),
            len,
            data_size: data_pages * page,
            page,
            writable: true,
        }
    }

    /// Writes `bytes` at unmasked ring position `pos`, wrapping, as the kernel's
    /// `perf_output_copy()` does.
    pub(crate) fn poke(&self, pos: u64, bytes: &[u8]) {
        let mask = self.data_size as u64 - 1;
        for (i, b) in bytes.iter().enumerate() {
            let at = (pos.wrapping_add(i as u64) & mask) as usize;
            // SAFETY: `at` is inside the data area.
            unsafe { self.base.add(self.page + at).write_volatile(*b) };
        }
    }

    /// Publishes `data_head` with release semantics, as `perf_output_put_handle()`.
    pub(crate) fn set_head(&self, head: u64) {
        self.word(DATA_HEAD).store(head, Ordering::Release);
    }
}

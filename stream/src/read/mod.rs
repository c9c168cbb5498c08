//! `read`: the source. Reads standard input or a file in large chunks (the pipeline's batch size,
//! 256 KiB by default) into recycled buffers, never one syscall per record.
//!
//! - **Order**: bytes are emitted in input order, as raw batches (no spans) for `decode` to frame.
//! - **Buffering**: one batch at a time. A batch is emitted when it is full or when a read returns
//!   less than asked (a pipe was drained), so a slow live producer sees its records flow on promptly.
//! - **Headroom**: each batch starts with [`HEADROOM`] bytes of space before the payload, where
//!   `decode` puts the partial record left over from the previous batch instead of copying the batch.
//! - **EOF**: returns [`Flow::Stop`] after the last batch.

pub mod file;

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use perfpipe_core::{Flow, Out, Source, StageError};

use crate::Error;

/// Space left before the payload of every batch: the largest record (`u16` size) fits in it.
pub const HEADROOM: usize = 64 * 1024;

/// Configuration of the `read` source.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadConfig {
    /// The file to read; `None` (or `-` on the command line) is standard input.
    pub path: Option<PathBuf>,
    /// Try to grow the input pipe's kernel buffer to this many bytes (Linux `F_SETPIPE_SZ`), which
    /// halves the context switches between `perf record` and us. 0 leaves it alone.
    pub pipe_buffer: usize,
}

impl ReadConfig {
    /// Opens the input.
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be opened or standard input cannot be duplicated.
    pub fn build(&self) -> Result<Read, Error> {
        let (fd, name): (OwnedFd, PathBuf) = match &self.path {
            None => (dup_std(std::io::stdin().as_fd())?, "-".into()),
            Some(p) => {
                let f = File::open(p).map_err(|source| Error::Io {
                    op: "open",
                    path: p.clone(),
                    source,
                })?;
                (f.into(), p.clone())
            }
        };
        if self.pipe_buffer > 0 {
            grow_pipe(&fd, self.pipe_buffer);
        }
        Ok(Read {
            fd,
            name,
            offset: 0,
            waited: Duration::ZERO,
        })
    }
}

/// Duplicates standard input or output into an fd of our own (`-` in errors).
pub(crate) fn dup_std(fd: std::os::fd::BorrowedFd<'_>) -> Result<OwnedFd, Error> {
    fd.try_clone_to_owned().map_err(|source| Error::Io {
        op: "open",
        path: "-".into(),
        source,
    })
}

/// Grows a pipe's kernel buffer; a no-op (and no error) for anything but a pipe.
pub(crate) fn grow_pipe(fd: &impl AsRawFd, bytes: usize) {
    let size = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: fcntl on an fd we own; F_SETPIPE_SZ fails harmlessly with EBADF/EINVAL/EPERM on
    // non-pipes or above the system limit.
    unsafe {
        libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, size);
    }
}

/// The running `read` source.
#[derive(Debug)]
pub struct Read {
    fd: OwnedFd,
    name: PathBuf,
    offset: u64,
    /// Time spent inside read(2) since the runner last asked.
    waited: Duration,
}

/// One `read(2)` of at most `max` bytes appended to `buf` (whose spare capacity must hold them),
/// retried on EINTR. Returns the bytes read; 0 means end of file.
fn read_into(fd: &OwnedFd, buf: &mut Vec<u8>, max: usize) -> std::io::Result<usize> {
    let spare = buf.spare_capacity_mut();
    let max = max.min(spare.len());
    loop {
        // SAFETY: the kernel writes at most `max` bytes into capacity we own; the length is
        // extended only over the bytes it reports written.
        let n = unsafe { libc::read(fd.as_raw_fd(), spare.as_mut_ptr().cast(), max) };
        if n >= 0 {
            let n = n as usize;
            // SAFETY: `n <= max` bytes after the old length were initialised by read(2).
            unsafe { buf.set_len(buf.len() + n) };
            return Ok(n);
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

impl Source for Read {
    fn produce(&mut self, out: &mut Out<'_>) -> Result<Flow, StageError> {
        let want = out.batch_bytes().max(4096);
        let mut batch = out.take();
        batch.data.reserve_exact(HEADROOM + want);
        batch.data.resize(HEADROOM, 0);
        batch.start = HEADROOM;
        batch.stream_offset = self.offset;
        let mut result = Ok(Flow::Continue);
        while batch.data.len() < HEADROOM + want {
            let asked = HEADROOM + want - batch.data.len();
            let t0 = Instant::now();
            let n = read_into(&self.fd, &mut batch.data, asked);
            self.waited += t0.elapsed();
            match n {
                Ok(0) => {
                    result = Ok(Flow::Stop);
                    break;
                }
                // A short read drained a pipe: emit what we have rather than wait for more.
                Ok(n) if n < asked => break,
                Ok(_) => {}
                Err(source) => {
                    result = Err(Error::Io {
                        op: "read",
                        path: self.name.clone(),
                        source,
                    }
                    .into());
                    break;
                }
            }
        }
        let got = batch.data.len() - HEADROOM;
        self.offset += got as u64;
        if got > 0 {
            out.push(batch);
        } else {
            out.recycle(batch);
        }
        result
    }

    fn take_io_wait(&mut self) -> Duration {
        std::mem::take(&mut self.waited)
    }
}

/// A source over a stream already in memory, emitted in batch-size chunks with the same headroom as
/// [`Read`]: for benchmarks (`perfpipe bench pipeline`, `benches/`) and tests, where pipes and
/// disks would only add noise.
#[derive(Debug)]
pub struct Memory {
    data: std::sync::Arc<Vec<u8>>,
    pos: usize,
}

impl Memory {
    /// A source emitting `data` from its start.
    pub fn new(data: std::sync::Arc<Vec<u8>>) -> Memory {
        Memory { data, pos: 0 }
    }
}

impl Source for Memory {
    fn produce(&mut self, out: &mut Out<'_>) -> Result<Flow, StageError> {
        if self.pos == self.data.len() {
            return Ok(Flow::Stop);
        }
        let end = (self.pos + out.batch_bytes()).min(self.data.len());
        let mut b = out.take();
        b.data.resize(HEADROOM, 0);
        b.data.extend_from_slice(&self.data[self.pos..end]);
        b.start = HEADROOM;
        b.stream_offset = self.pos as u64;
        self.pos = end;
        out.push(b);
        Ok(Flow::Continue)
    }
}

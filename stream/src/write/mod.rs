//! `write`: the sink. Writes each batch's records to standard output or a file with `writev(2)`,
//! one call per batch (a few when the kernel takes less), never one per record.
//!
//! - **Order**: records in batch order.
//! - **Buffering**: none of its own: every batch is written before the next is taken, and the output
//!   is flushed (and a file synced to the page cache's view) at end of stream.
//! - **Errors**: a closed downstream (`EPIPE`) ends the pipeline with an [`Error::Io`] whose source
//!   has kind `BrokenPipe`, which the CLI treats as a normal end.
//!
//! Encoding happens here, inside the `write` thread (a thread of its own would only add a
//! hand-off): records that no stage changed go out byte for byte, since
//! [`perfpipe_core::Batch::runs`] merges adjacent spans, so an untouched batch is one contiguous
//! slice of the buffer `read` filled, handed to `writev(2)` without a copy. Stages that add or
//! rewrite records build them with the format's writer, [`format::build`](crate::format::build),
//! which lays them out as perf does.

pub mod atomic;
pub mod file;
pub mod split;

use std::fs::File;
use std::io::{IoSlice, Write as _};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use perfpipe_core::{Batch, Flow, Sink, StageError};

use crate::read::{dup_std, grow_pipe};
use crate::Error;

/// Configuration of the `write` sink.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteConfig {
    /// The file to create (truncating it); `None` (or `-`) is standard output.
    pub path: Option<PathBuf>,
    /// Try to grow the output pipe's kernel buffer to this many bytes (`F_SETPIPE_SZ`); 0 leaves it.
    pub pipe_buffer: usize,
}

impl WriteConfig {
    /// Opens the output.
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be created or standard output cannot be duplicated.
    pub fn build(&self) -> Result<Write, Error> {
        let (file, name) = match &self.path {
            None => (
                File::from(dup_std(std::io::stdout().as_fd())?),
                PathBuf::from("-"),
            ),
            Some(p) => {
                let f = File::create(p).map_err(|source| Error::Io {
                    op: "create",
                    path: p.clone(),
                    source,
                })?;
                (f, p.clone())
            }
        };
        if self.pipe_buffer > 0 {
            grow_pipe(&file, self.pipe_buffer);
        }
        Ok(Write {
            file,
            name,
            written: 0,
            waited: Duration::ZERO,
        })
    }
}

/// The running `write` sink.
#[derive(Debug)]
pub struct Write {
    file: File,
    name: PathBuf,
    written: u64,
    /// Time spent inside writev(2) since the runner last asked.
    waited: Duration,
}

impl Write {
    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    fn write_all(&mut self, mut rest: &mut [IoSlice<'_>]) -> Result<(), StageError> {
        while !rest.is_empty() {
            let t0 = Instant::now();
            let n = self.file.write_vectored(rest);
            self.waited += t0.elapsed();
            match n {
                Ok(0) => return Err(self.io_error(std::io::ErrorKind::WriteZero.into())),
                Ok(n) => {
                    self.written += n as u64;
                    IoSlice::advance_slices(&mut rest, n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io_error(e)),
            }
        }
        Ok(())
    }

    fn io_error(&self, source: std::io::Error) -> StageError {
        Error::Io {
            op: "write",
            path: self.name.clone(),
            source,
        }
        .into()
    }
}

impl Sink for Write {
    fn consume(&mut self, batch: &Batch) -> Result<Flow, StageError> {
        // Up to 64 runs per writev(2), from a stack array: no allocation per batch. An unchanged batch
        // is a single run.
        const MAX: usize = 64;
        let mut runs = batch.runs().peekable();
        while runs.peek().is_some() {
            let mut slices = [IoSlice::new(&[]); MAX];
            let mut n = 0;
            for (slot, run) in slices.iter_mut().zip(runs.by_ref().take(MAX)) {
                *slot = IoSlice::new(run);
                n += 1;
            }
            self.write_all(&mut slices[..n])?;
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self) -> Result<(), StageError> {
        self.file.flush().map_err(|e| self.io_error(e))
    }

    fn take_io_wait(&mut self) -> Duration {
        std::mem::take(&mut self.waited)
    }
}

/// A sink that discards everything: for benchmarks, to measure the stages without an output.
#[derive(Debug, Default)]
pub struct Discard;

impl Sink for Discard {
    fn consume(&mut self, batch: &Batch) -> Result<Flow, StageError> {
        std::hint::black_box(batch.spans.len());
        Ok(Flow::Continue)
    }
}

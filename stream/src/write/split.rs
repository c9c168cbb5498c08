//! `write`, one file per stream: for `-o NAME-%n.data`. Every stream in the input — each starts
//! with its pipe header, as every dump of [`ring`](crate::ring) does — goes to the next file, `%n`
//! replaced by 1, 2, 3…, written in the format [`OutputMode`] picks for that file (so a new file
//! is a file-mode `perf.data` unless `--pipe`).
//!
//! A single output cannot hold several streams: perf's pipe reader takes the second pipe header
//! for a record of type 0x46524550 and stops ("failed to process type: 1179796816", perf 6.1), and
//! a file-mode `perf.data` has one header. Hence this sink, and `ring`'s `once` for one output.
//!
//! - **Order**: records in stream order, each stream in its own file.
//! - **Buffering**: as the format's sink ([`crate::write`], [`crate::write::file`]).
//! - **EOF**, or a batch that [ends its stream](perfpipe_core::Batch::ends_stream) (the last of
//!   a dump): finishes the current file (a file-mode one is renamed into place then), so a dump's
//!   file is there as soon as the dump is written. Records before the first pipe header go to the
//!   first file; records after an ended stream without a header of their own, to the next.

use std::path::{Path, PathBuf};
use std::time::Duration;

use perfpipe_core::{Batch, Counter, Flow, Sink, StageError};

use crate::format::PIPE_HEADER_KIND;
use crate::write::file::{Output, OutputMode};
use crate::write::WriteConfig;
use crate::Error;

/// What `%n` stands for in a file pattern.
pub const COUNTER: &str = "%n";

/// Configuration of the one-file-per-stream sink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteSplitConfig {
    /// The file pattern; [`COUNTER`] is replaced by the stream's number, from 1.
    pub pattern: PathBuf,
    /// The format of each file.
    pub mode: OutputMode,
    /// As [`WriteConfig::pipe_buffer`].
    pub pipe_buffer: usize,
}

impl WriteSplitConfig {
    /// Whether `path` is a pattern (holds [`COUNTER`]).
    pub fn is_pattern(path: &Path) -> bool {
        path.to_string_lossy().contains(COUNTER)
    }

    /// The path of stream `n`.
    pub fn path(&self, n: u64) -> PathBuf {
        PathBuf::from(
            self.pattern
                .to_string_lossy()
                .replace(COUNTER, &n.to_string()),
        )
    }

    /// Builds the sink; the first file is created when the first record arrives.
    ///
    /// # Errors
    /// [`Error::BadOption`] if the pattern lacks `%n`.
    pub fn build(&self) -> Result<WriteSplit, Error> {
        if !Self::is_pattern(&self.pattern) {
            return Err(Error::BadOption {
                option: "-o",
                message: format!(
                    "`{}` holds no {COUNTER} to number the files",
                    self.pattern.display()
                ),
            });
        }
        Ok(WriteSplit {
            config: self.clone(),
            current: None,
            n: 0,
            files: Counter::new(),
        })
    }
}

/// The running one-file-per-stream sink.
#[derive(Debug)]
pub struct WriteSplit {
    config: WriteSplitConfig,
    current: Option<Output>,
    n: u64,
    files: Counter,
}

impl WriteSplit {
    /// Finishes the current file, if any, and opens the next.
    fn next(&mut self) -> Result<(), StageError> {
        if let Some(mut old) = self.current.take() {
            old.finish()?;
        }
        self.n += 1;
        let path = self.config.path(self.n);
        self.current = Some(Output::open(
            &WriteConfig {
                path: Some(path),
                pipe_buffer: self.config.pipe_buffer,
            },
            self.config.mode,
        )?);
        self.files.add(1);
        Ok(())
    }

    fn write(&mut self, batch: &Batch) -> Result<Flow, StageError> {
        if self.current.is_none() {
            self.next()?;
        }
        self.current.as_mut().expect("opened").consume(batch)
    }

    /// Writes the records of `batch`, each stream that starts in it to the next file.
    fn split(&mut self, batch: &Batch) -> Result<Flow, StageError> {
        let starts: Vec<usize> = batch
            .spans
            .iter()
            .enumerate()
            .filter(|(_, s)| s.kind == PIPE_HEADER_KIND)
            .map(|(i, _)| i)
            .collect();
        if starts.is_empty() {
            return self.write(batch);
        }
        if starts == [0] {
            self.next()?;
            return self.write(batch);
        }
        // Several streams (or one starting mid-batch): write each part to its file.
        let mut bounds = starts.clone();
        if bounds[0] != 0 {
            bounds.insert(0, 0);
        }
        bounds.push(batch.spans.len());
        for w in bounds.windows(2) {
            if starts.contains(&w[0]) {
                self.next()?;
            }
            let part = Batch {
                data: batch.data.clone(),
                spans: batch.spans[w[0]..w[1]].to_vec(),
                context: batch.context.clone(),
                ..Batch::default()
            };
            if self.write(&part)? == Flow::Stop {
                return Ok(Flow::Stop);
            }
        }
        Ok(Flow::Continue)
    }
}

impl Sink for WriteSplit {
    fn consume(&mut self, batch: &Batch) -> Result<Flow, StageError> {
        let flow = self.split(batch)?;
        if batch.ends_stream {
            if let Some(mut done) = self.current.take() {
                done.finish()?;
            }
        }
        Ok(flow)
    }

    fn finish(&mut self) -> Result<(), StageError> {
        match &mut self.current {
            Some(o) => o.finish(),
            None => Ok(()),
        }
    }

    fn take_io_wait(&mut self) -> Duration {
        self.current
            .as_mut()
            .map_or(Duration::ZERO, Output::take_io_wait)
    }

    fn counters(&self) -> Vec<(&'static str, Counter)> {
        vec![("files", self.files.clone())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfpipe_core::Span;

    fn span(start: u32, len: u32, kind: u32) -> Span {
        Span {
            start,
            len,
            kind,
            tag: 0,
        }
    }

    #[test]
    fn each_stream_goes_to_the_next_file() {
        let dir = std::env::temp_dir().join(format!("perfpipe-split-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = WriteSplitConfig {
            pattern: dir.join("dump-%n.data"),
            mode: OutputMode::Pipe,
            pipe_buffer: 0,
        };
        assert!(WriteSplitConfig {
            pattern: "plain.data".into(),
            ..config.clone()
        }
        .build()
        .is_err());
        let mut sink = config.build().unwrap();
        // Stream 1 in one batch; stream 2 starts mid-batch, after the end of stream 1; stream 3
        // spans two batches.
        let b = Batch {
            data: b"H1aaH2bbH3".to_vec(),
            spans: vec![
                span(0, 2, PIPE_HEADER_KIND),
                span(2, 2, 9),
                span(4, 2, PIPE_HEADER_KIND),
                span(6, 2, 9),
                span(8, 2, PIPE_HEADER_KIND),
            ],
            ..Batch::default()
        };
        assert_eq!(sink.consume(&b).unwrap(), Flow::Continue);
        let c = Batch {
            data: b"cc".to_vec(),
            spans: vec![span(0, 2, 9)],
            ..Batch::default()
        };
        assert_eq!(sink.consume(&c).unwrap(), Flow::Continue);
        sink.finish().unwrap();
        let read = |n| std::fs::read(config.path(n)).unwrap();
        assert_eq!(read(1), b"H1aa");
        assert_eq!(read(2), b"H2bb");
        assert_eq!(read(3), b"H3cc");
        assert!(!config.path(4).exists());
        assert_eq!(sink.files.get(), 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_batch_that_ends_its_stream_finishes_the_file_at_once() {
        let dir = std::env::temp_dir().join(format!("perfpipe-split-end-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = WriteSplitConfig {
            pattern: dir.join("dump-%n.data"),
            mode: OutputMode::Pipe,
            pipe_buffer: 0,
        };
        let mut sink = config.build().unwrap();
        let b = Batch {
            data: b"H1aa".to_vec(),
            spans: vec![span(0, 2, PIPE_HEADER_KIND), span(2, 2, 9)],
            ends_stream: true,
            ..Batch::default()
        };
        assert_eq!(sink.consume(&b).unwrap(), Flow::Continue);
        // Finished without waiting for the next stream or the end.
        assert!(sink.current.is_none());
        assert_eq!(std::fs::read(config.path(1)).unwrap(), b"H1aa");
        // What follows goes to the next file, header or not.
        let c = Batch {
            data: b"zz".to_vec(),
            spans: vec![span(0, 2, 9)],
            ..Batch::default()
        };
        assert_eq!(sink.consume(&c).unwrap(), Flow::Continue);
        sink.finish().unwrap();
        assert_eq!(std::fs::read(config.path(2)).unwrap(), b"zz");
        assert_eq!(sink.files.get(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

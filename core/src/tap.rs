//! [`Tap`]: a stage that copies the stream passing through it to a writer, unchanged.
//!
//! Insert it after any stage to see the stream as that stage emits it (`--tap STAGE=FILE`). It
//! writes each batch's records (or a raw batch's payload) before passing the batch on, so the file
//! holds exactly the bytes the next stage receives, in order. It buffers nothing; a write error
//! ends the pipeline like any stage error.

use std::io::Write;

use crate::batch::Batch;
use crate::stage::{Flow, Out, Stage, StageError};

/// Writes every batch to `W`, then passes it on.
#[derive(Debug)]
pub struct Tap<W: Write + Send> {
    writer: W,
}

impl<W: Write + Send> Tap<W> {
    /// A tap writing to `writer`.
    pub fn new(writer: W) -> Tap<W> {
        Tap { writer }
    }
}

impl<W: Write + Send> Stage for Tap<W> {
    fn process(&mut self, batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
        if batch.spans.is_empty() {
            self.writer.write_all(batch.payload())?;
        } else {
            for run in batch.runs() {
                self.writer.write_all(run)?;
            }
        }
        out.push(batch);
        Ok(Flow::Continue)
    }

    fn flush(&mut self, _out: &mut Out<'_>) -> Result<(), StageError> {
        self.writer.flush()?;
        Ok(())
    }
}

//! Driving one stage without the runner: for unit tests and benchmarks of a single stage.

use crate::batch::{Batch, BufferPool};
use crate::stage::{Flow, Out, Stage, StageError};

/// Feeds `input` to `stage` in order, then flushes it (also after [`Flow::Stop`]), and returns
/// every batch it emitted, in order. No threads, no channels, no metrics.
///
/// ```
/// use perfpipe_core::{harness, Batch, Flow, Out, Span, Stage, StageError};
///
/// struct Double;
/// impl Stage for Double {
///     fn process(&mut self, b: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
///         out.push(b);
///         let mut extra = out.take();
///         extra.data.push(7);
///         extra.spans.push(Span { start: 0, len: 1, kind: 0, tag: 0 });
///         out.push(extra);
///         Ok(Flow::Continue)
///     }
/// }
/// let out = harness::run_stage(&mut Double, vec![Batch::default()]).unwrap();
/// assert_eq!(out.len(), 2);
/// assert_eq!(out[1].data, [7]);
/// ```
///
/// # Errors
/// The first error the stage returns; what it emitted before is lost with it.
pub fn run_stage(stage: &mut dyn Stage, input: Vec<Batch>) -> Result<Vec<Batch>, StageError> {
    let pool = BufferPool::new(4, 64 * 1024);
    let mut emitted = Vec::new();
    for batch in input {
        if stage.process(batch, &mut Out::new(&mut emitted, &pool))? == Flow::Stop {
            break;
        }
    }
    stage.flush(&mut Out::new(&mut emitted, &pool))?;
    Ok(emitted)
}

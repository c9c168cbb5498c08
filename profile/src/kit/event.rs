//! The events of a profile: the stream model's one rule that names an event from its attr, the
//! unit of its period and [`Events`] (a profile's events by id), re-exported here, and
//! [`FirstEvent`] (the outputs that show one event keep the first).

pub use perfpipe_stream::model::events::{name, name_of, unit, Event, Events};

/// The event of an output that shows one: the first whose samples arrive, as the collapsers keep
/// the first event of `perf script`'s output.
#[derive(Clone, Copy, Debug, Default)]
pub struct FirstEvent(Option<u16>);

impl FirstEvent {
    /// Whether a sample of attr `attr` is of the event shown (the first attr seen is).
    #[inline]
    pub fn admits(&mut self, attr: u16) -> bool {
        *self.0.get_or_insert(attr) == attr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_event_is_kept() {
        let mut first = FirstEvent::default();
        assert!(first.admits(2) && first.admits(2) && !first.admits(0));
    }
}

//! Requests from outside the pipeline ("dump now"), by name.
//!
//! A stage that acts on an outside request (a flight recorder that dumps when asked) subscribes to
//! it while it is built and polls its flag; the program that runs the pipeline decides what raises
//! it (the `perfpipe` command: SIGUSR2 raises [`DUMP`]) and raises it only if someone subscribed,
//! so a signal nobody listens to keeps its default action. Every subscriber gets a flag of its own:
//! two stages that both listen each see every request.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The request to write what a stage holds now (SIGUSR2 on the command line).
pub const DUMP: &str = "dump";

/// The requests a pipeline's stages listen to; cheap to clone (clones share the subscribers).
///
/// ```
/// use perfpipe_core::{Requests, DUMP};
///
/// let requests = Requests::default();
/// assert!(!requests.is_wanted(DUMP));
/// let flag = requests.subscribe(DUMP); // what a stage keeps
/// assert!(requests.is_wanted(DUMP));
/// requests.raise(DUMP); // what the program does on SIGUSR2
/// assert!(flag.swap(false, std::sync::atomic::Ordering::SeqCst));
/// ```
#[derive(Clone, Debug, Default)]
pub struct Requests {
    subscribers: Arc<Mutex<Subscribers>>,
}

/// Each subscriber's request name and flag.
type Subscribers = Vec<(&'static str, Arc<AtomicBool>)>;

impl Requests {
    /// A new flag, set whenever `name` is raised; the subscriber clears it when it acts.
    pub fn subscribe(&self, name: &'static str) -> Arc<AtomicBool> {
        let flag = Arc::new(AtomicBool::new(false));
        self.lock().push((name, flag.clone()));
        flag
    }

    /// Whether anything subscribed to `name`.
    pub fn is_wanted(&self, name: &str) -> bool {
        self.lock().iter().any(|(n, _)| *n == name)
    }

    /// The flags of `name`'s subscribers, for a program that sets them itself (e.g. from a signal
    /// handler, where taking a lock is not allowed).
    pub fn flags(&self, name: &str) -> Vec<Arc<AtomicBool>> {
        self.lock()
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, f)| f.clone())
            .collect()
    }

    /// Raises `name`: sets every subscriber's flag.
    pub fn raise(&self, name: &str) {
        for flag in self.flags(name) {
            flag.store(true, Ordering::SeqCst);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Subscribers> {
        // A panic while holding this lock cannot leave the list half-changed.
        self.subscribers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_subscriber_sees_every_request() {
        let r = Requests::default();
        let (a, b) = (r.subscribe(DUMP), r.subscribe(DUMP));
        let other = r.subscribe("other");
        r.raise(DUMP);
        assert!(a.swap(false, Ordering::SeqCst));
        assert!(b.swap(false, Ordering::SeqCst));
        assert!(!other.load(Ordering::SeqCst));
        assert_eq!(r.flags(DUMP).len(), 2);
        assert!(!r.clone().is_wanted("nobody"));
    }
}

//! The events `-e` names: the software events (`PERF_TYPE_SOFTWARE`) and tracepoints
//! (`SYSTEM:NAME`, `PERF_TYPE_TRACEPOINT`), and the attr perf gives each kind.

use perfpipe_stream::Error;

use super::sys;

/// An event named on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventName {
    /// A software event: its `PERF_COUNT_SW_*` config and the name perf shows.
    Software(u64, &'static str),
    /// A tracepoint, `SYSTEM:NAME` (`sched:sched_switch`); its id is read from tracefs.
    Tracepoint {
        /// The system (the directory under `events/`).
        system: String,
        /// The event.
        name: String,
    },
}

impl EventName {
    /// The name perf shows (EVENT_DESC): `cpu-clock`, `sched:sched_switch`.
    pub fn display(&self) -> String {
        match self {
            EventName::Software(_, n) => (*n).to_string(),
            EventName::Tracepoint { system, name } => format!("{system}:{name}"),
        }
    }
}

/// The software events, as perf names them (with its aliases).
const SOFTWARE: [(&str, u64, &str); 7] = [
    ("cpu-clock", sys::SW_CPU_CLOCK, "cpu-clock"),
    ("task-clock", sys::SW_TASK_CLOCK, "task-clock"),
    ("page-faults", sys::SW_PAGE_FAULTS, "page-faults"),
    ("faults", sys::SW_PAGE_FAULTS, "page-faults"),
    (
        "context-switches",
        sys::SW_CONTEXT_SWITCHES,
        "context-switches",
    ),
    ("cs", sys::SW_CONTEXT_SWITCHES, "context-switches"),
    ("cpu-migrations", sys::SW_CPU_MIGRATIONS, "cpu-migrations"),
];

/// A tracefs directory name: letters, digits, `_` and `-` (no path, no wildcard).
fn plain(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Parses one event name. Whether a tracepoint exists is known only from tracefs, when the
/// recording is built.
///
/// # Errors
/// [`Error::BadOption`] for a name that is neither a supported software event nor `SYSTEM:NAME`.
pub fn parse_event(name: &str) -> Result<EventName, Error> {
    if let Some(&(_, config, shown)) = SOFTWARE.iter().find(|(n, ..)| *n == name) {
        return Ok(EventName::Software(config, shown));
    }
    if let Some((system, event)) = name.split_once(':') {
        if plain(system) && plain(event) {
            return Ok(EventName::Tracepoint {
                system: system.to_string(),
                name: event.to_string(),
            });
        }
    }
    Err(Error::BadOption {
        option: "-e",
        message: format!(
            "`{name}`: supported events are cpu-clock, task-clock, page-faults, \
             context-switches, cpu-migrations and tracepoints SYSTEM:NAME (sched:sched_switch; \
             no wildcards)"
        ),
    })
}

/// Parses `-e` values, each a name or a comma-separated list of names (as perf takes them).
///
/// # Errors
/// As [`parse_event`], for the first bad name; [`Error::BadOption`] for no event at all.
pub fn parse_events<S: AsRef<str>>(values: &[S]) -> Result<Vec<EventName>, Error> {
    let names: Vec<EventName> = values
        .iter()
        .flat_map(|v| v.as_ref().split(','))
        .map(|n| parse_event(n.trim()))
        .collect::<Result<_, _>>()?;
    if names.is_empty() {
        return Err(Error::BadOption {
            option: "-e",
            message: "no event".into(),
        });
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn software_events_and_tracepoints_parse() {
        assert_eq!(
            parse_event("cpu-clock").unwrap(),
            EventName::Software(sys::SW_CPU_CLOCK, "cpu-clock")
        );
        assert_eq!(parse_event("faults").unwrap().display(), "page-faults");
        assert_eq!(
            parse_event("cs").unwrap(),
            EventName::Software(sys::SW_CONTEXT_SWITCHES, "context-switches")
        );
        let tp = parse_event("sched:sched_switch").unwrap();
        assert_eq!(tp.display(), "sched:sched_switch");
        for bad in [
            "cycles",
            "sched:",
            ":x",
            "sched:sched_*",
            "../x:y",
            "a:b/c",
            "",
        ] {
            assert!(parse_event(bad).is_err(), "{bad}");
        }
        let list = parse_events(&["cpu-clock,sched:sched_switch", "cs"]).unwrap();
        assert_eq!(list.len(), 3);
        assert!(parse_events::<&str>(&[]).is_err());
    }
}

//! The mapping from a command line's stage and format arguments to the library's
//! [`Word`]s, in command-line order; everything after that (the rules, the building) is
//! `perfpipe-chain`'s.

use clap::ArgMatches;
use perfpipe_chain::{Plan, Word};
use perfpipe_core::spec::{Flag, FlagValue, Registry};

/// The words of `matches`: every flag a stage or format declares, `--stage` and `--format`,
/// in the order they stand.
pub fn words<'m>(matches: &'m ArgMatches, registry: &Registry) -> Vec<Word<'m>> {
    let mut words: Vec<(usize, Word<'m>)> = Vec::new();
    let flags = registry
        .specs()
        .iter()
        .flat_map(|s| s.flags)
        .chain(registry.formats().iter().flat_map(|f| f.flags));
    let mut seen: Vec<&str> = Vec::new();
    for flag in flags {
        // A flag two formats share is one argument.
        if seen.contains(&flag.name) {
            continue;
        }
        seen.push(flag.name);
        words.extend(flag_words(matches, flag));
    }
    for (id, word) in [
        ("stage", Word::Stage as fn(&'m str) -> Word<'m>),
        ("format", Word::Format),
    ] {
        if let (Some(indices), Some(values)) =
            (matches.indices_of(id), matches.get_many::<String>(id))
        {
            words.extend(indices.zip(values.map(|v| word(v.as_str()))));
        }
    }
    words.sort_by_key(|(i, _)| *i);
    words.into_iter().map(|(_, w)| w).collect()
}

/// The uses of one flag, with their positions.
fn flag_words<'m>(matches: &'m ArgMatches, flag: &Flag) -> Vec<(usize, Word<'m>)> {
    let Some(indices) = matches.indices_of(flag.name) else {
        return Vec::new();
    };
    let values: Vec<Option<&'m str>> = match flag.value {
        FlagValue::None => indices.clone().map(|_| None).collect(),
        _ => matches
            .get_many::<String>(flag.name)
            .into_iter()
            .flatten()
            .map(|v| Some(v.as_str()))
            .collect(),
    };
    indices
        .zip(values)
        .map(|(i, value)| {
            let name = flag.name;
            (i, Word::Flag { name, value })
        })
        .collect()
}

/// The plan of a command line's stage and format arguments.
///
/// # Errors
/// What [`Plan::from_words`] returns.
pub fn plan(matches: &ArgMatches, registry: &Registry) -> Result<Plan, perfpipe_chain::Error> {
    Plan::from_words(&words(matches, registry), registry)
}

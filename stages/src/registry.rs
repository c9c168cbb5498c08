//! The stage registry: every transform stage the CLI can chain, with its flag, help, option schema
//! and constructor, in one place. The CLI builds its stage flags, the generic `--stage NAME[:VALUE]`
//! flag and `perfpipe stages` from a [`Registry`]; a program of your own adds its stages to
//! [`Registry::builtin`] and hands the result to `perfpipe::main_with` to get the whole CLI.

use perfpipe_core::Stage;

/// Builds a stage from its flag's value.
pub type BuildFn = fn(Option<&str>) -> Result<Box<dyn Stage>, crate::Error>;

/// How a stage is offered on the command line.
#[derive(Clone, Copy, Debug)]
pub struct StageSpec {
    /// The stage's name (a verb); also its flag, `--<name>`, and its file, `src/<name>.rs`.
    pub name: &'static str,
    /// One line of help.
    pub help: &'static str,
    /// The value the flag takes, if any (e.g. `EXPR`).
    pub value: Option<&'static str>,
    /// The `key=value` options the value may hold (for stages that take options rather than one
    /// value); parse them with [`options`]. Empty when the value is not a list of options.
    pub options: &'static [StageOption],
    /// Builds the stage from the flag's value.
    pub build: BuildFn,
    /// The stage reads records that `perf record -z` hides inside COMPRESSED records (samples,
    /// MMAPs, COMMs…): the CLI puts one `decompress` stage before the first such stage, unless
    /// `--decompress` was given earlier.
    pub needs_decompressed: bool,
}

/// One `key=value` option a stage accepts.
#[derive(Clone, Copy, Debug)]
pub struct StageOption {
    /// The key.
    pub key: &'static str,
    /// One line of help.
    pub help: &'static str,
}

/// Splits a stage's value `key=value,key=value` into pairs, checking every key against `schema`.
/// `None` or an empty value gives no pairs.
///
/// # Errors
/// [`crate::Error::BadOption`] for an item without `=` or with a key the schema does not list.
pub fn options<'a>(
    value: Option<&'a str>,
    schema: &[StageOption],
) -> Result<Vec<(&'a str, &'a str)>, crate::Error> {
    let mut pairs = Vec::new();
    for item in value
        .unwrap_or_default()
        .split(',')
        .filter(|i| !i.trim().is_empty())
    {
        let known = || schema.iter().map(|o| o.key).collect::<Vec<_>>().join(", ");
        let Some((k, v)) = item.split_once('=') else {
            return Err(crate::Error::BadOption {
                option: "stage options",
                message: format!("`{item}` is not key=value (keys: {})", known()),
            });
        };
        let k = k.trim();
        if !schema.iter().any(|o| o.key == k) {
            return Err(crate::Error::BadOption {
                option: "stage options",
                message: format!("unknown option `{k}` (keys: {})", known()),
            });
        }
        pairs.push((k, v.trim()));
    }
    Ok(pairs)
}

/// A set of transform stages: the built-in ones plus any a program adds.
#[derive(Clone, Debug)]
pub struct Registry {
    specs: Vec<StageSpec>,
}

impl Registry {
    /// The built-in stages ([`TRANSFORMS`]).
    pub fn builtin() -> Registry {
        Registry {
            specs: TRANSFORMS.to_vec(),
        }
    }

    /// Adds a stage; one with the same name is replaced.
    pub fn add(&mut self, spec: StageSpec) -> &mut Registry {
        match self.specs.iter_mut().find(|s| s.name == spec.name) {
            Some(old) => *old = spec,
            None => self.specs.push(spec),
        }
        self
    }

    /// The stage called `name`, if registered.
    pub fn find(&self, name: &str) -> Option<&StageSpec> {
        self.specs.iter().find(|s| s.name == name)
    }

    /// Every registered stage, in registration order.
    pub fn specs(&self) -> &[StageSpec] {
        &self.specs
    }

    /// Like [`insert_decompress`], with this registry's stages.
    pub fn insert_decompress<T>(
        &self,
        stages: &mut Vec<(&'static str, T)>,
        value: T,
    ) -> Option<usize> {
        insert_before(stages, value, |name| {
            self.find(name).is_some_and(|s| s.needs_decompressed)
        })
    }
}

/// The fixed stages every run has, in order, with one line of help each.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "read",
        "source: read standard input or -i FILE in large chunks; a file-mode perf.data is mapped and presented as the pipe stream",
    ),
    (
        "decode",
        "frame records, validate the pipe header, track attrs",
    ),
    (
        "write",
        "sink: encode records (unchanged ones byte for byte) to standard output or -o FILE (a regular file in file mode)",
    ),
];

/// Transform stages, chained by their flags in command-line order.
pub const TRANSFORMS: &[StageSpec] = &[
    StageSpec {
        name: "decompress",
        help: "replace COMPRESSED records (perf record -z) with the records they hold",
        value: None,
        options: &[],
        build: |_| {
            Ok(Box::new(
                crate::decompress::DecompressConfig::default().build()?,
            ))
        },
        needs_decompressed: false,
    },
    StageSpec {
        name: "buildid",
        help:
            "inject a BUILD_ID record before the first sample that hits each dso (perf inject -b)",
        value: None,
        options: &[],
        build: |_| crate::buildid::build_stage(false, None),
        needs_decompressed: true,
    },
    StageSpec {
        name: "buildid-callchain",
        help: "like --buildid, and every callchain frame's dso counts as hit (perf >= 6.12)",
        value: None,
        options: &[],
        build: |_| crate::buildid::build_stage(true, None),
        needs_decompressed: true,
    },
    StageSpec {
        name: "known-build-ids",
        help:
            "like --buildid, with build ids given as PATH=HEXID,... (perf inject --known-build-ids)",
        value: Some("LIST"),
        options: &[],
        build: |v| crate::buildid::build_stage(false, v),
        needs_decompressed: true,
    },
    StageSpec {
        name: "buildid-all",
        help: "inject a BUILD_ID record before the MMAP of every dso (perf inject --buildid-all)",
        value: None,
        options: &[],
        build: |_| {
            Ok(Box::new(
                crate::buildid::BuildidConfig::default().build_all(),
            ))
        },
        needs_decompressed: true,
    },
    StageSpec {
        name: "filter",
        help:
            "keep the samples for which EXPR holds, e.g. 'comm == \"gz*\" && cpu == 0' (repeatable)",
        value: Some("EXPR"),
        options: &[],
        build: |v| crate::filter::build_stage(crate::filter::parse(v.unwrap_or_default())),
        needs_decompressed: true,
    },
    StageSpec {
        name: "pid",
        help: "keep the samples of these processes: PID[,PID...] (perf script --pid)",
        value: Some("LIST"),
        options: &[],
        build: |v| {
            crate::filter::build_stage(crate::filter::id_list(
                crate::filter::Field::Pid,
                v.unwrap_or_default(),
            ))
        },
        needs_decompressed: true,
    },
    StageSpec {
        name: "tid",
        help: "keep the samples of these threads: TID[,TID...] (perf script --tid)",
        value: Some("LIST"),
        options: &[],
        build: |v| {
            crate::filter::build_stage(crate::filter::id_list(
                crate::filter::Field::Tid,
                v.unwrap_or_default(),
            ))
        },
        needs_decompressed: true,
    },
    StageSpec {
        name: "comm",
        help: "keep the samples of threads with these names: COMM[,COMM...] (perf script --comm)",
        value: Some("LIST"),
        options: &[],
        build: |v| crate::filter::build_stage(crate::filter::name_list(v.unwrap_or_default())),
        needs_decompressed: true,
    },
    StageSpec {
        name: "cpu",
        help: "keep the samples taken on these cpus: 0-2,5 (perf script --cpu)",
        value: Some("LIST"),
        options: &[],
        build: |v| crate::filter::build_stage(crate::filter::cpu_list(v.unwrap_or_default())),
        needs_decompressed: true,
    },
    StageSpec {
        name: "time",
        help: "keep the samples in START,END (seconds as perf script prints them; ends included)",
        value: Some("START,END"),
        options: &[],
        build: |v| crate::filter::build_stage(crate::filter::time_range(v.unwrap_or_default())),
        needs_decompressed: true,
    },
    StageSpec {
        name: "drop",
        help: "remove every record of these types: switch,lost,... (perf report --stats names)",
        value: Some("TYPES"),
        options: &[],
        build: |v| {
            Ok(Box::new(
                crate::drop::DropConfig::parse(v.unwrap_or_default())?.build(),
            ))
        },
        needs_decompressed: true,
    },
    StageSpec {
        name: "prune-sideband",
        help: "remove MMAP/COMM/FORK/EXIT records of processes without samples (after the filters)",
        value: None,
        options: &[],
        build: |_| {
            Ok(Box::new(
                crate::prune_sideband::PruneSidebandConfig::default().build(),
            ))
        },
        needs_decompressed: true,
    },
    StageSpec {
        name: "ring",
        help: "flight recorder: keep the newest SIZE bytes of events, dump a complete stream at \
               the end, on SIGUSR2 or on --ring-trigger (-o NAME-%n.data: one file per dump)",
        value: Some("SIZE"),
        options: &[
            StageOption {
                key: "once",
                help: "stop after the first dump (set for a single output)",
            },
            StageOption {
                key: "after",
                help: "after a trigger, record DURATION more (--ring-after)",
            },
            StageOption {
                key: "trigger",
                help: "dump when a sample matches EXPR (--ring-trigger; last, may hold commas)",
            },
        ],
        build: crate::ring::build_stage,
        needs_decompressed: true,
    },
];

/// The registered stage called `name`, if any.
pub fn find(name: &str) -> Option<&'static StageSpec> {
    TRANSFORMS.iter().find(|s| s.name == name)
}

/// `stages` (names in command-line order) with one `decompress` inserted before the first stage
/// that [needs decompressed records](StageSpec::needs_decompressed), unless a `decompress` already
/// runs before it. Returns the index at which it was inserted, if any.
pub fn insert_decompress<T>(stages: &mut Vec<(&'static str, T)>, value: T) -> Option<usize> {
    insert_before(stages, value, |name| {
        find(name).is_some_and(|s| s.needs_decompressed)
    })
}

fn insert_before<T>(
    stages: &mut Vec<(&'static str, T)>,
    value: T,
    needs: impl Fn(&str) -> bool,
) -> Option<usize> {
    for (i, (name, _)) in stages.iter().enumerate() {
        if *name == "decompress" {
            return None;
        }
        if needs(name) {
            stages.insert(i, ("decompress", value));
            return Some(i);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decompress_goes_before_the_first_stage_that_needs_it() {
        let needs = |n: &str| n.starts_with("needs");
        let mut v = vec![("other", 0), ("needs-a", 1), ("needs-b", 2)];
        assert_eq!(insert_before(&mut v, 9, needs), Some(1));
        assert_eq!(
            v,
            vec![
                ("other", 0),
                ("decompress", 9),
                ("needs-a", 1),
                ("needs-b", 2)
            ]
        );
        // Already there, earlier: nothing added.
        let mut v = vec![("decompress", 0), ("needs-a", 1)];
        assert_eq!(insert_before(&mut v, 9, needs), None);
        // Only later than the first stage that needs it: one more goes before it.
        let mut v = vec![("needs-a", 1), ("decompress", 0)];
        assert_eq!(insert_before(&mut v, 9, needs), Some(0));
        let mut v = vec![("other", 0)];
        assert_eq!(insert_before(&mut v, 9, needs), None);
        assert_eq!(v.len(), 1);
    }

    #[test]
    fn options_are_checked_against_the_schema() {
        const SCHEMA: &[StageOption] = &[
            StageOption {
                key: "top",
                help: "",
            },
            StageOption {
                key: "key",
                help: "",
            },
        ];
        assert_eq!(
            options(Some("top=5, key=ab"), SCHEMA).unwrap(),
            vec![("top", "5"), ("key", "ab")]
        );
        assert!(options(None, SCHEMA).unwrap().is_empty());
        let err = options(Some("colour=red"), SCHEMA).unwrap_err().to_string();
        assert!(
            err.contains("unknown option `colour` (keys: top, key)"),
            "{err}"
        );
        assert!(options(Some("top"), SCHEMA).is_err());
    }

    #[test]
    fn registry_adds_and_replaces() {
        let mut r = Registry::builtin();
        let n = r.specs().len();
        let mut spec = *r.find("drop").unwrap();
        spec.help = "replaced";
        r.add(spec);
        assert_eq!(r.specs().len(), n);
        assert_eq!(r.find("drop").unwrap().help, "replaced");
        spec.name = "mine";
        r.add(spec);
        assert_eq!(r.specs().len(), n + 1);
    }

    #[test]
    fn every_stage_is_named_once_and_builds_with_no_value_when_it_takes_none() {
        for (i, s) in TRANSFORMS.iter().enumerate() {
            assert!(
                TRANSFORMS[..i].iter().all(|t| t.name != s.name),
                "{}",
                s.name
            );
            if s.value.is_none() {
                assert!((s.build)(None).is_ok(), "{}", s.name);
            }
        }
    }
}

//! [`Plan`]: the stages and the output format a command line names, and the rules that complete
//! them: which format the output has, what that format needs and sets, where the stages a stage
//! needs go, and that every option flag has its stage.
//!
//! A plan is made from [`Word`]s in command-line order (a command line maps its arguments to
//! words and nothing more), then completed for its output by [`Plan::choose_output`] and
//! [`Plan::complete`]; [`crate::Chain::build`] does both.

use perfpipe_core::spec::{FlagValue, FormatSpec, Options, Registry, Spec, StageSpec};

use crate::{output, Error};

/// One stage or format argument of a command line, in command-line order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Word<'a> {
    /// A flag a stage or an output format declares, `--NAME [VALUE]`.
    Flag {
        /// The flag's name, without `--`.
        name: &'a str,
        /// What stands after it (`None` for a switch).
        value: Option<&'a str>,
    },
    /// `--stage NAME[:VALUE]`: any stage-adding flag by name; for a switch, `NAME:key=value,…`.
    Stage(&'a str),
    /// `--format NAME[:key=value,…]`: the output's format, whatever its name.
    Format(&'a str),
}

/// One stage of a chain: the flag that named it (its row in `--stats`, `name#2` when repeated),
/// its spec and its options.
#[derive(Clone, Debug)]
pub struct StageUse {
    /// The row name: the flag's name.
    pub label: String,
    /// The stage.
    pub spec: StageSpec,
    /// Its checked options.
    pub options: Options,
}

/// The output format a chain writes, and its checked options.
#[derive(Clone, Debug)]
pub struct FormatUse {
    /// The format.
    pub spec: FormatSpec,
    /// Its options.
    pub options: Options,
}

/// The stages a command line names, in order, and the output format it chose.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// The stages, in command-line order.
    pub stages: Vec<StageUse>,
    /// Options given by flags of a stage the chain does not have: (stage, flag, options).
    unattached: Vec<(&'static str, &'static str, Options)>,
    /// The output format a flag or `--format` chose, with its options.
    pub format: Option<FormatUse>,
    /// Options given by flags of output formats: (flag, options), applied to the output's format.
    format_settings: Vec<(&'static str, Options)>,
    /// `--format perf` was given: the output is perf's whatever its name.
    perf_chosen: bool,
}

/// `--format perf`: perf's own format, the default, which no [`FormatSpec`] declares.
pub const PERF_FORMAT: &str = "perf";

impl Plan {
    /// The plan of `words`: the stages their flags and `--stage`s add, in order (flags that set an
    /// option apply to every instance of their stage, wherever it stands), and the format chosen
    /// by a format flag or `--format`.
    ///
    /// # Errors
    /// [`Error::Usage`] for a word that names no stage, flag or format, or for two formats;
    /// [`Error::Value`] for a value its option does not take.
    pub fn from_words(words: &[Word<'_>], registry: &Registry) -> Result<Plan, Error> {
        let mut plan = Plan::default();
        let mut settings = Vec::new();
        // (format, options), `None` for perf's own, in order.
        let mut chosen: Vec<(Option<FormatSpec>, Options)> = Vec::new();
        for word in words {
            match *word {
                Word::Flag { name, value } => {
                    if let Some((spec, flag)) = registry.flag(name) {
                        let options = spec
                            .options_of(flag, value)
                            .map_err(|e| Error::value(format!("--{name}"), e))?;
                        if flag.adds_stage {
                            plan.push(flag.name, *spec, options);
                        } else {
                            // An option flag several stages declare sets each one's option.
                            for (other, f) in registry.flag_all(name).skip(1) {
                                let o = other
                                    .options_of(f, value)
                                    .map_err(|e| Error::value(format!("--{name}"), e))?;
                                settings.push((other.name, f.name, o));
                            }
                            settings.push((spec.name, flag.name, options));
                        }
                    } else if let Some((spec, flag)) = registry.format_flag(name) {
                        let options = spec
                            .options_of(flag, value)
                            .map_err(|e| Error::value(format!("--{name}"), e))?;
                        if flag.adds_stage {
                            chosen.push((Some(*spec), options));
                        } else {
                            plan.format_settings.push((flag.name, options));
                        }
                    } else {
                        return Err(Error::Usage(format!("--{name}: no such flag")));
                    }
                }
                Word::Stage(arg) => {
                    let (spec, flag, options) = generic_stage(arg, registry)?;
                    plan.push(flag, spec, options);
                }
                Word::Format(arg) => {
                    let (name, list) = arg.split_once(':').unwrap_or((arg, ""));
                    if name == PERF_FORMAT {
                        chosen.push((None, Options::new()));
                        continue;
                    }
                    let Some(spec) = registry.format(name) else {
                        let known: Vec<&str> = std::iter::once(PERF_FORMAT)
                            .chain(registry.formats().iter().map(|f| f.name))
                            .collect();
                        return Err(Error::Usage(format!(
                            "--format {arg}: no format named `{name}` (formats: {})",
                            known.join(", ")
                        )));
                    };
                    let mut options = Options::new();
                    spec.parse_list(&mut options, list)
                        .map_err(|e| Error::value("--format".into(), e))?;
                    chosen.push((Some(*spec), options));
                }
            }
        }
        for (stage, flag, options) in settings {
            plan.set(stage, flag, &options);
        }
        let name = |c: &(Option<FormatSpec>, Options)| c.0.map_or(PERF_FORMAT, |s| s.name);
        if let [first, rest @ ..] = &chosen[..] {
            if let Some(other) = rest.iter().find(|c| name(c) != name(first)) {
                return Err(Error::Usage(format!(
                    "two output formats given: {} and {}",
                    name(first),
                    name(other)
                )));
            }
        }
        if let Some((spec, _)) = chosen.first() {
            plan.perf_chosen = spec.is_none();
            plan.format = spec.map(|spec| {
                let mut options = Options::new();
                for (_, o) in &chosen {
                    options.extend(o);
                }
                FormatUse { spec, options }
            });
        }
        Ok(plan)
    }
}

impl Plan {
    /// Decides the output's format: for a directory output (`DIR/`, or a directory that
    /// exists) the Parquet dataset; else the one a flag or `--format` chose, else the one the
    /// extension of `output` names (`None`: an output that is no file, like a benchmark's), else
    /// perf's own. Applies the format flags to it and puts the stages it needs (`symbolize`) at
    /// the end of the chain unless the chain has them. Looks at the file system (is the output
    /// a directory) but writes nothing: [`crate::output::check_writable`] does that.
    ///
    /// # Errors
    /// [`Error::Output`] for an output the format cannot be written to: a directory for a
    /// format of one file, an extension whose format is compiled out, Parquet on standard
    /// output (see [`crate::output`]); [`Error::Rule`] for a format flag the format does not
    /// take (`--title` for folded stacks), or `symbolize` before perf output, which carries no
    /// symbols; [`Error::Value`] for an option the format sets that its stage does not take.
    pub fn choose_output(
        &mut self,
        registry: &Registry,
        output: Option<&std::path::Path>,
    ) -> Result<(), Error> {
        let stdout = output == Some(std::path::Path::new("-"));
        if let Some(url) = output.filter(|_| !self.perf_chosen) {
            let chosen = self.format.as_ref().map(|f| &f.spec);
            if let Some(spec) = output::url_output(registry, url, chosen)? {
                self.format.get_or_insert(FormatUse {
                    spec,
                    options: Options::new(),
                });
            }
        }
        match output.filter(|&p| !stdout && output::is_directory(p)) {
            Some(dir) => {
                let chosen = if self.perf_chosen {
                    Some(None)
                } else {
                    self.format.as_ref().map(|f| Some(&f.spec))
                };
                let spec = output::dataset_format(registry, dir, chosen)?;
                self.format.get_or_insert(FormatUse {
                    spec,
                    options: Options::new(),
                });
            }
            None if self.format.is_none() && !self.perf_chosen => {
                self.format = output
                    .and_then(|path| registry.format_of_path(path))
                    .map(|spec| FormatUse {
                        spec: *spec,
                        options: Options::new(),
                    });
                if let (None, Some(path)) = (&self.format, output) {
                    output::check_extension(registry, path)?;
                }
            }
            None => {}
        }
        if let (true, Some(format)) = (stdout, &self.format) {
            output::check_stdout(&format.spec)?;
        }
        let Some(mut format) = self.format.take() else {
            if let Some((flag, _)) = self.format_settings.first() {
                let (spec, _) = registry
                    .format_flag(flag)
                    .expect("format flags come from the registry");
                return Err(Error::Rule(format!(
                    "--{flag}: an option of {} output ({})",
                    spec.name,
                    format_choices(spec)
                )));
            }
            if output.is_some() {
                if let Some(s) = self.stages.iter().find(|s| s.spec.name == "symbolize") {
                    return Err(Error::Rule(format!(
                        "--{}: perf's format carries no symbols; write a profile instead ({})",
                        s.label,
                        registry
                            .formats()
                            .iter()
                            .map(format_choices)
                            .collect::<Vec<_>>()
                            .join("; ")
                    )));
                }
            }
            return Ok(());
        };
        for (flag, options) in std::mem::take(&mut self.format_settings) {
            if let Some(key) = options.keys().find(|k| format.spec.option(k).is_none()) {
                let owner = registry
                    .formats()
                    .iter()
                    .find(|f| f.option(key).is_some())
                    .map_or("another", |f| f.name);
                return Err(Error::Rule(format!(
                    "--{flag}: an option of {owner} output, not of {}",
                    format.spec.name
                )));
            }
            // Options from flags first, so `--format NAME:key=…` wins.
            let mut merged = options.clone();
            merged.extend(&format.options);
            format.options = merged;
        }
        for need in format.spec.needs {
            if self.stages.iter().any(|s| s.spec.name == *need) {
                continue;
            }
            let Some(spec) = registry.find(need) else {
                return Err(Error::Rule(format!(
                    "{} output needs the `{need}` stage, which is not registered",
                    format.spec.name
                )));
            };
            let options = self.take_unattached(need).unwrap_or_default();
            self.push(need, *spec, options);
        }
        for &(stage, key, value) in (format.spec.sets)(&format.options) {
            for s in &mut self.stages {
                if s.spec.name == stage && !s.options.has(key) {
                    s.spec
                        .parse_option(&mut s.options, key, value)
                        .map_err(|e| Error::value(format!("{} output", format.spec.name), e))?;
                }
            }
        }
        self.format = Some(format);
        Ok(())
    }

    /// Completes the stages once the output is chosen: fails if a flag set an option of a stage
    /// the chain does not have, then puts before each stage the stages it needs
    /// ([`StageSpec::needs`]) that do not run earlier.
    ///
    /// # Errors
    /// [`Error::Rule`] naming the flag and the stage's own flag, e.g. `--ring-trigger: options
    /// of ring need --ring SIZE`, or a needed stage that is not registered.
    pub fn complete(&mut self, registry: &Registry) -> Result<(), Error> {
        self.check_attached(registry)?;
        self.insert_needed(registry)
    }

    /// Appends a stage, labelled `label` (`label#2`, `#3`… when repeated).
    pub fn push(&mut self, label: &str, spec: StageSpec, options: Options) {
        let seen = self
            .stages
            .iter()
            .filter(|s| s.label.split('#').next() == Some(label))
            .count();
        let label = if seen == 0 {
            label.to_string()
        } else {
            format!("{label}#{}", seen + 1)
        };
        self.stages.push(StageUse {
            label,
            spec,
            options,
        });
    }

    /// Sets `options` on every instance of `stage`; kept aside if there is none.
    fn set(&mut self, stage: &'static str, flag: &'static str, options: &Options) {
        let mut found = false;
        for s in self.stages.iter_mut().filter(|s| s.spec.name == stage) {
            s.options.extend(options);
            found = true;
        }
        if !found {
            self.unattached.push((stage, flag, options.clone()));
        }
    }

    /// The options given by flags of `stage` when the chain has no such stage (e.g. the flight
    /// recorder's trigger, which `record --overwrite` takes for its own dumps), merged.
    pub fn take_unattached(&mut self, stage: &str) -> Option<Options> {
        let mut merged: Option<Options> = None;
        self.unattached.retain(|(s, _, o)| {
            if *s != stage {
                return true;
            }
            merged.get_or_insert_with(Options::new).extend(o);
            false
        });
        merged
    }

    /// Fails if a flag set an option of a stage the chain does not have.
    ///
    /// # Errors
    /// [`Error::Rule`] naming the flag and the stage's own flag.
    pub fn check_attached(&self, registry: &Registry) -> Result<(), Error> {
        // A flag several stages declare needs one of them in the chain.
        let taken = |flag: &str| {
            registry
                .flag_all(flag)
                .any(|(spec, _)| self.stages.iter().any(|s| s.spec.name == spec.name))
        };
        let Some((stage, flag, _)) = self.unattached.iter().find(|(_, f, _)| !taken(f)) else {
            return Ok(());
        };
        let main = registry.find(stage).and_then(|s| {
            let f = s.main_flag()?;
            Some(match s.value_name(f) {
                Some(v) => format!("--{} {v}", f.name),
                None => format!("--{}", f.name),
            })
        });
        Err(Error::Rule(format!(
            "--{flag}: options of `{stage}` need {}",
            main.unwrap_or_else(|| format!("the `{stage}` stage"))
        )))
    }

    /// Puts before each stage the stages it needs that do not run earlier: one instance, just
    /// before the first stage that needs it.
    fn insert_needed(&mut self, registry: &Registry) -> Result<(), Error> {
        let mut i = 0;
        while i < self.stages.len() {
            let spec = self.stages[i].spec;
            for need in spec.needs {
                if self.stages[..i].iter().any(|s| s.spec.name == *need) {
                    continue;
                }
                let Some(needed) = registry.find(need) else {
                    return Err(Error::Rule(format!(
                        "--{}: needs the `{need}` stage, which is not registered",
                        self.stages[i].label
                    )));
                };
                self.stages.insert(
                    i,
                    StageUse {
                        label: needed.name.to_string(),
                        spec: *needed,
                        options: Options::new(),
                    },
                );
                i += 1;
            }
            i += 1;
        }
        Ok(())
    }
}

/// The stage `--stage NAME[:VALUE]` adds: `VALUE` is what the flag takes, or for a switch a
/// `key=value,…` list of the stage's options.
fn generic_stage(
    arg: &str,
    registry: &Registry,
) -> Result<(StageSpec, &'static str, Options), Error> {
    let (name, value) = match arg.split_once(':') {
        Some((n, v)) => (n, Some(v)),
        None => (arg, None),
    };
    let Some((spec, flag)) = registry.flag(name).filter(|(_, f)| f.adds_stage) else {
        let known: Vec<&str> = registry
            .specs()
            .iter()
            .flat_map(|s| s.flags.iter().filter(|f| f.adds_stage))
            .map(|f| f.name)
            .collect();
        return Err(Error::Usage(format!(
            "--stage {arg}: no stage named `{name}` (stages: {})",
            known.join(", ")
        )));
    };
    let options = match (flag.value, value) {
        (FlagValue::None, Some(list)) => spec.options_of(flag, None).and_then(|mut o| {
            spec.parse_list(&mut o, list)?;
            Ok(o)
        }),
        (_, value) => spec.options_of(flag, value),
    }
    .map_err(|e| Error::value(format!("--{}", flag.name), e))?;
    Ok((*spec, flag.name, options))
}

/// How a command line chooses a format: `-o FILE.svg or --flamegraph`.
pub fn format_choices(spec: &FormatSpec) -> String {
    let mut ways: Vec<String> = spec
        .extensions
        .iter()
        .map(|e| format!("-o FILE.{e}"))
        .collect();
    ways.extend(
        spec.flags
            .iter()
            .filter(|f| f.adds_stage)
            .map(|f| format!("--{}", f.name)),
    );
    ways.join(" or ")
}

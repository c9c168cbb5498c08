//! The stage vocabulary: how a stage or an output format declares itself once, as a [`StageSpec`]
//! or a [`FormatSpec`] (its flags, its typed options, its constructor), and the [`Registry`] that
//! holds such declarations. This module imports no stage: the catalogue of built-in stages lives
//! above it (`perfpipe-chain`), and every stage crate below it.
//!
//! From the same declarations a command line generates its stage flags, the generic
//! `--stage NAME[:VALUE]`, a list of stages and the help; a program of your own adds its stages to
//! a registry and hands the result to `perfpipe::main_with` to get the whole CLI.
//!
//! - A stage has **options**, each with a key, a [`Kind`] (switch, text, size, duration, count or
//!   one of a few words) and one line of help. They are parsed and checked once, into [`Options`],
//!   before anything is built.
//! - A stage has **flags**. Most add an instance of the stage to the chain, where they stand on the
//!   command line: `--filter EXPR` (the value is option `expr`), the shorthands `--pid LIST` or
//!   `--comm LIST` (options `pid`, `comm` of the same filter stage), `--buildid-all` (the buildid
//!   stage with `all` set). Others set an option of the stage wherever it is in the chain:
//!   `--ring-trigger EXPR` sets `trigger` of the `ring` stage, `--host-ids WHEN` sets `host` of
//!   every build-id stage.
//! - The constructor gets a [`BuildCtx`]: the pipeline's settings, whether the output takes a
//!   single stream, the [`Requests`] a stage can subscribe to (SIGUSR2 raises
//!   [`DUMP`](crate::DUMP)) and the worker pool the pipeline's stages share.
//!
//! ```
//! use perfpipe_core::spec::{BuildCtx, Flag, Kind, Registry, Spec, StageOption, StageSpec};
//! use perfpipe_core::{Batch, Flow, Out, Stage, StageError};
//!
//! /// Passes batches on.
//! struct Pass;
//! impl Stage for Pass {
//!     fn process(&mut self, batch: Batch, out: &mut Out<'_>) -> Result<Flow, StageError> {
//!         out.push(batch);
//!         Ok(Flow::Continue)
//!     }
//! }
//!
//! const PASS: StageSpec = StageSpec {
//!     name: "pass",
//!     help: "passes batches on",
//!     flags: &[Flag::stage_value("pass", "limit", "pass, up to a size")],
//!     options: &[StageOption { key: "limit", kind: Kind::Size, help: "how much" }],
//!     build: |_, _| Ok(Box::new(Pass)),
//!     needs: &[],
//! };
//!
//! let mut registry = Registry::new();
//! registry.add(PASS);
//! let (spec, flag) = registry.flag("pass").unwrap();
//! let options = spec.options_of(flag, Some("64K")).unwrap();
//! assert_eq!(options.size("limit"), Some(64 << 10));
//! let stage = (spec.build)(&BuildCtx::default(), &options).unwrap();
//! # drop(stage);
//! ```

use std::any::Any;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use std::path::Path;

use crate::{Requests, Settings, Sink, Stage, StageError};

/// Builds a stage from its checked options; the error is the stage's own.
pub type BuildFn = fn(&BuildCtx, &Options) -> Result<Box<dyn Stage>, StageError>;

/// Builds an output format's sink from its checked options, writing to `path` (`-`: standard
/// output).
pub type BuildSinkFn = fn(&BuildCtx, &Options, &Path) -> Result<Box<dyn Sink>, StageError>;

/// An option, flag or setting that cannot be used: which one, and what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("{option}: {message}")]
pub struct OptionError {
    /// The option, flag or stage.
    pub option: &'static str,
    /// What is wrong.
    pub message: String,
}

/// What a stage's constructor gets besides its options.
#[derive(Clone, Debug, Default)]
pub struct BuildCtx {
    /// The pipeline's settings (batch size, queue length).
    pub settings: Settings,
    /// The output takes a single stream (standard output, one file): a stage that emits several
    /// complete streams (the flight recorder's dumps) emits one and stops. False for an output
    /// that writes one file per stream (`-o dump-%n.data`).
    pub single_output: bool,
    /// Requests from outside the pipeline; a stage subscribes to those it acts on.
    pub requests: Requests,
    /// The worker pool the pipeline's stages share.
    pub workers: Workers,
    /// Other resources the pipeline's stages share, each made once ([`Shared`]).
    pub shared: Shared,
}

/// Resources the stages of one pipeline share, each made by the first stage that asks for it
/// under its key and handed to every later one that asks under an equal key: what is costly to
/// make twice or must be counted in one place (the dso file sources `unwind` and `symbolize` both
/// read: an archive listed once, each download made once). The assembly makes one per pipeline,
/// as it makes [`Workers`]; a resource lives while a stage or what it emitted holds it. Cloning
/// shares the store.
#[derive(Clone, Default)]
pub struct Shared(Arc<Mutex<Vec<SharedEntry>>>);

/// A resource and the key it was made for.
struct SharedEntry {
    key: Box<dyn Any + Send + Sync>,
    value: Arc<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.lock().map_or(0, |v| v.len());
        f.debug_struct("Shared").field("resources", &n).finish()
    }
}

impl Shared {
    /// The resource of type `V` made for `key`: the one an earlier call made for an equal key,
    /// else what `make` returns (kept for the later calls). Calls are serialized: two stages
    /// never make the same resource at once.
    ///
    /// # Errors
    /// What `make` returns (nothing is kept then).
    pub fn get_or_try_make<K, V, E>(
        &self,
        key: K,
        make: impl FnOnce() -> Result<V, E>,
    ) -> Result<Arc<V>, E>
    where
        K: PartialEq + Send + Sync + 'static,
        V: Send + Sync + 'static,
    {
        let mut v = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let found = v.iter().find_map(|e| {
            let k = e.key.downcast_ref::<K>()?;
            (*k == key).then(|| e.value.clone().downcast::<V>().ok())?
        });
        if let Some(found) = found {
            return Ok(found);
        }
        let made = Arc::new(make()?);
        v.push(SharedEntry {
            key: Box::new(key),
            value: made.clone(),
        });
        Ok(made)
    }
}

/// A pool of worker threads shared by the stages of one pipeline, started when a stage first asks
/// for it. Cloning shares the pool.
#[derive(Clone, Debug, Default)]
pub struct Workers {
    pool: Arc<OnceLock<Result<Arc<rayon::ThreadPool>, String>>>,
    threads: usize,
}

impl Workers {
    /// A pool of `threads` workers (0: one per cpu), not started yet.
    pub fn new(threads: usize) -> Workers {
        Workers {
            pool: Arc::default(),
            threads,
        }
    }

    /// The pool, started on first use.
    ///
    /// # Errors
    /// [`OptionError`] (of `workers`) when its threads cannot be started.
    pub fn pool(&self) -> Result<Arc<rayon::ThreadPool>, OptionError> {
        self.pool
            .get_or_init(|| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(self.threads)
                    .thread_name(|i| format!("worker-{i}"))
                    .build()
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(|message| OptionError {
                option: "workers",
                message: format!("cannot start the worker threads: {message}"),
            })
    }
}

/// How a stage is offered on the command line: its flags, its options and its constructor.
#[derive(Clone, Copy, Debug)]
pub struct StageSpec {
    /// The stage's name (a verb), also the name of its file or folder in its crate.
    pub name: &'static str,
    /// One line of help.
    pub help: &'static str,
    /// The flags that add the stage or set its options; the first is the stage's own (`--name`).
    pub flags: &'static [Flag],
    /// The options the stage takes.
    pub options: &'static [StageOption],
    /// Builds the stage.
    pub build: BuildFn,
    /// Stages that must run before this one, by name: a chain that has none of them earlier gets
    /// one, put just before the first stage that needs it (the perf stages that read records
    /// `perf record -z` hides inside COMPRESSED records need `decompress`).
    pub needs: &'static [&'static str],
}

/// An output format other than perf's own (`perf` is the default and is not declared here): a
/// profile written by a sink of its own, chosen by the output's extension (`-o flame.svg`), by
/// `--format NAME` or by its own flag (`--folded`). Declared by the format's file, like a stage.
#[derive(Clone, Copy, Debug)]
pub struct FormatSpec {
    /// The format's name, also the name of its file or folder in its crate.
    pub name: &'static str,
    /// One line of help.
    pub help: &'static str,
    /// File extensions that choose it, without the dot (`svg`, `pb.gz`).
    pub extensions: &'static [&'static str],
    /// Its flags: one that chooses the format (`adds_stage`), and flags that set its options.
    /// A flag may set an option that several formats take (`--weight` for folded stacks and
    /// flame graphs): it applies to whichever format the output has.
    pub flags: &'static [Flag],
    /// The options it takes (including those of the flags other formats declare, if it takes
    /// them too).
    pub options: &'static [StageOption],
    /// Stages the sink reads the work of (its annotations), put at the end of the chain when the
    /// chain does not have them: `symbolize` for a profile of named frames.
    pub needs: &'static [&'static str],
    /// Options the format sets on the stages it needs, given its own checked options, as
    /// `(stage, key, value)`; each applies to every instance of the stage whose command line
    /// did not set the key. Folded stacks without `addrs` tell `symbolize` that unmapped
    /// addresses need not be told apart ([`no_settings`] for none).
    pub sets: fn(&Options) -> &'static [(&'static str, &'static str, &'static str)],
    /// Builds the sink.
    pub build: BuildSinkFn,
}

/// A [`FormatSpec::sets`] that sets nothing.
pub fn no_settings(_: &Options) -> &'static [(&'static str, &'static str, &'static str)] {
    &[]
}

/// One command-line flag of a stage.
#[derive(Clone, Copy, Debug)]
pub struct Flag {
    /// The long name, without `--`.
    pub name: &'static str,
    /// One line of help.
    pub help: &'static str,
    /// What its value is.
    pub value: FlagValue,
    /// Options it sets besides its value, as `key=value` (e.g. `all=yes`).
    pub set: &'static [(&'static str, &'static str)],
    /// Whether it adds an instance of the stage (where it stands in the command line) or sets an
    /// option of the stage wherever it is in the chain.
    pub adds_stage: bool,
}

/// What a [`Flag`] takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlagValue {
    /// Nothing: a switch.
    None,
    /// The value of this option.
    Option(&'static str),
    /// A list `key=value,…` of the stage's options.
    Options,
}

impl Flag {
    /// A switch that adds the stage.
    pub const fn stage(name: &'static str, help: &'static str) -> Flag {
        Flag {
            name,
            help,
            value: FlagValue::None,
            set: &[],
            adds_stage: true,
        }
    }

    /// A flag that adds the stage with its value as option `key`.
    pub const fn stage_value(name: &'static str, key: &'static str, help: &'static str) -> Flag {
        Flag {
            value: FlagValue::Option(key),
            ..Flag::stage(name, help)
        }
    }

    /// A flag that adds the stage with a `key=value,…` list of its options.
    pub const fn stage_options(name: &'static str, help: &'static str) -> Flag {
        Flag {
            value: FlagValue::Options,
            ..Flag::stage(name, help)
        }
    }

    /// A flag that sets option `key` of the stage wherever it is in the chain.
    pub const fn option(name: &'static str, key: &'static str, help: &'static str) -> Flag {
        Flag {
            value: FlagValue::Option(key),
            adds_stage: false,
            ..Flag::stage(name, help)
        }
    }

    /// The same flag, also setting these options.
    pub const fn setting(self, set: &'static [(&'static str, &'static str)]) -> Flag {
        Flag { set, ..self }
    }
}

/// One option a stage takes.
#[derive(Clone, Copy, Debug)]
pub struct StageOption {
    /// The key, as in `key=value`.
    pub key: &'static str,
    /// Its type.
    pub kind: Kind,
    /// One line of help.
    pub help: &'static str,
}

/// The type of an option's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `yes`/`no` (also `true`/`false`, `1`/`0`); a bare key in a list means yes.
    Switch,
    /// Free text, shown in the help as this name (`EXPR`, `LIST`).
    Text(&'static str),
    /// A size in bytes with an optional suffix `K`, `M`, `G`.
    Size,
    /// A duration with a unit: `500ms`, `2s`, `1m` (`ns`, `us`, `ms`, `s`, `m`; no unit: seconds).
    Duration,
    /// A whole number.
    Count,
    /// One of these words.
    Choice(&'static [&'static str]),
}

impl Kind {
    /// The name of the value in the help.
    pub fn value_name(self) -> String {
        match self {
            Kind::Switch => "yes|no".into(),
            Kind::Text(name) => name.into(),
            Kind::Size => "SIZE".into(),
            Kind::Duration => "DURATION".into(),
            Kind::Count => "N".into(),
            Kind::Choice(words) => words.join("|"),
        }
    }

    fn parse(self, text: &str) -> Result<Value, String> {
        Ok(match self {
            Kind::Switch => match text {
                "" | "yes" | "true" | "1" | "on" => Value::Switch(true),
                "no" | "false" | "0" | "off" => Value::Switch(false),
                _ => return Err(format!("`{text}` is not yes or no")),
            },
            Kind::Text(_) => Value::Text(text.to_string()),
            Kind::Size => Value::Size(parse_size(text)?),
            Kind::Duration => Value::Duration(parse_duration(text)?),
            Kind::Count => Value::Count(
                text.parse()
                    .map_err(|_| format!("`{text}` is not a whole number"))?,
            ),
            Kind::Choice(words) => match words.iter().find(|w| **w == text) {
                Some(w) => Value::Choice(w),
                None => return Err(format!("`{text}`: expected {}", words.join(", "))),
            },
        })
    }
}

/// Parses `4096`, `256K`, `64M`, `1G`.
///
/// # Errors
/// A message naming the text.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, mult) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 1u64 << 10),
        Some(b'm' | b'M') => (&s[..s.len() - 1], 1 << 20),
        Some(b'g' | b'G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{s}` is not a size like 4096, 256K or 1M"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("`{s}` is too large"))
}

/// Parses `500ms`, `2s`, `1.5s`, `1m`, `250us`, `10ns` (no unit: seconds).
///
/// # Errors
/// A message naming the text.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let scale = match unit {
        "ns" => 1e-9,
        "us" => 1e-6,
        "ms" => 1e-3,
        "" | "s" => 1.0,
        "m" => 60.0,
        _ => f64::NAN,
    };
    num.parse::<f64>()
        .ok()
        .map(|n| n * scale)
        .filter(|v| v.is_finite() && *v >= 0.0 && *v < 1e9)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("`{s}` is not a duration like 500ms, 2s or 1m"))
}

/// A checked option value.
#[derive(Clone, Debug, PartialEq)]
enum Value {
    Switch(bool),
    Text(String),
    Size(u64),
    Duration(Duration),
    Count(u64),
    Choice(&'static str),
}

/// A stage's options, parsed and checked against its [`StageSpec::options`]; read them with the
/// typed getters. A key given twice keeps the last value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Options {
    values: Vec<(&'static str, Value)>,
}

impl Options {
    /// No options.
    pub fn new() -> Options {
        Options::default()
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.values
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }

    /// Whether `key` was given.
    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// A switch: false unless given as yes.
    pub fn switch(&self, key: &str) -> bool {
        matches!(self.get(key), Some(Value::Switch(true)))
    }

    /// A text option (or a choice's word).
    pub fn text(&self, key: &str) -> Option<&str> {
        match self.get(key)? {
            Value::Text(t) => Some(t),
            Value::Choice(w) => Some(w),
            _ => None,
        }
    }

    /// Every value of a text option given more than once, in the order given (`--symbols A
    /// --symbols B`).
    pub fn texts<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.values.iter().filter_map(move |(k, v)| match v {
            Value::Text(t) if *k == key => Some(t.as_str()),
            _ => None,
        })
    }

    /// A size option, in bytes.
    pub fn size(&self, key: &str) -> Option<u64> {
        match self.get(key)? {
            Value::Size(n) => Some(*n),
            _ => None,
        }
    }

    /// A duration option.
    pub fn duration(&self, key: &str) -> Option<Duration> {
        match self.get(key)? {
            Value::Duration(d) => Some(*d),
            _ => None,
        }
    }

    /// A count option.
    pub fn count(&self, key: &str) -> Option<u64> {
        match self.get(key)? {
            Value::Count(n) => Some(*n),
            _ => None,
        }
    }

    /// The keys given, in order (a key given twice appears twice).
    pub fn keys(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.values.iter().map(|(k, _)| *k)
    }

    /// Adds the options of `other` after these (so they win).
    pub fn extend(&mut self, other: &Options) {
        self.values.extend(other.values.iter().cloned());
    }
}

/// What [`StageSpec`] and [`FormatSpec`] share: a name, flags and typed options, and how a
/// flag's value and a `key=value,…` list become checked [`Options`].
pub trait Spec {
    /// The name (a stage's verb, an output format's word).
    fn name(&self) -> &'static str;
    /// The flags.
    fn flags(&self) -> &'static [Flag];
    /// The options.
    fn options(&self) -> &'static [StageOption];

    /// The stage's option `key`.
    fn option(&self, key: &str) -> Option<&'static StageOption> {
        self.options().iter().find(|o| o.key == key)
    }

    /// The stage's own flag, `--name`, the first of [`Spec::flags`].
    fn main_flag(&self) -> Option<&'static Flag> {
        self.flags().first()
    }

    /// Parses and checks one option.
    ///
    /// # Errors
    /// [`OptionError`] for a key the stage does not take or a value of the wrong type.
    fn parse_option(
        &self,
        options: &mut Options,
        key: &str,
        text: &str,
    ) -> Result<(), OptionError> {
        let Some(opt) = self.option(key) else {
            let keys: Vec<&str> = self.options().iter().map(|o| o.key).collect();
            let known = if keys.is_empty() {
                "it takes none".to_string()
            } else {
                format!("keys: {}", keys.join(", "))
            };
            return Err(OptionError {
                option: self.name(),
                message: format!("unknown option `{key}` ({known})"),
            });
        };
        let value = opt.kind.parse(text).map_err(|message| OptionError {
            option: self.name(),
            message: format!("{key}: {message}"),
        })?;
        options.values.push((opt.key, value));
        Ok(())
    }

    /// Parses a `key=value,…` list (a bare `key` is a switch set to yes).
    ///
    /// # Errors
    /// As [`Spec::parse_option`].
    fn parse_list(&self, options: &mut Options, list: &str) -> Result<(), OptionError> {
        for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (key, value) = item.split_once('=').unwrap_or((item, ""));
            self.parse_option(options, key.trim(), value.trim())?;
        }
        Ok(())
    }

    /// The options that `flag` gives with `value` (what stands after it on the command line).
    ///
    /// # Errors
    /// As [`Spec::parse_option`]; also a value for a switch, or none for a flag that takes
    /// one.
    fn options_of(&self, flag: &Flag, value: Option<&str>) -> Result<Options, OptionError> {
        let mut options = Options::new();
        for (k, v) in flag.set {
            self.parse_option(&mut options, k, v)?;
        }
        let missing = || OptionError {
            option: flag.name,
            message: "needs a value".into(),
        };
        match (flag.value, value) {
            (FlagValue::None, None) => {}
            (FlagValue::None, Some(v)) => {
                return Err(OptionError {
                    option: flag.name,
                    message: format!("takes no value (got `{v}`)"),
                })
            }
            (FlagValue::Option(key), Some(v)) => self.parse_option(&mut options, key, v)?,
            (FlagValue::Options, Some(v)) => self.parse_list(&mut options, v)?,
            (FlagValue::Options, None) => {}
            (FlagValue::Option(_), None) => return Err(missing()),
        }
        Ok(options)
    }

    /// What `flag` shows as its value in the help (`EXPR`, `SIZE`, `OPTIONS`), if it takes one:
    /// short, so that `--help` keeps one column for every flag. A flag that takes a list of the
    /// spec's options shows `OPTIONS`; the options themselves are listed by `perfpipe stages`.
    fn value_name(&self, flag: &Flag) -> Option<String> {
        match flag.value {
            FlagValue::None => None,
            FlagValue::Option(key) => Some(
                self.option(key)
                    .map_or_else(|| "VALUE".into(), |o| o.kind.value_name()),
            ),
            FlagValue::Options => Some("OPTIONS".into()),
        }
    }
}

impl Spec for StageSpec {
    fn name(&self) -> &'static str {
        self.name
    }
    fn flags(&self) -> &'static [Flag] {
        self.flags
    }
    fn options(&self) -> &'static [StageOption] {
        self.options
    }
}

impl Spec for FormatSpec {
    fn name(&self) -> &'static str {
        self.name
    }
    fn flags(&self) -> &'static [Flag] {
        self.flags
    }
    fn options(&self) -> &'static [StageOption] {
        self.options
    }
}

/// A set of transform stages and output formats (`perfpipe_chain::builtin()` has the built-in
/// ones; a program adds its own).
#[derive(Clone, Debug, Default)]
pub struct Registry {
    specs: Vec<StageSpec>,
    formats: Vec<FormatSpec>,
}

impl Registry {
    /// A registry of these stages and formats.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// A registry of these stages and formats.
    pub fn of(specs: &[StageSpec], formats: &[FormatSpec]) -> Registry {
        Registry {
            specs: specs.to_vec(),
            formats: formats.to_vec(),
        }
    }

    /// Adds an output format; one with the same name is replaced.
    pub fn add_format(&mut self, spec: FormatSpec) -> &mut Registry {
        match self.formats.iter_mut().find(|s| s.name == spec.name) {
            Some(old) => *old = spec,
            None => self.formats.push(spec),
        }
        self
    }

    /// Every registered output format, in registration order.
    pub fn formats(&self) -> &[FormatSpec] {
        &self.formats
    }

    /// The format called `name`.
    pub fn format(&self, name: &str) -> Option<&FormatSpec> {
        self.formats.iter().find(|f| f.name == name)
    }

    /// The format a file name's extension chooses (the longest matching extension wins, so
    /// `x.pb.gz` is not taken for a `gz`).
    pub fn format_of_path(&self, path: &Path) -> Option<&FormatSpec> {
        let name = path.file_name()?.to_str()?;
        self.formats
            .iter()
            .flat_map(|f| f.extensions.iter().map(move |e| (f, *e)))
            .filter(|(_, e)| {
                name.len() > e.len() + 1
                    && name.ends_with(e)
                    && name.as_bytes()[name.len() - e.len() - 1] == b'.'
            })
            .max_by_key(|(_, e)| e.len())
            .map(|(f, _)| f)
    }

    /// The format that declares the flag `--name`, and the flag.
    pub fn format_flag(&self, name: &str) -> Option<(&FormatSpec, &'static Flag)> {
        self.formats
            .iter()
            .find_map(|s| s.flags.iter().find(|f| f.name == name).map(|f| (s, f)))
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

    /// The stage that declares the flag `--name`, and the flag.
    pub fn flag(&self, name: &str) -> Option<(&StageSpec, &'static Flag)> {
        self.specs
            .iter()
            .find_map(|s| s.flags.iter().find(|f| f.name == name).map(|f| (s, f)))
    }

    /// Every stage that declares the flag `--name`, and its flag: an option flag that several
    /// stages read (`--symfs`, of `symbolize` and `unwind`) is declared alike by each, and sets
    /// the option of each of them that the chain has.
    pub fn flag_all<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Iterator<Item = (&'a StageSpec, &'static Flag)> + 'a {
        self.specs
            .iter()
            .filter_map(move |s| s.flags.iter().find(|f| f.name == name).map(|f| (s, f)))
    }

    /// Builds the stage that `--name value` adds, as the command line would: for programs and
    /// benchmarks that assemble a chain by hand.
    ///
    /// # Errors
    /// [`OptionError`] for a flag that names no stage or a value it does not take; what the
    /// stage's constructor returns.
    pub fn build_flag(
        &self,
        name: &str,
        value: Option<&str>,
        ctx: &BuildCtx,
    ) -> Result<Box<dyn Stage>, StageError> {
        let Some((spec, flag)) = self.flag(name).filter(|(_, f)| f.adds_stage) else {
            return Err(OptionError {
                option: "stage",
                message: format!("no stage flag --{name}"),
            }
            .into());
        };
        (spec.build)(ctx, &spec.options_of(flag, value)?)
    }

    /// Every registered stage, in registration order.
    pub fn specs(&self) -> &[StageSpec] {
        &self.specs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_resource_is_made_once_per_key_and_store() {
        let shared = Shared::default();
        let made = std::cell::Cell::new(0);
        let make = |v: u32| {
            made.set(made.get() + 1);
            Ok::<_, ()>(v)
        };
        let a = shared.get_or_try_make("one", || make(1)).unwrap();
        let b = shared.clone().get_or_try_make("one", || make(2)).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let c = shared.get_or_try_make("two", || make(3)).unwrap();
        assert_eq!((*a, *c, made.get()), (1, 3, 2));
        // Another type under an equal key is another resource; a failure keeps nothing.
        let d = shared
            .get_or_try_make("one", || Ok::<_, ()>("text"))
            .unwrap();
        assert_eq!(*d, "text");
        assert!(shared
            .get_or_try_make("three", || Err::<u32, _>(()))
            .is_err());
        let e = shared.get_or_try_make("three", || make(4)).unwrap();
        assert_eq!(*e, 4);
        // Another pipeline's store makes its own.
        let f = Shared::default()
            .get_or_try_make("one", || make(5))
            .unwrap();
        assert_eq!(*f, 5);
    }

    const SPEC: StageSpec = StageSpec {
        name: "demo",
        help: "",
        flags: &[
            Flag::stage_options("demo", ""),
            Flag::stage_value("demo-size", "size", "").setting(&[("loud", "yes")]),
            Flag::option("demo-after", "after", ""),
        ],
        options: &[
            StageOption {
                key: "size",
                kind: Kind::Size,
                help: "",
            },
            StageOption {
                key: "loud",
                kind: Kind::Switch,
                help: "",
            },
            StageOption {
                key: "after",
                kind: Kind::Duration,
                help: "",
            },
            StageOption {
                key: "mode",
                kind: Kind::Choice(&["a", "b"]),
                help: "",
            },
            StageOption {
                key: "top",
                kind: Kind::Count,
                help: "",
            },
        ],
        build: |_, _| Err("demo".into()),
        needs: &[],
    };

    #[test]
    fn options_are_typed_and_checked_against_the_schema() {
        let o = SPEC
            .options_of(
                &SPEC.flags[0],
                Some("size=64K, loud, after=500ms,mode=b,top=5"),
            )
            .unwrap();
        assert_eq!(o.size("size"), Some(64 << 10));
        assert!(o.switch("loud"));
        assert_eq!(o.duration("after"), Some(Duration::from_millis(500)));
        assert_eq!(o.text("mode"), Some("b"));
        assert_eq!(o.count("top"), Some(5));
        assert!(!o.has("nothing"));
        let err = |v: &str| {
            SPEC.options_of(&SPEC.flags[0], Some(v))
                .unwrap_err()
                .to_string()
        };
        assert!(err("colour=red")
            .contains("unknown option `colour` (keys: size, loud, after, mode, top)"));
        assert!(err("size=lots").contains("is not a size"));
        assert!(err("mode=c").contains("expected a, b"));
        assert!(err("top=-1").contains("not a whole number"));
        assert!(err("loud=maybe").contains("not yes or no"));
        assert!(SPEC
            .options_of(&SPEC.flags[0], None)
            .unwrap()
            .keys()
            .next()
            .is_none());
    }

    #[test]
    fn a_flag_gives_its_value_and_its_fixed_options() {
        let o = SPEC.options_of(&SPEC.flags[1], Some("1M")).unwrap();
        assert_eq!((o.size("size"), o.switch("loud")), (Some(1 << 20), true));
        assert!(SPEC.options_of(&SPEC.flags[1], None).is_err());
        assert_eq!(SPEC.value_name(&SPEC.flags[1]).as_deref(), Some("SIZE"));
        assert_eq!(SPEC.value_name(&SPEC.flags[2]).as_deref(), Some("DURATION"));
        let switch = Flag::stage("x", "");
        assert!(SPEC.options_of(&switch, Some("v")).is_err());
        assert_eq!(SPEC.value_name(&switch), None);
    }

    #[test]
    fn sizes_and_durations_parse() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("256K"), Ok(256 << 10));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999G").is_err());
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn registry_adds_and_replaces_and_finds_flags() {
        let mut r = Registry::of(&[SPEC], &[]);
        let mut spec = SPEC;
        spec.help = "replaced";
        r.add(spec);
        assert_eq!(r.specs().len(), 1);
        assert_eq!(r.find("demo").unwrap().help, "replaced");
        assert_eq!(r.flag("demo-after").unwrap().0.name, "demo");
        assert!(r.flag("nope").is_none());
        assert!(r
            .build_flag("demo-after", Some("1s"), &BuildCtx::default())
            .is_err());
    }
}

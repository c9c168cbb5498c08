//! The request of an [`Otlp`] profile: the dictionary's tables, built once when the profile is
//! written (frames named on the worker pool), then the resources, one per process, each with a
//! profile per sample type.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use perfpipe_profile::kit::{self, frame_name, Naming};
use perfpipe_profile::offcpu::State;
use perfpipe_profile::symbolize::Resolved;

use super::proto::{self, AnyValue};
use super::{Key, Observations, Otlp, OFF_CPU, OPEN};

/// The strings of a request, each once; entry 0 is "".
#[derive(Debug, Default)]
struct Strings {
    table: Vec<String>,
    index: FxHashMap<String, i32>,
}

impl Strings {
    fn get(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i32;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// An attribute's value as a key of the table.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Value {
    Str(String),
    Int(i64),
}

/// The dictionary being built.
#[derive(Debug, Default)]
struct Dictionary {
    strings: Strings,
    attributes: FxHashMap<(i32, Value), i32>,
    /// The attributes of the samples by what they are made of (which attribute, the id it is
    /// made from), so that a sample finds them without making their values.
    made: FxHashMap<(Made, u64), i32>,
    dict: proto::ProfilesDictionary,
}

/// What a sample's attribute is made from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Made {
    Tid,
    Comm,
    Cpu,
    State,
    Open,
}

impl Dictionary {
    fn new() -> Dictionary {
        let mut d = Dictionary::default();
        d.strings.get("");
        d.dict.mapping_table.push(proto::Mapping::default());
        d.dict.location_table.push(proto::Location::default());
        d.dict.function_table.push(proto::Function::default());
        d.dict.link_table.push(proto::Link::default());
        d.dict
            .attribute_table
            .push(proto::KeyValueAndUnit::default());
        d.dict.stack_table.push(proto::Stack::default());
        d
    }

    /// The index of the attribute `made` from `id`, made by `make` the first time.
    fn made(&mut self, made: Made, id: u64, make: impl FnOnce(&mut Dictionary) -> i32) -> i32 {
        if let Some(&i) = self.made.get(&(made, id)) {
            return i;
        }
        let i = make(self);
        self.made.insert((made, id), i);
        i
    }

    /// The index of attribute `key` = `value`.
    fn attribute(&mut self, key: &str, value: Value) -> i32 {
        let key = self.strings.get(key);
        let table = &mut self.dict.attribute_table;
        *self
            .attributes
            .entry((key, value))
            .or_insert_with_key(|(key, value)| {
                table.push(proto::KeyValueAndUnit {
                    key_strindex: *key,
                    value: Some(match value {
                        Value::Str(s) => AnyValue::string(s.as_str()),
                        Value::Int(n) => AnyValue::int(*n),
                    }),
                    unit_strindex: 0,
                });
                table.len() as i32 - 1
            })
    }
}

/// The location index of each frame id (0: not used), and the dictionary's frame tables filled.
fn frames(p: &Otlp, pool: Option<&rayon::ThreadPool>, d: &mut Dictionary) -> Vec<i32> {
    let Some(namer) = p.sources.namer(pool) else {
        return Vec::new();
    };
    let used = p.stacks.used_frames();
    // Each used frame's lines, (display name, system name, dso) per resolved function,
    // innermost first (none for an address no symbol covers), and its dso as perf shows it.
    type Named = (Vec<(String, String, Arc<str>)>, Option<Arc<str>>);
    let named: Vec<Named> = namer.each_used(&used, |f, resolved: Vec<Resolved>| {
        let lines = (resolved.iter())
            .filter_map(|r| {
                let full = r.name.as_deref()?;
                let mut shown = String::new();
                frame_name(r, f.query.ip, Naming::default(), &mut shown);
                Some((shown, full.to_string(), r.dso.clone()))
            })
            .collect();
        (lines, resolved.last().map(|r| r.dso.clone()))
    });
    let dsos = &namer.tables().dsos;
    let mut location_of = vec![0i32; namer.frames().len()];
    let mut mapping_of: FxHashMap<Option<u32>, i32> = FxHashMap::default();
    let mut functions: FxHashMap<(i32, i32, i32), i32> = FxHashMap::default();
    for (i, f) in namer.frames().iter().enumerate() {
        if !used.contains(i as u32) {
            continue;
        }
        let dso = f.query.dso;
        let next = d.dict.mapping_table.len() as i32;
        let mapping_index = *mapping_of.entry(dso.map(|d| d.0)).or_insert_with(|| {
            let info = dso.and_then(|id| Some((id, dsos.get(id)?)));
            // The file as perf shows it (`[kernel.kallsyms]`, not the MMAP's `…_text`).
            let shown = named[i].1.as_deref();
            let (file, build_id) = match &info {
                Some((id, info)) => (
                    d.strings.get(shown.unwrap_or(&info.name)),
                    namer.build_id(*id, Some(info)),
                ),
                None => (d.strings.get("[unknown]"), None),
            };
            let attribute_indices = build_id
                .map(|b| vec![d.attribute("process.executable.build_id.gnu", Value::Str(b))])
                .unwrap_or_default();
            d.dict.mapping_table.push(proto::Mapping {
                memory_start: 0,
                memory_limit: 0,
                file_offset: 0,
                filename_strindex: file,
                attribute_indices,
            });
            next
        });
        let mut lines = Vec::new();
        for (shown, full, dso) in &named[i].0 {
            let key = (
                d.strings.get(shown),
                d.strings.get(full),
                d.strings.get(dso),
            );
            let next = d.dict.function_table.len() as i32;
            let table = &mut d.dict.function_table;
            let function_index = *functions.entry(key).or_insert_with(|| {
                table.push(proto::Function {
                    name_strindex: key.0,
                    system_name_strindex: key.1,
                    filename_strindex: key.2,
                    start_line: 0,
                });
                next
            });
            lines.push(proto::Line {
                function_index,
                line: 0,
                column: 0,
            });
        }
        location_of[i] = d.dict.location_table.len() as i32;
        d.dict.location_table.push(proto::Location {
            mapping_index,
            address: kit::names::address(f),
            lines,
            attribute_indices: Vec::new(),
        });
    }
    location_of
}

/// A profile's sample type: an event's place in the profile's events, or the off-CPU one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Type {
    Event(u32),
    OffCpu,
}

/// The samples of one profile of a request.
type Samples<'a> = Vec<(&'a Key, &'a Observations)>;

/// The request of profile `p` (see the module doc of [`super`]).
pub(super) fn request(
    p: &Otlp,
    pool: Option<&rayon::ThreadPool>,
) -> proto::ExportProfilesServiceRequest {
    let mut d = Dictionary::new();
    let location_of = frames(p, pool, &mut d);
    // Stacks: index = stack id + 1.
    for id in 0..p.stacks.len() as u32 {
        let location_indices = p
            .stacks
            .get(id)
            .iter()
            .map(|&f| location_of.get(f as usize).copied().unwrap_or(0))
            .collect();
        d.dict.stack_table.push(proto::Stack { location_indices });
    }
    // The samples by process, then sample type, in a stable order.
    let mut by_pid: BTreeMap<u32, BTreeMap<Type, Samples<'_>>> = BTreeMap::new();
    for (key, o) in &p.samples {
        let t = match key[0].checked_sub(OFF_CPU) {
            Some(_) => Type::OffCpu,
            None => Type::Event(
                u16::try_from(key[0])
                    .ok()
                    .and_then(|a| p.events.of_attr(a))
                    .unwrap_or(0),
            ),
        };
        by_pid
            .entry(key[2])
            .or_default()
            .entry(t)
            .or_default()
            .push((key, o));
    }
    let (start, end) = p.window.unwrap_or((p.first_time.unwrap_or(0), p.last_time));
    let time_unix_nano = p.facts.wall_ns(start);
    let duration_nano = end.saturating_sub(start);
    let scope = Some(proto::InstrumentationScope {
        name: "perfpipe".into(),
        version: env!("CARGO_PKG_VERSION").into(),
    });
    let mut resource_profiles = Vec::new();
    for (pid, types) in by_pid {
        let mut profiles = Vec::new();
        for (t, mut samples) in types {
            samples.sort_unstable_by_key(|(k, _)| **k);
            let (name, unit, period) = match t {
                Type::Event(e) => {
                    let ev = p.events.get(e);
                    let period = p.periods.get(usize::from(ev.attr)).copied().flatten();
                    let period = period.unwrap_or(0);
                    (ev.name.as_str(), ev.unit, period)
                }
                Type::OffCpu => ("off_cpu", "nanoseconds", 0),
            };
            let value_type = proto::ValueType {
                type_strindex: d.strings.get(name),
                unit_strindex: d.strings.get(unit),
            };
            let samples = samples
                .into_iter()
                .map(|(key, o)| sample(p, &mut d, key, o))
                .collect();
            profiles.push(proto::Profile {
                sample_type: Some(value_type),
                samples,
                time_unix_nano,
                duration_nano,
                period_type: Some(value_type),
                period: period as i64,
                original_payload_format: String::new(),
                ..proto::Profile::default()
            });
        }
        resource_profiles.push(proto::ResourceProfiles {
            resource: Some(resource(p, pid)),
            scope_profiles: vec![proto::ScopeProfiles {
                scope: scope.clone(),
                profiles,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        });
    }
    d.dict.string_table = d.strings.table;
    proto::ExportProfilesServiceRequest {
        resource_profiles,
        dictionary: Some(d.dict),
    }
}

/// The resource of process `pid`: the host, the pid and the process's name.
fn resource(p: &Otlp, pid: u32) -> proto::Resource {
    let kv = |key: &str, value| proto::KeyValue {
        key: key.into(),
        value: Some(value),
    };
    let mut attributes = Vec::new();
    if let Some(host) = &p.facts.host {
        attributes.push(kv("host.name", AnyValue::string(host.as_str())));
    }
    if pid != u32::MAX {
        attributes.push(kv("process.pid", AnyValue::int(i64::from(pid))));
    }
    // The main thread's name, else the first thread's sampled.
    let name = (p.samples.keys())
        .filter(|k| k[2] == pid)
        .min_by_key(|k| (k[3] != pid, k[3], k[1]))
        .map(|k| p.comms.name(k[1]));
    if let Some(name) = name {
        attributes.push(kv("process.executable.name", AnyValue::string(name)));
    }
    proto::Resource { attributes }
}

/// One sample: its stack, its thread's attributes, its observations made wall-clock.
fn sample(p: &Otlp, d: &mut Dictionary, key: &Key, o: &Observations) -> proto::Sample {
    let [kind, comm, _, tid, cpu, stack] = *key;
    let int = |key: &'static str, n: u32| {
        move |d: &mut Dictionary| d.attribute(key, Value::Int(i64::from(n)))
    };
    let mut attribute_indices = vec![
        d.made(Made::Tid, tid.into(), int("thread.id", tid)),
        d.made(Made::Comm, comm.into(), |d| {
            d.attribute("thread.name", Value::Str(p.comms.name(comm).to_string()))
        }),
    ];
    if cpu != u32::MAX {
        attribute_indices.push(d.made(Made::Cpu, cpu.into(), int("cpu.logical_number", cpu)));
    }
    if let Some(off) = kind.checked_sub(OFF_CPU) {
        let state = off & (OPEN - 1);
        attribute_indices.push(d.made(Made::State, state.into(), |d| {
            let name = State::ALL.get(state as usize).map_or("?", |s| s.name());
            d.attribute("thread.state", Value::Str(name.into()))
        }));
        if off & OPEN != 0 {
            attribute_indices.push(d.made(Made::Open, 1, |d| {
                d.attribute("open_at_end", Value::Str("true".into()))
            }));
        }
    }
    proto::Sample {
        stack_index: stack as i32 + 1,
        attribute_indices,
        link_index: 0,
        values: o.values.clone(),
        timestamps_unix_nano: o.times.iter().map(|&t| p.facts.wall_ns(t)).collect(),
    }
}

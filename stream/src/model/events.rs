//! The events of a stream, named by one rule: [`name`] (from an attr), the unit of an event's
//! period ([`unit()`]), and [`Events`] (the events by id, in the order their samples first
//! came). The profiles name their events by it, and the filter's `event` field matches it.
//!
//! The rule is perf's for an attr without a name (`evsel__name()` in `tools/perf/util/evsel.c`)
//! where perf names it from its type and config alone: the tables `evsel__hw_names` and
//! `evsel__sw_names` (`cycles`, `page-faults`, …). For any other attr perf's names say too
//! little to tell two events apart (`unknown attr type: 8`, `unknown-software`), so the name is
//! `type{type}-config{config:#x}`; like perf's, it depends on the attr alone, not on where the
//! attr stands in the stream. A tracepoint is named `system:name` from the stream's tracing data
//! (its `format` file's id is the attr's config), as perf names it. Modifiers (`:u`, `:ppp`) are
//! not added, and a name the recording gave an event (EVENT_UPDATE, the EVENT_DESC feature) is
//! not used: the name is the same whichever tool recorded the stream.

use crate::format::{feature, Endian, RecordType, StreamInfo};

/// `PERF_TYPE_HARDWARE`
const TYPE_HARDWARE: u32 = 0;
/// `PERF_TYPE_SOFTWARE`
const TYPE_SOFTWARE: u32 = 1;

/// `evsel__hw_names`, by `PERF_COUNT_HW_*`.
const HARDWARE: [&str; 10] = [
    "cycles",
    "instructions",
    "cache-references",
    "cache-misses",
    "branches",
    "branch-misses",
    "bus-cycles",
    "stalled-cycles-frontend",
    "stalled-cycles-backend",
    "ref-cycles",
];

/// `evsel__sw_names`, by `PERF_COUNT_SW_*`.
const SOFTWARE: [&str; 10] = [
    "cpu-clock",
    "task-clock",
    "page-faults",
    "context-switches",
    "cpu-migrations",
    "minor-faults",
    "major-faults",
    "alignment-faults",
    "emulation-faults",
    "dummy",
];

/// The name of the event of attr `type_`, `config` (see the module doc).
pub fn name_of(type_: u32, config: u64) -> String {
    let table: &[&str] = match type_ {
        TYPE_HARDWARE => &HARDWARE,
        TYPE_SOFTWARE => &SOFTWARE,
        _ => &[],
    };
    match usize::try_from(config).ok().and_then(|c| table.get(c)) {
        Some(name) => (*name).to_string(),
        None => format!("type{type_}-config{config:#x}"),
    }
}

/// The name of the event of attr `attr` of the stream: a tracepoint's `system:name` from the
/// stream's tracing data (as perf names it, `evsel__tp_format`), else [`name_of`] its type and
/// config, or `event{attr}` for an index the stream has no attr at.
pub fn name(info: &StreamInfo, attr: u16) -> String {
    if let Some(tp) = info.tracepoint(usize::from(attr)) {
        return format!("{}:{}", tp.system, tp.name);
    }
    match info.attr(attr) {
        Some(a) => name_of(a.type_, a.config),
        None => format!("event{attr}"),
    }
}

/// The unit of the period of attr `attr`'s samples: `nanoseconds` for `cpu-clock` and
/// `task-clock`, else `count`.
pub fn unit(info: &StreamInfo, attr: u16) -> &'static str {
    match info.attr(attr).map(|a| (a.type_, a.config)) {
        Some((TYPE_SOFTWARE, 0 | 1)) => "nanoseconds",
        _ => "count",
    }
}

/// One event of a profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Its attr's index in the stream.
    pub attr: u16,
    /// Its [`name`].
    pub name: String,
    /// Its period's [`unit()`].
    pub unit: &'static str,
}

/// The events of a profile by id, in the order their samples first came.
#[derive(Debug, Default)]
pub struct Events {
    list: Vec<Event>,
    /// Id + 1 by attr index (0: not seen).
    by_attr: Vec<u32>,
}

impl Events {
    /// The id of attr `attr`'s event, named the first time it is seen.
    pub fn id(&mut self, info: &StreamInfo, attr: u16) -> u32 {
        let i = usize::from(attr);
        if let Some(&id) = self.by_attr.get(i).filter(|&&id| id != 0) {
            return id - 1;
        }
        if self.by_attr.len() <= i {
            self.by_attr.resize(i + 1, 0);
        }
        self.list.push(Event {
            attr,
            name: name(info, attr),
            unit: unit(info, attr),
        });
        let id = self.list.len() as u32;
        self.by_attr[i] = id;
        id - 1
    }

    /// The id of attr `attr`'s event, if its samples came.
    pub fn of_attr(&self, attr: u16) -> Option<u32> {
        self.by_attr
            .get(usize::from(attr))
            .filter(|&&id| id != 0)
            .map(|id| id - 1)
    }

    /// The events by id.
    pub fn list(&self) -> &[Event] {
        &self.list
    }

    /// The event of `id`.
    ///
    /// # Panics
    /// When `id` was not given by [`Events::id`].
    pub fn get(&self, id: u32) -> &Event {
        &self.list[id as usize]
    }
}

/// `PERF_EVENT_UPDATE__NAME`, the EVENT_UPDATE type that carries an event name.
const EVENT_UPDATE_NAME: u64 = 2;

/// The names perf gave the events, by attr index, as the stream tells them (EVENT_UPDATE, the
/// EVENT_DESC feature): perf's own evsel names, such as `offcpu-time` for its BPF-output event.
/// The profile outputs name events by [`name`] instead, one rule for every stream.
#[derive(Debug, Default)]
pub struct PerfNames {
    names: Vec<Option<String>>,
}

impl PerfNames {
    /// The name of attr `index`, if known.
    pub fn name(&self, index: usize) -> Option<&str> {
        self.names.get(index)?.as_deref()
    }

    fn set(&mut self, index: usize, name: &[u8]) {
        if self.names.len() <= index {
            self.names.resize(index + 1, None);
        }
        self.names[index] = Some(String::from_utf8_lossy(name).into_owned());
    }

    fn index_of_id(info: &StreamInfo, id: u64) -> Option<usize> {
        info.attrs.iter().position(|a| a.ids.contains(&id))
    }

    /// Takes in an EVENT_UPDATE or HEADER_FEATURE record (others are ignored). Malformed records
    /// are ignored too: perf reports such records itself.
    pub fn observe(&mut self, rec: &[u8], rt: RecordType, info: &StreamInfo) {
        let e = info.endian;
        if rt == RecordType::EVENT_UPDATE {
            if e.u64(rec, 8) != Some(EVENT_UPDATE_NAME) {
                return;
            }
            let (Some(id), Some(name)) = (e.u64(rec, 16), rec.get(24..)) else {
                return;
            };
            let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
            let index = match PerfNames::index_of_id(info, id) {
                Some(i) => i,
                None if info.attrs.len() == 1 => 0,
                None => return,
            };
            self.set(index, name);
        } else if rt == RecordType::HEADER_FEATURE
            && e.u64(rec, 8) == Some(feature::EVENT_DESC.into())
        {
            self.event_desc(&rec[16.min(rec.len())..], e, info);
        }
    }

    /// `write_event_desc()` in `tools/perf/util/header.c`: `u32 nr, attr_size`, then per event the
    /// attr, `u32 nr_ids`, the name as `u32 len` + `len` bytes (NUL-padded), and `u64 ids[nr_ids]`.
    fn event_desc(&mut self, b: &[u8], e: Endian, info: &StreamInfo) -> Option<()> {
        let nr = e.u32(b, 0)? as usize;
        let attr_size = e.u32(b, 4)? as usize;
        let mut at = 8usize;
        for i in 0..nr.min(4096) {
            at = at.checked_add(attr_size)?;
            let nr_ids = e.u32(b, at)? as usize;
            let len = e.u32(b, at + 4)? as usize;
            let name = b.get(at + 8..at.checked_add(8)?.checked_add(len)?)?;
            let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
            at = at + 8 + len;
            let first_id = if nr_ids > 0 { e.u64(b, at) } else { None };
            at = at.checked_add(nr_ids.checked_mul(8)?)?;
            let index = first_id
                .and_then(|id| PerfNames::index_of_id(info, id))
                .unwrap_or(i);
            self.set(index, name);
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use perfpipe_core::harness::{raw_batches, run_stage};

    use crate::decode::DecodeConfig;
    use crate::synth::SynthStream;

    use super::*;

    /// The stream info of a synthetic stream whose one attr is `type_`, `config`.
    fn info_of(type_: u32, config: u64) -> StreamInfo {
        let stream = SynthStream::with_event(type_, config).into_bytes();
        let batches = run_stage(
            &mut DecodeConfig::default().build(),
            raw_batches(&stream, &[stream.len()], 0),
        )
        .unwrap();
        StreamInfo::of(&batches[0]).unwrap().clone()
    }

    #[test]
    fn an_event_is_named_as_perf_names_an_attr_without_a_name() {
        for (t, c, name, unit) in [
            (1, 0, "cpu-clock", "nanoseconds"),
            (1, 1, "task-clock", "nanoseconds"),
            (1, 2, "page-faults", "count"),
            (0, 0, "cycles", "count"),
            (0, 1, "instructions", "count"),
            (0, 5, "branch-misses", "count"),
            // What perf's tables do not name: its type and config, never its place in the stream.
            (1, 77, "type1-config0x4d", "count"),
            (4, 0x1a2b, "type4-config0x1a2b", "count"),
            (8, 0x3c, "type8-config0x3c", "count"),
        ] {
            let info = info_of(t, c);
            assert_eq!(name_of(t, c), name, "type {t} config {c}");
            assert_eq!(self::name(&info, 0), name);
            assert_eq!(self::unit(&info, 0), unit, "{name}");
        }
        let info = info_of(4, 0x1a2b);
        assert_eq!(self::name(&info, 3), "event3", "no attr at that index");
        let mut events = Events::default();
        assert_eq!(events.id(&info, 0), 0);
        assert_eq!(events.id(&info, 0), 0);
        assert_eq!(events.of_attr(0), Some(0));
        assert_eq!(events.of_attr(1), None);
        assert_eq!(events.get(0).name, "type4-config0x1a2b");
    }
}

//! The off-CPU model: for each time a thread is switched out, how long until it is next switched
//! in, with the stack it blocked in and the state it left in.
//!
//! Two recording forms feed it, both read by [`Switches`]:
//!
//! - **system-wide**, `perf record -a -g -e sched:sched_switch`: each `sched_switch` sample is a
//!   switch-out of `prev_pid` (its callchain is where that thread blocked, its `prev_state` the
//!   state) and a switch-in of `next_pid`, at the sample's time, on any cpu. The fields are read
//!   by name through the recording's tracing data ([`perfpipe_stream::format::tracing`]).
//! - **per process**, `perf record -g -e context-switches -c 1 --switch-events -- CMD`: the
//!   `context-switches` sample carries the stack; the thread's PERF_RECORD_SWITCH OUT record (just
//!   after it, same cpu) the switch-out, preempted when `SWITCH_OUT_PREEMPT` is set (state `R`),
//!   else blocked (`S` or `D`: the record cannot tell, [`State::Blocked`]); its next SWITCH IN the
//!   switch-in. A `sched:sched_switch -g --switch-events` recording works the same, with the
//!   tracepoint's state.
//!
//! The stream is in time order per cpu, not across cpus: `perf record` copies each cpu's ring in
//! turn, so a round (between FINISHED_ROUNDs) holds one cpu's records and then the next's, and a
//! thread switched out on one cpu and in on another may arrive in either order, hundreds of ms
//! apart when the rings fill slowly. So each thread's switches wait until every switch before
//! them has arrived: when every cpu has written a later one (records of one cpu arrive in time
//! order; samples say their cpu with `PERF_SAMPLE_CPU`, which `-a` sets; the NRCPUS feature says
//! how many cpus to wait for), or by perf's rule for
//! FINISHED_ROUND (every record of round N+2 is later than every record of round N). Intervals
//! are then closed in time order per thread, exactly as if the stream were sorted. Memory: one
//! entry per thread, plus the switches not yet settled, at most [`MAX_PENDING`] per thread (past
//! it the oldest is decided with what has arrived): the switches of about one round, as perf's
//! own ordered queue holds, never the recording's.
//!
//! At the end, switches still waiting are decided, and a thread still off the cpu gets an
//! interval closed at the last event time of the stream, flagged [`Interval::open_at_end`].
//!
//! **Lost switch-ins**: a thread switched out while still off the cpu lost its switch-in (a
//! full ring; or a switch the kernel never sampled: on some machines the switch-outs of a few
//! tasks are never recorded, so whatever they switch to comes in unseen). In the system-wide
//! form it came in on that cpu after the cpu's previous `sched_switch`: the interval is closed
//! there ([`Switch::came_in_after`], [`OffCpuCounts::lost_ins`]), which is what `perf sched
//! timehist` charges; without that bound (per process, or a bound before the switch-out) it is
//! dropped ([`OffCpuCounts::unmatched`]).
//!
//! **Wakers**: when [`Switches::wakeups`] is set and the recording has `sched:sched_waking` or
//! `sched:sched_wakeup` samples (`perf record -a -g -e sched:sched_switch -e
//! sched:sched_waking`), each wakeup joins the woken thread's switches (its `pid` field, read by
//! name) and is ordered with them by time, as they are: an interval's [`Interval::waker`] is the
//! last wakeup of the thread after its switch-out and at or before its switch-in, the wakeup
//! sample's thread and stack. A thread keeps only its latest wakeup once decided; a preempted
//! (`R`) interval has none (nothing wakes a runnable thread). With both tracepoints recorded,
//! `sched_waking` is used: it fires in the waker's context, at the start of `try_to_wake_up()`,
//! where `sched_wakeup` may fire later on the woken thread's cpu (a wakeup queued to its cpu
//! runs there, in whatever task or interrupt is current).
//!
//! The stack is the caller's: `S` is whatever it keys a sample's stack by (an interned stack id).

use std::collections::VecDeque;

use perfpipe_stream::format::tracing::{EventFormat, FieldFormat, Value};
use perfpipe_stream::format::{
    feature, features, misc, Endian, Record, RecordType, Sample, StreamInfo,
};
use perfpipe_stream::model::IdMap;

/// Most switches a thread keeps waiting for time order; past it the oldest is decided. A round
/// of `perf record` can hold hundreds of ms of one cpu before the next cpu's records: a thread
/// that switches every few µs (`perf bench sched pipe`) has tens of thousands in one.
pub const MAX_PENDING: usize = 1 << 17;

/// Cpus whose order is followed (records of higher cpus wait for FINISHED_ROUNDs).
const MAX_CPUS: usize = 4096;

/// `PERF_TYPE_SOFTWARE`
const PERF_TYPE_SOFTWARE: u32 = 1;
/// `PERF_COUNT_SW_CONTEXT_SWITCHES`
const SW_CONTEXT_SWITCHES: u64 = 3;

/// The state a thread left the cpu in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    /// `S`: sleeping, interruptible (waiting for an event: a timer, a pipe, a futex).
    Sleeping,
    /// `D`: uninterruptible (waiting for I/O, or a kernel lock).
    Uninterruptible,
    /// `R`: still runnable: preempted, or yielded; the time is spent on the run queue.
    Runnable,
    /// Switched out not runnable, `S` or `D` unknown (a SWITCH record has only the preempt flag).
    Blocked,
    /// Another state letter of `prev_state` (`I` idle kernel thread, `T` stopped, `t` traced,
    /// `X` dead, `Z` zombie, `P` parked).
    Other(u8),
}

impl State {
    /// From the text the print format gives `prev_state` (`S`, `D`, `R`, `R+`, `I`, `S|D`…): its
    /// first letter.
    pub fn from_text(t: &str) -> State {
        match t.as_bytes().first() {
            Some(b'S') => State::Sleeping,
            Some(b'D') => State::Uninterruptible,
            Some(b'R') | None => State::Runnable,
            Some(&c) => State::Other(c),
        }
    }

    /// Every state a profile tells apart, in the order profiles list them: a letter not among
    /// them is the last, `?`.
    pub const ALL: [State; 13] = [
        State::Sleeping,
        State::Uninterruptible,
        State::Runnable,
        State::Blocked,
        State::Other(b'I'),
        State::Other(b'T'),
        State::Other(b't'),
        State::Other(b'X'),
        State::Other(b'Z'),
        State::Other(b'P'),
        State::Other(b'W'),
        State::Other(b'K'),
        State::Other(b'?'),
    ];

    /// Its place in [`State::ALL`] (an unknown letter's is the last, `?`'s).
    pub fn index(self) -> usize {
        State::ALL
            .iter()
            .position(|s| *s == self)
            .unwrap_or(State::ALL.len() - 1)
    }

    /// Its name in profiles: `S`, `D`, `R`, `S|D` for [`State::Blocked`], or the letter (`?`
    /// for one not in [`State::ALL`]).
    pub fn name(self) -> &'static str {
        const NAMES: [&str; 13] = [
            "S", "D", "R", "S|D", "I", "T", "t", "X", "Z", "P", "W", "K", "?",
        ];
        NAMES[self.index()]
    }
}

/// What one record says about switches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Switch {
    /// A thread switched out: `(pid, tid, time, state)`. `pid` is `u32::MAX` when unknown.
    pub out: Option<(u32, u32, u64, State)>,
    /// A thread switched in: `(tid, time)`.
    pub switch_in: Option<(u32, u64)>,
    /// The record is a sample whose stack is the switch-out's (the `sched_switch` sample itself).
    pub stack: bool,
    /// The record is a `context-switches` sample of this thread: its stack is the one of the
    /// thread's SWITCH OUT record that follows.
    pub stack_of: Option<u32>,
    /// The cpu the record was written on, when it says (`PERF_SAMPLE_CPU`): records of one cpu
    /// arrive in time order, which lets the model decide before the round ends.
    pub cpu: Option<u32>,
    /// The recording's online cpus (the NRCPUS feature): the model follows the cpus' order only
    /// once it has seen that many, so that a cpu whose records come later is waited for.
    pub cpus_online: Option<u32>,
    /// A thread left the cpu for the last time: `(tid, time)`. An exiting task's last switch, in
    /// `do_task_dead()`: `prev_state` `X` (dead) or `Z` (zombie, a process's last thread until
    /// it is reaped). The thread waits for nothing and never comes back: no interval (nor one
    /// "open at end" from there to the end), as `perf sched timehist`, which skips these
    /// samples (their tid is -1), closes none; the switch-in the sample carries counts.
    ///
    /// A sample's tid is -1 from the moment the exiting thread's pid is released
    /// (`perf_event_tid()` of a task `!pid_alive()`; `perf script` shows `:-1 PID/-1`), which is
    /// before its last switches: one preempted there (`R+`) is switched in again and is an
    /// interval like any other, of `prev_pid`, in the process the sample's pid names.
    pub exit: Option<(u32, u64)>,
    /// A thread was woken ([`Switches::wakeups`]): the `sched_waking`/`sched_wakeup` sample,
    /// whose stack is the waker's.
    pub wake: Option<Wake>,
    /// An interval the recorder measured itself: `(pid, tid, time, ns)`, perf's `offcpu-time`
    /// samples (`perf record --off-cpu`: BPF at `sched_switch` measures each blocked time and
    /// writes a sample of the `offcpu-time` BPF-output event whose period is the time off the
    /// cpu in ns, whose callchain is where the thread blocked, and whose time is its switch-in
    /// or, for those written at the end of the recording, `OFF_CPU_TIMESTAMP` and up). The
    /// sample's stack is the interval's; the state is S|D ([`State::Blocked`]): perf's BPF
    /// program only measures tasks that blocked (`TASK_INTERRUPTIBLE | TASK_UNINTERRUPTIBLE`).
    pub measured: Option<(u32, u32, u64, u64)>,
    /// The time of the cpu's previous `sched_switch` sample, for the switch-out of one: the
    /// thread came on that cpu after it. When the thread's switch-in was not recorded (lost
    /// with a full ring, or a switch the kernel did not sample), its interval is closed there,
    /// as `perf sched timehist` closes it (its `tprev`): a lower bound of the switch-in.
    pub came_in_after: Option<u64>,
}

/// perf's dummy timestamp of the `offcpu-time` samples it writes at the end of a recording
/// (`OFF_CPU_TIMESTAMP` in `tools/perf/util/bpf_off_cpu.c`, `~0ull << 32`, counting up): no event
/// time, so such times do not move the end of the stream.
pub const OFF_CPU_TIMESTAMP: u64 = !0 << 32;

/// `PERF_COUNT_SW_BPF_OUTPUT`: the event `perf record --off-cpu` names `offcpu-time`.
const SW_BPF_OUTPUT: u64 = 10;

/// A wakeup: thread `tid` woken at `time` by the sample's thread `waker_tid`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wake {
    /// The woken thread (the tracepoint's `pid` field).
    pub tid: u32,
    /// When.
    pub time: u64,
    /// The waker's thread (0: the idle task, an interrupt on an idle cpu).
    pub waker_tid: u32,
}

/// How a `sched_wakeup`/`sched_waking` payload is read.
#[derive(Clone, Debug)]
struct SchedWakeup {
    pid: FieldFormat,
    min_size: usize,
    /// `sched_waking` (else `sched_wakeup`).
    waking: bool,
}

/// How a `sched_switch` payload is read: its fields by name, once per format.
#[derive(Clone, Debug)]
struct SchedSwitch {
    prev_pid: FieldFormat,
    prev_state: FieldFormat,
    next_pid: FieldFormat,
    min_size: usize,
    format: EventFormat,
    /// `prev_state` values seen, and their state (the text is rendered once per value).
    states: Vec<(u64, State)>,
}

/// What each attr's samples are, for switches.
#[derive(Clone, Debug)]
enum Kind {
    Other,
    SchedSwitch(Box<SchedSwitch>),
    Wakeup(Box<SchedWakeup>),
    ContextSwitches,
    /// perf's `offcpu-time` (a BPF-output event whose samples have a period and a callchain).
    OffCpuTime,
    /// A tracepoint whose format the tracing data lacks.
    NoFormat,
}

/// Reads switches out of records: [`Switch`] per record, through each attr's kind.
#[derive(Debug, Default)]
pub struct Switches {
    kinds: Vec<Kind>,
    /// (attrs, tracing data) the kinds were computed for.
    computed_for: (usize, usize),
    /// Whether any attr is `sched_switch`: then SWITCH OUT records are not switch-outs (the
    /// tracepoint's samples are, with their state).
    has_tracepoint: bool,
    /// Read `sched_waking`/`sched_wakeup` samples as wakeups ([`Switch::wake`]); off, they are
    /// samples like any other.
    pub wakeups: bool,
    /// `sched_switch`, `sched_wakeup` and `sched_waking` samples whose payload is shorter than
    /// the format (skipped).
    pub short_payloads: u64,
    /// Tracepoint samples whose format the tracing data lacks (skipped).
    pub no_format: u64,
    /// Per cpu, the time of its latest `sched_switch` sample (0: none yet); records of one cpu
    /// arrive in time order, so it is the one before the next ([`Switch::came_in_after`]).
    cpu_switched: Vec<u64>,
}

impl Switches {
    fn compute(&mut self, info: &StreamInfo) {
        let key = (
            info.attrs.len(),
            info.tracing
                .as_ref()
                .map_or(0, |t| std::sync::Arc::as_ptr(t) as usize),
        );
        if key == self.computed_for {
            return;
        }
        self.computed_for = key;
        self.kinds = (0..info.attrs.len())
            .map(|i| {
                let a = &info.attrs[i];
                if a.type_ == PERF_TYPE_SOFTWARE && a.config == SW_CONTEXT_SWITCHES {
                    return Kind::ContextSwitches;
                }
                let measured = perfpipe_stream::format::sample::PERIOD
                    | perfpipe_stream::format::sample::CALLCHAIN;
                if a.type_ == PERF_TYPE_SOFTWARE
                    && a.config == SW_BPF_OUTPUT
                    && a.sample_type & measured == measured
                {
                    return Kind::OffCpuTime;
                }
                if a.type_ != perfpipe_stream::format::PERF_TYPE_TRACEPOINT {
                    return Kind::Other;
                }
                let Some(ev) = info.tracepoint(i) else {
                    return Kind::NoFormat;
                };
                let waking = ev.name == "sched_waking";
                if self.wakeups && (waking || ev.name == "sched_wakeup") {
                    return match ev.field("pid") {
                        Some(pid) => Kind::Wakeup(Box::new(SchedWakeup {
                            pid: pid.clone(),
                            min_size: ev.min_size(),
                            waking,
                        })),
                        None => Kind::NoFormat,
                    };
                }
                if ev.name != "sched_switch" {
                    return Kind::Other;
                }
                let f = |n: &str| ev.field(n).cloned();
                match (f("prev_pid"), f("prev_state"), f("next_pid")) {
                    (Some(prev_pid), Some(prev_state), Some(next_pid)) => {
                        Kind::SchedSwitch(Box::new(SchedSwitch {
                            prev_pid,
                            prev_state,
                            next_pid,
                            min_size: ev.min_size(),
                            format: ev.clone(),
                            states: Vec::new(),
                        }))
                    }
                    _ => Kind::NoFormat,
                }
            })
            .collect();
        self.has_tracepoint = self.kinds.iter().any(|k| matches!(k, Kind::SchedSwitch(_)));
        // Both wakeup tracepoints: `sched_waking` only (in the waker's context; each wakeup
        // would otherwise come twice).
        if self
            .kinds
            .iter()
            .any(|k| matches!(k, Kind::Wakeup(w) if w.waking))
        {
            for k in &mut self.kinds {
                if matches!(k, Kind::Wakeup(w) if !w.waking) {
                    *k = Kind::Other;
                }
            }
        }
    }

    /// Whether the stream has a source of switches: a `sched_switch` tracepoint or a
    /// `context-switches` event (a profile that always runs the model asks this first).
    pub fn active(&mut self, info: &StreamInfo) -> bool {
        self.compute(info);
        self.kinds.iter().any(|k| {
            matches!(
                k,
                Kind::SchedSwitch(_) | Kind::ContextSwitches | Kind::OffCpuTime
            )
        })
    }

    /// Notes a `sched_switch` sample of `cpu` at `time`: the time of the cpu's one before, if
    /// any.
    fn cpu_switched(&mut self, cpu: u32, time: u64) -> Option<u64> {
        let i = usize::try_from(cpu).ok().filter(|&i| i < MAX_CPUS)?;
        if self.cpu_switched.len() <= i {
            self.cpu_switched.resize(i + 1, 0);
        }
        let before = std::mem::replace(&mut self.cpu_switched[i], time);
        (before != 0).then_some(before)
    }

    /// What the record `rec` of attr index `tag` says about switches.
    pub fn read(&mut self, rec: &Record<'_>, tag: u32, info: &StreamInfo) -> Switch {
        self.compute(info);
        let e = info.endian;
        match rec.record_type() {
            RecordType::SAMPLE => {
                let Some(s) = rec.sample() else {
                    return Switch::default();
                };
                let time = s.time().unwrap_or(0);
                let cpu = s.cpu();
                let sw = match self.kinds.get_mut(tag as usize) {
                    Some(Kind::SchedSwitch(sw)) => {
                        let read = sched_switch(sw, &s, e, time);
                        let before = cpu.and_then(|c| self.cpu_switched(c, time));
                        match read {
                            Some(sw) => Switch {
                                came_in_after: before.filter(|_| sw.out.is_some()),
                                ..sw
                            },
                            None => {
                                self.short_payloads += 1;
                                Switch::default()
                            }
                        }
                    }
                    Some(Kind::Wakeup(w)) => match sched_wakeup(w, &s, e, time) {
                        Some(sw) => sw,
                        None => {
                            self.short_payloads += 1;
                            Switch::default()
                        }
                    },
                    Some(Kind::ContextSwitches) => Switch {
                        stack_of: s.tid(),
                        ..Switch::default()
                    },
                    // perf's offcpu-time samples always begin their callchain with
                    // PERF_CONTEXT_USER; an empty one is another BPF output's sample (one of raw
                    // data that `stitch` gave an empty callchain), no interval.
                    Some(Kind::OffCpuTime) => match (s.tid(), s.period()) {
                        (Some(tid), Some(ns))
                            if tid != 0 && s.callchain().is_some_and(|c| !c.is_empty()) =>
                        {
                            Switch {
                                measured: Some((s.pid().unwrap_or(u32::MAX), tid, time, ns)),
                                stack: true,
                                ..Switch::default()
                            }
                        }
                        _ => Switch::default(),
                    },
                    Some(Kind::NoFormat) => {
                        self.no_format += 1;
                        Switch::default()
                    }
                    _ => Switch::default(),
                };
                Switch { cpu, ..sw }
            }
            RecordType::HEADER_FEATURE => {
                // NRCPUS: `u32 nr_cpus_avail, nr_cpus_online` (`write_nrcpus()`).
                match features::feature_record(rec.bytes, e) {
                    Some((feature::NRCPUS, data)) => Switch {
                        cpus_online: e.u32(data, 4),
                        ..Switch::default()
                    },
                    _ => Switch::default(),
                }
            }
            RecordType::SWITCH | RecordType::SWITCH_CPU_WIDE => {
                let Some(id) = rec.sample_id() else {
                    return Switch::default();
                };
                let (Some(tid), Some(time)) = (id.tid, id.time) else {
                    return Switch::default();
                };
                if tid == 0 {
                    return Switch::default();
                }
                let m = rec.header().misc;
                let cpu = id.cpu;
                if m & misc::SWITCH_OUT == 0 {
                    Switch {
                        switch_in: Some((tid, time)),
                        cpu,
                        ..Switch::default()
                    }
                } else if self.has_tracepoint {
                    Switch::default()
                } else {
                    let state = if m & misc::SWITCH_OUT_PREEMPT != 0 {
                        State::Runnable
                    } else {
                        State::Blocked
                    };
                    Switch {
                        out: Some((id.pid.unwrap_or(u32::MAX), tid, time, state)),
                        cpu,
                        ..Switch::default()
                    }
                }
            }
            _ => Switch::default(),
        }
    }
}

/// A `sched_wakeup`/`sched_waking` sample: `None` when its payload is shorter than its format.
fn sched_wakeup(w: &SchedWakeup, s: &Sample<'_>, e: Endian, time: u64) -> Option<Switch> {
    let raw = s.raw()?;
    if raw.len() < w.min_size {
        return None;
    }
    let tid = match w.pid.read(raw, e)? {
        Value::Int(v) => v as u32,
        Value::UInt(v) => v as u32,
        _ => return None,
    };
    // The sample is taken in the waker's context: the current task (0, the idle task, for an
    // interrupt on an idle cpu).
    let wake = (tid != 0).then_some(Wake {
        tid,
        time,
        waker_tid: s.tid().unwrap_or(u32::MAX),
    });
    Some(Switch {
        wake,
        ..Switch::default()
    })
}

/// A `sched_switch` sample: `None` when its payload is shorter than its format.
fn sched_switch(sw: &mut SchedSwitch, s: &Sample<'_>, e: Endian, time: u64) -> Option<Switch> {
    let raw = s.raw()?;
    if raw.len() < sw.min_size {
        return None;
    }
    let int = |f: &FieldFormat| match f.read(raw, e)? {
        Value::Int(v) => Some(v as u64),
        Value::UInt(v) => Some(v),
        _ => None,
    };
    let prev = int(&sw.prev_pid)? as u32;
    let next = int(&sw.next_pid)? as u32;
    let v = int(&sw.prev_state)?;
    let state = match sw.states.iter().find(|(k, _)| *k == v) {
        Some((_, st)) => *st,
        None => {
            let text = sw
                .format
                .render
                .text(&sw.prev_state.name, v)
                .unwrap_or_default();
            let st = State::from_text(&text);
            if sw.states.len() < 64 {
                sw.states.push((v, st));
            }
            st
        }
    };
    // The sample is taken in the context of the task switched out: its pid is prev's process.
    // (A tid of -1 is an exiting thread's whose pid is released: still prev, its process
    // named by the sample's pid, -1 too once the whole process is gone.)
    let pid = if s.tid() == Some(prev) || s.tid() == Some(u32::MAX) {
        s.pid().unwrap_or(u32::MAX)
    } else {
        u32::MAX
    };
    // The task is dead: its last switch.
    let exiting = matches!(state, State::Other(b'X' | b'Z'));
    Some(Switch {
        out: (prev != 0 && !exiting).then_some((pid, prev, time, state)),
        switch_in: (next != 0).then_some((next, time)),
        stack: prev != 0 && !exiting,
        stack_of: None,
        cpu: None,
        cpus_online: None,
        exit: (prev != 0 && exiting).then_some((prev, time)),
        wake: None,
        measured: None,
        came_in_after: None,
    })
}

/// An off-CPU interval: a thread off the cpu from `start` to `end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval<S> {
    /// Its process (`u32::MAX` when unknown).
    pub pid: u32,
    /// The thread.
    pub tid: u32,
    /// When it was switched out.
    pub start: u64,
    /// When it was switched in again (or the last event time, if it never was).
    pub end: u64,
    /// The state it left the cpu in.
    pub state: State,
    /// Where it blocked: the switch-out sample's stack, if one was given.
    pub stack: Option<S>,
    /// Still off the cpu at the end of the stream: closed at the last event time.
    pub open_at_end: bool,
    /// The last wakeup of the thread in the interval, if any was recorded.
    pub waker: Option<Waker<S>>,
}

/// Who woke a thread: the wakeup sample's thread and stack (its process and name are the
/// caller's to key the stack by, as for a switch-out's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waker<S> {
    /// Its thread (0: the idle task).
    pub tid: u32,
    /// The wakeup sample's stack, if one was given.
    pub stack: Option<S>,
}

impl<S> Interval<S> {
    /// Its length in ns.
    pub fn duration(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }
}

#[derive(Clone, Copy, Debug)]
enum Ev<S> {
    Out {
        pid: u32,
        state: State,
        stack: Option<S>,
        /// [`Switch::came_in_after`].
        came_in_after: Option<u64>,
    },
    In,
    /// Its last switch-out ([`Switch::exit`]).
    Exit,
    /// Woken ([`Switch::wake`]).
    Wake(Waker<S>),
}

impl<S> Ev<S> {
    /// The order of switches at the same time: a wakeup after a switch-out and before a
    /// switch-in.
    fn rank(&self) -> u8 {
        match self {
            Ev::Out { .. } | Ev::Exit => 0,
            Ev::Wake(_) => 1,
            Ev::In => 2,
        }
    }
}

/// A thread's switches written on one cpu: `(time, switch)`, in time order.
type Queue<S> = VecDeque<(u64, Ev<S>)>;

#[derive(Debug)]
struct Thread<S> {
    /// The switch-out waiting for its switch-in: (time, pid, state, stack).
    open: Option<(u64, u32, State, Option<S>)>,
    /// Switches not yet decided: one queue per cpu they were written on (`u32::MAX`: unknown),
    /// each in time order, merged by time when decided. Records of one cpu arrive in order, so
    /// a switch is appended to its queue; only those without a cpu are inserted in place.
    pending: Vec<(u32, Queue<S>)>,
    /// Switches in `pending`.
    waiting: usize,
    /// The stack of its last `context-switches` sample, for its next SWITCH OUT record.
    stack: Option<S>,
    /// The latest wakeup since its switch-out.
    waker: Option<Waker<S>>,
}

impl<S> Thread<S> {
    fn new() -> Thread<S> {
        Thread {
            open: None,
            pending: Vec::new(),
            waiting: 0,
            stack: None,
            waker: None,
        }
    }
}

/// Counts of what the model saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffCpuCounts {
    /// Intervals closed by a switch-in.
    pub closed: u64,
    /// Intervals still open at the end (closed at the last event time).
    pub open_at_end: u64,
    /// Switch-outs followed by another switch-out of the same thread (a switch-in lost) that
    /// cannot be closed at the cpu's previous switch ([`Switch::came_in_after`]): the first is
    /// dropped.
    pub unmatched: u64,
    /// Intervals whose switch-in was lost, closed at the previous switch of the cpu the thread
    /// was next switched out on ([`Switch::came_in_after`]); not in `closed`.
    pub lost_ins: u64,
    /// Switch-ins of threads not known to be off the cpu (the first of each thread).
    pub stray_ins: u64,
    /// Last switch-outs of exiting threads ([`Switch::exit`]): no interval.
    pub exits: u64,
    /// Wakeups of threads not off the cpu (already runnable, or not seen switched out yet).
    pub stray_wakeups: u64,
    /// Intervals the recorder measured ([`Switch::measured`]: perf's `offcpu-time` samples).
    pub measured: u64,
}

/// The off-CPU model: switches in, intervals out.
#[derive(Debug)]
pub struct OffCpu<S> {
    threads: IdMap<u32, Thread<S>>,
    /// Threads with pending switches.
    dirty: Vec<u32>,
    /// Every switch at or before this time has arrived.
    settled: u64,
    /// Latest time seen before the last FINISHED_ROUND.
    round_max: u64,
    /// Latest event time seen.
    last: u64,
    /// Latest switch time seen per cpu (records of one cpu arrive in order).
    cpu_last: Vec<u64>,
    /// Distinct cpus seen, and how many the recording has online (0: unknown).
    cpus_seen: usize,
    cpus_online: usize,
    /// What it counted.
    pub counts: OffCpuCounts,
}

impl<S> Default for OffCpu<S> {
    fn default() -> Self {
        OffCpu {
            threads: IdMap::default(),
            dirty: Vec::new(),
            settled: 0,
            round_max: 0,
            last: 0,
            cpu_last: Vec::new(),
            cpus_seen: 0,
            cpus_online: 0,
            counts: OffCpuCounts::default(),
        }
    }
}

impl<S: Copy> OffCpu<S> {
    /// Takes in what a record said ([`Switches::read`]), with the record's stack if it is a
    /// sample that has one; intervals it closes go to `out`.
    pub fn add(&mut self, sw: &Switch, stack: Option<S>, out: &mut Vec<Interval<S>>) {
        if let Some(n) = sw.cpus_online {
            self.cpus_online = n as usize;
        }
        let time = sw
            .out
            .map(|o| o.2)
            .or(sw.exit.map(|e| e.1))
            .or(sw.switch_in.map(|i| i.1))
            .or(sw.wake.map(|w| w.time));
        if let (Some(cpu), Some(time)) = (sw.cpu, time) {
            self.cpu_time(cpu, time);
        }
        if let Some(tid) = sw.stack_of {
            // A context-switches sample: its stack is for the SWITCH OUT that follows.
            self.thread(tid).stack = stack;
        }
        if let Some((pid, tid, time, state)) = sw.out {
            let stack = if sw.stack {
                stack
            } else {
                // A SWITCH OUT record: the stack of the context-switches sample before it.
                self.threads.get_mut(&tid).and_then(|t| t.stack.take())
            };
            let ev = Ev::Out {
                pid,
                state,
                stack,
                came_in_after: sw.came_in_after,
            };
            self.push(tid, sw.cpu, time, ev, out);
        }
        if let Some((tid, time)) = sw.exit {
            self.push(tid, sw.cpu, time, Ev::Exit, out);
        }
        if let Some((tid, time)) = sw.switch_in {
            self.push(tid, sw.cpu, time, Ev::In, out);
        }
        if let Some(w) = sw.wake {
            let waker = Waker {
                tid: w.waker_tid,
                stack,
            };
            self.push(w.tid, sw.cpu, w.time, Ev::Wake(waker), out);
        }
        if let Some((pid, tid, time, ns)) = sw.measured {
            // Measured already: no switch to pair it with, so it goes out as it comes.
            self.counts.measured += 1;
            out.push(Interval {
                pid,
                tid,
                start: time.saturating_sub(ns),
                end: time.saturating_sub(ns).saturating_add(ns),
                state: State::Blocked,
                stack,
                open_at_end: false,
                waker: None,
            });
        }
    }

    /// A FINISHED_ROUND: switches up to the latest time of the round before have all arrived.
    pub fn round(&mut self, out: &mut Vec<Interval<S>>) {
        self.settled = self.settled.max(self.round_max);
        self.round_max = self.last;
        let dirty = std::mem::take(&mut self.dirty);
        for tid in dirty {
            if let Some(t) = self.threads.get_mut(&tid) {
                decide(t, tid, self.settled, false, &mut self.counts, out);
                if t.waiting > 0 {
                    self.dirty.push(tid);
                }
            }
        }
    }

    /// The end of the stream: every switch is decided, and threads still off the cpu get an
    /// interval closed at the last event time.
    pub fn finish(&mut self, out: &mut Vec<Interval<S>>) {
        self.dirty.clear();
        let last = self.last;
        let mut tids: Vec<u32> = self.threads.keys().copied().collect();
        tids.sort_unstable();
        for tid in tids {
            let t = self.threads.get_mut(&tid).expect("listed");
            decide(t, tid, u64::MAX, false, &mut self.counts, out);
            if let Some((start, pid, state, stack)) = t.open.take() {
                self.counts.open_at_end += 1;
                out.push(Interval {
                    pid,
                    tid,
                    start,
                    end: last.max(start),
                    state,
                    stack,
                    open_at_end: true,
                    waker: t.waker.take(),
                });
            }
        }
    }

    /// Notes the time of any record, so that intervals open at the end close at the stream's
    /// last event time.
    pub fn note_time(&mut self, time: u64) {
        if time >= OFF_CPU_TIMESTAMP {
            return;
        }
        self.last = self.last.max(time);
    }

    /// Every cpu has written a switch at or after the earliest of their latest times: switches
    /// before it have all arrived.
    fn cpu_time(&mut self, cpu: u32, time: u64) {
        let Ok(i) = usize::try_from(cpu) else { return };
        if i >= MAX_CPUS {
            return;
        }
        if self.cpu_last.len() <= i {
            self.cpu_last.resize(i + 1, 0);
        }
        let was = self.cpu_last[i];
        if was == 0 {
            self.cpus_seen += 1;
        }
        self.cpu_last[i] = was.max(time);
        // Until every online cpu has written a switch, one not seen yet may hold earlier ones.
        if was <= self.settled && self.cpus_online > 0 && self.cpus_seen >= self.cpus_online {
            let min = self.cpu_last.iter().filter(|&&t| t != 0).min().copied();
            if let Some(m) = min {
                self.settled = self.settled.max(m);
            }
        }
    }

    /// Threads it holds state for.
    pub fn threads(&self) -> usize {
        self.threads.len()
    }

    fn thread(&mut self, tid: u32) -> &mut Thread<S> {
        self.threads.entry(tid).or_insert_with(Thread::new)
    }

    fn push(
        &mut self,
        tid: u32,
        cpu: Option<u32>,
        time: u64,
        ev: Ev<S>,
        out: &mut Vec<Interval<S>>,
    ) {
        self.last = self.last.max(time);
        let settled = self.settled;
        // One lookup of the thread a switch (two a sample, a fifth of the model's time when it
        // was looked up again to be decided).
        let t = self.threads.entry(tid).or_insert_with(Thread::new);
        let cpu = cpu.unwrap_or(u32::MAX);
        let q = match t.pending.iter().position(|(c, _)| *c == cpu) {
            Some(i) => &mut t.pending[i].1,
            None => {
                t.pending.push((cpu, VecDeque::new()));
                &mut t.pending.last_mut().expect("pushed").1
            }
        };
        let key = (time, ev.rank());
        if q.back().is_none_or(|(x, e)| (*x, e.rank()) <= key) {
            q.push_back((time, ev));
        } else {
            // Out of order within its queue (no cpu, or a cpu's clock stepping back): in place.
            let at = q
                .iter()
                .rposition(|(x, e)| (*x, e.rank()) <= key)
                .map_or(0, |i| i + 1);
            q.insert(at, (time, ev));
        }
        t.waiting += 1;
        let was_empty = t.waiting == 1;
        decide(t, tid, settled, true, &mut self.counts, out);
        if was_empty && t.waiting > 0 {
            self.dirty.push(tid);
        }
    }
}

/// Decides the thread's pending switches up to `settled` (and, with `cap`, the oldest beyond
/// [`MAX_PENDING`]), in time order.
fn decide<S: Copy>(
    t: &mut Thread<S>,
    tid: u32,
    settled: u64,
    cap: bool,
    counts: &mut OffCpuCounts,
    out: &mut Vec<Interval<S>>,
) {
    // The earliest switch of all the thread's queues (at the same time, a wakeup after a
    // switch-out and before a switch-in).
    let earliest = |t: &Thread<S>| {
        t.pending
            .iter()
            .enumerate()
            .filter_map(|(i, (_, q))| {
                let (time, ev) = q.front()?;
                Some((*time, ev.rank(), i))
            })
            .min()
            .map(|(_, _, i)| i)
    };
    while let Some(q) = earliest(t) {
        let queue = &mut t.pending[q].1;
        if queue.front().expect("non-empty").0 > settled && !(cap && t.waiting > MAX_PENDING) {
            break;
        }
        // Taken once, not copied to be looked at first.
        let (time, ev) = queue.pop_front().expect("non-empty");
        t.waiting -= 1;
        match ev {
            Ev::Out {
                pid,
                state,
                stack,
                came_in_after,
            } => {
                // Still off the cpu: its switch-in was lost. It came in on this cpu after the
                // cpu's previous switch: closed there when that is after its switch-out
                // (`perf sched timehist`'s bound), else dropped.
                if let Some((start, pid, state, stack)) = t.open.take() {
                    match came_in_after.filter(|&at| at >= start) {
                        Some(end) => {
                            counts.lost_ins += 1;
                            out.push(Interval {
                                pid,
                                tid,
                                start,
                                end,
                                state,
                                stack,
                                open_at_end: false,
                                waker: t.waker.take(),
                            });
                        }
                        None => counts.unmatched += 1,
                    }
                }
                t.open = Some((time, pid, state, stack));
                t.waker = None;
            }
            Ev::In => match t.open.take() {
                Some((start, pid, state, stack)) => {
                    counts.closed += 1;
                    out.push(Interval {
                        pid,
                        tid,
                        start,
                        end: time,
                        state,
                        stack,
                        open_at_end: false,
                        waker: t.waker.take(),
                    });
                }
                None => counts.stray_ins += 1,
            },
            Ev::Exit => {
                counts.exits += 1;
                t.waker = None;
                if t.open.take().is_some() {
                    counts.unmatched += 1;
                }
            }
            Ev::Wake(w) => {
                // A wakeup of a thread on the cpu (or never seen off it) wakes no interval.
                // One by a thread the kernel gives tid -1 (it was exiting: `perf_event_tid()`)
                // ends the interval's wakeups with no waker to name.
                if t.open.is_some() {
                    t.waker = (w.tid != u32::MAX).then_some(w);
                } else {
                    counts.stray_wakeups += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;

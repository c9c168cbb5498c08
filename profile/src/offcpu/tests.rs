//! The off-CPU model on switches given by hand: order, reordering across cpus, the end, the
//! per-process form, and memory bounded by threads.

use super::*;

fn out(tid: u32, time: u64, state: State) -> Switch {
    Switch {
        out: Some((100, tid, time, state)),
        stack: true,
        ..Switch::default()
    }
}

fn sin(tid: u32, time: u64) -> Switch {
    Switch {
        switch_in: Some((tid, time)),
        ..Switch::default()
    }
}

/// A `sched_switch` sample: `prev` out, `next` in, at `time` (0 is the idle task: no switch).
fn switch(prev: u32, state: State, next: u32, time: u64) -> Switch {
    Switch {
        out: Some((100, prev, time, state)),
        switch_in: (next != 0).then_some((next, time)),
        stack: true,
        stack_of: None,
        cpu: None,
        cpus_online: None,
        exit: None,
        wake: None,
        measured: None,
        came_in_after: None,
    }
}

fn run(
    events: &[(Switch, Option<u32>)],
    rounds_after: &[usize],
) -> (Vec<Interval<u32>>, OffCpuCounts) {
    let mut m = OffCpu::<u32>::default();
    let mut v = Vec::new();
    for (i, (sw, stack)) in events.iter().enumerate() {
        m.add(sw, *stack, &mut v);
        if rounds_after.contains(&i) {
            m.round(&mut v);
        }
    }
    m.finish(&mut v);
    (v, m.counts)
}

#[test]
fn an_interval_per_switch_out_closed_by_the_next_switch_in() {
    let (v, c) = run(
        &[
            (switch(1, State::Sleeping, 2, 10), Some(7)),
            (switch(2, State::Runnable, 1, 30), Some(8)),
            (switch(1, State::Uninterruptible, 0, 35), Some(9)),
        ],
        &[],
    );
    // 2 was never seen out before it came in at 10: a stray switch-in.
    assert_eq!(c.stray_ins, 1);
    assert_eq!(v.len(), 3);
    assert_eq!(
        (v[0].tid, v[0].start, v[0].end, v[0].state, v[0].stack),
        (1, 10, 30, State::Sleeping, Some(7))
    );
    assert!(!v[0].open_at_end);
    // 1 out at 35, 2 out at 30: open at the end, closed at the last time (35).
    let open: Vec<_> = v
        .iter()
        .filter(|i| i.open_at_end)
        .map(|i| (i.tid, i.duration()))
        .collect();
    assert_eq!(open, vec![(1, 0), (2, 5)]);
    assert_eq!((c.closed, c.open_at_end), (1, 2));
}

#[test]
fn a_switch_in_that_arrives_before_its_switch_out_still_closes_it() {
    // Thread 5 switched out on cpu 0 at 100, in on cpu 1 at 150; cpu 1's records come first.
    let (v, c) = run(
        &[
            (sin(5, 150), None),
            (out(9, 120, State::Sleeping), Some(1)),
            (out(5, 100, State::Uninterruptible), Some(2)),
            (sin(9, 400), None),
        ],
        &[1, 3],
    );
    let closed: Vec<_> = v
        .iter()
        .filter(|i| !i.open_at_end)
        .map(|i| (i.tid, i.start, i.end, i.state))
        .collect();
    assert!(
        closed.contains(&(5, 100, 150, State::Uninterruptible)),
        "{v:?}"
    );
    assert!(closed.contains(&(9, 120, 400, State::Sleeping)), "{v:?}");
    assert_eq!(c.stray_ins, 0);
    assert_eq!(c.unmatched, 0);
}

#[test]
fn per_process_form_context_switch_samples_give_the_stack_switch_records_the_rest() {
    let cs = |tid| Switch {
        stack_of: Some(tid),
        ..Switch::default()
    };
    let rec_out = |tid, time, state| Switch {
        out: Some((100, tid, time, state)),
        ..Switch::default()
    };
    let (v, _) = run(
        &[
            (cs(3), Some(42)),
            (rec_out(3, 10, State::Blocked), None),
            (sin(3, 60), None),
            (cs(3), Some(43)),
            (rec_out(3, 70, State::Runnable), None),
            (sin(3, 75), None),
        ],
        &[],
    );
    let got: Vec<_> = v
        .iter()
        .map(|i| (i.start, i.end, i.state, i.stack))
        .collect();
    assert_eq!(
        got,
        vec![
            (10, 60, State::Blocked, Some(42)),
            (70, 75, State::Runnable, Some(43))
        ]
    );
}

#[test]
fn a_lost_switch_in_without_a_bound_is_counted_not_charged() {
    let (v, c) = run(
        &[
            (out(4, 10, State::Sleeping), Some(1)),
            (out(4, 20, State::Sleeping), Some(2)),
            (sin(4, 25), None),
        ],
        &[],
    );
    assert_eq!(c.unmatched, 1);
    assert_eq!(
        v.iter().map(|i| (i.start, i.end)).collect::<Vec<_>>(),
        vec![(20, 25)]
    );
}

#[test]
fn a_lost_switch_in_is_closed_at_the_previous_switch_of_the_cpu_as_perf_sched_timehist_does() {
    // 4 sleeps at 10; its switch-in on cpu 0 is not recorded (cpu 0's previous switch, at 18,
    // switched in another thread); its next switch-out, at 20, says so: closed at 18, a lower
    // bound of its switch-in. A bound before the switch-out bounds nothing: dropped.
    let after = |mut sw: Switch, at: u64| {
        sw.came_in_after = Some(at);
        sw
    };
    let (v, c) = run(
        &[
            (out(4, 10, State::Sleeping), Some(1)),
            (after(out(4, 20, State::Uninterruptible), 18), Some(2)),
            (sin(4, 25), None),
            (out(4, 30, State::Sleeping), Some(3)),
            (after(out(4, 40, State::Sleeping), 28), Some(4)),
            (sin(4, 45), None),
        ],
        &[],
    );
    assert_eq!(
        v.iter()
            .map(|i| (i.start, i.end, i.state, i.stack))
            .collect::<Vec<_>>(),
        vec![
            (10, 18, State::Sleeping, Some(1)),
            (20, 25, State::Uninterruptible, Some(2)),
            (40, 45, State::Sleeping, Some(4)),
        ]
    );
    assert_eq!((c.lost_ins, c.unmatched, c.closed), (1, 1, 2));
}

#[test]
fn memory_is_bounded_by_threads_not_switches() {
    let mut m = OffCpu::<u32>::default();
    let mut v = Vec::new();
    let mut total = 0u64;
    for i in 0..200_000u64 {
        let tid = 1 + (i % 10) as u32;
        let t = i * 10;
        m.add(
            &switch(tid, State::Sleeping, tid % 10 + 1, t),
            Some(0),
            &mut v,
        );
        if i % 100 == 99 {
            m.round(&mut v);
        }
        total += v.drain(..).map(|i| i.duration()).sum::<u64>();
    }
    assert_eq!(m.threads(), 10);
    let pending: usize = m.threads.values().map(|t| t.waiting).sum();
    assert!(pending <= 10 * 30, "{pending} switches pending");
    // Without rounds, the cap bounds it too.
    let mut n = OffCpu::<u32>::default();
    for i in 0..(MAX_PENDING as u64 + 1000) {
        n.add(&switch(1, State::Sleeping, 2, i), None, &mut v);
        n.add(&switch(2, State::Sleeping, 1, i), None, &mut v);
    }
    let pending: usize = n.threads.values().map(|t| t.waiting).sum();
    assert!(pending <= 2 * (MAX_PENDING + 1), "{pending}");
    m.finish(&mut v);
    total += v.drain(..).map(|i| i.duration()).sum::<u64>();
    assert!(total > 0);
}

#[test]
fn states_from_the_print_format_text() {
    assert_eq!(State::from_text("S"), State::Sleeping);
    assert_eq!(State::from_text("D"), State::Uninterruptible);
    assert_eq!(State::from_text("R+"), State::Runnable);
    assert_eq!(State::from_text("R"), State::Runnable);
    assert_eq!(State::from_text("I").name(), "I");
    assert_eq!(State::Blocked.name(), "S|D");
}

#[test]
fn a_round_of_one_cpu_then_the_other_gives_the_intervals_of_time_order() {
    // Threads 1..=4 run in turns on two cpus, each switch a sched_switch sample; perf writes
    // cpu 0's records of a round, then cpu 1's, with a FINISHED_ROUND every 400 switches.
    let mut by_cpu: [Vec<Switch>; 2] = [Vec::new(), Vec::new()];
    let mut running = [1u32, 2];
    let mut waiting: VecDeque<u32> = [3, 4, 5].into();
    for step in 0..4000u64 {
        let cpu = (step * 7 % 5 % 2) as usize;
        let prev = running[cpu];
        let next = waiting.pop_front().unwrap();
        let state = if step % 3 == 0 {
            State::Runnable
        } else {
            State::Sleeping
        };
        let mut sw = switch(prev, state, next, 1000 + step * 10);
        sw.cpu = Some(cpu as u32);
        by_cpu[cpu].push(sw);
        running[cpu] = next;
        waiting.push_back(prev);
    }
    let mut sorted: Vec<Switch> = by_cpu.concat();
    sorted.sort_by_key(|s| s.out.unwrap().2);
    let mut ideal = Vec::new();
    let mut m = OffCpu::<u32>::default();
    for s in &sorted {
        m.add(s, Some(0), &mut ideal);
    }
    m.finish(&mut ideal);

    let mut got = Vec::new();
    let mut m = OffCpu::<u32>::default();
    let cpus = Switch {
        cpus_online: Some(2),
        ..Switch::default()
    };
    m.add(&cpus, None, &mut got);
    let round = |cpu: usize, r: usize| {
        by_cpu[cpu]
            .iter()
            .filter(move |s| (s.out.unwrap().2 - 1000) / 4000 == r as u64)
            .copied()
    };
    for r in 0..10 {
        for s in round(0, r).chain(round(1, r)) {
            m.add(&s, Some(0), &mut got);
        }
        m.round(&mut got);
    }
    m.finish(&mut got);
    let key = |i: &Interval<u32>| (i.tid, i.start);
    ideal.sort_by_key(key);
    got.sort_by_key(key);
    assert!(ideal.len() > 3000);
    let missing: Vec<_> = ideal.iter().filter(|i| !got.contains(i)).collect();
    let extra: Vec<_> = got.iter().filter(|i| !ideal.contains(i)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:?}, extra {extra:?}, {:?}",
        m.counts
    );
    let diff = got.iter().zip(&ideal).find(|(a, b)| a != b);
    assert!(diff.is_none(), "{diff:?}");
    assert_eq!(m.counts.unmatched, 0);
}

#[test]
fn an_exiting_threads_last_switch_opens_no_interval() {
    // 1 sleeps 10..20, runs, and exits at 30 (its last sched_switch, tid -1, prev_state X): no
    // interval from 30, not even one open at the end; the switch-in of 3 it carries counts.
    let exit = |tid: u32, next: u32, time: u64| Switch {
        exit: Some((tid, time)),
        switch_in: Some((next, time)),
        ..Switch::default()
    };
    let (v, c) = run(
        &[
            (switch(1, State::Sleeping, 2, 10), Some(7)),
            (switch(3, State::Sleeping, 1, 20), Some(8)),
            (exit(1, 3, 30), None),
            (switch(2, State::Runnable, 0, 40), Some(9)),
        ],
        &[1],
    );
    assert_eq!(c.exits, 1);
    assert_eq!(c.unmatched, 0);
    let mut got: Vec<_> = v
        .iter()
        .map(|i| (i.tid, i.start, i.end, i.open_at_end))
        .collect();
    got.sort_unstable();
    assert_eq!(
        got,
        vec![(1, 10, 20, false), (2, 40, 40, true), (3, 20, 30, false)]
    );
}

#[test]
fn every_state_has_one_place_and_name() {
    let names: Vec<&str> = State::ALL.iter().map(|s| s.name()).collect();
    for (i, s) in State::ALL.iter().enumerate() {
        assert_eq!(s.index(), i, "{s:?}");
        assert_eq!(names.iter().filter(|n| **n == s.name()).count(), 1, "{s:?}");
    }
    // A letter a newer kernel may print and this list lacks is `?`, the last place.
    assert_eq!(State::Other(b'N').index(), State::ALL.len() - 1);
    assert_eq!(State::Other(b'N').name(), "?");
    // The letters prev_state prints read back to the state named by them.
    for s in State::ALL.iter().filter(|s| !matches!(s, State::Blocked)) {
        assert_eq!(State::from_text(s.name()), *s);
    }
}

/// A wakeup sample on `cpu`: `tid` woken at `time` by thread `waker`.
fn wake(tid: u32, time: u64, waker: u32, cpu: u32) -> Switch {
    Switch {
        wake: Some(Wake {
            tid,
            time,
            waker_tid: waker,
        }),
        cpu: Some(cpu),
        ..Switch::default()
    }
}

fn on(mut sw: Switch, cpu: u32) -> Switch {
    sw.cpu = Some(cpu);
    sw
}

/// An interval's (tid, start, end, waker (tid, stack)).
type Woken = (u32, u64, u64, Option<(u32, Option<u32>)>);

/// Each interval closed by a switch-in, sorted.
fn wakers(v: &[Interval<u32>]) -> Vec<Woken> {
    let mut got: Vec<_> = v
        .iter()
        .filter(|i| !i.open_at_end)
        .map(|i| (i.tid, i.start, i.end, i.waker.map(|w| (w.tid, w.stack))))
        .collect();
    got.sort_unstable();
    got
}

#[test]
fn a_wakeup_that_arrives_after_the_switch_in_but_is_earlier_still_names_the_waker() {
    // 5 sleeps on cpu 0 at 100; 9 wakes it on cpu 1 at 140; it is switched in on cpu 0 at 150.
    // cpu 0's records of the round come first: the switch-in arrives before the wakeup.
    let (v, c) = run(
        &[
            (on(switch(5, State::Sleeping, 0, 100), 0), Some(1)),
            (on(sin(5, 150), 0), None),
            (wake(5, 140, 9, 1), Some(77)),
            (on(switch(9, State::Sleeping, 0, 160), 1), Some(2)),
        ],
        &[3],
    );
    assert_eq!(wakers(&v), vec![(5, 100, 150, Some((9, Some(77))))]);
    assert_eq!(c.stray_wakeups, 0);
}

#[test]
fn a_wakeup_that_arrives_before_the_switch_out_but_is_later_names_the_waker() {
    // 5 sleeps on cpu 0 at 100, is woken on cpu 1 at 120 by 9, switched in on cpu 1 at 130:
    // cpu 1's records come first, the wakeup and the switch-in before the switch-out.
    let (v, c) = run(
        &[
            (wake(5, 120, 9, 1), Some(77)),
            (on(sin(5, 130), 1), None),
            (on(switch(5, State::Sleeping, 0, 100), 0), Some(1)),
        ],
        &[2],
    );
    assert_eq!(wakers(&v), vec![(5, 100, 130, Some((9, Some(77))))]);
    assert_eq!(c.stray_wakeups, 0);
}

#[test]
fn the_waker_is_the_last_wakeup_after_the_switch_out_and_at_or_before_the_switch_in() {
    let (v, c) = run(
        &[
            // Woken at 90 while running (before its switch-out): not this interval's waker.
            (on(wake(5, 90, 7, 0), 0), Some(70)),
            (on(switch(5, State::Sleeping, 0, 100), 0), Some(1)),
            (wake(5, 110, 8, 1), Some(80)),
            // The last one, at the switch-in's very time, from another cpu, arriving late.
            (on(sin(5, 150), 0), None),
            (wake(5, 150, 9, 1), Some(90)),
            // Preempted: no wakeup, no waker; the wakeup at 170 is for the next interval.
            (on(switch(5, State::Runnable, 0, 160), 0), Some(2)),
            (on(sin(5, 165), 0), None),
            (on(switch(5, State::Sleeping, 0, 168), 0), Some(3)),
            (wake(5, 170, 0, 1), None),
            (on(sin(5, 180), 0), None),
        ],
        &[],
    );
    assert_eq!(
        wakers(&v),
        vec![
            (5, 100, 150, Some((9, Some(90)))),
            (5, 160, 165, None),
            (5, 168, 180, Some((0, None))),
        ]
    );
    assert_eq!(c.stray_wakeups, 1, "the wakeup at 90, of a running thread");
}

#[test]
fn a_last_wakeup_by_an_exiting_thread_names_no_waker() {
    // 5 sleeps at 100; 8 wakes it at 110, then a thread the kernel gives tid -1 (exiting) at 120.
    let (v, _) = run(
        &[
            (on(switch(5, State::Sleeping, 0, 100), 0), Some(1)),
            (wake(5, 110, 8, 1), Some(80)),
            (wake(5, 120, u32::MAX, 1), Some(81)),
            (on(sin(5, 130), 0), None),
        ],
        &[],
    );
    assert_eq!(wakers(&v), vec![(5, 100, 130, None)]);
}

#[test]
fn wakeups_read_in_any_arrival_order_give_the_wakers_of_time_order() {
    // Threads wake each other on two cpus; each cpu's records in time order, the cpus' records
    // of a round one after the other: the wakers equal those of the stream sorted by time.
    let mut by_cpu: [Vec<(Switch, Option<u32>)>; 2] = [Vec::new(), Vec::new()];
    let mut running = [1u32, 2];
    let mut waiting: VecDeque<u32> = [3, 4, 5].into();
    for step in 0..3000u64 {
        let cpu = (step * 7 % 5 % 2) as usize;
        let t = 1000 + step * 10;
        let prev = running[cpu];
        let next = waiting.pop_front().unwrap();
        // The thread running on the other cpu wakes `next`, just before it is switched in.
        let other = running[1 - cpu];
        by_cpu[1 - cpu].push((wake(next, t - 3, other, 1 - cpu as u32), Some(other)));
        let state = if step % 4 == 0 {
            State::Runnable
        } else {
            State::Sleeping
        };
        by_cpu[cpu].push((on(switch(prev, state, next, t), cpu as u32), Some(prev)));
        running[cpu] = next;
        waiting.push_back(prev);
    }
    let time = |sw: &Switch| sw.wake.map_or_else(|| sw.out.unwrap().2, |w| w.time);
    for cpu in &mut by_cpu {
        cpu.sort_by_key(|(s, _)| time(s));
    }
    let mut sorted: Vec<_> = by_cpu.concat();
    sorted.sort_by_key(|(s, _)| time(s));
    let (ideal, _) = run(&sorted, &[]);

    let mut got = Vec::new();
    let mut m = OffCpu::<u32>::default();
    m.add(
        &Switch {
            cpus_online: Some(2),
            ..Switch::default()
        },
        None,
        &mut got,
    );
    for r in 0..8u64 {
        let round = |cpu: usize| {
            by_cpu[cpu]
                .iter()
                .filter(move |(s, _)| (time(s) - 990) / 4000 == r)
                .copied()
        };
        for (s, k) in round(1).chain(round(0)) {
            m.add(&s, k, &mut got);
        }
        m.round(&mut got);
    }
    m.finish(&mut got);
    let ideal = wakers(&ideal);
    assert!(ideal.len() > 2500);
    assert!(ideal.iter().filter(|i| i.3.is_some()).count() > 1000);
    assert_eq!(wakers(&got), ideal);
}

#[test]
fn memory_is_bounded_by_threads_not_wakeups() {
    // 2 is woken again and again while it runs (a wakeup of a runnable thread), and 3 sleeps
    // and is woken many times between its switches: a thread keeps its latest wakeup at most,
    // plus those not yet placed in time.
    let mut m = OffCpu::<u32>::default();
    let mut v = Vec::new();
    for i in 0..100_000u64 {
        let t = 10 + i * 10;
        m.add(&wake(2, t, 1, 0), Some(5), &mut v);
        if i % 1000 == 0 {
            m.add(
                &on(switch(3, State::Sleeping, 0, t + 1), 1),
                Some(6),
                &mut v,
            );
        }
        m.add(&wake(3, t + 2, 1, 0), Some(i as u32), &mut v);
        if i % 1000 == 999 {
            m.add(&on(sin(3, t + 5), 1), None, &mut v);
        }
        if i % 100 == 99 {
            m.round(&mut v);
        }
    }
    let pending: usize = m.threads.values().map(|t| t.waiting).sum();
    assert!(
        pending <= 2 * 3 * 200,
        "{pending} switches and wakeups pending"
    );
    assert_eq!(m.threads(), 2, "the wakers hold no state");
    m.finish(&mut v);
    assert!(m.threads.values().all(|t| t.waker.is_none()));
    assert_eq!(m.counts.stray_wakeups, 100_000, "2 was running");
    // Each of 3's intervals has its last wakeup, the one just before its switch-in.
    let got = wakers(&v);
    assert_eq!(got.len(), 100);
    assert!(got
        .iter()
        .all(|(_, _, end, w)| *w == Some((1, Some(((end - 15) / 10) as u32)))));
}

#[test]
fn measured_intervals_go_out_as_they_come_and_do_not_move_the_end() {
    // perf's offcpu-time samples: the BPF program measured them; those written at the end of
    // the recording carry OFF_CPU_TIMESTAMP and up, no event time.
    let mut m: OffCpu<u32> = OffCpu::default();
    let mut out = Vec::new();
    m.note_time(1_000);
    let sw = Switch {
        measured: Some((100, 7, 900, 300)),
        stack: true,
        ..Switch::default()
    };
    m.add(&sw, Some(42), &mut out);
    let late = Switch {
        measured: Some((100, 8, super::OFF_CPU_TIMESTAMP + 1, 5_000)),
        stack: true,
        ..Switch::default()
    };
    m.note_time(super::OFF_CPU_TIMESTAMP + 1);
    m.add(&late, Some(43), &mut out);
    assert_eq!(out.len(), 2);
    assert_eq!(
        (out[0].tid, out[0].start, out[0].end, out[0].stack),
        (7, 600, 900, Some(42))
    );
    assert_eq!(out[0].state, State::Blocked);
    assert_eq!(out[1].duration(), 5_000);
    // A switch-out still open at the end closes at the last real event time.
    m.add(&switch(9, State::Sleeping, 0, 950), Some(1), &mut out);
    m.finish(&mut out);
    let open = out.iter().find(|i| i.tid == 9).unwrap();
    assert_eq!((open.end, open.open_at_end), (1_000, true));
    assert_eq!(m.counts.measured, 2);
}

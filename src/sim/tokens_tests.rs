//! Rule tests of vcpulab's scheduler in the simulator (`Scheduler::RoundRobin`).

use super::super::config::*;
use super::super::metrics::Column;
use super::super::policy::ESRCH;
use super::super::state::Why;
use super::super::test_util::{computing_vm, sim_of};
use super::super::{run, SimResult};

/// `v` vCPUs computing forever on `p` CPUs under vcpulab's scheduler.
fn tokens(v: u32, p: u32) -> SimConfig {
    SimConfig {
        duration_ns: 100_000_000,
        host: HostConfig { n_pcpus: p, scheduler: Scheduler::RoundRobin, ..Default::default() },
        vms: vec![computing_vm(v)],
        trace: true,
        ..Default::default()
    }
}

/// VM 0's threads alternate a compute of `compute_ns` and a sleep (a halt)
/// of `sleep_ns`, both exponential.
fn compute_then_sleep(c: &mut SimConfig, compute_ns: u64, sleep_ns: u64) {
    c.vms[0].workload.phases = vec![
        Phase::Compute { ns: compute_ns, dist: Dist::Exp, mode: Mode::Kernel, prob: 1.0 },
        Phase::Sleep { ns: sleep_ns, dist: Dist::Exp, prob: 1.0, periodic: false },
    ];
}

/// One trace row: (pcpu, start, end, vcpu (-1: another task), why).
type Row = (i64, u64, u64, i64, &'static str);

fn rows(r: &SimResult) -> Vec<Row> {
    let t = r.trace.as_ref().expect("traced");
    let i64s = |n: &str| t.i32s(n).iter().map(|&x| x as i64).collect::<Vec<i64>>();
    let (pcpu, vcpu) = (i64s("pcpu"), i64s("vcpu"));
    let Some(Column::Cat { codes, names }) = t.get("why") else { panic!("why") };
    let (s, e) = (t.u64s("start_ns"), t.u64s("end_ns"));
    (0..s.len()).map(|i| (pcpu[i], s[i], e[i], vcpu[i], names[codes[i] as usize])).collect()
}

/// The vCPU rows of one CPU merged into token periods: (start, end, vcpu) of
/// each maximal run of one vCPU's rows (other tasks' rows in between do not
/// end a period).
fn periods(r: &SimResult, cpu: i64) -> Vec<(u64, u64, i64)> {
    let mut out: Vec<(u64, u64, i64)> = Vec::new();
    for (_, s, e, v, _) in rows(r).into_iter().filter(|x| x.0 == cpu && x.3 >= 0) {
        match out.last_mut() {
            Some(last) if last.2 == v => last.1 = e,
            _ => out.push((s, e, v)),
        }
    }
    out
}

#[test]
fn tokens_rotate_in_fifo_order_in_slices_of_wall_time_whatever_else_runs() {
    for bg in [0.0, 0.3] {
        let mut c = tokens(3, 1);
        c.host.background.utilization = bg;
        let r = run(&c).unwrap();
        let p = periods(&r, 0);
        // one token period per 4 ms of wall time, in FIFO order 0, 1, 2, 0, ...
        assert!((24..=26).contains(&p.len()), "bg {bg}: {} periods", p.len());
        for (i, w) in p.windows(2).enumerate() {
            assert_eq!((w[0].2 + 1) % 3, w[1].2, "bg {bg}: period {i}: {w:?}");
        }
        // every slice, the first too, lasts its set length (the host's ticks are
        // shifted by the run's phase instead)
        for &(s, e, v) in &p[..p.len() - 1] {
            assert!(e - s <= c.host.token_slice_ns, "bg {bg}: vCPU {v} held the CPU {} ns", e - s);
        }
        // with background load the holder shares its CPU; the slices stay wall-time slices
        let all = rows(&r);
        assert_eq!(all.iter().any(|x| x.3 < 0), bg > 0.0);
        if bg == 0.0 {
            // alone on its CPU a holder runs its whole slice: no tick ends it, the token's end does
            assert!(all.iter().all(|x| x.4 == "slice" || x.4 == "end"), "{:?}", all.iter().find(|x| x.4 != "slice"));
        }
    }
}

#[test]
fn every_cpu_token_is_held_while_vcpus_wait_and_none_is_held_twice() {
    let c = tokens(5, 2);
    let mut s = sim_of(&c);
    for step in 1..=40u64 {
        s.step_until(step * 1_500_000).unwrap();
        let held: Vec<u32> = s.tokens.holder.iter().map(|h| h.expect("a token idles while vCPUs wait")).collect();
        assert_ne!(held[0], held[1]);
        assert_eq!(s.tokens.queues[0].len(), 3);
        for &t in &s.tokens.queues[0] {
            assert!(s.tasks[t as usize].parked && s.tasks[t as usize].runnable);
            assert!(!held.contains(&t));
        }
        for (c, &t) in held.iter().enumerate() {
            assert_eq!(s.tasks[t as usize].cpu as usize, c);
        }
    }
}

#[test]
fn yield_to_hands_the_token_to_a_waiting_candidate_and_queues_the_yielder() {
    let mut s = sim_of(&tokens(3, 1));
    s.step_until(1_000_000).unwrap();
    let me = (0..3).find(|&v| s.vcpus[v].running.is_some()).unwrap();
    let me_task = s.vcpus[me].task;
    let head = s.tokens.queues[0][0];
    let other = s.tokens.queues[0][1];
    let target = (0..3).find(|&v| s.vcpus[v].task == other).unwrap();
    let mut t = s.now;
    assert_eq!(s.yield_to(me, target, &mut t), 1);
    assert!(t > s.now, "an attempt costs handler time");
    assert_eq!(s.tokens.holder[0], Some(other), "the candidate holds the token");
    assert_eq!(
        s.tokens.queues[0].iter().copied().collect::<Vec<_>>(),
        vec![head, me_task],
        "the yielder waits at the tail"
    );
    assert!(s.tasks[me_task as usize].parked);
    // the new holder runs once the yielder's handler ends
    s.resched(0, Why::Yield);
    assert_eq!(s.vcpus[target].running, Some(0));
    // a target holding a token: 0 while others wait, -ESRCH when nobody does
    let mut s = sim_of(&tokens(3, 2));
    s.step_until(1_000_000).unwrap();
    let holders: Vec<usize> = (0..3).filter(|&v| s.vcpus[v].running.is_some()).collect();
    assert_eq!(holders.len(), 2);
    let mut t = s.now;
    assert_eq!(s.yield_to(holders[0], holders[1], &mut t), 0);
    let mut s = sim_of(&tokens(2, 2));
    s.step_until(1_000_000).unwrap();
    let mut t = s.now;
    assert_eq!(s.yield_to(0, 1, &mut t), ESRCH);
}

#[test]
fn a_halting_holder_hands_its_token_on_and_a_woken_vcpu_waits_at_the_tail() {
    // one guest thread on three vCPUs: two of them idle and halt
    let mut c = tokens(3, 1);
    c.vms[0].threads = 1;
    let mut s = sim_of(&c);
    s.step_until(20_000_000).unwrap();
    // the computing thread's vCPU holds the token; the halted ones wait for nothing
    let h = s.tokens.holder[0].expect("a holder");
    assert!(s.tasks[h as usize].runnable);
    assert!(s.tokens.queues[0].is_empty(), "halted vCPUs do not queue");
    // the token never idles with the computing vCPU waiting: the CPU is busy all the run
    let r = run(&c).unwrap();
    let idle = r.pcpus.u64s("idle_ns")[0];
    assert!(idle < c.duration_ns / 100, "CPU idle {idle} ns of {}", c.duration_ns);
    let useful: u64 = r.vcpus.u64s("useful_ns").iter().sum();
    assert!(useful > c.duration_ns * 9 / 10, "useful {useful} ns");
}

/// `v` vCPUs computing forever on one CPU under the host's scheduler
/// (EEVDF), arriving `gap` ns apart on average in `order`: the first period
/// of each vCPU, in time order.
fn first_runs_under_the_host(seed: u64, gap: u64, order: StartOrder, duration_ns: u64) -> Vec<i64> {
    let mut c = tokens(4, 1);
    c.host.scheduler = Scheduler::Fair;
    c.duration_ns = duration_ns;
    c.host.start_gap_ns = gap;
    c.host.start_order = order;
    c.seed = seed;
    let mut first: Vec<i64> = Vec::new();
    for p in periods(&run(&c).unwrap(), 0) {
        if !first.contains(&p.2) {
            first.push(p.2);
        }
    }
    first
}

#[test]
fn vcpu_threads_arrive_in_a_seeded_random_order_with_start_gaps() {
    // the VMM's threads reach the host's run queue in a race, not in index
    // order (Host.start_gap_ns): their first runs follow the arrivals
    let mut orders = std::collections::BTreeSet::new();
    for seed in 0..8 {
        let first = first_runs_under_the_host(seed, 200_000, StartOrder::Shuffled, 100_000_000);
        let mut sorted = first.clone();
        sorted.sort();
        assert_eq!(sorted, vec![0, 1, 2, 3], "seed {seed}: each vCPU runs: {first:?}");
        orders.insert(first);
    }
    assert!(orders.len() >= 4, "{orders:?}");
    assert!(orders.iter().any(|o| o != &vec![0, 1, 2, 3]));
}

/// `Host.start_order = "created"`: the threads are created in index order,
/// each arriving after its own delay, so their first runs follow index
/// order more often than a shuffle would (a shuffle puts vCPU 0 before
/// vCPU 1 half of the time; created order about three times in four: two
/// exponential delays of one mean swap neighbours with probability 1/4),
/// yet not always.
#[test]
fn vcpu_threads_created_in_index_order_arrive_jittered() {
    let zero_first = |order: StartOrder| {
        let mut n = 0;
        for seed in 0..200 {
            let first = first_runs_under_the_host(seed, 200_000, order, 40_000_000);
            let (p0, p1) = (first.iter().position(|&v| v == 0), first.iter().position(|&v| v == 1));
            n += (p0.expect("vCPU 0 runs") < p1.expect("vCPU 1 runs")) as u32;
        }
        n
    };
    let shuffled = zero_first(StartOrder::Shuffled);
    let created = zero_first(StartOrder::Created);
    assert!((70..=130).contains(&shuffled), "shuffled: vCPU 0 first in {shuffled} of 200");
    assert!((125..=175).contains(&created) && created < 200, "created: vCPU 0 first in {created} of 200");
}

/// Under vcpulab's scheduler the arrivals race as well, but no token goes
/// out before the last thread has arrived, and then in vCPU order, as the
/// real `Scheduler::start` (src/kvm/sched/): the first round is 0, 1, 2, 3
/// in every seed, and it begins at the last arrival.
#[test]
fn tokens_wait_for_every_thread_then_go_out_in_vcpu_order() {
    for order in [StartOrder::Shuffled, StartOrder::Created] {
        for seed in 0..8 {
            let mut c = tokens(4, 1);
            c.host.start_gap_ns = 200_000;
            c.host.start_order = order;
            c.seed = seed;
            let p = periods(&run(&c).unwrap(), 0);
            let first: Vec<i64> = p.iter().take(4).map(|x| x.2).collect();
            assert_eq!(first, vec![0, 1, 2, 3], "{order:?} seed {seed}");
            // three exponential gaps of 200 us: the first token waits for the last
            // arrival (its start is the sum; below 30 us in fewer than 1 in 10^4 seeds)
            assert!(p[0].0 > 30_000, "{order:?} seed {seed}: the first token at {} ns", p[0].0);
        }
    }
    // and with no gap every thread is there at once: the first token at 0
    let p = periods(&run(&tokens(4, 1)).unwrap(), 0);
    assert_eq!(p[0].0, 0);
    assert_eq!(p.iter().take(4).map(|x| x.2).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
}

// ---- relaxed co-scheduling and balance scheduling (the other token policies)

/// `vms` VMs of `v` computing vCPUs each on `p` CPUs under `sched`.
fn token_sched(sched: Scheduler, vms: Vec<u32>, p: u32) -> SimConfig {
    SimConfig {
        duration_ns: 200_000_000,
        host: HostConfig { n_pcpus: p, scheduler: sched, token_skew_ns: 1_000_000, ..Default::default() },
        vms: vms.into_iter().map(computing_vm).collect(),
        trace: true,
        ..Default::default()
    }
}

#[test]
fn balance_keeps_every_vcpu_on_its_home_cpu_and_siblings_apart() {
    // 2 VMs x 2 vCPUs on 2 CPUs: vCPU i of VM k at home on CPU (i + k) mod 2
    let r = run(&token_sched(Scheduler::Balance, vec![2, 2], 2)).unwrap();
    let t = r.trace.as_ref().expect("traced");
    let i64s = |n: &str| t.i32s(n).iter().map(|&x| x as i64).collect::<Vec<i64>>();
    let (pcpu, vm, vcpu) = (i64s("pcpu"), i64s("vm"), i64s("vcpu"));
    let mut n = 0;
    for i in (0..pcpu.len()).filter(|&i| vcpu[i] >= 0) {
        assert_eq!(pcpu[i], (vcpu[i] + vm[i]) % 2, "VM {} vCPU {} ran on CPU {}", vm[i], vcpu[i], pcpu[i]);
        n += 1;
    }
    assert!(n > 40, "{n} rows");
    // each CPU's two vCPUs take turns: every vCPU gets about half of a CPU
    let useful = r.vcpus.u64s("useful_ns");
    assert!(useful.iter().all(|&u| u > 90_000_000), "{useful:?}");
}

#[test]
fn relaxed_co_keeps_three_siblings_on_two_cpus_within_the_skew_and_a_slice() {
    let c = token_sched(Scheduler::RelaxedCo, vec![3], 2);
    let (skew, slice) = (c.host.token_skew_ns, c.host.token_slice_ns);
    let mut s = sim_of(&c);
    let mut worst = 0;
    // from 10 ms: each CPU's first slice is longer by its phase against the tick
    for k in 20..400 {
        s.step_until(k * 500_000).unwrap();
        let r: Vec<u64> = (0..3).map(|v| s.token_run_time(s.vcpus[v].task as usize)).collect();
        worst = worst.max(r.iter().max().unwrap() - r.iter().min().unwrap());
    }
    assert!(worst <= skew + slice, "the largest lead was {worst} ns");
    assert!(worst > 0);
}

#[test]
fn relaxed_co_passes_over_a_waiter_ahead_of_its_siblings_and_hands_on_a_holder_ahead() {
    // one VM of 3 computing vCPUs on 2 CPUs, 1 ms skew: two hold tokens, one waits
    let c = token_sched(Scheduler::RelaxedCo, vec![3], 2);
    let mut s = sim_of(&c);
    s.step_until(1_000_000).unwrap();
    let holder0 = s.tokens.holder[0].expect("CPU 0 held") as usize;
    let waiter = s.tokens.queues[0][0] as usize;
    // the waiter is 10 ms ahead of both holders: CPU 0's slice end keeps its
    // holder (another slice), the waiter stays co-stopped in the queue
    s.tokens.run_ns[waiter] = s.token_run_time(holder0) + 10_000_000;
    let gen = s.tokens.gen[0];
    s.token_slice_end(0, gen);
    assert_eq!(s.tokens.holder[0], Some(holder0 as u32));
    assert_eq!(s.tokens.queues[0].front(), Some(&(waiter as u32)));
    // now the waiter is back at 0 and the holder 20 ms ahead of the other
    // two: the holder is co-stopped and its token goes to the waiter though
    // its slice has just begun
    s.tokens.run_ns[waiter] = 0;
    s.tokens.run_ns[holder0] = 20_000_000;
    let gen = s.tokens.gen[0];
    s.token_slice_end(0, gen);
    assert_eq!(s.tokens.holder[0], Some(waiter as u32));
    assert!(s.tokens.queues[0].contains(&(holder0 as u32)));
    // under round robin the same leads change nothing: the waiter takes the token
    let c = token_sched(Scheduler::RoundRobin, vec![3], 2);
    let mut r = sim_of(&c);
    r.step_until(1_000_000).unwrap();
    let (h, w) = (r.tokens.holder[0].expect("held") as usize, r.tokens.queues[0][0] as usize);
    r.tokens.run_ns[w] = r.token_run_time(h) + 10_000_000;
    let gen = r.tokens.gen[0];
    r.token_slice_end(0, gen);
    assert_eq!(r.tokens.holder[0], Some(w as u32));
}

#[test]
fn balance_refuses_a_vm_with_more_vcpus_than_cpus() {
    let c = token_sched(Scheduler::Balance, vec![3], 2);
    let e = c.validate().unwrap_err();
    assert!(e.contains("vms[0].vcpus") && e.contains("balance"), "{e}");
    assert!(token_sched(Scheduler::RelaxedCo, vec![3], 2).validate().is_ok());
}

#[test]
fn pinned_keeps_every_vcpu_thread_on_the_cpu_it_is_pinned_to() {
    // 1 VM x 3 vCPUs on 2 CPUs pinned 0, 0, 1: CPU 0's two vCPUs take turns,
    // vCPU 2 has CPU 1 to itself (siblings may share a CPU, unlike balance)
    let mut c = token_sched(Scheduler::Pinned, vec![3], 2);
    c.host.affinity = Affinity::Pinned;
    c.host.vcpu_pcpus = vec![0, 0, 1];
    let r = run(&c).unwrap();
    let t = r.trace.as_ref().expect("traced");
    let i64s = |n: &str| t.i32s(n).iter().map(|&x| x as i64).collect::<Vec<i64>>();
    let (pcpu, vcpu) = (i64s("pcpu"), i64s("vcpu"));
    let home = [0, 0, 1];
    let rows: Vec<usize> = (0..pcpu.len()).filter(|&i| vcpu[i] >= 0).collect();
    assert!(rows.len() > 40, "{} rows", rows.len());
    for i in rows {
        assert_eq!(pcpu[i], home[vcpu[i] as usize], "vCPU {} ran on CPU {}", vcpu[i], pcpu[i]);
    }
    let useful = r.vcpus.u64s("useful_ns");
    assert!(useful[0] > 90_000_000 && useful[1] > 90_000_000 && useful[2] > 190_000_000, "{useful:?}");
}

#[test]
fn pinned_refuses_unpinned_threads() {
    let mut c = token_sched(Scheduler::Pinned, vec![2], 2);
    c.host.affinity = Affinity::All;
    let e = c.validate().unwrap_err();
    assert!(e.contains("host.affinity") && e.contains("pinned"), "{e}");
}

/// `Pv.preempted_byte = "never"` (KVM writes no byte, as on the project's
/// kvm_pvm host): two vCPUs sharing one CPU under the kernel's scheduler
/// never see it set, while under `"instruction_boundary"` the one the tick
/// preempted does; under vcpulab's token scheduler it is set while a
/// runnable vCPU holds no token, whatever KVM does (the real scheduler
/// writes it), also for a holder that host load had taken off the CPU when
/// its slice ended; a running vCPU always reads it clear (cleared at entry).
#[test]
fn the_token_scheduler_writes_the_preempted_byte_that_kvm_never_writes() {
    let seen = |sched: Scheduler, byte: PreemptedByte, load: f64| {
        let mut c = tokens(2, 1);
        c.host.scheduler = sched;
        c.host.background.utilization = load;
        c.vms[0].pv.preempted_byte = byte;
        let mut s = sim_of(&c);
        let (mut waiting_set, mut waiting) = (0u32, 0u32);
        // from 10 ms on: the first slice (4 ms plus its phase) has ended, so
        // the vCPU that waited for a token since the start has lost one
        for k in 40..=400u64 {
            s.step_until(k * 250_000).unwrap();
            for v in &s.vcpus {
                let holds = s.tokens.holder.contains(&Some(v.task));
                if v.running.is_some() {
                    assert!(!v.st_preempted, "a running vCPU reads its byte clear ({sched:?}, {byte:?})");
                } else if holds && byte == PreemptedByte::Never {
                    assert!(!v.st_preempted, "host load took a token holder off its CPU: KVM writes nothing");
                } else if !holds {
                    waiting += 1;
                    waiting_set += v.st_preempted as u32;
                }
            }
        }
        (waiting_set, waiting)
    };
    let (set, waiting) = seen(Scheduler::Fair, PreemptedByte::Never, 0.0);
    assert!(waiting > 300 && set == 0, "KVM never writes it: {set} of {waiting}");
    let (set, waiting) = seen(Scheduler::Fair, PreemptedByte::InstructionBoundary, 0.0);
    assert!(set > waiting / 2, "the tick's preemption sets it: {set} of {waiting}");
    for load in [0.0, 0.3] {
        let (set, waiting) = seen(Scheduler::RoundRobin, PreemptedByte::Never, load);
        assert!(waiting > 300 && set == waiting, "a vCPU without a token has it set: {set} of {waiting} (load {load})");
    }
}

/// `Host.token_wake_exit_ns`: a vCPU woken from its halt runs without a
/// token on the CPU it last held one on (its wake path, then the wake
/// bracket's exit), sharing it with the token's holder, and then asks for a
/// token: it is never queued while it runs so, every queued vCPU is parked,
/// every running vCPU holds a token or is on its way to ask, and a holder's
/// thread is on its token's CPU (one granted another CPU's token as it
/// asked has moved there). Off (0), no vCPU ever runs without a token.
#[test]
fn a_woken_vcpu_runs_its_wake_bracket_without_a_token_then_asks() {
    let stats = |exit_ns: u64| {
        let mut c = tokens(3, 2);
        compute_then_sleep(&mut c, 200_000, 300_000);
        c.host.token_wake_exit_ns = exit_ns;
        c.trace = false;
        let mut s = sim_of(&c);
        let (mut unheld_running, mut sharing) = (0u32, 0u32);
        for k in 1..=4000u64 {
            s.step_until(k * 10_000).unwrap();
            let held: Vec<u32> = s.tokens.holder.iter().flatten().copied().collect();
            assert!(held.len() < 2 || held[0] != held[1], "a token held twice");
            for (c, h) in s.tokens.holder.iter().enumerate() {
                if let Some(h) = h {
                    // a vCPU granted another CPU's token as it asked has moved there
                    assert_eq!(s.tasks[*h as usize].cpu as usize, c, "a holder's thread is on its token's CPU");
                }
            }
            for q in &s.tokens.queues {
                for &t in q {
                    let t = t as usize;
                    assert!(s.tasks[t].parked && s.tasks[t].runnable, "a queued vCPU is parked");
                    assert!(!s.token_unheld(t), "a vCPU on its way to ask is not queued yet");
                }
            }
            for v in &s.vcpus {
                let Some(cpu) = v.running else { continue };
                let t = v.task as usize;
                if held.contains(&v.task) {
                    continue;
                }
                assert!(s.token_unheld(t), "vCPU {} runs on CPU {cpu} without a token at {} ns", v.idx, s.now);
                unheld_running += 1;
                sharing += s.tokens.holder[cpu as usize].is_some() as u32;
            }
        }
        (unheld_running, sharing)
    };
    let (unheld, _) = stats(0);
    assert_eq!(unheld, 0);
    let (unheld, sharing) = stats(20_000);
    assert!(
        unheld > 20 && sharing > 0,
        "{unheld} instants of a vCPU running without a token, {sharing} beside a holder"
    );
}

#[test]
fn a_vcpu_taking_a_free_token_gets_its_last_cpus_when_free_as_the_real_scheduler_does() {
    // 2 vCPUs on 2 CPUs, each computing 200 µs and sleeping 300 µs: both CPUs
    // are often free as one wakes. Taking the lowest free token moved vCPU 1
    // to CPU 0 whenever CPU 0 was free; its own CPU's token keeps each where
    // it first ran (the real `dispatch_idle` avoids moving a running thread).
    for exit_ns in [0, 20_000] {
        let mut c = tokens(2, 2);
        compute_then_sleep(&mut c, 200_000, 300_000);
        c.host.token_wake_exit_ns = exit_ns;
        c.duration_ns = 50_000_000;
        let r = run(&c).unwrap();
        let rows = rows(&r);
        for v in 0..2 {
            let cpus: std::collections::BTreeSet<i64> = rows.iter().filter(|x| x.3 == v).map(|x| x.0).collect();
            let n = rows.iter().filter(|x| x.3 == v).count();
            assert!(n > 50, "wake bracket {exit_ns} ns: vCPU {v} ran {n} intervals");
            assert_eq!(cpus.len(), 1, "wake bracket {exit_ns} ns: vCPU {v} ran on CPUs {cpus:?}");
        }
    }
}

/// `Host.token_halt_bracket`: a halting vCPU gives its token up before it
/// halts (the programs' pv halt bracket, src/kvm/sched/'s `halt`), so KVM
/// polls its halt without one: a vCPU waiting for a token gets it at once,
/// its arrival on the CPU ends the poll (`single_task_running()`), and no
/// vCPU ever polls while another waits or while it holds a token; a poll
/// that nobody interrupts still catches its wake-up, and the vCPU then asks
/// for a token again. Off, the poller keeps its token and the waiter waits
/// for the poll to end.
#[test]
fn the_halt_bracket_gives_the_token_up_before_kvm_polls() {
    use super::super::halt_poll::{HaltPollConfig, Policy};
    use super::super::state::Act;
    let stats = |bracket: bool| {
        let mut c = tokens(3, 2);
        compute_then_sleep(&mut c, 100_000, 150_000);
        c.vms[0].halt_poll = HaltPollConfig::new(Policy::Fixed);
        c.host.token_halt_bracket = bracket;
        c.host.token_wake_exit_ns = 10_000;
        c.trace = false;
        let mut s = sim_of(&c);
        let (mut poll_while_waiting, mut poll_holding) = (0u32, 0u32);
        for k in 1..=5000u64 {
            s.step_until(k * 10_000).unwrap();
            let waiting = s.tokens.queues.iter().any(|q| !q.is_empty());
            for v in &s.vcpus {
                if !matches!(v.act, Act::HaltPoll { .. }) {
                    continue;
                }
                poll_while_waiting += waiting as u32;
                poll_holding += s.tokens.holder.contains(&Some(v.task)) as u32;
            }
        }
        let ok: u64 = s.vcpus.iter().map(|v| v.hp.stats.halt_successful_poll).sum();
        let grants: u64 = s.vcpus.iter().map(|v| v.c.token_grants).sum();
        (poll_while_waiting, poll_holding, ok, grants)
    };
    let (waiting, holding, ok, _) = stats(false);
    assert!(waiting > 100 && holding > 100 && ok > 100, "without the bracket: {waiting} {holding} {ok}");
    let (waiting, holding, ok, grants) = stats(true);
    assert_eq!((waiting, holding), (0, 0), "with the bracket no vCPU polls holding a token or while one waits");
    assert!(ok > 100 && grants > ok, "with the bracket {ok} successful polls, {grants} grants");
}

/// Under vcpulab's schedulers a vCPU's `pcpu_is_idle` is what src/kvm/sched/
/// publishes: the CPU of the last token it held has no holder (a holder
/// reads its own CPU busy; before its first token, not idle).
#[test]
fn pcpu_is_idle_under_tokens_is_the_last_token_cpu_free() {
    let mut c = tokens(3, 2);
    compute_then_sleep(&mut c, 100_000, 150_000);
    c.trace = false;
    let mut s = sim_of(&c);
    let (mut idle, mut busy) = (0u32, 0u32);
    for k in 1..=3000u64 {
        s.step_until(k * 10_000).unwrap();
        for v in 0..s.vcpus.len() {
            let t = s.vcpus[v].task as usize;
            let last = s.tokens.last_cpu[t] as usize;
            let want = last < 2 && s.tokens.holder[last].is_none();
            assert_eq!(s.pcpu_is_idle(v), want, "vCPU {v} at {} ns", s.now);
            if s.tokens.holder.contains(&Some(t as u32)) {
                assert!(!s.pcpu_is_idle(v), "a holder reads its own CPU busy");
            }
            if want {
                idle += 1;
            } else {
                busy += 1;
            }
        }
    }
    assert!(idle > 100 && busy > 100, "{idle} idle, {busy} busy readings");
}

/// Relaxed co-scheduling counts only the siblings the real scheduler sees
/// runnable: one running without a token between its halt bracket and its
/// wake bracket's ask (`Host.token_halt_bracket`, `token_wake_exit_ns`) is
/// halted there, so it co-stops nobody.
#[test]
fn a_sibling_without_a_token_between_its_brackets_co_stops_nobody() {
    use super::super::halt_poll::{HaltPollConfig, Policy};
    let mut c = tokens(3, 2);
    c.host.scheduler = Scheduler::RelaxedCo;
    c.host.token_skew_ns = 100_000;
    c.host.token_halt_bracket = true;
    c.host.token_wake_exit_ns = 10_000;
    compute_then_sleep(&mut c, 100_000, 150_000);
    c.vms[0].halt_poll = HaltPollConfig::new(Policy::Fixed);
    c.trace = false;
    let mut s = sim_of(&c);
    let (mut unheld_seen, mut checked) = (0u32, 0u32);
    for k in 1..=5000u64 {
        s.step_until(k * 10_000).unwrap();
        let tasks: Vec<usize> = s.vcpus.iter().map(|v| v.task as usize).collect();
        for &t in &tasks {
            let me = s.token_run_time(t);
            let slowest = tasks
                .iter()
                .copied()
                .filter(|&x| x != t && s.tasks[x].runnable && !s.token_unheld(x))
                .map(|x| s.token_run_time(x))
                .min();
            let want = slowest.is_some_and(|lo| me > lo + c.host.token_skew_ns);
            assert_eq!(s.token_co_stopped(t), want, "task {t} at {} ns", s.now);
            checked += 1;
        }
        unheld_seen += tasks.iter().filter(|&&x| s.tasks[x].runnable && s.token_unheld(x)).count() as u32;
    }
    assert!(unheld_seen > 50 && checked > 1000, "{unheld_seen} instants of a runnable vCPU without a token");
}

/// The decision log's rows: (t_ns, pcpu, out vCPU, in vCPU, why), a vCPU
/// as 100 × its VM + its index (-1: none).
fn decisions(r: &SimResult) -> Vec<(u64, i32, i32, i32, &'static str)> {
    let t = r.schedule.as_ref().expect("a token scheduler's traced run keeps its decisions");
    let Some(Column::Cat { codes, names }) = t.get("why") else { panic!("why") };
    let key = |vm: i32, v: i32| if v < 0 { -1 } else { 100 * vm + v };
    let (ts, pcpu) = (t.u64s("t_ns"), t.i32s("pcpu"));
    let (ovm, out, ivm, into) = (t.i32s("out_vm"), t.i32s("out_vcpu"), t.i32s("in_vm"), t.i32s("in_vcpu"));
    (0..ts.len())
        .map(|i| (ts[i], pcpu[i], key(ovm[i], out[i]), key(ivm[i], into[i]), names[codes[i] as usize]))
        .collect()
}

/// Every CPU's rows chain: a row's vCPU out is the last row's vCPU in on
/// that CPU (-1 after a row that left the token free), time never goes back,
/// and the grants per vCPU are its `token_grants`.
fn assert_chained(r: &SimResult, p: usize) {
    let d = decisions(r);
    let mut last = vec![-1i32; p];
    let mut t0 = 0;
    for &(t, c, out, into, why) in &d {
        assert!(t >= t0, "rows out of time order");
        t0 = t;
        assert_eq!(out, last[c as usize], "CPU {c} at {t} ns ({why}): out {out}, last in {}", last[c as usize]);
        last[c as usize] = into;
    }
    let (vm, idx, grants) = (r.vcpus.u64s("vm"), r.vcpus.u64s("vcpu"), r.vcpus.u64s("token_grants"));
    for i in 0..grants.len() {
        let v = 100 * vm[i] as i32 + idx[i] as i32;
        assert_eq!(d.iter().filter(|x| x.3 == v).count() as u64, grants[i], "vCPU {v}'s grants");
    }
}

#[test]
fn the_decision_log_names_every_hand_off_as_the_real_one_does() {
    // three computing vCPUs on one CPU: the start, then slice after slice in FIFO order
    let c = tokens(3, 1);
    let r = run(&c).unwrap();
    let d = decisions(&r);
    assert_eq!(d[0].1, 0, "CPU 0");
    assert_eq!((d[0].2, d[0].3, d[0].4), (-1, 0, "start"));
    assert!(d[1..].iter().all(|x| x.4 == "slice"), "nothing but slices after the start");
    let order: Vec<i32> = d.iter().take(7).map(|x| x.3).collect();
    assert_eq!(order, [0, 1, 2, 0, 1, 2, 0]);
    let gap = d[2].0 - d[1].0;
    assert!(gap.abs_diff(c.host.token_slice_ns) < c.host.token_slice_ns / 50, "a slice apart: {gap} ns");
    assert_chained(&r, 1);
    // halts and wake-ups on two CPUs: a halt's token goes on or falls free,
    // a woken vCPU takes a free token (wake) or a later one
    let mut c = tokens(3, 2);
    compute_then_sleep(&mut c, 200_000, 300_000);
    let r = run(&c).unwrap();
    let d = decisions(&r);
    let n = |w: &str| d.iter().filter(|x| x.4 == w).count();
    assert!(n("halt") > 100 && n("wake") > 100, "halt {} wake {}", n("halt"), n("wake"));
    assert!(d.iter().any(|x| x.4 == "halt" && x.3 == -1), "a halt that leaves its token free");
    assert!(d.iter().all(|x| x.4 != "wake" || x.2 == -1), "a wake-up takes a free token");
    assert_chained(&r, 2);
    // the real programs' halt and wake brackets, each scheduler: the rows still chain
    for sched in [Scheduler::RoundRobin, Scheduler::RelaxedCo, Scheduler::Balance] {
        let mut b = token_sched(sched, vec![2, 2], 2);
        compute_then_sleep(&mut b, 200_000, 300_000);
        b.vms[1].workload.phases = b.vms[0].workload.phases.clone();
        b.host.token_halt_bracket = true;
        b.host.token_wake_exit_ns = 20_000;
        b.trace = true;
        let r = run(&b).unwrap();
        let d = decisions(&r);
        let n = |w: &str| d.iter().filter(|x| x.4 == w).count();
        assert!(n("wake") > 50 && n("halt") > 50, "{sched:?}: wake {} halt {}", n("wake"), n("halt"));
        assert_chained(&r, 2);
    }
    // the log is kept only with the trace, only under a token scheduler, and changes nothing
    let mut quiet = c.clone();
    quiet.trace = false;
    let q = run(&quiet).unwrap();
    assert!(q.schedule.is_none());
    assert_eq!(q.vcpus, r.vcpus);
    let mut fair = c.clone();
    fair.host.scheduler = Scheduler::Fair;
    assert!(run(&fair).unwrap().schedule.is_none());
}

#[test]
fn the_decision_log_names_yields_co_stops_and_threads_that_end() {
    // a directed yield: one row, the yielder out and the candidate in
    let mut c = tokens(3, 1);
    c.duration_ns = 2_000_000;
    let mut s = sim_of(&c);
    s.step_until(1_000_000).unwrap();
    let me = (0..3).find(|&v| s.vcpus[v].running.is_some()).unwrap();
    let other = s.tokens.queues[0][1];
    let target = (0..3).find(|&v| s.vcpus[v].task == other).unwrap();
    let before = s.decisions.len();
    let mut t = s.now;
    assert_eq!(s.yield_to(me, target, &mut t), 1);
    assert_eq!(s.decisions.len(), before + 1);
    let last = |s: &super::super::engine::Sim| {
        let d = &s.decisions;
        let i = d.len() - 1;
        (d.out_vcpu[i], d.in_vcpu[i], crate::schedule::Why::ALL[d.why[i] as usize].name())
    };
    assert_eq!(last(&s), (me as i32, target as i32, "yield"));
    // relaxed co-scheduling: a holder far ahead of its siblings is co-stopped
    let c = token_sched(Scheduler::RelaxedCo, vec![3], 2);
    let mut s = sim_of(&c);
    s.step_until(1_000_000).unwrap();
    let holder0 = s.tokens.holder[0].expect("CPU 0 held") as usize;
    s.tokens.run_ns[holder0] = 20_000_000;
    let gen = s.tokens.gen[0];
    s.token_slice_end(0, gen);
    let v0 = match s.tasks[holder0].kind {
        super::super::state::TaskKind::Vcpu(v) => v as i32,
        _ => unreachable!(),
    };
    let (out, _, why) = last(&s);
    assert_eq!((out, why), (v0, "co_stop"));
    // a program of a few iterations that never halts: a vCPU whose threads
    // have ended gives its token up as `done` (the run ends with its VM's
    // last thread, so a vCPU that ended while it waited for a token may
    // still hold one then), never as `halt`
    let mut c = tokens(2, 1);
    c.vms[0].workload.phases = vec![Phase::Compute { ns: 1_000_000, dist: Dist::Fixed, mode: Mode::Kernel, prob: 1.0 }];
    c.vms[0].workload.iterations = 20;
    c.duration_ns = 1_000_000_000;
    let r = run(&c).unwrap();
    let d = decisions(&r);
    assert!(d.iter().any(|x| x.4 == "done"), "{:?}", &d[d.len().saturating_sub(4)..]);
    assert!(d.iter().all(|x| x.4 != "halt"));
    assert_chained(&r, 1);
}

#[test]
fn the_runs_phase_shifts_every_cpus_tick_grid_alike_and_leaves_the_slices_their_length() {
    let phases: Vec<Vec<u64>> = (0..6)
        .map(|seed| {
            let mut c = tokens(3, 2);
            c.seed = seed;
            let s = sim_of(&c);
            s.rqs.iter().map(|r| r.tick_off).collect()
        })
        .collect();
    let tick = tokens(3, 2).host.tick_ns;
    for p in &phases {
        assert_eq!(p[0], p[1], "one phase for every CPU (their ticks aligned, as without skew_tick)");
        assert!(p[0] < tick);
    }
    assert!(phases.iter().any(|p| p[0] != phases[0][0]), "drawn per seed: {phases:?}");
    // both CPUs' first slices start together and end a slice later
    let r = run(&tokens(3, 2)).unwrap();
    let d = decisions(&r);
    let starts: Vec<u64> = d.iter().filter(|x| x.4 == "start").map(|x| x.0).collect();
    let firsts: Vec<u64> = d.iter().filter(|x| x.4 == "slice").take(2).map(|x| x.0).collect();
    assert_eq!(starts.len(), 2);
    for (a, b) in starts.iter().zip(&firsts) {
        assert_eq!(b - a, tokens(3, 2).host.token_slice_ns);
    }
}

#[test]
fn late_slice_ends_make_the_cpus_slices_drift_apart_from_their_common_start() {
    let mut c = tokens(3, 2);
    c.duration_ns = 1_000_000_000;
    c.host.token_slice_exit_ns = 40_000;
    c.host.token_slice_exit_jitter = 0.3;
    let r = run(&c).unwrap();
    let d = decisions(&r);
    let ends = |cpu: i32| -> Vec<u64> { d.iter().filter(|x| x.1 == cpu && x.4 == "slice").map(|x| x.0).collect() };
    let (a, b) = (ends(0), ends(1));
    // each slice lasts its length plus a late end of about 40 µs (the median of the draws)
    let mut holds: Vec<u64> = a.windows(2).map(|w| w[1] - w[0]).collect();
    holds.sort_unstable();
    let median = holds[holds.len() / 2];
    assert!(median.abs_diff(c.host.token_slice_ns + 40_000) < 5_000, "median hold {median} ns");
    assert!(holds[0] > c.host.token_slice_ns && holds[0] < holds[holds.len() - 1]);
    // the first slice ends lie within one late end of each other; later the CPUs drift apart
    let off = |i: usize| a[i].abs_diff(b[i]);
    assert!(off(0) < 200_000, "first offset {} ns", off(0));
    let late = (a.len().min(b.len()) - 20..a.len().min(b.len())).map(off).max().unwrap();
    assert!(late > off(0), "offsets: first {} ns, last ones up to {late} ns", off(0));
}

#[test]
fn each_cpu_ends_its_slices_late_by_its_own_factor_for_the_run() {
    let mut c = tokens(3, 2);
    c.duration_ns = 400_000_000;
    c.host.token_slice_exit_ns = 40_000;
    // no per-slice jitter: every slice of a CPU is late by exactly its CPU's amount
    let lateness = |c: &SimConfig| -> Vec<Vec<u64>> {
        let r = run(c).unwrap();
        let d = decisions(&r);
        (0..2)
            .map(|cpu| {
                let ends: Vec<u64> = d.iter().filter(|x| x.1 == cpu && x.4 == "slice").map(|x| x.0).collect();
                ends.windows(2).map(|w| w[1] - w[0] - c.host.token_slice_ns).collect()
            })
            .collect()
    };
    // without the spread both CPUs are late by the median
    for l in lateness(&c) {
        assert!(l.len() > 50 && l.iter().all(|&x| x == 40_000), "{l:?}");
    }
    c.host.token_slice_exit_cpu_spread = 0.3;
    let mut factors = vec![];
    for seed in 0..8 {
        c.seed = seed;
        let l = lateness(&c);
        for cpu in &l {
            // one amount per CPU for the whole run
            assert!(cpu.len() > 50 && cpu.iter().all(|&x| x == cpu[0]), "{cpu:?}");
        }
        factors.push((l[0][0] as f64 / 40_000.0, l[1][0] as f64 / 40_000.0));
    }
    // drawn per CPU and per seed, around 1
    assert!(factors.iter().all(|&(a, b)| a != b), "{factors:?}");
    let logs: Vec<f64> = factors.iter().flat_map(|&(a, b)| [a.ln(), b.ln()]).collect();
    let mean = logs.iter().sum::<f64>() / logs.len() as f64;
    assert!(mean.abs() < 0.25 && logs.iter().any(|&x| x > 0.0) && logs.iter().any(|&x| x < 0.0), "{factors:?}");
}

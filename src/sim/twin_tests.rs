//! The options real-KVM twins need: a thread-0 phase list (an initiator and
//! a responder), open lock waits at the end of a run, several kernel-thread
//! noise tasks per CPU.

use super::config::*;
use super::metrics::Column;
use super::run;

const US: u64 = 1_000;

fn compute(ns: u64) -> Phase {
    Phase::Compute { ns, dist: Dist::Fixed, mode: Mode::Kernel, prob: 1.0 }
}

/// vCPU 0 computes `gap` then sends to vCPU 1 and waits for the reply;
/// vCPU 1 waits, computes `reply` and answers. One vCPU per CPU.
fn ping_pong(gap: u64, reply: u64) -> SimConfig {
    SimConfig {
        duration_ns: 100_000_000,
        host: HostConfig { n_pcpus: 2, affinity: Affinity::RoundRobin, ..Default::default() },
        vms: vec![VmConfig {
            vcpus: 2,
            policy: PolicyConfig { kind: PolicyKind::NoYield, ..Default::default() },
            halt_poll: HaltPollConfig { halt_poll_ns: 0, ..Default::default() },
            workload: WorkloadConfig {
                phases: vec![Phase::Recv { prob: 1.0 }, compute(reply), Phase::Send { to: 1, prob: 1.0 }],
                thread0_phases: vec![compute(gap), Phase::Send { to: 1, prob: 1.0 }, Phase::Recv { prob: 1.0 }],
                ..Default::default()
            },
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[test]
fn thread0_phases_make_an_asymmetric_ping_pong() {
    let c = ping_pong(50 * US, 5 * US);
    c.validate().unwrap();
    let r = run(&c).unwrap();
    let run_ns = r.vcpus.u64s("running_ns");
    let halted = r.vcpus.u64s("halted_ns");
    // each round: vCPU 0 runs 50 µs while vCPU 1 is halted, then vCPU 1
    // runs 5 µs while vCPU 0 is halted (plus the halt/wake-up costs)
    let ratio = run_ns[0] as f64 / run_ns[1] as f64;
    assert!((6.0..11.0).contains(&ratio), "running {run_ns:?}");
    assert!(halted[1] > halted[0], "halted {halted:?}");
    // both threads finish an iteration per round trip: the iteration latency
    // is the round: 55 µs of work plus two wake-ups of a halted vCPU (the
    // latency histogram's buckets are within 1.6 %)
    let ops = r.vms.u64s("ops")[0];
    let p50 = r.vms.f64s("lat_p50_ns")[0];
    assert!(ops > 1_000, "{ops}");
    assert!((51_000.0..80_000.0).contains(&p50), "{p50}");
    // a longer reply lengthens the round by the difference
    let r2 = run(&ping_pong(50 * US, 25 * US)).unwrap();
    let d = r2.vms.f64s("lat_p50_ns")[0] - p50;
    assert!((14_000.0..26_000.0).contains(&d), "{d}");
}

#[test]
fn thread0_phases_are_validated_and_omitted_at_their_default() {
    let mut c = ping_pong(50 * US, 5 * US);
    c.vms[0].workload.thread0_phases.push(Phase::Lock {
        lock: 0,
        lock_kind: LockKind::Tas,
        hold_ns: 1_000,
        dist: Dist::Fixed,
        prob: 1.0,
        sites: 1,
        irqs_off: false,
    });
    assert!(c.validate().unwrap_err().contains("thread0_phases[3]"));
    let mut c = ping_pong(50 * US, 5 * US);
    c.vms[0].workload.thread0_phases[1] = Phase::Send { to: 2, prob: 1.0 };
    assert!(c.validate().unwrap_err().contains("thread0_phases[1].to"));
    let mut c = ping_pong(50 * US, 5 * US);
    c.vms[0].workload.thread0_phases = vec![Phase::Recv { prob: 1.0 }];
    assert!(c.validate().unwrap_err().contains("must take time"));
    let d = SimConfig::default().to_json();
    assert!(!d.contains("thread0_phases") && !d.contains("kthreads_per_cpu"), "{d}");
    let c = ping_pong(50 * US, 5 * US);
    assert_eq!(SimConfig::from_json(&c.to_json()).unwrap(), c);
}

/// `v` vCPUs on one CPU contending for a TAS lock held `hold` ns.
fn tas(v: u32, hold: u64, iterations: u64) -> SimConfig {
    SimConfig {
        duration_ns: 200_000_000,
        host: HostConfig { n_pcpus: 1, affinity: Affinity::Pinned, ..Default::default() },
        vms: vec![VmConfig {
            vcpus: v,
            policy: PolicyConfig { kind: PolicyKind::NoYield, ..Default::default() },
            workload: WorkloadConfig {
                phases: vec![
                    compute(20 * US),
                    Phase::Lock {
                        lock: 0,
                        lock_kind: LockKind::Tas,
                        hold_ns: hold,
                        dist: Dist::Fixed,
                        prob: 1.0,
                        sites: 1,
                        irqs_off: false,
                    },
                ],
                iterations,
                ..Default::default()
            },
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[test]
fn waits_still_open_at_the_end_are_reported() {
    let c = tas(4, 200 * US, 0);
    let r = run(&c).unwrap();
    let n = r.vms.u64s("lock_waits_open")[0];
    let mean = r.vms.f64s("lock_wait_open_mean_ns")[0];
    // 4 vCPUs take turns on one CPU: at the end, the ones preempted while
    // waiting (at least the ones that did not hold it) still wait
    assert!((1..=4).contains(&n), "{n}");
    assert!(mean > 0.0 && mean <= c.duration_ns as f64, "{mean}");
    // a run of fixed iterations ends when every thread is done: none open
    let r = run(&tas(4, 200 * US, 50)).unwrap();
    assert_eq!(r.summary.get("finished"), Some(&Column::Bool(vec![true])));
    assert_eq!(r.vms.u64s("lock_waits_open")[0], 0);
    assert_eq!(r.vms.f64s("lock_wait_open_mean_ns")[0], 0.0);
}

/// One vCPU computing on one CPU beside `k` kernel-thread tasks that share
/// 2000 bursts/s of 40 µs.
fn noisy(k: u32) -> SimConfig {
    let mut c = tas(1, 1_000, 0);
    c.duration_ns = 1_000_000_000;
    c.vms[0].workload.phases = vec![compute(100_000_000)];
    c.host.noise = HostNoise { kthread_hz: 2000.0, kthread_ns: 40 * US, kthreads_per_cpu: k, ..Default::default() };
    c
}

#[test]
fn several_kthreads_per_cpu_share_the_rate_and_preempt_more_often() {
    let one = run(&noisy(1)).unwrap();
    let many = run(&noisy(16)).unwrap();
    // the same noise share (2000/s × 40 µs = 8 % of the CPU, Poisson ±10 %)
    for r in [&one, &many] {
        let bg = r.pcpus.u64s("bg_ns")[0] as f64 / 1e9;
        assert!((0.07..0.09).contains(&bg), "{bg}");
    }
    // each of 16 tasks ran little, keeps its lag and preempts at its wake-up;
    // one task carrying them all has used its share and waits more often
    let s1 = one.vcpus.u64s("sched_in")[0];
    let s16 = many.vcpus.u64s("sched_in")[0];
    assert!(s16 as f64 > 1.2 * s1 as f64, "sched_in 1 task {s1}, 16 tasks {s16}");
    assert!((1..=64).contains(&noisy(16).host.noise.kthreads_per_cpu));
    let mut bad = noisy(0);
    bad.host.noise.kthreads_per_cpu = 0;
    assert!(bad.validate().unwrap_err().contains("kthreads_per_cpu"));
}

/// `v` vCPUs pinned to host CPU 1 of a 2-CPU host (`Host.vcpu_pcpus`),
/// computing, with a VMM I/O thread that wakes 200 times a second.
fn on_cpu1(v: u32) -> SimConfig {
    let mut c = tas(v, 1_000, 0);
    c.duration_ns = 1_000_000_000;
    c.host.n_pcpus = 2;
    c.host.affinity = Affinity::RoundRobin;
    c.host.vcpu_pcpus = vec![1];
    c.vms[0].workload.phases = vec![compute(100_000_000)];
    c.host.noise = HostNoise { vmm_io_hz: 200.0, vmm_io_ns: 50 * US, ..Default::default() };
    c
}

#[test]
fn vcpu_pcpus_pin_the_vcpus_and_leave_the_other_cpus_to_the_vmm_thread() {
    let c = on_cpu1(2);
    c.validate().unwrap();
    let r = run(&c).unwrap();
    assert_eq!(r.vcpus.u64s("last_pcpu"), vec![1, 1]);
    // the VMM thread wakes onto the idle CPU 0: the vCPUs are switched at
    // the 4 ms ticks only (250 a second between the two)
    let s: u64 = r.vcpus.u64s("sched_in").iter().sum();
    assert!((249..=252).contains(&s), "sched_in {s}");
    assert!(r.pcpus.u64s("bg_ns")[0] > 0 && r.pcpus.u64s("bg_ns")[1] == 0);
    // the same run on CPU 1 alone: the VMM thread's wake-ups preempt the vCPUs
    let mut alone = on_cpu1(2);
    alone.host.n_pcpus = 1;
    alone.host.vcpu_pcpus = vec![];
    let s1: u64 = run(&alone).unwrap().vcpus.u64s("sched_in").iter().sum();
    assert!(s1 > s + 20, "one CPU {s1}, two {s}");
    let mut bad = on_cpu1(2);
    bad.host.vcpu_pcpus = vec![0, 2];
    assert!(bad.validate().unwrap_err().contains("host.vcpu_pcpus[1] must be < n_pcpus"));
}

/// `v` vCPUs taking a ticket lock on one CPU (hold and think 60 µs).
fn ticket(v: u32, gap: u64, seed: u64) -> SimConfig {
    let mut c = tas(v, 60 * US, 0);
    c.duration_ns = 1_000_000_000;
    c.seed = seed;
    c.host.base_slice_ns = 1_500_000;
    c.host.start_gap_ns = gap;
    c.host.slice_check_on_wakeup = gap > 0;
    c.vms[0].workload.phases = vec![
        compute(60 * US),
        Phase::Lock {
            lock: 0,
            lock_kind: LockKind::Ticket,
            hold_ns: 60 * US,
            dist: Dist::Fixed,
            prob: 1.0,
            sites: 1,
            irqs_off: false,
        },
    ];
    c
}

#[test]
fn staggered_starts_can_set_a_ticket_order_the_host_does_not_run_in() {
    // all at time 0: the ticket queue forms in the host's run order, one
    // hand-off per 4 ms slice, whatever the seed
    let aligned = run(&ticket(4, 0, 0)).unwrap().vms.u64s("lock_acquisitions")[0];
    assert_eq!(run(&ticket(4, 0, 7)).unwrap().vms.u64s("lock_acquisitions")[0], aligned);
    assert!((240..=500).contains(&aligned), "{aligned}");
    // arrivals ~35 µs apart (new tasks preempt, expired slices end at the
    // next wake-up): the first runs set the queue's order, the host's
    // round robin settles in another one for some seeds, and the rate varies
    let n: Vec<u64> = (0..8).map(|s| run(&ticket(4, 35 * US, s)).unwrap().vms.u64s("lock_acquisitions")[0]).collect();
    assert!(n.iter().any(|&x| (x as f64) < 0.75 * aligned as f64), "{n:?} vs {aligned}");
    assert!(n.iter().min() != n.iter().max(), "{n:?}");
    let mut bad = ticket(4, 0, 0);
    bad.host.start_gap_ns = 2_000_000_000;
    assert!(bad.validate().unwrap_err().contains("start_gap_ns"));
}

#[test]
fn a_wake_up_after_the_slice_ends_it_when_asked() {
    // two computing vCPUs on one CPU and short kernel-thread bursts: with the
    // check, a wake-up after the running task's 1.5 ms slice switches it out
    // before the 4 ms tick
    let mk = |on: bool| {
        let mut c = tas(2, 1_000, 0);
        c.duration_ns = 1_000_000_000;
        c.host.base_slice_ns = 1_500_000;
        c.vms[0].workload.phases = vec![compute(100_000_000)];
        // 16 independent tasks: a wake-up every 0.5 ms on average, none of
        // which preempts by itself: only an expired slice ends early
        c.host.noise = HostNoise { kthread_hz: 2000.0, kthread_ns: 5 * US, kthreads_per_cpu: 16, ..Default::default() };
        c.host.wakeup_preemption = false;
        c.host.slice_check_on_wakeup = on;
        c
    };
    let off: u64 = run(&mk(false)).unwrap().vcpus.u64s("sched_in").iter().sum();
    let on: u64 = run(&mk(true)).unwrap().vcpus.u64s("sched_in").iter().sum();
    assert!(on as f64 > 1.5 * off as f64, "sched_in with the check {on}, without {off}");
}

//! `Host.speed`: each host CPU's two-state speed process.

use super::super::config::*;
use crate::sim::test_util::sim_of;

/// `v` vCPUs pinned one per CPU, each computing 100-µs fixed phases for
/// `duration_ns`, under the speed process `speed`.
fn computing(v: u32, duration_ns: u64, speed: HostSpeed) -> SimConfig {
    SimConfig {
        duration_ns,
        host: HostConfig { n_pcpus: v, affinity: Affinity::RoundRobin, speed, ..Default::default() },
        vms: vec![VmConfig {
            vcpus: v,
            policy: PolicyConfig { kind: PolicyKind::NoYield, ..Default::default() },
            workload: WorkloadConfig {
                phases: vec![Phase::Compute { ns: 100_000, dist: Dist::Fixed, mode: Mode::Kernel, prob: 1.0 }],
                ..Default::default()
            },
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn iters(c: &SimConfig) -> Vec<u64> {
    let mut s = sim_of(c);
    s.step_until(c.duration_ns).unwrap();
    s.threads.iter().map(|t| t.iters).collect()
}

#[test]
fn work_runs_at_the_time_weighted_speed_of_the_two_states() {
    // slow 40 % of the time (dwells 6 and 4 ms): mean speed 0.6 × 100 + 0.4 × 50 = 80 %
    let speed = HostSpeed {
        fast_pct: 100,
        slow_pct: 50,
        fast_dwell_ns: 6_000_000,
        slow_dwell_ns: 4_000_000,
        ..Default::default()
    };
    let c = computing(4, 20_000_000_000, speed);
    let it = iters(&c);
    // 20 s of 100-µs phases: 200,000 at full speed; ~2,000 stretches per CPU, so
    // the slow share's standard error is ~1 % of the run
    for (cpu, &n) in it.iter().enumerate() {
        let share = n as f64 / 200_000.0;
        assert!((0.76..=0.84).contains(&share), "CPU {cpu}: {share:.3} of full speed ({it:?})");
    }
    // independent per CPU: not four equal counts
    assert!(it.iter().any(|&n| n != it[0]), "{it:?}");
}

#[test]
fn work_in_progress_is_replanned_when_the_state_changes() {
    // one 1-s phase against 1-ms stretches: were each phase's speed set at its
    // start only, a phase would run at one level; re-planned, at the mean
    let speed = HostSpeed {
        fast_pct: 100,
        slow_pct: 25,
        fast_dwell_ns: 1_000_000,
        slow_dwell_ns: 1_000_000,
        ..Default::default()
    };
    let mut c = computing(1, 10_000_000_000, speed);
    c.vms[0].workload.phases[0] =
        Phase::Compute { ns: 1_000_000_000, dist: Dist::Fixed, mode: Mode::Kernel, prob: 1.0 };
    let n = iters(&c)[0];
    // mean speed 62.5 %: 6.25 phases of 1 s in 10 s (4 at 25 %, 10 at 100 %)
    assert!((5..=7).contains(&n), "{n} phases of 1 s");
}

#[test]
fn an_equal_speed_process_changes_nothing_else() {
    // the process draws from its own stream: with both levels at 100 % the run
    // is the run without it, event for event
    let off = computing(2, 200_000_000, HostSpeed::default());
    let mut on = off.clone();
    on.host.speed = HostSpeed {
        fast_pct: 100,
        slow_pct: 100,
        fast_dwell_ns: 3_000_000,
        slow_dwell_ns: 1_000_000,
        ..Default::default()
    };
    let mut a = off.clone();
    a.vms[0].workload.phases[0] = Phase::Compute { ns: 100_000, dist: Dist::Exp, mode: Mode::Kernel, prob: 1.0 };
    let mut b = on.clone();
    b.vms[0].workload.phases[0] = a.vms[0].workload.phases[0].clone();
    assert_eq!(iters(&a), iters(&b));
    assert_eq!(iters(&off), iters(&on));
}

#[test]
fn the_process_is_deterministic_by_seed() {
    let speed = HostSpeed {
        fast_pct: 120,
        slow_pct: 60,
        fast_dwell_ns: 2_000_000,
        slow_dwell_ns: 1_000_000,
        ..Default::default()
    };
    let c = computing(2, 500_000_000, speed);
    assert_eq!(iters(&c), iters(&c));
    let mut d = c.clone();
    d.seed += 1;
    assert_ne!(iters(&c), iters(&d));
}

#[test]
fn a_half_set_or_inverted_process_is_refused() {
    for (sp, field) in [
        (HostSpeed { fast_dwell_ns: 1_000, ..Default::default() }, "fast_dwell_ns"),
        (
            HostSpeed { fast_pct: 80, slow_pct: 90, fast_dwell_ns: 1_000, slow_dwell_ns: 1_000, ..Default::default() },
            "slow_pct",
        ),
        (HostSpeed { slow_pct: 90, ..Default::default() }, "fast_pct"),
    ] {
        let c = computing(1, 1_000_000, sp);
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("host.speed") && e.contains(field), "{e}");
    }
}

#[test]
fn host_paths_stretch_a_wake_up_in_the_slow_state_only_when_asked() {
    // two vCPUs ping-pong through halts (Send / Recv), each wake-up 100 µs of
    // latency against 10 µs of work: the rate follows the wake-ups' speed
    let speed = HostSpeed {
        fast_pct: 100,
        slow_pct: 50,
        fast_dwell_ns: 5_000_000,
        slow_dwell_ns: 5_000_000,
        host_paths: false,
    };
    let mut c = computing(2, 2_000_000_000, speed.clone());
    c.host.wakeup_ipi_ns = 100_000;
    c.vms[0].threads = 2;
    c.vms[0].workload.thread0_phases = vec![
        Phase::Compute { ns: 10_000, dist: Dist::Fixed, mode: Mode::Kernel, prob: 1.0 },
        Phase::Send { to: 1, prob: 1.0 },
        Phase::Recv { prob: 1.0 },
    ];
    c.vms[0].workload.phases = vec![
        Phase::Recv { prob: 1.0 },
        Phase::Compute { ns: 10_000, dist: Dist::Fixed, mode: Mode::Kernel, prob: 1.0 },
        Phase::Send { to: 1, prob: 1.0 },
    ];
    let work_only = iters(&c)[0];
    let mut d = c.clone();
    d.host.speed.host_paths = true;
    let all = iters(&d)[0];
    // ~220 µs a round at full speed; the slow half of the time stretches the
    // work (20 → 40 µs) alone, or the work and both wake-ups (200 → 400 µs)
    assert!(all < work_only * 4 / 5, "host paths {all} rounds, work only {work_only}");
}

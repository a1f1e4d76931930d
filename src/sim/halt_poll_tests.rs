use super::*;

fn cfg(p: Policy) -> HaltPollConfig {
    HaltPollConfig::new(p)
}

/// One halt: starts at `t`, the event arrives `after` ns later; polls if the
/// window allows and the event comes inside it, else blocks and wakes at once.
fn halt(s: &mut HaltPollState, c: &HaltPollConfig, t: u64, after: u64) -> HaltRecord {
    s.on_halt_exit();
    match s.on_halt(c, t) {
        Some(stop) if t + after <= stop => s.on_halt_end(c, t + after, false, true).unwrap(),
        Some(stop) => {
            s.on_poll_stop(stop);
            s.on_wakeup();
            s.on_halt_end(c, t + after, true, true).unwrap()
        }
        None => {
            s.on_wakeup();
            s.on_halt_end(c, t + after, true, true).unwrap()
        }
    }
}

#[test]
fn grow_sequence_is_the_kernel_default_and_clamps_at_the_next_halt() {
    let c = cfg(Policy::BlockTime);
    let mut s = HaltPollState::new(&c);
    let mut seen = vec![s.halt_poll_ns];
    // halts of 190 µs: shorter than the max, longer than every window below it
    for k in 0..6 {
        halt(&mut s, &c, k * 1_000_000, 190_000);
        seen.push(s.halt_poll_ns);
    }
    assert_eq!(seen, vec![0, 10_000, 20_000, 40_000, 80_000, 160_000, 320_000]);
    // the next halt clamps 320000 to the max
    let r = halt(&mut s, &c, 10_000_000, 100_000);
    assert_eq!(r.window_ns, 200_000);
    assert!(!r.waited);
    assert_eq!(s.halt_poll_ns, 200_000);
}

#[test]
fn shrink_sequence_halves_then_drops_below_grow_start_to_zero() {
    let mut c = cfg(Policy::BlockTime);
    c.halt_poll_ns = 200_000;
    let mut s = HaltPollState::new(&c);
    s.halt_poll_ns = 200_000;
    let mut seen = vec![];
    for k in 0..6 {
        halt(&mut s, &c, k * 10_000_000, 1_000_000); // longer than the max: shrink
        seen.push(s.halt_poll_ns);
    }
    assert_eq!(seen, vec![100_000, 50_000, 25_000, 12_500, 0, 0]);
    // shrink = 0 resets at once
    c.shrink = 0;
    s.halt_poll_ns = 200_000;
    halt(&mut s, &c, 100_000_000, 1_000_000);
    assert_eq!(s.halt_poll_ns, 0);
}

#[test]
fn block_time_decision_cases() {
    let c = cfg(Policy::BlockTime);
    let mut s = HaltPollState::new(&c);
    s.halt_poll_ns = 40_000;
    halt(&mut s, &c, 0, 30_000); // caught: nothing changes
    assert_eq!(s.halt_poll_ns, 40_000);
    halt(&mut s, &c, 1_000_000, 120_000); // missed but shorter than the max: grow
    assert_eq!(s.halt_poll_ns, 80_000);
    halt(&mut s, &c, 2_000_000, 250_000); // longer than the max: shrink
    assert_eq!(s.halt_poll_ns, 40_000);
    // a window of 0 and a halt longer than the max: stays 0 (no shrink, no grow)
    s.halt_poll_ns = 0;
    halt(&mut s, &c, 3_000_000, 500_000);
    assert_eq!(s.halt_poll_ns, 0);
    assert_eq!(s.stats.grows, 1);
    assert_eq!(s.stats.shrinks, 1);
}

#[test]
fn stats_are_updated_where_the_kernel_does() {
    let c = cfg(Policy::BlockTime);
    let mut s = HaltPollState::new(&c);
    s.halt_poll_ns = 50_000;
    halt(&mut s, &c, 0, 20_000); // success after 20 µs of polling
    let r = halt(&mut s, &c, 1_000_000, 150_000); // fails after 50 µs, sleeps 100 µs
    assert!(r.waited && r.polled);
    assert_eq!(r.poll_ns, 50_000);
    assert_eq!(r.halt_ns, 150_000);
    let st = &s.stats;
    assert_eq!(st.halt_exits, 2);
    assert_eq!(st.halt_attempted_poll, 2);
    assert_eq!(st.halt_successful_poll, 1);
    assert_eq!(st.halt_poll_success_ns, 20_000);
    assert_eq!(st.halt_poll_fail_ns, 50_000);
    assert_eq!(st.halt_wait_ns, 100_000);
    assert_eq!(st.halt_wakeup, 1);
    assert_eq!(st.halt_poll_invalid, 0);
    // an invalid wake-up (s390) counts and shrinks
    s.on_halt(&c, 5_000_000).unwrap();
    s.on_halt_end(&c, 5_001_000, false, false).unwrap();
    assert_eq!(s.stats.halt_poll_invalid, 1);
}

#[test]
fn success_without_sleeping_counts_even_after_the_loop_ended() {
    // the poll loop ended (another task runnable) but kvm_vcpu_block returned at once
    let c = cfg(Policy::BlockTime);
    let mut s = HaltPollState::new(&c);
    s.halt_poll_ns = 100_000;
    s.on_halt(&c, 0).unwrap();
    s.on_poll_stop(5_000);
    let r = s.on_halt_end(&c, 5_000, false, true).unwrap();
    assert!(!r.waited);
    assert_eq!(s.stats.halt_successful_poll, 1);
}

#[test]
fn off_never_polls_and_fixed_always_polls_the_max() {
    let off = cfg(Policy::Off);
    let mut s = HaltPollState::new(&off);
    for k in 0..5 {
        let r = halt(&mut s, &off, k * 1_000_000, 20_000);
        assert!(!r.polled);
    }
    assert_eq!(s.stats.halt_attempted_poll, 0);
    assert_eq!(s.stats.halt_wakeup, 5);
    let mut fixed = cfg(Policy::Fixed);
    fixed.halt_poll_ns = 100_000;
    let mut s = HaltPollState::new(&fixed);
    for k in 0..5 {
        let r = halt(&mut s, &fixed, k * 10_000_000, 4_000_000);
        assert_eq!(r.window_ns, 100_000);
    }
    assert_eq!(s.stats.halt_poll_fail_ns, 500_000);
}

#[test]
fn vm_cap_overrides_the_module_parameter_and_is_read_live() {
    let mut c = cfg(Policy::BlockTime);
    c.vm_max_ns = Some(50_000);
    let mut s = HaltPollState::new(&c);
    s.halt_poll_ns = 200_000;
    assert_eq!(halt(&mut s, &c, 0, 10_000).window_ns, 50_000);
    // the cap goes to 0 between halts: polling stops and the window resets
    c.vm_max_ns = Some(0);
    let r = halt(&mut s, &c, 1_000_000, 10_000);
    assert!(!r.polled);
    assert_eq!(s.halt_poll_ns, 0);
    // the guest disabled polling (MSR_KVM_POLL_CONTROL): no poll, no adaptation
    c.vm_max_ns = None;
    c.poll_allowed = false;
    s.halt_poll_ns = 40_000;
    assert!(!halt(&mut s, &c, 2_000_000, 10_000).polled);
    assert_eq!(s.halt_poll_ns, 40_000);
}

#[test]
fn v4_grows_on_interrupts_while_polling_and_shrinks_only_when_idle() {
    let mut c = cfg(Policy::DynamicV4);
    c.v4_start_ns = Some(10_000);
    let mut s = HaltPollState::new(&c);
    assert_eq!(s.halt_poll_ns, 10_000);
    halt(&mut s, &c, 0, 5_000); // caught: grow
    assert_eq!(s.halt_poll_ns, 20_000);
    halt(&mut s, &c, 1_000_000, 4_000_000); // missed, 4 ms < idle: no change
    assert_eq!(s.halt_poll_ns, 20_000);
    halt(&mut s, &c, 10_000_000, 50_000_000); // idle: shrink
    assert_eq!(s.halt_poll_ns, 10_000);
    halt(&mut s, &c, 100_000_000, 50_000_000);
    assert_eq!(s.halt_poll_ns, 0);
    // at 0 an interrupt can never arrive while polling: it never grows again
    for k in 0..10 {
        halt(&mut s, &c, 200_000_000 + k * 1_000_000, 20_000);
    }
    assert_eq!(s.halt_poll_ns, 0);
    // default start: the maximum
    assert_eq!(HaltPollState::new(&cfg(Policy::DynamicV4)).halt_poll_ns, 200_000);
}

fn msg(policy: Policy, max: u64, gap_us: u64, rounds: u64) -> Scenario {
    let mut hp = cfg(policy);
    hp.vm_max_ns = Some(max);
    Scenario {
        halt_poll: hp,
        vcpus: vec![Wake::Message { gap_ns: gap_us * 1000, exponential: false }],
        costs: Costs::default(),
        background: None,
        duration_ns: 0,
        rounds,
        seed: 1,
        trace: false,
    }
}

fn idle(policy: Policy, hz: u32) -> Scenario {
    Scenario {
        halt_poll: cfg(policy),
        vcpus: vec![Wake::Timer { hz }],
        costs: Costs::default(),
        background: None,
        duration_ns: 1_000_000_000,
        rounds: 0,
        seed: 1,
        trace: false,
    }
}

#[test]
fn ping_pong_polls_with_200us_and_blocks_with_0() {
    let r = simulate(&msg(Policy::BlockTime, 200_000, 50, 1000)).unwrap();
    let v = &r.vcpus[0];
    assert_eq!(v.rounds, 1000);
    assert!(v.stats.halt_successful_poll > 990, "{:?}", v.stats);
    let r0 = simulate(&msg(Policy::BlockTime, 0, 50, 1000)).unwrap();
    let v0 = &r0.vcpus[0];
    assert_eq!(v0.stats.halt_attempted_poll, 0);
    assert_eq!(v0.stats.halt_wakeup, v0.stats.halt_exits);
    let med = |x: &[u64]| {
        let mut y = x.to_vec();
        y.sort();
        y[y.len() / 2]
    };
    // a blocked wake-up costs the wake-up latency on top of the polled one
    let d = med(&v0.rtt_ns) as i64 - med(&v.rtt_ns) as i64;
    let c = Costs::default();
    assert_eq!(d, (c.wake_latency_ns - c.poll_detect_ns) as i64);
}

#[test]
fn block_time_shrinks_to_zero_for_long_gaps() {
    let r = simulate(&msg(Policy::BlockTime, 200_000, 1000, 300)).unwrap();
    let v = &r.vcpus[0];
    assert_eq!(v.stats.halt_successful_poll, 0);
    assert_eq!(v.final_halt_poll_ns, 0);
    // v4 starts at the max and keeps polling in vain
    let r4 = simulate(&msg(Policy::DynamicV4, 200_000, 1000, 300)).unwrap();
    assert!(r4.vcpus[0].poll_cpu_ns > 200 * 200_000);
}

#[test]
fn short_gaps_v4_sits_at_the_max_block_time_settles_near_the_gap() {
    let r4 = simulate(&msg(Policy::DynamicV4, 200_000, 20, 500)).unwrap();
    let rb = simulate(&msg(Policy::BlockTime, 200_000, 20, 500)).unwrap();
    assert_eq!(r4.vcpus[0].final_halt_poll_ns, 200_000);
    let w = rb.vcpus[0].final_halt_poll_ns;
    assert!((20_000..=80_000).contains(&w), "block-time window {w}");
    // both catch nearly every wake-up
    assert!(r4.vcpus[0].stats.halt_successful_poll >= 495);
    assert!(rb.vcpus[0].stats.halt_successful_poll >= 490);
}

#[test]
fn idle_overhead_orders_off_block_time_fixed_and_v4_keeps_polling() {
    let p = |pol| simulate(&idle(pol, 250)).unwrap().vcpus[0].poll_cpu_ns;
    let (off, bt, fx, v4) = (p(Policy::Off), p(Policy::BlockTime), p(Policy::Fixed), p(Policy::DynamicV4));
    assert_eq!(off, 0);
    assert!(bt < 200_000 * 5, "block-time polled {bt} ns");
    assert!(fx > 240 * 200_000);
    assert!(v4 > 240 * 200_000);
    assert!(off <= bt && bt < fx);
}

#[test]
fn another_runnable_task_stops_polling() {
    // another task is runnable on the CPU half the time: polls get cut short
    let mut sc = msg(Policy::Fixed, 200_000, 300, 300);
    let alone = simulate(&sc).unwrap();
    sc.background = Some(Background { busy_ns: 2_000_000, idle_ns: 2_000_000 });
    let busy = simulate(&sc).unwrap();
    let frac = busy.background_ns as f64 / busy.end_ns as f64;
    assert!((0.2..0.8).contains(&frac), "busy fraction {frac}");
    let a = &alone.vcpus[0].stats;
    let b = &busy.vcpus[0].stats;
    assert!(b.halt_poll_fail_ns < a.halt_poll_fail_ns * 3 / 4, "{a:?} vs {b:?}");
    // and a short-gap ping-pong catches fewer wake-ups by polling
    let mut sc = msg(Policy::BlockTime, 200_000, 20, 1000);
    let a = simulate(&sc).unwrap().vcpus[0].stats.halt_successful_poll;
    sc.background = Some(Background { busy_ns: 2_000_000, idle_ns: 2_000_000 });
    let b = simulate(&sc).unwrap().vcpus[0].stats.halt_successful_poll;
    assert!(a > 990 && b < 800 && b > 200, "{a} vs {b}");
    // always busy: never a successful poll
    sc.background = Some(Background { busy_ns: 1_000_000_000_000, idle_ns: 1 });
    assert_eq!(simulate(&sc).unwrap().vcpus[0].stats.halt_successful_poll, 0);
}

#[test]
fn two_vcpus_on_one_cpu_abort_each_others_polls() {
    let mut sc = msg(Policy::Fixed, 200_000, 100, 200);
    sc.vcpus.push(Wake::Message { gap_ns: 100_000, exponential: false });
    let r = simulate(&sc).unwrap();
    for v in &r.vcpus {
        assert_eq!(v.rounds, 200);
    }
    let fails: u64 = r.vcpus.iter().map(|v| v.stats.halt_attempted_poll - v.stats.halt_successful_poll).sum();
    assert!(fails > 0);
}

#[test]
fn deterministic_for_a_seed_and_seed_matters_with_randomness() {
    let mut sc = msg(Policy::BlockTime, 200_000, 50, 500);
    sc.vcpus = vec![Wake::Message { gap_ns: 50_000, exponential: true }];
    sc.costs.wake_jitter_ns = 5_000;
    sc.trace = true;
    let a = simulate(&sc).unwrap();
    let b = simulate(&sc).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.trace.as_ref().unwrap().halt_ns.len() as u64, a.vcpus[0].stats.halt_exits);
    sc.seed = 2;
    assert_ne!(simulate(&sc).unwrap().vcpus[0].rtt_ns, a.vcpus[0].rtt_ns);
}

#[test]
fn validation_names_the_field() {
    let mut sc = msg(Policy::BlockTime, 200_000, 50, 0);
    assert!(simulate(&sc).unwrap_err().to_string().contains("rounds"));
    sc.rounds = 10;
    sc.halt_poll.vm_max_ns = Some(1 << 40);
    assert!(simulate(&sc).unwrap_err().to_string().contains("vm_max_ns"));
    sc.halt_poll.vm_max_ns = None;
    sc.vcpus = vec![Wake::Timer { hz: 0 }];
    sc.duration_ns = 1000;
    assert!(simulate(&sc).unwrap_err().to_string().contains("hz"));
    sc.vcpus = vec![];
    assert!(simulate(&sc).unwrap_err().to_string().contains("vcpus"));
    assert!(Policy::parse("nope").unwrap_err().contains("block-time"));
}

#[test]
fn an_interrupt_pending_when_the_poll_loop_is_cut_short_is_not_lost() {
    // exponential gaps + background load + jitter: the event can become pending
    // between the last look of the poll loop and the abort (regression: a hang)
    let mut sc = msg(Policy::BlockTime, 200_000, 50, 2000);
    sc.vcpus = vec![Wake::Message { gap_ns: 50_000, exponential: true }];
    sc.costs.wake_jitter_ns = 5_000;
    sc.background = Some(Background { busy_ns: 100_000, idle_ns: 200_000 });
    for seed in 0..5 {
        sc.seed = seed;
        let r = simulate(&sc).unwrap();
        assert_eq!(r.vcpus[0].rounds, 2000);
        let s = &r.vcpus[0].stats;
        assert_eq!(s.halt_successful_poll + s.halt_wakeup, s.halt_exits, "{s:?}");
    }
}

#[test]
fn a_timed_run_ends_at_its_duration_and_accounts_cpu_up_to_it() {
    let r = simulate(&idle(Policy::Fixed, 250)).unwrap();
    assert_eq!(r.end_ns, 1_000_000_000);
    let v = &r.vcpus[0];
    assert!(v.busy_ns >= v.poll_cpu_ns && v.busy_ns <= r.end_ns);
    // 250 ticks, each polled for the whole 200 µs window
    assert!((v.poll_cpu_ns as i64 - 250 * 200_000).abs() <= 200_000, "{}", v.poll_cpu_ns);
}

#[test]
fn one_vocabulary_with_the_engines_first_names_as_aliases() {
    for name in POLICY_NAMES {
        assert_eq!(Policy::parse(name).unwrap().name(), name);
        let p: Policy = serde_json::from_str(&format!("\"{name}\"")).unwrap();
        assert_eq!(p.name(), name);
    }
    for (old, new) in [("dynamic", Policy::BlockTime), ("dynamic_v4", Policy::DynamicV4)] {
        assert_eq!(Policy::parse(old).unwrap(), new);
        assert_eq!(serde_json::from_str::<Policy>(&format!("\"{old}\"")).unwrap(), new);
    }
    let e = Policy::parse("v5").unwrap_err();
    assert!(e.contains("'dynamic-v3'") && e.contains("'block-time'"), "{e}");
    // the engine's JSON names are aliases of the one config type's fields
    let c: HaltPollConfig =
        serde_json::from_str(r#"{"policy": "dynamic", "max_ns": 50000, "grow_start_ns": 5000}"#).unwrap();
    assert_eq!((c.policy, c.halt_poll_ns, c.grow_start), (Policy::BlockTime, 50_000, 5_000));
    assert_eq!(HaltPollConfig::default(), HaltPollConfig::new(Policy::Off));
}

#[test]
fn v3_oscillates_on_an_idle_ticking_guest() {
    // 250 Hz: each halt 3.9 ms, the tick catchable by a poll; the series' shrink 0
    let mut c = cfg(Policy::DynamicV3);
    c.halt_poll_ns = 8_000_000;
    c.shrink = 0;
    let mut s = HaltPollState::new(&c);
    let mut w = Vec::new();
    for i in 0..10u64 {
        w.push(halt(&mut s, &c, i * 4_000_000, 3_900_000).window_ns);
    }
    assert_eq!(w, [0, 500_000, 1_000_000, 2_000_000, 4_000_000, 0, 500_000, 1_000_000, 2_000_000, 4_000_000]);
}

#[test]
fn a_background_of_one_ns_periods_is_not_a_bug() {
    // background on/off events do not count against the stuck-vCPU budget
    let mut sc = msg(Policy::DynamicV4, 200_000, 50, 100);
    sc.background = Some(Background { busy_ns: 1, idle_ns: 1 });
    let r = simulate(&sc).unwrap();
    assert_eq!(r.vcpus[0].rounds, 100);
}

#[test]
fn an_interrupt_check_stops_a_long_run() {
    let sc = msg(Policy::DynamicV4, 200_000, 50, 10_000_000);
    let calls = std::cell::Cell::new(0u32);
    let r = simulate_checked(&sc, &|| {
        calls.set(calls.get() + 1);
        calls.get() >= 3
    });
    assert_eq!(r.unwrap_err(), crate::sim::SimError::Interrupted);
    assert_eq!(calls.get(), 3);
}

#[test]
fn a_config_alone_is_checked_against_its_attributes_limits() {
    let mut c = cfg(Policy::DynamicV4);
    c.validate().unwrap();
    c.halt_poll_ns = UINT_MAX + 1;
    assert_eq!(c.validate().unwrap_err(), format!("max_ns must be <= {UINT_MAX}, got {}", UINT_MAX + 1));
    let mut c = cfg(Policy::DynamicV4);
    c.vm_max_ns = Some(UINT_MAX + 1);
    assert!(c.validate().unwrap_err().starts_with("vm_max_ns must be <= "));
    c.vm_max_ns = Some(UINT_MAX);
    c.v4_idle_ns = 0;
    assert_eq!(c.validate().unwrap_err(), "v4_idle_ns must be >= 1, got 0");
    c.v4_idle_ns = MAX_V4_IDLE_NS + 1;
    assert!(c.validate().unwrap_err().starts_with(&format!("v4_idle_ns must be <= {MAX_V4_IDLE_NS}")));
}

//! The rules [`SimConfig::validate`] enforces: every field's range (the same
//! limits the schema states) and the rules across fields.

use super::*;

/// `workload.thread0_phases`: what thread 0 may run instead of `phases`.
fn check_thread0_phases(i: usize, vm: &VmConfig) -> Result<(), String> {
    let ph = &vm.workload.thread0_phases;
    if ph.is_empty() {
        return Ok(());
    }
    let threads = if vm.threads == 0 { vm.vcpus } else { vm.threads };
    check(ph.len() <= MAX_PHASES, || format!("vms[{i}].workload.thread0_phases must hold <= {MAX_PHASES} phases"))?;
    check(threads >= 2, || format!("vms[{i}].workload.thread0_phases needs >= 2 guest threads, got {threads}"))?;
    let mut any_work = false;
    for (j, p) in ph.iter().enumerate() {
        let pf = |name: &str| format!("vms[{i}].workload.thread0_phases[{j}].{name}");
        let pr = p.prob();
        check((0.0..=1.0).contains(&pr), || format!("{} must be in [0, 1], got {pr}", pf("prob")))?;
        match p {
            Phase::Compute { ns, .. } | Phase::Sleep { ns, .. } => {
                check(*ns <= 1_000_000_000_000, || format!("{} must be <= 1e12, got {ns}", pf("ns")))?;
                if let Phase::Sleep { ns, dist, periodic: true, .. } = p {
                    check(*ns > 0 && *dist == Dist::Fixed, || {
                        format!("{} needs ns > 0 and dist \"fixed\"", pf("periodic"))
                    })?;
                }
                any_work |= *ns > 0 && pr >= 1.0;
            }
            Phase::Send { to, .. } => {
                check(*to >= 1 && *to < threads, || format!("{} must be in [1, threads), got {to}", pf("to")))?;
            }
            Phase::Barrier { .. } | Phase::Recv { .. } => {}
            Phase::Lock { .. } | Phase::Ipi { .. } | Phase::TaskQueue { .. } => {
                return Err(format!(
                    "vms[{i}].workload.thread0_phases[{j}]: only compute, sleep, barrier, send and recv phases"
                ));
            }
        }
    }
    check(any_work, || {
        format!("vms[{i}].workload.thread0_phases must take time (a compute or sleep phase with ns > 0 and prob 1)")
    })
}

fn check(cond: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}

impl SimConfig {
    /// Parse and validate a JSON configuration.
    pub fn from_json(s: &str) -> Result<SimConfig, String> {
        // the error names the field it is about (`vms[0].halt_poll.grow: invalid value …`)
        let mut de = serde_json::Deserializer::from_str(s);
        let c: SimConfig = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let at = e.path().to_string();
            let what = e.into_inner();
            if at == "." || at.is_empty() {
                format!("invalid configuration JSON: {what}")
            } else {
                format!("invalid configuration JSON: {at}: {what}")
            }
        })?;
        de.end().map_err(|e| format!("invalid configuration JSON: {e}"))?;
        c.validate()?;
        Ok(c)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("config serialises")
    }

    /// Check every field; the error names the field (`host.pcpus must be >= 1, got 0`).
    pub fn validate(&self) -> Result<(), String> {
        check(self.duration_ns >= 1, || format!("duration_ns must be >= 1, got {}", self.duration_ns))?;
        check(self.duration_ns <= limits::MAX_DURATION_NS, || {
            format!("duration_ns must be <= 2^50, got {}", self.duration_ns)
        })?;
        check(self.warmup_ns < self.duration_ns, || {
            format!("warmup_ns must be < duration_ns ({}), got {}", self.duration_ns, self.warmup_ns)
        })?;
        check(self.trace_from_ns < self.duration_ns, || {
            format!("trace_from_ns must be < duration_ns ({}), got {}", self.duration_ns, self.trace_from_ns)
        })?;
        check(self.trace_until_ns == 0 || self.trace_until_ns > self.trace_from_ns, || {
            format!(
                "trace_until_ns must be 0 (the run's end) or > trace_from_ns ({}), got {}",
                self.trace_from_ns, self.trace_until_ns
            )
        })?;
        let h = &self.host;
        check(h.pcpus >= 1, || format!("host.pcpus must be >= 1, got {}", h.pcpus))?;
        check(h.pcpus <= MAX_PCPUS, || format!("host.pcpus must be <= {MAX_PCPUS}, got {}", h.pcpus))?;
        use limits::*;
        for (name, v, lo) in [
            ("tick_ns", h.tick_ns, MIN_PERIOD_NS),
            ("base_slice_ns", h.base_slice_ns, MIN_PERIOD_NS),
            ("gang_slice_ns", h.gang_slice_ns, MIN_PERIOD_NS),
            ("token_slice_ns", h.token_slice_ns, MIN_PERIOD_NS),
            ("tsc_khz", h.tsc_khz, MIN_TSC_KHZ),
        ] {
            check(v >= lo, || format!("host.{name} must be >= {lo}, got {v}"))?;
        }
        for (name, v) in
            [("rq_lock_ns", h.rq_lock_ns), ("yield_check_ns", h.yield_check_ns), ("switch_ns", h.switch_ns)]
        {
            check(v <= MAX_COST_NS, || format!("host.{name} must be <= 1e9, got {v}"))?;
        }
        check(h.token_skew_ns <= MAX_TOKEN_SKEW_NS, || {
            format!("host.token_skew_ns must be <= 1e10, got {}", h.token_skew_ns)
        })?;
        let u = h.background.utilization;
        check((0.0..1.0).contains(&u), || format!("host.background.utilization must be in [0, 1), got {u}"))?;
        check((MIN_WEIGHT..=MAX_WEIGHT).contains(&h.background.weight), || {
            format!("host.background.weight must be in [{MIN_WEIGHT}, {MAX_WEIGHT}], got {}", h.background.weight)
        })?;
        check(h.background.burst_ns >= MIN_PERIOD_NS, || {
            format!("host.background.burst_ns must be >= {MIN_PERIOD_NS}, got {}", h.background.burst_ns)
        })?;
        check(h.wakeup_ipi_ns <= MAX_COST_NS, || {
            format!("host.wakeup_ipi_ns must be <= 1e9, got {}", h.wakeup_ipi_ns)
        })?;
        let j = h.wakeup_jitter;
        check((0.0..=1.0).contains(&j), || format!("host.wakeup_jitter must be in [0, 1], got {j}"))?;
        for (i, &(exit, res)) in h.idle_states.iter().enumerate() {
            check(exit <= MAX_COST_NS && res <= MAX_COST_NS, || {
                format!("host.idle_states[{i}] must hold times <= 1e9 ns, got ({exit}, {res})")
            })?;
            if i > 0 {
                let (pe, pr) = h.idle_states[i - 1];
                check(exit >= pe && res >= pr, || {
                    format!("host.idle_states[{i}] must be at least as deep as idle_states[{}]", i - 1)
                })?;
            }
        }
        let n = &h.noise;
        for (name, hz, ns) in [("kthread", n.kthread_hz, n.kthread_ns), ("vmm_io", n.vmm_io_hz, n.vmm_io_ns)] {
            check(hz.is_finite() && (0.0..=MAX_NOISE_HZ).contains(&hz), || {
                format!("host.noise.{name}_hz must be in [0, {MAX_NOISE_HZ}], got {hz}")
            })?;
            check((MIN_NOISE_NS..=MAX_COST_NS).contains(&ns), || {
                format!("host.noise.{name}_ns must be in [{MIN_NOISE_NS}, 1e9], got {ns}")
            })?;
            check(hz * ns as f64 <= MAX_NOISE_SHARE_NS_PER_S, || {
                format!("host.noise.{name}_hz * {name}_ns must be <= 0.5 s per s (half a CPU), got {hz} * {ns}")
            })?;
        }
        check((1..=MAX_KTHREADS_PER_CPU).contains(&n.kthreads_per_cpu), || {
            format!("host.noise.kthreads_per_cpu must be in [1, {MAX_KTHREADS_PER_CPU}], got {}", n.kthreads_per_cpu)
        })?;
        let c = &h.cfs;
        for (name, v) in [
            ("latency_ns", c.latency_ns),
            ("min_granularity_ns", c.min_granularity_ns),
            ("wakeup_granularity_ns", c.wakeup_granularity_ns),
        ] {
            check((MIN_PERIOD_NS..=MAX_COST_NS).contains(&v), || {
                format!("host.cfs.{name} must be in [{MIN_PERIOD_NS}, 1e9], got {v}")
            })?;
        }
        check(c.min_granularity_ns <= c.latency_ns, || {
            format!(
                "host.cfs.min_granularity_ns must be <= latency_ns ({}), got {}",
                c.latency_ns, c.min_granularity_ns
            )
        })?;
        check(
            h.sockets >= 1
                && h.sockets <= h.pcpus
                && h.threads_per_core >= 1
                && h.threads_per_core <= MAX_THREADS_PER_CORE,
            || {
                format!(
                "host.sockets must be in [1, pcpus] and host.threads_per_core in [1, {MAX_THREADS_PER_CORE}], got {} and {}",
                h.sockets, h.threads_per_core
            )
            },
        )?;
        check(h.pcpus % (h.sockets * h.threads_per_core) == 0, || {
            format!(
                "host.pcpus ({}) must be a multiple of host.sockets × host.threads_per_core ({} × {})",
                h.pcpus, h.sockets, h.threads_per_core
            )
        })?;
        check((1..=MAX_LB_BUSY_FACTOR).contains(&h.lb_busy_factor), || {
            format!("host.lb_busy_factor must be in [1, {MAX_LB_BUSY_FACTOR}], got {}", h.lb_busy_factor)
        })?;
        check((MIN_SMT_SPEED_PCT..=100).contains(&h.smt_speed_pct), || {
            format!("host.smt_speed_pct must be in [{MIN_SMT_SPEED_PCT}, 100], got {}", h.smt_speed_pct)
        })?;
        check(h.migration_cost_ns <= MAX_COST_NS, || {
            format!("host.migration_cost_ns must be <= 1e9, got {}", h.migration_cost_ns)
        })?;
        check(h.migration_cold_core_ns <= MAX_COST_NS, || {
            format!("host.migration_cold_core_ns must be <= 1e9, got {}", h.migration_cold_core_ns)
        })?;
        check(h.migration_cold_llc_ns <= MAX_COST_NS, || {
            format!("host.migration_cold_llc_ns must be <= 1e9, got {}", h.migration_cold_llc_ns)
        })?;
        check(h.start_gap_ns <= MAX_COST_NS, || format!("host.start_gap_ns must be <= 1e9, got {}", h.start_gap_ns))?;
        check(h.vcpu_pcpus.len() as u64 <= MAX_VCPUS_TOTAL, || {
            format!("host.vcpu_pcpus must hold at most {MAX_VCPUS_TOTAL} CPUs, got {}", h.vcpu_pcpus.len())
        })?;
        if let Some((i, &c)) = h.vcpu_pcpus.iter().enumerate().find(|&(_, &c)| c >= h.pcpus) {
            return Err(format!("host.vcpu_pcpus[{i}] must be < pcpus ({}), got {c}", h.pcpus));
        }
        check(!self.vms.is_empty(), || "vms must hold at least one VM".to_string())?;
        let mut total: u64 = 0;
        check(self.host.scheduler != Scheduler::Pinned || self.host.affinity != Affinity::All, || {
            "host.scheduler = pinned needs pinned vCPU threads: host.affinity must be pinned or round_robin, got all"
                .to_string()
        })?;
        for (i, vm) in self.vms.iter().enumerate() {
            let f = |name: &str| format!("vms[{i}].{name}");
            check(vm.count >= 1, || format!("{} must be >= 1, got {}", f("count"), vm.count))?;
            check(vm.vcpus >= 1, || format!("{} must be >= 1, got {}", f("vcpus"), vm.vcpus))?;
            check(vm.count as u64 <= MAX_VCPUS_TOTAL, || {
                format!("{} must be <= {MAX_VCPUS_TOTAL}, got {}", f("count"), vm.count)
            })?;
            check(vm.vcpus as u64 <= MAX_VCPUS_TOTAL, || {
                format!("{} must be <= {MAX_VCPUS_TOTAL}, got {}", f("vcpus"), vm.vcpus)
            })?;
            check((MIN_WEIGHT..=MAX_WEIGHT).contains(&vm.weight), || {
                format!("{} must be in [{MIN_WEIGHT}, {MAX_WEIGHT}] (nice 19 .. -20), got {}", f("weight"), vm.weight)
            })?;
            check(self.host.scheduler != Scheduler::Balance || vm.vcpus <= self.host.pcpus, || {
                format!(
                    "{} must be <= host.pcpus ({}) under scheduler=balance (siblings run on distinct CPUs), got {}",
                    f("vcpus"),
                    self.host.pcpus,
                    vm.vcpus
                )
            })?;
            total += vm.count as u64 * vm.vcpus as u64;
            check(total <= MAX_VCPUS_TOTAL, || format!("{} : total vCPUs must be <= {MAX_VCPUS_TOTAL}", f("vcpus")))?;
            let threads = if vm.threads == 0 { vm.vcpus } else { vm.threads };
            check(threads as u64 <= MAX_THREADS_PER_VCPU * vm.vcpus as u64, || {
                format!("{} must be <= 16 * vcpus, got {}", f("threads"), vm.threads)
            })?;
            let p = &vm.ple;
            check(p.window >= 1, || format!("{} must be >= 1, got {}", f("ple.window"), p.window))?;
            check(p.window <= UINT_MAX, || format!("{} must be <= 2^32-1, got {}", f("ple.window"), p.window))?;
            check(p.max >= p.window, || format!("{} must be >= ple.window, got {}", f("ple.max"), p.max))?;
            check(p.max <= UINT_MAX, || format!("{} must be <= 2^32-1, got {}", f("ple.max"), p.max))?;
            check(p.grow <= UINT_MAX, || format!("{} must be <= 2^32-1, got {}", f("ple.grow"), p.grow))?;
            check(p.shrink <= UINT_MAX, || format!("{} must be <= 2^32-1, got {}", f("ple.shrink"), p.shrink))?;
            check(p.exit_ns <= MAX_COST_NS, || format!("{} must be <= 1e9, got {}", f("ple.exit_ns"), p.exit_ns))?;
            check(p.candidate_ns <= MAX_CANDIDATE_NS, || {
                format!("{} must be <= 1e6, got {}", f("ple.candidate_ns"), p.candidate_ns)
            })?;
            check(vm.pv.hypercall_ns <= MAX_COST_NS, || format!("{} must be <= 1e9", f("pv.hypercall_ns")))?;
            check(vm.pv.halt_exit_ns <= MAX_COST_NS, || format!("{} must be <= 1e9", f("pv.halt_exit_ns")))?;
            check(vm.pv.guest_idle_poll_ns <= MAX_COST_NS, || {
                format!("{} must be <= 1e9", f("pv.guest_idle_poll_ns"))
            })?;
            check(vm.pv.icr_write_ns <= MAX_COST_NS, || format!("{} must be <= 1e9", f("pv.icr_write_ns")))?;
            check(vm.guest.migration_cost_ns <= MAX_COST_NS, || {
                format!("{} must be <= 1e9, got {}", f("guest.migration_cost_ns"), vm.guest.migration_cost_ns)
            })?;
            check((limits::MIN_GUEST_TICK_NS..=MAX_COST_NS).contains(&vm.guest.tick_ns), || {
                format!(
                    "{} must be in [{}, 1e9], got {}",
                    f("guest.tick_ns"),
                    limits::MIN_GUEST_TICK_NS,
                    vm.guest.tick_ns
                )
            })?;
            let (smt, llc) = (vm.guest.threads_per_core, vm.guest.llc_vcpus);
            check((1..=MAX_THREADS_PER_CORE).contains(&smt), || {
                format!("{} must be in [1, {MAX_THREADS_PER_CORE}], got {smt}", f("guest.threads_per_core"))
            })?;
            check(vm.vcpus % smt == 0, || {
                format!("{} must be a multiple of guest.threads_per_core ({smt}), got {}", f("vcpus"), vm.vcpus)
            })?;
            check(llc == 0 || (llc % smt == 0 && vm.vcpus % llc == 0), || {
                format!(
                    "{} must be 0 (the whole VM) or a multiple of guest.threads_per_core ({smt}) that divides \
                     vcpus ({}), got {llc}",
                    f("guest.llc_vcpus"),
                    vm.vcpus
                )
            })?;
            // the halt-poll limits live with its type (shared with the calibration model)
            vm.halt_poll.validate().map_err(|e| format!("{}.{e}", f("halt_poll")))?;
            if vm.policy.kind == PolicyKind::Python {
                check(!vm.policy.name.is_empty(), || format!("{} must name the Python policy", f("policy.name")))?;
            }
            let w = &vm.workload;
            check(!w.phases.is_empty(), || format!("{} must hold at least one phase", f("workload.phases")))?;
            check(w.phases.len() <= MAX_PHASES, || {
                format!("{} must hold <= {MAX_PHASES} phases", f("workload.phases"))
            })?;
            check(w.guest_slice_ns >= MIN_PERIOD_NS, || {
                format!("{} must be >= {MIN_PERIOD_NS}, got {}", f("workload.guest_slice_ns"), w.guest_slice_ns)
            })?;
            check((1..=MAX_SPIN_ITER_CYCLES).contains(&w.spin_iter_cycles), || {
                format!(
                    "{} must be in [1, {MAX_SPIN_ITER_CYCLES}], got {}",
                    f("workload.spin_iter_cycles"),
                    w.spin_iter_cycles
                )
            })?;
            check((1..=MAX_SPIN_THRESHOLD).contains(&w.spin_threshold), || {
                format!(
                    "{} must be in [1, {MAX_SPIN_THRESHOLD}], got {}",
                    f("workload.spin_threshold"),
                    w.spin_threshold
                )
            })?;
            let mut lock_kinds: Vec<(u32, LockKind)> = Vec::new();
            let mut any_work = false;
            for (j, ph) in w.phases.iter().enumerate() {
                let pf = |name: &str| format!("vms[{i}].workload.phases[{j}].{name}");
                let pr = ph.prob();
                check((0.0..=1.0).contains(&pr), || format!("{} must be in [0, 1], got {pr}", pf("prob")))?;
                match ph {
                    Phase::Compute { ns, .. } => {
                        check(*ns <= MAX_PHASE_NS, || format!("{} must be <= 1e12, got {ns}", pf("ns")))?;
                        any_work |= *ns > 0 && pr >= 1.0;
                    }
                    Phase::Sleep { ns, dist, periodic, .. } => {
                        check(*ns <= MAX_PHASE_NS, || format!("{} must be <= 1e12, got {ns}", pf("ns")))?;
                        check(!*periodic || (*ns > 0 && *dist == Dist::Fixed), || {
                            format!("{} needs ns > 0 and dist \"fixed\"", pf("periodic"))
                        })?;
                        any_work |= *ns > 0 && pr >= 1.0;
                    }
                    Phase::Lock { lock, lock_kind, hold_ns, .. } => {
                        check(*lock <= MAX_LOCK_ID, || format!("{} must be <= {MAX_LOCK_ID}, got {lock}", pf("lock")))?;
                        check(*hold_ns <= MAX_COST_NS, || format!("{} must be <= 1e9, got {hold_ns}", pf("hold_ns")))?;
                        if let Some((_, k)) = lock_kinds.iter().find(|(l, _)| l == lock) {
                            // an rwsem's readers and writers share it
                            check(k == lock_kind || (k.is_rwsem() && lock_kind.is_rwsem()), || {
                                format!("{} differs from an earlier phase using lock {lock}", pf("lock_kind"))
                            })?;
                        } else {
                            lock_kinds.push((*lock, *lock_kind));
                        }
                        any_work |= *hold_ns > 0 && pr >= 1.0;
                    }
                    Phase::Ipi { targets, handler_ns, .. } => {
                        check((*targets < vm.vcpus.max(1) || *targets == 0) && *targets <= MAX_IPI_TARGETS, || {
                            format!("{} must be < vcpus (0 = all others), got {targets}", pf("targets"))
                        })?;
                        check(*handler_ns <= MAX_COST_NS, || format!("{} must be <= 1e9", pf("handler_ns")))?;
                    }
                    Phase::Send { to, .. } => {
                        check(*to >= 1 && *to < threads.max(2) && *to <= MAX_IPI_TARGETS, || {
                            format!("{} must be in [1, threads), got {to}", pf("to"))
                        })?;
                    }
                    Phase::Barrier { .. } => {
                        check(pr == 1.0, || {
                            format!("{} must be 1 (a skipped barrier deadlocks), got {pr}", pf("prob"))
                        })?;
                    }
                    Phase::Recv { .. } => {}
                    Phase::TaskQueue { tasks, .. } => {
                        check((1..=limits::MAX_TASKS).contains(tasks), || {
                            format!("{} must be in [1, {}], got {tasks}", pf("tasks"), limits::MAX_TASKS)
                        })?;
                        check(pr == 1.0, || {
                            format!("{} must be 1 (a skipped take loses the frame's end)", pf("prob"))
                        })?;
                    }
                }
            }
            let queues = w.phases.iter().filter(|p| matches!(p, Phase::TaskQueue { .. })).count();
            if queues > 0 {
                let barrier = w.phases.iter().any(|p| matches!(p, Phase::Barrier { .. }));
                check(queues == 1 && !barrier && w.thread0_phases.is_empty() && w.iterations == 0, || {
                    format!(
                        "{}: a task_queue phase must be the only one, with no barrier phase, no thread0_phases \
                         and iterations 0 (its frames end the run)",
                        f("workload.phases")
                    )
                })?;
            }
            check(any_work, || {
                format!(
                    "{} must take time (a compute, lock or sleep phase with ns/hold_ns > 0 and prob 1)",
                    f("workload.phases")
                )
            })?;
            let has_recv = w.phases.iter().any(|p| matches!(p, Phase::Recv { .. }));
            let has_send = w.phases.iter().any(|p| matches!(p, Phase::Send { .. }));
            check(!has_recv || has_send, || format!("{}: a recv phase needs a send phase", f("workload.phases")))?;
            check_thread0_phases(i, vm)?;
        }
        Ok(())
    }

    /// Total number of vCPUs over all VMs.
    pub fn total_vcpus(&self) -> u64 {
        self.vms.iter().map(|v| v.count as u64 * v.vcpus as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid_and_round_trips() {
        let c = SimConfig::default();
        c.validate().unwrap();
        let back = SimConfig::from_json(&c.to_json()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn errors_name_the_field() {
        let mut c = SimConfig::default();
        c.host.pcpus = 0;
        assert_eq!(c.validate().unwrap_err(), "host.pcpus must be >= 1, got 0");
        let mut c = SimConfig::default();
        c.vms[0].ple.max = 10;
        assert!(c.validate().unwrap_err().starts_with("vms[0].ple.max"));
        let e = SimConfig::from_json("{\"host\": {\"pcpus\": 2, \"bogus\": 1}}").unwrap_err();
        assert!(e.contains("bogus"), "{e}");
    }
}

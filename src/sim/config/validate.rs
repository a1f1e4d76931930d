//! The rules [`SimConfig::validate`] enforces: every field's range, read
//! from the JSON Schema its attributes generate (one walk, [`check_ranges`]),
//! and the rules across fields, written here.

use super::*;
use crate::sim::schema_walk::check_ranges;

/// The JSON Schema [`json_schema`] generates, built once: the limits every
/// field's attributes state, read back by [`check_ranges`].
fn schema() -> &'static serde_json::Value {
    static SCHEMA: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    SCHEMA.get_or_init(json_schema)
}

/// `workload.thread0_phases`: what thread 0 may run instead of `phases`.
fn check_thread0_phases(i: usize, vm: &VmConfig) -> Result<(), String> {
    let ph = &vm.workload.thread0_phases;
    if ph.is_empty() {
        return Ok(());
    }
    let threads = if vm.threads == 0 { vm.vcpus } else { vm.threads };
    check(threads >= 2, || format!("vms[{i}].workload.thread0_phases needs >= 2 guest threads, got {threads}"))?;
    let mut any_work = false;
    for (j, p) in ph.iter().enumerate() {
        let pf = |name: &str| format!("vms[{i}].workload.thread0_phases[{j}].{name}");
        let pr = p.prob();
        match p {
            Phase::Compute { ns, .. } | Phase::Sleep { ns, .. } => {
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

    /// Check every field; the error names the field (`host.n_pcpus must be >= 1, got 0`).
    ///
    /// Each field's own limits come from the schema its attributes generate
    /// ([`check_ranges`]); the rules below are the ones across fields
    /// ([`CROSS_FIELD_RULES`]) and within a workload's phase list.
    pub fn validate(&self) -> Result<(), String> {
        let v = serde_json::to_value(self).map_err(|e| format!("invalid configuration: {e}"))?;
        check_ranges(schema(), schema(), &v, "")?;
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
        use limits::*;
        for i in 1..h.idle_states.len() {
            let ((pe, pr), (exit, res)) = (h.idle_states[i - 1], h.idle_states[i]);
            check(exit >= pe && res >= pr, || {
                format!("host.idle_states[{i}] must be at least as deep as idle_states[{}]", i - 1)
            })?;
        }
        let n = &h.noise;
        for (name, hz, ns) in [("kthread", n.kthread_hz, n.kthread_ns), ("vmm_io", n.vmm_io_hz, n.vmm_io_ns)] {
            check(hz * ns as f64 <= MAX_NOISE_SHARE_NS_PER_S, || {
                format!("host.noise.{name}_hz * {name}_ns must be <= 0.5 s per s (half a CPU), got {hz} * {ns}")
            })?;
        }
        let sp = &h.speed;
        check((sp.fast_dwell_ns == 0) == (sp.slow_dwell_ns == 0), || {
            format!(
                "host.speed.fast_dwell_ns and slow_dwell_ns must be both 0 (off) or both > 0, got {} and {}",
                sp.fast_dwell_ns, sp.slow_dwell_ns
            )
        })?;
        check(sp.slow_pct <= sp.fast_pct, || {
            format!("host.speed.slow_pct must be <= fast_pct ({}), got {}", sp.fast_pct, sp.slow_pct)
        })?;
        check(sp.is_on() || (sp.fast_pct == 100 && sp.slow_pct == 100), || {
            format!(
                "host.speed.fast_pct and slow_pct must be 100 while the process is off (dwells 0), got {} and {}",
                sp.fast_pct, sp.slow_pct
            )
        })?;
        let c = &h.cfs;
        check(c.min_granularity_ns <= c.latency_ns, || {
            format!(
                "host.cfs.min_granularity_ns must be <= latency_ns ({}), got {}",
                c.latency_ns, c.min_granularity_ns
            )
        })?;
        check(h.sockets <= h.n_pcpus, || {
            format!("host.sockets must be <= n_pcpus ({}), got {}", h.n_pcpus, h.sockets)
        })?;
        check(h.n_pcpus % (h.sockets * h.threads_per_core) == 0, || {
            format!(
                "host.n_pcpus ({}) must be a multiple of host.sockets × host.threads_per_core ({} × {})",
                h.n_pcpus, h.sockets, h.threads_per_core
            )
        })?;
        if let Some((i, &c)) = h.vcpu_pcpus.iter().enumerate().find(|&(_, &c)| c >= h.n_pcpus) {
            return Err(format!("host.vcpu_pcpus[{i}] must be < n_pcpus ({}), got {c}", h.n_pcpus));
        }
        check(!h.vm_groups || h.scheduler != Scheduler::Fair || h.yield_scope == YieldScope::VmGroup, || {
            "host.vm_groups needs yield_scope = vm_group under scheduler = fair (yield_task_fair acts on the yielder's group queue), got run_queue"
                .to_string()
        })?;
        check(self.host.scheduler != Scheduler::Pinned || self.host.affinity != Affinity::All, || {
            "host.scheduler = pinned needs pinned vCPU threads: host.affinity must be pinned or round_robin, got all"
                .to_string()
        })?;
        let mut total: u64 = 0;
        for (i, vm) in self.vms.iter().enumerate() {
            let f = |name: &str| format!("vms[{i}].{name}");
            check(self.host.scheduler != Scheduler::Balance || vm.vcpus <= self.host.n_pcpus, || {
                format!(
                    "{} must be <= host.n_pcpus ({}) under scheduler=balance (siblings run on distinct CPUs), got {}",
                    f("vcpus"),
                    self.host.n_pcpus,
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
            check(p.max >= p.window, || format!("{} must be >= ple.window, got {}", f("ple.max"), p.max))?;
            let (smt, llc) = (vm.guest.threads_per_core, vm.guest.llc_vcpus);
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
            let polling = &vm.pv.guest_idle_poll_vcpus;
            check(polling.windows(2).all(|w| w[0] < w[1]) && polling.iter().all(|&v| v < vm.vcpus), || {
                format!(
                    "{} must list vCPU indices of the VM in ascending order, each below vcpus ({}), got {:?}",
                    f("pv.guest_idle_poll_vcpus"),
                    vm.vcpus,
                    polling
                )
            })?;
            if vm.policy.kind == PolicyKind::Python {
                check(!vm.policy.name.is_empty(), || format!("{} must name the Python policy", f("policy.name")))?;
            }
            let w = &vm.workload;
            let mut lock_kinds: Vec<(u32, LockKind)> = Vec::new();
            let mut any_work = false;
            for (j, ph) in w.phases.iter().enumerate() {
                let pf = |name: &str| format!("vms[{i}].workload.phases[{j}].{name}");
                let pr = ph.prob();
                match ph {
                    Phase::Compute { ns, .. } => any_work |= *ns > 0 && pr >= 1.0,
                    Phase::Sleep { ns, dist, periodic, .. } => {
                        check(!*periodic || (*ns > 0 && *dist == Dist::Fixed), || {
                            format!("{} needs ns > 0 and dist \"fixed\"", pf("periodic"))
                        })?;
                        any_work |= *ns > 0 && pr >= 1.0;
                    }
                    Phase::Lock { lock, lock_kind, hold_ns, sites, irqs_off, .. } => {
                        check(!*irqs_off || !(*lock_kind == LockKind::Mutex || lock_kind.is_rwsem()), || {
                            let name = serde_json::to_value(lock_kind).map(|v| v.to_string()).unwrap_or_default();
                            format!(
                                "{}: a sleeping lock (lock_kind {name}) cannot be taken with interrupts off",
                                pf("irqs_off")
                            )
                        })?;
                        let last = u64::from(*lock) + u64::from(*sites) - 1;
                        check(last <= u64::from(limits::MAX_LOCK_ID), || {
                            format!(
                                "{}: lock + sites - 1 must be <= {}, got {last} (lock {lock}, sites {sites})",
                                pf("sites"),
                                limits::MAX_LOCK_ID
                            )
                        })?;
                        for id in *lock..=last as u32 {
                            if let Some((_, k)) = lock_kinds.iter().find(|(l, _)| *l == id) {
                                // an rwsem's readers and writers share it
                                check(k == lock_kind || (k.is_rwsem() && lock_kind.is_rwsem()), || {
                                    format!("{} differs from an earlier phase using lock {id}", pf("lock_kind"))
                                })?;
                            } else {
                                lock_kinds.push((id, *lock_kind));
                            }
                        }
                        any_work |= *hold_ns > 0 && pr >= 1.0;
                    }
                    Phase::Ipi { targets, .. } => {
                        check(*targets < vm.vcpus.max(1) || *targets == 0, || {
                            format!("{} must be < vcpus (0 = all others), got {targets}", pf("targets"))
                        })?;
                    }
                    Phase::Send { to, .. } => {
                        check(*to >= 1 && *to < threads.max(2), || {
                            format!("{} must be in [1, threads), got {to}", pf("to"))
                        })?;
                    }
                    Phase::Barrier { .. } => {
                        check(pr == 1.0, || {
                            format!("{} must be 1 (a skipped barrier deadlocks), got {pr}", pf("prob"))
                        })?;
                    }
                    Phase::Recv { .. } => {}
                    Phase::TaskQueue { .. } => {
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
        c.host.n_pcpus = 0;
        assert_eq!(c.validate().unwrap_err(), "host.n_pcpus must be >= 1, got 0");
        let mut c = SimConfig::default();
        c.vms[0].ple.max = 10;
        assert!(c.validate().unwrap_err().starts_with("vms[0].ple.max"));
        let e = SimConfig::from_json("{\"host\": {\"n_pcpus\": 2, \"bogus\": 1}}").unwrap_err();
        assert!(e.contains("bogus"), "{e}");
    }

    #[test]
    fn a_renamed_field_reads_its_old_key_once() {
        let c = SimConfig::from_json("{\"host\": {\"pcpus\": 6}}").unwrap();
        assert_eq!(c.host.n_pcpus, 6);
        assert!(c.to_json().contains("\"n_pcpus\":6") && !c.to_json().contains("\"pcpus\""));
        let e = SimConfig::from_json("{\"host\": {\"pcpus\": 6, \"n_pcpus\": 6}}").unwrap_err();
        assert!(e.contains("duplicate field"), "{e}");
    }

    #[test]
    fn ranges_come_from_the_schema_walk() {
        // a field deep in a tagged enum inside a list, named by its path
        let mut c = SimConfig::default();
        c.vms[0].workload.phases[0] =
            Phase::Compute { ns: limits::MAX_PHASE_NS + 1, dist: Dist::Fixed, mode: Mode::User, prob: 1.0 };
        assert_eq!(
            c.validate().unwrap_err(),
            format!(
                "vms[0].workload.phases[0].ns must be <= {}, got {}",
                limits::MAX_PHASE_NS,
                limits::MAX_PHASE_NS + 1
            )
        );
        // an exclusive maximum, and a float that JSON cannot carry
        let mut c = SimConfig::default();
        c.host.background.utilization = 1.0;
        assert_eq!(c.validate().unwrap_err(), "host.background.utilization must be < 1.0, got 1.0");
        c.host.background.utilization = f64::NAN;
        assert_eq!(c.validate().unwrap_err(), "host.background.utilization must be a finite number, got null");
        // list lengths, and an Option<u64> that is set
        let mut c = SimConfig::default();
        c.vms.clear();
        assert_eq!(c.validate().unwrap_err(), "vms must hold at least 1 item(s), got 0");
        let mut c = SimConfig::default();
        c.vms[0].halt_poll.vm_max_ns = Some(u64::MAX);
        assert!(c.validate().unwrap_err().starts_with("vms[0].halt_poll.vm_max_ns must be <= 4294967295"));
        // u64 limits compare exactly, not through f64
        let mut c = SimConfig { duration_ns: limits::MAX_DURATION_NS + 1, ..Default::default() };
        assert!(c.validate().unwrap_err().starts_with("duration_ns must be <= "));
        c.duration_ns = limits::MAX_DURATION_NS;
        c.validate().unwrap();
    }
}

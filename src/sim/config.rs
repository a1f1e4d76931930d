//! The simulator's configuration: plain data, (de)serialised as JSON.
//!
//! The Python layer (`vcpulab.sim`) builds these from frozen dataclasses whose
//! docstrings give each field's unit, default and source. Rust validates again
//! ([`SimConfig::validate`]) so that a config coming from anywhere is checked
//! before the event loop sees it; every error names the field.

use serde::{Deserialize, Serialize};

/// The whole experiment: one host, its VMs, a seed and a duration.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    /// Seed of the one RNG of a run (PCG64).
    pub seed: u64,
    /// Simulated time limit, ns. The run also ends earlier when every VM with
    /// a finite `iterations` has completed them.
    pub duration_ns: u64,
    /// Record the per-host-CPU trace (sched map).
    pub trace: bool,
    /// Iterations completing before this instant (ns) are not counted in
    /// ops, throughput and latency (time accounting covers the whole run).
    pub warmup_ns: u64,
    pub host: HostConfig,
    pub vms: Vec<VmConfig>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 0,
            duration_ns: 100_000_000,
            trace: false,
            warmup_ns: 0,
            host: HostConfig::default(),
            vms: vec![VmConfig::default()],
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Scheduler {
    /// CFS/EEVDF-like fair scheduler, one run queue per host CPU.
    Fair,
    /// Gang (co-)scheduling: all vCPUs of a VM run together in slices.
    Gang,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum NextBuddy {
    /// The hint is always honoured (CFS before v6.6).
    Always,
    /// Honoured only if the target is EEVDF-eligible (PICK_BUDDY, ~v6.12+).
    Eligible,
    /// Never honoured (v6.6-~6.11: NEXT_BUDDY off by default).
    Never,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum YieldPenalty {
    /// First EEVDF: the yielder's deadline moves one slice forward.
    Deadline,
    /// Newer EEVDF: an eligible yielder's vruntime jumps to its deadline, then
    /// the deadline moves one slice forward.
    Vruntime,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Affinity {
    /// Each vCPU thread pinned to one host CPU, balanced, in a seeded random order.
    Pinned,
    /// vCPU thread g (over all VMs) pinned to host CPU g mod P.
    RoundRobin,
    /// Any host CPU; placed at wake-up on its previous CPU if idle, else on an
    /// idle CPU (no periodic load balancing).
    All,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Background {
    /// Fraction of each host CPU a pinned background host task (kworker-like) wants, 0..1.
    pub utilization: f64,
    /// Mean length of one background burst, ns (exponential).
    pub burst_ns: u64,
    /// Scheduler weight of the background tasks (1024 = nice 0).
    pub weight: u64,
}

impl Default for Background {
    fn default() -> Self {
        Background { utilization: 0.0, burst_ns: 200_000, weight: 1024 }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HostConfig {
    pub pcpus: u32,
    pub scheduler: Scheduler,
    pub tick_ns: u64,
    pub base_slice_ns: u64,
    pub wakeup_preemption: bool,
    pub next_buddy: NextBuddy,
    pub yield_penalty: YieldPenalty,
    pub affinity: Affinity,
    pub gang_slice_ns: u64,
    pub tsc_khz: u64,
    pub rq_lock_ns: u64,
    pub yield_check_ns: u64,
    /// yield_to returns -ESRCH early when both run queues hold one task
    /// (kernels since ~3.8); false: the 2011-2012 yield_to, which always takes
    /// both run-queue locks.
    pub yield_to_esrch: bool,
    pub background: Background,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            pcpus: 4,
            scheduler: Scheduler::Fair,
            tick_ns: 4_000_000,
            base_slice_ns: 3_000_000,
            wakeup_preemption: true,
            next_buddy: NextBuddy::Eligible,
            yield_penalty: YieldPenalty::Vruntime,
            affinity: Affinity::Pinned,
            gang_slice_ns: 4_000_000,
            tsc_khz: 2_100_000,
            rq_lock_ns: 300,
            yield_check_ns: 50,
            yield_to_esrch: true,
            background: Background::default(),
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PleKind {
    /// Intel PLE: fires at CPL 0 only; default window 4096, max UINT_MAX.
    Vmx,
    /// AMD pause filter: fires at any CPL; default count 3000, max 65535.
    Svm,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PleConfig {
    /// false: the KVM_X86_DISABLE_EXITS_PAUSE case (no exits, window never changes).
    pub enabled: bool,
    pub kind: PleKind,
    /// Initial window and shrink floor, cycles (VMX `ple_window` / SVM `pause_filter_count`).
    pub window: u64,
    /// Grow modifier (`ple_window_grow`); 0 keeps the window fixed at `window`.
    pub grow: u64,
    /// Shrink modifier (`ple_window_shrink`); 0 resets to `window` on sched-in.
    pub shrink: u64,
    /// Growth cap, cycles (`ple_window_max`).
    pub max: u64,
    /// Cost of one PAUSE exit round trip (exit + entry), ns.
    pub exit_ns: u64,
    /// Cost of examining one candidate in the on_spin loop, ns.
    pub candidate_ns: u64,
}

impl Default for PleConfig {
    fn default() -> Self {
        PleConfig {
            enabled: true,
            kind: PleKind::Vmx,
            window: 4096,
            grow: 2,
            shrink: 0,
            max: u32::MAX as u64,
            exit_ns: 1_000,
            candidate_ns: 40,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PolicyKind {
    /// Never yield (PLE exits only cost).
    None,
    /// 2011: one round-robin sweep from last_boosted+1, skip running and halted.
    Baseline2011,
    /// 2012: baseline plus the in_spin_loop / dy_eligible toggle.
    DyEligible,
    /// Upstream today (§1.3).
    Upstream,
    /// One uniformly random ready candidate.
    Random,
    /// Yield straight to the vCPU the spinner waits for (upper bound).
    Oracle,
    /// A Python callable (passed beside the config).
    Python,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyConfig {
    pub kind: PolicyKind,
    /// Number of -ESRCH results tolerated before the scan stops; 0 = unlimited.
    pub esrch_budget: u32,
    /// Upstream: store the loop offset instead of the index (v6.12-6.18 bug).
    pub last_boosted_bug: bool,
    /// Upstream: apply the dy_eligible toggle (CONFIG_HAVE_KVM_CPU_RELAX_INTERCEPT).
    pub dy_eligible: bool,
    /// Upstream: skip candidates preempted in guest user mode when the spinner is in kernel mode.
    pub kernel_filter: bool,
    /// Python: a name for the callable (the callable itself is not serialised).
    pub name: String,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            kind: PolicyKind::Upstream,
            esrch_budget: 3,
            last_boosted_bug: false,
            dy_eligible: true,
            kernel_filter: true,
            name: String::new(),
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// available_idle_cpu = idle and not preempted (upstream).
    AvailableIdle,
    /// First prefer idle vCPUs whose host CPU is idle (pcpu_is_idle, 2021 proposal),
    /// counting a preempted one as available; then available_idle_cpu.
    PcpuIsIdle,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PvConfig {
    /// Steal time enabled: the guest sees the `preempted` byte and steal_ns.
    pub steal_time: bool,
    /// PV_SCHED_YIELD: a call-function IPI sender directed-yields to the first preempted target.
    pub sched_yield: bool,
    /// Posted interrupts (APICv): a pending IPI makes a candidate dy_runnable.
    pub apicv: bool,
    /// Guest wake-up placement rule.
    pub placement: Placement,
    /// Cost of a hypercall exit (KICK_CPU, SCHED_YIELD), ns.
    pub hypercall_ns: u64,
    /// Cost of a HLT exit before blocking, ns.
    pub halt_exit_ns: u64,
    /// Guest idle poll before HLT (cpuidle-haltpoll), ns; 0 = HLT at once.
    pub guest_idle_poll_ns: u64,
}

impl Default for PvConfig {
    fn default() -> Self {
        PvConfig {
            steal_time: true,
            sched_yield: true,
            apicv: true,
            placement: Placement::AvailableIdle,
            hypercall_ns: 1_500,
            halt_exit_ns: 1_500,
            guest_idle_poll_ns: 0,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum HaltPollPolicy {
    /// No host polling: a halting vCPU blocks at once.
    Off,
    /// Always poll up to `max_ns` (Feb 2015, fixed halt_poll_ns).
    Fixed,
    /// Upstream dynamic polling decided from the whole block time (§3.2).
    Dynamic,
    /// The 2015 v4 proposal (never merged): grow when the wake-up came while
    /// polling, shrink after an idle (> 10 ms) halt (halt_poll.rs).
    DynamicV4,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HaltPollConfig {
    pub policy: HaltPollPolicy,
    /// halt_poll_ns (or the KVM_CAP_HALT_POLL value), ns.
    pub max_ns: u64,
    /// halt_poll_ns_grow.
    pub grow: u64,
    /// halt_poll_ns_grow_start, ns.
    pub grow_start_ns: u64,
    /// halt_poll_ns_shrink (0 = reset to 0).
    pub shrink: u64,
    /// False when the guest turned host polling off (MSR_KVM_POLL_CONTROL bit 0 = 0).
    pub poll_allowed: bool,
}

impl Default for HaltPollConfig {
    fn default() -> Self {
        HaltPollConfig {
            policy: HaltPollPolicy::Off,
            max_ns: 200_000,
            grow: 2,
            grow_start_ns: 10_000,
            shrink: 2,
            poll_allowed: true,
        }
    }
}

impl HaltPollConfig {
    /// The same settings for the shared `kvm_vcpu_halt` state machine
    /// (`halt_poll::HaltPollState`), which the engine drives.
    pub fn state_machine(&self) -> super::halt_poll::HaltPollConfig {
        use super::halt_poll::Policy;
        let mut c = super::halt_poll::HaltPollConfig::new(match self.policy {
            HaltPollPolicy::Off => Policy::Off,
            HaltPollPolicy::Fixed => Policy::Fixed,
            HaltPollPolicy::Dynamic => Policy::BlockTime,
            HaltPollPolicy::DynamicV4 => Policy::DynamicV4,
        });
        c.halt_poll_ns = self.max_ns;
        // validated <= 1024 (grow, shrink); the kernel's parameters are uint
        c.grow = self.grow as u32;
        c.grow_start = self.grow_start_ns;
        c.shrink = self.shrink as u32;
        c.poll_allowed = self.poll_allowed;
        c
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Dist {
    Fixed,
    /// Exponential with the given mean.
    Exp,
    /// Uniform on [mean/2, 3*mean/2].
    Uniform,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    User,
    Kernel,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LockKind {
    /// virt_spin_lock-like test-and-set: whoever runs at release time takes it.
    Tas,
    /// FIFO ticket lock: the next ticket must run to take it.
    Ticket,
    /// Native queued (MCS-like) spinlock: FIFO hand-off to the queue head.
    Queued,
    /// PV queued: spin SPIN_THRESHOLD iterations, then halt until kicked.
    PvQueued,
    /// Sleeping mutex with optimistic spinning while the owner runs.
    Mutex,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Phase {
    Compute {
        ns: u64,
        #[serde(default = "dist_fixed")]
        dist: Dist,
        #[serde(default = "mode_user")]
        mode: Mode,
        #[serde(default = "one")]
        prob: f64,
    },
    Lock {
        lock: u32,
        lock_kind: LockKind,
        hold_ns: u64,
        #[serde(default = "dist_fixed")]
        dist: Dist,
        #[serde(default = "one")]
        prob: f64,
    },
    Ipi {
        /// Number of other vCPUs targeted; 0 = all others (smp_call_function).
        targets: u32,
        handler_ns: u64,
        #[serde(default = "one")]
        prob: f64,
    },
    Barrier {
        #[serde(default = "one")]
        prob: f64,
    },
    Sleep {
        ns: u64,
        #[serde(default = "dist_fixed")]
        dist: Dist,
        #[serde(default = "one")]
        prob: f64,
        /// Wake at the next multiple of `ns` since the run's start (a periodic
        /// timer: a late wake-up does not shift the later ones).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        periodic: bool,
    },
    Send {
        to: u32,
        #[serde(default = "one")]
        prob: f64,
    },
    Recv {
        #[serde(default = "one")]
        prob: f64,
    },
}

fn dist_fixed() -> Dist {
    Dist::Fixed
}
fn mode_user() -> Mode {
    Mode::User
}
fn one() -> f64 {
    1.0
}

impl Phase {
    pub fn prob(&self) -> f64 {
        match self {
            Phase::Compute { prob, .. }
            | Phase::Lock { prob, .. }
            | Phase::Ipi { prob, .. }
            | Phase::Barrier { prob }
            | Phase::Sleep { prob, .. }
            | Phase::Send { prob, .. }
            | Phase::Recv { prob } => *prob,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct WorkloadConfig {
    pub name: String,
    /// One iteration of each guest thread, executed in order.
    pub phases: Vec<Phase>,
    /// Iterations per thread; 0 = loop until the end of the run.
    pub iterations: u64,
    /// Guest round-robin slice between threads sharing a vCPU, ns.
    pub guest_slice_ns: u64,
    /// Cycles per iteration of a spin loop (used for SPIN_THRESHOLD).
    pub spin_iter_cycles: u64,
    /// SPIN_THRESHOLD of the PV queued lock, iterations.
    pub spin_threshold: u64,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            name: "custom".into(),
            phases: vec![
                Phase::Compute { ns: 20_000, dist: Dist::Exp, mode: Mode::User, prob: 1.0 },
                Phase::Lock { lock: 0, lock_kind: LockKind::Ticket, hold_ns: 2_000, dist: Dist::Fixed, prob: 1.0 },
            ],
            iterations: 0,
            guest_slice_ns: 4_000_000,
            spin_iter_cycles: 40,
            spin_threshold: 32_768,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct VmConfig {
    /// Number of identical VMs this entry stands for.
    pub count: u32,
    pub vcpus: u32,
    /// Guest threads; 0 = one per vCPU.
    pub threads: u32,
    /// Scheduler weight of each vCPU thread (1024 = nice 0).
    pub weight: u64,
    pub ple: PleConfig,
    pub policy: PolicyConfig,
    pub pv: PvConfig,
    pub halt_poll: HaltPollConfig,
    pub workload: WorkloadConfig,
}

impl Default for VmConfig {
    fn default() -> Self {
        VmConfig {
            count: 1,
            vcpus: 4,
            threads: 0,
            weight: 1024,
            ple: PleConfig::default(),
            policy: PolicyConfig::default(),
            pv: PvConfig::default(),
            halt_poll: HaltPollConfig::default(),
            workload: WorkloadConfig::default(),
        }
    }
}

/// Hard limits, so a typo cannot ask for a billion vCPUs.
pub const MAX_PCPUS: u32 = 4096;
pub const MAX_VCPUS_TOTAL: u64 = 65_536;
pub const MAX_PHASES: usize = 256;

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
        let c: SimConfig = serde_json::from_str(s).map_err(|e| format!("invalid configuration JSON: {e}"))?;
        c.validate()?;
        Ok(c)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("config serialises")
    }

    /// Check every field; the error names the field (`host.pcpus must be >= 1, got 0`).
    pub fn validate(&self) -> Result<(), String> {
        check(self.duration_ns >= 1, || format!("duration_ns must be >= 1, got {}", self.duration_ns))?;
        check(self.duration_ns <= 1u64 << 50, || format!("duration_ns must be <= 2^50, got {}", self.duration_ns))?;
        check(self.warmup_ns < self.duration_ns, || {
            format!("warmup_ns must be < duration_ns ({}), got {}", self.duration_ns, self.warmup_ns)
        })?;
        let h = &self.host;
        check(h.pcpus >= 1, || format!("host.pcpus must be >= 1, got {}", h.pcpus))?;
        check(h.pcpus <= MAX_PCPUS, || format!("host.pcpus must be <= {MAX_PCPUS}, got {}", h.pcpus))?;
        check(h.tick_ns >= 1000, || format!("host.tick_ns must be >= 1000, got {}", h.tick_ns))?;
        check(h.base_slice_ns >= 1000, || format!("host.base_slice_ns must be >= 1000, got {}", h.base_slice_ns))?;
        check(h.gang_slice_ns >= 1000, || format!("host.gang_slice_ns must be >= 1000, got {}", h.gang_slice_ns))?;
        check(h.tsc_khz >= 1000, || format!("host.tsc_khz must be >= 1000, got {}", h.tsc_khz))?;
        let u = h.background.utilization;
        check((0.0..1.0).contains(&u), || format!("host.background.utilization must be in [0, 1), got {u}"))?;
        check((2..=88_761).contains(&h.background.weight), || {
            format!("host.background.weight must be in [2, 88761], got {}", h.background.weight)
        })?;
        check(h.background.burst_ns >= 1000, || {
            format!("host.background.burst_ns must be >= 1000, got {}", h.background.burst_ns)
        })?;
        check(!self.vms.is_empty(), || "vms must hold at least one VM".to_string())?;
        let mut total: u64 = 0;
        for (i, vm) in self.vms.iter().enumerate() {
            let f = |name: &str| format!("vms[{i}].{name}");
            check(vm.count >= 1, || format!("{} must be >= 1, got {}", f("count"), vm.count))?;
            check(vm.vcpus >= 1, || format!("{} must be >= 1, got {}", f("vcpus"), vm.vcpus))?;
            check((2..=88_761).contains(&vm.weight), || {
                format!("{} must be in [2, 88761] (nice 19 .. -20), got {}", f("weight"), vm.weight)
            })?;
            total += vm.count as u64 * vm.vcpus as u64;
            check(total <= MAX_VCPUS_TOTAL, || format!("{} : total vCPUs must be <= {MAX_VCPUS_TOTAL}", f("vcpus")))?;
            let threads = if vm.threads == 0 { vm.vcpus } else { vm.threads };
            check(threads as u64 <= 16 * vm.vcpus as u64, || {
                format!("{} must be <= 16 * vcpus, got {}", f("threads"), vm.threads)
            })?;
            let p = &vm.ple;
            check(p.window >= 1, || format!("{} must be >= 1, got {}", f("ple.window"), p.window))?;
            check(p.max >= p.window, || format!("{} must be >= ple.window, got {}", f("ple.max"), p.max))?;
            check(p.max <= u32::MAX as u64, || format!("{} must be <= 2^32-1, got {}", f("ple.max"), p.max))?;
            check(p.exit_ns <= 1_000_000_000, || format!("{} must be <= 1e9, got {}", f("ple.exit_ns"), p.exit_ns))?;
            check(p.candidate_ns <= 1_000_000, || {
                format!("{} must be <= 1e6, got {}", f("ple.candidate_ns"), p.candidate_ns)
            })?;
            check(vm.pv.hypercall_ns <= 1_000_000_000, || format!("{} must be <= 1e9", f("pv.hypercall_ns")))?;
            check(vm.pv.halt_exit_ns <= 1_000_000_000, || format!("{} must be <= 1e9", f("pv.halt_exit_ns")))?;
            check(vm.pv.guest_idle_poll_ns <= 1_000_000_000, || {
                format!("{} must be <= 1e9", f("pv.guest_idle_poll_ns"))
            })?;
            let hp = &vm.halt_poll;
            check(hp.max_ns <= u32::MAX as u64, || {
                format!("{} must be <= 2^32-1, got {}", f("halt_poll.max_ns"), hp.max_ns)
            })?;
            check(hp.grow <= 1024, || format!("{} must be <= 1024, got {}", f("halt_poll.grow"), hp.grow))?;
            check(hp.shrink <= 1024, || format!("{} must be <= 1024, got {}", f("halt_poll.shrink"), hp.shrink))?;
            check(hp.grow_start_ns <= u32::MAX as u64, || {
                format!("{} must be <= 2^32-1", f("halt_poll.grow_start_ns"))
            })?;
            if vm.policy.kind == PolicyKind::Python {
                check(!vm.policy.name.is_empty(), || format!("{} must name the Python policy", f("policy.name")))?;
            }
            let w = &vm.workload;
            check(!w.phases.is_empty(), || format!("{} must hold at least one phase", f("workload.phases")))?;
            check(w.phases.len() <= MAX_PHASES, || {
                format!("{} must hold <= {MAX_PHASES} phases", f("workload.phases"))
            })?;
            check(w.guest_slice_ns >= 1000, || {
                format!("{} must be >= 1000, got {}", f("workload.guest_slice_ns"), w.guest_slice_ns)
            })?;
            check(w.spin_iter_cycles >= 1, || format!("{} must be >= 1", f("workload.spin_iter_cycles")))?;
            check(w.spin_threshold >= 1, || format!("{} must be >= 1", f("workload.spin_threshold")))?;
            let mut lock_kinds: Vec<(u32, LockKind)> = Vec::new();
            let mut any_work = false;
            for (j, ph) in w.phases.iter().enumerate() {
                let pf = |name: &str| format!("vms[{i}].workload.phases[{j}].{name}");
                let pr = ph.prob();
                check((0.0..=1.0).contains(&pr), || format!("{} must be in [0, 1], got {pr}", pf("prob")))?;
                match ph {
                    Phase::Compute { ns, .. } => {
                        check(*ns <= 1_000_000_000_000, || format!("{} must be <= 1e12, got {ns}", pf("ns")))?;
                        any_work |= *ns > 0 && pr >= 1.0;
                    }
                    Phase::Sleep { ns, dist, periodic, .. } => {
                        check(*ns <= 1_000_000_000_000, || format!("{} must be <= 1e12, got {ns}", pf("ns")))?;
                        check(!*periodic || (*ns > 0 && *dist == Dist::Fixed), || {
                            format!("{} needs ns > 0 and dist \"fixed\"", pf("periodic"))
                        })?;
                        any_work |= *ns > 0 && pr >= 1.0;
                    }
                    Phase::Lock { lock, lock_kind, hold_ns, .. } => {
                        check(*lock < 1024, || format!("{} must be < 1024, got {lock}", pf("lock")))?;
                        check(*hold_ns <= 1_000_000_000, || {
                            format!("{} must be <= 1e9, got {hold_ns}", pf("hold_ns"))
                        })?;
                        if let Some((_, k)) = lock_kinds.iter().find(|(l, _)| l == lock) {
                            check(k == lock_kind, || {
                                format!("{} differs from an earlier phase using lock {lock}", pf("lock_kind"))
                            })?;
                        } else {
                            lock_kinds.push((*lock, *lock_kind));
                        }
                        any_work |= *hold_ns > 0 && pr >= 1.0;
                    }
                    Phase::Ipi { targets, handler_ns, .. } => {
                        check(*targets < vm.vcpus.max(1) || *targets == 0, || {
                            format!("{} must be < vcpus (0 = all others), got {targets}", pf("targets"))
                        })?;
                        check(*handler_ns <= 1_000_000_000, || format!("{} must be <= 1e9", pf("handler_ns")))?;
                    }
                    Phase::Send { to, .. } => {
                        check(*to >= 1 && *to < threads.max(2), || {
                            format!("{} must be in [1, threads), got {to}", pf("to"))
                        })?;
                    }
                    Phase::Barrier { .. } | Phase::Recv { .. } => {}
                }
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

//! A VM: pause-loop exiting, the directed-yield policy, the paravirtual
//! features and exit costs, host halt polling, and the VM entry itself.

use super::*;

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PleKind {
    /// Intel PLE: fires at CPL 0 only; default window 4096, max UINT_MAX.
    Vmx,
    /// AMD pause filter: fires at any CPL; default count 3000, max 65535.
    Svm,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PleConfig {
    /// false: the KVM_X86_DISABLE_EXITS_PAUSE case (no exits, window never changes).
    pub enabled: bool,
    /// Intel PLE or AMD pause filter.
    pub kind: PleKind,
    /// Initial window and shrink floor, cycles (VMX `ple_window` / SVM `pause_filter_count`).
    #[schemars(range(min = 1, max = limits::UINT_MAX))]
    pub window: u64,
    /// Grow modifier (`ple_window_grow`, a kernel uint); 0 keeps the window fixed at `window`.
    #[schemars(range(max = limits::UINT_MAX))]
    pub grow: u64,
    /// Shrink modifier (`ple_window_shrink`, a kernel uint); 0 resets to `window` on sched-in.
    #[schemars(range(max = limits::UINT_MAX))]
    pub shrink: u64,
    /// Growth cap, cycles (`ple_window_max`); at least `window`.
    #[schemars(range(min = 1, max = limits::UINT_MAX))]
    pub max: u64,
    /// Cost of one PAUSE exit round trip (exit + entry), ns.
    #[schemars(range(max = limits::MAX_COST_NS))]
    pub exit_ns: u64,
    /// Cost of examining one candidate in the on_spin loop, ns.
    #[schemars(range(max = limits::MAX_CANDIDATE_NS))]
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

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
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

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyConfig {
    /// The directed-yield policy.
    pub kind: PolicyKind,
    /// Number of -ESRCH results tolerated before the scan stops; 0 = unlimited.
    pub esrch_budget: u32,
    /// Upstream: store the loop offset instead of the index (v6.12-6.18 bug).
    pub last_boosted_bug: bool,
    /// Upstream: apply the dy_eligible toggle (CONFIG_HAVE_KVM_CPU_RELAX_INTERCEPT).
    pub dy_eligible: bool,
    /// Upstream: skip candidates preempted in guest user mode when the spinner is in kernel mode.
    pub kernel_filter: bool,
    /// Upstream: a candidate preempted in guest user mode passes the
    /// kernel-mode filter when it has a posted interrupt pending
    /// (`kvm_arch_dy_has_pending_interrupt`; 52acd22faa1a "KVM: Boost vCPU
    /// candidate in user mode which is delivering interrupt", v5.13).
    /// false: kernels before 5.13, whose filter skips it whatever it has
    /// pending. Default true.
    #[serde(skip_serializing_if = "is_true")]
    #[schemars(extend("default" = true))]
    pub user_mode_irq_boost: bool,
    /// Python: a name for the callable (the callable itself is not serialised).
    pub name: String,
    /// Upstream: the first candidate test of `kvm_vcpu_on_spin`.
    pub candidate_gate: CandidateGate,
    /// Upstream: IPI-aware candidate selection (Wanpeng Li's RFC, "[PATCH v2
    /// 8/9] KVM: Implement IPI-aware directed yield candidate selection", Dec
    /// 2025, not merged): a candidate that has not yet handled an IPI from
    /// the spinner passes the in-kernel filter; a scan that boosts nobody is
    /// followed by a relaxed round that checks `vcpu->preempted` only.
    pub ipi_aware: bool,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CandidateGate {
    /// `vcpu->ready` (since 5.3, d73eb57b80b9 "KVM: Boost vCPUs that are
    /// delivering interrupts"): preempted, or woken and not yet running.
    Ready,
    /// `vcpu->preempted` (before 5.3): only vCPUs scheduled out while runnable.
    Preempted,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            kind: PolicyKind::Upstream,
            esrch_budget: 3,
            last_boosted_bug: false,
            dy_eligible: true,
            kernel_filter: true,
            user_mode_irq_boost: true,
            name: String::new(),
            candidate_gate: CandidateGate::Ready,
            ipi_aware: false,
        }
    }
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// available_idle_cpu = idle and not preempted (upstream).
    AvailableIdle,
    /// First prefer idle vCPUs whose host CPU is idle (pcpu_is_idle, 2021 proposal),
    /// counting a preempted one as available; then available_idle_cpu.
    /// vcpulab's first model: the host CPU's state is read live.
    PcpuIsIdle,
    /// The 2021 RFC as posted ("KVM: x86: Introduce .pcpu_is_idle() stub
    /// infrastructure" and 2-4/4, Tianqiang Xu et al., Aug 2021): the guest's
    /// fair.c uses `available_idle_cpu_sched` = guest-idle && the vCPU's
    /// steal-time `is_idle` byte (no preemption check). The host writes the
    /// byte in `kvm_arch_vcpu_put` (1 if the CPU's nr_running <= 1, else
    /// cleared) and in `record_steal_time` (the vCPU that last entered the
    /// guest on this CPU is cleared if another, set if the same); the posted
    /// clear returns early when the byte is set, so a set byte stays set.
    PcpuIsIdleRfc,
    /// The same write points with a clear that clears (what the patch's
    /// description says the byte means).
    PcpuIsIdleRfcCleared,
}

impl Placement {
    /// One of the two models of the 2021 RFC's `is_idle` byte.
    pub fn is_rfc(self) -> bool {
        matches!(self, Placement::PcpuIsIdleRfc | Placement::PcpuIsIdleRfcCleared)
    }
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
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
    #[schemars(range(max = limits::MAX_COST_NS))]
    pub hypercall_ns: u64,
    /// Cost of a HLT exit before blocking, ns.
    #[schemars(range(max = limits::MAX_COST_NS))]
    pub halt_exit_ns: u64,
    /// Guest idle poll before HLT (cpuidle-haltpoll), ns; 0 = HLT at once.
    #[schemars(range(max = limits::MAX_COST_NS))]
    pub guest_idle_poll_ns: u64,
    /// KVM_FEATURE_PV_UNHALT offered: the guest's `pv_queued` locks use the
    /// PV slow path; false: `kvm_spinlock_init` returns early and the guest's
    /// `virt_spin_lock` test-and-set fallback runs instead (lock stealing).
    pub pv_spinlocks: bool,
    /// KVM_HC_KICK_CPU also directed-yields to the kicked vCPU
    /// (`kvm_pv_kick_cpu_op` + `kvm_sched_yield`, "Boost queue head vCPU",
    /// 2019); false: the kick only wakes it (hosts before 5.2).
    pub kick_yield: bool,
    /// KVM_FEATURE_PV_TLB_FLUSH (4.16): a TLB-shootdown IPI skips preempted
    /// targets, which flush at their next sched-in (`kvm_flush_tlb_multi`).
    pub tlb_flush: bool,
    /// KVM_FEATURE_PV_SEND_IPI (4.19): one hypercall sends a multicast IPI;
    /// false: one ICR-write exit per target (`icr_write_ns` each).
    pub send_ipi: bool,
    /// Cost of one ICR-write exit when sending an IPI without PV send-IPI, ns
    /// (0: sending is free, as before this field existed).
    #[schemars(range(max = limits::MAX_COST_NS))]
    pub icr_write_ns: u64,
    /// When the host writes the steal-time `preempted` byte (what the
    /// guest's `vcpu_is_preempted` reads).
    pub preempted_byte: PreemptedByte,
    /// `kvm_sched_yield` (PV kick yield, PV sched yield) gives up at once
    /// while the yielder is alone on its CPU (`single_task_running()`; "KVM:
    /// X86: Bail out of direct yield in case of under-committed scenarios",
    /// Wanpeng Li, 2021, v5.13); false: hosts before it, which always call
    /// `kvm_vcpu_yield_to`.
    pub yield_single_task_bailout: bool,
}

/// When `kvm_arch_vcpu_put` sets the steal-time `preempted` byte ([K4]).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum PreemptedByte {
    /// 5.19 on (and stable kernels from 5.4, 2022-2023): only for a vCPU
    /// preempted while runnable, taken out of guest mode by the interrupt
    /// that preempts it (54aa83c90198 "KVM: x86: do not set st->preempted
    /// when going back to user space" and 6cd88243c7e0 "KVM: x86: do not
    /// report a vCPU as preempted outside instruction boundaries").
    #[default]
    InstructionBoundary,
    /// 4.10 to 5.18: `kvm_arch_vcpu_put` calls `kvm_steal_time_set_preempted`
    /// at every put, so a vCPU that blocks after HLT, or yields after a
    /// pause-loop exit, reads as preempted until it next enters the guest.
    EveryPut,
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
            pv_spinlocks: true,
            kick_yield: true,
            tlb_flush: false,
            send_ipi: false,
            icr_write_ns: 0,
            preempted_byte: PreemptedByte::InstructionBoundary,
            yield_single_task_bailout: true,
        }
    }
}

/// Host halt polling: the one configuration type and policy vocabulary of
/// `halt_poll.rs`, shared by the engine and the calibration model (JSON
/// `max_ns` / `grow_start_ns` are aliases of `halt_poll_ns` / `grow_start`;
/// the engine's first policy names `dynamic` and `dynamic_v4` are aliases of
/// `block-time` and `dynamic-v4`).
pub use crate::sim::halt_poll::{HaltPollConfig, Policy as HaltPollPolicy};

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct VmConfig {
    /// Number of identical VMs this entry stands for.
    #[schemars(range(min = 1, max = MAX_VCPUS_TOTAL))]
    pub count: u32,
    /// vCPUs per VM.
    #[schemars(range(min = 1, max = MAX_VCPUS_TOTAL))]
    pub vcpus: u32,
    /// Guest threads; 0 = one per vCPU; at most 16 per vCPU.
    pub threads: u32,
    /// Scheduler weight of each vCPU thread (1024 = nice 0).
    #[schemars(range(min = limits::MIN_WEIGHT, max = limits::MAX_WEIGHT))]
    pub weight: u64,
    /// Pause-loop exiting.
    pub ple: PleConfig,
    /// The directed-yield policy (what kvm_vcpu_on_spin does).
    pub policy: PolicyConfig,
    /// Paravirtual features and exit costs.
    pub pv: PvConfig,
    /// Host halt polling.
    pub halt_poll: HaltPollConfig,
    /// What each guest thread runs.
    pub workload: WorkloadConfig,
    /// The guest kernel's own choices.
    pub guest: GuestConfig,
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
            guest: GuestConfig::default(),
        }
    }
}

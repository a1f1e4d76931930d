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
    /// False models KVM_X86_DISABLE_EXITS_PAUSE (no exits). Default True.
    pub enabled: bool,
    /// `"vmx"` (default) or `"svm"`.
    pub kind: PleKind,
    /// Initial window and shrink floor, cycles. Default 4096 (kernel
    /// `KVM_VMX_DEFAULT_PLE_WINDOW`; SVM: 3000).
    #[schemars(range(min = 1, max = limits::UINT_MAX))]
    pub window: u64,
    /// Grow modifier; < window multiplies, else adds; 0 keeps the window
    /// fixed (kernels before 2014). Default 2 (kernel).
    #[schemars(range(max = limits::UINT_MAX))]
    pub grow: u64,
    /// Shrink modifier (`ple_window_shrink`, a kernel uint); 0 resets to `window` on sched-in.
    #[schemars(range(max = limits::UINT_MAX))]
    pub shrink: u64,
    /// Growth cap, cycles. Default 4294967295 (kernel UINT_MAX; SVM 65535).
    #[schemars(range(min = 1, max = limits::UINT_MAX))]
    pub max: u64,
    /// Cost of one PAUSE exit round trip, ns. Default 1000 (assumption:
    /// ~1 µs VM exit + entry on recent Xeons).
    #[schemars(range(max = limits::MAX_COST_NS))]
    pub exit_ns: u64,
    /// Cost of examining one candidate in kvm_vcpu_on_spin, ns.
    /// Default 40 (assumption).
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
    /// Never yield (PLE exits only cost). The name was "none" before
    /// 2026-12-05 (still read, deprecated).
    #[serde(alias = "none")]
    NoYield,
    /// 2011: one round-robin sweep from last_boosted+1, skip running and
    /// halted. The name was "baseline2011" before 2026-12-05 (still read,
    /// deprecated).
    #[serde(rename = "baseline_2011", alias = "baseline2011")]
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
    /// `"upstream"` (default; [K1]), `"baseline_2011"`,
    /// `"dy_eligible"` ([S1]), `"random"`, `"oracle"`,
    /// `"no_yield"` or `"python"`: the names of the constructors in
    /// [`vcpulab.sim.policies`][] that build them.
    pub kind: PolicyKind,
    /// -ESRCH results tolerated before the scan stops; 0 =
    /// unlimited. Default 3 (kernel). `dy_eligible` uses 0 (the 2012 patch).
    pub esrch_budget: u32,
    /// Upstream: store the loop offset instead of the index
    /// (v6.12-6.18 bug). Default False.
    pub last_boosted_bug: bool,
    /// Upstream: apply the dy_eligible toggle. Default True (x86).
    pub dy_eligible: bool,
    /// Upstream: skip candidates preempted in guest user mode
    /// when the spinner is in kernel mode. Default True (since ~v4.14).
    pub kernel_filter: bool,
    /// Python policies: the callable's name (the key it travels under).
    pub name: String,
    /// Upstream: the first candidate test of
    /// `kvm_vcpu_on_spin`: `"ready"` (default; `vcpu->ready`, since
    /// 5.3, commit d73eb57b80b9 "KVM: Boost vCPUs that are delivering
    /// interrupts": preempted, or woken from a halt and not yet running)
    /// or `"preempted"` (`vcpu->preempted`, kernels before 5.3: a
    /// woken vCPU that has not run yet is not a candidate).
    pub candidate_gate: CandidateGate,
    /// Upstream: IPI-aware candidate selection, after Wanpeng
    /// Li's RFC ("[PATCH v2 8/9] KVM: Implement IPI-aware directed yield
    /// candidate selection", 18 Dec 2025, not merged,
    /// https://lkml.iu.edu/hypermail/linux/kernel/2512.2/09450.html): a
    /// candidate that has not yet handled an IPI the spinner's thread
    /// sent passes the in-kernel filter (`kvm_vcpu_is_ipi_receiver`;
    /// "recent" = still pending: the RFC's recency window, patches 1-7,
    /// is not modelled), then pending interrupts and the preempted
    /// fallback as upstream; a scan that boosts nobody is followed by a
    /// relaxed round that asks `vcpu->preempted` only. Default False.
    #[schemars(extend("x-omit-default" = true))]
    pub ipi_aware: bool,
    /// Upstream: a candidate preempted in guest user
    /// mode passes the kernel-mode filter when it has a posted interrupt
    /// pending (`kvm_arch_dy_has_pending_interrupt`; 52acd22faa1a "KVM:
    /// Boost vCPU candidate in user mode which is delivering interrupt",
    /// v5.13). False: kernels before 5.13, whose filter skips such a
    /// candidate whatever it has pending. Default True.
    #[serde(skip_serializing_if = "is_true")]
    #[schemars(extend("default" = true))]
    #[schemars(extend("x-omit-default" = true))]
    pub user_mode_irq_boost: bool,
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
    /// Steal time on: the guest sees the `preempted` byte (mutex
    /// spinners stop, wake-up placement avoids preempted vCPUs). Default True.
    pub steal_time: bool,
    /// PV_SCHED_YIELD: a call-function IPI sender directed-yields
    /// to the first preempted target. Default True.
    pub sched_yield: bool,
    /// Posted interrupts: a pending IPI makes a candidate dy_runnable.
    /// Default True.
    pub apicv: bool,
    /// Guest wake-up placement: `"available_idle"` (upstream
    /// `available_idle_cpu`: guest-idle and not `vcpu_is_preempted`),
    /// `"pcpu_is_idle"` (vcpulab's first model of the 2021 proposal:
    /// first prefer guest-idle vCPUs whose host CPU runs nothing else,
    /// read live, counting a preempted one as available),
    /// `"pcpu_is_idle_rfc"` (the RFC as posted, "[PATCH 1-4/4] KVM: x86:
    /// Introduce .pcpu_is_idle() stub infrastructure", Tianqiang Xu,
    /// Dingji Li, Zeyu Mi, 31 Aug 2021,
    /// https://lore.kernel.org/kvm/20210831015919.13006-1-skyele@sjtu.edu.cn/:
    /// fair.c's `available_idle_cpu` becomes guest-idle && the vCPU's
    /// steal-time `is_idle` byte, a snapshot the host writes when the
    /// vCPU is put — 1 if its CPU's nr_running is <= 1 — and when a vCPU
    /// enters the guest — the previous vCPU on that CPU cleared, or
    /// itself set again; as posted the clear returns early when the byte
    /// is set, so a set byte stays set) or `"pcpu_is_idle_rfc_cleared"`
    /// (the same write points with a clear that clears). Default
    /// `"available_idle"`.
    pub placement: Placement,
    /// Cost of a hypercall exit (KICK_CPU, SCHED_YIELD), ns.
    /// Default 1500 (assumption).
    #[schemars(range(max = limits::MAX_COST_NS))]
    pub hypercall_ns: u64,
    /// Cost of a HLT exit before blocking, ns. Default 1500
    /// (assumption).
    #[schemars(range(max = limits::MAX_COST_NS))]
    pub halt_exit_ns: u64,
    /// Host CPU time of a vCPU's return from a halt that blocked, beyond
    /// the switch back in (`Host.switch_ns`), ns: `kvm_vcpu_block()`'s
    /// return and everything KVM does before the guest resumes (the
    /// preempt notifiers' `vcpu_load`, the pending interrupt's injection).
    /// Charged as exit time (category `exit_ns`, not preemptible) when the
    /// vCPU is back from the block, before its guest code resumes; a halt
    /// that polling caught costs nothing here. Simplified: the block's own
    /// side (the switch to idle) is charged here too, so a blocked halt's
    /// whole cost beyond a polled one sits on the wake-up's path (where a
    /// trace of this host puts nearly all of it: docs/twins.md). Default 0
    /// (off; the eras leave it off: no published figure). The twins
    /// measure it on this host (`twins.calibrate`'s `halt_wake_ns`).
    #[schemars(range(max = limits::MAX_COST_NS))]
    #[schemars(extend("x-omit-default" = true))]
    pub halt_wake_ns: u64,
    /// The spread of `halt_wake_ns`: each return from a blocked halt costs
    /// a log-normal draw with `halt_wake_ns` as its median and this as the
    /// standard deviation of its logarithm (a right tail, capped at 50x:
    /// the emulated path around an exit varies from one wake-up to the
    /// next). Default 0.0 (every return costs `halt_wake_ns`). The twins
    /// measure it from the calibration's IPI round trips
    /// (`twins.calibrate`'s `halt_wake_spread`).
    #[schemars(range(min = 0.0, max = 1.0))]
    #[schemars(extend("x-omit-default" = true))]
    pub halt_wake_jitter: f64,
    /// Guest idle polling before HLT (cpuidle-haltpoll),
    /// ns; 0 halts at once. Default 0 (haltpoll is off unless the guest
    /// loads it; its own default, `guest_halt_poll_ns`, is 200000: "Guest
    /// halt polling", Linux kernel documentation,
    /// https://docs.kernel.org/virt/guest-halt-polling.html).
    #[schemars(range(max = limits::MAX_COST_NS))]
    pub guest_idle_poll_ns: u64,
    /// The vCPUs (indices in the VM, ascending, each below `vcpus`) that
    /// idle-poll for `guest_idle_poll_ns`; the others halt at once. Empty:
    /// every vCPU, as the guest's cpuidle-haltpoll driver polls on every
    /// CPU. For guests that poll on some vCPUs only: the workers of
    /// vcpulab's wake-placement program poll their mailbox before they
    /// halt, and its waker (vCPU 0) halts at once. Default empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = limits::MAX_VCPU_LIST), extend("default" = []))]
    #[schemars(extend("x-omit-default" = true))]
    pub guest_idle_poll_vcpus: Vec<u32>,
    /// What ends a guest idle poll that was interrupted (switched out, or an
    /// interrupt handler ran): `"clock"`, its window ends at an instant of
    /// the guest's clock, which runs on while the vCPU is away (the
    /// kernel's `poll_idle`, drivers/cpuidle/poll_state.c, checks
    /// `local_clock()`), or `"checks"`, its window is a number of checks,
    /// so only the time the vCPU polls counts and an interrupted poll goes
    /// on with the checks it has left (vcpulab's mailbox poll,
    /// `experiment.WakePlacement(poll=n)`, counts down n checks; the twins
    /// use it). Default `"clock"`.
    #[schemars(extend("x-omit-default" = true))]
    pub guest_idle_poll_limit: IdlePollLimit,
    /// KVM_FEATURE_PV_UNHALT offered to the guest. False: the
    /// guest's `kvm_spinlock_init` returns early, so its `pv_queued`
    /// locks run the `virt_spin_lock` test-and-set fallback (any running
    /// waiter may take a free lock, newcomers included: lock stealing).
    /// Default True (KVM since 3.12).
    pub pv_spinlocks: bool,
    /// KVM_HC_KICK_CPU also directed-yields to the kicked vCPU
    /// (`kvm_pv_kick_cpu_op` then `kvm_sched_yield`; commit
    /// 266e85a5ec9 "KVM: X86: Boost queue head vCPU to mitigate lock
    /// waiter preemption", Wanpeng Li, 2019). False: the kick only wakes
    /// (hosts before it). Default True.
    pub kick_yield: bool,
    /// KVM_FEATURE_PV_TLB_FLUSH (4.16, 2018): a TLB-shootdown
    /// IPI phase (`Ipi(tlb_flush=True)`) skips preempted targets, which
    /// the host flushes at their next sched-in (`kvm_flush_tlb_multi`).
    /// Default False (as before the option existed).
    pub tlb_flush: bool,
    /// KVM_FEATURE_PV_SEND_IPI (4.19, 2018): the sender makes one
    /// hypercall (`hypercall_ns`) for a multicast IPI instead of one
    /// ICR-write exit per target (`icr_write_ns` each). Default False.
    pub send_ipi: bool,
    /// Cost of one ICR-write exit per IPI target when
    /// `send_ipi` is off, ns. Default 0 (sending is free, as before the
    /// option existed; an era preset sets the hardware figure).
    #[schemars(range(max = limits::MAX_COST_NS))]
    pub icr_write_ns: u64,
    /// When the host sets the steal-time `preempted` byte
    /// that the guest's `vcpu_is_preempted` reads ([K4]):
    /// `"instruction_boundary"` (5.19 on, and the stable kernels from
    /// 5.4 that took the fixes: only a vCPU preempted while runnable by
    /// the interrupt that took it out of guest mode; commits
    /// 54aa83c90198 "KVM: x86: do not set st->preempted when going back
    /// to user space" and 6cd88243c7e0 "KVM: x86: do not report a vCPU
    /// as preempted outside instruction boundaries", Paolo Bonzini,
    /// June 2022) or `"every_put"` (4.10 to 5.18: `kvm_arch_vcpu_put`
    /// calls `kvm_steal_time_set_preempted` at every put, so a vCPU
    /// blocked after HLT, or switched out after a pause-loop exit, reads
    /// as preempted until it enters the guest again, and
    /// `available_idle_cpu` refuses every halted vCPU) or `"never"` (KVM
    /// writes no byte, as on the project's kvm_pvm host; the twins use it).
    /// Under vcpulab's token schedulers the byte is also set while a
    /// runnable vCPU holds no token, whatever this says (the real
    /// scheduler writes it, src/kvm/sched/). Default
    /// `"instruction_boundary"`.
    #[schemars(extend("x-omit-default" = true))]
    pub preempted_byte: PreemptedByte,
    /// `kvm_sched_yield` (the KICK_CPU yield
    /// and PV sched yield) gives up at once while the yielder is alone
    /// on its host CPU (`single_task_running()`; "KVM: X86: Bail out of
    /// direct yield in case of under-committed scenarios", Wanpeng Li,
    /// 2021, v5.13). False: hosts before it, which always try
    /// `kvm_vcpu_yield_to` (it can still boost a target waiting on
    /// another CPU's queue). Default True.
    #[schemars(extend("x-omit-default" = true))]
    pub yield_single_task_bailout: bool,
}

/// What ends an interrupted guest idle poll (`PvConfig::guest_idle_poll_limit`).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum IdlePollLimit {
    /// The window ends at an instant of the guest's clock: time switched out
    /// or in an interrupt handler counts as polled (`poll_idle`).
    #[default]
    Clock,
    /// The window is the vCPU's polling time (a number of checks): an
    /// interrupted poll goes on for the time it had left.
    Checks,
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
    /// KVM never sets it: measured on the project's host (KVM through
    /// `kvm_pvm`, Linux 6.18: a vCPU thread preempted by another task keeps
    /// the byte clear), the host the twins model. vcpulab's own schedulers
    /// still set it while a runnable vCPU holds no token (src/kvm/sched/).
    Never,
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
            halt_wake_ns: 0,
            halt_wake_jitter: 0.0,
            guest_idle_poll_ns: 0,
            guest_idle_poll_vcpus: Vec::new(),
            guest_idle_poll_limit: IdlePollLimit::Clock,
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
    /// VCPUs per VM. Default 4.
    #[schemars(range(min = 1, max = MAX_VCPUS_TOTAL))]
    pub vcpus: u32,
    /// Number of identical VMs. Default 1.
    #[schemars(range(min = 1, max = MAX_VCPUS_TOTAL))]
    pub count: u32,
    /// Guest threads; 0 = one per vCPU (default). The 2012
    /// benchmarks of [S1] ran 2 threads per vCPU.
    pub threads: u32,
    /// Scheduler weight of each vCPU thread, in [2, 88761] (1024 =
    /// nice 0, the kernel's default for a vCPU thread). Default 1024.
    #[schemars(range(min = limits::MIN_WEIGHT, max = limits::MAX_WEIGHT))]
    pub weight: u64,
    /// What the threads run; a preset's name
    /// (`vcpulab.sim.presets.NAMES`, e.g. `"ebizzy_like"`) is that
    /// preset with its defaults.
    pub workload: WorkloadConfig,
    /// Pause-loop exiting, see [`Ple`][vcpulab.sim.Ple].
    pub ple: PleConfig,
    /// The directed-yield policy, see [`Policy`][vcpulab.sim.Policy]; a name of
    /// `vcpulab.sim.policies.NAMES` (e.g. `"dy_eligible"`) is that
    /// policy with its defaults (`policies.by_name`).
    pub policy: PolicyConfig,
    /// Paravirtual features and exit costs, see [`Pv`][vcpulab.sim.Pv].
    pub pv: PvConfig,
    /// Host halt polling, see [`HaltPoll`][vcpulab.sim.HaltPoll].
    pub halt_poll: HaltPollConfig,
    /// The guest kernel's own choices, see [`Guest`][vcpulab.sim.Guest].
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

//! The guest kernel's own choices (its version): lock rules, the
//! `vcpu_is_preempted` readers, load balancing, wake-up placement.

use super::*;

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LockModel {
    /// The simulator's first lock rules (FIFO hand-off for every queued kind;
    /// the PV predecessor check only when a waiter (re)starts spinning).
    Simple,
    /// The guest kernel's rules: `pv_queued` is the PV qspinlock
    /// (`__pv_queued_spin_lock_slowpath`: stealing at slow-path entry as
    /// `GuestConfig::pv_lock_steal` says, `pv_wait_node` / `pv_wait_head_or_lock` after SPIN_THRESHOLD,
    /// live wait-early, the unlock frees the lock and `pv_kick`s a halted
    /// head); mutexes spin in an OSQ whose waiters give up when their
    /// predecessor's vCPU is preempted (`osq_lock`).
    Kernel,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WaitEarly {
    /// No wait-early (v4.2-v4.4): a queue node halts only after its
    /// SPIN_THRESHOLD iterations (cd0272fab785 "locking/pvqspinlock: Queue
    /// node adaptive spinning", v4.5, added the check).
    Never,
    /// `pv_wait_early`: the previous queue node is not running (halted).
    PrevHalted,
    /// 75437bb304b2 (2019, reverted by 89340d0935c9 in 5.4 and stable):
    /// also when the previous node's vCPU is preempted (`vcpu_is_preempted`).
    PrevHaltedOrPreempted,
}

/// Kernel lock model: how a `pv_queued` waiter entering the slow path may
/// take the lock ahead of the MCS queue (kernel/locking/qspinlock_paravirt.h).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PvLockSteal {
    /// No stealing (v4.2-v4.4): the slow path's trylock takes only a lock
    /// with no queue (`queued_spin_trylock` on a whole lock word of 0).
    None,
    /// One attempt at slow-path entry (v4.5-v4.14, 1c4941fd53af
    /// "locking/pvqspinlock: Allow limited lock stealing", Waiman Long,
    /// 2015): a free lock is taken unless the queue head spins with the
    /// pending bit set.
    Once,
    /// The hybrid PV queued/unfair lock (11752adb68a3, v4.15, 2017;
    /// `pv_hybrid_queued_unfair_trylock`): the entering waiter spins on
    /// the lock word, taking it whenever it is free and the pending bit
    /// clear, for as long as the MCS queue is not empty and its head has
    /// not set the pending bit (which it does only while it spins in
    /// `pv_wait_head_or_lock`, clearing it before it halts); it queues
    /// once the queue is empty or the head spins.
    Hybrid,
}

/// The guest kernel's own choices (its version, not the host's).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct GuestConfig {
    /// `"simple"` (default; the simulator's first rules: FIFO
    /// hand-off for every queued kind, the PV predecessor check only when
    /// a waiter (re)starts spinning, mutex spinners watch the owner only)
    /// or `"kernel"`: `pv_queued` is the PV qspinlock of
    /// kernel/locking/qspinlock_paravirt.h — stealing at slow-path
    /// entry as `pv_lock_steal` says (refused while the queue head spins
    /// with the pending bit set), queue nodes spin
    /// SPIN_THRESHOLD iterations or stop early when the previous node is
    /// not running (`pv_wait_node`, `pv_wait_early`, re-checked when
    /// that node halts), the head spins SPIN_THRESHOLD iterations afresh
    /// (`pv_wait_head_or_lock`) then halts, the unlock frees the lock
    /// and kicks a halted head (`__pv_queued_spin_unlock_slowpath`);
    /// mutex spinners queue in an OSQ and give up when the spinner before
    /// them is on a preempted vCPU (`osq_lock`).
    pub lock_model: LockModel,
    /// Kernel lock model: `"prev_halted"` (default; the
    /// rule from v4.5, cd0272fab785, and again since 89340d0935c9, Oct
    /// 2019), `"never"` (v4.2-v4.4: no wait-early) or
    /// `"prev_halted_or_preempted"` (75437bb304b2 "locking/pvqspinlock:
    /// Don't wait if vCPU is preempted", 2019, reverted by 89340d0935c9
    /// in 5.4 and the stable kernels after a 7-8x ebizzy regression: a
    /// node also halts when the previous node's vCPU is preempted).
    pub pv_wait_early: WaitEarly,
    /// Kernel lock model: how a waiter entering the `pv_queued` slow path
    /// may take the lock ahead of the queue: `"hybrid"` (default; the
    /// unfair loop of 11752adb68a3, v4.15, 2017, to today), `"once"` (one
    /// attempt, v4.5-v4.14) or `"none"` (v4.2-v4.4). Every mode takes a lock
    /// that is free with no queue.
    #[schemars(extend("x-omit-default" = true))]
    pub pv_lock_steal: PvLockSteal,
    /// The guest asks `vcpu_is_preempted()` in
    /// `owner_on_cpu` (mutex spinning) and `osq_lock` (4.10+, 2016);
    /// False: `owner->on_cpu` only (3.x and 4.x before 4.10). Needs
    /// `Pv.steal_time`. Default True.
    pub vcpu_is_preempted: bool,
    /// The guest scheduler balances its threads between its
    /// vCPUs (kernel/sched/fair.c, 5.x): `newidle_balance` when a vCPU
    /// runs out of threads pulls one waiting thread from the vCPU with
    /// the most waiting threads, unless the vCPU's `avg_idle` (1/8-weight
    /// average of its idle periods, capped at 2 × `migration_cost_ns`)
    /// is below `migration_cost_ns`; and a guest tick of a vCPU with two
    /// or more runnable threads kicks the nohz idle balance, at most once
    /// per balance interval (`sd_weight` ms for the VM's one domain,
    /// `sd_init` in kernel/sched/topology.c), which pulls one thread to
    /// each idle vCPU and wakes it. Threads that stopped running less than
    /// `migration_cost_ns` ago stay (`task_hot`). Simplifications: one
    /// domain spanning the VM, queue lengths instead of PELT loads, one
    /// thread per pull, no balancing between busy vCPUs, the kick's IPI
    /// and the balancing itself cost nothing. Default False (threads move
    /// only at wake-up, as before the option).
    #[schemars(extend("x-omit-default" = true))]
    pub load_balance: bool,
    /// `sysctl_sched_migration_cost` of the guest, ns.
    /// Default 500000 (kernel/sched/fair.c).
    #[schemars(range(max = limits::MAX_COST_NS))]
    #[schemars(extend("x-omit-default" = true))]
    pub migration_cost_ns: u64,
    /// The guest's scheduler tick, ns (used by `load_balance`).
    /// Default 4000000 (CONFIG_HZ=250, the default of kernel/Kconfig.hz).
    #[schemars(range(min = limits::MIN_GUEST_TICK_NS, max = limits::MAX_COST_NS))]
    #[schemars(extend("x-omit-default" = true))]
    pub tick_ns: u64,
    /// How the guest kernel chooses the vCPU a woken thread
    /// runs on. `"first_idle"` (default; vcpulab's first rule): the
    /// first available vCPU in VM order from the thread's previous vCPU,
    /// else the previous vCPU. `"select_task_rq_fair"`: the guest's
    /// kernel/sched/fair.c — with the waker on another vCPU and not
    /// `wake_wide`, `wake_affine` (`wake_affine_idle`, then
    /// `wake_affine_weight`) chooses the target between the waker's and
    /// the previous vCPU; `select_idle_sibling` then takes the target
    /// if available, the previous vCPU if available and in the target's
    /// LLC, the thread's `recent_used_cpu` likewise, with SMT an idle
    /// sibling of the previous vCPU (`select_idle_smt`) or a whole idle
    /// core (`select_idle_core`), else the first available vCPU of
    /// `select_idle_cpu`'s scan from target + 1 within `idle_scan`'s
    /// limit, else the target. "Available" is `Pv.placement`'s rule
    /// (`available_idle_cpu` = idle and not preempted upstream; the
    /// 2021 RFC's `is_idle` byte). Simplified: loads are runnable
    /// thread counts, not PELT averages; wake-ups are never sync.
    #[schemars(extend("x-omit-default" = true))]
    pub wake_placement: GuestWakePlacement,
    /// VCPUs per last-level cache in the topology the guest sees
    /// (its `sd_llc`), counted from the VM's vCPU 0; 0 (default): one
    /// LLC spans the VM, as QEMU's `-smp N` gives from QEMU 6.2 on
    /// (cores preferred over sockets). A multiple of
    /// `threads_per_core` that divides `Vm.vcpus`. Used by
    /// `"select_task_rq_fair"` only.
    #[serde(skip_serializing_if = "is_zero_u32")]
    #[schemars(range(max = MAX_VCPUS_TOTAL), extend("default" = 0))]
    #[schemars(extend("x-omit-default" = true))]
    pub llc_vcpus: u32,
    /// vCPUs per core in the topology the guest sees (SMT siblings, the
    /// guest's `cpu_smt_mask`). 1 (default): QEMU's default `threads=1`.
    /// Used by `select_task_rq_fair` placement only (`select_idle_core`).
    #[serde(skip_serializing_if = "is_one_u32")]
    #[schemars(range(min = 1, max = limits::MAX_THREADS_PER_CORE), extend("default" = 1))]
    #[schemars(extend("x-omit-default" = true))]
    pub threads_per_core: u32,
    /// The guest's `wake_wide` (v3.12 on): a waker that wakes
    /// many different threads (flips at least the LLC size, and at
    /// least LLC size times the wakee's) sends each wakee to its
    /// previous vCPU's neighbourhood instead of `wake_affine`'s
    /// choice. Default True. Used by `"select_task_rq_fair"` only.
    #[serde(skip_serializing_if = "is_true")]
    #[schemars(extend("default" = true))]
    #[schemars(extend("x-omit-default" = true))]
    pub wake_wide: bool,
    /// `select_idle_sibling` tries the vCPU the thread
    /// was woken from last time after the target and the previous vCPU
    /// (32e839dda3ba, v4.16). Default True. Used by
    /// `"select_task_rq_fair"` only.
    #[serde(skip_serializing_if = "is_true")]
    #[schemars(extend("default" = true))]
    #[schemars(extend("x-omit-default" = true))]
    pub recent_used_cpu: bool,
    /// `select_idle_cpu`'s limit: `"sis_util"` (default;
    /// SIS_UTIL, 70fb5ccf2ebb, v6.0: `nr_idle_scan` = nr_llc × (1024 −
    /// x² × 117² / (10000 × 1024)) / 1024 with x the LLC's utilisation per
    /// vCPU in 1/1024 and 117 the LLC domain's `imbalance_pct`, so the
    /// scan stops near 85 % busy; simplified: the utilisation is the
    /// share of the LLC's vCPUs with a thread running or waiting at the
    /// wake-up, not PELT's `util_avg`) or `"full"` (the whole LLC:
    /// 3.x, and the stand-in for SIS_PROP of v4.13-v6.5, whose limit
    /// depends on `avg_idle` and `avg_scan_cost`, timings the model
    /// does not keep). Used by `"select_task_rq_fair"` only.
    #[serde(skip_serializing_if = "IdleScan::is_sis_util")]
    #[schemars(extend("default" = "sis_util"))]
    #[schemars(extend("x-omit-default" = true))]
    pub idle_scan: IdleScan,
    /// Guest kernel work each vCPU runs when it first enters the guest,
    /// before its scheduler picks a thread, ns: a program's start (enabling
    /// its LAPIC, its first instructions and their first-touch faults). It
    /// runs with interrupts off (an IPI waits for its end) and holds the
    /// vCPU's CPU as any guest work does; preempted, it goes on where it
    /// stopped. Default 0 (every vCPU picks a thread at its first entry).
    /// The twins of real runs under vcpulab's scheduler set it to the
    /// start measured on the real vCPUs (`vcpulab.twins.vcpu_start_of`).
    #[schemars(range(max = limits::MAX_COST_NS))]
    #[schemars(extend("x-omit-default" = true))]
    pub vcpu_start_ns: u64,
    /// The VM's first vCPU, after its start, spins until every other vCPU
    /// of the VM has run its start and has nothing to run, and only then
    /// picks a thread: the start of vcpulab's guest programs whose vCPU 0
    /// hands out work (`WakePlacement`'s waker waits for every worker's
    /// idle flag, so its first choice is the placement rule's, not the
    /// start's order). Default False.
    #[schemars(extend("x-omit-default" = true))]
    pub vcpu0_waits_for_starts: bool,
}

/// The guest kernel's wake-up placement (`select_task_rq` of the guest's
/// fair class) of a thread on one of its VM's vCPUs.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum GuestWakePlacement {
    /// vcpulab's first rule: the first available vCPU in VM order from the
    /// thread's previous vCPU (wrapping), else the previous vCPU. No
    /// waker, no LLC, no scan limit.
    FirstIdle,
    /// `select_task_rq_fair` over the VM's vCPUs (kernel/sched/fair.c):
    /// with the waker on another vCPU and not `wake_wide`, `wake_affine`
    /// (`wake_affine_idle`, then `wake_affine_weight` on runnable thread
    /// counts) chooses the target between the waker's and the previous
    /// vCPU; `select_idle_sibling` then takes the target if available, the
    /// previous vCPU if available and in the target's LLC, the recently
    /// used vCPU likewise, an idle core of the LLC (`select_idle_core`,
    /// with SMT), else the first available vCPU of `select_idle_cpu`'s
    /// scan from target + 1 within its limit (`idle_scan`), else the
    /// target. "Available" is the `pv.placement` rule. Simplified: loads
    /// are runnable thread counts, not PELT averages; no sync wake-ups.
    SelectTaskRqFair,
}

/// `select_idle_cpu`'s scan limit in the guest.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum IdleScan {
    /// Every vCPU of the LLC (3.x; and the stand-in for SIS_PROP of
    /// v4.13-v6.5, whose limit depends on `avg_idle` / `avg_scan_cost`,
    /// timings the model does not keep).
    Full,
    /// SIS_UTIL (70fb5ccf2ebb, v6.0): `nr_idle_scan` = nr_llc × (1024 −
    /// x² × 117² / (10000 × 1024)) / 1024 with x = the LLC's utilisation
    /// sum / nr_llc (in 1/1024 of a CPU) and 117 the LLC domain's
    /// `imbalance_pct`; the scan stops when the LLC is ~85 % busy.
    /// Simplified: the utilisation is the share of the LLC's vCPUs with a
    /// thread running or waiting at the wake-up, not PELT's `util_avg`.
    SisUtil,
}

impl IdleScan {
    fn is_sis_util(&self) -> bool {
        *self == IdleScan::SisUtil
    }
}

impl Default for GuestConfig {
    fn default() -> Self {
        GuestConfig {
            lock_model: LockModel::Simple,
            pv_wait_early: WaitEarly::PrevHalted,
            pv_lock_steal: PvLockSteal::Hybrid,
            vcpu_is_preempted: true,
            load_balance: false,
            migration_cost_ns: 500_000,
            tick_ns: 4_000_000,
            wake_placement: GuestWakePlacement::FirstIdle,
            llc_vcpus: 0,
            threads_per_core: 1,
            wake_wide: true,
            recent_used_cpu: true,
            idle_scan: IdleScan::SisUtil,
            vcpu_start_ns: 0,
            vcpu0_waits_for_starts: false,
        }
    }
}

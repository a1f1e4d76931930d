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
    /// (`__pv_queued_spin_lock_slowpath`: one steal attempt at slow-path
    /// entry, `pv_wait_node` / `pv_wait_head_or_lock` after SPIN_THRESHOLD,
    /// live wait-early, the unlock frees the lock and `pv_kick`s a halted
    /// head); mutexes spin in an OSQ whose waiters give up when their
    /// predecessor's vCPU is preempted (`osq_lock`).
    Kernel,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WaitEarly {
    /// `pv_wait_early`: the previous queue node is not running (halted).
    PrevHalted,
    /// 75437bb304b2 (2019, reverted by 89340d0935c9 in 5.4 and stable):
    /// also when the previous node's vCPU is preempted (`vcpu_is_preempted`).
    PrevHaltedOrPreempted,
}

/// The guest kernel's own choices (its version, not the host's).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct GuestConfig {
    /// Which guest lock rules run.
    pub lock_model: LockModel,
    /// Kernel lock model: when a `pv_wait_node` waiter halts early.
    pub pv_wait_early: WaitEarly,
    /// The guest asks `vcpu_is_preempted()` in `owner_on_cpu` (mutex
    /// spinning) and `osq_lock` (4.10+); false: owner->on_cpu only (3.x, 4.x
    /// before 4.10). Needs `pv.steal_time`.
    pub vcpu_is_preempted: bool,
    /// The guest scheduler balances threads between its vCPUs
    /// (kernel/sched/fair.c): `newidle_balance` when a vCPU runs out of
    /// threads (skipped while its `avg_idle` < `migration_cost_ns`), and
    /// the nohz idle balance a vCPU with two or more runnable threads kicks
    /// from its tick, at most once per balance interval (`sd_weight` ms,
    /// `sd_init`), pulling one cache-cold waiting thread to each idle vCPU.
    /// False: threads move only at wake-up.
    pub load_balance: bool,
    /// `sysctl_sched_migration_cost` of the guest (ns): `task_hot` and the
    /// `avg_idle` gate of `newidle_balance`.
    #[schemars(range(max = limits::MAX_COST_NS))]
    pub migration_cost_ns: u64,
    /// The guest's scheduler tick (ns): CONFIG_HZ (Kconfig.hz default HZ_250).
    #[schemars(range(min = limits::MIN_GUEST_TICK_NS, max = limits::MAX_COST_NS))]
    pub tick_ns: u64,
    /// How the guest kernel chooses the vCPU a woken thread runs on.
    pub wake_placement: GuestWakePlacement,
    /// vCPUs per last-level cache in the topology the guest sees (its
    /// `sd_llc`, from CPUID leaves 4 / 0x8000001D), counted from vCPU 0 of
    /// the VM. 0 (default): one LLC spans the VM, as QEMU's `-smp N` gives
    /// from QEMU 6.2 on (cores preferred over sockets: one socket, one L3).
    /// Used by `select_task_rq_fair` placement only.
    #[serde(skip_serializing_if = "is_zero_u32")]
    #[schemars(range(max = MAX_VCPUS_TOTAL), extend("default" = 0))]
    pub llc_vcpus: u32,
    /// vCPUs per core in the topology the guest sees (SMT siblings, the
    /// guest's `cpu_smt_mask`). 1 (default): QEMU's default `threads=1`.
    /// Used by `select_task_rq_fair` placement only (`select_idle_core`).
    #[serde(skip_serializing_if = "is_one_u32")]
    #[schemars(range(min = 1, max = limits::MAX_THREADS_PER_CORE), extend("default" = 1))]
    pub threads_per_core: u32,
    /// `wake_wide` in the guest (kernel/sched/fair.c, 62470419e993, v3.12): a waker
    /// that wakes many different threads sends each to its own previous
    /// vCPU's neighbourhood instead of `wake_affine`'s choice. Used by
    /// `select_task_rq_fair` placement only. Default true.
    #[serde(skip_serializing_if = "is_true")]
    #[schemars(extend("default" = true))]
    pub wake_wide: bool,
    /// `p->recent_used_cpu` in `select_idle_sibling` (v4.16 on): the vCPU a
    /// thread was woken from last time is tried after the target and the
    /// previous vCPU. Used by `select_task_rq_fair` placement only.
    /// Default true.
    #[serde(skip_serializing_if = "is_true")]
    #[schemars(extend("default" = true))]
    pub recent_used_cpu: bool,
    /// How many vCPUs `select_idle_cpu` looks at before it gives up. Used
    /// by `select_task_rq_fair` placement only. Default `sis_util`.
    #[serde(skip_serializing_if = "IdleScan::is_sis_util")]
    #[schemars(extend("default" = "sis_util"))]
    pub idle_scan: IdleScan,
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
        }
    }
}

//! The simulator's configuration: plain data, (de)serialised as JSON.
//!
//! The Python layer (`vcpulab.sim`) builds these from frozen dataclasses whose
//! docstrings give each field's unit, default and source. Rust validates again
//! ([`SimConfig::validate`]) so that a config coming from anywhere is checked
//! before the event loop sees it; every error names the field.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The whole experiment: one host, its VMs, a seed and a duration.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    /// Seed of the one RNG of a run (PCG64).
    pub seed: u64,
    /// Simulated time limit, ns. The run also ends earlier when every VM with
    /// a finite `iterations` has completed them.
    #[schemars(range(min = 1, max = limits::MAX_DURATION_NS))]
    pub duration_ns: u64,
    /// Record the per-host-CPU trace (sched map).
    pub trace: bool,
    /// Iterations completing before this instant (ns) are not counted in
    /// ops, throughput and latency (time accounting covers the whole run).
    pub warmup_ns: u64,
    /// With `trace`: record only the slices that end after this instant, ns
    /// (whole slices, not clipped). A sched map of a window of a long run
    /// then needs only that window's rows. Default 0 (from the start).
    pub trace_from_ns: u64,
    /// With `trace`: record only the slices that start before this instant,
    /// ns; 0 = until the run's end. Default 0.
    pub trace_until_ns: u64,
    /// The host: CPUs and scheduler.
    pub host: HostConfig,
    /// The VMs; each entry stands for `count` identical VMs.
    #[schemars(length(min = 1))]
    pub vms: Vec<VmConfig>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 0,
            duration_ns: 100_000_000,
            trace: false,
            warmup_ns: 0,
            trace_from_ns: 0,
            trace_until_ns: 0,
            host: HostConfig::default(),
            vms: vec![VmConfig::default()],
        }
    }
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Scheduler {
    /// EEVDF-like fair scheduler (v6.6+), one run queue per host CPU; "eevdf" names it too.
    #[serde(alias = "eevdf")]
    Fair,
    /// Gang (co-)scheduling: all vCPUs of a VM run together in slices.
    Gang,
    /// The pre-6.6 CFS fair class (kernel/sched/fair.c of v3.x-v6.5):
    /// vruntime and min_vruntime, slices from sched_latency / min_granularity,
    /// check_preempt_tick, wakeup_preempt_entity, next / last / skip buddies.
    Cfs,
    /// vcpulab's own vCPU scheduler (`vcpulab.sched.round_robin`, and the
    /// slices of `sched.directed_yield`; src/kvm/sched.rs) over the EEVDF
    /// host: each host CPU has one run token; a vCPU thread runs only while it
    /// holds one; tokens go to one FIFO queue of runnable vCPUs, a slice of
    /// `token_slice_ns` of wall time each; a halt hands the token on at once; a
    /// woken vCPU waits at the queue's tail; `yield_to` gives the yielder's
    /// token to a waiting candidate with a fresh slice and puts the yielder at
    /// the tail. The kernel still shares each CPU between its token holder and
    /// other tasks (background, noise) by EEVDF.
    RoundRobin,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum NextBuddy {
    /// The hint is always honoured (CFS before v6.6).
    Always,
    /// Honoured only if the target is EEVDF-eligible (sched_feat(PICK_BUDDY),
    /// on by default since 2a77e4be12cb, v6.14; kernel/sched/fair.c pick_next_entity).
    Eligible,
    /// Never honoured (v6.6-v6.13: ->next is picked only under NEXT_BUDDY, off by default).
    Never,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum YieldPenalty {
    /// First EEVDF (147f3efaa241, v6.6, to v6.18): yield_task_fair moves the
    /// yielder's deadline one slice forward.
    Deadline,
    /// Newer EEVDF (79104becf42b "sched/fair: Forfeit vruntime on yield",
    /// v6.19; stable 6.12.63, 6.18.2): an eligible yielder's vruntime jumps
    /// to its deadline, then the deadline moves one slice forward.
    Vruntime,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum YieldScope {
    /// All threads share the CPU's one fair run queue (no task groups): the
    /// yield penalty reorders the yielder against every task of its CPU.
    RunQueue,
    /// Each VM's threads are in their own task group (libvirt's per-VM
    /// machine.slice scope; autogroup per session). yield_task_fair acts on
    /// task_cfs_rq(curr), the VM's own queue, and returns early when the CPU
    /// runs one task (rq->nr_running == 1), so the penalty reorders the
    /// yielder only among its own VM's threads; set_next_buddy walks the
    /// whole hierarchy, so the next buddy still acts where VMs compete.
    /// Simplified (one flat queue): the penalty applies when every other
    /// runnable task of the CPU is a vCPU of the yielder's VM (then the flat
    /// queue is the group's queue), and not at all otherwise.
    VmGroup,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
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

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Background {
    /// Fraction of each host CPU a pinned background host task (kworker-like) wants, in [0, 1).
    #[schemars(range(min = 0.0), extend("exclusiveMaximum" = 1.0))]
    pub utilization: f64,
    /// Mean length of one background burst, ns (exponential).
    #[schemars(range(min = limits::MIN_PERIOD_NS))]
    pub burst_ns: u64,
    /// Scheduler weight of the background tasks (1024 = nice 0).
    #[schemars(range(min = limits::MIN_WEIGHT, max = limits::MAX_WEIGHT))]
    pub weight: u64,
}

impl Default for Background {
    fn default() -> Self {
        Background { utilization: 0.0, burst_ns: 200_000, weight: 1024 }
    }
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HostConfig {
    /// Host CPUs.
    #[schemars(range(min = 1, max = MAX_PCPUS))]
    pub pcpus: u32,
    /// The host's CPU scheduler.
    pub scheduler: Scheduler,
    /// Scheduler tick period, ns (HZ=250: 4 ms). Slice expiry is noticed at ticks.
    #[schemars(range(min = limits::MIN_PERIOD_NS))]
    pub tick_ns: u64,
    /// EEVDF base slice, ns (sysctl_sched_base_slice 0.75 ms scaled by 1 + ilog2(min(ncpus, 8))).
    #[schemars(range(min = limits::MIN_PERIOD_NS))]
    pub base_slice_ns: u64,
    /// A woken, eligible task with an earlier deadline preempts the running one.
    pub wakeup_preemption: bool,
    /// Effect of yield_to's next-buddy hint.
    pub next_buddy: NextBuddy,
    /// What a yield costs the yielder (EEVDF).
    pub yield_penalty: YieldPenalty,
    /// Which run queue the yield penalty acts on (EEVDF): the CPU's whole
    /// queue, or only the yielder's VM's task group.
    pub yield_scope: YieldScope,
    /// Placement of the vCPU threads on the host CPUs.
    pub affinity: Affinity,
    /// Gang-scheduling slice, ns.
    #[schemars(range(min = limits::MIN_PERIOD_NS))]
    pub gang_slice_ns: u64,
    /// A run token's slice under `scheduler = "round_robin"` (vcpulab's
    /// scheduler), wall time, ns; `vcpulab.sched`'s `slice_us` (default 4000).
    #[serde(skip_serializing_if = "is_default_token_slice_ns")]
    #[schemars(range(min = limits::MIN_PERIOD_NS), extend("default" = 4_000_000))]
    pub token_slice_ns: u64,
    /// Host clock converting PLE cycles to ns, kHz.
    #[schemars(range(min = limits::MIN_TSC_KHZ))]
    pub tsc_khz: u64,
    /// Time a yield_to attempt holds both run-queue locks, ns.
    #[schemars(range(max = limits::MAX_COST_NS))]
    pub rq_lock_ns: u64,
    /// Cost of yield_to before the run-queue locks (the -ESRCH check), ns.
    #[schemars(range(max = limits::MAX_COST_NS))]
    pub yield_check_ns: u64,
    /// yield_to returns -ESRCH early when both run queues hold one task
    /// (kernels since ~3.8); false: the 2011-2012 yield_to, which always takes
    /// both run-queue locks.
    pub yield_to_esrch: bool,
    /// Background host load: one pinned host task per host CPU.
    pub background: Background,
    /// Per-CPU tick phase as the `skew_tick=1` boot option sets it
    /// (kernel/time/tick-sched.c `tick_setup_sched_timer`: CPU i's tick is
    /// offset by i·(TICK_NSEC/2)/nr_cpus). false: the kernel default,
    /// every CPU ticks on the same jiffy boundary ("synchronized mode").
    pub tick_skew: bool,
    /// Ties between equal scheduling keys are broken by a per-task seeded
    /// random rank (a separate RNG stream) instead of the task index, so
    /// that CPUs do not all prefer the same VM.
    pub seeded_ties: bool,
    /// Wake-up latency of a task on a remote CPU: the IPI (wake list or
    /// reschedule IPI) delivery, ns. 0: instantaneous (off).
    #[schemars(range(max = limits::MAX_COST_NS))]
    pub wakeup_ipi_ns: u64,
    /// Idle states of each host CPU as (exit_latency_ns, target_residency_ns),
    /// shallowest first; a woken task waits for the exit latency of the
    /// deepest state whose target residency the CPU has been idle for.
    /// Empty: no exit latency (off). Times are <= 1e9 ns.
    #[schemars(schema_with = "idle_states_schema")]
    pub idle_states: Vec<(u64, u64)>,
    /// Relative jitter of the wake-up latencies: each is drawn uniformly in
    /// [1 - j, 1 + j] times its value, in [0, 1].
    #[schemars(range(min = 0.0, max = 1.0))]
    pub wakeup_jitter: f64,
    /// Host noise: per-CPU kernel-thread bursts and per-VM VMM I/O threads.
    pub noise: HostNoise,
    /// Tunables of `scheduler = "cfs"`.
    pub cfs: CfsConfig,
    /// Topology: sockets (each one LLC domain) × cores × SMT threads;
    /// `pcpus` must be a multiple of sockets × threads_per_core. CPU i is
    /// thread i / ncores of core i mod ncores (Linux's enumeration on x86
    /// servers: siblings are ncores apart). At most `pcpus`.
    #[schemars(range(min = 1, max = MAX_PCPUS))]
    pub sockets: u32,
    /// SMT threads per core.
    #[schemars(range(min = 1, max = limits::MAX_THREADS_PER_CORE))]
    pub threads_per_core: u32,
    /// Wake-up placement of unpinned threads.
    pub wake_placement: WakePlacement,
    /// Periodic load balancing per domain (`rebalance_domains` /
    /// `load_balance`), and newidle balancing domain by domain.
    pub load_balance: bool,
    /// sd->busy_factor: a busy CPU balances `busy_factor` times less often
    /// (kernel sd_init: 32 before v5.10, 16 since).
    #[schemars(range(min = 1, max = limits::MAX_LB_BUSY_FACTOR))]
    pub lb_busy_factor: u32,
    /// sysctl_sched_migration_cost, ns: a task that ran within this time
    /// is cache-hot and not moved by periodic balancing (`task_hot`).
    #[schemars(range(max = limits::MAX_COST_NS))]
    pub migration_cost_ns: u64,
    /// Speed of a hardware thread while an SMT sibling of its core is busy,
    /// percent of its speed alone (100: no slow-down, off).
    #[schemars(range(min = limits::MIN_SMT_SPEED_PCT, max = 100))]
    pub smt_speed_pct: u32,
    /// Where each unpinned (`affinity = "all"`) vCPU thread starts: its
    /// first enqueue keeps this CPU (fork placement, `wake_up_new_task`),
    /// it does not go through the wake-up path.
    pub start_placement: StartPlacement,
    /// Cache-refill time a vCPU owes when it runs on another core of the
    /// same LLC than last time (its private L1/L2 are cold), ns; spent at
    /// the start of its next useful work. 0: off.
    #[schemars(range(max = limits::MAX_COST_NS))]
    pub migration_cold_core_ns: u64,
    /// The same for a CPU in another LLC (socket): L1/L2 and its LLC share, ns.
    #[schemars(range(max = limits::MAX_COST_NS))]
    pub migration_cold_llc_ns: u64,
    /// `wake_wide` in `select_task_rq_fair`: a waker and wakee that both
    /// switch wakees often (`record_wakee` flips) skip `wake_affine`.
    pub wake_wide: bool,
    /// Host CPU of each vCPU thread, overriding the map `affinity` draws:
    /// vCPU thread g (counted over all VMs) on `vcpu_pcpus[g mod len]`,
    /// pinned there (`affinity = "all"`: starting there). Lets a run use
    /// some of the host's CPUs while the host's other threads (noise, the
    /// VMM threads) may run on the rest, as a real experiment pinned to a
    /// subset of the machine does. Each entry < `pcpus`, at most
    /// `MAX_VCPUS_TOTAL` entries. Empty (default): the affinity's map.
    #[schemars(schema_with = "vcpu_pcpus_schema")]
    pub vcpu_pcpus: Vec<u32>,
    /// vCPU threads arrive one by one, ns apart: the VMM creates them in
    /// turn, and the order in which they first reach their CPU's run queue
    /// (fork placement, then the move to their pinned CPU) is a seeded
    /// random one; the gaps between arrivals are exponential with mean
    /// start_gap_ns (second RNG stream); each arrives on its start CPU
    /// (a new task is placed by fork balancing, which the start map stands
    /// for, not by the wake-up path) and may preempt as any waking task.
    /// 0 (default): every vCPU is runnable at time 0, in index order, each
    /// on its start CPU.
    #[schemars(range(max = limits::MAX_COST_NS))]
    pub start_gap_ns: u64,
    /// EEVDF: a wake-up onto a busy CPU notices an expired slice of the
    /// running task, as the kernel's `enqueue_entity` → `update_curr` →
    /// `update_deadline` → `resched_curr` does (kernel/sched/fair.c), and the
    /// CPU picks again. false (default): slice expiry is noticed at ticks only.
    pub slice_check_on_wakeup: bool,
    /// EEVDF: the kernel's `RUN_TO_PARITY` slice protection and wake-up
    /// rule (kernel/sched/fair.c, v6.6 on; the feature is on by default). A
    /// task picked to run keeps its CPU while it is eligible and has not
    /// used its slice (`set_protect_slice` at the pick, `protect_slice` in
    /// `pick_eevdf`); a woken task preempts only when `pick_eevdf` would
    /// choose it (`check_preempt_wakeup_fair`), and an eligible next buddy
    /// still goes first (`PICK_BUDDY`). false (default): every pick is the
    /// earliest eligible deadline, and a woken task preempts when it is
    /// eligible with an earlier deadline than the running one.
    pub run_to_parity: bool,
    /// Host CPU time of a switch to a vCPU thread, ns: the host's
    /// `__schedule()` → `context_switch()` (registers, the address space of
    /// another VMM process) and KVM's preempt notifier `kvm_sched_in` →
    /// `kvm_arch_vcpu_load` (on VMX `vmx_vcpu_load`: VMPTRLD of the vCPU's
    /// VMCS, its host state and the user-return MSRs; kvm_sched_out's
    /// `vcpu_put` of the one switched out). Charged at each switch-in of a
    /// vCPU thread (from another task or from idle) on that CPU before the
    /// vCPU's guest code resumes, as exit time (category `exit_ns`); the
    /// switch cannot be preempted. Simplified: one figure for a switch
    /// between vCPUs of one VM and of two, and none for a switch to a
    /// non-vCPU task; the cache refill after it is
    /// `migration_cold_*_ns`'s, not this. 0 (default): switches cost
    /// nothing.
    #[schemars(range(max = limits::MAX_COST_NS))]
    pub switch_ns: u64,
    /// EEVDF's DELAY_DEQUEUE with DELAY_ZERO (152e11f6df29 "sched/fair:
    /// Implement delayed dequeue", v6.12; both on by default): a task that
    /// blocks while not eligible (negative lag) stays on its CPU's queue
    /// and burns its negative lag off as V advances; once eligible it is
    /// dequeued with its lag clipped to 0; woken before that, it is dequeued
    /// with what is left and placed as any wakee ("sched: Change
    /// ttwu_runnable() vs sched_delayed", v6.17; v6.12-v6.16 requeued it in
    /// place, which is not modelled). Simplified: it counts as dequeued the
    /// instant V passes its vruntime, and its weight is left out of V
    /// meanwhile. false (default): a blocked task keeps its lag, negative or
    /// not, until it next runs (v6.6-v6.11). Used with `scheduler="fair"`
    /// (EEVDF) only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[schemars(extend("default" = false))]
    pub delay_dequeue: bool,
}

/// The host CPU each unpinned vCPU thread starts on.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StartPlacement {
    /// vCPU g (counted over all VMs) on CPU g mod P: VM k shares its CPUs
    /// with the VMs P / vcpus apart.
    Index,
    /// Balanced slots g mod P in a seeded random order (the run's RNG, as
    /// `Affinity::Pinned` draws them): a stand-in for the map that thread
    /// creation and guest boot leave, which depends on their timing.
    Shuffled,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WakePlacement {
    /// The previous CPU if idle, else the first idle CPU after it, else the previous CPU.
    FirstIdle,
    /// `select_task_rq_fair`: `wake_affine` between the waker's and the
    /// previous CPU, then `select_idle_sibling` (the target if idle, the
    /// previous CPU if idle and in the same LLC, an idle core of the
    /// target's LLC, an idle CPU of it, else the target).
    SelectTaskRqFair,
}

/// Host noise, a process of its own (separate from `Background`): short
/// bursts of per-CPU kernel threads (kworker, ksoftirqd, rcu, migration …,
/// each bound to its CPU) and one VMM I/O thread per VM (QEMU's main loop /
/// iothread, unpinned). Arrivals are Poisson, lengths exponential.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HostNoise {
    /// Bursts per second of each CPU's kernel threads (0: off).
    #[schemars(range(min = 0.0, max = limits::MAX_NOISE_HZ))]
    pub kthread_hz: f64,
    /// Mean length of one kernel-thread burst, ns.
    #[schemars(range(min = limits::MIN_NOISE_NS, max = limits::MAX_COST_NS))]
    pub kthread_ns: u64,
    /// Bursts per second of each VM's VMM I/O thread (0: off).
    #[schemars(range(min = 0.0, max = limits::MAX_NOISE_HZ))]
    pub vmm_io_hz: f64,
    /// Mean length of one VMM I/O burst, ns.
    #[schemars(range(min = limits::MIN_NOISE_NS, max = limits::MAX_COST_NS))]
    pub vmm_io_ns: u64,
    /// Independent kernel-thread tasks per CPU sharing `kthread_hz` (each
    /// `kthread_hz / kthreads_per_cpu` arrivals per second, its own Poisson
    /// process and lag). 1 (the default): one task per CPU whose arrivals
    /// join the work it already has. Many short tasks that each ran little
    /// keep their lag and preempt at each wake-up; one task carrying all of
    /// them does not. Source: a measurement here, the number of short tasks
    /// `/proc/<pid>/task/<tid>/schedstat` counts over a run (docs/twins.md).
    #[serde(skip_serializing_if = "is_one_u32")]
    #[schemars(range(min = 1, max = limits::MAX_KTHREADS_PER_CPU), extend("default" = 1))]
    pub kthreads_per_cpu: u32,
}

fn is_one_u32(x: &u32) -> bool {
    *x == 1
}

fn is_zero_u32(x: &u32) -> bool {
    *x == 0
}

fn is_true(x: &bool) -> bool {
    *x
}

/// `vcpulab.sched`'s default slice (`slice_us=4000`), ns.
fn default_token_slice_ns() -> u64 {
    4_000_000
}

fn is_default_token_slice_ns(x: &u64) -> bool {
    *x == default_token_slice_ns()
}

impl Default for HostNoise {
    fn default() -> Self {
        HostNoise { kthread_hz: 0.0, kthread_ns: 20_000, vmm_io_hz: 0.0, vmm_io_ns: 20_000, kthreads_per_cpu: 1 }
    }
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TunableScaling {
    /// factor 1 (SCHED_TUNABLESCALING_NONE).
    None,
    /// factor 1 + ilog2(min(ncpus, 8)) (SCHED_TUNABLESCALING_LOG, the default).
    Log,
    /// factor min(ncpus, 8) (SCHED_TUNABLESCALING_LINEAR).
    Linear,
}

/// CFS tunables (kernel/sched/fair.c before v6.6). The three times are the
/// unscaled sysctl values; each is multiplied by the `tunable_scaling`
/// factor of the host's CPU count (`update_sysctl` / `get_update_sysctl_factor`).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct CfsConfig {
    /// sysctl_sched_latency before scaling, ns (kernel: 6 ms).
    #[schemars(range(min = limits::MIN_PERIOD_NS, max = limits::MAX_COST_NS))]
    pub latency_ns: u64,
    /// sysctl_sched_min_granularity before scaling, ns (kernel: 0.75 ms).
    #[schemars(range(min = limits::MIN_PERIOD_NS, max = limits::MAX_COST_NS))]
    pub min_granularity_ns: u64,
    /// sysctl_sched_wakeup_granularity before scaling, ns (kernel: 1 ms).
    #[schemars(range(min = limits::MIN_PERIOD_NS, max = limits::MAX_COST_NS))]
    pub wakeup_granularity_ns: u64,
    /// How the three times scale with the CPU count.
    pub tunable_scaling: TunableScaling,
    /// GENTLE_FAIR_SLEEPERS: the sleeper credit of place_entity is half of
    /// sched_latency (kernel default true) instead of all of it.
    pub gentle_fair_sleepers: bool,
    /// LAST_BUDDY: a task preempted by a wake-up becomes the last buddy when
    /// nr_running >= sched_nr_latency (kernel default true).
    pub last_buddy: bool,
}

impl Default for CfsConfig {
    fn default() -> Self {
        CfsConfig {
            latency_ns: 6_000_000,
            min_granularity_ns: 750_000,
            wakeup_granularity_ns: 1_000_000,
            tunable_scaling: TunableScaling::Log,
            gentle_fair_sleepers: true,
            last_buddy: true,
        }
    }
}

impl CfsConfig {
    /// `get_update_sysctl_factor()` for `ncpus` online CPUs.
    pub fn factor(&self, ncpus: u32) -> u64 {
        let cpus = ncpus.clamp(1, 8) as u64;
        match self.tunable_scaling {
            TunableScaling::None => 1,
            TunableScaling::Linear => cpus,
            TunableScaling::Log => 1 + cpus.ilog2() as u64,
        }
    }
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
            yield_scope: YieldScope::RunQueue,
            affinity: Affinity::Pinned,
            gang_slice_ns: 4_000_000,
            token_slice_ns: default_token_slice_ns(),
            tsc_khz: 2_100_000,
            rq_lock_ns: 300,
            yield_check_ns: 50,
            yield_to_esrch: true,
            background: Background::default(),
            tick_skew: false,
            seeded_ties: false,
            wakeup_ipi_ns: 0,
            idle_states: Vec::new(),
            wakeup_jitter: 0.0,
            noise: HostNoise::default(),
            cfs: CfsConfig::default(),
            sockets: 1,
            threads_per_core: 1,
            wake_placement: WakePlacement::FirstIdle,
            load_balance: false,
            lb_busy_factor: 16,
            migration_cost_ns: 500_000,
            smt_speed_pct: 100,
            start_placement: StartPlacement::Index,
            migration_cold_core_ns: 0,
            migration_cold_llc_ns: 0,
            wake_wide: false,
            vcpu_pcpus: Vec::new(),
            start_gap_ns: 0,
            slice_check_on_wakeup: false,
            run_to_parity: false,
            switch_ns: 0,
            delay_dequeue: false,
        }
    }
}

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
pub use super::halt_poll::{HaltPollConfig, Policy as HaltPollPolicy};

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Dist {
    Fixed,
    /// Exponential with the given mean.
    Exp,
    /// Uniform on [mean/2, 3*mean/2].
    Uniform,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    User,
    Kernel,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
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
    /// A reader of a reader-writer semaphore (`down_read`, kernel/locking/rwsem.c).
    RwsemRead,
    /// A writer of a reader-writer semaphore (`down_write`).
    RwsemWrite,
}

impl LockKind {
    /// Either side of a reader-writer semaphore.
    pub fn is_rwsem(self) -> bool {
        matches!(self, LockKind::RwsemRead | LockKind::RwsemWrite)
    }
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Phase {
    /// Useful work.
    Compute {
        /// Mean duration, ns.
        #[schemars(range(max = limits::MAX_PHASE_NS))]
        ns: u64,
        /// Distribution of the duration.
        #[serde(default = "dist_fixed")]
        dist: Dist,
        /// CPL of the work (recorded as preempted in kernel mode).
        #[serde(default = "mode_user")]
        mode: Mode,
        /// Probability that the phase runs in an iteration.
        #[serde(default = "one")]
        #[schemars(range(min = 0.0, max = 1.0))]
        prob: f64,
    },
    /// Acquire guest lock `lock`, hold it `hold_ns` in kernel mode, release it.
    Lock {
        /// Lock id within the VM.
        #[serde(default)]
        #[schemars(range(max = limits::MAX_LOCK_ID))]
        lock: u32,
        /// The lock's kind (all phases using one lock agree).
        #[serde(default = "lock_ticket")]
        lock_kind: LockKind,
        /// Mean hold time, ns.
        #[serde(default = "ns_1000")]
        #[schemars(range(max = limits::MAX_COST_NS))]
        hold_ns: u64,
        /// Distribution of the hold time.
        #[serde(default = "dist_fixed")]
        dist: Dist,
        /// Probability that the phase runs in an iteration.
        #[serde(default = "one")]
        #[schemars(range(min = 0.0, max = 1.0))]
        prob: f64,
    },
    /// A call-function IPI to other vCPUs; the sender spins until each ran the handler.
    Ipi {
        /// Number of other vCPUs targeted; 0 = all others (smp_call_function). Less than `vcpus`.
        #[serde(default)]
        #[schemars(range(max = limits::MAX_IPI_TARGETS))]
        targets: u32,
        /// Length of the IPI handler, ns (the VM's first Ipi phase sets it for all).
        #[serde(default = "ns_1000")]
        #[schemars(range(max = limits::MAX_COST_NS))]
        handler_ns: u64,
        /// Probability that the phase runs in an iteration.
        #[serde(default = "one")]
        #[schemars(range(min = 0.0, max = 1.0))]
        prob: f64,
        /// A TLB shootdown (flush_tlb_mm_range → flush_tlb_multi): with PV TLB
        /// flush, preempted targets are skipped and flush at sched-in.
        #[serde(default)]
        tlb_flush: bool,
    },
    /// Block until every unfinished thread of the VM arrives.
    Barrier {
        /// Always 1 (a skipped barrier deadlocks).
        #[serde(default = "one")]
        #[schemars(range(min = 1.0, max = 1.0))]
        prob: f64,
    },
    /// Block until a timer.
    Sleep {
        /// Mean sleep, ns.
        #[serde(default = "ns_100000")]
        #[schemars(range(max = limits::MAX_PHASE_NS))]
        ns: u64,
        /// Distribution of the sleep.
        #[serde(default = "dist_fixed")]
        dist: Dist,
        /// Probability that the phase runs in an iteration.
        #[serde(default = "one")]
        #[schemars(range(min = 0.0, max = 1.0))]
        prob: f64,
        /// Wake at the next multiple of `ns` since the run's start (a periodic
        /// timer: a late wake-up does not shift the later ones).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        #[schemars(extend("default" = false))]
        periodic: bool,
    },
    /// Post a message to thread (i + `to`) mod threads.
    Send {
        /// Distance to the receiving thread, in [1, threads).
        #[serde(default = "one_u32")]
        #[schemars(range(min = 1, max = limits::MAX_IPI_TARGETS))]
        to: u32,
        /// Probability that the phase runs in an iteration.
        #[serde(default = "one")]
        #[schemars(range(min = 0.0, max = 1.0))]
        prob: f64,
    },
    /// Block until a message is available.
    Recv {
        /// Probability that the phase runs in an iteration.
        #[serde(default = "one")]
        #[schemars(range(min = 0.0, max = 1.0))]
        prob: f64,
    },
    /// Take the next task of the VM's task queue (the phases after it are
    /// the task; put the queue's lock before it). When the frame's tasks are
    /// all taken, the thread waits until every unfinished thread has found
    /// the queue empty (the frame's end); then the queue refills with `tasks`
    /// tasks, and after `frames` frames every thread ends. Threads that
    /// finish their tasks early take more: dynamic load balancing, as the
    /// task queues of SPLASH-2's volrend and raytrace. At most one per
    /// workload, with no barrier, no `thread0_phases` and `iterations` 0.
    TaskQueue {
        /// Tasks per frame, all threads together.
        #[schemars(range(min = 1, max = limits::MAX_TASKS))]
        tasks: u32,
        /// Frames; 0 = until the end of the run.
        #[serde(default)]
        frames: u32,
        /// Always 1 (a skipped take would lose the frame's end).
        #[serde(default = "one")]
        #[schemars(range(min = 1.0, max = 1.0))]
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
fn one_u32() -> u32 {
    1
}
fn lock_ticket() -> LockKind {
    LockKind::Ticket
}
fn ns_1000() -> u64 {
    1_000
}
fn ns_100000() -> u64 {
    100_000
}

/// `HostConfig.idle_states`: (exit_latency_ns, target_residency_ns) pairs, each <= 1 s.
fn idle_states_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let t =
        schemars::json_schema!({"type": "integer", "format": "uint64", "minimum": 0, "maximum": limits::MAX_COST_NS});
    schemars::json_schema!({
        "type": "array",
        "items": {"type": "array", "prefixItems": [t, t], "minItems": 2, "maxItems": 2},
    })
}

fn vcpu_pcpus_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": {"type": "integer", "format": "uint32", "minimum": 0, "maximum": MAX_PCPUS - 1},
        "maxItems": MAX_VCPUS_TOTAL,
    })
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
            | Phase::Recv { prob }
            | Phase::TaskQueue { prob, .. } => *prob,
        }
    }
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct WorkloadConfig {
    /// A label for tables.
    pub name: String,
    /// One iteration of each guest thread, executed in order.
    #[schemars(length(min = 1, max = MAX_PHASES))]
    pub phases: Vec<Phase>,
    /// Iterations per thread; 0 = loop until the end of the run.
    pub iterations: u64,
    /// Guest round-robin slice between threads sharing a vCPU, ns.
    #[schemars(range(min = limits::MIN_PERIOD_NS))]
    pub guest_slice_ns: u64,
    /// Cycles per iteration of a spin loop (used for SPIN_THRESHOLD).
    #[schemars(range(min = 1, max = limits::MAX_SPIN_ITER_CYCLES))]
    pub spin_iter_cycles: u64,
    /// SPIN_THRESHOLD of the PV queued lock, iterations.
    #[schemars(range(min = 1, max = limits::MAX_SPIN_THRESHOLD))]
    pub spin_threshold: u64,
    /// Thread 0 of each VM runs these phases instead of `phases` (empty, the
    /// default: every thread runs `phases`). An initiator beside responders,
    /// e.g. a ping-pong: thread 0 `[Compute, Send{to: 1}, Recv]`, the others
    /// `[Recv, Compute, Send{to: 1}]`. Only compute, sleep, barrier, send and
    /// receive phases (locks and IPIs are set up from `phases`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_PHASES), extend("default" = []))]
    pub thread0_phases: Vec<Phase>,
}

impl WorkloadConfig {
    /// The phases guest thread `idx` of its VM runs.
    #[inline]
    pub fn phases_for(&self, idx: u32) -> &[Phase] {
        if idx == 0 && !self.thread0_phases.is_empty() {
            &self.thread0_phases
        } else {
            &self.phases
        }
    }
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
            thread0_phases: Vec::new(),
        }
    }
}

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

/// Hard limits, so a typo cannot ask for a billion vCPUs.
pub const MAX_PCPUS: u32 = 4096;
pub const MAX_VCPUS_TOTAL: u64 = 65_536;
pub const MAX_PHASES: usize = 256;

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

/// The limits of the configuration's fields: the one place from which both
/// [`SimConfig::validate`] and the JSON Schema ([`json_schema`], the
/// `#[schemars(range(..))]` attributes) take them. Python's dataclasses read
/// them from the schema (`vcpulab.sim.config_schema()`).
pub mod limits {
    /// Upper bound of a cost or latency, ns (1 s).
    pub const MAX_COST_NS: u64 = 1_000_000_000;
    /// Upper bound of a phase's compute or sleep time, ns (1000 s).
    pub const MAX_PHASE_NS: u64 = 1_000_000_000_000;
    /// Upper bound of `duration_ns` (2^50 ns, about 13 days).
    pub const MAX_DURATION_NS: u64 = 1 << 50;
    /// Lower bound of a period or slice (tick, slices, bursts), ns.
    pub const MIN_PERIOD_NS: u64 = 1_000;
    /// Lower bound of `tsc_khz` (1 MHz).
    pub const MIN_TSC_KHZ: u64 = 1_000;
    /// Scheduler weights: the kernel's nice-to-weight table (nice 19 .. -20 is 15 .. 88761;
    /// 2 is the smallest weight the simulator's arithmetic takes).
    pub const MIN_WEIGHT: u64 = 2;
    pub const MAX_WEIGHT: u64 = 88_761;
    /// A kernel `unsigned int` module parameter (`ple_window*`, `halt_poll_ns*`).
    pub const UINT_MAX: u64 = u32::MAX as u64;
    pub const MAX_THREADS_PER_CORE: u32 = 8;
    pub const MAX_LB_BUSY_FACTOR: u32 = 1024;
    pub const MIN_SMT_SPEED_PCT: u32 = 10;
    /// Shortest guest tick period, ns (CONFIG_HZ=10000 would be 100 µs; real guests use 100-1000 Hz).
    pub const MIN_GUEST_TICK_NS: u64 = 100_000;
    /// Host noise: bursts per second, and the shortest mean burst, ns.
    pub const MAX_NOISE_HZ: f64 = 100_000.0;
    pub const MIN_NOISE_NS: u64 = 100;
    /// Host noise may take at most half a CPU (`hz * ns <= 0.5e9`).
    pub const MAX_NOISE_SHARE_NS_PER_S: f64 = 0.5e9;
    pub const MAX_CANDIDATE_NS: u64 = 1_000_000;
    pub const MAX_LOCK_ID: u32 = 1023;
    /// `Ipi.targets` and `Send.to` (also bounded by the VM's vCPUs / threads).
    pub const MAX_IPI_TARGETS: u32 = 65_535;
    /// Guest threads per vCPU.
    pub const MAX_THREADS_PER_VCPU: u64 = 16;
    pub const MAX_SPIN_ITER_CYCLES: u64 = 1_000_000;
    pub const MAX_SPIN_THRESHOLD: u64 = 1_000_000_000;
    /// `HostNoise.kthreads_per_cpu`.
    pub const MAX_KTHREADS_PER_CPU: u32 = 64;
    /// `TaskQueue.tasks`, per frame.
    pub const MAX_TASKS: u32 = 1_000_000;
}

/// The JSON Schema (draft 2020-12) of [`SimConfig`], generated from the serde
/// structs: field names, types, defaults, limits ([`limits`]) and the doc
/// comments as descriptions. Rules across fields (`warmup_ns < duration_ns`,
/// `pcpus` a multiple of sockets × threads, …) are in [`SimConfig::validate`]
/// and the descriptions only. Serde aliases of enum values (`"eevdf"`, the
/// old halt-poll policy names) are added as documented (deprecated) values.
pub fn json_schema() -> serde_json::Value {
    let mut v = serde_json::to_value(schemars::schema_for!(SimConfig)).expect("schema serialises");
    type_ranges(&mut v);
    v["x-cross-field-rules"] =
        CROSS_FIELD_RULES.iter().map(|(fields, rule)| serde_json::json!({"fields": fields, "rule": rule})).collect();
    // serde aliases are not seen by schemars: list them so that what the parser accepts validates
    for (def, alias, of, deprecated) in ENUM_ALIASES {
        let d = &mut v["$defs"][*def];
        if let Some(names) = d.get("enum").and_then(|e| e.as_array()).cloned() {
            // an enum without doc comments: the same as one of consts
            d["oneOf"] = names.iter().map(|n| serde_json::json!({"type": "string", "const": n})).collect();
            d.as_object_mut().expect("a definition").retain(|k, _| k != "enum" && k != "type");
        }
        if let Some(one_of) = d["oneOf"].as_array_mut() {
            one_of.push(serde_json::json!({
                "type": "string",
                "const": alias,
                "description": format!("alias of \"{of}\""),
                "deprecated": deprecated,
            }));
        }
    }
    v
}

/// The rules across fields that [`SimConfig::validate`] enforces and a JSON
/// Schema cannot state (each field's own range can): which fields, and the
/// rule. The schema lists them as `x-cross-field-rules`; a value inside every
/// stated range is refused only by one of these (tests/test_config_schema.py
/// probes every boundary).
pub const CROSS_FIELD_RULES: &[(&[&str], &str)] = &[
    (&["warmup_ns", "duration_ns"], "warmup_ns < duration_ns"),
    (&["trace_from_ns", "duration_ns"], "trace_from_ns < duration_ns"),
    (&["trace_until_ns", "trace_from_ns"], "trace_until_ns is 0 (the run's end) or > trace_from_ns"),
    (&["host.idle_states"], "each idle state at least as deep (exit and residency) as the one before"),
    (&["host.noise.kthread_hz", "host.noise.kthread_ns"], "kthread_hz * kthread_ns <= 0.5e9 (half a CPU)"),
    (&["host.noise.vmm_io_hz", "host.noise.vmm_io_ns"], "vmm_io_hz * vmm_io_ns <= 0.5e9 (half a CPU)"),
    (&["host.cfs.min_granularity_ns", "host.cfs.latency_ns"], "min_granularity_ns <= latency_ns"),
    (&["host.sockets", "host.pcpus"], "sockets <= pcpus"),
    (&["host.pcpus", "host.sockets", "host.threads_per_core"], "pcpus is a multiple of sockets * threads_per_core"),
    (&["vms.count", "vms.vcpus"], "the sum over VMs of count * vcpus <= 65536"),
    (&["host.vcpu_pcpus"], "at most 65536 entries, each a host CPU below pcpus"),
    (&["vms.threads", "vms.vcpus"], "threads <= 16 * vcpus"),
    (&["vms.guest.threads_per_core", "vms.vcpus"], "vcpus is a multiple of guest.threads_per_core"),
    (
        &["vms.guest.llc_vcpus", "vms.guest.threads_per_core", "vms.vcpus"],
        "guest.llc_vcpus is 0 (the whole VM) or a multiple of guest.threads_per_core that divides vcpus",
    ),
    (&["vms.ple.max", "vms.ple.window"], "ple.max >= ple.window"),
    (&["vms.workload.phases.ns", "vms.workload.phases.dist"], "a periodic sleep has ns > 0 and a fixed length"),
    (&["vms.workload.phases.kind"], "every phase on one lock uses one kind (rwsem reads and writes mix)"),
    (&["vms.workload.phases.targets", "vms.vcpus"], "an IPI's targets < vcpus"),
    (&["vms.workload.phases.to", "vms.threads"], "a send's target thread < threads"),
];

/// Every integer's type range as `maximum` where no tighter one is stated:
/// schemars gives `"format": "uint32"` and a minimum of 0 but no maximum, so
/// the schema accepted 2^32 where the parser refuses it.
fn type_ranges(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            let max = match m.get("format").and_then(|f| f.as_str()) {
                Some("uint8") => Some(serde_json::json!(u8::MAX)),
                Some("uint16") => Some(serde_json::json!(u16::MAX)),
                Some("uint32") => Some(serde_json::json!(u32::MAX)),
                Some("uint64") | Some("uint") => Some(serde_json::json!(u64::MAX)),
                _ => None,
            };
            if let Some(max) = max {
                if !m.contains_key("maximum") && !m.contains_key("exclusiveMaximum") {
                    m.insert("maximum".into(), max);
                }
            }
            m.values_mut().for_each(type_ranges);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(type_ranges),
        _ => {}
    }
}

/// (schema definition, alias, canonical name, deprecated): the serde aliases of enum values.
const ENUM_ALIASES: &[(&str, &str, &str, bool)] = &[
    ("Scheduler", "eevdf", "fair", false),
    ("HaltPollPolicy", "dynamic", "block-time", true),
    ("HaltPollPolicy", "dynamic_v4", "dynamic-v4", true),
    ("HaltPollPolicy", "v4", "dynamic-v4", true),
];

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

#[cfg(test)]
mod schema_tests {
    use super::*;

    fn get<'a>(v: &'a serde_json::Value, path: &[&str]) -> &'a serde_json::Value {
        path.iter().fold(v, |v, k| &v[*k])
    }

    #[test]
    fn schema_states_the_validators_limits_and_every_field_has_a_description() {
        let s = json_schema();
        let pcpus = get(&s, &["$defs", "HostConfig", "properties", "pcpus"]);
        assert_eq!(pcpus["minimum"], 1);
        assert_eq!(pcpus["maximum"], MAX_PCPUS);
        assert_eq!(pcpus["default"], 4);
        let rq = get(&s, &["$defs", "HostConfig", "properties", "rq_lock_ns"]);
        assert_eq!(rq["maximum"], limits::MAX_COST_NS);
        let hp = get(&s, &["$defs", "HaltPollConfig", "properties"]);
        assert!(hp.get("max_ns").is_some() && hp.get("grow_start_ns").is_some(), "{hp}");
        // the validator refuses one above the schema's maximum and accepts the maximum
        let mut c = SimConfig::default();
        c.host.rq_lock_ns = limits::MAX_COST_NS;
        c.validate().unwrap();
        c.host.rq_lock_ns += 1;
        assert!(c.validate().unwrap_err().starts_with("host.rq_lock_ns"));
        let mut c = SimConfig::default();
        c.vms[0].workload.spin_iter_cycles = limits::MAX_SPIN_ITER_CYCLES + 1;
        assert!(c.validate().unwrap_err().starts_with("vms[0].workload.spin_iter_cycles"));
        // every property of every struct has a description (the doc comment)
        fn walk(v: &serde_json::Value, path: &str, missing: &mut Vec<String>) {
            if let Some(props) = v.get("properties").and_then(|p| p.as_object()) {
                for (k, p) in props {
                    if k != "kind" && p.get("description").is_none() {
                        missing.push(format!("{path}.{k}"));
                    }
                }
            }
            if let Some(o) = v.as_object() {
                for (k, x) in o {
                    if k != "properties" {
                        walk(x, &format!("{path}/{k}"), missing);
                    }
                }
            } else if let Some(a) = v.as_array() {
                for (i, x) in a.iter().enumerate() {
                    walk(x, &format!("{path}/{i}"), missing);
                }
            }
        }
        let mut missing = Vec::new();
        walk(&s, "", &mut missing);
        assert!(missing.is_empty(), "fields without a doc comment: {missing:?}");
        // serde's enum aliases are listed
        let sched = get(&s, &["$defs", "Scheduler", "oneOf"]).to_string();
        assert!(sched.contains("\"eevdf\""), "{sched}");
    }
}

//! The host: its CPUs and topology, its scheduler (EEVDF, CFS, gang, vcpulab's
//! token scheduler) and their knobs, background load and noise.

use super::*;

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
    /// slices of `sched.directed_yield`; src/kvm/sched/) over the EEVDF
    /// host: each host CPU has one run token; a vCPU thread runs only while it
    /// holds one; tokens go to one FIFO queue of runnable vCPUs, a slice of
    /// `token_slice_ns` of wall time each; a halt hands the token on at once; a
    /// woken vCPU waits at the queue's tail; `yield_to` gives the yielder's
    /// token to a waiting candidate with a fresh slice and puts the yielder at
    /// the tail. The kernel still shares each CPU between its token holder and
    /// other tasks (background, noise) by EEVDF.
    RoundRobin,
    /// vcpulab's scheduler with `sched.relaxed_co` (VMware ESX's relaxed
    /// co-scheduling; "The CPU Scheduler in VMware vSphere 5.1", VMware, 2013):
    /// the round-robin tokens, but a vCPU whose token-holding time is more
    /// than `token_skew_ns` ahead of its slowest runnable sibling is
    /// co-stopped (passed over by every grant) until that sibling catches up.
    RelaxedCo,
    /// vcpulab's scheduler with `sched.balance` (balance scheduling, Sukwong
    /// and Kim, "Is co-scheduling too expensive for SMP VMs?", EuroSys 2011):
    /// the i-th vCPU of VM v has home CPU (i + v) mod P, so no two siblings
    /// share one; each CPU's token goes round robin among the vCPUs at home
    /// there.
    Balance,
    /// vcpulab's scheduler with `sched.pinned`: one queue per CPU of the vCPU
    /// threads pinned there (`affinity` other than "all"; `vcpu_pcpus` names
    /// the CPUs), each CPU's token round robin among them, as the host
    /// kernel's per-CPU run queues with pinned vCPU threads and no load
    /// balancing.
    Pinned,
}

impl Scheduler {
    /// One of vcpulab's own (token) schedulers.
    pub fn is_tokens(self) -> bool {
        matches!(self, Scheduler::RoundRobin | Scheduler::RelaxedCo | Scheduler::Balance | Scheduler::Pinned)
    }
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
pub enum PlaceLag {
    /// The saved lag as it is, on an empty queue too.
    Saved,
    /// `place_entity` (v6.6+): the lag scaled by (W + w) / W where other
    /// entities count in V, dropped where none does.
    Kernel,
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

/// The distribution of a wake-up latency around its value (`HostConfig::wakeup_dist`).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum WakeupDist {
    /// Uniform in [1 - j, 1 + j] x the value (`wakeup_jitter` = j).
    #[default]
    Uniform,
    /// Log-normal with the value as its median and `wakeup_jitter` as the
    /// standard deviation of its logarithm: a right tail, as measured wake-up
    /// paths have (a few wake-ups wait for the CPU, an interrupt or a deeper
    /// idle exit), capped at 50x the value.
    Lognormal,
}

/// The order of the vCPU threads' arrivals (`HostConfig::start_order`).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum StartOrder {
    /// A seeded random order.
    #[default]
    Shuffled,
    /// Creation (index) order, each arrival jittered by its own delay.
    Created,
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
    /// Fraction of its CPU each background task wants, in [0, 1).
    /// Default 0.0 (idle host). Source: assumption.
    #[schemars(range(min = 0.0), extend("exclusiveMaximum" = 1.0))]
    pub utilization: f64,
    /// Mean length of one burst, ns (exponential). Default 200000.
    /// Source: assumption.
    #[schemars(range(min = limits::MIN_PERIOD_NS))]
    pub burst_ns: u64,
    /// Scheduler weight of each background task, in [2, 88761]
    /// (the kernel's nice-to-weight table: 1024 = nice 0, 88761 = nice
    /// -20, 15 = nice 19). Default 1024.
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
    /// The number of simulated host CPUs. Default 4. (Named `pcpus` before
    /// 0.3.7, which the real API uses for a list of host CPU ids; the old
    /// key is still read, with a deprecation.)
    #[schemars(range(min = 1, max = MAX_PCPUS))]
    #[serde(alias = "pcpus")]
    pub n_pcpus: u32,
    /// `"fair"` (EEVDF-like, v6.6+, one run queue per CPU;
    /// `"eevdf"` is the same scheduler), `"cfs"` (the fair class
    /// before v6.6: vruntime / min_vruntime, sched_latency slices,
    /// check_preempt_tick, wakeup_preempt_entity, next / last / skip
    /// buddies, place_entity; tunables in `cfs`), `"gang"` (all
    /// vCPUs of a VM run together in slices of `gang_slice_ns`;
    /// [S4]) or `"round_robin"` (vcpulab's own vCPU scheduler,
    /// [`vcpulab.sched`][]: one run token per CPU, handed round a FIFO
    /// queue of runnable vCPUs in wall-time slices of
    /// `token_slice_ns`; a halt hands it on; `yield_to` hands the
    /// yielder's token to a waiting candidate; the kernel's EEVDF still
    /// shares each CPU between the token's holder and other tasks: the
    /// twin of a run under `sched.round_robin` or
    /// `sched.directed_yield`), `"relaxed_co"` (the same tokens, but a
    /// vCPU whose token-holding time leads its slowest runnable sibling
    /// by more than `token_skew_ns` is passed over at every grant and
    /// handed on at its slice's end: the twin of `sched.relaxed_co`,
    /// after VMware ESX's relaxed co-scheduling, "The CPU Scheduler in
    /// VMware vSphere 5.1", 2013) or `"balance"` (one queue per CPU;
    /// the i-th vCPU of VM v waits only for CPU (i + v) mod P's token, so
    /// siblings never share a CPU: the twin of `sched.balance`, after
    /// Sukwong and Kim, "Is co-scheduling too expensive for SMP VMs?",
    /// EuroSys 2011) or `"pinned"` (one queue per CPU of the vCPU
    /// threads pinned there, so `affinity` must not be `"all"`; the
    /// twin of `sched.pinned`, the host kernel's per-CPU run queues
    /// without load balancing). Default `"fair"`.
    pub scheduler: Scheduler,
    /// Scheduler tick period, ns. Default 4000000 (HZ=250, the
    /// kernel's Kconfig default). Slice expiry is noticed at ticks.
    #[schemars(range(min = limits::MIN_PERIOD_NS))]
    pub tick_ns: u64,
    /// EEVDF base slice, ns. Default 3000000 (kernel:
    /// sysctl_sched_base_slice 0.75 ms × (1 + ilog2(min(ncpus, 8))) = 3 ms).
    #[schemars(range(min = limits::MIN_PERIOD_NS))]
    pub base_slice_ns: u64,
    /// A woken, eligible task with an earlier deadline
    /// preempts curr. Default True (kernel). Simplified: no RUN_TO_PARITY.
    pub wakeup_preemption: bool,
    /// Effect of yield_to's next-buddy hint: `"always"` (CFS
    /// before v6.6), `"eligible"` (sched_feat(PICK_BUDDY), on since
    /// 2a77e4be12cb, v6.14; default) or `"never"` (v6.6-v6.13: ->next
    /// picked only under NEXT_BUDDY, off by default). Spec §1.5.
    pub next_buddy: NextBuddy,
    /// `"vruntime"` (79104becf42b "sched/fair: Forfeit
    /// vruntime on yield", v6.19, stable 6.12.63 / 6.18.2: an eligible
    /// yielder's vruntime jumps to its deadline, deadline += slice;
    /// default) or `"deadline"` (147f3efaa241, v6.6-v6.18: deadline +=
    /// slice). Spec §1.5.
    pub yield_penalty: YieldPenalty,
    /// Where the EEVDF yield penalty acts. `"run_queue"`
    /// (default): all threads share the CPU's one fair queue, so the
    /// penalty reorders the yielder against every task of its CPU.
    /// `"vm_group"`: each VM's threads are in their own task group
    /// (libvirt's per-VM machine.slice scope; autogroup per session);
    /// yield_task_fair acts on task_cfs_rq(curr) and returns when the
    /// CPU runs one task, while set_next_buddy walks the whole
    /// hierarchy. Simplified on the flat queue: the penalty applies when
    /// every other runnable task of the CPU is a vCPU of the yielder's
    /// VM, and not at all otherwise.
    #[schemars(extend("x-omit-default" = true))]
    pub yield_scope: YieldScope,
    /// VCPU threads `"pinned"` one per CPU slot in a seeded,
    /// balanced random order (default), `"round_robin"` (vCPU g on CPU
    /// g mod P), or `"all"` (unpinned: placed at wake-up on the previous
    /// CPU if idle, else the first idle one; pulled by a CPU about to go
    /// idle). No periodic load balancing.
    pub affinity: Affinity,
    /// Gang-scheduling slice, ns. Default 4000000 ([S4]:
    /// "clean 4 ms slices").
    #[schemars(range(min = limits::MIN_PERIOD_NS))]
    pub gang_slice_ns: u64,
    /// A run token's slice under vcpulab's schedulers
    /// (`"round_robin"`, `"relaxed_co"`, `"balance"`, `"pinned"`), wall time,
    /// ns. Default 4000000 (`vcpulab.sched`'s default
    /// `slice_us=4000`).
    #[serde(skip_serializing_if = "is_default_token_slice_ns")]
    #[schemars(range(min = limits::MIN_PERIOD_NS), extend("default" = 4_000_000))]
    #[schemars(extend("x-omit-default" = true))]
    pub token_slice_ns: u64,
    /// Under `scheduler="relaxed_co"`, the token-holding
    /// time by which a vCPU may lead its slowest runnable sibling before
    /// it is co-stopped, ns. Default 3000000 (`sched.relaxed_co`'s
    /// default `skew_us=3000`).
    #[serde(skip_serializing_if = "is_default_token_skew_ns")]
    #[schemars(range(max = limits::MAX_TOKEN_SKEW_NS), extend("default" = 3_000_000))]
    #[schemars(extend("x-omit-default" = true))]
    pub token_skew_ns: u64,
    /// Under vcpulab's schedulers, a vCPU woken from a halt first runs
    /// without a token, on the CPU whose token it last held: its pending
    /// interrupt handlers, then an exit of this many ns (the guest
    /// programs' wake bracket, a port write to vcpulab's scheduler), at
    /// whose end it asks for a token, as src/kvm/sched/'s `wake` is called
    /// (the real vCPU runs its interrupt handler and the bracket inside
    /// `KVM_RUN` before it exits to ask). Meanwhile it shares that CPU with
    /// the token's holder under the kernel's scheduler. 0: it asks at once,
    /// as it wakes (and the bracket's instructions run with the token).
    /// Default 0.
    #[serde(skip_serializing_if = "is_zero_u64")]
    #[schemars(range(max = limits::MAX_COST_NS), extend("default" = 0))]
    #[schemars(extend("x-omit-default" = true))]
    pub token_wake_exit_ns: u64,
    /// Under vcpulab's schedulers, the guest programs' halt bracket: a
    /// vCPU about to halt gives its token up first (a port write to
    /// vcpulab's scheduler, whose exit the workload's own phase carries),
    /// as src/kvm/sched/'s halt does, so KVM polls its halt without one:
    /// the token goes on at once, and the poll loop stops as soon as the
    /// token's next holder is put on the CPU (`single_task_running()`). A
    /// poll that catches the wake-up asks for a token as a vCPU woken from
    /// a blocked halt does (`token_wake_exit_ns`; at once where that is 0).
    /// Default False: the vCPU keeps its token while KVM polls its halt
    /// and gives it up when it blocks.
    #[schemars(extend("x-omit-default" = true))]
    pub token_halt_bracket: bool,
    /// Under vcpulab's schedulers, how long after its slice's set end a
    /// token's slice ends, ns: the real slice ends when the holder's thread,
    /// kicked out of `KVM_RUN` at the deadline, is back in vcpulab's
    /// scheduler (measured on this project's host: 4,023-4,064 µs holds of
    /// a 4-ms slice, `twins.calibrate`'s `token_slice_exit_ns`). Every slice
    /// then lasts `token_slice_ns` plus a draw of it, so the CPUs' slices,
    /// which start together, drift apart as the real ones do. Simplified:
    /// the holder's guest runs until the slice's end. Default 0.
    #[serde(skip_serializing_if = "is_zero_u64")]
    #[schemars(range(max = limits::MAX_COST_NS), extend("default" = 0))]
    #[schemars(extend("x-omit-default" = true))]
    pub token_slice_exit_ns: u64,
    /// The spread of `token_slice_exit_ns`: each slice's is a log-normal
    /// draw with it as the median and this as the standard deviation of its
    /// logarithm (capped at 50x). Default 0.0 (every slice ends
    /// `token_slice_exit_ns` late).
    #[serde(skip_serializing_if = "is_zero_f64")]
    #[schemars(range(min = 0.0, max = 1.0), extend("default" = 0.0))]
    #[schemars(extend("x-omit-default" = true))]
    pub token_slice_exit_jitter: f64,
    /// Each CPU's own lateness: a CPU's `token_slice_exit_ns` is scaled for
    /// the whole run by a log-normal factor with this standard deviation of
    /// its logarithm, drawn once per CPU at the start (second RNG stream).
    /// The real CPUs' slices end late by different means within one run
    /// (measured here, 3 vCPUs on 2 CPUs, three 1-s runs: per-CPU means
    /// 41 / 35, 41 / 52 and 63 / 47 µs), so their slice ends drift apart by
    /// 1.5-4 ms in a second, where draws around one median drift them by
    /// ~0.1 ms (docs/twins.md item 15). Default 0.0 (one median for every
    /// CPU).
    #[serde(skip_serializing_if = "is_zero_f64")]
    #[schemars(range(min = 0.0, max = 1.0), extend("default" = 0.0))]
    #[schemars(extend("x-omit-default" = true))]
    pub token_slice_exit_cpu_spread: f64,
    /// Host clock converting PLE cycles to ns, kHz. Default 2100000
    /// (2.1 GHz, a Xeon of the 2012 sources' era; assumption).
    #[schemars(range(min = limits::MIN_TSC_KHZ))]
    pub tsc_khz: u64,
    /// Time a yield_to attempt holds both run-queue locks, ns
    /// (contended locks are waited for). Default 300 (assumption; [S1]:
    /// ~50 % host time in _raw_spin_lock under PLE storms).
    #[schemars(range(max = limits::MAX_COST_NS))]
    pub rq_lock_ns: u64,
    /// Cost of yield_to before the locks (the -ESRCH check),
    /// ns. Default 50 (assumption).
    #[schemars(range(max = limits::MAX_COST_NS))]
    pub yield_check_ns: u64,
    /// yield_to returns -ESRCH at once when both run queues
    /// hold a single task (kernels since ~3.8). False models the 2011-2012
    /// yield_to, which always took both run-queue locks. Default True.
    pub yield_to_esrch: bool,
    /// Optional background host load. Default: none.
    pub background: Background,
    /// Per-CPU tick phase as the `skew_tick=1` boot option sets
    /// it (kernel/time/tick-sched.c `tick_setup_sched_timer`: CPU i's
    /// tick is offset by i × (TICK_NSEC / 2) / nr_cpus). Default False:
    /// the kernel's default, every CPU ticks on the same jiffy
    /// boundary ("Tick operating in synchronized mode").
    #[schemars(extend("x-omit-default" = true))]
    pub tick_skew: bool,
    /// Break ties between equal scheduling keys by a per-task
    /// random rank drawn from the seed (a second RNG stream) instead of
    /// the task index. The kernel's rbtree keeps equal keys in enqueue
    /// order, and on real hardware exact ties do not happen: the index
    /// rule makes every CPU prefer the same VM. Default False.
    #[schemars(extend("x-omit-default" = true))]
    pub seeded_ties: bool,
    /// Latency of a vCPU wake-up on its host CPU, ns: the
    /// wake list / reschedule IPI's delivery (`ttwu_queue_wakelist`,
    /// `resched_curr`); it delays the woken vCPU's start on an idle
    /// CPU and its wake-up preemption of a busy one. Default 0 (off).
    /// Suggested 1000-2000 (assumption: ~1 µs for a cross-core IPI on a
    /// Xeon, plus the handler's entry).
    #[schemars(range(max = limits::MAX_COST_NS))]
    #[schemars(extend("x-omit-default" = true))]
    pub wakeup_ipi_ns: u64,
    /// The host CPUs' idle states as (exit_latency_ns,
    /// target_residency_ns), shallowest first. A vCPU woken onto an idle
    /// CPU also waits for the exit latency of the deepest state whose
    /// target residency the CPU has been idle for (an idle governor that
    /// predicted right). Default () (off). `sim.IDLE_STATES_SKX` holds
    /// the intel_idle table of a Skylake-SP server.
    #[schemars(schema_with = "idle_states_schema")]
    #[schemars(extend("x-omit-default" = true))]
    pub idle_states: Vec<(u64, u64)>,
    /// Relative jitter of both wake-up latencies: with `wakeup_dist`
    /// `"uniform"` each is drawn uniformly in [1 - j, 1 + j] × its value;
    /// with `"lognormal"` j is the standard deviation of its logarithm (the
    /// value is the median). Default 0.0. Suggested 0.5 (assumption); the
    /// twins measure it (`twins.calibrate`'s `ipi_wake_spread`).
    #[schemars(range(min = 0.0, max = 1.0))]
    #[schemars(extend("x-omit-default" = true))]
    pub wakeup_jitter: f64,
    /// The distribution of a jittered wake-up latency: `"uniform"` (mean
    /// kept) or `"lognormal"` (median kept, a right tail). Default
    /// `"uniform"`.
    #[schemars(extend("x-omit-default" = true))]
    pub wakeup_dist: WakeupDist,
    /// Host noise (kernel threads, VMM I/O threads), see
    /// [`HostNoise`][vcpulab.sim.HostNoise]. Default off.
    #[schemars(extend("x-omit-default" = true))]
    pub noise: HostNoise,
    /// Tunables of `scheduler="cfs"`, see [`Cfs`][vcpulab.sim.Cfs].
    #[schemars(extend("x-omit-default" = true))]
    pub cfs: CfsConfig,
    /// Topology: sockets (each one LLC domain) × cores × SMT threads;
    /// `n_pcpus` must be a multiple of sockets × threads_per_core. CPU i is
    /// thread i / ncores of core i mod ncores (Linux's enumeration on x86
    /// servers: siblings are ncores apart). At most `n_pcpus`.
    #[schemars(range(min = 1, max = MAX_PCPUS))]
    #[schemars(extend("x-omit-default" = true))]
    pub sockets: u32,
    /// SMT threads per core, 1-8. Default 1. `n_pcpus`
    /// must be a multiple of sockets × threads_per_core. Host CPU i is
    /// thread i // ncores of core i % ncores (siblings ncores apart, as
    /// Linux numbers x86 servers).
    #[schemars(range(min = 1, max = limits::MAX_THREADS_PER_CORE))]
    #[schemars(extend("x-omit-default" = true))]
    pub threads_per_core: u32,
    /// Where a woken unpinned thread goes: `"first_idle"`
    /// (default: the previous CPU if idle, else the first idle CPU after
    /// it, else the previous CPU) or `"select_task_rq_fair"` (the
    /// kernel's: `wake_affine` between the waker's CPU and the
    /// previous one, then `select_idle_sibling` — the target if idle,
    /// the previous CPU if idle in the same LLC, the first fully idle
    /// core of the target's LLC, its first idle CPU, else the target).
    #[schemars(extend("x-omit-default" = true))]
    pub wake_placement: WakePlacement,
    /// Periodic load balancing per domain (core, LLC,
    /// machine) from the tick (`rebalance_domains`: every sd_weight ms
    /// × `lb_busy_factor` on a busy CPU, one cache-cold task from the
    /// busiest CPU when it runs 2+ more tasks), nohz idle balancing
    /// kicked by a CPU with 2+ tasks, and newidle balancing domain by
    /// domain (smallest first). Default False (newidle pulls only, from
    /// the first CPU after this one that has a waiting task).
    #[schemars(extend("x-omit-default" = true))]
    pub load_balance: bool,
    /// sd->busy_factor: a busy CPU balances `busy_factor` times less often
    /// (kernel sd_init: 32 before v5.10, 16 since).
    #[schemars(range(min = 1, max = limits::MAX_LB_BUSY_FACTOR))]
    #[schemars(extend("x-omit-default" = true))]
    pub lb_busy_factor: u32,
    /// sysctl_sched_migration_cost, ns: a task that ran
    /// within it is cache-hot and periodic balancing leaves it
    /// (`task_hot`). Default 500000 (kernel).
    #[schemars(range(max = limits::MAX_COST_NS))]
    #[schemars(extend("x-omit-default" = true))]
    pub migration_cost_ns: u64,
    /// Speed of a hardware thread doing a vCPU's useful work
    /// while another thread of its core runs something, percent of its
    /// speed alone (the work in progress is re-planned whenever a
    /// sibling starts or stops). Default 100 (off). Suggested 65: two
    /// busy threads give a core 1.3× its one-thread throughput, the
    /// "up to 30 %" of D. Marr et al., "Hyper-Threading Technology
    /// Architecture and Microarchitecture", Intel Technology Journal
    /// 6(1), 2002, https://www.cs.sfu.ca/~fedorova/Teaching/CMPT886/Spring2007/papers/hyper-threading.pdf
    /// (the same figure for every era: vcpulab has no per-generation
    /// source). Spinning, exits and polling are not slowed.
    #[schemars(range(min = limits::MIN_SMT_SPEED_PCT, max = 100))]
    #[schemars(extend("x-omit-default" = true))]
    pub smt_speed_pct: u32,
    /// Each host CPU's speed as a process of its own, see
    /// [`HostSpeed`][vcpulab.sim.HostSpeed]. Default off (one speed).
    #[schemars(extend("x-omit-default" = true))]
    pub speed: HostSpeed,
    /// The host CPU each unpinned (`affinity="all"`)
    /// vCPU thread starts on: `"index"` (default: vCPU g, counted over
    /// all VMs, on CPU g mod P, so that VM k shares its CPUs with the
    /// VMs P / vcpus apart and nothing else) or `"shuffled"` (the
    /// balanced slots g mod P in a seeded random order, the map that
    /// `affinity="pinned"` draws). No kernel rule puts vCPU g on CPU g
    /// mod P: the map a real host starts a run with comes from fork
    /// placement (`sched_balance_find_dst_cpu`) and the wake-up
    /// placements of guest boot and idle, which depend on their timing;
    /// "shuffled" stands for it (simplified: balanced, one draw per
    /// seed). A thread's first enqueue keeps its start CPU
    /// (`wake_up_new_task` places by fork balancing, not by the
    /// wake-up path; through the wake-up path in index order, the VMs
    /// listed first took CPUs of their own: the 2012 era's 8 x 20 VMs
    /// 0 and 1 made 1.5-1.7x the mean). vCPU threads that never sleep
    /// keep their start CPU (load balancing finds nothing to move
    /// between equally loaded CPUs), so the start map decides which
    /// VMs share CPUs. Pinned affinities ignore it.
    #[schemars(extend("x-omit-default" = true))]
    pub start_placement: StartPlacement,
    /// Cache-refill time a vCPU owes when it runs
    /// on another core of the same LLC than last time (its private L1
    /// and L2 are cold), ns: its next useful work starts with it (the
    /// time counts as useful: the guest runs, slower). Default 0 (off).
    /// The kernel charges nothing for a migration; the hardware does
    /// (sysctl_sched_migration_cost only marks tasks cache-hot).
    /// Simplified: one figure per distance, whatever the working set;
    /// SMT siblings share L1/L2 and owe nothing.
    #[schemars(range(max = limits::MAX_COST_NS))]
    #[schemars(extend("x-omit-default" = true))]
    pub migration_cold_core_ns: u64,
    /// The same for a CPU in another LLC (socket),
    /// ns. Default 0 (off).
    #[schemars(range(max = limits::MAX_COST_NS))]
    #[schemars(extend("x-omit-default" = true))]
    pub migration_cold_llc_ns: u64,
    /// `wake_wide` in `select_task_rq_fair` (kernel/sched/fair.c,
    /// since v4.6): each waker counts its "wakee flips" (one more when
    /// it wakes a different task than last time, halved every second:
    /// `record_wakee`); when the waker's and the wakee's counts are
    /// both at least the LLC size and one is at least LLC-size times
    /// the other, the wake-up skips `wake_affine` and looks for an
    /// idle CPU around the wakee's previous CPU. The waker is the vCPU
    /// thread of the vCPU event that makes the wake-up (an IPI, a pv
    /// kick), or the task running on the CPU of a tick or resched;
    /// wake-ups with no waker task (timers on an idle CPU) count
    /// nothing. Only with `wake_placement="select_task_rq_fair"`.
    /// Default False (off).
    #[schemars(extend("x-omit-default" = true))]
    pub wake_wide: bool,
    /// The host CPU of each vCPU thread, overriding the map
    /// `affinity` draws: vCPU thread g (counted over all VMs) on
    /// `vcpu_pcpus[g % len]`, pinned there (`affinity="all"`:
    /// starting there). A run that uses some of the host's CPUs while
    /// the host's other threads (noise, the VMM threads) may run on the
    /// rest, as a real experiment pinned to part of the machine
    /// ([`vcpulab.twins`][]). Each entry < `n_pcpus`. Default () (the
    /// affinity's map).
    #[schemars(schema_with = "vcpu_pcpus_schema")]
    #[schemars(extend("x-omit-default" = true))]
    pub vcpu_pcpus: Vec<u32>,
    /// The vCPU threads arrive one by one, ns apart, as a
    /// VMM creates them in turn: the order in which they first reach
    /// their CPU's run queue (fork placement, then the move to their
    /// pinned CPU) is a seeded random one (a stand-in for that timing),
    /// the gaps between arrivals are exponential with mean
    /// start_gap_ns (second RNG stream); each arrives on its start CPU (a new
    /// task is placed by fork balancing, which the start map stands
    /// for, not by the wake-up path) and may preempt as any waking
    /// task. Their first runs set the order of a
    /// ticket lock's queue, the host scheduler's order of them is set
    /// by the arrivals too, and the two need not agree (docs/twins.md).
    /// Under vcpulab's token schedulers the arrivals set only when the
    /// first tokens go out: at the last one, in vCPU order, as the real
    /// scheduler waits for every thread (src/kvm/sched/).
    /// Default 0 (every vCPU runnable at time 0, in index order).
    #[schemars(range(max = limits::MAX_COST_NS))]
    #[schemars(extend("x-omit-default" = true))]
    pub start_gap_ns: u64,
    /// The order in which the vCPU threads arrive with `start_gap_ns > 0`:
    /// `"shuffled"`, a seeded random order (every order equally likely), or
    /// `"created"`, the VMM's creation order jittered: thread i is created
    /// after thread i - 1, an exponential gap of mean `start_gap_ns` later,
    /// and first reaches its CPU after its own exponential delay of the
    /// same mean (an assumption), so two neighbours arrive swapped about
    /// one time in four, as the project's real runs did (vCPU 1 before
    /// vCPU 0 in 1 of 4 runs of `twins.wake_placement_grid`'s cells; the
    /// twins use it). Default `"shuffled"`.
    #[schemars(extend("x-omit-default" = true))]
    pub start_order: StartOrder,
    /// EEVDF (`scheduler="fair"`): a wake-up onto
    /// a busy CPU notices an expired slice of the running task, as the
    /// kernel's `enqueue_entity` → `update_curr` →
    /// `update_deadline` → `resched_curr` does (kernel/sched/fair.c),
    /// and the CPU picks again. Default False (slice expiry noticed at
    /// ticks only).
    #[schemars(extend("x-omit-default" = true))]
    pub slice_check_on_wakeup: bool,
    /// EEVDF (`scheduler="fair"`): the kernel's
    /// `RUN_TO_PARITY` slice protection and wake-up rule
    /// (kernel/sched/fair.c, v6.6 on; the feature is on by default): a
    /// task picked to run keeps its CPU while it is eligible and has not
    /// used its slice (`set_protect_slice`, `protect_slice` in
    /// `pick_eevdf`); a woken task preempts only when `pick_eevdf`
    /// would choose it (`check_preempt_wakeup_fair`); an eligible next
    /// buddy still goes first (`PICK_BUDDY`). Every task has the base
    /// slice here, so the protection lasts to the deadline set when it
    /// was picked. Default False (every pick is the earliest eligible
    /// deadline; a woken task preempts when it is eligible with an
    /// earlier deadline than the running one).
    #[schemars(extend("x-omit-default" = true))]
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
    #[schemars(extend("x-omit-default" = true))]
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
    #[schemars(extend("x-omit-default" = true))]
    pub delay_dequeue: bool,
    /// EEVDF's `place_entity` lag rule (PLACE_LAG, kernel/sched/fair.c,
    /// v6.6 on; on by default). `"kernel"`: a task (or group entity)
    /// placed on a queue where other entities count in V gets its saved
    /// lag scaled by (W + w) / W, W their weight and w its own, so that V's
    /// shift as it joins leaves it the lag it saved; on a queue with no
    /// entity it starts at V, its lag dropped. `"saved"` (default): the
    /// saved lag as it is, on an empty queue too (the simulator's rule
    /// until 0.3.11). Used with `scheduler="fair"` only.
    #[schemars(extend("x-omit-default" = true))]
    pub place_lag: PlaceLag,
    /// EEVDF's PLACE_REL_DEADLINE ("sched/fair: Avoid re-setting virtual
    /// deadline on 'migrations'", kernel/sched/fair.c, v6.12; on by
    /// default): a runnable task taken off its queue without sleeping (a
    /// load-balance or newidle migration) keeps its deadline's distance
    /// from its vruntime and is placed with it, instead of a new request
    /// of a whole slice. false (default): a new request (before v6.12).
    /// Used with `scheduler="fair"` only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[schemars(extend("default" = false))]
    #[schemars(extend("x-omit-default" = true))]
    pub place_rel_deadline: bool,
    /// EEVDF task groups (`CONFIG_FAIR_GROUP_SCHED`, kernel/sched/fair.c
    /// v6.6+): each VM's vCPU threads in their own task group, one level
    /// below the CPU's root run queue, as libvirt runs each VM in its own
    /// cgroup with the default cpu.shares of 1024 ("Control Groups
    /// Resource Management", libvirt project,
    /// https://libvirt.org/cgroups.html). A VM's group entity on a CPU has
    /// its own vruntime, deadline and lag in the root's virtual time and
    /// the weight `calc_group_shares` gives it (1024 × its load on this CPU
    /// / its load on all CPUs); placement, eligibility, `pick_eevdf`, slice
    /// protection, next buddies, deadlines at the tick, wake-up preemption
    /// and DELAY_DEQUEUE act level by level, and yield_task_fair's penalty
    /// on the yielder's own group queue. Acts under `scheduler="fair"`
    /// only (CFS's groups are `Cfs.vm_groups`; gang and vcpulab's
    /// schedulers place the vCPUs themselves), where it needs
    /// `yield_scope="vm_group"`, the flat stand-in it replaces. false
    /// (default): one run queue per CPU. See docs/simulator.md, "EEVDF
    /// group scheduling".
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[schemars(extend("default" = false))]
    #[schemars(extend("x-omit-default" = true))]
    pub vm_groups: bool,
    /// The half-life of the group load average that `calc_group_shares`
    /// weighs each VM's group entity by (`Cfs.vm_groups`, `vm_groups`), ns.
    /// The kernel's PELT halves a load's weight every 32 periods of 1024 µs
    /// (`LOAD_AVG_PERIOD`, kernel/sched/pelt.c; v3.8+): 32768000 there.
    /// With it, a CPU's load is max(its group's runnable weight now, its
    /// average), and the VM's load is the other CPUs' averages as they last
    /// updated them plus this CPU's (`tg->load_avg`, kernel/sched/fair.c),
    /// so the weight follows a vCPU's halts and wake-ups slowly, not at
    /// once. 0 (default): the runnable weight now, on every CPU. Simplified:
    /// a continuous exponential for PELT's geometric series.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    #[schemars(range(max = limits::MAX_COST_NS), extend("default" = 0))]
    #[schemars(extend("x-omit-default" = true))]
    pub group_load_half_life_ns: u64,
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
    /// Bursts per second of each CPU's kernel threads. Default 0.
    #[schemars(range(min = 0.0, max = limits::MAX_NOISE_HZ))]
    pub kthread_hz: f64,
    /// Mean length of one kernel-thread burst, ns. Default 20000.
    #[schemars(range(min = limits::MIN_NOISE_NS, max = limits::MAX_COST_NS))]
    pub kthread_ns: u64,
    /// Bursts per second of each VM's VMM I/O thread. Default 0.
    #[schemars(range(min = 0.0, max = limits::MAX_NOISE_HZ))]
    pub vmm_io_hz: f64,
    /// Mean length of one VMM I/O burst, ns. Default 20000.
    #[schemars(range(min = limits::MIN_NOISE_NS, max = limits::MAX_COST_NS))]
    pub vmm_io_ns: u64,
    /// Independent kernel-thread tasks per CPU sharing
    /// `kthread_hz` (each `kthread_hz / kthreads_per_cpu` arrivals per
    /// second, its own Poisson process and its own lag), 1-64. Default 1:
    /// one task per CPU whose arrivals join the work it already has. Many
    /// short tasks that each ran little keep their lag and preempt a vCPU
    /// at each wake-up; one task that carries them all has used its share
    /// and rarely does. Source: measured here (the number of short tasks
    /// of `vcpulab.twins.OtherLoad`, from `/proc/<pid>/task/*/schedstat`).
    #[serde(skip_serializing_if = "is_one_u32")]
    #[schemars(range(min = 1, max = limits::MAX_KTHREADS_PER_CPU), extend("default" = 1))]
    #[schemars(extend("x-omit-default" = true))]
    pub kthreads_per_cpu: u32,
}

impl Default for HostNoise {
    fn default() -> Self {
        HostNoise { kthread_hz: 0.0, kthread_ns: 20_000, vmm_io_hz: 0.0, vmm_io_ns: 20_000, kthreads_per_cpu: 1 }
    }
}

/// Each host CPU's speed moving between two states, independently per
/// CPU: a two-state Markov process whose dwell in each state is drawn
/// exponential with the state's mean (from the run's third RNG stream, so
/// the other draws do not move when it is on). A vCPU's useful work
/// (its threads' compute and lock holds, IPI handlers, its start) runs at
/// the speed of its CPU's state, times the SMT speed where that applies;
/// work in progress is re-planned when the state changes. Spinning,
/// polling and exits keep their length, and wake-up latencies too unless
/// `host_paths` says otherwise. Each CPU starts
/// in a state drawn from the process's stationary shares.
///
/// What it stands for: a host whose CPUs' speed is not one number over a
/// run (a hypervisor below a nested host, frequency changes, other tenants
/// on a shared core or memory bus). Simplified: two levels, not a
/// continuum; exponential dwells (no period). Off by default; `twins.calibrate`
/// measures it on this host (the speed probe's fast and slow levels and
/// the mean length of their stretches).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HostSpeed {
    /// Speed in the fast state, percent of the nominal speed (the speed
    /// at which a phase's `ns` is its length). Default 100.
    #[schemars(range(min = limits::MIN_SPEED_PCT, max = limits::MAX_SPEED_PCT))]
    pub fast_pct: u32,
    /// Speed in the slow state, percent of the nominal speed, at most
    /// `fast_pct`. Default 100.
    #[schemars(range(min = limits::MIN_SPEED_PCT, max = limits::MAX_SPEED_PCT))]
    pub slow_pct: u32,
    /// Mean length of a stretch in the fast state, ns. Default 0: the
    /// process is off (both dwells 0) and every CPU runs at 100 %.
    #[schemars(range(max = limits::MAX_DURATION_NS))]
    pub fast_dwell_ns: u64,
    /// Mean length of a stretch in the slow state, ns. Default 0 (off).
    #[schemars(range(max = limits::MAX_DURATION_NS))]
    pub slow_dwell_ns: u64,
    /// The state's speed also stretches the host's own paths on the CPU:
    /// a vCPU's wake-up latency there (`wakeup_ipi_ns` and an idle state's
    /// exit), its context switch in (`switch_ns`) and a blocked halt's
    /// return (`Pv.halt_wake_ns`), as when the
    /// whole CPU runs slower (a hypervisor below giving it less). Default
    /// False: only the vCPUs' useful work (guest instructions) slows.
    #[schemars(extend("x-omit-default" = true))]
    pub host_paths: bool,
}

impl Default for HostSpeed {
    fn default() -> Self {
        HostSpeed { fast_pct: 100, slow_pct: 100, fast_dwell_ns: 0, slow_dwell_ns: 0, host_paths: false }
    }
}

impl HostSpeed {
    /// Whether the process runs (both dwells set).
    pub fn is_on(&self) -> bool {
        self.fast_dwell_ns > 0 && self.slow_dwell_ns > 0
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
    /// sysctl_sched_latency, ns, unscaled. Default 6000000.
    #[schemars(range(min = limits::MIN_PERIOD_NS, max = limits::MAX_COST_NS))]
    pub latency_ns: u64,
    /// sysctl_sched_min_granularity, ns, unscaled.
    /// Default 750000.
    #[schemars(range(min = limits::MIN_PERIOD_NS, max = limits::MAX_COST_NS))]
    pub min_granularity_ns: u64,
    /// sysctl_sched_wakeup_granularity, ns, unscaled.
    /// Default 1000000.
    #[schemars(range(min = limits::MIN_PERIOD_NS, max = limits::MAX_COST_NS))]
    pub wakeup_granularity_ns: u64,
    /// `"log"` (default), `"linear"` (factor
    /// min(ncpus, 8)) or `"none"` (factor 1).
    pub tunable_scaling: TunableScaling,
    /// GENTLE_FAIR_SLEEPERS (kernel default True): a
    /// waking task's sleeper credit in `place_entity` is half of
    /// sched_latency instead of all of it.
    pub gentle_fair_sleepers: bool,
    /// LAST_BUDDY (kernel default True): a task preempted by a
    /// wake-up becomes the last buddy when nr_running >= sched_nr_latency.
    pub last_buddy: bool,
    /// Each VM's threads in their own task group, one level
    /// below the root cfs_rq (CONFIG_FAIR_GROUP_SCHED, as libvirt runs
    /// each VM in its own cgroup with the default cpu.shares of 1024,
    /// https://libvirt.org/cgroups.html): a VM's group entity gets
    /// 1024 · (its load on this CPU / its load on all CPUs) of weight
    /// (`calc_group_shares`), so VMs, not threads, share a CPU fairly;
    /// picks, buddies, yields, ticks and wake-up preemption act level by
    /// level. Default False: one flat cfs_rq, as a VMM started outside
    /// any cgroup. See docs/simulator.md, "CFS group scheduling".
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    #[schemars(extend("default" = false))]
    #[schemars(extend("x-omit-default" = true))]
    pub vm_groups: bool,
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
            vm_groups: false,
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
            n_pcpus: 4,
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
            token_skew_ns: default_token_skew_ns(),
            token_wake_exit_ns: 0,
            token_halt_bracket: false,
            token_slice_exit_ns: 0,
            token_slice_exit_jitter: 0.0,
            token_slice_exit_cpu_spread: 0.0,
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
            wakeup_dist: WakeupDist::Uniform,
            noise: HostNoise::default(),
            cfs: CfsConfig::default(),
            sockets: 1,
            threads_per_core: 1,
            wake_placement: WakePlacement::FirstIdle,
            load_balance: false,
            lb_busy_factor: 16,
            migration_cost_ns: 500_000,
            smt_speed_pct: 100,
            speed: HostSpeed::default(),
            start_placement: StartPlacement::Index,
            migration_cold_core_ns: 0,
            migration_cold_llc_ns: 0,
            wake_wide: false,
            vcpu_pcpus: Vec::new(),
            start_gap_ns: 0,
            start_order: StartOrder::Shuffled,
            slice_check_on_wakeup: false,
            run_to_parity: false,
            switch_ns: 0,
            delay_dequeue: false,
            place_lag: PlaceLag::Saved,
            place_rel_deadline: false,
            vm_groups: false,
            group_load_half_life_ns: 0,
        }
    }
}

//! What a VM's guest threads run: the phases and their distributions.

use super::*;

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
    /// Acquire guest lock `lock` (or one of `sites` locks from it), hold it
    /// `hold_ns` in kernel mode, release it.
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
        /// Lock sites: each acquisition takes one of the locks `lock` …
        /// `lock + sites − 1`, chosen uniformly at random, all of this kind
        /// and hold (a lock class taken at many instances: per-row or
        /// per-inode locks, the futex hash's bucket locks). 1 (default):
        /// lock `lock` only.
        #[serde(default = "one_u32", skip_serializing_if = "is_one_u32")]
        #[schemars(range(min = 1, max = limits::MAX_LOCK_SITES), extend("default" = 1))]
        #[schemars(extend("x-omit-default" = true))]
        sites: u32,
        /// Interrupts off from the acquisition to the release
        /// (`spin_lock_irqsave` / `spin_lock_irq`): while its thread waits for
        /// or holds the lock, the vCPU runs no interrupt handler (its IPIs wait
        /// for the release), and a waiter halted in `pv_wait` (`kvm_wait`'s
        /// `halt()` with IF=0) is woken by its kick only, not by an IPI
        /// (`kvm_arch_interrupt_allowed` is false). Spinlocks only. Default
        /// false.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        #[schemars(extend("default" = false))]
        #[schemars(extend("x-omit-default" = true))]
        irqs_off: bool,
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
    /// A tuple of phases (Compute, Lock, Ipi, Barrier, Sleep, Send, Recv, TaskQueue).
    #[schemars(length(min = 1, max = MAX_PHASES))]
    pub phases: Vec<Phase>,
    /// A label for tables. Default `"custom"`.
    pub name: String,
    /// Iterations per thread; 0 loops until the end of the run
    /// (throughput), > 0 ends the run when every VM is done (wall time).
    pub iterations: u64,
    /// Guest round-robin slice between threads sharing a
    /// vCPU, ns. Default 4000000 (assumption: a 4 ms guest CFS slice).
    #[schemars(range(min = limits::MIN_PERIOD_NS))]
    pub guest_slice_ns: u64,
    /// Cycles per spin-loop iteration (turns SPIN_THRESHOLD
    /// into time). Default 40 (assumption: PAUSE + load on older Xeons).
    #[schemars(range(min = 1, max = limits::MAX_SPIN_ITER_CYCLES))]
    pub spin_iter_cycles: u64,
    /// PV queued-lock SPIN_THRESHOLD, iterations. Default
    /// 32768 (kernel, [K5]).
    #[schemars(range(min = 1, max = limits::MAX_SPIN_THRESHOLD))]
    pub spin_threshold: u64,
    /// Thread 0 of each VM runs these phases instead of `phases` (empty, the
    /// default: every thread runs `phases`). An initiator beside responders,
    /// e.g. a ping-pong: thread 0 `[Compute, Send{to: 1}, Recv]`, the others
    /// `[Recv, Compute, Send{to: 1}]`. Only compute, sleep, barrier, send and
    /// receive phases (locks and IPIs are set up from `phases`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_PHASES), extend("default" = []))]
    #[schemars(extend("x-omit-default" = true))]
    pub thread0_phases: Vec<Phase>,
    /// Thread 0 of each VM is bound to the VM's vCPU 0 (the guest's
    /// `kthread_bind` / `sched_setaffinity` to one CPU): its wake-ups skip
    /// the guest's placement and load balancing never moves it. Other
    /// threads are placed as before (on vCPU 0 too, where the rule finds
    /// it available). Default false. A waker that stays on its vCPU, as
    /// vcpulab's wake-placement guest program's vCPU 0.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    #[schemars(extend("default" = false))]
    #[schemars(extend("x-omit-default" = true))]
    pub thread0_bound: bool,
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
                Phase::Lock {
                    lock: 0,
                    lock_kind: LockKind::Ticket,
                    hold_ns: 2_000,
                    dist: Dist::Fixed,
                    prob: 1.0,
                    sites: 1,
                    irqs_off: false,
                },
            ],
            iterations: 0,
            guest_slice_ns: 4_000_000,
            spin_iter_cycles: 40,
            spin_threshold: 32_768,
            thread0_phases: Vec::new(),
            thread0_bound: false,
        }
    }
}

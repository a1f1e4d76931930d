//! The simulated world's state, as plain data: host tasks and run queues,
//! vCPUs and their activities, guest threads, locks and VMs, the time
//! categories they are accounted in, and the reasons recorded in traces.
//!
//! Nothing here runs: the event loop (`engine.rs`), the host scheduler
//! (`sched.rs`, `cfs.rs`, `balance.rs`), KVM's side of a vCPU (`vcpu.rs`) and
//! the guest kernel (`guest/`) are `impl Sim` blocks that change this state.

use std::collections::VecDeque;

use super::config::{LockKind, VmConfig};
use super::halt_poll::{HaltPollConfig, HaltPollState};
use super::policy::{DirectedYieldPolicy, Upstream};

pub type Ns = u64;
pub const NEVER: Ns = u64::MAX;
pub const NICE0: u64 = 1024;
pub const NO_CPU: u32 = u32::MAX;
/// No task (`ExitKind::Ple::boost`, `WakeCtx::boost_task`).
pub const NO_TASK: u32 = u32::MAX;

// Time categories. 0..=4 are "running" categories shared by vCPUs and host CPUs.
pub const C_USEFUL: usize = 0;
pub const C_SPIN: usize = 1;
pub const C_PLE: usize = 2;
pub const C_EXIT: usize = 3;
pub const C_IDLEPOLL: usize = 4;
/// Host halt polling (kvm_vcpu_halt's poll loop).
pub const C_HALTPOLL: usize = 5;
/// Number of "running" categories (vCPU thread on a host CPU).
pub const NRUN: usize = 6;
/// vCPU: runnable but waiting for a host CPU (steal). Host CPU: background task.
pub const C_WAIT: usize = 6;
pub const C_BG: usize = 6;
/// vCPU: halted (blocked on the host). Host CPU: idle.
pub const C_HALT: usize = 7;
pub const C_IDLE: usize = 7;
pub const NCAT: usize = 8;

/// Time accounting with one open interval. `repr(C, align(64))`: it starts
/// a cache line, which the open interval and the running categories share.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub struct Acct {
    pub since: Ns,
    pub cat: usize,
    pub acc: [Ns; NCAT],
}

impl Acct {
    pub fn new(cat: usize) -> Acct {
        Acct { cat, since: 0, acc: [0; NCAT] }
    }
    #[inline]
    pub fn set(&mut self, now: Ns, cat: usize) {
        self.acc[self.cat] += now - self.since;
        self.since = now;
        self.cat = cat;
    }
}

/// Why a host CPU reschedules. The first four arrive by an external interrupt
/// (tick, reschedule IPI), so a vCPU preempted by them is at an instruction boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Why {
    Tick,
    Wakeup,
    Boost,
    Gang,
    /// need_resched noticed at the end of an exit handler (not an instruction boundary).
    ExitResched,
    Yield,
    Halt,
    Sleep,
    Idle,
    End,
    /// A run token's slice ended (`Scheduler::RoundRobin`, vcpulab's scheduler): its
    /// deadline kick, an external interrupt.
    Slice,
}

impl Why {
    /// Every reason, in the order of their codes (`Why as u8`): the trace's
    /// `why` column is these names indexed by code.
    pub const ALL: [Why; 11] = [
        Why::Tick,
        Why::Wakeup,
        Why::Boost,
        Why::Gang,
        Why::ExitResched,
        Why::Yield,
        Why::Halt,
        Why::Sleep,
        Why::Idle,
        Why::End,
        Why::Slice,
    ];
    pub fn at_instruction_boundary(self) -> bool {
        matches!(self, Why::Tick | Why::Wakeup | Why::Boost | Why::Gang | Why::Slice)
    }
    pub fn name(self) -> &'static str {
        match self {
            Why::Tick => "tick",
            Why::Wakeup => "wakeup_preempt",
            Why::Boost => "boost",
            Why::Gang => "gang",
            Why::ExitResched => "exit_resched",
            Why::Yield => "yield",
            Why::Halt => "halt",
            Why::Sleep => "sleep",
            Why::Idle => "idle",
            Why::End => "end",
            Why::Slice => "slice",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskKind {
    Vcpu(u32),
    Bg(u32),
    /// Host noise (`HostNoise`): index into `Sim.noise_src`.
    Noise(u32),
}

/// `record_wakee` / `wake_wide` state of a waker, a host task or a guest
/// thread (`p->wakee_flips`, `wakee_flip_decay_ts`, `last_wakee`): how often
/// it switched wakees since the last halving, when that was, and the one it
/// woke last (u32::MAX: none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WakeeFlips {
    pub flips: u32,
    pub decay_ts: Ns,
    pub last: u32,
}

impl WakeeFlips {
    pub const NEW: WakeeFlips = WakeeFlips { flips: 0, decay_ts: 0, last: u32::MAX };

    /// `record_wakee(p)` on the waker at `now`: its flips halve once a
    /// second has passed since the last halving (`wakee_flip_decay_ts + HZ`),
    /// and count one more when its wakee changes.
    pub fn record(&mut self, now: Ns, wakee: u32) {
        if now > self.decay_ts + 1_000_000_000 {
            self.flips >>= 1;
            self.decay_ts = now;
        }
        if self.last != wakee {
            self.last = wakee;
            self.flips += 1;
        }
    }
}

/// `wake_wide(p)`: the wakee goes to its own previous CPU's neighbourhood,
/// not the waker's, when the larger of the two flip counts is at least
/// `llc_size` times the smaller, and the smaller is at least `llc_size`
/// (`sd_llc_size` of the waker's CPU): one waker feeding many wakees.
pub fn wake_wide(waker_flips: u32, wakee_flips: u32, llc_size: u32) -> bool {
    let (master, slave) = (waker_flips.max(wakee_flips), waker_flips.min(wakee_flips));
    !(slave < llc_size || master < slave.saturating_mul(llc_size))
}

/// A host thread (vCPU thread or background task) as the fair scheduler sees it.
///
/// `repr(C, align(64))`: what a pick, a yield, a switch and `update_curr`
/// read fill the first cache line (the tie rank, the virtual slice and the
/// run delay too: on the second line each was one more cache miss per
/// switch or yield in a yield storm).
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub struct Task {
    pub kind: TaskKind,
    /// The run queue it belongs to (or last ran on).
    pub cpu: u32,
    /// Rank among equal scheduling keys: the task index, or a seeded random
    /// number with `Host.seeded_ties`.
    pub tie: u32,
    /// Runnable (on its run queue, current, or parked by the gang scheduler).
    pub runnable: bool,
    /// Gang mode: runnable but its VM is not in the current round.
    pub parked: bool,
    /// A background or noise task's burst generation (here, where it fills a gap).
    pub bg_gen: u32,
    pub weight: u64,
    pub vruntime: i64,
    pub deadline: i64,
    /// The virtual slice, base_slice_ns·1024/weight (weights never change).
    pub vslice: i64,
    pub wait_since: Ns,
    /// Total runnable-but-waiting time (sched_info.run_delay).
    pub run_delay: Ns,
    /// When it last stopped running (`task_hot`'s exec_start; written at a
    /// switch, read only by placement: in the second line).
    pub last_ran: Ns,
    pub vlag: i64,
    pub pinned: Option<u32>,
    // background task state
    pub bg_rem: Ns,
    pub bg_start: Ns,
    /// `record_wakee` state (`Host.wake_wide`) of this task as a waker.
    pub wakee: WakeeFlips,
    /// `Host.delay_dequeue`: it blocked with negative lag and stays on its
    /// CPU's queue (`se->sched_delayed`) since that CPU's V was `delayed_v`.
    pub delayed: bool,
    pub delayed_v: i64,
    /// `Host.place_rel_deadline`: taken off its queue without sleeping,
    /// its `deadline` holds the distance from its vruntime until it is
    /// placed again (`se->rel_deadline`).
    pub rel_deadline: bool,
}

impl Task {
    /// PLACE_REL_DEADLINE at a dequeue without sleep: the deadline becomes
    /// its distance from the vruntime (`se->deadline -= se->vruntime`).
    #[inline]
    pub fn keep_rel_deadline(&mut self) {
        self.deadline -= self.vruntime;
        self.rel_deadline = true;
    }

    /// `place_entity`'s deadline once the vruntime is placed: the kept
    /// distance after a migration (PLACE_REL_DEADLINE), else a request of
    /// `vslice`.
    #[inline]
    pub fn place_deadline(&mut self, vslice: i64) {
        self.deadline = self.vruntime + if self.rel_deadline { self.deadline } else { vslice };
        self.rel_deadline = false;
    }

    /// A new, not yet runnable task of `weight` on `cpu` (pinned there or not),
    /// its virtual slice base_slice_ns·1024/weight.
    pub fn new(kind: TaskKind, weight: u64, base_slice_ns: Ns, cpu: u32, pinned: Option<u32>) -> Task {
        Task {
            kind,
            weight,
            vslice: (base_slice_ns * NICE0 / weight) as i64,
            vruntime: 0,
            deadline: 0,
            vlag: 0,
            runnable: false,
            parked: false,
            cpu,
            pinned,
            wait_since: 0,
            run_delay: 0,
            bg_rem: 0,
            bg_start: 0,
            bg_gen: 0,
            tie: 0,
            last_ran: 0,
            wakee: WakeeFlips::NEW,
            delayed: false,
            rel_deadline: false,
            delayed_v: 0,
        }
    }
}

/// A host CPU's run queue. `repr(C, align(64))`, in the order a switch
/// reads it: the queue, its sums and the flags `resched` reads in the first
/// cache line; what `schedule` and `update_curr` read at a switch and the
/// run-queue lock's holds in the second; the accounting's open interval and
/// running categories start the third (the cold rest after it).
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub struct Rq {
    /// Σ weight·vruntime (modulo 2^64: wrapping arithmetic) and Σ weight
    /// over `queue` (for `avg_vruntime`).
    pub queue_wv: i64,
    /// Runnable tasks other than `curr` (change it only through
    /// `queue_add`/`queue_remove`, which keep the two sums).
    pub queue: Vec<u32>,
    pub queue_w: i64,
    pub curr: Option<u32>,
    pub buddy: Option<u32>,
    /// `curr` is a vCPU in an exit handler (`Act::Exit`): `resched` reads
    /// this instead of the run queue -> task -> vCPU chain. Kept by
    /// `set_act`, `pause_act` and `exit_done`, the only ways in and out of
    /// `Act::Exit`.
    pub curr_in_exit: bool,
    pub need_resched: bool,
    pub tick_armed: bool,
    pub exec_start: Ns,
    /// When curr was picked (CFS: prev_sum_exec_runtime of check_preempt_tick).
    pub slice_start: Ns,
    /// EEVDF `Host.run_to_parity`: curr's `se->vprot`, its deadline when it
    /// was picked; curr keeps the CPU while eligible and vruntime < vprot.
    pub vprot: i64,
    pub switches: u64,
    /// Reserved hold intervals of the run-queue lock (start, end), sorted by start.
    pub lock_busy: Vec<(Ns, Ns)>,
    /// The latest end of a hold reserved in `lock_busy` (0 if none ever was):
    /// `double_rq_lock` reads it instead of the list's heap buffer when every
    /// hold is over, or ends before the instant it tries.
    pub lock_until: Ns,
    pub acct: Acct,
    /// When curr's trace row began (written at each switch, read when it ends).
    pub trace_start: Ns,
    pub last_v: i64,
    /// CFS: cfs_rq->min_vruntime, and the last and skip buddies (`buddy` is the next buddy).
    pub min_vruntime: i64,
    pub last: Option<u32>,
    pub skip: Option<u32>,
    /// When the CPU last went idle (for the idle state's exit latency).
    pub idle_since: Ns,
    /// Phase of this CPU's tick (`Host.tick_skew`), ns.
    pub tick_off: Ns,
    /// Next periodic balance of each domain level (core, LLC, machine), ns.
    pub lb_next: [Ns; 3],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitKind {
    /// `boost`: the yield target's task, queued on another host CPU, whose
    /// CPU is rescheduled when the handler ends (NO_TASK: none). A
    /// successful yield_to ends the handler, so the boost and the yielder's
    /// schedule() happen at the same instant; a target that another CPU's
    /// switch has started meanwhile is not boosted again (see `exit_done`).
    Ple {
        yielded: bool,
        boost: u32,
    },
    Halt,
    Hypercall {
        yielded: bool,
        boost: u32,
    },
    /// The host's switch to this vCPU thread (`Host.switch_ns`), or the
    /// return from a blocked halt (`Pv.halt_wake_ns`): the guest resumes
    /// when it ends.
    Switch,
    /// The wake bracket's exit of a vCPU running without a token after its
    /// halt (`Host.token_wake_exit_ns`): it asks for a token when it ends.
    TokenAsk,
}

/// Whose guest work an [`Act::Exec`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecWhat {
    /// The vCPU's current thread's phase.
    Thread,
    /// An IPI handler (`Vcpu::ipi_rem`).
    Ipi,
    /// The vCPU's start (`Vcpu::start_rem`, `Guest.vcpu_start_ns`).
    Start,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// Not running, or between activities.
    Off,
    /// Useful work of the current thread or of an IPI handler, at `pct`
    /// percent of the nominal speed (its CPU's speed when it was planned:
    /// `Host.smt_speed_pct` while a sibling is busy, `Host.speed`'s state).
    Exec { start: Ns, end: Ns, what: ExecWhat, pct: u32 },
    /// Spinning in guest kernel mode; `ple_at`/`pv_at` are the PLE-exit and
    /// SPIN_THRESHOLD instants (NEVER if not applicable).
    Spin { start: Ns, ple_at: Ns, pv_at: Ns },
    /// Guest idle polling before HLT.
    IdlePoll { start: Ns, end: Ns },
    /// In a host exit handler.
    Exit { end: Ns, kind: ExitKind },
    /// Host halt polling before blocking (kvm_vcpu_halt).
    HaltPoll { start: Ns, end: Ns },
}

/// Per-vCPU counters. `repr(C, align(64))`: the eight a pause-loop exit and
/// a context switch update share one cache line.
#[derive(Clone, Debug, Default)]
#[repr(C, align(64))]
pub struct VcpuCounters {
    pub ple_exits: u64,
    pub max_ple_window: u64,
    pub yield_attempts: u64,
    pub yield_ok: u64,
    pub yield_esrch: u64,
    pub yield_zero: u64,
    pub preemption_other: u64,
    pub sched_in: u64,
    /// Run tokens granted to it (vcpulab's schedulers, src/sim/tokens.rs; a
    /// slice renewed with nobody waiting is no grant), as the real
    /// scheduler's decision log counts them.
    pub token_grants: u64,
    pub preemption_reported: u64,
    pub directed_yield_attempted: u64,
    pub directed_yield_successful: u64,
    pub kicks: u64,
    pub ipis_sent: u64,
    /// Guest lock events (kernel lock model): halts in `pv_wait_node` /
    /// `pv_wait_head_or_lock`, of which early (predecessor not running),
    /// lock steals at slow-path entry, mutex spinners that left the OSQ, and
    /// TLB-shootdown targets skipped by PV TLB flush.
    pub pv_wait_node: u64,
    pub pv_wait_head: u64,
    pub pv_wait_early: u64,
    pub lock_steals: u64,
    pub osq_gave_up: u64,
    pub tlb_flush_skipped: u64,
    /// Threads the guest's load balancing pulled onto this vCPU.
    pub guest_pulls: u64,
    /// Guest idle polls (`Pv.guest_idle_poll_ns`) that ended because a
    /// thread was placed on the vCPU, and those that ran their window out
    /// and halted (an interrupted window goes on to its end: one outcome each).
    pub guest_idle_poll_hits: u64,
    pub guest_idle_poll_misses: u64,
}

/// A vCPU. `repr(C, align(64))` keeps the fields in this order, on cache
/// lines: what almost every event reads (activity, where it runs) in the
/// first (the activity's generation is `Sim::vgen`), the flags (all that a
/// directed-yield scan reads) and the PLE state in the second, the accounting's open interval and running
/// categories in the third, then the queues, the halt-polling state and
/// the counters (hot ones first).
/// The simulator is bound by memory accesses as much as by instructions.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub struct Vcpu {
    pub act: Act,
    pub running: Option<u32>,
    pub cur: Option<u32>,
    pub vm: u32,
    pub idx: u32,
    pub task: u32,
    pub last_cpu: u32,
    // kvm state ([K1]): every flag in the second cache line, so that a
    // directed-yield candidate's filter reads one line of its record
    pub preempted: bool,
    pub blocking: bool,
    /// Blocked on the host (not runnable).
    pub halted: bool,
    pub in_spin_loop: bool,
    pub dy_eligible: bool,
    pub preempted_in_kernel: bool,
    pub pv_unhalted: bool,
    pub posted_irq: bool,
    pub scheduled_out: bool,
    pub in_kernel: bool,
    /// The VM has posted interrupts (copied from its PvConfig).
    pub apicv: bool,
    // steal time ([K4])
    pub st_preempted: bool,
    pub ple_window: u64,
    /// Remaining time of the IPI handler in progress (0: none).
    pub ipi_rem: Ns,
    /// Remaining time of the vCPU's start (`Guest.vcpu_start_ns`).
    pub start_rem: Ns,
    /// The vCPU has run its start (set at its first step past it).
    pub started: bool,
    /// The VM's first vCPU waits for every other one's start
    /// (`Guest.vcpu0_waits_for_starts`) and has not seen them all yet.
    pub start_wait: bool,
    pub steal_ns: Ns,
    /// Preempted inside the poll loop: the poll deadline it resumes with.
    pub poll_resume: Option<Ns>,
    /// Interrupted inside the guest's idle poll (switched out, or an
    /// interrupt handler ran): what is left of its window, which it goes on
    /// polling when the guest is idle again (`Pv.guest_idle_poll_limit`).
    /// None once a thread runs.
    pub idle_poll_left: Option<PollLeft>,
    /// Cache-refill time still owed after a migration (`Host.migration_cold_*`):
    /// the next useful work of this vCPU starts with it, ns (read at every
    /// sched-in and end of work: in the second cache line).
    pub cold_ns: Ns,
    pub acct: Acct,
    // guest
    pub runq: VecDeque<u32>,
    /// Pending IPI handlers: the sending thread of each.
    pub ipis: VecDeque<u32>,
    // host halt polling ([K3]): kvm_vcpu_halt's window, halt in progress and stats
    pub hp: HaltPollState,
    pub c: VcpuCounters,
    /// The steal-time `is_idle` byte of the 2021 pcpu_is_idle RFC, as last
    /// written by the host (`Placement::PcpuIsIdleRfc*`).
    pub st_is_idle: bool,
    /// Guest load balancing: when this vCPU went idle (`rq->idle_stamp`) and
    /// its average idle period (`rq->avg_idle`).
    pub idle_stamp: Option<Ns>,
    pub avg_idle: Ns,
}

/// The directed-yield scan's candidate filter ([`crate::sim::policy::candidate_passes`])
/// as bit masks, one word per VM, bit `i` for the VM's vCPU `i` (VMs of up
/// to 64 vCPUs; larger ones are scanned one vCPU at a time). Kept up to
/// date by [`Sim::refresh_cand`](crate::sim::engine::Sim) wherever a flag
/// it reads is written, so that `kvm_vcpu_on_spin`'s pass visits only the
/// candidates that pass instead of branching on each of the VM's vCPUs (in
/// a yield storm most fail, unpredictably: the scan was an eighth of the
/// simulator's time). The debug build checks the masks against the filter
/// at every scan.
#[derive(Clone, Debug, Default)]
pub struct CandMasks {
    /// `ready` and (blocking ⇒ dy_runnable).
    pub base: Vec<u64>,
    /// `preempted` and not `preempted_in_kernel`: what the kernel-mode
    /// filter refuses, unless a pending interrupt exempts it.
    pub user: Vec<u64>,
    /// A pending posted interrupt (`apicv` and `posted_irq`).
    pub pi: Vec<u64>,
}

/// What is left of an interrupted guest idle poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollLeft {
    /// Its window ends at this instant (`IdlePollLimit::Clock`: `poll_idle`
    /// times itself with the guest's clock, which runs on meanwhile).
    Until(Ns),
    /// It polls this long more (`IdlePollLimit::Checks`: the checks left).
    For(Ns),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TState {
    Current,
    Ready,
    Blocked,
    Done,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// About to start phase `pc`.
    Begin,
    /// Executing `rem` ns of work; `hold` = the spinlock/mutex held meanwhile.
    Work { kernel: bool, hold: Option<u32> },
    /// Waiting for a lock.
    AwaitLock { lock: u32 },
    /// Waiting for IPI acknowledgements.
    IpiWait,
    /// Blocked until woken (barrier, sleep timer, message).
    Waiting,
}

/// A guest thread. `repr(C, align(64))`: what each step reads in the first
/// cache line, the per-iteration bookkeeping in the second.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub struct Thread {
    pub vm: u32,
    pub idx: u32,
    pub vcpu: u32,
    pub state: TState,
    pub pc: usize,
    pub step: Step,
    pub rem: Ns,
    /// Spin time accumulated on the current PV-lock wait (SPIN_THRESHOLD).
    pub spun: Ns,
    pub msgs: u32,
    pub acks: u32,
    /// PV node state: halted in pv_wait.
    pub pv_halted: bool,
    /// Kernel lock model: became the queue head since it last looked (its
    /// `pv_wait_head_or_lock` loop counts SPIN_THRESHOLD afresh).
    pub pv_new_head: bool,
    /// Kernel lock model: this acquisition's queue head has hashed the lock
    /// (`lp` in `pv_wait_head_or_lock`): it halts at most once per acquisition.
    pub pv_hashed: bool,
    /// Kernel lock model: spinning in the hybrid unfair trylock loop
    /// (listed in `Lock.unfair`, not in its queue).
    pub pv_unfair: bool,
    pub iter_start: Ns,
    pub iters: u64,
    pub wake_gen: u32,
    /// When the current Lock phase began (its wait for the lock starts here).
    pub lock_wait_start: Ns,
    /// When it last stopped running on a vCPU (`se.exec_start` for `task_hot`).
    pub last_ran: Ns,
    /// Its Lock phase takes an rwsem for reading; a waiting reader was granted it.
    pub rw_read: bool,
    pub rw_granted: bool,
    /// `record_wakee` state (`Guest.wake_wide`) of this thread as a waker.
    pub wakee: WakeeFlips,
    /// `p->recent_used_cpu`: the vCPU it was woken from last time.
    pub recent_used_cpu: u32,
    /// Waiting for or holding a lock taken with interrupts off (`Lock.irqs_off`).
    pub irqs_off: bool,
}

#[derive(Clone, Debug)]
pub struct Lock {
    pub kind: LockKind,
    pub holder: Option<u32>,
    pub waiters: VecDeque<u32>,
    pub acquisitions: u64,
    /// Kernel lock model: the PV qspinlock's locked byte is `_Q_SLOW_VAL`
    /// (a halted queue head is hashed; the unlock must kick it).
    pub slow: bool,
    /// Kernel lock model: the pending bit, set by the queue head while it
    /// spins in `pv_wait_head_or_lock` (kept if it is preempted there),
    /// cleared when it takes the lock or halts; no steal while it is set.
    pub pending: bool,
    /// Kernel lock model, `PvLockSteal::Hybrid`: the threads spinning in
    /// `pv_hybrid_queued_unfair_trylock` (not queued), in arrival order.
    pub unfair: Vec<u32>,
    /// A reader-writer semaphore's active readers (its writer is `holder`).
    pub readers: u32,
}

pub struct Vm {
    pub cfg: VmConfig,
    pub group: u32,
    pub vcpu0: u32,
    pub nvcpu: u32,
    pub thread0: u32,
    pub nthread: u32,
    pub locks: Vec<Lock>,
    pub barrier_waiting: Vec<u32>,
    /// `Phase::TaskQueue`: tasks left in this frame, frames ended, and the
    /// threads that found the queue empty (waiting for the frame's end).
    pub tq_left: u32,
    pub tq_frames: u32,
    pub tq_waiting: Vec<u32>,
    pub last_boosted: usize,
    pub policy: Box<dyn DirectedYieldPolicy>,
    /// `policy.as_upstream()`, asked once: the built-in upstream policy is
    /// stateless and runs with static dispatch.
    pub upstream: Option<Upstream>,
    pub ops: u64,
    pub latencies: Vec<Ns>,
    /// Lock waits (Lock phase start → the thread runs holding the lock), log-linear histogram.
    pub lock_waits: Vec<Ns>,
    pub done_threads: u32,
    pub finished_at: Option<Ns>,
    /// PLE windows (cycles) already converted to ns: (window, ns) at index
    /// `window.leading_zeros()` ((0, 0) when empty, which is also right for a
    /// window of 0). A window grows by doubling from its base, so each size
    /// has its own entry and a spin start needs no division.
    pub ple_ns: [(u64, Ns); 64],
    pub spin_threshold_ns: Ns,
    /// `cfg.halt_poll` as the shared halt-polling state machine reads it.
    pub halt_poll: HaltPollConfig,
    /// Guest load balancing: a `GuestBalance` event is queued; the next
    /// instant a nohz idle balance may run (`nohz.next_balance`).
    pub lb_pending: bool,
    pub nohz_next: Ns,
}

/// No vCPU (`Sim::pre_run_vcpu`).
pub const NO_VCPU: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WakeReason {
    Start,
    /// PV kick (KVM_HC_KICK_CPU): sets pv_unhalted.
    Kick,
    /// An IPI (call-function or reschedule): a posted interrupt with APICv.
    Ipi,
    /// A timer: not dy_runnable.
    Timer,
}

pub fn cycles_to_ns(cycles: u64, tsc_khz: u64) -> Ns {
    // cycles / (khz * 1e3) s = cycles * 1e6 / khz ns
    match cycles.checked_mul(1_000_000) {
        Some(x) => x.div_ceil(tsc_khz),
        None => ((cycles as u128 * 1_000_000u128).div_ceil(tsc_khz as u128)).min(u64::MAX as u128 / 4) as Ns,
    }
}

/// The host's CPU topology, as the scheduler's placement reads it.
#[derive(Clone, Debug, Default)]
pub struct Topology {
    /// Cores in the machine (`Host.n_pcpus / threads_per_core`).
    pub ncores: u32,
    /// Cores per socket (one LLC per socket).
    pub cores_per_socket: u32,
    /// The CPUs of each LLC (socket), ascending.
    pub llc_list: Vec<Vec<u32>>,
    /// Busy SMT siblings slow each other down (threads_per_core > 1 and smt_speed_pct < 100).
    pub smt_slow: bool,
}

/// The CFS tunables after the kernel's scaling by the CPU count
/// (`sched_update_scaling`, kernel/sched/fair.c), ns.
#[derive(Clone, Copy, Debug, Default)]
pub struct CfsTunables {
    pub latency_ns: u64,
    pub min_granularity_ns: u64,
    pub wakeup_granularity_ns: u64,
}

/// Gang scheduling's state: the rounds (groups of vCPU threads run together),
/// the round now running, and per task / per CPU who is in it.
#[derive(Clone, Debug, Default)]
pub struct Gang {
    pub rounds: Vec<Vec<u32>>,
    pub round: usize,
    pub active: Vec<bool>,
    pub cpu: Vec<u32>,
}

/// The run tokens of `Scheduler::RoundRobin` (vcpulab's scheduler, src/sim/tokens.rs).
#[derive(Clone, Debug, Default)]
pub struct Tokens {
    /// Per host CPU: the vCPU task holding its token (None: the token is free).
    pub holder: Vec<Option<u32>>,
    /// Per host CPU: the generation of its slice timer (a stale `Ev::Token` is ignored).
    pub gen: Vec<u32>,
    /// Runnable vCPU tasks waiting for a token (parked), oldest first: one
    /// queue, or one per CPU under `Scheduler::Balance` and `Scheduler::Pinned`
    /// (a vCPU waits in its home CPU's).
    pub queues: Vec<VecDeque<u32>>,
    /// Per task: its home CPU (`Scheduler::Balance`, `Scheduler::Pinned`; empty otherwise).
    pub home: Vec<u32>,
    /// Per task: its token-holding time before the current stint, and when
    /// that stint began (`Scheduler::RelaxedCo`'s skew is measured in it).
    pub run_ns: Vec<Ns>,
    pub granted_at: Vec<Ns>,
    /// Per task: a vCPU woken from a halt that runs without a token until
    /// its wake bracket's exit asks for one (`Host.token_wake_exit_ns`), or
    /// one that gave its token up at its halt bracket
    /// (`Host.token_halt_bracket`); empty when neither is on.
    pub unheld: Vec<bool>,
    /// Per task: the CPU of the last token it held (`NO_CPU` before its
    /// first): with one queue, `token_dispatch_idle` gives it that CPU's
    /// token when it is free, as the real `dispatch_idle` does.
    pub last_cpu: Vec<u32>,
    /// How many vCPU threads have arrived (their first enqueue): no token
    /// is given before every one has, as the real `Scheduler::start`.
    pub arrived: u32,
    /// The decision in progress, for its log rows (`Result.schedule`): its
    /// reason, and the task that gave a token up in it (NO_TASK: none; the
    /// next grant of that token names it, as the real `hand_on` does).
    pub log_why: crate::schedule::Why,
    pub log_out: u32,
    /// Per host CPU: its factor on `Host.token_slice_exit_ns` for the run
    /// (`Host.token_slice_exit_cpu_spread`; empty when that is 0).
    pub exit_factor: Vec<f64>,
}

/// What the wake-up or enqueue in progress needs to know about where it
/// comes from; set around the call that makes it.
#[derive(Clone, Copy, Debug)]
pub struct WakeCtx {
    /// The CPU the event being handled runs on (the waker of a wake-up it
    /// makes), NO_CPU if none; kept only with `WakePlacement::SelectTaskRqFair`.
    pub waker_cpu: u32,
    /// The task that makes the wake-ups of the event being handled
    /// (`current`: the vCPU thread of a vCPU event, the task running on the
    /// CPU of a tick or resched), u32::MAX if none; kept only with `Host.wake_wide`.
    pub waker_task: u32,
    /// The enqueue in progress is a new thread's first (`Host.start_gap_ns`
    /// arrivals): EEVDF places it with half a slice to its deadline.
    pub enqueue_initial: bool,
    /// The enqueue in progress is a vCPU thread's first (`WakeReason::Start`,
    /// with or without `Host.start_gap_ns`): the kernel places a new task in
    /// `wake_up_new_task` → `select_task_rq(.., WF_FORK)` → `find_idlest_cpu`
    /// (kernel/sched/core.c, fair.c), not by the wake-up path's
    /// `wake_affine` / `select_idle_sibling`. Threads created in turn fill
    /// the CPUs evenly; the start map (`Host.start_placement`, `Affinity`)
    /// stands for that result, so the first enqueue keeps the task's start
    /// CPU. (Placing the start through the wake-up path, in index order,
    /// gave the first-woken VMs CPUs of their own and stacked the last
    /// ones: 2012 era, 8 x 20 unpinned, VMs 0 and 1 had 1.5-1.7x the mean
    /// throughput in every seed.)
    pub enqueue_new: bool,
    /// Set by a successful yield_to: the target's task, if it waits on
    /// another CPU than the yielder's (NO_TASK: none).
    pub boost_task: u32,
}

impl Default for WakeCtx {
    fn default() -> Self {
        WakeCtx {
            waker_cpu: NO_CPU,
            waker_task: u32::MAX,
            enqueue_initial: false,
            enqueue_new: false,
            boost_task: NO_TASK,
        }
    }
}

// ------------------------------------------------ CFS task groups (cfs_group.rs)

/// `tg->shares` of a VM's group: the cgroup's default cpu.shares, 1024
/// (`ROOT_TASK_GROUP_LOAD`, kernel/sched/sched.h); libvirt keeps it unless
/// `<cputune><shares>` is set.
pub const GROUP_SHARES: u64 = NICE0;
/// One VM's task group on one host CPU: its group entity on the CPU's root
/// run queue and its own run queue, under CFS (`Cfs.vm_groups`,
/// src/sim/cfs_group.rs) or EEVDF (`Host.vm_groups`, src/sim/eevdf_group.rs).
#[derive(Clone, Debug)]
pub struct TaskGroup {
    /// The group entity's vruntime, in the root run queue's virtual time.
    pub vruntime: i64,
    /// The group entity's weight (`calc_group_shares`).
    pub weight: u64,
    /// The instant the group entity was last picked after another root
    /// entity (`prev_sum_exec_runtime`, as a time).
    pub slice_start: Ns,
    /// The group run queue's load: the weights of its runnable tasks.
    pub load: u64,
    /// The group run queue's runnable tasks (queued and curr).
    pub nr_running: u32,
    pub min_vruntime: i64,
    /// The group run queue's next, last and skip buddies (task ids).
    pub next: Option<u32>,
    pub last: Option<u32>,
    pub skip: Option<u32>,
    /// EEVDF: the group entity's virtual deadline and its lag (`vlag`,
    /// V - vruntime, saved when the group leaves the root run queue).
    pub deadline: i64,
    pub vlag: i64,
    /// EEVDF `Host.run_to_parity`: the `vprot` of the group run queue's
    /// curr task (the root's is `Rq::vprot`).
    pub vprot: i64,
    /// EEVDF: the group run queue's V when it last had entities (its V
    /// while empty, as `Rq::last_v`).
    pub last_v: i64,
    /// EEVDF `Host.delay_dequeue`: the group entity left the root with
    /// negative lag when the root's V was `delayed_v` (as `Task::delayed`).
    pub delayed: bool,
    pub delayed_v: i64,
    /// `Host.group_load_half_life_ns`: the group run queue's load average
    /// (PELT's `cfs_rq->avg.load_avg`, in weight units) as of `avg_at`.
    pub load_avg: f64,
    pub avg_at: Ns,
}

/// The task groups of a run (empty when `Cfs.vm_groups` and `Host.vm_groups` are off).
#[derive(Clone, Debug, Default)]
pub struct TaskGroups {
    pub on: bool,
    /// Host CPUs (group `g` is VM `g / n_pcpus` on CPU `g % n_pcpus`).
    pub n_pcpus: usize,
    pub g: Vec<TaskGroup>,
    /// Per VM: the group's load over every CPU, now (the instantaneous
    /// `tg->load_avg` of `Host.group_load_half_life_ns = 0`).
    pub tg_load: Vec<u64>,
    /// Per VM: the sum of its groups' load averages as each CPU last
    /// updated it (`tg->load_avg`, each CPU's `tg_load_avg_contrib`).
    pub tg_load_avg: Vec<f64>,
    /// `Host.group_load_half_life_ns`, ns (0: the load now).
    pub half_life_ns: u64,
    /// With a half-life, per task (vCPU threads only): its own load average
    /// (`se->avg.load_avg`) as of `task_avg_at`, whether it was runnable
    /// since then, and the CPU whose group's average holds it (u32::MAX:
    /// none yet). A group's `load_avg` is the sum of its attached tasks'.
    pub task_avg: Vec<f64>,
    pub task_avg_at: Vec<Ns>,
    pub task_avg_runnable: Vec<bool>,
    pub task_avg_cpu: Vec<u32>,
    /// Per CPU: the VMs whose group entity is on the root cfs_rq.
    pub queued: Vec<Vec<u32>>,
}

impl TaskGroups {
    pub fn new(nvm: usize, n_pcpus: usize) -> TaskGroups {
        let g = TaskGroup {
            vruntime: 0,
            weight: GROUP_SHARES,
            slice_start: 0,
            load: 0,
            nr_running: 0,
            min_vruntime: 0,
            next: None,
            last: None,
            skip: None,
            deadline: 0,
            vlag: 0,
            vprot: i64::MIN,
            last_v: 0,
            delayed: false,
            delayed_v: 0,
            load_avg: 0.0,
            avg_at: 0,
        };
        TaskGroups {
            on: true,
            n_pcpus,
            g: vec![g; nvm * n_pcpus],
            tg_load: vec![0; nvm],
            tg_load_avg: vec![0.0; nvm],
            half_life_ns: 0,
            task_avg: Vec::new(),
            task_avg_at: Vec::new(),
            task_avg_runnable: Vec::new(),
            task_avg_cpu: Vec::new(),
            queued: vec![Vec::new(); n_pcpus],
        }
    }
}

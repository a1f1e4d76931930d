//! The discrete-event core: state of the host, vCPUs and guest threads, the
//! event queue in integer nanoseconds, accounting, and the main loop.
//!
//! Host scheduling lives in `sched.rs`, guest behaviour in `guest.rs`, pause-loop
//! exits and directed yield in `ple.rs`; all are `impl Sim` blocks over the
//! state defined here.

use std::collections::VecDeque;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use super::config::{Affinity, Dist, LockKind, Phase, Scheduler, SimConfig, StartPlacement, VmConfig, WakePlacement};
use super::halt_poll::{HaltPollConfig, HaltPollState};
use super::policy::{DirectedYieldPolicy, Upstream};
use super::trace::TraceRec;
use super::SimError;

pub type Ns = u64;
pub const NEVER: Ns = u64::MAX;
pub const NICE0: u64 = 1024;
pub const NO_CPU: u32 = u32::MAX;

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
}

impl Why {
    /// Every reason, in the order of their codes (`Why as u8`): the trace's
    /// `why` column is these names indexed by code.
    pub const ALL: [Why; 10] = [
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
    ];
    pub fn at_instruction_boundary(self) -> bool {
        matches!(self, Why::Tick | Why::Wakeup | Why::Boost | Why::Gang)
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
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ev {
    Tick(u32),
    /// A vCPU's current activity reaches its planned end (generation-checked).
    Vcpu(u32, u32),
    /// Re-evaluate a running vCPU (a condition it waits on may have changed).
    Poke(u32),
    BgEnd(u32, u32),
    BgWake(u32),
    ThreadWake(u32, u32),
    Resched(u32, Why),
    Gang,
    /// A guest tick of a VM with stacked threads: nohz idle balancing (`Guest.load_balance`).
    GuestBalance(u32),
    /// A vCPU thread arrives (`Host.start_gap_ns`): its first wake-up.
    Start(u32),
}

/// How often a run asks its caller whether to stop (Ctrl-C), in wall time:
/// an event costs 0.1 µs in a light run and several µs in a yield storm, so a
/// count of events alone bounds nothing (2^18 events took up to 1.5 s).
pub const POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(10);
/// Events between two looks at the clock (a few µs of work at most between them).
const POLL_EVERY_EVENTS: u64 = 1 << 10;

/// When the next interrupt poll is due; results never depend on it.
struct Poll {
    next: std::time::Instant,
}

impl Poll {
    fn new() -> Self {
        Poll { next: std::time::Instant::now() + POLL_INTERVAL }
    }

    /// True once per [`POLL_INTERVAL`].
    #[inline]
    fn due(&mut self) -> bool {
        let now = std::time::Instant::now();
        if now < self.next {
            return false;
        }
        self.next = now + POLL_INTERVAL;
        true
    }
}

/// A queued event. `key` is (time, seq) as one 128-bit number: one integer
/// comparison orders two entries, and keys are unique (seq is).
#[derive(Clone, Copy)]
struct Entry {
    key: u128,
    ev: Ev,
}
impl Entry {
    #[inline]
    fn time(&self) -> Ns {
        (self.key >> 64) as Ns
    }
}
// `BinaryHeap` is a max-heap: order entries by reversed key.
impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.key == o.key
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        o.key.cmp(&self.key)
    }
}

/// Width of a bucket of the event queue's ring, log2 ns (32 ns).
const BUCKET_SHIFT: u32 = 5;
/// Buckets in the ring (a power of two): it spans 4096 × 32 ns ≈ 131 µs.
const NBUCKETS: usize = 4096;
const NIL: u32 = u32::MAX;

/// An entry of the ring, linked to the next one of its bucket.
#[derive(Clone, Copy)]
struct Node {
    key: u128,
    ev: Ev,
    next: u32,
}

/// The event queue: a calendar queue. Entries due within the ring's span
/// (`NBUCKETS` buckets of 2^`BUCKET_SHIFT` ns from bucket `cur`, when they are
/// pushed) go to the bucket of their time, a list kept sorted by key; later
/// ones go to a binary heap (`far`). Pushing near events (almost all of
/// them: exits, spins, hand-offs) and popping cost O(1) instead of a heap's
/// O(log n) sift; a bitmap finds the first non-empty bucket.
///
/// Keys are unique, so it pops exactly the (time, seq) order of any correct
/// priority queue: the earliest entry is the smaller of the first non-empty
/// bucket's head and the heap's top. `cur` is the bucket of the last popped
/// entry; no entry or later push is earlier (times never go backwards), so
/// every ring entry lies in [cur, cur + NBUCKETS) and the slots, scanned
/// cyclically from `cur`, come in time order.
struct EventQueue {
    /// Ring entries; a popped node goes to the free list (`free`, through `next`).
    nodes: Vec<Node>,
    free: u32,
    /// First node of each bucket (NIL: empty), and one bit per non-empty bucket.
    head: Vec<u32>,
    occupied: [u64; NBUCKETS / 64],
    /// Entries in the ring.
    near: usize,
    cur: u64,
    far: std::collections::BinaryHeap<Entry>,
}
impl Default for EventQueue {
    fn default() -> Self {
        EventQueue {
            nodes: Vec::new(),
            free: NIL,
            head: vec![NIL; NBUCKETS],
            occupied: [0; NBUCKETS / 64],
            near: 0,
            cur: 0,
            far: std::collections::BinaryHeap::new(),
        }
    }
}
impl EventQueue {
    // Always inlined: out of line, its prologue and epilogue (saving and
    // restoring registers) were a quarter of its instructions (callgrind);
    // inlined, 8 × 20 under PLE runs ~4 % faster.
    #[inline(always)]
    fn push(&mut self, time: Ns, seq: u64, ev: Ev) {
        let key = ((time as u128) << 64) | seq as u128;
        let b = time >> BUCKET_SHIFT;
        debug_assert!(b >= self.cur, "an event before the last popped one");
        if b - self.cur >= NBUCKETS as u64 {
            self.far.push(Entry { key, ev });
            return;
        }
        let node = Node { key, ev, next: NIL };
        let n = if self.free != NIL {
            let n = self.free;
            self.free = self.nodes[n as usize].next;
            self.nodes[n as usize] = node;
            n
        } else {
            self.nodes.push(node);
            (self.nodes.len() - 1) as u32
        };
        let slot = b as usize & (NBUCKETS - 1);
        // sorted insertion; a new entry usually goes last (seq grows)
        let (mut prev, mut at) = (NIL, self.head[slot]);
        while at != NIL && self.nodes[at as usize].key < key {
            prev = at;
            at = self.nodes[at as usize].next;
        }
        self.nodes[n as usize].next = at;
        if prev == NIL {
            self.head[slot] = n;
            self.occupied[slot / 64] |= 1 << (slot % 64);
        } else {
            self.nodes[prev as usize].next = n;
        }
        self.near += 1;
    }
    /// The first non-empty slot of the ring, scanning cyclically from `cur`.
    #[inline]
    fn first_slot(&self) -> Option<usize> {
        if self.near == 0 {
            return None;
        }
        const WORDS: usize = NBUCKETS / 64;
        let s = self.cur as usize & (NBUCKETS - 1);
        let (w0, bit) = (s / 64, s % 64);
        let m = self.occupied[w0] & (!0u64 << bit);
        if m != 0 {
            return Some(w0 * 64 + m.trailing_zeros() as usize);
        }
        for i in 1..=WORDS {
            let w = (w0 + i) % WORDS;
            let m = self.occupied[w];
            if m != 0 {
                // at i == WORDS (w == w0) only the bits below `bit` are left
                return Some(w * 64 + m.trailing_zeros() as usize);
            }
        }
        unreachable!("near > 0 means a non-empty bucket")
    }
    /// Remove and return the earliest entry if its time is before `limit`.
    #[inline]
    fn pop_before(&mut self, limit: Ns) -> Option<Entry> {
        let slot = self.first_slot();
        let near_key = slot.map(|s| self.nodes[self.head[s] as usize].key);
        let far_key = self.far.peek().map(|e| e.key);
        let from_ring = match (near_key, far_key) {
            (Some(n), Some(f)) => n < f,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return None,
        };
        let e = if from_ring {
            let (s, key) = (slot.expect("near"), near_key.expect("near"));
            if (key >> 64) as Ns >= limit {
                return None;
            }
            let n = self.head[s];
            let node = self.nodes[n as usize];
            self.head[s] = node.next;
            // clear the bucket's bit if it is now empty (without a branch)
            self.occupied[s / 64] &= !(((node.next == NIL) as u64) << (s % 64));
            self.nodes[n as usize].next = self.free;
            self.free = n;
            self.near -= 1;
            Entry { key, ev: node.ev }
        } else {
            if (far_key.expect("far") >> 64) as Ns >= limit {
                return None;
            }
            self.far.pop().expect("far")
        };
        self.cur = e.time() >> BUCKET_SHIFT;
        Some(e)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskKind {
    Vcpu(u32),
    Bg(u32),
    /// Host noise (`HostNoise`): index into `Sim.noise_src`.
    Noise(u32),
}

/// A host thread (vCPU thread or background task) as the fair scheduler sees it.
///
/// `repr(C, align(64))`: the scheduler's fields fill the first cache line.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub struct Task {
    pub kind: TaskKind,
    /// The run queue it belongs to (or last ran on).
    pub cpu: u32,
    /// Runnable (on its run queue, current, or parked by the gang scheduler).
    pub runnable: bool,
    /// Gang mode: runnable but its VM is not in the current round.
    pub parked: bool,
    pub weight: u64,
    pub vruntime: i64,
    pub deadline: i64,
    /// The virtual slice, base_slice_ns·1024/weight (weights never change).
    pub vslice: i64,
    pub vlag: i64,
    pub wait_since: Ns,
    /// Total runnable-but-waiting time (sched_info.run_delay).
    pub run_delay: Ns,
    pub pinned: Option<u32>,
    // background task state
    pub bg_rem: Ns,
    pub bg_start: Ns,
    pub bg_gen: u32,
    /// Rank among equal scheduling keys: the task index, or a seeded random
    /// number with `Host.seeded_ties`.
    pub tie: u32,
    /// When it last stopped running (`task_hot`'s exec_start).
    pub last_ran: Ns,
    /// `record_wakee` state (`Host.wake_wide`): how often this task, as a
    /// waker, switched wakees (halved every second), and its last wakee.
    pub wakee_flips: u32,
    pub last_wakee: u32,
    pub wakee_flip_decay_ts: Ns,
}

impl Task {
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
            wakee_flips: 0,
            last_wakee: u32::MAX,
            wakee_flip_decay_ts: 0,
        }
    }
}

/// A host CPU's run queue. `repr(C, align(64))`: the queue and its sums in
/// the first cache line, the accounting's open interval and running
/// categories in the second.
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
    pub acct: Acct,
    pub exec_start: Ns,
    /// Reserved hold intervals of the run-queue lock (start, end), sorted by start.
    pub lock_busy: Vec<(Ns, Ns)>,
    pub need_resched: bool,
    pub tick_armed: bool,
    pub last_v: i64,
    pub trace_start: Ns,
    pub switches: u64,
    /// CFS: cfs_rq->min_vruntime, and the last and skip buddies (`buddy` is the next buddy).
    pub min_vruntime: i64,
    pub last: Option<u32>,
    pub skip: Option<u32>,
    /// When curr was picked (CFS: prev_sum_exec_runtime of check_preempt_tick).
    pub slice_start: Ns,
    /// EEVDF `Host.run_to_parity`: curr's `se->vprot`, its deadline when it
    /// was picked; curr keeps the CPU while eligible and vruntime < vprot.
    pub vprot: i64,
    /// When the CPU last went idle (for the idle state's exit latency).
    pub idle_since: Ns,
    /// Phase of this CPU's tick (`Host.tick_skew`), ns.
    pub tick_off: Ns,
    /// Next periodic balance of each domain level (core, LLC, machine), ns.
    pub lb_next: [Ns; 3],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitKind {
    /// `boost`: the target's host CPU to reschedule when the handler ends
    /// (NO_CPU: none). A successful yield_to ends the handler, so the boost
    /// and the yielder's schedule() happen at the same instant.
    Ple {
        yielded: bool,
        boost: u32,
    },
    Halt,
    Hypercall {
        yielded: bool,
        boost: u32,
    },
    /// The host's switch to this vCPU thread (`Host.switch_ns`): the guest
    /// resumes when it ends.
    Switch,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// Not running, or between activities.
    Off,
    /// Useful work of the current thread or of an IPI handler; `slow`: at
    /// the SMT speed (`Host.smt_speed_pct`: a sibling was busy when it started).
    Exec { start: Ns, end: Ns, ipi: bool, slow: bool },
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
}

/// A vCPU. `repr(C, align(64))` keeps the fields in this order, on cache
/// lines: what almost every event reads (activity, generation, where it
/// runs) in the first, the flags a directed-yield scan reads and the PLE
/// state in the second, the accounting's open interval and running
/// categories in the third, then the queues, the halt-polling state and
/// the counters (hot ones first).
/// The simulator is bound by memory accesses as much as by instructions.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub struct Vcpu {
    pub act: Act,
    pub running: Option<u32>,
    pub cur: Option<u32>,
    pub gen: u32,
    pub vm: u32,
    pub idx: u32,
    pub task: u32,
    // kvm state ([K1])
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
    pub last_cpu: u32,
    pub ple_window: u64,
    /// Remaining time of the IPI handler in progress (0: none).
    pub ipi_rem: Ns,
    pub steal_ns: Ns,
    /// Preempted inside the poll loop: the poll deadline it resumes with.
    pub poll_resume: Option<Ns>,
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
    /// Cache-refill time still owed after a migration (`Host.migration_cold_*`):
    /// the next useful work of this vCPU starts with it, ns.
    pub cold_ns: Ns,
    /// Guest load balancing: when this vCPU went idle (`rq->idle_stamp`) and
    /// its average idle period (`rq->avg_idle`).
    pub idle_stamp: Option<Ns>,
    pub avg_idle: Ns,
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

pub struct Sim {
    pub cfg: SimConfig,
    pub now: Ns,
    pub end: Ns,
    queue: EventQueue,
    seq: u64,
    pub events: u64,
    pub rng: Pcg64Mcg,
    pub tasks: Vec<Task>,
    pub rqs: Vec<Rq>,
    pub vcpus: Vec<Vcpu>,
    /// `vcpu->ready` of each vCPU (preempted, or woken from a halt and not
    /// yet running), apart from `Vcpu` in a dense array: the directed-yield
    /// scan reads it for every candidate and rejects most of them on it.
    pub ready: Vec<bool>,
    pub threads: Vec<Thread>,
    pub vms: Vec<Vm>,
    pub trace: Vec<TraceRec>,
    /// Most trace rows a run may keep (the caller's limit; see `SimError::TraceLimit`).
    pub trace_max_rows: u64,
    /// Set when the trace hit `trace_max_rows` or could not grow; ends the run.
    pub trace_error: Option<SimError>,
    pub gang_rounds: Vec<Vec<u32>>,
    pub gang_round: usize,
    pub gang_active: Vec<bool>,
    pub gang_cpu: Vec<u32>,
    pub error: Option<String>,
    pub vms_with_goal: u32,
    pub vms_done: u32,
    started: bool,
    immediate: VecDeque<Ev>,
    /// Set by a successful yield_to: the target's CPU, if it differs.
    pub boost_cpu: u32,
    /// Set when the model cannot advance (a zero-time cycle).
    pub stuck: Option<String>,
    /// Some task may run on any CPU (newidle balancing is on).
    pub any_unpinned: bool,
    /// Per host CPU: the vCPU that last entered the guest there
    /// (`this_cpu_pre_run_vcpu` of the 2021 pcpu_is_idle RFC; NO_VCPU if none).
    pub pre_run_vcpu: Vec<u32>,
    same_time: u64,
    /// The second RNG stream, for the host-model options (ties, wake-up
    /// jitter, noise): with them off it is never drawn, and the main
    /// stream's draws are the same as without them.
    pub rng2: Pcg64Mcg,
    /// Host noise sources: (mean sleep, mean burst) ns of each `TaskKind::Noise`.
    pub noise_src: Vec<(Ns, Ns)>,
    /// CFS tunables after scaling, ns: sched_latency, min_granularity, wakeup_granularity.
    pub cfs_latency: u64,
    pub cfs_min_gran: u64,
    pub cfs_wakeup_gran: u64,
    /// `Host.wakeup_ipi_ns > 0` or idle states given.
    pub wake_latency: bool,
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
    /// Topology: cores in the machine, cores per socket (LLC).
    pub ncores: u32,
    pub cores_per_socket: u32,
    /// The CPU the event being handled runs on (the waker of a wake-up it
    /// makes), NO_CPU if none; kept only with `WakePlacement::SelectTaskRqFair`.
    pub waker_cpu: u32,
    /// The task that makes the wake-ups of the event being handled
    /// (`current`: the vCPU thread of a vCPU event, the task running on the
    /// CPU of a tick or resched), u32::MAX if none; kept only with `Host.wake_wide`.
    pub waker_task: u32,
    /// Earliest instant of the next nohz idle-balance kick.
    pub nohz_next: Ns,
    /// Busy SMT siblings slow each other down (threads_per_core > 1 and smt_speed_pct < 100).
    pub smt_slow: bool,
    /// The CPUs of each LLC (socket), ascending.
    pub llc_list: Vec<Vec<u32>>,
}

pub type PolicyMaker<'a> = &'a dyn Fn(usize, &VmConfig) -> Result<Box<dyn DirectedYieldPolicy>, String>;

impl Sim {
    pub fn new(cfg: &SimConfig, make_policy: PolicyMaker<'_>) -> Result<Sim, String> {
        cfg.validate()?;
        let p = cfg.host.pcpus;
        let mut rng = Pcg64Mcg::seed_from_u64(cfg.seed);
        let mut sim = Sim {
            cfg: cfg.clone(),
            now: 0,
            end: cfg.duration_ns,
            queue: EventQueue::default(),
            seq: 0,
            events: 0,
            rng: Pcg64Mcg::seed_from_u64(0),
            tasks: Vec::new(),
            rqs: (0..p)
                .map(|_| Rq {
                    queue: Vec::new(),
                    queue_w: 0,
                    queue_wv: 0,
                    curr: None,
                    buddy: None,
                    curr_in_exit: false,
                    exec_start: 0,
                    last_v: 0,
                    lock_busy: Vec::new(),
                    tick_armed: false,
                    need_resched: false,
                    acct: Acct::new(C_IDLE),
                    trace_start: 0,
                    switches: 0,
                    min_vruntime: 0,
                    last: None,
                    skip: None,
                    slice_start: 0,
                    vprot: i64::MIN,
                    idle_since: 0,
                    tick_off: 0,
                    lb_next: [0; 3],
                })
                .collect(),
            vcpus: Vec::new(),
            ready: Vec::new(),
            threads: Vec::new(),
            vms: Vec::new(),
            trace: Vec::new(),
            trace_max_rows: u64::MAX,
            trace_error: None,
            gang_rounds: Vec::new(),
            gang_round: 0,
            gang_active: Vec::new(),
            gang_cpu: Vec::new(),
            error: None,
            vms_with_goal: 0,
            vms_done: 0,
            started: false,
            immediate: VecDeque::new(),
            boost_cpu: NO_CPU,
            stuck: None,
            any_unpinned: false,
            pre_run_vcpu: vec![NO_VCPU; p as usize],
            same_time: 0,
            rng2: Pcg64Mcg::seed_from_u64(cfg.seed ^ 0x9e37_79b9_7f4a_7c15),
            noise_src: Vec::new(),
            cfs_latency: 0,
            cfs_min_gran: 0,
            cfs_wakeup_gran: 0,
            wake_latency: cfg.host.wakeup_ipi_ns > 0 || !cfg.host.idle_states.is_empty(),
            enqueue_initial: false,
            enqueue_new: false,
            ncores: 1,
            cores_per_socket: 1,
            waker_cpu: NO_CPU,
            waker_task: u32::MAX,
            nohz_next: 0,
            smt_slow: cfg.host.threads_per_core > 1 && cfg.host.smt_speed_pct < 100,
            llc_list: Vec::new(),
        };
        sim.ncores = (p / cfg.host.threads_per_core).max(1);
        sim.cores_per_socket = (sim.ncores / cfg.host.sockets).max(1);
        sim.llc_list = vec![Vec::new(); cfg.host.sockets as usize];
        for cpu in 0..p {
            let s = (cpu % sim.ncores) / sim.cores_per_socket;
            sim.llc_list[(s as usize).min(cfg.host.sockets as usize - 1)].push(cpu);
        }
        if cfg.host.tick_skew {
            // tick_setup_sched_timer with sched_skew_tick: (TICK_NSEC >> 1) / nr_cpus · cpu
            let step = (cfg.host.tick_ns >> 1) / p as u64;
            for (cpu, rq) in sim.rqs.iter_mut().enumerate() {
                rq.tick_off = step * cpu as u64;
            }
        }
        let f = cfg.host.cfs.factor(p);
        sim.cfs_latency = cfg.host.cfs.latency_ns * f;
        sim.cfs_min_gran = cfg.host.cfs.min_granularity_ns * f;
        sim.cfs_wakeup_gran = cfg.host.cfs.wakeup_granularity_ns * f;
        // Placement of vCPU threads.
        let total = cfg.total_vcpus() as usize;
        let shuffled_start = cfg.host.start_placement == StartPlacement::Shuffled;
        let pins: Vec<u32> = match cfg.host.affinity {
            _ if !cfg.host.vcpu_pcpus.is_empty() => {
                let l = &cfg.host.vcpu_pcpus;
                (0..total).map(|g| l[g % l.len()]).collect()
            }
            Affinity::All if shuffled_start => shuffled_slots(total, p, &mut rng),
            Affinity::RoundRobin | Affinity::All => (0..total).map(|g| (g as u32) % p).collect(),
            Affinity::Pinned => shuffled_slots(total, p, &mut rng),
        };
        let mut g = 0usize;
        for (group, vmc) in cfg.vms.iter().enumerate() {
            for _ in 0..vmc.count {
                let vm_id = sim.vms.len() as u32;
                let nthread = if vmc.threads == 0 { vmc.vcpus } else { vmc.threads };
                let vcpu0 = sim.vcpus.len() as u32;
                let thread0 = sim.threads.len() as u32;
                let halt_poll = vmc.halt_poll.clone();
                for i in 0..vmc.vcpus {
                    let cpu = pins[g];
                    g += 1;
                    let task = sim.tasks.len() as u32;
                    let pinned = if cfg.host.affinity == Affinity::All { None } else { Some(cpu) };
                    sim.tasks.push(Task::new(
                        TaskKind::Vcpu(vcpu0 + i),
                        vmc.weight,
                        cfg.host.base_slice_ns,
                        cpu,
                        pinned,
                    ));
                    sim.vcpus.push(Vcpu {
                        vm: vm_id,
                        idx: i,
                        task,
                        running: None,
                        last_cpu: cpu,
                        preempted: false,
                        blocking: true,
                        halted: true,
                        in_spin_loop: false,
                        dy_eligible: false,
                        preempted_in_kernel: false,
                        pv_unhalted: false,
                        posted_irq: false,
                        scheduled_out: false,
                        in_kernel: false,
                        apicv: vmc.pv.apicv,
                        st_preempted: false,
                        steal_ns: 0,
                        ple_window: vmc.ple.window,
                        hp: HaltPollState::new(&halt_poll),
                        poll_resume: None,
                        cur: None,
                        runq: VecDeque::new(),
                        ipis: VecDeque::new(),
                        ipi_rem: 0,
                        act: Act::Off,
                        gen: 0,
                        acct: Acct::new(C_HALT),
                        c: VcpuCounters { max_ple_window: vmc.ple.window, ..Default::default() },
                        st_is_idle: false,
                        cold_ns: 0,
                        idle_stamp: None,
                        avg_idle: 2 * vmc.guest.migration_cost_ns,
                    });
                    sim.ready.push(false);
                }
                for i in 0..nthread {
                    sim.threads.push(Thread {
                        vm: vm_id,
                        idx: i,
                        vcpu: vcpu0 + (i % vmc.vcpus),
                        state: TState::Ready,
                        pc: 0,
                        step: Step::Begin,
                        rem: 0,
                        iter_start: 0,
                        iters: 0,
                        msgs: 0,
                        acks: 0,
                        spun: 0,
                        pv_halted: false,
                        pv_new_head: false,
                        pv_hashed: false,
                        wake_gen: 0,
                        lock_wait_start: 0,
                        last_ran: 0,
                        rw_read: false,
                        rw_granted: false,
                    });
                }
                let nlocks = vmc
                    .workload
                    .phases
                    .iter()
                    .filter_map(|ph| if let Phase::Lock { lock, .. } = ph { Some(*lock + 1) } else { None })
                    .max()
                    .unwrap_or(0);
                let mut locks: Vec<Lock> = (0..nlocks)
                    .map(|_| Lock {
                        kind: LockKind::Tas,
                        holder: None,
                        waiters: VecDeque::new(),
                        acquisitions: 0,
                        slow: false,
                        readers: 0,
                    })
                    .collect();
                for ph in &vmc.workload.phases {
                    if let Phase::Lock { lock, lock_kind, .. } = ph {
                        // an rwsem's lock is the semaphore; each phase says which side it takes
                        let kind = if lock_kind.is_rwsem() { LockKind::RwsemWrite } else { *lock_kind };
                        locks[*lock as usize].kind = super::guest::effective_lock_kind(kind, vmc);
                    }
                }
                let policy = make_policy(group, vmc)?;
                let w = &vmc.workload;
                let spin_threshold_ns =
                    cycles_to_ns(w.spin_threshold.saturating_mul(w.spin_iter_cycles), cfg.host.tsc_khz);
                let queue = w.phases.iter().find_map(|p| match p {
                    Phase::TaskQueue { tasks, frames, .. } => Some((*tasks, *frames)),
                    _ => None,
                });
                if w.iterations > 0 || queue.is_some_and(|(_, frames)| frames > 0) {
                    sim.vms_with_goal += 1;
                }
                sim.vms.push(Vm {
                    cfg: vmc.clone(),
                    group: group as u32,
                    vcpu0,
                    nvcpu: vmc.vcpus,
                    thread0,
                    nthread,
                    locks,
                    barrier_waiting: Vec::new(),
                    tq_left: queue.map_or(0, |(tasks, _)| tasks),
                    tq_frames: 0,
                    tq_waiting: Vec::new(),
                    last_boosted: 0,
                    upstream: policy.as_upstream(),
                    policy,
                    ops: 0,
                    latencies: Vec::new(),
                    lock_waits: Vec::new(),
                    done_threads: 0,
                    finished_at: None,
                    ple_ns: [(0, 0); 64],
                    spin_threshold_ns: spin_threshold_ns.max(1),
                    halt_poll,
                    lb_pending: false,
                    nohz_next: 0,
                });
            }
        }
        // Background host load: one pinned task per host CPU.
        if cfg.host.background.utilization > 0.0 {
            for cpu in 0..p {
                let w = cfg.host.background.weight;
                sim.tasks.push(Task::new(TaskKind::Bg(cpu), w, cfg.host.base_slice_ns, cpu, Some(cpu)));
            }
        }
        sim.add_noise_tasks();
        for t in 0..sim.tasks.len() {
            sim.tasks[t].tie = if cfg.host.seeded_ties { sim.rng2.random::<u32>() } else { t as u32 };
        }
        sim.rng = rng;
        sim.any_unpinned = cfg.host.scheduler != Scheduler::Gang && sim.tasks.iter().any(|t| t.pinned.is_none());
        if cfg.host.scheduler == Scheduler::Gang {
            sim.setup_gang();
        }
        Ok(sim)
    }

    /// Schedule an event. Zero-delay events go to a FIFO processed before
    /// the queue (deterministic, and cheaper than a queue round trip).
    #[inline]
    pub fn push(&mut self, time: Ns, ev: Ev) {
        if time == self.now && self.started {
            self.immediate.push_back(ev);
            return;
        }
        self.seq += 1;
        self.queue.push(time, self.seq, ev);
    }

    /// Run to the end; returns an error if a policy failed or `interrupted()`
    /// (polled every [`POLL_INTERVAL`] of wall time, see [`Poll`]) said so.
    pub fn run(&mut self, interrupted: &dyn Fn() -> bool) -> Result<(), SimError> {
        let end = self.end;
        self.step_until_checked(end, interrupted)?;
        self.now = self.end;
        self.finish();
        Ok(())
    }

    /// Process every event before `limit` (tests drive the engine with this).
    pub fn step_until(&mut self, limit: Ns) -> Result<(), SimError> {
        self.step_until_checked(limit, &|| false)
    }

    fn step_until_checked(&mut self, limit: Ns, interrupted: &dyn Fn() -> bool) -> Result<(), SimError> {
        let mut poll = Poll::new();
        if !self.started {
            self.started = true;
            self.start();
        }
        loop {
            let ev = if let Some(ev) = self.immediate.pop_front() {
                ev
            } else {
                let Some(e) = self.queue.pop_before(self.end.min(limit)) else { break };
                let time = e.time();
                debug_assert!(time >= self.now);
                if time > self.now {
                    self.same_time = 0;
                }
                self.now = time;
                e.ev
            };
            self.events += 1;
            self.same_time += 1;
            if self.same_time > 50_000_000 {
                self.stuck = Some(format!("no progress: 5e7 events at t={} ns", self.now));
            }
            self.dispatch(ev);
            if let Some(e) = self.trace_error.take() {
                return Err(e);
            }
            if self.stuck.is_some() || self.error.is_some() {
                if let Some(s) = self.stuck.take() {
                    return Err(SimError::NoProgress(s));
                }
                return Err(SimError::Policy(self.error.take().expect("an error")));
            }
            if self.events & (POLL_EVERY_EVENTS - 1) == 0 && poll.due() && interrupted() {
                return Err(SimError::Interrupted);
            }
            if self.vms_with_goal > 0 && self.vms_done == self.vms.len() as u32 {
                self.end = self.now;
                break;
            }
        }
        Ok(())
    }

    fn start(&mut self) {
        // Every guest thread starts Ready on its home vCPU; every vCPU is woken.
        for t in 0..self.threads.len() {
            let v = self.threads[t].vcpu as usize;
            self.vcpus[v].runq.push_back(t as u32);
        }
        let gap = self.cfg.host.start_gap_ns;
        if gap == 0 {
            self.enqueue_new = true;
            for v in 0..self.vcpus.len() {
                self.vcpu_host_wake(v, WakeReason::Start);
            }
            self.enqueue_new = false;
        } else {
            // the VMM creates the vCPU threads one after another (index
            // order); each creation and first move to its CPU takes a
            // variable time: exponential gaps of mean `gap` (second RNG stream)
            self.enqueue_new = true;
            self.vcpu_host_wake(0, WakeReason::Start);
            self.enqueue_new = false;
            let mut at: Ns = 0;
            for v in 1..self.vcpus.len() as u32 {
                at += self.noise_exp(gap);
                self.push(at, Ev::Start(v));
            }
        }
        let bg: Vec<u32> =
            (0..self.tasks.len() as u32).filter(|&t| matches!(self.tasks[t as usize].kind, TaskKind::Bg(_))).collect();
        for t in bg {
            let sleep = self.bg_sleep_sample();
            self.push(sleep, Ev::BgWake(t));
        }
        self.start_noise();
        if self.cfg.host.scheduler == Scheduler::Gang {
            self.push(0, Ev::Gang);
        }
    }

    fn dispatch(&mut self, ev: Ev) {
        if self.cfg.host.wake_placement == WakePlacement::SelectTaskRqFair {
            self.waker_cpu = match ev {
                Ev::Tick(c) | Ev::Resched(c, _) => c,
                Ev::Vcpu(v, _) | Ev::Poke(v) => self.vcpus[v as usize].running.unwrap_or(NO_CPU),
                _ => NO_CPU,
            };
            if self.cfg.host.wake_wide {
                self.waker_task = match ev {
                    Ev::Tick(c) | Ev::Resched(c, _) => self.rqs[c as usize].curr.unwrap_or(u32::MAX),
                    Ev::Vcpu(v, _) | Ev::Poke(v) if self.vcpus[v as usize].running.is_some() => {
                        self.vcpus[v as usize].task
                    }
                    _ => u32::MAX,
                };
            }
        }
        match ev {
            Ev::Tick(cpu) => self.tick(cpu as usize),
            Ev::Vcpu(v, gen) => {
                if self.vcpus[v as usize].gen == gen {
                    self.vcpu_event(v as usize);
                }
            }
            Ev::Poke(v) => self.poke_now(v as usize),
            Ev::BgEnd(t, gen) => {
                if self.tasks[t as usize].bg_gen == gen {
                    if let TaskKind::Noise(_) = self.tasks[t as usize].kind {
                        self.noise_end(t as usize);
                    } else {
                        self.bg_end(t as usize);
                    }
                }
            }
            Ev::BgWake(t) => {
                if let TaskKind::Noise(_) = self.tasks[t as usize].kind {
                    self.noise_wake(t as usize);
                } else {
                    self.bg_wake(t as usize);
                }
            }
            Ev::ThreadWake(t, gen) => {
                if self.threads[t as usize].wake_gen == gen {
                    self.sleep_timer(t as usize);
                }
            }
            Ev::Resched(cpu, why) => self.resched_event(cpu as usize, why),
            Ev::Gang => self.gang_switch(),
            Ev::GuestBalance(vm) => self.guest_nohz_balance(vm as usize),
            Ev::Start(v) => self.vcpu_arrive(v as usize),
        }
    }

    /// A vCPU thread's first enqueue as a new task (`wake_up_new_task`:
    /// `place_entity` with ENQUEUE_INITIAL, then `wakeup_preempt`).
    fn vcpu_arrive(&mut self, v: usize) {
        self.enqueue_initial = true;
        self.enqueue_new = true;
        self.vcpu_host_wake(v, WakeReason::Start);
        self.enqueue_new = false;
        self.enqueue_initial = false;
    }

    fn finish(&mut self) {
        let now = self.now;
        for cpu in 0..self.rqs.len() {
            if let Some(t) = self.rqs[cpu].curr {
                self.trace_close(cpu, t, Why::End);
            }
            let c = self.rqs[cpu].acct.cat;
            self.rqs[cpu].acct.set(now, c);
        }
        for v in 0..self.vcpus.len() {
            let c = self.vcpus[v].acct.cat;
            self.vcpus[v].acct.set(now, c);
        }
    }

    // ---- accounting helpers ----

    /// Set a vCPU's time category (and its host CPU's, if it is running).
    #[inline]
    pub fn vset(&mut self, v: usize, cat: usize) {
        let now = self.now;
        self.vcpus[v].acct.set(now, cat);
        if let Some(cpu) = self.vcpus[v].running {
            self.rqs[cpu as usize].acct.set(now, cat);
        }
    }

    // ---- random draws ----

    pub fn sample(&mut self, mean: Ns, dist: Dist) -> Ns {
        if mean == 0 {
            return 0;
        }
        match dist {
            Dist::Fixed => mean,
            Dist::Uniform => {
                let lo = mean / 2;
                let hi = mean + mean / 2;
                self.rng.random_range(lo..=hi)
            }
            Dist::Exp => {
                let u: f64 = self.rng.random::<f64>();
                let x = -(1.0 - u).ln() * mean as f64;
                (x.min(mean as f64 * 50.0) as Ns).max(1)
            }
        }
    }

    pub fn chance(&mut self, p: f64) -> bool {
        p >= 1.0 || (p > 0.0 && self.rng.random::<f64>() < p)
    }

    fn bg_sleep_sample(&mut self) -> Ns {
        let b = &self.cfg.host.background;
        let mean_sleep = (b.burst_ns as f64 * (1.0 - b.utilization) / b.utilization) as Ns;
        self.sample(mean_sleep.max(1), Dist::Exp)
    }

    fn bg_end(&mut self, t: usize) {
        let cpu = self.tasks[t].cpu as usize;
        debug_assert_eq!(self.rqs[cpu].curr, Some(t as u32));
        self.tasks[t].bg_rem = 0;
        self.tasks[t].bg_gen += 1;
        self.dequeue_sleep(t);
        let s = self.bg_sleep_sample();
        self.push(self.now + s, Ev::BgWake(t as u32));
        self.schedule(cpu, Why::Sleep);
    }

    fn bg_wake(&mut self, t: usize) {
        let burst = self.cfg.host.background.burst_ns;
        self.tasks[t].bg_rem = self.sample(burst, Dist::Exp);
        self.enqueue(t);
    }

    pub fn vm_of(&self, v: usize) -> usize {
        self.vcpus[v].vm as usize
    }
}

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

/// Balanced slots g mod `p` for `total` vCPUs in a random order
/// (Fisher-Yates with the run's RNG).
fn shuffled_slots(total: usize, p: u32, rng: &mut Pcg64Mcg) -> Vec<u32> {
    let mut s: Vec<u32> = (0..total).map(|g| (g as u32) % p).collect();
    for i in (1..s.len()).rev() {
        let j = rng.random_range(0..=i);
        s.swap(i, j);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calendar queue pops exactly the (time, seq) order of a sorted
    /// reference, with near, far (beyond the ring) and same-time events, and
    /// pushes interleaved with pops as the engine makes them (never earlier
    /// than the last popped time).
    #[test]
    fn event_queue_pops_in_key_order() {
        let mut rng = Pcg64Mcg::seed_from_u64(7);
        let mut q = EventQueue::default();
        let mut reference = std::collections::BTreeSet::new();
        let (mut now, mut seq) = (0u64, 0u64);
        for round in 0..200_000u32 {
            if reference.is_empty() || rng.random_range(0..100) < 52 {
                let dt = match rng.random_range(0..10) {
                    0 => 0,
                    1 => rng.random_range(0..4_000_000),
                    2 => rng.random_range(0..300_000),
                    _ => rng.random_range(0..3_000),
                };
                seq += 1;
                q.push(now + dt, seq, Ev::Tick(round));
                reference.insert((now + dt, seq, round));
            } else {
                let limit = if rng.random_range(0..10) == 0 { now + 100 } else { NEVER };
                let want = reference.first().copied().filter(|&(t, _, _)| t < limit);
                let got = q.pop_before(limit);
                assert_eq!(got.map(|e| (e.time(), e.key as u64)), want.map(|(t, s, _)| (t, s)));
                if let (Some(e), Some(w)) = (got, want) {
                    assert_eq!(e.ev, Ev::Tick(w.2));
                    reference.pop_first();
                    now = e.time();
                }
            }
        }
        while let Some(w) = reference.pop_first() {
            let e = q.pop_before(NEVER).expect("entry");
            assert_eq!((e.time(), e.key as u64), (w.0, w.1));
        }
        assert!(q.pop_before(NEVER).is_none());
    }
}

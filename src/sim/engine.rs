//! The discrete-event core: state of the host, vCPUs and guest threads, the
//! event queue in integer nanoseconds, accounting, and the main loop.
//!
//! Host scheduling lives in `sched.rs`, guest behaviour in `guest.rs`, pause-loop
//! exits and directed yield in `ple.rs`; all are `impl Sim` blocks over the
//! state defined here.

use std::collections::VecDeque;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use super::config::{Affinity, Dist, LockKind, Phase, Scheduler, SimConfig, VmConfig};
use super::halt_poll::{HaltPollConfig, HaltPollState};
use super::policy::DirectedYieldPolicy;
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

/// Time accounting with one open interval.
#[derive(Clone, Debug)]
pub struct Acct {
    pub cat: usize,
    pub since: Ns,
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

/// The event queue: a binary min-heap on `Entry::key`. Keys are unique, so it
/// pops exactly the (time, seq) order of any correct priority queue.
///
/// `pop` leaves a hole at the root; the next `push` (usually made by the
/// handler of the popped event, for an instant soon after it) fills the hole
/// and sifts down, which saves both the pop's sift and most of the push's.
/// A hole still open at the next `peek_time`/`pop` is filled with the last
/// entry, as a plain pop would.
#[derive(Default)]
struct EventQueue {
    v: Vec<Entry>,
    hole: bool,
}
impl EventQueue {
    #[inline]
    fn push(&mut self, time: Ns, seq: u64, ev: Ev) {
        let e = Entry { key: ((time as u128) << 64) | seq as u128, ev };
        if self.hole {
            self.hole = false;
            self.sift_down_root(e);
            return;
        }
        let v = &mut self.v;
        let mut i = v.len();
        v.push(e);
        while i > 0 {
            let p = (i - 1) / 2;
            if v[p].key <= e.key {
                break;
            }
            v[i] = v[p];
            i = p;
        }
        v[i] = e;
    }
    /// Put `e` at the root (a hole) and sift it down.
    #[inline]
    fn sift_down_root(&mut self, e: Entry) {
        let v = self.v.as_mut_slice();
        let mut i = 0;
        loop {
            let c = 2 * i + 1;
            // the smaller child (c, or c + 1 if it exists and is smaller)
            let c = match v.get(c..c + 2) {
                Some([l, r]) => c + (r.key < l.key) as usize,
                _ if c < v.len() => c,
                _ => break,
            };
            let child = v[c];
            if child.key >= e.key {
                break;
            }
            v[i] = child;
            i = c;
        }
        v[i] = e;
    }
    #[inline]
    fn fill_hole(&mut self) {
        if self.hole {
            self.hole = false;
            let last = self.v.pop().expect("a hole is an entry");
            if !self.v.is_empty() {
                self.sift_down_root(last);
            }
        }
    }
    #[inline]
    fn peek_time(&mut self) -> Option<Ns> {
        self.fill_hole();
        self.v.first().map(Entry::time)
    }
    /// Remove and return the earliest entry (leaving a hole at the root).
    #[inline]
    fn pop(&mut self) -> Option<Entry> {
        self.fill_hole();
        let top = *self.v.first()?;
        self.hole = true;
        Some(top)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskKind {
    Vcpu(u32),
    Bg(u32),
}

/// A host thread (vCPU thread or background task) as the fair scheduler sees it.
#[derive(Clone, Debug)]
pub struct Task {
    pub kind: TaskKind,
    pub weight: u64,
    /// The virtual slice, base_slice_ns·1024/weight (weights never change).
    pub vslice: i64,
    pub vruntime: i64,
    pub deadline: i64,
    pub vlag: i64,
    /// Runnable (on its run queue, current, or parked by the gang scheduler).
    pub runnable: bool,
    /// Gang mode: runnable but its VM is not in the current round.
    pub parked: bool,
    /// The run queue it belongs to (or last ran on).
    pub cpu: u32,
    pub pinned: Option<u32>,
    pub wait_since: Ns,
    /// Total runnable-but-waiting time (sched_info.run_delay).
    pub run_delay: Ns,
    // background task state
    pub bg_rem: Ns,
    pub bg_start: Ns,
    pub bg_gen: u32,
}

#[derive(Clone, Debug)]
pub struct Rq {
    /// Runnable tasks other than `curr`.
    pub queue: Vec<u32>,
    pub curr: Option<u32>,
    pub buddy: Option<u32>,
    pub exec_start: Ns,
    pub last_v: i64,
    /// Reserved hold intervals of the run-queue lock (start, end), sorted by start.
    pub lock_busy: Vec<(Ns, Ns)>,
    pub tick_armed: bool,
    pub need_resched: bool,
    pub acct: Acct,
    pub trace_start: Ns,
    pub switches: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitKind {
    /// `boost`: the target's host CPU to reschedule when the handler ends
    /// (NO_CPU: none). A successful yield_to ends the handler, so the boost
    /// and the yielder's schedule() happen at the same instant.
    Ple { yielded: bool, boost: u32 },
    Halt,
    Hypercall { yielded: bool, boost: u32 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// Not running, or between activities.
    Off,
    /// Useful work of the current thread or of an IPI handler.
    Exec { start: Ns, end: Ns, ipi: bool },
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

#[derive(Clone, Debug, Default)]
pub struct VcpuCounters {
    pub ple_exits: u64,
    pub yield_attempts: u64,
    pub yield_ok: u64,
    pub yield_esrch: u64,
    pub yield_zero: u64,
    pub preemption_reported: u64,
    pub preemption_other: u64,
    pub directed_yield_attempted: u64,
    pub directed_yield_successful: u64,
    pub kicks: u64,
    pub ipis_sent: u64,
    pub max_ple_window: u64,
    pub sched_in: u64,
}

#[derive(Clone, Debug)]
pub struct Vcpu {
    pub vm: u32,
    pub idx: u32,
    pub task: u32,
    pub running: Option<u32>,
    pub last_cpu: u32,
    // kvm state (§1.1)
    pub preempted: bool,
    pub ready: bool,
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
    // steal time (§4)
    pub st_preempted: bool,
    pub steal_ns: Ns,
    pub ple_window: u64,
    // host halt polling (§3): kvm_vcpu_halt's window, halt in progress and stats
    pub hp: HaltPollState,
    /// Preempted inside the poll loop: the poll deadline it resumes with.
    pub poll_resume: Option<Ns>,
    // guest
    pub cur: Option<u32>,
    pub runq: VecDeque<u32>,
    /// Pending IPI handlers: the sending thread of each.
    pub ipis: VecDeque<u32>,
    /// Remaining time of the IPI handler in progress (0: none).
    pub ipi_rem: Ns,
    pub act: Act,
    pub gen: u32,
    pub acct: Acct,
    pub c: VcpuCounters,
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

#[derive(Clone, Debug)]
pub struct Thread {
    pub vm: u32,
    pub idx: u32,
    pub vcpu: u32,
    pub state: TState,
    pub pc: usize,
    pub step: Step,
    pub rem: Ns,
    pub iter_start: Ns,
    pub iters: u64,
    pub msgs: u32,
    pub acks: u32,
    /// Spin time accumulated on the current PV-lock wait (SPIN_THRESHOLD).
    pub spun: Ns,
    /// PV node state: halted in pv_wait.
    pub pv_halted: bool,
    pub wake_gen: u32,
}

#[derive(Clone, Debug)]
pub struct Lock {
    pub kind: LockKind,
    pub holder: Option<u32>,
    pub waiters: VecDeque<u32>,
    pub acquisitions: u64,
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
    pub last_boosted: usize,
    pub policy: Box<dyn DirectedYieldPolicy>,
    pub ops: u64,
    pub latencies: Vec<Ns>,
    pub done_threads: u32,
    pub finished_at: Option<Ns>,
    pub window_ns_cache: (u64, Ns),
    pub spin_threshold_ns: Ns,
    /// `cfg.halt_poll` as the shared halt-polling state machine reads it.
    pub halt_poll: HaltPollConfig,
}

pub struct Sim {
    pub cfg: SimConfig,
    pub now: Ns,
    pub end: Ns,
    heap: EventQueue,
    seq: u64,
    pub events: u64,
    pub rng: Pcg64Mcg,
    pub tasks: Vec<Task>,
    pub rqs: Vec<Rq>,
    pub vcpus: Vec<Vcpu>,
    pub threads: Vec<Thread>,
    pub vms: Vec<Vm>,
    pub trace: Vec<TraceRec>,
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
    same_time: u64,
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
            heap: EventQueue::default(),
            seq: 0,
            events: 0,
            rng: Pcg64Mcg::seed_from_u64(0),
            tasks: Vec::new(),
            rqs: (0..p)
                .map(|_| Rq {
                    queue: Vec::new(),
                    curr: None,
                    buddy: None,
                    exec_start: 0,
                    last_v: 0,
                    lock_busy: Vec::new(),
                    tick_armed: false,
                    need_resched: false,
                    acct: Acct::new(C_IDLE),
                    trace_start: 0,
                    switches: 0,
                })
                .collect(),
            vcpus: Vec::new(),
            threads: Vec::new(),
            vms: Vec::new(),
            trace: Vec::new(),
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
            same_time: 0,
        };
        // Placement of vCPU threads.
        let total = cfg.total_vcpus() as usize;
        let pins: Vec<u32> = match cfg.host.affinity {
            Affinity::RoundRobin | Affinity::All => (0..total).map(|g| (g as u32) % p).collect(),
            Affinity::Pinned => {
                // balanced: slots g mod P, shuffled (Fisher-Yates with the run's RNG)
                let mut s: Vec<u32> = (0..total).map(|g| (g as u32) % p).collect();
                for i in (1..s.len()).rev() {
                    let j = rng.random_range(0..=i);
                    s.swap(i, j);
                }
                s
            }
        };
        let mut g = 0usize;
        for (group, vmc) in cfg.vms.iter().enumerate() {
            for _ in 0..vmc.count {
                let vm_id = sim.vms.len() as u32;
                let nthread = if vmc.threads == 0 { vmc.vcpus } else { vmc.threads };
                let vcpu0 = sim.vcpus.len() as u32;
                let thread0 = sim.threads.len() as u32;
                let halt_poll = vmc.halt_poll.state_machine();
                for i in 0..vmc.vcpus {
                    let cpu = pins[g];
                    g += 1;
                    let task = sim.tasks.len() as u32;
                    sim.tasks.push(Task {
                        kind: TaskKind::Vcpu(vcpu0 + i),
                        weight: vmc.weight,
                        vslice: (cfg.host.base_slice_ns * NICE0 / vmc.weight) as i64,
                        vruntime: 0,
                        deadline: 0,
                        vlag: 0,
                        runnable: false,
                        parked: false,
                        cpu,
                        pinned: if cfg.host.affinity == Affinity::All { None } else { Some(cpu) },
                        wait_since: 0,
                        run_delay: 0,
                        bg_rem: 0,
                        bg_start: 0,
                        bg_gen: 0,
                    });
                    sim.vcpus.push(Vcpu {
                        vm: vm_id,
                        idx: i,
                        task,
                        running: None,
                        last_cpu: cpu,
                        preempted: false,
                        ready: false,
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
                    });
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
                        wake_gen: 0,
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
                    .map(|_| Lock { kind: LockKind::Tas, holder: None, waiters: VecDeque::new(), acquisitions: 0 })
                    .collect();
                for ph in &vmc.workload.phases {
                    if let Phase::Lock { lock, lock_kind, .. } = ph {
                        locks[*lock as usize].kind = *lock_kind;
                    }
                }
                let policy = make_policy(group, vmc)?;
                let w = &vmc.workload;
                let spin_threshold_ns = cycles_to_ns(w.spin_threshold.saturating_mul(w.spin_iter_cycles), cfg.host.tsc_khz);
                if w.iterations > 0 {
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
                    last_boosted: 0,
                    policy,
                    ops: 0,
                    latencies: Vec::new(),
                    done_threads: 0,
                    finished_at: None,
                    window_ns_cache: (0, 0),
                    spin_threshold_ns: spin_threshold_ns.max(1),
                    halt_poll,
                });
            }
        }
        // Background host load: one pinned task per host CPU.
        if cfg.host.background.utilization > 0.0 {
            for cpu in 0..p {
                sim.tasks.push(Task {
                    kind: TaskKind::Bg(cpu),
                    weight: cfg.host.background.weight,
                    vslice: (cfg.host.base_slice_ns * NICE0 / cfg.host.background.weight) as i64,
                    vruntime: 0,
                    deadline: 0,
                    vlag: 0,
                    runnable: false,
                    parked: false,
                    cpu,
                    pinned: Some(cpu),
                    wait_since: 0,
                    run_delay: 0,
                    bg_rem: 0,
                    bg_start: 0,
                    bg_gen: 0,
                });
            }
        }
        sim.rng = rng;
        sim.any_unpinned = cfg.host.scheduler == Scheduler::Fair && sim.tasks.iter().any(|t| t.pinned.is_none());
        if cfg.host.scheduler == Scheduler::Gang {
            sim.setup_gang();
        }
        Ok(sim)
    }

    /// Schedule an event. Zero-delay events go to a FIFO processed before
    /// the heap (deterministic, and cheaper than a heap round trip).
    #[inline]
    pub fn push(&mut self, time: Ns, ev: Ev) {
        if time == self.now && self.started {
            self.immediate.push_back(ev);
            return;
        }
        self.seq += 1;
        self.heap.push(time, self.seq, ev);
    }

    /// Run to the end; returns an error if a policy failed or `interrupted()`
    /// (polled every 2^18 events) said so.
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
        if !self.started {
            self.started = true;
            self.start();
        }
        loop {
            let ev = if let Some(ev) = self.immediate.pop_front() {
                ev
            } else {
                match self.heap.peek_time() {
                    Some(t) if t < self.end && t < limit => {}
                    _ => break,
                }
                let e = self.heap.pop().expect("peeked");
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
            if let Some(s) = self.stuck.take() {
                return Err(SimError::NoProgress(s));
            }
            if let Some(err) = self.error.take() {
                return Err(SimError::Policy(err));
            }
            if self.events & ((1 << 18) - 1) == 0 && interrupted() {
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
        for v in 0..self.vcpus.len() {
            self.vcpu_host_wake(v, WakeReason::Start);
        }
        let bg: Vec<u32> =
            (0..self.tasks.len() as u32).filter(|&t| matches!(self.tasks[t as usize].kind, TaskKind::Bg(_))).collect();
        for t in bg {
            let sleep = self.bg_sleep_sample();
            self.push(sleep, Ev::BgWake(t));
        }
        if self.cfg.host.scheduler == Scheduler::Gang {
            self.push(0, Ev::Gang);
        }
    }

    fn dispatch(&mut self, ev: Ev) {
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
                    self.bg_end(t as usize);
                }
            }
            Ev::BgWake(t) => self.bg_wake(t as usize),
            Ev::ThreadWake(t, gen) => {
                if self.threads[t as usize].wake_gen == gen {
                    self.sleep_timer(t as usize);
                }
            }
            Ev::Resched(cpu, why) => self.resched_event(cpu as usize, why),
            Ev::Gang => self.gang_switch(),
        }
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

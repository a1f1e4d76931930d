//! vcpulab's own vCPU scheduler: an experiment's vCPU threads run on its host
//! CPUs under a policy, instead of under the host kernel's scheduler.
//!
//! Rooms: this file (the tokens, the queues, the decisions and their log),
//! `spin.rs` (the directed-yield policies' view of it, `kvm_vcpu_on_spin`'s
//! `SpinCtx` over real vCPUs), `tests.rs`.
//!
//! One **run token** per host CPU. A vCPU thread enters `KVM_RUN` only while it
//! holds a token, pinned to that token's CPU; every other vCPU thread sleeps on
//! its condition variable. Decisions are taken by the threads themselves, under
//! one lock, at four points:
//!
//! * **slice end**: the run's deadline timer (the existing kick, `kick.rs`)
//!   ends the holder's `KVM_RUN` at its slice's end; it hands its token on as
//!   the policy says ([`Policy`]);
//! * **pv spin exit**: a spin-lock waiter built with `pv_exits` writes the lock
//!   holder's id to [`PV_SPIN_PORT`] after `spin_window` failed iterations: the
//!   software analogue of a pause-loop exit. Under [`Policy::DirectedYield`] a
//!   directed-yield policy of `crate::sim::policy` (the same objects the
//!   simulator runs) picks a candidate through a [`SpinCtx`] over this state,
//!   and `yield_to` hands the spinner's token to it. The window grows and
//!   shrinks as `ple_window` does (`__grow_ple_window` on every exit,
//!   `__shrink_ple_window` when the vCPU gets a token back after losing it);
//! * **halt / wake-up**: the same programs bracket their `HLT` with
//!   [`PV_HALT_PORT`] writes: the token goes at the halt, and the woken vCPU
//!   asks for one again. Simplification: between its wake-up and the bracket's
//!   exit a woken vCPU runs without a token: the interrupt that woke it (the
//!   guest programs' handler is 16 instructions), `cli` and the bracket's 3;
//! * **the end of a vCPU's program**.
//!
//! While a runnable vCPU holds no token its steal-time `preempted` byte is 1
//! (cleared when it gets one back, before it enters), so `vcpu_is_preempted()`
//! works for guests under this scheduler even where the kernel never sets the
//! byte (kvm_pvm). The `is_idle` byte of the `pcpu_is_idle` proposal (the first
//! pad byte after `preempted`) is 1 while the host CPU the vCPU last ran on
//! holds no token.
//!
//! Every decision is logged ([`Decision`], [`SpinRecord`]). A watchdog, called
//! by the experiment's sampling loop, kicks a holder that overran its slice by
//! more than [`Config::watchdog_ns`] and logs it. The log is bounded
//! ([`Config::max_decisions`]; further rows are counted as dropped).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

use super::error::{Error, Result};
use super::memory::GuestMemory;
use super::steal::{OFF_IS_IDLE, OFF_PREEMPTED};
use crate::sim::ple::{grow_ple_window, shrink_ple_window};
use crate::sim::policy::{DirectedYieldPolicy, SpinCtx, VcpuView, ESRCH};

mod spin;
#[cfg(test)]
mod tests;

pub use spin::POLICY_WALL_FACTOR;
use spin::{thread_cpu_ns, RealSpin};

pub use super::guest::program::{PV_HALT_PORT, PV_SPIN_PORT};

/// What the scheduler does at each decision point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Fair time slices: one queue of runnable vCPUs of every VM; a slice's end
    /// hands the token to the queue's head (the holder goes to its tail).
    RoundRobin,
    /// Strict co-scheduling: all vCPUs of one VM hold tokens together; VMs take
    /// turns, a turn ending when every vCPU of the VM has ended its slice.
    Gang,
    /// Relaxed co-scheduling (VMware ESX): a vCPU whose run time is more than
    /// `skew_ns` ahead of its slowest runnable sibling is co-stopped (gets no
    /// token) until that sibling catches up.
    RelaxedCo { skew_ns: u64 },
    /// Balance scheduling (Sukwong and Kim, EuroSys 2011): every vCPU has a
    /// home CPU, and no two siblings share one; each CPU runs its own queue
    /// round-robin.
    Balance,
    /// Per-CPU queues as the host kernel's with pinned vCPU threads: each
    /// vCPU is at home on the CPU its [`Member::home`] names (the experiment's
    /// placement), else vCPU thread g (counted over every VM, in order) on the
    /// scheduler's CPU g mod n (the run's CPUs in ascending order; the
    /// simulator's `Host.affinity = "round_robin"` map); each CPU runs its own
    /// queue round-robin, with no load balancing. The vehicle of [S3]: where a
    /// vCPU runs is fixed, so the `is_idle` of its CPU says whether it would
    /// run at once.
    Pinned,
    /// Round-robin slices, and on a pv spin exit the VM's directed-yield
    /// policy chooses a candidate to hand the spinner's token to.
    DirectedYield,
}

impl Policy {
    pub fn name(&self) -> &'static str {
        match self {
            Policy::RoundRobin => "round_robin",
            Policy::Gang => "gang",
            Policy::RelaxedCo { .. } => "relaxed_co",
            Policy::Balance => "balance",
            Policy::Pinned => "pinned",
            Policy::DirectedYield => "directed_yield",
        }
    }

    /// Each CPU takes its tokens' vCPUs from its own queue, of the vCPUs at home there.
    pub fn per_cpu_queues(&self) -> bool {
        matches!(self, Policy::Balance | Policy::Pinned)
    }
}

/// The spin window's dynamics, in failed spin iterations (a PLE window's
/// parameters: `sim.Ple`'s window, grow, shrink and max).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpinWindow {
    /// Initial window and shrink floor; 0: no pv spin exits.
    pub window: u64,
    pub grow: u64,
    pub shrink: u64,
    pub max: u64,
}

/// A scheduler's parameters.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub policy: Policy,
    /// Time slice, ns.
    pub slice_ns: u64,
    pub spin: SpinWindow,
    /// A holder more than this past its slice's end is kicked by the watchdog, ns.
    pub watchdog_ns: u64,
    /// Longest a directed-yield policy call may take, ns; longer is an error.
    pub policy_deadline_ns: u64,
    /// Most decision and spin rows kept (each).
    pub max_decisions: usize,
    /// Seed of `SpinCtx::random_below`.
    pub seed: u64,
}

pub use crate::schedule::Why;

/// One decision: on host CPU `cpu` (index into the scheduler's CPUs), vCPU
/// `out` (global index; -1: none, the CPU was idle) gave way to `into` (-1:
/// none, the CPU falls idle), at `t_ns` after the run's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub t_ns: u64,
    pub cpu: u32,
    pub out: i32,
    pub into: i32,
    pub why: Why,
}

/// One pv spin exit: who spun, on which lock holder, what the policy did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpinRecord {
    pub t_ns: u64,
    /// Global index of the spinner.
    pub vcpu: u32,
    /// Global index of the holder the guest named (-1: unknown).
    pub holder: i32,
    /// yield_to calls the policy made in this exit.
    pub attempts: u32,
    /// The candidate that got the token (-1: the spinner kept it).
    pub yielded_to: i32,
    /// The window after this exit's growth, iterations.
    pub window: u64,
    /// From the exit to the candidate's thread entering KVM_RUN, ns (0: no yield).
    pub latency_ns: u64,
    /// How long the policy call took, ns (0: no policy ran).
    pub policy_ns: u64,
}

/// A vCPU of the scheduled run.
#[derive(Debug, Clone)]
pub struct Member {
    /// Index of its VM in the run.
    pub vm: usize,
    /// Its index in the VM (the guest's vCPU id).
    pub idx: usize,
    /// Guest RAM and the gpa of its steal-time area (`preempted` at +16,
    /// `is_idle` at +17); None: the pv bytes are not written.
    pub mem: Arc<GuestMemory>,
    pub steal_gpa: Option<u64>,
    /// Where its spin window lives in guest RAM (the spin-lock record's
    /// `spin_window`); None: the program has no pv spin exits.
    pub window_gpa: Option<u64>,
    /// [`Policy::Pinned`]: the index (in the scheduler's CPUs) of the CPU the
    /// experiment's placement pins it to; None: CPU g mod n.
    pub home: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    /// Waiting for a token (queued).
    Ready,
    /// Holding the token of CPU `.0`.
    Running(usize),
    /// Halted in the guest (pv halt bracket), holding no token.
    Halted,
    /// Program finished or thread stopped.
    Done,
}

#[derive(Debug)]
struct VState {
    vm: usize,
    idx: usize,
    status: Status,
    /// The CPU it last held (index into `cpus`).
    last_cpu: Option<usize>,
    /// Balance / Pinned: its home CPU.
    home: usize,
    granted_at: Instant,
    run_ns: u64,
    /// Lost its token while runnable (`vcpu->preempted`).
    preempted: bool,
    /// Woken from a halt and not yet running.
    woken: bool,
    in_spin_loop: bool,
    dy_eligible: bool,
    window: u64,
    /// A yield gave it a token at this instant; its entry closes the spin row.
    yield_row: Option<(usize, Instant)>,
    /// Its thread (0 before [`Scheduler::start`]) and the token CPU it is pinned to.
    tid: i32,
    pinned: Option<usize>,
}

struct State {
    holder: Vec<Option<usize>>,
    slice_end: Vec<Instant>,
    v: Vec<VState>,
    /// RoundRobin / Gang / RelaxedCo / DirectedYield: one queue; Balance / Pinned: one per CPU.
    queues: Vec<VecDeque<usize>>,
    /// Gang: whose turn it is, and which vCPUs of it have not yet ended their slice.
    turn: usize,
    gang_left: usize,
    /// How many vCPU threads have called [`Scheduler::start`]: no token is
    /// given before all have (every policy starts from one state).
    arrived: usize,
    last_boosted: Vec<usize>,
    policies: Vec<Option<Box<dyn DirectedYieldPolicy>>>,
    decisions: Vec<Decision>,
    spins: Vec<SpinRecord>,
    dropped: u64,
    watchdog_kicks: u64,
    error: Option<Error>,
    rng: rand_pcg::Pcg64Mcg,
    /// What the logs' `t_ns` count from.
    t0: Instant,
}

/// A grant: the token of host CPU `cpu` (the host CPU number) until `slice_end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub cpu_index: usize,
    pub cpu: usize,
    pub slice_end: Instant,
    /// The granter already pinned the thread there.
    pub pinned: bool,
}

/// What a spin exit decided for the spinner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpinOutcome {
    /// Keep the token and spin on.
    Keep,
    /// The token went to another vCPU: wait for one.
    Yielded,
}

/// The scheduler of one experiment.
pub struct Scheduler {
    cfg: Config,
    cpus: Vec<usize>,
    members: Vec<Member>,
    vms: usize,
    vm_members: Vec<Vec<usize>>,
    state: Mutex<State>,
    cvs: Vec<Condvar>,
    stop: AtomicBool,
}

/// Everything a scheduled run decided.
#[derive(Debug, Default)]
pub struct Log {
    pub decisions: Vec<Decision>,
    pub spins: Vec<SpinRecord>,
    pub dropped: u64,
    pub watchdog_kicks: u64,
}

impl Scheduler {
    /// A scheduler of `members` on host CPUs `cpus`; `policies[vm]` is VM
    /// `vm`'s directed-yield policy (needed only for [`Policy::DirectedYield`]).
    pub fn new(
        cfg: Config,
        cpus: Vec<usize>,
        members: Vec<Member>,
        mut policies: Vec<Option<Box<dyn DirectedYieldPolicy>>>,
    ) -> Result<Scheduler> {
        if cpus.is_empty() {
            return Err(Error::InvalidArgument("a scheduler needs at least one host CPU".into()));
        }
        if members.is_empty() {
            return Err(Error::InvalidArgument("a scheduler needs at least one vCPU".into()));
        }
        if cfg.slice_ns == 0 {
            return Err(Error::InvalidArgument("the scheduler's slice must be > 0 ns".into()));
        }
        let vms = members.iter().map(|m| m.vm).max().map_or(0, |m| m + 1);
        let mut vm_members = vec![Vec::new(); vms];
        for (g, m) in members.iter().enumerate() {
            vm_members[m.vm].push(g);
        }
        let n_cpus = cpus.len();
        if matches!(cfg.policy, Policy::Gang | Policy::Balance) {
            if let Some((vm, g)) = vm_members.iter().enumerate().find(|(_, g)| g.len() > n_cpus) {
                return Err(Error::InvalidArgument(format!(
                    "{}: VM {vm} has {} vCPUs, more than the {n_cpus} host CPUs ({} needs every VM's vCPUs on \
                     distinct CPUs)",
                    cfg.policy.name(),
                    g.len(),
                    if cfg.policy == Policy::Gang { "co-scheduling" } else { "balance scheduling" }
                )));
            }
        }
        if cfg.policy == Policy::DirectedYield {
            policies.resize_with(vms, || None);
            if let Some(vm) = policies.iter().position(|p| p.is_none()) {
                return Err(Error::InvalidArgument(format!("directed_yield: VM {vm} has no directed-yield policy")));
            }
        } else {
            policies = (0..vms).map(|_| None).collect();
        }
        if let Some((g, h)) =
            members.iter().enumerate().find_map(|(g, m)| m.home.filter(|&h| h >= n_cpus).map(|h| (g, h)))
        {
            return Err(Error::InvalidArgument(format!(
                "vCPU thread {g}'s home CPU index {h} is not below the scheduler's {n_cpus} CPUs"
            )));
        }
        let now = Instant::now();
        // balance: the i-th vCPU of VM v is at home on CPU (i + v) mod n, so siblings never share one;
        // pinned: where the placement pins it, else vCPU thread g on CPU g mod n
        let v: Vec<VState> = members
            .iter()
            .enumerate()
            .map(|(g, m)| VState {
                vm: m.vm,
                idx: m.idx,
                status: Status::Ready,
                last_cpu: None,
                home: if cfg.policy == Policy::Pinned { m.home.unwrap_or(g % n_cpus) } else { (m.idx + m.vm) % n_cpus },
                granted_at: now,
                run_ns: 0,
                preempted: false,
                woken: false,
                in_spin_loop: false,
                dy_eligible: false,
                window: cfg.spin.window,
                yield_row: None,
                tid: 0,
                pinned: None,
            })
            .collect();
        let queues = if cfg.policy.per_cpu_queues() { n_cpus } else { 1 };
        let state = State {
            holder: vec![None; n_cpus],
            slice_end: vec![now; n_cpus],
            v,
            queues: vec![VecDeque::new(); queues],
            turn: 0,
            gang_left: 0,
            arrived: 0,
            last_boosted: vec![0; vms],
            policies,
            decisions: Vec::new(),
            spins: Vec::new(),
            dropped: 0,
            watchdog_kicks: 0,
            error: None,
            rng: rand_pcg::Pcg64Mcg::seed_from_u64(cfg.seed),
            t0: now,
        };
        let cvs = (0..members.len()).map(|_| Condvar::new()).collect();
        let s = Scheduler {
            cfg,
            cpus,
            members,
            vms,
            vm_members,
            state: Mutex::new(state),
            cvs,
            stop: AtomicBool::new(false),
        };
        for m in 0..s.members.len() {
            s.write_window(m, cfg.spin.window);
        }
        Ok(s)
    }

    /// Host CPUs of the tokens, in token order.
    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn t_ns(&self, st: &State, at: Instant) -> u64 {
        at.saturating_duration_since(st.t0).as_nanos() as u64
    }

    /// The instant the logs' `t_ns` count from (the experiment's start).
    pub fn set_origin(&self, t0: Instant) {
        self.lock().t0 = t0;
    }

    fn slice(&self) -> Duration {
        Duration::from_nanos(self.cfg.slice_ns)
    }

    // ---- the pv bytes ----

    fn write_pv(&self, g: usize, offset: u64, value: u8) {
        let m = &self.members[g];
        if let Some(gpa) = m.steal_gpa {
            // a failed write (never: the area was registered inside RAM) only loses a hint
            let _ = m.mem.write_u8(gpa + offset, value);
        }
    }

    fn set_preempted(&self, st: &mut State, g: usize, on: bool) {
        st.v[g].preempted = on;
        self.write_pv(g, OFF_PREEMPTED, on as u8);
    }

    /// `is_idle` of every vCPU whose last CPU is `c`.
    fn publish_idle(&self, st: &State, c: usize) {
        let idle = st.holder[c].is_none() as u8;
        for (g, v) in st.v.iter().enumerate() {
            if v.last_cpu == Some(c) {
                self.write_pv(g, OFF_IS_IDLE, idle);
            }
        }
    }

    fn write_window(&self, g: usize, w: u64) {
        let m = &self.members[g];
        if let Some(gpa) = m.window_gpa {
            let _ = m.mem.write_u64(gpa, w);
        }
    }

    // ---- the log ----

    fn log(&self, st: &mut State, now: Instant, cpu: usize, out: Option<usize>, into: Option<usize>, why: Why) {
        if st.decisions.len() >= self.cfg.max_decisions {
            st.dropped += 1;
            return;
        }
        let t_ns = self.t_ns(st, now);
        st.decisions.push(Decision {
            t_ns,
            cpu: cpu as u32,
            out: out.map_or(-1, |g| g as i32),
            into: into.map_or(-1, |g| g as i32),
            why,
        });
    }

    // ---- granting ----

    /// Gives CPU `c`'s token to `g` (dequeued by the caller) and wakes it.
    #[allow(clippy::too_many_arguments)]
    fn grant(
        &self,
        st: &mut State,
        now: Instant,
        c: usize,
        g: usize,
        slice_end: Instant,
        out: Option<usize>,
        why: Why,
    ) {
        let was_preempted = st.v[g].preempted;
        st.holder[c] = Some(g);
        st.slice_end[c] = slice_end;
        let v = &mut st.v[g];
        v.status = Status::Running(c);
        v.granted_at = now;
        v.woken = false;
        if was_preempted && v.window != self.cfg.spin.window {
            // sched-in after a switch-out: shrink_ple_window
            let s = self.cfg.spin;
            v.window = shrink_ple_window(v.window, s.window, s.shrink, s.window);
            let w = v.window;
            self.write_window(g, w);
        }
        v.last_cpu = Some(c);
        if v.pinned != Some(c) && v.tid != 0 {
            // pinned by the granter, before the wake-up: the kernel then wakes the thread on
            // its new CPU, instead of where it slept (maybe behind another token's holder)
            if super::os::pin_thread(v.tid, &[self.cpus[c]]).is_ok() {
                v.pinned = Some(c);
            }
        }
        self.set_preempted(st, g, false);
        self.log(st, now, c, out, Some(g), why);
        // its is_idle (now of CPU c, which it holds: 0) and that of the others last on c
        self.publish_idle(st, c);
        self.cvs[g].notify_one();
    }

    /// `g` leaves CPU `c` (the caller sets its new status).
    fn vacate(&self, st: &mut State, c: usize, g: usize, now: Instant) {
        st.holder[c] = None;
        let v = &mut st.v[g];
        v.run_ns += now.saturating_duration_since(v.granted_at).as_nanos() as u64;
    }

    fn queue_of(&self, st: &State, g: usize) -> usize {
        if self.cfg.policy.per_cpu_queues() {
            st.v[g].home
        } else {
            0
        }
    }

    fn enqueue(&self, st: &mut State, g: usize) {
        st.v[g].status = Status::Ready;
        let q = self.queue_of(st, g);
        if !st.queues[q].contains(&g) {
            st.queues[q].push_back(g);
        }
    }

    /// `g`'s run time at `now`, its current stint included.
    fn run_time(st: &State, g: usize, now: Instant) -> u64 {
        let v = &st.v[g];
        match v.status {
            Status::Running(_) => v.run_ns + now.saturating_duration_since(v.granted_at).as_nanos() as u64,
            _ => v.run_ns,
        }
    }

    /// Relaxed co-scheduling: `g` is more than the skew ahead of its slowest
    /// runnable sibling (run times at `now`: a running sibling is progressing).
    fn co_stopped(&self, st: &State, g: usize, now: Instant) -> bool {
        let Policy::RelaxedCo { skew_ns } = self.cfg.policy else { return false };
        let me = Self::run_time(st, g, now);
        let slowest = self.vm_members[st.v[g].vm]
            .iter()
            .filter(|&&s| s != g && !matches!(st.v[s].status, Status::Done | Status::Halted))
            .map(|&s| Self::run_time(st, s, now))
            .min();
        slowest.is_some_and(|lo| me > lo.saturating_add(skew_ns))
    }

    /// The next vCPU for CPU `c` from the queues (removed), if any.
    fn pick(&self, st: &mut State, c: usize, now: Instant) -> Option<usize> {
        let q = if self.cfg.policy.per_cpu_queues() { c } else { 0 };
        let pos = st.queues[q].iter().position(|&g| !self.co_stopped(st, g, now))?;
        st.queues[q].remove(pos)
    }

    /// Fills every idle CPU from the queues (not under gang: turns do that;
    /// not before every vCPU thread has arrived, see [`Scheduler::start`]).
    /// With one queue, each vCPU it gives a token to gets the CPU of its last
    /// token (where its thread is pinned) when that CPU is idle, else the
    /// lowest idle one: a vCPU woken in its halt's wake bracket runs there,
    /// and a token elsewhere makes the kernel move a running thread
    /// (`sched_setaffinity` → `affine_move_task` → the `migration/N` stopper
    /// thread, ~9 µs here), as the kernel's own wake-up prefers the task's
    /// previous CPU (`select_task_rq_fair`). With a queue per CPU the CPU is
    /// the queue's.
    fn dispatch_idle(&self, st: &mut State, now: Instant, why: Why) {
        if self.cfg.policy == Policy::Gang || st.arrived < st.v.len() {
            return;
        }
        if self.cfg.policy.per_cpu_queues() {
            for c in 0..self.cpus.len() {
                if st.holder[c].is_none() {
                    if let Some(g) = self.pick(st, c, now) {
                        self.grant(st, now, c, g, now + self.slice(), None, why);
                    }
                }
            }
            return;
        }
        while let Some(first) = st.holder.iter().position(|h| h.is_none()) {
            let Some(g) = self.pick(st, first, now) else { return };
            // its last token's CPU: the granter pinned it there (or it pinned itself)
            let c = match st.v[g].last_cpu {
                Some(p) if st.holder[p].is_none() => p,
                _ => first,
            };
            self.grant(st, now, c, g, now + self.slice(), None, why);
        }
    }

    /// Gang: when no vCPU of the current VM holds a token any more, the next
    /// VM with a runnable vCPU gets one token per runnable vCPU, all ending at
    /// the same instant.
    fn gang_advance(&self, st: &mut State, now: Instant) {
        if st.arrived < st.v.len() || st.holder.iter().any(|h| h.is_some()) {
            return;
        }
        for step in 1..=self.vms {
            let vm = (st.turn + step) % self.vms;
            let ready: Vec<usize> =
                self.vm_members[vm].iter().copied().filter(|&g| st.v[g].status == Status::Ready).collect();
            if ready.is_empty() {
                continue;
            }
            st.turn = vm;
            st.queues[0].retain(|g| !ready.contains(g));
            let end = now + self.slice();
            for (c, &g) in ready.iter().enumerate() {
                self.grant(st, now, c, g, end, None, Why::Gang);
            }
            st.gang_left = ready.len();
            return;
        }
    }

    // ---- the threads' calls (each at `now`, the caller's clock: tests pass their own) ----

    /// Called once by each vCPU thread (`tid`: its thread id, 0 in tests)
    /// before its first token. No token is given until every vCPU thread
    /// has arrived; then they go out in vCPU order (VM by VM, each VM's
    /// vCPUs by index), under every policy. The threads' arrival order is a
    /// race (creation, the first move to its CPU: measured here, real vCPU 1's
    /// first token before vCPU 0's, vCPU 2 arriving 1.7 ms later); a start
    /// from one state makes a scheduled run's beginning reproducible, and
    /// the twin starts the same way (src/sim/tokens.rs: its own drawn
    /// arrival order had put 12 of 160 directed-yield seeds of the twins'
    /// policy grid in a half-throughput mode).
    pub fn start(&self, g: usize, tid: i32, at: Option<Instant>) {
        let mut st = self.lock();
        let now = at.unwrap_or_else(Instant::now); // the decision's instant: taken holding the lock
        st.v[g].tid = tid;
        self.enqueue(&mut st, g);
        st.arrived += 1;
        if st.arrived < st.v.len() {
            return;
        }
        for q in st.queues.iter_mut() {
            q.make_contiguous().sort_unstable();
        }
        if self.cfg.policy == Policy::Gang {
            // the first turn is VM 0's
            st.turn = self.vms - 1;
            self.gang_advance(&mut st, now);
        } else {
            self.dispatch_idle(&mut st, now, Why::Start);
        }
    }

    /// Waits until `g` holds a token (pinned there by the caller), the run is
    /// stopped, or `deadline` passes (None in the last two cases).
    pub fn acquire(&self, g: usize, deadline: Instant) -> Option<Grant> {
        let mut st = self.lock();
        loop {
            if let Status::Running(c) = st.v[g].status {
                let pinned = st.v[g].pinned == Some(c);
                return Some(Grant { cpu_index: c, cpu: self.cpus[c], slice_end: st.slice_end[c], pinned });
            }
            if self.stop.load(Ordering::SeqCst) || st.error.is_some() {
                return None;
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            // wakes on a grant; the timeout bounds a missed stop
            let wait = (deadline - now).min(Duration::from_millis(20));
            st = self.cvs[g].wait_timeout(st, wait).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// `g`'s thread is about to enter KVM_RUN with its token: closes a pending
    /// yield's latency.
    pub fn entering(&self, g: usize, at: Option<Instant>) {
        let mut st = self.lock();
        let now = at.unwrap_or_else(Instant::now); // the decision's instant: taken holding the lock
        if let Some((row, at)) = st.v[g].yield_row.take() {
            let ns = now.saturating_duration_since(at).as_nanos() as u64;
            if let Some(r) = st.spins.get_mut(row) {
                r.latency_ns = ns.max(1);
            }
        }
    }

    /// `g` leaves CPU `c` for good or for a while (`status`), and the token
    /// goes to the next vCPU the policy names (or the CPU falls idle).
    fn hand_on(&self, st: &mut State, now: Instant, c: usize, g: usize, status: Status, why: Why) {
        self.vacate(st, c, g, now);
        match status {
            Status::Ready => {
                self.enqueue(st, g);
                self.set_preempted(st, g, true);
            }
            other => st.v[g].status = other,
        }
        if self.cfg.policy == Policy::Gang {
            self.log(st, now, c, Some(g), None, why);
            self.publish_idle(st, c);
            st.gang_left = st.gang_left.saturating_sub(1);
            self.gang_advance(st, now);
            return;
        }
        match self.pick(st, c, now) {
            Some(n) => self.grant(st, now, c, n, now + self.slice(), Some(g), why),
            None => {
                self.log(st, now, c, Some(g), None, why);
                self.publish_idle(st, c);
            }
        }
        // a co-stop may have ended, or another CPU fell idle before: fill idle
        // CPUs (each grant logged with the decision that made it possible)
        self.dispatch_idle(st, now, why);
    }

    /// `g`'s slice ended (its KVM_RUN timed out at the slice's end). Returns
    /// true if it keeps its token for another slice.
    pub fn slice_end(&self, g: usize, at: Option<Instant>) -> bool {
        let mut st = self.lock();
        let now = at.unwrap_or_else(Instant::now); // the decision's instant: taken holding the lock
        let Status::Running(c) = st.v[g].status else { return false };
        if self.cfg.policy != Policy::Gang {
            let costop = self.co_stopped(&st, g, now);
            let q = if self.cfg.policy.per_cpu_queues() { c } else { 0 };
            let waiting = st.queues[q].iter().any(|&n| !self.co_stopped(&st, n, now));
            if !costop && !waiting {
                // nobody may take it: another slice (no decision)
                st.slice_end[c] = now + self.slice();
                return true;
            }
            self.hand_on(&mut st, now, c, g, Status::Ready, if costop { Why::CoStop } else { Why::Slice });
        } else {
            self.hand_on(&mut st, now, c, g, Status::Ready, Why::Slice);
        }
        st.v[g].status == Status::Running(c)
    }

    /// `g` halted (pv halt bracket): its token goes on.
    pub fn halt(&self, g: usize, at: Option<Instant>) {
        let mut st = self.lock();
        let now = at.unwrap_or_else(Instant::now); // the decision's instant: taken holding the lock
        if let Status::Running(c) = st.v[g].status {
            self.hand_on(&mut st, now, c, g, Status::Halted, Why::Halt);
        }
    }

    /// `g` woke from its halt: it waits for a token.
    pub fn wake(&self, g: usize, at: Option<Instant>) {
        let mut st = self.lock();
        let now = at.unwrap_or_else(Instant::now); // the decision's instant: taken holding the lock
        if st.v[g].status == Status::Halted {
            st.v[g].woken = true;
            self.enqueue(&mut st, g);
            if self.cfg.policy == Policy::Gang {
                self.gang_advance(&mut st, now);
            } else {
                self.dispatch_idle(&mut st, now, Why::Wake);
            }
        }
    }

    /// `g`'s thread ends (program done, deadline, stop or error).
    pub fn finish(&self, g: usize, at: Option<Instant>) {
        let mut st = self.lock();
        let now = at.unwrap_or_else(Instant::now); // the decision's instant: taken holding the lock
        let q = self.queue_of(&st, g);
        st.queues[q].retain(|&x| x != g);
        self.set_preempted(&mut st, g, false);
        match st.v[g].status {
            Status::Running(c) => self.hand_on(&mut st, now, c, g, Status::Done, Why::Done),
            _ => {
                st.v[g].status = Status::Done;
                if self.cfg.policy == Policy::Gang {
                    self.gang_advance(&mut st, now);
                } else {
                    self.dispatch_idle(&mut st, now, Why::Done);
                }
            }
        }
    }

    /// A pv spin exit of `g`, which names `holder` (guest vCPU id, `u32::MAX`:
    /// unknown), seen at `exit_at` (the hand-off latency counts from there).
    /// Grows its window; under [`Policy::DirectedYield`] runs its VM's policy.
    /// `at`: the decision's instant (None: now, holding the lock; tests pass theirs).
    pub fn spin_exit(&self, g: usize, holder: u32, exit_at: Instant, at: Option<Instant>) -> Result<SpinOutcome> {
        let mut st = self.lock();
        let now = at.unwrap_or_else(Instant::now); // the decision's instant: taken holding the lock
        let Status::Running(c) = st.v[g].status else { return Ok(SpinOutcome::Yielded) };
        let s = self.cfg.spin;
        let w = grow_ple_window(st.v[g].window, s.window, s.grow, s.max);
        st.v[g].window = w;
        self.write_window(g, w);
        let vm = st.v[g].vm;
        let holder_g = self.vm_members[vm].get(holder as usize).copied();
        let mut rec = SpinRecord {
            t_ns: self.t_ns(&st, now),
            vcpu: g as u32,
            holder: holder_g.map_or(-1, |h| h as i32),
            attempts: 0,
            yielded_to: -1,
            window: w,
            latency_ns: 0,
            policy_ns: 0,
        };
        if self.cfg.policy != Policy::DirectedYield {
            self.push_spin(&mut st, rec);
            return Ok(SpinOutcome::Keep);
        }
        let mut policy = st.policies[vm].take().expect("checked in new");
        st.v[g].in_spin_loop = true;
        let started = Instant::now();
        let cpu_started = thread_cpu_ns();
        let (res, attempts, yielded) = {
            let mut ctx =
                RealSpin { s: self, st: &mut st, now, vm, me: g, cpu: c, holder: holder_g, attempts: 0, yielded: None };
            let r = policy.on_spin(&mut ctx);
            (r, ctx.attempts, ctx.yielded)
        };
        st.policies[vm] = Some(policy);
        st.v[g].in_spin_loop = false;
        st.v[g].dy_eligible = false;
        let took = started.elapsed();
        let took_cpu_ns = thread_cpu_ns().saturating_sub(cpu_started);
        let idx = st.v[g].idx;
        if let Err(msg) = res {
            return Err(self.fail(
                &mut st,
                Error::Policy(format!(
                    "the directed-yield policy of VM {vm} failed on the pv spin exit of vCPU {idx}: {msg}"
                )),
            ));
        }
        // The deadline counts the call's own CPU time on this thread: its wall
        // time also holds the wait for the GIL and, on an overcommitted host,
        // for a CPU, which are not the policy's. A call blocked past
        // POLICY_WALL_FACTOR deadlines of wall time fails too.
        let deadline = self.cfg.policy_deadline_ns;
        if took_cpu_ns > deadline || took > Duration::from_nanos(deadline.saturating_mul(POLICY_WALL_FACTOR)) {
            return Err(self.fail(
                &mut st,
                Error::Timeout(format!(
                    "the directed-yield policy of VM {vm} took {:.1} ms of CPU time ({:.1} ms of wall time) on the \
                     pv spin exit of vCPU {idx}, more than its deadline of {:.1} ms (of CPU time; {} times that of \
                     wall time)",
                    took_cpu_ns as f64 / 1e6,
                    took.as_secs_f64() * 1e3,
                    deadline as f64 / 1e6,
                    POLICY_WALL_FACTOR
                )),
            ));
        }
        rec.attempts = attempts;
        rec.policy_ns = took.as_nanos() as u64;
        if let Some(t) = yielded {
            rec.yielded_to = t as i32;
            let row = st.spins.len();
            self.push_spin(&mut st, rec);
            st.v[t].yield_row = Some((row, exit_at));
            return Ok(SpinOutcome::Yielded);
        }
        self.push_spin(&mut st, rec);
        Ok(SpinOutcome::Keep)
    }

    fn push_spin(&self, st: &mut State, r: SpinRecord) {
        if st.spins.len() >= self.cfg.max_decisions {
            st.dropped += 1;
        } else {
            st.spins.push(r);
        }
    }

    /// Records the run's error (the first), stops the run and returns it.
    fn fail(&self, st: &mut State, e: Error) -> Error {
        if st.error.is_none() {
            st.error = Some(match &e {
                Error::Timeout(m) => Error::Timeout(m.clone()),
                other => Error::Policy(other.to_string()),
            });
        }
        self.stop.store(true, Ordering::SeqCst);
        for cv in &self.cvs {
            cv.notify_all();
        }
        e
    }

    /// Stops the run: every waiting thread returns from [`Scheduler::acquire`].
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let _st = self.lock();
        for cv in &self.cvs {
            cv.notify_all();
        }
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// The vCPUs (global indices) holding a token more than the watchdog's
    /// margin past their slice's end; each is logged once per overrun. The
    /// caller kicks them out of KVM_RUN.
    pub fn watchdog(&self, now: Instant) -> Vec<usize> {
        let mut st = self.lock();
        let margin = Duration::from_nanos(self.cfg.watchdog_ns);
        let mut out = Vec::new();
        for c in 0..self.cpus.len() {
            if let Some(g) = st.holder[c] {
                if now > st.slice_end[c] + margin {
                    out.push(g);
                    // logged once: the next look starts from now
                    st.slice_end[c] = now;
                    st.watchdog_kicks += 1;
                    self.log(&mut st, now, c, Some(g), Some(g), Why::Watchdog);
                }
            }
        }
        out
    }

    /// The run's error, if a policy failed.
    pub fn take_error(&self) -> Option<Error> {
        self.lock().error.take()
    }

    /// The log (moved out).
    pub fn take_log(&self) -> Log {
        let mut st = self.lock();
        Log {
            decisions: std::mem::take(&mut st.decisions),
            spins: std::mem::take(&mut st.spins),
            dropped: st.dropped,
            watchdog_kicks: st.watchdog_kicks,
        }
    }

    /// (vm, idx) of each global vCPU index.
    pub fn member(&self, g: usize) -> (usize, usize) {
        (self.members[g].vm, self.members[g].idx)
    }
}

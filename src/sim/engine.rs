//! The discrete-event loop: the `Sim` that holds the world's state
//! (`state.rs`) and the event queue (`queue.rs`), the main loop that pops
//! events and dispatches them, and the accounting helpers every room uses.
//!
//! The world is built from a config in `build.rs`. Host scheduling lives in
//! `sched.rs` (with `cfs.rs` and `balance.rs`), KVM's side of a vCPU (run,
//! exits, halt and halt polling) in `vcpu.rs`, the guest kernel in `guest/`,
//! pause-loop exits and directed yield in `ple.rs`; all are `impl Sim` blocks
//! over the state defined in `state.rs`.

use std::collections::VecDeque;

use rand::Rng;
use rand_pcg::Pcg64Mcg;

use super::config::{Dist, Scheduler, SimConfig, StartOrder, WakePlacement};
use super::decisions::Decisions;
use super::queue::{Ev, EventQueue};
use super::speed::SpeedProc;
use super::state::*;
use super::trace::Trace;
use super::SimError;

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
pub struct Sim {
    pub cfg: SimConfig,
    pub now: Ns,
    pub end: Ns,
    pub(crate) queue: EventQueue,
    pub(crate) seq: u64,
    pub events: u64,
    pub rng: Pcg64Mcg,
    pub tasks: Vec<Task>,
    pub rqs: Vec<Rq>,
    pub vcpus: Vec<Vcpu>,
    /// `vcpu->ready` of each vCPU (preempted, or woken from a halt and not
    /// yet running), apart from `Vcpu` in a dense array: the directed-yield
    /// scan reads it for every candidate and rejects most of them on it.
    pub ready: Vec<bool>,
    /// The generation of each vCPU's current activity, apart from `Vcpu` in a
    /// dense array: every popped `Ev::Vcpu` is checked against it first, and
    /// in a yield storm many are stale (their vCPU was switched out), so a
    /// stale one costs no look at the vCPU's large record. Changed only by
    /// `Sim::bump_gen`.
    pub vgen: Vec<u32>,
    /// The directed-yield scan's filter as masks per VM ([`CandMasks`]).
    pub cand: CandMasks,
    pub threads: Vec<Thread>,
    pub vms: Vec<Vm>,
    pub trace: Trace,
    /// vcpulab's scheduler's decisions (`Result.schedule`), kept with
    /// `Config.trace` under the token schedulers ([`Sim::decisions_on`]).
    pub decisions: Decisions,
    /// Whether `decisions` is kept (set at setup: `cfg.trace` and tokens on).
    pub decisions_on: bool,
    /// Most trace rows a run may keep (the caller's limit; see `SimError::TraceLimit`).
    pub trace_max_rows: u64,
    /// Set when the trace hit `trace_max_rows` or could not grow; ends the run.
    pub trace_error: Option<SimError>,
    /// The host's CPU topology.
    pub topo: Topology,
    /// The CFS tunables after scaling.
    pub cfs: CfsTunables,
    /// CFS task groups, one per VM and CPU (`Cfs.vm_groups`; off otherwise).
    pub groups: TaskGroups,
    /// Gang scheduling's rounds and state.
    pub gang: Gang,
    /// vcpulab's scheduler's run tokens (`Scheduler::RoundRobin`; empty otherwise).
    pub tokens: Tokens,
    /// The wake-up or enqueue in progress.
    pub wake: WakeCtx,
    pub error: Option<String>,
    pub vms_with_goal: u32,
    pub vms_done: u32,
    pub(crate) started: bool,
    pub(crate) immediate: VecDeque<Ev>,
    /// Set when the model cannot advance (a zero-time cycle).
    pub stuck: Option<String>,
    /// Some task may run on any CPU (newidle balancing is on).
    pub any_unpinned: bool,
    /// Per host CPU: the vCPU that last entered the guest there
    /// (`this_cpu_pre_run_vcpu` of the 2021 pcpu_is_idle RFC; NO_VCPU if none).
    pub pre_run_vcpu: Vec<u32>,
    pub(crate) same_time: u64,
    /// The second RNG stream, for the host-model options (ties, wake-up
    /// jitter, noise): with them off it is never drawn, and the main
    /// stream's draws are the same as without them.
    pub rng2: Pcg64Mcg,
    /// Host noise sources: (mean sleep, mean burst) ns of each `TaskKind::Noise`.
    pub noise_src: Vec<(Ns, Ns)>,
    /// `Host.wakeup_ipi_ns > 0` or idle states given.
    pub wake_latency: bool,
    /// Earliest instant of the next nohz idle-balance kick.
    pub nohz_next: Ns,
    /// Each host CPU's state of `Host.speed`, and its RNG stream.
    pub speed: SpeedProc,
}

impl Sim {
    /// Schedule an event. Zero-delay events go to a FIFO processed before
    /// the queue (deterministic, and cheaper than a queue round trip).
    #[inline]
    pub fn push(&mut self, time: Ns, ev: Ev) {
        self.push_inlined(time, ev);
    }

    /// [`push`](Self::push), always inlined: for `act_started`, which
    /// pushes the end of almost every activity (out of line, the call's
    /// prologue and epilogue were a fifth of a push's instructions).
    #[inline(always)]
    pub(crate) fn push_inlined(&mut self, time: Ns, ev: Ev) {
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
            self.wake.enqueue_new = true;
            for v in 0..self.vcpus.len() {
                self.vcpu_host_wake(v, WakeReason::Start);
            }
            self.wake.enqueue_new = false;
        } else {
            // the VMM creates the vCPU threads one after another; each
            // creation and first move to its CPU takes a variable time, so
            // the order in which they arrive is a race (measured here: real
            // threads' first runs not always in index order,
            // `Run.threads.start_ns`): a seeded random order with exponential
            // gaps of mean `gap`, or (`Host.start_order = "created"`) index
            // order with exponential gaps, each arrival delayed by its own
            // exponential delay of the same mean (from the second RNG stream)
            let n = self.vcpus.len();
            let mut order: Vec<u32> = (0..n as u32).collect();
            match self.cfg.host.start_order {
                StartOrder::Shuffled => {
                    for i in (1..n).rev() {
                        let j = self.rng2.random_range(0..=i);
                        order.swap(i, j);
                    }
                    self.wake.enqueue_new = true;
                    self.vcpu_host_wake(order[0] as usize, WakeReason::Start);
                    self.wake.enqueue_new = false;
                    let mut at: Ns = 0;
                    for &v in &order[1..] {
                        at += self.noise_exp(gap);
                        self.push(at, Ev::Start(v));
                    }
                }
                StartOrder::Created => {
                    // created in index order, each first arriving after its own delay
                    let mut arrive: Vec<Ns> = vec![0; n];
                    let mut created: Ns = 0;
                    for a in arrive.iter_mut() {
                        created += self.noise_exp(gap);
                        *a = created + self.noise_exp(gap);
                    }
                    order.sort_by_key(|&v| (arrive[v as usize], v));
                    let first = arrive[order[0] as usize];
                    self.wake.enqueue_new = true;
                    self.vcpu_host_wake(order[0] as usize, WakeReason::Start);
                    self.wake.enqueue_new = false;
                    for &v in &order[1..] {
                        self.push(arrive[v as usize] - first, Ev::Start(v));
                    }
                }
            }
        }
        let bg: Vec<u32> =
            (0..self.tasks.len() as u32).filter(|&t| matches!(self.tasks[t as usize].kind, TaskKind::Bg(_))).collect();
        for t in bg {
            let sleep = self.bg_sleep_sample();
            self.push(sleep, Ev::BgWake(t));
        }
        self.start_noise();
        self.start_speed();
        if self.cfg.host.scheduler == Scheduler::Gang {
            self.push(0, Ev::Gang);
        }
    }

    fn dispatch(&mut self, ev: Ev) {
        if self.cfg.host.wake_placement == WakePlacement::SelectTaskRqFair {
            self.wake.waker_cpu = match ev {
                Ev::Tick(c) | Ev::Resched(c, _) => c,
                Ev::Vcpu(v, _) | Ev::Poke(v) => self.vcpus[v as usize].running.unwrap_or(NO_CPU),
                _ => NO_CPU,
            };
            if self.cfg.host.wake_wide {
                self.wake.waker_task = match ev {
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
                if self.vgen[v as usize] == gen {
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
            Ev::Token(c, gen) => self.token_slice_end(c as usize, gen),
            Ev::Speed(c) => self.speed_switch(c as usize),
        }
    }

    /// A vCPU thread's first enqueue as a new task (`wake_up_new_task`:
    /// `place_entity` with ENQUEUE_INITIAL, then `wakeup_preempt`).
    fn vcpu_arrive(&mut self, v: usize) {
        self.wake.enqueue_initial = true;
        self.wake.enqueue_new = true;
        self.vcpu_host_wake(v, WakeReason::Start);
        self.wake.enqueue_new = false;
        self.wake.enqueue_initial = false;
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

    /// Recompute vCPU `v`'s bits of the candidate masks ([`CandMasks`])
    /// from its flags: called after every write of `ready`, `blocking`,
    /// `pv_unhalted`, `posted_irq`, `preempted` or `preempted_in_kernel`.
    #[inline]
    pub(crate) fn refresh_cand(&mut self, v: usize) {
        let vc = &self.vcpus[v];
        let (vm, i) = (vc.vm as usize, vc.idx);
        if i >= 64 {
            return;
        }
        let pi = vc.apicv && vc.posted_irq;
        // dy_runnable as `Sim::view` has it
        let dy_runnable = self.tokens_on() || vc.pv_unhalted || pi;
        let base = self.ready[v] && (!vc.blocking || dy_runnable);
        let user = vc.preempted && !vc.preempted_in_kernel;
        let bit = 1u64 << i;
        let set = |w: &mut u64, on: bool| *w = (*w & !bit) | if on { bit } else { 0 };
        set(&mut self.cand.base[vm], base);
        set(&mut self.cand.user[vm], user);
        set(&mut self.cand.pi[vm], pi);
    }

    /// End the validity of vCPU `v`'s pending activity event (its activity
    /// changed); returns the new generation.
    #[inline]
    pub(crate) fn bump_gen(&mut self, v: usize) -> u32 {
        let g = &mut self.vgen[v];
        *g = g.wrapping_add(1);
        *g
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

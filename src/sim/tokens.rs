//! vcpulab's own vCPU scheduler (`Scheduler::RoundRobin`, `RelaxedCo`,
//! `Balance`), the simulated twin of `src/kvm/sched/` with
//! `sched.round_robin` / `sched.directed_yield` / `sched.relaxed_co` /
//! `sched.balance`:
//! each host CPU has one run token; a vCPU thread runs only while it holds
//! one. A token is held for a slice of `Host.token_slice_ns` of wall time,
//! then goes to the head of one FIFO queue of runnable vCPUs (the holder to
//! the tail; with nobody waiting it keeps the token). A halt hands the token
//! on at once; a woken vCPU waits at the tail; `yield_to` gives the yielder's
//! token to a waiting candidate with a fresh slice and puts the yielder at the
//! tail (`Tokens`). Relaxed co-scheduling passes over a vCPU whose
//! token-holding time leads its slowest runnable sibling by more than
//! `Host.token_skew_ns` (co-stopped), at every grant, and a slice's end
//! hands a co-stopped holder's token on even with nobody else waiting;
//! balance scheduling gives each CPU its own queue, of the vCPUs at home
//! there ((index in the VM + VM) mod P, as the real one). No token goes
//! out before every vCPU thread has arrived (`Host.start_gap_ns`); then
//! they go out in vCPU order, as the real `Scheduler::start`. Every decision
//! (a slice's end, a halt, a wake-up) then fills every free token, as the
//! real `dispatch_idle` does: with one queue, a vCPU gets the token of the
//! CPU it last held one on when that is free (its thread is pinned there),
//! else the lowest free one.
//!
//! Two levels, as on the real host: the tokens decide which vCPU thread may
//! run on a CPU; the kernel's fair scheduler (EEVDF) still shares that CPU
//! between the token's holder and the other tasks there (background load,
//! host noise). A vCPU without a token is parked (off every run queue, as a
//! gang-scheduled vCPU out of its round), so it is runnable-not-running: its
//! steal time grows and its steal-time `preempted` byte is set.
//!
//! Simplifications: a grant costs nothing here (the real hand-off's wake-up of
//! a sleeping thread, measured by the twins' calibration as
//! `sched_handoff_ns`, is charged to `yield_to` through `Host.rq_lock_ns`); a
//! token's CPU is whichever token is free or handed over (the real scheduler
//! also pins the thread there). A vCPU keeps its token while KVM polls its
//! halt and gives it up when it blocks, unless `Host.token_halt_bracket`
//! says that it gives it up before it halts, as the real programs do at
//! their pv halt bracket (then KVM polls without a token, and the poll
//! stops when the token's next holder arrives on the CPU).

use rand::Rng;

use std::collections::VecDeque;

use super::config::Scheduler;
use super::engine::Sim;
use super::policy::ESRCH;
use super::queue::Ev;
use super::state::{Ns, TState, TaskKind, Why, NO_CPU, NO_TASK};
use super::SimError;
use crate::schedule::Why as Decided;

impl Sim {
    /// `Host.scheduler == RoundRobin`.
    #[inline]
    pub(crate) fn tokens_on(&self) -> bool {
        !self.tokens.holder.is_empty()
    }

    /// Sets up one free token per host CPU. The real scheduler's slices
    /// start when its threads do, at no particular point of the host's tick
    /// period, and last their set length from the grant plus the lateness of
    /// their end (`Host.token_slice_exit_ns`: 4.02-4.06 ms measured for a
    /// 4-ms slice), every CPU's first from the same start: the
    /// host's tick grid is shifted by one phase drawn uniformly in [0, tick)
    /// from the second RNG stream (the main stream's draws stay those of the
    /// run without tokens), so that slice ends and ticks do not coincide by
    /// construction. (Until 0.3.31 each CPU's first slice was lengthened by
    /// its own drawn phase instead, which staggered the CPUs' slices: the
    /// decision logs showed relaxed co-scheduling then co-stopping at every
    /// slice end, docs/twins.md item 14.)
    pub(crate) fn setup_tokens(&mut self) {
        let p = self.rqs.len();
        self.tokens.holder = vec![None; p];
        self.tokens.gen = vec![0; p];
        let sched = self.cfg.host.scheduler;
        let per_cpu = matches!(sched, Scheduler::Balance | Scheduler::Pinned);
        self.tokens.queues = vec![VecDeque::new(); if per_cpu { p } else { 1 }];
        if sched == Scheduler::Pinned {
            // at home where it is pinned (validate: every vCPU thread is)
            self.tokens.home = (0..self.tasks.len())
                .map(|t| match self.tasks[t].kind {
                    TaskKind::Vcpu(_) => self.tasks[t].pinned.unwrap_or(0),
                    _ => 0,
                })
                .collect();
        } else if sched == Scheduler::Balance {
            // the i-th vCPU of VM v is at home on CPU (i + v) mod P: siblings apart
            self.tokens.home = (0..self.tasks.len())
                .map(|t| match self.tasks[t].kind {
                    TaskKind::Vcpu(v) => {
                        let vc = &self.vcpus[v as usize];
                        ((vc.idx + vc.vm) as usize % p) as u32
                    }
                    _ => 0,
                })
                .collect();
        }
        self.tokens.run_ns = vec![0; self.tasks.len()];
        self.tokens.granted_at = vec![0; self.tasks.len()];
        self.tokens.last_cpu = vec![NO_CPU; self.tasks.len()];
        let tick = self.cfg.host.tick_ns.max(1);
        let phase = self.rng2.random_range(0..tick);
        for rq in self.rqs.iter_mut() {
            rq.tick_off = (rq.tick_off + phase) % tick;
        }
        if self.cfg.host.token_wake_exit_ns > 0 || self.cfg.host.token_halt_bracket {
            self.tokens.unheld = vec![false; self.tasks.len()];
        }
        let spread = self.cfg.host.token_slice_exit_cpu_spread;
        if spread > 0.0 && self.cfg.host.token_slice_exit_ns > 0 {
            self.tokens.exit_factor = (0..p).map(|_| self.lognormal_factor(spread)).collect();
        }
        self.tokens.log_out = NO_TASK;
        self.decisions_on = self.cfg.trace;
    }

    /// A decision begins (`Result.schedule`'s `why` for its rows); no
    /// token has been given up in it yet.
    #[inline]
    fn token_decide(&mut self, why: Decided) {
        self.tokens.log_why = why;
        self.tokens.log_out = NO_TASK;
    }

    /// CPU `c`'s token, given up by `out` in the decision in progress, goes
    /// to whoever the next grant names; if none does, the row is logged by
    /// [`Sim::token_log_fell_free`].
    #[inline]
    fn token_given_up(&mut self, out: usize) {
        self.tokens.log_out = out as u32;
    }

    /// The token given up in this decision was not granted on: its CPU
    /// falls free (a row with no vCPU in, as the real `hand_on` logs it).
    fn token_log_fell_free(&mut self, c: usize) {
        let out = std::mem::replace(&mut self.tokens.log_out, NO_TASK);
        if out != NO_TASK && self.tokens.holder[c].is_none() {
            self.token_log(c, out, NO_TASK);
        }
    }

    /// One row of the decision log (with `Config.trace`, inside its window):
    /// CPU `c`'s token from task `out` to task `into` (NO_TASK: none).
    fn token_log(&mut self, c: usize, out: u32, into: u32) {
        if !self.decisions_on || self.trace_error.is_some() {
            return;
        }
        let until = self.cfg.trace_until_ns;
        if self.now < self.cfg.trace_from_ns || (until != 0 && self.now >= until) {
            return;
        }
        if self.decisions.try_reserve_one().is_err() {
            self.trace_error = Some(SimError::OutOfMemory(format!(
                "no memory to grow the schedule log beyond {} rows (t={} ns); shorten duration_ns, trace a window \
                 (Config.trace_from_ns / trace_until_ns) or run without trace",
                self.decisions.len(),
                self.now
            )));
            return;
        }
        let key = |t: u32| match self.tasks.get(t as usize).map(|x| x.kind) {
            Some(TaskKind::Vcpu(v)) => (self.vcpus[v as usize].vm as i32, self.vcpus[v as usize].idx as i32),
            _ => (-1, -1),
        };
        let (o, i) = (key(out), key(into));
        self.decisions.push(self.now, c as u32, o, i, self.tokens.log_why);
    }

    /// Whether vCPU task `t`, blocking, is done: it had guest threads and
    /// every one of them has ended (the real program's thread then stops:
    /// `done`), not halted until a wake-up (`halt`; a vCPU without a guest
    /// thread idles in halts, as a real vCPU whose program waits). Read
    /// only for the decision log.
    fn token_vcpu_done(&self, t: usize) -> bool {
        let TaskKind::Vcpu(v) = self.tasks[t].kind else { return false };
        let mut mine = self.threads.iter().filter(|x| x.vcpu == v).peekable();
        mine.peek().is_some() && mine.all(|x| matches!(x.state, TState::Done))
    }

    /// Whether vCPU task `t`, being woken, runs without a token until its
    /// wake bracket's exit (`Host.token_wake_exit_ns`): only a wake-up from
    /// a halt (an arriving thread asks at once, as the real one does before
    /// its first entry).
    pub(crate) fn token_wakes_unheld(&self, t: usize) -> bool {
        if self.tokens.unheld.is_empty() || self.cfg.host.token_wake_exit_ns == 0 {
            return false;
        }
        let TaskKind::Vcpu(v) = self.tasks[t].kind else { return false };
        self.vcpus[v as usize].hp.halted()
    }

    /// Whether vCPU task `t` runs without a token and has not asked yet.
    #[inline]
    pub(crate) fn token_unheld(&self, t: usize) -> bool {
        !self.tokens.unheld.is_empty() && self.tokens.unheld[t]
    }

    /// The end of the wake bracket's exit of `t`, current on its CPU
    /// without a token: it asks for one, as src/kvm/sched/'s `wake` does:
    /// it joins its queue's tail and every free token goes to the next its
    /// queue may give it to (`dispatch_idle`, [`Sim::token_fill_free`]). Returns the CPU
    /// whose token `t` got (booked for it: the caller moves it there if that
    /// is not the CPU it runs on), or None: it waits. The other grants are
    /// made as usual.
    pub(crate) fn token_ask(&mut self, t: usize) -> Option<usize> {
        self.token_decide(Decided::Wake);
        self.tokens.unheld[t] = false;
        let q = self.token_queue_of(t);
        self.tokens.queues[q].push_back(t as u32);
        let mut got = None;
        self.token_fill_free(|sim, c, n| {
            if n == t {
                sim.token_assign(c, t);
                got = Some(c);
            } else {
                sim.token_grant(c, n, true);
            }
        });
        got
    }

    /// `dispatch_idle`'s rule: every free token goes to the next vCPU its
    /// queue may give it to, passed to `give` (CPU, task). With a queue per
    /// CPU, CPU by CPU; with one queue, each vCPU it takes gets the token of
    /// the CPU it last held a token on when that one is free (its thread is
    /// pinned there: the real scheduler avoids moving a running thread),
    /// else the lowest free one.
    fn token_fill_free(&mut self, mut give: impl FnMut(&mut Self, usize, usize)) {
        if self.token_arrivals_pending() {
            return;
        }
        if self.tokens.queues.len() > 1 {
            for c in 0..self.tokens.holder.len() {
                if self.tokens.holder[c].is_some() {
                    continue;
                }
                if let Some(pos) = self.token_pick(c) {
                    let n = self.tokens.queues[c].remove(pos).expect("a picked position") as usize;
                    give(self, c, n);
                }
            }
            return;
        }
        while let Some(first) = self.tokens.holder.iter().position(|h| h.is_none()) {
            let Some(pos) = self.token_pick(first) else { return };
            let n = self.tokens.queues[0].remove(pos).expect("a picked position") as usize;
            let last = self.tokens.last_cpu[n] as usize;
            let c = if last < self.tokens.holder.len() && self.tokens.holder[last].is_none() { last } else { first };
            give(self, c, n);
        }
    }

    /// The queue vCPU task `t` waits in (its home CPU's under balance scheduling).
    fn token_queue_of(&self, t: usize) -> usize {
        if self.tokens.home.is_empty() {
            0
        } else {
            self.tokens.home[t] as usize
        }
    }

    /// The queue CPU `c`'s token is taken from.
    fn token_queue_for(&self, c: usize) -> usize {
        if self.tokens.queues.len() > 1 {
            c
        } else {
            0
        }
    }

    /// Task `t`'s token-holding time at now, its current stint included
    /// (relaxed co-scheduling's measure; kept under every token scheduler).
    fn token_run_time(&self, t: usize) -> Ns {
        let held = self.tokens.holder.contains(&Some(t as u32));
        self.tokens.run_ns[t] + if held { self.now - self.tokens.granted_at[t] } else { 0 }
    }

    /// Relaxed co-scheduling: vCPU task `t` leads its slowest runnable
    /// sibling by more than `Host.token_skew_ns` of token-holding time (a
    /// halted sibling does not count, nor one running without a token
    /// between its halt bracket and its wake bracket's ask, which the real
    /// scheduler sees halted; a holding one is progressing).
    fn token_co_stopped(&self, t: usize) -> bool {
        if self.cfg.host.scheduler != Scheduler::RelaxedCo {
            return false;
        }
        let TaskKind::Vcpu(v) = self.tasks[t].kind else { return false };
        let vm = self.vcpus[v as usize].vm as usize;
        let (v0, n) = (self.vms[vm].vcpu0 as usize, self.vms[vm].nvcpu as usize);
        let me = self.token_run_time(t);
        let slowest = (v0..v0 + n)
            .map(|s| self.vcpus[s].task as usize)
            .filter(|&s| s != t && self.tasks[s].runnable && !self.token_unheld(s))
            .map(|s| self.token_run_time(s))
            .min();
        slowest.is_some_and(|lo| me > lo.saturating_add(self.cfg.host.token_skew_ns))
    }

    /// Task `t` gives up its token: its stint's time is added to its run time.
    fn token_vacate(&mut self, t: usize) {
        self.tokens.run_ns[t] += self.now - self.tokens.granted_at[t];
    }

    /// A runnable vCPU task `t` (just woken or arrived) waits for a token.
    /// Arrivals only queue until the last vCPU thread's; then the queues
    /// are put in vCPU order and the free tokens go out, as the real
    /// `Scheduler::start` does (whatever order the threads arrived in).
    pub(crate) fn token_wait(&mut self, t: usize) {
        debug_assert!(matches!(self.tasks[t].kind, TaskKind::Vcpu(_)));
        self.token_decide(if self.wake.enqueue_new { Decided::Start } else { Decided::Wake });
        if self.wake.enqueue_new {
            // an arriving thread has not entered KVM_RUN: not blocking (the
            // real scheduler's view of a vCPU queued before its first token;
            // the simulated vCPU starts as if halted until it first runs)
            if let TaskKind::Vcpu(v) = self.tasks[t].kind {
                self.vcpus[v as usize].blocking = false;
                self.refresh_cand(v as usize);
            }
        }
        self.tasks[t].parked = true;
        let q = self.token_queue_of(t);
        self.tokens.queues[q].push_back(t as u32);
        if self.wake.enqueue_new {
            self.tokens.arrived += 1;
            if self.token_arrivals_pending() {
                return;
            }
            let tasks = &self.tasks;
            let vcpu_of = |t: &u32| match tasks[*t as usize].kind {
                TaskKind::Vcpu(v) => v,
                _ => u32::MAX,
            };
            for q in self.tokens.queues.iter_mut() {
                q.make_contiguous().sort_unstable_by_key(vcpu_of);
            }
        }
        self.token_dispatch_idle();
    }

    /// Whether some vCPU thread has not arrived yet (no token is given).
    #[inline]
    fn token_arrivals_pending(&self) -> bool {
        (self.tokens.arrived as usize) < self.vcpus.len()
    }

    /// Every free token goes to the next vCPU its queue may give it to
    /// (`dispatch_idle`).
    pub(crate) fn token_dispatch_idle(&mut self) {
        self.token_fill_free(|sim, c, n| sim.token_grant(c, n, true));
    }

    /// The position in CPU `c`'s queue of the vCPU its token goes to next:
    /// the first not co-stopped.
    fn token_pick(&self, c: usize) -> Option<usize> {
        let q = &self.tokens.queues[self.token_queue_for(c)];
        if self.cfg.host.scheduler != Scheduler::RelaxedCo {
            return if q.is_empty() { None } else { Some(0) };
        }
        q.iter().position(|&t| !self.token_co_stopped(t as usize))
    }

    /// CPU `c`'s token goes to the next in its queue, if anyone may take it.
    fn token_grant_next(&mut self, c: usize) {
        if let Some(pos) = self.token_pick(c) {
            let q = self.token_queue_for(c);
            let n = self.tokens.queues[q].remove(pos).expect("a picked position");
            self.token_grant(c, n as usize, true);
        }
    }

    /// CPU `c`'s (free) token goes to the parked task `t` for a fresh slice.
    /// `wakeup`: its thread, asleep until now, is woken, with the kernel's
    /// wake-up latency and preemption check (a grant at a slice's end, a halt
    /// or an arrival); a yield's hand-off is charged to the yielder instead
    /// (`rq_lock_ns`).
    fn token_grant(&mut self, c: usize, t: usize, wakeup: bool) {
        debug_assert!(self.tokens.holder[c].is_none() && self.tasks[t].parked && self.tasks[t].runnable);
        self.token_assign(c, t);
        self.tasks[t].cpu = c as u32;
        self.tasks[t].parked = false;
        // Its thread slept while it waited: under DELAY_DEQUEUE (v6.12+) a
        // sleeper with negative lag stays queued, ineligible, and leaves at
        // the 0-lag point ("sched/fair: Implement delayed dequeue",
        // P. Zijlstra, 2024), so it wakes owing nothing; a positive lag is
        // kept. Simplified: the wait is taken as long enough to spend it.
        self.tasks[t].vlag = self.tasks[t].vlag.max(0);
        self.rq_add(t, wakeup);
    }

    /// CPU `c`'s free token goes to `t` for a fresh slice (the bookkeeping
    /// of a grant; `token_grant` also puts a parked `t` on the CPU).
    fn token_assign(&mut self, c: usize, t: usize) {
        let out = std::mem::replace(&mut self.tokens.log_out, NO_TASK);
        self.token_log(c, out, t as u32);
        self.tokens.holder[c] = Some(t as u32);
        self.tokens.granted_at[t] = self.now;
        self.tokens.last_cpu[t] = c as u32;
        if let TaskKind::Vcpu(v) = self.tasks[t].kind {
            let vc = &mut self.vcpus[v as usize];
            vc.c.token_grants += 1;
            // the real scheduler clears the byte as it grants, before the vCPU enters
            vc.st_preempted = false;
        }
        self.tokens.gen[c] = self.tokens.gen[c].wrapping_add(1);
        let end = self.now + self.token_slice_len(c);
        self.push(end, Ev::Token(c as u32, self.tokens.gen[c]));
    }

    /// A slice of CPU `c` from now: `Host.token_slice_ns`, plus its end's
    /// lateness (`Host.token_slice_exit_ns`, times the CPU's own factor of
    /// `token_slice_exit_cpu_spread`, a log-normal draw with
    /// `token_slice_exit_jitter`, from the second RNG stream).
    fn token_slice_len(&mut self, c: usize) -> Ns {
        let (slice, mut exit, j) =
            (self.cfg.host.token_slice_ns, self.cfg.host.token_slice_exit_ns, self.cfg.host.token_slice_exit_jitter);
        if exit == 0 {
            return slice;
        }
        if let Some(&f) = self.tokens.exit_factor.get(c) {
            exit = (exit as f64 * f).round() as Ns;
        }
        let late = if j > 0.0 { (exit as f64 * self.lognormal_factor(j)).round() as Ns } else { exit };
        slice + late
    }

    /// The CPU whose token `t` holds.
    fn token_of(&self, t: usize) -> Option<usize> {
        self.tokens.holder.iter().position(|&h| h == Some(t as u32))
    }

    /// `Host.token_halt_bracket`: vCPU `v`, about to halt, gives its token
    /// up (the halt bracket, src/kvm/sched/'s `halt`): the token goes on at
    /// once (to a vCPU put on this CPU beside it, whose arrival ends the
    /// halt's poll loop), and `v` runs on without one: a wake-up caught
    /// before it blocks (a pending interrupt, a successful poll) asks for a
    /// token again through the wake bracket (`ExitKind::TokenAsk`).
    pub(crate) fn token_halt_bracket(&mut self, v: usize) {
        let t = self.vcpus[v].task as usize;
        if self.token_of(t).is_some() {
            self.token_release(t);
            self.tokens.unheld[t] = true;
        }
    }

    /// `t` (curr of its CPU) blocks: its token goes on (`dequeue_sleep`).
    pub(crate) fn token_release(&mut self, t: usize) {
        if let Some(c) = self.token_of(t) {
            let done = self.decisions_on && self.token_vcpu_done(t);
            self.token_decide(if done { Decided::Done } else { Decided::Halt });
            self.token_vacate(t);
            self.tokens.holder[c] = None;
            self.token_given_up(t);
            self.token_grant_next(c);
            self.token_log_fell_free(c);
            if self.cfg.host.scheduler == Scheduler::RelaxedCo {
                // a co-stop may have ended: fill the free tokens (under the
                // other token schedulers no free token has a waiter here)
                self.token_dispatch_idle();
            }
        }
    }

    /// Parks `t`, the holder of CPU `c`'s token, at the tail of the queue and
    /// frees the token. A current `t` leaves its CPU at the caller's
    /// reschedule (an exit handler first ends); a queued one leaves its queue now.
    fn token_park_holder(&mut self, c: usize, t: usize) {
        self.tasks[t].parked = true;
        if self.rqs[c].curr == Some(t as u32) {
            self.update_curr(c);
            let v = self.avg_vruntime(c);
            self.save_lag(t, v);
        } else {
            self.rq_remove_queued(t);
            self.tasks[t].wait_since = self.tasks[t].wait_since.min(self.now);
            // runnable without a token: the real scheduler sets its byte (a
            // current holder's is set as it leaves the CPU, `vcpu_sched_out`)
            if let TaskKind::Vcpu(v) = self.tasks[t].kind {
                self.set_st_preempted(v as usize);
            }
        }
        self.token_vacate(t);
        self.tokens.holder[c] = None;
        let q = self.token_queue_of(t);
        self.tokens.queues[q].push_back(t as u32);
    }

    /// `Ev::Token`: CPU `c`'s slice of generation `gen` ends.
    pub(crate) fn token_slice_end(&mut self, c: usize, gen: u32) {
        if gen != self.tokens.gen[c] {
            return;
        }
        let Some(t) = self.tokens.holder[c].map(|t| t as usize) else { return };
        let costop = self.token_co_stopped(t);
        if !costop && self.token_pick(c).is_none() {
            // nobody may take it: another slice (no decision)
            self.tokens.gen[c] = self.tokens.gen[c].wrapping_add(1);
            let end = self.now + self.token_slice_len(c);
            self.push(end, Ev::Token(c as u32, self.tokens.gen[c]));
            return;
        }
        let was_curr = self.rqs[c].curr == Some(t as u32);
        self.token_decide(if costop { Decided::CoStop } else { Decided::Slice });
        self.token_park_holder(c, t);
        self.token_given_up(t);
        self.token_grant_next(c);
        self.token_log_fell_free(c);
        if self.cfg.host.scheduler == Scheduler::RelaxedCo {
            // a co-stop may have ended, or another token fell free before
            self.token_dispatch_idle();
        }
        if was_curr && self.tokens.holder[c] != Some(t as u32) {
            self.resched(c, Why::Slice);
        }
    }

    /// `yield_to` under vcpulab's scheduler (`src/kvm/sched/`, `SchedCtx::yield_to`):
    /// a waiting (parked) `target` gets the yielder's token with a fresh slice
    /// and the yielder waits at the queue's tail (1); a target holding a token
    /// gives -ESRCH when nobody waits for one (undercommitted), else 0; a
    /// halted one 0. Costs `yield_check_ns` + `rq_lock_ns` of handler time
    /// (the scheduler's one lock; no contention is modelled). The caller makes
    /// the yielder call schedule() when its handler ends.
    pub(crate) fn token_yield_to(&mut self, me: usize, target: usize, t: &mut Ns) -> i32 {
        let h = &self.cfg.host;
        *t += h.yield_check_ns + h.rq_lock_ns;
        self.vcpus[me].c.yield_attempts += 1;
        let (me_task, tg_task) = (self.vcpus[me].task as usize, self.vcpus[target].task as usize);
        let Some(a) = self.token_of(me_task) else {
            // (a spinner runs, so it holds a token: not reached by the model)
            self.vcpus[me].c.yield_zero += 1;
            return 0;
        };
        if !self.tasks[tg_task].runnable {
            self.vcpus[me].c.yield_zero += 1;
            return 0;
        }
        if !self.tasks[tg_task].parked {
            // it holds a token
            if self.cfg.host.yield_to_esrch && self.tokens.queues.iter().all(|q| q.is_empty()) {
                self.vcpus[me].c.yield_esrch += 1;
                return ESRCH;
            }
            self.vcpus[me].c.yield_zero += 1;
            return 0;
        }
        let q = self.token_queue_of(tg_task);
        let pos =
            self.tokens.queues[q].iter().position(|&x| x == tg_task as u32).expect("a parked vCPU waits in its queue");
        self.tokens.queues[q].remove(pos);
        self.token_decide(Decided::Yield);
        self.token_park_holder(a, me_task);
        self.token_given_up(me_task);
        self.token_grant(a, tg_task, false);
        self.wake.boost_task = super::state::NO_TASK;
        self.vcpus[me].c.yield_ok += 1;
        1
    }
}

#[cfg(test)]
#[path = "tokens_tests.rs"]
mod tests;

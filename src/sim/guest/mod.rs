//! The guest kernel: workload threads on a VM's vCPUs, phase by phase
//! (`vcpu_step`, `begin_phase`), and its parts: locks of four kinds plus a
//! mutex and a reader-writer semaphore (`locks`), IPIs (`ipi`), and wake-up
//! placement and load balancing (`placement`). KVM's side of the vCPUs it
//! runs on is `vcpu.rs`.

mod ipi;
mod locks;
mod placement;

pub use locks::effective_lock_kind;

/// What `begin_phase` / the step loop decided.
pub(crate) enum Flow {
    /// The vCPU's state changed; look again.
    Again,
    /// An activity was started; stop.
    Started,
}

use super::config::{LockKind, Phase};
use super::engine::Sim;
use super::queue::Ev;
use super::state::*;
use rand::Rng;

impl Sim {
    // --------------------------------------------------------------- the guest

    /// Decide what the (running) vCPU does next and start it.
    pub fn vcpu_step(&mut self, v: usize) {
        debug_assert!(self.vcpus[v].running.is_some());
        let mut rounds = 0u32;
        loop {
            rounds += 1;
            if rounds > 1_000_000 {
                // a cycle of phases that takes no time: stop the run with an error
                self.stuck = Some(format!("vCPU {v} makes no progress at t={} ns", self.now));
                let end = self.now + 1;
                self.set_act(v, Act::IdlePoll { start: self.now, end }, NEVER, C_IDLEPOLL);
                return;
            }
            // the vCPU's start (interrupts off) comes before anything else
            if !self.vcpus[v].started {
                if self.vcpus[v].start_rem > 0 {
                    self.start_exec(v, ExecWhat::Start);
                    return;
                }
                self.vcpus[v].started = true;
            }
            // a handler interrupted by the host goes on; a new one waits while interrupts are off
            if self.vcpus[v].ipi_rem > 0 || (!self.vcpus[v].ipis.is_empty() && !self.irqs_disabled(v)) {
                if self.vcpus[v].ipi_rem == 0 {
                    let vm = self.vm_of(v);
                    self.vcpus[v].ipi_rem = self.ipi_handler_ns(vm).max(1);
                }
                self.start_exec(v, ExecWhat::Ipi);
                return;
            }
            if self.token_unheld(self.vcpus[v].task as usize) {
                // woken without a token: its wake bracket's exit asks for one
                let end = self.now + self.cfg.host.token_wake_exit_ns;
                self.start_exit(v, end, ExitKind::TokenAsk, C_EXIT);
                return;
            }
            if self.vcpus[v].start_wait {
                // vCPU 0 waits, spinning, until every other vCPU has started and is idle
                if self.others_started_and_idle(v) {
                    self.vcpus[v].start_wait = false;
                } else {
                    self.start_spin(v, false);
                    return;
                }
            }
            let vc = &mut self.vcpus[v];
            let t = match vc.cur {
                Some(t) => t as usize,
                None => match vc.runq.pop_front() {
                    Some(t) => {
                        // the guest leaves its idle loop: an interrupted idle poll is over
                        vc.idle_poll_left = None;
                        vc.cur = Some(t);
                        let th = &mut self.threads[t as usize];
                        th.state = TState::Current;
                        th.vcpu = v as u32;
                        t as usize
                    }
                    None => {
                        let vm = self.vm_of(v);
                        if self.vms[vm].cfg.guest.load_balance {
                            if self.guest_newidle_balance(v) {
                                continue;
                            }
                            if self.vcpus[v].idle_stamp.is_none() {
                                self.vcpus[v].idle_stamp = Some(self.now);
                            }
                        }
                        self.guest_idle(v);
                        return;
                    }
                },
            };
            let flow = match self.threads[t].step {
                Step::Begin => self.begin_phase(v, t),
                Step::Work { hold, .. } => {
                    if self.threads[t].rem > 0 {
                        self.start_exec(v, ExecWhat::Thread);
                        Flow::Started
                    } else {
                        self.finish_work(v, t, hold)
                    }
                }
                Step::AwaitLock { lock } => self.await_lock(v, t, lock),
                Step::IpiWait => {
                    if self.threads[t].acks == 0 {
                        self.advance(t);
                        self.drop_if_done(v, t);
                        Flow::Again
                    } else {
                        self.start_spin(v, false);
                        Flow::Started
                    }
                }
                Step::Waiting => unreachable!("a waiting thread is not current"),
            };
            if let Flow::Started = flow {
                return;
            }
        }
    }

    /// The vCPU's current thread waits for or holds a lock taken with
    /// interrupts off (`Lock.irqs_off`): no interrupt is delivered to it.
    #[inline]
    pub(crate) fn irqs_disabled(&self, v: usize) -> bool {
        self.vcpus[v].cur.is_some_and(|t| self.threads[t as usize].irqs_off)
    }

    /// Every vCPU of `v`'s VM but `v` has run its start and has nothing to
    /// run (`Guest.vcpu0_waits_for_starts`).
    fn others_started_and_idle(&self, v: usize) -> bool {
        let vm = self.vm_of(v);
        let (v0, n) = (self.vms[vm].vcpu0 as usize, self.vms[vm].nvcpu as usize);
        (v0..v0 + n).filter(|&c| c != v).all(|c| self.vcpus[c].started && self.guest_idle_cpu(c))
    }

    pub(crate) fn ipi_handler_ns(&self, vm: usize) -> Ns {
        // the handler length of the VM's first IPI phase
        self.vms[vm]
            .cfg
            .workload
            .phases
            .iter()
            .find_map(|p| if let Phase::Ipi { handler_ns, .. } = p { Some(*handler_ns) } else { None })
            .unwrap_or(1_000)
    }

    pub(crate) fn drop_if_done(&mut self, v: usize, t: usize) {
        if self.threads[t].state == TState::Done {
            self.vcpus[v].cur = None;
        }
    }

    pub(crate) fn block_current(&mut self, v: usize, t: usize) {
        self.vcpus[v].cur = None;
        self.threads[t].state = TState::Blocked;
        self.threads[t].last_ran = self.now;
    }

    /// Thread `t` ends (its iterations are done, or its VM's task queue ran
    /// its last frame); the VM finishes with its last thread.
    pub(crate) fn finish_thread(&mut self, t: usize) {
        let now = self.now;
        let vm = self.threads[t].vm as usize;
        self.threads[t].state = TState::Done;
        let vmr = &mut self.vms[vm];
        vmr.done_threads += 1;
        if vmr.done_threads == vmr.nthread {
            vmr.finished_at = Some(now);
            self.vms_done += 1;
        }
    }

    /// `Phase::TaskQueue`: take a task, or wait for the frame's end; the last
    /// thread to find the queue empty ends the frame: it refills the queue
    /// and wakes the others to take again, or, after the last frame, ends
    /// every thread.
    pub(crate) fn task_queue(&mut self, v: usize, t: usize, tasks: u32, frames: u32) {
        let vm = self.threads[t].vm as usize;
        if self.vms[vm].tq_left > 0 {
            self.vms[vm].tq_left -= 1;
            self.advance(t);
            return;
        }
        let active = self.vms[vm].nthread - self.vms[vm].done_threads;
        if (self.vms[vm].tq_waiting.len() as u32) + 1 < active {
            self.vms[vm].tq_waiting.push(t as u32);
            self.threads[t].step = Step::Waiting;
            self.block_current(v, t);
            return;
        }
        let waiting = std::mem::take(&mut self.vms[vm].tq_waiting);
        self.vms[vm].tq_frames += 1;
        if frames > 0 && self.vms[vm].tq_frames >= frames {
            for w in waiting {
                self.finish_thread(w as usize);
            }
            self.finish_thread(t);
            self.drop_if_done(v, t);
            return;
        }
        self.vms[vm].tq_left = tasks - 1;
        self.advance(t);
        for w in waiting {
            // it runs this phase again when it wakes: it takes a task or waits
            self.threads[w as usize].step = Step::Begin;
            self.wake_thread(w as usize, WakeReason::Ipi, Some(t));
        }
    }

    /// Next phase (and iteration bookkeeping).
    pub fn advance(&mut self, t: usize) {
        let now = self.now;
        let vm = self.threads[t].vm as usize;
        let nph = self.vms[vm].cfg.workload.phases_for(self.threads[t].idx).len();
        let goal = self.vms[vm].cfg.workload.iterations;
        let th = &mut self.threads[t];
        th.pc += 1;
        th.step = Step::Begin;
        if th.pc < nph {
            return;
        }
        th.pc = 0;
        th.iters += 1;
        let lat = now - th.iter_start;
        th.iter_start = now;
        let done = goal > 0 && th.iters >= goal;
        if now >= self.cfg.warmup_ns {
            let vmr = &mut self.vms[vm];
            vmr.ops += 1;
            super::hist::hist_add(&mut vmr.latencies, lat);
        }
        if done {
            self.finish_thread(t);
        }
    }

    pub(crate) fn begin_phase(&mut self, v: usize, t: usize) -> Flow {
        let vm = self.threads[t].vm as usize;
        let pc = self.threads[t].pc;
        let phase = self.vms[vm].cfg.workload.phases_for(self.threads[t].idx)[pc].clone();
        if !self.chance(phase.prob()) {
            self.advance(t);
            self.drop_if_done(v, t);
            return Flow::Again;
        }
        match phase {
            Phase::Compute { ns, dist, mode, .. } => {
                let d = self.sample(ns, dist);
                let th = &mut self.threads[t];
                th.rem = d;
                th.step = Step::Work { kernel: mode == super::config::Mode::Kernel, hold: None };
            }
            Phase::Lock { lock, lock_kind, hold_ns, dist, sites, irqs_off, .. } => {
                // one of the phase's sites, drawn only when there are several (the draws of
                // one-site phases, and so every earlier result, stay as they were)
                let lock = if sites > 1 { lock + self.rng.random_range(0..sites) } else { lock };
                let d = self.sample(hold_ns, dist);
                self.threads[t].rem = d;
                self.threads[t].rw_read = lock_kind == LockKind::RwsemRead;
                self.threads[t].rw_granted = false;
                self.threads[t].spun = 0;
                self.threads[t].pv_halted = false;
                self.threads[t].pv_hashed = false;
                self.threads[t].pv_unfair = false;
                self.threads[t].lock_wait_start = self.now;
                // local_irq_save before the acquisition: no handler runs until the release
                self.threads[t].irqs_off = irqs_off;
                if self.lock_try(vm, lock as usize, t) || self.pv_steal(v, vm, lock as usize, t) {
                    self.record_lock_wait(vm, t);
                    self.threads[t].step = Step::Work { kernel: true, hold: Some(lock) };
                } else if self.pv_enter_unfair(vm, lock as usize, t) {
                    self.threads[t].step = Step::AwaitLock { lock };
                } else {
                    self.vms[vm].locks[lock as usize].waiters.push_back(t as u32);
                    self.threads[t].step = Step::AwaitLock { lock };
                }
            }
            Phase::Ipi { targets, tlb_flush, .. } => return self.send_ipis(v, t, targets, tlb_flush),
            Phase::Barrier { .. } => {
                let active = self.vms[vm].nthread - self.vms[vm].done_threads;
                if self.vms[vm].barrier_waiting.len() as u32 + 1 >= active {
                    let waiting = std::mem::take(&mut self.vms[vm].barrier_waiting);
                    for w in waiting {
                        self.advance(w as usize);
                        self.wake_thread(w as usize, WakeReason::Ipi, Some(t));
                    }
                    self.advance(t);
                    self.drop_if_done(v, t);
                } else {
                    self.vms[vm].barrier_waiting.push(t as u32);
                    self.threads[t].step = Step::Waiting;
                    self.block_current(v, t);
                }
            }
            Phase::Sleep { ns, dist, periodic, .. } => {
                let d = if periodic { ns - self.now % ns } else { self.sample(ns, dist) };
                let th = &mut self.threads[t];
                th.step = Step::Waiting;
                th.wake_gen = th.wake_gen.wrapping_add(1);
                let gen = th.wake_gen;
                self.push(self.now + d, Ev::ThreadWake(t as u32, gen));
                self.block_current(v, t);
            }
            Phase::Send { to, .. } => {
                let (t0, n) = (self.vms[vm].thread0, self.vms[vm].nthread);
                let idx = self.threads[t].idx;
                let dst = (t0 + (idx + to) % n) as usize;
                let dth = &self.threads[dst];
                let in_recv = dth.state == TState::Blocked
                    && dth.step == Step::Waiting
                    && matches!(self.vms[vm].cfg.workload.phases_for(dth.idx)[dth.pc], Phase::Recv { .. });
                if in_recv {
                    self.advance(dst);
                    self.wake_thread(dst, WakeReason::Ipi, Some(t));
                } else {
                    self.threads[dst].msgs += 1;
                }
                self.advance(t);
                self.drop_if_done(v, t);
            }
            Phase::TaskQueue { tasks, frames, .. } => self.task_queue(v, t, tasks, frames),
            Phase::Recv { .. } => {
                if self.threads[t].msgs > 0 {
                    self.threads[t].msgs -= 1;
                    self.advance(t);
                    self.drop_if_done(v, t);
                } else {
                    self.threads[t].step = Step::Waiting;
                    self.block_current(v, t);
                }
            }
        }
        Flow::Again
    }

    pub(crate) fn finish_work(&mut self, v: usize, t: usize, hold: Option<u32>) -> Flow {
        self.advance(t);
        let mut flow = Flow::Again;
        if let Some(lock) = hold {
            flow = self.lock_release(v, t, lock as usize);
            // local_irq_restore after the release: pending IPIs run next
            self.threads[t].irqs_off = false;
        }
        self.drop_if_done(v, t);
        flow
    }
}

#[cfg(test)]
mod placement_tests;
#[cfg(test)]
mod tests;

//! KVM's side of a vCPU ([K1], [K4]): the host scheduling the vCPU thread in
//! and out (`kvm_sched_in`/`vcpu_load`, `kvm_sched_out`/`vcpu_put`, steal
//! time, the `preempted` byte), its activities in the guest (executing,
//! spinning towards a pause-loop exit, idle polling, exits), the halt path
//! (`kvm_vcpu_halt`'s poll window, block and wake-up), the PV yield
//! hypercall's handler and the pcpu_is_idle RFC's host hooks.
//!
//! A vCPU has at most one *activity* at a time (`Act`), with one pending event
//! at its planned end; anything that may change what it does (a lock granted,
//! an IPI, a thread placed on it) sends it a zero-delay `Poke`. What the guest
//! does on it next is decided by the guest kernel (`guest/`).

use super::config::{IdlePollLimit, LockKind, LockModel, Placement, PreemptedByte};
use super::engine::Sim;
use super::policy::VcpuView;
use super::queue::Ev;
use super::state::*;

impl Sim {
    // --------------------------------------------------------------- host side

    /// The host picked this vCPU thread (kvm_sched_in + vcpu_load + record_steal_time).
    pub fn vcpu_sched_in(&mut self, v: usize, cpu: usize) {
        let vm = self.vm_of(v);
        let ple_enabled = self.vms[vm].cfg.ple.enabled;
        let task = self.vcpus[v].task as usize;
        let run_delay = self.tasks[task].run_delay;
        let (base, shrink) = (self.vms[vm].cfg.ple.window, self.vms[vm].cfg.ple.shrink);
        self.ready[v] = false;
        let cold = self.migration_cold(self.vcpus[v].last_cpu as usize, cpu);
        let vc = &mut self.vcpus[v];
        vc.cold_ns = vc.cold_ns.max(cold);
        vc.running = Some(cpu as u32);
        vc.last_cpu = cpu as u32;
        vc.preempted = false;
        vc.blocking = false;
        vc.c.sched_in += 1;
        if vc.scheduled_out && ple_enabled {
            vc.ple_window = super::ple::shrink_ple_window(vc.ple_window, base, shrink, base);
        }
        vc.scheduled_out = false;
        // record_steal_time: clear the preempted byte, publish steal.
        vc.st_preempted = false;
        vc.steal_ns = run_delay;
        vc.posted_irq = false;
        vc.pv_unhalted = false;
        self.refresh_cand(v);
        if self.vms[vm].cfg.pv.placement.is_rfc() {
            self.rfc_record_steal_time(v, cpu);
        }
        let vc = &mut self.vcpus[v];
        if vc.in_spin_loop {
            // back from schedule() inside yield_to: kvm_vcpu_on_spin returns.
            vc.in_spin_loop = false;
            vc.dy_eligible = false;
        }
        debug_assert_eq!(vc.act, Act::Off);
        let switch = self.cfg.host.switch_ns;
        if switch > 0 {
            // context_switch() and kvm_arch_vcpu_load() first (Host.switch_ns)
            // (the guest's own state, in_kernel included, is left as it was)
            let end = self.now + self.host_path_ns(cpu, switch);
            self.set_act(v, Act::Exit { end, kind: ExitKind::Switch }, end, C_EXIT);
            return;
        }
        self.vcpu_resume(v, cpu);
    }

    /// The vCPU's guest resumes after its thread was switched in: back in
    /// the halt-poll loop or from `kvm_vcpu_block()` if it halted, else the
    /// next step of its guest code.
    pub(crate) fn vcpu_resume(&mut self, v: usize, cpu: usize) {
        if self.vcpus[v].hp.halted() {
            match self.vcpus[v].poll_resume.take() {
                // preempted inside the poll loop: it goes on polling
                Some(stop) => {
                    self.halt_poll_resume(v, cpu, stop);
                    return;
                }
                // back from kvm_vcpu_block(): halt_wait_ns, poll stats, window update
                None => {
                    self.halt_end(v, true);
                    let pv = &self.vms[self.vm_of(v)].cfg.pv;
                    let (mut cost, j) = (pv.halt_wake_ns, pv.halt_wake_jitter);
                    if cost > 0 && j > 0.0 {
                        // Pv.halt_wake_jitter: a log-normal draw around the median
                        cost = (cost as f64 * self.lognormal_factor(j)).round() as Ns;
                    }
                    cost = self.host_path_ns(cpu, cost);
                    if cost > 0 {
                        // the block's return before the guest resumes (Pv.halt_wake_ns);
                        // exit_done resumes it, no longer halted
                        let end = self.now + cost;
                        self.set_act(v, Act::Exit { end, kind: ExitKind::Switch }, end, C_EXIT);
                        return;
                    }
                }
            }
        }
        self.vcpu_step(v);
    }

    /// The host switched this vCPU thread out (kvm_sched_out + kvm_arch_vcpu_put).
    pub fn vcpu_sched_out(&mut self, v: usize, why: Why) {
        // at_instruction_boundary ([K4]): only a vCPU taken out of guest mode
        // by the interrupt (tick, reschedule IPI) that preempts it; one that
        // was in the host already (an exit handler, the halt-poll loop) exited
        // for another reason and is not reported
        let in_guest = matches!(self.vcpus[v].act, Act::Exec { .. } | Act::Spin { .. } | Act::IdlePoll { .. });
        self.pause_act(v);
        let task = self.vcpus[v].task as usize;
        let runnable = self.tasks[task].runnable;
        let vm = self.vm_of(v);
        let steal_time = self.vms[vm].cfg.pv.steal_time;
        let byte = self.vms[vm].cfg.pv.preempted_byte;
        let every_put = byte == PreemptedByte::EveryPut;
        // vcpulab's token schedulers write the byte of a runnable vCPU that
        // loses its token (a parked one), whatever KVM does
        let kvm_writes = byte != PreemptedByte::Never;
        let token_park = runnable && self.tasks[task].parked && self.tokens_on();
        let now = self.now;
        if runnable {
            self.ready[v] = true;
        }
        if self.vms[vm].cfg.pv.placement.is_rfc() {
            self.rfc_vcpu_put(v);
        }
        let vc = &mut self.vcpus[v];
        vc.running = None;
        vc.scheduled_out = true;
        if runnable {
            // still runnable inside KVM_RUN: preempted (involuntarily, or by a yield)
            vc.preempted = true;
            vc.preempted_in_kernel = vc.in_kernel;
            let kvm_sets = if in_guest && why.at_instruction_boundary() {
                vc.c.preemption_reported += 1;
                kvm_writes
            } else {
                vc.c.preemption_other += 1;
                every_put
            };
            vc.acct.set(now, C_WAIT);
            if kvm_sets || token_park {
                self.set_st_preempted(v);
            }
        } else {
            vc.acct.set(now, C_HALT);
            // before 5.19 kvm_arch_vcpu_put marks a blocking vCPU preempted too
            // (nothing runs on a halted vCPU, so no spinner needs telling)
            if every_put && steal_time {
                vc.st_preempted = true;
            }
        }
        self.refresh_cand(v);
    }

    /// Sets vCPU `v`'s steal-time `preempted` byte (with steal time on) and,
    /// if it was clear, tells the guest's waiters that read it: vcpulab's
    /// token schedulers write it when a runnable vCPU loses its token.
    pub(crate) fn set_st_preempted(&mut self, v: usize) {
        let vm = self.vm_of(v);
        if !self.vms[vm].cfg.pv.steal_time || self.vcpus[v].st_preempted {
            return;
        }
        self.vcpus[v].st_preempted = true;
        self.notify_mutex_spinners(v);
        if self.vms[vm].cfg.guest.lock_model == LockModel::Kernel {
            self.notify_preempted_kernel(v);
        }
    }

    /// kvm_vcpu_kick / kvm_vcpu_wake_up with the reason's side effects.
    pub fn vcpu_host_wake(&mut self, v: usize, reason: WakeReason) {
        let vm = self.vm_of(v);
        let apicv = self.vms[vm].cfg.pv.apicv;
        let vc = &mut self.vcpus[v];
        match reason {
            WakeReason::Kick => vc.pv_unhalted = true,
            WakeReason::Ipi => vc.posted_irq |= apicv,
            WakeReason::Timer | WakeReason::Start => {}
        }
        self.refresh_cand(v);
        let vc = &mut self.vcpus[v];
        if !vc.halted {
            if vc.running.is_some() {
                self.poke(v);
            }
            return;
        }
        if reason == WakeReason::Ipi && self.irqs_disabled(v) {
            // halted with IF=0 (kvm_wait's halt() in an irqs-off lock wait): the
            // interrupt stays pending and kvm_vcpu_check_block sees no event
            return;
        }
        self.vcpus[v].halted = false;
        self.ready[v] = true;
        self.refresh_cand(v);
        let vc = &mut self.vcpus[v];
        if reason != WakeReason::Start {
            vc.hp.on_wakeup();
        }
        let now = self.now;
        vc.acct.set(now, C_WAIT);
        let task = vc.task as usize;
        self.enqueue(task);
    }

    /// vCPU `v` runs in guest mode (its thread is on a CPU and the vCPU
    /// executes, spins or idle-polls: `PF_VCPU`).
    #[inline]
    pub(crate) fn vcpu_in_guest(&self, v: usize) -> bool {
        let vc = &self.vcpus[v];
        vc.running.is_some() && matches!(vc.act, Act::Exec { .. } | Act::Spin { .. } | Act::IdlePoll { .. })
    }

    /// The live view of vCPU `v` a policy reads ([`VcpuView`]).
    pub fn view(&self, v: usize) -> VcpuView {
        let vc = &self.vcpus[v];
        let apicv = self.vms[vc.vm as usize].cfg.pv.apicv;
        let pi = apicv && vc.posted_irq;
        // under vcpulab's scheduler the policy sees the real scheduler's view
        // (src/kvm/sched/spin.rs): a vCPU woken from its halt that has not run
        // since is dy_runnable whatever woke it (the real `woken`)
        let dy_runnable = if self.tokens_on() { vc.blocking && self.ready[v] } else { vc.pv_unhalted || pi };
        VcpuView {
            index: vc.idx,
            running: vc.running.is_some(),
            in_guest: self.vcpu_in_guest(v),
            preempted: vc.preempted,
            ready: self.ready[v],
            blocking: vc.blocking,
            dy_runnable,
            pending_interrupt: pi,
            in_spin_loop: vc.in_spin_loop,
            dy_eligible: vc.dy_eligible,
            preempted_in_kernel: vc.preempted_in_kernel,
            st_preempted: vc.st_preempted,
            steal_ns: vc.steal_ns,
            pcpu_is_idle: self.pcpu_is_idle(v),
            ple_window: vc.ple_window,
        }
    }

    // -------------------------------------------------------------- activities

    /// Account the progress of the current activity and stop it.
    pub fn pause_act(&mut self, v: usize) {
        let now = self.now;
        match self.vcpus[v].act {
            Act::Exec { start, what, pct, .. } => {
                // the cache refill owed comes first, then the work
                let cold = self.vcpus[v].cold_ns.min(now - start);
                self.vcpus[v].cold_ns -= cold;
                let el = self.work_progress(now - start - cold, pct);
                match what {
                    ExecWhat::Ipi => {
                        let vc = &mut self.vcpus[v];
                        vc.ipi_rem = vc.ipi_rem.saturating_sub(el).max(1);
                    }
                    ExecWhat::Start => {
                        let vc = &mut self.vcpus[v];
                        vc.start_rem = vc.start_rem.saturating_sub(el).max(1);
                    }
                    ExecWhat::Thread => {
                        if let Some(t) = self.vcpus[v].cur {
                            let th = &mut self.threads[t as usize];
                            th.rem = th.rem.saturating_sub(el);
                        }
                    }
                }
            }
            Act::Spin { start, .. } => {
                if let Some(t) = self.vcpus[v].cur {
                    self.threads[t as usize].spun += now - start;
                }
            }
            Act::HaltPoll { end, .. } => {
                // preempted inside kvm_vcpu_halt's poll loop (which times itself
                // with ktime, so the time away counts as polling): it resumes
                // there when it runs again
                self.vcpus[v].poll_resume = Some(end);
            }
            Act::Exit { .. } => {
                if let Some(cpu) = self.vcpus[v].running {
                    self.rqs[cpu as usize].curr_in_exit = false;
                }
            }
            Act::IdlePoll { end, .. } => {
                // the guest's idle loop goes on polling if nothing to run comes:
                // to the same end, or for the checks it has left
                let vm = self.vcpus[v].vm as usize;
                self.vcpus[v].idle_poll_left = Some(match self.vms[vm].cfg.pv.guest_idle_poll_limit {
                    IdlePollLimit::Clock => PollLeft::Until(end),
                    IdlePollLimit::Checks => PollLeft::For(end.saturating_sub(now)),
                });
            }
            Act::Off => {}
        }
        self.vcpus[v].act = Act::Off;
        self.bump_gen(v);
    }

    /// Start an activity ending at `end` (NEVER: no event), in category `cat`
    /// (what `vset` does, with one look-up of the vCPU).
    ///
    /// Always inlined, so that the caller builds `act` in place: passed by
    /// reference to a function, the `Act` was written to the stack field by
    /// field and read back 16 bytes at a time, a failed store-to-load
    /// forwarding that stalled every activity change (perf: 4-5 % of the
    /// time of 8 × 20 under PLE).
    #[inline(always)]
    pub(crate) fn set_act(&mut self, v: usize, act: Act, end: Ns, cat: usize) {
        self.vcpus[v].act = act;
        self.act_started(v, matches!(act, Act::Exit { .. }), end, cat);
    }

    /// The rest of `set_act`, out of line.
    pub(crate) fn act_started(&mut self, v: usize, exit: bool, end: Ns, cat: usize) {
        let now = self.now;
        let gen = self.bump_gen(v);
        let vc = &mut self.vcpus[v];
        vc.acct.set(now, cat);
        if let Some(cpu) = vc.running {
            let rq = &mut self.rqs[cpu as usize];
            rq.acct.set(now, cat);
            rq.curr_in_exit = exit;
        }
        if end != NEVER {
            self.push_inlined(end, Ev::Vcpu(v as u32, gen));
        }
    }

    pub fn poke(&mut self, v: usize) {
        self.push(self.now, Ev::Poke(v as u32));
    }

    /// A condition this vCPU may be waiting on changed.
    pub fn poke_now(&mut self, v: usize) {
        if self.vcpus[v].running.is_none() {
            return;
        }
        match self.vcpus[v].act {
            Act::Spin { .. } => {
                self.pause_act(v);
                self.vcpu_step(v);
            }
            Act::IdlePoll { .. } => {
                // a thread placed here ends the poll (a hit); an interrupt's
                // handler runs, and the poll then goes on to its end
                let vc = &mut self.vcpus[v];
                if !vc.runq.is_empty() {
                    vc.c.guest_idle_poll_hits += 1;
                }
                self.pause_act(v);
                self.vcpu_step(v);
            }
            Act::Exec { what: ExecWhat::Thread, .. } if !self.vcpus[v].ipis.is_empty() && !self.irqs_disabled(v) => {
                // an interrupt: the handler runs first, the work resumes after
                self.pause_act(v);
                self.vcpu_step(v);
            }
            Act::HaltPoll { .. } => {
                let cpu = self.vcpus[v].running.unwrap() as usize;
                if self.has_wake_condition(v) {
                    // kvm_vcpu_check_block() < 0 while polling: success
                    self.vcpus[v].pv_unhalted = false;
                    self.refresh_cand(v);
                    self.vcpus[v].act = Act::Off;
                    self.bump_gen(v);
                    self.halt_end(v, false);
                    self.vcpu_step(v);
                } else if !self.single_task_running(cpu) {
                    // single_task_running() is false: stop polling and block
                    self.vcpus[v].act = Act::Off;
                    self.bump_gen(v);
                    self.halt_block(v);
                }
            }
            _ => {}
        }
    }

    /// The planned end of the current activity.
    pub fn vcpu_event(&mut self, v: usize) {
        let now = self.now;
        match self.vcpus[v].act {
            Act::Exec { what: ExecWhat::Start, .. } => {
                let vc = &mut self.vcpus[v];
                vc.start_rem = 0;
                vc.cold_ns = 0;
                vc.act = Act::Off;
                self.vcpu_step(v);
            }
            Act::Exec { what: ExecWhat::Ipi, .. } => {
                let vc = &mut self.vcpus[v];
                vc.ipi_rem = 0;
                vc.cold_ns = 0;
                vc.act = Act::Off;
                if let Some(sender) = vc.ipis.pop_front() {
                    self.ipi_ack(sender as usize);
                }
                self.vcpu_step(v);
            }
            Act::Exec { what: ExecWhat::Thread, .. } => {
                self.pause_act(v);
                let vc = &self.vcpus[v];
                if let Some(t) = vc.cur {
                    let th = &self.threads[t as usize];
                    if th.rem > 0 && !vc.runq.is_empty() && matches!(th.step, Step::Work { hold: None, .. }) {
                        // guest round-robin between threads sharing this vCPU
                        let vc = &mut self.vcpus[v];
                        vc.cur = None;
                        vc.runq.push_back(t);
                        let th = &mut self.threads[t as usize];
                        th.state = TState::Ready;
                        th.last_ran = now;
                        let vm = th.vm as usize;
                        self.guest_balance_later(vm);
                    }
                }
                self.vcpu_step(v);
            }
            Act::Spin { ple_at, .. } => {
                if now >= ple_at {
                    self.ple_exit(v);
                } else {
                    self.pause_act(v);
                    self.vcpu_step(v);
                }
            }
            Act::IdlePoll { .. } => {
                self.vcpus[v].c.guest_idle_poll_misses += 1;
                self.pause_act(v);
                // the window ran out: the next idle period polls afresh
                self.vcpus[v].idle_poll_left = None;
                self.start_halt_exit(v);
            }
            Act::Exit { kind, .. } => self.exit_done(v, kind),
            Act::HaltPoll { .. } => {
                // the poll window ran out
                self.vcpus[v].act = Act::Off;
                self.halt_block(v);
            }
            Act::Off => {}
        }
    }

    pub(crate) fn start_exec(&mut self, v: usize, what: ExecWhat) {
        let now = self.now;
        let (dur, kernel) = match what {
            ExecWhat::Ipi => (self.vcpus[v].ipi_rem, true),
            ExecWhat::Start => (self.vcpus[v].start_rem, true),
            ExecWhat::Thread => {
                let t = self.vcpus[v].cur.expect("exec needs a thread") as usize;
                let th = &self.threads[t];
                let mut d = th.rem;
                if !self.vcpus[v].runq.is_empty() && matches!(th.step, Step::Work { hold: None, .. }) {
                    d = d.min(self.vms[th.vm as usize].cfg.workload.guest_slice_ns);
                }
                (d, matches!(th.step, Step::Work { kernel: true, .. }))
            }
        };
        self.vcpus[v].in_kernel = kernel;
        let (dur, pct) = self.work_duration(v, dur);
        let dur = dur + self.vcpus[v].cold_ns;
        self.set_act(v, Act::Exec { start: now, end: now + dur, what, pct }, now + dur, C_USEFUL);
    }

    pub(crate) fn start_spin(&mut self, v: usize, pv: bool) {
        let now = self.now;
        let vm = self.vm_of(v);
        let ple_at = if self.vms[vm].cfg.ple.enabled {
            let w = self.vcpus[v].ple_window;
            // (a window is >= 1; `& 63` only keeps the index in bounds)
            let slot = &mut self.vms[vm].ple_ns[w.leading_zeros() as usize & 63];
            if slot.0 != w {
                *slot = (w, cycles_to_ns(w, self.cfg.host.tsc_khz));
            }
            now + slot.1.max(1)
        } else {
            NEVER
        };
        let pv_at = if pv {
            let t = self.vcpus[v].cur.unwrap() as usize;
            now + self.vms[vm].spin_threshold_ns.saturating_sub(self.threads[t].spun).max(1)
        } else {
            NEVER
        };
        self.vcpus[v].in_kernel = true;
        self.set_act(v, Act::Spin { start: now, ple_at, pv_at }, ple_at.min(pv_at), C_SPIN);
    }

    pub fn start_exit(&mut self, v: usize, end: Ns, kind: ExitKind, cat: usize) {
        self.vcpus[v].in_kernel = true;
        self.set_act(v, Act::Exit { end, kind }, end, cat);
    }

    pub(crate) fn start_halt_exit(&mut self, v: usize) {
        let vm = self.vm_of(v);
        let cost = self.vms[vm].cfg.pv.halt_exit_ns;
        self.vcpus[v].hp.on_halt_exit();
        if self.cfg.host.token_halt_bracket && self.tokens_on() {
            // vcpulab's scheduler: the halt bracket gives the token up before HLT
            self.token_halt_bracket(v);
        }
        let end = self.now + cost;
        self.start_exit(v, end, ExitKind::Halt, C_EXIT);
    }

    pub(crate) fn guest_idle(&mut self, v: usize) {
        let vm = self.vm_of(v);
        if self.vms[vm].cfg.guest.vcpu0_waits_for_starts {
            let v0 = self.vms[vm].vcpu0 as usize;
            if v0 != v && self.vcpus[v0].start_wait {
                // vCPU 0 waits for every other one to be idle: it looks again
                self.poke(v0);
            }
        }
        let pv = &self.vms[vm].cfg.pv;
        let poll = pv.guest_idle_poll_ns;
        let polls_here =
            pv.guest_idle_poll_vcpus.is_empty() || pv.guest_idle_poll_vcpus.binary_search(&self.vcpus[v].idx).is_ok();
        let resumed = self.vcpus[v].idle_poll_left.take();
        if poll > 0 && polls_here {
            let now = self.now;
            // back in the idle loop after a switch-out or an interrupt: the
            // window interrupted runs on to its end (poll_idle's time limit),
            // or for the checks it has left
            let end = match resumed {
                None => now + poll,
                Some(PollLeft::Until(end)) => end,
                Some(PollLeft::For(left)) => now + left,
            };
            if end <= now {
                self.vcpus[v].c.guest_idle_poll_misses += 1;
                self.start_halt_exit(v);
                return;
            }
            self.vcpus[v].in_kernel = true;
            self.set_act(v, Act::IdlePoll { start: now, end }, end, C_IDLEPOLL);
        } else {
            self.start_halt_exit(v);
        }
    }

    /// Would kvm_vcpu_check_block() see a wake-up condition?
    pub(crate) fn has_wake_condition(&self, v: usize) -> bool {
        let vc = &self.vcpus[v];
        // a pending IPI wakes it only with interrupts on (kvm_arch_interrupt_allowed)
        if vc.pv_unhalted || (!vc.ipis.is_empty() && !self.irqs_disabled(v)) {
            return true;
        }
        match vc.cur {
            None => !vc.runq.is_empty(),
            Some(t) => {
                let th = &self.threads[t as usize];
                match th.step {
                    Step::AwaitLock { lock } => {
                        let l = &self.vms[th.vm as usize].locks[lock as usize];
                        l.holder == Some(t) || (l.holder.is_none() && l.kind == LockKind::Tas)
                    }
                    _ => true,
                }
            }
        }
    }

    pub(crate) fn exit_done(&mut self, v: usize, kind: ExitKind) {
        self.vcpus[v].act = Act::Off;
        let cpu = self.vcpus[v].running.expect("exit on a running vCPU") as usize;
        self.rqs[cpu].curr_in_exit = false;
        match kind {
            ExitKind::Switch => {
                // the switch was not preemptible: a resched raised meanwhile is acted on now
                if self.rqs[cpu].need_resched {
                    self.schedule(cpu, Why::ExitResched);
                }
                if self.vcpus[v].running.is_some() {
                    self.vcpu_resume(v, cpu);
                }
                return;
            }
            ExitKind::TokenAsk => {
                let t = self.vcpus[v].task as usize;
                let got = self.token_ask(t);
                if got == Some(cpu) {
                    // this CPU's token: it goes on in place
                    if self.rqs[cpu].need_resched {
                        self.schedule(cpu, Why::ExitResched);
                    }
                    if self.vcpus[v].running.is_some() {
                        self.vcpu_step(v);
                    }
                    return;
                }
                // it leaves this CPU, parked, its lag kept (as a holder at a slice's end)
                self.tasks[t].parked = true;
                self.update_curr(cpu);
                let vr = self.avg_vruntime(cpu);
                self.save_lag(t, vr);
                self.schedule(cpu, Why::Slice);
                if let Some(c) = got {
                    // another CPU's token: its thread moves there (the real one
                    // pins itself to the token's CPU) and runs with it
                    self.tasks[t].cpu = c as u32;
                    self.tasks[t].parked = false;
                    self.tasks[t].vlag = self.tasks[t].vlag.max(0);
                    self.vcpus[v].st_preempted = false;
                    self.rq_add(t, true);
                }
                return;
            }
            ExitKind::Halt => {
                if !self.has_wake_condition(v) {
                    self.halt_begin(v, cpu);
                    return;
                }
                // the wake-up is consumed (mp_state back to RUNNABLE)
                self.vcpus[v].pv_unhalted = false;
                self.refresh_cand(v);
                if self.rqs[cpu].need_resched {
                    self.schedule(cpu, Why::ExitResched);
                }
            }
            ExitKind::Ple { yielded, boost } | ExitKind::Hypercall { yielded, boost } => {
                if boost != NO_TASK {
                    // yield_to's resched_curr(p_rq), as the handler ends: the
                    // engine took the yield's decision as the exit began, so
                    // a target that another switch started meanwhile (one
                    // the kernel's yield_to would now find running) is not
                    // boosted again. Until 0.3.12 it was, and the resched
                    // preempted the target it was meant for: under the
                    // oracle on ebizzy-like (16 vCPUs on 8 CPUs, 2012 era)
                    // a lock holder that a spinner on its own CPU yielded to
                    // was switched out again at the end of its 2-us switch,
                    // every time, by the late boosts of other CPUs' spinners,
                    // and ran no guest code.
                    let tk = &self.tasks[boost as usize];
                    let c = tk.cpu as usize;
                    if c != cpu && tk.runnable && !tk.parked && self.rqs[c].curr != Some(boost) {
                        self.resched(c, Why::Boost);
                    }
                }
                if yielded {
                    if self.tokens_on() {
                        // vcpulab's scheduler runs the policy in user space and
                        // returns before the spinner waits for a token
                        // (src/kvm/sched/ spin_exit): it waits out of its spin loop
                        let vc = &mut self.vcpus[v];
                        vc.in_spin_loop = false;
                        vc.dy_eligible = false;
                    }
                    self.schedule(cpu, Why::Yield);
                } else if self.rqs[cpu].need_resched {
                    self.schedule(cpu, Why::ExitResched);
                }
            }
        }
        if self.vcpus[v].running.is_some() {
            let vc = &mut self.vcpus[v];
            if matches!(kind, ExitKind::Ple { .. }) {
                vc.in_spin_loop = false;
                vc.dy_eligible = false;
            }
            self.vcpu_step(v);
        }
    }

    // ------------------------------------------------------- host halt polling

    /// kvm_vcpu_halt() ([K3]): poll up to the vCPU's window while nothing else
    /// wants this host CPU, then block. The window and the stats are the
    /// shared state machine's (`halt_poll::HaltPollState`).
    pub(crate) fn halt_begin(&mut self, v: usize, cpu: usize) {
        let vm = self.vm_of(v);
        let now = self.now;
        match self.vcpus[v].hp.on_halt(&self.vms[vm].halt_poll, now) {
            Some(stop) if self.single_task_running(cpu) => self.halt_poll_until(v, stop),
            // no polling, or the poll loop exits at once
            _ => self.halt_block(v),
        }
    }

    /// `single_task_running() && !need_resched()`: the poll loop may go on.
    pub(crate) fn single_task_running(&self, cpu: usize) -> bool {
        self.nr_running(cpu) <= 1 && !self.rqs[cpu].need_resched
    }

    pub(crate) fn halt_poll_until(&mut self, v: usize, end: Ns) {
        let now = self.now;
        self.vcpus[v].in_kernel = true;
        self.set_act(v, Act::HaltPoll { start: now, end }, end, C_HALTPOLL);
    }

    /// Back on the CPU after a preemption inside the poll loop, whose window
    /// ends at `stop`: a wake-up ends the halt; else it polls on, or — with
    /// the window over or another task runnable here — leaves the loop and
    /// blocks (through an immediate event: this is the middle of schedule()).
    pub(crate) fn halt_poll_resume(&mut self, v: usize, cpu: usize, stop: Ns) {
        if self.has_wake_condition(v) {
            self.vcpus[v].pv_unhalted = false;
            self.refresh_cand(v);
            self.halt_end(v, false);
            self.vcpu_step(v);
        } else if self.single_task_running(cpu) && stop > self.now {
            self.halt_poll_until(v, stop);
        } else {
            self.halt_poll_until(v, self.now);
        }
    }

    /// kvm_vcpu_block(): the poll loop is over; the vCPU thread sleeps until woken.
    pub(crate) fn halt_block(&mut self, v: usize) {
        let now = self.now;
        let cpu = self.vcpus[v].running.expect("blocking vCPU runs") as usize;
        let vc = &mut self.vcpus[v];
        vc.hp.on_poll_stop(now);
        vc.halted = true;
        vc.blocking = true;
        let task = vc.task as usize;
        self.ready[v] = false;
        self.refresh_cand(v);
        self.dequeue_sleep(task);
        self.schedule(cpu, Why::Halt);
    }

    /// The vCPU leaves kvm_vcpu_halt(): poll stats, halt_wait_ns and the
    /// window update from the whole halt time. `waited`: it slept.
    pub(crate) fn halt_end(&mut self, v: usize, waited: bool) {
        let vm = self.vm_of(v);
        let now = self.now;
        self.vcpus[v].hp.on_halt_end(&self.vms[vm].halt_poll, now, waited, true);
    }

    // ------------------------ hypercalls and the pcpu_is_idle RFC's host hooks

    /// kvm_sched_yield(): directed yield toward one vCPU (PV kick, PV sched yield).
    pub fn kvm_sched_yield(&mut self, v: usize, target: usize, t: &mut Ns) -> bool {
        self.vcpus[v].c.directed_yield_attempted += 1;
        let cpu = self.vcpus[v].running.unwrap() as usize;
        let bailout = self.vms[self.vm_of(v)].cfg.pv.yield_single_task_bailout;
        if (bailout && self.nr_running(cpu) == 1) || !self.ready[target] || target == v {
            return false;
        }
        let ok = self.yield_to(v, target, t) > 0;
        if ok {
            self.vcpus[v].c.directed_yield_successful += 1;
        }
        ok
    }

    /// `kvm_arch_vcpu_put` of the 2021 RFC (vCPU `v` is being switched out
    /// of its CPU): the `is_idle` byte is set if the CPU's nr_running is <= 1
    /// (a halting vCPU no longer counts itself; a preempted one does), else
    /// cleared (as posted: not if it is set).
    pub(crate) fn rfc_vcpu_put(&mut self, v: usize) {
        let Some(cpu) = self.vcpus[v].running else { return };
        if self.nr_running(cpu as usize) <= 1 {
            self.vcpus[v].st_is_idle = true;
        } else {
            self.rfc_clear_is_idle(v);
        }
    }

    /// `record_steal_time` of the 2021 RFC (vCPU `v` enters the guest on
    /// `cpu`): the vCPU that last entered there is cleared if it is another
    /// one, set again if it is this one; then `v` is the last one.
    pub(crate) fn rfc_record_steal_time(&mut self, v: usize, cpu: usize) {
        let old = self.pre_run_vcpu[cpu];
        if old != NO_VCPU {
            if old as usize != v {
                self.rfc_clear_is_idle(old as usize);
            } else {
                self.vcpus[v].st_is_idle = true;
            }
        }
        self.pre_run_vcpu[cpu] = v as u32;
    }

    /// `kvm_steal_time_clear_is_idle`: as posted it returns early when the
    /// byte is set (so it never clears); `PcpuIsIdleRfcCleared` clears.
    pub(crate) fn rfc_clear_is_idle(&mut self, v: usize) {
        let vm = self.vm_of(v);
        if self.vms[vm].cfg.pv.placement == Placement::PcpuIsIdleRfcCleared {
            self.vcpus[v].st_is_idle = false;
        }
    }
}

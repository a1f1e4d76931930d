//! Guests: vCPU run/halt transitions as KVM sees them ([K1], [K4]), and the
//! guest kernel running workload threads on vCPUs: phases, spinlocks of four
//! kinds plus a mutex, IPIs, barriers, sleeps and messages, wake-up placement.
//!
//! A vCPU has at most one *activity* at a time (`Act`), with one pending event
//! at its planned end; anything that may change what it does (a lock granted,
//! an IPI, a thread placed on it) sends it a zero-delay `Poke`.

use super::config::{LockKind, LockModel, Phase, Placement, PreemptedByte, VmConfig, WaitEarly};
use super::engine::*;
use super::policy::VcpuView;

/// The lock a guest of this configuration really runs for a lock of `kind`:
/// a `pv_queued` lock without KVM_FEATURE_PV_UNHALT is the `virt_spin_lock`
/// test-and-set fallback (`kvm_spinlock_init` returns before enabling PV
/// spinlocks, so `virt_spin_lock_key` stays on; arch/x86/include/asm/qspinlock.h).
pub fn effective_lock_kind(kind: LockKind, vm: &VmConfig) -> LockKind {
    if kind == LockKind::PvQueued && !vm.pv.pv_spinlocks {
        LockKind::Tas
    } else {
        kind
    }
}

/// What `begin_phase` / the step loop decided.
enum Flow {
    /// The vCPU's state changed; look again.
    Again,
    /// An activity was started; stop.
    Started,
}

impl Sim {
    // ---------------------------------------------------------------- host side

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
            let end = self.now + switch;
            self.set_act(v, Act::Exit { end, kind: ExitKind::Switch }, end, C_EXIT);
            return;
        }
        self.vcpu_resume(v, cpu);
    }

    /// The vCPU's guest resumes after its thread was switched in: back in
    /// the halt-poll loop or from `kvm_vcpu_block()` if it halted, else the
    /// next step of its guest code.
    fn vcpu_resume(&mut self, v: usize, cpu: usize) {
        if self.vcpus[v].hp.halted() {
            match self.vcpus[v].poll_resume.take() {
                // preempted inside the poll loop: it goes on polling
                Some(stop) => {
                    self.halt_poll_resume(v, cpu, stop);
                    return;
                }
                // back from kvm_vcpu_block(): halt_wait_ns, poll stats, window update
                None => self.halt_end(v, true),
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
        let every_put = self.vms[vm].cfg.pv.preempted_byte == PreemptedByte::EveryPut;
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
            let mut newly = false;
            if in_guest && why.at_instruction_boundary() {
                vc.c.preemption_reported += 1;
                if steal_time && !vc.st_preempted {
                    vc.st_preempted = true;
                    newly = true;
                }
            } else {
                vc.c.preemption_other += 1;
                if every_put && steal_time && !vc.st_preempted {
                    vc.st_preempted = true;
                    newly = true;
                }
            }
            vc.acct.set(now, C_WAIT);
            if newly {
                self.notify_mutex_spinners(v);
                if self.vms[vm].cfg.guest.lock_model == LockModel::Kernel {
                    self.notify_preempted_kernel(v);
                }
            }
        } else {
            vc.acct.set(now, C_HALT);
            // before 5.19 kvm_arch_vcpu_put marks a blocking vCPU preempted too
            // (nothing runs on a halted vCPU, so no spinner needs telling)
            if every_put && steal_time {
                vc.st_preempted = true;
            }
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
        if !vc.halted {
            if vc.running.is_some() {
                self.poke(v);
            }
            return;
        }
        vc.halted = false;
        self.ready[v] = true;
        let vc = &mut self.vcpus[v];
        if reason != WakeReason::Start {
            vc.hp.on_wakeup();
        }
        let now = self.now;
        vc.acct.set(now, C_WAIT);
        let task = vc.task as usize;
        self.enqueue(task);
    }

    pub fn view(&self, v: usize) -> VcpuView {
        let vc = &self.vcpus[v];
        let apicv = self.vms[vc.vm as usize].cfg.pv.apicv;
        let pi = apicv && vc.posted_irq;
        VcpuView {
            index: vc.idx,
            running: vc.running.is_some(),
            in_guest: vc.running.is_some()
                && matches!(vc.act, Act::Exec { .. } | Act::Spin { .. } | Act::IdlePoll { .. }),
            preempted: vc.preempted,
            ready: self.ready[v],
            blocking: vc.blocking,
            dy_runnable: vc.pv_unhalted || pi,
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

    // ------------------------------------------------------------ activities

    /// Account the progress of the current activity and stop it.
    pub fn pause_act(&mut self, v: usize) {
        let now = self.now;
        match self.vcpus[v].act {
            Act::Exec { start, ipi, slow, .. } => {
                // the cache refill owed comes first, then the work
                let cold = self.vcpus[v].cold_ns.min(now - start);
                self.vcpus[v].cold_ns -= cold;
                let el = self.smt_progress(now - start - cold, slow);
                if ipi {
                    let vc = &mut self.vcpus[v];
                    vc.ipi_rem = vc.ipi_rem.saturating_sub(el).max(1);
                } else if let Some(t) = self.vcpus[v].cur {
                    let th = &mut self.threads[t as usize];
                    th.rem = th.rem.saturating_sub(el);
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
            Act::IdlePoll { .. } | Act::Off => {}
        }
        let vc = &mut self.vcpus[v];
        vc.act = Act::Off;
        vc.gen = vc.gen.wrapping_add(1);
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
    fn set_act(&mut self, v: usize, act: Act, end: Ns, cat: usize) {
        self.vcpus[v].act = act;
        self.act_started(v, matches!(act, Act::Exit { .. }), end, cat);
    }

    /// The rest of `set_act`, out of line.
    fn act_started(&mut self, v: usize, exit: bool, end: Ns, cat: usize) {
        let now = self.now;
        let vc = &mut self.vcpus[v];
        vc.gen = vc.gen.wrapping_add(1);
        let gen = vc.gen;
        vc.acct.set(now, cat);
        if let Some(cpu) = vc.running {
            let rq = &mut self.rqs[cpu as usize];
            rq.acct.set(now, cat);
            rq.curr_in_exit = exit;
        }
        if end != NEVER {
            self.push(end, Ev::Vcpu(v as u32, gen));
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
            Act::Spin { .. } | Act::IdlePoll { .. } => {
                self.pause_act(v);
                self.vcpu_step(v);
            }
            Act::Exec { ipi: false, .. } if !self.vcpus[v].ipis.is_empty() => {
                // an interrupt: the handler runs first, the work resumes after
                self.pause_act(v);
                self.vcpu_step(v);
            }
            Act::HaltPoll { .. } => {
                let cpu = self.vcpus[v].running.unwrap() as usize;
                if self.has_wake_condition(v) {
                    // kvm_vcpu_check_block() < 0 while polling: success
                    self.vcpus[v].pv_unhalted = false;
                    self.vcpus[v].act = Act::Off;
                    self.vcpus[v].gen = self.vcpus[v].gen.wrapping_add(1);
                    self.halt_end(v, false);
                    self.vcpu_step(v);
                } else if !self.single_task_running(cpu) {
                    // single_task_running() is false: stop polling and block
                    self.vcpus[v].act = Act::Off;
                    self.vcpus[v].gen = self.vcpus[v].gen.wrapping_add(1);
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
            Act::Exec { ipi: true, .. } => {
                let vc = &mut self.vcpus[v];
                vc.ipi_rem = 0;
                vc.cold_ns = 0;
                vc.act = Act::Off;
                if let Some(sender) = vc.ipis.pop_front() {
                    self.ipi_ack(sender as usize);
                }
                self.vcpu_step(v);
            }
            Act::Exec { ipi: false, .. } => {
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
                self.pause_act(v);
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

    fn start_exec(&mut self, v: usize, ipi: bool) {
        let now = self.now;
        let dur = if ipi {
            self.vcpus[v].ipi_rem
        } else {
            let t = self.vcpus[v].cur.expect("exec needs a thread") as usize;
            let th = &self.threads[t];
            let mut d = th.rem;
            if !self.vcpus[v].runq.is_empty() && matches!(th.step, Step::Work { hold: None, .. }) {
                d = d.min(self.vms[th.vm as usize].cfg.workload.guest_slice_ns);
            }
            d
        };
        let kernel = if ipi {
            true
        } else {
            let t = self.vcpus[v].cur.unwrap() as usize;
            matches!(self.threads[t].step, Step::Work { kernel: true, .. })
        };
        self.vcpus[v].in_kernel = kernel;
        let (dur, slow) = self.smt_duration(v, dur);
        let dur = dur + self.vcpus[v].cold_ns;
        self.set_act(v, Act::Exec { start: now, end: now + dur, ipi, slow }, now + dur, C_USEFUL);
    }

    fn start_spin(&mut self, v: usize, pv: bool) {
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

    fn start_halt_exit(&mut self, v: usize) {
        let vm = self.vm_of(v);
        let cost = self.vms[vm].cfg.pv.halt_exit_ns;
        self.vcpus[v].hp.on_halt_exit();
        let end = self.now + cost;
        self.start_exit(v, end, ExitKind::Halt, C_EXIT);
    }

    fn guest_idle(&mut self, v: usize) {
        let vm = self.vm_of(v);
        let poll = self.vms[vm].cfg.pv.guest_idle_poll_ns;
        if poll > 0 {
            let now = self.now;
            self.vcpus[v].in_kernel = true;
            self.set_act(v, Act::IdlePoll { start: now, end: now + poll }, now + poll, C_IDLEPOLL);
        } else {
            self.start_halt_exit(v);
        }
    }

    /// Would kvm_vcpu_check_block() see a wake-up condition?
    fn has_wake_condition(&self, v: usize) -> bool {
        let vc = &self.vcpus[v];
        if !vc.ipis.is_empty() || vc.pv_unhalted {
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

    fn exit_done(&mut self, v: usize, kind: ExitKind) {
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
            ExitKind::Halt => {
                if !self.has_wake_condition(v) {
                    self.halt_begin(v, cpu);
                    return;
                }
                // the wake-up is consumed (mp_state back to RUNNABLE)
                self.vcpus[v].pv_unhalted = false;
                if self.rqs[cpu].need_resched {
                    self.schedule(cpu, Why::ExitResched);
                }
            }
            ExitKind::Ple { yielded, boost } | ExitKind::Hypercall { yielded, boost } => {
                if boost != NO_CPU {
                    self.resched(boost as usize, Why::Boost);
                }
                if yielded {
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
    fn halt_begin(&mut self, v: usize, cpu: usize) {
        let vm = self.vm_of(v);
        let now = self.now;
        match self.vcpus[v].hp.on_halt(&self.vms[vm].halt_poll, now) {
            Some(stop) if self.single_task_running(cpu) => self.halt_poll_until(v, stop),
            // no polling, or the poll loop exits at once
            _ => self.halt_block(v),
        }
    }

    /// `single_task_running() && !need_resched()`: the poll loop may go on.
    fn single_task_running(&self, cpu: usize) -> bool {
        self.nr_running(cpu) <= 1 && !self.rqs[cpu].need_resched
    }

    fn halt_poll_until(&mut self, v: usize, end: Ns) {
        let now = self.now;
        self.vcpus[v].in_kernel = true;
        self.set_act(v, Act::HaltPoll { start: now, end }, end, C_HALTPOLL);
    }

    /// Back on the CPU after a preemption inside the poll loop, whose window
    /// ends at `stop`: a wake-up ends the halt; else it polls on, or — with
    /// the window over or another task runnable here — leaves the loop and
    /// blocks (through an immediate event: this is the middle of schedule()).
    fn halt_poll_resume(&mut self, v: usize, cpu: usize, stop: Ns) {
        if self.has_wake_condition(v) {
            self.vcpus[v].pv_unhalted = false;
            self.halt_end(v, false);
            self.vcpu_step(v);
        } else if self.single_task_running(cpu) && stop > self.now {
            self.halt_poll_until(v, stop);
        } else {
            self.halt_poll_until(v, self.now);
        }
    }

    /// kvm_vcpu_block(): the poll loop is over; the vCPU thread sleeps until woken.
    fn halt_block(&mut self, v: usize) {
        let now = self.now;
        let cpu = self.vcpus[v].running.expect("blocking vCPU runs") as usize;
        let vc = &mut self.vcpus[v];
        vc.hp.on_poll_stop(now);
        vc.halted = true;
        vc.blocking = true;
        let task = vc.task as usize;
        self.ready[v] = false;
        self.dequeue_sleep(task);
        self.schedule(cpu, Why::Halt);
    }

    /// The vCPU leaves kvm_vcpu_halt(): poll stats, halt_wait_ns and the
    /// window update from the whole halt time. `waited`: it slept.
    fn halt_end(&mut self, v: usize, waited: bool) {
        let vm = self.vm_of(v);
        let now = self.now;
        self.vcpus[v].hp.on_halt_end(&self.vms[vm].halt_poll, now, waited, true);
    }

    // ------------------------------------------------------------- the guest

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
            if self.vcpus[v].ipi_rem > 0 || !self.vcpus[v].ipis.is_empty() {
                if self.vcpus[v].ipi_rem == 0 {
                    let vm = self.vm_of(v);
                    self.vcpus[v].ipi_rem = self.ipi_handler_ns(vm).max(1);
                }
                self.start_exec(v, true);
                return;
            }
            let vc = &mut self.vcpus[v];
            let t = match vc.cur {
                Some(t) => t as usize,
                None => match vc.runq.pop_front() {
                    Some(t) => {
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
                        self.start_exec(v, false);
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

    fn ipi_handler_ns(&self, vm: usize) -> Ns {
        // the handler length of the VM's first IPI phase
        self.vms[vm]
            .cfg
            .workload
            .phases
            .iter()
            .find_map(|p| if let Phase::Ipi { handler_ns, .. } = p { Some(*handler_ns) } else { None })
            .unwrap_or(1_000)
    }

    fn drop_if_done(&mut self, v: usize, t: usize) {
        if self.threads[t].state == TState::Done {
            self.vcpus[v].cur = None;
        }
    }

    fn block_current(&mut self, v: usize, t: usize) {
        self.vcpus[v].cur = None;
        self.threads[t].state = TState::Blocked;
        self.threads[t].last_ran = self.now;
    }

    /// Thread `t` ends (its iterations are done, or its VM's task queue ran
    /// its last frame); the VM finishes with its last thread.
    fn finish_thread(&mut self, t: usize) {
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
    fn task_queue(&mut self, v: usize, t: usize, tasks: u32, frames: u32) {
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
            self.wake_thread(w as usize, WakeReason::Ipi);
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
            super::metrics::hist_add(&mut vmr.latencies, lat);
        }
        if done {
            self.finish_thread(t);
        }
    }

    fn begin_phase(&mut self, v: usize, t: usize) -> Flow {
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
            Phase::Lock { lock, lock_kind, hold_ns, dist, .. } => {
                let d = self.sample(hold_ns, dist);
                self.threads[t].rem = d;
                self.threads[t].rw_read = lock_kind == LockKind::RwsemRead;
                self.threads[t].rw_granted = false;
                self.threads[t].spun = 0;
                self.threads[t].pv_halted = false;
                self.threads[t].pv_hashed = false;
                self.threads[t].lock_wait_start = self.now;
                if self.lock_try(vm, lock as usize, t) || self.pv_steal(v, vm, lock as usize, t) {
                    self.record_lock_wait(vm, t);
                    self.threads[t].step = Step::Work { kernel: true, hold: Some(lock) };
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
                        self.wake_thread(w as usize, WakeReason::Ipi);
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
                    self.wake_thread(dst, WakeReason::Ipi);
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

    fn finish_work(&mut self, v: usize, t: usize, hold: Option<u32>) -> Flow {
        self.advance(t);
        let mut flow = Flow::Again;
        if let Some(lock) = hold {
            flow = self.lock_release(v, t, lock as usize);
        }
        self.drop_if_done(v, t);
        flow
    }

    // ----------------------------------------------------------------- locks

    /// The thread now runs holding its lock: its wait (from the Lock phase's
    /// start, including any time its vCPU was preempted or halted meanwhile)
    /// goes into the VM's lock-wait histogram, after the warm-up.
    fn record_lock_wait(&mut self, vm: usize, t: usize) {
        if self.now >= self.cfg.warmup_ns {
            let w = self.now - self.threads[t].lock_wait_start;
            super::metrics::hist_add(&mut self.vms[vm].lock_waits, w);
        }
    }

    fn lock_try(&mut self, vm: usize, lock: usize, t: usize) -> bool {
        if self.vms[vm].locks[lock].kind.is_rwsem() {
            return self.rwsem_try(vm, lock, t, true);
        }
        let l = &mut self.vms[vm].locks[lock];
        let free_for_me = match l.kind {
            LockKind::Tas | LockKind::Mutex => l.holder.is_none(),
            _ => l.holder.is_none() && l.waiters.is_empty(),
        };
        if free_for_me {
            l.holder = Some(t as u32);
            l.acquisitions += 1;
        }
        free_for_me
    }

    /// Is this (current) thread spinning on a running vCPU right now?
    fn spinning_now(&self, t: usize) -> bool {
        let th = &self.threads[t];
        th.state == TState::Current && {
            let vc = &self.vcpus[th.vcpu as usize];
            vc.running.is_some() && matches!(vc.act, Act::Spin { .. })
        }
    }

    /// Mutex optimistic spinning goes on while owner_on_cpu(): the owner is
    /// current on its vCPU and, with steal time, that vCPU is not preempted.
    fn owner_on_cpu(&self, vm: usize, holder: usize) -> bool {
        let th = &self.threads[holder];
        th.state == TState::Current && !self.vcpu_is_preempted(vm, th.vcpu as usize)
    }

    /// The guest's `vcpu_is_preempted(cpu)` (kvm_vcpu_is_preempted: the
    /// steal-time `preempted` byte), where the guest kernel asks it (4.10+).
    fn vcpu_is_preempted(&self, vm: usize, c: usize) -> bool {
        let cfg = &self.vms[vm].cfg;
        cfg.pv.steal_time && cfg.guest.vcpu_is_preempted && self.vcpus[c].st_preempted
    }

    fn await_lock(&mut self, v: usize, t: usize, lock: u32) -> Flow {
        let vm = self.threads[t].vm as usize;
        let kernel = self.vms[vm].cfg.guest.lock_model == LockModel::Kernel;
        if self.vms[vm].locks[lock as usize].kind.is_rwsem() {
            return self.await_rwsem(v, t, lock as usize);
        }
        if kernel && self.vms[vm].locks[lock as usize].kind == LockKind::PvQueued {
            return self.await_pv_qspinlock(v, t, lock as usize);
        }
        if self.threads[t].pv_halted {
            // back from pv_wait: spin SPIN_THRESHOLD again
            self.threads[t].pv_halted = false;
            self.threads[t].spun = 0;
        }
        let l = &self.vms[vm].locks[lock as usize];
        let kind = l.kind;
        let got = if l.holder == Some(t as u32) {
            true
        } else if l.holder.is_none() && matches!(kind, LockKind::Tas | LockKind::Mutex) {
            let l = &mut self.vms[vm].locks[lock as usize];
            l.holder = Some(t as u32);
            l.acquisitions += 1;
            if let Some(i) = l.waiters.iter().position(|&w| w as usize == t) {
                l.waiters.remove(i);
            }
            true
        } else {
            false
        };
        if got {
            self.record_lock_wait(vm, t);
            self.threads[t].step = Step::Work { kernel: true, hold: Some(lock) };
            return Flow::Again;
        }
        match kind {
            LockKind::Tas | LockKind::Ticket | LockKind::Queued => {
                self.start_spin(v, false);
                Flow::Started
            }
            LockKind::PvQueued => {
                let l = &self.vms[vm].locks[lock as usize];
                let pos = l.waiters.iter().position(|&w| w as usize == t).unwrap_or(0);
                let pred_halted = pos > 0 && self.threads[l.waiters[pos - 1] as usize].pv_halted;
                if self.threads[t].spun >= self.vms[vm].spin_threshold_ns || pred_halted {
                    // pv_wait: halt until kicked
                    self.threads[t].pv_halted = true;
                    self.start_halt_exit(v);
                } else {
                    self.start_spin(v, true);
                }
                Flow::Started
            }
            LockKind::Mutex => {
                let holder = self.vms[vm].locks[lock as usize].holder.map(|h| h as usize);
                if holder.is_some_and(|h| self.owner_on_cpu(vm, h)) {
                    if kernel && self.osq_prev_preempted(vm, lock as usize, t) {
                        // osq_lock: vcpu_is_preempted(node_cpu(node->prev)): unqueue,
                        // mutex_optimistic_spin fails, the waiter sleeps
                        self.vcpus[v].c.osq_gave_up += 1;
                        self.block_current(v, t);
                        return Flow::Again;
                    }
                    self.start_spin(v, false);
                    Flow::Started
                } else {
                    self.block_current(v, t);
                    Flow::Again
                }
            }
            // await_rwsem runs these (checked at the top)
            LockKind::RwsemRead | LockKind::RwsemWrite => self.await_rwsem(v, t, lock as usize),
        }
    }

    fn lock_release(&mut self, v: usize, t: usize, lock: usize) -> Flow {
        let vm = self.threads[t].vm as usize;
        let kind = self.vms[vm].locks[lock].kind;
        if kind.is_rwsem() {
            self.rwsem_release(vm, lock, t);
            return Flow::Again;
        }
        self.vms[vm].locks[lock].holder = None;
        if kind == LockKind::PvQueued && self.vms[vm].cfg.guest.lock_model == LockModel::Kernel {
            return self.pv_qspinlock_unlock(v, vm, lock);
        }
        match kind {
            LockKind::Tas => {
                // whoever is spinning on a running vCPU now takes it
                let spinners: Vec<u32> = self.vms[vm].locks[lock]
                    .waiters
                    .iter()
                    .copied()
                    .filter(|&w| self.spinning_now(w as usize))
                    .collect();
                if !spinners.is_empty() {
                    let w = spinners[self.rng_below(spinners.len())];
                    self.grant(vm, lock, w as usize);
                }
            }
            LockKind::Ticket | LockKind::Queued | LockKind::PvQueued => {
                if let Some(w) = self.vms[vm].locks[lock].waiters.pop_front() {
                    let w = w as usize;
                    let l = &mut self.vms[vm].locks[lock];
                    l.holder = Some(w as u32);
                    l.acquisitions += 1;
                    let wv = self.threads[w].vcpu as usize;
                    if kind == LockKind::PvQueued && self.threads[w].pv_halted {
                        // __pv_queued_spin_unlock_slowpath: pv_kick -> KVM_HC_KICK_CPU
                        return self.kick_hypercall(v, wv);
                    }
                    self.poke(wv);
                }
            }
            LockKind::Mutex => {
                let pos = self.vms[vm].locks[lock].waiters.iter().position(|&w| self.spinning_now(w as usize));
                let pick = pos.or(if self.vms[vm].locks[lock].waiters.is_empty() { None } else { Some(0) });
                if let Some(i) = pick {
                    let w = self.vms[vm].locks[lock].waiters[i] as usize;
                    if self.threads[w].state == TState::Blocked {
                        self.vms[vm].locks[lock].waiters.remove(i);
                        let l = &mut self.vms[vm].locks[lock];
                        l.holder = Some(w as u32);
                        l.acquisitions += 1;
                        self.wake_thread(w, WakeReason::Ipi);
                    } else {
                        self.grant(vm, lock, w);
                    }
                }
            }
            // rwsem_release runs these (checked at the top)
            LockKind::RwsemRead | LockKind::RwsemWrite => {}
        }
        Flow::Again
    }

    fn grant(&mut self, vm: usize, lock: usize, w: usize) {
        let l = &mut self.vms[vm].locks[lock];
        if let Some(i) = l.waiters.iter().position(|&x| x as usize == w) {
            l.waiters.remove(i);
        }
        l.holder = Some(w as u32);
        l.acquisitions += 1;
        let wv = self.threads[w].vcpu as usize;
        self.poke(wv);
    }

    pub fn rng_below(&mut self, n: usize) -> usize {
        use rand::Rng;
        self.rng.random_range(0..n)
    }

    /// The vCPU `v` was just marked preempted: mutex spinners waiting for a
    /// holder running on it re-check owner_on_cpu().
    fn notify_mutex_spinners(&mut self, v: usize) {
        let Some(h) = self.vcpus[v].cur else { return };
        let vm = self.vm_of(v);
        let mut pokes = Vec::new();
        for l in &self.vms[vm].locks {
            if matches!(l.kind, LockKind::Mutex | LockKind::RwsemWrite) && l.holder == Some(h) {
                for &w in &l.waiters {
                    if self.spinning_now(w as usize) {
                        pokes.push(self.threads[w as usize].vcpu as usize);
                    }
                }
            }
        }
        for p in pokes {
            self.poke(p);
        }
    }

    // ------------------------------------------- reader-writer semaphores

    /// `down_read_trylock` / `down_write_trylock` (kernel/locking/rwsem.c,
    /// 5.x): a reader takes it while no writer holds it and, at its fast
    /// path (`fast`), nobody waits (`RWSEM_FLAG_WAITERS` sends readers to the
    /// slow path); a writer takes it when neither a writer nor a reader holds it.
    fn rwsem_try(&mut self, vm: usize, lock: usize, t: usize, fast: bool) -> bool {
        let read = self.threads[t].rw_read;
        let l = &mut self.vms[vm].locks[lock];
        let ok = if read {
            l.holder.is_none() && (!fast || l.waiters.is_empty())
        } else {
            l.holder.is_none() && l.readers == 0 && (!fast || l.waiters.is_empty())
        };
        if ok {
            if read {
                l.readers += 1;
            } else {
                l.holder = Some(t as u32);
            }
            l.acquisitions += 1;
            if let Some(i) = l.waiters.iter().position(|&w| w as usize == t) {
                l.waiters.remove(i);
            }
        }
        ok
    }

    /// A waiter in `rwsem_down_read_slowpath` / `rwsem_down_write_slowpath`:
    /// granted by a wake-up (`rwsem_mark_wake`), or takes the semaphore if
    /// it is free for its side; else it spins optimistically while a writer
    /// owns it and runs (`rwsem_optimistic_spin` → `rwsem_spin_on_owner`:
    /// `owner_on_cpu`, through the OSQ with the kernel lock model), and
    /// sleeps otherwise. Simplifications: a reader-owned semaphore is not
    /// spun on (5.x writers spin on readers for a bounded time), and a
    /// sleeping waiter does not retry before a wake-up grants it.
    fn await_rwsem(&mut self, v: usize, t: usize, lock: usize) -> Flow {
        let vm = self.threads[t].vm as usize;
        let granted =
            std::mem::take(&mut self.threads[t].rw_granted) || self.vms[vm].locks[lock].holder == Some(t as u32);
        if granted || self.rwsem_try(vm, lock, t, false) {
            self.record_lock_wait(vm, t);
            self.threads[t].step = Step::Work { kernel: true, hold: Some(lock as u32) };
            return Flow::Again;
        }
        let holder = self.vms[vm].locks[lock].holder.map(|h| h as usize);
        if holder.is_some_and(|h| self.owner_on_cpu(vm, h)) {
            let kernel = self.vms[vm].cfg.guest.lock_model == LockModel::Kernel;
            if kernel && self.osq_prev_preempted(vm, lock, t) {
                self.vcpus[v].c.osq_gave_up += 1;
                self.block_current(v, t);
                return Flow::Again;
            }
            self.start_spin(v, false);
            return Flow::Started;
        }
        self.block_current(v, t);
        Flow::Again
    }

    /// `up_read` / `up_write`: the last reader out, or the writer, wakes
    /// the waiters (`rwsem_wake` → `rwsem_mark_wake`): a spinning waiter if
    /// there is one (it takes the semaphore itself), else the first
    /// sleeper — a writer alone, or, if it is a reader, every waiting
    /// reader (up to `MAX_READERS_WAKEUP` = 256), each granted it.
    fn rwsem_release(&mut self, vm: usize, lock: usize, t: usize) {
        let l = &mut self.vms[vm].locks[lock];
        if l.holder == Some(t as u32) {
            l.holder = None;
        } else {
            debug_assert!(l.readers > 0, "an rwsem reader releases a semaphore no reader holds");
            l.readers = l.readers.saturating_sub(1);
            if l.readers > 0 {
                return;
            }
        }
        if let Some(w) = self.vms[vm].locks[lock].waiters.iter().copied().find(|&w| self.spinning_now(w as usize)) {
            let wv = self.threads[w as usize].vcpu as usize;
            self.poke(wv);
            return;
        }
        let Some(&first) = self.vms[vm].locks[lock].waiters.front() else { return };
        let wake: Vec<u32> = if self.threads[first as usize].rw_read {
            self.vms[vm].locks[lock]
                .waiters
                .iter()
                .copied()
                .filter(|&w| self.threads[w as usize].rw_read)
                .take(256)
                .collect()
        } else {
            vec![first]
        };
        for w in wake {
            let w = w as usize;
            let l = &mut self.vms[vm].locks[lock];
            if let Some(i) = l.waiters.iter().position(|&x| x as usize == w) {
                l.waiters.remove(i);
            }
            if self.threads[w].rw_read {
                l.readers += 1;
                self.threads[w].rw_granted = true;
            } else {
                l.holder = Some(w as u32);
            }
            l.acquisitions += 1;
            if self.threads[w].state == TState::Blocked {
                self.wake_thread(w, WakeReason::Ipi);
            } else {
                let wv = self.threads[w].vcpu as usize;
                self.poke(wv);
            }
        }
    }

    /// KVM_HC_KICK_CPU: wake the kicked vCPU (pv_unhalted), then directed
    /// yield kicker -> kickee (kvm_sched_yield, [K5]).
    fn kick_hypercall(&mut self, v: usize, target: usize) -> Flow {
        let vm = self.vm_of(v);
        let cost = self.vms[vm].cfg.pv.hypercall_ns;
        self.vcpus[v].c.kicks += 1;
        self.vcpu_host_wake(target, WakeReason::Kick);
        let mut t = self.now + cost;
        self.boost_cpu = NO_CPU;
        // kvm_pv_kick_cpu_op, then (266e85a5ec9, 2019) kvm_sched_yield to the kicked vCPU
        let yielded = self.vms[vm].cfg.pv.kick_yield && self.kvm_sched_yield(v, target, &mut t);
        let boost = if yielded { std::mem::replace(&mut self.boost_cpu, NO_CPU) } else { NO_CPU };
        self.start_exit(v, t, ExitKind::Hypercall { yielded, boost }, C_EXIT);
        Flow::Started
    }

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

    // ------------------------------------------------- the kernel lock model

    /// `pv_queued_spin_steal_lock` (kernel lock model): at slow-path entry a
    /// PV qspinlock waiter takes a free lock once, unless the queue head is
    /// actively spinning (pending bit set; it clears it before it halts).
    fn pv_steal(&mut self, v: usize, vm: usize, lock: usize, t: usize) -> bool {
        if self.vms[vm].cfg.guest.lock_model != LockModel::Kernel {
            return false;
        }
        let l = &self.vms[vm].locks[lock];
        if l.kind != LockKind::PvQueued || l.holder.is_some() {
            return false;
        }
        let pending = l.waiters.front().is_some_and(|&h| !self.threads[h as usize].pv_halted);
        if pending {
            return false;
        }
        let l = &mut self.vms[vm].locks[lock];
        l.holder = Some(t as u32);
        l.acquisitions += 1;
        self.vcpus[v].c.lock_steals += 1;
        true
    }

    /// A PV qspinlock waiter (kernel lock model): the queue head runs
    /// `pv_wait_head_or_lock` (take the free lock; else spin SPIN_THRESHOLD
    /// iterations, then halt until the unlock kicks it; once per
    /// acquisition), the others
    /// `pv_wait_node` (spin SPIN_THRESHOLD iterations, or stop early when
    /// `pv_wait_early` sees the previous node not running, then halt; a halted
    /// node stays halted when it becomes the head and is kicked at the unlock).
    fn await_pv_qspinlock(&mut self, v: usize, t: usize, lock: usize) -> Flow {
        let vm = self.threads[t].vm as usize;
        if self.threads[t].pv_halted || self.threads[t].pv_new_head {
            // back from pv_wait (kicked or spurious), or a new head: a new spin loop
            self.threads[t].pv_halted = false;
            self.threads[t].pv_new_head = false;
            self.threads[t].spun = 0;
        }
        let pos = match self.vms[vm].locks[lock].waiters.iter().position(|&w| w as usize == t) {
            Some(p) => p,
            None => {
                // every waiter queued in begin_phase; never taken from the queue here
                debug_assert!(false, "PV waiter {t} is not queued");
                self.vms[vm].locks[lock].waiters.push_back(t as u32);
                self.vms[vm].locks[lock].waiters.len() - 1
            }
        };
        let l = &self.vms[vm].locks[lock];
        if pos == 0 && l.holder.is_none() {
            // trylock_clear_pending succeeds
            let l = &mut self.vms[vm].locks[lock];
            l.waiters.pop_front();
            l.holder = Some(t as u32);
            l.acquisitions += 1;
            if let Some(&n) = l.waiters.front() {
                // arch_mcs_spin_unlock_contended: the next node is the head now
                let n = n as usize;
                if self.threads[n].pv_halted {
                    // pv_kick_node: a halted node is hashed on its behalf
                    // (_Q_SLOW_VAL); this holder's unlock will kick it
                    self.threads[n].pv_hashed = true;
                    self.vms[vm].locks[lock].slow = true;
                } else {
                    self.threads[n].pv_new_head = true;
                    if self.spinning_now(n) {
                        let nv = self.threads[n].vcpu as usize;
                        self.poke(nv);
                    }
                }
            }
            self.threads[t].step = Step::Work { kernel: true, hold: Some(lock as u32) };
            return Flow::Again;
        }
        let spent = self.threads[t].spun >= self.vms[vm].spin_threshold_ns;
        let halt = if pos == 0 {
            if spent && self.threads[t].pv_hashed {
                // hashed once already (lp set): pv_wait returns at once
                // (locked != _Q_SLOW_VAL), another SPIN_THRESHOLD loop
                self.threads[t].spun = 0;
            }
            spent && !self.threads[t].pv_hashed
        } else {
            let prev = self.vms[vm].locks[lock].waiters[pos - 1] as usize;
            let early = self.threads[prev].pv_halted
                || (self.vms[vm].cfg.guest.pv_wait_early == WaitEarly::PrevHaltedOrPreempted
                    && self.vcpu_is_preempted(vm, self.threads[prev].vcpu as usize));
            if early && !spent {
                self.vcpus[v].c.pv_wait_early += 1;
            }
            spent || early
        };
        if !halt {
            self.start_spin(v, true);
            return Flow::Started;
        }
        // pv_wait: pn->state = halted, then HLT until kicked
        self.threads[t].pv_halted = true;
        if pos == 0 {
            // pv_hash + xchg(locked, _Q_SLOW_VAL): the unlock will kick it
            self.threads[t].pv_hashed = true;
            self.vms[vm].locks[lock].slow = true;
            self.vcpus[v].c.pv_wait_head += 1;
        } else {
            self.vcpus[v].c.pv_wait_node += 1;
        }
        self.poke_pv_next(vm, lock, pos);
        self.start_halt_exit(v);
        Flow::Started
    }

    /// The node after `pos` in the queue re-runs its wait-early check (the
    /// kernel checks every 256 iterations; here at once).
    fn poke_pv_next(&mut self, vm: usize, lock: usize, pos: usize) {
        if let Some(&n) = self.vms[vm].locks[lock].waiters.get(pos + 1) {
            if self.spinning_now(n as usize) {
                let nv = self.threads[n as usize].vcpu as usize;
                self.poke(nv);
            }
        }
    }

    /// `__pv_queued_spin_unlock` (kernel lock model): the lock is free; a
    /// halted queue head (`_Q_SLOW_VAL`) is kicked (KVM_HC_KICK_CPU), a
    /// running one takes the lock at once, a preempted one when it runs.
    fn pv_qspinlock_unlock(&mut self, v: usize, vm: usize, lock: usize) -> Flow {
        let slow = std::mem::replace(&mut self.vms[vm].locks[lock].slow, false);
        if let Some(&h) = self.vms[vm].locks[lock].waiters.front() {
            let hv = self.threads[h as usize].vcpu as usize;
            if slow {
                // __pv_queued_spin_unlock_slowpath: unhash, release, pv_kick(node->cpu)
                return self.kick_hypercall(v, hv);
            }
            self.poke(hv);
        }
        Flow::Again
    }

    /// `osq_lock` (kernel lock model): is the mutex spinner queued before `t`
    /// on a preempted vCPU? (The OSQ holds the optimistic spinners, in
    /// arrival order; a sleeping waiter is not in it.)
    fn osq_prev_preempted(&self, vm: usize, lock: usize, t: usize) -> bool {
        let l = &self.vms[vm].locks[lock];
        let Some(pos) = l.waiters.iter().position(|&w| w as usize == t) else { return false };
        l.waiters
            .iter()
            .take(pos)
            .rev()
            .find(|&&w| self.threads[w as usize].state == TState::Current)
            .is_some_and(|&w| self.vcpu_is_preempted(vm, self.threads[w as usize].vcpu as usize))
    }

    /// The vCPU `v` was just marked preempted (kernel lock model): PV queue
    /// nodes behind its thread re-check `pv_wait_early` (2019 rule only),
    /// OSQ spinners behind it re-check `vcpu_is_preempted(prev)` (only where
    /// the guest asks it). Only a check whose answer can change pokes: a
    /// poke restarts the spinner's spin (and its PLE window).
    fn notify_preempted_kernel(&mut self, v: usize) {
        let Some(h) = self.vcpus[v].cur else { return };
        let vm = self.vm_of(v);
        let g = &self.vms[vm].cfg.guest;
        let early_on_preempted = g.pv_wait_early == WaitEarly::PrevHaltedOrPreempted;
        let osq_checks = self.vcpu_is_preempted(vm, v);
        let mut pokes = Vec::new();
        for l in &self.vms[vm].locks {
            let Some(pos) = l.waiters.iter().position(|&w| w == h) else { continue };
            match l.kind {
                LockKind::PvQueued if early_on_preempted => {
                    if let Some(&n) = l.waiters.get(pos + 1) {
                        if self.spinning_now(n as usize) {
                            pokes.push(self.threads[n as usize].vcpu as usize);
                        }
                    }
                }
                LockKind::Mutex | LockKind::RwsemWrite if osq_checks => {
                    if let Some(&n) =
                        l.waiters.iter().skip(pos + 1).find(|&&w| self.threads[w as usize].state == TState::Current)
                    {
                        if self.spinning_now(n as usize) {
                            pokes.push(self.threads[n as usize].vcpu as usize);
                        }
                    }
                }
                _ => {}
            }
        }
        for p in pokes {
            self.poke(p);
        }
    }

    // ------------------------------------------------------------------ IPIs

    fn send_ipis(&mut self, v: usize, t: usize, targets: u32, tlb_flush: bool) -> Flow {
        let vm = self.vm_of(v);
        let (v0, n) = (self.vms[vm].vcpu0 as usize, self.vms[vm].nvcpu as usize);
        let mut others: Vec<usize> = (v0..v0 + n).filter(|&x| x != v).collect();
        if targets > 0 && (targets as usize) < others.len() {
            // partial Fisher-Yates: the first `targets` are a uniform sample
            for i in 0..targets as usize {
                let j = i + self.rng_below(others.len() - i);
                others.swap(i, j);
            }
            others.truncate(targets as usize);
            others.sort_unstable();
        }
        let pv = &self.vms[vm].cfg.pv;
        if tlb_flush && pv.tlb_flush && pv.steal_time {
            // kvm_flush_tlb_multi: a preempted target gets KVM_VCPU_FLUSH_TLB in its
            // steal-time flags instead of an IPI; the host flushes at its sched-in
            let before = others.len();
            others.retain(|&o| !self.vcpus[o].st_preempted);
            self.vcpus[v].c.tlb_flush_skipped += (before - others.len()) as u64;
        }
        // sending: one PV_SEND_IPI hypercall, or one ICR-write exit per target
        let pv = &self.vms[vm].cfg.pv;
        let send_ns = if others.is_empty() {
            0
        } else if pv.send_ipi {
            pv.hypercall_ns
        } else {
            pv.icr_write_ns * others.len() as u64
        };
        self.threads[t].acks = others.len() as u32;
        self.vcpus[v].c.ipis_sent += others.len() as u64;
        self.threads[t].step = Step::IpiWait;
        for &o in &others {
            self.vcpus[o].ipis.push_back(t as u32);
            self.vcpu_host_wake(o, WakeReason::Ipi);
        }
        let pv = &self.vms[vm].cfg.pv;
        if pv.sched_yield && pv.steal_time {
            if let Some(&target) = others.iter().find(|&&o| self.vcpus[o].st_preempted) {
                // kvm_smp_send_call_func_ipi: KVM_HC_SCHED_YIELD to the first preempted target
                let cost = pv.hypercall_ns;
                let mut tt = self.now + send_ns + cost;
                self.boost_cpu = NO_CPU;
                let yielded = self.kvm_sched_yield(v, target, &mut tt);
                let boost = if yielded { std::mem::replace(&mut self.boost_cpu, NO_CPU) } else { NO_CPU };
                self.start_exit(v, tt, ExitKind::Hypercall { yielded, boost }, C_EXIT);
                return Flow::Started;
            }
        }
        if send_ns > 0 {
            let end = self.now + send_ns;
            self.start_exit(v, end, ExitKind::Hypercall { yielded: false, boost: NO_CPU }, C_EXIT);
            return Flow::Started;
        }
        Flow::Again
    }

    fn ipi_ack(&mut self, sender: usize) {
        let th = &mut self.threads[sender];
        th.acks = th.acks.saturating_sub(1);
        if th.acks == 0 {
            let sv = th.vcpu as usize;
            self.poke(sv);
        }
    }

    // ------------------------------------------------------ wake and placement

    pub fn sleep_timer(&mut self, t: usize) {
        self.advance(t);
        self.wake_thread(t, WakeReason::Timer);
    }

    /// try_to_wake_up() in the guest: choose a vCPU (select_idle_sibling-like)
    /// and queue the thread there; kick the vCPU if it is halted.
    pub fn wake_thread(&mut self, t: usize, reason: WakeReason) {
        if self.threads[t].state == TState::Done {
            return;
        }
        let vm = self.threads[t].vm as usize;
        let prev = self.threads[t].vcpu as usize;
        let target = self.place(vm, prev);
        let th = &mut self.threads[t];
        th.state = TState::Ready;
        th.vcpu = target as u32;
        if self.vms[vm].cfg.guest.load_balance {
            self.guest_idle_ends(target);
            if !self.guest_idle_cpu(target) {
                // the thread waits behind another: a later tick may balance
                self.guest_balance_later(vm);
            }
        }
        self.vcpus[target].runq.push_back(t as u32);
        if self.vcpus[target].halted {
            self.vcpu_host_wake(target, reason);
        } else if self.vcpus[target].running.is_some() {
            self.poke(target);
        }
    }

    fn guest_idle_cpu(&self, c: usize) -> bool {
        let vc = &self.vcpus[c];
        vc.cur.is_none() && vc.runq.is_empty()
    }

    /// pcpu_is_idle (2021 proposal): nothing but this vCPU on the host CPU it last ran on.
    pub fn pcpu_is_idle(&self, c: usize) -> bool {
        let vc = &self.vcpus[c];
        let cpu = vc.last_cpu as usize;
        let mine = self.vcpus[c].task;
        let rq = &self.rqs[cpu];
        rq.queue.iter().chain(rq.curr.iter()).all(|&x| x == mine)
    }

    /// `kvm_arch_vcpu_put` of the 2021 RFC (vCPU `v` is being switched out
    /// of its CPU): the `is_idle` byte is set if the CPU's nr_running is <= 1
    /// (a halting vCPU no longer counts itself; a preempted one does), else
    /// cleared (as posted: not if it is set).
    fn rfc_vcpu_put(&mut self, v: usize) {
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
    fn rfc_record_steal_time(&mut self, v: usize, cpu: usize) {
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
    fn rfc_clear_is_idle(&mut self, v: usize) {
        let vm = self.vm_of(v);
        if self.vms[vm].cfg.pv.placement == Placement::PcpuIsIdleRfcCleared {
            self.vcpus[v].st_is_idle = false;
        }
    }

    // ------------------------------------------- guest load balancing

    /// `ttwu_do_wakeup`'s idle accounting: a thread arrives on a vCPU that
    /// was idle since `idle_stamp`: `update_avg(&rq->avg_idle, delta)`
    /// (1/8 weight), capped at 2 × the migration cost (`max_idle_balance_cost`
    /// at its initial value).
    fn guest_idle_ends(&mut self, c: usize) {
        let vm = self.vm_of(c);
        let cost = self.vms[vm].cfg.guest.migration_cost_ns;
        let now = self.now;
        let vc = &mut self.vcpus[c];
        if let Some(since) = vc.idle_stamp.take() {
            let delta = (now - since) as i64;
            let avg = vc.avg_idle as i64;
            vc.avg_idle = ((avg + (delta - avg) / 8).max(0) as Ns).min(2 * cost);
        }
    }

    /// The first cache-cold waiting thread of the vCPU with the most waiting
    /// threads (other than `dst`): `find_busiest_queue` by queue length, then
    /// `detach_tasks` from the longest-waiting end, skipping `task_hot`
    /// threads (stopped running less than the migration cost ago).
    fn guest_busiest_thread(&self, vm: usize, dst: usize) -> Option<(usize, usize)> {
        let (v0, n) = (self.vms[vm].vcpu0 as usize, self.vms[vm].nvcpu as usize);
        let cost = self.vms[vm].cfg.guest.migration_cost_ns;
        let mut best: Option<(usize, usize)> = None;
        for c in v0..v0 + n {
            let q = self.vcpus[c].runq.len();
            // a queue with a waiting thread beside a running one (nr_running >= 2),
            // or two waiting threads
            let nr = q + usize::from(self.vcpus[c].cur.is_some());
            if c == dst || q == 0 || nr < 2 || best.is_some_and(|(_, bq)| bq >= q) {
                continue;
            }
            best = Some((c, q));
        }
        let (src, _) = best?;
        let now = self.now;
        let i = self.vcpus[src].runq.iter().position(|&t| now - self.threads[t as usize].last_ran >= cost)?;
        Some((src, i))
    }

    /// Move waiting thread number `i` of `src`'s queue to `dst` (`detach_task` + `attach_task`).
    fn guest_migrate(&mut self, src: usize, i: usize, dst: usize) {
        let t = self.vcpus[src].runq.remove(i).expect("a queued thread") as usize;
        self.threads[t].vcpu = dst as u32;
        self.vcpus[dst].runq.push_back(t as u32);
        self.vcpus[dst].c.guest_pulls += 1;
    }

    /// `newidle_balance` (kernel/sched/fair.c, 5.x): a vCPU about to go idle
    /// pulls one waiting thread, unless its `avg_idle` is below the migration
    /// cost (the kernel's guard against balancing for short idle periods).
    fn guest_newidle_balance(&mut self, v: usize) -> bool {
        let vm = self.vm_of(v);
        if self.vcpus[v].avg_idle < self.vms[vm].cfg.guest.migration_cost_ns {
            return false;
        }
        match self.guest_busiest_thread(vm, v) {
            Some((src, i)) => {
                self.guest_migrate(src, i, v);
                self.vcpus[v].idle_stamp = None;
                true
            }
            None => false,
        }
    }

    /// A thread waits behind another on a vCPU of `vm`: at the next guest
    /// tick, `trigger_load_balance` → `nohz_balancer_kick` may run.
    fn guest_balance_later(&mut self, vm: usize) {
        if !self.vms[vm].cfg.guest.load_balance || self.vms[vm].lb_pending {
            return;
        }
        let tick = self.vms[vm].cfg.guest.tick_ns;
        self.vms[vm].lb_pending = true;
        let at = (self.now / tick + 1) * tick;
        self.push(at, Ev::GuestBalance(vm as u32));
    }

    /// A guest tick of a vCPU with two or more runnable threads: once the
    /// balance interval has passed (`nohz.next_balance`; `sd_weight` ms for
    /// the VM's one domain, `sd_init`), the kicked idle vCPU balances for
    /// every idle vCPU (`nohz_idle_balance`): each pulls one cache-cold
    /// waiting thread from the busiest queue and is woken (the reschedule
    /// IPI of `attach_task`). Simplification: the kick's own IPI and the
    /// balancing time are not charged; periodic balancing between busy
    /// vCPUs is not modelled.
    pub fn guest_nohz_balance(&mut self, vm: usize) {
        self.vms[vm].lb_pending = false;
        let (v0, n) = (self.vms[vm].vcpu0 as usize, self.vms[vm].nvcpu as usize);
        let stacked = |s: &Self| (v0..v0 + n).any(|c| !s.vcpus[c].runq.is_empty());
        if !stacked(self) {
            return;
        }
        if self.now >= self.vms[vm].nohz_next {
            self.vms[vm].nohz_next = self.now + n as Ns * 1_000_000;
            for dst in v0..v0 + n {
                if !self.guest_idle_cpu(dst) {
                    continue;
                }
                let Some((src, i)) = self.guest_busiest_thread(vm, dst) else { break };
                self.guest_idle_ends(dst);
                self.guest_migrate(src, i, dst);
                if self.vcpus[dst].halted {
                    self.vcpu_host_wake(dst, WakeReason::Ipi);
                } else if self.vcpus[dst].running.is_some() {
                    self.poke(dst);
                }
            }
        }
        if stacked(self) {
            self.guest_balance_later(vm);
        }
    }

    fn place(&self, vm: usize, prev: usize) -> usize {
        let (v0, n) = (self.vms[vm].vcpu0 as usize, self.vms[vm].nvcpu as usize);
        let pv = &self.vms[vm].cfg.pv;
        let order = (0..n).map(|i| v0 + (prev - v0 + i) % n);
        if pv.placement.is_rfc() {
            // fair.c's available_idle_cpu() calls became available_idle_cpu_sched():
            // idle_cpu(cpu) && pcpu_is_idle(cpu), the byte the host last wrote
            // (without steal time the guest reads no byte: pcpu_is_idle() is false)
            let st = pv.steal_time;
            return order.clone().find(|&c| self.guest_idle_cpu(c) && st && self.vcpus[c].st_is_idle).unwrap_or(prev);
        }
        if pv.placement == Placement::PcpuIsIdle {
            if let Some(c) = order.clone().find(|&c| self.guest_idle_cpu(c) && self.pcpu_is_idle(c)) {
                return c;
            }
        }
        // available_idle_cpu(): idle_cpu(cpu) && !vcpu_is_preempted(cpu)
        order.clone().find(|&c| self.guest_idle_cpu(c) && !self.vcpu_is_preempted(vm, c)).unwrap_or(prev)
    }
}

#[cfg(test)]
#[path = "guest_tests.rs"]
mod tests;

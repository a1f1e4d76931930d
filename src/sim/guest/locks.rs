//! The guest kernel's locks: test-and-set, ticket, queued and paravirtual
//! queued spinlocks, the mutex with optimistic spinning, the reader-writer
//! semaphore, and the kernel lock model's hand-off and `vcpu_is_preempted`
//! checks (kernel/locking/).

use super::super::config::{LockKind, LockModel, PvLockSteal, VmConfig, WaitEarly};
use super::super::engine::Sim;
use super::super::state::*;
use super::Flow;

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

impl Sim {
    // ------------------------------------------------------------------- locks

    /// The thread now runs holding its lock: its wait (from the Lock phase's
    /// start, including any time its vCPU was preempted or halted meanwhile)
    /// goes into the VM's lock-wait histogram, after the warm-up.
    pub(crate) fn record_lock_wait(&mut self, vm: usize, t: usize) {
        if self.now >= self.cfg.warmup_ns {
            let w = self.now - self.threads[t].lock_wait_start;
            super::super::hist::hist_add(&mut self.vms[vm].lock_waits, w);
        }
    }

    pub(crate) fn lock_try(&mut self, vm: usize, lock: usize, t: usize) -> bool {
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
    pub(crate) fn spinning_now(&self, t: usize) -> bool {
        let th = &self.threads[t];
        th.state == TState::Current && {
            let vc = &self.vcpus[th.vcpu as usize];
            vc.running.is_some() && matches!(vc.act, Act::Spin { .. })
        }
    }

    /// Mutex optimistic spinning goes on while owner_on_cpu(): the owner is
    /// current on its vCPU and, with steal time, that vCPU is not preempted.
    pub(crate) fn owner_on_cpu(&self, vm: usize, holder: usize) -> bool {
        let th = &self.threads[holder];
        th.state == TState::Current && !self.vcpu_is_preempted(vm, th.vcpu as usize)
    }

    /// The guest's `vcpu_is_preempted(cpu)` (kvm_vcpu_is_preempted: the
    /// steal-time `preempted` byte), where the guest kernel asks it (4.10+).
    pub(crate) fn vcpu_is_preempted(&self, vm: usize, c: usize) -> bool {
        let cfg = &self.vms[vm].cfg;
        cfg.pv.steal_time && cfg.guest.vcpu_is_preempted && self.vcpus[c].st_preempted
    }

    pub(crate) fn await_lock(&mut self, v: usize, t: usize, lock: u32) -> Flow {
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

    pub(crate) fn lock_release(&mut self, v: usize, t: usize, lock: usize) -> Flow {
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
                        self.wake_thread(w, WakeReason::Ipi, Some(t));
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

    pub(crate) fn grant(&mut self, vm: usize, lock: usize, w: usize) {
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
    pub(crate) fn notify_mutex_spinners(&mut self, v: usize) {
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

    // ------------------------------------------------ reader-writer semaphores

    /// `down_read_trylock` / `down_write_trylock` (kernel/locking/rwsem.c,
    /// 5.x): a reader takes it while no writer holds it and, at its fast
    /// path (`fast`), nobody waits (`RWSEM_FLAG_WAITERS` sends readers to the
    /// slow path); a writer takes it when neither a writer nor a reader holds it.
    pub(crate) fn rwsem_try(&mut self, vm: usize, lock: usize, t: usize, fast: bool) -> bool {
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
    pub(crate) fn await_rwsem(&mut self, v: usize, t: usize, lock: usize) -> Flow {
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
    pub(crate) fn rwsem_release(&mut self, vm: usize, lock: usize, t: usize) {
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
                self.wake_thread(w, WakeReason::Ipi, Some(t));
            } else {
                let wv = self.threads[w].vcpu as usize;
                self.poke(wv);
            }
        }
    }

    /// KVM_HC_KICK_CPU: wake the kicked vCPU (pv_unhalted), then directed
    /// yield kicker -> kickee (kvm_sched_yield, [K5]).
    pub(crate) fn kick_hypercall(&mut self, v: usize, target: usize) -> Flow {
        let vm = self.vm_of(v);
        let cost = self.vms[vm].cfg.pv.hypercall_ns;
        self.vcpus[v].c.kicks += 1;
        self.vcpu_host_wake(target, WakeReason::Kick);
        let mut t = self.now + cost;
        self.wake.boost_task = NO_TASK;
        // kvm_pv_kick_cpu_op, then (266e85a5ec9, 2019) kvm_sched_yield to the kicked vCPU
        let yielded = self.vms[vm].cfg.pv.kick_yield && self.kvm_sched_yield(v, target, &mut t);
        let boost = if yielded { std::mem::replace(&mut self.wake.boost_task, NO_TASK) } else { NO_TASK };
        self.start_exit(v, t, ExitKind::Hypercall { yielded, boost }, C_EXIT);
        Flow::Started
    }

    // --------------------------------------------------- the kernel lock model

    /// Kernel lock model, at the `pv_queued` slow path's entry
    /// (`queued_spin_trylock`, which qspinlock_paravirt.h redefines): with
    /// `PvLockSteal::Once` or `Hybrid` a waiter takes a free lock whose
    /// queue head has not set the pending bit (it sets it only while it
    /// spins; a halted head, or one that became the head while preempted or
    /// halted and has not run since, has not). `None`: only `lock_try`'s
    /// free lock with no queue.
    pub(crate) fn pv_steal(&mut self, v: usize, vm: usize, lock: usize, t: usize) -> bool {
        let g = &self.vms[vm].cfg.guest;
        if g.lock_model != LockModel::Kernel || g.pv_lock_steal == PvLockSteal::None {
            return false;
        }
        let l = &self.vms[vm].locks[lock];
        if l.kind != LockKind::PvQueued || l.holder.is_some() || l.pending {
            return false;
        }
        self.pv_take_stolen(v, vm, lock, t);
        true
    }

    /// Thread `t` on vCPU `v` takes the free lock ahead of its queue (a steal).
    fn pv_take_stolen(&mut self, v: usize, vm: usize, lock: usize, t: usize) {
        let l = &mut self.vms[vm].locks[lock];
        l.holder = Some(t as u32);
        l.acquisitions += 1;
        self.vcpus[v].c.lock_steals += 1;
    }

    /// Thread `t` now holds `lock` (its wait recorded) and runs its section.
    fn pv_holds(&mut self, vm: usize, t: usize, lock: usize) -> Flow {
        self.record_lock_wait(vm, t);
        self.threads[t].step = Step::Work { kernel: true, hold: Some(lock as u32) };
        Flow::Again
    }

    /// `PvLockSteal::Hybrid` (`pv_hybrid_queued_unfair_trylock`, 11752adb68a3):
    /// a waiter that could not take the lock at the slow path's entry stays
    /// in the unfair loop (spinning on the lock word, not queued) while the
    /// MCS queue is not empty and the pending bit is clear. True: it does.
    pub(crate) fn pv_enter_unfair(&mut self, vm: usize, lock: usize, t: usize) -> bool {
        let g = &self.vms[vm].cfg.guest;
        if g.lock_model != LockModel::Kernel || g.pv_lock_steal != PvLockSteal::Hybrid {
            return false;
        }
        let l = &mut self.vms[vm].locks[lock];
        if l.kind != LockKind::PvQueued || l.waiters.is_empty() || l.pending {
            return false;
        }
        l.unfair.push(t as u32);
        self.threads[t].pv_unfair = true;
        true
    }

    fn pv_leave_unfair(&mut self, vm: usize, lock: usize, t: usize) {
        let l = &mut self.vms[vm].locks[lock];
        if let Some(i) = l.unfair.iter().position(|&w| w as usize == t) {
            l.unfair.remove(i);
        }
        self.threads[t].pv_unfair = false;
    }

    /// The unfair loop's spinners on running vCPUs re-read the lock word
    /// (the queue emptied, or its head set the pending bit: they queue).
    fn poke_unfair(&mut self, vm: usize, lock: usize) {
        for i in 0..self.vms[vm].locks[lock].unfair.len() {
            let w = self.vms[vm].locks[lock].unfair[i] as usize;
            if self.spinning_now(w) {
                let wv = self.threads[w].vcpu as usize;
                self.poke(wv);
            }
        }
    }

    /// The lock word was just freed with the pending bit clear: of the
    /// unfair loop's spinners on running vCPUs, one (drawn) wins the
    /// `cmpxchg`; the others see it taken and spin on.
    fn pv_grant_unfair(&mut self, vm: usize, lock: usize) {
        let l = &self.vms[vm].locks[lock];
        let n = l.unfair.iter().filter(|&&w| self.spinning_now(w as usize)).count();
        if n == 0 {
            return;
        }
        let k = self.rng_below(n);
        let w = self.vms[vm].locks[lock].unfair.iter().copied().filter(|&w| self.spinning_now(w as usize)).nth(k);
        let w = w.expect("k < n spinners") as usize;
        self.pv_leave_unfair(vm, lock, w);
        let wv = self.threads[w].vcpu as usize;
        self.pv_take_stolen(wv, vm, lock, w);
        self.poke(wv);
    }

    /// A PV qspinlock waiter (kernel lock model): the queue head runs
    /// `pv_wait_head_or_lock` (take the free lock; else spin SPIN_THRESHOLD
    /// iterations, then halt until the unlock kicks it; once per
    /// acquisition), the others
    /// `pv_wait_node` (spin SPIN_THRESHOLD iterations, or stop early when
    /// `pv_wait_early` sees the previous node not running, then halt; a halted
    /// node stays halted when it becomes the head and is kicked at the unlock).
    pub(crate) fn await_pv_qspinlock(&mut self, v: usize, t: usize, lock: usize) -> Flow {
        let vm = self.threads[t].vm as usize;
        if self.vms[vm].locks[lock].holder == Some(t as u32) {
            // the unfair loop's cmpxchg won at the unlock (pv_grant_unfair)
            return self.pv_holds(vm, t, lock);
        }
        if self.threads[t].pv_unfair {
            // pv_hybrid_queued_unfair_trylock's loop
            let l = &self.vms[vm].locks[lock];
            if l.holder.is_none() && !l.pending {
                self.pv_leave_unfair(vm, lock, t);
                self.pv_take_stolen(v, vm, lock, t);
                return self.pv_holds(vm, t, lock);
            }
            if !l.waiters.is_empty() && !l.pending {
                self.start_spin(v, false);
                return Flow::Started;
            }
            // the queue is empty or its head spins (pending): join the queue
            self.pv_leave_unfair(vm, lock, t);
            self.vms[vm].locks[lock].waiters.push_back(t as u32);
            self.threads[t].spun = 0;
        }
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
            l.pending = false;
            if l.waiters.is_empty() && !l.unfair.is_empty() {
                // the tail is clear: the unfair loop's spinners leave it and queue
                self.poke_unfair(vm, lock);
            }
            let l = &self.vms[vm].locks[lock];
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
            return self.pv_holds(vm, t, lock);
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
            let rule = self.vms[vm].cfg.guest.pv_wait_early;
            let early = rule != WaitEarly::Never
                && (self.threads[prev].pv_halted
                    || (rule == WaitEarly::PrevHaltedOrPreempted
                        && self.vcpu_is_preempted(vm, self.threads[prev].vcpu as usize)));
            if early && !spent {
                self.vcpus[v].c.pv_wait_early += 1;
            }
            spent || early
        };
        if !halt {
            if pos == 0 && !self.vms[vm].locks[lock].pending {
                // set_pending: no more stealing; the unfair loop's spinners queue
                self.vms[vm].locks[lock].pending = true;
                if !self.vms[vm].locks[lock].unfair.is_empty() {
                    self.poke_unfair(vm, lock);
                }
            }
            self.start_spin(v, true);
            return Flow::Started;
        }
        // pv_wait: pn->state = halted, then HLT until kicked
        self.threads[t].pv_halted = true;
        if pos == 0 {
            // clear_pending, pv_hash + xchg(locked, _Q_SLOW_VAL): the unlock will kick it
            self.vms[vm].locks[lock].pending = false;
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
    pub(crate) fn poke_pv_next(&mut self, vm: usize, lock: usize, pos: usize) {
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
    pub(crate) fn pv_qspinlock_unlock(&mut self, v: usize, vm: usize, lock: usize) -> Flow {
        let slow = std::mem::replace(&mut self.vms[vm].locks[lock].slow, false);
        if !self.vms[vm].locks[lock].pending && !self.vms[vm].locks[lock].unfair.is_empty() {
            self.pv_grant_unfair(vm, lock);
        }
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
    pub(crate) fn osq_prev_preempted(&self, vm: usize, lock: usize, t: usize) -> bool {
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
    pub(crate) fn notify_preempted_kernel(&mut self, v: usize) {
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
}

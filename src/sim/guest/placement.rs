//! The guest kernel's wake-up placement (`select_task_rq` over the VM's vCPUs,
//! the pcpu_is_idle RFC's check) and its load balancing (newidle and nohz
//! idle balancing of threads between vCPUs).

use super::super::config::Placement;
use super::super::engine::Sim;
use super::super::queue::Ev;
use super::super::state::*;

impl Sim {
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

    pub(crate) fn guest_idle_cpu(&self, c: usize) -> bool {
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

    // ---------------------------------------------------- guest load balancing

    /// `ttwu_do_wakeup`'s idle accounting: a thread arrives on a vCPU that
    /// was idle since `idle_stamp`: `update_avg(&rq->avg_idle, delta)`
    /// (1/8 weight), capped at 2 × the migration cost (`max_idle_balance_cost`
    /// at its initial value).
    pub(crate) fn guest_idle_ends(&mut self, c: usize) {
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
    pub(crate) fn guest_busiest_thread(&self, vm: usize, dst: usize) -> Option<(usize, usize)> {
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
    pub(crate) fn guest_migrate(&mut self, src: usize, i: usize, dst: usize) {
        let t = self.vcpus[src].runq.remove(i).expect("a queued thread") as usize;
        self.threads[t].vcpu = dst as u32;
        self.vcpus[dst].runq.push_back(t as u32);
        self.vcpus[dst].c.guest_pulls += 1;
    }

    /// `newidle_balance` (kernel/sched/fair.c, 5.x): a vCPU about to go idle
    /// pulls one waiting thread, unless its `avg_idle` is below the migration
    /// cost (the kernel's guard against balancing for short idle periods).
    pub(crate) fn guest_newidle_balance(&mut self, v: usize) -> bool {
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
    pub(crate) fn guest_balance_later(&mut self, vm: usize) {
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

    pub(crate) fn place(&self, vm: usize, prev: usize) -> usize {
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

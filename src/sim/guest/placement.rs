//! The guest kernel's wake-up placement (`select_task_rq` over the VM's vCPUs,
//! the pcpu_is_idle RFC's check) and its load balancing (newidle and nohz
//! idle balancing of threads between vCPUs).

use super::super::config::{GuestWakePlacement, IdleScan, Placement};
use super::super::engine::Sim;
use super::super::queue::Ev;
use super::super::state::*;

impl Sim {
    // ------------------------------------------------------ wake and placement

    pub fn sleep_timer(&mut self, t: usize) {
        self.advance(t);
        // the hrtimer fires on the vCPU the thread slept on: no waker thread
        self.wake_thread(t, WakeReason::Timer, None);
    }

    /// try_to_wake_up() in the guest: `select_task_rq` chooses a vCPU
    /// (`Guest.wake_placement`) and the thread is queued there; a halted
    /// vCPU is kicked. `waker`: the thread whose action wakes it (running
    /// on its vCPU), None for a timer.
    pub fn wake_thread(&mut self, t: usize, reason: WakeReason, waker: Option<usize>) {
        if self.threads[t].state == TState::Done {
            return;
        }
        let vm = self.threads[t].vm as usize;
        let prev = self.threads[t].vcpu as usize;
        let bound = self.threads[t].idx == 0 && self.vms[vm].cfg.workload.thread0_bound;
        let target = match self.vms[vm].cfg.guest.wake_placement {
            // bound to vCPU 0 (where it started and stays): no choice to make
            _ if bound => prev,
            GuestWakePlacement::FirstIdle => self.place(vm, prev),
            GuestWakePlacement::SelectTaskRqFair => self.guest_select_task_rq_fair(vm, t, prev, waker),
        };
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

    /// pcpu_is_idle (2021 proposal): nothing but this vCPU on the host CPU it
    /// last ran on. Under vcpulab's token schedulers, what src/kvm/sched/
    /// publishes instead: the CPU of the last token the vCPU held has no
    /// holder (so a vCPU holding a token reads its own CPU busy; none held
    /// yet: not idle).
    pub fn pcpu_is_idle(&self, c: usize) -> bool {
        if self.tokens_on() {
            let cpu = self.tokens.last_cpu[self.vcpus[c].task as usize] as usize;
            return cpu < self.tokens.holder.len() && self.tokens.holder[cpu].is_none();
        }
        let vc = &self.vcpus[c];
        let cpu = vc.last_cpu as usize;
        let mine = self.vcpus[c].task;
        let rq = &self.rqs[cpu];
        rq.queue.iter().chain(rq.curr.iter()).all(|&x| x == mine)
    }

    // ------------------------------------- select_task_rq_fair in the guest

    /// The first vCPU and the size of the guest LLC holding vCPU `c`
    /// (`Guest.llc_vcpus`, 0: the whole VM).
    fn guest_llc(&self, vm: usize, c: usize) -> (usize, usize) {
        let (v0, n) = (self.vms[vm].vcpu0 as usize, self.vms[vm].nvcpu as usize);
        let l = match self.vms[vm].cfg.guest.llc_vcpus as usize {
            0 => n,
            l => l,
        };
        (v0 + (c - v0) / l * l, l)
    }

    /// The vCPUs of the guest core holding vCPU `c` (`Guest.threads_per_core`).
    fn guest_core(&self, vm: usize, c: usize) -> std::ops::Range<usize> {
        let v0 = self.vms[vm].vcpu0 as usize;
        let smt = self.vms[vm].cfg.guest.threads_per_core as usize;
        let first = v0 + (c - v0) / smt * smt;
        first..first + smt
    }

    fn guest_share_llc(&self, vm: usize, a: usize, b: usize) -> bool {
        self.guest_llc(vm, a).0 == self.guest_llc(vm, b).0
    }

    /// The guest's `available_idle_cpu(c)` as `Pv.placement` defines it:
    /// idle and not preempted (upstream); idle with the `is_idle` byte set
    /// (the 2021 RFC's `available_idle_cpu_sched`); with `strict_pcpu`
    /// (vcpulab's first pcpu_is_idle model, its first pass) idle with its
    /// host CPU idle.
    fn guest_available(&self, vm: usize, c: usize, strict_pcpu: bool) -> bool {
        if !self.guest_idle_cpu(c) {
            return false;
        }
        let pv = &self.vms[vm].cfg.pv;
        if pv.placement.is_rfc() {
            return pv.steal_time && self.vcpus[c].st_is_idle;
        }
        if strict_pcpu {
            return self.pcpu_is_idle(c);
        }
        !self.vcpu_is_preempted(vm, c)
    }

    /// Runnable threads of vCPU `c` (its current one and those waiting):
    /// the load `wake_affine_weight` compares (PELT's `cpu_load` in the
    /// kernel; here a count of nice-0 threads).
    fn guest_load(&self, c: usize) -> u64 {
        let vc = &self.vcpus[c];
        vc.cur.is_some() as u64 + vc.runq.len() as u64
    }

    /// `select_task_rq_fair` for the wake-up of thread `t` whose previous
    /// vCPU is `prev`, woken by thread `waker` (None: from a timer on
    /// `prev`). `record_wakee`, then `wake_affine` unless the waker is on
    /// `prev` or `wake_wide` says no, then `select_idle_sibling`; the
    /// thread's `recent_used_cpu` becomes `prev` once the search gets past
    /// the target and the previous vCPU (as the kernel's does).
    pub(crate) fn guest_select_task_rq_fair(
        &mut self,
        vm: usize,
        t: usize,
        prev: usize,
        waker: Option<usize>,
    ) -> usize {
        let this = match waker {
            Some(w) => {
                self.guest_record_wakee(vm, w, t);
                self.threads[w].vcpu as usize
            }
            None => prev,
        };
        let pcpu_first = self.vms[vm].cfg.pv.placement == Placement::PcpuIsIdle;
        let recent = self.threads[t].recent_used_cpu as usize;
        let wide = waker.is_some_and(|w| self.guest_wake_wide(vm, w, t, this));
        let pick = |strict: bool| {
            let target = if this != prev && !wide { self.guest_wake_affine(vm, this, prev, strict) } else { prev };
            self.guest_select_idle_sibling(vm, prev, target, recent, strict)
        };
        let (mut cpu, mut past_prev) = pick(pcpu_first);
        if pcpu_first && !self.guest_available(vm, cpu, true) {
            // vcpulab's first pcpu_is_idle model: no vCPU idle on an idle
            // host CPU; then available_idle_cpu
            (cpu, past_prev) = pick(false);
        }
        if past_prev && self.vms[vm].cfg.guest.recent_used_cpu {
            self.threads[t].recent_used_cpu = prev as u32;
        }
        cpu
    }

    /// `record_wakee(p)` on waker thread `w` (`Guest.wake_wide`).
    fn guest_record_wakee(&mut self, vm: usize, w: usize, t: usize) {
        if !self.vms[vm].cfg.guest.wake_wide || w == t {
            return;
        }
        let now = self.now;
        self.threads[w].wakee.record(now, t as u32);
    }

    /// `wake_wide(p)` between waker thread `w` and wakee `t`, with the guest
    /// LLC of the waker's vCPU `this` ([`wake_wide`]).
    fn guest_wake_wide(&self, vm: usize, w: usize, t: usize, this: usize) -> bool {
        if !self.vms[vm].cfg.guest.wake_wide {
            return false;
        }
        wake_wide(self.threads[w].wakee.flips, self.threads[t].wakee.flips, self.guest_llc(vm, this).1 as u32)
    }

    /// `wake_affine`: `wake_affine_idle` (the waker's vCPU if available and
    /// in the previous one's LLC — the previous one if that is available
    /// too; else the previous vCPU if available), then `wake_affine_weight`
    /// (the waker's vCPU if its load with the thread, × 100, is below the
    /// previous vCPU's load × (100 + (imbalance_pct − 100) / 2): 110 for
    /// SMT siblings, 117 otherwise), else the previous vCPU.
    fn guest_wake_affine(&self, vm: usize, this: usize, prev: usize, strict: bool) -> usize {
        if self.guest_available(vm, this, strict) && self.guest_share_llc(vm, this, prev) {
            return if self.guest_available(vm, prev, strict) { prev } else { this };
        }
        if self.guest_available(vm, prev, strict) {
            return prev;
        }
        let imbalance_pct: u64 = if self.guest_core(vm, this).contains(&prev) && this != prev { 110 } else { 117 };
        let this_eff = (self.guest_load(this) + 1) * 100;
        let prev_eff = self.guest_load(prev) * (100 + (imbalance_pct - 100) / 2);
        if this_eff < prev_eff {
            this
        } else {
            prev
        }
    }

    /// `select_idle_sibling(p, prev, target)` over the guest's topology:
    /// the target if available; the previous vCPU if available and in the
    /// target's LLC; `recent_used_cpu` likewise; with SMT, an idle sibling
    /// of `prev` when no core is idle (`select_idle_smt`); then
    /// `select_idle_cpu` from target + 1 over the target's LLC (wrapping):
    /// with an idle core, the first whole idle core (`select_idle_core`,
    /// no scan limit) or else the first available vCPU it saw; without,
    /// the first available vCPU among `nr_idle_scan` (`Guest.idle_scan`);
    /// else the target. Returns the vCPU and whether the search went past
    /// the target and `prev` (where the kernel updates `recent_used_cpu`).
    fn guest_select_idle_sibling(
        &self,
        vm: usize,
        prev: usize,
        target: usize,
        recent: usize,
        strict: bool,
    ) -> (usize, bool) {
        let avail = |c: usize| self.guest_available(vm, c, strict);
        if avail(target) {
            return (target, false);
        }
        if prev != target && self.guest_share_llc(vm, prev, target) && avail(prev) {
            return (prev, false);
        }
        let g = &self.vms[vm].cfg.guest;
        if g.recent_used_cpu
            && recent != prev
            && recent != target
            && self.guest_share_llc(vm, recent, target)
            && avail(recent)
        {
            return (recent, true);
        }
        let (first, l) = self.guest_llc(vm, target);
        let smt = g.threads_per_core as usize;
        let core_idle = |c: usize| self.guest_core(vm, c).all(avail);
        let has_idle_core = smt > 1 && (first..first + l).step_by(smt).any(core_idle);
        if smt > 1 && !has_idle_core && self.guest_share_llc(vm, prev, target) {
            if let Some(c) = self.guest_core(vm, prev).find(|&c| c != prev && avail(c)) {
                return (c, true);
            }
        }
        let order = (1..=l).map(|k| first + (target - first + k) % l);
        if has_idle_core {
            // each core once, at its first vCPU in the scan's order (the
            // kernel drops a visited core's siblings from the mask)
            let start_core = self.guest_core(vm, first + (target - first + 1) % l).start;
            let mut idle_cpu = None;
            for (k, c) in order.enumerate() {
                let core = self.guest_core(vm, c).start;
                if k > 0 && (c != core || core == start_core) {
                    continue;
                }
                if core_idle(c) {
                    return (core, true);
                }
                if idle_cpu.is_none() {
                    idle_cpu = self.guest_core(vm, c).find(|&s| avail(s));
                }
            }
            return (idle_cpu.unwrap_or(target), true);
        }
        let mut nr = match g.idle_scan {
            IdleScan::Full => l,
            IdleScan::SisUtil => {
                // update_idle_cpu_scan: x = sum_util / nr_llc (1/1024 of a CPU),
                // y = 1024 - min(x^2 pct^2 / (10000 * 1024), 1024) with the LLC
                // domain's imbalance_pct (117; 110 for an SMT-core LLC),
                // nr_idle_scan = nr_llc * y / 1024
                let busy = (first..first + l).filter(|&c| !self.guest_idle_cpu(c)).count() as u64;
                let x = busy * 1024 / l as u64;
                let pct: u64 = if l == smt && smt > 1 { 110 } else { 117 };
                let y = 1024 - (x * x * pct * pct / (10_000 * 1024)).min(1024);
                (l as u64 * y / 1024) as usize
            }
        };
        for c in order {
            if nr == 0 {
                break;
            }
            nr -= 1;
            if avail(c) {
                return (c, true);
            }
        }
        (target, true)
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
        let bound = self.vms[vm].cfg.workload.thread0_bound;
        let i = self.vcpus[src].runq.iter().position(|&t| {
            let th = &self.threads[t as usize];
            now - th.last_ran >= cost && !(bound && th.idx == 0)
        })?;
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

//! Topology, wake-up placement and load balancing of unpinned host threads
//! (`Host.sockets`, `Host.threads_per_core`, `Host.wake_placement =
//! "select_task_rq_fair"`, `Host.load_balance`), after kernel/sched/fair.c
//! and kernel/sched/topology.c (v5.x; the rules named below have kept
//! their shape from v4.9 to v6.x).
//!
//! Simplifications (docs/simulator.md): loads are instantaneous runnable
//! weights, not PELT averages; `wake_wide` is not modelled (wake_affine is
//! always tried) and no wake-up is WF_SYNC; `select_idle_cpu` scans the whole
//! LLC (no SIS_PROP depth limit) and knows exactly whether an idle core
//! exists (the kernel keeps a hint); periodic balancing compares the
//! busiest CPU of a domain with this CPU by task count and moves one task
//! per balance, at the domain's minimum interval (no doubling on failure);
//! busy siblings do not slow each other down (no SMT throughput factor).

use super::engine::Sim;
use super::state::*;

impl Sim {
    #[inline]
    pub(crate) fn core_of(&self, cpu: usize) -> u32 {
        cpu as u32 % self.topo.ncores
    }

    #[inline]
    pub(crate) fn llc_of(&self, cpu: usize) -> u32 {
        self.core_of(cpu) / self.topo.cores_per_socket
    }

    /// `cpus_share_cache`: the same socket (one LLC per socket).
    #[inline]
    pub(crate) fn share_llc(&self, a: usize, b: usize) -> bool {
        self.llc_of(a) == self.llc_of(b)
    }

    /// The CPUs of `cpu`'s core (its SMT siblings and itself), ascending.
    pub(crate) fn core_cpus(&self, cpu: usize) -> impl Iterator<Item = usize> + '_ {
        let core = self.core_of(cpu);
        (0..self.cfg.host.threads_per_core).map(move |t| (t * self.topo.ncores + core) as usize)
    }

    /// The CPUs of `cpu`'s LLC (socket), ascending.
    #[cfg(test)]
    pub(crate) fn llc_cpus(&self, cpu: usize) -> Vec<usize> {
        self.llc(cpu).iter().map(|&c| c as usize).collect()
    }

    /// The CPUs of `cpu`'s LLC (socket), ascending, without a copy.
    #[inline]
    fn llc(&self, cpu: usize) -> &[u32] {
        &self.topo.llc_list[self.llc_of(cpu) as usize]
    }

    /// The number of CPUs in domain level `lvl` around `cpu`: 0 = SMT core, 1 = LLC, 2 = machine.
    fn domain_weight(&self, cpu: usize, lvl: usize) -> usize {
        match lvl {
            0 => self.cfg.host.threads_per_core as usize,
            1 => self.llc(cpu).len(),
            _ => self.rqs.len(),
        }
    }

    /// The domain levels that exist (an SMT level only with SMT, a machine
    /// level only with more than one socket).
    fn levels(&self) -> impl Iterator<Item = usize> {
        let smt = self.cfg.host.threads_per_core > 1;
        let numa = self.cfg.host.sockets > 1;
        (0..3).filter(move |&l| (l != 0 || smt) && (l != 2 || numa))
    }

    /// `available_idle_cpu` on the host: nothing runs or waits there.
    #[inline]
    fn idle(&self, cpu: usize) -> bool {
        self.nr_running(cpu) == 0
    }

    /// Runnable load of a CPU: Σ weight of curr and the queue.
    fn cpu_load(&self, cpu: usize) -> u64 {
        let curr = self.rqs[cpu]
            .curr
            .filter(|&c| self.tasks[c as usize].runnable)
            .map_or(0, |c| self.tasks[c as usize].weight);
        self.rqs[cpu].queue_w as u64 + curr
    }

    /// `select_task_rq_fair` for a wake-up of `t` (unpinned): with the
    /// waker on another CPU, `wake_affine` chooses between the waker's CPU
    /// and the previous one; `select_idle_sibling` then looks for an idle
    /// CPU around that target.
    pub(crate) fn select_task_rq_fair(&self, t: usize) -> usize {
        let prev = self.tasks[t].cpu as usize;
        let this = if self.wake.waker_cpu == NO_CPU { prev } else { self.wake.waker_cpu as usize };
        let target = if this != prev && !self.wake_wide(t, this) { self.wake_affine(t, this, prev) } else { prev };
        self.select_idle_sibling(prev, target)
    }

    /// `record_wakee` (`Host.wake_wide`), before `select_task_rq_fair` places
    /// wakee `t`: on the waker task of the event making the wake-up.
    pub(crate) fn record_wakee(&mut self, t: usize) {
        let w = self.wake.waker_task;
        if !self.cfg.host.wake_wide || w == u32::MAX || w as usize == t {
            return;
        }
        let now = self.now;
        self.tasks[w as usize].wakee.record(now, t as u32);
    }

    /// `wake_wide` between the waker task and wakee `t`, with the LLC of the
    /// waker's CPU `this` ([`wake_wide`]).
    pub(crate) fn wake_wide(&self, t: usize, this: usize) -> bool {
        let w = self.wake.waker_task;
        if !self.cfg.host.wake_wide || w == u32::MAX {
            return false;
        }
        wake_wide(self.tasks[w as usize].wakee.flips, self.tasks[t].wakee.flips, self.llc(this).len() as u32)
    }

    /// `wake_affine`: `wake_affine_idle` (the waker's CPU if it is idle and
    /// shares the LLC with the previous one — the previous one if that is
    /// idle too; else the previous CPU if idle), then `wake_affine_weight`
    /// (the waker's CPU if its load with the task, ×100, is below the
    /// previous CPU's load × (100 + (imbalance_pct − 100)/2)).
    pub(crate) fn wake_affine(&self, t: usize, this: usize, prev: usize) -> usize {
        if self.idle(this) && self.share_llc(this, prev) {
            return if self.idle(prev) { prev } else { this };
        }
        if self.idle(prev) {
            return prev;
        }
        // the domain spanning both CPUs: the core (SMT, 110) or a wider one (117)
        let same_core = self.core_of(this) == self.core_of(prev) && self.cfg.host.threads_per_core > 1;
        let imbalance_pct: u64 = if same_core { 110 } else { 117 };
        let task_load = self.tasks[t].weight;
        // the sleeping task's blocked load still counts on prev (PELT), and
        // the kernel subtracts it there: prev's runnable load remains
        let this_eff = (self.cpu_load(this) + task_load) * 100;
        let prev_eff = self.cpu_load(prev) * (100 + (imbalance_pct - 100) / 2);
        if this_eff < prev_eff {
            this
        } else {
            prev
        }
    }

    /// `select_idle_sibling(p, prev, target)`: the target if idle; the
    /// previous CPU if idle and sharing the target's LLC; then
    /// `select_idle_cpu` over the target's LLC from target + 1 (wrapping):
    /// with an idle core in the LLC, the first CPU whose whole core is idle
    /// (`select_idle_core`), else the first idle CPU; else the target.
    pub(crate) fn select_idle_sibling(&self, prev: usize, target: usize) -> usize {
        if self.idle(target) {
            return target;
        }
        if prev != target && self.share_llc(prev, target) && self.idle(prev) {
            return prev;
        }
        let llc = self.llc(target);
        let start = llc.partition_point(|&c| c as usize <= target);
        let order = llc[start..].iter().chain(llc[..start].iter()).map(|&c| c as usize);
        let core_idle = |c: usize| self.core_cpus(c).all(|s| self.idle(s));
        let has_idle_core = self.cfg.host.threads_per_core > 1 && llc.iter().any(|&c| core_idle(c as usize));
        let mut first_idle = None;
        for c in order {
            if has_idle_core {
                if core_idle(c) {
                    return c;
                }
                if first_idle.is_none() && self.idle(c) {
                    first_idle = Some(c);
                }
            } else if self.idle(c) {
                return c;
            }
        }
        first_idle.unwrap_or(target)
    }

    /// A queued, unpinned task of `src` that `dst` may take: the one that
    /// has waited longest; with `cache_hot`, not one that ran within
    /// migration_cost (`can_migrate_task` / `task_hot`).
    fn movable(&self, src: usize, cache_hot: bool) -> Option<usize> {
        let now = self.now;
        let cost = self.cfg.host.migration_cost_ns;
        self.rqs[src]
            .queue
            .iter()
            .map(|&t| t as usize)
            .filter(|&t| self.tasks[t].pinned.is_none() && !self.tasks[t].parked)
            .filter(|&t| {
                !cache_hot || now.saturating_sub(self.tasks[t].last_ran) >= cost || self.tasks[t].last_ran == 0
            })
            .min_by_key(|&t| (self.tasks[t].wait_since, self.tasks[t].tie, t))
    }

    /// Move queued task `t` to `dst` (`detach_task` / `attach_task`).
    fn migrate(&mut self, t: usize, dst: usize) {
        let src = self.tasks[t].cpu as usize;
        self.rq_remove_queued(t);
        self.tasks[t].cpu = dst as u32;
        if self.is_cfs() {
            self.cfs_place(dst, t, src, false);
        }
        self.rq_add(t, false);
    }

    /// The CPU of `span` (other than `cpu`) with the most runnable tasks
    /// that has a movable one (`find_busiest_queue`, by task count).
    fn busiest(&self, cpu: usize, lvl: usize, cache_hot: bool) -> Option<(usize, usize)> {
        let span: Box<dyn Iterator<Item = usize> + '_> = match lvl {
            0 => Box::new(self.core_cpus(cpu)),
            1 => Box::new(self.llc(cpu).iter().map(|&c| c as usize)),
            _ => Box::new(0..self.rqs.len()),
        };
        let mut best: Option<(usize, usize, usize)> = None; // (nr, cpu, task)
        for c in span {
            if c == cpu || self.rqs[c].queue.is_empty() {
                continue;
            }
            let nr = self.nr_running(c);
            if best.is_some_and(|(bn, _, _)| bn >= nr) {
                continue;
            }
            if let Some(t) = self.movable(c, cache_hot) {
                best = Some((nr, c, t));
            }
        }
        best.map(|(_, c, t)| (c, t))
    }

    /// `newidle_balance`: a CPU about to go idle pulls one waiting task from
    /// the busiest CPU of its smallest domain that has one (core, LLC,
    /// machine). An idle CPU takes a waiting task whatever its cache state
    /// (the kernel relaxes task_hot after failed attempts; simplified).
    pub(crate) fn newidle_balance(&mut self, cpu: usize) {
        let levels: Vec<usize> = self.levels().collect();
        for lvl in levels {
            if let Some((_, t)) = self.busiest(cpu, lvl, false) {
                self.migrate(t, cpu);
                return;
            }
        }
    }

    /// Periodic balancing from the tick of busy `cpu` (`trigger_load_balance`
    /// → `rebalance_domains` → `load_balance`): each domain level is
    /// balanced every sd_weight ms × busy_factor (sd_init's min_interval;
    /// a CPU with a tick is busy); the busiest CPU of the span gives one
    /// cache-cold waiting task if it runs at least two more tasks than
    /// this one. Then the nohz kick (`nohz_balancer_kick`): with two or
    /// more tasks here and an idle CPU somewhere, the first idle CPU of
    /// the LLC (else of the machine) balances for itself as `newidle_balance`
    /// does, at most once per tick period.
    pub(crate) fn balance_tick(&mut self, cpu: usize) {
        let now = self.now;
        let busy_factor = self.cfg.host.lb_busy_factor as u64;
        let levels: Vec<usize> = self.levels().collect();
        for lvl in levels {
            if now < self.rqs[cpu].lb_next[lvl] {
                continue;
            }
            let interval = self.domain_weight(cpu, lvl) as u64 * 1_000_000 * busy_factor;
            self.rqs[cpu].lb_next[lvl] = now + interval.max(self.cfg.host.tick_ns);
            if let Some((src, t)) = self.busiest(cpu, lvl, true) {
                if self.nr_running(src) >= self.nr_running(cpu) + 2 {
                    self.migrate(t, cpu);
                }
            }
        }
        if self.nr_running(cpu) >= 2 && now >= self.nohz_next {
            self.nohz_next = now + self.cfg.host.tick_ns;
            let ilb = self
                .llc(cpu)
                .iter()
                .map(|&c| c as usize)
                .find(|&c| self.idle(c))
                .or_else(|| (0..self.rqs.len()).find(|&c| self.idle(c)));
            if let Some(ilb) = ilb {
                self.newidle_balance(ilb);
            }
        }
    }
}

impl Sim {
    /// Cache-refill time owed by a vCPU that last ran on `from` and now runs
    /// on `to` (`Host.migration_cold_core_ns` / `migration_cold_llc_ns`): none
    /// on the same core (SMT siblings share L1 and L2), the core cost within
    /// the LLC, the LLC cost across LLCs.
    #[inline]
    pub(crate) fn migration_cold(&self, from: usize, to: usize) -> Ns {
        let h = &self.cfg.host;
        let off = h.migration_cold_core_ns == 0 && h.migration_cold_llc_ns == 0;
        if off || self.core_of(from) == self.core_of(to) {
            0 // the same CPU or an SMT sibling: L1/L2 are warm
        } else if self.share_llc(from, to) {
            h.migration_cold_core_ns
        } else {
            h.migration_cold_llc_ns
        }
    }

    /// Whether a CPU other than `cpu` of its core runs something.
    pub(crate) fn sibling_busy(&self, cpu: usize) -> bool {
        self.core_cpus(cpu).any(|c| c != cpu && self.rqs[c].curr.is_some())
    }

    /// `cpu` went from idle to busy or back: the vCPUs doing useful work on
    /// its siblings continue at their new speed (their work is re-planned).
    pub(crate) fn smt_sibling_changed(&mut self, cpu: usize) {
        let sibs: Vec<usize> = self.core_cpus(cpu).filter(|&c| c != cpu).collect();
        for c in sibs {
            self.speed_changed(c);
        }
    }
}

#[cfg(test)]
#[path = "balance_tests.rs"]
mod tests;

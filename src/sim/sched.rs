//! The host scheduler: an EEVDF-like fair scheduler per host CPU (weights,
//! vruntime, lag-preserving placement, eligibility, earliest eligible virtual
//! deadline, periodic tick, wake-up preemption, next buddy, yield_to), and gang
//! scheduling as an alternative.
//!
//! The pre-6.6 CFS rules (`scheduler = "cfs"`) are in `cfs.rs`, placement and
//! load balancing with a topology in `balance.rs`; the functions here call
//! them when those options are on.
//!
//! Simplifications (documented in docs/simulator.md): by default load
//! balancing is only wake-up placement and newidle pulls of unpinned tasks;
//! the per-VM task groups are overlays on the flat queues, for CFS
//! (`Cfs.vm_groups`, `cfs_group.rs`) and EEVDF (`Host.vm_groups`,
//! `eevdf_group.rs`); ticks are synchronous unless `Host.tick_skew`.

use super::config::{NextBuddy, PlaceLag, Scheduler, WakePlacement, YieldPenalty, YieldScope};
use super::engine::Sim;
use super::policy::ESRCH;
use super::queue::Ev;
use super::state::*;
use super::SimError;

impl Sim {
    #[inline]
    fn vslice(&self, t: usize) -> i64 {
        self.tasks[t].vslice
    }

    #[inline]
    pub fn nr_running(&self, cpu: usize) -> usize {
        self.rqs[cpu].queue.len() + self.rqs[cpu].curr.is_some() as usize
    }

    /// Weighted average vruntime of the run queue (V), including curr.
    /// O(1): the queue's weighted sums are kept up to date (as the kernel's
    /// `avg_vruntime` keeps `sum_w_vruntime`), and the result is computed
    /// relative to one entity exactly as a sum over the queue would give it.
    pub fn avg_vruntime(&self, cpu: usize) -> i64 {
        let rq = &self.rqs[cpu];
        // relative to one entity, so that i64 suffices
        let (v0, curr_w) = match (rq.curr, rq.queue.first()) {
            (Some(c), _) => (self.tasks[c as usize].vruntime, self.tasks[c as usize].weight as i64),
            (None, Some(&q)) => (self.tasks[q as usize].vruntime, 0),
            (None, None) => return rq.last_v,
        };
        let sw = rq.queue_w + curr_w;
        // s = Σ w·(vruntime − v0) over the queue (curr adds 0). The sums
        // are kept modulo 2^64, and s fits in i64: its low 64 bits, all that
        // wrapping arithmetic computes, are s itself.
        let s = rq.queue_wv.wrapping_sub(rq.queue_w.wrapping_mul(v0));
        debug_assert_eq!(
            s,
            rq.queue
                .iter()
                .map(|&t| self.tasks[t as usize].weight as i64 * (self.tasks[t as usize].vruntime - v0))
                .sum::<i64>()
        );
        if s == 0 {
            v0
        } else if sw.count_ones() == 1 {
            // floor division by a power of two (sw > 0) is an arithmetic shift
            v0 + (s >> sw.trailing_zeros())
        } else {
            v0 + s.div_euclid(sw)
        }
    }

    /// Put a runnable task (not curr) on `cpu`'s queue, adding it to the
    /// queue's weighted sums. A queued task's vruntime does not change.
    pub(crate) fn queue_add(&mut self, cpu: usize, t: usize) {
        let (w, v) = (self.tasks[t].weight as i64, self.tasks[t].vruntime);
        let rq = &mut self.rqs[cpu];
        rq.queue.push(t as u32);
        rq.queue_w += w;
        rq.queue_wv = rq.queue_wv.wrapping_add(w.wrapping_mul(v));
    }

    /// Take a task off `cpu`'s queue (if there), and out of its weighted sums.
    pub(crate) fn queue_remove(&mut self, cpu: usize, t: usize) {
        let (w, v) = (self.tasks[t].weight as i64, self.tasks[t].vruntime);
        let rq = &mut self.rqs[cpu];
        if let Some(i) = rq.queue.iter().position(|&x| x as usize == t) {
            rq.queue.swap_remove(i);
            rq.queue_w -= w;
            rq.queue_wv = rq.queue_wv.wrapping_sub(w.wrapping_mul(v));
        }
    }

    /// EEVDF eligibility: lag >= 0, i.e. vruntime <= V.
    pub fn eligible(&self, cpu: usize, t: usize) -> bool {
        self.tasks[t].vruntime <= self.avg_vruntime(cpu)
    }

    /// Charge curr's runtime since exec_start to its vruntime.
    pub fn update_curr(&mut self, cpu: usize) {
        let now = self.now;
        if let Some(t) = self.rqs[cpu].curr {
            let t = t as usize;
            let delta = now - self.rqs[cpu].exec_start;
            self.rqs[cpu].exec_start = now;
            let w = self.tasks[t].weight;
            self.tasks[t].vruntime += if w == NICE0 { delta as i64 } else { (delta * NICE0 / w) as i64 };
            if self.groups.on {
                self.cg_charge(t, delta);
            }
            if self.is_cfs() {
                self.cfs_update_min_vruntime(cpu);
            }
        }
    }

    /// Choose the host CPU of a waking task (unpinned: previous CPU if idle,
    /// else the first idle CPU after it, else the previous CPU).
    fn select_cpu(&self, t: usize) -> usize {
        let tk = &self.tasks[t];
        if let Some(c) = tk.pinned {
            return c as usize;
        }
        if self.cfg.host.wake_placement == WakePlacement::SelectTaskRqFair {
            return self.select_task_rq_fair(t);
        }
        let p = self.rqs.len();
        let prev = tk.cpu as usize;
        for i in 0..p {
            let c = (prev + i) % p;
            if self.nr_running(c) == 0 {
                return c;
            }
        }
        prev
    }

    /// Make a sleeping task runnable (wake-up): place it by its lag and maybe preempt.
    pub fn enqueue(&mut self, t: usize) {
        debug_assert!(!self.tasks[t].runnable);
        let now = self.now;
        self.tasks[t].runnable = true;
        self.tasks[t].wait_since = now;
        if self.cfg.host.scheduler == Scheduler::Gang {
            if let TaskKind::Vcpu(v) = self.tasks[t].kind {
                let vm = self.vcpus[v as usize].vm as usize;
                if !self.gang.active[vm] {
                    self.tasks[t].parked = true;
                    return;
                }
                self.tasks[t].cpu = self.gang.cpu[v as usize];
            }
        } else {
            if self.tokens_on() && matches!(self.tasks[t].kind, TaskKind::Vcpu(_)) {
                if self.token_wakes_unheld(t) {
                    // vcpulab's scheduler, `Host.token_wake_exit_ns`: it runs its
                    // wake path without a token on the CPU it last held one on (its
                    // thread stays pinned there), then asks (`token_ask`)
                    self.tokens.unheld[t] = true;
                    if self.tasks[t].delayed {
                        self.delayed_wake(t);
                    }
                    let c = self.tasks[t].cpu as usize;
                    if self.is_cfs() {
                        self.update_curr(c);
                        self.cfs_place(c, t, c, true);
                    }
                    self.rq_add(t, true);
                    return;
                }
                // vcpulab's scheduler: it waits for a run token (src/sim/tokens.rs)
                self.token_wait(t);
                return;
            }
            if self.tasks[t].delayed {
                // still sched_delayed: ttwu_runnable dequeues it (DEQUEUE_DELAYED)
                // and it goes down the regular wake-up path
                self.delayed_wake(t);
            }
            if self.tasks[t].pinned.is_none() && !self.wake.enqueue_new {
                self.record_wakee(t);
            }
            // a new thread keeps its start CPU (fork placement, see `Sim::enqueue_new`)
            let c = if self.wake.enqueue_new { self.tasks[t].cpu as usize } else { self.select_cpu(t) };
            let from = self.tasks[t].cpu as usize;
            self.tasks[t].cpu = c as u32;
            if self.is_cfs() {
                self.update_curr(c);
                self.cfs_place(c, t, from, true);
            }
        }
        self.rq_add(t, true);
    }

    /// Put a runnable task on its CPU's queue (lag placement), and trigger
    /// wake-up preemption if asked.
    pub(crate) fn rq_add(&mut self, t: usize, wakeup: bool) {
        let cpu = self.tasks[t].cpu as usize;
        self.update_curr(cpu);
        let cfs = self.is_cfs();
        if !cfs && self.groups.on {
            // place_entity level by level (`Host.vm_groups`, eevdf_group.rs)
            self.eg_enqueue(t, self.wake.enqueue_initial);
        } else if !cfs {
            let v = self.avg_vruntime(cpu);
            // place_entity: a new task (ENQUEUE_INITIAL, PLACE_DEADLINE_INITIAL)
            // gets half a slice to its deadline, "so that it can get on quickly"
            let vs = if self.wake.enqueue_initial { self.vslice(t) / 2 } else { self.vslice(t) };
            let load =
                || self.rqs[cpu].queue_w + self.curr_runnable(cpu).map_or(0, |c| self.tasks[c as usize].weight as i64);
            let lag = self.placed_lag(self.tasks[t].vlag, load, self.tasks[t].weight as i64);
            let tk = &mut self.tasks[t];
            tk.vruntime = v - lag;
            tk.place_deadline(vs);
        } else {
            // enqueue_entity up the hierarchy (`Cfs.vm_groups`; no-op without)
            self.cg_enqueue(t);
        }
        self.queue_add(cpu, t);
        // a woken vCPU reaches its CPU after the IPI / idle-exit latency
        let delayed = self.wake_latency && wakeup && matches!(self.tasks[t].kind, TaskKind::Vcpu(_));
        match self.rqs[cpu].curr {
            None => {
                let at = if delayed { self.now + self.wake_delay(cpu, true) } else { self.now };
                self.push(at, Ev::Resched(cpu as u32, Why::Idle))
            }
            Some(c) => {
                if let TaskKind::Vcpu(pv) = self.tasks[c as usize].kind {
                    if matches!(self.vcpus[pv as usize].act, Act::HaltPoll { .. }) {
                        // single_task_running() turns false: the poll loop stops
                        self.push(self.now, Ev::Poke(pv));
                    }
                }
                if wakeup && !cfs && self.cfg.host.slice_check_on_wakeup && self.groups.on {
                    // update_curr → update_deadline on the levels t joins
                    if self.eg_deadlines(cpu, c as usize, false, Some(t)) {
                        self.push(self.now, Ev::Resched(cpu as u32, Why::Tick));
                        return;
                    }
                } else if wakeup && !cfs && self.cfg.host.slice_check_on_wakeup {
                    // update_curr → update_deadline: curr's slice is over
                    let c = c as usize;
                    if self.tasks[c].vruntime >= self.tasks[c].deadline {
                        let vs = self.vslice(c);
                        self.tasks[c].deadline = self.tasks[c].vruntime + vs;
                        if self.nr_running(cpu) > 1 {
                            self.push(self.now, Ev::Resched(cpu as u32, Why::Tick));
                            return;
                        }
                    }
                }
                if wakeup && self.cfg.host.wakeup_preemption {
                    let c = c as usize;
                    let preempt = if cfs {
                        self.cfs_check_preempt_wakeup(cpu, t, c)
                    } else if self.groups.on {
                        self.eg_check_preempt_wakeup(cpu, t, c)
                    } else if self.cfg.host.run_to_parity {
                        // check_preempt_wakeup_fair: preempt when the woken
                        // task is what pick_eevdf (with slice protection) takes
                        let v = self.avg_vruntime(cpu);
                        self.pick_eevdf(cpu, self.curr_runnable(cpu), v, true) == t
                    } else {
                        self.eligible(cpu, t) && self.tasks[t].deadline < self.tasks[c].deadline
                    };
                    if preempt {
                        let at = if delayed { self.now + self.wake_delay(cpu, false) } else { self.now };
                        self.push(at, Ev::Resched(cpu as u32, Why::Wakeup));
                    }
                }
            }
        }
    }

    /// Remove a runnable, not-running task from its queue (gang parking).
    pub(crate) fn rq_remove_queued(&mut self, t: usize) {
        let cpu = self.tasks[t].cpu as usize;
        self.update_curr(cpu);
        if self.is_cfs() {
            // dequeue_entity: clear_buddies, then update_min_vruntime
            self.queue_remove(cpu, t);
            self.cfs_clear_buddies(cpu, t as u32);
            self.cg_dequeue(t, false);
            self.cfs_update_min_vruntime(cpu);
            return;
        }
        if self.groups.on {
            self.eg_dequeue(t, false);
            self.queue_remove(cpu, t);
            return;
        }
        let v = self.avg_vruntime(cpu);
        self.save_lag(t, v);
        self.queue_remove(cpu, t);
        if self.rel_deadline_on() {
            self.tasks[t].keep_rel_deadline();
        }
        if self.rqs[cpu].buddy == Some(t as u32) {
            self.rqs[cpu].buddy = None;
        }
    }

    /// `Host.place_rel_deadline` acts: the EEVDF class of the host's own
    /// scheduler.
    pub(crate) fn rel_deadline_on(&self) -> bool {
        self.cfg.host.place_rel_deadline && self.cfg.host.scheduler == Scheduler::Fair
    }

    /// The lag `place_entity` places an entity of weight `w` with, its saved
    /// lag `vlag`, on a queue whose entities in V weigh `load`
    /// (`Host.place_lag`): as saved, or scaled by (load + w) / load (rounded
    /// toward zero, `div_s64`) and 0 on a queue with none. Gang and
    /// vcpulab's token schedulers keep the saved lag.
    /// `load` is asked for only where the kernel's rule applies.
    pub(crate) fn placed_lag(&self, vlag: i64, load: impl FnOnce() -> i64, w: i64) -> i64 {
        if self.cfg.host.scheduler != Scheduler::Fair || self.cfg.host.place_lag == PlaceLag::Saved {
            return vlag;
        }
        match load() {
            l if l <= 0 => 0,
            l => (vlag as i128 * (l + w) as i128 / l as i128) as i64,
        }
    }

    /// `Host.delay_dequeue` acts: the EEVDF class of the host's own
    /// scheduler (not CFS, gang or vcpulab's token scheduler).
    pub(crate) fn delay_dequeue_on(&self) -> bool {
        self.cfg.host.delay_dequeue && self.cfg.host.scheduler == Scheduler::Fair
    }

    /// The wake-up of delayed task `t` (DELAY_DEQUEUE, DELAY_ZERO): its lag
    /// has grown by what its CPU's V advanced since it blocked, up to 0.
    /// Still negative: the wake-up dequeues it with what is left
    /// (`update_entity_lag` at DEQUEUE_DELAYED; since "sched: Change
    /// ttwu_runnable() vs sched_delayed", v6.17, it then takes the regular
    /// wake-up path with its placement; v6.12-v6.16 requeued it in place).
    /// Reached 0: it was dequeued at a pick with its lag clipped to 0.
    /// Simplified: it counts as dequeued the instant V passes its vruntime
    /// (the kernel: at the next pick that would choose it), and its weight
    /// is left out of V while delayed.
    fn delayed_wake(&mut self, t: usize) {
        if self.groups.on {
            self.eg_delayed_wake(t);
            return;
        }
        let cpu = self.tasks[t].cpu as usize;
        let v = self.avg_vruntime(cpu);
        let tk = &mut self.tasks[t];
        tk.delayed = false;
        tk.vlag = tk.vlag.saturating_add(v - tk.delayed_v).min(0);
    }

    pub(crate) fn save_lag(&mut self, t: usize, v: i64) {
        let cpu = self.tasks[t].cpu as usize;
        self.rqs[cpu].last_v = v;
        let limit = (2 * self.vslice(t)).max(self.cfg.host.tick_ns as i64);
        let tk = &mut self.tasks[t];
        tk.vlag = (v - tk.vruntime).clamp(-limit, limit);
    }

    /// The current task of its CPU stops being runnable (blocks). The caller
    /// then calls `schedule`.
    pub fn dequeue_sleep(&mut self, t: usize) {
        let cpu = self.tasks[t].cpu as usize;
        debug_assert_eq!(self.rqs[cpu].curr, Some(t as u32));
        self.update_curr(cpu);
        if self.is_cfs() {
            // dequeue_entity(DEQUEUE_SLEEP): vruntime kept, buddies cleared
            self.tasks[t].runnable = false;
            self.cfs_clear_buddies(cpu, t as u32);
            self.cg_dequeue(t, true);
            self.cfs_update_min_vruntime(cpu);
            return;
        }
        if self.groups.on {
            // level by level, delays included (`Host.vm_groups`)
            self.eg_dequeue(t, true);
            self.tasks[t].runnable = false;
            return;
        }
        let v = self.avg_vruntime(cpu);
        self.save_lag(t, v);
        self.tasks[t].runnable = false;
        if self.delay_dequeue_on() && self.tasks[t].vlag < 0 {
            // DELAY_DEQUEUE: not eligible, it stays queued (sched_delayed)
            // and burns off its negative lag as V advances
            self.tasks[t].delayed = true;
            self.tasks[t].delayed_v = v;
        }
        if self.rqs[cpu].buddy == Some(t as u32) {
            self.rqs[cpu].buddy = None;
        }
        if self.tokens_on() {
            // vcpulab's scheduler: a blocking holder's token goes on
            self.token_release(t);
        }
    }

    /// curr, if it still competes for its CPU (runnable, not parked).
    fn curr_runnable(&self, cpu: usize) -> Option<u32> {
        self.rqs[cpu].curr.filter(|&c| self.tasks[c as usize].runnable && !self.tasks[c as usize].parked)
    }

    /// EEVDF pick with the next-buddy rule.
    fn pick(&mut self, cpu: usize) -> Option<usize> {
        if self.is_cfs() {
            return self.cfs_pick(cpu);
        }
        if self.groups.on {
            return self.eg_pick(cpu);
        }
        let rq = &self.rqs[cpu];
        let curr_ok = self.curr_runnable(cpu);
        if rq.queue.is_empty() {
            if curr_ok.is_some() && rq.buddy == curr_ok {
                self.rqs[cpu].buddy = None;
            }
            return curr_ok.map(|c| c as usize);
        }
        let v = self.avg_vruntime(cpu);
        let rq = &self.rqs[cpu];
        if let Some(b) = rq.buddy {
            if curr_ok == Some(b) || rq.queue.contains(&b) {
                let take = match self.cfg.host.next_buddy {
                    NextBuddy::Always => true,
                    NextBuddy::Eligible => self.tasks[b as usize].vruntime <= v,
                    NextBuddy::Never => false,
                };
                if take {
                    self.rqs[cpu].buddy = None;
                    return Some(b as usize);
                }
            }
        }
        let best = self.pick_eevdf(cpu, curr_ok, v, self.cfg.host.run_to_parity);
        if Some(best as u32) == self.rqs[cpu].buddy {
            self.rqs[cpu].buddy = None;
        }
        Some(best)
    }

    /// `pick_eevdf` over a non-empty queue and `curr_ok` (curr if it
    /// competes), V = `v`: with `protect` (`Host.run_to_parity`), curr while
    /// it is eligible and inside its protected slice (`protect_slice`:
    /// vruntime < vprot); else the eligible task with the earliest
    /// (deadline, tie, index), else the task with the least (vruntime, tie,
    /// index). The tie rank is the index unless `Host.seeded_ties`. The
    /// least vruntime is at most V when V averages the candidates, so the
    /// second pass is needed only when curr counts in V but is not a
    /// candidate (it is blocking or parked).
    fn pick_eevdf(&self, cpu: usize, curr_ok: Option<u32>, v: i64, protect: bool) -> usize {
        let rq = &self.rqs[cpu];
        if let Some(c) = curr_ok.filter(|_| protect) {
            let tk = &self.tasks[c as usize];
            if tk.vruntime <= v && tk.vruntime < rq.vprot {
                return c as usize;
            }
        }
        // NONE is "none yet"
        const NONE: (i64, u32, usize) = (i64::MAX, u32::MAX, usize::MAX);
        let mut best = NONE;
        for &t in rq.queue.iter().chain(curr_ok.as_ref()) {
            let tk = &self.tasks[t as usize];
            if tk.vruntime <= v && (tk.deadline, tk.tie, t as usize) < best {
                best = (tk.deadline, tk.tie, t as usize);
            }
        }
        if best == NONE {
            for &t in rq.queue.iter().chain(curr_ok.as_ref()) {
                let key = (self.tasks[t as usize].vruntime, self.tasks[t as usize].tie, t as usize);
                if key < best {
                    best = key;
                }
            }
        }
        debug_assert!(best != NONE, "pick_eevdf needs a candidate");
        best.2
    }

    /// newidle balance: a CPU about to go idle pulls the longest-waiting
    /// unpinned task from the first CPU (in order after it) that has one
    /// waiting. Only unpinned tasks move (Host.affinity = "all").
    fn newidle_pull(&mut self, cpu: usize) {
        if self.cfg.host.load_balance {
            self.newidle_balance(cpu);
            return;
        }
        let p = self.rqs.len();
        for i in 1..p {
            let c = (cpu + i) % p;
            let best = self.rqs[c]
                .queue
                .iter()
                .map(|&t| t as usize)
                .filter(|&t| self.tasks[t].pinned.is_none() && !self.tasks[t].parked)
                .min_by_key(|&t| (self.tasks[t].wait_since, t));
            if let Some(t) = best {
                self.rq_remove_queued(t);
                self.tasks[t].cpu = cpu as u32;
                if self.is_cfs() {
                    self.cfs_place(cpu, t, c, false);
                }
                self.rq_add(t, false);
                return;
            }
        }
    }

    /// Pick the next task on `cpu` and switch to it if it differs from curr.
    pub fn schedule(&mut self, cpu: usize, why: Why) {
        self.update_curr(cpu);
        self.rqs[cpu].need_resched = false;
        if self.any_unpinned && self.rqs[cpu].queue.is_empty() {
            let stays =
                self.rqs[cpu].curr.is_some_and(|c| self.tasks[c as usize].runnable && !self.tasks[c as usize].parked);
            if !stays {
                self.newidle_pull(cpu);
            }
        }
        let prev = self.rqs[cpu].curr.map(|x| x as usize);
        let next = self.pick(cpu);
        if next == prev {
            return;
        }
        let now = self.now;
        if let Some(p) = prev {
            self.trace_close(cpu, p as u32, why);
            self.rqs[cpu].curr = None;
            if self.tasks[p].runnable && !self.tasks[p].parked {
                self.queue_add(cpu, p);
                self.tasks[p].wait_since = now;
            }
            if self.tasks[p].runnable && self.tasks[p].parked {
                self.tasks[p].wait_since = now;
            }
            self.tasks[p].last_ran = now;
            self.task_sched_out(p, why);
        }
        self.rqs[cpu].switches += 1;
        self.rqs[cpu].trace_start = now;
        let idle_changed = prev.is_none() != next.is_none();
        match next {
            None => {
                self.rqs[cpu].acct.set(now, C_IDLE);
                self.rqs[cpu].idle_since = now;
            }
            Some(n) => {
                self.queue_remove(cpu, n);
                self.rqs[cpu].curr = Some(n as u32);
                self.rqs[cpu].exec_start = now;
                self.rqs[cpu].slice_start = now;
                // set_protect_slice: every task has the base slice, so vprot = deadline
                // (with EEVDF groups, at each level whose curr changes)
                if self.groups.on && !self.is_cfs() {
                    self.eg_set_next(cpu, prev, n);
                } else {
                    self.rqs[cpu].vprot = self.tasks[n].deadline;
                }
                if self.groups.on {
                    self.cg_set_next(cpu, prev, n);
                }
                let tk = &mut self.tasks[n];
                tk.run_delay += now - tk.wait_since;
                if !self.rqs[cpu].tick_armed {
                    self.rqs[cpu].tick_armed = true;
                    let (tn, off) = (self.cfg.host.tick_ns, self.rqs[cpu].tick_off);
                    // the next instant of this CPU's tick grid {k·tick + off} after now
                    let at = if now < off { off } else { off + ((now - off) / tn + 1) * tn };
                    self.push(at, Ev::Tick(cpu as u32));
                }
                self.task_sched_in(n, cpu);
            }
        }
        if idle_changed && self.topo.smt_slow {
            self.smt_sibling_changed(cpu);
        }
    }

    fn task_sched_out(&mut self, t: usize, why: Why) {
        match self.tasks[t].kind {
            TaskKind::Bg(_) | TaskKind::Noise(_) => {
                let now = self.now;
                let tk = &mut self.tasks[t];
                tk.bg_rem = tk.bg_rem.saturating_sub(now - tk.bg_start);
                tk.bg_gen += 1;
            }
            TaskKind::Vcpu(v) => self.vcpu_sched_out(v as usize, why),
        }
    }

    fn task_sched_in(&mut self, t: usize, cpu: usize) {
        match self.tasks[t].kind {
            TaskKind::Bg(_) | TaskKind::Noise(_) => {
                let now = self.now;
                self.rqs[cpu].acct.set(now, C_BG);
                let tk = &mut self.tasks[t];
                tk.bg_start = now;
                tk.bg_gen += 1;
                let (rem, gen) = (tk.bg_rem.max(1), tk.bg_gen);
                self.push(now + rem, Ev::BgEnd(t as u32, gen));
            }
            TaskKind::Vcpu(v) => self.vcpu_sched_in(v as usize, cpu),
        }
    }

    /// resched_curr(): switch now, unless curr is a vCPU inside an exit
    /// handler, in which case need_resched is noticed when the handler ends.
    pub fn resched(&mut self, cpu: usize, why: Why) {
        debug_assert_eq!(
            self.rqs[cpu].curr_in_exit,
            self.rqs[cpu].curr.is_some_and(|c| match self.tasks[c as usize].kind {
                TaskKind::Vcpu(v) => matches!(self.vcpus[v as usize].act, Act::Exit { .. }),
                TaskKind::Bg(_) | TaskKind::Noise(_) => false,
            })
        );
        if self.rqs[cpu].curr_in_exit {
            self.rqs[cpu].need_resched = true;
            return;
        }
        self.schedule(cpu, why);
    }

    pub fn resched_event(&mut self, cpu: usize, why: Why) {
        if why == Why::Idle {
            if self.rqs[cpu].curr.is_none() {
                self.schedule(cpu, Why::Idle);
            }
        } else {
            self.resched(cpu, why);
        }
    }

    /// The periodic scheduler tick (an external interrupt).
    pub fn tick(&mut self, cpu: usize) {
        let Some(c) = self.rqs[cpu].curr else {
            self.rqs[cpu].tick_armed = false;
            return;
        };
        let c = c as usize;
        self.update_curr(cpu);
        let tn = self.cfg.host.tick_ns;
        self.push(self.now + tn, Ev::Tick(cpu as u32));
        if self.cfg.host.load_balance && self.any_unpinned {
            self.balance_tick(cpu);
        }
        if self.is_cfs() {
            self.cfs_tick(cpu, c);
            return;
        }
        if self.groups.on {
            // entity_tick at each level (`Host.vm_groups`)
            if self.eg_deadlines(cpu, c, true, None) {
                self.resched(cpu, Why::Tick);
            }
            return;
        }
        if self.tasks[c].vruntime >= self.tasks[c].deadline {
            let vs = self.vslice(c);
            self.tasks[c].deadline = self.tasks[c].vruntime + vs;
            if self.nr_running(cpu) > 1 {
                self.resched(cpu, Why::Tick);
            }
        }
    }

    /// The scheduler part of `yield_to()` (kernel/sched/core.c) from the vCPU
    /// `me` (current on its CPU) to vCPU `target`, at handler time `*t`
    /// (advanced by the cost). Returns ESRCH, 0 or 1. On success the next
    /// buddy is set on the target's run queue, the yielder is penalised, and
    /// the target's CPU is asked to reschedule at `*t`; the caller makes the
    /// yielder call schedule() when its handler ends.
    pub fn yield_to(&mut self, me: usize, target: usize, t: &mut Ns) -> i32 {
        if self.tokens_on() {
            return self.token_yield_to(me, target, t);
        }
        let h = &self.cfg.host;
        let (check, lock) = (h.yield_check_ns, h.rq_lock_ns);
        self.vcpus[me].c.yield_attempts += 1;
        *t += check;
        let me_task = self.vcpus[me].task as usize;
        let tg_task = self.vcpus[target].task as usize;
        let a = self.tasks[me_task].cpu as usize;
        let b = self.tasks[tg_task].cpu as usize;
        if self.cfg.host.yield_to_esrch && self.nr_running(a) == 1 && self.nr_running(b) == 1 {
            self.vcpus[me].c.yield_esrch += 1;
            return ESRCH;
        }
        // double_rq_lock: wait for both run-queue locks, hold them.
        let start = self.double_rq_lock(a, b, *t, lock);
        *t = start + lock;
        let tk = &self.tasks[tg_task];
        let running = self.rqs[b].curr == Some(tg_task as u32);
        if running || !tk.runnable || tk.parked {
            self.vcpus[me].c.yield_zero += 1;
            return 0;
        }
        // yield_to_task_fair: set_next_buddy(p); yield_task_fair(curr).
        debug_assert_eq!(self.rqs[a].curr, Some(me_task as u32), "the yielder is curr, not queued");
        self.rqs[b].buddy = Some(tg_task as u32);
        if self.is_cfs() {
            // yield_task_fair (CFS): nothing with one task; else clear the
            // yielder's buddies, update_curr, and make it the skip buddy.
            if self.groups.on {
                // set_next_buddy and set_skip_buddy mark every level (cfs_group.rs)
                self.cg_set_next_buddy(tg_task);
                if self.nr_running(a) > 1 {
                    self.update_curr(a);
                    self.cg_yield_task(me_task);
                }
            } else if self.nr_running(a) > 1 {
                self.cfs_clear_buddies(a, me_task as u32);
                self.update_curr(a);
                self.rqs[a].skip = Some(me_task as u32);
            }
            self.wake.boost_task = if a != b { tg_task as u32 } else { NO_TASK };
            self.vcpus[me].c.yield_ok += 1;
            return 1;
        }
        self.update_curr(a);
        if self.groups.on {
            // set_next_buddy at every level; yield_task_fair on the
            // yielder's own group queue, unless the CPU runs it alone
            self.cg_set_next_buddy(tg_task);
            if self.nr_running(a) > 1 {
                self.eg_yield_task(me_task);
            }
        } else if self.cfg.host.yield_scope == YieldScope::RunQueue || self.yield_stays_in_vm_group(a, me_task) {
            let vs = self.vslice(me_task);
            let elig = self.eligible(a, me_task);
            let tk = &mut self.tasks[me_task];
            if self.cfg.host.yield_penalty == YieldPenalty::Vruntime && elig {
                tk.vruntime = tk.vruntime.max(tk.deadline);
            }
            tk.deadline += vs;
            // the new deadline ends its protected slice (vlag != deadline, v6.6-v6.15)
            self.rqs[a].vprot = i64::MIN;
        }
        // resched_curr(rq(p)) happens when the handler ends (at *t: the caller stops there)
        self.wake.boost_task = if a != b { tg_task as u32 } else { NO_TASK };
        self.vcpus[me].c.yield_ok += 1;
        1
    }

    /// `Host.yield_scope = "vm_group"`: whether yield_task_fair's penalty
    /// on `me` (curr of `cpu`) reorders it only among its own VM's threads,
    /// so that the flat queue may carry it: false when `me` runs alone
    /// (yield_task_fair returns at rq->nr_running == 1) or when another
    /// runnable task of the CPU is not a vCPU of the same VM (the penalty
    /// stays in the VM's group queue and does not reach where they compete).
    fn yield_stays_in_vm_group(&self, cpu: usize, me: usize) -> bool {
        let vm_of = |t: u32| match self.tasks[t as usize].kind {
            TaskKind::Vcpu(v) => Some(self.vcpus[v as usize].vm),
            _ => None,
        };
        let mine = vm_of(me as u32);
        let q = &self.rqs[cpu].queue;
        !q.is_empty() && q.iter().all(|&t| vm_of(t) == mine)
    }

    /// Reserve both run-queue locks for `hold` ns at the earliest instant at
    /// or after `t` when both are free (first come, first served by request
    /// time, with back-filling of gaps left by reservations made earlier for
    /// later instants). Returns the start of the hold.
    fn double_rq_lock(&mut self, a: usize, b: usize, t: Ns, hold: Ns) -> Ns {
        let now = self.now;
        for c in [a, b] {
            // Every hold lasts `hold` (rq_lock_ns), so the list, sorted by
            // start, is sorted by end too: the expired holds are a prefix,
            // all of it when the latest end is past.
            let rq = &mut self.rqs[c];
            let v = &mut rq.lock_busy;
            debug_assert!(v.windows(2).all(|w| w[0].1 <= w[1].1));
            debug_assert!(v.iter().all(|&(bs, be)| be - bs == hold && be <= rq.lock_until));
            if rq.lock_until <= now {
                v.clear();
            } else {
                let k = v.partition_point(|&(_, e)| e <= now);
                if k > 0 {
                    v.drain(..k);
                }
            }
        }
        let mut s = t;
        loop {
            let mut moved = false;
            for c in [a, b] {
                // no hold of this list ends after s: none overlaps [s, s + hold)
                if self.rqs[c].lock_until <= s {
                    continue;
                }
                for &(bs, be) in &self.rqs[c].lock_busy {
                    if bs < s + hold && be > s {
                        s = be;
                        moved = true;
                    }
                }
            }
            if !moved {
                break;
            }
        }
        for c in [a, b] {
            let rq = &mut self.rqs[c];
            // the last hold starts at lock_until - hold: at or before s, the
            // new one goes last (the usual case) without a search
            if rq.lock_until <= s + hold {
                rq.lock_busy.push((s, s + hold));
            } else {
                let i = rq.lock_busy.partition_point(|&(bs, _)| bs <= s);
                rq.lock_busy.insert(i, (s, s + hold));
            }
            rq.lock_until = rq.lock_until.max(s + hold);
            if a == b {
                break;
            }
        }
        s
    }

    // ---- gang scheduling ----

    /// Pack VMs into rounds of at most P vCPUs (first fit, in VM order).
    pub fn setup_gang(&mut self) {
        let p = self.cfg.host.n_pcpus;
        let mut rounds: Vec<Vec<u32>> = Vec::new();
        let mut used: Vec<u32> = Vec::new();
        self.gang.cpu = vec![0; self.vcpus.len()];
        for vm in 0..self.vms.len() {
            let n = self.vms[vm].nvcpu.min(p);
            let r = match used.iter().position(|&u| u + n <= p) {
                Some(r) => r,
                None => {
                    rounds.push(Vec::new());
                    used.push(0);
                    rounds.len() - 1
                }
            };
            let base = used[r];
            rounds[r].push(vm as u32);
            used[r] += n;
            let v0 = self.vms[vm].vcpu0 as usize;
            for i in 0..self.vms[vm].nvcpu as usize {
                // VMs larger than the host wrap (their vCPUs then share CPUs).
                let cpu = (base + (i as u32 % p)) % p;
                self.gang.cpu[v0 + i] = cpu;
                self.tasks[self.vcpus[v0 + i].task as usize].cpu = cpu;
            }
        }
        self.gang.rounds = rounds;
        self.gang.round = usize::MAX;
        self.gang.active = vec![false; self.vms.len()];
    }

    /// Start the next gang round: park the vCPUs of the previous round, bring in the next.
    pub fn gang_switch(&mut self) {
        let nr = self.gang.rounds.len();
        let next = if self.gang.round == usize::MAX { 0 } else { (self.gang.round + 1) % nr };
        if nr > 1 || self.gang.round == usize::MAX {
            if self.gang.round != usize::MAX {
                let old = self.gang.rounds[self.gang.round].clone();
                for vm in old {
                    self.gang.active[vm as usize] = false;
                    let (v0, n) = (self.vms[vm as usize].vcpu0 as usize, self.vms[vm as usize].nvcpu as usize);
                    for v in v0..v0 + n {
                        let t = self.vcpus[v].task as usize;
                        if !self.tasks[t].runnable {
                            continue;
                        }
                        let cpu = self.tasks[t].cpu as usize;
                        self.tasks[t].parked = true;
                        if self.rqs[cpu].curr == Some(t as u32) {
                            self.update_curr(cpu);
                            let v = self.avg_vruntime(cpu);
                            self.save_lag(t, v);
                            // a vCPU in an exit handler leaves when the handler ends
                            self.resched(cpu, Why::Gang);
                        } else {
                            self.rq_remove_queued(t);
                            self.tasks[t].wait_since = self.tasks[t].wait_since.min(self.now);
                        }
                    }
                }
            }
            self.gang.round = next;
            let new = self.gang.rounds[next].clone();
            for vm in new {
                self.gang.active[vm as usize] = true;
                let (v0, n) = (self.vms[vm as usize].vcpu0 as usize, self.vms[vm as usize].nvcpu as usize);
                for v in v0..v0 + n {
                    let t = self.vcpus[v].task as usize;
                    self.tasks[t].cpu = self.gang.cpu[v];
                    if self.tasks[t].runnable && self.tasks[t].parked {
                        self.tasks[t].parked = false;
                        self.rq_add(t, false);
                        let cpu = self.tasks[t].cpu as usize;
                        if self.rqs[cpu].curr.is_some() {
                            self.push(self.now, Ev::Resched(cpu as u32, Why::Gang));
                        }
                    }
                }
            }
        }
        let gs = self.cfg.host.gang_slice_ns;
        self.push(self.now + gs, Ev::Gang);
    }

    // ---- trace ----

    /// Record the interval `t` ran on `cpu` (with `Config.trace`).
    #[inline]
    pub fn trace_close(&mut self, cpu: usize, t: u32, why: Why) {
        if self.cfg.trace {
            self.trace_record(cpu, t, why);
        }
    }

    fn trace_record(&mut self, cpu: usize, t: u32, why: Why) {
        let start = self.rqs[cpu].trace_start;
        // `Config.trace_from_ns` / `trace_until_ns`: only the slices that overlap the window
        let until = self.cfg.trace_until_ns;
        if self.now <= self.cfg.trace_from_ns || (until != 0 && start >= until) {
            return;
        }
        let (vm, vcpu) = match self.tasks[t as usize].kind {
            TaskKind::Vcpu(v) => (self.vcpus[v as usize].vm as i32, self.vcpus[v as usize].idx as i32),
            TaskKind::Bg(_) | TaskKind::Noise(_) => (-1, -1),
        };
        if self.trace_error.is_some() {
            return;
        }
        if self.trace.len() as u64 >= self.trace_max_rows {
            let end = if until == 0 { self.cfg.duration_ns } else { until.min(self.cfg.duration_ns) };
            self.trace_error = Some(super::trace::limit_error(
                self.trace_max_rows,
                self.trace.len(),
                self.now,
                self.cfg.trace_from_ns,
                end,
            ));
            return;
        }
        if self.trace.is_full() && self.trace.try_reserve(self.trace.len().max(1024)).is_err() {
            self.trace_error = Some(SimError::OutOfMemory(format!(
                "no memory to grow the trace beyond {} rows (t={} ns); set a smaller trace_max_rows, shorten \
                 duration_ns or run without trace",
                self.trace.len(),
                self.now
            )));
            return;
        }
        self.trace.push(start, self.now, cpu as u32, vm, vcpu, why);
    }
}

#[cfg(test)]
#[path = "sched_tests.rs"]
mod tests;

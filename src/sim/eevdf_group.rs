//! EEVDF task groups (`Host.vm_groups`): each VM's vCPU threads in their
//! own task group, one level below the CPU's root run queue, as libvirt runs
//! a VM in its own cgroup ("Control Groups Resource Management", libvirt
//! project, <https://libvirt.org/cgroups.html>) and as
//! `CONFIG_FAIR_GROUP_SCHED` schedules it under EEVDF (kernel/sched/fair.c,
//! v6.6+: 147f3efaa241 "sched/fair: Implement an EEVDF-like scheduling
//! policy").
//!
//! The groups are the ones CFS uses (`TaskGroups`, src/sim/cfs_group.rs:
//! group `g` is VM `g / n_pcpus` on CPU `g % n_pcpus`; its entity sits on
//! the root beside the tasks outside every VM, and its run queue holds the
//! VM's vCPU threads on that CPU). Every EEVDF rule acts on each level with
//! that level's own V (`avg_vruntime`), as fair.c's `for_each_sched_entity`
//! loops do:
//! - `update_curr` charges the running time to the task and to its group
//!   entity, each by its own weight (`calc_delta_fair`);
//! - a group entity's weight is `calc_group_shares` (as CFS's, from this
//!   CPU's share of the VM's load), updated at enqueue, dequeue and the tick
//!   (`update_cfs_group`); a queued group entity keeps its lag across the
//!   change (`reweight_entity`: v' = V - (V - v)·w/w', the deadline's
//!   distance scaled alike, eab03c23c2a1 "sched/eevdf: Fix vruntime
//!   adjustment on reweight", v6.7), so V does not move;
//! - a task joins its group's queue placed by its lag against the group's V;
//!   a group entity joins the root when its first task does, placed by its
//!   own lag against the root's V (`place_entity`), and leaves when its last
//!   one does, its lag saved (`update_entity_lag`);
//! - `pick_next_entity` picks at the root, then inside the picked group,
//!   each level with its own next buddy (PICK_BUDDY / NEXT_BUDDY, per
//!   `Host.next_buddy`) and its own slice protection (RUN_TO_PARITY: the
//!   group entity's `vprot` is set when it is picked after a different root
//!   entity, as `pick_next_task_fair` calls `set_next_entity` only below
//!   the common ancestor);
//! - the tick runs `update_deadline` at each level: a used-up request gets a
//!   new deadline and a reschedule where the level has more than one entity;
//! - `check_preempt_wakeup_fair` compares the woken and current tasks at
//!   their first common level (`find_matching_se`);
//! - `yield_to_task_fair` sets the next buddy at every level
//!   (`set_next_buddy`) and `yield_task_fair` penalises the yielder on its
//!   own group's queue only (`task_cfs_rq(curr)`), returning early when the
//!   CPU runs one task;
//! - DELAY_DEQUEUE (`Host.delay_dequeue`) acts at both levels: a task, and a
//!   group entity whose group empties, leaving with negative lag burns it
//!   off against its level's V.
//!
//! Simplifications (docs/simulator.md, "EEVDF group scheduling"):
//! - one level, the VM's group (libvirt's per-vCPU and `emulator` groups
//!   under it hold one thread each: they change weights, not order);
//! - the group load `calc_group_shares` uses is PELT's average as a
//!   continuous exponential (`Host.group_load_half_life_ns`,
//!   `group_track` and `group_load_update` in cfs_group.rs; 0: the runnable
//!   tasks' weight now); an empty group keeps its last weight until its
//!   next task joins;
//! - as in the flat queue, a delayed task's weight is left out of its
//!   level's V and it counts as dequeued the instant V passes its
//!   vruntime; when its group empties, its lag is clipped to 0 at once (the
//!   kernel keeps the group entity queued until its next pick, where the
//!   delayed task, alone in its group and so eligible, is dequeued with lag
//!   0), and the group entity leaves the root;
//! - placement by lag follows `Host.place_lag` at each level (`"kernel"`:
//!   `place_entity`'s (load + w) / load scaling, the lag dropped on a level
//!   with no entity), PLACE_REL_DEADLINE (`Host.place_rel_deadline`) the
//!   task's own level, as the flat queue.

use super::cfs_group::{Lvl, GROUP_ENT};
use super::config::{NextBuddy, YieldPenalty};
use super::engine::Sim;
use super::state::*;

impl Sim {
    #[inline]
    fn ent_deadline(&self, e: u32) -> i64 {
        if e & GROUP_ENT != 0 {
            self.groups.g[(e & !GROUP_ENT) as usize].deadline
        } else {
            self.tasks[e as usize].deadline
        }
    }

    /// The entity's virtual slice, base_slice_ns·1024/weight.
    #[inline]
    fn ent_vslice(&self, e: u32) -> i64 {
        if e & GROUP_ENT != 0 {
            let w = self.groups.g[(e & !GROUP_ENT) as usize].weight.max(1);
            (self.cfg.host.base_slice_ns * NICE0 / w) as i64
        } else {
            self.tasks[e as usize].vslice
        }
    }

    /// The lag limit of `update_entity_lag`: max(2 slices, a tick) of real
    /// time in the entity's virtual time (`calc_delta_fair`).
    #[inline]
    fn ent_lag_limit(&self, e: u32) -> i64 {
        let real = (2 * self.cfg.host.base_slice_ns).max(self.cfg.host.tick_ns);
        (real * NICE0 / self.ent_w(e).max(1)) as i64
    }

    /// Each entity on the level's run queue (queued and curr): at the root,
    /// the tasks outside every VM and the VMs' group entities; in a group,
    /// its runnable vCPU threads.
    fn eg_each(&self, l: Lvl, mut f: impl FnMut(u32)) {
        let cpu = self.lvl_cpu(l);
        let rq = &self.rqs[cpu];
        let want = match l {
            Lvl::Root(_) => None,
            Lvl::Grp(g) => Some(g),
        };
        for &t in &rq.queue {
            if self.cg_of(t as usize) == want {
                f(t);
            }
        }
        if let Some(c) = rq.curr {
            let tk = &self.tasks[c as usize];
            if tk.runnable && !tk.parked && self.cg_of(c as usize) == want {
                f(c);
            }
        }
        if let Lvl::Root(_) = l {
            for &vm in &self.groups.queued[cpu] {
                f(GROUP_ENT | (vm as usize * self.groups.n_pcpus + cpu) as u32);
            }
        }
    }

    /// The weight of the level's entities (queued and a competing curr),
    /// as V counts them: `place_entity`'s load.
    fn eg_load(&self, l: Lvl) -> i64 {
        let mut w = 0;
        self.eg_each(l, |e| w += self.ent_w(e) as i64);
        w
    }

    /// Entities on the level's run queue.
    fn eg_nr(&self, l: Lvl) -> usize {
        let mut n = 0;
        self.eg_each(l, |_| n += 1);
        n
    }

    /// The level's V (`avg_vruntime`): the weighted mean vruntime of its
    /// entities, rounded down; its last V while it has none.
    pub(crate) fn eg_avg_vruntime(&self, l: Lvl) -> i64 {
        let (mut v0, mut s, mut sw) = (None::<i64>, 0i128, 0i128);
        self.eg_each(l, |e| {
            let (w, vr) = (self.ent_w(e) as i128, self.ent_vr(e));
            let base = *v0.get_or_insert(vr);
            s += w * (vr - base) as i128;
            sw += w;
        });
        match v0 {
            Some(base) if sw > 0 => base + s.div_euclid(sw) as i64,
            _ => match l {
                Lvl::Root(cpu) => self.rqs[cpu].last_v,
                Lvl::Grp(g) => self.groups.g[g].last_v,
            },
        }
    }

    fn eg_vprot(&self, l: Lvl) -> i64 {
        match l {
            Lvl::Root(cpu) => self.rqs[cpu].vprot,
            Lvl::Grp(g) => self.groups.g[g].vprot,
        }
    }

    /// `pick_eevdf` at one level: with `protect` (`Host.run_to_parity`) its
    /// curr while eligible and inside its protected slice; else the eligible
    /// entity with the earliest (deadline, tie, id), else the one with the
    /// least (vruntime, tie, id). None for an empty level.
    fn eg_pick_eevdf(&self, l: Lvl, protect: bool) -> Option<u32> {
        let v = self.eg_avg_vruntime(l);
        if protect {
            if let Some(c) = self.lvl_curr(l) {
                let vr = self.ent_vr(c);
                if vr <= v && vr < self.eg_vprot(l) {
                    return Some(c);
                }
            }
        }
        let mut best: Option<((i64, u32, u32), u32)> = None;
        let mut least: Option<((i64, u32, u32), u32)> = None;
        self.eg_each(l, |e| {
            let (vr, tie) = self.ent_key(e);
            if vr <= v {
                let k = (self.ent_deadline(e), tie, e);
                if best.is_none_or(|(bk, _)| k < bk) {
                    best = Some((k, e));
                }
            }
            let k = (vr, tie, e);
            if least.is_none_or(|(lk, _)| k < lk) {
                least = Some((k, e));
            }
        });
        best.or(least).map(|(_, e)| e)
    }

    /// `pick_next_entity` at one level: its next buddy if it is on the level
    /// and `Host.next_buddy` takes it, else `pick_eevdf`; the picked
    /// entity's buddy marks are cleared (`set_next_entity`).
    fn eg_pick_level(&mut self, l: Lvl) -> Option<u32> {
        let next = match l {
            Lvl::Root(cpu) => self.rqs[cpu].buddy,
            Lvl::Grp(g) => self.groups.g[g].next,
        };
        if let Some(b) = next.filter(|&b| self.lvl_on_rq(l, b)) {
            let take = match self.cfg.host.next_buddy {
                NextBuddy::Always => true,
                NextBuddy::Eligible => self.ent_vr(b) <= self.eg_avg_vruntime(l),
                NextBuddy::Never => false,
            };
            if take {
                self.eg_set_next_entity(l, b);
                return Some(b);
            }
        }
        let e = self.eg_pick_eevdf(l, self.cfg.host.run_to_parity)?;
        self.eg_set_next_entity(l, e);
        Some(e)
    }

    /// `set_next_entity`'s `clear_buddies` for the entity picked at level
    /// `l`: not for the level's curr picked again (`pick_next_task_fair`
    /// sets the next entity only below the common ancestor of the tasks
    /// switched, so a group entity that stays the root's curr keeps the
    /// root's buddy mark).
    fn eg_set_next_entity(&mut self, l: Lvl, e: u32) {
        if self.lvl_curr(l) != Some(e) {
            self.cg_clear_buddies(l, e);
        }
    }

    /// `pick_next_task_fair` through the hierarchy: the root's pick, then
    /// the picked group's.
    pub(crate) fn eg_pick(&mut self, cpu: usize) -> Option<usize> {
        // pick_task_fair: update_curr (so update_deadline) on each level's
        // curr still on its queue, before that level picks
        if let Some(c) = self.lvl_curr(Lvl::Root(cpu)) {
            self.eg_update_deadline(Lvl::Root(cpu), c);
        }
        let e = self.eg_pick_level(Lvl::Root(cpu))?;
        if e & GROUP_ENT == 0 {
            return Some(e as usize);
        }
        let g = Lvl::Grp((e & !GROUP_ENT) as usize);
        if let Some(c) = self.lvl_curr(g) {
            self.eg_update_deadline(g, c);
        }
        let t = self.eg_pick_level(g);
        debug_assert!(t.is_some(), "a queued group entity has a runnable task");
        t.map(|t| t as usize)
    }

    /// `set_next_entity` as task `n` starts running on `cpu` after `prev`:
    /// its slice protection at its own level, and its group entity's at the
    /// root if that entity was not already the root's curr.
    pub(crate) fn eg_set_next(&mut self, cpu: usize, prev: Option<usize>, n: usize) {
        match self.cg_of(n) {
            Some(g) => {
                self.groups.g[g].vprot = self.tasks[n].deadline;
                if prev.and_then(|p| self.cg_of(p).filter(|_| self.tasks[p].cpu as usize == cpu)) != Some(g) {
                    self.rqs[cpu].vprot = self.groups.g[g].deadline;
                }
            }
            None => self.rqs[cpu].vprot = self.tasks[n].deadline,
        }
    }

    /// `update_cfs_group` → `reweight_entity` of group `g`'s entity: its
    /// new shares; on the root, its lag and its deadline's distance kept in
    /// real time (v' = V - (V - v)·w/w'), so V does not move; off it, its
    /// saved lag scaled alike. An empty group keeps its weight. The caller
    /// has charged the running time (`update_curr`).
    pub(crate) fn eg_reweight(&mut self, g: usize) {
        if self.groups.g[g].load == 0 {
            return;
        }
        let w1 = self.group_shares(g);
        let w0 = self.groups.g[g].weight;
        if w1 == w0 {
            return;
        }
        let (cpu, vm) = (g % self.groups.n_pcpus, (g / self.groups.n_pcpus) as u32);
        let scale = |x: i64| (x as i128 * w0 as i128 / w1 as i128) as i64;
        if self.groups.queued[cpu].contains(&vm) {
            let v = self.eg_avg_vruntime(Lvl::Root(cpu));
            let is_curr = self.lvl_curr(Lvl::Root(cpu)) == Some(GROUP_ENT | g as u32);
            let gr = &mut self.groups.g[g];
            let (lag, dist) = (v - gr.vruntime, gr.deadline - gr.vruntime);
            let v0 = gr.vruntime;
            gr.vruntime = v - scale(lag);
            gr.deadline = gr.vruntime + scale(dist);
            let vprot = self.rqs[cpu].vprot;
            if is_curr && vprot != i64::MIN && vprot != i64::MAX {
                // the protected slice scales too ("sched/eevdf: Update
                // se->vprot in reweight_entity()", ff38424030f9, v6.19)
                self.rqs[cpu].vprot = self.groups.g[g].vruntime + scale(vprot - v0);
            }
        } else {
            let gr = &mut self.groups.g[g];
            gr.vlag = scale(gr.vlag);
        }
        self.groups.g[g].weight = w1;
    }

    /// `enqueue_task_fair` for runnable task `t` (not yet on its CPU's
    /// queue; the caller has run `update_curr`): placed by its lag against
    /// its level's V (half a slice to its deadline when new,
    /// PLACE_DEADLINE_INITIAL); its group's load and shares; its group
    /// entity placed on the root by its own lag if it was not there.
    pub(crate) fn eg_enqueue(&mut self, t: usize, initial: bool) {
        let cpu = self.tasks[t].cpu as usize;
        let vs = if initial { self.tasks[t].vslice / 2 } else { self.tasks[t].vslice };
        let l = self.cg_of(t).map_or(Lvl::Root(cpu), Lvl::Grp);
        let v = self.eg_avg_vruntime(l);
        let lag = self.placed_lag(self.tasks[t].vlag, || self.eg_load(l), self.tasks[t].weight as i64);
        let tk = &mut self.tasks[t];
        tk.vruntime = v - lag;
        tk.place_deadline(vs);
        let Lvl::Grp(g) = l else {
            return;
        };
        let vm = g / self.groups.n_pcpus;
        if !self.group_add_task(t, g) {
            self.eg_reweight(g);
            return;
        }
        // enqueue_entity(root, se): update_cfs_group, then place_entity
        let vr = self.eg_avg_vruntime(Lvl::Root(cpu));
        let gr = &mut self.groups.g[g];
        let requeued = gr.delayed;
        let dist = gr.deadline - gr.vruntime;
        if requeued {
            // its negative lag burnt off while V advanced, up to 0 (DELAY_ZERO)
            gr.delayed = false;
            gr.vlag = gr.vlag.saturating_add(vr - gr.delayed_v).min(0);
        }
        self.eg_reweight(g);
        let gvs = self.ent_vslice(GROUP_ENT | g as u32);
        let glag =
            self.placed_lag(self.groups.g[g].vlag, || self.eg_load(Lvl::Root(cpu)), self.groups.g[g].weight as i64);
        let gr = &mut self.groups.g[g];
        gr.vruntime = vr - glag;
        // a delayed entity requeued keeps its request (requeue_delayed_entity)
        gr.deadline = gr.vruntime + if requeued { dist } else { gvs };
        self.groups.queued[cpu].push(vm as u32);
    }

    /// `dequeue_task_fair` for task `t`, still counted on its level (queued,
    /// or a runnable curr): its lag saved against its level's V (delayed
    /// when `sleep`, DELAY_DEQUEUE on and the lag negative), its buddy marks
    /// cleared; its group's load and shares, and the group entity's own
    /// dequeue from the root when the group empties. The caller then takes
    /// `t` off the queue or marks it not runnable.
    pub(crate) fn eg_dequeue(&mut self, t: usize, sleep: bool) {
        let cpu = self.tasks[t].cpu as usize;
        let g = self.cg_of(t);
        let l = g.map_or(Lvl::Root(cpu), Lvl::Grp);
        let v = self.eg_avg_vruntime(l);
        let limit = self.ent_lag_limit(t as u32);
        let delay = sleep && self.delay_dequeue_on();
        let rel = !sleep && self.rel_deadline_on();
        let tk = &mut self.tasks[t];
        tk.vlag = (v - tk.vruntime).clamp(-limit, limit);
        if delay && tk.vlag < 0 {
            tk.delayed = true;
            tk.delayed_v = v;
        }
        if rel {
            // PLACE_REL_DEADLINE: the task's own level only (its group's
            // dequeue, if it empties, is a sleep: dequeue_entities)
            tk.keep_rel_deadline();
        }
        let Some(g) = g else {
            self.rqs[cpu].last_v = v;
            self.cfs_clear_buddies(cpu, t as u32);
            return;
        };
        self.groups.g[g].last_v = v;
        self.cg_clear_buddies(Lvl::Grp(g), t as u32);
        let vm = g / self.groups.n_pcpus;
        if !self.group_remove_task(t, g) {
            self.eg_reweight(g);
            if sleep && !self.tasks[t].delayed {
                // dequeue_entities: "Bias pick_next to pick a task from this
                // cfs_rq, as p is sleeping when it is within its sched_slice"
                // (set_next_buddy on the parent; 2f36825b176f, v3.2)
                self.rqs[cpu].buddy = Some(GROUP_ENT | g as u32);
            }
            return;
        }
        // the group empties: its entity leaves the root (dequeue_entity)
        let ge = GROUP_ENT | g as u32;
        let vr = self.eg_avg_vruntime(Lvl::Root(cpu));
        let limit = self.ent_lag_limit(ge);
        self.rqs[cpu].last_v = vr;
        // the parent's dequeue is a sleep whatever the task's
        // (dequeue_entities: flags |= DEQUEUE_SLEEP)
        let delay_group = self.delay_dequeue_on();
        let gr = &mut self.groups.g[g];
        gr.vlag = (vr - gr.vruntime).clamp(-limit, limit);
        if delay_group && gr.vlag < 0 {
            gr.delayed = true;
            gr.delayed_v = vr;
        }
        self.cfs_clear_buddies(cpu, ge);
        self.groups.queued[cpu].retain(|&x| x as usize != vm);
        // its delayed tasks (t among them) are dequeued with lag 0: alone
        // in their group at its next pick, each is eligible
        let (v0, n) = (self.vms[vm].vcpu0 as usize, self.vms[vm].nvcpu as usize);
        for v in v0..v0 + n {
            let u = self.vcpus[v].task as usize;
            let tk = &mut self.tasks[u];
            if tk.delayed && tk.cpu as usize == cpu {
                tk.delayed = false;
                tk.vlag = 0;
            }
        }
    }

    /// The wake-up of delayed task `t` (as `delayed_wake`, against its own
    /// level's V).
    pub(crate) fn eg_delayed_wake(&mut self, t: usize) {
        let cpu = self.tasks[t].cpu as usize;
        let l = self.cg_of(t).map_or(Lvl::Root(cpu), Lvl::Grp);
        let v = self.eg_avg_vruntime(l);
        let tk = &mut self.tasks[t];
        tk.delayed = false;
        tk.vlag = tk.vlag.saturating_add(v - tk.delayed_v).min(0);
    }

    /// `update_deadline` of level `l`'s entity `e`: a used-up request gets
    /// a new deadline; true (reschedule) where the level has more than one
    /// entity.
    fn eg_update_deadline(&mut self, l: Lvl, e: u32) -> bool {
        if self.ent_vr(e) < self.ent_deadline(e) {
            return false;
        }
        let d = self.ent_vr(e) + self.ent_vslice(e);
        if e & GROUP_ENT != 0 {
            self.groups.g[(e & !GROUP_ENT) as usize].deadline = d;
        } else {
            self.tasks[e as usize].deadline = d;
        }
        if self.eg_nr(l) < 2 {
            return false;
        }
        // update_curr: resched_curr, and clear_buddies(cfs_rq, curr)
        self.cg_clear_buddies(l, e);
        true
    }

    /// `update_deadline` at each level of curr `c` on `cpu`: at the tick
    /// (`entity_tick`, with `update_cfs_group` first) every level; at the
    /// wake-up of `woken`, the levels its enqueue runs `update_curr` on
    /// (the root, and curr's group if it is the woken task's). True to
    /// reschedule.
    pub(crate) fn eg_deadlines(&mut self, cpu: usize, c: usize, tick: bool, woken: Option<usize>) -> bool {
        let mut resched = false;
        match self.cg_of(c) {
            Some(g) => {
                if tick {
                    self.group_load_update(g);
                    self.eg_reweight(g);
                }
                let own = woken.is_none_or(|t| self.cg_of(t) == Some(g));
                if own && self.lvl_curr(Lvl::Grp(g)) == Some(c as u32) {
                    resched |= self.eg_update_deadline(Lvl::Grp(g), c as u32);
                }
                if self.groups.g[g].nr_running > 0 {
                    resched |= self.eg_update_deadline(Lvl::Root(cpu), GROUP_ENT | g as u32);
                }
            }
            None => resched |= self.eg_update_deadline(Lvl::Root(cpu), c as u32),
        }
        resched
    }

    /// `check_preempt_wakeup_fair` for woken `t` against curr `c` on `cpu`:
    /// at their first common level (`find_matching_se`), preempt when
    /// `pick_eevdf` (with slice protection under `Host.run_to_parity`)
    /// takes the woken side: a third entity with an earlier eligible
    /// deadline blocks it, an ineligible curr shields nothing. (The flat
    /// queue without `run_to_parity` keeps the simulator's older rule,
    /// eligible with a deadline earlier than curr's.)
    pub(crate) fn eg_check_preempt_wakeup(&mut self, cpu: usize, t: usize, c: usize) -> bool {
        let (gt, gc) = (self.cg_of(t), self.cg_of(c));
        let (l, se, pse) = match (gt, gc) {
            (Some(a), Some(b)) if a == b => (Lvl::Grp(a), c as u32, t as u32),
            _ => (Lvl::Root(cpu), self.cg_root_ent(c), self.cg_root_ent(t)),
        };
        // update_curr(cfs_rq_of(se)): curr's request renewed if used up
        if self.lvl_curr(l) == Some(se) {
            self.eg_update_deadline(l, se);
        }
        self.eg_pick_eevdf(l, self.cfg.host.run_to_parity) == Some(pse)
    }

    /// `yield_task_fair` for curr `me` (with more than one task on its CPU;
    /// the caller has run `update_curr`): on its own level only
    /// (`task_cfs_rq(curr)`), its buddy marks cleared, then the penalty
    /// (`Host.yield_penalty`), which ends its protected slice there.
    pub(crate) fn eg_yield_task(&mut self, me: usize) {
        let cpu = self.tasks[me].cpu as usize;
        let l = self.cg_of(me).map_or(Lvl::Root(cpu), Lvl::Grp);
        self.cg_clear_buddies(l, me as u32);
        let elig = self.tasks[me].vruntime <= self.eg_avg_vruntime(l);
        let forfeit = self.cfg.host.yield_penalty == YieldPenalty::Vruntime;
        let tk = &mut self.tasks[me];
        if forfeit && elig {
            tk.vruntime = tk.vruntime.max(tk.deadline);
        }
        tk.deadline += tk.vslice;
        match l {
            Lvl::Root(c) => self.rqs[c].vprot = i64::MIN,
            Lvl::Grp(g) => self.groups.g[g].vprot = i64::MIN,
        }
    }
}

#[cfg(test)]
#[path = "eevdf_group_tests.rs"]
mod tests;

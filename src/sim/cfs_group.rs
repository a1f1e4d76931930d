//! CFS task groups (`Cfs(vm_groups=True)`): each VM's threads in their own
//! task group, one level below the CPU's root cfs_rq, as libvirt runs a VM
//! in its own cgroup ("Control Groups Resource Management", libvirt
//! project, <https://libvirt.org/cgroups.html>) and as
//! `CONFIG_FAIR_GROUP_SCHED` schedules it (kernel/sched/fair.c, v3.x-v6.5).
//!
//! On each host CPU a VM with runnable vCPUs there has one group entity
//! (`tg->se[cpu]`) on the root cfs_rq, beside the tasks outside every VM
//! (kernel threads, host noise, background load), and its own cfs_rq
//! (`tg->cfs_rq[cpu]`) holding its vCPU tasks on that CPU. Every rule acts
//! level by level, as fair.c's `for_each_sched_entity` loops do:
//! - `update_curr` charges the running time to the task and to its group
//!   entity, each in its own virtual time (`calc_delta_fair` by its weight);
//!   each level keeps its own `min_vruntime`;
//! - the group entity's weight is `calc_cfs_shares`: the group's 1024 shares
//!   times this CPU's share of the group's load, clamped to
//!   [MIN_SHARES, shares], recomputed at enqueue, dequeue and the tick
//!   (`update_cfs_shares`);
//! - a group entity joins the root cfs_rq when its first task does, always
//!   as a wake-up (`enqueue_task_fair` passes ENQUEUE_WAKEUP upwards), so it
//!   gets `place_entity`'s sleeper credit, and leaves when its last one does;
//! - `pick_next_entity` picks at the root, then inside the picked group,
//!   each with that level's skip, next and last buddies;
//! - `set_next_buddy` (from `yield_to_task_fair`), `set_skip_buddy` (from
//!   `yield_task_fair`) and `set_last_buddy` mark every level; clearing a
//!   mark walks up while the level above names the same branch
//!   (`__clear_buddies_next` and its siblings);
//! - `check_preempt_wakeup` compares the two tasks' entities at their first
//!   common level (`find_matching_se`), and sets the last buddy only when
//!   that level is the tasks' own (`entity_is_task`);
//! - `entity_tick` runs `check_preempt_tick` at each level with more than
//!   one entity, each level's slice from `sched_slice` walking up.
//!
//! Simplifications (docs/simulator.md):
//! - one level: the VM's group. libvirt also nests per-vCPU groups and an
//!   `emulator` group under it, each holding one thread, and machine.slice
//!   above; one-thread groups change no order, only weights, so they are
//!   left out. The VMM's I/O thread (`Host.noise`) stays at the root;
//! - the load in `calc_cfs_shares` is PELT's average as a continuous
//!   exponential (`Host.group_load_half_life_ns`, `group_load_update`), or
//!   with 0 the runnable tasks' weight now on every CPU;
//! - a group entity's slice restarts when it is picked after a different
//!   root entity (the v3.15+ `pick_next_task_fair`, 678d5718d8d0, which
//!   leaves the common part of the hierarchy alone; before it every pick
//!   restarted it);
//! - load balancing moves tasks by their count, not their hierarchical load
//!   (`task_h_load`).

use super::engine::Sim;
use super::state::*;

/// A root-level entity id that names the group entity of group `id & !GROUP_ENT`
/// (task ids are below it).
pub const GROUP_ENT: u32 = 1 << 31;
/// `MIN_SHARES` (kernel/sched/sched.h): the least weight of a group entity.
pub const MIN_SHARES: u64 = 2;

/// A level of the hierarchy: a CPU's root cfs_rq, or a group's cfs_rq.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lvl {
    Root(usize),
    Grp(usize),
}

impl Sim {
    /// The group of task `t` on its CPU: Some for a vCPU thread with groups on.
    #[inline]
    pub(crate) fn cg_of(&self, t: usize) -> Option<usize> {
        if !self.groups.on {
            return None;
        }
        match self.tasks[t].kind {
            TaskKind::Vcpu(v) => {
                let vm = self.vcpus[v as usize].vm as usize;
                Some(vm * self.groups.n_pcpus + self.tasks[t].cpu as usize)
            }
            TaskKind::Bg(_) | TaskKind::Noise(_) => None,
        }
    }

    /// The root-level entity of task `t`: its group's entity, or the task.
    #[inline]
    pub(crate) fn cg_root_ent(&self, t: usize) -> u32 {
        match self.cg_of(t) {
            Some(g) => GROUP_ENT | g as u32,
            None => t as u32,
        }
    }

    #[inline]
    pub(crate) fn ent_vr(&self, e: u32) -> i64 {
        if e & GROUP_ENT != 0 {
            self.groups.g[(e & !GROUP_ENT) as usize].vruntime
        } else {
            self.tasks[e as usize].vruntime
        }
    }

    #[inline]
    pub(crate) fn ent_w(&self, e: u32) -> u64 {
        if e & GROUP_ENT != 0 {
            self.groups.g[(e & !GROUP_ENT) as usize].weight
        } else {
            self.tasks[e as usize].weight
        }
    }

    /// The rbtree's order: (vruntime, tie). A group entity ranks as its
    /// VM's first vCPU thread does (seeded with `Host.seeded_ties`), so
    /// equal group vruntimes favour no VM by its index.
    #[inline]
    pub(crate) fn ent_key(&self, e: u32) -> (i64, u32) {
        if e & GROUP_ENT != 0 {
            let g = (e & !GROUP_ENT) as usize;
            let v0 = self.vms[g / self.groups.n_pcpus].vcpu0 as usize;
            (self.groups.g[g].vruntime, self.tasks[self.vcpus[v0].task as usize].tie)
        } else {
            (self.tasks[e as usize].vruntime, self.tasks[e as usize].tie)
        }
    }

    pub(crate) fn lvl_cpu(&self, l: Lvl) -> usize {
        match l {
            Lvl::Root(cpu) => cpu,
            Lvl::Grp(g) => g % self.groups.n_pcpus,
        }
    }

    /// The level's curr entity if it is on the cfs_rq (`cfs_rq->curr` with
    /// `on_rq`): at the root, the group entity of the running task's group
    /// while the group has runnable tasks.
    pub(crate) fn lvl_curr(&self, l: Lvl) -> Option<u32> {
        let cpu = self.lvl_cpu(l);
        let c = self.rqs[cpu].curr? as usize;
        let tk = &self.tasks[c];
        match (l, self.cg_of(c)) {
            (Lvl::Root(_), Some(g)) => (self.groups.g[g].nr_running > 0).then_some(GROUP_ENT | g as u32),
            (Lvl::Root(_), None) | (Lvl::Grp(_), _) => {
                let mine = match l {
                    Lvl::Root(_) => self.cg_of(c).is_none(),
                    Lvl::Grp(g) => self.cg_of(c) == Some(g),
                };
                (mine && tk.runnable && !tk.parked).then_some(c as u32)
            }
        }
    }

    /// The leftmost entity in the level's tree (curr is not in it), other
    /// than `except`.
    fn lvl_leftmost(&self, l: Lvl, except: Option<u32>) -> Option<u32> {
        let cpu = self.lvl_cpu(l);
        let rq = &self.rqs[cpu];
        let mut best: Option<((i64, u32), u32)> = None;
        let mut see = |s: &Sim, e: u32| {
            if Some(e) == except {
                return;
            }
            let k = s.ent_key(e);
            if best.is_none_or(|(bk, _)| k < bk) {
                best = Some((k, e));
            }
        };
        match l {
            Lvl::Root(_) => {
                for &t in &rq.queue {
                    if self.cg_of(t as usize).is_none() {
                        see(self, t);
                    }
                }
                let curr_g = rq.curr.and_then(|c| self.cg_of(c as usize));
                for &vm in &self.groups.queued[cpu] {
                    let g = vm as usize * self.groups.n_pcpus + cpu;
                    if Some(g) != curr_g {
                        see(self, GROUP_ENT | g as u32);
                    }
                }
            }
            Lvl::Grp(g) => {
                for &t in &rq.queue {
                    if self.cg_of(t as usize) == Some(g) {
                        see(self, t);
                    }
                }
            }
        }
        best.map(|(_, e)| e)
    }

    /// (next, last, skip) of a level.
    fn lvl_marks(&self, l: Lvl) -> (Option<u32>, Option<u32>, Option<u32>) {
        match l {
            Lvl::Root(cpu) => (self.rqs[cpu].buddy, self.rqs[cpu].last, self.rqs[cpu].skip),
            Lvl::Grp(g) => {
                let gr = &self.groups.g[g];
                (gr.next, gr.last, gr.skip)
            }
        }
    }

    /// Whether entity `e` is on the level's cfs_rq (curr or queued).
    pub(crate) fn lvl_on_rq(&self, l: Lvl, e: u32) -> bool {
        if self.lvl_curr(l) == Some(e) {
            return true;
        }
        if e & GROUP_ENT != 0 {
            let g = (e & !GROUP_ENT) as usize;
            return l == Lvl::Root(g % self.groups.n_pcpus) && self.groups.g[g].nr_running > 0;
        }
        let t = e as usize;
        let cpu = self.lvl_cpu(l);
        let mine = match l {
            Lvl::Root(_) => self.cg_of(t).is_none(),
            Lvl::Grp(g) => self.cg_of(t) == Some(g),
        };
        mine && self.tasks[t].cpu as usize == cpu && self.rqs[cpu].queue.contains(&e)
    }

    /// `wakeup_preempt_entity(curr, se)` between two entities of one level.
    fn cg_wakeup_preempt_entity(&self, curr: u32, se: u32) -> i32 {
        let vdiff = self.ent_vr(curr) - self.ent_vr(se);
        let gran = (self.cfs.wakeup_granularity_ns * NICE0 / self.ent_w(se).max(1)) as i64;
        if vdiff <= 0 {
            -1
        } else if vdiff > gran {
            1
        } else {
            0
        }
    }

    /// `clear_buddies(cfs_rq, se)` at level `l`: each mark naming `e` is
    /// cleared, and the level above's too while it names `e`'s group.
    pub(crate) fn cg_clear_buddies(&mut self, l: Lvl, e: u32) {
        match l {
            Lvl::Root(cpu) => self.cfs_clear_buddies(cpu, e),
            Lvl::Grp(g) => {
                let cpu = g % self.groups.n_pcpus;
                let ge = GROUP_ENT | g as u32;
                let gr = &mut self.groups.g[g];
                let rq = &mut self.rqs[cpu];
                if gr.next == Some(e) {
                    gr.next = None;
                    if rq.buddy == Some(ge) {
                        rq.buddy = None;
                    }
                }
                if gr.last == Some(e) {
                    gr.last = None;
                    if rq.last == Some(ge) {
                        rq.last = None;
                    }
                }
                if gr.skip == Some(e) {
                    gr.skip = None;
                    if rq.skip == Some(ge) {
                        rq.skip = None;
                    }
                }
            }
        }
    }

    /// `pick_next_entity` at one level (v5.14 order, as `cfs_pick`).
    fn cg_pick_level(&mut self, l: Lvl) -> Option<u32> {
        let curr = self.lvl_curr(l);
        let first = self.lvl_leftmost(l, None);
        // entity_before(a, b): strictly less vruntime (a queued entity wins a tie)
        let before = |s: &Sim, a: u32, b: u32| s.ent_vr(a) < s.ent_vr(b);
        let left = match (first, curr) {
            (None, None) => return None,
            (None, Some(c)) => c,
            (Some(f), None) => f,
            (Some(f), Some(c)) => {
                if before(self, c, f) {
                    c
                } else {
                    f
                }
            }
        };
        let mut se = left;
        let (next, last, skip) = self.lvl_marks(l);
        if skip == Some(se) {
            let second = if Some(se) == curr {
                first
            } else {
                match (self.lvl_leftmost(l, Some(se)), curr) {
                    (None, c) => c,
                    (Some(s2), Some(c)) if before(self, c, s2) => Some(c),
                    (s2, _) => s2,
                }
            };
            if let Some(s2) = second {
                if self.cg_wakeup_preempt_entity(s2, left) < 1 {
                    se = s2;
                }
            }
        }
        let next = next.filter(|&n| self.lvl_on_rq(l, n));
        let last = last.filter(|&b| self.lvl_on_rq(l, b));
        if let Some(n) = next.filter(|&n| self.cg_wakeup_preempt_entity(n, left) < 1) {
            se = n;
        } else if let Some(b) = last.filter(|&b| self.cg_wakeup_preempt_entity(b, left) < 1) {
            se = b;
        }
        self.cg_clear_buddies(l, se);
        Some(se)
    }

    /// `pick_next_task_fair` through the hierarchy: the root's pick, then
    /// the picked group's.
    pub(crate) fn cg_pick(&mut self, cpu: usize) -> Option<usize> {
        let e = self.cg_pick_level(Lvl::Root(cpu))?;
        if e & GROUP_ENT == 0 {
            return Some(e as usize);
        }
        let t = self.cg_pick_level(Lvl::Grp((e & !GROUP_ENT) as usize));
        debug_assert!(t.is_some(), "a queued group entity has a runnable task");
        t.map(|t| t as usize)
    }

    /// `set_next_entity` at the root: `n` starts running on `cpu` after
    /// `prev`; its group entity's slice restarts if it was not already the
    /// root's curr.
    pub(crate) fn cg_set_next(&mut self, cpu: usize, prev: Option<usize>, n: usize) {
        let Some(g) = self.cg_of(n) else { return };
        if prev.and_then(|p| self.cg_of(p).filter(|_| self.tasks[p].cpu as usize == cpu)) != Some(g) {
            self.groups.g[g].slice_start = self.now;
        }
    }

    /// `update_curr`'s charge of `delta` ns to the group entity of `t`.
    #[inline]
    pub(crate) fn cg_charge(&mut self, t: usize, delta: Ns) {
        if let Some(g) = self.cg_of(t) {
            let gr = &mut self.groups.g[g];
            gr.vruntime += (delta * NICE0 / gr.weight.max(1)) as i64;
        }
    }

    /// `update_min_vruntime` of the group of `cpu`'s curr and of the root.
    pub(crate) fn cg_update_min_vruntime(&mut self, cpu: usize) {
        if let Some(g) = self.rqs[cpu].curr.and_then(|c| self.cg_of(c as usize)) {
            self.cg_update_min_vruntime_lvl(Lvl::Grp(g));
        }
        self.cg_update_min_vruntime_lvl(Lvl::Root(cpu));
    }

    fn cg_update_min_vruntime_lvl(&mut self, l: Lvl) {
        let curr = self.lvl_curr(l).map(|c| self.ent_vr(c));
        let left = self.lvl_leftmost(l, None).map(|e| self.ent_vr(e));
        let v = match (curr, left) {
            (Some(c), Some(f)) => c.min(f),
            (Some(c), None) => c,
            (None, Some(f)) => f,
            (None, None) => return,
        };
        match l {
            Lvl::Root(cpu) => self.rqs[cpu].min_vruntime = self.rqs[cpu].min_vruntime.max(v),
            Lvl::Grp(g) => self.groups.g[g].min_vruntime = self.groups.g[g].min_vruntime.max(v),
        }
    }

    /// The min_vruntime of the cfs_rq task `t` would join on `cpu`.
    pub(crate) fn cg_min_vruntime(&self, t: usize, cpu: usize) -> i64 {
        match self.tasks[t].kind {
            TaskKind::Vcpu(v) if self.groups.on => {
                let g = self.vcpus[v as usize].vm as usize * self.groups.n_pcpus + cpu;
                self.groups.g[g].min_vruntime
            }
            _ => self.rqs[cpu].min_vruntime,
        }
    }

    /// `update_cfs_shares` → `calc_cfs_shares`: the group entity's weight
    /// from this CPU's share of the group's load. The caller has charged
    /// the running time first (`reweight_entity` follows `update_curr`).
    fn cg_reweight(&mut self, g: usize) {
        self.groups.g[g].weight = self.group_shares(g);
    }

    /// `calc_group_shares` of group `g`: the group's 1024 shares times this
    /// CPU's share of its load, clamped to [MIN_SHARES, shares]. With
    /// `Host.group_load_half_life_ns` the kernel's form: this CPU's load is
    /// max(its runnable weight now, its load average), the VM's is the other
    /// CPUs' averages as they last updated them plus this CPU's load.
    pub(crate) fn group_shares(&self, g: usize) -> u64 {
        let vm = g / self.groups.n_pcpus;
        if self.groups.half_life_ns == 0 {
            let tg = self.groups.tg_load[vm];
            let load = self.groups.g[g].load;
            let shares = (GROUP_SHARES * load).checked_div(tg).unwrap_or(GROUP_SHARES);
            return shares.clamp(MIN_SHARES, GROUP_SHARES);
        }
        let gr = &self.groups.g[g];
        let load = (gr.load as f64).max(gr.load_avg);
        let tg = (self.groups.tg_load_avg[vm] - gr.load_avg).max(0.0) + load;
        let shares = if tg > 0.0 { (GROUP_SHARES as f64 * load / tg) as u64 } else { GROUP_SHARES };
        shares.clamp(MIN_SHARES, GROUP_SHARES)
    }

    /// A vCPU thread `t` of group `g` becomes runnable there (`runnable`)
    /// or stops being runnable (with `Host.group_load_half_life_ns`): its
    /// own load average brought to now; on its first enqueue it starts at
    /// its full weight (`init_entity_runnable_average`), and when it joins a
    /// CPU other than the one whose group holds its average, the average
    /// moves with it (`remove_entity_load_avg` there, `attach_entity_load_avg`
    /// here), so a migration moves the VM's load at once. Call it before the
    /// group's load changes.
    pub(crate) fn group_track(&mut self, t: usize, g: usize, runnable: bool) {
        let h = self.groups.half_life_ns;
        if h == 0 {
            return;
        }
        let (n, now) = (self.groups.n_pcpus, self.now);
        let (cpu, vm) = (g % n, g / n);
        let w = self.tasks[t].weight as f64;
        let gs = &mut self.groups;
        let dt = now.saturating_sub(gs.task_avg_at[t]);
        if dt > 0 {
            let keep = (-(dt as f64) / h as f64).exp2();
            let target = if gs.task_avg_runnable[t] { w } else { 0.0 };
            gs.task_avg[t] = gs.task_avg[t] * keep + target * (1.0 - keep);
            gs.task_avg_at[t] = now;
        }
        let from = gs.task_avg_cpu[t];
        if from != cpu as u32 {
            if from == u32::MAX {
                gs.task_avg[t] = w;
                gs.task_avg_at[t] = now;
            } else {
                let og = vm * n + from as usize;
                self.group_load_update(og);
                let a = self.groups.task_avg[t];
                let ogr = &mut self.groups.g[og];
                ogr.load_avg = (ogr.load_avg - a).max(0.0);
                self.groups.tg_load_avg[vm] -= a;
            }
            self.group_load_update(g);
            let a = self.groups.task_avg[t];
            self.groups.g[g].load_avg += a;
            self.groups.tg_load_avg[vm] += a;
            self.groups.task_avg_cpu[t] = cpu as u32;
        }
        self.groups.task_avg_runnable[t] = runnable;
    }

    /// `update_load_avg` → `update_cfs_rq_load_avg` and
    /// `update_tg_load_avg` of group `g` (with
    /// `Host.group_load_half_life_ns`): its load average decays toward the
    /// runnable weight it had since the last update, by half every
    /// half-life (PELT's geometric series, y^32 = 1/2 over 1024-µs periods,
    /// as a continuous exponential), and its VM's sum takes the change. Call
    /// it before the group's load changes.
    pub(crate) fn group_load_update(&mut self, g: usize) {
        let h = self.groups.half_life_ns;
        if h == 0 {
            return;
        }
        let now = self.now;
        let vm = g / self.groups.n_pcpus;
        let gr = &mut self.groups.g[g];
        let dt = now.saturating_sub(gr.avg_at);
        if dt == 0 {
            return;
        }
        let keep = (-(dt as f64) / h as f64).exp2();
        let avg = gr.load_avg * keep + gr.load as f64 * (1.0 - keep);
        self.groups.tg_load_avg[vm] += avg - gr.load_avg;
        gr.load_avg = avg;
        gr.avg_at = now;
    }

    /// Task `t` becomes runnable in group `g` (CFS's and EEVDF's groups):
    /// the load averages brought to now, then the group's and its VM's
    /// load and runnable count. True if the group was empty (its entity
    /// joins the root).
    pub(crate) fn group_add_task(&mut self, t: usize, g: usize) -> bool {
        let (w, vm) = (self.tasks[t].weight, g / self.groups.n_pcpus);
        self.group_track(t, g, true);
        self.group_load_update(g);
        self.groups.tg_load[vm] += w;
        let gr = &mut self.groups.g[g];
        gr.load += w;
        gr.nr_running += 1;
        gr.nr_running == 1
    }

    /// Task `t` stops being runnable in group `g` (blocking or moving): as
    /// `group_add_task`, the other way. True if the group is now empty.
    pub(crate) fn group_remove_task(&mut self, t: usize, g: usize) -> bool {
        let (w, vm) = (self.tasks[t].weight, g / self.groups.n_pcpus);
        self.group_track(t, g, false);
        self.group_load_update(g);
        self.groups.tg_load[vm] -= w;
        let gr = &mut self.groups.g[g];
        gr.load -= w;
        gr.nr_running -= 1;
        gr.nr_running == 0
    }

    /// The task side of `enqueue_entity` for runnable task `t` joining its
    /// CPU (after `update_curr` and its own placement): the group's load
    /// and shares, and the group entity's `place_entity` and enqueue at the
    /// root if it was not there.
    pub(crate) fn cg_enqueue(&mut self, t: usize) {
        let Some(g) = self.cg_of(t) else { return };
        let (cpu, vm) = (g % self.groups.n_pcpus, g / self.groups.n_pcpus);
        let joined = self.group_add_task(t, g);
        self.cg_reweight(g);
        if joined {
            // enqueue_entity(root, se, ENQUEUE_WAKEUP) → place_entity(initial = 0)
            let mut thresh = self.cfs.latency_ns as i64;
            if self.cfg.host.cfs.gentle_fair_sleepers {
                thresh >>= 1;
            }
            let floor = self.rqs[cpu].min_vruntime - thresh;
            let gr = &mut self.groups.g[g];
            gr.vruntime = gr.vruntime.max(floor);
            self.groups.queued[cpu].push(vm as u32);
        }
    }

    /// The task side of `dequeue_entity` for task `t` leaving its CPU's
    /// cfs_rq (blocking when `sleep`, or taken off to move): its marks
    /// cleared, the group's load and shares, and the group entity's dequeue
    /// at the root if the group has no runnable task left; if it has, a
    /// sleeping task makes its group the root's next buddy
    /// (`dequeue_task_fair`: "Bias pick_next to pick a task from this
    /// cfs_rq, as p is sleeping when it is within its sched_slice",
    /// 2f36825b176f, v3.2).
    pub(crate) fn cg_dequeue(&mut self, t: usize, sleep: bool) {
        let Some(g) = self.cg_of(t) else { return };
        let (cpu, vm) = (g % self.groups.n_pcpus, g / self.groups.n_pcpus);
        self.cg_clear_buddies(Lvl::Grp(g), t as u32);
        let left = self.group_remove_task(t, g);
        self.cg_update_min_vruntime_lvl(Lvl::Grp(g));
        self.cg_reweight(g);
        if left {
            // dequeue_entity(root, se, DEQUEUE_SLEEP): vruntime kept
            self.cfs_clear_buddies(cpu, GROUP_ENT | g as u32);
            self.groups.queued[cpu].retain(|&v| v as usize != vm);
        } else if sleep {
            self.rqs[cpu].buddy = Some(GROUP_ENT | g as u32);
        }
        self.cg_update_min_vruntime_lvl(Lvl::Root(cpu));
    }

    /// `set_next_buddy(p)` from `yield_to_task_fair`: every level.
    pub(crate) fn cg_set_next_buddy(&mut self, t: usize) {
        let cpu = self.tasks[t].cpu as usize;
        if let Some(g) = self.cg_of(t) {
            self.groups.g[g].next = Some(t as u32);
        }
        self.rqs[cpu].buddy = Some(self.cg_root_ent(t));
    }

    /// `yield_task_fair` for curr `me` (with more than one task on its
    /// CPU): `clear_buddies` on its own cfs_rq, then `set_skip_buddy` at
    /// every level, so at the root its whole group is the skip buddy.
    pub(crate) fn cg_yield_task(&mut self, me: usize) {
        let cpu = self.tasks[me].cpu as usize;
        match self.cg_of(me) {
            Some(g) => {
                self.cg_clear_buddies(Lvl::Grp(g), me as u32);
                self.groups.g[g].skip = Some(me as u32);
                self.rqs[cpu].skip = Some(GROUP_ENT | g as u32);
            }
            None => {
                self.cfs_clear_buddies(cpu, me as u32);
                self.rqs[cpu].skip = Some(me as u32);
            }
        }
    }

    /// Root entities on `cpu`'s root cfs_rq (curr included), and their load.
    fn cg_root_nr_load(&self, cpu: usize) -> (u64, u64) {
        let rq = &self.rqs[cpu];
        let (mut nr, mut load) = (0u64, 0u64);
        for &t in rq.queue.iter().chain(rq.curr.iter()) {
            let tk = &self.tasks[t as usize];
            if self.cg_of(t as usize).is_none() && tk.runnable && !tk.parked {
                nr += 1;
                load += tk.weight;
            }
        }
        for &vm in &self.groups.queued[cpu] {
            nr += 1;
            load += self.groups.g[vm as usize * self.groups.n_pcpus + cpu].weight;
        }
        (nr, load)
    }

    /// `__sched_period(nr)`.
    fn cg_period(&self, nr: u64) -> u64 {
        let nr_latency = self.cfs.latency_ns.div_ceil(self.cfs.min_granularity_ns);
        if nr > nr_latency {
            nr * self.cfs.min_granularity_ns
        } else {
            self.cfs.latency_ns
        }
    }

    /// `sched_slice(cfs_rq, se)` walking up (v3.x-v5.12: the period of the
    /// entity's own cfs_rq, then its share of the load at each level), with
    /// the BASE_SLICE floor of min_granularity as `cfs_sched_slice`.
    fn cg_sched_slice(&self, l: Lvl, e: u32) -> u64 {
        let cpu = self.lvl_cpu(l);
        let (root_nr, root_load) = self.cg_root_nr_load(cpu);
        let slice = match l {
            Lvl::Root(_) => {
                let p = self.cg_period(root_nr) as u128;
                (p * self.ent_w(e) as u128 / root_load.max(1) as u128) as u64
            }
            Lvl::Grp(g) => {
                let gr = &self.groups.g[g];
                let p = self.cg_period(gr.nr_running as u64) as u128;
                let s = p * self.ent_w(e) as u128 / gr.load.max(1) as u128;
                (s * gr.weight as u128 / root_load.max(1) as u128) as u64
            }
        };
        slice.max(self.cfs.min_granularity_ns)
    }

    /// `check_preempt_tick(cfs_rq, curr)` at one level; true to resched.
    fn cg_check_preempt_tick(&mut self, l: Lvl, curr: u32, delta_exec: Ns) -> bool {
        let ideal = self.cg_sched_slice(l, curr);
        if delta_exec > ideal {
            self.cg_clear_buddies(l, curr);
            return true;
        }
        if delta_exec < self.cfs.min_granularity_ns {
            return false;
        }
        let Some(f) = self.lvl_leftmost(l, None) else { return false };
        self.ent_vr(curr) - self.ent_vr(f) > ideal as i64
    }

    /// `task_tick_fair` → `entity_tick` at each level of curr `c`: the
    /// group's shares, then `check_preempt_tick` where the level has more
    /// than one entity.
    pub(crate) fn cg_tick(&mut self, cpu: usize, c: usize) {
        let mut resched = false;
        match self.cg_of(c) {
            Some(g) => {
                self.group_load_update(g);
                self.cg_reweight(g);
                if self.groups.g[g].nr_running > 1 && self.lvl_curr(Lvl::Grp(g)) == Some(c as u32) {
                    let d = self.now - self.rqs[cpu].slice_start;
                    resched |= self.cg_check_preempt_tick(Lvl::Grp(g), c as u32, d);
                }
                if self.cg_root_nr_load(cpu).0 > 1 && self.groups.g[g].nr_running > 0 {
                    let d = self.now - self.groups.g[g].slice_start;
                    resched |= self.cg_check_preempt_tick(Lvl::Root(cpu), GROUP_ENT | g as u32, d);
                }
            }
            None => {
                if self.cg_root_nr_load(cpu).0 > 1 {
                    let d = self.now - self.rqs[cpu].slice_start;
                    resched |= self.cg_check_preempt_tick(Lvl::Root(cpu), c as u32, d);
                }
            }
        }
        if resched {
            self.resched(cpu, Why::Tick);
        }
    }

    /// `check_preempt_wakeup` for woken `t` against curr `c` on `cpu`:
    /// `find_matching_se` brings both to their first common level; preempt
    /// when `wakeup_preempt_entity` there is 1; the last buddy is set only
    /// when that level is the tasks' own (`entity_is_task`), with `scale`
    /// from curr's own cfs_rq. Returns whether to reschedule.
    pub(crate) fn cg_check_preempt_wakeup(&mut self, cpu: usize, t: usize, c: usize) -> bool {
        let (gt, gc) = (self.cg_of(t), self.cg_of(c));
        let nr_latency = self.cfs.latency_ns.div_ceil(self.cfs.min_granularity_ns);
        if gt == gc {
            if self.cg_wakeup_preempt_entity(c as u32, t as u32) != 1 {
                return false;
            }
            let own_nr = match gc {
                Some(g) => self.groups.g[g].nr_running as u64,
                None => self.cg_root_nr_load(cpu).0,
            };
            if self.cfg.host.cfs.last_buddy && own_nr >= nr_latency {
                // set_last_buddy: every level
                if let Some(g) = gc {
                    self.groups.g[g].last = Some(c as u32);
                }
                self.rqs[cpu].last = Some(self.cg_root_ent(c));
            }
            return true;
        }
        self.cg_wakeup_preempt_entity(self.cg_root_ent(c), self.cg_root_ent(t)) == 1
    }
}

#[cfg(test)]
#[path = "cfs_group_tests.rs"]
mod tests;

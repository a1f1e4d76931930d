//! The pre-6.6 CFS fair class (`Host(scheduler="cfs")`), the host-noise
//! process (`Host.noise`) and the wake-up latencies (`Host.wakeup_ipi_ns`,
//! `Host.idle_states`). Each rule names the kernel function it follows
//! (kernel/sched/fair.c of v3.x-v6.5; the v5.14 text where they differ).
//!
//! With `Cfs.vm_groups` each VM's threads are in their own task group and
//! the rules here hand over to `cfs_group.rs`, which applies them level by
//! level.
//!
//! Simplifications (docs/simulator.md): without `Cfs.vm_groups`, one cfs_rq
//! level (no cgroups, so `h_nr_running == nr_running`); no HRTICK (slices end at ticks, as with the
//! kernel's default `HRTICK` off); no PELT load tracking; START_DEBIT is not
//! applied (every task starts by a wake-up at time 0); the BASE_SLICE floor
//! (v5.13+) applies in every era (it only matters with unequal weights).

use super::config::{Scheduler, WakeupDist};
use super::engine::Sim;
use super::queue::Ev;
use super::state::*;
use rand::Rng;

/// Order of the queued tasks (the rbtree's): (vruntime, tie). The kernel
/// keeps equal vruntimes in enqueue order; here the tie rank decides.
#[inline]
fn key(tk: &Task) -> (i64, u32) {
    (tk.vruntime, tk.tie)
}

impl Sim {
    #[inline]
    pub fn is_cfs(&self) -> bool {
        self.cfg.host.scheduler == Scheduler::Cfs
    }

    /// `sched_nr_latency` = DIV_ROUND_UP(sched_latency, min_granularity)
    /// (`sched_proc_update_handler`; 8 with the defaults).
    fn cfs_nr_latency(&self) -> u64 {
        self.cfs.latency_ns.div_ceil(self.cfs.min_granularity_ns)
    }

    /// The leftmost queued task (least (vruntime, tie)), curr not included.
    pub(crate) fn cfs_leftmost(&self, cpu: usize, except: Option<u32>) -> Option<u32> {
        self.rqs[cpu].queue.iter().copied().filter(|&t| Some(t) != except).min_by_key(|&t| key(&self.tasks[t as usize]))
    }

    /// curr if it is still runnable (`curr->on_rq`).
    fn cfs_curr_on_rq(&self, cpu: usize) -> Option<u32> {
        self.rqs[cpu].curr.filter(|&c| self.tasks[c as usize].runnable && !self.tasks[c as usize].parked)
    }

    /// `update_min_vruntime`: min(curr, leftmost) vruntime, never backwards.
    pub(crate) fn cfs_update_min_vruntime(&mut self, cpu: usize) {
        if self.groups.on {
            // both levels of curr's hierarchy (cfs_group.rs)
            self.cg_update_min_vruntime(cpu);
            return;
        }
        let curr = self.cfs_curr_on_rq(cpu).map(|c| self.tasks[c as usize].vruntime);
        let left = self.cfs_leftmost(cpu, None).map(|t| self.tasks[t as usize].vruntime);
        let v = match (curr, left) {
            (Some(c), Some(l)) => c.min(l),
            (Some(c), None) => c,
            (None, Some(l)) => l,
            (None, None) => return,
        };
        let rq = &mut self.rqs[cpu];
        rq.min_vruntime = rq.min_vruntime.max(v);
    }

    /// `clear_buddies`: drop every buddy mark naming `t` on `cpu`.
    pub(crate) fn cfs_clear_buddies(&mut self, cpu: usize, t: u32) {
        let rq = &mut self.rqs[cpu];
        if rq.buddy == Some(t) {
            rq.buddy = None;
        }
        if rq.last == Some(t) {
            rq.last = None;
        }
        if rq.skip == Some(t) {
            rq.skip = None;
        }
    }

    /// `wakeup_gran(se)`: sysctl_sched_wakeup_granularity in `se`'s virtual
    /// time (`calc_delta_fair`).
    fn cfs_wakeup_gran(&self, se: usize) -> i64 {
        let w = self.tasks[se].weight;
        (self.cfs.wakeup_granularity_ns * NICE0 / w) as i64
    }

    /// `wakeup_preempt_entity(curr, se)`: -1 if se is not left of curr, 1 if
    /// it is more than wakeup_gran(se) left of it, else 0.
    pub(crate) fn cfs_wakeup_preempt_entity(&self, curr: usize, se: usize) -> i32 {
        let vdiff = self.tasks[curr].vruntime - self.tasks[se].vruntime;
        if vdiff <= 0 {
            -1
        } else if vdiff > self.cfs_wakeup_gran(se) {
            1
        } else {
            0
        }
    }

    /// `sched_slice(cfs_rq, se)` for a queued or current `se`:
    /// `__sched_period(nr_running)` (sched_latency, or nr·min_granularity
    /// above sched_nr_latency) times se's share of the queue's load, with
    /// the BASE_SLICE floor of min_granularity.
    pub(crate) fn cfs_sched_slice(&self, cpu: usize, se: usize) -> u64 {
        let nr = self.nr_running(cpu) as u64;
        let period = if nr > self.cfs_nr_latency() { nr * self.cfs.min_granularity_ns } else { self.cfs.latency_ns };
        let curr_w = self.rqs[cpu].curr.map_or(0, |c| self.tasks[c as usize].weight);
        let load = (self.rqs[cpu].queue_w as u64 + curr_w).max(1);
        let slice = (period as u128 * self.tasks[se].weight as u128 / load as u128) as u64;
        slice.max(self.cfs.min_granularity_ns)
    }

    /// Placement of a task joining `cpu`'s queue (`enqueue_entity`): a task
    /// coming from another CPU has its vruntime renormalised from that CPU's
    /// min_vruntime to this one's (`migrate_task_rq_fair` / `dequeue_entity`
    /// without DEQUEUE_SLEEP, then `enqueue_entity`); a waking task gets
    /// `place_entity(initial = 0)`: max(vruntime, min_vruntime − sleeper
    /// credit), the credit being sched_latency (halved with GENTLE_FAIR_SLEEPERS).
    pub(crate) fn cfs_place(&mut self, cpu: usize, t: usize, from: usize, wakeup: bool) {
        // the cfs_rq the task leaves and joins: its VM's group's with `Cfs.vm_groups`
        let to_min = self.cg_min_vruntime(t, cpu);
        if from != cpu {
            let d = to_min - self.cg_min_vruntime(t, from);
            self.tasks[t].vruntime += d;
        }
        if wakeup {
            let mut thresh = self.cfs.latency_ns as i64;
            if self.cfg.host.cfs.gentle_fair_sleepers {
                thresh >>= 1;
            }
            let floor = to_min - thresh;
            let tk = &mut self.tasks[t];
            tk.vruntime = tk.vruntime.max(floor);
        }
    }

    /// `check_preempt_wakeup` for the woken task `t` on `cpu` (curr `c`):
    /// preempt if `wakeup_preempt_entity(curr, t) == 1`; the preempted curr
    /// becomes the last buddy when nr_running >= sched_nr_latency (LAST_BUDDY).
    /// Returns whether to reschedule.
    pub(crate) fn cfs_check_preempt_wakeup(&mut self, cpu: usize, t: usize, c: usize) -> bool {
        if self.cfs_curr_on_rq(cpu).is_none() {
            // curr is blocking: it leaves the CPU anyway
            return false;
        }
        if self.groups.on {
            return self.cg_check_preempt_wakeup(cpu, t, c);
        }
        let scale = self.nr_running(cpu) as u64 >= self.cfs_nr_latency();
        if self.cfs_wakeup_preempt_entity(c, t) != 1 {
            return false;
        }
        if self.cfg.host.cfs.last_buddy && scale {
            self.rqs[cpu].last = Some(c as u32);
        }
        true
    }

    /// `pick_next_entity` (v5.14 order): the leftmost of queue and curr;
    /// the second leftmost instead if the leftmost is the skip buddy and
    /// running the second is not too unfair; then the next buddy, else the
    /// last buddy, each if `wakeup_preempt_entity(buddy, left) < 1`. The
    /// picked task's buddy marks are cleared (`clear_buddies` in
    /// `set_next_entity`).
    pub(crate) fn cfs_pick(&mut self, cpu: usize) -> Option<usize> {
        if self.groups.on {
            return self.cg_pick(cpu);
        }
        let curr = self.cfs_curr_on_rq(cpu);
        let first = self.cfs_leftmost(cpu, None);
        // entity_before(curr, x): strictly less vruntime (a queued task wins a tie)
        let before = |s: &Sim, a: u32, b: u32| s.tasks[a as usize].vruntime < s.tasks[b as usize].vruntime;
        let left = match (first, curr) {
            (None, None) => return None,
            (None, Some(c)) => c,
            (Some(l), None) => l,
            (Some(l), Some(c)) => {
                if before(self, c, l) {
                    c
                } else {
                    l
                }
            }
        };
        let mut se = left;
        let rq = &self.rqs[cpu];
        let on_rq = |s: &Sim, b: u32| curr == Some(b) || s.rqs[cpu].queue.contains(&b);
        if rq.skip == Some(se) {
            let second = if Some(se) == curr {
                first
            } else {
                let s2 = self.cfs_leftmost(cpu, Some(se));
                match (s2, curr) {
                    (None, c) => c,
                    (Some(s2), Some(c)) if before(self, c, s2) => Some(c),
                    (s2, _) => s2,
                }
            };
            if let Some(s2) = second {
                if self.cfs_wakeup_preempt_entity(s2 as usize, left as usize) < 1 {
                    se = s2;
                }
            }
        }
        let (next, last) = (rq.buddy, rq.last);
        if let Some(n) = next.filter(|&n| on_rq(self, n)) {
            if self.cfs_wakeup_preempt_entity(n as usize, left as usize) < 1 {
                se = n;
            } else if let Some(l) = last.filter(|&l| on_rq(self, l)) {
                if self.cfs_wakeup_preempt_entity(l as usize, left as usize) < 1 {
                    se = l;
                }
            }
        } else if let Some(l) = last.filter(|&l| on_rq(self, l)) {
            if self.cfs_wakeup_preempt_entity(l as usize, left as usize) < 1 {
                se = l;
            }
        }
        self.cfs_clear_buddies(cpu, se);
        Some(se as usize)
    }

    /// `check_preempt_tick` (from `entity_tick` when nr_running > 1): curr
    /// has run longer than its sched_slice since it was picked → resched
    /// (and no buddy favours it); else, after min_granularity, resched if
    /// curr's vruntime is more than a slice right of the leftmost's.
    pub(crate) fn cfs_tick(&mut self, cpu: usize, c: usize) {
        if self.groups.on {
            self.cg_tick(cpu, c);
            return;
        }
        if self.nr_running(cpu) <= 1 {
            return;
        }
        let ideal = self.cfs_sched_slice(cpu, c);
        let delta_exec = self.now - self.rqs[cpu].slice_start;
        if delta_exec > ideal {
            self.cfs_clear_buddies(cpu, c as u32);
            self.resched(cpu, Why::Tick);
            return;
        }
        if delta_exec < self.cfs.min_granularity_ns {
            return;
        }
        let Some(l) = self.cfs_leftmost(cpu, None) else { return };
        let delta = self.tasks[c].vruntime - self.tasks[l as usize].vruntime;
        if delta > ideal as i64 {
            self.resched(cpu, Why::Tick);
        }
    }

    // ---- wake-up latency ----

    /// Delay before a vCPU woken onto `cpu` takes effect there: the IPI
    /// (`wakeup_ipi_ns`), plus, if the CPU is idle, the exit latency of the
    /// deepest idle state whose target residency it has been idle for (a
    /// governor that predicted the idle time right); the sum jittered by
    /// `wakeup_jitter` as `wakeup_dist` says.
    pub(crate) fn wake_delay(&mut self, cpu: usize, idle: bool) -> Ns {
        let h = &self.cfg.host;
        let mut d = h.wakeup_ipi_ns;
        if idle {
            let idle_for = self.now - self.rqs[cpu].idle_since;
            if let Some(&(exit, _)) = h.idle_states.iter().rev().find(|&&(_, res)| idle_for >= res) {
                d += exit;
            }
        }
        let j = h.wakeup_jitter;
        if d > 0 && j > 0.0 {
            let f = match h.wakeup_dist {
                WakeupDist::Uniform => {
                    let u: f64 = self.rng2.random::<f64>();
                    1.0 - j + 2.0 * j * u
                }
                WakeupDist::Lognormal => self.lognormal_factor(j),
            };
            d = (d as f64 * f).round() as Ns;
        }
        self.host_path_ns(cpu, d)
    }

    /// A factor drawn log-normal with median 1 and `j` as the standard
    /// deviation of its logarithm, capped at 50 (Box-Muller on two uniforms
    /// of the second RNG stream, so the main stream's draws stay those of a
    /// run without it).
    pub(crate) fn lognormal_factor(&mut self, j: f64) -> f64 {
        let u: f64 = self.rng2.random::<f64>();
        let u2: f64 = self.rng2.random::<f64>();
        let z = (-2.0 * (1.0 - u).ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        (j * z).exp().min(50.0)
    }

    // ---- host noise ----

    /// `kthreads_per_cpu` pinned kernel-thread tasks per CPU and one unpinned VMM I/O task
    /// per VM (on its first vCPU's CPU to begin with).
    pub(crate) fn add_noise_tasks(&mut self) {
        let n = self.cfg.host.noise.clone();
        let base_slice_ns = self.cfg.host.base_slice_ns;
        let mk = |kind, cpu, pinned| Task::new(kind, NICE0, base_slice_ns, cpu, pinned);
        if n.kthread_hz > 0.0 {
            let k = n.kthreads_per_cpu.max(1);
            for cpu in 0..self.rqs.len() as u32 {
                for _ in 0..k {
                    let id = self.noise_src.len() as u32;
                    self.noise_src.push(((1e9 / (n.kthread_hz / k as f64)) as Ns, n.kthread_ns));
                    self.tasks.push(mk(TaskKind::Noise(id), cpu, Some(cpu)));
                }
            }
        }
        if n.vmm_io_hz > 0.0 {
            for vm in 0..self.vms.len() {
                let v0 = self.vms[vm].vcpu0 as usize;
                let cpu = self.tasks[self.vcpus[v0].task as usize].cpu;
                let id = self.noise_src.len() as u32;
                self.noise_src.push(((1e9 / n.vmm_io_hz) as Ns, n.vmm_io_ns));
                self.tasks.push(mk(TaskKind::Noise(id), cpu, None));
            }
        }
    }

    pub(crate) fn noise_exp(&mut self, mean: Ns) -> Ns {
        let u: f64 = self.rng2.random::<f64>();
        let x = -(1.0 - u).ln() * mean as f64;
        (x.min(mean as f64 * 50.0) as Ns).max(1)
    }

    pub(crate) fn start_noise(&mut self) {
        for t in 0..self.tasks.len() {
            if let TaskKind::Noise(i) = self.tasks[t].kind {
                let s = self.noise_exp(self.noise_src[i as usize].0);
                self.push(s, Ev::BgWake(t as u32));
            }
        }
    }

    /// A burst ends: the thread sleeps until its next arrival (arrivals are
    /// a Poisson process of their own, not restarted by the bursts).
    pub(crate) fn noise_end(&mut self, t: usize) {
        let cpu = self.tasks[t].cpu as usize;
        debug_assert_eq!(self.rqs[cpu].curr, Some(t as u32));
        self.tasks[t].bg_rem = 0;
        self.tasks[t].bg_gen += 1;
        self.dequeue_sleep(t);
        self.schedule(cpu, Why::Sleep);
    }

    /// A burst arrives: the next arrival is drawn; the work joins what the
    /// thread still has to do (a kworker with queued work items), waking
    /// it if it sleeps.
    pub(crate) fn noise_wake(&mut self, t: usize) {
        let TaskKind::Noise(i) = self.tasks[t].kind else { unreachable!("a noise task") };
        let (gap, len) = self.noise_src[i as usize];
        let next = self.noise_exp(gap);
        self.push(self.now + next, Ev::BgWake(t as u32));
        let burst = self.noise_exp(len);
        let now = self.now;
        let cpu = self.tasks[t].cpu as usize;
        if !self.tasks[t].runnable {
            self.tasks[t].bg_rem = burst;
            self.enqueue(t);
        } else if self.rqs[cpu].curr == Some(t as u32) {
            let tk = &mut self.tasks[t];
            tk.bg_rem = tk.bg_rem.saturating_sub(now - tk.bg_start) + burst;
            tk.bg_start = now;
            tk.bg_gen += 1;
            let (rem, gen) = (tk.bg_rem.max(1), tk.bg_gen);
            self.push(now + rem, Ev::BgEnd(t as u32, gen));
        } else {
            self.tasks[t].bg_rem += burst;
        }
    }
}

#[cfg(test)]
#[path = "cfs_tests.rs"]
mod tests;

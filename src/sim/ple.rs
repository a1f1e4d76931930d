//! Pause-loop exits: the window helpers of arch/x86/kvm/x86.h, the exit
//! itself (`handle_pause` / `pause_interception`), and the `kvm_vcpu_on_spin`
//! context offered to the VM's directed-yield policy.

use super::config::PleKind;
use super::engine::Sim;
use super::policy::{Filter, SpinCtx, VcpuView};
use super::state::*;

/// `__grow_ple_window`: a modifier smaller than the base multiplies, a larger one adds; capped.
pub fn grow_ple_window(val: u64, base: u64, modifier: u64, max: u64) -> u64 {
    if modifier < 1 {
        return base;
    }
    let r = if modifier < base { val.saturating_mul(modifier) } else { val.saturating_add(modifier) };
    r.min(max)
}

/// `__shrink_ple_window`: 0 resets to the base; a small modifier divides, a large one subtracts; floored.
pub fn shrink_ple_window(val: u64, base: u64, modifier: u64, min: u64) -> u64 {
    if modifier < 1 {
        return base;
    }
    let r = if modifier < base { val / modifier } else { val.saturating_sub(modifier) };
    r.max(min)
}

struct PleLite {
    kind: PleKind,
    candidate_ns: Ns,
}

struct PleCtx<'a> {
    sim: &'a mut Sim,
    /// The spinning vCPU (global index).
    spinner: usize,
    /// The spinner's index in its VM.
    me: usize,
    vm: usize,
    t: Ns,
    yielded: bool,
    vcpu0: usize,
    n: usize,
    in_kernel: bool,
    candidate_ns: Ns,
    /// vcpulab's token schedulers run the run: a woken vCPU that has not run
    /// since is `dy_runnable` whatever woke it ([`Sim::view`]).
    tokens: bool,
}

impl SpinCtx for PleCtx<'_> {
    fn n(&self) -> usize {
        self.n
    }
    #[inline]
    fn me(&self) -> usize {
        self.me
    }
    fn vm(&self) -> usize {
        self.vm
    }
    fn spinner_in_kernel(&self) -> bool {
        self.in_kernel
    }
    fn passes_filter(&self, idx: usize, filter: Filter) -> bool {
        let g = self.vcpu0 + idx;
        if !self.sim.ready[g] {
            return false;
        }
        let v = &self.sim.vcpus[g];
        let pi = v.apicv && v.posted_irq;
        // dy_runnable as the view has it: under the token schedulers a
        // blocking vCPU that is ready (woken, not run since) is
        if v.blocking && !(self.tokens || v.pv_unhalted || pi) {
            return false;
        }
        let exempt = filter.irq_exempt && pi;
        let r = !(filter.kernel && v.preempted && self.in_kernel && !exempt && !v.preempted_in_kernel);
        debug_assert_eq!(
            r,
            super::policy::candidate_passes(&self.sim.view(g), self.in_kernel, filter),
            "the engine's filter is the view's"
        );
        r
    }
    fn preempted(&self, idx: usize) -> bool {
        self.sim.vcpus[self.vcpu0 + idx].preempted
    }
    fn examine_n(&mut self, k: usize) {
        self.t += k as Ns * self.candidate_ns;
    }
    fn candidate_mask(&self, filter: Filter) -> Option<u64> {
        if self.n > 64 {
            return None;
        }
        let c = &self.sim.cand;
        let mut m = c.base[self.vm];
        if filter.kernel && self.in_kernel {
            let exempt = if filter.irq_exempt { c.pi[self.vm] } else { 0 };
            m &= !(c.user[self.vm] & !exempt);
        }
        debug_assert!(
            (0..self.n).all(|i| (m >> i & 1 == 1) == self.passes_filter(i, filter)),
            "the candidate masks are the filter's: {m:#x}"
        );
        Some(m)
    }
    fn halted_not_woken(&self, idx: usize) -> bool {
        let g = self.vcpu0 + idx;
        self.sim.vcpus[g].blocking && !self.sim.ready[g]
    }
    fn in_guest(&self, idx: usize) -> bool {
        self.sim.vcpu_in_guest(self.vcpu0 + idx)
    }
    fn ipi_receiver(&self, idx: usize) -> bool {
        match self.sim.vcpus[self.spinner].cur {
            Some(t) => self.sim.vcpus[self.vcpu0 + idx].ipis.contains(&t),
            None => false,
        }
    }
    fn last_boosted(&self) -> usize {
        self.sim.vms[self.vm].last_boosted
    }
    fn set_last_boosted(&mut self, idx: usize) {
        let n = self.n();
        // a policy passes an index < n: no division then
        self.sim.vms[self.vm].last_boosted = if idx < n { idx } else { idx % n.max(1) };
    }
    fn view(&self, idx: usize) -> VcpuView {
        self.sim.view(self.vcpu0 + idx)
    }
    fn examine(&mut self) {
        self.t += self.candidate_ns;
    }
    fn eligible_for_directed_yield(&mut self, idx: usize) -> bool {
        let g = self.vcpu0 + idx;
        let v = &mut self.sim.vcpus[g];
        let eligible = !v.in_spin_loop || v.dy_eligible;
        if v.in_spin_loop {
            v.dy_eligible = !v.dy_eligible;
        }
        eligible
    }
    fn yield_to(&mut self, idx: usize) -> i32 {
        let n = self.n();
        if self.yielded || idx >= n || idx == self.me() {
            return 0;
        }
        let g = self.sim.vms[self.vm].vcpu0 as usize + idx;
        let r = self.sim.yield_to(self.spinner, g, &mut self.t);
        if r > 0 {
            self.yielded = true;
        }
        r
    }
    fn random_below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            self.sim.rng_below(n)
        }
    }
    fn waited_for(&self) -> Option<usize> {
        self.sim.waited_for(self.spinner).map(|g| g - self.sim.vms[self.vm].vcpu0 as usize)
    }
}

impl Sim {
    /// A pause-loop exit of the spinning vCPU `v` (now == its PLE instant).
    pub fn ple_exit(&mut self, v: usize) {
        self.pause_act(v);
        let vm = self.vm_of(v);
        let ple = &self.vms[vm].cfg.ple;
        let (base, grow, max, exit_ns) = (ple.window, ple.grow, ple.max, ple.exit_ns);
        let ple = PleLite { kind: ple.kind, candidate_ns: ple.candidate_ns };
        let vc = &mut self.vcpus[v];
        vc.c.ple_exits += 1;
        // handle_pause: grow_ple_window
        vc.ple_window = grow_ple_window(vc.ple_window, base, grow, max);
        vc.c.max_ple_window = vc.c.max_ple_window.max(vc.ple_window);
        // kvm_vcpu_on_spin
        let mut t = self.now + exit_ns;
        let mut yielded = false;
        self.wake.boost_task = NO_TASK;
        if self.vms[vm].nvcpu >= 2 {
            self.vcpus[v].in_spin_loop = true;
            let upstream = self.vms[vm].upstream;
            // VMX PLE fires only at CPL 0; SVM passes the CPL it read.
            let in_kernel = match ple.kind {
                PleKind::Vmx => true,
                PleKind::Svm => self.vcpus[v].in_kernel,
            };
            let (vcpu0, n) = (self.vms[vm].vcpu0 as usize, self.vms[vm].nvcpu as usize);
            let candidate_ns = ple.candidate_ns;
            let tokens = self.tokens_on();
            let mut ctx = PleCtx {
                sim: self,
                spinner: v,
                me: v - vcpu0,
                vm,
                t,
                yielded: false,
                vcpu0,
                n,
                in_kernel,
                candidate_ns,
                tokens,
            };
            let res = match upstream {
                Some(up) => {
                    up.scan(&mut ctx);
                    Ok(())
                }
                None => {
                    // the policy needs `&mut` while the context holds the Sim
                    let mut policy = std::mem::replace(&mut ctx.sim.vms[vm].policy, Box::new(super::policy::NoYield));
                    let res = policy.on_spin(&mut ctx);
                    ctx.sim.vms[vm].policy = policy;
                    res
                }
            };
            t = ctx.t;
            yielded = ctx.yielded;
            if let Err(e) = res {
                // where it failed, as the real scheduler says it (src/kvm/sched)
                let name = &self.vms[vm].cfg.policy.name;
                self.error = Some(format!(
                    "VM {vm}'s policy '{name}' raised on the pause-loop exit of vCPU {} at {} ns simulated: {e}",
                    v - vcpu0,
                    self.now
                ));
            }
        }
        let boost = if yielded { std::mem::replace(&mut self.wake.boost_task, NO_TASK) } else { NO_TASK };
        self.start_exit(v, t, ExitKind::Ple { yielded, boost }, C_PLE);
    }

    /// Ground truth for the oracle: the vCPU whose progress `v` waits for.
    pub fn waited_for(&self, v: usize) -> Option<usize> {
        let t = self.vcpus[v].cur? as usize;
        let th = &self.threads[t];
        let vm = th.vm as usize;
        match th.step {
            Step::AwaitLock { lock } => {
                // The holder (a ticket or queued lock's release hands the
                // lock to the next waiter, which becomes the holder), if its
                // vCPU is not running; else the first waiter queued ahead of
                // the spinner whose vCPU is not running (it must run before
                // the spinner can), unless that vCPU waits on the CPU the
                // holder runs on: a yield to it would preempt the holder.
                // Until 0.3.12 the oracle made such yields, and the holder
                // and that waiter took one CPU from each other at every
                // switch (ebizzy-like, 16 vCPUs on 8 CPUs, 2012 era: 0-629
                // records in 6 ms against the 2011 handler's ~800).
                let l = &self.vms[vm].locks[lock as usize];
                let not_running = |th: usize| {
                    let tv = self.threads[th].vcpu as usize;
                    (tv != v && self.vcpus[tv].running.is_none()).then_some(tv)
                };
                let holder_cpu = match l.holder {
                    Some(h) => {
                        let hv = self.threads[h as usize].vcpu as usize;
                        match self.vcpus[hv].running {
                            None if hv != v => return Some(hv),
                            r => r,
                        }
                    }
                    None => None,
                };
                if th.pv_unfair {
                    // the hybrid unfair loop takes the lock at its release,
                    // ahead of the queue: it waits for the holder only
                    return None;
                }
                l.waiters
                    .iter()
                    .take_while(|&&w| w as usize != t)
                    .filter_map(|&w| not_running(w as usize))
                    .find(|&tv| Some(self.tasks[self.vcpus[tv].task as usize].cpu) != holder_cpu)
            }
            Step::IpiWait => {
                let (v0, n) = (self.vms[vm].vcpu0 as usize, self.vms[vm].nvcpu as usize);
                (v0..v0 + n)
                    .find(|&o| o != v && self.vcpus[o].running.is_none() && self.vcpus[o].ipis.contains(&(t as u32)))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::config::{HostConfig, PolicyConfig, PolicyKind, Scheduler, SimConfig};
    use crate::sim::policy::candidate_passes;
    use crate::sim::test_util::{computing_vm, sim_of};

    /// The engine's fast filter is the view's filter: under the token
    /// schedulers a blocking vCPU that was woken and has not run since is a
    /// candidate whatever woke it (a timer here: no kick, no posted
    /// interrupt); under the host's scheduler only a kicked or interrupted
    /// one is. Until 0.3.32 the engine's filter ignored the token case
    /// (the view did not), so the built-in upstream policy of a twin passed
    /// over the vCPUs the real scheduler's policy would pick.
    #[test]
    fn engine_filter_is_the_views_under_both_schedulers() {
        for (sched, woken_passes) in [(Scheduler::Fair, false), (Scheduler::RoundRobin, true)] {
            let mut vm = computing_vm(2);
            vm.policy = PolicyConfig { kind: PolicyKind::Upstream, ..Default::default() };
            let c = SimConfig {
                duration_ns: 10_000_000,
                host: HostConfig { n_pcpus: 1, scheduler: sched, ..Default::default() },
                vms: vec![vm],
                ..Default::default()
            };
            let mut s = sim_of(&c);
            s.step_until(1_000_000).unwrap();
            // vCPU 1: halted, then woken by its timer, not run since
            s.ready[1] = true;
            let v1 = &mut s.vcpus[1];
            (v1.blocking, v1.pv_unhalted, v1.posted_irq, v1.preempted) = (true, false, false, false);
            let view = s.view(1);
            let ctx = PleCtx {
                spinner: 0,
                me: 0,
                vm: 0,
                t: 0,
                yielded: false,
                vcpu0: 0,
                n: 2,
                in_kernel: true,
                candidate_ns: 0,
                tokens: s.tokens_on(),
                sim: &mut s,
            };
            let engine = ctx.passes_filter(1, Filter::UPSTREAM);
            assert_eq!(engine, candidate_passes(&view, true, Filter::UPSTREAM), "{sched:?}");
            assert_eq!(engine, woken_passes, "{sched:?}");
        }
    }

    #[test]
    fn vmx_window_doubles_to_uint_max() {
        let (base, max) = (4096u64, u32::MAX as u64);
        let mut w = base;
        let mut seq = vec![w];
        for _ in 0..25 {
            w = grow_ple_window(w, base, 2, max);
            seq.push(w);
        }
        assert_eq!(&seq[..4], &[4096, 8192, 16384, 32768]);
        assert_eq!(*seq.last().unwrap(), max);
        assert_eq!(shrink_ple_window(w, base, 0, base), 4096);
    }

    #[test]
    fn svm_filter_sequence() {
        let (base, max) = (3000u64, 65535u64);
        let mut w = base;
        let mut seq = vec![w];
        for _ in 0..6 {
            w = grow_ple_window(w, base, 2, max);
            seq.push(w);
        }
        assert_eq!(seq, vec![3000, 6000, 12000, 24000, 48000, 65535, 65535]);
    }

    #[test]
    fn large_modifier_adds_and_shrink_divides_or_subtracts() {
        assert_eq!(grow_ple_window(4096, 4096, 5000, u64::MAX), 9096);
        assert_eq!(grow_ple_window(8192, 4096, 0, u64::MAX), 4096);
        assert_eq!(shrink_ple_window(16384, 4096, 2, 4096), 8192);
        assert_eq!(shrink_ple_window(8192, 4096, 2, 4096), 4096);
        assert_eq!(shrink_ple_window(16384, 4096, 5000, 4096), 11384);
        assert_eq!(shrink_ple_window(5000, 4096, 5000, 4096), 4096);
    }
}

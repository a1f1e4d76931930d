//! Directed-yield policies: what `kvm_vcpu_on_spin()` does after a pause-loop exit.
//!
//! A policy sees the VM through a [`SpinCtx`]: live [`VcpuView`]s, the
//! `last_boosted_vcpu` hint, the dy_eligible predicate with its toggle side
//! effect, and `yield_to`, which costs host time and returns as the kernel's
//! does (-ESRCH, 0, 1). Built-in policies follow [K1]; an
//! external policy (a Python callable, via src/py/sim.rs) implements the same
//! trait.

use super::config::{PolicyConfig, PolicyKind};

/// `yield_to()` returned -ESRCH: both run queues hold a single task.
pub const ESRCH: i32 = -3;

/// What a policy may read about one vCPU ([K1]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VcpuView {
    /// Index of the vCPU in its VM (`vcpu_idx`).
    pub index: u32,
    /// The vCPU thread is current on a host CPU (in guest mode or in an exit handler).
    pub running: bool,
    /// Running in guest mode (the task's PF_VCPU); false while in an exit handler.
    pub in_guest: bool,
    /// `vcpu->preempted`: involuntarily scheduled out while runnable inside KVM_RUN.
    pub preempted: bool,
    /// `vcpu->ready`: preempted, or woken from a halt and not yet running.
    pub ready: bool,
    /// `kvm_vcpu_is_blocking()`: halted; stays true after a wake-up until it runs.
    pub blocking: bool,
    /// `vcpu_dy_runnable()`: pv_unhalted (kicked) or a pending posted interrupt.
    pub dy_runnable: bool,
    /// `kvm_arch_dy_has_pending_interrupt()`: posted interrupt pending (APICv).
    pub pending_interrupt: bool,
    /// `spin_loop.in_spin_loop`: inside kvm_vcpu_on_spin (possibly descheduled in yield_to).
    pub in_spin_loop: bool,
    /// `spin_loop.dy_eligible`.
    pub dy_eligible: bool,
    /// `arch.preempted_in_kernel`: CPL 0 when last preempted.
    pub preempted_in_kernel: bool,
    /// Steal-time `preempted` byte as the guest sees it.
    pub st_preempted: bool,
    /// Steal time published to the guest, ns.
    pub steal_ns: u64,
    /// pcpu_is_idle (2021 proposal): nothing else on the host CPU it last ran on.
    pub pcpu_is_idle: bool,
    /// Current PLE window, cycles.
    pub ple_window: u64,
}

/// The host side of one `kvm_vcpu_on_spin()` call, offered to a policy.
pub trait SpinCtx {
    /// Number of online vCPUs of the VM.
    fn n(&self) -> usize;
    /// Index of the spinning vCPU.
    fn me(&self) -> usize;
    /// Index of the VM in the run.
    fn vm(&self) -> usize {
        0
    }
    /// `yield_to_kernel_mode`: the spinner is known to be in guest kernel mode.
    fn spinner_in_kernel(&self) -> bool;
    /// `kvm->last_boosted_vcpu`.
    fn last_boosted(&self) -> usize;
    fn set_last_boosted(&mut self, idx: usize);
    /// Live view of a vCPU of this VM.
    fn view(&self, idx: usize) -> VcpuView;
    /// Charge the cost of examining one candidate.
    fn examine(&mut self);
    /// Charge the cost of examining `k` candidates (`examine` `k` times).
    fn examine_n(&mut self, k: usize) {
        for _ in 0..k {
            self.examine();
        }
    }
    /// Every vCPU of the VM that passes `filter` now, as a bit mask (bit
    /// `i`: vCPU `i`), where the engine keeps one (VMs of up to 64 vCPUs);
    /// `None`: the scan asks [`passes_filter`](Self::passes_filter) of each.
    fn candidate_mask(&self, _filter: Filter) -> Option<u64> {
        None
    }
    /// `kvm_vcpu_eligible_for_directed_yield()`, including the dy_eligible toggle.
    fn eligible_for_directed_yield(&mut self, idx: usize) -> bool;
    /// `kvm_vcpu_yield_to()`: [`ESRCH`], 0 or 1; costs run-queue-lock time.
    fn yield_to(&mut self, idx: usize) -> i32;
    /// Vcpu `idx` has not yet handled an IPI that the spinner's current
    /// thread sent (`kvm_vcpu_is_ipi_receiver` of the 2025 IPI-aware RFC,
    /// with "recent" = still pending); false where the engine cannot tell.
    fn ipi_receiver(&self, _idx: usize) -> bool {
        false
    }
    /// The [K1] candidate filter (before the dy_eligible toggle) on vCPU
    /// `idx`; engines may override it with a faster equivalent.
    fn passes_filter(&self, idx: usize, filter: Filter) -> bool {
        candidate_passes(&self.view(idx), self.spinner_in_kernel(), filter)
    }
    /// `vcpu->preempted` of vCPU `idx` (the candidate gate before 5.3);
    /// engines may override it with a faster equivalent.
    fn preempted(&self, idx: usize) -> bool {
        self.view(idx).preempted
    }
    /// vCPU `idx` is halted and not woken (the 2011 scan's
    /// `waitqueue_active` test); engines may override it with a faster
    /// equivalent.
    fn halted_not_woken(&self, idx: usize) -> bool {
        let v = self.view(idx);
        v.blocking && !v.ready
    }
    /// vCPU `idx` runs in guest mode (the 2011 scan's `PF_VCPU` test);
    /// engines may override it with a faster equivalent.
    fn in_guest(&self, idx: usize) -> bool {
        self.view(idx).in_guest
    }
    /// A uniform draw in `0..n` from the run's seeded RNG.
    fn random_below(&mut self, n: usize) -> usize;
    /// Ground truth: a vCPU, not running, whose progress the spinner waits for
    /// (the lock holder, else the first waiter queued ahead of the spinner
    /// that does not wait on the holder's CPU; an IPI target that has not run
    /// its handler), if any.
    fn waited_for(&self) -> Option<usize>;
}

/// A directed-yield policy. One instance per VM per run; it may keep state.
pub trait DirectedYieldPolicy: Send {
    /// Called on each pause-loop exit of a vCPU of this VM.
    fn on_spin(&mut self, ctx: &mut dyn SpinCtx) -> Result<(), String>;
    /// A copy of this policy if it is the built-in [`Upstream`] (stateless),
    /// which the engine then runs with static dispatch (the same code as
    /// `on_spin`, without a virtual call per candidate).
    fn as_upstream(&self) -> Option<Upstream> {
        None
    }
}

/// Build the policy a VM's config names. `Python` policies come from the caller.
pub fn builtin(cfg: &PolicyConfig) -> Option<Box<dyn DirectedYieldPolicy>> {
    Some(match cfg.kind {
        PolicyKind::NoYield => Box::new(NoYield),
        PolicyKind::Baseline2011 => Box::new(Baseline2011),
        PolicyKind::DyEligible => Box::new(DyEligible { esrch_budget: cfg.esrch_budget }),
        PolicyKind::Upstream => Box::new(Upstream {
            esrch_budget: cfg.esrch_budget,
            last_boosted_bug: cfg.last_boosted_bug,
            dy_eligible: cfg.dy_eligible,
            kernel_filter: cfg.kernel_filter,
            user_mode_irq_boost: cfg.user_mode_irq_boost,
            gate_preempted: cfg.candidate_gate == super::config::CandidateGate::Preempted,
            ipi_aware: cfg.ipi_aware,
        }),
        PolicyKind::Random => Box::new(RandomYield),
        PolicyKind::Oracle => Box::new(Oracle),
        PolicyKind::Python => return None,
    })
}

/// Never yield: a PLE exit only costs its exit.
pub struct NoYield;
impl DirectedYieldPolicy for NoYield {
    fn on_spin(&mut self, _ctx: &mut dyn SpinCtx) -> Result<(), String> {
        Ok(())
    }
}

/// 2011 (Rik van Riel): one round-robin sweep from last_boosted+1 through
/// last_boosted (the "two passes"), skipping itself, halted vCPUs (waitqueue
/// active) and vCPUs running in guest mode (PF_VCPU); stop at the first success.
pub struct Baseline2011;
impl DirectedYieldPolicy for Baseline2011 {
    fn on_spin(&mut self, ctx: &mut dyn SpinCtx) -> Result<(), String> {
        let n = ctx.n();
        let me = ctx.me();
        let start = ctx.last_boosted() + 1;
        for i in 0..n {
            let idx = (start + i) % n;
            if idx == me {
                continue;
            }
            ctx.examine();
            if ctx.halted_not_woken(idx) {
                continue; // waitqueue_active: halted and not woken
            }
            if ctx.in_guest(idx) {
                continue; // PF_VCPU
            }
            if ctx.yield_to(idx) > 0 {
                ctx.set_last_boosted(idx);
                break;
            }
        }
        Ok(())
    }
}

/// 2012 (Raghavendra K T, [S1]): the baseline plus
/// `kvm_vcpu_eligible_for_directed_yield()` (the in_spin_loop/dy_eligible
/// toggle), checked before the PF_VCPU test. `esrch_budget` 0 = unlimited (the
/// patch of [S1]); 3 = the follow-up undercommit patch.
pub struct DyEligible {
    pub esrch_budget: u32,
}
impl DirectedYieldPolicy for DyEligible {
    fn on_spin(&mut self, ctx: &mut dyn SpinCtx) -> Result<(), String> {
        let n = ctx.n();
        let me = ctx.me();
        let start = ctx.last_boosted() + 1;
        let mut budget = self.esrch_budget;
        for i in 0..n {
            let idx = (start + i) % n;
            if idx == me {
                continue;
            }
            ctx.examine();
            if ctx.halted_not_woken(idx) {
                continue;
            }
            if !ctx.eligible_for_directed_yield(idx) {
                continue;
            }
            if ctx.in_guest(idx) {
                continue;
            }
            if yield_step(ctx, idx, idx, &mut budget) {
                break;
            }
        }
        Ok(())
    }
}

/// One `kvm_vcpu_yield_to` of a scan: on success records `boosted` as
/// last_boosted; a failure (-ESRCH) spends one unit of a nonzero `budget`.
/// True when the scan ends (a yield succeeded or the budget ran out).
#[inline]
fn yield_step<C: SpinCtx + ?Sized>(ctx: &mut C, idx: usize, boosted: usize, budget: &mut u32) -> bool {
    let r = ctx.yield_to(idx);
    if r > 0 {
        ctx.set_last_boosted(boosted);
        return true;
    }
    if r < 0 && *budget > 0 {
        *budget -= 1;
        return *budget == 0;
    }
    false
}

/// Upstream today ([K1]): one pass from last_boosted+1;
/// skip not-ready; blocking ⇒ dy_runnable; the kernel-mode filter for
/// preempted candidates; the dy_eligible toggle; -ESRCH budget.
#[derive(Clone, Copy, Debug)]
pub struct Upstream {
    pub esrch_budget: u32,
    pub last_boosted_bug: bool,
    pub dy_eligible: bool,
    pub kernel_filter: bool,
    /// A pending posted interrupt lets a user-mode candidate through the
    /// kernel-mode filter (`PolicyConfig::user_mode_irq_boost`, v5.13).
    pub user_mode_irq_boost: bool,
    /// The candidate gate is `vcpu->preempted` (kernels before 5.3) instead
    /// of `vcpu->ready`: a vCPU woken from a halt that has not run yet is
    /// not a candidate.
    pub gate_preempted: bool,
    /// IPI-aware candidate selection (`PolicyConfig::ipi_aware`).
    pub ipi_aware: bool,
}
impl DirectedYieldPolicy for Upstream {
    fn on_spin(&mut self, ctx: &mut dyn SpinCtx) -> Result<(), String> {
        self.scan(ctx);
        Ok(())
    }
    fn as_upstream(&self) -> Option<Upstream> {
        Some(*self)
    }
}
impl Upstream {
    /// The pass of `kvm_vcpu_on_spin`, generic over the context so that the
    /// engine's own context is called without dynamic dispatch.
    #[inline]
    pub fn scan<C: SpinCtx + ?Sized>(&self, ctx: &mut C) {
        let n = ctx.n();
        if n < 2 {
            return;
        }
        let me = ctx.me();
        let start = ctx.last_boosted() + 1;
        let mut budget = self.esrch_budget;
        if !self.gate_preempted && !self.ipi_aware && !self.last_boosted_bug {
            let filter = Filter { kernel: self.kernel_filter, irq_exempt: self.user_mode_irq_boost };
            if let Some(mask) = ctx.candidate_mask(filter) {
                self.scan_mask(ctx, mask, start % n, budget);
                return;
            }
        }
        // idx = (start + i) % n, without a division per candidate
        let mut idx = start % n;
        for i in 0..n {
            let here = idx;
            idx += 1;
            if idx == n {
                idx = 0;
            }
            let idx = here;
            if idx == me {
                continue;
            }
            ctx.examine();
            if self.gate_preempted && !ctx.preempted(idx) {
                continue;
            }
            // kvm_vcpu_is_good_yield_candidate (IPI-aware RFC): a pending IPI
            // receiver of the spinner is good whatever mode it was preempted in
            let kernel = self.kernel_filter && !(self.ipi_aware && ctx.ipi_receiver(idx));
            if !upstream_filter(ctx, idx, Filter { kernel, irq_exempt: self.user_mode_irq_boost }) {
                continue;
            }
            if self.dy_eligible && !ctx.eligible_for_directed_yield(idx) {
                continue;
            }
            if yield_step(ctx, idx, if self.last_boosted_bug { i } else { idx }, &mut budget) {
                return;
            }
        }
        if self.ipi_aware {
            self.relaxed_round(ctx, start, budget);
        }
    }

    /// The same pass as [`scan`](Self::scan) over the candidates of `mask`
    /// alone (those that pass the filter), the rest of the VM's vCPUs
    /// charged as examined in bulk: the same yields, the same dy_eligible
    /// toggles, the same time charged before each `yield_to`, without a
    /// branch per vCPU that fails the filter.
    fn scan_mask<C: SpinCtx + ?Sized>(&self, ctx: &mut C, mask: u64, start: usize, mut budget: u32) {
        let (n, me) = (ctx.n(), ctx.me());
        // a vCPU's place in the pass: its offset from `start`
        let offset = |idx: usize| if idx >= start { idx - start } else { idx + n - start };
        let me_off = offset(me);
        let m = mask & !(1u64 << me);
        let below_start = (1u64 << start) - 1;
        // `next`: the offset of the first place not yet examined
        let (mut next, mut examined) = (0usize, 0usize);
        for mut bits in [m & !below_start, m & below_start] {
            while bits != 0 {
                let idx = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let off = offset(idx);
                // every place from `next` to this one, the spinner's not examined
                let k = off + 1 - next - usize::from(me_off >= next && me_off < off);
                ctx.examine_n(k);
                examined += k;
                next = off + 1;
                if self.dy_eligible && !ctx.eligible_for_directed_yield(idx) {
                    continue;
                }
                if yield_step(ctx, idx, idx, &mut budget) {
                    return;
                }
            }
        }
        ctx.examine_n(n - 1 - examined);
    }

    /// The IPI-aware RFC's second round: `vcpu->preempted` only.
    fn relaxed_round<C: SpinCtx + ?Sized>(&self, ctx: &mut C, start: usize, mut budget: u32) {
        let (n, me) = (ctx.n(), ctx.me());
        for i in 0..n {
            let idx = (start + i) % n;
            if idx == me {
                continue;
            }
            ctx.examine();
            if !ctx.preempted(idx) {
                continue;
            }
            if yield_step(ctx, idx, if self.last_boosted_bug { i } else { idx }, &mut budget) {
                return;
            }
        }
    }
}

/// The kernel-mode part of the candidate filter: whether it applies
/// (`yield_to_kernel_mode`, `PolicyConfig::kernel_filter`) and whether a
/// pending posted interrupt exempts a user-mode candidate from it
/// (`PolicyConfig::user_mode_irq_boost`, v5.13).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Filter {
    pub kernel: bool,
    pub irq_exempt: bool,
}

impl Filter {
    /// No kernel-mode filter (the random and Python-facing scans).
    pub const NONE: Filter = Filter { kernel: false, irq_exempt: true };
    /// Today's upstream filter.
    pub const UPSTREAM: Filter = Filter { kernel: true, irq_exempt: true };
}

/// The candidate filter of [K1], before the dy_eligible toggle:
/// ready → (blocking ⇒ dy_runnable) → (preempted ∧ spinner in kernel ⇒ target
/// in kernel, or has a pending interrupt where `filter.irq_exempt`).
#[inline]
pub fn upstream_filter<C: SpinCtx + ?Sized>(ctx: &C, idx: usize, filter: Filter) -> bool {
    ctx.passes_filter(idx, filter)
}

/// The same filter on a plain view (unit-testable on hand-built states).
pub fn candidate_passes(v: &VcpuView, spinner_in_kernel: bool, filter: Filter) -> bool {
    if !v.ready {
        return false;
    }
    if v.blocking && !v.dy_runnable {
        return false;
    }
    let exempt = filter.irq_exempt && v.pending_interrupt;
    if filter.kernel && v.preempted && spinner_in_kernel && !exempt && !v.preempted_in_kernel {
        return false;
    }
    true
}

/// One uniformly random candidate among those passing the upstream filter; one attempt.
pub struct RandomYield;
impl DirectedYieldPolicy for RandomYield {
    fn on_spin(&mut self, ctx: &mut dyn SpinCtx) -> Result<(), String> {
        let n = ctx.n();
        let me = ctx.me();
        let mut cands = Vec::new();
        for idx in 0..n {
            if idx != me {
                ctx.examine();
                if upstream_filter(ctx, idx, Filter::NONE) {
                    cands.push(idx);
                }
            }
        }
        if !cands.is_empty() {
            let idx = cands[ctx.random_below(cands.len())];
            if ctx.yield_to(idx) > 0 {
                ctx.set_last_boosted(idx);
            }
        }
        Ok(())
    }
}

/// Yields straight to the vCPU the spinner waits for, if it is not running:
/// knowledge no kernel has: a reference for directed yield, not a bound
/// everywhere (`vcpulab.sim.policies.oracle` says where it is beaten).
pub struct Oracle;
impl DirectedYieldPolicy for Oracle {
    fn on_spin(&mut self, ctx: &mut dyn SpinCtx) -> Result<(), String> {
        if let Some(idx) = ctx.waited_for() {
            ctx.examine();
            let v = ctx.view(idx);
            if !v.running && ctx.yield_to(idx) > 0 {
                ctx.set_last_boosted(idx);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v() -> VcpuView {
        VcpuView::default()
    }

    /// A VM whose vCPUs' filter results, spin-loop flags and yield results
    /// are drawn at random; it logs every call a scan makes and when.
    struct Mock {
        n: usize,
        me: usize,
        last_boosted: usize,
        pass: Vec<bool>,
        spin: Vec<bool>,
        dye: Vec<bool>,
        yields: Vec<i32>,
        t: u64,
        log: Vec<(char, usize, u64)>,
        masked: bool,
    }

    impl SpinCtx for Mock {
        fn n(&self) -> usize {
            self.n
        }
        fn me(&self) -> usize {
            self.me
        }
        fn spinner_in_kernel(&self) -> bool {
            true
        }
        fn last_boosted(&self) -> usize {
            self.last_boosted
        }
        fn set_last_boosted(&mut self, idx: usize) {
            self.log.push(('b', idx, self.t));
        }
        fn view(&self, _idx: usize) -> VcpuView {
            v()
        }
        fn examine(&mut self) {
            self.t += 40;
        }
        fn examine_n(&mut self, k: usize) {
            if self.masked {
                self.t += 40 * k as u64;
            } else {
                (0..k).for_each(|_| self.examine());
            }
        }
        fn eligible_for_directed_yield(&mut self, idx: usize) -> bool {
            self.log.push(('e', idx, self.t));
            let eligible = !self.spin[idx] || self.dye[idx];
            if self.spin[idx] {
                self.dye[idx] = !self.dye[idx];
            }
            eligible
        }
        fn yield_to(&mut self, idx: usize) -> i32 {
            self.log.push(('y', idx, self.t));
            self.t += 7;
            self.yields[idx]
        }
        fn passes_filter(&self, idx: usize, _filter: Filter) -> bool {
            self.pass[idx]
        }
        fn candidate_mask(&self, _filter: Filter) -> Option<u64> {
            self.masked.then(|| (0..self.n).filter(|&i| self.pass[i]).fold(0, |m, i| m | 1 << i))
        }
        fn random_below(&mut self, _n: usize) -> usize {
            0
        }
        fn waited_for(&self) -> Option<usize> {
            None
        }
    }

    /// The pass over a candidate mask makes the same calls at the same
    /// instants as the pass that asks each vCPU: the same dy_eligible
    /// toggles, the same yields, the same time charged before each, the
    /// same whole cost, over 20,000 random VMs (2-64 vCPUs, any spinner and
    /// last_boosted, yields that succeed, fail or find no task, ESRCH budgets).
    #[test]
    fn masked_scan_is_the_per_vcpu_scan() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rnd = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for _ in 0..20_000 {
            let n = 2 + rnd(63) as usize;
            let p_pass = rnd(4);
            let mk = |masked| Mock {
                n,
                me: 0,
                last_boosted: 0,
                pass: vec![],
                spin: vec![],
                dye: vec![],
                yields: vec![],
                t: 0,
                log: vec![],
                masked,
            };
            let mut a = mk(false);
            a.me = rnd(n as u64) as usize;
            a.last_boosted = rnd(n as u64) as usize;
            a.pass = (0..n).map(|_| rnd(4) < p_pass).collect();
            a.spin = (0..n).map(|_| rnd(2) == 0).collect();
            a.dye = (0..n).map(|_| rnd(2) == 0).collect();
            a.yields = (0..n).map(|_| [1, 0, ESRCH][rnd(3) as usize]).collect();
            let mut b = mk(true);
            (b.me, b.last_boosted) = (a.me, a.last_boosted);
            (b.pass, b.spin, b.dye, b.yields) = (a.pass.clone(), a.spin.clone(), a.dye.clone(), a.yields.clone());
            let up = Upstream {
                esrch_budget: rnd(4) as u32,
                last_boosted_bug: false,
                dy_eligible: rnd(2) == 0,
                kernel_filter: true,
                user_mode_irq_boost: true,
                gate_preempted: false,
                ipi_aware: false,
            };
            up.scan(&mut a);
            up.scan(&mut b);
            assert_eq!(a.log, b.log, "n {n} me {} start {}", a.me, a.last_boosted + 1);
            assert_eq!((a.t, &a.dye), (b.t, &b.dye));
        }
    }

    #[test]
    fn filter_running_is_skipped() {
        let running = VcpuView { running: true, in_guest: true, ..v() };
        assert!(!candidate_passes(&running, true, Filter::UPSTREAM));
    }

    #[test]
    fn filter_preempted_in_kernel_passes() {
        let p = VcpuView { preempted: true, ready: true, preempted_in_kernel: true, ..v() };
        assert!(candidate_passes(&p, true, Filter::UPSTREAM));
    }

    #[test]
    fn filter_preempted_in_user_mode() {
        let p = VcpuView { preempted: true, ready: true, preempted_in_kernel: false, ..v() };
        // skipped when the spinner is in kernel mode (VMX PLE) ...
        assert!(!candidate_passes(&p, true, Filter::UPSTREAM));
        // ... but boosted when the spinner is in user mode (SVM) ...
        assert!(candidate_passes(&p, false, Filter::UPSTREAM));
        // ... or when the target has a posted interrupt pending (v5.13+) ...
        let pi = VcpuView { pending_interrupt: true, ..p.clone() };
        assert!(candidate_passes(&pi, true, Filter::UPSTREAM));
        // ... but not before 5.13 (52acd22faa1a), whatever it has pending.
        assert!(!candidate_passes(&pi, true, Filter { kernel: true, irq_exempt: false }));
        // without the filter (pre-4.14 kernels) it passes.
        assert!(candidate_passes(&p, true, Filter::NONE));
    }

    #[test]
    fn filter_halted_not_woken_is_skipped() {
        let h = VcpuView { blocking: true, ..v() };
        assert!(!candidate_passes(&h, true, Filter::UPSTREAM));
    }

    #[test]
    fn filter_woken_by_timer_only_is_skipped_but_kicked_passes() {
        let timer = VcpuView { blocking: true, ready: true, ..v() };
        assert!(!candidate_passes(&timer, true, Filter::UPSTREAM));
        let kicked = VcpuView { dy_runnable: true, ..timer };
        assert!(candidate_passes(&kicked, true, Filter::UPSTREAM));
    }

    /// A hand-built VM for the policy loops.
    struct Fake {
        views: Vec<VcpuView>,
        me: usize,
        last: usize,
        yields: Vec<usize>,
        results: Vec<i32>,
        /// vCPUs holding an unhandled IPI from the spinner.
        receivers: Vec<usize>,
    }
    impl SpinCtx for Fake {
        fn ipi_receiver(&self, idx: usize) -> bool {
            self.receivers.contains(&idx)
        }
        fn n(&self) -> usize {
            self.views.len()
        }
        fn me(&self) -> usize {
            self.me
        }
        fn spinner_in_kernel(&self) -> bool {
            true
        }
        fn last_boosted(&self) -> usize {
            self.last
        }
        fn set_last_boosted(&mut self, idx: usize) {
            self.last = idx;
        }
        fn view(&self, idx: usize) -> VcpuView {
            self.views[idx].clone()
        }
        fn examine(&mut self) {}
        fn eligible_for_directed_yield(&mut self, idx: usize) -> bool {
            let v = &mut self.views[idx];
            let e = !v.in_spin_loop || v.dy_eligible;
            if v.in_spin_loop {
                v.dy_eligible = !v.dy_eligible;
            }
            e
        }
        fn yield_to(&mut self, idx: usize) -> i32 {
            self.yields.push(idx);
            self.results.get(self.yields.len() - 1).copied().unwrap_or(0)
        }
        fn random_below(&mut self, _n: usize) -> usize {
            0
        }
        fn waited_for(&self) -> Option<usize> {
            None
        }
    }

    fn preempted() -> VcpuView {
        VcpuView { preempted: true, ready: true, preempted_in_kernel: true, ..v() }
    }

    /// A VM of `views` seen from vCPU `me`, `last` boosted, yield_to answering `results` in turn.
    fn fake(views: Vec<VcpuView>, me: usize, last: usize, results: Vec<i32>) -> Fake {
        Fake { views, me, last, yields: vec![], results, receivers: vec![] }
    }

    /// kvm_vcpu_on_spin as upstream has it today (the simulator's defaults).
    fn upstream() -> Upstream {
        Upstream {
            esrch_budget: 3,
            last_boosted_bug: false,
            dy_eligible: true,
            kernel_filter: true,
            user_mode_irq_boost: true,
            gate_preempted: false,
            ipi_aware: false,
        }
    }

    #[test]
    fn upstream_scans_round_robin_from_last_boosted_and_stops_on_success() {
        let mut f = fake(vec![preempted(); 5], 1, 2, vec![0, 1]);
        let mut p = upstream();
        p.on_spin(&mut f).unwrap();
        assert_eq!(f.yields, vec![3, 4]);
        assert_eq!(f.last, 4);
    }

    #[test]
    fn upstream_last_boosted_bug_stores_the_offset() {
        let mut f = fake(vec![preempted(); 5], 1, 2, vec![0, 1]);
        let mut p = Upstream { last_boosted_bug: true, ..upstream() };
        p.on_spin(&mut f).unwrap();
        assert_eq!(f.last, 1); // offset i = 1, not index 4
    }

    #[test]
    fn upstream_esrch_budget_is_three() {
        let mut f = fake(vec![preempted(); 8], 0, 0, vec![ESRCH; 8]);
        let mut p = upstream();
        p.on_spin(&mut f).unwrap();
        assert_eq!(f.yields, vec![1, 2, 3]);
    }

    #[test]
    fn dy_eligible_toggle_skips_a_spinner_every_other_time() {
        let spinning = VcpuView { in_spin_loop: true, ..preempted() };
        let mut f = fake(vec![preempted(), spinning], 0, 0, vec![]);
        let mut p = upstream();
        p.on_spin(&mut f).unwrap(); // dy_eligible false -> skipped, toggled to true
        assert!(f.yields.is_empty());
        p.on_spin(&mut f).unwrap(); // now eligible
        assert_eq!(f.yields, vec![1]);
        p.on_spin(&mut f).unwrap(); // skipped again
        assert_eq!(f.yields, vec![1]);
    }

    #[test]
    fn baseline_skips_running_in_guest_and_halted_only() {
        let in_guest = VcpuView { running: true, in_guest: true, ..v() };
        let in_exit = VcpuView { running: true, in_guest: false, ..v() };
        let halted = VcpuView { blocking: true, ..v() };
        let mut f = fake(vec![v(), in_guest, in_exit, halted, preempted()], 0, 0, vec![0, 1]);
        Baseline2011.on_spin(&mut f).unwrap();
        assert_eq!(f.yields, vec![2, 4]);
    }

    #[test]
    fn ipi_aware_selection_boosts_a_receiver_preempted_in_user_mode_then_relaxes() {
        // vCPU 2 holds the spinner's IPI but was preempted in guest user mode:
        // upstream's in-kernel filter skips it, the IPI-aware filter takes it
        let user = VcpuView { preempted: true, ready: true, preempted_in_kernel: false, ..v() };
        let views = vec![v(), v(), user.clone(), v()];
        let up = upstream();
        let mut f = Fake { receivers: vec![2], ..fake(views.clone(), 0, 0, vec![1]) };
        up.clone().on_spin(&mut f).unwrap();
        assert!(f.yields.is_empty(), "upstream skips it");
        let mut aware = up;
        aware.ipi_aware = true;
        let mut f = Fake { receivers: vec![2], ..fake(views, 0, 0, vec![1]) };
        aware.on_spin(&mut f).unwrap();
        assert_eq!((f.yields.clone(), f.last), (vec![2], 2));
        // no receiver: the strict round finds nobody (user-mode preemption), the
        // relaxed round boosts the first preempted vCPU after last_boosted
        let views = vec![v(), user.clone(), v(), user];
        let mut f = fake(views, 0, 2, vec![1]);
        aware.on_spin(&mut f).unwrap();
        assert_eq!(f.yields, vec![3]);
    }
}

//! `kvm_vcpu_on_spin` over real vCPUs: the [`SpinCtx`] a directed-yield policy
//! of `crate::sim::policy` sees at a pv spin exit, and the CPU-time clock its
//! deadline is measured with.

use super::*;

/// `kvm_vcpu_on_spin`'s view of the scheduler, offered to a directed-yield
/// policy: the same [`SpinCtx`] the simulator offers, over real vCPUs.
pub(super) struct RealSpin<'a> {
    pub(super) s: &'a Scheduler,
    pub(super) st: &'a mut State,
    pub(super) now: Instant,
    pub(super) vm: usize,
    /// The spinner (global index) and its CPU (token index).
    pub(super) me: usize,
    pub(super) cpu: usize,
    pub(super) holder: Option<usize>,
    pub(super) attempts: u32,
    pub(super) yielded: Option<usize>,
}

impl RealSpin<'_> {
    fn global(&self, idx: usize) -> Option<usize> {
        self.s.vm_members[self.vm].get(idx).copied()
    }
}

impl SpinCtx for RealSpin<'_> {
    fn n(&self) -> usize {
        self.s.vm_members[self.vm].len()
    }
    fn me(&self) -> usize {
        self.st.v[self.me].idx
    }
    fn vm(&self) -> usize {
        self.vm
    }
    fn spinner_in_kernel(&self) -> bool {
        true // the spin-lock programs run at CPL 0
    }
    fn last_boosted(&self) -> usize {
        self.st.last_boosted[self.vm]
    }
    fn set_last_boosted(&mut self, idx: usize) {
        let n = self.n().max(1);
        self.st.last_boosted[self.vm] = idx % n;
    }
    fn view(&self, idx: usize) -> VcpuView {
        let Some(g) = self.global(idx) else { return VcpuView::default() };
        let v = &self.st.v[g];
        let running = matches!(v.status, Status::Running(_));
        VcpuView {
            index: idx as u32,
            running,
            in_guest: running,
            preempted: v.preempted && v.status == Status::Ready,
            ready: v.status == Status::Ready,
            blocking: v.status == Status::Halted || (v.woken && v.status == Status::Ready),
            dy_runnable: v.woken,
            pending_interrupt: false,
            in_spin_loop: v.in_spin_loop,
            dy_eligible: v.dy_eligible,
            preempted_in_kernel: true,
            st_preempted: v.preempted,
            steal_ns: 0,
            pcpu_is_idle: v.last_cpu.is_some_and(|c| self.st.holder[c].is_none()),
            ple_window: v.window,
        }
    }
    fn examine(&mut self) {}
    fn eligible_for_directed_yield(&mut self, idx: usize) -> bool {
        let Some(g) = self.global(idx) else { return false };
        let v = &mut self.st.v[g];
        let eligible = !v.in_spin_loop || v.dy_eligible;
        if v.in_spin_loop {
            v.dy_eligible = !v.dy_eligible;
        }
        eligible
    }
    fn yield_to(&mut self, idx: usize) -> i32 {
        self.attempts += 1;
        let Some(t) = self.global(idx) else { return 0 };
        if self.yielded.is_some() || t == self.me {
            return 0;
        }
        match self.st.v[t].status {
            Status::Ready => {
                // the spinner's token goes to the candidate; the spinner waits at the queue's tail
                let s = self.s;
                let q = s.queue_of(self.st, t);
                self.st.queues[q].retain(|&x| x != t);
                let now = self.now;
                let c = self.cpu;
                s.vacate(self.st, c, self.me, now);
                s.enqueue(self.st, self.me);
                s.set_preempted(self.st, self.me, true);
                s.grant(self.st, now, c, t, now + s.slice(), Some(self.me), Why::Yield);
                self.yielded = Some(t);
                1
            }
            Status::Running(_) => {
                // yield_to's -ESRCH: both run queues hold one task (nobody waits for a token)
                if self.st.queues.iter().all(|q| q.is_empty()) {
                    ESRCH
                } else {
                    0
                }
            }
            Status::Halted | Status::Done => 0,
        }
    }
    fn random_below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            self.st.rng.random_range(0..n)
        }
    }
    fn waited_for(&self) -> Option<usize> {
        let h = self.holder?;
        (!matches!(self.st.v[h].status, Status::Running(_))).then_some(self.st.v[h].idx)
    }
}

/// A policy call fails the run past this many `policy_deadline_ns` of wall
/// time, whatever its CPU time (a call blocked on a lock or a sleep).
pub const POLICY_WALL_FACTOR: u64 = 10;

/// This thread's CPU time, ns (`CLOCK_THREAD_CPUTIME_ID`; 0 if unreadable).
pub(super) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec on this stack frame; the call
    // only writes it, and CLOCK_THREAD_CPUTIME_ID is always present on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

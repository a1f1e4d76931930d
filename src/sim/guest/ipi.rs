//! The guest kernel's IPIs: call-function and TLB-flush IPIs sent to other
//! vCPUs, their handlers and the sender's wait for the acknowledgements.

use super::super::engine::Sim;
use super::super::state::*;
use super::Flow;

impl Sim {
    // -------------------------------------------------------------------- IPIs

    pub(crate) fn send_ipis(&mut self, v: usize, t: usize, targets: u32, tlb_flush: bool) -> Flow {
        let vm = self.vm_of(v);
        let (v0, n) = (self.vms[vm].vcpu0 as usize, self.vms[vm].nvcpu as usize);
        let mut others: Vec<usize> = (v0..v0 + n).filter(|&x| x != v).collect();
        if targets > 0 && (targets as usize) < others.len() {
            // partial Fisher-Yates: the first `targets` are a uniform sample
            for i in 0..targets as usize {
                let j = i + self.rng_below(others.len() - i);
                others.swap(i, j);
            }
            others.truncate(targets as usize);
            others.sort_unstable();
        }
        let pv = &self.vms[vm].cfg.pv;
        if tlb_flush && pv.tlb_flush && pv.steal_time {
            // kvm_flush_tlb_multi: a preempted target gets KVM_VCPU_FLUSH_TLB in its
            // steal-time flags instead of an IPI; the host flushes at its sched-in
            let before = others.len();
            others.retain(|&o| !self.vcpus[o].st_preempted);
            self.vcpus[v].c.tlb_flush_skipped += (before - others.len()) as u64;
        }
        // sending: one PV_SEND_IPI hypercall, or one ICR-write exit per target
        let pv = &self.vms[vm].cfg.pv;
        let send_ns = if others.is_empty() {
            0
        } else if pv.send_ipi {
            pv.hypercall_ns
        } else {
            pv.icr_write_ns * others.len() as u64
        };
        self.threads[t].acks = others.len() as u32;
        self.vcpus[v].c.ipis_sent += others.len() as u64;
        self.threads[t].step = Step::IpiWait;
        for &o in &others {
            self.vcpus[o].ipis.push_back(t as u32);
            self.vcpu_host_wake(o, WakeReason::Ipi);
        }
        let pv = &self.vms[vm].cfg.pv;
        if pv.sched_yield && pv.steal_time {
            if let Some(&target) = others.iter().find(|&&o| self.vcpus[o].st_preempted) {
                // kvm_smp_send_call_func_ipi: KVM_HC_SCHED_YIELD to the first preempted target
                let cost = pv.hypercall_ns;
                let mut tt = self.now + send_ns + cost;
                self.wake.boost_task = NO_TASK;
                let yielded = self.kvm_sched_yield(v, target, &mut tt);
                let boost = if yielded { std::mem::replace(&mut self.wake.boost_task, NO_TASK) } else { NO_TASK };
                self.start_exit(v, tt, ExitKind::Hypercall { yielded, boost }, C_EXIT);
                return Flow::Started;
            }
        }
        if send_ns > 0 {
            let end = self.now + send_ns;
            self.start_exit(v, end, ExitKind::Hypercall { yielded: false, boost: NO_TASK }, C_EXIT);
            return Flow::Started;
        }
        Flow::Again
    }

    pub(crate) fn ipi_ack(&mut self, sender: usize) {
        let th = &mut self.threads[sender];
        th.acks = th.acks.saturating_sub(1);
        if th.acks == 0 {
            let sv = th.vcpu as usize;
            self.poke(sv);
        }
    }
}

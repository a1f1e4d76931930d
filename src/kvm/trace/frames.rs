//! A trace's events as the columns of the Run's frames (trace, wakeups,
//! exits, halts), with each vCPU thread's slices and the switch-ins
//! inferred where the trace began mid-slice.

use super::*;

/// A vCPU thread of the traced run: its tid, VM index and vCPU id.
#[derive(Debug, Clone, Copy)]
pub struct VcpuThread {
    pub tid: i32,
    pub vm: i64,
    pub vcpu: i64,
}

/// The columns of `Run.trace`, `Run.wakeups`, `Run.exits` and `Run.halts`;
/// times in ns relative to the window's start; `NONE` marks a null.
#[derive(Debug, Default)]
pub struct Frames {
    // trace: one row per interval a task ran on a traced CPU
    pub t_pcpu: Vec<i64>,
    pub t_start_ns: Vec<i64>,
    pub t_end_ns: Vec<i64>,
    pub t_vm: Vec<i64>,
    pub t_vcpu: Vec<i64>,
    pub t_tid: Vec<i64>,
    pub t_comm: Vec<String>,
    // wakeups of vCPU threads
    pub w_vm: Vec<i64>,
    pub w_vcpu: Vec<i64>,
    pub w_tid: Vec<i64>,
    pub w_wake_ns: Vec<i64>,
    pub w_run_ns: Vec<i64>,
    // exits
    pub e_vm: Vec<i64>,
    pub e_vcpu: Vec<i64>,
    pub e_reason: Vec<String>,
    pub e_exit_ns: Vec<i64>,
    pub e_entry_ns: Vec<i64>,
    // halts
    pub h_vm: Vec<i64>,
    pub h_vcpu: Vec<i64>,
    pub h_time_ns: Vec<i64>,
    pub h_polled: Vec<bool>,
    pub h_ns: Vec<i64>,
    pub h_valid: Vec<bool>,
    pub h_window_ns: Vec<i64>,
    /// Which events the exits come from: "kvm_exit" (kvm_exit → kvm_entry) or, where
    /// the kernel emits no kvm_exit, "run_loop" (vcpulab's run loop timed its vCPUs'
    /// `KVM_RUN`s: a return → the next issue, `run_loop.rs`) or "kvm_userspace_exit"
    /// (→ the next KVM_RUN's kvm_fpu load); "none" where the KVM tracepoints were not
    /// recorded ([`TraceOptions::kvm_events`]).
    pub exits_source: &'static str,
    /// Where the frames end, ns from the window's start: the window's end, or
    /// earlier where the trace reached its cap ([`Collected::complete_until_ns`]).
    pub complete_until_ns: i64,
    /// Switches onto a traced CPU that the kernel did not trace, inferred from a later
    /// event of the task on that CPU (see [`Frames::build`]).
    pub inferred_switch_ins: u64,
}

/// Which records open and close an exit's row ([`Frames::exits_source`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExitSource {
    None,
    KvmExit,
    RunLoop,
    UserspaceExit,
}

impl ExitSource {
    fn name(self) -> &'static str {
        match self {
            ExitSource::None => "none",
            ExitSource::KvmExit => "kvm_exit",
            ExitSource::RunLoop => "run_loop",
            ExitSource::UserspaceExit => "kvm_userspace_exit",
        }
    }

    fn opens_with(self, k: &Kind) -> bool {
        matches!(
            (self, k),
            (ExitSource::KvmExit, Kind::KvmExit { .. })
                | (ExitSource::RunLoop, Kind::LoopExit { .. })
                | (ExitSource::UserspaceExit, Kind::UserspaceExit { .. })
        )
    }

    fn closes_with(self, k: &Kind) -> bool {
        matches!(
            (self, k),
            (ExitSource::KvmExit, Kind::KvmEntry { .. })
                | (ExitSource::RunLoop, Kind::LoopEntry)
                | (ExitSource::UserspaceExit, Kind::Fpu { load: true })
        )
    }
}

/// Marks a null in an i64 column of [`Frames`].
pub const NONE: i64 = i64::MIN;

impl Frames {
    /// Builds the frames of the window `[start_ns, end_ns)` (CLOCK_MONOTONIC).
    ///
    /// Switches the kernel did not trace: on some kernels a CPU leaving idle runs
    /// the woken task without a `sched_switch` record (seen here on 6.18 with the
    /// haltpoll cpuidle driver, by perf and ftrace alike: a vCPU thread switched out
    /// 300 times and in 3 times). Every record carries the task that was running
    /// when it was written, so a record of task B on a CPU where the last switch
    /// left task A proves a switch A → B in between; it is inferred at that record's
    /// time (B's slice starts late by at most the gap to the CPU's previous record;
    /// for a vCPU leaving a halt, its first record is `kvm_vcpu_wakeup`, written
    /// just after it resumes) and counted in `inferred_switch_ins`. A pending
    /// wake-up of B is paired with the inferred switch.
    ///
    /// A trace that reached its cap is cut where events are missing: a CPU's
    /// slices end at the first event dropped from its own buffer (its switches
    /// are complete before that), and wake-ups, exits and halts, which pair
    /// records of several CPUs, at the first event dropped from any buffer
    /// ([`Collected::complete_until_ns`], reported as `complete_until_ns`). No
    /// slice is stretched over records that were not kept.
    pub fn build(c: &Collected, start_ns: u64, end_ns: u64, vcpus: &[VcpuThread]) -> Frames {
        let mut f = Frames::default();
        let by_tid: HashMap<i32, VcpuThread> = vcpus.iter().map(|v| (v.tid, *v)).collect();
        let rel = |t: u64| t as i64 - start_ns as i64;
        let (lo, hi) = (start_ns, end_ns.max(start_ns));
        // where the records stop being complete: per CPU (its own switches) and for all
        let cpu_cut = |cpu: u32| c.first_dropped_by_cpu.get(&cpu).map_or(hi, |&t| t.clamp(lo, hi));
        let all_cut = c.first_dropped_ns.map_or(hi, |t| t.clamp(lo, hi));
        f.complete_until_ns = rel(all_cut);
        // trace: per CPU, the task running between consecutive switches
        let mut current: HashMap<u32, (i32, u32, u64)> = HashMap::new();
        let push_slice = |f: &mut Frames, cpu: u32, pid: i32, comm: u32, a: u64, b: u64| {
            let (a, b) = (a.max(lo), b.min(cpu_cut(cpu)));
            if pid == 0 || b <= a {
                return;
            }
            let who = by_tid.get(&pid);
            f.t_pcpu.push(cpu as i64);
            f.t_start_ns.push(rel(a));
            f.t_end_ns.push(rel(b));
            f.t_vm.push(who.map_or(-1, |w| w.vm));
            f.t_vcpu.push(who.map_or(-1, |w| w.vcpu));
            f.t_tid.push(pid as i64);
            f.t_comm.push(c.comms.get(comm as usize).map(comm_str).unwrap_or_default());
        };
        let traced_cpu = |cpu: u32| c.cpus.contains(&(cpu as usize));
        // wake-ups: the first wake-up of a sleeping vCPU thread, until it is switched in
        let mut pending_wake: HashMap<i32, u64> = HashMap::new();
        let mut running: HashMap<i32, bool> = HashMap::new();
        let mut pending_exit: HashMap<u32, (u32, u64)> = HashMap::new();
        let mut window: HashMap<u32, i64> = HashMap::new();
        let push_exit = |f: &mut Frames, w: &VcpuThread, reason: u32, t: u64, entry: Option<u64>| {
            f.e_vm.push(w.vm);
            f.e_vcpu.push(w.vcpu);
            f.e_reason.push(c.exit_reasons.get(reason as usize).cloned().unwrap_or_default());
            f.e_exit_ns.push(rel(t));
            f.e_entry_ns.push(entry.map_or(NONE, rel));
        };
        // Where the kernel emits no kvm_exit for these threads (kvm_pvm's software path),
        // the exits are those that reached user space, until the next KVM_RUN loads the FPU.
        // Where the run loop timed them (run_loop.rs), its rows replace kvm_userspace_exit's.
        // one pass over the events: does kvm_exit fire for a vCPU thread, did its run loop time exits
        let (mut from_kvm_exit, mut from_run_loop) = (false, false);
        for e in &c.events {
            if matches!(e.kind, Kind::KvmExit { .. } | Kind::LoopExit { .. }) && by_tid.contains_key(&(e.tid as i32)) {
                let kvm = matches!(e.kind, Kind::KvmExit { .. });
                from_kvm_exit |= kvm;
                from_run_loop |= !kvm;
                if from_kvm_exit {
                    break;
                }
            }
        }
        let source = if from_kvm_exit {
            ExitSource::KvmExit
        } else if from_run_loop {
            ExitSource::RunLoop
        } else if !c.kvm_events {
            ExitSource::None
        } else {
            ExitSource::UserspaceExit
        };
        f.exits_source = source.name();
        // a wake-up at `t` of a vCPU thread that ran from `run`, both in the window
        let push_wake = |f: &mut Frames, w: &VcpuThread, t: u64, run: u64| {
            if t >= lo && run >= lo && run < all_cut {
                f.w_vm.push(w.vm);
                f.w_vcpu.push(w.vcpu);
                f.w_tid.push(w.tid as i64);
                f.w_wake_ns.push(rel(t));
                f.w_run_ns.push(rel(run));
            }
        };
        // the last comm seen for each pid (for a slice whose switch-in was not traced)
        let mut comm_of: HashMap<i32, u32> = HashMap::new();
        for e in &c.events {
            if e.time_ns >= cpu_cut(e.cpu) {
                continue; // this CPU's buffer lost records from here on (the cap)
            }
            if traced_cpu(e.cpu) {
                // the task this record proves to be running on its CPU
                let on_cpu = match e.kind {
                    Kind::Switch { prev_pid, .. } => Some(prev_pid),
                    _ if e.tid == u32::MAX => None,
                    _ => Some(e.tid as i32),
                };
                if let (Some(b), Some(&(a, a_comm, since))) = (on_cpu, current.get(&e.cpu)) {
                    if a != b {
                        push_slice(&mut f, e.cpu, a, a_comm, since, e.time_ns);
                        let b_comm = match e.kind {
                            Kind::Switch { prev_comm, .. } => prev_comm,
                            _ => comm_of.get(&b).copied().unwrap_or(u32::MAX),
                        };
                        current.insert(e.cpu, (b, b_comm, e.time_ns));
                        running.insert(a, false);
                        running.insert(b, true);
                        f.inferred_switch_ins += 1;
                        if let (Some(w), Some(t)) = (by_tid.get(&b), pending_wake.remove(&b)) {
                            push_wake(&mut f, w, t, e.time_ns);
                        }
                    }
                }
            }
            if e.time_ns >= all_cut && !matches!(e.kind, Kind::Switch { .. }) {
                continue; // pairs records of several CPUs: complete only before the first drop anywhere
            }
            match e.kind {
                Kind::Switch { prev_pid, prev_comm, next_pid, next_comm } => {
                    comm_of.insert(prev_pid, prev_comm);
                    comm_of.insert(next_pid, next_comm);
                    if traced_cpu(e.cpu) {
                        let (pid, comm, since) = current.get(&e.cpu).copied().unwrap_or((prev_pid, prev_comm, lo));
                        push_slice(&mut f, e.cpu, pid, comm, since, e.time_ns);
                        current.insert(e.cpu, (next_pid, next_comm, e.time_ns));
                    }
                    running.insert(prev_pid, false);
                    running.insert(next_pid, true);
                    if let (Some(w), Some(t)) = (by_tid.get(&next_pid), pending_wake.remove(&next_pid)) {
                        push_wake(&mut f, w, t, e.time_ns);
                    }
                }
                Kind::Wakeup { pid, .. } => {
                    if by_tid.contains_key(&pid) && !running.get(&pid).copied().unwrap_or(false) {
                        pending_wake.entry(pid).or_insert(e.time_ns);
                    }
                }
                Kind::KvmExit { reason, .. } | Kind::UserspaceExit { reason, .. } | Kind::LoopExit { reason }
                    if source.opens_with(&e.kind) =>
                {
                    if let Some(w) = by_tid.get(&(e.tid as i32)) {
                        if let Some((r0, t0)) = pending_exit.insert(e.tid, (reason, e.time_ns)) {
                            push_exit(&mut f, w, r0, t0, None);
                        }
                    }
                }
                Kind::KvmEntry { .. } | Kind::Fpu { load: true } | Kind::LoopEntry if source.closes_with(&e.kind) => {
                    if let (Some(w), Some((r0, t0))) = (by_tid.get(&(e.tid as i32)), pending_exit.remove(&e.tid)) {
                        push_exit(&mut f, w, r0, t0, Some(e.time_ns));
                    }
                }
                Kind::HaltPollNs { new, .. } => {
                    if by_tid.contains_key(&(e.tid as i32)) {
                        window.insert(e.tid, new as i64);
                    }
                }
                Kind::VcpuWakeup { ns, waited, valid } => {
                    if let Some(w) = by_tid.get(&(e.tid as i32)) {
                        f.h_vm.push(w.vm);
                        f.h_vcpu.push(w.vcpu);
                        f.h_time_ns.push(rel(e.time_ns));
                        f.h_polled.push(!waited);
                        f.h_ns.push(ns as i64);
                        f.h_valid.push(valid);
                        f.h_window_ns.push(window.get(&e.tid).copied().unwrap_or(NONE));
                    }
                }
                Kind::KvmExit { .. }
                | Kind::KvmEntry { .. }
                | Kind::UserspaceExit { .. }
                | Kind::Fpu { .. }
                | Kind::LoopEntry
                | Kind::LoopExit { .. }
                | Kind::MsiSetIrq
                | Kind::ApicIpi => {}
            }
        }
        let mut open: Vec<_> = current.into_iter().collect();
        open.sort_by_key(|(cpu, _)| *cpu);
        for (cpu, (pid, comm, since)) in open {
            push_slice(&mut f, cpu, pid, comm, since, hi);
        }
        let mut left: Vec<_> = pending_exit.into_iter().collect();
        left.sort_by_key(|(_, (_, t))| *t);
        for (tid, (r0, t0)) in left {
            if let Some(w) = by_tid.get(&(tid as i32)) {
                push_exit(&mut f, w, r0, t0, None);
            }
        }
        f
    }
}

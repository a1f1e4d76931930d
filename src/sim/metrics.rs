//! Results: column tables (one per level: summary, VM, vCPU, host CPU, trace)
//! built from the engine's counters and time accounts at the end of a run.

use super::engine::Sim;
use super::hist::{hist_mean, hist_quantile};
use super::state::*;
pub use super::table::{Column, Table};
use super::SimError;

/// Everything a run returns.
#[derive(Clone, Debug, PartialEq)]
pub struct SimResult {
    pub summary: Table,
    pub vms: Table,
    pub vcpus: Table,
    pub pcpus: Table,
    pub trace: Option<Table>,
    /// vcpulab's scheduler's decisions (with `Config.trace` under a token
    /// scheduler; `src/sim/decisions.rs`).
    pub schedule: Option<Table>,
}

/// The per-vCPU time categories, in accounting order; they sum to the run's duration.
pub const VCPU_CATS: [&str; NCAT] =
    ["useful_ns", "spin_ns", "ple_ns", "exit_ns", "idle_poll_ns", "polling_ns", "wait_ns", "halted_ns"];
/// The per-host-CPU time categories, in accounting order; they sum to the run's duration.
pub const PCPU_CATS: [&str; NCAT] =
    ["useful_ns", "spin_ns", "ple_ns", "exit_ns", "idle_poll_ns", "polling_ns", "bg_ns", "idle_ns"];

/// The result tables of a finished run. The trace is moved out of `sim` and
/// its columns are allocated fallibly: a trace that fit in memory while the
/// run grew it may not fit twice, and that must be a
/// [`SimError::OutOfMemory`] (Python's MemoryError), never an abort.
pub fn collect(sim: &mut Sim) -> Result<SimResult, SimError> {
    let dur = sim.end;
    // throughput is measured after the warm-up
    let secs = dur.saturating_sub(sim.cfg.warmup_ns).max(1) as f64 * 1e-9;
    // ---- vCPUs
    let mut vc = Table::default();
    let vs = &sim.vcpus;
    vc.add("vm", Column::U64(vs.iter().map(|v| v.vm as u64).collect()));
    vc.add("vcpu", Column::U64(vs.iter().map(|v| v.idx as u64).collect()));
    vc.add("last_pcpu", Column::U64(vs.iter().map(|v| v.last_cpu as u64).collect()));
    for (i, name) in VCPU_CATS.iter().enumerate() {
        vc.add(name, Column::U64(vs.iter().map(|v| v.acct.acc[i]).collect()));
    }
    vc.add("running_ns", Column::U64(vs.iter().map(|v| v.acct.acc[..NRUN].iter().sum()).collect()));
    // steal as published to the guest at its last entry (record_steal_time)
    vc.add("steal_ns", Column::U64(vs.iter().map(|v| v.steal_ns).collect()));
    macro_rules! counter {
        ($name:literal, $f:ident) => {
            vc.add($name, Column::U64(vs.iter().map(|v| v.c.$f).collect()));
        };
    }
    counter!("ple_exits", ple_exits);
    counter!("yield_attempts", yield_attempts);
    counter!("yield_ok", yield_ok);
    counter!("yield_esrch", yield_esrch);
    counter!("yield_zero", yield_zero);
    counter!("preemption_reported", preemption_reported);
    counter!("preemption_other", preemption_other);
    // halt polling, under the kernel's stat names ([K3])
    macro_rules! halt_stat {
        ($name:literal, $f:ident) => {
            vc.add($name, Column::U64(vs.iter().map(|v| v.hp.stats.$f).collect()));
        };
    }
    halt_stat!("halt_exits", halt_exits);
    halt_stat!("halt_wakeup", halt_wakeup);
    counter!("directed_yield_attempted", directed_yield_attempted);
    counter!("directed_yield_successful", directed_yield_successful);
    counter!("kicks", kicks);
    counter!("ipis_sent", ipis_sent);
    counter!("sched_in", sched_in);
    counter!("token_grants", token_grants);
    counter!("ple_window_max", max_ple_window);
    halt_stat!("halt_attempted_poll", halt_attempted_poll);
    halt_stat!("halt_successful_poll", halt_successful_poll);
    halt_stat!("halt_poll_success_ns", halt_poll_success_ns);
    halt_stat!("halt_poll_fail_ns", halt_poll_fail_ns);
    halt_stat!("halt_wait_ns", halt_wait_ns);
    halt_stat!("halt_poll_invalid", halt_poll_invalid);
    vc.add("halt_poll_window_ns", Column::U64(vs.iter().map(|v| v.hp.halt_poll_ns).collect()));
    vc.add("ple_window", Column::U64(vs.iter().map(|v| v.ple_window).collect()));
    counter!("pv_wait_node", pv_wait_node);
    counter!("pv_wait_head", pv_wait_head);
    counter!("pv_wait_early", pv_wait_early);
    counter!("lock_steals", lock_steals);
    counter!("osq_gave_up", osq_gave_up);
    counter!("tlb_flush_skipped", tlb_flush_skipped);
    counter!("guest_pulls", guest_pulls);
    counter!("guest_idle_poll_hits", guest_idle_poll_hits);
    counter!("guest_idle_poll_misses", guest_idle_poll_misses);

    // ---- host CPUs
    let mut pc = Table::default();
    pc.add("pcpu", Column::U64((0..sim.rqs.len() as u64).collect()));
    for (i, name) in PCPU_CATS.iter().enumerate() {
        pc.add(name, Column::U64(sim.rqs.iter().map(|r| r.acct.acc[i]).collect()));
    }
    pc.add("switches", Column::U64(sim.rqs.iter().map(|r| r.switches).collect()));

    // ---- VMs
    let mut vm = Table::default();
    let vms = &sim.vms;
    let sum_v = |m: &Vm, f: &dyn Fn(&Vcpu) -> u64| -> u64 {
        (m.vcpu0..m.vcpu0 + m.nvcpu).map(|i| f(&sim.vcpus[i as usize])).sum()
    };
    vm.add("vm", Column::U64((0..vms.len() as u64).collect()));
    vm.add("group", Column::U64(vms.iter().map(|m| m.group as u64).collect()));
    vm.add("vcpus", Column::U64(vms.iter().map(|m| m.nvcpu as u64).collect()));
    vm.add("threads", Column::U64(vms.iter().map(|m| m.nthread as u64).collect()));
    vm.add("workload", Column::Str(vms.iter().map(|m| m.cfg.workload.name.clone()).collect()));
    vm.add("policy", Column::Str(vms.iter().map(policy_name).collect()));
    vm.add("ops", Column::U64(vms.iter().map(|m| m.ops).collect()));
    vm.add("throughput_ops_s", Column::F64(vms.iter().map(|m| m.ops as f64 / secs).collect()));
    vm.add("finished", Column::Bool(vms.iter().map(|m| m.finished_at.is_some()).collect()));
    vm.add("wall_ns", Column::U64(vms.iter().map(|m| m.finished_at.unwrap_or(dur)).collect()));
    vm.add("lat_mean_ns", Column::F64(vms.iter().map(|m| hist_mean(&m.latencies)).collect()));
    for (q, name) in [(0.5, "lat_p50_ns"), (0.9, "lat_p90_ns"), (0.99, "lat_p99_ns")] {
        vm.add(name, Column::F64(vms.iter().map(|m| hist_quantile(&m.latencies, q)).collect()));
    }
    for (i, name) in VCPU_CATS.iter().enumerate() {
        vm.add(name, Column::U64(vms.iter().map(|m| sum_v(m, &|v| v.acct.acc[i])).collect()));
    }
    vm.add("ple_exits", Column::U64(vms.iter().map(|m| sum_v(m, &|v| v.c.ple_exits)).collect()));
    vm.add("yield_attempts", Column::U64(vms.iter().map(|m| sum_v(m, &|v| v.c.yield_attempts)).collect()));
    vm.add("yield_ok", Column::U64(vms.iter().map(|m| sum_v(m, &|v| v.c.yield_ok)).collect()));
    vm.add("yield_esrch", Column::U64(vms.iter().map(|m| sum_v(m, &|v| v.c.yield_esrch)).collect()));
    vm.add("yield_zero", Column::U64(vms.iter().map(|m| sum_v(m, &|v| v.c.yield_zero)).collect()));
    vm.add("lock_wait_mean_ns", Column::F64(vms.iter().map(|m| hist_mean(&m.lock_waits)).collect()));
    for (q, name) in [(0.5, "lock_wait_p50_ns"), (0.9, "lock_wait_p90_ns"), (0.99, "lock_wait_p99_ns")] {
        vm.add(name, Column::F64(vms.iter().map(|m| hist_quantile(&m.lock_waits, q)).collect()));
    }
    vm.add(
        "lock_acquisitions",
        Column::U64(vms.iter().map(|m| m.locks.iter().map(|l| l.acquisitions).sum()).collect()),
    );
    // waits still open when the run ends (censored: counted up to the end);
    // a real guest told to stop finishes them, so its mean includes them
    let open: Vec<(u64, f64)> = vms.iter().map(|m| open_lock_waits(sim, m, dur)).collect();
    vm.add("lock_waits_open", Column::U64(open.iter().map(|o| o.0).collect()));
    vm.add("lock_wait_open_mean_ns", Column::F64(open.iter().map(|o| o.1).collect()));

    // ---- summary
    let mut s = Table::default();
    let p = sim.rqs.len() as f64;
    let host_tot = |i: usize| sim.rqs.iter().map(|r| r.acct.acc[i]).sum::<u64>();
    let frac = |i: usize| host_tot(i) as f64 / (p * dur.max(1) as f64);
    let ops: u64 = vms.iter().map(|m| m.ops).sum();
    let all_v = |f: &dyn Fn(&Vcpu) -> u64| -> u64 { sim.vcpus.iter().map(f).sum() };
    s.add("seed", Column::U64(vec![sim.cfg.seed]));
    s.add("duration_ns", Column::U64(vec![dur]));
    s.add("warmup_ns", Column::U64(vec![sim.cfg.warmup_ns.min(dur)]));
    s.add("finished", Column::Bool(vec![sim.vms_with_goal > 0 && sim.vms_done == vms.len() as u32]));
    s.add("n_pcpus", Column::U64(vec![sim.rqs.len() as u64]));
    s.add("vms", Column::U64(vec![vms.len() as u64]));
    s.add("vcpus", Column::U64(vec![sim.vcpus.len() as u64]));
    s.add("events", Column::U64(vec![sim.events]));
    s.add("ops", Column::U64(vec![ops]));
    s.add("throughput_ops_s", Column::F64(vec![ops as f64 / secs]));
    for (i, name) in
        ["useful_frac", "spin_frac", "ple_frac", "exit_frac", "idle_poll_frac", "polling_frac", "bg_frac", "idle_frac"]
            .iter()
            .enumerate()
    {
        s.add(name, Column::F64(vec![frac(i)]));
    }
    s.add("steal_ns", Column::U64(vec![all_v(&|v| v.acct.acc[C_WAIT])]));
    s.add("ple_exits", Column::U64(vec![all_v(&|v| v.c.ple_exits)]));
    s.add("yield_attempts", Column::U64(vec![all_v(&|v| v.c.yield_attempts)]));
    s.add("yield_ok", Column::U64(vec![all_v(&|v| v.c.yield_ok)]));
    s.add("yield_esrch", Column::U64(vec![all_v(&|v| v.c.yield_esrch)]));
    s.add("yield_zero", Column::U64(vec![all_v(&|v| v.c.yield_zero)]));
    s.add("halt_exits", Column::U64(vec![all_v(&|v| v.hp.stats.halt_exits)]));
    s.add("halt_attempted_poll", Column::U64(vec![all_v(&|v| v.hp.stats.halt_attempted_poll)]));
    s.add("halt_successful_poll", Column::U64(vec![all_v(&|v| v.hp.stats.halt_successful_poll)]));
    s.add("preemption_reported", Column::U64(vec![all_v(&|v| v.c.preemption_reported)]));
    s.add("preemption_other", Column::U64(vec![all_v(&|v| v.c.preemption_other)]));

    // ---- trace
    // the trace's columns are moved out, not copied (nothing here can run out of memory)
    let trace = sim.cfg.trace.then(|| std::mem::take(&mut sim.trace).into_table());
    let schedule = sim.decisions_on.then(|| std::mem::take(&mut sim.decisions).into_table());
    Ok(SimResult { summary: s, vms: vm, vcpus: vc, pcpus: pc, trace, schedule })
}

/// The lock waits of VM `m` still open at `end` (threads in a Lock phase
/// without the lock): their number and mean age (ns, from the Lock phase's
/// start, as `record_lock_wait` counts; 0 when there are none).
fn open_lock_waits(sim: &Sim, m: &Vm, end: Ns) -> (u64, f64) {
    let (mut n, mut sum) = (0u64, 0u64);
    for th in &sim.threads[m.thread0 as usize..(m.thread0 + m.nthread) as usize] {
        if th.state != TState::Done && matches!(th.step, Step::AwaitLock { .. }) {
            n += 1;
            sum += end.saturating_sub(th.lock_wait_start);
        }
    }
    (n, if n > 0 { sum as f64 / n as f64 } else { 0.0 })
}

fn policy_name(m: &Vm) -> String {
    let p = &m.cfg.policy;
    match p.kind {
        super::config::PolicyKind::Python => format!("python:{}", p.name),
        k => serde_json::to_value(k).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn why_codes_index_their_names() {
        for (i, w) in Why::ALL.iter().enumerate() {
            assert_eq!(*w as u8 as usize, i, "{w:?}");
        }
    }
}

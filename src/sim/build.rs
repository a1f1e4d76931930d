//! Building the world from a configuration: `Sim::new` turns a validated
//! [`SimConfig`] into host CPUs, run queues, vCPU threads, guest threads,
//! locks, VMs and their directed-yield policies, and the CFS tunables and
//! topology the scheduler reads.

use std::collections::VecDeque;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use super::config::{Affinity, LockKind, Phase, Scheduler, SimConfig, StartPlacement};
use super::decisions::Decisions;
use super::engine::Sim;
use super::guest::effective_lock_kind;
use super::halt_poll::HaltPollState;
use super::queue::EventQueue;
use super::speed::SpeedProc;
use super::state::*;
use super::trace::Trace;
use super::PolicyMaker;

impl Sim {
    pub fn new(cfg: &SimConfig, make_policy: PolicyMaker<'_>) -> Result<Sim, String> {
        cfg.validate()?;
        let p = cfg.host.n_pcpus;
        let mut rng = Pcg64Mcg::seed_from_u64(cfg.seed);
        let mut sim = Sim {
            cfg: cfg.clone(),
            now: 0,
            end: cfg.duration_ns,
            queue: EventQueue::for_vcpus(cfg.vms.iter().map(|v| u64::from(v.vcpus) * u64::from(v.count)).sum()),
            seq: 0,
            events: 0,
            rng: Pcg64Mcg::seed_from_u64(0),
            tasks: Vec::new(),
            rqs: (0..p)
                .map(|_| Rq {
                    queue: Vec::new(),
                    queue_w: 0,
                    queue_wv: 0,
                    curr: None,
                    buddy: None,
                    curr_in_exit: false,
                    exec_start: 0,
                    last_v: 0,
                    lock_busy: Vec::new(),
                    lock_until: 0,
                    tick_armed: false,
                    need_resched: false,
                    acct: Acct::new(C_IDLE),
                    trace_start: 0,
                    switches: 0,
                    min_vruntime: 0,
                    last: None,
                    skip: None,
                    slice_start: 0,
                    vprot: i64::MIN,
                    idle_since: 0,
                    tick_off: 0,
                    lb_next: [0; 3],
                })
                .collect(),
            vcpus: Vec::new(),
            ready: Vec::new(),
            vgen: Vec::new(),
            cand: CandMasks::default(),
            threads: Vec::new(),
            vms: Vec::new(),
            trace: Trace::default(),
            decisions: Decisions::default(),
            decisions_on: false,
            trace_max_rows: u64::MAX,
            trace_error: None,
            error: None,
            vms_with_goal: 0,
            vms_done: 0,
            started: false,
            immediate: VecDeque::new(),
            stuck: None,
            any_unpinned: false,
            pre_run_vcpu: vec![NO_VCPU; p as usize],
            same_time: 0,
            rng2: Pcg64Mcg::seed_from_u64(cfg.seed ^ 0x9e37_79b9_7f4a_7c15),
            noise_src: Vec::new(),
            wake_latency: cfg.host.wakeup_ipi_ns > 0 || !cfg.host.idle_states.is_empty(),
            nohz_next: 0,
            speed: SpeedProc::new(&cfg.host.speed, p as usize, cfg.seed),
            topo: Topology {
                ncores: 1,
                cores_per_socket: 1,
                llc_list: Vec::new(),
                smt_slow: cfg.host.threads_per_core > 1 && cfg.host.smt_speed_pct < 100,
            },
            cfs: CfsTunables::default(),
            groups: Default::default(),
            gang: Gang::default(),
            tokens: Tokens::default(),
            wake: WakeCtx::default(),
        };
        sim.topo.ncores = (p / cfg.host.threads_per_core).max(1);
        sim.topo.cores_per_socket = (sim.topo.ncores / cfg.host.sockets).max(1);
        sim.topo.llc_list = vec![Vec::new(); cfg.host.sockets as usize];
        for cpu in 0..p {
            let s = (cpu % sim.topo.ncores) / sim.topo.cores_per_socket;
            sim.topo.llc_list[(s as usize).min(cfg.host.sockets as usize - 1)].push(cpu);
        }
        if cfg.host.tick_skew {
            // tick_setup_sched_timer with sched_skew_tick: (TICK_NSEC >> 1) / nr_cpus · cpu
            let step = (cfg.host.tick_ns >> 1) / p as u64;
            for (cpu, rq) in sim.rqs.iter_mut().enumerate() {
                rq.tick_off = step * cpu as u64;
            }
        }
        let f = cfg.host.cfs.factor(p);
        sim.cfs.latency_ns = cfg.host.cfs.latency_ns * f;
        sim.cfs.min_granularity_ns = cfg.host.cfs.min_granularity_ns * f;
        sim.cfs.wakeup_granularity_ns = cfg.host.cfs.wakeup_granularity_ns * f;
        // Placement of vCPU threads.
        let total = cfg.total_vcpus() as usize;
        let shuffled_start = cfg.host.start_placement == StartPlacement::Shuffled;
        let pins: Vec<u32> = match cfg.host.affinity {
            _ if !cfg.host.vcpu_pcpus.is_empty() => {
                let l = &cfg.host.vcpu_pcpus;
                (0..total).map(|g| l[g % l.len()]).collect()
            }
            Affinity::All if shuffled_start => shuffled_slots(total, p, &mut rng),
            Affinity::RoundRobin | Affinity::All => (0..total).map(|g| (g as u32) % p).collect(),
            Affinity::Pinned => shuffled_slots(total, p, &mut rng),
        };
        let mut g = 0usize;
        for (group, vmc) in cfg.vms.iter().enumerate() {
            for _ in 0..vmc.count {
                let vm_id = sim.vms.len() as u32;
                let nthread = if vmc.threads == 0 { vmc.vcpus } else { vmc.threads };
                let vcpu0 = sim.vcpus.len() as u32;
                let thread0 = sim.threads.len() as u32;
                let halt_poll = vmc.halt_poll.clone();
                for i in 0..vmc.vcpus {
                    let cpu = pins[g];
                    g += 1;
                    let task = sim.tasks.len() as u32;
                    let pinned = if cfg.host.affinity == Affinity::All { None } else { Some(cpu) };
                    sim.tasks.push(Task::new(
                        TaskKind::Vcpu(vcpu0 + i),
                        vmc.weight,
                        cfg.host.base_slice_ns,
                        cpu,
                        pinned,
                    ));
                    sim.vcpus.push(Vcpu {
                        vm: vm_id,
                        idx: i,
                        task,
                        running: None,
                        last_cpu: cpu,
                        preempted: false,
                        blocking: true,
                        halted: true,
                        in_spin_loop: false,
                        dy_eligible: false,
                        preempted_in_kernel: false,
                        pv_unhalted: false,
                        posted_irq: false,
                        scheduled_out: false,
                        in_kernel: false,
                        apicv: vmc.pv.apicv,
                        st_preempted: false,
                        steal_ns: 0,
                        ple_window: vmc.ple.window,
                        hp: HaltPollState::new(&halt_poll),
                        poll_resume: None,
                        idle_poll_left: None,
                        cur: None,
                        runq: VecDeque::new(),
                        ipis: VecDeque::new(),
                        ipi_rem: 0,
                        start_rem: vmc.guest.vcpu_start_ns,
                        started: false,
                        start_wait: i == 0 && vmc.guest.vcpu0_waits_for_starts && vmc.vcpus > 1,
                        act: Act::Off,
                        acct: Acct::new(C_HALT),
                        c: VcpuCounters { max_ple_window: vmc.ple.window, ..Default::default() },
                        st_is_idle: false,
                        cold_ns: 0,
                        idle_stamp: None,
                        avg_idle: 2 * vmc.guest.migration_cost_ns,
                    });
                    sim.ready.push(false);
                    sim.vgen.push(0);
                }
                for i in 0..nthread {
                    sim.threads.push(Thread {
                        vm: vm_id,
                        idx: i,
                        vcpu: vcpu0 + (i % vmc.vcpus),
                        state: TState::Ready,
                        pc: 0,
                        step: Step::Begin,
                        rem: 0,
                        iter_start: 0,
                        iters: 0,
                        msgs: 0,
                        acks: 0,
                        spun: 0,
                        pv_halted: false,
                        pv_new_head: false,
                        pv_hashed: false,
                        pv_unfair: false,
                        wake_gen: 0,
                        lock_wait_start: 0,
                        last_ran: 0,
                        rw_read: false,
                        rw_granted: false,
                        wakee: WakeeFlips::NEW,
                        recent_used_cpu: vcpu0 + (i % vmc.vcpus),
                        irqs_off: false,
                    });
                }
                let nlocks = vmc
                    .workload
                    .phases
                    .iter()
                    .filter_map(|ph| if let Phase::Lock { lock, sites, .. } = ph { Some(*lock + *sites) } else { None })
                    .max()
                    .unwrap_or(0);
                let mut locks: Vec<Lock> = (0..nlocks)
                    .map(|_| Lock {
                        kind: LockKind::Tas,
                        holder: None,
                        waiters: VecDeque::new(),
                        acquisitions: 0,
                        slow: false,
                        pending: false,
                        unfair: Vec::new(),
                        readers: 0,
                    })
                    .collect();
                for ph in &vmc.workload.phases {
                    if let Phase::Lock { lock, lock_kind, sites, .. } = ph {
                        // an rwsem's lock is the semaphore; each phase says which side it takes
                        let kind = if lock_kind.is_rwsem() { LockKind::RwsemWrite } else { *lock_kind };
                        for l in &mut locks[*lock as usize..(*lock + *sites) as usize] {
                            l.kind = effective_lock_kind(kind, vmc);
                        }
                    }
                }
                let policy = make_policy(group, vmc)?;
                let w = &vmc.workload;
                let spin_threshold_ns =
                    cycles_to_ns(w.spin_threshold.saturating_mul(w.spin_iter_cycles), cfg.host.tsc_khz);
                let queue = w.phases.iter().find_map(|p| match p {
                    Phase::TaskQueue { tasks, frames, .. } => Some((*tasks, *frames)),
                    _ => None,
                });
                if w.iterations > 0 || queue.is_some_and(|(_, frames)| frames > 0) {
                    sim.vms_with_goal += 1;
                }
                sim.vms.push(Vm {
                    cfg: vmc.clone(),
                    group: group as u32,
                    vcpu0,
                    nvcpu: vmc.vcpus,
                    thread0,
                    nthread,
                    locks,
                    barrier_waiting: Vec::new(),
                    tq_left: queue.map_or(0, |(tasks, _)| tasks),
                    tq_frames: 0,
                    tq_waiting: Vec::new(),
                    last_boosted: 0,
                    upstream: policy.as_upstream(),
                    policy,
                    ops: 0,
                    latencies: Vec::new(),
                    lock_waits: Vec::new(),
                    done_threads: 0,
                    finished_at: None,
                    ple_ns: [(0, 0); 64],
                    spin_threshold_ns: spin_threshold_ns.max(1),
                    halt_poll,
                    lb_pending: false,
                    nohz_next: 0,
                });
            }
        }
        // Background host load: one pinned task per host CPU.
        if cfg.host.background.utilization > 0.0 {
            for cpu in 0..p {
                let w = cfg.host.background.weight;
                sim.tasks.push(Task::new(TaskKind::Bg(cpu), w, cfg.host.base_slice_ns, cpu, Some(cpu)));
            }
        }
        sim.add_noise_tasks();
        for t in 0..sim.tasks.len() {
            sim.tasks[t].tie = if cfg.host.seeded_ties { sim.rng2.random::<u32>() } else { t as u32 };
        }
        sim.rng = rng;
        // gang rounds and run tokens place the vCPU threads themselves: no balancing
        let placed = cfg.host.scheduler == Scheduler::Gang || cfg.host.scheduler.is_tokens();
        sim.any_unpinned = !placed && sim.tasks.iter().any(|t| t.pinned.is_none());
        if cfg.host.scheduler == Scheduler::Gang {
            sim.setup_gang();
        }
        if cfg.host.scheduler.is_tokens() {
            sim.setup_tokens();
        }
        let nvm = sim.vms.len();
        sim.cand = CandMasks { base: vec![0; nvm], user: vec![0; nvm], pi: vec![0; nvm] };
        for v in 0..sim.vcpus.len() {
            sim.refresh_cand(v);
        }
        let eevdf_groups = cfg.host.scheduler == Scheduler::Fair && cfg.host.vm_groups;
        if (cfg.host.scheduler == Scheduler::Cfs && cfg.host.cfs.vm_groups) || eevdf_groups {
            sim.groups = TaskGroups::new(sim.vms.len(), p as usize);
            sim.groups.half_life_ns = cfg.host.group_load_half_life_ns;
            let nt = sim.tasks.len();
            sim.groups.task_avg = vec![0.0; nt];
            sim.groups.task_avg_at = vec![0; nt];
            sim.groups.task_avg_runnable = vec![false; nt];
            sim.groups.task_avg_cpu = vec![u32::MAX; nt];
        }
        Ok(sim)
    }
}

/// Balanced slots g mod `p` for `total` vCPUs in a random order
/// (Fisher-Yates with the run's RNG).
fn shuffled_slots(total: usize, p: u32, rng: &mut Pcg64Mcg) -> Vec<u32> {
    let mut s: Vec<u32> = (0..total).map(|g| (g as u32) % p).collect();
    for i in (1..s.len()).rev() {
        let j = rng.random_range(0..=i);
        s.swap(i, j);
    }
    s
}

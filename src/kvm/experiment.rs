//! Overcommit experiments: many vCPUs, each on its own OS thread pinned to
//! chosen host CPUs, running their guest programs until they finish or a
//! deadline passes, while the calling thread samples steal time and KVM stats.
//!
//! Cost of watching: a steal-time sample is a memory read (version protocol);
//! a stats sample is one `pread` of the data block per vCPU fd.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::error::{Error, Result};
use super::exit::{Exit, IoDir};
use super::kick::RunSlot;
use super::os::{allowed_cpus, monotonic_ns, pin_current_thread};
use super::sched::{self, Scheduler, SpinOutcome, PV_HALT_PORT, PV_SPIN_PORT};
use super::vcpu::{RunUntil, Ucall, Vcpu, VcpuObserver};

/// One vCPU of an experiment and where its thread may run.
pub struct Member<'a> {
    /// Index of its VM in the experiment (for the frames).
    pub vm: usize,
    pub vcpu: &'a mut Vcpu,
    /// Host CPUs its thread is pinned to (`sched_setaffinity`); empty: unpinned.
    pub cpus: Vec<usize>,
}

/// How long to run and how often to look.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Wall-clock limit; vCPUs still running then are stopped.
    pub duration: Duration,
    /// Sampling period (None: only a first and a last sample).
    pub sample_every: Option<Duration>,
    /// How often the caller's `should_stop` is polled (Ctrl-C latency).
    pub poll_every: Duration,
}

/// How a vCPU thread ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The guest program reported DONE.
    Done,
    /// The duration ran out.
    Deadline,
    /// The caller stopped the experiment (e.g. Ctrl-C).
    Stopped,
    /// The vCPU failed (see `error`).
    Error,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Done => "done",
            Outcome::Deadline => "deadline",
            Outcome::Stopped => "stopped",
            Outcome::Error => "error",
        }
    }
}

/// What one vCPU thread did, from the host scheduler's point of view.
#[derive(Debug)]
pub struct ThreadReport {
    pub vm: usize,
    pub vcpu: u64,
    pub tid: i32,
    pub cpus: Vec<usize>,
    /// From /proc/self/task/<tid>/schedstat: time on a CPU, time runnable but waiting, timeslices.
    pub cpu_ns: u64,
    pub run_delay_ns: u64,
    pub timeslices: u64,
    /// From /proc/self/task/<tid>/status.
    pub voluntary_ctxt_switches: u64,
    pub nonvoluntary_ctxt_switches: u64,
    pub wall_ns: u64,
    /// When the thread began, ns after the run's start, just before it
    /// pinned itself to its CPUs (the moment it joins their run queue).
    pub start_ns: u64,
    /// Exits that reached user space (KVM_RUN returned); KVM's own count is the `exits` stat.
    pub exits: u64,
    pub syncs: u64,
    pub outcome: Outcome,
    pub error: Option<Error>,
}

/// Samples in long format: one row per (sample, vCPU); `stats[i]` is the
/// column of `stat_names[i]`.
#[derive(Debug, Default)]
pub struct Samples {
    pub t_ns: Vec<u64>,
    /// When this row's steal area was read, ns after the run's start (at or
    /// after `t_ns`).
    pub read_ns: Vec<u64>,
    pub vm: Vec<u32>,
    pub vcpu: Vec<u32>,
    pub steal_ns: Vec<u64>,
    pub preempted: Vec<u8>,
    /// The steal area's `is_idle` byte ([S3]; written only by vcpulab's scheduler).
    pub is_idle: Vec<u8>,
    pub stat_names: Vec<String>,
    pub stats: Vec<Vec<u64>>,
}

/// Everything an experiment produced.
#[derive(Debug)]
pub struct Report {
    pub threads: Vec<ThreadReport>,
    pub samples: Samples,
    pub wall_ns: u64,
    /// When the run started (`wall_ns` counts from here), CLOCK_MONOTONIC ns: the
    /// time base of a trace of the run (`os::monotonic_ns`).
    pub start_mono_ns: u64,
    /// True if `should_stop` ended it early.
    pub stopped: bool,
    /// What vcpulab's scheduler decided (a run under [`run`]'s `sched`).
    pub sched_log: Option<sched::Log>,
}

fn schedstat(tid: i32) -> (u64, u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).unwrap_or_default();
    let v: Vec<u64> = s.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    (v.first().copied().unwrap_or(0), v.get(1).copied().unwrap_or(0), v.get(2).copied().unwrap_or(0))
}

fn ctxt_switches(tid: i32) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap_or_default();
    let get =
        |key: &str| s.lines().find_map(|l| l.strip_prefix(key).map(|r| r.trim().parse().unwrap_or(0))).unwrap_or(0);
    (get("voluntary_ctxt_switches:"), get("nonvoluntary_ctxt_switches:"))
}

struct Sampler {
    obs: Vec<(usize, VcpuObserver)>,
    stat_index: Vec<usize>,
    buf: Vec<u8>,
    out: Samples,
}

impl Sampler {
    fn new(obs: Vec<(usize, VcpuObserver)>) -> Self {
        let mut out = Samples::default();
        let mut stat_index = Vec::new();
        if let Some((_, o)) = obs.first() {
            for (i, d) in o.stats.schema.descs.iter().enumerate() {
                if d.size == 1 {
                    out.stat_names.push(d.name.clone());
                    stat_index.push(i);
                }
            }
        }
        out.stats = vec![Vec::new(); stat_index.len()];
        Self { obs, stat_index, buf: Vec::new(), out }
    }

    /// One sample at `t_ns` (ns after the run's start `t0`): each vCPU's
    /// steal area and stats, with the time of that read (`read_ns`: a
    /// sampler preempted between two reads reads later than `t_ns`).
    fn sample(&mut self, t_ns: u64, t0: Instant) -> Result<()> {
        for (vm, o) in &self.obs {
            let st = o.steal_time()?;
            let read_ns = (t0.elapsed().as_nanos() as u64).max(t_ns);
            o.stats.read_data(&mut self.buf)?;
            self.out.t_ns.push(t_ns);
            self.out.read_ns.push(read_ns);
            self.out.vm.push(*vm as u32);
            self.out.vcpu.push(o.id as u32);
            self.out.steal_ns.push(st.map_or(0, |s| s.steal_ns));
            self.out.preempted.push(st.map_or(0, |s| s.preempted));
            self.out.is_idle.push(st.map_or(0, |s| s.is_idle));
            for (col, &i) in self.out.stats.iter_mut().zip(&self.stat_index) {
                col.push(o.stats.schema.values(&self.buf, i).next().unwrap_or(0));
            }
        }
        Ok(())
    }
}

/// Runs the experiment. `should_stop` is polled every `poll_every` on the
/// calling thread; when it returns true every vCPU is kicked out of KVM_RUN and
/// the threads are joined before returning (with `stopped` set).
///
/// With `sched`, the vCPU threads run under vcpulab's own scheduler
/// ([`sched`]): member `i` is the scheduler's vCPU `i`, a thread enters
/// KVM_RUN only while it holds a host CPU's token, and the calling thread also
/// runs the scheduler's watchdog at each poll.
pub fn run(
    members: &mut [Member<'_>],
    opts: Options,
    should_stop: &mut dyn FnMut() -> bool,
    sched: Option<&Scheduler>,
) -> Result<Report> {
    if members.is_empty() {
        return Err(Error::InvalidArgument("an experiment needs at least one vCPU".into()));
    }
    let allowed = allowed_cpus();
    for m in members.iter() {
        if let Some(c) = m.cpus.iter().find(|c| !allowed.contains(c)) {
            return Err(Error::InvalidArgument(format!(
                "vCPU {} is placed on host CPU {c}, but this process may only use CPUs {allowed:?}",
                m.vcpu.id
            )));
        }
    }
    let mut obs = Vec::with_capacity(members.len());
    let mut slots: Vec<Arc<RunSlot>> = Vec::with_capacity(members.len());
    for m in members.iter_mut() {
        obs.push((m.vm, m.vcpu.observer()?));
        slots.push(m.vcpu.run_slot());
    }
    let mut sampler = Sampler::new(obs);
    let t0 = Instant::now();
    if let Some(sc) = sched {
        sc.set_origin(t0);
    }
    let start_mono_ns = monotonic_ns();
    let deadline = t0 + opts.duration;
    sampler.sample(0, t0)?;
    let mut stopped = false;
    let threads: Vec<ThreadReport> = std::thread::scope(|s| -> Result<Vec<ThreadReport>> {
        let handles = members
            .iter_mut()
            .enumerate()
            .map(|(g, m)| {
                let (vm, cpus) = (m.vm, m.cpus.clone());
                let vcpu = &mut *m.vcpu;
                // A new thread starts on a CPU its creator may use, and one
                // placed on a host driver's CPU waited there for a slice
                // before it could pin itself (up to 3 ms of run delay in 12
                // MSI ping-pongs here, 2026-12-06, 5 of them disturbed): its
                // run delay, and through KVM's first steal record its steal. So it is created with its CPUs: the
                // creating thread takes them for the spawn (best effort: the
                // thread pins itself anyway) and gets its own back below.
                let _ = pin_current_thread(&cpus);
                // named like QEMU's vCPU threads, so tools (and vcpulab.kvm.attach) find them
                std::thread::Builder::new().name(format!("CPU {}/KVM", vcpu.id)).spawn_scoped(s, move || match sched {
                    Some(sc) => scheduled_thread(g, vm, vcpu, sc, t0, deadline),
                    None => vcpu_thread(vm, vcpu, cpus, t0, deadline),
                })
            })
            .collect::<Vec<_>>();
        // the run loop runs where it ran before (every CPU this process may use)
        let _ = pin_current_thread(&allowed);
        if let Some(i) = handles.iter().position(|h| h.is_err()) {
            // stop the threads already started (the scope joins them) and report
            if let Some(sc) = sched {
                sc.stop();
            }
            for slot in &slots {
                slot.stop();
            }
            let e = handles.into_iter().nth(i).expect("found above").expect_err("an error");
            return Err(Error::Ioctl { call: "spawn vCPU thread", source: e });
        }
        let handles: Vec<_> = handles.into_iter().map(|h| h.expect("checked above")).collect();
        let mut next_sample = opts.sample_every.map(|p| t0 + p);
        let mut next_poll = t0 + opts.poll_every;
        let mut sample_err = None;
        while !handles.iter().all(|h| h.is_finished()) {
            let now = Instant::now();
            if let Some(ns) = next_sample {
                if now >= ns && sample_err.is_none() {
                    if let Err(e) = sampler.sample(now.duration_since(t0).as_nanos() as u64, t0) {
                        sample_err = Some(e);
                    }
                    let p = opts.sample_every.expect("set with next_sample");
                    // skip missed periods instead of bursting
                    let mut n = ns + p;
                    while n <= now {
                        n += p;
                    }
                    next_sample = Some(n);
                }
            }
            if now >= next_poll {
                next_poll = now + opts.poll_every;
                if !stopped && should_stop() {
                    stopped = true;
                }
                if let Some(sc) = sched {
                    // a holder far past its slice's end is kicked out of KVM_RUN
                    for g in sc.watchdog(now) {
                        slots[g].kick();
                    }
                    if sc.stopped() && !stopped {
                        // a policy failed: end the run (the error is reported below)
                        stopped = true;
                    }
                }
            }
            if stopped || now >= deadline + Duration::from_millis(200) || sample_err.is_some() {
                // the threads' own deadline timers normally end them; this is the backstop
                if let Some(sc) = sched {
                    sc.stop();
                }
                for sl in &slots {
                    sl.kick();
                }
            }
            let mut wake = next_poll.min(deadline + Duration::from_millis(200));
            if let Some(ns) = next_sample {
                wake = wake.min(ns);
            }
            super::vm::wait_until(wake.min(Instant::now() + Duration::from_millis(5)));
        }
        let mut out = Vec::with_capacity(handles.len());
        for h in handles {
            let mut r =
                h.join().map_err(|_| Error::UnexpectedExit("a vCPU thread panicked (a bug in vcpulab)".into()))?;
            if stopped && r.outcome == Outcome::Deadline {
                r.outcome = Outcome::Stopped;
            }
            out.push(r);
        }
        if let Some(e) = sample_err {
            return Err(e);
        }
        Ok(out)
    })?;
    let wall_ns = t0.elapsed().as_nanos() as u64;
    sampler.sample(wall_ns, t0)?;
    if let Some(e) = sched.and_then(|sc| sc.take_error()) {
        return Err(e);
    }
    let sched_log = sched.map(|sc| sc.take_log());
    Ok(Report { threads, samples: sampler.out, wall_ns, start_mono_ns, stopped, sched_log })
}

/// One vCPU thread's report around `body` (which runs the vCPU): the
/// thread's schedstat and context switches before and after.
fn thread_report(
    vm: usize,
    vcpu: &mut Vcpu,
    cpus: Vec<usize>,
    t0: Instant,
    body: impl FnOnce(&mut Vcpu, &mut ThreadReport),
) -> ThreadReport {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let start = Instant::now();
    let mut report = ThreadReport {
        vm,
        vcpu: vcpu.id,
        tid,
        cpus,
        cpu_ns: 0,
        run_delay_ns: 0,
        timeslices: 0,
        voluntary_ctxt_switches: 0,
        nonvoluntary_ctxt_switches: 0,
        wall_ns: 0,
        start_ns: start.saturating_duration_since(t0).as_nanos() as u64,
        exits: 0,
        syncs: 0,
        outcome: Outcome::Deadline,
        error: None,
    };
    let (c0, d0, n0) = schedstat(tid);
    let (v0, i0) = ctxt_switches(tid);
    body(vcpu, &mut report);
    let (c1, d1, n1) = schedstat(tid);
    let (v1, i1) = ctxt_switches(tid);
    report.cpu_ns = c1.saturating_sub(c0);
    report.run_delay_ns = d1.saturating_sub(d0);
    report.timeslices = n1.saturating_sub(n0);
    report.voluntary_ctxt_switches = v1.saturating_sub(v0);
    report.nonvoluntary_ctxt_switches = i1.saturating_sub(i0);
    report.wall_ns = start.elapsed().as_nanos() as u64;
    report
}

impl ThreadReport {
    fn fail(&mut self, e: Error) {
        self.outcome = Outcome::Error;
        self.error = Some(e);
    }
}

/// A vCPU thread under the host kernel's scheduler: pinned to `cpus`, runs
/// its program to DONE or the deadline.
fn vcpu_thread(vm: usize, vcpu: &mut Vcpu, cpus: Vec<usize>, t0: Instant, deadline: Instant) -> ThreadReport {
    thread_report(vm, vcpu, cpus.clone(), t0, |vcpu, report| {
        if let Err(e) = pin_current_thread(&cpus) {
            return report.fail(e);
        }
        loop {
            let want = RunUntil { kinds: vec!["ucall".into()], port: None, count: 1, deadline };
            match vcpu.run_until_outcome(&want) {
                Ok(out) if out.timed_out => {
                    report.exits += out.exits;
                    report.outcome = Outcome::Deadline;
                    break;
                }
                Ok(out) => {
                    report.exits += out.exits;
                    match out.ucall {
                        Some(Ucall::Done) => {
                            report.outcome = Outcome::Done;
                            break;
                        }
                        Some(Ucall::Sync(_)) => report.syncs += 1,
                        None if out.kicked => {
                            report.outcome = Outcome::Stopped;
                            break;
                        }
                        None => {} // a foreign signal: the caller's thread handles it; keep running
                    }
                }
                Err(e) => return report.fail(e),
            }
        }
    })
}

/// A vCPU thread under vcpulab's scheduler ([`sched`]): it runs only while it
/// holds a token, pinned to the token's CPU, and hands the token on at its
/// slice's end, at a pv spin exit the policy decides to yield, at a halt
/// bracket, and when its program ends.
fn scheduled_thread(
    g: usize,
    vm: usize,
    vcpu: &mut Vcpu,
    sc: &Scheduler,
    t0: Instant,
    deadline: Instant,
) -> ThreadReport {
    let cpus = sc.cpus().to_vec();
    thread_report(vm, vcpu, cpus, t0, |vcpu, report| {
        sc.start(g, report.tid, None);
        report.outcome = scheduled_loop(g, vcpu, sc, deadline, report).unwrap_or_else(|e| {
            report.error = Some(e);
            Outcome::Error
        });
        sc.finish(g, None);
    })
}

fn scheduled_loop(
    g: usize,
    vcpu: &mut Vcpu,
    sc: &Scheduler,
    deadline: Instant,
    report: &mut ThreadReport,
) -> Result<Outcome> {
    let mut pinned: Option<usize> = None;
    let io = |want_deadline| RunUntil {
        kinds: vec!["ucall".into(), "io".into()],
        port: None,
        count: 1,
        deadline: want_deadline,
    };
    loop {
        let Some(grant) = sc.acquire(g, deadline) else {
            return Ok(if sc.stopped() { Outcome::Stopped } else { Outcome::Deadline });
        };
        if grant.pinned {
            pinned = Some(grant.cpu);
        } else if pinned != Some(grant.cpu) {
            pin_current_thread(&[grant.cpu])?;
            pinned = Some(grant.cpu);
        }
        sc.entering(g, None);
        // run until the grant ends: each exit either continues the slice or hands the token on
        let end = grant.slice_end.min(deadline);
        loop {
            let out = vcpu.run_until_outcome(&io(end))?;
            report.exits += out.exits;
            if out.timed_out {
                if Instant::now() >= deadline {
                    return Ok(Outcome::Deadline);
                }
                sc.slice_end(g, None);
                break;
            }
            match out.ucall {
                Some(Ucall::Done) => return Ok(Outcome::Done),
                Some(Ucall::Sync(_)) => {
                    report.syncs += 1;
                    continue;
                }
                None => {}
            }
            if out.interrupted {
                if !out.kicked {
                    continue; // a foreign signal: the caller's thread handles it
                }
                if sc.stopped() {
                    return Ok(Outcome::Stopped);
                }
                // the watchdog: this slice is over
                sc.slice_end(g, None);
                break;
            }
            match &out.exit {
                Exit::Io { port: PV_SPIN_PORT, dir: IoDir::Out, .. } => {
                    let holder = out.exit.data_value() as u32;
                    if sc.spin_exit(g, holder, Instant::now(), None)? == SpinOutcome::Yielded {
                        break;
                    }
                }
                Exit::Io { port: PV_HALT_PORT, dir: IoDir::Out, .. } if out.exit.data_value() == 1 => {
                    // the token goes; the vCPU halts in KVM_RUN without one until its wake bracket
                    sc.halt(g, None);
                    loop {
                        let h = vcpu.run_until_outcome(&io(deadline))?;
                        report.exits += h.exits;
                        if h.timed_out {
                            return Ok(Outcome::Deadline);
                        }
                        if h.interrupted && h.kicked && sc.stopped() {
                            return Ok(Outcome::Stopped);
                        }
                        if matches!(h.ucall, Some(Ucall::Done)) {
                            return Ok(Outcome::Done);
                        }
                        if matches!(&h.exit, Exit::Io { port: PV_HALT_PORT, dir: IoDir::Out, .. })
                            && h.exit.data_value() == 0
                        {
                            break;
                        }
                    }
                    sc.wake(g, None);
                    break;
                }
                _ => {} // any other port: nothing to decide
            }
        }
    }
}

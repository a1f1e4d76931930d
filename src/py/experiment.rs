//! The binding of `kvm::experiment::run`: an overcommit experiment on pinned
//! vCPU threads, optionally under vcpulab's own vCPU scheduler
//! (`vcpulab.sched`), with its decision and spin logs. `python/vcpulab/experiment/`
//! builds the arguments and the frames.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::kvm::{self, Error};
use crate::py::interrupt::Interrupt;
use crate::py::kvm::{lock, timeout_deadline, PyVcpu, VcpuCell};

/// What `vcpulab.sched` passes for a scheduled run: the scheduler's
/// parameters, the spin-window address of each plan entry, and each VM's
/// directed-yield policy (its JSON `vcpulab.sim.Policy`, and the callable of a
/// Python one).
struct SchedSpec {
    cfg: kvm::sched::Config,
    cpus: Vec<usize>,
    window_gpas: Vec<Option<u64>>,
    policies: Vec<Option<Box<dyn crate::sim::policy::DirectedYieldPolicy>>>,
    policy_err: Arc<Mutex<Option<PyErr>>>,
}

fn sched_spec(d: &Bound<'_, PyDict>, n_plan: usize) -> PyResult<SchedSpec> {
    let get = |k: &str| -> PyResult<Bound<'_, PyAny>> {
        d.get_item(k)?.ok_or_else(|| PyValueError::new_err(format!("scheduler: missing {k:?}")))
    };
    let u = |k: &str| -> PyResult<u64> { get(k)?.extract() };
    let name: String = get("policy")?.extract()?;
    let policy = match name.as_str() {
        "round_robin" => kvm::sched::Policy::RoundRobin,
        "gang" => kvm::sched::Policy::Gang,
        "relaxed_co" => kvm::sched::Policy::RelaxedCo { skew_ns: u("skew_ns")? },
        "balance" => kvm::sched::Policy::Balance,
        "pinned" => kvm::sched::Policy::Pinned,
        "directed_yield" => kvm::sched::Policy::DirectedYield,
        other => {
            return Err(PyValueError::new_err(format!(
                "scheduler: unknown policy {other:?}; expected round_robin, gang, relaxed_co, balance, pinned or directed_yield"
            )))
        }
    };
    let spin = kvm::sched::SpinWindow {
        window: u("spin_window")?,
        grow: u("spin_grow")?,
        shrink: u("spin_shrink")?,
        max: u("spin_max")?,
    };
    let cfg = kvm::sched::Config {
        policy,
        slice_ns: u("slice_ns")?,
        spin,
        watchdog_ns: u("watchdog_ns")?,
        policy_deadline_ns: u("policy_deadline_ns")?,
        max_decisions: u("max_decisions")? as usize,
        seed: u("seed")?,
    };
    let cpus: Vec<usize> = get("cpus")?.extract()?;
    let window_gpas: Vec<Option<u64>> = get("window_gpas")?.extract()?;
    if window_gpas.len() != n_plan {
        return Err(PyValueError::new_err("scheduler: window_gpas must hold one entry per plan entry"));
    }
    let policy_err: Arc<Mutex<Option<PyErr>>> = Arc::new(Mutex::new(None));
    let mut policies = Vec::new();
    for item in get("policies")?.try_iter()? {
        let item = item?;
        if item.is_none() {
            policies.push(None);
            continue;
        }
        let (json, f): (String, Option<Py<PyAny>>) = item.extract()?;
        let pc: crate::sim::config::PolicyConfig = serde_json::from_str(&json)
            .map_err(|e| PyValueError::new_err(format!("scheduler: invalid directed-yield policy: {e}")))?;
        let p: Box<dyn crate::sim::policy::DirectedYieldPolicy> = match crate::sim::policy::builtin(&pc) {
            Some(p) => p,
            None => match f {
                Some(f) => Box::new(crate::py::sim::PyPolicy::new(f, policy_err.clone())),
                None => {
                    return Err(PyValueError::new_err(format!(
                        "scheduler: the Python policy {:?} has no callable",
                        pc.name
                    )))
                }
            },
        };
        policies.push(Some(p));
    }
    Ok(SchedSpec { cfg, cpus, window_gpas, policies, policy_err })
}

/// The decision and spin logs of a scheduled run, as column dicts.
fn sched_log_dict<'py>(
    py: Python<'py>,
    log: kvm::sched::Log,
    who: &[(usize, u64)],
    cpus: &[usize],
) -> PyResult<Bound<'py, PyDict>> {
    let key = |g: i32| -> (i64, i64) {
        usize::try_from(g).ok().and_then(|g| who.get(g)).map_or((-1, -1), |&(vm, id)| (vm as i64, id as i64))
    };
    let d = PyDict::new(py);
    let dec = PyDict::new(py);
    let ds = &log.decisions;
    dec.set_item("t_ns", PyArray1::from_vec(py, ds.iter().map(|x| x.t_ns as i64).collect()))?;
    dec.set_item("pcpu", PyArray1::from_vec(py, ds.iter().map(|x| cpus[x.cpu as usize] as i64).collect()))?;
    dec.set_item("out_vm", PyArray1::from_vec(py, ds.iter().map(|x| key(x.out).0).collect()))?;
    dec.set_item("out_vcpu", PyArray1::from_vec(py, ds.iter().map(|x| key(x.out).1).collect()))?;
    dec.set_item("in_vm", PyArray1::from_vec(py, ds.iter().map(|x| key(x.into).0).collect()))?;
    dec.set_item("in_vcpu", PyArray1::from_vec(py, ds.iter().map(|x| key(x.into).1).collect()))?;
    dec.set_item("why", ds.iter().map(|x| x.why.name()).collect::<Vec<_>>())?;
    d.set_item("decisions", dec)?;
    let sp = PyDict::new(py);
    let ss = &log.spins;
    sp.set_item("t_ns", PyArray1::from_vec(py, ss.iter().map(|x| x.t_ns as i64).collect()))?;
    sp.set_item("vm", PyArray1::from_vec(py, ss.iter().map(|x| key(x.vcpu as i32).0).collect()))?;
    sp.set_item("vcpu", PyArray1::from_vec(py, ss.iter().map(|x| key(x.vcpu as i32).1).collect()))?;
    sp.set_item("holder", PyArray1::from_vec(py, ss.iter().map(|x| key(x.holder).1).collect()))?;
    sp.set_item("attempts", PyArray1::from_vec(py, ss.iter().map(|x| x.attempts as i64).collect()))?;
    sp.set_item("yielded_to", PyArray1::from_vec(py, ss.iter().map(|x| key(x.yielded_to).1).collect()))?;
    sp.set_item("window", PyArray1::from_vec(py, ss.iter().map(|x| x.window as i64).collect()))?;
    sp.set_item("latency_ns", PyArray1::from_vec(py, ss.iter().map(|x| x.latency_ns as i64).collect()))?;
    sp.set_item("policy_ns", PyArray1::from_vec(py, ss.iter().map(|x| x.policy_ns as i64).collect()))?;
    d.set_item("spins", sp)?;
    d.set_item("dropped", log.dropped)?;
    d.set_item("watchdog_kicks", log.watchdog_kicks)?;
    Ok(d)
}

/// Runs an overcommit experiment (see `kvm::experiment`): `plan` is
/// [(vcpu, vm_index, host_cpus)]. The GIL is released throughout, except to
/// poll for Ctrl-C every `poll_every` seconds; on Ctrl-C every vCPU is kicked
/// and joined, then KeyboardInterrupt is raised.
///
/// `scheduler` (a dict built by `vcpulab.sched`) runs the vCPU threads under
/// vcpulab's own scheduler (`kvm::sched`) on its CPUs; the result then has a
/// `schedule` entry (the decision and spin logs).
#[pyfunction]
#[pyo3(signature = (plan, duration, sample_every = None, poll_every = 0.05, scheduler = None))]
fn run_experiment<'py>(
    py: Python<'py>,
    plan: Vec<(PyRef<'py, PyVcpu>, usize, Vec<usize>)>,
    duration: f64,
    sample_every: Option<f64>,
    poll_every: f64,
    scheduler: Option<Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyDict>> {
    timeout_deadline(duration)?;
    if let Some(p) = sample_every {
        if !(p.is_finite() && (1e-5..=86_400.0).contains(&p)) {
            return Err(PyValueError::new_err(format!("sample_every must be between 10 µs and one day, got {p} s")));
        }
    }
    if !(poll_every.is_finite() && poll_every > 0.0 && poll_every <= 1.0) {
        return Err(PyValueError::new_err(format!(
            "poll_every must be in (0, 1] s (Ctrl-C must stop a run within a second), got {poll_every} s"
        )));
    }
    let mut seen = std::collections::HashSet::new();
    for (v, _, _) in &plan {
        if !seen.insert(Arc::as_ptr(&v.cell) as usize) {
            return Err(PyValueError::new_err(format!("vCPU {} appears twice in the plan", v.id)));
        }
    }
    let cells: Vec<(Arc<VcpuCell>, usize, Vec<usize>)> =
        plan.iter().map(|(v, vm, c)| (v.cell.clone(), *vm, c.clone())).collect();
    let who: Vec<(usize, u64)> = plan.iter().map(|(v, vm, _)| (*vm, v.id)).collect();
    let mut spec = scheduler.as_ref().map(|d| sched_spec(d, plan.len())).transpose()?;
    let policy_err = spec.as_ref().map(|s| s.policy_err.clone());
    let sched_cpus = spec.as_ref().map(|s| s.cpus.clone()).unwrap_or_default();
    let opts = kvm::experiment::Options {
        duration: Duration::from_secs_f64(duration),
        sample_every: sample_every.map(Duration::from_secs_f64),
        poll_every: Duration::from_secs_f64(poll_every),
    };
    let signals = Interrupt::paced();
    let report = py.detach(|| -> kvm::Result<kvm::experiment::Report> {
        // Lock the vCPUs in one global order (by address), so two experiments
        // sharing vCPUs can never deadlock, then restore the plan's order.
        let mut order: Vec<usize> = (0..cells.len()).collect();
        order.sort_by_key(|&i| Arc::as_ptr(&cells[i].0) as usize);
        let mut guards: Vec<Option<MutexGuard<'_, Option<kvm::Vcpu>>>> = (0..cells.len()).map(|_| None).collect();
        for i in order {
            guards[i] = Some(lock(&cells[i].0.core));
        }
        let mut members = Vec::with_capacity(guards.len());
        for (g, (_, vm, cpus)) in guards.iter_mut().zip(&cells) {
            let vcpu = g.as_mut().and_then(|g| g.as_mut()).ok_or(Error::Closed("Vcpu (its Vm)"))?;
            members.push(kvm::experiment::Member { vm: *vm, vcpu, cpus: cpus.clone() });
        }
        let sched = match spec.take() {
            None => None,
            Some(s) => {
                let mut sm = Vec::with_capacity(members.len());
                for (m, w) in members.iter_mut().zip(&s.window_gpas) {
                    let o = m.vcpu.observer()?;
                    // a vCPU placed on one CPU is at home there (sched.pinned)
                    let home = match m.cpus[..] {
                        [c] => s.cpus.iter().position(|&x| x == c),
                        _ => None,
                    };
                    sm.push(kvm::sched::Member {
                        vm: m.vm,
                        idx: m.vcpu.id as usize,
                        mem: o.mem,
                        steal_gpa: o.steal_gpa,
                        window_gpa: *w,
                        home,
                    });
                }
                Some(kvm::sched::Scheduler::new(s.cfg, s.cpus, sm, s.policies)?)
            }
        };
        let mut should_stop = || signals.check();
        kvm::experiment::run(&mut members, opts, &mut should_stop, sched.as_ref())
    });
    if let Some(e) = signals.take() {
        return Err(e);
    }
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            // a Python policy's own exception, raised as itself with the call named
            if let Some(orig) = policy_err.and_then(|p| p.lock().unwrap_or_else(|p| p.into_inner()).take()) {
                return Err(crate::py::errors::policy_error(py, orig, e.to_string()));
            }
            return Err(e.into());
        }
    };
    let out = PyDict::new(py);
    let threads = PyList::empty(py);
    for t in &report.threads {
        let d = PyDict::new(py);
        d.set_item("vm", t.vm)?;
        d.set_item("vcpu", t.vcpu)?;
        d.set_item("tid", t.tid)?;
        d.set_item("cpus", t.cpus.clone())?;
        d.set_item("cpu_ns", t.cpu_ns)?;
        d.set_item("run_delay_ns", t.run_delay_ns)?;
        d.set_item("timeslices", t.timeslices)?;
        d.set_item("voluntary_ctxt_switches", t.voluntary_ctxt_switches)?;
        d.set_item("nonvoluntary_ctxt_switches", t.nonvoluntary_ctxt_switches)?;
        d.set_item("wall_ns", t.wall_ns)?;
        d.set_item("start_ns", t.start_ns)?;
        d.set_item("user_exits", t.exits)?;
        d.set_item("syncs", t.syncs)?;
        d.set_item("outcome", t.outcome.name())?;
        d.set_item("error", t.error.as_ref().map(|e| e.to_string()))?;
        threads.append(d)?;
    }
    out.set_item("threads", threads)?;
    // the first vCPU thread's error, as the exception it converts to (errors.rs)
    if let Some(e) = report.threads.iter().find_map(|t| t.error.as_ref()) {
        out.set_item("error", PyErr::from(e).into_value(py))?;
    }
    let s = report.samples;
    let samples = PyDict::new(py);
    samples.set_item("t_ns", PyArray1::from_vec(py, s.t_ns))?;
    samples.set_item("read_ns", PyArray1::from_vec(py, s.read_ns))?;
    samples.set_item("vm", PyArray1::from_vec(py, s.vm))?;
    samples.set_item("vcpu", PyArray1::from_vec(py, s.vcpu))?;
    samples.set_item("steal_ns", PyArray1::from_vec(py, s.steal_ns))?;
    samples.set_item("preempted", PyArray1::from_vec(py, s.preempted))?;
    samples.set_item("is_idle", PyArray1::from_vec(py, s.is_idle))?;
    let names = s.stat_names.clone();
    for (name, col) in s.stat_names.into_iter().zip(s.stats) {
        samples.set_item(name, PyArray1::from_vec(py, col))?;
    }
    out.set_item("samples", samples)?;
    out.set_item("stat_names", names)?;
    out.set_item("wall_ns", report.wall_ns)?;
    out.set_item("start_mono_ns", report.start_mono_ns)?;
    out.set_item("stopped", report.stopped)?;
    if let Some(log) = report.sched_log {
        out.set_item("schedule", sched_log_dict(py, log, &who, &sched_cpus)?)?;
    }
    Ok(out)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(run_experiment, m)?)?;
    // the `why` names of the decision log, in their order (`vcpulab.sched.WHY`)
    m.add("SCHED_WHY", kvm::sched::Why::ALL.iter().map(|w| w.name()).collect::<Vec<_>>())?;
    Ok(())
}

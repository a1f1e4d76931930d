//! Bindings for the simulator: JSON configs in, numpy columns out.
//!
//! The Pythonic API (dataclasses, polars frames, presets, progress bar) is in
//! `python/vcpulab/sim/`. Runs release the GIL; a Python directed-yield policy
//! takes it only while it is being called.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use numpy::IntoPyArray;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::interrupt::{park_if_finalizing, run_polled, Interrupt};
use crate::sim::config::{SimConfig, VmConfig};
use crate::sim::{self, Column, DirectedYieldPolicy, SimError, SimResult, SpinCtx, Table, VcpuView};

/// What a Python policy sees of one vCPU ([K1]).
#[pyclass(name = "VcpuView", module = "vcpulab._core", frozen, get_all)]
#[derive(Clone)]
struct PyVcpuView {
    /// Index of the vCPU in its VM.
    index: u32,
    /// On a host CPU (in guest mode or in an exit handler).
    running: bool,
    /// Running in guest mode (PF_VCPU).
    in_guest: bool,
    /// vcpu->preempted.
    preempted: bool,
    /// vcpu->ready.
    ready: bool,
    /// kvm_vcpu_is_blocking().
    blocking: bool,
    /// vcpu_dy_runnable(): kicked (pv_unhalted) or posted interrupt pending.
    dy_runnable: bool,
    /// kvm_arch_dy_has_pending_interrupt().
    pending_interrupt: bool,
    /// spin_loop.in_spin_loop.
    in_spin_loop: bool,
    /// spin_loop.dy_eligible (as kept by the engine for built-in policies).
    dy_eligible: bool,
    /// arch.preempted_in_kernel.
    preempted_in_kernel: bool,
    /// Steal-time preempted byte as the guest sees it.
    st_preempted: bool,
    /// Published steal time, ns.
    steal_ns: u64,
    /// pcpu_is_idle: nothing else on the host CPU it last ran on.
    pcpu_is_idle: bool,
    /// Current PLE window, cycles.
    ple_window: u64,
}

#[pymethods]
impl PyVcpuView {
    fn __repr__(&self) -> String {
        format!(
            "VcpuView(index={}, running={}, in_guest={}, preempted={}, ready={}, blocking={}, dy_runnable={}, \
             in_spin_loop={}, preempted_in_kernel={})",
            self.index,
            self.running,
            self.in_guest,
            self.preempted,
            self.ready,
            self.blocking,
            self.dy_runnable,
            self.in_spin_loop,
            self.preempted_in_kernel
        )
    }
}

impl From<VcpuView> for PyVcpuView {
    fn from(v: VcpuView) -> Self {
        PyVcpuView {
            index: v.index,
            running: v.running,
            in_guest: v.in_guest,
            preempted: v.preempted,
            ready: v.ready,
            blocking: v.blocking,
            dy_runnable: v.dy_runnable,
            pending_interrupt: v.pending_interrupt,
            in_spin_loop: v.in_spin_loop,
            dy_eligible: v.dy_eligible,
            preempted_in_kernel: v.preempted_in_kernel,
            st_preempted: v.st_preempted,
            steal_ns: v.steal_ns,
            pcpu_is_idle: v.pcpu_is_idle,
            ple_window: v.ple_window,
        }
    }
}

/// The spinning vCPU, as passed to a Python policy.
#[pyclass(name = "Spinner", module = "vcpulab._core", frozen, get_all)]
struct PySpinner {
    /// Index of the spinning vCPU.
    index: u32,
    /// Index of its VM in the run (VMs of a `count > 1` entry are distinct).
    vm: u32,
    /// Number of vCPUs of the VM.
    n_vcpus: u32,
    /// kvm->last_boosted_vcpu.
    last_boosted: u32,
    /// yield_to_kernel_mode.
    in_kernel: bool,
    /// (index, result) of each yield_to already tried in this exit.
    attempts: Vec<(u32, i32)>,
    /// Ground truth (oracle only; no kernel knows it): the vCPU it waits for.
    waited_for: Option<u32>,
    /// The spinner's own state.
    state: PyVcpuView,
}

/// A directed-yield policy implemented by a Python callable
/// `f(spinner, candidates) -> int | None`, called repeatedly within one exit:
/// each returned index is tried with yield_to, until one succeeds or `f`
/// returns None. Candidate examination is charged in round-robin order.
pub(crate) struct PyPolicy {
    f: Arc<Py<PyAny>>,
    err: Arc<Mutex<Option<PyErr>>>,
}

impl PyPolicy {
    /// A policy calling `f`; its exception, if it raises, is kept in `err`.
    pub(crate) fn new(f: Py<PyAny>, err: Arc<Mutex<Option<PyErr>>>) -> Self {
        PyPolicy { f: Arc::new(f), err }
    }
}

impl PyPolicy {
    fn call(&self, py: Python<'_>, ctx: &mut dyn SpinCtx) -> PyResult<()> {
        let n = ctx.n();
        let me = ctx.me();
        let lb = ctx.last_boosted();
        let order: Vec<usize> = (1..=n).map(|i| (lb + i) % n).filter(|&i| i != me).collect();
        let mut attempts: Vec<(u32, i32)> = Vec::new();
        let mut pos = 0usize; // round-robin scan position already charged
        for _ in 0..n.max(1) {
            let cands = PyList::empty(py);
            for &i in &order {
                cands.append(Py::new(py, PyVcpuView::from(ctx.view(i)))?)?;
            }
            let spinner = PySpinner {
                index: me as u32,
                vm: ctx.vm() as u32,
                n_vcpus: n as u32,
                last_boosted: ctx.last_boosted() as u32,
                in_kernel: ctx.spinner_in_kernel(),
                attempts: attempts.clone(),
                waited_for: ctx.waited_for().map(|x| x as u32),
                state: PyVcpuView::from(ctx.view(me)),
            };
            let ret = self.f.call1(py, (spinner, cands))?;
            if ret.is_none(py) {
                for _ in pos..order.len() {
                    ctx.examine();
                }
                break;
            }
            let idx: usize = ret.extract(py).map_err(|_| {
                PyValueError::new_err(format!(
                    "a directed-yield policy must return a vCPU index (int) or None, got {}",
                    ret.bind(py).repr().map(|r| r.to_string()).unwrap_or_default()
                ))
            })?;
            let Some(p) = order.iter().position(|&i| i == idx) else {
                return Err(PyValueError::new_err(format!(
                    "a directed-yield policy returned {idx}, which is not a candidate (0..{n}, not the spinner {me})"
                )));
            };
            let steps = if p >= pos { p - pos + 1 } else { p + 1 };
            for _ in 0..steps {
                ctx.examine();
            }
            pos = p + 1;
            let r = ctx.yield_to(idx);
            attempts.push((idx as u32, r));
            if r > 0 {
                ctx.set_last_boosted(idx);
                break;
            }
        }
        Ok(())
    }
}

impl DirectedYieldPolicy for PyPolicy {
    fn on_spin(&mut self, ctx: &mut dyn SpinCtx) -> Result<(), String> {
        Python::try_attach(|py| match self.call(py, ctx) {
            Ok(()) => Ok(()),
            Err(e) => {
                let msg = e.to_string();
                let mut slot = self.err.lock().unwrap_or_else(|p| p.into_inner());
                if slot.is_none() {
                    *slot = Some(e);
                }
                Err(msg)
            }
        })
        .unwrap_or_else(|| Err("the Python interpreter is shutting down".into()))
    }
}

type Callables = HashMap<String, Arc<Py<PyAny>>>;

fn callables(d: Option<&Bound<'_, PyDict>>) -> PyResult<Callables> {
    let mut m = HashMap::new();
    if let Some(d) = d {
        for (k, v) in d.iter() {
            if !v.is_callable() {
                return Err(PyValueError::new_err(format!("policy '{}' is not callable", k)));
            }
            m.insert(k.extract::<String>()?, Arc::new(v.unbind()));
        }
    }
    Ok(m)
}

fn maker(
    c: &Callables,
    err: &Arc<Mutex<Option<PyErr>>>,
    vm: &VmConfig,
) -> Result<Box<dyn DirectedYieldPolicy>, String> {
    let name = &vm.policy.name;
    match c.get(name) {
        // The callable as given: the Python layer hands each run its own copy
        // (`vcpulab.sim._policies_for`), shared by the VMs of that run.
        Some(f) => Ok(Box::new(PyPolicy { f: f.clone(), err: err.clone() }) as Box<dyn DirectedYieldPolicy>),
        None => Err(format!("no callable given for the Python policy '{name}'")),
    }
}

/// The policy's own Python exception where one was kept, raised as its own
/// type with the failing call named (VM, policy, vCPU, simulated time) and the
/// original as its cause (as a real run under vcpulab's scheduler raises it,
/// `src/py/experiment.rs`); else the error's one conversion (`src/py/errors.rs`).
fn to_pyerr(py: Python<'_>, e: SimError, stored: &Arc<Mutex<Option<PyErr>>>) -> PyErr {
    if let Some(orig) = stored.lock().unwrap_or_else(|p| p.into_inner()).take() {
        return super::errors::policy_error(py, orig, e.to_string());
    }
    PyErr::from(e)
}

/// A table's columns as numpy arrays (moved, not copied: a trace may be most
/// of the memory there is) or lists; a categorical column becomes the tuple
/// `(codes, names)`, which `vcpulab._frames.frame` turns into strings.
fn table_to_dict<'py>(py: Python<'py>, t: Table) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (name, col) in t.columns {
        match col {
            Column::U64(v) => d.set_item(name, v.into_pyarray(py))?,
            Column::I64(v) => d.set_item(name, v.into_pyarray(py))?,
            Column::I32(v) => d.set_item(name, v.into_pyarray(py))?,
            Column::F64(v) => d.set_item(name, v.into_pyarray(py))?,
            Column::Bool(v) => d.set_item(name, v.into_pyarray(py))?,
            Column::Str(v) => d.set_item(name, PyList::new(py, v)?)?,
            Column::Cat { codes, names } => d.set_item(name, (codes.into_pyarray(py), PyList::new(py, names)?))?,
        }
    }
    Ok(d)
}

fn result_to_dict<'py>(py: Python<'py>, r: SimResult) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("summary", table_to_dict(py, r.summary)?)?;
    d.set_item("vms", table_to_dict(py, r.vms)?)?;
    d.set_item("vcpus", table_to_dict(py, r.vcpus)?)?;
    d.set_item("pcpus", table_to_dict(py, r.pcpus)?)?;
    match r.trace {
        Some(t) => d.set_item("trace", table_to_dict(py, t)?)?,
        None => d.set_item("trace", py.None())?,
    }
    match r.schedule {
        Some(t) => d.set_item("schedule", table_to_dict(py, t)?)?,
        None => d.set_item("schedule", py.None())?,
    }
    Ok(d)
}

fn parse(config_json: &str) -> PyResult<SimConfig> {
    SimConfig::from_json(config_json).map_err(PyValueError::new_err)
}

/// Validate a JSON configuration; raises ValueError naming the field.
#[pyfunction]
fn sim_validate(config_json: &str) -> PyResult<String> {
    Ok(parse(config_json)?.to_json())
}

fn trace_limit(trace_max_rows: Option<u64>) -> PyResult<u64> {
    match trace_max_rows {
        None => Ok(u64::MAX),
        Some(0) => Err(PyValueError::new_err("trace_max_rows must be >= 1 (or None: no limit)")),
        Some(n) => Ok(n),
    }
}

/// Run one configuration (JSON). `policies` maps Python policy names to
/// callables. Returns a dict of column dicts. Releases the GIL.
/// `should_stop()` (optional) is polled with the Ctrl-C check (a run on a
/// worker thread never sees Ctrl-C: its caller cancels it through this);
/// `trace_max_rows` bounds the trace (ValueError naming it when reached).
#[pyfunction]
#[pyo3(signature = (config_json, policies=None, should_stop=None, trace_max_rows=None))]
fn sim_run<'py>(
    py: Python<'py>,
    config_json: &str,
    policies: Option<&Bound<'py, PyDict>>,
    should_stop: Option<Py<PyAny>>,
    trace_max_rows: Option<u64>,
) -> PyResult<Bound<'py, PyDict>> {
    let limit = trace_limit(trace_max_rows)?;
    let cfg = parse(config_json)?;
    let calls = callables(policies)?;
    let err: Arc<Mutex<Option<PyErr>>> = Arc::new(Mutex::new(None));
    let interrupt = Interrupt::with_callable(should_stop);
    let res = py.detach(|| {
        let r = sim::run_limited(&cfg, &|_, vm| maker(&calls, &err, vm), &|| interrupt.check(), limit);
        park_if_finalizing();
        r
    });
    if let Some(e) = interrupt.take() {
        return Err(e);
    }
    match res {
        Ok(r) => result_to_dict(py, r),
        Err(e) => Err(to_pyerr(py, e, &err)),
    }
}

/// Run many configurations in parallel on `threads` workers (0 = all cores).
/// `policies[i]` maps the Python policy names of point i to callables.
/// `progress(done)` is called (with the GIL) after each point.
///
/// The calling thread waits with the GIL released and polls for Ctrl-C every
/// 50 ms; on Ctrl-C every running point stops within its next interrupt poll
/// (every 10 ms of its work) and this raises KeyboardInterrupt whose `partial` attribute
/// is the list of results, with None for each point that did not finish.
#[pyfunction]
#[pyo3(signature = (config_jsons, policies=None, threads=0, progress=None, trace_max_rows=None))]
fn sim_sweep<'py>(
    py: Python<'py>,
    config_jsons: Vec<String>,
    policies: Option<Vec<Option<Bound<'py, PyDict>>>>,
    threads: usize,
    progress: Option<Py<PyAny>>,
    trace_max_rows: Option<u64>,
) -> PyResult<Bound<'py, PyList>> {
    let limit = trace_limit(trace_max_rows)?;
    let cfgs: Vec<SimConfig> = config_jsons
        .iter()
        .enumerate()
        .map(|(i, s)| SimConfig::from_json(s).map_err(|e| PyValueError::new_err(format!("point {i}: {e}"))))
        .collect::<PyResult<_>>()?;
    let calls: Vec<Callables> = match &policies {
        Some(p) => {
            if p.len() != cfgs.len() {
                return Err(PyValueError::new_err("policies must hold one entry per configuration"));
            }
            p.iter().map(|d| callables(d.as_ref())).collect::<PyResult<_>>()?
        }
        None => vec![HashMap::new(); cfgs.len()],
    };
    let errs: Vec<Arc<Mutex<Option<PyErr>>>> = (0..cfgs.len()).map(|_| Arc::new(Mutex::new(None))).collect();
    let prog_err: Mutex<Option<PyErr>> = Mutex::new(None);
    let interrupt = Interrupt::flag_only();
    let results = run_polled(py, &interrupt, || {
        let make = |i: usize, _g: usize, vm: &VmConfig| maker(&calls[i], &errs[i], vm);
        let prog = |done: usize| {
            if let Some(p) = &progress {
                Python::try_attach(|py| {
                    if let Err(e) = p.call1(py, (done,)) {
                        let mut s = prog_err.lock().unwrap_or_else(|p| p.into_inner());
                        if s.is_none() {
                            *s = Some(e);
                        }
                    }
                });
            }
        };
        sim::sweep::sweep_limited(&cfgs, threads, &make, &prog, &|| interrupt.check(), limit)
    })
    .map_err(SimError::Bug)?;
    if let Some(e) = interrupt.take() {
        let partial = PyList::empty(py);
        for r in results {
            match r {
                Ok(r) => partial.append(result_to_dict(py, r)?)?,
                Err(_) => partial.append(py.None())?,
            }
        }
        e.value(py).setattr("partial", partial)?;
        return Err(e);
    }
    if let Some(e) = prog_err.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let out = PyList::empty(py);
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(r) => out.append(result_to_dict(py, r)?)?,
            Err(e) => {
                let pe = to_pyerr(py, e, &errs[i]);
                if pe.is_instance_of::<PyValueError>(py) {
                    return Err(PyValueError::new_err(format!("sweep point {i}: {}", pe.value(py))));
                }
                // another type (a Python policy's own exception) keeps its type; the point is a note
                let _ = pe.add_note(py, format!("in sweep point {i}"));
                return Err(pe);
            }
        }
    }
    Ok(out)
}

/// The JSON of the default configuration of each level (for the Python layer's tests).
#[pyfunction]
fn sim_default_config() -> String {
    SimConfig::default().to_json()
}

/// The JSON Schema of the configuration (`crate::sim::config::json_schema`), as JSON text.
#[pyfunction]
fn sim_config_schema() -> String {
    crate::sim::config::json_schema().to_string()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyVcpuView>()?;
    m.add_class::<PySpinner>()?;
    m.add_function(wrap_pyfunction!(sim_validate, m)?)?;
    m.add_function(wrap_pyfunction!(sim_run, m)?)?;
    m.add_function(wrap_pyfunction!(sim_sweep, m)?)?;
    m.add_function(wrap_pyfunction!(sim_default_config, m)?)?;
    m.add_function(wrap_pyfunction!(sim_config_schema, m)?)?;
    // the time categories of the vcpus / pcpus frames, straight from the engine's accounting
    m.add("SIM_VCPU_TIME_CATEGORIES", crate::sim::metrics::VCPU_CATS.to_vec())?;
    m.add("SIM_PCPU_TIME_CATEGORIES", crate::sim::metrics::PCPU_CATS.to_vec())?;
    Ok(())
}

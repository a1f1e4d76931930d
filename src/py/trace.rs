//! Bindings of `kvm::trace`: a `Tracer` Python holds around a run (or for a
//! time, for `attach(pid).trace`), and the run's frames built from it.

use std::sync::Mutex;

use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::kvm::trace::{self, Collected, Frames, TraceOptions, Tracer, VcpuThread};
use crate::py::kvm::PyVcpu;

/// Scheduler and KVM tracepoints on some host CPUs, recorded until `stop()`.
#[pyclass(name = "Tracer", module = "vcpulab._core")]
pub struct PyTracer {
    running: Mutex<Option<Tracer>>,
    collected: Mutex<Option<Collected>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[pymethods]
impl PyTracer {
    #[new]
    /// `vcpus`: this process's vCPUs whose exits to user space their own run
    /// loop times (`kvm::trace::run_loop`), instead of the kernel's
    /// `kvm_userspace_exit` and `kvm_fpu` records, which are then not opened.
    #[pyo3(signature = (cpus, max_events=trace::DEFAULT_MAX_EVENTS, buffer_bytes=trace::DEFAULT_BUFFER_BYTES, kvm_pid=None, kvm_events=true, vcpus=None))]
    fn new(
        py: Python<'_>,
        cpus: Vec<usize>,
        max_events: usize,
        buffer_bytes: usize,
        kvm_pid: Option<i32>,
        kvm_events: bool,
        vcpus: Option<Vec<PyRef<'_, PyVcpu>>>,
    ) -> PyResult<Self> {
        if kvm_pid.is_some_and(|p| p <= 0) {
            return Err(PyValueError::new_err(format!("kvm_pid must be > 0, got {kvm_pid:?}")));
        }
        let run_loop_exits = vcpus.is_some();
        let opts = TraceOptions { max_events, buffer_bytes, kvm_pid, kvm_events, run_loop_exits };
        let t = py.detach(|| Tracer::start(&cpus, opts))?;
        if let Some(log) = t.exit_log() {
            let cells: Vec<&PyVcpu> = vcpus.iter().flatten().map(|v| &**v).collect();
            // a closed vCPU is an error; the tracer (dropped with it) stops on the way out
            py.detach(|| cells.iter().try_for_each(|v| v.time_exits(log.clone())))?;
        }
        Ok(PyTracer { running: Mutex::new(Some(t)), collected: Mutex::new(None) })
    }

    /// True until `stop()` or `close()`.
    #[getter]
    fn running(&self) -> bool {
        lock(&self.running).is_some()
    }

    /// Stops recording (idempotent) and returns what was recorded: events,
    /// lost, dropped, malformed, truncated, first_dropped_ns, counts (per
    /// tracepoint), cpus, start_ns, end_ns (CLOCK_MONOTONIC).
    fn stop<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let t = lock(&self.running).take();
        if let Some(t) = t {
            let c = py.detach(|| t.stop())?;
            *lock(&self.collected) = Some(c);
        }
        let guard = lock(&self.collected);
        let c = guard.as_ref().ok_or_else(|| PyValueError::new_err("the Tracer was closed"))?;
        let d = PyDict::new(py);
        d.set_item("events", c.events.len())?;
        d.set_item("lost", c.lost)?;
        d.set_item("dropped", c.dropped)?;
        d.set_item("malformed", c.malformed)?;
        d.set_item("truncated", c.truncated())?;
        d.set_item("first_dropped_ns", c.first_dropped_ns)?;
        d.set_item("counts", c.counts.clone())?;
        d.set_item("cpus", c.cpus.clone())?;
        d.set_item("start_ns", c.start_ns)?;
        d.set_item("end_ns", c.end_ns)?;
        Ok(d)
    }

    /// The frames of window [start_ns, end_ns) (CLOCK_MONOTONIC) for the vCPU
    /// threads `vcpus` = [(tid, vm, vcpu)]: {"trace": {...}, "wakeups": {...},
    /// "exits": {...}, "halts": {...}}, i64 columns with `NONE` for null.
    fn frames<'py>(
        &self,
        py: Python<'py>,
        start_ns: u64,
        end_ns: u64,
        vcpus: Vec<(i32, i64, i64)>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let guard = lock(&self.collected);
        let c =
            guard.as_ref().ok_or_else(|| PyValueError::new_err("stop() the Tracer before asking for its frames"))?;
        let threads: Vec<VcpuThread> = vcpus.iter().map(|&(tid, vm, vcpu)| VcpuThread { tid, vm, vcpu }).collect();
        let f = py.detach(|| Frames::build(c, start_ns, end_ns, &threads));
        let out = PyDict::new(py);
        let d = PyDict::new(py);
        d.set_item("pcpu", PyArray1::from_vec(py, f.t_pcpu))?;
        d.set_item("start_ns", PyArray1::from_vec(py, f.t_start_ns))?;
        d.set_item("end_ns", PyArray1::from_vec(py, f.t_end_ns))?;
        d.set_item("vm", PyArray1::from_vec(py, f.t_vm))?;
        d.set_item("vcpu", PyArray1::from_vec(py, f.t_vcpu))?;
        d.set_item("tid", PyArray1::from_vec(py, f.t_tid))?;
        d.set_item("comm", f.t_comm)?;
        out.set_item("trace", d)?;
        let d = PyDict::new(py);
        d.set_item("vm", PyArray1::from_vec(py, f.w_vm))?;
        d.set_item("vcpu", PyArray1::from_vec(py, f.w_vcpu))?;
        d.set_item("tid", PyArray1::from_vec(py, f.w_tid))?;
        d.set_item("wake_ns", PyArray1::from_vec(py, f.w_wake_ns))?;
        d.set_item("run_ns", PyArray1::from_vec(py, f.w_run_ns))?;
        out.set_item("wakeups", d)?;
        let d = PyDict::new(py);
        d.set_item("vm", PyArray1::from_vec(py, f.e_vm))?;
        d.set_item("vcpu", PyArray1::from_vec(py, f.e_vcpu))?;
        d.set_item("reason", f.e_reason)?;
        d.set_item("exit_ns", PyArray1::from_vec(py, f.e_exit_ns))?;
        d.set_item("entry_ns", PyArray1::from_vec(py, f.e_entry_ns))?;
        out.set_item("exits", d)?;
        let d = PyDict::new(py);
        d.set_item("vm", PyArray1::from_vec(py, f.h_vm))?;
        d.set_item("vcpu", PyArray1::from_vec(py, f.h_vcpu))?;
        d.set_item("time_ns", PyArray1::from_vec(py, f.h_time_ns))?;
        d.set_item("polled", PyArray1::from_vec(py, f.h_polled))?;
        d.set_item("ns", PyArray1::from_vec(py, f.h_ns))?;
        d.set_item("valid", PyArray1::from_vec(py, f.h_valid))?;
        d.set_item("window_ns", PyArray1::from_vec(py, f.h_window_ns))?;
        out.set_item("halts", d)?;
        out.set_item("exits_source", f.exits_source)?;
        out.set_item("inferred_switch_ins", f.inferred_switch_ins)?;
        out.set_item("complete_until_ns", f.complete_until_ns)?;
        Ok(out)
    }

    /// Stops recording and frees everything (idempotent).
    fn close(&self, py: Python<'_>) {
        let t = lock(&self.running).take();
        py.detach(|| drop(t));
        lock(&self.collected).take();
    }
}

/// CLOCK_MONOTONIC now, ns (the time base of traces).
#[pyfunction]
fn monotonic_ns() -> u64 {
    crate::kvm::os::monotonic_ns()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyTracer>()?;
    m.add_function(wrap_pyfunction!(monotonic_ns, m)?)?;
    m.add("TRACE_EVENTS", trace::EVENTS.iter().map(|(s, e, _)| format!("{s}:{e}")).collect::<Vec<_>>())?;
    m.add("TRACE_RUN_LOOP_REPLACES", trace::RUN_LOOP_REPLACES.iter().map(|e| format!("kvm:{e}")).collect::<Vec<_>>())?;
    m.add("TRACE_NULL", trace::NONE)?;
    m.add("TRACE_DEFAULT_MAX_EVENTS", trace::DEFAULT_MAX_EVENTS)?;
    m.add("TRACE_DEFAULT_BUFFER_BYTES", trace::DEFAULT_BUFFER_BYTES)?;
    Ok(())
}

//! Thin pyo3 classes over `crate::kvm`. Each method converts arguments, calls the
//! core (with the GIL released for anything that can block), and converts the
//! result to plain Python values; `python/vcpulab/kvm.py` adds the ergonomics.
//!
//! Locking rule: a core lock is only ever taken with the GIL released
//! (`py.detach`), so a thread blocked on a lock never holds the GIL that the
//! lock's holder might need.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use numpy::ndarray::ArrayView1;
use numpy::PyArray1;
use pyo3::exceptions::{PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyFloat, PyInt, PyList};

use crate::kvm::guest::program::Program;
use crate::kvm::guest::spec::{Param, Params, Spec, PROGRAMS};
use crate::kvm::kick::{self, RunSlot};
use crate::kvm::memory::GuestMemory;
use crate::kvm::stats::{StatKind, StatsFd, StatsSchema};
use crate::kvm::vcpu::{regs_from_array, regs_to_array, VcpuObserver, REG_NAMES};
use crate::kvm::{self, Error, Exit, RunUntil, Ucall};
use crate::py::exit::PyExit;
use crate::py::interrupt::Interrupt;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `run_checked`'s `timeout_s`: not passed (the default), or the object
/// passed, None included (which the checks refuse, as the Python method does).
enum TimeoutArg<'py> {
    Absent,
    Given(Bound<'py, PyAny>),
}

impl<'a, 'py> FromPyObject<'a, 'py> for TimeoutArg<'py> {
    type Error = PyErr;
    fn extract(obj: pyo3::Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(TimeoutArg::Given(obj.to_owned()))
    }
}

/// `Vcpu.run`'s default deadline, s (vcpulab/kvm.py).
const DEFAULT_RUN_TIMEOUT_S: f64 = 10.0;
/// The longest deadline a run takes, s (one day; `kvm.MAX_TIMEOUT_S`).
const MAX_TIMEOUT_S: f64 = 86_400.0;

pub(crate) fn timeout_deadline(timeout: f64) -> PyResult<Instant> {
    if !(timeout.is_finite() && timeout > 0.0) {
        return Err(PyValueError::new_err(format!(
            "timeout must be a positive, finite number of seconds, got {timeout}"
        )));
    }
    if timeout > MAX_TIMEOUT_S {
        return Err(PyValueError::new_err(format!("timeout must be at most one day, got {timeout} s")));
    }
    Ok(Instant::now() + Duration::from_secs_f64(timeout))
}

/// `/dev/kvm`.
#[pyclass(module = "vcpulab._core", name = "Host", frozen)]
pub struct PyHost {
    inner: kvm::Host,
}

#[pymethods]
impl PyHost {
    #[new]
    #[pyo3(signature = (path = "/dev/kvm"))]
    fn new(py: Python<'_>, path: &str) -> PyResult<Self> {
        let path = path.to_string();
        Ok(Self { inner: py.detach(|| kvm::Host::open_path(&path))? })
    }

    #[getter]
    fn api_version(&self) -> i32 {
        self.inner.api_version()
    }

    #[getter]
    fn max_vcpus(&self) -> usize {
        self.inner.max_vcpus()
    }

    #[getter]
    fn max_vcpu_id(&self) -> usize {
        self.inner.max_vcpu_id()
    }

    /// [(name, number, value)] for the named capabilities.
    fn capabilities(&self) -> Vec<(&'static str, u32, i32)> {
        self.inner.capabilities()
    }

    fn check_extension(&self, cap: u32) -> i32 {
        self.inner.check_extension(cap)
    }

    /// [(name, offered)] for the KVM PV feature bits of CPUID 0x40000001.
    fn pv_features(&self) -> Vec<(&'static str, bool)> {
        self.inner.pv_features()
    }

    #[getter]
    fn pv_feature_bits(&self) -> u32 {
        self.inner.pv_feature_bits()
    }

    /// KVM_GET_SUPPORTED_CPUID as [(function, index, flags, eax, ebx, ecx, edx)].
    fn supported_cpuid(&self) -> Vec<CpuidRow> {
        self.inner
            .supported_cpuid()
            .iter()
            .map(|e| (e.function, e.index, e.flags, e.eax, e.ebx, e.ecx, e.edx))
            .collect()
    }

    fn create_vm(&self, py: Python<'_>, memory_mib: u64, irqchip: bool) -> PyResult<PyVm> {
        let vm = py.detach(|| self.inner.create_vm(kvm::VmOptions { memory_mib, irqchip }))?;
        let fd = vm.fd.clone();
        Ok(PyVm {
            state: Mutex::new(Some(VmState { vm, vcpus: Vec::new() })),
            fd: Mutex::new(Some(fd)),
            irqchip,
            memory_bytes: memory_mib << 20,
            fork_generation: kick::fork_generation(),
        })
    }
}

pub(crate) struct VcpuCell {
    pub(crate) core: Mutex<Option<kvm::Vcpu>>,
    pub(crate) slot: Arc<RunSlot>,
    pub(crate) closed: AtomicBool,
    /// Steal time and stats, readable while another thread runs the vCPU
    /// (they need no vCPU ioctl, so not the `core` lock); None once closed.
    pub(crate) observer: Mutex<Option<VcpuObserver>>,
}

impl VcpuCell {
    fn observer(&self) -> kvm::Result<VcpuObserver> {
        lock(&self.observer).clone().ok_or(Error::Closed("Vcpu (its Vm)"))
    }
}

struct VmState {
    vm: kvm::Vm,
    vcpus: Vec<Arc<VcpuCell>>,
}

/// Keeps guest RAM mapped while a numpy view of it exists.
#[pyclass(module = "vcpulab._core", frozen)]
struct RamOwner {
    _mem: Arc<GuestMemory>,
}

/// A VM. Thread-safe: vCPUs may run in other threads while this object is used.
#[pyclass(module = "vcpulab._core", name = "Vm", frozen)]
pub struct PyVm {
    state: Mutex<Option<VmState>>,
    fd: Mutex<Option<Arc<kvm::vm::VmHandle>>>,
    #[pyo3(get)]
    irqchip: bool,
    #[pyo3(get)]
    memory_bytes: u64,
    /// `kick::fork_generation()` when created: a forked child must not kick
    /// the parent's vCPU threads (they do not exist there)
    fork_generation: u64,
}

/// A Vm dropped without `close()` (garbage collected) closes as `close()`
/// does. In Rust, not in a Python `__del__`: a Ctrl-C landing in a Python
/// finalizer is printed as "Exception ignored" and lost to the code it was
/// meant to stop; here no Python code runs. In a forked child only the
/// child's copies of the fds are closed (no kick).
impl Drop for PyVm {
    fn drop(&mut self) {
        if self.fork_generation != kick::fork_generation() {
            return;
        }
        let state = &self.state;
        let fd = &self.fd;
        // Dropped by CPython's deallocator, which holds the GIL: release it
        // while the vCPUs stop, as close() does (a vCPU thread may need it to
        // leave a Python policy call). At interpreter shutdown no thread runs
        // Python any more, and attaching would panic: close in place.
        if Python::try_attach(|py| py.detach(|| close_state(state, fd))).is_none() {
            close_state(state, fd);
        }
    }
}

fn close_state(state: &Mutex<Option<VmState>>, fd: &Mutex<Option<Arc<kvm::vm::VmHandle>>>) {
    let st = lock(state).take();
    lock(fd).take();
    if let Some(st) = st {
        for c in &st.vcpus {
            c.closed.store(true, Ordering::SeqCst);
            c.slot.stop();
            lock(&c.core).take();
            lock(&c.observer).take();
        }
        drop(st);
    }
}

impl PyVm {
    fn with<R: Send>(&self, py: Python<'_>, f: impl FnOnce(&mut VmState) -> kvm::Result<R> + Send) -> PyResult<R> {
        Ok(py.detach(|| {
            let mut g = lock(&self.state);
            let st = g.as_mut().ok_or(Error::Closed("Vm"))?;
            f(st)
        })?)
    }

    fn mem(&self, py: Python<'_>) -> PyResult<Arc<GuestMemory>> {
        self.with(py, |st| Ok(st.vm.memory().clone()))
    }
}

fn program_dict<'py>(py: Python<'py>, p: &Program) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", &p.name)?;
    d.set_item("entry", p.entry)?;
    d.set_item("code_size", p.code.len())?;
    d.set_item("data", p.data)?;
    d.set_item("data_size", p.data_size)?;
    let results = PyList::empty(py);
    for r in &p.results {
        let rd = PyDict::new(py);
        rd.set_item("name", r.name)?;
        rd.set_item("gpa", r.gpa)?;
        rd.set_item("count", r.count)?;
        rd.set_item("stride", r.stride)?;
        rd.set_item("doc", r.doc)?;
        results.append(rd)?;
    }
    d.set_item("results", results)?;
    let params = PyDict::new(py);
    for (k, v) in &p.params {
        params.set_item(k, v)?;
    }
    d.set_item("params", params)?;
    d.set_item("asserts", p.asserts.iter().map(|a| (a.location.clone(), a.message.clone())).collect::<Vec<_>>())?;
    Ok(d)
}

/// A `Vm.load` keyword argument as the program registry reads it
/// (`kvm::guest::spec::Param`): an integer that fits u64, a string, or else
/// its repr, which the registry names in its error.
fn param_of(v: &Bound<'_, PyAny>) -> PyResult<Param> {
    if let Ok(i) = v.extract::<u64>() {
        return Ok(Param::Int(i));
    }
    if let Ok(s) = v.extract::<String>() {
        return Ok(Param::Str(s));
    }
    Ok(Param::Other(v.str()?.to_string()))
}

/// Builds a program spec from its name and keyword parameters
/// (`Spec::from_params` does the checking).
fn spec_from(name: &str, p: &Bound<'_, PyDict>) -> PyResult<Spec> {
    let mut params = Params::new();
    for (k, v) in p.iter() {
        params.insert(k.extract()?, param_of(&v)?);
    }
    Ok(Spec::from_params(name, &params)?)
}

/// (function, index, flags, eax, ebx, ecx, edx) of one CPUID entry.
type CpuidRow = (u32, u32, u32, u32, u32, u32, u32);

type SchemaRow = (String, &'static str, &'static str, u32, i16, u16, u32);

fn schema_rows(fd: &StatsFd) -> Vec<SchemaRow> {
    fd.schema
        .descs
        .iter()
        .map(|d| (d.name.clone(), d.kind.name(), d.unit.name(), d.base, d.exponent, d.size, d.bucket_size))
        .collect()
}

#[pymethods]
impl PyVm {
    /// Releases every vCPU, the VM fd and (once no numpy view is left) guest RAM.
    /// Running vCPUs are kicked out of KVM_RUN first. Idempotent.
    fn close(&self, py: Python<'_>) {
        py.detach(|| close_state(&self.state, &self.fd))
    }

    #[getter]
    fn closed(&self) -> bool {
        lock(&self.state).is_none()
    }

    /// Zero-copy, writable numpy uint8 view of guest RAM.
    #[getter]
    fn memory<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u8>>> {
        let mem = self.mem(py)?;
        // SAFETY: the mapping is `mem.size()` bytes, page-aligned, and lives as long
        // as the `RamOwner` that becomes the array's base object.
        let view = unsafe { ArrayView1::from_shape_ptr(mem.size(), mem.host_addr() as *const u8) };
        let owner = Bound::new(py, RamOwner { _mem: mem.clone() })?;
        // SAFETY: `owner` holds an Arc to the mapping, so the memory outlives the
        // array, and the mapping is never moved or resized.
        Ok(unsafe { PyArray1::borrow_from_array(&view, owner.into_any()) })
    }

    fn read<'py>(&self, py: Python<'py>, gpa: u64, n: usize) -> PyResult<Bound<'py, PyBytes>> {
        let mem = self.mem(py)?;
        mem.check_range(gpa, n)?;
        PyBytes::new_with(py, n, |buf| Ok(mem.read(gpa, buf)?))
    }

    fn write(&self, py: Python<'_>, gpa: u64, data: &[u8]) -> PyResult<()> {
        Ok(self.mem(py)?.write(gpa, data)?)
    }

    fn read_u64(&self, py: Python<'_>, gpa: u64) -> PyResult<u64> {
        Ok(self.mem(py)?.read_u64(gpa)?)
    }

    fn write_u64(&self, py: Python<'_>, gpa: u64, value: u64) -> PyResult<()> {
        Ok(self.mem(py)?.write_u64(gpa, value)?)
    }

    fn write_u8(&self, py: Python<'_>, gpa: u64, value: u8) -> PyResult<()> {
        Ok(self.mem(py)?.write_u8(gpa, value)?)
    }

    /// Assembles and loads a built-in guest program; returns its description.
    #[pyo3(signature = (name, **params))]
    fn load<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        params: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let empty = PyDict::new(py);
        let spec = spec_from(name, params.unwrap_or(&empty))?;
        let prog = self.with(py, |st| st.vm.load(&spec))?;
        program_dict(py, &prog)
    }

    fn create_vcpu(&self, py: Python<'_>, id: u64) -> PyResult<PyVcpu> {
        let cell = self.with(py, |st| {
            let mut v = st.vm.create_vcpu(id)?;
            let observer = v.observer()?;
            let cell = Arc::new(VcpuCell {
                slot: v.run_slot(),
                core: Mutex::new(Some(v)),
                closed: AtomicBool::new(false),
                observer: Mutex::new(Some(observer)),
            });
            st.vcpus.push(cell.clone());
            Ok(cell)
        })?;
        Ok(PyVcpu { cell, id, fork_gen: kick::fork_generation() })
    }

    fn vcpu_ids(&self, py: Python<'_>) -> PyResult<Vec<u64>> {
        self.with(py, |st| Ok(st.vm.vcpu_ids()))
    }

    fn set_halt_poll_ns(&self, py: Python<'_>, ns: u64) -> PyResult<()> {
        self.with(py, |st| st.vm.set_halt_poll_ns(ns))
    }

    fn halt_poll_override(&self, py: Python<'_>) -> PyResult<Option<u32>> {
        self.with(py, |st| Ok(st.vm.halt_poll_override()))
    }

    fn allowed_disable_exits(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |st| Ok(st.vm.allowed_disable_exits()))
    }

    fn disable_exits(&self, py: Python<'_>, bits: u64) -> PyResult<()> {
        self.with(py, |st| st.vm.disable_exits(bits))
    }

    fn disabled_exits(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |st| Ok(st.vm.disabled_exits()))
    }

    fn send_msi(&self, py: Python<'_>, dest: u32, vector: u32) -> PyResult<()> {
        let fd = lock(&self.fd).clone().ok_or(Error::Closed("Vm"))?;
        let irqchip = self.irqchip;
        Ok(py.detach(|| kvm::vm::send_msi(&fd, irqchip, dest, vector))?)
    }

    /// Sends `count` MSIs `gap_ns` apart (busy-waiting for precision, GIL
    /// released). Returns (sent, elapsed_ns, max_late_ns). Stops early, with
    /// what was sent, if the VM is closed; raises if a send fails.
    fn msi_train(&self, py: Python<'_>, dest: u32, vector: u32, count: u64, gap_ns: u64) -> PyResult<(u64, u64, u64)> {
        let fd = lock(&self.fd).clone().ok_or(Error::Closed("Vm"))?;
        let irqchip = self.irqchip;
        let signals = Interrupt::paced();
        let r = py.detach(|| -> kvm::Result<(u64, u64, u64)> {
            let t0 = Instant::now();
            let mut max_late = 0u64;
            let stop = || lock(&self.state).is_none() || signals.check();
            for i in 0..count {
                let due = t0 + Duration::from_nanos(gap_ns.saturating_mul(i));
                if !kvm::vm::wait_until_or(due, &stop) {
                    return Ok((i, t0.elapsed().as_nanos() as u64, max_late));
                }
                max_late = max_late.max(Instant::now().duration_since(due).as_nanos() as u64);
                if stop() {
                    return Ok((i, t0.elapsed().as_nanos() as u64, max_late));
                }
                kvm::vm::send_msi(&fd, irqchip, dest, vector)?;
            }
            Ok((count, t0.elapsed().as_nanos() as u64, max_late))
        });
        if let Some(e) = signals.take() {
            return Err(e);
        }
        Ok(r?)
    }

    /// MSI ping-pong with a guest that counts its halts at `counter_gpa` (see
    /// `kvm::vm::msi_ping`); returns the per-round round-trip times (ns) as numpy.
    #[pyo3(signature = (dest, vector, count, gap_ns, counter_gpa, timeout = 30.0, halts_before = 0))]
    #[allow(clippy::too_many_arguments)]
    fn msi_ping<'py>(
        &self,
        py: Python<'py>,
        dest: u32,
        vector: u32,
        count: u64,
        gap_ns: u64,
        counter_gpa: u64,
        timeout: f64,
        halts_before: u64,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let deadline = timeout_deadline(timeout)?;
        let fd = lock(&self.fd).clone().ok_or(Error::Closed("Vm"))?;
        let mem = self.mem(py)?;
        let irqchip = self.irqchip;
        let signals = Interrupt::paced();
        let rtt = py.detach(|| {
            let stop = || lock(&self.state).is_none() || signals.check();
            kvm::vm::msi_ping(
                &fd,
                irqchip,
                &mem,
                dest,
                vector,
                count,
                Duration::from_nanos(gap_ns),
                counter_gpa,
                halts_before,
                deadline,
                &stop,
            )
        });
        if let Some(e) = signals.take() {
            return Err(e);
        }
        Ok(PyArray1::from_vec(py, rtt?))
    }

    /// VM binary stats: {name: int or numpy array}.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (schema, data) = self.with(py, |st| {
            let fd = st.vm.stats_fd()?;
            let mut data = Vec::new();
            fd.read_data(&mut data)?;
            Ok((fd.schema.clone(), data))
        })?;
        stats_dict(py, &schema, &data)
    }

    /// [(name, type, unit, base, exponent, size, bucket_size)] of the VM stats.
    fn stats_schema(&self, py: Python<'_>) -> PyResult<Vec<SchemaRow>> {
        self.with(py, |st| Ok(schema_rows(st.vm.stats_fd()?)))
    }

    /// Steal-time snapshots of the areas at `gpas`, packed as the 24-byte
    /// records of `STEAL_DTYPE` (steal u64, version u32, flags u32, preempted u8,
    /// is_idle u8, 6 pad bytes); no syscalls.
    fn steal_times<'py>(&self, py: Python<'py>, gpas: Vec<u64>) -> PyResult<Bound<'py, PyBytes>> {
        let mem = self.mem(py)?;
        let snaps =
            py.detach(|| gpas.iter().map(|&g| kvm::vm::read_steal(&mem, g)).collect::<kvm::Result<Vec<_>>>())?;
        let mut out = Vec::with_capacity(snaps.len() * 24);
        for s in &snaps {
            out.extend_from_slice(&s.steal_ns.to_le_bytes());
            out.extend_from_slice(&s.version.to_le_bytes());
            out.extend_from_slice(&s.flags.to_le_bytes());
            out.push(s.preempted);
            out.push(s.is_idle);
            out.extend_from_slice(&[0; 6]);
        }
        Ok(PyBytes::new(py, &out))
    }
}

/// {name: int, or a numpy array for histograms} from one data block.
pub(crate) fn stats_dict<'py>(py: Python<'py>, schema: &StatsSchema, data: &[u8]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (i, desc) in schema.descs.iter().enumerate() {
        let vals: Vec<u64> = schema.values(data, i).collect();
        match desc.kind {
            StatKind::LinearHist | StatKind::LogHist => d.set_item(&desc.name, PyArray1::from_vec(py, vals))?,
            _ if vals.len() == 1 => d.set_item(&desc.name, vals[0])?,
            _ => d.set_item(&desc.name, PyArray1::from_vec(py, vals))?,
        }
    }
    Ok(d)
}

/// A vCPU. Its methods may be called from any thread; `run*` release the GIL.
#[pyclass(module = "vcpulab._core", name = "Vcpu", frozen)]
pub struct PyVcpu {
    pub(crate) cell: Arc<VcpuCell>,
    #[pyo3(get)]
    pub(crate) id: u64,
    /// `kick::fork_generation()` when it was created: `run_checked` refuses
    /// to run in a child forked since, as `ForkSafe` does in Python.
    fork_gen: u64,
}

impl PyVcpu {
    /// Times this vCPU's `KVM_RUN`s into a trace's exit log (`Trace(vcpus=...)`);
    /// waits for a run in another thread to return first.
    pub(crate) fn time_exits(&self, log: Arc<crate::kvm::trace::ExitLog>) -> kvm::Result<()> {
        let mut g = lock(&self.cell.core);
        g.as_mut().ok_or(Error::Closed("Vcpu (its Vm)"))?.time_exits(log);
        Ok(())
    }

    /// One KVM_RUN with a deadline `timeout` seconds away (`run`, `run_checked`).
    fn run_exit(&self, py: Python<'_>, timeout: f64) -> PyResult<PyExit> {
        let deadline = timeout_deadline(timeout)?;
        let e =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.with(py, |v| v.run_once(Some(deadline)))))
                .map_err(|p| crate::py::errors::bug(p.as_ref()))??;
        if e == Exit::Interrupted && !self.cell.closed.load(Ordering::SeqCst) {
            py.check_signals()?;
        }
        Ok(PyExit::new(py, &e))
    }

    fn with<R: Send>(&self, py: Python<'_>, f: impl FnOnce(&mut kvm::Vcpu) -> kvm::Result<R> + Send) -> PyResult<R> {
        Ok(py.detach(|| {
            let mut g = lock(&self.cell.core);
            let v = g.as_mut().ok_or(Error::Closed("Vcpu (its Vm)"))?;
            f(v)
        })?)
    }
}

const SEGMENTS: [&str; 8] = ["cs", "ds", "es", "fs", "gs", "ss", "tr", "ldt"];
const SEG_FIELDS: [&str; 12] =
    ["base", "limit", "selector", "type", "present", "dpl", "db", "s", "l", "g", "avl", "unusable"];
const SREG_SCALARS: [&str; 7] = ["cr0", "cr2", "cr3", "cr4", "cr8", "efer", "apic_base"];

fn seg_get(s: &kvm_bindings::kvm_segment) -> [u64; 12] {
    [
        s.base,
        s.limit as u64,
        s.selector as u64,
        s.type_ as u64,
        s.present as u64,
        s.dpl as u64,
        s.db as u64,
        s.s as u64,
        s.l as u64,
        s.g as u64,
        s.avl as u64,
        s.unusable as u64,
    ]
}

fn seg_set(s: &mut kvm_bindings::kvm_segment, field: &str, v: u64) -> PyResult<()> {
    let too_big = || PyValueError::new_err(format!("segment field {field}={v:#x} is out of range"));
    match field {
        "base" => s.base = v,
        "limit" => s.limit = u32::try_from(v).map_err(|_| too_big())?,
        "selector" => s.selector = u16::try_from(v).map_err(|_| too_big())?,
        f => {
            let b = u8::try_from(v).map_err(|_| too_big())?;
            match f {
                "type" => s.type_ = b,
                "present" => s.present = b,
                "dpl" => s.dpl = b,
                "db" => s.db = b,
                "s" => s.s = b,
                "l" => s.l = b,
                "g" => s.g = b,
                "avl" => s.avl = b,
                "unusable" => s.unusable = b,
                other => {
                    return Err(PyValueError::new_err(format!(
                        "unknown segment field {other:?}; fields: {}",
                        SEG_FIELDS.join(", ")
                    )))
                }
            }
        }
    }
    Ok(())
}

fn seg_mut<'a>(s: &'a mut kvm_bindings::kvm_sregs, name: &str) -> Option<&'a mut kvm_bindings::kvm_segment> {
    Some(match name {
        "cs" => &mut s.cs,
        "ds" => &mut s.ds,
        "es" => &mut s.es,
        "fs" => &mut s.fs,
        "gs" => &mut s.gs,
        "ss" => &mut s.ss,
        "tr" => &mut s.tr,
        "ldt" => &mut s.ldt,
        _ => return None,
    })
}

#[pymethods]
impl PyVcpu {
    /// General-purpose registers {name: value}.
    fn get_regs(&self, py: Python<'_>) -> PyResult<Vec<(&'static str, u64)>> {
        let r = self.with(py, |v| v.regs())?;
        Ok(REG_NAMES.iter().copied().zip(regs_to_array(&r)).collect())
    }

    /// Updates the named registers (others keep their values).
    fn set_regs(&self, py: Python<'_>, values: Vec<(String, u64)>) -> PyResult<()> {
        let mut idx = Vec::with_capacity(values.len());
        for (k, val) in &values {
            let i = REG_NAMES.iter().position(|n| n == k).ok_or_else(|| {
                PyValueError::new_err(format!("unknown register {k:?}; registers: {}", REG_NAMES.join(", ")))
            })?;
            idx.push((i, *val));
        }
        self.with(py, |v| {
            let mut a = regs_to_array(&v.regs()?);
            for (i, val) in idx {
                a[i] = val;
            }
            v.set_regs(&regs_from_array(&a))
        })
    }

    /// Special registers: {"cs": {...}, ..., "gdt": (base, limit), "idt": (base, limit), "cr0": …}.
    fn get_sregs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let mut s = self.with(py, |v| v.sregs())?;
        let d = PyDict::new(py);
        for name in SEGMENTS {
            let seg = seg_get(seg_mut(&mut s, name).expect("known segment"));
            let sd = PyDict::new(py);
            for (f, val) in SEG_FIELDS.iter().zip(seg) {
                sd.set_item(*f, val)?;
            }
            d.set_item(name, sd)?;
        }
        d.set_item("gdt", (s.gdt.base, s.gdt.limit))?;
        d.set_item("idt", (s.idt.base, s.idt.limit))?;
        for (n, val) in SREG_SCALARS.iter().zip([s.cr0, s.cr2, s.cr3, s.cr4, s.cr8, s.efer, s.apic_base]) {
            d.set_item(*n, val)?;
        }
        Ok(d)
    }

    /// Updates the given special registers (same shape as `get_sregs`, any subset).
    fn set_sregs(&self, py: Python<'_>, values: &Bound<'_, PyDict>) -> PyResult<()> {
        let mut s = self.with(py, |v| v.sregs())?;
        for (k, val) in values.iter() {
            let k: String = k.extract()?;
            if let Some(seg) = seg_mut(&mut s, &k) {
                let fields = val
                    .cast::<PyDict>()
                    .map_err(|_| PyValueError::new_err(format!("{k} must be a dict of segment fields")))?;
                for (f, fv) in fields.iter() {
                    seg_set(seg, &f.extract::<String>()?, fv.extract::<u64>()?)?;
                }
                continue;
            }
            match k.as_str() {
                "gdt" | "idt" => {
                    let (base, limit): (u64, u16) = val.extract()?;
                    let t = if k == "gdt" { &mut s.gdt } else { &mut s.idt };
                    t.base = base;
                    t.limit = limit;
                }
                "cr0" => s.cr0 = val.extract()?,
                "cr2" => s.cr2 = val.extract()?,
                "cr3" => s.cr3 = val.extract()?,
                "cr4" => s.cr4 = val.extract()?,
                "cr8" => s.cr8 = val.extract()?,
                "efer" => s.efer = val.extract()?,
                "apic_base" => s.apic_base = val.extract()?,
                other => {
                    return Err(PyValueError::new_err(format!(
                        "unknown special register {other:?}; known: {}, gdt, idt, {}",
                        SEGMENTS.join(", "),
                        SREG_SCALARS.join(", ")
                    )))
                }
            }
        }
        self.with(py, move |v| v.set_sregs(&s))
    }

    fn get_msrs(&self, py: Python<'_>, indices: Vec<u32>) -> PyResult<Vec<(u32, u64)>> {
        self.with(py, |v| v.get_msrs(&indices))
    }

    fn set_msrs(&self, py: Python<'_>, values: Vec<(u32, u64)>) -> PyResult<()> {
        self.with(py, |v| v.set_msrs(&values))
    }

    /// KVM_GET_CPUID2 as [(function, index, flags, eax, ebx, ecx, edx)].
    fn cpuid(&self, py: Python<'_>) -> PyResult<Vec<CpuidRow>> {
        let c = self.with(py, |v| v.cpuid())?;
        Ok(c.iter().map(|e| (e.function, e.index, e.flags, e.eax, e.ebx, e.ecx, e.edx)).collect())
    }

    fn tsc_khz(&self, py: Python<'_>) -> PyResult<u32> {
        self.with(py, |v| v.tsc_khz())
    }

    fn mp_state(&self, py: Python<'_>) -> PyResult<u32> {
        self.with(py, |v| v.mp_state())
    }

    /// Points the vCPU at `entry` with a fresh stack and rdi = its id.
    fn start(&self, py: Python<'_>, entry: u64) -> PyResult<()> {
        self.with(py, |v| v.start(entry))
    }

    #[pyo3(signature = (gpa = None))]
    fn enable_steal_time(&self, py: Python<'_>, gpa: Option<u64>) -> PyResult<u64> {
        let gpa = self.with(py, |v| v.enable_steal_time(gpa))?;
        if let Some(o) = lock(&self.cell.observer).as_mut() {
            o.steal_gpa = Some(gpa);
        }
        Ok(gpa)
    }

    /// The steal-time area's gpa (None until enabled). Never waits for a run.
    #[getter]
    fn steal_gpa(&self) -> PyResult<Option<u64>> {
        Ok(self.cell.observer()?.steal_gpa)
    }

    /// (steal_ns, version, flags, preempted, is_idle), read with the version
    /// protocol; a memory read, so it works while another thread runs the vCPU.
    fn steal_time(&self) -> PyResult<(u64, u32, u32, u8, u8)> {
        let s = self.cell.observer()?.steal_time()?.ok_or_else(|| {
            Error::InvalidArgument("steal time is not enabled on this vCPU; call enable_steal_time() first".into())
        })?;
        Ok((s.steal_ns, s.version, s.flags, s.preempted, s.is_idle))
    }

    #[getter]
    fn io_in_value(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |v| Ok(v.io_in_value))
    }

    #[setter]
    fn set_io_in_value(&self, py: Python<'_>, value: u64) -> PyResult<()> {
        self.with(py, |v| {
            v.io_in_value = value;
            Ok(())
        })
    }

    #[getter]
    fn mmio_read_value(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |v| Ok(v.mmio_read_value))
    }

    #[setter]
    fn set_mmio_read_value(&self, py: Python<'_>, value: u64) -> PyResult<()> {
        self.with(py, |v| {
            v.mmio_read_value = value;
            Ok(())
        })
    }

    /// vCPU binary stats: {name: int or numpy array} (one pread; works while
    /// another thread runs the vCPU).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let fd = self.cell.observer()?.stats;
        let mut data = Vec::new();
        fd.read_data(&mut data)?;
        stats_dict(py, &fd.schema, &data)
    }

    /// Scalar stats only, as (names, values): one pread; for sampling.
    fn stats_scalars<'py>(&self, py: Python<'py>) -> PyResult<(Vec<String>, Bound<'py, PyArray1<u64>>)> {
        let obs = self.cell.observer()?;
        let (names, vals) = py.detach(|| -> kvm::Result<_> {
            let fd = &obs.stats;
            let mut data = Vec::new();
            fd.read_data(&mut data)?;
            let mut names = Vec::new();
            let mut vals = Vec::new();
            for (i, d) in fd.schema.descs.iter().enumerate() {
                if d.size == 1 && !matches!(d.kind, StatKind::LinearHist | StatKind::LogHist) {
                    names.push(d.name.clone());
                    vals.push(fd.schema.values(&data, i).next().unwrap_or(0));
                }
            }
            Ok((names, vals))
        })?;
        Ok((names, PyArray1::from_vec(py, vals)))
    }

    fn stats_schema(&self) -> PyResult<Vec<SchemaRow>> {
        Ok(schema_rows(&self.cell.observer()?.stats))
    }

    /// One KVM_RUN (GIL released) with a deadline `timeout` seconds away; the
    /// exit is 'interrupted' when the deadline (or a kick, or a signal) ended it.
    /// `Vcpu.run`, the Python method, calls it after its checks.
    #[pyo3(name = "run_raw", signature = (timeout = 10.0))]
    fn run_raw(&self, py: Python<'_>, timeout: f64) -> PyResult<PyExit> {
        self.run_exit(py, timeout)
    }

    // The Python method `Vcpu.run` with its checks, which the wrapper binds
    // as an instance's `run` (vcpulab/kvm.py), so that a loop of one call per
    // exit runs none of vcpulab's Python: the fork check, `timeout_s` an
    // exact float or int in (0, 1 day] (anything else goes to
    // `kvm._timeout`, which accepts what the method accepts and raises what
    // it raises), and the deprecated `timeout=` through
    // `_checks.former_name`. Named `run` in Python, so an argument error
    // names `Vcpu.run()` as the method's does; its docstring is the method's
    // (help(vcpu.run)). A Python loop of one call per IO exit on this host's
    // emulated guests: about 5 % less CPU per exit than through the method.
    /// One ``KVM_RUN`` (GIL released). At the deadline (``timeout_s`` s) the
    /// vCPU is forced out and the exit's kind is ``'interrupted'``.
    /// ``timeout`` is the deprecated name of ``timeout_s`` (a
    /// DeprecationWarning).
    #[pyo3(
        name = "run",
        signature = (timeout_s = TimeoutArg::Absent, *, timeout = None),
        text_signature = "(self, /, timeout_s=10.0, *, timeout=None)"
    )]
    fn run_checked(
        &self,
        py: Python<'_>,
        timeout_s: TimeoutArg<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyExit> {
        if self.fork_gen != kick::fork_generation() {
            // ForkSafe's error, from the one place that words it
            let e = py.import("vcpulab._checks")?.getattr("forked_error")?.call1(("Vcpu",))?;
            return Err(PyErr::from_value(e));
        }
        let secs = match (&timeout_s, timeout) {
            (TimeoutArg::Given(v), None)
                if v.is_exact_instance_of::<PyFloat>() || v.is_exact_instance_of::<PyInt>() =>
            {
                v.extract::<f64>().unwrap_or(f64::NAN)
            }
            (TimeoutArg::Absent, None) => DEFAULT_RUN_TIMEOUT_S,
            _ => f64::NAN,
        };
        let secs = if secs > 0.0 && secs <= MAX_TIMEOUT_S {
            secs
        } else {
            // the rare paths keep the wrapper's Python checks and messages
            let dflt = PyFloat::new(py, DEFAULT_RUN_TIMEOUT_S).into_any();
            let mut v = match timeout_s {
                TimeoutArg::Given(v) => v,
                TimeoutArg::Absent => dflt.clone(),
            };
            if let Some(old) = timeout {
                let former = py.import("vcpulab._checks")?.getattr("former_name")?;
                let kw = PyDict::new(py);
                kw.set_item("stacklevel", 2)?; // the caller's line: no Python frame between
                v = former.call(("run", "timeout", "timeout_s", old, v, dflt), Some(&kw))?;
            }
            py.import("vcpulab.kvm")?.getattr("_timeout")?.call1((v,))?.extract::<f64>()?
        };
        self.run_exit(py, secs)
    }

    /// Runs until `count` exits of the given kinds (port-filtered for "io"), in
    /// Rust with the GIL released. Raises TimeoutError at the deadline; a
    /// Ctrl-C raises KeyboardInterrupt promptly; a kick() returns early with
    /// interrupted=True.
    #[pyo3(signature = (kinds, count = 1, port = None, timeout = 10.0))]
    fn run_until<'py>(
        &self,
        py: Python<'py>,
        kinds: Vec<String>,
        count: u64,
        port: Option<u16>,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let deadline = timeout_deadline(timeout)?;
        let (mut matches, mut exits) = (0u64, 0u64);
        loop {
            let want = RunUntil { kinds: kinds.clone(), port, count: count.saturating_sub(matches).max(1), deadline };
            let out = self.with(py, |v| v.run_until(&want));
            let out = match out {
                Err(e) if e.is_instance_of::<PyTimeoutError>(py) => return Err(e),
                r => r?,
            };
            matches += out.matches;
            exits += out.exits;
            let foreign_signal = out.interrupted && !out.kicked && !self.cell.closed.load(Ordering::SeqCst);
            if foreign_signal && matches < count {
                py.check_signals()?; // KeyboardInterrupt surfaces here
                continue;
            }
            let d = PyDict::new(py);
            d.set_item("exit", PyExit::new(py, &out.exit))?;
            d.set_item(
                "ucall",
                match out.ucall {
                    Some(Ucall::Sync(v)) => Some(("sync", v)),
                    Some(Ucall::Done) => Some(("done", 0)),
                    None => None,
                },
            )?;
            d.set_item("matches", matches)?;
            d.set_item("exits", exits)?;
            d.set_item("interrupted", out.interrupted)?;
            return Ok(d);
        }
    }

    /// Forces the vCPU out of KVM_RUN if some thread is running it. Returns
    /// whether a run was kicked.
    fn kick(&self) -> bool {
        self.cell.slot.kick()
    }
}

/// Host CPUs this process may run on.
#[pyfunction]
fn allowed_cpus() -> Vec<usize> {
    kvm::os::allowed_cpus()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(allowed_cpus, m)?)?;
    m.add_class::<PyHost>()?;
    m.add_class::<PyVm>()?;
    m.add_class::<PyVcpu>()?;
    m.add_class::<PyExit>()?;
    m.add("UCALL_PORT", crate::kvm::guest::program::UCALL_PORT)?;
    m.add("PV_SPIN_PORT", crate::kvm::guest::program::PV_SPIN_PORT)?;
    m.add("PV_HALT_PORT", crate::kvm::guest::program::PV_HALT_PORT)?;
    m.add("IRQ_COUNTS_ADDR", crate::kvm::guest::IRQ_COUNTS_ADDR)?;
    m.add("STEAL_AREA_ADDR", crate::kvm::guest::STEAL_AREA_ADDR)?;
    m.add("STEAL_OFF_PREEMPTED", crate::kvm::steal::OFF_PREEMPTED)?;
    m.add("STEAL_OFF_IS_IDLE", crate::kvm::steal::OFF_IS_IDLE)?;
    m.add("MAX_MEMORY_MIB", crate::kvm::vm::MAX_MEMORY_MIB)?;
    m.add("MAX_PROGRAM_ROUNDS", crate::kvm::guest::program::MAX_ROUNDS)?;
    m.add("MSR_KVM_STEAL_TIME", crate::kvm::steal::MSR_KVM_STEAL_TIME)?;
    // one source for the tables Python used to keep by hand
    m.add("GUEST_PROGRAMS", PROGRAMS.iter().map(|i| (i.name, i.params.to_vec(), i.doc)).collect::<Vec<_>>())?;
    m.add("EXIT_KINDS", crate::kvm::exit::EXIT_KINDS.to_vec())?;
    m.add("PV_FEATURE_BITS", crate::kvm::system::PV_FEATURES.to_vec())?;
    m.add("DISABLE_EXITS_BITS", crate::kvm::system::DISABLE_EXITS_BITS.to_vec())?;
    Ok(())
}

//! Bindings of `kvm::foreign` (the pidfd and the kept stats fds behind
//! `vcpulab.kvm.attach(pid)`) and `kvm::mounts` (the one way vcpulab mounts
//! debugfs / tracefs; `vcpulab._mounts` says what it mounted).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::kvm::foreign::{ForeignStats, Process, StatsOwner};
use crate::kvm::mounts::{self, PseudoFs};
use crate::kvm::stats::StatsSchema;
use crate::kvm::Error;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Another process, held by a pidfd: its exit, and its KVM stats fds
/// duplicated once each (`take_stats_fd`).
#[pyclass(module = "vcpulab._core", name = "ForeignProcess", frozen)]
pub struct PyForeignProcess {
    inner: Mutex<Option<Arc<Process>>>,
    #[pyo3(get)]
    pid: i32,
}

impl PyForeignProcess {
    fn process(&self, py: Python<'_>) -> PyResult<Arc<Process>> {
        Ok(py.detach(|| lock(&self.inner).clone().ok_or(Error::Closed("ForeignProcess")))?)
    }
}

#[pymethods]
impl PyForeignProcess {
    /// A pidfd for process `pid` (ProcessLookupError when there is none).
    #[new]
    fn new(py: Python<'_>, pid: i32) -> PyResult<Self> {
        let p = py.detach(|| Process::open(pid))?;
        Ok(Self { inner: Mutex::new(Some(Arc::new(p))), pid })
    }

    /// True once the process has exited (a zombie counts); waits up to
    /// `timeout_s` (0 to 86400 s) for it, in steps of at most 50 ms with the
    /// GIL released, so Ctrl-C raises KeyboardInterrupt within 50 ms.
    #[pyo3(signature = (timeout_s = 0.0))]
    fn wait_exited(&self, py: Python<'_>, timeout_s: f64) -> PyResult<bool> {
        if !(timeout_s.is_finite() && (0.0..=86_400.0).contains(&timeout_s)) {
            return Err(PyValueError::new_err(format!("timeout_s must be within 0 to 86400 s, got {timeout_s}")));
        }
        let p = self.process(py)?;
        let deadline = Instant::now() + Duration::from_secs_f64(timeout_s);
        loop {
            let step = deadline.saturating_duration_since(Instant::now()).min(Duration::from_millis(50));
            if py.detach(|| p.wait_exited(step))? {
                return Ok(true);
            }
            py.check_signals()?;
            if Instant::now() >= deadline {
                return Ok(false);
            }
        }
    }

    /// Duplicates the process's fd number `fd` once (pidfd_getfd) and keeps it,
    /// after checking that it is a KVM binary-stats fd (an
    /// anon_inode:kvm-vcpu-stats:N or anon_inode:kvm-vm-stats whose header has
    /// KVM's id). Anything else is closed unread: ValueError naming what it is.
    fn take_stats_fd(&self, py: Python<'_>, fd: i32) -> PyResult<PyForeignStats> {
        let p = self.process(py)?;
        let s = py.detach(|| p.take_stats_fd(fd))?;
        Ok(PyForeignStats {
            schema: s.stats.schema.clone(),
            target_fd: s.target_fd,
            vcpu: match s.owner {
                StatsOwner::Vcpu(n) => Some(n),
                StatsOwner::Vm => None,
            },
            inner: Mutex::new(Some(s)),
            process: p,
        })
    }

    /// Closes the pidfd (idempotent; stats fds taken keep working until closed).
    fn close(&self, py: Python<'_>) {
        py.detach(|| drop(lock(&self.inner).take()));
    }
}

/// A KVM stats fd of another process, duplicated once and kept open: every
/// `read()` is one pread of this file, never a new look at the process's fd
/// table. Closing it (or dropping it) releases the reference KVM keeps on the
/// process's VM for it.
#[pyclass(module = "vcpulab._core", name = "ForeignStats", frozen)]
pub struct PyForeignStats {
    inner: Mutex<Option<ForeignStats>>,
    process: Arc<Process>,
    schema: StatsSchema,
    /// The fd number the process held it under when it was duplicated.
    #[pyo3(get)]
    target_fd: i32,
    /// The vCPU id of a vCPU stats fd, None for a VM's.
    #[pyo3(get)]
    vcpu: Option<u32>,
}

#[pymethods]
impl PyForeignStats {
    /// KVM's id of the stats file ("kvm-<pid>/vcpu-<n>" or "kvm-<pid>").
    #[getter]
    fn id(&self) -> &str {
        &self.schema.id
    }

    /// True after `close()`.
    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        py.detach(|| lock(&self.inner).is_none())
    }

    /// The statistics now: {name: int or numpy array}, one pread of the kept fd.
    fn read<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let data = py.detach(|| -> crate::kvm::Result<Vec<u8>> {
            let g = lock(&self.inner);
            let s = g.as_ref().ok_or(Error::Closed("ForeignStats"))?;
            let mut data = Vec::new();
            s.stats.read_data(&mut data)?;
            Ok(data)
        })?;
        crate::py::kvm::stats_dict(py, &self.schema, &data)
    }

    /// Whether the process still holds this same open file under `target_fd`
    /// (kcmp; compares, reads nothing): False once it closed it, reused the
    /// number or exited; None where the kernel cannot tell (no kcmp). False
    /// after `close()`.
    fn held(&self, py: Python<'_>) -> Option<bool> {
        py.detach(|| lock(&self.inner).as_ref().map_or(Some(false), |s| s.held_by(&self.process)))
    }

    /// Closes the kept fd (idempotent; with the GIL released: the last
    /// reference on a VM frees it).
    fn close(&self, py: Python<'_>) {
        py.detach(|| drop(lock(&self.inner).take()));
    }
}

/// Mounts "debugfs" at /sys/kernel/debug or "tracefs" at /sys/kernel/tracing
/// (no other name, no other path) by mount(2) unless it is mounted there:
/// True when this call mounted it (it stays mounted). OSError when refused
/// (PermissionError: not root) or the mount point is missing.
#[pyfunction]
fn mount_pseudo_fs(py: Python<'_>, kind: &str) -> PyResult<bool> {
    let fs = PseudoFs::parse(kind)?;
    Ok(py.detach(|| mounts::ensure_mounted(fs))?)
}

/// [(name, path)] of the pseudo filesystems this process mounted (also those
/// mounted inside Rust, e.g. tracefs by a Tracer).
#[pyfunction]
fn mounted_pseudo_fs() -> Vec<(&'static str, &'static str)> {
    mounts::mounted_here().into_iter().map(|f| (f.name(), f.path())).collect()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyForeignProcess>()?;
    m.add_class::<PyForeignStats>()?;
    m.add_function(wrap_pyfunction!(mount_pseudo_fs, m)?)?;
    m.add_function(wrap_pyfunction!(mounted_pseudo_fs, m)?)?;
    Ok(())
}

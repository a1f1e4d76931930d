//! vcpulab's exception hierarchy and the one conversion from each core error
//! type (`kvm::Error`, `sim::SimError`) to a Python exception. Every binding
//! returns its core error through these (`?` or `PyErr::from`); none maps
//! an error by hand or passes an exception's class name as a string.

use pyo3::create_exception;
use pyo3::exceptions::{
    PyIndexError, PyKeyboardInterrupt, PyMemoryError, PyOSError, PyRuntimeError, PyTimeoutError, PyTypeError,
    PyValueError,
};
use pyo3::prelude::*;

use crate::kvm;
use crate::sim::SimError;

create_exception!(_core, VcpulabError, pyo3::exceptions::PyException, "Base class of vcpulab's own exceptions.");
create_exception!(
    _core,
    KvmUnavailableError,
    VcpulabError,
    "/dev/kvm is missing or cannot be opened; the message says why and how to fix it."
);
create_exception!(_core, KvmIoctlError, VcpulabError, "A KVM ioctl failed; the message names the ioctl and the errno.");
create_exception!(
    _core,
    GuestAssertionError,
    VcpulabError,
    "A guest program reported a failed assertion through the ucall port; the message names where it was written."
);
create_exception!(
    _core,
    UnexpectedExitError,
    VcpulabError,
    "The vCPU stopped in a way the caller did not ask for (a triple fault, a guest exception, a finished program…)."
);
create_exception!(
    _core,
    UnsupportedError,
    VcpulabError,
    "This host (or this VM's configuration) lacks a feature the operation needs."
);

create_exception!(
    _core,
    TraceUnavailableError,
    VcpulabError,
    "Kernel tracing cannot be used here (tracefs absent and not mountable, or a tracepoint missing)."
);

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("VcpulabError", py.get_type::<VcpulabError>())?;
    m.add("KvmUnavailableError", py.get_type::<KvmUnavailableError>())?;
    m.add("KvmIoctlError", py.get_type::<KvmIoctlError>())?;
    m.add("GuestAssertionError", py.get_type::<GuestAssertionError>())?;
    m.add("UnexpectedExitError", py.get_type::<UnexpectedExitError>())?;
    m.add("UnsupportedError", py.get_type::<UnsupportedError>())?;
    m.add("TraceUnavailableError", py.get_type::<TraceUnavailableError>())?;
    Ok(())
}

/// A Python policy's own exception `orig`, raised as its own type with
/// `msg` (the core error, which names the failing call) and `orig` as its
/// cause; a ValueError with `msg` where the type cannot be built from one
/// string. Both the simulator's and the real scheduler's bindings use it.
pub(crate) fn policy_error(py: Python<'_>, orig: PyErr, msg: String) -> PyErr {
    let new =
        orig.get_type(py).call1((msg.clone(),)).map(PyErr::from_value).unwrap_or_else(|_| PyValueError::new_err(msg));
    new.set_cause(py, Some(orig));
    new
}

impl From<&kvm::Error> for PyErr {
    fn from(e: &kvm::Error) -> PyErr {
        let msg = e.to_string();
        match e {
            kvm::Error::Unavailable { .. } => KvmUnavailableError::new_err(msg),
            kvm::Error::Ioctl { .. } => KvmIoctlError::new_err(msg),
            // OSError(errno, msg) becomes its subclass (ProcessLookupError, PermissionError, …)
            kvm::Error::Os { source, .. } => match source.raw_os_error() {
                Some(errno) => PyOSError::new_err((errno, msg)),
                None => PyOSError::new_err(msg),
            },
            kvm::Error::InvalidArgument(_) | kvm::Error::Assembler(_) | kvm::Error::Closed(_) => {
                PyValueError::new_err(msg)
            }
            kvm::Error::OutOfRange(_) => PyIndexError::new_err(msg),
            kvm::Error::WrongType(_) => PyTypeError::new_err(msg),
            kvm::Error::Timeout(_) => PyTimeoutError::new_err(msg),
            kvm::Error::GuestAssertion { .. } => GuestAssertionError::new_err(msg),
            kvm::Error::UnexpectedExit(_) => UnexpectedExitError::new_err(msg),
            kvm::Error::Unsupported(_) => UnsupportedError::new_err(msg),
            kvm::Error::TraceUnavailable(_) => TraceUnavailableError::new_err(msg),
            kvm::Error::Policy(_) => PyValueError::new_err(msg),
        }
    }
}

impl From<kvm::Error> for PyErr {
    fn from(e: kvm::Error) -> PyErr {
        PyErr::from(&e)
    }
}

/// The simulators' errors (the main engine's and the halt-polling model's).
/// A policy's own Python exception, where there is one, is raised instead by
/// the binding that kept it (`src/py/sim.rs`).
impl From<SimError> for PyErr {
    fn from(e: SimError) -> PyErr {
        match e {
            SimError::Config(m) | SimError::Policy(m) | SimError::TraceLimit(m) => PyValueError::new_err(m),
            e @ SimError::NoProgress(_) => PyValueError::new_err(e.to_string()),
            SimError::Interrupted => PyKeyboardInterrupt::new_err("simulation interrupted"),
            SimError::OutOfMemory(m) => PyMemoryError::new_err(m),
            SimError::Bug(m) => PyRuntimeError::new_err(format!("{BUG}: {m}")),
        }
    }
}

/// The wording of every internal error (Python's `vcpulab._checks._BUG`).
const BUG: &str = "internal error in vcpulab (a bug in vcpulab, not in your input: please report it with this message)";

/// A Rust panic caught at the binding layer, as the RuntimeError Python's
/// `vcpulab._checks.guard_panics` raises for one (same wording).
pub fn bug(payload: &(dyn std::any::Any + Send)) -> PyErr {
    PyRuntimeError::new_err(format!("{BUG}: {}", crate::sim::panic_message(payload)))
}

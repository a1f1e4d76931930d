//! vcpulab's exception hierarchy and the one conversion from core errors.

use pyo3::create_exception;
use pyo3::exceptions::{PyIndexError, PyOSError, PyRuntimeError, PyTimeoutError, PyValueError};
use pyo3::prelude::*;

use crate::kvm;

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

impl From<kvm::Error> for PyErr {
    fn from(e: kvm::Error) -> PyErr {
        let msg = e.to_string();
        match e {
            kvm::Error::Unavailable { .. } => KvmUnavailableError::new_err(msg),
            kvm::Error::Ioctl { .. } => KvmIoctlError::new_err(msg),
            // OSError(errno, msg) becomes its subclass (ProcessLookupError, PermissionError, …)
            kvm::Error::Os { source, .. } => match source.raw_os_error() {
                Some(errno) => PyOSError::new_err((errno, msg)),
                None => PyOSError::new_err(msg),
            },
            kvm::Error::InvalidArgument(_) | kvm::Error::Closed(_) => PyValueError::new_err(msg),
            kvm::Error::OutOfRange(_) => PyIndexError::new_err(msg),
            kvm::Error::Timeout(_) => PyTimeoutError::new_err(msg),
            kvm::Error::GuestAssertion { .. } => GuestAssertionError::new_err(msg),
            kvm::Error::UnexpectedExit(_) => UnexpectedExitError::new_err(msg),
            kvm::Error::Unsupported(_) => UnsupportedError::new_err(msg),
            kvm::Error::TraceUnavailable(_) => TraceUnavailableError::new_err(msg),
            kvm::Error::Policy(_) => PyValueError::new_err(msg),
        }
    }
}

/// A Rust panic caught at the binding layer, as the RuntimeError Python's
/// `vcpulab._checks.guard_panics` raises for one (same wording).
pub fn bug(payload: &(dyn std::any::Any + Send)) -> PyErr {
    PyRuntimeError::new_err(format!(
        "internal error in vcpulab (a bug in vcpulab, not in your input: please report it with this message): {}",
        crate::sim::panic_message(payload)
    ))
}

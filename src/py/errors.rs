//! vcpulab's exception hierarchy and the one conversion from core errors.

use pyo3::create_exception;
use pyo3::prelude::*;

create_exception!(
    _core,
    VcpulabError,
    pyo3::exceptions::PyException,
    "Base class of vcpulab's own exceptions."
);
create_exception!(
    _core,
    KvmUnavailableError,
    VcpulabError,
    "/dev/kvm is missing or cannot be opened; the message says why and how to fix it."
);
create_exception!(
    _core,
    KvmIoctlError,
    VcpulabError,
    "A KVM ioctl failed; `.args[0]` names the ioctl and the errno."
);
create_exception!(
    _core,
    GuestAssertionError,
    VcpulabError,
    "A guest program reported a failed assertion through the ucall port."
);

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("VcpulabError", py.get_type::<VcpulabError>())?;
    m.add("KvmUnavailableError", py.get_type::<KvmUnavailableError>())?;
    m.add("KvmIoctlError", py.get_type::<KvmIoctlError>())?;
    m.add("GuestAssertionError", py.get_type::<GuestAssertionError>())?;
    Ok(())
}

//! `vcpulab.kvm.Exit`: one decoded vCPU exit, built in Rust.
//!
//! The per-exit Python path (`Vcpu.run()` in a Python loop) creates one of
//! these per KVM_RUN, so it is a frozen pyclass filled straight from
//! [`crate::kvm::Exit`]: no dict, no Python-level constructor, interned kind
//! strings. Fields that are not meaningful for a kind are `None`.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

use crate::kvm::{Exit, IoDir};

/// One decoded vCPU exit.
///
/// ``kind`` is one of: io, mmio, hlt, shutdown, internal_error, fail_entry,
/// interrupted, system_event, debug, other. Fields not meaningful for a kind
/// are ``None``. Exits compare equal when every field is equal, and hash.
#[pyclass(module = "vcpulab._core", name = "Exit", frozen, get_all)]
pub struct PyExit {
    /// The exit kind (one of ``vcpulab.kvm.EXIT_KINDS``).
    kind: Py<PyString>,
    /// IO: the port.
    port: Option<u16>,
    /// IO: the access size in bytes (1, 2 or 4).
    size: Option<u8>,
    /// IO: accesses of a string IO (``rep ins``/``rep outs``); 1 for a plain in/out.
    count: Option<u32>,
    /// IO: ``"in"`` or ``"out"``.
    direction: Option<Py<PyString>>,
    /// IO and MMIO: the first (up to 8) bytes moved, little-endian.
    data: Option<u64>,
    /// IO and MMIO: every byte moved.
    data_bytes: Option<Py<PyBytes>>,
    /// MMIO: the guest-physical address.
    address: Option<u64>,
    /// MMIO: the access length in bytes.
    length: Option<u8>,
    /// MMIO: whether the guest wrote.
    is_write: Option<bool>,
    /// internal_error: KVM's suberror (1 = emulation failure, …).
    suberror: Option<u32>,
    /// internal_error: KVM's extra data words.
    internal_data: Option<Vec<u64>>,
    /// fail_entry: the hardware entry-failure reason; other: KVM's exit reason number.
    reason: Option<u64>,
    /// fail_entry: the host CPU.
    cpu: Option<u32>,
    /// other: KVM's name for the exit reason.
    name: Option<&'static str>,
    /// system_event: the event type.
    event_type: Option<u32>,
    /// system_event: the event's data words.
    event_data: Option<Vec<u64>>,
}

/// Field names in declaration order (repr, str, equality).
const FIELDS: [&str; 17] = [
    "kind",
    "port",
    "size",
    "count",
    "direction",
    "data",
    "data_bytes",
    "address",
    "length",
    "is_write",
    "suberror",
    "internal_data",
    "reason",
    "cpu",
    "name",
    "event_type",
    "event_data",
];

impl PyExit {
    /// The Python object for a core exit.
    pub fn new(py: Python<'_>, e: &Exit) -> PyExit {
        let kind = match e {
            Exit::Io { .. } => intern!(py, "io").clone().unbind(),
            Exit::Mmio { .. } => intern!(py, "mmio").clone().unbind(),
            Exit::Hlt => intern!(py, "hlt").clone().unbind(),
            Exit::Interrupted => intern!(py, "interrupted").clone().unbind(),
            other => PyString::intern(py, other.kind()).unbind(),
        };
        let mut x = PyExit {
            kind,
            port: None,
            size: None,
            count: None,
            direction: None,
            data: None,
            data_bytes: None,
            address: None,
            length: None,
            is_write: None,
            suberror: None,
            internal_data: None,
            reason: None,
            cpu: None,
            name: None,
            event_type: None,
            event_data: None,
        };
        match e {
            Exit::Io { port, size, count, dir, data } => {
                x.port = Some(*port);
                x.size = Some(*size);
                x.count = Some(*count);
                let d = if *dir == IoDir::In { intern!(py, "in") } else { intern!(py, "out") };
                x.direction = Some(d.clone().unbind());
                x.data = Some(e.data_value());
                x.data_bytes = Some(PyBytes::new(py, data).unbind());
            }
            Exit::Mmio { addr, len, is_write, data } => {
                x.address = Some(*addr);
                x.length = Some(*len);
                x.is_write = Some(*is_write);
                x.data = Some(e.data_value());
                x.data_bytes = Some(PyBytes::new(py, data).unbind());
            }
            Exit::InternalError { suberror, data } => {
                x.suberror = Some(*suberror);
                x.internal_data = Some(data.clone());
            }
            Exit::FailEntry { reason, cpu } => {
                x.reason = Some(*reason);
                x.cpu = Some(*cpu);
            }
            Exit::SystemEvent { kind, data } => {
                x.event_type = Some(*kind);
                x.event_data = Some(data.clone());
            }
            Exit::Other { reason, name } => {
                x.reason = Some(u64::from(*reason));
                x.name = Some(name);
            }
            Exit::Hlt | Exit::Shutdown | Exit::Interrupted | Exit::Debug => {}
        }
        x
    }

    /// Every field as a Python value, in [`FIELDS`] order.
    fn values<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        Ok(vec![
            self.kind.bind(py).clone().into_any(),
            self.port.into_pyobject(py)?.into_any(),
            self.size.into_pyobject(py)?.into_any(),
            self.count.into_pyobject(py)?.into_any(),
            self.direction.as_ref().map(|d| d.bind(py).clone()).into_pyobject(py)?.into_any(),
            self.data.into_pyobject(py)?.into_any(),
            self.data_bytes.as_ref().map(|d| d.bind(py).clone()).into_pyobject(py)?.into_any(),
            self.address.into_pyobject(py)?.into_any(),
            self.length.into_pyobject(py)?.into_any(),
            self.is_write.into_pyobject(py)?.to_owned().into_any(),
            self.suberror.into_pyobject(py)?.into_any(),
            self.internal_data.clone().into_pyobject(py)?.into_any(),
            self.reason.into_pyobject(py)?.into_any(),
            self.cpu.into_pyobject(py)?.into_any(),
            self.name.into_pyobject(py)?.into_any(),
            self.event_type.into_pyobject(py)?.into_any(),
            self.event_data.clone().into_pyobject(py)?.into_any(),
        ])
    }

    fn key<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let vals = self.values(py)?;
        // lists are unhashable: compare and hash their tuples
        let vals = vals
            .into_iter()
            .map(|v| match v.cast::<pyo3::types::PyList>() {
                Ok(l) => Ok(l.to_tuple().into_any()),
                Err(_) => Ok(v),
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyTuple::new(py, vals)
    }
}

#[pymethods]
impl PyExit {
    /// ``Exit(kind='io', port=128, …)``: the fields that are set.
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let mut parts = Vec::new();
        for (name, v) in FIELDS.iter().zip(self.values(py)?) {
            if !v.is_none() {
                parts.push(format!("{name}={}", v.repr()?));
            }
        }
        Ok(format!("Exit({})", parts.join(", ")))
    }

    /// ``io port=0x80 size=0x1 …``: the kind, then the set fields (ints in hex).
    fn __str__(&self, py: Python<'_>) -> PyResult<String> {
        let mut parts = vec![self.kind.bind(py).to_string()];
        for (name, v) in FIELDS.iter().zip(self.values(py)?).skip(1) {
            if v.is_none() || *name == "data_bytes" {
                continue;
            }
            let shown = match v.extract::<u64>() {
                Ok(n) if !v.is_instance_of::<pyo3::types::PyBool>() => format!("{n:#x}"),
                _ => v.str()?.to_string(),
            };
            parts.push(format!("{name}={shown}"));
        }
        Ok(parts.join(" "))
    }

    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        match other.cast::<PyExit>() {
            Ok(o) => Ok(self.key(py)?.eq(o.get().key(py)?)?.into_pyobject(py)?.to_owned().into_any().unbind()),
            Err(_) => Ok(py.NotImplemented()),
        }
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        self.key(py)?.hash()
    }

    /// Every field as a dict (``None`` for fields the kind does not set).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let d = pyo3::types::PyDict::new(py);
        for (name, v) in FIELDS.iter().zip(self.values(py)?) {
            d.set_item(name, v)?;
        }
        Ok(d)
    }

    /// Field names, in order (like a dataclass's).
    #[classattr]
    fn __match_args__() -> (&'static str,) {
        ("kind",)
    }
}

//! The pyo3 binding layer: the only place that knows about Python.
//!
//! Each submodule wraps one core area with thin `#[pyclass]`es; the Pythonic API
//! (units, defaults, docs, polars frames) lives in `python/vcpulab/`.

use pyo3::prelude::*;

mod attach;
mod errors;
mod exit;
mod experiment;
mod halt_poll;
mod interrupt;
mod kvm;
mod sim;
mod trace;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // the git commit this extension was built from (build.rs), or "unknown"
    m.add("__build__", env!("VCPULAB_BUILD_ID"))?;
    // Load numpy's C API now: loading it later, while a KeyboardInterrupt is
    // pending, fails inside rust-numpy (a PanicException instead of the interrupt).
    let _ = numpy::PyArray1::<u64>::zeros(m.py(), 0, false);
    errors::register(m)?;
    kvm::register(m)?;
    experiment::register(m)?;
    sim::register(m)?;
    halt_poll::register(m)?;
    trace::register(m)?;
    attach::register(m)?;
    Ok(())
}

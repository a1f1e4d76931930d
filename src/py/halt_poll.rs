//! Bindings for the halt-polling model (`crate::sim::halt_poll`): JSON
//! scenarios in, plain columns out. The Pythonic API is
//! `python/vcpulab/sim/halt_poll.py`. Runs release the GIL; a panic inside the
//! model becomes a `RuntimeError` naming it as a bug, never an abort.

use std::panic::{catch_unwind, AssertUnwindSafe};

use numpy::IntoPyArray;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rayon::prelude::*;

use super::interrupt::{run_polled, Interrupt};
use crate::sim::halt_poll::{self, HaltPollConfig, HaltPollState, Policy, Scenario, ScenarioResult};
use crate::sim::SimError;

fn run_one(json: &str, interrupted: &dyn Fn() -> bool) -> Result<ScenarioResult, SimError> {
    let sc: Scenario =
        serde_json::from_str(json).map_err(|e| SimError::Config(format!("invalid halt-poll scenario: {e}")))?;
    catch_unwind(AssertUnwindSafe(|| halt_poll::simulate_checked(&sc, interrupted)))
        .unwrap_or_else(|p| Err(SimError::Bug(crate::sim::panic_message(p.as_ref()))))
}

fn to_dict<'py>(py: Python<'py>, r: ScenarioResult) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    let vc = PyDict::new(py);
    macro_rules! col {
        ($name:literal, $f:expr) => {
            vc.set_item($name, r.vcpus.iter().map($f).collect::<Vec<_>>().into_pyarray(py))?;
        };
    }
    col!("halt_exits", |v| v.stats.halt_exits);
    col!("halt_successful_poll", |v| v.stats.halt_successful_poll);
    col!("halt_attempted_poll", |v| v.stats.halt_attempted_poll);
    col!("halt_poll_invalid", |v| v.stats.halt_poll_invalid);
    col!("halt_wakeup", |v| v.stats.halt_wakeup);
    col!("halt_poll_success_ns", |v| v.stats.halt_poll_success_ns);
    col!("halt_poll_fail_ns", |v| v.stats.halt_poll_fail_ns);
    col!("halt_wait_ns", |v| v.stats.halt_wait_ns);
    col!("grows", |v| v.stats.grows);
    col!("shrinks", |v| v.stats.shrinks);
    col!("poll_cpu_ns", |v| v.poll_cpu_ns);
    col!("busy_ns", |v| v.busy_ns);
    col!("final_halt_poll_ns", |v| v.final_halt_poll_ns);
    col!("mean_window_ns", |v| v.mean_window_ns);
    col!("rounds", |v| v.rounds);
    out.set_item("vcpus", vc)?;
    let lat: Vec<_> = r.vcpus.iter().map(|v| v.wake_latency_ns.clone().into_pyarray(py)).collect();
    let rtt: Vec<_> = r.vcpus.iter().map(|v| v.rtt_ns.clone().into_pyarray(py)).collect();
    out.set_item("wake_latency_ns", lat)?;
    out.set_item("rtt_ns", rtt)?;
    out.set_item("end_ns", r.end_ns)?;
    out.set_item("background_ns", r.background_ns)?;
    if let Some(t) = r.trace {
        let tr = PyDict::new(py);
        tr.set_item("vcpu", t.vcpu.into_pyarray(py))?;
        tr.set_item("start_ns", t.start_ns.into_pyarray(py))?;
        tr.set_item("window_ns", t.window_ns.into_pyarray(py))?;
        tr.set_item("poll_ns", t.poll_ns.into_pyarray(py))?;
        tr.set_item("halt_ns", t.halt_ns.into_pyarray(py))?;
        tr.set_item("waited", t.waited.into_pyarray(py))?;
        out.set_item("trace", tr)?;
    }
    Ok(out)
}

/// Runs one halt-poll scenario (JSON of `sim::halt_poll::Scenario`) with the
/// GIL released. Returns {"vcpus": {stat: array}, "wake_latency_ns": [array],
/// "rtt_ns": [array], "end_ns", "background_ns", "trace"?}. Bad input →
/// ValueError naming the field.
#[pyfunction]
fn halt_poll_simulate<'py>(py: Python<'py>, scenario_json: &str) -> PyResult<Bound<'py, PyDict>> {
    let interrupt = Interrupt::flag_only();
    let r = run_polled(py, &interrupt, || run_one(scenario_json, &|| interrupt.check())).map_err(SimError::Bug)?;
    if let Some(e) = interrupt.take() {
        return Err(e);
    }
    to_dict(py, r?)
}

/// Runs many scenarios in parallel (rayon, GIL released); results in order.
/// Ctrl-C stops every scenario within ~50 ms, starts no other, and raises KeyboardInterrupt.
#[pyfunction]
fn halt_poll_simulate_many<'py>(py: Python<'py>, scenarios_json: Vec<String>) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let interrupt = Interrupt::flag_only();
    let rs: Vec<Result<ScenarioResult, SimError>> = run_polled(py, &interrupt, || {
        scenarios_json
            .par_iter()
            // a scenario not started when Ctrl-C came is not started
            .map(|s| if interrupt.check() { Err(SimError::Interrupted) } else { run_one(s, &|| interrupt.check()) })
            .collect()
    })
    .map_err(SimError::Bug)?;
    if let Some(e) = interrupt.take() {
        return Err(e);
    }
    rs.into_iter().map(|r| to_dict(py, r?)).collect()
}

/// The window sequence of one vCPU under `policy` for a list of halts, each
/// given as (length of the whole halt ns, woken while polling?); a direct
/// check of grow/shrink. Returns the window each halt started with.
#[pyfunction]
fn halt_poll_windows(config_json: &str, halts: Vec<(u64, bool)>) -> PyResult<Vec<u64>> {
    let cfg: HaltPollConfig = serde_json::from_str(config_json)
        .map_err(|e| PyValueError::new_err(format!("invalid halt-poll config: {e}")))?;
    cfg.validate().map_err(PyValueError::new_err)?;
    let r = catch_unwind(AssertUnwindSafe(|| {
        let mut s = HaltPollState::new(&cfg);
        let mut t = 0u64;
        let mut out = Vec::with_capacity(halts.len());
        for (len, caught) in halts {
            s.on_halt_exit();
            let stop = s.on_halt(&cfg, t);
            let rec = match stop {
                Some(stop) if caught && t.saturating_add(len) <= stop => s.on_halt_end(&cfg, t + len, false, true),
                Some(stop) => {
                    s.on_poll_stop(stop.min(t.saturating_add(len)));
                    s.on_wakeup();
                    s.on_halt_end(&cfg, t.saturating_add(len), true, true)
                }
                None => {
                    s.on_wakeup();
                    s.on_halt_end(&cfg, t.saturating_add(len), true, true)
                }
            };
            out.push(rec.map_or(0, |r| r.window_ns));
            t = t.saturating_add(len).saturating_add(1000);
        }
        out
    }));
    r.map_err(|p| PyErr::from(SimError::Bug(crate::sim::panic_message(p.as_ref()))))
}

/// The policy names the model accepts.
#[pyfunction]
fn halt_poll_policies() -> Vec<&'static str> {
    [Policy::Off, Policy::Fixed, Policy::DynamicV4, Policy::BlockTime].iter().map(|p| p.name()).collect()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(halt_poll_simulate, m)?)?;
    m.add_function(wrap_pyfunction!(halt_poll_simulate_many, m)?)?;
    m.add_function(wrap_pyfunction!(halt_poll_windows, m)?)?;
    m.add_function(wrap_pyfunction!(halt_poll_policies, m)?)?;
    Ok(())
}

#![forbid(unsafe_code)]
//! The deterministic overcommit simulator (no `unsafe`, no Python bindings).
//!
//! Layers, bottom up:
//! * [`config`]: the plain-data configuration (JSON via serde) and its validation;
//! * `state`, `queue`, `hist`: the world's plain data, the event queue in
//!   integer ns, the latency histogram;
//! * `build`, `engine`: the world built from a config; the event loop and accounting;
//! * `sched` (with `cfs`, `cfs_group`, `balance`): the EEVDF-like host scheduler, `yield_to`, gang scheduling;
//! * `vcpu`: KVM's side of a vCPU (sched in/out, exits, halt and halt polling);
//! * `guest`: the guest kernel (threads and phases, locks, IPIs, placement, balancing);
//! * [`ple`]: pause-loop exits and the `kvm_vcpu_on_spin` context;
//! * [`policy`]: directed-yield policies (built-in, and the trait for external ones);
//! * [`metrics`], [`trace`]: results as column tables;
//! * [`sweep`]: many runs in parallel (rayon).
//!
//! Entry points: [`run`] / [`run_with`] and [`sweep::sweep`]. Every entry point
//! validates its input and turns a panic into [`SimError::Bug`].

mod balance;
mod build;
mod cfs;
mod cfs_group;
pub mod config;
pub mod decisions;
mod eevdf_group;
mod engine;
mod guest;
pub mod halt_poll;
mod hist;
pub mod metrics;
pub mod ple;
pub mod policy;
mod queue;
mod sched;
mod schema_walk;
mod speed;
mod state;
pub mod sweep;
pub mod table;
mod tokens;
pub mod trace;
mod vcpu;

use std::panic::{catch_unwind, AssertUnwindSafe};

pub use config::SimConfig;
pub use metrics::SimResult;
pub use policy::{DirectedYieldPolicy, SpinCtx, VcpuView, ESRCH};
pub use table::{Column, Table};

/// Builds the directed-yield policy of VM group `group` (an external one,
/// such as a Python callable; built-ins never reach it).
pub type PolicyMaker<'a> = &'a dyn Fn(usize, &config::VmConfig) -> Result<Box<dyn DirectedYieldPolicy>, String>;

/// Why a run failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// The configuration is invalid; the message names the field.
    #[error("{0}")]
    Config(String),
    /// A directed-yield policy failed (e.g. a Python policy raised).
    #[error("directed-yield policy failed: {0}")]
    Policy(String),
    /// The model stopped advancing (e.g. a cycle of phases that takes no time).
    #[error("the simulation makes no progress ({0}); check the workload")]
    NoProgress(String),
    /// The caller's interrupt check fired (e.g. Ctrl-C in Python).
    #[error("interrupted")]
    Interrupted,
    /// The trace grew past the caller's `trace_max_rows`; the message names it.
    #[error("{0}")]
    TraceLimit(String),
    /// A growing buffer (the trace) could not get memory.
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    /// A panic inside the simulator: a bug in vcpulab.
    #[error("internal error in the simulator (a bug in vcpulab, please report it): {0}")]
    Bug(String),
}

/// Run with built-in policies only.
pub fn run(cfg: &SimConfig) -> Result<SimResult, SimError> {
    run_with(cfg, &|_, vm| {
        policy::builtin(&vm.policy)
            .ok_or_else(|| format!("policy '{}' is a Python policy; pass its callable", vm.policy.name))
    })
}

/// Run, building each VM group's policy with `make(group_index, vm_config)`
/// (used for external policies; built-ins come from [`policy::builtin`]).
pub fn run_with(cfg: &SimConfig, make: PolicyMaker<'_>) -> Result<SimResult, SimError> {
    run_checked(cfg, make, &|| false)
}

/// [`run_with`], polling `interrupted()` every 10 ms of wall time ([`engine::POLL_INTERVAL`]); when it returns
/// true the run stops with [`SimError::Interrupted`].
pub fn run_checked(
    cfg: &SimConfig,
    make: PolicyMaker<'_>,
    interrupted: &dyn Fn() -> bool,
) -> Result<SimResult, SimError> {
    run_limited(cfg, make, interrupted, u64::MAX)
}

/// [`run_checked`] keeping at most `trace_max_rows` trace rows: a run whose
/// trace would grow past it (or could not get the memory to grow) stops with
/// [`SimError::TraceLimit`] / [`SimError::OutOfMemory`] instead of exhausting
/// memory. The limit does not change any result of a run that stays below it.
pub fn run_limited(
    cfg: &SimConfig,
    make: PolicyMaker<'_>,
    interrupted: &dyn Fn() -> bool,
    trace_max_rows: u64,
) -> Result<SimResult, SimError> {
    cfg.validate().map_err(SimError::Config)?;
    let out = catch_unwind(AssertUnwindSafe(|| {
        let maker = |g: usize, vm: &config::VmConfig| match policy::builtin(&vm.policy) {
            Some(p) => Ok(p),
            None => make(g, vm),
        };
        let mut sim = engine::Sim::new(cfg, &maker).map_err(SimError::Policy)?;
        sim.trace_max_rows = trace_max_rows;
        sim.run(interrupted)?;
        metrics::collect(&mut sim)
    }));
    match out {
        Ok(r) => r,
        Err(p) => Err(SimError::Bug(panic_message(p.as_ref()))),
    }
}

/// The message of a caught panic (`catch_unwind` payload), for error reports.
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

#[cfg(test)]
mod test_util;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod twin_tests;

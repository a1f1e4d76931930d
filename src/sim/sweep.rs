//! Running many configurations in parallel (rayon), deterministically: each
//! point is an independent run with its own RNG, so the results do not depend
//! on the number of threads or the order of completion.

use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;

use super::config::{SimConfig, VmConfig};
use super::metrics::SimResult;
use super::policy::DirectedYieldPolicy;
use super::SimError;

/// Builds the policy of VM group `group` of sweep point `point`.
pub type SweepPolicyMaker<'a> =
    &'a (dyn Fn(usize, usize, &VmConfig) -> Result<Box<dyn DirectedYieldPolicy>, String> + Sync);

/// Run every configuration on a pool of `threads` workers (0 = rayon's
/// default); `progress(done)` is called after each point completes.
pub fn sweep(
    configs: &[SimConfig],
    threads: usize,
    make: SweepPolicyMaker<'_>,
    progress: &(dyn Fn(usize) + Sync),
) -> Vec<Result<SimResult, SimError>> {
    sweep_checked(configs, threads, make, progress, &|| false)
}

/// [`sweep`] with an interrupt check polled by every run (see [`super::run_checked`]).
pub fn sweep_checked(
    configs: &[SimConfig],
    threads: usize,
    make: SweepPolicyMaker<'_>,
    progress: &(dyn Fn(usize) + Sync),
    interrupted: &(dyn Fn() -> bool + Sync),
) -> Vec<Result<SimResult, SimError>> {
    sweep_limited(configs, threads, make, progress, interrupted, u64::MAX)
}

/// [`sweep_checked`] with each run's trace limited to `trace_max_rows` rows
/// (see [`super::run_limited`]).
///
/// Once `interrupted()` has returned true, a point that has not started is not
/// started: it comes back as [`SimError::Interrupted`] at once, so a sweep of
/// many short points stops as promptly as one long run (a run polls
/// `interrupted()` only every 10 ms of its own work).
pub fn sweep_limited(
    configs: &[SimConfig],
    threads: usize,
    make: SweepPolicyMaker<'_>,
    progress: &(dyn Fn(usize) + Sync),
    interrupted: &(dyn Fn() -> bool + Sync),
    trace_max_rows: u64,
) -> Vec<Result<SimResult, SimError>> {
    let done = AtomicUsize::new(0);
    let body = || {
        configs
            .par_iter()
            .enumerate()
            .map(|(i, c)| {
                if interrupted() {
                    return Err(SimError::Interrupted);
                }
                let r = super::run_limited(c, &|g, vm| make(i, g, vm), interrupted, trace_max_rows);
                let d = done.fetch_add(1, Ordering::SeqCst) + 1;
                progress(d);
                r
            })
            .collect::<Vec<_>>()
    };
    match rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
        Ok(pool) => pool.install(body),
        Err(_) => body(),
    }
}
